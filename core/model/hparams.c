/* Hyper-parameters of a llama-family GGUF (hparams.h). */
#include "model/hparams.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/tensor_name.h"

/* llama.cpp's default when {arch}.rope.freq_base is absent. */
#define DEFAULT_ROPE_FREQ_BASE 10000.0f
/* RMSNorm divides by sqrt(mean x^2 + eps): real models use 1e-6 .. 1e-5; an epsilon
 * beyond 1 would swamp the activations it normalizes. */
#define NORM_EPS_MAX 1.0f
/* Linear RoPE scaling multiplies positions by 1/factor. Below 1/256 the positions of
 * a 2^16-token context pass 2^24, where single precision no longer tells neighbours
 * apart (at 1e-38 they overflow); above 2^126 the inverse is no longer a normal
 * number and every position collapses to 0. */
#define ROPE_FACTOR_MIN (1.0f / 256.0f)
#define ROPE_FACTOR_MAX 0x1p126f

/* ------------------------------------------------------------------------ */
/* Hyper-parameters                                                           */

/* Reads {arch}.<suffix> as a positive int. */
static ql_status get_int(const ql_gguf *g, const char *arch, const char *suffix, bool required,
                         int def, int *out, ql_error *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    ql_error e;
    ql_error_clear(&e);
    if (!ql_gguf_get_i64(g, key, &v, &e)) {
        if (e.status)
            return ql_error_set(err, e.status, "%s", e.msg);
        if (required)
            return ql_error_set(err, QL_EFORMAT, "%s: required key '%s' is missing", g->path, key);
        *out = def;
        return QL_OK;
    }
    if (v <= 0 || v > (1 << 30))
        return ql_error_set(err, QL_EFORMAT, "%s: key '%s' = %lld is out of range (1..%d)", g->path,
                            key, (long long)v, 1 << 30);
    *out = (int)v;
    return QL_OK;
}

/* Reads {arch}.<suffix> as a finite number in [lo, hi]; why says what the range
 * protects (a clause after "expected"). */
static ql_status get_float(const ql_gguf *g, const char *arch, const char *suffix, bool required,
                           float def, float lo, float hi, const char *why, float *out,
                           ql_error *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    ql_error e;
    ql_error_clear(&e);
    if (!ql_gguf_get_f32(g, key, out, &e)) {
        if (e.status)
            return ql_error_set(err, e.status, "%s", e.msg);
        if (required)
            return ql_error_set(err, QL_EFORMAT, "%s: required key '%s' is missing", g->path, key);
        *out = def;
        return QL_OK;
    }
    /* Also catches a double that does not fit in a float (it reads as infinite). */
    if (!isfinite(*out) || !(*out >= lo && *out <= hi))
        return ql_error_set(err, QL_EFORMAT, "%s: key '%s' = %g, expected %s", g->path, key,
                            (double)*out, why);
    return QL_OK;
}

/* What each architecture's graph does, as llama.cpp (b4747; qwen3 and qwen3moe as
 * later llama.cpp and Hugging Face define them) builds it. */
typedef struct {
    const char *name;
    ql_arch arch;
    ql_rope_type rope;
    bool qkv_bias;        /* q/k/v biases required */
    bool qk_norm;         /* per-head RMSNorm of Q and K */
    bool moe;             /* expert_count required (llama: optional) */
    bool weights_norm;    /* routing weights renormalised over the chosen experts */
    bool output_required; /* no tied head */
} arch_traits;

static const arch_traits archs[] = {
    {"llama", QL_ARCH_LLAMA, QL_ROPE_NORM, false, false, false, true, false},
    {"qwen2", QL_ARCH_QWEN2, QL_ROPE_NEOX, true, false, false, false, false},
    {"qwen2moe", QL_ARCH_QWEN2MOE, QL_ROPE_NEOX, true, false, true, false, true},
    {"qwen3", QL_ARCH_QWEN3, QL_ROPE_NEOX, false, true, false, false, false},
    {"qwen3moe", QL_ARCH_QWEN3MOE, QL_ROPE_NEOX, false, true, true, true, false},
};

/* {arch}.<suffix> as a count >= 0 (absent: 0). */
static ql_status get_count(const ql_gguf *g, const char *arch, const char *suffix, int *out,
                           ql_error *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    ql_error e;
    ql_error_clear(&e);
    *out = 0;
    if (!ql_gguf_get_i64(g, key, &v, &e))
        return e.status ? ql_error_set(err, e.status, "%s", e.msg) : QL_OK;
    if (v < 0 || v > QL_HPARAMS_MAX_EXPERTS)
        return ql_error_set(err, QL_EFORMAT, "%s: key '%s' = %lld is out of range (0..%d)", g->path,
                            key, (long long)v, QL_HPARAMS_MAX_EXPERTS);
    *out = (int)v;
    return QL_OK;
}

/* The expert keys: counts and widths as llama.cpp's loader reads them (llama: the
 * experts are feed_forward_length wide; qwen2moe and qwen3moe: expert_feed_forward_length,
 * else n_ff / expert_used_count, and the shared expert expert_shared_feed_forward_length,
 * else n_ff). llama.cpp's graphs for these architectures read neither
 * expert_gating_func, expert_weights_norm nor expert_weights_scale: neither does qlab. */
static ql_status read_experts(const ql_gguf *g, const arch_traits *at, ql_hparams *hp,
                              ql_error *err)
{
    const char *arch = at->name;
    ql_status st;
    if ((st = get_count(g, arch, "expert_count", &hp->n_expert, err)) ||
        (st = get_count(g, arch, "expert_used_count", &hp->n_expert_used, err)))
        return st;
    if (hp->n_expert == 0) {
        if (at->moe)
            return ql_error_set(err, QL_EFORMAT, "%s: required key '%s.expert_count' is missing",
                                g->path, arch);
        hp->n_expert_used = 0;
        return QL_OK;
    }
    if (hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: key '%s.expert_used_count' = %d, expected 1 .. expert_count (%d)",
                            g->path, arch, hp->n_expert_used, hp->n_expert);
    hp->expert_weights_norm = at->weights_norm;
    if (at->arch == QL_ARCH_LLAMA) {
        hp->n_ff_exp = hp->n_ff;
        return QL_OK;
    }
    if ((st = get_int(g, arch, "expert_feed_forward_length", false,
                      hp->n_ff / hp->n_expert_used > 0 ? hp->n_ff / hp->n_expert_used : 1,
                      &hp->n_ff_exp, err)))
        return st;
    if (at->arch == QL_ARCH_QWEN2MOE && (st = get_int(g, arch, "expert_shared_feed_forward_length",
                                                      false, hp->n_ff, &hp->n_ff_shexp, err)))
        return st;
    return QL_OK;
}

static ql_status read_keys(const ql_gguf *g, ql_hparams *hp, const arch_traits **traits,
                           ql_error *err)
{
    memset(hp, 0, sizeof *hp);
    ql_error e;
    ql_error_clear(&e);
    const char *arch = ql_gguf_get_str(g, "general.architecture", &e);
    if (!arch) {
        if (e.status)
            return ql_error_set(err, e.status, "%s", e.msg);
        return ql_error_set(err, QL_EFORMAT, "%s: key 'general.architecture' is missing", g->path);
    }
    const arch_traits *at = NULL;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strcmp(arch, archs[i].name) == 0)
            at = &archs[i];
    if (!at)
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "%s: architecture '%s' is not supported (qlab reads llama, qwen2, "
                            "qwen2moe, qwen3, qwen3moe)",
                            g->path, arch);
    *traits = at;
    hp->arch = at->arch;
    ql_strlcpy(hp->arch_name, arch, sizeof hp->arch_name);

    ql_status st;
    if ((st = get_int(g, arch, "block_count", true, 0, &hp->n_layer, err)) ||
        (st = get_int(g, arch, "embedding_length", true, 0, &hp->n_embd, err)) ||
        (st = get_int(g, arch, "feed_forward_length", true, 0, &hp->n_ff, err)) ||
        (st = get_int(g, arch, "attention.head_count", true, 0, &hp->n_head, err)) ||
        (st =
             get_int(g, arch, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv, err)) ||
        (st = get_int(g, arch, "context_length", false, 0, &hp->n_ctx_train, err)) ||
        (st = get_float(g, arch, "attention.layer_norm_rms_epsilon", true, 0.0f, FLT_TRUE_MIN,
                        NORM_EPS_MAX, "a finite epsilon > 0 and at most 1", &hp->norm_eps, err)) ||
        (st = get_float(g, arch, "rope.freq_base", false, DEFAULT_ROPE_FREQ_BASE, 1.0f, FLT_MAX,
                        "a finite base >= 1 (below 1 the rotation angles grow with the "
                        "dimension and overflow)",
                        &hp->rope_freq_base, err)))
        return st;
    if (hp->n_head % hp->n_head_kv != 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: %s.attention.head_count %d is not a multiple of head_count_kv %d",
                            g->path, arch, hp->n_head, hp->n_head_kv);
    /* The head size is key_length, by default embedding_length / head_count, which then
     * must divide evenly. */
    char key[128];
    snprintf(key, sizeof key, "%s.attention.key_length", arch);
    if (!ql_gguf_find_kv(g, key) && hp->n_embd % hp->n_head != 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: %s.embedding_length %d is not a multiple of "
                            "attention.head_count %d, and there is no '%s' to give the head size",
                            g->path, arch, hp->n_embd, hp->n_head, key);
    if ((st = get_int(g, arch, "attention.key_length", false, hp->n_embd / hp->n_head,
                      &hp->head_dim, err)))
        return st;
    int v_len;
    if ((st = get_int(g, arch, "attention.value_length", false, hp->head_dim, &v_len, err)))
        return st;
    if (v_len != hp->head_dim)
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "%s: %s.attention.value_length %d differs from key_length %d "
                            "(not supported)",
                            g->path, arch, v_len, hp->head_dim);
    if ((st = get_int(g, arch, "rope.dimension_count", false, hp->head_dim, &hp->n_rot, err)))
        return st;
    if (hp->n_rot % 2 != 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: %s.rope.dimension_count %d is odd, expected an even number (RoPE "
                            "rotates pairs)",
                            g->path, arch, hp->n_rot);
    if (hp->n_rot > hp->head_dim)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: %s.rope.dimension_count %d exceeds the head size %d (%s)", g->path,
                            arch, hp->n_rot, hp->head_dim,
                            ql_gguf_find_kv(g, key) ? "attention.key_length"
                                                    : "embedding_length / attention.head_count");

    /* RoPE scaling: none or linear; the Llama 3 frequency factors come as a tensor. */
    hp->rope_freq_scale = 1.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *scaling = ql_gguf_get_str(g, key, NULL);
    if (scaling && strcmp(scaling, "none") != 0) {
        if (strcmp(scaling, "linear") != 0)
            return ql_error_set(err, QL_EUNSUPPORTED,
                                "%s: %s = '%s' is not supported (qlab supports none, linear)",
                                g->path, key, scaling);
        float factor;
        if ((st = get_float(g, arch, "rope.scaling.factor", false, 1.0f, ROPE_FACTOR_MIN,
                            ROPE_FACTOR_MAX,
                            "a finite factor in [1/256, 2^126] (positions are scaled by "
                            "1/factor)",
                            &factor, err)))
            return st;
        hp->rope_freq_scale = 1.0f / factor;
    }
    /* As llama.cpp decides (llama_model_rope_type): llama rotates adjacent pairs, the
     * Qwen family rotates halves. */
    hp->rope_type = at->rope;
    hp->has_qkv_bias = at->qkv_bias;
    hp->has_qk_norm = at->qk_norm;
    return read_experts(g, at, hp, err);
}

/* ------------------------------------------------------------------------ */
/* Counts against the tensors                                                 */

/* block_count against the blocks whose tensors the file holds, before anything is
 * sized by it: every block 0 .. n_layer - 1 has tensors, and none lies beyond. The
 * tensors a block needs are checked by name and shape when the weights load. */
static ql_status check_blocks(const ql_gguf *g, const ql_hparams *hp, ql_error *err)
{
    /* The first missing block is at most n_tensors: a map of that many blocks is
     * enough whatever block_count claims, and bounded by the file's size. */
    const int64_t n_map = hp->n_layer < g->n_tensors + 1 ? hp->n_layer : g->n_tensors + 1;
    bool *seen = calloc((size_t)n_map + 1, sizeof *seen);
    if (!seen)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", g->path);
    int64_t n_present = 0, beyond = -1;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const int64_t b = ql_tensor_block(g->tensors[i].name, NULL);
        if (b < 0)
            continue;
        if (b >= hp->n_layer) {
            if (beyond < 0 || b < beyond)
                beyond = b;
        } else if (b < n_map && !seen[b]) {
            seen[b] = true;
            n_present++;
        }
    }
    int64_t missing = 0;
    while (missing < n_map && seen[missing])
        missing++;
    free(seen);
    if (missing < hp->n_layer) {
        char present[96];
        if (n_present == 0)
            snprintf(present, sizeof present, "no block tensors (blk.N.*)");
        else if (n_present == missing)
            snprintf(present, sizeof present, "blocks 0 to %lld", (long long)missing - 1);
        else
            snprintf(present, sizeof present, "tensors of %lld blocks", (long long)n_present);
        return ql_error_set(err, QL_EFORMAT,
                            "%s: key '%s.block_count' = %d, but the file holds %s among its "
                            "%lld tensors: the tensors blk.%lld.*%s are missing",
                            g->path, hp->arch_name, hp->n_layer, present, (long long)g->n_tensors,
                            (long long)missing,
                            missing + 1 < hp->n_layer ? " and later blocks'" : "");
    }
    if (beyond >= 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: key '%s.block_count' = %d, but the file has tensors of block "
                            "%lld (blk.%lld.*)",
                            g->path, hp->arch_name, hp->n_layer, (long long)beyond,
                            (long long)beyond);
    return QL_OK;
}

ql_status ql_hparams_read(const ql_gguf *g, ql_hparams *hp, ql_error *err)
{
    const arch_traits *at = NULL;
    ql_status st = read_keys(g, hp, &at, err);
    if (st || (st = check_blocks(g, hp, err)))
        return st;
    const ql_gguf_tensor *emb = ql_gguf_find_tensor(g, "token_embd.weight");
    if (!emb)
        return ql_error_set(err, QL_EFORMAT, "%s: tensor 'token_embd.weight' is missing", g->path);
    if (emb->n_dims != 2 || emb->ne[0] != hp->n_embd || emb->ne[1] <= 0 || emb->ne[1] > (1 << 30)) {
        return ql_error_set(err, QL_EFORMAT,
                            "%s: tensor 'token_embd.weight' has shape %lldx%lld, expected "
                            "%dxN_VOCAB (ggml ne)",
                            g->path, (long long)emb->ne[0], (long long)emb->ne[1], hp->n_embd);
    }
    hp->n_vocab = (int)emb->ne[1];
    /* The vocabulary and the embedding rows must agree (llama.cpp sizes token_embd by
     * the vocabulary): a token id past the rows would index outside the table. */
    const ql_gguf_kv *toks = ql_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (toks && toks->value.type == QL_GGUF_ARRAY && toks->value.v.arr.n != (uint64_t)hp->n_vocab)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: key 'tokenizer.ggml.tokens' has %llu tokens, but tensor "
                            "'token_embd.weight' has %d rows (one per token)",
                            g->path, (unsigned long long)toks->value.v.arr.n, hp->n_vocab);
    hp->tied_output = ql_gguf_find_tensor(g, "output.weight") == NULL;
    if (hp->tied_output && at->output_required)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: tensor 'output.weight' is missing (%s has no tied head)", g->path,
                            hp->arch_name);
    return QL_OK;
}

int ql_hparams_ff_max(const ql_hparams *hp)
{
    int m = hp->n_expert > 0 ? 0 : hp->n_ff;
    if (hp->n_ff_exp > m)
        m = hp->n_ff_exp;
    if (hp->n_ff_shexp > m)
        m = hp->n_ff_shexp;
    return m;
}

int64_t ql_hparams_layer_weights(const ql_hparams *hp)
{
    const int64_t E = hp->n_embd, QD = (int64_t)hp->n_head * hp->head_dim;
    const int64_t KD = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t attn = E * QD + 2 * E * KD + QD * E;
    if (hp->n_expert == 0)
        return attn + 3 * E * hp->n_ff;
    int64_t ffn = (int64_t)hp->n_expert * (3 * E * hp->n_ff_exp + E);
    if (hp->n_ff_shexp > 0)
        ffn += 3 * E * hp->n_ff_shexp + E;
    return attn + ffn;
}
