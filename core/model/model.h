/* qlab: llama-family models read from GGUF: hyper-parameters and weight sets.
 *
 * A model is its hyper-parameters plus one reference weight set in f32. The
 * forward pass (forward.h) takes the hyper-parameters and a weight set
 * separately, so a harness can run the same model with many weight sets: a
 * quantized configuration is a copy of the reference set in which some
 * tensors are replaced by dequantized f32 copies and some products carry an
 * activation transform.
 *
 * Supported architectures, as llama.cpp reads them:
 *   llama  (TinyLlama, Llama 2/3, SmolLM, stories260K): RoPE on adjacent pairs;
 *   qwen2  (biases on Q, K and V): RoPE on halves (NEOX);
 *   qwen3  (per-head RMSNorm of Q and K before RoPE): RoPE on halves (NEOX).
 *
 * Layouts follow ggml: a 2-D tensor with ne = {n_in, n_out} is n_out rows of
 * n_in values, row r contiguous. A product y = W x takes x (n_in,) to y (n_out,). */
#ifndef QL_MODEL_H
#define QL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/gguf.h"
#include "model/hparams.h"

/* Activation transform of one product: writes the transformed input xq (n_tok, n_in)
 * from x (n_tok, n_in). Never in place (Q, K and V share their input). ctx is the
 * linear's act_ctx; lin is the linear being applied. Must be deterministic and
 * may run inside the caller's thread only (no hidden global state). */
typedef struct ql_linear ql_linear;
typedef void (*ql_act_fn)(void *ctx, const ql_linear *lin, const float *x, float *xq,
                          int64_t n_tok);

/* Optional term added to the product after the matrix multiply and before the bias:
 * y (n_tok, n_out) += f(x) from the original input x (n_tok, n_in); ctx is the linear's
 * act_ctx. It carries what an integer kernel computes beyond the rounded activations
 * (the q8_1 block sums of Q4_1/Q5_1 products, actquant.h). Same rules as ql_act_fn. */
typedef void (*ql_act_post_fn)(void *ctx, const ql_linear *lin, const float *x, float *y,
                               int64_t n_tok);

/* A 2-D weight used as a product y = W x (+ b). */
struct ql_linear {
    char name[96];    /* GGUF tensor name, e.g. "blk.3.attn_q.weight" */
    int64_t n_in;     /* row length (ggml ne[0]) */
    int64_t n_out;    /* number of rows (ggml ne[1]) */
    const float *w;   /* (n_out, n_in) row-major */
    const float *b;   /* (n_out,) bias or NULL */
    int32_t src_type; /* ggml type the tensor had in the GGUF file */
    ql_act_fn act;    /* NULL: the input is used as is (f32), at no cost */
    void *act_ctx;
    ql_act_post_fn act_post; /* NULL: nothing added after the product */
    /* private: heap copies this linear owns (freed with the weight set), NULL if borrowed */
    float *w_owned;
    float *b_owned;
};

/* The product sites of one layer, in the order the forward pass runs them. */
typedef enum {
    QL_SITE_Q = 0,
    QL_SITE_K,
    QL_SITE_V,
    QL_SITE_O,
    QL_SITE_GATE,
    QL_SITE_UP,
    QL_SITE_DOWN,
    QL_SITES_PER_LAYER,
} ql_site_kind;

typedef struct {
    const float *attn_norm; /* (n_embd,) */
    const float *q_norm;    /* (head_dim,) qwen3, else NULL */
    const float *k_norm;    /* (head_dim,) qwen3, else NULL */
    const float *ffn_norm;  /* (n_embd,) */
} ql_layer_norms;

/* A weight set: every tensor the forward pass reads, in f32.
 * Sites: lin[l * QL_SITES_PER_LAYER + kind] for layer l, then lin[n_lin - 1] is the
 * LM head (output.weight, or a copy of the token_embd linear when tied). The site
 * index is what observers receive. */
typedef struct {
    int n_layer;
    int n_lin;                /* n_layer * QL_SITES_PER_LAYER + 1 */
    ql_linear *lin;           /* (n_lin,) product sites */
    ql_linear tok_embd;       /* (n_vocab, n_embd) lookup table, not a product site */
    ql_layer_norms *norms;    /* (n_layer,) */
    const float *output_norm; /* (n_embd,) */
    const float *rope_freqs;  /* (n_rot / 2,) per-pair frequency divisors (Llama 3), or NULL */
    /* private: heap arrays owned by the set besides the linears' own (1-D tensors) */
    void **owned;
    int n_owned;
    int cap_owned;
} ql_weights;

/* Site index helpers. */
static inline int ql_site(int layer, ql_site_kind kind)
{
    return layer * QL_SITES_PER_LAYER + (int)kind;
}
static inline int ql_site_output(const ql_weights *w)
{
    return w->n_lin - 1;
}

/* A shallow copy of a weight set: every array is borrowed from src (which must
 * outlive the copy), no activation transforms. The starting point of a quantized
 * configuration. */
ql_status ql_weights_copy(ql_weights **out, const ql_weights *src, ql_error *err);

/* Frees a weight set and the arrays it owns; NULL does nothing. */
void ql_weights_free(ql_weights *w);

/* The linear (product site or token_embd) with this GGUF tensor name, or NULL. */
ql_linear *ql_weights_find(ql_weights *w, const char *name);

/* Replaces a linear's weights by data ((n_out, n_in), f32). With take_ownership the
 * set frees data (allocated with malloc) when the linear is replaced again or the set
 * is freed; otherwise data is borrowed and must outlive the set. */
void ql_linear_set_weights(ql_linear *lin, float *data, bool take_ownership);

/* Number of parameters of a weight set (2-D weights, biases and norms; a tied head
 * counted once). */
int64_t ql_weights_n_params(const ql_weights *w, const ql_hparams *hp);

typedef struct {
    char *path;
    ql_hparams hp;
    ql_weights *weights; /* reference f32 weights (owned) */
    ql_gguf *gguf;       /* the open file: metadata for the tokenizer, source types */
    int64_t n_params;
} ql_model;

/* Loads a GGUF model. Every tensor is turned into f32: F32 is used in place (from
 * the memory map), F16/BF16 are widened, other types are dequantized through the
 * type traits (core/formats/types.h). Shapes are checked against the hyper-parameters;
 * errors name the file and tensor with expected vs actual. */
ql_status ql_model_load(ql_model **out, const char *path, ql_error *err);

/* Same from an already opened GGUF (the model takes ownership of g, also on error). */
ql_status ql_model_from_gguf(ql_model **out, ql_gguf *g, ql_error *err);

void ql_model_free(ql_model *m);

#endif
