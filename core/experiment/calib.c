/* The calibration resources of a sweep: importance matrices, activation maxima and
 * outlier sets, made on first use (calib.h). */
#include "experiment/calib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/data.h"
#include "base/util.h"
#include "experiment/imatrix.h"
#include "model/scheduler.h"
#include "model/forward.h"
#include "model/perplexity.h"

/* Outlier channel lists of one ratio, selected from a slot's calibration maxima. */
typedef struct {
    double ratio;
    ql_outlier_set *set;
} outlier_slot;

struct ql_calib_slot {
    char key[QL_CONFIG_VALUE_MAX]; /* canonical imatrix axis value */
    ql_imatrix *im;
    char sha256[65];
    /* calib: imatrices only: per-channel max |x| of every product on the same
     * calibration text (the outlier split's statistics), from the imatrix's pass or
     * the cache beside it. */
    ql_act_stats *act;
    outlier_slot *outliers;
    size_t n_outliers;
};

struct ql_calib {
    const ql_model *model;
    const ql_tokenizer *tok;
    char model_sha[65];
    char cache_dir[QL_PATH_MAX];
    char base_dir[QL_PATH_MAX];
    int ctx;
    bool quiet;
    size_t mem_bytes;
    /* Each slot is its own allocation, so a slot pointer survives later loads. */
    ql_calib_slot **slots;
    size_t n_slots;
};

ql_status ql_calib_alloc(ql_calib **out, const ql_calib_source *src, ql_error *err)
{
    *out = NULL;
    ql_calib *cal = calloc(1, sizeof *cal);
    if (!cal)
        return ql_error_set(err, QL_ENOMEM, "out of memory for the calibration resources");
    cal->model = src->model;
    cal->tok = src->tok;
    cal->mem_bytes = src->mem_bytes;
    ql_strlcpy(cal->model_sha, src->model_sha, sizeof cal->model_sha);
    ql_strlcpy(cal->cache_dir, src->cache_dir, sizeof cal->cache_dir);
    ql_strlcpy(cal->base_dir, src->base_dir ? src->base_dir : "", sizeof cal->base_dir);
    cal->ctx = src->ctx;
    cal->quiet = src->quiet;
    *out = cal;
    return QL_OK;
}

static void slot_free(ql_calib_slot *slot)
{
    if (!slot)
        return;
    ql_imatrix_free(slot->im);
    ql_act_stats_free(slot->act);
    for (size_t k = 0; k < slot->n_outliers; k++)
        ql_outlier_set_free(slot->outliers[k].set);
    free(slot->outliers);
    free(slot);
}

void ql_calib_free(ql_calib *cal)
{
    if (!cal)
        return;
    for (size_t i = 0; i < cal->n_slots; i++)
        slot_free(cal->slots[i]);
    free(cal->slots);
    free(cal);
}

const ql_imatrix *ql_calib_slot_imatrix(const ql_calib_slot *slot)
{
    return slot ? slot->im : NULL;
}

const char *ql_calib_slot_sha256(const ql_calib_slot *slot)
{
    return slot ? slot->sha256 : NULL;
}

/* ------------------------------------------------------------------------- */
/* Importance matrices                                                        */

static ql_status load_imatrix_file(const ql_calib *cal, const char *path, ql_calib_slot *slot,
                                   ql_error *err)
{
    char resolved[QL_PATH_MAX];
    ql_status st =
        ql_data_resolve_in(cal->base_dir, "file", path, resolved, sizeof resolved, NULL, err);
    if (st)
        return ql_error_prefix(err, "imatrix: ");
    if ((st = ql_sha256_file(resolved, slot->sha256, err)))
        return st;
    return ql_imatrix_read(resolved, &slot->im, err);
}

/* Tokenizes a config's calibration text into chunks (ctx default: the sweep's). */
static ql_status calib_chunks(const ql_calib *cal, const ql_config *c, const char *text_path,
                              ql_ppl_data *d, ql_error *err)
{
    const int ctx = c->imatrix_ctx > 0 ? c->imatrix_ctx : cal->ctx;
    char *text = NULL;
    size_t len = 0;
    ql_status st = ql_file_read_all(text_path, &text, &len, err);
    if (!st && (st = ql_ppl_data_from_text(d, cal->tok, text, len, ctx, c->imatrix_chunks, err)))
        ql_error_prefix(err, "calib:%s: %s: ", c->imatrix, text_path);
    free(text);
    return st;
}

/* The cache files of a calib: text, both keyed by (model sha256, text sha256, ctx,
 * chunks, process-output): the GGUF imatrix, and beside it the activation maxima of
 * the same pass (outliers.h's layout). */
typedef struct {
    int ctx, chunks;
    char text_path[QL_PATH_MAX];
    char text_sha[65];
    char imatrix[QL_PATH_MAX];
    char maxima[QL_PATH_MAX];
} calib_files;

static ql_status calib_files_of(const ql_calib *cal, const ql_config *c, calib_files *f,
                                ql_error *err)
{
    const bool process_output = false; /* sweeps have no --process-output */
    memset(f, 0, sizeof *f);
    f->ctx = c->imatrix_ctx > 0 ? c->imatrix_ctx : cal->ctx;
    f->chunks = c->imatrix_chunks;
    const ql_data_entry *te = NULL;
    ql_status st = ql_data_resolve_in(cal->base_dir, "text", c->imatrix, f->text_path,
                                      sizeof f->text_path, &te, err);
    if (st)
        return ql_error_prefix(err, "imatrix calib:%s: ", c->imatrix);
    if ((st = ql_data_sha256(te, f->text_path, f->text_sha, err)))
        return st;
    char *paths[2] = {f->imatrix, f->maxima};
    const char *exts[2] = {"gguf", "amax"};
    for (int k = 0; k < 2; k++) {
        int n = snprintf(paths[k], QL_PATH_MAX, "%s/imatrix-%.16s-%.16s-c%d-n%d-po%d.%s",
                         cal->cache_dir, cal->model_sha, f->text_sha, f->ctx, f->chunks,
                         process_output ? 1 : 0, exts[k]);
        if (n < 0 || n >= QL_PATH_MAX)
            return ql_error_set(err, QL_EINVAL, "imatrix cache path under '%s' is too long",
                                cal->cache_dir);
    }
    return QL_OK;
}

ql_status ql_calib_config_text(const ql_calib *cal, const ql_config *c, ql_ppl_data *d,
                               char text_sha[65], ql_error *err)
{
    memset(d, 0, sizeof *d);
    if (c->imatrix_kind != QL_IMATRIX_CALIB)
        return ql_error_set(err, QL_EINVAL, "the config's imatrix is not calib:<text>");
    calib_files f;
    ql_status st = calib_files_of(cal, c, &f, err);
    if (!st && !(st = calib_chunks(cal, c, f.text_path, d, err)))
        ql_strlcpy(text_sha, f.text_sha, 65);
    return st;
}

/* The cached imatrix into slot (and its file's sha256): *hit = false, and a warning
 * when the file is there but unusable, means it has to be computed. */
static ql_status load_cached_imatrix(const ql_calib *cal, const ql_config *c, const calib_files *f,
                                     ql_calib_slot *slot, bool *hit, ql_error *err)
{
    *hit = false;
    if (!ql_file_exists(f->imatrix))
        return QL_OK;
    ql_error rerr;
    ql_imatrix *im = NULL;
    ql_status st = ql_imatrix_read(f->imatrix, &im, &rerr);
    if (st || im->chunk_size != f->ctx || (f->chunks > 0 && im->chunk_count > f->chunks)) {
        fprintf(stderr, "qlab: warning: ignoring the cached imatrix %s (%s); computing it again\n",
                f->imatrix, st ? rerr.msg : "another chunk size or chunk count");
        ql_imatrix_free(im);
        return QL_OK;
    }
    if ((st = ql_sha256_file(f->imatrix, slot->sha256, err))) {
        ql_imatrix_free(im);
        return st;
    }
    slot->im = im;
    *hit = true;
    if (!cal->quiet)
        fprintf(stderr, "imatrix calib:%s: loaded from cache %s\n", c->imatrix, f->imatrix);
    return QL_OK;
}

/* The cached maxima of the pass that made the slot's imatrix, checked against the
 * model (sites and widths) and the imatrix (text, chunks): NULL, and a warning when
 * the file is there but unusable, means they have to be computed. */
static ql_act_stats *load_cached_maxima(const ql_calib *cal, const ql_config *c,
                                        const calib_files *f, const ql_imatrix *im)
{
    if (!ql_file_exists(f->maxima))
        return NULL;
    ql_error rerr;
    ql_act_stats *act = NULL;
    ql_act_stats_origin o;
    const ql_weights *w = cal->model->weights;
    ql_status st = ql_act_stats_read(f->maxima, &act, &o, &rerr);
    if (!st && strcmp(o.model_sha256, cal->model_sha) != 0)
        st = ql_error_set(&rerr, QL_EFORMAT, "made with model %.16s..., expected %.16s...",
                          o.model_sha256, cal->model_sha);
    if (!st && strcmp(o.text_sha256, f->text_sha) != 0)
        st = ql_error_set(&rerr, QL_EFORMAT, "made on text %.16s..., expected %.16s...",
                          o.text_sha256, f->text_sha);
    if (!st && (o.chunk_size != im->chunk_size || o.chunk_count != im->chunk_count))
        st = ql_error_set(&rerr, QL_EFORMAT,
                          "%lld chunks of %lld tokens, the cached imatrix has %lld of %lld",
                          (long long)o.chunk_count, (long long)o.chunk_size,
                          (long long)im->chunk_count, (long long)im->chunk_size);
    if (!st && act->n_sites != w->n_lin)
        st = ql_error_set(&rerr, QL_EFORMAT, "%d sites, the model has %d products", act->n_sites,
                          w->n_lin);
    for (int s = 0; !st && s < w->n_lin; s++)
        if (act->n_in[s] != w->lin[s].n_in)
            st = ql_error_set(&rerr, QL_EFORMAT, "site %d (%s) is %lld wide, the model's %lld", s,
                              w->lin[s].name, (long long)act->n_in[s], (long long)w->lin[s].n_in);
    if (st) {
        fprintf(stderr,
                "qlab: warning: ignoring the cached activation maxima %s (%s); computing them "
                "again\n",
                f->maxima, rerr.msg);
        ql_act_stats_free(act);
        return NULL;
    }
    if (!cal->quiet)
        fprintf(stderr, "calib:%s: activation maxima loaded from cache %s\n", c->imatrix,
                f->maxima);
    return act;
}

/* One calibration pass over the text: llama-imatrix's collection (imatrix.h) with the
 * per-channel maxima of every product (outliers.h) observed alongside, with the
 * sweep's model, the reference weights and f32 K/V. */
static ql_status calib_pass(const ql_calib *cal, const ql_config *c, const calib_files *f,
                            ql_imatrix **im, ql_act_stats **act, ql_imatrix_summary *sum,
                            ql_error *err)
{
    *im = NULL;
    *act = NULL;
    ql_ppl_data d;
    memset(&d, 0, sizeof d);
    ql_forward *fw = NULL;
    ql_status st = calib_chunks(cal, c, f->text_path, &d, err);
    if (!st)
        st = ql_forward_alloc(&fw, &cal->model->hp, f->ctx, err);
    if (!st)
        st = ql_act_stats_alloc_for(act, cal->model->weights, err);
    if (!st) {
        const bool process_output = false; /* as in the cache file names */
        const int group =
            ql_sched_group_for(&cal->model->hp, f->ctx, 1, d.n_chunks, cal->mem_bytes);
        ql_imatrix_opts o = {.process_output = process_output,
                             .dataset = c->imatrix,
                             .quiet = cal->quiet,
                             .also = ql_act_stats_observe,
                             .also_ctx = *act,
                             .group = group};
        if ((st = ql_imatrix_collect(fw, cal->model->weights, &d, &o, im, sum, err)))
            ql_error_prefix(err, "imatrix calib:%s: ", c->imatrix);
    }
    if (st) {
        ql_act_stats_free(*act);
        *act = NULL;
    }
    ql_forward_free(fw);
    ql_ppl_data_deinit(&d);
    return st;
}

/* The calibration resources of `calib:NAME[,ctx=N][,chunks=N]`: the imatrix and the
 * activation maxima, from one pass over the named text, computed once and kept in the
 * cache directory, so that shards, job processes and resumed sweeps load the same
 * files. When only the maxima are missing or unusable (a cache from before they were
 * kept, a damaged file), the pass runs again for them and the cached imatrix stays.
 * The run records the imatrix file's sha256. */
static ql_status calib_imatrix(const ql_calib *cal, const ql_config *c, ql_calib_slot *slot,
                               ql_error *err)
{
    calib_files f;
    bool im_cached = false;
    ql_status st = calib_files_of(cal, c, &f, err);
    if (!st)
        st = load_cached_imatrix(cal, c, &f, slot, &im_cached, err);
    if (st)
        return st;
    if (im_cached && (slot->act = load_cached_maxima(cal, c, &f, slot->im)))
        return QL_OK;

    ql_imatrix *im = NULL;
    ql_act_stats *act = NULL;
    ql_imatrix_summary sum;
    if ((st = calib_pass(cal, c, &f, &im, &act, &sum, err)) ||
        (st = ql_make_dirs(cal->cache_dir, err)))
        goto out;
    if (!im_cached) {
        if ((st = ql_imatrix_write(im, f.imatrix, QL_IMATRIX_GGUF, err)) ||
            (st = ql_sha256_file(f.imatrix, slot->sha256, err)))
            goto out;
        slot->im = im;
        im = NULL;
        if (!cal->quiet)
            fprintf(stderr,
                    "imatrix calib:%s: %lld entries over %lld chunks of %d tokens in %.1f s, "
                    "cached in %s\n",
                    c->imatrix, (long long)sum.n_entries, (long long)sum.n_chunks, f.ctx,
                    sum.seconds, f.imatrix);
    } else if (!cal->quiet) {
        fprintf(stderr, "calib:%s: activation maxima over %lld chunks of %d tokens in %.1f s\n",
                c->imatrix, (long long)sum.n_chunks, f.ctx, sum.seconds);
    }
    /* The maxima are only a cache: failing to keep them costs a pass next time. */
    ql_act_stats_origin o;
    memset(&o, 0, sizeof o);
    ql_strlcpy(o.model_sha256, cal->model_sha, sizeof o.model_sha256);
    ql_strlcpy(o.text_sha256, f.text_sha, sizeof o.text_sha256);
    o.chunk_size = f.ctx;
    o.chunk_count = sum.n_chunks;
    ql_error werr;
    if (ql_act_stats_write(act, &o, f.maxima, &werr))
        fprintf(stderr, "qlab: warning: cannot cache the activation maxima: %s\n", werr.msg);
    else if (!cal->quiet)
        fprintf(stderr, "calib:%s: activation maxima of %d products cached in %s\n", c->imatrix,
                act->n_sites, f.maxima);
    slot->act = act;
    act = NULL;
out:
    /* On failure the caller frees the slot, with a cached imatrix it may hold. */
    ql_imatrix_free(im);
    ql_act_stats_free(act);
    return st;
}

ql_status ql_calib_config_imatrix(ql_calib *cal, const ql_config *c, ql_calib_slot **out,
                                  ql_error *err)
{
    *out = NULL;
    if (c->imatrix_kind == QL_IMATRIX_NONE)
        return QL_OK;
    char key[sizeof cal->slots[0]->key];
    ql_config_axis_string(c, QL_AXIS_IMATRIX, key, sizeof key);
    for (size_t i = 0; i < cal->n_slots; i++)
        if (strcmp(cal->slots[i]->key, key) == 0) {
            *out = cal->slots[i];
            return QL_OK;
        }
    ql_calib_slot **grown = realloc(cal->slots, (cal->n_slots + 1) * sizeof *grown);
    if (!grown)
        return ql_error_set(err, QL_ENOMEM, "out of memory for an imatrix");
    cal->slots = grown;
    ql_calib_slot *slot = calloc(1, sizeof *slot);
    if (!slot)
        return ql_error_set(err, QL_ENOMEM, "out of memory for an imatrix");
    ql_strlcpy(slot->key, key, sizeof slot->key);
    ql_status st = c->imatrix_kind == QL_IMATRIX_CALIB
                       ? calib_imatrix(cal, c, slot, err)
                       : load_imatrix_file(cal, c->imatrix, slot, err);
    if (st) {
        slot_free(slot);
        return st;
    }
    cal->slots[cal->n_slots++] = slot;
    *out = slot;
    return QL_OK;
}

ql_status ql_calib_pick_metric_imatrix(ql_calib *cal, const ql_sweep *sw, const ql_imatrix **out,
                                       ql_error *err)
{
    *out = NULL;
    for (size_t i = 0; i < sw->n_points; i++) {
        const ql_config *c = &sw->points[i].config;
        if (c->imatrix_kind == QL_IMATRIX_NONE)
            continue;
        ql_calib_slot *slot;
        ql_status st = ql_calib_config_imatrix(cal, c, &slot, err);
        if (st)
            return st;
        *out = slot->im;
        return QL_OK;
    }
    return QL_OK;
}

ql_status ql_calib_column_weights(const ql_imatrix *im, const char *name, int64_t n_cols,
                                  float *buf, const float **out, ql_error *err)
{
    *out = NULL;
    if (!im)
        return QL_OK;
    ql_status st = ql_imatrix_weights(im, name, n_cols, buf, err);
    /* As llama-quantize (and ql_imatrix_table): no entry, or a token_embd entry of
     * another length, means no importance; any other length is an error. */
    if (st == QL_ENOTFOUND || (st == QL_EFORMAT && strcmp(name, "token_embd.weight") == 0))
        return QL_OK;
    if (st)
        return st;
    *out = buf;
    return QL_OK;
}

/* ------------------------------------------------------------------------- */
/* Activation maxima and outlier channels                                     */

/* A ratio needs calibration statistics, which come from the calib: text of the
 * config's importance matrix, so the run's identity names them. */
ql_status ql_calib_config_outliers(ql_calib *cal, const ql_config *c, ql_calib_slot *slot,
                                   const ql_outlier_set **out, ql_error *err)
{
    *out = NULL;
    if (c->outlier_ratio <= 0)
        return QL_OK;
    if (!slot || c->imatrix_kind != QL_IMATRIX_CALIB)
        return ql_error_set(err, QL_EINVAL,
                            "outlier_ratio %g needs calibration statistics: give the config a "
                            "calibration text with imatrix = calib:<text>",
                            c->outlier_ratio);
    for (size_t i = 0; i < slot->n_outliers; i++)
        if (slot->outliers[i].ratio == c->outlier_ratio) {
            *out = slot->outliers[i].set;
            return QL_OK;
        }
    /* A calib: slot always holds the maxima of its pass (calib_imatrix). */
    QL_ASSERT(slot->act != NULL);
    outlier_slot *grown = realloc(slot->outliers, (slot->n_outliers + 1) * sizeof *grown);
    if (!grown)
        return ql_error_set(err, QL_ENOMEM, "out of memory for outlier lists");
    slot->outliers = grown;
    outlier_slot *os = &slot->outliers[slot->n_outliers];
    os->ratio = c->outlier_ratio;
    ql_status st = ql_outlier_set_build(slot->act, c->outlier_ratio, &os->set, err);
    if (st)
        return st;
    slot->n_outliers++;
    *out = os->set;
    return QL_OK;
}
