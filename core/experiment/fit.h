/* qlab: exact-fit mixed precision (issue 9).
 *
 * Given a model, an importance matrix and a byte budget, choose one type per
 * weight tensor so that the whole model fits the budget with the least summed
 * imatrix-weighted error. Three parts:
 *
 * 1. The error table (fit_table.c). For every weight tensor W (rows r, columns j)
 *    and every candidate type T whose block size divides the row length:
 *      err(W, T)   = sum_r sum_j I_j (w_rj - deq(quant(w))_rj)^2
 *      bytes(W, T) = rows * ql_row_size(T, ne0)            (exact)
 *    where I_j is the importance of input column j. By
 *    default at most QL_FIT_SAMPLE_ROWS evenly spaced rows are measured and the sum
 *    is scaled by rows / sampled; exact mode measures every row. quant() is
 *    ql_quant_tensor_rows (model/quant_model.h), so a measured row has the bytes
 *    `qlab quantize` writes for it (IQ1_S and IQ1_M depend on the chunking of
 *    rows). The table is
 *    cached in a file keyed by (model sha256, imatrix sha256, type set, sampling,
 *    qlab build), so repeated budgets are instant (fit_table_file.c).
 *
 * 2. The solver (fit_solve.c): a multiple-choice knapsack,
 *      minimise sum_i err(i, c_i)  subject to  fixed + sum_i bytes(i, c_i) <= budget.
 *    (a) Lagrangian relaxation: per tensor c_i = argmin err + lambda * bytes; the
 *        total size is a step function of lambda that changes only at the slopes of
 *        the tensors' lower convex hulls, so lambda is bisected over those slopes
 *        (exact, no iteration count to tune); (b) greedy top-up: the single-tensor
 *        upgrade with the best error drop per byte that still fits, repeated;
 *        (c) pairwise exchange: one tensor down, another up, while it helps;
 *        (d) depth-first branch and bound with the LP-relaxation bound, seeded with
 *        that solution, under a work limit. When (d) finishes the plan is proven
 *        optimal; on instances of a few dozen tensors it always does. The plan
 *        reports the LP lower bound either way.
 *
 * 3. The budget model (fit_budget.c): sizes with units, "bpw:X", and a memory
 *    envelope minus the KV cache minus a compute reserve.
 *
 * Which tensors the solver assigns: every tensor of two or more dimensions whose
 * name ends in "weight", except the expert router (ffn_gate_inp) and position or
 * token-type embeddings, which llama.cpp never quantizes. Everything else is
 * fixed: 1-D tensors (norms, biases) are F32, the other fixed tensors keep their
 * source type. Fixed bytes count toward the budget.
 *
 * Threading: the error table is computed in parallel (OpenMP) over (tensor, type,
 * row chunk) jobs whose partial sums are added in a fixed order, so the table does
 * not depend on the thread count. The solver is sequential and deterministic. */
#ifndef QL_FIT_H
#define QL_FIT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "experiment/config.h"
#include "formats/types.h"
#include "model/gguf.h"
#include "model/imatrix_io.h"
#include "model/quant_model.h"
#include "model/quant_policy.h"

/* Rows measured per tensor by default (evenly spaced). */
#define QL_FIT_SAMPLE_ROWS 128

/* Default work limit of the branch-and-bound stage, in hull segments scanned by
 * its bounds (about 0.3 s on one core). Instances of a few dozen tensors finish
 * far below it; on models of hundreds of tensors the stage stops there and the
 * plan reports its gap to the lower bound instead of a proof. */
#define QL_FIT_BB_WORK 200000000

/* ---------------------------------------------------------------------------
 * Sizes and budgets */

/* Parses a byte size: a non-negative number with an optional unit, case-insensitive,
 * optional space between: B; KiB MiB GiB TiB (powers of 1024); KB MB GB TB (powers of
 * 1000). "4.5GiB", "1200 MB", "123456". Fractional bytes are rounded down. Single
 * letters (K, M, G) are refused as ambiguous. */
ql_status ql_fit_parse_size(const char *s, uint64_t *out, ql_error *err);

/* Formats bytes for people: "519.20 MiB (544419840 B)". */
void ql_fit_format_size(uint64_t bytes, char *out, size_t size);

typedef enum {
    QL_FIT_BUDGET_BYTES, /* an absolute size for the whole model */
    QL_FIT_BUDGET_BPW,   /* bits per weight over the solver-assigned tensors */
} ql_fit_budget_kind;

/* A budget as the user wrote it.
 *   bytes:  the whole model (assigned + fixed tensors) must fit in `bytes`.
 *   bpw:X:  the assigned weight tensors may use floor(X * P / 8) bytes, P their
 *           parameter count; the fixed tensors (norms etc.) are added on top, so
 *           bpw:4.5 gives the same weight bytes as a uniform Q4_K model. */
typedef struct {
    ql_fit_budget_kind kind;
    uint64_t bytes;
    double bpw;
} ql_fit_budget;

/* Parses "bpw:4.5" or a size (ql_fit_parse_size). */
ql_status ql_fit_parse_budget(const char *s, ql_fit_budget *out, ql_error *err);

/* ---------------------------------------------------------------------------
 * Memory envelope: model budget = envelope - KV cache - compute reserve. */

typedef struct {
    char arch[64];
    int64_t n_layer;
    int64_t n_ctx_train; /* <arch>.context_length, 0 when absent */
    int64_t n_embd;
    int64_t n_head;
    int64_t n_ff; /* 0 when absent */
    int64_t n_vocab;
    int64_t kv_heads_sum; /* sum over layers of the KV head count (per-layer arrays allowed) */
    int64_t head_dim_k;   /* <arch>.attention.key_length, else n_embd / n_head */
    int64_t head_dim_v;   /* <arch>.attention.value_length, else n_embd / n_head */
} ql_fit_hparams;

/* Reads the hyper-parameters the envelope needs; errors name the missing key. */
ql_status ql_fit_hparams_read(const ql_gguf *g, ql_fit_hparams *out, ql_error *err);

/* f16 K and V cache of ctx positions:
 *   ctx * sum_layers n_kv_heads(l) * (head_dim_k + head_dim_v) * 2 bytes,
 * which is n_layer * ctx * n_kv_heads * head_dim * 2 * 2 for uniform layers. */
uint64_t ql_fit_kv_bytes(const ql_fit_hparams *hp, int64_t ctx);

/* Heuristic compute reserve when none is given (llama.cpp's compute buffer for a
 * 512-token micro-batch, f32): 4 * 512 * (n_vocab + 4 n_embd + 3 n_ff + n_head ctx)
 * bytes: logits, residual/normed activations, feed-forward intermediates and the
 * attention scores. Deliberately rough; --reserve overrides it. */
uint64_t ql_fit_reserve_estimate(const ql_fit_hparams *hp, int64_t ctx);

/* budget = envelope - kv - reserve; fails, naming all three, when that is not positive. */
ql_status ql_fit_envelope_budget(uint64_t envelope, uint64_t kv, uint64_t reserve, uint64_t *budget,
                                 ql_error *err);

/* ---------------------------------------------------------------------------
 * The error table */

/* Where a tensor's column importance came from. */
typedef enum {
    QL_FIT_IMP_NONE,        /* no imatrix at all: I_j = 1 */
    QL_FIT_IMP_IMATRIX,     /* the imatrix entry of the tensor */
    QL_FIT_IMP_LOOKUP,      /* token embedding (a lookup): I_j = 1 / rows, the mean per token */
    QL_FIT_IMP_OUTPUT_NORM, /* LM head without an entry: I_j = output_norm_j^2 (its input is
                               the RMS-normalised state times the norm weight) */
    QL_FIT_IMP_UNIT,        /* matmul without an entry while other tensors have one: I_j = 1 */
    QL_FIT_IMP_TIED,        /* token embedding that is also the head (no output.weight): the
                               lookup weight 1 / rows plus the head's weights (its imatrix
                               entry, else output_norm_j^2 with an imatrix, else 1) */
    QL_FIT_IMP_HESSIAN,     /* the full form e H e^T / tokens of GPTQ's errors (fit_gptq.h),
                               set by that objective after the table is made */
} ql_fit_imp_source;

const char *ql_fit_imp_source_name(ql_fit_imp_source s);

/* Importance weights, by tensor. The fit module does not read imatrix files
 * itself; the caller adapts whatever reader it has. */
typedef struct {
    /* Identity of the importance data (sha256 of the imatrix file); part of the
     * cache key. NULL or "" when there is no imatrix. */
    const char *sha256;
    /* Returns the importance vector of a tensor and its length through *n
     * (ne0 for a matrix, ne0 * n_expert for a 3-D expert tensor), or NULL when
     * the imatrix has no entry for it. The values are per-token means (llama.cpp's
     * in_sum2 / counts), exactly what the quantizers receive. */
    const float *(*lookup)(void *user, const char *tensor, int64_t *n);
    void *user;
    /* Provenance written into the fitted GGUF as llama-quantize writes it
     * (quantize.imatrix.file/dataset/entries_count/chunks_count); file NULL: none. */
    const char *file;
    const char *dataset; /* may be NULL */
    int64_t n_entries;
    int64_t n_chunks; /* 0: unknown, not written */
} ql_fit_importance;

/* The importance vector the quantizer receives for a tensor, as llama-quantize
 * hands it over: its imatrix entry (n_per_row values, or n_per_row per matrix of an
 * expert tensor), NULL when imp is NULL or has none. Errors: another length, a
 * value that is negative or not finite. */
ql_status ql_fit_quant_importance(const ql_fit_importance *imp, const ql_gguf_tensor *gt,
                                  const float **out, int64_t *out_n, ql_error *err);

typedef struct {
    int32_t type;   /* ggml type id */
    uint64_t bytes; /* exact bytes of the whole tensor in this type */
    double err;     /* imatrix-weighted squared error (scaled when sampled) */
} ql_fit_choice;

typedef struct {
    char *name;
    uint32_t n_dims;
    int64_t ne[QL_GGUF_MAX_DIMS];
    int64_t n_params;
    int32_t src_type;
    bool assigned;         /* the solver chooses its type */
    int32_t fixed_type;    /* type of a fixed tensor */
    uint64_t fixed_bytes;  /* bytes of a fixed tensor */
    ql_fit_imp_source imp; /* where the error weights came from */
    bool quant_imatrix;    /* the quantizer receives an imatrix entry for it */
    int64_t rows_measured; /* rows quantized to measure the errors */
    int n_choices;
    ql_fit_choice *choices; /* sorted by bytes, then error */
    /* 0: the solver chooses its type alone; k > 0: one type for every assigned tensor of
     * group k, among the types all of them take, their bytes and errors summed (set by
     * an objective that measures groups; neither computed nor cached with the table). */
    int group;
} ql_fit_tensor;

typedef struct {
    int n_tensors;
    ql_fit_tensor *tensors; /* in model order */
    char model_sha256[65];
    char imatrix_sha256[65]; /* "none" without an imatrix */
    char types[512];         /* candidate set as requested, canonical order, comma-separated */
    int64_t sample_rows;     /* rows per tensor; 0 = exact (all rows) */
    uint64_t fixed_bytes;    /* bytes of the fixed tensors */
    int64_t assigned_params; /* parameters of the assigned tensors */
    int64_t total_params;
    int n_notes;
    char **notes; /* types skipped and why, cache events, fallbacks */
    bool from_cache;
    char cache_path[4096]; /* "" when caching is off */
    double seconds;        /* time to compute or load */
} ql_fit_table;

typedef struct {
    /* Candidate types, comma- or space-separated GGUF names; NULL = the default
     * ladder (ql_fit_default_types). */
    const char *types;
    /* Leaves out the candidates above this many bits per weight (F16 stays, as the
     * fallback of rows no block type fits); 0 = no cap. A sweep's budget config
     * caps the ladder at its weight_type this way. */
    double max_bpw;
    /* Rows per tensor to measure; 0 = every row (exact). */
    int64_t sample_rows;
    /* Directory of the cache; NULL = <qlab root>/results/cache; "" = no cache. */
    const char *cache_dir;
    /* No progress line. */
    bool quiet;
    /* The objective: NULL minimises the imatrix-weighted errors of the table; otherwise
     * called with errors_ctx on the table before it is solved, to replace every
     * assigned tensor's choice errors (the kld objective: the measured sensitivities of
     * sensitivity.h; quantizer gptq: GPTQ's output errors, fit_gptq.h). The cached
     * table keeps the imatrix errors. */
    ql_status (*errors)(void *ctx, ql_fit_table *t, ql_error *err);
    void *errors_ctx;
    /* The routers of a mixture of experts are assigned too (the kld objective: their
     * measured sensitivity decides) instead of kept in their float type as
     * llama-quantize keeps them; part of the table's identity (its types). */
    bool assign_routers;
} ql_fit_options;

/* Defaults: default ladder, QL_FIT_SAMPLE_ROWS rows, default cache, progress on. */
void ql_fit_options_init(ql_fit_options *o);

/* The default ladder, as text: the types of the traits' ladder_rank column in rank
 * order. Every tensor gets those of at most 32 values per block (Q4_0 ... F16);
 * tensors whose rows split into 256-blocks also get the K and IQ ones (a 32-block
 * type is sometimes the better buy per byte there too). Types qlab cannot produce
 * yet are skipped (with a note). IQ1_S/IQ1_M are left out: they only make sense for
 * far larger models; name them in --types to use them. */
const char *ql_fit_default_types(void);

/* Computes (or loads from the cache) the error table of a model. model_sha256
 * may be NULL (then it is computed from the file). imp may be NULL (no imatrix). */
ql_status ql_fit_table_compute(const ql_gguf *model, const char *model_sha256,
                               const ql_fit_importance *imp, const ql_fit_options *opt,
                               ql_fit_table **out, ql_error *err);

void ql_fit_table_free(ql_fit_table *t);

/* Sorts every tensor's choices by bytes, then error (after their errors changed). */
void ql_fit_table_sort_choices(ql_fit_table *t);

/* Writes / reads the table's file format, the cache's (fit_table_file.c; also used by
 * tests). Reading validates everything (header, key, checksum, every number) and fails
 * with the reason. */
ql_status ql_fit_table_file_write(const ql_fit_table *t, const char *path, ql_error *err);
ql_status ql_fit_table_file_read(const char *path, ql_fit_table **out, ql_error *err);

/* The first tensor of tensors[i]'s group (i itself when it has none). */
int ql_fit_group_lead(const ql_fit_table *t, int i);

/* Whether every assigned tensor of tensors[i]'s group has a choice of type, and then
 * their bytes and errors summed. */
bool ql_fit_group_choice(const ql_fit_table *t, int i, int32_t type, uint64_t *bytes, double *err);

/* Smallest and largest useful model size (all cheapest / all most accurate; a group's
 * tensors in one type). */
uint64_t ql_fit_table_min_bytes(const ql_fit_table *t);
uint64_t ql_fit_table_max_bytes(const ql_fit_table *t);

/* Resolves a budget against a table (bpw needs the assigned parameter count). */
uint64_t ql_fit_budget_resolve(const ql_fit_budget *b, const ql_fit_table *t);

/* ---------------------------------------------------------------------------
 * The solver */

/* One item of a multiple-choice knapsack: n choices with their bytes and errors. */
typedef struct {
    int n;
    const uint64_t *bytes;
    const double *err;
} ql_fit_item;

typedef struct {
    int64_t bb_work_limit; /* 0 = skip branch and bound; default QL_FIT_BB_WORK */
    bool no_exchange;      /* skip the pairwise-exchange pass (for measurements) */
} ql_fit_solve_options;

void ql_fit_solve_options_init(ql_fit_solve_options *o);

typedef struct {
    uint64_t min_bytes;  /* smallest feasible total (every item at its cheapest) */
    uint64_t bytes;      /* total of the chosen solution */
    double err;          /* its summed error */
    double err_lagrange; /* after the Lagrangian stage */
    double err_greedy;   /* after the greedy top-up */
    double err_exchange; /* after pairwise exchange */
    double lower_bound;  /* LP-relaxation bound: no assignment has less error */
    int64_t bb_nodes;    /* branch-and-bound nodes visited */
    bool optimal;        /* proven optimal (branch and bound finished) */
} ql_fit_solve_stats;

/* Solves min sum err subject to sum bytes <= capacity over n items; choice[i]
 * receives the index of item i's chosen option. Fails with QL_EINVAL (message
 * naming the smallest feasible total) when even the cheapest choices exceed the
 * capacity, and when an item has no choice. Ties go to fewer bytes, then to the
 * lower index. */
ql_status ql_fit_solve_items(const ql_fit_item *items, int n, uint64_t capacity,
                             const ql_fit_solve_options *opt, int *choice,
                             ql_fit_solve_stats *stats, ql_error *err);

/* ---------------------------------------------------------------------------
 * Plans */

typedef struct {
    const char *name; /* points into the table */
    bool assigned;
    int32_t type; /* chosen (or fixed) type */
    uint64_t bytes;
    double err; /* 0 for fixed tensors */
    int64_t n_params;
} ql_fit_assignment;

typedef struct {
    uint64_t budget; /* bytes for the whole model */
    uint64_t bytes;  /* used: assigned + fixed */
    uint64_t fixed_bytes;
    uint64_t slack; /* budget - bytes */
    double bpw;     /* 8 * assigned bytes / assigned params */
    double bpw_all; /* 8 * bytes / all params */
    double err;     /* summed weighted error */
    ql_fit_solve_stats stats;
    int n_tensors;
    ql_fit_assignment *tensors; /* model order, fixed tensors included */
    double seconds;             /* solver time */
} ql_fit_plan;

/* Chooses the types for a budget in bytes (whole model). The table must outlive
 * the plan (names point into it). opt may be NULL (defaults). */
ql_status ql_fit_solve(const ql_fit_table *t, uint64_t budget, const ql_fit_solve_options *opt,
                       ql_fit_plan **out, ql_error *err);

void ql_fit_plan_free(ql_fit_plan *p);

/* Type chosen for a tensor, or QL_TYPE_INVALID when the plan does not name it. */
int32_t ql_fit_plan_type(const ql_fit_plan *p, const char *tensor);

/* The allocation table: one line per tensor, then per-type totals and the summary
 * (budget, used, slack, bpw, error, bound, optimality). */
void ql_fit_plan_print(FILE *out, const ql_fit_plan *p, const ql_fit_table *t);

/* llama.cpp's general.file_type for a plan: the "mostly" file type of the type
 * holding the most assigned parameters (K-quants as their _M preset), as
 * llama.cpp itself guesses a file type from the dominant tensor type. */
uint32_t ql_fit_plan_file_type(const ql_fit_plan *p);

/* ---------------------------------------------------------------------------
 * Importance from an imatrix (imatrix_io.h): per entry, sums / count per matrix,
 * exactly what the quantizers receive from llama-quantize. */

typedef struct ql_fit_imatrix ql_fit_imatrix;

/* Reads an imatrix file (either llama.cpp format); its sha256 is the identity in
 * the cache key. */
ql_status ql_fit_imatrix_open(const char *path, ql_fit_imatrix **out, ql_error *err);

/* Wraps an imatrix in memory (e.g. one the sweep computed); identity (at most 64
 * characters) names it in the cache key: a sha256 of its contents or of what
 * produced it. im may be freed after the call: the weights (sums / count) and
 * the provenance (im->path, first dataset, entries, chunks) are copied. */
ql_status ql_fit_imatrix_wrap(const ql_imatrix *im, const char *identity, ql_fit_imatrix **out,
                              ql_error *err);

void ql_fit_imatrix_free(ql_fit_imatrix *f);

/* The importance callbacks for ql_fit_table_compute / ql_fit_write (valid until
 * ql_fit_imatrix_free). */
const ql_fit_importance *ql_fit_imatrix_importance(const ql_fit_imatrix *f);

/* Entries in the imatrix. */
int64_t ql_fit_imatrix_entries(const ql_fit_imatrix *f);

/* ---------------------------------------------------------------------------
 * Writing and the one-call planner */

/* Writes the mixed-precision GGUF of a plan: every key of the model copied (split
 * keys dropped), general.file_type = ql_fit_plan_file_type(plan),
 * general.quantization_version = 2, the quantize.imatrix.* keys llama-quantize
 * writes (when imp names its file), qlab.fit.budget_bytes and qlab.fit.imatrix
 * added; tensors in model order, each quantized by ql_quant_tensor_rows with the
 * imatrix entry the error table measured it with (per expert for 3-D expert
 * tensors), so with the bytes `qlab quantize` gives it, and streamed one at a time
 * (peak memory: one quantized tensor and 16 MB of f32 rows).
 * A tensor whose chosen type equals its source type is copied byte for byte; one
 * extra->prequant has is written as it is.
 * The file appears under out_path only when complete. */
typedef struct {
    /* Tensors already quantized in their planned type (GPTQ's pass), used as they are;
     * NULL: every one quantized here. */
    ql_prequant_lookup_fn prequant;
    void *prequant_ctx;
    /* Written as quantize.quantizer (as `qlab quantize --quantizer` writes it), or NULL. */
    const char *quantizer;
} ql_fit_write_extra;

ql_status ql_fit_write(const ql_gguf *model, const ql_fit_plan *plan, const ql_fit_importance *imp,
                       const ql_fit_write_extra *extra, const char *out_path, bool quiet,
                       ql_error *err);

/* The quantization plan (model/quant_policy.h) of a fit plan: every tensor in its fitted
 * type, as ql_fit_write writes it, for what takes a plan (GPTQ's pass). */
ql_status ql_fit_quant_plan(const ql_gguf *model, const ql_fit_plan *fp, ql_quant_plan **out,
                            ql_error *err);



/* A comparison point: the bytes of the whole model quantized as weights (a config
 * whose weight_type is a pure type or a llama-quantize file type, config.h, as a
 * sweep names them: Q4_K, Q4_K_M, mix:Q6_K), planned by the type policy with the
 * importance matrix's coverage (imp may be NULL: none): what `qlab quantize` or a
 * sweep config of that type would write, so that a fit can be compared at equal size.
 * Errors: the policy's (a mix that needs an imatrix, an architecture without rules,
 * a tensor a mix needs importance for that the imatrix does not cover). */
ql_status ql_fit_budget_of(const ql_gguf *model, const ql_config *weights,
                           const ql_fit_importance *imp, uint64_t *bytes, ql_error *err);

/* Error table (cached) + budget + solver in one call: the library entry point for
 * the sweep's `budget` axis. On success *table_out and *plan_out are set (free
 * both; the plan's names point into the table) and ql_fit_plan_type() gives the
 * type of every tensor. The budget is resolved against the table (bpw counts the
 * assigned tensors, fixed tensors on top). */
ql_status ql_fit_plan_model(const ql_gguf *model, const char *model_sha256,
                            const ql_fit_importance *imp, const ql_fit_budget *budget,
                            const ql_fit_options *opt, ql_fit_table **table_out,
                            ql_fit_plan **plan_out, ql_error *err);

#endif
