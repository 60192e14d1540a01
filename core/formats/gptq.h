/* qlab: GPTQ into ggml's own block formats.
 *
 * GPTQ (Frantar et al., 2022) quantizes a weight matrix W (n_out rows of n_in values)
 * one input column at a time and spreads each column's rounding error over the
 * columns not yet quantized, so as to minimize the layer-output error
 * ||(W - What) X||^2 = tr((W - What) H (W - What)^T), H = X^T X the Hessian of the
 * product's input over calibration tokens. With U the upper Cholesky factor of H^-1
 * (H^-1 = U^T U), column i's error e = (w_i - q_i) / U_ii is subtracted from every
 * later column k as e * U_ik.
 *
 * In ggml's formats (quant_split.h): at the first column of each ggml block of a row
 * (in processing order), that block's parameters (scales, mins, super-block scales)
 * are chosen from the row's current, already compensated values by ggml's own search
 * for the type, with the importance weights it gets from llama-quantize
 * (scales=lazy; scales=static chooses every block's from the original row first);
 * each value is then given the level ggml's final rounding gives it under those
 * parameters. The files stay standard GGUF.
 *
 * Details as in GPTQ's reference: a column whose diag(H) is 0 (an input that is never
 * non-zero) is set to 0 and its diagonal to 1; damping adds damp * mean(diag H) to the
 * diagonal; order=act processes columns by decreasing diag(H) (stable for ties);
 * updates are applied lazily in blocks of `block` columns (within a block at once,
 * to the rest at the block's end). The factorizations are LAPACK's (dpotrf, dpotri).
 *
 * With H diagonal, U has no off-diagonal terms, no error moves, and the bytes are
 * exactly ggml's (the anchor test in tests/unit/test_gptq.c).
 *
 * Threading: rows are independent given U and run in parallel (OpenMP); each row's
 * arithmetic is the same whatever the thread count. The factorization runs on the
 * calling thread through single-threaded OpenBLAS. */
#ifndef QL_GPTQ_H
#define QL_GPTQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum { QL_GPTQ_ORDER_NATURAL, QL_GPTQ_ORDER_ACT } ql_gptq_order;
typedef enum { QL_GPTQ_SCALES_LAZY, QL_GPTQ_SCALES_STATIC } ql_gptq_scales;
/* Where each block's Hessians come from: the model whose earlier blocks are already
 * quantized (GPTQ's own) or the unquantized reference. Read by the Hessian collection,
 * not by ql_gptq_quantize. */
typedef enum { QL_GPTQ_INPUTS_QUANTIZED, QL_GPTQ_INPUTS_REFERENCE } ql_gptq_inputs;

typedef struct {
    double damp; /* relative damping: damp * mean(diag H) is added to the diagonal */
    ql_gptq_order order;
    ql_gptq_scales scales;
    int block; /* lazy-update block, columns */
    ql_gptq_inputs inputs;
} ql_gptq_opts;

#define QL_GPTQ_DEFAULT_DAMP  0.01
#define QL_GPTQ_DEFAULT_BLOCK 128

/* GPTQ's defaults: damp 0.01, natural order, lazy scales, block 128, quantized inputs. */
void ql_gptq_opts_default(ql_gptq_opts *o);

/* Parses "damp=0.01,order=natural|act,scales=lazy|static,block=128,
 * inputs=quantized|reference" (any subset, any order; "" = the defaults) over the
 * defaults. Errors name the option and what is allowed. */
ql_status ql_gptq_opts_parse(const char *s, ql_gptq_opts *o, ql_error *err);

/* The canonical text of o: the options that differ from the defaults, in the order
 * above, "" when none. Returns the length (snprintf's contract). */
int ql_gptq_opts_print(const ql_gptq_opts *o, char *buf, size_t size);

/* Quantizes nrows rows of n_per_row values of src into dst (ql_row_size(type, n) bytes
 * a row) by GPTQ. type: ql_split_applies(type); n_per_row a multiple of its block.
 * imatrix: n_per_row importance weights for ggml's weighted search, or NULL for its
 * reference search (as the type's quantizer takes them). H: the n_per_row x n_per_row
 * Hessian (row-major, symmetric; not modified). Returns QL_EFORMAT when H (damped) is
 * not positive definite or not finite, QL_ENOMEM when the work arrays do not fit; the
 * message says so. Memory: 3 n_per_row^2 doubles and a row's buffers per thread. */
ql_status ql_gptq_quantize(int32_t type, const float *src, void *dst, int64_t nrows,
                           int64_t n_per_row, const float *imatrix, const double *H,
                           const ql_gptq_opts *o, ql_error *err);

/* The factor of a Hessian, shared by every matrix that reads the same input (q, k and
 * v; gate and up): dead columns, damping, order and the upper Cholesky factor of the
 * damped inverse, as ql_gptq_quantize computes them. Errors as ql_gptq_quantize's. */
typedef struct ql_gptq_factor ql_gptq_factor;

ql_status ql_gptq_factor_alloc(ql_gptq_factor **out, const double *H, int64_t n_per_row,
                               const ql_gptq_opts *o, ql_error *err);
void ql_gptq_factor_free(ql_gptq_factor *f); /* NULL is fine */

/* ql_gptq_quantize's rows given the factor (its n_per_row and options): the same bytes. */
ql_status ql_gptq_quantize_rows(const ql_gptq_factor *f, int32_t type, const float *src, void *dst,
                                int64_t nrows, const float *imatrix, ql_error *err);

/* Bytes of work memory ql_gptq_quantize allocates for n_per_row columns and `threads`
 * threads (for memory plans). */
size_t ql_gptq_work_bytes(int64_t n_per_row, int threads);

#endif
