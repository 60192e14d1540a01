/* The sweep runner: reference once, then every config against it (runner.h). */
#include "runner.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actquant.h"
#include "calib.h"
#include "data.h"
#include "fit.h"
#include "forward.h"
#include "gguf.h"
#include "imatrix.h"
#include "imatrix_io.h"
#include "metrics.h"
#include "model.h"
#include "outliers.h"
#include "perplexity.h"
#include "progress.h"
#include "ql_config.h"
#include "quant.h"
#include "quant_int8row.h"
#include "reference.h"
#include "store.h"
#include "synth.h"
#include "table.h"
#include "tokenizer.h"
#include "types.h"
#include "util.h"

/* Quantized tensors kept across configs, by default: enough for every tensor of a
 * few configs of a 100M-parameter model. */
#define DEFAULT_CACHE_BYTES ((size_t)2 << 30)

void ql_run_opts_init(ql_run_opts *o)
{
    memset(o, 0, sizeof *o);
    o->shard.index = 0;
    o->shard.count = 1;
}

/* ------------------------------------------------------------------------- */
/* Quantized tensors shared between configs                                   */

typedef struct {
    char name[QL_QUANT_NAME_MAX];
    int32_t type;
    const ql_imatrix *imatrix; /* importance used to quantize (identity), NULL = none */
    const ql_outlier_cols *oc; /* outlier columns kept exact (identity), NULL = none */
    uint64_t outlier_bytes;    /* f32 values and indices of those columns */
    void *q;                   /* quantized bytes (storage type: Q8_0 for Q8_0_XC) */
    size_t q_bytes;
    float *deq; /* (nrows, n_per_row) dequantized */
    int64_t nrows, n_per_row;
    ql_weight_error werr; /* against the reference weights, weighted by the metric imatrix */
    uint64_t last_use;
} qtensor;

typedef struct {
    qtensor *items;
    size_t n, cap;
    size_t bytes, max_bytes;
    uint64_t clock;
} qcache;

static void qtensor_release(qtensor *t)
{
    free(t->q);
    free(t->deq);
    t->q = NULL;
    t->deq = NULL;
}

static size_t qtensor_mem(const qtensor *t)
{
    return t->q_bytes + (size_t)(t->nrows * t->n_per_row) * sizeof(float);
}

static void qcache_deinit(qcache *c)
{
    for (size_t i = 0; i < c->n; i++)
        qtensor_release(&c->items[i]);
    free(c->items);
    memset(c, 0, sizeof *c);
}

/* Drops least recently used tensors not used by the current config (last_use <
 * keep_from) until the cache fits. */
static void qcache_trim(qcache *c, uint64_t keep_from)
{
    while (c->bytes > c->max_bytes) {
        size_t victim = SIZE_MAX;
        for (size_t i = 0; i < c->n; i++)
            if (c->items[i].last_use < keep_from &&
                (victim == SIZE_MAX || c->items[i].last_use < c->items[victim].last_use))
                victim = i;
        if (victim == SIZE_MAX)
            return;
        c->bytes -= qtensor_mem(&c->items[victim]);
        qtensor_release(&c->items[victim]);
        c->items[victim] = c->items[--c->n];
    }
}

static qtensor *qcache_find(qcache *c, const char *name, int32_t type, const ql_imatrix *im,
                            const ql_outlier_cols *oc)
{
    for (size_t i = 0; i < c->n; i++) {
        qtensor *t = &c->items[i];
        if (t->type == type && t->imatrix == im && t->oc == oc && strcmp(t->name, name) == 0) {
            t->last_use = c->clock;
            return t;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------- */
/* The state of one sweep                                                     */

typedef struct {
    const ql_sweep *sw;
    const ql_run_opts *opts;
    char db_path[QL_PATH_MAX];
    char cache_dir[QL_PATH_MAX];

    char model_path[QL_PATH_MAX];
    char model_sha[65];
    ql_model *model;
    ql_tokenizer *tok;
    char text_path[QL_PATH_MAX];
    char text_sha[65];
    int64_t text_bytes;
    ql_ppl_data data;
    ql_forward *fw;
    ql_reference *ref;

    ql_calib *calib; /* the importance matrices and outlier sets the configs name */
    const ql_imatrix *metric_imatrix; /* weights the imatrix_err columns of every run */

    ql_store *store;
    int64_t model_id, dataset_id;

    qcache cache;
    ql_dist_acc *acc;
    float *logits;  /* (n_scored, n_vocab) */
    float *imat_buf; /* per-column importance scratch (max row length) */
    float *metric_buf;
    int64_t max_row;

    char eta_note[64]; /* "sweep ETA 3m05s", shown on each config's progress line */
    int kill_after; /* fault injection: SIGKILL after this many begun runs (0 = never) */
    int begun;
} sweep_ctx;

/* The cached quantized tensor for (name, type, imatrix), quantizing it on a miss. */
static ql_status get_qtensor(sweep_ctx *s, const ql_quant_plan_entry *e, const float *src,
                             const ql_imatrix *im, const ql_outlier_cols *oc, qtensor **out,
                             double *quant_seconds, ql_error *err)
{
    /* Without columns to keep, a split is a plain quantization: share its entry. */
    if (oc && oc->n == 0 && e->used != QL_TYPE_Q8_0_XC)
        oc = NULL;
    qtensor *t = qcache_find(&s->cache, e->name, e->used, im, oc);
    if (t) {
        *out = t;
        return QL_OK;
    }
    double t0 = ql_now();
    qtensor nt;
    memset(&nt, 0, sizeof nt);
    ql_strlcpy(nt.name, e->name, sizeof nt.name);
    nt.type = e->used;
    nt.imatrix = im;
    nt.oc = oc;
    nt.nrows = e->nrows;
    nt.n_per_row = e->n_per_row;
    nt.q_bytes = (size_t)e->bytes;
    size_t n = (size_t)(e->nrows * e->n_per_row);
    nt.q = malloc(nt.q_bytes ? nt.q_bytes : 1);
    nt.deq = malloc(n * sizeof(float));
    if (!nt.q || !nt.deq) {
        qtensor_release(&nt);
        return ql_error_set(err, QL_ENOMEM, "out of memory quantizing '%s'", e->name);
    }
    const float *qw, *mw;
    ql_status st = ql_calib_column_weights(im, e->name, e->n_per_row, s->imat_buf, &qw, err);
    if (!st && (oc || e->used == QL_TYPE_Q8_0_XC)) {
        /* The outlier split (outliers.h): the columns stay exact, the rest is
         * quantized without them; Q8_0_XC keeps them exact inside Q8_0 blocks. */
        uint64_t qb = 0;
        st = ql_outliers_quant_weight(e->used, src, e->nrows, e->n_per_row, qw, oc, nt.deq, nt.q,
                                      nt.q_bytes, &qb, &nt.outlier_bytes, err);
    } else if (!st) {
        st = ql_quant_tensor(e->used, src, e->nrows, e->n_per_row, qw, nt.q, nt.q_bytes, NULL,
                             err);
        if (!st)
            st = ql_dequant_tensor(e->used, nt.q, nt.q_bytes, e->nrows, e->n_per_row, nt.deq,
                                   err);
    }
    if (!st)
        st = ql_calib_column_weights(s->metric_imatrix, e->name, e->n_per_row, s->metric_buf, &mw,
                                     err);
    if (!st)
        st = ql_weight_error_add(&nt.werr, src, nt.deq, e->nrows, e->n_per_row, mw, err);
    if (st) {
        qtensor_release(&nt);
        return st;
    }
    if (s->cache.n == s->cache.cap) {
        size_t cap = s->cache.cap ? 2 * s->cache.cap : 64;
        qtensor *grown = realloc(s->cache.items, cap * sizeof *grown);
        if (!grown) {
            qtensor_release(&nt);
            return ql_error_set(err, QL_ENOMEM, "out of memory for the tensor cache");
        }
        s->cache.items = grown;
        s->cache.cap = cap;
    }
    nt.last_use = s->cache.clock;
    s->cache.items[s->cache.n++] = nt;
    s->cache.bytes += qtensor_mem(&nt);
    *quant_seconds += ql_now() - t0;
    *out = &s->cache.items[s->cache.n - 1];
    return QL_OK;
}

/* ------------------------------------------------------------------------- */
/* One config                                                                 */

typedef struct {
    ql_store_metrics m;
    ql_store_tensor_error *te;
    size_t n_te;
    char (*names)[QL_QUANT_NAME_MAX]; /* the records point here (the plan is freed first) */
    char (*reasons)[QL_QUANT_REASON_MAX];
    ql_store_chunk_metrics *chunks;
    ql_store_timing timing;
    uint64_t outlier_bytes, outlier_bytes_body; /* f32 columns of the split */
    const void **site_q;    /* (n_lin,) quantized bytes of each product, NULL if none */
    ql_store_act_rounding *acts;
    size_t n_acts;
    char (*act_names)[96];           /* the act records point here: the weight set and */
    char (*act_notes)[QL_ACT_NOTE_MAX]; /* the act plan are freed before the run is stored */
} config_result;

static void config_result_deinit(config_result *r)
{
    free(r->te);
    free(r->names);
    free(r->reasons);
    free(r->chunks);
    free(r->site_q);
    free(r->acts);
    free(r->act_names);
    free(r->act_notes);
    memset(r, 0, sizeof *r);
}

/* GGUF file size of the plan (metadata of the source, tensors in their used types);
 * NAN when a type has no GGUF id (INT8_ROW). */
static double plan_gguf_bytes(const ql_gguf *src, const ql_quant_plan *plan, ql_error *err)
{
    for (int64_t i = 0; i < plan->n; i++) {
        const ql_type_traits *t = ql_type_get(plan->entries[i].used);
        const ql_type_traits *stored = t ? ql_type_get(t->storage) : NULL;
        if (!stored || !stored->is_gguf)
            return (double)NAN;
    }
    ql_gguf_writer *w;
    if (ql_gguf_writer_alloc(&w, err))
        return (double)NAN;
    double size = (double)NAN;
    if (ql_gguf_writer_copy_kvs(w, src, err))
        goto out;
    for (int64_t i = 0; i < plan->n; i++) {
        const ql_quant_plan_entry *e = &plan->entries[i];
        if (ql_gguf_writer_add_tensor(w, e->name, e->n_dims, e->ne, ql_type_get(e->used)->storage,
                                      e->bytes, err))
            goto out;
    }
    size = (double)ql_gguf_writer_file_size(w);
out:
    ql_gguf_writer_free(w);
    return size;
}

/* Quantizes the weights of a config into a weight set borrowing from the cache. */
static ql_status build_weights(sweep_ctx *s, const ql_quant_plan *plan, const ql_imatrix *im,
                               const ql_outlier_set *os, ql_weights **out, config_result *r,
                               double *zlib_bytes, ql_error *err)
{
    *out = NULL;
    ql_weights *w;
    ql_status st = ql_weights_copy(&w, s->model->weights, err);
    if (st)
        return st;
    r->te = calloc((size_t)plan->n, sizeof *r->te);
    r->names = calloc((size_t)plan->n, sizeof *r->names);
    r->reasons = calloc((size_t)plan->n, sizeof *r->reasons);
    r->site_q = calloc((size_t)w->n_lin, sizeof *r->site_q);
    ql_zlib_tensor *zt = calloc((size_t)plan->n, sizeof *zt);
    if (!r->te || !r->names || !r->reasons || !r->site_q || !zt) {
        free(zt);
        ql_weights_free(w);
        return ql_error_set(err, QL_ENOMEM, "out of memory for the tensor records");
    }
    ql_weight_error total;
    memset(&total, 0, sizeof total);
    total.weighted = true;
    bool any_weighted = false;
    double quant_seconds = 0;
    size_t n_zt = 0;
    for (int64_t i = 0; i < plan->n && !st; i++) {
        const ql_quant_plan_entry *e = &plan->entries[i];
        ql_linear *lin = ql_weights_find(s->model->weights, e->name);
        if (e->role == QL_ROLE_VECTOR || e->role == QL_ROLE_KEEP || !lin) {
            /* Stays as the reference has it; its bytes still count. */
            const ql_gguf_tensor *gt = ql_gguf_find_tensor(s->model->gguf, e->name);
            if (gt && gt->type == QL_TYPE_F32 && e->used == QL_TYPE_F32)
                zt[n_zt++] = (ql_zlib_tensor){QL_TYPE_F32, gt->data, e->nrows, e->n_per_row};
            continue;
        }
        ql_store_tensor_error *te = &r->te[r->n_te];
        ql_strlcpy(r->names[r->n_te], e->name, QL_QUANT_NAME_MAX);
        te->tensor = r->names[r->n_te];
        te->requested_type = e->requested;
        te->used_type = e->used;
        ql_strlcpy(r->reasons[r->n_te], e->reason, QL_QUANT_REASON_MAX);
        te->fallback_reason = e->used != e->requested ? r->reasons[r->n_te] : NULL;
        te->n_rows = e->nrows;
        te->n_cols = e->n_per_row;
        te->params = e->nrows * e->n_per_row;
        te->bytes = (int64_t)e->bytes;
        te->outlier_cols = -1;
        r->n_te++;
        if (e->used == QL_TYPE_F32) {
            /* Kept exact: no error, the reference weights are used as they are; with
             * importance weights its sum I w^2 still counts in the relative total. */
            const float *mw = NULL;
            st = ql_calib_column_weights(s->metric_imatrix, e->name, e->n_per_row, s->metric_buf,
                                         &mw, err);
            if (st)
                break;
            ql_weight_error zero;
            memset(&zero, 0, sizeof zero);
            if ((st = ql_weight_error_add(&zero, lin->w, lin->w, e->nrows, e->n_per_row, mw, err)))
                break;
            te->rmse = te->max_err = 0;
            te->imatrix_err = zero.weighted ? 0 : (double)NAN;
            te->imatrix_err_rel = zero.weighted ? 0 : (double)NAN;
            any_weighted |= zero.weighted;
            ql_weight_error_merge(&total, &zero);
            zt[n_zt++] = (ql_zlib_tensor){QL_TYPE_F32, lin->w, e->nrows, e->n_per_row};
            continue;
        }
        /* The product site of this weight (the lookup table has none), and the
         * outlier columns of that product when the config splits them. */
        const ql_weights *ref = s->model->weights;
        int site = lin >= ref->lin && lin < ref->lin + ref->n_lin ? (int)(lin - ref->lin) : -1;
        const ql_outlier_cols *oc = os && site >= 0 ? &os->site[site] : NULL;
        qtensor *qt = NULL;
        st = get_qtensor(s, e, lin->w, im, oc, &qt, &quant_seconds, err);
        if (st) {
            ql_error_prefix(err, "tensor '%s' (%s): ", e->name, ql_type_name(e->used));
            break;
        }
        if (oc)
            te->outlier_cols = oc->n;
        r->outlier_bytes += qt->outlier_bytes;
        if (e->role == QL_ROLE_WEIGHT)
            r->outlier_bytes_body += qt->outlier_bytes;
        if (site >= 0)
            r->site_q[site] = qt->q;
        te->rmse = ql_weight_error_rmse(&qt->werr);
        te->max_err = qt->werr.max_abs;
        te->imatrix_err = qt->werr.weighted ? qt->werr.w_sse : (double)NAN;
        te->imatrix_err_rel = ql_weight_error_rel(&qt->werr);
        any_weighted |= qt->werr.weighted;
        ql_weight_error_merge(&total, &qt->werr);
        zt[n_zt++] = (ql_zlib_tensor){ql_type_get(qt->type)->storage, qt->q, qt->nrows,
                                      qt->n_per_row};
        ql_linear *dst = ql_weights_find(w, e->name);
        ql_linear_set_weights(dst, qt->deq, false);
        if (dst == &w->tok_embd && s->model->hp.tied_output) {
            /* The head of tied embeddings reads the same tensor, with its own outlier
             * columns when the split gives the head site any. */
            int out_site = ql_site_output(w);
            const ql_outlier_cols *hoc = os ? &os->site[out_site] : NULL;
            qtensor *hq = qt;
            if (hoc && hoc->n > 0 &&
                (st = get_qtensor(s, e, lin->w, im, hoc, &hq, &quant_seconds, err)))
                break;
            ql_linear_set_weights(&w->lin[out_site], hq->deq, false);
            r->site_q[out_site] = hq->q;
            if (hq != qt)
                r->outlier_bytes += hq->outlier_bytes;
        }
    }
    if (!st) {
        r->m.rmse = ql_weight_error_rmse(&total);
        r->m.max_err = total.max_abs;
        r->m.imatrix_err = total.weighted && any_weighted ? total.w_sse : (double)NAN;
        r->m.imatrix_err_rel = any_weighted ? ql_weight_error_rel(&total) : (double)NAN;
        uint64_t z = 0;
        st = ql_zlib_size_tensors(zt, n_zt, &z, err);
        *zlib_bytes = st ? (double)NAN : (double)z;
    }
    free(zt);
    r->timing.quantize_seconds = quant_seconds;
    if (st) {
        ql_weights_free(w);
        return st;
    }
    *out = w;
    return QL_OK;
}

/* Installs the config's activation rounding (and the outlier channels left
 * unrounded) on every product, and records what each product got. */
static ql_status install_act(const ql_config *c, const ql_quant_plan *plan,
                             const ql_outlier_set *os, ql_weights *w, ql_act_plan **out,
                             config_result *r, ql_error *err)
{
    *out = NULL;
    if (c->act_mode == QL_ACT_F32 && !os)
        return QL_OK; /* nothing to round: no transform, no cost */
    int32_t *types = malloc((size_t)w->n_lin * sizeof *types);
    r->acts = calloc((size_t)w->n_lin, sizeof *r->acts);
    r->act_names = calloc((size_t)w->n_lin, sizeof *r->act_names);
    r->act_notes = calloc((size_t)w->n_lin, sizeof *r->act_notes);
    if (!types || !r->acts || !r->act_names || !r->act_notes) {
        free(types);
        return ql_error_set(err, QL_ENOMEM, "out of memory for activation roundings");
    }
    ql_act_site_types(w, plan, types);
    ql_status st = ql_act_plan_build(out, w, c->act_mode, types, r->site_q, os, err);
    free(types);
    if (st)
        return st;
    ql_act_plan_install(*out, w);
    for (int site = 0; site < w->n_lin; site++) {
        const ql_act_choice *ch = ql_act_plan_choice(*out, site);
        int64_t kept = os ? os->site[site].n : -1;
        if (ch->requested == QL_ACTQ_F32 && kept <= 0)
            continue;
        size_t k = r->n_acts++;
        ql_store_act_rounding *a = &r->acts[k];
        ql_strlcpy(r->act_names[k], w->lin[site].name, sizeof r->act_names[k]);
        ql_strlcpy(r->act_notes[k], ch->note, sizeof r->act_notes[k]);
        a->tensor = r->act_names[k];
        a->requested = ql_actq_name(ch->requested);
        a->used = ql_actq_name(ch->used);
        a->note = ch->used != ch->requested ? r->act_notes[k] : NULL;
        a->kept_channels = kept;
    }
    return QL_OK;
}

static int32_t kv_ggml_type(ql_kv_type kv)
{
    switch (kv) {
    case QL_KV_F16: return QL_TYPE_F16;
    case QL_KV_Q8_0: return QL_TYPE_Q8_0;
    case QL_KV_Q4_0: return QL_TYPE_Q4_0;
    default: return QL_TYPE_F32;
    }
}

/* Runs the quantized forward pass over every chunk and compares with the reference. */
static ql_status run_chunks(sweep_ctx *s, const ql_weights *w, const char *label,
                            config_result *r, ql_error *err)
{
    const ql_ppl_data *d = &s->data;
    ql_dist_acc_reset(s->acc);
    ql_progress p;
    ql_progress_begin(&p, label, "tok", ql_ppl_n_scored_total(d), s->opts->quiet);
    double t0 = ql_now();
    for (int64_t c = 0; c < d->n_chunks; c++) {
        ql_status st = ql_ppl_run_chunk(s->fw, w, d, c, s->logits, err);
        if (!st)
            st = ql_dist_acc_add(s->acc, ql_reference_chunk(s->ref, c), s->logits,
                                 ql_ppl_chunk_targets(d, c), d->n_scored, err);
        if (st)
            return ql_error_prefix(err, "chunk %lld: ", (long long)c);
        ql_progress_update(&p, (c + 1) * d->n_scored, s->eta_note[0] ? s->eta_note : NULL);
    }
    r->timing.quant_seconds = ql_now() - t0;
    ql_progress_end(&p, ql_ppl_n_scored_total(d), NULL);

    ql_dist_metrics dm;
    ql_dist_acc_finish(s->acc, &dm);
    r->m.ppl = dm.ppl;
    r->m.ppl_err = dm.ppl_err;
    r->m.ppl_ref = dm.ppl_ref;
    r->m.ppl_ref_err = dm.ppl_ref_err;
    r->m.ln_ppl_ratio = dm.ln_ppl_ratio;
    r->m.ln_ppl_ratio_err = dm.ln_ppl_ratio_err;
    r->m.kld_mean = dm.kld_mean;
    r->m.kld_mean_err = dm.kld_mean_err;
    r->m.kld_median = dm.kld_median;
    r->m.kld_p90 = dm.kld_p90;
    r->m.kld_p99 = dm.kld_p99;
    r->m.kld_p999 = dm.kld_p999;
    r->m.kld_max = dm.kld_max;
    r->m.dp_mean = dm.dp_mean;
    r->m.dp_rms = dm.dp_rms;
    r->m.dp_min = dm.dp_min;
    r->m.dp_max = dm.dp_max;
    r->m.max_abs_prob_err = dm.max_abs_prob_err;
    r->m.top1_agree = dm.top1_agree;
    r->m.n_tokens = (double)dm.n_tokens;

    r->chunks = calloc((size_t)d->n_chunks, sizeof *r->chunks);
    if (!r->chunks)
        return ql_error_set(err, QL_ENOMEM, "out of memory for per-chunk metrics");
    for (int64_t c = 0; c < d->n_chunks; c++) {
        ql_store_chunk_metrics *cm = &r->chunks[c];
        cm->chunk = (int32_t)c;
        cm->n_tokens = d->n_scored;
        ql_dist_acc_range(s->acc, c * d->n_scored, (c + 1) * d->n_scored, &cm->kld_sum,
                          &cm->nll_sum, &cm->nll_ref_sum, &cm->top1_count);
    }
    return QL_OK;
}

/* Candidate types of a budget config: the solver's default ladder up to the
 * precision of weight_type (its bits per weight), so `weight_type` caps what a
 * fitted model may spend on one tensor; F16 stays as the fallback of tensors whose
 * rows fit no block type (as in the type policy). */
static void fit_candidates(int32_t cap, char *buf, size_t size)
{
    char ladder[512];
    ql_strlcpy(ladder, ql_fit_default_types(), sizeof ladder);
    size_t used = 0;
    buf[0] = '\0';
    char *save = NULL;
    for (char *tok = strtok_r(ladder, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        const ql_type_traits *t = ql_type_by_name(tok);
        if (!t || (ql_type_bpw(t->type) > ql_type_bpw(cap) && t->type != QL_TYPE_F16) ||
            strstr(buf, tok))
            continue;
        int k = snprintf(buf + used, size - used, "%s%s", used ? "," : "", t->name);
        if (k < 0 || (size_t)k >= size - used)
            break;
        used += (size_t)k;
    }
}

/* Replaces the policy's types by the ones the exact-fit solver chose for a budget,
 * and recomputes the plan's byte totals. */
static ql_status apply_budget(sweep_ctx *s, const ql_config *c, const ql_calib_slot *slot,
                              ql_quant_plan *plan, ql_error *err)
{
    if (c->head_type != QL_TYPE_SAME || c->embd_type != QL_TYPE_SAME)
        return ql_error_set(err, QL_EINVAL,
                            "a budget config lets the solver choose the head and embedding "
                            "types too; use head_type = same and embd_type = same");
    ql_fit_imatrix *fim = NULL;
    ql_status st = QL_OK;
    if (slot && (st = ql_fit_imatrix_wrap(ql_calib_slot_imatrix(slot), ql_calib_slot_sha256(slot),
                                          &fim, err)))
        return st;
    ql_fit_budget b = {c->budget_kind == QL_BUDGET_BPW ? QL_FIT_BUDGET_BPW : QL_FIT_BUDGET_BYTES,
                       (uint64_t)c->budget_bytes, c->budget_bpw};
    char types[512];
    fit_candidates(c->weight_type, types, sizeof types);
    ql_fit_options fo;
    ql_fit_options_init(&fo);
    fo.types = types;
    fo.cache_dir = s->cache_dir;
    fo.quiet = s->opts->quiet;
    ql_fit_table *table = NULL;
    ql_fit_plan *fp = NULL;
    st = ql_fit_plan_model(s->model->gguf, s->model_sha, fim ? ql_fit_imatrix_importance(fim) : NULL,
                           &b, &fo, &table, &fp, err);
    if (st)
        goto out;
    plan->bytes = plan->body_bytes = 0;
    plan->n_fallback = 0;
    for (int64_t i = 0; i < plan->n; i++) {
        ql_quant_plan_entry *e = &plan->entries[i];
        int32_t t = ql_fit_plan_type(fp, e->name);
        if (t != QL_TYPE_INVALID && (e->role == QL_ROLE_WEIGHT || e->role == QL_ROLE_HEAD ||
                                     e->role == QL_ROLE_EMBD)) {
            e->requested = e->used = t;
            e->fallback = QL_FALLBACK_NONE;
            e->reason[0] = '\0';
            e->bytes = ql_row_size(t, e->n_per_row) * (uint64_t)e->nrows;
        }
        plan->bytes += e->bytes;
        if (e->role != QL_ROLE_HEAD && e->role != QL_ROLE_EMBD)
            plan->body_bytes += e->bytes;
        plan->n_fallback += e->used != e->requested;
    }
out:
    ql_fit_plan_free(fp);
    ql_fit_table_free(table);
    ql_fit_imatrix_free(fim);
    return st;
}

static ql_status evaluate_config(sweep_ctx *s, const ql_config *c, ql_calib_slot *slot,
                                 const char *label, config_result *r, ql_error *err)
{
    double t0 = ql_now();
    ql_store_metrics_init(&r->m);
    ql_store_timing_init(&r->timing);
    ql_status st;
    const ql_imatrix *im = ql_calib_slot_imatrix(slot);
    ql_quant_config qc = {c->weight_type, c->head_type, c->embd_type};
    ql_quant_plan *plan;
    if ((st = ql_quant_plan_build(s->model->gguf, &qc, &plan, err)))
        return st;
    if (c->budget_kind != QL_BUDGET_NONE && (st = apply_budget(s, c, slot, plan, err))) {
        ql_quant_plan_free(plan);
        return st;
    }
    /* Tensors the importance matrix does not cover cannot take the types that need
     * one: they fall back as llama-quantize's mixes do (recorded per tensor). */
    bool changed = false;
    for (int64_t i = 0; i < plan->n; i++) {
        ql_quant_plan_entry *e = &plan->entries[i];
        const ql_type_traits *tr = ql_type_get(e->used);
        if (tr && tr->requires_imatrix && !(im && ql_imatrix_find(im, e->name)))
            changed |= ql_quant_plan_no_importance(e);
    }
    if (changed)
        ql_quant_plan_totals(plan);
    const ql_outlier_set *os = NULL;
    if ((st = ql_calib_config_outliers(s->calib, c, slot, &os, err))) {
        ql_quant_plan_free(plan);
        return st;
    }
    s->cache.clock++;
    ql_weights *w = NULL;
    ql_act_plan *ap = NULL;
    double zlib_bytes = (double)NAN;
    st = build_weights(s, plan, im, os, &w, r, &zlib_bytes, err);
    if (!st)
        st = install_act(c, plan, os, w, &ap, r, err);
    if (!st)
        st = ql_forward_set_kv_type(s->fw, kv_ggml_type(ql_config_kv_type(c)), err);
    if (!st)
        st = run_chunks(s, w, label, r, err);
    ql_forward_set_kv_type(s->fw, QL_TYPE_F32, NULL);
    if (!st) {
        /* Sizes: the quantized tensors plus the exact columns of an outlier split. */
        double bytes = (double)(plan->bytes + r->outlier_bytes);
        double body = (double)(plan->body_bytes + r->outlier_bytes_body);
        r->m.bytes = bytes;
        r->m.params = (double)plan->params;
        r->m.bpw = 8.0 * bytes / (double)plan->params;
        r->m.bytes_body = body;
        r->m.params_body = (double)plan->body_params;
        r->m.bpw_body =
            plan->body_params > 0 ? 8.0 * body / (double)plan->body_params : (double)NAN;
        ql_error gerr;
        r->m.gguf_bytes = plan_gguf_bytes(s->model->gguf, plan, &gerr);
        r->m.zlib_bytes = zlib_bytes;
        r->timing.ref_seconds = ql_reference_seconds(s->ref);
        r->timing.seconds = ql_now() - t0;
    }
    ql_weights_free(w);
    ql_act_plan_free(ap);
    ql_quant_plan_free(plan);
    qcache_trim(&s->cache, s->cache.clock);
    return st;
}

/* ------------------------------------------------------------------------- */
/* Sweep set-up                                                               */

static ql_status open_inputs(sweep_ctx *s, ql_error *err)
{
    const ql_sweep *sw = s->sw;
    const ql_data_entry *me = NULL, *te = NULL;
    ql_status st;
    if (ql_synth_is_spec(sw->model))
        st = ql_synth_materialize(sw->model, s->cache_dir, s->model_path, sizeof s->model_path,
                                  err);
    else
        st = ql_data_resolve(sw->model, s->model_path, sizeof s->model_path, &me, err);
    if (st)
        return ql_error_prefix(err, "%s: model: ", sw->path);
    if (me)
        ql_strlcpy(s->model_sha, me->sha256, sizeof s->model_sha);
    else if ((st = ql_sha256_file(s->model_path, s->model_sha, err)))
        return st;
    if ((st = ql_data_resolve(sw->text, s->text_path, sizeof s->text_path, &te, err)))
        return ql_error_prefix(err, "%s: text: ", sw->path);
    if ((st = ql_model_load(&s->model, s->model_path, err)))
        return st;
    if ((st = ql_tokenizer_from_gguf(&s->tok, s->model->gguf, err)))
        return st;
    char *text;
    size_t len;
    if ((st = ql_file_read_all(s->text_path, &text, &len, err)))
        return st;
    s->text_bytes = (int64_t)len;
    if (te)
        ql_strlcpy(s->text_sha, te->sha256, sizeof s->text_sha);
    else
        ql_sha256_hex(text, len, s->text_sha);
    st = ql_ppl_data_from_text(&s->data, s->tok, text, len, sw->ctx, sw->chunks, err);
    free(text);
    if (st)
        return ql_error_prefix(err, "%s: ", s->text_path);
    return ql_forward_alloc(&s->fw, &s->model->hp, sw->ctx, err);
}

static ql_status open_store(sweep_ctx *s, ql_error *err)
{
    char dir[QL_PATH_MAX];
    ql_strlcpy(dir, s->db_path, sizeof dir);
    ql_status st = ql_make_dirs(dirname(dir), err);
    if (st)
        return st;
    if ((st = ql_store_open(s->db_path, NULL, &s->store, err)))
        return st;
    const ql_hparams *hp = &s->model->hp;
    ql_store_model m;
    ql_store_model_init(&m);
    m.sha256 = s->model_sha;
    m.path = s->model_path;
    m.name = s->sw->model;
    m.arch = hp->arch_name;
    m.file_bytes = (int64_t)s->model->gguf->file_size;
    m.params = s->model->n_params;
    m.n_layer = hp->n_layer;
    m.n_embd = hp->n_embd;
    m.n_ff = hp->n_ff;
    m.n_head = hp->n_head;
    m.n_head_kv = hp->n_head_kv;
    m.n_vocab = hp->n_vocab;
    m.n_ctx_train = hp->n_ctx_train;
    if ((st = ql_store_upsert_model(s->store, &m, &s->model_id, err)))
        return st;
    ql_store_dataset d;
    ql_store_dataset_init(&d);
    d.sha256 = s->text_sha;
    d.name = s->sw->text;
    d.path = s->text_path;
    d.bytes = s->text_bytes;
    d.tokens = s->data.n_tokens;
    d.tokens_model = s->model_id;
    return ql_store_upsert_dataset(s->store, &d, &s->dataset_id, err);
}

static void sweep_ctx_deinit(sweep_ctx *s)
{
    qcache_deinit(&s->cache);
    ql_dist_acc_free(s->acc);
    free(s->logits);
    free(s->imat_buf);
    free(s->metric_buf);
    ql_reference_free(s->ref);
    ql_forward_free(s->fw);
    ql_ppl_data_deinit(&s->data);
    ql_calib_free(s->calib);
    ql_tokenizer_free(s->tok);
    ql_model_free(s->model);
    ql_store_close(s->store);
}

/* ------------------------------------------------------------------------- */
/* The summary printed at the end                                            */

typedef struct {
    size_t index;
    char label[160];
    const char *status;
    double bpw, ppl, dppl, kld, top1;
} summary_row;

static void print_summary(const summary_row *rows, size_t n, const ql_run_summary *sum,
                          const sweep_ctx *s)
{
    static const ql_table_column cols[] = {
        {"#", NULL, true},       {"config", NULL, false},   {"status", NULL, false},
        {"bpw", NULL, true},     {"PPL", NULL, true},       {"ΔPPL", NULL, true},
        {"KLD mean", NULL, true}, {"top-1 %", NULL, true},
    };
    ql_table *t = ql_table_alloc(cols, sizeof cols / sizeof cols[0]);
    if (!t)
        return;
    ql_error err;
    for (size_t i = 0; i < n; i++) {
        const summary_row *r = &rows[i];
        ql_table_row(t, &err);
        ql_table_putf(t, &err, "%zu", r->index);
        ql_table_put(t, r->label, &err);
        ql_table_put(t, r->status, &err);
        if (isnan(r->bpw)) {
            for (int k = 0; k < 5; k++)
                ql_table_put(t, NULL, &err);
            continue;
        }
        ql_table_putf(t, &err, "%.3f", r->bpw);
        ql_table_putf(t, &err, "%.4f", r->ppl);
        ql_table_putf(t, &err, "%+.4f", r->dppl);
        ql_table_putf(t, &err, "%.3e", r->kld);
        ql_table_putf(t, &err, "%.2f", 100.0 * r->top1);
    }
    printf("\n");
    ql_table_write_md(t, stdout, "—");
    ql_table_free(t);
    char ref[32], cfg[32];
    ql_format_duration(sum->ref_seconds, ref, sizeof ref);
    ql_format_duration(sum->configs_seconds, cfg, sizeof cfg);
    printf("\nsweep %s: %zu configs (%zu run, %zu already done, %zu failed), %lld scored tokens "
           "per pass\n",
           s->sw->name, sum->n_configs, sum->n_run, sum->n_skipped, sum->n_failed,
           (long long)sum->scored_tokens);
    double per_pass = sum->n_run ? sum->forward_seconds / (double)sum->n_run : (double)NAN;
    if (s->ref && !ql_reference_from_cache(s->ref))
        printf("timing: reference pass %s; %zu quantized passes %s (forward %.1f s each, %.2f "
               "reference passes each): %zu configs cost %.1f reference passes\n",
               ref, sum->n_run, cfg, per_pass, per_pass / sum->ref_seconds, sum->n_run,
               (sum->ref_seconds + sum->configs_seconds) / sum->ref_seconds);
    else if (sum->n_run)
        printf("timing: reference %s; %zu quantized passes %s (forward %.1f s each)\n",
               s->ref ? "loaded from cache" : "not needed", sum->n_run, cfg, per_pass);
    else
        printf("timing: nothing to run (every config was done before)\n");
    printf("results: %s\n", s->db_path);
}

/* Fills a summary row of a run found done in the store from its stored metrics. */
static void stored_row(ql_store *store, int64_t run_id, summary_row *row)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(ql_store_handle(store),
                           "SELECT bpw, ppl, ppl - ppl_ref, kld_mean, top1_agree FROM metrics "
                           "WHERE run_id = ?1",
                           -1, &st, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_int64(st, 1, run_id);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        row->bpw = sqlite3_column_double(st, 0);
        row->ppl = sqlite3_column_double(st, 1);
        row->dppl = sqlite3_column_double(st, 2);
        row->kld = sqlite3_column_double(st, 3);
        row->top1 = sqlite3_column_double(st, 4);
    }
    sqlite3_finalize(st);
}

/* Short label of a config: the axes that vary in the sweep. */
static void config_label(const ql_sweep *sw, const ql_config *c, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        if (a != QL_AXIS_WEIGHT_TYPE && sw->n_values[a] <= 1)
            continue;
        char v[QL_CONFIG_IMATRIX_MAX + 64];
        ql_config_axis_string(c, (ql_axis)a, v, sizeof v);
        int k = snprintf(buf + used, size - used, "%s%s%s", used ? " " : "",
                         a == QL_AXIS_WEIGHT_TYPE ? "" : ql_axis_name((ql_axis)a),
                         a == QL_AXIS_WEIGHT_TYPE ? v : "");
        if (k < 0 || (size_t)k >= size - used)
            break;
        used += (size_t)k;
        if (a != QL_AXIS_WEIGHT_TYPE) {
            k = snprintf(buf + used, size - used, "=%s", v);
            if (k < 0 || (size_t)k >= size - used)
                break;
            used += (size_t)k;
        }
    }
}

/* ------------------------------------------------------------------------- */

ql_status ql_sweep_execute(const ql_sweep *sw, const ql_run_opts *opts, ql_run_summary *sum,
                           ql_error *err)
{
    memset(sum, 0, sizeof *sum);
    sweep_ctx s;
    memset(&s, 0, sizeof s);
    s.sw = sw;
    s.opts = opts;
    ql_strlcpy(s.db_path, opts->db_path ? opts->db_path : "results/qlab.db", sizeof s.db_path);
    if (opts->cache_dir) {
        ql_strlcpy(s.cache_dir, opts->cache_dir, sizeof s.cache_dir);
    } else {
        char dir[QL_PATH_MAX];
        ql_strlcpy(dir, s.db_path, sizeof dir);
        snprintf(s.cache_dir, sizeof s.cache_dir, "%s/cache", dirname(dir));
    }
    s.cache.max_bytes = opts->cache_bytes ? opts->cache_bytes : DEFAULT_CACHE_BYTES;
    const char *kill = getenv("QLAB_FAULT_KILL_AFTER_RUNS");
    if (kill && !ql_parse_int(kill, &s.kill_after))
        s.kill_after = 0;
    ql_threads_set(opts->threads > 0 ? opts->threads : sw->threads);

    ql_status st = open_inputs(&s, err);
    if (!st) {
        ql_calib_source cs = {s.model, s.tok, s.model_sha, s.cache_dir, sw->ctx, opts->quiet};
        st = ql_calib_alloc(&s.calib, &cs, err);
    }
    if (!st)
        st = ql_calib_pick_metric_imatrix(s.calib, sw, &s.metric_imatrix, err);
    if (!st)
        st = open_store(&s, err);
    if (st)
        goto out;
    const ql_hparams *hp = &s.model->hp;
    int64_t n_scored = ql_ppl_n_scored_total(&s.data);
    sum->scored_tokens = n_scored;
    s.max_row = hp->n_ff > hp->n_embd ? hp->n_ff : hp->n_embd;
    if (hp->n_vocab > s.max_row)
        s.max_row = hp->n_vocab;
    s.logits = malloc((size_t)s.data.n_scored * (size_t)hp->n_vocab * sizeof(float));
    s.imat_buf = malloc((size_t)s.max_row * sizeof(float));
    s.metric_buf = malloc((size_t)s.max_row * sizeof(float));
    if (!s.logits || !s.imat_buf || !s.metric_buf) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory for the sweep buffers");
        goto out;
    }
    if ((st = ql_dist_acc_alloc(&s.acc, n_scored, hp->n_vocab, err)))
        goto out;

    /* Which configs still need work: decided before the reference is computed, so
     * a finished sweep costs nothing. */
    size_t n_todo = 0;
    for (size_t i = 0; i < sw->n_points; i++) {
        if (!ql_shard_keeps(&opts->shard, i))
            continue;
        sum->n_configs++;
        int64_t done = 0;
        st = ql_store_find_done(s.store, sw->points[i].hash, s.model_sha, s.text_sha, sw->ctx,
                                (int)s.data.n_chunks, QL_METRICS_VERSION, &done, err);
        if (st)
            goto out;
        n_todo += done == 0;
    }
    if (!opts->quiet)
        fprintf(stderr,
                "sweep %s: %zu configs%s, %zu to run; model %s (%lld params), text %s: %lld "
                "chunks of %d tokens, %lld scored\n",
                sw->name, sum->n_configs, opts->shard.count > 1 ? " in this shard" : "", n_todo,
                sw->model, (long long)s.model->n_params, sw->text, (long long)s.data.n_chunks,
                sw->ctx, (long long)n_scored);
    if (n_todo > 0) {
        ql_reference_opts ro = {s.model_sha, s.text_sha, s.cache_dir, opts->quiet};
        if ((st = ql_reference_get(&s.ref, s.fw, s.model->weights, &s.data, &ro, err)))
            goto out;
        sum->ref_seconds = ql_reference_seconds(s.ref);
    }

    summary_row *rows = calloc(sum->n_configs ? sum->n_configs : 1, sizeof *rows);
    if (!rows) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory for the summary");
        goto out;
    }
    size_t n_rows = 0, k = 0;
    double t_configs = ql_now();
    for (size_t i = 0; i < sw->n_points && !st; i++) {
        if (!ql_shard_keeps(&opts->shard, i))
            continue;
        k++;
        const ql_sweep_point *pt = &sw->points[i];
        summary_row *row = &rows[n_rows++];
        row->index = i;
        config_label(sw, &pt->config, row->label, sizeof row->label);
        row->bpw = (double)NAN;
        int64_t done = 0;
        st = ql_store_find_done(s.store, pt->hash, s.model_sha, s.text_sha, sw->ctx,
                                (int)s.data.n_chunks, QL_METRICS_VERSION, &done, err);
        if (st)
            break;
        if (done) {
            sum->n_skipped++;
            row->status = "done before";
            stored_row(s.store, done, row);
            st = ql_store_add_to_sweep(s.store, sw->name, done, err);
            continue;
        }
        int64_t config_id, run_id;
        if ((st = ql_store_upsert_config(s.store, &pt->config, &config_id, err)))
            break;
        /* The importance matrix is loaded before the run begins so that the run
         * records which one it used; failing to load it fails the run. */
        ql_error cerr;
        ql_error_clear(&cerr);
        ql_calib_slot *slot = NULL;
        ql_status cst = ql_calib_config_imatrix(s.calib, &pt->config, &slot, &cerr);
        ql_store_run_key key = {config_id, s.model_id, s.dataset_id, sw->ctx,
                                (int)s.data.n_chunks};
        ql_store_run_info info = {sw->name, ql_threads_get(), QL_METRICS_VERSION,
                                  ql_calib_slot_sha256(slot)};
        if ((st = ql_store_begin_run(s.store, &key, &info, &run_id, err)))
            break;
        if (s.kill_after > 0 && ++s.begun > s.kill_after)
            raise(SIGKILL); /* fault injection for the resume test: dies mid-sweep */

        char label[256];
        snprintf(label, sizeof label, "config %zu/%zu %s", k, sum->n_configs, row->label);
        /* The whole sweep's ETA from the configs evaluated so far. */
        size_t evaluated = sum->n_run + sum->n_failed;
        s.eta_note[0] = '\0';
        if (evaluated > 0 && n_todo > evaluated) {
            char eta[32];
            ql_format_duration((ql_now() - t_configs) / (double)evaluated *
                                   (double)(n_todo - evaluated),
                               eta, sizeof eta);
            snprintf(s.eta_note, sizeof s.eta_note, "sweep ETA %s", eta);
        }
        config_result r;
        memset(&r, 0, sizeof r);
        double t0 = ql_now();
        if (!cst)
            cst = evaluate_config(&s, &pt->config, slot, label, &r, &cerr);
        if (cst) {
            sum->n_failed++;
            row->status = "failed";
            fprintf(stderr, "qlab: config %zu (%s) failed: %s\n", i, row->label, cerr.msg);
            st = ql_store_fail_run(s.store, run_id, cerr.msg, ql_now() - t0, err);
        } else {
            ql_store_run_result res = {&r.m,  r.te,   r.n_te,          r.chunks,
                                       (size_t)s.data.n_chunks, &r.timing, r.acts, r.n_acts};
            st = ql_store_finish_run_result(s.store, run_id, &res, err);
            sum->n_run++;
            sum->forward_seconds += r.timing.quant_seconds;
            row->status = "ok";
            row->bpw = r.m.bpw;
            row->ppl = r.m.ppl;
            row->dppl = r.m.ppl - r.m.ppl_ref;
            row->kld = r.m.kld_mean;
            row->top1 = r.m.top1_agree;
            if (!opts->quiet)
                fprintf(stderr, "  %s: bpw %.3f, PPL %.4f (ref %.4f), KLD %.3e, top-1 %.2f%%\n",
                        row->label, r.m.bpw, r.m.ppl, r.m.ppl_ref, r.m.kld_mean,
                        100.0 * r.m.top1_agree);
        }
        config_result_deinit(&r);
    }
    sum->configs_seconds = ql_now() - t_configs;
    if (!st)
        print_summary(rows, n_rows, sum, &s);
    free(rows);
out:
    sweep_ctx_deinit(&s);
    return st;
}
