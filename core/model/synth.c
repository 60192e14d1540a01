/* Synthetic llama-architecture GGUF models with realistic quantization difficulty. */
#include "model/synth.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/data.h"
#include "base/fp16.h"
#include "base/util.h"
#include "formats/types.h"
#include "model/gguf.h"

/* Degrees of freedom of the Student-t weights: finite variance, kurtosis 9 (trained
 * LLM weights show excess kurtosis of a few units to tens). */
#define T_NU 5.0
/* Std gains per product: unit-variance outputs for Q/K/V/gate/up, a slower-growing
 * residual stream for the projections that write back to it, and logits with a
 * standard deviation of about 3 so next-token distributions are peaked. */
#define GAIN_IN   1.0
#define GAIN_OUT  0.5
#define GAIN_HEAD 3.0
/* One hot input column per this many, scaled by HOT_MIN..HOT_MAX. */
#define HOT_EVERY 128
#define HOT_MIN   3.0
#define HOT_MAX   8.0
/* Massive residual channels: one per this many (clamped to 2..8), norm weights
 * MASSIVE_MIN..MASSIVE_MAX; the weight columns reading them are scaled by
 * MASSIVE_KEEP / norm weight, so their contribution stays a few typical columns. */
#define MASSIVE_EVERY 128
#define MASSIVE_MIN   20.0
#define MASSIVE_MAX   60.0
#define MASSIVE_KEEP  2.0
/* Norm weights elsewhere: 1 + NORM_JITTER * N(0, 1). */
#define NORM_JITTER     0.1
#define SYNTH_EPS       1e-5f
#define SYNTH_ROPE_BASE 10000.0f
/* llama.cpp's token type for a reserved, never-produced token. */
#define TOKEN_TYPE_UNUSED 5
/* GGUF general.file_type values (llama_ftype). */
#define FTYPE_ALL_F32    0
#define FTYPE_MOSTLY_F16 1

void ql_synth_defaults(ql_synth_opts *o)
{
    memset(o, 0, sizeof *o);
    o->dim = 256;
    o->ff = 768;
    o->layers = 2;
    o->heads = 4;
    o->kv_heads = 2;
    o->vocab = 0;
    o->seed = 1;
    o->type = QL_TYPE_F32;
    o->ctx_train = 2048;
    o->tokenizer_src = "stories260K";
}

int64_t ql_synth_n_params(const ql_synth_opts *o, int vocab)
{
    const int64_t E = o->dim, F = o->ff, hd = o->dim / o->heads;
    const int64_t per_layer = E * E * 2 + 2 * E * (o->kv_heads * hd) + 3 * E * F + 2 * E;
    return 2 * (int64_t)vocab * E + E + (int64_t)o->layers * per_layer;
}

/* ------------------------------------------------------------------------ */
/* Random tensors                                                             */

typedef struct {
    gsl_rng *rng;
    int n_massive;
    int massive[8]; /* residual channels with massive activations */
} synth_state;

/* Student-t with unit variance. */
static double t_unit(gsl_rng *r)
{
    return gsl_ran_tdist(r, T_NU) / sqrt(T_NU / (T_NU - 2.0));
}

/* W (n_out, n_in): heavy-tailed entries, hot input columns, and (when in_norm is
 * given) the columns of massive channels scaled down by MASSIVE_KEEP / in_norm[j]. */
static void gen_matrix(synth_state *s, float *w, int64_t n_in, int64_t n_out, double gain,
                       const float *in_norm)
{
    const double sigma = gain / sqrt((double)n_in);
    for (int64_t i = 0; i < n_in * n_out; i++)
        w[i] = (float)(sigma * t_unit(s->rng));
    int64_t n_hot = n_in / HOT_EVERY > 0 ? n_in / HOT_EVERY : 1;
    for (int64_t h = 0; h < n_hot; h++) {
        int64_t j = (int64_t)gsl_rng_uniform_int(s->rng, (unsigned long)n_in);
        float scale = (float)gsl_ran_flat(s->rng, HOT_MIN, HOT_MAX);
        for (int64_t r = 0; r < n_out; r++)
            w[r * n_in + j] *= scale;
    }
    if (in_norm)
        for (int m = 0; m < s->n_massive; m++) {
            int64_t j = s->massive[m];
            float scale = (float)(MASSIVE_KEEP / (double)in_norm[j]);
            for (int64_t r = 0; r < n_out; r++)
                w[r * n_in + j] *= scale;
        }
}

/* RMSNorm weights (n,): about 1, and (massive = true) MASSIVE_MIN..MAX on the massive
 * channels. */
static void gen_norm(synth_state *s, float *w, int64_t n, bool massive)
{
    for (int64_t i = 0; i < n; i++)
        w[i] = (float)fabs(1.0 + NORM_JITTER * gsl_ran_gaussian(s->rng, 1.0));
    if (massive)
        for (int m = 0; m < s->n_massive; m++)
            w[s->massive[m]] = (float)gsl_ran_flat(s->rng, MASSIVE_MIN, MASSIVE_MAX);
}

/* ------------------------------------------------------------------------ */
/* Tensor list                                                                */

typedef enum { T_EMBD, T_HEAD, T_NORM, T_NORM_MASSIVE, T_IN, T_OUT } tensor_kind;

typedef struct {
    char name[64];
    int64_t ne0, ne1; /* ne1 = 0 for 1-D */
    tensor_kind kind;
    int norm_ref; /* index of the norm whose output this product reads, or -1 */
} tensor_spec;

static int build_specs(const ql_synth_opts *o, int vocab, tensor_spec *sp)
{
    const int64_t E = o->dim, F = o->ff, KD = (int64_t)o->kv_heads * (o->dim / o->heads);
    int n = 0;
#define ADD(nm, a, b, k, ref)                                                                      \
    do {                                                                                           \
        snprintf(sp[n].name, sizeof sp[n].name, "%s", nm);                                         \
        sp[n].ne0 = a;                                                                             \
        sp[n].ne1 = b;                                                                             \
        sp[n].kind = k;                                                                            \
        sp[n].norm_ref = ref;                                                                      \
        n++;                                                                                       \
    } while (0)
    ADD("token_embd.weight", E, vocab, T_EMBD, -1);
    ADD("output_norm.weight", E, 0, T_NORM, -1);
    ADD("output.weight", E, vocab, T_HEAD, -1);
    for (int l = 0; l < o->layers; l++) {
        char nm[64];
        int attn_norm = n;
        snprintf(nm, sizeof nm, "blk.%d.attn_norm.weight", l);
        ADD(nm, E, 0, T_NORM_MASSIVE, -1);
        snprintf(nm, sizeof nm, "blk.%d.attn_q.weight", l);
        ADD(nm, E, E, T_IN, attn_norm);
        snprintf(nm, sizeof nm, "blk.%d.attn_k.weight", l);
        ADD(nm, E, KD, T_IN, attn_norm);
        snprintf(nm, sizeof nm, "blk.%d.attn_v.weight", l);
        ADD(nm, E, KD, T_IN, attn_norm);
        snprintf(nm, sizeof nm, "blk.%d.attn_output.weight", l);
        ADD(nm, E, E, T_OUT, -1);
        int ffn_norm = n;
        snprintf(nm, sizeof nm, "blk.%d.ffn_norm.weight", l);
        ADD(nm, E, 0, T_NORM_MASSIVE, -1);
        snprintf(nm, sizeof nm, "blk.%d.ffn_gate.weight", l);
        ADD(nm, E, F, T_IN, ffn_norm);
        snprintf(nm, sizeof nm, "blk.%d.ffn_up.weight", l);
        ADD(nm, E, F, T_IN, ffn_norm);
        snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight", l);
        ADD(nm, F, E, T_OUT, -1);
    }
#undef ADD
    return n;
}

/* ------------------------------------------------------------------------ */
/* Tokenizer keys                                                             */

static ql_status copy_tokenizer(ql_gguf_writer *w, const ql_gguf *src, int *vocab, ql_error *err)
{
    const ql_gguf_array *toks = ql_gguf_get_arr(src, "tokenizer.ggml.tokens", QL_GGUF_STRING, err);
    const ql_gguf_array *scores =
        ql_gguf_get_arr(src, "tokenizer.ggml.scores", QL_GGUF_FLOAT32, err);
    const ql_gguf_array *types =
        ql_gguf_get_arr(src, "tokenizer.ggml.token_type", QL_GGUF_INT32, err);
    if (!toks)
        return ql_error_set(err, QL_EFORMAT, "%s: no tokenizer.ggml.tokens to copy", src->path);
    const int64_t n_tok = (int64_t)toks->n;
    if (*vocab == 0)
        *vocab = (int)n_tok;
    if (*vocab < n_tok)
        return ql_error_set(err, QL_EINVAL,
                            "synth: --vocab %d is smaller than the tokenizer of %s (%lld tokens)",
                            *vocab, src->path, (long long)n_tok);
    if ((scores && (int64_t)scores->n != n_tok) || (types && (int64_t)types->n != n_tok))
        return ql_error_set(err, QL_EFORMAT, "%s: tokenizer arrays have different lengths",
                            src->path);
    ql_status st = QL_OK;
    for (int64_t i = 0; i < src->n_kv; i++) {
        const ql_gguf_kv *kv = &src->kv[i];
        if (strncmp(kv->key, "tokenizer.", 10) != 0)
            continue;
        bool padded = *vocab > n_tok && (strcmp(kv->key, "tokenizer.ggml.tokens") == 0 ||
                                         strcmp(kv->key, "tokenizer.ggml.scores") == 0 ||
                                         strcmp(kv->key, "tokenizer.ggml.token_type") == 0);
        if (!padded && (st = ql_gguf_writer_set_kv(w, kv->key, &kv->value, err)))
            return st;
    }
    if (*vocab == n_tok)
        return QL_OK;

    /* Padded vocabulary: <unused_N> tokens of type UNUSED with the lowest score. */
    const int64_t V = *vocab;
    const char **strs = calloc((size_t)V, sizeof *strs);
    char *names = calloc((size_t)(V - n_tok), 32);
    float *sc = calloc((size_t)V, sizeof *sc);
    int32_t *ty = calloc((size_t)V, sizeof *ty);
    if (!strs || !names || !sc || !ty) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory");
        goto out;
    }
    const ql_gguf_str *ts = toks->data;
    float min_score = 0.0f;
    for (int64_t i = 0; i < n_tok; i++) {
        strs[i] = ts[i].ptr;
        sc[i] = scores ? ((const float *)scores->data)[i] : 0.0f;
        ty[i] = types ? ((const int32_t *)types->data)[i] : 1;
        if (sc[i] < min_score)
            min_score = sc[i];
    }
    for (int64_t i = n_tok; i < V; i++) {
        char *nm = names + (i - n_tok) * 32;
        snprintf(nm, 32, "<unused_%lld>", (long long)(i - n_tok));
        strs[i] = nm;
        sc[i] = min_score - 1.0f;
        ty[i] = TOKEN_TYPE_UNUSED;
    }
    if ((st = ql_gguf_writer_set_str_arr(w, "tokenizer.ggml.tokens", strs, (uint64_t)V, err)) ||
        (st = ql_gguf_writer_set_arr(w, "tokenizer.ggml.scores", QL_GGUF_FLOAT32, sc, (uint64_t)V,
                                     err)) ||
        (st = ql_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", QL_GGUF_INT32, ty, (uint64_t)V,
                                     err)))
        goto out;
out:
    free(strs);
    free(names);
    free(sc);
    free(ty);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                    */

static ql_status check_opts(const ql_synth_opts *o, ql_error *err)
{
    if (o->dim <= 0 || o->ff <= 0 || o->layers <= 0 || o->heads <= 0 || o->kv_heads <= 0 ||
        o->ctx_train <= 0)
        return ql_error_set(err, QL_EINVAL, "synth: dimensions must be positive");
    if (o->dim % o->heads != 0 || (o->dim / o->heads) % 2 != 0)
        return ql_error_set(err, QL_EINVAL,
                            "synth: --dim %d must be a multiple of --heads %d with an even head "
                            "size",
                            o->dim, o->heads);
    if (o->heads % o->kv_heads != 0)
        return ql_error_set(err, QL_EINVAL, "synth: --heads %d is not a multiple of --kv-heads %d",
                            o->heads, o->kv_heads);
    if (o->type != QL_TYPE_F32 && o->type != QL_TYPE_F16)
        return ql_error_set(err, QL_EINVAL, "synth: --type must be F32 or F16, not %s",
                            ql_type_name(o->type));
    return QL_OK;
}

/* The model's keys: llama hyper-parameters and qlab's provenance (the tokenizer's
 * keys are copied before). */
static ql_status write_hparams(ql_gguf_writer *w, const ql_synth_opts *o, int vocab, ql_error *err)
{
    const int hd = o->dim / o->heads;
    ql_gguf_value seed_value = {.type = QL_GGUF_UINT64, .v.u64 = o->seed};
    char name[128];
    snprintf(name, sizeof name, "qlab-synth-d%d-f%d-l%d-s%llu", o->dim, o->ff, o->layers,
             (unsigned long long)o->seed);
    ql_status st;
    if ((st = ql_gguf_writer_set_str(w, "general.architecture", "llama", err)) ||
        (st = ql_gguf_writer_set_str(w, "general.name", name, err)) ||
        (st = ql_gguf_writer_set_u32(w, "general.file_type",
                                     o->type == QL_TYPE_F16 ? FTYPE_MOSTLY_F16 : FTYPE_ALL_F32,
                                     err)) ||
        (st = ql_gguf_writer_set_u32(w, "llama.context_length", (uint32_t)o->ctx_train, err)) ||
        (st = ql_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)o->dim, err)) ||
        (st = ql_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)o->layers, err)) ||
        (st = ql_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)o->ff, err)) ||
        (st = ql_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)o->heads, err)) ||
        (st = ql_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)o->kv_heads,
                                     err)) ||
        (st = ql_gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)hd, err)) ||
        (st = ql_gguf_writer_set_f32(w, "llama.rope.freq_base", SYNTH_ROPE_BASE, err)) ||
        (st =
             ql_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", SYNTH_EPS, err)) ||
        (st = ql_gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)vocab, err)) ||
        (st = ql_gguf_writer_set_kv(w, "qlab.synth.seed", &seed_value, err)))
        return st;
    return ql_gguf_writer_set_str(w, "qlab.synth.source_tokenizer", o->tokenizer_src, err);
}

/* The tensor infos: matrices in the model's type, vectors F32; *max_elems receives
 * the largest tensor's value count. */
static ql_status add_tensor_infos(ql_gguf_writer *w, const ql_synth_opts *o, const tensor_spec *sp,
                                  int n_specs, int64_t *max_elems, ql_error *err)
{
    *max_elems = 0;
    for (int i = 0; i < n_specs; i++) {
        const bool is2d = sp[i].ne1 > 0;
        const int64_t ne[2] = {sp[i].ne0, sp[i].ne1};
        const int32_t type = is2d ? o->type : QL_TYPE_F32;
        const int64_t elems = sp[i].ne0 * (is2d ? sp[i].ne1 : 1);
        if (elems > *max_elems)
            *max_elems = elems;
        ql_status st = ql_gguf_writer_add_tensor(
            w, sp[i].name, is2d ? 2 : 1, ne, type,
            ql_row_size(type, sp[i].ne0) * (uint64_t)(elems / sp[i].ne0), err);
        if (st)
            return st;
    }
    return QL_OK;
}

/* The massive-activation channels: dim / MASSIVE_EVERY of them (2 to 8), distinct. */
static void pick_massive(synth_state *s, int dim)
{
    s->n_massive = dim / MASSIVE_EVERY;
    s->n_massive = s->n_massive < 2 ? 2 : s->n_massive > 8 ? 8 : s->n_massive;
    if (s->n_massive > dim)
        s->n_massive = dim;
    for (int m = 0; m < s->n_massive; m++) {
        int c;
        bool dup;
        do {
            c = (int)gsl_rng_uniform_int(s->rng, (unsigned long)dim);
            dup = false;
            for (int k = 0; k < m; k++)
                dup |= s->massive[k] == c;
        } while (dup);
        s->massive[m] = c;
    }
}

/* Tensor i's values into buf; a norm is also kept in norms[i] for the matrices
 * that read it. */
static ql_status gen_tensor(synth_state *s, const tensor_spec *sp, int i, float *buf, float **norms,
                            ql_error *err)
{
    const tensor_spec *t = &sp[i];
    const int64_t elems = t->ne0 * (t->ne1 > 0 ? t->ne1 : 1);
    switch (t->kind) {
    case T_EMBD:
        gen_matrix(s, buf, t->ne0, t->ne1, sqrt((double)t->ne0), NULL);
        break;
    case T_HEAD:
        gen_matrix(s, buf, t->ne0, t->ne1, GAIN_HEAD, NULL);
        break;
    case T_IN:
        gen_matrix(s, buf, t->ne0, t->ne1, GAIN_IN, norms[t->norm_ref]);
        break;
    case T_OUT:
        gen_matrix(s, buf, t->ne0, t->ne1, GAIN_OUT, NULL);
        break;
    case T_NORM:
    case T_NORM_MASSIVE:
        gen_norm(s, buf, elems, t->kind == T_NORM_MASSIVE);
        if (!(norms[i] = malloc((size_t)elems * sizeof(float))))
            return ql_error_set(err, QL_ENOMEM, "out of memory");
        memcpy(norms[i], buf, (size_t)elems * sizeof(float));
        break;
    }
    return QL_OK;
}

/* Every tensor in spec order, generated and written (matrices in F16 when asked). */
static ql_status write_tensors(ql_gguf_writer *w, const ql_synth_opts *o, synth_state *s,
                               const tensor_spec *sp, int n_specs, int64_t max_elems, ql_error *err)
{
    float *buf = malloc((size_t)max_elems * sizeof *buf);
    uint16_t *half = malloc((size_t)max_elems * sizeof *half);
    float **norms = calloc((size_t)n_specs, sizeof *norms);
    ql_status st = QL_OK;
    if (!buf || !half || !norms)
        st = ql_error_set(err, QL_ENOMEM, "out of memory");
    for (int i = 0; i < n_specs && !st; i++) {
        const tensor_spec *t = &sp[i];
        const int64_t elems = t->ne0 * (t->ne1 > 0 ? t->ne1 : 1);
        if ((st = gen_tensor(s, sp, i, buf, norms, err)))
            break;
        if (t->ne1 > 0 && o->type == QL_TYPE_F16) {
            for (int64_t k = 0; k < elems; k++)
                half[k] = ql_fp32_to_fp16(buf[k]);
            st = ql_gguf_writer_write_tensor(w, half, (uint64_t)elems * 2, err);
        } else {
            st = ql_gguf_writer_write_tensor(w, buf, (uint64_t)elems * 4, err);
        }
    }
    if (norms)
        for (int i = 0; i < n_specs; i++)
            free(norms[i]);
    free(norms);
    free(buf);
    free(half);
    return st;
}

ql_status ql_synth_write(const ql_synth_opts *o, const char *path, ql_error *err)
{
    ql_status st = check_opts(o, err);
    if (st)
        return st;
    const int n_specs = 3 + 9 * o->layers;
    synth_state s;
    memset(&s, 0, sizeof s);
    char tok_path[QL_PATH_MAX];
    ql_gguf *src = NULL;
    ql_gguf_writer *w = NULL;
    tensor_spec *sp = NULL;
    int vocab = o->vocab;
    int64_t max_elems = 0;
    if ((st = ql_data_resolve(o->tokenizer_src, tok_path, sizeof tok_path, NULL, err)) ||
        (st = ql_gguf_open(&src, tok_path, err)) || (st = ql_gguf_writer_alloc(&w, err)) ||
        (st = copy_tokenizer(w, src, &vocab, err)) || (st = write_hparams(w, o, vocab, err)))
        goto out;
    sp = calloc((size_t)n_specs, sizeof *sp);
    s.rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (!sp || !s.rng) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory");
        goto out;
    }
    QL_ASSERT(build_specs(o, vocab, sp) == n_specs);
    if ((st = add_tensor_infos(w, o, sp, n_specs, &max_elems, err)))
        goto out;
    gsl_rng_set(s.rng, (unsigned long)o->seed);
    pick_massive(&s, o->dim);
    if ((st = ql_gguf_writer_begin(w, path, err)) ||
        (st = write_tensors(w, o, &s, sp, n_specs, max_elems, err)))
        goto out;
    st = ql_gguf_writer_finish(w, err);
out:
    free(sp);
    if (s.rng)
        gsl_rng_free(s.rng);
    ql_gguf_writer_free(w);
    ql_gguf_close(src);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Synthetic models named in sweep files                                      */

#define SPEC_PREFIX "synth:"

bool ql_synth_is_spec(const char *s)
{
    return strncmp(s, SPEC_PREFIX, strlen(SPEC_PREFIX)) == 0;
}

static bool spec_int(const char *v, int lo, int hi, int *out)
{
    int x;
    if (!ql_parse_int(v, &x) || x < lo || x > hi)
        return false;
    *out = x;
    return true;
}

ql_status ql_synth_parse_spec(const char *spec, ql_synth_opts *o, ql_error *err)
{
    ql_synth_defaults(o);
    if (!ql_synth_is_spec(spec))
        return ql_error_set(err, QL_EINVAL, "'%s' is not a synth: model spec", spec);
    char buf[512];
    if (ql_strlcpy(buf, spec + strlen(SPEC_PREFIX), sizeof buf) >= sizeof buf)
        return ql_error_set(err, QL_EINVAL, "model '%.40s...': spec too long", spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            if (strcmp(item, "2M") == 0) {
                ql_synth_defaults(o);
            } else if (strcmp(item, "30M") == 0) {
                o->dim = 512;
                o->ff = 1536;
                o->layers = 10;
                o->heads = 8;
                o->kv_heads = 4;
            } else {
                return ql_error_set(err, QL_EINVAL,
                                    "model '%s': unknown preset '%s' (presets: 2M, 30M)", spec,
                                    item);
            }
            continue;
        }
        *eq = '\0';
        const char *k = item, *v = eq + 1;
        bool ok = true;
        if (strcmp(k, "dim") == 0)
            ok = spec_int(v, 1, 1 << 16, &o->dim);
        else if (strcmp(k, "ff") == 0)
            ok = spec_int(v, 1, 1 << 18, &o->ff);
        else if (strcmp(k, "layers") == 0)
            ok = spec_int(v, 1, 1024, &o->layers);
        else if (strcmp(k, "heads") == 0)
            ok = spec_int(v, 1, 1024, &o->heads);
        else if (strcmp(k, "kv-heads") == 0)
            ok = spec_int(v, 1, 1024, &o->kv_heads);
        else if (strcmp(k, "vocab") == 0)
            ok = spec_int(v, 0, 1 << 20, &o->vocab);
        else if (strcmp(k, "seed") == 0) {
            int64_t seed;
            ok = ql_parse_i64(v, &seed) && seed >= 0;
            if (ok)
                o->seed = (uint64_t)seed;
        } else if (strcmp(k, "type") == 0) {
            const ql_type_traits *t = ql_type_by_name(v);
            ok = t && (t->type == QL_TYPE_F32 || t->type == QL_TYPE_F16);
            if (ok)
                o->type = t->type;
        } else
            return ql_error_set(err, QL_EINVAL,
                                "model '%s': unknown key '%s' (keys: dim, ff, layers, heads, "
                                "kv-heads, vocab, seed, type)",
                                spec, k);
        if (!ok)
            return ql_error_set(err, QL_EINVAL, "model '%s': bad value '%s' for %s", spec, v, k);
    }
    return QL_OK;
}

ql_status ql_synth_materialize(const char *spec, const char *dir, char *path, size_t size,
                               ql_error *err)
{
    ql_synth_opts o;
    ql_status st = ql_synth_parse_spec(spec, &o, err);
    if (st)
        return st;
    /* The file name hashes every option, so two specs naming the same model share it. */
    char id[256], hash[65];
    snprintf(id, sizeof id,
             "dim=%d ff=%d layers=%d heads=%d kv=%d vocab=%d seed=%llu type=%d "
             "ctx=%d tok=%s",
             o.dim, o.ff, o.layers, o.heads, o.kv_heads, o.vocab, (unsigned long long)o.seed,
             (int)o.type, o.ctx_train, o.tokenizer_src);
    ql_sha256_hex(id, strlen(id), hash);
    if ((st = ql_make_dirs(dir, err)))
        return st;
    if ((size_t)snprintf(path, size, "%s/synth-%.16s.gguf", dir, hash) >= size)
        return ql_error_set(err, QL_EINVAL, "%s: path too long", dir);
    if (ql_file_exists(path))
        return QL_OK;
    return ql_synth_write(&o, path, err);
}
