/* qlab: the IQ lattice formats IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_S, IQ1_M.
 *
 * Reference (scalar, portable) quantizers and dequantizers, bit-identical to
 * ggml's quantize_iq* / dequantize_row_iq* (llama.cpp b4747). Every format works
 * on super-blocks of 256 weights; rows must be a multiple of 256 long.
 *
 * Formats (bits per weight; d = fp16 super-block scale):
 *   IQ2_XXS 2.0625  groups of 8 on a 256-point E8-lattice grid, 4-bit scale per 32
 *   IQ2_XS  2.3125  512-point grid, 4-bit scale per 16
 *   IQ2_S   2.5625  1024-point grid, 8 explicit sign bits per 8, 4-bit scale per 16
 *   IQ3_XXS 3.0625  groups of 4 on a 256-point D4-lattice grid, 4-bit scale per 32
 *   IQ3_S   3.4375  512-point grid, explicit signs, 4-bit scale per 32
 *   IQ1_S   1.5625  groups of 8 on a 2048-point {-1,0,1}^8 grid + shift +-1/8, 3-bit scale per 32
 *   IQ1_M   1.75    as IQ1_S with a shift per 8 and a 3-bit scale per 16, d split over the scales
 *
 * Preconditions: ql_iq_prepare(type) has succeeded (it loads the codebooks, see
 * iq_grids.h); calling a quantize or dequantize function before that is a
 * programmer error and aborts. Buffers are 2-byte aligned; dst of a quantizer
 * holds nrows * ql_row_size(type, n_per_row) bytes.
 *
 * Importance weights (imatrix, n_per_row floats, may be NULL) select ggml's
 * weighted objective w_i = imatrix_i * sqrt(sigma^2 + x_i^2). Without them ggml
 * uses a per-format default (IQ3_*, IQ1_M: x_i^2; IQ2_S: sigma^2/4 + x_i^2), and
 * these functions do the same. ggml refuses IQ2_XXS, IQ2_XS and IQ1_S without an
 * importance matrix (the type table marks them requires_imatrix, and qlab's
 * quantize policy refuses them too). Handed NULL anyway, these functions do not
 * crash: they use importance 1 for every column, i.e. w_i = sqrt(sigma^2 + x_i^2),
 * which is ggml's weighted search with a uniform imatrix; ggml has no such output.
 *
 * Row state: like ggml, IQ1_S and IQ1_M carry the per-group "shift" choice of
 * the previous row into groups that are all zero (below ggml's threshold) in the
 * next row, and it reaches the stored bytes. One call behaves as one ggml call
 * over the same rows (state starts at "no shift" in each call). Results are
 * therefore independent of how a caller splits a tensor only when the row
 * ranges of the calls are fixed (e.g. one call per row, or per fixed chunk),
 * not derived from the thread count.
 *
 * Thread safety: no global mutable state; per-call scratch lives on the stack,
 * so distinct row ranges may be quantized concurrently. Non-finite inputs give
 * valid blocks with unspecified contents (ggml asserts); callers should reject
 * NaN/Inf weights before quantizing. */
#ifndef QL_QUANT_IQ_H
#define QL_QUANT_IQ_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define QL_QK_K 256 /* weights per super-block */

/* ---- block layouts (as ggml-common.h; multi-byte fields little-endian) ---- */

typedef struct {
    uint16_t d;     /* fp16 super-block scale */
    uint8_t qs[64]; /* per 32 weights, 8 bytes: 4 grid indices (8 bits each, one per 8
                       weights), then a uint32: 4 x 7 sign bits, bits 28..31 the scale s
                       (weight = d (0.5 + s) / 4 * grid byte * sign) */
} ql_block_iq2_xxs;
_Static_assert(sizeof(ql_block_iq2_xxs) == 66, "IQ2_XXS block is 66 bytes");

typedef struct {
    uint16_t d;        /* fp16 super-block scale */
    uint16_t qs[32];   /* per 8 weights: bits 0..8 grid index, bits 9..15 sign code
                          (7 bits + implied parity through ksigns) */
    uint8_t scales[8]; /* per 32 weights: low nibble scale of the first 16, high of the second */
} ql_block_iq2_xs;
_Static_assert(sizeof(ql_block_iq2_xs) == 74, "IQ2_XS block is 74 bytes");

typedef struct {
    uint16_t d;        /* fp16 super-block scale */
    uint8_t qs[64];    /* [0..31] low 8 bits of the grid index per 8 weights;
                          [32..63] 8 sign bits per 8 weights (bit j: weight j negative) */
    uint8_t qh[8];     /* per 32 weights: 2 high index bits for each of its 4 groups */
    uint8_t scales[8]; /* per 32 weights: two 4-bit scales (16 weights each) */
} ql_block_iq2_s;
_Static_assert(sizeof(ql_block_iq2_s) == 82, "IQ2_S block is 82 bytes");

typedef struct {
    uint16_t d;     /* fp16 super-block scale */
    uint8_t qs[96]; /* [0..63] grid index per 4 weights; [64..95] per 32 weights a uint32:
                       4 x 7 sign bits, bits 28..31 the scale s (d (0.5 + s) / 2) */
} ql_block_iq3_xxs;
_Static_assert(sizeof(ql_block_iq3_xxs) == 98, "IQ3_XXS block is 98 bytes");

typedef struct {
    uint16_t d;        /* fp16 super-block scale */
    uint8_t qs[64];    /* low 8 bits of the 9-bit grid index per 4 weights */
    uint8_t qh[8];     /* bit 8 of the grid index, one bit per 4 weights */
    uint8_t signs[32]; /* one sign bit per weight */
    uint8_t scales[4]; /* per 64 weights: two 4-bit scales s (d (1 + 2 s)) */
} ql_block_iq3_s;
_Static_assert(sizeof(ql_block_iq3_s) == 110, "IQ3_S block is 110 bytes");

typedef struct {
    uint16_t d;     /* fp16 super-block scale */
    uint8_t qs[32]; /* low 8 bits of the 11-bit grid index per 8 weights */
    uint16_t qh[8]; /* per 32 weights: bits 0..11 the 3 high index bits of its 4 groups,
                       bits 12..14 scale s (d (2 s + 1)), bit 15 shift sign (-1/8 if set) */
} ql_block_iq1_s;
_Static_assert(sizeof(ql_block_iq1_s) == 50, "IQ1_S block is 50 bytes");

typedef struct {
    uint8_t qs[32];    /* low 8 bits of the 11-bit grid index per 8 weights */
    uint8_t qh[16];    /* per 16 weights: bits 0..2 / 4..6 high index bits of its two
                          groups, bit 3 / bit 7 their shift sign (-1/8 if set) */
    uint8_t scales[8]; /* 4 x uint16: bits 0..11 four 3-bit scales (one per 16 weights),
                          bits 12..15 one nibble of the fp16 super-block scale */
} ql_block_iq1_m;
_Static_assert(sizeof(ql_block_iq1_m) == 56, "IQ1_M block is 56 bytes");

/* ---- preparation ---- */

/* Loads the codebooks an IQ lattice type needs (thread-safe, once per process);
 * QL_EINVAL for a type that is not one of the seven. Errors name the table file. */
ql_status ql_iq_prepare(int32_t type, ql_error *err);

/* ---- quantize: returns nrows * row bytes ---- */

size_t ql_quantize_iq2_xxs(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                           const float *imatrix);
size_t ql_quantize_iq2_xs(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix);
size_t ql_quantize_iq2_s(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                         const float *imatrix);
size_t ql_quantize_iq3_xxs(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                           const float *imatrix);
size_t ql_quantize_iq3_s(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                         const float *imatrix);
size_t ql_quantize_iq1_s(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                         const float *imatrix);
size_t ql_quantize_iq1_m(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                         const float *imatrix);

/* ---- dequantize ---- */

void ql_dequantize_iq2_xxs(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_iq2_xs(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_iq2_s(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_iq3_xxs(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_iq3_s(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_iq1_s(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_iq1_m(const void *src, float *dst, int64_t nrows, int64_t n_per_row);

#endif
