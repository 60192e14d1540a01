/* qlab: ggml's ternary formats TQ1_0 and TQ2_0 (BitNet b1.58 / TriLM weights).
 *
 * Each 256-value block stores t_i in {-1, 0, 1} with one fp16 scale d = max|x|:
 * value = d * t_i, t_i = round(x_i / d) (half away from zero).
 *
 * TQ2_0 packs the trits as 2-bit codes t + 1: byte 32g + m holds values
 * 128g + m + 32k at bits 2k (k = 0..3).
 * TQ1_0 packs five trits per byte in base 3 (1.6 bits per value), stored as the
 * fixed-point fraction ceil(code * 256 / 243) so that multiplying the byte by 3^n
 * (mod 256) and taking the top bits of byte * 3 extracts trit n:
 *   qs[0..32):  values m + 32n      (n = 0..4), byte m
 *   qs[32..48): values 160 + m + 16n (n = 0..4), byte 32 + m
 *   qh[0..4):   values 240 + j + 4n (n = 0..3), byte j, code shifted by one trit
 * Importance weights are ignored (ggml has no weighted search for these). */
#ifndef QL_QUANT_TERNARY_H
#define QL_QUANT_TERNARY_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t qs[48]; /* 240 values, five base-3 trits per byte (fixed-point code) */
    uint8_t qh[4];  /* 16 values, four trits per byte (then shifted by one trit) */
    uint16_t d;     /* fp16 scale = max|x| */
} ql_block_tq1_0;
_Static_assert(sizeof(ql_block_tq1_0) == 54, "TQ1_0 block is 54 bytes");

typedef struct {
    uint8_t qs[64]; /* 256 x 2-bit codes t + 1 */
    uint16_t d;     /* fp16 scale = max|x| */
} ql_block_tq2_0;
_Static_assert(sizeof(ql_block_tq2_0) == 66, "TQ2_0 block is 66 bytes");

size_t ql_quantize_tq1_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                         const float *imatrix);
size_t ql_quantize_tq2_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                         const float *imatrix);

void ql_dequantize_tq1_0(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_tq2_0(const void *src, float *dst, int64_t nrows, int64_t n_per_row);

#endif
