/* The calibration resources of a sweep: importance matrices, activation maxima and
 * outlier sets, made on first use (calib.h). */
#include "calib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "forward.h"
#include "imatrix.h"
#include "perplexity.h"
#include "util.h"

/* Outlier channel lists of one ratio, selected from a slot's calibration maxima. */
typedef struct {
    double ratio;
    ql_outlier_set *set;
} outlier_slot;

struct ql_calib_slot {
    char key[QL_CONFIG_IMATRIX_MAX + 64]; /* canonical imatrix axis value */
    ql_imatrix *im;
    char sha256[65];
    /* calib: imatrices only: per-channel max |x| of every product on the same
     * calibration text (the outlier split's statistics), made on first use. */
    ql_act_stats *act;
    outlier_slot *outliers;
    size_t n_outliers;
};

struct ql_calib {
    const ql_model *model;
    const ql_tokenizer *tok;
    char model_sha[65];
    char cache_dir[QL_PATH_MAX];
    int ctx;
    bool quiet;
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
    ql_strlcpy(cal->model_sha, src->model_sha, sizeof cal->model_sha);
    ql_strlcpy(cal->cache_dir, src->cache_dir, sizeof cal->cache_dir);
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

static ql_status load_imatrix_file(const char *path, ql_calib_slot *slot, ql_error *err)
{
    char resolved[QL_PATH_MAX];
    ql_status st = ql_data_resolve(path, resolved, sizeof resolved, NULL, err);
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

/* The calibration imatrix of `calib:NAME[,ctx=N][,chunks=N]`: llama-imatrix's
 * collection (imatrix.h) over the named text with the sweep's model and the exact
 * reference (f32 K/V), computed once and kept in the cache directory as a GGUF
 * imatrix keyed by (model sha256, text sha256, ctx, chunks, process-output), so
 * shards and resumed sweeps load the same file. The run records the file's sha256. */
static ql_status calib_imatrix(const ql_calib *cal, const ql_config *c, ql_calib_slot *slot,
                               ql_error *err)
{
    const int ctx = c->imatrix_ctx > 0 ? c->imatrix_ctx : cal->ctx;
    const int chunks = c->imatrix_chunks;
    const bool process_output = false; /* sweeps have no --process-output */
    char text_path[QL_PATH_MAX], text_sha[65];
    const ql_data_entry *te = NULL;
    ql_status st = ql_data_resolve(c->imatrix, text_path, sizeof text_path, &te, err);
    if (st)
        return ql_error_prefix(err, "imatrix calib:%s: ", c->imatrix);
    if (te)
        ql_strlcpy(text_sha, te->sha256, sizeof text_sha);
    else if ((st = ql_sha256_file(text_path, text_sha, err)))
        return st;
    char path[QL_PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/imatrix-%.16s-%.16s-c%d-n%d-po%d.gguf", cal->cache_dir,
                     cal->model_sha, text_sha, ctx, chunks, process_output ? 1 : 0);
    if (n < 0 || (size_t)n >= sizeof path)
        return ql_error_set(err, QL_EINVAL, "imatrix cache path under '%s' is too long",
                            cal->cache_dir);

    if (ql_file_exists(path)) {
        ql_error rerr;
        ql_imatrix *im = NULL;
        st = ql_imatrix_read(path, &im, &rerr);
        if (!st && im->chunk_size == ctx && (chunks == 0 || im->chunk_count <= chunks)) {
            slot->im = im;
            if (!cal->quiet)
                fprintf(stderr, "imatrix calib:%s: loaded from cache %s\n", c->imatrix, path);
            return ql_sha256_file(path, slot->sha256, err);
        }
        fprintf(stderr, "qlab: warning: ignoring the cached imatrix %s (%s); computing it again\n",
                path, st ? rerr.msg : "another chunk size or chunk count");
        ql_imatrix_free(im);
    }

    ql_ppl_data d;
    memset(&d, 0, sizeof d);
    ql_forward *fw = NULL;
    if ((st = calib_chunks(cal, c, text_path, &d, err)))
        goto out;
    if ((st = ql_forward_alloc(&fw, &cal->model->hp, ctx, err)))
        goto out;
    ql_imatrix_opts o = {process_output, c->imatrix, cal->quiet, NULL, NULL};
    ql_imatrix_summary sum;
    if ((st = ql_imatrix_collect(fw, cal->model->weights, &d, &o, &slot->im, &sum, err))) {
        ql_error_prefix(err, "imatrix calib:%s: ", c->imatrix);
        goto out;
    }
    if ((st = ql_make_dirs(cal->cache_dir, err)) ||
        (st = ql_imatrix_write(slot->im, path, QL_IMATRIX_GGUF, err)) ||
        (st = ql_sha256_file(path, slot->sha256, err)))
        goto out;
    if (!cal->quiet)
        fprintf(stderr,
                "imatrix calib:%s: %lld entries over %lld chunks of %d tokens in %.1f s, cached "
                "in %s\n",
                c->imatrix, (long long)sum.n_entries, (long long)sum.n_chunks, ctx, sum.seconds,
                path);
out:
    if (st) {
        ql_imatrix_free(slot->im);
        slot->im = NULL;
    }
    ql_forward_free(fw);
    ql_ppl_data_deinit(&d);
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
    ql_status st = c->imatrix_kind == QL_IMATRIX_CALIB ? calib_imatrix(cal, c, slot, err)
                                                       : load_imatrix_file(c->imatrix, slot, err);
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

/* The per-channel maxima of a calib: slot's text (for the outlier split), computed
 * once per sweep with the reference weights. */
static ql_status calib_act_stats(const ql_calib *cal, const ql_config *c, ql_calib_slot *slot,
                                 ql_error *err)
{
    if (slot->act)
        return QL_OK;
    char text_path[QL_PATH_MAX];
    ql_status st = ql_data_resolve(c->imatrix, text_path, sizeof text_path, NULL, err);
    if (st)
        return ql_error_prefix(err, "calib:%s: ", c->imatrix);
    ql_ppl_data d;
    memset(&d, 0, sizeof d);
    ql_forward *fw = NULL;
    double t0 = ql_now();
    if (!(st = calib_chunks(cal, c, text_path, &d, err)) &&
        !(st = ql_forward_alloc(&fw, &cal->model->hp, d.ctx, err)))
        st = ql_act_stats_collect(&slot->act, fw, cal->model->weights, &d, err);
    if (st)
        ql_error_prefix(err, "outlier statistics on calib:%s: ", c->imatrix);
    else if (!cal->quiet)
        fprintf(stderr, "calib:%s: per-channel activation maxima over %lld chunks in %.1f s\n",
                c->imatrix, (long long)d.n_chunks, ql_now() - t0);
    ql_forward_free(fw);
    ql_ppl_data_deinit(&d);
    return st;
}

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
    ql_status st = calib_act_stats(cal, c, slot, err);
    if (st)
        return st;
    outlier_slot *grown = realloc(slot->outliers, (slot->n_outliers + 1) * sizeof *grown);
    if (!grown)
        return ql_error_set(err, QL_ENOMEM, "out of memory for outlier lists");
    slot->outliers = grown;
    outlier_slot *os = &slot->outliers[slot->n_outliers];
    os->ratio = c->outlier_ratio;
    if ((st = ql_outlier_set_build(slot->act, c->outlier_ratio, &os->set, err)))
        return st;
    slot->n_outliers++;
    *out = os->set;
    return QL_OK;
}
