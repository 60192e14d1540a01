/* qlab: the SQLite results store (DESIGN.md section 5).
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
 *
 * A run left 'running' by a killed process, a 'failed' run and a 'done' run of an
 * older metrics version are taken over by the next ql_store_begin_run. Missing
 * measurements are NULL in the database, never 0: the C structs below use NAN
 * (or -1 for counts) for "not measured".
 *
 * Threading: one ql_store per thread; SQLite serializes writers across processes
 * (the busy timeout waits for the lock). */
#ifndef QL_STORE_H
#define QL_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "experiment/config.h"
#include "experiment/records.h"

/* Version of the schema this qlab writes (PRAGMA user_version). History:
 *   1  models, datasets, configs, runs, sweep_runs, metrics, tensor_errors + views
 *   2  chunk_metrics (per-chunk sums of a run) and the chunk_results view
 *   3  act_roundings (the activation rounding each product used) */
#define QL_STORE_SCHEMA_VERSION  3
#define QL_STORE_DEFAULT_PATH    "results/qlab.db"
#define QL_STORE_BUSY_TIMEOUT_MS 30000
/* PRAGMA application_id: "qlab" in ASCII, so `file` and qlab itself can tell a
 * results database from any other SQLite file. */
#define QL_STORE_APPLICATION_ID 0x716c6162

typedef struct ql_store ql_store;

typedef struct {
    bool readonly;   /* open with SQLITE_OPEN_READONLY; never creates or migrates */
    int fault_after; /* tests: the n-th SQLite call from now fails (0 = never) */
} ql_store_options;

/* Opens (creating the file and schema unless readonly) and checks the schema
 * version. opt may be NULL (read-write, defaults). */
ql_status ql_store_open(const char *path, const ql_store_options *opt, ql_store **out,
                        ql_error *err);
void ql_store_close(ql_store *s);

/* The SQLite handle, for read-only queries (query.h) and for merging. */
struct sqlite3 *ql_store_handle(ql_store *s);
const char *ql_store_path(const ql_store *s);

/* Fault injection for tests: the n-th SQLite call (prepare, bind, step, exec)
 * from now fails with SQLITE_IOERR as if the disk had failed; 0 disables. */
void ql_store_inject_fault(ql_store *s, int n);

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
    char status[16]; /* running, done, failed */
    int64_t attempts;
    int metrics_version;
} ql_store_run_state;

/* All such runs, sorted by config hash (*out: caller frees; NULL when none). */
ql_status ql_store_run_states(ql_store *s, const char *model_sha256, const char *dataset_sha256,
                              int ctx, int chunks, ql_store_run_state **out, size_t *n,
                              ql_error *err);

/* A run's status and chunk count, and its headline figures (NAN where not measured,
 * e.g. before it is done). */
typedef struct {
    char status[16]; /* running, done, failed */
    int64_t chunks;
    double bpw, ppl, dppl, kld_mean, top1_agree;
    double quant_seconds; /* its quantized forward pass */
} ql_store_run_brief;

ql_status ql_store_run_brief_get(ql_store *s, int64_t run_id, ql_store_run_brief *out,
                                 ql_error *err);

/* Marks the run 'running' (new row, or a retry of a failed, interrupted or
 * older-metrics run: its old metrics and tensor errors are deleted and attempts
 * incremented) and records it as a member of info->sweep. A run already done
 * with the same metrics version is an error (find_done should have skipped it). */
ql_status ql_store_begin_run(ql_store *s, const ql_store_run_key *key,
                             const ql_store_run_info *info, int64_t *run_id, ql_error *err);

/* Records that a sweep includes a run it did not execute itself (found done). */
ql_status ql_store_add_to_sweep(ql_store *s, const char *sweep, int64_t run_id, ql_error *err);

/* Writes the metrics, tensor errors and chunk sums and marks the run done, all
 * in one transaction: on any error nothing of it is stored and the run stays
 * 'running'. */
ql_status ql_store_finish_run_result(ql_store *s, int64_t run_id, const ql_run_result *r,
                                     ql_error *err);

/* The same without per-chunk sums. */
ql_status ql_store_finish_run(ql_store *s, int64_t run_id, const ql_run_metrics *m,
                              const ql_tensor_record *te, size_t n_te,
                              const ql_run_timing *t, ql_error *err);

/* Marks a running run failed with its error text (retried by the next sweep). */
ql_status ql_store_fail_run(ql_store *s, int64_t run_id, const char *error, double seconds,
                            ql_error *err);

/* Status of a run: "running", "done" or "failed" (copied into out). */
ql_status ql_store_run_status(ql_store *s, int64_t run_id, char out[16], ql_error *err);

/* The metric columns in schema order, for code that reads them generically. */
size_t ql_store_metric_columns(const char *const **names);

#endif
