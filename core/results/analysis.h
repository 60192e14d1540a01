/* qlab: statistics for the analyses of the results store: the Pareto front of
 * configs in (size, error), and a paired bootstrap over evaluation chunks. */
#ifndef QL_ANALYSIS_H
#define QL_ANALYSIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* ---------------------------------------------------------------- Pareto front */

/* The points not dominated when both coordinates are to be minimised (e.g. x =
 * bits per weight, y = mean KLD): point i is dominated when some j has
 * x_j <= x_i and y_j <= y_i with at least one strict. Identical points do not
 * dominate each other, so all of them are on the front. A point with a NaN
 * coordinate is neither on the front nor dominates anything.
 *
 * on_front[i] receives whether i is on the front. dominated_by (may be NULL)
 * receives, for a dominated i, the index of the dominating point with the
 * smallest x (then smallest y, then lowest index): the cheapest config that is
 * at least as good; -1 for points on the front and points with NaN.
 * O(n^2) comparisons, no allocation. */
void ql_pareto_front(const double *x, const double *y, size_t n, bool *on_front,
                     ptrdiff_t *dominated_by);

/* ---------------------------------------------------------------- bootstrap */

typedef struct {
    double estimate; /* the statistic on the full sample */
    double lo, hi;   /* percentile interval at the requested level */
    double se;       /* standard deviation of the bootstrap replicates */
    /* Two-sided p-value of "no difference", the one the percentile interval implies:
     * twice the share of replicates on the far side of zero, (1 + 2 min(#{D* <= 0},
     * #{D* >= 0})) / (1 + R), at most 1. The interval at level L excludes zero about
     * when p < 1 - L. */
    double p;
    size_t n; /* sample size (chunks) */
    size_t resamples;
} ql_ci;

/* Whether the interval excludes zero: the difference is more than the noise. */
bool ql_ci_excludes_zero(const ql_ci *ci);

/* Paired bootstrap of a difference of token-weighted means over chunks.
 *
 * Chunk i of the text contributes a[i] and b[i], sums over its scored tokens in
 * two runs (e.g. the KLD sums of act mode q8_0 and of f32 for one weight type),
 * and w[i] > 0, its token count (the same for both runs: same text, same ctx).
 * The statistic is the difference of the two token-weighted means,
 *   D = sum_i (a[i] - b[i]) / sum_i w[i],
 * and each replicate recomputes D on n chunk indices drawn with replacement,
 * the same indices for a and b (pairing keeps the chunk-to-chunk variation that
 * both runs share out of the interval). lo and hi are the (1 - level)/2 and
 * (1 + level)/2 quantiles of the replicates, linearly interpolated at rank
 * f (R - 1) (gsl_stats_quantile_from_sorted_data).
 *
 * Deterministic for a given seed (GSL's mt19937), independent of threads.
 * Errors: n < 2, resamples < 100, level outside (0, 1), a non-finite value or
 * a weight <= 0 (QL_EINVAL, naming the chunk); out of memory. */
ql_status ql_bootstrap_paired_diff(const double *a, const double *b, const double *w, size_t n,
                                   size_t resamples, double level, unsigned long seed, ql_ci *out,
                                   ql_error *err);

/* The same for k statistics of the same chunks at once: statistic j compares
 * a[j][0..n) with b[j][0..n), all with weights w, and every replicate draws one set
 * of chunk indices for all of them (so the intervals of ΔKLD, Δ ln PPL and Δ top-1
 * come from the same resamples). out[j] is what ql_bootstrap_paired_diff gives for
 * statistic j alone with the same seed. Errors as there, naming the statistic. */
ql_status ql_bootstrap_paired_diffs(const double *const *a, const double *const *b, const double *w,
                                    size_t k, size_t n, size_t resamples, double level,
                                    unsigned long seed, ql_ci *out, ql_error *err);

/* Defaults of the analyses. 10,000 replicates put the Monte-Carlo error of a
 * 95% percentile bound near 1% of the interval's half-width. */
#define QL_BOOTSTRAP_RESAMPLES 10000
#define QL_BOOTSTRAP_LEVEL     0.95
#define QL_BOOTSTRAP_SEED      20240601UL

#endif
