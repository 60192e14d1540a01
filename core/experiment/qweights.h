/* qlab: a config's quantized weight set.
 *
 * For one config of a sweep: the quantization plan (quant.h: the type policy of
 * weight_type, head_type and embd_type; with a budget, the types the exact-fit solver
 * chose, fit.h), with tensors the importance matrix does not cover moved off the types
 * that need one; every weight quantized through that plan (outlier columns kept exact
 * when the config splits them, outliers.h) and installed in a copy of the reference
 * weight set; the config's activation rounding installed on every product
 * (actquant.h); and what the run stores about them: per-tensor errors against the
 * reference weights, the activation roundings, the weight-side metrics and the sizes.
 *
 * Quantized tensors are kept as bytes (the config's products read them as their
 * sources, model.h) and cached across configs, keyed by (tensor, type, importance
 * matrix, outlier columns), so configs that differ only in other axes share them.
 * Before a config is built, the cache drops the least recently used tensors that
 * config does not use until it fits its memory budget.
 *
 * Ownership: a ql_qweights borrows the model and metric imatrix it was given, which
 * must outlive it. Not thread-safe (the quantization kernels themselves use every
 * core). */
#ifndef QL_QWEIGHTS_H
#define QL_QWEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "experiment/actquant.h"
#include "experiment/calib.h"
#include "experiment/config.h"
#include "experiment/fit.h"
#include "experiment/records.h"
#include "model/imatrix_io.h"
#include "model/model.h"
#include "model/quant.h"

/* Quantized tensors kept across configs, at most (the runner gives less for large
 * models, runner.h): every tensor of a few configs of a 100M-parameter model. */
#define QL_QWEIGHTS_CACHE_BYTES ((size_t)2 << 30)

typedef struct ql_qweights ql_qweights;

typedef struct {
    const ql_model *model;            /* the reference model (borrowed) */
    const char *model_sha;            /* hex SHA-256 of its file: keys the fit solver's tables */
    const char *cache_dir;            /* where the fit solver caches its error tables */
    const ql_imatrix *metric_imatrix; /* weighs every imatrix_err (borrowed); NULL = none */
    size_t cache_bytes;               /* memory for cached tensors; 0 = QL_QWEIGHTS_CACHE_BYTES */
    size_t gptq_bytes; /* what a config's GPTQ pass may plan with (gptq_pass.h); 0 = no limit */
    bool quiet;                       /* no progress lines */
    /* A budget with objective kld: replaces the table's errors by c's measured
     * sensitivities (fit.h's errors hook; the harness implements it: it holds the
     * calibration text's reference and the store that caches them). NULL: such a
     * config fails, naming the objective. */
    ql_status (*sensitivities)(void *ctx, const ql_config *c, const ql_calib_slot *slot,
                               ql_fit_table *t, ql_error *err);
    void *sens_ctx;
} ql_qweights_opts;

/* An empty tensor cache and the scratch of the longest row of o->model; the strings
 * of o are copied. */
ql_status ql_qweights_alloc(ql_qweights **out, const ql_qweights_opts *o, ql_error *err);
void ql_qweights_free(ql_qweights *q); /* NULL is fine */

/* One tensor quantized to type as a config of that type quantizes it (the same bytes:
 * the importance of im for the quantizer, the rows piece by piece), without the cache:
 * *src reads *bytes, which the caller frees. For measurements that try many types of
 * one tensor (sensitivity.h). */
ql_status ql_qweights_quantize_linear(const ql_linear *lin, int32_t type, const ql_imatrix *im,
                                      ql_weight_src *src, void **bytes, ql_error *err);

/* The same for expert e of a stacked expert tensor alone: its matrix quantized as a config
 * quantizes it (the same bytes as that expert's rows of the whole tensor's, with its own
 * importance); *src is that expert's source (rows numbered from its first). */
ql_status ql_qweights_quantize_expert(const ql_linear *lin, int e, int32_t type,
                                      const ql_imatrix *im, ql_weight_src *src, void **bytes,
                                      ql_error *err);

/* What ql_qweights_build makes for one config. The records point into storage the
 * result owns; everything lives until ql_qweights_result_deinit, which must come
 * before the next ql_qweights_build (the weight set borrows from the cache). */
typedef struct {
    /* The reference weight set with every quantized product's source replaced by its
     * quantized bytes, borrowed from the cache (decoded layer by layer when bound). */
    ql_weights *weights;
    ql_act_plan *act;          /* installed on weights; NULL when nothing is rounded */
    ql_tensor_record *tensors; /* (n_tensors,) every weight quantized or kept F32 */
    size_t n_tensors;
    ql_act_record *acts; /* (n_acts,) products whose input is rounded or split */
    size_t n_acts;
    ql_expert_record *experts; /* (n_experts,) each expert of every stacked expert tensor */
    size_t n_experts;
    /* Weight side over every quantized tensor, as ql_run_metrics defines them. */
    double rmse, max_err, imatrix_err, imatrix_err_rel;
    /* A budget with objective kld: the summed sensitivities of the solver's choices
     * (NAN otherwise). */
    double predicted_kld;
    /* ... and its KLD on the calibration text (the harness measures it; NAN otherwise). */
    double calib_kld;
    /* Sizes: the plan's tensors plus the exact columns of an outlier split (gguf_bytes:
     * the GGUF file's, NAN when a type has no GGUF id; zlib_bytes: the tensors as
     * stored, compressed at zlib level 9, quant_int8row.h). */
    double bytes, bpw, bytes_body, bpw_body, gguf_bytes, zlib_bytes, params, params_body;
    double quantize_seconds; /* quantizing the tensors not found in the cache */
    /* weight_type file:PATH: the file, open for the weight set's use (its tensors are
     * the products' sources, read through its memory map); NULL otherwise. */
    ql_model *file_model;

    /* Private storage of the records above. */
    char (*names)[QL_QUANT_NAME_MAX];
    char (*reasons)[QL_QUANT_REASON_MAX];
    char (*choices)[QL_QUANT_REASON_MAX];
    const void **site_q; /* (n_lin,) quantized bytes of each product, NULL if none */
    char (*act_names)[96];
    char (*act_notes)[QL_ACT_NOTE_MAX];
} ql_qweights_result;

/* Builds config c's weight set into r (overwritten). slot is c's importance matrix
 * (ql_calib_config_imatrix, NULL for none); the outlier channels come from cal. The
 * cache is first trimmed to its budget (least recently used first; the previous
 * config's tensors stay). A config whose weight_type is file:PATH takes every tensor
 * from that file as it is (ql_model_check_same_shape first): its records say
 * requested = used = the file's type, choice "file", with the errors against the
 * reference weights; its sizes are the file's tensors'. On error r holds nothing. */
ql_status ql_qweights_build(ql_qweights *q, ql_calib *cal, const ql_config *c, ql_calib_slot *slot,
                            ql_qweights_result *r, ql_error *err);

/* Frees everything r holds and zeroes it; a zeroed result is fine. */
void ql_qweights_result_deinit(ql_qweights_result *r);

#endif
