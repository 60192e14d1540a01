/* qlab: two configs of a store compared on the same tokens (`qlab compare`, the
 * report's one-axis pairs, the Pareto notebook).
 *
 * Two runs on the same model, text, ctx and chunks score the same tokens, chunk by
 * chunk; the store keeps each chunk's sums (chunk_metrics). Their difference in
 *
 *   kld_mean     mean KL(reference || quantized) per token (nats)
 *   ln_ppl       mean -log q(y) per token, i.e. ln PPL (nats)
 *   top1_agree   share of tokens whose top token is the reference's
 *
 * (each a token-weighted mean over chunks, A minus B) gets a confidence interval
 * and a p-value from a paired bootstrap over chunks (analysis.h: one set of
 * resampled chunks for all three statistics, GSL's mt19937 with a fixed seed, so
 * the same store gives the same intervals). */
#ifndef QL_COMPARE_H
#define QL_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "results/analysis.h"
#include "results/store.h"

typedef enum { QL_CMP_KLD, QL_CMP_LN_PPL, QL_CMP_TOP1, QL_CMP_STATS } ql_compare_stat;

/* "kld_mean", "ln_ppl", "top1_agree" (CSV and JSON keys). */
const char *ql_compare_stat_name(ql_compare_stat s);
/* "mean KLD", "ln PPL", "top-1" (tables). */
const char *ql_compare_stat_label(ql_compare_stat s);

typedef struct {
    size_t resamples; /* >= 100 */
    double level;     /* in (0, 1) */
    unsigned long seed;
} ql_bootstrap_opts;

/* QL_BOOTSTRAP_RESAMPLES, QL_BOOTSTRAP_LEVEL, QL_BOOTSTRAP_SEED. */
void ql_bootstrap_opts_init(ql_bootstrap_opts *o);

typedef struct {
    bool ok;     /* both runs have this statistic in every chunk */
    double a, b; /* each run's token-weighted mean */
    ql_ci diff;  /* of a - b */
} ql_compare_value;

typedef struct {
    size_t chunks;
    double tokens; /* scored tokens of all chunks */
    ql_compare_value v[QL_CMP_STATS];
} ql_comparison;

/* Compares run a with run b by their chunk sums. Errors: a run without per-chunk
 * sums, runs whose chunks do not pair (another text, ctx or chunk count), fewer than
 * two chunks, bootstrap errors; each names the runs. */
ql_status ql_compare_runs(ql_store *s, int64_t run_a, int64_t run_b, const ql_bootstrap_opts *o,
                          ql_comparison *out, ql_error *err);

/* ---------------------------------------------------------------- a front beyond the noise */

/* What dominates a point of a front: the cheapest point that does by more than the
 * noise, and the cheapest that does only within it (indices, -1 for none), with the
 * difference (this point minus that one) of the statistic. */
typedef struct {
    ptrdiff_t beaten_by, within;
    ql_ci beaten_diff, within_diff;
} ql_domination;

/* The Pareto front of n runs in (x, y), both minimised (x: bits per weight; y: the
 * run's mean of stat, QL_CMP_KLD or QL_CMP_LN_PPL, or PPL for the latter), where run j
 * dominates run i only when x_j <= x_i, y_j <= y_i (one strictly) and the interval of
 * stat(i) - stat(j) from ql_compare_runs lies above zero. A point with a NaN coordinate
 * takes no part. out[i].beaten_by < 0 puts i on the front. When a run has no per-chunk
 * sums, every point falls back to plain dominance and *plain is set. Candidates are
 * taken in order of x, so the first that dominates is the cheapest. */
ql_status ql_pareto_beyond_noise(ql_store *s, const int64_t *run_ids, const double *x,
                                 const double *y, size_t n, ql_compare_stat stat,
                                 const ql_bootstrap_opts *o, ql_domination *out, bool *plain,
                                 ql_error *err);

/* ---------------------------------------------------------------- picking configs */

/* The config a user names, among the configs with a finished run (of the sweep, when
 * sweep is not NULL): a config hash or a prefix of one (at least 4 hex digits), or a
 * label: space-separated terms, a bare weight type ("Q4_0") or axis=value with an
 * axis's name or report label ("act=native", "head_type=F16", "imatrix=calib:x"),
 * each compared by its canonical value; axes not named may be anything. Exactly one
 * config must match: none or several is QL_ENOTFOUND / QL_EINVAL with the
 * candidates' hash prefixes and canonical forms. hash receives the full hash. */
ql_status ql_compare_find_config(ql_store *s, const char *sweep, const char *spec, char hash[65],
                                 ql_error *err);

/* Where two configs have finished runs on the same model, text, ctx and chunks. */
typedef struct {
    int64_t run_a, run_b;
    char model[256], dataset[256];
    int ctx, chunks;
} ql_compare_group;

/* Every such place, ordered by model, text, ctx and chunks (*out: caller frees;
 * none is QL_ENOTFOUND, saying where each config was run). */
ql_status ql_compare_groups(ql_store *s, const char *sweep, const char *hash_a, const char *hash_b,
                            ql_compare_group **out, size_t *n, ql_error *err);

#endif
