/* Tensor-level quantization, the type policy and weight errors. See quant.h. */
#include "model/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "formats/quant_int8row.h"
#include "formats/types.h"

/* Values per parallel chunk (llama-quantize uses the same 32 x 512 minimum). */
#define CHUNK_VALUES (32 * 512)

int64_t ql_quant_chunk_rows(int64_t n_per_row)
{
    if (n_per_row <= 0 || n_per_row >= CHUNK_VALUES)
        return 1;
    return (CHUNK_VALUES + n_per_row - 1) / n_per_row;
}

/* Shared checks of ql_quant_tensor / ql_dequant_tensor: the row size of the type. */
static ql_status check_shape(const ql_type_traits *tr, int32_t type, int64_t nrows,
                             int64_t n_per_row, size_t buf_size, size_t *row_size, const char *what,
                             ql_error *err)
{
    if (!tr)
        return ql_error_set(err, QL_EINVAL, "%s: unknown type id %d", what, (int)type);
    if (nrows < 0 || n_per_row <= 0)
        return ql_error_set(err, QL_EINVAL, "%s %s: invalid shape %lld x %lld", what, tr->name,
                            (long long)nrows, (long long)n_per_row);
    *row_size = ql_row_size(type, n_per_row);
    if (*row_size == 0)
        return ql_error_set(err, QL_EINVAL,
                            "%s %s: row length %lld is not a multiple of the block size %lld", what,
                            tr->name, (long long)n_per_row, (long long)tr->block_size);
    if (type == QL_TYPE_INT8_ROW && !ql_int8row_row_ok(n_per_row))
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "%s INT8_ROW: rows of %lld values are longer than the percentile "
                            "search supports",
                            what, (long long)n_per_row);
    if (nrows > 0 && (size_t)nrows > buf_size / *row_size)
        return ql_error_set(err, QL_EINVAL,
                            "%s %s: buffer of %zu bytes is smaller than %lld rows of %zu bytes",
                            what, tr->name, buf_size, (long long)nrows, *row_size);
    return QL_OK;
}

ql_status ql_quant_tensor(int32_t type, const float *src, int64_t nrows, int64_t n_per_row,
                          const float *imatrix, void *dst, size_t dst_size, size_t *written,
                          ql_error *err)
{
    const ql_type_traits *tr = ql_type_get(type);
    size_t row_size;
    ql_status st = check_shape(tr, type, nrows, n_per_row, dst_size, &row_size, "quantize", err);
    if (st)
        return st;
    if (type == QL_TYPE_Q8_0_XC)
        return ql_error_set(err, QL_EINVAL,
                            "quantize Q8_0_XC: needs the outlier columns (ql_quant_q8_0_xc)");
    if (!tr->quantize)
        return ql_error_set(err, QL_EUNSUPPORTED, "quantize %s: qlab cannot produce this type",
                            tr->name);
    if (tr->requires_imatrix && !imatrix)
        return ql_error_set(err, QL_EINVAL,
                            "quantize %s: needs an importance matrix (ggml refuses to quantize it "
                            "without one)",
                            tr->name);
    if ((st = ql_type_prepare(type, err)))
        return st;

    const int64_t chunk = ql_quant_chunk_rows(n_per_row);
    const int64_t n_chunks = (nrows + chunk - 1) / chunk;
    const ql_quantize_fn fn = tr->quantize;
    /* Each chunk is decoded again and checked: a block scale that overflowed (weights
     * too large for its f16 scale, importance that overflowed a weighted search)
     * decodes to inf or nan, and such bytes must never reach a file or a run. The
     * first bad value in row order is reported, whatever the thread count. */
    int64_t bad = INT64_MAX;
    bool oom = false;
#pragma omp parallel for schedule(dynamic, 1) num_threads(ql_threads_get()) if (n_chunks > 1)      \
    reduction(min                                                                                  \
              : bad) reduction(||                                                                  \
                               : oom)
    for (int64_t c = 0; c < n_chunks; c++) {
        const int64_t r0 = c * chunk;
        const int64_t nr = nrows - r0 < chunk ? nrows - r0 : chunk;
        char *q = (char *)dst + (size_t)r0 * row_size;
        fn(src + r0 * n_per_row, q, nr, n_per_row, imatrix);
        float *back = tr->dequantize ? malloc((size_t)(nr * n_per_row) * sizeof *back) : NULL;
        if (tr->dequantize && !back) {
            oom = true;
            continue;
        }
        if (back) {
            tr->dequantize(q, back, nr, n_per_row);
            for (int64_t i = 0; i < nr * n_per_row; i++)
                if (!isfinite(back[i])) {
                    bad = r0 * n_per_row + i < bad ? r0 * n_per_row + i : bad;
                    break;
                }
            free(back);
        }
    }
    if (oom)
        return ql_error_set(err, QL_ENOMEM, "quantize %s: out of memory for the decoding check",
                            tr->name);
    if (bad != INT64_MAX) {
        const int64_t row = bad / n_per_row, col = bad % n_per_row;
        const int64_t b0 = tr->block_size > 0 ? col - col % tr->block_size : 0;
        float amax = 0.0f;
        int64_t nonfinite = -1;
        for (int64_t j = 0; j < n_per_row; j++) {
            const float v = src[row * n_per_row + j];
            if (!isfinite(v) && nonfinite < 0)
                nonfinite = j;
            amax = fmaxf(amax, fabsf(v));
        }
        if (nonfinite >= 0)
            return ql_error_set(
                err, QL_EFORMAT, "quantize %s: row %lld, column %lld: the weight is %g", tr->name,
                (long long)row, (long long)nonfinite, (double)src[row * n_per_row + nonfinite]);
        return ql_error_set(err, QL_EFORMAT,
                            "quantize %s: row %lld, the block at column %lld decodes to non-finite "
                            "values: its scale overflowed (largest |weight| in the row %g%s)",
                            tr->name, (long long)row, (long long)b0, (double)amax,
                            imatrix ? ", with importance weights" : "");
    }
    if (written)
        *written = (size_t)nrows * row_size;
    return QL_OK;
}

void ql_dequant_row(int32_t type, const void *data, int64_t row, int64_t n_per_row, float *out)
{
    const size_t row_size = ql_row_size(type, n_per_row);
    ql_type_get(type)->dequantize((const char *)data + (size_t)row * row_size, out, 1, n_per_row);
}

ql_status ql_dequant_tensor(int32_t type, const void *src, size_t src_size, int64_t nrows,
                            int64_t n_per_row, float *dst, ql_error *err)
{
    const ql_type_traits *tr = ql_type_get(type);
    size_t row_size;
    ql_status st = check_shape(tr, type, nrows, n_per_row, src_size, &row_size, "dequantize", err);
    if (st)
        return st;
    if (!tr->dequantize)
        return ql_error_set(err, QL_EUNSUPPORTED, "dequantize %s: qlab cannot decode this type",
                            tr->name);
    if ((st = ql_type_prepare(type, err)))
        return st;
    const int64_t chunk = ql_quant_chunk_rows(n_per_row);
    const int64_t n_chunks = (nrows + chunk - 1) / chunk;
    const ql_dequantize_fn fn = tr->dequantize;
#pragma omp parallel for schedule(dynamic, 1) num_threads(ql_threads_get()) if (n_chunks > 1)
    for (int64_t c = 0; c < n_chunks; c++) {
        const int64_t r0 = c * chunk;
        const int64_t nr = nrows - r0 < chunk ? nrows - r0 : chunk;
        fn((const char *)src + (size_t)r0 * row_size, dst + r0 * n_per_row, nr, n_per_row);
    }
    return QL_OK;
}

/* ========================================================================= */
/* Weight error                                                               */
/* ========================================================================= */

typedef struct {
    double sse, sum_sq, max_abs, w_sse, w_sum_sq;
} err_part;

ql_status ql_weight_error_add(ql_weight_error *e, const float *w, const float *w_hat, int64_t nrows,
                              int64_t n_per_row, const float *col_weight, ql_error *err)
{
    if (nrows < 0 || n_per_row <= 0)
        return ql_error_set(err, QL_EINVAL, "weight error: invalid shape %lld x %lld",
                            (long long)nrows, (long long)n_per_row);
    const int64_t chunk = ql_quant_chunk_rows(n_per_row);
    const int64_t n_chunks = (nrows + chunk - 1) / chunk;
    err_part *parts = calloc(n_chunks ? (size_t)n_chunks : 1, sizeof *parts);
    if (!parts)
        return ql_error_set(err, QL_ENOMEM, "weight error: out of memory");
#pragma omp parallel for schedule(dynamic, 1) num_threads(ql_threads_get()) if (n_chunks > 1)
    for (int64_t c = 0; c < n_chunks; c++) {
        const int64_t r1 = (c + 1) * chunk < nrows ? (c + 1) * chunk : nrows;
        err_part s = {0, 0, 0, 0, 0};
        for (int64_t r = c * chunk; r < r1; r++) {
            const float *a = w + r * n_per_row, *b = w_hat + r * n_per_row;
            for (int64_t j = 0; j < n_per_row; j++) {
                const double d = (double)a[j] - (double)b[j];
                const double a2 = (double)a[j] * (double)a[j];
                s.sse += d * d;
                s.sum_sq += a2;
                if (fabs(d) > s.max_abs)
                    s.max_abs = fabs(d);
                if (col_weight) {
                    s.w_sse += (double)col_weight[j] * d * d;
                    s.w_sum_sq += (double)col_weight[j] * a2;
                }
            }
        }
        parts[c] = s;
    }
    e->weighted = (e->n == 0 ? true : e->weighted) && col_weight != NULL;
    if (col_weight)
        e->w_n += nrows * n_per_row;
    for (int64_t c = 0; c < n_chunks; c++) {
        e->sse += parts[c].sse;
        e->sum_sq += parts[c].sum_sq;
        if (parts[c].max_abs > e->max_abs)
            e->max_abs = parts[c].max_abs;
        e->w_sse += parts[c].w_sse;
        e->w_sum_sq += parts[c].w_sum_sq;
    }
    e->n += nrows * n_per_row;
    free(parts);
    return QL_OK;
}

void ql_weight_error_merge(ql_weight_error *a, const ql_weight_error *b)
{
    if (b->n == 0)
        return;
    a->n += b->n;
    a->sse += b->sse;
    a->sum_sq += b->sum_sq;
    if (b->max_abs > a->max_abs)
        a->max_abs = b->max_abs;
    if (b->weighted) {
        a->weighted = true;
        a->w_n += b->w_n;
        a->w_sse += b->w_sse;
        a->w_sum_sq += b->w_sum_sq;
    }
}

double ql_weight_error_rmse(const ql_weight_error *e)
{
    return e->n > 0 ? sqrt(e->sse / (double)e->n) : 0.0;
}

double ql_weight_error_rel(const ql_weight_error *e)
{
    if (!e->weighted || !(e->w_sum_sq > 0))
        return (double)NAN;
    return e->w_sse / e->w_sum_sq;
}
