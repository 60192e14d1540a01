/* qlab: activation rounding at the input of a product ("fake quant").
 *
 * Each product y = W x of a quantized configuration may round its input x the way an
 * integer kernel would see it: quantize with the exact rounding of a ggml format, then
 * dequantize, and multiply in f32. The formats are the ones of core/formats/quant_legacy.h,
 * core/formats/quant_k.h and core/base/fp16.h, called through the type-traits table; nothing here
 * re-implements a ggml format.
 *
 * Roundings (ql_actq), per row of n_in values, blocks consecutive along the row:
 *   f32   unchanged.
 *   f16   each value to the nearest half, ties to even (ggml_cpu_fp32_to_fp16).
 *   bf16  each value to the nearest bfloat16, ties to even (ggml_cpu_fp32_to_bf16).
 *   q8_0  32-value blocks: d = fp16(max|x| / 127), q = roundf(x / d) (ties away from 0),
 *         value D * q with D = the fp16 d widened (quantize_row_q8_0_ref).
 *   q8_1  32-value blocks with the same d and q as q8_0 (quantize_row_q8_1_ref), hence the
 *         same values. ggml's block also carries s = fp16(d * sum q) (d before its fp16
 *         rounding), which the Q4_1/Q5_1 dot products use for the weight's min term:
 *           y = sum_b [ Dw_b Dx_b sum_j qw_j qx_j + m_b s_b ],
 *         where the rounded values give m_b Dx_b sum_j qx_j instead. For those weights the
 *         transform adds the difference after the product (ql_act_post):
 *           y += sum_b m_b (s_b - Dx_b sum_j qx_j),
 *         with the block mins m_b read from the weight's bytes (ql_act_ctx.mins). On
 *         llama-quantize's Q4_1 stories260K file it brings qlab's PPL from 0.040% to
 *         0.016% of llama-perplexity's (tests/e2e/test_eval_native.sh).
 *   q8_K  256-value blocks, f32 scale d = 1 / (-127 / max) with max the value of largest
 *         magnitude (so it maps to -127), q = nearest_int(x * (-127 / max)) clamped to
 *         127 (quantize_row_q8_K_ref); value d * q. The dot products of the K- and IQ
 *         formats with q8_K are exact factorizations of sum_j w_j (d q_j) (the q8_K
 *         block sums they use for mins and offsets are exact integer sums), so no term
 *         like q8_1's is missing. What remains is the f32 arithmetic: the fake-quant
 *         product rounds n_in products and sums them in BLAS's order, ggml sums
 *         integers and rounds once per block and lane, and the two results differ in
 *         the last bits (about 2.5e-7 relative on tiny256). Small as it is, that
 *         difference is what moves a rounded level of the next product's input when
 *         its value lies near a rounding boundary, and such moves add up: on tiny256
 *         (100 chunks of 128, Q6_K, native, f16 K/V) the summation order alone (one
 *         OpenBLAS kernel or another) moves the PPL by up to 3.4e-4. For Q6_K weights
 *         the product therefore runs through qgemm.h's integer kernel, which computes
 *         ggml-cpu's AVX2 ggml_vec_dot_q6_K_q8_K bit for bit (ql_act_product; the
 *         weight's bytes are needed, and a product with kept outlier channels keeps
 *         the fake-quant path). On tiny256 that moves the PPL by 1.5e-4, within the
 *         spread of the summation orders: the other products and the rest of the pass
 *         (norms, attention, SwiGLU) still differ from ggml's in the last bits.
 *   q8x2  qlab's two-pass int8 (no ggml format). Per 32-value block:
 *           pass 1: the q8_0 block of x (d, q), D = fp32(fp16 d);
 *           residual e_j = x_j - D * q_j                       (f32);
 *           pass 2: r_j = roundf(e_j * (128 / D)) clamped to [-127, 127]  (0 when D == 0);
 *           value   x^_j = (D / 128) * (float)(128 q_j + r_j)  (f32).
 *         k = 128 q + r is an exact integer of at most 15 bits (|k| <= 16383) and D / 128
 *         is exact, so x^ is the f32 rounding of the value (D / 128) k that an integer
 *         kernel computing 128 * dot(w, q) + dot(w, r) in int32 and scaling by D / 128
 *         works with. |x - x^| <= D/256 plus one f32 rounding, about 128 times below
 *         q8_0's D/2.
 *
 * llama.cpp's x86 CPU backend quantizes q8_0/q8_1 activations with SIMD code that
 * differs from the _ref functions in two corner cases: it multiplies by 127/max instead
 * of 1/(max/127) (at most one ulp apart) and rounds ties to even instead of away from
 * zero. A level differs only when x/d lies within an ulp of a half-integer (about one
 * value in 10^5 for real activations, one level step when it does); qlab follows the
 * _ref functions, which define the formats and match the golden vectors.
 *
 * `native`: the vec_dot_type of the weight type in ggml-cpu's
 * type traits (b4747), the type llama.cpp's CPU matmul converts activations to:
 *   Q4_0 Q5_0 Q8_0 IQ4_NL (and Q8_0_XC, stored as Q8_0)        -> q8_0
 *   Q4_1 Q5_1                                                   -> q8_1
 *   Q2_K..Q6_K, IQ1_S IQ1_M IQ2_* IQ3_* IQ4_XS, TQ1_0 TQ2_0     -> q8_K
 *   F16 -> f16 and BF16 -> bf16: the CPU matmul converts the f32 activations to the
 *         weight's vec_dot_type before the dot products (llamafile's sgemm on x86 accepts
 *         F16/BF16 weights only with F16/BF16 activations, and ggml_vec_dot_f16/bf16 take
 *         both operands in that type), so the activations are rounded;
 *   F32 -> f32; INT8_ROW (no llama.cpp kernel) -> f32.
 *
 * Rows that do not split into the blocks of the requested rounding (a 172-wide ffn_down
 * input into q8_0) cannot be quantized that way, and llama.cpp could not run such a
 * product with quantized activations: llama-quantize leaves the weight in the type its
 * fallback chain lands on (F16 for 32-block types, so the CPU rounds the activations to
 * f16). qlab does the same for the activations: q8_K falls back to q8_0 when the row
 * splits into 32-value blocks (the vec_dot_type of Q5_0/Q8_0/IQ4_NL, where most K-quant
 * fallbacks land), every block rounding falls back to f16 otherwise. The choice is
 * recorded per product (ql_act_choice.note) so the runner can store it. */
#ifndef QL_ACTQUANT_H
#define QL_ACTQUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "experiment/config.h"
#include "experiment/outliers.h"
#include "formats/round.h"
#include "model/model.h"
#include "model/quant.h"

/* The rounding a mode asks for with a weight type (native resolved as above). */
ql_actq ql_actq_for_mode(ql_act_mode mode, int32_t weight_type);

#define QL_ACT_NOTE_MAX 160

/* The rounding of one product: what the mode asks for and what is applied. */
typedef struct {
    ql_actq requested;
    ql_actq used;               /* differs from requested only when fallback is set */
    bool fallback;              /* the row did not split into the requested blocks */
    bool needs_sums;            /* q8_1 with Q4_1/Q5_1 weights: the block-sum term applies */
    bool block_sums;            /* ... and is applied (ql_act_plan_build had the weight bytes) */
    bool has_kernel;            /* q8_K with Q6_K weights: an integer kernel computes the
                                   product as ggml does (qgemm.h) */
    bool integer;               /* ... and computes it (weight bytes, no kept channels) */
    char note[QL_ACT_NOTE_MAX]; /* why used != requested, e.g. "q8_0 activations need
                                   rows of 32 values; 172-wide input rounded to f16" */
} ql_act_choice;

/* Decides the rounding of a product whose weight has type weight_type (the type
 * actually used, after the type policy's fallbacks) and rows of n_in values. */
void ql_act_choose(ql_act_mode mode, int32_t weight_type, int64_t n_in, ql_act_choice *out);

/* ------------------------------------------------------------------------- */
/* The transform of one product                                               */
/* ------------------------------------------------------------------------- */

/* Everything the activation transform of one product needs. keep lists channels that
 * bypass the rounding (the outlier split, core/experiment/outliers.h): they are zeroed before the
 * rounding, so they take no part in any block's scale, and then written back exactly.
 * The context borrows keep (ascending, distinct, < n_in); it must outlive its use. */
typedef struct {
    ql_actq q;
    int64_t n_in;
    const int64_t *keep;
    int64_t n_keep;
    /* q8_1 with Q4_1/Q5_1 weights: the block mins (n_out, n_in/32) of the weight for the
     * block-sum term (ql_act_post), borrowed; NULL otherwise. */
    const float *mins;
    int64_t n_out;
    /* q8_K with Q6_K weights: the weight's bytes (n_out rows of Q6_K blocks) for the
     * integer product (ql_act_product), borrowed; NULL otherwise. */
    const void *q6_K;
} ql_act_ctx;

/* Fills c; QL_EINVAL when the rounding does not fit rows of n_in values or keep is not
 * ascending within [0, n_in). */
ql_status ql_act_ctx_init(ql_act_ctx *c, ql_actq q, int64_t n_in, const int64_t *keep,
                          int64_t n_keep, ql_error *err);

/* The weight block mins m_b (n_out, n_in/32) of Q4_1 or Q5_1 bytes q (n_out rows), for
 * ctx->mins. QL_EINVAL for another type or rows that do not split into blocks. */
ql_status ql_act_block_mins(int32_t type, const void *q, int64_t n_out, int64_t n_in, float *mins,
                            ql_error *err);

/* True when the transform leaves every value unchanged (f32 without kept channels): the
 * caller can then skip it (a NULL ql_linear.act costs nothing). */
bool ql_act_ctx_is_identity(const ql_act_ctx *c);

/* xq (n_rows, n_in) = transform of x (n_rows, n_in); x and xq must not overlap. Rows are
 * independent, so the result does not depend on how they are split. */
void ql_act_rows(const ql_act_ctx *c, const float *x, float *xq, int64_t n_rows);

/* The ql_act_fn (model.h) of a context: lin->act = ql_act_apply, lin->act_ctx = &ctx.
 * Checks that the linear's width matches the context's. */
void ql_act_apply(void *ctx, const ql_linear *lin, const float *x, float *xq, int64_t n_tok);

/* The ql_act_post_fn (model.h) of a q8_1 context with mins: lin->act_post = ql_act_post.
 * y (n_tok, n_out) += the block-sum term of x (see q8_1 above). Allocates n_tok * n_in/32
 * floats of scratch per call (aborts when that fails: a product cannot return an
 * error). */
void ql_act_post(void *ctx, const ql_linear *lin, const float *x, float *y, int64_t n_tok);

/* The ql_product_fn (model.h) of a q8_K context with Q6_K bytes: lin->product =
 * ql_act_product. y (n_tok, n_out) = the product of the q8_K blocks of x and the Q6_K
 * rows, as ggml-cpu's AVX2 kernel computes it (qgemm.h). Allocates n_tok * n_in/256
 * q8_K blocks of scratch per call (aborts when that fails). */
void ql_act_product(void *ctx, const ql_linear *lin, const float *x, float *y, int64_t n_tok);

/* ------------------------------------------------------------------------- */
/* A whole weight set                                                          */
/* ------------------------------------------------------------------------- */

/* The activation transforms of every product site of a weight set: one choice and one
 * context per site. Usage in a harness (a quantized configuration):
 *   int32_t *types = ...;          // per site, the weight type actually used
 *   ql_act_site_types(ws, plan, types);   // or from a quantization plan
 *   ql_act_plan *ap;
 *   ql_act_plan_build(&ap, ws, cfg->act_mode, types, site_q, outliers_or_NULL, &err);
 *   ql_act_plan_install(ap, ws);   // sets lin->act, act_ctx, act_post, product
 *   ... ql_forward_run(fw, ws, ...) ...
 *   ql_weights_free(ws); ql_act_plan_free(ap);   // the plan outlives the set's use
 * With an outlier set, site s keeps outliers->site[s].cols out of the rounding (the set
 * must outlive the plan). site_q (may be NULL, entries may be NULL) gives each site's
 * quantized weight bytes in its type (with an outlier split: the bytes of the matrix
 * with those columns zeroed); the plan reads the block mins of Q4_1/Q5_1 weights from
 * them for the q8_1 block-sum term, and Q6_K products with q8_K activations run
 * through the integer kernel on them (a Q6_K site without site_q bytes uses its
 * source's bytes when the source has that type and no exact columns). Without them
 * that term is left out, or the product stays the fake-quant one, and the choice says
 * so (ql_act_choice.block_sums, integer false). */
typedef struct ql_act_plan ql_act_plan;

/* Fills types (w->n_lin entries) with the type each site's weight has in a quantization
 * plan (quant.h), found by tensor name (a tied head reads token_embd.weight); a site
 * whose tensor the plan does not list keeps its source type (lin->src_type). */
void ql_act_site_types(const ql_weights *w, const ql_quant_plan *plan, int32_t *types);

ql_status ql_act_plan_build(ql_act_plan **out, const ql_weights *w, ql_act_mode mode,
                            const int32_t *types, const void *const *site_q,
                            const ql_outlier_set *outliers, ql_error *err);
void ql_act_plan_free(ql_act_plan *p);

/* Sets every site's act/act_ctx/act_post/product (NULL for sites left unchanged, which
 * cost nothing). */
void ql_act_plan_install(const ql_act_plan *p, ql_weights *w);

/* The choice of one site, and the number of sites whose rounding fell back. */
const ql_act_choice *ql_act_plan_choice(const ql_act_plan *p, int site);
int ql_act_plan_n_fallback(const ql_act_plan *p);

#endif
