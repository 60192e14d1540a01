/* qlab fit with quantizer gptq: GPTQ's output errors for the table. See fit_gptq.h. */
#include "experiment/fit_gptq.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/fit_internal.h"
#include "experiment/gptq_pass.h"
#include "formats/quant_split.h"
#include "formats/types.h"
#include "model/gguf.h"
#include "model/quant.h"
#include "model/quant_model.h"

typedef struct {
    const ql_fit_gptq *g;
    ql_fit_table *t;
    int64_t n_tensors; /* block products measured */
} visit;

/* sum over the nr rows of e H e^T / n_tok, e = x - y (rows of n values): each row's on
 * one thread, the rows added in order, so the sum does not depend on the thread count. */
static double output_error(const float *x, const float *y, int64_t nr, int64_t n, const double *H,
                           int64_t n_tok, double *row_err, double *e_all)
{
#pragma omp parallel for schedule(static) num_threads(ql_threads_get())
    for (int64_t r = 0; r < nr; r++) {
        double *e = e_all + r * n;
        for (int64_t j = 0; j < n; j++)
            e[j] = (double)x[r * n + j] - (double)y[r * n + j];
        double s = 0;
        for (int64_t i = 0; i < n; i++) {
            const double *h = H + i * n;
            double hi = 0;
            for (int64_t j = 0; j < n; j++)
                hi += h[j] * e[j];
            s += e[i] * hi;
        }
        row_err[r] = s;
    }
    double total = 0;
    for (int64_t r = 0; r < nr; r++)
        total += row_err[r];
    return total / (double)n_tok;
}

/* The sampled rows (idx, nr of them) in type: GPTQ's with factor, else ggml's through
 * the per-tensor entry point, each run of consecutive source rows in one call (the bytes
 * `qlab quantize` gives them). imp: the importance ggml's search gets, or NULL. */
static ql_status quantize_sampled(const ql_gguf_tensor *gt, int32_t type, const int64_t *idx,
                                  int64_t nr, const float *x, const float *imp,
                                  const ql_gptq_factor *factor, uint8_t *q, ql_error *err)
{
    const int64_t n = gt->ne[0];
    if (factor)
        return ql_gptq_quantize_rows(factor, type, x, q, nr, imp, err);
    const size_t rs = ql_row_size(type, n);
    ql_quant_src s;
    ql_quant_src_from_gguf(&s, gt);
    s.imatrix = imp;
    for (int64_t k = 0; k < nr;) {
        int64_t run = 1;
        while (k + run < nr && idx[k + run] == idx[k] + run)
            run++;
        s.rows = x + k * n;
        s.rows_first = idx[k];
        s.rows_n = run;
        ql_status st =
            ql_quant_tensor_rows(&s, type, idx[k], run, q + (size_t)k * rs, rs * (size_t)run, err);
        if (st)
            return st;
        k += run;
    }
    return QL_OK;
}

/* Every choice of table tensor ft (the product lin of this block) measured on H. */
static ql_status measure_tensor(const visit *v, ql_fit_tensor *ft, const ql_linear *lin,
                                ql_hessians *h, ql_error *err)
{
    const ql_fit_gptq *g = v->g;
    const ql_gguf_tensor *gt = ql_gguf_find_tensor(g->model->gguf, ft->name);
    int64_t n = 0, n_tok = 0;
    const double *H = ql_hessians_get(h, lin->kind, &n, &n_tok);
    if (!gt || !H || n != gt->ne[0])
        return ql_error_set(err, QL_EINVAL, "no Hessian of its input was summed");
    const float *imp = NULL;
    int64_t imp_n = 0;
    ql_status st = ql_fit_quant_importance(g->imp, gt, &imp, &imp_n, err);
    if (st)
        return st;
    const int64_t rows = gt->ne[1];
    const int64_t ns = ft->rows_measured > 0 && ft->rows_measured < rows ? ft->rows_measured : rows;
    size_t max_rs = 0;
    for (int c = 0; c < ft->n_choices; c++) {
        const size_t rs = ql_row_size(ft->choices[c].type, n);
        max_rs = rs > max_rs ? rs : max_rs;
    }
    int64_t *idx = malloc((size_t)ns * sizeof *idx);
    float *x = malloc((size_t)(ns * n) * sizeof *x), *y = malloc((size_t)(ns * n) * sizeof *y);
    uint8_t *q = malloc(max_rs * (size_t)ns);
    double *row_err = malloc((size_t)ns * sizeof *row_err);
    double *e = malloc((size_t)(ns * n) * sizeof *e);
    if (!idx || !x || !y || !q || !row_err || !e) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory for %lld sampled rows",
                          (long long)ns);
        goto out;
    }
    for (int64_t k = 0; k < ns; k++) {
        idx[k] = ql_fit_sample_row(k, ns, rows);
        ql_dequant_row(gt->type, gt->data, idx[k], n, x + k * n);
    }
    for (int c = 0; c < ft->n_choices && !st; c++) {
        const int32_t type = ft->choices[c].type;
        const ql_gptq_factor *factor = NULL;
        if (ql_split_applies(type) && (st = ql_hessians_factor(h, lin->kind, g->gptq, NULL,
                                                               &factor, err)))
            break;
        if ((st = quantize_sampled(gt, type, idx, ns, x, imp, factor, q, err)))
            break;
        ql_type_get(type)->dequantize(q, y, ns, n);
        ft->choices[c].err = output_error(x, y, ns, n, H, n_tok, row_err, e) * (double)rows /
                             (double)ns;
    }
    if (!st)
        ft->imp = QL_FIT_IMP_HESSIAN;
out:
    free(idx);
    free(x);
    free(y);
    free(q);
    free(row_err);
    free(e);
    return st;
}

static ql_status visit_block(void *ctx, int layer, ql_hessians *h, ql_error *err)
{
    visit *v = ctx;
    const ql_weights *w = v->g->model->weights;
    for (int i = 0; i < v->t->n_tensors; i++) {
        ql_fit_tensor *ft = &v->t->tensors[i];
        const ql_linear *lin = ft->assigned ? ql_weights_find((ql_weights *)w, ft->name) : NULL;
        if (!lin || lin->layer != layer || ql_hess_input_of(lin->kind) < 0)
            continue;
        ql_status st = measure_tensor(v, ft, lin, h, err);
        if (st)
            return ql_error_prefix(err, "gptq errors: tensor '%s': ", ft->name);
        v->n_tensors++;
    }
    return QL_OK;
}

ql_status ql_fit_gptq_errors(void *ctx, ql_fit_table *t, ql_error *err)
{
    const ql_fit_gptq *g = ctx;
    visit v = {g, t, 0};
    ql_status st = ql_hessians_visit(g->model, g->calib, g->mem, g->quiet, visit_block, &v, err);
    if (st)
        return ql_error_prefix(err, "quantizer gptq with a budget: ");
    return ql_fit_table_add_note(
        t, err,
        "errors of %lld block products: GPTQ's output error e H e^T / tokens over %lld "
        "calibration chunks of %d tokens (ggml's rounding for the types GPTQ does not split); "
        "the head and embeddings keep the imatrix-weighted error",
        (long long)v.n_tensors, (long long)g->calib->n_chunks, g->calib->ctx);
}
