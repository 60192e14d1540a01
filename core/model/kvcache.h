/* qlab: the K/V cache type (kv_type; llama.cpp's -ctk/-ctv).
 *
 * The forward pass (forward.h) rounds four things in attention through hooks; this
 * module fills them the way llama.cpp's CPU backend (b4747) treats each cache type,
 * for K and V of the same type as the kv_type axis sets them:
 *
 *   f32   nothing is rounded.
 *   f16   llama.cpp's default, without flash attention: K and V stored as f16; the
 *         K·Q product converts the query to F16's vec_dot_type (f16), the V·P product
 *         converts the softmax probabilities to f16.
 *   q8_0, q4_0  llama.cpp refuses a quantized V cache without flash attention
 *         ("V cache quantization requires flash_attn", llama_init_from_model), so a
 *         quantized kv_type is what `-ctk T -ctv T -fa` computes: K and V rounded to
 *         the type in 32-value blocks along each head's row; the flash-attention kernel
 *         converts each query row to the K type's vec_dot_type (q8_0 for both, the
 *         activation rounding of actquant.h), takes K·Q as integer block products,
 *         decodes V to f32 and accumulates the softmax-weighted sum in f32 (online
 *         softmax), so the probabilities are not rounded.
 * Differences left against llama.cpp for the quantized types: the flash kernel's online
 * softmax and its f32 summation order, and the query scale applied after the K·Q dot
 * product rather than inside it: f32 rounding, not rounding of the cached values.
 *
 * llama.cpp's per-head views of a quantized cache need whole blocks per head: a head
 * size that is not a multiple of 32 (stories260K has 8) cannot hold a q8_0/q4_0
 * cache there, and ql_kv_rounding refuses it.
 *
 * The hooks are pure functions of their arguments (no state, ctx unused): reentrant,
 * so the forward pass may call them from several threads. */
#ifndef QL_KVCACHE_H
#define QL_KVCACHE_H

#include "base/error.h"
#include "model/forward.h"

/* Fills *r for a cache of ggml type `type` (QL_TYPE_F32, F16, Q8_0 or Q4_0) and heads of
 * head_dim values. Errors: another type (QL_EUNSUPPORTED), a quantized type with
 * head_dim not a multiple of 32 (QL_EUNSUPPORTED). */
ql_status ql_kv_rounding(int32_t type, int head_dim, ql_attn_rounding *r, ql_error *err);

/* Installs the rounding of a K/V cache of ggml type `type` on fw: QL_TYPE_F32 (no
 * rounding; the default), QL_TYPE_F16 (K, V, query and probabilities rounded to f16),
 * QL_TYPE_Q8_0 or QL_TYPE_Q4_0 (as with flash attention; head size a multiple of 32).
 * Errors as ql_kv_rounding's. */
ql_status ql_forward_set_kv_type(ql_forward *fw, int32_t type, ql_error *err);

#endif
