/* Q8_0_XC: a hand-checked block where the outlier weight becomes exact while plain
 * Q8_0 cannot represent it, plain Q8_0 bytes where there is no outlier, the fallback
 * for weights no fp16 scale can make exact, and the tensor API. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "base/util.h"
#include "formats/quant_legacy.h"
#include "formats/quant_xc.h"
#include "formats/types.h"
#include "qltest.h"

/* Weighted error of a decoded block (outlier columns weigh QL_XC_OUTLIER_WEIGHT). */
static double weighted_error(const float *x, const ql_block_q8_0 *b, const uint8_t *mask)
{
    float y[32];
    ql_dequantize_q8_0(b, y, 1, 32);
    double e = 0;
    for (int j = 0; j < 32; j++) {
        double d = (double)x[j] - (double)y[j];
        e += (mask[j] ? QL_XC_OUTLIER_WEIGHT : 1.0) * d * d;
    }
    return e;
}

/* Outlier 3.0 in column 5, the other weights multiples of 1/32 below 0.5.
 * Plain Q8_0: d = fp16(3/127) = 0x260c (0.0236206055), level 127, decodes to
 * 2.99981689: not exact. Candidates d = fp16(3/m): exact for m = 1, 2, 3, 4, 6, 8, 12,
 * 16, 24, 32, 48, 64, 96; m = 96 gives d = 1/32 (fp16 0x2800), the finest exact scale
 * that does not clip (m = 127 would need 3/d <= 127 with d = 0.0236206, and
 * 3/0.0236206 = 127.008 clips), and it represents every other weight exactly too,
 * so its weighted error is 0 and it wins. */
static void outlier_made_exact(void)
{
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)((j * 5) % 15 - 7) / 32.0f;
    x[5] = 3.0f;
    uint8_t mask[32] = {0};
    mask[5] = 1;

    ql_block_q8_0 plain, xc;
    ql_quantize_row_q8_0_ref(x, &plain, 32);
    CHECK_EQ_INT(plain.d, 0x260c);
    CHECK_EQ_INT(plain.qs[5], 127);
    float yp[32];
    ql_dequantize_q8_0(&plain, yp, 1, 32);
    CHECK(yp[5] != 3.0f);
    CHECK(yp[5] == 2.99981689453125f);

    ql_xc_stats st = {0, 0, 0, 0};
    ql_quantize_row_q8_0_xc(x, &xc, 32, mask, &st);
    CHECK_EQ_INT(xc.d, 0x2800);
    CHECK_EQ_INT(xc.qs[5], 96);
    for (int j = 0; j < 32; j++)
        if (j != 5)
            CHECK_EQ_INT(xc.qs[j], (j * 5) % 15 - 7);
    float y[32];
    ql_dequantize_q8_0(&xc, y, 1, 32);
    for (int j = 0; j < 32; j++)
        CHECK(y[j] == x[j]);
    CHECK_EQ_INT(st.blocks, 1);
    CHECK_EQ_INT(st.outlier_blocks, 1);
    CHECK_EQ_INT(st.exact_blocks, 1);
    CHECK_EQ_INT(st.approx_blocks, 0);
    CHECK(weighted_error(x, &xc, mask) < weighted_error(x, &plain, mask));
}

/* Without outlier columns (or with an all-zero outlier) the bytes are plain Q8_0. */
static void plain_blocks_unchanged(void)
{
    float x[64];
    for (int j = 0; j < 64; j++)
        x[j] = sinf((float)j * 0.7f) * (j == 40 ? 9.0f : 1.0f);
    x[3] = 0.0f;
    uint8_t mask[64] = {0};
    mask[3] = 1; /* outlier column holding 0: exact under any scale */
    ql_block_q8_0 a[2], b[2];
    ql_quantize_row_q8_0_ref(x, a, 64);
    ql_xc_stats st = {0, 0, 0, 0};
    ql_quantize_row_q8_0_xc(x, b, 64, mask, &st);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK_EQ_INT(st.blocks, 2);
    CHECK_EQ_INT(st.outlier_blocks, 0);
}

/* 0.1f has a 24-bit mantissa: no fp16 scale times an integer <= 127 reproduces it.
 * The block then takes the admissible candidate of lowest weighted error, never worse
 * than plain Q8_0 under that error. */
static void inexact_outlier_falls_back(void)
{
    uint64_t s = 99;
    int approx = 0;
    for (int t = 0; t < 200; t++) {
        float x[32];
        uint8_t mask[32] = {0};
        for (int j = 0; j < 32; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[j] = (float)((int)(s >> 40) % 2001 - 1000) / 37000.0f;
        }
        int o = t % 32;
        x[o] = t == 0 ? 0.1f : x[o] * 25.0f;
        mask[o] = 1;
        ql_block_q8_0 plain, xc;
        ql_quantize_row_q8_0_ref(x, &plain, 32);
        ql_xc_stats st = {0, 0, 0, 0};
        ql_quantize_row_q8_0_xc(x, &xc, 32, mask, &st);
        CHECK_EQ_INT(st.outlier_blocks, 1);
        if (t == 0)
            CHECK_EQ_INT(st.approx_blocks, 1);
        approx += (int)st.approx_blocks;
        CHECK_MSG(st.approx_blocks == 0 ||
                      weighted_error(x, &xc, mask) <= weighted_error(x, &plain, mask),
                  "block %d: XC error %.9g > plain %.9g", t, weighted_error(x, &xc, mask),
                  weighted_error(x, &plain, mask));
        /* Never clipped: every level within [-127, 127] and the largest one used sanely. */
        for (int j = 0; j < 32; j++)
            CHECK(xc.qs[j] >= -127 && xc.qs[j] <= 127);
    }
    CHECK(approx > 0);
}

static void tensor_api(void)
{
    enum { R = 50, C = 256 };
    float *x = malloc(sizeof(float) * R * C);
    for (int i = 0; i < R * C; i++)
        x[i] = (float)((i * 2654435761u) % 1000) / 4096.0f - 0.12f;
    for (int r = 0; r < R; r++)
        x[r * C + 7] = (float)(r % 9 + 1) * 0.75f; /* exact-friendly outlier values */
    const int64_t cols[] = {7, 130, 7};
    size_t bytes = ql_row_size(QL_TYPE_Q8_0, C) * R;
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    ql_xc_stats sa = {0, 0, 0, 0}, sb = {0, 0, 0, 0};
    ql_error err;
    ql_threads_set(1);
    CHECK_OK(ql_quant_q8_0_xc(x, R, C, cols, 3, a, bytes, &sa, &err), &err);
    ql_threads_set(3);
    CHECK_OK(ql_quant_q8_0_xc(x, R, C, cols, 3, b, bytes, &sb, &err), &err);
    ql_threads_set(0);
    CHECK(memcmp(a, b, bytes) == 0);
    CHECK(memcmp(&sa, &sb, sizeof sa) == 0);
    CHECK_EQ_INT(sa.blocks, R * C / 32);
    CHECK_EQ_INT(sa.outlier_blocks, 2 * R);
    /* Column 7 holds k * 0.75 (k = 1..9): always exactly representable. */
    float *y = malloc(sizeof(float) * R * C);
    ql_dequantize_q8_0(a, y, R, C);
    for (int r = 0; r < R; r++)
        CHECK(y[r * C + 7] == x[r * C + 7]);

    const int64_t bad[] = {256};
    CHECK_EQ_INT(ql_quant_q8_0_xc(x, R, C, bad, 1, a, bytes, NULL, &err), QL_EINVAL);
    CHECK(strstr(err.msg, "column 256") != NULL);
    CHECK_EQ_INT(ql_quant_q8_0_xc(x, R, C, cols, 3, a, bytes - 1, NULL, &err), QL_EINVAL);
    CHECK_EQ_INT(ql_quant_q8_0_xc(x, R, 100, cols, 1, a, bytes, NULL, &err), QL_EINVAL);
    free(x);
    free(y);
    free(a);
    free(b);
}

int main(void)
{
    outlier_made_exact();
    plain_blocks_unchanged();
    inexact_outlier_falls_back();
    tensor_api();
    return qlt_done();
}
