/* qlab: INT8_ROW, the per-row int8 scheme of the 16 MB model-artifact challenge,
 * whose size the challenge counts as zlib level-9 bytes (formats/zlib_size.h).
 *
 * Per row of n values (PyTorch semantics of the challenge's quantize_float_tensor):
 *   clip  = quantile(|w|, 0.9999984)   torch.quantile, linear interpolation at rank
 *                                       q*(n-1), computed in float32 as torch does
 *   scale = max(clip / 127, 1/127)      float32; stored rounded to fp16
 *   q_j   = clamp(round_half_even(clamp(w_j, -clip, clip) / scale), -127, 127)
 *   w^_j  = q_j * fp16(scale)
 * The levels are computed with the float32 scale and decoded with the stored fp16
 * scale, exactly as the challenge's round trip does.
 *
 * Row layout in qlab (types.h: block_size 0, type_size 2): fp16 scale (2 bytes,
 * little endian) followed by the n int8 levels; a tensor is nrows such rows.
 * 1-D tensors and tensors of at most QL_INT8ROW_KEEP_MAX elements are not quantized
 * (the type policy keeps them as F32 / F16; see quant.h). */
#ifndef QL_QUANT_INT8ROW_H
#define QL_QUANT_INT8ROW_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* The clip percentile (of |w| per row) and the small-tensor threshold of the challenge. */
#define QL_INT8ROW_CLIP_PERCENTILE 99.99984
#define QL_INT8ROW_KEEP_MAX        65536

/* The quantile needs the top (n - floor(q*(n-1))) magnitudes of a row; the kernels keep
 * them in a fixed array of this many entries, which covers rows of up to about
 * 39 million values. ql_int8row_row_ok() tells whether a row length is supported. */
#define QL_INT8ROW_MAX_TOP 64

/* True when rows of n values are supported (n >= 1 and the quantile fits the kernel). */
int ql_int8row_row_ok(int64_t n);

/* The float32 clip value of one row (torch.quantile(|x|, 0.9999984) semantics). */
float ql_int8row_clip(const float *x, int64_t n);

/* Tensor-slot functions (types.h); imatrix is ignored. */
size_t ql_quantize_int8_row(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                            const float *imatrix);
void ql_dequantize_int8_row(const void *src, float *dst, int64_t nrows, int64_t n_per_row);


#endif
