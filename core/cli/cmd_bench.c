/* qlab bench: throughput measurements. `bench quant` times quantize and dequantize
 * of every implemented type on a fixed synthetic matrix, single- and multi-threaded. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "formats/quant_xc.h"
#include "formats/types.h"
#include "model/quant.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab bench quant [--threads N] [--rows R] [--cols C] [--imatrix] [--types "
           "T,T,...]\n"
           "                        [--min-seconds S]\n"
           "\n"
           "Quantize and dequantize throughput of every implemented type, in MB/s of f32 input\n"
           "(1 MB = 10^6 bytes), single-threaded and with N threads, on a fixed synthetic R x C\n"
           "matrix (Student-t-like values, every 128th column 20x larger). Each figure is the\n"
           "best of repeated runs lasting >= S seconds in total; the tables a type needs (IQ\n"
           "lattice codebooks) are loaded before its timing.\n"
           "\n");
    ql_opt_print_options(stdout, p);
    printf("\nQ8_0_XC is timed with the 20x columns as its outlier columns.\n");
}

#define OUTLIER_STRIDE 128

static uint64_t rng;
/* Heavy-tailed values: a normal over the square root of a mean of three squared
 * normals (Student-t, 3 dof), scaled like LLM weights, outlier columns x20. */
static void fill_matrix(float *x, int64_t rows, int64_t cols)
{
    rng = 42;
    for (int64_t i = 0; i < rows * cols; i++) {
        double g[4];
        for (int k = 0; k < 4; k++)
            g[k] = ql_rng_gauss(&rng);
        double t = g[0] / sqrt((g[1] * g[1] + g[2] * g[2] + g[3] * g[3]) / 3);
        x[i] = (float)(0.02 * t * ((i % cols) % OUTLIER_STRIDE == 3 ? 20.0 : 1.0));
    }
}

typedef struct {
    const ql_type_traits *tr;
    const float *x;
    const float *imat;
    int64_t rows, cols;
    void *q;
    size_t q_size;
    float *y;
    const int64_t *outliers;
    int64_t n_outliers;
} bench_ctx;

static ql_status run_quant(const void *ctx, ql_error *err)
{
    const bench_ctx *c = ctx;
    if (c->tr->type == QL_TYPE_Q8_0_XC)
        return ql_quant_q8_0_xc(c->x, c->rows, c->cols, c->outliers, c->n_outliers, c->q, c->q_size,
                                NULL, err);
    return ql_quant_tensor(c->tr->type, c->x, c->rows, c->cols, c->imat, c->q, c->q_size, NULL,
                           err);
}

static ql_status run_dequant(const void *ctx, ql_error *err)
{
    const bench_ctx *c = ctx;
    return ql_dequant_tensor(c->tr->type, c->q, c->q_size, c->rows, c->cols, c->y, err);
}

/* Best MB/s of f32 input over repeated runs lasting at least min_seconds in total. */
static ql_status measure(const bench_ctx *c, bool dequant, int threads, double min_seconds,
                         double *mbs, ql_error *err)
{
    ql_threads_set(threads);
    double best;
    ql_status st = ql_cli_best_time(dequant ? run_dequant : run_quant, c, min_seconds, &best, err);
    if (st)
        return st;
    *mbs = (double)c->rows * (double)c->cols * 4.0 / 1e6 / best;
    return QL_OK;
}

/* A type bench quant can time: it quantizes (Q8_0_XC through ql_quant_q8_0_xc) and
 * decodes. */
static bool timeable(const ql_type_traits *tr)
{
    return (tr->quantize || tr->type == QL_TYPE_Q8_0_XC) && tr->dequantize;
}

/* Every name of a --types list is a type bench quant can time; else a usage error
 * names the first that is not (a typo would otherwise print an empty table). */
static bool check_types(const ql_opt_parser *p, const char *list)
{
    for (const char *s = list;;) {
        const char *e = strchr(s, ',');
        const size_t len = e ? (size_t)(e - s) : strlen(s);
        char name[32];
        const ql_type_traits *tr = NULL;
        if (len < sizeof name) {
            memcpy(name, s, len);
            name[len] = '\0';
            tr = ql_type_by_name(name);
        }
        if (!tr) {
            ql_opt_usage(p, "--types: unknown type '%.*s'", (int)len, s);
            return false;
        }
        if (!timeable(tr)) {
            ql_opt_usage(p, "--types: %s has no quantizer and decoder to time", tr->name);
            return false;
        }
        if (!e)
            return true;
        s = e + 1;
    }
}

static bool type_selected(const char *list, const char *name)
{
    if (!list)
        return true;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncasecmp(p, name, n) == 0)
            return true;
        p += len + (e ? 1 : 0);
    }
    return false;
}

static int bench_quant(int argc, char **argv)
{
    int rows = 128, cols = 4096, threads = 0;
    bool with_imat = false;
    const char *types = NULL;
    double min_seconds = 0.05;
    const ql_opt opts[] = {
        ql_opt_threads(&threads, "threads of the second column (default: $OMP_NUM_THREADS,\n"
                                 "else all cores)"),
        ql_opt_int("rows", 0, &rows, 1, 1 << 20, "R", "matrix rows (default 128)"),
        ql_opt_int("cols", 0, &cols, 256, 1 << 20, "C",
                   "matrix columns, a multiple of 256 (default 4096)"),
        ql_opt_flag("imatrix", 0, &with_imat,
                    "time the importance-weighted search (synthetic weights)"),
        ql_opt_str("types", 0, &types, "LIST",
                   "only these types (comma separated, e.g. Q4_0,Q4_K,INT8_ROW)"),
        ql_opt_double("min-seconds", 0, &min_seconds, 0, 3600, "S",
                      "time each figure for at least S seconds (default 0.05)"),
    };
    ql_opt_parser p = {
        .prog = "qlab bench quant", .opts = opts, .n_opts = QL_OPT_COUNT(opts), .help = help};
    const int prc = ql_opt_parse(&p, argc, argv);
    if (prc != QL_OPT_GO_ON)
        return prc;
    if (cols % 256 != 0)
        return ql_opt_usage(&p, "--cols must be a multiple of 256, got %d", cols);
    if (types && !check_types(&p, types))
        return QL_EXIT_USAGE;
    if ((int64_t)rows * cols > (INT64_C(1) << 31))
        return ql_opt_usage(&p, "matrix of %d x %d values is too large", rows, cols);
    if (threads == 0)
        threads = ql_threads_get();

    const size_t n = (size_t)rows * (size_t)cols;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    float *imat = malloc((size_t)cols * sizeof(float));
    void *q = malloc(n * sizeof(float) + 4096);
    int64_t n_out = (cols + OUTLIER_STRIDE - 1 - 3) / OUTLIER_STRIDE;
    int64_t *outliers = malloc((size_t)n_out * sizeof(int64_t));
    ql_error err;
    ql_error_clear(&err);
    int rc = QL_EXIT_OK;
    if (!x || !y || !imat || !q || !outliers) {
        ql_error_set(&err, QL_ENOMEM, "bench quant: out of memory for %zu values", n);
        rc = ql_cli_fail(&err);
        goto out;
    }
    fill_matrix(x, rows, cols);
    for (int j = 0; j < cols; j++)
        imat[j] = 0.25f + (float)((j * 37) % 101) / 25.0f;
    for (int64_t k = 0; k < n_out; k++)
        outliers[k] = 3 + k * OUTLIER_STRIDE;

    printf("qlab bench quant: %d x %d f32 (%.1f MB), %s, 1 and %d threads, MB/s of f32 input\n",
           rows, cols, (double)n * 4 / 1e6, with_imat ? "with imatrix" : "reference quantizers",
           threads);
    printf("%-9s %7s %11s %11s %11s %11s\n", "type", "bpw", "quant 1T", "quant NT", "dequant 1T",
           "dequant NT");
    const ql_type_traits *list[64];
    int nt = ql_type_list(list, 64);
    for (int i = 0; i < nt; i++) {
        const ql_type_traits *tr = list[i];
        if (!timeable(tr) || ql_row_size(tr->type, cols) == 0 || !type_selected(types, tr->name))
            continue;
        /* A one-time load (the IQ codebooks) is not part of the throughput. */
        if (ql_type_prepare(tr->type, &err)) {
            rc = ql_cli_fail(&err);
            goto out;
        }
        /* Types ggml cannot quantize without importance weights always get them. */
        const bool imat_used = with_imat || tr->requires_imatrix;
        bench_ctx c = {
            .tr = tr,
            .x = x,
            .imat = imat_used ? imat : NULL,
            .rows = rows,
            .cols = cols,
            .q = q,
            .q_size = ql_row_size(tr->type, cols) * (size_t)rows,
            .y = y,
            .outliers = outliers,
            .n_outliers = n_out,
        };
        double r[4];
        for (int k = 0; k < 4 && rc == QL_EXIT_OK; k++)
            if (measure(&c, k >= 2, k % 2 ? threads : 1, min_seconds, &r[k], &err))
                rc = ql_cli_fail(&err);
        if (rc != QL_EXIT_OK)
            goto out;
        double bits = 8.0 * (double)c.q_size / (double)n;
        printf("%-9s %7.3f %11.1f %11.1f %11.1f %11.1f%s\n", tr->name, bits, r[0], r[1], r[2], r[3],
               imat_used && !with_imat ? "  (with imatrix: required)" : "");
        fflush(stdout);
    }
out:
    ql_threads_set(threads);
    free(x);
    free(y);
    free(imat);
    free(q);
    free(outliers);
    return rc;
}

static void bench_help(const ql_opt_parser *p)
{
    printf("usage: qlab bench act|forward|gptq|quant [options]\n\n"
           "Benchmarks:\n"
           "  act       activation rounding and int8 products (qlab bench act --help)\n"
           "  forward   tokens/s of the reference forward pass (qlab bench forward --help)\n"
           "  gptq      GPTQ's time and memory per type against ggml's quantizer\n"
           "            (qlab bench gptq --help)\n"
           "  quant     quantize/dequantize throughput per type (qlab bench quant --help)\n\n");
    ql_opt_print_options(stdout, p);
}

int ql_cmd_bench(int argc, char **argv)
{
    const char *args[1];
    static const char *const names[] = {"a benchmark name (act, forward, gptq, quant)"};
    ql_opt_parser p = {.prog = "qlab bench",
                       .args = args,
                       .max_args = 1,
                       .arg_names = names,
                       .n_required = 1,
                       .stop_at_arg = true,
                       .help = bench_help};
    const int rc = ql_opt_parse(&p, argc, argv);
    if (rc != QL_OPT_GO_ON)
        return rc;
    argc -= p.next;
    argv += p.next;
    if (strcmp(args[0], "act") == 0)
        return ql_bench_act(argc, argv);
    if (strcmp(args[0], "quant") == 0)
        return bench_quant(argc, argv);
    if (strcmp(args[0], "forward") == 0)
        return ql_bench_forward(argc, argv);
    if (strcmp(args[0], "gptq") == 0)
        return ql_bench_gptq(argc, argv);
    return ql_opt_usage(&p, "unknown benchmark '%s' (known: act, forward, gptq, quant)", args[0]);
}
