/* Synthetic llama-architecture GGUF models with realistic quantization difficulty. */
#include "model/synth.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
/* Std of the Q, K and V biases of qwen2 models. */
#define QWEN_BIAS_STD 0.2
/* Router logits of a standard deviation of about 3 (their input, the normed residual
 * stream, has an RMS of about 1): the top expert's probability is well above the
 * others' for most tokens, as in trained routers, not a near tie. */
#define ROUTER_GAIN 3.0
/* qwen3's per-head Q and K norm weights: 1 + QK_NORM_JITTER * N(0, 1). */
#define QK_NORM_JITTER 0.3
/* llama.cpp's token type for a reserved, never-produced token. */
#define TOKEN_TYPE_UNUSED 5
/* GGUF general.file_type values (llama_ftype). */
#define FTYPE_ALL_F32     0
#define FTYPE_MOSTLY_F16  1
#define FTYPE_MOSTLY_BF16 32

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
    o->arch = "llama";
    o->tied = false;
    o->rope_base = SYNTH_ROPE_BASE;
    o->head_dim = 0;
    o->experts = 0;
    o->experts_used = 0;
    o->expert_ff = 0;
    o->shared_ff = 0;
}

typedef struct {
    const char *name;
    int dim, ff, layers, heads, kv_heads, vocab;
    const char *arch;
    bool tied;
    float rope_base;
    int head_dim, experts, experts_used, expert_ff;
} preset;

/* Shapes from the models' config.json files (hidden_size, intermediate_size,
 * num_hidden_layers, num_attention_heads, num_key_value_heads, vocab_size,
 * tie_word_embeddings, rope_theta). */
static const preset presets[] = {
    {.name = "2M",
     .dim = 256,
     .ff = 768,
     .layers = 2,
     .heads = 4,
     .kv_heads = 2,
     .arch = "llama",
     .rope_base = SYNTH_ROPE_BASE},
    {.name = "30M",
     .dim = 512,
     .ff = 1536,
     .layers = 10,
     .heads = 8,
     .kv_heads = 4,
     .arch = "llama",
     .rope_base = SYNTH_ROPE_BASE},
    {.name = "llama3.2-1b",
     .dim = 2048,
     .ff = 8192,
     .layers = 16,
     .heads = 32,
     .kv_heads = 8,
     .vocab = 128256,
     .arch = "llama",
     .tied = true,
     .rope_base = 500000.0f},
    {.name = "llama3.1-8b",
     .dim = 4096,
     .ff = 14336,
     .layers = 32,
     .heads = 32,
     .kv_heads = 8,
     .vocab = 128256,
     .arch = "llama",
     .rope_base = 500000.0f},
    {.name = "qwen2.5-0.5b",
     .dim = 896,
     .ff = 4864,
     .layers = 24,
     .heads = 14,
     .kv_heads = 2,
     .vocab = 151936,
     .arch = "qwen2",
     .tied = true,
     .rope_base = 1000000.0f},
    {.name = "qwen2.5-7b",
     .dim = 3584,
     .ff = 18944,
     .layers = 28,
     .heads = 28,
     .kv_heads = 4,
     .vocab = 152064,
     .arch = "qwen2",
     .rope_base = 1000000.0f},
    {.name = "qwen3-0.6b",
     .dim = 1024,
     .ff = 3072,
     .layers = 28,
     .heads = 16,
     .kv_heads = 8,
     .vocab = 151936,
     .arch = "qwen3",
     .tied = true,
     .rope_base = 1000000.0f,
     .head_dim = 128},
    {.name = "qwen3-8b",
     .dim = 4096,
     .ff = 12288,
     .layers = 36,
     .heads = 32,
     .kv_heads = 8,
     .vocab = 151936,
     .arch = "qwen3",
     .rope_base = 1000000.0f,
     .head_dim = 128},
    {.name = "qwen3-30b-a3b",
     .dim = 2048,
     .ff = 6144,
     .layers = 48,
     .heads = 32,
     .kv_heads = 4,
     .vocab = 151936,
     .arch = "qwen3moe",
     .rope_base = 1000000.0f,
     .head_dim = 128,
     .experts = 128,
     .experts_used = 8,
     .expert_ff = 768},
    {.name = "mixtral-8x7b",
     .dim = 4096,
     .ff = 14336,
     .layers = 32,
     .heads = 32,
     .kv_heads = 8,
     .vocab = 32000,
     .arch = "llama",
     .rope_base = 1000000.0f,
     .experts = 8,
     .experts_used = 2},
};

bool ql_synth_preset(const char *name, ql_synth_opts *o)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const preset *p = &presets[i];
        if (strcasecmp(p->name, name) != 0)
            continue;
        o->dim = p->dim;
        o->ff = p->ff;
        o->layers = p->layers;
        o->heads = p->heads;
        o->kv_heads = p->kv_heads;
        o->vocab = p->vocab;
        o->arch = p->arch;
        o->tied = p->tied;
        o->rope_base = p->rope_base;
        o->head_dim = p->head_dim;
        o->experts = p->experts;
        o->experts_used = p->experts_used;
        o->expert_ff = p->expert_ff;
        o->shared_ff = 0;
        return true;
    }
    return false;
}

const char *ql_synth_presets(void)
{
    return "2M, 30M, llama3.2-1b, llama3.1-8b, qwen2.5-0.5b, qwen2.5-7b, qwen3-0.6b, qwen3-8b, "
           "qwen3-30b-a3b, mixtral-8x7b";
}

/* Q, K and V biases: qwen2, qwen2moe. */
static bool has_qkv_bias(const ql_synth_opts *o)
{
    return strcmp(o->arch, "qwen2") == 0 || strcmp(o->arch, "qwen2moe") == 0;
}

/* Per-head Q and K norms: qwen3, qwen3moe. */
static bool has_qk_norm(const ql_synth_opts *o)
{
    return strcmp(o->arch, "qwen3") == 0 || strcmp(o->arch, "qwen3moe") == 0;
}

static bool has_shared_expert(const ql_synth_opts *o)
{
    return o->experts > 0 && strcmp(o->arch, "qwen2moe") == 0;
}

static int head_dim(const ql_synth_opts *o)
{
    return o->head_dim > 0 ? o->head_dim : o->dim / o->heads;
}

/* The width of one routed expert and of the shared one. */
static int expert_width(const ql_synth_opts *o)
{
    return strcmp(o->arch, "llama") == 0 || o->expert_ff == 0 ? o->ff : o->expert_ff;
}

static int shared_width(const ql_synth_opts *o)
{
    return o->shared_ff > 0 ? o->shared_ff : o->ff;
}

int64_t ql_synth_n_params(const ql_synth_opts *o, int vocab)
{
    const int64_t E = o->dim, hd = head_dim(o), QD = o->heads * hd, KD = o->kv_heads * hd;
    int64_t per_layer = 2 * E * QD + 2 * E * KD + 2 * E;
    if (o->experts > 0) {
        per_layer += (int64_t)o->experts * (3 * E * expert_width(o) + E);
        if (has_shared_expert(o))
            per_layer += 3 * E * shared_width(o) + E;
    } else {
        per_layer += 3 * E * o->ff;
    }
    if (has_qkv_bias(o))
        per_layer += QD + 2 * KD;
    if (has_qk_norm(o))
        per_layer += 2 * hd;
    return (o->tied ? 1 : 2) * (int64_t)vocab * E + E + (int64_t)o->layers * per_layer;
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

typedef enum {
    T_EMBD,
    T_HEAD,
    T_NORM,
    T_NORM_MASSIVE,
    T_QK_NORM,
    T_IN,
    T_OUT,
    T_BIAS,
    T_ROUTER,
} tensor_kind;

typedef struct {
    char name[64];
    int64_t ne0, ne1, ne2; /* ne1 = 0 for 1-D; ne2 = matrices (experts), 1 for 2-D */
    tensor_kind kind;
    int norm_ref; /* index of the norm whose output this product reads, or -1 */
} tensor_spec;

/* Whether a tensor is written in the model's type (the weight matrices) rather than
 * F32 (vectors, and the routers, which converters keep in F32). */
static bool in_model_type(const tensor_spec *t)
{
    return t->ne1 > 0 && t->kind != T_ROUTER;
}

static int build_specs(const ql_synth_opts *o, int vocab, tensor_spec *sp)
{
    const int64_t E = o->dim, F = o->ff, hd = head_dim(o);
    const int64_t QD = (int64_t)o->heads * hd, KD = (int64_t)o->kv_heads * hd;
    const int64_t FE = expert_width(o), FS = shared_width(o), X = o->experts;
    int n = 0;
#define ADD3(a, b, c, k, ref, ...)                                                                 \
    do {                                                                                           \
        snprintf(sp[n].name, sizeof sp[n].name, __VA_ARGS__);                                      \
        sp[n].ne0 = a;                                                                             \
        sp[n].ne1 = b;                                                                             \
        sp[n].ne2 = c;                                                                             \
        sp[n].kind = k;                                                                            \
        sp[n].norm_ref = ref;                                                                      \
        n++;                                                                                       \
    } while (0)
#define ADD(a, b, k, ref, ...) ADD3(a, b, 1, k, ref, __VA_ARGS__)
    ADD(E, vocab, T_EMBD, -1, "token_embd.weight");
    ADD(E, 0, T_NORM, -1, "output_norm.weight");
    if (!o->tied)
        ADD(E, vocab, T_HEAD, -1, "output.weight");
    for (int l = 0; l < o->layers; l++) {
        const int attn_norm = n;
        ADD(E, 0, T_NORM_MASSIVE, -1, "blk.%d.attn_norm.weight", l);
        ADD(E, QD, T_IN, attn_norm, "blk.%d.attn_q.weight", l);
        ADD(E, KD, T_IN, attn_norm, "blk.%d.attn_k.weight", l);
        ADD(E, KD, T_IN, attn_norm, "blk.%d.attn_v.weight", l);
        if (has_qkv_bias(o)) {
            ADD(QD, 0, T_BIAS, -1, "blk.%d.attn_q.bias", l);
            ADD(KD, 0, T_BIAS, -1, "blk.%d.attn_k.bias", l);
            ADD(KD, 0, T_BIAS, -1, "blk.%d.attn_v.bias", l);
        }
        if (has_qk_norm(o)) {
            ADD(hd, 0, T_QK_NORM, -1, "blk.%d.attn_q_norm.weight", l);
            ADD(hd, 0, T_QK_NORM, -1, "blk.%d.attn_k_norm.weight", l);
        }
        ADD(QD, E, T_OUT, -1, "blk.%d.attn_output.weight", l);
        const int ffn_norm = n;
        ADD(E, 0, T_NORM_MASSIVE, -1, "blk.%d.ffn_norm.weight", l);
        if (X == 0) {
            ADD(E, F, T_IN, ffn_norm, "blk.%d.ffn_gate.weight", l);
            ADD(E, F, T_IN, ffn_norm, "blk.%d.ffn_up.weight", l);
            ADD(F, E, T_OUT, -1, "blk.%d.ffn_down.weight", l);
            continue;
        }
        ADD(E, X, T_ROUTER, ffn_norm, "blk.%d.ffn_gate_inp.weight", l);
        ADD3(E, FE, X, T_IN, ffn_norm, "blk.%d.ffn_gate_exps.weight", l);
        ADD3(E, FE, X, T_IN, ffn_norm, "blk.%d.ffn_up_exps.weight", l);
        ADD3(FE, E, X, T_OUT, -1, "blk.%d.ffn_down_exps.weight", l);
        if (has_shared_expert(o)) {
            ADD(E, 1, T_ROUTER, ffn_norm, "blk.%d.ffn_gate_inp_shexp.weight", l);
            ADD(E, FS, T_IN, ffn_norm, "blk.%d.ffn_gate_shexp.weight", l);
            ADD(E, FS, T_IN, ffn_norm, "blk.%d.ffn_up_shexp.weight", l);
            ADD(FS, E, T_OUT, -1, "blk.%d.ffn_down_shexp.weight", l);
        }
    }
#undef ADD
#undef ADD3
    return n;
}

/* Tensors build_specs lists. */
static int n_specs_of(const ql_synth_opts *o)
{
    int per_layer = 9 + (has_qkv_bias(o) ? 3 : 0) + (has_qk_norm(o) ? 2 : 0);
    if (o->experts > 0)
        per_layer += 1 + (has_shared_expert(o) ? 4 : 0);
    return (o->tied ? 2 : 3) + per_layer * o->layers;
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
    if (o->head_dim < 0 || (o->head_dim == 0 && o->dim % o->heads != 0) || head_dim(o) % 2 != 0)
        return ql_error_set(err, QL_EINVAL,
                            "synth: --dim %d must be a multiple of --heads %d with an even head "
                            "size, or --head-dim an even size",
                            o->dim, o->heads);
    if (o->heads % o->kv_heads != 0)
        return ql_error_set(err, QL_EINVAL, "synth: --heads %d is not a multiple of --kv-heads %d",
                            o->heads, o->kv_heads);
    if (o->type != QL_TYPE_F32 && o->type != QL_TYPE_F16 && o->type != QL_TYPE_BF16)
        return ql_error_set(err, QL_EINVAL, "synth: --type must be F32, F16 or BF16, not %s",
                            ql_type_name(o->type));
    static const char *const archs[] = {"llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe"};
    bool known = false;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        known |= strcmp(o->arch, archs[i]) == 0;
    if (!known)
        return ql_error_set(err, QL_EINVAL,
                            "synth: --arch must be llama, qwen2, qwen3, qwen2moe or qwen3moe, not "
                            "'%s'",
                            o->arch);
    const bool moe_arch = strstr(o->arch, "moe") != NULL;
    if (moe_arch && o->experts == 0)
        return ql_error_set(err, QL_EINVAL, "synth: --arch %s needs --experts", o->arch);
    if (o->experts > 0 && strcmp(o->arch, "llama") != 0 && !moe_arch)
        return ql_error_set(err, QL_EINVAL,
                            "synth: --experts: %s has no experts (llama, qwen2moe and qwen3moe do)",
                            o->arch);
    if (o->experts < 0 || o->experts > 1024 ||
        (o->experts > 0 && (o->experts_used < 1 || o->experts_used > o->experts)))
        return ql_error_set(err, QL_EINVAL,
                            "synth: --experts %d with --experts-used %d: expected 1 <= used <= "
                            "experts <= 1024",
                            o->experts, o->experts_used);
    if (!(o->rope_base > 0.0f) || o->rope_base > 1e12f)
        return ql_error_set(err, QL_EINVAL, "synth: --rope-base %g must be in (0, 1e12]",
                            (double)o->rope_base);
    return QL_OK;
}

/* The keys beyond the dense llama ones: the head size when it is not dim / heads,
 * the experts' counts and widths. */
static ql_status write_shape_keys(ql_gguf_writer *w, const ql_synth_opts *o, ql_error *err)
{
    char key[96];
    ql_status st = QL_OK;
    if (o->head_dim > 0 && o->head_dim * o->heads != o->dim) {
        snprintf(key, sizeof key, "%s.attention.key_length", o->arch);
        if ((st = ql_gguf_writer_set_u32(w, key, (uint32_t)o->head_dim, err)))
            return st;
        snprintf(key, sizeof key, "%s.attention.value_length", o->arch);
        if ((st = ql_gguf_writer_set_u32(w, key, (uint32_t)o->head_dim, err)))
            return st;
    }
    if (o->experts == 0)
        return QL_OK;
    snprintf(key, sizeof key, "%s.expert_count", o->arch);
    if ((st = ql_gguf_writer_set_u32(w, key, (uint32_t)o->experts, err)))
        return st;
    snprintf(key, sizeof key, "%s.expert_used_count", o->arch);
    if ((st = ql_gguf_writer_set_u32(w, key, (uint32_t)o->experts_used, err)))
        return st;
    if (strcmp(o->arch, "llama") == 0)
        return QL_OK; /* llama's experts are feed_forward_length wide */
    snprintf(key, sizeof key, "%s.expert_feed_forward_length", o->arch);
    if ((st = ql_gguf_writer_set_u32(w, key, (uint32_t)expert_width(o), err)))
        return st;
    if (has_shared_expert(o)) {
        snprintf(key, sizeof key, "%s.expert_shared_feed_forward_length", o->arch);
        st = ql_gguf_writer_set_u32(w, key, (uint32_t)shared_width(o), err);
    }
    return st;
}

ql_status ql_synth_write(const ql_synth_opts *o, const char *path, ql_error *err)
{
    ql_status st = check_opts(o, err);
    if (st)
        return st;
    const int n_specs = n_specs_of(o);
    synth_state s;
    memset(&s, 0, sizeof s);
    char tok_path[QL_PATH_MAX];
    ql_gguf *src = NULL;
    ql_gguf_writer *w = NULL;
    gsl_rng *rng = NULL;
    tensor_spec *sp = NULL;
    float *buf = NULL, **norms = NULL;
    uint16_t *half = NULL;
    if ((st = ql_data_resolve(o->tokenizer_src, tok_path, sizeof tok_path, NULL, err)) ||
        (st = ql_gguf_open(&src, tok_path, err)) || (st = ql_gguf_writer_alloc(&w, err)))
        goto out;
    int vocab = o->vocab;
    if ((st = copy_tokenizer(w, src, &vocab, err)))
        goto out;

    const int hd = head_dim(o);
    ql_gguf_value seed_value = {.type = QL_GGUF_UINT64, .v.u64 = o->seed};
    char name[128];
    snprintf(name, sizeof name, "qlab-synth-d%d-f%d-l%d-s%llu", o->dim, o->ff, o->layers,
             (unsigned long long)o->seed);
    const uint32_t ftype = o->type == QL_TYPE_F16    ? FTYPE_MOSTLY_F16
                           : o->type == QL_TYPE_BF16 ? FTYPE_MOSTLY_BF16
                                                     : FTYPE_ALL_F32;
    const char *a = o->arch;
    char key[8][96];
    snprintf(key[0], sizeof key[0], "%s.context_length", a);
    snprintf(key[1], sizeof key[1], "%s.embedding_length", a);
    snprintf(key[2], sizeof key[2], "%s.block_count", a);
    snprintf(key[3], sizeof key[3], "%s.feed_forward_length", a);
    snprintf(key[4], sizeof key[4], "%s.attention.head_count", a);
    snprintf(key[5], sizeof key[5], "%s.attention.head_count_kv", a);
    snprintf(key[6], sizeof key[6], "%s.rope.dimension_count", a);
    snprintf(key[7], sizeof key[7], "%s.rope.freq_base", a);
    char k_eps[96], k_vocab[96];
    snprintf(k_eps, sizeof k_eps, "%s.attention.layer_norm_rms_epsilon", a);
    snprintf(k_vocab, sizeof k_vocab, "%s.vocab_size", a);
    if ((st = ql_gguf_writer_set_str(w, "general.architecture", a, err)) ||
        (st = ql_gguf_writer_set_str(w, "general.name", name, err)) ||
        (st = ql_gguf_writer_set_u32(w, "general.file_type", ftype, err)) ||
        (st = ql_gguf_writer_set_u32(w, key[0], (uint32_t)o->ctx_train, err)) ||
        (st = ql_gguf_writer_set_u32(w, key[1], (uint32_t)o->dim, err)) ||
        (st = ql_gguf_writer_set_u32(w, key[2], (uint32_t)o->layers, err)) ||
        (st = ql_gguf_writer_set_u32(w, key[3], (uint32_t)o->ff, err)) ||
        (st = ql_gguf_writer_set_u32(w, key[4], (uint32_t)o->heads, err)) ||
        (st = ql_gguf_writer_set_u32(w, key[5], (uint32_t)o->kv_heads, err)) ||
        (st = ql_gguf_writer_set_u32(w, key[6], (uint32_t)hd, err)) ||
        (st = ql_gguf_writer_set_f32(w, key[7], o->rope_base, err)) ||
        (st = ql_gguf_writer_set_f32(w, k_eps, SYNTH_EPS, err)) ||
        (st = ql_gguf_writer_set_u32(w, k_vocab, (uint32_t)vocab, err)) ||
        (st = ql_gguf_writer_set_kv(w, "qlab.synth.seed", &seed_value, err)) ||
        (st = ql_gguf_writer_set_str(w, "qlab.synth.source_tokenizer", o->tokenizer_src, err)))
        goto out;
    if ((st = write_shape_keys(w, o, err)))
        goto out;

    sp = calloc((size_t)n_specs, sizeof *sp);
    norms = calloc((size_t)n_specs, sizeof *norms);
    if (!sp || !norms) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory");
        goto out;
    }
    QL_ASSERT(build_specs(o, vocab, sp) == n_specs);
    int64_t max_elems = 0;
    for (int i = 0; i < n_specs; i++) {
        const int n_dims = sp[i].ne1 == 0 ? 1 : sp[i].ne2 > 1 ? 3 : 2;
        const int64_t ne[3] = {sp[i].ne0, sp[i].ne1, sp[i].ne2};
        const int32_t type = in_model_type(&sp[i]) ? o->type : QL_TYPE_F32;
        const int64_t elems = sp[i].ne0 * (sp[i].ne1 > 0 ? sp[i].ne1 * sp[i].ne2 : 1);
        if (elems > max_elems)
            max_elems = elems;
        if ((st = ql_gguf_writer_add_tensor(
                 w, sp[i].name, (uint32_t)n_dims, ne, type,
                 ql_row_size(type, sp[i].ne0) * (uint64_t)(elems / sp[i].ne0), err)))
            goto out;
    }
    buf = malloc((size_t)max_elems * sizeof *buf);
    half = malloc((size_t)max_elems * sizeof *half);
    rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (!buf || !half || !rng) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory");
        goto out;
    }
    gsl_rng_set(rng, (unsigned long)o->seed);
    s.rng = rng;
    s.n_massive = o->dim / MASSIVE_EVERY;
    s.n_massive = s.n_massive < 2 ? 2 : s.n_massive > 8 ? 8 : s.n_massive;
    if (s.n_massive > o->dim)
        s.n_massive = o->dim;
    for (int m = 0; m < s.n_massive; m++) {
        int c;
        bool dup;
        do { /* distinct channels */
            c = (int)gsl_rng_uniform_int(rng, (unsigned long)o->dim);
            dup = false;
            for (int k = 0; k < m; k++)
                dup |= s.massive[k] == c;
        } while (dup);
        s.massive[m] = c;
    }

    if ((st = ql_gguf_writer_begin(w, path, err)))
        goto out;
    for (int i = 0; i < n_specs; i++) {
        const tensor_spec *t = &sp[i];
        const int64_t elems = t->ne0 * (t->ne1 > 0 ? t->ne1 * t->ne2 : 1);
        const int64_t mat = t->ne0 * t->ne1; /* one expert's matrix */
        switch (t->kind) {
        case T_EMBD:
            /* Unit entries make a residual stream of unit RMS; a tied table is also the
             * head, so it gets the head's scale (peaked, finite next-token logits). */
            gen_matrix(&s, buf, t->ne0, t->ne1, o->tied ? GAIN_HEAD : sqrt((double)t->ne0), NULL);
            break;
        case T_HEAD:
            gen_matrix(&s, buf, t->ne0, t->ne1, GAIN_HEAD, NULL);
            break;
        case T_IN:
            for (int64_t e = 0; e < t->ne2; e++)
                gen_matrix(&s, buf + e * mat, t->ne0, t->ne1, GAIN_IN, norms[t->norm_ref]);
            break;
        case T_OUT:
            for (int64_t e = 0; e < t->ne2; e++)
                gen_matrix(&s, buf + e * mat, t->ne0, t->ne1, GAIN_OUT, NULL);
            break;
        case T_ROUTER:
            gen_matrix(&s, buf, t->ne0, t->ne1, ROUTER_GAIN, norms[t->norm_ref]);
            break;
        case T_QK_NORM:
            for (int64_t b = 0; b < elems; b++)
                buf[b] = (float)fabs(1.0 + QK_NORM_JITTER * gsl_ran_gaussian(s.rng, 1.0));
            break;
        case T_BIAS:
            for (int64_t b = 0; b < elems; b++)
                buf[b] = (float)gsl_ran_gaussian(s.rng, QWEN_BIAS_STD);
            break;
        case T_NORM:
        case T_NORM_MASSIVE:
            gen_norm(&s, buf, elems, t->kind == T_NORM_MASSIVE);
            norms[i] = malloc((size_t)elems * sizeof(float));
            if (!norms[i]) {
                st = ql_error_set(err, QL_ENOMEM, "out of memory");
                goto out;
            }
            memcpy(norms[i], buf, (size_t)elems * sizeof(float));
            break;
        }
        if (in_model_type(t) && o->type != QL_TYPE_F32) {
            for (int64_t e = 0; e < elems; e++)
                half[e] =
                    o->type == QL_TYPE_F16 ? ql_fp32_to_fp16(buf[e]) : ql_fp32_to_bf16(buf[e]);
            st = ql_gguf_writer_write_tensor(w, half, (uint64_t)elems * 2, err);
        } else {
            st = ql_gguf_writer_write_tensor(w, buf, (uint64_t)elems * 4, err);
        }
        if (st)
            goto out;
    }
    st = ql_gguf_writer_finish(w, err);
out:
    if (norms)
        for (int i = 0; i < n_specs; i++)
            free(norms[i]);
    free(norms);
    free(sp);
    free(buf);
    free(half);
    if (rng)
        gsl_rng_free(rng);
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
            if (!ql_synth_preset(item, o))
                return ql_error_set(err, QL_EINVAL, "model '%s': unknown preset '%s' (presets: %s)",
                                    spec, item, ql_synth_presets());
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
            ok = t && (t->type == QL_TYPE_F32 || t->type == QL_TYPE_F16 || t->type == QL_TYPE_BF16);
            if (ok)
                o->type = t->type;
        } else if (strcmp(k, "arch") == 0) {
            ok = false;
            static const char *const archs[] = {"llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe"};
            for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
                if (strcmp(v, archs[i]) == 0) {
                    o->arch = archs[i];
                    ok = true;
                }
        } else if (strcmp(k, "head-dim") == 0) {
            ok = spec_int(v, 0, 1 << 12, &o->head_dim);
        } else if (strcmp(k, "experts") == 0) {
            ok = spec_int(v, 0, 1024, &o->experts);
        } else if (strcmp(k, "experts-used") == 0) {
            ok = spec_int(v, 0, 1024, &o->experts_used);
        } else if (strcmp(k, "expert-ff") == 0) {
            ok = spec_int(v, 0, 1 << 18, &o->expert_ff);
        } else if (strcmp(k, "shared-ff") == 0) {
            ok = spec_int(v, 0, 1 << 18, &o->shared_ff);
        } else if (strcmp(k, "tied") == 0) {
            ok = strcmp(v, "0") == 0 || strcmp(v, "1") == 0;
            if (ok)
                o->tied = v[0] == '1';
        } else if (strcmp(k, "rope-base") == 0) {
            double b;
            ok = ql_parse_double(v, &b) && b > 0 && b <= 1e12;
            if (ok)
                o->rope_base = (float)b;
        } else
            return ql_error_set(err, QL_EINVAL,
                                "model '%s': unknown key '%s' (keys: dim, ff, layers, heads, "
                                "kv-heads, vocab, seed, type, arch, tied, rope-base, head-dim, "
                                "experts, experts-used, expert-ff, shared-ff)",
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
    char id[384], hash[65];
    int n = snprintf(id, sizeof id,
                     "dim=%d ff=%d layers=%d heads=%d kv=%d vocab=%d seed=%llu type=%d "
                     "ctx=%d tok=%s",
                     o.dim, o.ff, o.layers, o.heads, o.kv_heads, o.vocab,
                     (unsigned long long)o.seed, (int)o.type, o.ctx_train, o.tokenizer_src);
    /* Named only when not the defaults, so the files of earlier specs keep their names. */
    if (strcmp(o.arch, "llama") != 0 || o.tied || o.rope_base != SYNTH_ROPE_BASE)
        n += snprintf(id + n, sizeof id - (size_t)n, " arch=%s tied=%d rope=%.9g", o.arch,
                      (int)o.tied, (double)o.rope_base);
    if (o.head_dim > 0 || o.experts > 0)
        snprintf(id + n, sizeof id - (size_t)n, " hd=%d x=%d xu=%d xff=%d sff=%d", o.head_dim,
                 o.experts, o.experts_used, o.expert_ff, o.shared_ff);
    ql_sha256_hex(id, strlen(id), hash);
    if ((st = ql_make_dirs(dir, err)))
        return st;
    if ((size_t)snprintf(path, size, "%s/synth-%.16s.gguf", dir, hash) >= size)
        return ql_error_set(err, QL_EINVAL, "%s: path too long", dir);
    if (ql_file_exists(path))
        return QL_OK;
    return ql_synth_write(&o, path, err);
}
