/* Schema version 2 of the results store: per-chunk sums written inside
 * finish_run's transaction (validation, rollback on faults, cleared on retry,
 * the chunk_results view) and the migration of a real version-1 database. */
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "experiment/config.h"
#include "qltest.h"
#include "results/store.h"
#include "store_fixture.h"

#define CTX    128
#define CHUNKS 4
/* Scored tokens per chunk at ctx 128: positions 64..126. */
#define TOKENS_PER_CHUNK 63

static int64_t begin(ql_store *s, const char *canon, int64_t model, int64_t text)
{
    ql_config c;
    ql_error err;
    int64_t cid = 0, run = 0;
    CHECK_OK(ql_config_from_string(canon, &c, &err), &err);
    CHECK_OK(ql_store_upsert_config(s, &c, &cid, &err), &err);
    ql_store_run_key key = {cid, model, text, CTX, CHUNKS};
    ql_store_run_info info = {"chunks", 2, 1, NULL, NULL, 0, 0};
    CHECK_OK(ql_store_begin_run(s, &key, &info, &run, &err), &err);
    return run;
}

/* Chunk i: kld 0.25 * (i + 1) per token, dyadic so sums are exact. */
static void make_chunks(ql_chunk_record *ck, ql_run_metrics *m)
{
    ql_run_metrics_init(m);
    double kld = 0.0;
    for (int i = 0; i < CHUNKS; i++) {
        ck[i] = (ql_chunk_record){
            .chunk = CHUNKS - 1 - i, /* any order */
            .n_tokens = TOKENS_PER_CHUNK,
            .kld_sum = 0.25 * (i + 1) * TOKENS_PER_CHUNK,
            .nll_sum = 2.5 * TOKENS_PER_CHUNK,
            .nll_ref_sum = 2.0 * TOKENS_PER_CHUNK,
            .top1_count = 60 - i,
        };
        kld += ck[i].kld_sum;
    }
    m->n_tokens = CHUNKS * TOKENS_PER_CHUNK;
    m->kld_mean = kld / m->n_tokens;
}

static void test_round_trip_and_validation(void)
{
    const char *path = qlt_tmp_db("chunks.db");
    ql_store *s = NULL;
    ql_error err;
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    if (!s)
        return;
    sqlite3 *db = ql_store_handle(s);
    CHECK_EQ_INT(qlt_sql_int(db, "PRAGMA user_version"), QL_STORE_SCHEMA_VERSION);
    int64_t model, text;
    qlt_store_add_inputs(s, &model, &text);

    ql_chunk_record ck[CHUNKS];
    ql_run_metrics m;
    make_chunks(ck, &m);
    int64_t run = begin(s, "weight_type=Q4_0", model, text);
    ql_run_result res = {.metrics = &m, .chunks = ck, .n_chunks = CHUNKS};

    /* Invalid records: each refused before anything is written. */
    struct {
        const char *what;
        void (*spoil)(ql_chunk_record *c, size_t *n, ql_run_metrics *mm);
        const char *msg;
    } bad[] = {
        {"too few", NULL, "3 per-chunk records for a run of 4 chunks"},
        {"index out of range", NULL, "chunk index 4 is outside 0..3"},
        {"duplicate", NULL, "chunk 3 given twice"},
        {"zero tokens", NULL, "n_tokens 0 must be > 0"},
        {"top1 above n", NULL, "top1_count 64 within 0..n_tokens"},
        {"token total", NULL, "the chunks hold 252 scored tokens, the metrics 251"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ql_chunk_record c[CHUNKS];
        memcpy(c, ck, sizeof c);
        ql_run_metrics mm = m;
        size_t n = CHUNKS;
        switch (i) {
        case 0:
            n = 3;
            break;
        case 1:
            c[0].chunk = 4;
            break;
        case 2:
            c[1].chunk = 3;
            break;
        case 3:
            c[2].n_tokens = 0;
            break;
        case 4:
            c[2].top1_count = 64;
            break;
        default:
            mm.n_tokens = 251;
            break;
        }
        ql_run_result r = {.metrics = &mm, .chunks = c, .n_chunks = n};
        CHECK_MSG(ql_store_finish_run_result(s, run, &r, &err) == QL_EINVAL, "%s", bad[i].what);
        CHECK_MSG(strstr(err.msg, bad[i].msg) != NULL, "%s: %s", bad[i].what, err.msg);
        CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM chunk_metrics"), 0);
        CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM metrics"), 0);
        CHECK(sqlite3_get_autocommit(db));
    }

    CHECK_OK(ql_store_finish_run_result(s, run, &res, &err), &err);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM chunk_metrics"), CHUNKS);
    /* Stored sums reproduce the run's mean; the view gives per-chunk means. */
    CHECK(qlt_sql_real(db, "SELECT sum(kld_sum) / sum(n_tokens) FROM chunk_metrics") == m.kld_mean);
    CHECK(qlt_sql_real(db, "SELECT kld_mean FROM chunk_results WHERE chunk = 3") == 0.25);
    CHECK(qlt_sql_real(db, "SELECT ln_ppl_ratio FROM chunk_results WHERE chunk = 0") == 0.5);
    CHECK(qlt_sql_real(db, "SELECT top1_count FROM chunk_results WHERE chunk = 0") == 57);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM chunk_results WHERE weight_type = 'Q4_0'"),
                 CHUNKS);

    /* NULL for what was not measured. */
    int64_t run2 = begin(s, "weight_type=Q8_0", model, text);
    ql_chunk_record partial[CHUNKS];
    memcpy(partial, ck, sizeof partial);
    for (int i = 0; i < CHUNKS; i++) {
        partial[i].nll_sum = (double)NAN;
        partial[i].top1_count = -1;
    }
    ql_run_result r2 = {.metrics = &m, .chunks = partial, .n_chunks = CHUNKS};
    CHECK_OK(ql_store_finish_run_result(s, run2, &r2, &err), &err);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM chunk_metrics WHERE nll_sum IS NULL AND "
                                 "top1_count IS NULL"),
                 CHUNKS);

    /* A run of an older metrics version is retried: its chunk rows go with it. */
    ql_config c;
    CHECK_OK(ql_config_from_string("weight_type=Q4_0", &c, &err), &err);
    int64_t cid;
    CHECK_OK(ql_store_upsert_config(s, &c, &cid, &err), &err);
    ql_store_run_key key = {cid, model, text, CTX, CHUNKS};
    ql_store_run_info info = {"chunks", 2, 2, NULL, NULL, 0, 0};
    int64_t again;
    CHECK_OK(ql_store_begin_run(s, &key, &info, &again, &err), &err);
    CHECK_EQ_INT(again, run);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM chunk_metrics"), CHUNKS);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM chunk_metrics WHERE run_id = %lld",
             (long long)run);
    CHECK_EQ_INT(qlt_sql_int(db, sql), 0);
    ql_store_close(s);
}

/* A failure at any SQLite call of finish_run_result leaves no chunk row behind. */
static void test_faults(void)
{
    const char *path = qlt_tmp_db("chunk-faults.db");
    ql_store *s = NULL;
    ql_error err;
    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    if (!s)
        return;
    sqlite3 *db = ql_store_handle(s);
    int64_t model, text;
    qlt_store_add_inputs(s, &model, &text);
    ql_chunk_record ck[CHUNKS];
    ql_run_metrics m;
    make_chunks(ck, &m);
    int64_t run = begin(s, "weight_type=Q5_1", model, text);
    ql_run_result res = {.metrics = &m, .chunks = ck, .n_chunks = CHUNKS};
    int failures = 0;
    for (int n = 1; n < 1000; n++) {
        ql_store_inject_fault(s, n);
        ql_status st = ql_store_finish_run_result(s, run, &res, &err);
        ql_store_inject_fault(s, 0);
        if (st == QL_OK)
            break;
        failures++;
        CHECK_MSG(st == QL_EDB && strstr(err.msg, "injected fault"), "fault %d: %s", n, err.msg);
        CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM chunk_metrics"), 0);
        CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM runs WHERE status = 'running'"), 1);
    }
    /* The chunk inserts alone are 4 x (3 binds + 4 binds + step) plus a prepare. */
    CHECK_MSG(failures > 30, "only %d failure points", failures);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM chunk_metrics"), CHUNKS);
    ql_store_close(s);
}

/* tests/data/store/v1-fixture.sql is a dump of a database written by qlab with
 * schema version 1; replaying it gives a true v1 file to migrate. */
static void test_migration_from_v1(void)
{
    const char *path = qlt_tmp_db("v1.db");
    if (!qlt_v1_fixture(path))
        return;
    ql_error err;
    sqlite3 *raw;

    /* Read-only access does not migrate: it says how to. */
    ql_store *s = NULL;
    ql_store_options ro = {.readonly = true};
    CHECK(ql_store_open(path, &ro, &s, &err) == QL_EDB);
    CHECK_MSG(strstr(err.msg, "schema version 1 is older than") != NULL, "%s", err.msg);

    /* Faults during the migration leave a v1 database that the next open migrates. */
    int failures = 0;
    for (int n = 1; n < 200; n++) {
        ql_store_options opt = {.fault_after = n};
        ql_status st = ql_store_open(path, &opt, &s, &err);
        if (st == QL_OK) {
            ql_store_close(s);
            break;
        }
        failures++;
        CHECK(s == NULL);
        CHECK(sqlite3_open(path, &raw) == SQLITE_OK);
        sqlite3_stmt *q;
        CHECK(sqlite3_prepare_v2(raw, "PRAGMA user_version", -1, &q, NULL) == SQLITE_OK);
        CHECK(sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 0) == 1);
        sqlite3_finalize(q);
        sqlite3_close(raw);
    }
    CHECK(failures > 5);

    CHECK_OK(ql_store_open(path, NULL, &s, &err), &err);
    if (!s)
        return;
    sqlite3 *db = ql_store_handle(s);
    CHECK_EQ_INT(qlt_sql_int(db, "PRAGMA user_version"), QL_STORE_SCHEMA_VERSION);
    CHECK_EQ_INT(qlt_sql_int(db,
                             "SELECT count(*) FROM sqlite_master WHERE name IN ('chunk_metrics', "
                             "'chunk_results')"),
                 2);
    /* Everything of version 1 is still there. */
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM runs"), 5);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM results"), 3);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM tensor_results"), 9);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM failed_runs"), 1);
    CHECK(qlt_sql_real(db, "SELECT kld_mean FROM results WHERE weight_type = 'Q4_0'") == 0.0625);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM chunk_metrics"), 0);

    /* The interrupted Q5_0 run of the fixture is retried and finished with chunks. */
    int64_t model, text;
    qlt_store_add_inputs(s, &model, &text);
    ql_config c;
    CHECK_OK(ql_config_from_string("weight_type=Q5_0", &c, &err), &err);
    int64_t cid, run;
    CHECK_OK(ql_store_upsert_config(s, &c, &cid, &err), &err);
    ql_store_run_key key = {cid, model, text, QLT_FIXTURE_CTX, QLT_FIXTURE_CHUNKS};
    ql_store_run_info info = {QLT_FIXTURE_SWEEP, 2, QLT_FIXTURE_METRICS_VERSION, NULL, NULL, 0, 0};
    CHECK_OK(ql_store_begin_run(s, &key, &info, &run, &err), &err);
    ql_chunk_record ck[QLT_FIXTURE_CHUNKS];
    ql_run_metrics m;
    make_chunks(ck, &m);
    ql_run_result res = {.metrics = &m, .chunks = ck, .n_chunks = QLT_FIXTURE_CHUNKS};
    CHECK_OK(ql_store_finish_run_result(s, run, &res, &err), &err);
    CHECK_EQ_INT(qlt_sql_int(db, "SELECT count(*) FROM chunk_results WHERE weight_type = 'Q5_0'"),
                 QLT_FIXTURE_CHUNKS);
    ql_store_close(s);

    /* Now read-only access works. */
    CHECK_OK(ql_store_open(path, &ro, &s, &err), &err);
    ql_store_close(s);
}

int main(void)
{
    test_round_trip_and_validation();
    test_faults();
    test_migration_from_v1();
    return qlt_done();
}
