/* INT8_ROW: hand-checked rows (exact scale, round half to even, percentile clipping
 * with interpolation, the 1/127 scale floor), the top-k percentile search against a
 * full sort, and the zlib size of serialized tensors against compress2. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/fp16.h"
#include "formats/quant_int8row.h"
#include "formats/zlib_size.h"
#include "formats/types.h"
#include "qltest.h"

static uint16_t row_scale(const uint8_t *row)
{
    uint16_t s;
    memcpy(&s, row, 2);
    return s;
}

/* Two equal maxima: the quantile is exactly 127, so scale = 1 and the levels are
 * x rounded half to even (2.5 -> 2, -3.5 -> -4, 126.5 -> 126, -0.5 -> 0). */
static void exact_scale_row(void)
{
    const float x[8] = {127.0f, -127.0f, 2.5f, -3.5f, 0.5f, 1.5f, -0.5f, 126.5f};
    const int8_t want[8] = {127, -127, 2, -4, 0, 2, 0, 126};
    uint8_t q[2 + 8];
    CHECK(ql_int8row_clip(x, 8) == 127.0f);
    CHECK_EQ_INT(ql_quantize_int8_row(x, q, 1, 8, NULL), 10);
    CHECK_EQ_INT(row_scale(q), 0x3C00); /* fp16(1.0) */
    for (int j = 0; j < 8; j++)
        CHECK_EQ_INT((int8_t)q[2 + j], want[j]);
    float y[8];
    ql_dequantize_int8_row(q, y, 1, 8);
    for (int j = 0; j < 8; j++)
        CHECK(y[j] == (float)want[j]);
}

/* One outlier among ones. rank = fl(fl(0.9999984) * 7) = 6.999988555908203, so the
 * clip interpolates between sorted[6] = 1 and sorted[7] = 100 with weight
 * w = 0.9999885559082031: clip = 100 - 99 * (1 - w) = 99.99887084960938 (float32,
 * bits 0x42c7ff6c). scale = clip / 127 = 0.78739268, stored as fp16 0x3a4d
 * (0.78759765625); the clipped outlier is level 127 and decodes to 100.0249. */
static void clipped_row(void)
{
    const float x[8] = {100.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, -1.0f};
    uint8_t q[2 + 8];
    float clip = ql_int8row_clip(x, 8);
    uint32_t bits;
    memcpy(&bits, &clip, 4);
    CHECK_EQ_INT(bits, 0x42c7ff6c);
    ql_quantize_int8_row(x, q, 1, 8, NULL);
    CHECK_EQ_INT(row_scale(q), 0x3a4d);
    CHECK_EQ_INT((int8_t)q[2], 127);
    for (int j = 1; j < 7; j++)
        CHECK_EQ_INT((int8_t)q[2 + j], 1);
    CHECK_EQ_INT((int8_t)q[2 + 7], -1);
    float y[8];
    ql_dequantize_int8_row(q, y, 1, 8);
    CHECK(y[0] == 100.02490234375f);
    CHECK(y[1] == 0.78759765625f);
}

/* Small weights: clip/127 = 0.0039 is below the floor, so scale = 1/127 (fp16 0x2008).
 * 0.5 is first clipped to the quantile 0.4999977 (between sorted 0.02 and 0.5), so its
 * level is round(63.4997) = 63, not the 64 that 63.5 would round to. */
static void floored_row(void)
{
    const float x[4] = {0.01f, -0.02f, 0.5f, 0.0f};
    const int8_t want[4] = {1, -3, 63, 0};
    uint8_t q[2 + 4];
    ql_quantize_int8_row(x, q, 1, 4, NULL);
    CHECK_EQ_INT(row_scale(q), 0x2008);
    for (int j = 0; j < 4; j++)
        CHECK_EQ_INT((int8_t)q[2 + j], want[j]);

    const float zero[5] = {0};
    uint8_t qz[2 + 5];
    ql_quantize_int8_row(zero, qz, 1, 5, NULL);
    CHECK_EQ_INT(row_scale(qz), 0x2008);
    for (int j = 0; j < 5; j++)
        CHECK_EQ_INT(qz[2 + j], 0);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* The top-k search must give what a full sort gives (same float formulas). */
static void clip_matches_full_sort(void)
{
    const int64_t lens[] = {1, 2, 3, 100, 4096, 625001, 1500000};
    uint64_t s = 7;
    for (size_t t = 0; t < sizeof lens / sizeof lens[0]; t++) {
        int64_t n = lens[t];
        float *x = malloc(sizeof(float) * (size_t)n), *a = malloc(sizeof(float) * (size_t)n);
        for (int64_t j = 0; j < n; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[j] = (float)((int64_t)(s >> 33) % 2000001 - 1000000) / 1000.0f;
            a[j] = fabsf(x[j]);
        }
        qsort(a, (size_t)n, sizeof(float), cmp_float);
        float rank = (float)(QL_INT8ROW_CLIP_PERCENTILE / 100.0) * (float)(n - 1);
        int64_t lo_i = (int64_t)rank, hi_i = (int64_t)ceilf(rank);
        float w = rank - (float)lo_i, lo = a[lo_i], hi = a[hi_i];
        float want = w < 0.5f ? lo + w * (hi - lo) : hi - (hi - lo) * (1.0f - w);
        CHECK(ql_int8row_row_ok(n));
        CHECK_MSG(ql_int8row_clip(x, n) == want, "n=%lld: clip %.9g, sort gives %.9g", (long long)n,
                  (double)ql_int8row_clip(x, n), (double)want);
        free(x);
        free(a);
    }
    CHECK(!ql_int8row_row_ok(0));
    CHECK(!ql_int8row_row_ok(INT64_C(100000000000)));
}

/* The zlib count equals compress2 level 9 over the planar serialization. */
static void zlib_size(void)
{
    enum { R = 40, C = 300 };
    float *x = malloc(sizeof(float) * R * C);
    for (int i = 0; i < R * C; i++)
        x[i] = (float)((i * 7919) % 255 - 127) / 64.0f;
    uint8_t *q8 = malloc((size_t)R * (C + 2));
    uint16_t *h = malloc(sizeof(uint16_t) * 64);
    ql_quantize_int8_row(x, q8, R, C, NULL);
    for (int i = 0; i < 64; i++)
        h[i] = ql_fp32_to_fp16(x[i]);
    ql_zlib_tensor t[2] = {{QL_TYPE_F16, h, 1, 64}, {QL_TYPE_INT8_ROW, q8, R, C}};
    uint64_t got = 0;
    ql_error err;
    CHECK_OK(ql_zlib_size_tensors(t, 2, &got, &err), &err);

    size_t total = 128 + (size_t)R * C + 2 * R;
    uint8_t *ser = malloc(total);
    memcpy(ser, h, 128);
    for (int r = 0; r < R; r++) {
        memcpy(ser + 128 + (size_t)r * C, q8 + (size_t)r * (C + 2) + 2, C);
        memcpy(ser + 128 + (size_t)R * C + 2 * r, q8 + (size_t)r * (C + 2), 2);
    }
    uLongf zlen = compressBound(total);
    uint8_t *z = malloc(zlen);
    CHECK(compress2(z, &zlen, ser, total, 9) == Z_OK);
    CHECK_EQ_INT(got, zlen);
    CHECK(got < total);

    ql_zlib_tensor bad = {QL_TYPE_Q4_0, h, 1, 48};
    CHECK_EQ_INT(ql_zlib_size_tensors(&bad, 1, &got, &err), QL_EINVAL);
    free(x);
    free(q8);
    free(h);
    free(ser);
    free(z);
}

int main(void)
{
    exact_scale_row();
    clipped_row();
    floored_row();
    clip_matches_full_sort();
    zlib_size();
    return qlt_done();
}
