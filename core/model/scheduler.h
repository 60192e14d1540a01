/* qlab: layer-major evaluation of weight sets over groups of chunks.
 *
 * A pass over a text takes its chunks in groups: every chunk of a group through block
 * 0, then every chunk through block 1, ... A block's products are bound (decoded to
 * f32, model.h) once per group and serve all its chunks, so the decoding, O(weights),
 * is amortized over group × ctx tokens of products, and the f32 weights that exist at
 * any time are one layer per weight set. The residual streams of the group's chunks
 * (group × ctx × n_embd floats per set) are the only activations kept between blocks.
 *
 * Every chunk is computed exactly as ql_forward_run computes it alone (the same
 * products on the same rows, the K/V cache of its own layer): results do not depend on
 * the group size (tests/unit/test_scheduler.c).
 *
 * Two weight sets may run in lock-step (the reference and a config): block l of the
 * first set, then block l of the second, on the same chunk; on_block then sees both
 * residual streams after each block (per-layer divergence).
 *
 * Rows: a perplexity pass runs ctx - 1 tokens of each chunk and keeps the rows from
 * data->first on after the last block's attention (ql_forward_block's out_first);
 * an all-rows pass (imatrix collection, as llama-imatrix) runs ctx tokens and keeps
 * all of them. */
#ifndef QL_SCHEDULER_H
#define QL_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/forward.h"
#include "model/perplexity.h"

#define QL_SCHED_MAX_SETS 2

/* Sees the routing of a set's mixture-of-experts block `layer` on `chunk`: n_rows rows
 * that are the chunk's positions row0.., sel (n_rows, k) the experts each chose (most
 * probable first) and weights (n_rows, k) their weights. */
typedef void (*ql_sched_route_fn)(void *ctx, int layer, int64_t chunk, int64_t row0,
                                  const int32_t *sel, const float *weights, int64_t n_rows, int k);

/* One weight set of a pass and how it runs. */
typedef struct {
    ql_weights *w;                    /* layers are bound and unbound during the pass */
    const ql_attn_rounding *rounding; /* K/V cache rounding; NULL = f32 */
    ql_matmul_observer observer;      /* sees this set's products; NULL = none */
    void *observer_ctx;
    ql_sched_route_fn route; /* sees this set's routing; NULL = none */
    void *route_ctx;
    bool head; /* compute this set's logits (else on_output gets NULL logits) */
} ql_sched_set;

typedef struct ql_sched_job ql_sched_job;

/* After block `layer` of `chunk` for every set: x[s] holds set s's residual stream,
 * n_rows rows that are rows row0.. of the chunk's tokens (row0 = data->first after
 * the last block of a perplexity pass, else 0). */
typedef ql_status (*ql_sched_block_fn)(void *ctx, int layer, int64_t chunk, int64_t row0,
                                       int64_t n_rows, const float *const *x, ql_error *err);

/* After the last block, per set and chunk, in chunk order: hidden (n_rows, n_embd) the
 * input of the head (final norm applied), logits (n_rows, n_vocab) or NULL when the
 * set has no head. Rows are the chunk's output rows (data->first.. or all). */
typedef ql_status (*ql_sched_output_fn)(void *ctx, int set, int64_t chunk, const float *hidden,
                                        const float *logits, int64_t n_rows, ql_error *err);

/* Tokens done so far (of n_chunks * tokens per chunk), for progress lines. */
typedef void (*ql_sched_progress_fn)(void *ctx, double tokens_done);

struct ql_sched_job {
    const ql_ppl_data *data;
    int64_t chunk0, n_chunks; /* the chunks chunk0 .. chunk0 + n_chunks - 1 */
    bool all_rows;            /* ctx tokens and every row; else the perplexity rows */
    int group;                /* chunks per group (>= 1) */
    ql_sched_set sets[QL_SCHED_MAX_SETS];
    int n_sets;
    ql_sched_block_fn on_block;    /* may be NULL */
    ql_sched_output_fn on_output;  /* may be NULL */
    ql_sched_progress_fn progress; /* may be NULL */
    void *ctx;
    /* A shared prefix (one set only). capture_layer L >= 1: the residual streams entering
     * block L, every chunk of the job in order (n_chunks blocks of n_tok x n_embd floats,
     * n_tok = ctx - 1, or ctx with all_rows: ql_sched_stream_floats), are copied into
     * capture. resume_layer L >= 1: the pass starts at block L from resume, streams a
     * pass whose blocks 0..L-1 are this set's left there (a capture): every chunk then
     * goes through the same products on the same rows as in a whole pass, so the results
     * are bit-identical to it (tests/unit/test_scheduler.c). 0: none. */
    int capture_layer;
    float *capture;
    int resume_layer;
    const float *resume;
};

/* Buffers of passes (binding buffers, residual streams, hidden and logits rows), kept
 * between passes of the same model and grown when a pass needs more. */
typedef struct ql_sched ql_sched;

ql_status ql_sched_alloc(ql_sched **out, ql_error *err);
void ql_sched_free(ql_sched *s);

/* Runs the job with fw (allocated for the data's ctx). Leaves fw's observer and
 * attention rounding as it found them. */
ql_status ql_sched_run(ql_sched *s, ql_forward *fw, const ql_sched_job *job, ql_error *err);

/* The heads alone, for weight sets whose blocks are those of a pass that ran before:
 * hidden holds what that pass's on_output saw as the heads' input, every chunk of the
 * job in order (n_chunks blocks of n_rows x n_embd, n_rows the job's output rows).
 * Each chunk's logits are job->sets[0].w's head on them (the job's one set, with a
 * head), passed to on_output and progress as ql_sched_run passes them. The same
 * product on the same rows: bit-identical to a whole pass of a weight set with that
 * body and this head (tests/unit/test_scheduler.c). */
ql_status ql_sched_run_heads(ql_sched *s, ql_forward *fw, const ql_sched_job *job,
                             const float *hidden, ql_error *err);

/* Floats of one chunk's residual stream in a job's capture or resume buffer. */
size_t ql_sched_stream_floats(const ql_hparams *hp, const ql_ppl_data *d, bool all_rows);

/* Bytes a pass with these sets and group size holds besides the weights' sources:
 * one bound layer per set, the group's residual streams, one chunk's hidden rows and
 * logits. For sizing a group to a memory budget. */
size_t ql_sched_bytes(const ql_hparams *hp, int ctx, int group, int n_sets);

/* Called after each chunk with its logits (n_scored, n_vocab), targets (n_scored,)
 * and the running accumulator. */
typedef void (*ql_ppl_chunk_fn)(void *ctx, int64_t chunk, const float *logits,
                                const int32_t *targets, int n_scored, const ql_nll_acc *running);

/* Runs every chunk of d with weight set w in groups of `group` chunks and accumulates
 * the NLL of its scored tokens into *acc (zeroed first); cb (may be NULL) sees each
 * chunk in order, progress (may be NULL) the tokens done; both get cb_ctx. fw's K/V
 * rounding and observer apply. */
ql_status ql_sched_perplexity(ql_forward *fw, ql_weights *w, const ql_ppl_data *d, int group,
                              ql_ppl_chunk_fn cb, ql_sched_progress_fn progress, void *cb_ctx,
                              ql_nll_acc *acc, ql_error *err);

/* The largest group (1 .. n_chunks) whose ql_sched_bytes fit in budget bytes; 1 when
 * even one chunk does not fit (the pass then needs what it needs). */
int ql_sched_group_for(const ql_hparams *hp, int ctx, int n_sets, int64_t n_chunks, size_t budget);

#endif
