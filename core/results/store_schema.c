/* The store's schema: every table and column declared once with its schema version,
 * the CREATE TABLE statements and the views built from the declarations (store_impl.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "experiment/config.h"
#include "experiment/records.h"
#include "results/store.h"
#include "results/store_impl.h"

/* ================================================================ SQL text */

void store_sql_add(sqlbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->text + b->len, sizeof b->text - b->len, fmt, ap);
    va_end(ap);
    QL_ASSERT(n >= 0 && (size_t)n < sizeof b->text - b->len);
    b->len += (size_t)n;
}

/* Appends one item of a comma-separated select list, starting a new line (indented
 * under the SELECT) when the line would pass LIST_WIDTH. */
#define LIST_WIDTH 92

static void list_add(sqlbuf *b, const char *item)
{
    size_t line = b->len;
    while (line > 0 && b->text[line - 1] != '\n')
        line--;
    bool first = b->len > 0 && b->text[b->len - 1] == '\n';
    if (!first && b->len - line + 2 + strlen(item) > LIST_WIDTH)
        store_sql_add(b, ",\n       %s", item);
    else if (first)
        store_sql_add(b, "       %s", item);
    else
        store_sql_add(b, ", %s", item);
}

/* ================================================================ schema
 *
 * Every table is declared once, below, with the schema version of each column;
 * the metrics and configs columns come from the lists of records.h and config.h.
 * From the declarations: the tables of a fresh database, the migration of an
 * older one (CREATE TABLE for a table it lacks, ALTER TABLE ... ADD COLUMN for a
 * column it lacks), the views, and the column lists ql_store_columns gives the
 * merge. Conventions: ids are INTEGER PRIMARY KEY; natural keys (sha256, hash, the
 * run identity) are UNIQUE so shard databases can be merged by them; a NULL
 * measurement means "not measured". */

_Static_assert(QL_STORE_SCHEMA_VERSION >= 1, "schema versions start at 1");
#define METRIC_SINCE(name, kind, since, ...)                                                       \
    _Static_assert((since) <= QL_STORE_SCHEMA_VERSION,                                             \
                   "metric " #name ": a newer schema version than QL_STORE_SCHEMA_VERSION (bump "  \
                   "it in store.h)");
QL_RUN_METRICS(METRIC_SINCE)
#undef METRIC_SINCE
#define AXIS_SINCE(ID, name, first, last, dflt, sql, since, ...)                                   \
    _Static_assert((since) <= QL_STORE_SCHEMA_VERSION,                                             \
                   "axis " #name ": a newer schema version than QL_STORE_SCHEMA_VERSION (bump it " \
                   "in store.h)");
QL_AXES(AXIS_SINCE)
#undef AXIS_SINCE
#define EXTRA_SINCE(ID, name, type, since, comment)                                                \
    _Static_assert((since) <= QL_STORE_SCHEMA_VERSION,                                             \
                   "configs column " #name ": a newer schema version than "                        \
                   "QL_STORE_SCHEMA_VERSION (bump it in store.h)");
QL_CONFIG_EXTRA_COLUMNS(EXTRA_SINCE)
#undef EXTRA_SINCE

static const col_def models_cols[] = {
    {"id", "INTEGER PRIMARY KEY", 1, NULL},
    {"sha256", "TEXT NOT NULL UNIQUE CHECK (length(sha256) = 64)", 1, NULL},
    {"path", "TEXT NOT NULL", 1, "where it was read the last time"},
    {"name", "TEXT", 1, "manifest name, NULL for a plain path"},
    {"arch", "TEXT", 1, "general.architecture"},
    {"file_bytes", "INTEGER", 1, NULL},
    {"params", "INTEGER", 1, NULL},
    {"n_layer", "INTEGER", 1, NULL},
    {"n_embd", "INTEGER", 1, NULL},
    {"n_ff", "INTEGER", 1, NULL},
    {"n_head", "INTEGER", 1, NULL},
    {"n_head_kv", "INTEGER", 1, NULL},
    {"n_vocab", "INTEGER", 1, NULL},
    {"n_ctx_train", "INTEGER", 1, NULL},
    {NULL, NULL, 0, NULL},
};

static const col_def datasets_cols[] = {
    {"id", "INTEGER PRIMARY KEY", 1, NULL},
    {"sha256", "TEXT NOT NULL UNIQUE CHECK (length(sha256) = 64)", 1, NULL},
    {"name", "TEXT NOT NULL", 1, "manifest name or the path as given"},
    {"path", "TEXT", 1, NULL},
    {"bytes", "INTEGER", 1, NULL},
    {"tokens", "INTEGER", 1, "whole text, under the tokenizer of tokens_model_id"},
    {"tokens_model_id", "INTEGER REFERENCES models(id)", 1, NULL},
    {NULL, NULL, 0, NULL},
};

/* Then a column per configs column of config.h (ql_config_columns). */
static const col_def configs_cols[] = {
    {"id", "INTEGER PRIMARY KEY", 1, NULL},
    {"hash", "TEXT NOT NULL UNIQUE CHECK (length(hash) = 64)", 1, "sha256(canonical)"},
    {"canonical", "TEXT NOT NULL UNIQUE", 1, NULL},
    {NULL, NULL, 0, NULL},
};

/* Constraints of version 6 (a run stopped by SIGINT/SIGTERM is 'interrupted', with the
 * reason in error); older databases get them through constraint_changes. */
#define RUNS_STATUS_CHECK                                                                          \
    "TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'interrupted'))"
#define RUNS_ERROR_CHECK "CHECK ((status IN ('failed', 'interrupted')) = (error IS NOT NULL))"

static const col_def runs_cols[] = {
    {"id", "INTEGER PRIMARY KEY", 1, NULL},
    {"config_id", "INTEGER NOT NULL REFERENCES configs(id)", 1, NULL},
    {"model_id", "INTEGER NOT NULL REFERENCES models(id)", 1, NULL},
    {"dataset_id", "INTEGER NOT NULL REFERENCES datasets(id)", 1, NULL},
    {"ctx", "INTEGER NOT NULL CHECK (ctx > 0)", 1, NULL},
    {"chunks", "INTEGER NOT NULL CHECK (chunks > 0)", 1, NULL},
    {"sweep", "TEXT", 1, "the sweep of the last attempt"},
    {"status", RUNS_STATUS_CHECK, 1, "interrupted: since version 6"},
    {"error", "TEXT", 1, "why it failed or stopped"},
    {"attempts", "INTEGER NOT NULL DEFAULT 1 CHECK (attempts > 0)", 1, NULL},
    {"started", "TEXT NOT NULL", 1, "UTC, YYYY-MM-DDTHH:MM:SSZ"},
    {"finished", "TEXT", 1, NULL},
    {"seconds", "REAL", 1, "the whole run"},
    {"quantize_seconds", "REAL", 1, NULL},
    {"ref_seconds", "REAL", 1, "reference forward pass"},
    {"quant_seconds", "REAL", 1, "quantized forward pass"},
    {"threads", "INTEGER", 1, NULL},
    {"host", "TEXT", 1, NULL},
    {"qlab_version", "TEXT NOT NULL", 1, NULL},
    {"qlab_commit", "TEXT NOT NULL", 1, NULL},
    {"metrics_version", "INTEGER NOT NULL CHECK (metrics_version > 0)", 1, NULL},
    {"imatrix_sha256", "TEXT", 1, NULL},
    {"blas_kernel", "TEXT", 5, "BLAS library, version and kernel, e.g. OpenBLAS 0.3.21 Haswell"},
    {"mem_budget", "INTEGER", 5, "bytes the runner planned with (--mem)"},
    {"group_chunks", "INTEGER", 5, "chunks per group of a pass, from mem_budget"},
    {"pid", "INTEGER", 5, "process on host of the last attempt"},
    {NULL, NULL, 0, NULL},
};
static const char *const runs_extra[] = {"CREATE INDEX runs_by_status ON runs(status)", NULL};

static const col_def sweep_runs_cols[] = {
    {"sweep", "TEXT NOT NULL", 1, NULL},
    {"run_id", "INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE", 1, NULL},
    {NULL, NULL, 0, NULL},
};

/* Then a column per stored metric of records.h. */
static const col_def metrics_cols[] = {
    {"run_id", "INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE", 1, NULL},
    {NULL, NULL, 0, NULL},
};

static const col_def tensor_errors_cols[] = {
    {"run_id", "INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE", 1, NULL},
    {"tensor", "TEXT NOT NULL", 1, NULL},
    {"layer", "INTEGER", 1, "N of blk.N.*, NULL for other tensors"},
    {"requested_type", "TEXT NOT NULL", 1, NULL},
    {"used_type", "TEXT NOT NULL", 1, NULL},
    {"fallback", "INTEGER NOT NULL CHECK (fallback IN (0, 1))", 1, NULL},
    {"fallback_reason", "TEXT", 1, NULL},
    {"n_rows", "INTEGER NOT NULL", 1, NULL},
    {"n_cols", "INTEGER NOT NULL", 1, "row length (ggml ne[0])"},
    {"params", "INTEGER NOT NULL", 1, NULL},
    {"bytes", "INTEGER NOT NULL", 1, NULL},
    {"rmse", "REAL", 1, NULL},
    {"max_err", "REAL", 1, NULL},
    {"imatrix_err", "REAL", 1, NULL},
    {"imatrix_err_rel", "REAL", 1, NULL},
    {"outlier_cols", "INTEGER", 1, "NULL when the outlier split is off"},
    {"choice", "TEXT", 4, "the rule or axis that asked for requested_type"},
    {NULL, NULL, 0, NULL},
};

/* Per-chunk sums of a run, for resampling analyses (paired bootstrap over chunks).
 * A run has either no rows here or one per chunk 0..chunks-1. */
static const col_def chunk_metrics_cols[] = {
    {"run_id", "INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE", 2, NULL},
    {"chunk", "INTEGER NOT NULL CHECK (chunk >= 0)", 2, "index in the text, < runs.chunks"},
    {"n_tokens", "INTEGER NOT NULL CHECK (n_tokens > 0)", 2, "scored tokens"},
    {"kld_sum", "REAL", 2, "sum of KL(p || q) over the scored tokens (nats)"},
    {"nll_sum", "REAL", 2, "sum of -log q(y)"},
    {"nll_ref_sum", "REAL", 2, "sum of -log p(y)"},
    {"top1_count", "INTEGER CHECK (top1_count BETWEEN 0 AND n_tokens)", 2, NULL},
    {NULL, NULL, 0, NULL},
};

/* The activation rounding of every product of a run (act_mode), with the note
 * saying why a rounding fell back (e.g. rows that do not split into its blocks).
 * Only products whose input is rounded have a row. */
static const col_def act_roundings_cols[] = {
    {"run_id", "INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE", 3, NULL},
    {"tensor", "TEXT NOT NULL", 3, "the product's weight, e.g. blk.0.ffn_down.weight"},
    {"requested", "TEXT NOT NULL", 3, "rounding the act_mode asks for: f16, q8_0, q8_K, ..."},
    {"used", "TEXT NOT NULL", 3, "rounding applied"},
    {"note", "TEXT", 3, "why used differs from requested"},
    {"kept_channels", "INTEGER", 3, "outlier channels left unrounded"},
    {NULL, NULL, 0, NULL},
};

/* The divergence of a run's residual stream from the reference's after each block
 * (experiment/divergence.h), for runs of sweeps with layer_metrics = yes. */
static const col_def layer_metrics_cols[] = {
    {"run_id", "INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE", 7, NULL},
    {"layer", "INTEGER NOT NULL CHECK (layer >= 0)", 7, "block index"},
    {"rel_err_mean", "REAL", 7, "mean over scored tokens of ||h - r|| / ||r||"},
    {"rel_err_p99", "REAL", 7, "its 99th percentile"},
    {"cos_mean", "REAL", 7, "mean cosine similarity of h and r"},
    {"route_agree", "REAL", 10,
     "a mixture-of-experts block: share of scored tokens routed to the reference's experts"},
    {"route_overlap", "REAL", 10, "mean share of a token's experts that are the reference's"},
    {"load_shift", "REAL", 10,
     "total variation distance of the experts' loads from the reference's (0 .. 1)"},
    {NULL, NULL, 0, NULL},
};

/* A mixture of experts: each expert's share of a block's routed slots (experiment/routing.h),
 * the reference's and the run's. */
static const col_def expert_load_cols[] = {
    {"run_id", "INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE", 10, NULL},
    {"layer", "INTEGER NOT NULL CHECK (layer >= 0)", 10, "block index"},
    {"expert", "INTEGER NOT NULL CHECK (expert >= 0)", 10, NULL},
    {"ref_share", "REAL", 10, "the reference's share of the block's (token, expert) slots"},
    {"share", "REAL", 10, "the run's"},
    {NULL, NULL, 0, NULL},
};

/* Each expert of a stacked expert tensor (ffn_*_exps), quantized: its errors as
 * tensor_errors has them for whole tensors, weighted by that expert's importance. */
static const col_def expert_errors_cols[] = {
    {"run_id", "INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE", 10, NULL},
    {"tensor", "TEXT NOT NULL", 10, "the 3-D tensor, e.g. blk.0.ffn_down_exps.weight"},
    {"layer", "INTEGER", 10, "N of blk.N.*"},
    {"expert", "INTEGER NOT NULL CHECK (expert >= 0)", 10, NULL},
    {"rmse", "REAL", 10, NULL},
    {"max_err", "REAL", 10, NULL},
    {"imatrix_err", "REAL", 10, NULL},
    {"imatrix_err_rel", "REAL", 10, NULL},
    {NULL, NULL, 0, NULL},
};

/* Per (unit, type): quantizing a tensor or a group of tensors alone, measured on a
 * calibration text (experiment/sensitivity.h); the objective of budgets with objective =
 * kld[:grouping]. */
static const col_def sensitivity_cols[] = {
    {"id", "INTEGER PRIMARY KEY", 8, NULL},
    {"model_sha256", "TEXT NOT NULL", 8, "the model (models.sha256)"},
    {"text_sha256", "TEXT NOT NULL", 8, "the calibration text"},
    {"text", "TEXT", 8, "its name as the config gives it"},
    {"ctx", "INTEGER NOT NULL", 8, NULL},
    {"chunks", "INTEGER NOT NULL", 8, NULL},
    {"imatrix_sha256", "TEXT NOT NULL", 8, "the quantizer's importance matrix, or 'none'"},
    {"metrics_version", "INTEGER NOT NULL", 8, NULL},
    {"tensor", "TEXT NOT NULL", 8, "the tensor, or the group's name (blk.3.attn, blk.3, ffn_down)"},
    {"layer", "INTEGER NOT NULL", 8,
     "the first block of its tensors; -1 the token embedding; n_layer the head"},
    {"kind", "TEXT NOT NULL", 8,
     "attn_q ... ffn_down, output, token_embd; a group's: attn, ffn, block or the kind"},
    {"type", "TEXT NOT NULL", 8, NULL},
    {"bytes", "INTEGER NOT NULL", 8, "its tensors in that type"},
    {"kld_mean", "REAL", 8, "mean KLD of the model with only this tensor (group) quantized"},
    {"kld_mean_err", "REAL", 8, NULL},
    {"ln_ppl_ratio", "REAL", 8, "ln(PPL / PPL of the reference)"},
    {"ln_ppl_ratio_err", "REAL", 8, NULL},
    {"seconds", "REAL", 8, "quantizing and scoring it"},
    {"qlab_version", "TEXT NOT NULL", 8, NULL},
    {"grouping", "TEXT NOT NULL DEFAULT 'tensor'", 9,
     "the unit's: tensor (one tensor, whichever grouping measured it), or module, layer, kind (a "
     "group of tensors: objective kld:<grouping>)"},
    {"n_tensors", "INTEGER NOT NULL DEFAULT 1", 9, "the tensors quantized together"},
    {"blas_kernel", "TEXT", 9,
     "what the products ran on (as runs.blas_kernel; not part of the key: NULL before schema 9)"},
    {NULL, NULL, 0, NULL},
};

static const char *const no_extra[] = {NULL};

/* The tables, referenced ones first. */
static const table_def tables[] = {
    {{"models", 1, QL_TABLE_IDENTITY, "sha256", NULL},
     NULL,
     models_cols,
     DERIVED_NONE,
     NULL,
     "",
     no_extra},
    {{"datasets", 1, QL_TABLE_IDENTITY, "sha256", NULL},
     NULL,
     datasets_cols,
     DERIVED_NONE,
     NULL,
     "",
     no_extra},
    {{"configs", 1, QL_TABLE_IDENTITY, "hash", NULL},
     NULL,
     configs_cols,
     DERIVED_CONFIGS,
     NULL,
     "",
     no_extra},
    {{"runs", 1, QL_TABLE_RUNS, NULL, NULL},
     NULL,
     runs_cols,
     DERIVED_NONE,
     "UNIQUE (config_id, model_id, dataset_id, ctx, chunks),\n"
     "    " RUNS_ERROR_CHECK ",\n"
     "    CHECK ((status = 'running') = (finished IS NULL))",
     "",
     runs_extra},
    {{"sweep_runs", 1, QL_TABLE_MEMBERS, NULL, NULL},
     "every run a sweep includes, also those it skipped",
     sweep_runs_cols,
     DERIVED_NONE,
     "PRIMARY KEY (sweep, run_id)",
     " WITHOUT ROWID",
     no_extra},
    {{"metrics", 1, QL_TABLE_RUN_DATA, NULL, NULL},
     NULL,
     metrics_cols,
     DERIVED_METRICS,
     NULL,
     "",
     no_extra},
    {{"tensor_errors", 1, QL_TABLE_RUN_DATA, "tensor", "the errors of tensor"},
     NULL,
     tensor_errors_cols,
     DERIVED_NONE,
     "PRIMARY KEY (run_id, tensor),\n"
     "    CHECK (fallback = (used_type <> requested_type)),\n"
     "    CHECK (fallback = (fallback_reason IS NOT NULL))",
     "",
     no_extra},
    {{"chunk_metrics", 2, QL_TABLE_RUN_DATA, "chunk", "the sums of chunk"},
     NULL,
     chunk_metrics_cols,
     DERIVED_NONE,
     "PRIMARY KEY (run_id, chunk)",
     " WITHOUT ROWID",
     no_extra},
    {{"act_roundings", 3, QL_TABLE_RUN_DATA, "tensor", "the activation rounding records of tensor"},
     NULL,
     act_roundings_cols,
     DERIVED_NONE,
     "PRIMARY KEY (run_id, tensor),\n"
     "    CHECK ((used <> requested) = (note IS NOT NULL))",
     " WITHOUT ROWID",
     no_extra},
    {{"layer_metrics", 7, QL_TABLE_RUN_DATA, "layer", "the divergence of layer"},
     NULL,
     layer_metrics_cols,
     DERIVED_NONE,
     "PRIMARY KEY (run_id, layer)",
     " WITHOUT ROWID",
     no_extra},
    {{"expert_load", 10, QL_TABLE_RUN_DATA, "expert", "the load of expert"},
     NULL,
     expert_load_cols,
     DERIVED_NONE,
     "PRIMARY KEY (run_id, layer, expert)",
     " WITHOUT ROWID",
     no_extra},
    {{"expert_errors", 10, QL_TABLE_RUN_DATA, "expert", "the errors of expert"},
     NULL,
     expert_errors_cols,
     DERIVED_NONE,
     "PRIMARY KEY (run_id, tensor, expert)",
     " WITHOUT ROWID",
     no_extra},
    {{"sensitivity", 8, QL_TABLE_MEASURED, NULL, NULL},
     NULL,
     sensitivity_cols,
     DERIVED_NONE,
     "UNIQUE (model_sha256, text_sha256, ctx, chunks, imatrix_sha256, metrics_version, tensor,"
     " type)",
     "",
     no_extra},
};
#define N_TABLES (sizeof tables / sizeof tables[0])
const table_def *const store_tables = tables;
const size_t store_n_tables = N_TABLES;

/* Constraints a version changed: in a database older than `since`, the table's stored
 * CREATE TABLE holds `before` where this qlab declares `after`. Every change here admits
 * every row the old constraint admitted (it only widens it), so the stored text can be
 * rewritten in place (SQLite's documented way for such changes: writable_schema and a
 * new schema cookie) without copying the table, which the foreign keys of the tables
 * referring to it would not allow inside the migration's transaction. */
const store_constraint_change store_constraint_changes[] = {
    {"runs", 6, "CHECK (status IN ('running', 'done', 'failed'))",
     "CHECK (status IN ('running', 'done', 'failed', 'interrupted'))"},
    {"runs", 6, "CHECK ((status = 'failed') = (error IS NOT NULL))", RUNS_ERROR_CHECK},
};
const size_t store_n_constraint_changes =
    sizeof store_constraint_changes / sizeof store_constraint_changes[0];

/* SQL text of a value: 'text' with quotes doubled. */
static void sql_quote(const char *v, char *buf, size_t size)
{
    size_t o = 0;
    if (o + 1 < size)
        buf[o++] = '\'';
    for (; *v && o + 3 < size; v++) {
        if (*v == '\'')
            buf[o++] = '\'';
        buf[o++] = *v;
    }
    if (o + 1 < size)
        buf[o++] = '\'';
    buf[o] = '\0';
}

size_t store_table_columns(const table_def *t, column *out)
{
    size_t n = 0;
    for (const col_def *c = t->cols; c->name; c++) {
        QL_ASSERT(n < MAX_TABLE_COLUMNS);
        out[n].name = c->name;
        ql_strlcpy(out[n].decl, c->decl, sizeof out[n].decl);
        out[n].since = c->since;
        out[n].comment = c->comment;
        n++;
    }
    if (t->derived == DERIVED_CONFIGS) {
        const ql_config_column *cc;
        size_t nc = ql_config_columns(&cc);
        for (size_t i = 0; i < nc; i++) {
            QL_ASSERT(n < MAX_TABLE_COLUMNS);
            column *o = &out[n++];
            o->name = cc[i].name;
            o->since = cc[i].since;
            o->comment = cc[i].comment;
            const char *type = cc[i].type == QL_COLUMN_TEXT   ? "TEXT"
                               : cc[i].type == QL_COLUMN_REAL ? "REAL"
                                                              : "INTEGER";
            if (i >= QL_AXIS_COUNT) {
                snprintf(o->decl, sizeof o->decl, "%s", type); /* extra: NULL when n/a */
            } else if (cc[i].since <= t->pub.since) {
                snprintf(o->decl, sizeof o->decl, "%s NOT NULL", type);
            } else {
                /* An axis added later: older configs had its default. */
                char dflt[QL_CONFIG_VALUE_MAX], lit[128];
                ql_axis_default_string(cc[i].axis, dflt, sizeof dflt);
                if (cc[i].type == QL_COLUMN_TEXT)
                    sql_quote(dflt, lit, sizeof lit);
                else
                    ql_strlcpy(lit, dflt, sizeof lit);
                snprintf(o->decl, sizeof o->decl, "%s NOT NULL DEFAULT %s", type, lit);
            }
        }
    } else if (t->derived == DERIVED_METRICS) {
        const ql_metric_info *mi;
        size_t nm = ql_metrics(&mi);
        for (size_t i = 0; i < nm; i++) {
            if (mi[i].kind == QL_METRIC_KIND_DERIVED)
                continue;
            QL_ASSERT(n < MAX_TABLE_COLUMNS);
            column *o = &out[n++];
            o->name = mi[i].name;
            o->since = mi[i].since;
            o->comment = NULL;
            ql_strlcpy(o->decl, mi[i].kind == QL_METRIC_KIND_COUNT ? "INTEGER" : "REAL",
                       sizeof o->decl);
        }
    }
    return n;
}

/* The value a column has in rows written before it existed: its DEFAULT, or NULL. */
static void column_default(const column *c, char *buf, size_t size)
{
    const char *d = strstr(c->decl, "DEFAULT ");
    if (!d) {
        ql_strlcpy(buf, "NULL", size);
        return;
    }
    d += strlen("DEFAULT ");
    size_t n = d[0] == '\'' ? strcspn(d + 1, "'") + 2 : strcspn(d, " ");
    snprintf(buf, size, "%.*s", (int)n, d);
}

void store_create_table_sql(const table_def *t, sqlbuf *b)
{
    column cols[MAX_TABLE_COLUMNS];
    size_t n = store_table_columns(t, cols), width = 0;
    for (size_t i = 0; i < n; i++)
        width = strlen(cols[i].name) > width ? strlen(cols[i].name) : width;
    b->len = 0;
    store_sql_add(b, "CREATE TABLE %s (%s%s\n", t->pub.name, t->comment ? "            -- " : "",
                  t->comment ? t->comment : "");
    for (size_t i = 0; i < n; i++) {
        bool last = i + 1 == n && !t->constraints;
        store_sql_add(b, "    %-*s %s%s", (int)width, cols[i].name, cols[i].decl, last ? "" : ",");
        if (cols[i].comment)
            store_sql_add(b, " -- %s", cols[i].comment);
        store_sql_add(b, "\n");
    }
    if (t->constraints)
        store_sql_add(b, "    %s\n", t->constraints);
    store_sql_add(b, ")%s", t->options);
}

size_t ql_store_tables(const ql_store_table **out)
{
    static ql_store_table list[N_TABLES];
    for (size_t i = 0; i < N_TABLES; i++)
        list[i] = tables[i].pub;
    *out = list;
    return N_TABLES;
}

size_t ql_store_columns(const ql_store_table *t, ql_store_column *out)
{
    for (size_t k = 0; k < N_TABLES; k++) {
        if (strcmp(tables[k].pub.name, t->name) != 0)
            continue;
        column cols[MAX_TABLE_COLUMNS];
        size_t n = store_table_columns(&tables[k], cols);
        for (size_t i = 0; i < n; i++) {
            out[i].name = cols[i].name;
            out[i].since = cols[i].since;
            column_default(&cols[i], out[i].dflt, sizeof out[i].dflt);
        }
        return n;
    }
    QL_ASSERT(!"not a table of the store");
    return 0;
}

size_t ql_store_metric_columns(const char *const **names)
{
    static const char *list[QL_N_METRICS];
    const ql_metric_info *mi;
    size_t nm = ql_metrics(&mi), n = 0;
    for (size_t i = 0; i < nm; i++)
        if (mi[i].kind != QL_METRIC_KIND_DERIVED)
            list[n++] = mi[i].name;
    *names = list;
    return n;
}

/* ---------------------------------------------------------------- views */

/* The axis columns of a config (alias c), in axis order. */
static void add_axes(sqlbuf *b)
{
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        char item[96];
        snprintf(item, sizeof item, "c.%s", ql_axis_name((ql_axis)a));
        list_add(b, item);
    }
}

/* Whether a config's types applied, from the shares of its classes (metrics m, from
 * the tensor records; config c): 'n/a' when the body's weights, or a head or embedding
 * type the config names itself, got it on none of their parameters (the config measures
 * other types than it names), 'partial' when a class got it on some only (a head that
 * is to be "same" as the body and fell back counts so), 'yes' when all did; NULL
 * without tensor records. */
#define APPLIES_SQL                                                                                \
    "CASE WHEN m.applied_body = 0 OR (m.applied_head = 0 AND c.head_type <> 'same')"               \
    " OR (m.applied_embd = 0 AND c.embd_type <> 'same') THEN 'n/a'"                                \
    " WHEN m.applied_body < 1 OR m.applied_head < 1 OR m.applied_embd < 1 THEN 'partial'"          \
    " WHEN coalesce(m.applied_body, m.applied_head, m.applied_embd) IS NULL THEN NULL"             \
    " ELSE 'yes' END AS applies"

/* The types the body's matmul weights got, by share of their parameters, largest first
 * ("IQ4_NL 86.5%, F16 13.5%"; a type alone when it is all), then the head's and the
 * embeddings' when they are not the ones asked for ("; head Q2_K"). */
#define TYPES_USED_SQL                                                                             \
    "(SELECT group_concat(part, '; ') FROM ("                                                      \
    "SELECT (CASE cls WHEN 'body' THEN '' ELSE cls || ' ' END) || group_concat(used, ', ')"        \
    " AS part FROM (SELECT CASE t.tensor WHEN 'output.weight' THEN 'head'"                         \
    " WHEN 'token_embd.weight' THEN 'embd' ELSE 'body' END AS cls,"                                \
    " t.used_type || CASE WHEN sum(t.params) = tot.p THEN '' ELSE"                                 \
    " printf(' %.1f%%', 100.0 * sum(t.params) / tot.p) END AS used, sum(t.params) AS p,"           \
    " max(t.fallback) AS fell"                                                                     \
    " FROM tensor_errors t JOIN (SELECT CASE tensor WHEN 'output.weight' THEN 'head'"              \
    " WHEN 'token_embd.weight' THEN 'embd' ELSE 'body' END AS cls2, sum(params) AS p"              \
    " FROM tensor_errors WHERE run_id = r.id GROUP BY cls2) tot ON tot.cls2 ="                     \
    " CASE t.tensor WHEN 'output.weight' THEN 'head' WHEN 'token_embd.weight' THEN 'embd'"         \
    " ELSE 'body' END WHERE t.run_id = r.id GROUP BY cls, t.used_type"                             \
    " ORDER BY cls = 'body' DESC, cls, p DESC, t.used_type)"                                       \
    " GROUP BY cls HAVING cls = 'body' OR max(fell) = 1"                                           \
    " ORDER BY cls = 'body' DESC, cls = 'head' DESC)) AS types_used"

/* Why the first tensor that did not get its type (largest first) fell back. */
#define FALLBACK_NOTE_SQL                                                                          \
    "(SELECT t.fallback_reason FROM tensor_errors t WHERE t.run_id = r.id AND t.fallback = 1"      \
    " ORDER BY t.params DESC, t.tensor LIMIT 1) AS fallback_note"

static void add_applicability(sqlbuf *b)
{
    list_add(b, APPLIES_SQL);
    list_add(b, TYPES_USED_SQL);
    list_add(b, FALLBACK_NOTE_SQL);
}

/* The columns of results and sweep_results after run_id and sweep (aliases r, c,
 * mo, d, m): the config, model and text, every metric, the run's provenance. They
 * share them so that a report can read either. */
static void add_result_columns(sqlbuf *b)
{
    static const char *const head[] = {"c.hash AS config_hash", "c.canonical"};
    static const char *const inputs[] = {"mo.name AS model",
                                         "mo.sha256 AS model_sha256",
                                         "d.name AS dataset",
                                         "d.sha256 AS dataset_sha256",
                                         "r.ctx",
                                         "r.chunks"};
    static const char *const provenance[] = {
        "r.seconds",         "r.quantize_seconds", "r.ref_seconds",
        "r.quant_seconds",   "r.threads",          "r.host",
        "r.finished",        "r.qlab_version",     "r.qlab_commit",
        "r.metrics_version", "r.imatrix_sha256",   "r.blas_kernel",
        "r.mem_budget",      "r.group_chunks"};
    store_sql_add(b, "\n");
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
        list_add(b, head[i]);
    add_axes(b);
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++)
        list_add(b, inputs[i]);
    const ql_metric_info *mi;
    size_t nm = ql_metrics(&mi);
    for (size_t i = 0; i < nm; i++) {
        char item[256];
        if (mi[i].kind == QL_METRIC_KIND_DERIVED)
            snprintf(item, sizeof item, "%s AS %s", mi[i].sql, mi[i].name);
        else
            snprintf(item, sizeof item, "m.%s", mi[i].name);
        list_add(b, item);
    }
    add_applicability(b);
    for (size_t i = 0; i < sizeof provenance / sizeof provenance[0]; i++)
        list_add(b, provenance[i]);
    store_sql_add(b, "\n");
}

#define RESULT_JOINS                                                                               \
    "JOIN configs c ON c.id = r.config_id\n"                                                       \
    "JOIN models mo ON mo.id = r.model_id\n"                                                       \
    "JOIN datasets d ON d.id = r.dataset_id\n"

static void view_results(sqlbuf *b)
{
    store_sql_add(
        b, "CREATE VIEW results AS -- one row per finished run: config axes, model/text,\n"
           "                       -- metrics and provenance; sweep: the one that last ran it\n"
           "SELECT r.id AS run_id, r.sweep,");
    add_result_columns(b);
    store_sql_add(b, "FROM runs r\n" RESULT_JOINS "JOIN metrics m ON m.run_id = r.id\n"
                     "WHERE r.status = 'done'");
}

static void view_sweep_results(sqlbuf *b)
{
    store_sql_add(b,
                  "CREATE VIEW sweep_results AS -- results once per sweep that includes the run,\n"
                  "                             -- also when an earlier sweep ran it\n"
                  "SELECT r.id AS run_id, s.sweep,");
    add_result_columns(b);
    store_sql_add(b, "FROM sweep_runs s JOIN runs r ON r.id = s.run_id\n" RESULT_JOINS
                     "JOIN metrics m ON m.run_id = r.id\n"
                     "WHERE r.status = 'done'");
}

static void view_run_log(sqlbuf *b)
{
    store_sql_add(
        b, "CREATE VIEW run_log AS -- every run whatever its status, with provenance and error\n"
           "SELECT r.id AS run_id, r.sweep, r.status, r.attempts, c.hash AS config_hash,\n"
           "       c.canonical, mo.name AS model, mo.sha256 AS model_sha256, d.name AS dataset,\n"
           "       r.ctx, r.chunks, r.started, r.finished, r.seconds, r.threads, r.host,\n"
           "       r.qlab_version, r.qlab_commit, r.metrics_version, r.blas_kernel,\n"
           "       r.mem_budget, r.group_chunks, r.pid, r.error\n"
           "FROM runs r\n" RESULT_JOINS);
}

static void view_failed_runs(sqlbuf *b)
{
    store_sql_add(b, "CREATE VIEW failed_runs AS SELECT * FROM run_log WHERE status = 'failed'");
}

static void view_tensor_results(sqlbuf *b)
{
    store_sql_add(
        b, "CREATE VIEW tensor_results AS -- per-tensor errors of finished runs, with their\n"
           "                              -- config\n"
           "SELECT r.id AS run_id, r.sweep, c.hash AS config_hash, c.canonical,\n");
    add_axes(b);
    store_sql_add(b, ",\n");
    store_sql_add(
        b, "       mo.name AS model, d.name AS dataset, r.ctx, r.chunks, t.tensor, t.layer,\n"
           "       t.requested_type, t.used_type, t.fallback, t.fallback_reason, t.n_rows,\n"
           "       t.n_cols, t.params, t.bytes, 8.0 * t.bytes / t.params AS bpw, t.rmse,\n"
           "       t.max_err, t.imatrix_err, t.imatrix_err_rel, t.outlier_cols, t.choice\n"
           "FROM tensor_errors t\n"
           "JOIN runs r ON r.id = t.run_id\n" RESULT_JOINS "WHERE r.status = 'done'");
}

static void view_chunk_results(sqlbuf *b)
{
    store_sql_add(b, "CREATE VIEW chunk_results AS -- per-chunk means of finished runs with their\n"
                     "                             -- config (pair two runs by chunk)\n"
                     "SELECT r.id AS run_id, c.hash AS config_hash,\n");
    add_axes(b);
    store_sql_add(b, ",\n");
    store_sql_add(
        b, "       mo.name AS model, d.name AS dataset, r.ctx, r.chunks, k.chunk, k.n_tokens,\n"
           "       k.kld_sum, k.nll_sum, k.nll_ref_sum, k.top1_count,\n"
           "       k.kld_sum / k.n_tokens AS kld_mean,\n"
           "       (k.nll_sum - k.nll_ref_sum) / k.n_tokens AS ln_ppl_ratio,\n"
           "       1.0 * k.top1_count / k.n_tokens AS top1_agree\n"
           "FROM chunk_metrics k\n"
           "JOIN runs r ON r.id = k.run_id\n" RESULT_JOINS "WHERE r.status = 'done'");
}

static void view_layer_results(sqlbuf *b)
{
    store_sql_add(b, "CREATE VIEW layer_results AS -- per-layer divergence of finished runs with\n"
                     "                             -- their config\n"
                     "SELECT r.id AS run_id, c.hash AS config_hash,\n");
    add_axes(b);
    store_sql_add(b, ",\n");
    store_sql_add(b, "       mo.name AS model, d.name AS dataset, r.ctx, r.chunks, l.layer,\n"
                     "       l.rel_err_mean, l.rel_err_p99, l.cos_mean\n"
                     "FROM layer_metrics l\n"
                     "JOIN runs r ON r.id = l.run_id\n" RESULT_JOINS "WHERE r.status = 'done'");
}

/* In creation order (failed_runs reads run_log). */
static const struct {
    const char *name;
    void (*sql)(sqlbuf *b);
} views[] = {
    {"results", view_results},
    {"sweep_results", view_sweep_results},
    {"run_log", view_run_log},
    {"failed_runs", view_failed_runs},
    {"tensor_results", view_tensor_results},
    {"chunk_results", view_chunk_results},
    {"layer_results", view_layer_results},
};
#define N_VIEWS (sizeof views / sizeof views[0])
const size_t store_n_views = N_VIEWS;

const char *store_view_name(size_t i)
{
    return views[i].name;
}

void store_view_sql(size_t i, sqlbuf *b)
{
    b->len = 0;
    views[i].sql(b);
    while (b->len > 0 && (b->text[b->len - 1] == '\n' || b->text[b->len - 1] == ' '))
        b->text[--b->len] = '\0';
}
