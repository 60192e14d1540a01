/* qlab: integer matrix products for the int8 paths (Q8_0 weights x q8_0 activations).
 *
 * The fake-quant path of a product (actquant.h) rounds the activations, multiplies by
 * the decoded weights and sums in f32 with CBLAS. The integer path computes what an
 * int8 kernel (ggml's vec_dot_q8_0_q8_0) computes: per 32-value block b,
 *     isum_b = sum_j qw_j * qx_j                       (exact, int32)
 *     y      = sum_b (float)isum_b * (Dw_b * Dx_b)      (f32, blocks in order, from 0)
 * with Dw, Dx the fp16 scales widened. Mathematically both paths give the same number
 * sum_j (Dw qw_j)(Dx qx_j); in f32 they round differently: the fake-quant path rounds
 * every product Dw qw_j Dx qx_j and adds n_in terms in BLAS's order, the integer path
 * rounds once per block. Both are within the classical bound of recursive summation,
 * |error| <= n * u * sum |w_j x_j| (u = 2^-24, n the number of terms), of the exact
 * value (tests/unit/test_qgemm.c checks each against an exact double evaluation).
 *
 * Kernels: a portable C reference and, on x86-64, an AVX2 version chosen at run time
 * (cpuid). The AVX2 kernel computes the block sums isum_b with integer SIMD (exact) and
 * then performs the same f32 operations in the same order, so both kernels give
 * bit-identical results; ql_qgemm_force_portable() switches the fallback on (for
 * tests and benchmarks). Products are split over output rows between ql_threads_get()
 * OpenMP threads; every output value is computed by one thread in a fixed order, so
 * results do not depend on the thread count. */
#ifndef QL_QGEMM_H
#define QL_QGEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "formats/quant_legacy.h"

/* Kernels the dispatcher can pick. */
typedef enum { QL_QGEMM_PORTABLE = 0, QL_QGEMM_AVX2 } ql_qgemm_kernel;

/* The kernel ql_gemm_q8_0 uses now: AVX2 when the CPU has it and the fallback is not
 * forced. */
ql_qgemm_kernel ql_qgemm_kernel_active(void);
const char *ql_qgemm_kernel_name(ql_qgemm_kernel k);

/* Forces the portable kernel (true) or restores run-time dispatch (false). Not
 * thread-safe against concurrent products. */
void ql_qgemm_force_portable(bool force);

/* One dot product of n values (a multiple of 32): w and x are n/32 blocks each. */
float ql_vec_dot_q8_0_q8_0(int64_t n, const ql_block_q8_0 *w, const ql_block_q8_0 *x);

/* y (n_tok, n_out) = X W^T: w holds n_out rows of n_in/32 Q8_0 blocks, x holds n_tok rows
 * of n_in/32 q8_0 blocks (ql_quantize_row_q8_0_ref), n_in a multiple of 32. */
void ql_gemm_q8_0(const ql_block_q8_0 *w, const ql_block_q8_0 *x, float *y, int64_t n_tok,
                  int64_t n_out, int64_t n_in);

#endif
