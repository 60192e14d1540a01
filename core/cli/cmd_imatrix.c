/* qlab imatrix: compute an importance matrix over a calibration text, as
 * llama-imatrix does, and write it in either of llama.cpp's formats. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/data.h"
#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "experiment/imatrix.h"
#include "formats/types.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/tokenizer.h"

/* llama-imatrix's default context. */
#define DEFAULT_CTX 512

static void help(void)
{
    printf("usage: qlab imatrix MODEL --text FILE|NAME -o OUT [--ctx N] [--chunks K]\n"
           "                    [--process-output] [--format dat|gguf] [--kv-type f32|f16]\n"
           "                    [--threads N] [--quiet]\n"
           "\n"
           "Runs the reference forward pass over a calibration text and records, for every\n"
           "matmul weight of the blocks (blk.*), the sum of x_j^2 over all tokens per input\n"
           "column j and the token count: the importance matrix llama-quantize (and\n"
           "'qlab quantize --imatrix') weighs the quantization error with.\n"
           "\n"
           "It follows llama-imatrix: the text is tokenized once (BOS first) and cut into\n"
           "chunks of N tokens (default %d); each chunk starts with BOS and every position\n"
           "is counted. token_embd (a lookup) gets no entry, output.weight only with\n"
           "--process-output.\n"
           "\n"
           "  --text FILE|NAME  calibration text: a path or a name from datasets/manifest.tsv\n"
           "  -o, --output OUT  the imatrix file; GGUF unless --format dat or OUT ends in .dat\n"
           "  --ctx N           tokens per chunk (default %d)\n"
           "  --chunks K        use at most K chunks (default: every whole chunk)\n"
           "  --process-output  also collect output.weight (the LM head)\n"
           "  --format F        dat (legacy binary, what llama-imatrix b4747 writes) or gguf\n"
           "  --kv-type T       f32 (default, the exact reference) or f16 (round K/V like\n"
           "                    llama.cpp's default cache; reproduces llama-imatrix's numbers\n"
           "                    to ~4e-5 relative, f32 to ~5e-4 on stories260K)\n"
           "  --threads N       threads (default: all cores); the result does not depend on N\n"
           "  --quiet           no progress line\n",
           DEFAULT_CTX, DEFAULT_CTX);
}

int ql_cmd_imatrix(int argc, char **argv)
{
    const char *model_arg = NULL, *text_arg = NULL, *out_arg = NULL, *fmt = NULL;
    int ctx = DEFAULT_CTX, chunks = 0, threads = 0;
    int32_t kv_type = QL_TYPE_F32;
    bool quiet = false, process_output = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help();
            return QL_EXIT_OK;
        }
        if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            quiet = true;
            continue;
        }
        if (strcmp(a, "--process-output") == 0) {
            process_output = true;
            continue;
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (model_arg)
                return ql_cli_usage("imatrix", "unexpected argument '%s'", a);
            model_arg = a;
            continue;
        }
        if (i + 1 >= argc)
            return ql_cli_usage("imatrix", "unknown option or missing value: '%s'", a);
        const char *v = argv[++i];
        int ok = 1;
        if (strcmp(a, "--text") == 0 || strcmp(a, "-f") == 0)
            text_arg = v;
        else if (strcmp(a, "--output") == 0 || strcmp(a, "-o") == 0)
            out_arg = v;
        else if (strcmp(a, "--format") == 0)
            fmt = v;
        else if (strcmp(a, "--ctx") == 0 || strcmp(a, "-c") == 0)
            ok = ql_cli_parse_int_opt("imatrix", a, v, 4, 1 << 20, &ctx);
        else if (strcmp(a, "--chunks") == 0)
            ok = ql_cli_parse_int_opt("imatrix", a, v, 1, 1 << 30, &chunks);
        else if (strcmp(a, "--threads") == 0 || strcmp(a, "-t") == 0)
            ok = ql_cli_parse_int_opt("imatrix", a, v, 1, 4096, &threads);
        else if (strcmp(a, "--kv-type") == 0) {
            const ql_type_traits *t = ql_type_by_name(v);
            if (!t || (t->type != QL_TYPE_F32 && t->type != QL_TYPE_F16))
                return ql_cli_usage("imatrix", "--kv-type expects f32 or f16, got '%s'", v);
            kv_type = t->type;
        } else
            return ql_cli_usage("imatrix", "unknown option '%s'", a);
        if (!ok)
            return QL_EXIT_USAGE;
    }
    if (!model_arg)
        return ql_cli_usage("imatrix", "missing MODEL");
    if (!text_arg)
        return ql_cli_usage("imatrix", "missing --text FILE|NAME");
    if (!out_arg)
        return ql_cli_usage("imatrix", "missing -o OUT");
    ql_imatrix_format format = QL_IMATRIX_GGUF, by_name;
    bool named = ql_imatrix_format_from_name(out_arg, &by_name);
    if (fmt) {
        if (!ql_imatrix_format_parse(fmt, &format))
            return ql_cli_usage("imatrix", "--format is dat or gguf, got '%s'", fmt);
        if (named && by_name != format)
            return ql_cli_usage("imatrix", "--format %s contradicts the name '%s'", fmt, out_arg);
    } else if (named) {
        format = by_name;
    }
    if (threads > 0)
        ql_threads_set(threads);

    ql_error err;
    ql_error_clear(&err);
    ql_cli_text_run r;
    ql_imatrix *im = NULL;
    int rc = QL_EXIT_RUNTIME;
    if (ql_cli_text_run_init(&r, model_arg, text_arg, ctx, chunks, kv_type, &err))
        goto fail;
    if (!quiet)
        fprintf(stderr,
                "model %s (%s, %.3fM params); text %s: %lld tokens, %lld chunks of %d; K/V %s; "
                "%d threads\n",
                r.model_path, r.model->hp.arch_name, (double)r.model->n_params / 1e6, r.text_path,
                (long long)r.data.n_tokens, (long long)r.data.n_chunks, ctx,
                ql_forward_attn_rounding_name(r.fw), ql_threads_get());
    /* The dataset is recorded as given on the command line, as llama-imatrix
     * records its -f argument. */
    ql_imatrix_opts o = {process_output, text_arg, quiet, NULL, NULL};
    ql_imatrix_summary sum;
    if (ql_imatrix_collect(r.fw, r.model->weights, &r.data, &o, &im, &sum, &err) ||
        ql_imatrix_write(im, out_arg, format, &err))
        goto fail;
    printf("wrote %s (%s): %lld entries, %lld chunks of %d tokens (%lld tokens), PPL %.4f over "
           "the chunks, %.2f s\n",
           out_arg, ql_imatrix_format_name(format), (long long)sum.n_entries,
           (long long)sum.n_chunks, ctx, (long long)sum.n_tokens, sum.ppl, sum.seconds);
    rc = QL_EXIT_OK;
    goto out;
fail:
    rc = ql_cli_fail(&err);
out:
    ql_imatrix_free(im);
    ql_cli_text_run_deinit(&r);
    return rc;
}
