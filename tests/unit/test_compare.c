/* Two configs compared on the same tokens: the multi-statistic paired bootstrap on a
 * case worked by hand, identical configs, picking configs by hash and by label, and
 * the errors (results/compare.h, results/analysis.h). */
#include <math.h>
#include <string.h>

#include "qltest.h"
#include "report_fixture.h"
#include "results/compare.h"
#include "results/store.h"
#include "store_fixture.h"

/* Two chunks of one token each, differences d1 = -1 and d2 = 3. A resample draws
 * (1, 1), (2, 2) with probability 1/4 each and a mix with 1/2, so the replicates are
 * -1, 3 (1/4 each) and 1 (1/2): mean 1, standard deviation sqrt(2). At level 0.9
 * the 5% and 95% quantiles are the extremes -1 and 3 (each holds 25% of the mass);
 * zero is crossed by the replicates at -1 only, so p = 2 * 1/4 = 1/2. */
static void bootstrap_by_hand(void)
{
    enum { R = 20000 };
    /* Monte-Carlo error with R = 20000 of a share of 1/4: sqrt(3/16 / R) = 0.003, so
     * p (twice it) is within 0.02 and the sd within 2% in all but 1e-6 of seeds. */
    const double p_tol = 0.02, sd_tol = 0.02;
    const double a1[2] = {0.0, 5.0}, b1[2] = {1.0, 2.0}, w[2] = {1.0, 1.0};
    /* A second statistic with twice the differences: the same resamples, so exactly
     * twice every replicate. */
    const double a2[2] = {0.0, 10.0}, b2[2] = {2.0, 4.0};
    const double *a[2] = {a1, a2}, *b[2] = {b1, b2};
    ql_ci ci[2], alone;
    ql_error err;
    CHECK_OK(ql_bootstrap_paired_diffs(a, b, w, 2, 2, R, 0.9, 11, ci, &err), &err);
    CHECK_NEAR(ci[0].estimate, 1.0, 0.0);
    CHECK_NEAR(ci[0].lo, -1.0, 0.0);
    CHECK_NEAR(ci[0].hi, 3.0, 0.0);
    CHECK_NEAR(ci[0].se, sqrt(2.0), sd_tol * sqrt(2.0));
    CHECK_NEAR(ci[0].p, 0.5, p_tol);
    CHECK(!ql_ci_excludes_zero(&ci[0]));
    CHECK_NEAR(ci[1].estimate, 2.0, 0.0);
    CHECK_NEAR(ci[1].lo, -2.0, 0.0);
    CHECK_NEAR(ci[1].se, 2.0 * ci[0].se, 1e-12);
    CHECK_NEAR(ci[1].p, ci[0].p, 0.0);
    /* One statistic alone with the same seed: the same interval. */
    CHECK_OK(ql_bootstrap_paired_diff(a1, b1, w, 2, R, 0.9, 11, &alone, &err), &err);
    CHECK(alone.lo == ci[0].lo && alone.hi == ci[0].hi && alone.se == ci[0].se &&
          alone.p == ci[0].p);
    /* Both differences positive (1 and 3): zero is never crossed, p = 1 / (R + 1). */
    const double a3[2] = {2.0, 5.0};
    CHECK_OK(ql_bootstrap_paired_diff(a3, b1, w, 2, R, 0.9, 11, &alone, &err), &err);
    CHECK_NEAR(alone.p, 1.0 / (R + 1), 1e-15);
    CHECK(ql_ci_excludes_zero(&alone));
    /* The statistic is named in errors when there are several. */
    const double bad[2] = {0.0, (double)NAN};
    const double *a_bad[2] = {a1, bad};
    CHECK(ql_bootstrap_paired_diffs(a_bad, b, w, 2, 2, R, 0.9, 11, ci, &err) == QL_EINVAL);
    CHECK_MSG(strstr(err.msg, "statistic 1, chunk 1") != NULL, "%s", err.msg);
}

static ql_store *fixture(const char *name, bool chunks)
{
    ql_error err;
    ql_store *s = NULL;
    const char *path = qlt_tmp_db(name);
    CHECK_OK(qlt_report_fixture(path, chunks, &err), &err);
    ql_store_options ro = {.readonly = true};
    CHECK_OK(ql_store_open(path, &ro, &s, &err), &err);
    return s;
}

static void pick(ql_store *s, const char *sweep, const char *spec, const char *prefix)
{
    char hash[65] = "";
    ql_error err;
    CHECK_OK(ql_compare_find_config(s, sweep, spec, hash, &err), &err);
    CHECK_MSG(strncmp(hash, prefix, strlen(prefix)) == 0, "'%s' -> %.12s, want %s", spec, hash,
              prefix);
}

static void picking_configs(ql_store *s)
{
    ql_error err;
    char hash[65];
    /* By hash prefix (any case), by labels in several spellings. */
    pick(s, NULL, "55cc442f", "55cc442f7055");
    pick(s, NULL, "55CC442F", "55cc442f7055");
    pick(s, "fixture-formats", "Q8_0 act=f32", "55cc442f7055");
    pick(s, "fixture-formats", "weight_type=q8_0 act_mode=F32", "55cc442f7055");
    pick(s, NULL, "Q4_0 head=F32", "04f7db9f7e45");
    pick(s, NULL, "F16 act=q8_0", "31582241ce28");
    /* head=Q4_0 on a Q4_0 config is its canonical 'same'. */
    pick(s, NULL, "Q4_0 head=Q4_0 act=q8_0", "c90fa930648f");
    /* Several matches: the candidates are listed. */
    CHECK(ql_compare_find_config(s, NULL, "Q8_0", hash, &err) == QL_EINVAL);
    CHECK_MSG(strstr(err.msg, "configs match 'Q8_0'") && strstr(err.msg, "55cc442f7055"), "%s",
              err.msg);
    /* None; a failed config does not count; bad terms. */
    CHECK(ql_compare_find_config(s, NULL, "Q5_1", hash, &err) == QL_ENOTFOUND);
    CHECK(strstr(err.msg, "no finished config matches 'Q5_1'") != NULL);
    CHECK(ql_compare_find_config(s, NULL, "IQ4_NL", hash, &err) == QL_ENOTFOUND);
    CHECK(ql_compare_find_config(s, NULL, "Q4_0 colour=red", hash, &err) == QL_EINVAL);
    CHECK_MSG(strstr(err.msg, "no axis 'colour'"), "%s", err.msg);
    CHECK(ql_compare_find_config(s, NULL, "Q4_O", hash, &err) == QL_EINVAL);
    CHECK_MSG(strstr(err.msg, "unknown type 'Q4_O'"), "%s", err.msg);
    /* Only the sweep's configs: fixture-mixed has no F16. */
    CHECK(ql_compare_find_config(s, "fixture-mixed", "F16 act=f32", hash, &err) == QL_ENOTFOUND);
    CHECK(strstr(err.msg, "of sweep fixture-mixed") != NULL);
}

static void comparing(ql_store *s)
{
    ql_error err;
    char q8[65], q4[65];
    CHECK_OK(ql_compare_find_config(s, NULL, "Q8_0 act=f32", q8, &err), &err);
    CHECK_OK(ql_compare_find_config(s, NULL, "Q4_0 act=f32 head=same", q4, &err), &err);
    /* Both ran on fixture-a and fixture-b: two places, by model. */
    ql_compare_group *g;
    size_t n;
    CHECK_OK(ql_compare_groups(s, NULL, q4, q8, &g, &n, &err), &err);
    CHECK_EQ_INT(n, 2);
    if (n != 2)
        return;
    CHECK(strcmp(g[0].model, "fixture-a") == 0 && g[0].ctx == QLT_REPORT_CTX &&
          g[0].chunks == QLT_REPORT_CHUNKS);
    CHECK(strcmp(g[1].model, "fixture-b") == 0);
    /* Within fixture-formats, fixture-a only. */
    free(g);
    CHECK_OK(ql_compare_groups(s, "fixture-formats", q4, q8, &g, &n, &err), &err);
    CHECK_EQ_INT(n, 1);
    ql_bootstrap_opts o;
    ql_bootstrap_opts_init(&o);
    ql_comparison c;
    CHECK_OK(ql_compare_runs(s, g[0].run_a, g[0].run_b, &o, &c, &err), &err);
    CHECK_EQ_INT(c.chunks, QLT_REPORT_CHUNKS);
    CHECK_NEAR(c.tokens, QLT_REPORT_CHUNKS * QLT_REPORT_TOKENS, 0.0);
    for (int k = 0; k < QL_CMP_STATS; k++) {
        CHECK(c.v[k].ok);
        CHECK_NEAR(c.v[k].diff.estimate, c.v[k].a - c.v[k].b, 1e-12);
        CHECK(c.v[k].diff.lo <= c.v[k].diff.estimate && c.v[k].diff.estimate <= c.v[k].diff.hi);
    }
    /* The fixture's Q4_0 has the larger KLD in every chunk: the interval excludes zero. */
    CHECK(c.v[QL_CMP_KLD].diff.lo > 0.0);
    /* A config with itself: every replicate is 0, the interval [0, 0] holds zero, p = 1. */
    ql_comparison same;
    CHECK_OK(ql_compare_runs(s, g[0].run_a, g[0].run_a, &o, &same, &err), &err);
    for (int k = 0; k < QL_CMP_STATS; k++) {
        CHECK(same.v[k].diff.lo <= 0.0 && 0.0 <= same.v[k].diff.hi);
        CHECK(!ql_ci_excludes_zero(&same.v[k].diff));
        CHECK_NEAR(same.v[k].diff.p, 1.0, 0.0);
    }
    /* Deterministic: the same seed gives the same interval. */
    ql_comparison again;
    CHECK_OK(ql_compare_runs(s, g[0].run_a, g[0].run_b, &o, &again, &err), &err);
    CHECK(again.v[QL_CMP_KLD].diff.lo == c.v[QL_CMP_KLD].diff.lo);
    free(g);
    /* Different places: F16 ran on fixture-a only, which fixture-mixed has no Q4_0 of. */
    char f16[65];
    CHECK_OK(ql_compare_find_config(s, NULL, "F16 act=f32", f16, &err), &err);
    CHECK(ql_compare_groups(s, "fixture-mixed", q4, f16, &g, &n, &err) == QL_ENOTFOUND);
    CHECK_MSG(strstr(err.msg, "no finished runs on the same model"), "%s", err.msg);
}

static void without_chunks(ql_store *s)
{
    ql_error err;
    char q8[65], q4[65];
    CHECK_OK(ql_compare_find_config(s, NULL, "Q8_0 act=f32", q8, &err), &err);
    CHECK_OK(ql_compare_find_config(s, NULL, "Q4_0 act=f32 head=same", q4, &err), &err);
    ql_compare_group *g;
    size_t n;
    CHECK_OK(ql_compare_groups(s, NULL, q4, q8, &g, &n, &err), &err);
    ql_bootstrap_opts o;
    ql_bootstrap_opts_init(&o);
    ql_comparison c;
    CHECK(n >= 1 && ql_compare_runs(s, g[0].run_a, g[0].run_b, &o, &c, &err) == QL_ENOTFOUND);
    CHECK_MSG(strstr(err.msg, "has no per-chunk sums"), "%s", err.msg);
    free(g);
}

/* A run of config `canon` with bpw and per-chunk KLD sums kld[0..8) over 10 tokens a
 * chunk (NLL and top-1 sums follow them); its id. */
static int64_t crafted_run(ql_store *s, const char *canon, double bpw, const double *kld)
{
    enum { CHUNKS = 8, T = 10 };
    ql_error err;
    int64_t model, text, config, run = 0;
    qlt_store_add_inputs(s, &model, &text);
    ql_config c;
    CHECK_OK(ql_config_from_string(canon, &c, &err), &err);
    CHECK_OK(ql_store_upsert_config(s, &c, &config, &err), &err);
    ql_store_run_key key = {config, model, text, 128, CHUNKS};
    ql_store_run_info info = {.sweep = "noise", .threads = 1, .metrics_version = 1};
    CHECK_OK(ql_store_begin_run(s, &key, &info, &run, &err), &err);
    ql_chunk_record ck[CHUNKS];
    double sum = 0;
    for (int i = 0; i < CHUNKS; i++) {
        ck[i] = (ql_chunk_record){i, T, kld[i], 20.0 + kld[i], 20.0, T - 1};
        sum += kld[i];
    }
    ql_run_metrics m;
    ql_run_metrics_init(&m);
    m.n_tokens = CHUNKS * T;
    m.kld_mean = sum / (CHUNKS * T);
    m.bpw = bpw;
    ql_run_result res = {.metrics = &m, .chunks = ck, .n_chunks = CHUNKS};
    CHECK_OK(ql_store_finish_run_result(s, run, &res, &err), &err);
    return run;
}

/* The front beyond the noise: a dearer config a little worse than a cheap one, but
 * within the noise, stays on it; one clearly worse does not. */
static void front_beyond_noise(void)
{
    ql_error err;
    ql_store *s = NULL;
    CHECK_OK(ql_store_open(qlt_tmp_db("noise.db"), NULL, &s, &err), &err);
    if (!s)
        return;
    /* cheap: 0.1 a token in every chunk; noisy: +0.0005 on average, +-0.03 from chunk to
     * chunk; worse: +0.1 in every chunk. */
    double cheap[8], noisy[8], worse[8];
    for (int i = 0; i < 8; i++) {
        cheap[i] = 1.0;
        noisy[i] = 1.0 + 0.005 + (i % 2 ? -0.3 : 0.3);
        worse[i] = 2.0;
    }
    int64_t runs[3] = {crafted_run(s, "weight_type=Q5_0", 5.0, noisy),
                       crafted_run(s, "weight_type=Q4_0", 4.0, cheap),
                       crafted_run(s, "weight_type=Q6_K", 6.0, worse)};
    const double x[3] = {5.0, 4.0, 6.0}, y[3] = {0.1005, 0.1, 0.2};
    ql_bootstrap_opts o;
    ql_bootstrap_opts_init(&o);
    ql_domination d[3];
    bool plain = true;
    CHECK_OK(ql_pareto_beyond_noise(s, runs, x, y, 3, QL_CMP_KLD, &o, d, &plain, &err), &err);
    CHECK(!plain);
    /* Plain dominance would put the noisy config off the front. */
    bool front[3];
    ql_pareto_front(x, y, 3, front, NULL);
    CHECK(!front[0] && front[1] && !front[2]);
    CHECK_EQ_INT(d[0].beaten_by, -1);
    CHECK_EQ_INT(d[0].within, 1);
    CHECK(d[0].within_diff.lo < 0.0 && d[0].within_diff.hi > 0.0);
    CHECK_NEAR(d[0].within_diff.estimate, 0.0005, 1e-12);
    CHECK_EQ_INT(d[1].beaten_by, -1);
    CHECK_EQ_INT(d[1].within, -1);
    /* The worse one is beaten by the cheapest that beats it: the cheap one. */
    CHECK_EQ_INT(d[2].beaten_by, 1);
    CHECK_NEAR(d[2].beaten_diff.estimate, 0.1, 1e-12);
    CHECK(d[2].beaten_diff.lo > 0.0);
    /* A point without coordinates takes no part: without the cheap one, the noisy one
     * is on the front alone and beats the worse one. */
    const double x_nan[3] = {5.0, (double)NAN, 6.0};
    CHECK_OK(ql_pareto_beyond_noise(s, runs, x_nan, y, 3, QL_CMP_KLD, &o, d, &plain, &err), &err);
    CHECK_EQ_INT(d[0].within, -1);
    CHECK_EQ_INT(d[1].beaten_by, -1);
    CHECK_EQ_INT(d[2].beaten_by, 0);
    ql_store_close(s);
}

int main(void)
{
    bootstrap_by_hand();
    front_beyond_noise();
    ql_store *s = fixture("compare.db", true);
    if (s) {
        picking_configs(s);
        comparing(s);
        ql_store_close(s);
    }
    s = fixture("compare-nochunks.db", false);
    if (s) {
        without_chunks(s);
        ql_store_close(s);
    }
    return qlt_done();
}
