/* qlab: the sweep runner (DESIGN.md sections 2, 4, 5).
 *
 * For one sweep: load the model and the text once, compute the reference once
 * (or load it from the cache), then for every config that is not already done in
 * the results store: quantize the weights through the type policy (quantized
 * tensors are cached and shared by configs that use the same tensor, type and
 * importance matrix), run the quantized forward pass over the same chunks, compute
 * every metric against the reference, and store the run in one transaction. A
 * config that fails is stored with its error and the sweep goes on; a killed sweep
 * resumes where it stopped, since done runs are skipped by content hash. */
#ifndef QL_RUNNER_H
#define QL_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "experiment/sweep.h"

typedef struct {
    const char *db_path;   /* results store; NULL = results/qlab.db */
    const char *cache_dir; /* reference/imatrix cache; NULL = <db dir>/cache */
    int threads;           /* 0 = the sweep's setting, else all cores */
    ql_shard shard;        /* {0, 1} = every config */
    bool quiet;            /* no progress lines (results and the summary still print) */
    size_t cache_bytes;    /* memory for quantized tensors kept across configs; 0 = default */
    bool no_summary;       /* do not print the summary table and timing lines */
    int jobs;              /* > 1: evaluate configs in this many processes at once (each a
                              shard of this run with threads / jobs threads, sharing the
                              reference and calibration cache and the database) */
} ql_run_opts;

typedef struct {
    size_t n_configs;  /* configs of this shard */
    size_t n_run;      /* evaluated now */
    size_t n_skipped;  /* already done in the store */
    size_t n_failed;   /* stored as failed */
    double ref_seconds;     /* reference pass (0 when loaded from the cache) */
    double configs_seconds; /* all configs evaluated now */
    double forward_seconds; /* the quantized forward passes among them */
    int64_t scored_tokens;  /* per pass */
} ql_run_summary;

void ql_run_opts_init(ql_run_opts *o);

/* Runs the sweep (already loaded and checked). Returns an error only for what
 * stops the whole sweep (a missing model or text, an unwritable store); a config
 * that fails is recorded as failed and counted in summary->n_failed. */
ql_status ql_sweep_execute(const ql_sweep *sw, const ql_run_opts *opts, ql_run_summary *summary,
                           ql_error *err);

#endif
