/* The IQ4 searches run sixteen lanes at a time (core/formats/quant_iq4.c); these
 * checks hold them to the scalar search they replace, written here as ggml states it
 * (a binary search of the table with float differences, then 16 candidate scales each
 * refitted, one at a time): the index of values at and next to every midpoint of the
 * table, and block scales on Gaussian, heavy-tailed, integer-valued (ties) and
 * importance-weighted blocks. The golden vectors check a few rows against ggml itself;
 * these check many more blocks and the ties. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/util.h"
#include "formats/quant_common.h"
#include "formats/quant_iq4.h"
#include "qltest.h"

/* The scalar scale search of one 32-value block. */
static float scalar_block_scale(const float *xb, const float *weight, float max)
{
    const int8_t *v = ql_iq4nl_values;
    float best = 0, d = 0;
    for (int t = 0; t < 16; ++t) {
        const float id = t == 0 ? 1 / (-max / v[0]) : (float)(t - 8 + v[0]) / max;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; ++j) {
            const float q = v[ql_best_index_int8(16, v, id * xb[j])];
            sumqx += weight[j] * q * xb[j];
            sumq2 += weight[j] * q * q;
        }
        if (t == 0) {
            d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
            best = d * sumqx;
        } else if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

static void scalar_scales(int sbs, const float *x, const float *qw, float *scales)
{
    float sigma2 = 0, weight[32];
    for (int j = 0; j < sbs; ++j)
        sigma2 += x[j] * x[j];
    sigma2 *= 2.f / (float)sbs;
    for (int ib = 0; ib < sbs / 32; ++ib) {
        const float *xb = x + 32 * ib;
        for (int j = 0; j < 32; ++j)
            weight[j] = qw ? qw[32 * ib + j] * sqrtf(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
        float amax;
        const float max = ql_signed_absmax(xb, 32, &amax);
        scales[ib] = amax < QL_GROUP_MAX_EPS ? 0.f : scalar_block_scale(xb, weight, max);
    }
}

/* Values at each midpoint of the table and 40 floats either side, at scale 1, and the
 * same positions reached through other scales (id * x rounds onto them). */
static void indices_at_midpoints(void)
{
    const int8_t *v = ql_iq4nl_values;
    enum { N = 16 * 6 };
    float x[N];
    uint8_t L[N];
    int bad = 0;
    for (int k = 0; k < 15; ++k) {
        const float mid = 0.5f * (float)(v[k] + v[k + 1]);
        for (int s = 0; s < 3; ++s) {
            const float id = s == 0 ? 1.f : s == 1 ? 0.37f : 3.1f;
            float m = mid / id;
            for (int i = 0; i < N / 2; ++i)
                m = nextafterf(m, -INFINITY);
            for (int i = 0; i < N; ++i, m = nextafterf(m, INFINITY))
                x[i] = m;
            ql_iq4_indices(x, N, id, L);
            for (int i = 0; i < N; ++i)
                bad += L[i] != ql_best_index_int8(16, v, id * x[i]);
        }
    }
    CHECK_EQ_INT(bad, 0);
}

/* Random values across the whole table and past both ends, with zero and inf id. */
static void indices_random(void)
{
    enum { N = 4096 };
    static float x[N];
    static uint8_t L[N];
    uint64_t rng = 7;
    for (int i = 0; i < N; ++i)
        x[i] = (float)(ql_rng_gauss(&rng) * 70.0);
    const float ids[] = {1.f, 0.f, 1e-3f, 2.5f};
    for (size_t s = 0; s < sizeof ids / sizeof ids[0]; ++s) {
        ql_iq4_indices(x, N, ids[s], L);
        int bad = 0;
        for (int i = 0; i < N; ++i)
            bad += L[i] != ql_best_index_int8(16, ql_iq4nl_values, ids[s] * x[i]);
        CHECK_MSG(bad == 0, "id %g: %d of %d indices differ", (double)ids[s], bad, N);
    }
}

static void expect_scales(const char *what, int sbs, const float *x, const float *qw)
{
    float got[8], want[8];
    const float max = ql_iq4_scales(sbs, x, qw, got);
    scalar_scales(sbs, x, qw, want);
    float want_max = 0;
    for (int ib = 0; ib < sbs / 32; ++ib) {
        CHECK_MSG(memcmp(&got[ib], &want[ib], sizeof(float)) == 0,
                  "%s: block %d scale %.9g, scalar search %.9g", what, ib, (double)got[ib],
                  (double)want[ib]);
        if (fabsf(want[ib]) > fabsf(want_max))
            want_max = want[ib];
    }
    CHECK_MSG(memcmp(&max, &want_max, sizeof max) == 0, "%s: max scale %.9g, expected %.9g", what,
              (double)max, (double)want_max);
}

static void scales_match_scalar_search(void)
{
    enum { SBS = 256 };
    float x[SBS], qw[SBS];
    uint64_t rng = 11;
    for (int rep = 0; rep < 400; ++rep) {
        for (int j = 0; j < SBS; ++j) {
            const double g = ql_rng_gauss(&rng);
            switch (rep % 4) {
            case 0: x[j] = (float)g; break;                      /* Gaussian */
            case 1: x[j] = (float)(g * g * g); break;            /* heavy tails */
            case 2: x[j] = (float)(int)(g * 40); break;          /* integers: ties */
            default: x[j] = j % 7 == 0 ? (float)g * 1e3f : (float)g * 1e-3f; /* outliers */
            }
            qw[j] = (float)fabs(ql_rng_gauss(&rng));
        }
        if (rep % 10 == 9)
            memset(x + 32, 0, 32 * sizeof(float)); /* an all-zero block */
        expect_scales("IQ4_XS", SBS, x, NULL);
        expect_scales("IQ4_XS, imatrix", SBS, x, qw);
        expect_scales("IQ4_NL", 32, x + 64, NULL);
        expect_scales("IQ4_NL, imatrix", 32, x + 64, qw + 64);
    }
}

int main(void)
{
    indices_at_midpoints();
    indices_random();
    scales_match_scalar_search();
    return qlt_done();
}
