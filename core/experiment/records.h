/* qlab: what a run measures: the records the harness fills for one config and the
 * results store keeps (results/store.h). Missing measurements are NAN (or -1 for
 * counts), stored as NULL, never 0. */
#ifndef QL_RECORDS_H
#define QL_RECORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The metrics a run records (the README defines each), one line each, in the order
 * of the store's metrics table and results views. Everything qlab does per metric derives from
 * this list: the struct below, the store's columns, migrations, views, inserts and
 * readers, the harness's copy of each figure, the report's table, CSV and legend,
 * the sweep summary and `qlab query formats`. Adding a metric is a line here plus
 * its computation (a field of the same name in the record its source names).
 *
 *   X(name, kind, since, source, pos, label, show, format, digits, flags, note)
 *
 *   name     field of ql_run_metrics and column of the metrics table
 *   kind     REAL:    a double, REAL column; NAN = not measured = NULL
 *            COUNT:   a whole number >= 0 held in a double (exact to 2^53),
 *                     INTEGER column; NAN = NULL
 *            DERIVED: not stored: the views compute it (source is its SQL over the
 *                     metrics row, alias m); no field
 *   since    store schema version whose metrics table first had the column (a later
 *            one becomes ALTER TABLE ... ADD COLUMN for older databases)
 *   source   which record of a run computes it, under the same field name: DIST
 *            (ql_dist_metrics, experiment/metrics.h), WEIGHTS (ql_qweights_result,
 *            experiment/qweights.h), OVERLAP (ql_overlap_metrics below), ROUTING
 *            (ql_routing_metrics below, computed by
 *            experiment/routing.h) or TENSORS (ql_tensor_shares below, from the run's
 *            tensor records: the store fills these when it stores the run); the SQL of
 *            a DERIVED metric
 *   pos      place in the report's outputs (report.md table, formats.csv, legend, the
 *            sweep summary, `qlab query formats`), increasing; 0 = in none
 *   label    header of report.md's table and the sweep summary; NULL = not a column
 *   show     how a table cell reads: NUM (format), PCT (format of 100 x value),
 *            BYTES (binary units: 240.47 KiB)
 *   format   printf format of one double, for NUM and PCT
 *   digits   decimals of the value in `qlab query formats` (counts as they are);
 *            -1 = not in it
 *   flags    QL_METRIC_* below
 *   note     the sentence report.md's legend gives the column, or NULL */
// clang-format off
#define QL_RUN_METRICS(X)                                                                          \
    X(ppl,              REAL,    1, DIST,  4, "PPL",       NUM, "%.4f",  4,                        \
      QL_METRIC_CSV | QL_METRIC_SUMMARY | QL_METRIC_PM,                                            \
      "PPL ± its standard error; ΔPPL = PPL − reference PPL.")                                     \
    X(ppl_err,          REAL,    1, DIST,  5, NULL,        NUM, "%.4f",  4, QL_METRIC_CSV, NULL)   \
    X(ppl_ref,          REAL,    1, DIST,  6, NULL,        NUM, "%.4f", -1, QL_METRIC_CSV, NULL)   \
    X(ppl_ref_err,      REAL,    1, DIST,  7, NULL,        NUM, "%.4f", -1, QL_METRIC_CSV, NULL)   \
    X(d_ppl,            DERIVED, 1, "m.ppl - m.ppl_ref",                                           \
                                       8, "ΔPPL",      NUM, "%+.4f", 4,                            \
      QL_METRIC_CSV | QL_METRIC_SUMMARY, NULL)                                                     \
    X(ln_ppl_ratio,     REAL,    1, DIST,  0, NULL,        NUM, "%+.4e", -1, 0, NULL)              \
    X(ln_ppl_ratio_err, REAL,    1, DIST,  0, NULL,        NUM, "%.4e",  -1, 0, NULL)              \
    X(kld_mean,         REAL,    1, DIST,  9, "KLD mean",  NUM, "%.3e",  6,                        \
      QL_METRIC_CSV | QL_METRIC_SUMMARY,                                                           \
      "KLD: KL(reference ‖ quantized) per scored token in nats, mean and 99th percentile.")        \
    X(kld_mean_err,     REAL,    1, DIST,  0, NULL,        NUM, "%.3e", -1, 0, NULL)               \
    X(kld_median,       REAL,    1, DIST,  0, NULL,        NUM, "%.3e", -1, 0, NULL)               \
    X(kld_p90,          REAL,    1, DIST,  0, NULL,        NUM, "%.3e", -1, 0, NULL)               \
    X(kld_p99,          REAL,    1, DIST, 10, "KLD p99",   NUM, "%.3e",  6, QL_METRIC_CSV, NULL)   \
    X(kld_p999,         REAL,    1, DIST,  0, NULL,        NUM, "%.3e", -1, 0, NULL)               \
    X(kld_max,          REAL,    1, DIST,  0, NULL,        NUM, "%.3e", -1, 0, NULL)               \
    X(dp_mean,          REAL,    1, DIST,  0, NULL,        NUM, "%+.4e", -1, 0, NULL)              \
    X(dp_rms,           REAL,    1, DIST,  0, NULL,        NUM, "%.4f", -1, 0, NULL)               \
    X(dp_min,           REAL,    1, DIST,  0, NULL,        NUM, "%+.4f", -1, 0, NULL)              \
    X(dp_max,           REAL,    1, DIST,  0, NULL,        NUM, "%+.4f", -1, 0, NULL)              \
    X(max_abs_prob_err, REAL,    1, DIST, 12, "max |Δp|",  NUM, "%.4f",  4, QL_METRIC_CSV,         \
      "max |Δp|: the largest change of any token's probability.")                                  \
    X(top1_agree,       REAL,    1, DIST, 11, "top-1 %",   PCT, "%.2f",  4,                        \
      QL_METRIC_CSV | QL_METRIC_SUMMARY,                                                           \
      "top-1: tokens whose most likely next token is the reference's.")                            \
    X(n_tokens,         COUNT,   1, DIST,  0, NULL,        NUM, "%.0f", -1, 0, NULL)               \
    /* llama-perplexity's and exllamav3's further statistics (schema 4) */                        \
    X(kld_min,          REAL,    4, DIST, 14, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(kld_p01,          REAL,    4, DIST, 15, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(kld_p05,          REAL,    4, DIST, 16, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(kld_p10,          REAL,    4, DIST, 17, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(kld_p25,          REAL,    4, DIST, 18, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(kld_p75,          REAL,    4, DIST, 19, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(kld_p95,          REAL,    4, DIST, 20, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(rkld_mean,        REAL,    4, DIST, 21, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(rkld_mean_err,    REAL,    4, DIST, 22, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(kld_conf_0_25,    REAL,    4, DIST, 23, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(kld_conf_0_25_err, REAL,   4, DIST, 24, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(n_conf_0_25,      COUNT,   4, DIST, 25, NULL,        NUM, "%.0f", -1, QL_METRIC_CSV, NULL)   \
    X(kld_conf_25_50,   REAL,    4, DIST, 26, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(kld_conf_25_50_err, REAL,  4, DIST, 27, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(n_conf_25_50,     COUNT,   4, DIST, 28, NULL,        NUM, "%.0f", -1, QL_METRIC_CSV, NULL)   \
    X(kld_conf_50_75,   REAL,    4, DIST, 29, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(kld_conf_50_75_err, REAL,  4, DIST, 30, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(n_conf_50_75,     COUNT,   4, DIST, 31, NULL,        NUM, "%.0f", -1, QL_METRIC_CSV, NULL)   \
    X(kld_conf_75_95,   REAL,    4, DIST, 32, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(kld_conf_75_95_err, REAL,  4, DIST, 33, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(n_conf_75_95,     COUNT,   4, DIST, 34, NULL,        NUM, "%.0f", -1, QL_METRIC_CSV, NULL)   \
    X(kld_conf_95_100,  REAL,    4, DIST, 35, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(kld_conf_95_100_err, REAL, 4, DIST, 36, NULL,        NUM, "%.3e", -1, QL_METRIC_CSV, NULL)   \
    X(n_conf_95_100,    COUNT,   4, DIST, 37, NULL,        NUM, "%.0f", -1, QL_METRIC_CSV, NULL)   \
    X(dp_mean_err,      REAL,    4, DIST, 38, NULL,        NUM, "%.4e", -1, QL_METRIC_CSV, NULL)   \
    X(dp_rms_err,       REAL,    4, DIST, 39, NULL,        NUM, "%.4e", -1, QL_METRIC_CSV, NULL)   \
    X(dp_p001,          REAL,    4, DIST, 40, NULL,        NUM, "%+.4f", -1, QL_METRIC_CSV, NULL)  \
    X(dp_p01,           REAL,    4, DIST, 41, NULL,        NUM, "%+.4f", -1, QL_METRIC_CSV, NULL)  \
    X(dp_p05,           REAL,    4, DIST, 42, NULL,        NUM, "%+.4f", -1, QL_METRIC_CSV, NULL)  \
    X(dp_p10,           REAL,    4, DIST, 43, NULL,        NUM, "%+.4f", -1, QL_METRIC_CSV, NULL)  \
    X(dp_p25,           REAL,    4, DIST, 44, NULL,        NUM, "%+.4f", -1, QL_METRIC_CSV, NULL)  \
    X(dp_median,        REAL,    4, DIST, 45, NULL,        NUM, "%+.4f", -1, QL_METRIC_CSV, NULL)  \
    X(dp_p75,           REAL,    4, DIST, 46, NULL,        NUM, "%+.4f", -1, QL_METRIC_CSV, NULL)  \
    X(dp_p90,           REAL,    4, DIST, 47, NULL,        NUM, "%+.4f", -1, QL_METRIC_CSV, NULL)  \
    X(dp_p95,           REAL,    4, DIST, 48, NULL,        NUM, "%+.4f", -1, QL_METRIC_CSV, NULL)  \
    X(dp_p99,           REAL,    4, DIST, 49, NULL,        NUM, "%+.4f", -1, QL_METRIC_CSV, NULL)  \
    X(dp_p999,          REAL,    4, DIST, 50, NULL,        NUM, "%+.4f", -1, QL_METRIC_CSV, NULL)  \
    X(top1_agree_err,   REAL,    4, DIST, 51, NULL,        PCT, "%.2f", -1, QL_METRIC_CSV, NULL)   \
    X(top5_ref_in_q,    REAL,    4, DIST, 52, NULL,        PCT, "%.2f", -1, QL_METRIC_CSV, NULL)   \
    X(top5_ref_in_q_err, REAL,   4, DIST, 53, NULL,        PCT, "%.2f", -1, QL_METRIC_CSV, NULL)   \
    X(top10_ref_in_q,   REAL,    4, DIST, 54, NULL,        PCT, "%.2f", -1, QL_METRIC_CSV, NULL)   \
    X(top10_ref_in_q_err, REAL,  4, DIST, 55, NULL,        PCT, "%.2f", -1, QL_METRIC_CSV, NULL)   \
    X(top5_q_in_ref,    REAL,    4, DIST, 56, NULL,        PCT, "%.2f", -1, QL_METRIC_CSV, NULL)   \
    X(top5_q_in_ref_err, REAL,   4, DIST, 57, NULL,        PCT, "%.2f", -1, QL_METRIC_CSV, NULL)   \
    X(top10_q_in_ref,   REAL,    4, DIST, 58, NULL,        PCT, "%.2f", -1, QL_METRIC_CSV, NULL)   \
    X(top10_q_in_ref_err, REAL,  4, DIST, 59, NULL,        PCT, "%.2f", -1, QL_METRIC_CSV, NULL)   \
    /* weight side, summed over the model (rmse and max_err over all weights) */                   \
    X(rmse,             REAL,    1, WEIGHTS, 0, NULL,      NUM, "%.3e", -1, 0, NULL)               \
    X(max_err,          REAL,    1, WEIGHTS, 0, NULL,      NUM, "%.3e", -1, 0, NULL)               \
    X(imatrix_err,      REAL,    1, WEIGHTS, 0, NULL,      NUM, "%.3e", -1, 0, NULL)               \
    X(imatrix_err_rel,  REAL,    1, WEIGHTS, 13, "imatrix err", NUM, "%.3e", 6, QL_METRIC_CSV,     \
      "imatrix err: Σ I·(w − ŵ)² / Σ I·w² over the quantized weights.")                            \
    /* a budget with objective kld: the solver's prediction, Σ of the chosen tensors'       \
     * measured sensitivities on the calibration text (schema 8) */                         \
    X(predicted_kld,    REAL,    8, WEIGHTS, 63, NULL,     NUM, "%.3e", 6, QL_METRIC_CSV, NULL)   \
    /* ... and the fitted config's own KLD on that calibration text: the prediction with   \
     * the interactions of its choices measured (schema 8) */                               \
    X(calib_kld,        REAL,    8, WEIGHTS, 64, NULL,     NUM, "%.3e", 6, QL_METRIC_CSV, NULL)   \
    /* size: whole model and body (without head and embeddings) */                                 \
    X(bytes,            COUNT,   1, WEIGHTS, 3, "size",    BYTES, "%.0f", 0,                       \
      QL_METRIC_CSV | QL_METRIC_KEEP, NULL)                                                        \
    X(bpw,              REAL,    1, WEIGHTS, 1, "bpw",     NUM, "%.3f",  4,                        \
      QL_METRIC_CSV | QL_METRIC_SUMMARY | QL_METRIC_KEEP,                                          \
      "bpw and size: the quantized weights of the whole model (F32 norms included).")              \
    X(bytes_body,       COUNT,   1, WEIGHTS, 0, NULL,      BYTES, "%.0f", -1, 0, NULL)             \
    X(bpw_body,         REAL,    1, WEIGHTS, 2, NULL,      NUM, "%.3f",  4, 0, NULL)               \
    X(gguf_bytes,       COUNT,   1, WEIGHTS, 0, NULL,      BYTES, "%.0f", -1, 0, NULL)             \
    X(zlib_bytes,       COUNT,   1, WEIGHTS, 0, NULL,      BYTES, "%.0f", -1, 0, NULL)             \
    X(params,           COUNT,   1, WEIGHTS, 0, NULL,      NUM, "%.0f", -1, 0, NULL)               \
    X(params_body,      COUNT,   1, WEIGHTS, 0, NULL,      NUM, "%.0f", -1, 0, NULL)               \
    /* which share of the parameters got the type asked for (schema 4): matmul weights       \
     * without head and embeddings, the head, the embeddings; from the tensor records */       \
    X(applied_body,     REAL,    4, TENSORS, 60, NULL,     PCT, "%.1f", -1, QL_METRIC_CSV, NULL)   \
    X(applied_head,     REAL,    4, TENSORS, 61, NULL,     PCT, "%.1f", -1, QL_METRIC_CSV, NULL)   \
    X(applied_embd,     REAL,    4, TENSORS, 62, NULL,     PCT, "%.1f", -1, QL_METRIC_CSV, NULL)   \
    /* a mixture of experts' routing against the reference's, means over its MoE blocks  \
     * (schema 10; experiment/routing.h defines them; NULL for dense models) */            \
    X(route_agree,      REAL,   10, ROUTING, 65, "route %", PCT, "%.2f", 4, QL_METRIC_CSV,         \
      "route: scored tokens whose experts are the reference's (per MoE block, then the mean).") \
    X(route_overlap,    REAL,   10, ROUTING, 66, NULL,     PCT, "%.2f", 4, QL_METRIC_CSV, NULL)   \
    X(load_shift,       REAL,   10, ROUTING, 67, NULL,     NUM, "%.4f", 4, QL_METRIC_CSV, NULL)   \
    /* the share of the evaluated text's token 8-grams and 32-grams found in the text the  \
     * run's imatrix or fit sensitivities came from (schema 11; experiment/overlap.h);     \
     * NULL when no calibration text was used or it is unknown (an imatrix .dat file) */    \
    X(calib_overlap_8,  REAL,   12, OVERLAP, 68, NULL,     PCT, "%.1f", 4, QL_METRIC_CSV, NULL)   \
    X(calib_overlap_32, REAL,   12, OVERLAP, 69, "calib ∩ eval", PCT, "%.1f", 4, QL_METRIC_CSV,   \
      "calib ∩ eval: the share of the evaluated text's 32-token n-grams that occur in the "      \
      "calibration text of the config's imatrix (overlap.h); above 2% the config is flagged.")
// clang-format on

/* Flags of a metric. */
enum {
    QL_METRIC_CSV = 1u << 0,     /* a column of the report's formats.csv */
    QL_METRIC_SUMMARY = 1u << 1, /* a column of the sweep summary */
    QL_METRIC_PM = 1u << 2,      /* report.md shows it as "value ± <name>_err" */
    QL_METRIC_KEEP = 1u << 3,    /* report.md keeps the column when no row has a value */
};

typedef enum { QL_METRIC_KIND_REAL, QL_METRIC_KIND_COUNT, QL_METRIC_KIND_DERIVED } ql_metric_kind;

typedef enum { QL_METRIC_SHOW_NUM, QL_METRIC_SHOW_PCT, QL_METRIC_SHOW_BYTES } ql_metric_show;

/* QL_METRIC_<name>: a metric's index in the list (and in ql_metrics()). */
typedef enum {
#define QL_METRIC_ID(name, ...) QL_METRIC_##name,
    QL_RUN_METRICS(QL_METRIC_ID)
#undef QL_METRIC_ID
        QL_N_METRICS
} ql_metric_id;

/* The stored metrics of one run (every kind but DERIVED). */
typedef struct {
#define QL_METRIC_FIELD(name, kind, ...) QL_METRIC_FIELD_##kind(name)
#define QL_METRIC_FIELD_REAL(name)       double name;
#define QL_METRIC_FIELD_COUNT(name)      double name;
#define QL_METRIC_FIELD_DERIVED(name)
    QL_RUN_METRICS(QL_METRIC_FIELD)
#undef QL_METRIC_FIELD
} ql_run_metrics;

/* The routing figures of a run (experiment/routing.h), NAN for a dense model. */
typedef struct {
    double route_agree, route_overlap, load_shift;
} ql_routing_metrics;

/* The calibration/evaluation overlap of a run (experiment/overlap.h), NAN when none was
 * measured. */
typedef struct {
    double calib_overlap_8, calib_overlap_32;
} ql_overlap_metrics;

/* For code that fills ql_run_metrics from the records that compute the figures:
 * with QL_METRIC_FROM_<source>(name) defined for every source (DIST, WEIGHTS, ROUTING,
 * OVERLAP),
 * QL_RUN_METRICS(QL_METRIC_BY_SOURCE) expands it for every stored metric. A source
 * left undefined does not compile. TENSORS metrics are the store's to fill (from the
 * tensor records a run gives, ql_store_finish_run_result), so they expand to nothing
 * here. */
#define QL_METRIC_FROM_TENSORS(name)
#define QL_METRIC_BY_SOURCE(name, kind, since, source, ...) QL_METRIC_BY_SOURCE_##kind(name, source)
#define QL_METRIC_BY_SOURCE_REAL(name, source)              QL_METRIC_FROM_##source(name)
#define QL_METRIC_BY_SOURCE_COUNT(name, source)             QL_METRIC_FROM_##source(name)
#define QL_METRIC_BY_SOURCE_DERIVED(name, source)

/* What the list says about one metric. */
typedef struct {
    const char *name;
    ql_metric_kind kind;
    int since;
    const char *sql; /* DERIVED: its SQL over the metrics row m; else NULL */
    size_t offset;   /* of its field in ql_run_metrics (not DERIVED) */
    int pos;
    const char *label; /* or NULL */
    ql_metric_show show;
    const char *format;
    int digits;
    unsigned flags;
    const char *note; /* or NULL */
} ql_metric_info;

/* The list, indexed by ql_metric_id; returns QL_N_METRICS. */
size_t ql_metrics(const ql_metric_info **out);
const ql_metric_info *ql_metric_get(ql_metric_id id);
/* By name; NULL when there is none. */
const ql_metric_info *ql_metric_find(const char *name);

/* The metrics of the report's outputs (pos > 0), in the order of pos; returns how
 * many. */
size_t ql_metrics_reported(ql_metric_id out[QL_N_METRICS]);

/* A value as a table cell reads (show and format); "" for NAN. Returns the length
 * snprintf would write. */
int ql_metric_format(ql_metric_id id, double v, char *buf, size_t size);

/* The value of a stored metric in m (NAN for a DERIVED one: only the views have it). */
double ql_run_metric(const ql_run_metrics *m, ql_metric_id id);

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
    const char *choice; /* why requested_type: the type policy's rule or axis; NULL = unknown */
} ql_tensor_record;

/* What a tensor is to the type axes: a matmul weight of the body (weight_type), the
 * LM head (head_type) or the token embeddings (embd_type). */
typedef enum { QL_TENSOR_BODY, QL_TENSOR_HEAD, QL_TENSOR_EMBD, QL_TENSOR_AXES } ql_tensor_axis;

/* By GGUF name: output.weight is the head, token_embd.weight the embeddings. */
ql_tensor_axis ql_tensor_axis_of(const char *name);

/* For each class, the share of its parameters whose used type is the requested one
 * (NAN for a class without records): the TENSORS metrics applied_body, applied_head,
 * applied_embd. */
void ql_tensor_shares(const ql_tensor_record *t, size_t n, double share[QL_TENSOR_AXES]);

/* Timings of a run in seconds; NAN = not measured. */
typedef struct {
    double seconds;          /* the whole run */
    double quantize_seconds; /* quantizing the weights */
    double ref_seconds;      /* the reference forward pass it compared against */
    double forward_seconds;  /* the quantized forward pass (store column quant_seconds) */
    /* What that pass would have cost alone: with its body shared (ql_run_result.body_of),
     * the body pass's forward_seconds it reused; else forward_seconds. */
    double forward_alone_seconds;
} ql_run_timing;

void ql_run_timing_init(ql_run_timing *t);

/* Sums over the scored tokens of one chunk of the text,
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
    /* The config (hash) whose pass computed this run's blocks, or its first blocks (see
     * shared_blocks); NULL = its own whole pass. */
    const char *body_of;
    /* The blocks of body_of's pass it reused: every block (its head alone on that pass's
     * hidden states) or blocks 0..shared_blocks-1 (it resumed that pass's residual
     * streams there: configs that differ only from a later block on); 0 with body_of
     * NULL. */
    int shared_blocks;
    /* Activation roundings of the products whose input is rounded (may be none). */
    const ql_act_record *acts;
    size_t n_acts;
    /* Per-layer figures (the divergence with sweep key layer_metrics, the routing of a
     * mixture of experts): none, or one record per block. */
    const struct ql_layer_record *layers;
    size_t n_layers;
    /* A mixture of experts: each expert's share of the routed slots per block. */
    const struct ql_expert_load_record *loads;
    size_t n_loads;
    /* ... and each expert's weight errors, per stacked expert tensor. */
    const struct ql_expert_record *experts;
    size_t n_experts;
} ql_run_result;

/* One block of a config against the reference; NAN = not measured. The divergence of
 * its residual stream (experiment/divergence.h) and the routing of a mixture-of-experts
 * block (experiment/routing.h). */
typedef struct ql_layer_record {
    int32_t layer;
    double rel_err_mean;  /* mean over scored tokens of ||h - r|| / ||r|| */
    double rel_err_p99;   /* its 99th percentile */
    double cos_mean;      /* mean cosine similarity of h and r */
    double route_agree;   /* share of scored tokens routed to the reference's experts */
    double route_overlap; /* mean share of a token's experts that are the reference's */
    double load_shift;    /* total variation distance of the experts' loads */
} ql_layer_record;

/* One expert's share of a block's routed slots, the reference's and the config's. */
typedef struct ql_expert_load_record {
    int32_t layer, expert;
    double ref_share, share;
} ql_expert_load_record;

/* One expert's matrix of a stacked expert tensor, quantized: its errors against the
 * reference's values (as ql_tensor_record's, over that expert's rows, weighted by its
 * own importance). */
typedef struct ql_expert_record {
    const char *tensor; /* the 3-D tensor's GGUF name */
    int32_t expert;
    double rmse, max_err, imatrix_err, imatrix_err_rel;
} ql_expert_record;

#endif
