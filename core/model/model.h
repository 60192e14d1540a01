/* qlab: llama-family models read from GGUF: hyper-parameters and weight sets.
 *
 * A model is its hyper-parameters plus one reference weight set. A weight set says
 * where every tensor's values come from (ql_weight_src): rows of the file's own type
 * in the model's memory map, or a configuration's quantized bytes. Weights are not
 * widened to f32 when a model is loaded: the forward pass needs f32 only for the
 * layer it computes, and materializes it just before (ql_weights_bind_layer; F32
 * sources are used in place) and releases it after. No f32 copy of the whole model
 * exists unless a caller asks for one (ql_weights_bind_all, for small models).
 *
 * The forward pass (forward.h) takes the hyper-parameters and a weight set
 * separately, so a harness can run the same model with many weight sets: a quantized
 * configuration is a copy of the reference set in which some tensors' sources are a
 * config's quantized bytes and some products carry an activation transform.
 *
 * Layouts follow ggml: a 2-D tensor with ne = {n_in, n_out} is n_out rows of
 * n_in values, row r contiguous. A product y = W x takes x (n_in,) to y (n_out,). */
#ifndef QL_MODEL_H
#define QL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dotgemm.h"
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

/* Optional replacement of the f32 product: y (n_tok, n_out) = W x computed by the
 * linear's own kernel from the original input x (an integer kernel on the weight's
 * quantized bytes, the way llama.cpp's CPU backend computes that product:
 * actquant.h); act and the f32 product are then skipped, act_post and the bias still
 * apply. ctx is the linear's act_ctx. Same rules as ql_act_fn. */
typedef void (*ql_product_fn)(void *ctx, const ql_linear *lin, const float *x, float *y,
                              int64_t n_tok);

/* Where a 2-D weight's values come from: n_out rows of ql_row_size(type, n_in) bytes of
 * a ggml (or qlab) type, and optionally columns whose exact f32 values replace the
 * decoded ones (an outlier split keeps them exact). Borrowed: the bytes belong to the
 * model's memory map or to a config's tensor cache and must outlive every use. */
typedef struct {
    int32_t type;
    const void *data;
    int64_t n_exact;           /* columns kept exact; 0 = none */
    const int64_t *exact_cols; /* (n_exact,) ascending column indices */
    const float *exact_vals;   /* (n_out, n_exact) row-major */
} ql_weight_src;

/* The product sites of one block, in the order the forward pass runs them: the
 * attention's four, then either the dense feed-forward's three or a mixture of experts'
 * router, routed experts and (qwen2moe) shared expert. Names as GGUF spells them
 * (ql_site_kind_name). */
typedef enum {
    QL_SITE_Q = 0,
    QL_SITE_K,
    QL_SITE_V,
    QL_SITE_O,
    QL_SITE_GATE,
    QL_SITE_UP,
    QL_SITE_DOWN,
    QL_SITE_GATE_INP,  /* the router: (n_embd) -> (n_expert) logits */
    QL_SITE_GATE_EXPS, /* routed experts, stacked (ql_linear.n_expert) */
    QL_SITE_UP_EXPS,
    QL_SITE_DOWN_EXPS,
    QL_SITE_GATE_INP_SHEXP, /* the shared expert's gate: (n_embd) -> 1 */
    QL_SITE_GATE_SHEXP,
    QL_SITE_UP_SHEXP,
    QL_SITE_DOWN_SHEXP,
    QL_SITE_KINDS,
    QL_SITE_HEAD = QL_SITE_KINDS, /* kind of the LM head (and of token_embd) */
} ql_site_kind;

/* A 2-D weight used as a product y = W x (+ b), or the experts of a 3-D weight stacked
 * in its rows: a tensor of ggml ne {n_in, rows, n_expert} is a linear of n_expert * rows
 * rows, expert e's matrix rows [e * rows, (e + 1) * rows) (the file's own layout), so
 * that every size computed as n_in * n_out holds. The forward pass multiplies by one
 * expert through a view (ql_linear_expert): a linear of that expert's rows only. */
struct ql_linear {
    char name[96];     /* GGUF tensor name, e.g. "blk.3.attn_q.weight" */
    int64_t n_in;      /* row length (ggml ne[0]) */
    int64_t n_out;     /* number of rows (ggml ne[1], times ne[2] for stacked experts) */
    ql_weight_src src; /* where the values come from */
    const float *w;    /* (n_out, n_in) row-major f32 when bound (see ql_weights_bind_layer),
                          else NULL; an F32 source without exact columns is bound in place */
    const float *b;    /* (n_out,) bias or NULL */
    int32_t src_type;  /* ggml type the tensor has in the model file */
    int layer;         /* block index; -1 for the head and token_embd */
    ql_site_kind kind;
    int n_expert; /* matrices stacked in the rows: 1 (a 2-D weight) or the experts */
    /* Sources of single experts replacing src's rows (a measurement that quantizes one
     * expert alone), (n_expert,) with a NULL data for the experts that keep src's, or
     * NULL for none. Borrowed. */
    const ql_weight_src *expert_src;
    /* In a view of one expert (ql_linear_expert): the expert and its first row in the
     * stacked linear; expert = -1 otherwise. */
    int expert;
    int64_t row0;
    ql_act_fn act; /* NULL: the input is used as is (f32), at no cost */
    void *act_ctx;
    ql_act_post_fn act_post; /* NULL: nothing added after the product */
    ql_product_fn product;   /* NULL: act, then the f32 product of the bound values */
    /* private */
    bool bound;     /* w points into a caller's buffer (ql_weights_bind_layer) */
    bool finite;    /* its values were seen to be finite (checked when first bound) */
    float *w_owned; /* f32 values this linear owns (ql_weights_bind_all), or NULL */
    float *b_owned;
};

/* Whether lin's product reads its source rows as they are stored, without decoding:
 * unless QLAB_GEMM=blas (gemm.h), a 2-D F16 or BF16 weight without exact columns, on
 * qlab's own kernel; *wt (may be NULL) is then the rows' type. */
bool ql_linear_direct(const ql_linear *lin, ql_dot_wtype *wt);

/* Rows of one matrix of a linear (of one expert of a stacked one). */
static inline int64_t ql_linear_matrix_rows(const ql_linear *lin)
{
    return lin->n_expert > 1 ? lin->n_out / lin->n_expert : lin->n_out;
}

/* view = expert e of a stacked linear: its rows, its source (expert_src[e] when set,
 * else the rows of src), its bound values and exact columns, the stacked linear's
 * hooks (which see view->row0 and view->expert). Borrows everything from lin. */
void ql_linear_expert(const ql_linear *lin, int e, ql_linear *view);

typedef struct {
    const float *attn_norm; /* (n_embd,) */
    const float *q_norm;    /* (head_dim,) qwen3, else NULL */
    const float *k_norm;    /* (head_dim,) qwen3, else NULL */
    const float *ffn_norm;  /* (n_embd,) */
} ql_layer_norms;

/* A weight set: every tensor the forward pass reads; 1-D tensors in f32.
 * Sites: the products of block 0 in ql_site_kind order (the kinds the block has),
 * then block 1's, ..., then lin[n_lin - 1], the LM head (output.weight, or a copy of
 * the token_embd linear when tied). ql_weights_site finds a block's site of a kind;
 * lin->layer and lin->kind say what a site is. The site index is what observers
 * receive. */
typedef struct {
    int n_layer;
    int n_lin;                /* every block's sites + 1 */
    ql_linear *lin;           /* (n_lin,) product sites */
    ql_linear tok_embd;       /* (n_vocab, n_embd) lookup table, not a product site */
    ql_layer_norms *norms;    /* (n_layer,) */
    const float *output_norm; /* (n_embd,) */
    const float *rope_freqs;  /* (n_rot / 2,) per-pair frequency divisors (Llama 3), or NULL */
    /* (n_layer + 1,) block l's sites are layer_site0[l] .. layer_site0[l + 1] - 1 */
    int *layer_site0;
    /* (n_layer * QL_SITE_KINDS,) the site of each kind per block, -1 where absent */
    int *kind_site;
    /* private: heap arrays owned by the set besides the linears' own (1-D tensors) */
    void **owned;
    int n_owned;
    int cap_owned;
} ql_weights;

/* A product site's tensor kind as GGUF names its weight ("attn_q" for blk.N.attn_q). */
const char *ql_site_kind_name(ql_site_kind kind);

/* The shape a model of hp's hyper-parameters gives a site of this kind: rows of n_in
 * values, *rows per matrix, *n_expert matrices (1 unless stacked experts). */
void ql_site_dims(const ql_hparams *hp, ql_site_kind kind, int64_t *n_in, int64_t *rows,
                  int *n_expert);

/* Whether a kind is one of the stacked routed-expert products. */
static inline bool ql_site_kind_experts(ql_site_kind kind)
{
    return kind == QL_SITE_GATE_EXPS || kind == QL_SITE_UP_EXPS || kind == QL_SITE_DOWN_EXPS;
}

/* Whether a kind belongs to the attention (q, k, v, output) rather than the
 * feed-forward (dense, router, experts, shared expert). */
static inline bool ql_site_kind_attention(ql_site_kind kind)
{
    return kind <= QL_SITE_O;
}

/* The site of block `layer`'s product of this kind, or -1 when the block has none. */
static inline int ql_weights_site(const ql_weights *w, int layer, ql_site_kind kind)
{
    return w->kind_site[layer * QL_SITE_KINDS + (int)kind];
}

/* The LM head's site. */
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

/* Replaces a linear's values by data ((n_out, n_in), f32): its source becomes F32 data.
 * With take_ownership the set frees data (allocated with malloc) when the linear is
 * replaced again or the set is freed; otherwise data is borrowed and must outlive it. */
void ql_linear_set_weights(ql_linear *lin, float *data, bool take_ownership);

/* Makes a stacked linear read the experts that srcs (n_expert sources, borrowed; a
 * NULL data keeps that expert's rows of the current source) gives from their own
 * sources; unbinds it (its f32 values, if any, no longer hold). NULL: none again. */
void ql_linear_set_expert_srcs(ql_linear *lin, const ql_weight_src *srcs);

/* Makes a linear read src (borrowed) instead of its current source; unbinds it. */
void ql_linear_set_src(ql_linear *lin, const ql_weight_src *src);

/* Decodes rows row0 .. row0 + n_rows - 1 of a linear's source into out (n_rows, n_in)
 * f32, exact columns written back; parallel over rows. Errors: a type qlab cannot
 * decode (named with the tensor). */
ql_status ql_linear_decode_rows(const ql_linear *lin, int64_t row0, int64_t n_rows, float *out,
                                ql_error *err);

/* Checks that the linear's source can be decoded and loads the tables its type needs
 * (the IQ codebooks), so that ql_linear_decode_prepared may be called. */
ql_status ql_linear_prepare(const ql_linear *lin, ql_error *err);

/* ql_linear_decode_rows on the calling thread, without checks, after ql_linear_prepare:
 * for code that decodes tiles of a weight from several threads (gemm.h's decoded
 * products). */
void ql_linear_decode_prepared(const ql_linear *lin, int64_t row0, int64_t n_rows, float *out);

/* Floats a buffer needs to bind any layer of w (the largest sum of a block's sites'
 * n_in * n_out). */
size_t ql_weights_layer_floats(const ql_weights *w);

/* Binds the products of layer l: a linear already bound (or owning its values, or an
 * F32 source without exact columns, which is used in place, or read directly by the
 * product kernel: ql_linear_direct) stays as it is; the others
 * are decoded into buf (buf_floats floats, at least ql_weights_layer_floats). The first
 * time a linear is bound its values are checked to be finite: a NaN or an infinity is an
 * error naming the tensor, row and column. */
ql_status ql_weights_bind_layer(ql_weights *w, int layer, float *buf, size_t buf_floats,
                                ql_error *err);

/* Undoes ql_weights_bind_layer: the linears decoded into a buffer are unbound. */
void ql_weights_unbind_layer(ql_weights *w, int layer);

/* Decodes every product that is not bound into f32 arrays the set owns, so that it can be
 * run without binding: a whole f32 copy of the model, for small models and tests. */
ql_status ql_weights_bind_all(ql_weights *w, ql_error *err);

/* Whether every product of layer l has f32 values to multiply with, or reads its rows
 * directly (ql_linear_direct) and has had them checked. (The head need not be bound: an
 * unbound product decodes its weight tile by tile, forward.h.) */
bool ql_weights_layer_bound(const ql_weights *w, int layer);

/* Number of parameters of a weight set (2-D weights, biases and norms; a tied head
 * counted once). */
int64_t ql_weights_n_params(const ql_weights *w, const ql_hparams *hp);

typedef struct {
    char *path;
    ql_hparams hp;
    ql_weights *weights; /* the reference weight set (owned): the file's tensors */
    ql_gguf *gguf;       /* the open file: metadata for the tokenizer, source types */
    int64_t n_params;
} ql_model;

/* Loads a GGUF model. 2-D weights stay in the memory map in their file type (decoded by
 * the type traits, formats/types.h, when bound); norms and biases are turned into f32.
 * Shapes and types are checked against the hyper-parameters and against what qlab can
 * decode; errors name the file and tensor with expected vs actual. A tensor the forward
 * pass does not read is an error naming it (evaluating without it would measure another
 * model; llama.cpp refuses such files too). */
ql_status ql_model_load(ql_model **out, const char *path, ql_error *err);

/* Same from an already opened GGUF (the model takes ownership of g, also on error). */
ql_status ql_model_from_gguf(ql_model **out, ql_gguf *g, ql_error *err);

/* ql_model_load for a file that is only rewritten, not evaluated (qlab quantize, as
 * llama-quantize copies tensors it has no rule for): tensors the forward pass does
 * not read are allowed; *unused (may be NULL) receives the first one's name, or NULL. */
ql_status ql_model_load_for_rewrite(ql_model **out, const char *path, const char **unused,
                                    ql_error *err);

void ql_model_free(ql_model *m);

/* Whether `other` (a quantization of ref, by llama-quantize, another tool or qlab) can
 * stand in for ref: the same architecture and hyper-parameters, and the same tensors by
 * name and shape (types may differ). Errors name the first difference. Its weight set is
 * then a config of ref. */
ql_status ql_model_check_same_shape(const ql_model *ref, const ql_model *other, ql_error *err);

/* The first 2-D weight whose file type is not F32, F16 or BF16 (a quantized model), or
 * NULL. */
const ql_linear *ql_model_first_quantized(const ql_model *m);

#endif
