/* K-quants and Q8_K. See quant_k.h.
 *
 * Re-expresses ggml's quantize_row_X_ref / quantize_row_X_impl / dequantize_row_X
 * for the K family (ggml-quants.c, llama.cpp b4747). The structure of every
 * quantizer is the same: search a scale (and min) per sub-block, quantize those
 * sub-block scales against one fp16 super-block scale, then requantize every value
 * with the scale that the decoder will actually see (fp16 d times the integer). */
#include "formats/quant_k.h"

#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "formats/quant_common.h"

static inline int imax(int a, int b)
{
    return a > b ? a : b;
}

static inline int imin(int a, int b)
{
    return a < b ? a : b;
}

/* Packs 256 two-bit levels: byte 32g + l gets values 128g + l + 32k at bits 2k. */
void ql_k_pack_2bit(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < QL_QK_K; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                      (L[j + l + 96] << 6));
}

/* Sub-block j's 6-bit scale and min from the 12-byte Q4_K/Q5_K layout. */
void ql_k_get_scale_min(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* Inverse of ql_k_get_scale_min for all 8 sub-blocks. */
void ql_k_put_scale_min(const uint8_t *ls, const uint8_t *lm, uint8_t *scales)
{
    for (int j = 0; j < QL_QK_K / 32; ++j) {
        if (j < 4) {
            scales[j] = ls[j];
            scales[j + 4] = lm[j];
        } else {
            scales[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            scales[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            scales[j - 0] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Q3_K: sub-block j's 6-bit (biased) scale minus 32. */
int ql_q3_K_scale(const uint8_t *scales, int j)
{
    int8_t sc = (int8_t)(j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4);
    sc = (int8_t)((sc | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
    return sc;
}

void ql_q3_K_put_scale(uint8_t *scales, int j, int l)
{
    if (j < 8)
        scales[j] = (uint8_t)(l & 0xF);
    else
        scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
    l >>= 4;
    scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
}

/* ======================================================================== */
/* Q2_K                                                                       */
/* ======================================================================== */

static void q2_K_row_ref(const float *x, void *vy, int64_t k, const float *unused)
{
    ql_block_q2_K *y = vy;
    uint8_t L[QL_QK_K], Laux[16];
    float weights[16], mins[QL_QK_K / 16], scales[QL_QK_K / 16];
    const float q4scale = 15.f;

    for (int64_t i = 0; i < k / QL_QK_K; i++, x += QL_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QL_QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l)
                weights[l] = fabsf(x[16 * j + l]);
            scales[j] = ql_make_qkx_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                                           -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < QL_QK_K / 16; ++j)
                y[i].scales[j] = (uint8_t)ql_nearest_int(iscale * scales[j]);
            y[i].d = ql_fp32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < QL_QK_K / 16; ++j)
                y[i].scales[j] = 0;
            y[i].d = ql_fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < QL_QK_K / 16; ++j)
                y[i].scales[j] |= (uint8_t)(ql_nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = ql_fp32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = ql_fp32_to_fp16(0.f);
        }
        for (int j = 0; j < QL_QK_K / 16; ++j) {
            const float d = ql_fp16_to_fp32(y[i].d) * (float)(y[i].scales[j] & 0xF);
            if (!d)
                continue;
            const float dm = ql_fp16_to_fp32(y[i].dmin) * (float)(y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                int l = ql_nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)imax(0, imin(3, l));
            }
        }
        ql_k_pack_2bit(L, y[i].qs);
    }
}

static void q2_K_row_impl(const float *x, void *vy, int64_t n_per_row, const float *qw)
{
    ql_block_q2_K *y = vy;
    uint8_t L[QL_QK_K], Laux[16], Ls[QL_QK_K / 16], Lm[QL_QK_K / 16];
    float mins[QL_QK_K / 16], scales[QL_QK_K / 16], sw[QL_QK_K / 16], weight[16];

    for (int64_t i = 0; i < n_per_row / QL_QK_K; i++, x += QL_QK_K) {
        memset(sw, 0, sizeof sw);
        float sumx2 = 0;
        for (int j = 0; j < QL_QK_K; ++j)
            sumx2 += x[j] * x[j];
        float sigma2 = sumx2 / QL_QK_K;
        for (int j = 0; j < QL_QK_K / 16; ++j) {
            const float *w = qw + QL_QK_K * i + 16 * j;
            for (int l = 0; l < 16; ++l)
                weight[l] = w[l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
            for (int l = 0; l < 16; ++l)
                sw[j] += weight[l];
            scales[j] = ql_make_qkx_quants(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], Laux,
                                           -0.9f, 0.05f, 36, false);
        }
        float dm = ql_make_qp_quants(QL_QK_K / 16, 15, scales, Ls, sw);
        float mm = ql_make_qp_quants(QL_QK_K / 16, 15, mins, Lm, sw);
        y[i].d = ql_fp32_to_fp16(dm);
        y[i].dmin = ql_fp32_to_fp16(mm);
        dm = ql_fp16_to_fp32(y[i].d);
        mm = ql_fp16_to_fp32(y[i].dmin);
        for (int j = 0; j < QL_QK_K / 16; ++j)
            y[i].scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
        for (int j = 0; j < QL_QK_K / 16; ++j) {
            const float d = dm * (float)(y[i].scales[j] & 0xF);
            if (!d)
                continue;
            const float m = mm * (float)(y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                int l = ql_nearest_int((x[16 * j + ii] + m) / d);
                L[16 * j + ii] = (uint8_t)imax(0, imin(3, l));
            }
        }
        ql_k_pack_2bit(L, y[i].qs);
    }
}

size_t ql_quantize_q2_K(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix)
{
    return ql_quantize_rows(src, dst, nrows, n_per_row, imatrix, QL_QK_K, sizeof(ql_block_q2_K),
                            q2_K_row_ref, q2_K_row_impl);
}

void ql_dequantize_q2_K(const void *src, float *y, int64_t nrows, int64_t n_per_row)
{
    const ql_block_q2_K *x = src;
    for (int64_t i = 0; i < nrows * n_per_row / QL_QK_K; i++) {
        const float d = ql_fp16_to_fp32(x[i].d);
        const float min = ql_fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int n = 0; n < QL_QK_K; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                uint8_t sc = x[i].scales[is++];
                float dl = d * (float)(sc & 0xF), ml = min * (float)(sc >> 4);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * (float)((q[l] >> shift) & 3) - ml;
                sc = x[i].scales[is++];
                dl = d * (float)(sc & 0xF);
                ml = min * (float)(sc >> 4);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * (float)((q[l + 16] >> shift) & 3) - ml;
                shift += 2;
            }
            q += 32;
        }
    }
}

/* ======================================================================== */
/* Q3_K                                                                       */
/* ======================================================================== */

/* Requantizes every value with the decoder's scale, splits off the high bit into
 * hmask and packs the low two bits. L holds levels in [0,7] on entry. */
static void q3_K_finish(const float *x, ql_block_q3_K *y, int8_t *L)
{
    for (int j = 0; j < QL_QK_K / 16; ++j) {
        const float d = ql_fp16_to_fp32(y->d) * (float)ql_q3_K_scale(y->scales, j);
        if (!d)
            continue;
        for (int ii = 0; ii < 16; ++ii) {
            int l = ql_nearest_int(x[16 * j + ii] / d);
            L[16 * j + ii] = (int8_t)(imax(-4, imin(3, l)) + 4);
        }
    }
    memset(y->hmask, 0, sizeof y->hmask);
    int m = 0;
    uint8_t hm = 1;
    for (int j = 0; j < QL_QK_K; ++j) {
        if (L[j] > 3) {
            y->hmask[m] |= hm;
            L[j] = (int8_t)(L[j] - 4);
        }
        if (++m == QL_QK_K / 8) {
            m = 0;
            hm = (uint8_t)(hm << 1);
        }
    }
    ql_k_pack_2bit((const uint8_t *)L, y->qs);
}

static void q3_K_row_ref(const float *x, void *vy, int64_t k, const float *unused)
{
    ql_block_q3_K *y = vy;
    int8_t L[QL_QK_K];
    float scales[QL_QK_K / 16];

    for (int64_t i = 0; i < k / QL_QK_K; i++, x += QL_QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QL_QK_K / 16; ++j) {
            scales[j] = ql_make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < QL_QK_K / 16; ++j) {
                int8_t l = (int8_t)ql_nearest_int(iscale * scales[j]);
                ql_q3_K_put_scale(y[i].scales, j, imax(-32, imin(31, l)) + 32);
            }
            y[i].d = ql_fp32_to_fp16(1 / iscale);
        } else {
            y[i].d = ql_fp32_to_fp16(0.f);
        }
        q3_K_finish(x, &y[i], L);
    }
}

static void q3_K_row_impl(const float *x, void *vy, int64_t n_per_row, const float *qw)
{
    ql_block_q3_K *y = vy;
    int8_t L[QL_QK_K], Ls[QL_QK_K / 16];
    float scales[QL_QK_K / 16], weight[16], sw[QL_QK_K / 16];

    for (int64_t i = 0; i < n_per_row / QL_QK_K; i++, x += QL_QK_K) {
        float sumx2 = 0;
        for (int j = 0; j < QL_QK_K; ++j)
            sumx2 += x[j] * x[j];
        float sigma2 = 2 * sumx2 / QL_QK_K;
        for (int j = 0; j < QL_QK_K / 16; ++j) {
            const float *w = qw + QL_QK_K * i + 16 * j;
            for (int l = 0; l < 16; ++l)
                weight[l] = w[l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
            float sumw = 0;
            for (int l = 0; l < 16; ++l)
                sumw += weight[l];
            sw[j] = sumw;
            scales[j] = ql_make_qx_quants(16, 4, x + 16 * j, L + 16 * j, weight);
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        float d_block = ql_make_qx_quants(QL_QK_K / 16, 32, scales, Ls, sw);
        for (int j = 0; j < QL_QK_K / 16; ++j)
            ql_q3_K_put_scale(y[i].scales, j, Ls[j]);
        y[i].d = ql_fp32_to_fp16(d_block);
        q3_K_finish(x, &y[i], L);
    }
}

size_t ql_quantize_q3_K(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix)
{
    return ql_quantize_rows(src, dst, nrows, n_per_row, imatrix, QL_QK_K, sizeof(ql_block_q3_K),
                            q3_K_row_ref, q3_K_row_impl);
}

void ql_dequantize_q3_K(const void *src, float *y, int64_t nrows, int64_t n_per_row)
{
    const ql_block_q3_K *x = src;
    for (int64_t i = 0; i < nrows * n_per_row / QL_QK_K; i++) {
        const float d_all = ql_fp16_to_fp32(x[i].d);
        const uint8_t *q = x[i].qs;
        const uint8_t *hm = x[i].hmask;
        uint8_t m = 1;
        int is = 0;
        for (int n = 0; n < QL_QK_K; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                float dl = d_all * (float)ql_q3_K_scale(x[i].scales, is++);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * (float)(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                dl = d_all * (float)ql_q3_K_scale(x[i].scales, is++);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * (float)(((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
                shift += 2;
                m = (uint8_t)(m << 1);
            }
            q += 32;
        }
    }
}

/* ======================================================================== */
/* Q4_K and Q5_K (shared scale search)                                        */
/* ======================================================================== */

/* Reference search of ggml's Q4_K/Q5_K: per 32-value sub-block an asymmetric fit
 * (make_qkx2_quants) with weights sqrt(mean x^2) + |x|, then the 8 scales and mins
 * rounded to 6 bits against their maxima. Fills d, dmin, scales and L. */
static void qk45_scales_ref(const float *x, int nmax, float rmin, int nstep, uint16_t *d,
                            uint16_t *dmin, uint8_t *packed, uint8_t *L)
{
    uint8_t Laux[32], ls[8], lm[8];
    float weights[32], mins[QL_QK_K / 32], scales[QL_QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QL_QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = ql_make_qkx_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                       rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QL_QK_K / 32; ++j) {
        uint8_t s = (uint8_t)ql_nearest_int(inv_scale * scales[j]);
        uint8_t m = (uint8_t)ql_nearest_int(inv_min * mins[j]);
        ls[j] = s < 63 ? s : 63;
        lm[j] = m < 63 ? m : 63;
    }
    ql_k_put_scale_min(ls, lm, packed);
    *d = ql_fp32_to_fp16(max_scale / 63.f);
    *dmin = ql_fp32_to_fp16(max_min / 63.f);
}

/* Weighted search of ggml's Q4_K/Q5_K impl: make_qkx3_quants per sub-block, then the
 * scales and mins quantized by make_qp_quants under the sub-block weight sums. qw:
 * the block's 256 importance weights (the impl runs only with an imatrix). */
static void qk45_scales_impl(const float *x, const float *qw, int nmax, uint16_t *d, uint16_t *dmin,
                             uint8_t *packed, uint8_t *L)
{
    uint8_t Laux[32], ls[8], lm[8];
    float weights[32], sw[QL_QK_K / 32], mins[QL_QK_K / 32], scales[QL_QK_K / 32];
    float sum_x2 = 0;
    for (int l = 0; l < QL_QK_K; ++l)
        sum_x2 += x[l] * x[l];
    float sigma2 = 2 * sum_x2 / QL_QK_K;
    for (int j = 0; j < QL_QK_K / 32; ++j) {
        const float *w = qw + 32 * j;
        for (int l = 0; l < 32; ++l)
            weights[l] = w[l] * sqrtf(sigma2 + x[32 * j + l] * x[32 * j + l]);
        float sumw = 0;
        for (int l = 0; l < 32; ++l)
            sumw += weights[l];
        sw[j] = sumw;
        scales[j] = ql_make_qkx_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                       -0.9f, 0.05f, 36, false);
    }
    float d_block = ql_make_qp_quants(QL_QK_K / 32, 63, scales, ls, sw);
    float m_block = ql_make_qp_quants(QL_QK_K / 32, 63, mins, lm, sw);
    for (int j = 0; j < QL_QK_K / 32; ++j) {
        ls[j] = ls[j] < 63 ? ls[j] : 63;
        lm[j] = lm[j] < 63 ? lm[j] : 63;
    }
    ql_k_put_scale_min(ls, lm, packed);
    *d = ql_fp32_to_fp16(d_block);
    *dmin = ql_fp32_to_fp16(m_block);
}

/* Requantizes the 256 values with the decoder's sub-block scales and mins. */
static void qk45_requantize(const float *x, int nmax, uint16_t d16, uint16_t dmin16,
                            const uint8_t *packed, uint8_t *L)
{
    for (int j = 0; j < QL_QK_K / 32; ++j) {
        uint8_t sc, m;
        ql_k_get_scale_min(j, packed, &sc, &m);
        const float d = ql_fp16_to_fp32(d16) * (float)sc;
        if (!d)
            continue;
        const float dm = ql_fp16_to_fp32(dmin16) * (float)m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = ql_nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, l));
        }
    }
}

static void pack_q4_K(const uint8_t *L, uint8_t *q)
{
    for (int j = 0; j < QL_QK_K; j += 64, q += 32)
        for (int l = 0; l < 32; ++l)
            q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
}

static void pack_q5_K(const uint8_t *L, uint8_t *qh, uint8_t *ql)
{
    memset(qh, 0, QL_QK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < QL_QK_K; n += 64, ql += 32) {
        for (int j = 0; j < 32; ++j) {
            int l1 = L[n + j];
            if (l1 > 15) {
                l1 -= 16;
                qh[j] |= m1;
            }
            int l2 = L[n + j + 32];
            if (l2 > 15) {
                l2 -= 16;
                qh[j] |= m2;
            }
            ql[j] = (uint8_t)(l1 | (l2 << 4));
        }
        m1 = (uint8_t)(m1 << 2);
        m2 = (uint8_t)(m2 << 2);
    }
}

static void q4_K_row_ref(const float *x, void *vy, int64_t k, const float *unused)
{
    ql_block_q4_K *y = vy;
    uint8_t L[QL_QK_K];
    for (int64_t i = 0; i < k / QL_QK_K; i++, x += QL_QK_K) {
        qk45_scales_ref(x, 15, -1.f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        qk45_requantize(x, 15, y[i].d, y[i].dmin, y[i].scales, L);
        pack_q4_K(L, y[i].qs);
    }
}

static void q4_K_row_impl(const float *x, void *vy, int64_t n_per_row, const float *qw)
{
    ql_block_q4_K *y = vy;
    uint8_t L[QL_QK_K];
    for (int64_t i = 0; i < n_per_row / QL_QK_K; i++, x += QL_QK_K) {
        qk45_scales_impl(x, qw + QL_QK_K * i, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        qk45_requantize(x, 15, y[i].d, y[i].dmin, y[i].scales, L);
        pack_q4_K(L, y[i].qs);
    }
}

size_t ql_quantize_q4_K(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix)
{
    return ql_quantize_rows(src, dst, nrows, n_per_row, imatrix, QL_QK_K, sizeof(ql_block_q4_K),
                            q4_K_row_ref, q4_K_row_impl);
}

void ql_dequantize_q4_K(const void *src, float *y, int64_t nrows, int64_t n_per_row)
{
    const ql_block_q4_K *x = src;
    for (int64_t i = 0; i < nrows * n_per_row / QL_QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const float d = ql_fp16_to_fp32(x[i].d);
        const float min = ql_fp16_to_fp32(x[i].dmin);
        int is = 0;
        uint8_t sc, m;
        for (int j = 0; j < QL_QK_K; j += 64) {
            ql_k_get_scale_min(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            ql_k_get_scale_min(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * (float)(q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

static void q5_K_row_ref(const float *x, void *vy, int64_t k, const float *unused)
{
    ql_block_q5_K *y = vy;
    uint8_t L[QL_QK_K];
    for (int64_t i = 0; i < k / QL_QK_K; i++, x += QL_QK_K) {
        qk45_scales_ref(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        qk45_requantize(x, 31, y[i].d, y[i].dmin, y[i].scales, L);
        pack_q5_K(L, y[i].qh, y[i].qs);
    }
}

static void q5_K_row_impl(const float *x, void *vy, int64_t n_per_row, const float *qw)
{
    ql_block_q5_K *y = vy;
    uint8_t L[QL_QK_K];
    for (int64_t i = 0; i < n_per_row / QL_QK_K; i++, x += QL_QK_K) {
        qk45_scales_impl(x, qw + QL_QK_K * i, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
        qk45_requantize(x, 31, y[i].d, y[i].dmin, y[i].scales, L);
        pack_q5_K(L, y[i].qh, y[i].qs);
    }
}

size_t ql_quantize_q5_K(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix)
{
    return ql_quantize_rows(src, dst, nrows, n_per_row, imatrix, QL_QK_K, sizeof(ql_block_q5_K),
                            q5_K_row_ref, q5_K_row_impl);
}

void ql_dequantize_q5_K(const void *src, float *y, int64_t nrows, int64_t n_per_row)
{
    const ql_block_q5_K *x = src;
    for (int64_t i = 0; i < nrows * n_per_row / QL_QK_K; i++) {
        const uint8_t *ql = x[i].qs;
        const uint8_t *qh = x[i].qh;
        const float d = ql_fp16_to_fp32(x[i].d);
        const float min = ql_fp16_to_fp32(x[i].dmin);
        int is = 0;
        uint8_t sc, m;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QL_QK_K; j += 64) {
            ql_k_get_scale_min(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            ql_k_get_scale_min(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            is += 2;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

/* ======================================================================== */
/* Q6_K                                                                       */
/* ======================================================================== */

static void q6_K_block(const float *x, ql_block_q6_K *y, const float *qw)
{
    int8_t L[QL_QK_K];
    float scales[QL_QK_K / 16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QL_QK_K / 16; ++ib) {
        const float scale =
            ql_make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, qw ? qw + 16 * ib : NULL);
        scales[ib] = scale;
        const float abs_scale = fabsf(scale);
        if (abs_scale > max_abs_scale) {
            max_abs_scale = abs_scale;
            max_scale = scale;
        }
    }
    if (max_abs_scale < QL_GROUP_MAX_EPS) {
        memset(y, 0, sizeof *y);
        y->d = ql_fp32_to_fp16(0.f);
        return;
    }
    float iscale = -128.f / max_scale;
    y->d = ql_fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < QL_QK_K / 16; ++ib)
        y->scales[ib] = (int8_t)imin(127, ql_nearest_int(iscale * scales[ib]));
    for (int j = 0; j < QL_QK_K / 16; ++j) {
        float d = ql_fp16_to_fp32(y->d) * (float)y->scales[j];
        if (!d)
            continue;
        for (int ii = 0; ii < 16; ++ii) {
            int l = ql_nearest_int(x[16 * j + ii] / d);
            L[16 * j + ii] = (int8_t)(imax(-32, imin(31, l)) + 32);
        }
    }
    uint8_t *ql = y->ql, *qh = y->qh;
    for (int j = 0; j < QL_QK_K; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; ++l) {
            const uint8_t q1 = L[j + l + 0] & 0xF;
            const uint8_t q2 = L[j + l + 32] & 0xF;
            const uint8_t q3 = L[j + l + 64] & 0xF;
            const uint8_t q4 = L[j + l + 96] & 0xF;
            ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
            ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
            qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                              ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
        }
    }
}

static void q6_K_row_ref(const float *x, void *vy, int64_t k, const float *unused)
{
    ql_block_q6_K *y = vy;
    for (int64_t i = 0; i < k / QL_QK_K; i++)
        q6_K_block(x + QL_QK_K * i, &y[i], NULL);
}

static void q6_K_row_impl(const float *x, void *vy, int64_t n_per_row, const float *qw)
{
    ql_block_q6_K *y = vy;
    for (int64_t i = 0; i < n_per_row / QL_QK_K; i++)
        q6_K_block(x + QL_QK_K * i, &y[i], qw + QL_QK_K * i);
}

size_t ql_quantize_q6_K(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix)
{
    return ql_quantize_rows(src, dst, nrows, n_per_row, imatrix, QL_QK_K, sizeof(ql_block_q6_K),
                            q6_K_row_ref, q6_K_row_impl);
}

void ql_dequantize_q6_K(const void *src, float *y, int64_t nrows, int64_t n_per_row)
{
    const ql_block_q6_K *x = src;
    for (int64_t i = 0; i < nrows * n_per_row / QL_QK_K; i++) {
        const float d = ql_fp16_to_fp32(x[i].d);
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int n = 0; n < QL_QK_K; n += 128) {
            for (int l = 0; l < 32; ++l) {
                int is = l / 16;
                const int8_t q1 = (int8_t)(((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
                const int8_t q2 = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                const int8_t q3 = (int8_t)(((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                const int8_t q4 = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
                y[l + 0] = d * (float)sc[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

/* ======================================================================== */
/* Q8_K                                                                       */
/* ======================================================================== */

void ql_quantize_row_q8_K_ref(const float *x, ql_block_q8_K *y, int64_t k)
{
    for (int64_t i = 0; i < k / QL_QK_K; i++, x += QL_QK_K) {
        float amax;
        const float max = ql_signed_absmax(x, QL_QK_K, &amax);
        if (!amax) {
            y[i].d = 0;
            memset(y[i].qs, 0, sizeof y[i].qs);
            memset(y[i].bsums, 0, sizeof y[i].bsums);
            continue;
        }
        /* ggml maps the largest magnitude to -127 (not -128) so the level range is
         * symmetric, which its IQ2 dot products rely on. */
        const float iscale = -127.f / max;
        for (int j = 0; j < QL_QK_K; ++j)
            y[i].qs[j] = (int8_t)imin(127, ql_nearest_int(iscale * x[j]));
        for (int j = 0; j < QL_QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii)
                sum += y[i].qs[j * 16 + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

size_t ql_quantize_q8_K(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix)
{
    ql_quantize_row_q8_K_ref(src, dst, nrows * n_per_row);
    return (size_t)(nrows * n_per_row / QL_QK_K) * sizeof(ql_block_q8_K);
}

void ql_dequantize_q8_K(const void *src, float *y, int64_t nrows, int64_t n_per_row)
{
    const ql_block_q8_K *x = src;
    for (int64_t i = 0; i < nrows * n_per_row / QL_QK_K; i++)
        for (int j = 0; j < QL_QK_K; ++j)
            *y++ = x[i].d * (float)x[i].qs[j];
}
