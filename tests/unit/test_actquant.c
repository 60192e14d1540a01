/* Activation roundings: hand-checked q8_1, q8_K, f16, bf16 and q8x2 blocks, q8x2's
 * error against q8_0 on Gaussian data, the native table, the fallback for rows that do
 * not split into blocks, the transform with kept (outlier) channels, the q8_1
 * block-sum term and the integer product of Q6_K weights.
 * The q8_0/q8_1/f16/bf16 roundings are checked against ggml's golden vectors in
 * tests/golden/test_act_golden.c. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "base/util.h"
#include "experiment/actquant.h"
#include "formats/qgemm.h"
#include "formats/quant_common.h"
#include "formats/quant_k.h"
#include "formats/quant_legacy.h"
#include "formats/types.h"
#include "model/quant.h"
#include "qltest.h"

/* q8x2 must be at least this many times more accurate (RMS) than q8_0 on Gaussian
 * data. The design ratio is 128 (a residual step of D/128); 50 leaves room for the
 * f32 rounding of the residual and of the final product. */
#define Q8X2_MIN_GAIN 50.0

static uint64_t rng_state;
static float gauss(void)
{
    return (float)ql_rng_gauss(&rng_state);
}

/* d = 1 exactly (max |x| = 127), so q = roundf(x): ties go away from zero (0.5 -> 1,
 * 2.5 -> 3, -2.5 -> -3), 0.49999997 stays 0; s = fp16(d * sum q) = -94. The values are
 * those of q8_0. */
static void q8_1_hand_checked(void)
{
    float x[32] = {127, -127, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 0.49999997f, 3.7f, -100.2f};
    const float want[10] = {127, -127, 1, -1, 2, 3, -3, 0, 4, -100};
    ql_block_q8_1 b;
    ql_quantize_row_q8_1_ref(x, &b, 32);
    CHECK(ql_fp16_to_fp32(b.d) == 1.0f);
    CHECK(ql_fp16_to_fp32(b.s) == -94.0f);
    float y[32], y0[32];
    ql_actq_round(QL_ACTQ_Q8_1, x, y, 32);
    ql_actq_round(QL_ACTQ_Q8_0, x, y0, 32);
    for (int j = 0; j < 10; j++)
        CHECK_MSG(y[j] == want[j], "x[%d] = %.9g: got %.9g, want %.9g", j, (double)x[j],
                  (double)y[j], (double)want[j]);
    for (int j = 10; j < 32; j++)
        CHECK(y[j] == 0.0f);
    CHECK(memcmp(y, y0, sizeof y) == 0);
}

/* ggml's sign convention: the value of largest magnitude maps to -127, d = -max/127 in
 * f32. With max = +254: d = -2, q = nearest_int(-x/2) with ties to even. */
static void q8_K_hand_checked(void)
{
    float x[256] = {254, 3, 1, 5, -3, -254, 100.9f};
    ql_block_q8_K b;
    ql_quantize_row_q8_K_ref(x, &b, 256);
    CHECK(b.d == -2.0f);
    const int want_q[7] = {-127, -2, 0, -2, 2, 127, -50};
    for (int j = 0; j < 7; j++)
        CHECK_MSG(b.qs[j] == want_q[j], "q[%d] = %d, want %d", j, b.qs[j], want_q[j]);
    CHECK_EQ_INT(b.bsums[0], -127 - 2 + 0 - 2 + 2 + 127 - 50);
    float y[256];
    ql_actq_round(QL_ACTQ_Q8_K, x, y, 256);
    const float want[7] = {254, 4, 0, 4, -4, -254, 100};
    for (int j = 0; j < 7; j++)
        CHECK_MSG(y[j] == want[j], "x[%d] = %.9g: got %.9g, want %.9g", j, (double)x[j],
                  (double)y[j], (double)want[j]);

    /* Largest magnitude negative: d = +2 and it maps to -127. */
    x[0] = -254;
    ql_quantize_row_q8_K_ref(x, &b, 256);
    CHECK(b.d == 2.0f);
    CHECK_EQ_INT(b.qs[0], -127);
    ql_actq_round(QL_ACTQ_Q8_K, x, y, 256);
    CHECK(y[0] == -254.0f && y[1] == 4.0f && y[4] == -4.0f);
}

static void f16_bf16_hand_checked(void)
{
    /* f16: spacing 2^-10 at 1; ties to even. bf16: spacing 2^-7 at 1. */
    float x[4] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65519.0f, -0.1f};
    float y[4];
    ql_actq_round(QL_ACTQ_F16, x, y, 4);
    CHECK(y[0] == 1.0f);
    CHECK(y[1] == 1.0f + 0x1p-9f);
    CHECK(y[2] == 65504.0f);
    CHECK(y[3] == -0.0999755859375f);
    float b[3] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 3.0f};
    ql_actq_round(QL_ACTQ_BF16, b, b, 3); /* in place */
    CHECK(b[0] == 1.0f);
    CHECK(b[1] == 1.0f + 0x1p-6f);
    CHECK(b[2] == 3.0f);
}

/* D = 1 (max 127): x = 0.3 has q = 0, residual 0.3, r = roundf(38.4) = 38, value 38/128;
 * 10.25 and -0.5 are exact in two passes (q = -1 by roundf, residual 0.5, r = 64). */
static void q8x2_hand_checked(void)
{
    float x[32] = {127, 0.3f, 10.25f, -0.5f, 0.001f, -126.99f};
    float y[32];
    ql_actq_round(QL_ACTQ_Q8X2, x, y, 32);
    CHECK(y[0] == 127.0f);
    CHECK(y[1] == 0.296875f);
    CHECK(y[2] == 10.25f);
    CHECK(y[3] == -0.5f);
    CHECK(y[4] == 0.0f);
    CHECK(y[5] == -127.0f + 1.0f / 128.0f);
    for (int j = 6; j < 32; j++)
        CHECK(y[j] == 0.0f);
}

/* On Gaussian rows: q8x2 >= Q8X2_MIN_GAIN times more accurate than q8_0 (RMS), every
 * value within D/256 (+ f32 rounding) of x, and every value (D/128) * k with k an integer
 * of at most 15 bits (rounded once to f32), as an int8 two-pass kernel sees it. Also q8_1 == q8_0.
 */
static void q8x2_error_gain(void)
{
    enum { N = 64 * 4096 };
    float *x = malloc(N * sizeof *x), *y0 = malloc(N * sizeof *y0), *y2 = malloc(N * sizeof *y2);
    float *y1 = malloc(N * sizeof *y1);
    rng_state = 7;
    for (int i = 0; i < N; i++)
        x[i] = gauss();
    ql_actq_round(QL_ACTQ_Q8_0, x, y0, N);
    ql_actq_round(QL_ACTQ_Q8_1, x, y1, N);
    ql_actq_round(QL_ACTQ_Q8X2, x, y2, N);
    CHECK(memcmp(y0, y1, N * sizeof *y0) == 0);
    double e0 = 0, e2 = 0;
    int bad_bound = 0, bad_int = 0;
    for (int b = 0; b < N / 32; b++) {
        ql_block_q8_0 blk;
        ql_quantize_row_q8_0_ref(x + 32 * b, &blk, 32);
        const double d = (double)ql_fp16_to_fp32(blk.d);
        for (int j = 32 * b; j < 32 * b + 32; j++) {
            const double d0 = (double)x[j] - (double)y0[j], d2 = (double)x[j] - (double)y2[j];
            e0 += d0 * d0;
            e2 += d2 * d2;
            if (fabs(d2) > d / 256 * (1 + 1e-5) + fabs((double)x[j]) * 0x1p-23)
                bad_bound++;
            /* y2 is the f32 product (D/128) * k of an integer k */
            const double k = nearbyint((double)y2[j] * 128.0 / d);
            if ((float)(d / 128.0) * (float)k != y2[j] || fabs(k) > 16383)
                bad_int++;
        }
    }
    const double gain = sqrt(e0 / e2);
    printf("q8_0 rms %.3g, q8x2 rms %.3g: q8x2 is %.1f times more accurate\n", sqrt(e0 / N),
           sqrt(e2 / N), gain);
    CHECK_MSG(gain >= Q8X2_MIN_GAIN, "q8x2 gain %.1f < %.1f", gain, Q8X2_MIN_GAIN);
    CHECK_EQ_INT(bad_bound, 0);
    CHECK_EQ_INT(bad_int, 0);
    free(x);
    free(y0);
    free(y1);
    free(y2);
}

static void native_table(void)
{
    const struct {
        ql_type t;
        ql_actq q;
    } want[] = {
        {QL_TYPE_F32, QL_ACTQ_F32},      {QL_TYPE_F16, QL_ACTQ_F16},
        {QL_TYPE_BF16, QL_ACTQ_BF16},    {QL_TYPE_Q4_0, QL_ACTQ_Q8_0},
        {QL_TYPE_Q5_0, QL_ACTQ_Q8_0},    {QL_TYPE_Q8_0, QL_ACTQ_Q8_0},
        {QL_TYPE_IQ4_NL, QL_ACTQ_Q8_0},  {QL_TYPE_Q8_0_XC, QL_ACTQ_Q8_0},
        {QL_TYPE_Q4_1, QL_ACTQ_Q8_1},    {QL_TYPE_Q5_1, QL_ACTQ_Q8_1},
        {QL_TYPE_Q2_K, QL_ACTQ_Q8_K},    {QL_TYPE_Q3_K, QL_ACTQ_Q8_K},
        {QL_TYPE_Q4_K, QL_ACTQ_Q8_K},    {QL_TYPE_Q5_K, QL_ACTQ_Q8_K},
        {QL_TYPE_Q6_K, QL_ACTQ_Q8_K},    {QL_TYPE_IQ4_XS, QL_ACTQ_Q8_K},
        {QL_TYPE_IQ3_S, QL_ACTQ_Q8_K},   {QL_TYPE_IQ3_XXS, QL_ACTQ_Q8_K},
        {QL_TYPE_IQ2_S, QL_ACTQ_Q8_K},   {QL_TYPE_IQ2_XS, QL_ACTQ_Q8_K},
        {QL_TYPE_IQ2_XXS, QL_ACTQ_Q8_K}, {QL_TYPE_IQ1_S, QL_ACTQ_Q8_K},
        {QL_TYPE_IQ1_M, QL_ACTQ_Q8_K},   {QL_TYPE_TQ1_0, QL_ACTQ_Q8_K},
        {QL_TYPE_TQ2_0, QL_ACTQ_Q8_K},   {QL_TYPE_INT8_ROW, QL_ACTQ_F32},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(ql_actq_native(want[i].t) == want[i].q, "%s: native %s, want %s",
                  ql_type_name(want[i].t), ql_actq_name(ql_actq_native(want[i].t)),
                  ql_actq_name(want[i].q));
    CHECK(ql_actq_native(12345) == QL_ACTQ_F32);
    CHECK(ql_actq_for_mode(QL_ACT_Q8X2, QL_TYPE_Q4_K) == QL_ACTQ_Q8X2);
    CHECK(ql_actq_for_mode(QL_ACT_F32, QL_TYPE_Q4_K) == QL_ACTQ_F32);
}

static void choose_and_fallback(void)
{
    ql_act_choice c;
    ql_act_choose(QL_ACT_NATIVE, QL_TYPE_Q4_0, 64, &c);
    CHECK(c.requested == QL_ACTQ_Q8_0 && c.used == QL_ACTQ_Q8_0 && !c.fallback && !c.note[0]);
    /* stories260K's ffn_down: 172-wide rows (its weight falls back to F16 in llama.cpp) */
    ql_act_choose(QL_ACT_Q8_0, QL_TYPE_F32, 172, &c);
    CHECK(c.requested == QL_ACTQ_Q8_0 && c.used == QL_ACTQ_F16 && c.fallback);
    CHECK_MSG(strcmp(c.note, "q8_0 activations need rows of a multiple of 32 values; 172-wide "
                             "input rounded to f16") == 0,
              "note '%s'", c.note);
    ql_act_choose(QL_ACT_NATIVE, QL_TYPE_F16, 172, &c);
    CHECK(c.requested == QL_ACTQ_F16 && c.used == QL_ACTQ_F16 && !c.fallback);
    ql_act_choose(QL_ACT_Q8_K, QL_TYPE_Q8_0, 64, &c);
    CHECK(c.requested == QL_ACTQ_Q8_K && c.used == QL_ACTQ_Q8_0 && c.fallback);
    ql_act_choose(QL_ACT_Q8_K, QL_TYPE_Q8_0, 172, &c);
    CHECK(c.used == QL_ACTQ_F16 && c.fallback);
    ql_act_choose(QL_ACT_Q8_K, QL_TYPE_Q8_0, 512, &c);
    CHECK(c.used == QL_ACTQ_Q8_K && !c.fallback);
    ql_act_choose(QL_ACT_Q8X2, QL_TYPE_Q8_0, 96, &c);
    CHECK(c.used == QL_ACTQ_Q8X2 && !c.fallback);
    ql_act_choose(QL_ACT_Q8_1, QL_TYPE_Q8_0, 100, &c);
    CHECK(c.used == QL_ACTQ_F16 && c.fallback);
    ql_act_choose(QL_ACT_F32, QL_TYPE_Q8_0, 7, &c);
    CHECK(c.used == QL_ACTQ_F32 && !c.fallback);
    CHECK(ql_actq_fits(QL_ACTQ_F16, 7) && !ql_actq_fits(QL_ACTQ_Q8_0, 0));
}

/* A massive channel dominates its q8_0 block: with the channel kept out, the block's
 * scale comes from the other values and their error shrinks; the kept channel itself
 * passes through exactly. */
static void kept_channels(void)
{
    enum { N = 64 };
    float x[2 * N], y[2 * N], y_plain[2 * N], ref[2 * N];
    rng_state = 11;
    for (int i = 0; i < 2 * N; i++)
        x[i] = 0.1f * gauss();
    x[5] = 40.0f;
    x[N + 5] = -35.0f;
    x[N + 40] = 12.0f;
    const int64_t keep[2] = {5, 40};
    ql_act_ctx c;
    ql_error err;
    CHECK_OK(ql_act_ctx_init(&c, QL_ACTQ_Q8_0, N, keep, 2, &err), &err);
    CHECK(!ql_act_ctx_is_identity(&c));
    ql_act_rows(&c, x, y, 2);
    ql_actq_round(QL_ACTQ_Q8_0, x, y_plain, 2 * N);
    /* reference: zero the kept channels, round, put them back */
    memcpy(ref, x, sizeof ref);
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 2; k++)
            ref[r * N + keep[k]] = 0.0f;
    ql_actq_round(QL_ACTQ_Q8_0, ref, ref, 2 * N);
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 2; k++)
            ref[r * N + keep[k]] = x[r * N + keep[k]];
    CHECK(memcmp(y, ref, sizeof y) == 0);
    CHECK(y[5] == 40.0f && y[N + 5] == -35.0f && y[N + 40] == 12.0f);
    double e_keep = 0, e_plain = 0;
    for (int i = 0; i < 32; i++)
        if (i != 5) {
            e_keep += fabs((double)x[i] - (double)y[i]);
            e_plain += fabs((double)x[i] - (double)y_plain[i]);
        }
    CHECK_MSG(e_keep * 20 < e_plain, "kept-out error %.3g vs plain %.3g", e_keep, e_plain);

    /* identity and errors */
    CHECK_OK(ql_act_ctx_init(&c, QL_ACTQ_F32, N, NULL, 0, &err), &err);
    CHECK(ql_act_ctx_is_identity(&c));
    ql_act_rows(&c, x, y, 2);
    CHECK(memcmp(x, y, sizeof y) == 0);
    const int64_t bad_order[2] = {40, 5}, bad_range[1] = {64};
    CHECK(ql_act_ctx_init(&c, QL_ACTQ_Q8_0, N, bad_order, 2, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "ascending") != NULL);
    CHECK(ql_act_ctx_init(&c, QL_ACTQ_Q8_0, N, bad_range, 1, &err) == QL_EINVAL);
    CHECK(ql_act_ctx_init(&c, QL_ACTQ_Q8_0, 172, NULL, 0, &err) == QL_EINVAL);
    CHECK_MSG(strcmp(err.msg, "q8_0 activations need rows of a multiple of 32 values, not 172") ==
                  0,
              "'%s'", err.msg);
    CHECK(ql_act_ctx_init(&c, QL_ACTQ_Q8_0, N, NULL, 3, &err) == QL_EINVAL);
}

/* The inline helpers against the functions they shortcut: every 61st bit pattern, and
 * for ql_fp16_round every half's midpoint to its neighbour and the floats on either
 * side of it. */
static void fast_helpers_exact(void)
{
    int64_t bad_round = 0, bad_f16 = 0;
    for (uint64_t p = 0; p < (UINT64_C(1) << 32); p += 61) {
        const uint32_t u = (uint32_t)p;
        float f;
        memcpy(&f, &u, sizeof f);
        const float a = roundf(f), b = ql_roundf(f);
        if (memcmp(&a, &b, sizeof a) != 0 && !(isnan(a) && isnan(b)))
            bad_round++;
        const float c = ql_fp16_to_fp32(ql_fp32_to_fp16(f)), d = ql_fp16_round(f);
        if (memcmp(&c, &d, sizeof c) != 0)
            bad_f16++;
    }
    for (uint32_t h = 0; h < 0x7c00u; h++)
        for (int sign = 0; sign < 2; sign++) {
            const uint16_t hs = (uint16_t)(h | (sign ? 0x8000u : 0));
            const double lo = (double)ql_fp16_to_fp32(hs),
                         hi = (double)ql_fp16_to_fp32((uint16_t)(hs + 1));
            const float mid = (float)(0.5 * (lo + hi)); /* exact: halves have 11 bits */
            uint32_t um;
            memcpy(&um, &mid, sizeof um);
            for (int k = -1; k <= 1; k++) {
                const uint32_t v = um + (uint32_t)k;
                float f;
                memcpy(&f, &v, sizeof f);
                const float c = ql_fp16_to_fp32(ql_fp32_to_fp16(f)), d = ql_fp16_round(f);
                if (memcmp(&c, &d, sizeof c) != 0)
                    bad_f16++;
            }
        }
    CHECK_EQ_INT(bad_round, 0);
    CHECK_EQ_INT(bad_f16, 0);
}

/* q8_1 with Q4_1 weights: the rounded product plus ql_act_post equals ggml's dot
 * product sum_b [Dw Dx sum qw qx + m s] (evaluated in double from the blocks), while the
 * rounded product alone misses the fp16 rounding of s. Inputs with a nonzero mean make
 * the block sums, and so the term, large. */
static void q8_1_block_sums(void)
{
    enum { N_IN = 128, N_OUT = 16, N_TOK = 5, NB = N_IN / 32 };
    ql_error err;
    float w[N_OUT * N_IN], we[N_OUT * N_IN], x[N_TOK * N_IN], xq[N_TOK * N_IN];
    rng_state = 21;
    for (int i = 0; i < N_OUT * N_IN; i++)
        w[i] = 0.05f * gauss();
    for (int i = 0; i < N_TOK * N_IN; i++)
        x[i] = 2.0f + gauss();
    ql_block_q4_1 wq[N_OUT * NB];
    CHECK_OK(ql_quant_tensor(QL_TYPE_Q4_1, w, N_OUT, N_IN, NULL, wq, sizeof wq, NULL, &err), &err);
    CHECK_OK(ql_dequant_tensor(QL_TYPE_Q4_1, wq, sizeof wq, N_OUT, N_IN, we, &err), &err);
    float mins[N_OUT * NB];
    CHECK_OK(ql_act_block_mins(QL_TYPE_Q4_1, wq, N_OUT, N_IN, mins, &err), &err);
    CHECK(mins[3] == ql_fp16_to_fp32(wq[3].m));
    CHECK(ql_act_block_mins(QL_TYPE_Q4_0, wq, N_OUT, N_IN, mins, &err) == QL_EINVAL);

    ql_act_ctx c;
    CHECK_OK(ql_act_ctx_init(&c, QL_ACTQ_Q8_1, N_IN, NULL, 0, &err), &err);
    c.mins = mins;
    c.n_out = N_OUT;
    ql_act_rows(&c, x, xq, N_TOK);
    float y[N_TOK * N_OUT], y_plain[N_TOK * N_OUT];
    for (int t = 0; t < N_TOK; t++)
        for (int o = 0; o < N_OUT; o++) {
            double acc = 0;
            for (int j = 0; j < N_IN; j++)
                acc += (double)we[o * N_IN + j] * (double)xq[t * N_IN + j];
            y[t * N_OUT + o] = y_plain[t * N_OUT + o] = (float)acc;
        }
    ql_linear lin = {.n_in = N_IN, .n_out = N_OUT};
    ql_act_post(&c, &lin, x, y, N_TOK);

    double e_post = 0, e_plain = 0, scale = 0;
    for (int t = 0; t < N_TOK; t++) {
        ql_block_q8_1 xb[NB];
        ql_quantize_row_q8_1_ref(x + t * N_IN, xb, N_IN);
        for (int o = 0; o < N_OUT; o++) {
            double ggml = 0;
            for (int b = 0; b < NB; b++) {
                const ql_block_q4_1 *wb = &wq[o * NB + b];
                int32_t isum = 0;
                for (int j = 0; j < 16; j++) {
                    isum += (wb->qs[j] & 0x0F) * xb[b].qs[j];
                    isum += (wb->qs[j] >> 4) * xb[b].qs[j + 16];
                }
                ggml += (double)ql_fp16_to_fp32(wb->d) * (double)ql_fp16_to_fp32(xb[b].d) * isum +
                        (double)ql_fp16_to_fp32(wb->m) * (double)ql_fp16_to_fp32(xb[b].s);
            }
            e_post = fmax(e_post, fabs((double)y[t * N_OUT + o] - ggml));
            e_plain = fmax(e_plain, fabs((double)y_plain[t * N_OUT + o] - ggml));
            scale = fmax(scale, fabs(ggml));
        }
    }
    printf("q8_1 x Q4_1: max |y - ggml| %.3g without the block-sum term, %.3g with it (|y| <= "
           "%.3g)\n",
           e_plain, e_post, scale);
    /* with the term: f32 rounding of the result and of the correction only */
    CHECK_MSG(e_post <= 4 * 0x1p-24 * scale * NB, "%.3g", e_post);
    CHECK(e_plain > 10 * e_post);

    /* the choice knows when the term applies */
    ql_act_choice ch;
    ql_act_choose(QL_ACT_NATIVE, QL_TYPE_Q5_1, 64, &ch);
    CHECK(ch.used == QL_ACTQ_Q8_1 && ch.needs_sums && !ch.block_sums);
    ql_act_choose(QL_ACT_Q8_1, QL_TYPE_Q4_0, 64, &ch);
    CHECK(ch.used == QL_ACTQ_Q8_1 && !ch.needs_sums);
    ql_act_choose(QL_ACT_Q8_0, QL_TYPE_Q4_1, 64, &ch);
    CHECK(!ch.needs_sums);
}

/* Q6_K weights with q8_K activations: the product is qgemm's integer kernel on the
 * q8_K blocks of the input (bit for bit), within f32 rounding of the fake-quant one. */
static void q6_K_integer_product(void)
{
    enum { N_IN = 512, N_OUT = 24, N_TOK = 6, NB = N_IN / 256 };
    ql_error err;
    static float w[N_OUT * N_IN], we[N_OUT * N_IN], x[N_TOK * N_IN], xq[N_TOK * N_IN];
    rng_state = 33;
    for (int i = 0; i < N_OUT * N_IN; i++)
        w[i] = 0.05f * gauss();
    for (int i = 0; i < N_TOK * N_IN; i++)
        x[i] = gauss() * (i % N_IN == 5 ? 40.0f : 1.0f);
    static ql_block_q6_K wq[N_OUT * NB];
    CHECK_OK(ql_quant_tensor(QL_TYPE_Q6_K, w, N_OUT, N_IN, NULL, wq, sizeof wq, NULL, &err), &err);
    CHECK_OK(ql_dequant_tensor(QL_TYPE_Q6_K, wq, sizeof wq, N_OUT, N_IN, we, &err), &err);

    ql_act_choice ch;
    ql_act_choose(QL_ACT_NATIVE, QL_TYPE_Q6_K, N_IN, &ch);
    CHECK(ch.used == QL_ACTQ_Q8_K && ch.has_kernel && !ch.integer);
    ql_act_choose(QL_ACT_Q8_K, QL_TYPE_Q6_K, N_IN, &ch);
    CHECK(ch.has_kernel);
    ql_act_choose(QL_ACT_NATIVE, QL_TYPE_Q4_K, N_IN, &ch);
    CHECK(ch.used == QL_ACTQ_Q8_K && !ch.has_kernel);
    ql_act_choose(QL_ACT_NATIVE, QL_TYPE_Q6_K, 64, &ch); /* falls back to q8_0 */
    CHECK(ch.fallback && !ch.has_kernel);

    ql_act_ctx c;
    CHECK_OK(ql_act_ctx_init(&c, QL_ACTQ_Q8_K, N_IN, NULL, 0, &err), &err);
    c.q6_K = wq;
    c.n_out = N_OUT;
    ql_linear lin = {.n_in = N_IN, .n_out = N_OUT};
    static float y[N_TOK * N_OUT], y_gemm[N_TOK * N_OUT];
    ql_act_product(&c, &lin, x, y, N_TOK);
    static ql_block_q8_K xb[N_TOK * NB];
    ql_quantize_row_q8_K_ref(x, xb, N_TOK * N_IN);
    ql_gemm_q6_K(wq, xb, y_gemm, N_TOK, N_OUT, N_IN);
    CHECK(memcmp(y, y_gemm, sizeof y) == 0);
    /* the fake-quant product of the same rounded values agrees to f32 rounding */
    ql_act_rows(&c, x, xq, N_TOK);
    int far = 0;
    for (int t = 0; t < N_TOK; t++)
        for (int o = 0; o < N_OUT; o++) {
            double exact = 0, abs_sum = 0;
            for (int j = 0; j < N_IN; j++) {
                const double p = (double)we[o * N_IN + j] * (double)xq[t * N_IN + j];
                exact += p;
                abs_sum += fabs(p);
            }
            /* roundings: one fma per block and lane, the product of the scales, three
             * lane sums, and the decoded activations (d q in f32) of the reference */
            far += fabs((double)y[t * N_OUT + o] - exact) > (NB + 5) * 0x1p-24 * abs_sum;
        }
    CHECK_EQ_INT(far, 0);
}

int main(void)
{
    q6_K_integer_product();
    q8_1_block_sums();
    fast_helpers_exact();
    q8_1_hand_checked();
    q8_K_hand_checked();
    f16_bf16_hand_checked();
    q8x2_hand_checked();
    q8x2_error_gain();
    native_table();
    choose_and_fallback();
    kept_channels();
    return qlt_done();
}
