/* Integer Q8_0 x q8_0 products: the AVX2 kernel is bit-identical to the portable one;
 * both, and the fake-quant path (decoded values, f32 products summed), stay within the
 * recursive-summation bound of the exact value; results do not depend on the thread
 * count. Q6_K x q8_K: both kernels are bit-identical to this file's own straightforward
 * re-implementation of ggml-cpu's AVX2 arithmetic, and within the bound of the exact
 * value. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "base/util.h"
#include "experiment/actquant.h"
#include "formats/qgemm.h"
#include "formats/quant_k.h"
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

/* ---- Q6_K x q8_K ---- */

/* The 256 signed levels (q - 32) of a Q6_K block, decoded from the byte layout: per
 * half h, byte l of each 32-byte group gives values 128h + l + 32k. */
static void q6_K_levels(const ql_block_q6_K *b, int lv[256])
{
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const int a = b->ql[64 * h + l], c = b->ql[64 * h + 32 + l], hb = b->qh[32 * h + l];
            lv[128 * h + l] = ((a & 15) | (hb & 3) << 4) - 32;
            lv[128 * h + 32 + l] = ((c & 15) | (hb >> 2 & 3) << 4) - 32;
            lv[128 * h + 64 + l] = ((a >> 4) | (hb >> 4 & 3) << 4) - 32;
            lv[128 * h + 96 + l] = ((c >> 4) | (hb >> 6 & 3) << 4) - 32;
        }
}

/* ggml-cpu's AVX2 ggml_vec_dot_q6_K_q8_K, written out: eight int32 lanes per block,
 * lane k holding positions 4k..4k+3 of every 32-value chunk; a fused multiply-add per
 * lane and block with the f32 product of the scales; the lanes summed as its
 * hsum_float_8 does. Also returns the exact value and sum |w x| in double. */
static float q6_K_dot_ggml(int64_t nb, const ql_block_q6_K *w, const ql_block_q8_K *x,
                           double *exact, double *abs_sum)
{
    float acc[8] = {0};
    *exact = *abs_sum = 0;
    for (int64_t b = 0; b < nb; b++) {
        int lv[256];
        q6_K_levels(&w[b], lv);
        int32_t lane[8] = {0};
        for (int c = 0; c < 8; c++)
            for (int i = 0; i < 32; i++) {
                const int e = 32 * c + i;
                lane[i / 4] += w[b].scales[e / 16] * lv[e] * x[b].qs[e];
                const double p = (double)ql_fp16_to_fp32(w[b].d) * w[b].scales[e / 16] * lv[e] *
                                 (double)x[b].d * x[b].qs[e];
                *exact += p;
                *abs_sum += fabs(p);
            }
        const float d = x[b].d * ql_fp16_to_fp32(w[b].d);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    const float lo[4] = {acc[0] + acc[4], acc[1] + acc[5], acc[2] + acc[6], acc[3] + acc[7]};
    return (lo[0] + lo[2]) + (lo[1] + lo[3]);
}

static void check_q6_K(int64_t n_tok, int64_t n_out, int64_t n_in)
{
    const int64_t nb = n_in / 256;
    float *w = malloc((size_t)(n_out * n_in) * sizeof *w);
    float *x = malloc((size_t)(n_tok * n_in) * sizeof *x);
    /* heavy tails on both sides (a massive activation channel, an outlier column) so
     * sub-block scales reach +-127 and levels their extremes */
    for (int64_t i = 0; i < n_out * n_in; i++)
        w[i] = 0.02f * gauss() * (i % n_in == 7 ? 30.0f : 1.0f);
    for (int64_t i = 0; i < n_tok * n_in; i++)
        x[i] = gauss() * (i % n_in == 3 ? 50.0f : 1.0f);
    ql_block_q6_K *wq = malloc((size_t)(n_out * nb) * sizeof *wq);
    ql_block_q8_K *xq = malloc((size_t)(n_tok * nb) * sizeof *xq);
    ql_quantize_q6_K(w, wq, n_out, n_in, NULL);
    ql_quantize_row_q8_K_ref(x, xq, n_tok * n_in);
    float *y_port = malloc((size_t)(n_tok * n_out) * sizeof *y_port);
    float *y_simd = malloc((size_t)(n_tok * n_out) * sizeof *y_simd);
    float *y_1t = malloc((size_t)(n_tok * n_out) * sizeof *y_1t);
    ql_qgemm_force_portable(true);
    ql_gemm_q6_K(wq, xq, y_port, n_tok, n_out, n_in);
    ql_qgemm_force_portable(false);
    ql_gemm_q6_K(wq, xq, y_simd, n_tok, n_out, n_in);
    const int threads = ql_threads_get();
    ql_threads_set(1);
    ql_gemm_q6_K(wq, xq, y_1t, n_tok, n_out, n_in);
    ql_threads_set(threads);
    CHECK(memcmp(y_1t, y_simd, (size_t)(n_tok * n_out) * sizeof *y_1t) == 0);
    int bad_port = 0, bad_simd = 0, bad_bound = 0, bad_dot = 0;
    double worst = 0;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t o = 0; o < n_out; o++) {
            double exact, abs_sum;
            const float g = q6_K_dot_ggml(nb, wq + o * nb, xq + t * nb, &exact, &abs_sum);
            const float ys = y_simd[t * n_out + o];
            bad_port += memcmp(&g, &y_port[t * n_out + o], sizeof g) != 0;
            bad_simd += memcmp(&g, &ys, sizeof g) != 0;
            bad_bound += fabs((double)ys - exact) > SUM_BOUND(n_in + 1, abs_sum);
            if (abs_sum > 0)
                worst = fmax(worst, fabs((double)ys - exact) / abs_sum);
            const float d = ql_vec_dot_q6_K_q8_K(n_in, wq + o * nb, xq + t * nb);
            bad_dot += memcmp(&d, &ys, sizeof d) != 0;
        }
    printf("Q6_K %lld x %lld x %lld: %d (portable) and %d (%s) outputs differ from ggml's AVX2 "
           "arithmetic; |y - exact| <= %.2g of sum |w x|\n",
           (long long)n_tok, (long long)n_out, (long long)n_in, bad_port, bad_simd,
           ql_qgemm_kernel_name(ql_qgemm_kernel_active()), worst);
    CHECK_EQ_INT(bad_port, 0);
    CHECK_EQ_INT(bad_simd, 0);
    CHECK_EQ_INT(bad_bound, 0);
    CHECK_EQ_INT(bad_dot, 0);
    free(w);
    free(x);
    free(wq);
    free(xq);
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
    check_q6_K(3, 5, 256);     /* one super-block */
    check_q6_K(16, 64, 1024);  /* four, threaded */
    return qlt_done();
}
