/* qlab query: read-only SQL (or a named query) on the results store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "results/query.h"
#include "results/store.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab query [--db PATH] [--csv|--json|--md] \"SQL\"\n"
           "       qlab query [--db PATH] [--csv|--json|--md] NAME [ARG]\n"
           "       qlab query --list\n"
           "\n"
           "Runs one read-only SQL statement (or a named query) on the results database\n"
           "and prints the rows. The database is opened read-only; statements that would\n"
           "write are refused. A statement that starts with '-' (an SQL comment) goes\n"
           "after '--', which ends the options.\n"
           "\n");
    ql_opt_print_options(stdout, p);
    printf("\n"
           "The default output is an aligned text table (NULL shown as NULL). Views:\n"
           "results (one row per finished run), sweep_results, run_log, failed_runs,\n"
           "tensor_results, chunk_results; tables: models, datasets, configs, runs,\n"
           "sweep_runs, metrics, tensor_errors, chunk_metrics, act_roundings.\n");
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

/* The rows on standard output. On a terminal the text passes through
 * ql_fwrite_terminal, so that control characters stored in the database (a tensor
 * name or error text taken from a hostile file) are shown, not obeyed; into a file or
 * a pipe every format keeps its bytes exactly. */
static ql_status print_rows(ql_store *s, const char *sql, const char *const *params, int n_params,
                            ql_query_format fmt, ql_error *err)
{
    if (!isatty(fileno(stdout)))
        return ql_query_print(s, sql, params, n_params, fmt, stdout, err);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem)
        return ql_error_set(err, QL_ENOMEM, "query: out of memory");
    ql_status st = ql_query_print(s, sql, params, n_params, fmt, mem, err);
    if (fclose(mem) != 0 && st == QL_OK)
        st = ql_error_set(err, QL_ENOMEM, "query: out of memory for the output");
    if (st == QL_OK)
        ql_fwrite_terminal(stdout, text, len);
    free(text);
    return st;
}

int ql_cmd_query(int argc, char **argv)
{
    const char *db = QL_STORE_DEFAULT_PATH;
    const char *pos[8];
    int fmt_code = QL_QUERY_TABLE;
    bool want_list = false;
    const ql_opt opts[] = {
        ql_opt_str("db", 0, &db, "PATH", "results database (default " QL_STORE_DEFAULT_PATH ")"),
        ql_opt_set("csv", 0, &fmt_code, QL_QUERY_CSV,
                   "comma-separated values with a header row (NULL = empty field)"),
        ql_opt_set("json", 0, &fmt_code, QL_QUERY_JSON,
                   "an array of objects, one per row (NULL = null)"),
        ql_opt_set("md", 0, &fmt_code, QL_QUERY_MD, "a Markdown table (NULL = empty cell)"),
        ql_opt_flag("list", 0, &want_list, "list the named queries"),
    };
    ql_opt_parser p = {.prog = "qlab query",
                       .opts = opts,
                       .n_opts = QL_OPT_COUNT(opts),
                       .args = pos,
                       .max_args = QL_OPT_COUNT(pos),
                       .help = help};
    const int prc = ql_opt_parse(&p, argc, argv);
    if (prc != QL_OPT_GO_ON)
        return prc;
    const ql_query_format fmt = (ql_query_format)fmt_code;
    const int npos = (int)p.n_args;
    if (want_list) {
        list();
        return QL_EXIT_OK;
    }
    if (npos == 0)
        return ql_opt_usage(&p, "missing the SQL statement or query NAME");

    const char *sql = pos[0];
    const char *const *params = NULL;
    int n_params = 0;
    const ql_named_query *nq = ql_named_query_find(pos[0]);
    if (nq) {
        if (npos - 1 != nq->n_params)
            return ql_opt_usage(&p, "'%s' takes %d argument%s%s%s, got %d", nq->name, nq->n_params,
                                nq->n_params == 1 ? "" : "s", nq->n_params ? ": " : "", nq->args,
                                npos - 1);
        if (strcmp(nq->name, "tensors") == 0 && strlen(pos[1]) < 4)
            return ql_opt_usage(&p, "tensors: give at least 4 hex digits of the config hash "
                                    "(see 'qlab query configs')");
        sql = nq->sql;
        params = pos + 1;
        n_params = nq->n_params;
    } else if (npos > 1) {
        return ql_opt_usage(&p,
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
    ql_status st = print_rows(s, sql, params, n_params, fmt, &err);
    ql_store_close(s);
    if (st == QL_OK && fflush(stdout) != 0)
        st = ql_error_set(&err, QL_EIO, "writing the query output failed");
    return st == QL_OK ? QL_EXIT_OK : ql_cli_fail(&err);
}
