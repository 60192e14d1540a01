/* Output-distribution metrics on hand-computed cases. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "experiment/distribution.h"
#include "qltest.h"

/* Hand-computed values are exact up to double rounding of a few operations. */
#define HAND_TOL 1e-6

static void identical_distributions(void)
{
    ql_error err;
    ql_dist_acc *a;
    CHECK_OK(ql_dist_acc_alloc(&a, 4, 3, &err), &err);
    float logits[3] = {1.0f, 2.0f, -0.5f}, logp[3];
    ql_log_softmax(logits, 3, logp);
    int32_t y = 1;
    CHECK_OK(ql_dist_acc_add(a, logp, logits, &y, 1, &err), &err);
    ql_dist_metrics m;
    ql_dist_acc_finish(a, &m);
    CHECK_EQ_INT(m.n_tokens, 1);
    CHECK_NEAR(m.kld_mean, 0.0, HAND_TOL);
    CHECK_NEAR(m.dp_mean, 0.0, HAND_TOL);
    CHECK_NEAR(m.top1_agree, 1.0, 0.0);
    CHECK_NEAR(m.ppl, m.ppl_ref, HAND_TOL);
    CHECK(isnan(m.ppl_err)); /* one token: no error estimate */
    ql_dist_acc_free(a);
}

static void hand_checked_pair(void)
{
    ql_error err;
    ql_dist_acc *a;
    CHECK_OK(ql_dist_acc_alloc(&a, 2, 3, &err), &err);
    /* Token 1: p = (1/2, 1/4, 1/4), q = (1/4, 1/2, 1/4), y = 0.
     * Token 2: p = q = (1/2, 1/4, 1/4), y = 0... then q(y) = 1/2. */
    float logp[6], q[6];
    float pp[3] = {0.5f, 0.25f, 0.25f}, qq[3] = {0.25f, 0.5f, 0.25f};
    for (int v = 0; v < 3; v++) {
        logp[v] = logf(pp[v]);
        q[v] = logf(qq[v]);
        logp[3 + v] = logf(pp[v]);
        q[3 + v] = logf(pp[v]) + 7.0f; /* a constant shift does not change a softmax */
    }
    int32_t y[2] = {0, 0};
    CHECK_OK(ql_dist_acc_add(a, logp, q, y, 2, &err), &err);
    ql_dist_metrics m;
    ql_dist_acc_finish(a, &m);
    double ln2 = log(2.0);
    /* KLD token 1 = 0.5 ln 2 - 0.25 ln 2 = 0.25 ln 2; token 2 = 0. */
    CHECK_NEAR(m.kld_mean, 0.125 * ln2, HAND_TOL);
    CHECK_NEAR(m.kld_max, 0.25 * ln2, HAND_TOL);
    CHECK_NEAR(m.kld_median, 0.125 * ln2, HAND_TOL);
    /* NLL_q = ln 4, ln 2: mean 1.5 ln 2, population variance 0.25 ln^2 2, se = 0.5 ln 2. */
    CHECK_NEAR(m.ppl, pow(2.0, 1.5), HAND_TOL);
    CHECK_NEAR(m.ppl_err, pow(2.0, 1.5) * 0.5 * ln2, HAND_TOL);
    CHECK_NEAR(m.ppl_ref, 2.0, HAND_TOL);
    CHECK_NEAR(m.ln_ppl_ratio, 0.5 * ln2, HAND_TOL);
    CHECK_NEAR(m.dp_min, -0.25, HAND_TOL);
    CHECK_NEAR(m.dp_max, 0.0, HAND_TOL);
    CHECK_NEAR(m.dp_mean, -0.125, HAND_TOL);
    CHECK_NEAR(m.dp_rms, sqrt(0.0625 / 2), HAND_TOL);
    CHECK_NEAR(m.max_abs_prob_err, 0.25, HAND_TOL);
    CHECK_NEAR(m.top1_agree, 0.5, 0.0);
    /* The further statistics of the same two tokens. Reverse KL of token 1:
     * 0.25 ln(1/2) + 0.5 ln 2 = 0.25 ln 2; token 2: 0. */
    CHECK_NEAR(m.rkld_mean, 0.125 * ln2, HAND_TOL);
    CHECK_NEAR(m.rkld_mean_err, 0.125 * ln2, HAND_TOL); /* sqrt(var / (n-1)), var = (ln2/8)^2 */
    CHECK_NEAR(m.kld_mean_err, 0.125 * ln2, HAND_TOL);
    CHECK_NEAR(m.kld_min, 0.0, HAND_TOL);
    CHECK_NEAR(m.kld_p01, 0.01 * 0.25 * ln2, HAND_TOL); /* rank 0.01 between 0 and 0.25 ln 2 */
    CHECK_NEAR(m.kld_p10, 0.10 * 0.25 * ln2, HAND_TOL);
    CHECK_NEAR(m.kld_p95, 0.95 * 0.25 * ln2, HAND_TOL);
    /* dp = {-1/4, 0}: mean -1/8 ± 1/8; dp^2 = {1/16, 0}: mean 1/32 ± 1/32. */
    CHECK_NEAR(m.dp_mean_err, 0.125, HAND_TOL);
    CHECK_NEAR(m.dp_rms_err, 0.5 / sqrt(1.0 / 32) * (1.0 / 32), HAND_TOL);
    CHECK_NEAR(m.dp_p10, -0.25 + 0.1 * 0.25, HAND_TOL);
    CHECK_NEAR(m.dp_median, -0.125, HAND_TOL);
    CHECK_NEAR(m.dp_p999, -0.25 + 0.999 * 0.25, HAND_TOL);
    CHECK_NEAR(m.top1_agree_err, 0.5, HAND_TOL); /* sqrt(0.5 * 0.5 / (2 - 1)) */
    /* Token 1: the reference's top token (0) is second in q, q's (1) second in p. */
    CHECK_NEAR(m.top5_ref_in_q, 1.0, 0.0);
    CHECK_NEAR(m.top5_q_in_ref, 1.0, 0.0);
    CHECK_NEAR(m.top10_q_in_ref_err, 0.0, 0.0);
    /* Both tokens have a reference confidence of 1/2 as far as a float log-prob holds it:
     * on the edge of [.25, .5) and [.5, .75), so the float decides which. */
    bool upper = exp((double)logf(0.5f)) >= 0.5;
    CHECK_EQ_INT(upper ? m.n_conf_50_75 : m.n_conf_25_50, 2);
    CHECK_EQ_INT(m.n_conf_0_25 + m.n_conf_75_95 + m.n_conf_95_100, 0);
    CHECK_NEAR(upper ? m.kld_conf_50_75 : m.kld_conf_25_50, 0.125 * ln2, HAND_TOL);
    CHECK(isnan(m.kld_conf_0_25) && isnan(m.kld_conf_95_100_err));
    /* Capacity and target checks. */
    CHECK(ql_dist_acc_add(a, logp, q, y, 1, &err) == QL_EINVAL);
    ql_dist_acc_reset(a);
    int32_t bad = 3;
    CHECK(ql_dist_acc_add(a, logp, q, &bad, 1, &err) == QL_EINVAL);
    ql_dist_acc_free(a);
}

/* Top-k agreement and the confidence buckets over a vocabulary of 12. */
static void top_k_and_confidence(void)
{
    enum { V = 12 };
    ql_error err;
    ql_dist_acc *a;
    CHECK_OK(ql_dist_acc_alloc(&a, 2, V, &err), &err);
    float ref[2 * V], logp[2 * V], q[2 * V];
    for (int v = 0; v < V; v++) {
        /* Token A: reference logits -v/2 (top token 0, confidence (1 - e^-1/2) / (1 - e^-6));
         * quantized: token 0 at 0, six tokens (1..6) above it at 1, the rest at -1, so the
         * reference's top token is 7th in q (in its top 10, not its top 5), and q's top token
         * (1, the first of the maxima) is 2nd in the reference. */
        ref[v] = -0.5f * (float)v;
        q[v] = v == 0 ? 0.0f : v <= 6 ? 1.0f : -1.0f;
        /* Token B: both peaked at token 3 (confidence e^10 / (e^10 + 11) > 0.95). */
        ref[V + v] = v == 3 ? 10.0f : 0.0f;
        q[V + v] = ref[V + v];
    }
    ql_log_softmax(ref, V, logp);
    ql_log_softmax(ref + V, V, logp + V);
    int32_t y[2] = {0, 3};
    CHECK_OK(ql_dist_acc_add(a, logp, q, y, 2, &err), &err);
    ql_dist_metrics m;
    ql_dist_acc_finish(a, &m);
    CHECK_NEAR(m.top1_agree, 0.5, 0.0);
    CHECK_NEAR(m.top5_ref_in_q, 0.5, 0.0);
    CHECK_NEAR(m.top5_ref_in_q_err, 0.5, HAND_TOL);
    CHECK_NEAR(m.top10_ref_in_q, 1.0, 0.0);
    CHECK_NEAR(m.top5_q_in_ref, 1.0, 0.0);
    CHECK_NEAR(m.top10_q_in_ref, 1.0, 0.0);
    double conf_a = (1.0 - exp(-0.5)) / (1.0 - exp(-6.0));
    CHECK(conf_a >= 0.25 && conf_a < 0.5);
    CHECK_EQ_INT(m.n_conf_25_50, 1);
    CHECK_EQ_INT(m.n_conf_95_100, 1);
    CHECK_EQ_INT(m.n_conf_0_25 + m.n_conf_50_75 + m.n_conf_75_95, 0);
    /* Token A's KLD by hand: sum_v p_v (log p_v - log q_v). */
    double za = 0, zq = 0, kld_a = 0;
    for (int v = 0; v < V; v++) {
        za += exp(-0.5 * v);
        zq += exp((double)q[v]);
    }
    for (int v = 0; v < V; v++) {
        double lp = -0.5 * v - log(za), lq = (double)q[v] - log(zq);
        kld_a += exp(lp) * (lp - lq);
    }
    CHECK_NEAR(m.kld_conf_25_50, kld_a, 1e-5);
    CHECK(isnan(m.kld_conf_25_50_err)); /* one token: no error */
    CHECK_NEAR(m.kld_conf_95_100, 0.0, 1e-5);
    CHECK(isnan(m.kld_conf_0_25));
    ql_dist_acc_free(a);
}

/* llama-perplexity's block: its lines and formats, nothing under 100 tokens. */
static void llama_block(void)
{
    enum { N = 100 };
    ql_error err;
    ql_dist_acc *a;
    CHECK_OK(ql_dist_acc_alloc(&a, N, 3, &err), &err);
    float pp[3] = {0.5f, 0.25f, 0.25f}, qq[3] = {0.25f, 0.5f, 0.25f};
    float logp[3 * N], q[3 * N];
    int32_t y[N];
    for (int t = 0; t < N; t++) {
        /* Half the tokens as token 1 of hand_checked_pair, half as token 2. */
        for (int v = 0; v < 3; v++) {
            logp[3 * t + v] = logf(pp[v]);
            q[3 * t + v] = logf(t % 2 ? pp[v] : qq[v]);
        }
        y[t] = 0;
    }
    CHECK_OK(ql_dist_acc_add(a, logp, q, y, N - 1, &err), &err);
    ql_dist_metrics m;
    ql_dist_acc_finish(a, &m);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ql_dist_metrics_print_llama(&m, f);
    fclose(f);
    CHECK_EQ_INT((long long)len, 0); /* 99 tokens */
    free(buf);
    CHECK_OK(ql_dist_acc_add(a, logp + 3 * (N - 1), q + 3 * (N - 1), y, 1, &err), &err);
    ql_dist_acc_finish(a, &m);
    f = open_memstream(&buf, &len);
    ql_dist_metrics_print_llama(&m, f);
    fclose(f);
    /* Mean KLD 0.125 ln 2 = 0.086643 ± 0.125 ln 2 sqrt(1/99) = 0.008708; same top p 50% ±
     * sqrt(0.25 / 99) = 5.025%; Δp mean -12.5% ± 12.5 sqrt(1/99) = 1.256%. */
    static const char *const lines[] = {
        "====== Perplexity statistics ======\n",
        "Mean PPL(base)                :   2.000000 ±   0.000000\n",
        "\n====== KL divergence statistics ======\nMean    KLD:   0.086643 ±   0.008708\n"
        "Maximum KLD:   0.173287\n",
        "99.0%   KLD:   0.173287\n99.0%   KLD:   0.173287\nMedian  KLD:   0.086643\n",
        "10.0%   KLD: ",
        "Minimum KLD: ",
        "====== Token probability statistics ======\nMean    Δp: -12.500 ± 1.256 %\n"
        "Maximum Δp:  0.000%\n",
        " 0.1%   Δp: -25.000%\nMinimum Δp: -25.000%\n",
        "Same top p: 50.000 ± 5.025 %\n",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        CHECK_MSG(buf && strstr(buf, lines[i]), "no '%s' in\n%s", lines[i], buf ? buf : "");
    free(buf);
    ql_dist_acc_free(a);
}

static void percentiles(void)
{
    double v[4] = {1, 2, 3, 4};
    CHECK_NEAR(ql_percentile_sorted(v, 4, 0.5), 2.5, 1e-12);
    CHECK_NEAR(ql_percentile_sorted(v, 4, 0.9), 3.7, 1e-12);
    CHECK_NEAR(ql_percentile_sorted(v, 4, 1.0), 4.0, 0.0);
    CHECK_NEAR(ql_percentile_sorted(v, 4, 0.0), 1.0, 0.0);
    CHECK(isnan(ql_percentile_sorted(v, 0, 0.5)));
}

/* The beaten-reference flag: beyond the paired interval and beyond 0.1% of the PPL. */
static void beaten_reference(void)
{
    CHECK(ql_beats_reference(-0.01, 0.003));
    CHECK(!ql_beats_reference(-0.01, 0.006));         /* within its interval */
    CHECK(!ql_beats_reference(-2e-5, 1e-7));          /* an F16 copy: below by a hair */
    CHECK(!ql_beats_reference(0.01, 0.001));          /* above the reference */
    CHECK(!ql_beats_reference((double)NAN, 0.001));   /* not measured */
}

int main(void)
{
    beaten_reference();
    identical_distributions();
    hand_checked_pair();
    top_k_and_confidence();
    llama_block();
    percentiles();
    return qlt_done();
}
