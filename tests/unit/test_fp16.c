/* fp16 and bf16 conversions: every bit pattern round-trips, rounding is to
 * nearest even, and the edge cases (subnormals, overflow, NaN) behave as in ggml. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/fp16.h"
#include "qltest.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void all_fp16_patterns_round_trip(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ql_fp16_to_fp32((uint16_t)h);
        bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0;
        if (nan) {
            CHECK(isnan(f));
            continue; /* NaN payloads are not kept: ggml writes the quiet NaN 0x7e00 */
        }
        if (ql_fp32_to_fp16(f) != h && bad++ < 5)
            CHECK_MSG(false, "fp16 0x%04x -> %g -> 0x%04x", h, (double)f, ql_fp32_to_fp16(f));
    }
    CHECK_EQ_INT(bad, 0);
}

static void all_bf16_patterns_round_trip(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ql_bf16_to_fp32((uint16_t)h);
        if (isnan(f))
            continue;
        if (ql_fp32_to_bf16(f) != h && bad++ < 5)
            CHECK_MSG(false, "bf16 0x%04x -> %g -> 0x%04x", h, (double)f, ql_fp32_to_bf16(f));
    }
    CHECK_EQ_INT(bad, 0);
}

/* Every float between two adjacent halves rounds to the nearer one, ties to even:
 * checked against a double-precision reference on a dense sweep of floats. */
static uint16_t fp16_reference(float f)
{
    if (isnan(f))
        return 0x7e00;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);

    uint16_t best = 0;
    double best_err = (double)INFINITY;
    /* Binary search on the monotone positive halves 0..0x7c00. */
    uint32_t lo = 0, hi = 0x7c00;
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if ((double)ql_fp16_to_fp32((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    for (uint32_t c = lo; c <= hi; c++) {
        double v = (double)ql_fp16_to_fp32((uint16_t)c);
        double e = fabs(v - a);
        if (c == 0x7c00) /* infinity wins only past the overflow threshold 65520 */
            e = a >= 65520.0 ? 0.0 : (double)INFINITY;
        if (e < best_err || (e == best_err && (c & 1) == 0)) {
            best = (uint16_t)c;
            best_err = e;
        }
    }
    return sign | best;
}

static void fp16_rounding_matches_reference(void)
{
    int bad = 0;
    /* Stride through all positive floats from 2^-26 to 2^17. */
    for (uint32_t u = 0x32800000u; u < 0x48000000u; u += 997) {
        float f = from_bits(u);
        uint16_t got = ql_fp32_to_fp16(f), want = fp16_reference(f);
        if (got != want && bad++ < 5)
            CHECK_MSG(false, "%a: got 0x%04x want 0x%04x", (double)f, got, want);
        if (ql_fp32_to_fp16(-f) != (uint16_t)(want | 0x8000) && bad++ < 5)
            CHECK_MSG(false, "negative %a", (double)f);
    }
    CHECK_EQ_INT(bad, 0);
}

static void fp16_edges(void)
{
    CHECK_EQ_INT(ql_fp32_to_fp16(65504.0f), 0x7bff);
    CHECK_EQ_INT(ql_fp32_to_fp16(65519.996f), 0x7bff);
    CHECK_EQ_INT(ql_fp32_to_fp16(65520.0f), 0x7c00);
    CHECK_EQ_INT(ql_fp32_to_fp16(1e10f), 0x7c00);
    CHECK_EQ_INT(ql_fp32_to_fp16(-INFINITY), 0xfc00);
    CHECK_EQ_INT(ql_fp32_to_fp16(NAN), 0x7e00);
    CHECK_EQ_INT(ql_fp32_to_fp16(0x1p-24f), 0x0001); /* smallest subnormal */
    CHECK_EQ_INT(ql_fp32_to_fp16(0x1p-25f), 0x0000); /* tie between 0 and 2^-24: even */
    CHECK_EQ_INT(ql_fp32_to_fp16(0x1.8p-25f), 0x0001);
    CHECK_EQ_INT(ql_fp32_to_fp16(0x3p-25f), 0x0002); /* 1.5 units: tie to even 2 */
    CHECK_EQ_INT(ql_fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00); /* tie, even mantissa stays */
    CHECK_EQ_INT(ql_fp32_to_fp16(1.0f + 0x3p-11f), 0x3c02); /* tie, odd mantissa rounds up */
    CHECK_EQ_INT(ql_fp32_to_fp16(-0.0f), 0x8000);
    CHECK(bits(ql_fp16_to_fp32(0x8000)) == 0x80000000u);
}

static void bf16_edges(void)
{
    CHECK_EQ_INT(ql_fp32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(ql_fp32_to_bf16(from_bits(0x3f808000u)), 0x3f80); /* tie to even */
    CHECK_EQ_INT(ql_fp32_to_bf16(from_bits(0x3f818000u)), 0x3f82);
    CHECK_EQ_INT(ql_fp32_to_bf16(from_bits(0x3f808001u)), 0x3f81);
    CHECK_EQ_INT(ql_fp32_to_bf16(from_bits(0x7fc00001u)), 0x7fc0);
    CHECK_EQ_INT(ql_fp32_to_bf16(from_bits(0x7f800001u)), 0x7fc0); /* signalling -> quiet */
}

int main(void)
{
    all_fp16_patterns_round_trip();
    all_bf16_patterns_round_trip();
    fp16_rounding_matches_reference();
    fp16_edges();
    bf16_edges();
    return qlt_done();
}
