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
 * Memory: the residual streams of every calibration chunk (chunks x ctx x n_embd
 * floats), one block's Hessians (sum of n_in^2 doubles over its distinct inputs), their
 * GPTQ factors (as much again: one per input, shared by its products) and one
 * factorization's work, planned before allocating:
 * ql_gptq_pass_bytes. Mixture-of-experts blocks are refused (their experts would need
 * a Hessian each over the rows routed to them; not done yet).
 *
 * Thread-count independence: the Hessian sums are split over H's rows, each summed in
 * token order on one thread; GPTQ's rows likewise (formats/gptq.h). */
#ifndef QL_GPTQ_PASS_H
#define QL_GPTQ_PASS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "formats/gptq.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/quant_model.h"
#include "model/quant_policy.h"

/* ---- the Hessians of one block (a forward observer) ---- */

/* The distinct inputs of a dense block's products. */
typedef enum {
    QL_HESS_ATTN_IN,  /* q, k, v */
    QL_HESS_ATTN_OUT, /* attn_output */
    QL_HESS_FFN_IN,   /* gate, up */
    QL_HESS_FFN_DOWN, /* down */
    QL_HESS_INPUTS
} ql_hess_input;

/* The input a product kind reads, or -1 for kinds without one here (experts, router). */
int ql_hess_input_of(ql_site_kind kind);

typedef struct ql_hessians ql_hessians;

/* Zeroed Hessians for block `layer` of w (QL_EUNSUPPORTED for a mixture of experts). */
ql_status ql_hessians_alloc(ql_hessians **out, const ql_weights *w, int layer, ql_error *err);
void ql_hessians_free(ql_hessians *h); /* NULL is fine */

/* The observer (forward.h): sums x^T x for the block's first product of each input. */
void ql_hessians_observe(void *hessians, int site, const ql_linear *lin, const float *x,
                         int64_t n_tok);

/* The full symmetric Hessian (n_in^2 doubles) of a kind's input after the pass, with
 * *n_in and *n_tok (tokens summed); NULL when none was observed. */
const double *ql_hessians_get(ql_hessians *h, ql_site_kind kind, int64_t *n_in, int64_t *n_tok);

/* GPTQ's factor of a kind's input (formats/gptq.h), made on first use with o and then
 * shared by the products that read the same input; h owns it. */
ql_status ql_hessians_factor(ql_hessians *h, ql_site_kind kind, const ql_gptq_opts *o,
                             const ql_gptq_factor **out, ql_error *err);

/* Bytes of block `layer`'s Hessians. */
size_t ql_hessians_bytes(const ql_weights *w, int layer);

/* ---- the whole pass ---- */

typedef struct {
    ql_gptq_opts gptq;
    /* Importance weights for ggml's scale search (as llama-quantize gives them), or
     * NULL: its reference search. */
    ql_imatrix_lookup_fn imatrix;
    void *imatrix_ctx;
    size_t mem; /* budget in bytes for ql_gptq_pass_bytes; 0 = none */
    bool quiet;
} ql_gptq_pass_opts;

/* The quantized tensors the pass made, by name. */
typedef struct ql_gptq_set ql_gptq_set;

typedef struct {
    int64_t n_gptq;       /* tensors quantized by GPTQ */
    int64_t n_ggml;       /* block tensors of other types, by ggml's quantizer */
    size_t bytes_planned; /* ql_gptq_pass_bytes */
    size_t hessian_bytes; /* the largest block's Hessians */
    double seconds_hessian, seconds_gptq, seconds_forward;
} ql_gptq_pass_summary;

/* Bytes the pass holds besides the model's map and the quantized tensors. */
size_t ql_gptq_pass_bytes(const ql_model *m, const ql_ppl_data *calib);

/* Runs the pass over the calibration chunks of calib (every chunk, every position)
 * for the plan's types. Errors: the memory plan over o->mem (naming both), a
 * mixture-of-experts block, GPTQ's (a Hessian that is not positive definite). */
ql_status ql_gptq_pass_run(const ql_model *m, const ql_quant_plan *plan, const ql_ppl_data *calib,
                           const ql_gptq_pass_opts *o, ql_gptq_set **out,
                           ql_gptq_pass_summary *summary, ql_error *err);

/* A ql_prequant_lookup_fn (quant_model.h) over the set: the tensor's bytes when the
 * pass made them in this type and size, else NULL. */
const void *ql_gptq_set_lookup(void *set, const char *tensor, int32_t type, uint64_t nbytes);

void ql_gptq_set_free(ql_gptq_set *s); /* NULL is fine */

#endif
