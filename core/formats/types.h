/* qlab: the type-traits table.
 *
 * One entry per tensor type, indexed by its id (formats/type_ids.h): its GGUF
 * spelling, block size and bytes per block (from sizeof of the block structs of
 * quant_*.h), the reference quantize/dequantize functions that define it, and every
 * other fact qlab keeps per type: whether it may be a weight type and why not,
 * llama.cpp's file type, row-length fallback and activation rounding for it, and
 * its place in listings and in qlab fit's default ladder. Ids below
 * QL_TYPE_GGML_COUNT are ggml's own (they appear in GGUF files); the qlab-only
 * weight schemes (INT8_ROW, Q8_0_XC) live above and are never written to a GGUF
 * file under their own id. */
#ifndef QL_TYPES_H
#define QL_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "formats/actq_ids.h"
#include "formats/type_ids.h"

/* Quantizes nrows rows of n_per_row floats into dst; returns bytes written.
 * imatrix (n_per_row importance weights, may be NULL) selects ggml's weighted
 * search where the format has one, exactly as ggml_quantize_chunk does. */
typedef size_t (*ql_quantize_fn)(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                                 const float *imatrix);

/* Dequantizes nrows rows of n_per_row values. */
typedef void (*ql_dequantize_fn)(const void *src, float *dst, int64_t nrows, int64_t n_per_row);

typedef struct {
    const char *name;   /* GGUF spelling: "Q4_K", "IQ4_XS", "F16" */
    ql_type type;       /* ggml type id (or qlab scheme id) = the entry's index */
    int order;          /* position in listings and canonical candidate lists (0, 1, ...) */
    int64_t block_size; /* values per block; 0 = one block per row (INT8_ROW) */
    size_t type_size;   /* bytes per block (INT8_ROW: bytes per row besides the values) */
    bool is_gguf;       /* may be written to a GGUF file under this id */
    ql_type storage;    /* type id used in a GGUF file (Q8_0 for Q8_0_XC) */
    /* Why the type may not be asked for as a weight type (NULL: it may). */
    const char *not_weight;
    /* Why a weight type cannot be written to a GGUF model (NULL: it can): the qlab
     * schemes, which sweeps evaluate in memory. */
    const char *not_in_gguf;
    /* llama.cpp's LLAMA_FTYPE of a model whose weights are all of this type (llama.h,
     * b4747), -1 for none. Where llama.cpp names several mixes of one base type, the
     * one with the fewest rules: Q3_K -> Q3_K_S, Q4_K -> Q4_K_S, Q5_K -> Q5_K_S; IQ2_S
     * is the default type of IQ2_M (llama-quantize's IQ2_S mix defaults to IQ2_XS). */
    int32_t ftype;
    /* llama.cpp's type for a row that does not split into this type's blocks (then
     * F16 when that does not fit either); F16 where llama.cpp has none (it refuses
     * the 32-block types there). Meaningful for the weight types with blocks. */
    ql_type row_fallback;
    /* The rounding llama.cpp's CPU backend gives the activations of a product with
     * weights of this type (its vec_dot_type); F32 for types without a product. */
    ql_actq native_act;
    /* Position in qlab fit's default ladder (1, 2, ...; 0: not in it). The types of
     * at most 32 values per block are every tensor's candidates, those of 256 only
     * of rows that split into 256-blocks. */
    int ladder_rank;
    /* Its quantizer carries state from row to row within one call, as ggml's does
     * (IQ1_S, IQ1_M: a group of zeros takes the previous row's shift), so a row's
     * bytes depend on the rows quantized before it in the same call. */
    bool row_state;
    bool requires_imatrix;       /* ggml refuses to quantize it without an importance matrix */
    bool llama_imatrix;          /* llama-quantize refuses it without one (a superset) */
    bool needs_grids;            /* needs the IQ lattice codebooks (see iq_grids.h) */
    /* Byte offset of a block's fp16 min m (Q4_1, Q5_1: ggml's product with Q8_1
     * activations adds m times the activations' block sums); 0: no min (every block
     * with one begins with its scale d). */
    size_t block_min_offset;
    /* qgemm multiplies it with its native activations in integers, in ggml's order of
     * sums (Q6_K with Q8_K), instead of through the f32 product of rounded values. */
    bool integer_product;
    /* Outlier columns are kept exact inside its blocks (Q8_0_XC), so an outlier split
     * applies even with no outlier columns calibrated. */
    bool exact_outliers;
    ql_quantize_fn quantize;     /* NULL: qlab cannot produce this type */
    ql_dequantize_fn dequantize; /* NULL: qlab cannot read this type */
} ql_type_traits;

/* Traits of a type id, or NULL for an id qlab does not know. */
const ql_type_traits *ql_type_get(int32_t type);

/* Traits by GGUF name, case-insensitive ("q4_k" works), or NULL. */
const ql_type_traits *ql_type_by_name(const char *name);

/* Name of a type id; "type id N" (in a static buffer per thread) when unknown. */
const char *ql_type_name(int32_t type);

/* Whether a type may be asked for as a weight type (sweeps, the type policy): a
 * GGUF weight format or a qlab weight scheme. */
bool ql_type_is_weight(const ql_type_traits *t);

/* Whether a weight type can be written to a GGUF model file (qlab quantize, qlab
 * fit): a weight type stored under its own id. */
bool ql_type_is_gguf_weight(const ql_type_traits *t);

/* Bytes of one row of n_per_row values; 0 when the row does not split into blocks
 * or the type is unknown. */
size_t ql_row_size(int32_t type, int64_t n_per_row);

/* Bits per weight of a full block (8 * type_size / block_size). */
double ql_type_bpw(int32_t type);

/* Loads whatever tables a type needs before its quantize/dequantize functions may
 * be called (the IQ lattice codebooks); a no-op for the other types. Errors say
 * which file is missing. Thread-safe. */
ql_status ql_type_prepare(int32_t type, ql_error *err);

/* Every known type in listing order (the order column): returns the count. */
int ql_type_list(const ql_type_traits **out, int max);

#endif
