/* qlab: the reference forward pass of a llama-family model, in f32, over a chunk of
 * tokens at once.
 *
 * Per layer:  x += Wo · attention(RoPE(Wq · n), RoPE(Wk · n), Wv · n),  n = RMSNorm(x) * attn_norm
 *             x += Wdown · (silu(Wgate · m) * (Wup · m)),                 m = RMSNorm(x) * ffn_norm
 * then logits = Whead · (RMSNorm(x) * output_norm). In a mixture-of-experts block the
 * feed-forward is Σ_j w_j · FFN_{e_j}(m) over the experts the router chose for the token
 * (hparams.h: routing), plus a gated shared expert in qwen2moe; each expert multiplies
 * only the rows routed to it (gathered, one product per expert), so a pass costs what
 * its active parameters cost.
 *
 * The arithmetic follows ggml's CPU backend where it matters for agreement with
 * llama.cpp: RMSNorm sums squares in double and scales by 1/sqrtf(mean + eps);
 * RoPE angles are p * base^(-2i/n_rot) built by repeated multiplication as ggml
 * does; softmax subtracts the maximum and sums in double; SiLU is x/(1+expf(-x)).
 *
 * The pass in pieces, for a harness that runs many chunks layer by layer
 * (model/scheduler.h): ql_forward_embed, then ql_forward_block for each layer whose
 * products are bound (model.h), then ql_forward_output_norm and ql_forward_head.
 * ql_forward_run composes them for one chunk, binding each layer into the pass's own
 * buffer when the caller has not (one layer and the head in f32 at a time).
 *
 * The matmul seam: every product goes through ql_forward_matmul(), which
 *   1. calls the observer (if any) with the input x (n_tok, n_in) of that site,
 *   2. applies the linear's activation transform (if any) into a scratch buffer,
 *   3. computes y = x W^T (base/gemm.h), or calls the linear's own product (model.h's
 *      ql_product_fn, e.g. an integer kernel) instead of 2 and 3,
 *   4. adds the linear's post-product term (act_post, if any) and the bias.
 * Nothing else in the pass multiplies by a weight matrix, so activation quantization,
 * outlier splits, imatrix collection and calibration all hook in there.
 *
 * Attention precision: K and V are written to a per-layer cache; an attention
 * rounding (f32 = none, f16 = llama.cpp's default K/V cache, or a custom one) rounds
 * K and V as they enter the cache, the query before its dot products with K, and
 * the softmax probabilities before their product with V, as ggml's CPU matmul
 * converts its second operand to the first operand's dot type.
 *
 * Determinism: every output value is computed by one thread in a fixed order that does
 * not depend on the thread count: products on base/gemm.h's fixed tile grid, attention
 * one (head, query tile) per task, element-wise blocks one row per task
 * (tests/unit/test_synth.c, test_forward.c). Run state is allocated once by
 * ql_forward_alloc(); the binding buffers on first use.
 *
 * Using the seam (a quantized configuration, calibration):
 *   ql_weights *ws;  ql_weights_copy(&ws, model->weights, &err);   // borrows everything
 *   ql_linear *l = ql_weights_find(ws, "blk.0.ffn_down.weight");
 *   ql_linear_set_src(l, &quantized_bytes);           // decoded when its layer is bound
 *   l->act = my_fake_quant;  l->act_ctx = &mode;       // x -> xq, NULL = f32
 *   ql_forward_set_observer(fw, my_imatrix_observer, &stats);  // sees x of every site
 *   ql_forward_run(fw, ws, tokens, n, 0, n / 2, logits, &err);
 *   ql_weights_free(ws);
 *
 * Threading contract: one ql_forward is used by one caller thread at a time. It
 * parallelizes internally with OpenMP's threads (ql_threads_set). */
#ifndef QL_FORWARD_H
#define QL_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "model/model.h"

typedef struct ql_forward ql_forward;

/* Sees the input of every product before any transform: site index (see model.h),
 * the linear (name, shape), x (n_tok, lin->n_in). Called from the caller's thread,
 * in the order of the pass. */
typedef void (*ql_matmul_observer)(void *ctx, int site, const ql_linear *lin, const float *x,
                                   int64_t n_tok);

/* Sees the routing of each mixture-of-experts block: for the n_tok rows the block's
 * feed-forward runs on (all the chunk's rows, or from out_first on in the last block
 * of a pass with outputs), sel (n_tok, k) the chosen experts of each row in decreasing
 * probability and weights (n_tok, k) their weights. Called from the caller's thread
 * after the router's product, before the experts'. */
typedef void (*ql_route_observer)(void *ctx, int layer, const int32_t *sel, const float *weights,
                                  int64_t n_tok, int k);

/* Rounds n_rows rows of row_len values in place. */
typedef void (*ql_round_fn)(void *ctx, float *x, int64_t n_rows, int64_t row_len);

/* Attention precision hooks; a NULL function leaves those values in f32. round_k,
 * round_v and round_q are called once per layer, round_p once per (head, query) row
 * with that row's probabilities over positions 0..p. Hooks must be reentrant (no
 * unsynchronized shared state): the pass may call them from several threads. */
typedef struct {
    char name[16];       /* shown in messages: "f32", "f16", "q8_0" */
    ql_round_fn round_k; /* K rows (head_dim) entering the cache, after RoPE */
    ql_round_fn round_v; /* V rows (head_dim) entering the cache */
    ql_round_fn round_q; /* query rows (head_dim) before the dot products with K */
    ql_round_fn round_p; /* probability rows (positions 0..p) before the product with V */
    void *ctx;
} ql_attn_rounding;

/* Allocates the run state for chunks of up to max_ctx tokens (also the K/V cache
 * length). */
ql_status ql_forward_alloc(ql_forward **out, const ql_hparams *hp, int max_ctx, ql_error *err);
void ql_forward_free(ql_forward *fw);

const ql_hparams *ql_forward_hparams(const ql_forward *fw);
int ql_forward_max_ctx(const ql_forward *fw);

/* Installs (or with fn = NULL removes) the product observer. */
void ql_forward_set_observer(ql_forward *fw, ql_matmul_observer fn, void *ctx);

/* Installs (or with fn = NULL removes) the routing observer, and reads it back. */
void ql_forward_set_route_observer(ql_forward *fw, ql_route_observer fn, void *ctx);
void ql_forward_get_route_observer(const ql_forward *fw, ql_route_observer *fn, void **ctx);

/* The observer installed now (NULL fn when none). */
void ql_forward_get_observer(const ql_forward *fw, ql_matmul_observer *fn, void **ctx);

/* Several observers in one pass (e.g. the imatrix collector and the activation
 * maxima of the outlier split): install ql_observer_chain_observe with the chain as
 * its ctx; each member sees every product, in the order they were added. The chain
 * is the caller's (no allocation) and must outlive the pass. */
#define QL_OBSERVER_CHAIN_MAX 4
typedef struct {
    int n;
    ql_matmul_observer fn[QL_OBSERVER_CHAIN_MAX];
    void *ctx[QL_OBSERVER_CHAIN_MAX];
} ql_observer_chain;

void ql_observer_chain_init(ql_observer_chain *c);
/* Appends fn (NULL is ignored); QL_EINVAL when the chain is full. */
ql_status ql_observer_chain_add(ql_observer_chain *c, ql_matmul_observer fn, void *ctx,
                                ql_error *err);
/* A ql_matmul_observer: calls every member; chain is a ql_observer_chain. */
void ql_observer_chain_observe(void *chain, int site, const ql_linear *lin, const float *x,
                               int64_t n_tok);

/* Where a pass's time goes, in seconds, when a profile is installed (qlab bench forward):
 * each product kind's products (the head under QL_SITE_HEAD; a mixture's experts, which run
 * side by side, in `experts`), attention (scores, softmax, the values; the K/V rounding),
 * the rest of the blocks (norms, RoPE, SwiGLU, routing, residual adds) and, added by the
 * scheduler, decoding layers to f32. Timing costs two clock reads per product. */
typedef struct {
    double products[QL_SITE_KINDS + 1];
    double experts;
    double attention;
    double blocks; /* every block, whole (the rest is blocks minus its products and attention) */
    double decode;
} ql_forward_profile;

/* Installs (or with NULL removes) a profile the pass adds its times to; read back with
 * ql_forward_get_profile. */
void ql_forward_set_profile(ql_forward *fw, ql_forward_profile *p);
ql_forward_profile *ql_forward_get_profile(const ql_forward *fw);

/* Installs a custom attention rounding (copied); NULL restores f32. */
void ql_forward_set_attn_rounding(ql_forward *fw, const ql_attn_rounding *r);
/* The attention rounding installed now (a copy). */
void ql_forward_get_attn_rounding(const ql_forward *fw, ql_attn_rounding *out);
const char *ql_forward_attn_rounding_name(const ql_forward *fw);

/* Runs tokens[0..n_tok) at positions pos0..pos0+n_tok-1 with weight set w (which must
 * match the hyper-parameters). Positions before pos0 attend to the K/V cache left by
 * earlier runs (pos0 = 0 starts a fresh sequence). Writes the logits of positions
 * out_first..n_tok-1 to logits ((n_tok - out_first), n_vocab), row-major.
 * As llama.cpp does for tokens without outputs, rows before out_first are dropped
 * after the last layer's attention: observers of the last layer's attn_output and
 * FFN products and of the head see only rows out_first..n_tok-1. Layers that are not
 * bound are bound into the pass's own buffer for the call; the head never needs to be. */
ql_status ql_forward_run(ql_forward *fw, const ql_weights *w, const int32_t *tokens, int n_tok,
                         int pos0, int out_first, float *logits, ql_error *err);

/* Checks that w has the model's shapes (every product, the embedding table). */
ql_status ql_forward_check_weights(const ql_forward *fw, const ql_weights *w, ql_error *err);

/* x (n_tok, n_embd) = the embedding rows of tokens[0..n_tok); a token outside the
 * vocabulary is an error naming position pos0 + t. */
ql_status ql_forward_embed(ql_forward *fw, const ql_weights *w, const int32_t *tokens, int n_tok,
                           int pos0, float *x, ql_error *err);

/* Transformer block `layer` on the residual stream x (n_tok rows at positions pos0..),
 * in place; the layer's products must be bound. With out_first > 0 the rows before it
 * are dropped after the block's attention (the last layer of a pass with outputs from
 * out_first on): x then holds the n_tok - out_first remaining rows from its start, and
 * *n_out (may be NULL) receives the rows left. K and V go to the cache of this layer. */
ql_status ql_forward_block(ql_forward *fw, const ql_weights *w, int layer, float *x, int n_tok,
                           int pos0, int out_first, int *n_out, ql_error *err);

/* xn (n, n_embd) = RMSNorm(x) * output_norm, the input of the head. */
void ql_forward_output_norm(ql_forward *fw, const ql_weights *w, const float *x, float *xn,
                            int64_t n);

/* logits (n, n_vocab) = the head's product of xn (n, n_embd). An unbound head is decoded
 * tile by tile (no f32 copy of it exists), with the same result as a bound one. */
ql_status ql_forward_head(ql_forward *fw, const ql_weights *w, const float *xn, float *logits,
                          int64_t n, ql_error *err);

/* The one place products happen: y (n_tok, lin->n_out) = x (n_tok, lin->n_in) W^T + b,
 * with the observer and the linear's activation transform applied. n_tok <= max_ctx. */
void ql_forward_matmul(ql_forward *fw, int site, const ql_linear *lin, const float *x, float *y,
                       int64_t n_tok);

#endif
