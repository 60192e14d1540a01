/* Measured per-tensor sensitivity (sensitivity.h). */
#include "experiment/sensitivity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/progress.h"
#include "base/util.h"
#include "experiment/distribution.h"
#include "experiment/qweights.h"
#include "formats/types.h"

/* Where a tensor acts: its product site (-1 for the token embedding), or -2 when the
 * model has no such product. */
static int site_of(const ql_model *m, const char *tensor)
{
    ql_weights *w = m->weights;
    const ql_linear *lin = ql_weights_find(w, tensor);
    if (!lin)
        return -2;
    if (lin == &w->tok_embd)
        return -1;
    return (int)(lin - w->lin);
}

const char *ql_sens_kind_name(const ql_model *m, const char *tensor, int *layer)
{
    const int site = site_of(m, tensor);
    *layer = -1;
    if (site == -1)
        return "token_embd";
    if (site < 0)
        return NULL;
    if (site == ql_site_output(m->weights)) {
        *layer = m->hp.n_layer;
        return "output";
    }
    *layer = m->weights->lin[site].layer;
    return ql_site_kind_name(m->weights->lin[site].kind);
}

const char *ql_sens_unit(const ql_model *m, const char *tensor, ql_grouping g, char *name,
                         size_t size, int *layer)
{
    const char *kind = ql_sens_kind_name(m, tensor, layer);
    if (!kind)
        return NULL;
    const int site = site_of(m, tensor);
    if (g == QL_GROUPING_TENSOR || site == -1 || site == ql_site_output(m->weights)) {
        snprintf(name, size, "%s", tensor);
        return kind;
    }
    const ql_site_kind k = m->weights->lin[site].kind;
    if (g == QL_GROUPING_EXPERT) {
        if (!ql_site_kind_experts(k)) {
            snprintf(name, size, "%s", tensor);
            return kind;
        }
        snprintf(name, size, "blk.%d.ffn_exps", *layer);
        return "experts";
    }
    switch (g) {
    case QL_GROUPING_MODULE: {
        const char *module = ql_site_kind_attention(k) ? "attn" : "ffn";
        snprintf(name, size, "blk.%d.%s", *layer, module);
        return module;
    }
    case QL_GROUPING_LAYER:
        snprintf(name, size, "blk.%d", *layer);
        return "block";
    default:
        snprintf(name, size, "%s", kind);
        return kind;
    }
}

void ql_sens_expert_name(int layer, int expert, char *name, size_t size)
{
    snprintf(name, size, "blk.%d.exp.%d", layer, expert);
}

/* The block a candidate's pass starts at: 0 for the embedding, n_layer for the head. */
static int start_block(const ql_model *m, int site)
{
    if (site == -1)
        return 0;
    if (site == ql_site_output(m->weights))
        return m->hp.n_layer;
    return m->weights->lin[site].layer;
}

typedef struct {
    const ql_sens_job *job;
    int n_tok;     /* tokens a chunk runs: ctx - 1, as a perplexity pass */
    size_t stride; /* floats of one chunk's residual stream */
    float *x_ref;  /* (n_chunks, n_tok, n_embd): the reference stream at the current block */
    float *x;      /* a candidate's copy */
    float *layer;  /* one layer's products in f32 */
    size_t layer_floats;
    float *hidden;    /* one chunk's head input */
    float *logits;    /* one chunk's logits */
    int32_t *tokens;  /* one chunk's input */
    ql_dist_acc *acc; /* the scored tokens of every chunk */
} sens_state;

static void state_free(sens_state *s)
{
    free(s->x_ref);
    free(s->x);
    free(s->layer);
    free(s->hidden);
    free(s->logits);
    free(s->tokens);
    ql_dist_acc_free(s->acc);
}

static ql_status state_alloc(sens_state *s, const ql_sens_job *job, ql_error *err)
{
    memset(s, 0, sizeof *s);
    s->job = job;
    const ql_hparams *hp = &job->model->hp;
    const ql_ppl_data *d = job->d;
    s->n_tok = d->ctx - 1;
    s->stride = (size_t)s->n_tok * (size_t)hp->n_embd;
    const size_t all = s->stride * (size_t)d->n_chunks;
    s->layer_floats = ql_weights_layer_floats(job->model->weights);
    /* The scores: 7 doubles and 4 bytes a token (distribution.h's accumulator). */
    const double need = (double)(2 * all + (size_t)s->n_tok * (size_t)hp->n_vocab +
                                 (size_t)s->n_tok * (size_t)hp->n_embd) *
                            sizeof(float) +
                        (double)(d->n_chunks * d->n_scored) * (7 * sizeof(double) + 4);
    if (job->mem_bytes && need > (double)job->mem_bytes) {
        char needs[32], has[32];
        ql_format_bytes(need, needs, sizeof needs);
        ql_format_bytes((double)job->mem_bytes, has, sizeof has);
        return ql_error_set(err, QL_ENOMEM,
                            "the calibration text's residual streams (2 x %lld chunks x %d tokens "
                            "x %lld floats) and scores take %s, above the %s the measurement may "
                            "use; measure on fewer calibration chunks (calib:TEXT,chunks=N) or "
                            "give more memory (--mem)",
                            (long long)d->n_chunks, s->n_tok, (long long)hp->n_embd, needs, has);
    }
    s->x_ref = malloc(all * sizeof *s->x_ref);
    s->x = malloc(all * sizeof *s->x);
    s->layer = malloc((s->layer_floats ? s->layer_floats : 1) * sizeof *s->layer);
    s->hidden = malloc((size_t)s->n_tok * (size_t)hp->n_embd * sizeof *s->hidden);
    s->logits = malloc((size_t)s->n_tok * (size_t)hp->n_vocab * sizeof *s->logits);
    s->tokens = malloc((size_t)d->ctx * sizeof *s->tokens);
    if (!s->x_ref || !s->x || !s->layer || !s->hidden || !s->logits || !s->tokens)
        return ql_error_set(err, QL_ENOMEM,
                            "out of memory for the calibration text's residual streams "
                            "(2 x %lld chunks x %d tokens x %lld floats)",
                            (long long)d->n_chunks, s->n_tok, (long long)hp->n_embd);
    return ql_dist_acc_alloc(&s->acc, d->n_chunks * d->n_scored, hp->n_vocab, err);
}

/* Every chunk of x through blocks l0 .. n_layer - 1 with weight set w, as the
 * scheduler runs a pass (the last block keeps only the scored rows). */
static ql_status run_blocks(sens_state *s, ql_weights *w, float *x, int l0, ql_error *err)
{
    const ql_sens_job *job = s->job;
    const int n_layer = job->model->hp.n_layer;
    ql_status st = QL_OK;
    for (int l = l0; l < n_layer && !st; l++) {
        const int first = l == n_layer - 1 ? job->d->first : 0;
        if ((st = ql_weights_bind_layer(w, l, s->layer, s->layer_floats, err)))
            break;
        for (int64_t c = 0; c < job->d->n_chunks && !st; c++)
            st = ql_forward_block(job->fw, w, l, x + (size_t)c * s->stride, s->n_tok, 0, first,
                                  NULL, err);
        ql_weights_unbind_layer(w, l);
    }
    return st;
}

/* The head of w on every chunk's final stream x (NULL: the reference's kept head
 * inputs), scored against the reference. */
static ql_status score(sens_state *s, ql_weights *w, const float *x, ql_sens_item *it,
                       ql_error *err)
{
    const ql_sens_job *job = s->job;
    const ql_ppl_data *d = job->d;
    ql_dist_acc_reset(s->acc);
    ql_status st = QL_OK;
    for (int64_t c = 0; c < d->n_chunks && !st; c++) {
        const float *hidden = s->hidden;
        if (x)
            ql_forward_output_norm(job->fw, w, x + (size_t)c * s->stride, s->hidden, d->n_scored);
        else
            hidden = ql_reference_hidden(job->ref, c);
        const float *logp;
        if (!(st = ql_forward_head(job->fw, w, hidden, s->logits, d->n_scored, err)) &&
            !(st = ql_reference_logp(job->ref, c, &logp, err)))
            st = ql_dist_acc_add(s->acc, logp, s->logits, ql_ppl_chunk_targets(d, c), d->n_scored,
                                 err);
    }
    if (st)
        return st;
    ql_dist_metrics m;
    ql_dist_acc_finish(s->acc, &m);
    it->kld_mean = m.kld_mean;
    it->kld_mean_err = m.kld_mean_err;
    it->ln_ppl_ratio = m.ln_ppl_ratio;
    it->ln_ppl_ratio_err = m.ln_ppl_ratio_err;
    return ql_dist_metrics_check_finite(&m, err);
}

/* A candidate: its item, its tensors' sites and the block its pass starts at (the
 * earliest of theirs). */
typedef struct {
    ql_sens_item *it;
    int *sites;
    int block;
} cand;

/* One candidate: its tensors quantized in a copy of the reference set, the blocks from
 * its first on, the head, the score. x_ref holds the reference stream at block l0. */
static ql_status measure_one(sens_state *s, const cand *cd, ql_error *err)
{
    const ql_sens_job *job = s->job;
    const ql_model *m = job->model;
    ql_sens_item *it = cd->it;
    const int l0 = cd->block;
    double t0 = ql_now();
    ql_weights *w = NULL;
    void **bytes = calloc((size_t)it->n_tensors, sizeof *bytes);
    ql_weight_src **experts = calloc((size_t)it->n_tensors, sizeof *experts);
    if (!bytes || !experts) {
        free(bytes);
        free(experts);
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    }
    ql_status st = ql_weights_copy(&w, m->weights, err);
    bool embd = false, head_only = !m->hp.tied_output;
    for (int k = 0; k < it->n_tensors && !st; k++) {
        const int site = cd->sites[k];
        ql_linear *lin = site == -1 ? &w->tok_embd : &w->lin[site];
        ql_weight_src src;
        embd |= site == -1;
        head_only &= site == ql_site_output(w);
        if (it->one_expert) {
            /* That expert's matrix quantized, the others the reference's. */
            if (site < 0 || lin->n_expert <= it->expert) {
                st = ql_error_set(err, QL_EINVAL, "'%s' has no expert %d", lin->name, it->expert);
                break;
            }
            if (!(experts[k] = calloc((size_t)lin->n_expert, sizeof *experts[k]))) {
                st = ql_error_set(err, QL_ENOMEM, "out of memory");
                break;
            }
            if ((st = ql_qweights_quantize_expert(lin, it->expert, it->type, job->im, &src,
                                                  &bytes[k], err)))
                break;
            experts[k][it->expert] = src;
            ql_linear_set_expert_srcs(lin, experts[k]);
            continue;
        }
        if ((st = ql_qweights_quantize_linear(lin, it->type, job->im, &src, &bytes[k], err)))
            break;
        ql_linear_set_src(lin, &src);
        if (site == -1 && m->hp.tied_output)
            ql_linear_set_src(&w->lin[ql_site_output(w)], &src);
    }
    const ql_ppl_data *d = job->d;
    if (!st && embd) {
        for (int64_t c = 0; c < d->n_chunks && !st; c++) {
            ql_ppl_chunk_input(d, c, s->tokens);
            st = ql_forward_embed(job->fw, w, s->tokens, s->n_tok, 0, s->x + (size_t)c * s->stride,
                                  err);
        }
    } else if (!st && l0 < m->hp.n_layer) {
        memcpy(s->x, s->x_ref, s->stride * (size_t)d->n_chunks * sizeof *s->x);
    }
    if (!st && !head_only)
        st = run_blocks(s, w, s->x, l0, err);
    if (!st)
        st = score(s, w, head_only ? NULL : s->x, it, err);
    it->seconds = ql_now() - t0;
    ql_weights_free(w);
    for (int k = 0; k < it->n_tensors; k++) {
        free(bytes[k]);
        free(experts[k]);
    }
    free(bytes);
    free(experts);
    return st ? ql_error_prefix(err, "sensitivity of %s to %s: ", it->name, ql_type_name(it->type))
              : QL_OK;
}

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->block != y->block)
        return x->block < y->block ? -1 : 1;
    return x->it < y->it ? -1 : x->it > y->it;
}

static void cands_free(cand *cs, int64_t n)
{
    for (int64_t i = 0; cs && i < n; i++)
        free(cs[i].sites);
    free(cs);
}

ql_status ql_sens_measure(const ql_sens_job *job, ql_sens_item *items, int64_t n, ql_error *err)
{
    if (n == 0)
        return QL_OK;
    const ql_model *m = job->model;
    cand *cs = calloc((size_t)n, sizeof *cs);
    if (!cs)
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    ql_status st = QL_OK;
    for (int64_t i = 0; i < n && !st; i++) {
        ql_sens_item *it = &items[i];
        cs[i] = (cand){it, calloc((size_t)it->n_tensors + 1, sizeof *cs[i].sites), INT32_MAX};
        if (!cs[i].sites)
            st = ql_error_set(err, QL_ENOMEM, "out of memory");
        if (!st && it->n_tensors <= 0)
            st = ql_error_set(err, QL_EINVAL, "sensitivity: %s has no tensor", it->name);
        for (int k = 0; k < it->n_tensors && !st; k++) {
            const int site = site_of(m, it->tensors[k]);
            if (site < -1) {
                st = ql_error_set(err, QL_EINVAL, "sensitivity: the model has no product '%s'",
                                  it->tensors[k]);
                break;
            }
            cs[i].sites[k] = site;
            const int block = start_block(m, site);
            if (block < cs[i].block)
                cs[i].block = block;
        }
    }
    sens_state s;
    memset(&s, 0, sizeof s);
    if (st || (st = state_alloc(&s, job, err))) {
        if (st != QL_EINVAL)
            ql_error_prefix(err, "sensitivity: ");
        state_free(&s); /* what a failed allocation got */
        cands_free(cs, n);
        return st;
    }
    /* Block order: the reference stream is advanced once through the model. */
    qsort(cs, (size_t)n, sizeof *cs, cmp_cand);
    const ql_ppl_data *d = job->d;
    for (int64_t c = 0; c < d->n_chunks && !st; c++) {
        ql_ppl_chunk_input(d, c, s.tokens);
        st = ql_forward_embed(job->fw, m->weights, s.tokens, s.n_tok, 0,
                              s.x_ref + (size_t)c * s.stride, err);
    }
    ql_progress pr;
    ql_progress_begin(&pr, "sensitivity", "candidate", n, job->quiet);
    int at = 0; /* the block x_ref is at the input of */
    for (int64_t i = 0; i < n && !st; i++) {
        const int target = cs[i].block < m->hp.n_layer ? cs[i].block : m->hp.n_layer;
        /* The stream stops at the last block's input: the head reads the reference's
         * kept inputs. */
        for (; at < target && at < m->hp.n_layer - 1 && !st; at++) {
            if ((st = ql_weights_bind_layer(m->weights, at, s.layer, s.layer_floats, err)))
                break;
            for (int64_t c = 0; c < d->n_chunks && !st; c++)
                st = ql_forward_block(job->fw, m->weights, at, s.x_ref + (size_t)c * s.stride,
                                      s.n_tok, 0, 0, NULL, err);
            ql_weights_unbind_layer(m->weights, at);
        }
        /* A signal stops between candidates: those done are already handed over. */
        if (!st && ql_interrupted())
            st = ql_error_set(err, QL_EINTERRUPTED, "sensitivity: interrupted by signal %d",
                              ql_interrupted());
        if (!st)
            st = measure_one(&s, &cs[i], err);
        if (!st && job->done)
            st = job->done(job->done_ctx, cs[i].it, err);
        ql_progress_update(&pr, i + 1, cs[i].it->name);
    }
    ql_progress_end(&pr, n, st ? "failed" : NULL);
    state_free(&s);
    cands_free(cs, n);
    return st;
}
