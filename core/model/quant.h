/* qlab: tensor-level quantization and weight-error statistics.
 *
 * Tensors are row-major matrices of nrows x n_per_row floats (ggml order: n_per_row =
 * ne[0], the innermost dimension; nrows = ne[1] * ne[2] * ne[3]). Quantizing and
 * dequantizing split the rows into chunks fixed by the row length alone, processed by
 * ql_threads_get() OpenMP threads, so the bytes never depend on the thread count.
 *
 * The type each tensor of a model is written in is the type policy's
 * (model/quant_policy.h), which comes with this header: whoever quantizes tensors
 * follows a plan. */
#ifndef QL_QUANT_H
#define QL_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/gguf.h"
#include "model/quant_policy.h"

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
 * and IQ1_M, whose quantizers carry state from row to row within one call. This is
 * the building block of ql_quant_tensor_rows (quant_model.h), the entry point for
 * any rows of a tensor: callers quantize tensors through that. */
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
/* Weight error                                                               */
/* ------------------------------------------------------------------------- */

/* Accumulated error of a dequantized tensor w^ against its source w. With a per-column
 * weight vector I (an importance matrix row, n_per_row values) the weighted forms
 * imatrix_err = sum_rows sum_j I_j (w - w^)^2 and its reference sum_rows sum_j I_j w^2
 * are accumulated too. Sums are in double. */
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
