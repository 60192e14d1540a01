/* The fit error table on a small synthetic model written by the test (GSL random
 * heavy-tailed weights): errors against an independent computation, exact bytes,
 * candidate sets, importance sources, sampling, thread independence, the cache;
 * IQ1_S and IQ1_M measured (and written) with the bytes of `qlab quantize`. */
#include <gsl/gsl_errno.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "base/util.h"
#include "experiment/fit.h"
#include "model/gguf.h"
#include "model/quant.h"
#include "model/quant_model.h"
#include "qltest.h"

/* The table sums per-row errors in row order within a chunk and chunks in order;
 * the reference below sums rows in one pass. Same numbers, possibly grouped
 * differently: equal to a few ulps of the total. */
#define ERR_REL_TOL 1e-12

#define N_EMBD        256
#define N_VOCAB       2100 /* > 1024 rows of 256: the embedding spans several row chunks */
#define N_FF          96   /* not a multiple of 256: only 32-block types fit */
#define N_EXPERT      4
#define N_EXPERT_ROWS 64

/* ---------------------------------------------------------------------------
 * The fixture: a one-layer model plus an importance matrix */

typedef struct {
    const char *name;
    int n_dims;
    int64_t ne[3];
    int32_t type;
} spec;

static const spec specs[] = {
    {"token_embd.weight", 2, {N_EMBD, N_VOCAB, 1}, QL_TYPE_F16},
    {"blk.0.attn_norm.weight", 1, {N_EMBD, 1, 1}, QL_TYPE_F32},
    {"blk.0.attn_q.weight", 2, {N_EMBD, N_EMBD, 1}, QL_TYPE_BF16},
    {"blk.0.attn_k.weight", 2, {N_EMBD, 64, 1}, QL_TYPE_F32},
    {"blk.0.ffn_down.weight", 2, {N_FF, N_EMBD, 1}, QL_TYPE_F32},
    {"blk.0.ffn_gate_inp.weight", 2, {N_EMBD, N_EXPERT, 1}, QL_TYPE_F32},
    {"blk.0.ffn_up_exps.weight", 3, {N_EMBD, N_EXPERT_ROWS, N_EXPERT}, QL_TYPE_F32},
    {"output_norm.weight", 1, {N_EMBD, 1, 1}, QL_TYPE_F32},
    {"output.weight", 2, {N_EMBD, N_VOCAB, 1}, QL_TYPE_F32},
};
#define N_SPECS (int)(sizeof specs / sizeof specs[0])

typedef struct {
    const char *name;
    int64_t n;
    float *v;
} imat_entry;

static imat_entry imat[3];

static const float *imat_lookup(void *user, const char *tensor, int64_t *n)
{
    (void)user;
    for (int k = 0; k < 3; k++)
        if (imat[k].v && strcmp(imat[k].name, tensor) == 0) {
            *n = imat[k].n;
            return imat[k].v;
        }
    return NULL;
}

static float weight_value(gsl_rng *r, int64_t col)
{
    /* Student-t with 5 degrees of freedom: heavy tails like trained weights; a few
     * columns carry larger weights (the massive-activation channels). */
    double v = 0.02 * gsl_ran_tdist(r, 5.0);
    if (col % 61 == 7)
        v *= 8.0;
    return (float)v;
}

static char model_path[512];

static ql_status write_model(ql_error *err)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, 4242);
    snprintf(model_path, sizeof model_path, "%s/fit-model.gguf", qlt_tmpdir());
    ql_gguf_writer *w = NULL;
    ql_status st = ql_gguf_writer_alloc(&w, err);
    if (st != QL_OK)
        goto out;
    ql_gguf_writer_set_str(w, "general.architecture", "llama", err);
    ql_gguf_writer_set_u32(w, "llama.block_count", 1, err);
    ql_gguf_writer_set_u32(w, "llama.embedding_length", N_EMBD, err);
    ql_gguf_writer_set_u32(w, "llama.feed_forward_length", N_FF, err);
    ql_gguf_writer_set_u32(w, "llama.attention.head_count", 4, err);
    ql_gguf_writer_set_u32(w, "llama.attention.head_count_kv", 1, err);
    ql_gguf_writer_set_u32(w, "llama.context_length", 512, err);
    for (int i = 0; i < N_SPECS; i++) {
        const spec *s = &specs[i];
        int64_t n = s->ne[0] * s->ne[1] * s->ne[2];
        if ((st = ql_gguf_writer_add_tensor(w, s->name, (uint32_t)s->n_dims, s->ne, s->type,
                                            (uint64_t)n * (s->type == QL_TYPE_F32 ? 4 : 2), err)) !=
            QL_OK)
            goto out;
    }
    if ((st = ql_gguf_writer_begin(w, model_path, err)) != QL_OK)
        goto out;
    for (int i = 0; i < N_SPECS && st == QL_OK; i++) {
        const spec *s = &specs[i];
        int64_t n = s->ne[0] * s->ne[1] * s->ne[2];
        size_t es = s->type == QL_TYPE_F32 ? 4 : 2;
        uint8_t *buf = malloc((size_t)n * es);
        for (int64_t k = 0; k < n; k++) {
            float v = s->n_dims == 1 ? (float)(1.0 + 0.5 * gsl_ran_gaussian(r, 1.0))
                                     : weight_value(r, k % s->ne[0]);
            if (s->type == QL_TYPE_F32) {
                memcpy(buf + 4 * k, &v, 4);
            } else {
                uint16_t h = s->type == QL_TYPE_F16 ? ql_fp32_to_fp16(v) : ql_fp32_to_bf16(v);
                memcpy(buf + 2 * k, &h, 2);
            }
        }
        st = ql_gguf_writer_write_tensor(w, buf, (uint64_t)n * es, err);
        free(buf);
    }
    if (st == QL_OK)
        st = ql_gguf_writer_finish(w, err);
    /* Importance: per-token mean squares, a few columns much larger. */
    const char *names[3] = {"blk.0.attn_q.weight", "blk.0.ffn_down.weight",
                            "blk.0.ffn_up_exps.weight"};
    const int64_t lens[3] = {N_EMBD, N_FF, N_EMBD * N_EXPERT};
    for (int k = 0; k < 3; k++) {
        imat[k].name = names[k];
        imat[k].n = lens[k];
        imat[k].v = malloc(sizeof(float) * (size_t)lens[k]);
        for (int64_t j = 0; j < lens[k]; j++)
            imat[k].v[j] = (float)(gsl_ran_exponential(r, 1.0) * (j % 37 == 3 ? 50.0 : 1.0));
    }
out:
    ql_gguf_writer_free(w);
    gsl_rng_free(r);
    return st;
}

/* ---------------------------------------------------------------------------
 * Reference computation: one row at a time, straight from the definition */

static void row_f32(const ql_gguf_tensor *gt, int64_t row, float *out)
{
    const int64_t ne0 = gt->ne[0];
    for (int64_t j = 0; j < ne0; j++) {
        if (gt->type == QL_TYPE_F32) {
            memcpy(&out[j], (const uint8_t *)gt->data + 4 * (row * ne0 + j), 4);
        } else {
            uint16_t h;
            memcpy(&h, (const uint8_t *)gt->data + 2 * (row * ne0 + j), 2);
            out[j] = gt->type == QL_TYPE_F16 ? ql_fp16_to_fp32(h) : ql_bf16_to_fp32(h);
        }
    }
}

/* sum over the rows picked by the table's sampling rule of sum_j w_j (x - x^)^2,
 * scaled by rows / sampled. quant_imat: per-row importance for the quantizer
 * (stride ne0 per expert), weights: error weights (same layout) or NULL for the
 * given constant. */
static double reference_error(const ql_gguf_tensor *gt, int32_t type, int64_t sample,
                              const float *quant_imat, const float *weights, float w_const)
{
    const ql_type_traits *tr = ql_type_get(type);
    const int64_t ne0 = gt->ne[0], rows = ql_gguf_tensor_nelements(gt) / ne0;
    const int64_t rows_per_expert = gt->n_dims >= 3 ? gt->ne[1] : rows;
    const int64_t ns = sample > 0 && sample < rows ? sample : rows;
    float *x = malloc(sizeof(float) * (size_t)ne0), *y = malloc(sizeof(float) * (size_t)ne0);
    uint8_t *q = malloc(ql_row_size(type, ne0));
    double total = 0;
    for (int64_t k = 0; k < ns; k++) {
        int64_t r = ns == rows ? k : (2 * k + 1) * rows / (2 * ns);
        int64_t e = r / rows_per_expert;
        row_f32(gt, r, x);
        tr->quantize(x, q, 1, ne0, quant_imat ? quant_imat + e * ne0 : NULL);
        tr->dequantize(q, y, 1, ne0);
        double s = 0;
        for (int64_t j = 0; j < ne0; j++) {
            double d = (double)x[j] - (double)y[j];
            double wj = weights ? (double)weights[e * ne0 + j] : (double)w_const;
            s += wj * d * d;
        }
        total += s;
    }
    free(x);
    free(y);
    free(q);
    return total * (double)rows / (double)ns;
}

static const ql_fit_tensor *find(const ql_fit_table *t, const char *name)
{
    for (int i = 0; i < t->n_tensors; i++)
        if (strcmp(t->tensors[i].name, name) == 0)
            return &t->tensors[i];
    return NULL;
}

static const ql_fit_choice *choice_of(const ql_fit_tensor *ft, int32_t type)
{
    for (int c = 0; ft && c < ft->n_choices; c++)
        if (ft->choices[c].type == type)
            return &ft->choices[c];
    return NULL;
}

static bool has_note(const ql_fit_table *t, const char *fragment)
{
    for (int i = 0; i < t->n_notes; i++)
        if (strstr(t->notes[i], fragment))
            return true;
    return false;
}

static void check_error(const ql_fit_table *t, const ql_gguf *g, const char *name, int32_t type,
                        int64_t sample, const float *quant_imat, const float *weights,
                        float w_const)
{
    const ql_fit_choice *c = choice_of(find(t, name), type);
    CHECK_MSG(c != NULL, "%s has no %s choice", name, ql_type_name(type));
    if (!c)
        return;
    const ql_gguf_tensor *gt = ql_gguf_find_tensor(g, name);
    double want = reference_error(gt, type, sample, quant_imat, weights, w_const);
    CHECK_MSG(fabs(c->err - want) <= ERR_REL_TOL * want, "%s %s: table %.17g, reference %.17g",
              name, ql_type_name(type), c->err, want);
    CHECK_EQ_INT(c->bytes, (uint64_t)(ql_gguf_tensor_nelements(gt) / gt->ne[0]) *
                               ql_row_size(type, gt->ne[0]));
}

/* ---------------------------------------------------------------------------
 * Tests */

static const char *const TYPES = "Q4_0,Q4_K,Q6_K,Q8_0,F16";

static void test_table(const ql_gguf *g, const ql_fit_importance *imp)
{
    ql_error err;
    ql_fit_options o;
    ql_fit_options_init(&o);
    o.types = TYPES;
    o.sample_rows = 0; /* exact */
    o.cache_dir = "";
    o.quiet = true;
    ql_fit_table *t = NULL;
    CHECK_OK(ql_fit_table_compute(g, "0123", imp, &o, &t, &err), &err);
    if (!t)
        return;
    CHECK_MSG(strcmp(t->types, "F16,Q4_0,Q8_0,Q4_K,Q6_K") == 0, "types %s", t->types);
    /* Which tensors are assigned. */
    CHECK(find(t, "token_embd.weight")->assigned);
    CHECK(!find(t, "blk.0.attn_norm.weight")->assigned);
    CHECK(!find(t, "blk.0.ffn_gate_inp.weight")->assigned);
    CHECK(find(t, "blk.0.ffn_up_exps.weight")->assigned);
    CHECK_EQ_INT(find(t, "blk.0.ffn_gate_inp.weight")->fixed_type, QL_TYPE_F32);
    CHECK_EQ_INT(t->fixed_bytes, 4 * (N_EMBD + N_EMBD * N_EXPERT + N_EMBD));
    CHECK_EQ_INT(t->assigned_params, 2 * N_EMBD * N_VOCAB + N_EMBD * N_EMBD + N_EMBD * 64 +
                                         N_FF * N_EMBD + N_EMBD * N_EXPERT_ROWS * N_EXPERT);
    /* Rows of 96 only take 32-block types. */
    const ql_fit_tensor *down = find(t, "blk.0.ffn_down.weight");
    CHECK_EQ_INT(down->n_choices, 3);
    CHECK(choice_of(down, QL_TYPE_Q4_K) == NULL && choice_of(down, QL_TYPE_Q4_0) != NULL);
    CHECK_EQ_INT(find(t, "blk.0.attn_q.weight")->n_choices, 5);
    /* Choices sorted by bytes. */
    for (int i = 0; i < t->n_tensors; i++)
        for (int c = 1; c < t->tensors[i].n_choices; c++)
            CHECK(t->tensors[i].choices[c - 1].bytes <= t->tensors[i].choices[c].bytes);
    /* Importance sources. */
    CHECK_EQ_INT(find(t, "token_embd.weight")->imp, QL_FIT_IMP_LOOKUP);
    CHECK_EQ_INT(find(t, "output.weight")->imp, QL_FIT_IMP_OUTPUT_NORM);
    CHECK_EQ_INT(find(t, "blk.0.attn_q.weight")->imp, QL_FIT_IMP_IMATRIX);
    CHECK_EQ_INT(find(t, "blk.0.attn_k.weight")->imp, QL_FIT_IMP_UNIT);
    CHECK(find(t, "blk.0.attn_q.weight")->quant_imatrix);
    CHECK(!find(t, "output.weight")->quant_imatrix);

    /* Errors against the definition, every importance source. */
    float embd_w = (float)(1.0 / N_VOCAB);
    const ql_gguf_tensor *norm = ql_gguf_find_tensor(g, "output_norm.weight");
    float norm2[N_EMBD];
    memcpy(norm2, norm->data, sizeof norm2);
    for (int j = 0; j < N_EMBD; j++)
        norm2[j] *= norm2[j];
    static const int32_t all[] = {QL_TYPE_Q4_0, QL_TYPE_Q8_0, QL_TYPE_Q4_K, QL_TYPE_Q6_K,
                                  QL_TYPE_F16};
    for (size_t k = 0; k < 5; k++) {
        check_error(t, g, "token_embd.weight", all[k], 0, NULL, NULL, embd_w);
        check_error(t, g, "output.weight", all[k], 0, NULL, norm2, 0);
        check_error(t, g, "blk.0.attn_q.weight", all[k], 0, imat[0].v, imat[0].v, 0);
        check_error(t, g, "blk.0.attn_k.weight", all[k], 0, NULL, NULL, 1.0f);
        check_error(t, g, "blk.0.ffn_up_exps.weight", all[k], 0, imat[2].v, imat[2].v, 0);
    }
    check_error(t, g, "blk.0.ffn_down.weight", QL_TYPE_Q4_0, 0, imat[1].v, imat[1].v, 0);
    /* More bits, less error (BF16 to F16 only loses the f16 subnormal range). */
    const ql_fit_tensor *q = find(t, "blk.0.attn_q.weight");
    CHECK(choice_of(q, QL_TYPE_Q4_K)->err > choice_of(q, QL_TYPE_Q6_K)->err);
    CHECK(choice_of(q, QL_TYPE_Q6_K)->err > choice_of(q, QL_TYPE_Q8_0)->err);
    CHECK(choice_of(q, QL_TYPE_Q8_0)->err > 100 * choice_of(q, QL_TYPE_F16)->err);

    /* Sampling: the table measures the rule's rows and scales. */
    o.sample_rows = 100;
    ql_fit_table *s = NULL;
    CHECK_OK(ql_fit_table_compute(g, "0123", imp, &o, &s, &err), &err);
    if (s) {
        CHECK_EQ_INT(find(s, "token_embd.weight")->rows_measured, 100);
        CHECK_EQ_INT(find(s, "blk.0.attn_k.weight")->rows_measured, 64);
        check_error(s, g, "token_embd.weight", QL_TYPE_Q4_K, 100, NULL, NULL, embd_w);
        check_error(s, g, "blk.0.ffn_up_exps.weight", QL_TYPE_Q4_0, 100, imat[2].v, imat[2].v, 0);
        check_error(s, g, "blk.0.attn_q.weight", QL_TYPE_Q6_K, 100, imat[0].v, imat[0].v, 0);
        /* Rows are statistically alike: the estimate lands near the exact value. */
        double est = choice_of(find(s, "output.weight"), QL_TYPE_Q4_K)->err;
        double exact = choice_of(find(t, "output.weight"), QL_TYPE_Q4_K)->err;
        CHECK_MSG(fabs(est / exact - 1) < 0.25, "sampled %g vs exact %g", est, exact);
    }
    ql_fit_table_free(s);

    /* Written at the smallest size: the expert tensor is quantized expert by expert
     * with its slice of the per-expert imatrix entry. */
    ql_fit_plan *plan = NULL;
    CHECK_OK(ql_fit_solve(t, ql_fit_table_min_bytes(t), NULL, &plan, &err), &err);
    if (plan) {
        char out[512];
        snprintf(out, sizeof out, "%s/fit-small.gguf", qlt_tmpdir());
        CHECK_OK(ql_fit_write(g, plan, imp, NULL, out, true, &err), &err);
        ql_gguf *w = NULL;
        CHECK_OK(ql_gguf_open(&w, out, &err), &err);
        const ql_gguf_tensor *src = ql_gguf_find_tensor(g, "blk.0.ffn_up_exps.weight");
        const ql_gguf_tensor *qt = w ? ql_gguf_find_tensor(w, "blk.0.ffn_up_exps.weight") : NULL;
        CHECK(qt && qt->type == ql_fit_plan_type(plan, "blk.0.ffn_up_exps.weight"));
        if (qt) {
            const ql_type_traits *tr = ql_type_get(qt->type);
            const size_t per_expert = (size_t)qt->nbytes / N_EXPERT;
            float *x = malloc(sizeof(float) * N_EMBD * N_EXPERT_ROWS);
            uint8_t *b = malloc(per_expert);
            for (int e = 0; e < N_EXPERT; e++) {
                for (int r = 0; r < N_EXPERT_ROWS; r++)
                    row_f32(src, e * N_EXPERT_ROWS + r, x + r * N_EMBD);
                tr->quantize(x, b, N_EXPERT_ROWS, N_EMBD, imat[2].v + e * N_EMBD);
                CHECK_MSG(memcmp(b, (const uint8_t *)qt->data + e * per_expert, per_expert) == 0,
                          "expert %d: bytes differ from per-expert quantization", e);
            }
            free(x);
            free(b);
        }
        ql_gguf_close(w);
    }
    ql_fit_plan_free(plan);

    /* The thread count changes nothing. */
    int threads = ql_threads_get();
    ql_threads_set(1);
    ql_fit_table *one = NULL;
    o.sample_rows = 0;
    CHECK_OK(ql_fit_table_compute(g, "0123", imp, &o, &one, &err), &err);
    ql_threads_set(threads);
    if (one)
        for (int i = 0; i < t->n_tensors; i++)
            for (int c = 0; c < t->tensors[i].n_choices; c++)
                CHECK(memcmp(&t->tensors[i].choices[c].err, &one->tensors[i].choices[c].err,
                             sizeof(double)) == 0);
    ql_fit_table_free(one);
    ql_fit_table_free(t);
}

static void test_no_imatrix_and_errors(const ql_gguf *g)
{
    ql_error err;
    ql_fit_options o;
    ql_fit_options_init(&o);
    o.cache_dir = "";
    o.quiet = true;
    o.types = "IQ2_XXS,Q4_0,Q4_K,F16";
    ql_fit_table *t = NULL;
    CHECK_OK(ql_fit_table_compute(g, "0123", NULL, &o, &t, &err), &err);
    if (t) {
        CHECK_MSG(strcmp(t->imatrix_sha256, "none") == 0, "%s", t->imatrix_sha256);
        CHECK_EQ_INT(find(t, "blk.0.attn_q.weight")->imp, QL_FIT_IMP_NONE);
        CHECK_EQ_INT(find(t, "token_embd.weight")->imp, QL_FIT_IMP_LOOKUP);
        CHECK_EQ_INT(find(t, "output.weight")->imp, QL_FIT_IMP_NONE);
        CHECK(choice_of(find(t, "blk.0.attn_q.weight"), QL_TYPE_IQ2_XXS) == NULL);
        CHECK_MSG(has_note(t, "IQ2_XXS"), "no note about IQ2_XXS");
    }
    ql_fit_table_free(t);
    /* No candidate fits a tensor: the error names it. */
    o.types = "Q4_K,Q6_K";
    CHECK(ql_fit_table_compute(g, "0123", NULL, &o, &t, &err) == QL_EINVAL);
    CHECK_MSG(strstr(err.msg, "blk.0.ffn_down.weight") && strstr(err.msg, "row length 96") &&
                  strstr(err.msg, "Q6_K: row length"),
              "%s", err.msg);
    o.types = "Q4_K,Q7_K";
    CHECK(ql_fit_table_compute(g, "0123", NULL, &o, &t, &err) == QL_EINVAL);
    CHECK_MSG(strstr(err.msg, "Q7_K"), "%s", err.msg);
    o.types = "Q8_K";
    CHECK(ql_fit_table_compute(g, "0123", NULL, &o, &t, &err) == QL_EINVAL);
    o.types = " , ";
    CHECK(ql_fit_table_compute(g, "0123", NULL, &o, &t, &err) == QL_EINVAL);
    /* An imatrix entry of the wrong length. */
    o.types = NULL;
    float v[10] = {0};
    imat_entry saved = imat[0];
    imat[0].n = 10;
    imat[0].v = v;
    ql_fit_importance imp = {.sha256 = "feed", .lookup = imat_lookup};
    CHECK(ql_fit_table_compute(g, "0123", &imp, &o, &t, &err) == QL_EFORMAT);
    CHECK_MSG(strstr(err.msg, "blk.0.attn_q.weight") && strstr(err.msg, "10 values"), "%s",
              err.msg);
    imat[0] = saved;
}

static void test_cache(const ql_gguf *g, const ql_fit_importance *imp)
{
    ql_error err;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/cache/nested", qlt_tmpdir());
    ql_fit_options o;
    ql_fit_options_init(&o);
    o.types = TYPES;
    o.cache_dir = dir;
    o.quiet = true;
    ql_fit_table *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(ql_fit_table_compute(g, NULL, imp, &o, &a, &err), &err);
    CHECK_OK(ql_fit_table_compute(g, NULL, imp, &o, &b, &err), &err);
    if (a && b) {
        CHECK(!a->from_cache && b->from_cache);
        CHECK(ql_file_exists(a->cache_path));
        CHECK_MSG(strcmp(a->model_sha256, b->model_sha256) == 0 && strlen(a->model_sha256) == 64,
                  "%s", a->model_sha256);
        for (int i = 0; i < a->n_tensors; i++)
            for (int k = 0; k < a->tensors[i].n_choices; k++)
                CHECK(memcmp(&a->tensors[i].choices[k], &b->tensors[i].choices[k],
                             sizeof(ql_fit_choice)) == 0);
        /* Damage the cache: recomputed, with a note, and rewritten. */
        FILE *f = fopen(a->cache_path, "r+b");
        fseek(f, 40, SEEK_SET);
        fputc('#', f);
        fclose(f);
        CHECK_OK(ql_fit_table_compute(g, NULL, imp, &o, &c, &err), &err);
        if (c) {
            CHECK(!c->from_cache);
            CHECK_MSG(has_note(c, "not usable"), "no note about the damaged cache");
        }
        ql_fit_table_free(c);
        c = NULL;
        CHECK_OK(ql_fit_table_compute(g, NULL, imp, &o, &c, &err), &err);
        CHECK(c && c->from_cache);
        ql_fit_table_free(c);
        c = NULL;
        /* Another imatrix identity or sampling: another cache file. */
        ql_fit_importance other = *imp;
        other.sha256 = "other";
        CHECK_OK(ql_fit_table_compute(g, NULL, &other, &o, &c, &err), &err);
        CHECK(c && !c->from_cache && strcmp(c->cache_path, a->cache_path) != 0);
    }
    ql_fit_table_free(a);
    ql_fit_table_free(b);
    ql_fit_table_free(c);
}

/* Tied embeddings: without output.weight, token_embd is also the head, and its
 * error weights add the head's to the lookup's. */
static const float *no_entries(void *user, const char *tensor, int64_t *n)
{
    (void)user, (void)tensor, (void)n;
    return NULL;
}

static void test_tied(void)
{
    ql_error err;
    char path[512];
    snprintf(path, sizeof path, "%s/fit-tied.gguf", qlt_tmpdir());
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, 5);
    ql_gguf_writer *w = NULL;
    CHECK_OK(ql_gguf_writer_alloc(&w, &err), &err);
    const char *names[3] = {"token_embd.weight", "output_norm.weight", "blk.0.attn_q.weight"};
    const int64_t ne[3][2] = {{N_EMBD, 300}, {N_EMBD, 1}, {N_EMBD, N_EMBD}};
    for (int i = 0; i < 3; i++)
        ql_gguf_writer_add_tensor(w, names[i], i == 1 ? 1 : 2, ne[i], QL_TYPE_F32,
                                  (uint64_t)(ne[i][0] * ne[i][1] * 4), &err);
    CHECK_OK(ql_gguf_writer_begin(w, path, &err), &err);
    for (int i = 0; i < 3; i++) {
        int64_t n = ne[i][0] * ne[i][1];
        float *v = malloc(sizeof(float) * (size_t)n);
        for (int64_t k = 0; k < n; k++)
            v[k] = i == 1 ? (float)(1.0 + 0.5 * gsl_ran_gaussian(r, 1.0))
                          : weight_value(r, k % ne[i][0]);
        ql_gguf_writer_write_tensor(w, v, (uint64_t)n * 4, &err);
        free(v);
    }
    CHECK_OK(ql_gguf_writer_finish(w, &err), &err);
    ql_gguf_writer_free(w);
    gsl_rng_free(r);

    ql_gguf *g = NULL;
    CHECK_OK(ql_gguf_open(&g, path, &err), &err);
    if (!g)
        return;
    ql_fit_options o;
    ql_fit_options_init(&o);
    o.types = "Q4_K,Q8_0";
    o.sample_rows = 0;
    o.cache_dir = "";
    o.quiet = true;
    float wts[N_EMBD];
    const ql_gguf_tensor *norm = ql_gguf_find_tensor(g, "output_norm.weight");
    /* With an imatrix (no entry for the embedding): output_norm^2 + 1/rows. */
    ql_fit_importance imp = {.sha256 = "empty", .lookup = no_entries};
    ql_fit_table *t = NULL;
    CHECK_OK(ql_fit_table_compute(g, "t", &imp, &o, &t, &err), &err);
    if (t) {
        CHECK_EQ_INT(find(t, "token_embd.weight")->imp, QL_FIT_IMP_TIED);
        memcpy(wts, norm->data, sizeof wts);
        for (int j = 0; j < N_EMBD; j++)
            wts[j] = wts[j] * wts[j] + (float)(1.0 / 300.0);
        check_error(t, g, "token_embd.weight", QL_TYPE_Q4_K, 0, NULL, wts, 0);
    }
    ql_fit_table_free(t);
    /* Without an imatrix: 1 + 1/rows. */
    CHECK_OK(ql_fit_table_compute(g, "t", NULL, &o, &t, &err), &err);
    if (t) {
        CHECK_EQ_INT(find(t, "token_embd.weight")->imp, QL_FIT_IMP_TIED);
        for (int j = 0; j < N_EMBD; j++)
            wts[j] = 1.0f + (float)(1.0 / 300.0);
        check_error(t, g, "token_embd.weight", QL_TYPE_Q8_0, 0, NULL, wts, 0);
    }
    ql_fit_table_free(t);
    ql_gguf_close(g);
}

/* ---------------------------------------------------------------------------
 * IQ1_S and IQ1_M: the table measures the bytes `qlab quantize` writes */

/* A 2-D tensor and two expert tensors whose matrices end inside a quantizer chunk
 * (1024 values a row: chunks of 16 rows; 512: 32), one with an imatrix entry per
 * expert, one with a single vector for every expert. */
typedef struct {
    const char *name;
    int n_dims;
    int64_t ne[3];
    bool per_expert; /* imatrix entry: one vector per matrix */
} iq1_spec;

static const iq1_spec iq1_specs[] = {
    {"blk.0.attn_q.weight", 2, {1024, 48, 1}, false},
    {"blk.0.ffn_up_exps.weight", 3, {512, 37, 3}, true},
    {"blk.0.ffn_gate_exps.weight", 3, {512, 37, 3}, false},
};
#define N_IQ1 (int)(sizeof iq1_specs / sizeof iq1_specs[0])

static float *iq1_imat[N_IQ1];     /* what the fit's lookup returns */
static float *iq1_imat_mat[N_IQ1]; /* the same, one vector per matrix (quantize's lookup) */

static const float *iq1_fit_lookup(void *user, const char *tensor, int64_t *n)
{
    (void)user;
    for (int k = 0; k < N_IQ1; k++)
        if (strcmp(iq1_specs[k].name, tensor) == 0) {
            const iq1_spec *s = &iq1_specs[k];
            *n = s->ne[0] * (s->per_expert ? s->ne[2] : 1);
            return iq1_imat[k];
        }
    return NULL;
}

static const float *iq1_quant_lookup(void *ctx, const char *tensor, int64_t n_per_row,
                                     int64_t n_mats)
{
    (void)ctx, (void)n_per_row, (void)n_mats;
    for (int k = 0; k < N_IQ1; k++)
        if (strcmp(iq1_specs[k].name, tensor) == 0)
            return iq1_imat_mat[k];
    return NULL;
}

/* Weights where every even row of a matrix is zero but for one 32-group in four:
 * IQ1_S and IQ1_M give those groups the shifts of the row quantized before in the
 * same call, so their bytes tell which rows shared a call. */
static void write_iq1_model(const char *path)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, 11);
    ql_error err;
    ql_gguf_writer *w = NULL;
    CHECK_OK(ql_gguf_writer_alloc(&w, &err), &err);
    ql_gguf_writer_set_str(w, "general.architecture", "llama", &err);
    for (int k = 0; k < N_IQ1; k++) {
        const iq1_spec *s = &iq1_specs[k];
        const int64_t n = s->ne[0] * s->ne[1] * s->ne[2];
        CHECK_OK(ql_gguf_writer_add_tensor(w, s->name, (uint32_t)s->n_dims, s->ne, QL_TYPE_F16,
                                           (uint64_t)n * 2, &err),
                 &err);
    }
    CHECK_OK(ql_gguf_writer_begin(w, path, &err), &err);
    for (int k = 0; k < N_IQ1; k++) {
        const iq1_spec *s = &iq1_specs[k];
        const int64_t n = s->ne[0] * s->ne[1] * s->ne[2];
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            const int64_t row_in_mat = i / s->ne[0] % s->ne[1], group = i % s->ne[0] / 32;
            const bool zero = row_in_mat % 2 == 0 && group % 4 != 0;
            h[i] = ql_fp32_to_fp16(zero ? 0.0f : weight_value(r, i % s->ne[0]));
        }
        CHECK_OK(ql_gguf_writer_write_tensor(w, h, (uint64_t)n * 2, &err), &err);
        free(h);
        const int64_t n_mat = s->ne[2], len = s->ne[0] * (s->per_expert ? n_mat : 1);
        iq1_imat[k] = malloc(sizeof(float) * (size_t)len);
        iq1_imat_mat[k] = malloc(sizeof(float) * (size_t)(s->ne[0] * n_mat));
        for (int64_t j = 0; j < len; j++)
            iq1_imat[k][j] = (float)(0.1 + gsl_ran_exponential(r, 1.0));
        for (int64_t j = 0; j < s->ne[0] * n_mat; j++)
            iq1_imat_mat[k][j] = iq1_imat[k][s->per_expert ? j : j % s->ne[0]];
    }
    CHECK_OK(ql_gguf_writer_finish(w, &err), &err);
    ql_gguf_writer_free(w);
    gsl_rng_free(r);
}

/* sum over the table's sampled rows of sum_j I_j (w - w^)^2, scaled by rows /
 * sampled, with w^ decoded from the quantized file's bytes. */
static double error_from_file(const ql_gguf_tensor *src, const ql_gguf_tensor *q,
                              const float *imat_mat, int64_t sample)
{
    const int64_t ne0 = src->ne[0], rows = ql_gguf_tensor_nelements(src) / ne0;
    const int64_t ns = sample > 0 && sample < rows ? sample : rows;
    float *x = malloc(sizeof(float) * (size_t)ne0), *y = malloc(sizeof(float) * (size_t)ne0);
    double total = 0;
    for (int64_t k = 0; k < ns; k++) {
        const int64_t row = ns == rows ? k : (2 * k + 1) * rows / (2 * ns);
        const float *wt = imat_mat + row / src->ne[1] * ne0;
        row_f32(src, row, x);
        ql_dequant_row(q->type, q->data, row, ne0, y);
        double s = 0;
        for (int64_t j = 0; j < ne0; j++) {
            const double d = (double)x[j] - (double)y[j];
            s += (double)wt[j] * d * d;
        }
        total += s;
    }
    free(x);
    free(y);
    return total * (double)rows / (double)ns;
}

/* Quantizes the model to type with `qlab quantize`'s library call; returns the file. */
static ql_gguf *quantize_iq1(const char *in, int32_t type, ql_quant_model_report **report)
{
    char out[512];
    snprintf(out, sizeof out, "%s/iq1-%s.gguf", qlt_tmpdir(), ql_type_name(type));
    ql_quant_model_opts qo = {
        .cfg = {.weight_type = type, .head_type = QL_TYPE_INVALID, .embd_type = QL_TYPE_INVALID},
        .imatrix = iq1_quant_lookup,
        .stats = true,
        .quiet = true};
    ql_error err;
    ql_gguf *q = NULL;
    CHECK_OK(ql_quant_model(in, out, &qo, report, &err), &err);
    CHECK_OK(ql_gguf_open(&q, out, &err), &err);
    return q;
}

/* The fitted file at the smallest size (every tensor IQ1_S) holds the bytes of
 * qlab quantize's IQ1_S file. */
static void check_iq1_written(const ql_gguf *g, const ql_fit_table *t, const ql_fit_importance *imp,
                              const ql_gguf *quantized)
{
    char out[512];
    snprintf(out, sizeof out, "%s/fit-iq1-out.gguf", qlt_tmpdir());
    ql_error err;
    ql_fit_plan *plan = NULL;
    ql_gguf *f = NULL;
    CHECK_OK(ql_fit_solve(t, ql_fit_table_min_bytes(t), NULL, &plan, &err), &err);
    if (plan)
        CHECK_OK(ql_fit_write(g, plan, imp, NULL, out, true, &err), &err);
    if (plan)
        CHECK_OK(ql_gguf_open(&f, out, &err), &err);
    for (int k = 0; f && k < N_IQ1; k++) {
        const ql_gguf_tensor *a = ql_gguf_find_tensor(f, iq1_specs[k].name);
        const ql_gguf_tensor *b = ql_gguf_find_tensor(quantized, iq1_specs[k].name);
        CHECK_MSG(a && b && a->type == QL_TYPE_IQ1_S && a->type == b->type &&
                      a->nbytes == b->nbytes && memcmp(a->data, b->data, (size_t)a->nbytes) == 0,
                  "%s: qlab fit wrote other bytes than qlab quantize", iq1_specs[k].name);
    }
    ql_gguf_close(f);
    ql_fit_plan_free(plan);
}

static void test_iq1_as_quantize(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/fit-iq1.gguf", qlt_tmpdir());
    write_iq1_model(path);
    ql_error err;
    ql_gguf *g = NULL;
    CHECK_OK(ql_gguf_open(&g, path, &err), &err);
    static const int32_t types[] = {QL_TYPE_IQ1_S, QL_TYPE_IQ1_M};
    ql_quant_model_report *rep[2] = {NULL, NULL};
    ql_gguf *q[2] = {NULL, NULL};
    for (int ti = 0; ti < 2; ti++)
        q[ti] = quantize_iq1(path, types[ti], &rep[ti]);
    ql_fit_importance imp = {.sha256 = "iq1", .lookup = iq1_fit_lookup};
    ql_fit_options o;
    ql_fit_options_init(&o);
    o.types = "IQ1_S,IQ1_M";
    o.cache_dir = "";
    o.quiet = true;
    static const int64_t samples[] = {0, 10};
    for (size_t si = 0; g && q[0] && q[1] && si < 2; si++) {
        o.sample_rows = samples[si];
        ql_fit_table *t = NULL;
        CHECK_OK(ql_fit_table_compute(g, "iq1", &imp, &o, &t, &err), &err);
        for (int ti = 0; t && ti < 2; ti++)
            for (int k = 0; k < N_IQ1; k++) {
                const ql_fit_choice *c = choice_of(find(t, iq1_specs[k].name), types[ti]);
                const double want = error_from_file(ql_gguf_find_tensor(g, iq1_specs[k].name),
                                                    ql_gguf_find_tensor(q[ti], iq1_specs[k].name),
                                                    iq1_imat_mat[k], samples[si]);
                CHECK_MSG(c && fabs(c->err - want) <= ERR_REL_TOL * want,
                          "%s %s, %lld rows sampled: table %.17g, from qlab quantize's bytes "
                          "%.17g",
                          iq1_specs[k].name, ql_type_name(types[ti]), (long long)samples[si],
                          c ? c->err : -1.0, want);
                /* Every row measured: quantize's own imatrix-weighted error. */
                const double qerr = rep[ti]->errors[k].w_sse;
                if (samples[si] == 0)
                    CHECK_MSG(c && fabs(c->err - qerr) <= ERR_REL_TOL * qerr,
                              "%s %s: table %.17g, quantize's imatrix_err %.17g", iq1_specs[k].name,
                              ql_type_name(types[ti]), c ? c->err : -1.0, qerr);
            }
        if (t && samples[si] == 0)
            check_iq1_written(g, t, &imp, q[0]);
        ql_fit_table_free(t);
    }
    for (int ti = 0; ti < 2; ti++) {
        ql_gguf_close(q[ti]);
        ql_quant_model_report_free(rep[ti]);
    }
    ql_gguf_close(g);
    for (int k = 0; k < N_IQ1; k++) {
        free(iq1_imat[k]);
        free(iq1_imat_mat[k]);
    }
}

/* ---------------------------------------------------------------------------
 * The whole pipeline on a llama-shaped model: table, budget, plan, GGUF */

/* Shapes of the llama-shaped model: small for the unit suite, larger for the slow
 * suite (`test_fit_model full`). Every row length is a multiple of 256. */
typedef struct {
    int64_t embd, ff, vocab, kv;
    int layers;
} llama_shape;

static const llama_shape unit_shape = {256, 768, 512, 256, 4};
static const llama_shape full_shape = {1024, 2816, 4096, 256, 8};
static llama_shape L;

#define MAX_LAYERS 16
static char llama_path[512];
static imat_entry limat[MAX_LAYERS * 7];
static int n_limat;

static const float *limat_lookup(void *user, const char *tensor, int64_t *n)
{
    (void)user;
    for (int k = 0; k < n_limat; k++)
        if (strcmp(limat[k].name, tensor) == 0) {
            *n = limat[k].n;
            return limat[k].v;
        }
    return NULL;
}

static ql_status write_llama(ql_error *err)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, 99);
    snprintf(llama_path, sizeof llama_path, "%s/fit-llama.gguf", qlt_tmpdir());
    ql_gguf_writer *w = NULL;
    ql_status st = ql_gguf_writer_alloc(&w, err);
    if (st != QL_OK)
        goto out;
    ql_gguf_writer_set_str(w, "general.architecture", "llama", err);
    ql_gguf_writer_set_str(w, "general.name", "fit test model", err);
    ql_gguf_writer_set_u32(w, "general.file_type", 32, err);
    ql_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)L.layers, err);
    ql_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)L.embd, err);
    ql_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)L.ff, err);
    ql_gguf_writer_set_u32(w, "llama.attention.head_count", 8, err);
    ql_gguf_writer_set_u32(w, "llama.attention.head_count_kv", 4, err);
    ql_gguf_writer_set_u32(w, "llama.context_length", 1024, err);
    /* name, ne0, ne1 (0 = 1-D) */
    char names[MAX_LAYERS * 9 + 3][64];
    int64_t dims[MAX_LAYERS * 9 + 3][2];
    int n = 0;
    snprintf(names[n], 64, "token_embd.weight");
    dims[n][0] = L.embd, dims[n++][1] = L.vocab;
    static const char *mats[7] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                  "ffn_gate", "ffn_up", "ffn_down"};
    const int64_t mdims[7][2] = {{L.embd, L.embd}, {L.embd, L.kv}, {L.embd, L.kv}, {L.embd, L.embd},
                                 {L.embd, L.ff},   {L.embd, L.ff}, {L.ff, L.embd}};
    n_limat = 0;
    for (int l = 0; l < L.layers; l++) {
        snprintf(names[n], 64, "blk.%d.attn_norm.weight", l);
        dims[n][0] = L.embd, dims[n++][1] = 0;
        for (int m = 0; m < 7; m++) {
            snprintf(names[n], 64, "blk.%d.%s.weight", l, mats[m]);
            dims[n][0] = mdims[m][0], dims[n][1] = mdims[m][1];
            imat_entry *e = &limat[n_limat++];
            e->name = ql_strdup(names[n]);
            e->n = mdims[m][0];
            e->v = malloc(sizeof(float) * (size_t)e->n);
            for (int64_t j = 0; j < e->n; j++)
                e->v[j] =
                    (float)(gsl_ran_exponential(r, 1.0) * (j % 53 == 5 ? 30.0 : 1.0) * (1.0 + l));
            n++;
        }
        snprintf(names[n], 64, "blk.%d.ffn_norm.weight", l);
        dims[n][0] = L.embd, dims[n++][1] = 0;
    }
    snprintf(names[n], 64, "output_norm.weight");
    dims[n][0] = L.embd, dims[n++][1] = 0;
    snprintf(names[n], 64, "output.weight");
    dims[n][0] = L.embd, dims[n++][1] = L.vocab;
    for (int i = 0; i < n && st == QL_OK; i++) {
        const bool vec = dims[i][1] == 0;
        int64_t ne[2] = {dims[i][0], vec ? 1 : dims[i][1]};
        st = ql_gguf_writer_add_tensor(w, names[i], vec ? 1 : 2, ne,
                                       vec ? QL_TYPE_F32 : QL_TYPE_BF16,
                                       (uint64_t)(ne[0] * ne[1]) * (vec ? 4 : 2), err);
    }
    if (st == QL_OK)
        st = ql_gguf_writer_begin(w, llama_path, err);
    for (int i = 0; i < n && st == QL_OK; i++) {
        const bool vec = dims[i][1] == 0;
        int64_t cnt = dims[i][0] * (vec ? 1 : dims[i][1]);
        uint8_t *buf = malloc((size_t)cnt * 4);
        for (int64_t k = 0; k < cnt; k++) {
            if (vec) {
                float v = (float)(1.0 + 0.3 * gsl_ran_gaussian(r, 1.0));
                memcpy(buf + 4 * k, &v, 4);
            } else {
                uint16_t h = ql_fp32_to_bf16(weight_value(r, k % dims[i][0]));
                memcpy(buf + 2 * k, &h, 2);
            }
        }
        st = ql_gguf_writer_write_tensor(w, buf, (uint64_t)cnt * (vec ? 4 : 2), err);
        free(buf);
    }
    if (st == QL_OK)
        st = ql_gguf_writer_finish(w, err);
out:
    ql_gguf_writer_free(w);
    gsl_rng_free(r);
    return st;
}

/* Budget use the fit must reach. Issue 9 asks for 99.9% on a full model: the full
 * shape (58 tensors of 0.26M-11.5M weights) must reach it. The unit shape has 30
 * tensors of at most 0.4M weights, whose smallest type steps (2-9 KB) are 0.1-0.4%
 * of its 1.3-2.8 MB budgets: the optimum may leave up to one step unused. */
#define MIN_BUDGET_USE_FULL 0.999
#define MIN_BUDGET_USE_UNIT 0.995

static void check_written(const char *path, const ql_gguf *src, const ql_fit_plan *p,
                          const ql_fit_importance *imp)
{
    ql_error err;
    ql_gguf *out = NULL;
    CHECK_OK(ql_gguf_open(&out, path, &err), &err);
    if (!out)
        return;
    CHECK_EQ_INT(out->n_tensors, src->n_tensors);
    uint64_t total = 0;
    for (int64_t i = 0; i < out->n_tensors && i < src->n_tensors; i++) {
        const ql_gguf_tensor *t = &out->tensors[i];
        CHECK_MSG(strcmp(t->name, p->tensors[i].name) == 0, "%s", t->name);
        CHECK_MSG(t->type == p->tensors[i].type, "%s: %s written, %s planned", t->name,
                  ql_type_name(t->type), ql_type_name(p->tensors[i].type));
        CHECK_EQ_INT(t->nbytes, p->tensors[i].bytes);
        total += t->nbytes;
    }
    CHECK_EQ_INT(total, p->bytes);
    uint32_t ft = 0;
    CHECK(ql_gguf_get_u32(out, "general.file_type", &ft, NULL) && ft == ql_fit_plan_file_type(p));
    CHECK(strcmp(ql_gguf_get_str(out, "general.name", NULL), "fit test model") == 0);
    int64_t budget = 0, kv = 0;
    CHECK(ql_gguf_get_i64(out, "qlab.fit.budget_bytes", &budget, NULL) &&
          (uint64_t)budget == p->budget);
    /* llama-quantize's provenance keys. */
    const char *f = ql_gguf_get_str(out, "quantize.imatrix.file", NULL);
    CHECK(f && strcmp(f, "synthetic.imatrix") == 0);
    CHECK(ql_gguf_get_i64(out, "quantize.imatrix.chunks_count", &kv, NULL) && kv == 7);
    CHECK(ql_gguf_get_i64(out, "quantize.imatrix.entries_count", &kv, NULL) && kv == 14);
    /* The bytes are the quantizer's own, with the tensor's imatrix entry. */
    const char *names[] = {"blk.1.ffn_down.weight", "blk.0.attn_k.weight", "output.weight",
                           "blk.0.attn_norm.weight"};
    for (size_t k = 0; k < 4; k++) {
        const ql_gguf_tensor *st = ql_gguf_find_tensor(src, names[k]);
        const ql_gguf_tensor *wt = ql_gguf_find_tensor(out, names[k]);
        const int64_t ne0 = st->ne[0], rows = ql_gguf_tensor_nelements(st) / ne0;
        float *x = malloc(sizeof(float) * (size_t)(rows * ne0));
        uint8_t *q = malloc((size_t)wt->nbytes);
        for (int64_t r = 0; r < rows; r++)
            row_f32(st, r, x + r * ne0);
        int64_t n = 0;
        const float *v = imp->lookup(imp->user, names[k], &n);
        ql_type_get(wt->type)->quantize(x, q, rows, ne0, v);
        CHECK_MSG(memcmp(q, wt->data, (size_t)wt->nbytes) == 0,
                  "%s: bytes differ from %s's "
                  "quantizer",
                  names[k], ql_type_name(wt->type));
        free(x);
        free(q);
    }
    ql_gguf_close(out);
}

static void test_fit_and_write(const llama_shape *shape)
{
    ql_error err;
    L = *shape;
    CHECK_OK(write_llama(&err), &err);
    ql_gguf *g = NULL;
    CHECK_OK(ql_gguf_open(&g, llama_path, &err), &err);
    if (!g)
        return;
    ql_fit_importance imp = {.sha256 = "llama-imatrix",
                             .lookup = limat_lookup,
                             .file = "synthetic.imatrix",
                             .dataset = "gsl",
                             .n_entries = 14,
                             .n_chunks = 7};
    ql_fit_options o;
    ql_fit_options_init(&o);
    char cache[512];
    snprintf(cache, sizeof cache, "%s/llama-cache", qlt_tmpdir());
    o.cache_dir = cache; /* the first budget measures, the others read the cache */
    o.quiet = true;
    const char *budgets[] = {"bpw:4.5", "bpw:3.3", "bpw:5.5", "bpw:6.1", "bpw:2.9"};
    for (size_t k = 0; k < sizeof budgets / sizeof budgets[0]; k++) {
        ql_fit_budget b;
        CHECK_OK(ql_fit_parse_budget(budgets[k], &b, &err), &err);
        ql_fit_table *t = NULL;
        ql_fit_plan *p = NULL;
        CHECK_OK(ql_fit_plan_model(g, NULL, &imp, &b, &o, &t, &p, &err), &err);
        if (!p) {
            ql_fit_table_free(t);
            continue;
        }
        CHECK(p->bytes <= p->budget);
        const double min_use =
            L.layers == full_shape.layers ? MIN_BUDGET_USE_FULL : MIN_BUDGET_USE_UNIT;
        CHECK_MSG((double)p->bytes >= min_use * (double)p->budget, "%s: %llu of %llu bytes used",
                  budgets[k], (unsigned long long)p->bytes, (unsigned long long)p->budget);
        CHECK(t->from_cache == (k > 0));
        printf("%-8s budget %9llu used %9llu (%.4f%%) bpw %.4f optimal %d, table %.2f s%s\n",
               budgets[k], (unsigned long long)p->budget, (unsigned long long)p->bytes,
               100.0 * (double)p->bytes / (double)p->budget, p->bpw, (int)p->stats.optimal,
               t->seconds, t->from_cache ? " (cache)" : "");
        if (k == 0) {
            char out[512];
            snprintf(out, sizeof out, "%s/fit-out.gguf", qlt_tmpdir());
            CHECK_OK(ql_fit_write(g, p, &imp, NULL, out, true, &err), &err);
            check_written(out, g, p, &imp);
            /* The imatrix counts are i32 keys: a larger one is refused, not truncated. */
            ql_fit_importance big = imp;
            big.n_entries = (int64_t)INT32_MAX + 1;
            snprintf(out, sizeof out, "%s/fit-big.gguf", qlt_tmpdir());
            CHECK(ql_fit_write(g, p, &big, NULL, out, true, &err) == QL_EINVAL);
            CHECK_MSG(strstr(err.msg, "2147483648 entries"), "%s", err.msg);
        }
        ql_fit_plan_free(p);
        ql_fit_table_free(t);
    }
    /* Below the smallest feasible size: refused, naming it. */
    ql_fit_budget b = {QL_FIT_BUDGET_BYTES, 1000, 0};
    ql_fit_table *t = NULL;
    ql_fit_plan *p = NULL;
    CHECK(ql_fit_plan_model(g, NULL, &imp, &b, &o, &t, &p, &err) == QL_EINVAL);
    CHECK_MSG(strstr(err.msg, "smallest feasible size"), "%s", err.msg);
    CHECK(t == NULL && p == NULL);
    ql_gguf_close(g);
    for (int k = 0; k < n_limat; k++) {
        free((char *)limat[k].name);
        free(limat[k].v);
    }
}

int main(int argc, char **argv)
{
    gsl_set_error_handler_off();
    if (argc > 1 && strcmp(argv[1], "full") == 0) {
        test_fit_and_write(&full_shape);
        return qlt_done();
    }
    ql_error err;
    CHECK_OK(write_model(&err), &err);
    ql_gguf *g = NULL;
    CHECK_OK(ql_gguf_open(&g, model_path, &err), &err);
    if (!g)
        return qlt_done();
    ql_fit_importance imp = {.sha256 = "imatrix-sha", .lookup = imat_lookup};
    test_table(g, &imp);
    test_no_imatrix_and_errors(g);
    test_cache(g, &imp);
    ql_gguf_close(g);
    test_tied();
    test_iq1_as_quantize();
    test_fit_and_write(&unit_shape);
    for (int k = 0; k < 3; k++)
        free(imat[k].v);
    return qlt_done();
}
