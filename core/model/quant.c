/* Tensor-level quantization, the type policy and weight errors. See quant.h. */
#include "model/quant.h"

#include <math.h>
#include <stdio.h>
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
#pragma omp parallel for schedule(dynamic, 1) num_threads(ql_threads_get()) if (n_chunks > 1)
    for (int64_t c = 0; c < n_chunks; c++) {
        const int64_t r0 = c * chunk;
        const int64_t nr = nrows - r0 < chunk ? nrows - r0 : chunk;
        fn(src + r0 * n_per_row, (char *)dst + (size_t)r0 * row_size, nr, n_per_row, imatrix);
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
/* Type policy                                                                */
/* ========================================================================= */

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* llama-quantize's list of tensors it never quantizes (besides 1-D ones). */
static bool never_quantized(const char *name)
{
    static const char *const contains[] = {
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ssm_conv1d.weight",
        "time_mix_first.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
    };
    if (!ends_with(name, "weight"))
        return true;
    for (size_t i = 0; i < sizeof contains / sizeof contains[0]; i++)
        if (strstr(name, contains[i]))
            return true;
    return strcmp(name, "position_embd.weight") == 0 || strcmp(name, "token_types.weight") == 0;
}

/* llama.cpp's fallback for a type whose block does not fit the row (traits column). */
static int32_t neighbour_type(int32_t type)
{
    return ql_type_get(type)->row_fallback;
}

bool ql_quant_is_float_type(int32_t t)
{
    return t == QL_TYPE_F32 || t == QL_TYPE_F16 || t == QL_TYPE_BF16;
}

/* Values a planned tensor may have: at most 4 bytes per value in any type it can
 * take (F32; INT8_ROW is 1 + 2 / n_per_row), so its row and byte counts fit in 64
 * bits. */
#define MAX_TENSOR_VALUES (INT64_MAX / 4)

static uint64_t tensor_bytes(int32_t type, int64_t n_per_row, int64_t nrows)
{
    return (uint64_t)ql_row_size(type, n_per_row) * (uint64_t)nrows;
}

ql_status ql_quant_plan_tensor(const ql_quant_config *cfg, const char *name, uint32_t n_dims,
                               const int64_t *ne, int32_t src_type, bool model_has_output,
                               ql_quant_plan_entry *out, ql_error *err)
{
    memset(out, 0, sizeof *out);
    ql_strlcpy(out->name, name, sizeof out->name);
    if (n_dims < 1 || n_dims > QL_GGUF_MAX_DIMS)
        return ql_error_set(err, QL_EINVAL, "tensor '%s': %u dimensions (expected 1..%d)", name,
                            n_dims, QL_GGUF_MAX_DIMS);
    out->n_dims = n_dims;
    out->nrows = 1;
    for (int d = 0; d < QL_GGUF_MAX_DIMS; d++) {
        out->ne[d] = d < (int)n_dims ? ne[d] : 1;
        if (out->ne[d] <= 0)
            return ql_error_set(err, QL_EINVAL, "tensor '%s': dimension %d is %lld", name, d,
                                (long long)out->ne[d]);
        if (d > 0) {
            if (out->nrows > INT64_MAX / out->ne[d])
                return ql_error_set(err, QL_EINVAL, "tensor '%s': too many elements", name);
            out->nrows *= out->ne[d];
        }
    }
    out->n_per_row = out->ne[0];
    if (out->nrows > MAX_TENSOR_VALUES / out->n_per_row)
        return ql_error_set(err, QL_EINVAL,
                            "tensor '%s': %lld x %lld values, more than the %lld qlab can size "
                            "in 64 bits",
                            name, (long long)out->n_per_row, (long long)out->nrows,
                            (long long)MAX_TENSOR_VALUES);
    const int64_t n_values = out->n_per_row * out->nrows;

    const int32_t types[3] = {cfg->weight_type, cfg->head_type, cfg->embd_type};
    const char *what[3] = {"weight", "head", "embedding"};
    for (int i = 0; i < 3; i++) {
        if (i > 0 && types[i] == QL_TYPE_INVALID)
            continue;
        const ql_type_traits *t = ql_type_get(types[i]);
        if (!ql_type_is_weight(t))
            return ql_error_set(err, QL_EINVAL, "%s type %s is %s", what[i], ql_type_name(types[i]),
                                t ? t->not_weight : "not a known type");
    }

    /* Role and requested type. */
    bool is_head = strcmp(name, "output.weight") == 0;
    bool is_embd = strcmp(name, "token_embd.weight") == 0;
    if (n_dims == 1) {
        out->role = QL_ROLE_VECTOR;
        out->requested = QL_TYPE_F32;
    } else if (never_quantized(name)) {
        out->role = QL_ROLE_KEEP;
        out->requested = ql_quant_is_float_type(src_type) ? src_type : QL_TYPE_F32;
    } else if (is_head) {
        out->role = QL_ROLE_HEAD;
        out->requested = cfg->head_type != QL_TYPE_INVALID ? cfg->head_type : cfg->weight_type;
    } else if (is_embd) {
        out->role = QL_ROLE_EMBD;
        if (cfg->embd_type != QL_TYPE_INVALID)
            out->requested = cfg->embd_type;
        else if (!model_has_output && cfg->head_type != QL_TYPE_INVALID)
            out->requested = cfg->head_type;
        else
            out->requested = cfg->weight_type;
    } else {
        out->role = QL_ROLE_WEIGHT;
        out->requested = cfg->weight_type;
    }

    /* Fallbacks. */
    int32_t used = out->requested;
    const ql_type_traits *tr = ql_type_get(used);
    if (used == QL_TYPE_INT8_ROW && n_values <= QL_INT8ROW_KEEP_MAX) {
        used = QL_TYPE_F16;
        out->fallback = QL_FALLBACK_SMALL_TENSOR;
        snprintf(out->reason, sizeof out->reason,
                 "INT8_ROW keeps tensors of <= %d values as F16 (%lld values)", QL_INT8ROW_KEEP_MAX,
                 (long long)n_values);
    } else if (used == QL_TYPE_INT8_ROW && !ql_int8row_row_ok(out->n_per_row)) {
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "tensor '%s': INT8_ROW rows of %lld values are not supported", name,
                            (long long)out->n_per_row);
    } else if (tr->block_size > 1 && out->n_per_row % tr->block_size != 0) {
        int32_t next = neighbour_type(used);
        const ql_type_traits *nt = ql_type_get(next);
        int n = snprintf(out->reason, sizeof out->reason,
                         "row length %lld is not a multiple of %lld (%s): %s",
                         (long long)out->n_per_row, (long long)tr->block_size, tr->name, nt->name);
        if (next != QL_TYPE_F16 && out->n_per_row % nt->block_size != 0) {
            snprintf(out->reason + n, sizeof out->reason - (size_t)n,
                     ", not a multiple of %lld either: F16", (long long)nt->block_size);
            next = QL_TYPE_F16;
        }
        used = next;
        out->fallback = QL_FALLBACK_ROW_LENGTH;
    }
    out->used = used;
    out->bytes = tensor_bytes(used, out->n_per_row, out->nrows);
    return QL_OK;
}

bool ql_quant_plan_no_importance(ql_quant_plan_entry *e)
{
    const ql_type_traits *tr = ql_type_get(e->used);
    if (!tr || !tr->requires_imatrix)
        return false;
    int32_t used = QL_TYPE_Q2_K;
    int n = snprintf(e->reason, sizeof e->reason,
                     "%s needs importance weights and the tensor has none: Q2_K", tr->name);
    if (e->n_per_row % ql_type_get(used)->block_size != 0) {
        used = neighbour_type(used);
        n += snprintf(e->reason + n, sizeof e->reason - (size_t)n, ", row length %lld: %s",
                      (long long)e->n_per_row, ql_type_name(used));
        if (e->n_per_row % ql_type_get(used)->block_size != 0) {
            used = QL_TYPE_F16;
            snprintf(e->reason + n, sizeof e->reason - (size_t)n, ", then F16");
        }
    }
    e->used = used;
    e->fallback = QL_FALLBACK_NO_IMATRIX;
    e->bytes = tensor_bytes(used, e->n_per_row, e->nrows);
    return true;
}

int64_t ql_quant_plan_importance_fallbacks(ql_quant_plan *p, ql_quant_importance_fn has_importance,
                                           const void *ctx)
{
    int64_t n_changed = 0;
    for (int64_t i = 0; i < p->n; i++) {
        ql_quant_plan_entry *e = &p->entries[i];
        const ql_type_traits *tr = ql_type_get(e->used);
        if (tr && tr->requires_imatrix && !has_importance(ctx, i, e))
            n_changed += ql_quant_plan_no_importance(e);
    }
    if (n_changed > 0)
        ql_quant_plan_totals(p);
    return n_changed;
}

void ql_quant_plan_totals(ql_quant_plan *p)
{
    p->bytes = p->body_bytes = 0;
    p->params = p->body_params = 0;
    p->n_fallback = 0;
    for (int64_t i = 0; i < p->n; i++) {
        const ql_quant_plan_entry *e = &p->entries[i];
        p->bytes += e->bytes;
        p->params += e->n_per_row * e->nrows;
        if (e->fallback != QL_FALLBACK_NONE)
            p->n_fallback++;
        if (e->role != QL_ROLE_HEAD && e->role != QL_ROLE_EMBD) {
            p->body_bytes += e->bytes;
            p->body_params += e->n_per_row * e->nrows;
        }
    }
}

ql_status ql_quant_plan_build(const ql_gguf *g, const ql_quant_config *cfg, ql_quant_plan **out,
                              ql_error *err)
{
    *out = NULL;
    ql_quant_plan *p = calloc(1, sizeof *p);
    if (!p)
        return ql_error_set(err, QL_ENOMEM, "out of memory for a quantization plan");
    p->entries = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *p->entries);
    if (!p->entries) {
        free(p);
        return ql_error_set(err, QL_ENOMEM, "out of memory for a quantization plan");
    }
    const bool has_output = ql_gguf_find_tensor(g, "output.weight") != NULL;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        ql_quant_plan_entry *e = &p->entries[i];
        ql_status st =
            ql_quant_plan_tensor(cfg, t->name, t->n_dims, t->ne, t->type, has_output, e, err);
        if (st) {
            ql_error_prefix(err, "%s: ", g->path);
            ql_quant_plan_free(p);
            return st;
        }
        p->n++;
    }
    ql_quant_plan_totals(p);
    *out = p;
    return QL_OK;
}

void ql_quant_plan_free(ql_quant_plan *p)
{
    if (!p)
        return;
    free(p->entries);
    free(p);
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
