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

uint16_t ql_fp32_to_fp16(float f);
float ql_fp16_to_fp32(uint16_t h);
uint16_t ql_fp32_to_bf16(float f);
float ql_bf16_to_fp32(uint16_t h);

#endif
