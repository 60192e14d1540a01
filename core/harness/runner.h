/* qlab: the sweep runner.
 *
 * For one sweep: load the model (its tensors stay in the file's memory map) and the
 * text once, compute the reference once (or load its compact form from the cache),
 * then for every config that is not already done in the results store: quantize the
 * weights through the type policy (quantized tensors are kept as bytes and shared by
 * configs that use the same tensor, type and importance matrix), run the quantized
 * pass over the same chunks layer by layer (model/scheduler.h), compute every metric
 * against the reference, and store the run in one transaction. A config that fails is
 * stored with its error and the sweep goes on; a killed sweep resumes where it
 * stopped, since done runs are skipped by content hash.
 *
 * Several sweeps on one store cooperate: a config another live process is running (or
 * has finished since this one looked) is left to it (ql_store_claim_run); a result is
 * stored however long another process holds the write lock (the wait is said on
 * stderr), unless the sweep is interrupted.
 *
 * Interrupts: when ql_interrupted() (util.h) says a signal came, the pass stops after
 * the block it is in (model/scheduler.c), the config's run is marked 'interrupted' and
 * the step returns QL_EINTERRUPTED; between configs, no further config begins. The next
 * sweep retries interrupted runs like failed ones.
 *
 * Memory: the budget (`--mem`, default QL_RUN_MEM_SHARE of the machine's RAM) sizes
 * the groups of chunks a pass takes through each layer, decides whether the
 * reference's log-probabilities are held or regenerated per config, and bounds the
 * quantized tensors kept between configs. Results do not depend on it.
 *
 * The steps, for a command that runs them itself (several processes at once, --jobs):
 *   ql_runner_open      inputs, store, which configs are still to do
 *   ql_runner_prepare   what the configs share: the reference, the calibration
 *                          matrices (kept in the cache directory for other processes)
 *   ql_runner_configs   evaluates this process's configs (ql_runner_configs_texts:
 *                          on several texts, the runs of all but one opened with
 *                          ql_runner_open_text, the weights built once per config)
 *   ql_runner_collect   or: the results other processes stored since a snapshot
 *   ql_runner_print     the summary table and the timing line
 * (qlab sweep, cli/cmd_sweep.c, is the one command that runs them.) */
#ifndef QL_RUNNER_H
#define QL_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "experiment/sweep.h"

/* The share of the machine's RAM a sweep plans with when --mem is not given: the rest
 * is for the page cache of the model file and for everything else on the machine. */
#define QL_RUN_MEM_SHARE 0.7

typedef struct {
    const char *db_path;   /* results store; NULL = results/qlab.db */
    const char *cache_dir; /* reference/imatrix cache; NULL = <db dir>/cache */
    int threads;           /* 0 = the sweep's setting, else all cores */
    ql_shard shard;        /* {0, 1} = every config */
    bool quiet;            /* no progress lines (results and the summary still print) */
    size_t cache_bytes;    /* memory for quantized tensors kept across configs; 0 = default */
    size_t mem_bytes;      /* memory budget; 0 = QL_RUN_MEM_SHARE of the RAM */
    bool no_summary;       /* do not print the summary table and timing lines */
    /* Refuse (store as failed, not evaluated) a config whose calibration text overlaps
     * the evaluated text above QL_OVERLAP_FLAG_SHARE (experiment/overlap.h). */
    bool strict;
    /* Every config runs its whole pass, also those that differ from the one before only in
     * the head (which otherwise compute their head alone on its hidden states). */
    bool no_share;
    /* Texts evaluated together in this process (ql_runner_open_text): the memory each
     * may hold for its reference and shared blocks is divided among them; 0 or 1 = one. */
    int texts_together;
    /* Called after each run is marked running, with how many this process began (the
     * command line's fault injection for the resume tests); NULL = none. */
    void (*on_run_begun)(void *ctx, int begun);
    void *on_run_begun_ctx;
    /* The store's lock waits (ql_store_options; 0 = its defaults): a config's writes are
     * tried again after each wait that gave up. */
    int busy_timeout_ms, lock_patience_ms;
} ql_run_opts;

/* A temporary file of a cache write ("NAME.tmp.PID") in the cache directory whose
 * process is gone and which was not modified for this long is removed when a sweep
 * opens (ql_remove_stale_tmp). */
#define QL_RUN_STALE_TMP_SECONDS 60.0

typedef struct {
    size_t n_configs;   /* configs of this shard */
    size_t n_run;       /* evaluated now */
    size_t n_skipped;   /* already done in the store */
    size_t n_failed;    /* stored as failed */
    size_t n_elsewhere; /* left to another process on the store (running or done by it) */
    /* Warnings of the summary (configs of this shard, done now or before): calibration
     * overlapping the evaluation, a reference beaten beyond its interval. */
    size_t n_overlapping, n_beaten;
    /* Interrupted (SIGINT, SIGTERM): the configs whose runs were marked 'interrupted'
     * ("3 (Q4_0)", comma-separated), empty when the signal came between configs. */
    char interrupted[512];
    double ref_seconds;     /* reference pass (0 when loaded from the cache) */
    double configs_seconds; /* all configs evaluated now */
    double forward_seconds; /* the quantized passes among them */
    /* ... what they would have taken without shared blocks, the configs that computed
     * only their head on another's pass, and those that started theirs at a later block
     * from another's residual streams */
    double forward_alone_seconds;
    size_t n_shared, n_prefix_shared;
    int64_t scored_tokens; /* per pass */
} ql_run_summary;

void ql_run_opts_init(ql_run_opts *o);

typedef struct ql_runner ql_runner;

/* Loads the model and the text (sw->text: one of the sweep's texts; a sweep of several
 * texts is opened once per text), opens the store and finds the configs of this shard
 * that are not done; prints the sweep's header line. */
ql_status ql_runner_open(ql_runner **out, const ql_sweep *sw, const ql_run_opts *opts,
                         ql_error *err);
void ql_runner_close(ql_runner *r);

/* The run of the sweep's selected text that borrows owner's model, tokenizer,
 * calibration, tensor cache and pass buffers (owner: a run of another of the sweep's
 * texts, opened with the same options; closed after this one): the texts are then
 * evaluated together by ql_runner_configs_texts, each config's weights built once. */
ql_status ql_runner_open_text(ql_runner **out, const ql_sweep *sw, const ql_run_opts *opts,
                              ql_runner *owner, ql_error *err);

/* Configs of this shard still to do. */
size_t ql_runner_todo(const ql_runner *r);

/* The reference and the calibration matrices of the configs to do (nothing when there
 * are none). */
ql_status ql_runner_prepare(ql_runner *r, ql_error *err);

/* Evaluates every config to do, in this process. */
ql_status ql_runner_configs(ql_runner *r, ql_error *err);

/* The same for the runs of n texts (runs[0] the owner, the others opened with
 * ql_runner_open_text on it), config after config: each config's weights are built
 * once and evaluated on every text that still needs it (each prepared first). */
ql_status ql_runner_configs_texts(ql_runner **runs, size_t n, ql_error *err);

/* The store's view of the configs to do at a moment (for runs made by other
 * processes: a config counts as finished by them only in an attempt begun after). */
typedef struct ql_runner_snapshot ql_runner_snapshot;
ql_status ql_runner_snapshot_take(ql_runner *r, ql_runner_snapshot **out, ql_error *err);
void ql_runner_snapshot_free(ql_runner_snapshot *s);

/* How many configs to do are finished (done or failed) since the snapshot; 0 when the
 * store is busy. */
size_t ql_runner_finished_since(ql_runner *r, const ql_runner_snapshot *before);

/* Fills the summary from what the store holds for the configs to do since the
 * snapshot (configs_seconds: how long the other processes took). */
ql_status ql_runner_collect(ql_runner *r, const ql_runner_snapshot *before, double configs_seconds,
                            ql_error *err);

/* Prints the summary table and the timing lines (not with no_summary). */
void ql_runner_print(const ql_runner *r);
/* The summary, its warning counts from the rows as they are now. */
const ql_run_summary *ql_runner_summary(ql_runner *r);

/* Where this run keeps its results and cache (for processes that share them). */
const char *ql_runner_db_path(const ql_runner *r);
const char *ql_runner_cache_dir(const ql_runner *r);

/* Adds a text's summary to a sweep's (counts and times; the last interrupted note). */
void ql_run_summary_add(ql_run_summary *into, const ql_run_summary *part);

#endif
