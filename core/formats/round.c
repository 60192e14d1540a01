/* Activation roundings: every block format goes through the type-traits table (the
 * functions that define the format), one block at a time through a stack buffer. */
#include "formats/round.h"

#include <string.h>

#include "base/fp16.h"
#include "formats/quant_common.h"
#include "formats/quant_k.h"
#include "formats/quant_legacy.h"
#include "formats/types.h"

static const char *const actq_names[QL_ACTQ_COUNT] = {"f32",  "f16",  "bf16", "q8_0",
                                                      "q8_1", "q8_K", "q8x2"};

const char *ql_actq_name(ql_actq q)
{
    QL_ASSERT(q >= 0 && q < QL_ACTQ_COUNT);
    return actq_names[q];
}

int64_t ql_actq_block(ql_actq q)
{
    switch (q) {
    case QL_ACTQ_Q8_0:
    case QL_ACTQ_Q8_1:
    case QL_ACTQ_Q8X2:
        return QL_QK8_0;
    case QL_ACTQ_Q8_K:
        return QL_QK_K;
    default:
        return 1;
    }
}

bool ql_actq_fits(ql_actq q, int64_t n)
{
    return n > 0 && n % ql_actq_block(q) == 0;
}

/* ------------------------------------------------------------------------- */
/* native                                                                      */

ql_actq ql_actq_native(int32_t weight_type)
{
    const ql_type_traits *tr = ql_type_get(weight_type);
    return tr ? tr->native_act : QL_ACTQ_F32;
}

/* ------------------------------------------------------------------------- */
/* Row kernels                                                                 */

/* Rounds one block of bs values of x into y (in place allowed) through a block
 * format: quantize with the traits' function, decode with its dequantize. */
static void through_format(const ql_type_traits *tr, const float *x, float *y)
{
    /* Large enough for one block of any activation format (Q8_K: 292 bytes). */
    _Alignas(16) unsigned char blk[sizeof(ql_block_q8_K)];
    tr->quantize(x, blk, 1, tr->block_size, NULL);
    tr->dequantize(blk, y, 1, tr->block_size);
}

void ql_round_through_type(int32_t type, const float *x, float *xq, int64_t n)
{
    const ql_type_traits *tr = ql_type_get(type);
    QL_ASSERT(tr && tr->quantize && tr->dequantize && !tr->needs_grids && tr->block_size > 1 &&
              tr->block_size <= QL_QK_K && tr->type_size <= sizeof(ql_block_q8_K) &&
              n % tr->block_size == 0);
    for (int64_t i = 0; i < n; i += tr->block_size)
        through_format(tr, x + i, xq + i);
}

/* q8x2 of one 32-value block (arithmetic in actquant.h). */
static void q8x2_block(const float *x, float *y)
{
    ql_block_q8_0 b;
    ql_quantize_row_q8_0_ref(x, &b, QL_QK8_0);
    const float d = ql_fp16_to_fp32(b.d);
    const float d2 = d / 128.0f; /* exact: a power-of-two scaling of a widened half */
    const float id2 = d != 0.0f ? 128.0f / d : 0.0f;
    for (int j = 0; j < QL_QK8_0; j++) {
        const float e = x[j] - d * (float)b.qs[j];
        float r = ql_roundf(e * id2);
        r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
        const int32_t k = 128 * (int32_t)b.qs[j] + (int32_t)r;
        y[j] = d2 * (float)k;
    }
}

void ql_actq_round(ql_actq q, const float *x, float *xq, int64_t n)
{
    QL_ASSERT(ql_actq_fits(q, n));
    switch (q) {
    case QL_ACTQ_F32:
        if (xq != x)
            memcpy(xq, x, (size_t)n * sizeof(float));
        return;
    case QL_ACTQ_F16:
        for (int64_t i = 0; i < n; i++)
            xq[i] = ql_fp16_round(x[i]);
        return;
    case QL_ACTQ_BF16:
        for (int64_t i = 0; i < n; i++)
            xq[i] = ql_bf16_to_fp32(ql_fp32_to_bf16(x[i]));
        return;
    case QL_ACTQ_Q8_0:
        ql_round_through_type(QL_TYPE_Q8_0, x, xq, n);
        return;
    case QL_ACTQ_Q8_1:
        ql_round_through_type(QL_TYPE_Q8_1, x, xq, n);
        return;
    case QL_ACTQ_Q8_K:
        ql_round_through_type(QL_TYPE_Q8_K, x, xq, n);
        return;
    case QL_ACTQ_Q8X2:
        for (int64_t i = 0; i < n; i += QL_QK8_0)
            q8x2_block(x + i, xq + i);
        return;
    default:
        QL_ASSERT(!"unknown activation rounding");
    }
}
