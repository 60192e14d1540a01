/* Q8_0_XC: outlier-exact Q8_0 block scales. See quant_xc.h. */
#include "formats/quant_xc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "base/util.h"
#include "formats/quant_common.h"
#include "formats/types.h"

/* Weighted error of a block quantized with the decoded scale d, levels round(x/d). */
static double block_error(const float *x, const uint8_t *is_outlier, float d)
{
    double e = 0;
    for (int j = 0; j < QL_QK8_0; j++) {
        const float q = ql_roundf(x[j] / d);
        const double diff = (double)x[j] - (double)(q * d);
        e += (is_outlier[j] ? QL_XC_OUTLIER_WEIGHT : 1.0) * diff * diff;
    }
    return e;
}

/* Weighted error of plain Q8_0 on the block, with ggml's own levels (x * 1/d computed
 * from the unrounded d), so the comparison is with the bytes plain Q8_0 writes. */
static double plain_error(const float *x, const uint8_t *is_outlier)
{
    ql_block_q8_0 b;
    float y[QL_QK8_0];
    ql_quantize_row_q8_0_ref(x, &b, QL_QK8_0);
    ql_dequantize_q8_0(&b, y, 1, QL_QK8_0);
    double e = 0;
    for (int j = 0; j < QL_QK8_0; j++) {
        const double diff = (double)x[j] - (double)y[j];
        e += (is_outlier[j] ? QL_XC_OUTLIER_WEIGHT : 1.0) * diff * diff;
    }
    return e;
}

typedef enum { BLOCK_PLAIN, BLOCK_EXACT, BLOCK_APPROX_PLAIN, BLOCK_APPROX } block_choice;

/* Searches the candidate scales of one block (see the header). BLOCK_PLAIN: no nonzero
 * outlier weight. BLOCK_APPROX_PLAIN: no exact candidate and plain Q8_0 has the lowest
 * weighted error. Otherwise *d_out is the chosen fp16 scale. */
static block_choice choose_scale(const float *x, const uint8_t *is_outlier, uint16_t *d_out)
{
    float amax = 0;
    bool any = false;
    for (int j = 0; j < QL_QK8_0; j++) {
        amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        any = any || (is_outlier[j] && x[j] != 0.0f);
    }
    if (!any)
        return BLOCK_PLAIN;

    bool have_exact = false, have_any = false;
    double best_exact = 0, best_any = 0;
    uint16_t d_exact = 0, d_any = 0;
    for (int o = 0; o < QL_QK8_0; o++) {
        if (!is_outlier[o] || x[o] == 0.0f)
            continue;
        const float w = fabsf(x[o]);
        for (int m = 1; m <= 127; m++) {
            const uint16_t h = ql_fp32_to_fp16(w / (float)m);
            const float d = ql_fp16_to_fp32(h);
            if (!(d > 0) || isinf(d) || amax / d > 127.0f)
                continue;
            const bool exact = (float)m * d == w;
            if (!exact && have_exact)
                continue;
            const double e = block_error(x, is_outlier, d);
            if (exact && (!have_exact || e < best_exact)) {
                have_exact = true;
                best_exact = e;
                d_exact = h;
            }
            if (!have_any || e < best_any) {
                have_any = true;
                best_any = e;
                d_any = h;
            }
        }
    }
    if (have_exact) {
        *d_out = d_exact;
        return BLOCK_EXACT;
    }
    /* No exact candidate: plain Q8_0 competes too (ties keep plain). */
    if (!have_any || plain_error(x, is_outlier) <= best_any)
        return BLOCK_APPROX_PLAIN;
    *d_out = d_any;
    return BLOCK_APPROX;
}

void ql_quantize_row_q8_0_xc(const float *x, ql_block_q8_0 *y, int64_t n, const uint8_t *is_outlier,
                             ql_xc_stats *stats)
{
    for (int64_t b = 0; b < n / QL_QK8_0; b++, x += QL_QK8_0, is_outlier += QL_QK8_0) {
        uint16_t h = 0;
        const block_choice c = choose_scale(x, is_outlier, &h);
        if (c == BLOCK_PLAIN || c == BLOCK_APPROX_PLAIN) {
            ql_quantize_row_q8_0_ref(x, &y[b], QL_QK8_0);
        } else {
            const float d = ql_fp16_to_fp32(h);
            y[b].d = h;
            for (int j = 0; j < QL_QK8_0; j++)
                y[b].qs[j] = (int8_t)ql_roundf(x[j] / d);
        }
        if (stats) {
            stats->blocks++;
            if (c != BLOCK_PLAIN)
                stats->outlier_blocks++;
            if (c == BLOCK_EXACT)
                stats->exact_blocks++;
            else if (c != BLOCK_PLAIN)
                stats->approx_blocks++;
        }
    }
}

ql_status ql_quant_q8_0_xc(const float *src, int64_t nrows, int64_t n_per_row,
                           const int64_t *outlier_cols, int64_t n_outliers, void *dst,
                           size_t dst_size, ql_xc_stats *stats, ql_error *err)
{
    const size_t row_size = ql_row_size(QL_TYPE_Q8_0, n_per_row);
    if (row_size == 0 || nrows < 0)
        return ql_error_set(err, QL_EINVAL,
                            "Q8_0_XC: row length %lld is not a positive multiple of 32",
                            (long long)n_per_row);
    if (nrows > 0 && (size_t)nrows > dst_size / row_size)
        return ql_error_set(err, QL_EINVAL,
                            "Q8_0_XC: output buffer of %zu bytes is smaller than %lld rows of "
                            "%zu bytes",
                            dst_size, (long long)nrows, row_size);
    if (n_outliers < 0 || (n_outliers > 0 && !outlier_cols))
        return ql_error_set(err, QL_EINVAL, "Q8_0_XC: invalid outlier column list");
    for (int64_t i = 0; i < n_outliers; i++)
        if (outlier_cols[i] < 0 || outlier_cols[i] >= n_per_row)
            return ql_error_set(err, QL_EINVAL,
                                "Q8_0_XC: outlier column %lld (entry %lld) is outside the row "
                                "of %lld columns",
                                (long long)outlier_cols[i], (long long)i, (long long)n_per_row);
    uint8_t *mask = calloc((size_t)n_per_row, 1);
    if (!mask)
        return ql_error_set(err, QL_ENOMEM, "Q8_0_XC: out of memory for the outlier mask");
    for (int64_t i = 0; i < n_outliers; i++)
        mask[outlier_cols[i]] = 1;

    int64_t blocks = 0, outlier_blocks = 0, exact_blocks = 0, approx_blocks = 0;
#pragma omp parallel for schedule(dynamic, 16) num_threads(ql_threads_get()) \
    reduction(+ : blocks, outlier_blocks, exact_blocks, approx_blocks) if (nrows > 16)
    for (int64_t r = 0; r < nrows; r++) {
        ql_xc_stats s = {0, 0, 0, 0};
        ql_quantize_row_q8_0_xc(src + r * n_per_row,
                                (ql_block_q8_0 *)((char *)dst + (size_t)r * row_size), n_per_row,
                                mask, &s);
        blocks += s.blocks;
        outlier_blocks += s.outlier_blocks;
        exact_blocks += s.exact_blocks;
        approx_blocks += s.approx_blocks;
    }
    free(mask);
    if (stats) {
        stats->blocks += blocks;
        stats->outlier_blocks += outlier_blocks;
        stats->exact_blocks += exact_blocks;
        stats->approx_blocks += approx_blocks;
    }
    return QL_OK;
}
