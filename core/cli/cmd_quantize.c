/* qlab quantize: write a GGUF model in other types through the type policy, with
 * llama-quantize's command line (IN OUT TYPE [nthreads] and its options) or qlab's
 * pure form (--type T). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/data.h"
#include "base/suggest.h"
#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "experiment/gptq_pass.h"
#include "experiment/imatrix.h"
#include "formats/types.h"
#include "model/gguf.h"
#include "model/imatrix_io.h"
#include "model/model.h"
#include "model/quant_model.h"
#include "model/tokenizer.h"

/* Tensor names are at most 63 bytes; escaped, a byte takes at most 4. */
#define QL_NAME_ESCAPED 64

static const char *const usage_head =
    "usage: qlab quantize [options] IN.gguf OUT.gguf TYPE [nthreads]\n"
    "       qlab quantize [options] IN.gguf OUT.gguf --type T\n"
    "\n"
    "Writes OUT.gguf with the weights of IN.gguf (F32/F16/BF16) quantized, bit-identical\n"
    "to llama.cpp's quantizers, in a file llama.cpp loads.\n"
    "\n"
    "TYPE is a llama-quantize file type, with llama-quantize's per-tensor rules (b4747):\n"
    "the head, the embeddings, attn_v, attn_k, attn_q, ffn_down and attn_output get the\n"
    "types its mixes give them by layer position and GQA ratio. A name or a number:\n";

/* Follows the options. */
static const char *const usage_tail =
    "\n"
    "  (Q3_K, Q4_K and Q5_K mean Q3_K_M, Q4_K_M and Q5_K_M, as in llama-quantize;\n"
    "  * needs --imatrix.) nthreads, after TYPE, is --threads as llama-quantize reads it.\n"
    "  The form with --type is qlab's pure one (the experiment axis: one type everywhere,\n"
    "  the head and embeddings by --head-type and --embd-type) in place of TYPE.\n"
    "\n"
    "Policy: 1-D tensors stay F32; a row length that does not split into a type's blocks\n"
    "falls back as llama.cpp does (K/IQ types to their 32-block neighbours, then F16),\n"
    "and every fallback is listed with the rule that chose each type. INT8_ROW and\n"
    "Q8_0_XC are not GGUF types and are refused here (sweeps evaluate them in memory).\n";

/* Width of the usage text's lines. */
#define USAGE_COLUMNS 86

/* Prints words after a label, wrapped at USAGE_COLUMNS under an indent. */
typedef struct {
    size_t col;
    const char *indent;
} wrap;

static void wrap_word(wrap *w, const char *word)
{
    const size_t n = 1 + strlen(word);
    if (w->col + n > USAGE_COLUMNS) {
        printf("\n%s", w->indent);
        w->col = strlen(w->indent);
    }
    printf(" %s", word);
    w->col += n;
}

static void help(const ql_opt_parser *p)
{
    fputs(usage_head, stdout);
    wrap w = {1, " "};
    printf(" ");
    const ql_quant_mix *mixes[64];
    const int n_mix = ql_quant_mix_list(mixes, 64);
    for (int i = 0; i < n_mix; i++) {
        char word[48];
        snprintf(word, sizeof word, "%d=%s%s", (int)mixes[i]->ftype, mixes[i]->name,
                 mixes[i]->needs_imatrix ? "*" : "");
        wrap_word(&w, word);
    }
    fputs("\n\n", stdout);
    ql_opt_print_options(stdout, p);
    fputs(usage_tail, stdout);
}

/* "weight type:" and the types ql_quant_model writes, wrapped, into buf. */
static void type_help(char *buf, size_t size)
{
    size_t len = (size_t)snprintf(buf, size, "weight type, every tensor (pure):"), col = len;
    const ql_type_traits *types[QL_TYPE_ID_LIMIT];
    const int n = ql_type_list(types, QL_TYPE_ID_LIMIT);
    for (int i = 0; i < n && len < size; i++) {
        if (!ql_type_is_gguf_weight(types[i]))
            continue;
        const size_t wd = 1 + strlen(types[i]->name);
        const bool brk = col + wd > 62;
        len += (size_t)snprintf(buf + len, size - len, "%s%s", brk ? "\n" : " ", types[i]->name);
        col = brk ? wd - 1 : col + wd;
    }
}

/* A type option: what ("weight", "head", "embedding") for the type check; "same"
 * (allowed for head/embd) gives QL_TYPE_INVALID. */
typedef struct {
    const char *what;
    bool allow_same;
    int32_t *dest;
    bool *given; /* set when the option is given, or NULL */
} type_arg;

static ql_status parse_type(void *ctx, const char *val, ql_error *err)
{
    const type_arg *a = ctx;
    if (a->allow_same && strcmp(val, "same") == 0) {
        *a->dest = QL_TYPE_INVALID;
        return QL_OK;
    }
    int32_t t;
    ql_status st = ql_opt_parse_type(val, NULL, 0, &t, err);
    if (st == QL_OK)
        st = ql_quant_model_check_type(t, a->what, err);
    if (st == QL_OK) {
        *a->dest = t;
        if (a->given)
            *a->given = true;
    }
    return st;
}

static void format_shape(const ql_quant_plan_entry *e, char *buf, size_t size)
{
    int n = snprintf(buf, size, "[%lld", (long long)e->ne[0]);
    for (uint32_t d = 1; d < e->n_dims && n > 0 && (size_t)n < size; d++)
        n += snprintf(buf + n, size - (size_t)n, ", %lld", (long long)e->ne[d]);
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "]");
}

static double bpw(uint64_t bytes, int64_t params)
{
    return params > 0 ? 8.0 * (double)bytes / (double)params : 0.0;
}

static void print_error_cols(const ql_weight_error *e, bool weighted_cols)
{
    double rel = sqrt(e->sse / (e->sum_sq > 0 ? e->sum_sq : 1.0));
    printf("  %10.3e  %10.3e  %9.3e", ql_weight_error_rmse(e), e->max_abs, rel);
    if (!weighted_cols)
        return;
    if (e->weighted)
        printf("  %10.3e  %9.3e", e->w_sse, ql_weight_error_rel(e));
    else
        printf("  %10s  %9s", "-", "-");
}

/* An imatrix given to the quantizer and/or the stats. */
typedef struct {
    const char *path;
    ql_imatrix *im;
    ql_imatrix_table *table;
} imatrix_arg;

static void imatrix_arg_free(imatrix_arg *a)
{
    ql_imatrix_table_free(a->table);
    ql_imatrix_free(a->im);
}

static ql_status imatrix_arg_load(imatrix_arg *a, const ql_gguf *model, ql_error *err)
{
    ql_status st = ql_imatrix_read(a->path, &a->im, err);
    if (st)
        return st;
    char warning[QL_ERROR_MSG_MAX];
    if (ql_imatrix_dropped_warning(a->im, warning, sizeof warning)) {
        fputs("qlab: warning: ", stderr);
        ql_fwrite_terminal(stderr, warning, strlen(warning));
        fputc('\n', stderr);
    }
    return ql_imatrix_table_alloc(&a->table, a->im, model, err);
}

/* Whether the imatrix dropped the entry of a tensor as degenerate (all zero, denormal). */
static bool entry_dropped(const ql_imatrix *im, const char *name)
{
    for (int64_t i = 0; i < im->n_dropped; i++)
        if (strcmp(im->dropped[i], name) == 0)
            return true;
    return false;
}

/* The input as `qlab eval` reads it, model and tokenizer: a file qlab's own loader
 * refuses (a header that disagrees with the tensors, impossible hyper-parameters, a
 * broken vocabulary) is refused before anything is written, with the loader's message.
 * Tensors the forward pass does not read are copied, as llama-quantize copies them. */
static ql_status load_checked(const char *path, ql_model **out, ql_error *err)
{
    ql_status st = ql_model_load_for_rewrite(out, path, NULL, err);
    if (st)
        return st;
    ql_tokenizer *tok = NULL;
    if ((st = ql_tokenizer_from_gguf(&tok, (*out)->gguf, err))) {
        ql_model_free(*out);
        *out = NULL;
        return st;
    }
    ql_tokenizer_free(tok);
    return QL_OK;
}

/* The command line: options, then IN OUT and TYPE [nthreads] or --type. */
typedef struct {
    const char *paths[2];
    const char *file_type; /* the positional TYPE, NULL with --type */
    const char **rules;    /* --tensor-type, argc entries */
    int n_rules;
    bool have_type; /* --type */
    bool pure;
    /* llama-quantize's --override-kv (parsed), --include-weights, --exclude-weights:
     * argc entries each. */
    ql_quant_kv_override *overrides;
    int n_overrides;
    const char **include, **exclude;
    int n_include, n_exclude;
    /* --quantizer gptq[:OPTS] (else ggml's) and its calibration text. */
    bool gptq;
    ql_gptq_opts gptq_opts;
    const char *calib;
    int calib_ctx, calib_chunks;
    uint64_t mem;
} args;

/* --quantizer ggml | gptq[:OPTS]. */
static ql_status parse_quantizer(void *ctx, const char *val, ql_error *err)
{
    args *a = ctx;
    if (strcmp(val, "ggml") == 0) {
        a->gptq = false;
        return QL_OK;
    }
    if (strncmp(val, "gptq", 4) == 0 && (val[4] == '\0' || val[4] == ':')) {
        a->gptq = true;
        return ql_gptq_opts_parse(val[4] ? val + 5 : "", &a->gptq_opts, err);
    }
    return ql_error_set(err, QL_EINVAL, "unknown quantizer '%s' (expected ggml or gptq[:OPTS])",
                        val);
}

/* --override-kv KEY=TYPE:VALUE, repeatable. */
static ql_status add_override(void *ctx, const char *val, ql_error *err)
{
    args *a = ctx;
    ql_status st = ql_quant_kv_override_parse(val, &a->overrides[a->n_overrides], err);
    if (!st)
        a->n_overrides++;
    return st;
}

static ql_status add_include(void *ctx, const char *val, ql_error *err)
{
    args *a = ctx;
    (void)err;
    a->include[a->n_include++] = val;
    return QL_OK;
}

static ql_status add_exclude(void *ctx, const char *val, ql_error *err)
{
    args *a = ctx;
    (void)err;
    a->exclude[a->n_exclude++] = val;
    return QL_OK;
}

/* ------------------------------------------------------------------------- */
/* --include-weights / --exclude-weights: which tensors the imatrix applies to */

/* llama-quantize's rule (prepare_imatrix): an entry whose name contains an excluded
 * string is dropped, then, when strings are included, only entries whose name
 * contains one of them are kept. */
static bool weights_chosen(const args *a, const char *name)
{
    for (int i = 0; i < a->n_exclude; i++)
        if (strstr(name, a->exclude[i]))
            return false;
    for (int i = 0; i < a->n_include; i++)
        if (strstr(name, a->include[i]))
            return true;
    return a->n_include == 0;
}

typedef struct {
    const args *a;
    ql_imatrix_table *table;
} weights_filter;

static const float *filtered_lookup(void *ctx, const char *tensor, int64_t n_per_row,
                                    int64_t n_mats)
{
    const weights_filter *f = ctx;
    if (!weights_chosen(f->a, tensor))
        return NULL;
    return ql_imatrix_table_lookup(f->table, tensor, n_per_row, n_mats);
}

/* llama-quantize's warning for --allow-requantize, with what it applies to here. */
static void warn_requantize(const ql_gguf *model, const char *path)
{
    int64_t n = 0;
    int32_t first = QL_TYPE_INVALID;
    for (int64_t i = 0; i < model->n_tensors; i++)
        if (!ql_quant_is_float_type(model->tensors[i].type)) {
            if (!n++)
                first = model->tensors[i].type;
        }
    if (n == 0)
        return;
    fprintf(stderr,
            "qlab: warning: --allow-requantize: %lld tensors of %s are already quantized (%s "
            "first): those that change type are quantized again from their dequantized values, "
            "which can severely reduce quality compared to quantizing from 16 or 32 bit\n",
            (long long)n, path, ql_type_name(first));
}

static void print_report(const ql_quant_model_report *r, const char *out_path, bool stats,
                         const ql_gguf *model, const imatrix_arg *imat,
                         const imatrix_arg *stats_imat, const args *a)
{
    const ql_quant_plan *p = r->plan;
    size_t w = 24;
    for (int64_t i = 0; i < p->n; i++) {
        char esc[4 * QL_NAME_ESCAPED];
        const size_t n = ql_escape_terminal(p->entries[i].name, esc, sizeof esc);
        w = n > w ? n : w;
    }
    const bool weighted_cols = stats && r->total.weighted;
    printf("%-*s  %-14s  %-7s  %10s  %6s", (int)w, "tensor", "shape (ggml)", "type", "bytes",
           "bpw");
    if (stats)
        printf("  %10s  %10s  %9s%s", "rmse", "max_err", "rel_rmse",
               weighted_cols ? "    imat_err   imat_rel" : "");
    printf("  note\n");
    int64_t n_quantized = 0, n_without = 0;
    for (int64_t i = 0; i < p->n; i++) {
        const ql_quant_plan_entry *e = &p->entries[i];
        char shape[64];
        format_shape(e, shape, sizeof shape);
        /* Names come from the file: escaped for the terminal. */
        char name[4 * QL_NAME_ESCAPED];
        ql_escape_terminal(e->name, name, sizeof name);
        printf("%-*s  %-14s  %-7s  %10llu  %6.2f", (int)w, name, shape, ql_type_name(e->used),
               (unsigned long long)e->bytes, bpw(e->bytes, e->n_per_row * e->nrows));
        if (stats)
            print_error_cols(&r->errors[i], weighted_cols);
        /* Converted tensors (the source type changes) are where an imatrix can act; the
         * plan lists the tensors in file order. */
        const bool converted = model && e->used != model->tensors[i].type;
        if (converted)
            n_quantized++;
        /* Why the type: a rule of the mix or an override, when it is not the plan's
         * weight type; then the fallback. */
        const char *sep = "  ";
        if ((e->role == QL_ROLE_WEIGHT || e->role == QL_ROLE_HEAD || e->role == QL_ROLE_EMBD) &&
            (e->requested != p->weight_type || strncmp(e->choice, "--", 2) == 0)) {
            printf("%s%s", sep, e->choice);
            sep = "; ";
        }
        if (e->fallback != QL_FALLBACK_NONE) {
            printf("%sfallback from %s: %s", sep, ql_type_name(e->requested), e->reason);
            sep = "; ";
        } else if (e->role == QL_ROLE_KEEP) {
            printf("%skept (%s)", sep, e->choice);
            sep = "; ";
        }
        if (imat->im && converted && !r->has_imatrix[i]) {
            const char *skipped = ql_imatrix_table_skipped(imat->table);
            n_without++;
            printf("%s%s: quantized without", sep,
                   !weights_chosen(a, e->name) ? (a->n_include ? "not chosen by --include-weights"
                                                               : "left out by --exclude-weights")
                   : skipped && strcmp(skipped, e->name) == 0 ? "imatrix entry of another length"
                   : entry_dropped(imat->im, e->name)         ? "imatrix entry without usable "
                                                                "importance (all zero or denormal)"
                                                              : "no imatrix entry");
        }
        printf("\n");
    }
    printf("\n");
    printf("model: %lld params, %llu bytes of tensors, %.3f bpw\n", (long long)p->params,
           (unsigned long long)p->bytes, bpw(p->bytes, p->params));
    printf("body (without head and embeddings): %lld params, %llu bytes, %.3f bpw\n",
           (long long)p->body_params, (unsigned long long)p->body_bytes,
           bpw(p->body_bytes, p->body_params));
    printf("fallbacks: %lld of %lld tensors\n", (long long)p->n_fallback, (long long)p->n);
    if (p->mix)
        printf("file type: %s (%d), default type %s, %s\n", p->mix->name, (int)p->mix->ftype,
               ql_type_name(p->weight_type),
               p->rules ? "llama-quantize's per-tensor rules (b4747)" : "no per-tensor rules");
    if (imat->im) {
        printf("imatrix %s: %lld entries, %lld chunks; %lld of %lld quantized tensors used it, "
               "%lld quantized without (no entry, as llama-quantize does)",
               imat->path, (long long)imat->im->n_entries, (long long)imat->im->chunk_count,
               (long long)(n_quantized - n_without), (long long)n_quantized, (long long)n_without);
        if (ql_imatrix_table_skipped(imat->table))
            printf("; %s skipped: its entry has another length (llama-quantize ignores it too)",
                   ql_imatrix_table_skipped(imat->table));
        if (imat->im->n_dropped)
            printf("; %lld entr%s dropped (no usable importance)", (long long)imat->im->n_dropped,
                   imat->im->n_dropped == 1 ? "y" : "ies");
        printf("\n");
    }
    if (stats) {
        printf("error, model:");
        print_error_cols(&r->total, weighted_cols);
        printf("   (rmse, max |w - w^|, rms relative%s)\n",
               weighted_cols ? ", imatrix-weighted sum and relative" : "");
        printf("error, body: ");
        print_error_cols(&r->body, weighted_cols);
        printf("\n");
        if (weighted_cols)
            printf("imatrix-weighted error: %.6e (relative %.6e) over %lld of %lld weights, "
                   "weighted by %s\n",
                   r->total.w_sse, ql_weight_error_rel(&r->total), (long long)r->total.w_n,
                   (long long)r->total.n, stats_imat->im ? stats_imat->path : imat->path);
    }
    if (r->n_requantized)
        printf("requantized: %lld tensors quantized again from their dequantized values\n",
               (long long)r->n_requantized);
    for (int k = 0; k < r->n_files && r->n_files > 1; k++) {
        char path[QL_PATH_MAX];
        if (ql_quant_out_path(out_path, k, r->n_files, path, sizeof path))
            printf("split file %d of %d: %s\n", k + 1, (int)r->n_files, path);
    }
    if (r->n_files > 1) {
        char first[QL_PATH_MAX];
        if (!ql_quant_out_path(out_path, 0, r->n_files, first, sizeof first))
            first[0] = '\0';
        printf("wrote %s (and %d more files): %llu bytes, general.file_type %u, %.2f s\n", first,
               (int)r->n_files - 1, (unsigned long long)r->file_size, r->file_type, r->seconds);
    } else {
        printf("wrote %s: %llu bytes, general.file_type %u, %.2f s\n", out_path,
               (unsigned long long)r->file_size, r->file_type, r->seconds);
    }
}

/* --quantizer gptq: the plan ql_quant_model will follow, the calibration text in
 * chunks, then GPTQ's layer-by-layer pass, whose tensors opts->prequant hands over. */
static ql_status run_gptq(args *a, const ql_model *m, ql_quant_model_opts *opts,
                          ql_gptq_set **set, ql_error *err)
{
    ql_quant_config cfg = opts->cfg;
    cfg.has_imatrix = opts->imatrix != NULL;
    ql_quant_plan *plan = NULL;
    ql_tokenizer *tok = NULL;
    ql_ppl_data data;
    memset(&data, 0, sizeof data);
    char text_path[QL_PATH_MAX];
    int ctx = a->calib_ctx;
    if (ctx <= 0)
        ctx = m->hp.n_ctx_train > 0 && m->hp.n_ctx_train < 512 ? (int)m->hp.n_ctx_train : 512;
    ql_status st;
    if ((st = ql_quant_plan_build(m->gguf, &cfg, &plan, err)) ||
        (st = ql_data_resolve(a->calib, text_path, sizeof text_path, NULL, err)) ||
        (st = ql_tokenizer_from_gguf(&tok, m->gguf, err)) ||
        (st = ql_ppl_data_from_file(&data, tok, text_path, ctx, a->calib_chunks, err)))
        goto out;
    ql_gptq_pass_opts po = {.gptq = a->gptq_opts,
                            .imatrix = opts->imatrix,
                            .imatrix_ctx = opts->imatrix_ctx,
                            .mem = (size_t)a->mem,
                            .quiet = opts->quiet};
    ql_gptq_pass_summary sum;
    if ((st = ql_gptq_pass_run(m, plan, &data, &po, set, &sum, err)))
        goto out;
    char o[160];
    ql_gptq_opts_print(&a->gptq_opts, o, sizeof o);
    printf("quantizer gptq%s%s: %lld tensors by GPTQ, %lld by ggml's quantizer (types that do "
           "not split); calibration %s: %lld chunks of %d tokens; memory planned %.1f MiB "
           "(Hessians of a block %.1f MiB); %.2f s Hessians, %.2f s GPTQ, %.2f s forward\n",
           o[0] ? ":" : "", o, (long long)sum.n_gptq, (long long)sum.n_ggml, text_path,
           (long long)data.n_chunks, ctx, (double)sum.bytes_planned / 1048576.0,
           (double)sum.hessian_bytes / 1048576.0, sum.seconds_hessian, sum.seconds_gptq,
           sum.seconds_forward);
    opts->prequant = ql_gptq_set_lookup;
    opts->prequant_ctx = *set;
    /* The file says how it was rounded (llama.cpp ignores keys it does not know), unless
     * an --override-kv sets the key itself. */
    static char kv_text[256];
    snprintf(kv_text, sizeof kv_text, "quantize.quantizer=str:gptq%s%s", o[0] ? ":" : "", o);
    bool given = false;
    for (int i = 0; i < a->n_overrides; i++)
        given = given || strcmp(a->overrides[i].key, "quantize.quantizer") == 0;
    if (!given && !(st = ql_quant_kv_override_parse(kv_text, &a->overrides[a->n_overrides], err))) {
        /* First, so that a user's overrides still come after it. */
        ql_quant_kv_override mine = a->overrides[a->n_overrides];
        memmove(a->overrides + 1, a->overrides, (size_t)a->n_overrides * sizeof *a->overrides);
        a->overrides[0] = mine;
        a->n_overrides++;
        opts->kv_overrides = a->overrides;
        opts->n_kv_overrides = a->n_overrides;
    }
out:
    ql_ppl_data_deinit(&data);
    ql_tokenizer_free(tok);
    ql_quant_plan_free(plan);
    return st;
}

/* --tensor-type REGEX=T, repeatable: the rules in the order given. */
static ql_status add_rule(void *ctx, const char *val, ql_error *err)
{
    args *a = ctx;
    (void)err;
    a->rules[a->n_rules++] = val;
    return QL_OK;
}

/* Parses argv into a, opts and the imatrix paths. Returns -1 to go on, else the
 * exit code (help, a usage error). */
static int parse_args(int argc, char **argv, args *a, ql_quant_model_opts *opts, imatrix_arg *imat,
                      imatrix_arg *stats_imat)
{
    ql_quant_config *cfg = &opts->cfg;
    int threads = 0;
    type_arg weight = {"weight", false, &cfg->weight_type, &a->have_type};
    type_arg head = {"head", true, &cfg->head_type, NULL};
    type_arg embd = {"embedding", true, &cfg->embd_type, NULL};
    type_arg out_type = {"head", false, &cfg->head_type, NULL};
    type_arg tok_type = {"embedding", false, &cfg->embd_type, NULL};
    char types[640];
    type_help(types, sizeof types);
    const ql_opt table[] = {
        ql_opt_section("options (llama-quantize's):"),
        ql_opt_flag("pure", 0, &a->pure,
                    "TYPE's default type for every tensor, no per-tensor rules"),
        ql_opt_str("imatrix", 0, &imat->path, "FILE",
                   "importance matrix (llama.cpp .dat or GGUF, e.g. from 'qlab imatrix'):\n"
                   "each tensor with an entry is quantized with the importance of its\n"
                   "columns (mean x^2), as llama-quantize --imatrix does; tensors without\n"
                   "an entry (token_embd, output) are quantized without and listed"),
        ql_opt_func("output-tensor-type", 0, parse_type, &out_type, "T", "type of output.weight"),
        ql_opt_func("token-embedding-type", 0, parse_type, &tok_type, "T",
                    "type of token_embd.weight"),
        ql_opt_flag("leave-output-tensor", 0, &cfg->leave_output, "output.weight keeps its type"),
        ql_opt_func("tensor-type", 0, add_rule, a, "REGEX=T",
                    "tensors whose name matches REGEX (lowercased, anywhere in the\n"
                    "name) get T; repeatable, the first matching rule wins; it wins\n"
                    "over TYPE's rules and --type, not over the two type options above"),
        ql_opt_flag("allow-requantize", 0, &opts->allow_requantize,
                    "quantize tensors that are already quantized again, from their\n"
                    "dequantized values (can severely reduce quality compared to\n"
                    "quantizing from 16 or 32 bit)"),
        ql_opt_func("override-kv", 0, add_override, a, "KEY=TYPE:VALUE",
                    "set a metadata key in the output; TYPE int, float, bool or str\n"
                    "(llama.cpp's syntax: e.g. general.name=str:tiny); repeatable"),
        ql_opt_func("include-weights", 0, add_include, a, "NAME",
                    "use the imatrix only for tensors whose name contains NAME;\n"
                    "repeatable"),
        ql_opt_func("exclude-weights", 0, add_exclude, a, "NAME",
                    "do not use the imatrix for tensors whose name contains NAME;\n"
                    "repeatable (not with --include-weights)"),
        ql_opt_flag("keep-split", 0, &opts->keep_split,
                    "a split input (IN-00001-of-0000N.gguf) gives a split output of as\n"
                    "many files, OUT-0000k-of-0000N.gguf, each with its input file's\n"
                    "tensors; without it one file"),
        ql_opt_section("qlab's pure form and other options:"),
        ql_opt_func("type", 0, parse_type, &weight, "T", types),
        ql_opt_func("head-type", 0, parse_type, &head, "T",
                    "type of output.weight (default: same as --type; 'same')"),
        ql_opt_func("embd-type", 0, parse_type, &embd, "T",
                    "type of token_embd.weight (default: same as --type; 'same')"),
        ql_opt_threads(&threads, QL_OPT_THREADS_HELP ";\nthe bytes do not depend on N"),
        ql_opt_flag("stats", 0, &opts->stats,
                    "per-tensor error of the dequantized weights vs the source:\n"
                    "rmse, max |w - w^| and relative error, plus model totals; with an\n"
                    "imatrix also imat_err = sum_rows sum_j I_j (w - w^)^2 and its\n"
                    "relative form imat_rel = imat_err / sum_rows sum_j I_j w^2"),
        ql_opt_str("stats-imatrix", 0, &stats_imat->path, "FILE",
                   "weigh the --stats errors by FILE instead of --imatrix (quantization\n"
                   "does not use it): compares files quantized with and without an\n"
                   "imatrix on the same scale"),
        ql_opt_func("quantizer", 0, parse_quantizer, a, "Q",
                    "ggml (default: llama-quantize's rounding) or gptq[:OPTS]: GPTQ's\n"
                    "error-compensating rounding into the same formats, from the\n"
                    "Hessians of --calib, block by block; OPTS damp=0.01,\n"
                    "order=natural|act, scales=lazy|static, block=128,\n"
                    "inputs=quantized|reference (GPTQ's defaults)"),
        ql_opt_str("calib", 0, &a->calib, "FILE|NAME",
                   "calibration text of --quantizer gptq (a path or a dataset name)"),
        ql_opt_int("calib-ctx", 0, &a->calib_ctx, 4, 1 << 20, "N",
                   "its chunk length (default 512, or the model's context if smaller)"),
        ql_opt_int("calib-chunks", 0, &a->calib_chunks, 1, 1 << 30, "K",
                   "at most K chunks of it (default: every whole chunk)"),
        ql_opt_size("mem", 0, &a->mem, "SIZE",
                    "memory budget of the GPTQ pass (its Hessians, residual streams and\n"
                    "inverse factor are planned against it; default: no limit)"),
        ql_opt_flag("quiet", 'q', &opts->quiet, "no progress line"),
    };
    const char *pos[4] = {NULL, NULL, NULL, NULL};
    static const char *const names[] = {"IN.gguf", "OUT.gguf", "TYPE", "nthreads"};
    ql_opt_parser p = {.prog = "qlab quantize",
                       .opts = table,
                       .n_opts = QL_OPT_COUNT(table),
                       .args = pos,
                       .max_args = 4,
                       .arg_names = names,
                       .n_required = 2,
                       .help = help};
    const int prc = ql_opt_parse(&p, argc, argv);
    if (prc != QL_OPT_GO_ON)
        return prc;
    a->paths[0] = pos[0];
    a->paths[1] = pos[1];
    if (a->have_type) {
        if (pos[2])
            return ql_opt_usage(&p, "unexpected argument '%s' (TYPE or --type, not both)", pos[2]);
        if (a->pure)
            return ql_opt_usage(&p, "--pure goes with TYPE (--type is pure already)");
    } else {
        if (!pos[2])
            return ql_opt_usage(&p, "expects a TYPE after OUT.gguf (or --type T)");
        a->file_type = pos[2];
        if (!(cfg->mix = ql_quant_mix_by_name(a->file_type))) {
            const ql_quant_mix *mixes[64];
            const char *mix_names[64];
            const int n_mix = ql_quant_mix_list(mixes, 64);
            for (int i = 0; i < n_mix; i++)
                mix_names[i] = mixes[i]->name;
            char hint[64];
            return ql_opt_usage(
                &p, "unknown file type '%s'%s (see --help)", a->file_type,
                ql_did_you_mean(hint, sizeof hint, a->file_type, mix_names, (size_t)n_mix, NULL));
        }
        cfg->pure = a->pure;
        if (pos[3]) {
            ql_error e;
            int64_t n;
            if (ql_opt_parse_int(pos[3], 1, QL_OPT_THREADS_MAX, &n, &e))
                return ql_opt_usage(&p, "nthreads: %s", e.msg);
            threads = (int)n;
        }
        if (cfg->mix->needs_imatrix && !imat->path)
            return ql_opt_usage(&p,
                                "%s needs --imatrix (llama-quantize refuses it without an "
                                "importance matrix)",
                                cfg->mix->name);
    }
    if (stats_imat->path && !opts->stats)
        return ql_opt_usage(&p, "--stats-imatrix weighs --stats; add --stats");
    if (a->gptq && !a->calib)
        return ql_opt_usage(&p, "--quantizer gptq needs --calib TEXT (its Hessians' text)");
    if (!a->gptq && (a->calib || ql_opt_given(&p, "calib-ctx") || ql_opt_given(&p, "calib-chunks")))
        return ql_opt_usage(&p, "--calib is the text of --quantizer gptq; add it");
    if (a->n_include && a->n_exclude)
        return ql_opt_usage(&p, "--include-weights and --exclude-weights exclude each other "
                                "(as in llama-quantize)");
    if ((a->n_include || a->n_exclude) && !imat->path)
        return ql_opt_usage(&p,
                            "--%s-weights chooses the tensors --imatrix applies to: give "
                            "--imatrix",
                            a->n_include ? "include" : "exclude");
    opts->kv_overrides = a->overrides;
    opts->n_kv_overrides = a->n_overrides;
    ql_threads_set(threads);
    return -1;
}

int ql_cmd_quantize(int argc, char **argv)
{
    ql_quant_model_opts opts = {.cfg = {.weight_type = QL_TYPE_INVALID,
                                        .head_type = QL_TYPE_INVALID,
                                        .embd_type = QL_TYPE_INVALID}};
    imatrix_arg imat = {NULL, NULL, NULL}, stats_imat = {NULL, NULL, NULL};
    args a = {.rules = calloc((size_t)argc + 1, sizeof(const char *)),
              .overrides = calloc((size_t)argc + 1, sizeof(ql_quant_kv_override)),
              .include = calloc((size_t)argc + 1, sizeof(const char *)),
              .exclude = calloc((size_t)argc + 1, sizeof(const char *))};
    ql_gptq_opts_default(&a.gptq_opts);
    if (!a.rules || !a.overrides || !a.include || !a.exclude) {
        free(a.rules);
        free(a.overrides);
        free(a.include);
        free(a.exclude);
        fprintf(stderr, "qlab: error: out of memory\n");
        return QL_EXIT_RUNTIME;
    }
    int rc = parse_args(argc, argv, &a, &opts, &imat, &stats_imat);
    if (rc >= 0) {
        free(a.rules);
        free(a.overrides);
        free(a.include);
        free(a.exclude);
        return rc;
    }
    rc = QL_EXIT_OK;
    const char **paths = a.paths;
    ql_quant_overrides *overrides = NULL;
    ql_error err;
    ql_error_clear(&err);
    ql_quant_model_report *r = NULL;
    ql_model *loaded = NULL;
    const ql_gguf *model = NULL;
    ql_quant_imatrix_meta meta = {NULL, NULL, 0, 0};
    ql_gptq_set *gptq_set = NULL;
    if (ql_quant_overrides_parse(a.rules, a.n_rules, &overrides, &err)) {
        rc = ql_opt_usage_prog("qlab quantize", "%s", err.msg);
        goto out;
    }
    opts.cfg.overrides = overrides;
    for (int i = 0; i < ql_quant_overrides_count(overrides); i++)
        if (ql_quant_model_check_type(ql_quant_overrides_type(overrides, i), "its", &err)) {
            rc = ql_opt_usage_prog("qlab quantize", "--tensor-type '%s': %s",
                                   ql_quant_overrides_rule(overrides, i), err.msg);
            goto out;
        }
    if (load_checked(paths[0], &loaded, &err)) {
        rc = ql_cli_fail(&err);
        goto out;
    }
    model = loaded->gguf;
    /* The imatrix is checked against the model's tensors before anything is written. */
    if ((imat.path && imatrix_arg_load(&imat, model, &err)) ||
        (stats_imat.path && imatrix_arg_load(&stats_imat, model, &err))) {
        rc = ql_cli_fail(&err);
        goto out;
    }
    /* (An imatrix whose every entry was dropped has been warned about already.) */
    if (imat.im && imat.im->n_entries > 0 && ql_imatrix_table_n_matched(imat.table) == 0)
        fprintf(stderr,
                "qlab: warning: no entry of %s names a tensor of %s: nothing is quantized with "
                "importance weights\n",
                imat.path, paths[0]);
    weights_filter filter = {&a, imat.table};
    if (imat.im) {
        opts.imatrix = ql_imatrix_table_lookup;
        opts.imatrix_ctx = imat.table;
        meta.n_entries = imat.im->n_entries;
        if (a.n_include || a.n_exclude) {
            opts.imatrix = filtered_lookup;
            opts.imatrix_ctx = &filter;
            /* llama-quantize records the entries left after the filter. */
            meta.n_entries = 0;
            for (int64_t i = 0; i < imat.im->n_entries; i++)
                meta.n_entries += weights_chosen(&a, imat.im->entries[i].name);
        }
        meta.file = imat.path;
        meta.dataset = imat.im->n_datasets > 0 ? imat.im->datasets[imat.im->n_datasets - 1] : NULL;
        meta.n_chunks = imat.im->chunk_count;
        opts.imatrix_meta = &meta;
    }
    if (stats_imat.im) {
        opts.stats_imatrix = ql_imatrix_table_lookup;
        opts.stats_imatrix_ctx = stats_imat.table;
    }
    if (opts.allow_requantize)
        warn_requantize(model, paths[0]);
    if (opts.keep_split && model->n_files == 1)
        fprintf(stderr,
                "qlab: note: %s is one file, not a split set: --keep-split writes %s as "
                "one file\n",
                paths[0], paths[1]);
    if (a.gptq && run_gptq(&a, loaded, &opts, &gptq_set, &err)) {
        rc = ql_cli_fail(&err);
        goto out;
    }
    if (ql_quant_model(paths[0], paths[1], &opts, &r, &err)) {
        rc = ql_cli_fail(&err);
        goto out;
    }
    print_report(r, paths[1], opts.stats, model, &imat, &stats_imat, &a);
out:
    ql_gptq_set_free(gptq_set);
    ql_quant_model_report_free(r);
    ql_quant_overrides_free(overrides);
    free(a.rules);
    free(a.overrides);
    free(a.include);
    free(a.exclude);
    imatrix_arg_free(&imat);
    imatrix_arg_free(&stats_imat);
    ql_model_free(loaded);
    return rc;
}
