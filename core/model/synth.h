/* qlab: deterministic synthetic llama-architecture models (`qlab synth`).
 *
 * The weights are random but shaped like the statistics that make real models
 * hard to quantize:
 *   - heavy tails: every 2-D weight is Student-t (nu = 5), scaled to std gain/sqrt(n_in);
 *   - hot input channels: in every product weight, n_in/128 (at least one) input
 *     columns are scaled by 3..8, so a few columns carry much larger norms;
 *   - massive activations: a handful of residual channels (n_embd/128, 2..8) get
 *     attn_norm/ffn_norm weights of 20..60 instead of about 1, so every product that
 *     reads the residual stream sees those channels tens of times larger than the
 *     rest (the weight columns reading them are scaled down in proportion, so the
 *     products stay in range, as in trained models).
 * Randomness is GSL's MT19937 seeded with the seed, drawn in file order, so the same
 * options give a byte-identical file on every machine.
 *
 * The tokenizer (tokenizer.ggml.*) is copied from a real model (stories260K by
 * default, 512 tokens), so the model reads text. A --vocab larger than the
 * tokenizer's pads the vocabulary with "<unused_N>" tokens of type UNUSED (5) that
 * the tokenizer never emits (their embedding rows exist and the head scores them, as
 * for the reserved tokens of real vocabularies); a smaller --vocab is an error.
 * The file carries every key llama.cpp needs to load the model; qwen2 and qwen2moe
 * models get Q, K and V biases (Gaussian, std QWEN_BIAS_STD), qwen3 and qwen3moe the
 * per-head Q and K norms. With experts (llama, qwen2moe, qwen3moe), every block's
 * feed-forward is a mixture: a router ffn_gate_inp (F32, as converters write it) whose
 * logits have a standard deviation of about ROUTER_GAIN, so that routing is decisive
 * as in trained models, and the experts stacked in ffn_{gate,up,down}_exps (each its
 * own matrix); qwen2moe adds the shared expert and its sigmoid gate. */
#ifndef QL_SYNTH_H
#define QL_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct {
    int dim; /* embedding length */
    int ff;  /* feed-forward length */
    int layers;
    int heads;
    int kv_heads;
    int vocab; /* 0: the tokenizer's size */
    uint64_t seed;
    int32_t type;              /* QL_TYPE_F32, F16 or BF16 for the 2-D weights */
    int ctx_train;             /* {arch}.context_length written to the file */
    const char *tokenizer_src; /* model name or path to copy tokenizer.ggml.* from */
    const char *arch;          /* llama, qwen2, qwen3, qwen2moe or qwen3moe */
    bool tied;                 /* no output.weight: the head reads token_embd.weight */
    float rope_base;           /* {arch}.rope.freq_base */
    int head_dim;              /* 0: dim / heads; else attention.key_length */
    int experts;               /* 0: dense; else expert_count (llama, qwen2moe, qwen3moe) */
    int experts_used;          /* expert_used_count */
    int expert_ff;             /* one expert's width (llama: ff itself) */
    int shared_ff;             /* qwen2moe: the shared expert's width (0: ff) */
} ql_synth_opts;

/* Defaults: a 2M-parameter model (dim 256, ff 768, 2 layers, 4 heads, 2 kv heads),
 * seed 1, F32, context 2048, tokenizer from stories260K, llama, untied, rope base 1e4. */
void ql_synth_defaults(ql_synth_opts *o);

/* The shapes of a real model by name (ql_synth_presets lists them): sets the
 * dimensions, vocabulary, architecture, tying and rope base; false when unknown.
 *   2M, 30M          qlab's small models (llama)
 *   llama3.2-1b      2048 / 8192, 16 layers, 32 heads (8 kv), vocab 128256, tied
 *   llama3.1-8b      4096 / 14336, 32 layers, 32 heads (8 kv), vocab 128256
 *   qwen2.5-0.5b     896 / 4864, 24 layers, 14 heads (2 kv), vocab 151936, tied, qwen2
 *   qwen2.5-7b       3584 / 18944, 28 layers, 28 heads (4 kv), vocab 152064, qwen2
 *   qwen3-0.6b       1024 / 3072, 28 layers, 16 heads (8 kv) x 128, vocab 151936, tied
 *   qwen3-8b         4096 / 12288, 36 layers, 32 heads (8 kv) x 128, vocab 151936
 *   qwen3-30b-a3b    2048, 48 layers, 32 heads (4 kv) x 128, 128 experts of 768, 8 used,
 *                    vocab 151936, qwen3moe
 *   mixtral-8x7b     4096 / 14336, 32 layers, 32 heads (8 kv), 8 experts, 2 used, vocab
 *                    32000, llama with experts */
bool ql_synth_preset(const char *name, ql_synth_opts *o);
/* "2M, 30M, llama3.2-1b, ..." for messages and --help. */
const char *ql_synth_presets(void);

/* Writes the model to path. Rejects shapes llama.cpp cannot load (dim not a
 * multiple of heads, odd head size, heads not a multiple of kv_heads). */
ql_status ql_synth_write(const ql_synth_opts *o, const char *path, ql_error *err);

/* A synthetic model named in a sweep file: "synth:" followed by a preset ("2M",
 * "30M", "qwen2.5-0.5b", see ql_synth_preset) and/or comma-separated key=value pairs
 * with the option names of `qlab synth` (dim, ff, layers, heads, kv-heads, vocab, seed,
 * type, arch, tied, rope-base, head-dim, experts, experts-used, expert-ff, shared-ff), e.g.
 * "synth:30M", "synth:qwen2.5-0.5b,type=F16", "synth:dim=512,ff=1536,layers=4,seed=7". Errors name
 * the spec and the bad item. */
bool ql_synth_is_spec(const char *s);
ql_status ql_synth_parse_spec(const char *spec, ql_synth_opts *o, ql_error *err);

/* Makes sure the model of a spec exists as dir/synth-<hash>.gguf (writing it once;
 * the file is deterministic, so concurrent writers produce the same bytes) and
 * returns its path. */
ql_status ql_synth_materialize(const char *spec, const char *dir, char *path, size_t size,
                               ql_error *err);

/* Parameters the options give (2-D weights, norms, embeddings and head). */
int64_t ql_synth_n_params(const ql_synth_opts *o, int vocab);

#endif
