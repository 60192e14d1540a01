/* qlab merge: fold shard databases into one results database. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "commands.h"
#include "results/merge.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab merge OUT.db IN.db...\n"
           "\n"
           "Folds results databases (e.g. the shards of `qlab sweep --shard K/N --db\n"
           "shard-K.db`) into OUT.db, which is created when missing. Rows are matched by\n"
           "model and text sha256, config hash and run identity (config, model, text, ctx,\n"
           "chunks), never by row id. A done run replaces a failed or interrupted one; a run\n"
           "done on both sides is kept once and must have the same values.\n"
           "\n"
           "Refused, with OUT.db left as it was:\n"
           "  - shards of one sweep (by name) that disagree on model, text, ctx, chunks or\n"
           "    metrics version;\n"
           "  - a run done on both sides whose metrics, tensor errors, per-chunk sums or\n"
           "    activation roundings differ (qlab's results are reproducible, so one side\n"
           "    is from another build or input);\n"
           "  - an input that is not a qlab results database or is OUT.db itself.\n"
           "Everything is written in one transaction; merging the same input twice changes\n"
           "nothing.\n\n");
    ql_opt_print_options(stdout, p);
}

int ql_cmd_merge(int argc, char **argv)
{
    const char **paths = calloc((size_t)argc, sizeof *paths);
    if (!paths) {
        fprintf(stderr, "qlab: error: out of memory\n");
        return QL_EXIT_RUNTIME;
    }
    ql_opt_parser p = {.prog = "qlab merge", .args = paths, .max_args = (size_t)argc, .help = help};
    int code = ql_opt_parse(&p, argc, argv);
    if (code != QL_OPT_GO_ON)
        goto out;
    code = QL_EXIT_OK;
    const size_t n = p.n_args;
    if (n < 2) {
        code = ql_opt_usage(&p, "%s",
                            n == 0 ? "missing OUT.db and the input databases"
                                   : "missing the input databases (IN.db...)");
        goto out;
    }

    ql_error err;
    ql_error_clear(&err);
    size_t n_in = n - 1;
    ql_merge_counts *counts = calloc(n_in, sizeof *counts);
    if (!counts) {
        ql_error_set(&err, QL_ENOMEM, "out of memory");
        code = ql_cli_fail(&err);
        goto out;
    }
    if (ql_merge(paths[0], paths + 1, n_in, NULL, counts, &err) != QL_OK) {
        code = ql_cli_fail(&err);
    } else {
        ql_merge_counts total = {0};
        for (size_t i = 0; i < n_in; i++) {
            printf("%s: %zu runs: %zu added, %zu replaced, %zu already there\n", paths[i + 1],
                   counts[i].runs, counts[i].added, counts[i].replaced, counts[i].kept);
            if (counts[i].other_kernel)
                printf("note: %zu run%s done in both %s and %s under different BLAS kernels "
                       "(%s vs %s) agree in every value; kept once\n",
                       counts[i].other_kernel, counts[i].other_kernel == 1 ? "" : "s",
                       paths[i + 1], paths[0], counts[i].kernel_in, counts[i].kernel_out);
            total.added += counts[i].added;
            total.replaced += counts[i].replaced;
        }
        printf("merged %zu database%s into %s: %zu runs added, %zu replaced\n", n_in,
               n_in == 1 ? "" : "s", paths[0], total.added, total.replaced);
        if (fflush(stdout) != 0) {
            ql_error_set(&err, QL_EIO, "writing the summary to stdout failed");
            code = ql_cli_fail(&err);
        }
    }
    free(counts);
out:
    free(paths);
    return code;
}
