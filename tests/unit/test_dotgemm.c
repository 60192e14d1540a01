/* qlab's own product kernel (base/dotgemm.h): every kernel this CPU has (portable,
 * AVX2, AVX-512) gives the same bits as this file's own re-implementation of the
 * documented summation order, for f32, F16 and BF16 rows, at shapes with and without
 * tails (k not a multiple of 16, rows and tokens not multiples of the tiles); the
 * result does not depend on the thread count; a half-precision row read directly equals
 * the f32 product of its widened values; every output is within the summation bound of
 * the exact value. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dotgemm.h"
#include "base/fp16.h"
#include "base/util.h"
#include "qltest.h"

static uint64_t rng_state = 11;

/* The documented order, written out: partial j sums x[i] w[i] for i = j (mod 16) in
 * increasing i by fused multiply-add, missing values as zeros; then the pairs (j, j + 8),
 * (j, j + 4), (j, j + 2), (0, 1). */
static float dot_defined(const float *x, const float *w, int64_t k)
{
    float p[16] = {0};
    for (int64_t i0 = 0; i0 < k; i0 += 16)
        for (int j = 0; j < 16; j++) {
            const int64_t i = i0 + j;
            p[j] = fmaf(i < k ? x[i] : 0.0f, i < k ? w[i] : 0.0f, p[j]);
        }
    for (int j = 0; j < 8; j++)
        p[j] = p[j] + p[j + 8];
    for (int j = 0; j < 4; j++)
        p[j] = p[j] + p[j + 4];
    for (int j = 0; j < 2; j++)
        p[j] = p[j] + p[j + 2];
    return p[0] + p[1];
}

static int differing(const float *a, const float *b, int64_t n)
{
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += memcmp(&a[i], &b[i], sizeof a[i]) != 0;
    return bad;
}

static void check_shape(int64_t m, int64_t n, int64_t k, float alpha)
{
    float *x = malloc((size_t)(m * k) * sizeof *x);
    float *wf = malloc((size_t)(n * k) * sizeof *wf);
    uint16_t *wh = malloc((size_t)(n * k) * sizeof *wh);
    float *y = malloc((size_t)(m * n) * sizeof *y);
    float *want = malloc((size_t)(m * n) * sizeof *want);
    float *y1 = malloc((size_t)(m * n) * sizeof *y1);
    for (int64_t i = 0; i < m * k; i++)
        x[i] = (float)ql_rng_gauss(&rng_state) * (i % k == 3 ? 40.0f : 1.0f);
    static const ql_dot_wtype types[] = {QL_DOT_F32, QL_DOT_F16, QL_DOT_BF16};
    for (int ti = 0; ti < 3; ti++) {
        const ql_dot_wtype wt = types[ti];
        /* f32 weights, and for the half types their bits with wf the widened values */
        for (int64_t i = 0; i < n * k; i++) {
            const float v = 0.05f * (float)ql_rng_gauss(&rng_state);
            if (wt == QL_DOT_F16) {
                wh[i] = ql_fp32_to_fp16(v);
                wf[i] = ql_fp16_to_fp32(wh[i]);
            } else if (wt == QL_DOT_BF16) {
                wh[i] = ql_fp32_to_bf16(v);
                wf[i] = ql_bf16_to_fp32(wh[i]);
            } else {
                wf[i] = v;
            }
        }
        const void *w = wt == QL_DOT_F32 ? (const void *)wf : (const void *)wh;
        double worst = 0;
        for (int64_t t = 0; t < m; t++)
            for (int64_t o = 0; o < n; o++) {
                want[t * n + o] = alpha * dot_defined(x + t * k, wf + o * k, k);
                double exact = 0, abs_sum = 0;
                for (int64_t i = 0; i < k; i++) {
                    exact += (double)x[t * k + i] * (double)wf[o * k + i];
                    abs_sum += fabs((double)x[t * k + i] * (double)wf[o * k + i]);
                }
                const double e =
                    fabs((double)want[t * n + o] - (double)alpha * exact) / (fabs((double)alpha) * abs_sum);
                worst = e > worst ? e : worst;
            }
        /* k / 16 + 4 roundings per output at most: the chain of a partial and the tree */
        CHECK_MSG(worst <= (double)(k / 16 + 5) * 0x1p-24, "%g", worst);
        for (int isa = QL_DOT_PORTABLE; isa <= QL_DOT_AVX512; isa++) {
            if (!ql_dotgemm_force_isa((ql_dot_isa)isa))
                continue;
            memset(y, 0xff, (size_t)(m * n) * sizeof *y);
            ql_dotgemm(m, n, k, alpha, x, k, w, wt, k, y, n);
            const int bad = differing(y, want, m * n);
            CHECK_MSG(bad == 0, "%s, type %d, %lld x %lld x %lld: %d of %lld outputs differ",
                      ql_dotgemm_isa_name((ql_dot_isa)isa), ti, (long long)m, (long long)n,
                      (long long)k, bad, (long long)(m * n));
            /* one thread, and the serial entry: the same bits */
            const int threads = ql_threads_get();
            ql_threads_set(1);
            ql_dotgemm(m, n, k, alpha, x, k, w, wt, k, y1, n);
            ql_threads_set(threads);
            CHECK_EQ_INT(differing(y, y1, m * n), 0);
            ql_dotgemm_serial(m, n, k, alpha, x, k, w, wt, k, y1, n);
            CHECK_EQ_INT(differing(y, y1, m * n), 0);
            if (wt != QL_DOT_F32) { /* the half rows read directly = their widened values */
                ql_dotgemm(m, n, k, alpha, x, k, wf, QL_DOT_F32, k, y1, n);
                CHECK_EQ_INT(differing(y, y1, m * n), 0);
            }
        }
        ql_dotgemm_unforce();
    }
    /* Strided operands: a block of a wider matrix gives the block's products. */
    if (m > 1 && n > 1 && k > 1) {
        const int64_t ms = m - 1, ns = n - 1, ks = k - 1;
        ql_dotgemm(ms, ns, ks, alpha, x + k, k, wf + k, QL_DOT_F32, k, y, n);
        int bad = 0;
        for (int64_t t = 0; t < ms; t++)
            for (int64_t o = 0; o < ns; o++) {
                const float v = alpha * dot_defined(x + (t + 1) * k, wf + (o + 1) * k, ks);
                bad += memcmp(&v, &y[t * n + o], sizeof v) != 0;
            }
        CHECK_EQ_INT(bad, 0);
    }
    printf("%lld x %lld x %lld: every kernel up to %s gives the defined order's bits\n",
           (long long)m, (long long)n, (long long)k, ql_dotgemm_isa_name(ql_dotgemm_isa()));
    free(x);
    free(wf);
    free(wh);
    free(y);
    free(want);
    free(y1);
}

int main(void)
{
    check_shape(1, 1, 1, 1.0f);      /* a tail only */
    check_shape(3, 5, 16, 1.0f);     /* one full step */
    check_shape(7, 9, 37, 0.125f);   /* tails everywhere, a scale */
    check_shape(13, 11, 64, 1.0f);   /* token blocks with a remainder */
    check_shape(40, 300, 400, 1.0f); /* threaded: several row tasks */
    check_shape(200, 70, 312, 1.0f); /* threaded: one row task, the tokens split */
    return qlt_done();
}
