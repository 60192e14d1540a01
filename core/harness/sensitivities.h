/* qlab: the sweep's side of the kld objective (issue 18): the measured sensitivities of
 * a budget config's candidate (tensor, type) pairs, from the results store when they are
 * there, else measured (experiment/sensitivity.h) on the calibration text of the
 * config's calib: imatrix and stored one by one as they are measured, so an interrupted
 * measurement keeps what it did and every later config, sweep, shard or `--jobs`
 * process with the same model, text, ctx, chunks and importance matrix reads them.
 *
 * The calibration text must not be the sweep's evaluation text: a fit on the text it is
 * scored on would measure its own noise. */
#ifndef QL_SENSITIVITIES_H
#define QL_SENSITIVITIES_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "experiment/calib.h"
#include "experiment/config.h"
#include "experiment/fit.h"
#include "model/model.h"
#include "results/store.h"

typedef struct {
    const ql_model *model; /* the sweep's reference model (borrowed) */
    const char *model_sha;
    const char *eval_text_sha; /* the sweep's evaluation text, which calibration must not be */
    const char *cache_dir;     /* where the calibration text's reference is cached */
    ql_calib *calib;           /* the sweep's calibration resources (borrowed) */
    ql_store *store;           /* the results store (borrowed) */
    size_t mem_bytes;          /* memory a measurement may plan with */
    bool quiet;
} ql_sens_source;

/* The hook of qweights.h (ql_qweights_opts.sensitivities) with ctx = src: replaces the
 * error of every assigned tensor's choices in t by its measured mean KLD. */
ql_status ql_sens_fill_table(void *src, const ql_config *c, const ql_calib_slot *slot,
                             ql_fit_table *t, ql_error *err);

#endif
