/* qlab report: what the report is asked to do and what it did (ql_report_write in
 * report.h): its options and its summary. A header of its own because the report's
 * driver (report.c) and the leaves it calls (report_plot.c, report_pairs.c,
 * report_texts.c, report_html.c, through report_common.h) all read the options and
 * add to the summary, while no leaf may include the driver's header. */
#ifndef QL_REPORT_OPTIONS_H
#define QL_REPORT_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "base/error.h"

#define QL_REPORT_DEFAULT_DIR "results"

typedef struct {
    const char *sweep;   /* only this sweep; NULL = every sweep in the store */
    const char *out_dir; /* files go to out_dir/<sweep>/, created as needed */
    const char *tensors; /* config hash prefix (1 to 64 hex digits) for the per-tensor
                            plot; NULL = the default choice */
    bool plots;          /* run gnuplot; false = tables and plot data only */
    size_t resamples;    /* bootstrap resamples of the one-axis comparisons; 0 = the
                            default QL_BOOTSTRAP_RESAMPLES */
    FILE *log;           /* one line per file written; NULL = quiet */
} ql_report_options;

/* What the report could not write: a plot gnuplot failed on (the sweep's other files
 * and plots are written all the same), or a whole sweep's files. */
typedef struct {
    char sweep[256];
    char what[1100];            /* the plot's base name ("kld_bpw"); "" for the sweep's files */
    char script[4096];          /* the plot's script, as a path; "" for the sweep's files */
    char why[QL_ERROR_MSG_MAX]; /* gnuplot's own message, or the error */
} ql_report_problem;

typedef struct {
    int sweeps;                 /* sweeps reported (every file written) */
    int files;                  /* files written (tables, data, scripts, images) */
    int plots;                  /* plots rendered (each as PNG and SVG) */
    bool plots_skipped;         /* plots were asked for but not (all) drawn */
    char why[QL_ERROR_MSG_MAX]; /* why: gnuplot missing, or the first failure */
    /* Each plot not drawn for a failure of its script, and each sweep not written, in
     * the order they came (gnuplot missing is `why` alone: no plot was tried). */
    ql_report_problem *problems;
    size_t n_problems;
    int sweeps_failed; /* sweeps whose files could not all be written */
} ql_report_summary;

/* Frees the summary's problems; NULL is fine. */
void ql_report_summary_deinit(ql_report_summary *summary);

#endif
