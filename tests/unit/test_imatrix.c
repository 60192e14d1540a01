/* Importance-matrix collection (core/experiment/imatrix.h): which products get an entry, the
 * sums against an independent double-precision observer, token counts with every row
 * of the last layer counted, thread-count independence, non-finite sums, observer
 * chains, and the importance table the quantizer reads (length checks). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/imatrix.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/imatrix_io.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/synth.h"
#include "hessian_fixture.h"
#include "qltest.h"

/* The collector sums x^2 in f32 token after token (as llama-imatrix does); the check
 * sums in double. Over a few hundred positive terms the f32 sum's relative rounding
 * error stays below n * 2^-24 ~ 1e-5. */
#define F32_SUM_REL_TOL 2e-5

/* ---- an independent observer: sums of x^2 in double per site ---- */

#define MAX_SITES 64

typedef struct {
    int calls[MAX_SITES];
    int64_t rows[MAX_SITES];
    int64_t n_in[MAX_SITES];
    double *sum[MAX_SITES];
    char name[MAX_SITES][96];
} ref_stats;

static void ref_observe(void *ctx, int site, const ql_linear *lin, const float *x, int64_t n_tok)
{
    ref_stats *r = ctx;
    if (site < 0 || site >= MAX_SITES)
        return;
    if (!r->sum[site]) {
        r->sum[site] = calloc((size_t)lin->n_in, sizeof(double));
        r->n_in[site] = lin->n_in;
        ql_strlcpy(r->name[site], lin->name, sizeof r->name[site]);
    }
    r->calls[site]++;
    r->rows[site] += n_tok;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t j = 0; j < lin->n_in; j++)
            r->sum[site][j] += (double)x[t * lin->n_in + j] * (double)x[t * lin->n_in + j];
}

static void ref_free(ref_stats *r)
{
    for (int s = 0; s < MAX_SITES; s++)
        free(r->sum[s]);
}

static void test_rules(void)
{
    CHECK(ql_imatrix_collects("blk.0.attn_q.weight", false));
    CHECK(ql_imatrix_collects("blk.11.ffn_down.weight", false));
    CHECK(!ql_imatrix_collects("output.weight", false));
    CHECK(ql_imatrix_collects("output.weight", true));
    CHECK(!ql_imatrix_collects("token_embd.weight", false));
    CHECK(!ql_imatrix_collects("token_embd.weight", true));
    CHECK(!ql_imatrix_collects("blk", true));
}

static void test_collect(const ql_model *m)
{
    enum { CTX = 64, CHUNKS = 3 };
    ql_error err;
    ql_forward *fw;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, CTX, &err), &err);
    ql_ppl_data d;
    qlt_random_ppl_data(&d, m->hp.n_vocab, CTX * CHUNKS + 10, CTX, 0, 777);
    CHECK_EQ_INT(d.n_chunks, CHUNKS);

    ref_stats ref;
    memset(&ref, 0, sizeof ref);
    ql_imatrix_opts o = {false, "unit-text", true, ref_observe, &ref, 1};
    ql_imatrix *im = NULL;
    ql_imatrix_summary sum;
    ql_status st = ql_imatrix_collect(fw, m->weights, &d, &o, &im, &sum, &err);
    CHECK_OK(st, &err);
    if (st)
        goto out;
    /* 5 layers x 7 products; no token_embd, no output without process_output. */
    CHECK_EQ_INT(im->n_entries, 35);
    CHECK_EQ_INT(sum.n_entries, 35);
    CHECK_EQ_INT(sum.n_chunks, CHUNKS);
    CHECK_EQ_INT(sum.n_tokens, CHUNKS * CTX);
    CHECK(sum.ppl > 1 && isfinite(sum.ppl));
    CHECK_EQ_INT(im->chunk_size, CTX);
    CHECK_EQ_INT(im->chunk_count, CHUNKS);
    CHECK(im->n_datasets == 1 && strcmp(im->datasets[0], "unit-text") == 0);
    CHECK(ql_imatrix_find(im, "output.weight") == NULL);
    CHECK(ql_imatrix_find(im, "token_embd.weight") == NULL);
    for (int64_t i = 1; i < im->n_entries; i++)
        CHECK(strcmp(im->entries[i - 1].name, im->entries[i].name) < 0);
    double worst = 0;
    for (int s = 0; s < m->weights->n_lin && s < MAX_SITES; s++) {
        /* Every site ran once per chunk with all CTX rows: the last layer's products
         * and the head too (no output-row pruning while collecting). */
        CHECK_EQ_INT(ref.calls[s], CHUNKS);
        CHECK_EQ_INT(ref.rows[s], CHUNKS * CTX);
        const ql_imatrix_entry *e = ql_imatrix_find(im, ref.name[s]);
        if (s == ql_site_output(m->weights)) {
            CHECK(e == NULL);
            continue;
        }
        CHECK_MSG(e != NULL, "no entry for %s", ref.name[s]);
        if (!e)
            continue;
        CHECK_EQ_INT(e->n_values, ref.n_in[s]);
        CHECK_EQ_INT(e->n_mat, 1);
        CHECK_EQ_INT(e->counts[0], CHUNKS * CTX);
        for (int64_t j = 0; j < e->n_values; j++) {
            double rel = fabs((double)e->sums[j] - ref.sum[s][j]) / ref.sum[s][j];
            if (rel > worst)
                worst = rel;
        }
    }
    CHECK_MSG(worst < F32_SUM_REL_TOL, "sums differ from double sums by %.3g relative", worst);
    printf("collect: 35 entries, max relative difference to double sums %.3g\n", worst);

    /* Both file formats give back the importance (sums / count). */
    const char *paths[2] = {qlt_tmp("u.gguf"), qlt_tmp("u.dat")};
    ql_imatrix_format fmts[2] = {QL_IMATRIX_GGUF, QL_IMATRIX_DAT};
    for (int f = 0; f < 2; f++) {
        CHECK_OK(ql_imatrix_write(im, paths[f], fmts[f], &err), &err);
        ql_imatrix *back = NULL;
        CHECK_OK(ql_imatrix_read(paths[f], &back, &err), &err);
        if (!back)
            continue;
        CHECK_EQ_INT(back->n_entries, 35);
        CHECK_EQ_INT(back->chunk_count, CHUNKS);
        const ql_imatrix_entry *e = ql_imatrix_find(im, "blk.4.ffn_down.weight");
        float a[256], b[256];
        CHECK(e && e->n_values <= 256);
        if (e) {
            CHECK_OK(ql_imatrix_weights(im, e->name, e->n_values, a, &err), &err);
            CHECK_OK(ql_imatrix_weights(back, e->name, e->n_values, b, &err), &err);
            int bad = 0;
            for (int64_t j = 0; j < e->n_values; j++)
                bad += fabsf(a[j] - b[j]) > 1e-6f * a[j];
            CHECK_MSG(bad == 0, "%s: %d importance values changed", paths[f], bad);
        }
        if (fmts[f] == QL_IMATRIX_DAT) /* ncall = chunks, as llama-imatrix writes */
            CHECK(back->chunk_size == 0 && back->entries[0].counts[0] == CHUNKS);
        ql_imatrix_free(back);
    }
    ql_imatrix_free(im);
    im = NULL;

    /* --process-output: the head gets an entry too. */
    o.also = NULL;
    o.process_output = true;
    CHECK_OK(ql_imatrix_collect(fw, m->weights, &d, &o, &im, NULL, &err), &err);
    if (im) {
        CHECK_EQ_INT(im->n_entries, 36);
        const ql_imatrix_entry *e = ql_imatrix_find(im, "output.weight");
        CHECK(e && e->n_values == m->hp.n_embd && e->counts[0] == CHUNKS * CTX);
    }
out:
    ql_imatrix_free(im);
    ref_free(&ref);
    ql_ppl_data_deinit(&d);
    ql_forward_free(fw);
}

/* A tied head reads token_embd.weight and is left out even with process_output. */
static void test_tied_head(const ql_model *m)
{
    ql_error err;
    ql_weights *ws;
    CHECK_OK(ql_weights_copy(&ws, m->weights, &err), &err);
    ql_linear *head = &ws->lin[ql_site_output(ws)];
    ql_strlcpy(head->name, "token_embd.weight", sizeof head->name);
    ql_imatrix_collector *c;
    CHECK_OK(ql_imatrix_collector_alloc(&c, ws, true, &err), &err);
    float x[64];
    for (int j = 0; j < 64; j++)
        x[j] = 1.0f;
    ql_imatrix_collector_observe(c, ql_site_output(ws), head, x, 1);
    ql_imatrix_collector_observe(c, 0, &ws->lin[0], x, 1);
    ql_imatrix *im = NULL;
    CHECK_OK(ql_imatrix_collector_finish(c, 1, 1, NULL, &im, &err), &err);
    CHECK(im && im->n_entries == 1 && strcmp(im->entries[0].name, "blk.0.attn_q.weight") == 0);
    CHECK(im && im->n_datasets == 0);
    ql_imatrix_free(im);
    ql_imatrix_collector_free(c);
    ql_weights_free(ws);
}

/* Entries that saw nothing are dropped; non-finite sums are reported. */
static void test_collector_edges(const ql_model *m)
{
    ql_error err;
    ql_imatrix_collector *c;
    CHECK_OK(ql_imatrix_collector_alloc(&c, m->weights, false, &err), &err);
    ql_imatrix *im = NULL;
    CHECK_EQ_INT(ql_imatrix_collector_finish(c, 8, 0, NULL, &im, &err), QL_EINVAL);
    CHECK(strstr(err.msg, "no product was observed") != NULL);
    ql_imatrix_collector_free(c);

    CHECK_OK(ql_imatrix_collector_alloc(&c, m->weights, false, &err), &err);
    float x[2 * 172];
    for (int j = 0; j < 2 * 172; j++)
        x[j] = 0.5f;
    const ql_linear *q = &m->weights->lin[ql_weights_site(m->weights, 2, QL_SITE_Q)];
    const ql_linear *down = &m->weights->lin[ql_weights_site(m->weights, 2, QL_SITE_DOWN)];
    ql_imatrix_collector_observe(c, ql_weights_site(m->weights, 2, QL_SITE_Q), q, x, 2);
    ql_imatrix_collector_observe(c, ql_weights_site(m->weights, 2, QL_SITE_DOWN), down, x, 2);
    ql_imatrix_collector_observe(c, ql_weights_site(m->weights, 2, QL_SITE_DOWN), down, x, 1);
    CHECK_OK(ql_imatrix_collector_status(c, &err), &err);
    CHECK_OK(ql_imatrix_collector_finish(c, 2, 1, "x", &im, &err), &err);
    if (im) {
        CHECK_EQ_INT(im->n_entries, 2);
        const ql_imatrix_entry *e = ql_imatrix_find(im, "blk.2.ffn_down.weight");
        CHECK(e && e->counts[0] == 3 && e->sums[171] == 0.75f);
        e = ql_imatrix_find(im, "blk.2.attn_q.weight");
        CHECK(e && e->counts[0] == 2 && e->sums[0] == 0.5f);
    }
    ql_imatrix_free(im);

    /* The collector is reusable after finish; an infinite input stops it. */
    x[3] = INFINITY;
    ql_imatrix_collector_observe(c, ql_weights_site(m->weights, 2, QL_SITE_Q), q, x, 1);
    CHECK_EQ_INT(ql_imatrix_collector_status(c, &err), QL_EFORMAT);
    CHECK(strstr(err.msg, "blk.2.attn_q.weight") && strstr(err.msg, "column 3") &&
          strstr(err.msg, "infinite"));
    im = NULL;
    CHECK_EQ_INT(ql_imatrix_collector_finish(c, 2, 1, NULL, &im, &err), QL_EFORMAT);
    CHECK(im == NULL);
    ql_imatrix_collector_free(c);
    ql_imatrix_collector_free(NULL);
}

/* Sums do not depend on the thread count (the products run on 1 or 2 threads). */
static void test_threads(void)
{
    ql_synth_opts so;
    ql_synth_defaults(&so);
    so.layers = 1;
    so.ff = 512;
    ql_error err;
    const char *path = qlt_tmp("synth.gguf");
    CHECK_OK(ql_synth_write(&so, path, &err), &err);
    ql_model *m = NULL;
    CHECK_OK(ql_model_load(&m, path, &err), &err);
    if (!m)
        return;
    enum { CTX = 256 }; /* products large enough for OpenBLAS to use both threads */
    ql_forward *fw;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, CTX, &err), &err);
    ql_ppl_data d;
    qlt_random_ppl_data(&d, m->hp.n_vocab, 2 * CTX, CTX, 0, 777);
    ql_imatrix_opts o = {true, NULL, true, NULL, NULL, 1};
    ql_imatrix *a = NULL, *b = NULL;
    int saved = ql_threads_get();
    ql_threads_set(1);
    CHECK_OK(ql_imatrix_collect(fw, m->weights, &d, &o, &a, NULL, &err), &err);
    ql_threads_set(2);
    CHECK_OK(ql_imatrix_collect(fw, m->weights, &d, &o, &b, NULL, &err), &err);
    /* the whole text through each layer at once: the same sums */
    ql_imatrix *g = NULL;
    o.group = 2;
    CHECK_OK(ql_imatrix_collect(fw, m->weights, &d, &o, &g, NULL, &err), &err);
    ql_threads_set(saved);
    if (a && g)
        for (int64_t i = 0; i < a->n_entries && i < g->n_entries; i++)
            CHECK_MSG(memcmp(a->entries[i].sums, g->entries[i].sums,
                             (size_t)a->entries[i].n_values * sizeof(float)) == 0,
                      "%s: groups of 1 and 2 chunks differ", a->entries[i].name);
    ql_imatrix_free(g);
    if (a && b) {
        CHECK_EQ_INT(a->n_entries, 8);
        CHECK_EQ_INT(b->n_entries, 8);
        for (int64_t i = 0; i < a->n_entries && i < b->n_entries; i++)
            CHECK_MSG(a->entries[i].n_values == b->entries[i].n_values &&
                          memcmp(a->entries[i].sums, b->entries[i].sums,
                                 (size_t)a->entries[i].n_values * sizeof(float)) == 0,
                      "%s: 1 and 2 threads differ", a->entries[i].name);
    }
    ql_imatrix_free(a);
    ql_imatrix_free(b);
    ql_ppl_data_deinit(&d);
    ql_forward_free(fw);
    ql_model_free(m);
}

/* Observer chains call every member in order and refuse a fifth. */
static void count_a(void *ctx, int site, const ql_linear *lin, const float *x, int64_t n_tok)
{
    (void)site, (void)lin, (void)x, (void)n_tok;
    int *log = ctx;
    log[log[0] + 1] = 'a';
    log[0]++;
}

static void count_b(void *ctx, int site, const ql_linear *lin, const float *x, int64_t n_tok)
{
    (void)site, (void)lin, (void)x, (void)n_tok;
    int *log = ctx;
    log[log[0] + 1] = 'b';
    log[0]++;
}

static void test_chain(void)
{
    ql_observer_chain c;
    ql_observer_chain_init(&c);
    int log[8] = {0};
    ql_error err;
    CHECK_OK(ql_observer_chain_add(&c, count_a, log, &err), &err);
    CHECK_OK(ql_observer_chain_add(&c, NULL, log, &err), &err); /* ignored */
    CHECK_OK(ql_observer_chain_add(&c, count_b, log, &err), &err);
    CHECK_EQ_INT(c.n, 2);
    ql_observer_chain_observe(&c, 0, NULL, NULL, 0);
    CHECK(log[0] == 2 && log[1] == 'a' && log[2] == 'b');
    CHECK_OK(ql_observer_chain_add(&c, count_a, log, &err), &err);
    CHECK_OK(ql_observer_chain_add(&c, count_a, log, &err), &err);
    CHECK_EQ_INT(ql_observer_chain_add(&c, count_a, log, &err), QL_EINVAL);
}

/* The importance table: lengths checked against the model's tensors. */
static void test_table(const ql_model *m)
{
    ql_error err;
    ql_imatrix *im;
    CHECK_OK(ql_imatrix_alloc(&im, &err), &err);
    ql_imatrix_entry *e;
    CHECK_OK(ql_imatrix_add_entry(im, "blk.0.attn_q.weight", 64, 1, false, &e, &err), &err);
    for (int j = 0; j < 64; j++)
        e->sums[j] = (float)(j + 1);
    e->counts[0] = 4;
    CHECK_OK(ql_imatrix_add_entry(im, "not.in.the.model", 7, 1, false, &e, &err), &err);
    e->counts[0] = 1;
    CHECK_OK(ql_imatrix_add_entry(im, "token_embd.weight", 10, 1, false, &e, &err), &err);
    e->counts[0] = 1;
    ql_imatrix_table *t = NULL;
    CHECK_OK(ql_imatrix_table_alloc(&t, im, m->gguf, &err), &err);
    if (t) {
        CHECK_EQ_INT(ql_imatrix_table_n_matched(t), 1);
        CHECK(ql_imatrix_table_skipped(t) &&
              strcmp(ql_imatrix_table_skipped(t), "token_embd.weight") == 0);
        const float *w = ql_imatrix_table_lookup(t, "blk.0.attn_q.weight", 64, 1);
        CHECK(w && w[0] == 0.25f && w[63] == 16.0f);
        CHECK(ql_imatrix_table_lookup(t, "blk.0.attn_q.weight", 32, 1) == NULL);
        CHECK(ql_imatrix_table_lookup(t, "blk.0.attn_k.weight", 64, 1) == NULL);
        CHECK(ql_imatrix_table_lookup(t, "token_embd.weight", 64, 1) == NULL);
    }
    ql_imatrix_table_free(t);

    /* Another length for a block weight: an error naming the entry and both lengths. */
    CHECK_OK(ql_imatrix_add_entry(im, "blk.1.ffn_down.weight", 64, 1, false, &e, &err), &err);
    e->counts[0] = 1;
    t = NULL;
    CHECK_EQ_INT(ql_imatrix_table_alloc(&t, im, m->gguf, &err), QL_EFORMAT);
    CHECK(t == NULL);
    CHECK_MSG(strstr(err.msg, "'blk.1.ffn_down.weight' has 64 values") &&
                  strstr(err.msg, "needs 172") && strstr(err.msg, "stories260K.gguf"),
              "message: %s", err.msg);
    ql_imatrix_table_free(NULL);
    ql_imatrix_free(im);
}

int main(void)
{
    const char *path = qlt_shared("models/stories260K.gguf");
    if (!ql_file_exists(path))
        qlt_skip("stories260K.gguf not found under ../shared");
    ql_error err;
    ql_model *m = NULL;
    ql_status st = ql_model_load(&m, path, &err);
    CHECK_OK(st, &err);
    if (st)
        return qlt_done();
    test_rules();
    test_collect(m);
    test_tied_head(m);
    test_collector_edges(m);
    test_chain();
    test_table(m);
    test_threads();
    ql_model_free(m);
    return qlt_done();
}
