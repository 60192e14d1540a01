/* Model loading: stories260K's hyper-parameters, and variants of it written with the
 * GGUF writer to provoke every decision and error of the loader: wrong shapes, missing
 * tensors and keys, unknown architectures and types, F16/BF16 conversion, tied
 * output, qwen2 biases and qwen3 q/k norms. */
#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "base/util.h"
#include "formats/types.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/tensor_name.h"
#include "qltest.h"

/* An edit of the source model: tensors to drop, retype or reshape, keys to change,
 * extra tensors to add (all filled with a constant). */
typedef struct {
    const char *drop;   /* tensor name to leave out */
    const char *retype; /* tensor name to write as retype_to */
    int32_t retype_to;
    const char *reshape; /* tensor name to write with reshape_ne1 rows */
    int64_t reshape_ne1;
    const char *arch;      /* new general.architecture (keys renamed) */
    const char *drop_key;  /* key suffix to leave out (after the arch prefix) */
    bool drop_arch;        /* leave out general.architecture */
    const char *extra[16]; /* extra 1-D tensors "name:len" */
    float extra_value;
} edit;

static const char *variant(const ql_gguf *src, const edit *e, const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s.gguf", qlt_tmpdir(), name);
    ql_error err;
    ql_gguf_writer *w;
    CHECK_OK(ql_gguf_writer_alloc(&w, &err), &err);
    for (int64_t i = 0; i < src->n_kv; i++) {
        const char *key = src->kv[i].key;
        char newkey[256];
        if (e->drop_arch && strcmp(key, "general.architecture") == 0)
            continue;
        if (e->arch && strncmp(key, "llama.", 6) == 0) {
            if (e->drop_key && strcmp(key + 6, e->drop_key) == 0)
                continue;
            snprintf(newkey, sizeof newkey, "%s.%s", e->arch, key + 6);
            key = newkey;
        } else if (e->drop_key && strncmp(key, "llama.", 6) == 0 &&
                   strcmp(key + 6, e->drop_key) == 0) {
            continue;
        }
        CHECK_OK(ql_gguf_writer_set_kv(w, key, &src->kv[i].value, &err), &err);
    }
    if (e->arch)
        CHECK_OK(ql_gguf_writer_set_str(w, "general.architecture", e->arch, &err), &err);
    /* tensor table */
    int n_extra = 0;
    while (n_extra < 16 && e->extra[n_extra])
        n_extra++;
    for (int64_t i = 0; i < src->n_tensors; i++) {
        const ql_gguf_tensor *t = &src->tensors[i];
        if (e->drop && strcmp(t->name, e->drop) == 0)
            continue;
        int64_t ne[2] = {t->ne[0], t->ne[1]};
        int32_t type = t->type;
        if (e->reshape && strcmp(t->name, e->reshape) == 0)
            ne[1] = e->reshape_ne1;
        if (e->retype && strcmp(t->name, e->retype) == 0)
            type = e->retype_to;
        uint64_t nbytes = ql_row_size(type, ne[0]) * (uint64_t)(t->n_dims == 2 ? ne[1] : 1);
        CHECK_OK(ql_gguf_writer_add_tensor(w, t->name, t->n_dims, ne, type, nbytes, &err), &err);
    }
    for (int x = 0; x < n_extra; x++) {
        char nm[128];
        ql_strlcpy(nm, e->extra[x], sizeof nm);
        char *colon = strchr(nm, ':');
        int64_t ne[1] = {strtoll(colon + 1, NULL, 10)};
        *colon = '\0';
        CHECK_OK(ql_gguf_writer_add_tensor(w, nm, 1, ne, QL_TYPE_F32, (uint64_t)ne[0] * 4, &err),
                 &err);
    }
    CHECK_OK(ql_gguf_writer_begin(w, path, &err), &err);
    static uint8_t buf[1 << 20];
    for (int64_t i = 0; i < src->n_tensors; i++) {
        const ql_gguf_tensor *t = &src->tensors[i];
        if (e->drop && strcmp(t->name, e->drop) == 0)
            continue;
        int64_t ne1 = t->n_dims == 2 ? t->ne[1] : 1;
        int32_t type = t->type;
        if (e->reshape && strcmp(t->name, e->reshape) == 0)
            ne1 = e->reshape_ne1;
        if (e->retype && strcmp(t->name, e->retype) == 0)
            type = e->retype_to;
        const int64_t n = t->ne[0] * ne1;
        const float *f = t->data;
        for (int64_t k = 0; k < n; k++) {
            float v = k < ql_gguf_tensor_nelements(t) ? f[k] : 0.25f;
            if (type == QL_TYPE_F32)
                memcpy(buf + 4 * k, &v, 4);
            else if (type == QL_TYPE_F16 || type == QL_TYPE_BF16) {
                uint16_t h = type == QL_TYPE_F16 ? ql_fp32_to_fp16(v) : ql_fp32_to_bf16(v);
                memcpy(buf + 2 * k, &h, 2);
            } else if (type == QL_TYPE_I8) {
                buf[k] = 1;
            }
        }
        uint64_t nbytes = ql_row_size(type, t->ne[0]) * (uint64_t)ne1;
        CHECK_OK(ql_gguf_writer_write_tensor(w, buf, nbytes, &err), &err);
    }
    for (int x = 0; x < n_extra; x++) {
        const char *colon = strchr(e->extra[x], ':');
        int64_t n = strtoll(colon + 1, NULL, 10);
        for (int64_t k = 0; k < n; k++)
            memcpy(buf + 4 * k, &e->extra_value, 4);
        CHECK_OK(ql_gguf_writer_write_tensor(w, buf, (uint64_t)n * 4, &err), &err);
    }
    CHECK_OK(ql_gguf_writer_finish(w, &err), &err);
    ql_gguf_writer_free(w);
    return path;
}

/* Loads path and expects status want with every needle in the message. */
static ql_model *expect_load(const char *path, ql_status want, const char *needle1,
                             const char *needle2)
{
    ql_error err;
    ql_error_clear(&err);
    ql_model *m = NULL;
    ql_status st = ql_model_load(&m, path, &err);
    CHECK_MSG(st == want, "%s: status %d, expected %d (%s)", path, (int)st, (int)want, err.msg);
    if (needle1)
        CHECK_MSG(strstr(err.msg, needle1) != NULL, "'%s' not in '%s'", needle1, err.msg);
    if (needle2)
        CHECK_MSG(strstr(err.msg, needle2) != NULL, "'%s' not in '%s'", needle2, err.msg);
    return m;
}

/* Runs 16 tokens and returns the first logit (and checks all are finite). */
static float run_some(const ql_model *m)
{
    ql_error err;
    ql_forward *fw;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, 16, &err), &err);
    int32_t t[16];
    for (int i = 0; i < 16; i++)
        t[i] = (int32_t)(1 + 31 * i) % m->hp.n_vocab;
    float *lg = malloc((size_t)16 * m->hp.n_vocab * sizeof *lg);
    CHECK_OK(ql_forward_run(fw, m->weights, t, 16, 0, 0, lg, &err), &err);
    int bad = 0;
    for (int i = 0; i < 16 * m->hp.n_vocab; i++)
        bad += !isfinite(lg[i]);
    CHECK_EQ_INT(bad, 0);
    float v = lg[15 * m->hp.n_vocab];
    free(lg);
    ql_forward_free(fw);
    return v;
}

/* The one parser of "blk.<n>.<rest>" names. */
static void test_tensor_block(void)
{
    const char *rest;
    CHECK_EQ_INT(ql_tensor_block("blk.12.attn_q.weight", &rest), 12);
    CHECK(strcmp(rest, "attn_q.weight") == 0);
    CHECK_EQ_INT(ql_tensor_block("blk.0.ffn_down_exps.weight", NULL), 0);
    CHECK_EQ_INT(ql_tensor_block("output.weight", &rest), -1);
    CHECK(strcmp(rest, "output.weight") == 0);
    CHECK_EQ_INT(ql_tensor_block("blk.x.attn_q.weight", NULL), -1);
    CHECK_EQ_INT(ql_tensor_block("blk.3", NULL), -1);
    CHECK_EQ_INT(ql_tensor_block("blk.-1.attn_q.weight", NULL), -1);
    CHECK_EQ_INT(ql_tensor_block("blk.1000000.a", NULL), QL_TENSOR_BLOCK_MAX);
    CHECK_EQ_INT(ql_tensor_block("blk.1000001.a", NULL), -1);
    CHECK_EQ_INT(ql_tensor_block("blk.99999999999999999999.a", NULL), -1);
}

int main(void)
{
    test_tensor_block();
    const char *path = qlt_shared("models/stories260K.gguf");
    ql_error err;
    ql_gguf *src;
    if (ql_gguf_open(&src, path, &err) != QL_OK)
        qlt_skip("stories260K.gguf not found under ../shared");

    /* the real file */
    ql_model *m = expect_load(path, QL_OK, NULL, NULL);
    if (!m)
        return qlt_done();
    CHECK(m->hp.arch == QL_ARCH_LLAMA);
    CHECK(m->hp.rope_type == QL_ROPE_NORM);
    CHECK_EQ_INT(m->hp.n_embd, 64);
    CHECK_EQ_INT(m->hp.n_ff, 172);
    CHECK_EQ_INT(m->hp.n_head, 8);
    CHECK_EQ_INT(m->hp.n_head_kv, 4);
    CHECK_EQ_INT(m->hp.n_rot, 8);
    CHECK_EQ_INT(m->hp.n_ctx_train, 2048);
    CHECK_NEAR(m->hp.rope_freq_base, 10000.0, 0.0); /* absent key: llama.cpp's default */
    CHECK_NEAR(m->hp.norm_eps, 1e-5, 1e-10);
    CHECK(!m->hp.tied_output && !m->hp.has_qkv_bias && !m->hp.has_qk_norm);
    CHECK(m->weights->lin[ql_weights_site(m->weights, 2, QL_SITE_DOWN)].n_in == 172);
    CHECK(strcmp(m->weights->lin[ql_weights_site(m->weights, 2, QL_SITE_DOWN)].name,
                 "blk.2.ffn_down.weight") == 0);
    CHECK(strcmp(m->weights->lin[ql_site_output(m->weights)].name, "output.weight") == 0);
    const float ref_logit = run_some(m);

    /* shape, missing tensor, missing key, unknown architecture, unreadable type */
    edit e1 = {.reshape = "blk.1.attn_k.weight", .reshape_ne1 = 64};
    expect_load(variant(src, &e1, "shape"), QL_EFORMAT, "'blk.1.attn_k.weight'",
                "has shape 64x64, expected 64x32");
    edit e2 = {.drop = "blk.4.ffn_norm.weight"};
    expect_load(variant(src, &e2, "missing"), QL_EFORMAT, "'blk.4.ffn_norm.weight' is missing",
                NULL);
    edit e3 = {.drop_key = "attention.head_count"};
    expect_load(variant(src, &e3, "nokey"), QL_EFORMAT, "'llama.attention.head_count' is missing",
                NULL);
    edit e3b = {.drop_arch = true};
    expect_load(variant(src, &e3b, "noarch"), QL_EFORMAT, "'general.architecture' is missing",
                NULL);
    edit e4 = {.arch = "mamba"};
    expect_load(variant(src, &e4, "arch"), QL_EUNSUPPORTED, "architecture 'mamba'", NULL);
    edit e5 = {.retype = "blk.0.attn_v.weight", .retype_to = QL_TYPE_I8};
    expect_load(variant(src, &e5, "i8"), QL_EUNSUPPORTED, "'blk.0.attn_v.weight' has type I8",
                "cannot read yet");
    /* Fewer embedding rows than tokens: refused before any tensor is read. */
    edit e6 = {.reshape = "token_embd.weight", .reshape_ne1 = 500};
    expect_load(variant(src, &e6, "vocab"), QL_EFORMAT, "'tokenizer.ggml.tokens' has 512 tokens",
                "'token_embd.weight' has 500 rows");

    /* F16 and BF16 tensors are widened exactly */
    edit e7 = {.retype = "blk.3.ffn_up.weight", .retype_to = QL_TYPE_F16};
    ql_model *mf = expect_load(variant(src, &e7, "f16"), QL_OK, NULL, NULL);
    edit e8 = {.retype = "blk.3.ffn_up.weight", .retype_to = QL_TYPE_BF16};
    ql_model *mb = expect_load(variant(src, &e8, "bf16"), QL_OK, NULL, NULL);
    /* Loading leaves them in the map; bound, they are decoded. */
    if (mf && mb) {
        CHECK(mf->weights->lin[ql_weights_site(mf->weights, 3, QL_SITE_UP)].w == NULL);
        CHECK_OK(ql_weights_bind_all(mf->weights, &err), &err);
        CHECK_OK(ql_weights_bind_all(mb->weights, &err), &err);
        const ql_linear *a = &m->weights->lin[ql_weights_site(m->weights, 3, QL_SITE_UP)];
        const ql_linear *h = &mf->weights->lin[ql_weights_site(mf->weights, 3, QL_SITE_UP)];
        const ql_linear *b = &mb->weights->lin[ql_weights_site(mb->weights, 3, QL_SITE_UP)];
        int bad = 0;
        for (int64_t i = 0; i < a->n_in * a->n_out; i++) {
            bad += h->w[i] != ql_fp16_to_fp32(ql_fp32_to_fp16(a->w[i]));
            bad += b->w[i] != ql_bf16_to_fp32(ql_fp32_to_bf16(a->w[i]));
        }
        CHECK_EQ_INT(bad, 0);
        CHECK_EQ_INT(h->src_type, QL_TYPE_F16);
        CHECK_EQ_INT(b->src_type, QL_TYPE_BF16);
    }
    ql_model_free(mf);
    ql_model_free(mb);

    /* tied output: no output.weight, the head reads token_embd (identical in this file) */
    edit e9 = {.drop = "output.weight"};
    ql_model *mt = expect_load(variant(src, &e9, "tied"), QL_OK, NULL, NULL);
    if (mt) {
        CHECK(mt->hp.tied_output);
        const ql_linear *head = &mt->weights->lin[ql_site_output(mt->weights)];
        CHECK(head->src.data == mt->weights->tok_embd.src.data);
        CHECK_EQ_INT(mt->n_params, m->n_params - 64 * 512);
        CHECK_NEAR(run_some(mt), ref_logit, 0.0);
    }
    /* another set of tensors is named as the first difference */
    if (mt) {
        CHECK(ql_model_check_same_shape(m, mt, &err) == QL_EINVAL);
        CHECK_MSG(strstr(err.msg, "tensor 'output.weight' of the reference") != NULL, "%s",
                  err.msg);
    }
    ql_model_free(mt);

    /* qwen2: biases on Q, K, V; NEOX RoPE */
    edit e10 = {.arch = "qwen2", .extra_value = 0.0f};
    const char *qb[] = {"attn_q.bias:64", "attn_k.bias:32", "attn_v.bias:32"};
    static char names[32][48];
    int k = 0;
    for (int l = 0; l < 5; l++)
        for (int j = 0; j < 3; j++) {
            snprintf(names[k], sizeof names[k], "blk.%d.%s", l, qb[j]);
            e10.extra[k] = names[k];
            k++;
        }
    /* 15 bias tensors: fits the 16 slots */
    ql_model *mq = expect_load(variant(src, &e10, "qwen2"), QL_OK, NULL, NULL);
    if (mq) {
        CHECK(mq->hp.arch == QL_ARCH_QWEN2 && mq->hp.has_qkv_bias);
        CHECK(mq->hp.rope_type == QL_ROPE_NEOX);
        CHECK(mq->weights->lin[ql_weights_site(mq->weights, 0, QL_SITE_V)].b != NULL);
        float neox = run_some(mq);
        CHECK(neox != ref_logit); /* rotating halves instead of pairs changes the result */
    }
    ql_model_free(mq);
    edit e11 = {.arch = "qwen2"};
    expect_load(variant(src, &e11, "qwen2nobias"), QL_EFORMAT, "'blk.0.attn_q.bias' is missing",
                NULL);

    /* qwen3: per-head q/k RMSNorm (weights 1 here) */
    edit e12 = {.arch = "qwen3", .extra_value = 1.0f};
    k = 0;
    for (int l = 0; l < 5; l++) {
        snprintf(names[k], sizeof names[k], "blk.%d.attn_q_norm.weight:8", l);
        e12.extra[k] = names[k];
        k++;
        snprintf(names[k], sizeof names[k], "blk.%d.attn_k_norm.weight:8", l);
        e12.extra[k] = names[k];
        k++;
    }
    ql_model *m3 = expect_load(variant(src, &e12, "qwen3"), QL_OK, NULL, NULL);
    if (m3) {
        CHECK(m3->hp.has_qk_norm && m3->weights->norms[4].k_norm != NULL);
        CHECK(m3->hp.rope_type == QL_ROPE_NEOX);
        run_some(m3);
    }
    ql_model_free(m3);

    /* A file llama-quantize wrote: quantized tensors come through the type traits'
     * dequantizers (Q4_0 body, F16 ffn_down, Q8_0 head) and stay close to the f32 file. */
    const char *q4 = qlt_shared("golden/llamacpp-reference/quantized/stories260K-Q4_0.gguf");
    ql_model *mq4 = NULL;
    if (ql_file_exists(q4) && (mq4 = expect_load(q4, QL_OK, NULL, NULL)) != NULL) {
        /* the same model in other types: it can stand in for the reference */
        CHECK_OK(ql_model_check_same_shape(m, mq4, &err), &err);
        CHECK(ql_model_first_quantized(m) == NULL);
        const ql_linear *ql = ql_model_first_quantized(mq4);
        CHECK(ql && ql->src_type == QL_TYPE_Q4_0);
        CHECK_OK(ql_weights_bind_all(mq4->weights, &err), &err);
        const ql_weights *a = m->weights, *b = mq4->weights;
        CHECK_EQ_INT(b->lin[ql_weights_site(b, 0, QL_SITE_Q)].src_type, QL_TYPE_Q4_0);
        CHECK_EQ_INT(b->lin[ql_weights_site(b, 0, QL_SITE_DOWN)].src_type, QL_TYPE_F16);
        CHECK_EQ_INT(b->lin[ql_site_output(b)].src_type, QL_TYPE_Q8_0);
        for (int s = 0; s < b->n_lin; s++) {
            const ql_linear *x = &a->lin[s], *y = &b->lin[s];
            double num = 0, den = 0;
            for (int64_t i = 0; i < x->n_in * x->n_out; i++) {
                double d = (double)x->w[i] - (double)y->w[i];
                num += d * d;
                den += (double)x->w[i] * (double)x->w[i];
            }
            /* 4-bit blocks of 32: relative RMS error around 0.1; 0.2 leaves margin */
            CHECK_MSG(sqrt(num / den) < 0.2, "%s: relative RMS error %g", x->name, sqrt(num / den));
        }
    }
    ql_model_free(mq4);

    ql_model_free(m);
    ql_gguf_close(src);
    return qlt_done();
}
