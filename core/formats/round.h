/* qlab: activation roundings ("fake quant"): a vector of f32 values quantized with the
 * exact rounding of a ggml format and decoded again, and the rounding llama.cpp's CPU
 * backend applies to the input of a product with weights of each type. The arithmetic
 * of each rounding: experiment/actquant.h, which applies them to a config's products;
 * the K/V cache (model/kvcache.h) rounds through them too. */
#ifndef QL_ROUND_H
#define QL_ROUND_H

#include <stdbool.h>
#include <stdint.h>

#include "formats/actq_ids.h"

/* "f32", "f16", "bf16", "q8_0", "q8_1", "q8_K", "q8x2". */
const char *ql_actq_name(ql_actq q);

/* Values per block: 1 for f32/f16/bf16, 32 for q8_0/q8_1/q8x2, 256 for q8_K. */
int64_t ql_actq_block(ql_actq q);

/* Whether rows of n values split into the rounding's blocks (n > 0). */
bool ql_actq_fits(ql_actq q, int64_t n);

/* The rounding llama.cpp's CPU backend applies to the activations of a product with
 * weights of this type (its vec_dot_type, the traits' native_act column); QL_ACTQ_F32
 * for unknown ids and types without a product. */
ql_actq ql_actq_native(int32_t weight_type);

/* Rounds n values (ql_actq_fits(q, n) must hold) from x into xq; x == xq (in place) is
 * allowed, other overlaps are not. No allocation; thread-safe. */
void ql_actq_round(ql_actq q, const float *x, float *xq, int64_t n);

/* Rounds n values (a multiple of the type's block size) through a block format: each
 * block quantized with the type's reference quantizer (no importance weights) and
 * decoded. For block types of at most 256 values and 292 bytes that need no tables
 * (Q4_0 .. Q8_K; not the IQ types). x == xq allowed. No allocation; thread-safe. */
void ql_round_through_type(int32_t type, const float *x, float *xq, int64_t n);

#endif
