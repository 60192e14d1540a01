/* qlab: matrix products through BLAS, split across threads by qlab itself.
 *
 * C (m, n) = alpha * A (m, k) · op(B), row-major, op(B) = B^T when B is given as (n, k)
 * rows (trans_b, the layout of a weight matrix) or B itself when given as (k, n).
 *
 * Why not let OpenBLAS thread the product: its split of a product across threads
 * depends on the thread count, and with some kernels (Haswell, which some machines
 * force through OPENBLAS_CORETYPE) the split changes the last bits of the result. A
 * stored result must not depend on the number of cores. So OpenBLAS runs single
 * threaded here, and the product is cut into a grid of tiles that depends only on
 * (m, n, k): each tile is one single-threaded sgemm, the tiles are shared out among
 * OpenMP threads in any order. Every output value is then computed by the same
 * sequence of operations whatever the thread count. Different kernels (SkylakeX vs
 * Haswell) still differ in their last bits; ql_gemm_kernel() names the one in use so
 * that it can be recorded with the results.
 *
 * Products below QL_GEMM_SERIAL_MACS multiply-adds run their tiles on the calling
 * thread: for them the hand-over to other threads costs more than it saves.
 *
 * Which kernel multiplies the weights (QLAB_GEMM, or ql_gemm_select):
 *   auto (the default)  F16 and BF16 weight rows go to qlab's own kernel, ql_dotgemm
 *                       (dotgemm.h), which reads them without decoding them to f32 (the
 *                       caller asks ql_gemm_selected); f32 rows (f32 weights and decoded
 *                       quantized ones) to OpenBLAS's tiles, whose products agree more
 *                       closely with llama.cpp's on f32 models (its summation order is
 *                       nearer ggml's: tests/e2e/test_imatrix_golden.c) at the same speed.
 *   dot                 every weight product on ql_dotgemm: ql_gemm with trans_b (the
 *                       layout of a weight matrix) and ql_gemm_decoded too. One fixed
 *                       summation order on every CPU: no product of a weight depends on
 *                       the BLAS kernel.
 *   blas                every product on OpenBLAS's tiles, F16/BF16 rows decoded to f32.
 * ql_gemm_serial (the attention's products, per head) is OpenBLAS's under all three: with
 * a head's 64-128 values per dot product sgemm is faster there.
 *
 * Thread count: OpenMP's (ql_threads_set in util.h). May be called from any thread,
 * but not from inside an OpenMP parallel region (the tiles would run on one thread:
 * correct, only slower). */
#ifndef QL_GEMM_H
#define QL_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dotgemm.h" /* QL_GEMM_SERIAL_MACS */
#include "base/error.h"

typedef enum { QL_GEMM_AUTO, QL_GEMM_DOT, QL_GEMM_BLAS } ql_gemm_products;

/* Reads QLAB_GEMM (unset or "auto", "dot", "blas"); anything else is an error naming
 * it. Called once at start-up, before any product. */
ql_status ql_gemm_select_from_env(ql_error *err);
void ql_gemm_select(ql_gemm_products products);
ql_gemm_products ql_gemm_selected(void);

void ql_gemm(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
             int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc);

/* One sgemm on the calling thread, without tiles: for code that already runs one product
 * per thread (attention heads). Its result is not ql_gemm's for the same arguments (the
 * grid differs); a product is always computed by one of the two. */
void ql_gemm_serial(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                    int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc);

/* Rows row0 .. row0 + n_rows - 1 of B (n, k) decoded into out (n_rows, k) f32. Called
 * from several threads at once, each with its own out. */
typedef void (*ql_gemm_rows_fn)(const void *ctx, int64_t row0, int64_t n_rows, float *out);

/* ql_gemm(true, ...) with B produced tile by tile by rows(): no f32 copy of B exists,
 * only one tile of it per thread (scratch: n_slots buffers of ql_gemm_scratch_floats(n,
 * k) floats, n_slots >= the OpenMP threads). The tile grid is ql_gemm's, so the result
 * is bit-identical to ql_gemm on the decoded B. Each tile of B is decoded once per
 * row tile of A. */
void ql_gemm_decoded(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     ql_gemm_rows_fn rows, const void *ctx, float *scratch, int n_slots, float *c,
                     int64_t ldc);

/* Floats one scratch slot of ql_gemm_decoded needs for B of n rows of k values. */
size_t ql_gemm_scratch_floats(int64_t n, int64_t k);

/* The tile grid of a product: tiles of at most *tile_m rows and *tile_n columns. */
void ql_gemm_tiles(int64_t m, int64_t n, int64_t k, int64_t *tile_m, int64_t *tile_n);

/* The BLAS library and kernel in use, e.g. "OpenBLAS 0.3.21 Haswell", followed by
 * " + weights qlab-dot" when ql_dotgemm computes the row products (static storage). */
const char *ql_gemm_kernel(void);

#endif
