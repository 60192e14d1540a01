/* notebooks-c: what the analysis programs share. Each program reads the results
 * store read-only through libqlab (query.h), writes a Markdown table and a
 * gnuplot plot (script + data next to the images) into an output directory,
 * and takes the options
 *
 *   --db PATH        results database (default results/qlab.db)
 *   -o, --out DIR    output directory (default results/notebooks)
 *   --sweep N        only the runs of one sweep
 *   --no-plots       tables and plot data only
 *
 * plus its own, parsed as qlab's commands parse theirs (cli/opt.h). Exit codes as
 * qlab: 0 ok (also when gnuplot is missing: the plot is skipped with a message),
 * 1 runtime error, 2 usage error. */
#ifndef QL_NB_H
#define QL_NB_H

#include <stdbool.h>
#include <stdio.h>

#include "base/doc.h"
#include "base/error.h"
#include "cli/opt.h"
#include "experiment/config.h"
#include "results/applicability.h"
#include "results/query.h"
#include "results/store.h"

#define NB_DEFAULT_DIR "results/notebooks"

typedef struct {
    const char *prog; /* program name for messages */
    const char *db, *out_dir, *sweep;
    bool plots;
} nb_options;

/* Parses the common options and the program's own (extra, n_extra of them).
 * Returns QL_OPT_GO_ON, else the exit code (0 after --help, 2 on a usage error). */
int nb_parse(int argc, char **argv, nb_options *o, const char *summary, const ql_opt *extra,
             size_t n_extra);

/* Opens the store read-only. */
ql_status nb_open(const nb_options *o, ql_store **s, ql_error *err);

/* Prepares sql; with --sweep, sweep_sql instead with the sweep bound to ?1. */
ql_status nb_prepare(ql_store *s, const nb_options *o, const char *sql, const char *sweep_sql,
                     ql_query **q, ql_error *err);

/* A finished run as the results views show it. */
typedef struct {
    int64_t run_id, chunks;
    char group[512]; /* "model · text · ctx N · K chunks": runs compared with each other */
    char hash[65];   /* config hash */
    char axis[QL_AXIS_COUNT][128]; /* the config's axes as text (outlier_ratio formatted) */
    char label[512];               /* free for the program's own label */
    double bpw, kld, ppl;          /* bits per weight, mean KLD, PPL; NAN when NULL */
    ql_applies applies;            /* whether its types applied (results/applicability.h) */
    char types_used[256];          /* the types its weights got ("" when unknown) */
} nb_result;

/* The finished runs (of the --sweep, if given) in group order, then by bits per
 * weight and the config axes. *out is allocated (free it, also after an error);
 * no run at all is an error that says so. */
ql_status nb_load_results(ql_store *s, const nb_options *o, nb_result **out, size_t *n,
                          ql_error *err);

/* Writes a document (doc.h) to out_dir/name and prints its path. */
ql_status nb_save(const nb_options *o, ql_doc *d, const char *name, ql_error *err);

/* Runs out_dir/script with gnuplot (unless --no-plots) and checks base.png and
 * base.svg; a missing or failing gnuplot prints why and is not an error. */
void nb_plot(const nb_options *o, const char *script, const char *base);

/* Prints "<prog>: error: <msg>" and returns 1. */
int nb_fail(const nb_options *o, const ql_error *err);

#endif
