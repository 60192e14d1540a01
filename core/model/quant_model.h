/* qlab: quantizing a whole GGUF model file (what `qlab quantize` runs).
 *
 * Reads a GGUF model whose tensors are F32, F16 or BF16, decides every tensor's type
 * with the type policy (quant_policy.h: a pure weight type or one of llama-quantize's
 * mixes), quantizes tensor by tensor (multi-threaded over rows) and writes a GGUF
 * file llama.cpp can load: all metadata copied, general.quantization_version = 2 and
 * general.file_type set to llama.cpp's LLAMA_FTYPE of the mix or the weight type. Peak memory: about three float copies of the
 * largest tensor plus its quantized bytes. Optionally measures each tensor's error
 * (dequantized vs source), weighted per input column by an importance vector.
 * Non-finite weights in a tensor to be quantized are an error naming its position. */
#ifndef QL_QUANT_MODEL_H
#define QL_QUANT_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "model/gguf.h"
#include "model/quant.h"

/* general.quantization_version llama-quantize writes (ggml's GGML_QNT_VERSION). */
#define QL_GGML_QNT_VERSION 2

/* Importance weights of a tensor: returns n_mats * n_per_row floats (one vector per
 * 2-D matrix of the tensor, n_mats = ne[2] * ne[3]) or NULL when there are none.
 * The pointer must stay valid until the model is written. */
typedef const float *(*ql_imatrix_lookup_fn)(void *ctx, const char *tensor, int64_t n_per_row,
                                             int64_t n_mats);

/* What llama-quantize records about the importance matrix it used, written as the
 * keys quantize.imatrix.file, .dataset (when not NULL), .entries_count and
 * .chunks_count (when > 0), as llama-quantize writes them (str, str, i32, i32). */
typedef struct {
    const char *file;
    const char *dataset;
    int64_t n_entries;
    int64_t n_chunks;
} ql_quant_imatrix_meta;

/* Writes m's keys (nothing when m is NULL), as llama-quantize does after
 * general.file_type. Errors: counts beyond int32, a failed write. */
ql_status ql_quant_write_imatrix_keys(ql_gguf_writer *w, const ql_quant_imatrix_meta *m,
                                      ql_error *err);

typedef struct {
    ql_quant_config cfg;
    ql_imatrix_lookup_fn imatrix; /* NULL: no importance weights (ggml's reference path) */
    void *imatrix_ctx;
    bool stats; /* measure the per-tensor weight error */
    bool quiet; /* no progress line */
    /* Importance that weighs the stats' imatrix_err (e.g. to compare a file quantized
     * without an imatrix on the same scale); NULL: the quantization's own imatrix. */
    ql_imatrix_lookup_fn stats_imatrix;
    void *stats_imatrix_ctx;
    const ql_quant_imatrix_meta *imatrix_meta; /* NULL: no quantize.imatrix.* keys */
} ql_quant_model_opts;

typedef struct {
    ql_quant_plan *plan;     /* one entry per tensor, file order */
    ql_weight_error *errors; /* per tensor when opts.stats, else NULL */
    ql_weight_error total;   /* all tensors (when opts.stats) */
    ql_weight_error body;    /* all but the head and the embeddings (when opts.stats) */
    bool *has_imatrix;       /* per tensor: importance weights were used to quantize it */
    uint32_t file_type;      /* general.file_type written */
    uint64_t file_size;      /* bytes of the written file */
    double seconds;
} ql_quant_model_report;

/* LLAMA_FTYPE value for a model whose weights are of type (llama.h, b4747): Q4_0 -> 2,
 * Q8_0 -> 7, Q4_K -> 14 (Q4_K_S), ... Returns false for types with no GGUF ftype. */
bool ql_quant_llama_ftype(int32_t type, uint32_t *ftype);

/* Whether ql_quant_model can write type as the `what` type ("weight", "head",
 * "embedding"): QL_OK for a GGUF weight type and for QL_TYPE_INVALID (the weight
 * type); otherwise QL_EINVAL with the reason (INT8_ROW and Q8_0_XC are not GGUF
 * types, Q8_1 and Q8_K not weight types). */
ql_status ql_quant_model_check_type(int32_t type, const char *what, ql_error *err);

/* Quantizes in_path into out_path. Errors name the file and tensor. INT8_ROW and
 * Q8_0_XC are refused (they are not GGUF types). On success *report (free with
 * ql_quant_model_report_free) describes what was written. */
ql_status ql_quant_model(const char *in_path, const char *out_path, const ql_quant_model_opts *opts,
                         ql_quant_model_report **report, ql_error *err);

void ql_quant_model_report_free(ql_quant_model_report *r);

#endif
