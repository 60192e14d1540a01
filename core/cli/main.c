/* qlab: entry point and subcommand dispatch. */
#include <gsl/gsl_errno.h>
#include <stdio.h>
#include <string.h>

#include "base/gemm.h"
#include "base/suggest.h"
#include "cli.h"
#include "commands.h"

static const ql_cli_command commands[] = {
    {"bench", ql_cmd_bench, "measure speed (bench quant | forward | act)"},
    {"compare", ql_cmd_compare, "two configs on the same tokens, with bootstrap intervals"},
    {"data", ql_cmd_data, "list the named models and texts, verify their sha256"},
    {"eval", ql_cmd_eval, "perplexity of a model on a text (llama-perplexity protocol)"},
    {"fit", ql_cmd_fit, "choose a type per tensor to fill a byte budget; write the GGUF"},
    {"generate", ql_cmd_generate, "greedy decoding from a prompt (sanity tool)"},
    {"imatrix", ql_cmd_imatrix, "compute an importance matrix over a calibration text"},
    {"imatrix-convert", ql_cmd_imatrix_convert, "convert an imatrix between .dat and GGUF"},
    {"inspect", ql_cmd_inspect, "validate a GGUF file and list its keys and tensors"},
    {"merge", ql_cmd_merge, "fold shard results databases into one (by run identity)"},
    {"quantize", ql_cmd_quantize, "write a GGUF model in another weight type (llama.cpp-exact)"},
    {"query", ql_cmd_query, "read-only SQL or a named query on the results database"},
    {"report", ql_cmd_report, "format-comparison tables and plots from the results database"},
    {"sweep", ql_cmd_sweep, "run a sweep file into the results store (or --list its configs)"},
    {"synth", ql_cmd_synth, "write a synthetic llama-architecture model"},
    {"tokenize", ql_cmd_tokenize, "tokenize a text with a model's tokenizer (as llama.cpp)"},
    {"version", ql_cmd_version, "print the qlab version and commit"},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab <command> [options] [arguments]\n\n"
           "qlab: a testbed for LLM weight-quantization accuracy experiments.\n\n"
           "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        printf("  %-16s %s\n", commands[i].name, commands[i].summary);
    printf("\n");
    ql_opt_print_options(stdout, p);
    printf("\n"
           "Run 'qlab <command> --help' for the options of a command (or man qlab-<command>).\n"
           "Every command takes --name=value and --name value alike, short aliases as\n"
           "llama.cpp spells them (-m model, -f text file, -c context, -t threads, -o\n"
           "output) and llama.cpp's long names where the meaning is the same (--ctx-size,\n"
           "--file, --output-file, --n-predict, --kl-divergence-base, ...), options before\n"
           "or after its arguments, and '--' to end the options. A long name may be\n"
           "shortened to any unique prefix (--thr 2); a mistyped one gets a suggestion.\n"
           "--threads, where a command has it, defaults to OMP_NUM_THREADS (its first\n"
           "number), else all cores. QLAB_GEMM picks the weight products' kernel: auto\n"
           "(the default) multiplies F16 and BF16 weights on qlab's own kernel, reading\n"
           "them directly, and f32 ones on OpenBLAS; dot puts every weight product on\n"
           "qlab's kernel (the same bits on every CPU); blas every product on OpenBLAS.\n"
           "Runs record which.\n"
           "A model may be a split set: give its first file,\n"
           "NAME-00001-of-0000N.gguf.\n"
           "Exit codes: 0 success, 1 runtime error, 2 usage error.\n");
}

int main(int argc, char **argv)
{
    /* GSL's default handler aborts; qlab reports errors through statuses instead. */
    gsl_set_error_handler_off();
    ql_error err = {0};
    if (ql_gemm_select_from_env(&err))
        return ql_cli_fail(&err);
    bool version = false;
    const char *args[1];
    const ql_opt opts[] = {
        ql_opt_flag("version", 0, &version, "print the qlab version and commit, as 'qlab version'"),
    };
    static const char *const names[] = {"the command"};
    ql_opt_parser p = {.prog = "qlab",
                       .opts = opts,
                       .n_opts = QL_OPT_COUNT(opts),
                       .args = args,
                       .max_args = 1,
                       .arg_names = names,
                       .stop_at_arg = true,
                       .help = help};
    const int rc = ql_opt_parse(&p, argc, argv);
    if (rc != QL_OPT_GO_ON)
        return rc;
    if (version) {
        char *vargv[] = {(char *)"version", NULL};
        return ql_cmd_version(1, vargv);
    }
    if (!args[0])
        return ql_opt_usage(&p, "missing the command");
    if (strcmp(args[0], "help") == 0) {
        help(&p);
        return QL_EXIT_OK;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(args[0], commands[i].name) == 0)
            return commands[i].run(argc - p.next, argv + p.next);
    const char *cmd_names[N_COMMANDS + 1];
    for (size_t i = 0; i < N_COMMANDS; i++)
        cmd_names[i] = commands[i].name;
    cmd_names[N_COMMANDS] = "help";
    char hint[64];
    return ql_opt_usage(
        &p, "unknown command '%s'%s", args[0],
        ql_did_you_mean(hint, sizeof hint, args[0], cmd_names, N_COMMANDS + 1, NULL));
}
