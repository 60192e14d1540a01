/* qlab: the type-traits table.
 *
 * One entry per tensor type: its GGUF spelling, ggml type id, block size,
 * bytes per block and the reference quantize/dequantize functions that define
 * it. Ids below QL_TYPE_GGML_COUNT are ggml's own (they appear in GGUF files);
 * the qlab-only weight schemes (INT8_ROW, Q8_0_XC) live above and are never
 * written to a GGUF file under their own id. */
#ifndef QL_TYPES_H
#define QL_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "formats/type_ids.h"

/* Quantizes nrows rows of n_per_row floats into dst; returns bytes written.
 * imatrix (n_per_row importance weights, may be NULL) selects ggml's weighted
 * search where the format has one, exactly as ggml_quantize_chunk does. */
typedef size_t (*ql_quantize_fn)(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                                 const float *imatrix);

/* Dequantizes nrows rows of n_per_row values. */
typedef void (*ql_dequantize_fn)(const void *src, float *dst, int64_t nrows, int64_t n_per_row);

typedef struct {
    const char *name;        /* GGUF spelling: "Q4_K", "IQ4_XS", "F16" */
    ql_type type;            /* ggml type id (or qlab scheme id) */
    int64_t block_size;      /* values per block; 0 = one block per row (INT8_ROW) */
    size_t type_size;        /* bytes per block (INT8_ROW: bytes per row besides the values) */
    bool is_gguf;            /* may be written to a GGUF file under this id */
    ql_type storage;         /* type id used in a GGUF file (Q8_0 for Q8_0_XC) */
    bool requires_imatrix;   /* ggml refuses to quantize it without an importance matrix */
    bool needs_grids;        /* needs the IQ lattice codebooks (see iq_grids.h) */
    ql_quantize_fn quantize; /* NULL: qlab cannot produce this type */
    ql_dequantize_fn dequantize; /* NULL: qlab cannot read this type */
} ql_type_traits;

/* Traits of a type id, or NULL for an id qlab does not know. */
const ql_type_traits *ql_type_get(int32_t type);

/* Traits by GGUF name, case-insensitive ("q4_k" works), or NULL. */
const ql_type_traits *ql_type_by_name(const char *name);

/* Name of a type id; "type id N" (in a static buffer per thread) when unknown. */
const char *ql_type_name(int32_t type);

/* Bytes of one row of n_per_row values; 0 when the row does not split into blocks
 * or the type is unknown. */
size_t ql_row_size(int32_t type, int64_t n_per_row);

/* Bits per weight of a full block (8 * type_size / block_size). */
double ql_type_bpw(int32_t type);

/* Loads whatever tables a type needs before its quantize/dequantize functions may
 * be called (the IQ lattice codebooks); a no-op for the other types. Errors say
 * which file is missing. Thread-safe. */
ql_status ql_type_prepare(int32_t type, ql_error *err);

/* Every known type in table order, for listings: returns the count. */
int ql_type_list(const ql_type_traits **out, int max);

#endif
