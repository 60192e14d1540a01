/* A config's quantized weight set, built from its plan over a tensor cache shared
 * between configs (qweights.h). */
#include "experiment/qweights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/progress.h"
#include "base/util.h"
#include "experiment/fit.h"
#include "experiment/fit_gptq.h"
#include "experiment/gptq_pass.h"
#include "experiment/distribution.h"
#include "experiment/outliers.h"
#include "formats/quant_int8row.h"
#include "formats/quant_split.h"
#include "formats/zlib_size.h"
#include "formats/types.h"
#include "model/gguf.h"
#include "model/quant_model.h"

/* ------------------------------------------------------------------------- */
/* Quantized tensors shared between configs                                   */

typedef struct {
    char name[QL_QUANT_NAME_MAX];
    int32_t type;
    const ql_imatrix *imatrix; /* importance used to quantize (identity), NULL = none */
    const ql_outlier_cols *oc; /* outlier columns kept exact (identity), NULL = none */
    /* GPTQ's tensors: the SHA-256 of the quantizer, the calibration text, the importance
     * and every tensor's type in the plan (whose earlier blocks' types change a block's
     * Hessians); "" for ggml's rounding (identity). */
    char gkey[65];
    uint64_t outlier_bytes; /* f32 values and indices of those columns */
    void *q;                /* quantized bytes (storage type: Q8_0 for Q8_0_XC) */
    size_t q_bytes;
    float *exact; /* (nrows, oc->n) the outlier columns' exact values, or NULL */
    int64_t nrows, n_per_row;
    ql_weight_error werr;      /* against the reference weights, weighted by the metric imatrix */
    int n_mat;                 /* matrices of the tensor (its experts), 1 for a 2-D one */
    ql_weight_error *werr_mat; /* (n_mat,) each expert's error when n_mat > 1, else NULL */
    uint64_t last_use;
} qtensor;

typedef struct {
    qtensor *items;
    size_t n, cap;
    size_t bytes, max_bytes;
    uint64_t clock; /* advanced once per config; items it touched carry its value */
} qcache;

struct ql_qweights {
    const ql_model *model;
    ql_status (*sensitivities)(void *ctx, const ql_config *c, const ql_calib_slot *slot,
                               ql_fit_table *t, ql_error *err);
    void *sens_ctx;
    char model_sha[65];
    char cache_dir[QL_PATH_MAX];
    const ql_imatrix *metric_imatrix;
    bool quiet;
    size_t gptq_bytes;
    qcache cache;
    /* (max_cols,) per-column importance of the tensor being quantized: n_in values per
     * matrix, expert after expert for a stacked tensor */
    float *imat_buf;
    float *metric_buf; /* (max_cols,) the same from the metric imatrix */
    /* The config being built with quantizer gptq: its key and the pass's tensors (NULL
     * when every one of them was cached). */
    char gkey[65];
    ql_gptq_set *gset;
};

static void qtensor_release(qtensor *t)
{
    free(t->q);
    free(t->exact);
    free(t->werr_mat);
    t->q = NULL;
    t->exact = NULL;
    t->werr_mat = NULL;
}

/* Matrices of a linear: its experts, 1 for a 2-D weight. */
static int n_mat_of(const ql_linear *lin)
{
    return lin->n_expert > 1 ? lin->n_expert : 1;
}

/* Importance values a tensor takes: one per input column of each of its matrices. */
static int64_t importance_cols(const ql_linear *lin)
{
    return lin->n_in * n_mat_of(lin);
}

/* Adds the error of w_hat against w, rows r0 .. r0 + nr - 1 of lin's rows, to per_mat[m]
 * of the matrix m each row belongs to, weighted by that matrix's columns of col_weight
 * (NULL, or n_mat vectors of n_in values; the experts of a stacked tensor are each
 * weighted by their own importance). */
static ql_status add_error_rows(const ql_linear *lin, const float *w, const float *w_hat,
                                int64_t r0, int64_t nr, const float *col_weight,
                                ql_weight_error *per_mat, ql_error *err)
{
    const int64_t n_in = lin->n_in, rows = ql_linear_matrix_rows(lin);
    ql_status st = QL_OK;
    for (int64_t r = r0; r < r0 + nr && !st;) {
        const int64_t m = n_mat_of(lin) > 1 ? r / rows : 0;
        const int64_t end =
            n_mat_of(lin) > 1 && (m + 1) * rows < r0 + nr ? (m + 1) * rows : r0 + nr;
        st = ql_weight_error_add(&per_mat[m], w + (r - r0) * n_in, w_hat + (r - r0) * n_in, end - r,
                                 n_in, col_weight ? col_weight + m * n_in : NULL, err);
        r = end;
    }
    return st;
}

/* Appends the records of a stacked tensor's experts (their errors in per_mat) to r; the
 * records point at the tensor record's name. */
static ql_status add_expert_records(ql_qweights_result *r, const char *tensor,
                                    const ql_weight_error *per_mat, int n_mat, size_t *cap,
                                    ql_error *err)
{
    if (n_mat <= 1)
        return QL_OK;
    if (!ql_grow((void **)&r->experts, cap, r->n_experts + (size_t)n_mat, sizeof *r->experts))
        return ql_error_set(err, QL_ENOMEM, "out of memory for the expert records");
    for (int m = 0; m < n_mat; m++) {
        const ql_weight_error *e = &per_mat[m];
        r->experts[r->n_experts++] = (ql_expert_record){
            .tensor = tensor,
            .expert = m,
            .rmse = ql_weight_error_rmse(e),
            .max_err = e->max_abs,
            .imatrix_err = e->weighted ? e->w_sse : (double)NAN,
            .imatrix_err_rel = ql_weight_error_rel(e),
        };
    }
    return QL_OK;
}

/* The tensor's error: its matrices' merged (one matrix: that one). */
static void merge_mats(const ql_weight_error *per_mat, int n_mat, ql_weight_error *out)
{
    if (n_mat == 1) {
        *out = per_mat[0];
        return;
    }
    memset(out, 0, sizeof *out);
    for (int m = 0; m < n_mat; m++)
        ql_weight_error_merge(out, &per_mat[m]);
}

static size_t qtensor_mem(const qtensor *t)
{
    return t->q_bytes + (t->exact ? (size_t)(t->nrows * t->oc->n) * sizeof(float) : 0);
}

/* The source a config's product reads for a cached tensor: its bytes in the storage type
 * and, with an outlier split, the exact columns written over the decoded ones. */
static ql_weight_src qtensor_src(const qtensor *t)
{
    ql_weight_src s = {ql_type_get(t->type)->storage, t->q, 0, NULL, NULL};
    if (t->exact) {
        s.n_exact = t->oc->n;
        s.exact_cols = t->oc->cols;
        s.exact_vals = t->exact;
    }
    return s;
}

/* Rows per piece when the error of a quantized tensor is measured piecewise: whole
 * chunks of ql_weight_error_add's partition (so the sums are the same as over the
 * whole tensor at once), about 16M values a piece. */
static int64_t error_piece_rows(int64_t n_per_row)
{
    const int64_t chunk = ql_quant_chunk_rows(n_per_row);
    int64_t k = ((int64_t)16 << 20) / (chunk * n_per_row);
    return (k > 1 ? k : 1) * chunk;
}

/* Error of the quantized bytes q (type) of lin's rows against src (all its rows in f32),
 * decoded piece by piece, into per_mat (n_mat of lin, zeroed by the caller). */
static ql_status measure_error(const ql_linear *lin, int32_t type, const void *q, const float *src,
                               const float *col_weight, ql_weight_error *per_mat, ql_error *err)
{
    const int64_t nrows = lin->n_out, n_per_row = lin->n_in;
    const int32_t storage = ql_type_get(type)->storage;
    const size_t row_bytes = ql_row_size(storage, n_per_row);
    const int64_t piece = error_piece_rows(n_per_row);
    const int64_t rows = piece < nrows ? piece : nrows;
    float *deq = malloc((size_t)(rows * n_per_row) * sizeof *deq);
    if (!deq)
        return ql_error_set(err, QL_ENOMEM, "out of memory measuring a quantization error");
    ql_status st = QL_OK;
    for (int64_t r = 0; r < nrows && !st; r += piece) {
        const int64_t nr = nrows - r < piece ? nrows - r : piece;
        st = ql_dequant_tensor(storage, (const uint8_t *)q + (size_t)r * row_bytes,
                               (size_t)nr * row_bytes, nr, n_per_row, deq, err);
        if (!st)
            st = add_error_rows(lin, src + r * n_per_row, deq, r, nr, col_weight, per_mat, err);
    }
    free(deq);
    return st;
}

/* Quantizes the linear's rows to type into q (the tensor's bytes) and measures their
 * error, piece by piece (whole chunks of the quantizer, error_piece_rows), so that the
 * f32 copy of a tensor that exists is one piece, not the tensor (a 150k-token
 * embedding table is 545 MB in f32). The bytes are those of the whole tensor at once:
 * ql_quant_tensor_rows quantizes each chunk from its first row. */
static ql_status quantize_pieces(const ql_linear *src_lin, int32_t type, const float *qw,
                                 const float *mw, void *q, size_t q_bytes, ql_weight_error *per_mat,
                                 ql_error *err)
{
    const int64_t nrows = src_lin->n_out, n_per_row = src_lin->n_in;
    const int32_t storage = ql_type_get(type)->storage;
    const size_t row_bytes = ql_row_size(storage, n_per_row);
    const int64_t piece = error_piece_rows(n_per_row);
    const int64_t rows = piece < nrows ? piece : nrows;
    float *src = malloc((size_t)(rows * n_per_row) * sizeof *src);
    float *deq = malloc((size_t)(rows * n_per_row) * sizeof *deq);
    ql_status st =
        src && deq ? QL_OK
                   : ql_error_set(err, QL_ENOMEM, "out of memory quantizing '%s'", src_lin->name);
    /* A stacked tensor is n_mat matrices, each quantized with its own importance. */
    const int64_t n_mat = n_mat_of(src_lin);
    const int64_t ne[QL_GGUF_MAX_DIMS] = {n_per_row, nrows / n_mat, n_mat, 1};
    for (int64_t r = 0; r < nrows && !st; r += piece) {
        const int64_t nr = nrows - r < piece ? nrows - r : piece;
        uint8_t *dst = (uint8_t *)q + (size_t)r * row_bytes;
        ql_quant_src qs;
        ql_quant_src_from_f32(&qs, ne, src);
        qs.rows_first = r;
        qs.rows_n = nr;
        qs.imatrix = qw;
        qs.imatrix_per_mat = n_mat > 1;
        if (!(st = ql_linear_decode_rows(src_lin, r, nr, src, err)) &&
            !(st = ql_quant_tensor_rows(&qs, type, r, nr, dst, q_bytes - (size_t)r * row_bytes,
                                        err)) &&
            !(st =
                  ql_dequant_tensor(storage, dst, (size_t)nr * row_bytes, nr, n_per_row, deq, err)))
            st = add_error_rows(src_lin, src, deq, r, nr, mw, per_mat, err);
    }
    free(src);
    free(deq);
    return st;
}

/* Quantizes lin (a whole tensor, or a view of one expert: then row0 picks that expert's
 * importance out of the tensor's entry) to type. */
static ql_status quantize_alone(const ql_linear *lin, const ql_linear *tensor, int32_t type,
                                const ql_imatrix *im, ql_weight_src *src, void **bytes,
                                ql_error *err)
{
    *bytes = NULL;
    const size_t q_bytes = ql_row_size(ql_type_get(type)->storage, lin->n_in) * (size_t)lin->n_out;
    float *buf = malloc((size_t)importance_cols(tensor) * sizeof *buf);
    void *q = malloc(q_bytes ? q_bytes : 1);
    ql_weight_error *werr = calloc((size_t)n_mat_of(lin), sizeof *werr);
    const float *qw = NULL;
    ql_status st = buf && q && werr
                       ? QL_OK
                       : ql_error_set(err, QL_ENOMEM, "out of memory quantizing '%s'", lin->name);
    if (!st)
        st = ql_calib_column_weights(im, tensor->name, importance_cols(tensor), buf, &qw, err);
    if (!st && qw && lin != tensor)
        qw += (lin->row0 / ql_linear_matrix_rows(tensor)) * lin->n_in;
    if (!st)
        st = quantize_pieces(lin, type, qw, NULL, q, q_bytes, werr, err);
    free(buf);
    free(werr);
    if (st) {
        free(q);
        return ql_error_prefix(err, "tensor '%s' (%s): ", lin->name, ql_type_name(type));
    }
    *src = (ql_weight_src){.type = ql_type_get(type)->storage, .data = q};
    *bytes = q;
    return QL_OK;
}

ql_status ql_qweights_quantize_linear(const ql_linear *lin, int32_t type, const ql_imatrix *im,
                                      ql_weight_src *src, void **bytes, ql_error *err)
{
    return quantize_alone(lin, lin, type, im, src, bytes, err);
}

ql_status ql_qweights_quantize_expert(const ql_linear *lin, int e, int32_t type,
                                      const ql_imatrix *im, ql_weight_src *src, void **bytes,
                                      ql_error *err)
{
    ql_linear view;
    ql_linear_expert(lin, e, &view);
    return quantize_alone(&view, lin, type, im, src, bytes, err);
}

static void qcache_deinit(qcache *c)
{
    for (size_t i = 0; i < c->n; i++)
        qtensor_release(&c->items[i]);
    free(c->items);
    memset(c, 0, sizeof *c);
}

/* Whether the plan names this tensor with this type (the tensors a config may take
 * from the cache; its importance matrix and outlier columns are not looked at, so this
 * keeps a little more than needed, never less). */
static bool plan_wants(const ql_quant_plan *plan, const qtensor *t)
{
    for (int64_t i = 0; i < plan->n; i++)
        if (plan->entries[i].used == t->type && strcmp(plan->entries[i].name, t->name) == 0)
            return true;
    return false;
}

/* Before a config is built: drops the least recently used tensors it does not want until
 * the cache fits its budget, so that earlier configs' tensors are not held next to the
 * new config's when memory is short. */
static void qcache_trim(qcache *c, const ql_quant_plan *plan)
{
    while (c->bytes > c->max_bytes) {
        size_t victim = SIZE_MAX;
        for (size_t i = 0; i < c->n; i++)
            if (!plan_wants(plan, &c->items[i]) &&
                (victim == SIZE_MAX || c->items[i].last_use < c->items[victim].last_use))
                victim = i;
        if (victim == SIZE_MAX)
            return;
        c->bytes -= qtensor_mem(&c->items[victim]);
        qtensor_release(&c->items[victim]);
        c->items[victim] = c->items[--c->n];
    }
}

static qtensor *qcache_find(qcache *c, const char *name, int32_t type, const ql_imatrix *im,
                            const ql_outlier_cols *oc, const char *gkey)
{
    for (size_t i = 0; i < c->n; i++) {
        qtensor *t = &c->items[i];
        if (t->type == type && t->imatrix == im && t->oc == oc && strcmp(t->name, name) == 0 &&
            strcmp(t->gkey, gkey) == 0) {
            t->last_use = c->clock;
            return t;
        }
    }
    return NULL;
}

ql_status ql_qweights_alloc(ql_qweights **out, const ql_qweights_opts *o, ql_error *err)
{
    *out = NULL;
    ql_qweights *q = calloc(1, sizeof *q);
    if (!q)
        return ql_error_set(err, QL_ENOMEM, "out of memory for the sweep buffers");
    q->model = o->model;
    ql_strlcpy(q->model_sha, o->model_sha, sizeof q->model_sha);
    ql_strlcpy(q->cache_dir, o->cache_dir, sizeof q->cache_dir);
    q->metric_imatrix = o->metric_imatrix;
    q->quiet = o->quiet;
    q->gptq_bytes = o->gptq_bytes;
    q->sensitivities = o->sensitivities;
    q->sens_ctx = o->sens_ctx;
    q->cache.max_bytes = o->cache_bytes ? o->cache_bytes : QL_QWEIGHTS_CACHE_BYTES;
    /* The most importance values any tensor takes (all experts of a stacked one). */
    const ql_weights *mw = o->model->weights;
    int64_t max_cols = importance_cols(&mw->tok_embd);
    for (int i = 0; i < mw->n_lin; i++)
        if (importance_cols(&mw->lin[i]) > max_cols)
            max_cols = importance_cols(&mw->lin[i]);
    q->imat_buf = malloc((size_t)max_cols * sizeof(float));
    q->metric_buf = malloc((size_t)max_cols * sizeof(float));
    if (!q->imat_buf || !q->metric_buf) {
        ql_qweights_free(q);
        return ql_error_set(err, QL_ENOMEM, "out of memory for the sweep buffers");
    }
    *out = q;
    return QL_OK;
}

void ql_qweights_free(ql_qweights *q)
{
    if (!q)
        return;
    qcache_deinit(&q->cache);
    free(q->imat_buf);
    free(q->metric_buf);
    free(q);
}

/* Whether the config being built (quantizer gptq) takes this tensor from GPTQ's pass: a
 * block's product whose type changes and splits (quant_split.h). The head and the
 * embeddings are not block products: ggml's rounding, as GPTQ leaves them. */
static bool gptq_tensor(const ql_qweights *q, const ql_quant_plan_entry *e, const ql_linear *lin)
{
    return q->gkey[0] && lin->layer >= 0 && e->used != lin->src_type && ql_split_applies(e->used);
}

/* The product site of weight lin of ref, or -1 (the lookup table has none). */
static int site_of(const ql_weights *ref, const ql_linear *lin)
{
    return lin >= ref->lin && lin < ref->lin + ref->n_lin ? (int)(lin - ref->lin) : -1;
}

/* The outlier columns of the product at site when the config splits them (os), or NULL. */
static const ql_outlier_cols *site_outliers(const ql_outlier_set *os, int site)
{
    return os && site >= 0 ? &os->site[site] : NULL;
}

/* The columns a cached tensor is keyed by: without columns to keep, a split is a plain
 * quantization and shares its entry. */
static const ql_outlier_cols *cache_cols(const ql_outlier_cols *oc, int32_t type)
{
    return oc && oc->n == 0 && !ql_type_get(type)->exact_outliers ? NULL : oc;
}

/* The kept columns' exact values of src (nrows, n_in) into exact (nrows, oc->n). */
static void gather_exact(float *exact, const float *src, int64_t nrows, int64_t n_in,
                         const ql_outlier_cols *oc)
{
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t j = 0; j < oc->n; j++)
            exact[r * oc->n + j] = src[r * n_in + oc->cols[j]];
}

/* The cached quantized tensor for (name, type, imatrix, outlier columns), quantizing it
 * on a miss from the reference's src (decoded to f32 for the time of the quantization). */
static ql_status get_qtensor(ql_qweights *q, const ql_quant_plan_entry *e, const ql_linear *src_lin,
                             const ql_imatrix *im, const ql_outlier_cols *oc, qtensor **out,
                             double *quantize_seconds, ql_error *err)
{
    oc = cache_cols(oc, e->used);
    const char *gkey = gptq_tensor(q, e, src_lin) ? q->gkey : "";
    qtensor *t = qcache_find(&q->cache, e->name, e->used, im, oc, gkey);
    if (t) {
        *out = t;
        return QL_OK;
    }
    double t0 = ql_now();
    qtensor nt;
    memset(&nt, 0, sizeof nt);
    ql_strlcpy(nt.name, e->name, sizeof nt.name);
    nt.type = e->used;
    nt.imatrix = im;
    nt.oc = oc;
    ql_strlcpy(nt.gkey, gkey, sizeof nt.gkey);
    nt.nrows = e->nrows;
    nt.n_per_row = e->n_per_row;
    nt.q_bytes = (size_t)e->bytes;
    nt.n_mat = n_mat_of(src_lin);
    const size_t n = (size_t)(e->nrows * e->n_per_row);
    ql_weight_error *per_mat = calloc((size_t)nt.n_mat, sizeof *per_mat);
    const void *pre =
        gkey[0] && q->gset ? ql_gptq_set_lookup(q->gset, e->name, e->used, e->bytes) : NULL;
    if (gkey[0] && !pre)
        return ql_error_set(err, QL_EINVAL, "gptq: the pass made no '%s' in %s", e->name,
                            ql_type_name(e->used));
    const bool split = oc || ql_type_get(e->used)->exact_outliers || pre;
    const bool keep_cols = oc && oc->n > 0 && !ql_type_get(e->used)->exact_outliers;
    /* The outlier split needs the whole tensor in f32; a plain quantization goes piece
     * by piece (quantize_pieces). */
    float *src = split ? malloc(n * sizeof *src) : NULL;
    float *w_eff = split ? malloc(n * sizeof *w_eff) : NULL;
    nt.q = malloc(nt.q_bytes ? nt.q_bytes : 1);
    nt.exact = keep_cols ? malloc((size_t)(e->nrows * oc->n) * sizeof *nt.exact) : NULL;
    ql_status st = QL_OK;
    if (!nt.q || !per_mat || (split && (!src || !w_eff)) || (keep_cols && !nt.exact)) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory quantizing '%s'", e->name);
        goto out;
    }
    const float *qw, *mw;
    const int64_t cols = importance_cols(src_lin);
    if ((split && (st = ql_linear_decode_rows(src_lin, 0, e->nrows, src, err))) ||
        (st = ql_calib_column_weights(im, e->name, cols, q->imat_buf, &qw, err)) ||
        (st = ql_calib_column_weights(q->metric_imatrix, e->name, cols, q->metric_buf, &mw, err)))
        goto out;
    if (pre && keep_cols) {
        /* GPTQ's bytes of the outlier split, made by the pass with the columns zeroed:
         * the effective weight is their decoding with the exact columns written back. */
        memcpy(nt.q, pre, nt.q_bytes);
        const int64_t rows = ql_linear_matrix_rows(src_lin);
        if ((st = ql_dequant_tensor(ql_type_get(e->used)->storage, nt.q, nt.q_bytes, e->nrows,
                                    e->n_per_row, w_eff, err)))
            goto out;
        ql_outliers_copy_cols(w_eff, src, e->nrows, e->n_per_row, oc->cols, oc->n);
        nt.outlier_bytes = (uint64_t)nt.n_mat * ql_outliers_bytes(rows, e->n_per_row, oc->n);
        if ((st = add_error_rows(src_lin, src, w_eff, 0, e->nrows, mw, per_mat, err)))
            goto out;
        gather_exact(nt.exact, src, e->nrows, e->n_per_row, oc);
    } else if (pre) {
        /* GPTQ's bytes, made by the pass for this config's plan; their error against the
         * reference weights as any quantization's. */
        memcpy(nt.q, pre, nt.q_bytes);
        if ((st = measure_error(src_lin, e->used, nt.q, src, mw, per_mat, err)))
            goto out;
    } else if (split) {
        /* The outlier split (outliers.h): the columns stay exact, the rest is quantized
         * without them; Q8_0_XC keeps them exact inside Q8_0 blocks. Its error is that of
         * the effective weight (decoded, exact columns written back). Each expert of a
         * stacked tensor on its own, with its importance, as every quantization. */
        const int64_t rows = ql_linear_matrix_rows(src_lin), n_in = e->n_per_row;
        const size_t mat_bytes = (size_t)rows * ql_row_size(ql_type_get(e->used)->storage, n_in);
        for (int m = 0; m < nt.n_mat && !st; m++) {
            uint64_t qb = 0, ob = 0;
            const size_t at = (size_t)(m * rows * n_in);
            st = ql_outliers_quant_weight(e->used, src + at, rows, n_in, qw ? qw + m * n_in : NULL,
                                          oc, w_eff + at, (uint8_t *)nt.q + (size_t)m * mat_bytes,
                                          nt.q_bytes - (size_t)m * mat_bytes, &qb, &ob, err);
            nt.outlier_bytes += ob;
        }
        if (st || (st = add_error_rows(src_lin, src, w_eff, 0, e->nrows, mw, per_mat, err)))
            goto out;
        if (keep_cols)
            gather_exact(nt.exact, src, e->nrows, e->n_per_row, oc);
    } else if ((st = quantize_pieces(src_lin, e->used, qw, mw, nt.q, nt.q_bytes, per_mat, err))) {
        /* The quantization every command shares (quant_model.h): the same bytes as
         * qlab quantize writes for this tensor. */
        goto out;
    }
    merge_mats(per_mat, nt.n_mat, &nt.werr);
    if (nt.n_mat > 1) {
        nt.werr_mat = per_mat;
        per_mat = NULL;
    }
    qcache *c = &q->cache;
    if (c->n == c->cap && !ql_grow((void **)&c->items, &c->cap, c->n + 1, sizeof *c->items)) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory for the tensor cache");
        goto out;
    }
    nt.last_use = c->clock;
    c->items[c->n++] = nt;
    c->bytes += qtensor_mem(&nt);
    *quantize_seconds += ql_now() - t0;
    *out = &c->items[c->n - 1];
    memset(&nt, 0, sizeof nt); /* the cache owns it now */
out:
    qtensor_release(&nt);
    free(per_mat);
    free(src);
    free(w_eff);
    return st;
}

/* ------------------------------------------------------------------------- */
/* The plan                                                                   */

/* What the kld objective's hook needs besides the table. */
typedef struct {
    const ql_qweights *q;
    const ql_config *c;
    const ql_calib_slot *slot;
} sens_hook;

static ql_status measured_errors(void *ctx, ql_fit_table *t, ql_error *err)
{
    const sens_hook *h = ctx;
    return h->q->sensitivities(h->q->sens_ctx, h->c, h->slot, t, err);
}

/* Replaces the policy's types by the ones the exact-fit solver chose for a budget,
 * and recomputes the plan's byte totals; *predicted: the solver's summed objective
 * when it is the kld one, else NAN. */
static ql_status apply_budget(const ql_qweights *q, ql_calib *cal, const ql_config *c,
                              const ql_calib_slot *slot, ql_quant_plan *plan, double *predicted,
                              ql_error *err)
{
    *predicted = (double)NAN;
    if (c->head_type != QL_TYPE_SAME || c->embd_type != QL_TYPE_SAME)
        return ql_error_set(err, QL_EINVAL,
                            "a budget config lets the solver choose the head and embedding "
                            "types too; use head_type = same and embd_type = same");
    if (c->objective == QL_OBJECTIVE_KLD && !q->sensitivities)
        return ql_error_set(err, QL_EINVAL,
                            "objective kld: nothing here measures sensitivities (a sweep does)");
    ql_fit_imatrix *fim = NULL;
    ql_status st = QL_OK;
    if (slot && (st = ql_fit_imatrix_wrap(ql_calib_slot_imatrix(slot), ql_calib_slot_sha256(slot),
                                          &fim, err)))
        return st;
    const ql_fit_importance *imp = fim ? ql_fit_imatrix_importance(fim) : NULL;
    ql_fit_budget b = {c->budget_kind == QL_BUDGET_BPW ? QL_FIT_BUDGET_BPW : QL_FIT_BUDGET_BYTES,
                       (uint64_t)c->budget_bytes, c->budget_bpw};
    ql_fit_table *table = NULL;
    ql_fit_plan *fp = NULL;
    if (c->budget_kind == QL_BUDGET_LIKE) {
        /* The size of this model in that type or mix, with the same importance matrix. */
        ql_config like;
        ql_config_init(&like);
        if ((st = ql_config_set(&like, QL_AXIS_WEIGHT_TYPE, c->budget_like, err)) ||
            (st = ql_fit_budget_of(q->model->gguf, &like, imp, &b.bytes, err))) {
            ql_error_prefix(err, "budget %s: ", c->budget_like);
            goto out;
        }
    }
    /* The solver's default ladder up to the precision of weight_type, so that
     * weight_type caps what a fitted model may spend on one tensor. */
    ql_fit_options fo;
    ql_fit_options_init(&fo);
    fo.max_bpw = ql_type_bpw(c->weight_type);
    fo.cache_dir = q->cache_dir;
    fo.quiet = q->quiet;
    fo.assign_routers = c->objective == QL_OBJECTIVE_KLD;
    sens_hook hook = {q, c, slot};
    if (c->objective == QL_OBJECTIVE_KLD) {
        fo.errors = measured_errors;
        fo.errors_ctx = &hook;
    }
    /* Quantizer gptq: the candidates' errors are GPTQ's output errors on the calibration
     * text of the config's imatrix (fit_gptq.h). */
    ql_ppl_data calib = {0};
    char text_sha[65];
    const ql_fit_gptq gh = {.model = q->model,
                            .calib = &calib,
                            .gptq = &c->gptq,
                            .imp = imp,
                            .mem = q->gptq_bytes,
                            .quiet = q->quiet};
    if (c->quantizer_gptq) {
        if ((st = ql_calib_config_text(cal, c, &calib, text_sha, err))) {
            ql_error_prefix(err, "quantizer gptq: ");
            goto out;
        }
        fo.errors = ql_fit_gptq_errors;
        fo.errors_ctx = (void *)&gh;
    }
    st = ql_fit_plan_model(q->model->gguf, q->model_sha, imp, &b, &fo, &table, &fp, err);
    if (st)
        goto out;
    if (c->objective == QL_OBJECTIVE_KLD)
        *predicted = fp->err;
    for (int64_t i = 0; i < plan->n; i++) {
        ql_quant_plan_entry *e = &plan->entries[i];
        int32_t t = ql_fit_plan_type(fp, e->name);
        if (fo.assign_routers && e->role == QL_ROLE_KEEP && e->n_dims > 1 &&
            ql_quant_is_router(e->name))
            e->role = QL_ROLE_WEIGHT; /* the fit assigned it */
        if (t != QL_TYPE_INVALID &&
            (e->role == QL_ROLE_WEIGHT || e->role == QL_ROLE_HEAD || e->role == QL_ROLE_EMBD)) {
            e->requested = e->used = t;
            snprintf(e->choice, sizeof e->choice, "budget: the exact-fit solver%s: %s",
                     c->objective == QL_OBJECTIVE_KLD ? " on measured KLD"
                     : c->quantizer_gptq              ? " on GPTQ's output errors"
                                                      : "",
                     ql_type_name(t));
            e->fallback = QL_FALLBACK_NONE;
            e->reason[0] = '\0';
            e->bytes = ql_row_size(t, e->n_per_row) * (uint64_t)e->nrows;
        }
    }
    ql_quant_plan_totals(plan);
out:
    ql_ppl_data_deinit(&calib);
    ql_fit_plan_free(fp);
    ql_fit_table_free(table);
    ql_fit_imatrix_free(fim);
    return st;
}

/* Whether the importance matrix ctx (NULL: none) has an entry for the tensor. */
static bool imatrix_covers(const void *ctx, int64_t i, const ql_quant_plan_entry *e)
{
    (void)i;
    return ctx && ql_imatrix_find(ctx, e->name);
}

/* The config's plan: the type policy, the budget's types, and the fallback of
 * tensors without importance data. */
static ql_status build_plan(const ql_qweights *q, ql_calib *cal, const ql_config *c,
                            const ql_calib_slot *slot,
                            ql_quant_plan **out, double *predicted, ql_error *err)
{
    const ql_imatrix *im = ql_calib_slot_imatrix(slot);
    ql_quant_overrides *rules;
    ql_status st = ql_config_overrides(c, &rules, err);
    if (st)
        return st;
    ql_quant_config qc = ql_config_quant_request(c, rules, im != NULL);
    ql_quant_plan *plan;
    st = ql_quant_plan_build(q->model->gguf, &qc, &plan, err);
    ql_quant_overrides_free(rules);
    if (st)
        return st;
    if (c->budget_kind != QL_BUDGET_NONE && (st = apply_budget(q, cal, c, slot, plan, predicted, err))) {
        ql_quant_plan_free(plan);
        return st;
    }
    /* Tensors the importance matrix does not cover cannot take the types that need
     * one: they fall back as llama-quantize's mixes do (recorded per tensor); a mix
     * refuses them, as llama-quantize does. */
    if ((st = ql_quant_plan_check_importance(plan, imatrix_covers, im, NULL, err))) {
        ql_quant_plan_free(plan);
        return st;
    }
    *out = plan;
    return QL_OK;
}

/* GGUF file size of the plan (metadata of the source, tensors in their used types);
 * NAN when a type has no GGUF id (INT8_ROW). */
static double plan_gguf_bytes(const ql_gguf *src, const ql_quant_plan *plan, ql_error *err)
{
    for (int64_t i = 0; i < plan->n; i++) {
        const ql_type_traits *t = ql_type_get(plan->entries[i].used);
        const ql_type_traits *stored = t ? ql_type_get(t->storage) : NULL;
        if (!stored || !stored->is_gguf)
            return (double)NAN;
    }
    ql_gguf_writer *w;
    if (ql_gguf_writer_alloc(&w, err))
        return (double)NAN;
    double size = (double)NAN;
    if (ql_gguf_writer_copy_kvs(w, src, err))
        goto out;
    for (int64_t i = 0; i < plan->n; i++) {
        const ql_quant_plan_entry *e = &plan->entries[i];
        if (ql_gguf_writer_add_tensor(w, e->name, e->n_dims, e->ne, ql_type_get(e->used)->storage,
                                      e->bytes, err))
            goto out;
    }
    size = (double)ql_gguf_writer_file_size(w);
out:
    ql_gguf_writer_free(w);
    return size;
}

/* ------------------------------------------------------------------------- */
/* The weight set                                                             */

/* Above this many bytes of quantized tensors zlib_bytes is not measured (NULL): level-9
 * deflate runs at some 20 MB/s here, so it would cost more than a config's pass on a
 * model of a few hundred million parameters; the challenge it comes from caps models at
 * 16 MB. */
#define ZLIB_MAX_BYTES ((uint64_t)256 << 20)

/* A config's quantization shows a progress line from this many MB of f32 weights on. */
#define QUANT_PROGRESS_MB 256

/* The zlib level-9 size of the config's tensors as its weight set holds them (the
 * plan's order; kept tensors as f32, 1-D ones as the file has them when F32), or NAN
 * when the plan is over ZLIB_MAX_BYTES. */
static double zlib_bytes(const ql_model *model, const ql_quant_plan *plan, const ql_weights *w,
                         ql_error *err)
{
    if (plan->bytes > ZLIB_MAX_BYTES)
        return (double)NAN;
    ql_zlib_tensor *zt = calloc((size_t)plan->n, sizeof *zt);
    float **owned = calloc((size_t)plan->n, sizeof *owned);
    size_t n_zt = 0;
    double size = (double)NAN;
    if (!zt || !owned)
        goto out;
    for (int64_t i = 0; i < plan->n; i++) {
        const ql_quant_plan_entry *e = &plan->entries[i];
        ql_linear *lin = ql_weights_find((ql_weights *)w, e->name);
        if (e->role == QL_ROLE_VECTOR || e->role == QL_ROLE_KEEP || !lin) {
            const ql_gguf_tensor *gt = ql_gguf_find_tensor(model->gguf, e->name);
            if (gt && gt->type == QL_TYPE_F32 && e->used == QL_TYPE_F32)
                zt[n_zt++] = (ql_zlib_tensor){.type = QL_TYPE_F32,
                                              .data = gt->data,
                                              .nrows = e->nrows,
                                              .n_per_row = e->n_per_row};
            continue;
        }
        if (e->used != QL_TYPE_F32) {
            zt[n_zt++] = (ql_zlib_tensor){.type = lin->src.type,
                                          .data = lin->src.data,
                                          .nrows = e->nrows,
                                          .n_per_row = e->n_per_row};
            continue;
        }
        /* kept exact: its f32 values */
        float *f = malloc((size_t)(e->nrows * e->n_per_row) * sizeof *f);
        if (!f || ql_linear_decode_rows(lin, 0, e->nrows, f, err)) {
            free(f);
            goto out;
        }
        owned[i] = f;
        zt[n_zt++] = (ql_zlib_tensor){
            .type = QL_TYPE_F32, .data = f, .nrows = e->nrows, .n_per_row = e->n_per_row};
    }
    uint64_t z = 0;
    if (ql_zlib_size_tensors(zt, n_zt, &z, err) == QL_OK)
        size = (double)z;
out:
    for (int64_t i = 0; owned && i < plan->n; i++)
        free(owned[i]);
    free(owned);
    free(zt);
    return size;
}

/* A tensor the config keeps exact: no error, the reference's values are used as they
 * are; with importance weights its sum I w^2 still counts in the relative total. */
static ql_status kept_exact_error(ql_qweights *q, const ql_quant_plan_entry *e,
                                  const ql_linear *lin, ql_weight_error *zero, ql_error *err)
{
    const float *mw = NULL;
    ql_status st = ql_calib_column_weights(q->metric_imatrix, e->name, importance_cols(lin),
                                           q->metric_buf, &mw, err);
    if (st)
        return st;
    float *f = malloc((size_t)(e->nrows * e->n_per_row) * sizeof *f);
    ql_weight_error *per_mat = calloc((size_t)n_mat_of(lin), sizeof *per_mat);
    if (!f || !per_mat) {
        free(f);
        free(per_mat);
        return ql_error_set(err, QL_ENOMEM, "out of memory for tensor '%s'", e->name);
    }
    if (!(st = ql_linear_decode_rows(lin, 0, e->nrows, f, err)))
        st = add_error_rows(lin, f, f, 0, e->nrows, mw, per_mat, err);
    merge_mats(per_mat, n_mat_of(lin), zero);
    free(f);
    free(per_mat);
    return st;
}

/* Quantizes the weights of a config into a weight set whose sources are the cache's
 * bytes, and adds up the f32 bytes of the outlier columns (whole model and body). */
static ql_status build_weights(ql_qweights *q, const ql_quant_plan *plan, const ql_imatrix *im,
                               const ql_outlier_set *os, ql_qweights_result *r,
                               uint64_t *outlier_bytes, uint64_t *outlier_bytes_body, ql_error *err)
{
    const ql_model *model = q->model;
    ql_weights *w;
    ql_status st = ql_weights_copy(&w, model->weights, err);
    if (st)
        return st;
    r->tensors = calloc((size_t)plan->n, sizeof *r->tensors);
    r->names = calloc((size_t)plan->n, sizeof *r->names);
    r->reasons = calloc((size_t)plan->n, sizeof *r->reasons);
    r->choices = calloc((size_t)plan->n, sizeof *r->choices);
    r->site_q = calloc((size_t)w->n_lin, sizeof *r->site_q);
    if (!r->tensors || !r->names || !r->reasons || !r->choices || !r->site_q) {
        ql_weights_free(w);
        return ql_error_set(err, QL_ENOMEM, "out of memory for the tensor records");
    }
    ql_weight_error total;
    memset(&total, 0, sizeof total);
    total.weighted = true;
    bool any_weighted = false;
    double quantize_seconds = 0;
    size_t experts_cap = 0;
    /* A progress line (MB of f32 weights) when there is much to quantize: minutes for a
     * K-quant of a billion parameters. */
    int64_t mb_total = 0, mb_done = 0;
    for (int64_t i = 0; i < plan->n; i++)
        if (plan->entries[i].role != QL_ROLE_VECTOR && plan->entries[i].role != QL_ROLE_KEEP &&
            plan->entries[i].used != QL_TYPE_F32)
            mb_total += plan->entries[i].nrows * plan->entries[i].n_per_row * 4;
    mb_total /= 1000000;
    ql_progress pr;
    ql_progress_begin(&pr, "quantize", "MB", mb_total, q->quiet || mb_total < QUANT_PROGRESS_MB);
    for (int64_t i = 0; i < plan->n && !st; i++) {
        const ql_quant_plan_entry *e = &plan->entries[i];
        ql_linear *lin = ql_weights_find(model->weights, e->name);
        if (e->role == QL_ROLE_VECTOR || e->role == QL_ROLE_KEEP || !lin)
            continue; /* stays as the reference has it */
        ql_tensor_record *te = &r->tensors[r->n_tensors];
        ql_strlcpy(r->names[r->n_tensors], e->name, QL_QUANT_NAME_MAX);
        te->tensor = r->names[r->n_tensors];
        te->requested_type = e->requested;
        te->used_type = e->used;
        ql_strlcpy(r->reasons[r->n_tensors], e->reason, QL_QUANT_REASON_MAX);
        te->fallback_reason = e->used != e->requested ? r->reasons[r->n_tensors] : NULL;
        ql_strlcpy(r->choices[r->n_tensors], e->choice, QL_QUANT_REASON_MAX);
        te->choice = r->choices[r->n_tensors];
        te->n_rows = e->nrows;
        te->n_cols = e->n_per_row;
        te->params = e->nrows * e->n_per_row;
        te->bytes = (int64_t)e->bytes;
        te->outlier_cols = -1;
        r->n_tensors++;
        if (e->used == QL_TYPE_F32) {
            ql_weight_error zero;
            if ((st = kept_exact_error(q, e, lin, &zero, err)))
                break;
            te->rmse = te->max_err = 0;
            te->imatrix_err = zero.weighted ? 0 : (double)NAN;
            te->imatrix_err_rel = zero.weighted ? 0 : (double)NAN;
            any_weighted |= zero.weighted;
            ql_weight_error_merge(&total, &zero);
            continue;
        }
        /* The product site of this weight (the lookup table has none), and the
         * outlier columns of that product when the config splits them. */
        const int site = site_of(model->weights, lin);
        const ql_outlier_cols *oc = site_outliers(os, site);
        qtensor *qt = NULL;
        st = get_qtensor(q, e, lin, im, oc, &qt, &quantize_seconds, err);
        mb_done += e->nrows * e->n_per_row * 4;
        ql_progress_update(&pr, mb_done / 1000000, NULL);
        if (st) {
            ql_error_prefix(err, "tensor '%s' (%s): ", e->name, ql_type_name(e->used));
            break;
        }
        if (oc)
            te->outlier_cols = oc->n;
        *outlier_bytes += qt->outlier_bytes;
        if (e->role == QL_ROLE_WEIGHT)
            *outlier_bytes_body += qt->outlier_bytes;
        if (site >= 0)
            r->site_q[site] = qt->q;
        te->rmse = ql_weight_error_rmse(&qt->werr);
        te->max_err = qt->werr.max_abs;
        te->imatrix_err = qt->werr.weighted ? qt->werr.w_sse : (double)NAN;
        te->imatrix_err_rel = ql_weight_error_rel(&qt->werr);
        any_weighted |= qt->werr.weighted;
        ql_weight_error_merge(&total, &qt->werr);
        if (qt->werr_mat &&
            (st = add_expert_records(r, te->tensor, qt->werr_mat, qt->n_mat, &experts_cap, err)))
            break;
        ql_linear *dst = ql_weights_find(w, e->name);
        const ql_weight_src src = qtensor_src(qt);
        ql_linear_set_src(dst, &src);
        if (dst == &w->tok_embd && model->hp.tied_output) {
            /* The head of tied embeddings reads the same tensor, with its own outlier
             * columns when the split gives the head site any. */
            int out_site = ql_site_output(w);
            const ql_outlier_cols *hoc = os ? &os->site[out_site] : NULL;
            qtensor *hq = qt;
            if (hoc && hoc->n > 0 &&
                (st = get_qtensor(q, e, lin, im, hoc, &hq, &quantize_seconds, err)))
                break;
            const ql_weight_src hsrc = qtensor_src(hq);
            ql_linear_set_src(&w->lin[out_site], &hsrc);
            r->site_q[out_site] = hq->q;
            if (hq != qt)
                *outlier_bytes += hq->outlier_bytes;
        }
    }
    ql_progress_end(&pr, mb_done / 1000000, st ? "failed" : NULL);
    if (!st) {
        r->rmse = ql_weight_error_rmse(&total);
        r->max_err = total.max_abs;
        r->imatrix_err = total.weighted && any_weighted ? total.w_sse : (double)NAN;
        r->imatrix_err_rel = any_weighted ? ql_weight_error_rel(&total) : (double)NAN;
        r->zlib_bytes = zlib_bytes(model, plan, w, err);
    }
    r->quantize_seconds = quantize_seconds;
    if (st) {
        ql_weights_free(w);
        return st;
    }
    r->weights = w;
    return QL_OK;
}

/* Installs the config's activation rounding (and the outlier channels left
 * unrounded) on every product, and records what each product got. */
static ql_status install_act(const ql_config *c, const ql_quant_plan *plan,
                             const ql_outlier_set *os, ql_qweights_result *r, ql_error *err)
{
    ql_weights *w = r->weights;
    if (c->act_mode == QL_ACT_F32 && !os)
        return QL_OK; /* nothing to round: no transform, no cost */
    int32_t *types = malloc((size_t)w->n_lin * sizeof *types);
    r->acts = calloc((size_t)w->n_lin, sizeof *r->acts);
    r->act_names = calloc((size_t)w->n_lin, sizeof *r->act_names);
    r->act_notes = calloc((size_t)w->n_lin, sizeof *r->act_notes);
    if (!types || !r->acts || !r->act_names || !r->act_notes) {
        free(types);
        return ql_error_set(err, QL_ENOMEM, "out of memory for activation roundings");
    }
    ql_act_site_types(w, plan, types);
    ql_status st = ql_act_plan_build(&r->act, w, c->act_mode, types, r->site_q, os, err);
    free(types);
    if (st)
        return st;
    ql_act_plan_install(r->act, w);
    for (int site = 0; site < w->n_lin; site++) {
        const ql_act_choice *ch = ql_act_plan_choice(r->act, site);
        int64_t kept = os ? os->site[site].n : -1;
        if (ch->requested == QL_ACTQ_F32 && kept <= 0)
            continue;
        size_t k = r->n_acts++;
        ql_act_record *a = &r->acts[k];
        ql_strlcpy(r->act_names[k], w->lin[site].name, sizeof r->act_names[k]);
        ql_strlcpy(r->act_notes[k], ch->note, sizeof r->act_notes[k]);
        a->tensor = r->act_names[k];
        a->requested = ql_actq_name(ch->requested);
        a->used = ql_actq_name(ch->used);
        a->note = ch->used != ch->requested ? r->act_notes[k] : NULL;
        a->kept_channels = kept;
    }
    return QL_OK;
}

/* ------------------------------------------------------------------------- */
/* A config that is an existing GGUF file                                     */

/* The plan of the file: the policy's roles for its tensors, each in the type the file
 * has it in, chosen by the file. */
static ql_status file_plan(const ql_model *fm, ql_quant_plan **out, ql_error *err)
{
    ql_quant_config qc = {
        .weight_type = QL_TYPE_F32, .head_type = QL_TYPE_INVALID, .embd_type = QL_TYPE_INVALID};
    ql_quant_plan *plan;
    ql_status st = ql_quant_plan_build(fm->gguf, &qc, &plan, err);
    if (st)
        return st;
    for (int64_t i = 0; i < plan->n; i++) {
        ql_quant_plan_entry *e = &plan->entries[i];
        const ql_gguf_tensor *gt = ql_gguf_find_tensor(fm->gguf, e->name);
        QL_ASSERT(gt);
        e->requested = e->used = gt->type;
        e->fallback = QL_FALLBACK_NONE;
        e->reason[0] = '\0';
        ql_strlcpy(e->choice, "file", sizeof e->choice);
        e->bytes = gt->nbytes;
    }
    ql_quant_plan_totals(plan);
    *out = plan;
    return QL_OK;
}

/* The file's weight set (every tensor from its memory map) and the records of its
 * 2-D weights against the reference's. */
static ql_status file_weights(ql_qweights *q, const ql_model *fm, const ql_quant_plan *plan,
                              ql_qweights_result *r, ql_error *err)
{
    const ql_model *model = q->model;
    ql_weights *w;
    ql_status st = ql_weights_copy(&w, fm->weights, err);
    if (st)
        return st;
    r->weights = w;
    r->tensors = calloc((size_t)plan->n, sizeof *r->tensors);
    r->names = calloc((size_t)plan->n, sizeof *r->names);
    r->reasons = calloc((size_t)plan->n, sizeof *r->reasons);
    r->choices = calloc((size_t)plan->n, sizeof *r->choices);
    r->site_q = calloc((size_t)w->n_lin, sizeof *r->site_q);
    if (!r->tensors || !r->names || !r->reasons || !r->choices || !r->site_q)
        return ql_error_set(err, QL_ENOMEM, "out of memory for the tensor records");
    /* The file's bytes of each product (Q4_1/Q5_1 block mins for native q8_1 products). */
    for (int s = 0; s < w->n_lin; s++) {
        const ql_gguf_tensor *gt = ql_gguf_find_tensor(fm->gguf, w->lin[s].name);
        r->site_q[s] = gt && gt->type == w->lin[s].src_type ? gt->data : NULL;
    }
    ql_weight_error total;
    memset(&total, 0, sizeof total);
    total.weighted = true;
    bool any_weighted = false;
    size_t experts_cap = 0;
    for (int64_t i = 0; i < plan->n && !st; i++) {
        const ql_quant_plan_entry *e = &plan->entries[i];
        ql_linear *ref = ql_weights_find(model->weights, e->name);
        const ql_gguf_tensor *gt = ql_gguf_find_tensor(fm->gguf, e->name);
        if (e->role == QL_ROLE_VECTOR || e->role == QL_ROLE_KEEP || !ref)
            continue;
        ql_tensor_record *te = &r->tensors[r->n_tensors];
        ql_strlcpy(r->names[r->n_tensors], e->name, QL_QUANT_NAME_MAX);
        te->tensor = r->names[r->n_tensors];
        te->requested_type = te->used_type = e->used;
        te->fallback_reason = NULL;
        ql_strlcpy(r->choices[r->n_tensors], e->choice, QL_QUANT_REASON_MAX);
        te->choice = r->choices[r->n_tensors];
        te->n_rows = e->nrows;
        te->n_cols = e->n_per_row;
        te->params = e->nrows * e->n_per_row;
        te->bytes = (int64_t)e->bytes;
        te->outlier_cols = -1;
        r->n_tensors++;
        /* Its error against the reference's values, weighted as every run's. */
        const float *mw = NULL;
        const size_t n = (size_t)(e->nrows * e->n_per_row);
        float *src = malloc(n * sizeof *src);
        ql_weight_error werr, *per_mat = calloc((size_t)n_mat_of(ref), sizeof *per_mat);
        memset(&werr, 0, sizeof werr);
        if (!src || !per_mat)
            st = ql_error_set(err, QL_ENOMEM, "out of memory for tensor '%s'", e->name);
        if (!st)
            st = ql_linear_decode_rows(ref, 0, e->nrows, src, err);
        if (!st)
            st = ql_calib_column_weights(q->metric_imatrix, e->name, importance_cols(ref),
                                         q->metric_buf, &mw, err);
        if (!st)
            st = measure_error(ref, gt->type, gt->data, src, mw, per_mat, err);
        if (!st)
            merge_mats(per_mat, n_mat_of(ref), &werr);
        if (!st)
            st = add_expert_records(r, te->tensor, per_mat, n_mat_of(ref), &experts_cap, err);
        free(src);
        free(per_mat);
        if (st) {
            ql_error_prefix(err, "%s: tensor '%s' (%s): ", fm->path, e->name,
                            ql_type_name(gt->type));
            break;
        }
        te->rmse = ql_weight_error_rmse(&werr);
        te->max_err = werr.max_abs;
        te->imatrix_err = werr.weighted ? werr.w_sse : (double)NAN;
        te->imatrix_err_rel = ql_weight_error_rel(&werr);
        any_weighted |= werr.weighted;
        ql_weight_error_merge(&total, &werr);
    }
    if (st)
        return st;
    r->rmse = ql_weight_error_rmse(&total);
    r->max_err = total.max_abs;
    r->imatrix_err = total.weighted && any_weighted ? total.w_sse : (double)NAN;
    r->imatrix_err_rel = any_weighted ? ql_weight_error_rel(&total) : (double)NAN;
    r->zlib_bytes = zlib_bytes(fm, plan, w, err);
    return QL_OK;
}

static ql_status build_file(ql_qweights *q, const ql_config *c, ql_qweights_result *r,
                            ql_error *err)
{
    ql_quant_plan *plan = NULL;
    ql_status st = ql_model_load(&r->file_model, c->weight_file_open, err);
    if (!st && (st = ql_model_check_same_shape(q->model, r->file_model, err)))
        ql_error_prefix(err, "not a quantization of the sweep's model: ");
    if (!st)
        st = file_plan(r->file_model, &plan, err);
    if (!st)
        st = file_weights(q, r->file_model, plan, r, err);
    if (!st)
        st = install_act(c, plan, NULL, r, err);
    if (!st) {
        r->bytes = (double)plan->bytes;
        r->params = (double)plan->params;
        r->bpw = 8.0 * r->bytes / (double)plan->params;
        r->bytes_body = (double)plan->body_bytes;
        r->params_body = (double)plan->body_params;
        r->bpw_body =
            plan->body_params > 0 ? 8.0 * r->bytes_body / (double)plan->body_params : (double)NAN;
        r->gguf_bytes = (double)r->file_model->gguf->file_size;
    }
    ql_quant_plan_free(plan);
    if (st)
        ql_qweights_result_deinit(r);
    return st;
}

/* The importance of a tensor for GPTQ's scale search, as build_weights gives it to ggml's
 * (a ql_imatrix_lookup_fn over the slot's imatrix; one tensor at a time). */
typedef struct {
    ql_qweights *q;
    const ql_imatrix *im;
} gptq_importance;

static const float *gptq_imatrix(void *ctx, const char *tensor, int64_t n_per_row, int64_t n_mats)
{
    const gptq_importance *g = ctx;
    const float *out = NULL;
    ql_error e;
    if (ql_calib_column_weights(g->im, tensor, n_per_row * n_mats, g->q->imat_buf, &out, &e))
        return NULL;
    return out;
}

/* With quantizer gptq: the key of the config's GPTQ tensors (gkey) and, unless every one
 * of them is cached under it, GPTQ's layer-by-layer pass over the calibration text of the
 * config's calib: imatrix for the plan's types (q->gset). */
static ql_status gptq_prepare(ql_qweights *q, ql_calib *cal, const ql_config *c,
                              const ql_calib_slot *slot, const ql_quant_plan *plan,
                              const ql_outlier_set *os, double *seconds, ql_error *err)
{
    q->gkey[0] = '\0';
    if (!c->quantizer_gptq)
        return QL_OK;
    const double t0 = ql_now();
    ql_ppl_data d;
    char text_sha[65];
    ql_status st = ql_calib_config_text(cal, c, &d, text_sha, err);
    if (st)
        return ql_error_prefix(err, "quantizer gptq: ");
    /* The key: the quantizer, the text's chunks, the importance, the outlier split (its
     * channels follow from the text and the ratio), every tensor's type. */
    char qv[QL_CONFIG_VALUE_MAX];
    ql_config_axis_string(c, QL_AXIS_QUANTIZER, qv, sizeof qv);
    size_t cap = 512 + (size_t)plan->n * (QL_QUANT_NAME_MAX + 16), len = 0;
    char *k = malloc(cap);
    if (!k) {
        ql_ppl_data_deinit(&d);
        return ql_error_set(err, QL_ENOMEM, "out of memory for a GPTQ key");
    }
    const char *im_sha = ql_calib_slot_sha256(slot);
    len += (size_t)snprintf(k + len, cap - len, "%s|%s|%d|%lld|%s", qv, text_sha, d.ctx,
                            (long long)d.n_chunks, im_sha ? im_sha : "");
    if (os)
        len += (size_t)snprintf(k + len, cap - len, "|outliers=%.17g", os->ratio);
    for (int64_t i = 0; i < plan->n && len < cap; i++)
        len += (size_t)snprintf(k + len, cap - len, "|%s=%s", plan->entries[i].name,
                                ql_type_name(plan->entries[i].used));
    ql_sha256_hex(k, len < cap ? len : cap, q->gkey);
    free(k);
    bool all_cached = true;
    const ql_imatrix *im = ql_calib_slot_imatrix(slot);
    for (int64_t i = 0; i < plan->n && all_cached; i++) {
        const ql_quant_plan_entry *e = &plan->entries[i];
        const ql_linear *lin = ql_weights_find(q->model->weights, e->name);
        if (lin && e->role != QL_ROLE_VECTOR && e->role != QL_ROLE_KEEP && gptq_tensor(q, e, lin))
            all_cached = qcache_find(&q->cache, e->name, e->used, im,
                                     cache_cols(site_outliers(os, site_of(q->model->weights, lin)),
                                                e->used),
                                     q->gkey) != NULL;
    }
    if (!all_cached) {
        gptq_importance gi = {q, im};
        ql_gptq_pass_opts po = {.gptq = c->gptq,
                                .imatrix = im ? gptq_imatrix : NULL,
                                .imatrix_ctx = &gi,
                                .mem = q->gptq_bytes,
                                .outliers = os,
                                .quiet = q->quiet};
        ql_gptq_pass_summary sum;
        st = ql_gptq_pass_run(q->model, plan, &d, &po, &q->gset, &sum, err);
        if (st)
            ql_error_prefix(err, "quantizer gptq: ");
        else if (!q->quiet)
            fprintf(stderr,
                    "qlab: gptq: %lld tensors by GPTQ on %lld chunks of %d tokens, %.1f MiB "
                    "planned (Hessians of a block %.1f MiB), %.2f s\n",
                    (long long)sum.n_gptq, (long long)d.n_chunks, d.ctx,
                    (double)sum.bytes_planned / 1048576.0, (double)sum.hessian_bytes / 1048576.0,
                    ql_now() - t0);
    }
    ql_ppl_data_deinit(&d);
    if (st)
        q->gkey[0] = '\0';
    *seconds = ql_now() - t0;
    return st;
}

ql_status ql_qweights_build(ql_qweights *q, ql_calib *cal, const ql_config *c, ql_calib_slot *slot,
                            ql_qweights_result *r, ql_error *err)
{
    memset(r, 0, sizeof *r);
    r->predicted_kld = r->calib_kld = (double)NAN;
    if (c->weight_file[0])
        return build_file(q, c, r, err);
    ql_quant_plan *plan;
    ql_status st = build_plan(q, cal, c, slot, &plan, &r->predicted_kld, err);
    if (st)
        return st;
    /* Trimmed before the config's tensors are made (the previous config's weight set is
     * freed by now): what this config can reuse stays. */
    qcache_trim(&q->cache, plan);
    const ql_outlier_set *os = NULL;
    if ((st = ql_calib_config_outliers(cal, c, slot, &os, err))) {
        ql_quant_plan_free(plan);
        return st;
    }
    q->cache.clock++;
    double gptq_seconds = 0;
    if ((st = gptq_prepare(q, cal, c, slot, plan, os, &gptq_seconds, err))) {
        ql_quant_plan_free(plan);
        return st;
    }
    uint64_t outlier_bytes = 0, outlier_bytes_body = 0;
    st = build_weights(q, plan, ql_calib_slot_imatrix(slot), os, r, &outlier_bytes,
                       &outlier_bytes_body, err);
    r->quantize_seconds += gptq_seconds;
    ql_gptq_set_free(q->gset);
    q->gset = NULL;
    q->gkey[0] = '\0';
    if (!st)
        st = install_act(c, plan, os, r, err);
    if (!st) {
        /* Sizes: the quantized tensors plus the exact columns of an outlier split. */
        double bytes = (double)(plan->bytes + outlier_bytes);
        double body = (double)(plan->body_bytes + outlier_bytes_body);
        r->bytes = bytes;
        r->params = (double)plan->params;
        r->bpw = 8.0 * bytes / (double)plan->params;
        r->bytes_body = body;
        r->params_body = (double)plan->body_params;
        r->bpw_body = plan->body_params > 0 ? 8.0 * body / (double)plan->body_params : (double)NAN;
        ql_error gerr;
        r->gguf_bytes = plan_gguf_bytes(q->model->gguf, plan, &gerr);
    }
    ql_quant_plan_free(plan);
    if (st)
        ql_qweights_result_deinit(r);
    return st;
}

void ql_qweights_result_deinit(ql_qweights_result *r)
{
    /* The activation plan outlives the set's use: free the set first. */
    ql_weights_free(r->weights);
    ql_act_plan_free(r->act);
    ql_model_free(r->file_model); /* after the set that reads its memory map */
    free(r->tensors);
    free(r->names);
    free(r->reasons);
    free(r->choices);
    free(r->site_q);
    free(r->acts);
    free(r->act_names);
    free(r->act_notes);
    free(r->experts);
    memset(r, 0, sizeof *r);
}
