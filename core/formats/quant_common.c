/* Scale searches shared by the ggml-compatible quantizers. See quant_common.h.
 *
 * Each function mirrors one search of ggml-quants.c (b4747). Comments name the
 * ggml function; the arithmetic (float, left to right, no contraction) must stay
 * exactly as it is, since a one-ulp change in a sum can flip a chosen level. */
#include "formats/quant_common.h"

#include <math.h>

const int8_t ql_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};

static inline int imax(int a, int b)
{
    return a > b ? a : b;
}

static inline int imin(int a, int b)
{
    return a < b ? a : b;
}

/* ggml make_qx_quants with rmse_type 1 (the only mode the formats qlab writes use). */
float ql_make_qx_quants(int n, int nmax, const float *x, int8_t *L, const float *qw)
{
    return ql_make_qx_quants_r(n, nmax, x, L, qw, NULL);
}

float ql_make_qx_quants_r(int n, int nmax, const float *x, int8_t *L, const float *qw,
                          float *round_iscale)
{
    float amax;
    const float max = ql_signed_absmax(x, n, &amax);
    if (round_iscale)
        *round_iscale = 0.f;
    if (amax < QL_GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i)
            L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    if (round_iscale)
        *round_iscale = iscale;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = ql_nearest_int(iscale * x[i]);
        l = imax(-nmax, imin(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = ql_nearest_int(iscale * x[i]);
            l = imax(-nmax, imin(nmax - 1, l));
            float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = ql_nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
            if (round_iscale)
                *round_iscale = iscale;
        }
    }
    return scale;
}

/* ggml make_q3_quants with do_rmse = true. */
float ql_make_q3_quants(int n, int nmax, const float *x, int8_t *L)
{
    float amax;
    const float max = ql_signed_absmax(x, n, &amax);
    if (amax < QL_GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i)
            L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = ql_nearest_int(iscale * x[i]);
        l = imax(-nmax, imin(nmax - 1, l));
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    /* Coordinate descent: move one level at a time while the fit improves. */
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int new_l = ql_nearest_int(x[i] * sl2 / slx);
                new_l = imax(-nmax, imin(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed)
            break;
    }
    for (int i = 0; i < n; ++i)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ggml make_qkx2_quants, and make_qkx3_quants given weights: the two differ only in
 * the all-equal test (max == min there, max <= min here), which agree because the
 * minimum, clamped to <= 0, never exceeds the maximum. */
float ql_make_qkx_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                         float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                         bool use_mad)
{
    return ql_make_qkx_quants_r(n, nmax, x, weights, L, the_min, Laux, rmin, rdelta, nstep,
                                use_mad, NULL, NULL);
}

float ql_make_qkx_quants_r(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                           float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                           bool use_mad, float *round_iscale, float *round_min)
{
    float r_is = 0.f, r_min = 0.f;
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        if (round_iscale)
            *round_iscale = 0.f;
        if (round_min)
            *round_min = min;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    r_is = iscale;
    r_min = min;
    float best_mad = 0;
    for (int i = 0; i < n; ++i) {
        int l = ql_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_mad += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        if (round_iscale)
            *round_iscale = r_is;
        if (round_min)
            *round_min = r_min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        /* min is the best fit so far (it changes inside this loop). */
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = ql_nearest_int(iscale * (x[i] - min));
            l = imax(0, imin(nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float mad = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                mad += weights[i] * diff;
            }
            if (mad < best_mad) {
                for (int i = 0; i < n; ++i)
                    L[i] = Laux[i];
                best_mad = mad;
                r_is = iscale;
                r_min = min; /* the minimum these levels were rounded with */
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    if (round_iscale)
        *round_iscale = r_is;
    if (round_min)
        *round_min = r_min;
    return scale;
}

float ql_make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *quant_weights)
{
    float max = 0;
    for (int i = 0; i < n; ++i)
        max = max > x[i] ? max : x[i];
    if (max < QL_GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i)
            L[i] = 0;
        return 0.f;
    }
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; ++i)
        L[i] = (uint8_t)ql_nearest_int(iscale * x[i]);
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        float diff = x[i] - scale * (float)L[i];
        best_mse += quant_weights[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0)
            continue;
        float iscale_is = (0.1f * (float)is + (float)nmax) / max;
        float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            int l = imin(nmax, ql_nearest_int(iscale_is * x[i]));
            float diff = x[i] - scale_is * (float)l;
            mse += quant_weights[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = imin(nmax, ql_nearest_int(iscale * x[i]));
        L[i] = (uint8_t)l;
        float w = quant_weights[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = quant_weights[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = imin(nmax, ql_nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed)
            break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

size_t ql_quantize_rows(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix, int64_t block_values, size_t block_bytes,
                        ql_quant_row_fn ref, ql_quant_row_fn impl)
{
    const size_t row_size = (size_t)(n_per_row / block_values) * block_bytes;
    char *q = dst;
    for (int64_t r = 0; r < nrows; r++, src += n_per_row, q += row_size) {
        if (imatrix)
            impl(src, q, n_per_row, imatrix);
        else
            ref(src, q, n_per_row, NULL);
    }
    return (size_t)nrows * row_size;
}
