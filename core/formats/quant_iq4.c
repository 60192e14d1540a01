/* IQ4_NL and IQ4_XS. See quant_iq4.h.
 *
 * One search serves both formats, as in ggml's quantize_row_iq4_nl_impl (b4747):
 * per 32-value block a first scale max/-127 (the largest magnitude lands on the
 * table's -127), then 15 trial scales (k - 127)/max, k = -7..7, each refitted by
 * weighted least squares; IQ4_XS then quantizes the block scales to 6 bits against
 * a super-block d and re-picks the indices with the block scale it will store. */
#include "formats/quant_iq4.h"

#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "formats/quant_common.h"
#include "formats/quant_k.h"

#define IQ4_BLOCK 32
#define IQ4_NTRY  7

static inline int imax(int a, int b)
{
    return a > b ? a : b;
}

static inline int imin(int a, int b)
{
    return a < b ? a : b;
}

/* Quantizes one super-block of sbs values (32 for IQ4_NL, 256 for IQ4_XS). scales_h
 * and scales_l are NULL for IQ4_NL. qw: sbs importance weights or NULL. */
static void iq4_superblock(int sbs, const float *x, uint16_t *dh, uint8_t *q4, uint16_t *scales_h,
                           uint8_t *scales_l, const float *qw)
{
    const int8_t *values = ql_iq4nl_values;
    float scales[QL_QK_K / IQ4_BLOCK], weight[IQ4_BLOCK];
    uint8_t L[QL_QK_K];

    float sigma2 = 0;
    for (int j = 0; j < sbs; ++j)
        sigma2 += x[j] * x[j];
    sigma2 *= 2.f / (float)sbs;

    memset(q4, 0, (size_t)sbs / 2);
    *dh = ql_fp32_to_fp16(0.f);

    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < sbs / IQ4_BLOCK; ++ib) {
        const float *xb = x + ib * IQ4_BLOCK;
        uint8_t *Lb = L + ib * IQ4_BLOCK;
        if (qw) {
            const float *w = qw + ib * IQ4_BLOCK;
            for (int j = 0; j < IQ4_BLOCK; ++j)
                weight[j] = w[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        } else {
            for (int j = 0; j < IQ4_BLOCK; ++j)
                weight[j] = xb[j] * xb[j];
        }
        float amax;
        const float max = ql_signed_absmax(xb, IQ4_BLOCK, &amax);
        if (amax < QL_GROUP_MAX_EPS) {
            scales[ib] = 0;
            memset(Lb, 0, IQ4_BLOCK);
            continue;
        }
        float d = -max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < IQ4_BLOCK; ++j) {
            float al = id * xb[j];
            int l = ql_best_index_int8(16, values, al);
            Lb[j] = (uint8_t)l;
            float q = values[l];
            float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -IQ4_NTRY; itry <= IQ4_NTRY; ++itry) {
            id = (float)(itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < IQ4_BLOCK; ++j) {
                float al = id * xb[j];
                int l = ql_best_index_int8(16, values, al);
                float q = values[l];
                float w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        float abs_d = fabsf(d);
        if (abs_d > amax_scale) {
            amax_scale = abs_d;
            max_scale = d;
        }
    }

    if (sbs / IQ4_BLOCK > 1) {
        /* IQ4_XS: 6-bit block scales against d = -max_scale/32. */
        *scales_h = 0;
        float d = -max_scale / 32;
        *dh = ql_fp32_to_fp16(d);
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < sbs / IQ4_BLOCK; ++ib) {
            int l = ql_nearest_int(id * scales[ib]);
            l = imax(-32, imin(31, l));
            float dl = d * (float)l;
            float idl = dl ? 1 / dl : 0.f;
            uint8_t *Lb = L + ib * IQ4_BLOCK;
            const float *xb = x + ib * IQ4_BLOCK;
            for (int j = 0; j < IQ4_BLOCK; ++j)
                Lb[j] = (uint8_t)ql_best_index_int8(16, values, idl * xb[j]);
            l += 32;
            uint8_t l_l = (uint8_t)(l & 0xf), l_h = (uint8_t)(l >> 4);
            if (ib % 2 == 0)
                scales_l[ib / 2] = l_l;
            else
                scales_l[ib / 2] |= (uint8_t)(l_l << 4);
            *scales_h |= (uint16_t)(l_h << 2 * (ib % 8));
        }
    } else {
        /* IQ4_NL: store the block scale and re-pick the indices with it. */
        *dh = ql_fp32_to_fp16(scales[0]);
        float id = scales[0] ? 1 / scales[0] : 0;
        for (int j = 0; j < sbs; ++j)
            L[j] = (uint8_t)ql_best_index_int8(16, values, id * x[j]);
    }

    for (int i = 0; i < sbs / 32; ++i)
        for (int j = 0; j < 16; ++j)
            q4[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

size_t ql_quantize_iq4_nl(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix)
{
    const int64_t nblock = n_per_row / QL_QK4_NL;
    ql_block_iq4_nl *y = dst;
    for (int64_t r = 0; r < nrows; ++r, src += n_per_row, y += nblock)
        for (int64_t ib = 0; ib < nblock; ++ib)
            iq4_superblock(QL_QK4_NL, src + QL_QK4_NL * ib, &y[ib].d, y[ib].qs, NULL, NULL,
                           imatrix ? imatrix + QL_QK4_NL * ib : NULL);
    return (size_t)(nrows * nblock) * sizeof(ql_block_iq4_nl);
}

size_t ql_quantize_iq4_xs(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix)
{
    const int64_t nblock = n_per_row / QL_QK_K;
    ql_block_iq4_xs *y = dst;
    for (int64_t r = 0; r < nrows; ++r, src += n_per_row, y += nblock)
        for (int64_t ib = 0; ib < nblock; ++ib)
            iq4_superblock(QL_QK_K, src + QL_QK_K * ib, &y[ib].d, y[ib].qs, &y[ib].scales_h,
                           y[ib].scales_l, imatrix ? imatrix + QL_QK_K * ib : NULL);
    return (size_t)(nrows * nblock) * sizeof(ql_block_iq4_xs);
}

void ql_dequantize_iq4_nl(const void *src, float *y, int64_t nrows, int64_t n_per_row)
{
    const ql_block_iq4_nl *x = src;
    for (int64_t i = 0; i < nrows * n_per_row / QL_QK4_NL; i++, y += QL_QK4_NL) {
        const float d = ql_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QL_QK4_NL / 2; ++j) {
            y[j] = d * (float)ql_iq4nl_values[x[i].qs[j] & 0xf];
            y[j + QL_QK4_NL / 2] = d * (float)ql_iq4nl_values[x[i].qs[j] >> 4];
        }
    }
}

void ql_dequantize_iq4_xs(const void *src, float *y, int64_t nrows, int64_t n_per_row)
{
    const ql_block_iq4_xs *x = src;
    for (int64_t i = 0; i < nrows * n_per_row / QL_QK_K; i++) {
        const uint8_t *qs = x[i].qs;
        const float d = ql_fp16_to_fp32(x[i].d);
        for (int ib = 0; ib < QL_QK_K / 32; ++ib, y += 32, qs += 16) {
            const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) |
                           (((x[i].scales_h >> 2 * ib) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; ++j) {
                y[j + 0] = dl * (float)ql_iq4nl_values[qs[j] & 0xf];
                y[j + 16] = dl * (float)ql_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}
