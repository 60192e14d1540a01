/* qlab: GPTQ over a whole model: Hessians from the streaming engine, layer by layer.
 *
 * Per block l, on the calibration chunks (all of them, every position, as the imatrix
 * pass runs them):
 *   1. the block runs in f32 on the residual streams that enter it, and an observer
 *      sums H = sum over tokens of x x^T (double precision, tokens in order) for each
 *      distinct input of the block's products: the attention input (shared by q, k,
 *      v), the attention output's input, the feed-forward input (shared by gate and
 *      up) and the down projection's input;
 *   2. every product of the block whose planned type splits (formats/quant_split.h)
 *      is quantized by GPTQ (formats/gptq.h) with the Hessian of its input and the
 *      importance weights ggml's search gets; other types go through ggml's quantizer;
 *   3. with inputs=quantized (GPTQ's default), the block runs again with its quantized
 *      weights, so that block l + 1 sees the inputs of the model whose blocks 0..l are
 *      quantized; with inputs=reference the f32 outputs of 1 are block l + 1's inputs.
 * The head and the token embeddings are not block products: ggml's quantizer, as
 * GPTQ's reference leaves them to round-to-nearest.
 *
 * Mixture-of-experts blocks: each routed expert's matrices are their own products with
 * their own Hessians, summed over the rows routed to that expert only (the rows its
 * product computes, as the imatrix counts them): one over the feed-forward input of
 * those rows for its gate and up, one over its own intermediate activations for its
 * down. An expert no calibration row reached has a zero Hessian: its matrices get
 * ggml's rounding (GPTQ has nothing to compensate with; zeroing its dead columns, as
 * GPTQ does for an input that is never non-zero, would zero the expert). A qwen2moe
 * shared expert is a dense feed-forward over every row: its gate and up read the
 * feed-forward input's Hessian, its down its own. The router (ffn_gate_inp) and the
 * shared expert's sigmoid gate (ffn_gate_inp_shexp) feed a softmax/top-k and a sigmoid,
 * not a product GPTQ compensates: they get ggml's quantizer for the type the plan gives
 * them (llama-quantize keeps the router in F32).
 *
 * Memory: the residual streams of every calibration chunk (chunks x ctx x n_embd
 * floats), one block's dense Hessians (sum of n_in^2 doubles over its distinct inputs)
 * and their GPTQ factors (as much again: one per input, shared by its products), the
 * Hessians of a slice of the block's experts (n_embd^2 + n_ff_exp^2 doubles each) and
 * one expert's factor at a time, and one factorization's work, planned before
 * allocating: ql_gptq_pass_bytes. When every expert of a block does not fit the budget,
 * the experts are taken in slices of as many as fit (ql_gptq_pass_experts_per_slice),
 * one pass over the block's calibration inputs each; the bytes do not depend on the
 * slicing. A budget that not even one expert fits is an error stating the plan.
 *
 * Thread-count independence: the Hessian sums are split over H's rows, each summed in
 * token order on one thread; GPTQ's rows likewise (formats/gptq.h). */
#ifndef QL_GPTQ_PASS_H
#define QL_GPTQ_PASS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "experiment/outliers.h"
#include "formats/gptq.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/quant_model.h"
#include "model/quant_policy.h"

/* ---- the Hessians of one block (a forward observer) ---- */

/* The distinct inputs of a block's products besides the routed experts (a dense FFN,
 * or a shared expert's, reads QL_HESS_FFN_IN). */
typedef enum {
    QL_HESS_ATTN_IN,  /* q, k, v */
    QL_HESS_ATTN_OUT, /* attn_output */
    QL_HESS_FFN_IN,   /* gate, up */
    QL_HESS_FFN_DOWN, /* down */
    QL_HESS_SHEXP_DOWN, /* a qwen2moe shared expert's down */
    QL_HESS_INPUTS
} ql_hess_input;

/* The input a product kind reads, or -1 for kinds without one here (the routed experts,
 * whose Hessians are per expert; the router and the shared expert's gate, which GPTQ
 * leaves to ggml's rounding). */
int ql_hess_input_of(ql_site_kind kind);

typedef struct ql_hessians ql_hessians;

/* Zeroed Hessians for block `layer` of w: every input, every expert. */
ql_status ql_hessians_alloc(ql_hessians **out, const ql_weights *w, int layer, ql_error *err);

/* Zeroed Hessians for block `layer`'s dense inputs (when `dense`) and its routed experts
 * e0 .. e1 - 1 (clamped to the block's experts; none when e1 <= e0). */
ql_status ql_hessians_alloc_slice(ql_hessians **out, const ql_weights *w, int layer, bool dense,
                                  int e0, int e1, ql_error *err);
void ql_hessians_free(ql_hessians *h); /* NULL is fine */

/* The observer (forward.h): sums x^T x for the block's first product of each input, and
 * for each expert of the slice over its view's rows (gate's for gate/up, down's). */
void ql_hessians_observe(void *hessians, int site, const ql_linear *lin, const float *x,
                         int64_t n_tok);

/* The full symmetric Hessian (n_in^2 doubles) of a kind's input after the pass, with
 * *n_in and *n_tok (tokens summed); NULL when none was observed. */
const double *ql_hessians_get(ql_hessians *h, ql_site_kind kind, int64_t *n_in, int64_t *n_tok);

/* The full symmetric Hessian of expert e's input for a routed kind (gate and up share
 * one), with *n_in and *n_tok (rows routed to it); NULL when e is outside the slice or no
 * row reached it (*n_tok 0). */
const double *ql_hessians_get_expert(ql_hessians *h, ql_site_kind kind, int e, int64_t *n_in,
                                     int64_t *n_tok);

/* GPTQ's factor of a kind's input (formats/gptq.h), made on first use with o and then
 * shared by the products that read the same input; h owns it. keep: the input channels an
 * outlier split keeps exact (NULL or none: every channel): the Hessian is restricted to
 * the others in place before the factor is made; a later product of the same input with
 * other channels is an error. */
ql_status ql_hessians_factor(ql_hessians *h, ql_site_kind kind, const ql_gptq_opts *o,
                             const ql_outlier_cols *keep, const ql_gptq_factor **out,
                             ql_error *err);

/* Bytes of block `layer`'s Hessians, all experts at once; of its dense inputs; of one of
 * its routed experts (gate/up and down inputs; 0 for a dense block). */
size_t ql_hessians_bytes(const ql_weights *w, int layer);
size_t ql_hessians_dense_bytes(const ql_weights *w, int layer);
size_t ql_hessians_expert_bytes(const ql_weights *w, int layer);
/* Routed experts of block `layer` (0 for a dense block). */
int ql_hessians_n_expert(const ql_weights *w, int layer);

/* ---- the whole pass ---- */

typedef struct {
    ql_gptq_opts gptq;
    /* Importance weights for ggml's scale search (as llama-quantize gives them), or
     * NULL: its reference search. */
    ql_imatrix_lookup_fn imatrix;
    void *imatrix_ctx;
    size_t mem; /* budget in bytes for ql_gptq_pass_bytes; 0 = none */
    /* An outlier split (outliers.h), or NULL: each site's channels keep their exact
     * values; the rest of the matrix is quantized with them zeroed (and zero importance),
     * GPTQ compensating only among the other columns: its Hessian restricted to them
     * (the kept rows and columns zeroed, their diagonal 1, as GPTQ treats a dead input),
     * which is the error of the split product exactly. The products reading one input
     * must keep the same channels (they do: their statistics are that input's). */
    const ql_outlier_set *outliers;
    bool quiet;
} ql_gptq_pass_opts;

/* The quantized tensors the pass made, by name. */
typedef struct ql_gptq_set ql_gptq_set;

typedef struct {
    int64_t n_gptq;       /* tensors quantized by GPTQ */
    int64_t n_ggml;       /* block tensors of other types, by ggml's quantizer */
    size_t bytes_planned; /* ql_gptq_pass_bytes with the slices the pass used */
    size_t hessian_bytes; /* the largest block's Hessians held at once (one slice) */
    int experts_per_slice; /* experts whose Hessians are summed at once; 0: dense model */
    int expert_slices;     /* passes over a block's calibration inputs; 0: dense model */
    int64_t n_expert_unrouted; /* (block, expert)s no calibration row reached: ggml's */
    double seconds_hessian, seconds_gptq, seconds_forward;
} ql_gptq_pass_summary;

/* Bytes the pass holds besides the model's map and the quantized tensors, with the
 * Hessians of `experts` routed experts of a block at once (< 1: all of them; ignored for
 * dense blocks). */
size_t ql_gptq_pass_bytes(const ql_model *m, const ql_ppl_data *calib, int experts);

/* The most experts of a block whose Hessians the pass can hold at once within mem (0 =
 * no budget): the model's largest expert count when all fit (1 for a dense model that
 * fits), 0 when not even one does (or a dense model does not). */
int ql_gptq_pass_experts_per_slice(const ql_model *m, const ql_ppl_data *calib, size_t mem);

/* Runs the pass over the calibration chunks of calib (every chunk, every position)
 * for the plan's types, a mixture's experts in slices when o->mem needs it. Errors: the
 * memory plan over o->mem with one expert at a time (naming both), GPTQ's (a Hessian
 * that is not positive definite). */
ql_status ql_gptq_pass_run(const ql_model *m, const ql_quant_plan *plan, const ql_ppl_data *calib,
                           const ql_gptq_pass_opts *o, ql_gptq_set **out,
                           ql_gptq_pass_summary *summary, ql_error *err);

/* Block l's Hessians, summed over the calibration chunks on the reference's inputs (every
 * earlier block in f32), handed to fn before they are freed; fn may factor them (each
 * input's Hessian is restricted in place when it does with kept channels). */
typedef ql_status (*ql_hessians_visit_fn)(void *ctx, int layer, ql_hessians *h, ql_error *err);

/* Runs fn on every block's Hessians, block after block (the memory of ql_gptq_pass_bytes
 * with one expert, planned against mem when it is not 0). Dense models only: a mixture of
 * experts' Hessians are per expert, and the pass is an error naming that. */
ql_status ql_hessians_visit(const ql_model *m, const ql_ppl_data *calib, size_t mem, bool quiet,
                            ql_hessians_visit_fn fn, void *ctx, ql_error *err);

/* A ql_prequant_lookup_fn (quant_model.h) over the set: the tensor's bytes when the
 * pass made them in this type and size, else NULL. */
const void *ql_gptq_set_lookup(void *set, const char *tensor, int32_t type, uint64_t nbytes);

void ql_gptq_set_free(ql_gptq_set *s); /* NULL is fine */

#endif
