/* The sweep's measured sensitivities (sensitivities.h). */
#include "harness/sensitivities.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/gemm.h"
#include "base/util.h"
#include "experiment/distribution.h"
#include "experiment/reference.h"
#include "experiment/sensitivity.h"
#include "formats/types.h"
#include "harness/mem_plan.h"
#include "model/forward.h"
#include "model/scheduler.h"

typedef struct {
    const ql_sens_source *src;
    const ql_store_sens_key *key;
    ql_grouping grouping;
} store_ctx;

/* The grouping a unit's row is stored under: a unit of one tensor named as the tensor
 * (the head and the embedding in every grouping) is that tensor's row, the same
 * measurement whichever grouping asks for it. */
static const char *row_grouping(const char *name, const char *const *tensors, int n, ql_grouping g)
{
    return n == 1 && strcmp(name, tensors[0]) == 0 ? ql_grouping_name(QL_GROUPING_TENSOR)
                                                   : ql_grouping_name(g);
}

/* Where a unit acts: its kind (as ql_sens_unit names it) and the first block of its
 * tensors. */
static const char *unit_place(const ql_model *m, const ql_sens_item *it, ql_grouping g, int *layer)
{
    const char *kind = NULL;
    char name[256];
    *layer = INT32_MAX;
    for (int k = 0; k < it->n_tensors; k++) {
        int l;
        kind = ql_sens_unit(m, it->tensors[k], g, name, sizeof name, &l);
        if (l < *layer)
            *layer = l;
    }
    return kind;
}

/* Stores a measured item at once (experiment/sensitivity.h's done hook). */
static ql_status store_item(void *ctx, const ql_sens_item *it, ql_error *err)
{
    const store_ctx *sc = ctx;
    const ql_model *m = sc->src->model;
    int layer;
    const char *kind = it->one_expert ? "expert" : unit_place(m, it, sc->grouping, &layer);
    if (it->one_expert)
        unit_place(m, it, sc->grouping, &layer);
    int64_t bytes = 0;
    for (int k = 0; k < it->n_tensors; k++) {
        const ql_linear *lin = ql_weights_find(m->weights, it->tensors[k]);
        const int64_t rows = it->one_expert ? ql_linear_matrix_rows(lin) : lin->n_out;
        bytes += (int64_t)(ql_row_size(it->type, lin->n_in) * (size_t)rows);
    }
    ql_store_sens_row row = {
        .tensor = it->name,
        .n_tensors = it->n_tensors,
        .layer = layer,
        .kind = kind,
        .type = it->type,
        .bytes = bytes,
        .kld_mean = it->kld_mean,
        .kld_mean_err = it->kld_mean_err,
        .ln_ppl_ratio = it->ln_ppl_ratio,
        .ln_ppl_ratio_err = it->ln_ppl_ratio_err,
        .seconds = it->seconds,
        .blas_kernel = ql_gemm_kernel(),
    };
    ql_store_sens_key key = *sc->key;
    key.grouping = it->one_expert
                       ? ql_grouping_name(sc->grouping)
                       : row_grouping(it->name, it->tensors, it->n_tensors, sc->grouping);
    return ql_store_sensitivity_put(sc->src->store, &key, &row, err);
}

/* The calibration text's pass: a forward pass of its ctx, a scheduler and its
 * reference (computed once, then loaded from the cache directory). */
typedef struct {
    ql_forward *fw;
    ql_sched *sched;
    ql_reference *ref;
    int group;
} calib_pass;

static void calib_pass_close(calib_pass *p)
{
    ql_reference_free(p->ref);
    ql_sched_free(p->sched);
    ql_forward_free(p->fw);
}

static ql_status calib_pass_open(const ql_sens_source *src, const char *text_sha,
                                 const ql_ppl_data *d, calib_pass *p, ql_error *err)
{
    memset(p, 0, sizeof *p);
    const ql_hparams *hp = &src->model->hp;
    ql_status st = ql_forward_alloc(&p->fw, hp, d->ctx, err);
    if (!st)
        st = ql_sched_alloc(&p->sched, err);
    if (!st) {
        /* The pass and its reference get half (the measurements the other half). */
        const size_t pass = ql_mem_side(src->mem_bytes);
        const size_t logp = ql_reference_logp_bytes(d, hp->n_vocab);
        p->group = ql_sched_group_for(hp, d->ctx, 1, d->n_chunks, ql_mem_side(pass));
        ql_reference_opts ro = {.model_sha256 = src->model_sha,
                                .text_sha256 = text_sha,
                                .cache_dir = src->cache_dir,
                                .quiet = src->quiet,
                                .group = p->group,
                                .keep_bytes = ql_mem_hold(logp, pass)};
        st = ql_reference_get(&p->ref, p->fw, p->sched, src->model->weights, d, &ro, err);
    }
    if (st)
        calib_pass_close(p);
    return st;
}

/* Measures items on the calibration text d, each stored as it is done. */
static ql_status measure(const ql_sens_source *src, const ql_store_sens_key *key, ql_grouping g,
                         const ql_ppl_data *d, const ql_imatrix *im, ql_sens_item *items, int64_t n,
                         ql_error *err)
{
    const ql_hparams *hp = &src->model->hp;
    calib_pass p;
    ql_status st = calib_pass_open(src, key->text_sha256, d, &p, err);
    if (st)
        return st;
    /* Blocks recomputed, in reference passes: a candidate from block l runs L - l of L. */
    double passes = 0;
    for (int64_t i = 0; i < n; i++) {
        int layer;
        unit_place(src->model, &items[i], g, &layer);
        passes += (double)(hp->n_layer - (layer < 0 ? 0 : layer)) / (double)hp->n_layer;
    }
    if (!src->quiet)
        fprintf(stderr,
                "sensitivity: %lld (%s, type) pairs on %s (%lld chunks of %d): %.1f "
                "reference passes of blocks, one head each\n",
                (long long)n, ql_grouping_name(g), key->text_name, (long long)d->n_chunks, d->ctx,
                passes);
    store_ctx sc = {.src = src, .key = key, .grouping = g};
    ql_sens_job job = {.model = src->model,
                       .ref = p.ref,
                       .fw = p.fw,
                       .d = d,
                       .im = im,
                       .done = store_item,
                       .done_ctx = &sc,
                       .mem_bytes = ql_mem_side(src->mem_bytes), /* the other half: the pass */
                       .quiet = src->quiet};
    st = ql_sens_measure(&job, items, n, err);
    calib_pass_close(&p);
    return st;
}

/* c's calibration text in chunks and its SHA-256, refused when it is the evaluation
 * text. */
static ql_status calib_text(const ql_sens_source *src, const ql_config *c, ql_ppl_data *d,
                            char text_sha[65], ql_error *err)
{
    ql_status st = ql_calib_config_text(src->calib, c, d, text_sha, err);
    if (st)
        return ql_error_prefix(err, "objective kld: ");
    if ((st = ql_sens_check_calib_text(c, text_sha, src->eval_text_sha, err)))
        ql_ppl_data_deinit(d);
    return st;
}

ql_status ql_sens_check_calib_text(const ql_config *c, const char *calib_sha, const char *eval_sha,
                                   ql_error *err)
{
    if (strcmp(calib_sha, eval_sha) != 0)
        return QL_OK;
    return ql_error_set(err, QL_EINVAL,
                        "objective kld: the calibration text calib:%s is the sweep's evaluation "
                        "text; measure sensitivities on another text",
                        c->imatrix);
}

ql_status ql_sens_calib_kld(const ql_sens_source *src, const ql_config *c, ql_weights *w,
                            const ql_attn_rounding *kv, double *out, ql_error *err)
{
    *out = (double)NAN;
    ql_ppl_data d;
    char text_sha[65];
    ql_status st = calib_text(src, c, &d, text_sha, err);
    if (st)
        return st;
    calib_pass p;
    ql_dist_acc *acc = NULL;
    if (!(st = calib_pass_open(src, text_sha, &d, &p, err))) {
        if (!(st = ql_dist_acc_alloc(&acc, ql_ppl_n_scored_total(&d), src->model->hp.n_vocab,
                                     err)) &&
            !(st =
                  ql_reference_score(p.ref, p.sched, w, kv, p.group, acc, NULL, NULL, NULL, err))) {
            ql_dist_metrics m;
            ql_dist_acc_finish(acc, &m);
            *out = m.kld_mean;
        }
        ql_dist_acc_free(acc);
        calib_pass_close(&p);
    }
    ql_ppl_data_deinit(&d);
    return st ? ql_error_prefix(err, "objective kld: the fitted config on calib:%s: ", c->imatrix)
              : QL_OK;
}

/* The units of a fit table's assigned tensors in one grouping. */
typedef struct {
    char name[256];
    int lead; /* its first tensor in the table */
    int n;    /* its tensors */
    const char **tensors;
} unit;

static void units_free(unit *u, int n)
{
    for (int i = 0; u && i < n; i++)
        free(u[i].tensors);
    free(u);
}

/* The units of t's assigned tensors; in a grouping of several tensors per unit, each
 * tensor's fit group set to its unit (1 + its index). */
static ql_status units_of(const ql_model *m, ql_grouping g, ql_fit_table *t, unit **out, int *n_out,
                          ql_error *err)
{
    unit *u = calloc((size_t)t->n_tensors + 1, sizeof *u);
    int n = 0;
    ql_status st = u ? QL_OK : ql_error_set(err, QL_ENOMEM, "out of memory");
    for (int i = 0; i < t->n_tensors && !st; i++) {
        ql_fit_tensor *ft = &t->tensors[i];
        if (!ft->assigned)
            continue;
        char name[256];
        int layer;
        if (!ql_sens_unit(m, ft->name, g, name, sizeof name, &layer)) {
            st = ql_error_set(err, QL_EINVAL,
                              "objective kld: the solver assigns '%s', which is no product of "
                              "the model",
                              ft->name);
            break;
        }
        int k = 0;
        while (k < n && strcmp(u[k].name, name) != 0)
            k++;
        if (k == n) {
            snprintf(u[n].name, sizeof u[n].name, "%s", name);
            u[n].lead = i;
            if (!(u[n++].tensors = calloc((size_t)t->n_tensors + 1, sizeof *u[k].tensors))) {
                st = ql_error_set(err, QL_ENOMEM, "out of memory");
                break;
            }
        }
        u[k].tensors[u[k].n++] = ft->name;
        if (g != QL_GROUPING_TENSOR)
            ft->group = k + 1;
    }
    if (st) {
        units_free(u, n);
        return st;
    }
    *out = u;
    *n_out = n;
    return QL_OK;
}

/* The error of unit u's tensors in type: its sensitivity on the first tensor, 0 on the
 * others (the solver sums a group's). */
static void set_unit_error(ql_fit_table *t, const unit *u, int32_t type, double kld)
{
    const int g = t->tensors[u->lead].group;
    for (int i = u->lead; i < (g ? t->n_tensors : u->lead + 1); i++) {
        ql_fit_tensor *ft = &t->tensors[i];
        if (!ft->assigned || ft->group != g)
            continue;
        for (int j = 0; j < ft->n_choices; j++)
            if (ft->choices[j].type == type)
                ft->choices[j].err = i == u->lead ? kld : 0;
    }
}

/* A (unit, type) of the fit table and what its error adds up to: its own row, or in the
 * expert grouping the rows of its block's experts (the sum of theirs). */
typedef struct {
    const unit *u;
    int32_t type;
    double kld; /* the sum so far */
} unit_type;

/* Whether unit u is a block's expert tensors in grouping g, and how many experts it has
 * (its first tensor's). */
static int unit_experts(const ql_model *m, ql_grouping g, const unit *u)
{
    if (g != QL_GROUPING_EXPERT || u->n == 0)
        return 0;
    const ql_linear *lin = ql_weights_find(m->weights, u->tensors[0]);
    return lin && ql_site_kind_experts(lin->kind) ? lin->n_expert : 0;
}

ql_status ql_sens_fill(const ql_sens_source *src, const ql_sens_text *text, const ql_imatrix *im,
                       const char *im_sha, ql_grouping g, ql_fit_table *t, ql_error *err)
{
    const ql_ppl_data *d = text->d;
    ql_store_sens_key key = {.model_sha256 = src->model_sha,
                             .text_sha256 = text->sha256,
                             .text_name = text->name,
                             .ctx = d->ctx,
                             .chunks = d->n_chunks,
                             .imatrix_sha256 = im_sha,
                             .metrics_version = QL_METRICS_VERSION};
    unit *units;
    int n_units;
    ql_status st = units_of(src->model, g, t, &units, &n_units, err);
    if (st)
        return st;
    /* What the store has; the rest is measured. A unit's types are those all its
     * tensors take; an expert unit's rows are one per expert. */
    int64_t n_all = 0, n_rows = 0;
    for (int k = 0; k < n_units; k++) {
        const int64_t types = t->tensors[units[k].lead].n_choices;
        const int x = unit_experts(src->model, g, &units[k]);
        n_all += types;
        n_rows += types * (x > 0 ? x : 1);
    }
    unit_type *uts = calloc((size_t)(n_all ? n_all : 1), sizeof *uts);
    ql_sens_item *items = calloc((size_t)(n_rows ? n_rows : 1), sizeof *items);
    int64_t *item_ut = calloc((size_t)(n_rows ? n_rows : 1), sizeof *item_ut);
    char(*names)[64] = calloc((size_t)(n_rows ? n_rows : 1), sizeof *names);
    int64_t n_ut = 0, n_missing = 0;
    st = uts && items && item_ut && names ? QL_OK : ql_error_set(err, QL_ENOMEM, "out of memory");
    for (int k = 0; k < n_units && !st; k++) {
        const ql_fit_tensor *lead = &t->tensors[units[k].lead];
        const int n_exp = unit_experts(src->model, g, &units[k]);
        int layer = 0;
        if (n_exp > 0)
            ql_sens_kind_name(src->model, units[k].tensors[0], &layer);
        for (int j = 0; j < lead->n_choices && !st; j++) {
            const int32_t type = lead->choices[j].type;
            uint64_t bytes;
            double e;
            if (!ql_fit_group_choice(t, units[k].lead, type, &bytes, &e))
                continue;
            uts[n_ut] = (unit_type){&units[k], type, 0};
            for (int x = 0; x < (n_exp > 0 ? n_exp : 1) && !st; x++) {
                const char *name = units[k].name;
                if (n_exp > 0) {
                    ql_sens_expert_name(layer, x, names[n_missing], sizeof names[n_missing]);
                    name = names[n_missing];
                }
                ql_store_sens_row row;
                bool found;
                key.grouping = n_exp > 0 ? ql_grouping_name(g)
                                         : row_grouping(name, units[k].tensors, units[k].n, g);
                if ((st =
                         ql_store_sensitivity_get(src->store, &key, name, type, &row, &found, err)))
                    break;
                if (found) {
                    uts[n_ut].kld += row.kld_mean;
                    continue;
                }
                items[n_missing] = (ql_sens_item){.name = name,
                                                  .tensors = units[k].tensors,
                                                  .n_tensors = units[k].n,
                                                  .type = type,
                                                  .one_expert = n_exp > 0,
                                                  .expert = x};
                item_ut[n_missing++] = n_ut;
            }
            n_ut++;
        }
    }
    if (!st && n_missing > 0 && !(st = measure(src, &key, g, d, im, items, n_missing, err)))
        for (int64_t i = 0; i < n_missing; i++)
            uts[item_ut[i]].kld += items[i].kld_mean;
    for (int64_t i = 0; !st && i < n_ut; i++)
        set_unit_error(t, uts[i].u, uts[i].type, uts[i].kld);
    free(uts);
    free(items);
    free(item_ut);
    free(names);
    units_free(units, n_units);
    return st;
}

ql_status ql_sens_fill_table(void *ctx, const ql_config *c, const ql_calib_slot *slot,
                             ql_fit_table *t, ql_error *err)
{
    const ql_sens_source *src = ctx;
    ql_ppl_data d;
    char text_sha[65];
    ql_status st = calib_text(src, c, &d, text_sha, err);
    if (st)
        return st;
    const ql_sens_text text = {.d = &d, .sha256 = text_sha, .name = c->imatrix};
    st = ql_sens_fill(src, &text, ql_calib_slot_imatrix(slot),
                      slot ? ql_calib_slot_sha256(slot) : "none", c->grouping, t, err);
    ql_ppl_data_deinit(&d);
    return st;
}
