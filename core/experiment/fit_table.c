/* qlab fit: the per-tensor, per-type error table (see fit.h); its cache file is
 * fit_table_file.c. */
#include "experiment/fit.h"
#include "experiment/fit_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/progress.h"
#include "base/util.h"
#include "model/quant.h"
#include "model/quant_model.h"

/* Values per row chunk of one job: large enough that a job is not dominated by
 * overhead, small enough that a tensor's rows spread over the cores. Depends on
 * nothing but the tensor shape, so the partial sums never depend on the thread
 * count. */
#define CHUNK_ELEMS ((int64_t)1 << 18)

/* The default ladder, in rank order (the traits' ladder_rank column): the types of
 * at most 32 values per block for every tensor (all when ladder_32), the others only
 * for rows that split into their blocks. Returns the count. */
static int default_ladder(int32_t *out, bool ladder_32)
{
    const ql_type_traits *all[QL_TYPE_ID_LIMIT];
    const int n_all = ql_type_list(all, QL_TYPE_ID_LIMIT);
    int n = 0;
    for (int rank = 1; rank <= n_all; rank++)
        for (int k = 0; k < n_all; k++)
            if (all[k]->ladder_rank == rank && (!ladder_32 || all[k]->block_size <= 32))
                out[n++] = (int32_t)all[k]->type;
    return n;
}

static pthread_once_t default_types_once = PTHREAD_ONCE_INIT;
static char default_types_text[512];

static void format_default_types(void)
{
    int32_t all[QL_FIT_MAX_TYPES], l32[QL_FIT_MAX_TYPES];
    const int n_all = default_ladder(all, false), n32 = default_ladder(l32, true);
    size_t used = 0;
    const size_t size = sizeof default_types_text;
    for (int k = 0; k < n32; k++)
        used += (size_t)snprintf(default_types_text + used, size - used, "%s%s", k ? "," : "",
                                 ql_type_name(l32[k]));
    used += (size_t)snprintf(default_types_text + used, size - used, " for every tensor, and ");
    for (int k = 0, first = 1; k < n_all; k++) {
        if (ql_type_get(all[k])->block_size <= 32)
            continue;
        used += (size_t)snprintf(default_types_text + used, size - used, "%s%s", first ? "" : ",",
                                 ql_type_name(all[k]));
        first = 0;
    }
    snprintf(default_types_text + used, size - used, " too for rows that split into 256-blocks");
}

const char *ql_fit_default_types(void)
{
    pthread_once(&default_types_once, format_default_types);
    return default_types_text;
}

const char *ql_fit_imp_source_name(ql_fit_imp_source s)
{
    switch (s) {
    case QL_FIT_IMP_NONE:
        return "none";
    case QL_FIT_IMP_IMATRIX:
        return "imatrix";
    case QL_FIT_IMP_LOOKUP:
        return "lookup";
    case QL_FIT_IMP_OUTPUT_NORM:
        return "output_norm";
    case QL_FIT_IMP_UNIT:
        return "unit";
    case QL_FIT_IMP_TIED:
        return "lookup+head";
    case QL_FIT_IMP_HESSIAN:
        return "hessian";
    }
    return "?";
}

bool ql_fit_imp_source_parse(const char *s, ql_fit_imp_source *out)
{
    for (int k = QL_FIT_IMP_NONE; k <= QL_FIT_IMP_HESSIAN; k++)
        if (strcmp(s, ql_fit_imp_source_name((ql_fit_imp_source)k)) == 0) {
            *out = (ql_fit_imp_source)k;
            return true;
        }
    return false;
}

void ql_fit_options_init(ql_fit_options *o)
{
    memset(o, 0, sizeof *o);
    o->sample_rows = QL_FIT_SAMPLE_ROWS;
}

/* ---------------------------------------------------------------------------
 * Table bookkeeping */

void ql_fit_table_free(ql_fit_table *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_tensors; i++) {
        free(t->tensors[i].name);
        free(t->tensors[i].choices);
    }
    free(t->tensors);
    for (int i = 0; i < t->n_notes; i++)
        free(t->notes[i]);
    free(t->notes);
    free(t);
}

ql_status ql_fit_table_add_note(ql_fit_table *t, ql_error *err, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **n = realloc(t->notes, sizeof(char *) * (size_t)(t->n_notes + 1));
    if (!n)
        return ql_error_set(err, QL_ENOMEM, "fit: out of memory");
    t->notes = n;
    if (!(t->notes[t->n_notes] = ql_strdup(buf)))
        return ql_error_set(err, QL_ENOMEM, "fit: out of memory");
    t->n_notes++;
    return QL_OK;
}

int ql_fit_group_lead(const ql_fit_table *t, int i)
{
    const int g = t->tensors[i].group;
    if (g == 0)
        return i;
    for (int j = 0; j < i; j++)
        if (t->tensors[j].assigned && t->tensors[j].group == g)
            return j;
    return i;
}

/* tensor's choice of type, or NULL. */
static const ql_fit_choice *choice_of(const ql_fit_tensor *ft, int32_t type)
{
    for (int c = 0; c < ft->n_choices; c++)
        if (ft->choices[c].type == type)
            return &ft->choices[c];
    return NULL;
}

bool ql_fit_group_choice(const ql_fit_table *t, int i, int32_t type, uint64_t *bytes, double *err)
{
    *bytes = 0;
    *err = 0;
    const int g = t->tensors[i].group;
    for (int j = g ? 0 : i; j < (g ? t->n_tensors : i + 1); j++) {
        const ql_fit_tensor *ft = &t->tensors[j];
        if (!ft->assigned || ft->group != g)
            continue;
        const ql_fit_choice *c = choice_of(ft, type);
        if (!c)
            return false;
        *bytes += c->bytes;
        *err += c->err;
    }
    return true;
}

/* The bytes of the smallest (least: false) or most accurate (true) choice of every
 * solver item: an ungrouped tensor or a group. */
static uint64_t items_bytes(const ql_fit_table *t, bool most_accurate)
{
    uint64_t b = t->fixed_bytes;
    for (int i = 0; i < t->n_tensors; i++) {
        const ql_fit_tensor *ft = &t->tensors[i];
        if (!ft->assigned || ft->n_choices == 0 || ql_fit_group_lead(t, i) != i)
            continue;
        bool any = false;
        uint64_t best_bytes = 0;
        double best_err = 0;
        for (int c = 0; c < ft->n_choices; c++) {
            uint64_t bytes;
            double e;
            if (!ql_fit_group_choice(t, i, ft->choices[c].type, &bytes, &e))
                continue;
            const bool better = most_accurate
                                    ? e < best_err || (e == best_err && bytes < best_bytes)
                                    : bytes < best_bytes;
            if (!any || better) {
                best_bytes = bytes;
                best_err = e;
                any = true;
            }
        }
        b += best_bytes;
    }
    return b;
}

uint64_t ql_fit_table_min_bytes(const ql_fit_table *t)
{
    return items_bytes(t, false);
}

uint64_t ql_fit_table_max_bytes(const ql_fit_table *t)
{
    return items_bytes(t, true);
}

uint64_t ql_fit_budget_resolve(const ql_fit_budget *b, const ql_fit_table *t)
{
    if (b->kind == QL_FIT_BUDGET_BYTES)
        return b->bytes;
    return t->fixed_bytes + (uint64_t)floor(b->bpw * (double)t->assigned_params / 8.0);
}

/* ---------------------------------------------------------------------------
 * Which tensors are assigned, candidate types */

/* The type policy (quant.h) decides which tensors are weights: the roles WEIGHT,
 * HEAD and EMBD are assigned by the solver; VECTOR (1-D) tensors are F32; KEEP
 * tensors (those llama-quantize never quantizes: norms, routers, position
 * embeddings, ...) keep their float type, F32 for any other source type. */
static ql_status tensor_role(const ql_gguf *model, const ql_gguf_tensor *gt, bool routers,
                             bool *assigned, int32_t *fixed_type, ql_error *err)
{
    const ql_quant_config cfg = {
        .weight_type = QL_TYPE_F16, .head_type = QL_TYPE_INVALID, .embd_type = QL_TYPE_INVALID};
    ql_quant_plan_entry e;
    ql_status st =
        ql_quant_plan_tensor(&cfg, gt->name, gt->n_dims, gt->ne, gt->type,
                             ql_gguf_find_tensor(model, "output.weight") != NULL, &e, err);
    if (st != QL_OK)
        return ql_error_prefix(err, "%s: ", model->path);
    *assigned = e.role == QL_ROLE_WEIGHT || e.role == QL_ROLE_HEAD || e.role == QL_ROLE_EMBD ||
                (routers && gt->n_dims > 1 && ql_quant_is_router(gt->name));
    *fixed_type = e.requested;
    return QL_OK;
}

/* Weight types a fitted GGUF may use: the weight types a GGUF model stores under
 * their own id (not the qlab-only INT8_ROW and Q8_0_XC). */
static bool is_weight_type(const ql_type_traits *tr)
{
    return ql_type_is_gguf_weight(tr);
}

/* Position of a type in listings (the canonical order of candidate lists). */
static int table_rank(int32_t type)
{
    return ql_type_get(type)->order;
}

static int cmp_rank(const void *a, const void *b)
{
    int ra = table_rank(*(const int32_t *)a), rb = table_rank(*(const int32_t *)b);
    return ra < rb ? -1 : ra > rb;
}

/* Parses a list of type names into ids (deduplicated, canonical order). */
static ql_status parse_types(const char *list, int32_t *out, int *n_out, ql_error *err)
{
    int n = 0;
    const char *p = list;
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        const char *q = p;
        while (*q && *q != ',' && *q != ' ' && *q != '\t')
            q++;
        char name[32];
        size_t len = (size_t)(q - p);
        if (len >= sizeof name)
            return ql_error_set(err, QL_EINVAL, "types: '%.*s' is not a type name", (int)len, p);
        memcpy(name, p, len);
        name[len] = '\0';
        const ql_type_traits *tr = ql_type_by_name(name);
        if (!tr)
            return ql_error_set(err, QL_EINVAL, "types: unknown type '%s'", name);
        if (!is_weight_type(tr))
            return ql_error_set(err, QL_EINVAL,
                                "types: %s is not a weight type a GGUF model can store", tr->name);
        bool dup = false;
        for (int k = 0; k < n; k++)
            dup |= out[k] == (int32_t)tr->type;
        if (!dup) {
            if (n >= QL_FIT_MAX_TYPES)
                return ql_error_set(err, QL_EINVAL, "types: more than %d types", QL_FIT_MAX_TYPES);
            out[n++] = (int32_t)tr->type;
        }
        p = q;
    }
    if (n == 0)
        return ql_error_set(err, QL_EINVAL, "types: the list is empty");
    qsort(out, (size_t)n, sizeof *out, cmp_rank);
    *n_out = n;
    return QL_OK;
}

/* Keeps the types of at most max_bpw bits per weight, and F16; returns the count. */
static int cap_bpw(int32_t *types, int n, double max_bpw)
{
    int kept = 0;
    for (int k = 0; k < n; k++)
        if (types[k] == QL_TYPE_F16 || ql_type_bpw(types[k]) <= max_bpw)
            types[kept++] = types[k];
    return kept;
}

static void format_types(const int32_t *types, int n, char *out, size_t size)
{
    out[0] = '\0';
    size_t used = 0;
    for (int k = 0; k < n && used < size; k++)
        used +=
            (size_t)snprintf(out + used, size - used, "%s%s", k ? "," : "", ql_type_name(types[k]));
}

/* ---------------------------------------------------------------------------
 * Source rows as f32 */

/* Makes a source tensor's rows readable as f32 (ql_dequant_row): its type must
 * decode, and IQ types need their lattice tables loaded. */
static ql_status prepare_source(const ql_gguf *model, const ql_gguf_tensor *gt, ql_error *err)
{
    const ql_type_traits *tr = ql_type_get(gt->type);
    if (!tr || !tr->dequantize || tr->block_size <= 0 || !gt->data)
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "%s: tensor '%s': qlab cannot read its source type %s", model->path,
                            gt->name, ql_type_name(gt->type));
    if (ql_type_prepare(gt->type, err) != QL_OK)
        return ql_error_prefix(err, "%s: tensor '%s': ", model->path, gt->name);
    return QL_OK;
}

/* ---------------------------------------------------------------------------
 * Importance per tensor */

ql_status ql_fit_quant_importance(const ql_fit_importance *imp, const ql_gguf_tensor *gt,
                                  const float **out, int64_t *out_n, ql_error *err)
{
    *out = NULL;
    *out_n = 0;
    if (!imp || !imp->lookup)
        return QL_OK;
    int64_t n = 0;
    const float *v = imp->lookup(imp->user, gt->name, &n);
    if (!v)
        return QL_OK;
    const int64_t ne0 = gt->ne[0], n_mats = gt->ne[2] * gt->ne[3];
    if (n != ne0 && !(n_mats > 1 && n == ne0 * n_mats))
        return ql_error_set(
            err, QL_EFORMAT, "imatrix entry '%s' has %lld values, expected %lld (its row length)%s",
            gt->name, (long long)n, (long long)ne0, n_mats > 1 ? " or row length x experts" : "");
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(v[j]) || v[j] < 0)
            return ql_error_set(err, QL_EFORMAT,
                                "imatrix entry '%s': value %lld is %g, expected a non-negative "
                                "number",
                                gt->name, (long long)j, (double)v[j]);
    *out = v;
    *out_n = n;
    return QL_OK;
}

typedef struct {
    const float *quant; /* what the quantizer receives (NULL: none) */
    int64_t quant_n;    /* ne0, or ne0 * n_expert for a per-expert entry */
    float *weights;     /* error weights, owned, same length as quant_n or ne0 */
    int64_t weights_n;
    ql_fit_imp_source src;
} tensor_imp;

/* Error weights of the head when the imatrix has no entry for it (llama-imatrix
 * leaves it out): its input is the RMS-normalised state (mean square 1) times
 * output_norm, so E[x_j^2] ~ output_norm_j^2; 1 without a usable norm. */
static ql_fit_imp_source head_weights(const ql_gguf *model, int64_t ne0, float *w)
{
    const ql_gguf_tensor *norm = ql_gguf_find_tensor(model, "output_norm.weight");
    ql_error norm_err;
    if (norm && norm->n_dims == 1 && norm->ne[0] == ne0 &&
        prepare_source(model, norm, &norm_err) == QL_OK) {
        ql_dequant_row(norm->type, norm->data, 0, ne0, w);
        for (int64_t j = 0; j < ne0; j++)
            w[j] *= w[j];
        return QL_FIT_IMP_OUTPUT_NORM;
    }
    for (int64_t j = 0; j < ne0; j++)
        w[j] = 1.0f;
    return QL_FIT_IMP_UNIT;
}

/* The token embedding is a lookup: a token reads one row, so the expected squared
 * error a token injects is the mean over rows of the row errors, weight 1 / rows
 * per column. Untied, that is all; tied, the tensor is also the head and its head
 * weights are added. */
static void add_lookup_weights(const ql_gguf_tensor *gt, bool tied, tensor_imp *ti)
{
    const float w = (float)(1.0 / (double)(gt->n_dims >= 2 ? gt->ne[1] : 1));
    if (!tied && !ti->quant) {
        ti->weights_n = gt->ne[0];
        for (int64_t j = 0; j < ti->weights_n; j++)
            ti->weights[j] = w;
        ti->src = QL_FIT_IMP_LOOKUP;
        return;
    }
    for (int64_t j = 0; j < ti->weights_n; j++)
        ti->weights[j] += w;
    ti->src = QL_FIT_IMP_TIED;
}

/* What the quantizer receives for a tensor, and the error weights I_j. */
static ql_status tensor_importance(const ql_gguf *model, const ql_gguf_tensor *gt,
                                   const ql_fit_importance *imp, tensor_imp *ti, ql_error *err)
{
    memset(ti, 0, sizeof *ti);
    ql_status rc = ql_fit_quant_importance(imp, gt, &ti->quant, &ti->quant_n, err);
    if (rc != QL_OK)
        return rc;
    const int64_t ne0 = gt->ne[0];
    const bool have_imatrix = imp && imp->lookup;
    const bool is_embd = strcmp(gt->name, "token_embd.weight") == 0;
    const bool is_head = strcmp(gt->name, "output.weight") == 0;
    const bool tied = is_embd && !ql_gguf_find_tensor(model, "output.weight");
    ti->weights_n = ti->quant ? ti->quant_n : ne0;
    ti->weights = malloc(sizeof(float) * (size_t)ti->weights_n);
    if (!ti->weights)
        return ql_error_set(err, QL_ENOMEM, "fit: out of memory");
    if (ti->quant) {
        memcpy(ti->weights, ti->quant, sizeof(float) * (size_t)ti->quant_n);
        ti->src = QL_FIT_IMP_IMATRIX;
    } else if ((is_head || tied) && have_imatrix) {
        ti->src = head_weights(model, ne0, ti->weights);
    } else {
        for (int64_t j = 0; j < ne0; j++)
            ti->weights[j] = 1.0f;
        ti->src = have_imatrix ? QL_FIT_IMP_UNIT : QL_FIT_IMP_NONE;
    }
    if (is_embd)
        add_lookup_weights(gt, tied, ti);
    return QL_OK;
}

/* ---------------------------------------------------------------------------
 * The measurement */

typedef struct {
    const ql_gguf_tensor *gt;
    ql_fit_tensor *ft;
    tensor_imp imp;
    int64_t n_rows;
    int64_t n_sample;
    int n_cand;
    int32_t cand[QL_FIT_MAX_TYPES];
    int first_job;
    int n_chunks;
    int64_t chunk_rows;
} tensor_work;

typedef struct {
    int tw;   /* tensor_work index */
    int cand; /* candidate index */
    int chunk;
} job;

int64_t ql_fit_sample_row(int64_t k, int64_t ns, int64_t n)
{
    if (ns >= n)
        return k;
    return (2 * k + 1) * n / (2 * ns);
}

/* sum over rows k of sum_j w_j (x - x^)^2 for the nr sampled rows from r0 on, in
 * row order, with each row's error weights (its expert's, per expert). */
static double weighted_sse(const tensor_work *w, int64_t r0, int64_t nr, const float *x,
                           const float *y)
{
    const int64_t ne0 = w->gt->ne[0];
    const int64_t rows_per_expert = w->gt->n_dims >= 3 ? w->gt->ne[1] : w->n_rows;
    double s = 0;
    for (int64_t r = 0; r < nr; r++) {
        const int64_t e = w->imp.weights_n > ne0
                              ? ql_fit_sample_row(r0 + r, w->n_sample, w->n_rows) / rows_per_expert
                              : 0;
        const float *wt = w->imp.weights + e * ne0;
        const float *a = x + r * ne0, *b = y + r * ne0;
        double row_sum = 0;
        for (int64_t j = 0; j < ne0; j++) {
            const double d = (double)a[j] - (double)b[j];
            row_sum += (double)wt[j] * d * d;
        }
        s += row_sum;
    }
    return s;
}

/* Quantizes the sampled rows x (nr of them from sample index r0 on) into q through
 * the per-tensor entry point, each run of consecutive source rows in one call, so
 * that every row gets the bytes `qlab quantize` gives it. */
static ql_status quantize_sample(const tensor_work *w, int32_t type, int64_t r0, int64_t nr,
                                 const float *x, uint8_t *q, ql_error *err)
{
    const int64_t ne0 = w->gt->ne[0];
    const size_t rs = ql_row_size(type, ne0);
    ql_quant_src s;
    ql_quant_src_from_gguf(&s, w->gt);
    s.imatrix = w->imp.quant;
    s.imatrix_per_mat = w->imp.quant_n > ne0;
    for (int64_t k = 0; k < nr;) {
        const int64_t first = ql_fit_sample_row(r0 + k, w->n_sample, w->n_rows);
        int64_t n = 1;
        while (k + n < nr && ql_fit_sample_row(r0 + k + n, w->n_sample, w->n_rows) == first + n)
            n++;
        s.rows = x + k * ne0;
        s.rows_first = first;
        s.rows_n = n;
        ql_status rc = ql_quant_tensor_rows(&s, type, first, n, q + (size_t)k * rs,
                                            rs * (size_t)(nr - k), err);
        if (rc != QL_OK)
            return ql_error_prefix(err, "fit: tensor '%s': ", w->gt->name);
        k += n;
    }
    return QL_OK;
}

/* Quantizes one job's sampled rows of a tensor with one type, dequantizes them and
 * returns their weighted squared error (weighted_sse). */
static ql_status measure_chunk(const tensor_work *w, int32_t type, int chunk, double *out,
                               ql_error *err)
{
    const ql_gguf_tensor *gt = w->gt;
    const int64_t ne0 = gt->ne[0];
    const int64_t r0 = (int64_t)chunk * w->chunk_rows;
    const int64_t r1 = r0 + w->chunk_rows < w->n_sample ? r0 + w->chunk_rows : w->n_sample;
    const int64_t nr = r1 - r0;
    const size_t rs = ql_row_size(type, ne0);
    float *x = malloc(sizeof(float) * (size_t)(nr * ne0));
    float *y = malloc(sizeof(float) * (size_t)(nr * ne0));
    uint8_t *q = malloc(rs * (size_t)nr);
    ql_status rc = QL_OK;
    if (!x || !y || !q) {
        rc = ql_error_set(err, QL_ENOMEM, "fit: out of memory measuring '%s'", gt->name);
        goto out;
    }
    for (int64_t k = 0; k < nr; k++)
        ql_dequant_row(gt->type, gt->data, ql_fit_sample_row(r0 + k, w->n_sample, w->n_rows), ne0,
                       x + k * ne0);
    if ((rc = quantize_sample(w, type, r0, nr, x, q, err)) != QL_OK)
        goto out;
    ql_type_get(type)->dequantize(q, y, nr, ne0);
    *out = weighted_sse(w, r0, nr, x, y);
out:
    free(x);
    free(y);
    free(q);
    return rc;
}

static int cmp_choice(const void *pa, const void *pb)
{
    const ql_fit_choice *a = pa, *b = pb;
    if (a->bytes != b->bytes)
        return a->bytes < b->bytes ? -1 : 1;
    if (a->err != b->err)
        return a->err < b->err ? -1 : 1;
    return a->type < b->type ? -1 : a->type > b->type;
}

void ql_fit_table_sort_choices(ql_fit_table *t)
{
    for (int i = 0; i < t->n_tensors; i++)
        if (t->tensors[i].n_choices > 0) /* a fixed tensor has none (and no array) */
            qsort(t->tensors[i].choices, (size_t)t->tensors[i].n_choices,
                  sizeof *t->tensors[i].choices, cmp_choice);
}

/* ---------------------------------------------------------------------------
 * Candidate types */

/* Availability of one type: NULL when usable, else why not (static text or buf). */
static const char *type_unavailable(int32_t type, char *buf, size_t size)
{
    const ql_type_traits *tr = ql_type_get(type);
    if (!tr->quantize || !tr->dequantize)
        return "qlab cannot quantize it yet";
    ql_error e;
    ql_error_clear(&e);
    if (ql_type_prepare(type, &e) != QL_OK) {
        ql_strlcpy(buf, e.msg, size);
        return buf;
    }
    return NULL;
}

/* The candidate types of a table, and what became of them. */
typedef struct {
    bool deflt; /* the default ladder: two lists by row length */
    int32_t
        wide[QL_FIT_MAX_TYPES]; /* rows that split into 256-blocks (every row for a user list) */
    int n_wide;
    int32_t
        short_rows[QL_FIT_MAX_TYPES]; /* other rows: the ladder's types of at most 32 per block */
    int n_short_rows;
    bool usable[QL_TYPE_ID_LIMIT];       /* by type id: qlab can produce it */
    int imatrix_skips[QL_TYPE_ID_LIMIT]; /* by type id: tensors without the imatrix entry it needs
                                          */
} candidates;

/* The requested lists: a user list, or the default ladder; capped at max_bpw. */
static ql_status candidate_lists(candidates *c, const ql_fit_options *opt, ql_error *err)
{
    memset(c, 0, sizeof *c);
    c->deflt = opt->types == NULL;
    if (c->deflt) {
        /* Rows of 256-blocks also split into 32-blocks: the whole ladder is theirs. */
        c->n_wide = default_ladder(c->wide, false);
        c->n_short_rows = default_ladder(c->short_rows, true);
    } else {
        ql_status rc = parse_types(opt->types, c->wide, &c->n_wide, err);
        if (rc != QL_OK)
            return rc;
        memcpy(c->short_rows, c->wide, sizeof c->wide);
        c->n_short_rows = c->n_wide;
    }
    if (opt->max_bpw > 0) {
        c->n_wide = cap_bpw(c->wide, c->n_wide, opt->max_bpw);
        c->n_short_rows = cap_bpw(c->short_rows, c->n_short_rows, opt->max_bpw);
    }
    return QL_OK;
}

/* Marks what qlab can produce; a note says why each other type is skipped (once
 * per type, in list order). */
static ql_status mark_usable(candidates *c, ql_fit_table *t, ql_error *err)
{
    int32_t all[2 * QL_FIT_MAX_TYPES];
    int n_all = 0;
    for (int k = 0; k < c->n_wide; k++)
        all[n_all++] = c->wide[k];
    for (int k = 0; k < c->n_short_rows; k++)
        all[n_all++] = c->short_rows[k];
    for (int k = 0; k < n_all; k++) {
        bool seen = false;
        for (int m = 0; m < k; m++)
            seen |= all[m] == all[k];
        if (seen)
            continue;
        char why[QL_ERROR_MSG_MAX];
        const char *no = type_unavailable(all[k], why, sizeof why);
        ql_status rc = QL_OK;
        if (!no)
            c->usable[all[k]] = true;
        else
            rc = ql_fit_table_add_note(t, err, "%s skipped: %s", ql_type_name(all[k]), no);
        if (rc != QL_OK)
            return rc;
    }
    return QL_OK;
}

/* The list that applies to rows of ne0 values. */
static const int32_t *candidates_for(const candidates *c, int64_t ne0, int *n)
{
    const bool short_rows = c->deflt && ne0 % 256 != 0;
    *n = short_rows ? c->n_short_rows : c->n_wide;
    return short_rows ? c->short_rows : c->wide;
}

/* The error when no requested type applies to a tensor: the reason of each. */
static ql_status no_candidate(const candidates *c, const ql_gguf_tensor *gt, ql_error *err)
{
    int n_set;
    const int32_t *set = candidates_for(c, gt->ne[0], &n_set);
    char why[1024] = "";
    size_t used = 0;
    for (int k = 0; k < n_set && used < sizeof why; k++) {
        char buf[256];
        const char *r = !c->usable[set[k]] ? type_unavailable(set[k], buf, sizeof buf)
                        : ql_row_size(set[k], gt->ne[0]) == 0 ? "row length"
                                                              : "needs an imatrix entry";
        used += (size_t)snprintf(why + used, sizeof why - used, "%s%s: %s", k ? ", " : "",
                                 ql_type_name(set[k]), r);
    }
    return ql_error_set(err, QL_EINVAL,
                        "tensor '%s' (row length %lld): no candidate type applies (%s); "
                        "add F16 or a 32-block type",
                        gt->name, (long long)gt->ne[0], why);
}

/* The notes of the types some tensors could not take for want of an imatrix entry. */
static ql_status note_imatrix_skips(const candidates *c, bool have_imatrix, ql_fit_table *t,
                                    ql_error *err)
{
    const ql_type_traits *all[QL_TYPE_ID_LIMIT];
    const int n_all = ql_type_list(all, QL_TYPE_ID_LIMIT);
    for (int k = 0; k < n_all; k++) {
        const int n = c->imatrix_skips[all[k]->type];
        if (n == 0)
            continue;
        ql_status rc =
            have_imatrix
                ? ql_fit_table_add_note(t, err,
                                        "%s is not a candidate for %d tensor(s) without "
                                        "an imatrix entry (it needs one)",
                                        all[k]->name, n)
                : ql_fit_table_add_note(t, err, "%s skipped: it needs an imatrix", all[k]->name);
        if (rc != QL_OK)
            return rc;
    }
    return QL_OK;
}

/* ---------------------------------------------------------------------------
 * The table, tensor by tensor */

/* Fills a tensor's record from the model: shape, source type, and whether the
 * solver assigns it; a fixed tensor gets its type and bytes. */
static ql_status describe_tensor(const ql_gguf *model, const ql_gguf_tensor *gt,
                                 const ql_fit_options *opt, ql_fit_table *t, ql_fit_tensor *ft,
                                 ql_error *err)
{
    if (!(ft->name = ql_strdup(gt->name)))
        return ql_error_set(err, QL_ENOMEM, "fit: out of memory");
    ft->n_dims = gt->n_dims;
    for (int d = 0; d < QL_GGUF_MAX_DIMS; d++)
        ft->ne[d] = gt->ne[d];
    ft->n_params = ql_gguf_tensor_nelements(gt);
    ft->src_type = gt->type;
    t->total_params += ft->n_params;
    if (!gt->data)
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "%s: tensor '%s' has type %s, which qlab does not know", model->path,
                            gt->name, ql_type_name(gt->type));
    bool assigned = false;
    int32_t fixed_type = QL_TYPE_F32;
    ql_status rc = tensor_role(model, gt, opt->assign_routers, &assigned, &fixed_type, err);
    if (rc != QL_OK)
        return rc;
    ft->assigned = assigned;
    if (assigned) {
        t->assigned_params += ft->n_params;
        return QL_OK;
    }
    ft->fixed_type = fixed_type;
    ft->fixed_bytes = fixed_type == gt->type ? gt->nbytes
                                             : (uint64_t)(ft->n_params / gt->ne[0]) *
                                                   ql_row_size(fixed_type, gt->ne[0]);
    t->fixed_bytes += ft->fixed_bytes;
    return QL_OK;
}

/* The candidates of an assigned tensor: the list for its row length, less what
 * qlab cannot produce, what its rows do not split into and what needs an imatrix
 * entry it lacks (counted for a note). */
static ql_status choose_candidates(candidates *c, tensor_work *w, ql_error *err)
{
    const int64_t ne0 = w->gt->ne[0];
    int n_set;
    const int32_t *set = candidates_for(c, ne0, &n_set);
    for (int k = 0; k < n_set; k++) {
        if (!c->usable[set[k]] || ql_row_size(set[k], ne0) == 0)
            continue;
        if (ql_type_get(set[k])->requires_imatrix && !w->imp.quant) {
            c->imatrix_skips[set[k]]++;
            continue;
        }
        w->cand[w->n_cand++] = set[k];
    }
    return w->n_cand > 0 ? QL_OK : no_candidate(c, w->gt, err);
}

/* Sets up the measurement of an assigned tensor: its source, importance, sampled
 * rows, candidates and row chunks; its jobs are numbered from *n_jobs on. */
static ql_status plan_tensor(const ql_gguf *model, const ql_gguf_tensor *gt,
                             const ql_fit_importance *imp, const ql_fit_options *opt, candidates *c,
                             tensor_work *w, ql_fit_tensor *ft, int *n_jobs, ql_error *err)
{
    ql_status rc = prepare_source(model, gt, err);
    if (rc != QL_OK)
        return rc;
    w->gt = gt;
    w->ft = ft;
    w->n_rows = ft->n_params / gt->ne[0];
    w->n_sample =
        opt->sample_rows > 0 && opt->sample_rows < w->n_rows ? opt->sample_rows : w->n_rows;
    if ((rc = tensor_importance(model, gt, imp, &w->imp, err)) != QL_OK)
        return rc;
    ft->imp = w->imp.src;
    ft->quant_imatrix = w->imp.quant != NULL;
    ft->rows_measured = w->n_sample;
    if ((rc = choose_candidates(c, w, err)) != QL_OK)
        return rc;
    w->chunk_rows = CHUNK_ELEMS / gt->ne[0] > 0 ? CHUNK_ELEMS / gt->ne[0] : 1;
    w->n_chunks = (int)((w->n_sample + w->chunk_rows - 1) / w->chunk_rows);
    w->first_job = *n_jobs;
    *n_jobs += w->n_cand * w->n_chunks;
    return QL_OK;
}

/* Runs every (tensor, candidate, chunk) job, in parallel; partial[k] receives job k's
 * error sum, reduced in a fixed order afterwards. */
static ql_status measure_all(const tensor_work *tw, int n_tw, int n_jobs, bool quiet,
                             double *partial, ql_error *err)
{
    job *jobs = malloc(sizeof(job) * (size_t)(n_jobs + 1));
    if (!jobs)
        return ql_error_set(err, QL_ENOMEM, "fit: out of memory");
    for (int w = 0; w < n_tw; w++)
        for (int c = 0; c < tw[w].n_cand; c++)
            for (int ch = 0; ch < tw[w].n_chunks; ch++)
                jobs[tw[w].first_job + c * tw[w].n_chunks + ch] = (job){w, c, ch};
    ql_progress prog;
    ql_progress_begin(&prog, "fit: measuring errors", "job", n_jobs, quiet);
    int64_t done = 0;
    bool failed = false;
    ql_error job_err;
    ql_error_clear(&job_err);
    const int n_threads = ql_threads_get();
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
    for (int k = 0; k < n_jobs; k++) {
        bool skip;
#pragma omp atomic read
        skip = failed;
        if (skip)
            continue;
        const job *j = &jobs[k];
        ql_error e;
        ql_error_clear(&e);
        ql_status s = measure_chunk(&tw[j->tw], tw[j->tw].cand[j->cand], j->chunk, &partial[k], &e);
#pragma omp critical(fit_progress)
        {
            if (s != QL_OK && !failed) {
                job_err = e;
#pragma omp atomic write
                failed = true;
            }
            done++;
            ql_progress_update(&prog, done, NULL);
        }
    }
    ql_progress_end(&prog, done, NULL);
    free(jobs);
    if (failed)
        return ql_error_set(err, job_err.status, "%s", job_err.msg);
    return QL_OK;
}

/* A tensor's choices from its jobs' sums: chunk order, scaled by rows / sampled
 * rows; a candidate whose error is not finite is left out with a note. */
static ql_status collect_choices(const ql_gguf *model, const tensor_work *w, const double *partial,
                                 ql_fit_table *t, ql_error *err)
{
    ql_fit_tensor *ft = w->ft;
    ft->choices = calloc((size_t)w->n_cand, sizeof *ft->choices);
    if (!ft->choices)
        return ql_error_set(err, QL_ENOMEM, "fit: out of memory");
    const double scale = (double)w->n_rows / (double)w->n_sample;
    for (int c = 0; c < w->n_cand; c++) {
        double s = 0;
        for (int ch = 0; ch < w->n_chunks; ch++)
            s += partial[w->first_job + c * w->n_chunks + ch];
        s *= scale;
        const int32_t type = w->cand[c];
        if (!isfinite(s)) {
            ql_status rc =
                ql_fit_table_add_note(t, err,
                                      "%s is not a candidate for '%s': its error is not finite "
                                      "(values out of the type's range)",
                                      ql_type_name(type), ft->name);
            if (rc != QL_OK)
                return rc;
            continue;
        }
        ql_fit_choice *choice = &ft->choices[ft->n_choices++];
        choice->type = type;
        choice->bytes = (uint64_t)w->n_rows * ql_row_size(type, ft->ne[0]);
        choice->err = s;
    }
    if (ft->n_choices == 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: tensor '%s': no candidate type gives a finite error (does the "
                            "tensor hold NaN or infinity?)",
                            model->path, ft->name);
    qsort(ft->choices, (size_t)ft->n_choices, sizeof *ft->choices, cmp_choice);
    return QL_OK;
}

/* The table of t's model: every tensor described, the assigned ones measured with
 * each of their candidates. */
static ql_status compute(const ql_gguf *model, const ql_fit_importance *imp,
                         const ql_fit_options *opt, ql_fit_table *t, ql_error *err)
{
    candidates cand;
    ql_status rc = candidate_lists(&cand, opt, err);
    if (rc == QL_OK)
        rc = mark_usable(&cand, t, err);
    if (rc != QL_OK)
        return rc;
    tensor_work *tw = calloc((size_t)model->n_tensors + 1, sizeof *tw);
    double *partial = NULL;
    int n_tw = 0, n_jobs = 0;
    t->tensors = calloc((size_t)model->n_tensors + 1, sizeof *t->tensors);
    if (!tw || !t->tensors) {
        rc = ql_error_set(err, QL_ENOMEM, "fit: out of memory");
        goto out;
    }
    for (int64_t i = 0; i < model->n_tensors && rc == QL_OK; i++) {
        const ql_gguf_tensor *gt = &model->tensors[i];
        ql_fit_tensor *ft = &t->tensors[t->n_tensors++];
        rc = describe_tensor(model, gt, opt, t, ft, err);
        if (rc == QL_OK && ft->assigned)
            rc = plan_tensor(model, gt, imp, opt, &cand, &tw[n_tw++], ft, &n_jobs, err);
    }
    if (rc == QL_OK)
        rc = note_imatrix_skips(&cand, imp && imp->lookup, t, err);
    if (rc == QL_OK && !(partial = malloc(sizeof(double) * (size_t)(n_jobs + 1))))
        rc = ql_error_set(err, QL_ENOMEM, "fit: out of memory");
    if (rc == QL_OK)
        rc = measure_all(tw, n_tw, n_jobs, opt->quiet, partial, err);
    for (int w = 0; w < n_tw && rc == QL_OK; w++)
        rc = collect_choices(model, &tw[w], partial, t, err);
out:
    if (tw)
        for (int w = 0; w < n_tw; w++)
            free(tw[w].imp.weights);
    free(tw);
    free(partial);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Entry point */

/* What identifies a table besides the build: model, imatrix, candidate set (as
 * requested, canonical order, with its cap) and sampling. */
static ql_status table_identity(ql_fit_table *t, const ql_gguf *model, const char *model_sha256,
                                const ql_fit_importance *imp, const ql_fit_options *opt,
                                ql_error *err)
{
    ql_status rc = QL_OK;
    if (model_sha256 && *model_sha256)
        ql_strlcpy(t->model_sha256, model_sha256, sizeof t->model_sha256);
    else if ((rc = ql_sha256_file(model->path, t->model_sha256, err)) != QL_OK)
        return rc;
    ql_strlcpy(t->imatrix_sha256,
               imp && imp->lookup && imp->sha256 && *imp->sha256 ? imp->sha256 : "none",
               sizeof t->imatrix_sha256);
    if (opt->types) {
        int32_t ty[QL_FIT_MAX_TYPES];
        int n;
        if ((rc = parse_types(opt->types, ty, &n, err)) != QL_OK)
            return rc;
        format_types(ty, n, t->types, sizeof t->types);
    } else {
        ql_strlcpy(t->types, "default", sizeof t->types);
    }
    if (opt->max_bpw > 0) {
        size_t used = strlen(t->types);
        snprintf(t->types + used, sizeof t->types - used, " up to %g bpw", opt->max_bpw);
    }
    if (opt->assign_routers) {
        size_t used = strlen(t->types);
        snprintf(t->types + used, sizeof t->types - used, " with routers");
    }
    t->sample_rows = opt->sample_rows;
    return QL_OK;
}

ql_status ql_fit_table_compute(const ql_gguf *model, const char *model_sha256,
                               const ql_fit_importance *imp, const ql_fit_options *opt,
                               ql_fit_table **out, ql_error *err)
{
    *out = NULL;
    ql_fit_options defaults;
    if (!opt) {
        ql_fit_options_init(&defaults);
        opt = &defaults;
    }
    if (opt->sample_rows < 0)
        return ql_error_set(err, QL_EINVAL, "fit: sample rows must be >= 0 (0 = every row)");
    const double t0 = ql_now();
    ql_fit_table *t = calloc(1, sizeof *t);
    if (!t)
        return ql_error_set(err, QL_ENOMEM, "fit: out of memory");
    char dir[4096], cache_problem[QL_ERROR_MSG_MAX + 4200] = "";
    ql_status rc = table_identity(t, model, model_sha256, imp, opt, err);
    if (rc == QL_OK)
        rc = ql_fit_table_file_locate(t, opt, dir, sizeof dir, err);
    if (rc != QL_OK)
        goto fail;
    ql_fit_table *cached = ql_fit_table_file_find(t, model, cache_problem, sizeof cache_problem);
    if (cached) {
        cached->seconds = ql_now() - t0;
        ql_fit_table_free(t);
        *out = cached;
        return QL_OK;
    }
    if (t->cache_path[0]) {
        ql_error dir_err; /* a failure shows as "cache not written" after the table */
        (void)ql_make_dirs(dir, &dir_err);
    }
    if ((rc = compute(model, imp, opt, t, err)) != QL_OK ||
        (rc = ql_fit_table_file_store(t, cache_problem, err)) != QL_OK)
        goto fail;
    t->seconds = ql_now() - t0;
    *out = t;
    return QL_OK;
fail:
    ql_fit_table_free(t);
    return rc;
}
