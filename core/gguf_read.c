/* GGUF reader: validation first, then copies of the metadata; tensor data stays
 * in the memory mapping. See gguf.h for the layout. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "types.h"
#include "util.h"

/* Nested arrays deeper than this are refused (real files nest at most twice);
 * the limit keeps the recursive parser's stack bounded on hostile input. */
#define MAX_ARRAY_DEPTH 8
/* ggml refuses tensor names of GGML_MAX_NAME (64) bytes or more; so do we, so that
 * every file qlab accepts also loads in llama.cpp. */
#define MAX_TENSOR_NAME 63

typedef struct {
    const uint8_t *base;
    uint64_t size;
    uint64_t off;
    const char *name;
    ql_error *err;
} cursor;

static uint64_t remaining(const cursor *c)
{
    return c->size - c->off;
}

static ql_status truncated(cursor *c, const char *what, uint64_t need)
{
    return ql_error_set(c->err, QL_EFORMAT,
                        "%s: offset %llu: truncated file while reading %s: need %llu bytes, "
                        "%llu left (file is %llu bytes)",
                        c->name, (unsigned long long)c->off, what, (unsigned long long)need,
                        (unsigned long long)remaining(c), (unsigned long long)c->size);
}

static ql_status read_bytes(cursor *c, void *dst, uint64_t n, const char *what)
{
    if (remaining(c) < n)
        return truncated(c, what, n);
    memcpy(dst, c->base + c->off, n);
    c->off += n;
    return QL_OK;
}

static ql_status read_u32(cursor *c, uint32_t *v, const char *what)
{
    return read_bytes(c, v, 4, what);
}

static ql_status read_u64(cursor *c, uint64_t *v, const char *what)
{
    return read_bytes(c, v, 8, what);
}

/* Reads a GGUF string into a fresh NUL-terminated buffer. */
static ql_status read_string(cursor *c, ql_gguf_str *s, const char *what)
{
    uint64_t at = c->off, len;
    ql_status st = read_u64(c, &len, what);
    if (st)
        return st;
    if (len > remaining(c))
        return ql_error_set(c->err, QL_EFORMAT,
                            "%s: offset %llu: %s has length %llu but only %llu bytes remain",
                            c->name, (unsigned long long)at, what, (unsigned long long)len,
                            (unsigned long long)remaining(c));
    s->ptr = malloc(len + 1);
    if (!s->ptr)
        return ql_error_set(c->err, QL_ENOMEM, "%s: out of memory for a %llu-byte string",
                            c->name, (unsigned long long)len);
    memcpy(s->ptr, c->base + c->off, len);
    s->ptr[len] = '\0';
    s->len = len;
    c->off += len;
    return QL_OK;
}

const char *ql_gguf_vtype_name(int32_t t)
{
    static const char *names[] = {"u8",  "i8",  "u16", "i16", "u32", "i32", "f32",
                                  "bool", "str", "arr", "u64", "i64", "f64"};
    if (t < 0 || t >= QL_GGUF_VTYPE_COUNT)
        return "invalid";
    return names[t];
}

size_t ql_gguf_vtype_size(int32_t t)
{
    switch (t) {
    case QL_GGUF_UINT8:
    case QL_GGUF_INT8:
    case QL_GGUF_BOOL: return 1;
    case QL_GGUF_UINT16:
    case QL_GGUF_INT16: return 2;
    case QL_GGUF_UINT32:
    case QL_GGUF_INT32:
    case QL_GGUF_FLOAT32: return 4;
    case QL_GGUF_UINT64:
    case QL_GGUF_INT64:
    case QL_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

void ql_gguf_value_deinit(ql_gguf_value *v)
{
    if (!v)
        return;
    if (v->type == QL_GGUF_STRING) {
        free(v->v.str.ptr);
    } else if (v->type == QL_GGUF_ARRAY) {
        ql_gguf_array *a = &v->v.arr;
        if (a->data && a->elem_type == QL_GGUF_STRING) {
            ql_gguf_str *s = a->data;
            for (uint64_t i = 0; i < a->n; i++)
                free(s[i].ptr);
        } else if (a->data && a->elem_type == QL_GGUF_ARRAY) {
            ql_gguf_value *sub = a->data;
            for (uint64_t i = 0; i < a->n; i++)
                ql_gguf_value_deinit(&sub[i]);
        }
        free(a->data);
    }
    memset(v, 0, sizeof *v);
}

static ql_status read_value(cursor *c, ql_gguf_value *v, int32_t type, int depth,
                            const char *key);

static ql_status read_array(cursor *c, ql_gguf_array *a, int depth, const char *key)
{
    uint64_t at = c->off;
    uint32_t et;
    uint64_t n;
    ql_status st = read_u32(c, &et, "array element type");
    if (st)
        return st;
    if (et >= QL_GGUF_VTYPE_COUNT)
        return ql_error_set(c->err, QL_EFORMAT,
                            "%s: offset %llu: key '%s': unknown array element type %u "
                            "(expected 0..12)",
                            c->name, (unsigned long long)at, key, et);
    if (et == QL_GGUF_ARRAY && depth + 1 >= MAX_ARRAY_DEPTH)
        return ql_error_set(c->err, QL_EFORMAT,
                            "%s: offset %llu: key '%s': arrays nested deeper than %d levels",
                            c->name, (unsigned long long)at, key, MAX_ARRAY_DEPTH);
    st = read_u64(c, &n, "array length");
    if (st)
        return st;
    /* Smallest encoding of one element: its scalar size, 8 for a string (length),
     * 12 for an array (type + length). Refuse counts the file cannot hold. */
    size_t min_elem = ql_gguf_vtype_size((int32_t)et);
    if (et == QL_GGUF_STRING)
        min_elem = 8;
    if (et == QL_GGUF_ARRAY)
        min_elem = 12;
    if (n > remaining(c) / min_elem)
        return ql_error_set(c->err, QL_EFORMAT,
                            "%s: offset %llu: key '%s': array of %llu %s elements needs at "
                            "least %llu bytes but only %llu remain",
                            c->name, (unsigned long long)at, key, (unsigned long long)n,
                            ql_gguf_vtype_name((int32_t)et),
                            (unsigned long long)(n > UINT64_MAX / min_elem ? UINT64_MAX
                                                                            : n * min_elem),
                            (unsigned long long)remaining(c));
    a->elem_type = (ql_gguf_vtype)et;
    a->n = n;
    a->data = NULL;
    if (et == QL_GGUF_STRING) {
        a->data = calloc(n ? n : 1, sizeof(ql_gguf_str));
        if (!a->data)
            return ql_error_set(c->err, QL_ENOMEM, "%s: out of memory", c->name);
        ql_gguf_str *s = a->data;
        for (uint64_t i = 0; i < n; i++) {
            st = read_string(c, &s[i], "array string");
            if (st)
                return ql_error_prefix(c->err, "key '%s' element %llu: ", key,
                                       (unsigned long long)i);
        }
    } else if (et == QL_GGUF_ARRAY) {
        a->data = calloc(n ? n : 1, sizeof(ql_gguf_value));
        if (!a->data)
            return ql_error_set(c->err, QL_ENOMEM, "%s: out of memory", c->name);
        ql_gguf_value *sub = a->data;
        for (uint64_t i = 0; i < n; i++) {
            st = read_value(c, &sub[i], QL_GGUF_ARRAY, depth + 1, key);
            if (st)
                return st;
        }
    } else {
        a->data = malloc(n ? n * min_elem : 1);
        if (!a->data)
            return ql_error_set(c->err, QL_ENOMEM, "%s: out of memory", c->name);
        st = read_bytes(c, a->data, n * min_elem, "array data");
        if (st)
            return st;
        if (et == QL_GGUF_BOOL) {
            uint8_t *b = a->data;
            for (uint64_t i = 0; i < n; i++)
                if (b[i] > 1)
                    return ql_error_set(c->err, QL_EFORMAT,
                                        "%s: key '%s': bool array element %llu is %u "
                                        "(expected 0 or 1)",
                                        c->name, key, (unsigned long long)i, b[i]);
        }
    }
    return QL_OK;
}

static ql_status read_value(cursor *c, ql_gguf_value *v, int32_t type, int depth,
                            const char *key)
{
    uint64_t at = c->off;
    v->type = (ql_gguf_vtype)type;
    switch (type) {
    case QL_GGUF_STRING: return read_string(c, &v->v.str, "string value");
    case QL_GGUF_ARRAY: return read_array(c, &v->v.arr, depth, key);
    case QL_GGUF_BOOL: {
        uint8_t b;
        ql_status st = read_bytes(c, &b, 1, "bool value");
        if (st)
            return st;
        if (b > 1)
            return ql_error_set(c->err, QL_EFORMAT,
                                "%s: offset %llu: key '%s': bool value is %u (expected 0 or 1)",
                                c->name, (unsigned long long)at, key, b);
        v->v.b = b != 0;
        return QL_OK;
    }
    default: {
        size_t sz = ql_gguf_vtype_size(type);
        if (sz == 0)
            return ql_error_set(c->err, QL_EFORMAT,
                                "%s: offset %llu: key '%s': unknown value type %d "
                                "(expected 0..12)",
                                c->name, (unsigned long long)at, key, (int)type);
        return read_bytes(c, &v->v, sz, "scalar value");
    }
    }
}

/* ------------------------------------------------------------------------- */
/* Duplicate detection: sort indices by name, compare neighbours. */

static const char *const *sort_names;

static int cmp_name_idx(const void *a, const void *b)
{
    int64_t ia = *(const int64_t *)a, ib = *(const int64_t *)b;
    int r = strcmp(sort_names[ia], sort_names[ib]);
    return r ? r : (ia < ib ? -1 : ia > ib);
}

/* Returns the index of the second occurrence of a duplicate name, or -1. */
static int64_t find_duplicate(const char *const *names, int64_t n, int64_t *first)
{
    if (n < 2)
        return -1;
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    if (!idx)
        return -1;
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    sort_names = names; /* qsort has no context argument in C11 */
    qsort(idx, (size_t)n, sizeof *idx, cmp_name_idx);
    int64_t dup = -1;
    for (int64_t i = 1; i < n; i++)
        if (strcmp(names[idx[i - 1]], names[idx[i]]) == 0) {
            *first = idx[i - 1];
            dup = idx[i];
            break;
        }
    free(idx);
    return dup;
}

typedef struct {
    uint64_t start, end;
    int64_t index;
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* ------------------------------------------------------------------------- */

void ql_gguf_close(ql_gguf *g)
{
    if (!g)
        return;
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        ql_gguf_value_deinit(&g->kv[i].value);
    }
    free(g->kv);
    for (int64_t i = 0; i < g->n_tensors; i++)
        free(g->tensors[i].name);
    free(g->tensors);
    if (g->owns_map && g->map && g->map_size)
        munmap(g->map, g->map_size);
    free(g->path);
    free(g);
}

static ql_status parse(ql_gguf *g, ql_error *err)
{
    cursor c = {g->map, g->file_size, 0, g->path, err};
    ql_status st;

    char magic[4];
    if (g->file_size < 24)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: file is %llu bytes, too small for a GGUF header (24 bytes)",
                            g->path, (unsigned long long)g->file_size);
    read_bytes(&c, magic, 4, "magic");
    if (memcmp(magic, "GGUF", 4) != 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: offset 0: bad magic: expected \"GGUF\" (47 47 55 46), got "
                            "%02x %02x %02x %02x",
                            g->path, (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2],
                            (uint8_t)magic[3]);
    read_u32(&c, &g->version, "version");
    if (g->version == 0x03000000u || g->version == 0x02000000u)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: offset 4: big-endian GGUF files are not supported", g->path);
    if (g->version != 2 && g->version != 3)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: offset 4: unsupported GGUF version %u (qlab reads versions 2 "
                            "and 3)",
                            g->path, g->version);
    uint64_t n_tensors, n_kv;
    read_u64(&c, &n_tensors, "tensor count");
    read_u64(&c, &n_kv, "metadata count");

    /* Smallest records: a kv is key length (8) + 1 byte of key + type (4) + 1 byte
     * of value; a tensor info is name length (8) + 1 + n_dims (4) + one ne (8) +
     * type (4) + offset (8). */
    if (n_kv > remaining(&c) / 14)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: offset 16: metadata count %llu cannot fit in the %llu bytes "
                            "left (at least 14 bytes each)",
                            g->path, (unsigned long long)n_kv, (unsigned long long)remaining(&c));
    if (n_tensors > remaining(&c) / 33)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: offset 8: tensor count %llu cannot fit in the %llu bytes left "
                            "(at least 33 bytes each)",
                            g->path, (unsigned long long)n_tensors,
                            (unsigned long long)remaining(&c));

    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    if (!g->kv)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < n_kv; i++) {
        ql_gguf_kv *kv = &g->kv[i];
        kv->offset = c.off;
        ql_gguf_str key;
        st = read_string(&c, &key, "metadata key");
        if (st)
            return ql_error_prefix(err, "metadata entry %llu: ", (unsigned long long)i);
        kv->key = key.ptr;
        g->n_kv = (int64_t)i + 1;
        if (key.len == 0 || strlen(key.ptr) != key.len)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: offset %llu: metadata entry %llu has an empty key or a key "
                                "with a NUL byte",
                                g->path, (unsigned long long)kv->offset, (unsigned long long)i);
        uint32_t type;
        uint64_t type_at = c.off;
        st = read_u32(&c, &type, "value type");
        if (st)
            return ql_error_prefix(err, "key '%s': ", kv->key);
        if (type >= QL_GGUF_VTYPE_COUNT)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: offset %llu: key '%s': unknown value type %u (expected "
                                "0..12)",
                                g->path, (unsigned long long)type_at, kv->key, type);
        st = read_value(&c, &kv->value, (int32_t)type, 0, kv->key);
        if (st)
            return st;
    }
    {
        const char **names = malloc((n_kv ? n_kv : 1) * sizeof *names);
        if (!names)
            return ql_error_set(err, QL_ENOMEM, "%s: out of memory", g->path);
        for (uint64_t i = 0; i < n_kv; i++)
            names[i] = g->kv[i].key;
        int64_t first = -1, dup = find_duplicate(names, (int64_t)n_kv, &first);
        free(names);
        if (dup >= 0)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: offset %llu: duplicate metadata key '%s' (first at offset "
                                "%llu)",
                                g->path, (unsigned long long)g->kv[dup].offset, g->kv[dup].key,
                                (unsigned long long)g->kv[first].offset);
    }

    g->alignment = QL_GGUF_DEFAULT_ALIGNMENT;
    const ql_gguf_kv *akv = ql_gguf_find_kv(g, "general.alignment");
    if (akv) {
        if (akv->value.type != QL_GGUF_UINT32)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: offset %llu: key 'general.alignment' has type %s, expected "
                                "u32",
                                g->path, (unsigned long long)akv->offset,
                                ql_gguf_vtype_name(akv->value.type));
        uint32_t a = akv->value.v.u32;
        if (a == 0 || (a & (a - 1)) != 0)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: offset %llu: general.alignment is %u, expected a non-zero "
                                "power of two",
                                g->path, (unsigned long long)akv->offset, a);
        g->alignment = a;
    }

    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->tensors)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < n_tensors; i++) {
        ql_gguf_tensor *t = &g->tensors[i];
        t->info_offset = c.off;
        ql_gguf_str name;
        st = read_string(&c, &name, "tensor name");
        if (st)
            return ql_error_prefix(err, "tensor info %llu: ", (unsigned long long)i);
        t->name = name.ptr;
        g->n_tensors = (int64_t)i + 1;
        if (name.len == 0 || strlen(name.ptr) != name.len)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: offset %llu: tensor %llu has an empty name or a name with a "
                                "NUL byte",
                                g->path, (unsigned long long)t->info_offset,
                                (unsigned long long)i);
        if (name.len > MAX_TENSOR_NAME)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: offset %llu: tensor name '%.40s...' is %llu bytes, at most "
                                "%d allowed",
                                g->path, (unsigned long long)t->info_offset, t->name,
                                (unsigned long long)name.len, MAX_TENSOR_NAME);
        st = read_u32(&c, &t->n_dims, "tensor n_dims");
        if (st)
            return ql_error_prefix(err, "tensor '%s': ", t->name);
        if (t->n_dims == 0 || t->n_dims > QL_GGUF_MAX_DIMS)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: offset %llu: tensor '%s' has %u dimensions, expected 1..%d",
                                g->path, (unsigned long long)t->info_offset, t->name, t->n_dims,
                                QL_GGUF_MAX_DIMS);
        for (int d = 0; d < QL_GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne;
            st = read_u64(&c, &ne, "tensor dimension");
            if (st)
                return ql_error_prefix(err, "tensor '%s': ", t->name);
            if (ne > (uint64_t)INT64_MAX)
                return ql_error_set(err, QL_EFORMAT,
                                    "%s: tensor '%s': dimension %u is %llu, larger than INT64_MAX",
                                    g->path, t->name, d, (unsigned long long)ne);
            t->ne[d] = (int64_t)ne;
        }
        /* The element count must fit in int64 (ggml's own limit). */
        int64_t nel = 1;
        for (int d = 0; d < QL_GGUF_MAX_DIMS; d++) {
            if (t->ne[d] != 0 && nel > INT64_MAX / t->ne[d])
                return ql_error_set(err, QL_EFORMAT,
                                    "%s: offset %llu: tensor '%s': product of dimensions "
                                    "%lld x %lld x %lld x %lld overflows int64",
                                    g->path, (unsigned long long)t->info_offset, t->name,
                                    (long long)t->ne[0], (long long)t->ne[1],
                                    (long long)t->ne[2], (long long)t->ne[3]);
            nel *= t->ne[d];
        }
        uint32_t type;
        st = read_u32(&c, &type, "tensor type");
        if (st)
            return ql_error_prefix(err, "tensor '%s': ", t->name);
        t->type = (int32_t)type;
        st = read_u64(&c, &t->offset, "tensor offset");
        if (st)
            return ql_error_prefix(err, "tensor '%s': ", t->name);
        if (type > INT32_MAX)
            return ql_error_set(err, QL_EFORMAT, "%s: tensor '%s': invalid type id %u", g->path,
                                t->name, type);
        const ql_type_traits *tr = ql_type_get(t->type);
        if (tr && tr->is_gguf) {
            if (t->ne[0] % tr->block_size != 0)
                return ql_error_set(err, QL_EFORMAT,
                                    "%s: tensor '%s' (%s, %lldx%lld): row length %lld is not a "
                                    "multiple of %lld",
                                    g->path, t->name, tr->name, (long long)t->ne[0],
                                    (long long)t->ne[1], (long long)t->ne[0],
                                    (long long)tr->block_size);
            uint64_t row = ql_row_size(t->type, t->ne[0]);
            uint64_t rows = (uint64_t)(t->ne[0] ? nel / t->ne[0] : 0);
            if (t->ne[0] != 0 && rows != 0 && row > UINT64_MAX / rows)
                return ql_error_set(err, QL_EFORMAT, "%s: tensor '%s': byte size overflows",
                                    g->path, t->name);
            t->nbytes = t->ne[0] == 0 ? 0 : row * rows;
        }
        if (t->offset % g->alignment != 0)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: offset %llu: tensor '%s': data offset %llu is not a "
                                "multiple of the alignment %llu",
                                g->path, (unsigned long long)t->info_offset, t->name,
                                (unsigned long long)t->offset, (unsigned long long)g->alignment);
    }
    {
        const char **names = malloc((n_tensors ? n_tensors : 1) * sizeof *names);
        if (!names)
            return ql_error_set(err, QL_ENOMEM, "%s: out of memory", g->path);
        for (uint64_t i = 0; i < n_tensors; i++)
            names[i] = g->tensors[i].name;
        int64_t first = -1, dup = find_duplicate(names, (int64_t)n_tensors, &first);
        free(names);
        if (dup >= 0)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: offset %llu: duplicate tensor name '%s' (tensors %lld and "
                                "%lld)",
                                g->path, (unsigned long long)g->tensors[dup].info_offset,
                                g->tensors[dup].name, (long long)first, (long long)dup);
    }

    /* Data section: padded to the alignment after the tensor table. */
    uint64_t data = c.off;
    if (data % g->alignment)
        data += g->alignment - data % g->alignment;
    g->data_offset = data;
    if (n_tensors > 0 && data > g->file_size)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: tensor data would start at offset %llu, past the end of the "
                            "file (%llu bytes)",
                            g->path, (unsigned long long)data, (unsigned long long)g->file_size);

    span *spans = malloc((n_tensors ? n_tensors : 1) * sizeof *spans);
    if (!spans)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", g->path);
    st = QL_OK;
    for (uint64_t i = 0; i < n_tensors; i++) {
        ql_gguf_tensor *t = &g->tensors[i];
        uint64_t avail = g->file_size - data;
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            st = ql_error_set(err, QL_EFORMAT,
                              "%s: tensor '%s': data [%llu, %llu) lies outside the file (data "
                              "section is %llu bytes from offset %llu)",
                              g->path, t->name, (unsigned long long)(data + t->offset),
                              (unsigned long long)(data + t->offset + t->nbytes),
                              (unsigned long long)avail, (unsigned long long)data);
            goto out_spans;
        }
        t->data = ql_type_get(t->type) ? (const uint8_t *)g->map + data + t->offset : NULL;
        spans[i] = (span){t->offset, t->offset + t->nbytes, (int64_t)i};
    }
    qsort(spans, n_tensors, sizeof *spans, cmp_span);
    for (uint64_t i = 1; i < n_tensors; i++) {
        if (spans[i].start < spans[i - 1].end) {
            const ql_gguf_tensor *a = &g->tensors[spans[i - 1].index];
            const ql_gguf_tensor *b = &g->tensors[spans[i].index];
            st = ql_error_set(err, QL_EFORMAT,
                              "%s: tensor data overlaps: '%s' [%llu, %llu) and '%s' [%llu, %llu) "
                              "(offsets relative to the data section)",
                              g->path, a->name, (unsigned long long)a->offset,
                              (unsigned long long)(a->offset + a->nbytes), b->name,
                              (unsigned long long)b->offset,
                              (unsigned long long)(b->offset + b->nbytes));
            goto out_spans;
        }
    }
out_spans:
    free(spans);
    return st;
}

static ql_status open_common(ql_gguf *g, ql_gguf **out, ql_error *err)
{
    ql_status st = parse(g, err);
    if (st) {
        ql_gguf_close(g);
        *out = NULL;
        return st;
    }
    *out = g;
    return QL_OK;
}

ql_status ql_gguf_open(ql_gguf **out, const char *path, ql_error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ql_error_set(err, QL_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return ql_error_set(err, QL_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return ql_error_set(err, QL_EIO, "%s: not a regular file", path);
    }
    ql_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        close(fd);
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
    }
    g->path = ql_strdup(path);
    g->file_size = (uint64_t)sb.st_size;
    if (sb.st_size > 0) {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(g->path);
            free(g);
            return ql_error_set(err, QL_EIO, "%s: cannot map: %s", path, strerror(e));
        }
        g->map = m;
        g->map_size = (size_t)sb.st_size;
        g->owns_map = true;
    }
    close(fd);
    if (!g->path) {
        ql_gguf_close(g);
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
    }
    return open_common(g, out, err);
}

ql_status ql_gguf_open_buffer(ql_gguf **out, const void *buf, size_t size, const char *name,
                              ql_error *err)
{
    *out = NULL;
    ql_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", name);
    g->path = ql_strdup(name);
    if (!g->path) {
        free(g);
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", name);
    }
    g->map = (void *)(uintptr_t)buf;
    g->map_size = size;
    g->file_size = size;
    g->owns_map = false;
    return open_common(g, out, err);
}
