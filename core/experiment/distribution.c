#include "experiment/distribution.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Ranks are only compared with k = 5 and 10: they are kept in a byte, capped. */
#define RANK_CAP 255

struct ql_dist_acc {
    int64_t max_tokens, n_vocab, n;
    /* Per-token values, in token order. */
    double *nll_q, *nll_p, *kld, *rkld, *dp, *maxabs;
    uint8_t *top1;
    uint8_t *rank_pq, *rank_qp; /* ranks (score_token), capped at RANK_CAP */
    uint8_t *bucket;            /* reference-confidence bucket, 0..QL_CONF_BUCKETS-1 */
    double *scratch;            /* for the order statistics, so finishing cannot fail */
};

ql_status ql_dist_acc_alloc(ql_dist_acc **out, int64_t max_tokens, int64_t n_vocab, ql_error *err)
{
    *out = NULL;
    if (max_tokens <= 0 || n_vocab <= 0)
        return ql_error_set(err, QL_EINVAL, "metrics: %lld tokens over a vocabulary of %lld",
                            (long long)max_tokens, (long long)n_vocab);
    ql_dist_acc *a = calloc(1, sizeof *a);
    if (!a)
        return ql_error_set(err, QL_ENOMEM, "metrics: out of memory");
    a->max_tokens = max_tokens;
    a->n_vocab = n_vocab;
    size_t n = (size_t)max_tokens;
    a->nll_q = malloc(n * sizeof(double));
    a->nll_p = malloc(n * sizeof(double));
    a->kld = malloc(n * sizeof(double));
    a->rkld = malloc(n * sizeof(double));
    a->dp = malloc(n * sizeof(double));
    a->maxabs = malloc(n * sizeof(double));
    a->top1 = malloc(n);
    a->rank_pq = malloc(n);
    a->rank_qp = malloc(n);
    a->bucket = malloc(n);
    a->scratch = malloc(n * sizeof(double));
    if (!a->nll_q || !a->nll_p || !a->kld || !a->dp || !a->maxabs || !a->top1 || !a->scratch ||
        !a->rkld || !a->rank_pq || !a->rank_qp || !a->bucket) {
        ql_dist_acc_free(a);
        return ql_error_set(err, QL_ENOMEM, "metrics: out of memory for %lld tokens",
                            (long long)max_tokens);
    }
    *out = a;
    return QL_OK;
}

void ql_dist_acc_free(ql_dist_acc *a)
{
    if (!a)
        return;
    free(a->nll_q);
    free(a->nll_p);
    free(a->kld);
    free(a->rkld);
    free(a->dp);
    free(a->maxabs);
    free(a->top1);
    free(a->rank_pq);
    free(a->rank_qp);
    free(a->bucket);
    free(a->scratch);
    free(a);
}

void ql_dist_acc_reset(ql_dist_acc *a)
{
    a->n = 0;
}

void ql_log_softmax(const float *logits, int64_t n, float *out)
{
    float mx = logits[0];
    for (int64_t i = 1; i < n; i++)
        if (logits[i] > mx)
            mx = logits[i];
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += exp((double)logits[i] - (double)mx);
    double lse = (double)mx + log(sum);
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)((double)logits[i] - lse);
}

/* The bucket of a reference confidence (top-1 probability). */
static uint8_t conf_bucket(double conf)
{
    static const double bounds[QL_CONF_BUCKETS - 1] = QL_CONF_BOUNDS;
    uint8_t b = 0;
    while (b < QL_CONF_BUCKETS - 1 && conf >= bounds[b])
        b++;
    return b;
}

/* What one token contributes. */
typedef struct {
    double nll_q, nll_p, kld, rkld, dp, maxabs;
    uint8_t top1, rank_pq, rank_qp, bucket;
} token_values;

/* One token: all per-token values from the reference log-probs and quantized logits. */
static void score_token(const float *ref_logp, const float *q_logits, int64_t n_vocab, int32_t y,
                        token_values *tv)
{
    float qmax = q_logits[0];
    int64_t q_arg = 0, p_arg = 0;
    for (int64_t v = 1; v < n_vocab; v++) {
        if (q_logits[v] > qmax) {
            qmax = q_logits[v];
            q_arg = v;
        }
        if (ref_logp[v] > ref_logp[p_arg])
            p_arg = v;
    }
    double sum = 0.0;
    for (int64_t v = 0; v < n_vocab; v++)
        sum += exp((double)q_logits[v] - (double)qmax);
    double lse = (double)qmax + log(sum);
    double k = 0.0, rk = 0.0, m = 0.0;
    int64_t above_p = 0, above_q = 0; /* tokens ranked above the other's top token */
    const float q_of_p_top = q_logits[p_arg], p_of_q_top = ref_logp[q_arg];
    for (int64_t v = 0; v < n_vocab; v++) {
        double lp = (double)ref_logp[v];
        double lq = (double)q_logits[v] - lse;
        double p = exp(lp), q = exp(lq);
        k += p * (lp - lq);
        rk += q * (lq - lp);
        double d = fabs(q - p);
        if (d > m)
            m = d;
        above_p += q_logits[v] > q_of_p_top;
        above_q += ref_logp[v] > p_of_q_top;
    }
    double lq_y = (double)q_logits[y] - lse, lp_y = (double)ref_logp[y];
    tv->nll_q = -lq_y;
    tv->nll_p = -lp_y;
    tv->kld = k;
    tv->rkld = rk;
    tv->dp = exp(lq_y) - exp(lp_y);
    tv->maxabs = m;
    tv->top1 = q_arg == p_arg;
    tv->rank_pq = (uint8_t)(above_p < RANK_CAP ? above_p : RANK_CAP);
    tv->rank_qp = (uint8_t)(above_q < RANK_CAP ? above_q : RANK_CAP);
    tv->bucket = conf_bucket(exp((double)ref_logp[p_arg]));
}

ql_status ql_dist_acc_add(ql_dist_acc *a, const float *ref_logp, const float *q_logits,
                          const int32_t *targets, int64_t n_tok, ql_error *err)
{
    if (a->n + n_tok > a->max_tokens)
        return ql_error_set(err, QL_EINVAL, "metrics: %lld more tokens exceed the capacity %lld",
                            (long long)n_tok, (long long)a->max_tokens);
    for (int64_t t = 0; t < n_tok; t++)
        if (targets[t] < 0 || targets[t] >= a->n_vocab)
            return ql_error_set(err, QL_EINVAL, "metrics: target token %d outside the vocabulary",
                                (int)targets[t]);
    const int64_t V = a->n_vocab, base = a->n;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n_tok; t++) {
        int64_t i = base + t;
        token_values tv;
        score_token(ref_logp + t * V, q_logits + t * V, V, targets[t], &tv);
        a->nll_q[i] = tv.nll_q;
        a->nll_p[i] = tv.nll_p;
        a->kld[i] = tv.kld;
        a->rkld[i] = tv.rkld;
        a->dp[i] = tv.dp;
        a->maxabs[i] = tv.maxabs;
        a->top1[i] = tv.top1;
        a->rank_pq[i] = tv.rank_pq;
        a->rank_qp[i] = tv.rank_qp;
        a->bucket[i] = tv.bucket;
    }
    a->n += n_tok;
    return QL_OK;
}

void ql_dist_acc_range(const ql_dist_acc *a, int64_t begin, int64_t end, double *kld_sum,
                       double *nll_sum, double *nll_ref_sum, int64_t *top1_count)
{
    double k = 0, nq = 0, np = 0;
    int64_t t1 = 0;
    if (begin < 0)
        begin = 0;
    if (end > a->n)
        end = a->n;
    for (int64_t i = begin; i < end; i++) {
        k += a->kld[i];
        nq += a->nll_q[i];
        np += a->nll_p[i];
        t1 += a->top1[i];
    }
    *kld_sum = k;
    *nll_sum = nq;
    *nll_ref_sum = np;
    *top1_count = t1;
}

double ql_percentile_sorted(const double *sorted, int64_t n, double f)
{
    if (n <= 0)
        return (double)NAN;
    double r = f * (double)(n - 1);
    int64_t lo = (int64_t)floor(r);
    if (lo >= n - 1)
        return sorted[n - 1];
    double frac = r - (double)lo;
    return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Mean and standard error of the mean (sqrt(population variance / (n-1))), in order. */
static void mean_err(const double *x, int64_t n, double *mean, double *se)
{
    double s = 0.0, s2 = 0.0;
    for (int64_t i = 0; i < n; i++) {
        s += x[i];
        s2 += x[i] * x[i];
    }
    *mean = s / (double)n;
    double var = s2 / (double)n - *mean * *mean;
    if (var < 0)
        var = 0;
    *se = n > 1 ? sqrt(var / (double)(n - 1)) : (double)NAN;
}

/* A share of n tokens with its binomial standard error sqrt(f (1 - f) / (n - 1)), as
 * llama-perplexity gives "Same top p". */
static void share_err(int64_t count, int64_t n, double *f, double *se)
{
    *f = (double)count / (double)n;
    *se = n > 1 ? sqrt(*f * (1.0 - *f) / (double)(n - 1)) : (double)NAN;
}

/* The share of tokens whose rank is below k. */
static void rank_share(const uint8_t *rank, int64_t n, int k, double *f, double *se)
{
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++)
        c += rank[i] < k;
    share_err(c, n, f, se);
}

/* Sorts n values of x into tmp. */
static void sorted_copy(const double *x, int64_t n, double *tmp)
{
    memcpy(tmp, x, (size_t)n * sizeof(double));
    qsort(tmp, (size_t)n, sizeof(double), cmp_double);
}

/* Every field NAN (counts 0). */
static void dist_metrics_clear(ql_dist_metrics *out)
{
    const double nan = (double)NAN;
    int64_t n_tokens = out->n_tokens;
    out->ppl = out->ppl_err = out->ppl_ref = out->ppl_ref_err = nan;
    out->ln_ppl_ratio = out->ln_ppl_ratio_err = nan;
    out->kld_mean = out->kld_mean_err = out->kld_min = out->kld_p01 = out->kld_p05 = nan;
    out->kld_p10 = out->kld_p25 = out->kld_median = out->kld_p75 = out->kld_p90 = nan;
    out->kld_p95 = out->kld_p99 = out->kld_p999 = out->kld_max = nan;
    out->rkld_mean = out->rkld_mean_err = nan;
    out->kld_conf_0_25 = out->kld_conf_0_25_err = out->kld_conf_25_50 = nan;
    out->kld_conf_25_50_err = out->kld_conf_50_75 = out->kld_conf_50_75_err = nan;
    out->kld_conf_75_95 = out->kld_conf_75_95_err = out->kld_conf_95_100 = nan;
    out->kld_conf_95_100_err = nan;
    out->n_conf_0_25 = out->n_conf_25_50 = out->n_conf_50_75 = out->n_conf_75_95 = 0;
    out->n_conf_95_100 = 0;
    out->dp_mean = out->dp_mean_err = out->dp_rms = out->dp_rms_err = nan;
    out->dp_min = out->dp_max = nan;
    out->dp_p001 = out->dp_p01 = out->dp_p05 = out->dp_p10 = out->dp_p25 = nan;
    out->dp_median = out->dp_p75 = out->dp_p90 = out->dp_p95 = out->dp_p99 = nan;
    out->dp_p999 = nan;
    out->max_abs_prob_err = nan;
    out->top1_agree = out->top1_agree_err = nan;
    out->top5_ref_in_q = out->top5_ref_in_q_err = out->top10_ref_in_q = nan;
    out->top10_ref_in_q_err = out->top5_q_in_ref = out->top5_q_in_ref_err = nan;
    out->top10_q_in_ref = out->top10_q_in_ref_err = nan;
    out->n_tokens = n_tokens;
}

void ql_dist_acc_finish(const ql_dist_acc *a, ql_dist_metrics *out)
{
    const int64_t n = a->n;
    out->n_tokens = n;
    dist_metrics_clear(out);
    if (n == 0)
        return;
    double m, se;
    mean_err(a->nll_q, n, &m, &se);
    out->ppl = exp(m);
    out->ppl_err = out->ppl * se;
    mean_err(a->nll_p, n, &m, &se);
    out->ppl_ref = exp(m);
    out->ppl_ref_err = out->ppl_ref * se;
    double *tmp = a->scratch;
    for (int64_t i = 0; i < n; i++)
        tmp[i] = a->nll_q[i] - a->nll_p[i];
    mean_err(tmp, n, &out->ln_ppl_ratio, &out->ln_ppl_ratio_err);

    /* KL divergence: its order statistics, mean, reverse, by confidence bucket. */
    sorted_copy(a->kld, n, tmp);
    out->kld_min = tmp[0];
    out->kld_p01 = ql_percentile_sorted(tmp, n, 0.01);
    out->kld_p05 = ql_percentile_sorted(tmp, n, 0.05);
    out->kld_p10 = ql_percentile_sorted(tmp, n, 0.10);
    out->kld_p25 = ql_percentile_sorted(tmp, n, 0.25);
    out->kld_median = ql_percentile_sorted(tmp, n, 0.5);
    out->kld_p75 = ql_percentile_sorted(tmp, n, 0.75);
    out->kld_p90 = ql_percentile_sorted(tmp, n, 0.90);
    out->kld_p95 = ql_percentile_sorted(tmp, n, 0.95);
    out->kld_p99 = ql_percentile_sorted(tmp, n, 0.99);
    out->kld_p999 = ql_percentile_sorted(tmp, n, 0.999);
    out->kld_max = tmp[n - 1];
    mean_err(a->kld, n, &out->kld_mean, &out->kld_mean_err);
    mean_err(a->rkld, n, &out->rkld_mean, &out->rkld_mean_err);
    double *bmean[QL_CONF_BUCKETS] = {&out->kld_conf_0_25, &out->kld_conf_25_50,
                                      &out->kld_conf_50_75, &out->kld_conf_75_95,
                                      &out->kld_conf_95_100};
    double *berr[QL_CONF_BUCKETS] = {&out->kld_conf_0_25_err, &out->kld_conf_25_50_err,
                                     &out->kld_conf_50_75_err, &out->kld_conf_75_95_err,
                                     &out->kld_conf_95_100_err};
    int64_t *bcount[QL_CONF_BUCKETS] = {&out->n_conf_0_25, &out->n_conf_25_50, &out->n_conf_50_75,
                                        &out->n_conf_75_95, &out->n_conf_95_100};
    for (int b = 0; b < QL_CONF_BUCKETS; b++) {
        int64_t nb = 0;
        for (int64_t i = 0; i < n; i++)
            if (a->bucket[i] == b)
                tmp[nb++] = a->kld[i];
        *bcount[b] = nb;
        if (nb > 0)
            mean_err(tmp, nb, bmean[b], berr[b]);
    }

    /* Probability of the correct token: its order statistics, mean and RMS. */
    sorted_copy(a->dp, n, tmp);
    out->dp_min = tmp[0];
    out->dp_p001 = ql_percentile_sorted(tmp, n, 0.001);
    out->dp_p01 = ql_percentile_sorted(tmp, n, 0.01);
    out->dp_p05 = ql_percentile_sorted(tmp, n, 0.05);
    out->dp_p10 = ql_percentile_sorted(tmp, n, 0.10);
    out->dp_p25 = ql_percentile_sorted(tmp, n, 0.25);
    out->dp_median = ql_percentile_sorted(tmp, n, 0.5);
    out->dp_p75 = ql_percentile_sorted(tmp, n, 0.75);
    out->dp_p90 = ql_percentile_sorted(tmp, n, 0.90);
    out->dp_p95 = ql_percentile_sorted(tmp, n, 0.95);
    out->dp_p99 = ql_percentile_sorted(tmp, n, 0.99);
    out->dp_p999 = ql_percentile_sorted(tmp, n, 0.999);
    out->dp_max = tmp[n - 1];
    mean_err(a->dp, n, &out->dp_mean, &out->dp_mean_err);
    for (int64_t i = 0; i < n; i++)
        tmp[i] = a->dp[i] * a->dp[i];
    double mse, mse_err;
    mean_err(tmp, n, &mse, &mse_err);
    out->dp_rms = sqrt(mse);
    out->dp_rms_err = out->dp_rms > 0.0 ? 0.5 / out->dp_rms * mse_err : (double)NAN;

    double mabs = 0;
    int64_t agree = 0;
    for (int64_t i = 0; i < n; i++) {
        if (a->maxabs[i] > mabs)
            mabs = a->maxabs[i];
        agree += a->top1[i];
    }
    out->max_abs_prob_err = mabs;
    share_err(agree, n, &out->top1_agree, &out->top1_agree_err);
    rank_share(a->rank_pq, n, 5, &out->top5_ref_in_q, &out->top5_ref_in_q_err);
    rank_share(a->rank_pq, n, 10, &out->top10_ref_in_q, &out->top10_ref_in_q_err);
    rank_share(a->rank_qp, n, 5, &out->top5_q_in_ref, &out->top5_q_in_ref_err);
    rank_share(a->rank_qp, n, 10, &out->top10_q_in_ref, &out->top10_q_in_ref_err);
}

/* ---------------------------------------------------------------- llama-perplexity's block */

ql_status ql_dist_metrics_check_finite(const ql_dist_metrics *m, ql_error *err)
{
    const struct {
        const char *name;
        double v;
    } figs[] = {{"ppl", m->ppl},           {"ppl_ref", m->ppl_ref},   {"kld_mean", m->kld_mean},
                {"kld_max", m->kld_max},   {"dp_mean", m->dp_mean},   {"dp_rms", m->dp_rms},
                {"max_abs_prob_err", m->max_abs_prob_err}, {"top1_agree", m->top1_agree}};
    for (size_t i = 0; i < sizeof figs / sizeof figs[0]; i++)
        if (!isfinite(figs[i].v))
            return ql_error_set(err, QL_EFORMAT,
                                "metric %s is %s: the quantized or the reference model computes "
                                "non-finite probabilities",
                                figs[i].name, isnan(figs[i].v) ? "NaN" : "infinite");
    return QL_OK;
}

void ql_dist_metrics_ppl_pair(const ql_dist_metrics *m, ql_ppl_pair *out)
{
    /* llama-perplexity's covariance of the two mean NLLs, recovered from the three
     * standard errors: se(ratio)^2 = se(q)^2 + se(p)^2 - 2 cov. */
    double se_q = m->ppl_err / m->ppl, se_p = m->ppl_ref_err / m->ppl_ref;
    double cov = 0.5 * (se_q * se_q + se_p * se_p - m->ln_ppl_ratio_err * m->ln_ppl_ratio_err);
    out->cor = cov / (se_q * se_p);
    out->ratio = exp(m->ln_ppl_ratio);
    out->ratio_err = out->ratio * m->ln_ppl_ratio_err;
    out->diff = m->ppl - m->ppl_ref;
    out->diff_err = sqrt(m->ppl_err * m->ppl_err + m->ppl_ref_err * m->ppl_ref_err -
                         2.0 * m->ppl * m->ppl_ref * cov);
}

void ql_dist_metrics_print_llama(const ql_dist_metrics *m, FILE *out)
{
    /* llama-perplexity does no statistics on fewer than 100 tokens. */
    if (m->n_tokens < 100)
        return;
    ql_ppl_pair pp;
    ql_dist_metrics_ppl_pair(m, &pp);
    fprintf(out, "====== Perplexity statistics ======\n");
    fprintf(out, "Mean PPL(Q)                   : %10.6f ± %10.6f\n", m->ppl, m->ppl_err);
    fprintf(out, "Mean PPL(base)                : %10.6f ± %10.6f\n", m->ppl_ref, m->ppl_ref_err);
    fprintf(out, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * pp.cor);
    fprintf(out, "Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", m->ln_ppl_ratio,
            m->ln_ppl_ratio_err);
    fprintf(out, "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", pp.ratio, pp.ratio_err);
    fprintf(out, "Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", pp.diff, pp.diff_err);
    fprintf(out, "\n====== KL divergence statistics ======\n");
    fprintf(out, "Mean    KLD: %10.6f ± %10.6f\n", m->kld_mean, m->kld_mean_err);
    fprintf(out, "Maximum KLD: %10.6f\n", m->kld_max);
    fprintf(out, "99.9%%   KLD: %10.6f\n", m->kld_p999);
    /* b4747 prints its 99% line twice (where later builds print 95%). */
    fprintf(out, "99.0%%   KLD: %10.6f\n", m->kld_p99);
    fprintf(out, "99.0%%   KLD: %10.6f\n", m->kld_p99);
    fprintf(out, "Median  KLD: %10.6f\n", m->kld_median);
    fprintf(out, "10.0%%   KLD: %10.6f\n", m->kld_p10);
    fprintf(out, " 5.0%%   KLD: %10.6f\n", m->kld_p05);
    fprintf(out, " 1.0%%   KLD: %10.6f\n", m->kld_p01);
    fprintf(out, "Minimum KLD: %10.6f\n", m->kld_min);
    fprintf(out, "\n====== Token probability statistics ======\n");
    fprintf(out, "Mean    Δp: %6.3f ± %5.3f %%\n", 100.0 * m->dp_mean, 100.0 * m->dp_mean_err);
    const struct {
        const char *label;
        double v;
    } dp[] = {{"Maximum Δp", m->dp_max},    {"99.9%   Δp", m->dp_p999}, {"99.0%   Δp", m->dp_p99},
              {"95.0%   Δp", m->dp_p95},    {"90.0%   Δp", m->dp_p90},  {"75.0%   Δp", m->dp_p75},
              {"Median  Δp", m->dp_median}, {"25.0%   Δp", m->dp_p25},  {"10.0%   Δp", m->dp_p10},
              {" 5.0%   Δp", m->dp_p05},    {" 1.0%   Δp", m->dp_p01},  {" 0.1%   Δp", m->dp_p001},
              {"Minimum Δp", m->dp_min}};
    for (size_t i = 0; i < sizeof dp / sizeof dp[0]; i++)
        fprintf(out, "%s: %6.3f%%\n", dp[i].label, 100.0 * dp[i].v);
    fprintf(out, "RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * m->dp_rms, 100.0 * m->dp_rms_err);
    fprintf(out, "Same top p: %6.3f ± %5.3f %%\n", 100.0 * m->top1_agree,
            100.0 * m->top1_agree_err);
}

bool ql_beats_reference(double ln_ppl_ratio, double ln_ppl_ratio_err)
{
    return !isnan(ln_ppl_ratio) && !isnan(ln_ppl_ratio_err) &&
           ln_ppl_ratio + QL_BEATEN_Z * ln_ppl_ratio_err < 0.0 && ln_ppl_ratio < -QL_BEATEN_MIN;
}
