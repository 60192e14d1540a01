/* GGUF reader: validation first, then copies of the metadata; tensor data stays
 * in the memory mapping. See gguf.h for the layout.
 *
 * Every error message has the shape
 *   <file>: offset <byte>: <key or tensor>[ element i[ j]]: <problem>, expected <x>, got <y>
 * so a researcher can open the file in a hex viewer at the right place. Nothing is
 * allocated from a count the file claims before that count has been checked against
 * the bytes that remain; the key and tensor tables grow as records are parsed. */
#include "model/gguf.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "formats/types.h"

/* Nested arrays deeper than this are refused; the limit keeps the recursive
 * parser's stack bounded on hostile input. */
#define MAX_ARRAY_DEPTH QL_GGUF_MAX_ARRAY_DEPTH
/* ggml refuses tensor names of GGML_MAX_NAME (64) bytes or more; so do we, so that
 * every file qlab accepts also loads in llama.cpp. */
#define MAX_TENSOR_NAME 63
/* Names quoted in error messages are cut to this many bytes. */
#define MSG_NAME_MAX 80

/* ========================================================================= */
/* Cursor over the mapped file, with the context used in error messages.     */

typedef struct {
    const uint8_t *base;
    uint64_t size;
    uint64_t off;
    const char *path;
    ql_error *err;
    char ctx[MSG_NAME_MAX * 4 + 64]; /* "key 'x'" or "tensor 'y'"; empty in the header */
    int depth;                       /* array nesting of the value being read */
    uint64_t elem[MAX_ARRAY_DEPTH + 1];
} cursor;

static uint64_t remaining(const cursor *c)
{
    return c->size - c->off;
}

/* Copies at most max bytes of s (len bytes) into dst with control bytes escaped,
 * so a hostile name cannot garble the terminal. */
static void escape_name(char *dst, size_t size, const char *s, uint64_t len, size_t max)
{
    size_t o = 0;
    for (uint64_t i = 0; i < len && i < max && o + 5 < size; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch == 0x7f || ch == '\'' || ch == '\\')
            o += (size_t)snprintf(dst + o, size - o, "\\x%02x", ch);
        else
            dst[o++] = (char)ch;
    }
    if (len > max && o + 4 < size) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o < size ? o : size - 1] = '\0';
}

static void set_ctx(cursor *c, const char *what, const char *name, uint64_t len)
{
    char esc[MSG_NAME_MAX * 4 + 8];
    escape_name(esc, sizeof esc, name, len, MSG_NAME_MAX);
    snprintf(c->ctx, sizeof c->ctx, "%s '%s'", what, esc);
}

/* Formats "<file>: offset <at>: <ctx>[ element i j]: <msg>" into the error. */
static ql_status fail(cursor *c, uint64_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ql_status fail(cursor *c, uint64_t at, const char *fmt, ...)
{
    char msg[QL_ERROR_MSG_MAX / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char where[sizeof c->ctx + 16 * (MAX_ARRAY_DEPTH + 1) + 16] = "";
    size_t o = 0;
    if (c->ctx[0])
        o += (size_t)snprintf(where, sizeof where, "%s", c->ctx);
    if (c->depth > 0 && o < sizeof where) {
        o += (size_t)snprintf(where + o, sizeof where - o, " element");
        for (int d = 0; d < c->depth && o < sizeof where; d++)
            o += (size_t)snprintf(where + o, sizeof where - o, " %llu",
                                  (unsigned long long)c->elem[d]);
    }
    return ql_error_set(c->err, QL_EFORMAT, "%s: offset %llu: %s%s%s", c->path,
                        (unsigned long long)at, where, where[0] ? ": " : "", msg);
}

static ql_status out_of_memory(cursor *c, const char *what)
{
    return ql_error_set(c->err, QL_ENOMEM, "%s: offset %llu: %s%sout of memory for %s", c->path,
                        (unsigned long long)c->off, c->ctx, c->ctx[0] ? ": " : "", what);
}

static ql_status read_bytes(cursor *c, void *dst, uint64_t n, const char *what)
{
    if (remaining(c) < n)
        return fail(c, c->off,
                    "truncated file: %s needs %llu bytes, only %llu left (file is %llu bytes)",
                    what, (unsigned long long)n, (unsigned long long)remaining(c),
                    (unsigned long long)c->size);
    memcpy(dst, c->base + c->off, n);
    c->off += n;
    return QL_OK;
}

/* GGUF is little endian; qlab only builds on little-endian hosts (see meson.build). */
static ql_status read_u32(cursor *c, uint32_t *v, const char *what)
{
    return read_bytes(c, v, 4, what);
}

static ql_status read_u64(cursor *c, uint64_t *v, const char *what)
{
    return read_bytes(c, v, 8, what);
}

/* Reads a GGUF string (u64 length + bytes) into a fresh NUL-terminated buffer. */
static ql_status read_string(cursor *c, ql_gguf_str *s, const char *what)
{
    uint64_t at = c->off, len;
    ql_status st = read_u64(c, &len, what);
    if (st)
        return st;
    if (len > remaining(c))
        return fail(c, at, "%s length %llu exceeds the %llu bytes left in the file", what,
                    (unsigned long long)len, (unsigned long long)remaining(c));
    s->ptr = malloc(len + 1);
    if (!s->ptr)
        return out_of_memory(c, what);
    memcpy(s->ptr, c->base + c->off, len);
    s->ptr[len] = '\0';
    s->len = len;
    c->off += len;
    return QL_OK;
}

/* ========================================================================= */
/* Value types                                                                */

const char *ql_gguf_vtype_name(int32_t t)
{
    static const char *names[] = {"u8",   "i8",  "u16", "i16", "u32", "i32", "f32",
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
    case QL_GGUF_BOOL:
        return 1;
    case QL_GGUF_UINT16:
    case QL_GGUF_INT16:
        return 2;
    case QL_GGUF_UINT32:
    case QL_GGUF_INT32:
    case QL_GGUF_FLOAT32:
        return 4;
    case QL_GGUF_UINT64:
    case QL_GGUF_INT64:
    case QL_GGUF_FLOAT64:
        return 8;
    default:
        return 0;
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

/* ========================================================================= */
/* Metadata values                                                            */

static ql_status read_value(cursor *c, ql_gguf_value *v, uint32_t type);

/* Smallest encoding of one array element: its scalar size, 8 for a string (the
 * length), 12 for a nested array (element type + length). */
static uint64_t min_elem_size(uint32_t et)
{
    if (et == QL_GGUF_STRING)
        return 8;
    if (et == QL_GGUF_ARRAY)
        return 12;
    return ql_gguf_vtype_size((int32_t)et);
}

static ql_status read_array(cursor *c, ql_gguf_array *a)
{
    uint64_t at = c->off;
    uint32_t et;
    uint64_t n;
    ql_status st = read_u32(c, &et, "array element type");
    if (st)
        return st;
    if (et >= QL_GGUF_VTYPE_COUNT)
        return fail(c, at, "unknown array element type %u, expected 0..%d", et,
                    QL_GGUF_VTYPE_COUNT - 1);
    if (et == QL_GGUF_ARRAY && c->depth + 1 >= MAX_ARRAY_DEPTH)
        return fail(c, at, "arrays nested deeper than %d levels", MAX_ARRAY_DEPTH);
    st = read_u64(c, &n, "array length");
    if (st)
        return st;
    uint64_t min_elem = min_elem_size(et);
    if (n > remaining(c) / min_elem)
        return fail(c, at, "array of %llu %s elements needs at least %llu bytes, only %llu left",
                    (unsigned long long)n, ql_gguf_vtype_name((int32_t)et),
                    (unsigned long long)(n > UINT64_MAX / min_elem ? UINT64_MAX : n * min_elem),
                    (unsigned long long)remaining(c));
    a->elem_type = (ql_gguf_vtype)et;
    a->n = 0; /* counts the elements read so far, so a failed read frees exactly those */
    if (et == QL_GGUF_STRING || et == QL_GGUF_ARRAY) {
        size_t esz = et == QL_GGUF_STRING ? sizeof(ql_gguf_str) : sizeof(ql_gguf_value);
        a->data = calloc(n ? n : 1, esz);
        if (!a->data)
            return out_of_memory(c, "an array");
        int d = c->depth++;
        for (uint64_t i = 0; i < n; i++) {
            c->elem[d] = i;
            if (et == QL_GGUF_STRING)
                st = read_string(c, &((ql_gguf_str *)a->data)[i], "string");
            else
                st = read_value(c, &((ql_gguf_value *)a->data)[i], QL_GGUF_ARRAY);
            a->n = i + 1;
            if (st)
                return st;
        }
        c->depth--;
        return QL_OK;
    }
    a->data = malloc(n ? n * min_elem : 1);
    if (!a->data)
        return out_of_memory(c, "an array");
    a->n = n;
    uint64_t data_at = c->off;
    st = read_bytes(c, a->data, n * min_elem, "array data");
    if (st)
        return st;
    if (et == QL_GGUF_BOOL) {
        const uint8_t *b = a->data;
        for (uint64_t i = 0; i < n; i++)
            if (b[i] > 1)
                return fail(c, data_at + i, "bool array element %llu is %u, expected 0 or 1",
                            (unsigned long long)i, b[i]);
    }
    return QL_OK;
}

static ql_status read_value(cursor *c, ql_gguf_value *v, uint32_t type)
{
    uint64_t at = c->off;
    if (type >= QL_GGUF_VTYPE_COUNT)
        return fail(c, at, "unknown value type %u, expected 0..%d", type, QL_GGUF_VTYPE_COUNT - 1);
    v->type = (ql_gguf_vtype)type;
    switch (type) {
    case QL_GGUF_STRING:
        return read_string(c, &v->v.str, "string value");
    case QL_GGUF_ARRAY:
        return read_array(c, &v->v.arr);
    case QL_GGUF_BOOL: {
        uint8_t b;
        ql_status st = read_bytes(c, &b, 1, "bool value");
        if (st)
            return st;
        if (b > 1)
            return fail(c, at, "bool value is %u, expected 0 or 1", b);
        v->v.b = b != 0;
        return QL_OK;
    }
    default:
        return read_bytes(c, &v->v, ql_gguf_vtype_size((int32_t)type), "scalar value");
    }
}

/* ========================================================================= */
/* Duplicate names: sort (name, index) pairs, compare neighbours. qsort has no
 * context argument in C11, so the pairs carry the name pointer themselves. */

typedef struct {
    const char *name;
    int64_t index;
} named;

static int cmp_named(const void *a, const void *b)
{
    const named *x = a, *y = b;
    int r = strcmp(x->name, y->name);
    if (r)
        return r;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Sets *first and *second to the file-order indices of the first duplicated name
 * (both -1 when all names differ). The caller passes a scratch array of n pairs. */
static void find_duplicate(named *pairs, int64_t n, int64_t *first, int64_t *second)
{
    *first = *second = -1;
    if (n < 2)
        return;
    qsort(pairs, (size_t)n, sizeof *pairs, cmp_named);
    for (int64_t i = 1; i < n; i++) {
        if (strcmp(pairs[i - 1].name, pairs[i].name) == 0) {
            /* The earliest second occurrence in file order is the most useful to report. */
            if (*second < 0 || pairs[i].index < *second) {
                *first = pairs[i - 1].index;
                *second = pairs[i].index;
            }
        }
    }
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

/* ========================================================================= */

void ql_gguf_close(ql_gguf *g)
{
    if (!g)
        return;
    if (g->parts) {
        /* A split set borrows its keys and tensor names from its files. */
        for (int32_t k = 0; k < g->n_files; k++)
            ql_gguf_close(g->parts[k]);
        free(g->parts);
        free(g->tensors);
        free(g->path);
        free(g);
        return;
    }
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        ql_gguf_value_deinit(&g->kv[i].value);
    }
    free(g->kv);
    for (int64_t i = 0; i < g->n_tensors; i++)
        free(g->tensors[i].name);
    free(g->tensors);
    if (g->owns_map) {
        ql_file_map fm = {g->map, g->map_size};
        ql_file_map_close(&fm);
    }
    free(g->path);
    free(g);
}

bool ql_gguf_type_known(int32_t type)
{
    const ql_type_traits *tr = ql_type_get(type);
    return tr && tr->is_gguf && tr->block_size > 0;
}

/* Magic, version and the two counts. */
static ql_status parse_header(cursor *c, ql_gguf *g, uint64_t *n_tensors, uint64_t *n_kv)
{
    if (c->size < 4)
        return fail(c, 0, "file is %llu bytes, too small for a GGUF header (at least 24 bytes)",
                    (unsigned long long)c->size);
    uint8_t magic[4];
    read_bytes(c, magic, 4, "magic");
    if (memcmp(magic, "GGUF", 4) != 0)
        return fail(c, 0, "bad magic: expected \"GGUF\" (47 47 55 46), got %02x %02x %02x %02x",
                    magic[0], magic[1], magic[2], magic[3]);
    ql_status st = read_u32(c, &g->version, "version");
    if (st)
        return st;
    if (g->version == 0x03000000u || g->version == 0x02000000u)
        return fail(c, 4, "big-endian GGUF files are not supported (version field %08x)",
                    g->version);
    if (g->version != 2 && g->version != 3)
        return fail(c, 4, "unsupported GGUF version %u, expected 2 or 3", g->version);
    if ((st = read_u64(c, n_tensors, "tensor count")) || (st = read_u64(c, n_kv, "metadata count")))
        return st;

    /* Smallest records: a key/value is key length (8) + 1 byte of key + type (4) +
     * 1 byte of value; a tensor info is name length (8) + 1 + n_dims (4) + one
     * dimension (8) + type (4) + offset (8). */
    const uint64_t min_kv = 14, min_tensor = 33;
    if (*n_kv > remaining(c) / min_kv)
        return fail(c, 16,
                    "metadata count %llu cannot fit in the %llu bytes left (at least %llu bytes "
                    "each)",
                    (unsigned long long)*n_kv, (unsigned long long)remaining(c),
                    (unsigned long long)min_kv);
    if (*n_tensors > remaining(c) / min_tensor)
        return fail(c, 8,
                    "tensor count %llu cannot fit in the %llu bytes left (at least %llu bytes "
                    "each)",
                    (unsigned long long)*n_tensors, (unsigned long long)remaining(c),
                    (unsigned long long)min_tensor);
    if (*n_kv * min_kv + *n_tensors * min_tensor > remaining(c))
        return fail(c, 8,
                    "%llu tensor infos and %llu metadata entries need at least %llu bytes, only "
                    "%llu left",
                    (unsigned long long)*n_tensors, (unsigned long long)*n_kv,
                    (unsigned long long)(*n_kv * min_kv + *n_tensors * min_tensor),
                    (unsigned long long)remaining(c));
    return QL_OK;
}

static ql_status parse_kvs(cursor *c, ql_gguf *g, uint64_t n_kv)
{
    ql_status st;
    size_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (!ql_grow((void **)&g->kv, &cap, (size_t)i + 1, sizeof *g->kv))
            return out_of_memory(c, "the metadata table");
        ql_gguf_kv *kv = &g->kv[i];
        kv->offset = c->off;
        snprintf(c->ctx, sizeof c->ctx, "metadata entry %llu", (unsigned long long)i);
        ql_gguf_str key;
        if ((st = read_string(c, &key, "key")))
            return st;
        kv->key = key.ptr;
        g->n_kv = (int64_t)i + 1;
        if (key.len == 0)
            return fail(c, kv->offset, "empty key, expected a name such as 'general.name'");
        set_ctx(c, "key", key.ptr, key.len);
        if (strlen(key.ptr) != key.len)
            return fail(c, kv->offset, "key contains a NUL byte at position %zu", strlen(key.ptr));
        uint32_t type;
        if ((st = read_u32(c, &type, "value type")))
            return st;
        c->depth = 0;
        if ((st = read_value(c, &kv->value, type)))
            return st;
    }
    c->ctx[0] = '\0';

    named *pairs = malloc((n_kv ? n_kv : 1) * sizeof *pairs);
    if (!pairs)
        return out_of_memory(c, "duplicate detection");
    for (uint64_t i = 0; i < n_kv; i++)
        pairs[i] = (named){g->kv[i].key, (int64_t)i};
    int64_t first, dup;
    find_duplicate(pairs, (int64_t)n_kv, &first, &dup);
    free(pairs);
    if (dup >= 0) {
        set_ctx(c, "key", g->kv[dup].key, strlen(g->kv[dup].key));
        return fail(c, g->kv[dup].offset,
                    "duplicate metadata key (entries %lld and %lld; first at offset %llu)",
                    (long long)first, (long long)dup, (unsigned long long)g->kv[first].offset);
    }

    g->alignment = QL_GGUF_DEFAULT_ALIGNMENT;
    const ql_gguf_kv *akv = ql_gguf_find_kv(g, "general.alignment");
    if (akv) {
        snprintf(c->ctx, sizeof c->ctx, "key 'general.alignment'");
        if (akv->value.type != QL_GGUF_UINT32)
            return fail(c, akv->offset, "value has type %s, expected u32",
                        ql_gguf_vtype_name(akv->value.type));
        uint32_t a = akv->value.v.u32;
        if (a == 0 || (a & (a - 1)) != 0)
            return fail(c, akv->offset, "alignment %u is not a power of two, expected 1, 2, 4, ...",
                        a);
        g->alignment = a;
        c->ctx[0] = '\0';
    }
    return QL_OK;
}

/* Bytes of a tensor of a known type: rows x row bytes, with every product checked. */
static ql_status tensor_nbytes(cursor *c, ql_gguf_tensor *t, int64_t nel)
{
    const ql_type_traits *tr = ql_type_get(t->type);
    if (t->ne[0] % tr->block_size != 0)
        return fail(c, t->info_offset,
                    "type %s: row length ne[0] = %lld is not a multiple of the block size %lld",
                    tr->name, (long long)t->ne[0], (long long)tr->block_size);
    if (nel == 0) {
        t->nbytes = 0;
        return QL_OK;
    }
    uint64_t blocks_per_row = (uint64_t)(t->ne[0] / tr->block_size);
    uint64_t rows = (uint64_t)(nel / t->ne[0]);
    if (blocks_per_row > UINT64_MAX / tr->type_size ||
        blocks_per_row * tr->type_size > UINT64_MAX / rows)
        return fail(c, t->info_offset, "type %s: byte size of %lld elements overflows 64 bits",
                    tr->name, (long long)nel);
    t->nbytes = blocks_per_row * tr->type_size * rows;
    return QL_OK;
}

static ql_status parse_tensor_info(cursor *c, ql_gguf_tensor *t, uint64_t i, uint64_t alignment)
{
    ql_status st;
    t->info_offset = c->off;
    t->file = 0;
    snprintf(c->ctx, sizeof c->ctx, "tensor info %llu", (unsigned long long)i);
    ql_gguf_str name;
    if ((st = read_string(c, &name, "tensor name")))
        return st;
    t->name = name.ptr;
    if (name.len == 0)
        return fail(c, t->info_offset, "empty tensor name");
    set_ctx(c, "tensor", name.ptr, name.len);
    if (strlen(name.ptr) != name.len)
        return fail(c, t->info_offset, "tensor name contains a NUL byte at position %zu",
                    strlen(name.ptr));
    if (name.len > MAX_TENSOR_NAME)
        return fail(c, t->info_offset, "tensor name is %llu bytes, at most %d allowed",
                    (unsigned long long)name.len, MAX_TENSOR_NAME);
    uint64_t at = c->off;
    if ((st = read_u32(c, &t->n_dims, "n_dims")))
        return st;
    if (t->n_dims == 0 || t->n_dims > QL_GGUF_MAX_DIMS)
        return fail(c, at, "%u dimensions, expected 1..%d", t->n_dims, QL_GGUF_MAX_DIMS);
    for (int d = 0; d < QL_GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        at = c->off;
        if ((st = read_u64(c, &ne, "dimension")))
            return st;
        if (ne > (uint64_t)INT64_MAX) {
            int64_t as_signed;
            memcpy(&as_signed, &ne, sizeof ne);
            return fail(c, at, "dimension ne[%u] is %lld (as unsigned %llu), expected 0..%lld", d,
                        (long long)as_signed, (unsigned long long)ne, (long long)INT64_MAX);
        }
        t->ne[d] = (int64_t)ne;
    }
    /* The element count must fit in int64 (ggml's own limit). */
    int64_t nel = 1;
    for (int d = 0; d < QL_GGUF_MAX_DIMS; d++) {
        if (t->ne[d] != 0 && nel > INT64_MAX / t->ne[d])
            return fail(c, t->info_offset,
                        "product of dimensions %lld x %lld x %lld x %lld overflows int64",
                        (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                        (long long)t->ne[3]);
        nel *= t->ne[d];
    }
    uint32_t type;
    at = c->off;
    if ((st = read_u32(c, &type, "type")))
        return st;
    if (type > INT32_MAX)
        return fail(c, at, "type id %u is out of range, expected 0..%d", type, INT32_MAX);
    t->type = (int32_t)type;
    at = c->off;
    if ((st = read_u64(c, &t->offset, "data offset")))
        return st;
    if (ql_gguf_type_known(t->type) && (st = tensor_nbytes(c, t, nel)))
        return st;
    if (t->offset % alignment != 0)
        return fail(c, at, "data offset %llu is not a multiple of the alignment %llu",
                    (unsigned long long)t->offset, (unsigned long long)alignment);
    return QL_OK;
}

static ql_status parse_tensors(cursor *c, ql_gguf *g, uint64_t n_tensors)
{
    ql_status st;
    size_t cap = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (!ql_grow((void **)&g->tensors, &cap, (size_t)i + 1, sizeof *g->tensors))
            return out_of_memory(c, "the tensor table");
        g->n_tensors = (int64_t)i + 1;
        if ((st = parse_tensor_info(c, &g->tensors[i], i, g->alignment)))
            return st;
    }
    c->ctx[0] = '\0';

    named *pairs = malloc((n_tensors ? n_tensors : 1) * sizeof *pairs);
    if (!pairs)
        return out_of_memory(c, "duplicate detection");
    for (uint64_t i = 0; i < n_tensors; i++)
        pairs[i] = (named){g->tensors[i].name, (int64_t)i};
    int64_t first, dup;
    find_duplicate(pairs, (int64_t)n_tensors, &first, &dup);
    free(pairs);
    if (dup >= 0) {
        const ql_gguf_tensor *t = &g->tensors[dup];
        set_ctx(c, "tensor", t->name, strlen(t->name));
        return fail(c, t->info_offset,
                    "duplicate tensor name (tensor infos %lld and %lld; first at offset %llu)",
                    (long long)first, (long long)dup,
                    (unsigned long long)g->tensors[first].info_offset);
    }
    return QL_OK;
}

/* Data section: every tensor of a known type inside the file, no two overlapping. */
static ql_status check_data(cursor *c, ql_gguf *g)
{
    uint64_t data = c->off;
    if (data % g->alignment)
        data += g->alignment - data % g->alignment;
    g->data_offset = data;
    if (g->n_tensors == 0)
        return QL_OK;
    if (data > g->file_size)
        return fail(c, c->off,
                    "tensor data would start at offset %llu (padded to a multiple of %llu), "
                    "past the end of the file (%llu bytes)",
                    (unsigned long long)data, (unsigned long long)g->alignment,
                    (unsigned long long)g->file_size);
    uint64_t avail = g->file_size - data;
    span *spans = malloc((size_t)g->n_tensors * sizeof *spans);
    if (!spans)
        return out_of_memory(c, "the data layout check");
    ql_status st = QL_OK;
    int64_t n_spans = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        ql_gguf_tensor *t = &g->tensors[i];
        set_ctx(c, "tensor", t->name, strlen(t->name));
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            st = fail(c, t->info_offset,
                      "data [%llu, %llu) lies outside the file: the data section is bytes [%llu, "
                      "%llu)",
                      (unsigned long long)(data + t->offset),
                      (unsigned long long)(t->offset > UINT64_MAX - data - t->nbytes
                                               ? UINT64_MAX
                                               : data + t->offset + t->nbytes),
                      (unsigned long long)data, (unsigned long long)g->file_size);
            goto out_spans;
        }
        /* Tensors of unknown types have no computable size: they get no data
         * pointer and take no part in the overlap check. */
        if (!ql_gguf_type_known(t->type))
            continue;
        t->data = (const uint8_t *)g->map + data + t->offset;
        spans[n_spans++] = (span){t->offset, t->offset + t->nbytes, i};
    }
    c->ctx[0] = '\0';
    qsort(spans, (size_t)n_spans, sizeof *spans, cmp_span);
    for (int64_t i = 1; i < n_spans; i++) {
        if (spans[i].start < spans[i - 1].end) {
            const ql_gguf_tensor *a = &g->tensors[spans[i - 1].index];
            const ql_gguf_tensor *b = &g->tensors[spans[i].index];
            set_ctx(c, "tensor", b->name, strlen(b->name));
            char an[MSG_NAME_MAX * 4 + 8];
            escape_name(an, sizeof an, a->name, strlen(a->name), MSG_NAME_MAX);
            st = fail(c, b->info_offset,
                      "tensor data overlaps: [%llu, %llu) starts inside '%s' [%llu, %llu) "
                      "(file offsets)",
                      (unsigned long long)(data + b->offset),
                      (unsigned long long)(data + b->offset + b->nbytes), an,
                      (unsigned long long)(data + a->offset),
                      (unsigned long long)(data + a->offset + a->nbytes));
            goto out_spans;
        }
    }
out_spans:
    free(spans);
    return st;
}

static ql_status parse(ql_gguf *g, ql_error *err)
{
    cursor c;
    memset(&c, 0, sizeof c);
    c.base = g->map;
    c.size = g->file_size;
    c.path = g->path;
    c.err = err;
    uint64_t n_tensors, n_kv;
    ql_status st = parse_header(&c, g, &n_tensors, &n_kv);
    if (!st)
        st = parse_kvs(&c, g, n_kv);
    if (!st)
        st = parse_tensors(&c, g, n_tensors);
    if (!st)
        st = check_data(&c, g);
    return st;
}

static ql_status open_common(ql_gguf *g, ql_gguf **out, ql_error *err)
{
    g->n_files = 1;
    ql_status st = parse(g, err);
    if (st) {
        ql_gguf_close(g);
        *out = NULL;
        return st;
    }
    *out = g;
    return QL_OK;
}

/* One file alone: what every file of a split set is read as. */
static ql_status open_file(ql_gguf **out, const char *path, ql_error *err)
{
    *out = NULL;
    ql_file_map fm;
    ql_status st = ql_file_map_open(&fm, path, "GGUF file", err);
    if (st)
        return st;
    ql_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = ql_strdup(path))) {
        free(g);
        ql_file_map_close(&fm);
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
    }
    g->file_size = fm.size;
    g->map = (void *)(uintptr_t)fm.data;
    g->map_size = fm.size;
    g->owns_map = true;
    return open_common(g, out, err);
}

/* ========================================================================= */
/* Split sets                                                                 */

bool ql_gguf_split_path(char *out, size_t size, const char *prefix, int k, int n)
{
    const int len = snprintf(out, size, "%s-%05d-of-%05d.gguf", prefix, k + 1, n);
    return len > 0 && (size_t)len < size;
}

bool ql_gguf_split_prefix(const char *path, char *prefix, size_t size, int *k, int *n)
{
    /* "-DDDDD-of-DDDDD.gguf": llama.cpp's %05d, which grows past 99999. */
    const size_t len = strlen(path);
    static const char ext[] = ".gguf";
    if (len < sizeof ext || strcmp(path + len - (sizeof ext - 1), ext) != 0)
        return false;
    size_t end = len - (sizeof ext - 1), i = end;
    while (i > 0 && path[i - 1] >= '0' && path[i - 1] <= '9')
        i--;
    const size_t n_at = i;
    if (end - n_at < 5 || i < 4 || memcmp(path + i - 4, "-of-", 4) != 0)
        return false;
    i -= 4;
    const size_t k_end = i;
    while (i > 0 && path[i - 1] >= '0' && path[i - 1] <= '9')
        i--;
    if (k_end - i < 5 || i < 1 || path[i - 1] != '-' || end - n_at > 9 || k_end - i > 9)
        return false;
    int kk = 0, nn = 0;
    for (size_t j = i; j < k_end; j++)
        kk = kk * 10 + (path[j] - '0');
    for (size_t j = n_at; j < end; j++)
        nn = nn * 10 + (path[j] - '0');
    if (kk < 1 || nn < 1 || kk > nn || i - 1 >= size)
        return false;
    memcpy(prefix, path, i - 1);
    prefix[i - 1] = '\0';
    *k = kk - 1;
    *n = nn;
    return true;
}

ql_status ql_gguf_sha256(const ql_gguf *g, char out[65], ql_error *err)
{
    if (g->n_files == 1)
        return ql_sha256_file(g->path, out, err);
    char *lines = malloc((size_t)g->n_files * 65);
    if (!lines)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", g->path);
    ql_status st = QL_OK;
    for (int32_t k = 0; k < g->n_files && !st; k++) {
        st = ql_sha256_file(g->parts[k]->path, lines + (size_t)k * 65, err);
        lines[(size_t)k * 65 + 64] = '\n';
    }
    if (!st)
        ql_sha256_hex(lines, (size_t)g->n_files * 65, out);
    free(lines);
    return st;
}

const ql_gguf *ql_gguf_file(const ql_gguf *g, int k)
{
    QL_ASSERT(k >= 0 && k < g->n_files);
    return g->parts ? g->parts[k] : g;
}

/* A split key as an integer: absent (false), or present and an integer (true); other
 * types are an error, as llama.cpp's loader refuses them. */
static ql_status split_key(const ql_gguf *g, const char *key, bool *present, int64_t *v,
                           ql_error *err)
{
    const ql_gguf_kv *kv = ql_gguf_find_kv(g, key);
    *present = kv != NULL;
    if (!kv)
        return QL_OK;
    ql_error kerr;
    ql_error_clear(&kerr);
    if (!ql_gguf_get_i64(g, key, v, &kerr))
        return ql_error_set(err, QL_EFORMAT, "%s: offset %llu: key '%s': %s", g->path,
                            (unsigned long long)kv->offset, key,
                            kerr.msg[0] ? kerr.msg : "not an integer");
    return QL_OK;
}

/* File k of the set named prefix, checked against the first file's split keys. */
static ql_status open_part(ql_gguf **out, const char *first, const char *prefix, int k, int n,
                           ql_error *err)
{
    char path[4096];
    if (!ql_gguf_split_path(path, sizeof path, prefix, k, n))
        return ql_error_set(err, QL_EINVAL, "%s: the path of split file %d of %d is too long",
                            first, k + 1, n);
    if (!ql_file_exists(path))
        return ql_error_set(err, QL_ENOTFOUND,
                            "%s: split file %d of %d is missing: no %s (the set %s-000NN-of-%05d"
                            ".gguf has %d files, split.count)",
                            first, k + 1, n, path, prefix, n, n);
    ql_status st = open_file(out, path, err);
    if (st)
        return ql_error_prefix(err, "split file %d of %d of %s: ", k + 1, n, first);
    bool has_no, has_count;
    int64_t no = -1, count = -1;
    if ((st = split_key(*out, QL_GGUF_SPLIT_NO, &has_no, &no, err)) ||
        (st = split_key(*out, QL_GGUF_SPLIT_COUNT, &has_count, &count, err)))
        return st;
    if (!has_no || !has_count)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: no key '%s', expected %s = %d and %s = %d (split file %d of %s)",
                            path, has_no ? QL_GGUF_SPLIT_COUNT : QL_GGUF_SPLIT_NO, QL_GGUF_SPLIT_NO,
                            k, QL_GGUF_SPLIT_COUNT, n, k + 1, first);
    if (no != k)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: %s is %lld, expected %d (its name makes it file %d of %d)", path,
                            QL_GGUF_SPLIT_NO, (long long)no, k, k + 1, n);
    if (count != n)
        return ql_error_set(err, QL_EFORMAT, "%s: %s is %lld, expected %d as in the first file %s",
                            path, QL_GGUF_SPLIT_COUNT, (long long)count, n, first);
    return QL_OK;
}

/* The set whose first file is g0 (split.count = n): every file, then one table. */
static ql_status open_set(ql_gguf **out, ql_gguf *g0, int64_t n, ql_error *err)
{
    ql_status st;
    char prefix[4096];
    int k0 = 0, n0 = 0;
    if (!ql_gguf_split_prefix(g0->path, prefix, sizeof prefix, &k0, &n0) || k0 != 0 || n0 != n) {
        st = ql_error_set(err, QL_EINVAL,
                          "%s: the first file of a split set of %lld files (split.count), but its "
                          "name does not end in -00001-of-%05lld.gguf, so the other files cannot "
                          "be found (rename the files as gguf-split names them)",
                          g0->path, (long long)n, (long long)n);
        ql_gguf_close(g0);
        return st;
    }
    ql_gguf *g = calloc(1, sizeof *g);
    ql_gguf **parts = calloc((size_t)n, sizeof *parts);
    if (!g || !parts || !(g->path = ql_strdup(g0->path))) {
        free(g);
        free(parts);
        ql_gguf_close(g0);
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory for a split set", g0->path);
    }
    g->parts = parts;
    g->n_files = (int32_t)n;
    parts[0] = g0;
    for (int32_t k = 1; k < g->n_files; k++)
        if ((st = open_part(&parts[k], g0->path, prefix, k, (int)n, err)))
            goto fail;
    int64_t total = 0;
    for (int32_t k = 0; k < g->n_files; k++)
        total += parts[k]->n_tensors;
    bool has_count;
    int64_t want = -1;
    if ((st = split_key(g0, QL_GGUF_SPLIT_TENSORS_COUNT, &has_count, &want, err)))
        goto fail;
    if (has_count && want != total) {
        st = ql_error_set(err, QL_EFORMAT, "%s: %s is %lld, but the %d files hold %lld tensors",
                          g0->path, QL_GGUF_SPLIT_TENSORS_COUNT, (long long)want, (int)n,
                          (long long)total);
        goto fail;
    }
    if (!(g->tensors = calloc((size_t)(total ? total : 1), sizeof *g->tensors))) {
        st = ql_error_set(err, QL_ENOMEM, "%s: out of memory for %lld tensors", g0->path,
                          (long long)total);
        goto fail;
    }
    for (int32_t k = 0; k < g->n_files; k++)
        for (int64_t i = 0; i < parts[k]->n_tensors; i++) {
            g->tensors[g->n_tensors] = parts[k]->tensors[i];
            g->tensors[g->n_tensors++].file = k;
        }
    /* A name in two files: llama.cpp refuses the model ("tensor '...' is duplicated"). */
    named *pairs = malloc((size_t)(total ? total : 1) * sizeof *pairs);
    if (!pairs) {
        st = ql_error_set(err, QL_ENOMEM, "%s: out of memory", g0->path);
        goto fail;
    }
    for (int64_t i = 0; i < total; i++)
        pairs[i] = (named){g->tensors[i].name, i};
    int64_t first, dup;
    find_duplicate(pairs, total, &first, &dup);
    free(pairs);
    if (dup >= 0) {
        const ql_gguf_tensor *a = &g->tensors[first], *b = &g->tensors[dup];
        st = ql_error_set(err, QL_EFORMAT,
                          "%s: tensor '%s' is in split file %d and again in split file %d",
                          g0->path, b->name, (int)a->file + 1, (int)b->file + 1);
        goto fail;
    }
    g->version = g0->version;
    g->alignment = g0->alignment;
    g->data_offset = g0->data_offset;
    g->n_kv = g0->n_kv;
    g->kv = g0->kv;
    for (int32_t k = 0; k < g->n_files; k++)
        g->file_size += parts[k]->file_size;
    *out = g;
    return QL_OK;
fail:
    ql_gguf_close(g);
    return st;
}

ql_status ql_gguf_open(ql_gguf **out, const char *path, ql_error *err)
{
    ql_status st = open_file(out, path, err);
    if (st)
        return st;
    ql_gguf *g0 = *out;
    bool has_count, has_no;
    int64_t count = 1, no = 0;
    if ((st = split_key(g0, QL_GGUF_SPLIT_COUNT, &has_count, &count, err)) ||
        (st = split_key(g0, QL_GGUF_SPLIT_NO, &has_no, &no, err)))
        goto fail;
    if (!has_count || count == 1) {
        if (has_no && no != 0) {
            st = ql_error_set(err, QL_EFORMAT, "%s: %s is %lld in a file of a set of 1", path,
                              QL_GGUF_SPLIT_NO, (long long)no);
            goto fail;
        }
        return QL_OK;
    }
    if (count < 1 || count > UINT16_MAX) {
        st = ql_error_set(err, QL_EFORMAT, "%s: %s is %lld, expected 1..%d", path,
                          QL_GGUF_SPLIT_COUNT, (long long)count, UINT16_MAX);
        goto fail;
    }
    if (no != 0) {
        /* llama.cpp: "model must be loaded with the first split". */
        char prefix[4096], first[4096 + QL_GGUF_SPLIT_SUFFIX_MAX];
        int k, n;
        if (ql_gguf_split_prefix(path, prefix, sizeof prefix, &k, &n) &&
            ql_gguf_split_path(first, sizeof first, prefix, 0, (int)count))
            st = ql_error_set(
                err, QL_EINVAL, "%s: split file %lld of %lld (%s = %lld): give the first file, %s",
                path, (long long)no + 1, (long long)count, QL_GGUF_SPLIT_NO, (long long)no, first);
        else
            st = ql_error_set(err, QL_EINVAL,
                              "%s: split file %lld of %lld (%s = %lld): give the set's first file",
                              path, (long long)no + 1, (long long)count, QL_GGUF_SPLIT_NO,
                              (long long)no);
        goto fail;
    }
    *out = NULL;
    return open_set(out, g0, count, err);
fail:
    ql_gguf_close(g0);
    *out = NULL;
    return st;
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
