/* llama's optional biases (issue 23, item 2): llama.cpp b4747 reads a bias for each of
 * llama's q, k, v, o, gate, up and down products when the file has one and adds it right
 * after the product. qlab must do the same, not drop them.
 *
 * 1. stories260K with a random bias on every product: qlab's logits against a plain
 *    float64 forward pass of the same definition written here (a second implementation:
 *    embedding, RMSNorm, RoPE on adjacent pairs, grouped-query causal attention, SwiGLU,
 *    head), and far from the logits of the model without its biases.
 * 2. stories260K with a V bias b and an output bias -Wo b, which cancel exactly (the
 *    attention's probabilities sum to 1, so the V bias adds b to every head's output):
 *    the perplexity of stories260K itself on the reference text (whose full-text figure
 *    at ctx 128 tests/e2e/test_eval_ppl.sh checks against llama-perplexity's); a loader
 *    that dropped one of the two would miss it by far more. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "formats/types.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/tokenizer.h"
#include "qltest.h"

#define N_TOK 24
/* f32 against float64 over 5 blocks of 64-wide products: logits of magnitude ~10 agree
 * to ~1e-5; a dropped bias of std BIAS_STD moves them by more than 0.1. */
#define LOGIT_TOL 1e-3
#define BIAS_STD  0.3
/* The two cancelling biases leave the perplexity as it was, to f32 rounding. */
#define CANCEL_REL    1e-6
#define CANCEL_CHUNKS 48

/* A deterministic normal-ish value (sum of uniforms). */
static double noise(uint32_t *s)
{
    double v = 0.0;
    for (int i = 0; i < 4; i++) {
        *s = *s * 1664525u + 1013904223u;
        v += (double)(*s >> 8) / 16777216.0 - 0.5;
    }
    return v * sqrt(3.0);
}

/* ------------------------------------------------------------------------ */
/* A copy of stories260K with biases                                          */

typedef struct {
    char name[64];
    int64_t n;
    float *v;
} bias_t;

static const char *const kinds[] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                    "ffn_gate", "ffn_up", "ffn_down"};

/* Writes src's tensors plus the biases to path. */
static void write_with_biases(const ql_gguf *src, const bias_t *b, int n_b, const char *path)
{
    ql_error err;
    ql_error_clear(&err);
    ql_gguf_writer *w;
    CHECK_OK(ql_gguf_writer_alloc(&w, &err), &err);
    CHECK_OK(ql_gguf_writer_copy_kvs(w, src, &err), &err);
    for (int64_t i = 0; i < src->n_tensors; i++) {
        const ql_gguf_tensor *t = &src->tensors[i];
        CHECK_OK(ql_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->nbytes, &err),
                 &err);
    }
    for (int i = 0; i < n_b; i++)
        CHECK_OK(ql_gguf_writer_add_tensor(w, b[i].name, 1, &b[i].n, QL_TYPE_F32,
                                           (uint64_t)b[i].n * sizeof(float), &err),
                 &err);
    CHECK_OK(ql_gguf_writer_begin(w, path, &err), &err);
    for (int64_t i = 0; i < src->n_tensors; i++)
        CHECK_OK(ql_gguf_writer_write_tensor(w, src->tensors[i].data, src->tensors[i].nbytes, &err),
                 &err);
    for (int i = 0; i < n_b; i++)
        CHECK_OK(ql_gguf_writer_write_tensor(w, b[i].v, (uint64_t)b[i].n * sizeof(float), &err),
                 &err);
    CHECK_OK(ql_gguf_writer_finish(w, &err), &err);
    ql_gguf_writer_free(w);
}

/* ------------------------------------------------------------------------ */
/* The float64 reference                                                      */

typedef struct {
    const ql_gguf *g;
    const ql_hparams *hp;
    const bias_t *b;
    int n_b;
} model64;

/* A tensor's F32 values (stories260K is all F32). */
static const float *tensor(const model64 *m, const char *name)
{
    const ql_gguf_tensor *t = ql_gguf_find_tensor(m->g, name);
    if (t && t->type == QL_TYPE_F32)
        return t->data;
    for (int i = 0; i < m->n_b; i++)
        if (strcmp(m->b[i].name, name) == 0)
            return m->b[i].v;
    return NULL;
}

static const float *layer_tensor(const model64 *m, int l, const char *kind, const char *what)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s.%s", l, kind, what);
    return tensor(m, name);
}

/* y (n_out) = W x + b, W (n_out, n_in) row-major; b may be NULL. */
static void matvec(const float *W, const float *b, const double *x, double *y, int n_in, int n_out)
{
    for (int o = 0; o < n_out; o++) {
        double s = 0.0;
        for (int i = 0; i < n_in; i++)
            s += (double)W[(size_t)o * n_in + i] * x[i];
        y[o] = s + (b ? (double)b[o] : 0.0);
    }
}

static void rmsnorm64(const double *x, const float *w, double *out, int n, double eps)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += x[i] * x[i];
    const double scale = 1.0 / sqrt(s / n + eps);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * scale * (double)w[i];
}

/* RoPE on adjacent pairs of each head's first n_rot values, position p. */
static void rope64(double *v, int n_heads, int hd, int n_rot, double base, int p)
{
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < n_rot; i += 2) {
            const double theta = p * pow(base, -(double)i / n_rot);
            const double c = cos(theta), s = sin(theta);
            double *a = v + h * hd + i;
            const double x0 = a[0], x1 = a[1];
            a[0] = x0 * c - x1 * s;
            a[1] = x0 * s + x1 * c;
        }
}

/* logits (n, n_vocab) of tokens at positions 0 .. n-1. */
static void forward64(const model64 *m, const int32_t *tok, int n, double *logits)
{
    const ql_hparams *hp = m->hp;
    const int E = hp->n_embd, H = hp->n_head, KV = hp->n_head_kv, hd = hp->head_dim;
    const int F = hp->n_ff, V = hp->n_vocab, QD = H * hd, KD = KV * hd;
    double *x = calloc((size_t)n * E, sizeof *x), *xn = malloc((size_t)E * sizeof *xn);
    double *q = malloc((size_t)n * QD * sizeof *q), *k = malloc((size_t)n * KD * sizeof *k);
    double *v = malloc((size_t)n * KD * sizeof *v), *att = malloc((size_t)QD * sizeof *att);
    double *o = malloc((size_t)E * sizeof *o), *g = malloc((size_t)F * sizeof *g);
    double *u = malloc((size_t)F * sizeof *u), *sc = malloc((size_t)n * sizeof *sc);
    const float *emb = tensor(m, "token_embd.weight");
    for (int t = 0; t < n; t++)
        for (int i = 0; i < E; i++)
            x[(size_t)t * E + i] = (double)emb[(size_t)tok[t] * E + i];
    for (int l = 0; l < hp->n_layer; l++) {
        for (int t = 0; t < n; t++) {
            rmsnorm64(x + (size_t)t * E, layer_tensor(m, l, "attn_norm", "weight"), xn, E,
                      (double)hp->norm_eps);
            matvec(layer_tensor(m, l, "attn_q", "weight"), layer_tensor(m, l, "attn_q", "bias"), xn,
                   q + (size_t)t * QD, E, QD);
            matvec(layer_tensor(m, l, "attn_k", "weight"), layer_tensor(m, l, "attn_k", "bias"), xn,
                   k + (size_t)t * KD, E, KD);
            matvec(layer_tensor(m, l, "attn_v", "weight"), layer_tensor(m, l, "attn_v", "bias"), xn,
                   v + (size_t)t * KD, E, KD);
            rope64(q + (size_t)t * QD, H, hd, hp->n_rot, (double)hp->rope_freq_base, t);
            rope64(k + (size_t)t * KD, KV, hd, hp->n_rot, (double)hp->rope_freq_base, t);
        }
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < H; h++) {
                const int kvh = h / (H / KV);
                double max = -(double)INFINITY, sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    double s = 0.0;
                    for (int d = 0; d < hd; d++)
                        s += q[(size_t)t * QD + h * hd + d] * k[(size_t)j * KD + kvh * hd + d];
                    sc[j] = s / sqrt((double)hd);
                    if (sc[j] > max)
                        max = sc[j];
                }
                for (int j = 0; j <= t; j++)
                    sum += (sc[j] = exp(sc[j] - max));
                for (int d = 0; d < hd; d++) {
                    double a = 0.0;
                    for (int j = 0; j <= t; j++)
                        a += sc[j] / sum * v[(size_t)j * KD + kvh * hd + d];
                    att[h * hd + d] = a;
                }
            }
            matvec(layer_tensor(m, l, "attn_output", "weight"),
                   layer_tensor(m, l, "attn_output", "bias"), att, o, QD, E);
            for (int i = 0; i < E; i++)
                x[(size_t)t * E + i] += o[i];
            rmsnorm64(x + (size_t)t * E, layer_tensor(m, l, "ffn_norm", "weight"), xn, E,
                      (double)hp->norm_eps);
            matvec(layer_tensor(m, l, "ffn_gate", "weight"), layer_tensor(m, l, "ffn_gate", "bias"),
                   xn, g, E, F);
            matvec(layer_tensor(m, l, "ffn_up", "weight"), layer_tensor(m, l, "ffn_up", "bias"), xn,
                   u, E, F);
            for (int i = 0; i < F; i++)
                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            matvec(layer_tensor(m, l, "ffn_down", "weight"), layer_tensor(m, l, "ffn_down", "bias"),
                   g, o, F, E);
            for (int i = 0; i < E; i++)
                x[(size_t)t * E + i] += o[i];
        }
    }
    for (int t = 0; t < n; t++) {
        rmsnorm64(x + (size_t)t * E, tensor(m, "output_norm.weight"), xn, E, (double)hp->norm_eps);
        matvec(tensor(m, "output.weight"), NULL, xn, logits + (size_t)t * V, E, V);
    }
    free(x);
    free(xn);
    free(q);
    free(k);
    free(v);
    free(att);
    free(o);
    free(g);
    free(u);
    free(sc);
}

/* ------------------------------------------------------------------------ */
/* The tests                                                                  */

static void qlab_logits(const char *path, const int32_t *tok, float *logits)
{
    ql_error err;
    ql_error_clear(&err);
    ql_model *m;
    CHECK_OK(ql_model_load(&m, path, &err), &err);
    if (!m)
        return;
    ql_forward *fw;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, N_TOK, &err), &err);
    CHECK_OK(ql_forward_run(fw, m->weights, tok, N_TOK, 0, 0, logits, &err), &err);
    ql_forward_free(fw);
    ql_model_free(m);
}

static void test_every_bias(const ql_gguf *g, const ql_hparams *hp)
{
    const int QD = hp->n_head * hp->head_dim, KD = hp->n_head_kv * hp->head_dim;
    const int64_t widths[] = {QD, KD, KD, hp->n_embd, hp->n_ff, hp->n_ff, hp->n_embd};
    bias_t b[7 * 8];
    int n_b = 0;
    uint32_t seed = 7;
    for (int l = 0; l < hp->n_layer; l++)
        for (int k = 0; k < 7; k++) {
            bias_t *x = &b[n_b++];
            snprintf(x->name, sizeof x->name, "blk.%d.%s.bias", l, kinds[k]);
            x->n = widths[k];
            x->v = malloc((size_t)x->n * sizeof *x->v);
            for (int64_t i = 0; i < x->n; i++)
                x->v[i] = (float)(BIAS_STD * noise(&seed));
        }
    const char *path = qlt_tmp("biases.gguf");
    write_with_biases(g, b, n_b, path);

    int32_t tok[N_TOK];
    for (int t = 0; t < N_TOK; t++)
        tok[t] = (int32_t)(1 + (t * 37 + 11) % (hp->n_vocab - 1));
    const size_t n_logits = (size_t)N_TOK * hp->n_vocab;
    float *got = malloc(n_logits * sizeof *got), *plain = malloc(n_logits * sizeof *plain);
    double *want = malloc(n_logits * sizeof *want);
    qlab_logits(path, tok, got);
    qlab_logits(qlt_shared("models/stories260K.gguf"), tok, plain);
    const model64 m64 = {g, hp, b, n_b};
    forward64(&m64, tok, N_TOK, want);
    double worst = 0.0, moved = 0.0;
    for (size_t i = 0; i < n_logits; i++) {
        worst = fmax(worst, fabs((double)got[i] - want[i]));
        moved = fmax(moved, fabs((double)plain[i] - want[i]));
    }
    printf("every bias: qlab vs float64 max |diff| %.3g (tolerance %.3g); without the biases "
           "%.3g\n",
           worst, LOGIT_TOL, moved);
    CHECK(worst <= LOGIT_TOL);
    CHECK(moved > 100 * LOGIT_TOL);
    free(got);
    free(plain);
    free(want);
    for (int i = 0; i < n_b; i++)
        free(b[i].v);
}

/* The perplexity of path at ctx 128 on the first CANCEL_CHUNKS chunks of the reference
 * text, f32. */
static double ppl_of(const char *path)
{
    ql_error err;
    ql_error_clear(&err);
    ql_model *m;
    CHECK_OK(ql_model_load(&m, path, &err), &err);
    if (!m)
        return (double)NAN;
    ql_tokenizer *tok;
    CHECK_OK(ql_tokenizer_from_gguf(&tok, m->gguf, &err), &err);
    ql_ppl_data d;
    CHECK_OK(ql_ppl_data_from_file(&d, tok, qlt_shared("golden/llamacpp-reference/ts_eval.txt"),
                                   128, CANCEL_CHUNKS, &err),
             &err);
    ql_forward *fw;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, 128, &err), &err);
    const int n_scored = 128 - 1 - 64;
    float *logits = malloc((size_t)n_scored * m->hp.n_vocab * sizeof *logits);
    double sum = 0.0;
    int64_t count = 0;
    for (int64_t c = 0; c < d.n_chunks; c++) {
        CHECK_OK(ql_ppl_run_chunk(fw, m->weights, &d, c, logits, &err), &err);
        const int32_t *targets = ql_ppl_chunk_targets(&d, c);
        for (int i = 0; i < n_scored; i++)
            sum += ql_nll(logits + (size_t)i * m->hp.n_vocab, m->hp.n_vocab, targets[i]);
        count += n_scored;
    }
    free(logits);
    ql_forward_free(fw);
    ql_ppl_data_deinit(&d);
    ql_tokenizer_free(tok);
    ql_model_free(m);
    return exp(sum / (double)count);
}

static void test_cancelling_biases(const ql_gguf *g, const ql_hparams *hp)
{
    const int QD = hp->n_head * hp->head_dim, KD = hp->n_head_kv * hp->head_dim;
    const int group = hp->n_head / hp->n_head_kv, hd = hp->head_dim;
    bias_t b[2 * 8];
    int n_b = 0;
    uint32_t seed = 11;
    const model64 m64 = {g, hp, NULL, 0};
    for (int l = 0; l < hp->n_layer; l++) {
        bias_t *bv = &b[n_b++], *bo = &b[n_b++];
        snprintf(bv->name, sizeof bv->name, "blk.%d.attn_v.bias", l);
        snprintf(bo->name, sizeof bo->name, "blk.%d.attn_output.bias", l);
        bv->n = KD;
        bo->n = hp->n_embd;
        bv->v = malloc((size_t)KD * sizeof *bv->v);
        bo->v = malloc((size_t)hp->n_embd * sizeof *bo->v);
        for (int i = 0; i < KD; i++)
            bv->v[i] = (float)(BIAS_STD * noise(&seed));
        /* every query head h reads KV head h / group: its output gains bv of that head */
        double *per_q = malloc((size_t)QD * sizeof *per_q),
               *wo_b = malloc((size_t)hp->n_embd * sizeof *wo_b);
        for (int h = 0; h < hp->n_head; h++)
            for (int d = 0; d < hd; d++)
                per_q[h * hd + d] = (double)bv->v[(h / group) * hd + d];
        matvec(layer_tensor(&m64, l, "attn_output", "weight"), NULL, per_q, wo_b, QD, hp->n_embd);
        for (int i = 0; i < hp->n_embd; i++)
            bo->v[i] = (float)-wo_b[i];
        free(per_q);
        free(wo_b);
    }
    const char *path = qlt_tmp("cancel.gguf");
    write_with_biases(g, b, n_b, path);
    const double base = ppl_of(qlt_shared("models/stories260K.gguf"));
    const double with = ppl_of(path);
    printf("cancelling V and output biases: PPL %.7f, without them %.7f\n", with, base);
    CHECK(fabs(with - base) <= CANCEL_REL * base);
    /* and the biases do something: V's alone moves it */
    for (int i = 1; i < n_b; i += 2)
        memset(b[i].v, 0, (size_t)b[i].n * sizeof *b[i].v);
    write_with_biases(g, b, n_b, path);
    const double v_only = ppl_of(path);
    printf("the V biases alone: PPL %.7f\n", v_only);
    CHECK(fabs(v_only - base) > 1000 * CANCEL_REL * base);
    for (int i = 0; i < n_b; i++)
        free(b[i].v);
}

int main(void)
{
    ql_error err;
    ql_error_clear(&err);
    const char *path = qlt_shared("models/stories260K.gguf");
    if (!ql_file_exists(path))
        qlt_skip("stories260K.gguf not found (../shared/models)");
    ql_gguf *g;
    CHECK_OK(ql_gguf_open(&g, path, &err), &err);
    ql_hparams hp;
    CHECK_OK(ql_hparams_read(g, &hp, &err), &err);
    test_every_bias(g, &hp);
    test_cancelling_biases(g, &hp);
    ql_gguf_close(g);
    return qlt_done();
}
