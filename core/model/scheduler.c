/* Layer-major passes over groups of chunks (scheduler.h). */
#include "model/scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

struct ql_sched {
    float *layer[QL_SCHED_MAX_SETS]; /* one bound layer per set */
    size_t layer_floats[QL_SCHED_MAX_SETS];
    float *x[QL_SCHED_MAX_SETS]; /* (group, n_tok, n_embd) residual streams per set */
    size_t x_floats[QL_SCHED_MAX_SETS];
    float *hidden; /* (n_tok, n_embd) one chunk's head input */
    float *logits; /* (n_tok, n_vocab) one chunk's logits */
    size_t hidden_floats, logits_floats;
    int32_t *tokens; /* (ctx,) */
    int tokens_cap;
};

ql_status ql_sched_alloc(ql_sched **out, ql_error *err)
{
    *out = calloc(1, sizeof **out);
    return *out ? QL_OK : ql_error_set(err, QL_ENOMEM, "out of memory for a pass");
}

void ql_sched_free(ql_sched *s)
{
    if (!s)
        return;
    for (int i = 0; i < QL_SCHED_MAX_SETS; i++) {
        free(s->layer[i]);
        free(s->x[i]);
    }
    free(s->hidden);
    free(s->logits);
    free(s->tokens);
    free(s);
}

size_t ql_sched_bytes(const ql_hparams *hp, int ctx, int group, int n_sets)
{
    const size_t E = (size_t)hp->n_embd, V = (size_t)hp->n_vocab;
    const size_t layer = (size_t)ql_hparams_layer_weights(hp);
    const size_t per_set = layer + (size_t)group * (size_t)ctx * E;
    return sizeof(float) * ((size_t)n_sets * per_set + (size_t)ctx * (E + V));
}

int ql_sched_group_for(const ql_hparams *hp, int ctx, int n_sets, int64_t n_chunks, size_t budget)
{
    int g = 1;
    while (g < n_chunks && ql_sched_bytes(hp, ctx, g + 1, n_sets) <= budget)
        g++;
    return g;
}

/* Grows *buf to hold n floats (contents not kept). */
static ql_status ensure(float **buf, size_t *have, size_t n, const char *what, ql_error *err)
{
    if (*have >= n && *buf)
        return QL_OK;
    float *p = realloc(*buf, (n ? n : 1) * sizeof *p);
    if (!p)
        return ql_error_set(err, QL_ENOMEM, "out of memory for %s (%zu floats)", what, n);
    *buf = p;
    *have = n;
    return QL_OK;
}

static ql_status prepare(ql_sched *s, const ql_sched_job *job, const ql_hparams *hp, int n_tok,
                         ql_error *err)
{
    const size_t E = (size_t)hp->n_embd;
    size_t layer = 0;
    for (int i = 0; i < job->n_sets; i++) {
        const size_t n = ql_weights_layer_floats(job->sets[i].w);
        layer = n > layer ? n : layer;
    }
    const size_t x = (size_t)job->group * (size_t)n_tok * E;
    ql_status st = QL_OK;
    for (int i = 0; i < job->n_sets && !st; i++)
        if (!(st = ensure(&s->layer[i], &s->layer_floats[i], layer, "one layer in f32", err)))
            st = ensure(&s->x[i], &s->x_floats[i], x, "the group's hidden states", err);
    if (st)
        return st;
    if ((st = ensure(&s->hidden, &s->hidden_floats, (size_t)n_tok * E, "the head's input", err)) ||
        (st = ensure(&s->logits, &s->logits_floats, (size_t)n_tok * (size_t)hp->n_vocab,
                     "one chunk's logits", err)))
        return st;
    /* A chunk's input is all ctx tokens (ql_ppl_chunk_input), of which a perplexity pass
     * runs the first ctx - 1. */
    const int n_in = job->data->ctx > n_tok ? job->data->ctx : n_tok;
    if (s->tokens_cap < n_in) {
        int32_t *t = realloc(s->tokens, (size_t)n_in * sizeof *t);
        if (!t)
            return ql_error_set(err, QL_ENOMEM, "out of memory");
        s->tokens = t;
        s->tokens_cap = n_in;
    }
    return QL_OK;
}

/* Where the forward pass's routing observer is: the set, chunk and first position of
 * the block being computed. */
typedef struct {
    const ql_sched_set *set;
    int64_t chunk, row0;
} route_at;

static void route_trampoline(void *ctx, int layer, const int32_t *sel, const float *weights,
                             int64_t n_tok, int k)
{
    const route_at *r = ctx;
    r->set->route(r->set->route_ctx, layer, r->chunk, r->row0, sel, weights, n_tok, k);
}

/* Makes set i the one the pass computes with: its observers and K/V rounding. */
static void use_set(ql_forward *fw, const ql_sched_set *set, route_at *at)
{
    ql_forward_set_observer(fw, set->observer, set->observer_ctx);
    ql_forward_set_attn_rounding(fw, set->rounding);
    at->set = set;
    ql_forward_set_route_observer(fw, set->route ? route_trampoline : NULL, at);
}

/* One group: chunks c0 .. c0 + n - 1 through every block, then the heads. */
static ql_status run_group(ql_sched *s, ql_forward *fw, const ql_sched_job *job, int64_t c0,
                           int64_t n, int n_tok, int out_first, double *done, ql_error *err)
{
    const ql_hparams *hp = ql_forward_hparams(fw);
    const ql_ppl_data *d = job->data;
    const int64_t E = hp->n_embd;
    const size_t stride = (size_t)n_tok * (size_t)E;
    ql_status st = QL_OK;
    const int l0 = job->resume_layer;
    for (int i = 0; i < job->n_sets && !st; i++)
        for (int64_t c = 0; c < n && !st; c++) {
            float *x = s->x[i] + (size_t)c * stride;
            if (l0 > 0) {
                memcpy(x, job->resume + (size_t)(c0 - job->chunk0 + c) * stride,
                       stride * sizeof *x);
                continue;
            }
            ql_ppl_chunk_input(d, c0 + c, s->tokens);
            st = ql_forward_embed(fw, job->sets[i].w, s->tokens, n_tok, 0, x, err);
        }
    int n_rows = n_tok;
    /* Progress in tokens, each block and the head weighted by their products' size. */
    const double layer_w = (double)ql_weights_layer_floats(job->sets[0].w);
    const double head_w =
        (double)hp->n_embd * (double)hp->n_vocab * (double)(n_tok - out_first) / (double)n_tok;
    const double group_tokens = (double)(n * n_tok);
    const double per_block = group_tokens * layer_w / (hp->n_layer * layer_w + head_w);
    const double per_head = group_tokens - hp->n_layer * per_block;
    *done += l0 * per_block;
    for (int l = l0; l < hp->n_layer && !st; l++) {
        const int first = l == hp->n_layer - 1 ? out_first : 0;
        if (l > 0 && l == job->capture_layer)
            for (int64_t c = 0; c < n; c++)
                memcpy(job->capture + (size_t)(c0 - job->chunk0 + c) * stride,
                       s->x[0] + (size_t)c * stride, stride * sizeof *job->capture);
        ql_forward_profile *prof = ql_forward_get_profile(fw);
        const double tb = prof ? ql_now() : 0.0;
        for (int i = 0; i < job->n_sets && !st; i++)
            st = ql_weights_bind_layer(job->sets[i].w, l, s->layer[i], s->layer_floats[i], err);
        if (prof)
            prof->decode += ql_now() - tb;
        for (int64_t c = 0; c < n && !st; c++) {
            const float *xs[QL_SCHED_MAX_SETS];
            for (int i = 0; i < job->n_sets && !st; i++) {
                float *x = s->x[i] + (size_t)c * stride;
                route_at at = {.chunk = c0 + c, .row0 = first};
                use_set(fw, &job->sets[i], &at);
                st = ql_forward_block(fw, job->sets[i].w, l, x, n_tok, 0, first, &n_rows, err);
                xs[i] = x;
            }
            if (!st && job->on_block)
                st = job->on_block(job->ctx, l, c0 + c, first, n_rows, xs, err);
        }
        for (int i = 0; i < job->n_sets; i++)
            ql_weights_unbind_layer(job->sets[i].w, l);
        *done += per_block;
        if (!st && job->progress)
            job->progress(job->ctx, *done);
        /* A signal stops the pass between blocks: the caller decides what it means. */
        if (!st && ql_interrupted())
            st = ql_error_set(err, QL_EINTERRUPTED, "interrupted by signal %d after block %d",
                              ql_interrupted(), l);
    }
    /* The heads: per set and chunk, the final norm, the logits, the consumer. */
    for (int i = 0; i < job->n_sets && !st; i++) {
        const ql_sched_set *set = &job->sets[i];
        route_at at = {0};
        use_set(fw, set, &at);
        for (int64_t c = 0; c < n && !st; c++) {
            const float *x = s->x[i] + (size_t)c * stride;
            ql_forward_output_norm(fw, set->w, x, s->hidden, n_rows);
            if (set->head)
                st = ql_forward_head(fw, set->w, s->hidden, s->logits, n_rows, err);
            if (!st && job->on_output)
                st = job->on_output(job->ctx, i, c0 + c, s->hidden, set->head ? s->logits : NULL,
                                    n_rows, err);
        }
    }
    *done += per_head;
    if (!st && job->progress)
        job->progress(job->ctx, *done);
    return st;
}

ql_status ql_sched_run(ql_sched *s, ql_forward *fw, const ql_sched_job *job, ql_error *err)
{
    const ql_ppl_data *d = job->data;
    QL_ASSERT(job->n_sets >= 1 && job->n_sets <= QL_SCHED_MAX_SETS && job->group >= 1);
    const int n_layer = ql_forward_hparams(fw)->n_layer;
    QL_ASSERT(job->capture_layer >= 0 && job->capture_layer < n_layer && job->resume_layer >= 0 &&
              job->resume_layer < n_layer);
    QL_ASSERT((!job->capture_layer || (job->capture && job->n_sets == 1)) &&
              (!job->resume_layer || (job->resume && job->n_sets == 1)));
    if (d->ctx > ql_forward_max_ctx(fw))
        return ql_error_set(err, QL_EINVAL, "pass: chunks of %d tokens, the forward pass holds %d",
                            d->ctx, ql_forward_max_ctx(fw));
    if (job->chunk0 < 0 || job->n_chunks < 0 || job->chunk0 + job->n_chunks > d->n_chunks)
        return ql_error_set(err, QL_EINVAL, "pass: chunks %lld..%lld outside the text's %lld",
                            (long long)job->chunk0, (long long)(job->chunk0 + job->n_chunks),
                            (long long)d->n_chunks);
    /* A perplexity pass does not run the chunk's last token: it predicts nothing that is
     * scored and, attention being causal, changes no scored position. */
    const int n_tok = job->all_rows ? d->ctx : d->ctx - 1;
    const int out_first = job->all_rows ? 0 : d->first;
    ql_status st = QL_OK;
    for (int i = 0; i < job->n_sets && !st; i++)
        st = ql_forward_check_weights(fw, job->sets[i].w, err);
    if (!st)
        st = prepare(s, job, ql_forward_hparams(fw), n_tok, err);
    if (st)
        return st;
    ql_matmul_observer obs;
    void *obs_ctx, *route_ctx;
    ql_route_observer route;
    ql_attn_rounding rounding;
    ql_forward_get_observer(fw, &obs, &obs_ctx);
    ql_forward_get_route_observer(fw, &route, &route_ctx);
    ql_forward_get_attn_rounding(fw, &rounding);
    double done = 0;
    for (int64_t c0 = job->chunk0; c0 < job->chunk0 + job->n_chunks && !st; c0 += job->group) {
        const int64_t left = job->chunk0 + job->n_chunks - c0;
        st = run_group(s, fw, job, c0, left < job->group ? left : job->group, n_tok, out_first,
                       &done, err);
    }
    ql_forward_set_observer(fw, obs, obs_ctx);
    ql_forward_set_route_observer(fw, route, route_ctx);
    ql_forward_set_attn_rounding(fw, &rounding);
    return st;
}

size_t ql_sched_stream_floats(const ql_hparams *hp, const ql_ppl_data *d, bool all_rows)
{
    return (size_t)(all_rows ? d->ctx : d->ctx - 1) * (size_t)hp->n_embd;
}

ql_status ql_sched_run_heads(ql_sched *s, ql_forward *fw, const ql_sched_job *job,
                             const float *hidden, ql_error *err)
{
    const ql_ppl_data *d = job->data;
    const ql_hparams *hp = ql_forward_hparams(fw);
    QL_ASSERT(job->n_sets == 1 && job->sets[0].head);
    const int n_tok = job->all_rows ? d->ctx : d->ctx - 1;
    const int64_t n_rows = n_tok - (job->all_rows ? 0 : d->first);
    const size_t stride = (size_t)n_rows * (size_t)hp->n_embd;
    ql_status st = ensure(&s->logits, &s->logits_floats, (size_t)n_tok * (size_t)hp->n_vocab,
                          "one chunk's logits", err);
    if (st)
        return st;
    ql_matmul_observer obs;
    void *obs_ctx;
    ql_forward_get_observer(fw, &obs, &obs_ctx);
    ql_forward_set_observer(fw, job->sets[0].observer, job->sets[0].observer_ctx);
    for (int64_t c = 0; c < job->n_chunks && !st; c++) {
        const float *x = hidden + (size_t)c * stride;
        st = ql_forward_head(fw, job->sets[0].w, x, s->logits, n_rows, err);
        if (!st && job->on_output)
            st = job->on_output(job->ctx, 0, job->chunk0 + c, x, s->logits, n_rows, err);
        if (!st && job->progress)
            job->progress(job->ctx, (double)((c + 1) * n_tok));
        if (!st && ql_interrupted())
            st = ql_error_set(err, QL_EINTERRUPTED, "interrupted by signal %d after chunk %lld",
                              ql_interrupted(), (long long)(job->chunk0 + c));
    }
    ql_forward_set_observer(fw, obs, obs_ctx);
    return st;
}

/* ------------------------------------------------------------------------- */
/* Perplexity                                                                 */

typedef struct {
    const ql_ppl_data *d;
    int64_t n_vocab;
    ql_ppl_chunk_fn cb;
    ql_sched_progress_fn progress;
    void *cb_ctx;
    ql_nll_acc *acc;
} ppl_ctx;

static void ppl_progress(void *ctx, double tokens_done)
{
    ppl_ctx *p = ctx;
    if (p->progress)
        p->progress(p->cb_ctx, tokens_done);
}

static ql_status ppl_output(void *ctx, int set, int64_t chunk, const float *hidden,
                            const float *logits, int64_t n_rows, ql_error *err)
{
    (void)set, (void)hidden;
    ppl_ctx *p = ctx;
    const int32_t *targets = ql_ppl_chunk_targets(p->d, chunk);
    for (int64_t t = 0; t < n_rows; t++) {
        if (targets[t] < 0 || targets[t] >= p->n_vocab)
            return ql_error_set(err, QL_EINVAL,
                                "perplexity: target token %d outside the vocabulary (0..%lld)",
                                (int)targets[t], (long long)p->n_vocab - 1);
        ql_nll_acc_add(p->acc, ql_nll(logits + t * p->n_vocab, p->n_vocab, targets[t]));
    }
    if (p->cb)
        p->cb(p->cb_ctx, chunk, logits, targets, (int)n_rows, p->acc);
    return QL_OK;
}

ql_status ql_sched_perplexity(ql_forward *fw, ql_weights *w, const ql_ppl_data *d, int group,
                              ql_ppl_chunk_fn cb, ql_sched_progress_fn progress, void *cb_ctx,
                              ql_nll_acc *acc, ql_error *err)
{
    memset(acc, 0, sizeof *acc);
    ppl_ctx p = {.d = d,
                 .n_vocab = ql_forward_hparams(fw)->n_vocab,
                 .cb = cb,
                 .progress = progress,
                 .cb_ctx = cb_ctx,
                 .acc = acc};
    ql_sched *s;
    ql_status st = ql_sched_alloc(&s, err);
    if (st)
        return st;
    ql_matmul_observer obs;
    void *obs_ctx;
    ql_attn_rounding kv;
    ql_forward_get_observer(fw, &obs, &obs_ctx);
    ql_forward_get_attn_rounding(fw, &kv);
    ql_sched_job job = {.data = d,
                        .n_chunks = d->n_chunks,
                        .group = group > 0 ? group : 1,
                        .n_sets = 1,
                        .on_output = ppl_output,
                        .progress = ppl_progress,
                        .ctx = &p};
    job.sets[0] = (ql_sched_set){
        .w = w, .rounding = &kv, .observer = obs, .observer_ctx = obs_ctx, .head = true};
    st = ql_sched_run(s, fw, &job, err);
    ql_sched_free(s);
    return st;
}
