/* qlab: the type policy: the type each tensor of a model is written in.
 *
 * One function decides for the whole program (qlab quantize, the sweep, the fit):
 * ql_quant_plan_make, from the model's tensors and hyper-parameters, the requested
 * types or llama-quantize file type (a "mix"), the per-tensor overrides and whether
 * an importance matrix is present, to a per-tensor plan that records why each
 * tensor is asked for its type (the rule, override or config entry) and why it got
 * another one (every fallback). ql_quant_plan_build reads those inputs from a GGUF.
 *
 * Two ways to ask:
 *   - pure (no mix): one weight type for every weight, the head and the embeddings
 *     taking it too unless head_type / embd_type say otherwise: qlab's experiment
 *     axis, and llama-quantize --pure. For a model without output.weight (tied
 *     embeddings) token_embd.weight is also the head: it takes embd_type if given,
 *     else head_type if given, else the weight type.
 *   - a mix: llama-quantize's file type (Q4_K_M, IQ3_M, ...), whose per-tensor rules
 *     are llama_tensor_get_type's of llama.cpp b4747 (src/llama-quant.cpp) for the
 *     llama and qwen2 architectures (qwen3, which b4747 does not know, gets the same
 *     rules): the head and embedding types, the attn_v / attn_k / attn_q / ffn_down /
 *     attn_output / ffn_gate / ffn_up rules by layer position, GQA ratio and expert
 *     count, and the IQ mixes' exceptions. head_type and embd_type are llama-quantize's
 *     --output-tensor-type and --token-embedding-type.
 * In both, the tensors llama-quantize never quantizes (1-D ones, norms, routers,
 * position embeddings, ...) keep their float type, and --tensor-type overrides
 * (REGEX=TYPE, first match wins) take precedence over the weight type and the mix's
 * rules, not over head_type / embd_type.
 *
 * Then, for every tensor: a row that does not split into the type's blocks falls back
 * the way llama.cpp does (the traits' row_fallback column: K/IQ/ternary types to
 * their 32-block neighbours, then F16 where that does not fit either, F16 for the
 * 32-block types, which llama.cpp refuses); INT8_ROW keeps small tensors as F16.
 * Each fallback is recorded with its reason, never silent.
 *
 * Where qlab differs from llama-quantize b4747 on purpose:
 *   - the fallback also applies to --output-tensor-type, --token-embedding-type and
 *     --pure (llama-quantize writes those unchecked and fails on rows that do not
 *     split), and a 32-block type on such rows gives F16 instead of an error;
 *   - --tensor-type did not exist in b4747: it matches as later llama-quantize does
 *     (the pattern lowercased, searched anywhere in the tensor name, ECMAScript
 *     syntax, here with PCRE2 through base/regex.h), is applied after the mix's rules
 *     decided, so the layer counters of the rules count every tensor, and is followed
 *     by the row-length fallback. It applies in pure plans too. */
#ifndef QL_QUANT_POLICY_H
#define QL_QUANT_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/gguf.h"

/* ------------------------------------------------------------------------- */
/* llama-quantize's file types                                                */
/* ------------------------------------------------------------------------- */

/* LLAMA_FTYPE values (llama.h, b4747): general.file_type of a GGUF model. */
typedef enum {
    QL_FTYPE_ALL_F32 = 0,
    QL_FTYPE_F16 = 1,
    QL_FTYPE_Q4_0 = 2,
    QL_FTYPE_Q4_1 = 3,
    QL_FTYPE_Q8_0 = 7,
    QL_FTYPE_Q5_0 = 8,
    QL_FTYPE_Q5_1 = 9,
    QL_FTYPE_Q2_K = 10,
    QL_FTYPE_Q3_K_S = 11,
    QL_FTYPE_Q3_K_M = 12,
    QL_FTYPE_Q3_K_L = 13,
    QL_FTYPE_Q4_K_S = 14,
    QL_FTYPE_Q4_K_M = 15,
    QL_FTYPE_Q5_K_S = 16,
    QL_FTYPE_Q5_K_M = 17,
    QL_FTYPE_Q6_K = 18,
    QL_FTYPE_IQ2_XXS = 19,
    QL_FTYPE_IQ2_XS = 20,
    QL_FTYPE_Q2_K_S = 21,
    QL_FTYPE_IQ3_XS = 22,
    QL_FTYPE_IQ3_XXS = 23,
    QL_FTYPE_IQ1_S = 24,
    QL_FTYPE_IQ4_NL = 25,
    QL_FTYPE_IQ3_S = 26,
    QL_FTYPE_IQ3_M = 27,
    QL_FTYPE_IQ2_S = 28,
    QL_FTYPE_IQ2_M = 29,
    QL_FTYPE_IQ4_XS = 30,
    QL_FTYPE_IQ1_M = 31,
    QL_FTYPE_BF16 = 32,
    QL_FTYPE_TQ1_0 = 36,
    QL_FTYPE_TQ2_0 = 37,
    QL_FTYPE_LIMIT = 38, /* one past the largest */
} ql_ftype;

/* One of llama-quantize's file types. */
typedef struct {
    const char *name;     /* llama-quantize's spelling: "Q4_K_M" */
    const char *alias;    /* the other name llama-quantize reads for it ("Q4_K"), or NULL */
    ql_ftype ftype;       /* general.file_type of the files it writes */
    int32_t default_type; /* the type of every tensor no rule changes */
    /* llama-quantize refuses the file type without an importance matrix. */
    bool needs_imatrix;
} ql_quant_mix;

/* A file type by llama-quantize's name or alias (case-insensitive: "q4_k_m", "Q4_K")
 * or by its number ("15"), as llama-quantize's TYPE argument; NULL when none. */
const ql_quant_mix *ql_quant_mix_by_name(const char *name);

/* A file type by LLAMA_FTYPE value, or NULL. */
const ql_quant_mix *ql_quant_mix_by_ftype(int32_t ftype);

/* Every file type, by ftype value: returns the count. */
int ql_quant_mix_list(const ql_quant_mix **out, int max);

/* ------------------------------------------------------------------------- */
/* Per-tensor overrides (--tensor-type REGEX=TYPE)                            */
/* ------------------------------------------------------------------------- */

typedef struct ql_quant_overrides ql_quant_overrides;

/* Parses n rules "REGEX=TYPE" (split at the first '='; REGEX lowercased as
 * llama-quantize does; TYPE a weight type name, case-insensitive). Errors name the
 * rule: no '=', an empty pattern or type, an unknown type or one that is not a
 * weight type, a pattern PCRE2 cannot compile or qlab does not support. */
ql_status ql_quant_overrides_parse(const char *const *rules, int n, ql_quant_overrides **out,
                                   ql_error *err);
void ql_quant_overrides_free(ql_quant_overrides *o);

int ql_quant_overrides_count(const ql_quant_overrides *o);
/* Rule i as given, its type. */
const char *ql_quant_overrides_rule(const ql_quant_overrides *o, int i);
int32_t ql_quant_overrides_type(const ql_quant_overrides *o, int i);

/* The first rule whose pattern occurs in name: *rule = its index, or -1 when none
 * matches. Fails only when PCRE2 gives up (QL_ENOMEM). Thread-safe. */
ql_status ql_quant_overrides_match(const ql_quant_overrides *o, const char *name, int *rule,
                                   ql_error *err);

/* ------------------------------------------------------------------------- */
/* Plans                                                                      */
/* ------------------------------------------------------------------------- */

typedef enum {
    QL_ROLE_WEIGHT, /* a 2-D (or 3-D) matmul weight: the weight type */
    QL_ROLE_HEAD,   /* output.weight, the LM head: head type */
    QL_ROLE_EMBD,   /* token_embd.weight: embedding type (head type when tied, see above) */
    QL_ROLE_VECTOR, /* a 1-D tensor (norm, bias): always F32 */
    QL_ROLE_KEEP,   /* a tensor llama-quantize never quantizes: kept in its float type */
} ql_tensor_role;

/* A mixture of experts' router (or shared-expert gate), by name: llama-quantize keeps
 * it in its float type; qlab quantizes it when a --tensor-type rule (tensor_types)
 * names it, or when a kld fit assigns it (its sensitivity measured like any other's). */
bool ql_quant_is_router(const char *name);

typedef enum {
    QL_FALLBACK_NONE,
    QL_FALLBACK_ROW_LENGTH,   /* the row does not split into the type's blocks */
    QL_FALLBACK_SMALL_TENSOR, /* INT8_ROW keeps tensors of <= 65,536 values as F16 */
    QL_FALLBACK_NO_IMATRIX,   /* the type needs importance data the tensor does not have */
} ql_fallback_kind;

/* What is asked for. The first three fields are qlab's pure config; the others are
 * off when zero (initialize with designated initializers). */
typedef struct {
    int32_t weight_type;     /* pure: every weight's type; with a mix, its default type is used */
    int32_t head_type;       /* output.weight (QL_TYPE_INVALID: the weight type / the mix's rule) */
    int32_t embd_type;       /* token_embd.weight (QL_TYPE_INVALID: likewise) */
    const ql_quant_mix *mix; /* llama-quantize's file type, NULL: pure weight_type */
    bool pure;               /* with a mix: its default type everywhere (--pure) */
    bool leave_output;       /* output.weight keeps its source type (--leave-output-tensor) */
    bool has_imatrix;        /* an importance matrix is given (some rules depend on it) */
    const ql_quant_overrides *overrides; /* --tensor-type rules; NULL: none */
} ql_quant_config;

#define QL_QUANT_NAME_MAX   256
#define QL_QUANT_REASON_MAX 192

typedef struct {
    char name[QL_QUANT_NAME_MAX];
    uint32_t n_dims;
    int64_t ne[QL_GGUF_MAX_DIMS]; /* ggml order, unused dims 1 */
    int64_t n_per_row;            /* ne[0] */
    int64_t nrows;                /* product of the other dims */
    ql_tensor_role role;
    int32_t requested;                /* type the config asks for this tensor */
    char choice[QL_QUANT_REASON_MAX]; /* why: the rule, override or config entry */
    int32_t used;                     /* type actually written */
    ql_fallback_kind fallback;        /* NONE when used is what the role asked for */
    char reason[QL_QUANT_REASON_MAX]; /* why used != requested ("" otherwise) */
    uint64_t bytes;                   /* size of the tensor in the used type */
} ql_quant_plan_entry;

/* The plan of a whole model, one entry per tensor in file order. */
typedef struct {
    int64_t n;
    ql_quant_plan_entry *entries;
    int64_t n_fallback;
    uint64_t bytes;      /* sum of entries[].bytes */
    int64_t params;      /* sum of values */
    uint64_t body_bytes; /* bytes of everything except the head and the embeddings */
    int64_t body_params;
    const ql_quant_mix *mix; /* the file type asked for (its rules applied unless pure) */
    int32_t weight_type;     /* the weight type, or the mix's default type */
    bool rules;              /* the mix's per-tensor rules decided (not pure, not a float type) */
    /* general.file_type of a GGUF written from the plan: the mix's, else the weight
     * type's (the traits' ftype column); -1 when the type has none. */
    int32_t ftype;
} ql_quant_plan;

/* A tensor of the model to plan. */
typedef struct {
    const char *name;
    uint32_t n_dims;
    int64_t ne[QL_GGUF_MAX_DIMS]; /* ggml order */
    int32_t type;                 /* its type in the source (kept tensors keep it) */
} ql_quant_tensor_desc;

/* The model: its tensors in file order, and the hyper-parameters a mix's rules read
 * (ignored by pure plans). */
typedef struct {
    const char *path; /* for messages, or NULL */
    const char *arch; /* general.architecture */
    int n_layer;      /* block_count */
    int n_head;       /* attention.head_count */
    int n_head_kv;    /* attention.head_count_kv */
    int n_expert;     /* expert_count, 0 for a dense model */
    int64_t n_tensors;
    const ql_quant_tensor_desc *tensors;
} ql_quant_model_desc;

/* The policy: the plan of model m under cfg (see the header comment). Errors: a
 * requested type that is not a weight type, a shape with a zero or negative
 * dimension or more than INT64_MAX / 4 values, and for a mix: a file type that needs
 * an importance matrix without one, an architecture other than llama, qwen2 and
 * qwen3, attention tensors that do not match the layer count, an expert tensor
 * whose name has no layer. Messages name the file (m->path), tensor and rule. */
ql_status ql_quant_plan_make(const ql_quant_model_desc *m, const ql_quant_config *cfg,
                             ql_quant_plan **out, ql_error *err);

/* ql_quant_plan_make on a GGUF model: its tensors, and for a mix's rules its
 * hyper-parameters (model/hparams.h) and {arch}.expert_count. */
ql_status ql_quant_plan_build(const ql_gguf *g, const ql_quant_config *cfg, ql_quant_plan **out,
                              ql_error *err);
void ql_quant_plan_free(ql_quant_plan *p);

/* One tensor of a pure plan (cfg without a mix): src_type is the tensor's type in the
 * input (used for KEEP), model_has_output whether the model has an output.weight
 * tensor. Errors as ql_quant_plan_make's, and QL_EINVAL for a mix, whose rules need
 * the whole model. */
ql_status ql_quant_plan_tensor(const ql_quant_config *cfg, const char *name, uint32_t n_dims,
                               const int64_t *ne, int32_t src_type, bool model_has_output,
                               ql_quant_plan_entry *out, ql_error *err);

/* True for F32, F16 and BF16: the types llama-quantize keeps a tensor in and qlab
 * quantizes from. */
bool ql_quant_is_float_type(int32_t type);

/* Whether entry e of plan p is in a type that needs importance weights: in a pure
 * plan, the types ggml cannot make without (IQ2_XXS, IQ2_XS, IQ1_S); with a mix,
 * llama-quantize's list (those, IQ2_S, IQ1_M but for token_embd and output, and
 * Q2_K in Q2_K_S but for token_embd). */
bool ql_quant_plan_needs_importance(const ql_quant_plan *p, const ql_quant_plan_entry *e);

/* A tensor planned in a type ggml cannot make without importance weights when there
 * are none for it (e.g. token_embd, which no imatrix covers): llama-quantize's
 * very-low-bit mixes give such tensors Q2_K, so a pure plan does too (then the
 * row-length fallbacks), recording the reason. Returns true when e changed; call
 * ql_quant_plan_totals() afterwards. */
bool ql_quant_plan_no_importance(ql_quant_plan_entry *e);

/* Whether tensor i of a plan (entry e) has importance weights. */
typedef bool (*ql_quant_importance_fn)(const void *ctx, int64_t i, const ql_quant_plan_entry *e);

/* The entries that need importance weights (ql_quant_plan_needs_importance) and for
 * which has_importance(ctx, i, e) is false: in a pure plan they fall back
 * (ql_quant_plan_no_importance) and the totals are recomputed; with a mix,
 * llama-quantize refuses to quantize such a tensor, and so does this (QL_EINVAL
 * naming the first one). *n_changed (may be NULL) receives the fallbacks. */
ql_status ql_quant_plan_check_importance(ql_quant_plan *p, ql_quant_importance_fn has_importance,
                                         const void *ctx, int64_t *n_changed, ql_error *err);

/* ql_quant_plan_check_importance for a pure plan, which cannot fail: returns the
 * number of entries changed. */
int64_t ql_quant_plan_importance_fallbacks(ql_quant_plan *p, ql_quant_importance_fn has_importance,
                                           const void *ctx);

/* Recomputes a plan's byte, parameter and fallback totals from its entries. */
void ql_quant_plan_totals(ql_quant_plan *p);

#endif
