/* qlab eval: perplexity of a model on a text with llama-perplexity's protocol. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/data.h"
#include "base/progress.h"
#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "experiment/actquant.h"
#include "experiment/config.h"
#include "formats/types.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/scheduler.h"
#include "model/tokenizer.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab eval MODEL --text FILE|NAME [--ctx N] [--chunks K] [--threads N]\n"
           "                 [--kv-type f32|f16|q8_0|q4_0] [--act-mode MODE] [--quiet]\n\n"
           "Perplexity with llama-perplexity's protocol: the whole text is tokenized (BOS\n"
           "first when the vocabulary adds it) and cut into chunks of N tokens (default\n"
           "512); each chunk starts with BOS and positions N/2 .. N-2 are scored, each\n"
           "predicting the next token. K limits the number of chunks (default: all).\n"
           "Prints the running PPL per chunk (a progress line on a terminal, plain lines\n"
           "otherwise) and the final 'PPL = x ± y', y being PPL times the standard error\n"
           "of the mean negative log-likelihood, as llama-perplexity prints it.\n\n"
           "--kv-type rounds K and V (and the query and attention probabilities, as ggml's\n"
           "CPU matmul does) to f16 like llama.cpp's default K/V cache, or to q8_0/q4_0 as\n"
           "llama.cpp does with -ctk/-ctv and flash attention; the default f32 is the exact\n"
           "reference. --act-mode rounds the input of every product: f32 (default), q8_0,\n"
           "q8_1, q8_K, q8x2, or native: what llama.cpp's CPU backend uses for the type\n"
           "each weight has in the file (with --kv-type f16, a quantized GGUF then gives\n"
           "llama-perplexity's numbers). MODEL and the text are paths or names from\n"
           "datasets/manifest.tsv (e.g. stories260K, ts-eval, tinystories-valid).\n\n");
    ql_opt_print_options(stdout, p);
}

/* --act-mode: the act_mode axis of a config, as a sweep spells it. */
static ql_status parse_act_mode(void *ctx, const char *val, ql_error *err)
{
    return ql_config_set(ctx, QL_AXIS_ACT_MODE, val, err);
}

typedef struct {
    ql_progress progress; /* in tokens, on a terminal */
    int64_t n_chunks;
    bool tty;
    bool quiet;
    double ppl; /* the running PPL after the last finished chunk */
} chunk_printer;

static void on_progress(void *ctx, double tokens_done)
{
    chunk_printer *p = ctx;
    char note[64] = "";
    if (p->ppl > 0)
        snprintf(note, sizeof note, "PPL %.4f", p->ppl);
    if (p->tty && !p->quiet)
        ql_progress_update(&p->progress, (int64_t)tokens_done, note[0] ? note : NULL);
}

static void on_chunk(void *ctx, int64_t chunk, const float *logits, const int32_t *targets,
                     int n_scored, const ql_nll_acc *running)
{
    chunk_printer *p = ctx;
    p->ppl = ql_nll_acc_ppl(running);
    if (!p->quiet && !p->tty)
        fprintf(stderr, "chunk %lld/%lld: PPL %.6f\n", (long long)chunk + 1, (long long)p->n_chunks,
                ql_nll_acc_ppl(running));
}

int ql_cmd_eval(int argc, char **argv)
{
    const char *args[1], *text_arg = NULL;
    int ctx = 512, chunks = 0, threads = 0;
    uint64_t mem = 0;
    int32_t kv_type = QL_TYPE_F32;
    ql_config act_cfg; /* only its act_mode axis is used */
    ql_config_init(&act_cfg);
    bool quiet = false;
    static const int32_t kv_types[] = {QL_TYPE_F32, QL_TYPE_F16, QL_TYPE_Q8_0, QL_TYPE_Q4_0};
    const ql_opt opts[] = {
        ql_cli_model_opt(&args[0]),
        ql_opt_required(ql_opt_str("text", 'f', &text_arg, "FILE|NAME", "the text to score")),
        ql_opt_int("ctx", 'c', &ctx, 4, 1 << 20, "N", "tokens per chunk (default 512)"),
        ql_opt_int("chunks", 0, &chunks, 1, 1 << 30, "K", "at most K chunks (default: all)"),
        ql_opt_threads(&threads, QL_OPT_THREADS_HELP),
        ql_opt_type("kv-type", 0, &kv_type, kv_types, QL_OPT_COUNT(kv_types), "T",
                    "K/V cache rounding: f32 (default), f16, q8_0 or q4_0"),
        ql_opt_func("act-mode", 0, parse_act_mode, &act_cfg, "MODE",
                    "activation rounding: f32 (default), native, q8_0, q8_1, q8_K, q8x2"),
        ql_opt_size("mem", 0, &mem, "SIZE",
                    "memory budget (default 70% of the RAM): how many chunks go through\n"
                    "each layer at once; the result does not depend on it"),
        ql_opt_flag("quiet", 'q', &quiet, "no per-chunk lines and notes"),
    };
    static const char *const names[] = {"MODEL"};
    ql_opt_parser p = {.prog = "qlab eval",
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
    ql_cli_text_run r;
    ql_weights *ws = NULL;
    ql_act_plan *ap = NULL;
    int32_t *site_types = NULL;
    const void **site_q = NULL;
    int rc = QL_EXIT_RUNTIME;
    if (ql_cli_text_run_init(&r, model_arg, text_arg, ctx, chunks, kv_type, &err))
        goto fail;
    const ql_model *m = r.model;
    const ql_ppl_data *d = &r.data;
    /* The activation transforms follow each weight's type in the file. */
    if (ql_weights_copy(&ws, m->weights, &err))
        goto fail;
    if (!(site_types = malloc((size_t)ws->n_lin * sizeof *site_types)) ||
        !(site_q = malloc((size_t)ws->n_lin * sizeof *site_q))) {
        ql_error_set(&err, QL_ENOMEM, "out of memory");
        goto fail;
    }
    for (int s = 0; s < ws->n_lin; s++) {
        site_types[s] = ws->lin[s].src_type;
        /* the file's bytes: Q4_1/Q5_1 block mins for the q8_1 block-sum term */
        const ql_gguf_tensor *gt = ql_gguf_find_tensor(m->gguf, ws->lin[s].name);
        site_q[s] = gt && gt->type == site_types[s] ? gt->data : NULL;
    }
    if (ql_act_plan_build(&ap, ws, act_cfg.act_mode, site_types, site_q, NULL, &err))
        goto fail;
    ql_act_plan_install(ap, ws);
    for (int s = 0; s < ws->n_lin; s++) {
        const ql_act_choice *ch = ql_act_plan_choice(ap, s);
        if (ch->fallback && !quiet)
            fprintf(stderr, "%s: %s\n", ws->lin[s].name, ch->note);
    }
    fprintf(stderr,
            "model %s (%s, %.3fM params); text %s: %lld tokens, %lld chunks of %d, %d "
            "scored per chunk; K/V %s; activations %s; %d threads\n",
            r.model_path, m->hp.arch_name, (double)m->n_params / 1e6, r.text_path,
            (long long)d->n_tokens, (long long)d->n_chunks, ctx, d->n_scored,
            ql_forward_attn_rounding_name(r.fw), ql_act_mode_name(act_cfg.act_mode),
            ql_threads_get());
    chunk_printer pr = {.n_chunks = d->n_chunks, .tty = isatty(STDERR_FILENO) == 1, .quiet = quiet};
    const int64_t tokens = d->n_chunks * (int64_t)(ctx - 1);
    ql_progress_begin(&pr.progress, "eval", "tok", tokens, quiet || !pr.tty);
    const size_t budget = mem ? (size_t)mem : (size_t)((double)ql_mem_total() * 0.7);
    const int group = ql_sched_group_for(&m->hp, ctx, 1, d->n_chunks, budget / 2);
    ql_nll_acc acc;
    double t0 = ql_now();
    if (ql_sched_perplexity(r.fw, ws, d, group, on_chunk, on_progress, &pr, &acc, &err))
        goto fail;
    const double secs = ql_now() - t0;
    if (pr.tty && !quiet)
        ql_progress_end(&pr.progress, tokens, NULL);
    fprintf(stderr, "%lld scored tokens, %.1fs, %.0f tok/s\n", (long long)acc.n, secs,
            (double)(d->n_chunks * (ctx - 1)) / secs);
    if (!isfinite(ql_nll_acc_ppl(&acc))) {
        ql_error_set(&err, QL_EFORMAT,
                     "%s: the perplexity is %s (the model computes non-finite probabilities)",
                     r.model_path, isnan(ql_nll_acc_ppl(&acc)) ? "NaN" : "infinite");
        goto fail;
    }
    printf("PPL = %.6f ± %.6f\n", ql_nll_acc_ppl(&acc), ql_nll_acc_ppl_err(&acc));
    rc = QL_EXIT_OK;
    goto out;
fail:
    rc = ql_cli_fail(&err);
out:
    ql_weights_free(ws);
    ql_act_plan_free(ap);
    free(site_types);
    free(site_q);
    ql_cli_text_run_deinit(&r);
    return rc;
}
