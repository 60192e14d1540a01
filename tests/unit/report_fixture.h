/* A results database for the tests of `qlab report` and the notebooks, built
 * through the store API with made-up but self-consistent measurements (per-chunk
 * sums first, run metrics derived from them as a runner would):
 *
 *   sweep fixture-formats: model fixture-a on fixture-text, ctx 64, 8 chunks;
 *     F16, Q8_0, Q4_0 x act_mode f32, q8_0; Q4_0 with head_type F32 (max |dp|
 *     not measured); IQ4_NL failed. Every run has per-chunk sums and per-tensor
 *     errors (2 layers).
 *   fixture-mixed: Q8_0 on fixture-a (the run of fixture-formats, reused) and
 *     Q8_0, Q4_0 on fixture-b: two groups in one sweep.
 *   fixture-failed: one failed run only.
 *
 * Values are products and quotients of small dyadic numbers, square roots and
 * sums (no exp/log), so the stored doubles are the same on every IEEE machine
 * and the tests can compare generated tables as text. */
#ifndef QL_REPORT_FIXTURE_H
#define QL_REPORT_FIXTURE_H

#include <stdbool.h>

#include "base/error.h"

#define QLT_REPORT_CTX     64
#define QLT_REPORT_CHUNKS  8
#define QLT_REPORT_TOKENS  31 /* scored tokens per chunk at ctx 64: positions 32..62 */
#define QLT_REPORT_FAILURE "quantize: blk.0.ffn_down.weight (IQ4_NL): not implemented yet"

/* Creates the database at path (which must not exist); without chunks, the runs
 * have no per-chunk sums (as in a database of a runner that does not record them). */
ql_status qlt_report_fixture(const char *path, bool chunks, ql_error *err);

/* A crowded store at path (which must not exist), model fixture-tiny256 on fixture-text:
 *   crowd-a: 15 weight types from Q2_K to Q8_0 x imatrix none/calib x head same/Q8_0,
 *     60 configs, many within 0.2 bpw of each other (the plots' crowded case);
 *   crowd-b: Q4_0, Q4_K_M without and with an imatrix, and file configs: one file
 *     with f32 and q8_0 activations, another, and two of the same name in other
 *     directories;
 *   crowd-c: the ten types from Q3_K_M to Q5_K_M x act f32/q8_0 x KV f32/f16 x imatrix
 *     none/calib, 80 configs in two panels;
 *   crowd-d: 24 files of long names within a tenth of a bit and 5% of the KLD of each
 *     other: more labels than their neighbourhood has room for (numbered).
 * Every run has per-chunk sums and per-tensor errors. */
ql_status qlt_report_fixture_crowded(const char *path, ql_error *err);

#endif
