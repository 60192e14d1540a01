/* The type policy: pure plans, llama-quantize's mixes, overrides. See quant_policy.h. */
#include "model/quant_policy.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/regex.h"
#include "base/unicode.h"
#include "base/util.h"
#include "formats/quant_int8row.h"
#include "formats/types.h"
#include "model/hparams.h"
#include "model/tensor_name.h"

/* ========================================================================= */
/* llama-quantize's file types                                                */
/* ========================================================================= */

/* llama_model_quantize_impl's default types (b4747) and the file types
 * llama-quantize's main refuses without an importance matrix. */
#define MIX(ft, def, alias_name, imatrix)                                                          \
    [QL_FTYPE_##ft] = {.name = #ft,                                                                \
                       .alias = alias_name,                                                        \
                       .ftype = QL_FTYPE_##ft,                                                     \
                       .default_type = QL_TYPE_##def,                                              \
                       .needs_imatrix = imatrix}

static const ql_quant_mix mixes[QL_FTYPE_LIMIT] = {
    /*  file type  default   alias   needs an imatrix */
    [QL_FTYPE_ALL_F32] = {.name = "F32", .ftype = QL_FTYPE_ALL_F32, .default_type = QL_TYPE_F32},
    MIX(F16, F16, NULL, false),
    MIX(Q4_0, Q4_0, NULL, false),
    MIX(Q4_1, Q4_1, NULL, false),
    MIX(Q8_0, Q8_0, NULL, false),
    MIX(Q5_0, Q5_0, NULL, false),
    MIX(Q5_1, Q5_1, NULL, false),
    MIX(Q2_K, Q2_K, NULL, false),
    MIX(Q3_K_S, Q3_K, NULL, false),
    MIX(Q3_K_M, Q3_K, "Q3_K", false),
    MIX(Q3_K_L, Q3_K, NULL, false),
    MIX(Q4_K_S, Q4_K, NULL, false),
    MIX(Q4_K_M, Q4_K, "Q4_K", false),
    MIX(Q5_K_S, Q5_K, NULL, false),
    MIX(Q5_K_M, Q5_K, "Q5_K", false),
    MIX(Q6_K, Q6_K, NULL, false),
    MIX(IQ2_XXS, IQ2_XXS, NULL, true),
    MIX(IQ2_XS, IQ2_XS, NULL, true),
    MIX(Q2_K_S, Q2_K, NULL, true),
    MIX(IQ3_XS, IQ3_S, NULL, false),
    MIX(IQ3_XXS, IQ3_XXS, NULL, false),
    MIX(IQ1_S, IQ1_S, NULL, true),
    MIX(IQ4_NL, IQ4_NL, NULL, false),
    MIX(IQ3_S, IQ3_S, NULL, false),
    MIX(IQ3_M, IQ3_S, NULL, false),
    MIX(IQ2_S, IQ2_XS, NULL, true),
    MIX(IQ2_M, IQ2_S, NULL, false),
    MIX(IQ4_XS, IQ4_XS, NULL, false),
    MIX(IQ1_M, IQ1_M, NULL, true),
    MIX(BF16, BF16, NULL, false),
    MIX(TQ1_0, TQ1_0, NULL, false),
    MIX(TQ2_0, TQ2_0, NULL, false),
};

const ql_quant_mix *ql_quant_mix_by_ftype(int32_t ftype)
{
    if (ftype < 0 || ftype >= QL_FTYPE_LIMIT || !mixes[ftype].name)
        return NULL;
    return &mixes[ftype];
}

const ql_quant_mix *ql_quant_mix_by_name(const char *name)
{
    if (!name || !*name)
        return NULL;
    for (int i = 0; i < QL_FTYPE_LIMIT; i++) {
        const ql_quant_mix *m = &mixes[i];
        if (m->name &&
            (strcasecmp(m->name, name) == 0 || (m->alias && strcasecmp(m->alias, name) == 0)))
            return m;
    }
    int v;
    return ql_parse_int(name, &v) ? ql_quant_mix_by_ftype(v) : NULL;
}

int ql_quant_mix_list(const ql_quant_mix **out, int max)
{
    int n = 0;
    for (int i = 0; i < QL_FTYPE_LIMIT && n < max; i++)
        if (mixes[i].name)
            out[n++] = &mixes[i];
    return n;
}

/* ========================================================================= */
/* Overrides                                                                  */
/* ========================================================================= */

typedef struct {
    char *text; /* the rule as given */
    ql_regex *re;
    int32_t type;
} override_rule;

struct ql_quant_overrides {
    int n;
    override_rule *rules;
};

void ql_quant_overrides_free(ql_quant_overrides *o)
{
    if (!o)
        return;
    for (int i = 0; i < o->n; i++) {
        free(o->rules[i].text);
        ql_regex_free(o->rules[i].re);
    }
    free(o->rules);
    free(o);
}

static ql_status parse_rule(const char *text, override_rule *r, ql_error *err)
{
    const char *eq = strchr(text, '=');
    if (!eq)
        return ql_error_set(err, QL_EINVAL, "--tensor-type '%s': expected REGEX=TYPE", text);
    if (eq == text)
        return ql_error_set(err, QL_EINVAL, "--tensor-type '%s': the tensor pattern is empty",
                            text);
    if (!eq[1])
        return ql_error_set(err, QL_EINVAL, "--tensor-type '%s': the type is missing", text);
    const ql_type_traits *t = ql_type_by_name(eq + 1);
    if (!t)
        return ql_error_set(err, QL_EINVAL, "--tensor-type '%s': unknown type '%s'", text, eq + 1);
    if (!ql_type_is_weight(t))
        return ql_error_set(err, QL_EINVAL, "--tensor-type '%s': %s is %s", text, t->name,
                            t->not_weight);
    r->type = t->type;
    if (!(r->text = ql_strdup(text)))
        return ql_error_set(err, QL_ENOMEM, "--tensor-type: out of memory");
    /* llama-quantize lowercases the pattern (tensor names are lowercase). */
    char *pattern = ql_strdup(text);
    if (!pattern)
        return ql_error_set(err, QL_ENOMEM, "--tensor-type: out of memory");
    pattern[eq - text] = '\0';
    for (char *p = pattern; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    ql_status st = ql_regex_compile(&r->re, pattern, QL_REGEX_ALLOW_EMPTY, err);
    free(pattern);
    if (st)
        ql_error_prefix(err, "--tensor-type '%s': ", text);
    return st;
}

ql_status ql_quant_overrides_parse(const char *const *rules, int n, ql_quant_overrides **out,
                                   ql_error *err)
{
    *out = NULL;
    ql_quant_overrides *o = calloc(1, sizeof *o);
    if (!o || !(o->rules = calloc(n > 0 ? (size_t)n : 1, sizeof *o->rules))) {
        free(o);
        return ql_error_set(err, QL_ENOMEM, "--tensor-type: out of memory");
    }
    for (int i = 0; i < n; i++) {
        o->n++;
        ql_status st = parse_rule(rules[i], &o->rules[i], err);
        if (st) {
            ql_quant_overrides_free(o);
            return st;
        }
    }
    *out = o;
    return QL_OK;
}

int ql_quant_overrides_count(const ql_quant_overrides *o)
{
    return o ? o->n : 0;
}

const char *ql_quant_overrides_rule(const ql_quant_overrides *o, int i)
{
    QL_ASSERT(o && i >= 0 && i < o->n);
    return o->rules[i].text;
}

int32_t ql_quant_overrides_type(const ql_quant_overrides *o, int i)
{
    QL_ASSERT(o && i >= 0 && i < o->n);
    return o->rules[i].type;
}

ql_status ql_quant_overrides_match(const ql_quant_overrides *o, const char *name, int *rule,
                                   ql_error *err)
{
    *rule = -1;
    if (!o || o->n == 0)
        return QL_OK;
    /* The name as code points (base/regex.h matches symbol arrays). */
    const size_t len = strlen(name);
    uint32_t *sym = malloc((len + 1) * sizeof *sym);
    ql_regex_matcher *m = ql_regex_matcher_alloc();
    ql_status st = QL_OK;
    if (!sym || !m) {
        st = ql_error_set(err, QL_ENOMEM, "--tensor-type: out of memory");
        goto out;
    }
    size_t n_sym = 0;
    for (size_t pos = 0; pos < len;)
        sym[n_sym++] = ql_utf8_decode(name, len, &pos);
    for (int i = 0; i < o->n && *rule < 0; i++) {
        bool found = false;
        size_t ms, me;
        if ((st = ql_regex_search(o->rules[i].re, m, sym, 0, n_sym, 0, &found, &ms, &me, err)))
            goto out;
        if (found)
            *rule = i;
    }
out:
    ql_regex_matcher_free(m);
    free(sym);
    return st;
}

/* ========================================================================= */
/* Shapes and roles                                                           */
/* ========================================================================= */

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* llama-quantize's list of tensors it never quantizes (besides 1-D ones). */
static bool never_quantized(const char *name)
{
    static const char *const contains[] = {
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ssm_conv1d.weight",
        "time_mix_first.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
    };
    if (!ends_with(name, "weight"))
        return true;
    for (size_t i = 0; i < sizeof contains / sizeof contains[0]; i++)
        if (strstr(name, contains[i]))
            return true;
    return strcmp(name, "position_embd.weight") == 0 || strcmp(name, "token_types.weight") == 0;
}

bool ql_quant_is_float_type(int32_t t)
{
    return t == QL_TYPE_F32 || t == QL_TYPE_F16 || t == QL_TYPE_BF16;
}

/* Values a planned tensor may have: at most 4 bytes per value in any type it can
 * take (F32; INT8_ROW is 1 + 2 / n_per_row), so its row and byte counts fit in 64
 * bits. */
#define MAX_TENSOR_VALUES (INT64_MAX / 4)

static uint64_t tensor_bytes(int32_t type, int64_t n_per_row, int64_t nrows)
{
    return (uint64_t)ql_row_size(type, n_per_row) * (uint64_t)nrows;
}

static const char HEAD_NAME[] = "output.weight";
static const char EMBD_NAME[] = "token_embd.weight";

/* Fills the name and shape of out, checked. */
static ql_status set_shape(ql_quant_plan_entry *out, const char *name, uint32_t n_dims,
                           const int64_t *ne, ql_error *err)
{
    memset(out, 0, sizeof *out);
    ql_strlcpy(out->name, name, sizeof out->name);
    if (n_dims < 1 || n_dims > QL_GGUF_MAX_DIMS)
        return ql_error_set(err, QL_EINVAL, "tensor '%s': %u dimensions (expected 1..%d)", name,
                            n_dims, QL_GGUF_MAX_DIMS);
    out->n_dims = n_dims;
    out->nrows = 1;
    for (int d = 0; d < QL_GGUF_MAX_DIMS; d++) {
        out->ne[d] = d < (int)n_dims ? ne[d] : 1;
        if (out->ne[d] <= 0)
            return ql_error_set(err, QL_EINVAL, "tensor '%s': dimension %d is %lld", name, d,
                                (long long)out->ne[d]);
        if (d > 0) {
            if (out->nrows > INT64_MAX / out->ne[d])
                return ql_error_set(err, QL_EINVAL, "tensor '%s': too many elements", name);
            out->nrows *= out->ne[d];
        }
    }
    out->n_per_row = out->ne[0];
    if (out->nrows > MAX_TENSOR_VALUES / out->n_per_row)
        return ql_error_set(err, QL_EINVAL,
                            "tensor '%s': %lld x %lld values, more than the %lld qlab can size "
                            "in 64 bits",
                            name, (long long)out->n_per_row, (long long)out->nrows,
                            (long long)MAX_TENSOR_VALUES);
    return QL_OK;
}

bool ql_quant_is_router(const char *name)
{
    return strstr(name, "ffn_gate_inp") != NULL;
}

static bool is_router(const char *name)
{
    return ql_quant_is_router(name);
}

/* The role of a tensor; KEEP and VECTOR tensors get their type here. */
static ql_status set_role(ql_quant_plan_entry *e, const ql_quant_config *cfg, int32_t src_type,
                          ql_error *err)
{
    const bool is_head = strcmp(e->name, HEAD_NAME) == 0;
    int rule = -1;
    if (e->n_dims > 1 && is_router(e->name)) {
        ql_status st = ql_quant_overrides_match(cfg->overrides, e->name, &rule, err);
        if (st)
            return st;
    }
    if (rule >= 0) {
        e->role = QL_ROLE_WEIGHT; /* a router a rule names: its type is the rule's */
    } else if (e->n_dims == 1) {
        e->role = QL_ROLE_VECTOR;
        e->requested = QL_TYPE_F32;
        snprintf(e->choice, sizeof e->choice, "1-D tensor: F32");
    } else if (never_quantized(e->name) || (is_head && cfg->leave_output)) {
        e->role = QL_ROLE_KEEP;
        e->requested = ql_quant_is_float_type(src_type) ? src_type : QL_TYPE_F32;
        snprintf(e->choice, sizeof e->choice, "%s: kept in %s",
                 is_head ? "--leave-output-tensor" : "llama.cpp does not quantize it",
                 ql_type_name(e->requested));
    } else if (is_head) {
        e->role = QL_ROLE_HEAD;
    } else if (strcmp(e->name, EMBD_NAME) == 0) {
        e->role = QL_ROLE_EMBD;
    } else {
        e->role = QL_ROLE_WEIGHT;
    }
    return QL_OK;
}

/* Whether the role's type is decided by the config (not kept or 1-D). */
static bool is_assigned(const ql_quant_plan_entry *e)
{
    return e->role == QL_ROLE_WEIGHT || e->role == QL_ROLE_HEAD || e->role == QL_ROLE_EMBD;
}

/* ========================================================================= */
/* Requests                                                                   */
/* ========================================================================= */

/* Sets the requested type and its reason: "<fmt>: TYPE". */
static void ask(ql_quant_plan_entry *e, int32_t type, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void ask(ql_quant_plan_entry *e, int32_t type, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(e->choice, sizeof e->choice, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof e->choice)
        snprintf(e->choice + n, sizeof e->choice - (size_t)n, ": %s", ql_type_name(type));
    e->requested = type;
}

/* head_type / embd_type, which win over overrides and rules. Returns true when one
 * applied. The tied head (token_embd without output.weight) takes embd_type, else
 * head_type. */
static bool ask_head_embd(ql_quant_plan_entry *e, const ql_quant_config *cfg, bool has_output,
                          const char *head_what, const char *embd_what)
{
    if (e->role == QL_ROLE_HEAD && cfg->head_type != QL_TYPE_INVALID) {
        ask(e, cfg->head_type, "%s", head_what);
        return true;
    }
    if (e->role != QL_ROLE_EMBD)
        return false;
    if (cfg->embd_type != QL_TYPE_INVALID) {
        ask(e, cfg->embd_type, "%s", embd_what);
        return true;
    }
    if (!has_output && cfg->head_type != QL_TYPE_INVALID) {
        ask(e, cfg->head_type, "tied embeddings (no output.weight): %s", head_what);
        return true;
    }
    return false;
}

/* The first --tensor-type rule matching the tensor, applied. */
static ql_status ask_override(ql_quant_plan_entry *e, const ql_quant_config *cfg, bool *applied,
                              ql_error *err)
{
    int rule;
    *applied = false;
    ql_status st = ql_quant_overrides_match(cfg->overrides, e->name, &rule, err);
    if (st || rule < 0)
        return st;
    ask(e, ql_quant_overrides_type(cfg->overrides, rule), "--tensor-type '%s'",
        ql_quant_overrides_rule(cfg->overrides, rule));
    *applied = true;
    return QL_OK;
}

/* A pure plan's request: head_type / embd_type, an override, else the weight type. */
static ql_status ask_pure(ql_quant_plan_entry *e, const ql_quant_config *cfg, int32_t weight_type,
                          bool has_output, ql_error *err)
{
    const bool mix = cfg->mix != NULL; /* llama-quantize's options, else qlab's config */
    if (ask_head_embd(e, cfg, has_output, mix ? "--output-tensor-type" : "the head type",
                      mix ? "--token-embedding-type" : "the embedding type"))
        return QL_OK;
    bool applied;
    ql_status st = ask_override(e, cfg, &applied, err);
    if (!st && !applied) {
        if (mix)
            ask(e, weight_type, "%s%s: its default type", cfg->pure ? "--pure " : "",
                cfg->mix->name);
        else
            ask(e, weight_type, "the weight type");
    }
    return st;
}

/* ------------------------------------------------------------------------- */
/* llama-quantize's rules (llama_tensor_get_type, b4747)                      */

/* What the rules read of the model. */
typedef struct {
    ql_ftype ftype;
    int32_t default_type;
    bool has_imatrix;
    bool has_output;
    int n_layer;  /* n_ffn_down = n_ffn_gate = n_ffn_up in llama.cpp */
    int n_gqa;    /* n_head / n_head_kv of layer 0 */
    int n_expert; /* 0 for dense models */
    bool is_70b;  /* llama.cpp's model type LLM_TYPE_70B: attn_v gets more bits */
    int n_attention_wv;
} mix_model;

/* The tensor's place among those the rules have seen: llama-quantize counts the
 * attn_v, ffn_down, ffn_gate and ffn_up tensors it decides, in the order of its
 * weight map (by layer, then name). */
typedef struct {
    int i_attention_wv, i_ffn_down, i_ffn_gate, i_ffn_up;
} mix_pos;

static bool has(const char *name, const char *part)
{
    return strstr(name, part) != NULL;
}

static bool ftype_in(ql_ftype f, const ql_ftype *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (set[i] == f)
            return true;
    return false;
}
#define FTYPE_IN(f, ...)                                                                           \
    ftype_in((f), (const ql_ftype[]){__VA_ARGS__},                                                 \
             sizeof((const ql_ftype[]){__VA_ARGS__}) / sizeof(ql_ftype))

/* llama.cpp's heuristic for the layers that get more bits: the first and last
 * eighth and every third layer in between. */
static bool use_more_bits(int i_layer, int n_layers)
{
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 ||
           (i_layer - n_layers / 8) % 3 == 2;
}

/* The layer number of "blk.N...." (llama.cpp reads it with sscanf("blk.%d.")), or -1. */
static int name_layer(const char *name)
{
    return ql_tensor_block(name, NULL);
}

/* The layer of an ffn tensor as llama.cpp's layer_info has it: its counter for a
 * dense model, the number in its name when the experts of a layer are separate
 * tensors (n_expert > 1). */
static ql_status ffn_layer(const mix_model *mm, const char *name, int counter, int *i_layer,
                           ql_error *err)
{
    *i_layer = counter;
    if (mm->n_expert <= 1)
        return QL_OK;
    *i_layer = name_layer(name);
    if (*i_layer < 0 || *i_layer >= mm->n_layer)
        return ql_error_set(err, QL_EINVAL,
                            "tensor '%s': no layer in [0, %d) in its name (an expert model's "
                            "ffn tensors need one)",
                            name, mm->n_layer);
    return QL_OK;
}

/* A rule's answer: the type, and the rule that gave it (NULL: the default type),
 * which may point into buf. */
typedef struct {
    int32_t type;
    const char *why;
    char buf[128];
} mix_choice;

static void choose(mix_choice *c, int32_t type, const char *why)
{
    c->type = type;
    c->why = why;
}

/* The head (or the tied embeddings that serve as head). */
static void rule_head(mix_choice *c, const ql_quant_plan_entry *e, ql_ftype f)
{
    const int64_t blk = ql_type_get(c->type)->block_size;
    if (e->n_per_row % blk != 0) {
        snprintf(c->buf, sizeof c->buf, "head, rows of %lld not a multiple of %lld",
                 (long long)e->n_per_row, (long long)blk);
        choose(c, QL_TYPE_Q8_0, c->buf);
    } else if (FTYPE_IN(f, QL_FTYPE_IQ2_XXS, QL_FTYPE_IQ2_XS, QL_FTYPE_IQ3_XXS, QL_FTYPE_IQ1_S,
                        QL_FTYPE_IQ2_S, QL_FTYPE_IQ2_M, QL_FTYPE_IQ1_M)) {
        choose(c, QL_TYPE_Q5_K, "head of a very-low-bit IQ mix");
    } else if (c->type != QL_TYPE_Q8_0) {
        choose(c, QL_TYPE_Q6_K, "head");
    }
}

static void rule_embd(mix_choice *c, ql_ftype f)
{
    if (FTYPE_IN(f, QL_FTYPE_IQ2_XXS, QL_FTYPE_IQ2_XS, QL_FTYPE_IQ1_S, QL_FTYPE_IQ1_M))
        choose(c, QL_TYPE_Q2_K, "token embeddings of a very-low-bit mix");
    else if (FTYPE_IN(f, QL_FTYPE_IQ2_S, QL_FTYPE_IQ2_M, QL_FTYPE_IQ3_XXS))
        choose(c, QL_TYPE_IQ3_S, "token embeddings of an IQ2_S/IQ2_M/IQ3_XXS mix");
    else if (FTYPE_IN(f, QL_FTYPE_TQ1_0, QL_FTYPE_TQ2_0))
        choose(c, QL_TYPE_Q4_K, "token embeddings of a ternary mix");
}

static bool very_low_bit_iq(ql_ftype f)
{
    return FTYPE_IN(f, QL_FTYPE_IQ2_XXS, QL_FTYPE_IQ2_XS, QL_FTYPE_IQ1_S, QL_FTYPE_IQ2_S,
                    QL_FTYPE_IQ2_M, QL_FTYPE_IQ1_M);
}

/* The very-low-bit IQ mixes have their own short list. */
static void rule_very_low_bit(mix_choice *c, const char *n, const mix_model *mm, const mix_pos *pos)
{
    const ql_ftype f = mm->ftype;
    const bool iq2_sm = FTYPE_IN(f, QL_FTYPE_IQ2_S, QL_FTYPE_IQ2_M);
    if (has(n, "attn_v.weight")) {
        if (mm->n_gqa >= 4 || mm->n_expert >= 4) {
            snprintf(c->buf, sizeof c->buf, "attn_v with GQA %d, %d experts (>= 4)", mm->n_gqa,
                     mm->n_expert);
            choose(c, QL_TYPE_Q4_K, c->buf);
        } else {
            choose(c, iq2_sm ? QL_TYPE_IQ3_S : QL_TYPE_Q2_K, "attn_v, GQA and experts < 4");
        }
    } else if (mm->n_expert == 8 && has(n, "attn_k.weight")) {
        choose(c, QL_TYPE_Q4_K, "attn_k of an 8-expert model");
    } else if (has(n, "ffn_down")) {
        if (pos->i_ffn_down < mm->n_layer / 8) {
            snprintf(c->buf, sizeof c->buf, "ffn_down %d, in the first eighth of %d layers",
                     pos->i_ffn_down, mm->n_layer);
            choose(c, iq2_sm ? QL_TYPE_IQ3_S : QL_TYPE_Q2_K, c->buf);
        }
    } else if (has(n, "attn_output.weight")) {
        if (mm->n_expert == 8)
            choose(c, QL_TYPE_Q5_K, "attn_output of an 8-expert model");
        else if (FTYPE_IN(f, QL_FTYPE_IQ1_S, QL_FTYPE_IQ1_M))
            choose(c, QL_TYPE_IQ2_XXS, "attn_output of an IQ1 mix");
        else if (iq2_sm)
            choose(c, QL_TYPE_IQ3_S, "attn_output of an IQ2_S/IQ2_M mix");
    }
}

static void rule_attn_v(mix_choice *c, const mix_model *mm, const mix_pos *pos)
{
    const ql_ftype f = mm->ftype;
    const int i = pos->i_attention_wv, n_wv = mm->n_attention_wv;
    if (f == QL_FTYPE_Q2_K) {
        snprintf(c->buf, sizeof c->buf, "attn_v with GQA %d (%s 4)", mm->n_gqa,
                 mm->n_gqa >= 4 ? ">=" : "<");
        choose(c, mm->n_gqa >= 4 ? QL_TYPE_Q4_K : QL_TYPE_Q3_K, c->buf);
    } else if (f == QL_FTYPE_Q2_K_S && mm->n_gqa >= 4) {
        choose(c, QL_TYPE_Q4_K, "attn_v with GQA >= 4");
    } else if (f == QL_FTYPE_IQ3_XXS) {
        choose(c,
               mm->n_gqa >= 4     ? QL_TYPE_Q4_K
               : !mm->has_imatrix ? QL_TYPE_IQ3_S
                                  : QL_TYPE_IQ3_XXS,
               mm->n_gqa >= 4     ? "attn_v with GQA >= 4"
               : !mm->has_imatrix ? "attn_v without an imatrix"
                                  : "attn_v with an imatrix");
    } else if (FTYPE_IN(f, QL_FTYPE_IQ3_XS, QL_FTYPE_IQ3_S) && mm->n_gqa >= 4) {
        choose(c, QL_TYPE_Q4_K, "attn_v with GQA >= 4");
    } else if (f == QL_FTYPE_IQ3_M) {
        choose(c, QL_TYPE_Q4_K, "attn_v");
    } else if (f == QL_FTYPE_Q3_K_M) {
        snprintf(c->buf, sizeof c->buf, "attn_v %d (%s 2)", i, i < 2 ? "<" : ">=");
        choose(c, i < 2 ? QL_TYPE_Q5_K : QL_TYPE_Q4_K, c->buf);
    } else if (f == QL_FTYPE_Q3_K_L) {
        choose(c, QL_TYPE_Q5_K, "attn_v");
    } else if (FTYPE_IN(f, QL_FTYPE_IQ4_NL, QL_FTYPE_IQ4_XS) && mm->n_gqa >= 4) {
        choose(c, QL_TYPE_Q5_K, "attn_v with GQA >= 4");
    } else if (FTYPE_IN(f, QL_FTYPE_Q4_K_M, QL_FTYPE_Q5_K_M) && use_more_bits(i, n_wv)) {
        snprintf(c->buf, sizeof c->buf, "attn_v %d of %d, a layer with more bits", i, n_wv);
        choose(c, QL_TYPE_Q6_K, c->buf);
    } else if (f == QL_FTYPE_Q4_K_S && i < 4) {
        snprintf(c->buf, sizeof c->buf, "attn_v %d (< 4)", i);
        choose(c, QL_TYPE_Q5_K, c->buf);
    }
    if (mm->is_70b && (c->type == QL_TYPE_Q3_K || c->type == QL_TYPE_Q4_K))
        choose(c, QL_TYPE_Q5_K, "attn_v of a 70B model (8 heads share attn_v)");
    if (mm->n_expert == 8)
        choose(c, QL_TYPE_Q8_0, "attn_v of an 8-expert model");
}

static void rule_attn_k(mix_choice *c, const mix_model *mm)
{
    if (mm->n_expert == 8)
        choose(c, QL_TYPE_Q8_0, "attn_k of an 8-expert model");
    else if (mm->ftype == QL_FTYPE_IQ3_XS)
        choose(c, QL_TYPE_IQ3_XXS, "attn_k");
    else if (mm->ftype == QL_FTYPE_IQ3_XXS)
        choose(c, QL_TYPE_IQ2_S, "attn_k");
}

static void rule_attn_q(mix_choice *c, ql_ftype f)
{
    if (f == QL_FTYPE_IQ3_XS)
        choose(c, QL_TYPE_IQ3_XXS, "attn_q");
    else if (f == QL_FTYPE_IQ3_XXS)
        choose(c, QL_TYPE_IQ2_S, "attn_q");
}

static ql_status rule_ffn_down(mix_choice *c, const char *n, const mix_model *mm,
                               const mix_pos *pos, ql_error *err)
{
    const ql_ftype f = mm->ftype;
    int i;
    ql_status st = ffn_layer(mm, n, pos->i_ffn_down, &i, err);
    if (st)
        return st;
    const int nl = mm->n_layer;
    snprintf(c->buf, sizeof c->buf, "ffn_down of layer %d of %d", i, nl);
    if (f == QL_FTYPE_Q2_K) {
        choose(c, QL_TYPE_Q3_K, c->buf);
    } else if (f == QL_FTYPE_Q2_K_S) {
        if (i < nl / 8)
            choose(c, QL_TYPE_Q4_K, c->buf);
    } else if (f == QL_FTYPE_IQ3_XXS && !mm->has_imatrix) {
        choose(c, i < nl / 8 ? QL_TYPE_Q4_K : QL_TYPE_Q3_K, c->buf);
    } else if (f == QL_FTYPE_Q3_K_M) {
        choose(c, i < nl / 16 ? QL_TYPE_Q5_K : QL_TYPE_Q4_K, c->buf);
    } else if (f == QL_FTYPE_IQ3_M && (i < nl / 8 || (mm->n_expert == 8 && use_more_bits(i, nl)))) {
        choose(c, QL_TYPE_Q4_K, c->buf);
    } else if (f == QL_FTYPE_Q3_K_L) {
        choose(c, QL_TYPE_Q5_K, c->buf);
    } else if (f == QL_FTYPE_Q4_K_M) {
        if (use_more_bits(i, nl))
            choose(c, QL_TYPE_Q6_K, c->buf);
    } else if (i < nl / 8 && FTYPE_IN(f, QL_FTYPE_IQ4_NL, QL_FTYPE_IQ4_XS) && !mm->has_imatrix) {
        choose(c, QL_TYPE_Q5_K, c->buf);
    } else if (f == QL_FTYPE_Q5_K_M && use_more_bits(i, nl)) {
        choose(c, QL_TYPE_Q6_K, c->buf);
    } else if (f == QL_FTYPE_Q4_K_S && i < nl / 8) {
        choose(c, QL_TYPE_Q5_K, c->buf);
    } else if (FTYPE_IN(f, QL_FTYPE_Q4_0, QL_FTYPE_Q5_0) && mm->has_imatrix && i < nl / 8) {
        /* llama.cpp guards the first ffn_down layers only when an imatrix is given. */
        choose(c, f == QL_FTYPE_Q4_0 ? QL_TYPE_Q4_1 : QL_TYPE_Q5_1, c->buf);
    }
    return QL_OK;
}

static void rule_attn_output(mix_choice *c, const mix_model *mm)
{
    const ql_ftype f = mm->ftype;
    if (mm->n_expert == 8) {
        if (FTYPE_IN(f, QL_FTYPE_Q2_K, QL_FTYPE_IQ3_XS, QL_FTYPE_IQ3_XXS, QL_FTYPE_Q3_K_S,
                     QL_FTYPE_Q3_K_M, QL_FTYPE_IQ4_NL, QL_FTYPE_Q4_K_S, QL_FTYPE_Q4_K_M,
                     QL_FTYPE_IQ3_S, QL_FTYPE_IQ3_M, QL_FTYPE_IQ4_XS))
            choose(c, QL_TYPE_Q5_K, "attn_output of an 8-expert model");
    } else if (f == QL_FTYPE_Q2_K) {
        choose(c, QL_TYPE_Q3_K, "attn_output");
    } else if (f == QL_FTYPE_IQ3_XXS) {
        choose(c, QL_TYPE_IQ3_S, "attn_output");
    } else if (FTYPE_IN(f, QL_FTYPE_Q3_K_M, QL_FTYPE_IQ3_M)) {
        choose(c, QL_TYPE_Q4_K, "attn_output");
    } else if (f == QL_FTYPE_Q3_K_L) {
        choose(c, QL_TYPE_Q5_K, "attn_output");
    }
}

static void rule_attn_qkv(mix_choice *c, ql_ftype f)
{
    if (FTYPE_IN(f, QL_FTYPE_Q3_K_M, QL_FTYPE_Q3_K_L, QL_FTYPE_IQ3_M))
        choose(c, QL_TYPE_Q4_K, "attn_qkv");
    else if (f == QL_FTYPE_Q4_K_M)
        choose(c, QL_TYPE_Q5_K, "attn_qkv");
    else if (f == QL_FTYPE_Q5_K_M)
        choose(c, QL_TYPE_Q6_K, "attn_qkv");
}

static ql_status rule_ffn_gate_up(mix_choice *c, const char *n, const mix_model *mm,
                                  const mix_pos *pos, ql_error *err)
{
    const bool gate = has(n, "ffn_gate");
    int i;
    ql_status st = ffn_layer(mm, n, gate ? pos->i_ffn_gate : pos->i_ffn_up, &i, err);
    if (st)
        return st;
    const int nl = mm->n_layer;
    if (mm->ftype == QL_FTYPE_IQ3_XS && i >= nl / 8 && i < 7 * nl / 8) {
        snprintf(c->buf, sizeof c->buf, "%s of layer %d of %d, in the middle three quarters",
                 gate ? "ffn_gate" : "ffn_up", i, nl);
        choose(c, QL_TYPE_IQ3_XXS, c->buf);
    }
    return QL_OK;
}

/* The mix's request for a tensor its rules decide (role WEIGHT, HEAD or EMBD):
 * the default type unless a rule names another, tried in llama.cpp's order. */
static ql_status ask_mix(ql_quant_plan_entry *e, const mix_model *mm, const mix_pos *pos,
                         const char *mix, ql_error *err)
{
    const ql_ftype f = mm->ftype;
    const char *n = e->name;
    mix_choice c = {.type = mm->default_type, .why = NULL};
    ql_status st = QL_OK;
    if (e->role == QL_ROLE_HEAD || (e->role == QL_ROLE_EMBD && !mm->has_output))
        rule_head(&c, e, f);
    else if (e->role == QL_ROLE_EMBD)
        rule_embd(&c, f);
    else if (very_low_bit_iq(f))
        rule_very_low_bit(&c, n, mm, pos);
    else if (has(n, "attn_v.weight"))
        rule_attn_v(&c, mm, pos);
    else if (has(n, "attn_k.weight"))
        rule_attn_k(&c, mm);
    else if (has(n, "attn_q.weight"))
        rule_attn_q(&c, f);
    else if (has(n, "ffn_down"))
        st = rule_ffn_down(&c, n, mm, pos, err);
    else if (has(n, "attn_output.weight"))
        rule_attn_output(&c, mm);
    else if (has(n, "attn_qkv.weight"))
        rule_attn_qkv(&c, f);
    else if (has(n, "ffn_gate") || has(n, "ffn_up"))
        st = rule_ffn_gate_up(&c, n, mm, pos, err);
    if (st)
        return st;
    if (c.why)
        ask(e, c.type, "%s: %s", mix, c.why);
    else
        ask(e, c.type, "%s: its default type", mix);
    return QL_OK;
}

/* The counters of the tensors the rules decide (mix_pos), in llama-quantize's
 * order: by layer number (-1 for tensors outside blocks), then by name. */
typedef struct {
    const ql_quant_tensor_desc *t;
    int64_t index;
    int layer;
} ordered;

static int cmp_weight_order(const void *pa, const void *pb)
{
    const ordered *a = pa, *b = pb;
    if (a->layer != b->layer)
        return a->layer < b->layer ? -1 : 1;
    return strcmp(a->t->name, b->t->name);
}

/* ========================================================================= */
/* Fallbacks                                                                  */
/* ========================================================================= */

/* From the requested type to the used one (INT8_ROW's small tensors, rows that do
 * not split into blocks), recording why. */
static ql_status fall_back(ql_quant_plan_entry *e, ql_error *err)
{
    int32_t used = e->requested;
    const ql_type_traits *tr = ql_type_get(used);
    const int64_t n_values = e->n_per_row * e->nrows;
    if (used == QL_TYPE_INT8_ROW && n_values <= QL_INT8ROW_KEEP_MAX) {
        used = QL_TYPE_F16;
        e->fallback = QL_FALLBACK_SMALL_TENSOR;
        snprintf(e->reason, sizeof e->reason,
                 "INT8_ROW keeps tensors of <= %d values as F16 (%lld values)", QL_INT8ROW_KEEP_MAX,
                 (long long)n_values);
    } else if (used == QL_TYPE_INT8_ROW && !ql_int8row_row_ok(e->n_per_row)) {
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "tensor '%s': INT8_ROW rows of %lld values are not supported", e->name,
                            (long long)e->n_per_row);
    } else if (tr->block_size > 1 && e->n_per_row % tr->block_size != 0) {
        int32_t next = tr->row_fallback;
        const ql_type_traits *nt = ql_type_get(next);
        int n = snprintf(e->reason, sizeof e->reason,
                         "row length %lld is not a multiple of %lld (%s): %s",
                         (long long)e->n_per_row, (long long)tr->block_size, tr->name, nt->name);
        if (next != QL_TYPE_F16 && e->n_per_row % nt->block_size != 0) {
            snprintf(e->reason + n, sizeof e->reason - (size_t)n,
                     ", not a multiple of %lld either: F16", (long long)nt->block_size);
            next = QL_TYPE_F16;
        }
        used = next;
        e->fallback = QL_FALLBACK_ROW_LENGTH;
    }
    e->used = used;
    e->bytes = tensor_bytes(used, e->n_per_row, e->nrows);
    return QL_OK;
}

/* ========================================================================= */
/* Plans                                                                      */
/* ========================================================================= */

/* The requested types must be weight types. */
static ql_status check_config(const ql_quant_config *cfg, ql_error *err)
{
    const int32_t types[3] = {cfg->mix ? cfg->mix->default_type : cfg->weight_type, cfg->head_type,
                              cfg->embd_type};
    const char *what[3] = {"weight", "head", "embedding"};
    for (int i = 0; i < 3; i++) {
        if (i > 0 && types[i] == QL_TYPE_INVALID)
            continue;
        const ql_type_traits *t = ql_type_get(types[i]);
        if (!ql_type_is_weight(t))
            return ql_error_set(err, QL_EINVAL, "%s type %s is %s", what[i], ql_type_name(types[i]),
                                t ? t->not_weight : "not a known type");
    }
    return QL_OK;
}

/* The plan's weight type: the mix's default type, else the config's. */
static int32_t weight_type_of(const ql_quant_config *cfg)
{
    return cfg->mix ? cfg->mix->default_type : cfg->weight_type;
}

/* Whether the mix's rules decide (llama-quantize applies them to quantized default
 * types only, not to F32/F16/BF16, and not with --pure). */
static bool rules_apply(const ql_quant_config *cfg)
{
    return cfg->mix && !cfg->pure && !ql_quant_is_float_type(cfg->mix->default_type);
}

/* Plans one tensor whose shape and role are set: request, then fallbacks. */
static ql_status plan_entry(ql_quant_plan_entry *e, const ql_quant_config *cfg, bool has_output,
                            const mix_model *mm, const mix_pos *pos, ql_error *err)
{
    ql_status st = QL_OK;
    if (is_assigned(e)) {
        if (!mm) {
            st = ask_pure(e, cfg, weight_type_of(cfg), has_output, err);
        } else if (!ask_head_embd(e, cfg, has_output, "--output-tensor-type",
                                  "--token-embedding-type")) {
            /* The rules decide first (their counters see every tensor), then an
             * override replaces their choice. */
            bool applied;
            st = ask_mix(e, mm, pos, cfg->mix->name, err);
            if (!st)
                st = ask_override(e, cfg, &applied, err);
        }
    }
    if (!st)
        st = fall_back(e, err);
    return st;
}

ql_status ql_quant_plan_tensor(const ql_quant_config *cfg, const char *name, uint32_t n_dims,
                               const int64_t *ne, int32_t src_type, bool model_has_output,
                               ql_quant_plan_entry *out, ql_error *err)
{
    ql_status st = set_shape(out, name, n_dims, ne, err);
    if (st)
        return st;
    if ((st = check_config(cfg, err)))
        return st;
    if (rules_apply(cfg))
        return ql_error_set(err, QL_EINVAL,
                            "tensor '%s': the rules of %s need the whole model (use "
                            "ql_quant_plan_make)",
                            name, cfg->mix->name);
    if ((st = set_role(out, cfg, src_type, err)))
        return st;
    return plan_entry(out, cfg, model_has_output, NULL, NULL, err);
}

/* The model facts the mix's rules read, checked. */
static ql_status read_mix_model(const ql_quant_model_desc *m, const ql_quant_config *cfg,
                                bool has_output, mix_model *mm, ql_error *err)
{
    const char *mix = cfg->mix->name;
    memset(mm, 0, sizeof *mm);
    mm->ftype = cfg->mix->ftype;
    mm->default_type = cfg->mix->default_type;
    mm->has_imatrix = cfg->has_imatrix;
    mm->has_output = has_output;
    const char *arch = m->arch ? m->arch : "";
    const bool llama = strcmp(arch, "llama") == 0, qwen2 = strcmp(arch, "qwen2") == 0;
    /* b4747's rules name no architecture of these but falcon's and a few others': the
     * Qwen family and qwen3moe (after b4747) take the generic ones. */
    static const char *const known[] = {"llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe"};
    bool ok = false;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        ok |= strcmp(arch, known[i]) == 0;
    if (!ok)
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "%s: architecture '%s': qlab has llama-quantize's %s rules for "
                            "llama, qwen2, qwen2moe, qwen3 and qwen3moe models (--pure quantizes "
                            "any)",
                            m->path ? m->path : "model", arch, mix);
    if (m->n_layer <= 0 || m->n_head <= 0 || m->n_head_kv < 0 || m->n_expert < 0)
        return ql_error_set(err, QL_EINVAL,
                            "%s: %s needs the layer and head counts (got %d layers, %d heads, %d "
                            "kv heads)",
                            m->path ? m->path : "model", mix, m->n_layer, m->n_head, m->n_head_kv);
    mm->n_layer = m->n_layer;
    mm->n_gqa = m->n_head_kv > 0 ? m->n_head / m->n_head_kv : 0;
    mm->n_expert = m->n_expert;
    /* llama.cpp's LLM_TYPE_70B: 80-layer llama with GQA (not its 8-expert models),
     * 80-layer qwen2. */
    mm->is_70b =
        m->n_layer == 80 && ((llama && m->n_expert != 8 && m->n_head != m->n_head_kv) || qwen2);
    for (int64_t i = 0; i < m->n_tensors; i++) {
        const char *n = m->tensors[i].name;
        mm->n_attention_wv +=
            has(n, "attn_v.weight") || has(n, "attn_qkv.weight") || has(n, "attn_kv_b.weight");
    }
    /* llama-quantize asserts one value projection per attention layer. */
    if (mm->n_attention_wv != 0 && mm->n_attention_wv != m->n_layer)
        return ql_error_set(err, QL_EINVAL,
                            "%s: %d attn_v tensors for %d layers: llama-quantize's %s rules "
                            "expect one per layer",
                            m->path ? m->path : "model", mm->n_attention_wv, m->n_layer, mix);
    return QL_OK;
}

void ql_quant_plan_free(ql_quant_plan *p)
{
    if (!p)
        return;
    free(p->entries);
    free(p);
}

ql_status ql_quant_plan_make(const ql_quant_model_desc *m, const ql_quant_config *cfg,
                             ql_quant_plan **out, ql_error *err)
{
    *out = NULL;
    const char *path = m->path ? m->path : "model";
    ql_status st = check_config(cfg, err);
    if (st)
        return ql_error_prefix(err, "%s: ", path);
    if (cfg->mix && cfg->mix->needs_imatrix && !cfg->has_imatrix)
        return ql_error_set(err, QL_EINVAL,
                            "%s: %s needs an importance matrix (llama-quantize refuses it "
                            "without one)",
                            path, cfg->mix->name);
    bool has_output = false;
    for (int64_t i = 0; i < m->n_tensors; i++)
        has_output |= strcmp(m->tensors[i].name, HEAD_NAME) == 0;
    mix_model mm;
    if (rules_apply(cfg) && (st = read_mix_model(m, cfg, has_output, &mm, err)))
        return st;

    ql_quant_plan *p = calloc(1, sizeof *p);
    ordered *order = calloc(m->n_tensors ? (size_t)m->n_tensors : 1, sizeof *order);
    if (!p || !order ||
        !(p->entries = calloc(m->n_tensors ? (size_t)m->n_tensors : 1, sizeof *p->entries))) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory for a quantization plan");
        goto out;
    }
    p->mix = cfg->mix;
    p->weight_type = weight_type_of(cfg);
    p->rules = rules_apply(cfg);
    p->ftype = cfg->mix ? (int32_t)cfg->mix->ftype : ql_type_get(cfg->weight_type)->ftype;
    for (int64_t i = 0; i < m->n_tensors; i++) {
        const ql_quant_tensor_desc *t = &m->tensors[i];
        if ((st = set_shape(&p->entries[i], t->name, t->n_dims, t->ne, err)))
            goto out_tensor;
        if ((st = set_role(&p->entries[i], cfg, t->type, err)))
            goto out_tensor;
        order[i] = (ordered){t, i, name_layer(t->name)};
    }
    p->n = m->n_tensors;
    /* llama-quantize's order, for the counters of its rules. */
    qsort(order, (size_t)m->n_tensors, sizeof *order, cmp_weight_order);
    mix_pos pos = {0, 0, 0, 0};
    for (int64_t k = 0; k < m->n_tensors; k++) {
        ql_quant_plan_entry *e = &p->entries[order[k].index];
        if ((st = plan_entry(e, cfg, has_output, rules_apply(cfg) ? &mm : NULL, &pos, err)))
            goto out_tensor;
        if (!is_assigned(e) || is_router(e->name))
            continue;
        /* As llama_tensor_get_type counts them (its branches, in their order); a router
         * never reaches it. */
        const char *n = e->name;
        const bool head = e->role == QL_ROLE_HEAD || e->role == QL_ROLE_EMBD;
        if (!head && has(n, "attn_v.weight"))
            pos.i_attention_wv++;
        else if (!head && has(n, "ffn_down"))
            pos.i_ffn_down++;
        else if (!head && !has(n, "attn_k.weight") && !has(n, "attn_q.weight") &&
                 !has(n, "attn_output.weight") && !has(n, "attn_qkv.weight")) {
            pos.i_ffn_gate += has(n, "ffn_gate");
            pos.i_ffn_up += !has(n, "ffn_gate") && has(n, "ffn_up");
        }
    }
    ql_quant_plan_totals(p);
    *out = p;
    p = NULL;
    goto out;
out_tensor:
    ql_error_prefix(err, "%s: ", path);
out:
    free(order);
    ql_quant_plan_free(p);
    return st;
}

ql_status ql_quant_plan_build(const ql_gguf *g, const ql_quant_config *cfg, ql_quant_plan **out,
                              ql_error *err)
{
    *out = NULL;
    ql_quant_model_desc m = {.path = g->path, .n_tensors = g->n_tensors};
    ql_quant_tensor_desc *tensors =
        calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *tensors);
    if (!tensors)
        return ql_error_set(err, QL_ENOMEM, "out of memory for a quantization plan");
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        tensors[i].name = t->name;
        tensors[i].n_dims = t->n_dims;
        tensors[i].type = t->type;
        for (int d = 0; d < QL_GGUF_MAX_DIMS; d++)
            tensors[i].ne[d] = d < (int)t->n_dims ? t->ne[d] : 1;
    }
    m.tensors = tensors;
    ql_status st = QL_OK;
    ql_hparams hp;
    if (rules_apply(cfg)) {
        /* The hyper-parameters the rules read, checked as for evaluation. */
        if ((st = ql_hparams_read(g, &hp, err)))
            goto out;
        char key[64];
        int64_t n_expert = 0;
        snprintf(key, sizeof key, "%s.expert_count", hp.arch_name);
        ql_error e;
        ql_error_clear(&e);
        if (!ql_gguf_get_i64(g, key, &n_expert, &e) && e.status) {
            st = ql_error_set(err, e.status, "%s", e.msg);
            goto out;
        }
        if (n_expert < 0 || n_expert > 4096) {
            st = ql_error_set(err, QL_EFORMAT, "%s: key '%s' = %lld is out of range (0..4096)",
                              g->path, key, (long long)n_expert);
            goto out;
        }
        m.arch = hp.arch_name;
        m.n_layer = hp.n_layer;
        m.n_head = hp.n_head;
        m.n_head_kv = hp.n_head_kv;
        m.n_expert = (int)n_expert;
    }
    st = ql_quant_plan_make(&m, cfg, out, err);
out:
    free(tensors);
    return st;
}

/* ------------------------------------------------------------------------- */
/* Importance                                                                 */

bool ql_quant_plan_needs_importance(const ql_quant_plan *p, const ql_quant_plan_entry *e)
{
    const ql_type_traits *tr = ql_type_get(e->used);
    if (!tr)
        return false;
    if (!p->mix)
        return tr->requires_imatrix;
    /* llama_model_quantize_impl's list (b4747). */
    const bool embd = strcmp(e->name, EMBD_NAME) == 0, head = strcmp(e->name, HEAD_NAME) == 0;
    if (e->used == QL_TYPE_IQ1_M)
        return !embd && !head;
    if (e->used == QL_TYPE_Q2_K)
        return p->mix->ftype == QL_FTYPE_Q2_K_S && !embd;
    return tr->llama_imatrix;
}

bool ql_quant_plan_no_importance(ql_quant_plan_entry *e)
{
    const ql_type_traits *tr = ql_type_get(e->used);
    if (!tr || !tr->requires_imatrix)
        return false;
    int32_t used = QL_TYPE_Q2_K;
    int n = snprintf(e->reason, sizeof e->reason,
                     "%s needs importance weights and the tensor has none: Q2_K", tr->name);
    if (e->n_per_row % ql_type_get(used)->block_size != 0) {
        used = ql_type_get(used)->row_fallback;
        n += snprintf(e->reason + n, sizeof e->reason - (size_t)n, ", row length %lld: %s",
                      (long long)e->n_per_row, ql_type_name(used));
        if (e->n_per_row % ql_type_get(used)->block_size != 0) {
            used = QL_TYPE_F16;
            snprintf(e->reason + n, sizeof e->reason - (size_t)n, ", then F16");
        }
    }
    e->used = used;
    e->fallback = QL_FALLBACK_NO_IMATRIX;
    e->bytes = tensor_bytes(used, e->n_per_row, e->nrows);
    return true;
}

ql_status ql_quant_plan_check_importance(ql_quant_plan *p, ql_quant_importance_fn has_importance,
                                         const void *ctx, int64_t *n_changed, ql_error *err)
{
    int64_t changed = 0;
    ql_status st = QL_OK;
    for (int64_t i = 0; i < p->n && !st; i++) {
        ql_quant_plan_entry *e = &p->entries[i];
        if (!ql_quant_plan_needs_importance(p, e) || has_importance(ctx, i, e))
            continue;
        if (p->mix)
            st = ql_error_set(err, QL_EINVAL,
                              "tensor '%s': %s without importance weights (no imatrix entry for "
                              "it): llama-quantize refuses to quantize it in %s",
                              e->name, ql_type_name(e->used), p->mix->name);
        else
            changed += ql_quant_plan_no_importance(e);
    }
    if (changed > 0)
        ql_quant_plan_totals(p);
    if (n_changed)
        *n_changed = changed;
    return st;
}

int64_t ql_quant_plan_importance_fallbacks(ql_quant_plan *p, ql_quant_importance_fn has_importance,
                                           const void *ctx)
{
    QL_ASSERT(!p->mix);
    int64_t n = 0;
    ql_error err;
    ql_status st = ql_quant_plan_check_importance(p, has_importance, ctx, &n, &err);
    QL_ASSERT(st == QL_OK); /* pure plans only fall back */
    return n;
}

void ql_quant_plan_totals(ql_quant_plan *p)
{
    p->bytes = p->body_bytes = 0;
    p->params = p->body_params = 0;
    p->n_fallback = 0;
    for (int64_t i = 0; i < p->n; i++) {
        const ql_quant_plan_entry *e = &p->entries[i];
        p->bytes += e->bytes;
        p->params += e->n_per_row * e->nrows;
        if (e->fallback != QL_FALLBACK_NONE)
            p->n_fallback++;
        if (e->role != QL_ROLE_HEAD && e->role != QL_ROLE_EMBD) {
            p->body_bytes += e->bytes;
            p->body_params += e->n_per_row * e->nrows;
        }
    }
}
