/* qlab report: format-comparison tables and plots from the results store. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "results/analysis.h"
#include "results/report.h"
#include "results/store.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab report [--db PATH] [--sweep NAME] [-o DIR] [--tensors HASH-PREFIX]\n"
           "                   [--resamples N] [--no-plots]\n"
           "\n"
           "Writes, for every sweep in the results database (or the one named), the\n"
           "format-comparison table and plots to DIR/<sweep>/:\n"
           "  report.md          summary and table (Markdown), the configs whose types did\n"
           "                     not apply, failed configs, fitted configs against the\n"
           "                     configs no larger, one-axis comparisons with\n"
           "                     paired-bootstrap intervals, the most sensitive tensors,\n"
           "                     links to the plots\n"
           "  report.html        all of it in one self-contained page: sortable tables,\n"
           "                     more columns, the plots inline\n"
           "  formats.csv        the rows, full precision, every axis and metric\n"
           "  kld_bpw.png/.svg   mean KLD ± its error against bits per weight (log scale);\n"
           "                     colour and marker by the axes that vary, panels for more\n"
           "                     than two, the Pareto front dashed\n"
           "  ppl_bpw.png/.svg   perplexity against bits per weight (not for synth: models)\n"
           "  kld_cdf.png/.svg   the KLD distribution of every config (log x)\n"
           "  tensors-<hash>.png/.svg  per-tensor error by layer for one config, fallbacks\n"
           "                     marked\n"
           "  divergence.png/.svg  per-layer divergence (sweeps with layer_metrics = yes)\n"
           "  sensitivity.png/.svg  the measured sensitivities of the model (objective kld):\n"
           "                     log10 KLD by layer and tensor kind, a panel per type;\n"
           "                     sensitivity.csv the rows\n"
           "  *.dat, *.gp        the plot data and gnuplot scripts (rerun: gnuplot X.gp)\n"
           "\n");
    ql_opt_print_options(stdout, p);
    printf("\n"
           "The same database gives byte-identical tables. Plots need gnuplot on PATH;\n"
           "without it the tables are still written and the plots skipped (exit 0).\n");
}

int ql_cmd_report(int argc, char **argv)
{
    const char *db = QL_STORE_DEFAULT_PATH;
    ql_report_options opt = {.out_dir = QL_REPORT_DEFAULT_DIR, .plots = true, .log = stdout};
    bool no_plots = false;
    int64_t resamples = QL_BOOTSTRAP_RESAMPLES;
    const ql_opt opts[] = {
        ql_opt_str("db", 0, &db, "PATH", "results database (default " QL_STORE_DEFAULT_PATH ")"),
        ql_opt_str("sweep", 0, &opt.sweep, "NAME", "only this sweep"),
        ql_opt_str("out", 'o', &opt.out_dir, "DIR",
                   "output directory (default " QL_REPORT_DEFAULT_DIR ")"),
        ql_opt_str("tensors", 0, &opt.tensors, "PREFIX",
                   "config (hash prefix, >= 4 hex digits; see 'qlab query\n"
                   "configs') for the per-tensor plot; default: the config\n"
                   "with the largest mean KLD"),
        ql_opt_flag("no-plots", 0, &no_plots, "tables and plot data only, do not run gnuplot"),
        ql_opt_i64("resamples", 0, &resamples, 100, 100000000, "N",
                   "bootstrap resamples of the one-axis comparisons\n(default 10000)"),
    };
    ql_opt_parser p = {
        .prog = "qlab report", .opts = opts, .n_opts = QL_OPT_COUNT(opts), .help = help};
    const int rc = ql_opt_parse(&p, argc, argv);
    if (rc != QL_OPT_GO_ON)
        return rc;
    opt.plots = !no_plots;
    opt.resamples = (size_t)resamples;
    if (opt.tensors && strlen(opt.tensors) < 4)
        return ql_opt_usage(&p, "--tensors: give at least 4 hex digits of the config hash "
                                "(see 'qlab query configs')");

    ql_error err;
    ql_error_clear(&err);
    ql_store *s;
    ql_store_options so = {.readonly = true};
    if (ql_store_open(db, &so, &s, &err) != QL_OK)
        return ql_cli_fail(&err);
    ql_report_summary sum;
    ql_status st = ql_report_write(s, &opt, &sum, &err);
    ql_store_close(s);
    if (st != QL_OK && !sum.sweeps_failed) {
        ql_report_summary_deinit(&sum);
        return ql_cli_fail(&err);
    }
    printf("report: %d sweep%s, %d files under %s/", sum.sweeps, sum.sweeps == 1 ? "" : "s",
           sum.files, opt.out_dir);
    if (!opt.plots)
        printf(" (plots not asked for)\n");
    else
        printf(", %d plot%s\n", sum.plots, sum.plots == 1 ? "" : "s");
    /* What was not written, sweep by sweep: each plot gnuplot failed on with its
     * message and script, each sweep whose files could not be written. */
    size_t failed_plots = 0;
    for (size_t i = 0; i < sum.n_problems; i++) {
        const ql_report_problem *pr = &sum.problems[i];
        if (pr->what[0]) {
            failed_plots++;
            fprintf(stderr, "qlab report: sweep %s: plot %s not drawn: %s\n", pr->sweep, pr->what,
                    pr->why);
        } else {
            fprintf(stderr, "qlab report: sweep %s: not written: %s\n", pr->sweep, pr->why);
        }
    }
    if (failed_plots)
        fprintf(stderr,
                "qlab report: %zu plot%s not drawn; every other file and plot was written, "
                "and report.md and report.html link the script of each plot not drawn (run it "
                "by hand in its directory: gnuplot NAME.gp)\n",
                failed_plots, failed_plots == 1 ? "" : "s");
    else if (sum.plots_skipped)
        fprintf(stderr,
                "qlab report: plots skipped: %s\n"
                "qlab report: tables, plot data (*.dat) and gnuplot scripts (*.gp) were "
                "written; rerun once gnuplot works, or run the scripts by hand\n",
                sum.why);
    ql_report_summary_deinit(&sum);
    if (st != QL_OK)
        return ql_cli_fail(&err);
    if (fflush(stdout) != 0) {
        ql_error_set(&err, QL_EIO, "writing to standard output failed");
        return ql_cli_fail(&err);
    }
    return QL_EXIT_OK;
}
