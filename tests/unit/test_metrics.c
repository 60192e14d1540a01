/* Output-distribution metrics on hand-computed cases. */
#include <math.h>

#include "experiment/metrics.h"
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
    /* Capacity and target checks. */
    CHECK(ql_dist_acc_add(a, logp, q, y, 1, &err) == QL_EINVAL);
    ql_dist_acc_reset(a);
    int32_t bad = 3;
    CHECK(ql_dist_acc_add(a, logp, q, &bad, 1, &err) == QL_EINVAL);
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

int main(void)
{
    identical_distributions();
    hand_checked_pair();
    percentiles();
    return qlt_done();
}
