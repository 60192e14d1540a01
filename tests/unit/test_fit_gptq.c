/* The fit's GPTQ errors (experiment/fit_gptq.h) on stories260K: every assigned block
 * product's choices are replaced, each equal to GPTQ's output error recomputed here from
 * the Hessian of an imatrix pass over the same chunks; GPTQ's error is below ggml's
 * rounding's under the same full form; the diagonal part of ggml's is the table's
 * imatrix-weighted error (the units the head and embeddings keep); the thread count
 * changes nothing; a mixture of experts is refused with a reason. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/fit.h"
#include "experiment/fit_gptq.h"
#include "experiment/gptq_pass.h"
#include "experiment/imatrix.h"
#include "formats/quant_split.h"
#include "formats/type_ids.h"
#include "formats/types.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/quant.h"
#include "model/quant_model.h"
#include "hessian_fixture.h"
#include "qltest.h"

/* The imatrix sums x^2 in f32, the Hessian in double (as in test_gptq_pass.c). */
#define F32_SUM_REL_TOL 2e-5

/* sum over rows of e H e^T / n_tok and its diagonal part. */
static void errors_of(const float *x, const float *y, int64_t nr, int64_t n, const double *H,
                      int64_t n_tok, double *full, double *diag)
{
    *full = *diag = 0;
    for (int64_t r = 0; r < nr; r++) {
        double f = 0, dg = 0;
        for (int64_t i = 0; i < n; i++) {
            const double ei = (double)x[r * n + i] - (double)y[r * n + i];
            double hi = 0;
            for (int64_t j = 0; j < n; j++)
                hi += H[i * n + j] * ((double)x[r * n + j] - (double)y[r * n + j]);
            f += ei * hi;
            dg += H[i * n + i] * ei * ei;
        }
        *full += f;
        *diag += dg;
    }
    *full /= (double)n_tok;
    *diag /= (double)n_tok;
}

static ql_fit_table *gptq_table(const ql_model *m, const ql_ppl_data *d,
                                const ql_fit_importance *imp, const ql_gptq_opts *go)
{
    ql_error err;
    ql_fit_options fo;
    ql_fit_options_init(&fo);
    fo.cache_dir = "";
    fo.quiet = true;
    ql_fit_table *t = NULL;
    CHECK_OK(ql_fit_table_compute(m->gguf, NULL, imp, &fo, &t, &err), &err);
    const ql_fit_gptq g = {.model = m, .calib = d, .gptq = go, .imp = imp, .quiet = true};
    CHECK_OK(ql_fit_gptq_errors((void *)&g, t, &err), &err);
    return t;
}

int main(void)
{
    const char *path = qlt_shared("models/stories260K.gguf");
    ql_model *m = NULL;
    ql_error err;
    if (ql_model_load(&m, path, &err) != QL_OK)
        qlt_skip(err.msg);
    ql_ppl_data d;
    qlt_random_ppl_data(&d, (int)m->hp.n_vocab, 64 * 6, 64, 6, 777);
    /* The imatrix and every block's Hessians from one f32 pass over the chunks: the
     * reference's inputs, as ql_hessians_visit sees them. */
    const int nl = m->weights->n_layer;
    ql_forward *fw = NULL;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, d.ctx, &err), &err);
    ql_hessians **h = calloc((size_t)nl, sizeof *h);
    for (int l = 0; l < nl; l++)
        CHECK_OK(ql_hessians_alloc(&h[l], m->weights, l, &err), &err);
    qlt_all_layers a = {h, nl};
    ql_imatrix_opts io = {.quiet = true, .also = qlt_observe_all, .also_ctx = &a};
    ql_imatrix *im = NULL;
    CHECK_OK(ql_imatrix_collect(fw, m->weights, &d, &io, &im, NULL, &err), &err);
    ql_fit_imatrix *fim = NULL;
    CHECK_OK(ql_fit_imatrix_wrap(im, "test", &fim, &err), &err);
    const ql_fit_importance *imp = ql_fit_imatrix_importance(fim);

    ql_fit_options fo;
    ql_fit_options_init(&fo);
    fo.cache_dir = "";
    fo.quiet = true;
    ql_fit_table *plain = NULL;
    CHECK_OK(ql_fit_table_compute(m->gguf, NULL, imp, &fo, &plain, &err), &err);
    ql_gptq_opts go;
    ql_gptq_opts_default(&go);
    ql_fit_table *t = gptq_table(m, &d, imp, &go);
    CHECK(t->n_notes > 0 && strstr(t->notes[t->n_notes - 1], "GPTQ's output error") != NULL);

    int replaced = 0, kept = 0, below = 0, compared = 0;
    double worst_diag = 0, worst_same = 0;
    for (int i = 0; i < t->n_tensors; i++) {
        ql_fit_tensor *ft = &t->tensors[i], *pt = &plain->tensors[i];
        const ql_linear *lin = ft->assigned ? ql_weights_find(m->weights, ft->name) : NULL;
        if (!lin)
            continue;
        if (lin->layer < 0 || ql_hess_input_of(lin->kind) < 0) {
            /* The head and embeddings keep the table's errors. */
            for (int c = 0; c < ft->n_choices; c++)
                kept += ft->choices[c].err == pt->choices[c].err;
            continue;
        }
        const ql_gguf_tensor *gt = ql_gguf_find_tensor(m->gguf, ft->name);
        int64_t n = 0, n_tok = 0;
        const double *H = ql_hessians_get(h[lin->layer], lin->kind, &n, &n_tok);
        const int64_t rows = gt->ne[1], ns = ft->rows_measured;
        const float *qv = NULL;
        int64_t qn = 0;
        CHECK_OK(ql_fit_quant_importance(imp, gt, &qv, &qn, &err), &err);
        float *x = malloc((size_t)(ns * n) * sizeof *x), *y = malloc((size_t)(ns * n) * sizeof *y);
        uint8_t *q = malloc((size_t)(ns * n) * 4);
        for (int64_t k = 0; k < ns; k++)
            ql_dequant_row(gt->type, gt->data, (2 * k + 1) * rows / (2 * ns), n, x + k * n);
        CHECK(ns == rows || ns == 128);
        for (int c = 0; c < ft->n_choices; c++) {
            const int32_t type = ft->choices[c].type;
            if (!ql_split_applies(type))
                continue;
            /* GPTQ's error, recomputed: the factor of the same Hessian, the same rows. */
            double *Hc = malloc((size_t)(n * n) * sizeof *Hc);
            memcpy(Hc, H, (size_t)(n * n) * sizeof *Hc);
            ql_gptq_factor *f = NULL;
            CHECK_OK(ql_gptq_factor_alloc(&f, Hc, n, &go, &err), &err);
            CHECK_OK(ql_gptq_quantize_rows(f, type, x, q, ns, qv, &err), &err);
            ql_type_get(type)->dequantize(q, y, ns, n);
            double full, diag;
            errors_of(x, y, ns, n, H, n_tok, &full, &diag);
            full *= (double)rows / (double)ns;
            const double rel = fabs(full - ft->choices[c].err) / (full > 0 ? full : 1);
            worst_same = rel > worst_same ? rel : worst_same;
            replaced++;
            /* ggml's rounding under the same form: above GPTQ's; its diagonal part is the
             * table's imatrix-weighted error. */
            ql_quant_src s;
            ql_quant_src_from_f32(&s, gt->ne, NULL);
            s.rows = x;
            s.rows_n = ns;
            if (ns == rows) {
                s.imatrix = qv;
                CHECK_OK(ql_quant_tensor_rows(&s, type, 0, ns, q, (size_t)(ns * n) * 4, &err),
                         &err);
                ql_type_get(type)->dequantize(q, y, ns, n);
                double rfull, rdiag;
                errors_of(x, y, ns, n, H, n_tok, &rfull, &rdiag);
                for (int pc = 0; pc < pt->n_choices; pc++)
                    if (pt->choices[pc].type == type) {
                        const double dr = fabs(rdiag - pt->choices[pc].err) / rdiag;
                        worst_diag = dr > worst_diag ? dr : worst_diag;
                    }
                below += full < rfull;
                compared++;
            }
            ql_gptq_factor_free(f);
            free(Hc);
        }
        free(x);
        free(y);
        free(q);
    }
    printf("%d block-product choices replaced (recomputed within %.2e), %d head/embedding "
           "choices kept; GPTQ below ggml's rounding in %d of %d; ggml's diagonal part vs the "
           "table within %.2e\n",
           replaced, worst_same, kept, below, compared, worst_diag);
    CHECK(replaced > 100);
    CHECK(kept > 0);
    CHECK_MSG(worst_same <= 1e-9, "worst %.3g", worst_same);
    CHECK(compared > 50 && below == compared);
    CHECK_MSG(worst_diag <= F32_SUM_REL_TOL, "worst %.3g", worst_diag);

    /* The thread count changes nothing. */
    const int threads = ql_threads_get();
    ql_threads_set(1);
    ql_fit_table *t1 = gptq_table(m, &d, imp, &go);
    ql_threads_set(threads);
    int same = 1;
    for (int i = 0; i < t->n_tensors; i++)
        for (int c = 0; c < t->tensors[i].n_choices; c++)
            same &= t->tensors[i].choices[c].err == t1->tensors[i].choices[c].err;
    CHECK_MSG(same, "the errors depend on the thread count");
    ql_fit_table_free(t1);

    ql_fit_table_free(t);
    ql_fit_table_free(plain);
    ql_fit_imatrix_free(fim);
    ql_imatrix_free(im);
    for (int l = 0; l < nl; l++)
        ql_hessians_free(h[l]);
    free(h);
    ql_forward_free(fw);
    ql_ppl_data_deinit(&d);
    ql_model_free(m);

    /* A mixture of experts: refused, naming why. */
    ql_model *moe = NULL;
    if (ql_model_load(&moe, qlt_shared("golden/moe/moe-llama-f32.gguf"), &err) == QL_OK) {
        ql_ppl_data dm;
        qlt_random_ppl_data(&dm, (int)moe->hp.n_vocab, 64 * 2, 64, 2, 777);
        ql_fit_table *tm = NULL;
        CHECK_OK(ql_fit_table_compute(moe->gguf, NULL, NULL, &fo, &tm, &err), &err);
        const ql_fit_gptq g = {.model = moe, .calib = &dm, .gptq = &go, .quiet = true};
        CHECK(ql_fit_gptq_errors((void *)&g, tm, &err) == QL_EUNSUPPORTED);
        CHECK(strstr(err.msg, "mixture of experts") != NULL);
        ql_fit_table_free(tm);
        ql_ppl_data_deinit(&dm);
        ql_model_free(moe);
    }
    return qlt_done();
}
