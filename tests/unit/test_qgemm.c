/* Integer Q8_0 x q8_0 products: the AVX2 kernel is bit-identical to the portable one;
 * both, and the fake-quant path (decoded values, f32 products summed), stay within the
 * recursive-summation bound of the exact value; results do not depend on the thread
 * count. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/actquant.h"
#include "formats/qgemm.h"
#include "formats/quant_legacy.h"
#include "qltest.h"

/* |computed - exact| <= n * u * sum_j |w_j x_j| (u = 2^-24) bounds recursive f32
 * summation of n terms each rounded once; the integer path has n = blocks + 1 roundings
 * per chain, the fake-quant path n_in + 1. Applied with n = n_in + 1 to both. */
#define SUM_BOUND(n, abs_sum) ((double)(n)*0x1p-24 * (abs_sum))

static uint64_t rng_state;
static float gauss(void)
{
    return (float)ql_rng_gauss(&rng_state);
}

static void check_shape(int64_t n_tok, int64_t n_out, int64_t n_in)
{
    const int64_t nb = n_in / 32;
    float *w = malloc((size_t)(n_out * n_in) * sizeof *w);
    float *x = malloc((size_t)(n_tok * n_in) * sizeof *x);
    for (int64_t i = 0; i < n_out * n_in; i++)
        w[i] = 0.02f * gauss() * (i % n_in == 7 ? 30.0f : 1.0f);
    for (int64_t i = 0; i < n_tok * n_in; i++)
        x[i] = gauss() * (i % n_in == 3 ? 50.0f : 1.0f);
    ql_block_q8_0 *wq = malloc((size_t)(n_out * nb) * sizeof *wq);
    ql_block_q8_0 *xq = malloc((size_t)(n_tok * nb) * sizeof *xq);
    ql_quantize_row_q8_0_ref(w, wq, n_out * n_in);
    ql_quantize_row_q8_0_ref(x, xq, n_tok * n_in);
    float *wd = malloc((size_t)(n_out * n_in) * sizeof *wd);
    float *xd = malloc((size_t)(n_tok * n_in) * sizeof *xd);
    ql_dequantize_q8_0(wq, wd, n_out, n_in);
    ql_actq_round(QL_ACTQ_Q8_0, x, xd, n_tok * n_in); /* the fake-quant activations */

    float *y_port = malloc((size_t)(n_tok * n_out) * sizeof *y_port);
    float *y_simd = malloc((size_t)(n_tok * n_out) * sizeof *y_simd);
    float *y_1t = malloc((size_t)(n_tok * n_out) * sizeof *y_1t);
    ql_qgemm_force_portable(true);
    CHECK(ql_qgemm_kernel_active() == QL_QGEMM_PORTABLE);
    ql_gemm_q8_0(wq, xq, y_port, n_tok, n_out, n_in);
    ql_qgemm_force_portable(false);
    ql_gemm_q8_0(wq, xq, y_simd, n_tok, n_out, n_in);
    const int threads = ql_threads_get();
    ql_threads_set(1);
    ql_gemm_q8_0(wq, xq, y_1t, n_tok, n_out, n_in);
    ql_threads_set(threads);
    CHECK_MSG(memcmp(y_port, y_simd, (size_t)(n_tok * n_out) * sizeof *y_port) == 0,
              "%s kernel differs from the portable one (%lld x %lld x %lld)",
              ql_qgemm_kernel_name(ql_qgemm_kernel_active()), (long long)n_tok, (long long)n_out,
              (long long)n_in);
    CHECK(memcmp(y_1t, y_simd, (size_t)(n_tok * n_out) * sizeof *y_1t) == 0);

    int bad_int = 0, bad_fake = 0, bad_dot = 0;
    double worst_int = 0, worst_fake = 0;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t o = 0; o < n_out; o++) {
            /* exact: products of the decoded values are exact in double (11 + 8 bits
             * each), and so are their partial sums at these sizes */
            double exact = 0, abs_sum = 0;
            float fake = 0;
            for (int64_t j = 0; j < n_in; j++) {
                const double p = (double)wd[o * n_in + j] * (double)xd[t * n_in + j];
                exact += p;
                abs_sum += fabs(p);
                fake += wd[o * n_in + j] * xd[t * n_in + j];
            }
            const double bound = SUM_BOUND(n_in + 1, abs_sum);
            const double e_int = fabs((double)y_simd[t * n_out + o] - exact);
            const double e_fake = fabs((double)fake - exact);
            bad_int += e_int > bound;
            bad_fake += e_fake > bound;
            if (abs_sum > 0) {
                worst_int = fmax(worst_int, e_int / abs_sum);
                worst_fake = fmax(worst_fake, e_fake / abs_sum);
            }
            const float d = ql_vec_dot_q8_0_q8_0(n_in, wq + o * nb, xq + t * nb);
            bad_dot += memcmp(&d, &y_simd[t * n_out + o], sizeof d) != 0;
        }
    printf("%lld x %lld x %lld: |int - exact| <= %.2g, |fake - exact| <= %.2g of sum |w x|\n",
           (long long)n_tok, (long long)n_out, (long long)n_in, worst_int, worst_fake);
    CHECK_EQ_INT(bad_int, 0);
    CHECK_EQ_INT(bad_fake, 0);
    CHECK_EQ_INT(bad_dot, 0);
    free(w);
    free(x);
    free(wq);
    free(xq);
    free(wd);
    free(xd);
    free(y_port);
    free(y_simd);
    free(y_1t);
}

int main(void)
{
    rng_state = 5;
    printf("active kernel: %s\n", ql_qgemm_kernel_name(ql_qgemm_kernel_active()));
    check_shape(3, 5, 32);     /* one block: the tail loop only */
    check_shape(7, 19, 288);   /* 9 blocks: one group of 8 and a tail */
    check_shape(16, 64, 1024); /* groups of 8 only, threaded */
    return qlt_done();
}
