/* qlab: ggml's K-quants (Q2_K .. Q6_K) and the Q8_K activation format.
 *
 * Every format works on super-blocks of 256 values of a row, split into sub-blocks
 * of 16 or 32 values, each with its own small integer scale (and min) that is itself
 * quantized against the super-block's fp16 d (and dmin). Decoding, for value i of
 * sub-block s (q the stored level, sc/mn the sub-block's integer scale/min):
 *   Q2_K  x = d * sc_s * q - dmin * mn_s     q 2 bits, sc/mn 4 bits, 16 sub-blocks of 16
 *   Q3_K  x = d * (sc_s - 32) * (q - 4)      q 3 bits, sc 6 bits,   16 sub-blocks of 16
 *   Q4_K  x = d * sc_s * q - dmin * mn_s     q 4 bits, sc/mn 6 bits, 8 sub-blocks of 32
 *   Q5_K  x = d * sc_s * q - dmin * mn_s     q 5 bits, sc/mn 6 bits, 8 sub-blocks of 32
 *   Q6_K  x = d * sc_s * (q - 32)            q 6 bits, sc int8,     16 sub-blocks of 16
 *   Q8_K  x = d * q                           q int8, d float32, per 256 values
 * Bit layouts are documented on each struct. The quantize functions follow the slot
 * contract of types.h: imatrix == NULL selects ggml's quantize_row_X_ref, non-NULL its
 * weighted quantize_row_X_impl (Q8_K ignores it). n_per_row must be a multiple of 256. */
#ifndef QL_QUANT_K_H
#define QL_QUANT_K_H

#include <stddef.h>
#include <stdint.h>

#define QL_QK_K         256
#define QL_K_SCALE_SIZE 12

typedef struct {
    uint8_t scales[16]; /* per 16-value sub-block: low nibble sc, high nibble mn */
    /* 2-bit levels: byte l of 32-byte group g holds values 128g + l + 32k in bits
     * 2k..2k+1, k = 0..3. */
    uint8_t qs[64];
    uint16_t d;    /* fp16 super-block scale of the sc */
    uint16_t dmin; /* fp16 super-block scale of the mn */
} ql_block_q2_K;
_Static_assert(sizeof(ql_block_q2_K) == 84, "Q2_K block is 84 bytes");

typedef struct {
    uint8_t hmask[32]; /* high (3rd) bit of the levels: bit b of byte m = value 32b + m */
    uint8_t qs[64];    /* low 2 bits, same layout as Q2_K */
    /* 16 six-bit scales biased by 32: low nibbles in bytes 0..7 (sub-block j in byte
     * j%8, nibble j/8), high 2 bits in bytes 8..11 (byte 8 + j%4, bits 2*(j/4)). */
    uint8_t scales[QL_K_SCALE_SIZE];
    uint16_t d; /* fp16 super-block scale */
} ql_block_q3_K;
_Static_assert(sizeof(ql_block_q3_K) == 110, "Q3_K block is 110 bytes");

typedef struct {
    uint16_t d;    /* fp16 super-block scale of the sc */
    uint16_t dmin; /* fp16 super-block scale of the mn */
    /* 8 six-bit sc and 8 six-bit mn: sub-blocks 0..3 in the low 6 bits of bytes 0..3
     * (sc) and 4..7 (mn); sub-blocks 4..7 as nibbles of bytes 8..11 (sc low, mn high)
     * with their top 2 bits in the top bits of bytes 0..3 (sc) and 4..7 (mn). */
    uint8_t scales[QL_K_SCALE_SIZE];
    /* 4-bit levels: 32-byte group g holds values 64g + l (low nibble) and 64g + 32 + l
     * (high nibble). */
    uint8_t qs[128];
} ql_block_q4_K;
_Static_assert(sizeof(ql_block_q4_K) == 144, "Q4_K block is 144 bytes");

typedef struct {
    uint16_t d;                      /* fp16 super-block scale of the sc */
    uint16_t dmin;                   /* fp16 super-block scale of the mn */
    uint8_t scales[QL_K_SCALE_SIZE]; /* as Q4_K */
    uint8_t qh[32];  /* 5th bit: value 64g + l in bit 2g of byte l, 64g + 32 + l in 2g+1 */
    uint8_t qs[128]; /* low 4 bits, as Q4_K */
} ql_block_q5_K;
_Static_assert(sizeof(ql_block_q5_K) == 176, "Q5_K block is 176 bytes");

typedef struct {
    /* Low 4 bits: for half h (128 values), byte 64h + l holds values 128h + l (low
     * nibble) and 128h + 64 + l (high); byte 64h + 32 + l holds 128h + 32 + l and
     * 128h + 96 + l. */
    uint8_t ql[128];
    /* High 2 bits: byte 32h + l holds values 128h + l + 32k in bits 2k..2k+1. */
    uint8_t qh[64];
    int8_t scales[16]; /* signed 8-bit scale per 16-value sub-block */
    uint16_t d;        /* fp16 super-block scale */
} ql_block_q6_K;
_Static_assert(sizeof(ql_block_q6_K) == 210, "Q6_K block is 210 bytes");

typedef struct {
    float d;           /* float32 scale: -max/127 with max the value of largest magnitude */
    int8_t qs[256];    /* levels in [-127,127] (ggml's sign convention: max maps to -127) */
    int16_t bsums[16]; /* sum of each group of 16 levels (dot-product helper) */
} ql_block_q8_K;
_Static_assert(sizeof(ql_block_q8_K) == 292, "Q8_K block is 292 bytes");

/* Q8_K row kernel (ggml quantize_row_q8_K_ref); k a multiple of 256. An all-zero block
 * gets d = 0, zero levels and zero bsums (ggml leaves its bsums untouched there). */
void ql_quantize_row_q8_K_ref(const float *x, ql_block_q8_K *y, int64_t k);

size_t ql_quantize_q2_K(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix);
size_t ql_quantize_q3_K(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix);
size_t ql_quantize_q4_K(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix);
size_t ql_quantize_q5_K(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix);
size_t ql_quantize_q6_K(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix);
size_t ql_quantize_q8_K(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix);

void ql_dequantize_q2_K(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_q3_K(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_q4_K(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_q5_K(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_q6_K(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_q8_K(const void *src, float *dst, int64_t nrows, int64_t n_per_row);

/* Block-layout helpers shared with quant_split.c (GPTQ writes the same blocks). */
/* Q4_K/Q5_K: sub-block j's 6-bit scale and min from the 12 packed bytes. */
void ql_k_get_scale_min(int j, const uint8_t *q, uint8_t *d, uint8_t *m);

/* Inverse of ql_k_get_scale_min for all 8 sub-blocks. */
void ql_k_put_scale_min(const uint8_t *ls, const uint8_t *lm, uint8_t *scales);

/* Packs 256 two-bit levels: byte 32g + l gets values 128g + l + 32k at bits 2k. */
void ql_k_pack_2bit(const uint8_t *L, uint8_t *qs);

/* Q3_K: sub-block j's 6-bit (biased) scale minus 32. */
int ql_q3_K_scale(const uint8_t *scales, int j);

/* Q3_K: stores sub-block j's biased 6-bit scale l (the scales start zeroed). */
void ql_q3_K_put_scale(uint8_t *scales, int j, int l);

#endif
