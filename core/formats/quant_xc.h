/* qlab: Q8_0_XC, Q8_0 bytes with outlier-exact block scales.
 *
 * The output is plain Q8_0 (quant_legacy.h: fp16 d, 32 int8 levels per block) that any
 * Q8_0 reader decodes. Only the choice of d differs, in blocks that contain at least
 * one calibrated outlier column (an input channel whose activations are large, so its
 * weight's rounding error is amplified):
 *
 * Candidates. For every outlier column o of the block with w_o != 0 and every integer
 * m = 1..127: d = fp16(|w_o| / m), the scale as the decoder sees it. A candidate is
 * admissible when it does not clip the block: max_j |x_j| / d <= 127 (float32).
 * It is exact when the decoder reproduces the outlier bit for bit: m * d == |w_o| in
 * float32 (the decoder computes q * d). The levels of a candidate are
 * q_j = round(x_j / d) (half away from zero), so the outlier gets q_o = +-m.
 *
 * Choice. Weighted squared error E(d) = sum_j c_j (x_j - q_j d)^2 in double, with
 * c_j = 10^4 for outlier columns and 1 otherwise. Among the exact admissible candidates
 * the one with the lowest E wins (ties: lower column, then lower m). When no candidate
 * is exact (typical for float32 weights, whose 24-bit mantissa rarely equals an 11-bit
 * fp16 scale times a 7-bit integer; weights from F16/BF16 checkpoints usually are
 * exact), the lowest E among all admissible candidates and plain Q8_0's own bytes wins
 * (ties keep plain Q8_0), so such a block is never worse than plain Q8_0 under E.
 * Blocks without outlier columns, or whose outlier weights are all zero, are
 * byte-identical to plain Q8_0. */
#ifndef QL_QUANT_XC_H
#define QL_QUANT_XC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "formats/quant_legacy.h"

/* Weight of an outlier column in the scale choice (other columns weigh 1). */
#define QL_XC_OUTLIER_WEIGHT 1e4

typedef struct {
    int64_t blocks;         /* blocks written */
    int64_t outlier_blocks; /* blocks with at least one nonzero outlier weight */
    int64_t exact_blocks;   /* ... whose chosen scale reproduces an outlier exactly */
    /* ... where no admissible candidate was exact: the block holds the best approximate
     * candidate or plain Q8_0. */
    int64_t approx_blocks;
} ql_xc_stats;

/* Quantizes one row of n values (a multiple of 32). is_outlier: n flags, nonzero for
 * outlier columns. stats (may be NULL) is incremented. No allocation. */
void ql_quantize_row_q8_0_xc(const float *x, ql_block_q8_0 *y, int64_t n, const uint8_t *is_outlier,
                             ql_xc_stats *stats);

/* Quantizes a row-major (nrows, n_per_row) matrix; outlier_cols lists column indices
 * (any order, duplicates allowed) in [0, n_per_row). dst must hold dst_size >=
 * nrows * ql_row_size(Q8_0, n_per_row) bytes. Multi-threaded over rows with
 * ql_threads_get() threads; bytes and stats do not depend on the thread count.
 * stats may be NULL. */
ql_status ql_quant_q8_0_xc(const float *src, int64_t nrows, int64_t n_per_row,
                           const int64_t *outlier_cols, int64_t n_outliers, void *dst,
                           size_t dst_size, ql_xc_stats *stats, ql_error *err);

#endif
