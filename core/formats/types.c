#include "formats/types.h"

#include <stddef.h>
#include <stdio.h>
#include <strings.h>

#include "formats/quant_int8row.h"
#include "formats/quant_iq.h"
#include "formats/quant_iq4.h"
#include "formats/quant_k.h"
#include "formats/quant_legacy.h"
#include "formats/quant_ternary.h"

/* Why a type is not a weight type (phrases after "X is"). */
#define ACTIVATION_ONLY "an activation-only format (ggml has no matmul with it as the weight)"
#define INTEGER         "an integer tensor type, not a weight format"

/* An entry: the id gives the index, the name and the GGUF storage; TYPE_AS stores
 * the type under another id. BLOCK takes the sizes from the block struct, FNS names
 * the reference functions of the format. */
#define TYPE(id, ...)                                                                              \
    [QL_TYPE_##id] = {.name = #id, .type = QL_TYPE_##id, .storage = QL_TYPE_##id, __VA_ARGS__}
#define TYPE_AS(id, stored, ...)                                                                   \
    [QL_TYPE_##id] = {.name = #id, .type = QL_TYPE_##id, .storage = QL_TYPE_##stored, __VA_ARGS__}
#define BLOCK(values, block_struct) .block_size = (values), .type_size = sizeof(block_struct)
#define FNS(f)                      .quantize = ql_quantize_##f, .dequantize = ql_dequantize_##f

/* Unset columns are zero: no ladder rank, F32 activations, no imatrix needed. The
 * ftype and row_fallback columns are always given (0 would mean F32), which
 * tests/unit/test_types.c checks. */
static const ql_type_traits traits[QL_TYPE_ID_LIMIT] = {
    /* Float formats. */
    TYPE(F32, .order = 0, BLOCK(1, float), .is_gguf = true, .ftype = 0, .row_fallback = QL_TYPE_F32,
         FNS(f32)),
    TYPE(F16, .order = 1, BLOCK(1, uint16_t), .is_gguf = true, .ftype = 1,
         .row_fallback = QL_TYPE_F16, .native_act = QL_ACTQ_F16, .ladder_rank = 7, FNS(f16)),
    TYPE(BF16, .order = 2, BLOCK(1, uint16_t), .is_gguf = true, .ftype = 32,
         .row_fallback = QL_TYPE_BF16, .native_act = QL_ACTQ_BF16, FNS(bf16)),

    /* The 32-value block formats. */
    TYPE(Q4_0, .order = 3, BLOCK(QL_QK4_0, ql_block_q4_0), .is_gguf = true, .ftype = 2,
         .row_fallback = QL_TYPE_F16, .native_act = QL_ACTQ_Q8_0, .ladder_rank = 1, FNS(q4_0)),
    TYPE(Q4_1, .order = 4, BLOCK(QL_QK4_1, ql_block_q4_1), .is_gguf = true, .ftype = 3,
         .row_fallback = QL_TYPE_F16, .native_act = QL_ACTQ_Q8_1, .ladder_rank = 2,
         .block_min_offset = offsetof(ql_block_q4_1, m), FNS(q4_1)),
    TYPE(Q5_0, .order = 5, BLOCK(QL_QK5_0, ql_block_q5_0), .is_gguf = true, .ftype = 8,
         .row_fallback = QL_TYPE_F16, .native_act = QL_ACTQ_Q8_0, .ladder_rank = 3, FNS(q5_0)),
    TYPE(Q5_1, .order = 6, BLOCK(QL_QK5_1, ql_block_q5_1), .is_gguf = true, .ftype = 9,
         .row_fallback = QL_TYPE_F16, .native_act = QL_ACTQ_Q8_1, .ladder_rank = 4,
         .block_min_offset = offsetof(ql_block_q5_1, m), FNS(q5_1)),
    TYPE(Q8_0, .order = 7, BLOCK(QL_QK8_0, ql_block_q8_0), .is_gguf = true, .ftype = 7,
         .row_fallback = QL_TYPE_F16, .native_act = QL_ACTQ_Q8_0, .ladder_rank = 6, FNS(q8_0)),
    TYPE(Q8_1, .order = 8, BLOCK(QL_QK8_1, ql_block_q8_1), .is_gguf = true,
         .not_weight = ACTIVATION_ONLY, .ftype = -1, .row_fallback = QL_TYPE_F16, FNS(q8_1)),

    /* K-quants and their activation format. */
    TYPE(Q2_K, .order = 9, BLOCK(QL_QK_K, ql_block_q2_K), .is_gguf = true, .ftype = 10,
         .row_fallback = QL_TYPE_IQ4_NL, .native_act = QL_ACTQ_Q8_K, .ladder_rank = 13, FNS(q2_K)),
    TYPE(Q3_K, .order = 10, BLOCK(QL_QK_K, ql_block_q3_K), .is_gguf = true, .ftype = 11,
         .row_fallback = QL_TYPE_IQ4_NL, .native_act = QL_ACTQ_Q8_K, .ladder_rank = 14, FNS(q3_K)),
    TYPE(Q4_K, .order = 11, BLOCK(QL_QK_K, ql_block_q4_K), .is_gguf = true, .ftype = 14,
         .row_fallback = QL_TYPE_Q5_0, .native_act = QL_ACTQ_Q8_K, .ladder_rank = 16, FNS(q4_K)),
    TYPE(Q5_K, .order = 12, BLOCK(QL_QK_K, ql_block_q5_K), .is_gguf = true, .ftype = 16,
         .row_fallback = QL_TYPE_Q5_1, .native_act = QL_ACTQ_Q8_K, .ladder_rank = 17, FNS(q5_K)),
    TYPE(Q6_K, .order = 13, BLOCK(QL_QK_K, ql_block_q6_K), .is_gguf = true, .ftype = 18,
         .row_fallback = QL_TYPE_Q8_0, .native_act = QL_ACTQ_Q8_K, .ladder_rank = 18,
         .integer_product = true, FNS(q6_K)),
    TYPE(Q8_K, .order = 14, BLOCK(QL_QK_K, ql_block_q8_K), .is_gguf = true,
         .not_weight = ACTIVATION_ONLY, .ftype = -1, .row_fallback = QL_TYPE_F16, FNS(q8_K)),

    /* The lattice (IQ) formats. */
    TYPE(IQ2_XXS, .order = 15, BLOCK(QL_QK_K, ql_block_iq2_xxs), .is_gguf = true, .ftype = 19,
         .row_fallback = QL_TYPE_IQ4_NL, .native_act = QL_ACTQ_Q8_K, .ladder_rank = 8,
         .requires_imatrix = true, .llama_imatrix = true, .needs_grids = true, FNS(iq2_xxs)),
    TYPE(IQ2_XS, .order = 16, BLOCK(QL_QK_K, ql_block_iq2_xs), .is_gguf = true, .ftype = 20,
         .row_fallback = QL_TYPE_IQ4_NL, .native_act = QL_ACTQ_Q8_K, .ladder_rank = 9,
         .requires_imatrix = true, .llama_imatrix = true, .needs_grids = true, FNS(iq2_xs)),
    TYPE(IQ2_S, .order = 17, BLOCK(QL_QK_K, ql_block_iq2_s), .is_gguf = true, .ftype = 29,
         .row_fallback = QL_TYPE_IQ4_NL, .native_act = QL_ACTQ_Q8_K, .ladder_rank = 10,
         .llama_imatrix = true, .needs_grids = true, FNS(iq2_s)),
    TYPE(IQ3_XXS, .order = 18, BLOCK(QL_QK_K, ql_block_iq3_xxs), .is_gguf = true, .ftype = 23,
         .row_fallback = QL_TYPE_IQ4_NL, .native_act = QL_ACTQ_Q8_K, .ladder_rank = 11,
         .needs_grids = true, FNS(iq3_xxs)),
    TYPE(IQ3_S, .order = 19, BLOCK(QL_QK_K, ql_block_iq3_s), .is_gguf = true, .ftype = 26,
         .row_fallback = QL_TYPE_IQ4_NL, .native_act = QL_ACTQ_Q8_K, .ladder_rank = 12,
         .needs_grids = true, FNS(iq3_s)),
    TYPE(IQ1_S, .order = 20, BLOCK(QL_QK_K, ql_block_iq1_s), .is_gguf = true, .ftype = 24,
         .row_fallback = QL_TYPE_IQ4_NL, .native_act = QL_ACTQ_Q8_K, .requires_imatrix = true,
         .llama_imatrix = true, .needs_grids = true, .row_state = true, FNS(iq1_s)),
    TYPE(IQ1_M, .order = 21, BLOCK(QL_QK_K, ql_block_iq1_m), .is_gguf = true, .ftype = 31,
         .row_fallback = QL_TYPE_IQ4_NL, .native_act = QL_ACTQ_Q8_K, .llama_imatrix = true,
         .needs_grids = true, .row_state = true, FNS(iq1_m)),
    TYPE(IQ4_NL, .order = 22, BLOCK(QL_QK4_NL, ql_block_iq4_nl), .is_gguf = true, .ftype = 25,
         .row_fallback = QL_TYPE_F16, .native_act = QL_ACTQ_Q8_0, .ladder_rank = 5, FNS(iq4_nl)),
    TYPE(IQ4_XS, .order = 23, BLOCK(QL_QK_K, ql_block_iq4_xs), .is_gguf = true, .ftype = 30,
         .row_fallback = QL_TYPE_IQ4_NL, .native_act = QL_ACTQ_Q8_K, .ladder_rank = 15,
         FNS(iq4_xs)),

    /* Ternary formats: llama.cpp falls back to Q4_0 (it has no symmetric 32-block
     * ternary type). */
    TYPE(TQ1_0, .order = 24, BLOCK(QL_QK_K, ql_block_tq1_0), .is_gguf = true, .ftype = 36,
         .row_fallback = QL_TYPE_Q4_0, .native_act = QL_ACTQ_Q8_K, FNS(tq1_0)),
    TYPE(TQ2_0, .order = 25, BLOCK(QL_QK_K, ql_block_tq2_0), .is_gguf = true, .ftype = 37,
         .row_fallback = QL_TYPE_Q4_0, .native_act = QL_ACTQ_Q8_K, FNS(tq2_0)),

    /* Integer and f64 tensors: GGUF types qlab neither quantizes to nor decodes. */
    TYPE(I8, .order = 26, BLOCK(1, int8_t), .is_gguf = true, .not_weight = INTEGER, .ftype = -1,
         .row_fallback = QL_TYPE_I8),
    TYPE(I16, .order = 27, BLOCK(1, int16_t), .is_gguf = true, .not_weight = INTEGER, .ftype = -1,
         .row_fallback = QL_TYPE_I16),
    TYPE(I32, .order = 28, BLOCK(1, int32_t), .is_gguf = true, .not_weight = INTEGER, .ftype = -1,
         .row_fallback = QL_TYPE_I32),
    TYPE(I64, .order = 29, BLOCK(1, int64_t), .is_gguf = true, .not_weight = INTEGER, .ftype = -1,
         .row_fallback = QL_TYPE_I64),
    TYPE(F64, .order = 30, BLOCK(1, double), .is_gguf = true,
         .not_weight = "not a quantization target (llama.cpp has no F64 model type)", .ftype = -1,
         .row_fallback = QL_TYPE_F64),

    /* qlab's weight schemes. INT8_ROW: one block per row, an fp16 scale besides the
     * values. Q8_0_XC needs the outlier columns: quantize with ql_quant_q8_0_xc
     * (quant_xc.h). */
    TYPE(INT8_ROW, .order = 31, .block_size = 0, .type_size = sizeof(uint16_t),
         .not_in_gguf = "is not a GGUF type: qlab evaluates it in memory (sweeps) and cannot "
                        "write it to a GGUF file",
         .ftype = -1, .row_fallback = QL_TYPE_INT8_ROW, FNS(int8_row)),
    TYPE_AS(Q8_0_XC, Q8_0, .order = 32, BLOCK(QL_QK8_0, ql_block_q8_0),
            .not_in_gguf = "needs calibrated outlier columns, which 'qlab quantize' does not "
                           "have; write Q8_0 instead",
            .ftype = -1, .row_fallback = QL_TYPE_F16, .native_act = QL_ACTQ_Q8_0,
            .exact_outliers = true, .dequantize = ql_dequantize_q8_0),
};

const ql_type_traits *ql_type_get(int32_t type)
{
    if (type < 0 || type >= QL_TYPE_ID_LIMIT || !traits[type].name)
        return NULL;
    return &traits[type];
}

const ql_type_traits *ql_type_by_name(const char *name)
{
    if (!name)
        return NULL;
    for (int i = 0; i < QL_TYPE_ID_LIMIT; i++)
        if (traits[i].name && strcasecmp(traits[i].name, name) == 0)
            return &traits[i];
    return NULL;
}

const char *ql_type_name(int32_t type)
{
    static _Thread_local char buf[32];
    const ql_type_traits *t = ql_type_get(type);
    if (t)
        return t->name;
    snprintf(buf, sizeof buf, "type id %d", (int)type);
    return buf;
}

bool ql_type_is_weight(const ql_type_traits *t)
{
    return t && !t->not_weight;
}

bool ql_type_is_gguf_weight(const ql_type_traits *t)
{
    return ql_type_is_weight(t) && !t->not_in_gguf;
}

size_t ql_row_size(int32_t type, int64_t n_per_row)
{
    const ql_type_traits *t = ql_type_get(type);
    if (!t || n_per_row <= 0)
        return 0;
    if (t->block_size == 0)
        return t->type_size + (size_t)n_per_row;
    if (n_per_row % t->block_size != 0)
        return 0;
    return (size_t)(n_per_row / t->block_size) * t->type_size;
}

double ql_type_bpw(int32_t type)
{
    const ql_type_traits *t = ql_type_get(type);
    if (!t)
        return 0.0;
    if (t->block_size == 0)
        return 8.0;
    return 8.0 * (double)t->type_size / (double)t->block_size;
}

int ql_type_list(const ql_type_traits **out, int max)
{
    /* The order column numbers the entries 0, 1, ... (checked by the unit tests). */
    const ql_type_traits *by_order[QL_TYPE_ID_LIMIT] = {0};
    int n = 0;
    for (int i = 0; i < QL_TYPE_ID_LIMIT; i++) {
        if (!traits[i].name)
            continue;
        QL_ASSERT(traits[i].order >= 0 && traits[i].order < QL_TYPE_ID_LIMIT &&
                  !by_order[traits[i].order]);
        by_order[traits[i].order] = &traits[i];
        n++;
    }
    int k = 0;
    for (int i = 0; i < n && k < max; i++) {
        QL_ASSERT(by_order[i]);
        out[k++] = by_order[i];
    }
    return k;
}

ql_status ql_type_prepare(int32_t type, ql_error *err)
{
    const ql_type_traits *t = ql_type_get(type);
    if (!t)
        return ql_error_set(err, QL_EINVAL, "unknown type id %d", (int)type);
    if (!t->needs_grids)
        return QL_OK;
    return ql_iq_prepare(type, err);
}
