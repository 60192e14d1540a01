/* qlab: the calibration resources a sweep's configs name.
 *
 * A config's `imatrix` axis names an importance matrix: a file (imatrix_io.h reads
 * every format it knows) or `calib:TEXT[,ctx=N][,chunks=N]`, collected over TEXT with
 * the sweep's model. A calib: imatrix also carries what else derives from the same
 * text: the per-channel activation maxima of every product (outliers.h), observed in
 * the same forward pass, and, per outlier_ratio, the outlier channel sets selected
 * from them. The imatrix and the maxima are kept under the cache directory, side by
 * side under one key (model, text, ctx, chunks):
 *   imatrix-<model sha256:16>-<text sha256:16>-c<ctx>-n<chunks>-po0.gguf  GGUF imatrix
 *   imatrix-<model sha256:16>-<text sha256:16>-c<ctx>-n<chunks>-po0.amax  maxima
 *                                                 (layout: outliers.h, the cache file)
 * so a resumed sweep, another shard or a `--jobs` process loads both and runs no
 * calibration pass. A cache file that is unusable (damaged, or of another model,
 * text or chunk count) is named in a warning and made again; maxima missing beside a
 * cached imatrix are made by a pass that keeps the cached imatrix. Each resource is
 * made on first use and shared by every config of the sweep that names it.
 *
 * Ownership: a ql_calib owns its slots, their imatrices, statistics and outlier sets;
 * every pointer it hands out stays valid until ql_calib_free. It borrows the model and
 * tokenizer it was given, which must outlive it. Not thread-safe. */
#ifndef QL_CALIB_H
#define QL_CALIB_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "experiment/config.h"
#include "experiment/outliers.h"
#include "experiment/sweep.h"
#include "model/imatrix_io.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/tokenizer.h"

typedef struct ql_calib ql_calib;

/* One importance matrix a config names, and what derives from its calibration text. */
typedef struct ql_calib_slot ql_calib_slot;

typedef struct {
    const ql_model *model;   /* the sweep's reference model (borrowed) */
    const ql_tokenizer *tok; /* its tokenizer (borrowed) */
    const char *model_sha;   /* hex SHA-256 of the model file: keys the cached imatrices */
    const char *cache_dir;   /* where calib: imatrices are cached */
    int ctx;                 /* chunk length of a calib: text that names none (the sweep's) */
    bool quiet;              /* no progress lines */
    size_t mem_bytes;        /* memory a calibration pass may take for its chunk groups */
    /* Where an imatrix file's or a calib: text's relative path is relative to: the sweep
     * file's directory (sweep.h); NULL or "" = the current directory. A manifest name is
     * found by name. */
    const char *base_dir;
} ql_calib_source;

/* An empty set of resources; the strings of src are copied. */
ql_status ql_calib_alloc(ql_calib **out, const ql_calib_source *src, ql_error *err);
void ql_calib_free(ql_calib *cal); /* NULL is fine */

/* The slot of c's importance matrix, loading the file or computing (or loading from
 * the cache) the calib: imatrix and its activation maxima on first use; *out = NULL
 * for imatrix = none. A load that fails leaves no slot behind: the next config naming
 * it tries again. */
ql_status ql_calib_config_imatrix(ql_calib *cal, const ql_config *c, ql_calib_slot **out,
                                  ql_error *err);

/* The slot's importance matrix and the hex SHA-256 of its file (what a run records);
 * NULL for a NULL slot. */
const ql_imatrix *ql_calib_slot_imatrix(const ql_calib_slot *slot);
const char *ql_calib_slot_sha256(const ql_calib_slot *slot);

/* The calibration text of c's calib: imatrix in chunks as its pass reads them (its ctx,
 * else the sweep's; its chunk count), and the text's SHA-256 (free d with
 * ql_ppl_data_free). The text the kld objective measures sensitivities on. */
ql_status ql_calib_config_text(const ql_calib *cal, const ql_config *c, ql_ppl_data *d,
                               char text_sha[65], ql_error *err);

/* The outlier channels of c (slot: c's, from ql_calib_config_imatrix): *out = NULL
 * without a split (outlier_ratio 0). A ratio needs the activation maxima of a calib:
 * text (the slot holds them); the sets are kept per ratio. */
ql_status ql_calib_config_outliers(ql_calib *cal, const ql_config *c, ql_calib_slot *slot,
                                   const ql_outlier_set **out, ql_error *err);

/* The imatrix that weighs every run's imatrix_err columns: the first one a config of
 * sw names, in expansion order (loaded here); *out = NULL when none names one. */
ql_status ql_calib_pick_metric_imatrix(ql_calib *cal, const ql_sweep *sw, const ql_imatrix **out,
                                       ql_error *err);

/* Per-column importance of tensor `name` (n_cols columns) from im into buf (n_cols
 * floats): *out = buf, or NULL when im is NULL or has no usable entry for the tensor
 * (then it is quantized without importance, as llama-quantize does). */
ql_status ql_calib_column_weights(const ql_imatrix *im, const char *name, int64_t n_cols,
                                  float *buf, const float **out, ql_error *err);

#endif
