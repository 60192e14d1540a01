/* qlab bench forward: tokens per second of the reference forward pass (dispatched
 * from cmd_bench.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/data.h"
#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "model/forward.h"
#include "model/model.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab bench forward MODEL [--ctx N] [--threads N] [--chunks K]\n\n"
           "Runs K chunks (default 4, after one untimed warm-up chunk) of N tokens (default\n"
           "256) through the f32 reference forward pass and prints tokens per second with\n"
           "the model's size. MODEL is a path or a name from datasets/manifest.tsv.\n"
           "The tokens are a fixed pseudo-random sequence: speed does not depend on them.\n\n");
    ql_opt_print_options(stdout, p);
}

/* Deterministic token ids (BOS-free: speed is all that is measured). */
static void fill_tokens(int32_t *t, int n, int vocab, uint32_t seed)
{
    uint32_t s = seed * 2654435761u + 1u;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        t[i] = (int32_t)((s >> 8) % (uint32_t)vocab);
    }
}

int ql_bench_forward(int argc, char **argv)
{
    const char *args[1];
    int ctx = 256, threads = 0, chunks = 4;
    const ql_opt opts[] = {
        ql_cli_model_opt(&args[0]),
        ql_opt_int("ctx", 'c', &ctx, 4, 1 << 20, "N", "tokens per chunk (default 256)"),
        ql_opt_int("chunks", 0, &chunks, 1, 1 << 20, "K", "timed chunks (default 4)"),
        ql_opt_threads(&threads, QL_OPT_THREADS_HELP),
    };
    static const char *const names[] = {"MODEL"};
    ql_opt_parser p = {.prog = "qlab bench forward",
                       .opts = opts,
                       .n_opts = QL_OPT_COUNT(opts),
                       .args = args,
                       .max_args = 1,
                       .arg_names = names,
                       .n_required = 1,
                       .help = help};
    const int prc = ql_opt_parse(&p, argc, argv);
    if (prc != QL_OPT_GO_ON)
        return prc;
    const char *model_arg = args[0];
    ql_threads_set(threads);

    ql_error err;
    ql_error_clear(&err);
    char path[QL_PATH_MAX];
    ql_model *m = NULL;
    ql_forward *fw = NULL;
    int32_t *tok = NULL;
    float *logits = NULL;
    int rc = QL_EXIT_RUNTIME;
    double t0 = ql_now();
    if (ql_data_resolve(model_arg, path, sizeof path, NULL, &err) || ql_model_load(&m, path, &err))
        goto fail;
    const double t_load = ql_now() - t0;
    if (ql_forward_alloc(&fw, &m->hp, ctx, &err))
        goto fail;
    tok = malloc((size_t)ctx * sizeof *tok);
    logits = malloc((size_t)ctx * (size_t)m->hp.n_vocab * sizeof *logits);
    if (!tok || !logits) {
        ql_error_set(&err, QL_ENOMEM, "out of memory");
        goto fail;
    }
    /* warm-up: page in the weights, spin up the thread pools */
    fill_tokens(tok, ctx, m->hp.n_vocab, 0);
    if (ql_forward_run(fw, m->weights, tok, ctx, 0, 0, logits, &err))
        goto fail;
    double t_run = 0;
    for (int c = 0; c < chunks; c++) {
        fill_tokens(tok, ctx, m->hp.n_vocab, (uint32_t)c + 1);
        double t = ql_now();
        if (ql_forward_run(fw, m->weights, tok, ctx, 0, 0, logits, &err))
            goto fail;
        t_run += ql_now() - t;
    }
    const double n_tok = (double)ctx * chunks;
    printf("model   %s (%s, %d layers, dim %d, ff %d, vocab %d)\n", path, m->hp.arch_name,
           m->hp.n_layer, m->hp.n_embd, m->hp.n_ff, m->hp.n_vocab);
    printf("size    %.3f M params, file %.2f MB, loaded in %.2fs\n", (double)m->n_params / 1e6,
           (double)m->gguf->file_size / 1e6, t_load);
    printf("forward ctx %d, %d threads, %d chunks: %.0f tok/s (%.1f ms per chunk, %.2f GFLOP/s)\n",
           ctx, ql_threads_get(), chunks, n_tok / t_run, 1e3 * t_run / chunks,
           2.0 * (double)m->n_params * n_tok / t_run / 1e9);
    rc = QL_EXIT_OK;
    goto out;
fail:
    rc = ql_cli_fail(&err);
out:
    free(tok);
    free(logits);
    ql_forward_free(fw);
    ql_model_free(m);
    return rc;
}
