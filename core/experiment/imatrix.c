/* Importance-matrix collection through the forward pass's product observer, and the
 * per-tensor importance table the quantizer reads (imatrix.h). */
#include "experiment/imatrix.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/progress.h"
#include "base/util.h"
#include "model/gguf.h"
#include "model/scheduler.h"
#include "model/tensor_name.h"

bool ql_imatrix_collects(const char *tensor_name, bool process_output)
{
    if (ql_tensor_block(tensor_name, NULL) >= 0)
        return true;
    return process_output && strcmp(tensor_name, "output.weight") == 0;
}

/* ========================================================================= */
/* The collector                                                              */

struct ql_imatrix_collector {
    ql_imatrix *im; /* entries in site order until finish sorts them */
    int n_sites;
    int64_t *entry; /* (n_sites,) entry index of each site, -1 when not collected */
    int64_t *n_in;  /* (n_sites,) input width, 0 for sites that are not collected */
    int *n_mat;     /* (n_sites,) matrices of the weight: its experts, 1 for a 2-D one */
    char (*names)[sizeof(((ql_linear *)0)->name)]; /* (n_sites,) weight of each site */
    ql_status status;                              /* sticky: first non-finite sum */
    char msg[256];
};

/* A fresh imatrix with a zeroed entry per collected weight, in site order. */
static ql_status build_entries(ql_imatrix_collector *c, ql_error *err)
{
    ql_status st = ql_imatrix_alloc(&c->im, err);
    for (int s = 0; s < c->n_sites && !st; s++) {
        c->entry[s] = -1;
        if (c->n_in[s] == 0)
            continue;
        /* A name used by two sites would share an entry; llama.cpp's graphs have none. */
        for (int64_t e = 0; e < c->im->n_entries; e++)
            if (strcmp(c->im->entries[e].name, c->names[s]) == 0)
                c->entry[s] = e;
        if (c->entry[s] >= 0)
            continue;
        /* Stacked experts: one entry of n_in values per expert, as llama-imatrix lays
         * out MUL_MAT_ID weights (expert e's columns at [e * n_in, (e + 1) * n_in)). */
        st = ql_imatrix_add_entry(c->im, c->names[s], c->n_in[s] * c->n_mat[s], c->n_mat[s], false,
                                  NULL, err);
        c->entry[s] = c->im->n_entries - 1;
    }
    if (st) {
        /* Unusable until freed: the observer ignores everything. */
        c->status = st;
        ql_strlcpy(c->msg, "imatrix: the collector could not rebuild its entries (out of memory)",
                   sizeof c->msg);
    }
    return st;
}

ql_status ql_imatrix_collector_alloc(ql_imatrix_collector **out, const ql_weights *w,
                                     bool process_output, ql_error *err)
{
    *out = NULL;
    ql_imatrix_collector *c = calloc(1, sizeof *c);
    if (!c)
        return ql_error_set(err, QL_ENOMEM, "out of memory for an imatrix collector");
    c->n_sites = w->n_lin;
    c->entry = malloc((size_t)w->n_lin * sizeof *c->entry);
    c->n_in = calloc((size_t)w->n_lin, sizeof *c->n_in);
    c->n_mat = calloc((size_t)w->n_lin, sizeof *c->n_mat);
    c->names = calloc((size_t)w->n_lin, sizeof *c->names);
    if (!c->entry || !c->n_in || !c->n_mat || !c->names) {
        ql_imatrix_collector_free(c);
        return ql_error_set(err, QL_ENOMEM, "out of memory for an imatrix collector");
    }
    for (int s = 0; s < w->n_lin; s++) {
        const ql_linear *lin = &w->lin[s];
        ql_strlcpy(c->names[s], lin->name, sizeof c->names[s]);
        /* A tied head reads token_embd.weight: filtered out like in llama-imatrix. */
        if (ql_imatrix_collects(lin->name, process_output))
            c->n_in[s] = lin->n_in;
        c->n_mat[s] = lin->n_expert > 1 ? lin->n_expert : 1;
    }
    ql_status st = build_entries(c, err);
    if (st) {
        ql_imatrix_collector_free(c);
        return st;
    }
    *out = c;
    return QL_OK;
}

void ql_imatrix_collector_free(ql_imatrix_collector *c)
{
    if (!c)
        return;
    ql_imatrix_free(c->im);
    free(c->entry);
    free(c->n_in);
    free(c->n_mat);
    free(c->names);
    free(c);
}

/* sums[j] += x[t][j]^2 for t = 0..n_tok-1 in order. The square is rounded to f32
 * before the addition, as llama-imatrix computes it. */
static void add_squares(float *sums, const float *x, int64_t n_tok, int64_t n_in)
{
    for (int64_t t = 0; t < n_tok; t++) {
        const float *row = x + t * n_in;
        for (int64_t j = 0; j < n_in; j++) {
            const float sq = row[j] * row[j];
            sums[j] += sq;
        }
    }
}

void ql_imatrix_collector_observe(void *collector, int site, const ql_linear *lin, const float *x,
                                  int64_t n_tok)
{
    ql_imatrix_collector *c = collector;
    if (c->status != QL_OK || site < 0 || site >= c->n_sites || c->entry[site] < 0)
        return;
    /* The site index belongs to the weight set the collector was made for. */
    QL_ASSERT(strcmp(c->names[site], lin->name) == 0);
    ql_imatrix_entry *e = &c->im->entries[c->entry[site]];
    /* An expert's product is observed through its view: its own slice and count (the
     * tokens routed to it). */
    const int64_t mat = c->n_mat[site] > 1 ? lin->expert : 0;
    QL_ASSERT(mat >= 0 && mat < e->n_mat && e->n_values == lin->n_in * e->n_mat);
    /* One thread: the additions vectorize over columns and cost a few percent of the
     * product they observe, while an OpenMP team here would spin between products and
     * take CPU from OpenBLAS's threads (measured: twice the CPU time of the pass). */
    const int64_t n_in = lin->n_in;
    float *sums = e->sums + mat * n_in;
    add_squares(sums, x, n_tok, n_in);
    e->counts[mat] += n_tok;
    for (int64_t j = 0; j < n_in; j++)
        if (!isfinite(sums[j])) {
            c->status = QL_EFORMAT;
            snprintf(c->msg, sizeof c->msg,
                     "imatrix: tensor '%s': the sum of x^2 of column %lld became %s after %lld "
                     "tokens",
                     lin->name, (long long)j, isnan(e->sums[j]) ? "NaN" : "infinite",
                     (long long)e->counts[0]);
            return;
        }
}

ql_status ql_imatrix_collector_status(const ql_imatrix_collector *c, ql_error *err)
{
    if (c->status)
        return ql_error_set(err, c->status, "%s", c->msg);
    return QL_OK;
}

ql_status ql_imatrix_collector_finish(ql_imatrix_collector *c, int64_t chunk_size,
                                      int64_t chunk_count, const char *dataset, ql_imatrix **out,
                                      ql_error *err)
{
    *out = NULL;
    ql_status st = ql_imatrix_collector_status(c, err);
    if (st)
        return st;
    if (chunk_size < 1)
        return ql_error_set(err, QL_EINVAL, "imatrix: chunk size %lld, expected >= 1",
                            (long long)chunk_size);
    ql_imatrix *im = c->im;
    int64_t seen = 0;
    for (int64_t i = 0; i < im->n_entries; i++)
        for (int64_t m = 0; m < im->entries[i].n_mat; m++)
            seen += im->entries[i].counts[m] > 0;
    if (seen == 0)
        return ql_error_set(err, QL_EINVAL,
                            "imatrix: no product was observed (nothing was run, or the model has "
                            "no blk.* weights)");
    /* Hand the statistics over and start afresh for another pass. */
    c->im = NULL;
    if ((st = build_entries(c, err))) {
        ql_imatrix_free(im);
        return st;
    }
    /* Entries that saw nothing are dropped, as llama-imatrix skips them on save. */
    ql_imatrix_drop_empty(im);
    im->chunk_size = chunk_size;
    im->chunk_count = chunk_count;
    if (dataset && (st = ql_imatrix_add_dataset(im, dataset, err))) {
        ql_imatrix_free(im);
        return st;
    }
    ql_imatrix_sort(im);
    *out = im;
    return QL_OK;
}

/* ========================================================================= */
/* A calibration pass                                                         */

typedef struct {
    const ql_ppl_data *d;
    int64_t n_vocab;
    ql_imatrix_collector *c;
    ql_nll_acc acc;
    ql_progress progress;
    int64_t chunks_done;
} collect_ctx;

/* After each chunk: the collector's state (a non-finite sum stops the pass) and the
 * NLL of the scored positions, for the PPL llama-imatrix prints. */
static ql_status collect_output(void *ctx, int set, int64_t chunk, const float *hidden,
                                const float *logits, int64_t n_rows, ql_error *err)
{
    (void)set, (void)hidden, (void)n_rows;
    collect_ctx *x = ctx;
    ql_status st = ql_imatrix_collector_status(x->c, err);
    if (st)
        return ql_error_prefix(err, "chunk %lld: ", (long long)chunk);
    const int32_t *targets = ql_ppl_chunk_targets(x->d, chunk);
    for (int k = 0; k < x->d->n_scored; k++)
        ql_nll_acc_add(&x->acc, ql_nll(logits + (int64_t)(x->d->first + k) * x->n_vocab, x->n_vocab,
                                       targets[k]));
    x->chunks_done++;
    return QL_OK;
}

static void collect_progress(void *ctx, double tokens_done)
{
    collect_ctx *x = ctx;
    char note[48] = "";
    if (x->acc.n > 0)
        snprintf(note, sizeof note, "PPL %.4f", ql_nll_acc_ppl(&x->acc));
    ql_progress_update(&x->progress, (int64_t)tokens_done, note[0] ? note : NULL);
}

ql_status ql_imatrix_collect(ql_forward *fw, const ql_weights *w, const ql_ppl_data *d,
                             const ql_imatrix_opts *opts, ql_imatrix **out,
                             ql_imatrix_summary *summary, ql_error *err)
{
    *out = NULL;
    if (summary)
        memset(summary, 0, sizeof *summary);
    const ql_hparams *hp = ql_forward_hparams(fw);
    if (d->ctx > ql_forward_max_ctx(fw))
        return ql_error_set(err, QL_EINVAL,
                            "imatrix: chunks of %d tokens, the forward pass holds %d", d->ctx,
                            ql_forward_max_ctx(fw));
    if (d->n_chunks < 1)
        return ql_error_set(err, QL_EINVAL, "imatrix: no whole chunk of %d tokens in the text",
                            d->ctx);
    double t0 = ql_now();
    collect_ctx x = {.d = d, .n_vocab = hp->n_vocab};
    ql_sched *sched = NULL;
    ql_status st = ql_imatrix_collector_alloc(&x.c, w, opts->process_output, err);
    if (!st)
        st = ql_sched_alloc(&sched, err);
    ql_observer_chain chain;
    ql_observer_chain_init(&chain);
    if (!st && !(st = ql_observer_chain_add(&chain, ql_imatrix_collector_observe, x.c, err)))
        st = ql_observer_chain_add(&chain, opts->also, opts->also_ctx, err);
    if (st)
        goto out;
    /* The K/V rounding the caller installed on fw is the pass's. */
    ql_attn_rounding kv;
    ql_forward_get_attn_rounding(fw, &kv);
    /* Every position runs through every layer, as llama-imatrix (which asks for all
     * logits) evaluates its chunks. The weights are bound layer by layer for the pass. */
    ql_sched_job job = {.data = d,
                        .n_chunks = d->n_chunks,
                        .all_rows = true,
                        .group = opts->group > 0 ? opts->group : 1,
                        .n_sets = 1,
                        .on_output = collect_output,
                        .progress = collect_progress,
                        .ctx = &x};
    job.sets[0] = (ql_sched_set){.w = (ql_weights *)w,
                                 .rounding = &kv,
                                 .observer = ql_observer_chain_observe,
                                 .observer_ctx = &chain,
                                 .head = true};
    ql_progress_begin(&x.progress, "imatrix", "tok", d->n_chunks * d->ctx, opts->quiet);
    if ((st = ql_sched_run(sched, fw, &job, err)))
        goto out;
    ql_progress_end(&x.progress, d->n_chunks * d->ctx, NULL);
    if ((st = ql_imatrix_collector_finish(x.c, d->ctx, d->n_chunks, opts->dataset, out, err)))
        goto out;
    if (summary) {
        summary->n_chunks = d->n_chunks;
        summary->n_tokens = d->n_chunks * d->ctx;
        summary->n_entries = (*out)->n_entries;
        summary->ppl = x.acc.n > 0 ? ql_nll_acc_ppl(&x.acc) : (double)NAN;
        summary->seconds = ql_now() - t0;
    }
out:
    ql_sched_free(sched);
    ql_imatrix_collector_free(x.c);
    return st;
}

/* ========================================================================= */
/* The importance table for the quantizer                                     */

typedef struct {
    char *name; /* the tensor's name (owned) */
    int64_t n;  /* ne[0] x matrices */
    float *weights;
} table_row;

struct ql_imatrix_table {
    table_row *rows;
    int64_t n_rows;
    const char *skipped;
    char skipped_name[QL_IMATRIX_NAME_MAX + 1];
};

ql_status ql_imatrix_table_alloc(ql_imatrix_table **out, const ql_imatrix *im, const ql_gguf *model,
                                 ql_error *err)
{
    *out = NULL;
    ql_imatrix_table *t = calloc(1, sizeof *t);
    if (!t)
        return ql_error_set(err, QL_ENOMEM, "out of memory for an importance table");
    t->rows = calloc((size_t)(model->n_tensors > 0 ? model->n_tensors : 1), sizeof *t->rows);
    ql_status st = QL_OK;
    if (!t->rows) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory for an importance table");
        goto fail;
    }
    const char *src = im->path ? im->path : "imatrix";
    for (int64_t i = 0; i < model->n_tensors; i++) {
        const ql_gguf_tensor *gt = &model->tensors[i];
        const ql_imatrix_entry *e = ql_imatrix_find(im, gt->name);
        if (!e)
            continue;
        const int64_t n = gt->ne[0] * gt->ne[2] * gt->ne[3];
        if (e->n_values != n) {
            if (strcmp(gt->name, "token_embd.weight") == 0) {
                /* llama-quantize tolerates this one mismatch and quantizes without. */
                ql_strlcpy(t->skipped_name, gt->name, sizeof t->skipped_name);
                t->skipped = t->skipped_name;
                continue;
            }
            st = ql_error_set(err, QL_EFORMAT,
                              "%s: entry '%s' has %lld values, but tensor '%s' of %s needs %lld "
                              "(ne[0] %lld x %lld matrices); an imatrix of another model?",
                              src, e->name, (long long)e->n_values, gt->name, model->path,
                              (long long)n, (long long)gt->ne[0],
                              (long long)(gt->ne[2] * gt->ne[3]));
            goto fail;
        }
        table_row *r = &t->rows[t->n_rows];
        r->name = ql_strdup(gt->name);
        r->n = n;
        r->weights = malloc((size_t)n * sizeof *r->weights);
        t->n_rows++;
        if (!r->name || !r->weights) {
            st = ql_error_set(err, QL_ENOMEM, "out of memory for the importance of '%s'", gt->name);
            goto fail;
        }
        if ((st = ql_imatrix_weights(im, gt->name, n, r->weights, err)))
            goto fail;
    }
    *out = t;
    return QL_OK;
fail:
    ql_imatrix_table_free(t);
    return st;
}

void ql_imatrix_table_free(ql_imatrix_table *t)
{
    if (!t)
        return;
    for (int64_t i = 0; i < t->n_rows; i++) {
        free(t->rows[i].name);
        free(t->rows[i].weights);
    }
    free(t->rows);
    free(t);
}

const float *ql_imatrix_table_lookup(void *table, const char *tensor, int64_t n_per_row,
                                     int64_t n_mats)
{
    const ql_imatrix_table *t = table;
    for (int64_t i = 0; i < t->n_rows; i++)
        if (strcmp(t->rows[i].name, tensor) == 0)
            return t->rows[i].n == n_per_row * n_mats ? t->rows[i].weights : NULL;
    return NULL;
}

int64_t ql_imatrix_table_n_matched(const ql_imatrix_table *t)
{
    return t->n_rows;
}

const char *ql_imatrix_table_skipped(const ql_imatrix_table *t)
{
    return t->skipped;
}
