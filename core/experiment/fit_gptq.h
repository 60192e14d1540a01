/* qlab fit with quantizer gptq: the candidates' errors of GPTQ's quantizations.
 *
 * The imatrix-weighted error of the table, sum_j I_j e_j^2 per row (I_j the mean of x_j^2
 * over the calibration tokens), is the diagonal of the layer-output error e H e^T / n_tok
 * (H = sum x x^T over the product's input). GPTQ spends the cross terms: it lowers the
 * output error while its diagonal part may grow, so its candidates are measured by the
 * full form, and ggml's rounding (the types GPTQ does not split) by the same, so that one
 * table compares the two:
 *   err(W, T) = (rows / sampled) * sum over the table's sampled rows of e H e^T / n_tok,
 *   e = w - deq(q(w)), q GPTQ's (formats/gptq.h) for a type that splits, ggml's otherwise,
 * with the importance weights ggml's search gets. H per block product from
 * ql_hessians_visit: the calibration text on the reference's inputs (each tensor alone,
 * as the table measures each tensor alone). Tensors that are not block products (the
 * head, the embeddings) keep the table's errors: GPTQ leaves them to ggml's rounding, and
 * their imatrix-weighted error is in the same units. Dense models only. */
#ifndef QL_FIT_GPTQ_H
#define QL_FIT_GPTQ_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "experiment/fit.h"
#include "formats/gptq.h"
#include "model/model.h"
#include "model/perplexity.h"

typedef struct {
    const ql_model *model;
    const ql_ppl_data *calib;       /* the calibration chunks */
    const ql_gptq_opts *gptq;       /* GPTQ's options (the config's quantizer) */
    const ql_fit_importance *imp;   /* the importance ggml's search gets, or NULL */
    size_t mem;                     /* budget of the Hessians' pass; 0 = none */
    bool quiet;
} ql_fit_gptq;

/* A ql_fit_options.errors hook (ctx: a ql_fit_gptq): replaces every assigned block
 * product's choice errors as above and adds a note saying so. */
ql_status ql_fit_gptq_errors(void *ctx, ql_fit_table *t, ql_error *err);

#endif
