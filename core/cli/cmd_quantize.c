/* qlab quantize: write a GGUF model in other types through the type policy, with
 * llama-quantize's command line (IN OUT TYPE [nthreads] and its options) or qlab's
 * pure form (--type T). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "experiment/imatrix.h"
#include "formats/types.h"
#include "model/gguf.h"
#include "model/imatrix_io.h"
#include "model/quant_model.h"

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

/* Follows the file types. */
static const char *const usage_mid =
    "  (Q3_K, Q4_K and Q5_K mean Q3_K_M, Q4_K_M and Q5_K_M, as in llama-quantize;\n"
    "  * needs --imatrix)\n"
    "\n"
    "options (llama-quantize's):\n"
    "  --pure          TYPE's default type for every tensor, no per-tensor rules\n"
    "  --imatrix FILE  importance matrix (llama.cpp .dat or GGUF, e.g. from 'qlab imatrix'):\n"
    "                  each tensor with an entry is quantized with the importance of its\n"
    "                  columns (mean x^2), as llama-quantize --imatrix does; tensors without\n"
    "                  an entry (token_embd, output) are quantized without and listed\n"
    "  --output-tensor-type T      type of output.weight\n"
    "  --token-embedding-type T    type of token_embd.weight\n"
    "  --leave-output-tensor       output.weight keeps its type\n"
    "  --tensor-type REGEX=T       tensors whose name matches REGEX (lowercased, anywhere in\n"
    "                  the name) get T; repeatable, the first matching rule wins; it wins\n"
    "                  over TYPE's rules and --type, not over the two options above\n"
    "  nthreads        threads, as --threads\n"
    "\n"
    "qlab's pure form (the experiment axis: one type everywhere):\n";

/* Follows the --type line, which lists the types ql_quant_model writes. */
static const char *const usage_text =
    "  --head-type T   type of output.weight (default: same as --type; 'same')\n"
    "  --embd-type T   type of token_embd.weight (default: same as --type; 'same')\n"
    "\n"
    "  --threads N     threads (default: all cores); the bytes do not depend on N\n"
    "  --stats         per-tensor error of the dequantized weights vs the source:\n"
    "                  rmse, max |w - w^| and relative error, plus model totals; with an\n"
    "                  imatrix also imat_err = sum_rows sum_j I_j (w - w^)^2 and its\n"
    "                  relative form imat_rel = imat_err / sum_rows sum_j I_j w^2\n"
    "  --stats-imatrix FILE\n"
    "                  weigh the --stats errors by FILE instead of --imatrix (quantization\n"
    "                  does not use it): compares files quantized with and without an\n"
    "                  imatrix on the same scale\n"
    "  --quiet         no progress line\n"
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

static void print_usage(void)
{
    fputs(usage_head, stdout);
    wrap w = {0, " "};
    printf(" ");
    w.col = 1;
    const ql_quant_mix *mixes[64];
    const int n_mix = ql_quant_mix_list(mixes, 64);
    for (int i = 0; i < n_mix; i++) {
        char word[48];
        snprintf(word, sizeof word, "%d=%s%s", (int)mixes[i]->ftype, mixes[i]->name,
                 mixes[i]->needs_imatrix ? "*" : "");
        wrap_word(&w, word);
    }
    fputs("\n", stdout);
    fputs(usage_mid, stdout);
    static const char type_line[] = "  --type T        weight type:";
    w = (wrap){sizeof type_line - 1, "                 "};
    fputs(type_line, stdout);
    const ql_type_traits *types[QL_TYPE_ID_LIMIT];
    const int n = ql_type_list(types, QL_TYPE_ID_LIMIT);
    for (int i = 0; i < n; i++)
        if (ql_type_is_gguf_weight(types[i]))
            wrap_word(&w, types[i]->name);
    fputs("\n", stdout);
    fputs(usage_text, stdout);
}

/* Parses a type option as what ("weight", "head", "embedding"); "same" (allowed for
 * head/embd) gives QL_TYPE_INVALID. */
static int parse_type(const char *opt, const char *what, const char *val, bool allow_same,
                      int32_t *out)
{
    if (allow_same && strcmp(val, "same") == 0) {
        *out = QL_TYPE_INVALID;
        return 1;
    }
    const ql_type_traits *t = ql_type_by_name(val);
    if (!t) {
        ql_cli_usage("quantize", "%s: unknown type '%s'", opt, val);
        return 0;
    }
    ql_error err;
    if (ql_quant_model_check_type(t->type, what, &err) != QL_OK) {
        ql_cli_usage("quantize", "%s: %s", opt, err.msg);
        return 0;
    }
    *out = t->type;
    return 1;
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
    if (!st)
        st = ql_imatrix_table_alloc(&a->table, a->im, model, err);
    return st;
}

static void print_report(const ql_quant_model_report *r, const char *out_path, bool stats,
                         const ql_gguf *model, const imatrix_arg *imat,
                         const imatrix_arg *stats_imat)
{
    const ql_quant_plan *p = r->plan;
    size_t w = 24;
    for (int64_t i = 0; i < p->n; i++)
        if (strlen(p->entries[i].name) > w)
            w = strlen(p->entries[i].name);
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
        printf("%-*s  %-14s  %-7s  %10llu  %6.2f", (int)w, e->name, shape, ql_type_name(e->used),
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
                   skipped && strcmp(skipped, e->name) == 0 ? "imatrix entry of another length"
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
    printf("wrote %s: %llu bytes, general.file_type %u, %.2f s\n", out_path,
           (unsigned long long)r->file_size, r->file_type, r->seconds);
}

/* The command line: options, then IN OUT and TYPE [nthreads] or --type. */
typedef struct {
    const char *paths[2];
    const char *file_type; /* the positional TYPE, NULL with --type */
    const char **rules;    /* --tensor-type, argc entries */
    int n_rules;
    bool have_type; /* --type */
    bool pure;
} args;

enum {
    OPT_TYPE = 256,
    OPT_HEAD_TYPE,
    OPT_EMBD_TYPE,
    OPT_OUTPUT_TENSOR_TYPE,
    OPT_TOKEN_EMBEDDING_TYPE,
    OPT_TENSOR_TYPE,
    OPT_LEAVE_OUTPUT,
    OPT_PURE,
    OPT_IMATRIX,
    OPT_STATS_IMATRIX,
    OPT_THREADS,
    OPT_STATS,
    OPT_QUIET,
};

static const struct option long_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"type", required_argument, NULL, OPT_TYPE},
    {"head-type", required_argument, NULL, OPT_HEAD_TYPE},
    {"embd-type", required_argument, NULL, OPT_EMBD_TYPE},
    {"output-tensor-type", required_argument, NULL, OPT_OUTPUT_TENSOR_TYPE},
    {"token-embedding-type", required_argument, NULL, OPT_TOKEN_EMBEDDING_TYPE},
    {"tensor-type", required_argument, NULL, OPT_TENSOR_TYPE},
    {"leave-output-tensor", no_argument, NULL, OPT_LEAVE_OUTPUT},
    {"pure", no_argument, NULL, OPT_PURE},
    {"imatrix", required_argument, NULL, OPT_IMATRIX},
    {"stats-imatrix", required_argument, NULL, OPT_STATS_IMATRIX},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"stats", no_argument, NULL, OPT_STATS},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {NULL, 0, NULL, 0},
};

/* Parses argv into a, opts and the imatrix paths. Returns -1 to go on, else the
 * exit code (help, a usage error). */
static int parse_args(int argc, char **argv, args *a, ql_quant_model_opts *opts, imatrix_arg *imat,
                      imatrix_arg *stats_imat)
{
    ql_quant_config *cfg = &opts->cfg;
    opterr = 0;
    optind = 1;
    for (;;) {
        const int c = getopt_long(argc, argv, ":h", long_options, NULL);
        if (c == -1)
            break;
        /* The option as written, for messages (getopt has moved past it). */
        const char *opt = argv[optind - 1];
        int n;
        switch (c) {
        case 'h':
            print_usage();
            return QL_EXIT_OK;
        case OPT_TYPE:
            if (!parse_type("--type", "weight", optarg, false, &cfg->weight_type))
                return QL_EXIT_USAGE;
            a->have_type = true;
            break;
        case OPT_HEAD_TYPE:
        case OPT_OUTPUT_TENSOR_TYPE:
            if (!parse_type(c == OPT_HEAD_TYPE ? "--head-type" : "--output-tensor-type", "head",
                            optarg, c == OPT_HEAD_TYPE, &cfg->head_type))
                return QL_EXIT_USAGE;
            break;
        case OPT_EMBD_TYPE:
        case OPT_TOKEN_EMBEDDING_TYPE:
            if (!parse_type(c == OPT_EMBD_TYPE ? "--embd-type" : "--token-embedding-type",
                            "embedding", optarg, c == OPT_EMBD_TYPE, &cfg->embd_type))
                return QL_EXIT_USAGE;
            break;
        case OPT_TENSOR_TYPE:
            a->rules[a->n_rules++] = optarg;
            break;
        case OPT_LEAVE_OUTPUT:
            cfg->leave_output = true;
            break;
        case OPT_PURE:
            a->pure = true;
            break;
        case OPT_IMATRIX:
            imat->path = optarg;
            break;
        case OPT_STATS_IMATRIX:
            stats_imat->path = optarg;
            break;
        case OPT_THREADS:
            if (!ql_cli_parse_int_opt("quantize", "--threads", optarg, 1, 4096, &n))
                return QL_EXIT_USAGE;
            ql_threads_set(n);
            break;
        case OPT_STATS:
            opts->stats = true;
            break;
        case OPT_QUIET:
            opts->quiet = true;
            break;
        case ':':
            return ql_cli_usage("quantize", "%s needs a value", opt);
        default:
            return ql_cli_usage("quantize", "unknown option '%s'", opt);
        }
    }
    const int n_pos = argc - optind;
    char **pos = argv + optind;
    if (n_pos < 2)
        return ql_cli_usage("quantize", "expects IN.gguf and OUT.gguf");
    a->paths[0] = pos[0];
    a->paths[1] = pos[1];
    if (a->have_type) {
        if (n_pos > 2)
            return ql_cli_usage("quantize", "unexpected argument '%s' (TYPE or --type, not both)",
                                pos[2]);
        if (a->pure)
            return ql_cli_usage("quantize", "--pure goes with TYPE (--type is pure already)");
    } else {
        if (n_pos < 3)
            return ql_cli_usage("quantize", "expects a TYPE after OUT.gguf (or --type T)");
        if (n_pos > 4)
            return ql_cli_usage("quantize", "unexpected argument '%s'", pos[4]);
        a->file_type = pos[2];
        if (!(cfg->mix = ql_quant_mix_by_name(a->file_type)))
            return ql_cli_usage("quantize", "unknown file type '%s' (see --help)", a->file_type);
        cfg->pure = a->pure;
        if (n_pos == 4) {
            int n;
            if (!ql_cli_parse_int_opt("quantize", "nthreads", pos[3], 1, 4096, &n))
                return QL_EXIT_USAGE;
            ql_threads_set(n);
        }
        if (cfg->mix->needs_imatrix && !imat->path)
            return ql_cli_usage("quantize",
                                "%s needs --imatrix (llama-quantize refuses it without an "
                                "importance matrix)",
                                cfg->mix->name);
    }
    if (stats_imat->path && !opts->stats)
        return ql_cli_usage("quantize", "--stats-imatrix weighs --stats; add --stats");
    return -1;
}

int ql_cmd_quantize(int argc, char **argv)
{
    ql_quant_model_opts opts = {.cfg = {.weight_type = QL_TYPE_INVALID,
                                        .head_type = QL_TYPE_INVALID,
                                        .embd_type = QL_TYPE_INVALID}};
    imatrix_arg imat = {NULL, NULL, NULL}, stats_imat = {NULL, NULL, NULL};
    args a = {.rules = calloc((size_t)argc + 1, sizeof(const char *))};
    if (!a.rules) {
        fprintf(stderr, "qlab: error: out of memory\n");
        return QL_EXIT_RUNTIME;
    }
    int rc = parse_args(argc, argv, &a, &opts, &imat, &stats_imat);
    if (rc >= 0) {
        free(a.rules);
        return rc;
    }
    rc = QL_EXIT_OK;
    const char **paths = a.paths;
    ql_quant_overrides *overrides = NULL;
    ql_error err;
    ql_error_clear(&err);
    ql_quant_model_report *r = NULL;
    ql_gguf *model = NULL;
    ql_quant_imatrix_meta meta = {NULL, NULL, 0, 0};
    if (ql_quant_overrides_parse(a.rules, a.n_rules, &overrides, &err)) {
        rc = ql_cli_usage("quantize", "%s", err.msg);
        goto out;
    }
    opts.cfg.overrides = overrides;
    for (int i = 0; i < ql_quant_overrides_count(overrides); i++)
        if (ql_quant_model_check_type(ql_quant_overrides_type(overrides, i), "its", &err)) {
            rc = ql_cli_usage("quantize", "--tensor-type '%s': %s",
                              ql_quant_overrides_rule(overrides, i), err.msg);
            goto out;
        }
    if (imat.path || stats_imat.path) {
        /* The imatrix is checked against the model's tensors before anything is written. */
        if (ql_gguf_open(&model, paths[0], &err) ||
            (imat.path && imatrix_arg_load(&imat, model, &err)) ||
            (stats_imat.path && imatrix_arg_load(&stats_imat, model, &err))) {
            rc = ql_cli_fail(&err);
            goto out;
        }
    }
    if (imat.im && ql_imatrix_table_n_matched(imat.table) == 0)
        fprintf(stderr,
                "qlab: warning: no entry of %s names a tensor of %s: nothing is quantized with "
                "importance weights\n",
                imat.path, paths[0]);
    if (imat.im) {
        opts.imatrix = ql_imatrix_table_lookup;
        opts.imatrix_ctx = imat.table;
        meta.file = imat.path;
        meta.dataset = imat.im->n_datasets > 0 ? imat.im->datasets[imat.im->n_datasets - 1] : NULL;
        meta.n_entries = imat.im->n_entries;
        meta.n_chunks = imat.im->chunk_count;
        opts.imatrix_meta = &meta;
    }
    if (stats_imat.im) {
        opts.stats_imatrix = ql_imatrix_table_lookup;
        opts.stats_imatrix_ctx = stats_imat.table;
    }
    if (ql_quant_model(paths[0], paths[1], &opts, &r, &err)) {
        rc = ql_cli_fail(&err);
        goto out;
    }
    print_report(r, paths[1], opts.stats, model, &imat, &stats_imat);
out:
    ql_quant_model_report_free(r);
    ql_quant_overrides_free(overrides);
    free(a.rules);
    imatrix_arg_free(&imat);
    imatrix_arg_free(&stats_imat);
    ql_gguf_close(model);
    return rc;
}
