/* qlab synth: deterministic output, loads in qlab with the requested shapes, the
 * statistics it promises (heavy tails, hot columns, massive channels), vocabulary
 * padding and its errors. With the argument "sizes" (suite slow): the 2M and 30M
 * models of the README, F32 and F16, load and run. */
#include <math.h>
#include <string.h>

#include "base/dotgemm.h"
#include "base/gemm.h"
#include "base/util.h"
#include "formats/types.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/synth.h"
#include "qltest.h"

/* Student-t with nu = 5 has excess kurtosis 6; sampled over tens of thousands of
 * values (plus hot columns) it stays far above a Gaussian's 0. */
#define MIN_EXCESS_KURTOSIS 2.0
/* Massive channels: the normalized input of Q/K/V has a few channels with RMS this
 * many times the median channel. */
#define MIN_MASSIVE_RATIO 10.0

static double excess_kurtosis(const float *w, int64_t n)
{
    double m = 0, m2 = 0, m4 = 0;
    for (int64_t i = 0; i < n; i++)
        m += (double)w[i];
    m /= (double)n;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)w[i] - m;
        m2 += d * d;
        m4 += d * d * d * d;
    }
    m2 /= (double)n;
    m4 /= (double)n;
    return m4 / (m2 * m2) - 3.0;
}

/* Per-channel RMS of the attn_q input of layer 0 over a chunk: max / median. */
typedef struct {
    double *sumsq;
    int64_t n_in, n_tok;
} chan_stats;

static void observe(void *ctx, int site, const ql_linear *lin, const float *x, int64_t n_tok)
{
    chan_stats *c = ctx;
    if (lin->layer != 0 || lin->kind != QL_SITE_Q)
        return;
    c->n_in = lin->n_in;
    c->n_tok = n_tok;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t j = 0; j < lin->n_in; j++)
            c->sumsq[j] += (double)x[t * lin->n_in + j] * (double)x[t * lin->n_in + j];
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void test_small(void)
{
    ql_synth_opts o;
    ql_synth_defaults(&o);
    o.dim = 256;
    o.ff = 512;
    o.layers = 2;
    o.heads = 4;
    o.kv_heads = 2;
    o.seed = 7;
    ql_error err;
    CHECK_OK(ql_synth_write(&o, qlt_tmp("a.gguf"), &err), &err);
    CHECK_OK(ql_synth_write(&o, qlt_tmp("b.gguf"), &err), &err);
    o.seed = 8;
    CHECK_OK(ql_synth_write(&o, qlt_tmp("c.gguf"), &err), &err);
    char ha[65], hb[65], hc[65];
    CHECK_OK(ql_sha256_file(qlt_tmp("a.gguf"), ha, &err), &err);
    CHECK_OK(ql_sha256_file(qlt_tmp("b.gguf"), hb, &err), &err);
    CHECK_OK(ql_sha256_file(qlt_tmp("c.gguf"), hc, &err), &err);
    CHECK_MSG(strcmp(ha, hb) == 0, "same seed, different files");
    CHECK_MSG(strcmp(ha, hc) != 0, "different seeds, same file");

    ql_model *m;
    ql_status st = ql_model_load(&m, qlt_tmp("a.gguf"), &err);
    CHECK_OK(st, &err);
    if (st)
        return;
    CHECK_EQ_INT(m->hp.n_embd, 256);
    CHECK_EQ_INT(m->hp.n_ff, 512);
    CHECK_EQ_INT(m->hp.n_layer, 2);
    CHECK_EQ_INT(m->hp.n_head_kv, 2);
    CHECK_EQ_INT(m->hp.head_dim, 64);
    CHECK_EQ_INT(m->hp.n_vocab, 512);
    CHECK_EQ_INT(m->n_params, ql_synth_n_params(&o, 512));
    /* the keys llama.cpp requires */
    const char *keys[] = {"general.architecture",       "general.file_type",
                          "llama.context_length",       "llama.embedding_length",
                          "llama.block_count",          "llama.feed_forward_length",
                          "llama.attention.head_count", "llama.attention.head_count_kv",
                          "llama.rope.dimension_count", "llama.attention.layer_norm_rms_epsilon",
                          "tokenizer.ggml.model",       "tokenizer.ggml.tokens",
                          "tokenizer.ggml.scores",      "tokenizer.ggml.token_type",
                          "tokenizer.ggml.bos_token_id"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK_MSG(ql_gguf_find_kv(m->gguf, keys[i]) != NULL, "key %s missing", keys[i]);

    /* heavy tails */
    const ql_linear *wq = &m->weights->lin[ql_weights_site(m->weights, 1, QL_SITE_GATE)];
    double ek = excess_kurtosis(wq->w, wq->n_in * wq->n_out);
    CHECK_MSG(ek > MIN_EXCESS_KURTOSIS, "excess kurtosis %g", ek);
    /* hot input columns: the largest column norm is several times the median */
    double col[512];
    for (int64_t j = 0; j < wq->n_in; j++) {
        col[j] = 0;
        for (int64_t r = 0; r < wq->n_out; r++)
            col[j] += (double)wq->w[r * wq->n_in + j] * (double)wq->w[r * wq->n_in + j];
    }
    qsort(col, (size_t)wq->n_in, sizeof col[0], cmp_double);
    CHECK_MSG(sqrt(col[wq->n_in - 1] / col[wq->n_in / 2]) > 2.5, "hot column ratio %g",
              sqrt(col[wq->n_in - 1] / col[wq->n_in / 2]));

    /* massive channels in the normalized input of a product */
    ql_forward *fw;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, 64, &err), &err);
    chan_stats cs = {.sumsq = calloc(256, sizeof(double))};
    ql_forward_set_observer(fw, observe, &cs);
    int32_t toks[64];
    for (int i = 0; i < 64; i++)
        toks[i] = (int32_t)((i * 37 + 1) % 512);
    float *logits = malloc((size_t)64 * 512 * sizeof *logits);
    CHECK_OK(ql_forward_run(fw, m->weights, toks, 64, 0, 0, logits, &err), &err);
    qsort(cs.sumsq, 256, sizeof(double), cmp_double);
    double ratio = sqrt(cs.sumsq[255] / cs.sumsq[128]);
    CHECK_MSG(ratio > MIN_MASSIVE_RATIO, "massive channel ratio %g", ratio);
    /* peaked next-token distributions, finite logits */
    double max_p_sum = 0;
    int bad = 0;
    for (int t = 0; t < 64; t++) {
        float mx = -INFINITY;
        double z = 0;
        for (int v = 0; v < 512; v++) {
            bad += !isfinite(logits[t * 512 + v]);
            mx = fmaxf(mx, logits[t * 512 + v]);
        }
        for (int v = 0; v < 512; v++)
            z += exp((double)(logits[t * 512 + v] - mx));
        max_p_sum += 1.0 / z;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_MSG(max_p_sum / 64 > 0.05, "mean top probability %g (flat distributions)",
              max_p_sum / 64);
    free(logits);
    free(cs.sumsq);
    ql_forward_free(fw);

    /* Determinism across runs and thread counts, on products large enough to be
     * threaded (stories260K's are small enough to run serially). */
    enum { N = 128 };
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, N, &err), &err);
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((i * 53 + 1) % 512);
    const size_t sz = (size_t)N * 512;
    float *a = malloc(sz * sizeof *a), *b = malloc(sz * sizeof *b), *c = malloc(sz * sizeof *c);
    const int saved = ql_threads_get();
    ql_threads_set(1);
    CHECK_OK(ql_forward_run(fw, m->weights, ids, N, 0, 0, a, &err), &err);
    CHECK_OK(ql_forward_run(fw, m->weights, ids, N, 0, 0, b, &err), &err);
    ql_threads_set(2);
    CHECK_OK(ql_forward_run(fw, m->weights, ids, N, 0, 0, c, &err), &err);
    ql_threads_set(saved);
    CHECK_MSG(memcmp(a, b, sz * sizeof *a) == 0, "two runs differ");
    CHECK_MSG(memcmp(a, c, sz * sizeof *a) == 0, "1 and 2 threads differ");
    free(a);
    free(b);
    free(c);
    ql_forward_free(fw);
    ql_model_free(m);

    /* F16 weights, padded vocabulary */
    o.type = QL_TYPE_F16;
    o.vocab = 600;
    CHECK_OK(ql_synth_write(&o, qlt_tmp("pad.gguf"), &err), &err);
    st = ql_model_load(&m, qlt_tmp("pad.gguf"), &err);
    CHECK_OK(st, &err);
    if (st == QL_OK) {
        CHECK_EQ_INT(m->hp.n_vocab, 600);
        CHECK_EQ_INT(m->weights->lin[0].src_type, QL_TYPE_F16);
        const ql_gguf_array *tt =
            ql_gguf_get_arr(m->gguf, "tokenizer.ggml.token_type", QL_GGUF_INT32, &err);
        const ql_gguf_array *tk =
            ql_gguf_get_arr(m->gguf, "tokenizer.ggml.tokens", QL_GGUF_STRING, &err);
        CHECK(tt && tt->n == 600 && tk && tk->n == 600);
        if (tt && tk && tt->n == 600 && tk->n == 600) {
            CHECK_EQ_INT(((const int32_t *)tt->data)[599], 5);
            CHECK(strcmp(((const ql_gguf_str *)tk->data)[512].ptr, "<unused_0>") == 0);
            CHECK(strcmp(((const ql_gguf_str *)tk->data)[1].ptr, "<s>") == 0);
        }
        uint32_t ft = 0;
        CHECK(ql_gguf_get_u32(m->gguf, "general.file_type", &ft, &err) && ft == 1);
        ql_model_free(m);
    }

    /* errors */
    o.vocab = 100;
    CHECK(ql_synth_write(&o, qlt_tmp("small.gguf"), &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "smaller than the tokenizer") != NULL);
    o.vocab = 0;
    o.heads = 3;
    CHECK(ql_synth_write(&o, qlt_tmp("heads.gguf"), &err) == QL_EINVAL);
    o.heads = 4;
    o.kv_heads = 3;
    CHECK(ql_synth_write(&o, qlt_tmp("kv.gguf"), &err) == QL_EINVAL);
    o.kv_heads = 2;
    o.type = QL_TYPE_Q4_0;
    CHECK(ql_synth_write(&o, qlt_tmp("q4.gguf"), &err) == QL_EINVAL);
    o.type = QL_TYPE_F32;
    o.tokenizer_src = "/nonexistent/model.gguf";
    CHECK(ql_synth_write(&o, qlt_tmp("tok.gguf"), &err) != QL_OK);
    CHECK(!ql_file_exists(qlt_tmp("tok.gguf")));
}

/* The README's sizes: about 2M and 30M parameters, rows multiples of 256. */
static void test_sizes(void)
{
    struct {
        int dim, ff, layers, heads, kv;
        double min_params, max_params;
        int32_t type;
    } sizes[] = {
        {256, 768, 2, 4, 2, 1.5e6, 2.5e6, QL_TYPE_F32},
        {256, 768, 2, 4, 2, 1.5e6, 2.5e6, QL_TYPE_F16},
        {512, 1536, 10, 8, 4, 25e6, 35e6, QL_TYPE_F32},
        {512, 1536, 10, 8, 4, 25e6, 35e6, QL_TYPE_F16},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        ql_synth_opts o;
        ql_synth_defaults(&o);
        o.dim = sizes[i].dim;
        o.ff = sizes[i].ff;
        o.layers = sizes[i].layers;
        o.heads = sizes[i].heads;
        o.kv_heads = sizes[i].kv;
        o.type = sizes[i].type;
        ql_error err;
        const char *p = qlt_tmp("size.gguf");
        CHECK_OK(ql_synth_write(&o, p, &err), &err);
        ql_model *m;
        if (ql_model_load(&m, p, &err) != QL_OK) {
            CHECK_OK(err.status, &err);
            continue;
        }
        printf("synth %dx%d, %d layers, %s: %.2fM params\n", o.dim, o.ff, o.layers,
               ql_type_name(o.type), (double)m->n_params / 1e6);
        CHECK((double)m->n_params > sizes[i].min_params &&
              (double)m->n_params < sizes[i].max_params);
        for (int s = 0; s < m->weights->n_lin; s++)
            CHECK(m->weights->lin[s].n_in % 256 == 0);
        ql_forward *fw;
        CHECK_OK(ql_forward_alloc(&fw, &m->hp, 128, &err), &err);
        int32_t toks[128];
        for (int t = 0; t < 128; t++)
            toks[t] = (int32_t)((t * 97 + 1) % m->hp.n_vocab);
        float *lg = malloc((size_t)m->hp.n_vocab * sizeof *lg);
        CHECK_OK(ql_forward_run(fw, m->weights, toks, 128, 0, 127, lg, &err), &err);
        int bad = 0;
        for (int v = 0; v < m->hp.n_vocab; v++)
            bad += !isfinite(lg[v]);
        CHECK_EQ_INT(bad, 0);
        free(lg);
        ql_forward_free(fw);
        ql_model_free(m);
    }
}

/* Sweep files name synthetic models as "synth:..." specs. */
static void test_specs(void)
{
    ql_synth_opts o, d;
    ql_error err;
    ql_synth_defaults(&d);
    CHECK(ql_synth_is_spec("synth:2M") && !ql_synth_is_spec("stories260K"));
    CHECK_OK(ql_synth_parse_spec("synth:2M", &o, &err), &err);
    CHECK(o.dim == d.dim && o.ff == d.ff && o.layers == d.layers && o.seed == d.seed);
    CHECK_OK(ql_synth_parse_spec("synth:30M,seed=7,type=F16", &o, &err), &err);
    CHECK(o.dim == 512 && o.ff == 1536 && o.layers == 10 && o.heads == 8 && o.kv_heads == 4);
    CHECK(o.seed == 7 && o.type == QL_TYPE_F16);
    CHECK_OK(ql_synth_parse_spec("synth:dim=512,ff=1024,layers=3,kv-heads=1", &o, &err), &err);
    CHECK(o.dim == 512 && o.ff == 1024 && o.layers == 3 && o.kv_heads == 1);
    CHECK(ql_synth_parse_spec("synth:7B", &o, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "unknown preset '7B'") != NULL);
    CHECK(ql_synth_parse_spec("synth:dim=abc", &o, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "bad value 'abc' for dim") != NULL);
    CHECK(ql_synth_parse_spec("synth:width=4", &o, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "unknown key 'width'") != NULL);
    CHECK(ql_synth_parse_spec("synth:type=Q4_0", &o, &err) == QL_EINVAL);

    /* Materializing twice gives one file with the same bytes. */
    char p1[4096], p2[4096];
    CHECK_OK(ql_synth_materialize("synth:dim=64,ff=128,layers=1,heads=2,kv-heads=1", qlt_tmpdir(),
                                  p1, sizeof p1, &err),
             &err);
    CHECK_OK(ql_synth_materialize("synth:layers=1,dim=64,ff=128,heads=2,kv-heads=1", qlt_tmpdir(),
                                  p2, sizeof p2, &err),
             &err);
    CHECK(strcmp(p1, p2) == 0 && ql_file_exists(p1));
}

/* The real models' shapes: the presets, and a qwen2 / tied / BF16 model that loads as
 * llama.cpp would read it. */
static void test_presets(void)
{
    ql_synth_opts o;
    ql_error err;
    CHECK_OK(ql_synth_parse_spec("synth:llama3.1-8b", &o, &err), &err);
    CHECK(o.dim == 4096 && o.ff == 14336 && o.layers == 32 && o.heads == 32 && o.kv_heads == 8);
    CHECK(o.vocab == 128256 && !o.tied && strcmp(o.arch, "llama") == 0);
    CHECK_EQ_INT(ql_synth_n_params(&o, o.vocab), 8030261248LL);
    CHECK_OK(ql_synth_parse_spec("synth:llama3.2-1b", &o, &err), &err);
    CHECK(o.dim == 2048 && o.layers == 16 && o.tied && o.vocab == 128256);
    CHECK_EQ_INT(ql_synth_n_params(&o, o.vocab), 1235814400LL);
    CHECK_OK(ql_synth_parse_spec("synth:qwen2.5-7b", &o, &err), &err);
    CHECK(o.dim == 3584 && o.ff == 18944 && o.layers == 28 && o.kv_heads == 4 &&
          o.vocab == 152064 && !o.tied && strcmp(o.arch, "qwen2") == 0);
    CHECK_EQ_INT(ql_synth_n_params(&o, o.vocab), 7615616512LL);
    CHECK_OK(ql_synth_parse_spec("synth:qwen2.5-0.5b,layers=1,vocab=1024,type=BF16", &o, &err),
             &err);
    CHECK(o.dim == 896 && o.layers == 1 && o.vocab == 1024 && o.tied && o.type == QL_TYPE_BF16);
    ql_synth_opts bad;
    CHECK(ql_synth_parse_spec("synth:arch=mamba", &bad, &err) == QL_EINVAL);

    char path[4096];
    CHECK_OK(ql_synth_materialize("synth:qwen2.5-0.5b,layers=1,vocab=1024,type=BF16", qlt_tmpdir(),
                                  path, sizeof path, &err),
             &err);
    ql_model *m = NULL;
    CHECK_OK(ql_model_load(&m, path, &err), &err);
    if (!m)
        return;
    CHECK(m->hp.arch == QL_ARCH_QWEN2 && m->hp.has_qkv_bias && m->hp.tied_output);
    CHECK(m->hp.n_head == 14 && m->hp.n_head_kv == 2 && m->hp.head_dim == 64);
    CHECK(m->hp.rope_freq_base == 1000000.0f && m->hp.n_vocab == 1024);
    CHECK_EQ_INT(m->weights->lin[ql_weights_site(m->weights, 0, QL_SITE_Q)].src_type, QL_TYPE_BF16);
    CHECK(m->weights->lin[ql_weights_site(m->weights, 0, QL_SITE_K)].b != NULL);
    CHECK_EQ_INT(m->n_params, ql_synth_n_params(&o, 1024));
    ql_model_free(m);
}

/* A two-block synthetic model of weight type `type` whose products span several of the
 * kernels' tasks (rows of 256 and 688: 43 steps of 16, the kernels' tails), written to
 * qlt_tmp(name) and loaded; NULL (a failed check) when that fails. */
static ql_model *small_synth(int32_t type, uint64_t seed, const char *name)
{
    ql_synth_opts o;
    ql_synth_defaults(&o);
    o.dim = 256;
    o.ff = 688;
    o.layers = 2;
    o.heads = 4;
    o.kv_heads = 2;
    o.seed = seed;
    o.type = type;
    ql_error err;
    ql_model *m = NULL;
    ql_status st = ql_synth_write(&o, qlt_tmp(name), &err);
    if (!st)
        st = ql_model_load(&m, qlt_tmp(name), &err);
    CHECK_OK(st, &err);
    return st ? NULL : m;
}

/* qlab's own kernel (gemm.h) against OpenBLAS's on an F16 model whose products span several tasks: the F16
 * rows are read directly (nothing decoded), the logits are bit-identical across thread
 * counts and across the kernels of every CPU (the portable one stands for a machine
 * without AVX2), close to OpenBLAS's, and the runs record the kernel. */
static void test_dot_products(void)
{
    ql_model *m = small_synth(QL_TYPE_F16, 9, "dot.gguf");
    if (!m)
        return;
    ql_error err;
    enum { N = 96 };
    ql_forward *fw;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, N, &err), &err);
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((i * 29 + 3) % 512);
    const size_t sz = (size_t)N * 512;
    float *blas = malloc(sz * sizeof *blas), *a = malloc(sz * sizeof *a);
    float *b = malloc(sz * sizeof *b), *c = malloc(sz * sizeof *c);
    const ql_gemm_products selected = ql_gemm_selected();
    ql_gemm_select(QL_GEMM_BLAS);
    CHECK_OK(ql_forward_run(fw, m->weights, ids, N, 0, 0, blas, &err), &err);
    ql_gemm_select(QL_GEMM_DOT);
    const ql_linear *up = &m->weights->lin[ql_weights_site(m->weights, 0, QL_SITE_UP)];
    CHECK(up->src.type == QL_TYPE_F16 && ql_linear_direct(up, NULL));
    CHECK(strstr(ql_gemm_kernel(), "qlab-dot") != NULL);
    const int saved = ql_threads_get();
    ql_threads_set(1);
    CHECK_OK(ql_forward_run(fw, m->weights, ids, N, 0, 0, a, &err), &err);
    CHECK(up->w == NULL); /* read in the kernel, never decoded */
    ql_threads_set(2);
    CHECK_OK(ql_forward_run(fw, m->weights, ids, N, 0, 0, b, &err), &err);
    ql_threads_set(saved);
    CHECK(ql_dotgemm_force_isa(QL_DOT_PORTABLE));
    CHECK_OK(ql_forward_run(fw, m->weights, ids, N, 0, 0, c, &err), &err);
    ql_dotgemm_unforce();
    ql_gemm_select(selected);
    CHECK_MSG(memcmp(a, b, sz * sizeof *a) == 0, "dot: 1 and 2 threads differ");
    CHECK_MSG(memcmp(a, c, sz * sizeof *a) == 0, "dot: %s and portable kernels differ",
              ql_dotgemm_isa_name(ql_dotgemm_isa()));
    /* auto, the default, puts every product of this all-F16 model on qlab's kernel. */
    ql_gemm_select(QL_GEMM_AUTO);
    CHECK_OK(ql_forward_run(fw, m->weights, ids, N, 0, 0, c, &err), &err);
    CHECK(ql_linear_direct(up, NULL) && strstr(ql_gemm_kernel(), "F16/BF16 weights qlab-dot"));
    ql_gemm_select(selected);
    CHECK_MSG(memcmp(a, c, sz * sizeof *a) == 0, "auto and dot differ on an F16 model");
    double worst = 0, scale = 0;
    for (size_t i = 0; i < sz; i++) {
        worst = fmax(worst, fabs((double)a[i] - (double)blas[i]));
        scale = fmax(scale, fabs((double)blas[i]));
    }
    CHECK_MSG(worst <= 1e-4 * scale, "dot vs OpenBLAS: %g of %g", worst, scale);
    printf("dot products: threads and kernels bit-identical; |dot - OpenBLAS| <= %.2g of max "
           "|logit|\n",
           worst / scale);
    free(blas);
    free(a);
    free(b);
    free(c);
    ql_forward_free(fw);
    ql_model_free(m);
}

/* auto on an f32 model: every weight product on OpenBLAS's tiles, as under blas, bit for
 * bit (its f32 products agree more closely with llama.cpp's: gemm.h). */
static void test_auto_f32_is_blas(void)
{
    ql_model *m = small_synth(QL_TYPE_F32, 10, "auto.gguf");
    if (!m)
        return;
    ql_error err;
    enum { N = 64 };
    ql_forward *fw;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, N, &err), &err);
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((i * 31 + 5) % 512);
    const size_t sz = (size_t)N * 512;
    float *blas = malloc(sz * sizeof *blas), *automatic = malloc(sz * sizeof *automatic);
    const ql_gemm_products selected = ql_gemm_selected();
    ql_gemm_select(QL_GEMM_BLAS);
    CHECK_OK(ql_forward_run(fw, m->weights, ids, N, 0, 0, blas, &err), &err);
    ql_gemm_select(QL_GEMM_AUTO);
    CHECK(m->weights->lin[ql_weights_site(m->weights, 0, QL_SITE_UP)].src.type == QL_TYPE_F32);
    CHECK_OK(ql_forward_run(fw, m->weights, ids, N, 0, 0, automatic, &err), &err);
    ql_gemm_select(selected);
    CHECK_MSG(memcmp(blas, automatic, sz * sizeof *blas) == 0, "auto and blas differ on an f32 model");
    free(blas);
    free(automatic);
    ql_forward_free(fw);
    ql_model_free(m);
}

int main(int argc, char **argv)
{
    if (!ql_file_exists(qlt_shared("models/stories260K.gguf")))
        qlt_skip("stories260K.gguf (the tokenizer source) not found under ../shared");
    if (argc > 1 && strcmp(argv[1], "sizes") == 0)
        test_sizes();
    else {
        test_small();
        test_specs();
        test_presets();
        test_dot_products();
        test_auto_f32_is_blas();
    }
    return qlt_done();
}
