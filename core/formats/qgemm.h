/* qlab: integer matrix products: Q8_0 weights x q8_0 activations (the int8 paths) and
 * Q6_K weights x q8_K activations (what llama.cpp's CPU backend computes for Q6_K).
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
 * results do not depend on the thread count.
 *
 * Q6_K x q8_K reproduces the arithmetic of ggml-cpu's x86 AVX2 ggml_vec_dot_q6_K_q8_K
 * (b4747), the kernel llama.cpp runs for Q6_K weights on such CPUs, bit for bit. Per
 * 256-value super-block b, with levels q (0..63) of the weight, sub-block scales s
 * (int8, one per 16 values), q8_K levels v and the super-block scales Dw (fp16) and
 * dx (f32), it keeps 8 int32 lanes: lane k sums the values at positions 4k..4k+3 of
 * each of the block's eight 32-value chunks c,
 *     L_bk = sum_c sum_{i in 4k..4k+3} s_{c,i} * (q_{32c+i} - 32) * v_{32c+i}   (exact)
 * (|L| < 2^24, so its f32 conversion is exact), then one fused multiply-add per lane:
 *     A_k = fma(dx_b * Dw_b, (float)L_bk, A_k)        (f32, blocks in order from 0)
 *     y   = ((A_0 + A_4) + (A_2 + A_6)) + ((A_1 + A_5) + (A_3 + A_7))
 * In exact arithmetic this is sum_j (Dw s_j (q_j - 32)) (dx v_j), the product of the
 * decoded values that the fake-quant path computes; in f32 the two differ by a few
 * units in the last place, which q8_K's rounding of the next product's input turns
 * into different levels for the values that lie near a rounding boundary. The
 * portable kernel performs the same integer sums and the same f32 operations (fmaf),
 * so both kernels give bit-identical results. */
#ifndef QL_QGEMM_H
#define QL_QGEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "formats/quant_k.h"
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

/* One Q6_K x q8_K dot product of n values (a multiple of 256). */
float ql_vec_dot_q6_K_q8_K(int64_t n, const ql_block_q6_K *w, const ql_block_q8_K *x);

/* y (n_tok, n_out) = X W^T: w holds n_out rows of n_in/256 Q6_K blocks, x holds n_tok rows
 * of n_in/256 q8_K blocks (ql_quantize_row_q8_K_ref), n_in a multiple of 256. */
void ql_gemm_q6_K(const ql_block_q6_K *w, const ql_block_q8_K *x, float *y, int64_t n_tok,
                  int64_t n_out, int64_t n_in);

#endif
