/* Dot-product kernels in one fixed summation order (dotgemm.h). */
#include "base/dotgemm.h"

#include <math.h>
#include <stddef.h>

#include "base/fp16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

/* The partial sums of one dot product: the order of dotgemm.h. */
#define LANES 16
/* Rows of W per task: a task's rows (64 x 4096 F16 = 512 KB) stay in L2 while every
 * token block passes over them. */
#define TASK_ROWS 64
/* Tokens per block: a block of x (12 x 4096 f32 = 192 KB) stays in L2 while the task's
 * rows pass over it. Measured on Zen 4 against 6 to 96. */
#define TOKEN_BLOCK 12
/* Fewer row tasks than this: the tokens are split too, so that every core has work. */
#define MIN_TASKS 8

static float w_value(ql_dot_wtype wt, const void *w, int64_t i)
{
    switch (wt) {
    case QL_DOT_F16:
        return ql_fp16_to_fp32(((const uint16_t *)w)[i]);
    case QL_DOT_BF16:
        return ql_bf16_to_fp32(((const uint16_t *)w)[i]);
    default:
        return ((const float *)w)[i];
    }
}

/* The last k % 16 values of a row widened to f32 and padded with zeros: the short last
 * step of every kernel reads these, so that all of them add the same zeros. */
static void tail_x(const float *x, int64_t k0, int64_t k, float out[LANES])
{
    for (int j = 0; j < LANES; j++)
        out[j] = k0 + j < k ? x[k0 + j] : 0.0f;
}

static void tail_w(ql_dot_wtype wt, const void *w, int64_t k0, int64_t k, float out[LANES])
{
    for (int j = 0; j < LANES; j++)
        out[j] = k0 + j < k ? w_value(wt, w, k0 + j) : 0.0f;
}

static float tree_sum(float p[LANES])
{
    for (int half = LANES / 2; half >= 1; half /= 2)
        for (int j = 0; j < half; j++)
            p[j] += p[j + half];
    return p[0];
}

/* ------------------------------------------------------------------------ */
/* Portable: the definition                                                   */

static void dot_portable(int64_t t0, int64_t t1, int64_t o0, int64_t o1, int64_t k, float alpha,
                         const float *x, int64_t ldx, const void *w, ql_dot_wtype wt, int64_t ldw,
                         float *y, int64_t ldy)
{
    const int64_t kfull = k / LANES * LANES;
    const size_t wsize = wt == QL_DOT_F32 ? sizeof(float) : sizeof(uint16_t);
    for (int64_t t = t0; t < t1; t++)
        for (int64_t o = o0; o < o1; o++) {
            const float *xr = x + t * ldx;
            const void *wr = (const char *)w + (size_t)(o * ldw) * wsize;
            float p[LANES] = {0};
            for (int64_t i = 0; i < kfull; i += LANES)
                for (int j = 0; j < LANES; j++)
                    p[j] = fmaf(xr[i + j], w_value(wt, wr, i + j), p[j]);
            if (kfull < k) {
                float xt[LANES], wt_[LANES];
                tail_x(xr, kfull, k, xt);
                tail_w(wt, wr, kfull, k, wt_);
                for (int j = 0; j < LANES; j++)
                    p[j] = fmaf(xt[j], wt_[j], p[j]);
            }
            y[t * ldy + o] = alpha * tree_sum(p);
        }
}

#ifdef HAVE_X86

/* ------------------------------------------------------------------------ */
/* AVX-512: the sixteen partials of a dot product in one register             */

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))
#define INLINE512 static inline __attribute__((always_inline)) T512
#define UNROLL _Pragma("GCC unroll 8")

INLINE512 __m512 w512(const int wt, const void *w, int64_t i)
{
    if (wt == QL_DOT_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
    if (wt == QL_DOT_BF16) {
        const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_loadu_ps((const float *)w + i);
}

/* (j, j + 8), (j, j + 4), (j, j + 2), (0, 1): tree_sum's order. */
INLINE512 float sum512(__m512 v)
{
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), hi);
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

/* RW rows of W against RT rows of x: RW * RT dot products over all of k. */
INLINE512 void tile512(const int wt, const int RW, const int RT, int64_t k, float alpha,
                       const float *x, int64_t ldx, const void *w, int64_t ldw, float *y,
                       int64_t ldy)
{
    const size_t wsize = wt == QL_DOT_F32 ? sizeof(float) : sizeof(uint16_t);
    const int64_t kfull = k / LANES * LANES;
    __m512 acc[4][6];
    UNROLL for (int r = 0; r < RW; r++) UNROLL for (int t = 0; t < RT; t++) acc[r][t] =
        _mm512_setzero_ps();
    for (int64_t i = 0; i < kfull; i += LANES) {
        __m512 wv[4];
        UNROLL for (int r = 0; r < RW; r++) wv[r] =
            w512(wt, (const char *)w + (size_t)(r * ldw) * wsize, i);
        UNROLL for (int t = 0; t < RT; t++)
        {
            const __m512 xv = _mm512_loadu_ps(x + t * ldx + i);
            UNROLL for (int r = 0; r < RW; r++) acc[r][t] = _mm512_fmadd_ps(xv, wv[r], acc[r][t]);
        }
    }
    if (kfull < k) {
        float xt[LANES], wt_[LANES];
        UNROLL for (int r = 0; r < RW; r++)
        {
            tail_w(wt, (const char *)w + (size_t)(r * ldw) * wsize, kfull, k, wt_);
            const __m512 wv = _mm512_loadu_ps(wt_);
            UNROLL for (int t = 0; t < RT; t++)
            {
                tail_x(x + t * ldx, kfull, k, xt);
                acc[r][t] = _mm512_fmadd_ps(_mm512_loadu_ps(xt), wv, acc[r][t]);
            }
        }
    }
    UNROLL for (int t = 0; t < RT; t++) UNROLL for (int r = 0; r < RW; r++) y[t * ldy + r] =
        alpha * sum512(acc[r][t]);
}

/* ------------------------------------------------------------------------ */
/* AVX2: the partials 0-7 in one register, 8-15 in another                    */

#define T256 __attribute__((target("avx2,f16c,fma")))
#define INLINE256 static inline __attribute__((always_inline)) T256

INLINE256 __m256 w256(const int wt, const void *w, int64_t i)
{
    if (wt == QL_DOT_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
    if (wt == QL_DOT_BF16) {
        const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    return _mm256_loadu_ps((const float *)w + i);
}

INLINE256 float sum256(__m256 lo, __m256 hi)
{
    const __m256 a = _mm256_add_ps(lo, hi);
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

INLINE256 void tile256(const int wt, const int RW, const int RT, int64_t k, float alpha,
                       const float *x, int64_t ldx, const void *w, int64_t ldw, float *y,
                       int64_t ldy)
{
    const size_t wsize = wt == QL_DOT_F32 ? sizeof(float) : sizeof(uint16_t);
    const int64_t kfull = k / LANES * LANES;
    __m256 lo[2][2], hi[2][2];
    UNROLL for (int r = 0; r < RW; r++) UNROLL for (int t = 0; t < RT; t++)
    {
        lo[r][t] = _mm256_setzero_ps();
        hi[r][t] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < kfull; i += LANES) {
        __m256 wl[2], wh[2];
        UNROLL for (int r = 0; r < RW; r++)
        {
            const void *wr = (const char *)w + (size_t)(r * ldw) * wsize;
            wl[r] = w256(wt, wr, i);
            wh[r] = w256(wt, wr, i + 8);
        }
        UNROLL for (int t = 0; t < RT; t++)
        {
            const __m256 xl = _mm256_loadu_ps(x + t * ldx + i);
            const __m256 xh = _mm256_loadu_ps(x + t * ldx + i + 8);
            UNROLL for (int r = 0; r < RW; r++)
            {
                lo[r][t] = _mm256_fmadd_ps(xl, wl[r], lo[r][t]);
                hi[r][t] = _mm256_fmadd_ps(xh, wh[r], hi[r][t]);
            }
        }
    }
    if (kfull < k) {
        float xt[LANES], wt_[LANES];
        UNROLL for (int r = 0; r < RW; r++)
        {
            tail_w(wt, (const char *)w + (size_t)(r * ldw) * wsize, kfull, k, wt_);
            const __m256 wl = _mm256_loadu_ps(wt_), wh = _mm256_loadu_ps(wt_ + 8);
            UNROLL for (int t = 0; t < RT; t++)
            {
                tail_x(x + t * ldx, kfull, k, xt);
                lo[r][t] = _mm256_fmadd_ps(_mm256_loadu_ps(xt), wl, lo[r][t]);
                hi[r][t] = _mm256_fmadd_ps(_mm256_loadu_ps(xt + 8), wh, hi[r][t]);
            }
        }
    }
    UNROLL for (int t = 0; t < RT; t++) UNROLL for (int r = 0; r < RW; r++) y[t * ldy + r] =
        alpha * sum256(lo[r][t], hi[r][t]);
}

/* ------------------------------------------------------------------------ */
/* Blocks: tiles of RW x RT over rows o0..o1 and tokens t0..t1, token blocks   */
/* outer so that a block of x stays in cache while the rows pass over it        */

#define DEFINE_BLOCK(NAME, TARGET, TILE, RW, RT, WT)                                               \
    static TARGET void NAME(int64_t t0, int64_t t1, int64_t o0, int64_t o1, int64_t k,           \
                            float alpha, const float *x, int64_t ldx, const void *w,              \
                            int64_t ldw, float *y, int64_t ldy)                                    \
    {                                                                                              \
        const size_t ws = (WT) == QL_DOT_F32 ? sizeof(float) : sizeof(uint16_t);                   \
        for (int64_t tb = t0; tb < t1; tb += TOKEN_BLOCK) {                                        \
            const int64_t te = t1 - tb < TOKEN_BLOCK ? t1 : tb + TOKEN_BLOCK;                      \
            int64_t o = o0;                                                                        \
            for (; o + (RW) <= o1; o += (RW)) {                                                    \
                const void *wr = (const char *)w + (size_t)(o * ldw) * ws;                         \
                int64_t t = tb;                                                                    \
                for (; t + (RT) <= te; t += (RT))                                                  \
                    TILE(WT, RW, RT, k, alpha, x + t * ldx, ldx, wr, ldw, y + t * ldy + o, ldy);   \
                for (; t < te; t++)                                                                \
                    TILE(WT, RW, 1, k, alpha, x + t * ldx, ldx, wr, ldw, y + t * ldy + o, ldy);    \
            }                                                                                      \
            for (; o < o1; o++) {                                                                  \
                const void *wr = (const char *)w + (size_t)(o * ldw) * ws;                         \
                int64_t t = tb;                                                                    \
                for (; t + (RT) <= te; t += (RT))                                                  \
                    TILE(WT, 1, RT, k, alpha, x + t * ldx, ldx, wr, ldw, y + t * ldy + o, ldy);    \
                for (; t < te; t++)                                                                \
                    TILE(WT, 1, 1, k, alpha, x + t * ldx, ldx, wr, ldw, y + t * ldy + o, ldy);     \
            }                                                                                      \
        }                                                                                          \
    }

/* AVX-512: 4 rows x 6 tokens, 24 accumulators of 32 registers. AVX2: 2 x 2 in pairs of
 * registers, 8 accumulators of 16. */
DEFINE_BLOCK(block512_f32, T512, tile512, 4, 6, QL_DOT_F32)
DEFINE_BLOCK(block512_f16, T512, tile512, 4, 6, QL_DOT_F16)
DEFINE_BLOCK(block512_bf16, T512, tile512, 4, 6, QL_DOT_BF16)
DEFINE_BLOCK(block256_f32, T256, tile256, 2, 2, QL_DOT_F32)
DEFINE_BLOCK(block256_f16, T256, tile256, 2, 2, QL_DOT_F16)
DEFINE_BLOCK(block256_bf16, T256, tile256, 2, 2, QL_DOT_BF16)

#endif /* HAVE_X86 */

typedef void (*block_fn)(int64_t t0, int64_t t1, int64_t o0, int64_t o1, int64_t k, float alpha,
                         const float *x, int64_t ldx, const void *w, int64_t ldw, float *y,
                         int64_t ldy);

static int forced = -1;

/* F16C is not asked for: clang cannot test it, and every CPU with AVX2 and FMA has it. */
static ql_dot_isa widest(void)
{
#ifdef HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("fma"))
        return QL_DOT_AVX512;
    if (__builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma"))
        return QL_DOT_AVX2;
#endif
    return QL_DOT_PORTABLE;
}

ql_dot_isa ql_dotgemm_isa(void)
{
    return forced >= 0 ? (ql_dot_isa)forced : widest();
}

bool ql_dotgemm_force_isa(ql_dot_isa isa)
{
    if (isa > widest())
        return false;
    forced = (int)isa;
    return true;
}

void ql_dotgemm_unforce(void)
{
    forced = -1;
}

const char *ql_dotgemm_isa_name(ql_dot_isa isa)
{
    static const char *const names[] = {"portable", "AVX2", "AVX-512"};
    return names[isa];
}

static void run_block(ql_dot_isa isa, int64_t t0, int64_t t1, int64_t o0, int64_t o1, int64_t k,
                      float alpha, const float *x, int64_t ldx, const void *w, ql_dot_wtype wt,
                      int64_t ldw, float *y, int64_t ldy)
{
#ifdef HAVE_X86
    static const block_fn blocks[3][3] = {
        [QL_DOT_AVX2] = {block256_f32, block256_f16, block256_bf16},
        [QL_DOT_AVX512] = {block512_f32, block512_f16, block512_bf16},
    };
    if (isa != QL_DOT_PORTABLE) {
        blocks[isa][wt](t0, t1, o0, o1, k, alpha, x, ldx, w, ldw, y, ldy);
        return;
    }
#else
    (void)isa;
#endif
    dot_portable(t0, t1, o0, o1, k, alpha, x, ldx, w, wt, ldw, y, ldy);
}

void ql_dotgemm_serial(int64_t m, int64_t n, int64_t k, float alpha, const float *x, int64_t ldx,
                       const void *w, ql_dot_wtype wt, int64_t ldw, float *y, int64_t ldy)
{
    if (m <= 0 || n <= 0)
        return;
    run_block(ql_dotgemm_isa(), 0, m, 0, n, k, alpha, x, ldx, w, wt, ldw, y, ldy);
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

void ql_dotgemm(int64_t m, int64_t n, int64_t k, float alpha, const float *x, int64_t ldx,
                const void *w, ql_dot_wtype wt, int64_t ldw, float *y, int64_t ldy)
{
    if (m <= 0 || n <= 0)
        return;
    const ql_dot_isa isa = ql_dotgemm_isa();
    /* Every output is computed alone in a fixed order: the split below only shares out
     * the work, it cannot change a bit. */
    const int64_t row_tasks = ceil_div(n, TASK_ROWS);
    const int64_t tok_tasks = row_tasks >= MIN_TASKS ? 1 : ceil_div(MIN_TASKS, row_tasks);
    const int64_t tok_per = ceil_div(m, tok_tasks);
    const int64_t tasks = row_tasks * tok_tasks;
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1 && m * n * k >= QL_GEMM_SERIAL_MACS)
    for (int64_t task = 0; task < tasks; task++) {
        const int64_t o0 = (task / tok_tasks) * TASK_ROWS, t0 = (task % tok_tasks) * tok_per;
        const int64_t o1 = n - o0 < TASK_ROWS ? n : o0 + TASK_ROWS;
        const int64_t t1 = m - t0 < tok_per ? m : t0 + tok_per;
        if (t0 < t1)
            run_block(isa, t0, t1, o0, o1, k, alpha, x, ldx, w, wt, ldw, y, ldy);
    }
}
