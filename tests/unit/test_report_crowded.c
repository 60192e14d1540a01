/* qlab report on crowded sweeps (issue 25): the crowded fixture (report_fixture.h: 60
 * configs in one plot, 80 in two panels, 24 files of long names within a tenth of a
 * bit, file configs beside qlab's own types).
 *
 *   - Every plot of every sweep is drawn (the old numbered-labels key panel was drawn
 *     with the log axis still set: gnuplot stopped at "y range must be greater than 0
 *     for log scale" and every later plot of every sweep was given up).
 *   - One plot whose script fails costs that plot alone: it is named in the summary
 *     with gnuplot's message and its script's path, its stale images are gone, the
 *     sweep's other plots and files and the other sweeps are written, and report.md
 *     and report.html link its script, not images that are not there.
 *   - A sweep whose files cannot be written does not stop the next one.
 *   - The bpw plots' layout: the legend and the title drawn at screen coordinates
 *     (no gnuplot key squeezing the plot), no label over another (ql_plot_place_labels,
 *     test_plot.c), the labels without room numbered with a key in the plot and in
 *     report.md; long titles wrapped.
 *   - File configs: named file:NAME (the path, then the hash, only as far as needed to
 *     tell two files apart), their hash in a column of their own, their imatrix
 *     "unknown", and no one-axis comparison along the weight type with them.
 *
 * The expected files tests/data/report/crowd-*.md are `qlab report --no-plots` on the
 * crowded fixture (build/tests/make_fixture_db --report-crowded /tmp/c.db). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/util.h"
#include "experiment/config.h"
#include "qltest.h"
#include "report_fixture.h"
#include "results/plot.h"
#include "results/report.h"
#include "results/store.h"

static const char *const sweeps[] = {"crowd-a", "crowd-b", "crowd-c", "crowd-d"};
#define N_SWEEPS   4
#define N_PLOTS    (4 * N_SWEEPS) /* kld_bpw, ppl_bpw, kld_cdf, tensors */
#define TITLE_WRAP 100            /* report_plot.c's, for gnuplot's own titles */

static char *slurp(const char *path)
{
    char *text = NULL;
    size_t len;
    ql_error err;
    if (ql_file_read_all(path, &text, &len, &err) != QL_OK)
        return NULL;
    return text;
}

static ql_store *open_crowded(void)
{
    const char *path = qlt_tmp("crowded.db");
    ql_error err;
    ql_store *s = NULL;
    if (!ql_file_exists(path))
        CHECK_OK(qlt_report_fixture_crowded(path, &err), &err);
    ql_store_options ro = {.readonly = true};
    CHECK_OK(ql_store_open(path, &ro, &s, &err), &err);
    if (!s)
        exit(1);
    return s;
}

static ql_status report(ql_store *s, const char *dir, const char *sweep, const char *tensors,
                        bool plots, ql_report_summary *sum, ql_error *err)
{
    ql_report_options opt = {
        .sweep = sweep, .out_dir = dir, .tensors = tensors, .plots = plots, .resamples = 200};
    return ql_report_write(s, &opt, sum, err);
}

static const char *path_in(const char *dir, const char *sweep, const char *file)
{
    static char buf[4][2048];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s/%s", dir, sweep, file);
    return buf[k];
}

static size_t count(const char *text, const char *needle)
{
    size_t n = 0;
    for (const char *p = text ? strstr(text, needle) : NULL; p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* ---------------------------------------------------------------- tables and scripts */

static void test_tables(void)
{
    ql_store *s = open_crowded();
    const char *dir = qlt_tmp("tables");
    ql_report_summary sum;
    ql_error err;
    CHECK_OK(report(s, dir, NULL, NULL, false, &sum, &err), &err);
    CHECK_EQ_INT(sum.sweeps, N_SWEEPS);
    CHECK(sum.n_problems == 0 && !sum.plots_skipped);
    ql_report_summary_deinit(&sum);
    /* File configs by name, their hash apart, their imatrix unknown; the numbered
     * labels' key. */
    static const char *const pinned[] = {"crowd-b", "crowd-d"};
    for (size_t i = 0; i < 2; i++) {
        char want[256];
        snprintf(want, sizeof want, "tests/data/report/%s.md", pinned[i]);
        char *got = slurp(path_in(dir, pinned[i], "report.md")), *exp = slurp(qlt_source(want));
        CHECK_MSG(got && exp && strcmp(got, exp) == 0, "%s differs from %s\n--- got ---\n%s",
                  path_in(dir, pinned[i], "report.md"), want, got ? got : "(none)");
        free(got);
        free(exp);
    }
    char *md = slurp(path_in(dir, "crowd-b", "report.md"));
    /* Two files of one name are told apart by their directories; no label carries a
     * whole hash. */
    CHECK(md && strstr(md, "| file:a/dup.gguf ") && strstr(md, "| file:b/dup.gguf ") &&
          strstr(md, "| file:lq-Q4_K_M-im.gguf ") && !strstr(md, "@cdcdcdcd"));
    CHECK(md && strstr(md, "| unknown ") && strstr(md, "| cdcdcdcdcdcd |"));
    /* The one-axis comparisons: Q4_0 to Q4_K_M along the weight type, no file on that
     * ladder; the file against itself with q8_0 activations. */
    const char *wt = md ? strstr(md, "\nweight_type:\n") : NULL;
    const char *next = wt ? strstr(wt, "\nact_mode:\n") : NULL;
    CHECK(wt && next);
    if (wt && next) {
        char section[4096];
        snprintf(section, sizeof section, "%.*s", (int)(next - wt), wt);
        CHECK_MSG(count(section, "\n| ") == 2 && !strstr(section, "file:") &&
                      strstr(section, "| Q4_0      | Q4_K_M    |"),
                  "%s", section);
        CHECK(strstr(next, "| file:lq-Q4_K_M-im.gguf | f32   | q8_0  |") != NULL);
    }
    free(md);
    /* report.html: the file's whole value on hover, its hash in a column. */
    char *html = slurp(path_in(dir, "crowd-b", "report.html"));
    CHECK(html && strstr(html, "<td title=\"file:quants/lq-Q4_K_M-im.gguf@cdcdcdcd") &&
          strstr(html, ">file:lq-Q4_K_M-im.gguf</td>") && strstr(html, "<th title=") &&
          strstr(html, "<code>cdcdcdcdcdcd</code>"));
    free(html);

    /* The bpw scripts: title, legend and labels drawn at screen coordinates, no
     * gnuplot key or extra panel after the panels (the old log-scale failure). */
    for (size_t i = 0; i < N_SWEEPS; i++) {
        char *gp = slurp(path_in(dir, sweeps[i], "kld_bpw.gp"));
        CHECK_MSG(gp && !strstr(gp, "\nset key") && strstr(gp, "unset key") &&
                      !strstr(gp, "plot NaN") && strstr(gp, "point pt ") &&
                      count(gp, "\nset multiplot\n") == 2,
                  "%s: kld_bpw.gp", sweeps[i]);
        free(gp);
    }
    /* crowd-d: every label of the 24 files has a number, the key under the plot. */
    char *gp = slurp(path_in(dir, "crowd-d", "kld_bpw.gp"));
    CHECK(gp && strstr(gp, "set label 'numbered points:  1 file:tiny256-recipe-00-Q4_K_M.gguf,") &&
          strstr(gp, "24 file:tiny256-recipe-23-Q4_K_M.gguf'"));
    free(gp);
    md = slurp(path_in(dir, "crowd-d", "report.md"));
    CHECK(md && strstr(md, "Numbered points (no room on the plot for their labels):") &&
          strstr(md, "| mean KLD against bpw |  24 | file:tiny256-recipe-23-Q4_K_M.gguf |"));
    free(md);

    /* A long title wraps into lines of at most TITLE_WRAP characters, one string
     * expression: the per-tensor plot of a config with a long label. */
    ql_config c;
    char hash[65], prefix[13], file[64];
    CHECK_OK(ql_config_from_string("weight_type=Q5_K_M head_type=Q8_0 imatrix=calib:tinystories-"
                                   "calib,chunks=5",
                                   &c, &err),
             &err);
    ql_config_hash(&c, hash);
    snprintf(prefix, sizeof prefix, "%.12s", hash);
    snprintf(file, sizeof file, "tensors-%s.gp", prefix);
    ql_report_summary sum2;
    CHECK_OK(report(s, qlt_tmp("title"), "crowd-a", prefix, false, &sum2, &err), &err);
    ql_report_summary_deinit(&sum2);
    char *tgp = slurp(path_in(qlt_tmp("title"), "crowd-a", file));
    const char *t = tgp ? strstr(tgp, "\nset title '") : NULL;
    CHECK_MSG(t && strstr(t, "'.\"\\n\".'"), "%s: no wrapped title", file);
    for (const char *q = t ? t + strlen("\nset title ") : NULL; q && *q == '\'';) {
        const char *end = strchr(q + 1, '\'');
        CHECK(end && end - q - 1 <= TITLE_WRAP + 3); /* "—" is three bytes */
        if (!end || strncmp(end, "'.\"\\n\".'", 8) != 0)
            break;
        q = end + 7;
    }
    free(tgp);
    ql_store_close(s);
}

/* ---------------------------------------------------------------- with gnuplot */

/* A gnuplot that fails on crowd-a's kld_bpw.gp alone (with a message of gnuplot's
 * form) and runs the real one on every other script. */
static const char *failing_gnuplot(const char *real)
{
    const char *bin = qlt_tmp("failbin");
    mkdir(bin, 0755);
    static char path[2048];
    snprintf(path, sizeof path, "%s/gnuplot", bin);
    char text[8192];
    snprintf(text, sizeof text,
             "#!/bin/sh\n"
             "case \"$(pwd)\" in */crowd-a) if [ \"$1\" = kld_bpw.gp ]; then\n"
             "  echo '         plot x' >&2; echo '              ^' >&2\n"
             "  echo '\"kld_bpw.gp\" line 9: y range must be greater than 0 for log scale' >&2\n"
             "  exit 1; fi ;; esac\n"
             "exec '%s' \"$@\"\n",
             real);
    ql_error err;
    CHECK_OK(ql_file_write_all(path, text, strlen(text), &err), &err);
    chmod(path, 0755);
    return bin;
}

static void test_plots(void)
{
    char real[4096];
    if (!ql_plot_find_gnuplot(real, sizeof real)) {
        printf("note: gnuplot not on PATH; the crowded plots are not drawn here\n");
        return;
    }
    ql_store *s = open_crowded();
    const char *dir = qlt_tmp("plots");
    ql_report_summary sum;
    ql_error err;
    /* Every plot of every sweep. */
    CHECK_OK(report(s, dir, NULL, NULL, true, &sum, &err), &err);
    CHECK_MSG(sum.plots == N_PLOTS && sum.n_problems == 0 && !sum.plots_skipped,
              "%d plots, %zu problems: %s", sum.plots, sum.n_problems, sum.why);
    ql_report_summary_deinit(&sum);
    for (size_t i = 0; i < N_SWEEPS; i++)
        CHECK_OK(ql_png_check(path_in(dir, sweeps[i], "kld_bpw.png"), QL_PLOT_PNG_MIN_BYTES, &err),
                 &err);

    /* One script fails, into the same directory: that plot alone is left out. */
    const char *saved = getenv("PATH");
    char *path_copy = ql_strdup(saved ? saved : "");
    setenv("PATH", failing_gnuplot(real), 1);
    ql_status st = report(s, dir, NULL, NULL, true, &sum, &err);
    setenv("PATH", path_copy, 1);
    free(path_copy);
    CHECK_OK(st, &err);
    CHECK_MSG(sum.plots == N_PLOTS - 1 && sum.n_problems == 1 && sum.plots_skipped &&
                  sum.sweeps == N_SWEEPS,
              "%d plots, %zu problems", sum.plots, sum.n_problems);
    if (sum.n_problems == 1) {
        const ql_report_problem *p = &sum.problems[0];
        char script[4096];
        snprintf(script, sizeof script, "%s/crowd-a/kld_bpw.gp", dir);
        CHECK(strcmp(p->sweep, "crowd-a") == 0 && strcmp(p->what, "kld_bpw") == 0);
        CHECK_MSG(strcmp(p->script, script) == 0, "%s", p->script);
        /* gnuplot's own message, with the command it points at. */
        CHECK_MSG(strstr(p->why, "kld_bpw.gp: exit status 1: \"kld_bpw.gp\" line 9: y range "
                                 "must be greater than 0 for log scale (at: plot x)"),
                  "%s", p->why);
    }
    ql_report_summary_deinit(&sum);
    /* No stale image of the plot that failed; the sweep's other plots drawn. */
    CHECK(!ql_file_exists(path_in(dir, "crowd-a", "kld_bpw.png")) &&
          !ql_file_exists(path_in(dir, "crowd-a", "kld_bpw.svg")));
    CHECK(ql_file_exists(path_in(dir, "crowd-a", "kld_bpw.gp")));
    CHECK_OK(ql_png_check(path_in(dir, "crowd-a", "ppl_bpw.png"), QL_PLOT_PNG_MIN_BYTES, &err),
             &err);
    /* report.md links what is there: the script of the plot not drawn. */
    char *md = slurp(path_in(dir, "crowd-a", "report.md"));
    CHECK(md &&
          strstr(md, "Plots not drawn, their gnuplot scripts: [mean KLD against bpw]"
                     "(kld_bpw.gp).") &&
          !strstr(md, "(kld_bpw.svg)") && strstr(md, "[PPL against bpw](ppl_bpw.svg)"));
    free(md);
    char *html = slurp(path_in(dir, "crowd-a", "report.html"));
    CHECK(html && count(html, "<svg") == 3 &&
          strstr(html, "its gnuplot script: <a href=\"kld_bpw.gp\">") &&
          !strstr(html, "href=\"kld_bpw.svg\""));
    free(html);
    /* The sweeps after it: every plot. */
    for (size_t i = 1; i < N_SWEEPS; i++) {
        html = slurp(path_in(dir, sweeps[i], "report.html"));
        CHECK_MSG(html && count(html, "<svg") == 4, "%s: not every plot inline", sweeps[i]);
        free(html);
    }
    ql_store_close(s);
}

/* A sweep whose files cannot be written: named, and the others written. */
static void test_sweep_not_written(void)
{
    ql_store *s = open_crowded();
    const char *dir = qlt_tmp("blocked");
    mkdir(dir, 0755);
    ql_error err;
    CHECK_OK(ql_file_write_all(path_in(qlt_tmp(""), "blocked", "crowd-a"), "x", 1, &err), &err);
    ql_report_summary sum;
    ql_status st = report(s, dir, NULL, NULL, false, &sum, &err);
    CHECK(st != QL_OK && strncmp(err.msg, "sweep crowd-a: ", 15) == 0);
    CHECK_MSG(sum.sweeps == N_SWEEPS - 1 && sum.sweeps_failed == 1 && sum.n_problems == 1 &&
                  strcmp(sum.problems[0].sweep, "crowd-a") == 0 && !sum.problems[0].what[0],
              "%d sweeps, %d failed", sum.sweeps, sum.sweeps_failed);
    ql_report_summary_deinit(&sum);
    for (size_t i = 1; i < N_SWEEPS; i++)
        CHECK(ql_file_exists(path_in(dir, sweeps[i], "report.md")));
    ql_store_close(s);
}

int main(void)
{
    test_tables();
    test_plots();
    test_sweep_not_written();
    return qlt_done();
}
