/* qlab: IEEE half (fp16) and bfloat16 conversions.
 *
 * fp32 -> fp16 rounds to nearest, ties to even (what F16C hardware and ggml's
 * software path do); values beyond the half range become infinity and NaN
 * becomes the quiet NaN 0x7e00 with the sign kept, as ggml writes it.
 * fp32 -> bf16 rounds to nearest even; NaN keeps its upper bits with the quiet
 * bit forced, as ggml does. The widening conversions are exact. */
#ifndef QL_FP16_H
#define QL_FP16_H

#include <stdint.h>
#include <string.h>

uint16_t ql_fp32_to_fp16(float f);
/* Every half as f32 (exact), filled before main. */
extern float ql_fp16_table[1 << 16];

static inline float ql_fp16_to_fp32(uint16_t h)
{
    return ql_fp16_table[h];
}

uint16_t ql_fp32_to_bf16(float f);
float ql_bf16_to_fp32(uint16_t h);

/* f rounded to the nearest half and widened back, bit for bit
 * ql_fp16_to_fp32(ql_fp32_to_fp16(f)), with the common cases inline: normal halves keep
 * 10 mantissa bits (ties to even; a carry into the exponent is the right result),
 * subnormal halves are multiples of 2^-24 (rounded to even by the 1.5 * 2^23 trick,
 * exact under -ffp-contract=off). Overflow, infinities and NaN take the conversions. */
static inline float ql_fp16_round(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    const uint32_t a = b & 0x7fffffffu;
    if (a >= 0x38800000u && a < 0x477ff000u) { /* 2^-14 <= |f| < 65520 */
        b += 0x0fffu + ((b >> 13) & 1u);
        b &= ~0x1fffu;
        memcpy(&f, &b, sizeof f);
        return f;
    }
    if (a < 0x38800000u) {
        float r = (f * 16777216.0f + 12582912.0f) - 12582912.0f; /* units of 2^-24 */
        r *= 1.0f / 16777216.0f;
        uint32_t br;
        memcpy(&br, &r, sizeof br);
        br = (br & 0x7fffffffu) | (b & 0x80000000u); /* keep the sign of a zero */
        memcpy(&r, &br, sizeof r);
        return r;
    }
    return ql_fp16_to_fp32(ql_fp32_to_fp16(f));
}

#endif
