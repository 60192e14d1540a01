/* qlab fit: writing the mixed-precision GGUF of a plan, and the one-call planner
 * (see fit.h). */
#include "experiment/fit.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "base/progress.h"
#include "base/util.h"
#include "model/quant.h"
#include "model/quant_model.h"

/* Values converted to f32 at a time while writing (16 MB): bounds the memory
 * besides the one quantized tensor. */
#define WRITE_BLOCK_VALUES ((int64_t)1 << 22)

/* The importance vector the quantizer receives for a tensor (NULL: none), checked
 * against its shape as the error table checks it. */
static ql_status quant_importance(const ql_gguf_tensor *gt, const ql_fit_importance *imp,
                                  const float **out, int64_t *out_n, ql_error *err)
{
    *out = NULL;
    *out_n = 0;
    if (!imp || !imp->lookup)
        return QL_OK;
    int64_t n = 0;
    const float *v = imp->lookup(imp->user, gt->name, &n);
    if (!v)
        return QL_OK;
    const int64_t ne0 = gt->ne[0], n_expert = gt->n_dims >= 3 ? gt->ne[2] : 1;
    if (n != ne0 && !(n_expert > 1 && n == ne0 * n_expert))
        return ql_error_set(err, QL_EFORMAT, "imatrix entry '%s' has %lld values, expected %lld",
                            gt->name, (long long)n, (long long)ne0);
    *out = v;
    *out_n = n;
    return QL_OK;
}

/* Quantizes a whole tensor into dst (its exact size in `type`, dst_size bytes):
 * blocks of rows go to f32, then through the tensor-level quantizer (quant.h),
 * each expert of a 3-D tensor with its own slice of a per-expert imatrix entry. */
static ql_status quantize_tensor(const ql_gguf_tensor *gt, int32_t type, const float *imat,
                                 int64_t imat_n, uint8_t *dst, size_t dst_size, ql_error *err)
{
    const int64_t ne0 = gt->ne[0];
    const int64_t rows = ql_gguf_tensor_nelements(gt) / ne0;
    const bool per_expert = imat != NULL && imat_n > ne0;
    const int64_t rows_per_part = per_expert ? gt->ne[1] : rows;
    const size_t rs = ql_row_size(type, ne0);
    const int64_t block = WRITE_BLOCK_VALUES / ne0 > 0 ? WRITE_BLOCK_VALUES / ne0 : 1;
    const int64_t buf_rows = block < rows_per_part ? block : rows_per_part;
    if (ql_type_prepare(gt->type, err) != QL_OK) /* IQ sources: their lattice tables */
        return ql_error_prefix(err, "tensor '%s': ", gt->name);
    float *x = malloc(sizeof(float) * (size_t)(buf_rows * ne0));
    if (!x)
        return ql_error_set(err, QL_ENOMEM, "fit: out of memory quantizing '%s'", gt->name);
    ql_status rc = QL_OK;
    const int n_threads = ql_threads_get();
    for (int64_t r0 = 0; r0 < rows && rc == QL_OK;) {
        const int64_t part = r0 / rows_per_part;
        const int64_t part_end = (part + 1) * rows_per_part;
        const int64_t nr = r0 + buf_rows < part_end ? buf_rows : part_end - r0;
#pragma omp parallel for schedule(static) num_threads(n_threads)
        for (int64_t r = 0; r < nr; r++)
            ql_dequant_row(gt->type, gt->data, r0 + r, ne0, x + r * ne0);
        const float *w = imat ? imat + (per_expert ? part * ne0 : 0) : NULL;
        rc = ql_quant_tensor(type, x, nr, ne0, w, dst + (size_t)r0 * rs, dst_size - (size_t)r0 * rs,
                             NULL, err);
        r0 += nr;
    }
    free(x);
    if (rc != QL_OK)
        return ql_error_prefix(err, "tensor '%s': ", gt->name);
    return QL_OK;
}

ql_status ql_fit_write(const ql_gguf *model, const ql_fit_plan *plan, const ql_fit_importance *imp,
                       const char *out_path, bool quiet, ql_error *err)
{
    if (plan->n_tensors != model->n_tensors)
        return ql_error_set(err, QL_EINVAL, "fit: the plan has %d tensors, %s has %lld",
                            plan->n_tensors, model->path, (long long)model->n_tensors);
    ql_gguf_writer *w = NULL;
    uint8_t *buf = NULL;
    ql_status rc = ql_gguf_writer_alloc(&w, err);
    if (rc != QL_OK)
        return rc;
    if ((rc = ql_gguf_writer_set_alignment(w, model->alignment, err)) != QL_OK ||
        (rc = ql_gguf_writer_copy_kvs(w, model, err)) != QL_OK)
        goto out;
    /* A merged output is one file: split keys would send llama.cpp looking for
     * siblings that do not exist. */
    ql_gguf_writer_remove_kv(w, "split.count");
    ql_gguf_writer_remove_kv(w, "split.no");
    ql_gguf_writer_remove_kv(w, "split.tensors.count");
    if ((rc = ql_gguf_writer_set_u32(w, "general.file_type", ql_fit_plan_file_type(plan), err)) !=
            QL_OK ||
        (rc = ql_gguf_writer_set_u32(w, "general.quantization_version", QL_GGML_QNT_VERSION,
                                     err)) != QL_OK ||
        (rc = ql_gguf_writer_set_str(w, "qlab.fit.imatrix",
                                     imp && imp->sha256 && *imp->sha256 ? imp->sha256 : "none",
                                     err)) != QL_OK)
        goto out;
    if (imp && imp->lookup && imp->file) {
        const ql_quant_imatrix_meta m = {imp->file, imp->dataset, imp->n_entries, imp->n_chunks};
        if ((rc = ql_quant_write_imatrix_keys(w, &m, err)) != QL_OK)
            goto out;
    }
    ql_gguf_value v = {.type = QL_GGUF_UINT64};
    v.v.u64 = plan->budget;
    if ((rc = ql_gguf_writer_set_kv(w, "qlab.fit.budget_bytes", &v, err)) != QL_OK)
        goto out;
    uint64_t max_bytes = 0;
    for (int64_t i = 0; i < model->n_tensors; i++) {
        const ql_gguf_tensor *gt = &model->tensors[i];
        const ql_fit_assignment *a = &plan->tensors[i];
        if (strcmp(a->name, gt->name) != 0) {
            rc = ql_error_set(err, QL_EINVAL, "fit: plan tensor %lld is '%s', the model's is '%s'",
                              (long long)i, a->name, gt->name);
            goto out;
        }
        const ql_type_traits *tr = ql_type_get(a->type);
        uint64_t nb =
            (uint64_t)(ql_gguf_tensor_nelements(gt) / gt->ne[0]) * ql_row_size(a->type, gt->ne[0]);
        if (!tr || nb != a->bytes || nb == 0) {
            rc = ql_error_set(err, QL_EINVAL,
                              "fit: tensor '%s': %s of %llu bytes does not fit "
                              "its shape",
                              gt->name, ql_type_name(a->type), (unsigned long long)a->bytes);
            goto out;
        }
        if (a->type != gt->type && (!tr->quantize || !gt->data)) {
            rc = ql_error_set(err, QL_EUNSUPPORTED, "fit: tensor '%s': qlab cannot produce %s",
                              gt->name, tr->name);
            goto out;
        }
        if ((rc = ql_gguf_writer_add_tensor(w, gt->name, gt->n_dims, gt->ne, a->type, nb, err)) !=
            QL_OK)
            goto out;
        if (nb > max_bytes)
            max_bytes = nb;
    }
    if ((rc = ql_gguf_writer_begin(w, out_path, err)) != QL_OK)
        goto out;
    buf = malloc(max_bytes > 0 ? (size_t)max_bytes : 1);
    if (!buf) {
        rc = ql_error_set(err, QL_ENOMEM, "fit: out of memory (%llu bytes for one tensor)",
                          (unsigned long long)max_bytes);
        goto out;
    }
    ql_progress prog;
    ql_progress_begin(&prog, "fit: writing", "tensor", model->n_tensors, quiet);
    int64_t done = 0;
    for (int64_t i = 0; i < model->n_tensors; i++) {
        const ql_gguf_tensor *gt = &model->tensors[i];
        const ql_fit_assignment *a = &plan->tensors[i];
        const void *data = buf;
        if (a->type == gt->type) {
            data = gt->data; /* same type: the bytes as they are (no second rounding) */
        } else {
            const float *imat = NULL;
            int64_t imat_n = 0;
            if (a->assigned && (rc = quant_importance(gt, imp, &imat, &imat_n, err)) != QL_OK)
                goto out_prog;
            if ((rc = quantize_tensor(gt, a->type, imat, imat_n, buf, (size_t)a->bytes, err)) !=
                QL_OK)
                goto out_prog;
        }
        if ((rc = ql_gguf_writer_write_tensor(w, data, a->bytes, err)) != QL_OK)
            goto out_prog;
        ql_progress_update(&prog, ++done, gt->name);
    }
    rc = ql_gguf_writer_finish(w, err);
out_prog:
    ql_progress_end(&prog, done, NULL);
out:
    free(buf);
    ql_gguf_writer_free(w);
    return rc;
}

ql_status ql_fit_plan_model(const ql_gguf *model, const char *model_sha256,
                            const ql_fit_importance *imp, const ql_fit_budget *budget,
                            const ql_fit_options *opt, ql_fit_table **table_out,
                            ql_fit_plan **plan_out, ql_error *err)
{
    *table_out = NULL;
    *plan_out = NULL;
    ql_fit_table *t = NULL;
    ql_status rc = ql_fit_table_compute(model, model_sha256, imp, opt, &t, err);
    if (rc != QL_OK)
        return rc;
    rc = ql_fit_solve(t, ql_fit_budget_resolve(budget, t), NULL, plan_out, err);
    if (rc != QL_OK) {
        ql_fit_table_free(t);
        return rc;
    }
    *table_out = t;
    return QL_OK;
}
