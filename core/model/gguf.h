/* qlab: GGUF reader and writer (versions 2 and 3).
 *
 * File layout (little endian):
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x { string key | u32 value type | value }
 *   n_tensors x { string name | u32 n_dims | n_dims x u64 ne | u32 ggml type | u64 offset }
 *   padding to general.alignment (default 32)
 *   tensor data; each tensor at data_start + offset, offsets multiples of the alignment
 * A string is u64 length + bytes (no NUL). An array is u32 element type + u64 count +
 * elements; arrays may nest.
 *
 * The reader memory-maps the file and never allocates from a count it has not
 * checked against the bytes left (the key and tensor tables grow as records are
 * parsed). It checks string lengths, value and element types, array nesting
 * (QL_GGUF_MAX_ARRAY_DEPTH), bools, general.alignment (u32, power of two), tensor
 * names (1..63 bytes, unique), dimensions (1..4, each >= 0, product and byte size
 * without overflow), row length against the type's block size, offsets aligned,
 * tensor data inside the file and not overlapping, unique keys. Errors read
 * "<file>: offset <n>: <key or tensor>: <problem>, expected <x>, got <y>".
 * Metadata is copied into the ql_gguf structure (NUL-terminated strings, aligned
 * arrays); tensor data is not copied: ql_gguf_tensor.data points into the mapping
 * and stays valid until ql_gguf_close(). Tensors of a type qlab does not know keep
 * their shape and offset, with nbytes 0 and data NULL. Reader and writer keep no
 * global state: different objects may be used from different threads.
 *
 * Split sets. A model published as NAME-00001-of-0000N.gguf ... NAME-0000N-of-0000N.gguf
 * (gguf-split, llama-quantize --keep-split) opens as one model from its first file:
 * ql_gguf_open sees split.count > 1 in it and reads the other files by name, each
 * validated on its own, checked as llama.cpp's loader checks them (the first file is
 * split.no 0 and names the set, every file is present and says split.no k and the
 * same split.count, no tensor name twice, as many tensors as split.tensors.count).
 * The set's object has the first file's keys, version, alignment and data offset,
 * every file's tensors in file order (each with the index of its file), and
 * file_size the bytes of all files; parts[] holds each file read alone. */
#ifndef QL_GGUF_H
#define QL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define QL_GGUF_MAX_DIMS          4
#define QL_GGUF_DEFAULT_ALIGNMENT 32
/* Deepest array nesting the reader and writer accept (real files nest at most twice). */
#define QL_GGUF_MAX_ARRAY_DEPTH 8

typedef enum {
    QL_GGUF_UINT8 = 0,
    QL_GGUF_INT8 = 1,
    QL_GGUF_UINT16 = 2,
    QL_GGUF_INT16 = 3,
    QL_GGUF_UINT32 = 4,
    QL_GGUF_INT32 = 5,
    QL_GGUF_FLOAT32 = 6,
    QL_GGUF_BOOL = 7,
    QL_GGUF_STRING = 8,
    QL_GGUF_ARRAY = 9,
    QL_GGUF_UINT64 = 10,
    QL_GGUF_INT64 = 11,
    QL_GGUF_FLOAT64 = 12,
    QL_GGUF_VTYPE_COUNT
} ql_gguf_vtype;

typedef struct {
    char *ptr; /* NUL-terminated copy (may contain inner NULs: use len) */
    uint64_t len;
} ql_gguf_str;

typedef struct ql_gguf_value ql_gguf_value;

typedef struct {
    ql_gguf_vtype elem_type;
    uint64_t n;
    /* Scalars: a packed, naturally aligned array of n elements (bool as uint8_t).
     * STRING: n ql_gguf_str.  ARRAY: n ql_gguf_value (each of type ARRAY). */
    void *data;
} ql_gguf_array;

struct ql_gguf_value {
    ql_gguf_vtype type;
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        float f32;
        bool b;
        uint64_t u64;
        int64_t i64;
        double f64;
        ql_gguf_str str;
        ql_gguf_array arr;
    } v;
};

typedef struct {
    char *key;
    ql_gguf_value value;
    uint64_t offset; /* byte offset of the key in the file */
} ql_gguf_kv;

typedef struct {
    char *name;
    uint32_t n_dims;
    int64_t ne[QL_GGUF_MAX_DIMS]; /* ggml order: ne[0] is the row length (innermost); unused = 1 */
    int32_t type;                 /* ggml type id; may be one qlab does not know */
    uint64_t offset;              /* relative to data_offset */
    uint64_t nbytes;              /* 0 when the type is unknown (size not computable) */
    const void *data;             /* into the mapping; NULL when the type is unknown */
    uint64_t info_offset;         /* byte offset of the tensor-info record in the file */
    int32_t file;                 /* which file of a split set holds it (0: the first) */
} ql_gguf_tensor;

typedef struct ql_gguf ql_gguf;

struct ql_gguf {
    char *path;
    uint32_t version;
    uint64_t file_size; /* a split set: the bytes of all its files */
    uint64_t alignment;
    uint64_t data_offset; /* start of the tensor data section */
    int64_t n_kv;
    ql_gguf_kv *kv;
    int64_t n_tensors;
    ql_gguf_tensor *tensors;
    int32_t n_files; /* 1, or the files of a split set */
    ql_gguf **parts; /* a split set: its files, each read alone, in order; else NULL */
    /* private */
    void *map;
    size_t map_size;
    bool owns_map;
};

/* The keys gguf-split writes into every file of a set (u16, u16, i32). */
#define QL_GGUF_SPLIT_NO            "split.no"
#define QL_GGUF_SPLIT_COUNT         "split.count"
#define QL_GGUF_SPLIT_TENSORS_COUNT "split.tensors.count"
/* Longest suffix of a split file's name: "-00001-of-00004.gguf" (5 digits each). */
#define QL_GGUF_SPLIT_SUFFIX_MAX 32

/* Path of file k (0-based) of n of a split set named prefix, as llama.cpp names them:
 * "<prefix>-%05d-of-%05d.gguf" with k + 1 and n. Returns false when it does not fit. */
bool ql_gguf_split_path(char *out, size_t size, const char *prefix, int k, int n);

/* The prefix of a split file's path (path without "-0000k-of-0000n.gguf") when its
 * name ends so; *k (0-based) and *n receive the numbers. Returns false otherwise. */
bool ql_gguf_split_prefix(const char *path, char *prefix, size_t size, int *k, int *n);

/* The model's identity: the SHA-256 of its file, or for a split set the SHA-256 of
 * its files' SHA-256s (64 hex digits each, in order, one line each), so that any
 * file of the set changing changes it. */
ql_status ql_gguf_sha256(const ql_gguf *g, char out[65], ql_error *err);

/* File k of g: g itself when it is one file, else g->parts[k]. */
const ql_gguf *ql_gguf_file(const ql_gguf *g, int k);

/* Opens and validates a GGUF file, or the split set whose first file path is. On
 * error *out is NULL and err names the file, the byte offset, the key or tensor, and
 * expected vs actual. */
ql_status ql_gguf_open(ql_gguf **out, const char *path, ql_error *err);

/* Same over a caller-owned buffer (fuzzing, tests); name is used in messages.
 * The buffer must outlive the returned object. */
ql_status ql_gguf_open_buffer(ql_gguf **out, const void *buf, size_t size, const char *name,
                              ql_error *err);

void ql_gguf_close(ql_gguf *g);

/* Lookups (NULL / -1 when absent). */
const ql_gguf_kv *ql_gguf_find_kv(const ql_gguf *g, const char *key);
const ql_gguf_tensor *ql_gguf_find_tensor(const ql_gguf *g, const char *name);
int64_t ql_gguf_tensor_index(const ql_gguf *g, const char *name);

/* Typed getters. They return false when the key is absent; when present with
 * an incompatible type or a value out of range they return false and set err
 * (err may be NULL). Integer getters accept any integer type whose value fits. */
bool ql_gguf_get_u32(const ql_gguf *g, const char *key, uint32_t *out, ql_error *err);
bool ql_gguf_get_i64(const ql_gguf *g, const char *key, int64_t *out, ql_error *err);
bool ql_gguf_get_f32(const ql_gguf *g, const char *key, float *out, ql_error *err);
bool ql_gguf_get_bool(const ql_gguf *g, const char *key, bool *out, ql_error *err);
/* Returns the NUL-terminated string or NULL. */
const char *ql_gguf_get_str(const ql_gguf *g, const char *key, ql_error *err);
/* Array of a given element type (NULL when absent or of another type). */
const ql_gguf_array *ql_gguf_get_arr(const ql_gguf *g, const char *key, ql_gguf_vtype elem,
                                     ql_error *err);

/* True when qlab knows the byte layout of a GGUF tensor type id (block size and
 * bytes per block), so its size can be computed. Unknown ids, and qlab's own
 * in-memory schemes, are shown as "type id N". */
bool ql_gguf_type_known(int32_t type);

/* Number of elements of a tensor (product of ne). */
int64_t ql_gguf_tensor_nelements(const ql_gguf_tensor *t);

/* PyTorch-order shape: out[0] is the outermost dimension; returns n_dims. */
uint32_t ql_gguf_tensor_shape(const ql_gguf_tensor *t, int64_t out[QL_GGUF_MAX_DIMS]);

/* Name of a value type ("u32", "str", "arr", ...). */
const char *ql_gguf_vtype_name(int32_t t);

/* Size in bytes of a scalar value type (0 for STRING/ARRAY/unknown). */
size_t ql_gguf_vtype_size(int32_t t);

/* Deep copy / free of a value (for the writer and for tools that edit metadata).
 * The copy checks the source first (QL_EINVAL for an unknown type, an array of
 * arrays whose elements are not arrays, a bool other than 0/1, nesting deeper
 * than QL_GGUF_MAX_ARRAY_DEPTH); on error dst is left empty. */
ql_status ql_gguf_value_copy(ql_gguf_value *dst, const ql_gguf_value *src, ql_error *err);
void ql_gguf_value_deinit(ql_gguf_value *v);

/* Deep equality: same type, same elements; numbers compared bitwise. */
bool ql_gguf_value_equal(const ql_gguf_value *a, const ql_gguf_value *b);

/* ---------------------------------------------------------------------------
 * Writer: metadata and tensor infos first, then tensor data streamed one tensor
 * at a time (peak memory is one tensor). general.alignment is always written.
 * The file is written to PATH.tmp and renamed on ql_gguf_writer_finish(), so a
 * failed write never leaves a half file under the final name. */
typedef struct ql_gguf_writer ql_gguf_writer;

ql_status ql_gguf_writer_alloc(ql_gguf_writer **out, ql_error *err);
void ql_gguf_writer_free(ql_gguf_writer *w); /* also removes an unfinished temp file */

/* Alignment for tensor data (power of two; default 32). Call before begin. */
ql_status ql_gguf_writer_set_alignment(ql_gguf_writer *w, uint64_t alignment, ql_error *err);

/* Adds or replaces a key (deep copy of the value). general.alignment is managed
 * by the writer and ignored here. */
ql_status ql_gguf_writer_set_kv(ql_gguf_writer *w, const char *key, const ql_gguf_value *v,
                                ql_error *err);
ql_status ql_gguf_writer_set_u32(ql_gguf_writer *w, const char *key, uint32_t v, ql_error *err);
ql_status ql_gguf_writer_set_i32(ql_gguf_writer *w, const char *key, int32_t v, ql_error *err);
ql_status ql_gguf_writer_set_f32(ql_gguf_writer *w, const char *key, float v, ql_error *err);
ql_status ql_gguf_writer_set_bool(ql_gguf_writer *w, const char *key, bool v, ql_error *err);
ql_status ql_gguf_writer_set_str(ql_gguf_writer *w, const char *key, const char *v, ql_error *err);
/* Array of scalars (elem not STRING/ARRAY), n elements packed in data. */
ql_status ql_gguf_writer_set_arr(ql_gguf_writer *w, const char *key, ql_gguf_vtype elem,
                                 const void *data, uint64_t n, ql_error *err);
ql_status ql_gguf_writer_set_str_arr(ql_gguf_writer *w, const char *key, const char *const *strs,
                                     uint64_t n, ql_error *err);
/* Copies every key of a reader except general.alignment and the split keys (a writer
 * writes one file; a split set's writer sets them itself). */
ql_status ql_gguf_writer_copy_kvs(ql_gguf_writer *w, const ql_gguf *src, ql_error *err);
bool ql_gguf_writer_remove_kv(ql_gguf_writer *w, const char *key);

/* Declares a tensor (in file order). nbytes must equal the type's size for ne. */
ql_status ql_gguf_writer_add_tensor(ql_gguf_writer *w, const char *name, uint32_t n_dims,
                                    const int64_t *ne, int32_t type, uint64_t nbytes,
                                    ql_error *err);

/* Writes the header, metadata and tensor table; opens the output file. */
ql_status ql_gguf_writer_begin(ql_gguf_writer *w, const char *path, ql_error *err);
/* Writes the data of the next tensor in declaration order (exactly nbytes). */
ql_status ql_gguf_writer_write_tensor(ql_gguf_writer *w, const void *data, uint64_t nbytes,
                                      ql_error *err);
/* Checks all tensors were written, flushes, renames into place. */
ql_status ql_gguf_writer_finish(ql_gguf_writer *w, ql_error *err);

/* Total file size the writer will produce (valid after all tensors are added). */
uint64_t ql_gguf_writer_file_size(const ql_gguf_writer *w);

#endif
