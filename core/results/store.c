/* The store's identities (models, datasets, configs) and sensitivity rows; the rest of the
 * store is in store_db.c, store_schema.c, store_migrate.c and store_runs.c (store_impl.h). */
#include "results/store.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "experiment/config.h"
#include "formats/types.h"
#include "ql_config.h"
#include "results/store_impl.h"

/* ================================================================ identities */

void ql_store_model_init(ql_store_model *m)
{
    memset(m, 0, sizeof *m);
    m->file_bytes = m->params = m->n_layer = m->n_embd = m->n_ff = -1;
    m->n_head = m->n_head_kv = m->n_vocab = m->n_ctx_train = -1;
}

void ql_store_dataset_init(ql_store_dataset *d)
{
    memset(d, 0, sizeof *d);
    d->bytes = d->tokens = -1;
}

static bool is_sha256(const char *h)
{
    if (!h || strlen(h) != 64)
        return false;
    for (int i = 0; i < 64; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return false;
    return true;
}

ql_status ql_store_upsert_model(ql_store *s, const ql_store_model *m, int64_t *id, ql_error *err)
{
    if (!is_sha256(m->sha256))
        return ql_error_set(err, QL_EINVAL, "%s: model '%s': sha256 '%s' is not 64 hex digits",
                            s->path, m->path ? m->path : "?", m->sha256 ? m->sha256 : "(null)");
    if (!m->path)
        return ql_error_set(err, QL_EINVAL, "%s: model %.12s: no path", s->path, m->sha256);
    static const char sql[] =
        "INSERT INTO models (sha256, path, name, arch, file_bytes, params, n_layer, n_embd, n_ff,"
        " n_head, n_head_kv, n_vocab, n_ctx_train)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
        " ON CONFLICT (sha256) DO UPDATE SET path = excluded.path,"
        " name = coalesce(name, excluded.name), arch = coalesce(arch, excluded.arch),"
        " file_bytes = coalesce(file_bytes, excluded.file_bytes),"
        " params = coalesce(params, excluded.params),"
        " n_layer = coalesce(n_layer, excluded.n_layer),"
        " n_embd = coalesce(n_embd, excluded.n_embd), n_ff = coalesce(n_ff, excluded.n_ff),"
        " n_head = coalesce(n_head, excluded.n_head),"
        " n_head_kv = coalesce(n_head_kv, excluded.n_head_kv),"
        " n_vocab = coalesce(n_vocab, excluded.n_vocab),"
        " n_ctx_train = coalesce(n_ctx_train, excluded.n_ctx_train)"
        " RETURNING id";
    sqlite3_stmt *st;
    ql_status rc = store_prep(s, sql, &st, err);
    if (rc)
        return rc;
    const int64_t counts[] = {m->file_bytes, m->params,    m->n_layer, m->n_embd,     m->n_ff,
                              m->n_head,     m->n_head_kv, m->n_vocab, m->n_ctx_train};
    if ((rc = store_bind_text(s, st, 1, m->sha256, err)) ||
        (rc = store_bind_text(s, st, 2, m->path, err)) ||
        (rc = store_bind_text(s, st, 3, m->name, err)) ||
        (rc = store_bind_text(s, st, 4, m->arch, err)))
        goto out;
    for (int i = 0; i < 9; i++)
        if ((rc = store_bind_count(s, st, 5 + i, counts[i], err)))
            goto out;
    rc = store_step_id(s, st, "storing the model", id, err);
out:
    sqlite3_finalize(st);
    return rc;
}

ql_status ql_store_upsert_dataset(ql_store *s, const ql_store_dataset *d, int64_t *id,
                                  ql_error *err)
{
    if (!is_sha256(d->sha256))
        return ql_error_set(err, QL_EINVAL, "%s: dataset '%s': sha256 '%s' is not 64 hex digits",
                            s->path, d->name ? d->name : "?", d->sha256 ? d->sha256 : "(null)");
    if (!d->name || !*d->name)
        return ql_error_set(err, QL_EINVAL, "%s: dataset %.12s: no name", s->path, d->sha256);
    static const char sql[] =
        "INSERT INTO datasets (sha256, name, path, bytes, tokens, tokens_model_id)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
        " ON CONFLICT (sha256) DO UPDATE SET path = coalesce(excluded.path, path),"
        " bytes = coalesce(bytes, excluded.bytes),"
        " tokens_model_id = CASE WHEN tokens IS NULL THEN excluded.tokens_model_id"
        "                   ELSE tokens_model_id END,"
        " tokens = coalesce(tokens, excluded.tokens)"
        " RETURNING id";
    sqlite3_stmt *st;
    ql_status rc = store_prep(s, sql, &st, err);
    if (rc)
        return rc;
    if ((rc = store_bind_text(s, st, 1, d->sha256, err)) ||
        (rc = store_bind_text(s, st, 2, d->name, err)) ||
        (rc = store_bind_text(s, st, 3, d->path, err)) ||
        (rc = store_bind_count(s, st, 4, d->bytes, err)) ||
        (rc = store_bind_count(s, st, 5, d->tokens, err)) ||
        (rc = store_bind_count(s, st, 6, d->tokens >= 0 ? d->tokens_model : -1, err)))
        goto out;
    rc = store_step_id(s, st, "storing the dataset", id, err);
out:
    sqlite3_finalize(st);
    return rc;
}

ql_status ql_store_upsert_config(ql_store *s, const ql_config *c, int64_t *id, ql_error *err)
{
    char canonical[QL_CONFIG_TEXT_MAX], hash[65];
    ql_config_to_string(c, canonical, sizeof canonical);
    ql_config_hash(c, hash);

    /* hash, canonical, then every configs column of config.h. */
    const ql_config_column *cols;
    size_t n = ql_config_columns(&cols);
    sqlbuf q = {.len = 0};
    store_sql_add(&q, "INSERT INTO configs (hash, canonical");
    for (size_t i = 0; i < n; i++)
        store_sql_add(&q, ", %s", cols[i].name);
    store_sql_add(&q, ") VALUES (?1, ?2");
    for (size_t i = 0; i < n; i++)
        store_sql_add(&q, ", ?%zu", i + 3);
    store_sql_add(&q, ") ON CONFLICT (hash) DO NOTHING");
    sqlite3_stmt *st;
    ql_status rc = store_prep(s, q.text, &st, err);
    if (rc)
        return rc;
    if ((rc = store_bind_text(s, st, 1, hash, err)) ||
        (rc = store_bind_text(s, st, 2, canonical, err)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        char text[QL_CONFIG_VALUE_MAX];
        double num;
        int idx = (int)i + 3;
        ql_config_column_value(c, i, text, sizeof text, &num);
        if (cols[i].type == QL_COLUMN_TEXT)
            rc = store_bind_text(s, st, idx, text, err);
        else if (cols[i].type == QL_COLUMN_INTEGER)
            rc = store_bind_count(s, st, idx, isnan(num) ? -1 : (int64_t)num, err);
        else
            rc = store_bind_real(s, st, idx, num, err);
        if (rc)
            goto out;
    }
    if ((rc = store_step_done(s, st, "storing the config", err)))
        goto out;
    sqlite3_finalize(st);

    if ((rc = store_prep(s, "SELECT id, canonical FROM configs WHERE hash = ?1", &st, err)))
        return rc;
    if ((rc = store_bind_text(s, st, 1, hash, err)))
        goto out;
    int r = store_step(s, st);
    if (r != SQLITE_ROW) {
        rc = r == SQLITE_DONE
                 ? ql_error_set(err, QL_EDB, "%s: config %.12s vanished", s->path, hash)
                 : store_db_fail(s, r, "reading the config", err);
        goto out;
    }
    const char *stored = (const char *)sqlite3_column_text(st, 1);
    if (!stored || strcmp(stored, canonical) != 0) {
        rc = ql_error_set(err, QL_EDB,
                          "%s: config %.12s is stored as '%s' but is now '%s' (the canonical "
                          "form changed?)",
                          s->path, hash, stored ? stored : "", canonical);
        goto out;
    }
    *id = sqlite3_column_int64(st, 0);
out:
    sqlite3_finalize(st);
    return rc;
}

/* ------------------------------------------------------------------------- */
/* Sensitivity                                                                */

#define SENS_KEY_WHERE                                                                             \
    "model_sha256 = ?1 AND text_sha256 = ?2 AND ctx = ?3 AND chunks = ?4 AND imatrix_sha256 = ?5"  \
    " AND metrics_version = ?6 AND tensor = ?7 AND type = ?8 AND grouping = ?9"

static ql_status bind_sens_key(ql_store *s, sqlite3_stmt *st, const ql_store_sens_key *k,
                               const char *tensor, int32_t type, ql_error *err)
{
    ql_status rc;
    if ((rc = store_bind_text(s, st, 1, k->model_sha256, err)) ||
        (rc = store_bind_text(s, st, 2, k->text_sha256, err)) ||
        (rc = store_bind_count(s, st, 3, k->ctx, err)) ||
        (rc = store_bind_count(s, st, 4, k->chunks, err)) ||
        (rc = store_bind_text(s, st, 5, k->imatrix_sha256, err)) ||
        (rc = store_bind_count(s, st, 6, k->metrics_version, err)) ||
        (rc = store_bind_text(s, st, 7, tensor, err)) ||
        (rc = store_bind_text(s, st, 8, ql_type_name(type), err)))
        return rc;
    return store_bind_text(s, st, 9, k->grouping, err);
}

ql_status ql_store_sensitivity_get(ql_store *s, const ql_store_sens_key *key, const char *tensor,
                                   int32_t type, ql_store_sens_row *out, bool *found, ql_error *err)
{
    *found = false;
    sqlite3_stmt *st;
    ql_status rc =
        store_prep(s,
                   "SELECT bytes, kld_mean, kld_mean_err, ln_ppl_ratio, ln_ppl_ratio_err,"
                   " seconds FROM sensitivity WHERE " SENS_KEY_WHERE,
                   &st, err);
    if (rc)
        return rc;
    if (!(rc = bind_sens_key(s, st, key, tensor, type, err))) {
        int r = store_step(s, st);
        if (r == SQLITE_ROW) {
            out->bytes = sqlite3_column_int64(st, 0);
            out->kld_mean = store_col_or_nan(st, 1);
            out->kld_mean_err = store_col_or_nan(st, 2);
            out->ln_ppl_ratio = store_col_or_nan(st, 3);
            out->ln_ppl_ratio_err = store_col_or_nan(st, 4);
            out->seconds = store_col_or_nan(st, 5);
            *found = true;
        } else if (r != SQLITE_DONE) {
            rc = store_db_fail(s, r, "reading a sensitivity", err);
        }
    }
    sqlite3_finalize(st);
    return rc;
}

ql_status ql_store_sensitivity_put(ql_store *s, const ql_store_sens_key *key,
                                   const ql_store_sens_row *row, ql_error *err)
{
    sqlite3_stmt *st;
    ql_status rc =
        store_prep(s,
                   "INSERT OR IGNORE INTO sensitivity (model_sha256, text_sha256, ctx, chunks,"
                   " imatrix_sha256, metrics_version, tensor, type, grouping, text, layer, kind,"
                   " bytes, kld_mean, kld_mean_err, ln_ppl_ratio, ln_ppl_ratio_err, seconds,"
                   " qlab_version, n_tensors, blas_kernel) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,"
                   " ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
                   &st, err);
    if (rc)
        return rc;
    if (!(rc = bind_sens_key(s, st, key, row->tensor, row->type, err)) &&
        !(rc = store_bind_text(s, st, 10, key->text_name, err)) &&
        !(rc = ql_store_bind_int64(s, st, 11, row->layer, "binding the layer", err)) &&
        !(rc = store_bind_text(s, st, 12, row->kind, err)) &&
        !(rc = store_bind_count(s, st, 13, row->bytes, err)) &&
        !(rc = store_bind_real(s, st, 14, row->kld_mean, err)) &&
        !(rc = store_bind_real(s, st, 15, row->kld_mean_err, err)) &&
        !(rc = store_bind_real(s, st, 16, row->ln_ppl_ratio, err)) &&
        !(rc = store_bind_real(s, st, 17, row->ln_ppl_ratio_err, err)) &&
        !(rc = store_bind_real(s, st, 18, row->seconds, err)) &&
        !(rc = store_bind_text(s, st, 19, QL_VERSION, err)) &&
        !(rc = store_bind_count(s, st, 20, row->n_tensors, err)) &&
        !(rc = store_bind_text(s, st, 21, row->blas_kernel, err)))
        rc = store_step_done(s, st, "storing a sensitivity", err);
    sqlite3_finalize(st);
    return rc;
}
