/* qlab: the SQLite results store.
 *
 * One database file (default results/qlab.db) holds models, datasets, configs,
 * runs, their metrics and per-tensor errors. WAL journal, foreign keys on, a
 * busy timeout, the schema version in PRAGMA user_version (migrated forward on
 * open; a newer version is refused) and PRAGMA application_id = 'qlab'.
 *
 * A run is one config evaluated on one model and one text at one ctx and chunk
 * count; that identity is unique, so a run row is reused when a failed or
 * interrupted run is retried. Life of a run:
 *
 *   ql_store_find_done()   -> already done with this metrics version: skip it
 *   ql_store_begin_run()   -> status 'running' (commits at once)
 *   ql_store_finish_run()  -> metrics + tensor errors (+ per-chunk sums) + status 'done',
 *                             one transaction
 *   ql_store_fail_run()    -> status 'failed' with the error text
 *   ql_store_interrupt_run() -> status 'interrupted' (a signal stopped it), with why
 *
 * A run left 'running' by a killed process, a 'failed' run and a 'done' run of an
 * older metrics version are taken over by the next ql_store_begin_run. Missing
 * measurements are NULL in the database, never 0: the C structs below use NAN
 * (or -1 for counts) for "not measured".
 *
 * Threading: one ql_store per thread; SQLite serializes writers across processes
 * (a lock another process holds is waited for with a backoff; see ql_store_options).
 *
 * Opening read-write a file that is not a qlab results database (another SQLite file:
 * no qlab application_id or schema version but tables) is refused before anything in
 * it changes. */
#ifndef QL_STORE_H
#define QL_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "experiment/config.h"
#include "experiment/records.h"

/* Version of the schema this qlab writes (PRAGMA user_version). Every table and
 * column is declared with the version that added it (store_schema.c; the metrics' and the
 * configs' columns in experiment/records.h and experiment/config.h), so opening an
 * older database creates what it lacks and adds the missing columns. The views are
 * not versioned: a read-write open re-creates any whose definition differs from this
 * qlab's. History:
 *   1  models, datasets, configs, runs, sweep_runs, metrics, tensor_errors + views
 *   2  chunk_metrics (per-chunk sums of a run) and the chunk_results view
 *   3  act_roundings (the activation rounding each product used)
 *   4  configs.tensor_types (per-tensor type rules), tensor_errors.choice (the rule
 *      behind each tensor's requested type); the further distribution metrics (reverse
 *      KLD, top-k agreement, KLD by reference confidence, low KLD and Δp percentiles,
 *      errors of every mean) and the applied shares of the type axes; the results
 *      views' applies, types_used and fallback_note columns
 *   5  runs.blas_kernel, mem_budget, group_chunks (what the products ran on and the
 *      runner's memory plan) and runs.pid (the process of the last attempt: a running
 *      run whose process is alive on this host belongs to it)
 *   6  runs.status 'interrupted' (a run stopped by SIGINT/SIGTERM, the reason in error;
 *      retried like a failed one): older databases' CHECK constraints are rewritten
 *   7  layer_metrics (per-layer divergence of a run) and the layer_results view
 *   8  configs.objective (what a budget's solver minimises), metrics.predicted_kld and
 *      the sensitivity table (per tensor and type, measured on a calibration text)
 *   9  sensitivity.grouping and n_tensors (rows of groups of tensors: objective
 *      kld:module, kld:layer, kld:kind) and blas_kernel
 *  10  mixtures of experts: metrics.route_agree, route_overlap, load_shift; their
 *      per-block values in layer_metrics; expert_load (each expert's share of a block's
 *      routed slots) and expert_errors (each expert's weight errors)
 *  11  configs.quantizer (ggml's rounding or GPTQ's, with its options)
 *  12  metrics.calib_overlap_8, calib_overlap_32 (the share of the evaluated text's
 *      token n-grams the calibration text of the run's imatrix holds)
 *  13  runs.body_of, forward_alone_seconds (a config that differs from the one before it
 *      only in the head computes its head on that config's hidden states)
 *  14  runs.shared_blocks (how many of body_of's blocks it reused: a config that differs
 *      from the one before it only from a later block on resumes that pass there) */
#define QL_STORE_SCHEMA_VERSION  14
#define QL_STORE_DEFAULT_PATH    "results/qlab.db"
#define QL_STORE_BUSY_TIMEOUT_MS 30000
/* PRAGMA application_id: "qlab" in ASCII, so `file` and qlab itself can tell a
 * results database from any other SQLite file. */
#define QL_STORE_APPLICATION_ID 0x716c6162

typedef struct ql_store ql_store;

/* How long a lock wait may last before the store gives up with SQLITE_BUSY (another
 * process holding the write lock that long is stuck, or the sweep should stop). */
#define QL_STORE_LOCK_PATIENCE_MS (10 * 60 * 1000)
/* How long a lock wait still lasts once the process is interrupted: long enough for the
 * short writes of the sweep's other jobs (which mark their own runs interrupted at the
 * same moment), short enough that a stuck lock holder does not delay the exit. */
#define QL_STORE_INTERRUPT_GRACE_MS 5000

typedef struct {
    bool readonly;   /* open with SQLITE_OPEN_READONLY; never creates or migrates. When the
                      * file or its directory is not writable (a read-only file system), the
                      * file is read as immutable (no locks, a WAL file left there unread) */
    int fault_after; /* tests: the n-th SQLite call from now fails (0 = never) */
    /* Lock waits: a wait longer than busy_timeout_ms is said on stderr (and again every
     * busy_timeout_ms); one longer than lock_patience_ms gives up (SQLITE_BUSY,
     * ql_store_busy). 0 = QL_STORE_BUSY_TIMEOUT_MS / QL_STORE_LOCK_PATIENCE_MS; a
     * negative patience waits without limit. Once the process is interrupted
     * (ql_interrupted) a wait gives up after QL_STORE_INTERRUPT_GRACE_MS. */
    int busy_timeout_ms, lock_patience_ms;
} ql_store_options;

/* Opens (creating the file and schema unless readonly) and checks the schema
 * version. opt may be NULL (read-write, defaults). */
ql_status ql_store_open(const char *path, const ql_store_options *opt, ql_store **out,
                        ql_error *err);
void ql_store_close(ql_store *s);

/* Whether the last failure was a lock that stayed taken (SQLITE_BUSY after the lock
 * waits): the operation may succeed when retried. */
bool ql_store_busy(const ql_store *s);

/* The SQLite handle (tests read the database through it; library code goes through
 * the statement helpers below). */
struct sqlite3 *ql_store_handle(ql_store *s);
const char *ql_store_path(const ql_store *s);

/* Fault injection for tests: the n-th SQLite call (prepare, bind, step, exec)
 * from now fails with SQLITE_IOERR as if the disk had failed; 0 disables. It covers
 * the store and everything that runs its SQL through the helpers below (report,
 * merge, query, the notebooks). */
void ql_store_inject_fault(ql_store *s, int n);

/* ---------------------------------------------------------------- statements
 *
 * The results layer's way to SQLite. Every call that can fail counts toward the
 * injected fault; a failure is "path: what: reason" (reason: SQLite's message or
 * "injected fault"). Statements are the caller's to finalize (sqlite3_finalize);
 * reading columns of a row (sqlite3_column_*) cannot fail and is done directly. */

struct sqlite3_stmt;

/* One statement of sql; *tail (may be NULL) gets what follows it. */
ql_status ql_store_prepare(ql_store *s, const char *sql, struct sqlite3_stmt **st,
                           const char **tail, const char *what, ql_error *err);
/* Steps; *row tells whether a row came (false at the end). */
ql_status ql_store_step(ql_store *s, struct sqlite3_stmt *st, bool *row, const char *what,
                        ql_error *err);
/* Steps a statement that returns no rows. */
ql_status ql_store_step_done(ql_store *s, struct sqlite3_stmt *st, const char *what, ql_error *err);
/* Parameters: a NULL text and a NaN real bind NULL. */
ql_status ql_store_bind_text(ql_store *s, struct sqlite3_stmt *st, int idx, const char *v,
                             const char *what, ql_error *err);
ql_status ql_store_bind_int64(ql_store *s, struct sqlite3_stmt *st, int idx, int64_t v,
                              const char *what, ql_error *err);
ql_status ql_store_bind_real(ql_store *s, struct sqlite3_stmt *st, int idx, double v,
                             const char *what, ql_error *err);
/* Runs SQL that returns no rows (one or several statements). */
ql_status ql_store_exec(ql_store *s, const char *sql, const char *what, ql_error *err);
/* Undoes the open transaction, if any. Never fails and is never fault-injected: it
 * is the way back from every failure. */
void ql_store_rollback(ql_store *s);
/* The file failures are about, instead of the store's (a merge reading an input it
 * attached); NULL = the store's again. The string must outlive its use. */
void ql_store_set_subject(ql_store *s, const char *path);

/* ---------------------------------------------------------------- schema
 *
 * The tables as this qlab writes them, for code that copies rows between databases
 * (merge.h) without naming columns itself. */

typedef enum {
    QL_TABLE_IDENTITY, /* models, datasets, configs: one row per natural key */
    QL_TABLE_RUNS,     /* runs */
    QL_TABLE_MEMBERS,  /* sweep_runs: which sweeps include a run */
    QL_TABLE_RUN_DATA, /* what a finished run stored: deleted when the run is retried */
    QL_TABLE_MEASURED, /* sensitivity: measurements keyed by what they measured, kept once */
} ql_table_role;

typedef struct {
    const char *name;
    int since; /* the schema version that added it */
    ql_table_role role;
    /* IDENTITY: the natural key column; RUN_DATA: the column telling a run's rows
     * apart (NULL: one row per run). */
    const char *key;
    const char *row; /* RUN_DATA with a key: what a row is, in words ("the sums of chunk") */
} ql_store_table;

/* Every table, referenced tables first (the order rows can be copied in). */
size_t ql_store_tables(const ql_store_table **out);

#define QL_STORE_COLUMN_MAX 160

typedef struct {
    const char *name;
    int since;      /* the schema version that added it */
    char dflt[128]; /* SQL of its value in rows written before it existed ("NULL") */
} ql_store_column;

/* The columns of a table, in the order this qlab creates them. Returns the count
 * (at most QL_STORE_COLUMN_MAX). */
size_t ql_store_columns(const ql_store_table *t, ql_store_column *out);

/* ---------------------------------------------------------------- identities */

typedef struct {
    const char *sha256; /* required: the file's SHA-256 (64 hex) */
    const char *path;   /* required: where it was read */
    const char *name;   /* manifest name, or NULL */
    const char *arch;   /* general.architecture, or NULL */
    /* Counts: -1 = unknown (NULL). */
    int64_t file_bytes, params, n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab, n_ctx_train;
} ql_store_model;

/* Sets every count to -1 and every string to NULL. */
void ql_store_model_init(ql_store_model *m);

typedef struct {
    const char *sha256; /* required */
    const char *name;   /* required: manifest name or the path as given */
    const char *path;   /* or NULL */
    int64_t bytes;      /* -1 = unknown */
    int64_t tokens;     /* tokens of the whole text under tokens_model's tokenizer; -1 = unknown */
    int64_t tokens_model; /* models.id the count is for (ignored when tokens is -1) */
} ql_store_dataset;

void ql_store_dataset_init(ql_store_dataset *d);

/* Insert-or-update by sha256; known fields are filled, earlier ones kept. */
ql_status ql_store_upsert_model(ql_store *s, const ql_store_model *m, int64_t *id, ql_error *err);
ql_status ql_store_upsert_dataset(ql_store *s, const ql_store_dataset *d, int64_t *id,
                                  ql_error *err);
/* Insert-or-find by content hash; a stored config whose canonical text differs
 * from c's (a hash collision or a changed canonical form) is an error. */
/* The sensitivity table (experiment/sensitivity.h): what one (unit, type) does to the
 * output when quantized alone, measured on a calibration text. A row is identified by
 * the key below, the unit and the type, and never changes once stored (the names of
 * groups and of tensors never meet, so the unit names the grouping too). */
typedef struct {
    const char *model_sha256;
    const char *text_sha256; /* the calibration text */
    const char *text_name;   /* as the config names it (stored, not part of the key) */
    int ctx;
    int64_t chunks;
    const char *imatrix_sha256; /* the quantizer's importance matrix; "none" */
    int metrics_version;        /* experiment/distribution.h's QL_METRICS_VERSION */
    const char *grouping;       /* the units' (config.h's ql_grouping_name) */
} ql_store_sens_key;

typedef struct {
    const char *tensor; /* the unit: a tensor's name, or a group's (ql_sens_unit) */
    int n_tensors;      /* the tensors it quantizes */
    int layer;          /* its first block; -1 token embedding; n_layer the head */
    const char *kind;   /* attn_q ... ffn_down, output, token_embd; a group's: attn, ffn, block */
    int32_t type;
    int64_t bytes; /* the tensor in that type */
    double kld_mean, kld_mean_err, ln_ppl_ratio, ln_ppl_ratio_err, seconds;
    const char *blas_kernel; /* what the products ran on (ql_gemm_kernel), or NULL */
} ql_store_sens_row;

/* The stored row of (key, tensor, type) into out's numbers; *found = false when none. */
ql_status ql_store_sensitivity_get(ql_store *s, const ql_store_sens_key *key, const char *tensor,
                                   int32_t type, ql_store_sens_row *out, bool *found,
                                   ql_error *err);
/* Stores a measured row (one that is there already is kept). */
ql_status ql_store_sensitivity_put(ql_store *s, const ql_store_sens_key *key,
                                   const ql_store_sens_row *row, ql_error *err);

ql_status ql_store_upsert_config(ql_store *s, const ql_config *c, int64_t *id, ql_error *err);

/* ---------------------------------------------------------------- runs */

typedef struct {
    int64_t config_id, model_id, dataset_id;
    int ctx;
    int chunks; /* resolved: the number of chunks actually evaluated (> 0) */
} ql_store_run_key;

typedef struct {
    const char *sweep;          /* sweep name, or NULL */
    int threads;                /* 0 = unknown */
    int metrics_version;        /* version of the metric definitions (> 0) */
    const char *imatrix_sha256; /* SHA-256 of the importance matrix used, or NULL */
    const char *blas_kernel;    /* BLAS library, version and kernel (ql_gemm_kernel), or NULL */
    int64_t mem_budget;         /* the runner's memory budget in bytes; 0 = unknown */
    int group_chunks;           /* chunks per group of a pass; 0 = unknown */
} ql_store_run_info;

/* The done run for this identity whose metrics_version equals the given one, by
 * natural keys (so it works before any upsert). *run_id = 0 when there is none. */
ql_status ql_store_find_done(ql_store *s, const char *config_hash, const char *model_sha256,
                             const char *dataset_sha256, int ctx, int chunks, int metrics_version,
                             int64_t *run_id, ql_error *err);

/* Where each run of one model, text, ctx and chunks stands: what a sweep process
 * watching its jobs (runner.c) compares against the states it saw before them. */
typedef struct {
    char config_hash[65];
    int64_t run_id;
    char status[16]; /* running, done, failed, interrupted */
    int64_t attempts;
    int metrics_version;
} ql_store_run_state;

/* All such runs, sorted by config hash (*out: caller frees; NULL when none). */
ql_status ql_store_run_states(ql_store *s, const char *model_sha256, const char *dataset_sha256,
                              int ctx, int chunks, ql_store_run_state **out, size_t *n,
                              ql_error *err);

/* A run's status and chunk count, and its figures (NAN where not measured, e.g.
 * before it is done). */
typedef struct {
    char status[16]; /* running, done, failed, interrupted */
    int64_t chunks;
    double metric[QL_N_METRICS]; /* by ql_metric_id, DERIVED ones included */
    double forward_seconds;      /* its quantized forward pass (column quant_seconds) */
} ql_store_run_brief;

ql_status ql_store_run_brief_get(ql_store *s, int64_t run_id, ql_store_run_brief *out,
                                 ql_error *err);

/* Marks the run 'running' (new row, or a retry of a failed, interrupted or
 * older-metrics run: its old metrics and tensor errors are deleted and attempts
 * incremented) and records it as a member of info->sweep. A run already done
 * with the same metrics version is an error (find_done should have skipped it), and so
 * is one that another live process is running (ql_store_claim_run). */
ql_status ql_store_begin_run(ql_store *s, const ql_store_run_key *key,
                             const ql_store_run_info *info, int64_t *run_id, ql_error *err);

/* What ql_store_claim_run found. */
typedef enum {
    QL_CLAIM_BEGUN, /* the run is this process's now, marked running */
    QL_CLAIM_DONE,  /* already done with this metrics version (by another process) */
    QL_CLAIM_BUSY,  /* running in another process that is alive on this host */
} ql_store_claim;

/* ql_store_begin_run for processes that share a store: a run another process finished
 * (DONE) or is running (BUSY: status 'running', its pid alive on this host) is left to
 * it, with *run_id its id and nothing written. A running run of a process that is gone
 * (killed), of another host or of this process is taken over. */
ql_status ql_store_claim_run(ql_store *s, const ql_store_run_key *key,
                             const ql_store_run_info *info, int64_t *run_id, ql_store_claim *claim,
                             ql_error *err);

/* Records that a sweep includes a run it did not execute itself (found done). */
ql_status ql_store_add_to_sweep(ql_store *s, const char *sweep, int64_t run_id, ql_error *err);

/* Writes the metrics, tensor errors and chunk sums and marks the run done, all
 * in one transaction: on any error nothing of it is stored and the run stays
 * 'running'. The TENSORS metrics (records.h) are computed here from r->tensors,
 * whatever r->metrics holds for them. */
ql_status ql_store_finish_run_result(ql_store *s, int64_t run_id, const ql_run_result *r,
                                     ql_error *err);

/* The same without per-chunk sums. */
ql_status ql_store_finish_run(ql_store *s, int64_t run_id, const ql_run_metrics *m,
                              const ql_tensor_record *te, size_t n_te, const ql_run_timing *t,
                              ql_error *err);

/* Marks a running run failed with its error text (retried by the next sweep). */
ql_status ql_store_fail_run(ql_store *s, int64_t run_id, const char *error, double seconds,
                            ql_error *err);

/* Marks a running run interrupted (SIGINT, SIGTERM) with why; retried by the next sweep
 * like a failed one. */
ql_status ql_store_interrupt_run(ql_store *s, int64_t run_id, const char *why, double seconds,
                                 ql_error *err);

/* Status of a run: "running", "done", "failed" or "interrupted" (copied into out). */
ql_status ql_store_run_status(ql_store *s, int64_t run_id, char out[16], ql_error *err);

/* The metric columns of the metrics table in schema order (the stored metrics). */
size_t ql_store_metric_columns(const char *const **names);

#endif
