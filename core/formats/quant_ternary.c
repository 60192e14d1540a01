/* TQ1_0 and TQ2_0. See quant_ternary.h; re-expresses ggml's quantize_row_tq1_0_ref,
 * quantize_row_tq2_0_ref and their dequantizers (ggml-quants.c, b4747). */
#include "formats/quant_ternary.h"

#include <math.h>

#include "base/fp16.h"
#include "formats/quant_common.h"
#include "formats/quant_k.h"

/* Trit code t + 1 in {0,1,2} of x / d, rounded half away from zero like lroundf. */
static inline int trit(float x, float id)
{
    return (int)lroundf(x * id) + 1;
}

/* Five (or four, then shifted) trits as the fixed-point fraction ceil(code*256/243). */
static inline uint8_t trits_to_byte(unsigned code)
{
    return (uint8_t)((code * 256 + (243 - 1)) / 243);
}

size_t ql_quantize_tq1_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                         const float *imatrix)
{
    ql_block_tq1_0 *y = dst;
    const float *x = src;
    const int64_t nb = nrows * n_per_row / QL_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = ql_absmax(x, QL_QK_K);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = ql_fp32_to_fp16(d);
        for (int m = 0; m < 32; ++m) {
            unsigned q = 0;
            for (int n = 0; n < 5; ++n)
                q = q * 3 + (unsigned)trit(x[m + n * 32], id);
            y[i].qs[m] = trits_to_byte(q);
        }
        x += 5 * 32;
        for (int m = 0; m < 16; ++m) {
            unsigned q = 0;
            for (int n = 0; n < 5; ++n)
                q = q * 3 + (unsigned)trit(x[m + n * 16], id);
            y[i].qs[32 + m] = trits_to_byte(q);
        }
        x += 5 * 16;
        for (int j = 0; j < 4; ++j) {
            unsigned q = 0;
            for (int m = 0; m < 4; ++m)
                q = q * 3 + (unsigned)trit(x[j + m * 4], id);
            /* The first value goes to the most significant trit of a 5-trit code. */
            y[i].qh[j] = trits_to_byte(q * 3);
        }
        x += 4 * 4;
    }
    return (size_t)nb * sizeof(ql_block_tq1_0);
}

size_t ql_quantize_tq2_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                         const float *imatrix)
{
    ql_block_tq2_0 *y = dst;
    const float *x = src;
    const int64_t nb = nrows * n_per_row / QL_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = ql_absmax(x, QL_QK_K);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = ql_fp32_to_fp16(d);
        for (int j = 0; j < 64; j += 32) {
            for (int m = 0; m < 32; ++m) {
                unsigned q = 0;
                for (int n = 0; n < 4; ++n)
                    q += ((unsigned)trit(x[m + n * 32], id) & 3u) << (2 * n);
                y[i].qs[j + m] = (uint8_t)q;
            }
            x += 4 * 32;
        }
    }
    return (size_t)nb * sizeof(ql_block_tq2_0);
}

/* Trit n of a fixed-point byte: the top bits of (byte * 3^n mod 256) * 3. */
static inline float byte_trit(uint8_t byte, uint8_t pow3, float d)
{
    uint8_t q = (uint8_t)(byte * pow3);
    int16_t xi = (int16_t)(((uint16_t)q * 3) >> 8);
    return (float)(xi - 1) * d;
}

void ql_dequantize_tq1_0(const void *src, float *y, int64_t nrows, int64_t n_per_row)
{
    static const uint8_t pow3[6] = {1, 3, 9, 27, 81, 243};
    const ql_block_tq1_0 *x = src;
    for (int64_t i = 0; i < nrows * n_per_row / QL_QK_K; ++i) {
        const float d = ql_fp16_to_fp32(x[i].d);
        for (int n = 0; n < 5; ++n)
            for (int m = 0; m < 32; ++m)
                *y++ = byte_trit(x[i].qs[m], pow3[n], d);
        for (int n = 0; n < 5; ++n)
            for (int m = 0; m < 16; ++m)
                *y++ = byte_trit(x[i].qs[32 + m], pow3[n], d);
        for (int n = 0; n < 4; ++n)
            for (int j = 0; j < 4; ++j)
                *y++ = byte_trit(x[i].qh[j], pow3[n], d);
    }
}

void ql_dequantize_tq2_0(const void *src, float *y, int64_t nrows, int64_t n_per_row)
{
    const ql_block_tq2_0 *x = src;
    for (int64_t i = 0; i < nrows * n_per_row / QL_QK_K; ++i) {
        const float d = ql_fp16_to_fp32(x[i].d);
        for (int j = 0; j < 64; j += 32)
            for (int l = 0; l < 4; ++l)
                for (int m = 0; m < 32; ++m)
                    *y++ = (float)(((x[i].qs[j + m] >> (l * 2)) & 3) - 1) * d;
    }
}
