/* qlab: helpers shared by the ggml-compatible quantizers (legacy, K and IQ4 families).
 *
 * These are the scale searches that ggml's ggml-quants.c (llama.cpp b4747) uses to
 * pick block scales, re-expressed for qlab. Their float arithmetic is part of the
 * format definition: every product, sum and comparison is evaluated in float in the
 * same order as ggml so the chosen integers, and therefore the bytes, are identical.
 * qlab builds with -ffp-contract=off, matching ggml's x86-64 baseline build (no FMA).
 *
 * None of these functions allocate; the caller supplies every work array. */
#ifndef QL_QUANT_COMMON_H
#define QL_QUANT_COMMON_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Groups whose largest magnitude is below this are treated as all-zero. */
#define QL_GROUP_MAX_EPS 1e-15f

/* Round to nearest, ties to even, by adding 1.5 * 2^23 and reading the low mantissa
 * bits. Valid for |v| <= 2^22 - 1; outside that range the result is what ggml's
 * identical trick returns (callers clamp it), so it is kept bit for bit. */
static inline int ql_nearest_int(float v)
{
    float biased = v + 12582912.f;
    int32_t bits;
    memcpy(&bits, &biased, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

/* roundf (nearest, ties away from zero) without the libm call, bit for bit: values of
 * magnitude 2^23 and above are integers already (infinities and NaN pass through too);
 * below, the fractional part |v| - trunc(|v|) is exact. Checked against roundf in
 * tests/unit/test_actquant.c. */
static inline float ql_roundf(float v)
{
    const float a = v < 0.0f ? -v : v;
    if (!(a < 8388608.0f))
        return v;
    float t = (float)(int32_t)a;
    t += (float)(a - t >= 0.5f); /* branch-free: the comparison is a coin flip */
    uint32_t bt, bv;
    memcpy(&bt, &t, sizeof bt);
    memcpy(&bv, &v, sizeof bv);
    bt |= bv & 0x80000000u; /* copysign: roundf keeps the sign of a zero result */
    memcpy(&t, &bt, sizeof t);
    return t;
}

/* A 32-bit field of a block at p (4 bytes, any alignment), little-endian as GGUF
 * stores it. */
static inline void ql_put_u32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t ql_get_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* max |x[j]| over x[0..n), scanned as ggml does (amax = MAX(amax, |x[j]|)). */
static inline float ql_absmax(const float *x, int n)
{
    float amax = 0.0f;
    for (int j = 0; j < n; j++)
        amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    return amax;
}

/* The value of largest magnitude in x[0..n) (the first of equal magnitudes; 0 when
 * all are 0), its magnitude in *amax unless NULL: the scan a signed block scale
 * starts from. */
static inline float ql_signed_absmax(const float *x, int n, float *amax)
{
    float a = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        const float ax = fabsf(x[j]);
        if (ax > a) {
            a = ax;
            max = x[j];
        }
    }
    if (amax)
        *amax = a;
    return max;
}

/* The 16 IQ4_NL / IQ4_XS code values (a non-uniform 4-bit grid), ascending. */
extern const int8_t ql_iq4nl_values[16];

/* Index of the entry of the ascending table val[0..n) nearest to x (ties go up). Inline:
 * the IQ4 searches call it for every value of every trial scale. */
static inline int ql_best_index_int8(int n, const int8_t *val, float x)
{
    if (x <= val[0])
        return 0;
    if (x >= val[n - 1])
        return n - 1;
    int lo = 0, hi = n - 1;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (x < val[mid])
            hi = mid;
        else
            lo = mid;
    }
    /* Both differences in float, as ggml computes them; a tie picks the upper level. */
    return x - val[hi - 1] < val[hi] - x ? hi - 1 : hi;
}

/* Symmetric search over n values (ggml make_qx_quants, rmse_type 1): levels
 * L[i] in [0, 2*nmax), value = scale * (L[i] - nmax). Weights qw, or x^2 when NULL.
 * Tries 19 scales around nmax/max and refits the scale by weighted least squares.
 * Returns the scale (negative when the largest magnitude is positive). */
float ql_make_qx_quants(int n, int nmax, const float *x, int8_t *L, const float *qw);

/* ql_make_qx_quants that also says how the levels it returns were rounded:
 * L[i] = nmax + clamp(nearest_int(*round_iscale * x[i]), -nmax, nmax - 1) (0 for an
 * all-zero group, whose levels are all 0). round_iscale may be NULL. */
float ql_make_qx_quants_r(int n, int nmax, const float *x, int8_t *L, const float *qw,
                          float *round_iscale);

/* Q3_K's symmetric search with x^2 weights and coordinate-descent refinement
 * (ggml make_q3_quants with do_rmse): L[i] in [0, 2*nmax). Returns the scale. */
float ql_make_q3_quants(int n, int nmax, const float *x, int8_t *L);

/* Asymmetric search with weights (ggml make_qkx2_quants; make_qkx3_quants is the
 * same search, x^2 standing in for absent weights, which no caller relies on):
 * value = scale * L[i] - the_min with L[i] in [0, nmax]. After the plain fit it tries
 * nstep+1 inverse scales (rmin + rdelta*is + nmax)/(max-min), each refit by weighted
 * least squares, keeping the best; max - min uses the best minimum so far, so it
 * moves between trials. use_mad selects absolute instead of squared error. weights
 * and Laux (scratch) hold n values. */
float ql_make_qkx_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                         float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                         bool use_mad);

/* ql_make_qkx_quants that also says how the levels it returns were rounded:
 * L[i] = clamp(nearest_int(*round_iscale * (x[i] - *round_min)), 0, nmax) (0 for a
 * constant group). Either pointer may be NULL. */
float ql_make_qkx_quants_r(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                           float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                           bool use_mad, float *round_iscale, float *round_min);

/* Positive-only weighted search used to quantize K-quant sub-block scales and mins
 * and IQ2_XXS's starting scales (ggml make_qp_quants): L[i] in [0, nmax], value =
 * scale * L[i]. Returns 0 when the largest value is below QL_GROUP_MAX_EPS or the fit
 * ends with sum w L^2 = 0: ggml b4747 tests max == 0 and divides unguarded there
 * (later ggml added these guards against NaN scales). */
float ql_make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *quant_weights);

/* One row of a block format: the n values at x into the row's blocks at y, weighed
 * by the importance qw (NULL: none). */
typedef void (*ql_quant_row_fn)(const float *x, void *y, int64_t n, const float *qw);

/* Quantizes nrows rows of n_per_row values (blocks of block_values values in
 * block_bytes bytes) as ggml does: with ref when there are no importance weights
 * (ggml quantizes the whole chunk at once; rows are independent, so row by row is
 * the same) and with impl row by row otherwise. Returns the bytes written. */
size_t ql_quantize_rows(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        const float *imatrix, int64_t block_values, size_t block_bytes,
                        ql_quant_row_fn ref, ql_quant_row_fn impl);

#endif
