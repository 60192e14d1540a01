/* The layer-major scheduler: a pass over groups of chunks gives every chunk the logits
 * and hidden states it gets alone (ql_ppl_run_chunk), bit for bit, whatever the group
 * size; two sets in lock-step see their own residual streams after every block; the
 * observers see each product once per chunk; a pass resumed at block L from the streams
 * another captured there gives the whole pass's logits; decoded (bound) layers and unbound heads
 * give the same numbers as an f32 copy of the model. On stories260K (F32: weights used
 * in place) and on llama-quantize's Q4_0 file of it (every layer decoded when bound). */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/scheduler.h"
#include "model/tokenizer.h"
#include "qltest.h"

#define CTX    64
#define CHUNKS 5

typedef struct {
    const ql_ppl_data *d;
    int64_t n_vocab, n_embd;
    float *logits; /* (CHUNKS, n_scored, n_vocab) */
    float *hidden; /* (CHUNKS, n_scored, n_embd) */
    int outputs;   /* on_output calls */
    int64_t order_bad;
    int64_t last_chunk;
    /* lock-step */
    int blocks;
    int64_t block_diff; /* values where the two sets' streams differ */
    int64_t observed;   /* products the observer saw */
} collect;

static ql_status on_output(void *ctx, int set, int64_t chunk, const float *hidden,
                           const float *logits, int64_t n_rows, ql_error *err)
{
    (void)err;
    collect *c = ctx;
    c->outputs++;
    if (chunk <= c->last_chunk && set == 0)
        c->order_bad++;
    if (set == 0)
        c->last_chunk = chunk;
    if (set != 0 || n_rows != c->d->n_scored)
        return QL_OK;
    const size_t nv = (size_t)n_rows * (size_t)c->n_vocab, ne = (size_t)n_rows * (size_t)c->n_embd;
    if (logits)
        memcpy(c->logits + (size_t)chunk * nv, logits, nv * sizeof(float));
    memcpy(c->hidden + (size_t)chunk * ne, hidden, ne * sizeof(float));
    return QL_OK;
}

static ql_status on_block(void *ctx, int layer, int64_t chunk, int64_t row0, int64_t n_rows,
                          const float *const *x, ql_error *err)
{
    (void)layer, (void)chunk, (void)row0, (void)err;
    collect *c = ctx;
    c->blocks++;
    for (int64_t i = 0; i < n_rows * c->n_embd; i++)
        c->block_diff += x[0][i] != x[1][i];
    return QL_OK;
}

static void observe(void *ctx, int site, const ql_linear *lin, const float *x, int64_t n_tok)
{
    (void)site, (void)lin, (void)x, (void)n_tok;
    ((collect *)ctx)->observed++;
}

/* Runs the pass with group g and returns the collected outputs (caller frees). */
static collect run(ql_forward *fw, const ql_model *m, ql_weights *w, const ql_ppl_data *d, int g,
                   ql_weights *lockstep)
{
    collect c = {d, m->hp.n_vocab, m->hp.n_embd, NULL, NULL, 0, 0, -1, 0, 0, 0};
    c.logits = calloc((size_t)CHUNKS * (size_t)d->n_scored * (size_t)m->hp.n_vocab, sizeof(float));
    c.hidden = calloc((size_t)CHUNKS * (size_t)d->n_scored * (size_t)m->hp.n_embd, sizeof(float));
    ql_sched *s;
    ql_error err;
    CHECK_OK(ql_sched_alloc(&s, &err), &err);
    ql_sched_job job = {.data = d,
                        .chunk0 = 0,
                        .n_chunks = CHUNKS,
                        .group = g,
                        .n_sets = 1,
                        .on_output = on_output,
                        .ctx = &c};
    job.sets[0] = (ql_sched_set){.w = w, .head = true, .observer = observe, .observer_ctx = &c};
    if (lockstep) {
        job.n_sets = 2;
        job.sets[1] = (ql_sched_set){.w = lockstep, .head = false};
        job.on_block = on_block;
    }
    CHECK_OK(ql_sched_run(s, fw, &job, &err), &err);
    ql_sched_free(s);
    return c;
}

static void test_model(const char *path)
{
    ql_error err;
    ql_model *m = NULL;
    ql_tokenizer *tok = NULL;
    ql_ppl_data d;
    memset(&d, 0, sizeof d);
    CHECK_OK(ql_model_load(&m, path, &err), &err);
    CHECK_OK(ql_tokenizer_from_gguf(&tok, m->gguf, &err), &err);
    CHECK_OK(ql_ppl_data_from_file(
                 &d, tok, qlt_shared("datasets/tinystories/tinystories_valid_first1000.txt"), CTX,
                 CHUNKS, &err),
             &err);
    if (!m || d.n_chunks != CHUNKS)
        qlt_skip("model or text missing");
    const size_t per_chunk = (size_t)d.n_scored * (size_t)m->hp.n_vocab;
    ql_forward *fw;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, CTX, &err), &err);

    /* Every chunk alone, the whole-pass way. */
    float *alone = malloc((size_t)CHUNKS * per_chunk * sizeof(float));
    for (int64_t c = 0; c < CHUNKS; c++)
        CHECK_OK(ql_ppl_run_chunk(fw, m->weights, &d, c, alone + (size_t)c * per_chunk, &err),
                 &err);

    const int groups[] = {1, 2, CHUNKS};
    collect first = {0};
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        collect c = run(fw, m, m->weights, &d, groups[g], NULL);
        CHECK_EQ_INT(c.outputs, CHUNKS);
        CHECK_EQ_INT(c.order_bad, 0);
        CHECK_MSG(memcmp(c.logits, alone, (size_t)CHUNKS * per_chunk * sizeof(float)) == 0,
                  "%s: group %d: logits differ from chunks run alone", path, groups[g]);
        /* 7 products per layer and the head, once per chunk */
        CHECK_EQ_INT(c.observed, (int64_t)CHUNKS * (7 * m->hp.n_layer + 1));
        if (g == 0) {
            first = c;
            continue;
        }
        CHECK(memcmp(c.hidden, first.hidden,
                     (size_t)CHUNKS * (size_t)d.n_scored * (size_t)m->hp.n_embd * sizeof(float)) ==
              0);
        free(c.logits);
        free(c.hidden);
    }

    /* The heads alone over the hidden states a pass handed on_output: the logits of
     * the whole pass, bit for bit (what a sweep's configs differing only in the head
     * rely on). */
    {
        collect h = {&d, m->hp.n_vocab, m->hp.n_embd, NULL, NULL, 0, 0, -1, 0, 0, 0};
        h.logits = calloc((size_t)CHUNKS * per_chunk, sizeof(float));
        h.hidden =
            calloc((size_t)CHUNKS * (size_t)d.n_scored * (size_t)m->hp.n_embd, sizeof(float));
        ql_sched *hs;
        CHECK_OK(ql_sched_alloc(&hs, &err), &err);
        ql_sched_job job = {.data = &d,
                            .n_chunks = CHUNKS,
                            .group = 1,
                            .n_sets = 1,
                            .on_output = on_output,
                            .ctx = &h};
        job.sets[0] = (ql_sched_set){.w = m->weights, .head = true};
        CHECK_OK(ql_sched_run_heads(hs, fw, &job, first.hidden, &err), &err);
        CHECK_EQ_INT(h.outputs, CHUNKS);
        CHECK_EQ_INT(h.order_bad, 0);
        CHECK_MSG(memcmp(h.logits, alone, (size_t)CHUNKS * per_chunk * sizeof(float)) == 0,
                  "%s: the heads alone give other logits than the whole pass", path);
        ql_sched_free(hs);
        free(h.logits);
        free(h.hidden);
    }

    /* A shared prefix: a pass captures the streams entering block L; a pass resumed
     * there gives the whole pass's logits, bit for bit, with any group size (what a
     * sweep's configs that differ only from block L on rely on). */
    for (int L = 1; L < m->hp.n_layer; L += m->hp.n_layer > 2 ? m->hp.n_layer - 2 : 1) {
        const size_t sf = ql_sched_stream_floats(&m->hp, &d, false);
        float *streams = malloc((size_t)CHUNKS * sf * sizeof(float));
        for (int g = 1; g <= 2; g++) {
            collect a = {&d, m->hp.n_vocab, m->hp.n_embd, NULL, NULL, 0, 0, -1, 0, 0, 0};
            a.logits = calloc((size_t)CHUNKS * per_chunk, sizeof(float));
            a.hidden =
                calloc((size_t)CHUNKS * (size_t)d.n_scored * (size_t)m->hp.n_embd, sizeof(float));
            ql_sched *ps;
            CHECK_OK(ql_sched_alloc(&ps, &err), &err);
            ql_sched_job job = {.data = &d,
                                .n_chunks = CHUNKS,
                                .group = g,
                                .n_sets = 1,
                                .on_output = on_output,
                                .ctx = &a};
            job.sets[0] = (ql_sched_set){.w = m->weights, .head = true, .observer = observe,
                                         .observer_ctx = &a};
            if (g == 1) {
                job.capture_layer = L;
                job.capture = streams;
            } else {
                job.resume_layer = L;
                job.resume = streams;
            }
            CHECK_OK(ql_sched_run(ps, fw, &job, &err), &err);
            CHECK_EQ_INT(a.outputs, CHUNKS);
            CHECK_MSG(memcmp(a.logits, alone, (size_t)CHUNKS * per_chunk * sizeof(float)) == 0,
                      "%s: block %d: the %s pass gives other logits than the whole pass", path,
                      L, g == 1 ? "capturing" : "resumed");
            /* The resumed pass computes only blocks L.. and the head. */
            CHECK_EQ_INT(a.observed,
                         (int64_t)CHUNKS * (7 * (g == 1 ? m->hp.n_layer : m->hp.n_layer - L) + 1));
            ql_sched_free(ps);
            free(a.logits);
            free(a.hidden);
        }
        free(streams);
    }

    /* Lock-step with a copy of the same weights: identical streams after every block. */
    ql_weights *copy;
    CHECK_OK(ql_weights_copy(&copy, m->weights, &err), &err);
    collect ls = run(fw, m, m->weights, &d, 2, copy);
    CHECK_EQ_INT(ls.blocks, CHUNKS * m->hp.n_layer);
    CHECK_EQ_INT(ls.block_diff, 0);
    CHECK_EQ_INT(ls.outputs, 2 * CHUNKS);
    CHECK(memcmp(ls.logits, alone, (size_t)CHUNKS * per_chunk * sizeof(float)) == 0);
    free(ls.logits);
    free(ls.hidden);

    /* An f32 copy of the whole model (bind_all) gives the same numbers as binding per
     * layer and the head decoded tile by tile. */
    CHECK_OK(ql_weights_bind_all(copy, &err), &err);
    collect f32 = run(fw, m, copy, &d, CHUNKS, NULL);
    CHECK_MSG(memcmp(f32.logits, alone, (size_t)CHUNKS * per_chunk * sizeof(float)) == 0,
              "%s: an f32 copy of the model gives other logits", path);
    free(f32.logits);
    free(f32.hidden);
    ql_weights_free(copy);

    /* A chunk range outside the text is refused. */
    ql_sched *s;
    CHECK_OK(ql_sched_alloc(&s, &err), &err);
    ql_sched_job bad = {.data = &d, .chunk0 = CHUNKS - 1, .n_chunks = 2, .group = 1, .n_sets = 1};
    bad.sets[0].w = m->weights;
    CHECK(ql_sched_run(s, fw, &bad, &err) == QL_EINVAL);
    ql_sched_free(s);

    free(first.logits);
    free(first.hidden);
    free(alone);
    ql_forward_free(fw);
    ql_ppl_data_deinit(&d);
    ql_tokenizer_free(tok);
    ql_model_free(m);
}

int main(void)
{
    /* Two threads: the group sizes must not change a bit with several threads either. */
    ql_threads_set(2);
    test_model(qlt_shared("models/stories260K.gguf"));
    test_model(qlt_shared("golden/llamacpp-reference/quantized/stories260K-Q4_0.gguf"));
    return qlt_done();
}
