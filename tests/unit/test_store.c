/* The results store: schema and pragmas, upserts, a run's round trip with NaN
 * stored as NULL, the skip and retry logic, refusal of foreign or newer
 * databases, and fault injection: a failure at any SQLite call while finishing
 * (or starting) a run leaves the database exactly as before. */
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "experiment/config.h"
#include "formats/types.h"
#include "qltest.h"
#include "results/store.h"
#include "store_fixture.h"

/* First column of the first row as text, into a static buffer ("<none>" when no row). */
static const char *qtext(sqlite3 *db, const char *sql)
{
    static char buf[1024];
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        snprintf(buf, sizeof buf, "%s", t ? (const char *)t : "<null>");
    } else {
        snprintf(buf, sizeof buf, "<none>");
    }
    sqlite3_finalize(st);
    return buf;
}

typedef struct {
    ql_store *s;
    int64_t model, text;
} env;

static void env_open(env *e, const char *path)
{
    ql_error err;
    e->s = NULL;
    CHECK_OK(ql_store_open(path, NULL, &e->s, &err), &err);
    if (!e->s)
        exit(1);
    qlt_store_add_inputs(e->s, &e->model, &e->text);
}

static int64_t config_id(env *e, const char *canon)
{
    ql_config c;
    ql_error err;
    int64_t id = 0;
    CHECK_OK(ql_config_from_string(canon, &c, &err), &err);
    CHECK_OK(ql_store_upsert_config(e->s, &c, &id, &err), &err);
    return id;
}

static int64_t begin_run(env *e, const char *canon, int metrics_version)
{
    ql_store_run_key key = {config_id(e, canon), e->model, e->text, 128, 4};
    ql_store_run_info info = {"test", 2, metrics_version, NULL, NULL, 0, 0};
    ql_error err;
    int64_t run = 0;
    CHECK_OK(ql_store_begin_run(e->s, &key, &info, &run, &err), &err);
    return run;
}

static void some_metrics(ql_run_metrics *m)
{
    ql_run_metrics_init(m);
    m->ppl = 10.5;
    m->ppl_err = 0.25;
    m->kld_mean = 0.001953125;
    m->top1_agree = 0.875;
    m->n_tokens = 252;
    m->bytes = 4352;
    m->bpw = 8.5;
}

/* ---------------------------------------------------------------- tests */

static void test_schema(void)
{
    const char *path = qlt_tmp_db("schema.db");
    ql_store *s;
    ql_error err;
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    sqlite3 *db = ql_store_handle(s);
    CHECK_EQ_INT(qlt_sql_int(db, "PRAGMA user_version"), QL_STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(qlt_sql_int(db, "PRAGMA application_id"), 0x716c6162);
    CHECK_EQ_INT(qlt_sql_int(db, "PRAGMA foreign_keys"), 1);
    CHECK(strcmp(qtext(db, "PRAGMA journal_mode"), "wal") == 0);
    CHECK(qlt_sql_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'") >= 7);
    CHECK_EQ_INT(qlt_sql_int(db,
                             "SELECT count(*) FROM sqlite_master WHERE type = 'view' AND name IN "
                             "('results', 'sweep_results', 'run_log', 'failed_runs', "
                             "'tensor_results')"),
                 5);

    /* The two results views have the same columns, none of them twice. */
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM pragma_table_info('results') a JOIN "
                                 "pragma_table_info('sweep_results') b ON a.cid = b.cid AND "
                                 "a.name = b.name"),
                 qlt_sql_int(db, "SELECT count(*) FROM pragma_table_info('sweep_results')"));
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(DISTINCT name) = count(*) FROM "
                                 "pragma_table_info('sweep_results')"),
                 1);
    CHECK(qlt_sql_int(db, "SELECT count(*) FROM pragma_table_info('results')") > 50);

    /* The metric columns of the C struct are exactly the table's, in order. */
    const char *const *names;
    size_t n = ql_store_metric_columns(&names);
    sqlite3_stmt *st;
    CHECK(sqlite3_prepare_v2(db,
                             "SELECT name FROM pragma_table_info('metrics') WHERE cid > 0 "
                             "ORDER BY cid",
                             -1, &st, NULL) == SQLITE_OK);
    size_t i = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *col = (const char *)sqlite3_column_text(st, 0);
        CHECK_MSG(i < n && strcmp(col, names[i]) == 0, "metrics column %zu is %s", i, col);
        i++;
    }
    sqlite3_finalize(st);
    CHECK_EQ_INT(i, n);
    ql_store_close(s);

    /* Reopening an up-to-date database changes nothing. */
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    CHECK_EQ_INT(qlt_sql_int(ql_store_handle(s), "PRAGMA user_version"), QL_STORE_SCHEMA_VERSION);
    ql_store_close(s);
    ql_store_close(NULL);
}

/* A query's rows as one string (caller frees): columns joined by ' ', rows by '\n'. */
static char *rows_text(sqlite3 *db, const char *sql, const char *param)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    sqlite3_stmt *st = NULL;
    CHECK_MSG(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s: %s", sql,
              sqlite3_errmsg(db));
    if (param)
        sqlite3_bind_text(st, 1, param, -1, SQLITE_TRANSIENT);
    while (st && sqlite3_step(st) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(st); c++) {
            const unsigned char *t = sqlite3_column_text(st, c);
            fprintf(f, "%s%s", c ? " " : "", t ? (const char *)t : "NULL");
        }
        fputc('\n', f);
    }
    sqlite3_finalize(st);
    fclose(f);
    return text;
}

/* How SQLite sees a table: every column's name, type, NOT NULL, default and key, by
 * name (a migration appends the columns it adds, a fresh table has them in list
 * order). */
static char *table_shape(sqlite3 *db, const char *table)
{
    return rows_text(db,
                     "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1)"
                     " ORDER BY name",
                     table);
}

/* What the metric and axis lists promise the store, and the tables and views it
 * derives from them. */
static void test_declarations(void)
{
    const ql_metric_info *mi;
    size_t nm = ql_metrics(&mi);
    CHECK_EQ_INT(nm, QL_N_METRICS);
    for (size_t i = 0; i < nm; i++) {
        CHECK(ql_metric_find(mi[i].name) == &mi[i]);
        CHECK(ql_metric_get((ql_metric_id)i) == &mi[i]);
        CHECK_MSG(!mi[i].label || mi[i].pos > 0, "%s: a column without a place", mi[i].name);
        CHECK_MSG((mi[i].kind == QL_METRIC_KIND_DERIVED) == (mi[i].sql != NULL), "%s", mi[i].name);
        for (size_t j = i + 1; j < nm; j++)
            CHECK_MSG(mi[i].pos <= 0 || mi[i].pos != mi[j].pos, "%s and %s share place %d",
                      mi[i].name, mi[j].name, mi[i].pos);
        if (mi[i].flags & QL_METRIC_PM) {
            char name[96];
            snprintf(name, sizeof name, "%s_err", mi[i].name);
            CHECK_MSG(ql_metric_find(name) != NULL, "%s is shown with ± but has no %s", mi[i].name,
                      name);
        }
    }
    char buf[64];
    ql_metric_format(QL_METRIC_bpw, 6.7281, buf, sizeof buf);
    CHECK(strcmp(buf, "6.728") == 0);
    ql_metric_format(QL_METRIC_top1_agree, 0.83125, buf, sizeof buf);
    CHECK(strcmp(buf, "83.12") == 0 || strcmp(buf, "83.13") == 0);
    ql_metric_format(QL_METRIC_bytes, 246241.0, buf, sizeof buf);
    CHECK_MSG(strcmp(buf, "240.47 KiB") == 0, "%s", buf);
    ql_metric_format(QL_METRIC_d_ppl, 0.6007, buf, sizeof buf);
    CHECK(strcmp(buf, "+0.6007") == 0);
    ql_metric_format(QL_METRIC_ppl, (double)NAN, buf, sizeof buf);
    CHECK(buf[0] == '\0');
    ql_metric_id order[QL_N_METRICS];
    size_t nr = ql_metrics_reported(order);
    for (size_t k = 1; k < nr; k++)
        CHECK(ql_metric_get(order[k - 1])->pos < ql_metric_get(order[k])->pos);

    /* A fresh store: every declared table with its declared columns; the results view
     * with every axis and every metric (derived ones too), in list order. */
    const char *path = qlt_tmp_db("declared.db");
    ql_store *s;
    ql_error err;
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    if (!s)
        return;
    sqlite3 *db = ql_store_handle(s);
    const ql_store_table *t;
    size_t nt = ql_store_tables(&t);
    CHECK(nt >= 9);
    for (size_t i = 0; i < nt; i++) {
        ql_store_column cols[QL_STORE_COLUMN_MAX];
        size_t nc = ql_store_columns(&t[i], cols);
        char *want = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&want, &len);
        for (size_t c = 0; c < nc; c++)
            fprintf(f, "%s\n", cols[c].name);
        fclose(f);
        char *got = rows_text(db, "SELECT name FROM pragma_table_info(?1) ORDER BY cid", t[i].name);
        CHECK_MSG(strcmp(got, want) == 0, "%s: columns\n%s, declared\n%s", t[i].name, got, want);
        free(got);
        free(want);
    }
    char *cols = rows_text(db, "SELECT name FROM pragma_table_info('results') ORDER BY cid", NULL);
    const char *at = cols;
    for (int a = 0; a < QL_AXIS_COUNT && at; a++) {
        char line[96];
        snprintf(line, sizeof line, "\n%s\n", ql_axis_name((ql_axis)a));
        at = strstr(at, line);
        CHECK_MSG(at, "results has no column %s after the axes before it", line + 1);
    }
    for (size_t i = 0; i < nm && at; i++) {
        char line[96];
        snprintf(line, sizeof line, "\n%s\n", mi[i].name);
        at = strstr(at, line);
        CHECK_MSG(at, "results has no column %s after the metrics before it", mi[i].name);
    }
    free(cols);
    CHECK(qlt_sql_int(db, "SELECT count(*) FROM pragma_table_info('configs') WHERE name = "
                          "'budget_bytes'") == 1);
    ql_store_close(s);
}

/* tests/data/store/schema.sql: every statement of a new store's schema as SQLite keeps it
 * in sqlite_master, in creation order (what `sqlite3 store.db .schema` prints, less the
 * column lists it adds to views). The SQL is built from the declarations; a change to it
 * (a new column, a constraint, a view) is a schema change and shows here: after bumping
 * QL_STORE_SCHEMA_VERSION, regenerate the file from a new store with
 * sqlite3 new.db "SELECT sql || ';' FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid" */
static void test_schema_text(void)
{
    const char *path = qlt_tmp_db("schema-text.db");
    ql_store *s;
    ql_error err;
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    char *have = rows_text(ql_store_handle(s),
                           "SELECT sql || ';' FROM sqlite_master WHERE sql IS NOT NULL"
                           " ORDER BY rowid",
                           NULL);
    ql_store_close(s);
    size_t len;
    char *want = qlt_read_file(qlt_source("tests/data/store/schema.sql"), &len);
    CHECK_MSG(strlen(have) == len && memcmp(have, want, len) == 0,
              "the schema of a new store differs from tests/data/store/schema.sql; "
              "the store makes:\n%s",
              have);
    free(have);
    free(want);
}

/* tests/data/store/v3-fixture.sql: a database qlab wrote before the schema was
 * derived from the declarations, at schema version 3. A read-only open refuses it
 * (it lacks what versions 4 to 7 added) and says how to migrate; a read-write open
 * adds it (the configs' tensor_types with its default, tensor_errors.choice, the new
 * metrics, layer_metrics), leaves the rest of its tables alone and brings its views up to
 * date, once; its configs keep their hashes and its runs read as before, the new
 * metrics NULL. */
static void test_v3_database(void)
{
    const char *path = qlt_tmp_db("v3.db"), *fresh = qlt_tmp_db("fresh.db");
    if (!qlt_dump_fixture(path, "v3-fixture.sql"))
        return;
    ql_store *s = NULL, *f = NULL;
    ql_error err;
    ql_store_options ro = {.readonly = true};
    CHECK(ql_store_open(path, &ro, &s, &err) == QL_EDB);
    char older[64];
    snprintf(older, sizeof older, "schema version 3 is older than %d", QL_STORE_SCHEMA_VERSION);
    CHECK_MSG(strstr(err.msg, older) && strstr(err.msg, "open it once read-write"), "%s", err.msg);

    CHECK_OK(ql_store_open(fresh, NULL, &f, &err), &err);
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    if (!s || !f)
        return;
    sqlite3 *old = ql_store_handle(s), *now = ql_store_handle(f);
    CHECK_EQ_INT(qlt_sql_int(old, "PRAGMA user_version"), QL_STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(qlt_sql_int(old, "SELECT count(*) FROM results"), 3);
    CHECK_EQ_INT(qlt_sql_int(old, "SELECT count(*) FROM configs WHERE tensor_types = 'none'"),
                 qlt_sql_int(old, "SELECT count(*) FROM configs"));
    CHECK(qlt_sql_int(old, "SELECT count(*) FROM tensor_errors") > 0);
    CHECK_EQ_INT(qlt_sql_int(old, "SELECT count(*) FROM tensor_errors WHERE choice IS NOT NULL"),
                 0);
    CHECK_EQ_INT(qlt_sql_int(old, "SELECT count(*) FROM results WHERE kld_mean IS NOT NULL"), 3);
    CHECK_EQ_INT(qlt_sql_int(old, "SELECT count(*) FROM results WHERE rkld_mean IS NULL"), 3);
    const ql_store_table *t;
    size_t nt = ql_store_tables(&t);
    for (size_t i = 0; i < nt; i++) {
        char *a = table_shape(old, t[i].name), *b = table_shape(now, t[i].name);
        CHECK_MSG(*a && strcmp(a, b) == 0, "%s:\n%sdeclared:\n%s", t[i].name, a, b);
        free(a);
        free(b);
    }
    /* Version 6's constraints: the runs table holds them (and not version 1's), and a run
     * can be interrupted (with its reason, never without). */
    static const char runs_sql[] = "SELECT sql FROM sqlite_master WHERE name = 'runs'";
    char *ra = rows_text(old, runs_sql, NULL);
    CHECK_MSG(
        strstr(ra, "'failed', 'interrupted'))") &&
            strstr(ra, "CHECK ((status IN ('failed', 'interrupted')) = (error IS NOT NULL))") &&
            !strstr(ra, "CHECK ((status = 'failed')"),
        "runs:\n%s", ra);
    free(ra);
    CHECK(sqlite3_exec(old, "UPDATE runs SET status = 'interrupted' WHERE status = 'done'", NULL,
                       NULL, NULL) != SQLITE_OK);
    CHECK(sqlite3_exec(old,
                       "SAVEPOINT x; UPDATE runs SET status = 'interrupted', error = 'SIGINT'"
                       " WHERE status = 'done'; ROLLBACK TO x; RELEASE x",
                       NULL, NULL, NULL) == SQLITE_OK);
    CHECK_EQ_INT(qlt_sql_int(old, "PRAGMA integrity_check = 1"), 0);
    static const char objects[] =
        "SELECT type, name, tbl_name, type = 'view' AND sql IS NOT NULL FROM sqlite_master"
        " WHERE type IN ('index', 'view') ORDER BY name";
    static const char views[] =
        "SELECT name, sql FROM sqlite_master WHERE type = 'view' ORDER BY name";
    char *a = rows_text(old, objects, NULL), *b = rows_text(now, objects, NULL);
    CHECK_MSG(strcmp(a, b) == 0, "indexes and views:\n%s\ndeclared:\n%s", a, b);
    free(a);
    free(b);
    a = rows_text(old, views, NULL);
    b = rows_text(now, views, NULL);
    CHECK(strcmp(a, b) == 0);
    free(a);
    free(b);

    /* Every stored config reads back to its stored hash. */
    sqlite3_stmt *st;
    int n = 0;
    CHECK(sqlite3_prepare_v2(old, "SELECT hash, canonical FROM configs", -1, &st, NULL) ==
          SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        ql_config c;
        char hash[65];
        CHECK_OK(ql_config_from_string((const char *)sqlite3_column_text(st, 1), &c, &err), &err);
        ql_config_hash(&c, hash);
        CHECK(strcmp(hash, (const char *)sqlite3_column_text(st, 0)) == 0);
        n++;
    }
    sqlite3_finalize(st);
    CHECK(n >= 3);
    ql_store_close(s);
    ql_store_close(f);

    /* Up to date now: opening it again writes nothing. */
    size_t len_before, len_after;
    char *before = qlt_read_file(path, &len_before);
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    ql_store_close(s);
    char *after = qlt_read_file(path, &len_after);
    CHECK(len_before == len_after && memcmp(before, after, len_after) == 0);
    free(before);
    free(after);
}

/* A view that differs from the declarations (an older qlab's, or edited by hand) is
 * re-created by the next read-write open; read-only opens leave it. */
static void test_views_refreshed(void)
{
    const char *path = qlt_tmp_db("views.db");
    ql_store *s;
    ql_error err;
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    ql_store_close(s);
    sqlite3 *raw;
    CHECK(sqlite3_open(path, &raw) == SQLITE_OK);
    CHECK(sqlite3_exec(raw, "DROP VIEW results; CREATE VIEW results AS SELECT 1 AS x", NULL, NULL,
                       NULL) == SQLITE_OK);
    sqlite3_close(raw);
    ql_store_options ro = {.readonly = true};
    CHECK_OK(ql_store_open(path, &ro, &s, &err), &err);
    CHECK_EQ_INT(
        qlt_sql_int(ql_store_handle(s), "SELECT count(*) FROM pragma_table_info('results')"), 1);
    ql_store_close(s);
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    CHECK(qlt_sql_int(ql_store_handle(s), "SELECT count(*) FROM pragma_table_info('results')") >
          50);
    ql_store_close(s);
}

static void test_round_trip(void)
{
    const char *path = qlt_tmp_db("roundtrip.db");
    env e;
    env_open(&e, path);
    ql_error err;
    sqlite3 *db = ql_store_handle(e.s);

    /* Upserts are idempotent; known fields are filled in later, not overwritten. */
    ql_store_model m;
    ql_store_model_init(&m);
    m.sha256 = QLT_FIXTURE_MODEL_SHA;
    m.path = "elsewhere/m.gguf";
    m.arch = "llama";
    m.n_layer = 5;
    int64_t id2;
    CHECK_OK(ql_store_upsert_model(e.s, &m, &id2, &err), &err);
    CHECK_EQ_INT(id2, e.model);
    CHECK(strcmp(qtext(db, "SELECT path || ' ' || arch || ' ' || n_layer FROM models"),
                 "elsewhere/m.gguf llama 5") == 0);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM models WHERE params IS NULL"), 1);
    m.sha256 = "not-a-hash";
    CHECK(ql_store_upsert_model(e.s, &m, &id2, &err) == QL_EINVAL);
    int64_t c1 = config_id(&e, "weight_type=Q8_0"), c2 = config_id(&e, "weight_type=q8_0");
    CHECK(c1 > 0 && c1 == c2);
    CHECK(strcmp(qtext(db, "SELECT weight_type || ' ' || act_mode || ' ' || head_type || ' ' || "
                           "kv_type || ' ' || imatrix || ' ' || budget || ' ' || "
                           "coalesce(budget_bytes, 'NULL') FROM configs"),
                 "Q8_0 f32 same f32 none none NULL") == 0);

    int64_t run = begin_run(&e, "weight_type=Q8_0", 1);
    CHECK(run > 0);
    char status[16];
    CHECK_OK(ql_store_run_status(e.s, run, status, &err), &err);
    CHECK(strcmp(status, "running") == 0);

    ql_run_metrics met;
    some_metrics(&met);
    ql_tensor_record te[2] = {
        {"token_embd.weight", QL_TYPE_Q8_0, QL_TYPE_Q8_0, NULL, 512, 64, 32768, 34816, 0.0625, 0.25,
         (double)NAN, (double)NAN, -1, NULL},
        {"blk.11.ffn_down.weight", QL_TYPE_Q4_K, QL_TYPE_Q5_0, "row length 172", 64, 172, 11008,
         7568, 0.125, 0.5, 2.0, 0.015625, 3, "Q4_K_M: ffn_down of layer 11 of 12: Q4_K"},
    };
    ql_run_timing t = {.seconds = 12.5,
                       .quantize_seconds = 1.0,
                       .ref_seconds = (double)NAN,
                       .forward_seconds = 5.0,
                       .forward_alone_seconds = (double)NAN};
    CHECK_OK(ql_store_finish_run(e.s, run, &met, te, 2, &t, &err), &err);
    CHECK_OK(ql_store_run_status(e.s, run, status, &err), &err);
    CHECK(strcmp(status, "done") == 0);

    /* Measured values come back exactly; NaN became NULL, never 0. */
    CHECK(strcmp(qtext(db, "SELECT ppl || ' ' || kld_mean || ' ' || n_tokens || ' ' || "
                           "typeof(n_tokens) || ' ' || typeof(bytes) FROM metrics"),
                 "10.5 0.001953125 252 integer integer") == 0);
    CHECK_EQ_INT(qlt_sql_int(db,
                             "SELECT (ppl_ref IS NULL) + (kld_p99 IS NULL) + (zlib_bytes IS NULL) "
                             "+ (gguf_bytes IS NULL) + (rmse IS NULL) FROM metrics"),
                 5);
    CHECK_EQ_INT(
        qlt_sql_int(db, "SELECT count(*) FROM metrics WHERE ppl_ref = 0 OR zlib_bytes = 0"), 0);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT (ref_seconds IS NULL) + (seconds = 12.5) FROM runs"), 2);
    CHECK(strcmp(qtext(db, "SELECT qlab_version || ' ' || metrics_version || ' ' || threads || "
                           "' ' || sweep FROM runs"),
                 "0.1.0 1 2 test") == 0);
    /* Tensor errors: layer from the name, fallback flag and reason, NULLs. */
    CHECK(strcmp(qtext(db, "SELECT coalesce(layer, 'NULL') || ' ' || fallback || ' ' || "
                           "coalesce(imatrix_err, 'NULL') || ' ' || coalesce(outlier_cols, "
                           "'NULL') FROM tensor_errors WHERE tensor = 'token_embd.weight'"),
                 "NULL 0 NULL NULL") == 0);
    CHECK(strcmp(qtext(db, "SELECT layer || ' ' || requested_type || ' ' || used_type || ' ' || "
                           "fallback || ' ' || fallback_reason || ' ' || outlier_cols FROM "
                           "tensor_errors WHERE layer IS NOT NULL"),
                 "11 Q4_K Q5_0 1 row length 172 3") == 0);
    /* The rule behind each requested type, NULL when the record has none; the view has it. */
    CHECK(strcmp(qtext(db, "SELECT coalesce(choice, 'NULL') FROM tensor_errors ORDER BY tensor"),
                 "Q4_K_M: ffn_down of layer 11 of 12: Q4_K") == 0);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM tensor_results WHERE choice IS NULL"), 1);
    /* The views see the run. */
    CHECK_EQ_INT(
        qlt_sql_int(db, "SELECT count(*) FROM results WHERE weight_type = 'Q8_0' AND bpw = 8.5"),
        1);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM sweep_results WHERE sweep = 'test'"), 1);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM tensor_results"), 2);

    /* A finished run cannot be finished or failed again. */
    CHECK(ql_store_finish_run(e.s, run, &met, NULL, 0, NULL, &err) == QL_EINVAL);
    CHECK(ql_store_fail_run(e.s, run, "x", 1.0, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "is not running") != NULL);
    ql_store_close(e.s);
}

static void test_skip_and_retry(void)
{
    const char *path = qlt_tmp_db("skip.db");
    env e;
    env_open(&e, path);
    ql_error err;
    sqlite3 *db = ql_store_handle(e.s);
    char hash[65];
    ql_config c;
    CHECK_OK(ql_config_from_string("weight_type=Q4_0", &c, &err), &err);
    ql_config_hash(&c, hash);
    int64_t found = -1;

    /* Nothing done yet. */
    CHECK_OK(ql_store_find_done(e.s, hash, QLT_FIXTURE_MODEL_SHA, QLT_FIXTURE_TEXT_SHA, 128, 4, 1,
                                &found, &err),
             &err);
    CHECK_EQ_INT(found, 0);

    /* A failed run is recorded with its error and is not "done". */
    int64_t run = begin_run(&e, "weight_type=Q4_0", 1);
    CHECK_OK(ql_store_fail_run(e.s, run, "out of memory in quantize", 3.0, &err), &err);
    CHECK(strcmp(qtext(db, "SELECT status || ': ' || error FROM runs"),
                 "failed: out of memory in quantize") == 0);
    CHECK_OK(ql_store_find_done(e.s, hash, QLT_FIXTURE_MODEL_SHA, QLT_FIXTURE_TEXT_SHA, 128, 4, 1,
                                &found, &err),
             &err);
    CHECK_EQ_INT(found, 0);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM failed_runs"), 1);

    /* Retried: the same row, running again, error cleared, attempts counted. */
    int64_t again = begin_run(&e, "weight_type=Q4_0", 1);
    CHECK_EQ_INT(again, run);
    CHECK(strcmp(qtext(db, "SELECT status || ' ' || attempts || ' ' || coalesce(error, 'NULL') "
                           "FROM runs"),
                 "running 2 NULL") == 0);
    ql_run_metrics met;
    some_metrics(&met);
    CHECK_OK(ql_store_finish_run(e.s, run, &met, NULL, 0, NULL, &err), &err);

    /* Done: found by natural keys, so a re-run skips it... */
    CHECK_OK(ql_store_find_done(e.s, hash, QLT_FIXTURE_MODEL_SHA, QLT_FIXTURE_TEXT_SHA, 128, 4, 1,
                                &found, &err),
             &err);
    CHECK_EQ_INT(found, run);
    /* ...but not for another ctx, chunk count, text or metrics version. */
    CHECK_OK(ql_store_find_done(e.s, hash, QLT_FIXTURE_MODEL_SHA, QLT_FIXTURE_TEXT_SHA, 256, 4, 1,
                                &found, &err),
             &err);
    CHECK_EQ_INT(found, 0);
    CHECK_OK(ql_store_find_done(e.s, hash, QLT_FIXTURE_MODEL_SHA, QLT_FIXTURE_TEXT_SHA, 128, 5, 1,
                                &found, &err),
             &err);
    CHECK_EQ_INT(found, 0);
    CHECK_OK(ql_store_find_done(e.s, hash, QLT_FIXTURE_MODEL_SHA, QLT_FIXTURE_MODEL_SHA, 128, 4, 1,
                                &found, &err),
             &err);
    CHECK_EQ_INT(found, 0);
    CHECK_OK(ql_store_find_done(e.s, hash, QLT_FIXTURE_MODEL_SHA, QLT_FIXTURE_TEXT_SHA, 128, 4, 2,
                                &found, &err),
             &err);
    CHECK_EQ_INT(found, 0);

    /* Beginning a done run again is refused; a newer metrics version redoes it. */
    ql_store_run_key key = {config_id(&e, "weight_type=Q4_0"), e.model, e.text, 128, 4};
    ql_store_run_info info = {"other-sweep", 1, 1, NULL, NULL, 0, 0};
    int64_t r2 = 0;
    CHECK(ql_store_begin_run(e.s, &key, &info, &r2, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "is already done with metrics version 1") != NULL);
    CHECK_OK(ql_store_add_to_sweep(e.s, "other-sweep", run, &err), &err);
    CHECK_OK(ql_store_add_to_sweep(e.s, "other-sweep", run, &err), &err);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM sweep_results"), 2);
    info.metrics_version = 2;
    CHECK_OK(ql_store_begin_run(e.s, &key, &info, &r2, &err), &err);
    CHECK_EQ_INT(r2, run);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM metrics"), 0);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT attempts FROM runs"), 3);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM runs"), 1);
    ql_store_close(e.s);

    /* A run left 'running' by a killed process is taken over after reopening. */
    env_open(&e, path);
    int64_t r3 = begin_run(&e, "weight_type=Q4_0", 2);
    CHECK_EQ_INT(r3, run);
    CHECK_EQ_INT(qlt_sql_int(ql_store_handle(e.s), "SELECT attempts FROM runs"), 4);
    ql_store_close(e.s);
}

/* Counts that must not change when finishing run B fails. */
typedef struct {
    int64_t metrics, tensors, done, running, autocommit;
} snapshot;

static snapshot snap(ql_store *s)
{
    sqlite3 *db = ql_store_handle(s);
    snapshot p = {qlt_sql_int(db, "SELECT count(*) FROM metrics"),
                  qlt_sql_int(db, "SELECT count(*) FROM tensor_errors"),
                  qlt_sql_int(db, "SELECT count(*) FROM runs WHERE status = 'done'"),
                  qlt_sql_int(db, "SELECT count(*) FROM runs WHERE status = 'running'"),
                  sqlite3_get_autocommit(db)};
    return p;
}

static bool same(snapshot a, snapshot b)
{
    return a.metrics == b.metrics && a.tensors == b.tensors && a.done == b.done &&
           a.running == b.running && a.autocommit == b.autocommit;
}

static void test_finish_faults(void)
{
    const char *path = qlt_tmp_db("faults.db");
    env e;
    env_open(&e, path);
    ql_error err;
    ql_run_metrics met;
    some_metrics(&met);
    ql_tensor_record te[3] = {
        {"blk.0.attn_q.weight", QL_TYPE_Q4_0, QL_TYPE_Q4_0, NULL, 64, 64, 4096, 2304, 0.1, 0.2, 0.3,
         0.4, -1, NULL},
        {"blk.0.attn_k.weight", QL_TYPE_Q4_0, QL_TYPE_Q4_0, NULL, 64, 64, 4096, 2304, 0.1, 0.2, 0.3,
         0.4, -1, NULL},
        {"blk.0.ffn_up.weight", QL_TYPE_Q4_0, QL_TYPE_Q4_0, NULL, 64, 64, 4096, 2304, 0.1, 0.2, 0.3,
         0.4, -1, NULL},
    };
    /* Run A is done before the faults; it must survive every one of them. */
    int64_t a = begin_run(&e, "weight_type=Q8_0", 1);
    CHECK_OK(ql_store_finish_run(e.s, a, &met, te, 3, NULL, &err), &err);
    int64_t b = begin_run(&e, "weight_type=Q4_0", 1);
    snapshot before = snap(e.s);
    CHECK(before.metrics == 1 && before.tensors == 3 && before.running == 1);

    /* Fail the n-th SQLite call of finish_run for every n until it succeeds. */
    int failures = 0;
    for (int n = 1; n < 1000; n++) {
        ql_error_clear(&err);
        ql_store_inject_fault(e.s, n);
        ql_status st = ql_store_finish_run(e.s, b, &met, te, 3, NULL, &err);
        ql_store_inject_fault(e.s, 0);
        if (st == QL_OK)
            break;
        failures++;
        CHECK_MSG(st == QL_EDB && strstr(err.msg, "injected fault"), "fault %d: %s", n, err.msg);
        CHECK_MSG(same(snap(e.s), before), "fault %d left the database changed", n);
    }
    /* BEGIN, status, metrics (prepare, binds, step), 3 tensors, update, COMMIT. */
    CHECK_MSG(failures > 40, "only %d failure points", failures);
    printf("finish_run: %d injected faults, each rolled back\n", failures);
    snapshot after = snap(e.s);
    CHECK(after.metrics == 2 && after.tensors == 6 && after.done == 2 && after.running == 0);

    /* A constraint violation in the middle (the same tensor twice) rolls back too. */
    int64_t c = begin_run(&e, "weight_type=Q5_0", 1);
    before = snap(e.s);
    ql_tensor_record dup[3] = {te[0], te[1], te[0]};
    CHECK(ql_store_finish_run(e.s, c, &met, dup, 3, NULL, &err) == QL_EDB);
    CHECK_MSG(strstr(err.msg, "tensor 'blk.0.attn_q.weight'") &&
                  strstr(err.msg, "UNIQUE constraint failed"),
              "%s", err.msg);
    CHECK(same(snap(e.s), before));
    /* So does an invalid record: a fallback without a reason, a fractional count. */
    ql_tensor_record bad = te[1];
    bad.used_type = QL_TYPE_Q5_0;
    ql_tensor_record mix[2] = {te[0], bad};
    CHECK(ql_store_finish_run(e.s, c, &met, mix, 2, NULL, &err) == QL_EINVAL);
    CHECK(same(snap(e.s), before));
    ql_run_metrics frac = met;
    frac.bytes = 10.5;
    CHECK(ql_store_finish_run(e.s, c, &frac, te, 3, NULL, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "metric bytes = 10.5 is not a whole count") != NULL);
    CHECK(same(snap(e.s), before));
    CHECK_OK(ql_store_finish_run(e.s, c, &met, te, 3, NULL, &err), &err);

    /* begin_run and fail_run under faults: no half-created run. */
    int64_t runs_before = qlt_sql_int(ql_store_handle(e.s), "SELECT count(*) FROM runs");
    int begin_failures = 0;
    for (int n = 1; n < 1000; n++) {
        ql_store_run_key key = {config_id(&e, "weight_type=Q6_K"), e.model, e.text, 128, 4};
        ql_store_run_info info = {"faults", 1, 1, NULL, NULL, 0, 0};
        int64_t r = 0;
        ql_store_inject_fault(e.s, n);
        ql_status st = ql_store_begin_run(e.s, &key, &info, &r, &err);
        ql_store_inject_fault(e.s, 0);
        if (st == QL_OK) {
            CHECK(r > 0);
            break;
        }
        begin_failures++;
        CHECK_EQ_INT(r, 0);
        CHECK_EQ_INT(qlt_sql_int(ql_store_handle(e.s), "SELECT count(*) FROM runs"), runs_before);
        CHECK_EQ_INT(qlt_sql_int(ql_store_handle(e.s),
                                 "SELECT count(*) FROM sweep_runs WHERE sweep = "
                                 "'faults'"),
                     0);
        CHECK(sqlite3_get_autocommit(ql_store_handle(e.s)));
    }
    CHECK(begin_failures > 10);
    printf("begin_run: %d injected faults, each rolled back\n", begin_failures);
    ql_store_close(e.s);
}

static void test_open_faults(void)
{
    int failures = 0;
    for (int n = 1; n < 200; n++) {
        char name[32];
        snprintf(name, sizeof name, "open%d.db", n);
        const char *path = qlt_tmp_db(name);
        ql_store *s = NULL;
        ql_error err;
        ql_store_options opt = {.fault_after = n};
        ql_status st = ql_store_open(path, &opt, &s, &err);
        if (st == QL_OK) {
            ql_store_close(s);
            break;
        }
        failures++;
        CHECK(s == NULL);
        CHECK_MSG(strstr(err.msg, "injected fault") != NULL, "%s", err.msg);
        /* Whatever step failed, the next open completes the schema. */
        CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
        if (s) {
            CHECK_EQ_INT(qlt_sql_int(ql_store_handle(s), "PRAGMA user_version"),
                         QL_STORE_SCHEMA_VERSION);
            CHECK(qlt_sql_int(ql_store_handle(s), "SELECT count(*) FROM sqlite_master WHERE name = "
                                                  "'tensor_results'") == 1);
            ql_store_close(s);
        }
    }
    CHECK(failures >= 10);
    printf("open: %d injected faults, each recovered by the next open\n", failures);
}

/* Drops every view of a raw database (the store makes them again on open), so that
 * columns they read can be dropped to imitate an older schema. */
static void drop_views(sqlite3 *raw)
{
    char names[32][128];
    int n = 0;
    sqlite3_stmt *st;
    CHECK(sqlite3_prepare_v2(raw, "SELECT name FROM sqlite_master WHERE type = 'view'", -1, &st,
                             NULL) == SQLITE_OK);
    while (n < 32 && sqlite3_step(st) == SQLITE_ROW)
        snprintf(names[n++], sizeof names[0], "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    for (int i = 0; i < n; i++) {
        char sql[160];
        snprintf(sql, sizeof sql, "DROP VIEW \"%.128s\"", names[i]);
        CHECK(sqlite3_exec(raw, sql, NULL, NULL, NULL) == SQLITE_OK);
    }
}

/* A schema 10 database (before the calibration/evaluation overlap) gets the two overlap
 * columns, its finished runs NULL in them (not measured, not 0), its results view the
 * columns, and its runs stay done. */
static void test_v11_overlap(void)
{
    ql_error err;
    ql_store *s = NULL;
    const char *path = qlt_tmp_db("v11-overlap.db");
    env e;
    env_open(&e, path);
    s = e.s;
    const int64_t run = begin_run(&e, "weight_type=Q4_0", 1);
    ql_run_metrics m;
    some_metrics(&m);
    m.kld_mean = 0.5;
    m.calib_overlap_32 = 0.25;
    CHECK_OK(ql_store_finish_run(s, run, &m, NULL, 0, NULL, &err), &err);
    sqlite3 *h = ql_store_handle(s);
    CHECK(qlt_sql_int(h, "SELECT count(*) FROM results WHERE calib_overlap_32 = 0.25 AND"
                         " calib_overlap_8 IS NULL") == 1);
    ql_store_close(s);
    sqlite3 *raw;
    CHECK(sqlite3_open(path, &raw) == SQLITE_OK);
    drop_views(raw);
    CHECK(sqlite3_exec(raw,
                       "ALTER TABLE metrics DROP COLUMN calib_overlap_8;"
                       " ALTER TABLE metrics DROP COLUMN calib_overlap_32;"
                       " ALTER TABLE runs DROP COLUMN body_of;"
                       " ALTER TABLE runs DROP COLUMN forward_alone_seconds;"
                       " ALTER TABLE runs DROP COLUMN shared_blocks;"
                       " PRAGMA user_version = 11",
                       NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(raw);
    /* Read-only, a version 11 file is refused with the way to migrate it. */
    ql_store_options ro = {.readonly = true};
    CHECK(ql_store_open(path, &ro, &s, &err) != QL_OK);
    char older11[64];
    snprintf(older11, sizeof older11, "schema version 11 is older than %d", QL_STORE_SCHEMA_VERSION);
    CHECK(strstr(err.msg, older11) != NULL);
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    if (!s)
        return;
    h = ql_store_handle(s);
    CHECK_EQ_INT(qlt_sql_int(h, "SELECT user_version FROM pragma_user_version"),
                 QL_STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(qlt_sql_int(h, "SELECT count(*) FROM results WHERE kld_mean = 0.5 AND"
                                " calib_overlap_8 IS NULL AND calib_overlap_32 IS NULL"),
                 1);
    ql_store_close(s);
}

/* A schema 12 database (before shared bodies) gets runs.body_of and
 * forward_alone_seconds, NULL for its finished runs (each ran its own pass, not
 * measured alone), and its results view the columns; a run finished now stores both. */
static void test_v12_shared_body(void)
{
    ql_error err;
    const char *path = qlt_tmp_db("v12-shared-body.db");
    env e;
    env_open(&e, path);
    const int64_t run = begin_run(&e, "weight_type=Q4_0", 1);
    ql_run_metrics m;
    some_metrics(&m);
    CHECK_OK(ql_store_finish_run(e.s, run, &m, NULL, 0, NULL, &err), &err);
    ql_store_close(e.s);
    sqlite3 *raw;
    CHECK(sqlite3_open(path, &raw) == SQLITE_OK);
    drop_views(raw);
    CHECK(sqlite3_exec(raw,
                       "ALTER TABLE runs DROP COLUMN body_of;"
                       " ALTER TABLE runs DROP COLUMN forward_alone_seconds;"
                       " ALTER TABLE runs DROP COLUMN shared_blocks;"
                       " PRAGMA user_version = 12",
                       NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(raw);
    ql_store *s = NULL;
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    if (!s)
        return;
    sqlite3 *h = ql_store_handle(s);
    CHECK_EQ_INT(qlt_sql_int(h, "PRAGMA user_version"), QL_STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(qlt_sql_int(h, "SELECT count(*) FROM results WHERE body_of IS NULL AND"
                                " forward_alone_seconds IS NULL"),
                 1);
    /* A shared run: the body's config and the time it would have cost alone. */
    e.s = s;
    const int64_t shared = begin_run(&e, "weight_type=Q4_0 head_type=Q8_0", 1);
    ql_run_timing t;
    ql_run_timing_init(&t);
    t.forward_seconds = 0.25;
    t.forward_alone_seconds = 4.5;
    ql_run_result res = {.metrics = &m, .timing = &t, .body_of = "abc123"};
    CHECK_OK(ql_store_finish_run_result(s, shared, &res, &err), &err);
    CHECK_EQ_INT(qlt_sql_int(h, "SELECT count(*) FROM results WHERE body_of = 'abc123' AND"
                                " forward_alone_seconds = 4.5 AND quant_seconds = 0.25"),
                 1);
    ql_store_close(s);
}

/* A schema 8 database's sensitivities (before groups of tensors) become tensor rows of
 * one tensor each, found by the tensor grouping's key. */
static void test_v8_sensitivities(void)
{
    ql_error err;
    ql_store *s = NULL;
    const char *path = qlt_tmp_db("v8-sens.db");
    ql_store_sens_key key = {"m", "t", "calib", 64, 4, "none", 2, "tensor"};
    ql_store_sens_row row = {
        "blk.0.attn_q.weight", 1, 0, "attn_q", QL_TYPE_Q4_0, 2304, 0.25, 0.01, 0.125, 0.01, 1.5,
        "test-kernel"};
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    CHECK_OK(ql_store_sensitivity_put(s, &key, &row, &err), &err);
    CHECK_EQ_INT(qlt_sql_int(ql_store_handle(s), "SELECT count(*) FROM sensitivity WHERE"
                                                 " blas_kernel = 'test-kernel'"),
                 1);
    ql_store_close(s);
    sqlite3 *raw;
    CHECK(sqlite3_open(path, &raw) == SQLITE_OK);
    drop_views(raw);
    CHECK(sqlite3_exec(raw,
                       "ALTER TABLE sensitivity DROP COLUMN grouping;"
                       " ALTER TABLE sensitivity DROP COLUMN n_tensors;"
                       " ALTER TABLE sensitivity DROP COLUMN blas_kernel;"
                       " DROP TABLE expert_load; DROP TABLE expert_errors;"
                       " ALTER TABLE metrics DROP COLUMN route_agree;"
                       " ALTER TABLE metrics DROP COLUMN route_overlap;"
                       " ALTER TABLE metrics DROP COLUMN load_shift;"
                       " ALTER TABLE layer_metrics DROP COLUMN route_agree;"
                       " ALTER TABLE layer_metrics DROP COLUMN route_overlap;"
                       " ALTER TABLE layer_metrics DROP COLUMN load_shift;"
                       " ALTER TABLE configs DROP COLUMN quantizer;"
                       " ALTER TABLE metrics DROP COLUMN calib_overlap_8;"
                       " ALTER TABLE metrics DROP COLUMN calib_overlap_32;"
                       " ALTER TABLE runs DROP COLUMN body_of;"
                       " ALTER TABLE runs DROP COLUMN forward_alone_seconds;"
                       " ALTER TABLE runs DROP COLUMN shared_blocks;"
                       " PRAGMA user_version = 8",
                       NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(raw);
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    if (!s)
        return;
    CHECK_EQ_INT(qlt_sql_int(ql_store_handle(s), "SELECT count(*) FROM sensitivity WHERE"
                                                 " grouping = 'tensor' AND n_tensors = 1"),
                 1);
    ql_store_sens_row got;
    bool found;
    CHECK_OK(ql_store_sensitivity_get(s, &key, row.tensor, row.type, &got, &found, &err), &err);
    CHECK(found && got.kld_mean == 0.25);
    key.grouping = "layer";
    CHECK_OK(ql_store_sensitivity_get(s, &key, row.tensor, row.type, &got, &found, &err), &err);
    CHECK(!found);
    ql_store_close(s);
}

/* A version-10 database (before the quantizer axis) gains configs.quantizer, its
 * configs reading 'ggml' (llama-quantize's rounding, all they could have used). */
static void test_v10_quantizer(void)
{
    ql_error err;
    ql_store *s = NULL;
    const char *path = qlt_tmp_db("v10-quantizer.db");
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    ql_store_close(s);
    sqlite3 *raw;
    CHECK(sqlite3_open(path, &raw) == SQLITE_OK);
    drop_views(raw);
    CHECK(sqlite3_exec(raw,
                       "ALTER TABLE configs DROP COLUMN quantizer;"
                       " ALTER TABLE metrics DROP COLUMN calib_overlap_8;"
                       " ALTER TABLE metrics DROP COLUMN calib_overlap_32;"
                       " ALTER TABLE runs DROP COLUMN body_of;"
                       " ALTER TABLE runs DROP COLUMN forward_alone_seconds;"
                       " ALTER TABLE runs DROP COLUMN shared_blocks;"
                       " PRAGMA user_version = 10",
                       NULL, NULL, NULL) == SQLITE_OK);
    CHECK_EQ_INT(qlt_sql_int(raw, "SELECT count(*) FROM pragma_table_info('configs') WHERE name "
                                  "= 'quantizer'"),
                 0);
    sqlite3_close(raw);
    s = NULL;
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    if (!s)
        return;
    CHECK_EQ_INT(qlt_sql_int(ql_store_handle(s), "PRAGMA user_version"), QL_STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(qlt_sql_int(ql_store_handle(s), "SELECT count(*) FROM pragma_table_info("
                                                 "'configs') WHERE name = 'quantizer' AND "
                                                 "dflt_value = '''ggml'''"),
                 1);
    ql_store_close(s);
}

static void test_refusals(void)
{
    ql_error err;
    ql_store *s = NULL;
    sqlite3 *raw;

    /* A database from a newer qlab. */
    const char *newer = qlt_tmp_db("newer.db");
    CHECK_OK(ql_store_open(newer, NULL, &s, &err), &err);
    ql_store_close(s);
    CHECK(sqlite3_open(newer, &raw) == SQLITE_OK);
    CHECK(sqlite3_exec(raw, "PRAGMA user_version = 99", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(raw);
    char want[1024];
    snprintf(want, sizeof want,
             "%s: results database schema version 99 is newer than this qlab supports (%d); use "
             "a newer qlab",
             newer, QL_STORE_SCHEMA_VERSION);
    CHECK(ql_store_open(newer, NULL, &s, &err) == QL_EDB);
    CHECK_MSG(strcmp(err.msg, want) == 0, "%s", err.msg);
    CHECK(s == NULL);
    ql_store_options ro = {.readonly = true};
    CHECK(ql_store_open(newer, &ro, &s, &err) == QL_EDB);
    CHECK(strcmp(err.msg, want) == 0);

    /* Somebody else's SQLite file. */
    const char *foreign = qlt_tmp_db("foreign.db");
    CHECK(sqlite3_open(foreign, &raw) == SQLITE_OK);
    CHECK(sqlite3_exec(raw, "CREATE TABLE t (x)", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(raw);
    CHECK(ql_store_open(foreign, NULL, &s, &err) == QL_EDB);
    CHECK(strstr(err.msg, "not a qlab results database (it has tables") != NULL);
    const char *other = qlt_tmp_db("otherapp.db");
    CHECK(sqlite3_open(other, &raw) == SQLITE_OK);
    CHECK(sqlite3_exec(raw, "PRAGMA application_id = 42", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(raw);
    CHECK(ql_store_open(other, NULL, &s, &err) == QL_EDB);
    CHECK(strstr(err.msg, "not a qlab results database (application_id 0x2a)") != NULL);

    /* Not a database at all. */
    const char *text = qlt_tmp_db("text.db");
    FILE *f = fopen(text, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("this is not sqlite, just text long enough to have a header............\n", f);
        fclose(f);
    }
    CHECK(ql_store_open(text, NULL, &s, &err) == QL_EDB);
    CHECK(strstr(err.msg, "file is not a database") != NULL);

    /* Read-only: a missing file is not created; writes are refused by SQLite. */
    const char *missing = qlt_tmp_db("missing.db");
    CHECK(ql_store_open(missing, &ro, &s, &err) == QL_EIO);
    CHECK(strstr(err.msg, "no results database here") != NULL);
    CHECK(access(missing, F_OK) != 0);
    const char *fix = qlt_tmp_db("fixture.db");
    CHECK_OK(qlt_store_fixture(fix, &err), &err);
    CHECK_OK(ql_store_open(fix, &ro, &s, &err), &err);
    if (s) {
        ql_store_model m;
        ql_store_model_init(&m);
        m.sha256 = QLT_FIXTURE_TEXT_SHA;
        m.path = "x";
        int64_t id;
        CHECK(ql_store_upsert_model(s, &m, &id, &err) == QL_EDB);
        CHECK_MSG(strstr(err.msg, "readonly") != NULL, "%s", err.msg);
        ql_store_close(s);
    }
}

static void test_fixture(void)
{
    const char *path = qlt_tmp_db("fixture2.db");
    ql_error err;
    CHECK_OK(qlt_store_fixture(path, &err), &err);
    ql_store *s;
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    sqlite3 *db = ql_store_handle(s);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM results"), 3);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM failed_runs"), 1);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM run_log WHERE status = 'running'"), 1);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM tensor_results"), 9);
    CHECK(strcmp(qtext(db, "SELECT error FROM failed_runs"), QLT_FIXTURE_ERROR) == 0);
    ql_store_close(s);
}

/* A run records what its products ran on and the runner's memory plan, and the process
 * that runs it (schema version 5). */
static void test_provenance(void)
{
    const char *path = qlt_tmp_db("provenance.db");
    env e;
    env_open(&e, path);
    ql_error err;
    ql_store_run_key key = {config_id(&e, "weight_type=Q4_0"), e.model, e.text, 128, 4};
    ql_store_run_info info = {"prov", 3, 1, NULL, "OpenBLAS 0.3.21 Haswell", 1 << 30, 7};
    int64_t run = 0;
    CHECK_OK(ql_store_begin_run(e.s, &key, &info, &run, &err), &err);
    sqlite3 *db = ql_store_handle(e.s);
    char want[128];
    snprintf(want, sizeof want, "OpenBLAS 0.3.21 Haswell|3|1073741824|7|%ld", (long)getpid());
    const char *got = qtext(db, "SELECT blas_kernel || '|' || threads || '|' || mem_budget || '|'"
                                " || group_chunks || '|' || pid FROM runs");
    CHECK_MSG(strcmp(got, want) == 0, "%s", got);
    /* A retry records the new attempt's; unknown ones are NULL. */
    CHECK_OK(ql_store_fail_run(e.s, run, "boom", 1.0, &err), &err);
    ql_store_run_info unknown = {"prov", 0, 1, NULL, NULL, 0, 0};
    CHECK_OK(ql_store_begin_run(e.s, &key, &unknown, &run, &err), &err);
    CHECK_EQ_INT(qlt_sql_int(db,
                             "SELECT count(*) FROM runs WHERE blas_kernel IS NULL AND"
                             " mem_budget IS NULL AND group_chunks IS NULL AND threads IS NULL"),
                 1);
    CHECK(strcmp(qtext(db, "SELECT group_concat(name) FROM pragma_table_info('results')"
                           " WHERE name IN ('blas_kernel', 'mem_budget', 'group_chunks')"),
                 "blas_kernel,mem_budget,group_chunks") == 0);
    ql_store_close(e.s);
}

/* Two processes creating one new store at the same moment both open it: the one that
 * waits sees either no schema or all of it, never tables without a schema version
 * (a race CI once hit, which a few hundred tries reproduce). */
static void test_concurrent_create(void)
{
    enum { TRIES = 300 };
    const char *path = qlt_tmp_db("race.db");
    int failures = 0;
    for (int i = 0; i < TRIES && failures == 0; i++) {
        qlt_remove_db(path);
        int go[2];
        CHECK(pipe(go) == 0);
        fflush(NULL);
        pid_t child = fork();
        CHECK(child >= 0);
        if (child < 0)
            return;
        ql_error err;
        ql_store *s = NULL;
        if (child == 0) {
            char c;
            close(go[1]);
            ssize_t n = read(go[0], &c, 1);
            ql_status st = n == 1 ? ql_store_open(path, NULL, &s, &err) : QL_EIO;
            if (st)
                fprintf(stderr, "child: %s\n", n == 1 ? err.msg : "no start signal");
            ql_store_close(s);
            _exit(st ? 1 : 0);
        }
        close(go[0]);
        CHECK(write(go[1], "x", 1) == 1);
        close(go[1]);
        ql_status st = ql_store_open(path, NULL, &s, &err);
        if (st)
            fprintf(stderr, "parent: %s\n", err.msg);
        ql_store_close(s);
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child);
        if (st || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failures++;
    }
    CHECK_EQ_INT(failures, 0);
}

int main(void)
{
    test_declarations();
    test_v3_database();
    test_views_refreshed();
    test_schema();
    test_schema_text();
    test_round_trip();
    test_provenance();
    test_skip_and_retry();
    test_finish_faults();
    test_open_faults();
    test_refusals();
    test_v8_sensitivities();
    test_v10_quantizer();
    test_v11_overlap();
    test_v12_shared_body();
    test_fixture();
    test_concurrent_create();
    return qlt_done();
}
