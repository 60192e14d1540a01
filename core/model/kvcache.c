/* K/V cache roundings as attention hooks (see kvcache.h). */
#include "model/kvcache.h"

#include <string.h>

#include "base/util.h"
#include "formats/quant_legacy.h"
#include "formats/round.h"
#include "formats/types.h"

/* Every hook rounds n_rows * row_len contiguous values; rows are whole blocks. */
static void round_f16(void *ctx, float *x, int64_t n_rows, int64_t row_len)
{
    (void)ctx;
    ql_actq_round(QL_ACTQ_F16, x, x, n_rows * row_len);
}

static void round_q8_0(void *ctx, float *x, int64_t n_rows, int64_t row_len)
{
    (void)ctx;
    ql_actq_round(QL_ACTQ_Q8_0, x, x, n_rows * row_len);
}

static void round_q4_0(void *ctx, float *x, int64_t n_rows, int64_t row_len)
{
    (void)ctx;
    ql_round_through_type(QL_TYPE_Q4_0, x, x, n_rows * row_len);
}

ql_status ql_kv_rounding(int32_t type, int head_dim, ql_attn_rounding *r, ql_error *err)
{
    memset(r, 0, sizeof *r);
    switch (type) {
    case QL_TYPE_F32:
        ql_strlcpy(r->name, "f32", sizeof r->name);
        return QL_OK;
    case QL_TYPE_F16:
        r->round_k = r->round_v = r->round_q = r->round_p = round_f16;
        ql_strlcpy(r->name, "f16", sizeof r->name);
        return QL_OK;
    case QL_TYPE_Q8_0:
    case QL_TYPE_Q4_0:
        if (head_dim <= 0 || head_dim % QL_QK8_0 != 0)
            return ql_error_set(err, QL_EUNSUPPORTED,
                                "K/V cache type %s: head size %d is not a multiple of %d "
                                "(llama.cpp cannot hold a quantized cache for such heads)",
                                ql_type_name(type), head_dim, QL_QK8_0);
        r->round_k = r->round_v = type == QL_TYPE_Q8_0 ? round_q8_0 : round_q4_0;
        r->round_q = round_q8_0; /* vec_dot_type of Q8_0 and of Q4_0 */
        r->round_p = NULL;       /* flash attention accumulates in f32 */
        ql_strlcpy(r->name, type == QL_TYPE_Q8_0 ? "q8_0" : "q4_0", sizeof r->name);
        return QL_OK;
    default:
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "K/V cache type %s is not supported (f32, f16, q8_0, q4_0)",
                            ql_type_name(type));
    }
}

ql_status ql_forward_set_kv_type(ql_forward *fw, int32_t type, ql_error *err)
{
    /* The hooks of each cache type as llama.cpp's CPU backend applies them: kvcache.h. */
    ql_attn_rounding r;
    ql_status st = ql_kv_rounding(type, ql_forward_hparams(fw)->head_dim, &r, err);
    if (st)
        return st;
    ql_forward_set_attn_rounding(fw, type == QL_TYPE_F32 ? NULL : &r);
    return QL_OK;
}
