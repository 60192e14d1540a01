#include "results/store.h"

#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/data.h"
#include "base/util.h"
#include "formats/types.h"
#include "model/tensor_name.h"
#include "ql_config.h"

struct ql_store {
    sqlite3 *db;
    char path[QL_PATH_MAX];
    const char *subject; /* the file failures are about (ql_store_set_subject); NULL = path */
    bool readonly;
    int fault;     /* countdown to an injected failure; 0 = off */
    bool injected; /* the failure being reported was injected */
    bool busy;     /* the last failure was SQLITE_BUSY (the lock stayed taken) */
    /* The lock waits (busy_wait): when to say so, when to give up. */
    int note_ms, patience_ms;
    double busy_since, busy_noted;
    double interrupted_since; /* when the wait in progress saw the interrupt (0: not yet) */
};

/* ================================================================ SQLite calls */

/* Every SQLite call that can fail goes through these, so that a test can make
 * the n-th one fail (ql_store_inject_fault) and check the error path. */
static bool fault_now(ql_store *s)
{
    if (s->fault > 0 && --s->fault == 0) {
        s->injected = true;
        return true;
    }
    return false;
}

/* "path: what: reason", the reason being the injected fault or SQLite's message. */
static ql_status db_fail(ql_store *s, int rc, const char *what, ql_error *err)
{
    const char *path = s->subject ? s->subject : s->path;
    s->busy = !s->injected && (rc & 0xff) == SQLITE_BUSY;
    if (s->injected) {
        s->injected = false;
        return ql_error_set(err, QL_EDB, "%s: %s: injected fault", path, what);
    }
    return ql_error_set(err, QL_EDB, "%s: %s: %s", path, what,
                        s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
}

static ql_status prep_what(ql_store *s, const char *sql, sqlite3_stmt **st, const char **tail,
                           const char *what, ql_error *err)
{
    *st = NULL;
    if (fault_now(s))
        return db_fail(s, SQLITE_IOERR, what, err);
    int rc = sqlite3_prepare_v2(s->db, sql, -1, st, tail);
    if (rc != SQLITE_OK) {
        ql_status r = db_fail(s, rc, what, err);
        sqlite3_finalize(*st);
        *st = NULL;
        return r;
    }
    return QL_OK;
}

static ql_status prep(ql_store *s, const char *sql, sqlite3_stmt **st, ql_error *err)
{
    return prep_what(s, sql, st, NULL, "preparing a statement", err);
}

static int step(ql_store *s, sqlite3_stmt *st)
{
    if (fault_now(s))
        return SQLITE_IOERR;
    int rc = sqlite3_step(st);
    /* sqlite3_errmsg may say less than the step's code (an error of another call). */
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        s->busy = (rc & 0xff) == SQLITE_BUSY;
    return rc;
}

/* Runs one statement to completion (no rows expected). */
static ql_status step_done(ql_store *s, sqlite3_stmt *st, const char *what, ql_error *err)
{
    int rc = step(s, st);
    if (rc == SQLITE_DONE)
        return QL_OK;
    if (rc == SQLITE_ROW)
        return ql_error_set(err, QL_EDB, "%s: %s: unexpected result row",
                            s->subject ? s->subject : s->path, what);
    return db_fail(s, rc, what, err);
}

static ql_status exec(ql_store *s, const char *sql, const char *what, ql_error *err)
{
    if (fault_now(s))
        return db_fail(s, SQLITE_IOERR, what, err);
    char *msg = NULL;
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        s->busy = (rc & 0xff) == SQLITE_BUSY;
        ql_error_set(err, QL_EDB, "%s: %s: %s", s->subject ? s->subject : s->path, what,
                     msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
        return QL_EDB;
    }
    return QL_OK;
}

/* Bind helpers: NULL for a NULL string, a negative count or a NaN. */
static ql_status bind_rc(ql_store *s, int rc, int idx, const char *what, ql_error *err)
{
    if (rc == SQLITE_OK)
        return QL_OK;
    char buf[160];
    if (!what) {
        snprintf(buf, sizeof buf, "binding parameter %d", idx);
        what = buf;
    }
    return db_fail(s, rc, what, err);
}

static ql_status bind_text(ql_store *s, sqlite3_stmt *st, int idx, const char *v, ql_error *err)
{
    if (fault_now(s))
        return bind_rc(s, SQLITE_IOERR, idx, NULL, err);
    int rc = v ? sqlite3_bind_text(st, idx, v, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(st, idx);
    return bind_rc(s, rc, idx, NULL, err);
}

static ql_status bind_count(ql_store *s, sqlite3_stmt *st, int idx, int64_t v, ql_error *err)
{
    if (fault_now(s))
        return bind_rc(s, SQLITE_IOERR, idx, NULL, err);
    int rc = v >= 0 ? sqlite3_bind_int64(st, idx, v) : sqlite3_bind_null(st, idx);
    return bind_rc(s, rc, idx, NULL, err);
}

static ql_status bind_real(ql_store *s, sqlite3_stmt *st, int idx, double v, ql_error *err)
{
    if (fault_now(s))
        return bind_rc(s, SQLITE_IOERR, idx, NULL, err);
    int rc = isnan(v) ? sqlite3_bind_null(st, idx) : sqlite3_bind_double(st, idx, v);
    return bind_rc(s, rc, idx, NULL, err);
}

/* Transactions. BEGIN IMMEDIATE takes the write lock at once, so a concurrent
 * writer waits in the busy handler instead of failing at the first write. */
static ql_status begin(ql_store *s, ql_error *err)
{
    return exec(s, "BEGIN IMMEDIATE", "starting a transaction", err);
}

static ql_status commit(ql_store *s, ql_error *err)
{
    return exec(s, "COMMIT", "committing", err);
}

/* Undoes the open transaction, if any. Not subject to fault injection: it is the
 * recovery path every injected fault must reach. */
static void rollback(ql_store *s)
{
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

static ql_status pragma_int(ql_store *s, const char *sql, int64_t *out, ql_error *err)
{
    sqlite3_stmt *st;
    ql_status rc = prep(s, sql, &st, err);
    if (rc)
        return rc;
    int r = step(s, st);
    if (r == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else
        rc = r == SQLITE_DONE ? ql_error_set(err, QL_EDB, "%s: '%s' returned nothing", s->path, sql)
                              : db_fail(s, r, sql, err);
    sqlite3_finalize(st);
    return rc;
}

/* The schema version, application id and number of schema objects, read in one
 * statement so they come from one snapshot: read one by one, a store another process
 * creates in between would look like tables without a qlab schema version. */
static ql_status read_identity(ql_store *s, int64_t *version, int64_t *app_id, int64_t *n_objects,
                               ql_error *err)
{
    static const char sql[] = "SELECT (SELECT user_version FROM pragma_user_version), "
                              "(SELECT application_id FROM pragma_application_id), "
                              "(SELECT count(*) FROM sqlite_master)";
    sqlite3_stmt *st;
    ql_status rc = prep(s, sql, &st, err);
    if (rc)
        return rc;
    int r = step(s, st);
    if (r == SQLITE_ROW) {
        *version = sqlite3_column_int64(st, 0);
        *app_id = sqlite3_column_int64(st, 1);
        *n_objects = sqlite3_column_int64(st, 2);
    } else if (r == SQLITE_DONE) {
        rc = ql_error_set(err, QL_EDB, "%s: the schema identity query returned nothing", s->path);
    } else {
        rc = db_fail(s, r, "reading the schema identity", err);
    }
    sqlite3_finalize(st);
    return rc;
}

/* ---------------------------------------------------------------- for the results layer */

ql_status ql_store_prepare(ql_store *s, const char *sql, sqlite3_stmt **st, const char **tail,
                           const char *what, ql_error *err)
{
    return prep_what(s, sql, st, tail, what, err);
}

ql_status ql_store_step(ql_store *s, sqlite3_stmt *st, bool *row, const char *what, ql_error *err)
{
    int rc = step(s, st);
    *row = rc == SQLITE_ROW;
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? QL_OK : db_fail(s, rc, what, err);
}

ql_status ql_store_step_done(ql_store *s, sqlite3_stmt *st, const char *what, ql_error *err)
{
    return step_done(s, st, what, err);
}

ql_status ql_store_bind_text(ql_store *s, sqlite3_stmt *st, int idx, const char *v,
                             const char *what, ql_error *err)
{
    if (fault_now(s))
        return bind_rc(s, SQLITE_IOERR, idx, what, err);
    int rc = v ? sqlite3_bind_text(st, idx, v, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(st, idx);
    return bind_rc(s, rc, idx, what, err);
}

ql_status ql_store_bind_int64(ql_store *s, sqlite3_stmt *st, int idx, int64_t v, const char *what,
                              ql_error *err)
{
    if (fault_now(s))
        return bind_rc(s, SQLITE_IOERR, idx, what, err);
    return bind_rc(s, sqlite3_bind_int64(st, idx, (sqlite3_int64)v), idx, what, err);
}

ql_status ql_store_bind_real(ql_store *s, sqlite3_stmt *st, int idx, double v, const char *what,
                             ql_error *err)
{
    if (fault_now(s))
        return bind_rc(s, SQLITE_IOERR, idx, what, err);
    int rc = isnan(v) ? sqlite3_bind_null(st, idx) : sqlite3_bind_double(st, idx, v);
    return bind_rc(s, rc, idx, what, err);
}

ql_status ql_store_exec(ql_store *s, const char *sql, const char *what, ql_error *err)
{
    return exec(s, sql, what, err);
}

void ql_store_rollback(ql_store *s)
{
    rollback(s);
}

void ql_store_set_subject(ql_store *s, const char *path)
{
    s->subject = path;
}

/* ================================================================ SQL text */

/* Schema statements are built from the declarations below (a bounded number of
 * short names), so a fixed buffer always suffices; running out is a broken
 * invariant, not an input error. */
#define SQL_MAX 65536

typedef struct {
    char text[SQL_MAX];
    size_t len;
} sqlbuf;

static void sb_add(sqlbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_add(sqlbuf *b, const char *fmt, ...)
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
        sb_add(b, ",\n       %s", item);
    else if (first)
        sb_add(b, "       %s", item);
    else
        sb_add(b, ", %s", item);
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

/* A column: its SQL declaration (type and constraints), the schema version that
 * added it and a comment for the schema. A column added after its table needs a
 * declaration ALTER TABLE accepts (no PRIMARY KEY or UNIQUE; NOT NULL with a DEFAULT). */
typedef struct {
    const char *name;
    const char *decl;
    int since;
    const char *comment;
} col_def;

typedef struct {
    ql_store_table pub;
    const char *comment;      /* a line of SQL comment before CREATE TABLE, or NULL */
    const col_def *cols;      /* the declared columns, up to a NULL name */
    int derived;              /* then the columns of a list: DERIVED_* */
    const char *constraints;  /* table constraints, one per line, or NULL */
    const char *options;      /* after the closing parenthesis ("WITHOUT ROWID"), or "" */
    const char *const *extra; /* further statements (indexes) with the table, NULL-terminated */
} table_def;

enum { DERIVED_NONE, DERIVED_CONFIGS, DERIVED_METRICS };

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

/* Constraints a version changed: in a database older than `since`, the table's stored
 * CREATE TABLE holds `before` where this qlab declares `after`. Every change here admits
 * every row the old constraint admitted (it only widens it), so the stored text can be
 * rewritten in place (SQLite's documented way for such changes: writable_schema and a
 * new schema cookie) without copying the table, which the foreign keys of the tables
 * referring to it would not allow inside the migration's transaction. */
static const struct {
    const char *table;
    int since;
    const char *before, *after;
} constraint_changes[] = {
    {"runs", 6, "CHECK (status IN ('running', 'done', 'failed'))",
     "CHECK (status IN ('running', 'done', 'failed', 'interrupted'))"},
    {"runs", 6, "CHECK ((status = 'failed') = (error IS NOT NULL))", RUNS_ERROR_CHECK},
};

/* A column as created: the declaration of a derived one is built here. */
typedef struct {
    const char *name;
    char decl[160];
    int since;
    const char *comment;
} column;

#define MAX_TABLE_COLUMNS QL_STORE_COLUMN_MAX

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

/* The columns of table t, in creation order. */
static size_t table_columns(const table_def *t, column *out)
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

static void create_table_sql(const table_def *t, sqlbuf *b)
{
    column cols[MAX_TABLE_COLUMNS];
    size_t n = table_columns(t, cols), width = 0;
    for (size_t i = 0; i < n; i++)
        width = strlen(cols[i].name) > width ? strlen(cols[i].name) : width;
    b->len = 0;
    sb_add(b, "CREATE TABLE %s (%s%s\n", t->pub.name, t->comment ? "            -- " : "",
           t->comment ? t->comment : "");
    for (size_t i = 0; i < n; i++) {
        bool last = i + 1 == n && !t->constraints;
        sb_add(b, "    %-*s %s%s", (int)width, cols[i].name, cols[i].decl, last ? "" : ",");
        if (cols[i].comment)
            sb_add(b, " -- %s", cols[i].comment);
        sb_add(b, "\n");
    }
    if (t->constraints)
        sb_add(b, "    %s\n", t->constraints);
    sb_add(b, ")%s", t->options);
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
        size_t n = table_columns(&tables[k], cols);
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
    sb_add(b, "\n");
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
    sb_add(b, "\n");
}

#define RESULT_JOINS                                                                               \
    "JOIN configs c ON c.id = r.config_id\n"                                                       \
    "JOIN models mo ON mo.id = r.model_id\n"                                                       \
    "JOIN datasets d ON d.id = r.dataset_id\n"

static void view_results(sqlbuf *b)
{
    sb_add(b, "CREATE VIEW results AS -- one row per finished run: config axes, model/text,\n"
              "                       -- metrics and provenance; sweep: the one that last ran it\n"
              "SELECT r.id AS run_id, r.sweep,");
    add_result_columns(b);
    sb_add(b, "FROM runs r\n" RESULT_JOINS "JOIN metrics m ON m.run_id = r.id\n"
              "WHERE r.status = 'done'");
}

static void view_sweep_results(sqlbuf *b)
{
    sb_add(b, "CREATE VIEW sweep_results AS -- results once per sweep that includes the run,\n"
              "                             -- also when an earlier sweep ran it\n"
              "SELECT r.id AS run_id, s.sweep,");
    add_result_columns(b);
    sb_add(b, "FROM sweep_runs s JOIN runs r ON r.id = s.run_id\n" RESULT_JOINS
              "JOIN metrics m ON m.run_id = r.id\n"
              "WHERE r.status = 'done'");
}

static void view_run_log(sqlbuf *b)
{
    sb_add(b,
           "CREATE VIEW run_log AS -- every run whatever its status, with provenance and error\n"
           "SELECT r.id AS run_id, r.sweep, r.status, r.attempts, c.hash AS config_hash,\n"
           "       c.canonical, mo.name AS model, mo.sha256 AS model_sha256, d.name AS dataset,\n"
           "       r.ctx, r.chunks, r.started, r.finished, r.seconds, r.threads, r.host,\n"
           "       r.qlab_version, r.qlab_commit, r.metrics_version, r.blas_kernel,\n"
           "       r.mem_budget, r.group_chunks, r.pid, r.error\n"
           "FROM runs r\n" RESULT_JOINS);
}

static void view_failed_runs(sqlbuf *b)
{
    sb_add(b, "CREATE VIEW failed_runs AS SELECT * FROM run_log WHERE status = 'failed'");
}

static void view_tensor_results(sqlbuf *b)
{
    sb_add(b, "CREATE VIEW tensor_results AS -- per-tensor errors of finished runs, with their\n"
              "                              -- config\n"
              "SELECT r.id AS run_id, r.sweep, c.hash AS config_hash, c.canonical,\n");
    add_axes(b);
    sb_add(b, ",\n");
    sb_add(b, "       mo.name AS model, d.name AS dataset, r.ctx, r.chunks, t.tensor, t.layer,\n"
              "       t.requested_type, t.used_type, t.fallback, t.fallback_reason, t.n_rows,\n"
              "       t.n_cols, t.params, t.bytes, 8.0 * t.bytes / t.params AS bpw, t.rmse,\n"
              "       t.max_err, t.imatrix_err, t.imatrix_err_rel, t.outlier_cols, t.choice\n"
              "FROM tensor_errors t\n"
              "JOIN runs r ON r.id = t.run_id\n" RESULT_JOINS "WHERE r.status = 'done'");
}

static void view_chunk_results(sqlbuf *b)
{
    sb_add(b, "CREATE VIEW chunk_results AS -- per-chunk means of finished runs with their\n"
              "                             -- config (pair two runs by chunk)\n"
              "SELECT r.id AS run_id, c.hash AS config_hash,\n");
    add_axes(b);
    sb_add(b, ",\n");
    sb_add(b, "       mo.name AS model, d.name AS dataset, r.ctx, r.chunks, k.chunk, k.n_tokens,\n"
              "       k.kld_sum, k.nll_sum, k.nll_ref_sum, k.top1_count,\n"
              "       k.kld_sum / k.n_tokens AS kld_mean,\n"
              "       (k.nll_sum - k.nll_ref_sum) / k.n_tokens AS ln_ppl_ratio,\n"
              "       1.0 * k.top1_count / k.n_tokens AS top1_agree\n"
              "FROM chunk_metrics k\n"
              "JOIN runs r ON r.id = k.run_id\n" RESULT_JOINS "WHERE r.status = 'done'");
}

static void view_layer_results(sqlbuf *b)
{
    sb_add(b, "CREATE VIEW layer_results AS -- per-layer divergence of finished runs with\n"
              "                             -- their config\n"
              "SELECT r.id AS run_id, c.hash AS config_hash,\n");
    add_axes(b);
    sb_add(b, ",\n");
    sb_add(b, "       mo.name AS model, d.name AS dataset, r.ctx, r.chunks, l.layer,\n"
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

/* The SQL of view i as sqlite_master keeps it (without trailing white space). */
static void view_sql(size_t i, sqlbuf *b)
{
    b->len = 0;
    views[i].sql(b);
    while (b->len > 0 && (b->text[b->len - 1] == '\n' || b->text[b->len - 1] == ' '))
        b->text[--b->len] = '\0';
}

/* ================================================================ open */

static ql_status check_identity(ql_store *s, int64_t version, int64_t app_id, int64_t n_objects,
                                ql_error *err)
{
    if (app_id != 0 && app_id != QL_STORE_APPLICATION_ID)
        return ql_error_set(err, QL_EDB, "%s: not a qlab results database (application_id 0x%llx)",
                            s->path, (unsigned long long)app_id);
    if (version > QL_STORE_SCHEMA_VERSION)
        return ql_error_set(err, QL_EDB,
                            "%s: results database schema version %lld is newer than this qlab "
                            "supports (%d); use a newer qlab",
                            s->path, (long long)version, QL_STORE_SCHEMA_VERSION);
    if (version == 0 && n_objects > 0)
        return ql_error_set(err, QL_EDB,
                            "%s: not a qlab results database (it has tables but no qlab schema "
                            "version)",
                            s->path);
    return QL_OK;
}

/* Whether every view of this qlab is in the database as this qlab defines it. */
static ql_status views_current(ql_store *s, bool *current, ql_error *err)
{
    *current = false;
    sqlite3_stmt *st;
    ql_status rc =
        prep(s, "SELECT sql FROM sqlite_master WHERE type = 'view' AND name = ?1", &st, err);
    if (rc)
        return rc;
    bool all = true;
    for (size_t i = 0; i < N_VIEWS && all && !rc; i++) {
        sqlite3_reset(st);
        if ((rc = bind_text(s, st, 1, views[i].name, err)))
            break;
        int r = step(s, st);
        if (r == SQLITE_ROW) {
            sqlbuf b;
            view_sql(i, &b);
            const char *have = (const char *)sqlite3_column_text(st, 0);
            all = have && strcmp(have, b.text) == 0;
        } else if (r == SQLITE_DONE) {
            all = false;
        } else {
            rc = db_fail(s, r, "reading the views", err);
        }
    }
    sqlite3_finalize(st);
    *current = !rc && all;
    return rc;
}

/* Brings a database from schema version `version` to the current one (inside the
 * caller's transaction): what it lacks is created from the declarations, the views
 * are created anew. Version 0 is an empty file. */
static ql_status upgrade(ql_store *s, int64_t version, ql_error *err)
{
    ql_status st;
    sqlbuf b;
    char what[160];
    for (size_t t = 0; t < N_TABLES; t++) {
        const table_def *td = &tables[t];
        if (td->pub.since > version) {
            snprintf(what, sizeof what, "creating table %s (schema version %d)", td->pub.name,
                     td->pub.since);
            create_table_sql(td, &b);
            if ((st = exec(s, b.text, what, err)))
                return st;
            for (const char *const *x = td->extra; *x; x++)
                if ((st = exec(s, *x, what, err)))
                    return st;
            continue;
        }
        column cols[MAX_TABLE_COLUMNS];
        size_t n = table_columns(td, cols);
        for (size_t i = 0; i < n; i++) {
            if (cols[i].since <= version)
                continue;
            snprintf(what, sizeof what, "adding column %s.%s (schema version %d)", td->pub.name,
                     cols[i].name, cols[i].since);
            b.len = 0;
            sb_add(&b, "ALTER TABLE %s ADD COLUMN %s %s", td->pub.name, cols[i].name, cols[i].decl);
            if ((st = exec(s, b.text, what, err)))
                return st;
        }
    }
    return QL_OK;
}

/* Rewrites the constraints version > `version` changed (constraint_changes), inside the
 * caller's transaction. */
static ql_status rewrite_constraints(ql_store *s, int64_t version, ql_error *err)
{
    ql_status st = QL_OK;
    bool writable = false;
    for (size_t i = 0; i < sizeof constraint_changes / sizeof constraint_changes[0] && !st; i++) {
        if (constraint_changes[i].since <= version)
            continue;
        /* A table this migration created has the current definition already. */
        bool existed = false;
        for (size_t t = 0; t < N_TABLES; t++)
            if (strcmp(tables[t].pub.name, constraint_changes[i].table) == 0)
                existed = tables[t].pub.since <= version;
        if (!existed)
            continue;
        char what[160];
        snprintf(what, sizeof what, "changing a constraint of table %s (schema version %d)",
                 constraint_changes[i].table, constraint_changes[i].since);
        sqlite3_stmt *q;
        if ((st = prep_what(s, "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1",
                            &q, NULL, what, err)))
            break;
        char *sql = NULL;
        if (!(st = bind_text(s, q, 1, constraint_changes[i].table, err))) {
            int r = step(s, q);
            const char *have = r == SQLITE_ROW ? (const char *)sqlite3_column_text(q, 0) : NULL;
            const char *at = have ? strstr(have, constraint_changes[i].before) : NULL;
            if (r != SQLITE_ROW && r != SQLITE_DONE) {
                st = db_fail(s, r, what, err);
            } else if (!at || strstr(at + 1, constraint_changes[i].before)) {
                st = ql_error_set(err, QL_EDB,
                                  "%s: %s: the table's definition does not hold \"%s\" once (a "
                                  "database changed by hand?)",
                                  s->path, what, constraint_changes[i].before);
            } else {
                const size_t pre = (size_t)(at - have),
                             before = strlen(constraint_changes[i].before);
                sql = sqlite3_mprintf("%.*s%s%s", (int)pre, have, constraint_changes[i].after,
                                      at + before);
                if (!sql)
                    st = ql_error_set(err, QL_ENOMEM, "%s: out of memory", s->path);
            }
        }
        sqlite3_finalize(q);
        if (!st && !writable) {
            st = exec(s, "PRAGMA writable_schema = ON", what, err);
            writable = !st;
        }
        if (!st && !(st = prep_what(s,
                                    "UPDATE sqlite_master SET sql = ?1 WHERE type = 'table' AND"
                                    " name = ?2",
                                    &q, NULL, what, err))) {
            if (!(st = bind_text(s, q, 1, sql, err)) &&
                !(st = bind_text(s, q, 2, constraint_changes[i].table, err)))
                st = step_done(s, q, what, err);
            sqlite3_finalize(q);
        }
        sqlite3_free(sql);
    }
    if (!writable)
        return st;
    /* A new schema cookie makes every connection read the changed definitions. */
    int64_t cookie = 0;
    if (!st && !(st = pragma_int(s, "PRAGMA schema_version", &cookie, err))) {
        char set[64];
        snprintf(set, sizeof set, "PRAGMA schema_version = %lld", (long long)cookie + 1);
        st = exec(s, set, "changing the schema cookie", err);
    }
    sqlite3_exec(s->db, "PRAGMA writable_schema = OFF", NULL, NULL, NULL);
    return st;
}

static ql_status recreate_views(ql_store *s, ql_error *err)
{
    ql_status st;
    sqlbuf b;
    for (size_t i = N_VIEWS; i-- > 0;) {
        b.len = 0;
        sb_add(&b, "DROP VIEW IF EXISTS %s", views[i].name);
        if ((st = exec(s, b.text, "dropping the views", err)))
            return st;
    }
    for (size_t i = 0; i < N_VIEWS; i++) {
        view_sql(i, &b);
        if ((st = exec(s, b.text, "creating the views", err)))
            return st;
    }
    return QL_OK;
}

static ql_status migrate(ql_store *s, ql_error *err)
{
    int64_t version, app_id, n_objects;
    ql_status st;
    if ((st = read_identity(s, &version, &app_id, &n_objects, err)) ||
        (st = check_identity(s, version, app_id, n_objects, err)))
        return st;
    if (s->readonly) {
        if (version == 0)
            return ql_error_set(err, QL_EDB, "%s: empty database (no qlab schema)", s->path);
        if (version < QL_STORE_SCHEMA_VERSION)
            return ql_error_set(err, QL_EDB,
                                "%s: results database schema version %lld is older than %d; "
                                "open it once read-write (e.g. with qlab sweep) to migrate it",
                                s->path, (long long)version, QL_STORE_SCHEMA_VERSION);
        return QL_OK;
    }
    bool current = false;
    if (version == QL_STORE_SCHEMA_VERSION && ((st = views_current(s, &current, err)) || current))
        return st;

    if ((st = begin(s, err)))
        return st;
    /* Another process may have migrated between the check and the lock. */
    if ((st = pragma_int(s, "PRAGMA user_version", &version, err)) ||
        (st = check_identity(s, version, QL_STORE_APPLICATION_ID, 0, err)) ||
        (st = upgrade(s, version, err)) || (st = rewrite_constraints(s, version, err)) ||
        (st = recreate_views(s, err)))
        goto out_rollback;
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d; PRAGMA application_id = %d",
             QL_STORE_SCHEMA_VERSION, QL_STORE_APPLICATION_ID);
    if ((st = exec(s, sql, "setting the schema version", err)) || (st = commit(s, err)))
        goto out_rollback;
    return QL_OK;
out_rollback:
    rollback(s);
    return st;
}

/* SQLite's busy handler: another connection holds the lock this one needs. Waits with
 * a backoff (1 ms doubling to 1 s), says so on stderr once the wait passes note_ms (and
 * every note_ms after), and gives up after patience_ms, or QL_STORE_INTERRUPT_GRACE_MS
 * after the process is told to stop (SIGINT, SIGTERM; the wait in progress then counts
 * from that moment): the caller then gets SQLITE_BUSY (ql_store_busy). The grace lets an
 * interrupted run be marked so while a sibling job holds the lock to mark its own. */
static int busy_wait(void *ctx, int count)
{
    ql_store *s = ctx;
    const double now = ql_now();
    if (count == 0) {
        s->busy_since = now;
        s->busy_noted = 0.0;
        s->interrupted_since = 0.0;
    }
    const double waited_ms = (now - s->busy_since) * 1000.0;
    if (ql_interrupted() && s->interrupted_since == 0.0)
        s->interrupted_since = now;
    if (s->interrupted_since > 0.0 &&
        (now - s->interrupted_since) * 1000.0 >= (double)QL_STORE_INTERRUPT_GRACE_MS)
        return 0;
    if (s->patience_ms > 0 && waited_ms >= (double)s->patience_ms)
        return 0;
    if (waited_ms >= (double)s->note_ms &&
        (s->busy_noted == 0.0 || (now - s->busy_noted) * 1000.0 >= (double)s->note_ms)) {
        fprintf(stderr,
                "qlab: %s: the results store is locked by another process; waiting for it "
                "(%.0f s so far, giving up after %.0f s)\n",
                s->path, waited_ms / 1000.0, (double)s->patience_ms / 1000.0);
        s->busy_noted = now;
    }
    sqlite3_sleep(count < 10 ? 1 << count : 1000);
    return 1;
}

bool ql_store_busy(const ql_store *s)
{
    return s->busy;
}

static ql_status configure(ql_store *s, ql_error *err)
{
    ql_status st;
    int rc = sqlite3_busy_handler(s->db, busy_wait, s);
    if (rc != SQLITE_OK)
        return db_fail(s, rc, "setting the busy handler", err);
    if ((st = exec(s, "PRAGMA foreign_keys = ON", "enabling foreign keys", err)))
        return st;
    int64_t fk = 0;
    if ((st = pragma_int(s, "PRAGMA foreign_keys", &fk, err)))
        return st;
    if (fk != 1)
        return ql_error_set(err, QL_EDB, "%s: this SQLite cannot enforce foreign keys", s->path);
    if (s->readonly)
        return QL_OK;
    /* WAL: readers never block the writer; NORMAL sync is durable against a
     * killed process (only a power loss can lose the last transactions). */
    sqlite3_stmt *q;
    if ((st = prep(s, "PRAGMA journal_mode = WAL", &q, err)))
        return st;
    /* Switching a new database to WAL needs it to itself: when another process is
     * creating the same store, SQLite can say busy without calling the busy handler
     * (it would deadlock waiting), so the switch is retried with the handler's waits. */
    for (int tries = 0;
         (rc = step(s, q)) != SQLITE_ROW && (rc & 0xff) == SQLITE_BUSY && busy_wait(s, tries);
         tries++)
        sqlite3_reset(q);
    if (rc != SQLITE_ROW)
        st = db_fail(s, rc, "switching to WAL", err);
    else if (strcmp((const char *)sqlite3_column_text(q, 0), "wal") != 0)
        st = ql_error_set(err, QL_EDB, "%s: cannot use WAL journal mode (got '%s')", s->path,
                          (const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    if (st)
        return st;
    return exec(s, "PRAGMA synchronous = NORMAL", "setting synchronous", err);
}

/* A file: URI of path for sqlite3_open_v2 (reserved characters escaped), with query. */
static bool file_uri(const char *path, const char *query, char *out, size_t size)
{
    size_t o = 0;
    const char *pre = path[0] == '/' ? "file:" : "file:./";
    for (const char *p = pre; *p && o + 1 < size; p++)
        out[o++] = *p;
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (o + 4 >= size)
            return false;
        if (*p == '%' || *p == '?' || *p == '#' || *p < 0x20 || *p >= 0x7f)
            o += (size_t)snprintf(out + o, size - o, "%%%02X", *p);
        else
            out[o++] = (char)*p;
    }
    int n = snprintf(out + o, size - o, "?%s", query);
    return n > 0 && (size_t)n < size - o;
}

/* Whether a read-only open must not touch the file system: the directory (where SQLite
 * creates the -shm and -wal files of a WAL database) or the file is not writable (or
 * nobody may write it, or its file system is mounted read-only). The
 * database is then read as immutable: no locks, no WAL (a WAL file left there is not
 * read; it is said). */
static bool needs_immutable(const char *path)
{
    char dir[QL_PATH_MAX];
    ql_strlcpy(dir, path, sizeof dir);
    char *slash = strrchr(dir, '/');
    if (!slash)
        ql_strlcpy(dir, ".", sizeof dir);
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    /* access() says yes to root whatever the modes: a file nobody may write (mode
     * 0444) and a read-only file system count too. */
    struct statvfs fs;
    struct stat sb;
    return access(dir, W_OK) != 0 || access(path, W_OK) != 0 ||
           (statvfs(dir, &fs) == 0 && (fs.f_flag & ST_RDONLY)) ||
           (stat(path, &sb) == 0 && (sb.st_mode & 0222) == 0);
}

/* A file that is not a qlab results database is refused before a read-write open
 * changes anything in it (the WAL switch rewrites its header): its identity is read on
 * a read-only connection first. An empty or missing file is a new store. */
static ql_status check_foreign(const char *path, ql_error *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || sb.st_size == 0)
        return QL_OK;
    ql_store probe;
    memset(&probe, 0, sizeof probe);
    ql_strlcpy(probe.path, path, sizeof probe.path);
    probe.readonly = true;
    probe.note_ms = QL_STORE_BUSY_TIMEOUT_MS;
    probe.patience_ms = QL_STORE_BUSY_TIMEOUT_MS;
    char uri[QL_PATH_MAX * 3 + 32];
    const bool immutable = needs_immutable(path);
    if (immutable && !file_uri(path, "immutable=1", uri, sizeof uri))
        return ql_error_set(err, QL_EINVAL, "%s: path too long", path);
    int rc = sqlite3_open_v2(immutable ? uri : path, &probe.db,
                             SQLITE_OPEN_READONLY | (immutable ? SQLITE_OPEN_URI : 0), NULL);
    ql_status st = QL_OK;
    if (rc != SQLITE_OK) {
        st = ql_error_set(err, QL_EDB, "%s: cannot open database: %s", path,
                          probe.db ? sqlite3_errmsg(probe.db) : sqlite3_errstr(rc));
    } else {
        sqlite3_busy_handler(probe.db, busy_wait, &probe);
        int64_t version, app_id, n_objects;
        if (!(st = read_identity(&probe, &version, &app_id, &n_objects, err)))
            st = check_identity(&probe, version, app_id, n_objects, err);
    }
    sqlite3_close_v2(probe.db);
    return st;
}

ql_status ql_store_open(const char *path, const ql_store_options *opt, ql_store **out,
                        ql_error *err)
{
    *out = NULL;
    ql_store_options defaults = {0};
    if (!opt)
        opt = &defaults;
    if (opt->readonly && !ql_file_exists(path))
        return ql_error_set(err, QL_EIO, "%s: no results database here (run a sweep first)", path);
    /* SQLite would block on a FIFO and read a device without end. */
    ql_status st = ql_file_refuse_special(path, "results database", err);
    if (st)
        return st;
    ql_store *s = calloc(1, sizeof *s);
    if (!s)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
    if (strlen(path) >= sizeof s->path) {
        free(s);
        return ql_error_set(err, QL_EINVAL, "%s: path too long", path);
    }
    ql_strlcpy(s->path, path, sizeof s->path);
    s->readonly = opt->readonly;
    s->fault = opt->fault_after;
    s->note_ms = opt->busy_timeout_ms > 0 ? opt->busy_timeout_ms : QL_STORE_BUSY_TIMEOUT_MS;
    s->patience_ms = opt->lock_patience_ms != 0 ? opt->lock_patience_ms : QL_STORE_LOCK_PATIENCE_MS;
    if (s->patience_ms < 0)
        s->patience_ms = 0; /* no limit */

    if (!opt->readonly && (st = check_foreign(path, err)))
        goto out_close;
    int flags = opt->readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    char uri[QL_PATH_MAX * 3 + 32];
    const char *name = path;
    if (opt->readonly && needs_immutable(path)) {
        if (!file_uri(path, "immutable=1", uri, sizeof uri)) {
            st = ql_error_set(err, QL_EINVAL, "%s: path too long", path);
            goto out_close;
        }
        char wal[QL_PATH_MAX + 8];
        struct stat sb;
        snprintf(wal, sizeof wal, "%s-wal", path);
        if (stat(wal, &sb) == 0 && sb.st_size > 0)
            fprintf(stderr,
                    "qlab: warning: %s cannot be written here, so it is read as it is without "
                    "its write-ahead log %s (%lld bytes): the latest transactions may be "
                    "missing\n",
                    path, wal, (long long)sb.st_size);
        name = uri;
        flags |= SQLITE_OPEN_URI;
    }
    int rc = sqlite3_open_v2(name, &s->db, flags, NULL);
    if (rc != SQLITE_OK) {
        st = ql_error_set(err, QL_EDB, "%s: cannot open database: %s", path,
                          s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        goto out_close;
    }
    sqlite3_extended_result_codes(s->db, 1);
    if ((st = configure(s, err)) || (st = migrate(s, err)))
        goto out_close;
    *out = s;
    return QL_OK;
out_close:
    ql_store_close(s);
    return st;
}

void ql_store_close(ql_store *s)
{
    if (!s)
        return;
    /* sqlite3_close_v2 closes once the last statement is finalized; every
     * function here finalizes its own, so this closes at once. */
    sqlite3_close_v2(s->db);
    free(s);
}

struct sqlite3 *ql_store_handle(ql_store *s)
{
    return s->db;
}

const char *ql_store_path(const ql_store *s)
{
    return s->path;
}

void ql_store_inject_fault(ql_store *s, int n)
{
    s->fault = n;
}

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

/* Steps a statement that returns one id (RETURNING id / SELECT id). */
static ql_status step_id(ql_store *s, sqlite3_stmt *st, const char *what, int64_t *id,
                         ql_error *err)
{
    int rc = step(s, st);
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(st, 0);
        /* Drain so that an INSERT ... RETURNING completes. */
        rc = step(s, st);
        if (rc == SQLITE_DONE)
            return QL_OK;
    } else if (rc == SQLITE_DONE) {
        return ql_error_set(err, QL_EDB, "%s: %s: no row", s->path, what);
    }
    return db_fail(s, rc, what, err);
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
    ql_status rc = prep(s, sql, &st, err);
    if (rc)
        return rc;
    const int64_t counts[] = {m->file_bytes, m->params,    m->n_layer, m->n_embd,     m->n_ff,
                              m->n_head,     m->n_head_kv, m->n_vocab, m->n_ctx_train};
    if ((rc = bind_text(s, st, 1, m->sha256, err)) || (rc = bind_text(s, st, 2, m->path, err)) ||
        (rc = bind_text(s, st, 3, m->name, err)) || (rc = bind_text(s, st, 4, m->arch, err)))
        goto out;
    for (int i = 0; i < 9; i++)
        if ((rc = bind_count(s, st, 5 + i, counts[i], err)))
            goto out;
    rc = step_id(s, st, "storing the model", id, err);
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
    ql_status rc = prep(s, sql, &st, err);
    if (rc)
        return rc;
    if ((rc = bind_text(s, st, 1, d->sha256, err)) || (rc = bind_text(s, st, 2, d->name, err)) ||
        (rc = bind_text(s, st, 3, d->path, err)) || (rc = bind_count(s, st, 4, d->bytes, err)) ||
        (rc = bind_count(s, st, 5, d->tokens, err)) ||
        (rc = bind_count(s, st, 6, d->tokens >= 0 ? d->tokens_model : -1, err)))
        goto out;
    rc = step_id(s, st, "storing the dataset", id, err);
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
    sb_add(&q, "INSERT INTO configs (hash, canonical");
    for (size_t i = 0; i < n; i++)
        sb_add(&q, ", %s", cols[i].name);
    sb_add(&q, ") VALUES (?1, ?2");
    for (size_t i = 0; i < n; i++)
        sb_add(&q, ", ?%zu", i + 3);
    sb_add(&q, ") ON CONFLICT (hash) DO NOTHING");
    sqlite3_stmt *st;
    ql_status rc = prep(s, q.text, &st, err);
    if (rc)
        return rc;
    if ((rc = bind_text(s, st, 1, hash, err)) || (rc = bind_text(s, st, 2, canonical, err)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        char text[QL_CONFIG_VALUE_MAX];
        double num;
        int idx = (int)i + 3;
        ql_config_column_value(c, i, text, sizeof text, &num);
        if (cols[i].type == QL_COLUMN_TEXT)
            rc = bind_text(s, st, idx, text, err);
        else if (cols[i].type == QL_COLUMN_INTEGER)
            rc = bind_count(s, st, idx, isnan(num) ? -1 : (int64_t)num, err);
        else
            rc = bind_real(s, st, idx, num, err);
        if (rc)
            goto out;
    }
    if ((rc = step_done(s, st, "storing the config", err)))
        goto out;
    sqlite3_finalize(st);

    if ((rc = prep(s, "SELECT id, canonical FROM configs WHERE hash = ?1", &st, err)))
        return rc;
    if ((rc = bind_text(s, st, 1, hash, err)))
        goto out;
    int r = step(s, st);
    if (r != SQLITE_ROW) {
        rc = r == SQLITE_DONE
                 ? ql_error_set(err, QL_EDB, "%s: config %.12s vanished", s->path, hash)
                 : db_fail(s, r, "reading the config", err);
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
    ql_status rc = prep(s, sql, &st, err);
    if (rc)
        return rc;
    if ((rc = bind_text(s, st, 1, config_hash, err)) ||
        (rc = bind_text(s, st, 2, model_sha256, err)) ||
        (rc = bind_text(s, st, 3, dataset_sha256, err)) || (rc = bind_count(s, st, 4, ctx, err)) ||
        (rc = bind_count(s, st, 5, chunks, err)) ||
        (rc = bind_count(s, st, 6, metrics_version, err)))
        goto out;
    int r = step(s, st);
    if (r == SQLITE_ROW)
        *run_id = sqlite3_column_int64(st, 0);
    else if (r != SQLITE_DONE)
        rc = db_fail(s, r, "looking for a finished run", err);
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
    ql_status rc = prep(s, sql, &st, err);
    if (rc)
        return rc;
    if ((rc = bind_text(s, st, 1, model_sha256, err)) ||
        (rc = bind_text(s, st, 2, dataset_sha256, err)) || (rc = bind_count(s, st, 3, ctx, err)) ||
        (rc = bind_count(s, st, 4, chunks, err)))
        goto out;
    size_t cap = 0;
    int r;
    while ((r = step(s, st)) == SQLITE_ROW) {
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
        rc = db_fail(s, r, "reading the run states", err);
out:
    sqlite3_finalize(st);
    if (rc) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

static double col_or_nan(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? (double)NAN : sqlite3_column_double(st, i);
}

ql_status ql_store_run_brief_get(ql_store *s, int64_t run_id, ql_store_run_brief *out,
                                 ql_error *err)
{
    out->forward_seconds = (double)NAN;
    for (int i = 0; i < QL_N_METRICS; i++)
        out->metric[i] = (double)NAN;
    /* Every metric, derived ones by their SQL (over the metrics row m). */
    sqlbuf q = {.len = 0};
    sb_add(&q, "SELECT r.status, r.chunks, r.quant_seconds");
    const ql_metric_info *mi;
    size_t nm = ql_metrics(&mi);
    for (size_t i = 0; i < nm; i++) {
        if (mi[i].kind == QL_METRIC_KIND_DERIVED)
            sb_add(&q, ", %s", mi[i].sql);
        else
            sb_add(&q, ", m.%s", mi[i].name);
    }
    sb_add(&q, " FROM runs r LEFT JOIN metrics m ON m.run_id = r.id WHERE r.id = ?1");
    sqlite3_stmt *st;
    ql_status rc = prep(s, q.text, &st, err);
    if (rc)
        return rc;
    if ((rc = bind_count(s, st, 1, run_id, err)))
        goto out;
    int r = step(s, st);
    if (r == SQLITE_ROW) {
        ql_strlcpy(out->status, (const char *)sqlite3_column_text(st, 0), sizeof out->status);
        out->chunks = sqlite3_column_int64(st, 1);
        out->forward_seconds = col_or_nan(st, 2);
        for (size_t i = 0; i < nm; i++)
            out->metric[i] = col_or_nan(st, 3 + (int)i);
    } else if (r == SQLITE_DONE) {
        rc = ql_error_set(err, QL_ENOTFOUND, "%s: no run %lld", s->path, (long long)run_id);
    } else {
        rc = db_fail(s, r, "reading the run", err);
    }
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
    if ((rc = bind_text(s, st, 1, k->model_sha256, err)) ||
        (rc = bind_text(s, st, 2, k->text_sha256, err)) ||
        (rc = bind_count(s, st, 3, k->ctx, err)) || (rc = bind_count(s, st, 4, k->chunks, err)) ||
        (rc = bind_text(s, st, 5, k->imatrix_sha256, err)) ||
        (rc = bind_count(s, st, 6, k->metrics_version, err)) ||
        (rc = bind_text(s, st, 7, tensor, err)) ||
        (rc = bind_text(s, st, 8, ql_type_name(type), err)))
        return rc;
    return bind_text(s, st, 9, k->grouping, err);
}

ql_status ql_store_sensitivity_get(ql_store *s, const ql_store_sens_key *key, const char *tensor,
                                   int32_t type, ql_store_sens_row *out, bool *found, ql_error *err)
{
    *found = false;
    sqlite3_stmt *st;
    ql_status rc = prep(s,
                        "SELECT bytes, kld_mean, kld_mean_err, ln_ppl_ratio, ln_ppl_ratio_err,"
                        " seconds FROM sensitivity WHERE " SENS_KEY_WHERE,
                        &st, err);
    if (rc)
        return rc;
    if (!(rc = bind_sens_key(s, st, key, tensor, type, err))) {
        int r = step(s, st);
        if (r == SQLITE_ROW) {
            out->bytes = sqlite3_column_int64(st, 0);
            out->kld_mean = col_or_nan(st, 1);
            out->kld_mean_err = col_or_nan(st, 2);
            out->ln_ppl_ratio = col_or_nan(st, 3);
            out->ln_ppl_ratio_err = col_or_nan(st, 4);
            out->seconds = col_or_nan(st, 5);
            *found = true;
        } else if (r != SQLITE_DONE) {
            rc = db_fail(s, r, "reading a sensitivity", err);
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
        prep(s,
             "INSERT OR IGNORE INTO sensitivity (model_sha256, text_sha256, ctx, chunks,"
             " imatrix_sha256, metrics_version, tensor, type, grouping, text, layer, kind,"
             " bytes, kld_mean, kld_mean_err, ln_ppl_ratio, ln_ppl_ratio_err, seconds,"
             " qlab_version, n_tensors, blas_kernel) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,"
             " ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
             &st, err);
    if (rc)
        return rc;
    if (!(rc = bind_sens_key(s, st, key, row->tensor, row->type, err)) &&
        !(rc = bind_text(s, st, 10, key->text_name, err)) &&
        !(rc = ql_store_bind_int64(s, st, 11, row->layer, "binding the layer", err)) &&
        !(rc = bind_text(s, st, 12, row->kind, err)) &&
        !(rc = bind_count(s, st, 13, row->bytes, err)) &&
        !(rc = bind_real(s, st, 14, row->kld_mean, err)) &&
        !(rc = bind_real(s, st, 15, row->kld_mean_err, err)) &&
        !(rc = bind_real(s, st, 16, row->ln_ppl_ratio, err)) &&
        !(rc = bind_real(s, st, 17, row->ln_ppl_ratio_err, err)) &&
        !(rc = bind_real(s, st, 18, row->seconds, err)) &&
        !(rc = bind_text(s, st, 19, QL_VERSION, err)) &&
        !(rc = bind_count(s, st, 20, row->n_tensors, err)) &&
        !(rc = bind_text(s, st, 21, row->blas_kernel, err)))
        rc = step_done(s, st, "storing a sensitivity", err);
    sqlite3_finalize(st);
    return rc;
}

static ql_status add_member(ql_store *s, const char *sweep, int64_t run_id, ql_error *err)
{
    sqlite3_stmt *st;
    ql_status rc =
        prep(s, "INSERT OR IGNORE INTO sweep_runs (sweep, run_id) VALUES (?1, ?2)", &st, err);
    if (rc)
        return rc;
    if (!(rc = bind_text(s, st, 1, sweep, err)) && !(rc = bind_count(s, st, 2, run_id, err)))
        rc = step_done(s, st, "recording the sweep's run", err);
    sqlite3_finalize(st);
    return rc;
}

ql_status ql_store_add_to_sweep(ql_store *s, const char *sweep, int64_t run_id, ql_error *err)
{
    return add_member(s, sweep, run_id, err);
}

/* Binds the provenance columns shared by a new run and a retry, at ?1..?12. */
static ql_status bind_provenance(ql_store *s, sqlite3_stmt *st, const ql_store_run_info *info,
                                 ql_error *err)
{
    char now[32], host[256];
    ql_utc_timestamp(now);
    if (gethostname(host, sizeof host) != 0)
        ql_strlcpy(host, "unknown", sizeof host);
    host[sizeof host - 1] = '\0';
    ql_status rc;
    if ((rc = bind_text(s, st, 1, info->sweep, err)) || (rc = bind_text(s, st, 2, now, err)) ||
        (rc = bind_count(s, st, 3, info->threads > 0 ? info->threads : -1, err)) ||
        (rc = bind_text(s, st, 4, host, err)) || (rc = bind_text(s, st, 5, QL_VERSION, err)) ||
        (rc = bind_text(s, st, 6, QL_COMMIT, err)) ||
        (rc = bind_count(s, st, 7, info->metrics_version, err)) ||
        (rc = bind_text(s, st, 8, info->imatrix_sha256, err)) ||
        (rc = bind_text(s, st, 9, info->blas_kernel, err)) ||
        (rc = bind_count(s, st, 10, info->mem_budget > 0 ? info->mem_budget : -1, err)) ||
        (rc = bind_count(s, st, 11, info->group_chunks > 0 ? info->group_chunks : -1, err)) ||
        (rc = bind_count(s, st, 12, (int64_t)getpid(), err)))
        return rc;
    return QL_OK;
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
    if (gethostname(host, sizeof host) != 0)
        ql_strlcpy(host, "unknown", sizeof host);
    host[sizeof host - 1] = '\0';
    if (info->metrics_version <= 0)
        return ql_error_set(err, QL_EINVAL, "%s: metrics_version must be > 0", s->path);
    if (key->ctx <= 0 || key->chunks <= 0)
        return ql_error_set(err, QL_EINVAL, "%s: run with ctx %d, chunks %d (both must be > 0)",
                            s->path, key->ctx, key->chunks);
    sqlite3_stmt *st = NULL;
    ql_status rc = begin(s, err);
    if (rc)
        return rc;
    if ((rc = prep(s,
                   "SELECT id, status, metrics_version, host, pid FROM runs WHERE config_id = ?1"
                   " AND model_id = ?2 AND dataset_id = ?3 AND ctx = ?4 AND chunks = ?5",
                   &st, err)) ||
        (rc = bind_count(s, st, 1, key->config_id, err)) ||
        (rc = bind_count(s, st, 2, key->model_id, err)) ||
        (rc = bind_count(s, st, 3, key->dataset_id, err)) ||
        (rc = bind_count(s, st, 4, key->ctx, err)) || (rc = bind_count(s, st, 5, key->chunks, err)))
        goto out;
    int r = step(s, st);
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
            rollback(s);
            return QL_OK;
        }
    } else if (r != SQLITE_DONE) {
        rc = db_fail(s, r, "looking up the run", err);
        goto out;
    }
    sqlite3_finalize(st);
    st = NULL;

    if (id == 0) {
        static const char insert[] =
            "INSERT INTO runs (sweep, started, threads, host, qlab_version, qlab_commit,"
            " metrics_version, imatrix_sha256, blas_kernel, mem_budget, group_chunks, pid,"
            " config_id, model_id, dataset_id, ctx, chunks, status) VALUES (?1, ?2, ?3, ?4,"
            " ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, 'running')"
            " RETURNING id";
        if ((rc = prep(s, insert, &st, err)) || (rc = bind_provenance(s, st, info, err)) ||
            (rc = bind_count(s, st, 13, key->config_id, err)) ||
            (rc = bind_count(s, st, 14, key->model_id, err)) ||
            (rc = bind_count(s, st, 15, key->dataset_id, err)) ||
            (rc = bind_count(s, st, 16, key->ctx, err)) ||
            (rc = bind_count(s, st, 17, key->chunks, err)) ||
            (rc = step_id(s, st, "creating the run", &id, err)))
            goto out;
    } else {
        /* A retry: forget what the earlier attempt left. */
        for (size_t t = 0; t < N_TABLES; t++) {
            if (tables[t].pub.role != QL_TABLE_RUN_DATA)
                continue;
            sqlbuf q = {.len = 0};
            sb_add(&q, "DELETE FROM %s WHERE run_id = ?1", tables[t].pub.name);
            if ((rc = prep(s, q.text, &st, err)) || (rc = bind_count(s, st, 1, id, err)) ||
                (rc = step_done(s, st, "clearing the earlier attempt", err)))
                goto out;
            sqlite3_finalize(st);
            st = NULL;
        }
        static const char update[] =
            "UPDATE runs SET sweep = ?1, started = ?2, threads = ?3, host = ?4,"
            " qlab_version = ?5, qlab_commit = ?6, metrics_version = ?7, imatrix_sha256 = ?8,"
            " blas_kernel = ?9, mem_budget = ?10, group_chunks = ?11, pid = ?12,"
            " status = 'running', error = NULL, finished = NULL, seconds = NULL,"
            " quantize_seconds = NULL, ref_seconds = NULL, quant_seconds = NULL,"
            " attempts = attempts + 1 WHERE id = ?13";
        if ((rc = prep(s, update, &st, err)) || (rc = bind_provenance(s, st, info, err)) ||
            (rc = bind_count(s, st, 13, id, err)) ||
            (rc = step_done(s, st, "restarting the run", err)))
            goto out;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (info->sweep && (rc = add_member(s, info->sweep, id, err)))
        goto out;
    if ((rc = commit(s, err)))
        goto out;
    *run_id = id;
out:
    sqlite3_finalize(st);
    if (rc)
        rollback(s);
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
    const ql_metric_info *mi;
    size_t nm = ql_metrics(&mi);
    sqlbuf q = {.len = 0};
    sb_add(&q, "INSERT INTO metrics (run_id");
    for (size_t i = 0; i < nm; i++)
        if (mi[i].kind != QL_METRIC_KIND_DERIVED)
            sb_add(&q, ", %s", mi[i].name);
    sb_add(&q, ") VALUES (?1");
    int idx = 1;
    for (size_t i = 0; i < nm; i++)
        if (mi[i].kind != QL_METRIC_KIND_DERIVED)
            sb_add(&q, ", ?%d", ++idx);
    sb_add(&q, ")");

    sqlite3_stmt *st;
    ql_status rc = prep(s, q.text, &st, err);
    if (rc)
        return rc;
    if ((rc = bind_count(s, st, 1, run_id, err)))
        goto out;
    idx = 1;
    for (size_t i = 0; i < nm; i++) {
        if (mi[i].kind == QL_METRIC_KIND_DERIVED)
            continue;
        double v = ql_run_metric(m, (ql_metric_id)i);
        idx++;
        if (mi[i].kind == QL_METRIC_KIND_COUNT && !isnan(v)) {
            if (!(v >= 0.0) || v != floor(v) || v > 9007199254740992.0) {
                rc = ql_error_set(err, QL_EINVAL,
                                  "%s: run %lld: metric %s = %g is not a whole count", s->path,
                                  (long long)run_id, mi[i].name, v);
                goto out;
            }
            rc = bind_count(s, st, idx, (int64_t)v, err);
        } else {
            rc = bind_real(s, st, idx, v, err);
        }
        if (rc)
            goto out;
    }
    rc = step_done(s, st, "storing the metrics", err);
out:
    sqlite3_finalize(st);
    return rc;
}

static ql_status insert_tensor_errors(ql_store *s, int64_t run_id, const ql_tensor_record *te,
                                      size_t n, ql_error *err)
{
    if (n == 0)
        return QL_OK;
    static const char sql[] =
        "INSERT INTO tensor_errors (run_id, tensor, layer, requested_type, used_type, fallback,"
        " fallback_reason, n_rows, n_cols, params, bytes, rmse, max_err, imatrix_err,"
        " imatrix_err_rel, outlier_cols, choice)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)";
    sqlite3_stmt *st;
    ql_status rc = prep(s, sql, &st, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        const ql_tensor_record *t = &te[i];
        const char *name = t->tensor ? t->tensor : "";
        const ql_type_traits *req = ql_type_get(t->requested_type);
        const ql_type_traits *used = ql_type_get(t->used_type);
        bool fallback = t->used_type != t->requested_type;
        if (!*name || !req || !used || fallback != (t->fallback_reason != NULL) || t->n_rows < 0 ||
            t->n_cols < 0 || t->params < 0 || t->bytes < 0) {
            rc = ql_error_set(err, QL_EINVAL,
                              "%s: run %lld: tensor '%s' (%s -> %s%s%s): invalid record (a "
                              "fallback needs a reason, types must be known, counts >= 0)",
                              s->path, (long long)run_id, name, ql_type_name(t->requested_type),
                              ql_type_name(t->used_type), t->fallback_reason ? ", reason: " : "",
                              t->fallback_reason ? t->fallback_reason : "");
            goto out;
        }
        sqlite3_reset(st);
        if ((rc = bind_count(s, st, 1, run_id, err)) || (rc = bind_text(s, st, 2, name, err)) ||
            (rc = bind_count(s, st, 3, ql_tensor_block(name, NULL), err)) ||
            (rc = bind_text(s, st, 4, req->name, err)) ||
            (rc = bind_text(s, st, 5, used->name, err)) ||
            (rc = bind_count(s, st, 6, fallback ? 1 : 0, err)) ||
            (rc = bind_text(s, st, 7, t->fallback_reason, err)) ||
            (rc = bind_count(s, st, 8, t->n_rows, err)) ||
            (rc = bind_count(s, st, 9, t->n_cols, err)) ||
            (rc = bind_count(s, st, 10, t->params, err)) ||
            (rc = bind_count(s, st, 11, t->bytes, err)) ||
            (rc = bind_real(s, st, 12, t->rmse, err)) ||
            (rc = bind_real(s, st, 13, t->max_err, err)) ||
            (rc = bind_real(s, st, 14, t->imatrix_err, err)) ||
            (rc = bind_real(s, st, 15, t->imatrix_err_rel, err)) ||
            (rc = bind_count(s, st, 16, t->outlier_cols, err)) ||
            (rc = bind_text(s, st, 17, t->choice, err)))
            goto out;
        if ((rc = step_done(s, st, "storing a tensor error", err))) {
            ql_error_prefix(err, "tensor '%s': ", name);
            goto out;
        }
    }
out:
    sqlite3_finalize(st);
    return rc;
}

static ql_status insert_act_roundings(ql_store *s, int64_t run_id, const ql_act_record *a, size_t n,
                                      ql_error *err)
{
    if (n == 0)
        return QL_OK;
    sqlite3_stmt *st;
    ql_status rc = prep(s,
                        "INSERT INTO act_roundings (run_id, tensor, requested, used, note,"
                        " kept_channels) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                        &st, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        const ql_act_record *r = &a[i];
        if (!r->tensor || !*r->tensor || !r->requested || !r->used ||
            (strcmp(r->requested, r->used) != 0) != (r->note != NULL)) {
            rc = ql_error_set(err, QL_EINVAL,
                              "%s: run %lld: activation rounding of '%s': invalid record (a "
                              "fallback needs a note)",
                              s->path, (long long)run_id, r->tensor ? r->tensor : "");
            goto out;
        }
        sqlite3_reset(st);
        if ((rc = bind_count(s, st, 1, run_id, err)) ||
            (rc = bind_text(s, st, 2, r->tensor, err)) ||
            (rc = bind_text(s, st, 3, r->requested, err)) ||
            (rc = bind_text(s, st, 4, r->used, err)) || (rc = bind_text(s, st, 5, r->note, err)) ||
            (rc = bind_count(s, st, 6, r->kept_channels, err)) ||
            (rc = step_done(s, st, "storing an activation rounding", err)))
            goto out;
    }
out:
    sqlite3_finalize(st);
    return rc;
}

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

static ql_status insert_chunk_metrics(ql_store *s, int64_t run_id, const ql_chunk_record *ck,
                                      size_t n, ql_error *err)
{
    if (n == 0)
        return QL_OK;
    static const char sql[] =
        "INSERT INTO chunk_metrics (run_id, chunk, n_tokens, kld_sum, nll_sum, nll_ref_sum,"
        " top1_count) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
    sqlite3_stmt *st;
    ql_status rc = prep(s, sql, &st, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        const ql_chunk_record *c = &ck[i];
        sqlite3_reset(st);
        if ((rc = bind_count(s, st, 1, run_id, err)) ||
            (rc = bind_count(s, st, 2, c->chunk, err)) ||
            (rc = bind_count(s, st, 3, c->n_tokens, err)) ||
            (rc = bind_real(s, st, 4, c->kld_sum, err)) ||
            (rc = bind_real(s, st, 5, c->nll_sum, err)) ||
            (rc = bind_real(s, st, 6, c->nll_ref_sum, err)) ||
            (rc = bind_count(s, st, 7, c->top1_count, err)))
            goto out;
        if ((rc = step_done(s, st, "storing the chunk metrics", err))) {
            ql_error_prefix(err, "chunk %d: ", (int)c->chunk);
            goto out;
        }
    }
out:
    sqlite3_finalize(st);
    return rc;
}

static ql_status insert_layer_metrics(ql_store *s, int64_t run_id, const ql_layer_record *l,
                                      size_t n, ql_error *err)
{
    if (n == 0)
        return QL_OK;
    sqlite3_stmt *st;
    ql_status rc = prep(s,
                        "INSERT INTO layer_metrics (run_id, layer, rel_err_mean, rel_err_p99,"
                        " cos_mean, route_agree, route_overlap, load_shift)"
                        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                        &st, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < n && !rc; i++) {
        sqlite3_reset(st);
        if (!(rc = bind_count(s, st, 1, run_id, err)) &&
            !(rc = bind_count(s, st, 2, l[i].layer, err)) &&
            !(rc = bind_real(s, st, 3, l[i].rel_err_mean, err)) &&
            !(rc = bind_real(s, st, 4, l[i].rel_err_p99, err)) &&
            !(rc = bind_real(s, st, 5, l[i].cos_mean, err)) &&
            !(rc = bind_real(s, st, 6, l[i].route_agree, err)) &&
            !(rc = bind_real(s, st, 7, l[i].route_overlap, err)) &&
            !(rc = bind_real(s, st, 8, l[i].load_shift, err)))
            rc = step_done(s, st, "storing the layer metrics", err);
    }
    sqlite3_finalize(st);
    return rc;
}

static ql_status insert_expert_loads(ql_store *s, int64_t run_id, const ql_expert_load_record *l,
                                     size_t n, ql_error *err)
{
    if (n == 0)
        return QL_OK;
    sqlite3_stmt *st;
    ql_status rc = prep(s,
                        "INSERT INTO expert_load (run_id, layer, expert, ref_share, share)"
                        " VALUES (?1, ?2, ?3, ?4, ?5)",
                        &st, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < n && !rc; i++) {
        sqlite3_reset(st);
        if (!(rc = bind_count(s, st, 1, run_id, err)) &&
            !(rc = bind_count(s, st, 2, l[i].layer, err)) &&
            !(rc = bind_count(s, st, 3, l[i].expert, err)) &&
            !(rc = bind_real(s, st, 4, l[i].ref_share, err)) &&
            !(rc = bind_real(s, st, 5, l[i].share, err)))
            rc = step_done(s, st, "storing the expert loads", err);
    }
    sqlite3_finalize(st);
    return rc;
}

static ql_status insert_expert_errors(ql_store *s, int64_t run_id, const ql_expert_record *x,
                                      size_t n, ql_error *err)
{
    if (n == 0)
        return QL_OK;
    sqlite3_stmt *st;
    ql_status rc = prep(s,
                        "INSERT INTO expert_errors (run_id, tensor, layer, expert, rmse, max_err,"
                        " imatrix_err, imatrix_err_rel) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                        &st, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < n && !rc; i++) {
        sqlite3_reset(st);
        if (!(rc = bind_count(s, st, 1, run_id, err)) &&
            !(rc = bind_text(s, st, 2, x[i].tensor, err)) &&
            !(rc = bind_count(s, st, 3, ql_tensor_block(x[i].tensor, NULL), err)) &&
            !(rc = bind_count(s, st, 4, x[i].expert, err)) &&
            !(rc = bind_real(s, st, 5, x[i].rmse, err)) &&
            !(rc = bind_real(s, st, 6, x[i].max_err, err)) &&
            !(rc = bind_real(s, st, 7, x[i].imatrix_err, err)) &&
            !(rc = bind_real(s, st, 8, x[i].imatrix_err_rel, err)))
            rc = step_done(s, st, "storing the expert errors", err);
    }
    sqlite3_finalize(st);
    return rc;
}

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
    sqlite3_stmt *st = NULL;
    ql_status rc = begin(s, err);
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
        (rc = insert_tensor_errors(s, run_id, res->tensors, res->n_tensors, err)) ||
        (rc = insert_chunk_metrics(s, run_id, res->chunks, res->n_chunks, err)) ||
        (rc = insert_act_roundings(s, run_id, res->acts, res->n_acts, err)) ||
        (rc = insert_layer_metrics(s, run_id, res->layers, res->n_layers, err)) ||
        (rc = insert_expert_loads(s, run_id, res->loads, res->n_loads, err)) ||
        (rc = insert_expert_errors(s, run_id, res->experts, res->n_experts, err)))
        goto out;
    ql_utc_timestamp(now);
    if ((rc = prep(s,
                   "UPDATE runs SET status = 'done', finished = ?1, seconds = ?2,"
                   " quantize_seconds = ?3, ref_seconds = ?4, quant_seconds = ?5 WHERE id = ?6",
                   &st, err)) ||
        (rc = bind_text(s, st, 1, now, err)) || (rc = bind_real(s, st, 2, t->seconds, err)) ||
        (rc = bind_real(s, st, 3, t->quantize_seconds, err)) ||
        (rc = bind_real(s, st, 4, t->ref_seconds, err)) ||
        (rc = bind_real(s, st, 5, t->forward_seconds, err)) ||
        (rc = bind_count(s, st, 6, run_id, err)) ||
        (rc = step_done(s, st, "marking the run done", err)))
        goto out;
    sqlite3_finalize(st);
    st = NULL;
    rc = commit(s, err);
out:
    sqlite3_finalize(st);
    if (rc)
        rollback(s);
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
    sqlite3_stmt *st;
    ql_status rc = prep(s,
                        "UPDATE runs SET status = ?5, error = ?1, finished = ?2,"
                        " seconds = ?3 WHERE id = ?4 AND status = 'running'",
                        &st, err);
    if (rc)
        return rc;
    if ((rc = bind_text(s, st, 1, error && *error ? error : "unknown error", err)) ||
        (rc = bind_text(s, st, 2, now, err)) || (rc = bind_real(s, st, 3, seconds, err)) ||
        (rc = bind_count(s, st, 4, run_id, err)) || (rc = bind_text(s, st, 5, status, err)) ||
        (rc = step_done(s, st, "recording the failure", err)))
        goto out;
    if (sqlite3_changes(s->db) != 1)
        rc =
            ql_error_set(err, QL_EINVAL, "%s: run %lld is not running", s->path, (long long)run_id);
out:
    sqlite3_finalize(st);
    return rc;
}
