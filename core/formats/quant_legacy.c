/* Float formats and ggml's 32-value block formats. See quant_legacy.h.
 *
 * The reference quantizers re-express ggml's quantize_row_X_ref and the weighted
 * ones quantize_row_X_impl (ggml-quants.c, llama.cpp b4747). Float-to-integer
 * conversions truncate through int32 first, which is what gcc does on x86-64 for
 * ggml's direct (int8_t)/(uint8_t) casts. */
#include "formats/quant_legacy.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "formats/quant_common.h"

/* (int8_t)v and (uint8_t)v of ggml, without the undefined behaviour of an
 * out-of-range direct conversion. */
static inline int trunc_i8(float v)
{
    return (int8_t)(int32_t)v;
}

static inline int trunc_u8(float v)
{
    return (uint8_t)(int32_t)v;
}

static inline int imin(int a, int b)
{
    return a < b ? a : b;
}

/* Sum of squares of a whole row divided by its length: the sigma^2 of ggml's
 * importance weights w_j = I_j * sqrt(sigma^2 + x_j^2). */
float ql_row_sigma2(const float *x, int64_t n)
{
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; ++j)
        sum_x2 += x[j] * x[j];
    return sum_x2 / (float)n;
}

/* ======================================================================== */
/* F32 / F16 / BF16                                                          */
/* ======================================================================== */

size_t ql_quantize_f32(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                       const float *imatrix)
{
    size_t n = (size_t)(nrows * n_per_row);
    memcpy(dst, src, n * sizeof(float));
    return n * sizeof(float);
}

size_t ql_quantize_f16(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                       const float *imatrix)
{
    uint16_t *y = dst;
    int64_t n = nrows * n_per_row;
    for (int64_t i = 0; i < n; i++)
        y[i] = ql_fp32_to_fp16(src[i]);
    return (size_t)n * sizeof(uint16_t);
}

size_t ql_quantize_bf16(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix)
{
    uint16_t *y = dst;
    int64_t n = nrows * n_per_row;
    for (int64_t i = 0; i < n; i++)
        y[i] = ql_fp32_to_bf16(src[i]);
    return (size_t)n * sizeof(uint16_t);
}

void ql_dequantize_f32(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    memcpy(dst, src, (size_t)(nrows * n_per_row) * sizeof(float));
}

void ql_dequantize_f16(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    const uint16_t *x = src;
    int64_t n = nrows * n_per_row;
    for (int64_t i = 0; i < n; i++)
        dst[i] = ql_fp16_to_fp32(x[i]);
}

void ql_dequantize_bf16(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    const uint16_t *x = src;
    int64_t n = nrows * n_per_row;
    for (int64_t i = 0; i < n; i++)
        dst[i] = ql_bf16_to_fp32(x[i]);
}

/* ======================================================================== */
/* Q4_0: d = max / -8 where max is the value of largest magnitude             */
/* ======================================================================== */

static void q4_0_row_ref(const float *x, void *vy, int64_t k, const float *unused)
{
    ql_block_q4_0 *y = vy;
    for (int64_t i = 0; i < k / QL_QK4_0; i++, x += QL_QK4_0) {
        const float max = ql_signed_absmax(x, QL_QK4_0, NULL);
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = ql_fp32_to_fp16(d);
        for (int j = 0; j < QL_QK4_0 / 2; ++j) {
            const uint8_t xi0 = (uint8_t)imin(15, trunc_i8(x[j] * id + 8.5f));
            const uint8_t xi1 = (uint8_t)imin(15, trunc_i8(x[QL_QK4_0 / 2 + j] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(xi0 | (xi1 << 4));
        }
    }
}

/* Weighted search: levels from make_qx_quants(nmax 8) under w_j = I_j sqrt(s2 + x_j^2). */
static void q4_0_row_impl(const float *x, void *vy, int64_t n_per_row, const float *qw)
{
    ql_block_q4_0 *y = vy;
    float weight[QL_QK4_0];
    int8_t L[QL_QK4_0];
    const float sigma2 = ql_row_sigma2(x, n_per_row);
    for (int64_t ib = 0; ib < n_per_row / QL_QK4_0; ++ib) {
        const float *xb = x + QL_QK4_0 * ib;
        const float *w = qw + QL_QK4_0 * ib;
        for (int j = 0; j < QL_QK4_0; ++j)
            weight[j] = w[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        float d = ql_make_qx_quants(QL_QK4_0, 8, xb, L, weight);
        y[ib].d = ql_fp32_to_fp16(d);
        for (int j = 0; j < 16; ++j)
            y[ib].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

size_t ql_quantize_q4_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix)
{
    return ql_quantize_rows(src, dst, nrows, n_per_row, imatrix, QL_QK4_0, sizeof(ql_block_q4_0),
                            q4_0_row_ref, q4_0_row_impl);
}

void ql_dequantize_q4_0(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    const ql_block_q4_0 *x = src;
    int64_t nb = nrows * n_per_row / QL_QK4_0;
    for (int64_t i = 0; i < nb; i++, dst += QL_QK4_0) {
        const float d = ql_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QL_QK4_0 / 2; ++j) {
            dst[j] = (float)((x[i].qs[j] & 0x0F) - 8) * d;
            dst[j + QL_QK4_0 / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* ======================================================================== */
/* Q4_1: d = (max - min) / 15, m = min                                        */
/* ======================================================================== */

static void q4_1_row_ref(const float *x, void *vy, int64_t k, const float *unused)
{
    ql_block_q4_1 *y = vy;
    for (int64_t i = 0; i < k / QL_QK4_1; i++, x += QL_QK4_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QL_QK4_1; j++) {
            if (x[j] < min)
                min = x[j];
            if (x[j] > max)
                max = x[j];
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = ql_fp32_to_fp16(d);
        y[i].m = ql_fp32_to_fp16(min);
        for (int j = 0; j < QL_QK4_1 / 2; ++j) {
            const uint8_t xi0 = (uint8_t)imin(15, trunc_i8((x[j] - min) * id + 0.5f));
            const uint8_t xi1 =
                (uint8_t)imin(15, trunc_i8((x[QL_QK4_1 / 2 + j] - min) * id + 0.5f));
            y[i].qs[j] = (uint8_t)(xi0 | (xi1 << 4));
        }
    }
}

static void q4_1_row_impl(const float *x, void *vy, int64_t n_per_row, const float *qw)
{
    ql_block_q4_1 *y = vy;
    float weight[QL_QK4_1];
    uint8_t L[QL_QK4_1], Laux[QL_QK4_1];
    const float sigma2 = ql_row_sigma2(x, n_per_row);
    for (int64_t ib = 0; ib < n_per_row / QL_QK4_1; ++ib) {
        const float *xb = x + QL_QK4_1 * ib;
        const float *w = qw + QL_QK4_1 * ib;
        for (int j = 0; j < QL_QK4_1; ++j)
            weight[j] = w[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        float min;
        float d =
            ql_make_qkx_quants(QL_QK4_1, 15, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36, false);
        y[ib].d = ql_fp32_to_fp16(d);
        y[ib].m = ql_fp32_to_fp16(-min);
        for (int j = 0; j < 16; ++j)
            y[ib].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

size_t ql_quantize_q4_1(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix)
{
    return ql_quantize_rows(src, dst, nrows, n_per_row, imatrix, QL_QK4_1, sizeof(ql_block_q4_1),
                            q4_1_row_ref, q4_1_row_impl);
}

void ql_dequantize_q4_1(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    const ql_block_q4_1 *x = src;
    int64_t nb = nrows * n_per_row / QL_QK4_1;
    for (int64_t i = 0; i < nb; i++, dst += QL_QK4_1) {
        const float d = ql_fp16_to_fp32(x[i].d);
        const float m = ql_fp16_to_fp32(x[i].m);
        for (int j = 0; j < QL_QK4_1 / 2; ++j) {
            dst[j] = (float)(x[i].qs[j] & 0x0F) * d + m;
            dst[j + QL_QK4_1 / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* ======================================================================== */
/* Q5_0: d = max / -16                                                        */
/* ======================================================================== */

/* Packs 32 five-bit levels: low nibbles pairwise into qs, 5th bits into qh. */
static void pack_q5(const int *lv, uint8_t qs[16], uint8_t qh[4])
{
    uint32_t h = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = (uint8_t)((lv[j] & 0x0F) | ((lv[j + 16] & 0x0F) << 4));
        h |= (uint32_t)((lv[j] & 0x10) >> 4) << j;
        h |= (uint32_t)((lv[j + 16] & 0x10) >> 4) << (j + 16);
    }
    ql_put_u32le(qh, h);
}

static void q5_0_row_ref(const float *x, void *vy, int64_t k, const float *unused)
{
    ql_block_q5_0 *y = vy;
    int lv[QL_QK5_0];
    for (int64_t i = 0; i < k / QL_QK5_0; i++, x += QL_QK5_0) {
        const float max = ql_signed_absmax(x, QL_QK5_0, NULL);
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = ql_fp32_to_fp16(d);
        /* ggml stores (uint8_t)MIN(31, (int8_t)v): keep the byte the same way. */
        for (int j = 0; j < QL_QK5_0; ++j)
            lv[j] = (uint8_t)imin(31, trunc_i8(x[j] * id + 16.5f));
        pack_q5(lv, y[i].qs, y[i].qh);
    }
}

static void q5_0_row_impl(const float *x, void *vy, int64_t n_per_row, const float *qw)
{
    ql_block_q5_0 *y = vy;
    float weight[QL_QK5_0];
    int8_t L[QL_QK5_0];
    int lv[QL_QK5_0];
    const float sigma2 = ql_row_sigma2(x, n_per_row);
    for (int64_t ib = 0; ib < n_per_row / QL_QK5_0; ++ib) {
        const float *xb = x + QL_QK5_0 * ib;
        const float *w = qw + QL_QK5_0 * ib;
        for (int j = 0; j < QL_QK5_0; ++j)
            weight[j] = w[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        float d = ql_make_qx_quants(QL_QK5_0, 16, xb, L, weight);
        y[ib].d = ql_fp32_to_fp16(d);
        for (int j = 0; j < QL_QK5_0; ++j)
            lv[j] = (uint8_t)L[j];
        pack_q5(lv, y[ib].qs, y[ib].qh);
    }
}

size_t ql_quantize_q5_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix)
{
    return ql_quantize_rows(src, dst, nrows, n_per_row, imatrix, QL_QK5_0, sizeof(ql_block_q5_0),
                            q5_0_row_ref, q5_0_row_impl);
}

void ql_dequantize_q5_0(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    const ql_block_q5_0 *x = src;
    int64_t nb = nrows * n_per_row / QL_QK5_0;
    for (int64_t i = 0; i < nb; i++, dst += QL_QK5_0) {
        const float d = ql_fp16_to_fp32(x[i].d);
        const uint32_t qh = ql_get_u32le(x[i].qh);
        for (int j = 0; j < QL_QK5_0 / 2; ++j) {
            const int h0 = (int)((qh >> j) << 4) & 0x10;
            const int h1 = (int)(qh >> (j + 12)) & 0x10;
            dst[j] = (float)(((x[i].qs[j] & 0x0F) | h0) - 16) * d;
            dst[j + QL_QK5_0 / 2] = (float)(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

/* ======================================================================== */
/* Q5_1: d = (max - min) / 31, m = min                                        */
/* ======================================================================== */

static void q5_1_row_ref(const float *x, void *vy, int64_t k, const float *unused)
{
    ql_block_q5_1 *y = vy;
    int lv[QL_QK5_1];
    for (int64_t i = 0; i < k / QL_QK5_1; i++, x += QL_QK5_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QL_QK5_1; j++) {
            if (x[j] < min)
                min = x[j];
            if (x[j] > max)
                max = x[j];
        }
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = ql_fp32_to_fp16(d);
        y[i].m = ql_fp32_to_fp16(min);
        for (int j = 0; j < QL_QK5_1; ++j)
            lv[j] = trunc_u8((x[j] - min) * id + 0.5f);
        pack_q5(lv, y[i].qs, y[i].qh);
    }
}

static void q5_1_row_impl(const float *x, void *vy, int64_t n_per_row, const float *qw)
{
    ql_block_q5_1 *y = vy;
    float weight[QL_QK5_1];
    uint8_t L[QL_QK5_1], Laux[QL_QK5_1];
    int lv[QL_QK5_1];
    const float sigma2 = ql_row_sigma2(x, n_per_row);
    for (int64_t ib = 0; ib < n_per_row / QL_QK5_1; ++ib) {
        const float *xb = x + QL_QK5_1 * ib;
        const float *w = qw + QL_QK5_1 * ib;
        for (int j = 0; j < QL_QK5_1; ++j)
            weight[j] = w[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        float min;
        float d =
            ql_make_qkx_quants(QL_QK5_1, 31, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36, false);
        y[ib].d = ql_fp32_to_fp16(d);
        y[ib].m = ql_fp32_to_fp16(-min);
        for (int j = 0; j < QL_QK5_1; ++j)
            lv[j] = L[j];
        pack_q5(lv, y[ib].qs, y[ib].qh);
    }
}

size_t ql_quantize_q5_1(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix)
{
    return ql_quantize_rows(src, dst, nrows, n_per_row, imatrix, QL_QK5_1, sizeof(ql_block_q5_1),
                            q5_1_row_ref, q5_1_row_impl);
}

void ql_dequantize_q5_1(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    const ql_block_q5_1 *x = src;
    int64_t nb = nrows * n_per_row / QL_QK5_1;
    for (int64_t i = 0; i < nb; i++, dst += QL_QK5_1) {
        const float d = ql_fp16_to_fp32(x[i].d);
        const float m = ql_fp16_to_fp32(x[i].m);
        const uint32_t qh = ql_get_u32le(x[i].qh);
        for (int j = 0; j < QL_QK5_1 / 2; ++j) {
            const int h0 = (int)((qh >> j) << 4) & 0x10;
            const int h1 = (int)(qh >> (j + 12)) & 0x10;
            dst[j] = (float)((x[i].qs[j] & 0x0F) | h0) * d + m;
            dst[j + QL_QK5_1 / 2] = (float)((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

/* ======================================================================== */
/* Q8_0 and Q8_1: d = max|x| / 127, q = round(x / d) (half away from zero)   */
/* ======================================================================== */

void ql_quantize_row_q8_0_ref(const float *x, ql_block_q8_0 *y, int64_t k)
{
    for (int64_t i = 0; i < k / QL_QK8_0; i++, x += QL_QK8_0) {
        const float amax = ql_absmax(x, QL_QK8_0);
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = ql_fp32_to_fp16(d);
        for (int j = 0; j < QL_QK8_0; ++j)
            y[i].qs[j] = (int8_t)ql_roundf(x[j] * id);
    }
}

void ql_quantize_row_q8_1_ref(const float *x, ql_block_q8_1 *y, int64_t k)
{
    for (int64_t i = 0; i < k / QL_QK8_1; i++, x += QL_QK8_1) {
        const float amax = ql_absmax(x, QL_QK8_1);
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = ql_fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QL_QK8_1 / 2; ++j) {
            y[i].qs[j] = (int8_t)ql_roundf(x[j] * id);
            y[i].qs[QL_QK8_1 / 2 + j] = (int8_t)ql_roundf(x[QL_QK8_1 / 2 + j] * id);
            sum += y[i].qs[j];
            sum += y[i].qs[QL_QK8_1 / 2 + j];
        }
        y[i].s = ql_fp32_to_fp16((float)sum * d);
    }
}

size_t ql_quantize_q8_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix)
{
    ql_quantize_row_q8_0_ref(src, dst, nrows * n_per_row);
    return (size_t)(nrows * n_per_row / QL_QK8_0) * sizeof(ql_block_q8_0);
}

size_t ql_quantize_q8_1(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix)
{
    ql_quantize_row_q8_1_ref(src, dst, nrows * n_per_row);
    return (size_t)(nrows * n_per_row / QL_QK8_1) * sizeof(ql_block_q8_1);
}

void ql_dequantize_q8_0(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    const ql_block_q8_0 *x = src;
    int64_t nb = nrows * n_per_row / QL_QK8_0;
    for (int64_t i = 0; i < nb; i++, dst += QL_QK8_0) {
        const float d = ql_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QL_QK8_0; ++j)
            dst[j] = (float)x[i].qs[j] * d;
    }
}

void ql_dequantize_q8_1(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    const ql_block_q8_1 *x = src;
    int64_t nb = nrows * n_per_row / QL_QK8_1;
    for (int64_t i = 0; i < nb; i++, dst += QL_QK8_1) {
        const float d = ql_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QL_QK8_1; ++j)
            dst[j] = (float)x[i].qs[j] * d;
    }
}
