/* util.h: the deterministic random stream the benchmarks and tests draw from. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "qltest.h"

/* Box-Muller over 10^5 draws: the sample mean and variance of N(0,1) have standard
 * errors 1/sqrt(n) ~ 0.003 and sqrt(2/n) ~ 0.0045; five of them. */
#define GAUSS_N       100000
#define GAUSS_MOM_TOL 0.025

static void splitmix64_stream(void)
{
    /* The first outputs of splitmix64 from seed 0 (Steele, Lea and Flood's
     * reference), as 53-bit uniforms with the half-step offset. */
    static const uint64_t ref[3] = {0xE220A8397B1DCDAFull, 0x6E789E6AA1B965F4ull,
                                    0x06C45D188009454Full};
    uint64_t s = 0;
    for (int i = 0; i < 3; i++)
        CHECK(ql_rng_uniform(&s) == ((double)(ref[i] >> 11) + 0.5) * 0x1p-53);
    CHECK(s == 3 * 0x9E3779B97F4A7C15ull);

    /* A gauss draw takes two uniforms, the first for the radius. */
    uint64_t a = 42, b = 42;
    const double u1 = ql_rng_uniform(&b), u2 = ql_rng_uniform(&b);
    CHECK(ql_rng_gauss(&a) == sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
    CHECK(a == b);

    double sum = 0, sum2 = 0;
    uint64_t g = 7;
    for (int i = 0; i < GAUSS_N; i++) {
        const double x = ql_rng_gauss(&g);
        sum += x;
        sum2 += x * x;
    }
    const double mean = sum / GAUSS_N;
    CHECK_NEAR(mean, 0.0, GAUSS_MOM_TOL);
    CHECK_NEAR(sum2 / GAUSS_N - mean * mean, 1.0, GAUSS_MOM_TOL);
}

/* ql_grow keeps what the array held, zeroes what it adds, grows geometrically, and
 * refuses a size that would overflow without touching the array. */
static void grow_array(void)
{
    int *a = NULL;
    size_t cap = 0;
    CHECK(ql_grow((void **)&a, &cap, 1, sizeof *a));
    CHECK(a != NULL && cap == 16);
    for (int i = 0; i < 16; i++)
        CHECK(a[i] == 0);
    for (int i = 0; i < 16; i++)
        a[i] = i + 1;
    int *before = a;
    CHECK(ql_grow((void **)&a, &cap, 16, sizeof *a) && a == before && cap == 16);
    CHECK(ql_grow((void **)&a, &cap, 100, sizeof *a));
    CHECK(cap == 128);
    int kept = 1;
    for (int i = 0; i < 16; i++)
        kept &= a[i] == i + 1;
    for (size_t i = 16; i < cap; i++)
        kept &= a[i] == 0;
    CHECK(kept);
    before = a;
    CHECK(!ql_grow((void **)&a, &cap, SIZE_MAX / 2, sizeof *a));
    CHECK(a == before && cap == 128);
    free(a);
}

/* ql_strset_add keeps distinct strings in strcmp order and stops at max. */
static void string_set(void)
{
    const char *set[3];
    size_t n = 0;
    const char *in[] = {"q8_0", "f32", "q8_0", "native", "f32", "int8", "aaa"};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        ql_strset_add(set, &n, 3, in[i]);
    /* The first three distinct values, sorted; later ones do not fit. */
    CHECK_EQ_INT(n, 3);
    CHECK(n == 3 && strcmp(set[0], "f32") == 0 && strcmp(set[1], "native") == 0 &&
          strcmp(set[2], "q8_0") == 0);
}

/* ql_double_precision: the fewest %g digits that read back exactly, which is
 * also what ql_format_double writes. */
static void shortest_precision(void)
{
    CHECK_EQ_INT(ql_double_precision(0.5), 1);
    CHECK_EQ_INT(ql_double_precision(0.1), 1);
    CHECK_EQ_INT(ql_double_precision(1.0 / 3), 16);
    CHECK_EQ_INT(ql_double_precision(0.1 + 0.2), 17);
    CHECK_EQ_INT(ql_double_precision(2.5e-7), 2);
    char buf[40];
    CHECK(ql_format_double(0.1 + 0.2, buf, sizeof buf) == 19 &&
          strcmp(buf, "0.30000000000000004") == 0);
    CHECK(ql_format_double(2.5e-7, buf, sizeof buf) == 7 && strcmp(buf, "2.5e-07") == 0);
}

int main(void)
{
    splitmix64_stream();
    grow_array();
    string_set();
    shortest_precision();
    return qlt_done();
}
