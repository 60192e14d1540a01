/* Read-only queries: the four output formats on the fixture database (exact
 * text), NULL handling, refusal of anything that writes, and the named queries. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qltest.h"
#include "results/query.h"
#include "results/store.h"
#include "store_fixture.h"

static ql_store *store;

/* Runs sql in fmt and returns the output (caller frees), or NULL on error (msg in err). */
static char *run(const char *sql, ql_query_format fmt, ql_error *err)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    ql_status st = ql_query_print(store, sql, NULL, 0, fmt, f, err);
    fclose(f);
    if (st != QL_OK) {
        free(text);
        return NULL;
    }
    return text;
}

static void check_output(const char *sql, ql_query_format fmt, const char *want)
{
    ql_error err;
    ql_error_clear(&err);
    char *got = run(sql, fmt, &err);
    CHECK_MSG(got != NULL, "%s: %s", sql, err.msg);
    if (got)
        CHECK_MSG(strcmp(got, want) == 0, "%s\n--- got ---\n%s--- expected ---\n%s", sql, got,
                  want);
    free(got);
}

static void check_failed(const char *sql, ql_query_format fmt, const char *fragment)
{
    ql_error err;
    ql_error_clear(&err);
    char *got = run(sql, fmt, &err);
    CHECK_MSG(got == NULL, "'%s' did not fail", sql);
    free(got);
    CHECK_MSG(strstr(err.msg, fragment) != NULL, "'%s': message '%s' lacks '%s'", sql, err.msg,
              fragment);
}

static void check_refused(const char *sql, const char *fragment)
{
    check_failed(sql, QL_QUERY_TABLE, fragment);
}

static const char results_sql[] =
    "SELECT weight_type, bpw, ppl, zlib_bytes, kld_mean FROM results ORDER BY bpw";

static void test_formats(void)
{
    check_output(results_sql, QL_QUERY_TABLE,
                 "weight_type  bpw     ppl  zlib_bytes         kld_mean\n"
                 "-----------  ---  ------  ----------  ---------------\n"
                 "Q4_0         4.5   12.25        NULL           0.0625\n"
                 "Q8_0         8.5    10.5        1000      0.001953125\n"
                 "F16           16  10.125        NULL  0.0001220703125\n"
                 "(3 rows)\n");
    check_output(results_sql, QL_QUERY_CSV,
                 "weight_type,bpw,ppl,zlib_bytes,kld_mean\n"
                 "Q4_0,4.5,12.25,,0.0625\n"
                 "Q8_0,8.5,10.5,1000,0.001953125\n"
                 "F16,16,10.125,,0.0001220703125\n");
    check_output(results_sql, QL_QUERY_JSON,
                 "[\n"
                 "{\"weight_type\": \"Q4_0\", \"bpw\": 4.5, \"ppl\": 12.25, \"zlib_bytes\": null, "
                 "\"kld_mean\": 0.0625},\n"
                 "{\"weight_type\": \"Q8_0\", \"bpw\": 8.5, \"ppl\": 10.5, \"zlib_bytes\": 1000, "
                 "\"kld_mean\": 0.001953125},\n"
                 "{\"weight_type\": \"F16\", \"bpw\": 16.0, \"ppl\": 10.125, \"zlib_bytes\": null, "
                 "\"kld_mean\": 0.0001220703125}\n"
                 "]\n");
    check_output(results_sql, QL_QUERY_MD,
                 "| weight_type | bpw |    ppl | zlib_bytes |        kld_mean |\n"
                 "|-------------|----:|-------:|-----------:|----------------:|\n"
                 "| Q4_0        | 4.5 |  12.25 |            |          0.0625 |\n"
                 "| Q8_0        | 8.5 |   10.5 |       1000 |     0.001953125 |\n"
                 "| F16         |  16 | 10.125 |            | 0.0001220703125 |\n");

    /* Text that needs quoting or escaping. */
    const char *err_sql = "SELECT run_id, error FROM failed_runs";
    check_output(err_sql, QL_QUERY_CSV,
                 "run_id,error\n4,\"quantize: IQ4_NL is \"\"not implemented\"\", see a|b\"\n");
    check_output(err_sql, QL_QUERY_JSON,
                 "[\n{\"run_id\": 4, \"error\": \"quantize: IQ4_NL is \\\"not implemented\\\", "
                 "see a|b\"}\n]\n");
    check_output(err_sql, QL_QUERY_MD,
                 "| run_id | error                                           |\n"
                 "|-------:|-------------------------------------------------|\n"
                 "|      4 | quantize: IQ4_NL is \"not implemented\", see a\\|b |\n");
    check_output("SELECT 'a\nb' AS x, 1 AS y", QL_QUERY_TABLE, "x    y\n---  -\na b  1\n(1 row)\n");
    /* Markdown follows the same line-break rule (ql_table_write_md). */
    check_output("SELECT 'a\nb|c' AS x, 1 AS y", QL_QUERY_MD,
                 "| x      |   y |\n|--------|----:|\n| a b\\|c |   1 |\n");

    /* Reals read back exactly in every format; infinities and blobs are spelled out. */
    check_output("SELECT 0.1 AS a, 1.0 / 3 AS b, 1e400 AS c, x'00ff' AS d", QL_QUERY_JSON,
                 "[\n{\"a\": 0.1, \"b\": 0.3333333333333333, \"c\": \"inf\", \"d\": "
                 "\"x'00ff'\"}\n]\n");
    check_output("SELECT 0.1 AS a, 1.0 / 3 AS b, 1e400 AS c, x'00ff' AS d", QL_QUERY_CSV,
                 "a,b,c,d\n0.1,0.3333333333333333,inf,x'00ff'\n");
    /* All 17 digits when fewer do not read back. */
    check_output("SELECT 0.1 + 0.2 AS a", QL_QUERY_JSON, "[\n{\"a\": 0.30000000000000004}\n]\n");
    check_output("SELECT 0.1 + 0.2 AS a", QL_QUERY_CSV, "a\n0.30000000000000004\n");

    /* Empty results. */
    check_output("SELECT 1 AS one WHERE 0", QL_QUERY_TABLE, "one\n---\n(0 rows)\n");
    check_output("SELECT 1 AS one WHERE 0", QL_QUERY_JSON, "[]\n");
    check_output("SELECT 1 AS one WHERE 0", QL_QUERY_CSV, "one\n");
    check_output("SELECT 1 AS one WHERE 0", QL_QUERY_MD, "| one |\n|-----|\n");

    /* JSON needs UTF-8: a bad value names its row and column, a bad column name
     * fails before any row. */
    check_failed("SELECT 1 AS n UNION ALL SELECT CAST(x'ff' AS TEXT)", QL_QUERY_JSON,
                 "row 2, column 'n': cannot encode as JSON");
    check_failed("SELECT 1 AS \"a\xff\" WHERE 0", QL_QUERY_JSON,
                 "column 1: cannot encode its name");
}

static void test_refusals(void)
{
    const char *ro = "only read-only statements";
    check_refused("INSERT INTO configs (hash, canonical) VALUES ('x', 'y')", ro);
    check_refused("UPDATE runs SET status = 'done'", ro);
    check_refused("DELETE FROM metrics", ro);
    check_refused("DROP VIEW results", ro);
    check_refused("CREATE TABLE t (x)", ro);
    check_refused("PRAGMA user_version = 7", ro);
    check_refused("WITH x AS (SELECT 1) INSERT INTO sweep_runs SELECT 'a', 1 FROM x", ro);
    check_refused("ATTACH 'other.db' AS o", "not authorized");
    check_refused("SELECT 1; DELETE FROM metrics", "one statement at a time");
    check_refused("", "no SQL statement");
    check_refused("SELEC 1", "syntax error");
    check_refused("SELECT nope FROM results", "no such column: nope");
    /* Trailing comments and semicolons are fine. */
    check_output("SELECT 2 AS two; -- done\n", QL_QUERY_CSV, "two\n2\n");
    /* Nothing changed. */
    check_output("SELECT count(*) AS n FROM metrics", QL_QUERY_CSV, "n\n3\n");
}

static void test_named(void)
{
    const ql_named_query *nq;
    size_t n = ql_named_queries(&nq);
    CHECK(n >= 5);
    CHECK(ql_named_query_find("formats") != NULL && ql_named_query_find("nope") == NULL);
    for (size_t i = 0; i < n; i++) {
        const char *params[1] = {"8800"};
        FILE *f = fopen("/dev/null", "w");
        ql_error err;
        CHECK_OK(ql_query_print(store, nq[i].sql, params, nq[i].n_params, QL_QUERY_TABLE, f, &err),
                 &err);
        fclose(f);
    }
    /* formats: sorted by bpw. */
    const ql_named_query *formats = ql_named_query_find("formats");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ql_error err;
    CHECK_OK(ql_query_print(store, formats->sql, NULL, 0, QL_QUERY_CSV, f, &err), &err);
    fclose(f);
    const char *q4 = strstr(text, ",Q4_0,"), *q8 = strstr(text, ",Q8_0,"),
               *f16 = strstr(text, ",F16,");
    CHECK(q4 && q8 && f16 && q4 < q8 && q8 < f16);
    CHECK(strstr(text, "IQ4_NL") == NULL);               /* failed runs are not results */
    CHECK(strstr(text, ",bpw,bpw_body,bytes,") != NULL); /* bpw with and without head/embd */
    free(text);

    /* tensors: by hash prefix (the pinned Q4_0 hash starts 88005179). */
    const ql_named_query *tensors = ql_named_query_find("tensors");
    const char *params[1] = {"88005179"};
    text = NULL;
    f = open_memstream(&text, &len);
    CHECK_OK(ql_query_print(store, tensors->sql, params, 1, QL_QUERY_CSV, f, &err), &err);
    fclose(f);
    CHECK_MSG(strstr(text, "88005179d5a5,fake-model,fake-text,blk.0.ffn_down.weight,0,Q4_K,Q5_0,"
                           "row length 172 is not a multiple of 256,64,172,700,") != NULL,
              "%s", text);
    int lines = 0;
    for (const char *p = text; *p; p++)
        lines += *p == '\n';
    CHECK_EQ_INT(lines, 4); /* header + 3 tensors */
    free(text);
}

/* A store failure at any SQLite call of a query (prepare, bind, each step), in
 * every output format: a clear error and nothing written, until it gets through
 * with the output of a query without faults. */
static void test_faults(void)
{
    const ql_named_query *tensors = ql_named_query_find("tensors");
    const char *params[1] = {"8800"};
    static const ql_query_format fmts[] = {QL_QUERY_TABLE, QL_QUERY_CSV, QL_QUERY_JSON,
                                           QL_QUERY_MD};
    for (size_t k = 0; k < sizeof fmts / sizeof fmts[0]; k++) {
        ql_error err;
        char *want = NULL, *got = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&want, &len);
        CHECK_OK(ql_query_print(store, tensors->sql, params, 1, fmts[k], f, &err), &err);
        fclose(f);
        int failures = 0;
        for (int n = 1; n < 100; n++) {
            f = open_memstream(&got, &len);
            ql_store_inject_fault(store, n);
            ql_status st = ql_query_print(store, tensors->sql, params, 1, fmts[k], f, &err);
            ql_store_inject_fault(store, 0);
            fclose(f);
            if (st == QL_OK) {
                CHECK_MSG(strcmp(got, want) == 0, "format %zu after %d faults: %s", k, failures,
                          got);
                free(got);
                break;
            }
            failures++;
            CHECK_MSG(st == QL_EDB && strstr(err.msg, ": query") &&
                          strstr(err.msg, "injected fault"),
                      "fault %d: status %d: %s", n, (int)st, err.msg);
            CHECK_MSG(len == 0, "fault %d: %zu bytes written: %s", n, len, got);
            free(got);
        }
        /* prepare, bind, a step per row (3 tensors) and the last one. */
        CHECK_MSG(failures >= 6, "format %zu: only %d calls could fail", k, failures);
        free(want);
    }
}

/* Parameters keep their type: an integer binds as an integer, text as text. */
static void test_bind(void)
{
    ql_error err;
    ql_error_clear(&err);
    ql_query *q = NULL;
    CHECK_OK(ql_query_prepare(store, "SELECT ?1 + 1 AS n, typeof(?1), typeof(?2)", &q, &err), &err);
    if (!q)
        return;
    const int64_t big = (int64_t)1 << 53;
    CHECK_OK(ql_query_bind_int64(q, 1, big + 1, &err), &err);
    CHECK_OK(ql_query_bind_text(q, 2, "7", &err), &err);
    CHECK(ql_query_bind_int64(q, 3, 1, &err) == QL_EINVAL &&
          strstr(err.msg, "parameter 3: column index out of range"));
    bool row = false;
    CHECK_OK(ql_query_step(q, &row, &err), &err);
    CHECK(row);
    /* 2^53 + 2 needs every bit of an int64: no detour through a double. */
    CHECK(ql_query_int(q, 0) == big + 2);
    CHECK(strcmp(ql_query_text(q, 1), "integer") == 0 && strcmp(ql_query_text(q, 2), "text") == 0);
    ql_query_free(q);
}

int main(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/query.db", qlt_tmpdir());
    unlink(path);
    ql_error err;
    CHECK_OK(qlt_store_fixture(path, &err), &err);
    /* Read-write on purpose: the statement check alone must refuse writes. */
    CHECK_OK(ql_store_open(path, NULL, &store, &err), &err);
    if (!store)
        return qlt_done();
    test_formats();
    test_refusals();
    test_named();
    test_faults();
    test_bind();
    ql_store_close(store);
    return qlt_done();
}
