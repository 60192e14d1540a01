/* qlab bench forward: tokens per second of the reference forward pass (dispatched
 * from cmd_bench.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/data.h"
#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "base/gemm.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/scheduler.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab bench forward MODEL [--ctx N] [--threads N] [--chunks K] [--profile]\n\n"
           "Runs K chunks (default 4) of N tokens (default 256) through the reference pass\n"
           "as a sweep runs it (layer by layer over the K chunks, the perplexity protocol:\n"
           "N-1 tokens a chunk, the head on the scored half) after one untimed warm-up, and\n"
           "prints tokens per second and the pass's GFLOP/s next to this machine's sgemm\n"
           "GFLOP/s on the model's largest product shape (the same tile grid and threads).\n"
           "MODEL is a path or a name from datasets/manifest.tsv. The tokens are a fixed\n"
           "pseudo-random sequence: speed does not depend on them.\n\n");
    ql_opt_print_options(stdout, p);
}

/* Deterministic token ids (speed is all that is measured). */
static void fill_tokens(int32_t *t, int64_t n, int vocab)
{
    uint32_t s = 2654435761u;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        t[i] = (int32_t)((s >> 8) % (uint32_t)vocab);
    }
}

/* Multiply-adds of one token through a block's products: the attention's, and the dense
 * feed-forward's or, in a mixture of experts, the router's, the k experts' it is routed
 * to and the shared expert's (the active parameters). */
static double token_macs(const ql_hparams *hp)
{
    const double E = hp->n_embd;
    const double QD = (double)hp->n_head * hp->head_dim, KD = (double)hp->n_head_kv * hp->head_dim;
    const double attn = E * QD + 2 * E * KD + QD * E;
    if (hp->n_expert == 0)
        return attn + 3 * E * hp->n_ff;
    double ffn = E * hp->n_expert + (double)hp->n_expert_used * 3 * E * hp->n_ff_exp;
    if (hp->n_ff_shexp > 0)
        ffn += E + 3 * E * hp->n_ff_shexp;
    return attn + ffn;
}

/* Multiply-adds of a perplexity pass over one chunk of ctx tokens: ctx - 1 tokens through
 * every product and through causal attention, the head on the rows from ctx / 2. */
static double chunk_macs(const ql_hparams *hp, int ctx)
{
    const double E = hp->n_embd, V = hp->n_vocab;
    const double QD = (double)hp->n_head * hp->head_dim;
    const double n = ctx - 1, rows_out = ctx - 1 - ctx / 2;
    const double products = token_macs(hp);
    /* query t sees t + 1 positions: sum over t of (t + 1) = n (n + 1) / 2, twice (QK, PV) */
    const double attention = 2.0 * QD * n * (n + 1) / 2.0;
    return hp->n_layer * (n * products + attention) + rows_out * E * V;
}

/* GFLOP/s of ql_gemm on an (m, k) x (k, n) product, best of a few runs. */
static double sgemm_gflops(int64_t m, int64_t n, int64_t k)
{
    float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(n * k) * sizeof *b);
    float *c = malloc((size_t)(m * n) * sizeof *c);
    double best = 0;
    if (a && b && c) {
        for (int64_t i = 0; i < m * k; i++)
            a[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
        for (int64_t i = 0; i < n * k; i++)
            b[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
        for (int r = 0; r < 5; r++) {
            const double t = ql_now();
            ql_gemm(true, m, n, k, 1.0f, a, k, b, k, c, n);
            const double dt = ql_now() - t, g = 2.0 * (double)(m * n * k) / dt / 1e9;
            best = g > best ? g : best;
        }
    }
    free(a);
    free(b);
    free(c);
    return best;
}

/* The profile's phases, as shares of the timed pass. */
static void print_profile(const ql_forward_profile *p, double total)
{
    double block_products = p->experts;
    printf("profile (seconds, share of the pass):\n");
    for (int k = 0; k < QL_SITE_KINDS; k++) {
        if (p->products[k] <= 0)
            continue;
        block_products += p->products[k];
        printf("  %-20s %8.3f  %5.1f%%\n", ql_site_kind_name((ql_site_kind)k), p->products[k],
               100.0 * p->products[k] / total);
    }
    if (p->experts > 0)
        printf("  %-20s %8.3f  %5.1f%%\n", "experts (all kinds)", p->experts,
               100.0 * p->experts / total);
    const double other = p->blocks - block_products - p->attention;
    const double head = p->products[QL_SITE_HEAD];
    const double rest = total - p->blocks - p->decode - head;
    const struct {
        const char *name;
        double s;
    } phases[] = {{"attention", p->attention},
                  {"norms, RoPE, SwiGLU", other},
                  {"decode to f32", p->decode},
                  {"head (output)", head},
                  {"scoring, embedding", rest}};
    for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++)
        printf("  %-20s %8.3f  %5.1f%%\n", phases[i].name, phases[i].s,
               100.0 * phases[i].s / total);
}

int ql_bench_forward(int argc, char **argv)
{
    const char *args[1];
    int ctx = 256, threads = 0, chunks = 4;
    bool profile = false;
    const ql_opt opts[] = {
        ql_cli_model_opt(&args[0]),
        ql_opt_alias(
            ql_opt_int("ctx", 'c', &ctx, 4, 1 << 20, "N", "tokens per chunk (default 256)"),
            "ctx-size"),
        ql_opt_int("chunks", 0, &chunks, 1, 1 << 20, "K", "timed chunks (default 4)"),
        ql_opt_threads(&threads, QL_OPT_THREADS_HELP),
        ql_opt_flag("profile", 0, &profile,
                    "print where the timed pass's time goes: products by kind, attention, the "
                    "rest of the blocks, decoding layers to f32, the head and the scoring"),
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
    ql_threads_set(threads);

    ql_error err;
    ql_error_clear(&err);
    char path[QL_PATH_MAX];
    ql_model *m = NULL;
    ql_forward *fw = NULL;
    int32_t *tok = NULL;
    ql_ppl_data d;
    memset(&d, 0, sizeof d);
    int rc = QL_EXIT_RUNTIME;
    double t0 = ql_now();
    if (ql_data_resolve(args[0], path, sizeof path, NULL, &err) || ql_model_load(&m, path, &err))
        goto fail;
    const double t_load = ql_now() - t0;
    const int64_t n_tok = (int64_t)ctx * chunks;
    if (!(tok = malloc((size_t)n_tok * sizeof *tok))) {
        ql_error_set(&err, QL_ENOMEM, "out of memory");
        goto fail;
    }
    fill_tokens(tok, n_tok, m->hp.n_vocab);
    ql_nll_acc acc;
    if (ql_ppl_data_from_tokens(&d, tok, n_tok, -1, ctx, chunks, &err) ||
        ql_forward_alloc(&fw, &m->hp, ctx, &err))
        goto fail;
    /* warm-up: page in the weights, start the threads */
    ql_ppl_data warm = d;
    warm.n_chunks = 1;
    if (ql_sched_perplexity(fw, m->weights, &warm, 1, NULL, NULL, NULL, &acc, &err))
        goto fail;
    ql_forward_profile prof;
    memset(&prof, 0, sizeof prof);
    if (profile)
        ql_forward_set_profile(fw, &prof);
    const double t = ql_now();
    if (ql_sched_perplexity(fw, m->weights, &d, chunks, NULL, NULL, NULL, &acc, &err))
        goto fail;
    const double t_run = ql_now() - t;
    ql_forward_set_profile(fw, NULL);
    const int64_t wide =
        ql_hparams_ff_max(&m->hp) > m->hp.n_embd ? ql_hparams_ff_max(&m->hp) : m->hp.n_embd;
    const double peak = sgemm_gflops(ctx - 1, wide, m->hp.n_embd);
    const double gflops = 2.0 * chunk_macs(&m->hp, ctx) * chunks / t_run / 1e9;
    printf("model   %s (%s, %d layers, dim %d, ff %d, vocab %d)\n", path, m->hp.arch_name,
           m->hp.n_layer, m->hp.n_embd, m->hp.n_ff, m->hp.n_vocab);
    printf("size    %.3f M params, file %.2f MB, loaded in %.2fs\n", (double)m->n_params / 1e6,
           (double)m->gguf->file_size / 1e6, t_load);
    if (m->hp.n_expert > 0)
        printf("experts %d of %d per token, %d wide; %.3f M active parameters per token in the "
               "blocks\n",
               m->hp.n_expert_used, m->hp.n_expert, m->hp.n_ff_exp,
               m->hp.n_layer * token_macs(&m->hp) / 1e6);
    printf("forward ctx %d, %d threads, %d chunks: %.1f tok/s (%.1f ms per chunk), %.1f GFLOP/s; "
           "sgemm %lldx%lldx%d: %.1f GFLOP/s (%.0f%%)\n",
           ctx, ql_threads_get(), chunks, (double)(chunks * (ctx - 1)) / t_run,
           1e3 * t_run / chunks, gflops, (long long)(ctx - 1), (long long)wide, m->hp.n_embd, peak,
           peak > 0 ? 100.0 * gflops / peak : 0.0);
    ql_cli_note_blas_kernel(stdout);
    if (profile)
        print_profile(&prof, t_run);
    rc = QL_EXIT_OK;
    goto out;
fail:
    rc = ql_cli_fail(&err);
out:
    free(tok);
    ql_ppl_data_deinit(&d);
    ql_forward_free(fw);
    ql_model_free(m);
    return rc;
}
