/* qlab: the reference distributions of a sweep.
 *
 * The reference is the unquantized model (f32 weights, f32 activations, f32 K/V)
 * on the sweep's text: for every scored token the log-probabilities over the whole
 * vocabulary. It is computed once per (model, text, ctx, chunks) and reused by every
 * config; with a cache directory it is also kept in a file, so that a resumed sweep
 * or the other shards of a Slurm array load it instead of recomputing it.
 *
 * Cache file (little endian): a 128-byte header
 *   magic "QLREF\0\0\1" | u32 version | u32 n_scored | i64 n_chunks | i64 n_vocab |
 *   char key[64] (hex SHA-256 of the identity) | zero padding
 * then float log-probs (n_chunks * n_scored, n_vocab) and int32 targets
 * (n_chunks * n_scored). A file whose header, size or targets do not match is
 * ignored (and rewritten), never trusted. */
#ifndef QL_REFERENCE_H
#define QL_REFERENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "model/forward.h"
#include "model/perplexity.h"

typedef struct ql_reference ql_reference;

typedef struct {
    const char *model_sha256; /* identity of the reference: model, text, ctx, chunks */
    const char *text_sha256;
    const char *cache_dir; /* NULL: no cache file */
    bool quiet;            /* no progress output */
} ql_reference_opts;

/* Loads the reference from the cache or computes it with fw and the reference
 * weights w over the chunks of d. */
ql_status ql_reference_get(ql_reference **out, ql_forward *fw, const ql_weights *w,
                           const ql_ppl_data *d, const ql_reference_opts *opts, ql_error *err);
void ql_reference_free(ql_reference *r);

/* Log-probabilities of chunk i's scored tokens: (n_scored, n_vocab). */
const float *ql_reference_chunk(const ql_reference *r, int64_t chunk);

/* Seconds the computation took (0 when loaded from the cache), and whether it was. */
double ql_reference_seconds(const ql_reference *r);
bool ql_reference_from_cache(const ql_reference *r);

#endif
