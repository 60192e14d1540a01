/* Hyper-parameters of a llama-family GGUF (hparams.h). */
#include "model/hparams.h"

#include <stdio.h>
#include <string.h>

#include "base/util.h"

/* llama.cpp's default when {arch}.rope.freq_base is absent. */
#define DEFAULT_ROPE_FREQ_BASE 10000.0f

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

static ql_status get_float(const ql_gguf *g, const char *arch, const char *suffix, bool required,
                           float def, float *out, ql_error *err)
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
    }
    return QL_OK;
}

static ql_status read_keys(const ql_gguf *g, ql_hparams *hp, ql_error *err)
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
    if (strcmp(arch, "llama") == 0)
        hp->arch = QL_ARCH_LLAMA;
    else if (strcmp(arch, "qwen2") == 0)
        hp->arch = QL_ARCH_QWEN2;
    else if (strcmp(arch, "qwen3") == 0)
        hp->arch = QL_ARCH_QWEN3;
    else
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "%s: architecture '%s' is not supported (qlab reads llama, qwen2, "
                            "qwen3)",
                            g->path, arch);
    ql_strlcpy(hp->arch_name, arch, sizeof hp->arch_name);

    ql_status st;
    if ((st = get_int(g, arch, "block_count", true, 0, &hp->n_layer, err)) ||
        (st = get_int(g, arch, "embedding_length", true, 0, &hp->n_embd, err)) ||
        (st = get_int(g, arch, "feed_forward_length", true, 0, &hp->n_ff, err)) ||
        (st = get_int(g, arch, "attention.head_count", true, 0, &hp->n_head, err)) ||
        (st =
             get_int(g, arch, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv, err)) ||
        (st = get_int(g, arch, "context_length", false, 0, &hp->n_ctx_train, err)) ||
        (st = get_float(g, arch, "attention.layer_norm_rms_epsilon", true, 0.0f, &hp->norm_eps,
                        err)) ||
        (st = get_float(g, arch, "rope.freq_base", false, DEFAULT_ROPE_FREQ_BASE,
                        &hp->rope_freq_base, err)))
        return st;
    /* When n_embd is not a multiple of n_head, key_length must say the head size; a
     * wrong default shows up as a shape error on attn_q. */
    int def_head = hp->n_embd / hp->n_head;
    if ((st = get_int(g, arch, "attention.key_length", false, def_head, &hp->head_dim, err)))
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
    if (hp->n_head % hp->n_head_kv != 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: head_count %d is not a multiple of head_count_kv %d", g->path,
                            hp->n_head, hp->n_head_kv);
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: rope.dimension_count %d must be even and at most the head "
                            "size %d",
                            g->path, hp->n_rot, hp->head_dim);
    if (!(hp->norm_eps > 0.0f) || !(hp->rope_freq_base > 0.0f))
        return ql_error_set(err, QL_EFORMAT,
                            "%s: layer_norm_rms_epsilon (%g) and rope.freq_base (%g) must be "
                            "positive",
                            g->path, (double)hp->norm_eps, (double)hp->rope_freq_base);

    /* RoPE scaling: none or linear; the Llama 3 frequency factors come as a tensor. */
    hp->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *scaling = ql_gguf_get_str(g, key, NULL);
    if (scaling && strcmp(scaling, "none") != 0) {
        if (strcmp(scaling, "linear") != 0)
            return ql_error_set(err, QL_EUNSUPPORTED,
                                "%s: %s = '%s' is not supported (qlab supports none, linear)",
                                g->path, key, scaling);
        float factor;
        if ((st = get_float(g, arch, "rope.scaling.factor", false, 1.0f, &factor, err)))
            return st;
        if (!(factor > 0.0f))
            return ql_error_set(err, QL_EFORMAT, "%s: %s.rope.scaling.factor %g must be > 0",
                                g->path, arch, (double)factor);
        hp->rope_freq_scale = 1.0f / factor;
    }
    /* As llama.cpp decides (llama_model_rope_type): llama rotates adjacent pairs, the
     * Qwen family rotates halves. */
    hp->rope_type = hp->arch == QL_ARCH_LLAMA ? QL_ROPE_NORM : QL_ROPE_NEOX;
    hp->has_qkv_bias = hp->arch == QL_ARCH_QWEN2;
    hp->has_qk_norm = hp->arch == QL_ARCH_QWEN3;
    return QL_OK;
}

ql_status ql_hparams_read(const ql_gguf *g, ql_hparams *hp, ql_error *err)
{
    ql_status st = read_keys(g, hp, err);
    if (st)
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
    hp->tied_output = ql_gguf_find_tensor(g, "output.weight") == NULL;
    return QL_OK;
}
