/* qlab: output-distribution metrics of a quantized model against the reference
 * (DESIGN.md section 4).
 *
 * Per scored token t, with reference distribution p, quantized distribution q
 * and the correct next token y:
 *   NLL_q = -log q(y), NLL_p = -log p(y)
 *   KLD   = sum_v p(v) (log p(v) - log q(v))            (full vocabulary)
 *   dp    = q(y) - p(y)
 *   maxabs = max_v |q(v) - p(v)|,  top1 = [argmax q == argmax p]
 * Aggregates: PPL = exp(mean NLL_q) with error PPL * sqrt(var(NLL_q) / (N-1))
 * (llama-perplexity's formula), the paired ln(PPL_q/PPL_p) with its error, KLD
 * mean (± standard error), median, p90, p99, p99.9 and max (percentiles by linear
 * interpolation at rank f*(N-1)), dp mean/RMS/min/max, max |dp| over the
 * vocabulary, top-1 agreement. Log-softmax and every sum are in double; the
 * per-token values are stored and reduced in token order, so results do not
 * depend on the thread count. */
#ifndef QL_METRICS_H
#define QL_METRICS_H

#include <stdint.h>

#include "base/error.h"

/* Version of the metric definitions; stored with every run. Bump it when a
 * definition changes so that stored results are recomputed, not mixed. */
#define QL_METRICS_VERSION 1

typedef struct {
    int64_t n_tokens;
    double ppl, ppl_err;
    double ppl_ref, ppl_ref_err;
    double ln_ppl_ratio, ln_ppl_ratio_err;
    double kld_mean, kld_mean_err, kld_median, kld_p90, kld_p99, kld_p999, kld_max;
    double dp_mean, dp_rms, dp_min, dp_max;
    double max_abs_prob_err;
    double top1_agree; /* fraction in [0, 1] */
} ql_dist_metrics;

typedef struct ql_dist_acc ql_dist_acc;

/* An accumulator for up to max_tokens scored tokens over a vocabulary of n_vocab. */
ql_status ql_dist_acc_alloc(ql_dist_acc **out, int64_t max_tokens, int64_t n_vocab,
                            ql_error *err);
void ql_dist_acc_free(ql_dist_acc *a);
void ql_dist_acc_reset(ql_dist_acc *a);

/* Adds n_tok scored tokens: ref_logp (n_tok, n_vocab) reference log-probabilities,
 * q_logits (n_tok, n_vocab) raw logits of the quantized model, targets[n_tok] the
 * correct next tokens. Parallel over tokens. Fails when max_tokens would be
 * exceeded or a target is out of range. */
ql_status ql_dist_acc_add(ql_dist_acc *a, const float *ref_logp, const float *q_logits,
                          const int32_t *targets, int64_t n_tok, ql_error *err);

/* Aggregates everything added so far. Fields that cannot be computed (fewer than
 * two tokens for an error estimate) are NAN. */
void ql_dist_acc_finish(const ql_dist_acc *a, ql_dist_metrics *out);

/* Sums over tokens [begin, end) of what was added (in order): KL divergence,
 * NLL of the quantized and of the reference model, and top-1 agreements. For
 * per-chunk records that a paired bootstrap resamples. */
void ql_dist_acc_range(const ql_dist_acc *a, int64_t begin, int64_t end, double *kld_sum,
                       double *nll_sum, double *nll_ref_sum, int64_t *top1_count);

/* Log-softmax of n logits into out (double internally, float out). */
void ql_log_softmax(const float *logits, int64_t n, float *out);

/* Percentile of sorted values by linear interpolation at rank f*(n-1). */
double ql_percentile_sorted(const double *sorted, int64_t n, double f);

#endif
