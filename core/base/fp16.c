#include "base/fp16.h"

#include <string.h>

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t ql_fp32_to_fp16(float f)
{
    uint32_t x = bits_of(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;

    if (a > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* >= 65520: rounds to infinity (65504 is odd, ties go up) */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal half: |f| >= 2^-14 */
        uint32_t exp = (a >> 23) - 127 + 15;
        uint32_t mant = a & 0x7fffffu;
        uint32_t h = (exp << 10) | (mant >> 13);
        uint32_t rem = mant & 0x1fffu;
        /* A carry out of the mantissa moves into the exponent, which is the right result. */
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }
    if (a < 0x33000000u) /* below 2^-25: rounds to zero */
        return (uint16_t)sign;
    /* Subnormal half: count units of 2^-24. */
    int e = (int)(a >> 23);
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    int shift = 126 - e; /* 14 .. 24 */
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

/* The widening by bits, which fills the table. */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf / NaN: keep the payload */
        return float_of(sign | 0x7f800000u | (mant << 13));
    if (exp != 0)
        return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0)
        return float_of(sign);
    /* Subnormal: normalise the mantissa. */
    int e = -1;
    do {
        mant <<= 1;
        e++;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return float_of(sign | ((uint32_t)(112 - e) << 23) | (mant << 13));
}

uint16_t ql_fp32_to_bf16(float f)
{
    uint32_t x = bits_of(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 64u); /* NaN: force the quiet bit */
    return (uint16_t)((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

float ql_bf16_to_fp32(uint16_t h)
{
    return float_of((uint32_t)h << 16);
}

float ql_fp16_table[1 << 16];

/* Filled before main (a constructor, so that the inline lookup needs no once-check):
 * every format's block scales and every F16 weight are decoded through it. */
__attribute__((constructor)) static void fill_fp16_table(void)
{
    for (uint32_t h = 0; h < (1u << 16); h++)
        ql_fp16_table[h] = half_to_float((uint16_t)h);
}
