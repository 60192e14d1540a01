/* qlab imatrix-convert: between llama.cpp's legacy .dat and GGUF imatrix files. */
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "model/imatrix_io.h"

/* llama-imatrix's default context size: the chunk size it assumes for a .dat it
 * loads with --in-file, since the .dat format does not record it. */
#define DEFAULT_DAT_CHUNK_SIZE 512

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab imatrix-convert IN OUT [--format dat|gguf] [--chunk-size N]\n"
           "\n"
           "Reads an importance matrix in either of llama.cpp's formats (GGUF is recognised\n"
           "by its magic, anything else is read as legacy .dat) and writes it to OUT in the\n"
           "format given by --format, or else by OUT's extension (.dat or .gguf).\n"
           "The importance each quantizer gets (mean of x^2 per input column) is the same\n"
           "in both files.\n"
           "\n");
    ql_opt_print_options(stdout, p);
    printf("\n"
           "A .dat output keeps only the last dataset name and drops the sums of x\n"
           "(<name>.in_sum) of newer GGUF files, as llama-imatrix does.\n"
           "Exit codes: 0 written, 1 unreadable or malformed input or failed write, 2 usage.\n");
}

int ql_cmd_imatrix_convert(int argc, char **argv)
{
    const char *args[2];
    ql_imatrix_format format = QL_IMATRIX_GGUF;
    int chunk_size = 0;
    char chunk_help[320];
    snprintf(chunk_help, sizeof chunk_help,
             "tokens per chunk of a .dat input, which the .dat format does\n"
             "not store; sets GGUF's imatrix.chunk_size and the token\n"
             "counts (default %d, what llama-imatrix assumes; use the -c\n"
             "the .dat was made with, e.g. 128)",
             DEFAULT_DAT_CHUNK_SIZE);
    const ql_opt opts[] = {
        ql_opt_alias(ql_opt_str("output", 'o', &args[1], "OUT",
                                "the output file, instead of the OUT argument"),
                     "output-file"),
        ql_opt_func("format", 0, ql_cli_parse_imatrix_format, &format, "F",
                    "dat (legacy binary) or gguf (GGUF imatrix: <name>.in_sum2,\n"
                    "<name>.counts, imatrix.* keys)"),
        ql_opt_int("chunk-size", 0, &chunk_size, 1, 1 << 24, "N", chunk_help),
    };
    static const char *const names[] = {"IN", "OUT"};
    ql_opt_parser p = {.prog = "qlab imatrix-convert",
                       .opts = opts,
                       .n_opts = QL_OPT_COUNT(opts),
                       .args = args,
                       .max_args = 2,
                       .arg_names = names,
                       .n_required = 2,
                       .help = help};
    const int prc = ql_opt_parse(&p, argc, argv);
    if (prc != QL_OPT_GO_ON)
        return prc;
    const char *in = args[0], *out = args[1];
    if (!ql_opt_given(&p, "format") && !ql_imatrix_format_from_name(out, &format))
        return ql_opt_usage(&p, "cannot tell the format of '%s' (not .dat or .gguf); use --format",
                            out);

    ql_error err;
    ql_error_clear(&err);
    ql_imatrix *im = NULL;
    if (ql_imatrix_read(in, &im, &err))
        return ql_cli_fail(&err);
    char warning[QL_ERROR_MSG_MAX];
    if (ql_imatrix_dropped_warning(im, warning, sizeof warning)) {
        fputs("qlab: warning: ", stderr);
        ql_fwrite_terminal(stderr, warning, strlen(warning));
        fputs("; the output leaves them out\n", stderr);
    }
    int rc = QL_EXIT_OK;
    if (im->chunk_size == 0) {
        /* A .dat input: counts are chunks until a chunk size is known. */
        if (format == QL_IMATRIX_GGUF) {
            int cs = chunk_size ? chunk_size : DEFAULT_DAT_CHUNK_SIZE;
            if (!chunk_size)
                fprintf(stderr,
                        "qlab: note: %s does not record its chunk size; assuming %d tokens "
                        "(--chunk-size). The importance values do not depend on it.\n",
                        in, cs);
            if (ql_imatrix_set_chunk_size(im, cs, &err)) {
                rc = ql_cli_fail(&err);
                goto out;
            }
        }
    } else if (chunk_size && chunk_size != im->chunk_size) {
        rc = ql_opt_usage(&p, "--chunk-size is for .dat input; %s records chunks of %lld tokens",
                          in, (long long)im->chunk_size);
        goto out;
    }
    if (ql_imatrix_write(im, out, format, &err)) {
        rc = ql_cli_fail(&err);
        goto out;
    }
    printf("%s -> %s (%s): %lld entries, %lld chunks", in, out, ql_imatrix_format_name(format),
           (long long)im->n_entries, (long long)im->chunk_count);
    if (im->chunk_size)
        printf(" of %lld tokens", (long long)im->chunk_size);
    for (int64_t i = 0; i < im->n_datasets; i++)
        printf("%s%s", i ? ", " : "; datasets: ", im->datasets[i]);
    printf("\n");
out:
    ql_imatrix_free(im);
    return rc;
}
