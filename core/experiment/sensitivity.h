/* qlab: measured sensitivity of a model to quantizing one tensor or one group of
 * tensors (issue 18).
 *
 * The sensitivity of a unit (a tensor, or a group of them: config.h's ql_grouping) to a
 * type is what quantizing that unit alone to that type does to the output, the rest of
 * the model at reference precision: the mean KLD against the reference and
 * ln(PPL_q / PPL_ref), with their standard errors (distribution.h), on a calibration text.
 * The fit's `kld` objective (fit.h) predicts a mixed config's KLD as the sum of the
 * sensitivities of its (unit, type) choices.
 *
 * How: the reference's residual stream of every calibration chunk is held (chunks x
 * (ctx - 1) x n_embd floats) and advanced one block at a time. A candidate whose first
 * tensor is in block l starts from the held stream at block l's input and recomputes
 * blocks l .. L-1 and the head only; a candidate for the head alone applies the
 * quantized head to the reference's kept head inputs (no block); the token embedding
 * recomputes every block. So a candidate from block l costs (L - l) / L of a reference
 * pass plus one head, and the whole measurement over a model of L blocks, K units per
 * block and T types costs about K T (L + 1) / 2 passes (a kind grouping's units start
 * at block 0: a pass each). The products, the K/V rounding (f32) and the head are those
 * of the sweep's pass, in the same order, so a candidate's figures are those of a sweep
 * config that quantizes that unit alone (tensor_types) on the same text: the same bits
 * (tested).
 *
 * Memory: the two streams (2 x chunks x (ctx - 1) x n_embd floats: the calibration
 * text's tokens, not the model's size, set it), one chunk's logits and the scores of
 * every scored token, checked against the job's budget.
 *
 * Threading: the products use every core (gemm.h); candidates run one after another. */
#ifndef QL_SENSITIVITY_H
#define QL_SENSITIVITY_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "experiment/config.h"
#include "experiment/reference.h"
#include "model/imatrix_io.h"
#include "model/model.h"

/* Tensor kinds as the heatmap's columns name them: the products of a block, then the
 * head and the token embedding (block -1). */
const char *ql_sens_kind_name(const ql_model *m, const char *tensor, int *layer);

/* The unit tensor belongs to in grouping g: its name into name ("blk.3.attn" for a
 * module, "blk.3" for a layer, the kind's name "ffn_down" for a kind, "blk.3.ffn_exps"
 * for a block's expert tensors in the expert grouping; the tensor's own name in the
 * tensor grouping and for the head and the embedding) and its kind ("attn" or "ffn",
 * "block", the kind, "experts"; in the tensor grouping the tensor's kind); *layer: the
 * tensor's own block as ql_sens_kind_name gives it. NULL when tensor is no product. */
const char *ql_sens_unit(const ql_model *m, const char *tensor, ql_grouping g, char *name,
                         size_t size, int *layer);

/* One (unit, type) to measure and what was measured. */
typedef struct {
    const char *name;           /* the unit's: a tensor's GGUF name or a group's */
    const char *const *tensors; /* its tensors: product weights, output.weight, token_embd.weight */
    int n_tensors;
    int32_t type;
    /* One expert of stacked expert tensors (the expert grouping's measurement): only
     * expert `expert` of each of the tensors is quantized, the others keep the
     * reference's values. */
    bool one_expert;
    int expert;
    /* out */
    double kld_mean, kld_mean_err;
    double ln_ppl_ratio, ln_ppl_ratio_err;
    double seconds; /* quantizing and scoring it */
} ql_sens_item;

/* Called after each item is measured (to store it at once: a long measurement that is
 * interrupted keeps what it did). May be NULL. */
typedef ql_status (*ql_sens_done_fn)(void *ctx, const ql_sens_item *item, ql_error *err);

typedef struct {
    const ql_model *model; /* the reference model; its weight set is not changed */
    ql_reference *ref;     /* the reference on the calibration text (with fw, d) */
    ql_forward *fw;        /* the forward pass of the calibration text's ctx */
    const ql_ppl_data *d;  /* the calibration chunks */
    const ql_imatrix *im;  /* the quantizer's importance (NULL: none) */
    ql_sens_done_fn done;  /* may be NULL */
    void *done_ctx;
    /* What the held streams, one chunk's logits and the scores may take (0: no limit):
     * a measurement above it is refused, naming what it needs, before it allocates. */
    size_t mem_bytes;
    bool quiet; /* no progress line */
} ql_sens_job;

/* The name of one expert's row in the expert grouping: "blk.3.exp.17". */
void ql_sens_expert_name(int layer, int expert, char *name, size_t size);

/* Measures items[0 .. n) in the order of their first blocks. Errors: a tensor the model
 * has no product for, a type a tensor's rows do not take, the quantizer's and the pass's
 * errors. */
ql_status ql_sens_measure(const ql_sens_job *job, ql_sens_item *items, int64_t n, ql_error *err);

#endif
