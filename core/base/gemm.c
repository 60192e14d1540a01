/* Matrix products on a fixed tile grid (gemm.h). */
#include "base/gemm.h"

#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dotgemm.h"
#include "base/error.h"

/* Columns per tile: wide enough that packing A once per tile costs little next to the
 * tile's products (1/QL_GEMM_TILE_N of them), narrow enough that a weight matrix of a
 * few thousand rows gives every core several tiles. */
#define TILE_N 256
/* Fewer column tiles than this: the rows are split too, so that narrow products (the
 * K and V projections of grouped-query attention) still use every core. */
#define MIN_TILES 8
/* Row tiles are a multiple of this (the row blocking of OpenBLAS's kernels). */
#define TILE_M_ALIGN 16

static pthread_once_t serial_once = PTHREAD_ONCE_INIT;

static ql_gemm_products selected = QL_GEMM_AUTO;

ql_status ql_gemm_select_from_env(ql_error *err)
{
    const char *v = getenv("QLAB_GEMM");
    if (!v || !*v || strcmp(v, "auto") == 0)
        selected = QL_GEMM_AUTO;
    else if (strcmp(v, "dot") == 0)
        selected = QL_GEMM_DOT;
    else if (strcmp(v, "blas") == 0)
        selected = QL_GEMM_BLAS;
    else
        return ql_error_set(err, QL_EINVAL,
                            "QLAB_GEMM=%s: expected auto (the default: F16/BF16 weights on qlab's "
                            "kernel, f32 ones on OpenBLAS), dot (every weight product on "
                            "qlab's kernel) or blas (every product on OpenBLAS)",
                            v);
    return QL_OK;
}

void ql_gemm_select(ql_gemm_products products)
{
    selected = products;
}

ql_gemm_products ql_gemm_selected(void)
{
    return selected;
}

/* OpenBLAS's own threads stay idle: qlab's threads call it one tile each. */
static void make_serial(void)
{
    openblas_set_num_threads(1);
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Whether the product's tiles run on the calling thread only. */
static bool serial_product(int64_t m, int64_t n, int64_t k)
{
    return m * n * k < QL_GEMM_SERIAL_MACS;
}

void ql_gemm_tiles(int64_t m, int64_t n, int64_t k, int64_t *tile_m, int64_t *tile_n)
{
    /* Columns are always cut into tiles of TILE_N, small products too: a weight decoded
     * tile by tile (ql_gemm_decoded) then needs no more than a tile of it, and has the
     * same grid as the bound weight. */
    *tile_n = n < TILE_N ? (n > 0 ? n : 1) : TILE_N;
    if (serial_product(m, n, k) || m <= 0 || n <= 0) {
        *tile_m = m > 0 ? m : 1;
        return;
    }
    const int64_t tiles_n = ceil_div(n, *tile_n);
    int64_t split_m = tiles_n >= MIN_TILES ? 1 : ceil_div(MIN_TILES, tiles_n);
    int64_t tm = ceil_div(ceil_div(m, split_m), TILE_M_ALIGN) * TILE_M_ALIGN;
    *tile_m = tm < m ? tm : m;
}

static void sgemm(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                  int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                (int)k, alpha, a, (int)lda, b, (int)ldb, 0.0f, c, (int)ldc);
}

void ql_gemm_serial(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                    int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc)
{
    pthread_once(&serial_once, make_serial);
    if (m <= 0 || n <= 0)
        return;
    sgemm(trans_b, m, n, k, alpha, a, lda, b, ldb, c, ldc);
}

void ql_gemm(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
             int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc)
{
    pthread_once(&serial_once, make_serial);
    if (m <= 0 || n <= 0)
        return;
    if (trans_b && selected == QL_GEMM_DOT) { /* its own split, as good for any thread count */
        ql_dotgemm(m, n, k, alpha, a, lda, b, QL_DOT_F32, ldb, c, ldc);
        return;
    }
    int64_t tm, tn;
    ql_gemm_tiles(m, n, k, &tm, &tn);
    const int64_t tiles_m = ceil_div(m, tm), tiles_n = ceil_div(n, tn);
    const int64_t tiles = tiles_m * tiles_n;
#pragma omp parallel for schedule(dynamic, 1) if (tiles > 1 && !serial_product(m, n, k))
    for (int64_t t = 0; t < tiles; t++) {
        const int64_t i0 = (t / tiles_n) * tm, j0 = (t % tiles_n) * tn;
        const int64_t mm = m - i0 < tm ? m - i0 : tm, nn = n - j0 < tn ? n - j0 : tn;
        /* B's tile: rows j0.. of B (n, k) when transposed, else its columns j0.. */
        const float *bt = trans_b ? b + j0 * ldb : b + j0;
        sgemm(trans_b, mm, nn, k, alpha, a + i0 * lda, lda, bt, ldb, c + i0 * ldc + j0, ldc);
    }
}

size_t ql_gemm_scratch_floats(int64_t n, int64_t k)
{
    return (size_t)((n < TILE_N ? n : TILE_N) * k);
}

void ql_gemm_decoded(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     ql_gemm_rows_fn rows, const void *ctx, float *scratch, int n_slots, float *c,
                     int64_t ldc)
{
    pthread_once(&serial_once, make_serial);
    if (m <= 0 || n <= 0)
        return;
    int64_t tm, tn;
    ql_gemm_tiles(m, n, k, &tm, &tn);
    const int64_t tiles_m = ceil_div(m, tm), tiles_n = ceil_div(n, tn);
    const int64_t tiles = tiles_m * tiles_n;
    const size_t slot = ql_gemm_scratch_floats(n, k);
    QL_ASSERT(n_slots >= 1);
    /* Row tiles inner: consecutive tasks of a thread often reuse its decoded tile. */
#pragma omp parallel if (tiles > 1 && !serial_product(m, n, k))
    {
        const int id = omp_get_thread_num();
        QL_ASSERT(id < n_slots);
        float *bt = scratch + (size_t)id * slot;
        int64_t have = -1; /* the column tile bt holds */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tiles; t++) {
            const int64_t tj = t / tiles_m, ti = t % tiles_m;
            const int64_t i0 = ti * tm, j0 = tj * tn;
            const int64_t mm = m - i0 < tm ? m - i0 : tm, nn = n - j0 < tn ? n - j0 : tn;
            if (have != tj) {
                rows(ctx, j0, nn, bt);
                have = tj;
            }
            if (selected == QL_GEMM_DOT)
                ql_dotgemm_serial(mm, nn, k, alpha, a + i0 * lda, lda, bt, QL_DOT_F32, k,
                                  c + i0 * ldc + j0, ldc);
            else
                sgemm(true, mm, nn, k, alpha, a + i0 * lda, lda, bt, k, c + i0 * ldc + j0, ldc);
        }
    }
}

static char kernel_name[128], kernel_name_dot[160], kernel_name_auto[160];

static void describe_kernel(void)
{
    const char *cfg = openblas_get_config();
    const char *core = openblas_get_corename();
    /* "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64": keep the library
     * and version, then the kernel chosen at run time. */
    char lib[64] = "OpenBLAS";
    if (cfg) {
        const char *sp = strchr(cfg, ' ');
        const char *sp2 = sp ? strchr(sp + 1, ' ') : NULL;
        size_t len = sp2 ? (size_t)(sp2 - cfg) : strlen(cfg);
        if (len >= sizeof lib)
            len = sizeof lib - 1;
        memcpy(lib, cfg, len);
        lib[len] = '\0';
    }
    snprintf(kernel_name, sizeof kernel_name, "%s %s", lib, core ? core : "unknown-kernel");
    snprintf(kernel_name_dot, sizeof kernel_name_dot, "%s + weights qlab-dot", kernel_name);
    snprintf(kernel_name_auto, sizeof kernel_name_auto, "%s + F16/BF16 weights qlab-dot",
             kernel_name);
}

const char *ql_gemm_kernel(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, describe_kernel);
    return selected == QL_GEMM_DOT    ? kernel_name_dot
           : selected == QL_GEMM_AUTO ? kernel_name_auto
                                      : kernel_name;
}
