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
        return QL_HESS_FFN_IN;
    case QL_SITE_DOWN:
        return QL_HESS_FFN_DOWN;
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
} hess_input;

struct ql_hessians {
    int layer;
    bool oom; /* a tile buffer could not be allocated: the sums are incomplete */
    hess_input in[QL_HESS_INPUTS];
};

/* Tokens converted to double at a time while summing. */
#define HESS_TILE 32

size_t ql_hessians_bytes(const ql_weights *w, int layer)
{
    size_t bytes = 0;
    bool seen[QL_HESS_INPUTS] = {false};
    for (int s = w->layer_site0[layer]; s < w->layer_site0[layer + 1]; s++) {
        const int in = ql_hess_input_of(w->lin[s].kind);
        if (in < 0 || seen[in])
            continue;
        seen[in] = true;
        bytes += (size_t)w->lin[s].n_in * (size_t)w->lin[s].n_in * sizeof(double);
    }
    return bytes;
}

ql_status ql_hessians_alloc(ql_hessians **out, const ql_weights *w, int layer, ql_error *err)
{
    *out = NULL;
    ql_hessians *h = calloc(1, sizeof *h);
    if (!h)
        return ql_error_set(err, QL_ENOMEM, "out of memory for a block's Hessians");
    h->layer = layer;
    for (int i = 0; i < QL_HESS_INPUTS; i++)
        h->in[i].leader = -1;
    for (int s = w->layer_site0[layer]; s < w->layer_site0[layer + 1]; s++) {
        const ql_linear *lin = &w->lin[s];
        const int in = ql_hess_input_of(lin->kind);
        if (in < 0) {
            ql_hessians_free(h);
            return ql_error_set(err, QL_EUNSUPPORTED,
                                "gptq: block %d has a mixture of experts ('%s'): GPTQ's Hessians "
                                "are collected for dense blocks only",
                                layer, lin->name);
        }
        if (h->in[in].leader >= 0)
            continue;
        h->in[in].leader = s;
        h->in[in].n_in = lin->n_in;
        h->in[in].H = calloc((size_t)lin->n_in * (size_t)lin->n_in, sizeof(double));
        if (!h->in[in].H) {
            ql_hessians_free(h);
            return ql_error_set(err, QL_ENOMEM,
                                "out of memory for the %lld x %lld Hessian of '%s' (%zu bytes)",
                                (long long)lin->n_in, (long long)lin->n_in, lin->name,
                                (size_t)lin->n_in * (size_t)lin->n_in * sizeof(double));
        }
    }
    *out = h;
    return QL_OK;
}

void ql_hessians_free(ql_hessians *h)
{
    if (!h)
        return;
    for (int i = 0; i < QL_HESS_INPUTS; i++) {
        free(h->in[i].H);
        ql_gptq_factor_free(h->in[i].factor);
    }
    free(h);
}

void ql_hessians_observe(void *hessians, int site, const ql_linear *lin, const float *x,
                         int64_t n_tok)
{
    ql_hessians *h = hessians;
    if (lin->layer != h->layer)
        return;
    const int in = ql_hess_input_of(lin->kind);
    if (in < 0 || h->in[in].leader != site)
        return;
    hess_input *hi = &h->in[in];
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

const double *ql_hessians_get(ql_hessians *h, ql_site_kind kind, int64_t *n_in, int64_t *n_tok)
{
    const int in = ql_hess_input_of(kind);
    if (in < 0 || !h->in[in].H || h->in[in].n_tok == 0 || h->oom)
        return NULL;
    hess_input *hi = &h->in[in];
    if (!hi->full) {
        for (int64_t a = 0; a < hi->n_in; a++)
            for (int64_t b = a + 1; b < hi->n_in; b++)
                hi->H[a * hi->n_in + b] = hi->H[b * hi->n_in + a];
        hi->full = true;
    }
    if (n_in)
        *n_in = hi->n_in;
    if (n_tok)
        *n_tok = hi->n_tok;
    return hi->H;
}

ql_status ql_hessians_factor(ql_hessians *h, ql_site_kind kind, const ql_gptq_opts *o,
                             const ql_gptq_factor **out, ql_error *err)
{
    *out = NULL;
    int64_t n_in = 0;
    const double *H = ql_hessians_get(h, kind, &n_in, NULL);
    if (!H)
        return ql_error_set(err, h->oom ? QL_ENOMEM : QL_EINVAL,
                            h->oom ? "out of memory summing its Hessian"
                                   : "no Hessian was observed for its input (no calibration "
                                     "token reached it)");
    hess_input *hi = &h->in[ql_hess_input_of(kind)];
    if (!hi->factor) {
        ql_status st = ql_gptq_factor_alloc(&hi->factor, H, n_in, o, err);
        if (st)
            return st;
    }
    *out = hi->factor;
    return QL_OK;
}

/* ========================================================================= */
/* The pass                                                                   */

typedef struct {
    char name[96];
    int32_t type;
    void *bytes;
    uint64_t nbytes;
} set_entry;

struct ql_gptq_set {
    set_entry *e;
    int64_t n, cap;
};

void ql_gptq_set_free(ql_gptq_set *s)
{
    if (!s)
        return;
    for (int64_t i = 0; i < s->n; i++)
        free(s->e[i].bytes);
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

size_t ql_gptq_pass_bytes(const ql_model *m, const ql_ppl_data *calib)
{
    const ql_weights *w = m->weights;
    size_t hess = 0, factor = 0;
    int64_t max_in = 0;
    for (int l = 0; l < w->n_layer; l++) {
        const size_t b = ql_hessians_bytes(w, l);
        hess = b > hess ? b : hess;
    }
    for (int s = 0; s < w->n_lin - 1; s++)
        max_in = w->lin[s].n_in > max_in ? w->lin[s].n_in : max_in;
    /* The factors of a block's inputs (one per input, n_in^2 doubles each, as its
     * Hessians), and one factorization's and the rows' work. */
    factor = hess + ql_gptq_work_bytes(max_in, ql_threads_get());
    const size_t streams =
        (size_t)calib->n_chunks * (size_t)calib->ctx * (size_t)m->hp.n_embd * sizeof(float);
    const size_t bind = ql_weights_layer_floats(w) * sizeof(float);
    return hess + factor + streams + bind;
}

static const ql_quant_plan_entry *plan_find(const ql_quant_plan *p, const char *name)
{
    for (int64_t i = 0; i < p->n; i++)
        if (strcmp(p->entries[i].name, name) == 0)
            return &p->entries[i];
    return NULL;
}

/* Quantizes the products of block l that change type, by GPTQ where the type splits. */
static ql_status quantize_block(const ql_model *m, ql_weights *ws, int l, const ql_quant_plan *plan,
                                ql_hessians *h, const ql_gptq_pass_opts *o, ql_gptq_set *set,
                                ql_weight_src *srcs, ql_gptq_pass_summary *sum, ql_error *err)
{
    for (int s = ws->layer_site0[l]; s < ws->layer_site0[l + 1]; s++) {
        ql_linear *lin = &ws->lin[s];
        const ql_quant_plan_entry *e = plan_find(plan, lin->name);
        const ql_gguf_tensor *gt = ql_gguf_find_tensor(m->gguf, lin->name);
        if (!e || !gt || e->used == gt->type)
            continue;
        set_entry *se = &set->e[set->n];
        ql_strlcpy(se->name, lin->name, sizeof se->name);
        se->type = e->used;
        se->nbytes = e->bytes;
        if (!(se->bytes = malloc((size_t)e->bytes)))
            return ql_error_set(err, QL_ENOMEM, "gptq: out of memory for '%s' (%llu bytes)",
                                lin->name, (unsigned long long)e->bytes);
        set->n++;
        ql_quant_src qs;
        ql_quant_src_from_gguf(&qs, gt);
        const int64_t n_mats = e->ne[2] * e->ne[3];
        if (o->imatrix) {
            qs.imatrix = o->imatrix(o->imatrix_ctx, lin->name, e->n_per_row, n_mats);
            qs.imatrix_per_mat = true;
        }
        const ql_gptq_factor *factor = NULL;
        if (ql_split_applies(e->used)) {
            ql_status fst = ql_hessians_factor(h, lin->kind, &o->gptq, &factor, err);
            if (fst)
                return ql_error_prefix(err, "gptq: tensor '%s': ", lin->name);
            qs.gptq = &factor;
            sum->n_gptq++;
        } else {
            sum->n_ggml++;
        }
        ql_status st = ql_quant_tensor_rows(&qs, e->used, 0, e->nrows, se->bytes, (size_t)e->bytes,
                                            err);
        if (st)
            return ql_error_prefix(err, "gptq: tensor '%s' (%s): ", lin->name,
                                   ql_type_name(e->used));
        srcs[s] = (ql_weight_src){.type = e->used, .data = se->bytes};
        ql_linear_set_src(lin, &srcs[s]);
    }
    return QL_OK;
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
    for (int l = 0; l < w->n_layer; l++) {
        sum.hessian_bytes =
            ql_hessians_bytes(w, l) > sum.hessian_bytes ? ql_hessians_bytes(w, l) : sum.hessian_bytes;
        for (int s = w->layer_site0[l]; s < w->layer_site0[l + 1]; s++)
            if (ql_hess_input_of(w->lin[s].kind) < 0)
                return ql_error_set(err, QL_EUNSUPPORTED,
                                    "gptq: block %d has a mixture of experts ('%s'): GPTQ's "
                                    "Hessians are collected for dense blocks only",
                                    l, w->lin[s].name);
    }
    sum.bytes_planned = ql_gptq_pass_bytes(m, calib);
    if (o->mem && sum.bytes_planned > o->mem)
        return ql_error_set(err, QL_ENOMEM,
                            "gptq: the pass needs %.1f MiB (Hessians of a block %.1f MiB, the "
                            "residual streams of %lld chunks of %d tokens, one block in f32, the "
                            "inverse factor), over the %.1f MiB it may plan with (--mem): use fewer "
                            "calibration chunks or more memory",
                            (double)sum.bytes_planned / 1048576.0,
                            (double)sum.hessian_bytes / 1048576.0, (long long)nc, ctx,
                            (double)o->mem / 1048576.0);
    ql_status st = QL_OK;
    ql_forward *fw = NULL;
    ql_weights *ws = NULL;
    ql_hessians *h = NULL;
    ql_gptq_set *set = calloc(1, sizeof *set);
    float *streams = NULL, *tmp = NULL, *bind = NULL;
    int32_t *tokens = NULL;
    ql_weight_src *srcs = calloc((size_t)w->n_lin, sizeof *srcs);
    const size_t bind_floats = ql_weights_layer_floats(w);
    if (!set || !srcs || !(set->e = calloc((size_t)w->n_lin, sizeof *set->e)) ||
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
        double t0 = ql_now();
        if ((st = ql_hessians_alloc(&h, ws, l, err)) ||
            (st = ql_weights_bind_layer(ws, l, bind, bind_floats, err)))
            goto out;
        ql_forward_set_observer(fw, ql_hessians_observe, h);
        for (int64_t c = 0; c < nc && !st; c++) {
            float *x = streams + c * ctx * n_embd;
            memcpy(tmp, x, (size_t)ctx * (size_t)n_embd * sizeof *tmp);
            st = ql_forward_block(fw, ws, l, tmp, ctx, 0, 0, NULL, err);
            if (o->gptq.inputs == QL_GPTQ_INPUTS_REFERENCE)
                memcpy(x, tmp, (size_t)ctx * (size_t)n_embd * sizeof *tmp);
        }
        ql_forward_set_observer(fw, NULL, NULL);
        ql_weights_unbind_layer(ws, l);
        if (st)
            goto out;
        double t1 = ql_now();
        sum.seconds_hessian += t1 - t0;
        if ((st = quantize_block(m, ws, l, plan, h, o, set, srcs, &sum, err)))
            goto out;
        double t2 = ql_now();
        sum.seconds_gptq += t2 - t1;
        ql_hessians_free(h);
        h = NULL;
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
    free(streams);
    free(tmp);
    free(bind);
    free(tokens);
    return st;
}
