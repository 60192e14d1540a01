/* qlab quantize: write a GGUF model in another weight type through the type policy. */
#include <math.h>
#include <stdio.h>
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
    "usage: qlab quantize IN.gguf OUT.gguf --type T [--head-type T] [--embd-type T]\n"
    "                     [--imatrix FILE] [--threads N] [--stats [--stats-imatrix FILE]]\n"
    "                     [--quiet]\n"
    "\n"
    "Writes OUT.gguf with every 2-D weight of IN.gguf (F32/F16/BF16) quantized to T,\n"
    "bit-identical to llama.cpp's quantizers, in a file llama.cpp loads.\n"
    "\n";

/* Follows the --type line, which lists the types ql_quant_model writes. */
static const char *const usage_text =
    "  --head-type T   type of output.weight (default: same as --type)\n"
    "  --embd-type T   type of token_embd.weight (default: same as --type)\n"
    "  --imatrix FILE  importance matrix (llama.cpp .dat or GGUF, e.g. from 'qlab imatrix'):\n"
    "                  each tensor with an entry is quantized with the importance of its\n"
    "                  columns (mean x^2), as llama-quantize --imatrix does; tensors without\n"
    "                  an entry (token_embd, output) are quantized without and listed\n"
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
    "Policy: 1-D tensors stay F32; a row length that does not split into T's blocks\n"
    "falls back as llama.cpp does (K/IQ types to their 32-block neighbours, then F16),\n"
    "and every fallback is listed. INT8_ROW and Q8_0_XC are not GGUF types and are\n"
    "refused here (sweeps evaluate them in memory).\n";

/* Width of the usage text's lines. */
#define USAGE_COLUMNS 86

static void print_usage(void)
{
    fputs(usage_head, stdout);
    static const char type_line[] = "  --type T        weight type:";
    static const char indent[] = "                 ";
    fputs(type_line, stdout);
    size_t col = sizeof type_line - 1;
    const ql_type_traits *types[64];
    const int n = ql_type_list(types, 64);
    for (int i = 0; i < n; i++) {
        ql_error err;
        if (ql_quant_model_check_type(types[i]->type, "weight", &err) != QL_OK)
            continue;
        const size_t w = 1 + strlen(types[i]->name);
        if (col + w > USAGE_COLUMNS) {
            printf("\n%s", indent);
            col = sizeof indent - 1;
        }
        printf(" %s", types[i]->name);
        col += w;
    }
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
        if (e->fallback != QL_FALLBACK_NONE)
            printf("  fallback from %s: %s", ql_type_name(e->requested), e->reason);
        else if (e->role == QL_ROLE_KEEP)
            printf("  kept (llama.cpp does not quantize this tensor)");
        if (imat->im && converted && !r->has_imatrix[i]) {
            const char *skipped = ql_imatrix_table_skipped(imat->table);
            n_without++;
            printf("%s%s: quantized without", e->fallback != QL_FALLBACK_NONE ? "; " : "  ",
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

int ql_cmd_quantize(int argc, char **argv)
{
    const char *paths[2] = {NULL, NULL};
    int n_paths = 0;
    ql_quant_model_opts opts = {.cfg = {.weight_type = QL_TYPE_INVALID,
                                        .head_type = QL_TYPE_INVALID,
                                        .embd_type = QL_TYPE_INVALID}};
    imatrix_arg imat = {NULL, NULL, NULL}, stats_imat = {NULL, NULL, NULL};
    bool have_type = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_usage();
            return QL_EXIT_OK;
        }
        bool takes_value = strcmp(a, "--type") == 0 || strcmp(a, "--head-type") == 0 ||
                           strcmp(a, "--embd-type") == 0 || strcmp(a, "--threads") == 0 ||
                           strcmp(a, "--imatrix") == 0 || strcmp(a, "--stats-imatrix") == 0;
        if (takes_value && i + 1 >= argc)
            return ql_cli_usage("quantize", "%s needs a value", a);
        if (strcmp(a, "--type") == 0) {
            if (!parse_type(a, "weight", argv[++i], false, &opts.cfg.weight_type))
                return QL_EXIT_USAGE;
            have_type = true;
        } else if (strcmp(a, "--head-type") == 0) {
            if (!parse_type(a, "head", argv[++i], true, &opts.cfg.head_type))
                return QL_EXIT_USAGE;
        } else if (strcmp(a, "--embd-type") == 0) {
            if (!parse_type(a, "embedding", argv[++i], true, &opts.cfg.embd_type))
                return QL_EXIT_USAGE;
        } else if (strcmp(a, "--imatrix") == 0) {
            imat.path = argv[++i];
        } else if (strcmp(a, "--stats-imatrix") == 0) {
            stats_imat.path = argv[++i];
        } else if (strcmp(a, "--threads") == 0) {
            int n;
            if (!ql_cli_parse_int_opt("quantize", a, argv[++i], 1, 4096, &n))
                return QL_EXIT_USAGE;
            ql_threads_set(n);
        } else if (strcmp(a, "--stats") == 0) {
            opts.stats = true;
        } else if (strcmp(a, "--quiet") == 0) {
            opts.quiet = true;
        } else if (a[0] == '-' && a[1] != '\0') {
            return ql_cli_usage("quantize", "unknown option '%s'", a);
        } else if (n_paths < 2) {
            paths[n_paths++] = a;
        } else {
            return ql_cli_usage("quantize", "unexpected argument '%s'", a);
        }
    }
    if (n_paths != 2)
        return ql_cli_usage("quantize", "expects IN.gguf and OUT.gguf");
    if (!have_type)
        return ql_cli_usage("quantize", "--type is required");
    if (stats_imat.path && !opts.stats)
        return ql_cli_usage("quantize", "--stats-imatrix weighs --stats; add --stats");

    ql_error err;
    ql_error_clear(&err);
    ql_quant_model_report *r = NULL;
    ql_gguf *model = NULL;
    int rc = QL_EXIT_OK;
    ql_quant_imatrix_meta meta = {NULL, NULL, 0, 0};
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
    imatrix_arg_free(&imat);
    imatrix_arg_free(&stats_imat);
    ql_gguf_close(model);
    return rc;
}
