/* INT8_ROW. See quant_int8row.h. */
#include "formats/quant_int8row.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "formats/type_ids.h"

/* torch.quantile receives q as a float32 tensor, so the rank is a float32 product. */
static float clip_q(void)
{
    return (float)(QL_INT8ROW_CLIP_PERCENTILE / 100.0);
}

/* Positions floor(rank) .. n-1 of the ascending sort, i.e. the top n - floor(rank). */
static int64_t top_count(int64_t n, float *rank)
{
    *rank = clip_q() * (float)(n - 1);
    return n - (int64_t)*rank;
}

int ql_int8row_row_ok(int64_t n)
{
    if (n < 1)
        return 0;
    float rank;
    return top_count(n, &rank) <= QL_INT8ROW_MAX_TOP;
}

float ql_int8row_clip(const float *x, int64_t n)
{
    float rank;
    const int64_t k = top_count(n, &rank);
    QL_ASSERT(k >= 1 && k <= QL_INT8ROW_MAX_TOP);

    /* The k largest magnitudes, descending: top[i] is sorted[n - 1 - i]. */
    float top[QL_INT8ROW_MAX_TOP];
    int64_t have = 0;
    for (int64_t j = 0; j < n; j++) {
        const float a = fabsf(x[j]);
        if (have == k && !(a > top[k - 1]))
            continue;
        int64_t p = have < k ? have++ : k - 1;
        while (p > 0 && top[p - 1] < a) {
            top[p] = top[p - 1];
            p--;
        }
        top[p] = a;
    }
    const int64_t below = (int64_t)rank;
    const int64_t above = (int64_t)ceilf(rank);
    const float lo = top[n - 1 - below];
    const float hi = top[n - 1 - above];
    const float weight = rank - (float)below;
    /* torch's lerp: the form that is exact at the nearer end. */
    return weight < 0.5f ? lo + weight * (hi - lo) : hi - (hi - lo) * (1.0f - weight);
}

size_t ql_quantize_int8_row(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                            const float *imatrix)
{
    uint8_t *out = dst;
    const float floor_scale = (float)(1.0 / 127.0);
    for (int64_t r = 0; r < nrows; r++, src += n_per_row, out += 2 + n_per_row) {
        const float clip = ql_int8row_clip(src, n_per_row);
        float scale = clip / 127.0f;
        if (scale < floor_scale)
            scale = floor_scale;
        const uint16_t s16 = ql_fp32_to_fp16(scale);
        memcpy(out, &s16, sizeof s16);
        int8_t *q = (int8_t *)(out + 2);
        for (int64_t j = 0; j < n_per_row; j++) {
            float v = src[j];
            v = v < clip ? v : clip;
            v = v > -clip ? v : -clip;
            float l = nearbyintf(v / scale); /* round half to even, like torch.round */
            l = l < 127.0f ? l : 127.0f;
            l = l > -127.0f ? l : -127.0f;
            q[j] = (int8_t)l;
        }
    }
    return (size_t)nrows * (size_t)(2 + n_per_row);
}

void ql_dequantize_int8_row(const void *src, float *dst, int64_t nrows, int64_t n_per_row)
{
    const uint8_t *in = src;
    for (int64_t r = 0; r < nrows; r++, in += 2 + n_per_row, dst += n_per_row) {
        uint16_t s16;
        memcpy(&s16, in, sizeof s16);
        const float scale = ql_fp16_to_fp32(s16);
        const int8_t *q = (const int8_t *)(in + 2);
        for (int64_t j = 0; j < n_per_row; j++)
            dst[j] = (float)q[j] * scale;
    }
}
