/* The IQ lattice formats: quantizers and dequantizers bit-identical to ggml.
 *
 * Every arithmetic step below keeps ggml's float operations and their order
 * (which product is formed first, left-to-right sums, float vs int operands),
 * because the encoders compare floats for strict improvement and a last-bit
 * difference changes the chosen grid point. Magic constants (the per-format
 * scale fudge factors, group thresholds, search ranges) are ggml's. */
#include "formats/quant_iq.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "base/fp16.h"
#include "formats/iq_grids.h"
#include "formats/quant_common.h"
#include "formats/type_ids.h"

/* Multi-byte fields are stored in host order, as ggml does; GGUF is little-endian. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "qlab's IQ blocks assume little-endian");

/* Groups whose largest magnitude is below these are stored as zero (ggml's values;
 * the other formats use QL_GROUP_MAX_EPS). */
#define GROUP_EPS_IQ3_XXS 1e-8f
#define GROUP_EPS_IQ2_S   1e-8f
#define GROUP_EPS_IQ1_M   1e-7f
#define GROUP_EPS_IQ1_S   1e-12f

/* The IQ1 grids are {-1,0,1}^8 shifted by +-1/8. */
#define IQ1_DELTA 0.125f

/* ------------------------------------------------------------------------- */
/* Small helpers                                                               */
/* ------------------------------------------------------------------------- */

/* ggml's MAX: a > b ? a : b, so a NaN second operand wins and a NaN first one loses. */
static inline float fmax_ggml(float a, float b)
{
    return a > b ? a : b;
}

static inline int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static inline uint16_t get_u16le(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline void or_u16le(uint8_t *p, unsigned v)
{
    p[0] |= (uint8_t)v;
    p[1] |= (uint8_t)(v >> 8);
}

static inline int8_t as_int8(uint8_t b)
{
    return (int8_t)((int)b - (int)((b & 0x80u) << 1));
}

static const ql_iq_grid *grid(ql_iq_grid_id id)
{
    const ql_iq_grid *g = ql_iq_grid_get(id);
    QL_ASSERT(g != NULL && "ql_iq_prepare() must succeed before IQ (de)quantization");
    return g;
}

static void check_shape(int64_t nrows, int64_t n_per_row)
{
    QL_ASSERT(nrows >= 0 && n_per_row > 0 && n_per_row % QL_QK_K == 0);
}

/* One row of an IQ format into its super-blocks at y. carry is the state IQ1_S and
 * IQ1_M pass from row to row within one call (NULL for the other formats). */
typedef void (*iq_row_fn)(const ql_iq_grid *g, const float *x, void *y, int64_t n,
                          const float *imatrix, void *carry);

/* nrows rows of n_per_row values, row by row with the lattice grid id. */
static size_t quantize_rows(ql_iq_grid_id id, iq_row_fn row, size_t block_bytes, void *carry,
                            const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                            const float *imatrix)
{
    check_shape(nrows, n_per_row);
    const ql_iq_grid *g = grid(id);
    const size_t row_size = (size_t)(n_per_row / QL_QK_K) * block_bytes;
    char *q = dst;
    for (int64_t r = 0; r < nrows; ++r)
        row(g, src + r * n_per_row, q + (size_t)r * row_size, n_per_row, imatrix, carry);
    return (size_t)nrows * row_size;
}

/* Sum of squares of a super-block's 256 values, in index order. */
static float sum_squares(const float *x)
{
    float s = 0;
    for (int i = 0; i < QL_QK_K; ++i)
        s += x[i] * x[i];
    return s;
}

/* Weights w_i = q_i * sqrt(sigma2 + x_i^2); q_i = 1 when there is no imatrix. */
static void weights_sqrt(const float *x, const float *qw, float sigma2, int n, float *w)
{
    for (int i = 0; i < n; ++i) {
        float s = sqrtf(sigma2 + x[i] * x[i]);
        w[i] = qw ? qw[i] * s : s;
    }
}

/* ------------------------------------------------------------------------- */
/* Lattice search shared by IQ2_* and IQ3_*                                    */
/* ------------------------------------------------------------------------- */

/* Folds the signs of 8 values: xval = |x|, and returns the negative positions as
 * bits. With even_parity (IQ2_XXS, IQ2_XS, IQ3_XXS store only 7 sign bits and
 * imply the 8th), an odd count of negatives is made even by keeping the element
 * of least w x^2 (first on ties) negative in xval; the returned bits then have
 * even parity and the caller stores the low 7. */
static uint8_t fold_signs(const float *x, const float *w, bool even_parity, float *xval)
{
    int nflip = 0;
    uint8_t s = 0;
    for (int i = 0; i < 8; ++i) {
        if (x[i] >= 0) {
            xval[i] = x[i];
        } else {
            xval[i] = -x[i];
            ++nflip;
            s |= (uint8_t)(1u << i);
        }
    }
    if (even_parity && nflip % 2) {
        int imin = 0;
        float min = w[0] * x[0] * x[0];
        for (int i = 1; i < 8; ++i) {
            float ax = w[i] * x[i] * x[i];
            if (ax < min) {
                min = ax;
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        s ^= (uint8_t)(1u << imin);
    }
    return s;
}

/* Rounds dim values at inverse scale id to lattice levels l in [0, n_levels),
 * x ~ (2l+1) / id, writes them to L and returns the packed lattice code. */
static int32_t lattice_code(const ql_iq_grid *g, const float *xval, float id, int8_t *L)
{
    int32_t code = 0;
    for (int i = 0; i < g->dim; ++i) {
        int l = ql_nearest_int(0.5f * (id * xval[i] - 1));
        l = clampi(l, 0, g->n_levels - 1);
        L[i] = (int8_t)l;
        code |= l << (g->code_bits * i);
    }
    return code;
}

/* The grid point among an off-grid code's neighbours that minimises
 * sum_i w_i (scale (2l_i+1) - xval_i)^2; writes its levels to L. When no
 * distance is finite (non-finite input; ggml asserts) the first neighbour is
 * taken. */
static int best_neighbour(const ql_iq_grid *g, int32_t mapv, const float *xval, const float *w,
                          float scale, int8_t *L)
{
    QL_ASSERT(mapv < 0 && mapv != QL_IQ_MAP_UNREACHABLE);
    const uint16_t *nb = g->neighbours + (-(int64_t)mapv - 1);
    int n = nb[0];
    QL_ASSERT(n > 0);
    float best_d2 = FLT_MAX;
    int best = nb[1];
    for (int j = 1; j <= n; ++j) {
        const uint8_t *pg = g->lattice + (size_t)nb[j] * (size_t)g->dim;
        float d2 = 0;
        for (int i = 0; i < g->dim; ++i) {
            float q = pg[i];
            float diff = scale * q - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            best = nb[j];
        }
    }
    const uint8_t *pg = g->lattice + (size_t)best * (size_t)g->dim;
    for (int i = 0; i < g->dim; ++i)
        L[i] = (int8_t)((pg[i] - 1) / 2);
    return best;
}

/* Grid index of the levels in L. They are a grid point in every case ggml
 * handles; for degenerate groups (all importance zero, non-finite input) where
 * ggml aborts, levels are clamped and the best neighbour is taken instead. */
static int grid_index_of(const ql_iq_grid *g, int8_t *L, const float *xval, const float *w,
                         float scale)
{
    int32_t code = 0;
    for (int i = 0; i < g->dim; ++i) {
        int l = clampi(L[i], 0, g->n_levels - 1);
        L[i] = (int8_t)l;
        code |= l << (g->code_bits * i);
    }
    int32_t m = g->map[code];
    return m >= 0 ? m : best_neighbour(g, m, xval, w, scale, L);
}

/* Weighted sums of the lattice fit: sumqx = sum w x q, sumq2 = sum w q^2, q = 2l+1. */
static void lattice_sums(int n, const float *w, const float *xval, const int8_t *L, float *sumqx,
                         float *sumq2)
{
    float sx = 0, s2 = 0;
    for (int i = 0; i < n; ++i) {
        float q = 2 * L[i] + 1;
        sx += w[i] * xval[i] * q;
        s2 += w[i] * q * q;
    }
    *sumqx = sx;
    *sumq2 = s2;
}

typedef enum {
    REFINE_ALWAYS,        /* requantize every group at the best scale if it is > 0 (IQ2_XXS) */
    REFINE_ALL_IF_OFF,    /* ... only when some group was off the grid (IQ3_S) */
    REFINE_OFF_GRID_ONLY, /* requantize only the groups that were off the grid */
} refine_mode;

typedef enum {
    ON_GRID_TRUE,  /* on-grid flags start true for each scale group */
    ON_GRID_FALSE, /* ... start false (IQ3_S) */
    ON_GRID_KEEP, /* ... keep the previous group's flags (IQ3_XXS; ggml leaves them as they were) */
} on_grid_init;

typedef struct {
    int n;        /* weights per scale group: 32 or 16 */
    int n_trials; /* scale trials is = -n_trials .. n_trials, */
    float step;   /* inverse scale (2 n_levels - 1 + is * step) / max */
    refine_mode refine;
    on_grid_init init;
} search_spec;

/* ggml's scale search for one scale group: try inverse scales around
 * (2 n_levels - 1) / max, project every dim-group onto the grid (rounding, or
 * the best neighbour of an off-grid code), keep the trial with the largest
 * sumqx^2 / sumq2, then requantize at that scale. L (the group's levels) and
 * on_grid persist between calls like ggml's locals do. Returns the scale. */
static float search_scale(const ql_iq_grid *g, const search_spec *sp, const float *xval,
                          const float *w, const float *waux, float max, float scale, int8_t *L,
                          bool *on_grid)
{
    int ng = sp->n / g->dim, kmax = g->n_levels;
    int8_t Laux[32];
    bool on_aux[8];
    if (sp->init != ON_GRID_KEEP)
        for (int k = 0; k < ng; ++k)
            on_grid[k] = sp->init == ON_GRID_TRUE;
    float best = 0;
    for (int is = -sp->n_trials; is <= sp->n_trials; ++is) {
        float id = (2 * kmax - 1 + is * sp->step) / max;
        float this_scale = 1 / id;
        for (int k = 0; k < ng; ++k) {
            int off = g->dim * k;
            int32_t m = g->map[lattice_code(g, xval + off, id, Laux + off)];
            on_aux[k] = m >= 0;
            if (m < 0)
                best_neighbour(g, m, xval + off, waux + off, this_scale, Laux + off);
        }
        float sumqx, sumq2;
        lattice_sums(sp->n, w, xval, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, (size_t)sp->n);
            memcpy(on_grid, on_aux, (size_t)ng * sizeof *on_grid);
        }
    }
    int n_off = 0;
    for (int k = 0; k < ng; ++k)
        n_off += !on_grid[k];
    bool refine = sp->refine == REFINE_ALWAYS ? scale > 0 : n_off > 0 && scale > 0;
    if (refine) {
        float id = 1 / scale;
        for (int k = 0; k < ng; ++k) {
            if (sp->refine == REFINE_OFF_GRID_ONLY && on_grid[k])
                continue;
            int off = g->dim * k;
            int32_t m = g->map[lattice_code(g, xval + off, id, L + off)];
            if (m < 0)
                best_neighbour(g, m, xval + off, waux + off, scale, L + off);
        }
        float sumqx, sumq2;
        lattice_sums(sp->n, w, xval, L, &sumqx, &sumq2);
        if (sumq2 > 0)
            scale = sumqx / sumq2;
    }
    return scale;
}

/* Integer scale of a group relative to the super-block: l with scale ~ d (2l+1). */
static int group_scale_code(float id, float scale, int max_code)
{
    return clampi(ql_nearest_int(0.5f * (id * scale - 1)), 0, max_code);
}

/* ------------------------------------------------------------------------- */
/* IQ2_XXS                                                                     */
/* ------------------------------------------------------------------------- */

/* Clears a negative or NaN group scale (only possible in degenerate groups where
 * ggml aborts) so the super-block scale stays finite. */
static float sane_scale(float scale)
{
    return scale >= 0 ? scale : 0.f;
}

static void quantize_row_iq2_xxs(const ql_iq_grid *g, const float *x, void *vy, int64_t n,
                                 const float *imatrix, void *unused)
{
    ql_block_iq2_xxs *y = vy;
    static const search_spec spec = {32, 6, 0.1f, REFINE_ALWAYS, ON_GRID_TRUE};
    const int kmax = 3;
    float scales[QL_QK_K / 32], weight[32], waux[32], xval[32];
    int8_t L[32] = {0};
    bool on_grid[4];
    uint8_t signs[4];
    for (int64_t ibl = 0; ibl < n / QL_QK_K; ++ibl) {
        ql_block_iq2_xxs *b = &y[ibl];
        memset(b, 0, sizeof *b);
        const float *xbl = x + QL_QK_K * ibl;
        float sigma2 = sum_squares(xbl) / QL_QK_K;
        float max_scale = 0;
        for (int ib = 0; ib < QL_QK_K / 32; ++ib) {
            const float *xb = xbl + 32 * ib;
            weights_sqrt(xb, imatrix ? imatrix + QL_QK_K * ibl + 32 * ib : NULL, sigma2, 32,
                         weight);
            for (int i = 0; i < 32; ++i)
                waux[i] = sqrtf(weight[i]);
            for (int k = 0; k < 4; ++k)
                signs[k] = fold_signs(xb + 8 * k, weight + 8 * k, true, xval + 8 * k) & 127;
            float max = xval[0];
            for (int i = 1; i < 32; ++i)
                max = fmax_ggml(max, xval[i]);
            if (max < QL_GROUP_MAX_EPS) {
                scales[ib] = 0;
                memset(L, 0, sizeof L);
                continue;
            }
            /* The starting scale: ggml's make_qp_quants. L goes in as uint8 on purpose:
             * a negative level (the parity-flipped element) wraps exactly as in ggml.
             * When the fit ends with sum w l^2 = 0 (no importance on the group's
             * nonzero levels) this returns 0 where ggml b4747 returns 0/0; the
             * search below rounds every trial to level 0 from either, so the bytes
             * agree. */
            float scale = ql_make_qp_quants(32, kmax + 1, xval, (uint8_t *)L, weight);
            float eff_max = scale * kmax;
            scale = search_scale(g, &spec, xval, weight, waux, eff_max, scale, L, on_grid);
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 4; ++k)
                    signs[k] = (uint8_t)(~signs[k] & 127);
            }
            scale = sane_scale(scale);
            uint8_t *rec = b->qs + 8 * ib;
            uint32_t sign_word = 0;
            for (int k = 0; k < 4; ++k) {
                rec[k] = (uint8_t)grid_index_of(g, L + 8 * k, xval + 8 * k, waux + 8 * k, scale);
                sign_word |= (uint32_t)signs[k] << (7 * k);
            }
            ql_put_u32le(rec + 4, sign_word);
            scales[ib] = scale;
            max_scale = fmax_ggml(max_scale, scale);
        }
        if (!max_scale) {
            memset(b->qs, 0, sizeof b->qs);
            continue;
        }
        float d = max_scale / 31;
        b->d = ql_fp32_to_fp16(d);
        float id = 1 / d;
        for (int ib = 0; ib < QL_QK_K / 32; ++ib) {
            uint8_t *rec = b->qs + 8 * ib;
            uint32_t l = (uint32_t)group_scale_code(id, scales[ib], 15);
            ql_put_u32le(rec + 4, ql_get_u32le(rec + 4) | l << 28);
        }
    }
}

size_t ql_quantize_iq2_xxs(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                           const float *imatrix)
{
    return quantize_rows(QL_IQ_GRID_IQ2_XXS, quantize_row_iq2_xxs, sizeof(ql_block_iq2_xxs), NULL,
                         src, dst, nrows, n_per_row, imatrix);
}

/* ------------------------------------------------------------------------- */
/* IQ2_XS                                                                      */
/* ------------------------------------------------------------------------- */

static void quantize_row_iq2_xs(const ql_iq_grid *g, const float *x, void *vy, int64_t n,
                                const float *imatrix, void *unused)
{
    ql_block_iq2_xs *y = vy;
    static const search_spec spec = {16, 9, 0.1f, REFINE_OFF_GRID_ONLY, ON_GRID_TRUE};
    const int kmax = 3;
    float scales[QL_QK_K / 16], weight[16], waux[16], xval[16];
    int8_t L[16] = {0};
    bool on_grid[2];
    uint8_t signs[2];
    for (int64_t ibl = 0; ibl < n / QL_QK_K; ++ibl) {
        ql_block_iq2_xs *b = &y[ibl];
        memset(b, 0, sizeof *b);
        const float *xbl = x + QL_QK_K * ibl;
        float sigma2 = sum_squares(xbl) / QL_QK_K;
        float max_scale = 0;
        for (int ib = 0; ib < QL_QK_K / 16; ++ib) {
            const float *xb = xbl + 16 * ib;
            weights_sqrt(xb, imatrix ? imatrix + QL_QK_K * ibl + 16 * ib : NULL, sigma2, 16,
                         weight);
            for (int i = 0; i < 16; ++i)
                waux[i] = sqrtf(weight[i]);
            for (int k = 0; k < 2; ++k)
                signs[k] = fold_signs(xb + 8 * k, weight + 8 * k, true, xval + 8 * k) & 127;
            float max = xval[0];
            for (int i = 1; i < 16; ++i)
                max = fmax_ggml(max, xval[i]);
            if (max < QL_GROUP_MAX_EPS) {
                scales[ib] = 0;
                memset(L, 0, sizeof L);
                continue;
            }
            float scale =
                search_scale(g, &spec, xval, weight, waux, max, max / (2 * kmax - 1), L, on_grid);
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 2; ++k)
                    signs[k] = (uint8_t)(~signs[k] & 127);
            }
            scale = sane_scale(scale);
            for (int k = 0; k < 2; ++k) {
                int gi = grid_index_of(g, L + 8 * k, xval + 8 * k, waux + 8 * k, scale);
                b->qs[2 * ib + k] = (uint16_t)(gi | signs[k] << 9);
            }
            scales[ib] = scale;
            max_scale = fmax_ggml(max_scale, scale);
        }
        if (!max_scale) {
            memset(b->qs, 0, sizeof b->qs);
            continue;
        }
        float d = max_scale / 31;
        b->d = ql_fp32_to_fp16(d);
        float id = 1 / d;
        for (int ib = 0; ib < QL_QK_K / 16; ++ib) {
            int l = group_scale_code(id, scales[ib], 15);
            b->scales[ib / 2] |= (uint8_t)(l << (4 * (ib % 2)));
        }
    }
}

size_t ql_quantize_iq2_xs(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix)
{
    return quantize_rows(QL_IQ_GRID_IQ2_XS, quantize_row_iq2_xs, sizeof(ql_block_iq2_xs), NULL, src,
                         dst, nrows, n_per_row, imatrix);
}

/* ------------------------------------------------------------------------- */
/* IQ2_S                                                                       */
/* ------------------------------------------------------------------------- */

static void quantize_row_iq2_s(const ql_iq_grid *g, const float *x, void *vy, int64_t n,
                               const float *imatrix, void *unused)
{
    ql_block_iq2_s *y = vy;
    static const search_spec spec = {16, 9, 0.1f, REFINE_OFF_GRID_ONLY, ON_GRID_TRUE};
    const int kmax = 3;
    float scales[QL_QK_K / 16], weight[16], waux[16], xval[16];
    int8_t L[16] = {0};
    bool on_grid[2];
    uint8_t signs[2];
    for (int64_t ibl = 0; ibl < n / QL_QK_K; ++ibl) {
        ql_block_iq2_s *b = &y[ibl];
        memset(b, 0, sizeof *b);
        const float *xbl = x + QL_QK_K * ibl;
        float sigma2 = 2 * sum_squares(xbl) / QL_QK_K;
        float max_scale = 0;
        for (int ib = 0; ib < QL_QK_K / 16; ++ib) {
            const float *xb = xbl + 16 * ib;
            if (imatrix) {
                weights_sqrt(xb, imatrix + QL_QK_K * ibl + 16 * ib, sigma2, 16, weight);
            } else {
                for (int i = 0; i < 16; ++i)
                    weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
            }
            for (int i = 0; i < 16; ++i)
                waux[i] = sqrtf(weight[i]);
            for (int k = 0; k < 2; ++k)
                signs[k] = fold_signs(xb + 8 * k, weight + 8 * k, false, xval + 8 * k);
            float max = xval[0];
            for (int i = 1; i < 16; ++i)
                max = fmax_ggml(max, xval[i]);
            if (max < GROUP_EPS_IQ2_S) {
                scales[ib] = 0;
                continue;
            }
            float scale =
                search_scale(g, &spec, xval, weight, waux, max, max / (2 * kmax - 1), L, on_grid);
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 2; ++k)
                    signs[k] = (uint8_t)~signs[k];
            }
            scale = sane_scale(scale);
            for (int k = 0; k < 2; ++k) {
                int gi = grid_index_of(g, L + 8 * k, xval + 8 * k, waux + 8 * k, scale);
                int i8 = 2 * ib + k;
                b->qs[i8] = (uint8_t)(gi & 255);
                b->qh[i8 / 4] |= (uint8_t)((gi >> 8) << (2 * (i8 % 4)));
                b->qs[QL_QK_K / 8 + i8] = signs[k];
            }
            scales[ib] = scale;
            max_scale = fmax_ggml(max_scale, scale);
        }
        if (!max_scale)
            continue;
        float d = max_scale / 31;
        b->d = ql_fp32_to_fp16(d * 0.9875f);
        float id = 1 / d;
        for (int ib = 0; ib < QL_QK_K / 16; ++ib) {
            int l = group_scale_code(id, scales[ib], 15);
            b->scales[ib / 2] |= (uint8_t)(l << (4 * (ib % 2)));
        }
    }
}

size_t ql_quantize_iq2_s(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                         const float *imatrix)
{
    return quantize_rows(QL_IQ_GRID_IQ2_S, quantize_row_iq2_s, sizeof(ql_block_iq2_s), NULL, src,
                         dst, nrows, n_per_row, imatrix);
}

/* ------------------------------------------------------------------------- */
/* IQ3_XXS                                                                     */
/* ------------------------------------------------------------------------- */

/* Weights of the IQ3 and IQ1_M formats: the sqrt form with an imatrix, x^2 without. */
static void weights_or_squares(const float *x, const float *qw, float sigma2, int n, float *w)
{
    if (qw) {
        weights_sqrt(x, qw, sigma2, n, w);
    } else {
        for (int i = 0; i < n; ++i)
            w[i] = x[i] * x[i];
    }
}

static void quantize_row_iq3_xxs(const ql_iq_grid *g, const float *x, void *vy, int64_t n,
                                 const float *imatrix, void *unused)
{
    ql_block_iq3_xxs *y = vy;
    static const search_spec spec = {32, 15, 0.2f, REFINE_OFF_GRID_ONLY, ON_GRID_KEEP};
    const int kmax = 8;
    float scales[QL_QK_K / 32], weight[32], waux[32], xval[32];
    int8_t L[32] = {0};
    bool on_grid[8] = {true, true, true, true, true, true, true, true};
    uint8_t signs[4];
    for (int64_t ibl = 0; ibl < n / QL_QK_K; ++ibl) {
        ql_block_iq3_xxs *b = &y[ibl];
        memset(b, 0, sizeof *b);
        uint8_t *sas = b->qs + QL_QK_K / 4; /* scales and signs, one uint32 per 32 */
        const float *xbl = x + QL_QK_K * ibl;
        float sigma2 = 2 * sum_squares(xbl) / QL_QK_K;
        float max_scale = 0;
        for (int ib = 0; ib < QL_QK_K / 32; ++ib) {
            const float *xb = xbl + 32 * ib;
            weights_or_squares(xb, imatrix ? imatrix + QL_QK_K * ibl + 32 * ib : NULL, sigma2, 32,
                               weight);
            for (int i = 0; i < 32; ++i)
                waux[i] = sqrtf(weight[i]);
            for (int k = 0; k < 4; ++k)
                signs[k] = fold_signs(xb + 8 * k, weight + 8 * k, true, xval + 8 * k) & 127;
            float max = xval[0];
            for (int i = 1; i < 32; ++i)
                max = fmax_ggml(max, xval[i]);
            if (max < GROUP_EPS_IQ3_XXS) {
                scales[ib] = 0;
                memset(L, 0, sizeof L);
                continue;
            }
            float scale =
                search_scale(g, &spec, xval, weight, waux, max, max / (2 * kmax - 1), L, on_grid);
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 4; ++k)
                    signs[k] = (uint8_t)(~signs[k] & 127);
            }
            scale = sane_scale(scale);
            for (int k = 0; k < 8; ++k)
                b->qs[8 * ib + k] =
                    (uint8_t)grid_index_of(g, L + 4 * k, xval + 4 * k, waux + 4 * k, scale);
            uint32_t word = (uint32_t)signs[0] | (uint32_t)signs[1] << 7 |
                            (uint32_t)signs[2] << 14 | (uint32_t)signs[3] << 21;
            ql_put_u32le(sas + 4 * ib, word);
            scales[ib] = scale;
            max_scale = fmax_ggml(max_scale, scale);
        }
        if (!max_scale) {
            memset(b->qs, 0, sizeof b->qs);
            continue;
        }
        float d = max_scale / 31;
        b->d = ql_fp32_to_fp16(d * 1.0125f);
        float id = 1 / d;
        for (int ib = 0; ib < QL_QK_K / 32; ++ib) {
            uint32_t l = (uint32_t)group_scale_code(id, scales[ib], 15);
            ql_put_u32le(sas + 4 * ib, ql_get_u32le(sas + 4 * ib) | l << 28);
        }
    }
}

size_t ql_quantize_iq3_xxs(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                           const float *imatrix)
{
    return quantize_rows(QL_IQ_GRID_IQ3_XXS, quantize_row_iq3_xxs, sizeof(ql_block_iq3_xxs), NULL,
                         src, dst, nrows, n_per_row, imatrix);
}

/* ------------------------------------------------------------------------- */
/* IQ3_S                                                                       */
/* ------------------------------------------------------------------------- */

static void quantize_row_iq3_s(const ql_iq_grid *g, const float *x, void *vy, int64_t n,
                               const float *imatrix, void *unused)
{
    ql_block_iq3_s *y = vy;
    static const search_spec spec = {32, 9, 0.2f, REFINE_ALL_IF_OFF, ON_GRID_FALSE};
    const int kmax = 8;
    float scales[QL_QK_K / 32], weight[32], waux[32], xval[32];
    int8_t L[32] = {0};
    bool on_grid[8];
    uint8_t signs[4];
    for (int64_t ibl = 0; ibl < n / QL_QK_K; ++ibl) {
        ql_block_iq3_s *b = &y[ibl];
        memset(b, 0, sizeof *b);
        const float *xbl = x + QL_QK_K * ibl;
        float sigma2 = 2 * sum_squares(xbl) / QL_QK_K;
        float max_scale = 0;
        /* ggml advances its grid-index and sign write positions only past groups
         * it stores, so after an all-zero group the next group's low index bytes
         * and signs land in the zero group's slots (the high index bits and the
         * scales stay in place). Decoders read that as is: it is the format. */
        int n_stored = 0;
        for (int ib = 0; ib < QL_QK_K / 32; ++ib) {
            const float *xb = xbl + 32 * ib;
            weights_or_squares(xb, imatrix ? imatrix + QL_QK_K * ibl + 32 * ib : NULL, sigma2, 32,
                               weight);
            for (int i = 0; i < 32; ++i)
                waux[i] = sqrtf(weight[i]);
            for (int k = 0; k < 4; ++k)
                signs[k] = fold_signs(xb + 8 * k, weight + 8 * k, false, xval + 8 * k);
            float max = xval[0];
            for (int i = 1; i < 32; ++i)
                max = fmax_ggml(max, xval[i]);
            if (!max) {
                scales[ib] = 0;
                continue;
            }
            float scale =
                search_scale(g, &spec, xval, weight, waux, max, max / (2 * kmax - 1), L, on_grid);
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 4; ++k)
                    signs[k] = (uint8_t)~signs[k];
            }
            scale = sane_scale(scale);
            for (int k = 0; k < 8; ++k) {
                int gi = grid_index_of(g, L + 4 * k, xval + 4 * k, waux + 4 * k, scale);
                b->qs[8 * n_stored + k] = (uint8_t)(gi & 255);
                b->qh[ib] |= (uint8_t)((gi >> 8) << k);
            }
            memcpy(b->signs + 4 * n_stored, signs, 4);
            ++n_stored;
            scales[ib] = scale;
            max_scale = fmax_ggml(max_scale, scale);
        }
        if (!max_scale)
            continue;
        float d = max_scale / 31;
        b->d = ql_fp32_to_fp16(d * 1.033f);
        float id = 1 / d;
        for (int ib = 0; ib < QL_QK_K / 32; ib += 2) {
            int l1 = group_scale_code(id, scales[ib + 0], 15);
            int l2 = group_scale_code(id, scales[ib + 1], 15);
            b->scales[ib / 2] = (uint8_t)(l1 | l2 << 4);
        }
    }
}

size_t ql_quantize_iq3_s(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                         const float *imatrix)
{
    return quantize_rows(QL_IQ_GRID_IQ3_S, quantize_row_iq3_s, sizeof(ql_block_iq3_s), NULL, src,
                         dst, nrows, n_per_row, imatrix);
}

/* ------------------------------------------------------------------------- */
/* IQ1_S and IQ1_M                                                             */
/* ------------------------------------------------------------------------- */

/* Stable ascending order of n values by index (insertion sort: n <= 32). ggml
 * uses glibc qsort on (value, index) pairs, which is a stable merge sort, and
 * rows of equal values do occur, so stability is part of the format. */
static void sort_by_value(const float *x, int n, int *idx)
{
    for (int i = 0; i < n; ++i)
        idx[i] = i;
    for (int i = 1; i < n; ++i) {
        int v = idx[i], j = i;
        while (j > 0 && x[idx[j - 1]] > x[v]) {
            idx[j] = idx[j - 1];
            --j;
        }
        idx[j] = v;
    }
}

/* Best grid point among an off-grid code's neighbours for the IQ1 formats:
 * levels l decode to xx[l] (the shifted values -1, 0, 1 +- 1/8), distance
 * sum_i w_i (scale xx[l_i] - x_i)^2. First neighbour when nothing is finite. */
static int iq1_best_neighbour(const ql_iq_grid *g, int32_t mapv, const float *x, const float *w,
                              float scale, const float *xx, int8_t *L)
{
    QL_ASSERT(mapv < 0 && mapv != QL_IQ_MAP_UNREACHABLE);
    const uint16_t *nb = g->neighbours + (-(int64_t)mapv - 1);
    int n = nb[0];
    QL_ASSERT(n > 0);
    float best_d2 = FLT_MAX;
    int best = nb[1];
    for (int j = 1; j <= n; ++j) {
        const uint8_t *pg = g->lattice + (size_t)nb[j] * 8;
        float d2 = 0;
        for (int i = 0; i < 8; ++i) {
            float q = xx[(pg[i] - 1) / 2];
            float diff = scale * q - x[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            best = nb[j];
        }
    }
    const uint8_t *pg = g->lattice + (size_t)best * 8;
    for (int i = 0; i < 8; ++i)
        L[i] = (int8_t)((pg[i] - 1) / 2);
    return best;
}

/* Grid index of 8 levels in {0,1,2}; off-grid codes take the best neighbour. */
static int iq1_grid_index(const ql_iq_grid *g, int8_t *L, const float *x, const float *w,
                          float scale, const float *xx, bool *all_on_grid)
{
    int32_t code = 0;
    for (int j = 0; j < 8; ++j)
        code |= L[j] << (2 * j);
    int32_t m = g->map[code];
    if (m >= 0)
        return m;
    *all_on_grid = false;
    return iq1_best_neighbour(g, m, x, w, scale, xx, L);
}

static const float iq1_plus[3] = {-1 + IQ1_DELTA, IQ1_DELTA, 1 + IQ1_DELTA};
static const float iq1_minus[3] = {-1 - IQ1_DELTA, -IQ1_DELTA, 1 - IQ1_DELTA};

/* IQ1_S state that ggml carries from row to row within one call (see quant_iq.h). */
typedef struct {
    int8_t shifts[QL_QK_K / 32];
} iq1s_carry;

static void quantize_row_iq1_s(const ql_iq_grid *g, const float *x, void *vy, int64_t n,
                               const float *imatrix, void *vcarry)
{
    ql_block_iq1_s *y = vy;
    iq1s_carry *carry = vcarry;
    enum { BS = 32 };
    float scales[QL_QK_K / BS], weight[BS], sumx[BS + 1], sumw[BS + 1];
    int8_t L[BS];
    int idx[BS];
    uint16_t index[BS / 8];
    int8_t *shifts = carry->shifts;
    for (int64_t ibl = 0; ibl < n / QL_QK_K; ++ibl) {
        ql_block_iq1_s *b = &y[ibl];
        memset(b, 0, sizeof *b);
        const float *xbl = x + QL_QK_K * ibl;
        float sigma2 = 2 * sum_squares(xbl) / QL_QK_K;
        float max_scale = 0;
        for (int ib = 0; ib < QL_QK_K / BS; ++ib) {
            const float *xb = xbl + BS * ib;
            weights_sqrt(xb, imatrix ? imatrix + QL_QK_K * ibl + BS * ib : NULL, sigma2, BS,
                         weight);
            float max = fabsf(xb[0]);
            for (int i = 1; i < BS; ++i)
                max = fmax_ggml(max, fabsf(xb[i]));
            if (max < GROUP_EPS_IQ1_S) {
                scales[ib] = 0;
                continue;
            }
            /* Three levels: sort the values, and every split of the sorted order
             * into (low, middle, high) is a candidate; prefix sums give each
             * split's optimal scale and score in O(1). */
            sort_by_value(xb, BS, idx);
            sumx[0] = sumw[0] = 0;
            for (int j = 0; j < BS; ++j) {
                int i = idx[j];
                sumx[j + 1] = sumx[j] + weight[i] * xb[i];
                sumw[j + 1] = sumw[j] + weight[i];
            }
            float best_score = -FLT_MIN, scale = max;
            int besti1 = -1, besti2 = -1, best_shift = 0;
            for (int i1 = 0; i1 <= BS; ++i1) {
                for (int i2 = i1; i2 <= BS; ++i2) {
                    const float *xp = iq1_plus, *xm = iq1_minus;
                    float sumqx = (sumx[i1] - sumx[0]) * xp[0] + (sumx[i2] - sumx[i1]) * xp[1] +
                                  (sumx[BS] - sumx[i2]) * xp[2];
                    float sumq2 = (sumw[i1] - sumw[0]) * xp[0] * xp[0] +
                                  (sumw[i2] - sumw[i1]) * xp[1] * xp[1] +
                                  (sumw[BS] - sumw[i2]) * xp[2] * xp[2];
                    if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
                        scale = sumqx / sumq2;
                        best_score = scale * sumqx;
                        besti1 = i1;
                        besti2 = i2;
                        best_shift = 1;
                    }
                    sumqx = (sumx[i1] - sumx[0]) * xm[0] + (sumx[i2] - sumx[i1]) * xm[1] +
                            (sumx[BS] - sumx[i2]) * xm[2];
                    sumq2 = (sumw[i1] - sumw[0]) * xm[0] * xm[0] +
                            (sumw[i2] - sumw[i1]) * xm[1] * xm[1] +
                            (sumw[BS] - sumw[i2]) * xm[2] * xm[2];
                    if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
                        scale = sumqx / sumq2;
                        best_score = scale * sumqx;
                        besti1 = i1;
                        besti2 = i2;
                        best_shift = -1;
                    }
                }
            }
            if (besti1 < 0) {
                /* Only when every weight is zero or non-finite (ggml asserts): store zero. */
                scales[ib] = 0;
                continue;
            }
            for (int j = 0; j < besti1; ++j)
                L[idx[j]] = 0;
            for (int j = besti1; j < besti2; ++j)
                L[idx[j]] = 1;
            for (int j = besti2; j < BS; ++j)
                L[idx[j]] = 2;
            if (scale < 0) {
                for (int j = 0; j < BS; ++j)
                    L[j] = (int8_t)(2 - L[j]);
                scale = -scale;
                best_shift = -best_shift;
            }
            bool all_on_grid = true;
            const float *xx = best_shift == 1 ? iq1_plus : iq1_minus;
            for (int k = 0; k < BS / 8; ++k)
                index[k] = (uint16_t)iq1_grid_index(g, L + 8 * k, xb + 8 * k, weight + 8 * k, scale,
                                                    xx, &all_on_grid);
            if (!all_on_grid) {
                float sumqx = 0, sumq2 = 0;
                for (int k = 0; k < BS / 8; ++k) {
                    const uint8_t *pg = g->lattice + (size_t)index[k] * 8;
                    for (int j = 0; j < 8; ++j) {
                        float w = weight[8 * k + j];
                        float q = xx[(pg[j] - 1) / 2];
                        sumqx += w * q * xb[8 * k + j];
                        sumq2 += w * q * q;
                    }
                }
                if (sumqx > 0 && sumq2 > 0)
                    scale = sumqx / sumq2;
            }
            uint16_t h = 0;
            for (int k = 0; k < BS / 8; ++k) {
                b->qs[(BS / 8) * ib + k] = (uint8_t)(index[k] & 255);
                h |= (uint16_t)((index[k] >> 8) << (3 * k));
            }
            b->qh[ib] = h;
            scales[ib] = sane_scale(scale);
            shifts[ib] = (int8_t)best_shift;
            max_scale = fmax_ggml(max_scale, scales[ib]);
        }
        if (!max_scale)
            continue;
        float d = max_scale / 15;
        b->d = ql_fp32_to_fp16(d * 1.125f);
        float id = 1 / d;
        for (int ib = 0; ib < QL_QK_K / BS; ++ib) {
            int l = group_scale_code(id, scales[ib], 7);
            if (shifts[ib] == -1)
                l |= 8;
            b->qh[ib] |= (uint16_t)(l << 12);
        }
    }
}

size_t ql_quantize_iq1_s(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                         const float *imatrix)
{
    iq1s_carry carry = {{0}};
    return quantize_rows(QL_IQ_GRID_IQ1_S, quantize_row_iq1_s, sizeof(ql_block_iq1_s), &carry, src,
                         dst, nrows, n_per_row, imatrix);
}

/* IQ1_M: the two 8-groups of a 16-group each pick a shift sign; the four
 * combinations are k = 2 * (first group negative) + (second group negative). */
typedef struct {
    int8_t shifts[QL_QK_K / 16];
} iq1m_carry;

static const float *iq1m_shift_values(int k, int combo)
{
    if (k == 0)
        return combo < 2 ? iq1_plus : iq1_minus;
    return combo % 2 == 0 ? iq1_plus : iq1_minus;
}

/* Accumulates one element into the four shift combinations' sums: element i of a
 * 16-group at level lv; i < 8 belongs to the first 8-group. */
static void iq1m_accumulate(int i, int lv, float w, float xi, float *sumqx, float *sumq2)
{
    float p = iq1_plus[lv], m = iq1_minus[lv];
    if (i < 8) {
        sumqx[0] += w * p * xi;
        sumqx[1] += w * p * xi;
        sumqx[2] += w * m * xi;
        sumqx[3] += w * m * xi;
        sumq2[0] += w * p * p;
        sumq2[1] += w * p * p;
        sumq2[2] += w * m * m;
        sumq2[3] += w * m * m;
    } else {
        sumqx[0] += w * p * xi;
        sumqx[2] += w * p * xi;
        sumqx[1] += w * m * xi;
        sumqx[3] += w * m * xi;
        sumq2[0] += w * p * p;
        sumq2[2] += w * p * p;
        sumq2[1] += w * m * m;
        sumq2[3] += w * m * m;
    }
}

static void quantize_row_iq1_m(const ql_iq_grid *g, const float *x, void *vy, int64_t n,
                               const float *imatrix, void *vcarry)
{
    ql_block_iq1_m *y = vy;
    iq1m_carry *carry = vcarry;
    enum { BS = 16 };
    static const uint8_t shift_bits[4] = {0x00, 0x80, 0x08, 0x88};
    float scales[QL_QK_K / BS], weight[BS];
    int8_t L[BS];
    int idx[BS];
    uint16_t index[BS / 8];
    int8_t *shifts = carry->shifts;
    for (int64_t ibl = 0; ibl < n / QL_QK_K; ++ibl) {
        ql_block_iq1_m *b = &y[ibl];
        memset(b, 0, sizeof *b);
        const float *xbl = x + QL_QK_K * ibl;
        const float *qbl = imatrix ? imatrix + QL_QK_K * ibl : NULL;
        float sigma2 = 2 * sum_squares(xbl) / QL_QK_K;
        float max_scale = 0;
        for (int ib = 0; ib < QL_QK_K / BS; ++ib) {
            const float *xb = xbl + BS * ib;
            weights_or_squares(xb, qbl ? qbl + BS * ib : NULL, sigma2, BS, weight);
            float max = fabsf(xb[0]);
            for (int i = 1; i < BS; ++i)
                max = fmax_ggml(max, fabsf(xb[i]));
            if (max < GROUP_EPS_IQ1_M) {
                scales[ib] = 0;
                continue;
            }
            /* Exhaustive over the splits of the sorted values into three levels,
             * for each of the four shift combinations; ggml sums every split from
             * scratch in sorted order, and so do we (the order fixes the bits). */
            sort_by_value(xb, BS, idx);
            float best_score = -FLT_MIN, scale = max;
            int besti1 = -1, besti2 = -1, best_k = -1;
            for (int i1 = 0; i1 <= BS; ++i1) {
                for (int i2 = i1; i2 <= BS; ++i2) {
                    float sumqx[4] = {0}, sumq2[4] = {0};
                    for (int j = 0; j < BS; ++j) {
                        int i = idx[j];
                        int lv = j < i1 ? 0 : j < i2 ? 1 : 2;
                        iq1m_accumulate(i, lv, weight[i], xb[i], sumqx, sumq2);
                    }
                    for (int k = 0; k < 4; ++k) {
                        if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best_score * sumq2[k]) {
                            scale = sumqx[k] / sumq2[k];
                            best_score = scale * sumqx[k];
                            besti1 = i1;
                            besti2 = i2;
                            best_k = k;
                        }
                    }
                }
            }
            if (besti1 < 0) {
                /* Only when every weight is zero or non-finite (ggml asserts): store zero. */
                scales[ib] = 0;
                continue;
            }
            for (int j = 0; j < besti1; ++j)
                L[idx[j]] = 0;
            for (int j = besti1; j < besti2; ++j)
                L[idx[j]] = 1;
            for (int j = besti2; j < BS; ++j)
                L[idx[j]] = 2;
            if (scale < 0) {
                for (int j = 0; j < BS; ++j)
                    L[j] = (int8_t)(2 - L[j]);
                scale = -scale;
                best_k = 3 - best_k;
            }
            bool all_on_grid = true;
            for (int k = 0; k < BS / 8; ++k)
                index[k] = (uint16_t)iq1_grid_index(g, L + 8 * k, xb + 8 * k, weight + 8 * k, scale,
                                                    iq1m_shift_values(k, best_k), &all_on_grid);
            if (!all_on_grid) {
                float sumqx = 0, sumq2 = 0;
                for (int k = 0; k < BS / 8; ++k) {
                    const float *xx = iq1m_shift_values(k, best_k);
                    const uint8_t *pg = g->lattice + (size_t)index[k] * 8;
                    for (int j = 0; j < 8; ++j) {
                        float w = weight[8 * k + j];
                        float q = xx[(pg[j] - 1) / 2];
                        sumqx += w * q * xb[8 * k + j];
                        sumq2 += w * q * q;
                    }
                }
                if (sumqx > 0 && sumq2 > 0)
                    scale = sumqx / sumq2;
            }
            b->qs[2 * ib + 0] = (uint8_t)(index[0] & 255);
            b->qs[2 * ib + 1] = (uint8_t)(index[1] & 255);
            b->qh[ib] = (uint8_t)((index[0] >> 8) | ((index[1] >> 8) << 4));
            scales[ib] = sane_scale(scale);
            shifts[ib] = (int8_t)best_k;
            max_scale = fmax_ggml(max_scale, scales[ib]);
        }
        if (!max_scale)
            continue;
        /* Integer group scales first, then the super-block scale refitted to the
         * final grid points: d = sum w q x / sum w q^2 with q = value (2l+1). */
        float d = max_scale / 15;
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int ib = 0; ib < QL_QK_K / BS; ++ib) {
            int l = group_scale_code(id, scales[ib], 7);
            or_u16le(b->scales + 2 * (ib / 4), (unsigned)l << (3 * (ib % 4)));
            b->qh[ib] |= shift_bits[shifts[ib]];
            const float *xb = xbl + BS * ib;
            weights_or_squares(xb, qbl ? qbl + BS * ib : NULL, sigma2, BS, weight);
            for (int k = 0; k < BS / 8; ++k) {
                const float *xx = iq1m_shift_values(k, shifts[ib]);
                int gi = b->qs[2 * ib + k] + ((b->qh[ib] << (8 - 4 * k)) & 0x700);
                const uint8_t *pg = g->lattice + (size_t)gi * 8;
                for (int j = 0; j < 8; ++j) {
                    float w = weight[8 * k + j];
                    float q = xx[(pg[j] - 1) / 2] * (2 * l + 1);
                    sumqx += w * q * xb[8 * k + j];
                    sumq2 += w * q * q;
                }
            }
        }
        if (sumq2 > 0)
            d = sumqx / sumq2;
        unsigned s = ql_fp32_to_fp16(d * 1.1125f);
        or_u16le(b->scales + 0, (s & 0x000fu) << 12);
        or_u16le(b->scales + 2, (s & 0x00f0u) << 8);
        or_u16le(b->scales + 4, (s & 0x0f00u) << 4);
        or_u16le(b->scales + 6, (s & 0xf000u));
    }
}

size_t ql_quantize_iq1_m(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                         const float *imatrix)
{
    iq1m_carry carry = {{0}};
    return quantize_rows(QL_IQ_GRID_IQ1_S, quantize_row_iq1_m, sizeof(ql_block_iq1_m), &carry, src,
                         dst, nrows, n_per_row, imatrix);
}

/* ------------------------------------------------------------------------- */
/* Dequantization                                                              */
/* ------------------------------------------------------------------------- */

/* y[j] = db * grid byte j * (-1 if sign bit j), for one group of 8. */
static void put_signed8(float *y, float db, const uint8_t *gv, uint8_t signs, const uint8_t *masks)
{
    for (int j = 0; j < 8; ++j)
        y[j] = db * gv[j] * (signs & masks[j] ? -1.f : 1.f);
}

void ql_dequantize_iq2_xxs(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    check_shape(nrows, n_per_row);
    const ql_iq_grid *g = grid(QL_IQ_GRID_IQ2_XXS);
    const ql_block_iq2_xxs *x = src;
    int64_t nb = nrows * (n_per_row / QL_QK_K);
    for (int64_t i = 0; i < nb; ++i) {
        const float d = ql_fp16_to_fp32(x[i].d);
        for (int ib = 0; ib < QL_QK_K / 32; ++ib) {
            const uint8_t *rec = x[i].qs + 8 * ib;
            uint32_t w = ql_get_u32le(rec + 4);
            const float db = d * (0.5f + (float)(w >> 28)) * 0.25f;
            for (int l = 0; l < 4; ++l)
                put_signed8(dst + 8 * l, db, g->values + (size_t)rec[l] * 8,
                            g->signs[(w >> (7 * l)) & 127], g->masks);
            dst += 32;
        }
    }
}

void ql_dequantize_iq2_xs(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    check_shape(nrows, n_per_row);
    const ql_iq_grid *g = grid(QL_IQ_GRID_IQ2_XS);
    const ql_block_iq2_xs *x = src;
    int64_t nb = nrows * (n_per_row / QL_QK_K);
    for (int64_t i = 0; i < nb; ++i) {
        const float d = ql_fp16_to_fp32(x[i].d);
        for (int ib = 0; ib < QL_QK_K / 32; ++ib) {
            float db[2];
            db[0] = d * (0.5f + (float)(x[i].scales[ib] & 0xf)) * 0.25f;
            db[1] = d * (0.5f + (float)(x[i].scales[ib] >> 4)) * 0.25f;
            for (int l = 0; l < 4; ++l) {
                uint16_t q = x[i].qs[4 * ib + l];
                put_signed8(dst + 8 * l, db[l / 2], g->values + (size_t)(q & 511) * 8,
                            g->signs[q >> 9], g->masks);
            }
            dst += 32;
        }
    }
}

void ql_dequantize_iq2_s(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    check_shape(nrows, n_per_row);
    const ql_iq_grid *g = grid(QL_IQ_GRID_IQ2_S);
    const ql_block_iq2_s *x = src;
    int64_t nb = nrows * (n_per_row / QL_QK_K);
    for (int64_t i = 0; i < nb; ++i) {
        const float d = ql_fp16_to_fp32(x[i].d);
        const uint8_t *signs = x[i].qs + QL_QK_K / 8;
        for (int ib = 0; ib < QL_QK_K / 32; ++ib) {
            float db[2];
            db[0] = d * (0.5f + (float)(x[i].scales[ib] & 0xf)) * 0.25f;
            db[1] = d * (0.5f + (float)(x[i].scales[ib] >> 4)) * 0.25f;
            for (int l = 0; l < 4; ++l) {
                int gi = x[i].qs[4 * ib + l] | ((x[i].qh[ib] << (8 - 2 * l)) & 0x300);
                put_signed8(dst + 8 * l, db[l / 2], g->values + (size_t)gi * 8, signs[4 * ib + l],
                            g->masks);
            }
            dst += 32;
        }
    }
}

void ql_dequantize_iq3_xxs(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    check_shape(nrows, n_per_row);
    const ql_iq_grid *g = grid(QL_IQ_GRID_IQ3_XXS);
    const ql_block_iq3_xxs *x = src;
    int64_t nb = nrows * (n_per_row / QL_QK_K);
    for (int64_t i = 0; i < nb; ++i) {
        const float d = ql_fp16_to_fp32(x[i].d);
        const uint8_t *qs = x[i].qs;
        const uint8_t *sas = x[i].qs + QL_QK_K / 4;
        for (int ib = 0; ib < QL_QK_K / 32; ++ib) {
            uint32_t w = ql_get_u32le(sas + 4 * ib);
            const float db = d * (0.5f + (float)(w >> 28)) * 0.5f;
            for (int l = 0; l < 4; ++l) {
                uint8_t signs = g->signs[(w >> (7 * l)) & 127];
                const uint8_t *g1 = g->values + (size_t)qs[2 * l + 0] * 4;
                const uint8_t *g2 = g->values + (size_t)qs[2 * l + 1] * 4;
                for (int j = 0; j < 4; ++j) {
                    dst[j + 0] = db * g1[j] * (signs & g->masks[j + 0] ? -1.f : 1.f);
                    dst[j + 4] = db * g2[j] * (signs & g->masks[j + 4] ? -1.f : 1.f);
                }
                dst += 8;
            }
            qs += 8;
        }
    }
}

void ql_dequantize_iq3_s(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    check_shape(nrows, n_per_row);
    const ql_iq_grid *g = grid(QL_IQ_GRID_IQ3_S);
    const ql_block_iq3_s *x = src;
    int64_t nb = nrows * (n_per_row / QL_QK_K);
    for (int64_t i = 0; i < nb; ++i) {
        const float d = ql_fp16_to_fp32(x[i].d);
        for (int ib = 0; ib < QL_QK_K / 32; ++ib) {
            int s = (x[i].scales[ib / 2] >> (4 * (ib % 2))) & 0xf;
            const float db = d * (float)(1 + 2 * s);
            const uint8_t *qs = x[i].qs + 8 * ib;
            const uint8_t qh = x[i].qh[ib];
            const uint8_t *signs = x[i].signs + 4 * ib;
            for (int l = 0; l < 4; ++l) {
                const uint8_t *g1 =
                    g->values + (size_t)(qs[2 * l + 0] | ((qh << (8 - 2 * l)) & 256)) * 4;
                const uint8_t *g2 =
                    g->values + (size_t)(qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)) * 4;
                for (int j = 0; j < 4; ++j) {
                    dst[j + 0] = db * g1[j] * (signs[l] & g->masks[j + 0] ? -1.f : 1.f);
                    dst[j + 4] = db * g2[j] * (signs[l] & g->masks[j + 4] ? -1.f : 1.f);
                }
                dst += 8;
            }
        }
    }
}

void ql_dequantize_iq1_s(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    check_shape(nrows, n_per_row);
    const ql_iq_grid *g = grid(QL_IQ_GRID_IQ1_S);
    const ql_block_iq1_s *x = src;
    int64_t nb = nrows * (n_per_row / QL_QK_K);
    for (int64_t i = 0; i < nb; ++i) {
        const float d = ql_fp16_to_fp32(x[i].d);
        for (int ib = 0; ib < QL_QK_K / 32; ++ib) {
            uint16_t qh = x[i].qh[ib];
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -IQ1_DELTA : IQ1_DELTA;
            for (int l = 0; l < 4; ++l) {
                int gi = x[i].qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
                const uint8_t *gv = g->values + (size_t)gi * 8;
                for (int j = 0; j < 8; ++j)
                    dst[j] = dl * (as_int8(gv[j]) + delta);
                dst += 8;
            }
        }
    }
}

void ql_dequantize_iq1_m(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    check_shape(nrows, n_per_row);
    const ql_iq_grid *g = grid(QL_IQ_GRID_IQ1_S);
    const ql_block_iq1_m *x = src;
    int64_t nb = nrows * (n_per_row / QL_QK_K);
    for (int64_t i = 0; i < nb; ++i) {
        uint16_t sc[4];
        for (int k = 0; k < 4; ++k)
            sc[k] = get_u16le(x[i].scales + 2 * k);
        uint16_t dbits = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                    ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        const float d = ql_fp16_to_fp32(dbits);
        for (int ib = 0; ib < QL_QK_K / 32; ++ib) {
            const float dl1 = d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 0)) & 0x7) + 1);
            const float dl2 = d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 0x7) + 1);
            const uint8_t *qs = x[i].qs + 4 * ib;
            const uint8_t *qh = x[i].qh + 2 * ib;
            int gi[4] = {qs[0] | ((qh[0] << 8) & 0x700), qs[1] | ((qh[0] << 4) & 0x700),
                         qs[2] | ((qh[1] << 8) & 0x700), qs[3] | ((qh[1] << 4) & 0x700)};
            float delta[4] = {
                qh[0] & 0x08 ? -IQ1_DELTA : IQ1_DELTA, qh[0] & 0x80 ? -IQ1_DELTA : IQ1_DELTA,
                qh[1] & 0x08 ? -IQ1_DELTA : IQ1_DELTA, qh[1] & 0x80 ? -IQ1_DELTA : IQ1_DELTA};
            for (int l = 0; l < 4; ++l) {
                const float dl = l < 2 ? dl1 : dl2;
                const uint8_t *gv = g->values + (size_t)gi[l] * 8;
                for (int j = 0; j < 8; ++j)
                    dst[j] = dl * (as_int8(gv[j]) + delta[l]);
                dst += 8;
            }
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Preparation                                                                 */
/* ------------------------------------------------------------------------- */

ql_status ql_iq_prepare(int32_t type, ql_error *err)
{
    ql_iq_grid_id id;
    switch (type) {
    case QL_TYPE_IQ2_XXS:
        id = QL_IQ_GRID_IQ2_XXS;
        break;
    case QL_TYPE_IQ2_XS:
        id = QL_IQ_GRID_IQ2_XS;
        break;
    case QL_TYPE_IQ2_S:
        id = QL_IQ_GRID_IQ2_S;
        break;
    case QL_TYPE_IQ3_XXS:
        id = QL_IQ_GRID_IQ3_XXS;
        break;
    case QL_TYPE_IQ3_S:
        id = QL_IQ_GRID_IQ3_S;
        break;
    case QL_TYPE_IQ1_S:
    case QL_TYPE_IQ1_M:
        id = QL_IQ_GRID_IQ1_S;
        break;
    default:
        return ql_error_set(err, QL_EINVAL, "type id %d is not an IQ lattice type", (int)type);
    }
    return ql_iq_grid_load(id, err);
}
