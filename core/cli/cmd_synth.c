/* qlab synth: write a deterministic synthetic llama-architecture GGUF. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "formats/types.h"
#include "model/synth.h"

static void help(void)
{
    printf(
        "usage: qlab synth -o OUT.gguf [--dim D] [--ff F] [--layers L] [--heads H]\n"
        "                  [--kv-heads K] [--vocab V] [--seed S] [--type F32|F16]\n"
        "                  [--ctx N] [--tokenizer MODEL]\n\n"
        "Writes a deterministic synthetic llama-architecture model whose weights have the\n"
        "statistics that make quantization hard: Student-t entries, a few input columns\n"
        "with much larger norms, and norm weights that create a handful of massive\n"
        "activation channels. The tokenizer is copied from MODEL (default stories260K,\n"
        "512 tokens); a larger --vocab pads it with unused tokens. Row lengths that are\n"
        "multiples of 256 let every K-quant apply.\n\n"
        "Defaults: --dim 256 --ff 768 --layers 2 --heads 4 --kv-heads 2 --seed 1\n"
        "--type F32 --ctx 2048 (about 2M parameters). A 30M model:\n"
        "  qlab synth -o synth-30M.gguf --dim 512 --ff 1536 --layers 10 --heads 8 --kv-heads 4\n");
}

int ql_cmd_synth(int argc, char **argv)
{
    ql_synth_opts o;
    ql_synth_defaults(&o);
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help();
            return QL_EXIT_OK;
        }
        if (i + 1 >= argc)
            return ql_cli_usage("synth", "unknown option or missing value: '%s'", a);
        const char *v = argv[++i];
        int *ip = NULL;
        if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0)
            out = v;
        else if (strcmp(a, "--dim") == 0)
            ip = &o.dim;
        else if (strcmp(a, "--ff") == 0)
            ip = &o.ff;
        else if (strcmp(a, "--layers") == 0)
            ip = &o.layers;
        else if (strcmp(a, "--heads") == 0)
            ip = &o.heads;
        else if (strcmp(a, "--kv-heads") == 0)
            ip = &o.kv_heads;
        else if (strcmp(a, "--vocab") == 0)
            ip = &o.vocab;
        else if (strcmp(a, "--ctx") == 0)
            ip = &o.ctx_train;
        else if (strcmp(a, "--tokenizer") == 0)
            o.tokenizer_src = v;
        else if (strcmp(a, "--seed") == 0) {
            int64_t s;
            if (!ql_parse_i64(v, &s) || s < 0)
                return ql_cli_usage("synth", "--seed expects a non-negative integer, got '%s'", v);
            o.seed = (uint64_t)s;
        } else if (strcmp(a, "--type") == 0) {
            const ql_type_traits *t = ql_type_by_name(v);
            if (!t || (t->type != QL_TYPE_F32 && t->type != QL_TYPE_F16))
                return ql_cli_usage("synth", "--type expects F32 or F16, got '%s'", v);
            o.type = t->type;
        } else
            return ql_cli_usage("synth", "unknown option '%s'", a);
        if (ip &&
            !ql_cli_parse_int_opt("synth", a, v, strcmp(a, "--vocab") == 0 ? 0 : 1, 1 << 20, ip))
            return QL_EXIT_USAGE;
    }
    if (!out)
        return ql_cli_usage("synth", "missing -o OUT.gguf");
    ql_error err;
    ql_error_clear(&err);
    double t0 = ql_now();
    if (ql_synth_write(&o, out, &err))
        return ql_cli_fail(&err);
    printf("wrote %s: llama, dim %d, ff %d, %d layers, %d heads (%d kv), seed %" PRIu64
           ", %s, %.1fs\n",
           out, o.dim, o.ff, o.layers, o.heads, o.kv_heads, o.seed, ql_type_name(o.type),
           ql_now() - t0);
    return QL_EXIT_OK;
}
