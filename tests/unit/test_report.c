/* qlab report and its helpers: Markdown/CSV tables, the Pareto front (hand-
 * checked), the paired bootstrap (constructed cases with known answers), the
 * report on the fixture database (exact text, determinism, options and
 * errors), the sensitivity heatmap and the fit table on a store of their own
 * (exact figures, store faults) and the plot path with a missing, a failing and
 * the real gnuplot.
 *
 * The expected report files in tests/data/report/ are `qlab report --no-plots`
 * on the report fixture (report_fixture.c); a deliberate change of the format
 * regenerates them with
 *   build/tests/make_fixture_db --report /tmp/f.db &&
 *   build/core/qlab report --db /tmp/f.db -o /tmp/r --no-plots
 * and copies /tmp/r/<sweep>/report.md (and formats.csv) over them. */
#include <dirent.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/table.h"
#include "base/util.h"
#include "experiment/config.h"
#include "formats/types.h"
#include "qltest.h"
#include "report_fixture.h"
#include "results/analysis.h"
#include "results/plot.h"
#include "results/report.h"
#include "results/types_table.h"
#include "results/store.h"

/* ---------------------------------------------------------------- helpers */

static char *slurp(const char *path)
{
    char *text = NULL;
    size_t len;
    ql_error err;
    if (ql_file_read_all(path, &text, &len, &err) != QL_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    return text;
}

static void check_same_file(const char *got_path, const char *want_path)
{
    char *got = slurp(got_path), *want = slurp(want_path);
    CHECK_MSG(got && want && strcmp(got, want) == 0, "%s differs from %s\n--- got ---\n%s",
              got_path, want_path, got ? got : "(none)");
    free(got);
    free(want);
}

static ql_store *open_fixture(const char *path)
{
    ql_error err;
    ql_store *s = NULL;
    if (!ql_file_exists(path))
        CHECK_OK(qlt_report_fixture(path, true, &err), &err);
    ql_store_options ro = {.readonly = true};
    CHECK_OK(ql_store_open(path, &ro, &s, &err), &err);
    if (!s)
        exit(1);
    return s;
}

static char *table_md(const ql_table *t)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ql_table_write_md(t, f, "—");
    fclose(f);
    return text;
}

static char *table_csv(const ql_table *t)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ql_table_write_csv(t, f);
    fclose(f);
    return text;
}

/* ---------------------------------------------------------------- tables */

static void test_table(void)
{
    ql_error err;
    const ql_table_column cols[] = {
        {"name", NULL, false}, {"a|b", "a_b", true}, {"Δx", "dx", true}};
    ql_table *t = ql_table_alloc(cols, 3);
    CHECK(t != NULL);
    CHECK_OK(ql_table_row(t, &err), &err);
    CHECK_OK(ql_table_put(t, "Q4_0", &err), &err);
    CHECK_OK(ql_table_putf(t, &err, "%.2f", 1.5), &err);
    CHECK_OK(ql_table_put(t, NULL, &err), &err);
    CHECK_OK(ql_table_row(t, &err), &err);
    CHECK_OK(ql_table_put(t, "x, \"y\"", &err), &err);
    CHECK_OK(ql_table_put(t, "1|2", &err), &err);
    /* The third cell is left out: missing. */
    CHECK_EQ_INT(ql_table_rows(t), 2);
    CHECK(ql_table_cell(t, 1, 2) == NULL);
    CHECK(!ql_table_col_empty(t, 1));
    CHECK(ql_table_col_empty(t, 2));

    char *md = table_md(t);
    const char *want_md = "| name   | a\\|b |  Δx |\n"
                          "|--------|-----:|----:|\n"
                          "| Q4_0   | 1.50 |   — |\n"
                          "| x, \"y\" | 1\\|2 |   — |\n";
    CHECK_MSG(md && strcmp(md, want_md) == 0, "got:\n%s", md);
    free(md);
    char *csv = table_csv(t);
    const char *want_csv = "name,a_b,dx\nQ4_0,1.50,\n\"x, \"\"y\"\"\",1|2,\n";
    CHECK_MSG(csv && strcmp(csv, want_csv) == 0, "got:\n%s", csv);
    free(csv);

    /* Hidden columns leave the Markdown, never the CSV. */
    ql_table_hide(t, 2, true);
    md = table_md(t);
    CHECK_MSG(md && strstr(md, "Δx") == NULL && strstr(md, "| Q4_0   | 1.50 |\n"), "%s", md);
    free(md);
    csv = table_csv(t);
    CHECK(csv && strncmp(csv, "name,a_b,dx\n", 12) == 0);
    free(csv);
    ql_table_free(t);
    ql_table_free(NULL);

    /* Numbers: a missing cell for NaN; alignment set once the values are known;
     * rows past the first allocation (16) start with every cell missing. */
    const ql_table_column num_cols[] = {{"v", NULL, false}, {"w", NULL, false}};
    t = ql_table_alloc(num_cols, 2);
    CHECK(t != NULL);
    for (int r = 0; r < 40; r++) {
        CHECK_OK(ql_table_row(t, &err), &err);
        /* literal formats: the function carries printf's format attribute */
        if (r == 0)
            CHECK_OK(ql_table_put_num(t, 1.0 / 3, "%.3f", &err), &err);
        else if (r == 1)
            CHECK_OK(ql_table_put_num(t, -0.5, "%+.2e", &err), &err);
        else if (r == 2)
            CHECK_OK(ql_table_put_num(t, (double)NAN, "%.1f", &err), &err);
    }
    CHECK_EQ_INT(ql_table_rows(t), 40);
    CHECK(ql_table_cell(t, 0, 0) && strcmp(ql_table_cell(t, 0, 0), "0.333") == 0);
    CHECK(ql_table_cell(t, 1, 0) && strcmp(ql_table_cell(t, 1, 0), "-5.00e-01") == 0);
    int missing = 1;
    for (size_t r = 0; r < 40; r++)
        missing &= (r < 2 || ql_table_cell(t, r, 0) == NULL) && ql_table_cell(t, r, 1) == NULL;
    CHECK(missing);
    ql_table_align_right(t, 0, true);
    md = table_md(t);
    const char *want_head = "|         v | w   |\n"
                            "|----------:|-----|\n"
                            "|     0.333 | —   |\n"
                            "| -5.00e-01 | —   |\n"
                            "|         — | —   |\n";
    CHECK_MSG(md && strncmp(md, want_head, strlen(want_head)) == 0, "got:\n%s", md);
    free(md);
    ql_table_free(t);

    char buf[64];
    CHECK(strcmp(ql_fmt_bytes(512, buf, sizeof buf), "512 B") == 0);
    CHECK(strcmp(ql_fmt_bytes(4608, buf, sizeof buf), "4.50 KiB") == 0);
    CHECK(strcmp(ql_fmt_bytes(3.0 * 1048576, buf, sizeof buf), "3.00 MiB") == 0);
    CHECK(strcmp(ql_fmt_bytes(1073741824.0 * 1.25, buf, sizeof buf), "1.25 GiB") == 0);
    CHECK(strcmp(ql_fmt_count(0, buf, sizeof buf), "0") == 0);
    CHECK(strcmp(ql_fmt_count(999, buf, sizeof buf), "999") == 0);
    CHECK(strcmp(ql_fmt_count(1234567, buf, sizeof buf), "1,234,567") == 0);
    CHECK(strcmp(ql_fmt_count(-24736, buf, sizeof buf), "-24,736") == 0);
    CHECK(ql_fmt_exact((double)NAN, buf, sizeof buf) == NULL);
    CHECK(strcmp(ql_fmt_exact(0.1, buf, sizeof buf), "0.1") == 0);
}

/* ---------------------------------------------------------------- Pareto */

static void test_pareto(void)
{
    /* Worked by hand (minimise both):
     *   0 (2,5) front: nothing has x <= 2
     *   1 (3,4) front: only 0 and 2 have x <= 3, both worse in y
     *   2 (3,6) dominated by 0 (2,5) and 1 (3,4); the cheapest is 0
     *   3 (4,4) dominated by 1 (3,4): smaller x, equal y
     *   4 (5,1) front; 5 (5,1) the same point: identical points do not dominate
     *   6 (NaN,0) never on the front, dominates nothing (else it would beat 4, 5)
     *   7 (6,3) dominated by 4 and 5 (equal x and y): the lower index, 4
     *   8 (1,NaN) not on the front, dominates nothing (else it would beat 0) */
    const double x[] = {2, 3, 3, 4, 5, 5, (double)NAN, 6, 1};
    const double y[] = {5, 4, 6, 4, 1, 1, 0, 3, (double)NAN};
    const bool want_front[] = {true, true, false, false, true, true, false, false, false};
    const ptrdiff_t want_by[] = {-1, -1, 0, 1, -1, -1, -1, 4, -1};
    bool front[9];
    ptrdiff_t by[9];
    ql_pareto_front(x, y, 9, front, by);
    for (int i = 0; i < 9; i++) {
        CHECK_MSG(front[i] == want_front[i], "point %d: on_front %d", i, front[i]);
        CHECK_MSG(by[i] == want_by[i], "point %d: dominated_by %td, want %td", i, by[i],
                  want_by[i]);
    }
    /* dominated_by may be NULL; one point is its own front. */
    ql_pareto_front(x, y, 1, front, NULL);
    CHECK(front[0]);
    ql_pareto_front(x, y, 0, front, NULL);
}

/* ---------------------------------------------------------------- bootstrap */

static void test_bootstrap_constant_shift(void)
{
    /* b + 0.125 w per chunk: every resample sees the same shift, exactly (all
     * values dyadic, so the sums are exact). */
    enum { N = 16 };
    double a[N], b[N], w[N];
    for (int i = 0; i < N; i++) {
        w[i] = 20 + i % 5;
        b[i] = 0.5 * w[i] * (1 + i % 3);
        a[i] = b[i] + 0.125 * w[i];
    }
    ql_ci ci;
    ql_error err;
    CHECK_OK(ql_bootstrap_paired_diff(a, b, w, N, 2000, 0.95, 7, &ci, &err), &err);
    CHECK(ci.estimate == 0.125);
    CHECK(ci.lo == 0.125 && ci.hi == 0.125);
    CHECK(ci.se == 0.0);
    CHECK_EQ_INT(ci.n, N);
    CHECK_EQ_INT(ci.resamples, 2000);
}

/* Differences d_i ~ N(mu, sigma^2), unit weights: D is the sample mean, whose
 * bootstrap distribution has standard deviation s_n / sqrt(n) (s_n the sample
 * standard deviation with divisor n) and, for n = 400, is close to normal. */
static void test_bootstrap_known_variance(void)
{
    enum { N = 400, R = 20000 };
    const double mu = 0.03, sigma = 0.2;
    /* Monte-Carlo error of the bootstrap with R = 20000: about 0.5% on the
     * standard deviation and 1-2% on a 2.5% quantile; the percentile interval of
     * a mean of 400 also differs from the normal one by its skew (tiny here). */
    const double se_tol = 0.03, bound_tol = 0.05;
    static double a[N], b[N], w[N];
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 12345);
    double mean = 0.0;
    for (int i = 0; i < N; i++) {
        w[i] = 1.0;
        b[i] = gsl_ran_gaussian(rng, 1.0);
        a[i] = b[i] + mu + gsl_ran_gaussian(rng, sigma);
    }
    gsl_rng_free(rng);
    for (int i = 0; i < N; i++)
        mean += a[i] - b[i];
    mean /= N;
    double ss = 0.0;
    for (int i = 0; i < N; i++)
        ss += (a[i] - b[i] - mean) * (a[i] - b[i] - mean);
    double se = sqrt(ss / N) / sqrt((double)N);
    const double z975 = 1.959963984540054;

    ql_ci ci;
    ql_error err;
    CHECK_OK(ql_bootstrap_paired_diff(a, b, w, N, R, 0.95, 99, &ci, &err), &err);
    CHECK_NEAR(ci.estimate, mean, 1e-12);
    CHECK_MSG(fabs(ci.se / se - 1.0) < se_tol, "bootstrap se %g, analytic %g", ci.se, se);
    CHECK_MSG(fabs((ci.hi - ci.estimate) / (z975 * se) - 1.0) < bound_tol,
              "upper half-width %g vs %g", ci.hi - ci.estimate, z975 * se);
    CHECK_MSG(fabs((ci.estimate - ci.lo) / (z975 * se) - 1.0) < bound_tol,
              "lower half-width %g vs %g", ci.estimate - ci.lo, z975 * se);
    CHECK(ci.lo < mu && mu < ci.hi);

    /* Same seed, same interval; another seed, another (Monte-Carlo noise). */
    ql_ci again, other;
    CHECK_OK(ql_bootstrap_paired_diff(a, b, w, N, R, 0.95, 99, &again, &err), &err);
    CHECK(again.lo == ci.lo && again.hi == ci.hi && again.se == ci.se);
    CHECK_OK(ql_bootstrap_paired_diff(a, b, w, N, R, 0.95, 100, &other, &err), &err);
    CHECK(other.lo != ci.lo);
    /* A narrower level gives a narrower interval. */
    ql_ci narrow;
    CHECK_OK(ql_bootstrap_paired_diff(a, b, w, N, R, 0.5, 99, &narrow, &err), &err);
    CHECK(narrow.lo > ci.lo && narrow.hi < ci.hi);
}

static void test_bootstrap_errors(void)
{
    double a[3] = {1, 2, 3}, b[3] = {0, 0, 0}, w[3] = {1, 1, 1};
    ql_ci ci;
    ql_error err;
    CHECK(ql_bootstrap_paired_diff(a, b, w, 1, 1000, 0.95, 1, &ci, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "1 chunk; at least 2") != NULL);
    CHECK(ql_bootstrap_paired_diff(a, b, w, 3, 10, 0.95, 1, &ci, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "10 resamples") != NULL);
    CHECK(ql_bootstrap_paired_diff(a, b, w, 3, 1000, 1.0, 1, &ci, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "level 1 is not in (0, 1)") != NULL);
    w[1] = 0.0;
    CHECK(ql_bootstrap_paired_diff(a, b, w, 3, 1000, 0.95, 1, &ci, &err) == QL_EINVAL);
    CHECK_MSG(strstr(err.msg, "chunk 1: a = 2, b = 0, w = 0") != NULL, "%s", err.msg);
    w[1] = 1.0;
    a[2] = (double)NAN;
    CHECK(ql_bootstrap_paired_diff(a, b, w, 3, 1000, 0.95, 1, &ci, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "chunk 2") != NULL);
}

/* ---------------------------------------------------------------- report */

static ql_status report(ql_store *s, const char *dir, const char *sweep, const char *tensors,
                        bool plots, ql_report_summary *sum, ql_error *err)
{
    ql_report_options opt = {.sweep = sweep, .out_dir = dir, .tensors = tensors, .plots = plots};
    ql_report_summary all;
    ql_status st = ql_report_write(s, &opt, &all, err);
    /* The counts and the first reason; the tests that look at the problems themselves
     * call ql_report_write. */
    *sum = all;
    sum->problems = NULL;
    ql_report_summary_deinit(&all);
    return st;
}

/* Every regular file of a directory, sorted, as one string "name\n...". */
static char *list_dir(const char *dir)
{
    struct dirent **ents;
    int n = scandir(dir, &ents, NULL, alphasort);
    if (n < 0)
        return ql_strdup("");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    for (int i = 0; i < n; i++) {
        if (ents[i]->d_name[0] != '.')
            fprintf(f, "%s\n", ents[i]->d_name);
        free(ents[i]);
    }
    free(ents);
    fclose(f);
    return text;
}

static void test_report_text(void)
{
    ql_store *s = open_fixture(qlt_tmp("fixture.db"));
    const char *dir = qlt_tmp("out1");
    ql_report_summary sum;
    ql_error err;
    CHECK_OK(report(s, dir, NULL, NULL, false, &sum, &err), &err);
    CHECK_EQ_INT(sum.sweeps, 3);
    CHECK_EQ_INT(sum.plots, 0);
    CHECK(!sum.plots_skipped);
    char got[600], want[600];
    static const char *const sweeps[] = {"fixture-formats", "fixture-mixed", "fixture-failed"};
    for (int i = 0; i < 3; i++) {
        snprintf(got, sizeof got, "%s/%s/report.md", dir, sweeps[i]);
        snprintf(want, sizeof want, "tests/data/report/%s.md", sweeps[i]);
        check_same_file(got, qlt_source(want));
    }
    snprintf(got, sizeof got, "%s/fixture-formats/formats.csv", dir);
    check_same_file(got, qlt_source("tests/data/report/fixture-formats.csv"));

    /* The files of a sweep: tables, plot data and scripts, no images. */
    snprintf(got, sizeof got, "%s/fixture-formats", dir);
    char *files = list_dir(got);
    CHECK_MSG(
        strcmp(
            files,
            "formats.csv\nformats.dat\nkld_bpw.gp\nkld_cdf.dat\nkld_cdf.gp\n"
            "pareto_kld.dat\npareto_ppl.dat\nppl_bpw.gp\nreport.html\nreport.md\ntensor-types.csv\n"
            "tensors-c90fa930648f.dat\ntensors-c90fa930648f.gp\n") == 0,
        "%s", files);
    free(files);
    /* Two groups in one sweep: per-group plot files. */
    snprintf(got, sizeof got, "%s/fixture-mixed/kld_bpw-fixture-b-fixture-text-ctx64-c8.gp", dir);
    CHECK(ql_file_exists(got));

    /* The Pareto front of the fixture in (bpw, KLD): the q8_0 activation runs are
     * all beaten by their f32 twins; among f32, every config is on the front. */
    snprintf(got, sizeof got, "%s/fixture-formats/pareto_kld.dat", dir);
    char *front = slurp(got);
    CHECK_MSG(front && strstr(front, "\"Q4_0 act=f32\" 1a4bd3da") &&
                  strstr(front, "\"Q4_0 act=f32 head=F32\"") &&
                  strstr(front, "\"Q8_0 act=f32\" 55cc442f") &&
                  strstr(front, "\"F16 act=f32\" 9514f34a") && !strstr(front, "act=q8_0"),
              "%s", front ? front : "");
    free(front);

    /* Each script plots the column of formats.dat that the data's header names. */
    snprintf(got, sizeof got, "%s/fixture-formats/formats.dat", dir);
    char *dat = slurp(got);
    const char *head = dat ? strstr(dat, "# columns:") : NULL;
    CHECK(head != NULL);
    static const struct {
        const char *script, *column;
    } plotted[] = {{"kld_bpw.gp", "kld_mean"}, {"ppl_bpw.gp", "ppl"}};
    for (size_t i = 0; head && i < sizeof plotted / sizeof plotted[0]; i++) {
        int col = 0, k = 0;
        char word[64];
        for (const char *p = head + strlen("# columns:"); *p != '\n' && col == 0; k++) {
            int used = 0;
            if (sscanf(p, " %63s%n", word, &used) != 1)
                break;
            p += used;
            if (strcmp(word, plotted[i].column) == 0)
                col = k + 1;
        }
        snprintf(got, sizeof got, "%s/fixture-formats/%s", dir, plotted[i].script);
        char *gp = slurp(got), want_using[64];
        snprintf(want_using, sizeof want_using, "):%d:(bar_lo($%d, ", col, col);
        CHECK_MSG(col > 0 && gp && strstr(gp, "'formats.dat' index 0 using ($1 + ") &&
                      strstr(gp, want_using),
                  "%s: no '%s'", plotted[i].script, want_using);
        free(gp);
    }
    free(dat);
    ql_store_close(s);
}

/* Two reports of the same database are byte-identical, file by file. */
static void test_report_deterministic(void)
{
    ql_store *s = open_fixture(qlt_tmp("fixture.db"));
    const char *d1 = qlt_tmp("det1"), *d2 = qlt_tmp("det2");
    ql_report_summary sum;
    ql_error err;
    CHECK_OK(report(s, d1, NULL, NULL, false, &sum, &err), &err);
    int files = sum.files;
    CHECK_OK(report(s, d2, NULL, NULL, false, &sum, &err), &err);
    CHECK_EQ_INT(sum.files, files);
    int compared = 0;
    static const char *const sweeps[] = {"fixture-formats", "fixture-mixed", "fixture-failed"};
    for (int i = 0; i < 3; i++) {
        char a[600], b[600];
        snprintf(a, sizeof a, "%s/%s", d1, sweeps[i]);
        snprintf(b, sizeof b, "%s/%s", d2, sweeps[i]);
        char *la = list_dir(a), *lb = list_dir(b);
        CHECK(strcmp(la, lb) == 0);
        for (char *name = strtok(la, "\n"); name; name = strtok(NULL, "\n")) {
            char pa[900], pb[900];
            snprintf(pa, sizeof pa, "%s/%s", a, name);
            snprintf(pb, sizeof pb, "%s/%s", b, name);
            CHECK_MSG(qlt_same_file(pa, pb), "%s differs between two runs", name);
            compared++;
        }
        free(la);
        free(lb);
    }
    CHECK_EQ_INT(compared, files);
    ql_store_close(s);
}

/* Every file under dir (one level of sweep directories), names and bytes, as one
 * string: what a failed report must leave as it was. */
static char *tree_snapshot(const char *dir)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    char *subs = list_dir(dir);
    for (char *sub = strtok(subs, "\n"); sub; sub = strtok(NULL, "\n")) {
        char d[900];
        snprintf(d, sizeof d, "%s/%s", dir, sub);
        char *names = list_dir(d), *save = NULL;
        for (char *name = strtok_r(names, "\n", &save); name; name = strtok_r(NULL, "\n", &save)) {
            char p[1300];
            snprintf(p, sizeof p, "%s/%s", d, name);
            char *body = slurp(p);
            fprintf(f, "== %s/%s\n%s", sub, name, body ? body : "");
            free(body);
        }
        free(names);
    }
    free(subs);
    fclose(f);
    return text;
}

/* A store failure at any SQLite call of the report (the fault injection of the
 * store, which the report's reading goes through): a clear error, and the output
 * directory exactly as it was, until the report gets through. */
static void test_report_faults(void)
{
    const char *db = qlt_tmp("fixture.db");
    ql_store *s = open_fixture(db);
    const char *dir = qlt_tmp("faults-out");
    ql_error err;
    CHECK_OK(ql_make_dirs(qlt_tmp("faults-out/fixture-formats"), &err), &err);
    CHECK_OK(ql_file_write_all(qlt_tmp("faults-out/fixture-formats/report.md"), "stale\n", 6, &err),
             &err);
    size_t db_len;
    char *db_before = qlt_read_file(db, &db_len);
    char *before = tree_snapshot(dir);
    CHECK(strstr(before, "== fixture-formats/report.md\nstale\n") != NULL);
    int failures = 0;
    bool done = false;
    for (int n = 1; n < 2000 && !done; n++) {
        ql_report_summary sum;
        /* Few resamples: the comparisons' statistics are not what is tested here. */
        ql_report_options opt = {.out_dir = dir, .resamples = 100};
        ql_store_inject_fault(s, n);
        ql_status st = ql_report_write(s, &opt, &sum, &err);
        ql_store_inject_fault(s, 0);
        ql_report_summary_deinit(&sum);
        if (st == QL_OK) {
            done = true;
            break;
        }
        failures++;
        CHECK_MSG(st == QL_EDB && strstr(err.msg, "report: ") && strstr(err.msg, "injected fault"),
                  "fault %d: status %d: %s", n, (int)st, err.msg);
        char *now = tree_snapshot(dir);
        CHECK_MSG(strcmp(now, before) == 0, "fault %d (%s): the output directory changed", n,
                  err.msg);
        free(now);
    }
    CHECK(done);
    /* Every statement of every sweep: dozens of calls. */
    CHECK_MSG(failures > 50, "only %d calls could fail", failures);
    char *after = tree_snapshot(dir);
    CHECK(strstr(after, "stale") == NULL && strstr(after, "fixture-mixed/formats.csv") != NULL);
    free(after);
    free(before);
    size_t len;
    char *db_after = qlt_read_file(db, &len);
    CHECK(len == db_len && memcmp(db_after, db_before, len) == 0);
    free(db_after);
    free(db_before);
    ql_store_close(s);
}

static void test_report_options(void)
{
    ql_store *s = open_fixture(qlt_tmp("fixture.db"));
    ql_report_summary sum;
    ql_error err;
    const char *dir = qlt_tmp("opts");

    /* One sweep only. */
    CHECK_OK(report(s, dir, "fixture-mixed", NULL, false, &sum, &err), &err);
    CHECK_EQ_INT(sum.sweeps, 1);
    char p[600];
    snprintf(p, sizeof p, "%s/fixture-formats", dir);
    CHECK(!ql_file_exists(p));

    /* --tensors picks the config (a prefix, any case). */
    CHECK_OK(report(s, dir, "fixture-formats", "9514F3", false, &sum, &err), &err);
    snprintf(p, sizeof p, "%s/fixture-formats/tensors-9514f34a1aec.dat", dir);
    CHECK(ql_file_exists(p));
    char *dat = slurp(p);
    CHECK(dat && strstr(dat, "# config F16 act=f32 (9514f34a1aec") &&
          strstr(dat, "columns: layer imatrix_err_rel used_type") &&
          strstr(dat, "# index 6: ffn_down\n0 "));
    free(dat);

    /* Errors. */
    CHECK(report(s, dir, "nope", NULL, false, &sum, &err) == QL_ENOTFOUND);
    CHECK_MSG(strstr(err.msg, "no sweep 'nope' (sweeps: fixture-failed, fixture-formats, "
                              "fixture-mixed)"),
              "%s", err.msg);
    CHECK(report(s, dir, NULL, "xyz", false, &sum, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "--tensors 'xyz': not a config hash prefix") != NULL);
    CHECK(report(s, dir, "fixture-formats", "8138", false, &sum, &err) == QL_ENOTFOUND);
    CHECK_MSG(strstr(err.msg, "--tensors 8138: no finished run") != NULL, "%s", err.msg);

    /* An output directory that cannot be created. */
    const char *blocker = qlt_tmp("blocker");
    CHECK_OK(ql_file_write_all(blocker, "x", 1, &err), &err);
    snprintf(p, sizeof p, "%s/sub", blocker);
    CHECK(report(s, p, "fixture-mixed", NULL, false, &sum, &err) == QL_EIO);
    CHECK_MSG(strstr(err.msg, "blocker: exists and is not a directory") != NULL, "%s", err.msg);
    ql_store_close(s);
}

/* A database without sweeps, and a --tensors prefix shared by two configs. */
static void test_report_edge_cases(void)
{
    ql_error err;
    ql_store *s;
    const char *path = qlt_tmp("edge.db");
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    ql_report_summary sum;
    CHECK(report(s, qlt_tmp("edge-out"), NULL, NULL, false, &sum, &err) == QL_ENOTFOUND);
    CHECK(strstr(err.msg, "no sweeps in this database") != NULL);

    /* Add finished configs until two share the first hex digit of their hash
     * (at most 17 by pigeonhole). */
    ql_store_model m;
    ql_store_model_init(&m);
    m.sha256 = "1111111111111111111111111111111111111111111111111111111111111111";
    m.path = "m.gguf";
    ql_store_dataset d;
    ql_store_dataset_init(&d);
    d.sha256 = "2222222222222222222222222222222222222222222222222222222222222222";
    d.name = "t";
    int64_t mid, tid;
    CHECK_OK(ql_store_upsert_model(s, &m, &mid, &err), &err);
    CHECK_OK(ql_store_upsert_dataset(s, &d, &tid, &err), &err);
    char seen[17] = {0};
    char shared[2] = "";
    for (int k = 2; k < 40 && !shared[0]; k++) {
        char canon[96], hash[65];
        snprintf(canon, sizeof canon, "weight_type=Q8_0 outlier_ratio=%d", k);
        ql_config c;
        int64_t cid, run;
        CHECK_OK(ql_config_from_string(canon, &c, &err), &err);
        CHECK_OK(ql_store_upsert_config(s, &c, &cid, &err), &err);
        ql_store_run_key key = {cid, mid, tid, 32, 2};
        ql_store_run_info info = {"edge", 1, 1, NULL, NULL, 0, 0};
        CHECK_OK(ql_store_begin_run(s, &key, &info, &run, &err), &err);
        ql_run_metrics met;
        ql_run_metrics_init(&met);
        met.bpw = 8.5;
        met.kld_mean = 0.001 * k;
        ql_tensor_record te = {"blk.0.attn_q.weight",
                               QL_TYPE_Q8_0,
                               QL_TYPE_Q8_0,
                               NULL,
                               32,
                               32,
                               1024,
                               1088,
                               0.001,
                               0.004,
                               (double)NAN,
                               (double)NAN,
                               0,
                               "the weight type: Q8_0"};
        CHECK_OK(ql_store_finish_run(s, run, &met, &te, 1, NULL, &err), &err);
        ql_config_hash(&c, hash);
        if (strchr(seen, hash[0]))
            shared[0] = hash[0];
        else
            seen[strlen(seen)] = hash[0];
    }
    CHECK(shared[0] != '\0');
    CHECK(report(s, qlt_tmp("edge-out"), NULL, shared, false, &sum, &err) == QL_EINVAL);
    CHECK_MSG(strstr(err.msg, "several configs of sweep 'edge' match") != NULL, "%s", err.msg);

    /* Without imatrix errors the per-tensor plot falls back to rmse; the
     * outlier ratio varies, so it is a column and part of the labels. */
    CHECK_OK(report(s, qlt_tmp("edge-out"), NULL, NULL, false, &sum, &err), &err);
    char *md = slurp(qlt_tmp("edge-out/edge/report.md"));
    CHECK_MSG(md && strstr(md, "| weights | outliers |   bpw | size |  KLD mean |\n") &&
                  strstr(md, "(F32 norms included). KLD: KL(reference"),
              "%s", md);
    free(md);
    char *files = list_dir(qlt_tmp("edge-out/edge"));
    char *tensors = strstr(files, "tensors-");
    CHECK(tensors != NULL);
    if (tensors) {
        char name[64], rel[600];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(tensors, "\n"), tensors);
        if (strstr(name, ".dat")) {
            snprintf(rel, sizeof rel, "edge-out/edge/%s", name);
            char *dat = slurp(qlt_tmp(rel));
            CHECK(dat && strstr(dat, "columns: layer rmse used_type") &&
                  strstr(dat, "# config Q8_0 outliers="));
            free(dat);
        }
    }
    free(files);
    ql_store_close(s);
}

/* ---------------------------------------------------------------- plots */

static void write_script(const char *path, const char *text)
{
    ql_error err;
    CHECK_OK(ql_file_write_all(path, text, strlen(text), &err), &err);
    chmod(path, 0755);
}

static void test_plots_without_gnuplot(void)
{
    ql_store *s = open_fixture(qlt_tmp("fixture.db"));
    ql_report_summary sum;
    ql_error err;
    const char *saved = getenv("PATH");
    char *path_copy = ql_strdup(saved ? saved : "");

    /* Not on PATH: tables still written, the reason given, no error. */
    setenv("PATH", qlt_tmp("no-such-dir"), 1);
    CHECK(!ql_plot_find_gnuplot(NULL, 0));
    CHECK_OK(report(s, qlt_tmp("nognu"), "fixture-formats", NULL, true, &sum, &err), &err);
    CHECK(sum.plots_skipped && strcmp(sum.why, "gnuplot not found on PATH") == 0);
    CHECK_EQ_INT(sum.plots, 0);
    CHECK(ql_file_exists(qlt_tmp("nognu/fixture-formats/report.md")));
    CHECK(ql_file_exists(qlt_tmp("nognu/fixture-formats/kld_bpw.gp")));
    CHECK(!ql_file_exists(qlt_tmp("nognu/fixture-formats/kld_bpw.png")));

    /* A gnuplot that fails: its message is in the reason. */
    const char *bin = qlt_tmp("fakebin"), *fake = qlt_tmp("fakebin/gnuplot");
    mkdir(bin, 0755);
    write_script(fake, "#!/bin/sh\necho \"line 3: unknown terminal type\" >&2\nexit 1\n");
    setenv("PATH", bin, 1);
    CHECK(ql_plot_find_gnuplot(NULL, 0));
    CHECK_OK(report(s, qlt_tmp("badgnu"), "fixture-formats", NULL, true, &sum, &err), &err);
    CHECK_MSG(sum.plots_skipped && strstr(sum.why, "kld_bpw.gp: exit status 1: line 3: unknown "
                                                   "terminal type"),
              "%s", sum.why);
    CHECK(ql_file_exists(qlt_tmp("badgnu/fixture-formats/formats.csv")));

    /* A gnuplot that succeeds without drawing. */
    write_script(fake, "#!/bin/sh\nexit 0\n");
    CHECK_OK(report(s, qlt_tmp("lazygnu"), "fixture-formats", NULL, true, &sum, &err), &err);
    CHECK_MSG(sum.plots_skipped && strstr(sum.why, "wrote no usable image") &&
                  strstr(sum.why, "kld_bpw.png: cannot open"),
              "%s", sum.why);
    /* One that writes something that is not a PNG. */
    write_script(fake, "#!/bin/sh\necho junk > kld_bpw.png\necho junk > kld_bpw.svg\n");
    CHECK_OK(report(s, qlt_tmp("junkgnu"), "fixture-formats", NULL, true, &sum, &err), &err);
    CHECK_MSG(sum.plots_skipped && strstr(sum.why, "not a PNG file"), "%s", sum.why);

    setenv("PATH", path_copy, 1);
    free(path_copy);
    ql_store_close(s);
}

static void test_png_check(void)
{
    ql_error err;
    const char *p = qlt_tmp("tiny.png");
    static const unsigned char png_head[24] = {0x89, 'P', 'N', 'G',  '\r', '\n', 0x1a, '\n',
                                               0,    0,   0,   13,   'I',  'H',  'D',  'R',
                                               0,    0,   3,   0xc0, 0,    0,    2,    0x58};
    CHECK_OK(ql_file_write_all(p, png_head, sizeof png_head, &err), &err);
    /* A valid header, but far too small to be a plot. */
    CHECK(ql_png_check(p, QL_PLOT_PNG_MIN_BYTES, &err) == QL_EFORMAT);
    CHECK(strstr(err.msg, "PNG of 24 bytes") != NULL);
    CHECK_OK(ql_png_check(p, 24, &err), &err);
    unsigned char zero[24];
    memcpy(zero, png_head, 24);
    memset(zero + 16, 0, 4);
    CHECK_OK(ql_file_write_all(p, zero, 24, &err), &err);
    CHECK(ql_png_check(p, 0, &err) == QL_EFORMAT && strstr(err.msg, "PNG of size 0x600"));
    CHECK_OK(ql_file_write_all(p, png_head, 7, &err), &err);
    CHECK(ql_png_check(p, 0, &err) == QL_EFORMAT && strstr(err.msg, "no PNG signature"));
    CHECK(ql_png_check(qlt_tmp("absent.png"), 0, &err) == QL_EIO);
}

/* With the real gnuplot (skipped when it is not installed): every plot is a
 * real PNG of non-trivial size and an SVG. */
static void test_plots_real_gnuplot(void)
{
    if (!ql_plot_find_gnuplot(NULL, 0)) {
        printf("note: gnuplot not on PATH; real-plot checks skipped\n");
        return;
    }
    ql_store *s = open_fixture(qlt_tmp("fixture.db"));
    ql_report_summary sum;
    ql_error err;
    CHECK_OK(report(s, qlt_tmp("plots"), NULL, NULL, true, &sum, &err), &err);
    CHECK_MSG(!sum.plots_skipped, "%s", sum.why);
    /* fixture-formats 4, fixture-mixed 2 groups x 4, fixture-failed none. */
    CHECK_EQ_INT(sum.plots, 12);
    static const char *const pngs[] = {"fixture-formats/kld_bpw", "fixture-formats/ppl_bpw",
                                       "fixture-formats/kld_cdf",
                                       "fixture-formats/tensors-c90fa930648f",
                                       "fixture-mixed/kld_bpw-fixture-b-fixture-text-ctx64-c8"};
    for (size_t i = 0; i < sizeof pngs / sizeof pngs[0]; i++) {
        char p[600];
        snprintf(p, sizeof p, "plots/%s.png", pngs[i]);
        size_t len;
        unsigned char *data = qlt_read_file(qlt_tmp(p), &len);
        CHECK(len >= QL_PLOT_PNG_MIN_BYTES && memcmp(data, "\x89PNG\r\n\x1a\n", 8) == 0);
        free(data);
        snprintf(p, sizeof p, "plots/%s.svg", pngs[i]);
        char *svg = slurp(qlt_tmp(p));
        CHECK(svg && strstr(svg, "<svg") && strstr(svg, "</svg>"));
        free(svg);
    }
    ql_store_close(s);
}

/* The tensor-types section: a mixed class with its counts, the fallbacks, the rule
 * behind each tensor in tensor-types.csv, and no row for a run without records. */
static void test_report_tensor_types(void)
{
    char name[64];
    ql_tensor_class("blk.12.ffn_down_exps.weight", name, sizeof name);
    CHECK(strcmp(name, "ffn_down_exps") == 0);
    ql_tensor_class("token_embd.weight", name, sizeof name);
    CHECK(strcmp(name, "token_embd") == 0);
    CHECK(ql_tensor_class_rank("token_embd") < ql_tensor_class_rank("attn_q"));
    CHECK(ql_tensor_class_rank("ffn_down") < ql_tensor_class_rank("output"));
    CHECK(ql_tensor_class_rank("output") < ql_tensor_class_rank("ffn_down_exps"));

    ql_store *s = NULL;
    ql_error err;
    CHECK_OK(ql_store_open(qlt_tmp("types.db"), NULL, &s, &err), &err);
    if (!s)
        return;
    ql_store_model m;
    ql_store_model_init(&m);
    m.sha256 = "3333333333333333333333333333333333333333333333333333333333333333";
    m.path = "m.gguf";
    ql_store_dataset d;
    ql_store_dataset_init(&d);
    d.sha256 = "4444444444444444444444444444444444444444444444444444444444444444";
    d.name = "t";
    int64_t mid, tid;
    CHECK_OK(ql_store_upsert_model(s, &m, &mid, &err), &err);
    CHECK_OK(ql_store_upsert_dataset(s, &d, &tid, &err), &err);
    const ql_tensor_record mix[] = {
        {"token_embd.weight", QL_TYPE_Q4_K, QL_TYPE_Q4_K, NULL, 512, 256, 131072, 73728, 0.1, 0.2,
         (double)NAN, (double)NAN, -1, "Q4_K_M: its default type: Q4_K"},
        {"blk.0.attn_v.weight", QL_TYPE_Q6_K, QL_TYPE_Q6_K, NULL, 128, 256, 32768, 26880, 0.1, 0.2,
         (double)NAN, (double)NAN, -1, "Q4_K_M: attn_v 0 of 2, a layer with more bits: Q6_K"},
        {"blk.1.attn_v.weight", QL_TYPE_Q4_K, QL_TYPE_Q4_K, NULL, 128, 256, 32768, 18432, 0.1, 0.2,
         (double)NAN, (double)NAN, -1, "Q4_K_M: its default type: Q4_K"},
        {"blk.0.ffn_down.weight", QL_TYPE_Q6_K, QL_TYPE_Q8_0,
         "row length 172 is not a multiple of 256 (Q6_K): Q8_0", 256, 160, 40960, 43520, 0.1, 0.2,
         (double)NAN, (double)NAN, -1, "Q4_K_M: ffn_down of layer 0 of 2: Q6_K"},
        {"output.weight", QL_TYPE_Q6_K, QL_TYPE_Q6_K, NULL, 512, 256, 131072, 107520, 0.1, 0.2,
         (double)NAN, (double)NAN, -1, "Q4_K_M: head: Q6_K"},
    };
    static const char *const configs[] = {"weight_type=Q4_K_M imatrix=calib:c",
                                          "weight_type=Q8_0 imatrix=calib:c"};
    for (int k = 0; k < 2; k++) {
        ql_config c;
        int64_t cid, run;
        CHECK_OK(ql_config_from_string(configs[k], &c, &err), &err);
        CHECK_OK(ql_store_upsert_config(s, &c, &cid, &err), &err);
        ql_store_run_key key = {cid, mid, tid, 32, 2};
        ql_store_run_info info = {"types", 1, 1, NULL, NULL, 0, 0};
        CHECK_OK(ql_store_begin_run(s, &key, &info, &run, &err), &err);
        ql_run_metrics met;
        ql_run_metrics_init(&met);
        met.bpw = 4.9 + 4 * k;
        met.kld_mean = 0.01;
        /* The Q8_0 run stored no per-tensor records. */
        CHECK_OK(ql_store_finish_run(s, run, &met, k ? NULL : mix, k ? 0 : 5, NULL, &err), &err);
    }
    ql_report_summary sum;
    CHECK_OK(report(s, qlt_tmp("types-out"), "types", NULL, false, &sum, &err), &err);
    char *md = slurp(qlt_tmp("types-out/types/report.md"));
    const char *want =
        "\nTensor types (the type each class got; ×N counts the tensors of a mixed class; the "
        "rule behind every tensor is in tensor-types.csv):\n\n"
        "| config | token_embd | attn_v            | ffn_down | output | fallbacks |\n"
        "|--------|------------|-------------------|----------|--------|----------:|\n"
        "| Q4_K_M | Q4_K       | Q4_K ×1 / Q6_K ×1 | Q8_0     | Q6_K   |    1 of 5 |\n";
    CHECK_MSG(md && strstr(md, want) != NULL, "%s", md ? md : "(no report.md)");
    free(md);
    char *csv = slurp(qlt_tmp("types-out/types/tensor-types.csv"));
    static const char header[] = "model,dataset,ctx,chunks,config_hash,config,tensor,class,layer,"
                                 "requested_type,used_type,choice,fallback_reason\n";
    CHECK_MSG(csv && strncmp(csv, header, strlen(header)) == 0, "%s", csv ? csv : "(no csv)");
    CHECK(csv && strstr(csv, ",Q4_K_M,blk.0.ffn_down.weight,ffn_down,0,Q6_K,Q8_0,Q4_K_M: "
                             "ffn_down of layer 0 of 2: Q6_K,row length 172 is not a multiple "
                             "of 256 (Q6_K): Q8_0\n") != NULL);
    CHECK(csv && strstr(csv, ",Q4_K_M,output.weight,output,,Q6_K,Q6_K,Q4_K_M: head: Q6_K,\n"));
    /* Five lines of tensors and the header: nothing of the Q8_0 run. */
    size_t lines = 0;
    for (const char *q = csv; q && *q; q++)
        lines += *q == '\n';
    CHECK_EQ_INT(lines, 6);
    free(csv);
    ql_store_close(s);
}

/* ---------------------------------------------------------------- sensitivity and fits */

#define SENS_MODEL_SHA "5555555555555555555555555555555555555555555555555555555555555555"
#define SENS_TEXT_SHA  "6666666666666666666666666666666666666666666666666666666666666666"
#define SENS_CALIB_A   "7777777777777777777777777777777777777777777777777777777777777777"
#define SENS_CALIB_B   "8888888888888888888888888888888888888888888888888888888888888888"
#define SENS_CHUNKS    4
#define SENS_TOKENS    32
#define SENS_PARAMS    8192 /* bpw = bytes / 1024 */

/* A config of the fit store: its bytes, its own share of the KLD per token, whether its
 * KLD alternates around that share chunk by chunk, and the solver's prediction. */
typedef struct {
    const char *canon;
    double bytes, kld_own;
    bool alternate;
    double predicted, calib; /* the solver's prediction, the KLD on the calibration text */
} fit_config;

/* A config's mean KLD per token in chunk i is its own share plus one all configs share,
 * so that fitted - other is the same in every chunk and its bootstrap interval one
 * point; Q4_K_M's alternates by ±1/512 around the kld fit's (a difference of 0 whose
 * interval spans zero). Every number is dyadic: the figures below are exact. */
static const fit_config fit_configs[] = {
    {"weight_type=Q4_0 imatrix=calib:calib-a", 4608, 1.0 / 32, false, (double)NAN, (double)NAN},
    {"weight_type=Q4_K_M imatrix=calib:calib-a", 5120, 1.0 / 256, true, (double)NAN, (double)NAN},
    {"weight_type=Q8_0 imatrix=calib:calib-a", 8704, 1.0 / 1024, false, (double)NAN, (double)NAN},
    {"weight_type=Q8_0 imatrix=calib:calib-a budget=Q4_K_M objective=kld", 5120, 1.0 / 256, false,
     1.0 / 64, 1.0 / 40},
    {"weight_type=Q8_0 imatrix=calib:calib-a budget=bpw:4.75", 4864, 1.0 / 64, false, (double)NAN,
     (double)NAN},
};
static const double chunk_share[SENS_CHUNKS] = {1.0 / 64, 1.0 / 32, 3.0 / 128, 5.0 / 128};

static void add_fit_run(ql_store *s, int64_t model, int64_t text, const fit_config *fc)
{
    ql_error err;
    ql_config c;
    int64_t cid, run;
    CHECK_OK(ql_config_from_string(fc->canon, &c, &err), &err);
    CHECK_OK(ql_store_upsert_config(s, &c, &cid, &err), &err);
    ql_store_run_key key = {cid, model, text, 64, SENS_CHUNKS};
    ql_store_run_info info = {"fit", 1, 2, NULL, NULL, 0, 0};
    CHECK_OK(ql_store_begin_run(s, &key, &info, &run, &err), &err);
    ql_chunk_record ck[SENS_CHUNKS];
    double kld = 0.0;
    for (int i = 0; i < SENS_CHUNKS; i++) {
        double wiggle = fc->alternate ? (i % 2 ? 1.0 : -1.0) / 512 : 0.0;
        double mean = fc->kld_own + chunk_share[i] + wiggle;
        ck[i] = (ql_chunk_record){i,
                                  SENS_TOKENS,
                                  mean * SENS_TOKENS,
                                  2.5 * SENS_TOKENS + 0.5 * mean * SENS_TOKENS,
                                  2.5 * SENS_TOKENS,
                                  SENS_TOKENS - 2};
        kld += ck[i].kld_sum;
    }
    ql_run_metrics m;
    ql_run_metrics_init(&m);
    m.n_tokens = SENS_TOKENS * SENS_CHUNKS;
    m.kld_mean = kld / m.n_tokens;
    m.kld_mean_err = 1.0 / 1024;
    m.params = SENS_PARAMS;
    m.bytes = fc->bytes;
    m.bpw = 8.0 * fc->bytes / SENS_PARAMS;
    m.predicted_kld = fc->predicted;
    m.calib_kld = fc->calib;
    ql_run_result res = {.metrics = &m, .chunks = ck, .n_chunks = SENS_CHUNKS};
    CHECK_OK(ql_store_finish_run_result(s, run, &res, &err), &err);
}

/* The mean KLD of the largest set at Q4_0: (kind + 1 + 8 layer) / 1024 in the blocks,
 * the embedding least and the head most sensitive; Q8_0 a 64th of it. */
static double sens_kld(int layer, int kind, int32_t type)
{
    double q4 = layer < 0 ? 0.5 / 1024 : kind < 0 ? 20.0 / 1024 : (kind + 1 + 8.0 * layer) / 1024;
    return type == QL_TYPE_Q4_0 ? q4 : q4 / 64;
}

static void add_sensitivities(ql_store *s)
{
    static const char *const kinds[] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                        "ffn_gate", "ffn_up", "ffn_down"};
    static const int32_t types[] = {QL_TYPE_Q4_0, QL_TYPE_Q8_0};
    ql_error err;
    ql_store_sens_key a = {SENS_MODEL_SHA, SENS_CALIB_A, "calib-a", 64,
                           SENS_CHUNKS,    "none",       2,         "tensor"};
    for (int l = -1; l <= 2; l++)
        for (int k = 0; k < (l < 0 || l == 2 ? 1 : 7); k++)
            for (int t = 0; t < 2; t++) {
                char name[64];
                const char *kind = l < 0 ? "token_embd" : l == 2 ? "output" : kinds[k];
                if (l < 0 || l == 2)
                    snprintf(name, sizeof name, "%s.weight", kind);
                else
                    snprintf(name, sizeof name, "blk.%d.%s.weight", l, kind);
                double kld = sens_kld(l, l == 2 ? -1 : k, types[t]);
                ql_store_sens_row r = {name,          1,   l,          kind,    types[t],
                                       512 * (t + 1), kld, 1.0 / 4096, kld / 2, 1.0 / 8192,
                                       0.25,          NULL};
                CHECK_OK(ql_store_sensitivity_put(s, &a, &r, &err), &err);
            }
    /* A smaller set on another text: left out, however large its figures. */
    ql_store_sens_key b = {SENS_MODEL_SHA, SENS_CALIB_B, "calib-b", 32, 2, SENS_CALIB_A, 2,
                           "tensor"};
    for (int k = 0; k < 3; k++) {
        static const char *const names[] = {"blk.0.attn_q.weight", "blk.0.attn_k.weight",
                                            "blk.0.attn_v.weight"};
        ql_store_sens_row r = {names[k], 1,     0,   kinds[k], QL_TYPE_Q4_0, 512,
                               1.0,      0.125, 0.5, 0.125,    100.0,        NULL};
        CHECK_OK(ql_store_sensitivity_put(s, &b, &r, &err), &err);
    }
    /* Groups of tensors (kld:module) on another text, more rows than any tensor set: not
     * what the report draws, however many and however large. */
    ql_store_sens_key gk = {SENS_MODEL_SHA, SENS_CALIB_B, "calib-b", 64,
                            SENS_CHUNKS,    "none",       2,         "module"};
    for (int l = 0; l < 40; l++)
        for (int k = 0; k < 2; k++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s", l, k ? "ffn" : "attn");
            ql_store_sens_row r = {name,         k ? 3 : 4, l,    k ? "ffn" : "attn",
                                   QL_TYPE_Q4_0, 4096,      2.0,  0.125,
                                   1.0,          0.125,     50.0, NULL};
            CHECK_OK(ql_store_sensitivity_put(s, &gk, &r, &err), &err);
        }
}

static ql_store *open_fit_store(const char *path)
{
    ql_error err;
    ql_store *s = NULL;
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    if (!s)
        exit(1);
    ql_store_model m;
    ql_store_model_init(&m);
    m.sha256 = SENS_MODEL_SHA;
    m.path = "models/sens.gguf";
    m.name = "sens-model";
    m.n_layer = 2;
    ql_store_dataset d;
    ql_store_dataset_init(&d);
    d.sha256 = SENS_TEXT_SHA;
    d.name = "sens-text";
    int64_t mid, tid;
    CHECK_OK(ql_store_upsert_model(s, &m, &mid, &err), &err);
    CHECK_OK(ql_store_upsert_dataset(s, &d, &tid, &err), &err);
    for (size_t k = 0; k < sizeof fit_configs / sizeof fit_configs[0]; k++)
        add_fit_run(s, mid, tid, &fit_configs[k]);
    add_sensitivities(s);
    return s;
}

/* The line of a file that holds needle, as a heap string (NULL when none). */
static char *line_with(const char *text, const char *needle)
{
    const char *p = text ? strstr(text, needle) : NULL;
    if (!p)
        return NULL;
    while (p > text && p[-1] != '\n')
        p--;
    size_t n = strcspn(p, "\n");
    char *line = malloc(n + 1);
    memcpy(line, p, n);
    line[n] = '\0';
    return line;
}

/* The heatmap of the largest sensitivity set, its CSV and report.md's section, and the
 * fit table: the fitted configs against the smaller ones with exact differences. */
static void test_report_sensitivity_and_fits(void)
{
    ql_store *s = open_fit_store(qlt_tmp("fit.db"));
    ql_report_summary sum;
    ql_error err;
    CHECK_OK(report(s, qlt_tmp("fit-out"), "fit", NULL, false, &sum, &err), &err);
    char *files = list_dir(qlt_tmp("fit-out/fit"));
    CHECK_MSG(strstr(files, "sensitivity.csv\nsensitivity.dat\nsensitivity.gp\n") != NULL, "%s",
              files);
    free(files);

    /* The data: a block per type by bits, a line per tensor in its column and layer. */
    char *dat = slurp(qlt_tmp("fit-out/fit/sensitivity.dat"));
    CHECK_MSG(dat &&
                  strstr(dat, "# measured on calib-a, ctx 64, 4 chunks, imatrix none (the "
                              "largest of 2 sets), metrics version 2\n") &&
                  strstr(dat, "# index 0: Q4_0\n") && strstr(dat, "\n\n\n# index 1: Q8_0\n") &&
                  !strstr(dat, "calib-b") && !strstr(dat, "index 2"),
              "%s", dat ? dat : "(none)");
    static const struct {
        int col, layer, kind;
        int32_t type;
        const char *tensor;
    } cells[] = {
        {6, 1, 6, QL_TYPE_Q4_0, "blk.1.ffn_down.weight"},
        {0, 0, 0, QL_TYPE_Q8_0, "blk.0.attn_q.weight"},
        {7, 2, -1, QL_TYPE_Q4_0, "output.weight"},
        {8, -1, 0, QL_TYPE_Q8_0, "token_embd.weight"},
    };
    for (size_t i = 0; i < sizeof cells / sizeof cells[0]; i++) {
        double kld = sens_kld(cells[i].layer, cells[i].kind, cells[i].type);
        char want[256];
        snprintf(want, sizeof want, "\n%d %d %.17g %.17g \"%s\"\n", cells[i].col, cells[i].layer,
                 log10(kld), kld, cells[i].tensor);
        const char *at = dat ? strstr(dat, want) : NULL;
        const char *q8 = dat ? strstr(dat, "# index 1: Q8_0") : NULL;
        CHECK_MSG(at && (cells[i].type == QL_TYPE_Q4_0) == (at < q8), "no '%s' in its block",
                  want + 1);
    }
    free(dat);

    /* The script: a panel per type on a shared scale, the set named in the title. */
    char *gp = slurp(qlt_tmp("fit-out/fit/sensitivity.gp"));
    CHECK_MSG(gp &&
                  strstr(gp, "set multiplot layout 1,2 title 'fit: sens-model — sensitivity on "
                             "calib-a, ctx 64, 4 chunks, imatrix none (the largest of 2 sets)'") &&
                  strstr(gp, "set cbrange [-6:-1]\n") &&
                  strstr(gp, "set ytics ('embd' -1, '0' 0, '1' 1, 'head' 2)\n") &&
                  strstr(gp, "'ffn_down' 6, 'output' 7, 'token_embd' 8)\n") &&
                  strstr(gp, "set title 'Q4_0 (4.50 bpw)'\nplot 'sensitivity.dat' index 0 using "
                             "1:2:(0.5):(0.5):3 with boxxyerror") &&
                  strstr(gp, "set title 'Q8_0 (8.50 bpw)'\nplot 'sensitivity.dat' index 1 ") &&
                  strstr(gp, "set output 'sensitivity.svg'"),
              "%s", gp ? gp : "(none)");
    free(gp);

    /* The CSV: the 32 rows of the set used, with every figure exact. */
    char *csv = slurp(qlt_tmp("fit-out/fit/sensitivity.csv"));
    size_t lines = 0;
    for (const char *q = csv; q && *q; q++)
        lines += *q == '\n';
    CHECK_EQ_INT(lines, 33);
    static const char csv_head[] =
        "model,text,text_sha256,ctx,chunks,imatrix_sha256,metrics_version,tensor,layer,kind,type,"
        "bytes,kld_mean,kld_mean_err,ln_ppl_ratio,ln_ppl_ratio_err,seconds\n";
    CHECK_MSG(csv && strncmp(csv, csv_head, strlen(csv_head)) == 0 &&
                  strstr(csv, "\nsens-model,calib-a," SENS_CALIB_A ",64,4,none,2,"
                              "blk.1.ffn_down.weight,1,ffn_down,Q4_0,512,0.0146484375,"
                              "0.000244140625,0.00732421875,0.0001220703125,0.25\n") &&
                  !strstr(csv, "calib-b"),
              "%s", csv ? csv : "(none)");
    free(csv);

    char *md = slurp(qlt_tmp("fit-out/fit/report.md"));
    CHECK_MSG(md && strstr(md, "\n- measured on calib-a, ctx 64, 4 chunks, imatrix none, metrics "
                               "version 2 (the largest of the 2 sets stored for this model)\n"
                               "- 32 (tensor, type) pairs: 16 tensors, 2 types (Q4_0, Q8_0); "
                               "8.00 s of measuring\n\nMost sensitive at Q4_0, the lowest-bit "
                               "type measured:\n\n"),
              "%s", md ? md : "(none)");
    /* The ten most sensitive at Q4_0, the head first, the eleventh left out. */
    char *first = line_with(md, " 1 | output.weight ");
    CHECK_MSG(first && strstr(first, "1.953e-02 ± 2.441e-04") &&
                  strstr(first, "+9.7656e-03 ± 1.2207e-04"),
              "%s", first ? first : "(no head row)");
    free(first);
    char *tenth = line_with(md, " 10 | blk.0.ffn_up.weight ");
    CHECK_MSG(tenth && strstr(tenth, "5.859e-03 ± 2.441e-04"), "%s",
              tenth ? tenth : "(no 10th row)");
    free(tenth);
    CHECK(md && !strstr(md, "blk.0.ffn_gate.weight"));

    /* The fit table: by bpw, each fitted config against the smaller ones, closest first;
     * the kld fit's KLD is twice its prediction and 1.25 times its calibration KLD; a constant
     * difference has an interval of one point, which excludes zero, Q4_K_M's alternating one does
     * not. */
    const char *want_fits[] = {
        "| Q8_0   | bpw:4.75 | imatrix   | 4.750 | 4.75 KiB | 4.297e-02 ± 9.766e-04 |            "
        " — |                    — |                 — |                — | Q4_0    |   4.500 | 5"
        ".859e-02 ± 9.766e-04 | -1.56e-02 [-1.56e-02, -1.56e-02] * |",
        "| Q8_0   | Q4_K_M   | kld       | 5.000 | 5.00 KiB | 3.125e-02 ± 9.766e-04 |     1.562e-"
        "02 |                2.000 |         2.500e-02 |            1.250 | Q4_K_M  |   5.000 | 3"
        ".125e-02 ± 9.766e-04 |   +0.00e+00 [-1.95e-03, +1.95e-03] |",
        "|        |          |           |       |          |                       |            "
        "   |                      |                   |                  | Q4_0    |   4.500 | 5"
        ".859e-02 ± 9.766e-04 | -2.73e-02 [-2.73e-02, -2.73e-02] * |",
    };
    const char *prev = md;
    for (size_t i = 0; i < sizeof want_fits / sizeof want_fits[0]; i++) {
        const char *at = prev ? strstr(prev, want_fits[i]) : NULL;
        CHECK_MSG(at != NULL, "no fit row %zu in order:\n%s\n--- report.md ---\n%s", i,
                  want_fits[i], md ? md : "");
        prev = at;
    }
    char *alt = line_with(
        md, "| 3.125e-02 ± 9.766e-04 |     1.562e-02 |                2.000 |         2.500e-02 |");
    CHECK_MSG(alt && strstr(alt, " +0.00e+00 [") && !strstr(alt, "] *"), "%s",
              alt ? alt : "(none)");
    free(alt);
    /* Q8_0 is larger than both fits. */
    char *q8 = line_with(md, "| Q8_0    |   8.500 |");
    CHECK_MSG(q8 == NULL, "%s", q8);
    free(q8);
    CHECK(md && strstr(md, "[sensitivity heatmap](sensitivity.gp)"));
    free(md);

    /* A store failure at any call while the sensitivities are read or the fits compared:
     * an error, and nothing written. */
    const char *dir = qlt_tmp("fit-faults");
    bool done = false;
    int failures = 0;
    for (int n = 1; n < 500 && !done; n++) {
        ql_report_options opt = {.sweep = "fit", .out_dir = dir, .resamples = 100};
        ql_store_inject_fault(s, n);
        ql_status st = ql_report_write(s, &opt, &sum, &err);
        ql_store_inject_fault(s, 0);
        ql_report_summary_deinit(&sum);
        done = st == QL_OK;
        if (done)
            break;
        failures++;
        CHECK_MSG(st == QL_EDB && strstr(err.msg, "injected fault"), "fault %d: %s", n, err.msg);
        CHECK_MSG(!ql_file_exists(dir), "fault %d (%s): files written", n, err.msg);
    }
    CHECK(done && failures > 10);

    /* Drawn by the real gnuplot when there is one. */
    if (ql_plot_find_gnuplot(NULL, 0)) {
        CHECK_OK(report(s, qlt_tmp("fit-plots"), "fit", NULL, true, &sum, &err), &err);
        CHECK_MSG(!sum.plots_skipped, "%s", sum.why);
        size_t len = 0;
        unsigned char *png = qlt_read_file(qlt_tmp("fit-plots/fit/sensitivity.png"), &len);
        CHECK(png && len >= QL_PLOT_PNG_MIN_BYTES && memcmp(png, "\x89PNG\r\n\x1a\n", 8) == 0);
        free(png);
    }
    ql_store_close(s);
}

int main(void)
{
    gsl_set_error_handler_off();
    test_table();
    test_pareto();
    test_bootstrap_constant_shift();
    test_bootstrap_known_variance();
    test_bootstrap_errors();
    test_report_text();
    test_report_deterministic();
    test_report_options();
    test_report_faults();
    test_report_edge_cases();
    test_report_tensor_types();
    test_report_sensitivity_and_fits();
    test_png_check();
    test_plots_without_gnuplot();
    test_plots_real_gnuplot();
    return qlt_done();
}
