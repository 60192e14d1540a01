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
#include "model/forward.h"
#include "model/model.h"
#include "results/store.h"

typedef struct {
    const ql_model *model; /* the sweep's reference model (borrowed) */
    const char *model_sha;
    const char *eval_text_sha; /* the evaluation text, which calibration must not be ("") */
    const char *cache_dir;     /* where the calibration text's reference is cached */
    ql_calib *calib;           /* the sweep's calibration resources (borrowed; NULL
                                  outside a sweep: then only ql_sens_fill) */
    ql_store *store;           /* the results store (borrowed) */
    size_t mem_bytes;          /* memory a measurement may plan with */
    bool quiet;
} ql_sens_source;

/* A calibration text in chunks. */
typedef struct {
    const ql_ppl_data *d;
    const char *sha256;
    const char *name; /* as the user gave it */
} ql_sens_text;

/* Replaces the errors of t's assigned tensors by the mean KLDs on text of their units in
 * grouping g (experiment/sensitivity.h), each unit quantized with the importance of im
 * (im_sha: its file's SHA-256, or "none"): read from the store, or measured and stored.
 * In a grouping of several tensors per unit, the tensors of a unit become one fit group
 * (fit.h) that takes the types all of them take, its sensitivity the error of its first
 * tensor (0 the others'). */
ql_status ql_sens_fill(const ql_sens_source *src, const ql_sens_text *text, const ql_imatrix *im,
                       const char *im_sha, ql_grouping g, ql_fit_table *t, ql_error *err);

/* The hook of qweights.h (ql_qweights_opts.sensitivities) with ctx = src: ql_sens_fill
 * on c's calibration text in c's grouping. */
ql_status ql_sens_fill_table(void *src, const ql_config *c, const ql_calib_slot *slot,
                             ql_fit_table *t, ql_error *err);

/* A kld fit's calibration text (SHA-256 calib_sha) must not be the evaluated text
 * (eval_sha): an error naming c's calib: text when it is. */
ql_status ql_sens_check_calib_text(const ql_config *c, const char *calib_sha, const char *eval_sha,
                                   ql_error *err);

/* The mean KLD of weight set w (a kld fit of c) on c's calibration text against the
 * reference there, K/V rounded as kv says: the fit's prediction with the interactions of
 * its choices measured (the sum of the sensitivities counts each tensor alone). One pass
 * over the calibration text. */
ql_status ql_sens_calib_kld(const ql_sens_source *src, const ql_config *c, ql_weights *w,
                            const ql_attn_rounding *kv, double *out, ql_error *err);

#endif
