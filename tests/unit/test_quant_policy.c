/* The type policy (llama-quantize's fallbacks) and the weight
 * error statistics. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "formats/types.h"
#include "model/quant.h"
#include "qltest.h"

static ql_quant_plan_entry plan(int32_t wt, int32_t head, int32_t embd, const char *name,
                                uint32_t n_dims, int64_t ne0, int64_t ne1, bool has_output)
{
    ql_quant_config cfg = {.weight_type = wt, .head_type = head, .embd_type = embd};
    int64_t ne[2] = {ne0, ne1};
    ql_quant_plan_entry e;
    ql_error err;
    ql_status st = ql_quant_plan_tensor(&cfg, name, n_dims, ne, QL_TYPE_F32, has_output, &e, &err);
    CHECK_OK(st, &err);
    return e;
}

#define NONE QL_TYPE_INVALID

static void roles_and_overrides(void)
{
    ql_quant_plan_entry e =
        plan(QL_TYPE_Q4_0, NONE, NONE, "blk.0.attn_norm.weight", 1, 64, 1, true);
    CHECK_EQ_INT(e.role, QL_ROLE_VECTOR);
    CHECK_EQ_INT(e.used, QL_TYPE_F32);
    CHECK_EQ_INT(e.fallback, QL_FALLBACK_NONE);
    CHECK_EQ_INT(e.bytes, 256);

    e = plan(QL_TYPE_Q4_0, NONE, NONE, "blk.0.attn_q.weight", 2, 64, 64, true);
    CHECK_EQ_INT(e.role, QL_ROLE_WEIGHT);
    CHECK_EQ_INT(e.used, QL_TYPE_Q4_0);
    CHECK_EQ_INT(e.bytes, 64 * 2 * 18);

    e = plan(QL_TYPE_Q4_0, QL_TYPE_Q8_0, QL_TYPE_F16, "output.weight", 2, 64, 512, true);
    CHECK_EQ_INT(e.role, QL_ROLE_HEAD);
    CHECK_EQ_INT(e.used, QL_TYPE_Q8_0);
    e = plan(QL_TYPE_Q4_0, QL_TYPE_Q8_0, QL_TYPE_F16, "token_embd.weight", 2, 64, 512, true);
    CHECK_EQ_INT(e.role, QL_ROLE_EMBD);
    CHECK_EQ_INT(e.used, QL_TYPE_F16);
    /* "same": the weight type. */
    e = plan(QL_TYPE_Q5_1, NONE, NONE, "output.weight", 2, 64, 512, true);
    CHECK_EQ_INT(e.used, QL_TYPE_Q5_1);
    /* Tied embeddings: token_embd is the head; embd_type wins, then head_type. */
    e = plan(QL_TYPE_Q4_0, QL_TYPE_Q8_0, NONE, "token_embd.weight", 2, 64, 512, false);
    CHECK_EQ_INT(e.used, QL_TYPE_Q8_0);
    e = plan(QL_TYPE_Q4_0, QL_TYPE_Q8_0, QL_TYPE_Q5_0, "token_embd.weight", 2, 64, 512, false);
    CHECK_EQ_INT(e.used, QL_TYPE_Q5_0);
    e = plan(QL_TYPE_Q4_0, QL_TYPE_Q8_0, NONE, "token_embd.weight", 2, 64, 512, true);
    CHECK_EQ_INT(e.used, QL_TYPE_Q4_0);

    /* Tensors llama-quantize never quantizes keep their float type. */
    e = plan(QL_TYPE_Q4_0, NONE, NONE, "blk.0.ffn_gate_inp.weight", 2, 64, 8, true);
    CHECK_EQ_INT(e.role, QL_ROLE_KEEP);
    CHECK_EQ_INT(e.used, QL_TYPE_F32);
    e = plan(QL_TYPE_Q4_0, NONE, NONE, "rope_freqs", 2, 64, 8, true);
    CHECK_EQ_INT(e.role, QL_ROLE_KEEP);
}

static void row_length_fallbacks(void)
{
    /* stories260K's ffn_down: 172 values per row. */
    ql_quant_plan_entry e =
        plan(QL_TYPE_Q4_0, NONE, NONE, "blk.0.ffn_down.weight", 2, 172, 64, true);
    CHECK_EQ_INT(e.requested, QL_TYPE_Q4_0);
    CHECK_EQ_INT(e.used, QL_TYPE_F16);
    CHECK_EQ_INT(e.fallback, QL_FALLBACK_ROW_LENGTH);
    CHECK(strstr(e.reason, "172") && strstr(e.reason, "F16"));
    CHECK_EQ_INT(e.bytes, 172 * 64 * 2);

    static const struct {
        int32_t want, got;
    } map64[] = {
        {QL_TYPE_Q2_K, QL_TYPE_IQ4_NL},   {QL_TYPE_Q3_K, QL_TYPE_IQ4_NL},
        {QL_TYPE_IQ4_XS, QL_TYPE_IQ4_NL}, {QL_TYPE_IQ3_S, QL_TYPE_IQ4_NL},
        {QL_TYPE_IQ1_M, QL_TYPE_IQ4_NL},  {QL_TYPE_Q4_K, QL_TYPE_Q5_0},
        {QL_TYPE_Q5_K, QL_TYPE_Q5_1},     {QL_TYPE_Q6_K, QL_TYPE_Q8_0},
        {QL_TYPE_TQ1_0, QL_TYPE_Q4_0},    {QL_TYPE_TQ2_0, QL_TYPE_Q4_0},
    };
    for (size_t i = 0; i < sizeof map64 / sizeof map64[0]; i++) {
        e = plan(map64[i].want, NONE, NONE, "blk.1.attn_k.weight", 2, 64, 32, true);
        CHECK_MSG(e.used == map64[i].got, "%s on 64-wide rows -> %s, expected %s",
                  ql_type_name(map64[i].want), ql_type_name(e.used), ql_type_name(map64[i].got));
        CHECK_EQ_INT(e.fallback, QL_FALLBACK_ROW_LENGTH);
        /* ... and to F16 when even the 32-block neighbour does not fit. */
        e = plan(map64[i].want, NONE, NONE, "blk.1.ffn_down.weight", 2, 172, 64, true);
        CHECK_EQ_INT(e.used, QL_TYPE_F16);
        CHECK(strstr(e.reason, "either") != NULL);
    }
    /* The head obeys the same rule. */
    e = plan(QL_TYPE_Q4_0, QL_TYPE_Q6_K, NONE, "output.weight", 2, 64, 512, true);
    CHECK_EQ_INT(e.used, QL_TYPE_Q8_0);
    e = plan(QL_TYPE_Q8_0_XC, NONE, NONE, "blk.0.ffn_down.weight", 2, 172, 64, true);
    CHECK_EQ_INT(e.used, QL_TYPE_F16);
    /* Rows that fit need no fallback. */
    e = plan(QL_TYPE_Q4_K, NONE, NONE, "blk.0.attn_q.weight", 2, 512, 512, true);
    CHECK_EQ_INT(e.used, QL_TYPE_Q4_K);
    CHECK_EQ_INT(e.fallback, QL_FALLBACK_NONE);
    CHECK_EQ_INT(e.reason[0], 0);
}

/* A type that needs importance weights, for a tensor the imatrix does not cover. */
static void no_importance_fallback(void)
{
    ql_quant_plan_entry e =
        plan(QL_TYPE_IQ2_XXS, NONE, NONE, "token_embd.weight", 2, 256, 512, true);
    CHECK_EQ_INT(e.used, QL_TYPE_IQ2_XXS);
    CHECK(ql_quant_plan_no_importance(&e));
    CHECK_EQ_INT(e.used, QL_TYPE_Q2_K);
    CHECK_EQ_INT(e.fallback, QL_FALLBACK_NO_IMATRIX);
    CHECK(strstr(e.reason, "IQ2_XXS needs importance weights") != NULL);
    CHECK_EQ_INT(e.bytes, (uint64_t)ql_row_size(QL_TYPE_Q2_K, 256) * 512);
    /* 64-wide rows: Q2_K does not fit, its neighbour IQ4_NL does. */
    e = plan(QL_TYPE_IQ1_S, NONE, NONE, "token_embd.weight", 2, 64, 512, true);
    /* (the row-length policy already moved IQ1_S to IQ4_NL, which needs nothing) */
    CHECK(!ql_quant_plan_no_importance(&e));
    ql_quant_plan_entry f = e;
    f.used = QL_TYPE_IQ1_S;
    CHECK(ql_quant_plan_no_importance(&f));
    CHECK_EQ_INT(f.used, QL_TYPE_IQ4_NL);
    CHECK(strstr(f.reason, "row length 64: IQ4_NL") != NULL);
    /* Types that do not need importance weights are left alone. */
    e = plan(QL_TYPE_Q4_K, NONE, NONE, "blk.0.ffn_up.weight", 2, 256, 512, true);
    CHECK(!ql_quant_plan_no_importance(&e));
    CHECK_EQ_INT(e.used, QL_TYPE_Q4_K);
}

/* Covers every tensor except token_embd.weight. */
static bool covers_all_but_embd(const void *ctx, int64_t i, const ql_quant_plan_entry *e)
{
    (void)ctx;
    (void)i;
    return strcmp(e->name, "token_embd.weight") != 0;
}

/* The plan-level form: only uncovered entries of a type that needs importance
 * weights fall back, and the totals follow. */
static void plan_importance_fallbacks(void)
{
    ql_quant_plan_entry entries[3] = {
        plan(QL_TYPE_IQ2_XS, NONE, NONE, "token_embd.weight", 2, 256, 512, true),
        plan(QL_TYPE_IQ2_XS, NONE, NONE, "blk.0.attn_q.weight", 2, 256, 256, true),
        plan(QL_TYPE_IQ2_XS, NONE, NONE, "blk.0.attn_norm.weight", 1, 256, 1, true),
    };
    ql_quant_plan p = {.n = 3, .entries = entries};
    ql_quant_plan_totals(&p);
    const uint64_t before = p.bytes;
    CHECK_EQ_INT(p.n_fallback, 0);
    CHECK_EQ_INT(ql_quant_plan_importance_fallbacks(&p, covers_all_but_embd, NULL), 1);
    CHECK_EQ_INT(entries[0].used, QL_TYPE_Q2_K);
    CHECK_EQ_INT(entries[1].used, QL_TYPE_IQ2_XS);
    CHECK_EQ_INT(entries[2].used, QL_TYPE_F32);
    CHECK_EQ_INT(p.n_fallback, 1);
    const uint64_t grown =
        (ql_row_size(QL_TYPE_Q2_K, 256) - ql_row_size(QL_TYPE_IQ2_XS, 256)) * 512;
    CHECK_EQ_INT(p.bytes, before + grown);
    /* Nothing left to change: no second fallback. */
    CHECK_EQ_INT(ql_quant_plan_importance_fallbacks(&p, covers_all_but_embd, NULL), 0);
}

static void int8_row_rules(void)
{
    /* 256 x 256 = 65,536 values: kept as F16. */
    ql_quant_plan_entry e =
        plan(QL_TYPE_INT8_ROW, NONE, NONE, "blk.0.attn_q.weight", 2, 256, 256, true);
    CHECK_EQ_INT(e.used, QL_TYPE_F16);
    CHECK_EQ_INT(e.fallback, QL_FALLBACK_SMALL_TENSOR);
    e = plan(QL_TYPE_INT8_ROW, NONE, NONE, "blk.0.attn_q.weight", 2, 256, 257, true);
    CHECK_EQ_INT(e.used, QL_TYPE_INT8_ROW);
    CHECK_EQ_INT(e.bytes, 257 * (2 + 256));
    /* Any row length works (no blocks). */
    e = plan(QL_TYPE_INT8_ROW, NONE, NONE, "blk.0.ffn_down.weight", 2, 172, 1000, true);
    CHECK_EQ_INT(e.used, QL_TYPE_INT8_ROW);
}

static void invalid_requests(void)
{
    ql_quant_config cfg = {.weight_type = QL_TYPE_Q8_K, .head_type = NONE, .embd_type = NONE};
    int64_t ne[2] = {256, 4};
    ql_quant_plan_entry e;
    ql_error err;
    CHECK_EQ_INT(ql_quant_plan_tensor(&cfg, "w.weight", 2, ne, QL_TYPE_F32, true, &e, &err),
                 QL_EINVAL);
    CHECK(strstr(err.msg, "Q8_K") != NULL);
    cfg.weight_type = QL_TYPE_Q4_0;
    cfg.head_type = QL_TYPE_Q8_1;
    CHECK_EQ_INT(ql_quant_plan_tensor(&cfg, "w.weight", 2, ne, QL_TYPE_F32, true, &e, &err),
                 QL_EINVAL);
    cfg.head_type = NONE;
    ne[1] = 0;
    CHECK_EQ_INT(ql_quant_plan_tensor(&cfg, "w.weight", 2, ne, QL_TYPE_F32, true, &e, &err),
                 QL_EINVAL);
    CHECK(!ql_type_is_weight(ql_type_get(QL_TYPE_I32)));
    CHECK(ql_type_is_weight(ql_type_get(QL_TYPE_INT8_ROW)));
    CHECK(ql_type_is_weight(ql_type_get(QL_TYPE_Q8_0_XC)));
}

/* Shapes whose value count (or byte count) does not fit in 64 bits are refused,
 * not planned with a wrapped size. */
static void oversized_tensors(void)
{
    ql_quant_config cfg = {.weight_type = QL_TYPE_Q4_0, .head_type = NONE, .embd_type = NONE};
    int64_t ne[2] = {INT64_C(1) << 40, INT64_C(1) << 30}; /* 2^70 values */
    ql_quant_plan_entry e;
    ql_error err;
    CHECK_EQ_INT(ql_quant_plan_tensor(&cfg, "w.weight", 2, ne, QL_TYPE_F32, true, &e, &err),
                 QL_EINVAL);
    CHECK(strstr(err.msg, "'w.weight'") && strstr(err.msg, "1099511627776 x 1073741824"));
    /* 2^62 values fit in int64, but not their 2^64 bytes as F32. */
    cfg.weight_type = QL_TYPE_F32;
    ne[0] = ne[1] = INT64_C(1) << 31;
    CHECK_EQ_INT(ql_quant_plan_tensor(&cfg, "w.weight", 2, ne, QL_TYPE_F32, true, &e, &err),
                 QL_EINVAL);
    /* The largest shape allowed: 2^61 - 1 values, bytes exact. */
    ne[0] = (INT64_C(1) << 61) - 1;
    ne[1] = 1;
    CHECK_OK(ql_quant_plan_tensor(&cfg, "w.weight", 2, ne, QL_TYPE_F32, true, &e, &err), &err);
    CHECK(e.bytes == ((UINT64_C(1) << 61) - 1) * 4);
}

/* Hand-checked errors: w = (1, 2, 3, 4), w^ = (1, 2.5, 3, 3) over two rows of two,
 * column weights I = (2, 1): sse = 0.25 + 1 = 1.25, rmse = sqrt(1.25/4),
 * max = 1, imatrix_err = 1 * 0.25 + 1 * 1 = 1.25 (both errors are in column 1),
 * sum I w^2 = 2*1 + 1*4 + 2*9 + 1*16 = 40. */
static void weight_error(void)
{
    const float w[4] = {1, 2, 3, 4}, wh[4] = {1, 2.5f, 3, 3}, col[2] = {2, 1};
    ql_weight_error e = {0};
    ql_error err;
    CHECK_OK(ql_weight_error_add(&e, w, wh, 2, 2, col, &err), &err);
    CHECK_EQ_INT(e.n, 4);
    CHECK(e.sse == 1.25);
    CHECK(e.sum_sq == 30.0);
    CHECK(e.max_abs == 1.0);
    CHECK(e.weighted);
    CHECK(e.w_sse == 1.25);
    CHECK(e.w_sum_sq == 40.0);
    CHECK(ql_weight_error_rmse(&e) == sqrt(1.25 / 4));
    CHECK(ql_weight_error_rel(&e) == 1.25 / 40.0);

    ql_weight_error total = {0}, plain = {0};
    CHECK_OK(ql_weight_error_add(&plain, w, wh, 1, 4, NULL, &err), &err);
    CHECK(!plain.weighted);
    CHECK(isnan(ql_weight_error_rel(&plain)));
    CHECK_EQ_INT(e.w_n, 4);
    CHECK_EQ_INT(plain.w_n, 0);
    /* A total's weighted terms cover the tensors that had weights. */
    ql_weight_error_merge(&total, &plain);
    CHECK(!total.weighted);
    ql_weight_error_merge(&total, &e);
    CHECK(total.weighted);
    ql_weight_error_merge(&total, &plain);
    CHECK(total.weighted);
    CHECK_EQ_INT(total.n, 12);
    CHECK_EQ_INT(total.w_n, 4);
    CHECK(total.sse == 3.75);
    CHECK(total.w_sse == 1.25);
    CHECK(ql_weight_error_rel(&total) == 1.25 / 40.0);
}

int main(void)
{
    roles_and_overrides();
    row_length_fallbacks();
    no_importance_fallback();
    plan_importance_fallbacks();
    int8_row_rules();
    invalid_requests();
    oversized_tensors();
    weight_error();
    return qlt_done();
}
