/* qlab report: format-comparison tables and plots from the results store. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "results/report.h"
#include "results/store.h"

static void help(void)
{
    printf("usage: qlab report [--db PATH] [--sweep NAME] [-o DIR] [--tensors HASH-PREFIX]\n"
           "                   [--no-plots]\n"
           "\n"
           "Writes, for every sweep in the results database (or the one named), the\n"
           "format-comparison table and plots to DIR/<sweep>/:\n"
           "  report.md          summary and table (Markdown), failed configs\n"
           "  formats.csv        the same rows, full precision, every axis\n"
           "  kld_bpw.png/.svg   mean KLD against bits per weight (log scale), one series\n"
           "                     per activation mode, the Pareto front dashed\n"
           "  ppl_bpw.png/.svg   perplexity against bits per weight\n"
           "  tensors-<hash>.png/.svg  per-tensor error by layer for one config\n"
           "  *.dat, *.gp        the plot data and gnuplot scripts (rerun: gnuplot X.gp)\n"
           "\n"
           "options:\n"
           "  --db PATH          results database (default %s)\n"
           "  --sweep NAME       only this sweep\n"
           "  -o, --out DIR      output directory (default %s)\n"
           "  --tensors PREFIX   config (hash prefix, >= 4 hex digits; see 'qlab query\n"
           "                     configs') for the per-tensor plot; default: the config\n"
           "                     with the largest mean KLD\n"
           "  --no-plots         tables and plot data only, do not run gnuplot\n"
           "\n"
           "The same database gives byte-identical tables. Plots need gnuplot on PATH;\n"
           "without it the tables are still written and the plots skipped (exit 0).\n",
           QL_STORE_DEFAULT_PATH, QL_REPORT_DEFAULT_DIR);
}

int ql_cmd_report(int argc, char **argv)
{
    const char *db = QL_STORE_DEFAULT_PATH;
    ql_report_options opt = {.out_dir = QL_REPORT_DEFAULT_DIR, .plots = true, .log = stdout};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **target = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help();
            return QL_EXIT_OK;
        } else if (strcmp(a, "--no-plots") == 0) {
            opt.plots = false;
            continue;
        } else if (strcmp(a, "--db") == 0) {
            target = &db;
        } else if (strcmp(a, "--sweep") == 0) {
            target = &opt.sweep;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--out") == 0) {
            target = &opt.out_dir;
        } else if (strcmp(a, "--tensors") == 0) {
            target = &opt.tensors;
        } else if (a[0] == '-') {
            return ql_cli_usage("report", "unknown option '%s'", a);
        } else {
            return ql_cli_usage("report", "unexpected argument '%s'", a);
        }
        if (++i >= argc || !*argv[i])
            return ql_cli_usage("report", "%s needs a value", a);
        *target = argv[i];
    }
    if (opt.tensors && strlen(opt.tensors) < 4)
        return ql_cli_usage("report", "--tensors: give at least 4 hex digits of the config hash "
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
    if (st != QL_OK)
        return ql_cli_fail(&err);
    printf("report: %d sweep%s, %d files under %s/", sum.sweeps, sum.sweeps == 1 ? "" : "s",
           sum.files, opt.out_dir);
    if (!opt.plots)
        printf(" (plots not asked for)\n");
    else
        printf(", %d plot%s\n", sum.plots, sum.plots == 1 ? "" : "s");
    if (sum.plots_skipped)
        fprintf(stderr,
                "qlab report: plots skipped: %s\n"
                "qlab report: tables, plot data (*.dat) and gnuplot scripts (*.gp) were "
                "written; rerun once gnuplot works, or run the scripts by hand\n",
                sum.why);
    if (fflush(stdout) != 0) {
        ql_error_set(&err, QL_EIO, "writing to standard output failed");
        return ql_cli_fail(&err);
    }
    return QL_EXIT_OK;
}
