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

/* The IQ4 searches, sixteen lanes at a time (GNU C vectors: SSE2 on any x86-64, the
 * wider registers where the functions are compiled for them). Every lane does, in
 * float, exactly the scalar operations ggml does for its value or candidate scale. */
typedef float iq4_vf __attribute__((vector_size(64)));
typedef int32_t iq4_vi __attribute__((vector_size(64)));

/* The table's index of each lane's value, and the table entry: the count of the
 * midpoints between neighbouring entries that the value reaches. It is the index
 * ql_best_index_int8 returns: near a midpoint both of its differences are exact
 * (the values there are 4.5..116 and the gaps at most 24), so "x - lo < hi - x"
 * is "x < midpoint", a tie going up as there; away from it rounding cannot tie. */
static inline __attribute__((always_inline)) void iq4_lane_index(const iq4_vf *al,
                                                                  iq4_vi *index, iq4_vi *level)
{
    const int8_t *v = ql_iq4nl_values;
    iq4_vi i = {0}, q = {0};
    q += v[0];
    for (int k = 0; k < 15; ++k) {
        const iq4_vi up = *al >= 0.5f * (float)(v[k] + v[k + 1]);
        i -= up;
        q += up & (v[k + 1] - v[k]);
    }
    *index = i;
    *level = q;
}

static inline __attribute__((always_inline)) float iq4_block_scale_body(const float *xb,
                                                                        const float *weight,
                                                                        float max)
{
    const int8_t *values = ql_iq4nl_values;
    /* Lane 0: the first scale max/-127; lanes 1..15: the trials (k - 127)/max. */
    iq4_vf id;
    id[0] = 1 / (-max / values[0]);
    for (int t = 1; t < 16; ++t)
        id[t] = (float)(t - 8 + values[0]) / max;
    iq4_vf sumqx = {0}, sumq2 = {0};
    for (int j = 0; j < IQ4_BLOCK; ++j) {
        const iq4_vf al = id * xb[j];
        iq4_vi index, level;
        iq4_lane_index(&al, &index, &level);
        const iq4_vf q = __builtin_convertvector(level, iq4_vf);
        const iq4_vf wq = weight[j] * q;
        sumqx += wq * xb[j];
        sumq2 += wq * q;
    }
    /* The candidates in ggml's order: the first refit, then each trial that fits better. */
    float d = sumq2[0] > 0 ? sumqx[0] / sumq2[0] : 0.f;
    float best = d * sumqx[0];
    for (int t = 1; t < 16; ++t)
        if (sumq2[t] > 0 && sumqx[t] * sumqx[t] > best * sumq2[t]) {
            d = sumqx[t] / sumq2[t];
            best = d * sumqx[t];
        }
    return d;
}

static inline __attribute__((always_inline)) void iq4_indices_body(const float *x, int n,
                                                                   float id, uint8_t *L)
{
    for (int j = 0; j < n; j += 16) {
        iq4_vf al;
        memcpy(&al, x + j, sizeof al);
        al *= id;
        iq4_vi index, level;
        iq4_lane_index(&al, &index, &level);
        for (int i = 0; i < 16; ++i)
            L[j + i] = (uint8_t)index[i];
    }
}

#define IQ4_AVX512 __attribute__((target("avx512f")))
#define IQ4_AVX2   __attribute__((target("avx2")))

static float block_scale_base(const float *xb, const float *w, float max)
{
    return iq4_block_scale_body(xb, w, max);
}
static IQ4_AVX2 float block_scale_avx2(const float *xb, const float *w, float max)
{
    return iq4_block_scale_body(xb, w, max);
}
static IQ4_AVX512 float block_scale_avx512(const float *xb, const float *w, float max)
{
    return iq4_block_scale_body(xb, w, max);
}
static void indices_base(const float *x, int n, float id, uint8_t *L)
{
    iq4_indices_body(x, n, id, L);
}
static IQ4_AVX2 void indices_avx2(const float *x, int n, float id, uint8_t *L)
{
    iq4_indices_body(x, n, id, L);
}
static IQ4_AVX512 void indices_avx512(const float *x, int n, float id, uint8_t *L)
{
    iq4_indices_body(x, n, id, L);
}

static float block_scale(const float *xb, const float *weight, float max)
{
    if (__builtin_cpu_supports("avx512f"))
        return block_scale_avx512(xb, weight, max);
    if (__builtin_cpu_supports("avx2"))
        return block_scale_avx2(xb, weight, max);
    return block_scale_base(xb, weight, max);
}

void ql_iq4_indices(const float *x, int n, float id, uint8_t *L)
{
    if (__builtin_cpu_supports("avx512f"))
        indices_avx512(x, n, id, L);
    else if (__builtin_cpu_supports("avx2"))
        indices_avx2(x, n, id, L);
    else
        indices_base(x, n, id, L);
}

float ql_iq4_scales(int sbs, const float *x, const float *qw, float *scales)
{
    float weight[IQ4_BLOCK];
    float sigma2 = 0;
    for (int j = 0; j < sbs; ++j)
        sigma2 += x[j] * x[j];
    sigma2 *= 2.f / (float)sbs;

    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < sbs / IQ4_BLOCK; ++ib) {
        const float *xb = x + ib * IQ4_BLOCK;
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
        const float d = amax < QL_GROUP_MAX_EPS ? 0.f : block_scale(xb, weight, max);
        scales[ib] = d;
        if (fabsf(d) > amax_scale) {
            amax_scale = fabsf(d);
            max_scale = d;
        }
    }
    return max_scale;
}

/* Quantizes one super-block of sbs values (32 for IQ4_NL, 256 for IQ4_XS). scales_h
 * and scales_l are NULL for IQ4_NL. qw: sbs importance weights or NULL. */
static void iq4_superblock(int sbs, const float *x, uint16_t *dh, uint8_t *q4, uint16_t *scales_h,
                           uint8_t *scales_l, const float *qw)
{
    float scales[QL_QK_K / IQ4_BLOCK];
    uint8_t L[QL_QK_K];

    memset(q4, 0, (size_t)sbs / 2);
    *dh = ql_fp32_to_fp16(0.f);
    const float max_scale = ql_iq4_scales(sbs, x, qw, scales);

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
            ql_iq4_indices(x + ib * IQ4_BLOCK, IQ4_BLOCK, dl ? 1 / dl : 0.f, L + ib * IQ4_BLOCK);
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
        ql_iq4_indices(x, sbs, scales[0] ? 1 / scales[0] : 0, L);
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
