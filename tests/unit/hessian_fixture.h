/* What the imatrix and GPTQ tests share: pseudo-random evaluation tokens (BOS is put
 * first by the chunking), and an imatrix-pass observer that feeds every block's inputs
 * to that block's Hessians. */
#ifndef QL_HESSIAN_FIXTURE_H
#define QL_HESSIAN_FIXTURE_H

#include <stdint.h>

#include "experiment/gptq_pass.h"
#include "model/perplexity.h"

/* n tokens below n_vocab from a linear congruential sequence started at seed, cut into
 * `chunks` chunks of ctx (checked). */
void qlt_random_ppl_data(ql_ppl_data *d, int n_vocab, int64_t n, int ctx, int64_t chunks,
                         uint32_t seed);

/* The Hessians of blocks 0..n_layer-1, h[layer]. */
typedef struct {
    ql_hessians **h;
    int n_layer;
} qlt_all_layers;

/* ql_imatrix_opts.also: ctx is a qlt_all_layers. */
void qlt_observe_all(void *ctx, int site, const ql_linear *lin, const float *x, int64_t n_tok);

#endif
