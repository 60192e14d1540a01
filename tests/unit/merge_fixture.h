/* Results databases shaped like the output of `qlab sweep --shard K/N`, for the
 * tests of `qlab merge`, built through the store API without running anything.
 *
 * The sweep is a real sweep file (QLT_SHARD_SWEEP_TEXT) expanded by ql_sweep_parse,
 * so config i and the shards are exactly those of the runner: a shard database
 * holds the configs i with i mod N == K. Every run's measurements are a function
 * of its config alone (the same doubles on every machine), as a
 * reproducible runner's are; provenance (threads, timings) depends on the shard,
 * as it would on a cluster, so comparisons must leave it out. */
#ifndef QL_MERGE_FIXTURE_H
#define QL_MERGE_FIXTURE_H

#include "base/error.h"
#include "experiment/sweep.h"

#define QLT_SHARD_MODEL_SHA   "1111111111111111111111111111111111111111111111111111111111111111"
#define QLT_SHARD_MODEL_SHA_B "2222222222222222222222222222222222222222222222222222222222222222"
#define QLT_SHARD_TEXT_SHA    "3333333333333333333333333333333333333333333333333333333333333333"
#define QLT_SHARD_TEXT_SHA_B  "4444444444444444444444444444444444444444444444444444444444444444"
#define QLT_SHARD_SWEEP       "shards"
#define QLT_SHARD_CTX         64
#define QLT_SHARD_CHUNKS      3
#define QLT_SHARD_TOKENS      31 /* scored tokens per chunk at ctx 64 */
/* 6 weight types x 2 head types, Q8_0 with head Q8_0 folding into `same`: 11 configs. */
#define QLT_SHARD_CONFIGS 11

typedef struct {
    const char *sweep;     /* sweep name */
    const char *model_sha; /* model the sweep ran on */
    const char *model_name;
    const char *text_sha;
    int ctx, chunks, metrics_version;
    ql_shard shard; /* {0, 1} = the whole sweep in one database */
    int perturb;    /* config index whose kld_mean does not reproduce (-1: none) */
    int fail;       /* config index stored as failed (-1: none) */
    int running;    /* config index left running, as by a killed process (-1: none) */
    const char *kernel; /* the runs' blas_kernel (NULL: not recorded) */
} qlt_shard_spec;

/* The defaults: sweep QLT_SHARD_SWEEP on the A model and text, metrics version 1,
 * the whole sweep, nothing perturbed, failed or running. */
void qlt_shard_spec_init(qlt_shard_spec *spec);

/* The content hash of config i of the sweep (0 <= i < QLT_SHARD_CONFIGS). */
ql_status qlt_shard_config_hash(int i, char out[65], ql_error *err);

/* Creates (or adds to) the database at path. */
ql_status qlt_shard_fixture(const char *path, const qlt_shard_spec *spec, ql_error *err);

#endif
