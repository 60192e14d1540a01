/* qlab fit: sizes, budgets and the memory envelope (see fit.h). */
#include "experiment/fit.h"

#include <ctype.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"

/* ---------------------------------------------------------------------------
 * Sizes */

typedef struct {
    const char *name;
    double factor;
} unit;

static const unit units[] = {
    {"B", 1.0},
    {"KiB", 1024.0},
    {"MiB", 1024.0 * 1024.0},
    {"GiB", 1024.0 * 1024.0 * 1024.0},
    {"TiB", 1024.0 * 1024.0 * 1024.0 * 1024.0},
    {"KB", 1e3},
    {"MB", 1e6},
    {"GB", 1e9},
    {"TB", 1e12},
};

/* 2^63: sizes must stay representable as int64 offsets elsewhere in qlab. */
#define SIZE_LIMIT 9223372036854775808.0

ql_status ql_fit_parse_size(const char *s, uint64_t *out, ql_error *err)
{
    if (!s || !*s)
        return ql_error_set(err, QL_EINVAL, "empty size");
    /* Split "4.5 GiB" into the number and the unit. */
    size_t i = 0, len = strlen(s);
    while (i < len &&
           (isdigit((unsigned char)s[i]) || s[i] == '.' || s[i] == 'e' || s[i] == 'E' ||
            ((s[i] == '+' || s[i] == '-') && i > 0 && (s[i - 1] == 'e' || s[i - 1] == 'E'))))
        i++;
    /* "e" may also start no unit we know, but "1e" would be caught by the parser. */
    char num[64];
    if (i == 0 || i >= sizeof num)
        return ql_error_set(err, QL_EINVAL,
                            "size '%s': expected a number with an optional unit "
                            "(B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
                            s);
    memcpy(num, s, i);
    num[i] = '\0';
    double v;
    if (!ql_parse_double(num, &v) || v < 0)
        return ql_error_set(err, QL_EINVAL, "size '%s': '%s' is not a non-negative number", s, num);
    const char *u = s + i;
    while (*u == ' ')
        u++;
    double factor = 1.0;
    if (*u) {
        bool found = false;
        for (size_t k = 0; k < sizeof units / sizeof units[0]; k++)
            if (strcasecmp(u, units[k].name) == 0) {
                factor = units[k].factor;
                found = true;
                break;
            }
        if (!found)
            return ql_error_set(err, QL_EINVAL,
                                "size '%s': unknown unit '%s' (use B, KiB, MiB, GiB, TiB for "
                                "powers of 1024 or KB, MB, GB, TB for powers of 1000)",
                                s, u);
    }
    double bytes = floor(v * factor);
    if (!(bytes < SIZE_LIMIT))
        return ql_error_set(err, QL_EINVAL, "size '%s' is too large", s);
    *out = (uint64_t)bytes;
    return QL_OK;
}

void ql_fit_format_size(uint64_t bytes, char *out, size_t size)
{
    const double b = (double)bytes;
    if (bytes >= (uint64_t)1 << 30)
        snprintf(out, size, "%.2f GiB (%llu B)", b / 1073741824.0, (unsigned long long)bytes);
    else if (bytes >= (uint64_t)1 << 20)
        snprintf(out, size, "%.2f MiB (%llu B)", b / 1048576.0, (unsigned long long)bytes);
    else if (bytes >= (uint64_t)1 << 10)
        snprintf(out, size, "%.2f KiB (%llu B)", b / 1024.0, (unsigned long long)bytes);
    else
        snprintf(out, size, "%llu B", (unsigned long long)bytes);
}

ql_status ql_fit_parse_budget(const char *s, ql_fit_budget *out, ql_error *err)
{
    memset(out, 0, sizeof *out);
    if (s && strncasecmp(s, "bpw:", 4) == 0) {
        double v;
        if (!ql_parse_double(s + 4, &v) || !(v > 0) || v > 64)
            return ql_error_set(err, QL_EINVAL,
                                "budget '%s': bits per weight must be a number in (0, 64]", s);
        out->kind = QL_FIT_BUDGET_BPW;
        out->bpw = v;
        return QL_OK;
    }
    ql_status st = ql_fit_parse_size(s, &out->bytes, err);
    if (st != QL_OK)
        return ql_error_prefix(err, "budget: ");
    out->kind = QL_FIT_BUDGET_BYTES;
    return QL_OK;
}

/* Whether imp has an entry for a tensor of the plan. */
static bool covered(const void *ctx, int64_t i, const ql_quant_plan_entry *e)
{
    (void)i;
    const ql_fit_importance *imp = ctx;
    int64_t n;
    return imp && imp->lookup(imp->user, e->name, &n) != NULL;
}

ql_status ql_fit_budget_of(const ql_gguf *model, const ql_config *weights,
                           const ql_fit_importance *imp, uint64_t *bytes, ql_error *err)
{
    const bool has_imatrix = imp && imp->sha256 && *imp->sha256;
    ql_quant_config qc = ql_config_quant_request(weights, NULL, has_imatrix);
    ql_quant_plan *plan;
    ql_status st = ql_quant_plan_build(model, &qc, &plan, err);
    if (st != QL_OK)
        return st;
    st = ql_quant_plan_check_importance(plan, covered, has_imatrix ? imp : NULL, NULL, err);
    *bytes = plan->bytes;
    ql_quant_plan_free(plan);
    return st;
}

/* ---------------------------------------------------------------------------
 * Hyper-parameters and the envelope */

static bool get_i64_key(const ql_gguf *g, const char *arch, const char *suffix, int64_t *out,
                        ql_error *err)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return ql_gguf_get_i64(g, key, out, err);
}

/* The keys every model has: layers, embedding width and heads, positive and
 * plausible. */
static ql_status read_required(const ql_gguf *g, const char *arch, ql_fit_hparams *hp,
                               ql_error *err)
{
    static const char *const required[] = {"block_count", "embedding_length",
                                           "attention.head_count"};
    int64_t *dst[] = {&hp->n_layer, &hp->n_embd, &hp->n_head};
    for (int k = 0; k < 3; k++) {
        if (!get_i64_key(g, arch, required[k], dst[k], err) || *dst[k] <= 0) {
            if (err && err->status != QL_OK)
                return err->status;
            return ql_error_set(err, QL_EFORMAT, "%s: key '%s.%s' missing or not positive", g->path,
                                arch, required[k]);
        }
    }
    if (hp->n_layer > 100000 || hp->n_embd > ((int64_t)1 << 24) || hp->n_head > 65536)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: implausible hyper-parameters (%lld layers, %lld embedding, %lld "
                            "heads)",
                            g->path, (long long)hp->n_layer, (long long)hp->n_embd,
                            (long long)hp->n_head);
    return QL_OK;
}

/* Element l of an integer array; false for another element type. */
static bool array_int(const ql_gguf_array *a, uint64_t l, int64_t *out)
{
    switch (a->elem_type) {
    case QL_GGUF_UINT32:
        *out = ((const uint32_t *)a->data)[l];
        return true;
    case QL_GGUF_INT32:
        *out = ((const int32_t *)a->data)[l];
        return true;
    case QL_GGUF_UINT64:
        *out = (int64_t)((const uint64_t *)a->data)[l];
        return true;
    case QL_GGUF_INT64:
        *out = ((const int64_t *)a->data)[l];
        return true;
    default:
        return false;
    }
}

/* The KV heads summed over layers: the key is a scalar, a per-layer array, or
 * absent (= the head count). */
static ql_status read_kv_heads(const ql_gguf *g, const char *arch, ql_fit_hparams *hp,
                               ql_error *err)
{
    char key[160];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    const ql_gguf_kv *kv = ql_gguf_find_kv(g, key);
    if (!kv) {
        hp->kv_heads_sum = hp->n_head * hp->n_layer;
        return QL_OK;
    }
    if (kv->value.type != QL_GGUF_ARRAY) {
        int64_t h;
        if (!ql_gguf_get_i64(g, key, &h, err) || h < 0 || h > 65536)
            return ql_error_set(err, QL_EFORMAT, "%s: key '%s' is not a head count", g->path, key);
        hp->kv_heads_sum = h * hp->n_layer;
        return QL_OK;
    }
    const ql_gguf_array *a = &kv->value.v.arr;
    if (a->n != (uint64_t)hp->n_layer)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: key '%s' has %llu entries, expected %lld (one per layer)", g->path,
                            key, (unsigned long long)a->n, (long long)hp->n_layer);
    for (uint64_t l = 0; l < a->n; l++) {
        int64_t h;
        if (!array_int(a, l, &h))
            return ql_error_set(err, QL_EFORMAT, "%s: key '%s': array of %s, expected integers",
                                g->path, key, ql_gguf_vtype_name(a->elem_type));
        if (h < 0 || h > 65536)
            return ql_error_set(err, QL_EFORMAT, "%s: key '%s'[%llu] = %lld out of range", g->path,
                                key, (unsigned long long)l, (long long)h);
        hp->kv_heads_sum += h;
    }
    return QL_OK;
}

ql_status ql_fit_hparams_read(const ql_gguf *g, ql_fit_hparams *hp, ql_error *err)
{
    memset(hp, 0, sizeof *hp);
    ql_error_clear(err);
    const char *arch = ql_gguf_get_str(g, "general.architecture", err);
    if (!arch)
        return ql_error_set(err, QL_EFORMAT, "%s: no general.architecture key", g->path);
    ql_strlcpy(hp->arch, arch, sizeof hp->arch);
    ql_status st = read_required(g, arch, hp, err);
    if (st != QL_OK)
        return st;
    get_i64_key(g, arch, "context_length", &hp->n_ctx_train, NULL);
    get_i64_key(g, arch, "feed_forward_length", &hp->n_ff, NULL);
    if ((st = read_kv_heads(g, arch, hp, err)) != QL_OK)
        return st;
    hp->head_dim_k = hp->head_dim_v = hp->n_embd / hp->n_head;
    get_i64_key(g, arch, "attention.key_length", &hp->head_dim_k, NULL);
    get_i64_key(g, arch, "attention.value_length", &hp->head_dim_v, NULL);
    /* Vocabulary: the token list, else the embedding's row count. */
    const ql_gguf_kv *tok = ql_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (tok && tok->value.type == QL_GGUF_ARRAY)
        hp->n_vocab = (int64_t)tok->value.v.arr.n;
    if (hp->n_vocab == 0) {
        const ql_gguf_tensor *e = ql_gguf_find_tensor(g, "token_embd.weight");
        if (e && e->n_dims >= 2)
            hp->n_vocab = e->ne[1];
    }
    ql_error_clear(err);
    return QL_OK;
}

uint64_t ql_fit_kv_bytes(const ql_fit_hparams *hp, int64_t ctx)
{
    if (ctx <= 0)
        return 0;
    return (uint64_t)ctx * (uint64_t)hp->kv_heads_sum *
           (uint64_t)(hp->head_dim_k + hp->head_dim_v) * 2u;
}

/* Tokens per micro-batch of llama.cpp's default (-ub 512). */
#define RESERVE_UBATCH 512

uint64_t ql_fit_reserve_estimate(const ql_fit_hparams *hp, int64_t ctx)
{
    uint64_t per_token = (uint64_t)hp->n_vocab + 4u * (uint64_t)hp->n_embd +
                         3u * (uint64_t)hp->n_ff + (uint64_t)hp->n_head * (uint64_t)ctx;
    return 4u * RESERVE_UBATCH * per_token;
}

ql_status ql_fit_envelope_budget(uint64_t envelope, uint64_t kv, uint64_t reserve, uint64_t *budget,
                                 ql_error *err)
{
    if (kv >= envelope || reserve >= envelope - kv) {
        char e[64], k[64], r[64];
        ql_fit_format_size(envelope, e, sizeof e);
        ql_fit_format_size(kv, k, sizeof k);
        ql_fit_format_size(reserve, r, sizeof r);
        return ql_error_set(err, QL_EINVAL,
                            "memory envelope %s leaves nothing for the model after the KV "
                            "cache %s and the compute reserve %s",
                            e, k, r);
    }
    *budget = envelope - kv - reserve;
    return QL_OK;
}
