/* qlab eval: perplexity of a model on a text with llama-perplexity's protocol, and with
 * --base the KL divergence and token-probability statistics of a quantized GGUF against
 * the exact reference of its unquantized source (llama-perplexity --kl-divergence). */
#include <jansson.h>
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
#include "experiment/distribution.h"
#include "experiment/reference.h"
#include "experiment/routing.h"
#include "formats/types.h"
#include "harness/mem_plan.h"
#include "model/forward.h"
#include "model/kvcache.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/scheduler.h"
#include "model/tokenizer.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab eval MODEL --text FILE|NAME [--ctx N] [--chunks K] [--threads N]\n"
           "                 [--kv-type f32|f16|q8_0|q4_0] [--act-mode MODE] [--mem SIZE]\n"
           "                 [--quiet]\n"
           "       qlab eval MODEL --base REF [--kl-divergence] [--json] --text FILE|NAME ...\n\n"
           "Perplexity with llama-perplexity's protocol: the whole text is tokenized (BOS\n"
           "first when the vocabulary adds it) and cut into chunks of N tokens (default\n"
           "512); each chunk starts with BOS and positions N/2 .. N-2 are scored, each\n"
           "predicting the next token. K limits the number of chunks (default: all).\n"
           "Prints a progress line with rate and ETA on stderr (redrawn on a terminal, a\n"
           "plain line every few seconds otherwise), the running PPL after each chunk on\n"
           "stdout as llama-perplexity does ('[1]x,[2]y,...') and the final\n"
           "'PPL = x ± y', y being PPL times the standard error of the mean negative\n"
           "log-likelihood. A context beyond the model's training context is warned about.\n\n"
           "With --base REF, MODEL is a quantization of REF (by llama-quantize, qlab or any\n"
           "tool: the same architecture and tensors, types may differ) and is measured\n"
           "against REF's exact reference: REF's pass with f32 activations and f32 K/V,\n"
           "its full-vocabulary log-probabilities in f32 (llama-perplexity keeps 16-bit\n"
           "codes). Prints llama-perplexity --kl-divergence's statistics block (PPL of\n"
           "both, their ratio, KLD and Δp percentiles, RMS Δp, same top p, each mean with\n"
           "its ±); --json prints the same figures as one JSON object instead\n"
           "(probabilities as fractions, not percent). llama-perplexity's spelling,\n"
           "--kl-divergence-base REF --kl-divergence, means the same, REF being the base\n"
           "model itself (qlab needs no file of its logits).\n\n"
           "--kv-type rounds K and V (and the query and attention probabilities, as ggml's\n"
           "CPU matmul does) to f16 like llama.cpp's default K/V cache, or to q8_0/q4_0 as\n"
           "llama.cpp does with -ctk/-ctv and flash attention; the default f32 is the exact\n"
           "reference. --act-mode rounds the input of every product: f32 (default), q8_0,\n"
           "q8_1, q8_K, q8x2, or native: what llama.cpp's CPU backend uses for the type\n"
           "each weight has in the file (with --kv-type f16, a quantized GGUF then gives\n"
           "llama-perplexity's numbers). Both apply to MODEL, never to REF. MODEL, REF and\n"
           "the text are paths or names from datasets/manifest.tsv (e.g. stories260K,\n"
           "ts-eval, tinystories-valid).\n\n");
    ql_opt_print_options(stdout, p);
}

/* --act-mode: the act_mode axis of a config, as a sweep spells it. */
static ql_status parse_act_mode(void *ctx, const char *val, ql_error *err)
{
    return ql_config_set(ctx, QL_AXIS_ACT_MODE, val, err);
}

/* What a plain eval prints as it goes: a progress line (tokens, rate, ETA) on stderr,
 * redrawn on a terminal, a plain line every few seconds otherwise; and the running
 * PPL after each chunk on stdout as llama-perplexity prints it, "[1]x,[2]y,...".
 * When stdout and stderr are the same terminal the redrawn line would cut into that
 * list, so it is printed whole at the end instead (the progress line shows the last
 * chunk's figure meanwhile). */
typedef struct {
    ql_progress progress; /* in tokens */
    bool quiet;
    bool live;  /* the [i] list as the chunks finish */
    char *list; /* the [i] list so far (when not live) */
    size_t list_len, list_cap;
    double ppl; /* the running PPL after the last finished chunk */
    int64_t chunks_done;
} chunk_printer;

static void on_progress(void *ctx, double tokens_done)
{
    chunk_printer *p = ctx;
    char note[64] = "";
    if (p->chunks_done > 0)
        snprintf(note, sizeof note, "[%lld]%.4f", (long long)p->chunks_done, p->ppl);
    ql_progress_update(&p->progress, (int64_t)tokens_done, note[0] ? note : NULL);
}

static void on_chunk(void *ctx, int64_t chunk, const float *logits, const int32_t *targets,
                     int n_scored, const ql_nll_acc *running)
{
    chunk_printer *p = ctx;
    (void)logits;
    (void)targets;
    (void)n_scored;
    p->ppl = ql_nll_acc_ppl(running);
    p->chunks_done = chunk + 1;
    if (p->quiet)
        return;
    char item[48];
    const int n = snprintf(item, sizeof item, "[%lld]%.4f,", (long long)chunk + 1, p->ppl);
    if (p->live) {
        fputs(item, stdout);
        fflush(stdout);
    } else if (ql_grow((void **)&p->list, &p->list_cap, p->list_len + (size_t)n + 1, 1)) {
        memcpy(p->list + p->list_len, item, (size_t)n + 1);
        p->list_len += (size_t)n;
    }
}

/* Ends the [i] list with its newline. */
static void chunk_list_end(chunk_printer *p)
{
    if (p->quiet || p->chunks_done == 0)
        return;
    if (!p->live && p->list)
        fputs(p->list, stdout);
    fputc('\n', stdout);
}

/* The weight set a pass over m runs: m's own, with the activation transforms of mode
 * for the type each weight has in the file (the file's bytes for the Q4_1/Q5_1 block
 * sums of native q8_1 products). Fallbacks are noted on stderr unless quiet. */
static ql_status plan_acts(const ql_model *m, ql_act_mode mode, bool quiet, ql_weights **ws,
                           ql_act_plan **ap, ql_error *err)
{
    int32_t *site_types = NULL;
    const void **site_q = NULL;
    ql_status st = ql_weights_copy(ws, m->weights, err);
    if (st)
        return st;
    const int n = (*ws)->n_lin;
    if (!(site_types = calloc((size_t)n, sizeof *site_types)) ||
        !(site_q = calloc((size_t)n, sizeof *site_q))) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory");
        goto out;
    }
    for (int s = 0; s < n; s++) {
        site_types[s] = (*ws)->lin[s].src_type;
        const ql_gguf_tensor *gt = ql_gguf_find_tensor(m->gguf, (*ws)->lin[s].name);
        site_q[s] = gt && gt->type == site_types[s] ? gt->data : NULL;
    }
    if ((st = ql_act_plan_build(ap, *ws, mode, site_types, site_q, NULL, err)))
        goto out;
    ql_act_plan_install(*ap, *ws);
    for (int s = 0; s < n && !quiet; s++) {
        const ql_act_choice *ch = ql_act_plan_choice(*ap, s);
        if (ch->fallback)
            fprintf(stderr, "%s: %s\n", (*ws)->lin[s].name, ch->note);
    }
out:
    free(site_types);
    free(site_q);
    return st;
}

/* ------------------------------------------------------------------------- */
/* --base: a quantized GGUF against the exact reference                      */

typedef struct {
    const char *model_arg, *base_arg, *text_arg;
    int ctx, chunks;
    int32_t kv_type;
    ql_act_mode act_mode;
    size_t budget;
    bool quiet, json;
} base_opts;

typedef struct {
    ql_progress progress;
} pass_printer;

static void pass_progress(void *ctx, double tokens_done)
{
    pass_printer *p = ctx;
    ql_progress_update(&p->progress, (int64_t)tokens_done, NULL);
}

static json_t *jnum(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* The figures of llama-perplexity's block, in its order, as one JSON object. */
static ql_status print_json(const ql_dist_metrics *m, const ql_routing_metrics *rm,
                            const char *model, const char *base, const base_opts *o,
                            const char *kv_name, const ql_ppl_data *d, ql_error *err)
{
    ql_ppl_pair pp;
    ql_dist_metrics_ppl_pair(m, &pp);
    const struct {
        const char *key;
        double v;
    } figs[] = {{"ppl", m->ppl},
                {"ppl_err", m->ppl_err},
                {"ppl_base", m->ppl_ref},
                {"ppl_base_err", m->ppl_ref_err},
                {"cor_ln_ppl", pp.cor},
                {"ln_ppl_ratio", m->ln_ppl_ratio},
                {"ln_ppl_ratio_err", m->ln_ppl_ratio_err},
                {"ppl_ratio", pp.ratio},
                {"ppl_ratio_err", pp.ratio_err},
                {"ppl_diff", pp.diff},
                {"ppl_diff_err", pp.diff_err},
                {"kld_mean", m->kld_mean},
                {"kld_mean_err", m->kld_mean_err},
                {"kld_max", m->kld_max},
                {"kld_p99_9", m->kld_p999},
                {"kld_p99", m->kld_p99},
                {"kld_median", m->kld_median},
                {"kld_p10", m->kld_p10},
                {"kld_p5", m->kld_p05},
                {"kld_p1", m->kld_p01},
                {"kld_min", m->kld_min},
                {"dp_mean", m->dp_mean},
                {"dp_mean_err", m->dp_mean_err},
                {"dp_max", m->dp_max},
                {"dp_p99_9", m->dp_p999},
                {"dp_p99", m->dp_p99},
                {"dp_p95", m->dp_p95},
                {"dp_p90", m->dp_p90},
                {"dp_p75", m->dp_p75},
                {"dp_median", m->dp_median},
                {"dp_p25", m->dp_p25},
                {"dp_p10", m->dp_p10},
                {"dp_p5", m->dp_p05},
                {"dp_p1", m->dp_p01},
                {"dp_p0_1", m->dp_p001},
                {"dp_min", m->dp_min},
                {"dp_rms", m->dp_rms},
                {"dp_rms_err", m->dp_rms_err},
                {"same_top_p", m->top1_agree},
                {"same_top_p_err", m->top1_agree_err},
                {"route_agree", rm->route_agree},
                {"route_overlap", rm->route_overlap},
                {"load_shift", rm->load_shift}};
    json_t *doc =
        json_pack("{s:s, s:s, s:i, s:I, s:I, s:s, s:s}", "model", model, "base", base, "ctx",
                  o->ctx, "chunks", (json_int_t)d->n_chunks, "n_tokens", (json_int_t)m->n_tokens,
                  "kv_type", kv_name, "act_mode", ql_act_mode_name(o->act_mode));
    for (size_t i = 0; doc && i < sizeof figs / sizeof figs[0]; i++)
        if (json_object_set_new(doc, figs[i].key, jnum(figs[i].v)) != 0) {
            json_decref(doc);
            doc = NULL;
        }
    char *text = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(doc);
    if (!text)
        return ql_error_set(err, QL_ENOMEM, "out of memory for the JSON output");
    printf("%s\n", text);
    free(text);
    return QL_OK;
}

/* Bytes the base model's reference may hold its log-probs in: half of what the budget
 * leaves after the two models' files and the pass's buffers (the rule of a sweep's
 * memory plan); below that the reference regenerates them chunk by chunk. */
static size_t keep_logp_bytes(const ql_model *ref, const ql_model *q, const ql_ppl_data *d,
                              int group, size_t budget)
{
    const size_t used = (size_t)ref->gguf->file_size + (size_t)q->gguf->file_size +
                        ql_sched_bytes(&ref->hp, d->ctx, group, 1);
    const size_t left = budget > used ? budget - used : 0;
    const size_t logp = ql_reference_logp_bytes(d, ref->hp.n_vocab);
    return ql_mem_hold(logp, left);
}

static int eval_base(const base_opts *o)
{
    ql_error err;
    ql_error_clear(&err);
    ql_cli_text_run r; /* the base model, its tokenizer, the text, an f32 forward pass */
    char model_path[QL_PATH_MAX];
    ql_model *qm = NULL;
    ql_weights *ws = NULL;
    ql_act_plan *ap = NULL;
    ql_sched *sched = NULL;
    ql_reference *ref = NULL;
    ql_dist_acc *acc = NULL;
    ql_routing_acc *routing = NULL;
    int rc = QL_EXIT_RUNTIME;
    ql_status st =
        ql_cli_text_run_init(&r, o->base_arg, o->text_arg, o->ctx, o->chunks, QL_TYPE_F32, &err);
    if (st && r.model_path[0] && !r.model && strstr(err.msg, "bad magic")) {
        /* llama-perplexity's --kl-divergence-base names a file of the base's logits. */
        char msg[QL_ERROR_MSG_MAX];
        ql_strlcpy(msg, err.msg, sizeof msg);
        ql_error_set(&err, st,
                     "%s (--base, --kl-divergence-base: the unquantized model's GGUF itself, "
                     "not llama-perplexity's file of its logits)",
                     msg);
    }
    if (!st)
        st = ql_data_resolve(o->model_arg, model_path, sizeof model_path, NULL, &err);
    if (!st)
        st = ql_model_load(&qm, model_path, &err);
    if (!st && (st = ql_model_check_same_shape(r.model, qm, &err)))
        ql_error_prefix(&err, "not a quantization of the base model: ");
    if (!st)
        st = plan_acts(qm, o->act_mode, o->quiet, &ws, &ap, &err);
    ql_attn_rounding kv;
    if (!st)
        st = ql_kv_rounding(o->kv_type, r.model->hp.head_dim, &kv, &err);
    if (st)
        goto fail;
    const ql_model *bm = r.model;
    const ql_ppl_data *d = &r.data;
    const int group = ql_sched_group_for(&bm->hp, o->ctx, 1, d->n_chunks, ql_mem_side(o->budget));
    const size_t keep = keep_logp_bytes(bm, qm, d, group, o->budget);
    if (!o->quiet) {
        const ql_linear *bq = ql_model_first_quantized(bm);
        fprintf(stderr,
                "model %s against base %s (%s, %.3fM params); text %s: %lld tokens, %lld "
                "chunks of %d, %d scored per chunk; model: K/V %s, activations %s; base: f32; "
                "%d threads; reference log-probs %s\n",
                model_path, r.model_path, bm->hp.arch_name, (double)bm->n_params / 1e6, r.text_path,
                (long long)d->n_tokens, (long long)d->n_chunks, o->ctx, d->n_scored, kv.name,
                ql_act_mode_name(o->act_mode), ql_threads_get(),
                keep ? "held in memory" : "regenerated per chunk from the hidden states");
        if (bq)
            fprintf(stderr,
                    "qlab: note: the base %s is itself quantized (%s is %s): figures are "
                    "against it, not against the unquantized model\n",
                    r.model_path, bq->name, ql_type_name(bq->src_type));
    }
    if ((st = ql_sched_alloc(&sched, &err)))
        goto fail;
    /* No cache file: the identity strings only key one. */
    ql_reference_opts ro = {.model_sha256 = "-",
                            .text_sha256 = "-",
                            .cache_dir = NULL,
                            .quiet = o->quiet,
                            .group = group,
                            .keep_bytes = keep};
    if ((st = ql_reference_get(&ref, r.fw, sched, bm->weights, d, &ro, &err)) ||
        (st = ql_dist_acc_alloc(&acc, ql_ppl_n_scored_total(d), bm->hp.n_vocab, &err)))
        goto fail;
    /* A mixture of experts: its routing against the base's, too. */
    if (ql_reference_routes(ref) &&
        (st = ql_routing_acc_alloc(&routing, ql_reference_routes(ref), &err)))
        goto fail;
    pass_printer pr;
    const int64_t tokens = d->n_chunks * (int64_t)(o->ctx - 1);
    ql_progress_begin(&pr.progress, "eval", "tok", tokens, o->quiet);
    const double t0 = ql_now();
    if ((st = ql_reference_score(ref, sched, ws, &kv, group, acc, routing, pass_progress, &pr,
                                 &err)))
        goto fail;
    const double secs = ql_now() - t0;
    ql_progress_end(&pr.progress, tokens, NULL);
    ql_dist_metrics dm;
    ql_dist_acc_finish(acc, &dm);
    if (!o->quiet)
        fprintf(stderr, "%lld scored tokens; reference %.1fs, model %.1fs\n",
                (long long)dm.n_tokens, ql_reference_seconds(ref), secs);
    if ((st = ql_dist_metrics_check_finite(&dm, &err))) {
        ql_error_prefix(&err, "%s: ", model_path);
        goto fail;
    }
    ql_routing_metrics rm = {(double)NAN, (double)NAN, (double)NAN};
    if (routing) {
        ql_layer_record *layers = calloc((size_t)bm->hp.n_layer, sizeof *layers);
        if (!layers) {
            st = ql_error_set(&err, QL_ENOMEM, "out of memory");
            goto fail;
        }
        ql_routing_acc_finish(routing, &rm, layers, NULL, NULL);
        free(layers);
    }
    if (o->json) {
        if ((st = print_json(&dm, &rm, model_path, r.model_path, o, kv.name, d, &err)))
            goto fail;
    } else if (dm.n_tokens < 100) {
        /* llama-perplexity's statistics need 100 tokens: say so rather than print nothing. */
        ql_error_set(&err, QL_EINVAL,
                     "%s: %lld scored tokens; the statistics block needs at least 100 (more "
                     "chunks or a longer text)",
                     r.text_path, (long long)dm.n_tokens);
        goto fail;
    } else {
        ql_dist_metrics_print_llama(&dm, stdout);
        if (routing)
            printf("\n====== Routing of the experts (%d of %d per token) ======\n"
                   "Same experts:          %6.3f %%  (mean over the MoE blocks)\n"
                   "Experts kept:          %6.3f %%\n"
                   "Load shift:            %8.5f   (total variation of the experts' loads)\n",
                   bm->hp.n_expert_used, bm->hp.n_expert, 100.0 * rm.route_agree,
                   100.0 * rm.route_overlap, rm.load_shift);
    }
    rc = QL_EXIT_OK;
    goto out;
fail:
    rc = ql_cli_fail(&err);
out:
    ql_dist_acc_free(acc);
    ql_routing_acc_free(routing);
    ql_reference_free(ref);
    ql_sched_free(sched);
    ql_weights_free(ws);
    ql_act_plan_free(ap);
    ql_model_free(qm);
    ql_cli_text_run_deinit(&r);
    return rc;
}

/* ------------------------------------------------------------------------- */

int ql_cmd_eval(int argc, char **argv)
{
    const char *args[1], *text_arg = NULL, *base_arg = NULL;
    int ctx = 512, chunks = 0, threads = 0;
    uint64_t mem = 0;
    int32_t kv_type = QL_TYPE_F32;
    ql_config act_cfg; /* only its act_mode axis is used */
    ql_config_init(&act_cfg);
    bool quiet = false, json = false, kld_flag = false;
    static const int32_t kv_types[] = {QL_TYPE_F32, QL_TYPE_F16, QL_TYPE_Q8_0, QL_TYPE_Q4_0};
    const ql_opt opts[] = {
        ql_cli_model_opt(&args[0]),
        ql_opt_required(ql_opt_alias(
            ql_opt_str("text", 'f', &text_arg, "FILE|NAME", "the text to score"), "file")),
        ql_opt_alias(ql_opt_str("base", 0, &base_arg, "REF",
                                "measure MODEL against REF's exact reference (KLD, Δp, ...)"),
                     "kl-divergence-base"),
        ql_opt_flag("kl-divergence", 0, &kld_flag,
                    "llama-perplexity's flag for the statistics --base prints\n"
                    "(needs --base)"),
        ql_opt_flag("json", 0, &json, "with --base: the figures as one JSON object"),
        ql_opt_alias(
            ql_opt_int("ctx", 'c', &ctx, 4, 1 << 20, "N", "tokens per chunk (default 512)"),
            "ctx-size"),
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
    if (json && !base_arg)
        return ql_opt_usage(&p, "--json needs --base (plain eval prints one PPL line)");
    if (kld_flag && !base_arg)
        return ql_opt_usage(&p, "--kl-divergence needs --base REF (or --kl-divergence-base REF): "
                                "the unquantized model to measure against");
    const char *model_arg = args[0];
    ql_threads_set(threads);
    const size_t budget = mem ? (size_t)mem : (size_t)((double)ql_mem_total() * 0.7);
    if (base_arg) {
        base_opts bo = {model_arg, base_arg,         text_arg, ctx,   chunks,
                        kv_type,   act_cfg.act_mode, budget,   quiet, json};
        return eval_base(&bo);
    }

    ql_error err;
    ql_error_clear(&err);
    ql_cli_text_run r;
    ql_weights *ws = NULL;
    ql_act_plan *ap = NULL;
    int rc = QL_EXIT_RUNTIME;
    if (ql_cli_text_run_init(&r, model_arg, text_arg, ctx, chunks, kv_type, &err))
        goto fail;
    const ql_model *m = r.model;
    const ql_ppl_data *d = &r.data;
    /* The activation transforms follow each weight's type in the file. */
    if (plan_acts(m, act_cfg.act_mode, quiet, &ws, &ap, &err))
        goto fail;
    fprintf(stderr,
            "model %s (%s, %.3fM params); text %s: %lld tokens, %lld chunks of %d, %d "
            "scored per chunk; K/V %s; activations %s; %d threads\n",
            r.model_path, m->hp.arch_name, (double)m->n_params / 1e6, r.text_path,
            (long long)d->n_tokens, (long long)d->n_chunks, ctx, d->n_scored,
            ql_forward_attn_rounding_name(r.fw), ql_act_mode_name(act_cfg.act_mode),
            ql_threads_get());
    chunk_printer pr = {.quiet = quiet,
                        .live = !(isatty(STDOUT_FILENO) == 1 && isatty(STDERR_FILENO) == 1)};
    const int64_t tokens = d->n_chunks * (int64_t)(ctx - 1);
    ql_progress_begin(&pr.progress, "eval", "tok", tokens, quiet);
    const int group = ql_sched_group_for(&m->hp, ctx, 1, d->n_chunks, ql_mem_side(budget));
    ql_nll_acc acc;
    double t0 = ql_now();
    const ql_status pst =
        ql_sched_perplexity(r.fw, ws, d, group, on_chunk, on_progress, &pr, &acc, &err);
    const double secs = ql_now() - t0;
    if (!pst)
        ql_progress_end(&pr.progress, tokens, NULL);
    chunk_list_end(&pr);
    free(pr.list);
    if (pst)
        goto fail;
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
    ql_cli_text_run_deinit(&r);
    return rc;
}
