/* GGUF writer: header and tables first, then tensor data streamed one tensor at
 * a time, each padded to the alignment. See gguf.h. */
#include "model/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "formats/types.h"

typedef struct {
    char *name;
    uint32_t n_dims;
    int64_t ne[QL_GGUF_MAX_DIMS];
    int32_t type;
    uint64_t nbytes;
    uint64_t offset;
} wtensor;

struct ql_gguf_writer {
    uint64_t alignment;
    ql_gguf_kv *kv;
    int64_t n_kv, cap_kv;
    wtensor *t;
    int64_t n_t, cap_t;
    FILE *f;
    char *path;
    char *tmp_path;
    int64_t next_tensor;
    uint64_t data_size; /* padded size of the data section */
    uint64_t written;   /* bytes written so far */
};

ql_status ql_gguf_writer_alloc(ql_gguf_writer **out, ql_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return ql_error_set(err, QL_ENOMEM, "out of memory for a GGUF writer");
    (*out)->alignment = QL_GGUF_DEFAULT_ALIGNMENT;
    return QL_OK;
}

void ql_gguf_writer_free(ql_gguf_writer *w)
{
    if (!w)
        return;
    if (w->f) {
        fclose(w->f);
        if (w->tmp_path)
            remove(w->tmp_path);
    }
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        ql_gguf_value_deinit(&w->kv[i].value);
    }
    free(w->kv);
    for (int64_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->t);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

ql_status ql_gguf_writer_set_alignment(ql_gguf_writer *w, uint64_t alignment, ql_error *err)
{
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > UINT32_MAX)
        return ql_error_set(err, QL_EINVAL, "GGUF alignment %llu is not a power of two",
                            (unsigned long long)alignment);
    if (w->f)
        return ql_error_set(err, QL_EINVAL, "GGUF alignment set after the header was written");
    w->alignment = alignment;
    return QL_OK;
}

bool ql_gguf_writer_remove_kv(ql_gguf_writer *w, const char *key)
{
    for (int64_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            free(w->kv[i].key);
            ql_gguf_value_deinit(&w->kv[i].value);
            memmove(&w->kv[i], &w->kv[i + 1], (size_t)(w->n_kv - i - 1) * sizeof *w->kv);
            w->n_kv--;
            return true;
        }
    }
    return false;
}

ql_status ql_gguf_writer_set_kv(ql_gguf_writer *w, const char *key, const ql_gguf_value *v,
                                ql_error *err)
{
    if (!key || !*key)
        return ql_error_set(err, QL_EINVAL, "GGUF key is empty");
    if (strcmp(key, "general.alignment") == 0)
        return QL_OK; /* written by the writer itself */
    if (w->f)
        return ql_error_set(err, QL_EINVAL, "GGUF key '%s' added after the header was written",
                            key);
    ql_gguf_value copy;
    ql_status st = ql_gguf_value_copy(&copy, v, err);
    if (st)
        return ql_error_prefix(err, "GGUF key '%s': ", key);
    for (int64_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            ql_gguf_value_deinit(&w->kv[i].value);
            w->kv[i].value = copy;
            return QL_OK;
        }
    }
    if (w->n_kv == w->cap_kv) {
        int64_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        ql_gguf_kv *nkv = realloc(w->kv, (size_t)cap * sizeof *nkv);
        if (!nkv) {
            ql_gguf_value_deinit(&copy);
            return ql_error_set(err, QL_ENOMEM, "out of memory adding key '%s'", key);
        }
        w->kv = nkv;
        w->cap_kv = cap;
    }
    ql_gguf_kv *kv = &w->kv[w->n_kv];
    memset(kv, 0, sizeof *kv);
    kv->key = ql_strdup(key);
    if (!kv->key) {
        ql_gguf_value_deinit(&copy);
        return ql_error_set(err, QL_ENOMEM, "out of memory adding key '%s'", key);
    }
    kv->value = copy;
    w->n_kv++;
    return QL_OK;
}

#define SCALAR_SETTER(fn, ctype, vtype, field)                                                     \
    ql_status fn(ql_gguf_writer *w, const char *key, ctype v, ql_error *err)                       \
    {                                                                                              \
        ql_gguf_value val;                                                                         \
        memset(&val, 0, sizeof val);                                                               \
        val.type = vtype;                                                                          \
        val.v.field = v;                                                                           \
        return ql_gguf_writer_set_kv(w, key, &val, err);                                           \
    }

SCALAR_SETTER(ql_gguf_writer_set_u32, uint32_t, QL_GGUF_UINT32, u32)
SCALAR_SETTER(ql_gguf_writer_set_i32, int32_t, QL_GGUF_INT32, i32)
SCALAR_SETTER(ql_gguf_writer_set_f32, float, QL_GGUF_FLOAT32, f32)
SCALAR_SETTER(ql_gguf_writer_set_bool, bool, QL_GGUF_BOOL, b)

ql_status ql_gguf_writer_set_str(ql_gguf_writer *w, const char *key, const char *v, ql_error *err)
{
    ql_gguf_value val;
    memset(&val, 0, sizeof val);
    val.type = QL_GGUF_STRING;
    val.v.str.ptr = (char *)(uintptr_t)v; /* copied by set_kv */
    val.v.str.len = strlen(v);
    return ql_gguf_writer_set_kv(w, key, &val, err);
}

ql_status ql_gguf_writer_set_arr(ql_gguf_writer *w, const char *key, ql_gguf_vtype elem,
                                 const void *data, uint64_t n, ql_error *err)
{
    if (ql_gguf_vtype_size(elem) == 0)
        return ql_error_set(err, QL_EINVAL, "key '%s': array element type %s is not a scalar", key,
                            ql_gguf_vtype_name(elem));
    ql_gguf_value val;
    memset(&val, 0, sizeof val);
    val.type = QL_GGUF_ARRAY;
    val.v.arr.elem_type = elem;
    val.v.arr.n = n;
    val.v.arr.data = (void *)(uintptr_t)data;
    return ql_gguf_writer_set_kv(w, key, &val, err);
}

ql_status ql_gguf_writer_set_str_arr(ql_gguf_writer *w, const char *key, const char *const *strs,
                                     uint64_t n, ql_error *err)
{
    ql_gguf_str *s = calloc(n ? n : 1, sizeof *s);
    if (!s)
        return ql_error_set(err, QL_ENOMEM, "out of memory for key '%s'", key);
    for (uint64_t i = 0; i < n; i++) {
        s[i].ptr = (char *)(uintptr_t)strs[i];
        s[i].len = strlen(strs[i]);
    }
    ql_gguf_value val;
    memset(&val, 0, sizeof val);
    val.type = QL_GGUF_ARRAY;
    val.v.arr.elem_type = QL_GGUF_STRING;
    val.v.arr.n = n;
    val.v.arr.data = s;
    ql_status st = ql_gguf_writer_set_kv(w, key, &val, err);
    free(s);
    return st;
}

ql_status ql_gguf_writer_copy_kvs(ql_gguf_writer *w, const ql_gguf *src, ql_error *err)
{
    for (int64_t i = 0; i < src->n_kv; i++) {
        /* A copy of a split set's first file is one file, not a set. */
        const char *k = src->kv[i].key;
        if (strcmp(k, QL_GGUF_SPLIT_NO) == 0 || strcmp(k, QL_GGUF_SPLIT_COUNT) == 0 ||
            strcmp(k, QL_GGUF_SPLIT_TENSORS_COUNT) == 0)
            continue;
        ql_status st = ql_gguf_writer_set_kv(w, src->kv[i].key, &src->kv[i].value, err);
        if (st)
            return st;
    }
    return QL_OK;
}

ql_status ql_gguf_writer_add_tensor(ql_gguf_writer *w, const char *name, uint32_t n_dims,
                                    const int64_t *ne, int32_t type, uint64_t nbytes, ql_error *err)
{
    if (!name)
        return ql_error_set(err, QL_EINVAL, "tensor without a name");
    if (w->f)
        return ql_error_set(err, QL_EINVAL, "tensor '%s' added after the header was written", name);
    size_t len = strlen(name);
    if (len == 0 || len > 63)
        return ql_error_set(err, QL_EINVAL,
                            "tensor name '%s' is %zu bytes; GGUF readers accept 1..63", name, len);
    if (n_dims == 0 || n_dims > QL_GGUF_MAX_DIMS)
        return ql_error_set(err, QL_EINVAL, "tensor '%s': %u dimensions, expected 1..%d", name,
                            n_dims, QL_GGUF_MAX_DIMS);
    for (int64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return ql_error_set(err, QL_EINVAL, "duplicate tensor name '%s'", name);
    if (type < 0)
        return ql_error_set(err, QL_EINVAL, "tensor '%s': type id %d is negative", name, (int)type);
    /* The same limits the reader enforces: dimensions >= 0, element count in int64. */
    int64_t nel = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0)
            return ql_error_set(err, QL_EINVAL, "tensor '%s': ne[%u] = %lld is negative", name, d,
                                (long long)ne[d]);
        if (ne[d] != 0 && nel > INT64_MAX / ne[d])
            return ql_error_set(err, QL_EINVAL,
                                "tensor '%s': the product of the dimensions overflows int64", name);
        nel *= ne[d];
    }
    const ql_type_traits *tr = ql_type_get(type);
    if (tr && !tr->is_gguf)
        return ql_error_set(err, QL_EINVAL,
                            "tensor '%s': %s is a qlab-only scheme, not a GGUF type", name,
                            tr->name);
    if (ql_gguf_type_known(type)) {
        if (ne[0] % tr->block_size != 0)
            return ql_error_set(err, QL_EINVAL,
                                "tensor '%s' (%s): row length %lld is not a multiple of %lld", name,
                                tr->name, (long long)ne[0], (long long)tr->block_size);
        /* nel < 2^63 and type_size / block_size <= 8 bytes per element: no overflow. */
        uint64_t need = nel == 0 ? 0 : (uint64_t)(nel / tr->block_size) * (uint64_t)tr->type_size;
        if (need != nbytes)
            return ql_error_set(err, QL_EINVAL,
                                "tensor '%s' (%s): %llu bytes given, the shape needs %llu", name,
                                tr->name, (unsigned long long)nbytes, (unsigned long long)need);
    }
    if (w->n_t == w->cap_t) {
        int64_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *nt = realloc(w->t, (size_t)cap * sizeof *nt);
        if (!nt)
            return ql_error_set(err, QL_ENOMEM, "out of memory adding tensor '%s'", name);
        w->t = nt;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = ql_strdup(name);
    if (!t->name)
        return ql_error_set(err, QL_ENOMEM, "out of memory adding tensor '%s'", name);
    t->n_dims = n_dims;
    for (int d = 0; d < QL_GGUF_MAX_DIMS; d++)
        t->ne[d] = d < (int)n_dims ? ne[d] : 1;
    t->type = type;
    t->nbytes = nbytes;
    w->n_t++;
    return QL_OK;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

/* ---- serialisation into the output stream ---- */

typedef struct {
    FILE *f;
    uint64_t n;
    bool failed;
} sink;

static void put(sink *s, const void *p, size_t n)
{
    if (s->f && !s->failed && n && fwrite(p, 1, n, s->f) != n)
        s->failed = true;
    s->n += n;
}

static void put_u32(sink *s, uint32_t v)
{
    put(s, &v, 4);
}

static void put_u64(sink *s, uint64_t v)
{
    put(s, &v, 8);
}

static void put_str(sink *s, const char *p, uint64_t len)
{
    put_u64(s, len);
    put(s, p, len);
}

static void put_value(sink *s, const ql_gguf_value *v)
{
    switch (v->type) {
    case QL_GGUF_STRING:
        put_str(s, v->v.str.ptr, v->v.str.len);
        break;
    case QL_GGUF_ARRAY: {
        const ql_gguf_array *a = &v->v.arr;
        put_u32(s, (uint32_t)a->elem_type);
        put_u64(s, a->n);
        if (a->elem_type == QL_GGUF_STRING) {
            const ql_gguf_str *str = a->data;
            for (uint64_t i = 0; i < a->n; i++)
                put_str(s, str[i].ptr, str[i].len);
        } else if (a->elem_type == QL_GGUF_ARRAY) {
            const ql_gguf_value *sub = a->data;
            for (uint64_t i = 0; i < a->n; i++)
                put_value(s, &sub[i]);
        } else {
            put(s, a->data, a->n * ql_gguf_vtype_size(a->elem_type));
        }
        break;
    }
    case QL_GGUF_BOOL: {
        uint8_t b = v->v.b ? 1 : 0;
        put(s, &b, 1);
        break;
    }
    default:
        put(s, &v->v, ql_gguf_vtype_size(v->type));
        break;
    }
}

static void put_header(sink *s, const ql_gguf_writer *w)
{
    put(s, "GGUF", 4);
    put_u32(s, 3);
    put_u64(s, (uint64_t)w->n_t);
    put_u64(s, (uint64_t)w->n_kv + 1);
    /* general.alignment is always written (first), so no reader has to assume the default. */
    put_str(s, "general.alignment", strlen("general.alignment"));
    put_u32(s, QL_GGUF_UINT32);
    put_u32(s, (uint32_t)w->alignment);
    for (int64_t i = 0; i < w->n_kv; i++) {
        put_str(s, w->kv[i].key, strlen(w->kv[i].key));
        put_u32(s, (uint32_t)w->kv[i].value.type);
        put_value(s, &w->kv[i].value);
    }
    for (int64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(s, t->name, strlen(t->name));
        put_u32(s, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            put_u64(s, (uint64_t)t->ne[d]);
        put_u32(s, (uint32_t)t->type);
        put_u64(s, t->offset);
    }
    static const uint8_t zeros[256];
    uint64_t pad = align_up(s->n, w->alignment) - s->n;
    while (pad > 0) {
        uint64_t k = pad < sizeof zeros ? pad : sizeof zeros;
        put(s, zeros, k);
        pad -= k;
    }
}

/* Assigns each tensor its offset in the data section (every tensor starts on
 * the alignment); returns the padded size of the data section. */
static uint64_t layout(ql_gguf_writer *w)
{
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off = align_up(off + w->t[i].nbytes, w->alignment);
    }
    return off;
}

uint64_t ql_gguf_writer_file_size(const ql_gguf_writer *w)
{
    /* Offsets only change the values written, not the header's length. */
    uint64_t data = 0;
    for (int64_t i = 0; i < w->n_t; i++)
        data = align_up(data + w->t[i].nbytes, w->alignment);
    sink s = {NULL, 0, false};
    put_header(&s, w);
    return s.n + data;
}

ql_status ql_gguf_writer_begin(ql_gguf_writer *w, const char *path, ql_error *err)
{
    if (w->f)
        return ql_error_set(err, QL_EINVAL, "%s: GGUF writer already started", path);
    w->data_size = layout(w);
    size_t n = strlen(path) + 32;
    free(w->path); /* a previous begin may have failed after these were set */
    free(w->tmp_path);
    w->path = ql_strdup(path);
    w->tmp_path = malloc(n);
    if (!w->path || !w->tmp_path)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
    snprintf(w->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    w->f = fopen(w->tmp_path, "wb");
    if (!w->f)
        return ql_error_set(err, QL_EIO, "%s: cannot create: %s", w->tmp_path, strerror(errno));
    sink s = {w->f, 0, false};
    put_header(&s, w);
    if (s.failed) {
        ql_status st =
            ql_error_set(err, QL_EIO, "%s: write failed: %s", w->tmp_path, strerror(errno));
        fclose(w->f);
        w->f = NULL;
        remove(w->tmp_path);
        return st;
    }
    w->written = 0;
    w->next_tensor = 0;
    return QL_OK;
}

ql_status ql_gguf_writer_write_tensor(ql_gguf_writer *w, const void *data, uint64_t nbytes,
                                      ql_error *err)
{
    if (!w->f)
        return ql_error_set(err, QL_EINVAL, "GGUF writer: tensor data before begin");
    if (w->next_tensor >= w->n_t)
        return ql_error_set(err, QL_EINVAL, "%s: more tensors written than declared (%lld)",
                            w->path, (long long)w->n_t);
    const wtensor *t = &w->t[w->next_tensor];
    if (nbytes != t->nbytes)
        return ql_error_set(err, QL_EINVAL, "%s: tensor '%s': %llu bytes given, %llu declared",
                            w->path, t->name, (unsigned long long)nbytes,
                            (unsigned long long)t->nbytes);
    sink s = {w->f, 0, false};
    put(&s, data, nbytes);
    static const uint8_t zeros[256];
    uint64_t pad = align_up(nbytes, w->alignment) - nbytes;
    while (pad > 0) {
        uint64_t k = pad < sizeof zeros ? pad : sizeof zeros;
        put(&s, zeros, k);
        pad -= k;
    }
    if (s.failed)
        return ql_error_set(err, QL_EIO, "%s: write failed for tensor '%s': %s", w->tmp_path,
                            t->name, strerror(errno));
    w->written += s.n;
    w->next_tensor++;
    return QL_OK;
}

ql_status ql_gguf_writer_finish(ql_gguf_writer *w, ql_error *err)
{
    if (!w->f)
        return ql_error_set(err, QL_EINVAL, "GGUF writer: finish before begin");
    if (w->next_tensor != w->n_t)
        return ql_error_set(err, QL_EINVAL, "%s: %lld of %lld tensors written", w->path,
                            (long long)w->next_tensor, (long long)w->n_t);
    QL_ASSERT(w->written == w->data_size);
    int rc = fflush(w->f);
    rc |= fsync(fileno(w->f));
    rc |= fclose(w->f);
    w->f = NULL;
    if (rc != 0) {
        remove(w->tmp_path);
        return ql_error_set(err, QL_EIO, "%s: cannot flush: %s", w->tmp_path, strerror(errno));
    }
    if (rename(w->tmp_path, w->path) != 0) {
        remove(w->tmp_path);
        return ql_error_set(err, QL_EIO, "%s: cannot rename into place: %s", w->path,
                            strerror(errno));
    }
    return QL_OK;
}
