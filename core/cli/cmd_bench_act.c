/* qlab bench act: the cost of activation rounding, and the int8 path of a Q8_0 x q8_0
 * product against the fake-quant path (round, then f32 sgemm on decoded weights). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "experiment/actquant.h"
#include "formats/qgemm.h"
#include "formats/quant_legacy.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab bench act [--threads N] [--tokens T] [--in K] [--out M] [--min-seconds S]\n"
           "\n"
           "1. Activation rounding throughput (MB/s of f32 input) of every rounding on a T x K\n"
           "   batch, single-threaded as the forward pass runs it.\n"
           "2. One product y (T, M) = x (T, K) W^T with Q8_0 weights and q8_0 activations,\n"
           "   1 and N threads:\n"
           "     fake-quant  round x (actquant), f32 sgemm with the decoded W (OpenBLAS)\n"
           "     int8 C      quantize x to q8_0 blocks, integer kernel, portable C\n"
           "     int8 AVX2   the same with the AVX2 kernel (when the CPU has it)\n"
           "   in GMAC/s (10^9 multiply-adds per second; T*M*K per product).\n"
           "Each figure is the best of repeated runs lasting >= S seconds in total.\n\n");
    ql_opt_print_options(stdout, p);
}

static uint64_t rng;
static float next_gauss(void)
{
    return (float)ql_rng_gauss(&rng);
}

typedef enum { RUN_ROUND, RUN_FAKE, RUN_INT } run_kind;

typedef struct {
    int64_t t, k, m;
    const float *x;
    float *xq;
    const float *wd;         /* decoded weights (M, K) */
    const ql_block_q8_0 *wq; /* Q8_0 weights */
    ql_block_q8_0 *xb;       /* q8_0 activation blocks */
    float *y;
    ql_act_ctx act;
    run_kind kind; /* what one timed run does */
} prod_ctx;

static ql_status run_once(const void *ctx, ql_error *err)
{
    (void)err; /* these runs cannot fail */
    const prod_ctx *c = ctx;
    switch (c->kind) {
    case RUN_ROUND:
        ql_act_rows(&c->act, c->x, c->xq, c->t);
        break;
    case RUN_FAKE:
        ql_act_rows(&c->act, c->x, c->xq, c->t);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c->t, (int)c->m, (int)c->k, 1.0f,
                    c->xq, (int)c->k, c->wd, (int)c->k, 0.0f, c->y, (int)c->m);
        break;
    case RUN_INT:
        ql_quantize_row_q8_0_ref(c->x, c->xb, c->t * c->k);
        ql_gemm_q8_0(c->wq, c->xb, c->y, c->t, c->m, c->k);
        break;
    }
    return QL_OK;
}

/* Best seconds per run of kind with `threads` threads (qlab's and OpenBLAS's). */
static double best_time(prod_ctx *c, run_kind kind, int threads, double min_seconds)
{
    ql_threads_set(threads);
    openblas_set_num_threads(threads);
    c->kind = kind;
    double best = 0;
    ql_error err;
    ql_cli_best_time(run_once, c, min_seconds, &best, &err); /* run_once returns QL_OK */
    return best;
}

int ql_bench_act(int argc, char **argv)
{
    int tokens = 128, k = 4096, m = 1024, threads = 0;
    double min_seconds = 0.2;
    const ql_opt opts[] = {
        ql_opt_threads(&threads, "threads of the product's second column (default:\n"
                                 "$OMP_NUM_THREADS, else all cores)"),
        ql_opt_int("tokens", 0, &tokens, 1, 65536, "T", "tokens of the batch (default 128)"),
        ql_opt_int("in", 0, &k, 256, 1 << 20, "K", "input width, a multiple of 256 (default 4096)"),
        ql_opt_int("out", 0, &m, 1, 1 << 20, "M", "output rows of the product (default 1024)"),
        ql_opt_double("min-seconds", 0, &min_seconds, 0, 3600, "S",
                      "time each figure for at least S seconds (default 0.2)"),
    };
    ql_opt_parser op = {
        .prog = "qlab bench act", .opts = opts, .n_opts = QL_OPT_COUNT(opts), .help = help};
    const int prc = ql_opt_parse(&op, argc, argv);
    if (prc != QL_OPT_GO_ON)
        return prc;
    if (k % 256 != 0)
        return ql_opt_usage(&op, "--in must be a multiple of 256, got %d", k);
    if ((int64_t)tokens * k > (INT64_C(1) << 28) || (int64_t)m * k > (INT64_C(1) << 28))
        return ql_opt_usage(&op, "matrices of %d x %d and %d x %d values are too large", tokens, k,
                            m, k);
    if (threads == 0)
        threads = ql_threads_get();

    const size_t nx = (size_t)tokens * (size_t)k, nw = (size_t)m * (size_t)k;
    prod_ctx c = {.t = tokens, .k = k, .m = m};
    float *x = malloc(nx * sizeof *x), *xq = malloc(nx * sizeof *xq);
    float *w = malloc(nw * sizeof *w), *y = malloc((size_t)tokens * (size_t)m * sizeof *y);
    ql_block_q8_0 *wq = malloc(nw / 32 * sizeof *wq), *xb = malloc(nx / 32 * sizeof *xb);
    int rc = QL_EXIT_OK;
    const int blas_threads = openblas_get_num_threads(), our_threads = ql_threads_get();
    if (!x || !xq || !w || !y || !wq || !xb) {
        ql_error err;
        ql_error_set(&err, QL_ENOMEM, "bench act: out of memory");
        rc = ql_cli_fail(&err);
        goto out;
    }
    rng = 42;
    for (size_t i = 0; i < nx; i++)
        x[i] = next_gauss() * (i % (size_t)k == 3 ? 20.0f : 1.0f);
    for (size_t i = 0; i < nw; i++)
        w[i] = 0.02f * next_gauss();
    ql_quantize_row_q8_0_ref(w, wq, (int64_t)nw);
    ql_dequantize_q8_0(wq, w, m, k); /* w now holds the decoded weights */
    c.x = x;
    c.xq = xq;
    c.wd = w;
    c.wq = wq;
    c.xb = xb;
    c.y = y;

    printf("qlab bench act: activation rounding of %d x %d f32, 1 thread, MB/s of input\n", tokens,
           k);
    for (int q = 0; q < QL_ACTQ_COUNT; q++) {
        ql_error err;
        if (ql_act_ctx_init(&c.act, (ql_actq)q, k, NULL, 0, &err)) {
            rc = ql_cli_fail(&err);
            goto out;
        }
        const double s = best_time(&c, RUN_ROUND, 1, min_seconds);
        printf("  %-5s %10.1f\n", ql_actq_name((ql_actq)q), (double)nx * 4 / 1e6 / s);
        fflush(stdout);
    }

    ql_error err;
    if (ql_act_ctx_init(&c.act, QL_ACTQ_Q8_0, k, NULL, 0, &err)) {
        rc = ql_cli_fail(&err);
        goto out;
    }
    const double macs = (double)tokens * m * k;
    printf("\nproduct %d x %d x %d (tokens x out x in), Q8_0 weights, q8_0 activations, "
           "GMAC/s\n",
           tokens, m, k);
    printf("  %-12s %10s %10s\n", "path", "1 thread", "threads");
    const struct {
        const char *name;
        run_kind kind;
        bool portable;
    } paths[] = {
        {"fake-quant", RUN_FAKE, false}, {"int8 C", RUN_INT, true}, {"int8 AVX2", RUN_INT, false}};
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        ql_qgemm_force_portable(paths[p].portable);
        if (paths[p].kind == RUN_INT && !paths[p].portable &&
            ql_qgemm_kernel_active() != QL_QGEMM_AVX2) {
            printf("  %-12s %10s %10s\n", paths[p].name, "n/a", "n/a");
            continue;
        }
        const double s1 = best_time(&c, paths[p].kind, 1, min_seconds);
        const double sn = best_time(&c, paths[p].kind, threads, min_seconds);
        printf("  %-12s %10.2f %10.2f   (%d threads)\n", paths[p].name, macs / s1 / 1e9,
               macs / sn / 1e9, threads);
        fflush(stdout);
    }
    ql_qgemm_force_portable(false);
out:
    ql_threads_set(our_threads);
    openblas_set_num_threads(blas_threads);
    free(x);
    free(xq);
    free(w);
    free(y);
    free(wq);
    free(xb);
    return rc;
}
