/* qlab: per-layer divergence of a config from the reference (issue: real model sizes;
 * what exllamav3's model_diff reports).
 *
 * After every block, for every scored token t, with h the config's residual stream and
 * r the reference's at the same block and position (the two passes run in lock-step,
 * model/scheduler.h, so no layer's states are stored):
 *   rel_err_t = ||h - r|| / ||r||          cos_t = h . r / (||h|| ||r||)
 * and per layer: the mean and the 99th percentile (linear interpolation at rank
 * 0.99 (N - 1), as the metrics' percentiles) of rel_err, and the mean of cos. Sums in
 * double, per-token values kept and reduced in token order: independent of the thread
 * count. A token whose reference state is all zero has rel_err NAN and is left out. */
#ifndef QL_DIVERGENCE_H
#define QL_DIVERGENCE_H

#include <stdint.h>

#include "base/error.h"
#include "experiment/records.h"

typedef struct ql_divergence ql_divergence;

/* For n_layer blocks and up to max_tokens scored tokens per block. */
ql_status ql_divergence_alloc(ql_divergence **out, int n_layer, int64_t max_tokens, ql_error *err);
void ql_divergence_free(ql_divergence *d);
void ql_divergence_reset(ql_divergence *d);

/* Adds n_tok tokens of block `layer`: h and r (n_tok, n_embd) row by row. */
ql_status ql_divergence_add(ql_divergence *d, int layer, const float *h, const float *r,
                            int64_t n_tok, int64_t n_embd, ql_error *err);

/* The records of every layer (out: n_layer of them), in layer order. */
void ql_divergence_finish(const ql_divergence *d, ql_layer_record *out);

#endif
