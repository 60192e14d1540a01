/* qlab: ggml's non-linear 4-bit formats IQ4_NL and IQ4_XS.
 *
 * Both store 4-bit indices into the fixed table ql_iq4nl_values (quant_common.h:
 * -127 .. 113, denser near zero), so value = scale * table[q]. IQ4_NL has one fp16
 * scale per 32 values; IQ4_XS has one fp16 d per 256 values and a 6-bit signed
 * scale per 32-value sub-block: value = d * (ls - 32) * table[q].
 *
 * Nibble layout (both): in each 32-value group, byte j holds element j (low nibble)
 * and element j + 16 (high nibble).
 *
 * Quantization follows ggml_quantize_chunk, which always calls quantize_iq4_nl /
 * quantize_iq4_xs: without importance weights the search weighs values by x^2, with
 * them by I_j * sqrt(sigma^2 + x_j^2); both try 15 scales around max/-127 and refit. */
#ifndef QL_QUANT_IQ4_H
#define QL_QUANT_IQ4_H

#include <stddef.h>
#include <stdint.h>

#define QL_QK4_NL 32

typedef struct {
    uint16_t d;     /* fp16 scale */
    uint8_t qs[16]; /* 32 x 4-bit table indices */
} ql_block_iq4_nl;
_Static_assert(sizeof(ql_block_iq4_nl) == 18, "IQ4_NL block is 18 bytes");

typedef struct {
    uint16_t d;          /* fp16 super-block scale */
    uint16_t scales_h;   /* high 2 bits of the 8 sub-block scales: sub-block b at bits 2b */
    uint8_t scales_l[4]; /* low 4 bits: sub-block b in byte b/2, nibble b%2 */
    uint8_t qs[128];     /* 256 x 4-bit table indices, 16 bytes per 32-value sub-block */
} ql_block_iq4_xs;
_Static_assert(sizeof(ql_block_iq4_xs) == 136, "IQ4_XS block is 136 bytes");

size_t ql_quantize_iq4_nl(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix);
size_t ql_quantize_iq4_xs(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix);

/* The scales of the sbs / 32 blocks of one super-block of sbs values x (importance
 * weights qw or NULL) in scales[]: per block ggml's 16 candidates, each refitted by
 * weighted least squares, the best kept (IQ4_NL stores it; IQ4_XS rounds it against its
 * super-block d). Returns the scale of largest magnitude (the first of equal ones). */
float ql_iq4_scales(int sbs, const float *x, const float *qw, float *scales);

/* L[j] = the table index nearest to id * x[j] (ties up), j < n, n a multiple of 16. */
void ql_iq4_indices(const float *x, int n, float id, uint8_t *L);

void ql_dequantize_iq4_nl(const void *src, float *dst, int64_t nrows, int64_t n_per_row);
void ql_dequantize_iq4_xs(const void *src, float *dst, int64_t nrows, int64_t n_per_row);

#endif
