/* qlab: folding shard databases into one results database.
 *
 * `qlab sweep FILE --shard K/N --db shard-K.db` writes each slice of a sweep to
 * its own database; ql_merge folds any number of such databases into one by the
 * natural keys of the store (store.h), never by row ids:
 *
 *   models, datasets   by sha256 (inserted when missing; fields the output does
 *                      not know yet are filled in, known ones are kept)
 *   configs            by content hash (a hash stored with another canonical
 *                      text, or a canonical text under another hash, is refused)
 *   runs               by identity (config, model, text, ctx, chunks), with
 *                      their metrics, tensor errors, per-chunk sums, activation
 *                      roundings and sweep memberships
 *
 * Which run wins when both databases hold the same identity:
 *   - output missing                      -> the input's run is added;
 *   - input done, output failed/running   -> the input's run replaces it (so do
 *     input failed over output running, and a done run of a newer metrics
 *     version over a done run of an older one, as a sweep would re-run it);
 *   - otherwise the output's run is kept;
 *   - both done with the same metrics version: qlab's results are reproducible,
 *     so their metrics, tensor errors, per-chunk sums and activation roundings
 *     must be equal (provenance
 *     such as timings, host and commit may differ and the output's is kept). If
 *     any value differs the merge is REFUSED, naming the run and the first
 *     difference: silently keeping either value would hide that two builds or
 *     inputs disagree. When the two runs were computed under different BLAS
 *     kernels (runs.blas_kernel), the message names them ("kernel Haswell vs
 *     SkylakeX"): results do not depend on the thread count, but a kernel may
 *     change the last bits of a product. Equal values under different kernels
 *     are accepted and counted (other_kernel). Merging a database twice
 *     therefore changes nothing.
 *
 * Before anything is written, every sweep an input takes part in must agree with
 * the same sweep in the output (and in the inputs merged before it): the set of
 * (model sha256, text sha256, ctx, chunks, metrics version) over the sweep's runs
 * must be the same, else the merge is refused with a message such as
 *   shard-2.db: sweep 'quick' used model stories15M (sha256 0a1b2c3d4e5f...) but
 *   out.db has model stories260K (sha256 270cba1bd510...)
 * Two different sweeps may be merged into one database freely.
 *
 * Atomicity: the inputs are copied into temporary tables first (each ATTACHed in
 * turn and only read, so any number of inputs can be merged), then the whole merge
 * runs in ONE write transaction on the output. On any refusal or error the output
 * is left as it was; an output the merge created is removed again.
 *
 * Inputs must be qlab results databases (application_id 'qlab') of schema version
 * 1..QL_STORE_SCHEMA_VERSION; tables an older version lacks (chunk_metrics before
 * version 2, act_roundings before 3) are simply absent from it, and a column it
 * lacks reads as the store's migration fills it in (the store's declarations,
 * ql_store_columns). The output is created when missing and
 * migrated to the current schema when older (like any qlab write). The inputs are
 * only read. An input that is the output file itself is refused. */
#ifndef QL_MERGE_H
#define QL_MERGE_H

#include <stddef.h>

#include "base/error.h"

#define QL_MERGE_KERNEL_MAX 128

/* What happened to the runs of one input. */
typedef struct {
    size_t runs;     /* runs in the input */
    size_t added;    /* identities the output did not have */
    size_t replaced; /* replaced a failed, running or older-metrics run of the output */
    size_t kept;     /* the output already had them done (equal values) or had a better run */
    /* Runs done on both sides, equal in every value, computed under different BLAS kernels
     * (runs.blas_kernel): accepted, and the first pair of kernels named for a note. */
    size_t other_kernel;
    char kernel_in[QL_MERGE_KERNEL_MAX], kernel_out[QL_MERGE_KERNEL_MAX];
} ql_merge_counts;

typedef struct {
    /* tests: the n-th SQLite call of the merge fails (0 = never): the fault injection
     * of the output's store, whose statement helpers run every statement. */
    int fault_after;
} ql_merge_options;

/* Merges n_in databases into out_path, in order (input i is checked against the
 * output with inputs 0..i-1 already folded in). opt may be NULL; counts, when not
 * NULL, has n_in entries and is filled on success. */
ql_status ql_merge(const char *out_path, const char *const *in_paths, size_t n_in,
                   const ql_merge_options *opt, ql_merge_counts *counts, ql_error *err);

#endif
