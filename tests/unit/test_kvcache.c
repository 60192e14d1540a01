/* K/V cache roundings: which hooks each type installs, that they round exactly as the
 * formats do (q4_0 checked through the tensor API), that they are reentrant, the head
 * size rule, and their effect in a forward pass of a small synthetic model (head
 * size 64). Also the activation plan and the calibration observer on the same model. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "base/util.h"
#include "experiment/actquant.h"
#include "experiment/imatrix.h"
#include "experiment/outliers.h"
#include "formats/types.h"
#include "model/forward.h"
#include "model/kvcache.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/quant.h"
#include "model/synth.h"
#include "qltest.h"

static uint64_t rng_state = 9;
static float gauss(void)
{
    return (float)ql_rng_gauss(&rng_state);
}

static void hooks_per_type(void)
{
    ql_error err;
    ql_attn_rounding r;
    CHECK_OK(ql_kv_rounding(QL_TYPE_F32, 8, &r, &err), &err);
    CHECK(!r.round_k && !r.round_v && !r.round_q && !r.round_p && strcmp(r.name, "f32") == 0);
    CHECK_OK(ql_kv_rounding(QL_TYPE_F16, 8, &r, &err), &err);
    CHECK(r.round_k && r.round_v && r.round_q && r.round_p && strcmp(r.name, "f16") == 0);
    CHECK_OK(ql_kv_rounding(QL_TYPE_Q8_0, 64, &r, &err), &err);
    CHECK(r.round_k && r.round_v && r.round_q && !r.round_p && strcmp(r.name, "q8_0") == 0);
    CHECK_OK(ql_kv_rounding(QL_TYPE_Q4_0, 128, &r, &err), &err);
    CHECK(r.round_k && r.round_v && r.round_q && !r.round_p && strcmp(r.name, "q4_0") == 0);
    /* stories260K: 8-wide heads */
    CHECK(ql_kv_rounding(QL_TYPE_Q8_0, 8, &r, &err) == QL_EUNSUPPORTED);
    CHECK_MSG(strcmp(err.msg, "K/V cache type Q8_0: head size 8 is not a multiple of 32 "
                              "(llama.cpp cannot hold a quantized cache for such heads)") == 0,
              "'%s'", err.msg);
    CHECK(ql_kv_rounding(QL_TYPE_Q4_K, 256, &r, &err) == QL_EUNSUPPORTED);
    CHECK(ql_kv_ggml_type(QL_KV_Q4_0) == QL_TYPE_Q4_0 && ql_kv_ggml_type(QL_KV_F16) == QL_TYPE_F16);
}

/* The hooks against the formats: K/V rows as the tensor API quantizes them, the query
 * as q8_0 activations; and the same results from concurrent calls. */
static void hooks_round_exactly(void)
{
    enum { ROWS = 48, HD = 64, N = ROWS * HD };
    ql_error err;
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *ref = malloc(N * sizeof *ref);
    for (int i = 0; i < N; i++)
        x[i] = gauss() * (i % 17 == 0 ? 8.0f : 1.0f);
    ql_attn_rounding r;
    CHECK_OK(ql_kv_rounding(QL_TYPE_Q4_0, HD, &r, &err), &err);
    memcpy(y, x, N * sizeof *y);
    r.round_k(r.ctx, y, ROWS, HD);
    const size_t qsz = ql_row_size(QL_TYPE_Q4_0, HD) * ROWS;
    void *q = malloc(qsz);
    CHECK_OK(ql_quant_tensor(QL_TYPE_Q4_0, x, ROWS, HD, NULL, q, qsz, NULL, &err), &err);
    CHECK_OK(ql_dequant_tensor(QL_TYPE_Q4_0, q, qsz, ROWS, HD, ref, &err), &err);
    CHECK(memcmp(y, ref, N * sizeof *y) == 0);
    memcpy(y, x, N * sizeof *y);
    r.round_q(r.ctx, y, ROWS, HD);
    ql_actq_round(QL_ACTQ_Q8_0, x, ref, N);
    CHECK(memcmp(y, ref, N * sizeof *y) == 0);

    CHECK_OK(ql_kv_rounding(QL_TYPE_Q8_0, HD, &r, &err), &err);
    const size_t q8sz = ql_row_size(QL_TYPE_Q8_0, HD) * ROWS;
    void *q8 = malloc(q8sz);
    CHECK_OK(ql_quant_tensor(QL_TYPE_Q8_0, x, ROWS, HD, NULL, q8, q8sz, NULL, &err), &err);
    CHECK_OK(ql_dequant_tensor(QL_TYPE_Q8_0, q8, q8sz, ROWS, HD, ref, &err), &err);
    memcpy(y, x, N * sizeof *y);
    r.round_v(r.ctx, y, ROWS, HD);
    CHECK(memcmp(y, ref, N * sizeof *y) == 0);

    /* reentrant: every row rounded by its own call, from several threads */
    CHECK_OK(ql_kv_rounding(QL_TYPE_F16, HD, &r, &err), &err);
    float *z = malloc(N * sizeof *z);
    memcpy(y, x, N * sizeof *y);
    memcpy(z, x, N * sizeof *z);
    r.round_p(r.ctx, y, ROWS, HD);
#pragma omp parallel for num_threads(4)
    for (int i = 0; i < ROWS; i++)
        r.round_p(r.ctx, z + (int64_t)i * HD, 1, HD);
    CHECK(memcmp(y, z, N * sizeof *y) == 0);
    for (int i = 0; i < N; i++)
        ref[i] = ql_fp16_to_fp32(ql_fp32_to_fp16(x[i]));
    CHECK(memcmp(y, ref, N * sizeof *y) == 0);
    free(x);
    free(y);
    free(z);
    free(ref);
    free(q);
    free(q8);
}

/* Largest |a - b| over n values. */
static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

static ql_model *load_synth(void)
{
    ql_synth_opts o;
    ql_synth_defaults(&o);
    o.dim = 256;
    o.ff = 512;
    o.layers = 2;
    o.heads = 4;
    o.kv_heads = 2;
    o.seed = 11;
    char path[512];
    snprintf(path, sizeof path, "%s/kv.gguf", qlt_tmpdir());
    ql_error err;
    ql_model *m = NULL;
    ql_status st = ql_synth_write(&o, path, &err);
    if (!st)
        st = ql_model_load(&m, path, &err);
    CHECK_OK(st, &err);
    return m;
}

static void kv_in_forward(const ql_model *m)
{
    enum { N = 96 };
    ql_error err;
    ql_forward *fw;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, N, &err), &err);
    const int V = m->hp.n_vocab;
    int32_t t[N];
    for (int i = 0; i < N; i++)
        t[i] = (int32_t)((i * 37 + 1) % V);
    const size_t sz = (size_t)N * V;
    float *ref = malloc(sz * sizeof *ref), *out = malloc(sz * sizeof *out);
    CHECK_OK(ql_forward_run(fw, m->weights, t, N, 0, 0, ref, &err), &err);
    const int32_t types[3] = {QL_TYPE_F16, QL_TYPE_Q8_0, QL_TYPE_Q4_0};
    double dev[3];
    for (int k = 0; k < 3; k++) {
        CHECK_OK(ql_forward_set_kv_type(fw, types[k], &err), &err);
        CHECK_OK(ql_forward_run(fw, m->weights, t, N, 0, 0, out, &err), &err);
        dev[k] = max_diff(ref, out, sz);
        printf("kv %s: max |logit - f32| = %.3g\n", ql_forward_attn_rounding_name(fw), dev[k]);
    }
    CHECK(dev[0] > 0 && dev[0] < dev[1] && dev[1] < dev[2]);
    CHECK(strcmp(ql_forward_attn_rounding_name(fw), "q4_0") == 0);
    CHECK_OK(ql_forward_set_kv_type(fw, QL_TYPE_F32, &err), &err);
    CHECK_OK(ql_forward_run(fw, m->weights, t, N, 0, 0, out, &err), &err);
    CHECK(memcmp(ref, out, sz * sizeof *out) == 0);
    free(ref);
    free(out);
    ql_forward_free(fw);
}

/* Calibration maxima through the observer, and an activation plan installed on a copy of
 * the weights: sites get the rounding of their weight type, kept channels bypass it. */
static void plan_in_forward(const ql_model *m)
{
    enum { CTX = 64 };
    ql_error err;
    ql_forward *fw;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, CTX, &err), &err);
    int32_t toks[3 * CTX];
    for (int i = 0; i < 3 * CTX; i++)
        toks[i] = (int32_t)((i * 53 + 7) % m->hp.n_vocab);
    ql_ppl_data d;
    CHECK_OK(ql_ppl_data_from_tokens(&d, toks, 3 * CTX, 1, CTX, 0, &err), &err);
    /* the calibration pass: the imatrix's, with the maxima observed alongside */
    ql_act_stats *st;
    CHECK_OK(ql_act_stats_alloc_for(&st, m->weights, &err), &err);
    ql_imatrix_opts io = {false, NULL, true, ql_act_stats_observe, st, 1};
    ql_imatrix *im = NULL;
    CHECK_OK(ql_imatrix_collect(fw, m->weights, &d, &io, &im, NULL, &err), &err);
    ql_imatrix_free(im);
    CHECK_EQ_INT(st->n_sites, m->weights->n_lin);
    for (int s = 0; s < st->n_sites; s++) {
        CHECK_EQ_INT(st->n_rows[s], 3 * CTX); /* every position, every site */
        CHECK_EQ_INT(st->n_in[s], m->weights->lin[s].n_in);
    }
    /* the residual stream's massive channels show in the Q input */
    ql_outlier_set *os;
    CHECK_OK(ql_outlier_set_build(st, 3.0, &os, &err), &err);
    const ql_outlier_cols *oq = &os->site[ql_weights_site(m->weights, 0, QL_SITE_Q)];
    printf("layer 0 Q input: median %.3g, %lld channels above 3x, %lld kept\n", oq->median,
           (long long)oq->n_above, (long long)oq->n);
    CHECK(oq->n >= 2 && oq->n <= m->hp.n_embd / 16);

    /* a plan: Q4_K for layer 0's products, F16 elsewhere, q8_K activations requested */
    ql_weights *ws;
    CHECK_OK(ql_weights_copy(&ws, m->weights, &err), &err);
    int32_t *types = malloc((size_t)ws->n_lin * sizeof *types);
    for (int s = 0; s < ws->n_lin; s++)
        types[s] = ws->lin[s].layer == 0 ? QL_TYPE_Q4_K : QL_TYPE_F16;
    ql_act_plan *ap;
    CHECK_OK(ql_act_plan_build(&ap, ws, QL_ACT_NATIVE, types, NULL, os, &err), &err);
    CHECK(ql_act_plan_choice(ap, ql_weights_site(m->weights, 0, QL_SITE_Q))->used == QL_ACTQ_Q8_K);
    CHECK(ql_act_plan_choice(ap, ql_weights_site(m->weights, 1, QL_SITE_DOWN))->used ==
          QL_ACTQ_F16);
    CHECK_EQ_INT(ql_act_plan_n_fallback(ap), 0);
    ql_act_plan_install(ap, ws);
    CHECK(ws->lin[0].act == ql_act_apply && ws->lin[0].act_ctx != NULL);
    float *a = malloc((size_t)CTX * m->hp.n_vocab * sizeof *a);
    float *b = malloc((size_t)CTX * m->hp.n_vocab * sizeof *b);
    ql_ppl_chunk_input(&d, 0, toks);
    CHECK_OK(ql_forward_run(fw, m->weights, toks, CTX, 0, 0, a, &err), &err);
    CHECK_OK(ql_forward_run(fw, ws, toks, CTX, 0, 0, b, &err), &err);
    const double dq = max_diff(a, b, (size_t)CTX * m->hp.n_vocab);
    CHECK(dq > 0);
    /* f32 mode: nothing installed, the same logits bit for bit */
    ql_act_plan *ap0;
    CHECK_OK(ql_act_plan_build(&ap0, ws, QL_ACT_F32, types, NULL, NULL, &err), &err);
    ql_act_plan_install(ap0, ws);
    CHECK(ws->lin[0].act == NULL);
    CHECK_OK(ql_forward_run(fw, ws, toks, CTX, 0, 0, b, &err), &err);
    CHECK(memcmp(a, b, (size_t)CTX * m->hp.n_vocab * sizeof *a) == 0);
    /* q8_K everywhere: rows of 256 and 512 split, no fallback */
    ql_act_plan *ap1;
    CHECK_OK(ql_act_plan_build(&ap1, ws, QL_ACT_Q8_K, types, NULL, NULL, &err), &err);
    CHECK_EQ_INT(ql_act_plan_n_fallback(ap1), 0);
    ql_act_plan_free(ap1);
    /* Q4_1 weights with their bytes: native is q8_1 with the block-sum term after the
     * product; without the bytes the term is left out and the choice says so */
    void **bytes = calloc((size_t)ws->n_lin, sizeof *bytes);
    for (int s = 0; s < ws->n_lin; s++) {
        const ql_linear *l = &ws->lin[s];
        const size_t qsz = ql_row_size(QL_TYPE_Q4_1, l->n_in) * (size_t)l->n_out;
        bytes[s] = malloc(qsz);
        CHECK_OK(
            ql_quant_tensor(QL_TYPE_Q4_1, l->w, l->n_out, l->n_in, NULL, bytes[s], qsz, NULL, &err),
            &err);
        types[s] = QL_TYPE_Q4_1;
    }
    CHECK_OK(
        ql_act_plan_build(&ap1, ws, QL_ACT_NATIVE, types, (const void *const *)bytes, NULL, &err),
        &err);
    CHECK(ql_act_plan_choice(ap1, 0)->used == QL_ACTQ_Q8_1 &&
          ql_act_plan_choice(ap1, 0)->block_sums);
    ql_act_plan_install(ap1, ws);
    CHECK(ws->lin[0].act_post == ql_act_post && ws->lin[ws->n_lin - 1].act_post == ql_act_post);
    CHECK_OK(ql_forward_run(fw, ws, toks, CTX, 0, 0, b, &err), &err);
    ql_act_plan_free(ap1);
    CHECK_OK(ql_act_plan_build(&ap1, ws, QL_ACT_NATIVE, types, NULL, NULL, &err), &err);
    CHECK(ql_act_plan_choice(ap1, 0)->needs_sums && !ql_act_plan_choice(ap1, 0)->block_sums);
    ql_act_plan_install(ap1, ws);
    CHECK(ws->lin[0].act_post == NULL);
    ql_act_plan_free(ap1);
    for (int s = 0; s < ws->n_lin; s++)
        free(bytes[s]);
    free(bytes);
    /* an outlier set for another weight set */
    ql_outlier_set bad = {.n_sites = 3};
    CHECK(ql_act_plan_build(&ap1, ws, QL_ACT_Q8_0, types, NULL, &bad, &err) == QL_EINVAL && !ap1);
    ql_act_plan_free(ap0);
    ql_act_plan_free(ap);
    ql_weights_free(ws);
    ql_outlier_set_free(os);
    ql_act_stats_free(st);
    ql_ppl_data_deinit(&d);
    free(types);
    free(a);
    free(b);
    ql_forward_free(fw);
}

int main(void)
{
    hooks_per_type();
    hooks_round_exactly();
    ql_model *m = load_synth();
    if (m) {
        kv_in_forward(m);
        plan_in_forward(m);
        ql_model_free(m);
    }
    return qlt_done();
}
