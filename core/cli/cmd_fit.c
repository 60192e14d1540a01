/* qlab fit: choose a type per tensor to fill a byte budget and write the mixed
 * GGUF (issue 9). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/data.h"
#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "experiment/fit.h"
#include "experiment/fit_gptq.h"
#include "experiment/gptq_pass.h"
#include "harness/sensitivities.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "results/store.h"

static void help(const ql_opt_parser *p)
{
    printf(
        "usage: qlab fit MODEL.gguf [--imatrix FILE]\n"
        "                (--budget B | --envelope SIZE [--ctx N] [--reserve SIZE])\n"
        "                [--objective imatrix | --objective kld[:G] --calib TEXT [--calib-ctx N]\n"
        "                 [--calib-chunks N] [--db PATH]]\n"
        "                [--quantizer gptq[:OPTS] --calib TEXT [--calib-ctx N] [--calib-chunks N]]\n"
        "                [-o OUT.gguf | --dry-run] [--types LIST] [--exact-errors]\n"
        "                [--sample-rows N] [--cache-dir DIR | --no-cache] [--threads N] [--quiet]\n"
        "\n"
        "Chooses one type per weight tensor so that the whole model fits the budget with the\n"
        "least summed imatrix-weighted error sum_rows sum_j I_j (w - w^)^2, and writes the\n"
        "mixed-precision GGUF. MODEL is a path or a name from datasets/manifest.tsv.\n"
        "With --objective kld the solver minimises the predicted KLD instead: the sum of the\n"
        "chosen (tensor, type) pairs' measured sensitivities, each the mean KLD of the model\n"
        "with only that tensor quantized, on the calibration text TEXT (never the text you\n"
        "evaluate on); they are kept in the results store (--db) and measured only once.\n"
        "--objective kld:module, kld:layer or kld:kind measures and assigns groups instead:\n"
        "a block's attention or feed-forward, a whole block, or one kind in every block,\n"
        "each quantized to one type (the head and the embedding stay units of their own).\n"
        "With --quantizer gptq each block product's candidates are measured by GPTQ's output\n"
        "error sum_rows e H e^T / tokens (H = sum x x^T of its input over --calib TEXT, ggml's\n"
        "rounding for the types GPTQ does not split), and -o writes GPTQ's quantization.\n"
        "\n");
    ql_opt_print_options(stdout, p);
}

typedef struct {
    const char *args[1]; /* MODEL */
    const char *imatrix, *out, *types, *cache_dir;
    const char *objective, *calib, *db; /* --objective kld: its calibration text, store */
    ql_config objective_of;             /* --objective parsed as the sweep axis */
    const char *quantizer;              /* --quantizer */
    ql_config quantizer_of;             /* parsed as the sweep axis */
    int calib_ctx, calib_chunks;
    ql_fit_budget budget;
    bool budget_as;      /* --budget names a quantization: its bytes on this model */
    ql_config as;        /* that quantization (its weight_type axis) */
    const char *as_name; /* as written */
    uint64_t envelope, reserve;
    int ctx, sample_rows, threads;
    bool dry_run, no_cache, exact_errors, quiet;
    bool has_budget, has_envelope, has_reserve; /* given on the command line */
} args;

/* --budget: a size, bpw:X, or a weight type or llama-quantize file type (a sweep's
 * weight_type): the bytes of the model in it, resolved once the model is open. A bad
 * size is reported as ql_fit_parse_size words it: the parser names --budget already. */
static ql_status parse_budget(void *ctx, const char *val, ql_error *err)
{
    args *a = ctx;
    uint64_t bytes;
    a->budget_as = false;
    if (isalpha((unsigned char)val[0]) && strncasecmp(val, "bpw:", 4) != 0) {
        ql_config_init(&a->as);
        if (ql_config_set(&a->as, QL_AXIS_WEIGHT_TYPE, val, err) != QL_OK) {
            char why[QL_ERROR_MSG_MAX];
            ql_strlcpy(why, err->msg + strlen("weight_type: "), sizeof why);
            return ql_error_set(err, QL_EINVAL, "'%s' is not a size, bpw:X or a weight type (%s)",
                                val, why);
        }
        a->budget_as = true;
        a->as_name = val;
        a->budget.kind = QL_FIT_BUDGET_BYTES;
        return QL_OK;
    }
    if (strncasecmp(val, "bpw:", 4) != 0 && ql_fit_parse_size(val, &bytes, err) != QL_OK)
        return err->status;
    return ql_fit_parse_budget(val, &a->budget, err);
}

/* Returns QL_OPT_GO_ON, or the exit code (0 after --help, 2 after a usage error). */
static int parse_args(int argc, char **argv, args *a)
{
    memset(a, 0, sizeof *a);
    a->sample_rows = QL_FIT_SAMPLE_ROWS;
    char types_help[256], exact_help[160];
    snprintf(types_help, sizeof types_help, "candidate types, comma-separated; default:\n%s",
             ql_fit_default_types());
    snprintf(exact_help, sizeof exact_help,
             "measure every row (default: at most %d evenly spaced rows per\n"
             "tensor, error scaled by rows / sampled)",
             QL_FIT_SAMPLE_ROWS);
    const ql_opt opts[] = {
        ql_cli_model_opt(&a->args[0]),
        ql_opt_str("imatrix", 0, &a->imatrix, "FILE",
                   "importance matrix (llama.cpp .dat or GGUF): I_j = sum x_j^2 / count,\n"
                   "also handed to the quantizers as llama-quantize does. Without one,\n"
                   "I_j = 1 and types that need an imatrix are not candidates.\n"
                   "Tensors without an entry: token_embd weighs 1/rows per column (a\n"
                   "lookup), output.weight output_norm^2 (its input), others 1."),
        ql_opt_section("budget:"),
        ql_opt_func("budget", 0, parse_budget, a, "B",
                    "the whole model (fixed tensors included) in bytes: a number with an\n"
                    "optional unit, B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB,\n"
                    "TB (powers of 1000): 4.5GiB, 1200MB, 123456;\n"
                    "or bpw:X: X bits per weight over the weight tensors the solver\n"
                    "assigns, with the fixed tensors (norms, F32) on top, so bpw:4.5 gives\n"
                    "the weights the bytes of a uniform Q4_K model;\n"
                    "or a weight type or llama-quantize file type as a sweep's weight_type\n"
                    "reads it (Q4_K, Q4_K_M, mix:Q6_K): the bytes of this model in that\n"
                    "quantization (with --imatrix's coverage), to compare a fit with it"),
        ql_opt_size("envelope", 0, &a->envelope, "SIZE",
                    "memory available in all: budget = SIZE - KV cache - reserve, where\n"
                    "KV cache = n_layer * ctx * n_kv_heads * head_dim * 2 (K, V) * 2 (f16)"),
        ql_opt_alias(ql_opt_int("ctx", 'c', &a->ctx, 1, 1 << 24, "N",
                                "context for the KV cache (default: the model's context_length)"),
                     "ctx-size"),
        ql_opt_size("reserve", 0, &a->reserve, "SIZE",
                    "compute reserve (default: an estimate of llama.cpp's compute buffer\n"
                    "for 512-token batches, 4*512*(n_vocab + 4 n_embd + 3 n_ff + n_head ctx))"),
        ql_opt_section("objective:"),
        ql_opt_str("objective", 0, &a->objective, "imatrix|kld[:G]",
                   "what the solver minimises (default imatrix): the summed imatrix-\n"
                   "weighted error, or the summed measured sensitivities (KLD) of units\n"
                   "G = tensor (default), module, layer or kind"),
        ql_opt_str("quantizer", 0, &a->quantizer, "ggml|gptq[:OPTS]",
                   "how the candidates are rounded (default ggml): llama-quantize's rounding,\n"
                   "or GPTQ into the same blocks (OPTS as the sweep's quantizer axis)"),
        ql_opt_str("calib", 0, &a->calib, "TEXT",
                   "--objective kld or --quantizer gptq: the calibration text (a path or\n"
                   "dataset name)"),
        ql_opt_int("calib-ctx", 0, &a->calib_ctx, 8, 1 << 20, "N",
                   "its chunk length (default 256)"),
        ql_opt_int("calib-chunks", 0, &a->calib_chunks, 1, 1 << 30, "N",
                   "chunks of it used (default 32)"),
        ql_opt_str("db", 0, &a->db, "PATH",
                   "results store the sensitivities are kept in (default results/qlab.db)"),
        ql_opt_section("output:"),
        ql_opt_alias(
            ql_opt_str("output", 'o', &a->out, "OUT.gguf",
                       "write the fitted model (then read it back and check every tensor)"),
            "output-file"),
        ql_opt_flag("dry-run", 0, &a->dry_run, "print the allocation only"),
        ql_opt_section("error table:"),
        ql_opt_str("types", 0, &a->types, "LIST", types_help),
        ql_opt_flag("exact-errors", 0, &a->exact_errors, exact_help),
        ql_opt_int("sample-rows", 0, &a->sample_rows, 1, 1 << 30, "N", "rows measured per tensor"),
        ql_opt_str("cache-dir", 0, &a->cache_dir, "DIR",
                   "where the error table is cached (default results/cache)"),
        ql_opt_flag("no-cache", 0, &a->no_cache, "neither read nor write the cache"),
        ql_opt_threads(&a->threads, QL_OPT_THREADS_HELP),
        ql_opt_flag("quiet", 'q', &a->quiet, "no progress lines"),
    };
    static const char *const names[] = {"MODEL.gguf"};
    ql_opt_parser p = {.prog = "qlab fit",
                       .opts = opts,
                       .n_opts = QL_OPT_COUNT(opts),
                       .args = a->args,
                       .max_args = 1,
                       .arg_names = names,
                       .n_required = 1,
                       .help = help};
    const int rc = ql_opt_parse(&p, argc, argv);
    if (rc != QL_OPT_GO_ON)
        return rc;
    a->has_budget = ql_opt_given(&p, "budget");
    a->has_envelope = ql_opt_given(&p, "envelope");
    a->has_reserve = ql_opt_given(&p, "reserve");
    if (a->exact_errors)
        a->sample_rows = 0;
    if (a->has_budget == a->has_envelope)
        return ql_opt_usage(&p, "give exactly one of --budget and --envelope");
    if (!a->has_envelope && (a->has_reserve || ql_opt_given(&p, "ctx")))
        return ql_opt_usage(&p, "--ctx and --reserve belong to --envelope");
    if (!a->out == !a->dry_run)
        return ql_opt_usage(&p, "give exactly one of -o OUT.gguf and --dry-run");
    if (a->no_cache && a->cache_dir)
        return ql_opt_usage(&p, "--no-cache and --cache-dir exclude each other");
    ql_config_init(&a->objective_of);
    ql_error e;
    if (a->objective &&
        ql_config_set(&a->objective_of, QL_AXIS_OBJECTIVE, a->objective, &e) != QL_OK)
        return ql_opt_usage(&p, "--%s", e.msg);
    const bool kld = a->objective_of.objective == QL_OBJECTIVE_KLD;
    ql_config_init(&a->quantizer_of);
    if (a->quantizer &&
        ql_config_set(&a->quantizer_of, QL_AXIS_QUANTIZER, a->quantizer, &e) != QL_OK)
        return ql_opt_usage(&p, "--%s", e.msg);
    const bool gptq = a->quantizer_of.quantizer_gptq;
    if (kld && gptq)
        return ql_opt_usage(&p, "--objective kld with --quantizer gptq is not implemented (the "
                                "measured sensitivities are those of ggml's rounding)");
    if (kld && !a->calib)
        return ql_opt_usage(&p, "--objective kld measures sensitivities on --calib TEXT");
    if (gptq && !a->calib)
        return ql_opt_usage(&p, "--quantizer gptq takes its Hessians from --calib TEXT");
    if (!kld && !gptq &&
        (a->calib || ql_opt_given(&p, "calib-ctx") || ql_opt_given(&p, "calib-chunks")))
        return ql_opt_usage(&p, "--calib, --calib-ctx and --calib-chunks belong to --objective "
                                "kld and --quantizer gptq");
    if (!kld && a->db)
        return ql_opt_usage(&p, "--db belongs to --objective kld");
    if (!a->calib_ctx)
        a->calib_ctx = 256;
    if (!a->calib_chunks)
        a->calib_chunks = 32;
    return QL_OPT_GO_ON;
}

/* Resolves the budget in bytes, printing the envelope arithmetic when used. */
static ql_status resolve_budget(const args *a, const ql_gguf *g, const ql_fit_table *t,
                                uint64_t *budget, ql_error *err)
{
    char s1[64], s2[64], s3[64], s4[64];
    if (a->budget_as) {
        /* Sized before the error table (resolve_as). */
        char name[QL_CONFIG_VALUE_MAX];
        ql_config_axis_string(&a->as, QL_AXIS_WEIGHT_TYPE, name, sizeof name);
        *budget = a->budget.bytes;
        ql_fit_format_size(*budget, s1, sizeof s1);
        printf("%-11s %s = this model as %s%s\n", name, s1,
               a->as.weight_mix ? "llama-quantize's " : "pure ", name);
        return QL_OK;
    }
    if (a->has_budget) {
        const ql_fit_budget *b = &a->budget;
        *budget = ql_fit_budget_resolve(b, t);
        if (b->kind == QL_FIT_BUDGET_BPW) {
            ql_fit_format_size(*budget, s1, sizeof s1);
            ql_fit_format_size(t->fixed_bytes, s2, sizeof s2);
            printf("bpw:%-7g %s = %g bits x %lld assigned weights / 8 + fixed tensors %s\n", b->bpw,
                   s1, b->bpw, (long long)t->assigned_params, s2);
        }
        return QL_OK;
    }
    ql_fit_hparams hp;
    ql_status st = ql_fit_hparams_read(g, &hp, err);
    if (st != QL_OK)
        return ql_error_prefix(err, "--envelope: ");
    int64_t ctx = a->ctx > 0 ? a->ctx : hp.n_ctx_train;
    if (ctx <= 0)
        return ql_error_set(err, QL_EINVAL, "%s: no %s.context_length; give --ctx", g->path,
                            hp.arch);
    const uint64_t envelope = a->envelope;
    const uint64_t reserve = a->has_reserve ? a->reserve : ql_fit_reserve_estimate(&hp, ctx);
    uint64_t kv = ql_fit_kv_bytes(&hp, ctx);
    ql_fit_format_size(envelope, s1, sizeof s1);
    ql_fit_format_size(kv, s2, sizeof s2);
    ql_fit_format_size(reserve, s3, sizeof s3);
    printf("envelope    %s\n", s1);
    if (hp.head_dim_k == hp.head_dim_v && hp.kv_heads_sum % hp.n_layer == 0)
        printf("KV cache    %s = %lld layers x ctx %lld x %lld KV heads x head dim %lld x 2 (K, "
               "V) x 2 bytes (f16)\n",
               s2, (long long)hp.n_layer, (long long)ctx, (long long)(hp.kv_heads_sum / hp.n_layer),
               (long long)hp.head_dim_k);
    else
        printf("KV cache    %s = ctx %lld x %lld KV heads over all layers x (K dim %lld + V dim "
               "%lld) x 2 bytes (f16)\n",
               s2, (long long)ctx, (long long)hp.kv_heads_sum, (long long)hp.head_dim_k,
               (long long)hp.head_dim_v);
    printf("reserve     %s%s\n", s3, a->has_reserve ? "" : " (estimate: 512-token compute buffer)");
    if ((st = ql_fit_envelope_budget(envelope, kv, reserve, budget, err)) != QL_OK)
        return st;
    ql_fit_format_size(*budget, s4, sizeof s4);
    printf("budget      %s = envelope - KV cache - reserve\n", s4);
    return QL_OK;
}

/* The model (*m, to free) and the chunks of --calib in it (*d, to deinit; zeroed on
 * every path), for --objective kld and --quantizer gptq. */
static ql_status open_calib(const args *a, const char *path, ql_model **m, ql_ppl_data *d,
                            char text_sha[65], ql_error *err)
{
    memset(d, 0, sizeof *d);
    *m = NULL;
    ql_tokenizer *tok = NULL;
    const ql_data_entry *te = NULL;
    char text_path[QL_PATH_MAX];
    ql_status st = ql_model_load(m, path, err);
    if (!st)
        ql_cli_warn_ctx(*m, path, a->calib_ctx);
    if (!st)
        st = ql_tokenizer_from_gguf(&tok, (*m)->gguf, err);
    if (!st && !(st = ql_data_resolve(a->calib, text_path, sizeof text_path, &te, err)))
        st = ql_data_sha256(te, text_path, text_sha, err);
    if (!st && (st = ql_ppl_data_from_file(d, tok, text_path, a->calib_ctx, a->calib_chunks, err)))
        ql_error_prefix(err, "--calib %s: ", a->calib);
    ql_tokenizer_free(tok);
    return st;
}

/* --objective kld: the table's errors become the measured sensitivities on --calib
 * (from the store when they are there). */
static ql_status kld_errors(const args *a, const char *path, const ql_data_entry *entry,
                            const char *cache_dir, const ql_fit_importance *imp, ql_fit_table *t,
                            ql_error *err)
{
    /* The calibration reference is cached where the error table is (NULL: the default
     * directory; "": nowhere). */
    char dir[QL_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/results/cache", ql_data_root());
    const char *ref_dir = !cache_dir ? dir : *cache_dir ? cache_dir : NULL;
    ql_model *m = NULL;
    ql_imatrix *im = NULL;
    ql_store *store = NULL;
    ql_ppl_data d;
    char text_sha[65], msha[65];
    ql_status st = open_calib(a, path, &m, &d, text_sha, err);
    if (!st)
        st = m->gguf->n_files > 1 ? ql_gguf_sha256(m->gguf, msha, err) /* every file */
                                  : ql_data_sha256(entry, path, msha, err);
    if (!st && a->imatrix) {
        char ipath[QL_PATH_MAX];
        if (!(st = ql_data_resolve(a->imatrix, ipath, sizeof ipath, NULL, err)))
            st = ql_imatrix_read(ipath, &im, err);
    }
    if (!st)
        st = ql_store_open(a->db ? a->db : QL_STORE_DEFAULT_PATH, NULL, &store, err);
    if (!st) {
        printf("objective   kld: sensitivities of every %s on %s, %lld chunks of %d, kept in %s\n",
               ql_grouping_name(a->objective_of.grouping), a->calib, (long long)d.n_chunks, d.ctx,
               a->db ? a->db : QL_STORE_DEFAULT_PATH);
        fflush(stdout);
        const ql_sens_source src = {m,       msha, "", ref_dir, NULL, store, ql_mem_total() / 2,
                                    a->quiet};
        const ql_sens_text text = {&d, text_sha, a->calib};
        /* The imatrix's identity as the error table has it: its file's SHA-256. */
        const char *im_sha = imp && imp->sha256 && *imp->sha256 ? imp->sha256 : "none";
        if (!(st = ql_sens_fill(&src, &text, im, im_sha, a->objective_of.grouping, t, err)))
            ql_fit_table_sort_choices(t);
    }
    ql_store_close(store);
    ql_ppl_data_deinit(&d);
    ql_imatrix_free(im);
    ql_model_free(m);
    return st;
}

/* ggml's importance for GPTQ's scale search, as the table measured with it (a
 * ql_imatrix_lookup_fn over the fit's importance; NULL without an entry). */
static const float *gptq_importance(void *ctx, const char *tensor, int64_t n_per_row,
                                    int64_t n_mats)
{
    const ql_fit_importance *imp = ctx;
    int64_t n = 0;
    const float *v = imp->lookup(imp->user, tensor, &n);
    return v && n == n_per_row * n_mats ? v : NULL;
}

/* --quantizer gptq: the block products' candidates measured by GPTQ's output errors on
 * the chunks d of --calib (fit_gptq.h). */
static ql_status gptq_errors(const args *a, const ql_model *m, const ql_ppl_data *d,
                             const ql_fit_importance *imp, ql_fit_table *t, ql_error *err)
{
    printf("quantizer   %s: block products' errors e H e^T / tokens of GPTQ's rounding, H over "
           "%s, %lld chunks of %d\n",
           a->quantizer, a->calib, (long long)d->n_chunks, d->ctx);
    fflush(stdout);
    const ql_fit_gptq g = {.model = m,
                           .calib = d,
                           .gptq = &a->quantizer_of.gptq,
                           .imp = imp,
                           .mem = ql_mem_total() / 2,
                           .quiet = a->quiet};
    ql_status st = ql_fit_gptq_errors((void *)&g, t, err);
    if (st)
        return st;
    ql_fit_table_sort_choices(t);
    printf("note        %s\n", t->notes[t->n_notes - 1]);
    return QL_OK;
}

/* --quantizer gptq -o: GPTQ's pass over --calib for the plan's types (*out: its tensors). */
static ql_status gptq_quantize(const args *a, const ql_model *m, const ql_ppl_data *d,
                               const ql_fit_importance *imp, const ql_fit_plan *p,
                               ql_gptq_set **out, ql_error *err)
{
    ql_quant_plan *qp = NULL;
    ql_status st = ql_fit_quant_plan(m->gguf, p, &qp, err);
    if (st)
        return st;
    const ql_gptq_pass_opts po = {.gptq = a->quantizer_of.gptq,
                                  .imatrix = imp && imp->lookup ? gptq_importance : NULL,
                                  .imatrix_ctx = (void *)imp,
                                  .mem = ql_mem_total() / 2,
                                  .quiet = a->quiet};
    ql_gptq_pass_summary sum;
    if (!(st = ql_gptq_pass_run(m, qp, d, &po, out, &sum, err)))
        printf("quantizer   %s: %lld tensors by GPTQ, %.1f MiB planned\n", a->quantizer,
               (long long)sum.n_gptq, (double)sum.bytes_planned / 1048576.0);
    ql_quant_plan_free(qp);
    return st;
}

/* Reads the written file back: every tensor in the planned type and size. */
static ql_status verify(const char *path, const ql_fit_plan *p, ql_error *err)
{
    ql_gguf *g = NULL;
    ql_status st = ql_gguf_open(&g, path, err);
    if (st != QL_OK)
        return ql_error_prefix(err, "reading back the output: ");
    uint64_t total = 0;
    if (g->n_tensors != p->n_tensors) {
        st = ql_error_set(err, QL_EFORMAT, "%s: %lld tensors written, %d planned", path,
                          (long long)g->n_tensors, p->n_tensors);
        goto out;
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        const ql_fit_assignment *a = &p->tensors[i];
        if (strcmp(t->name, a->name) != 0 || t->type != a->type || t->nbytes != a->bytes) {
            st = ql_error_set(err, QL_EFORMAT,
                              "%s: tensor %lld is '%s' %s %llu bytes, planned "
                              "'%s' %s %llu bytes",
                              path, (long long)i, t->name, ql_type_name(t->type),
                              (unsigned long long)t->nbytes, a->name, ql_type_name(a->type),
                              (unsigned long long)a->bytes);
            goto out;
        }
        total += t->nbytes;
    }
    char s1[64], s2[64];
    ql_fit_format_size(total, s1, sizeof s1);
    ql_fit_format_size(g->file_size, s2, sizeof s2);
    printf("wrote       %s: tensors %s, file %s; read back: every tensor in its planned type "
           "and size\n",
           path, s1, s2);
out:
    ql_gguf_close(g);
    return st;
}

int ql_cmd_fit(int argc, char **argv)
{
    args a;
    const int rc = parse_args(argc, argv, &a);
    if (rc != QL_OPT_GO_ON)
        return rc;
    ql_threads_set(a.threads);

    ql_error err;
    ql_error_clear(&err);
    char path[QL_PATH_MAX];
    const ql_data_entry *entry = NULL;
    ql_gguf *g = NULL;
    ql_fit_table *t = NULL;
    ql_fit_plan *p = NULL;
    ql_fit_imatrix *im = NULL;
    const ql_fit_importance *imp = NULL;
    ql_model *cm = NULL; /* --quantizer gptq: the model and the chunks of --calib */
    ql_ppl_data cd = {0};
    ql_gptq_set *gset = NULL;
    ql_status st = ql_data_resolve(a.args[0], path, sizeof path, &entry, &err);
    if (st != QL_OK)
        goto out;
    if ((st = ql_gguf_open(&g, path, &err)) != QL_OK)
        goto out;
    ql_fit_options o;
    ql_fit_options_init(&o);
    o.types = a.types;
    o.sample_rows = a.sample_rows;
    o.cache_dir = a.no_cache ? "" : a.cache_dir;
    o.quiet = a.quiet;
    o.assign_routers = a.objective_of.objective == QL_OBJECTIVE_KLD;
    printf("model       %s\n", path);
    if (a.imatrix) {
        char ipath[QL_PATH_MAX];
        if ((st = ql_data_resolve(a.imatrix, ipath, sizeof ipath, NULL, &err)) != QL_OK ||
            (st = ql_fit_imatrix_open(ipath, &im, &err)) != QL_OK)
            goto out;
        imp = ql_fit_imatrix_importance(im);
        printf("imatrix     %s (%lld entries)\n", ipath, (long long)ql_fit_imatrix_entries(im));
    } else {
        printf("imatrix     none (plain squared error; types that need an imatrix are skipped)\n");
    }
    /* A named quantization is sized first: what it cannot be (a mix without an
     * imatrix it needs) fails before the error table is measured. */
    if (a.budget_as && (st = ql_fit_budget_of(g, &a.as, imp, &a.budget.bytes, &err)) != QL_OK) {
        ql_error_prefix(&err, "--budget %s: ", a.as_name);
        goto out;
    }
    fflush(stdout); /* before the progress lines on stderr */
    if ((st = ql_fit_table_compute(g, entry ? entry->sha256 : NULL, imp, &o, &t, &err)) != QL_OK)
        goto out;
    int n_assigned = 0;
    for (int i = 0; i < t->n_tensors; i++)
        n_assigned += t->tensors[i].assigned;
    printf("types       %s\n", a.types ? t->types : ql_fit_default_types());
    printf("errors      %d weight tensors, %s, %s in %.2f s%s%s\n", n_assigned,
           t->sample_rows ? "sampled rows" : "every row",
           t->from_cache ? "read from the cache" : "measured", t->seconds,
           t->cache_path[0] ? ": " : "", t->cache_path);
    for (int i = 0; i < t->n_notes; i++)
        printf("note        %s\n", t->notes[i]);

    const bool kld = a.objective_of.objective == QL_OBJECTIVE_KLD;
    if (kld && (st = kld_errors(&a, path, entry, o.cache_dir, imp, t, &err)))
        goto out;
    const bool gptq = a.quantizer_of.quantizer_gptq;
    char text_sha[65];
    if (gptq && ((st = open_calib(&a, path, &cm, &cd, text_sha, &err)) ||
                 (st = gptq_errors(&a, cm, &cd, imp, t, &err))))
        goto out;
    uint64_t budget;
    if ((st = resolve_budget(&a, g, t, &budget, &err)) != QL_OK)
        goto out;
    if ((st = ql_fit_solve(t, budget, NULL, &p, &err)) != QL_OK)
        goto out;
    printf("\n");
    ql_fit_plan_print(stdout, p, t);
    if (kld)
        printf("predicted   KLD %.4e: the sum of the chosen %ss' sensitivities on %s (each "
               "alone; interactions add to it)\n",
               p->err, ql_grouping_name(a.objective_of.grouping), a.calib);
    fflush(stdout);
    if (a.out) {
        if (gptq && (st = gptq_quantize(&a, cm, &cd, imp, p, &gset, &err)))
            goto out;
        const ql_fit_write_extra extra = {.prequant = ql_gptq_set_lookup,
                                          .prequant_ctx = gset,
                                          .quantizer = a.quantizer};
        if ((st = ql_fit_write(g, p, imp, gptq ? &extra : NULL, a.out, a.quiet, &err)) != QL_OK)
            goto out;
        st = verify(a.out, p, &err);
    }
out:
    ql_gptq_set_free(gset);
    ql_ppl_data_deinit(&cd);
    ql_model_free(cm);
    ql_fit_plan_free(p);
    ql_fit_table_free(t);
    ql_fit_imatrix_free(im);
    ql_gguf_close(g);
    return st == QL_OK ? QL_EXIT_OK : ql_cli_fail(&err);
}
