/* Quantizing a GGUF model file. See quant_model.h. */
#include "model/quant_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/data.h"
#include "base/progress.h"
#include "base/util.h"
#include "formats/types.h"
#include "model/gguf.h"

/* ---------------------------------------------------------------------------
 * One tensor */

/* Values decoded at a time when rows come from a GGUF tensor (16 MB of f32): bounds
 * the memory besides the caller's output. */
#define DECODE_BLOCK_VALUES ((int64_t)1 << 22)

void ql_quant_src_from_gguf(ql_quant_src *s, const ql_gguf_tensor *gt)
{
    ql_quant_src_from_f32(s, gt->ne, NULL);
    s->gt = gt;
}

void ql_quant_src_from_f32(ql_quant_src *s, const int64_t ne[QL_GGUF_MAX_DIMS], const float *f32)
{
    memset(s, 0, sizeof *s);
    s->n_per_row = ne[0];
    s->rows_per_mat = ne[1];
    s->n_mats = ne[2] * ne[3];
    s->rows = f32;
    s->rows_n = f32 ? s->rows_per_mat * s->n_mats : 0;
}

static bool in_rows(const ql_quant_src *s, int64_t r0, int64_t n)
{
    return s->rows && r0 >= s->rows_first && r0 + n <= s->rows_first + s->rows_n;
}

/* Rows [r0, r0 + n) of s as f32: a pointer into s->rows when they are all there,
 * else gathered into *buf (grown to fit) from s->rows and the decoded tensor. */
static ql_status source_rows(const ql_quant_src *s, int64_t r0, int64_t n, float **buf, size_t *cap,
                             const float **out, ql_error *err)
{
    const int64_t npr = s->n_per_row;
    if (in_rows(s, r0, n)) {
        *out = s->rows + (r0 - s->rows_first) * npr;
        return QL_OK;
    }
    if (!s->gt)
        return ql_error_set(err, QL_EINVAL,
                            "quantize: rows %lld..%lld are not among the source rows given and "
                            "there is no tensor to decode them from",
                            (long long)r0, (long long)(r0 + n - 1));
    if (!ql_grow((void **)buf, cap, (size_t)(n * npr), sizeof(float)))
        return ql_error_set(err, QL_ENOMEM, "quantize '%s': out of memory for %lld rows",
                            s->gt->name, (long long)n);
    float *b = *buf;
#pragma omp parallel for schedule(static) num_threads(ql_threads_get()) if (n > 1)
    for (int64_t k = 0; k < n; k++) {
        const int64_t row = r0 + k;
        if (in_rows(s, row, 1))
            memcpy(b + k * npr, s->rows + (row - s->rows_first) * npr, sizeof(float) * (size_t)npr);
        else
            ql_dequant_row(s->gt->type, s->gt->data, row, npr, b + k * npr);
    }
    *out = b;
    return QL_OK;
}

/* The checks before any row: the type (those of ql_quant_tensor, on no rows), the
 * range, the output size and a source that decodes. */
static ql_status check_rows_request(const ql_quant_src *s, int32_t type, int64_t row0,
                                    int64_t nrows, size_t dst_size, ql_error *err)
{
    ql_status st = ql_quant_tensor(type, NULL, 0, s->n_per_row, s->imatrix, NULL, 0, NULL, err);
    if (st)
        return st;
    const int64_t total = s->rows_per_mat * s->n_mats;
    if (row0 < 0 || nrows < 0 || row0 > total - nrows)
        return ql_error_set(err, QL_EINVAL, "quantize: rows %lld..%lld are outside the %lld rows",
                            (long long)row0, (long long)(row0 + nrows - 1), (long long)total);
    const size_t rs = ql_row_size(type, s->n_per_row);
    if (nrows > 0 && (size_t)nrows > dst_size / rs)
        return ql_error_set(err, QL_EINVAL,
                            "quantize %s: buffer of %zu bytes is smaller than %lld rows of %zu "
                            "bytes",
                            ql_type_name(type), dst_size, (long long)nrows, rs);
    if (s->gt) {
        const ql_type_traits *src = ql_type_get(s->gt->type);
        if (!src || !src->dequantize || !s->gt->data)
            return ql_error_set(err, QL_EUNSUPPORTED,
                                "tensor '%s': qlab cannot read its source type %s", s->gt->name,
                                ql_type_name(s->gt->type));
        if ((st = ql_type_prepare(s->gt->type, err)))
            return ql_error_prefix(err, "tensor '%s': ", s->gt->name);
    }
    return QL_OK;
}

ql_status ql_quant_tensor_rows(const ql_quant_src *s, int32_t type, int64_t row0, int64_t nrows,
                               void *dst, size_t dst_size, ql_error *err)
{
    ql_status st = check_rows_request(s, type, row0, nrows, dst_size, err);
    if (st)
        return st;
    const int64_t npr = s->n_per_row, chunk = ql_quant_chunk_rows(npr);
    const size_t rs = ql_row_size(type, npr);
    const bool row_state = ql_type_get(type)->row_state;
    /* Decoded blocks are whole chunks, so that they start where chunks start. */
    const int64_t block_chunks = DECODE_BLOCK_VALUES / npr / chunk;
    const int64_t block = (block_chunks > 0 ? block_chunks : 1) * chunk;
    float *buf = NULL;
    size_t cap = 0;
    uint8_t *lead_q = NULL;
    for (int64_t r = row0; r < row0 + nrows && !st;) {
        const int64_t mat = r / s->rows_per_mat, mat_first = mat * s->rows_per_mat;
        const int64_t stop =
            row0 + nrows < mat_first + s->rows_per_mat ? row0 + nrows : mat_first + s->rows_per_mat;
        const float *imat = s->imatrix ? s->imatrix + (s->imatrix_per_mat ? mat * npr : 0) : NULL;
        uint8_t *out = (uint8_t *)dst + (size_t)(r - row0) * rs;
        const size_t out_size = dst_size - (size_t)(r - row0) * rs;
        const int64_t lead = row_state ? (r - mat_first) % chunk : 0;
        const float *x;
        if (lead > 0) {
            /* Inside a chunk: quantize it from its first row, keep the rows asked for. */
            const int64_t c0 = r - lead, c1 = c0 + chunk < stop ? c0 + chunk : stop;
            if (!lead_q && !(lead_q = malloc(rs * (size_t)chunk)))
                st = ql_error_set(err, QL_ENOMEM, "quantize: out of memory for a chunk");
            if (!st)
                st = source_rows(s, c0, c1 - c0, &buf, &cap, &x, err);
            if (!st)
                st = ql_quant_tensor(type, x, c1 - c0, npr, imat, lead_q, rs * (size_t)chunk, NULL,
                                     err);
            if (!st)
                memcpy(out, lead_q + (size_t)lead * rs, (size_t)(c1 - r) * rs);
            r = c1;
            continue;
        }
        const int64_t n = in_rows(s, r, stop - r) || stop - r < block ? stop - r : block;
        st = source_rows(s, r, n, &buf, &cap, &x, err);
        if (!st && s->gptq)
            st = ql_gptq_quantize_rows(s->gptq[mat], type, x, out, n, imat, err);
        else if (!st)
            st = ql_quant_tensor(type, x, n, npr, imat, out, out_size, NULL, err);
        r += n;
    }
    free(buf);
    free(lead_q);
    return st;
}

/* ---------------------------------------------------------------------------
 * A whole model */

bool ql_quant_llama_ftype(int32_t type, uint32_t *ftype)
{
    const ql_type_traits *t = ql_type_get(type);
    if (!t || t->ftype < 0)
        return false;
    *ftype = (uint32_t)t->ftype;
    return true;
}

void ql_quant_model_report_free(ql_quant_model_report *r)
{
    if (!r)
        return;
    ql_quant_plan_free(r->plan);
    free(r->errors);
    free(r->has_imatrix);
    free(r);
}

ql_status ql_quant_model_check_type(int32_t type, const char *what, ql_error *err)
{
    if (type == QL_TYPE_INVALID)
        return QL_OK;
    const ql_type_traits *t = ql_type_get(type);
    if (!ql_type_is_weight(t))
        return ql_error_set(err, QL_EINVAL, "%s type %s is not a weight format: %s", what,
                            ql_type_name(type), t ? t->not_weight : "an unknown type id");
    if (!ql_type_is_gguf_weight(t))
        return ql_error_set(err, QL_EINVAL, "%s type %s %s", what, t->name, t->not_in_gguf);
    return QL_OK;
}

/* ctx of has_importance: the source model and the quantization options. */
typedef struct {
    const ql_gguf *g;
    const ql_quant_model_opts *opts;
} importance_ctx;

/* A tensor written in its source type needs no importance weights; the others have
 * them when the imatrix has an entry for the tensor. */
static bool has_importance(const void *ctx, int64_t i, const ql_quant_plan_entry *e)
{
    const importance_ctx *c = ctx;
    return c->g->tensors[i].type == e->used ||
           (c->opts->imatrix &&
            c->opts->imatrix(c->opts->imatrix_ctx, e->name, e->n_per_row, e->ne[2] * e->ne[3]));
}

/* Validates every tensor of the plan against its source before anything is written. */
static ql_status check_plan(const ql_gguf *g, ql_quant_plan *p, const ql_quant_model_opts *opts,
                            int64_t *requantized, ql_error *err)
{
    int64_t n_requantized = 0;
    /* A tensor without importance weights that its type needs: in a pure plan with
     * an imatrix that has no entry for it (token_embd) it takes the type
     * llama-quantize's very-low-bit mixes give such tensors; a mix refuses it, as
     * llama-quantize does. */
    if (opts->imatrix || p->mix) {
        const importance_ctx c = {g, opts};
        ql_status st = ql_quant_plan_check_importance(p, has_importance, &c, NULL, err);
        if (st)
            return ql_error_prefix(err, "%s: ", g->path);
    }
    for (int64_t i = 0; i < p->n; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        const ql_quant_plan_entry *e = &p->entries[i];
        if (t->type == e->used)
            continue;
        if (!ql_quant_is_float_type(t->type)) {
            const ql_type_traits *src = ql_type_get(t->type);
            if (!opts->allow_requantize)
                return ql_error_set(err, QL_EUNSUPPORTED,
                                    "%s: tensor '%s' is %s: requantizing from type %s is "
                                    "disabled, as in llama-quantize (--allow-requantize "
                                    "quantizes it again from its dequantized values)",
                                    g->path, t->name, ql_type_name(t->type), ql_type_name(t->type));
            if (!src || !src->dequantize || !t->data)
                return ql_error_set(err, QL_EUNSUPPORTED,
                                    "%s: tensor '%s': qlab cannot read its type %s", g->path,
                                    t->name, ql_type_name(t->type));
            ql_status st = ql_type_prepare(t->type, err);
            if (st)
                return ql_error_prefix(err, "%s: tensor '%s': ", g->path, t->name);
            n_requantized++;
        }
        const ql_type_traits *tr = ql_type_get(e->used);
        if (!tr->quantize)
            return ql_error_set(err, QL_EUNSUPPORTED,
                                "%s: tensor '%s': qlab cannot quantize to %s yet", g->path, t->name,
                                tr->name);
        if (tr->requires_imatrix && !opts->imatrix)
            return ql_error_set(err, QL_EINVAL,
                                "%s: tensor '%s': %s needs an importance matrix (ggml refuses to "
                                "quantize it without one)",
                                g->path, t->name, tr->name);
        ql_status st = ql_type_prepare(e->used, err);
        if (st)
            return ql_error_prefix(err, "%s: tensor '%s': ", g->path, t->name);
    }
    *requantized = n_requantized;
    return QL_OK;
}

ql_status ql_quant_write_imatrix_keys(ql_gguf_writer *w, const ql_quant_imatrix_meta *m,
                                      ql_error *err)
{
    if (!m)
        return QL_OK;
    if (m->n_entries > INT32_MAX || m->n_chunks > INT32_MAX)
        return ql_error_set(err, QL_EINVAL, "imatrix of %lld entries, %lld chunks: beyond i32",
                            (long long)m->n_entries, (long long)m->n_chunks);
    ql_status st = QL_OK;
    if (m->file)
        st = ql_gguf_writer_set_str(w, "quantize.imatrix.file", m->file, err);
    if (!st && m->dataset)
        st = ql_gguf_writer_set_str(w, "quantize.imatrix.dataset", m->dataset, err);
    if (!st)
        st =
            ql_gguf_writer_set_i32(w, "quantize.imatrix.entries_count", (int32_t)m->n_entries, err);
    if (!st && m->n_chunks > 0)
        st = ql_gguf_writer_set_i32(w, "quantize.imatrix.chunks_count", (int32_t)m->n_chunks, err);
    return st;
}

/* Quantizes one tensor into q (and measures its error when e_out is set). */
static ql_status quantize_one(const ql_gguf_tensor *t, const ql_quant_plan_entry *e,
                              const ql_quant_model_opts *opts, float *f32, void *q, size_t q_cap,
                              float *deq, ql_weight_error *e_out, bool *used_imatrix, ql_error *err)
{
    const int64_t npr = e->n_per_row, nrows = e->nrows;
    const int64_t rows_per_mat = e->ne[1], n_mats = e->ne[2] * e->ne[3];
    const float *src = t->data;
    ql_status st;
    if (t->type != QL_TYPE_F32) {
        st = ql_dequant_tensor(t->type, t->data, t->nbytes, nrows, npr, f32, err);
        if (st)
            return st;
        src = f32;
    }
    /* ggml's quantizers assume finite input (some assert); llama.cpp's loader rejects
     * such weights too, so report the first one. */
    for (int64_t i = 0; i < nrows * npr; i++)
        if (!isfinite(src[i]))
            return ql_error_set(err, QL_EFORMAT, "weight at row %lld, column %lld is %s",
                                (long long)(i / npr), (long long)(i % npr),
                                isnan(src[i]) ? "NaN" : "infinite");
    const float *imat = NULL;
    if (opts->imatrix)
        imat = opts->imatrix(opts->imatrix_ctx, t->name, npr, n_mats);
    *used_imatrix = imat != NULL;
    const float *stats_w = imat;
    if (opts->stats_imatrix)
        stats_w = opts->stats_imatrix(opts->stats_imatrix_ctx, t->name, npr, n_mats);
    const void *pre =
        opts->prequant ? opts->prequant(opts->prequant_ctx, t->name, e->used, e->bytes) : NULL;
    if (pre) {
        memcpy(q, pre, e->bytes);
    } else {
        ql_quant_src qs;
        ql_quant_src_from_f32(&qs, e->ne, src);
        qs.imatrix = imat;
        qs.imatrix_per_mat = true;
        if ((st = ql_quant_tensor_rows(&qs, e->used, 0, nrows, q, q_cap, err)))
            return st;
    }
    if (!e_out)
        return QL_OK;
    st = ql_dequant_tensor(e->used, q, e->bytes, nrows, npr, deq, err);
    if (st)
        return st;
    for (int64_t m = 0; m < n_mats; m++) {
        st = ql_weight_error_add(e_out, src + m * rows_per_mat * npr, deq + m * rows_per_mat * npr,
                                 rows_per_mat, npr, stats_w ? stats_w + m * npr : NULL, err);
        if (st)
            return st;
    }
    return QL_OK;
}

/* Error statistics of a tensor written in its source type (w^ = w): zero error, but
 * its values (and their importance, when it has some) count in the totals. */
static ql_status copy_stats(const ql_gguf_tensor *t, const ql_quant_plan_entry *e,
                            const ql_quant_model_opts *opts, float *f32, ql_weight_error *e_out,
                            ql_error *err)
{
    const float *src = t->data;
    if (t->type != QL_TYPE_F32) {
        ql_status st =
            ql_dequant_tensor(t->type, t->data, t->nbytes, e->nrows, e->n_per_row, f32, err);
        if (st)
            return st;
        src = f32;
    }
    const int64_t rows_per_mat = e->ne[1], n_mats = e->ne[2] * e->ne[3];
    ql_imatrix_lookup_fn fn = opts->stats_imatrix ? opts->stats_imatrix : opts->imatrix;
    void *ctx = opts->stats_imatrix ? opts->stats_imatrix_ctx : opts->imatrix_ctx;
    const float *w = fn && e->n_dims >= 2 ? fn(ctx, t->name, e->n_per_row, n_mats) : NULL;
    if (!w)
        return ql_weight_error_add(e_out, src, src, e->nrows, e->n_per_row, NULL, err);
    for (int64_t m = 0; m < n_mats; m++) {
        const float *p = src + m * rows_per_mat * e->n_per_row;
        ql_status st =
            ql_weight_error_add(e_out, p, p, rows_per_mat, e->n_per_row, w + m * e->n_per_row, err);
        if (st)
            return st;
    }
    return QL_OK;
}

/* The config's types must be writable to a GGUF model, and its weight type (or
 * mix) must have a llama.cpp file type, which *ftype receives. */
static ql_status check_config(const ql_quant_config *cfg, uint32_t *ftype, ql_error *err)
{
    ql_status st;
    if ((!cfg->mix && (st = ql_quant_model_check_type(cfg->weight_type, "weight", err))) ||
        (st = ql_quant_model_check_type(cfg->head_type, "head", err)) ||
        (st = ql_quant_model_check_type(cfg->embd_type, "embedding", err)))
        return st;
    for (int i = 0; i < ql_quant_overrides_count(cfg->overrides); i++)
        if ((st =
                 ql_quant_model_check_type(ql_quant_overrides_type(cfg->overrides, i), "its", err)))
            return ql_error_prefix(
                err, "--tensor-type '%s': ", ql_quant_overrides_rule(cfg->overrides, i));
    if (cfg->mix)
        *ftype = (uint32_t)cfg->mix->ftype;
    else if (!ql_quant_llama_ftype(cfg->weight_type, ftype))
        return ql_error_set(err, QL_EINVAL, "weight type %s has no llama.cpp file type",
                            ql_type_name(cfg->weight_type));
    return QL_OK;
}

/* Work buffers sized for the largest tensor of the plan: its source in f32, its
 * quantized bytes and (for the stats) its dequantized values. */
typedef struct {
    float *f32, *deq;
    uint8_t *q;
    size_t q_cap;
} work_buffers;

/* The buffers and the report's per-tensor arrays. */
static ql_status alloc_work(work_buffers *b, ql_quant_model_report *r, bool stats, ql_error *err)
{
    int64_t max_values = 1;
    uint64_t max_bytes = 1;
    for (int64_t i = 0; i < r->plan->n; i++) {
        const ql_quant_plan_entry *e = &r->plan->entries[i];
        if (e->n_per_row * e->nrows > max_values)
            max_values = e->n_per_row * e->nrows;
        if (e->bytes > max_bytes)
            max_bytes = e->bytes;
    }
    r->has_imatrix = calloc((size_t)r->plan->n + 1, sizeof *r->has_imatrix);
    b->f32 = malloc((size_t)max_values * sizeof(float));
    b->q = malloc((size_t)max_bytes);
    b->q_cap = (size_t)max_bytes;
    if (stats) {
        r->errors = calloc((size_t)r->plan->n + 1, sizeof *r->errors);
        b->deq = malloc((size_t)max_values * sizeof(float));
    }
    if (!r->has_imatrix || !b->f32 || !b->q || (stats && (!r->errors || !b->deq)))
        return ql_error_set(err, QL_ENOMEM, "out of memory for %lld values of work buffers",
                            (long long)max_values);
    return QL_OK;
}

/* ---------------------------------------------------------------------------
 * Output: one file, or a split set like the input's (--keep-split) */

bool ql_quant_out_path(const char *out, int k, int n, char *buf, size_t size)
{
    if (n == 1) {
        const size_t len = strlen(out);
        if (len >= size)
            return false;
        memcpy(buf, out, len + 1);
        return true;
    }
    char prefix[QL_PATH_MAX];
    int k0, n0;
    if (!ql_gguf_split_prefix(out, prefix, sizeof prefix, &k0, &n0)) {
        const size_t len = strlen(out);
        if (len >= sizeof prefix)
            return false;
        memcpy(prefix, out, len + 1);
        if (len > 5 && strcmp(prefix + len - 5, ".gguf") == 0)
            prefix[len - 5] = '\0';
    }
    return ql_gguf_split_path(buf, size, prefix, k, n);
}

ql_status ql_quant_kv_override_parse(const char *text, ql_quant_kv_override *out, ql_error *err)
{
    memset(out, 0, sizeof *out);
    const char *eq = strchr(text, '=');
    if (!eq || eq == text || (size_t)(eq - text) >= QL_QUANT_KV_KEY_MAX)
        return ql_error_set(err, QL_EINVAL,
                            "malformed KV override '%s': expected KEY=TYPE:VALUE with a key of "
                            "1..%d bytes (TYPE int, float, bool or str)",
                            text, QL_QUANT_KV_KEY_MAX - 1);
    memcpy(out->key, text, (size_t)(eq - text));
    out->key[eq - text] = '\0';
    const char *v = eq + 1;
    ql_gguf_value *val = &out->value;
    if (strncmp(v, "int:", 4) == 0) {
        int64_t i;
        if (!ql_parse_i64(v + 4, &i) || i < INT32_MIN || i > INT32_MAX)
            return ql_error_set(err, QL_EINVAL,
                                "KV override '%s': expected an integer in %d..%d after int:, "
                                "got '%s'",
                                text, INT32_MIN, INT32_MAX, v + 4);
        val->type = QL_GGUF_INT32;
        val->v.i32 = (int32_t)i;
    } else if (strncmp(v, "float:", 6) == 0) {
        double d;
        if (!ql_parse_double(v + 6, &d) || !isfinite((float)d))
            return ql_error_set(err, QL_EINVAL,
                                "KV override '%s': expected a finite number after float:, got "
                                "'%s'",
                                text, v + 6);
        val->type = QL_GGUF_FLOAT32;
        val->v.f32 = (float)d;
    } else if (strncmp(v, "bool:", 5) == 0) {
        val->type = QL_GGUF_BOOL;
        if (strcmp(v + 5, "true") == 0)
            val->v.b = true;
        else if (strcmp(v + 5, "false") == 0)
            val->v.b = false;
        else
            return ql_error_set(err, QL_EINVAL,
                                "KV override '%s': expected true or false after bool:, got '%s'",
                                text, v + 5);
    } else if (strncmp(v, "str:", 4) == 0) {
        if (strlen(v + 4) > 127)
            return ql_error_set(err, QL_EINVAL,
                                "KV override '%s': the value has %zu bytes, at most 127 allowed",
                                text, strlen(v + 4));
        val->type = QL_GGUF_STRING;
        val->v.str.ptr = (char *)(uintptr_t)(v + 4);
        val->v.str.len = strlen(v + 4);
    } else {
        return ql_error_set(err, QL_EINVAL,
                            "KV override '%s': unknown type '%.*s', expected int:, float:, bool: "
                            "or str:",
                            text, (int)strcspn(v, ":"), v);
    }
    return QL_OK;
}

/* The split keys of file k of n (n > 1), as llama-quantize --keep-split and gguf-split
 * write them into every file: u16, u16, i32. */
static ql_status write_split_keys(ql_gguf_writer *w, int k, int n, int64_t n_tensors, ql_error *err)
{
    if (n_tensors > INT32_MAX)
        return ql_error_set(err, QL_EINVAL, "%lld tensors: beyond %s's i32", (long long)n_tensors,
                            QL_GGUF_SPLIT_TENSORS_COUNT);
    ql_gguf_value v = {.type = QL_GGUF_UINT16};
    ql_status st;
    v.v.u16 = (uint16_t)k;
    if ((st = ql_gguf_writer_set_kv(w, QL_GGUF_SPLIT_NO, &v, err)))
        return st;
    v.v.u16 = (uint16_t)n;
    if ((st = ql_gguf_writer_set_kv(w, QL_GGUF_SPLIT_COUNT, &v, err)))
        return st;
    return ql_gguf_writer_set_i32(w, QL_GGUF_SPLIT_TENSORS_COUNT, (int32_t)n_tensors, err);
}

/* Output file k of n up to its tensor data: in the first, the model's keys, the
 * quantization version, the file type, the imatrix keys and the overrides; the split
 * keys when there are several files; the infos of the tensors it holds. */
static ql_status begin_output(ql_gguf_writer *w, const ql_gguf *g, const ql_quant_plan *p,
                              uint32_t ftype, const ql_quant_model_opts *opts, int k, int n,
                              const char *path, ql_error *err)
{
    ql_status st;
    if ((st = ql_gguf_writer_set_alignment(w, ql_gguf_file(g, n > 1 ? k : 0)->alignment, err)))
        return st;
    if (k == 0) {
        if ((st = ql_gguf_writer_copy_kvs(w, g, err)) ||
            (st = ql_gguf_writer_set_u32(w, "general.quantization_version", QL_GGML_QNT_VERSION,
                                         err)) ||
            (st = ql_gguf_writer_set_u32(w, "general.file_type", ftype, err)) ||
            (st = ql_quant_write_imatrix_keys(w, opts->imatrix_meta, err)))
            return st;
        for (int i = 0; i < opts->n_kv_overrides; i++)
            if ((st = ql_gguf_writer_set_kv(w, opts->kv_overrides[i].key,
                                            &opts->kv_overrides[i].value, err)))
                return ql_error_prefix(err, "--override-kv %s: ", opts->kv_overrides[i].key);
    }
    if (n > 1 && (st = write_split_keys(w, k, n, p->n, err)))
        return st;
    for (int64_t i = 0; i < p->n; i++) {
        const ql_quant_plan_entry *e = &p->entries[i];
        if (n > 1 && g->tensors[i].file != k)
            continue;
        if ((st = ql_gguf_writer_add_tensor(w, e->name, e->n_dims, e->ne, e->used, e->bytes, err)))
            return st;
    }
    return ql_gguf_writer_begin(w, path, err);
}

/* Every tensor in file order, quantized (or copied when it keeps its type) into the
 * writer of its file, with its error statistics and their model totals when asked
 * for. */
static ql_status write_tensors(ql_gguf_writer **w, int n_out, const ql_gguf *g,
                               ql_quant_model_report *r, const ql_quant_model_opts *opts,
                               work_buffers *b, ql_error *err)
{
    ql_progress prog;
    ql_progress_begin(&prog, "quantize", "tensor", r->plan->n, opts->quiet);
    for (int64_t i = 0; i < r->plan->n; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        const ql_quant_plan_entry *e = &r->plan->entries[i];
        const void *bytes = t->data;
        ql_weight_error *te = opts->stats ? &r->errors[i] : NULL;
        ql_status st = QL_OK;
        if (t->type != e->used) {
            st = quantize_one(t, e, opts, b->f32, b->q, b->q_cap, b->deq, te, &r->has_imatrix[i],
                              err);
            bytes = b->q;
        } else if (te) {
            /* Copied unchanged: zero error, but count its values and their magnitude. */
            st = copy_stats(t, e, opts, b->f32, te, err);
        }
        if (st)
            return ql_error_prefix(err, "%s: tensor '%s' (%s): ", g->path, e->name,
                                   ql_type_name(e->used));
        if ((st = ql_gguf_writer_write_tensor(w[n_out > 1 ? t->file : 0], bytes, e->bytes, err)))
            return st;
        if (te) {
            ql_weight_error_merge(&r->total, te);
            if (e->role != QL_ROLE_HEAD && e->role != QL_ROLE_EMBD)
                ql_weight_error_merge(&r->body, te);
        }
        ql_progress_update(&prog, i + 1, e->name);
    }
    ql_progress_end(&prog, r->plan->n, NULL);
    return QL_OK;
}

/* The writers of the n output files, begun. */
static ql_status open_outputs(ql_gguf_writer **w, int n, const ql_gguf *g, const ql_quant_plan *p,
                              uint32_t ftype, const ql_quant_model_opts *opts, const char *out_path,
                              ql_error *err)
{
    for (int k = 0; k < n; k++) {
        char path[QL_PATH_MAX];
        ql_status st;
        if (!ql_quant_out_path(out_path, k, n, path, sizeof path))
            return ql_error_set(err, QL_EINVAL, "%s: the path of output file %d is too long",
                                out_path, k + 1);
        if ((st = ql_gguf_writer_alloc(&w[k], err)) ||
            (st = begin_output(w[k], g, p, ftype, opts, k, n, path, err)))
            return st;
    }
    return QL_OK;
}

ql_status ql_quant_model(const char *in_path, const char *out_path, const ql_quant_model_opts *opts,
                         ql_quant_model_report **report, ql_error *err)
{
    *report = NULL;
    /* Some of the mixes' rules depend on whether there is an imatrix at all. */
    ql_quant_config cfg = opts->cfg;
    cfg.has_imatrix = opts->imatrix != NULL;
    uint32_t ftype = 0;
    ql_status st = check_config(&cfg, &ftype, err);
    if (st)
        return st;
    const double t0 = ql_now();
    ql_gguf *g = NULL;
    ql_gguf_writer **w = NULL;
    int n_out = 1;
    work_buffers b = {0};
    ql_quant_model_report *r = calloc(1, sizeof *r);
    if (!r)
        return ql_error_set(err, QL_ENOMEM, "out of memory for a quantization report");
    r->file_type = ftype;
    if ((st = ql_gguf_open(&g, in_path, err)))
        goto out;
    n_out = opts->keep_split ? g->n_files : 1;
    if (!(w = calloc((size_t)n_out, sizeof *w))) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory for %d writers", n_out);
        goto out;
    }
    if ((st = ql_quant_plan_build(g, &cfg, &r->plan, err)) ||
        (st = check_plan(g, r->plan, opts, &r->n_requantized, err)) ||
        (st = alloc_work(&b, r, opts->stats, err)) ||
        (st = open_outputs(w, n_out, g, r->plan, ftype, opts, out_path, err)) ||
        (st = write_tensors(w, n_out, g, r, opts, &b, err)))
        goto out;
    for (int k = 0; k < n_out; k++) {
        if ((st = ql_gguf_writer_finish(w[k], err)))
            goto out;
        r->file_size += ql_gguf_writer_file_size(w[k]);
    }
    r->n_files = n_out;
    r->seconds = ql_now() - t0;
    *report = r;
    r = NULL;
out:
    for (int k = 0; w && k < n_out; k++)
        ql_gguf_writer_free(w[k]);
    free(w);
    free(b.f32);
    free(b.deq);
    free(b.q);
    ql_gguf_close(g);
    ql_quant_model_report_free(r);
    return st;
}
