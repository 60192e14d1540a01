/* qlab synth: write a deterministic synthetic llama-architecture GGUF. */
#include <inttypes.h>
#include <stdio.h>

#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "formats/types.h"
#include "model/synth.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab synth -o OUT.gguf [--dim D] [--ff F] [--layers L] [--heads H]\n"
           "                  [--kv-heads K] [--vocab V] [--seed S] [--type F32|F16]\n"
           "                  [--ctx N] [--tokenizer MODEL] [--preset NAME] [--arch A] [--tied]\n"
           "                  [--rope-base B] [--head-dim N] [--experts N --experts-used K\n"
           "                  [--expert-ff F] [--shared-ff F]]\n\n"
           "Writes a deterministic synthetic llama-architecture model whose weights have the\n"
           "statistics that make quantization hard: Student-t entries, a few input columns\n"
           "with much larger norms, and norm weights that create a handful of massive\n"
           "activation channels. The tokenizer is copied from MODEL (default stories260K,\n"
           "512 tokens); a larger --vocab pads it with unused tokens. Row lengths that are\n"
           "multiples of 256 let every K-quant apply. With --experts, every block's\n"
           "feed-forward is a mixture of experts (llama as Mixtral, qwen2moe with its shared\n"
           "expert, qwen3moe as Qwen3-30B-A3B) whose router makes decisive choices.\n\n");
    ql_opt_print_options(stdout, p);
    printf("\n"
           "Defaults: about 2M parameters. A 30M model:\n"
           "  qlab synth -o synth-30M.gguf --dim 512 --ff 1536 --layers 10 --heads 8 --kv-heads "
           "4\n"
           "Six blocks of Qwen3-30B-A3B's real shapes, in BF16:\n"
           "  qlab synth -o a3b-6.gguf --preset qwen3-30b-a3b --layers 6 --type BF16\n");
}

int ql_cmd_synth(int argc, char **argv)
{
    ql_synth_opts o;
    ql_synth_defaults(&o);
    const char *out = NULL;
    int64_t seed = (int64_t)o.seed;
    static const int32_t types[] = {QL_TYPE_F32, QL_TYPE_F16, QL_TYPE_BF16};
    const char *preset = NULL, *arch = NULL;
    bool tied = false;
    double rope_base = 0;
    char h[8][64];
    snprintf(h[0], sizeof h[0], "embedding width (default %d)", o.dim);
    snprintf(h[1], sizeof h[1], "feed-forward width (default %d)", o.ff);
    snprintf(h[2], sizeof h[2], "blocks (default %d)", o.layers);
    snprintf(h[3], sizeof h[3], "attention heads (default %d)", o.heads);
    snprintf(h[4], sizeof h[4], "K/V heads (default %d)", o.kv_heads);
    snprintf(h[5], sizeof h[5], "vocabulary size (default: the tokenizer's)");
    snprintf(h[6], sizeof h[6], "seed of the weights (default %lld)", (long long)seed);
    snprintf(h[7], sizeof h[7], "the model's context_length (default %d)", o.ctx_train);
    char preset_help[160];
    snprintf(preset_help, sizeof preset_help,
             "a real model's shapes (%s); later options override them", ql_synth_presets());
    const ql_opt opts[] = {
        ql_opt_required(ql_opt_alias(
            ql_opt_str("output", 'o', &out, "OUT.gguf", "the model file to write"), "output-file")),
        ql_opt_str("preset", 0, &preset, "NAME", preset_help),
        ql_opt_int("dim", 0, &o.dim, 1, 1 << 20, "D", h[0]),
        ql_opt_int("ff", 0, &o.ff, 1, 1 << 20, "F", h[1]),
        ql_opt_int("layers", 0, &o.layers, 1, 1 << 20, "L", h[2]),
        ql_opt_int("heads", 0, &o.heads, 1, 1 << 20, "H", h[3]),
        ql_opt_int("kv-heads", 0, &o.kv_heads, 1, 1 << 20, "K", h[4]),
        ql_opt_int("vocab", 0, &o.vocab, 0, 1 << 20, "V", h[5]),
        ql_opt_i64("seed", 's', &seed, 0, INT64_MAX, "S", h[6]),
        ql_opt_type("type", 0, &o.type, types, QL_OPT_COUNT(types), "F32|F16|BF16",
                    "type of the weight matrices (default F32)"),
        ql_opt_str("arch", 0, &arch, "A",
                   "llama (default), qwen2 (Q, K and V biases), qwen3 (Q and K norms), "
                   "qwen2moe or qwen3moe (experts)"),
        ql_opt_int("head-dim", 0, &o.head_dim, 0, 1 << 12, "N",
                   "head size (default dim / heads; qwen3 uses 128 with more heads)"),
        ql_opt_int("experts", 0, &o.experts, 0, 1024, "N", "experts per block (default 0: dense)"),
        ql_opt_int("experts-used", 0, &o.experts_used, 0, 1024, "K", "experts per token"),
        ql_opt_int("expert-ff", 0, &o.expert_ff, 0, 1 << 20, "F",
                   "one expert's width (qwen2moe, qwen3moe; llama's experts are --ff wide)"),
        ql_opt_int("shared-ff", 0, &o.shared_ff, 0, 1 << 20, "F",
                   "qwen2moe: the shared expert's width (default --ff)"),
        ql_opt_flag("tied", 0, &tied, "no output.weight: the head reads token_embd.weight"),
        ql_opt_double("rope-base", 0, &rope_base, 1e-3, 1e12, "B",
                      "rope.freq_base (default 10000)"),
        ql_opt_int("ctx", 0, &o.ctx_train, 1, 1 << 20, "N", h[7]),
        ql_opt_str("tokenizer", 0, &o.tokenizer_src, "MODEL",
                   "the model whose tokenizer is copied (default stories260K)"),
    };
    ql_opt_parser p = {
        .prog = "qlab synth", .opts = opts, .n_opts = QL_OPT_COUNT(opts), .help = help};
    const int rc = ql_opt_parse(&p, argc, argv);
    if (rc != QL_OPT_GO_ON)
        return rc;
    /* The preset first, then what the command line gives explicitly. */
    ql_synth_opts given = o;
    if (preset) {
        ql_synth_defaults(&o);
        if (!ql_synth_preset(preset, &o))
            return ql_opt_usage(&p, "--preset: unknown '%s' (presets: %s)", preset,
                                ql_synth_presets());
        static const char *const dims[] = {"dim",          "ff",        "layers",   "heads",
                                           "kv-heads",     "vocab",     "head-dim", "experts",
                                           "experts-used", "expert-ff", "shared-ff"};
        int *const to[] = {&o.dim,          &o.ff,        &o.layers,   &o.heads,
                           &o.kv_heads,     &o.vocab,     &o.head_dim, &o.experts,
                           &o.experts_used, &o.expert_ff, &o.shared_ff};
        const int from[] = {given.dim,          given.ff,        given.layers,   given.heads,
                            given.kv_heads,     given.vocab,     given.head_dim, given.experts,
                            given.experts_used, given.expert_ff, given.shared_ff};
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
            if (ql_opt_given(&p, dims[i]))
                *to[i] = from[i];
        o.type = given.type;
        o.ctx_train = given.ctx_train;
        o.tokenizer_src = given.tokenizer_src;
    }
    if (arch)
        o.arch = arch;
    if (ql_opt_given(&p, "tied"))
        o.tied = tied;
    if (ql_opt_given(&p, "rope-base"))
        o.rope_base = (float)rope_base;
    o.seed = (uint64_t)seed;
    ql_error err;
    ql_error_clear(&err);
    double t0 = ql_now();
    if (ql_synth_write(&o, out, &err))
        return ql_cli_fail(&err);
    char experts[96] = "";
    if (o.experts > 0)
        snprintf(experts, sizeof experts, ", %d experts (%d used)", o.experts, o.experts_used);
    printf("wrote %s: %s, dim %d, ff %d, %d layers, %d heads (%d kv)%s%s, seed %" PRIu64
           ", %s, %.1fs\n",
           out, o.arch, o.dim, o.ff, o.layers, o.heads, o.kv_heads, experts, o.tied ? ", tied" : "",
           o.seed, ql_type_name(o.type), ql_now() - t0);
    return QL_EXIT_OK;
}
