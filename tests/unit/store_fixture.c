#include "store_fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/util.h"
#include "experiment/config.h"
#include "formats/types.h"
#include "qltest.h"
#include "results/store.h"

void qlt_store_add_inputs(ql_store *s, int64_t *model, int64_t *text)
{
    ql_error err;
    ql_store_model m;
    ql_store_model_init(&m);
    m.sha256 = QLT_FIXTURE_MODEL_SHA;
    m.path = "m.gguf";
    ql_store_dataset d;
    ql_store_dataset_init(&d);
    d.sha256 = QLT_FIXTURE_TEXT_SHA;
    d.name = "text";
    CHECK_OK(ql_store_upsert_model(s, &m, model, &err), &err);
    CHECK_OK(ql_store_upsert_dataset(s, &d, text, &err), &err);
}

bool qlt_v1_fixture(const char *path)
{
    return qlt_dump_fixture(path, "v1-fixture.sql");
}

bool qlt_dump_fixture(const char *path, const char *name)
{
    char *sql = NULL, rel[256];
    size_t len;
    ql_error err;
    snprintf(rel, sizeof rel, "tests/data/store/%s", name);
    CHECK_OK(ql_file_read_all(qlt_source(rel), &sql, &len, &err), &err);
    if (!sql)
        return false;
    sqlite3 *db;
    bool ok = sqlite3_open(path, &db) == SQLITE_OK;
    CHECK(ok);
    if (ok) {
        ok = sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK;
        CHECK_MSG(ok, "%s", sqlite3_errmsg(db));
    }
    sqlite3_close(db);
    free(sql);
    return ok;
}

void qlt_remove_db(const char *path)
{
    const char *suffix[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        char f[4200];
        snprintf(f, sizeof f, "%s%s", path, suffix[i]);
        unlink(f);
    }
}

const char *qlt_tmp_db(const char *name)
{
    const char *p = qlt_tmp(name);
    qlt_remove_db(p);
    return p;
}

int64_t qlt_sql_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    int64_t v = -999;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    else
        fprintf(stderr, "qlt_sql_int(%s): %s\n", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return v;
}

double qlt_sql_real(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    double v = -999;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_type(st, 0) == SQLITE_NULL ? (double)NAN : sqlite3_column_double(st, 0);
    else
        fprintf(stderr, "qlt_sql_real(%s): %s\n", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return v;
}

/* Metrics of a done run; the values are exact in binary so outputs can be compared as text. */
typedef struct {
    const char *weight_type;
    double bpw, ppl, kld_mean, zlib_bytes;
} fixture_run;

static ql_status add_run(ql_store *s, int64_t model, int64_t text, const char *canon,
                         const fixture_run *fr, const char *fail, bool leave_running, ql_error *err)
{
    ql_config c;
    ql_status st = ql_config_from_string(canon, &c, err);
    int64_t cid, run;
    if (st || (st = ql_store_upsert_config(s, &c, &cid, err)))
        return st;
    ql_store_run_key key = {cid, model, text, QLT_FIXTURE_CTX, QLT_FIXTURE_CHUNKS};
    ql_store_run_info info = {QLT_FIXTURE_SWEEP, 2, QLT_FIXTURE_METRICS_VERSION, NULL, NULL, 0, 0};
    if ((st = ql_store_begin_run(s, &key, &info, &run, err)))
        return st;
    if (leave_running)
        return QL_OK;
    if (fail)
        return ql_store_fail_run(s, run, fail, 0.5, err);

    ql_run_metrics m;
    ql_run_metrics_init(&m);
    m.ppl = fr->ppl;
    m.ppl_err = 0.25;
    m.ppl_ref = 10.0;
    m.ppl_ref_err = 0.25;
    m.ln_ppl_ratio = log(fr->ppl / 10.0);
    m.kld_mean = fr->kld_mean;
    m.top1_agree = 0.875;
    m.n_tokens = 252;
    m.bpw = fr->bpw;
    m.bytes = fr->bpw * 1024.0;
    m.params = 8192;
    m.zlib_bytes = fr->zlib_bytes; /* NAN for most: not measured */

    ql_type wt = c.weight_type;
    ql_tensor_record te[3] = {
        {"token_embd.weight", wt, wt, NULL, 512, 64, 32768, 1000, 0.0625, 0.25, (double)NAN,
         (double)NAN, -1, "the embedding type"},
        {"blk.0.attn_q.weight", wt, wt, NULL, 64, 64, 4096, 500, 0.125, 0.5, 2.0, 0.015625, -1,
         "the weight type"},
        {"blk.0.ffn_down.weight", QL_TYPE_Q4_K, QL_TYPE_Q5_0,
         "row length 172 is not a multiple of 256", 64, 172, 11008, 700, 0.25, 1.0, 4.0, 0.03125,
         -1, "--tensor-type 'ffn_down=Q4_K'"},
    };
    ql_run_timing t = {.seconds = 12.5,
                       .quantize_seconds = 1.0,
                       .ref_seconds = 4.0,
                       .forward_seconds = 5.0,
                       .forward_alone_seconds = (double)NAN};
    return ql_store_finish_run(s, run, &m, te, 3, &t, err);
}

ql_status qlt_store_fixture(const char *path, ql_error *err)
{
    ql_store *s;
    ql_status st = ql_store_open(path, NULL, &s, err);
    if (st)
        return st;
    ql_store_model model;
    ql_store_model_init(&model);
    model.sha256 = QLT_FIXTURE_MODEL_SHA;
    model.path = "models/fake.gguf";
    model.name = "fake-model";
    model.arch = "llama";
    model.params = 8192;
    model.n_layer = 1;
    ql_store_dataset text;
    ql_store_dataset_init(&text);
    text.sha256 = QLT_FIXTURE_TEXT_SHA;
    text.name = "fake-text";
    text.bytes = 4096;
    int64_t mid, tid;
    static const fixture_run runs[] = {
        {"F16", 16.0, 10.125, 0.0001220703125, (double)NAN},
        {"Q8_0", 8.5, 10.5, 0.001953125, 1000.0},
        {"Q4_0", 4.5, 12.25, 0.0625, (double)NAN},
    };
    if ((st = ql_store_upsert_model(s, &model, &mid, err)) ||
        (st = ql_store_upsert_dataset(s, &text, &tid, err)))
        goto out;
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char canon[64];
        snprintf(canon, sizeof canon, "weight_type=%s", runs[i].weight_type);
        if ((st = add_run(s, mid, tid, canon, &runs[i], NULL, false, err)))
            goto out;
    }
    if ((st = add_run(s, mid, tid, "weight_type=IQ4_NL", NULL, QLT_FIXTURE_ERROR, false, err)) ||
        (st = add_run(s, mid, tid, "weight_type=Q5_0", NULL, NULL, true, err)))
        goto out;
out:
    ql_store_close(s);
    return st;
}
