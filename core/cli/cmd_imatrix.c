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
#define STR_(x)     #x
#define STR(x)      STR_(x)

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab imatrix MODEL --text FILE|NAME -o OUT [--ctx N] [--chunks K]\n"
           "                    [--process-output] [--format dat|gguf] [--kv-type f32|f16]\n"
           "                    [--in-file IMATRIX]... [--threads N] [--quiet]\n"
           "       qlab imatrix --in-file A --in-file B... -o OUT [--format dat|gguf] [--ctx N]\n"
           "\n"
           "Runs the reference forward pass over a calibration text and records, for every\n"
           "matmul weight of the blocks (blk.*), the sum of x_j^2 over all tokens per input\n"
           "column j and the token count: the importance matrix llama-quantize (and\n"
           "'qlab quantize --imatrix') weighs the quantization error with.\n"
           "\n"
           "It follows llama-imatrix: the text is tokenized once (BOS first) and cut into\n"
           "chunks of N tokens (default %d); each chunk starts with BOS and every position\n"
           "is counted, with llama.cpp's default f16 K/V cache (--kv-type f32 for the\n"
           "exact reference). token_embd (a lookup) gets no entry, output.weight only\n"
           "with --process-output.\n"
           "\n"
           "--in-file combines imatrix files as llama-imatrix does: per entry the sums\n"
           "add and the counts add, so each column's importance is the count-weighted\n"
           "mean of the files'; an entry of one file only is kept as it is. Without MODEL\n"
           "and --text the combination is written alone; with them the text's statistics\n"
           "are added too. .dat files do not store their chunk size: a GGUF output of\n"
           ".dat inputs takes it from --ctx, the context they were computed with.\n"
           "\n",
           DEFAULT_CTX);
    ql_opt_print_options(stdout, p);
}

/* --in-file, repeatable: the files in the order given. */
typedef struct {
    const char **paths;
    int n;
} in_files;

static ql_status add_in_file(void *ctx, const char *val, ql_error *err)
{
    in_files *f = ctx;
    (void)err;
    f->paths[f->n++] = val;
    return QL_OK;
}

/* The --in-file files read and combined into *out (in the order given). */
static ql_status combine_files(const in_files *f, ql_imatrix **out, ql_error *err)
{
    ql_imatrix *acc = NULL;
    ql_status st = ql_imatrix_alloc(&acc, err);
    for (int i = 0; !st && i < f->n; i++) {
        ql_imatrix *im = NULL;
        if (!(st = ql_imatrix_read(f->paths[i], &im, err))) {
            char warning[QL_ERROR_MSG_MAX];
            if (ql_imatrix_dropped_warning(im, warning, sizeof warning)) {
                fputs("qlab: warning: ", stderr);
                ql_fwrite_terminal(stderr, warning, strlen(warning));
                fputc('\n', stderr);
            }
            st = ql_imatrix_merge(acc, im, err);
        }
        ql_imatrix_free(im);
    }
    if (st) {
        ql_imatrix_free(acc);
        return st;
    }
    *out = acc;
    return QL_OK;
}

/* qlab imatrix --in-file A --in-file B ... -o OUT: the combination alone. */
static int combine_only(const in_files *f, const char *out_arg, ql_imatrix_format format, int ctx,
                        bool ctx_given)
{
    ql_error err;
    ql_error_clear(&err);
    ql_imatrix *im = NULL;
    ql_status st = combine_files(f, &im, &err);
    if (!st && format == QL_IMATRIX_GGUF && im->chunk_size == 0) {
        if (!ctx_given)
            st = ql_error_set(&err, QL_EINVAL,
                              "%s: the inputs are .dat files, which do not store their chunk "
                              "size; give --ctx N (the context they were computed with) for a "
                              "GGUF output, or write .dat",
                              out_arg);
        else
            st = ql_imatrix_set_chunk_size(im, ctx, &err);
    }
    if (!st) {
        ql_imatrix_merge_finish(im);
        st = ql_imatrix_write(im, out_arg, format, &err);
    }
    if (st) {
        ql_imatrix_free(im);
        return ql_cli_fail(&err);
    }
    printf("wrote %s (%s): %lld entries combined from %d files, %lld chunks\n", out_arg,
           ql_imatrix_format_name(format), (long long)im->n_entries, f->n,
           (long long)im->chunk_count);
    ql_imatrix_free(im);
    return QL_EXIT_OK;
}

int ql_cmd_imatrix(int argc, char **argv)
{
    const char *args[1], *text_arg = NULL, *out_arg = NULL;
    in_files inputs = {calloc((size_t)argc + 1, sizeof(const char *)), 0};
    if (!inputs.paths) {
        fprintf(stderr, "qlab: error: out of memory\n");
        return QL_EXIT_RUNTIME;
    }
    ql_imatrix_format format = QL_IMATRIX_GGUF;
    int ctx = DEFAULT_CTX, chunks = 0, threads = 0;
    /* llama-imatrix's protocol: its K/V cache is f16 (llama.cpp's default). */
    int32_t kv_type = QL_TYPE_F16;
    bool quiet = false, process_output = false;
    static const int32_t kv_types[] = {QL_TYPE_F32, QL_TYPE_F16};
    const ql_opt opts[] = {
        ql_cli_model_opt(&args[0]),
        ql_opt_alias(ql_opt_str("text", 'f', &text_arg, "FILE|NAME",
                                "calibration text: a path or a name from "
                                "datasets/manifest.tsv"),
                     "file"),
        ql_opt_required(
            ql_opt_alias(ql_opt_str("output", 'o', &out_arg, "OUT",
                                    "the imatrix file; GGUF unless --format dat or OUT ends in "
                                    ".dat"),
                         "output-file")),
        ql_opt_alias(ql_opt_int("ctx", 'c', &ctx, 4, 1 << 20, "N",
                                "tokens per chunk (default " STR(DEFAULT_CTX) ")"),
                     "ctx-size"),
        ql_opt_int("chunks", 0, &chunks, 1, 1 << 30, "K",
                   "use at most K chunks (default: every whole chunk)"),
        ql_opt_flag("process-output", 0, &process_output,
                    "also collect output.weight (the LM head)"),
        ql_opt_func("format", 0, ql_cli_parse_imatrix_format, &format, "F",
                    "dat (legacy binary, what llama-imatrix b4747 writes) or gguf"),
        ql_opt_type("kv-type", 0, &kv_type, kv_types, QL_OPT_COUNT(kv_types), "T",
                    "f16 (default: K/V rounded like llama.cpp's default cache, as\n"
                    "llama-imatrix computes; its numbers to ~4e-5 relative on\n"
                    "stories260K) or f32 (the exact reference; ~5e-4 from them)"),
        ql_opt_threads(&threads, "threads (default: $OMP_NUM_THREADS, else all cores); the\n"
                                 "result does not depend on N"),
        ql_opt_func("in-file", 0, add_in_file, &inputs, "IMATRIX",
                    "an imatrix file (.dat or GGUF) to combine into OUT, as\n"
                    "llama-imatrix --in-file; repeatable"),
        ql_opt_flag("quiet", 'q', &quiet, "no progress line"),
    };
    static const char *const names[] = {"MODEL"};
    ql_opt_parser p = {.prog = "qlab imatrix",
                       .opts = opts,
                       .n_opts = QL_OPT_COUNT(opts),
                       .args = args,
                       .max_args = 1,
                       .arg_names = names,
                       .help = help};
    const int prc = ql_opt_parse(&p, argc, argv);
    if (prc != QL_OPT_GO_ON) {
        free(inputs.paths);
        return prc;
    }
    if (inputs.n == 0 || args[0] || text_arg) {
        const char *missing = !args[0] ? "MODEL" : !text_arg ? "--text FILE|NAME" : NULL;
        if (missing) {
            free(inputs.paths);
            return ql_opt_usage(&p, "missing %s%s", missing,
                                inputs.n ? " (or --in-file alone to combine files)" : "");
        }
    }
    const char *model_arg = args[0];
    ql_imatrix_format by_name;
    if (ql_imatrix_format_from_name(out_arg, &by_name)) {
        if (ql_opt_given(&p, "format") && by_name != format) {
            free(inputs.paths);
            return ql_opt_usage(&p, "--format %s contradicts the name '%s'",
                                ql_imatrix_format_name(format), out_arg);
        }
        format = by_name;
    }
    ql_threads_set(threads);
    if (!args[0]) {
        const int crc = combine_only(&inputs, out_arg, format, ctx, ql_opt_given(&p, "ctx"));
        free(inputs.paths);
        return crc;
    }

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
    ql_imatrix_opts o = {process_output, text_arg, quiet, NULL, NULL, 1};
    ql_imatrix_summary sum;
    if (ql_imatrix_collect(r.fw, r.model->weights, &r.data, &o, &im, &sum, &err))
        goto fail;
    if (inputs.n) {
        /* llama-imatrix with --in-file and a text: the files' statistics, then the text's. */
        ql_imatrix *acc = NULL;
        if (combine_files(&inputs, &acc, &err))
            goto fail;
        const ql_status mst = ql_imatrix_merge(acc, im, &err);
        ql_imatrix_free(im);
        im = acc;
        if (mst)
            goto fail;
        ql_imatrix_merge_finish(im);
        if (format == QL_IMATRIX_GGUF && im->chunk_size == 0 &&
            ql_imatrix_set_chunk_size(im, ctx, &err))
            goto fail;
    }
    if (ql_imatrix_write(im, out_arg, format, &err))
        goto fail;
    printf("wrote %s (%s): %lld entries, %lld chunks of %d tokens (%lld tokens), PPL %.4f over "
           "the chunks, %.2f s\n",
           out_arg, ql_imatrix_format_name(format), (long long)sum.n_entries,
           (long long)sum.n_chunks, ctx, (long long)sum.n_tokens, sum.ppl, sum.seconds);
    if (inputs.n)
        printf("combined with %d --in-file files: %lld entries, %lld chunks\n", inputs.n,
               (long long)im->n_entries, (long long)im->chunk_count);
    rc = QL_EXIT_OK;
    goto out;
fail:
    rc = ql_cli_fail(&err);
out:
    free(inputs.paths);
    ql_imatrix_free(im);
    ql_cli_text_run_deinit(&r);
    return rc;
}
