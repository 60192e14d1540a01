#include "experiment/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ql_dist_acc {
    int64_t max_tokens, n_vocab, n;
    /* Per-token values, in token order. */
    double *nll_q, *nll_p, *kld, *dp, *maxabs;
    uint8_t *top1;
    double *scratch; /* for the order statistics, so finishing cannot fail */
};

ql_status ql_dist_acc_alloc(ql_dist_acc **out, int64_t max_tokens, int64_t n_vocab,
                            ql_error *err)
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
    a->dp = malloc(n * sizeof(double));
    a->maxabs = malloc(n * sizeof(double));
    a->top1 = malloc(n);
    a->scratch = malloc(n * sizeof(double));
    if (!a->nll_q || !a->nll_p || !a->kld || !a->dp || !a->maxabs || !a->top1 || !a->scratch) {
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
    free(a->dp);
    free(a->maxabs);
    free(a->top1);
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

/* One token: all per-token values from the reference log-probs and quantized logits. */
static void score_token(const float *ref_logp, const float *q_logits, int64_t n_vocab,
                        int32_t y, double *nll_q, double *nll_p, double *kld, double *dp,
                        double *maxabs, uint8_t *top1)
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
    double k = 0.0, m = 0.0;
    for (int64_t v = 0; v < n_vocab; v++) {
        double lp = (double)ref_logp[v];
        double lq = (double)q_logits[v] - lse;
        double p = exp(lp), q = exp(lq);
        k += p * (lp - lq);
        double d = fabs(q - p);
        if (d > m)
            m = d;
    }
    double lq_y = (double)q_logits[y] - lse, lp_y = (double)ref_logp[y];
    *nll_q = -lq_y;
    *nll_p = -lp_y;
    *kld = k;
    *dp = exp(lq_y) - exp(lp_y);
    *maxabs = m;
    *top1 = q_arg == p_arg;
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
        score_token(ref_logp + t * V, q_logits + t * V, V, targets[t], &a->nll_q[i],
                    &a->nll_p[i], &a->kld[i], &a->dp[i], &a->maxabs[i], &a->top1[i]);
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

void ql_dist_acc_finish(const ql_dist_acc *a, ql_dist_metrics *out)
{
    const int64_t n = a->n;
    out->n_tokens = n;
    double nan = (double)NAN;
    out->ppl = out->ppl_err = out->ppl_ref = out->ppl_ref_err = nan;
    out->ln_ppl_ratio = out->ln_ppl_ratio_err = nan;
    out->kld_mean = out->kld_mean_err = out->kld_median = out->kld_p90 = out->kld_p99 = nan;
    out->kld_p999 = out->kld_max = nan;
    out->dp_mean = out->dp_rms = out->dp_min = out->dp_max = nan;
    out->max_abs_prob_err = out->top1_agree = nan;
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
    memcpy(tmp, a->kld, (size_t)n * sizeof(double));
    qsort(tmp, (size_t)n, sizeof(double), cmp_double);
    out->kld_median = ql_percentile_sorted(tmp, n, 0.5);
    out->kld_p90 = ql_percentile_sorted(tmp, n, 0.90);
    out->kld_p99 = ql_percentile_sorted(tmp, n, 0.99);
    out->kld_p999 = ql_percentile_sorted(tmp, n, 0.999);
    out->kld_max = tmp[n - 1];
    mean_err(a->kld, n, &out->kld_mean, &out->kld_mean_err);
    double s = 0, s2 = 0, mn = a->dp[0], mx = a->dp[0], mabs = 0;
    int64_t agree = 0;
    for (int64_t i = 0; i < n; i++) {
        s += a->dp[i];
        s2 += a->dp[i] * a->dp[i];
        if (a->dp[i] < mn)
            mn = a->dp[i];
        if (a->dp[i] > mx)
            mx = a->dp[i];
        if (a->maxabs[i] > mabs)
            mabs = a->maxabs[i];
        agree += a->top1[i];
    }
    out->dp_mean = s / (double)n;
    out->dp_rms = sqrt(s2 / (double)n);
    out->dp_min = mn;
    out->dp_max = mx;
    out->max_abs_prob_err = mabs;
    out->top1_agree = (double)agree / (double)n;
}
