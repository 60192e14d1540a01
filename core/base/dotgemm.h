/* qlab: its own product kernel, y (m, n) = alpha * x (m, k) · W^T with W given as n rows
 * of k values (a weight matrix), stored as f32, F16 or BF16.
 *
 * Every output is a dot product of a row of x and a row of W computed in one fixed
 * order, whatever the CPU, the thread count or the tile an output falls in: sixteen
 * partial sums, partial j accumulating x[i] * w[i] for i = j, j + 16, j + 32, ... by fused
 * multiply-add (a last short step padded with zeros), then added pairwise as
 * (j, j + 8), (j, j + 4), (j, j + 2), (0, 1). The AVX-512 kernel holds the sixteen partials
 * in one register, the AVX2 kernel in two, the portable one in an array: all three give
 * the same bits (tests/unit/test_dotgemm.c), so results depend neither on the thread
 * count nor on the machine. F16 and BF16 rows are widened in the kernel (exactly), so a
 * weight stored in half precision is never decoded to f32 in memory: half the bytes
 * move, which is where this kernel beats OpenBLAS's sgemm on decoded weights.
 *
 * Thread count: OpenMP's; products below QL_GEMM_SERIAL_MACS run on the calling thread,
 * as does ql_dotgemm_serial. */
#ifndef QL_DOTGEMM_H
#define QL_DOTGEMM_H

#include <stdbool.h>
#include <stdint.h>

/* Products below this many multiply-adds run on the calling thread (here and in gemm.h):
 * for them the hand-over to other threads costs more than it saves. */
#define QL_GEMM_SERIAL_MACS (4 * 1024 * 1024)

typedef enum { QL_DOT_F32, QL_DOT_F16, QL_DOT_BF16 } ql_dot_wtype;

typedef enum { QL_DOT_PORTABLE, QL_DOT_AVX2, QL_DOT_AVX512 } ql_dot_isa;

/* ldx, ldw, ldy in elements of their arrays. */
void ql_dotgemm(int64_t m, int64_t n, int64_t k, float alpha, const float *x, int64_t ldx,
                const void *w, ql_dot_wtype wt, int64_t ldw, float *y, int64_t ldy);

/* ql_dotgemm on the calling thread only (the same result). */
void ql_dotgemm_serial(int64_t m, int64_t n, int64_t k, float alpha, const float *x, int64_t ldx,
                       const void *w, ql_dot_wtype wt, int64_t ldw, float *y, int64_t ldy);

/* The kernel in use: the widest this CPU has, or the one forced (for tests and benches;
 * forcing one the CPU lacks keeps the widest it has and returns false). */
ql_dot_isa ql_dotgemm_isa(void);
bool ql_dotgemm_force_isa(ql_dot_isa isa);
void ql_dotgemm_unforce(void);
const char *ql_dotgemm_isa_name(ql_dot_isa isa);

#endif
