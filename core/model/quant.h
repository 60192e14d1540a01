/* qlab: tensor-level quantization, the type policy, and weight-error statistics.
 *
 * Tensors are row-major matrices of nrows x n_per_row floats (ggml order: n_per_row =
 * ne[0], the innermost dimension; nrows = ne[1] * ne[2] * ne[3]). Quantizing and
 * dequantizing split the rows into chunks fixed by the row length alone, processed by
 * ql_threads_get() OpenMP threads, so the bytes never depend on the thread count.
 *
 * The type policy (DESIGN.md section 3) decides the type each tensor of a model is
 * written in, from its name, shape and the requested types, and records every
 * fallback with its reason. It follows llama.cpp's llama-quantize (src/llama-quant.cpp,
 * b4747) where that applies: which tensors are quantized at all, and the fallback
 * chain for rows that do not split into the type's blocks. Unlike llama-quantize, the
 * head and the embeddings take the weight type unless overridden: its per-tensor
 * choices (Q6_K or Q8_0 for output.weight, the K-mix bumps of attn_v/ffn_down)
 * belong to its named mixes, while an experiment axis wants one type everywhere.
 * head_type = Q8_0 reproduces llama-quantize's head on models whose rows do not
 * split into 256-value blocks. */
#ifndef QL_QUANT_H
#define QL_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/gguf.h"

/* ------------------------------------------------------------------------- */
/* Tensor-level quantize / dequantize                                         */
/* ------------------------------------------------------------------------- */

/* Quantizes src (nrows x n_per_row floats) to type into dst (dst_size bytes, at least
 * nrows * ql_row_size(type, n_per_row)). imatrix: n_per_row importance weights, or
 * NULL for ggml's reference quantizer. Errors: unknown type, a type qlab cannot
 * produce (Q8_0_XC needs ql_quant_q8_0_xc), a type that requires an imatrix
 * (IQ2_XXS, IQ2_XS, IQ1_S) without one, a row that does not split into blocks, a
 * short buffer. *written (may be NULL) receives the byte count.
 * The chunks are ceil(16384 / n_per_row) rows, the chunks llama-quantize hands to
 * ggml_quantize_chunk when it runs with two or more threads. That matters for IQ1_S
 * and IQ1_M, whose quantizers carry state from row to row within one call. */
ql_status ql_quant_tensor(int32_t type, const float *src, int64_t nrows, int64_t n_per_row,
                          const float *imatrix, void *dst, size_t dst_size, size_t *written,
                          ql_error *err);

/* Decodes src (src_size bytes of type) into dst (nrows x n_per_row floats). */
ql_status ql_dequant_tensor(int32_t type, const void *src, size_t src_size, int64_t nrows,
                            int64_t n_per_row, float *dst, ql_error *err);

/* Row `row` of a tensor of `type` (rows of n_per_row values from data) as f32.
 * The type must decode (a dequantize function) and be prepared (ql_type_prepare). */
void ql_dequant_row(int32_t type, const void *data, int64_t row, int64_t n_per_row, float *out);

/* Rows per chunk of the parallel loops: enough rows for about 16K values. */
int64_t ql_quant_chunk_rows(int64_t n_per_row);

/* ------------------------------------------------------------------------- */
/* Type policy                                                                */
/* ------------------------------------------------------------------------- */

typedef enum {
    QL_ROLE_WEIGHT, /* a 2-D (or 3-D) matmul weight: the weight type */
    QL_ROLE_HEAD,   /* output.weight, the LM head: head type */
    QL_ROLE_EMBD,   /* token_embd.weight: embedding type (head type when tied, see below) */
    QL_ROLE_VECTOR, /* a 1-D tensor (norm, bias): always F32 */
    QL_ROLE_KEEP,   /* a tensor llama-quantize never quantizes: kept in its float type */
} ql_tensor_role;

typedef enum {
    QL_FALLBACK_NONE,
    QL_FALLBACK_ROW_LENGTH,   /* the row does not split into the type's blocks */
    QL_FALLBACK_SMALL_TENSOR, /* INT8_ROW keeps tensors of <= 65,536 values as F16 */
    QL_FALLBACK_NO_IMATRIX,   /* the type needs importance data the tensor does not have */
} ql_fallback_kind;

/* Requested types. head_type / embd_type QL_TYPE_INVALID mean "same as weight_type".
 * For a model without output.weight (tied embeddings) token_embd.weight is also the
 * head: it takes embd_type if given, else head_type if given, else weight_type
 * (llama-quantize's precedence). */
typedef struct {
    int32_t weight_type;
    int32_t head_type;
    int32_t embd_type;
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
    int32_t used;                     /* type actually written */
    ql_fallback_kind fallback;        /* NONE when used is what the role asked for */
    char reason[QL_QUANT_REASON_MAX]; /* why used != requested ("" otherwise) */
    uint64_t bytes;                   /* size of the tensor in the used type */
} ql_quant_plan_entry;

/* True for F32, F16 and BF16: the types llama-quantize keeps a tensor in and qlab
 * quantizes from. */
bool ql_quant_is_float_type(int32_t type);

/* Decides one tensor. src_type is the tensor's type in the input (used for KEEP).
 * model_has_output tells whether the model has an output.weight tensor. Errors: a
 * type that is not a weight type, a shape with a zero or negative dimension, or with
 * more than INT64_MAX / 4 values (its size in bytes must fit in 64 bits). */
ql_status ql_quant_plan_tensor(const ql_quant_config *cfg, const char *name, uint32_t n_dims,
                               const int64_t *ne, int32_t src_type, bool model_has_output,
                               ql_quant_plan_entry *out, ql_error *err);

/* The plan of a whole model, one entry per tensor in file order. */
typedef struct {
    int64_t n;
    ql_quant_plan_entry *entries;
    int64_t n_fallback;
    uint64_t bytes;      /* sum of entries[].bytes */
    int64_t params;      /* sum of values */
    uint64_t body_bytes; /* bytes of everything except the head and the embeddings */
    int64_t body_params;
} ql_quant_plan;

ql_status ql_quant_plan_build(const ql_gguf *g, const ql_quant_config *cfg, ql_quant_plan **out,
                              ql_error *err);
void ql_quant_plan_free(ql_quant_plan *p);

/* A tensor planned in a type ggml cannot make without importance weights (IQ2_XXS,
 * IQ2_XS, IQ1_S) when there are none for it (e.g. token_embd, which no imatrix
 * covers): llama-quantize's very-low-bit mixes give such tensors Q2_K, so the plan
 * does too (then the row-length fallbacks), recording the reason. Returns true when
 * e changed; call ql_quant_plan_totals() afterwards (or use the plan-level
 * ql_quant_plan_importance_fallbacks). */
bool ql_quant_plan_no_importance(ql_quant_plan_entry *e);

/* Whether tensor i of a plan (entry e) has importance weights. */
typedef bool (*ql_quant_importance_fn)(const void *ctx, int64_t i, const ql_quant_plan_entry *e);

/* ql_quant_plan_no_importance over a whole plan: every entry whose type needs
 * importance weights and for which has_importance(ctx, i, e) is false falls back;
 * the totals are recomputed when any did. Returns the number of entries changed. */
int64_t ql_quant_plan_importance_fallbacks(ql_quant_plan *p, ql_quant_importance_fn has_importance,
                                           const void *ctx);

/* Recomputes a plan's byte, parameter and fallback totals from its entries. */
void ql_quant_plan_totals(ql_quant_plan *p);

/* ------------------------------------------------------------------------- */
/* Weight error                                                               */
/* ------------------------------------------------------------------------- */

/* Accumulated error of a dequantized tensor w^ against its source w. With a per-column
 * weight vector I (an importance matrix row, n_per_row values) the weighted forms
 * imatrix_err = sum_rows sum_j I_j (w - w^)^2 and its reference sum_rows sum_j I_j w^2
 * are accumulated too (DESIGN.md section 4). Sums are in double. */
typedef struct {
    int64_t n;       /* values compared */
    double sse;      /* sum (w - w^)^2 */
    double sum_sq;   /* sum w^2 */
    double max_abs;  /* max |w - w^| */
    bool weighted;   /* the imatrix terms below are valid */
    int64_t w_n;     /* values the imatrix terms cover */
    double w_sse;    /* sum_rows sum_j I_j (w - w^)^2 */
    double w_sum_sq; /* sum_rows sum_j I_j w^2 */
} ql_weight_error;

/* Adds a tensor (or part of one) to e. col_weight: n_per_row weights or NULL. The
 * rows are reduced in fixed chunks in parallel and the chunk sums added in order,
 * so the result does not depend on the thread count. Within one tensor e->weighted
 * stays true only while every added part had weights. */
ql_status ql_weight_error_add(ql_weight_error *e, const float *w, const float *w_hat, int64_t nrows,
                              int64_t n_per_row, const float *col_weight, ql_error *err);

/* Adds b into a (model totals). The weighted terms of a total cover the tensors that
 * had importance weights (an imatrix has no entry for the embeddings, the head or the
 * norms): a is weighted when any merged part was, and w_n counts the values covered. */
void ql_weight_error_merge(ql_weight_error *a, const ql_weight_error *b);

/* sqrt(sse / n); 0 when n == 0. */
double ql_weight_error_rmse(const ql_weight_error *e);

/* imatrix_err / sum I w^2 (relative weighted error); NAN when not weighted or the
 * reference is zero. */
double ql_weight_error_rel(const ql_weight_error *e);

#endif
