/* qlab: the hyper-parameters of a llama-family model, read from GGUF metadata as
 * llama.cpp reads them, and checked before anything is sized by them.
 *
 * Supported architectures:
 *   llama  (TinyLlama, Llama 2/3, SmolLM, stories260K): RoPE on adjacent pairs;
 *   qwen2  (biases on Q, K and V): RoPE on halves (NEOX);
 *   qwen3  (per-head RMSNorm of Q and K before RoPE): RoPE on halves (NEOX). */
#ifndef QL_HPARAMS_H
#define QL_HPARAMS_H

#include <stdbool.h>

#include "base/error.h"
#include "model/gguf.h"

typedef enum {
    QL_ARCH_LLAMA = 0,
    QL_ARCH_QWEN2,
    QL_ARCH_QWEN3,
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
    int n_ff;               /* feed_forward_length */
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
    bool has_qk_norm;       /* qwen3 */
} ql_hparams;

/* Reads the hyper-parameters of g: the {arch}.* keys, the vocabulary size from
 * token_embd.weight's shape and whether the head is tied to it (no output.weight).
 * Errors name the file and the key with expected vs actual. */
ql_status ql_hparams_read(const ql_gguf *g, ql_hparams *hp, ql_error *err);

#endif
