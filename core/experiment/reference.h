/* qlab: the reference distributions of a sweep, kept compact and exact.
 *
 * The reference is the unquantized model (its file's weights, f32 activations, f32
 * K/V) on the sweep's text: for every scored token the log-probabilities over the
 * whole vocabulary. What is kept of it is what regenerates them exactly: the input of
 * the head (the final normed hidden state, n_embd floats) of every scored position.
 * Applying the reference head to it again (the same product on the same rows,
 * ql_forward_head) gives the very logits of the reference pass, bit for bit, so
 * log-probabilities over a 128K vocabulary cost n_embd floats a token to keep.
 *
 * When the log-probabilities of every chunk fit in the memory the caller allows
 * (keep_bytes), they are computed once and held, so a config pays no reference head;
 * otherwise ql_reference_logp computes a chunk's from its hidden states when asked
 * (one head product per chunk and config). Either way the same numbers.
 *
 * It is computed once per (model, text, ctx, chunks) and, with a cache directory,
 * kept in a file, so that a resumed sweep, the other shards of a Slurm array and the
 * processes of `--jobs` load it instead of computing it again.
 *
 * Cache file (little endian): a 256-byte header
 *   magic "QLREF\0\0\2" | u32 version | u32 n_scored | i64 n_chunks | i64 n_embd |
 *   i64 n_vocab | char key[64] (hex SHA-256 of the identity) |
 *   char payload_sha256[64] (hex SHA-256 of everything after the header) |
 *   u64 route_bytes | zero padding
 * then float hidden states (n_chunks * n_scored, n_embd), int32 targets
 * (n_chunks * n_scored) and, for a mixture of experts, the int16 experts of every scored
 * token in every MoE block (experiment/routing.h; route_bytes of them, 0 for a dense
 * model). A file whose header, size, targets, routes or checksum do not match is not
 * used (a damaged one with a warning) and is written again. */
#ifndef QL_REFERENCE_H
#define QL_REFERENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "experiment/distribution.h"
#include "model/forward.h"
#include "model/perplexity.h"
#include "model/scheduler.h"

typedef struct ql_reference ql_reference;

typedef struct {
    const char *model_sha256; /* identity of the reference: model, text, ctx, chunks */
    const char *text_sha256;
    const char *cache_dir; /* NULL: no cache file */
    bool quiet;            /* no progress output */
    int group;             /* chunks per group of the reference pass (>= 1) */
    size_t keep_bytes;     /* hold every chunk's log-probs when they fit in this; 0: never */
} ql_reference_opts;

/* Loads the reference from the cache or computes it with fw, sched and the reference
 * weights w over the chunks of d. fw, sched, w and d are borrowed until
 * ql_reference_free (the log-probs of a chunk may be computed again from them). */
ql_status ql_reference_get(ql_reference **out, ql_forward *fw, ql_sched *sched, ql_weights *w,
                           const ql_ppl_data *d, const ql_reference_opts *opts, ql_error *err);
void ql_reference_free(ql_reference *r);

/* Log-probabilities of chunk i's scored tokens (n_scored, n_vocab): the held ones, or
 * computed into the reference's buffer, valid until the next call. */
ql_status ql_reference_logp(ql_reference *r, int64_t chunk, const float **out, ql_error *err);

/* Adds one chunk of a pass's logits (n_rows scored rows) to acc, against the
 * reference's log-probabilities of the same chunk: the one scoring step of every pass
 * measured against the reference (ql_reference_score's, the sweep's). */
ql_status ql_reference_score_chunk(ql_reference *r, ql_dist_acc *acc, int64_t chunk,
                                   const float *logits, int64_t n_rows, ql_error *err);

/* Scores weight set w (a quantization of the reference's model) against the
 * reference: one pass over every chunk of the reference's text with the forward pass
 * and scheduler it was made with, in groups of `group` chunks, the K/V cache rounded as
 * kv says (NULL: f32), each chunk's logits added to acc (reset first) with the
 * reference's log-probabilities of the same chunk. progress (may be NULL) gets
 * progress_ctx and the tokens done. acc must hold every scored token of the text.
 * routing (NULL: none; a mixture of experts: made from ql_reference_routes) is reset and
 * gets w's routing against the reference's. */
struct ql_routing_acc;
ql_status ql_reference_score(ql_reference *r, ql_sched *sched, ql_weights *w,
                             const ql_attn_rounding *kv, int group, ql_dist_acc *acc,
                             struct ql_routing_acc *routing, ql_sched_progress_fn progress,
                             void *progress_ctx, ql_error *err);

/* A mixture of experts: the experts the reference chose for every scored token and MoE
 * block (the comparison of a config's, experiment/routing.h); NULL for a dense model. */
struct ql_routes;
const struct ql_routes *ql_reference_routes(const ql_reference *r);

/* The head input of chunk i's scored tokens (n_scored, n_embd). */
const float *ql_reference_hidden(const ql_reference *r, int64_t chunk);

/* Seconds the reference pass took (0 when loaded from the cache), whether it was, and
 * whether the log-probs are held. */
double ql_reference_seconds(const ql_reference *r);
bool ql_reference_from_cache(const ql_reference *r);
bool ql_reference_holds_logp(const ql_reference *r);

/* Bytes the held log-probs of d take (what keep_bytes is compared with). */
size_t ql_reference_logp_bytes(const ql_ppl_data *d, int64_t n_vocab);

/* Bytes of the cache file (header and payload) of d. */
size_t ql_reference_file_bytes(const ql_ppl_data *d, int64_t n_embd);

#endif
