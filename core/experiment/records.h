/* qlab: what a run measures: the records the harness fills for one config and the
 * results store keeps (results/store.h). Missing measurements are NAN (or -1 for
 * counts), stored as NULL, never 0. */
#ifndef QL_RECORDS_H
#define QL_RECORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The metrics of DESIGN.md section 4, one line each, in the store's column order:
 * X(name, is_count). A count must be a whole number when measured (stored as an
 * INTEGER); NAN = not measured (stored as NULL). The struct below, the store's
 * columns and its readers are derived from this list. */
#define QL_RUN_METRICS(X)                                                                          \
    X(ppl, false)                                                                                  \
    X(ppl_err, false)                                                                              \
    X(ppl_ref, false)                                                                              \
    X(ppl_ref_err, false)                                                                          \
    X(ln_ppl_ratio, false)                                                                         \
    X(ln_ppl_ratio_err, false)                                                                     \
    X(kld_mean, false)                                                                             \
    X(kld_mean_err, false)                                                                         \
    X(kld_median, false)                                                                           \
    X(kld_p90, false)                                                                              \
    X(kld_p99, false)                                                                              \
    X(kld_p999, false)                                                                             \
    X(kld_max, false)                                                                              \
    X(dp_mean, false)                                                                              \
    X(dp_rms, false)                                                                               \
    X(dp_min, false)                                                                               \
    X(dp_max, false)                                                                               \
    X(max_abs_prob_err, false)                                                                     \
    X(top1_agree, false)                                                                           \
    X(n_tokens, true)                                                                              \
    /* weight side, summed over the model (rmse and max_err over all weights) */                   \
    X(rmse, false)                                                                                 \
    X(max_err, false)                                                                              \
    X(imatrix_err, false)                                                                          \
    X(imatrix_err_rel, false)                                                                      \
    /* size: whole model and body (without head and embeddings) */                                 \
    X(bytes, true)                                                                                 \
    X(bpw, false)                                                                                  \
    X(bytes_body, true)                                                                            \
    X(bpw_body, false)                                                                             \
    X(gguf_bytes, true)                                                                            \
    X(zlib_bytes, true)                                                                            \
    X(params, true)                                                                                \
    X(params_body, true)
typedef struct {
#define QL_METRIC_FIELD(name, is_count) double name;
    QL_RUN_METRICS(QL_METRIC_FIELD)
#undef QL_METRIC_FIELD
} ql_run_metrics;

/* Sets every field to NAN. */
void ql_run_metrics_init(ql_run_metrics *m);

/* One quantized tensor of a run. Shape: n_cols = ne[0] (row length), n_rows = the
 * product of the other dimensions. */
typedef struct {
    const char *tensor;          /* GGUF name, e.g. "blk.3.attn_q.weight" */
    int32_t requested_type;      /* ql_type the config asked for */
    int32_t used_type;           /* ql_type actually used */
    const char *fallback_reason; /* non-NULL iff used_type != requested_type */
    int64_t n_rows, n_cols, params, bytes;
    double rmse, max_err, imatrix_err, imatrix_err_rel; /* NAN = not measured */
    int64_t outlier_cols;                               /* -1 = split off (NULL) */
} ql_tensor_record;

/* Timings of a run in seconds; NAN = not measured. */
typedef struct {
    double seconds;          /* the whole run */
    double quantize_seconds; /* quantizing the weights */
    double ref_seconds;      /* the reference forward pass it compared against */
    double quant_seconds;    /* the quantized forward pass */
} ql_run_timing;

void ql_run_timing_init(ql_run_timing *t);

/* Sums over the scored tokens of one chunk of the text (DESIGN.md section 4),
 * so that an analysis can resample chunks: a paired bootstrap between two runs
 * on the same text pairs their chunks by index. With t over the chunk's scored
 * positions, p the reference and q the quantized distribution, y the next token:
 *   kld_sum     = sum_t KL(p_t || q_t)            (nats)
 *   nll_sum     = sum_t -log q_t(y_t)
 *   nll_ref_sum = sum_t -log p_t(y_t)
 *   top1_count  = #{t : argmax q_t = argmax p_t}
 * NAN (or -1 for top1_count) = not measured, stored as NULL. */
typedef struct {
    int32_t chunk;    /* 0-based index of the chunk in the text, < the run's chunks */
    int64_t n_tokens; /* scored tokens in the chunk, > 0 */
    double kld_sum;
    double nll_sum;
    double nll_ref_sum;
    int64_t top1_count; /* 0..n_tokens, or -1 */
} ql_chunk_record;

/* The activation rounding of one product (act_mode): what was asked, what was
 * applied and why it differs. */
typedef struct {
    const char *tensor;    /* the product's weight name */
    const char *requested; /* "f16", "q8_0", "q8_K", ... */
    const char *used;
    const char *note;      /* non-NULL iff used differs from requested */
    int64_t kept_channels; /* outlier channels left unrounded; -1 = no split (NULL) */
} ql_act_record;

/* Everything a finished run stores. */
typedef struct {
    const ql_run_metrics *metrics;   /* required */
    const ql_tensor_record *tensors; /* n_tensors records, or NULL when 0 */
    size_t n_tensors;
    /* Optional per-chunk sums: either none (n_chunks = 0) or one record for every
     * chunk 0..chunks-1 of the run, in any order. When metrics->n_tokens is
     * measured, the chunks' n_tokens must add up to it. */
    const ql_chunk_record *chunks;
    size_t n_chunks;
    const ql_run_timing *timing; /* NULL = not measured */
    /* Activation roundings of the products whose input is rounded (may be none). */
    const ql_act_record *acts;
    size_t n_acts;
} ql_run_result;

#endif
