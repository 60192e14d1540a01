/* Integer products of Q8_0 weights and q8_0 activations, and of Q6_K weights and q8_K
 * activations: portable references and AVX2 kernels that compute the same f32
 * operations (see qgemm.h). */
#include "formats/qgemm.h"

#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "base/util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_DISPATCH 1
#endif

static bool force_portable;

void ql_qgemm_force_portable(bool force)
{
    force_portable = force;
}

const char *ql_qgemm_kernel_name(ql_qgemm_kernel k)
{
    return k == QL_QGEMM_AVX2 ? "avx2" : "portable";
}

ql_qgemm_kernel ql_qgemm_kernel_active(void)
{
#ifdef HAVE_X86_DISPATCH
    if (!force_portable && __builtin_cpu_supports("avx2"))
        return QL_QGEMM_AVX2;
#endif
    return QL_QGEMM_PORTABLE;
}

/* ------------------------------------------------------------------------- */
/* Portable reference                                                          */

/* The f32 step every kernel performs per block, in block order. */
static inline float add_block(float sum, int32_t isum, float dw, float dx)
{
    return sum + (float)isum * (dw * dx);
}

static float dot_portable(int64_t nb, const ql_block_q8_0 *w, const ql_block_q8_0 *x)
{
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < QL_QK8_0; j++)
            isum += (int32_t)w[b].qs[j] * (int32_t)x[b].qs[j];
        sum = add_block(sum, isum, ql_fp16_to_fp32(w[b].d), ql_fp16_to_fp32(x[b].d));
    }
    return sum;
}

/* ------------------------------------------------------------------------- */
/* AVX2                                                                        */

#ifdef HAVE_X86_DISPATCH
/* 8 int32 partial sums of one block's 32 products. Levels must lie in [-127, 127] (as
 * ggml's quantizers write them): |w| * sign(x, w) then pairs of u8 x s8 products
 * summed into int16 (at most 2 * 127 * 127, no saturation), then into int32. */
__attribute__((target("avx2"))) static inline __m256i block_partial(const ql_block_q8_0 *w,
                                                                    const ql_block_q8_0 *x)
{
    const __m256i qw = _mm256_loadu_si256((const __m256i *)(const void *)w->qs);
    const __m256i qx = _mm256_loadu_si256((const __m256i *)(const void *)x->qs);
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qx, qw));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* The exact block sums of 8 consecutive blocks, lane k = block k. */
__attribute__((target("avx2"))) static inline __m256i block_sums8(const ql_block_q8_0 *w,
                                                                  const ql_block_q8_0 *x)
{
    const __m256i h01 = _mm256_hadd_epi32(block_partial(w + 0, x + 0), block_partial(w + 1, x + 1));
    const __m256i h23 = _mm256_hadd_epi32(block_partial(w + 2, x + 2), block_partial(w + 3, x + 3));
    const __m256i h45 = _mm256_hadd_epi32(block_partial(w + 4, x + 4), block_partial(w + 5, x + 5));
    const __m256i h67 = _mm256_hadd_epi32(block_partial(w + 6, x + 6), block_partial(w + 7, x + 7));
    /* per 128-bit lane: blocks 0..3 (resp. 4..7), low and high halves of each block */
    const __m256i h0123 = _mm256_hadd_epi32(h01, h23);
    const __m256i h4567 = _mm256_hadd_epi32(h45, h67);
    const __m256i lo = _mm256_permute2x128_si256(h0123, h4567, 0x20);
    const __m256i hi = _mm256_permute2x128_si256(h0123, h4567, 0x31);
    return _mm256_add_epi32(lo, hi);
}

/* 8 fp16 scales (stride of a block) widened (exact). */
__attribute__((target("avx2"))) static inline __m256 scales8(const ql_block_q8_0 *b)
{
    float d[8];
    for (int k = 0; k < 8; k++)
        d[k] = ql_fp16_to_fp32(b[k].d);
    return _mm256_loadu_ps(d);
}

__attribute__((target("avx2"))) static float dot_avx2(int64_t nb, const ql_block_q8_0 *w,
                                                      const ql_block_q8_0 *x)
{
    float sum = 0.0f;
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        /* (float)isum * (dw * dx) for 8 blocks: the same IEEE operations as add_block */
        const __m256 isum = _mm256_cvtepi32_ps(block_sums8(w + b, x + b));
        const __m256 prod = _mm256_mul_ps(isum, _mm256_mul_ps(scales8(w + b), scales8(x + b)));
        float p[8];
        _mm256_storeu_ps(p, prod);
        for (int k = 0; k < 8; k++)
            sum += p[k];
    }
    for (; b < nb; b++) {
        const __m256i s = block_partial(w + b, x + b);
        const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        const __m128i s1 = _mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xb1));
        sum =
            add_block(sum, _mm_cvtsi128_si32(s1), ql_fp16_to_fp32(w[b].d), ql_fp16_to_fp32(x[b].d));
    }
    return sum;
}
#endif

/* ------------------------------------------------------------------------- */
/* Q6_K x q8_K                                                                 */

/* Rows of W per task: their blocks (64 rows of 2048 values: 108 KiB) stay in L2 while
 * every token passes. */
#define Q6_K_ROWS 64

/* Tokens a kernel call multiplies with one weight row (the AVX2 kernel unpacks each
 * block once for all of them). */
#define Q6_K_TOKENS 8

/* Level (0..63, the stored 6 bits before the -32 offset) of value e of a Q6_K block
 * (layout in quant_k.h). */
static inline int q6_K_level(const ql_block_q6_K *b, int e)
{
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t lo = b->ql[64 * h + 32 * (k & 1) + l];
    const int low = k < 2 ? lo & 0xF : lo >> 4;
    const int high = (b->qh[32 * h + l] >> (2 * k)) & 3;
    return low | high << 4;
}

/* ggml's order of the final sum of the 8 lanes (its hsum_float_8). */
static inline float sum_lanes(const float a[8])
{
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

static float dot_q6_K_one(int64_t nb, const ql_block_q6_K *w, const ql_block_q8_K *x)
{
    float acc[8] = {0};
    for (int64_t b = 0; b < nb; b++) {
        int32_t lane[8] = {0};
        for (int e = 0; e < QL_QK_K; e++)
            lane[(e % 32) / 4] +=
                (int32_t)w[b].scales[e / 16] * (q6_K_level(&w[b], e) - 32) * x[b].qs[e];
        const float d = x[b].d * ql_fp16_to_fp32(w[b].d);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    return sum_lanes(acc);
}

#ifdef HAVE_X86_DISPATCH
/* The int32 lanes of one 32-value chunk: q its levels (u8, 0..63), v its q8_K levels,
 * s its scales (int16 lanes 0..7: the first 16 values' scale, 8..15: the second's).
 * u8 x s8 pairs into int16 (|63 * 127 * 2| < 2^15, no saturation), minus 32 times the
 * pairs of v, then scaled pairs into int32: lane k holds values 4k..4k+3. */
__attribute__((target("avx2"))) static inline __m256i q6_K_chunk(__m256i q, __m256i v, __m256i s)
{
    const __m256i pv = _mm256_maddubs_epi16(q, v);
    const __m256i p32 = _mm256_maddubs_epi16(_mm256_set1_epi8(32), v);
    return _mm256_madd_epi16(s, _mm256_sub_epi16(pv, p32));
}

/* int16 scale vector of chunk c: lanes 0..7 = sc[2c], 8..15 = sc[2c + 1]. */
__attribute__((target("avx2"))) static inline __m256i q6_K_scales(const int8_t *sc, int c)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(sc[2 * c])),
                                   _mm_set1_epi16(sc[2 * c + 1]), 1);
}

/* Up to Q6_K_TOKENS tokens against one weight row: each block's levels and scale
 * vectors are unpacked once and used for every token; every output keeps its own
 * lanes and block order, so the result is that of one dot product per output. x[i]
 * is the q8_K row of token i. */
__attribute__((target("avx2,fma"))) static void
dot_q6_K_avx2(int64_t nb, const ql_block_q6_K *w, const ql_block_q8_K *const *x, int n, float *out)
{
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
    __m256 acc[Q6_K_TOKENS];
    for (int i = 0; i < n; i++)
        acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        /* chunk 4h + k holds values 128h + 32k + l: low nibbles of ql (k = 0, 1), high
         * nibbles (k = 2, 3), bits 2k..2k+1 of qh on top */
        __m256i q[8], sc[8];
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w[b].ql + 64 * h, *qh = w[b].qh + 32 * h;
            const __m256i lo0 = _mm256_loadu_si256((const __m256i *)(const void *)ql);
            const __m256i lo1 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 32));
            const __m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)qh);
            q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(lo0, m4),
                                           _mm256_slli_epi16(_mm256_and_si256(hi, m2), 4));
            q[4 * h + 1] = _mm256_or_si256(
                _mm256_and_si256(lo1, m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 2), m2), 4));
            q[4 * h + 2] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(lo0, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 4), m2), 4));
            q[4 * h + 3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(lo1, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 6), m2), 4));
        }
        for (int c = 0; c < 8; c++)
            sc[c] = q6_K_scales(w[b].scales, c);
        const float dw = ql_fp16_to_fp32(w[b].d);
        for (int i = 0; i < n; i++) {
            const __m256i *v = (const __m256i *)(const void *)x[i][b].qs;
            __m256i lanes = q6_K_chunk(q[0], _mm256_loadu_si256(v), sc[0]);
            for (int c = 1; c < 8; c++)
                lanes = _mm256_add_epi32(lanes, q6_K_chunk(q[c], _mm256_loadu_si256(v + c), sc[c]));
            const __m256 d = _mm256_set1_ps(x[i][b].d * dw);
            acc[i] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc[i]);
        }
    }
    for (int i = 0; i < n; i++) {
        float a[8];
        _mm256_storeu_ps(a, acc[i]);
        out[i] = sum_lanes(a);
    }
}
#endif

/* ------------------------------------------------------------------------- */
/* Entry points                                                                */

typedef float (*dot_fn)(int64_t nb, const ql_block_q8_0 *w, const ql_block_q8_0 *x);

static dot_fn pick(void)
{
#ifdef HAVE_X86_DISPATCH
    if (ql_qgemm_kernel_active() == QL_QGEMM_AVX2)
        return dot_avx2;
#endif
    return dot_portable;
}

float ql_vec_dot_q8_0_q8_0(int64_t n, const ql_block_q8_0 *w, const ql_block_q8_0 *x)
{
    QL_ASSERT(n % QL_QK8_0 == 0);
    return pick()(n / QL_QK8_0, w, x);
}

/* Rows of W in chunks of 16 (a chunk's weights stay in cache across all tokens), split
 * between threads; every output is one dot product, so the thread count does not
 * change any result. */
#define ROW_CHUNK 16

static int gemm_threads(int64_t n_tok, int64_t n_out, int64_t n_in)
{
    return n_tok * n_out * n_in < 1 << 20 ? 1 : ql_threads_get();
}

void ql_gemm_q8_0(const ql_block_q8_0 *w, const ql_block_q8_0 *x, float *y, int64_t n_tok,
                  int64_t n_out, int64_t n_in)
{
    QL_ASSERT(n_in % QL_QK8_0 == 0);
    const int64_t nb = n_in / QL_QK8_0;
    const dot_fn dot = pick();
    const int64_t n_chunks = (n_out + ROW_CHUNK - 1) / ROW_CHUNK;
#pragma omp parallel for schedule(static) num_threads(gemm_threads(n_tok, n_out, n_in))
    for (int64_t c = 0; c < n_chunks; c++) {
        const int64_t o_end = (c + 1) * ROW_CHUNK < n_out ? (c + 1) * ROW_CHUNK : n_out;
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t o = c * ROW_CHUNK; o < o_end; o++)
                y[t * n_out + o] = dot(nb, w + o * nb, x + t * nb);
    }
}

static void dot_q6_K_portable(int64_t nb, const ql_block_q6_K *w, const ql_block_q8_K *const *x,
                              int n, float *out)
{
    for (int i = 0; i < n; i++)
        out[i] = dot_q6_K_one(nb, w, x[i]);
}

/* Computes out[i] = the dot product of row w with token row x[i], i < n <= Q6_K_TOKENS. */
typedef void (*dot_q6_K_fn)(int64_t nb, const ql_block_q6_K *w, const ql_block_q8_K *const *x,
                            int n, float *out);

static dot_q6_K_fn pick_q6_K(void)
{
#ifdef HAVE_X86_DISPATCH
    if (ql_qgemm_kernel_active() == QL_QGEMM_AVX2 && __builtin_cpu_supports("fma"))
        return dot_q6_K_avx2;
#endif
    return dot_q6_K_portable;
}

float ql_vec_dot_q6_K_q8_K(int64_t n, const ql_block_q6_K *w, const ql_block_q8_K *x)
{
    QL_ASSERT(n % QL_QK_K == 0);
    float y;
    pick_q6_K()(n / QL_QK_K, w, &x, 1, &y);
    return y;
}

void ql_gemm_q6_K(const ql_block_q6_K *w, const ql_block_q8_K *x, float *y, int64_t n_tok,
                  int64_t n_out, int64_t n_in)
{
    QL_ASSERT(n_in % QL_QK_K == 0);
    const int64_t nb = n_in / QL_QK_K;
    const dot_q6_K_fn dot = pick_q6_K();
    const int64_t n_chunks = (n_out + Q6_K_ROWS - 1) / Q6_K_ROWS;
#pragma omp parallel for schedule(static) num_threads(gemm_threads(n_tok, n_out, n_in))
    for (int64_t c = 0; c < n_chunks; c++) {
        const int64_t o_end = (c + 1) * Q6_K_ROWS < n_out ? (c + 1) * Q6_K_ROWS : n_out;
        for (int64_t t = 0; t < n_tok; t += Q6_K_TOKENS) {
            const int n = n_tok - t < Q6_K_TOKENS ? (int)(n_tok - t) : Q6_K_TOKENS;
            const ql_block_q8_K *xs[Q6_K_TOKENS];
            for (int i = 0; i < n; i++)
                xs[i] = x + (t + i) * nb;
            for (int64_t o = c * Q6_K_ROWS; o < o_end; o++) {
                float out[Q6_K_TOKENS];
                dot(nb, w + o * nb, xs, n, out);
                for (int i = 0; i < n; i++)
                    y[(t + i) * n_out + o] = out[i];
            }
        }
    }
}
