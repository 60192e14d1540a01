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
    ql_strbuf q = {0};
    store_insert_sql(store_table("models"), STORE_ROW, &q);
    store_stmt st;
    ql_status rc = store_stmt_prep(s, &q, &st, err);
    if (rc)
        return rc;
    const void *const src[] = {m};
    if (!(rc = store_put_fields(&st, store_table("models"), src, 1, err)))
        rc = store_stmt_id(&st, "storing the model", id, err);
    store_stmt_finalize(&st);
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
    ql_strbuf q = {0};
    store_insert_sql(store_table("datasets"), STORE_ROW, &q);
    store_stmt st;
    ql_status rc = store_stmt_prep(s, &q, &st, err);
    if (rc)
        return rc;
    const void *const src[] = {d};
    if (!(rc = store_put_fields(&st, store_table("datasets"), src, 1, err)) &&
        !(rc = store_put_count(&st, "tokens_model_id", d->tokens >= 0 ? d->tokens_model : -1, err)))
        rc = store_stmt_id(&st, "storing the dataset", id, err);
    store_stmt_finalize(&st);
    return rc;
}

ql_status ql_store_upsert_config(ql_store *s, const ql_config *c, int64_t *id, ql_error *err)
{
    char canonical[QL_CONFIG_TEXT_MAX], hash[65];
    ql_config_to_string(c, canonical, sizeof canonical);
    ql_config_hash(c, hash);

    /* hash, canonical, then every configs column of config.h. */
    ql_strbuf q = {0};
    store_insert_sql(store_table("configs"), STORE_ROW, &q);
    store_stmt w;
    ql_status rc = store_stmt_prep(s, &q, &w, err);
    if (rc)
        return rc;
    const ql_config_column *cols;
    size_t n = ql_config_columns(&cols);
    if (!(rc = store_put_text(&w, "hash", hash, err)))
        rc = store_put_text(&w, "canonical", canonical, err);
    for (size_t i = 0; i < n && !rc; i++) {
        char text[QL_CONFIG_VALUE_MAX];
        double num;
        ql_config_column_value(c, i, text, sizeof text, &num);
        if (cols[i].type == QL_COLUMN_TEXT)
            rc = store_put_text(&w, cols[i].name, text, err);
        else if (cols[i].type == QL_COLUMN_INTEGER)
            rc = store_put_count(&w, cols[i].name, isnan(num) ? -1 : (int64_t)num, err);
        else
            rc = store_put_real(&w, cols[i].name, num, err);
    }
    if (!rc)
        rc = store_stmt_done(&w, "storing the config", err);
    store_stmt_finalize(&w);
    if (rc)
        return rc;

    sqlite3_stmt *st;

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
    ql_strbuf q = {0};
    store_insert_sql(store_table("sensitivity"), STORE_ROW, &q);
    store_stmt st;
    ql_status rc = store_stmt_prep(s, &q, &st, err);
    if (rc)
        return rc;
    const void *const src[STORE_SENS_SRCS] = {
        [STORE_SENS_SRC_KEY] = key, [STORE_SENS_SRC_ROW] = row};
    if (!(rc = store_put_fields(&st, store_table("sensitivity"), src, STORE_SENS_SRCS, err)) &&
        !(rc = store_put_text(&st, "type", ql_type_name(row->type), err)) &&
        !(rc = store_put_text(&st, "qlab_version", QL_VERSION, err)))
        rc = store_stmt_done(&st, "storing a sensitivity", err);
    store_stmt_finalize(&st);
    return rc;
}
