/* qlab: the float formats and ggml's 32-value block formats.
 *
 * F32, F16, BF16: one value per element (F16 rounds to nearest even, BF16 too;
 * see fp16.h). Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: weight formats; Q8_1: the activation
 * format ggml pairs with Q4_1/Q5_1. Each block covers 32 consecutive values of a row;
 * fp16 fields are IEEE half bit patterns, little endian like every GGUF field.
 *
 * Decoding (j = 0..31 within a block, q_j the stored integer):
 *   Q4_0  x_j = d * (q_j - 8)          q_j 4 bits
 *   Q4_1  x_j = d * q_j + m            q_j 4 bits
 *   Q5_0  x_j = d * (q_j - 16)         q_j 5 bits (low 4 in qs, high bit in qh)
 *   Q5_1  x_j = d * q_j + m            q_j 5 bits
 *   Q8_0  x_j = d * q_j                q_j int8
 *   Q8_1  x_j = d * q_j, s = d * sum(q_j)
 * The 4-bit formats pack element j in the low nibble of qs[j] and element j+16 in the
 * high nibble; the 5th bit of element j is bit j of qh (little-endian 32-bit word).
 *
 * The quantize functions follow the slot contract of types.h (ggml_quantize_chunk):
 * imatrix == NULL selects ggml's reference quantizer (quantize_row_X_ref), a non-NULL
 * imatrix (n_per_row weights) selects its weighted search; F16, BF16, Q8_0 and Q8_1
 * ignore it. They return the bytes written and never allocate. n_per_row must be a
 * multiple of 32 for the block formats (callers check with ql_row_size). */
#ifndef QL_QUANT_LEGACY_H
#define QL_QUANT_LEGACY_H

#include <stddef.h>
#include <stdint.h>

#define QL_QK4_0 32
#define QL_QK4_1 32
#define QL_QK5_0 32
#define QL_QK5_1 32
#define QL_QK8_0 32
#define QL_QK8_1 32

typedef struct {
    uint16_t d;     /* fp16 scale */
    uint8_t qs[16]; /* 32 x 4-bit levels q in [0,15]; value = d * (q - 8) */
} ql_block_q4_0;
_Static_assert(sizeof(ql_block_q4_0) == 18, "Q4_0 block is 18 bytes");

typedef struct {
    uint16_t d;     /* fp16 scale */
    uint16_t m;     /* fp16 minimum (offset) */
    uint8_t qs[16]; /* 32 x 4-bit levels q in [0,15]; value = d * q + m */
} ql_block_q4_1;
_Static_assert(sizeof(ql_block_q4_1) == 20, "Q4_1 block is 20 bytes");

typedef struct {
    uint16_t d;     /* fp16 scale */
    uint8_t qh[4];  /* bit j = 5th bit of element j (32 bits, little endian) */
    uint8_t qs[16]; /* low 4 bits of the 32 levels q in [0,31]; value = d * (q - 16) */
} ql_block_q5_0;
_Static_assert(sizeof(ql_block_q5_0) == 22, "Q5_0 block is 22 bytes");

typedef struct {
    uint16_t d;     /* fp16 scale */
    uint16_t m;     /* fp16 minimum (offset) */
    uint8_t qh[4];  /* bit j = 5th bit of element j */
    uint8_t qs[16]; /* low 4 bits of the 32 levels q in [0,31]; value = d * q + m */
} ql_block_q5_1;
_Static_assert(sizeof(ql_block_q5_1) == 24, "Q5_1 block is 24 bytes");

typedef struct {
    uint16_t d;    /* fp16 scale = max|x| / 127 */
    int8_t qs[32]; /* signed levels q in [-127,127]; value = d * q */
} ql_block_q8_0;
_Static_assert(sizeof(ql_block_q8_0) == 34, "Q8_0 block is 34 bytes");

typedef struct {
    uint16_t d;    /* fp16 scale = max|x| / 127 */
    uint16_t s;    /* fp16 of d * sum(qs): lets a dot product with Q4_1/Q5_1 apply m */
    int8_t qs[32]; /* signed levels q in [-127,127]; value = d * q */
} ql_block_q8_1;
_Static_assert(sizeof(ql_block_q8_1) == 36, "Q8_1 block is 36 bytes");

/* Row kernels: k values (a multiple of 32) into k/32 blocks, ggml's reference
 * rounding (quantize_row_q8_0_ref / quantize_row_q8_1_ref). Used for activations. */
void ql_quantize_row_q8_0_ref(const float *x, ql_block_q8_0 *y, int64_t k);
void ql_quantize_row_q8_1_ref(const float *x, ql_block_q8_1 *y, int64_t k);

/* Tensor-slot functions (see types.h). */
size_t ql_quantize_f32(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                       const float *imatrix);
size_t ql_quantize_f16(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                       const float *imatrix);
size_t ql_quantize_bf16(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix);
size_t ql_quantize_q4_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix);
size_t ql_quantize_q4_1(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix);
size_t ql_quantize_q5_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix);
size_t ql_quantize_q5_1(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix);
size_t ql_quantize_q8_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix);
size_t ql_quantize_q8_1(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix);

void ql_dequantize_f32(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_f16(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_bf16(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_q4_0(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_q4_1(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_q5_0(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_q5_1(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_q8_0(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_q8_1(const void *src, float *dst, int64_t nrows, int64_t n_per_row);

/* Shared with quant_split.c. */
/* Sum of squares of a whole row divided by its length: the sigma^2 of ggml's
 * importance weights w_j = I_j * sqrt(sigma^2 + x_j^2). */
float ql_row_sigma2(const float *x, int64_t n);

#endif
