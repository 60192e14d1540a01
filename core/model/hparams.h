/* qlab: the hyper-parameters of a llama-family model, read from GGUF metadata as
 * llama.cpp reads them, and checked before anything is sized by them.
 *
 * Supported architectures:
 *   llama    (TinyLlama, Llama 2/3, SmolLM, stories260K): RoPE on adjacent pairs,
 *            optional biases on every product; with {arch}.expert_count > 0 every
 *            block's feed-forward is a mixture of experts (Mixtral): routing weights
 *            renormalised over the chosen experts;
 *   qwen2    (biases on Q, K and V): RoPE on halves (NEOX);
 *   qwen2moe (qwen2 attention, routed experts plus a sigmoid-gated shared expert;
 *            routing weights not renormalised);
 *   qwen3    (per-head RMSNorm of Q and K before RoPE): RoPE on halves (NEOX);
 *   qwen3moe (qwen3 attention, routed experts renormalised, Qwen3-30B-A3B).
 *
 * Routing in every MoE block (llama.cpp's llm_build_moe_ffn, Hugging Face's
 * Qwen3MoeSparseMoeBlock): p = softmax(router logits) over all experts, the
 * expert_used_count largest, their p as weights (divided by their sum where the
 * architecture renormalises). */
#ifndef QL_HPARAMS_H
#define QL_HPARAMS_H

#include <stdbool.h>

#include "base/error.h"
#include "model/gguf.h"

/* More experts than any released model has (DeepSeek-V3 and Kimi K2: 256 and 384). */
#define QL_HPARAMS_MAX_EXPERTS 4096

typedef enum {
    QL_ARCH_LLAMA = 0,
    QL_ARCH_QWEN2,
    QL_ARCH_QWEN3,
    QL_ARCH_QWEN2MOE,
    QL_ARCH_QWEN3MOE,
} ql_arch;

typedef enum {
    QL_ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]) */
    QL_ROPE_NEOX,     /* rotate halves (x[i], x[i + n_rot/2]) */
} ql_rope_type;

typedef struct {
    ql_arch arch;
    char arch_name[32];     /* general.architecture as written */
    int n_layer;            /* block_count */
    int n_embd;             /* embedding_length: width of the residual stream */
    int n_ff;               /* feed_forward_length (the dense blocks' width) */
    int n_head;             /* attention.head_count */
    int n_head_kv;          /* attention.head_count_kv (default n_head) */
    int head_dim;           /* attention.key_length, default n_embd / n_head */
    int n_vocab;            /* rows of token_embd.weight */
    int n_rot;              /* rope.dimension_count, default head_dim */
    int n_ctx_train;        /* context_length (informative) */
    float norm_eps;         /* attention.layer_norm_rms_epsilon */
    float rope_freq_base;   /* rope.freq_base, default 10000 */
    float rope_freq_scale;  /* 1 / rope.scaling.factor for linear scaling, else 1 */
    ql_rope_type rope_type; /* NORM for llama, NEOX for qwen2/qwen3 */
    bool tied_output;       /* no output.weight: the head reuses token_embd.weight */
    bool has_qkv_bias;      /* qwen2 */
    bool has_qk_norm;       /* qwen3, qwen3moe */
    /* Mixture of experts (n_expert = 0: every block is dense). */
    int n_expert;             /* expert_count */
    int n_expert_used;        /* expert_used_count: experts per token */
    int n_ff_exp;             /* one routed expert's width */
    int n_ff_shexp;           /* the shared expert's width (qwen2moe), else 0 */
    bool expert_weights_norm; /* routing weights divided by their sum (llama, qwen3moe) */
} ql_hparams;

/* Whether block l's feed-forward is a mixture of experts (every block of an MoE model
 * of the supported architectures). */
static inline bool ql_hparams_moe_layer(const ql_hparams *hp, int l)
{
    (void)l;
    return hp->n_expert > 0;
}

/* The widest feed-forward hidden layer of any block: dense n_ff, an expert's or the
 * shared expert's width. */
int ql_hparams_ff_max(const ql_hparams *hp);

/* Parameters of the product weights of the largest block (the floats one bound layer
 * holds in f32: every expert of an MoE block, the router and the shared expert). */
int64_t ql_hparams_layer_weights(const ql_hparams *hp);

/* Reads the hyper-parameters of g: the {arch}.* keys, the vocabulary size from
 * token_embd.weight's shape and whether the head is tied to it (no output.weight).
 * Errors name the file and the key with expected vs actual. */
ql_status ql_hparams_read(const ql_gguf *g, ql_hparams *hp, ql_error *err);

#endif
