/* qlab report, the common part: what the report reads from the store and every file it
 * writes shares. The report is a driver, leaves and this: report.c (the driver: it loads
 * each sweep's groups in one read transaction, writes report.md from its own sections and
 * the leaves' and calls the leaves) -> report_plot.c (the plots), report_pairs.c (the
 * one-axis comparisons, the fitted configs against the smaller ones), report_texts.c
 * (the config x text matrices, the warnings), report_html.c (report.html), report_csv.c
 * (the CSV files) -> report_common.c (the data below, the store's statement helpers, the
 * labels and cells of configs, metrics, pairs and matrices, saving a file, recording a
 * problem). A leaf includes this header and its own, never the driver's or another
 * leaf's (tests/unit/test_layers.c): what two leaves share is here. Not a public
 * interface: only the report's files include it. */
#ifndef QL_REPORT_COMMON_H
#define QL_REPORT_COMMON_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/doc.h"
#include "base/error.h"
#include "experiment/config.h"
#include "experiment/records.h"
#include "results/applicability.h"
#include "results/compare.h"
#include "results/report_options.h"
#include "results/store.h"

/* ================================================================ the data */

/* Markdown text of a missing value. */
#define QL_REPORT_NULL_TEXT "—"

/* A finished config of a group. */
typedef struct {
    int64_t run_id;
    char hash[65];
    char *axis[QL_AXIS_COUNT]; /* canonical values */
    double v[QL_N_METRICS];    /* by ql_metric_id; NAN = NULL */
    ql_applies applies;        /* whether its types applied (applicability.h) */
    char *types_used;          /* "" when unknown */
    char *fallback_note;       /* "" when none */
} ql_report_row;

typedef struct {
    char *axis[QL_AXIS_COUNT];
    char *error;
} ql_report_failure;

/* One tensor of the per-tensor plot. */
typedef struct {
    char cls[64];
    int64_t layer;
    char requested[32], used[32]; /* types */
    double rmse, rel;
} ql_report_tensor;

/* Two configs of a group that differ in one axis only, compared on their chunks. */
typedef struct {
    int axis;
    size_t a, b; /* rows: a has the axis's baseline value, b the other one */
    ql_comparison cmp;
} ql_report_pair;

/* One measured (tensor, type) of a model: the sensitivity table's row. */
typedef struct {
    char tensor[128], kind[32], type[32];
    int64_t layer; /* block; -1 the token embedding; n_layer the head */
    int64_t bytes;
    double kld_mean, kld_mean_err, ln_ppl_ratio, ln_ppl_ratio_err, seconds;
    int type_ix; /* into the set's types; -1 past QL_REPORT_SENS_TYPES */
    int expert;  /* an expert row's expert, else -1 */
} ql_report_sens;

/* Types a sensitivity set keeps apart (panels of the heatmap, the lowest-bit one). */
#define QL_REPORT_SENS_TYPES 32

/* The sensitivities of a group's model the report shows: of the sets stored for the
 * model (one per text, ctx, chunks, importance matrix and metrics version), the one with
 * the most rows. nrows = 0: none stored. */
typedef struct {
    char *text, *text_sha, *imatrix_sha;
    int ctx;
    int64_t chunks;
    int metrics_version;
    size_t nsets;         /* sets stored for the model */
    ql_report_sens *rows; /* by layer, tensor, type */
    size_t nrows;
    /* A mixture of experts' expert rows (objective kld:expert: one expert's matrices
     * quantized alone): expert in .expert, by layer, expert, type. */
    ql_report_sens *erows;
    size_t n_erows;
    double seconds; /* the set's measuring time, summed */
    /* Its types by bits per weight (unknown types last, then by name). */
    char types[QL_REPORT_SENS_TYPES][32];
    double type_bpw[QL_REPORT_SENS_TYPES]; /* NAN: a type qlab does not know */
    size_t ntypes;
} ql_report_sens_set;

/* A fitted config (budget != none) against a config of the group that is not a
 * budget and no larger in bytes, compared on their chunks (fitted - other). */
typedef struct {
    size_t fit, other; /* rows */
    bool compared;     /* cmp holds the comparison (false: no per-chunk sums) */
    ql_comparison cmp;
} ql_report_fit_pair;

/* A label of a plot against bpw with no room for its text: drawn as its number (or,
 * with no room even for that, not drawn), listed in report.md's key of numbers. */
typedef struct {
    char plot[1100];      /* the plot's base name */
    char plot_title[128]; /* as report.md's links call it */
    int number;           /* as on the plot; 0: not drawn */
    char text[64];        /* the label: the weight type */
    char configs[1024];   /* the configs of its points */
} ql_report_numbered;

/* The runs of one sweep on one (model, text, ctx, chunks). */
typedef struct {
    char *model_sha, *model, *arch, *dataset_sha, *dataset;
    int64_t params; /* -1 = unknown */
    int ctx, chunks;
    int64_t done, failed, running;
    ql_report_row *rows;
    size_t nrows;
    ql_report_failure *fails;
    size_t nfails;
    bool varies[QL_AXIS_COUNT];
    char suffix[512]; /* file name suffix; "" for a sweep of one group */
    /* The per-tensor plot: the run it shows (NULL: none), its tensors inside the
     * blocks, and a header line per tensor outside them. */
    const ql_report_row *tensor_row;
    ql_report_tensor *pts;
    size_t npts;
    char outside[2048];
    /* The one-axis comparisons (report_pairs.c), and why there are none. */
    ql_report_pair *pairs;
    size_t npairs;
    char pairs_note[256];
    /* The fitted configs against the smaller ones (report_pairs.c), and why their
     * comparisons have no intervals. */
    ql_report_fit_pair *fits;
    size_t nfits;
    char fits_note[256];
    /* The sensitivities of the group's model (the heatmap, sensitivity.csv). */
    ql_report_sens_set sens;
    /* The plots of the group (base names, for report.md and report.html), and whether
     * each was drawn (its .png and .svg written now); a plot not drawn has its script. */
    char plots[12][1100];
    char plot_titles[12][128];
    bool plot_drawn[12];
    size_t nplots;
    /* The labels of its plots drawn as numbers (report.md's key). */
    ql_report_numbered *numbered;
    size_t nnumbered, numbered_cap;
    struct ql_types_table *types; /* which type each tensor class got, per row (types_table.h) */
    /* The layer metrics of the rows' runs, by row then layer (the divergence plot). */
    struct ql_report_layer *layers;
    size_t nlayers;
} ql_report_group;

/* One block's figures of the run of row `row` (layer_metrics): its divergence (NAN
 * unless the sweep had layer_metrics) and a mixture of experts' routing (NAN for a
 * dense block). */
typedef struct ql_report_layer {
    size_t row;
    int64_t layer;
    double rel_err_mean, rel_err_p99, cos_mean;
    double route_agree, route_overlap, load_shift;
} ql_report_layer;

/* One `qlab report` being written: the store it reads, its options, the sweep whose
 * files are being written and their directory, and the summary it adds to. The driver
 * (report.c) fills it; every writer of a file takes it. */
typedef struct {
    ql_store *store;
    const ql_report_options *opt;
    ql_report_summary *sum;
    const char *sweep;
    char dir[4096];
    int tensors_found; /* runs matching opt->tensors, over every sweep */
    bool no_gnuplot;   /* gnuplot is not on PATH: no plot is tried */
    size_t problems_cap;
} ql_report_writer;

/* The texts one config x text matrix shows at most. */
#define QL_REPORT_MAX_TEXTS 16

typedef struct {
    char hash[65];
    char label[512];
    const ql_report_row *cell[QL_REPORT_MAX_TEXTS]; /* NULL: not measured on that text */
} ql_report_texts_row;

/* The config x text matrix led by a group: the groups of its model, ctx and chunk count
 * (one per text) as columns, the configs of any of them as rows (in the order of the
 * first group that has each). */
typedef struct {
    size_t cols[QL_REPORT_MAX_TEXTS]; /* group indices */
    size_t ncols;
    ql_report_texts_row *rows;
    size_t nrows;
} ql_report_texts;

/* ================================================================ reading the store */

/* The store's statement helpers with the report's messages ("db: report: reading:
 * reason"; the store's fault injection covers them). */
ql_status ql_report_prepare(ql_report_writer *c, const char *sql, sqlite3_stmt **st, ql_error *err);
ql_status ql_report_step(ql_report_writer *c, sqlite3_stmt *st, bool *got, ql_error *err);
ql_status ql_report_bind_int(ql_report_writer *c, sqlite3_stmt *st, int idx, int64_t v,
                             ql_error *err);
ql_status ql_report_bind_text(ql_report_writer *c, sqlite3_stmt *st, int idx, const char *v,
                              ql_error *err);
/* A column's value; NAN for NULL. */
double ql_report_col_double(sqlite3_stmt *st, int i);
/* A text column as a heap string ("" for NULL); a REAL column in its shortest exact
 * decimal form, so that outlier ratios read as in the canonical form. NULL: out of
 * memory. */
char *ql_report_col_string(sqlite3_stmt *st, int i);
ql_status ql_report_oom(ql_error *err);

/* ================================================================ labels and cells */

/* How axis a of a config reads in the group's tables: the weight type by its label
 * (ql_report_weight_label), the imatrix of a file config "unknown", any other value as
 * ql_report_axis_display shows it; buf holds the text when it is not a constant. */
const char *ql_report_axis_cell(const ql_report_group *g, char *const *axis, int a, char *buf,
                                size_t size);

/* How an axis value reads in a table (the default as the axis list shows it). */
const char *ql_report_axis_display(int a, const char *v);
/* Whether v is the axis's default value. */
bool ql_report_is_default(int a, const char *v);
/* Whether a label leaves the value out (head same, outliers off, budget none, ...). */
bool ql_report_is_plain(int a, const char *v);
/* How a weight type value reads in the group's tables, plots and labels: itself, or
 * for an existing file (file:PATH@SHA256) file:NAME, its file name, with as much of
 * the path, then of the hash, as tells it from the group's other files of that name.
 * Returns buf. */
const char *ql_report_weight_label(const ql_report_group *g, const char *value, char *buf,
                                   size_t size);
/* Whether a weight type value is an existing file (file:...); its SHA-256 into sha
 * (65 bytes, "" when the value has none) when not NULL. */
bool ql_report_is_file(const char *value, char *sha);

/* "Q4_0 head=F32": the weight type and the axes that vary within the group, except
 * skip_axis and values that go without saying (head same, outliers off, ...). */
void ql_report_config_label(const ql_report_group *g, char *const *axis, int skip_axis, char *buf,
                            size_t size);
/* The same without the weight type and skip_axis: what tells a series apart
 * ("act=native imatrix=calib:x"); "" when nothing does. */
void ql_report_rest_label(const ql_report_group *g, char *const *axis, int skip_axis, char *buf,
                          size_t size);

/* report.md's summary lines of a group ("- model: ...", one item a line). */
void ql_report_md_summary(const ql_report_group *g, FILE *out);
/* report.md's metric columns (a label in the metric list), in report order. */
size_t ql_report_md_metrics(ql_metric_id *ids);

/* A metric of a row as its table cell reads ("6.6168 ± 0.0872"); "" when missing. */
void ql_report_metric_text(const ql_report_row *r, ql_metric_id id, char *buf, size_t size);

/* Whether a row takes part in format comparisons (tables, fronts, pairs, plots). */
bool ql_report_row_compared(const ql_report_row *r);

/* Records what could not be written in the summary (what: a plot's base name, "" for
 * the sweep's files; script: its path or ""); the first reason is the summary's why. */
void ql_report_add_problem(ql_report_writer *c, const char *what, const char *script,
                           const char *why);

/* Writes a document to the sweep's directory and counts it. */
ql_status ql_report_doc_save(ql_report_writer *c, ql_doc *d, const char *name, ql_error *err);

/* Whether a row's imatrix is a file that names no calibration text qlab could read (an
 * imatrix .dat file): its overlap is unknown, never "none". */
bool ql_report_calib_unknown(const ql_report_row *r);

/* A row's warnings (calibration overlapping the evaluated text, or unknown; the
 * reference beaten beyond its interval), at most max lines; returns how many. */
size_t ql_report_row_warnings(const ql_report_row *r, char lines[][256], size_t max);

/* A paired difference as its cell reads: "+1.23e-02 [+1.01e-02, +1.45e-02] *", the
 * estimate, its interval and a star where the interval excludes zero ("" when not
 * computed). */
void ql_report_stat_cell(ql_compare_stat k, const ql_compare_value *v, char *buf, size_t size);

/* A pair's cells: the config both share, the two values of the axis, and for each
 * statistic "estimate [lo, hi]". */
void ql_report_pair_cells(const ql_report_group *g, const ql_report_pair *p, char *rest,
                          size_t rest_size, char cells[QL_CMP_STATS][96]);

/* The config x text matrix led by group `first` into m. Returns the number of columns,
 * 0 when group first leads no matrix (a single text, or an earlier group leads it). */
size_t ql_report_texts_matrix(const ql_report_group *gs, size_t ng, size_t first,
                              ql_report_texts *m);
void ql_report_texts_free(ql_report_texts *m);
/* A matrix cell: mean KLD (kld) or "ln PPL ratio ± err", "(!)" when it beats the
 * reference; "—" when not measured. */
void ql_report_texts_cell(const ql_report_row *r, bool kld, char *buf, size_t size);
/* The change of mean KLD a row's importance matrix makes on its group's text against the
 * same config with imatrix none (the group's one-axis pair): "-12.3% [-18.0, -6.1] *"
 * (relative to the none config's mean KLD, the 95% paired-bootstrap interval, * when it
 * excludes 0). false ("—") when the row has no such pair. */
bool ql_report_texts_effect(const ql_report_group *g, const ql_report_row *r, char *buf,
                            size_t size);

#endif
