/* qlab: output-distribution metrics of a quantized model against the reference.
 *
 * Per scored token t, with reference distribution p, quantized distribution q
 * and the correct next token y:
 *   NLL_q = -log q(y), NLL_p = -log p(y)
 *   KLD   = sum_v p(v) (log p(v) - log q(v))            (full vocabulary)
 *   RKLD  = sum_v q(v) (log q(v) - log p(v))            (reverse: KL(q || p))
 *   dp    = q(y) - p(y)
 *   maxabs = max_v |q(v) - p(v)|,  top1 = [argmax q == argmax p]
 *   rank_pq = #{v : q(v) > q(argmax p)}: the reference's top token is within the
 *             quantized top k when rank_pq < k; rank_qp the other way round
 *   conf  = p(argmax p), the reference's confidence, bucketed as exllamav3 reports
 *           it: [0, .25), [.25, .5), [.5, .75), [.75, .95), [.95, 1]
 * Aggregates: PPL = exp(mean NLL_q) with error PPL * sqrt(var(NLL_q) / (N-1))
 * (llama-perplexity's formula), the paired ln(PPL_q/PPL_p) with its error; KLD mean
 * (± standard error), min, percentiles 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9 and
 * max (linear interpolation at rank f*(N-1), as llama-perplexity); reverse KLD mean
 * ±; mean KLD ± per confidence bucket with its token count; dp mean ±, RMS ± (error
 * 0.5/RMS times the standard error of mean dp^2, as llama-perplexity), min,
 * percentiles 0.1 ... 99.9 and max; max |dp| over the vocabulary; top-1 agreement
 * and the four top-k agreements, each ± sqrt(f(1-f)/(N-1)). Log-softmax and every
 * sum are in double; the per-token values are stored and reduced in token order, so
 * results do not depend on the thread count. */
#ifndef QL_DISTRIBUTION_H
#define QL_DISTRIBUTION_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"

/* Version of the metric definitions; stored with every run. Bump it when a
 * definition changes so that stored results are recomputed, not mixed. */
#define QL_METRICS_VERSION 2

/* Upper bounds of the reference-confidence buckets but the last ([.95, 1]). */
#define QL_CONF_BUCKETS 5
#define QL_CONF_BOUNDS                                                                             \
    {                                                                                              \
        0.25, 0.50, 0.75, 0.95                                                                     \
    }

typedef struct {
    int64_t n_tokens;
    double ppl, ppl_err;
    double ppl_ref, ppl_ref_err;
    double ln_ppl_ratio, ln_ppl_ratio_err;
    double kld_mean, kld_mean_err, kld_min, kld_p01, kld_p05, kld_p10, kld_p25, kld_median;
    double kld_p75, kld_p90, kld_p95, kld_p99, kld_p999, kld_max;
    double rkld_mean, rkld_mean_err;
    /* Mean KLD ± and token count per reference-confidence bucket (NAN and 0 when empty). */
    double kld_conf_0_25, kld_conf_0_25_err, kld_conf_25_50, kld_conf_25_50_err;
    double kld_conf_50_75, kld_conf_50_75_err, kld_conf_75_95, kld_conf_75_95_err;
    double kld_conf_95_100, kld_conf_95_100_err;
    int64_t n_conf_0_25, n_conf_25_50, n_conf_50_75, n_conf_75_95, n_conf_95_100;
    double dp_mean, dp_mean_err, dp_rms, dp_rms_err, dp_min, dp_max;
    double dp_p001, dp_p01, dp_p05, dp_p10, dp_p25, dp_median, dp_p75, dp_p90, dp_p95;
    double dp_p99, dp_p999;
    double max_abs_prob_err;
    /* Fractions in [0, 1] with their binomial errors. */
    double top1_agree, top1_agree_err;
    double top5_ref_in_q, top5_ref_in_q_err, top10_ref_in_q, top10_ref_in_q_err;
    double top5_q_in_ref, top5_q_in_ref_err, top10_q_in_ref, top10_q_in_ref_err;
} ql_dist_metrics;

typedef struct ql_dist_acc ql_dist_acc;

/* An accumulator for up to max_tokens scored tokens over a vocabulary of n_vocab. */
ql_status ql_dist_acc_alloc(ql_dist_acc **out, int64_t max_tokens, int64_t n_vocab, ql_error *err);
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

/* Fails when a figure every run has (PPL of both models, KLD mean and maximum, dp mean
 * and RMS, max |dp|, top-1 agreement) is not finite, naming it: a run whose figures are
 * NaN is a failure, not a result (a store would keep NaN as NULL, "not measured"). */
ql_status ql_dist_metrics_check_finite(const ql_dist_metrics *m, ql_error *err);

/* The figures llama-perplexity derives from the two perplexities (its closing block):
 * the correlation of the two mean NLLs (in [-1, 1]), PPL(Q)/PPL(base) and
 * PPL(Q) - PPL(base), each with its error. */
typedef struct {
    double cor;
    double ratio, ratio_err;
    double diff, diff_err;
} ql_ppl_pair;
void ql_dist_metrics_ppl_pair(const ql_dist_metrics *m, ql_ppl_pair *out);

/* Writes llama-perplexity's closing statistics block (its --kl-divergence output at
 * b4747: perplexity, KL divergence and token probability statistics, each mean
 * with its ±, percentages as it prints them) from m. It prints nothing for fewer
 * than 100 tokens, as llama-perplexity does; a field that is NAN prints as nan. */
void ql_dist_metrics_print_llama(const ql_dist_metrics *m, FILE *out);

/* Log-softmax of n logits into out (double internally, float out). */
void ql_log_softmax(const float *logits, int64_t n, float *out);

/* Percentile of sorted values by linear interpolation at rank f*(n-1). */
double ql_percentile_sorted(const double *sorted, int64_t n, double f);

/* A config whose perplexity on a text is below the reference's by more than the
 * interval of the paired difference and by more than QL_BEATEN_MIN (0.1% of the PPL:
 * an F16 copy of an F32 reference can be below it by far less, with a paired error
 * smaller still): ln PPL ratio + QL_BEATEN_Z x its standard error < 0 and ln PPL ratio
 * < -QL_BEATEN_MIN. Rounding the weights cannot make a model better at predicting text it was not
 * tuned on, so this is the usual sign of calibration on the evaluated text or of a PPL
 * artefact (too few tokens, a text the model predicts badly); KLD against the
 * reference says how far the config really moved. NAN figures: false. */
#define QL_BEATEN_Z   2.0
#define QL_BEATEN_MIN 1e-3
bool ql_beats_reference(double ln_ppl_ratio, double ln_ppl_ratio_err);

/* The warning's words, with the figures. */
#define QL_BEATEN_HINT "look at KLD, not PPL: overlap with the calibration text or a PPL artefact"

#endif
