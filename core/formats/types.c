#include "formats/types.h"

#include <stdio.h>
#include <strings.h>

#include "formats/quant_int8row.h"
#include "formats/quant_iq.h"
#include "formats/quant_iq4.h"
#include "formats/quant_k.h"
#include "formats/quant_legacy.h"
#include "formats/quant_ternary.h"

#define N_ENTRIES (sizeof traits / sizeof traits[0])

/* Block sizes and bytes per block as ggml-common.h defines them. The function
 * columns are filled by the format modules (quant_*.c). */
static const ql_type_traits traits[] = {
    /* name      type              blk  bytes gguf  storage           imat  grids quantize dequantize */
    {"F32",     QL_TYPE_F32,      1,   4,   true, QL_TYPE_F32,      false, false, ql_quantize_f32, ql_dequantize_f32},
    {"F16",     QL_TYPE_F16,      1,   2,   true, QL_TYPE_F16,      false, false, ql_quantize_f16, ql_dequantize_f16},
    {"BF16",    QL_TYPE_BF16,     1,   2,   true, QL_TYPE_BF16,     false, false, ql_quantize_bf16, ql_dequantize_bf16},
    {"Q4_0",    QL_TYPE_Q4_0,     32,  18,  true, QL_TYPE_Q4_0,     false, false, ql_quantize_q4_0, ql_dequantize_q4_0},
    {"Q4_1",    QL_TYPE_Q4_1,     32,  20,  true, QL_TYPE_Q4_1,     false, false, ql_quantize_q4_1, ql_dequantize_q4_1},
    {"Q5_0",    QL_TYPE_Q5_0,     32,  22,  true, QL_TYPE_Q5_0,     false, false, ql_quantize_q5_0, ql_dequantize_q5_0},
    {"Q5_1",    QL_TYPE_Q5_1,     32,  24,  true, QL_TYPE_Q5_1,     false, false, ql_quantize_q5_1, ql_dequantize_q5_1},
    {"Q8_0",    QL_TYPE_Q8_0,     32,  34,  true, QL_TYPE_Q8_0,     false, false, ql_quantize_q8_0, ql_dequantize_q8_0},
    {"Q8_1",    QL_TYPE_Q8_1,     32,  36,  true, QL_TYPE_Q8_1,     false, false, ql_quantize_q8_1, ql_dequantize_q8_1},
    {"Q2_K",    QL_TYPE_Q2_K,     256, 84,  true, QL_TYPE_Q2_K,     false, false, ql_quantize_q2_K, ql_dequantize_q2_K},
    {"Q3_K",    QL_TYPE_Q3_K,     256, 110, true, QL_TYPE_Q3_K,     false, false, ql_quantize_q3_K, ql_dequantize_q3_K},
    {"Q4_K",    QL_TYPE_Q4_K,     256, 144, true, QL_TYPE_Q4_K,     false, false, ql_quantize_q4_K, ql_dequantize_q4_K},
    {"Q5_K",    QL_TYPE_Q5_K,     256, 176, true, QL_TYPE_Q5_K,     false, false, ql_quantize_q5_K, ql_dequantize_q5_K},
    {"Q6_K",    QL_TYPE_Q6_K,     256, 210, true, QL_TYPE_Q6_K,     false, false, ql_quantize_q6_K, ql_dequantize_q6_K},
    {"Q8_K",    QL_TYPE_Q8_K,     256, 292, true, QL_TYPE_Q8_K,     false, false, ql_quantize_q8_K, ql_dequantize_q8_K},
    {"IQ2_XXS", QL_TYPE_IQ2_XXS,  256, 66,  true, QL_TYPE_IQ2_XXS,  true,  true,  ql_quantize_iq2_xxs, ql_dequantize_iq2_xxs},
    {"IQ2_XS",  QL_TYPE_IQ2_XS,   256, 74,  true, QL_TYPE_IQ2_XS,   true,  true,  ql_quantize_iq2_xs, ql_dequantize_iq2_xs},
    {"IQ2_S",   QL_TYPE_IQ2_S,    256, 82,  true, QL_TYPE_IQ2_S,    false, true,  ql_quantize_iq2_s, ql_dequantize_iq2_s},
    {"IQ3_XXS", QL_TYPE_IQ3_XXS,  256, 98,  true, QL_TYPE_IQ3_XXS,  false, true,  ql_quantize_iq3_xxs, ql_dequantize_iq3_xxs},
    {"IQ3_S",   QL_TYPE_IQ3_S,    256, 110, true, QL_TYPE_IQ3_S,    false, true,  ql_quantize_iq3_s, ql_dequantize_iq3_s},
    {"IQ1_S",   QL_TYPE_IQ1_S,    256, 50,  true, QL_TYPE_IQ1_S,    true,  true,  ql_quantize_iq1_s, ql_dequantize_iq1_s},
    {"IQ1_M",   QL_TYPE_IQ1_M,    256, 56,  true, QL_TYPE_IQ1_M,    false, true,  ql_quantize_iq1_m, ql_dequantize_iq1_m},
    {"IQ4_NL",  QL_TYPE_IQ4_NL,   32,  18,  true, QL_TYPE_IQ4_NL,   false, false, ql_quantize_iq4_nl, ql_dequantize_iq4_nl},
    {"IQ4_XS",  QL_TYPE_IQ4_XS,   256, 136, true, QL_TYPE_IQ4_XS,   false, false, ql_quantize_iq4_xs, ql_dequantize_iq4_xs},
    {"TQ1_0",   QL_TYPE_TQ1_0,    256, 54,  true, QL_TYPE_TQ1_0,    false, false, ql_quantize_tq1_0, ql_dequantize_tq1_0},
    {"TQ2_0",   QL_TYPE_TQ2_0,    256, 66,  true, QL_TYPE_TQ2_0,    false, false, ql_quantize_tq2_0, ql_dequantize_tq2_0},
    {"I8",      QL_TYPE_I8,       1,   1,   true, QL_TYPE_I8,       false, false, NULL, NULL},
    {"I16",     QL_TYPE_I16,      1,   2,   true, QL_TYPE_I16,      false, false, NULL, NULL},
    {"I32",     QL_TYPE_I32,      1,   4,   true, QL_TYPE_I32,      false, false, NULL, NULL},
    {"I64",     QL_TYPE_I64,      1,   8,   true, QL_TYPE_I64,      false, false, NULL, NULL},
    {"F64",     QL_TYPE_F64,      1,   8,   true, QL_TYPE_F64,      false, false, NULL, NULL},
    {"INT8_ROW", QL_TYPE_INT8_ROW, 0,  2,   false, QL_TYPE_INT8_ROW, false, false, ql_quantize_int8_row, ql_dequantize_int8_row},
    /* Q8_0_XC needs the outlier columns: quantize with ql_quant_q8_0_xc (quant_xc.h). */
    {"Q8_0_XC", QL_TYPE_Q8_0_XC,  32,  34,  false, QL_TYPE_Q8_0,    false, false, NULL, ql_dequantize_q8_0},
};

const ql_type_traits *ql_type_get(int32_t type)
{
    for (size_t i = 0; i < N_ENTRIES; i++)
        if ((int32_t)traits[i].type == type)
            return &traits[i];
    return NULL;
}

const ql_type_traits *ql_type_by_name(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < N_ENTRIES; i++)
        if (strcasecmp(traits[i].name, name) == 0)
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
    int n = 0;
    for (size_t i = 0; i < N_ENTRIES && n < max; i++)
        out[n++] = &traits[i];
    return n;
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
