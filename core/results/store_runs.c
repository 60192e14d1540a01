/* A run's lifecycle in the store: claim (begin or retry), finish with its results, fail,
 * interrupt, and the queries of run states (store_impl.h). */
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "experiment/records.h"
#include "formats/types.h"
#include "model/tensor_name.h"
#include "base/commit.h"
#include "ql_config.h"
#include "results/store.h"
#include "results/store_impl.h"

/* ================================================================ runs */

ql_status ql_store_find_done(ql_store *s, const char *config_hash, const char *model_sha256,
                             const char *dataset_sha256, int ctx, int chunks, int metrics_version,
                             int64_t *run_id, ql_error *err)
{
    *run_id = 0;
    static const char sql[] = "SELECT r.id FROM runs r"
                              " JOIN configs c ON c.id = r.config_id"
                              " JOIN models m ON m.id = r.model_id"
                              " JOIN datasets d ON d.id = r.dataset_id"
                              " WHERE c.hash = ?1 AND m.sha256 = ?2 AND d.sha256 = ?3"
                              " AND r.ctx = ?4 AND r.chunks = ?5 AND r.status = 'done'"
                              " AND r.metrics_version = ?6";
    sqlite3_stmt *st;
    ql_status rc = store_prep(s, sql, &st, err);
    if (rc)
        return rc;
    if ((rc = store_bind_text(s, st, 1, config_hash, err)) ||
        (rc = store_bind_text(s, st, 2, model_sha256, err)) ||
        (rc = store_bind_text(s, st, 3, dataset_sha256, err)) ||
        (rc = store_bind_count(s, st, 4, ctx, err)) ||
        (rc = store_bind_count(s, st, 5, chunks, err)) ||
        (rc = store_bind_count(s, st, 6, metrics_version, err)))
        goto out;
    int r = store_step(s, st);
    if (r == SQLITE_ROW)
        *run_id = sqlite3_column_int64(st, 0);
    else if (r != SQLITE_DONE)
        rc = store_db_fail(s, r, "looking for a finished run", err);
out:
    sqlite3_finalize(st);
    return rc;
}

ql_status ql_store_run_states(ql_store *s, const char *model_sha256, const char *dataset_sha256,
                              int ctx, int chunks, ql_store_run_state **out, size_t *n,
                              ql_error *err)
{
    *out = NULL;
    *n = 0;
    static const char sql[] = "SELECT c.hash, r.id, r.status, r.attempts, r.metrics_version"
                              " FROM runs r JOIN configs c ON c.id = r.config_id"
                              " JOIN models m ON m.id = r.model_id"
                              " JOIN datasets d ON d.id = r.dataset_id"
                              " WHERE m.sha256 = ?1 AND d.sha256 = ?2 AND r.ctx = ?3"
                              " AND r.chunks = ?4 ORDER BY c.hash";
    sqlite3_stmt *st;
    ql_status rc = store_prep(s, sql, &st, err);
    if (rc)
        return rc;
    if ((rc = store_bind_text(s, st, 1, model_sha256, err)) ||
        (rc = store_bind_text(s, st, 2, dataset_sha256, err)) ||
        (rc = store_bind_count(s, st, 3, ctx, err)) ||
        (rc = store_bind_count(s, st, 4, chunks, err)))
        goto out;
    size_t cap = 0;
    int r;
    while ((r = store_step(s, st)) == SQLITE_ROW) {
        if (!ql_grow((void **)out, &cap, *n + 1, sizeof **out)) {
            rc = ql_error_set(err, QL_ENOMEM, "%s: out of memory for the run states", s->path);
            goto out;
        }
        ql_store_run_state *x = &(*out)[(*n)++];
        ql_strlcpy(x->config_hash, (const char *)sqlite3_column_text(st, 0), sizeof x->config_hash);
        x->run_id = sqlite3_column_int64(st, 1);
        ql_strlcpy(x->status, (const char *)sqlite3_column_text(st, 2), sizeof x->status);
        x->attempts = sqlite3_column_int64(st, 3);
        x->metrics_version = sqlite3_column_int(st, 4);
    }
    if (r != SQLITE_DONE)
        rc = store_db_fail(s, r, "reading the run states", err);
out:
    sqlite3_finalize(st);
    if (rc) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

ql_status ql_store_run_brief_get(ql_store *s, int64_t run_id, ql_store_run_brief *out,
                                 ql_error *err)
{
    out->forward_seconds = (double)NAN;
    for (int i = 0; i < QL_N_METRICS; i++)
        out->metric[i] = (double)NAN;
    /* Every metric, derived ones by their SQL (over the metrics row m). */
    ql_strbuf q = {0};
    ql_strbuf_add(&q, "SELECT r.status, r.chunks, r.quant_seconds");
    const ql_metric_info *mi;
    size_t nm = ql_metrics(&mi);
    for (size_t i = 0; i < nm; i++) {
        if (mi[i].kind == QL_METRIC_KIND_DERIVED)
            ql_strbuf_add(&q, ", %s", mi[i].sql);
        else
            ql_strbuf_add(&q, ", m.%s", mi[i].name);
    }
    ql_strbuf_add(&q, " FROM runs r LEFT JOIN metrics m ON m.run_id = r.id WHERE r.id = ?1");
    sqlite3_stmt *st;
    ql_status rc = store_prep_sql(s, &q, &st, err);
    if (rc)
        return rc;
    if ((rc = store_bind_count(s, st, 1, run_id, err)))
        goto out;
    int r = store_step(s, st);
    if (r == SQLITE_ROW) {
        ql_strlcpy(out->status, (const char *)sqlite3_column_text(st, 0), sizeof out->status);
        out->chunks = sqlite3_column_int64(st, 1);
        out->forward_seconds = store_col_or_nan(st, 2);
        for (size_t i = 0; i < nm; i++)
            out->metric[i] = store_col_or_nan(st, 3 + (int)i);
    } else if (r == SQLITE_DONE) {
        rc = ql_error_set(err, QL_ENOTFOUND, "%s: no run %lld", s->path, (long long)run_id);
    } else {
        rc = store_db_fail(s, r, "reading the run", err);
    }
out:
    sqlite3_finalize(st);
    return rc;
}

static ql_status add_member(ql_store *s, const char *sweep, int64_t run_id, ql_error *err)
{
    ql_strbuf q = {0};
    store_insert_sql(store_table("sweep_runs"), STORE_ROW, &q);
    store_stmt st;
    ql_status rc = store_stmt_prep(s, &q, &st, err);
    if (rc)
        return rc;
    if (!(rc = store_put_text(&st, "sweep", sweep, err)) &&
        !(rc = store_put_count(&st, "run_id", run_id, err)))
        rc = store_stmt_done(&st, "recording the sweep's run", err);
    store_stmt_finalize(&st);
    return rc;
}

ql_status ql_store_add_to_sweep(ql_store *s, const char *sweep, int64_t run_id, ql_error *err)
{
    return add_member(s, sweep, run_id, err);
}

/* This host's name, "unknown" when it has none. */
static void host_name(char *host, size_t size)
{
    if (gethostname(host, size) != 0)
        ql_strlcpy(host, "unknown", size);
    host[size - 1] = '\0';
}

/* Binds the columns a claim writes (STORE_RUN_CLAIM: a new run's and a retry's): those of
 * info with a field, then the ones computed here. */
static ql_status bind_claim(store_stmt *q, const ql_store_run_key *key,
                            const ql_store_run_info *info, ql_error *err)
{
    char now[32], host[256];
    ql_utc_timestamp(now);
    host_name(host, sizeof host);
    const void *const src[STORE_RUN_SRCS] = {
        [STORE_RUN_SRC_KEY] = key, [STORE_RUN_SRC_INFO] = info};
    ql_status rc;
    if ((rc = store_put_fields(q, store_table("runs"), src, STORE_RUN_SRCS, err)) ||
        (rc = store_put_text(q, "status", "running", err)) ||
        (rc = store_put_text(q, "started", now, err)) ||
        (rc = store_put_count(q, "threads", info->threads > 0 ? info->threads : -1, err)) ||
        (rc = store_put_text(q, "host", host, err)) ||
        (rc = store_put_text(q, "qlab_version", QL_VERSION, err)) ||
        (rc = store_put_text(q, "qlab_commit", ql_commit, err)) ||
        (rc =
             store_put_count(q, "mem_budget", info->mem_budget > 0 ? info->mem_budget : -1, err)) ||
        (rc = store_put_count(q, "group_chunks", info->group_chunks > 0 ? info->group_chunks : -1,
                              err)))
        return rc;
    return store_put_count(q, "pid", (int64_t)getpid(), err);
}

/* Whether a running run belongs to a live process other than this one: its pid is
 * alive on this host. A run of another host cannot be checked and is taken over, as is
 * one without a pid (written before schema version 5). */
static bool run_owned_elsewhere(const char *host, sqlite3_stmt *st, int host_col, int pid_col)
{
    const char *h = (const char *)sqlite3_column_text(st, host_col);
    if (!h || strcmp(h, host) != 0 || sqlite3_column_type(st, pid_col) == SQLITE_NULL)
        return false;
    const int64_t pid = sqlite3_column_int64(st, pid_col);
    return pid != (int64_t)getpid() && ql_pid_alive((long)pid);
}

ql_status ql_store_begin_run(ql_store *s, const ql_store_run_key *key,
                             const ql_store_run_info *info, int64_t *run_id, ql_error *err)
{
    ql_store_claim claim;
    ql_status rc = ql_store_claim_run(s, key, info, run_id, &claim, err);
    if (rc || claim == QL_CLAIM_BEGUN)
        return rc;
    *run_id = 0;
    return ql_error_set(err, QL_EINVAL,
                        claim == QL_CLAIM_DONE
                            ? "%s: the run is already done with metrics version %d (a sweep "
                              "skips it)"
                            : "%s: the run is running in another live process",
                        s->path, info->metrics_version);
}

ql_status ql_store_claim_run(ql_store *s, const ql_store_run_key *key,
                             const ql_store_run_info *info, int64_t *run_id, ql_store_claim *claim,
                             ql_error *err)
{
    *run_id = 0;
    *claim = QL_CLAIM_BEGUN;
    char host[256];
    host_name(host, sizeof host);
    if (info->metrics_version <= 0)
        return ql_error_set(err, QL_EINVAL, "%s: metrics_version must be > 0", s->path);
    if (key->ctx <= 0 || key->chunks <= 0)
        return ql_error_set(err, QL_EINVAL, "%s: run with ctx %d, chunks %d (both must be > 0)",
                            s->path, key->ctx, key->chunks);
    sqlite3_stmt *st = NULL;
    store_stmt w = {.st = NULL};
    ql_status rc = store_begin(s, err);
    if (rc)
        return rc;
    if ((rc = store_prep(
             s,
             "SELECT id, status, metrics_version, host, pid FROM runs WHERE config_id = ?1"
             " AND model_id = ?2 AND dataset_id = ?3 AND ctx = ?4 AND chunks = ?5",
             &st, err)) ||
        (rc = store_bind_count(s, st, 1, key->config_id, err)) ||
        (rc = store_bind_count(s, st, 2, key->model_id, err)) ||
        (rc = store_bind_count(s, st, 3, key->dataset_id, err)) ||
        (rc = store_bind_count(s, st, 4, key->ctx, err)) ||
        (rc = store_bind_count(s, st, 5, key->chunks, err)))
        goto out;
    int r = store_step(s, st);
    int64_t id = 0;
    if (r == SQLITE_ROW) {
        id = sqlite3_column_int64(st, 0);
        const char *status = (const char *)sqlite3_column_text(st, 1);
        int64_t mv = sqlite3_column_int64(st, 2);
        /* Done meanwhile (by another process), or being run by one: not this one's. */
        if (status && ((strcmp(status, "done") == 0 && mv == info->metrics_version) ||
                       (strcmp(status, "running") == 0 && run_owned_elsewhere(host, st, 3, 4)))) {
            *claim = strcmp(status, "done") == 0 ? QL_CLAIM_DONE : QL_CLAIM_BUSY;
            *run_id = id;
            sqlite3_finalize(st);
            store_rollback(s);
            return QL_OK;
        }
    } else if (r != SQLITE_DONE) {
        rc = store_db_fail(s, r, "looking up the run", err);
        goto out;
    }
    sqlite3_finalize(st);
    st = NULL;

    ql_strbuf q = {0};
    if (id == 0) {
        store_insert_sql(store_table("runs"), STORE_RUN_KEY | STORE_RUN_CLAIM, &q);
        ql_strbuf_add(&q, " RETURNING id");
        if ((rc = store_stmt_prep(s, &q, &w, err)) || (rc = bind_claim(&w, key, info, err)) ||
            (rc = store_stmt_id(&w, "creating the run", &id, err)))
            goto out;
    } else {
        /* A retry: forget what the earlier attempt left. */
        for (size_t t = 0; t < store_n_tables; t++) {
            if (store_tables[t].pub.role != QL_TABLE_RUN_DATA)
                continue;
            ql_strbuf_add(&q, "DELETE FROM %s WHERE run_id = ?1", store_tables[t].pub.name);
            if ((rc = store_prep_sql(s, &q, &st, err)) ||
                (rc = store_bind_count(s, st, 1, id, err)) ||
                (rc = store_step_done(s, st, "clearing the earlier attempt", err)))
                goto out;
            sqlite3_finalize(st);
            st = NULL;
        }
        /* What a claim writes anew, what the earlier attempt's end wrote cleared. */
        store_update_sql(store_table("runs"), STORE_RUN_CLAIM, STORE_RUN_DONE | STORE_RUN_END, &q);
        ql_strbuf_add(&q, ", attempts = attempts + 1 WHERE id = :id");
        if ((rc = store_stmt_prep(s, &q, &w, err)) || (rc = bind_claim(&w, key, info, err)) ||
            (rc = store_put_count(&w, "id", id, err)) ||
            (rc = store_stmt_done(&w, "restarting the run", err)))
            goto out;
    }
    store_stmt_finalize(&w);
    if (info->sweep && (rc = add_member(s, info->sweep, id, err)))
        goto out;
    if ((rc = store_commit(s, err)))
        goto out;
    *run_id = id;
out:
    sqlite3_finalize(st);
    store_stmt_finalize(&w);
    if (rc)
        store_rollback(s);
    return rc;
}

ql_status ql_store_run_status(ql_store *s, int64_t run_id, char out[16], ql_error *err)
{
    ql_store_run_brief b;
    ql_status rc = ql_store_run_brief_get(s, run_id, &b, err);
    if (!rc)
        ql_strlcpy(out, b.status, 16);
    return rc;
}

static ql_status insert_metrics(ql_store *s, int64_t run_id, const ql_run_metrics *m, ql_error *err)
{
    ql_strbuf q = {0};
    store_insert_sql(store_table("metrics"), STORE_ROW, &q);
    store_stmt st;
    ql_status rc = store_stmt_prep(s, &q, &st, err);
    if (rc)
        return rc;
    if ((rc = store_put_count(&st, "run_id", run_id, err)))
        goto out;
    const ql_metric_info *mi;
    size_t nm = ql_metrics(&mi);
    for (size_t i = 0; i < nm; i++) {
        if (mi[i].kind == QL_METRIC_KIND_DERIVED)
            continue;
        double v = ql_run_metric(m, (ql_metric_id)i);
        if (mi[i].kind == QL_METRIC_KIND_COUNT && !isnan(v)) {
            if (!(v >= 0.0) || v != floor(v) || v > 9007199254740992.0) {
                rc = ql_error_set(err, QL_EINVAL,
                                  "%s: run %lld: metric %s = %g is not a whole count", s->path,
                                  (long long)run_id, mi[i].name, v);
                goto out;
            }
            rc = store_put_count(&st, mi[i].name, (int64_t)v, err);
        } else {
            rc = store_put_real(&st, mi[i].name, v, err);
        }
        if (rc)
            goto out;
    }
    rc = store_stmt_done(&st, "storing the metrics", err);
out:
    store_stmt_finalize(&st);
    return rc;
}

/* How the records of a run-data table are written: the columns with a field come from
 * the record (col_def.field); run_id and what check_bind binds (the columns computed
 * from the record, after checking it) are bound by name. */
typedef struct {
    const char *table;
    size_t size;      /* of a record */
    const char *what; /* "storing ..." */
    ql_status (*check_bind)(store_stmt *q, int64_t run_id, const void *rec, ql_error *err);
    void (*label)(const void *rec, char *buf, size_t size); /* prefix of a failed row, or NULL */
} run_rows;

static ql_status insert_run_rows(ql_store *s, const run_rows *w, int64_t run_id, const void *recs,
                                 size_t n, ql_error *err)
{
    if (n == 0)
        return QL_OK;
    const table_def *t = store_table(w->table);
    ql_strbuf q = {0};
    store_insert_sql(t, STORE_ROW, &q);
    store_stmt st;
    ql_status rc = store_stmt_prep(s, &q, &st, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < n && !rc; i++) {
        const void *rec = (const char *)recs + i * w->size;
        store_stmt_reset(&st);
        if ((rc = w->check_bind ? w->check_bind(&st, run_id, rec, err) : QL_OK) ||
            (rc = store_put_count(&st, "run_id", run_id, err)) ||
            (rc = store_put_fields(&st, t, &rec, 1, err)))
            break;
        if ((rc = store_stmt_done(&st, w->what, err)) && w->label) {
            char label[160];
            w->label(rec, label, sizeof label);
            ql_error_prefix(err, "%s", label);
        }
    }
    store_stmt_finalize(&st);
    return rc;
}

/* tensor_errors: the type names, the fallback and the layer, from a checked record. */
static ql_status tensor_check_bind(store_stmt *q, int64_t run_id, const void *rec, ql_error *err)
{
    const ql_tensor_record *t = rec;
    const char *name = t->tensor ? t->tensor : "";
    const ql_type_traits *req = ql_type_get(t->requested_type);
    const ql_type_traits *used = ql_type_get(t->used_type);
    bool fallback = t->used_type != t->requested_type;
    if (!*name || !req || !used || fallback != (t->fallback_reason != NULL) || t->n_rows < 0 ||
        t->n_cols < 0 || t->params < 0 || t->bytes < 0)
        return ql_error_set(err, QL_EINVAL,
                            "%s: run %lld: tensor '%s' (%s -> %s%s%s): invalid record (a "
                            "fallback needs a reason, types must be known, counts >= 0)",
                            q->s->path, (long long)run_id, name, ql_type_name(t->requested_type),
                            ql_type_name(t->used_type), t->fallback_reason ? ", reason: " : "",
                            t->fallback_reason ? t->fallback_reason : "");
    ql_status rc;
    if ((rc = store_put_text(q, "tensor", name, err)) ||
        (rc = store_put_count(q, "layer", ql_tensor_block(name, NULL), err)) ||
        (rc = store_put_text(q, "requested_type", req->name, err)) ||
        (rc = store_put_text(q, "used_type", used->name, err)))
        return rc;
    return store_put_count(q, "fallback", fallback ? 1 : 0, err);
}

static void tensor_label(const void *rec, char *buf, size_t size)
{
    const ql_tensor_record *t = rec;
    snprintf(buf, size, "tensor '%s': ", t->tensor ? t->tensor : "");
}

static const run_rows tensor_rows = {.table = "tensor_errors",
                                     .size = sizeof(ql_tensor_record),
                                     .what = "storing a tensor error",
                                     .check_bind = tensor_check_bind,
                                     .label = tensor_label};

/* act_roundings: a record is checked (a fallback needs its note). */
static ql_status act_check(store_stmt *q, int64_t run_id, const void *rec, ql_error *err)
{
    const ql_act_record *r = rec;
    if (!r->tensor || !*r->tensor || !r->requested || !r->used ||
        (strcmp(r->requested, r->used) != 0) != (r->note != NULL))
        return ql_error_set(err, QL_EINVAL,
                            "%s: run %lld: activation rounding of '%s': invalid record (a "
                            "fallback needs a note)",
                            q->s->path, (long long)run_id, r->tensor ? r->tensor : "");
    return QL_OK;
}

static const run_rows act_rows = {.table = "act_roundings",
                                  .size = sizeof(ql_act_record),
                                  .what = "storing an activation rounding",
                                  .check_bind = act_check};

/* Checks the per-chunk records against the run before anything is written:
 * one record per chunk 0..chunks-1, sane counts, token total = n_tokens. */
static ql_status check_chunks(ql_store *s, int64_t run_id, int64_t chunks,
                              const ql_chunk_record *ck, size_t n, double n_tokens, ql_error *err)
{
    if ((int64_t)n != chunks)
        return ql_error_set(err, QL_EINVAL,
                            "%s: run %lld: %zu per-chunk records for a run of %lld chunks (give "
                            "none or one per chunk)",
                            s->path, (long long)run_id, n, (long long)chunks);
    unsigned char *seen = calloc(n, 1);
    if (!seen)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", s->path);
    ql_status rc = QL_OK;
    double total = 0.0;
    for (size_t i = 0; i < n && !rc; i++) {
        const ql_chunk_record *c = &ck[i];
        if (c->chunk < 0 || (int64_t)c->chunk >= chunks)
            rc = ql_error_set(err, QL_EINVAL, "%s: run %lld: chunk index %d is outside 0..%lld",
                              s->path, (long long)run_id, (int)c->chunk, (long long)chunks - 1);
        else if (seen[c->chunk]++)
            rc = ql_error_set(err, QL_EINVAL, "%s: run %lld: chunk %d given twice", s->path,
                              (long long)run_id, (int)c->chunk);
        else if (c->n_tokens <= 0 || c->top1_count < -1 || c->top1_count > c->n_tokens)
            rc = ql_error_set(err, QL_EINVAL,
                              "%s: run %lld: chunk %d: n_tokens %lld must be > 0 and top1_count "
                              "%lld within 0..n_tokens (or -1)",
                              s->path, (long long)run_id, (int)c->chunk, (long long)c->n_tokens,
                              (long long)c->top1_count);
        total += (double)c->n_tokens;
    }
    free(seen);
    if (!rc && !isnan(n_tokens) && total != n_tokens)
        rc = ql_error_set(err, QL_EINVAL,
                          "%s: run %lld: the chunks hold %.0f scored tokens, the metrics %.0f",
                          s->path, (long long)run_id, total, n_tokens);
    return rc;
}

static void chunk_label(const void *rec, char *buf, size_t size)
{
    snprintf(buf, size, "chunk %d: ", (int)((const ql_chunk_record *)rec)->chunk);
}

static const run_rows chunk_rows = {.table = "chunk_metrics",
                                    .size = sizeof(ql_chunk_record),
                                    .what = "storing the chunk metrics",
                                    .label = chunk_label};

static const run_rows layer_rows = {
    .table = "layer_metrics", .size = sizeof(ql_layer_record), .what = "storing the layer metrics"};

static const run_rows load_rows = {.table = "expert_load",
                                   .size = sizeof(ql_expert_load_record),
                                   .what = "storing the expert loads"};

/* expert_errors: the layer, from the tensor's name. */
static ql_status expert_bind(store_stmt *q, int64_t run_id, const void *rec, ql_error *err)
{
    const ql_expert_record *x = rec;
    return store_put_count(q, "layer", ql_tensor_block(x->tensor, NULL), err);
}

static const run_rows expert_rows = {.table = "expert_errors",
                                     .size = sizeof(ql_expert_record),
                                     .what = "storing the expert errors",
                                     .check_bind = expert_bind};

ql_status ql_store_finish_run(ql_store *s, int64_t run_id, const ql_run_metrics *m,
                              const ql_tensor_record *te, size_t n_te, const ql_run_timing *t,
                              ql_error *err)
{
    ql_run_result r = {.metrics = m, .tensors = te, .n_tensors = n_te, .timing = t};
    return ql_store_finish_run_result(s, run_id, &r, err);
}

ql_status ql_store_finish_run_result(ql_store *s, int64_t run_id, const ql_run_result *res,
                                     ql_error *err)
{
    ql_run_timing none;
    const ql_run_timing *t = res->timing;
    if (!t) {
        ql_run_timing_init(&none);
        t = &none;
    }
    char now[32];
    ql_store_run_brief run;
    store_stmt w = {.st = NULL};
    ql_status rc = store_begin(s, err);
    if (rc)
        return rc;
    if ((rc = ql_store_run_brief_get(s, run_id, &run, err)))
        goto out;
    if (strcmp(run.status, "running") != 0) {
        rc = ql_error_set(err, QL_EINVAL, "%s: run %lld is %s, not running", s->path,
                          (long long)run_id, run.status);
        goto out;
    }
    if (res->n_chunks > 0 && (rc = check_chunks(s, run_id, run.chunks, res->chunks, res->n_chunks,
                                                res->metrics->n_tokens, err)))
        goto out;
    /* The shares of the type axes, from the tensor records (records.h: TENSORS). */
    ql_run_metrics m = *res->metrics;
    double share[QL_TENSOR_AXES];
    ql_tensor_shares(res->tensors, res->n_tensors, share);
    m.applied_body = share[QL_TENSOR_BODY];
    m.applied_head = share[QL_TENSOR_HEAD];
    m.applied_embd = share[QL_TENSOR_EMBD];
    if ((rc = insert_metrics(s, run_id, &m, err)) ||
        (rc = insert_run_rows(s, &tensor_rows, run_id, res->tensors, res->n_tensors, err)) ||
        (rc = insert_run_rows(s, &chunk_rows, run_id, res->chunks, res->n_chunks, err)) ||
        (rc = insert_run_rows(s, &act_rows, run_id, res->acts, res->n_acts, err)) ||
        (rc = insert_run_rows(s, &layer_rows, run_id, res->layers, res->n_layers, err)) ||
        (rc = insert_run_rows(s, &load_rows, run_id, res->loads, res->n_loads, err)) ||
        (rc = insert_run_rows(s, &expert_rows, run_id, res->experts, res->n_experts, err)))
        goto out;
    ql_utc_timestamp(now);
    ql_strbuf q = {0};
    store_update_sql(store_table("runs"), STORE_RUN_DONE, 0, &q);
    ql_strbuf_add(&q, " WHERE id = :id");
    const void *const src[STORE_RUN_SRCS] = {
        [STORE_RUN_SRC_TIMING] = t, [STORE_RUN_SRC_RESULT] = res};
    if ((rc = store_stmt_prep(s, &q, &w, err)) ||
        (rc = store_put_fields(&w, store_table("runs"), src, STORE_RUN_SRCS, err)) ||
        (rc = store_put_text(&w, "status", "done", err)) ||
        (rc = store_put_text(&w, "finished", now, err)) ||
        (rc = store_put_count(&w, "id", run_id, err)) ||
        (rc = store_stmt_done(&w, "marking the run done", err)))
        goto out;
    rc = store_commit(s, err);
out:
    store_stmt_finalize(&w);
    if (rc)
        store_rollback(s);
    return rc;
}

static ql_status end_run(ql_store *s, int64_t run_id, const char *status, const char *error,
                         double seconds, ql_error *err);

ql_status ql_store_fail_run(ql_store *s, int64_t run_id, const char *error, double seconds,
                            ql_error *err)
{
    return end_run(s, run_id, "failed", error, seconds, err);
}

ql_status ql_store_interrupt_run(ql_store *s, int64_t run_id, const char *why, double seconds,
                                 ql_error *err)
{
    return end_run(s, run_id, "interrupted", why, seconds, err);
}

/* Marks a running run failed or interrupted, with the reason. */
static ql_status end_run(ql_store *s, int64_t run_id, const char *status, const char *error,
                         double seconds, ql_error *err)
{
    char now[32];
    ql_utc_timestamp(now);
    ql_strbuf q = {0};
    store_update_sql(store_table("runs"), STORE_RUN_END, 0, &q);
    ql_strbuf_add(&q, " WHERE id = :id AND status = 'running'");
    store_stmt st;
    ql_status rc = store_stmt_prep(s, &q, &st, err);
    if (rc)
        return rc;
    if ((rc = store_put_text(&st, "status", status, err)) ||
        (rc = store_put_text(&st, "error", error && *error ? error : "unknown error", err)) ||
        (rc = store_put_text(&st, "finished", now, err)) ||
        (rc = store_put_real(&st, "seconds", seconds, err)) ||
        (rc = store_put_count(&st, "id", run_id, err)) ||
        (rc = store_stmt_done(&st, "recording the failure", err)))
        goto out;
    if (sqlite3_changes(s->db) != 1)
        rc =
            ql_error_set(err, QL_EINVAL, "%s: run %lld is not running", s->path, (long long)run_id);
out:
    store_stmt_finalize(&st);
    return rc;
}
