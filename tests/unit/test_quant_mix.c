/* llama-quantize's mixes in the type policy (model/quant_policy.h): on llama- and
 * qwen2-shaped models with rows of 256-multiples, the type of every tensor for
 * several mixes, layer counts and GQA ratios, against tables written by hand from
 * llama_tensor_get_type (src/llama-quant.cpp, llama.cpp b4747); each case names the
 * rule it exercises. Then the overrides (--tensor-type), the options, and the errors.
 *
 * use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2; for 8 layers
 * that is layers 0 3 6 7, for 16 layers 0 1 4 7 10 13 14 15, for 4 layers 2 3. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/types.h"
#include "model/gguf.h"
#include "model/quant_policy.h"
#include "model/synth.h"
#include "qltest.h"

/* ------------------------------------------------------------------------- */
/* Model shapes                                                               */

typedef struct {
    const char *arch;
    int layers, heads, kv_heads;
    int64_t dim, ff, vocab;
    bool tied;   /* no output.weight (qwen2's small models) */
    bool biases; /* attn_q/k/v biases (qwen2) */
} shape;

#define MAX_TENSORS 1024

typedef struct {
    char names[MAX_TENSORS][64];
    ql_quant_tensor_desc t[MAX_TENSORS];
    ql_quant_model_desc m;
} model;

static void add(model *md, const char *name, int64_t ne0, int64_t ne1)
{
    const int64_t i = md->m.n_tensors++;
    QL_ASSERT(i < MAX_TENSORS);
    snprintf(md->names[i], sizeof md->names[i], "%s", name);
    md->t[i] =
        (ql_quant_tensor_desc){md->names[i], ne1 ? 2 : 1, {ne0, ne1 ? ne1 : 1, 1, 1}, QL_TYPE_F32};
}

/* The tensors of a model of this shape. The layers are listed last to first, so
 * that the policy's own order (by layer number, as llama-quantize's weight map) is
 * what the counters see, not the file's, nor the names' (blk.10 before blk.2). */
static model *make_model(const shape *s)
{
    model *md = calloc(1, sizeof *md);
    md->m = (ql_quant_model_desc){.path = "test-model",
                                  .arch = s->arch,
                                  .n_layer = s->layers,
                                  .n_head = s->heads,
                                  .n_head_kv = s->kv_heads,
                                  .tensors = md->t};
    const int64_t kv = s->dim / s->heads * s->kv_heads;
    add(md, "token_embd.weight", s->dim, s->vocab);
    for (int l = s->layers - 1; l >= 0; l--) {
        char n[64];
#define T(suffix, a, b) (snprintf(n, sizeof n, "blk.%d." suffix, l), add(md, n, a, b))
        T("attn_norm.weight", s->dim, 0);
        T("attn_q.weight", s->dim, s->dim);
        T("attn_k.weight", s->dim, kv);
        T("attn_v.weight", s->dim, kv);
        if (s->biases) {
            T("attn_q.bias", s->dim, 0);
            T("attn_k.bias", kv, 0);
            T("attn_v.bias", kv, 0);
        }
        T("attn_output.weight", s->dim, s->dim);
        T("ffn_norm.weight", s->dim, 0);
        T("ffn_gate.weight", s->dim, s->ff);
        T("ffn_up.weight", s->dim, s->ff);
        T("ffn_down.weight", s->ff, s->dim);
#undef T
    }
    add(md, "output_norm.weight", s->dim, 0);
    if (!s->tied)
        add(md, "output.weight", s->dim, s->vocab);
    return md;
}

static const shape LLAMA8_GQA4 = {"llama", 8, 8, 2, 256, 768, 512, false, false};
static const shape LLAMA8_GQA2 = {"llama", 8, 8, 4, 256, 768, 512, false, false};
static const shape LLAMA8_GQA1 = {"llama", 8, 4, 4, 256, 768, 512, false, false};
static const shape LLAMA16_GQA1 = {"llama", 16, 4, 4, 256, 768, 512, false, false};
static const shape LLAMA16_GQA4 = {"llama", 16, 8, 2, 256, 768, 512, false, false};
static const shape QWEN2_4_GQA4 = {"qwen2", 4, 8, 2, 256, 768, 512, true, true};
/* 80 layers: llama.cpp's 70B model type (llama with GQA, qwen2). */
static const shape LLAMA80_GQA8 = {"llama", 80, 64, 8, 256, 512, 256, false, false};
static const shape LLAMA80_MHA = {"llama", 80, 8, 8, 256, 512, 256, false, false};
static const shape QWEN2_80_GQA8 = {"qwen2", 80, 64, 8, 256, 512, 256, false, true};
/* stories260K's rows: 64 and 172, no K type fits. */
static const shape TINY = {"llama", 5, 8, 4, 64, 172, 512, false, false};

/* ------------------------------------------------------------------------- */
/* Expectations                                                               */

static const ql_quant_plan_entry *find(const ql_quant_plan *p, const char *name)
{
    for (int64_t i = 0; i < p->n; i++)
        if (strcmp(p->entries[i].name, name) == 0)
            return &p->entries[i];
    return NULL;
}

/* Per tensor class: the types of layers 0, 1, ... ("Q6_K Q4_K ...", the last one
 * repeating for the layers after it), or a whole tensor name and its type. */
typedef struct {
    const char *tensor; /* "attn_v" (blk.N.attn_v.weight), or a whole name */
    const char *types;
} expect;

static void check_types(const char *label, const ql_quant_plan *p, int layers, const expect *ex)
{
    for (; ex->tensor; ex++) {
        if (strchr(ex->tensor, '.')) {
            const ql_quant_plan_entry *e = find(p, ex->tensor);
            CHECK_MSG(e && strcmp(ql_type_name(e->used), ex->types) == 0, "%s: %s is %s, not %s",
                      label, ex->tensor, e ? ql_type_name(e->used) : "missing", ex->types);
            continue;
        }
        const char *tok = ex->types;
        for (int l = 0; l < layers; l++) {
            char name[64], type[16];
            const size_t len = strcspn(tok, " ");
            snprintf(type, sizeof type, "%.*s", (int)len, tok);
            if (tok[len] == ' ')
                tok += len + 1;
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, ex->tensor);
            const ql_quant_plan_entry *e = find(p, name);
            CHECK_MSG(e && strcmp(ql_type_name(e->used), type) == 0,
                      "%s: %s is %s, expected %s (%s)", label, name,
                      e ? ql_type_name(e->used) : "missing", type, e ? e->choice : "");
        }
    }
}

typedef struct {
    const char *rule; /* what the case exercises */
    const shape *s;
    const char *mix;
    bool imatrix;
    expect ex[12];
} mix_case;

static const mix_case cases[] = {
    {"Q4_K_M: attn_v and ffn_down Q6_K in use_more_bits layers, head Q6_K",
     &LLAMA8_GQA4,
     "Q4_K_M",
     false,
     {{"attn_v", "Q6_K Q4_K Q4_K Q6_K Q4_K Q4_K Q6_K Q6_K"},
      {"ffn_down", "Q6_K Q4_K Q4_K Q6_K Q4_K Q4_K Q6_K Q6_K"},
      {"attn_q", "Q4_K"},
      {"attn_k", "Q4_K"},
      {"attn_output", "Q4_K"},
      {"ffn_gate", "Q4_K"},
      {"ffn_up", "Q4_K"},
      {"output.weight", "Q6_K"},
      {"token_embd.weight", "Q4_K"},
      {"output_norm.weight", "F32"},
      {"attn_norm", "F32"}}},
    {"Q4_K_M on 16 layers: the counters follow layer numbers (blk.10 after blk.9)",
     &LLAMA16_GQA1,
     "Q4_K_M",
     false,
     {{"attn_v", "Q6_K Q6_K Q4_K Q4_K Q6_K Q4_K Q4_K Q6_K Q4_K Q4_K Q6_K Q4_K Q4_K Q6_K Q6_K Q6_K"},
      {"ffn_down",
       "Q6_K Q6_K Q4_K Q4_K Q6_K Q4_K Q4_K Q6_K Q4_K Q4_K Q6_K Q4_K Q4_K Q6_K Q6_K Q6_K"}}},
    {"Q5_K_M: the same layers as Q4_K_M, base Q5_K",
     &LLAMA8_GQA2,
     "Q5_K_M",
     false,
     {{"attn_v", "Q6_K Q5_K Q5_K Q6_K Q5_K Q5_K Q6_K Q6_K"},
      {"ffn_down", "Q6_K Q5_K Q5_K Q6_K Q5_K Q5_K Q6_K Q6_K"},
      {"attn_output", "Q5_K"},
      {"output.weight", "Q6_K"},
      {"token_embd.weight", "Q5_K"}}},
    {"Q4_K_S: attn_v < 4 and ffn_down in the first eighth Q5_K",
     &LLAMA8_GQA4,
     "Q4_K_S",
     false,
     {{"attn_v", "Q5_K Q5_K Q5_K Q5_K Q4_K Q4_K Q4_K Q4_K"},
      {"ffn_down", "Q5_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K"},
      {"attn_q", "Q4_K"},
      {"output.weight", "Q6_K"}}},
    {"Q5_K_S: no rule but the head",
     &LLAMA8_GQA4,
     "Q5_K_S",
     false,
     {{"attn_v", "Q5_K"},
      {"ffn_down", "Q5_K"},
      {"output.weight", "Q6_K"},
      {"token_embd.weight", "Q5_K"}}},
    {"Q3_K_M: attn_v < 2 Q5_K else Q4_K, ffn_down < n/16 Q5_K, attn_output Q4_K",
     &LLAMA16_GQA1,
     "Q3_K_M",
     false,
     {{"attn_v", "Q5_K Q5_K Q4_K"},
      {"ffn_down", "Q5_K Q4_K"},
      {"attn_output", "Q4_K"},
      {"attn_q", "Q3_K"},
      {"ffn_gate", "Q3_K"},
      {"output.weight", "Q6_K"},
      {"token_embd.weight", "Q3_K"}}},
    {"Q3_K_L: attn_v, ffn_down, attn_output Q5_K",
     &LLAMA8_GQA4,
     "Q3_K_L",
     false,
     {{"attn_v", "Q5_K"}, {"ffn_down", "Q5_K"}, {"attn_output", "Q5_K"}, {"attn_k", "Q3_K"}}},
    {"Q3_K_S: only the head",
     &LLAMA8_GQA4,
     "Q3_K_S",
     false,
     {{"attn_v", "Q3_K"}, {"ffn_down", "Q3_K"}, {"output.weight", "Q6_K"}}},
    {"Q2_K with GQA 4: attn_v Q4_K, ffn_down and attn_output Q3_K",
     &LLAMA8_GQA4,
     "Q2_K",
     false,
     {{"attn_v", "Q4_K"},
      {"ffn_down", "Q3_K"},
      {"attn_output", "Q3_K"},
      {"attn_q", "Q2_K"},
      {"output.weight", "Q6_K"},
      {"token_embd.weight", "Q2_K"}}},
    {"Q2_K with GQA 2: attn_v Q3_K", &LLAMA8_GQA2, "Q2_K", false, {{"attn_v", "Q3_K"}}},
    {"Q2_K_S with GQA 4: attn_v Q4_K, ffn_down first eighth Q4_K",
     &LLAMA16_GQA4,
     "Q2_K_S",
     true,
     {{"attn_v", "Q4_K"}, {"ffn_down", "Q4_K Q4_K Q2_K"}, {"attn_output", "Q2_K"}}},
    {"Q2_K_S with GQA 1: attn_v stays Q2_K", &LLAMA8_GQA1, "Q2_K_S", true, {{"attn_v", "Q2_K"}}},
    {"IQ2_XXS, GQA 4: attn_v Q4_K, ffn_down first eighth Q2_K, head Q5_K, embd Q2_K",
     &LLAMA8_GQA4,
     "IQ2_XXS",
     true,
     {{"attn_v", "Q4_K"},
      {"ffn_down", "Q2_K IQ2_XXS"},
      {"attn_output", "IQ2_XXS"},
      {"attn_q", "IQ2_XXS"},
      {"output.weight", "Q5_K"},
      {"token_embd.weight", "Q2_K"}}},
    {"IQ2_XS, GQA 1: attn_v Q2_K",
     &LLAMA8_GQA1,
     "IQ2_XS",
     true,
     {{"attn_v", "Q2_K"}, {"ffn_down", "Q2_K IQ2_XS"}, {"attn_k", "IQ2_XS"}}},
    {"IQ2_S (base IQ2_XS): attn_v IQ3_S, attn_output IQ3_S, embd IQ3_S",
     &LLAMA8_GQA1,
     "IQ2_S",
     true,
     {{"attn_v", "IQ3_S"},
      {"ffn_down", "IQ3_S IQ2_XS"},
      {"attn_output", "IQ3_S"},
      {"attn_q", "IQ2_XS"},
      {"output.weight", "Q5_K"},
      {"token_embd.weight", "IQ3_S"}}},
    {"IQ2_M (base IQ2_S), GQA 4: attn_v Q4_K",
     &LLAMA8_GQA4,
     "IQ2_M",
     true,
     {{"attn_v", "Q4_K"},
      {"ffn_down", "IQ3_S IQ2_S"},
      {"attn_output", "IQ3_S"},
      {"ffn_up", "IQ2_S"},
      {"token_embd.weight", "IQ3_S"}}},
    {"IQ1_S: attn_output IQ2_XXS",
     &LLAMA8_GQA1,
     "IQ1_S",
     true,
     {{"attn_v", "Q2_K"},
      {"ffn_down", "Q2_K IQ1_S"},
      {"attn_output", "IQ2_XXS"},
      {"output.weight", "Q5_K"},
      {"token_embd.weight", "Q2_K"}}},
    {"IQ1_M: like IQ1_S",
     &LLAMA8_GQA4,
     "IQ1_M",
     true,
     {{"attn_v", "Q4_K"}, {"attn_output", "IQ2_XXS"}, {"attn_q", "IQ1_M"}}},
    {"IQ3_XXS without an imatrix: attn_v IQ3_S, attn_q/k IQ2_S, ffn_down Q4_K/Q3_K",
     &LLAMA8_GQA1,
     "IQ3_XXS",
     false,
     {{"attn_v", "IQ3_S"},
      {"attn_k", "IQ2_S"},
      {"attn_q", "IQ2_S"},
      {"ffn_down", "Q4_K Q3_K"},
      {"attn_output", "IQ3_S"},
      {"ffn_gate", "IQ3_XXS"},
      {"output.weight", "Q5_K"},
      {"token_embd.weight", "IQ3_S"}}},
    {"IQ3_XXS with an imatrix: attn_v and ffn_down stay IQ3_XXS",
     &LLAMA8_GQA1,
     "IQ3_XXS",
     true,
     {{"attn_v", "IQ3_XXS"}, {"ffn_down", "IQ3_XXS"}, {"attn_k", "IQ2_S"}}},
    {"IQ3_XXS with GQA 4: attn_v Q4_K", &LLAMA8_GQA4, "IQ3_XXS", true, {{"attn_v", "Q4_K"}}},
    {"IQ3_XS (base IQ3_S): attn_q/k IQ3_XXS, ffn_gate/up IQ3_XXS in the middle layers",
     &LLAMA8_GQA4,
     "IQ3_XS",
     false,
     {{"attn_v", "Q4_K"},
      {"attn_k", "IQ3_XXS"},
      {"attn_q", "IQ3_XXS"},
      {"ffn_gate", "IQ3_S IQ3_XXS IQ3_XXS IQ3_XXS IQ3_XXS IQ3_XXS IQ3_XXS IQ3_S"},
      {"ffn_up", "IQ3_S IQ3_XXS IQ3_XXS IQ3_XXS IQ3_XXS IQ3_XXS IQ3_XXS IQ3_S"},
      {"ffn_down", "IQ3_S"},
      {"attn_output", "IQ3_S"},
      {"output.weight", "Q6_K"}}},
    {"IQ3_S with GQA 1: no attn_v bump",
     &LLAMA8_GQA1,
     "IQ3_S",
     false,
     {{"attn_v", "IQ3_S"}, {"output.weight", "Q6_K"}}},
    {"IQ3_M (base IQ3_S): attn_v Q4_K, ffn_down first eighth Q4_K, attn_output Q4_K",
     &LLAMA8_GQA1,
     "IQ3_M",
     false,
     {{"attn_v", "Q4_K"},
      {"ffn_down", "Q4_K IQ3_S"},
      {"attn_output", "Q4_K"},
      {"attn_q", "IQ3_S"}}},
    {"IQ4_NL with GQA 4, no imatrix: attn_v Q5_K, ffn_down first eighth Q5_K",
     &LLAMA16_GQA4,
     "IQ4_NL",
     false,
     {{"attn_v", "Q5_K"}, {"ffn_down", "Q5_K Q5_K IQ4_NL"}, {"output.weight", "Q6_K"}}},
    {"IQ4_XS with an imatrix: ffn_down stays IQ4_XS",
     &LLAMA16_GQA4,
     "IQ4_XS",
     true,
     {{"attn_v", "Q5_K"}, {"ffn_down", "IQ4_XS"}}},
    {"Q4_0 with an imatrix: ffn_down first eighth Q4_1, head Q6_K",
     &LLAMA16_GQA1,
     "Q4_0",
     true,
     {{"ffn_down", "Q4_1 Q4_1 Q4_0"}, {"attn_v", "Q4_0"}, {"output.weight", "Q6_K"}}},
    {"Q4_0 without an imatrix: no ffn_down guard",
     &LLAMA16_GQA1,
     "Q4_0",
     false,
     {{"ffn_down", "Q4_0"}}},
    {"Q5_0 with an imatrix: ffn_down first eighth Q5_1",
     &LLAMA16_GQA1,
     "Q5_0",
     true,
     {{"ffn_down", "Q5_1 Q5_1 Q5_0"}}},
    {"Q8_0: the head stays Q8_0",
     &LLAMA8_GQA4,
     "Q8_0",
     false,
     {{"output.weight", "Q8_0"}, {"attn_v", "Q8_0"}}},
    {"Q6_K: everything Q6_K",
     &LLAMA8_GQA4,
     "Q6_K",
     false,
     {{"output.weight", "Q6_K"}, {"attn_v", "Q6_K"}, {"token_embd.weight", "Q6_K"}}},
    {"TQ1_0: embeddings Q4_K, head Q6_K",
     &LLAMA8_GQA4,
     "TQ1_0",
     false,
     {{"token_embd.weight", "Q4_K"}, {"output.weight", "Q6_K"}, {"attn_v", "TQ1_0"}}},
    {"F16: no rules, the head too",
     &LLAMA8_GQA4,
     "F16",
     false,
     {{"output.weight", "F16"}, {"attn_v", "F16"}}},
    {"qwen2, tied embeddings: token_embd is the head (Q6_K), biases F32",
     &QWEN2_4_GQA4,
     "Q4_K_M",
     false,
     {{"token_embd.weight", "Q6_K"},
      {"attn_v", "Q4_K Q4_K Q6_K Q6_K"},
      {"ffn_down", "Q4_K Q4_K Q6_K Q6_K"},
      {"blk.0.attn_q.bias", "F32"},
      {"blk.3.attn_v.bias", "F32"}}},
    {"70B llama: attn_v Q4_K/Q3_K become Q5_K",
     &LLAMA80_GQA8,
     "Q3_K_M",
     false,
     {{"attn_v", "Q5_K"}, {"blk.79.attn_v.weight", "Q5_K"}}},
    {"70B llama, Q2_K: attn_v Q4_K becomes Q5_K",
     &LLAMA80_GQA8,
     "Q2_K",
     false,
     {{"attn_v", "Q5_K"}}},
    {"80 layers without GQA is 65B: no bump",
     &LLAMA80_MHA,
     "Q3_K_M",
     false,
     {{"blk.0.attn_v.weight", "Q5_K"}, {"blk.2.attn_v.weight", "Q4_K"}}},
    {"70B qwen2: the bump too",
     &QWEN2_80_GQA8,
     "Q4_K_S",
     false,
     {{"blk.0.attn_v.weight", "Q5_K"}, {"blk.79.attn_v.weight", "Q5_K"}}},
    {"rows of 64: every K type falls back, the head Q8_0",
     &TINY,
     "Q4_K_M",
     false,
     {{"attn_v", "Q5_0 Q5_0 Q8_0 Q5_0 Q8_0"},
      {"ffn_down", "F16"},
      {"attn_q", "Q5_0"},
      {"output.weight", "Q8_0"},
      {"token_embd.weight", "Q5_0"}}},
};

static void mixes_by_hand(void)
{
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const mix_case *c = &cases[k];
        model *md = make_model(c->s);
        const ql_quant_config cfg = {.mix = ql_quant_mix_by_name(c->mix),
                                     .head_type = QL_TYPE_INVALID,
                                     .embd_type = QL_TYPE_INVALID,
                                     .has_imatrix = c->imatrix};
        CHECK_MSG(cfg.mix != NULL, "no mix %s", c->mix);
        ql_quant_plan *p = NULL;
        ql_error err;
        ql_status st = ql_quant_plan_make(&md->m, &cfg, &p, &err);
        CHECK_MSG(st == QL_OK, "%s: %s", c->rule, err.msg);
        if (p) {
            check_types(c->rule, p, c->s->layers, c->ex);
            CHECK_EQ_INT(p->ftype, cfg.mix->ftype);
            CHECK_EQ_INT(p->rules, cfg.mix->default_type != QL_TYPE_F16);
        }
        ql_quant_plan_free(p);
        free(md);
    }
    printf("%zu mix tables checked\n", sizeof cases / sizeof cases[0]);
}

/* ------------------------------------------------------------------------- */
/* Names, aliases, numbers                                                    */

static void mix_names(void)
{
    static const struct {
        const char *name;
        int ftype, default_type;
    } want[] = {
        {"Q2_K", 10, QL_TYPE_Q2_K},
        {"Q2_K_S", 21, QL_TYPE_Q2_K},
        {"Q3_K_S", 11, QL_TYPE_Q3_K},
        {"Q3_K_M", 12, QL_TYPE_Q3_K},
        {"Q3_K_L", 13, QL_TYPE_Q3_K},
        {"Q4_K_S", 14, QL_TYPE_Q4_K},
        {"Q4_K_M", 15, QL_TYPE_Q4_K},
        {"Q5_K_S", 16, QL_TYPE_Q5_K},
        {"Q5_K_M", 17, QL_TYPE_Q5_K},
        {"Q6_K", 18, QL_TYPE_Q6_K},
        {"IQ1_S", 24, QL_TYPE_IQ1_S},
        {"IQ1_M", 31, QL_TYPE_IQ1_M},
        {"IQ2_XXS", 19, QL_TYPE_IQ2_XXS},
        {"IQ2_XS", 20, QL_TYPE_IQ2_XS},
        {"IQ2_S", 28, QL_TYPE_IQ2_XS},
        {"IQ2_M", 29, QL_TYPE_IQ2_S},
        {"IQ3_XXS", 23, QL_TYPE_IQ3_XXS},
        {"IQ3_XS", 22, QL_TYPE_IQ3_S},
        {"IQ3_S", 26, QL_TYPE_IQ3_S},
        {"IQ3_M", 27, QL_TYPE_IQ3_S},
        {"IQ4_NL", 25, QL_TYPE_IQ4_NL},
        {"IQ4_XS", 30, QL_TYPE_IQ4_XS},
        {"Q4_0", 2, QL_TYPE_Q4_0},
        {"Q4_1", 3, QL_TYPE_Q4_1},
        {"Q5_0", 8, QL_TYPE_Q5_0},
        {"Q5_1", 9, QL_TYPE_Q5_1},
        {"Q8_0", 7, QL_TYPE_Q8_0},
        {"TQ1_0", 36, QL_TYPE_TQ1_0},
        {"TQ2_0", 37, QL_TYPE_TQ2_0},
        {"F16", 1, QL_TYPE_F16},
        {"BF16", 32, QL_TYPE_BF16},
        {"F32", 0, QL_TYPE_F32},
        /* llama-quantize's aliases */
        {"Q3_K", 12, QL_TYPE_Q3_K},
        {"Q4_K", 15, QL_TYPE_Q4_K},
        {"q5_k", 17, QL_TYPE_Q5_K},
        {"15", 15, QL_TYPE_Q4_K},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const ql_quant_mix *m = ql_quant_mix_by_name(want[i].name);
        CHECK_MSG(m && (int)m->ftype == want[i].ftype && m->default_type == want[i].default_type,
                  "%s: ftype %d, default %s", want[i].name, m ? (int)m->ftype : -1,
                  m ? ql_type_name(m->default_type) : "-");
    }
    CHECK(ql_quant_mix_by_name("Q4_K_X") == NULL);
    CHECK(ql_quant_mix_by_name("COPY") == NULL);
    CHECK(ql_quant_mix_by_name("4") == NULL); /* ggml's removed Q4_1_SOME_F16 */
    CHECK(ql_quant_mix_by_name("") == NULL);
    const ql_quant_mix *all[64];
    CHECK_EQ_INT(ql_quant_mix_list(all, 64), 32);
    /* A pure type's file type (the traits' ftype column) is a mix of that default. */
    for (int i = 0; i < 32; i++) {
        const ql_type_traits *t = ql_type_get(all[i]->default_type);
        const ql_quant_mix *m = ql_quant_mix_by_ftype(t->ftype);
        CHECK_MSG(m && m->default_type == t->type, "%s: ftype %d is not a mix of it", t->name,
                  (int)t->ftype);
    }
}

/* ------------------------------------------------------------------------- */
/* Options                                                                    */

static ql_quant_plan *plan_of(const shape *s, const ql_quant_config *cfg, ql_error *err)
{
    model *md = make_model(s);
    ql_quant_plan *p = NULL;
    ql_quant_plan_make(&md->m, cfg, &p, err);
    free(md);
    return p;
}

static const char *type_of(const ql_quant_plan *p, const char *name)
{
    const ql_quant_plan_entry *e = find(p, name);
    return e ? ql_type_name(e->used) : "missing";
}

#define CHECK_TYPE(p, name, want)                                                                  \
    CHECK_MSG(strcmp(type_of(p, name), want) == 0, "%s: %s, expected %s (%s)", name,               \
              type_of(p, name), want, find(p, name) ? find(p, name)->choice : "")

static void options(void)
{
    ql_error err;
    const ql_quant_mix *q4km = ql_quant_mix_by_name("Q4_K_M");
    /* --pure: the default type everywhere, the mix's file type. */
    ql_quant_config cfg = {
        .mix = q4km, .pure = true, .head_type = QL_TYPE_INVALID, .embd_type = QL_TYPE_INVALID};
    ql_quant_plan *p = plan_of(&LLAMA8_GQA4, &cfg, &err);
    CHECK_OK(p ? QL_OK : err.status, &err);
    CHECK_TYPE(p, "output.weight", "Q4_K");
    CHECK_TYPE(p, "blk.0.attn_v.weight", "Q4_K");
    CHECK_EQ_INT(p->ftype, 15);
    CHECK(!p->rules);
    ql_quant_plan_free(p);
    /* --output-tensor-type / --token-embedding-type win over the rules. */
    cfg = (ql_quant_config){.mix = q4km, .head_type = QL_TYPE_Q8_0, .embd_type = QL_TYPE_Q5_0};
    p = plan_of(&LLAMA8_GQA4, &cfg, &err);
    CHECK_TYPE(p, "output.weight", "Q8_0");
    CHECK_TYPE(p, "token_embd.weight", "Q5_0");
    CHECK(strstr(find(p, "output.weight")->choice, "--output-tensor-type") != NULL);
    ql_quant_plan_free(p);
    /* Tied embeddings: --output-tensor-type reaches token_embd, unless
     * --token-embedding-type is given. */
    cfg = (ql_quant_config){.mix = q4km, .head_type = QL_TYPE_Q8_0, .embd_type = QL_TYPE_INVALID};
    p = plan_of(&QWEN2_4_GQA4, &cfg, &err);
    CHECK_TYPE(p, "token_embd.weight", "Q8_0");
    ql_quant_plan_free(p);
    cfg.embd_type = QL_TYPE_Q5_0;
    p = plan_of(&QWEN2_4_GQA4, &cfg, &err);
    CHECK_TYPE(p, "token_embd.weight", "Q5_0");
    ql_quant_plan_free(p);
    /* --leave-output-tensor: kept in its source type. */
    cfg = (ql_quant_config){.mix = q4km,
                            .leave_output = true,
                            .head_type = QL_TYPE_INVALID,
                            .embd_type = QL_TYPE_INVALID};
    p = plan_of(&LLAMA8_GQA4, &cfg, &err);
    CHECK_TYPE(p, "output.weight", "F32");
    CHECK_EQ_INT(find(p, "output.weight")->role, QL_ROLE_KEEP);
    ql_quant_plan_free(p);
    /* An override reaching a row that does not split falls back, recorded. */
    const char *rule[] = {"attn_q=Q4_K"};
    ql_quant_overrides *o = NULL;
    CHECK_OK(ql_quant_overrides_parse(rule, 1, &o, &err), &err);
    cfg = (ql_quant_config){.mix = ql_quant_mix_by_name("Q8_0"),
                            .overrides = o,
                            .head_type = QL_TYPE_INVALID,
                            .embd_type = QL_TYPE_INVALID};
    p = plan_of(&TINY, &cfg, &err);
    const ql_quant_plan_entry *e = find(p, "blk.0.attn_q.weight");
    CHECK(e && e->requested == QL_TYPE_Q4_K && e->used == QL_TYPE_Q5_0 &&
          e->fallback == QL_FALLBACK_ROW_LENGTH && strstr(e->choice, "attn_q=Q4_K"));
    ql_quant_plan_free(p);
    ql_quant_overrides_free(o);
}

/* ------------------------------------------------------------------------- */
/* Overrides                                                                  */

static void overrides(void)
{
    ql_error err;
    /* First match wins; patterns are lowercased and found anywhere in the name. */
    const char *rules[] = {"blk\\.1\\.ffn_down=Q8_0", "FFN_DOWN=q5_k", "blk\\.0\\.attn_v=Q8_0",
                           "^output\\.weight$=Q4_0"};
    ql_quant_overrides *o = NULL;
    CHECK_OK(ql_quant_overrides_parse(rules, 4, &o, &err), &err);
    CHECK_EQ_INT(ql_quant_overrides_count(o), 4);
    CHECK_EQ_INT(strcmp(ql_quant_overrides_rule(o, 1), "FFN_DOWN=q5_k"), 0);
    CHECK_EQ_INT(ql_quant_overrides_type(o, 1), QL_TYPE_Q5_K);
    int r = 9;
    CHECK_OK(ql_quant_overrides_match(o, "blk.1.ffn_down.weight", &r, &err), &err);
    CHECK_EQ_INT(r, 0);
    CHECK_OK(ql_quant_overrides_match(o, "blk.11.ffn_down.weight", &r, &err), &err);
    CHECK_EQ_INT(r, 1);
    CHECK_OK(ql_quant_overrides_match(o, "blk.0.attn_q.weight", &r, &err), &err);
    CHECK_EQ_INT(r, -1);
    ql_quant_config cfg = {.mix = ql_quant_mix_by_name("Q4_K_M"),
                           .overrides = o,
                           .head_type = QL_TYPE_INVALID,
                           .embd_type = QL_TYPE_INVALID};
    ql_quant_plan *p = plan_of(&LLAMA8_GQA4, &cfg, &err);
    CHECK_TYPE(p, "blk.1.ffn_down.weight", "Q8_0");
    CHECK_TYPE(p, "blk.0.ffn_down.weight", "Q5_K");
    CHECK_TYPE(p, "blk.7.ffn_down.weight", "Q5_K");
    CHECK_TYPE(p, "blk.0.attn_v.weight", "Q8_0");
    /* The rules' counters still count the overridden attn_v: layer 3 keeps Q6_K. */
    CHECK_TYPE(p, "blk.3.attn_v.weight", "Q6_K");
    CHECK_TYPE(p, "blk.1.attn_v.weight", "Q4_K");
    CHECK_TYPE(p, "output.weight", "Q4_0");
    CHECK(strstr(find(p, "blk.1.ffn_down.weight")->choice, "--tensor-type") != NULL);
    ql_quant_plan_free(p);
    /* --output-tensor-type wins over a matching override. */
    cfg.head_type = QL_TYPE_Q8_0;
    p = plan_of(&LLAMA8_GQA4, &cfg, &err);
    CHECK_TYPE(p, "output.weight", "Q8_0");
    ql_quant_plan_free(p);
    /* In a pure plan too, and never on kept or 1-D tensors. */
    cfg = (ql_quant_config){.weight_type = QL_TYPE_Q4_0,
                            .overrides = o,
                            .head_type = QL_TYPE_INVALID,
                            .embd_type = QL_TYPE_INVALID};
    p = plan_of(&LLAMA8_GQA4, &cfg, &err);
    CHECK_TYPE(p, "blk.5.ffn_down.weight", "Q5_K");
    CHECK_TYPE(p, "blk.5.attn_v.weight", "Q4_0");
    ql_quant_plan_free(p);
    ql_quant_overrides_free(o);
    /* A pattern that can match nothing matches every tensor, as std::regex_search. */
    const char *all[] = {".*=Q8_0"};
    CHECK_OK(ql_quant_overrides_parse(all, 1, &o, &err), &err);
    CHECK_OK(ql_quant_overrides_match(o, "token_embd.weight", &r, &err), &err);
    CHECK_EQ_INT(r, 0);
    ql_quant_overrides_free(o);

    /* Bad rules are errors naming the rule and what is wrong. */
    static const struct {
        const char *rule, *says;
    } bad[] = {
        {"attn_v", "expected REGEX=TYPE"},    {"=Q8_0", "pattern is empty"},
        {"attn_v=", "type is missing"},       {"attn_v=Q9_9", "unknown type 'Q9_9'"},
        {"attn_v=Q8_K", "activation-only"},   {"attn_(v=Q8_0", "attn_(v"},
        {"attn_v\\b=Q8_0", "attn_v\\b=Q8_0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o = NULL;
        ql_status st = ql_quant_overrides_parse(&bad[i].rule, 1, &o, &err);
        CHECK_MSG(st != QL_OK && o == NULL && strstr(err.msg, bad[i].rule) &&
                      strstr(err.msg, bad[i].says),
                  "rule '%s': status %d, '%s'", bad[i].rule, (int)st, st ? err.msg : "");
    }
}

/* ------------------------------------------------------------------------- */
/* Importance and errors                                                      */

static bool covers_none(const void *ctx, int64_t i, const ql_quant_plan_entry *e)
{
    (void)ctx;
    (void)i;
    (void)e;
    return false;
}

static void importance_and_errors(void)
{
    ql_error err;
    /* A mix that needs an imatrix refuses to plan without one. */
    ql_quant_config cfg = {.mix = ql_quant_mix_by_name("IQ1_M"),
                           .head_type = QL_TYPE_INVALID,
                           .embd_type = QL_TYPE_INVALID};
    CHECK(plan_of(&LLAMA8_GQA4, &cfg, &err) == NULL);
    CHECK(strstr(err.msg, "test-model") && strstr(err.msg, "IQ1_M needs an importance matrix"));
    /* llama-quantize's per-tensor list: Q2_K in Q2_K_S but for token_embd. */
    cfg = (ql_quant_config){.mix = ql_quant_mix_by_name("Q2_K_S"),
                            .has_imatrix = true,
                            .head_type = QL_TYPE_INVALID,
                            .embd_type = QL_TYPE_INVALID};
    ql_quant_plan *p = plan_of(&LLAMA8_GQA1, &cfg, &err);
    CHECK(ql_quant_plan_needs_importance(p, find(p, "blk.0.attn_q.weight")));
    CHECK(!ql_quant_plan_needs_importance(p, find(p, "token_embd.weight")));
    CHECK(!ql_quant_plan_needs_importance(p, find(p, "output.weight")));
    int64_t n = -1;
    CHECK_EQ_INT(ql_quant_plan_check_importance(p, covers_none, NULL, &n, &err), QL_EINVAL);
    CHECK(strstr(err.msg, "blk.7.attn_q.weight") && strstr(err.msg, "Q2_K_S")); /* file order */
    ql_quant_plan_free(p);
    /* IQ2_M's IQ2_S tensors need one too (llama-quantize's list, not ggml's). */
    cfg.mix = ql_quant_mix_by_name("IQ2_M");
    p = plan_of(&LLAMA8_GQA1, &cfg, &err);
    CHECK(ql_quant_plan_needs_importance(p, find(p, "blk.3.attn_q.weight")));
    ql_quant_plan_free(p);
    /* A pure plan falls back instead. */
    cfg = (ql_quant_config){
        .weight_type = QL_TYPE_IQ2_XS, .head_type = QL_TYPE_INVALID, .embd_type = QL_TYPE_INVALID};
    p = plan_of(&LLAMA8_GQA1, &cfg, &err);
    CHECK_OK(ql_quant_plan_check_importance(p, covers_none, NULL, &n, &err), &err);
    CHECK_EQ_INT(n, 8 * 7 + 2); /* every 2-D tensor */
    CHECK_TYPE(p, "blk.0.attn_q.weight", "Q2_K");
    ql_quant_plan_free(p);

    /* The rules need llama-family hyper-parameters and one attn_v per layer. */
    cfg = (ql_quant_config){.mix = ql_quant_mix_by_name("Q4_K_M"),
                            .head_type = QL_TYPE_INVALID,
                            .embd_type = QL_TYPE_INVALID};
    shape s = LLAMA8_GQA4;
    s.arch = "gpt2";
    CHECK(plan_of(&s, &cfg, &err) == NULL);
    CHECK(strstr(err.msg, "architecture 'gpt2'") != NULL);
    model *md = make_model(&LLAMA8_GQA4);
    md->m.n_layer = 9;
    p = NULL;
    CHECK_EQ_INT(ql_quant_plan_make(&md->m, &cfg, &p, &err), QL_EINVAL);
    CHECK(strstr(err.msg, "8 attn_v tensors for 9 layers") != NULL);
    /* ... but not for --pure. */
    cfg.pure = true;
    CHECK_OK(ql_quant_plan_make(&md->m, &cfg, &p, &err), &err);
    ql_quant_plan_free(p);
    free(md);
    /* A single tensor cannot be planned by a mix's rules. */
    cfg.pure = false;
    ql_quant_plan_entry e;
    const int64_t ne[2] = {256, 256};
    CHECK_EQ_INT(
        ql_quant_plan_tensor(&cfg, "blk.0.attn_v.weight", 2, ne, QL_TYPE_F32, true, &e, &err),
        QL_EINVAL);
}

/* ------------------------------------------------------------------------- */
/* From a GGUF file                                                           */

/* A synthetic llama model written by qlab synth: ql_quant_plan_build reads its
 * hyper-parameters (4 layers, 8 heads, 2 kv heads: GQA 4) and gives the table. */
static void from_synthetic_file(void)
{
    ql_synth_opts o;
    ql_synth_defaults(&o);
    o.layers = 4;
    o.heads = 8;
    o.kv_heads = 2;
    ql_error err;
    const char *path = qlt_tmp("synth-mix.gguf");
    ql_status st = ql_synth_write(&o, path, &err);
    CHECK_OK(st, &err);
    if (st)
        return;
    ql_gguf *g = NULL;
    CHECK_OK(ql_gguf_open(&g, path, &err), &err);
    if (!g)
        return;
    const ql_quant_config cfg = {.mix = ql_quant_mix_by_name("Q4_K_M"),
                                 .head_type = QL_TYPE_INVALID,
                                 .embd_type = QL_TYPE_INVALID};
    ql_quant_plan *p = NULL;
    CHECK_OK(ql_quant_plan_build(g, &cfg, &p, &err), &err);
    if (p) {
        static const expect ex[] = {{"attn_v", "Q4_K Q4_K Q6_K Q6_K"},
                                    {"ffn_down", "Q4_K Q4_K Q6_K Q6_K"},
                                    {"attn_q", "Q4_K"},
                                    {"output.weight", "Q6_K"},
                                    {NULL, NULL}};
        check_types("synth Q4_K_M", p, 4, ex);
        /* Q2_K with GQA 4 reads the head counts from the file. */
        ql_quant_plan_free(p);
        const ql_quant_config q2 = {.mix = ql_quant_mix_by_name("Q2_K"),
                                    .head_type = QL_TYPE_INVALID,
                                    .embd_type = QL_TYPE_INVALID};
        CHECK_OK(ql_quant_plan_build(g, &q2, &p, &err), &err);
        if (p)
            CHECK_TYPE(p, "blk.1.attn_v.weight", "Q4_K");
    }
    ql_quant_plan_free(p);
    ql_gguf_close(g);
}

int main(void)
{
    mixes_by_hand();
    mix_names();
    options();
    overrides();
    importance_and_errors();
    from_synthetic_file();
    return qlt_done();
}
