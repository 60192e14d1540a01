/* The store's schema: every table and column declared once with its schema version,
 * the CREATE TABLE statements and the views built from the declarations (store_impl.h). */
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "experiment/config.h"
#include "experiment/records.h"
#include "results/store.h"
#include "results/store_impl.h"

/* ================================================================ SQL text */

/* Appends one item of a comma-separated select list, starting a new line (indented
 * under the SELECT) when the line would pass LIST_WIDTH. */
#define LIST_WIDTH 92

static void list_add(ql_strbuf *b, const char *item)
{
    size_t line = b->len;
    while (line > 0 && b->text[line - 1] != '\n')
        line--;
    bool first = b->len > 0 && b->text[b->len - 1] == '\n';
    if (!first && b->len - line + 2 + strlen(item) > LIST_WIDTH)
        ql_strbuf_add(b, ",\n       %s", item);
    else if (first)
        ql_strbuf_add(b, "       %s", item);
    else
        ql_strbuf_add(b, ", %s", item);
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
    {.name = "id", .decl = "INTEGER PRIMARY KEY", .since = 1},
    {.name = "sha256",
     .decl = "TEXT NOT NULL UNIQUE CHECK (length(sha256) = 64)",
     .since = 1,
     .field = FIELD(ql_store_model, sha256)},
    {.name = "path",
     .decl = "TEXT NOT NULL",
     .since = 1,
     .comment = "where it was read the last time",
     .field = FIELD(ql_store_model, path),
     .merge = "excluded.path"},
    {.name = "name",
     .decl = "TEXT",
     .since = 1,
     .comment = "manifest name, NULL for a plain path",
     .field = FIELD(ql_store_model, name)},
    {.name = "arch",
     .decl = "TEXT",
     .since = 1,
     .comment = "general.architecture",
     .field = FIELD(ql_store_model, arch)},
    {.name = "file_bytes",
     .decl = "INTEGER",
     .since = 1,
     .field = FIELD(ql_store_model, file_bytes)},
    {.name = "params", .decl = "INTEGER", .since = 1, .field = FIELD(ql_store_model, params)},
    {.name = "n_layer", .decl = "INTEGER", .since = 1, .field = FIELD(ql_store_model, n_layer)},
    {.name = "n_embd", .decl = "INTEGER", .since = 1, .field = FIELD(ql_store_model, n_embd)},
    {.name = "n_ff", .decl = "INTEGER", .since = 1, .field = FIELD(ql_store_model, n_ff)},
    {.name = "n_head", .decl = "INTEGER", .since = 1, .field = FIELD(ql_store_model, n_head)},
    {.name = "n_head_kv", .decl = "INTEGER", .since = 1, .field = FIELD(ql_store_model, n_head_kv)},
    {.name = "n_vocab", .decl = "INTEGER", .since = 1, .field = FIELD(ql_store_model, n_vocab)},
    {.name = "n_ctx_train",
     .decl = "INTEGER",
     .since = 1,
     .field = FIELD(ql_store_model, n_ctx_train)},
    {.name = NULL},
};

static const col_def datasets_cols[] = {
    {.name = "id", .decl = "INTEGER PRIMARY KEY", .since = 1},
    {.name = "sha256",
     .decl = "TEXT NOT NULL UNIQUE CHECK (length(sha256) = 64)",
     .since = 1,
     .field = FIELD(ql_store_dataset, sha256)},
    {.name = "name",
     .decl = "TEXT NOT NULL",
     .since = 1,
     .comment = "manifest name or the path as given",
     .field = FIELD(ql_store_dataset, name)},
    {.name = "path",
     .decl = "TEXT",
     .since = 1,
     .field = FIELD(ql_store_dataset, path),
     .merge = "coalesce(excluded.path, path)"},
    {.name = "bytes", .decl = "INTEGER", .since = 1, .field = FIELD(ql_store_dataset, bytes)},
    {.name = "tokens",
     .decl = "INTEGER",
     .since = 1,
     .comment = "whole text, under the tokenizer of tokens_model_id",
     .field = FIELD(ql_store_dataset, tokens)},
    {.name = "tokens_model_id",
     .decl = "INTEGER REFERENCES models(id)",
     .since = 1,
     .merge = "CASE WHEN tokens IS NULL THEN excluded.tokens_model_id ELSE tokens_model_id END"},
    {.name = NULL},
};

/* Then a column per configs column of config.h (ql_config_columns). */
static const col_def configs_cols[] = {
    {.name = "id", .decl = "INTEGER PRIMARY KEY", .since = 1},
    {.name = "hash",
     .decl = "TEXT NOT NULL UNIQUE CHECK (length(hash) = 64)",
     .since = 1,
     .comment = "sha256(canonical)"},
    {.name = "canonical", .decl = "TEXT NOT NULL UNIQUE", .since = 1},
    {.name = NULL},
};

/* Constraints of version 6 (a run stopped by SIGINT/SIGTERM is 'interrupted', with the
 * reason in error); older databases get them through constraint_changes. */
#define RUNS_STATUS_CHECK                                                                          \
    "TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'interrupted'))"
#define RUNS_ERROR_CHECK "CHECK ((status IN ('failed', 'interrupted')) = (error IS NOT NULL))"

static const col_def runs_cols[] = {
    {.name = "id", .decl = "INTEGER PRIMARY KEY", .since = 1},
    {.name = "config_id",
     .decl = "INTEGER NOT NULL REFERENCES configs(id)",
     .since = 1,
     .field = FIELD_OF(STORE_RUN_SRC_KEY, ql_store_run_key, config_id),
     .writes = STORE_RUN_KEY},
    {.name = "model_id",
     .decl = "INTEGER NOT NULL REFERENCES models(id)",
     .since = 1,
     .field = FIELD_OF(STORE_RUN_SRC_KEY, ql_store_run_key, model_id),
     .writes = STORE_RUN_KEY},
    {.name = "dataset_id",
     .decl = "INTEGER NOT NULL REFERENCES datasets(id)",
     .since = 1,
     .field = FIELD_OF(STORE_RUN_SRC_KEY, ql_store_run_key, dataset_id),
     .writes = STORE_RUN_KEY},
    {.name = "ctx",
     .decl = "INTEGER NOT NULL CHECK (ctx > 0)",
     .since = 1,
     .field = FIELD_OF(STORE_RUN_SRC_KEY, ql_store_run_key, ctx),
     .writes = STORE_RUN_KEY},
    {.name = "chunks",
     .decl = "INTEGER NOT NULL CHECK (chunks > 0)",
     .since = 1,
     .field = FIELD_OF(STORE_RUN_SRC_KEY, ql_store_run_key, chunks),
     .writes = STORE_RUN_KEY},
    {.name = "sweep",
     .decl = "TEXT",
     .since = 1,
     .comment = "the sweep of the last attempt",
     .field = FIELD_OF(STORE_RUN_SRC_INFO, ql_store_run_info, sweep),
     .writes = STORE_RUN_CLAIM},
    {.name = "status",
     .decl = RUNS_STATUS_CHECK,
     .since = 1,
     .comment = "interrupted: since version 6",
     .writes = STORE_RUN_CLAIM | STORE_RUN_DONE | STORE_RUN_END},
    {.name = "error",
     .decl = "TEXT",
     .since = 1,
     .comment = "why it failed or stopped",
     .writes = STORE_RUN_END},
    {.name = "attempts", .decl = "INTEGER NOT NULL DEFAULT 1 CHECK (attempts > 0)", .since = 1},
    {.name = "started",
     .decl = "TEXT NOT NULL",
     .since = 1,
     .comment = "UTC, YYYY-MM-DDTHH:MM:SSZ",
     .writes = STORE_RUN_CLAIM},
    {.name = "finished", .decl = "TEXT", .since = 1, .writes = STORE_RUN_DONE | STORE_RUN_END},
    {.name = "seconds",
     .decl = "REAL",
     .since = 1,
     .comment = "the whole run",
     .field = FIELD_OF(STORE_RUN_SRC_TIMING, ql_run_timing, seconds),
     .writes = STORE_RUN_DONE | STORE_RUN_END},
    {.name = "quantize_seconds",
     .decl = "REAL",
     .since = 1,
     .field = FIELD_OF(STORE_RUN_SRC_TIMING, ql_run_timing, quantize_seconds),
     .writes = STORE_RUN_DONE},
    {.name = "ref_seconds",
     .decl = "REAL",
     .since = 1,
     .comment = "reference forward pass",
     .field = FIELD_OF(STORE_RUN_SRC_TIMING, ql_run_timing, ref_seconds),
     .writes = STORE_RUN_DONE},
    {.name = "quant_seconds",
     .decl = "REAL",
     .since = 1,
     .comment = "quantized forward pass",
     .field = FIELD_OF(STORE_RUN_SRC_TIMING, ql_run_timing, forward_seconds),
     .writes = STORE_RUN_DONE},
    {.name = "threads", .decl = "INTEGER", .since = 1, .writes = STORE_RUN_CLAIM},
    {.name = "host", .decl = "TEXT", .since = 1, .writes = STORE_RUN_CLAIM},
    {.name = "qlab_version", .decl = "TEXT NOT NULL", .since = 1, .writes = STORE_RUN_CLAIM},
    {.name = "qlab_commit", .decl = "TEXT NOT NULL", .since = 1, .writes = STORE_RUN_CLAIM},
    {.name = "metrics_version",
     .decl = "INTEGER NOT NULL CHECK (metrics_version > 0)",
     .since = 1,
     .field = FIELD_OF(STORE_RUN_SRC_INFO, ql_store_run_info, metrics_version),
     .writes = STORE_RUN_CLAIM},
    {.name = "imatrix_sha256",
     .decl = "TEXT",
     .since = 1,
     .field = FIELD_OF(STORE_RUN_SRC_INFO, ql_store_run_info, imatrix_sha256),
     .writes = STORE_RUN_CLAIM},
    {.name = "blas_kernel",
     .decl = "TEXT",
     .since = 5,
     .comment = "BLAS library, version and kernel, e.g. OpenBLAS 0.3.21 Haswell",
     .field = FIELD_OF(STORE_RUN_SRC_INFO, ql_store_run_info, blas_kernel),
     .writes = STORE_RUN_CLAIM},
    {.name = "mem_budget",
     .decl = "INTEGER",
     .since = 5,
     .comment = "bytes the runner planned with (--mem)",
     .writes = STORE_RUN_CLAIM},
    {.name = "group_chunks",
     .decl = "INTEGER",
     .since = 5,
     .comment = "chunks per group of a pass, from mem_budget",
     .writes = STORE_RUN_CLAIM},
    {.name = "pid",
     .decl = "INTEGER",
     .since = 5,
     .comment = "process on host of the last attempt",
     .writes = STORE_RUN_CLAIM},
    {.name = "body_of",
     .decl = "TEXT",
     .since = 13,
     .comment = "config hash of the pass whose blocks it reused (its head only); NULL = own",
     .field = FIELD_OF(STORE_RUN_SRC_RESULT, ql_run_result, body_of),
     .writes = STORE_RUN_DONE},
    {.name = "forward_alone_seconds",
     .decl = "REAL",
     .since = 13,
     .comment = "what quant_seconds would be without the shared body",
     .field = FIELD_OF(STORE_RUN_SRC_TIMING, ql_run_timing, forward_alone_seconds),
     .writes = STORE_RUN_DONE},
    {.name = "shared_blocks",
     .decl = "INTEGER",
     .since = 14,
     .comment = "blocks of body_of's pass it reused: all (head only) or the first ones; 0 = own",
     .field = FIELD_OF(STORE_RUN_SRC_RESULT, ql_run_result, shared_blocks),
     .writes = STORE_RUN_DONE},
    {.name = NULL},
};
static const char *const runs_extra[] = {"CREATE INDEX runs_by_status ON runs(status)", NULL};

static const col_def sweep_runs_cols[] = {
    {.name = "sweep", .decl = "TEXT NOT NULL", .since = 1},
    {.name = "run_id",
     .decl = "INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE",
     .since = 1},
    {.name = NULL},
};

/* Then a column per stored metric of records.h. */
static const col_def metrics_cols[] = {
    {.name = "run_id",
     .decl = "INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE",
     .since = 1},
    {.name = NULL},
};

static const col_def tensor_errors_cols[] = {
    {.name = "run_id",
     .decl = "INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE",
     .since = 1},
    {.name = "tensor", .decl = "TEXT NOT NULL", .since = 1},
    {.name = "layer",
     .decl = "INTEGER",
     .since = 1,
     .comment = "N of blk.N.*, NULL for other tensors"},
    {.name = "requested_type", .decl = "TEXT NOT NULL", .since = 1},
    {.name = "used_type", .decl = "TEXT NOT NULL", .since = 1},
    {.name = "fallback", .decl = "INTEGER NOT NULL CHECK (fallback IN (0, 1))", .since = 1},
    {.name = "fallback_reason",
     .decl = "TEXT",
     .since = 1,
     .field = FIELD(ql_tensor_record, fallback_reason)},
    {.name = "n_rows",
     .decl = "INTEGER NOT NULL",
     .since = 1,
     .field = FIELD(ql_tensor_record, n_rows)},
    {.name = "n_cols",
     .decl = "INTEGER NOT NULL",
     .since = 1,
     .comment = "row length (ggml ne[0])",
     .field = FIELD(ql_tensor_record, n_cols)},
    {.name = "params",
     .decl = "INTEGER NOT NULL",
     .since = 1,
     .field = FIELD(ql_tensor_record, params)},
    {.name = "bytes",
     .decl = "INTEGER NOT NULL",
     .since = 1,
     .field = FIELD(ql_tensor_record, bytes)},
    {.name = "rmse", .decl = "REAL", .since = 1, .field = FIELD(ql_tensor_record, rmse)},
    {.name = "max_err", .decl = "REAL", .since = 1, .field = FIELD(ql_tensor_record, max_err)},
    {.name = "imatrix_err",
     .decl = "REAL",
     .since = 1,
     .field = FIELD(ql_tensor_record, imatrix_err)},
    {.name = "imatrix_err_rel",
     .decl = "REAL",
     .since = 1,
     .field = FIELD(ql_tensor_record, imatrix_err_rel)},
    {.name = "outlier_cols",
     .decl = "INTEGER",
     .since = 1,
     .comment = "NULL when the outlier split is off",
     .field = FIELD(ql_tensor_record, outlier_cols)},
    {.name = "choice",
     .decl = "TEXT",
     .since = 4,
     .comment = "the rule or axis that asked for requested_type",
     .field = FIELD(ql_tensor_record, choice)},
    {.name = NULL},
};

/* Per-chunk sums of a run, for resampling analyses (paired bootstrap over chunks).
 * A run has either no rows here or one per chunk 0..chunks-1. */
static const col_def chunk_metrics_cols[] = {
    {.name = "run_id",
     .decl = "INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE",
     .since = 2},
    {.name = "chunk",
     .decl = "INTEGER NOT NULL CHECK (chunk >= 0)",
     .since = 2,
     .comment = "index in the text, < runs.chunks",
     .field = FIELD(ql_chunk_record, chunk)},
    {.name = "n_tokens",
     .decl = "INTEGER NOT NULL CHECK (n_tokens > 0)",
     .since = 2,
     .comment = "scored tokens",
     .field = FIELD(ql_chunk_record, n_tokens)},
    {.name = "kld_sum",
     .decl = "REAL",
     .since = 2,
     .comment = "sum of KL(p || q) over the scored tokens (nats)",
     .field = FIELD(ql_chunk_record, kld_sum)},
    {.name = "nll_sum",
     .decl = "REAL",
     .since = 2,
     .comment = "sum of -log q(y)",
     .field = FIELD(ql_chunk_record, nll_sum)},
    {.name = "nll_ref_sum",
     .decl = "REAL",
     .since = 2,
     .comment = "sum of -log p(y)",
     .field = FIELD(ql_chunk_record, nll_ref_sum)},
    {.name = "top1_count",
     .decl = "INTEGER CHECK (top1_count BETWEEN 0 AND n_tokens)",
     .since = 2,
     .field = FIELD(ql_chunk_record, top1_count)},
    {.name = NULL},
};

/* The activation rounding of every product of a run (act_mode), with the note
 * saying why a rounding fell back (e.g. rows that do not split into its blocks).
 * Only products whose input is rounded have a row. */
static const col_def act_roundings_cols[] = {
    {.name = "run_id",
     .decl = "INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE",
     .since = 3},
    {.name = "tensor",
     .decl = "TEXT NOT NULL",
     .since = 3,
     .comment = "the product's weight, e.g. blk.0.ffn_down.weight",
     .field = FIELD(ql_act_record, tensor)},
    {.name = "requested",
     .decl = "TEXT NOT NULL",
     .since = 3,
     .comment = "rounding the act_mode asks for: f16, q8_0, q8_K, ...",
     .field = FIELD(ql_act_record, requested)},
    {.name = "used",
     .decl = "TEXT NOT NULL",
     .since = 3,
     .comment = "rounding applied",
     .field = FIELD(ql_act_record, used)},
    {.name = "note",
     .decl = "TEXT",
     .since = 3,
     .comment = "why used differs from requested",
     .field = FIELD(ql_act_record, note)},
    {.name = "kept_channels",
     .decl = "INTEGER",
     .since = 3,
     .comment = "outlier channels left unrounded",
     .field = FIELD(ql_act_record, kept_channels)},
    {.name = NULL},
};

/* The divergence of a run's residual stream from the reference's after each block
 * (experiment/divergence.h), for runs of sweeps with layer_metrics = yes. */
static const col_def layer_metrics_cols[] = {
    {.name = "run_id",
     .decl = "INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE",
     .since = 7},
    {.name = "layer",
     .decl = "INTEGER NOT NULL CHECK (layer >= 0)",
     .since = 7,
     .comment = "block index",
     .field = FIELD(ql_layer_record, layer)},
    {.name = "rel_err_mean",
     .decl = "REAL",
     .since = 7,
     .comment = "mean over scored tokens of ||h - r|| / ||r||",
     .field = FIELD(ql_layer_record, rel_err_mean)},
    {.name = "rel_err_p99",
     .decl = "REAL",
     .since = 7,
     .comment = "its 99th percentile",
     .field = FIELD(ql_layer_record, rel_err_p99)},
    {.name = "cos_mean",
     .decl = "REAL",
     .since = 7,
     .comment = "mean cosine similarity of h and r",
     .field = FIELD(ql_layer_record, cos_mean)},
    {.name = "route_agree",
     .decl = "REAL",
     .since = 10,
     .comment =
         "a mixture-of-experts block: share of scored tokens routed to the reference's experts",
     .field = FIELD(ql_layer_record, route_agree)},
    {.name = "route_overlap",
     .decl = "REAL",
     .since = 10,
     .comment = "mean share of a token's experts that are the reference's",
     .field = FIELD(ql_layer_record, route_overlap)},
    {.name = "load_shift",
     .decl = "REAL",
     .since = 10,
     .comment = "total variation distance of the experts' loads from the reference's (0 .. 1)",
     .field = FIELD(ql_layer_record, load_shift)},
    {.name = NULL},
};

/* A mixture of experts: each expert's share of a block's routed slots (experiment/routing.h),
 * the reference's and the run's. */
static const col_def expert_load_cols[] = {
    {.name = "run_id",
     .decl = "INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE",
     .since = 10},
    {.name = "layer",
     .decl = "INTEGER NOT NULL CHECK (layer >= 0)",
     .since = 10,
     .comment = "block index",
     .field = FIELD(ql_expert_load_record, layer)},
    {.name = "expert",
     .decl = "INTEGER NOT NULL CHECK (expert >= 0)",
     .since = 10,
     .field = FIELD(ql_expert_load_record, expert)},
    {.name = "ref_share",
     .decl = "REAL",
     .since = 10,
     .comment = "the reference's share of the block's (token, expert) slots",
     .field = FIELD(ql_expert_load_record, ref_share)},
    {.name = "share",
     .decl = "REAL",
     .since = 10,
     .comment = "the run's",
     .field = FIELD(ql_expert_load_record, share)},
    {.name = NULL},
};

/* Each expert of a stacked expert tensor (ffn_*_exps), quantized: its errors as
 * tensor_errors has them for whole tensors, weighted by that expert's importance. */
static const col_def expert_errors_cols[] = {
    {.name = "run_id",
     .decl = "INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE",
     .since = 10},
    {.name = "tensor",
     .decl = "TEXT NOT NULL",
     .since = 10,
     .comment = "the 3-D tensor, e.g. blk.0.ffn_down_exps.weight",
     .field = FIELD(ql_expert_record, tensor)},
    {.name = "layer", .decl = "INTEGER", .since = 10, .comment = "N of blk.N.*"},
    {.name = "expert",
     .decl = "INTEGER NOT NULL CHECK (expert >= 0)",
     .since = 10,
     .field = FIELD(ql_expert_record, expert)},
    {.name = "rmse", .decl = "REAL", .since = 10, .field = FIELD(ql_expert_record, rmse)},
    {.name = "max_err", .decl = "REAL", .since = 10, .field = FIELD(ql_expert_record, max_err)},
    {.name = "imatrix_err",
     .decl = "REAL",
     .since = 10,
     .field = FIELD(ql_expert_record, imatrix_err)},
    {.name = "imatrix_err_rel",
     .decl = "REAL",
     .since = 10,
     .field = FIELD(ql_expert_record, imatrix_err_rel)},
    {.name = NULL},
};

/* Per (unit, type): quantizing a tensor or a group of tensors alone, measured on a
 * calibration text (experiment/sensitivity.h); the objective of budgets with objective =
 * kld[:grouping]. */
static const col_def sensitivity_cols[] = {
    {.name = "id", .decl = "INTEGER PRIMARY KEY", .since = 8},
    {.name = "model_sha256",
     .decl = "TEXT NOT NULL",
     .since = 8,
     .comment = "the model (models.sha256)",
     .field = FIELD_OF(STORE_SENS_SRC_KEY, ql_store_sens_key, model_sha256)},
    {.name = "text_sha256",
     .decl = "TEXT NOT NULL",
     .since = 8,
     .comment = "the calibration text",
     .field = FIELD_OF(STORE_SENS_SRC_KEY, ql_store_sens_key, text_sha256)},
    {.name = "text",
     .decl = "TEXT",
     .since = 8,
     .comment = "its name as the config gives it",
     .field = FIELD_OF(STORE_SENS_SRC_KEY, ql_store_sens_key, text_name)},
    {.name = "ctx",
     .decl = "INTEGER NOT NULL",
     .since = 8,
     .field = FIELD_OF(STORE_SENS_SRC_KEY, ql_store_sens_key, ctx)},
    {.name = "chunks",
     .decl = "INTEGER NOT NULL",
     .since = 8,
     .field = FIELD_OF(STORE_SENS_SRC_KEY, ql_store_sens_key, chunks)},
    {.name = "imatrix_sha256",
     .decl = "TEXT NOT NULL",
     .since = 8,
     .comment = "the quantizer's importance matrix, or 'none'",
     .field = FIELD_OF(STORE_SENS_SRC_KEY, ql_store_sens_key, imatrix_sha256)},
    {.name = "metrics_version",
     .decl = "INTEGER NOT NULL",
     .since = 8,
     .field = FIELD_OF(STORE_SENS_SRC_KEY, ql_store_sens_key, metrics_version)},
    {.name = "tensor",
     .decl = "TEXT NOT NULL",
     .since = 8,
     .comment = "the tensor, or the group's name (blk.3.attn, blk.3, ffn_down)",
     .field = FIELD_OF(STORE_SENS_SRC_ROW, ql_store_sens_row, tensor)},
    {.name = "layer",
     .decl = "INTEGER NOT NULL",
     .since = 8,
     .comment = "the first block of its tensors; -1 the token embedding; n_layer the head",
     .field = SIGNED_FIELD_OF(STORE_SENS_SRC_ROW, ql_store_sens_row, layer)},
    {.name = "kind",
     .decl = "TEXT NOT NULL",
     .since = 8,
     .comment = "attn_q ... ffn_down, output, token_embd; a group's: attn, ffn, block or the kind",
     .field = FIELD_OF(STORE_SENS_SRC_ROW, ql_store_sens_row, kind)},
    {.name = "type", .decl = "TEXT NOT NULL", .since = 8},
    {.name = "bytes",
     .decl = "INTEGER NOT NULL",
     .since = 8,
     .comment = "its tensors in that type",
     .field = FIELD_OF(STORE_SENS_SRC_ROW, ql_store_sens_row, bytes)},
    {.name = "kld_mean",
     .decl = "REAL",
     .since = 8,
     .comment = "mean KLD of the model with only this tensor (group) quantized",
     .field = FIELD_OF(STORE_SENS_SRC_ROW, ql_store_sens_row, kld_mean)},
    {.name = "kld_mean_err",
     .decl = "REAL",
     .since = 8,
     .field = FIELD_OF(STORE_SENS_SRC_ROW, ql_store_sens_row, kld_mean_err)},
    {.name = "ln_ppl_ratio",
     .decl = "REAL",
     .since = 8,
     .comment = "ln(PPL / PPL of the reference)",
     .field = FIELD_OF(STORE_SENS_SRC_ROW, ql_store_sens_row, ln_ppl_ratio)},
    {.name = "ln_ppl_ratio_err",
     .decl = "REAL",
     .since = 8,
     .field = FIELD_OF(STORE_SENS_SRC_ROW, ql_store_sens_row, ln_ppl_ratio_err)},
    {.name = "seconds",
     .decl = "REAL",
     .since = 8,
     .comment = "quantizing and scoring it",
     .field = FIELD_OF(STORE_SENS_SRC_ROW, ql_store_sens_row, seconds)},
    {.name = "qlab_version", .decl = "TEXT NOT NULL", .since = 8},
    {.name = "grouping",
     .decl = "TEXT NOT NULL DEFAULT 'tensor'",
     .since = 9,
     .comment = "the unit's: tensor (one tensor, whichever grouping measured it), or module, "
                "layer, kind (a "
                "group of tensors: objective kld:<grouping>)",
     .field = FIELD_OF(STORE_SENS_SRC_KEY, ql_store_sens_key, grouping)},
    {.name = "n_tensors",
     .decl = "INTEGER NOT NULL DEFAULT 1",
     .since = 9,
     .comment = "the tensors quantized together",
     .field = FIELD_OF(STORE_SENS_SRC_ROW, ql_store_sens_row, n_tensors)},
    {.name = "blas_kernel",
     .decl = "TEXT",
     .since = 9,
     .comment = "what the products ran on (as runs.blas_kernel; not part of the key: NULL before "
                "schema 9)",
     .field = FIELD_OF(STORE_SENS_SRC_ROW, ql_store_sens_row, blas_kernel)},
    {.name = NULL},
};

static const char *const no_extra[] = {NULL};

/* The tables, referenced ones first. */
static const table_def tables[] = {
    {.pub = {.name = "models", .since = 1, .role = QL_TABLE_IDENTITY, .key = "sha256"},
     .cols = models_cols,
     .options = "",
     .extra = no_extra,
     .conflict = STORE_CONFLICT_MERGE},
    {.pub = {.name = "datasets", .since = 1, .role = QL_TABLE_IDENTITY, .key = "sha256"},
     .cols = datasets_cols,
     .options = "",
     .extra = no_extra,
     .conflict = STORE_CONFLICT_MERGE},
    {.pub = {.name = "configs", .since = 1, .role = QL_TABLE_IDENTITY, .key = "hash"},
     .cols = configs_cols,
     .derived = DERIVED_CONFIGS,
     .options = "",
     .extra = no_extra,
     .conflict = STORE_CONFLICT_KEEP},
    {.pub = {.name = "runs", .since = 1, .role = QL_TABLE_RUNS},
     .cols = runs_cols,
     .constraints = "UNIQUE (config_id, model_id, dataset_id, ctx, chunks),\n"
                    "    " RUNS_ERROR_CHECK ",\n"
                    "    CHECK ((status = 'running') = (finished IS NULL))",
     .options = "",
     .extra = runs_extra},
    {.pub = {.name = "sweep_runs", .since = 1, .role = QL_TABLE_MEMBERS},
     .comment = "every run a sweep includes, also those it skipped",
     .cols = sweep_runs_cols,
     .constraints = "PRIMARY KEY (sweep, run_id)",
     .options = " WITHOUT ROWID",
     .extra = no_extra,
     .conflict = STORE_CONFLICT_IGNORE},
    {.pub = {.name = "metrics", .since = 1, .role = QL_TABLE_RUN_DATA},
     .cols = metrics_cols,
     .derived = DERIVED_METRICS,
     .options = "",
     .extra = no_extra},
    {.pub = {.name = "tensor_errors",
             .since = 1,
             .role = QL_TABLE_RUN_DATA,
             .key = "tensor",
             .row = "the errors of tensor"},
     .cols = tensor_errors_cols,
     .constraints = "PRIMARY KEY (run_id, tensor),\n"
                    "    CHECK (fallback = (used_type <> requested_type)),\n"
                    "    CHECK (fallback = (fallback_reason IS NOT NULL))",
     .options = "",
     .extra = no_extra},
    {.pub = {.name = "chunk_metrics",
             .since = 2,
             .role = QL_TABLE_RUN_DATA,
             .key = "chunk",
             .row = "the sums of chunk"},
     .cols = chunk_metrics_cols,
     .constraints = "PRIMARY KEY (run_id, chunk)",
     .options = " WITHOUT ROWID",
     .extra = no_extra},
    {.pub = {.name = "act_roundings",
             .since = 3,
             .role = QL_TABLE_RUN_DATA,
             .key = "tensor",
             .row = "the activation rounding records of tensor"},
     .cols = act_roundings_cols,
     .constraints = "PRIMARY KEY (run_id, tensor),\n"
                    "    CHECK ((used <> requested) = (note IS NOT NULL))",
     .options = " WITHOUT ROWID",
     .extra = no_extra},
    {.pub = {.name = "layer_metrics",
             .since = 7,
             .role = QL_TABLE_RUN_DATA,
             .key = "layer",
             .row = "the divergence of layer"},
     .cols = layer_metrics_cols,
     .constraints = "PRIMARY KEY (run_id, layer)",
     .options = " WITHOUT ROWID",
     .extra = no_extra},
    {.pub = {.name = "expert_load",
             .since = 10,
             .role = QL_TABLE_RUN_DATA,
             .key = "expert",
             .row = "the load of expert"},
     .cols = expert_load_cols,
     .constraints = "PRIMARY KEY (run_id, layer, expert)",
     .options = " WITHOUT ROWID",
     .extra = no_extra},
    {.pub = {.name = "expert_errors",
             .since = 10,
             .role = QL_TABLE_RUN_DATA,
             .key = "expert",
             .row = "the errors of expert"},
     .cols = expert_errors_cols,
     .constraints = "PRIMARY KEY (run_id, tensor, expert)",
     .options = " WITHOUT ROWID",
     .extra = no_extra},
    {.pub = {.name = "sensitivity", .since = 8, .role = QL_TABLE_MEASURED},
     .cols = sensitivity_cols,
     .constraints =
         "UNIQUE (model_sha256, text_sha256, ctx, chunks, imatrix_sha256, metrics_version, tensor,"
         " type)",
     .options = "",
     .extra = no_extra,
     .conflict = STORE_CONFLICT_IGNORE},
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
    {.table = "runs",
     .since = 6,
     .before = "CHECK (status IN ('running', 'done', 'failed'))",
     .after = "CHECK (status IN ('running', 'done', 'failed', 'interrupted'))"},
    {.table = "runs",
     .since = 6,
     .before = "CHECK ((status = 'failed') = (error IS NOT NULL))",
     .after = RUNS_ERROR_CHECK},
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
        out[n].field = c->field;
        out[n].writes = c->writes;
        out[n].merge = c->merge;
        n++;
    }
    if (t->derived == DERIVED_CONFIGS) {
        const ql_config_column *cc;
        size_t nc = ql_config_columns(&cc);
        for (size_t i = 0; i < nc; i++) {
            QL_ASSERT(n < MAX_TABLE_COLUMNS);
            column *o = &out[n++];
            *o = (column){.name = cc[i].name};
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
            *o = (column){.name = mi[i].name};
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

void store_create_table_sql(const table_def *t, ql_strbuf *b)
{
    column cols[MAX_TABLE_COLUMNS];
    size_t n = store_table_columns(t, cols), width = 0;
    for (size_t i = 0; i < n; i++)
        width = strlen(cols[i].name) > width ? strlen(cols[i].name) : width;
    ql_strbuf_truncate(b, 0);
    ql_strbuf_add(b, "CREATE TABLE %s (%s%s\n", t->pub.name, t->comment ? "            -- " : "",
                  t->comment ? t->comment : "");
    for (size_t i = 0; i < n; i++) {
        bool last = i + 1 == n && !t->constraints;
        ql_strbuf_add(b, "    %-*s %s%s", (int)width, cols[i].name, cols[i].decl, last ? "" : ",");
        if (cols[i].comment)
            ql_strbuf_add(b, " -- %s", cols[i].comment);
        ql_strbuf_add(b, "\n");
    }
    if (t->constraints)
        ql_strbuf_add(b, "    %s\n", t->constraints);
    ql_strbuf_add(b, ")%s", t->options);
}

const table_def *store_table(const char *name)
{
    for (size_t i = 0; i < N_TABLES; i++)
        if (strcmp(tables[i].pub.name, name) == 0)
            return &tables[i];
    QL_ASSERT(!"not a table of the store");
    return NULL;
}

/* ---------------------------------------------------------------- writing rows */

bool store_column_written(const column *c, unsigned writes)
{
    if (c->writes)
        return (c->writes & writes) != 0;
    return (writes & STORE_ROW) && strcmp(c->decl, "INTEGER PRIMARY KEY") != 0;
}

void store_insert_sql(const table_def *t, unsigned writes, ql_strbuf *b)
{
    column cols[MAX_TABLE_COLUMNS];
    const size_t n = store_table_columns(t, cols);
    ql_strbuf_truncate(b, 0);
    ql_strbuf_add(b, "INSERT %sINTO %s (", t->conflict == STORE_CONFLICT_IGNORE ? "OR IGNORE " : "",
                  t->pub.name);
    const char *sep = "";
    for (size_t i = 0; i < n; i++)
        if (store_column_written(&cols[i], writes)) {
            ql_strbuf_add(b, "%s%s", sep, cols[i].name);
            sep = ", ";
        }
    ql_strbuf_add(b, ") VALUES (");
    sep = "";
    for (size_t i = 0; i < n; i++)
        if (store_column_written(&cols[i], writes)) {
            ql_strbuf_add(b, "%s:%s", sep, cols[i].name);
            sep = ", ";
        }
    ql_strbuf_add(b, ")");
    if (t->conflict == STORE_CONFLICT_KEEP) {
        ql_strbuf_add(b, " ON CONFLICT (%s) DO NOTHING", t->pub.key);
    } else if (t->conflict == STORE_CONFLICT_MERGE) {
        /* Every column the INSERT writes but the key: its merge, by default the stored
         * value when there is one. */
        ql_strbuf_add(b, " ON CONFLICT (%s) DO UPDATE SET ", t->pub.key);
        sep = "";
        for (size_t i = 0; i < n; i++) {
            const column *c = &cols[i];
            if (!store_column_written(c, writes) || strcmp(c->name, t->pub.key) == 0)
                continue;
            if (c->merge)
                ql_strbuf_add(b, "%s%s = %s", sep, c->name, c->merge);
            else
                ql_strbuf_add(b, "%s%s = coalesce(%s, excluded.%s)", sep, c->name, c->name,
                              c->name);
            sep = ", ";
        }
        ql_strbuf_add(b, " RETURNING id");
    }
}

void store_update_sql(const table_def *t, unsigned writes, unsigned clear, ql_strbuf *b)
{
    column cols[MAX_TABLE_COLUMNS];
    const size_t n = store_table_columns(t, cols);
    ql_strbuf_truncate(b, 0);
    ql_strbuf_add(b, "UPDATE %s SET ", t->pub.name);
    const char *sep = "";
    for (size_t i = 0; i < n; i++) {
        if (store_column_written(&cols[i], writes))
            ql_strbuf_add(b, "%s%s = :%s", sep, cols[i].name, cols[i].name);
        else if (store_column_written(&cols[i], clear))
            ql_strbuf_add(b, "%s%s = NULL", sep, cols[i].name);
        else
            continue;
        sep = ", ";
    }
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
static void add_axes(ql_strbuf *b)
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

static void add_applicability(ql_strbuf *b)
{
    list_add(b, APPLIES_SQL);
    list_add(b, TYPES_USED_SQL);
    list_add(b, FALLBACK_NOTE_SQL);
}

/* The columns of results and sweep_results after run_id and sweep (aliases r, c,
 * mo, d, m): the config, model and text, every metric, the run's provenance. They
 * share them so that a report can read either. */
static void add_result_columns(ql_strbuf *b)
{
    static const char *const head[] = {"c.hash AS config_hash", "c.canonical"};
    static const char *const inputs[] = {"mo.name AS model",
                                         "mo.sha256 AS model_sha256",
                                         "d.name AS dataset",
                                         "d.sha256 AS dataset_sha256",
                                         "r.ctx",
                                         "r.chunks"};
    static const char *const provenance[] = {"r.seconds",        "r.quantize_seconds",
                                             "r.ref_seconds",    "r.quant_seconds",
                                             "r.threads",        "r.host",
                                             "r.finished",       "r.qlab_version",
                                             "r.qlab_commit",    "r.metrics_version",
                                             "r.imatrix_sha256", "r.blas_kernel",
                                             "r.mem_budget",     "r.group_chunks",
                                             "r.body_of",        "r.forward_alone_seconds",
                                             "r.shared_blocks"};
    ql_strbuf_add(b, "\n");
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
    ql_strbuf_add(b, "\n");
}

#define RESULT_JOINS                                                                               \
    "JOIN configs c ON c.id = r.config_id\n"                                                       \
    "JOIN models mo ON mo.id = r.model_id\n"                                                       \
    "JOIN datasets d ON d.id = r.dataset_id\n"

static void view_results(ql_strbuf *b)
{
    ql_strbuf_add(
        b, "CREATE VIEW results AS -- one row per finished run: config axes, model/text,\n"
           "                       -- metrics and provenance; sweep: the one that last ran it\n"
           "SELECT r.id AS run_id, r.sweep,");
    add_result_columns(b);
    ql_strbuf_add(b, "FROM runs r\n" RESULT_JOINS "JOIN metrics m ON m.run_id = r.id\n"
                     "WHERE r.status = 'done'");
}

static void view_sweep_results(ql_strbuf *b)
{
    ql_strbuf_add(b,
                  "CREATE VIEW sweep_results AS -- results once per sweep that includes the run,\n"
                  "                             -- also when an earlier sweep ran it\n"
                  "SELECT r.id AS run_id, s.sweep,");
    add_result_columns(b);
    ql_strbuf_add(b, "FROM sweep_runs s JOIN runs r ON r.id = s.run_id\n" RESULT_JOINS
                     "JOIN metrics m ON m.run_id = r.id\n"
                     "WHERE r.status = 'done'");
}

static void view_run_log(ql_strbuf *b)
{
    ql_strbuf_add(
        b, "CREATE VIEW run_log AS -- every run whatever its status, with provenance and error\n"
           "SELECT r.id AS run_id, r.sweep, r.status, r.attempts, c.hash AS config_hash,\n"
           "       c.canonical, mo.name AS model, mo.sha256 AS model_sha256, d.name AS dataset,\n"
           "       r.ctx, r.chunks, r.started, r.finished, r.seconds, r.threads, r.host,\n"
           "       r.qlab_version, r.qlab_commit, r.metrics_version, r.blas_kernel,\n"
           "       r.mem_budget, r.group_chunks, r.pid, r.error\n"
           "FROM runs r\n" RESULT_JOINS);
}

static void view_failed_runs(ql_strbuf *b)
{
    ql_strbuf_add(b, "CREATE VIEW failed_runs AS SELECT * FROM run_log WHERE status = 'failed'");
}

static void view_tensor_results(ql_strbuf *b)
{
    ql_strbuf_add(
        b, "CREATE VIEW tensor_results AS -- per-tensor errors of finished runs, with their\n"
           "                              -- config\n"
           "SELECT r.id AS run_id, r.sweep, c.hash AS config_hash, c.canonical,\n");
    add_axes(b);
    ql_strbuf_add(b, ",\n");
    ql_strbuf_add(
        b, "       mo.name AS model, d.name AS dataset, r.ctx, r.chunks, t.tensor, t.layer,\n"
           "       t.requested_type, t.used_type, t.fallback, t.fallback_reason, t.n_rows,\n"
           "       t.n_cols, t.params, t.bytes, 8.0 * t.bytes / t.params AS bpw, t.rmse,\n"
           "       t.max_err, t.imatrix_err, t.imatrix_err_rel, t.outlier_cols, t.choice\n"
           "FROM tensor_errors t\n"
           "JOIN runs r ON r.id = t.run_id\n" RESULT_JOINS "WHERE r.status = 'done'");
}

static void view_chunk_results(ql_strbuf *b)
{
    ql_strbuf_add(b, "CREATE VIEW chunk_results AS -- per-chunk means of finished runs with their\n"
                     "                             -- config (pair two runs by chunk)\n"
                     "SELECT r.id AS run_id, c.hash AS config_hash,\n");
    add_axes(b);
    ql_strbuf_add(b, ",\n");
    ql_strbuf_add(
        b, "       mo.name AS model, d.name AS dataset, r.ctx, r.chunks, k.chunk, k.n_tokens,\n"
           "       k.kld_sum, k.nll_sum, k.nll_ref_sum, k.top1_count,\n"
           "       k.kld_sum / k.n_tokens AS kld_mean,\n"
           "       (k.nll_sum - k.nll_ref_sum) / k.n_tokens AS ln_ppl_ratio,\n"
           "       1.0 * k.top1_count / k.n_tokens AS top1_agree\n"
           "FROM chunk_metrics k\n"
           "JOIN runs r ON r.id = k.run_id\n" RESULT_JOINS "WHERE r.status = 'done'");
}

static void view_layer_results(ql_strbuf *b)
{
    ql_strbuf_add(b, "CREATE VIEW layer_results AS -- per-layer divergence of finished runs with\n"
                     "                             -- their config\n"
                     "SELECT r.id AS run_id, c.hash AS config_hash,\n");
    add_axes(b);
    ql_strbuf_add(b, ",\n");
    ql_strbuf_add(b, "       mo.name AS model, d.name AS dataset, r.ctx, r.chunks, l.layer,\n"
                     "       l.rel_err_mean, l.rel_err_p99, l.cos_mean\n"
                     "FROM layer_metrics l\n"
                     "JOIN runs r ON r.id = l.run_id\n" RESULT_JOINS "WHERE r.status = 'done'");
}

/* In creation order (failed_runs reads run_log). */
static const struct {
    const char *name;
    void (*sql)(ql_strbuf *b);
} views[] = {
    {.name = "results", .sql = view_results},
    {.name = "sweep_results", .sql = view_sweep_results},
    {.name = "run_log", .sql = view_run_log},
    {.name = "failed_runs", .sql = view_failed_runs},
    {.name = "tensor_results", .sql = view_tensor_results},
    {.name = "chunk_results", .sql = view_chunk_results},
    {.name = "layer_results", .sql = view_layer_results},
};
#define N_VIEWS (sizeof views / sizeof views[0])
const size_t store_n_views = N_VIEWS;

const char *store_view_name(size_t i)
{
    return views[i].name;
}

void store_view_sql(size_t i, ql_strbuf *b)
{
    ql_strbuf_truncate(b, 0);
    views[i].sql(b);
    size_t len = b->len;
    while (len > 0 && (b->text[len - 1] == '\n' || b->text[len - 1] == ' '))
        len--;
    ql_strbuf_truncate(b, len);
}
