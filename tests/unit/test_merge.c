/* qlab merge: shard databases fold into a database equal in content to a
 * single-process sweep (N = 1, 3, 4 and more inputs than SQLite can attach at
 * once), merging is idempotent, which run wins, refusals (sweep setup, values
 * that do not reproduce, bad inputs) leave the output byte for byte as it was,
 * and so does every injected SQLite failure. */
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "merge_fixture.h"
#include "qltest.h"
#include "report_fixture.h"
#include "results/merge.h"
#include "results/store.h"
#include "store_fixture.h"

/* ================================================================ helpers */

#define MAX_INPUTS 16

/* A fresh path in the test's directory (removing what an earlier run left); the
 * string lives until the program ends (a pool large enough for every test). */
static const char *tmp_db(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static const char *tmp_db(const char *fmt, ...)
{
    enum { POOL = 256 };
    static char paths[POOL][512];
    static int next = 0;
    QL_ASSERT(next < POOL);
    char *p = paths[next++];
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    snprintf(p, 512, "%s/%s", qlt_tmpdir(), name);
    qlt_remove_db(p);
    return p;
}

static void make_shard(const char *path, const qlt_shard_spec *spec)
{
    ql_error err;
    CHECK_OK(qlt_shard_fixture(path, spec, &err), &err);
}

/* The whole sweep (shard 0/1) with the default spec. */
static const char *make_single(const char *name)
{
    const char *p = tmp_db("%s", name);
    qlt_shard_spec spec;
    qlt_shard_spec_init(&spec);
    make_shard(p, &spec);
    return p;
}

/* Serialized result rows, hashed at the end. */
typedef struct {
    char *text;
    size_t len, cap;
} dump;

static void dump_add(dump *d, const char *s, size_t n)
{
    if (d->len + n + 1 > d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4096;
        while (cap < d->len + n + 1)
            cap *= 2;
        char *t = realloc(d->text, cap);
        if (!t) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        d->text = t;
        d->cap = cap;
    }
    memcpy(d->text + d->len, s, n);
    d->len += n;
    d->text[d->len] = '\0';
}

/* Appends every row of sql, each value tagged with its type and exact. */
static void dump_query(dump *d, sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        CHECK_MSG(false, "%s: %s", sql, sqlite3_errmsg(db));
        return;
    }
    dump_add(d, sql, strlen(sql));
    dump_add(d, "\n", 1);
    while (sqlite3_step(st) == SQLITE_ROW) {
        for (int i = 0; i < sqlite3_column_count(st); i++) {
            char v[128];
            switch (sqlite3_column_type(st, i)) {
            case SQLITE_NULL:
                snprintf(v, sizeof v, "|N");
                break;
            case SQLITE_INTEGER:
                snprintf(v, sizeof v, "|i%lld", (long long)sqlite3_column_int64(st, i));
                break;
            case SQLITE_FLOAT:
                snprintf(v, sizeof v, "|f%a", sqlite3_column_double(st, i));
                break;
            default:
                snprintf(v, sizeof v, "|t%d:", sqlite3_column_bytes(st, i));
                dump_add(d, v, strlen(v));
                dump_add(d, (const char *)sqlite3_column_text(st, i),
                         (size_t)sqlite3_column_bytes(st, i));
                continue;
            }
            dump_add(d, v, strlen(v));
        }
        dump_add(d, "\n", 1);
    }
    sqlite3_finalize(st);
}

/* The column list of a table without the excluded names, prefixed by alias. */
static void columns_except(sqlite3 *db, const char *table, const char *alias,
                           const char *const *excluded, char *out, size_t size)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT name FROM pragma_table_info('%s') ORDER BY cid", table);
    sqlite3_stmt *st;
    out[0] = '\0';
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return;
    size_t len = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        bool skip = false;
        for (const char *const *e = excluded; *e; e++)
            skip |= strcmp(*e, name) == 0;
        if (!skip)
            len += (size_t)snprintf(out + len, size - len, ", %s.%s", alias, name);
    }
    sqlite3_finalize(st);
}

#define RUN_KEY "c.hash, mo.sha256, d.sha256, r.ctx, r.chunks"
#define RUN_JOIN                                                                                   \
    " JOIN configs c ON c.id = r.config_id JOIN models mo ON mo.id = r.model_id"                   \
    " JOIN datasets d ON d.id = r.dataset_id"

/* SHA-256 of the content by natural keys, without row ids and provenance
 * (paths, timings, host, threads, commit, attempts): what must be equal between
 * merged shards and one process. */
static void logical_digest(const char *path, char out[65])
{
    sqlite3 *db;
    out[0] = '\0';
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        CHECK_MSG(false, "%s: %s", path, sqlite3_errmsg(db));
        sqlite3_close(db);
        return;
    }
    dump d = {0};
    char cols[2048], sql[4096];
    static const char *const model_x[] = {"id", "path", NULL};
    columns_except(db, "models", "m", model_x, cols, sizeof cols);
    snprintf(sql, sizeof sql, "SELECT m.sha256%s FROM models m ORDER BY m.sha256", cols);
    dump_query(&d, db, sql);
    static const char *const data_x[] = {"id", "path", "tokens_model_id", NULL};
    columns_except(db, "datasets", "d", data_x, cols, sizeof cols);
    snprintf(sql, sizeof sql,
             "SELECT d.sha256, m.sha256%s FROM datasets d LEFT JOIN models m"
             " ON m.id = d.tokens_model_id ORDER BY d.sha256",
             cols);
    dump_query(&d, db, sql);
    static const char *const config_x[] = {"id", NULL};
    columns_except(db, "configs", "c", config_x, cols, sizeof cols);
    snprintf(sql, sizeof sql, "SELECT c.hash%s FROM configs c ORDER BY c.hash", cols);
    dump_query(&d, db, sql);
    static const char *const run_x[] = {
        "id",      "config_id", "model_id",    "dataset_id",       "ctx",         "chunks",
        "started", "finished",  "seconds",     "quantize_seconds", "ref_seconds", "quant_seconds",
        "threads", "host",      "qlab_commit", "attempts",         NULL};
    columns_except(db, "runs", "r", run_x, cols, sizeof cols);
    snprintf(sql, sizeof sql, "SELECT " RUN_KEY "%s FROM runs r" RUN_JOIN " ORDER BY 1, 2, 3, 4, 5",
             cols);
    dump_query(&d, db, sql);
    static const char *const child_x[] = {"run_id", NULL};
    static const char *const children[] = {"metrics", "tensor_errors", "chunk_metrics"};
    for (size_t i = 0; i < 3; i++) {
        columns_except(db, children[i], "x", child_x, cols, sizeof cols);
        snprintf(sql, sizeof sql,
                 "SELECT " RUN_KEY "%s FROM %s x JOIN runs r ON r.id = x.run_id" RUN_JOIN
                 " ORDER BY 1, 2, 3, 4, 5, 6, 7",
                 cols, children[i]);
        dump_query(&d, db, sql);
    }
    dump_query(&d, db,
               "SELECT s.sweep, " RUN_KEY
               " FROM sweep_runs s JOIN runs r ON r.id = s.run_id" RUN_JOIN
               " ORDER BY 1, 2, 3, 4, 5, 6");
    sqlite3_close(db);
    ql_sha256_hex(d.text ? d.text : "", d.len, out);
    free(d.text);
}

/* The file's bytes (with no -wal left beside it): what "untouched" means. */
typedef struct {
    unsigned char *bytes;
    size_t len;
    bool exists;
} snapshot;

static snapshot take(const char *path)
{
    snapshot s = {NULL, 0, ql_file_exists(path)};
    if (s.exists)
        s.bytes = qlt_read_file(path, &s.len);
    return s;
}

static void check_untouched(const char *path, snapshot *before, const char *what)
{
    snapshot now = take(path);
    char wal[600];
    snprintf(wal, sizeof wal, "%s-wal", path);
    CHECK_MSG(now.exists == before->exists, "%s: output %s", what,
              now.exists ? "was created" : "vanished");
    CHECK_MSG(now.len == before->len &&
                  (now.len == 0 || memcmp(now.bytes, before->bytes, now.len) == 0),
              "%s: output changed (%zu bytes, was %zu)", what, now.len, before->len);
    CHECK_MSG(!ql_file_exists(wal), "%s: a -wal file was left", what);
    free(now.bytes);
}

static ql_status merge(const char *out, const char **in, size_t n, ql_merge_counts *counts,
                       ql_error *err)
{
    return ql_merge(out, in, n, NULL, counts, err);
}

static void check_msg(const ql_error *err, const char *want)
{
    CHECK_MSG(strstr(err->msg, want) != NULL, "message '%s' lacks '%s'", err->msg, want);
}

/* ================================================================ tests */

/* Shards K/N merged in any order equal the single-process sweep. */
static void test_shards_equal_single(void)
{
    const char *single = make_single("single.db");
    char want[65];
    logical_digest(single, want);
    static const int counts[] = {1, 3, 4, 12};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        int n = counts[c];
        const char *in[MAX_INPUTS];
        for (int k = 0; k < n; k++) {
            in[k] = tmp_db("shard-%d-of-%d.db", k, n);
            qlt_shard_spec spec;
            qlt_shard_spec_init(&spec);
            spec.shard = (ql_shard){k, n};
            make_shard(in[k], &spec);
        }
        for (int reverse = 0; reverse < 2; reverse++) {
            const char *order[MAX_INPUTS];
            for (int k = 0; k < n; k++)
                order[k] = in[reverse ? n - 1 - k : k];
            const char *out = tmp_db("merged-%d-%d.db", n, reverse);
            ql_merge_counts mc[MAX_INPUTS];
            ql_error err;
            CHECK_OK(merge(out, order, (size_t)n, mc, &err), &err);
            size_t added = 0, runs = 0;
            for (int k = 0; k < n; k++) {
                added += mc[k].added;
                runs += mc[k].runs;
                CHECK_EQ_INT(mc[k].replaced + mc[k].kept, 0);
            }
            CHECK_EQ_INT(added, QLT_SHARD_CONFIGS);
            CHECK_EQ_INT(runs, QLT_SHARD_CONFIGS);
            char got[65];
            logical_digest(out, got);
            CHECK_MSG(strcmp(got, want) == 0, "N = %d%s: merged shards differ from one process", n,
                      reverse ? " (reversed)" : "");
        }
    }

    /* The comparison is not blind: a perturbed or missing run shows. */
    const char *in[3];
    for (int k = 0; k < 3; k++) {
        in[k] = tmp_db("pshard-%d-of-%d.db", k, 3);
        qlt_shard_spec spec;
        qlt_shard_spec_init(&spec);
        spec.shard = (ql_shard){k, 3};
        spec.perturb = 4;
        make_shard(in[k], &spec);
    }
    const char *out = tmp_db("perturbed.db");
    ql_error err;
    CHECK_OK(merge(out, in, 3, NULL, &err), &err);
    char got[65];
    logical_digest(out, got);
    CHECK(strcmp(got, want) != 0);
    out = tmp_db("partial.db");
    CHECK_OK(merge(out, in, 2, NULL, &err), &err);
    logical_digest(out, got);
    CHECK(strcmp(got, want) != 0);
}

/* Merging what is already there changes no byte of the output. */
static void test_idempotent(void)
{
    const char *in[2];
    for (int k = 0; k < 2; k++) {
        in[k] = tmp_db("ishard-%d-of-%d.db", k, 2);
        qlt_shard_spec spec;
        qlt_shard_spec_init(&spec);
        spec.shard = (ql_shard){k, 2};
        make_shard(in[k], &spec);
    }
    const char *out = tmp_db("idem.db");
    ql_error err;
    ql_merge_counts mc[3];
    CHECK_OK(merge(out, in, 2, mc, &err), &err);
    snapshot before = take(out);
    char d0[65], d1[65];
    logical_digest(out, d0);

    CHECK_OK(merge(out, in, 2, mc, &err), &err);
    CHECK_EQ_INT(mc[0].added + mc[0].replaced + mc[1].added + mc[1].replaced, 0);
    CHECK_EQ_INT(mc[0].kept + mc[1].kept, QLT_SHARD_CONFIGS);
    check_untouched(out, &before, "merging both shards again");

    const char *twice[3] = {in[0], in[0], in[1]};
    CHECK_OK(merge(out, twice, 3, mc, &err), &err);
    check_untouched(out, &before, "merging a shard twice in one call");

    /* The same shard twice into a new database: added once, then kept. */
    const char *fresh = tmp_db("idem-fresh.db");
    CHECK_OK(merge(fresh, twice, 3, mc, &err), &err);
    CHECK_EQ_INT(mc[0].added, mc[0].runs);
    CHECK_EQ_INT(mc[1].kept, mc[1].runs);
    logical_digest(fresh, d1);
    CHECK(strcmp(d0, d1) == 0);

    /* Provenance may differ (shard 1 ran with other threads and timings than the
     * single process): the output's is kept and nothing is written. */
    const char *single = make_single("idem-single.db");
    free(before.bytes);
    before = take(single);
    CHECK_OK(merge(single, in + 1, 1, mc, &err), &err);
    CHECK_EQ_INT(mc[0].kept, mc[0].runs);
    check_untouched(single, &before, "merging a shard into the single-process database");
    free(before.bytes);
}

/* Builds a database of shard 0/2 merged into a fresh output and returns it. */
static const char *merged_first_half(const char *name)
{
    const char *s0 = tmp_db("half-%d-%d.db", 0, 2);
    qlt_shard_spec spec;
    qlt_shard_spec_init(&spec);
    spec.shard = (ql_shard){0, 2};
    make_shard(s0, &spec);
    const char *out = tmp_db("%s", name);
    ql_error err;
    CHECK_OK(merge(out, &s0, 1, NULL, &err), &err);
    return out;
}

/* Shard 1/2 of the sweep, run on something else. */
typedef enum { OTHER_MODEL, OTHER_TEXT, OTHER_CTX, OTHER_METRICS } other_setup;

static const char *other_half(other_setup what, const char *sweep)
{
    const char *p = tmp_db("other-%d-%d.db", (int)what, sweep[0]);
    qlt_shard_spec spec;
    qlt_shard_spec_init(&spec);
    spec.sweep = sweep;
    spec.shard = (ql_shard){1, 2};
    switch (what) {
    case OTHER_MODEL:
        spec.model_sha = QLT_SHARD_MODEL_SHA_B;
        spec.model_name = "fixture-model-b";
        break;
    case OTHER_TEXT:
        spec.text_sha = QLT_SHARD_TEXT_SHA_B;
        break;
    case OTHER_CTX:
        spec.ctx = 128;
        break;
    case OTHER_METRICS:
        spec.metrics_version = 2;
        break;
    }
    make_shard(p, &spec);
    return p;
}

static void test_refuse_other_setup(void)
{
    static const struct {
        other_setup what;
        const char *used, *has;
    } cases[] = {
        {OTHER_MODEL, "used model fixture-model-b (sha256 222222222222...)",
         "has model fixture-model (sha256 111111111111...)"},
        {OTHER_TEXT, "used text fixture-text (sha256 444444444444...)",
         "has text fixture-text (sha256 333333333333...)"},
        {OTHER_CTX, "used ctx 128", "has ctx 64"},
        {OTHER_METRICS, "used metrics version 2", "has metrics version 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *out = merged_first_half("refuse.db");
        const char *other = other_half(cases[i].what, QLT_SHARD_SWEEP);
        snapshot before = take(out);
        ql_error err;
        CHECK(merge(out, &other, 1, NULL, &err) == QL_EINVAL);
        char want[1024];
        snprintf(want, sizeof want, "%s: sweep 'shards' %s but %s %s", other, cases[i].used, out,
                 cases[i].has);
        check_msg(&err, want);
        check_msg(&err, "nothing was merged");
        check_untouched(out, &before, cases[i].used);
        free(before.bytes);

        /* The same shard under another sweep name is another sweep: merged. */
        const char *renamed = other_half(cases[i].what, "elsewhere");
        CHECK_OK(merge(out, &renamed, 1, NULL, &err), &err);
    }

    /* One side's sweep ran on two models, the other's on one of them. */
    const char *a = make_single("subset-a.db");
    const char *ab = make_single("subset-ab.db");
    qlt_shard_spec b;
    qlt_shard_spec_init(&b);
    b.model_sha = QLT_SHARD_MODEL_SHA_B;
    b.model_name = "fixture-model-b";
    make_shard(ab, &b);
    snapshot a_before = take(a), ab_before = take(ab);
    ql_error e;
    CHECK(merge(a, &ab, 1, NULL, &e) == QL_EINVAL);
    check_msg(&e, "sweep 'shards' used model fixture-model-b (sha256 222222222222...), which the "
                  "sweep in");
    check_untouched(a, &a_before, "a sweep on more models");
    CHECK(merge(ab, &a, 1, NULL, &e) == QL_EINVAL);
    check_msg(&e, "sweep 'shards' has no runs with model fixture-model-b (sha256 "
                  "222222222222...), which the sweep in");
    check_untouched(ab, &ab_before, "a sweep on fewer models");
    free(a_before.bytes);
    free(ab_before.bytes);

    /* Between two inputs, into an output that does not exist yet: the message
     * names the input the sweep came from, and no output is left behind. */
    const char *s0 = tmp_db("refuse-s0.db");
    qlt_shard_spec spec;
    qlt_shard_spec_init(&spec);
    spec.shard = (ql_shard){0, 2};
    make_shard(s0, &spec);
    const char *in[2] = {s0, other_half(OTHER_MODEL, QLT_SHARD_SWEEP)};
    const char *out = tmp_db("refuse-new.db");
    snapshot none = take(out);
    ql_error err;
    CHECK(merge(out, in, 2, NULL, &err) == QL_EINVAL);
    char want[1024];
    snprintf(want, sizeof want, "but %s has model fixture-model", s0);
    check_msg(&err, want);
    check_untouched(out, &none, "refused merge into a new output");
}

/* Runs done on both sides must agree in metrics, tensor errors, chunk sums and
 * activation roundings, and a config hash must stand for the same canonical text. */
static void test_refuse_other_values(void)
{
    static const struct {
        const char *sql;  /* applied to the second input; NULL: perturbed kld_mean */
        const char *want; /* in the message */
    } cases[] = {
        {NULL, "but kld_mean differs (0.00"},
        {"UPDATE tensor_errors SET rmse = rmse * 2 WHERE tensor = 'blk.0.attn_q.weight'",
         "but the errors of tensor 'blk.0.attn_q.weight' differ"},
        {"DELETE FROM tensor_errors WHERE tensor = 'token_embd.weight'",
         "but the errors of tensor 'token_embd.weight' differ"},
        {"UPDATE chunk_metrics SET kld_sum = kld_sum + 1 WHERE chunk = 1",
         "but the sums of chunk 1 differ"},
        {"INSERT INTO act_roundings SELECT id, 'blk.0.ffn_down.weight', 'q8_K', 'q8_0',"
         " 'row length 172', NULL FROM runs WHERE status = 'done'",
         "but the activation rounding records of tensor 'blk.0.ffn_down.weight' differ"},
        {"UPDATE configs SET canonical = canonical || ' ' WHERE id = 1",
         "(a changed canonical form?)"},
        {"UPDATE configs SET hash = '" QLT_SHARD_MODEL_SHA_B "' WHERE id = 1",
         "(a changed config hash?)"},
        {"UPDATE metrics SET zlib_bytes = 5", "but zlib_bytes differs (5 in "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *out = merged_first_half("values.db");
        const char *in = tmp_db("values-in-%d.db", (int)i);
        qlt_shard_spec spec;
        qlt_shard_spec_init(&spec);
        spec.shard = (ql_shard){0, 2};
        spec.perturb = cases[i].sql ? -1 : 2;
        make_shard(in, &spec);
        if (cases[i].sql) {
            sqlite3 *db;
            CHECK(sqlite3_open(in, &db) == SQLITE_OK);
            CHECK_MSG(sqlite3_exec(db, cases[i].sql, NULL, NULL, NULL) == SQLITE_OK, "%s",
                      sqlite3_errmsg(db));
            sqlite3_close(db);
        }
        snapshot before = take(out);
        ql_error err;
        CHECK(merge(out, &in, 1, NULL, &err) == QL_EINVAL);
        check_msg(&err, cases[i].want);
        char want[1024];
        check_untouched(out, &before, cases[i].want);
        free(before.bytes);
        if (strstr(cases[i].want, "(a changed")) {
            check_msg(&err, "nothing was merged");
            continue;
        }
        snprintf(want, sizeof want, "is done in both %s and %s with metrics version 1", in, out);
        check_msg(&err, want);
        if (strstr(cases[i].want, "differs (")) {
            snprintf(want, sizeof want, " in %s)", out);
            check_msg(&err, want);
        }
        check_msg(&err, "ctx 64, chunks 3");
    }
}

/* Config i of the fixture sweep has a run with this status (and metrics iff done). */
static void check_status(const char *path, int config, const char *want)
{
    char hash[65];
    ql_error err;
    CHECK_OK(qlt_shard_config_hash(config, hash, &err), &err);
    sqlite3 *db;
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    sqlite3_stmt *st;
    CHECK(sqlite3_prepare_v2(db,
                             "SELECT r.status, (SELECT count(*) FROM metrics m WHERE m.run_id ="
                             " r.id) FROM runs r JOIN configs c ON c.id = r.config_id"
                             " WHERE c.hash = ?1",
                             -1, &st, NULL) == SQLITE_OK);
    sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
        const char *status = (const char *)sqlite3_column_text(st, 0);
        CHECK_MSG(strcmp(status, want) == 0, "config %d is %s, expected %s", config, status, want);
        CHECK_EQ_INT(sqlite3_column_int(st, 1), strcmp(want, "done") == 0);
    } else {
        CHECK_MSG(false, "config %d not found", config);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* Done beats failed beats running; a newer metrics version beats an older one. */
static void test_which_run_wins(void)
{
    qlt_shard_spec spec;
    ql_error err;
    ql_merge_counts mc[1];
    char want[65], got[65];
    const char *good = make_single("wins-good.db");
    logical_digest(good, want);

    /* Output with a failed and an interrupted run: the input's done runs replace them. */
    const char *out = tmp_db("wins-out.db");
    qlt_shard_spec_init(&spec);
    spec.fail = 2;
    spec.running = 5;
    make_shard(out, &spec);
    check_status(out, 2, "failed");
    check_status(out, 5, "running");
    CHECK_OK(merge(out, &good, 1, mc, &err), &err);
    CHECK_EQ_INT(mc[0].replaced, 2);
    CHECK_EQ_INT(mc[0].kept, QLT_SHARD_CONFIGS - 2);
    logical_digest(out, got);
    CHECK_MSG(strcmp(got, want) == 0, "done runs did not replace failed and running ones");

    /* The other way round the output's done runs stay and nothing is written. */
    const char *bad = tmp_db("wins-bad.db");
    make_shard(bad, &spec);
    snapshot before = take(good);
    CHECK_OK(merge(good, &bad, 1, mc, &err), &err);
    CHECK_EQ_INT(mc[0].kept, QLT_SHARD_CONFIGS);
    check_untouched(good, &before, "failed and running runs over done ones");
    free(before.bytes);

    /* A failed run replaces an interrupted one (its error tells more). */
    const char *running = tmp_db("wins-running.db");
    qlt_shard_spec_init(&spec);
    spec.running = 3;
    make_shard(running, &spec);
    const char *failed = tmp_db("wins-failed.db");
    qlt_shard_spec_init(&spec);
    spec.fail = 3;
    make_shard(failed, &spec);
    CHECK_OK(merge(running, &failed, 1, mc, &err), &err);
    CHECK_EQ_INT(mc[0].replaced, 1);
    check_status(running, 3, "failed");

    /* Metrics versions (of two differently named sweeps: one sweep must not mix
     * them). New metrics, new values: no conflict across versions. */
    for (int newer_in = 0; newer_in < 2; newer_in++) {
        const char *v1 = tmp_db("wins-v1-%d.db", newer_in);
        qlt_shard_spec_init(&spec);
        spec.sweep = "old";
        make_shard(v1, &spec);
        const char *v2 = tmp_db("wins-v2-%d.db", newer_in);
        spec.sweep = "new";
        spec.metrics_version = 2;
        spec.perturb = 0;
        make_shard(v2, &spec);
        const char *into = newer_in ? v1 : v2, *from = newer_in ? v2 : v1;
        CHECK_OK(merge(into, &from, 1, mc, &err), &err);
        CHECK_EQ_INT(newer_in ? mc[0].replaced : mc[0].kept, QLT_SHARD_CONFIGS);
        sqlite3 *db;
        CHECK(sqlite3_open_v2(into, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        sqlite3_stmt *st;
        /* The newer runs, listed by both sweeps. */
        CHECK(sqlite3_prepare_v2(db,
                                 "SELECT (SELECT count(*) FROM runs), (SELECT min(metrics_version)"
                                 " FROM runs), (SELECT count(*) FROM sweep_runs), (SELECT"
                                 " count(*) FROM metrics)",
                                 -1, &st, NULL) == SQLITE_OK);
        CHECK(sqlite3_step(st) == SQLITE_ROW);
        CHECK_EQ_INT(sqlite3_column_int(st, 0), QLT_SHARD_CONFIGS);
        CHECK_EQ_INT(sqlite3_column_int(st, 1), 2);
        CHECK_EQ_INT(sqlite3_column_int(st, 2), 2 * QLT_SHARD_CONFIGS);
        CHECK_EQ_INT(sqlite3_column_int(st, 3), QLT_SHARD_CONFIGS);
        sqlite3_finalize(st);
        sqlite3_close(db);
    }
}

/* Inputs that are not results databases this qlab can merge. */
static void test_bad_inputs(void)
{
    const char *out = merged_first_half("bad-out.db");
    const char *dir = qlt_tmpdir();
    char text[600], plain[600], newer[600], foreign[600];
    snprintf(text, sizeof text, "%s/not-a-db.txt", dir);
    ql_error err;
    CHECK_OK(
        ql_file_write_all(text, "just text, and long enough to be no header at all.\n", 51, &err),
        &err);
    snprintf(plain, sizeof plain, "%s/plain.sqlite", dir);
    snprintf(newer, sizeof newer, "%s/newer.db", dir);
    snprintf(foreign, sizeof foreign, "%s/foreign.db", dir);
    unlink(plain);
    unlink(foreign);
    sqlite3 *db;
    CHECK(sqlite3_open(plain, &db) == SQLITE_OK);
    sqlite3_exec(db, "CREATE TABLE t (x); PRAGMA user_version = 2", NULL, NULL, NULL);
    sqlite3_close(db);
    CHECK(sqlite3_open(foreign, &db) == SQLITE_OK);
    sqlite3_exec(db, "CREATE TABLE t (x); PRAGMA application_id = 1234", NULL, NULL, NULL);
    sqlite3_close(db);
    unlink(newer);
    qlt_shard_spec spec;
    qlt_shard_spec_init(&spec);
    make_shard(newer, &spec);
    CHECK(sqlite3_open(newer, &db) == SQLITE_OK);
    sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL);
    sqlite3_close(db);
    char missing[600];
    snprintf(missing, sizeof missing, "%s/missing.db", dir);

    const struct {
        const char *path;
        ql_status status;
        const char *want;
    } cases[] = {
        {missing, QL_EIO, "missing.db: cannot read: No such file or directory"},
        {dir, QL_EIO, ": not a regular file"},
        {text, QL_EDB, "not-a-db.txt: attaching it: file is not a database"},
        {plain, QL_EDB,
         "plain.sqlite: not a qlab results database (application_id 0x0, schema "
         "version 2)"},
        {foreign, QL_EDB, "foreign.db: not a qlab results database (application_id 0x4d2"},
        {newer, QL_EDB,
         "newer.db: results database schema version 99 is newer than this qlab "
         "supports"},
        {out, QL_EINVAL, "bad-out.db: is the output database"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* Each after a good input, so the failure is not at the first step. */
        const char *in[2] = {make_single("bad-good.db"), cases[i].path};
        snapshot before = take(out);
        CHECK(merge(out, in, 2, NULL, &err) == cases[i].status);
        check_msg(&err, cases[i].want);
        check_untouched(out, &before, cases[i].want);
        free(before.bytes);
        if (cases[i].path == out)
            continue;
        const char *fresh = tmp_db("bad-fresh-%d.db", (int)i);
        snapshot none = take(fresh);
        CHECK(merge(fresh, in, 2, NULL, &err) == cases[i].status);
        check_untouched(fresh, &none, cases[i].want);
    }
    /* The inputs are only read. */
    snapshot plain_before = take(plain);
    const char *in[1] = {plain};
    CHECK(merge(out, in, 1, NULL, &err) == QL_EDB);
    check_untouched(plain, &plain_before, "reading a foreign input");
    free(plain_before.bytes);
    CHECK(merge(out, in, 0, NULL, &err) == QL_EINVAL);
}

/* A database of schema version 1 (no chunk_metrics) merges into a current one. */
static void test_v1_input(void)
{
    const char *v1 = tmp_db("v1-input.db");
    if (!qlt_v1_fixture(v1))
        return;
    ql_error err;
    snapshot v1_before = take(v1);

    const char *out = tmp_db("v1-out.db");
    ql_merge_counts mc[1];
    CHECK_OK(merge(out, &v1, 1, mc, &err), &err);
    CHECK_EQ_INT(mc[0].runs, 5);
    CHECK_EQ_INT(mc[0].added, 5);
    check_untouched(v1, &v1_before, "v1 input");
    free(v1_before.bytes);
    ql_store *s;
    ql_store_options ro = {.readonly = true};
    CHECK_OK(ql_store_open(out, &ro, &s, &err), &err);
    if (!s)
        return;
    sqlite3_stmt *st;
    CHECK(sqlite3_prepare_v2(ql_store_handle(s),
                             "SELECT (SELECT count(*) FROM results), (SELECT count(*) FROM "
                             "tensor_results), (SELECT count(*) FROM failed_runs)",
                             -1, &st, NULL) == SQLITE_OK);
    CHECK(sqlite3_step(st) == SQLITE_ROW);
    CHECK_EQ_INT(sqlite3_column_int(st, 0), 3);
    CHECK_EQ_INT(sqlite3_column_int(st, 1), 9);
    CHECK_EQ_INT(sqlite3_column_int(st, 2), 1);
    sqlite3_finalize(st);
    ql_store_close(s);
}

/* The fixtures of the store and report tests: several sweeps, failed and
 * running runs, per-chunk sums, fallbacks, NULL measurements. */
static void test_fixture_databases(void)
{
    const char *a = tmp_db("fx-store.db"), *b = tmp_db("fx-report.db");
    ql_error err;
    CHECK_OK(qlt_store_fixture(a, &err), &err);
    CHECK_OK(qlt_report_fixture(b, true, &err), &err);
    const char *in[2] = {a, b};
    const char *out = tmp_db("fx-out.db");
    ql_merge_counts mc[2];
    CHECK_OK(merge(out, in, 2, mc, &err), &err);
    CHECK_EQ_INT(mc[0].added, 5);
    CHECK_EQ_INT(mc[1].added, mc[1].runs);
    /* Each input alone is the merged database restricted to it. */
    const char *alone = tmp_db("fx-alone.db");
    CHECK_OK(merge(alone, &b, 1, NULL, &err), &err);
    char d_in[65], d_alone[65];
    logical_digest(b, d_in);
    logical_digest(alone, d_alone);
    CHECK_MSG(strcmp(d_in, d_alone) == 0, "the report fixture changed in a merge of its own");
    snapshot before = take(out);
    CHECK_OK(merge(out, in, 2, mc, &err), &err);
    check_untouched(out, &before, "merging the fixtures again");
    free(before.bytes);
}

/* Every SQLite call of the merge failing in turn, into an output that holds a
 * failed attempt of shard 0 already (and every 7th call into a new output, whose
 * creation costs several fsyncs per attempt): the output stays as it was, or is
 * not created, until the merge gets through and gives what a merge without
 * faults gives. */
static void test_faults(void)
{
    const char *in[2];
    for (int k = 0; k < 2; k++) {
        in[k] = tmp_db("fshard-%d-of-%d.db", k, 2);
        qlt_shard_spec spec;
        qlt_shard_spec_init(&spec);
        spec.shard = (ql_shard){k, 2};
        make_shard(in[k], &spec);
    }
    const char *ref = tmp_db("faults-ref.db");
    ql_error err;
    CHECK_OK(merge(ref, in, 2, NULL, &err), &err);
    char want[65];
    logical_digest(ref, want);
    const char *failed = tmp_db("faults-failed.db");
    qlt_shard_spec spec;
    qlt_shard_spec_init(&spec);
    spec.shard = (ql_shard){0, 2};
    spec.fail = 2;
    make_shard(failed, &spec);
    snapshot start = take(failed);

    for (int existing = 0; existing < 2; existing++) {
        int failures = 0, staging = 0;
        bool done = false;
        const char *out = tmp_db("faults-%d.db", existing);
        int stride = existing ? 1 : 7;
        for (int n = 1; n < 5000 && !done; n += stride) {
            qlt_remove_db(out);
            if (existing)
                CHECK_OK(ql_file_write_all(out, start.bytes, start.len, &err), &err);
            snapshot before = take(out);
            ql_merge_options opt = {.fault_after = n};
            ql_status st = ql_merge(out, in, 2, &opt, NULL, &err);
            if (st == QL_OK) {
                done = true;
                char got[65];
                logical_digest(out, got);
                CHECK_MSG(strcmp(got, want) == 0, "merge after %d faults differs", failures);
                check_status(out, 2, "done");
            } else {
                failures++;
                CHECK_MSG(st == QL_EDB && strstr(err.msg, "injected fault"),
                          "fault %d: status %d: %s", n, (int)st, err.msg);
                check_untouched(out, &before, "injected fault");
                /* A failure while an input is read names the input. */
                for (int k = 0; k < 2; k++)
                    staging += strncmp(err.msg, in[k], strlen(in[k])) == 0;
            }
            free(before.bytes);
        }
        CHECK(done);
        CHECK_MSG(failures * stride > 300, "only %d calls could fail", failures * stride);
        CHECK_MSG(staging * stride > 20, "only %d failures named the input", staging * stride);
        if (getenv("QLT_VERBOSE"))
            fprintf(stderr, "faults: %d calls failed in turn\n", failures);
    }
    free(start.bytes);
}

/* Thousands of runs, and thousands of tensors in some: every step of the merge is an index
 * lookup per row (a plan that scans per row took minutes here). Merged twice, so
 * the comparison of runs done on both sides runs over all of them. */
static void test_large(void)
{
    enum { EXTRA_RUNS = 2000, TENSORS = 2000, N = 2 };
    const char *in[N];
    ql_error err;
    for (int k = 0; k < N; k++) {
        in[k] = tmp_db("large-%d.db", k);
        qlt_shard_spec spec;
        qlt_shard_spec_init(&spec);
        spec.shard = (ql_shard){k, N};
        make_shard(in[k], &spec);
        char sql[2048];
        snprintf(sql, sizeof sql,
                 "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < %d)"
                 " INSERT INTO tensor_errors (run_id, tensor, layer, requested_type, used_type,"
                 " fallback, n_rows, n_cols, params, bytes, rmse)"
                 " SELECT r.id, 'blk.' || n.i || '.ffn_up.weight', n.i, 'Q8_0', 'Q8_0', 0, 64,"
                 " 64, 4096, 100, n.i / 1024.0 FROM runs r, n;"
                 "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < %d)"
                 " INSERT INTO configs (hash, canonical, weight_type, act_mode, outlier_ratio,"
                 " head_type, embd_type, kv_type, imatrix, budget)"
                 " SELECT printf('%%064d', i * %d + %d), 'synthetic ' || (i * %d + %d), 'Q8_0',"
                 " 'f32', 0, 'same', 'same', 'f32', 'none', 'none' FROM n;"
                 "INSERT INTO runs (config_id, model_id, dataset_id, ctx, chunks, sweep, status,"
                 " started, finished, qlab_version, qlab_commit, metrics_version)"
                 " SELECT c.id, 1, 1, 64, 3, 'shards', 'done', 's', 'f', 'v', 'c', 1"
                 " FROM configs c WHERE c.canonical LIKE 'synthetic %%';"
                 "INSERT INTO metrics (run_id, ppl) SELECT id, id / 8.0 FROM runs"
                 " WHERE id NOT IN (SELECT run_id FROM metrics);"
                 "INSERT INTO sweep_runs SELECT 'shards', id FROM runs"
                 " WHERE id NOT IN (SELECT run_id FROM sweep_runs);",
                 TENSORS - 1, EXTRA_RUNS - 1, N, k, N, k);
        sqlite3 *db;
        CHECK(sqlite3_open(in[k], &db) == SQLITE_OK);
        CHECK_MSG(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK, "%s", sqlite3_errmsg(db));
        sqlite3_close(db);
    }
    const char *out = tmp_db("large-out.db");
    ql_merge_counts mc[N];
    CHECK_OK(merge(out, in, N, mc, &err), &err);
    CHECK_EQ_INT(mc[0].added + mc[1].added, QLT_SHARD_CONFIGS + N * EXTRA_RUNS);
    snapshot before = take(out);
    double t = ql_now();
    CHECK_OK(merge(out, in, N, mc, &err), &err);
    CHECK_EQ_INT(mc[0].kept + mc[1].kept, QLT_SHARD_CONFIGS + N * EXTRA_RUNS);
    check_untouched(out, &before, "merging large shards again");
    free(before.bytes);
    if (getenv("QLT_VERBOSE"))
        fprintf(stderr, "large: comparing %d runs (%d with %d tensors): %.2f s\n",
                QLT_SHARD_CONFIGS + N * EXTRA_RUNS, QLT_SHARD_CONFIGS, TENSORS + 2, ql_now() - t);
}

static void timed(const char *name, void (*fn)(void))
{
    double t = ql_now();
    fn();
    if (getenv("QLT_VERBOSE"))
        fprintf(stderr, "%s: %.2f s\n", name, ql_now() - t);
}

/* Runs of two BLAS kernels: equal values are accepted and counted, different ones are
 * refused naming the kernels rather than "different builds or inputs". */
static void test_kernels(void)
{
    const char *out = tmp_db("kernels-out.db");
    qlt_shard_spec spec;
    qlt_shard_spec_init(&spec);
    spec.shard = (ql_shard){0, 2};
    spec.kernel = "OpenBLAS 0.3.21 SkylakeX";
    make_shard(out, &spec);

    const char *same = tmp_db("kernels-same.db");
    spec.kernel = "OpenBLAS 0.3.21 Haswell";
    make_shard(same, &spec);
    ql_error err;
    ql_merge_counts mc[1];
    CHECK_OK(merge(out, &same, 1, mc, &err), &err);
    CHECK_EQ_INT(mc[0].added, 0);
    CHECK(mc[0].other_kernel > 0);
    CHECK_EQ_INT(mc[0].other_kernel, mc[0].kept);
    CHECK(strcmp(mc[0].kernel_in, "OpenBLAS 0.3.21 Haswell") == 0);
    CHECK(strcmp(mc[0].kernel_out, "OpenBLAS 0.3.21 SkylakeX") == 0);

    const char *differ = tmp_db("kernels-differ.db");
    spec.perturb = 2;
    make_shard(differ, &spec);
    snapshot before = take(out);
    CHECK(merge(out, &differ, 1, NULL, &err) == QL_EINVAL);
    check_msg(&err, "but kld_mean differs (");
    check_msg(&err, "kernel Haswell vs SkylakeX");
    check_msg(&err, "OpenBLAS 0.3.21 Haswell in ");
    CHECK_MSG(strstr(err.msg, "different builds or inputs") == NULL, "%s", err.msg);
    check_untouched(out, &before, "kernels");
    free(before.bytes);

    /* The same kernel (or none recorded): the builds or inputs are to blame. */
    const char *plain = tmp_db("kernels-plain.db");
    spec.kernel = "OpenBLAS 0.3.21 SkylakeX";
    make_shard(plain, &spec);
    CHECK(merge(out, &plain, 1, NULL, &err) == QL_EINVAL);
    check_msg(&err, "different builds or inputs");
}

int main(void)
{
    timed("shards_equal_single", test_shards_equal_single);
    timed("idempotent", test_idempotent);
    timed("refuse_other_setup", test_refuse_other_setup);
    timed("refuse_other_values", test_refuse_other_values);
    timed("which_run_wins", test_which_run_wins);
    timed("bad_inputs", test_bad_inputs);
    timed("kernels", test_kernels);
    timed("v1_input", test_v1_input);
    timed("fixture_databases", test_fixture_databases);
    timed("large", test_large);
    timed("faults", test_faults);
    return qlt_done();
}
