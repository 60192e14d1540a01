/* qlab: entry point and subcommand dispatch. */
#include <gsl/gsl_errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"

static const ql_cli_command commands[] = {
    {"bench", ql_cmd_bench, "measure speed (bench quant | forward | act)"},
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

static void usage(FILE *out)
{
    fprintf(out, "usage: qlab <command> [options]\n\n"
                 "qlab: a testbed for LLM weight-quantization accuracy experiments.\n\n"
                 "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-16s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nRun 'qlab <command> --help' for the options of a command.\n"
                 "Exit codes: 0 success, 1 runtime error, 2 usage error.\n");
}

int main(int argc, char **argv)
{
    /* GSL's default handler aborts; qlab reports errors through statuses instead. */
    gsl_set_error_handler_off();
    if (argc < 2) {
        usage(stderr);
        return QL_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return QL_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0)
        return ql_cmd_version(1, argv + 1);
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "qlab: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return QL_EXIT_USAGE;
}
