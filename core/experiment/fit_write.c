/* qlab fit: writing the mixed-precision GGUF of a plan, and the one-call planner
 * (see fit.h). */
#include "experiment/fit.h"

#include <stdlib.h>
#include <string.h>

#include "base/progress.h"
#include "base/util.h"
#include "model/quant.h"
#include "model/quant_model.h"

/* The keys: the model's (split keys dropped: the output is one file), the file type
 * and quantization version, the imatrix provenance llama-quantize writes, and the
 * fit's own. */
static ql_status write_keys(ql_gguf_writer *w, const ql_gguf *model, const ql_fit_plan *plan,
                            const ql_fit_importance *imp, const char *quantizer, ql_error *err)
{
    ql_status rc;
    if ((rc = ql_gguf_writer_set_alignment(w, model->alignment, err)) != QL_OK ||
        (rc = ql_gguf_writer_copy_kvs(w, model, err)) != QL_OK)
        return rc;
    /* Split keys would send llama.cpp looking for siblings that do not exist. */
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
        return rc;
    if (imp && imp->lookup && imp->file) {
        const ql_quant_imatrix_meta m = {imp->file, imp->dataset, imp->n_entries, imp->n_chunks};
        if ((rc = ql_quant_write_imatrix_keys(w, &m, err)) != QL_OK)
            return rc;
    }
    if (quantizer && (rc = ql_gguf_writer_set_str(w, "quantize.quantizer", quantizer, err)))
        return rc;
    ql_gguf_value v = {.type = QL_GGUF_UINT64};
    v.v.u64 = plan->budget;
    return ql_gguf_writer_set_kv(w, "qlab.fit.budget_bytes", &v, err);
}

/* The tensor infos, each checked against the plan (name, exact bytes, a type qlab
 * can produce); *max_bytes receives the largest tensor. */
static ql_status add_tensors(ql_gguf_writer *w, const ql_gguf *model, const ql_fit_plan *plan,
                             uint64_t *max_bytes, ql_error *err)
{
    *max_bytes = 0;
    for (int64_t i = 0; i < model->n_tensors; i++) {
        const ql_gguf_tensor *gt = &model->tensors[i];
        const ql_fit_assignment *a = &plan->tensors[i];
        if (strcmp(a->name, gt->name) != 0)
            return ql_error_set(err, QL_EINVAL,
                                "fit: plan tensor %lld is '%s', the model's is '%s'", (long long)i,
                                a->name, gt->name);
        const ql_type_traits *tr = ql_type_get(a->type);
        const uint64_t nb =
            (uint64_t)(ql_gguf_tensor_nelements(gt) / gt->ne[0]) * ql_row_size(a->type, gt->ne[0]);
        if (!tr || nb != a->bytes || nb == 0)
            return ql_error_set(err, QL_EINVAL,
                                "fit: tensor '%s': %s of %llu bytes does not fit its shape",
                                gt->name, ql_type_name(a->type), (unsigned long long)a->bytes);
        if (a->type != gt->type && (!tr->quantize || !gt->data))
            return ql_error_set(err, QL_EUNSUPPORTED, "fit: tensor '%s': qlab cannot produce %s",
                                gt->name, tr->name);
        ql_status rc = ql_gguf_writer_add_tensor(w, gt->name, gt->n_dims, gt->ne, a->type, nb, err);
        if (rc != QL_OK)
            return rc;
        if (nb > *max_bytes)
            *max_bytes = nb;
    }
    return QL_OK;
}

/* Quantizes a whole tensor into buf (a->bytes) through the per-tensor entry point,
 * with the imatrix entry the error table measured it with (assigned tensors). */
static ql_status quantize_tensor(const ql_gguf_tensor *gt, const ql_fit_assignment *a,
                                 const ql_fit_importance *imp, uint8_t *buf, ql_error *err)
{
    ql_quant_src s;
    ql_quant_src_from_gguf(&s, gt);
    int64_t imat_n = 0;
    ql_status rc = a->assigned ? ql_fit_quant_importance(imp, gt, &s.imatrix, &imat_n, err) : QL_OK;
    s.imatrix_per_mat = imat_n > gt->ne[0];
    if (rc == QL_OK)
        rc = ql_quant_tensor_rows(&s, a->type, 0, s.rows_per_mat * s.n_mats, buf, (size_t)a->bytes,
                                  err);
    if (rc != QL_OK)
        return ql_error_prefix(err, "tensor '%s': ", gt->name);
    return QL_OK;
}

/* The tensors' bytes in model order, one at a time: a tensor that keeps its type
 * as it is (no second rounding), the others quantized into buf. */
static ql_status write_tensors(ql_gguf_writer *w, const ql_gguf *model, const ql_fit_plan *plan,
                               const ql_fit_importance *imp, const ql_fit_write_extra *extra,
                               uint8_t *buf, bool quiet, ql_error *err)
{
    ql_status rc = QL_OK;
    ql_progress prog;
    ql_progress_begin(&prog, "fit: writing", "tensor", model->n_tensors, quiet);
    int64_t done = 0;
    for (int64_t i = 0; i < model->n_tensors && rc == QL_OK; i++) {
        const ql_gguf_tensor *gt = &model->tensors[i];
        const ql_fit_assignment *a = &plan->tensors[i];
        const void *data = gt->data;
        const void *pre = a->type != gt->type && extra && extra->prequant
                              ? extra->prequant(extra->prequant_ctx, gt->name, a->type, a->bytes)
                              : NULL;
        if (pre) {
            data = pre;
        } else if (a->type != gt->type) {
            rc = quantize_tensor(gt, a, imp, buf, err);
            data = buf;
        }
        if (rc == QL_OK)
            rc = ql_gguf_writer_write_tensor(w, data, a->bytes, err);
        if (rc == QL_OK)
            ql_progress_update(&prog, ++done, gt->name);
    }
    ql_progress_end(&prog, done, NULL);
    return rc;
}

ql_status ql_fit_write(const ql_gguf *model, const ql_fit_plan *plan, const ql_fit_importance *imp,
                       const ql_fit_write_extra *extra, const char *out_path, bool quiet,
                       ql_error *err)
{
    if (plan->n_tensors != model->n_tensors)
        return ql_error_set(err, QL_EINVAL, "fit: the plan has %d tensors, %s has %lld",
                            plan->n_tensors, model->path, (long long)model->n_tensors);
    ql_gguf_writer *w = NULL;
    uint8_t *buf = NULL;
    uint64_t max_bytes = 0;
    ql_status rc = ql_gguf_writer_alloc(&w, err);
    if (rc != QL_OK)
        return rc;
    if ((rc = write_keys(w, model, plan, imp, extra ? extra->quantizer : NULL, err)) != QL_OK ||
        (rc = add_tensors(w, model, plan, &max_bytes, err)) != QL_OK ||
        (rc = ql_gguf_writer_begin(w, out_path, err)) != QL_OK)
        goto out;
    if (!(buf = malloc(max_bytes > 0 ? (size_t)max_bytes : 1))) {
        rc = ql_error_set(err, QL_ENOMEM, "fit: out of memory (%llu bytes for one tensor)",
                          (unsigned long long)max_bytes);
        goto out;
    }
    if ((rc = write_tensors(w, model, plan, imp, extra, buf, quiet, err)) == QL_OK)
        rc = ql_gguf_writer_finish(w, err);
out:
    free(buf);
    ql_gguf_writer_free(w);
    return rc;
}

ql_status ql_fit_quant_plan(const ql_gguf *model, const ql_fit_plan *fp, ql_quant_plan **out,
                            ql_error *err)
{
    /* Every tensor kept as the file has it, then each assigned one in its fitted type. */
    const ql_quant_config cfg = {.weight_type = QL_TYPE_F32,
                                 .head_type = QL_TYPE_INVALID,
                                 .embd_type = QL_TYPE_INVALID};
    ql_status st = ql_quant_plan_build(model, &cfg, out, err);
    if (st)
        return st;
    ql_quant_plan *plan = *out;
    for (int64_t i = 0; i < plan->n; i++) {
        ql_quant_plan_entry *e = &plan->entries[i];
        const int32_t t = ql_fit_plan_type(fp, e->name);
        if (t == QL_TYPE_INVALID)
            continue;
        e->requested = e->used = t;
        e->fallback = QL_FALLBACK_NONE;
        e->reason[0] = '\0';
        e->bytes = ql_row_size(t, e->n_per_row) * (uint64_t)e->nrows;
    }
    ql_quant_plan_totals(plan);
    return QL_OK;
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
    if (opt && opt->errors) {
        if ((rc = opt->errors(opt->errors_ctx, t, err))) {
            ql_fit_table_free(t);
            return rc;
        }
        ql_fit_table_sort_choices(t);
    }
    rc = ql_fit_solve(t, ql_fit_budget_resolve(budget, t), NULL, plan_out, err);
    if (rc != QL_OK) {
        ql_fit_table_free(t);
        return rc;
    }
    *table_out = t;
    return QL_OK;
}
