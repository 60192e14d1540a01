/* ggml's scalar quantizers in two halves. See quant_split.h.
 *
 * Each chooser below is the parameter half of a quantizer of quant_legacy.c,
 * quant_k.c or quant_iq4.c (which re-express ggml-quants.c, b4747), with the same
 * float arithmetic in the same order; the level half is the final loop of that
 * quantizer, kept as a rule with its inverse scale and offset per sub-block. */
#include "formats/quant_split.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "base/fp16.h"
#include "formats/quant_common.h"
#include "formats/quant_iq4.h"
#include "formats/quant_k.h"
#include "formats/quant_legacy.h"
#include "formats/type_ids.h"

static inline int imax(int a, int b)
{
    return a > b ? a : b;
}

static inline int imin(int a, int b)
{
    return a < b ? a : b;
}

/* ql_nearest_int's valid range is |v| < 2^22: a compensated value far outside the
 * block's range is clamped to the end level anyway, so it is cut there first (values
 * of the range itself, which ggml rounds, are never near it). */
static inline int nearest_clamped(float v)
{
    if (!(v > -4.0e6f))
        v = -4.0e6f;
    if (v > 4.0e6f)
        v = 4.0e6f;
    return ql_nearest_int(v);
}

/* (int)v for v in [0, top], the ends beyond (ggml's (int8_t)/(uint8_t) truncation
 * followed by MIN(top, .) on the values of the block's own range). */
static inline int trunc_clamped(float v, int top)
{
    if (!(v >= 0.0f))
        return 0;
    if (v >= (float)top)
        return top;
    return (int)v;
}

bool ql_split_applies(int32_t type)
{
    switch (type) {
    case QL_TYPE_Q4_0:
    case QL_TYPE_Q4_1:
    case QL_TYPE_Q5_0:
    case QL_TYPE_Q5_1:
    case QL_TYPE_Q8_0:
    case QL_TYPE_Q2_K:
    case QL_TYPE_Q3_K:
    case QL_TYPE_Q4_K:
    case QL_TYPE_Q5_K:
    case QL_TYPE_Q6_K:
    case QL_TYPE_IQ4_NL:
    case QL_TYPE_IQ4_XS:
        return true;
    default:
        return false;
    }
}

const char *ql_split_why_not(int32_t type)
{
    if (ql_split_applies(type))
        return NULL;
    switch (type) {
    case QL_TYPE_IQ1_S:
    case QL_TYPE_IQ1_M:
    case QL_TYPE_IQ2_XXS:
    case QL_TYPE_IQ2_XS:
    case QL_TYPE_IQ2_S:
    case QL_TYPE_IQ3_XXS:
    case QL_TYPE_IQ3_S:
        return "a lattice codebook type: its values are decoded in groups from a shared grid "
               "point, so one column cannot be rounded alone";
    case QL_TYPE_TQ1_0:
    case QL_TYPE_TQ2_0:
        return "a ternary type: its levels are fixed at {-1, 0, 1} times one block maximum, "
               "there is no scale search to split";
    case QL_TYPE_F32:
    case QL_TYPE_F16:
    case QL_TYPE_BF16:
        return "a float type: nothing is rounded to a block grid";
    default:
        return "not a scalar block format with a scale search";
    }
}

static void init_block(ql_split_block *b, int32_t type, int n, int sub, int nlev, int nmax,
                       ql_split_rule rule, int doff)
{
    memset(b, 0, sizeof *b);
    b->type = type;
    b->n = n;
    b->sub = sub;
    b->nlev = nlev;
    b->nmax = nmax;
    b->rule = rule;
    b->doff = doff;
}

/* ======================================================================== */
/* The 32-value formats                                                      */
/* ======================================================================== */

/* Q4_0 and Q5_0: d = max / -(nmax), or the weighted make_qx_quants search. */
static void choose_sym32(ql_split_block *b, int32_t type, int nmax, const float *xb,
                         const float *sigma_row, int64_t n_per_row, const float *w)
{
    float d;
    if (!w) {
        init_block(b, type, 32, 32, 2 * nmax, nmax, QL_SPLIT_TRUNC_SYM, nmax);
        const float max = ql_signed_absmax(xb, 32, NULL);
        d = max / (float)-nmax;
        b->ri[0] = d ? 1.0f / d : 0.0f;
        b->ro[0] = (float)nmax + 0.5f;
    } else {
        init_block(b, type, 32, 32, 2 * nmax, nmax, QL_SPLIT_NEAREST_SYM, nmax);
        float weight[32];
        int8_t L[32];
        const float sigma2 = ql_row_sigma2(sigma_row, n_per_row);
        for (int j = 0; j < 32; ++j)
            weight[j] = w[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        d = ql_make_qx_quants_r(32, nmax, xb, L, weight, &b->ri[0]);
        for (int j = 0; j < 32; ++j)
            b->L0[j] = (uint8_t)L[j];
        b->keep[0] = b->ri[0] == 0.0f;
    }
    const uint16_t d16 = ql_fp32_to_fp16(d);
    memcpy(b->bytes, &d16, 2);
    b->da[0] = ql_fp16_to_fp32(d16);
    b->nbytes = type == QL_TYPE_Q4_0 ? (int)sizeof(ql_block_q4_0) : (int)sizeof(ql_block_q5_0);
}

/* Q4_1 and Q5_1: d = (max - min) / nmax, m = min, or the weighted make_qkx search. */
static void choose_aff32(ql_split_block *b, int32_t type, int nmax, const float *xb,
                         const float *sigma_row, int64_t n_per_row, const float *w)
{
    float d, m;
    if (!w) {
        init_block(b, type, 32, 32, nmax + 1, 0, QL_SPLIT_TRUNC_AFFINE, 0);
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < 32; j++) {
            if (xb[j] < min)
                min = xb[j];
            if (xb[j] > max)
                max = xb[j];
        }
        d = (max - min) / (float)nmax;
        m = min;
        b->ri[0] = d ? 1.0f / d : 0.0f;
        b->ro[0] = min;
    } else {
        init_block(b, type, 32, 32, nmax + 1, 0, QL_SPLIT_NEAREST_AFF, 0);
        float weight[32], min;
        uint8_t Laux[32];
        const float sigma2 = ql_row_sigma2(sigma_row, n_per_row);
        for (int j = 0; j < 32; ++j)
            weight[j] = w[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        d = ql_make_qkx_quants_r(32, nmax, xb, weight, b->L0, &min, Laux, -0.9f, 0.05f, 36, false,
                                 &b->ri[0], &b->ro[0]);
        m = -min;
        b->keep[0] = b->ri[0] == 0.0f;
    }
    const uint16_t d16 = ql_fp32_to_fp16(d), m16 = ql_fp32_to_fp16(m);
    memcpy(b->bytes, &d16, 2);
    memcpy(b->bytes + 2, &m16, 2);
    b->da[0] = ql_fp16_to_fp32(d16);
    b->db[0] = -ql_fp16_to_fp32(m16);
    b->nbytes = type == QL_TYPE_Q4_1 ? (int)sizeof(ql_block_q4_1) : (int)sizeof(ql_block_q5_1);
}

static void choose_q8_0(ql_split_block *b, const float *xb)
{
    init_block(b, QL_TYPE_Q8_0, 32, 32, 256, 128, QL_SPLIT_ROUND, 128);
    const float amax = ql_absmax(xb, 32);
    const float d = amax / ((1 << 7) - 1);
    b->ri[0] = d ? 1.0f / d : 0.0f;
    const uint16_t d16 = ql_fp32_to_fp16(d);
    memcpy(b->bytes, &d16, 2);
    b->da[0] = ql_fp16_to_fp32(d16);
    b->nbytes = (int)sizeof(ql_block_q8_0);
}

/* ======================================================================== */
/* K-quants                                                                  */
/* ======================================================================== */

/* The sub-block rules of an affine K-quant (Q2_K, Q4_K, Q5_K) from its decoder's
 * scales: d_s = d * sc_s, m_s = dmin * mn_s. */
static void set_affine_sub(ql_split_block *b, int s, float d, float dm)
{
    b->ri[s] = d;
    b->ro[s] = dm;
    b->keep[s] = !d;
    b->da[s] = d;
    b->db[s] = dm;
}

static void choose_q2_K(ql_split_block *b, const float *x, const float *qw)
{
    init_block(b, QL_TYPE_Q2_K, 256, 16, 4, 0, QL_SPLIT_DIV_AFFINE, 0);
    ql_block_q2_K y;
    memset(&y, 0, sizeof y);
    uint8_t Laux[16];
    float weight[16], mins[16], scales[16];
    if (!qw) {
        const float q4scale = 15.f;
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; ++j) {
            for (int l = 0; l < 16; ++l)
                weight[l] = fabsf(x[16 * j + l]);
            scales[j] = ql_make_qkx_quants(16, 3, x + 16 * j, weight, b->L0 + 16 * j, &mins[j],
                                           Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; ++j)
                y.scales[j] = (uint8_t)ql_nearest_int(iscale * scales[j]);
            y.d = ql_fp32_to_fp16(max_scale / q4scale);
        } else {
            y.d = ql_fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < 16; ++j)
                y.scales[j] |= (uint8_t)(ql_nearest_int(iscale * mins[j]) << 4);
            y.dmin = ql_fp32_to_fp16(max_min / q4scale);
        } else {
            y.dmin = ql_fp32_to_fp16(0.f);
        }
    } else {
        uint8_t Ls[16], Lm[16];
        float sw[16];
        memset(sw, 0, sizeof sw);
        float sumx2 = 0;
        for (int j = 0; j < 256; ++j)
            sumx2 += x[j] * x[j];
        float sigma2 = sumx2 / 256;
        for (int j = 0; j < 16; ++j) {
            const float *w = qw + 16 * j;
            for (int l = 0; l < 16; ++l)
                weight[l] = w[l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
            for (int l = 0; l < 16; ++l)
                sw[j] += weight[l];
            scales[j] = ql_make_qkx_quants(16, 3, x + 16 * j, weight, b->L0 + 16 * j, &mins[j],
                                           Laux, -0.9f, 0.05f, 36, false);
        }
        float dm = ql_make_qp_quants(16, 15, scales, Ls, sw);
        float mm = ql_make_qp_quants(16, 15, mins, Lm, sw);
        y.d = ql_fp32_to_fp16(dm);
        y.dmin = ql_fp32_to_fp16(mm);
        for (int j = 0; j < 16; ++j)
            y.scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
    }
    const float d = ql_fp16_to_fp32(y.d), dmin = ql_fp16_to_fp32(y.dmin);
    for (int j = 0; j < 16; ++j)
        set_affine_sub(b, j, d * (float)(y.scales[j] & 0xF), dmin * (float)(y.scales[j] >> 4));
    memcpy(b->bytes, &y, sizeof y);
    b->nbytes = (int)sizeof y;
}

/* The sub-block rules of a symmetric K-quant (Q3_K, Q6_K): d_s = d * sc_s. */
static void set_sym_sub(ql_split_block *b, int s, float d)
{
    b->ri[s] = d;
    b->keep[s] = !d;
    b->da[s] = d;
}

static void choose_q3_K(ql_split_block *b, const float *x, const float *qw)
{
    init_block(b, QL_TYPE_Q3_K, 256, 16, 8, 4, QL_SPLIT_DIV_SYM, 4);
    ql_block_q3_K y;
    memset(&y, 0, sizeof y);
    int8_t L[256];
    float scales[16];
    if (!qw) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; ++j) {
            scales[j] = ql_make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; ++j) {
                int8_t l = (int8_t)ql_nearest_int(iscale * scales[j]);
                ql_q3_K_put_scale(y.scales, j, imax(-32, imin(31, l)) + 32);
            }
            y.d = ql_fp32_to_fp16(1 / iscale);
        } else {
            y.d = ql_fp32_to_fp16(0.f);
        }
    } else {
        int8_t Ls[16];
        float weight[16], sw[16];
        float sumx2 = 0;
        for (int j = 0; j < 256; ++j)
            sumx2 += x[j] * x[j];
        float sigma2 = 2 * sumx2 / 256;
        for (int j = 0; j < 16; ++j) {
            const float *w = qw + 16 * j;
            for (int l = 0; l < 16; ++l)
                weight[l] = w[l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
            float sumw = 0;
            for (int l = 0; l < 16; ++l)
                sumw += weight[l];
            sw[j] = sumw;
            scales[j] = ql_make_qx_quants(16, 4, x + 16 * j, L + 16 * j, weight);
        }
        float d_block = ql_make_qx_quants(16, 32, scales, Ls, sw);
        for (int j = 0; j < 16; ++j)
            ql_q3_K_put_scale(y.scales, j, Ls[j]);
        y.d = ql_fp32_to_fp16(d_block);
    }
    for (int j = 0; j < 256; ++j)
        b->L0[j] = (uint8_t)L[j];
    const float d = ql_fp16_to_fp32(y.d);
    for (int j = 0; j < 16; ++j)
        set_sym_sub(b, j, d * (float)ql_q3_K_scale(y.scales, j));
    memcpy(b->bytes, &y, sizeof y);
    b->nbytes = (int)sizeof y;
}

/* Q4_K (nmax 15) and Q5_K (nmax 31): the header fields d, dmin and scales are the
 * first 16 bytes of both blocks. */
static void choose_qk45(ql_split_block *b, int32_t type, int nmax, const float *x, const float *qw)
{
    init_block(b, type, 256, 32, nmax + 1, 0, QL_SPLIT_DIV_AFFINE, 0);
    uint8_t Laux[32], ls[8], lm[8], packed[QL_K_SCALE_SIZE];
    float weights[32], mins[8], scales[8];
    uint16_t d16, dmin16;
    memset(packed, 0, sizeof packed);
    if (!qw) {
        const float rmin = nmax == 15 ? -1.f : -0.5f;
        const int nstep = nmax == 15 ? 20 : 15;
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; ++j) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; ++l)
                sum_x2 += x[32 * j + l] * x[32 * j + l];
            float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; ++l)
                weights[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = ql_make_qkx_quants(32, nmax, x + 32 * j, weights, b->L0 + 32 * j, &mins[j],
                                           Laux, rmin, 0.1f, nstep, false);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < 8; ++j) {
            uint8_t s = (uint8_t)ql_nearest_int(inv_scale * scales[j]);
            uint8_t m = (uint8_t)ql_nearest_int(inv_min * mins[j]);
            ls[j] = s < 63 ? s : 63;
            lm[j] = m < 63 ? m : 63;
        }
        ql_k_put_scale_min(ls, lm, packed);
        d16 = ql_fp32_to_fp16(max_scale / 63.f);
        dmin16 = ql_fp32_to_fp16(max_min / 63.f);
    } else {
        float sw[8];
        float sum_x2 = 0;
        for (int l = 0; l < 256; ++l)
            sum_x2 += x[l] * x[l];
        float sigma2 = 2 * sum_x2 / 256;
        for (int j = 0; j < 8; ++j) {
            const float *w = qw + 32 * j;
            for (int l = 0; l < 32; ++l)
                weights[l] = w[l] * sqrtf(sigma2 + x[32 * j + l] * x[32 * j + l]);
            float sumw = 0;
            for (int l = 0; l < 32; ++l)
                sumw += weights[l];
            sw[j] = sumw;
            scales[j] = ql_make_qkx_quants(32, nmax, x + 32 * j, weights, b->L0 + 32 * j, &mins[j],
                                           Laux, -0.9f, 0.05f, 36, false);
        }
        float d_block = ql_make_qp_quants(8, 63, scales, ls, sw);
        float m_block = ql_make_qp_quants(8, 63, mins, lm, sw);
        for (int j = 0; j < 8; ++j) {
            ls[j] = ls[j] < 63 ? ls[j] : 63;
            lm[j] = lm[j] < 63 ? lm[j] : 63;
        }
        ql_k_put_scale_min(ls, lm, packed);
        d16 = ql_fp32_to_fp16(d_block);
        dmin16 = ql_fp32_to_fp16(m_block);
    }
    const float d = ql_fp16_to_fp32(d16), dmin = ql_fp16_to_fp32(dmin16);
    for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        ql_k_get_scale_min(j, packed, &sc, &m);
        set_affine_sub(b, j, d * (float)sc, dmin * (float)m);
    }
    memcpy(b->bytes, &d16, 2);
    memcpy(b->bytes + 2, &dmin16, 2);
    memcpy(b->bytes + 4, packed, sizeof packed);
    b->nbytes = type == QL_TYPE_Q4_K ? (int)sizeof(ql_block_q4_K) : (int)sizeof(ql_block_q5_K);
}

static void choose_q6_K(ql_split_block *b, const float *x, const float *qw)
{
    init_block(b, QL_TYPE_Q6_K, 256, 16, 64, 32, QL_SPLIT_DIV_SYM, 32);
    ql_block_q6_K y;
    memset(&y, 0, sizeof y);
    int8_t L[256];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
        const float scale =
            ql_make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, qw ? qw + 16 * ib : NULL);
        scales[ib] = scale;
        const float abs_scale = fabsf(scale);
        if (abs_scale > max_abs_scale) {
            max_abs_scale = abs_scale;
            max_scale = scale;
        }
    }
    b->nbytes = (int)sizeof y;
    if (max_abs_scale < QL_GROUP_MAX_EPS) {
        /* ggml zeroes the whole block: every level 0, every scale 0. */
        y.d = ql_fp32_to_fp16(0.f);
        for (int j = 0; j < 16; ++j)
            set_sym_sub(b, j, 0.f);
        memcpy(b->bytes, &y, sizeof y);
        return;
    }
    float iscale = -128.f / max_scale;
    y.d = ql_fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < 16; ++ib)
        y.scales[ib] = (int8_t)imin(127, ql_nearest_int(iscale * scales[ib]));
    for (int j = 0; j < 256; ++j)
        b->L0[j] = (uint8_t)L[j];
    const float d = ql_fp16_to_fp32(y.d);
    for (int j = 0; j < 16; ++j)
        set_sym_sub(b, j, d * (float)y.scales[j]);
    memcpy(b->bytes, &y, sizeof y);
}

/* ======================================================================== */
/* IQ4_NL and IQ4_XS                                                         */
/* ======================================================================== */

static void choose_iq4(ql_split_block *b, int32_t type, int sbs, const float *x, const float *qw)
{
    init_block(b, type, sbs, 32, 16, 0, QL_SPLIT_TABLE, 0);
    b->table = true;
    float scales[8];

    const float max_scale = ql_iq4_scales(sbs, x, qw, scales);

    if (sbs > 32) {
        ql_block_iq4_xs y;
        memset(&y, 0, sizeof y);
        float d = -max_scale / 32;
        y.d = ql_fp32_to_fp16(d);
        const float d_dec = ql_fp16_to_fp32(y.d);
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < sbs / 32; ++ib) {
            int l = ql_nearest_int(id * scales[ib]);
            l = imax(-32, imin(31, l));
            float dl = d * (float)l;
            b->ri[ib] = dl ? 1 / dl : 0.f;
            b->da[ib] = d_dec * (float)l;
            l += 32;
            uint8_t l_l = (uint8_t)(l & 0xf), l_h = (uint8_t)(l >> 4);
            if (ib % 2 == 0)
                y.scales_l[ib / 2] = l_l;
            else
                y.scales_l[ib / 2] |= (uint8_t)(l_l << 4);
            y.scales_h |= (uint16_t)(l_h << 2 * (ib % 8));
        }
        memcpy(b->bytes, &y, sizeof y);
        b->nbytes = (int)sizeof y;
    } else {
        const uint16_t d16 = ql_fp32_to_fp16(scales[0]);
        b->ri[0] = scales[0] ? 1 / scales[0] : 0;
        b->da[0] = ql_fp16_to_fp32(d16);
        memcpy(b->bytes, &d16, 2);
        b->nbytes = (int)sizeof(ql_block_iq4_nl);
    }
}

/* ======================================================================== */
/* The three calls                                                           */
/* ======================================================================== */

void ql_split_choose(int32_t type, const float *row, const float *sigma_row, int64_t n_per_row,
                     int64_t ib, const float *qw, ql_split_block *b)
{
    const int64_t bs = (type == QL_TYPE_Q2_K || type == QL_TYPE_Q3_K || type == QL_TYPE_Q4_K ||
                        type == QL_TYPE_Q5_K || type == QL_TYPE_Q6_K || type == QL_TYPE_IQ4_XS)
                           ? QL_QK_K
                           : 32;
    const float *x = row + bs * ib;
    const float *w = qw ? qw + bs * ib : NULL;
    switch (type) {
    case QL_TYPE_Q4_0:
        choose_sym32(b, type, 8, x, sigma_row, n_per_row, w);
        break;
    case QL_TYPE_Q5_0:
        choose_sym32(b, type, 16, x, sigma_row, n_per_row, w);
        break;
    case QL_TYPE_Q4_1:
        choose_aff32(b, type, 15, x, sigma_row, n_per_row, w);
        break;
    case QL_TYPE_Q5_1:
        choose_aff32(b, type, 31, x, sigma_row, n_per_row, w);
        break;
    case QL_TYPE_Q8_0:
        choose_q8_0(b, x);
        break;
    case QL_TYPE_Q2_K:
        choose_q2_K(b, x, w);
        break;
    case QL_TYPE_Q3_K:
        choose_q3_K(b, x, w);
        break;
    case QL_TYPE_Q4_K:
        choose_qk45(b, type, 15, x, w);
        break;
    case QL_TYPE_Q5_K:
        choose_qk45(b, type, 31, x, w);
        break;
    case QL_TYPE_Q6_K:
        choose_q6_K(b, x, w);
        break;
    case QL_TYPE_IQ4_NL:
        choose_iq4(b, type, 32, x, w);
        break;
    case QL_TYPE_IQ4_XS:
        choose_iq4(b, type, 256, x, w);
        break;
    default:
        QL_ASSERT(!"ql_split_choose: a type without a split quantizer");
    }
}

int ql_split_level(const ql_split_block *b, int j, float x)
{
    const int s = j / b->sub;
    if (b->keep[s])
        return b->L0[j];
    const float ri = b->ri[s], ro = b->ro[s];
    const int top = b->nlev - 1;
    switch (b->rule) {
    case QL_SPLIT_TRUNC_SYM:
        return trunc_clamped(x * ri + ro, top);
    case QL_SPLIT_TRUNC_AFFINE:
        return trunc_clamped((x - ro) * ri + 0.5f, top);
    case QL_SPLIT_ROUND: {
        float v = x * ri;
        if (!(v > -127.f))
            v = -127.f;
        if (v > 127.f)
            v = 127.f;
        return (int)ql_roundf(v) + 128;
    }
    case QL_SPLIT_NEAREST_SYM:
        return imax(-b->nmax, imin(b->nmax - 1, nearest_clamped(ri * x))) + b->nmax;
    case QL_SPLIT_NEAREST_AFF:
        return imax(0, imin(top, nearest_clamped(ri * (x - ro))));
    case QL_SPLIT_DIV_SYM:
        return imax(-b->nmax, imin(b->nmax - 1, nearest_clamped(x / ri))) + b->nmax;
    case QL_SPLIT_DIV_AFFINE:
        return imax(0, imin(top, nearest_clamped((x + ro) / ri)));
    case QL_SPLIT_TABLE:
        return ql_best_index_int8(16, ql_iq4nl_values, ri * x);
    }
    return 0;
}

float ql_split_value(const ql_split_block *b, int j, int level)
{
    const int s = j / b->sub;
    if (b->table)
        return b->da[s] * (float)ql_iq4nl_values[level];
    return b->da[s] * (float)(level - b->doff) - b->db[s];
}

/* ---- packing the levels (the layouts of quant_legacy.h, quant_k.h, quant_iq4.h) ---- */

static void pack_nibbles32(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < 16; ++j)
        qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

static void pack_q5(const uint8_t *L, uint8_t qs[16], uint8_t qh[4])
{
    uint32_t h = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = (uint8_t)((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
        h |= (uint32_t)((L[j] & 0x10) >> 4) << j;
        h |= (uint32_t)((L[j + 16] & 0x10) >> 4) << (j + 16);
    }
    ql_put_u32le(qh, h);
}

void ql_split_pack(const ql_split_block *b, const uint8_t *L, void *out)
{
    uint8_t tmp[QL_SPLIT_MAX_VALUES];
    switch (b->type) {
    case QL_TYPE_Q4_0:
    case QL_TYPE_IQ4_NL: {
        ql_block_q4_0 y; /* IQ4_NL has the same layout: fp16 d, 16 bytes of nibbles */
        memcpy(&y, b->bytes, sizeof y);
        pack_nibbles32(L, y.qs);
        memcpy(out, &y, sizeof y);
        break;
    }
    case QL_TYPE_Q4_1: {
        ql_block_q4_1 y;
        memcpy(&y, b->bytes, sizeof y);
        pack_nibbles32(L, y.qs);
        memcpy(out, &y, sizeof y);
        break;
    }
    case QL_TYPE_Q5_0: {
        ql_block_q5_0 y;
        memcpy(&y, b->bytes, sizeof y);
        pack_q5(L, y.qs, y.qh);
        memcpy(out, &y, sizeof y);
        break;
    }
    case QL_TYPE_Q5_1: {
        ql_block_q5_1 y;
        memcpy(&y, b->bytes, sizeof y);
        pack_q5(L, y.qs, y.qh);
        memcpy(out, &y, sizeof y);
        break;
    }
    case QL_TYPE_Q8_0: {
        ql_block_q8_0 y;
        memcpy(&y, b->bytes, sizeof y);
        for (int j = 0; j < 32; ++j)
            y.qs[j] = (int8_t)(L[j] - 128);
        memcpy(out, &y, sizeof y);
        break;
    }
    case QL_TYPE_Q2_K: {
        ql_block_q2_K y;
        memcpy(&y, b->bytes, sizeof y);
        ql_k_pack_2bit(L, y.qs);
        memcpy(out, &y, sizeof y);
        break;
    }
    case QL_TYPE_Q3_K: {
        ql_block_q3_K y;
        memcpy(&y, b->bytes, sizeof y);
        memcpy(tmp, L, 256);
        memset(y.hmask, 0, sizeof y.hmask);
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < QL_QK_K; ++j) {
            if (tmp[j] > 3) {
                y.hmask[m] |= hm;
                tmp[j] = (uint8_t)(tmp[j] - 4);
            }
            if (++m == QL_QK_K / 8) {
                m = 0;
                hm = (uint8_t)(hm << 1);
            }
        }
        ql_k_pack_2bit(tmp, y.qs);
        memcpy(out, &y, sizeof y);
        break;
    }
    case QL_TYPE_Q4_K: {
        ql_block_q4_K y;
        memcpy(&y, b->bytes, sizeof y);
        uint8_t *q = y.qs;
        for (int j = 0; j < QL_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; ++l)
                q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
        memcpy(out, &y, sizeof y);
        break;
    }
    case QL_TYPE_Q5_K: {
        ql_block_q5_K y;
        memcpy(&y, b->bytes, sizeof y);
        memset(y.qh, 0, sizeof y.qh);
        uint8_t *ql = y.qs;
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < QL_QK_K; n += 64, ql += 32) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[n + j];
                if (l1 > 15) {
                    l1 -= 16;
                    y.qh[j] |= m1;
                }
                int l2 = L[n + j + 32];
                if (l2 > 15) {
                    l2 -= 16;
                    y.qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
        }
        memcpy(out, &y, sizeof y);
        break;
    }
    case QL_TYPE_Q6_K: {
        ql_block_q6_K y;
        memcpy(&y, b->bytes, sizeof y);
        uint8_t *ql = y.ql, *qh = y.qh;
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
        memcpy(out, &y, sizeof y);
        break;
    }
    case QL_TYPE_IQ4_XS: {
        ql_block_iq4_xs y;
        memcpy(&y, b->bytes, sizeof y);
        for (int i = 0; i < 8; ++i)
            for (int j = 0; j < 16; ++j)
                y.qs[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
        memcpy(out, &y, sizeof y);
        break;
    }
    default:
        QL_ASSERT(!"ql_split_pack: a type without a split quantizer");
    }
}
