/* qlab query: read-only SQL (or a named query) on the results store. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "results/query.h"
#include "results/store.h"

static void help(void)
{
    printf("usage: qlab query [--db PATH] [--csv|--json|--md] \"SQL\"\n"
           "       qlab query [--db PATH] [--csv|--json|--md] NAME [ARG]\n"
           "       qlab query --list\n"
           "\n"
           "Runs one read-only SQL statement (or a named query) on the results database\n"
           "and prints the rows. The database is opened read-only; statements that would\n"
           "write are refused.\n"
           "\n"
           "options:\n"
           "  --db PATH   results database (default %s)\n"
           "  --csv       comma-separated values with a header row (NULL = empty field)\n"
           "  --json      an array of objects, one per row (NULL = null)\n"
           "  --md        a Markdown table (NULL = empty cell)\n"
           "  --list      list the named queries\n"
           "\n"
           "The default output is an aligned text table (NULL shown as NULL). Views:\n"
           "results (one row per finished run), sweep_results, run_log, failed_runs,\n"
           "tensor_results, chunk_results; tables: models, datasets, configs, runs,\n"
           "sweep_runs, metrics, tensor_errors, chunk_metrics, act_roundings.\n",
           QL_STORE_DEFAULT_PATH);
}

static void list(void)
{
    const ql_named_query *q;
    size_t n = ql_named_queries(&q);
    for (size_t i = 0; i < n; i++) {
        char usage[96];
        snprintf(usage, sizeof usage, "%s%s%s", q[i].name, q[i].args[0] ? " " : "", q[i].args);
        printf("  %-30s %s\n", usage, q[i].summary);
    }
}

int ql_cmd_query(int argc, char **argv)
{
    const char *db = QL_STORE_DEFAULT_PATH;
    const char *pos[8];
    int npos = 0;
    ql_query_format fmt = QL_QUERY_TABLE;
    bool want_list = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help();
            return QL_EXIT_OK;
        } else if (strcmp(a, "--list") == 0) {
            want_list = true;
        } else if (strcmp(a, "--db") == 0) {
            if (++i >= argc)
                return ql_cli_usage("query", "--db needs a path");
            db = argv[i];
        } else if (strcmp(a, "--csv") == 0) {
            fmt = QL_QUERY_CSV;
        } else if (strcmp(a, "--json") == 0) {
            fmt = QL_QUERY_JSON;
        } else if (strcmp(a, "--md") == 0) {
            fmt = QL_QUERY_MD;
        } else if (a[0] == '-' && a[1] == '-' && a[2] >= 'a' && a[2] <= 'z') {
            /* Not "-- comment" SQL: an option qlab does not know. */
            return ql_cli_usage("query", "unknown option '%s'", a);
        } else {
            if (npos == (int)(sizeof pos / sizeof pos[0]))
                return ql_cli_usage("query", "too many arguments");
            pos[npos++] = a;
        }
    }
    if (want_list) {
        list();
        return QL_EXIT_OK;
    }
    if (npos == 0)
        return ql_cli_usage("query", "missing the SQL statement or query NAME");

    const char *sql = pos[0];
    const char *const *params = NULL;
    int n_params = 0;
    const ql_named_query *nq = ql_named_query_find(pos[0]);
    if (nq) {
        if (npos - 1 != nq->n_params)
            return ql_cli_usage("query", "'%s' takes %d argument%s%s%s, got %d", nq->name,
                                nq->n_params, nq->n_params == 1 ? "" : "s",
                                nq->n_params ? ": " : "", nq->args, npos - 1);
        if (strcmp(nq->name, "tensors") == 0 && strlen(pos[1]) < 4)
            return ql_cli_usage("query", "tensors: give at least 4 hex digits of the config hash "
                                         "(see 'qlab query configs')");
        sql = nq->sql;
        params = pos + 1;
        n_params = nq->n_params;
    } else if (npos > 1) {
        return ql_cli_usage("query",
                            "one SQL statement (quote it) or a query NAME; '%s' is not "
                            "a named query (see --list)",
                            pos[0]);
    }

    ql_error err;
    ql_error_clear(&err);
    ql_store *s;
    ql_store_options opt = {.readonly = true};
    if (ql_store_open(db, &opt, &s, &err) != QL_OK)
        return ql_cli_fail(&err);
    ql_status st = ql_query_print(s, sql, params, n_params, fmt, stdout, &err);
    ql_store_close(s);
    if (st == QL_OK && fflush(stdout) != 0)
        st = ql_error_set(&err, QL_EIO, "writing the query output failed");
    return st == QL_OK ? QL_EXIT_OK : ql_cli_fail(&err);
}
