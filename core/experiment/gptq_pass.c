/* GPTQ over a whole model, layer by layer. See gptq_pass.h. */
#include "experiment/gptq_pass.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/progress.h"
#include "base/util.h"
#include "formats/quant_split.h"
#include "formats/types.h"
#include "model/forward.h"
#include "model/gguf.h"

/* ========================================================================= */
/* The Hessians of one block                                                  */

int ql_hess_input_of(ql_site_kind kind)
{
    switch (kind) {
    case QL_SITE_Q:
    case QL_SITE_K:
    case QL_SITE_V:
        return QL_HESS_ATTN_IN;
    case QL_SITE_O:
        return QL_HESS_ATTN_OUT;
    case QL_SITE_GATE:
    case QL_SITE_UP:
    case QL_SITE_GATE_SHEXP:
    case QL_SITE_UP_SHEXP:
        return QL_HESS_FFN_IN;
    case QL_SITE_DOWN:
        return QL_HESS_FFN_DOWN;
    case QL_SITE_DOWN_SHEXP:
        return QL_HESS_SHEXP_DOWN;
    default:
        return -1;
    }
}

typedef struct {
    int64_t n_in;
    int leader;    /* the block's first site reading this input: the one summed */
    double *H;     /* (n_in, n_in): the lower triangle while summing */
    int64_t n_tok; /* tokens summed */
    bool full;     /* the upper triangle mirrored */
    ql_gptq_factor *factor; /* made on first use, shared by the input's products */
    const ql_outlier_cols *factor_keep; /* the channels left out of it (NULL: none) */
} hess_input;

struct ql_hessians {
    int layer;
    bool oom; /* a tile buffer could not be allocated: the sums are incomplete */
    hess_input in[QL_HESS_INPUTS];
    /* Routed experts e0 .. e1 - 1 of a mixture (e1 = e0 = 0 for a dense block): expert
     * e's gate/up input ex_in[e - e0] over the rows routed to it (summed at the gate's
     * site) and its down input ex_down[e - e0]. */
    int e0, e1;
    int site_gate_exps, site_down_exps;
    hess_input *ex_in, *ex_down;
};

/* Tokens converted to double at a time while summing. */
#define HESS_TILE 32

/* Bytes of one n x n Hessian. */
static size_t sq_bytes(int64_t n)
{
    return (size_t)n * (size_t)n * sizeof(double);
}

/* The input widths of a block's routed experts (0, 0 for a dense block). */
static void expert_widths(const ql_weights *w, int layer, int64_t *n_in, int64_t *n_down,
                          int *n_expert)
{
    const int sg = ql_weights_site(w, layer, QL_SITE_GATE_EXPS);
    const int sd = ql_weights_site(w, layer, QL_SITE_DOWN_EXPS);
    *n_in = sg >= 0 ? w->lin[sg].n_in : 0;
    *n_down = sd >= 0 ? w->lin[sd].n_in : 0;
    *n_expert = sg >= 0 ? w->lin[sg].n_expert : sd >= 0 ? w->lin[sd].n_expert : 0;
}

size_t ql_hessians_dense_bytes(const ql_weights *w, int layer)
{
    size_t bytes = 0;
    bool seen[QL_HESS_INPUTS] = {false};
    for (int s = w->layer_site0[layer]; s < w->layer_site0[layer + 1]; s++) {
        const int in = ql_hess_input_of(w->lin[s].kind);
        if (in < 0 || seen[in])
            continue;
        seen[in] = true;
        bytes += sq_bytes(w->lin[s].n_in);
    }
    return bytes;
}

size_t ql_hessians_expert_bytes(const ql_weights *w, int layer)
{
    int64_t n_in, n_down;
    int n_expert;
    expert_widths(w, layer, &n_in, &n_down, &n_expert);
    return n_expert > 0 ? sq_bytes(n_in) + sq_bytes(n_down) : 0;
}

int ql_hessians_n_expert(const ql_weights *w, int layer)
{
    int64_t n_in, n_down;
    int n_expert;
    expert_widths(w, layer, &n_in, &n_down, &n_expert);
    return n_expert;
}

size_t ql_hessians_bytes(const ql_weights *w, int layer)
{
    return ql_hessians_dense_bytes(w, layer) +
           (size_t)ql_hessians_n_expert(w, layer) * ql_hessians_expert_bytes(w, layer);
}

static ql_status hess_input_alloc(hess_input *hi, int leader, const ql_linear *lin, ql_error *err)
{
    hi->leader = leader;
    hi->n_in = lin->n_in;
    hi->H = calloc((size_t)lin->n_in * (size_t)lin->n_in, sizeof(double));
    if (!hi->H)
        return ql_error_set(err, QL_ENOMEM,
                            "out of memory for the %lld x %lld Hessian of '%s' (%zu bytes)",
                            (long long)lin->n_in, (long long)lin->n_in, lin->name,
                            sq_bytes(lin->n_in));
    return QL_OK;
}

static void hess_input_free(hess_input *hi)
{
    free(hi->H);
    ql_gptq_factor_free(hi->factor);
    hi->H = NULL;
    hi->factor = NULL;
    hi->factor_keep = NULL;
}

ql_status ql_hessians_alloc_slice(ql_hessians **out, const ql_weights *w, int layer, bool dense,
                                  int e0, int e1, ql_error *err)
{
    *out = NULL;
    ql_hessians *h = calloc(1, sizeof *h);
    if (!h)
        return ql_error_set(err, QL_ENOMEM, "out of memory for a block's Hessians");
    h->layer = layer;
    for (int i = 0; i < QL_HESS_INPUTS; i++)
        h->in[i].leader = -1;
    ql_status st = QL_OK;
    for (int s = w->layer_site0[layer]; s < w->layer_site0[layer + 1] && dense && !st; s++) {
        const int in = ql_hess_input_of(w->lin[s].kind);
        if (in >= 0 && h->in[in].leader < 0)
            st = hess_input_alloc(&h->in[in], s, &w->lin[s], err);
    }
    const int n_expert = ql_hessians_n_expert(w, layer);
    e0 = e0 < 0 ? 0 : e0;
    e1 = e1 > n_expert ? n_expert : e1;
    h->site_gate_exps = ql_weights_site(w, layer, QL_SITE_GATE_EXPS);
    h->site_down_exps = ql_weights_site(w, layer, QL_SITE_DOWN_EXPS);
    if (!st && e1 > e0) {
        h->e0 = e0;
        h->e1 = e1;
        h->ex_in = calloc((size_t)(e1 - e0), sizeof *h->ex_in);
        h->ex_down = calloc((size_t)(e1 - e0), sizeof *h->ex_down);
        if (!h->ex_in || !h->ex_down)
            st = ql_error_set(err, QL_ENOMEM, "out of memory for a block's Hessians");
        for (int e = 0; e < e1 - e0 && !st; e++) {
            if (h->site_gate_exps >= 0)
                st = hess_input_alloc(&h->ex_in[e], h->site_gate_exps, &w->lin[h->site_gate_exps],
                                      err);
            if (!st && h->site_down_exps >= 0)
                st = hess_input_alloc(&h->ex_down[e], h->site_down_exps,
                                      &w->lin[h->site_down_exps], err);
        }
    }
    if (st) {
        ql_hessians_free(h);
        return st;
    }
    *out = h;
    return QL_OK;
}

ql_status ql_hessians_alloc(ql_hessians **out, const ql_weights *w, int layer, ql_error *err)
{
    return ql_hessians_alloc_slice(out, w, layer, true, 0, ql_hessians_n_expert(w, layer), err);
}

void ql_hessians_free(ql_hessians *h)
{
    if (!h)
        return;
    for (int i = 0; i < QL_HESS_INPUTS; i++)
        hess_input_free(&h->in[i]);
    for (int e = 0; e < h->e1 - h->e0; e++) {
        if (h->ex_in)
            hess_input_free(&h->ex_in[e]);
        if (h->ex_down)
            hess_input_free(&h->ex_down[e]);
    }
    free(h->ex_in);
    free(h->ex_down);
    free(h);
}

/* hi->H's lower triangle += x^T x over n_tok rows of x. */
static void hess_add(ql_hessians *h, hess_input *hi, const float *x, int64_t n_tok)
{
    const int64_t n = hi->n_in;
    double *H = hi->H;
    /* Row a of the lower triangle on one thread, tokens in order: the sums do not
     * depend on the thread count. The float products are exact in double. Tokens in
     * tiles of HESS_TILE rows converted to double once, which stay in cache while every
     * row of H takes them. */
    double *xd = malloc((size_t)HESS_TILE * (size_t)n * sizeof *xd);
    if (!xd) {
        h->oom = true;
        return;
    }
    for (int64_t t0 = 0; t0 < n_tok; t0 += HESS_TILE) {
        const int64_t nt = n_tok - t0 < HESS_TILE ? n_tok - t0 : HESS_TILE;
        for (int64_t k = 0; k < nt * n; k++)
            xd[k] = (double)x[t0 * n + k];
#pragma omp parallel for schedule(dynamic, 16) num_threads(ql_threads_get()) if (n >= 64)
        for (int64_t a = 0; a < n; a++) {
            double *Ha = H + a * n;
            for (int64_t t = 0; t < nt; t++) {
                const double *xt = xd + t * n;
                const double xa = xt[a];
                if (xa == 0.0)
                    continue;
                /* Each element on its own (no reduction): vector lanes give the same
                 * sums as scalar code. */
#pragma omp simd
                for (int64_t b = 0; b <= a; b++)
                    Ha[b] += xa * xt[b];
            }
        }
    }
    free(xd);
    hi->n_tok += n_tok;
}

void ql_hessians_observe(void *hessians, int site, const ql_linear *lin, const float *x,
                         int64_t n_tok)
{
    ql_hessians *h = hessians;
    if (lin->layer != h->layer)
        return;
    if (ql_site_kind_experts(lin->kind)) {
        /* An expert's view (forward.h): the rows routed to expert lin->expert. */
        const int e = lin->expert;
        if (e < h->e0 || e >= h->e1)
            return;
        hess_input *hi = site == h->site_gate_exps   ? &h->ex_in[e - h->e0]
                         : site == h->site_down_exps ? &h->ex_down[e - h->e0]
                                                     : NULL;
        if (hi && hi->H && lin->n_in == hi->n_in)
            hess_add(h, hi, x, n_tok);
        return;
    }
    const int in = ql_hess_input_of(lin->kind);
    if (in < 0 || h->in[in].leader != site)
        return;
    hess_add(h, &h->in[in], x, n_tok);
}

/* hi's full symmetric matrix, or NULL when nothing was summed. */
static const double *hess_full(ql_hessians *h, hess_input *hi, int64_t *n_in, int64_t *n_tok)
{
    if (n_in)
        *n_in = hi->n_in;
    if (n_tok)
        *n_tok = hi->n_tok;
    if (!hi->H || hi->n_tok == 0 || h->oom)
        return NULL;
    if (!hi->full) {
        for (int64_t a = 0; a < hi->n_in; a++)
            for (int64_t b = a + 1; b < hi->n_in; b++)
                hi->H[a * hi->n_in + b] = hi->H[b * hi->n_in + a];
        hi->full = true;
    }
    return hi->H;
}

const double *ql_hessians_get(ql_hessians *h, ql_site_kind kind, int64_t *n_in, int64_t *n_tok)
{
    const int in = ql_hess_input_of(kind);
    if (in < 0)
        return NULL;
    return hess_full(h, &h->in[in], n_in, n_tok);
}

/* The input of expert e's product of a kind, NULL when outside the slice. */
static hess_input *expert_input(ql_hessians *h, ql_site_kind kind, int e)
{
    if (!ql_site_kind_experts(kind) || e < h->e0 || e >= h->e1)
        return NULL;
    return kind == QL_SITE_DOWN_EXPS ? &h->ex_down[e - h->e0] : &h->ex_in[e - h->e0];
}

const double *ql_hessians_get_expert(ql_hessians *h, ql_site_kind kind, int e, int64_t *n_in,
                                     int64_t *n_tok)
{
    if (n_in)
        *n_in = 0;
    if (n_tok)
        *n_tok = 0;
    hess_input *hi = expert_input(h, kind, e);
    return hi ? hess_full(h, hi, n_in, n_tok) : NULL;
}

static int64_t n_kept(const ql_outlier_cols *keep)
{
    return keep ? keep->n : 0;
}

static bool same_channels(const ql_outlier_cols *a, const ql_outlier_cols *b)
{
    const int64_t n = n_kept(a);
    return n == n_kept(b) && (n == 0 || memcmp(a->cols, b->cols, (size_t)n * sizeof *a->cols) == 0);
}

/* H (n x n, full) restricted to the channels an outlier split quantizes: the kept ones'
 * rows and columns zeroed, their diagonal 1. Their weights are exact, so the split
 * product's error is e H e^T over the other columns only; GPTQ then neither rounds them
 * nor spreads error into them (as for an input that is never non-zero). */
static void restrict_hessian(double *H, int64_t n, const ql_outlier_cols *keep)
{
    for (int64_t k = 0; k < keep->n; k++) {
        const int64_t j = keep->cols[k];
        for (int64_t i = 0; i < n; i++)
            H[i * n + j] = H[j * n + i] = 0.0;
        H[j * n + j] = 1.0;
    }
}

static ql_status hess_factor(ql_hessians *h, hess_input *hi, const ql_gptq_opts *o,
                             const ql_outlier_cols *keep, const ql_gptq_factor **out,
                             ql_error *err)
{
    *out = NULL;
    int64_t n_in = 0;
    double *H = (double *)hess_full(h, hi, &n_in, NULL);
    if (!H)
        return ql_error_set(err, h->oom ? QL_ENOMEM : QL_EINVAL,
                            h->oom ? "out of memory summing its Hessian"
                                   : "no Hessian was observed for its input (no calibration "
                                     "token reached it)");
    if (!hi->factor) {
        if (n_kept(keep) > 0)
            restrict_hessian(H, n_in, keep);
        ql_status st = ql_gptq_factor_alloc(&hi->factor, H, n_in, o, err);
        if (st)
            return st;
        hi->factor_keep = n_kept(keep) > 0 ? keep : NULL;
    } else if (!same_channels(hi->factor_keep, keep)) {
        return ql_error_set(err, QL_EINVAL,
                            "its outlier channels (%lld) are not those of the product it shares "
                            "its input with (%lld), so the two cannot share one restricted "
                            "Hessian",
                            (long long)n_kept(keep), (long long)n_kept(hi->factor_keep));
    }
    *out = hi->factor;
    return QL_OK;
}

ql_status ql_hessians_factor(ql_hessians *h, ql_site_kind kind, const ql_gptq_opts *o,
                             const ql_outlier_cols *keep, const ql_gptq_factor **out,
                             ql_error *err)
{
    *out = NULL;
    const int in = ql_hess_input_of(kind);
    if (in < 0)
        return ql_error_set(err, QL_EINVAL, "no Hessian is collected for its input");
    return hess_factor(h, &h->in[in], o, keep, out, err);
}

/* ========================================================================= */
/* The pass                                                                   */

typedef struct {
    char name[96];
    int32_t type;
    void *bytes;
    uint64_t nbytes;
    /* An outlier split's kept channels (NULL: none) and their exact values, (rows, n):
     * the pass's own quantized block reads them, as the config's product does. */
    const ql_outlier_cols *keep;
    float *exact;
} set_entry;

struct ql_gptq_set {
    set_entry *e;
    int64_t n, cap;
};

void ql_gptq_set_free(ql_gptq_set *s)
{
    if (!s)
        return;
    for (int64_t i = 0; i < s->n; i++) {
        free(s->e[i].bytes);
        free(s->e[i].exact);
    }
    free(s->e);
    free(s);
}

const void *ql_gptq_set_lookup(void *set, const char *tensor, int32_t type, uint64_t nbytes)
{
    const ql_gptq_set *s = set;
    for (int64_t i = 0; i < s->n; i++)
        if (strcmp(s->e[i].name, tensor) == 0)
            return s->e[i].type == type && s->e[i].nbytes == nbytes ? s->e[i].bytes : NULL;
    return NULL;
}

size_t ql_gptq_pass_bytes(const ql_model *m, const ql_ppl_data *calib, int experts)
{
    const ql_weights *w = m->weights;
    size_t block = 0;
    int64_t max_in = 0;
    for (int l = 0; l < w->n_layer; l++) {
        const int n_expert = ql_hessians_n_expert(w, l);
        const int k = experts < 1 || experts > n_expert ? n_expert : experts;
        int64_t ex_in, ex_down;
        int ne;
        expert_widths(w, l, &ex_in, &ex_down, &ne);
        /* The dense inputs' Hessians and their factors (one per input, n_in^2 doubles
         * each, kept while the block is quantized); a slice of k experts' Hessians and
         * the factor of one expert's input at a time. */
        const size_t dense = ql_hessians_dense_bytes(w, l);
        size_t b = 2 * dense;
        if (k > 0)
            b += (size_t)k * ql_hessians_expert_bytes(w, l) +
                 sq_bytes(ex_in > ex_down ? ex_in : ex_down);
        block = b > block ? b : block;
    }
    for (int s = 0; s < w->n_lin - 1; s++)
        max_in = w->lin[s].n_in > max_in ? w->lin[s].n_in : max_in;
    /* One factorization's and the rows' work. */
    const size_t work = ql_gptq_work_bytes(max_in, ql_threads_get());
    const size_t streams =
        (size_t)calib->n_chunks * (size_t)calib->ctx * (size_t)m->hp.n_embd * sizeof(float);
    const size_t bind = ql_weights_layer_floats(w) * sizeof(float);
    return block + work + streams + bind;
}

int ql_gptq_pass_experts_per_slice(const ql_model *m, const ql_ppl_data *calib, size_t mem)
{
    int n_expert = 0;
    for (int l = 0; l < m->weights->n_layer; l++) {
        const int ne = ql_hessians_n_expert(m->weights, l);
        n_expert = ne > n_expert ? ne : n_expert;
    }
    const int all = n_expert > 0 ? n_expert : 1;
    if (!mem || ql_gptq_pass_bytes(m, calib, all) <= mem)
        return all;
    if (n_expert == 0 || ql_gptq_pass_bytes(m, calib, 1) > mem)
        return 0;
    /* The plan grows with k: the largest k that fits. */
    int lo = 1, hi = n_expert;
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        if (ql_gptq_pass_bytes(m, calib, mid) <= mem)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static const ql_quant_plan_entry *plan_find(const ql_quant_plan *p, const char *name)
{
    for (int64_t i = 0; i < p->n; i++)
        if (strcmp(p->entries[i].name, name) == 0)
            return &p->entries[i];
    return NULL;
}

/* The importance weights of a tensor (n_mats vectors) from o->imatrix, or NULL. */
static const float *importance(const ql_gptq_pass_opts *o, const ql_quant_plan_entry *e)
{
    return o->imatrix ? o->imatrix(o->imatrix_ctx, e->name, e->n_per_row, e->ne[2] * e->ne[3])
                      : NULL;
}

/* The channels site s keeps exact in the pass's options, or NULL: none, or a type that
 * keeps them inside its own blocks (Q8_0_XC, whose bytes the config's own split makes). */
static const ql_outlier_cols *kept_channels(const ql_gptq_pass_opts *o, int s,
                                            const ql_quant_plan_entry *e)
{
    if (!o->outliers || s >= o->outliers->n_sites || o->outliers->site[s].n == 0 ||
        ql_type_get(e->used)->exact_outliers)
        return NULL;
    return &o->outliers->site[s];
}

/* Rows of matrix `mat` of a tensor (all of it with mat = -1) in the plan's type into dst
 * (the whole tensor's bytes), by GPTQ with factor, or by ggml's quantizer with NULL;
 * imatrix: the tensor's importance (importance()) or NULL. With keep (an outlier split's
 * channels), the rows are quantized with those columns and their importance zeroed, and
 * their exact values go to exact (the tensor's rows x keep->n, row-major). */
static ql_status quantize_rows(const ql_linear *lin, const ql_gguf_tensor *gt,
                               const ql_quant_plan_entry *e, const float *imatrix, int64_t mat,
                               const ql_gptq_factor *factor, const ql_outlier_cols *keep,
                               void *dst, float *exact, ql_error *err)
{
    ql_quant_src qs;
    ql_quant_src_from_gguf(&qs, gt);
    const int64_t n_mats = e->ne[2] * e->ne[3], rows = e->nrows / n_mats, n_in = e->n_per_row;
    qs.imatrix = imatrix;
    qs.imatrix_per_mat = true;
    const int64_t row0 = mat < 0 ? 0 : mat * rows, nrows = mat < 0 ? e->nrows : rows;
    const ql_gptq_factor **facs = NULL;
    float *f32 = NULL, *imat0 = NULL;
    ql_status st = QL_OK;
    if (factor) {
        /* ql_quant_src takes one factor per matrix; only `mat`'s rows are asked for. */
        if (!(facs = calloc((size_t)n_mats, sizeof *facs))) {
            st = ql_error_set(err, QL_ENOMEM, "gptq: out of memory");
            goto out;
        }
        for (int64_t i = 0; i < n_mats; i++)
            facs[i] = mat < 0 || i == mat ? factor : NULL;
        qs.gptq = facs;
    }
    if (keep) {
        if (keep->n_in != n_in) {
            st = ql_error_set(err, QL_EINVAL,
                              "outlier channels for %lld inputs on a %lld-wide matrix",
                              (long long)keep->n_in, (long long)n_in);
            goto out;
        }
        /* The split's zeroed copy of the rows, the exact columns aside. */
        if (!(f32 = malloc((size_t)(nrows * n_in) * sizeof *f32))) {
            st = ql_error_set(err, QL_ENOMEM, "gptq: out of memory for %lld rows in f32",
                              (long long)nrows);
            goto out;
        }
        if ((st = ql_linear_decode_rows(lin, row0, nrows, f32, err)))
            goto out;
        for (int64_t r = 0; r < nrows; r++)
            for (int64_t k = 0; k < keep->n; k++)
                exact[(row0 + r) * keep->n + k] = f32[r * n_in + keep->cols[k]];
        ql_outliers_zero_cols(f32, nrows, n_in, keep->cols, keep->n);
        qs.rows = f32;
        qs.rows_first = row0;
        qs.rows_n = nrows;
        if (imatrix) {
            if (!(imat0 = malloc((size_t)(n_mats * n_in) * sizeof *imat0))) {
                st = ql_error_set(err, QL_ENOMEM, "gptq: out of memory");
                goto out;
            }
            memcpy(imat0, imatrix, (size_t)(n_mats * n_in) * sizeof *imat0);
            ql_outliers_zero_cols(imat0, n_mats, n_in, keep->cols, keep->n);
            qs.imatrix = imat0;
        }
    }
    const size_t rs = ql_row_size(e->used, n_in);
    uint8_t *out = (uint8_t *)dst + (size_t)row0 * rs;
    st = ql_quant_tensor_rows(&qs, e->used, row0, nrows, out, (size_t)nrows * rs, err);
out:
    free(facs);
    free(f32);
    free(imat0);
    return st;
}

/* The block's products that change type, with their set entries (index into set->e by
 * site, -1 where none). Made in the first slice. */
static ql_status add_entries(const ql_model *m, const ql_weights *ws, int l,
                             const ql_quant_plan *plan, const ql_gptq_pass_opts *o,
                             ql_gptq_set *set, int64_t *entry, ql_error *err)
{
    for (int s = ws->layer_site0[l]; s < ws->layer_site0[l + 1]; s++) {
        const ql_linear *lin = &ws->lin[s];
        const ql_quant_plan_entry *e = plan_find(plan, lin->name);
        const ql_gguf_tensor *gt = ql_gguf_find_tensor(m->gguf, lin->name);
        entry[s] = -1;
        if (!e || !gt || e->used == gt->type)
            continue;
        set_entry *se = &set->e[set->n];
        ql_strlcpy(se->name, lin->name, sizeof se->name);
        se->type = e->used;
        se->nbytes = e->bytes;
        se->keep = kept_channels(o, s, e);
        if (!(se->bytes = malloc((size_t)e->bytes)) ||
            (se->keep &&
             !(se->exact = malloc((size_t)(e->nrows * se->keep->n) * sizeof *se->exact)))) {
            free(se->bytes);
            se->bytes = NULL;
            return ql_error_set(err, QL_ENOMEM, "gptq: out of memory for '%s' (%llu bytes)",
                                lin->name, (unsigned long long)e->bytes);
        }
        entry[s] = set->n++;
    }
    return QL_OK;
}

/* Whether site s's tensor is quantized expert by expert (a routed expert's product in a
 * type GPTQ splits). */
static bool per_expert(const ql_linear *lin, const ql_quant_plan_entry *e)
{
    return ql_site_kind_experts(lin->kind) && lin->n_expert > 1 && ql_split_applies(e->used);
}

/* Quantizes block l's products of the slice: with dense, every product that is not
 * quantized expert by expert (GPTQ with its input's Hessian where the type splits and
 * the product has one, ggml's quantizer otherwise); then experts e0..e1-1 of the
 * routed products, GPTQ with each expert's own Hessians, ggml's rounding for an expert
 * no calibration row reached (its Hessian is zero). */
static ql_status quantize_slice(const ql_model *m, ql_weights *ws, int l, const ql_quant_plan *plan,
                                ql_hessians *h, const ql_gptq_pass_opts *o, ql_gptq_set *set,
                                const int64_t *entry, bool dense, ql_gptq_pass_summary *sum,
                                ql_error *err)
{
    ql_status st = QL_OK;
    for (int s = ws->layer_site0[l]; s < ws->layer_site0[l + 1] && dense; s++) {
        const ql_linear *lin = &ws->lin[s];
        if (entry[s] < 0)
            continue;
        const ql_quant_plan_entry *e = plan_find(plan, lin->name);
        const ql_gguf_tensor *gt = ql_gguf_find_tensor(m->gguf, lin->name);
        if (per_expert(lin, e)) {
            sum->n_gptq++;
            continue;
        }
        const ql_gptq_factor *factor = NULL;
        /* The router and the shared expert's gate have no Hessian here: ggml's rounding,
         * as GPTQ leaves the layers whose outputs are not a linear product's. */
        if (ql_split_applies(e->used) && ql_hess_input_of(lin->kind) >= 0) {
            if ((st = ql_hessians_factor(h, lin->kind, &o->gptq, set->e[entry[s]].keep, &factor,
                                         err)))
                return ql_error_prefix(err, "gptq: tensor '%s': ", lin->name);
            sum->n_gptq++;
        } else {
            sum->n_ggml++;
        }
        const set_entry *se = &set->e[entry[s]];
        if ((st = quantize_rows(lin, gt, e, importance(o, e), -1, factor, se->keep, se->bytes,
                                se->exact, err)))
            return ql_error_prefix(err, "gptq: tensor '%s' (%s): ", lin->name,
                                   ql_type_name(e->used));
    }
    const ql_site_kind kinds[3] = {QL_SITE_GATE_EXPS, QL_SITE_UP_EXPS, QL_SITE_DOWN_EXPS};
    /* The expert tensors' importance, looked up once for the slice (the lookup's buffer
     * may be reused by its next call). */
    float *imat[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3 && h->e1 > h->e0; k++) {
        const int s = ql_weights_site(ws, l, kinds[k]);
        const ql_quant_plan_entry *e = s >= 0 && entry[s] >= 0 ? plan_find(plan, ws->lin[s].name)
                                                               : NULL;
        const float *im = e && per_expert(&ws->lin[s], e) ? importance(o, e) : NULL;
        if (!im)
            continue;
        const size_t n = (size_t)(e->n_per_row * e->ne[2] * e->ne[3]);
        if (!(imat[k] = malloc(n * sizeof *imat[k]))) {
            st = ql_error_set(err, QL_ENOMEM, "gptq: out of memory for '%s''s importance",
                              e->name);
            goto out;
        }
        memcpy(imat[k], im, n * sizeof *imat[k]);
    }
    for (int ex = h->e0; ex < h->e1; ex++) {
        bool unrouted = false;
        for (int k = 0; k < 3; k++) {
            const int s = ql_weights_site(ws, l, kinds[k]);
            if (s < 0 || entry[s] < 0)
                continue;
            const ql_linear *lin = &ws->lin[s];
            const ql_quant_plan_entry *e = plan_find(plan, lin->name);
            if (!per_expert(lin, e))
                continue;
            const ql_gguf_tensor *gt = ql_gguf_find_tensor(m->gguf, lin->name);
            hess_input *hi = expert_input(h, lin->kind, ex);
            const ql_gptq_factor *factor = NULL;
            if (h->oom) {
                st = ql_error_set(err, QL_ENOMEM,
                                  "gptq: tensor '%s': out of memory summing its Hessians",
                                  lin->name);
                goto out;
            }
            if (hi->n_tok > 0) {
                if ((st = hess_factor(h, hi, &o->gptq, set->e[entry[s]].keep, &factor, err))) {
                    ql_error_prefix(err, "gptq: tensor '%s' expert %d: ", lin->name, ex);
                    goto out;
                }
            } else {
                unrouted = true;
            }
            const set_entry *se = &set->e[entry[s]];
            if ((st = quantize_rows(lin, gt, e, imat[k], ex, factor, se->keep, se->bytes,
                                    se->exact, err))) {
                ql_error_prefix(err, "gptq: tensor '%s' (%s) expert %d: ", lin->name,
                                ql_type_name(e->used), ex);
                goto out;
            }
            /* Up shares gate's factor; each expert's are dropped once it is done. */
            if (kinds[k] != QL_SITE_GATE_EXPS)
                hess_input_free(hi);
        }
        hess_input *gi = expert_input(h, QL_SITE_GATE_EXPS, ex);
        if (gi)
            hess_input_free(gi);
        if (unrouted) {
            sum->n_expert_unrouted++;
            if (!o->quiet)
                fprintf(stderr,
                        "qlab: gptq: block %d expert %d: no calibration token was routed to "
                        "it: its matrices get ggml's rounding\n",
                        l, ex);
        }
    }
out:
    for (int k = 0; k < 3; k++)
        free(imat[k]);
    return st;
}

ql_status ql_gptq_pass_run(const ql_model *m, const ql_quant_plan *plan, const ql_ppl_data *calib,
                           const ql_gptq_pass_opts *o, ql_gptq_set **out,
                           ql_gptq_pass_summary *summary, ql_error *err)
{
    *out = NULL;
    ql_gptq_pass_summary sum = {0};
    const ql_weights *w = m->weights;
    const int ctx = calib->ctx;
    const int64_t n_embd = m->hp.n_embd, nc = calib->n_chunks;
    if (nc < 1)
        return ql_error_set(err, QL_EINVAL, "gptq: no whole chunk of %d tokens in the calibration "
                                            "text",
                            ctx);
    int n_expert = 0;
    for (int l = 0; l < w->n_layer; l++) {
        const int ne = ql_hessians_n_expert(w, l);
        n_expert = ne > n_expert ? ne : n_expert;
    }
    const int k = ql_gptq_pass_experts_per_slice(m, calib, o->mem);
    if (k == 0) {
        sum.bytes_planned = ql_gptq_pass_bytes(m, calib, 1);
        size_t hess = 0;
        for (int l = 0; l < w->n_layer; l++) {
            const size_t b = ql_hessians_dense_bytes(w, l) + ql_hessians_expert_bytes(w, l);
            hess = b > hess ? b : hess;
        }
        return ql_error_set(err, QL_ENOMEM,
                            "gptq: the pass needs %.1f MiB (Hessians of a block %.1f MiB%s, the "
                            "residual streams of %lld chunks of %d tokens, one block in f32, the "
                            "inverse factor), over the %.1f MiB it may plan with (--mem): use "
                            "fewer calibration chunks or more memory",
                            (double)sum.bytes_planned / 1048576.0, (double)hess / 1048576.0,
                            n_expert > 0 ? " with one expert at a time" : "", (long long)nc, ctx,
                            (double)o->mem / 1048576.0);
    }
    for (int l = 0; l < w->n_layer; l++) {
        const int ne = ql_hessians_n_expert(w, l);
        const size_t b = ql_hessians_dense_bytes(w, l) +
                         (size_t)(ne < k ? ne : k) * ql_hessians_expert_bytes(w, l);
        sum.hessian_bytes = b > sum.hessian_bytes ? b : sum.hessian_bytes;
    }
    sum.bytes_planned = ql_gptq_pass_bytes(m, calib, k);
    sum.experts_per_slice = n_expert > 0 ? k : 0;
    sum.expert_slices = n_expert > 0 ? (n_expert + k - 1) / k : 0;
    if (sum.expert_slices > 1 && !o->quiet)
        fprintf(stderr,
                "qlab: gptq: the pass with all %d experts of a block at once (%.1f MiB) is over "
                "the %.1f MiB it may plan with (--mem): each block's experts in %d slices of "
                "%d, one pass over the calibration chunks each\n",
                n_expert, (double)ql_gptq_pass_bytes(m, calib, n_expert) / 1048576.0,
                (double)o->mem / 1048576.0, sum.expert_slices, k);
    ql_status st = QL_OK;
    ql_forward *fw = NULL;
    ql_weights *ws = NULL;
    ql_hessians *h = NULL;
    ql_gptq_set *set = calloc(1, sizeof *set);
    float *streams = NULL, *tmp = NULL, *bind = NULL;
    int32_t *tokens = NULL;
    ql_weight_src *srcs = calloc((size_t)w->n_lin, sizeof *srcs);
    int64_t *entry = malloc((size_t)w->n_lin * sizeof *entry);
    const size_t bind_floats = ql_weights_layer_floats(w);
    if (!set || !srcs || !entry || !(set->e = calloc((size_t)w->n_lin, sizeof *set->e)) ||
        !(streams = malloc((size_t)nc * (size_t)ctx * (size_t)n_embd * sizeof *streams)) ||
        !(tmp = malloc((size_t)ctx * (size_t)n_embd * sizeof *tmp)) ||
        !(bind = malloc(bind_floats * sizeof *bind)) ||
        !(tokens = malloc((size_t)ctx * sizeof *tokens))) {
        st = ql_error_set(err, QL_ENOMEM, "gptq: out of memory for the pass (%.1f MiB planned)",
                          (double)sum.bytes_planned / 1048576.0);
        goto out;
    }
    if ((st = ql_forward_alloc(&fw, &m->hp, ctx, err)) || (st = ql_weights_copy(&ws, w, err)))
        goto out;
    for (int64_t c = 0; c < nc && !st; c++) {
        ql_ppl_chunk_input(calib, c, tokens);
        st = ql_forward_embed(fw, ws, tokens, ctx, 0, streams + c * ctx * n_embd, err);
    }
    if (st)
        goto out;
    ql_progress prog;
    ql_progress_begin(&prog, "gptq", "block", w->n_layer, o->quiet);
    for (int l = 0; l < w->n_layer; l++) {
        if ((st = add_entries(m, ws, l, plan, o, set, entry, err)))
            goto out;
        /* Slices of the block's experts (one for a dense block), each a pass over the
         * calibration chunks through the block's unquantized weights: every slice's
         * Hessians are those of the same inputs, so the bytes do not depend on the
         * slicing. The dense inputs are summed in the first. */
        const int ne = ql_hessians_n_expert(w, l);
        const int n_slices = ne > 0 ? (ne + k - 1) / k : 1;
        for (int sl = 0; sl < n_slices; sl++) {
            double t0 = ql_now();
            const int e0 = sl * k, e1 = e0 + k < ne ? e0 + k : ne;
            if ((st = ql_hessians_alloc_slice(&h, ws, l, sl == 0, e0, e1, err)) ||
                (st = ql_weights_bind_layer(ws, l, bind, bind_floats, err)))
                goto out;
            ql_forward_set_observer(fw, ql_hessians_observe, h);
            for (int64_t c = 0; c < nc && !st; c++) {
                float *x = streams + c * ctx * n_embd;
                memcpy(tmp, x, (size_t)ctx * (size_t)n_embd * sizeof *tmp);
                st = ql_forward_block(fw, ws, l, tmp, ctx, 0, 0, NULL, err);
                if (o->gptq.inputs == QL_GPTQ_INPUTS_REFERENCE && sl == n_slices - 1)
                    memcpy(x, tmp, (size_t)ctx * (size_t)n_embd * sizeof *tmp);
            }
            ql_forward_set_observer(fw, NULL, NULL);
            ql_weights_unbind_layer(ws, l);
            if (st)
                goto out;
            double t1 = ql_now();
            sum.seconds_hessian += t1 - t0;
            if ((st = quantize_slice(m, ws, l, plan, h, o, set, entry, sl == 0, &sum, err)))
                goto out;
            sum.seconds_gptq += ql_now() - t1;
            ql_hessians_free(h);
            h = NULL;
        }
        /* The block's quantized weights, once every slice has read the unquantized ones. */
        for (int s = ws->layer_site0[l]; s < ws->layer_site0[l + 1]; s++)
            if (entry[s] >= 0) {
                const set_entry *se = &set->e[entry[s]];
                srcs[s] = (ql_weight_src){.type = se->type,
                                          .data = se->bytes,
                                          .n_exact = se->keep ? se->keep->n : 0,
                                          .exact_cols = se->keep ? se->keep->cols : NULL,
                                          .exact_vals = se->exact};
                ql_linear_set_src(&ws->lin[s], &srcs[s]);
            }
        double t2 = ql_now();
        if (o->gptq.inputs == QL_GPTQ_INPUTS_QUANTIZED) {
            if ((st = ql_weights_bind_layer(ws, l, bind, bind_floats, err)))
                goto out;
            for (int64_t c = 0; c < nc && !st; c++)
                st = ql_forward_block(fw, ws, l, streams + c * ctx * n_embd, ctx, 0, 0, NULL, err);
            ql_weights_unbind_layer(ws, l);
            if (st)
                goto out;
        }
        sum.seconds_forward += ql_now() - t2;
        ql_progress_update(&prog, l + 1, NULL);
    }
    ql_progress_end(&prog, w->n_layer, NULL);
    *out = set;
    set = NULL;
    if (summary)
        *summary = sum;
out:
    ql_hessians_free(h);
    ql_weights_free(ws);
    ql_forward_free(fw);
    ql_gptq_set_free(set);
    free(srcs);
    free(entry);
    free(streams);
    free(tmp);
    free(bind);
    free(tokens);
    return st;
}

ql_status ql_hessians_visit(const ql_model *m, const ql_ppl_data *calib, size_t mem, bool quiet,
                            ql_hessians_visit_fn fn, void *ctx, ql_error *err)
{
    const ql_weights *w = m->weights;
    const int ctxlen = calib->ctx;
    const int64_t n_embd = m->hp.n_embd, nc = calib->n_chunks;
    for (int l = 0; l < w->n_layer; l++)
        if (ql_hessians_n_expert(w, l) > 0)
            return ql_error_set(err, QL_EUNSUPPORTED,
                                "block %d is a mixture of experts: its experts' Hessians are per "
                                "expert, which this measurement does not sum",
                                l);
    if (nc < 1)
        return ql_error_set(err, QL_EINVAL,
                            "no whole chunk of %d tokens in the calibration text", ctxlen);
    const size_t need = ql_gptq_pass_bytes(m, calib, 1);
    if (mem && need > mem)
        return ql_error_set(err, QL_ENOMEM,
                            "the Hessians' pass needs %.1f MiB (a block's Hessians and their "
                            "factors, the residual streams of %lld chunks of %d tokens, one block "
                            "in f32), over the %.1f MiB it may plan with (--mem)",
                            (double)need / 1048576.0, (long long)nc, ctxlen,
                            (double)mem / 1048576.0);
    ql_status st = QL_OK;
    ql_forward *fw = NULL;
    ql_weights *ws = NULL;
    ql_hessians *h = NULL;
    const size_t bind_floats = ql_weights_layer_floats(w);
    float *streams = malloc((size_t)nc * (size_t)ctxlen * (size_t)n_embd * sizeof *streams);
    float *bind = malloc(bind_floats * sizeof *bind);
    int32_t *tokens = malloc((size_t)ctxlen * sizeof *tokens);
    if (!streams || !bind || !tokens) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory for the Hessians' pass (%.1f MiB)",
                          (double)need / 1048576.0);
        goto out;
    }
    if ((st = ql_forward_alloc(&fw, &m->hp, ctxlen, err)) || (st = ql_weights_copy(&ws, w, err)))
        goto out;
    for (int64_t c = 0; c < nc && !st; c++) {
        ql_ppl_chunk_input(calib, c, tokens);
        st = ql_forward_embed(fw, ws, tokens, ctxlen, 0, streams + c * ctxlen * n_embd, err);
    }
    ql_progress prog;
    ql_progress_begin(&prog, "hessians", "block", w->n_layer, quiet);
    for (int l = 0; l < w->n_layer && !st; l++) {
        if ((st = ql_hessians_alloc(&h, ws, l, err)) ||
            (st = ql_weights_bind_layer(ws, l, bind, bind_floats, err)))
            goto out;
        ql_forward_set_observer(fw, ql_hessians_observe, h);
        for (int64_t c = 0; c < nc && !st; c++)
            st = ql_forward_block(fw, ws, l, streams + c * ctxlen * n_embd, ctxlen, 0, 0, NULL,
                                  err);
        ql_forward_set_observer(fw, NULL, NULL);
        ql_weights_unbind_layer(ws, l);
        if (!st)
            st = fn(ctx, l, h, err);
        ql_hessians_free(h);
        h = NULL;
        ql_progress_update(&prog, l + 1, NULL);
    }
    ql_progress_end(&prog, w->n_layer, st ? "failed" : NULL);
out:
    ql_hessians_free(h);
    ql_weights_free(ws);
    ql_forward_free(fw);
    free(streams);
    free(bind);
    free(tokens);
    return st;
}
