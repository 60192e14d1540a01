/* qlab quantize: write a GGUF model in another weight type through the type policy. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../quant_model.h"
#include "../types.h"
#include "../util.h"
#include "cli.h"
#include "commands.h"

static const char *const usage_text =
    "usage: qlab quantize IN.gguf OUT.gguf --type T [--head-type T] [--embd-type T]\n"
    "                     [--threads N] [--stats] [--quiet]\n"
    "\n"
    "Writes OUT.gguf with every 2-D weight of IN.gguf (F32/F16/BF16) quantized to T,\n"
    "bit-identical to llama.cpp's quantizers, in a file llama.cpp loads.\n"
    "\n"
    "  --type T        weight type: F32 F16 BF16 Q8_0 Q5_1 Q5_0 Q4_1 Q4_0 Q6_K Q5_K Q4_K\n"
    "                  Q3_K Q2_K IQ4_NL IQ4_XS TQ2_0 TQ1_0 (IQ lattice types once built)\n"
    "  --head-type T   type of output.weight (default: same as --type)\n"
    "  --embd-type T   type of token_embd.weight (default: same as --type)\n"
    "  --threads N     threads (default: all cores); the bytes do not depend on N\n"
    "  --stats         per-tensor error of the dequantized weights vs the source:\n"
    "                  rmse, max |w - w^| and relative error, plus model totals\n"
    "  --quiet         no progress line\n"
    "\n"
    "Policy: 1-D tensors stay F32; a row length that does not split into T's blocks\n"
    "falls back as llama.cpp does (K/IQ types to their 32-block neighbours, then F16),\n"
    "and every fallback is listed. INT8_ROW and Q8_0_XC are not GGUF types and are\n"
    "refused here (sweeps evaluate them in memory).\n";

/* Parses a type option; "same" (allowed for head/embd) gives QL_TYPE_INVALID. */
static int parse_type(const char *opt, const char *val, bool allow_same, int32_t *out)
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
    if (t->type == QL_TYPE_INT8_ROW) {
        ql_cli_usage("quantize",
                     "%s INT8_ROW: not a GGUF type; qlab evaluates it in memory (sweeps) and "
                     "cannot write it to a GGUF file",
                     opt);
        return 0;
    }
    if (t->type == QL_TYPE_Q8_0_XC) {
        ql_cli_usage("quantize",
                     "%s Q8_0_XC: needs calibrated outlier columns, which 'qlab quantize' "
                     "does not have; use Q8_0",
                     opt);
        return 0;
    }
    if (!ql_quant_is_weight_type(t->type)) {
        ql_cli_usage("quantize", "%s %s: not a weight type (activation or integer format)", opt,
                     t->name);
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

static void print_error_cols(const ql_weight_error *e)
{
    double rel = sqrt(e->sse / (e->sum_sq > 0 ? e->sum_sq : 1.0));
    printf("  %10.3e  %10.3e  %9.3e", ql_weight_error_rmse(e), e->max_abs, rel);
    if (e->weighted)
        printf("  %9.3e", ql_weight_error_rel(e));
}

static void print_report(const ql_quant_model_report *r, const char *out_path, bool stats)
{
    const ql_quant_plan *p = r->plan;
    size_t w = 24;
    for (int64_t i = 0; i < p->n; i++)
        if (strlen(p->entries[i].name) > w)
            w = strlen(p->entries[i].name);
    bool any_imat = false;
    for (int64_t i = 0; i < p->n; i++)
        any_imat = any_imat || r->has_imatrix[i];
    printf("%-*s  %-14s  %-7s  %10s  %6s", (int)w, "tensor", "shape (ggml)", "type", "bytes",
           "bpw");
    if (stats)
        printf("  %10s  %10s  %9s%s", "rmse", "max_err", "rel_rmse", any_imat ? "  imat_rel" : "");
    printf("  note\n");
    for (int64_t i = 0; i < p->n; i++) {
        const ql_quant_plan_entry *e = &p->entries[i];
        char shape[64];
        format_shape(e, shape, sizeof shape);
        printf("%-*s  %-14s  %-7s  %10llu  %6.2f", (int)w, e->name, shape, ql_type_name(e->used),
               (unsigned long long)e->bytes, bpw(e->bytes, e->n_per_row * e->nrows));
        if (stats)
            print_error_cols(&r->errors[i]);
        if (e->fallback != QL_FALLBACK_NONE)
            printf("  fallback from %s: %s", ql_type_name(e->requested), e->reason);
        else if (e->role == QL_ROLE_KEEP)
            printf("  kept (llama.cpp does not quantize this tensor)");
        printf("\n");
    }
    printf("\n");
    printf("model: %lld params, %llu bytes of tensors, %.3f bpw\n", (long long)p->params,
           (unsigned long long)p->bytes, bpw(p->bytes, p->params));
    printf("body (without head and embeddings): %lld params, %llu bytes, %.3f bpw\n",
           (long long)p->body_params, (unsigned long long)p->body_bytes,
           bpw(p->body_bytes, p->body_params));
    printf("fallbacks: %lld of %lld tensors\n", (long long)p->n_fallback, (long long)p->n);
    if (stats) {
        printf("error, model:");
        print_error_cols(&r->total);
        printf("   (rmse, max |w - w^|, rms relative%s)\n", r->total.weighted ? ", imatrix" : "");
        printf("error, body: ");
        print_error_cols(&r->body);
        printf("\n");
    }
    printf("wrote %s: %llu bytes, general.file_type %u, %.2f s\n", out_path,
           (unsigned long long)r->file_size, r->file_type, r->seconds);
}

int ql_cmd_quantize(int argc, char **argv)
{
    const char *paths[2] = {NULL, NULL};
    int n_paths = 0;
    ql_quant_model_opts opts = {
        {QL_TYPE_INVALID, QL_TYPE_INVALID, QL_TYPE_INVALID}, NULL, NULL, false, false};
    bool have_type = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_text, stdout);
            return QL_EXIT_OK;
        }
        bool takes_value = strcmp(a, "--type") == 0 || strcmp(a, "--head-type") == 0 ||
                           strcmp(a, "--embd-type") == 0 || strcmp(a, "--threads") == 0;
        if (takes_value && i + 1 >= argc)
            return ql_cli_usage("quantize", "%s needs a value", a);
        if (strcmp(a, "--type") == 0) {
            if (!parse_type(a, argv[++i], false, &opts.cfg.weight_type))
                return QL_EXIT_USAGE;
            have_type = true;
        } else if (strcmp(a, "--head-type") == 0) {
            if (!parse_type(a, argv[++i], true, &opts.cfg.head_type))
                return QL_EXIT_USAGE;
        } else if (strcmp(a, "--embd-type") == 0) {
            if (!parse_type(a, argv[++i], true, &opts.cfg.embd_type))
                return QL_EXIT_USAGE;
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

    ql_error err;
    ql_error_clear(&err);
    ql_quant_model_report *r = NULL;
    if (ql_quant_model(paths[0], paths[1], &opts, &r, &err))
        return ql_cli_fail(&err);
    print_report(r, paths[1], opts.stats);
    ql_quant_model_report_free(r);
    return QL_EXIT_OK;
}
