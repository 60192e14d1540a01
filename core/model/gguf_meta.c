/* GGUF metadata lookups, typed getters and value copies. */
#include "model/gguf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

const ql_gguf_kv *ql_gguf_find_kv(const ql_gguf *g, const char *key)
{
    for (int64_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0)
            return &g->kv[i];
    return NULL;
}

int64_t ql_gguf_tensor_index(const ql_gguf *g, const char *name)
{
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0)
            return i;
    return -1;
}

const ql_gguf_tensor *ql_gguf_find_tensor(const ql_gguf *g, const char *name)
{
    int64_t i = ql_gguf_tensor_index(g, name);
    return i < 0 ? NULL : &g->tensors[i];
}

int64_t ql_gguf_tensor_nelements(const ql_gguf_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < QL_GGUF_MAX_DIMS; d++)
        n *= t->ne[d];
    return n;
}

uint32_t ql_gguf_tensor_shape(const ql_gguf_tensor *t, int64_t out[QL_GGUF_MAX_DIMS])
{
    for (uint32_t d = 0; d < t->n_dims; d++)
        out[d] = t->ne[t->n_dims - 1 - d];
    return t->n_dims;
}

/* Reads any integer-typed value as a signed 128-bit-safe pair (negative flag + magnitude). */
static bool int_value(const ql_gguf_value *v, bool *neg, uint64_t *mag)
{
    *neg = false;
    switch (v->type) {
    case QL_GGUF_UINT8:
        *mag = v->v.u8;
        return true;
    case QL_GGUF_UINT16:
        *mag = v->v.u16;
        return true;
    case QL_GGUF_UINT32:
        *mag = v->v.u32;
        return true;
    case QL_GGUF_UINT64:
        *mag = v->v.u64;
        return true;
    case QL_GGUF_INT8:
        *neg = v->v.i8 < 0;
        *mag = (uint64_t)(*neg ? -(int64_t)v->v.i8 : v->v.i8);
        return true;
    case QL_GGUF_INT16:
        *neg = v->v.i16 < 0;
        *mag = (uint64_t)(*neg ? -(int64_t)v->v.i16 : v->v.i16);
        return true;
    case QL_GGUF_INT32:
        *neg = v->v.i32 < 0;
        *mag = (uint64_t)(*neg ? -(int64_t)v->v.i32 : v->v.i32);
        return true;
    case QL_GGUF_INT64:
        *neg = v->v.i64 < 0;
        *mag = *neg ? (uint64_t)(-(v->v.i64 + 1)) + 1u : (uint64_t)v->v.i64;
        return true;
    default:
        return false;
    }
}

static bool type_mismatch(const ql_gguf *g, const ql_gguf_kv *kv, const char *expected,
                          ql_error *err)
{
    ql_error_set(err, QL_EFORMAT, "%s: key '%s' has type %s, expected %s", g->path, kv->key,
                 ql_gguf_vtype_name(kv->value.type), expected);
    return false;
}

/* The integer value of key as sign and magnitude; false when the key is missing
 * or (err set) not an integer. */
static bool get_int(const ql_gguf *g, const char *key, bool *neg, uint64_t *mag, ql_error *err)
{
    const ql_gguf_kv *kv = ql_gguf_find_kv(g, key);
    if (!kv)
        return false;
    if (!int_value(&kv->value, neg, mag))
        return type_mismatch(g, kv, "an integer", err);
    return true;
}

/* The entry of key when its value has type t; NULL when the key is missing or (err
 * set, naming the type expected) has another type. */
static const ql_gguf_kv *get_typed(const ql_gguf *g, const char *key, ql_gguf_vtype t,
                                   const char *expected, ql_error *err)
{
    const ql_gguf_kv *kv = ql_gguf_find_kv(g, key);
    if (kv && kv->value.type != t) {
        type_mismatch(g, kv, expected, err);
        return NULL;
    }
    return kv;
}

bool ql_gguf_get_u32(const ql_gguf *g, const char *key, uint32_t *out, ql_error *err)
{
    bool neg;
    uint64_t mag;
    if (!get_int(g, key, &neg, &mag, err))
        return false;
    if (neg || mag > UINT32_MAX) {
        ql_error_set(err, QL_EFORMAT, "%s: key '%s' = %s%llu is out of range for u32", g->path, key,
                     neg ? "-" : "", (unsigned long long)mag);
        return false;
    }
    *out = (uint32_t)mag;
    return true;
}

bool ql_gguf_get_i64(const ql_gguf *g, const char *key, int64_t *out, ql_error *err)
{
    bool neg;
    uint64_t mag;
    if (!get_int(g, key, &neg, &mag, err))
        return false;
    if ((!neg && mag > (uint64_t)INT64_MAX) || (neg && mag > (uint64_t)INT64_MAX + 1u)) {
        ql_error_set(err, QL_EFORMAT, "%s: key '%s' is out of range for i64", g->path, key);
        return false;
    }
    /* -(mag - 1) - 1 stays in range for mag = 2^63, where -(int64_t)mag would not. */
    *out = neg ? -(int64_t)(mag - 1u) - 1 : (int64_t)mag;
    return true;
}

bool ql_gguf_get_f32(const ql_gguf *g, const char *key, float *out, ql_error *err)
{
    const ql_gguf_kv *kv = ql_gguf_find_kv(g, key);
    if (!kv)
        return false;
    if (kv->value.type == QL_GGUF_FLOAT32) {
        *out = kv->value.v.f32;
        return true;
    }
    if (kv->value.type == QL_GGUF_FLOAT64) {
        *out = (float)kv->value.v.f64;
        return true;
    }
    bool neg;
    uint64_t mag;
    if (int_value(&kv->value, &neg, &mag)) {
        *out = neg ? -(float)mag : (float)mag;
        return true;
    }
    return type_mismatch(g, kv, "a number", err);
}

bool ql_gguf_get_bool(const ql_gguf *g, const char *key, bool *out, ql_error *err)
{
    const ql_gguf_kv *kv = get_typed(g, key, QL_GGUF_BOOL, "bool", err);
    if (!kv)
        return false;
    *out = kv->value.v.b;
    return true;
}

const char *ql_gguf_get_str(const ql_gguf *g, const char *key, ql_error *err)
{
    const ql_gguf_kv *kv = get_typed(g, key, QL_GGUF_STRING, "str", err);
    return kv ? kv->value.v.str.ptr : NULL;
}

const ql_gguf_array *ql_gguf_get_arr(const ql_gguf *g, const char *key, ql_gguf_vtype elem,
                                     ql_error *err)
{
    const ql_gguf_kv *kv = get_typed(g, key, QL_GGUF_ARRAY, "arr", err);
    if (!kv)
        return NULL;
    if (kv->value.v.arr.elem_type != elem) {
        ql_error_set(err, QL_EFORMAT, "%s: key '%s' is an array of %s, expected an array of %s",
                     g->path, key, ql_gguf_vtype_name(kv->value.v.arr.elem_type),
                     ql_gguf_vtype_name(elem));
        return NULL;
    }
    return &kv->value.v.arr;
}

/* Checks that an in-memory value is something the writer can serialise and the
 * reader would accept: known types, nested elements of type ARRAY, bools 0/1,
 * sizes that do not overflow. depth counts array levels above v. */
static ql_status check_value(const ql_gguf_value *v, int depth, ql_error *err)
{
    if ((int)v->type < 0 || v->type >= QL_GGUF_VTYPE_COUNT)
        return ql_error_set(err, QL_EINVAL, "value type %d is not a GGUF type (expected 0..%d)",
                            (int)v->type, QL_GGUF_VTYPE_COUNT - 1);
    if (v->type == QL_GGUF_STRING && !v->v.str.ptr && v->v.str.len)
        return ql_error_set(err, QL_EINVAL, "string value of %llu bytes has no data",
                            (unsigned long long)v->v.str.len);
    if (v->type != QL_GGUF_ARRAY)
        return QL_OK;
    const ql_gguf_array *a = &v->v.arr;
    if ((int)a->elem_type < 0 || a->elem_type >= QL_GGUF_VTYPE_COUNT)
        return ql_error_set(err, QL_EINVAL,
                            "array element type %d is not a GGUF type (expected 0..%d)",
                            (int)a->elem_type, QL_GGUF_VTYPE_COUNT - 1);
    if (a->n && !a->data)
        return ql_error_set(err, QL_EINVAL, "array of %llu elements has no data",
                            (unsigned long long)a->n);
    if (a->elem_type == QL_GGUF_ARRAY) {
        if (depth + 2 > QL_GGUF_MAX_ARRAY_DEPTH)
            return ql_error_set(err, QL_EINVAL, "arrays nested deeper than %d levels",
                                QL_GGUF_MAX_ARRAY_DEPTH);
        const ql_gguf_value *sub = a->data;
        for (uint64_t i = 0; i < a->n; i++) {
            if (sub[i].type != QL_GGUF_ARRAY)
                return ql_error_set(err, QL_EINVAL,
                                    "element %llu of an array of arrays has type %s, expected arr",
                                    (unsigned long long)i, ql_gguf_vtype_name(sub[i].type));
            ql_status st = check_value(&sub[i], depth + 1, err);
            if (st)
                return ql_error_prefix(err, "element %llu: ", (unsigned long long)i);
        }
    } else if (a->elem_type == QL_GGUF_STRING) {
        const ql_gguf_str *s = a->data;
        for (uint64_t i = 0; i < a->n; i++)
            if (!s[i].ptr && s[i].len)
                return ql_error_set(err, QL_EINVAL, "string element %llu has no data",
                                    (unsigned long long)i);
    } else {
        size_t sz = ql_gguf_vtype_size(a->elem_type);
        if (a->n > SIZE_MAX / 2 / sz)
            return ql_error_set(err, QL_EINVAL, "array of %llu %s elements is too large",
                                (unsigned long long)a->n, ql_gguf_vtype_name(a->elem_type));
        if (a->elem_type == QL_GGUF_BOOL) {
            const uint8_t *b = a->data;
            for (uint64_t i = 0; i < a->n; i++)
                if (b[i] > 1)
                    return ql_error_set(err, QL_EINVAL,
                                        "bool array element %llu is %u, expected 0 or 1",
                                        (unsigned long long)i, b[i]);
        }
    }
    return QL_OK;
}

static ql_status copy_checked(ql_gguf_value *dst, const ql_gguf_value *src, ql_error *err);

ql_status ql_gguf_value_copy(ql_gguf_value *dst, const ql_gguf_value *src, ql_error *err)
{
    memset(dst, 0, sizeof *dst);
    ql_status st = check_value(src, 0, err);
    if (st)
        return st;
    return copy_checked(dst, src, err);
}

static ql_status copy_checked(ql_gguf_value *dst, const ql_gguf_value *src, ql_error *err)

{
    memset(dst, 0, sizeof *dst);
    dst->type = src->type;
    if (src->type == QL_GGUF_STRING) {
        dst->v.str.ptr = malloc(src->v.str.len + 1);
        if (!dst->v.str.ptr)
            return ql_error_set(err, QL_ENOMEM, "out of memory copying a string value");
        memcpy(dst->v.str.ptr, src->v.str.ptr, src->v.str.len);
        dst->v.str.ptr[src->v.str.len] = '\0';
        dst->v.str.len = src->v.str.len;
        return QL_OK;
    }
    if (src->type != QL_GGUF_ARRAY) {
        dst->v = src->v;
        return QL_OK;
    }
    const ql_gguf_array *a = &src->v.arr;
    ql_gguf_array *b = &dst->v.arr;
    b->elem_type = a->elem_type;
    b->n = 0;
    if (a->elem_type == QL_GGUF_STRING) {
        ql_gguf_str *s = calloc(a->n ? a->n : 1, sizeof *s);
        if (!s)
            return ql_error_set(err, QL_ENOMEM, "out of memory copying an array");
        b->data = s;
        const ql_gguf_str *in = a->data;
        for (uint64_t i = 0; i < a->n; i++) {
            s[i].ptr = malloc(in[i].len + 1);
            if (!s[i].ptr) {
                ql_gguf_value_deinit(dst);
                return ql_error_set(err, QL_ENOMEM, "out of memory copying an array");
            }
            memcpy(s[i].ptr, in[i].ptr, in[i].len);
            s[i].ptr[in[i].len] = '\0';
            s[i].len = in[i].len;
            b->n = i + 1;
        }
    } else if (a->elem_type == QL_GGUF_ARRAY) {
        ql_gguf_value *s = calloc(a->n ? a->n : 1, sizeof *s);
        if (!s)
            return ql_error_set(err, QL_ENOMEM, "out of memory copying an array");
        b->data = s;
        const ql_gguf_value *in = a->data;
        for (uint64_t i = 0; i < a->n; i++) {
            ql_status st = copy_checked(&s[i], &in[i], err);
            b->n = i + 1;
            if (st) {
                ql_gguf_value_deinit(dst);
                return st;
            }
        }
    } else {
        size_t sz = ql_gguf_vtype_size(a->elem_type);
        b->data = malloc(a->n ? a->n * sz : 1);
        if (!b->data)
            return ql_error_set(err, QL_ENOMEM, "out of memory copying an array");
        if (a->n)
            memcpy(b->data, a->data, a->n * sz);
        b->n = a->n;
    }
    return QL_OK;
}

bool ql_gguf_value_equal(const ql_gguf_value *a, const ql_gguf_value *b)
{
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case QL_GGUF_STRING:
        return a->v.str.len == b->v.str.len &&
               (a->v.str.len == 0 || memcmp(a->v.str.ptr, b->v.str.ptr, a->v.str.len) == 0);
    case QL_GGUF_BOOL:
        return a->v.b == b->v.b;
    case QL_GGUF_ARRAY: {
        const ql_gguf_array *x = &a->v.arr, *y = &b->v.arr;
        if (x->elem_type != y->elem_type || x->n != y->n)
            return false;
        if (x->elem_type == QL_GGUF_STRING || x->elem_type == QL_GGUF_ARRAY) {
            for (uint64_t i = 0; i < x->n; i++) {
                ql_gguf_value ea, eb;
                if (x->elem_type == QL_GGUF_STRING) {
                    ea = (ql_gguf_value){.type = QL_GGUF_STRING};
                    eb = (ql_gguf_value){.type = QL_GGUF_STRING};
                    ea.v.str = ((const ql_gguf_str *)x->data)[i];
                    eb.v.str = ((const ql_gguf_str *)y->data)[i];
                    if (!ql_gguf_value_equal(&ea, &eb))
                        return false;
                } else if (!ql_gguf_value_equal(&((const ql_gguf_value *)x->data)[i],
                                                &((const ql_gguf_value *)y->data)[i])) {
                    return false;
                }
            }
            return true;
        }
        size_t sz = ql_gguf_vtype_size(x->elem_type);
        return x->n == 0 || memcmp(x->data, y->data, x->n * sz) == 0;
    }
    default:
        /* Bitwise, so that NaN payloads and -0.0 count as the values they are. */
        return memcmp(&a->v, &b->v, ql_gguf_vtype_size(a->type)) == 0;
    }
}
