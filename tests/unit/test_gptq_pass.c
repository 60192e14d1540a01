/* GPTQ over a whole model (experiment/gptq_pass.h) on stories260K: the Hessians'
 * diagonals are the imatrix's sums, a file written from the pass reads back with the
 * pass's bytes, block 0 does not depend on where later blocks' inputs come from, and
 * the memory plan refuses a budget it does not fit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/gptq_pass.h"
#include "experiment/imatrix.h"
#include "formats/type_ids.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/quant_model.h"
#include "qltest.h"

/* The imatrix sums x^2 in f32 token after token, the Hessian in double: over a few
 * hundred positive terms the f32 sum's relative rounding error stays below
 * n * 2^-24 ~ 1e-5 (as in test_imatrix.c). */
#define F32_SUM_REL_TOL 2e-5

static void make_data(ql_ppl_data *d, int n_vocab, int64_t n, int ctx, int64_t chunks)
{
    int32_t *t = malloc((size_t)n * sizeof *t);
    uint32_t s = 4242;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        t[i] = (int32_t)((s >> 8) % (uint32_t)n_vocab);
    }
    ql_error err;
    CHECK_OK(ql_ppl_data_from_tokens(d, t, n, 1, ctx, chunks, &err), &err);
    free(t);
}

typedef struct {
    ql_hessians **h;
    int n_layer;
} all_layers;

static void observe_all(void *ctx, int site, const ql_linear *lin, const float *x, int64_t n_tok)
{
    all_layers *a = ctx;
    if (lin->layer >= 0 && lin->layer < a->n_layer)
        ql_hessians_observe(a->h[lin->layer], site, lin, x, n_tok);
}

static void test_diag_is_imatrix(const ql_model *m, const ql_ppl_data *d)
{
    ql_error err;
    ql_forward *fw = NULL;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, d->ctx, &err), &err);
    const int nl = m->weights->n_layer;
    ql_hessians **h = calloc((size_t)nl, sizeof *h);
    for (int l = 0; l < nl; l++)
        CHECK_OK(ql_hessians_alloc(&h[l], m->weights, l, &err), &err);
    all_layers a = {h, nl};
    ql_imatrix_opts o = {.quiet = true, .also = observe_all, .also_ctx = &a};
    ql_imatrix *im = NULL;
    CHECK_OK(ql_imatrix_collect(fw, m->weights, d, &o, &im, NULL, &err), &err);
    int checked = 0;
    double worst = 0;
    for (int s = 0; im && s < m->weights->n_lin - 1; s++) {
        const ql_linear *lin = &m->weights->lin[s];
        const ql_imatrix_entry *e = ql_imatrix_find(im, lin->name);
        int64_t n_in = 0, n_tok = 0;
        const double *H = ql_hessians_get(h[lin->layer], lin->kind, &n_in, &n_tok);
        CHECK_MSG(e && H, "%s: imatrix entry %p, Hessian %p", lin->name, (const void *)e,
                  (const void *)H);
        if (!e || !H)
            continue;
        CHECK_EQ_INT(n_in, lin->n_in);
        CHECK_EQ_INT(n_tok, (int64_t)e->counts[0]);
        for (int64_t j = 0; j < n_in; j++) {
            const double hd = H[j * n_in + j], is = (double)e->sums[j];
            const double rel = fabs(hd - is) / (hd > 0 ? hd : 1.0);
            worst = rel > worst ? rel : worst;
            /* Symmetric, and the off-diagonal is really there (correlated inputs). */
            if (j + 1 < n_in)
                CHECK(H[j * n_in + j + 1] == H[(j + 1) * n_in + j]);
        }
        checked++;
    }
    printf("diag(H) vs imatrix sums over %d products: worst relative difference %.2e\n",
           checked, worst);
    CHECK(checked == 7 * nl);
    CHECK_MSG(worst <= F32_SUM_REL_TOL, "worst %.3g", worst);
    for (int l = 0; l < nl; l++)
        ql_hessians_free(h[l]);
    free(h);
    ql_imatrix_free(im);
    ql_forward_free(fw);
}

static ql_quant_plan *pure_plan(const ql_model *m, int32_t type)
{
    ql_quant_config cfg = {.weight_type = type,
                           .head_type = QL_TYPE_INVALID,
                           .embd_type = QL_TYPE_INVALID};
    ql_quant_plan *p = NULL;
    ql_error err;
    CHECK_OK(ql_quant_plan_build(m->gguf, &cfg, &p, &err), &err);
    return p;
}

static void test_write_read_back(const ql_model *m, const char *path, const ql_ppl_data *d)
{
    ql_error err;
    ql_quant_plan *plan = pure_plan(m, QL_TYPE_Q4_0);
    ql_gptq_pass_opts po = {.quiet = true};
    ql_gptq_opts_default(&po.gptq);
    ql_gptq_set *set = NULL, *ref_set = NULL;
    ql_gptq_pass_summary sum;
    CHECK_OK(ql_gptq_pass_run(m, plan, d, &po, &set, &sum, &err), &err);
    CHECK(sum.n_gptq == 30); /* 5 ffn_down of 172-wide rows fall back to F16 */
    po.gptq.inputs = QL_GPTQ_INPUTS_REFERENCE;
    CHECK_OK(ql_gptq_pass_run(m, plan, d, &po, &ref_set, NULL, &err), &err);
    ql_quant_model_opts qo = {.cfg = {.weight_type = QL_TYPE_Q4_0,
                                      .head_type = QL_TYPE_INVALID,
                                      .embd_type = QL_TYPE_INVALID},
                              .prequant = ql_gptq_set_lookup,
                              .prequant_ctx = set,
                              .quiet = true};
    ql_quant_model_report *r = NULL;
    const char *out = qlt_tmp("gptq.gguf");
    CHECK_OK(ql_quant_model(path, out, &qo, &r, &err), &err);
    ql_quant_model_report_free(r);
    qo.prequant = NULL;
    const char *out_ggml = qlt_tmp("ggml.gguf");
    CHECK_OK(ql_quant_model(path, out_ggml, &qo, &r, &err), &err);
    ql_quant_model_report_free(r);
    ql_gguf *g = NULL, *gg = NULL;
    CHECK_OK(ql_gguf_open(&g, out, &err), &err);
    CHECK_OK(ql_gguf_open(&gg, out_ggml, &err), &err);
    int same = 0, differ_ggml = 0, block0_same = 0, later_differ = 0;
    for (int64_t i = 0; g && gg && i < plan->n; i++) {
        const ql_quant_plan_entry *e = &plan->entries[i];
        const ql_gguf_tensor *t = ql_gguf_find_tensor(g, e->name);
        const ql_gguf_tensor *tg = ql_gguf_find_tensor(gg, e->name);
        const void *want = ql_gptq_set_lookup(set, e->name, e->used, e->bytes);
        const void *refb = ql_gptq_set_lookup(ref_set, e->name, e->used, e->bytes);
        CHECK(t && tg);
        if (!t || !tg)
            continue;
        if (want) {
            same += t->nbytes == e->bytes && memcmp(t->data, want, (size_t)e->bytes) == 0;
            differ_ggml += memcmp(t->data, tg->data, (size_t)e->bytes) != 0;
            CHECK(refb != NULL);
            if (refb && strncmp(e->name, "blk.0.", 6) == 0)
                block0_same += memcmp(refb, want, (size_t)e->bytes) == 0;
            else if (refb)
                later_differ += memcmp(refb, want, (size_t)e->bytes) != 0;
        } else {
            /* Not GPTQ's: ggml's bytes. */
            CHECK_MSG(t->nbytes == tg->nbytes && memcmp(t->data, tg->data, t->nbytes) == 0,
                      "%s: not GPTQ's, yet not ggml's either", e->name);
        }
    }
    printf("read back: %d tensors as the pass made them, %d differ from ggml's; block 0 the "
           "same with reference inputs: %d, later blocks that differ: %d\n",
           same, differ_ggml, block0_same, later_differ);
    CHECK(same == 35); /* the 30 and the F16 fallbacks, which ggml rounds */
    CHECK(differ_ggml == 30);
    CHECK(block0_same == 7); /* block 0 reads the embeddings either way */
    CHECK(later_differ > 0);
    ql_gguf_close(g);
    ql_gguf_close(gg);
    /* The memory plan, said before allocating. */
    po.mem = 1024;
    ql_gptq_set *none = NULL;
    CHECK(ql_gptq_pass_run(m, plan, d, &po, &none, NULL, &err) == QL_ENOMEM);
    CHECK(strstr(err.msg, "it may plan with (--mem)") != NULL);
    CHECK(none == NULL);
    ql_gptq_set_free(set);
    ql_gptq_set_free(ref_set);
    ql_quant_plan_free(plan);
}

int main(void)
{
    const char *path = qlt_shared("models/stories260K.gguf");
    ql_model *m = NULL;
    ql_error err;
    if (ql_model_load(&m, path, &err) != QL_OK)
        qlt_skip(err.msg);
    ql_ppl_data d;
    make_data(&d, (int)m->hp.n_vocab, 64 * 8, 64, 8);
    test_diag_is_imatrix(m, &d);
    test_write_read_back(m, path, &d);
    ql_ppl_data_deinit(&d);
    ql_model_free(m);
    return qlt_done();
}
