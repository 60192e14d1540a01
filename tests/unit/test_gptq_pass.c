/* GPTQ over a whole model (experiment/gptq_pass.h) on stories260K: the Hessians'
 * diagonals are the imatrix's sums, a file written from the pass reads back with the
 * pass's bytes, block 0 does not depend on where later blocks' inputs come from, and
 * the memory plan refuses a budget it does not fit; with an outlier split, the kept
 * channels leave GPTQ's Hessian and its rounding. On the mixture-of-experts models of
 * golden/moe: each expert's Hessians have the imatrix's per-expert sums (and the shared
 * expert's its dense ones), an expert no calibration row reached gets ggml's bytes, the
 * experts in slices (a --mem that needs them) give the same bytes as all at once, and
 * the thread count changes nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/gptq_pass.h"
#include "experiment/imatrix.h"
#include "experiment/outliers.h"
#include "formats/type_ids.h"
#include "formats/types.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/quant_model.h"
#include "hessian_fixture.h"
#include "qltest.h"

/* The imatrix sums x^2 in f32 token after token, the Hessian in double: over a few
 * hundred positive terms the f32 sum's relative rounding error stays below
 * n * 2^-24 ~ 1e-5 (as in test_imatrix.c). */
#define F32_SUM_REL_TOL 2e-5

static void test_diag_is_imatrix(const ql_model *m, const ql_ppl_data *d)
{
    ql_error err;
    ql_forward *fw = NULL;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, d->ctx, &err), &err);
    const int nl = m->weights->n_layer;
    ql_hessians **h = calloc((size_t)nl, sizeof *h);
    for (int l = 0; l < nl; l++)
        CHECK_OK(ql_hessians_alloc(&h[l], m->weights, l, &err), &err);
    qlt_all_layers a = {h, nl};
    ql_imatrix_opts o = {.quiet = true, .also = qlt_observe_all, .also_ctx = &a};
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

/* ---- GPTQ with an outlier split ---- */

/* sum over rows of e H e^T, e = the row's error (the layer-output error over the
 * calibration tokens). */
static double output_error(const float *w, const float *w_eff, int64_t nrows, int64_t n,
                           const double *H)
{
    double total = 0;
    double *e = malloc((size_t)n * sizeof *e);
    for (int64_t r = 0; r < nrows; r++) {
        for (int64_t j = 0; j < n; j++)
            e[j] = (double)w[r * n + j] - (double)w_eff[r * n + j];
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++)
                total += e[i] * H[i * n + j] * e[j];
    }
    free(e);
    return total;
}

/* Block 0's products (their inputs come from the embeddings, quantized blocks or not):
 * the pass's bytes with kept channels are GPTQ's on the matrix with those columns zeroed
 * and the Hessian restricted to the others (rows and columns zeroed, diagonal 1); they
 * differ from the pass's without a split; and the split product's output error (kept
 * columns exact) is below that of ggml's rounding with the same split. */
static void test_outlier_split(const ql_model *m, const ql_ppl_data *d)
{
    ql_error err;
    const ql_weights *w = m->weights;
    ql_forward *fw = NULL;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, d->ctx, &err), &err);
    ql_hessians *h0 = NULL;
    CHECK_OK(ql_hessians_alloc(&h0, w, 0, &err), &err);
    qlt_all_layers a = {&h0, 1};
    ql_imatrix_opts io = {.quiet = true, .also = qlt_observe_all, .also_ctx = &a};
    ql_imatrix *im = NULL;
    CHECK_OK(ql_imatrix_collect(fw, w, d, &io, &im, NULL, &err), &err);
    /* The same channels for every site: the products reading one input keep the same. */
    const int64_t keep[] = {2, 9, 30};
    const int64_t nk = 3;
    ql_outlier_set os = {.n_sites = w->n_lin, .ratio = 1};
    os.site = calloc((size_t)w->n_lin, sizeof *os.site);
    for (int s = 0; s < w->n_lin; s++) {
        os.site[s].n_in = w->lin[s].n_in;
        os.site[s].n = nk;
        os.site[s].cols = malloc(sizeof keep);
        memcpy(os.site[s].cols, keep, sizeof keep);
    }
    ql_quant_plan *plan = pure_plan(m, QL_TYPE_Q4_0);
    ql_gptq_pass_opts po = {.quiet = true};
    ql_gptq_opts_default(&po.gptq);
    ql_gptq_set *plain = NULL, *split = NULL;
    CHECK_OK(ql_gptq_pass_run(m, plan, d, &po, &plain, NULL, &err), &err);
    po.outliers = &os;
    CHECK_OK(ql_gptq_pass_run(m, plan, d, &po, &split, NULL, &err), &err);
    int checked = 0;
    for (int s = w->layer_site0[0]; s < w->layer_site0[1]; s++) {
        const ql_linear *lin = &w->lin[s];
        const ql_quant_plan_entry *e = NULL;
        for (int64_t i = 0; i < plan->n; i++)
            if (strcmp(plan->entries[i].name, lin->name) == 0)
                e = &plan->entries[i];
        const void *got = e ? ql_gptq_set_lookup(split, e->name, e->used, e->bytes) : NULL;
        const void *without = e ? ql_gptq_set_lookup(plain, e->name, e->used, e->bytes) : NULL;
        if (!got || !without || e->used != QL_TYPE_Q4_0)
            continue;
        const int64_t n = lin->n_in, rows = lin->n_out;
        int64_t n_in = 0;
        const double *H = ql_hessians_get(h0, lin->kind, &n_in, NULL);
        CHECK(H && n_in == n);
        if (!H)
            continue;
        double *Hr = malloc((size_t)(n * n) * sizeof *Hr);
        memcpy(Hr, H, (size_t)(n * n) * sizeof *Hr);
        for (int64_t k = 0; k < nk; k++) {
            for (int64_t i = 0; i < n; i++)
                Hr[i * n + keep[k]] = Hr[keep[k] * n + i] = 0;
            Hr[keep[k] * n + keep[k]] = 1;
        }
        float *wf = malloc((size_t)(rows * n) * sizeof *wf);
        float *w0 = malloc((size_t)(rows * n) * sizeof *w0);
        float *eff = malloc((size_t)(rows * n) * sizeof *eff);
        void *want = malloc((size_t)e->bytes);
        CHECK_OK(ql_linear_decode_rows(lin, 0, rows, wf, &err), &err);
        memcpy(w0, wf, (size_t)(rows * n) * sizeof *w0);
        ql_outliers_zero_cols(w0, rows, n, keep, nk);
        ql_gptq_factor *f = NULL;
        CHECK_OK(ql_gptq_factor_alloc(&f, Hr, n, &po.gptq, &err), &err);
        CHECK_OK(ql_gptq_quantize_rows(f, QL_TYPE_Q4_0, w0, want, rows, NULL, &err), &err);
        CHECK_MSG(memcmp(got, want, (size_t)e->bytes) == 0,
                  "%s: the pass's split bytes are not GPTQ's on the restricted Hessian",
                  lin->name);
        CHECK_MSG(memcmp(got, without, (size_t)e->bytes) != 0, "%s: the split changed nothing",
                  lin->name);
        CHECK_OK(ql_dequant_tensor(QL_TYPE_Q4_0, got, (size_t)e->bytes, rows, n, eff, &err), &err);
        ql_outliers_copy_cols(eff, wf, rows, n, keep, nk);
        const double err_gptq = output_error(wf, eff, rows, n, H);
        ql_outlier_cols oc = {.n_in = n, .n = nk, .cols = (int64_t *)keep};
        CHECK_OK(ql_outliers_quant_weight(QL_TYPE_Q4_0, wf, rows, n, NULL, &oc, eff, NULL, 0,
                                          NULL, NULL, &err),
                 &err);
        const double err_rtn = output_error(wf, eff, rows, n, H);
        printf("%s with 3 kept channels: output error GPTQ %.4g, ggml %.4g\n", lin->name,
               err_gptq, err_rtn);
        CHECK(err_gptq < err_rtn);
        checked++;
        ql_gptq_factor_free(f);
        free(Hr);
        free(wf);
        free(w0);
        free(eff);
        free(want);
    }
    CHECK(checked == 6); /* ffn_down's 172-wide rows fall back to F16 */
    ql_gptq_set_free(plain);
    ql_gptq_set_free(split);
    ql_quant_plan_free(plan);
    for (int s = 0; s < w->n_lin; s++)
        free(os.site[s].cols);
    free(os.site);
    ql_hessians_free(h0);
    ql_imatrix_free(im);
    ql_forward_free(fw);
}

/* ---- mixture of experts ---- */

/* diag(H) of every product with a Hessian against qlab's imatrix: per expert its slice
 * of the stacked entry and its count (the rows routed to it); the router and the shared
 * expert's gate have none (ggml's rounding). Returns the products checked. */
static int moe_diag_is_imatrix(const ql_model *m, const ql_ppl_data *d)
{
    ql_error err;
    ql_forward *fw = NULL;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, d->ctx, &err), &err);
    const ql_weights *w = m->weights;
    const int nl = w->n_layer;
    ql_hessians **h = calloc((size_t)nl, sizeof *h);
    for (int l = 0; l < nl; l++)
        CHECK_OK(ql_hessians_alloc(&h[l], w, l, &err), &err);
    qlt_all_layers a = {h, nl};
    ql_imatrix_opts o = {.quiet = true, .also = qlt_observe_all, .also_ctx = &a};
    ql_imatrix *im = NULL;
    CHECK_OK(ql_imatrix_collect(fw, w, d, &o, &im, NULL, &err), &err);
    int checked = 0, no_hessian = 0;
    double worst = 0;
    for (int s = 0; im && s < w->n_lin - 1; s++) {
        const ql_linear *lin = &w->lin[s];
        const ql_imatrix_entry *e = ql_imatrix_find(im, lin->name);
        CHECK_MSG(e != NULL, "%s: no imatrix entry", lin->name);
        if (!e)
            continue;
        const bool experts = ql_site_kind_experts(lin->kind);
        if (!experts && ql_hess_input_of(lin->kind) < 0) {
            int64_t n_in = 0;
            CHECK(ql_hessians_get(h[lin->layer], lin->kind, &n_in, NULL) == NULL);
            no_hessian++;
            continue;
        }
        const int n_mat = experts ? lin->n_expert : 1;
        CHECK_EQ_INT(e->n_mat, n_mat);
        for (int x = 0; x < n_mat && e->n_mat == n_mat; x++) {
            int64_t n_in = 0, n_tok = 0;
            const double *H =
                experts ? ql_hessians_get_expert(h[lin->layer], lin->kind, x, &n_in, &n_tok)
                        : ql_hessians_get(h[lin->layer], lin->kind, &n_in, &n_tok);
            CHECK_EQ_INT(n_tok, (int64_t)e->counts[x]);
            CHECK_MSG(H != NULL || e->counts[x] == 0, "%s expert %d: no Hessian", lin->name, x);
            if (!H)
                continue;
            CHECK_EQ_INT(n_in, lin->n_in);
            const float *sums = e->sums + (int64_t)x * lin->n_in;
            for (int64_t j = 0; j < n_in; j++) {
                const double hd = H[j * n_in + j], is = (double)sums[j];
                const double rel = fabs(hd - is) / (hd > 0 ? hd : 1.0);
                worst = rel > worst ? rel : worst;
                if (j + 1 < n_in)
                    CHECK(H[j * n_in + j + 1] == H[(j + 1) * n_in + j]);
            }
            checked++;
        }
    }
    printf("%s: diag(H) vs imatrix sums over %d matrices (experts one by one): worst relative "
           "difference %.2e; %d products without a Hessian (router, shared expert's gate)\n",
           m->hp.arch_name, checked, worst, no_hessian);
    CHECK_MSG(worst <= F32_SUM_REL_TOL, "worst %.3g", worst);
    CHECK(no_hessian == nl * (m->hp.n_ff_shexp > 0 ? 2 : 1));
    for (int l = 0; l < nl; l++)
        ql_hessians_free(h[l]);
    free(h);
    ql_imatrix_free(im);
    ql_forward_free(fw);
    return checked;
}

/* Expert x's rows of a stacked tensor in the set against ggml's quantizer's. */
static bool expert_is_ggml(const ql_model *m, const ql_quant_plan_entry *e, const void *bytes,
                           int x)
{
    ql_error err;
    ql_quant_src qs;
    const ql_gguf_tensor *gt = ql_gguf_find_tensor(m->gguf, e->name);
    ql_quant_src_from_gguf(&qs, gt);
    const int64_t rows = e->nrows / e->ne[2];
    const size_t rs = ql_row_size(e->used, e->n_per_row);
    uint8_t *q = malloc((size_t)rows * rs);
    CHECK_OK(ql_quant_tensor_rows(&qs, e->used, x * rows, rows, q, (size_t)rows * rs, &err), &err);
    const bool same = memcmp(q, (const uint8_t *)bytes + (size_t)(x * rows) * rs,
                             (size_t)rows * rs) == 0;
    free(q);
    return same;
}

/* A short calibration text leaves experts without a routed row: their Hessians are
 * zero and their bytes ggml's; the routed experts' are GPTQ's (not ggml's). */
static void moe_unrouted(const ql_model *m)
{
    ql_error err;
    ql_ppl_data d;
    qlt_random_ppl_data(&d, (int)m->hp.n_vocab, 4, 4, 1, 4242);
    /* Which experts the rows reach (reference inputs: the f32 model's routing). */
    ql_forward *fw = NULL;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, d.ctx, &err), &err);
    const ql_weights *w = m->weights;
    const int nl = w->n_layer, X = m->hp.n_expert;
    ql_hessians **h = calloc((size_t)nl, sizeof *h);
    for (int l = 0; l < nl; l++)
        CHECK_OK(ql_hessians_alloc(&h[l], w, l, &err), &err);
    qlt_all_layers a = {h, nl};
    ql_imatrix_opts io = {.quiet = true, .also = qlt_observe_all, .also_ctx = &a};
    ql_imatrix *im = NULL;
    CHECK_OK(ql_imatrix_collect(fw, w, &d, &io, &im, NULL, &err), &err);
    bool *routed = calloc((size_t)(nl * X), sizeof *routed);
    int n_unrouted = 0;
    for (int l = 0; l < nl; l++)
        for (int x = 0; x < X; x++) {
            int64_t n_tok = 0;
            ql_hessians_get_expert(h[l], QL_SITE_GATE_EXPS, x, NULL, &n_tok);
            routed[l * X + x] = n_tok > 0;
            n_unrouted += n_tok == 0;
        }
    ql_quant_plan *plan = pure_plan(m, QL_TYPE_Q4_K);
    ql_gptq_pass_opts po = {.quiet = true};
    ql_gptq_opts_default(&po.gptq);
    po.gptq.inputs = QL_GPTQ_INPUTS_REFERENCE;
    ql_gptq_set *set = NULL;
    ql_gptq_pass_summary sum;
    CHECK_OK(ql_gptq_pass_run(m, plan, &d, &po, &set, &sum, &err), &err);
    printf("%s, 4 calibration tokens: %d of %d (block, expert)s without a routed row, the pass "
           "counted %lld\n",
           m->hp.arch_name, n_unrouted, nl * X, (long long)sum.n_expert_unrouted);
    CHECK(n_unrouted > 0);
    CHECK_EQ_INT(sum.n_expert_unrouted, n_unrouted);
    int ggml_unrouted = 0, gptq_routed = 0, n_routed = 0;
    for (int64_t i = 0; set && i < plan->n; i++) {
        const ql_quant_plan_entry *e = &plan->entries[i];
        const ql_linear *lin = ql_weights_find(m->weights, e->name);
        if (!lin || !ql_site_kind_experts(lin->kind))
            continue;
        const void *b = ql_gptq_set_lookup(set, e->name, e->used, e->bytes);
        CHECK(b != NULL);
        for (int x = 0; b && x < X; x++) {
            const bool is_ggml = expert_is_ggml(m, e, b, x);
            if (routed[lin->layer * X + x]) {
                n_routed++;
                gptq_routed += !is_ggml;
            } else {
                CHECK_MSG(is_ggml, "%s expert %d: no routed row, yet not ggml's bytes", e->name,
                          x);
                ggml_unrouted += is_ggml;
            }
        }
    }
    CHECK_EQ_INT(ggml_unrouted, 3 * n_unrouted);
    CHECK_EQ_INT(gptq_routed, n_routed);
    ql_gptq_set_free(set);
    ql_quant_plan_free(plan);
    free(routed);
    for (int l = 0; l < nl; l++)
        ql_hessians_free(h[l]);
    free(h);
    ql_imatrix_free(im);
    ql_forward_free(fw);
    ql_ppl_data_deinit(&d);
}

/* Every tensor of two sets the same. */
static bool sets_equal(const ql_quant_plan *plan, ql_gptq_set *a, ql_gptq_set *b)
{
    int n = 0;
    for (int64_t i = 0; i < plan->n; i++) {
        const ql_quant_plan_entry *e = &plan->entries[i];
        const void *x = ql_gptq_set_lookup(a, e->name, e->used, e->bytes);
        const void *y = ql_gptq_set_lookup(b, e->name, e->used, e->bytes);
        if (!x && !y)
            continue;
        if (!x || !y || memcmp(x, y, (size_t)e->bytes) != 0)
            return false;
        n++;
    }
    return n > 0;
}

/* --mem that holds one or two experts' Hessians: slices, the same bytes; one byte less
 * than one expert needs: the plan, refused. Two threads: the same bytes. */
static void moe_slices(const ql_model *m, const ql_ppl_data *d)
{
    ql_error err;
    ql_quant_plan *plan = pure_plan(m, QL_TYPE_Q4_K);
    ql_gptq_pass_opts po = {.quiet = true};
    ql_gptq_opts_default(&po.gptq);
    ql_gptq_set *all = NULL, *one = NULL, *two = NULL, *thr = NULL, *none = NULL;
    ql_gptq_pass_summary sa, s1, s2;
    const int X = m->hp.n_expert;
    ql_threads_set(1);
    CHECK_OK(ql_gptq_pass_run(m, plan, d, &po, &all, &sa, &err), &err);
    CHECK_EQ_INT(sa.expert_slices, 1);
    CHECK_EQ_INT(sa.experts_per_slice, X);
    CHECK_EQ_INT(sa.n_gptq, 7 * m->hp.n_layer);
    CHECK(sa.bytes_planned == ql_gptq_pass_bytes(m, d, X));
    const size_t b1 = ql_gptq_pass_bytes(m, d, 1), b2 = ql_gptq_pass_bytes(m, d, 2);
    CHECK(b1 < b2 && b2 < sa.bytes_planned);
    CHECK_EQ_INT(ql_gptq_pass_experts_per_slice(m, d, b2 + 1), 2);
    CHECK_EQ_INT(ql_gptq_pass_experts_per_slice(m, d, 0), X);
    po.mem = b1;
    CHECK_OK(ql_gptq_pass_run(m, plan, d, &po, &one, &s1, &err), &err);
    CHECK_EQ_INT(s1.expert_slices, X);
    CHECK_EQ_INT(s1.experts_per_slice, 1);
    CHECK(s1.bytes_planned <= b1);
    po.mem = b2;
    CHECK_OK(ql_gptq_pass_run(m, plan, d, &po, &two, &s2, &err), &err);
    CHECK_EQ_INT(s2.expert_slices, (X + 1) / 2);
    CHECK(sets_equal(plan, all, one));
    CHECK(sets_equal(plan, all, two));
    po.mem = b1 - 1;
    CHECK(ql_gptq_pass_run(m, plan, d, &po, &none, NULL, &err) == QL_ENOMEM);
    CHECK(strstr(err.msg, "with one expert at a time") && strstr(err.msg, "(--mem)"));
    CHECK(none == NULL);
    po.mem = 0;
    ql_threads_set(2);
    CHECK_OK(ql_gptq_pass_run(m, plan, d, &po, &thr, NULL, &err), &err);
    ql_threads_set(1);
    CHECK(sets_equal(plan, all, thr));
    printf("%s: plan %.2f MiB with all %d experts, %.2f MiB one at a time (%d slices): the same "
           "bytes, and with two threads\n",
           m->hp.arch_name, (double)sa.bytes_planned / 1048576.0, X,
           (double)s1.bytes_planned / 1048576.0, s1.expert_slices);
    ql_gptq_set_free(all);
    ql_gptq_set_free(one);
    ql_gptq_set_free(two);
    ql_gptq_set_free(thr);
    ql_quant_plan_free(plan);
}

static void test_moe(const char *file, bool slices)
{
    const char *path = qlt_shared(file);
    ql_model *m = NULL;
    ql_error err;
    CHECK_OK(ql_model_load(&m, path, &err), &err);
    if (!m)
        return;
    ql_ppl_data d;
    qlt_random_ppl_data(&d, (int)m->hp.n_vocab, 64 * 4, 64, 4, 4242);
    const int checked = moe_diag_is_imatrix(m, &d);
    /* attention's 4 and the experts' 3 each, and the shared expert's 3 */
    CHECK_EQ_INT(checked,
                 m->hp.n_layer * (4 + 3 * m->hp.n_expert + (m->hp.n_ff_shexp > 0 ? 3 : 0)));
    moe_unrouted(m);
    if (slices)
        moe_slices(m, &d);
    ql_ppl_data_deinit(&d);
    ql_model_free(m);
}

int main(void)
{
    const char *path = qlt_shared("models/stories260K.gguf");
    ql_model *m = NULL;
    ql_error err;
    if (ql_model_load(&m, path, &err) != QL_OK)
        qlt_skip(err.msg);
    ql_ppl_data d;
    qlt_random_ppl_data(&d, (int)m->hp.n_vocab, 64 * 8, 64, 8, 4242);
    test_diag_is_imatrix(m, &d);
    test_write_read_back(m, path, &d);
    test_outlier_split(m, &d);
    ql_ppl_data_deinit(&d);
    ql_model_free(m);
    test_moe("golden/moe/moe-llama-f32.gguf", true);
    test_moe("golden/moe/moe-qwen2moe-f32.gguf", false);
    test_moe("golden/moe/moe-qwen3moe-f32.gguf", false);
    return qlt_done();
}
