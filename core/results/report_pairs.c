/* The report's one-axis comparisons (report_pairs.h): for every axis that varies in a
 * group, the pairs of compared configs that differ in that axis alone, each compared
 * on the same tokens with paired-bootstrap intervals (compare.h).
 *
 * Which pairs: for the weight type, each type against the next larger one (by bpw)
 * with every other axis equal, the question a format table asks (existing files, file:,
 * are no step of that ladder: they differ from every other config in what qlab cannot
 * see, their mix and their importance matrix); for any other axis,
 * each value against the axis's baseline (its default value when the group has it,
 * else its first value by name) with every other axis equal: imatrix none against
 * calib for each weight type, head same against F16, act f32 against native. The
 * difference is B - A, A being the baseline or the smaller type.
 *
 * And the fitted configs (a budget, objective imatrix or kld): each against every config
 * of its group that is not fitted and no larger in bytes, fitted - other, with the
 * solver's predicted KLD beside the measured one. */
#include <math.h>
#include <string.h>

#include "base/table.h"
#include "base/util.h"
#include "results/report_pairs.h"

typedef ql_report_row row;
typedef ql_report_group group;

/* Whether rows i and j have the same value on every axis but skip. */
static bool same_but(const group *g, size_t i, size_t j, int skip)
{
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        if (a != skip && strcmp(g->rows[i].axis[a], g->rows[j].axis[a]) != 0)
            return false;
    return true;
}

/* The axis's baseline in the group: its default if a compared row has it, else the
 * smallest value by name. */
static const char *baseline(const group *g, int a)
{
    const char *first = NULL;
    for (size_t i = 0; i < g->nrows; i++) {
        const row *r = &g->rows[i];
        if (!ql_report_row_compared(r))
            continue;
        if (ql_report_is_default(a, r->axis[a]))
            return r->axis[a];
        if (!first || strcmp(r->axis[a], first) < 0)
            first = r->axis[a];
    }
    return first;
}

/* The paired comparison of rows x - y into *cmp; *compared = false (and *no_chunks set)
 * when the runs were stored without per-chunk sums: nothing to resample. */
static ql_status compare_rows(ql_report_writer *c, const group *g, size_t x, size_t y,
                              ql_comparison *cmp, bool *compared, bool *no_chunks, ql_error *err)
{
    *compared = false;
    ql_bootstrap_opts o;
    ql_bootstrap_opts_init(&o);
    if (c->opt->resamples)
        o.resamples = c->opt->resamples;
    ql_error e;
    ql_error_clear(&e);
    ql_status rc = ql_compare_runs(c->store, g->rows[x].run_id, g->rows[y].run_id, &o, cmp, &e);
    if (rc == QL_ENOTFOUND) {
        *no_chunks = true;
        return QL_OK;
    }
    if (rc) {
        *err = e;
        return ql_error_prefix(err, "report: ");
    }
    *compared = true;
    return QL_OK;
}

static ql_status add_pair(ql_report_writer *c, group *g, size_t *cap, int axis, size_t a, size_t b,
                          bool *no_chunks, ql_error *err)
{
    if (!ql_grow((void **)&g->pairs, cap, g->npairs + 1, sizeof *g->pairs))
        return ql_report_oom(err);
    ql_report_pair *p = &g->pairs[g->npairs];
    p->axis = axis;
    p->a = a;
    p->b = b;
    bool compared;
    /* B - A; a pair without intervals is not listed. */
    ql_status rc = compare_rows(c, g, b, a, &p->cmp, &compared, no_chunks, err);
    if (!rc && compared)
        g->npairs++;
    return rc;
}

ql_status ql_report_load_pairs(ql_report_writer *c, group *g, ql_error *err)
{
    size_t cap = 0;
    bool no_chunks = false;
    ql_status rc = QL_OK;
    for (int a = 0; a < QL_AXIS_COUNT && !rc && !no_chunks; a++) {
        if (!g->varies[a])
            continue;
        const char *base = a == QL_AXIS_WEIGHT_TYPE ? NULL : baseline(g, a);
        for (size_t i = 0; i < g->nrows && !rc && !no_chunks; i++) {
            if (!ql_report_row_compared(&g->rows[i]))
                continue;
            if (a == QL_AXIS_WEIGHT_TYPE) {
                /* The next compared row in bpw order with the same other axes. An
                 * existing file is no step on the ladder of types: it differs from any
                 * other config in what qlab cannot see (its mix, its imatrix). */
                if (ql_report_is_file(g->rows[i].axis[a], NULL))
                    continue;
                for (size_t j = i + 1; j < g->nrows; j++)
                    if (ql_report_row_compared(&g->rows[j]) &&
                        !ql_report_is_file(g->rows[j].axis[a], NULL) && same_but(g, i, j, a)) {
                        rc = add_pair(c, g, &cap, a, i, j, &no_chunks, err);
                        break;
                    }
                continue;
            }
            if (!base || strcmp(g->rows[i].axis[a], base) == 0)
                continue;
            for (size_t j = 0; j < g->nrows; j++)
                if (ql_report_row_compared(&g->rows[j]) && strcmp(g->rows[j].axis[a], base) == 0 &&
                    same_but(g, i, j, a)) {
                    rc = add_pair(c, g, &cap, a, j, i, &no_chunks, err);
                    break;
                }
        }
    }
    if (no_chunks) {
        g->npairs = 0;
        snprintf(g->pairs_note, sizeof g->pairs_note,
                 "no paired comparisons: the runs have no per-chunk sums to resample");
    }
    return rc;
}

ql_status ql_report_md_pairs(const group *g, FILE *out, ql_error *err)
{
    if (*g->pairs_note) {
        fprintf(out, "\n%s.\n", g->pairs_note);
        return QL_OK;
    }
    if (!g->npairs)
        return QL_OK;
    ql_bootstrap_opts o;
    ql_bootstrap_opts_init(&o);
    fprintf(out,
            "\nOne axis at a time (B − A on the same tokens: mean KLD, ln PPL, top-1 in "
            "percentage points; %g%% paired-bootstrap intervals over the %d chunks; * where the "
            "interval excludes zero):\n",
            100.0 * o.level, g->chunks);
    ql_status rc = QL_OK;
    for (int a = 0; a < QL_AXIS_COUNT && !rc; a++) {
        size_t count = 0;
        for (size_t i = 0; i < g->npairs; i++)
            count += g->pairs[i].axis == a;
        if (!count)
            continue;
        const char *label = ql_axis_get((ql_axis)a)->label;
        char head_a[64], head_b[64];
        snprintf(head_a, sizeof head_a, "%s A", label);
        snprintf(head_b, sizeof head_b, "%s B", label);
        const ql_table_column cols[] = {
            {a == QL_AXIS_WEIGHT_TYPE ? "other axes" : "config", NULL, false},
            {head_a, NULL, false},
            {head_b, NULL, false},
            {"Δ mean KLD", NULL, true},
            {"Δ ln PPL", NULL, true},
            {"Δ top-1", NULL, true},
        };
        ql_table *t = ql_table_alloc(cols, sizeof cols / sizeof cols[0]);
        if (!t)
            return ql_report_oom(err);
        for (size_t i = 0; i < g->npairs && !rc; i++) {
            const ql_report_pair *p = &g->pairs[i];
            if (p->axis != a)
                continue;
            char rest[512], cells[QL_CMP_STATS][96], va[QL_CONFIG_VALUE_MAX],
                vb[QL_CONFIG_VALUE_MAX];
            ql_report_pair_cells(g, p, rest, sizeof rest, cells);
            if ((rc = ql_table_row(t, err)) || (rc = ql_table_put(t, *rest ? rest : NULL, err)) ||
                (rc = ql_table_put(t, ql_report_axis_cell(g, g->rows[p->a].axis, a, va, sizeof va),
                                   err)) ||
                (rc = ql_table_put(t, ql_report_axis_cell(g, g->rows[p->b].axis, a, vb, sizeof vb),
                                   err)))
                break;
            for (int k = 0; k < QL_CMP_STATS && !rc; k++)
                rc = ql_table_put(t, *cells[k] ? cells[k] : NULL, err);
        }
        if (!rc) {
            fprintf(out, "\n%s:\n\n", ql_axis_name((ql_axis)a));
            ql_table_write_md(t, out, "—");
        }
        ql_table_free(t);
    }
    return rc;
}

/* ================================================================ fitted configs
 *
 * A fitted config (budget != none) lets the solver choose every tensor's type within
 * a size; the question its table answers is whether that beats what one gets for the
 * same bytes without a solver: each config of the group that is not fitted and no
 * larger (llama.cpp's mixes, the uniform types), compared on the same tokens. */

static bool row_fitted(const row *r)
{
    return !ql_report_is_default(QL_AXIS_BUDGET, r->axis[QL_AXIS_BUDGET]);
}

/* Compares fitted row f with row o (f - o); without per-chunk sums the pair is kept
 * uncompared and *no_chunks set. */
static ql_status add_fit_pair(ql_report_writer *c, group *g, size_t *cap, size_t f, size_t o,
                              bool *no_chunks, ql_error *err)
{
    if (!ql_grow((void **)&g->fits, cap, g->nfits + 1, sizeof *g->fits))
        return ql_report_oom(err);
    ql_report_fit_pair *p = &g->fits[g->nfits++];
    p->fit = f;
    p->other = o;
    /* Kept without intervals when there is nothing to resample. */
    return compare_rows(c, g, f, o, &p->cmp, &p->compared, no_chunks, err);
}

ql_status ql_report_load_fits(ql_report_writer *c, group *g, ql_error *err)
{
    size_t cap = 0;
    bool no_chunks = false;
    ql_status rc = QL_OK;
    for (size_t i = 0; i < g->nrows && !rc; i++) {
        const row *f = &g->rows[i];
        if (!ql_report_row_compared(f) || !row_fitted(f) || isnan(f->v[QL_METRIC_bytes]))
            continue;
        /* Rows come by bpw, so from the end: the closest in size first. */
        for (size_t j = g->nrows; j-- > 0 && !rc;) {
            const row *o = &g->rows[j];
            /* The quantization a budget is named by is its equal-size reference, even
             * when the fit came out a few bytes under it, and even when its own type
             * applied nowhere (it is still what that name gives this model). */
            const bool named = !row_fitted(o) &&
                               strcmp(o->axis[QL_AXIS_WEIGHT_TYPE], f->axis[QL_AXIS_BUDGET]) == 0;
            if (named || (ql_report_row_compared(o) && !row_fitted(o) &&
                          o->v[QL_METRIC_bytes] <= f->v[QL_METRIC_bytes]))
                rc = add_fit_pair(c, g, &cap, i, j, &no_chunks, err);
        }
    }
    if (no_chunks)
        snprintf(g->fits_note, sizeof g->fits_note,
                 "no intervals: the runs have no per-chunk sums to resample");
    return rc;
}

/* A fitted config's label without its budget and objective (they have columns): the
 * weight type, which caps the solver's types, and the other axes that vary. */
static void fit_label(const group *g, char *const *axis, char *buf, size_t size)
{
    char wt[QL_CONFIG_VALUE_MAX];
    size_t o = (size_t)snprintf(
        buf, size, "%s", ql_report_weight_label(g, axis[QL_AXIS_WEIGHT_TYPE], wt, sizeof wt));
    for (int a = 1; a < QL_AXIS_COUNT && o < size; a++)
        if (g->varies[a] && a != QL_AXIS_BUDGET && a != QL_AXIS_OBJECTIVE &&
            !ql_report_is_plain(a, axis[a]))
            o += (size_t)snprintf(buf + o, size - o, " %s=%s", ql_axis_get((ql_axis)a)->label,
                                  axis[a]);
}

/* "6.625e-02 ± 3.125e-03": the mean KLD and its standard error; "" without it. */
static void kld_pm(const row *r, char *buf, size_t size)
{
    char v[64], e[64];
    buf[0] = '\0';
    if (isnan(r->v[QL_METRIC_kld_mean]))
        return;
    ql_metric_format(QL_METRIC_kld_mean, r->v[QL_METRIC_kld_mean], v, sizeof v);
    if (isnan(r->v[QL_METRIC_kld_mean_err])) {
        snprintf(buf, size, "%s", v);
        return;
    }
    ql_metric_format(QL_METRIC_kld_mean_err, r->v[QL_METRIC_kld_mean_err], e, sizeof e);
    snprintf(buf, size, "%s ± %s", v, e);
}

/* The fitted config's cells (the first row of its group in the table). */
static ql_status put_fitted(ql_table *t, const group *g, const row *f, ql_error *err)
{
    char label[512], bpw[64], size[64], kld[160], pred[64], calib[64];
    fit_label(g, f->axis, label, sizeof label);
    ql_report_metric_text(f, QL_METRIC_bpw, bpw, sizeof bpw);
    ql_report_metric_text(f, QL_METRIC_bytes, size, sizeof size);
    kld_pm(f, kld, sizeof kld);
    ql_report_metric_text(f, QL_METRIC_predicted_kld, pred, sizeof pred);
    ql_report_metric_text(f, QL_METRIC_calib_kld, calib, sizeof calib);
    const double p = f->v[QL_METRIC_predicted_kld], pc = f->v[QL_METRIC_calib_kld];
    ql_status rc;
    if ((rc = ql_table_put(t, label, err)) ||
        (rc = ql_table_put(t, ql_report_axis_display(QL_AXIS_BUDGET, f->axis[QL_AXIS_BUDGET]),
                           err)) ||
        (rc = ql_table_put(t, ql_report_axis_display(QL_AXIS_OBJECTIVE, f->axis[QL_AXIS_OBJECTIVE]),
                           err)) ||
        (rc = ql_table_put(t, *bpw ? bpw : NULL, err)) ||
        (rc = ql_table_put(t, *size ? size : NULL, err)) ||
        (rc = ql_table_put(t, *kld ? kld : NULL, err)) ||
        (rc = ql_table_put(t, *pred ? pred : NULL, err)) ||
        (rc = ql_table_put_num(t, p > 0.0 ? f->v[QL_METRIC_kld_mean] / p : (double)NAN, "%.3f",
                               err)) ||
        (rc = ql_table_put(t, *calib ? calib : NULL, err)))
        return rc;
    return ql_table_put_num(t, pc > 0.0 ? f->v[QL_METRIC_kld_mean] / pc : (double)NAN, "%.3f", err);
}

/* The other config's cells, and the difference with its interval. */
static ql_status put_other(ql_table *t, const group *g, const ql_report_fit_pair *p, ql_error *err)
{
    const row *o = &g->rows[p->other];
    char label[512], bpw[64], kld[160], diff[96] = "";
    ql_report_config_label(g, o->axis, -1, label, sizeof label);
    ql_report_metric_text(o, QL_METRIC_bpw, bpw, sizeof bpw);
    kld_pm(o, kld, sizeof kld);
    if (p->compared)
        ql_report_stat_cell(QL_CMP_KLD, &p->cmp.v[QL_CMP_KLD], diff, sizeof diff);
    ql_status rc;
    if ((rc = ql_table_put(t, label, err)) || (rc = ql_table_put(t, *bpw ? bpw : NULL, err)) ||
        (rc = ql_table_put(t, *kld ? kld : NULL, err)))
        return rc;
    return ql_table_put(t, *diff ? diff : NULL, err);
}

ql_status ql_report_md_fits(const group *g, FILE *out, ql_error *err)
{
    size_t fitted = 0;
    for (size_t i = 0; i < g->nrows; i++)
        fitted += ql_report_row_compared(&g->rows[i]) && row_fitted(&g->rows[i]);
    if (!fitted)
        return QL_OK;
    enum { FIT_COLS = 10 };
    const ql_table_column cols[] = {
        {"fitted", NULL, false},
        {"budget", NULL, false},
        {"objective", NULL, false},
        {"bpw", NULL, true},
        {"size", NULL, true},
        {"KLD mean", NULL, true},
        {"predicted KLD", NULL, true},
        {"measured / predicted", NULL, true},
        {"KLD on calib text", NULL, true},
        {"measured / calib", NULL, true},
        {"against", NULL, false},
        {"its bpw", NULL, true},
        {"its KLD mean", NULL, true},
        {"Δ mean KLD", NULL, true},
    };
    ql_table *t = ql_table_alloc(cols, sizeof cols / sizeof cols[0]);
    if (!t)
        return ql_report_oom(err);
    ql_status rc = QL_OK;
    for (size_t i = 0; i < g->nrows && !rc; i++) {
        const row *f = &g->rows[i];
        if (!ql_report_row_compared(f) || !row_fitted(f))
            continue;
        /* One line per pair; the fitted config's cells on its first line only. */
        bool first = true;
        for (size_t k = 0; k < g->nfits && !rc; k++) {
            if (g->fits[k].fit != i)
                continue;
            if ((rc = ql_table_row(t, err)))
                break;
            if (first)
                rc = put_fitted(t, g, f, err);
            for (int col = 0; col < FIT_COLS && !first && !rc; col++)
                rc = ql_table_put(t, "", err);
            if (!rc)
                rc = put_other(t, g, &g->fits[k], err);
            first = false;
        }
        /* Nothing that is no larger: the config alone, its comparison cells missing. */
        if (first && !rc && !(rc = ql_table_row(t, err)))
            rc = put_fitted(t, g, f, err);
    }
    if (!rc) {
        ql_bootstrap_opts o;
        ql_bootstrap_opts_init(&o);
        fprintf(out,
                "\nFitted configs (a budget the solver fills) against each config of the group "
                "that is not fitted and no larger in bytes (llama.cpp's mixes, uniform types), "
                "closest in size first. Δ mean KLD = fitted − that config on the same tokens, "
                "%g%% paired-bootstrap interval over the %d chunks, * where the interval excludes "
                "zero; measured / predicted: the mean KLD over the solver's prediction (objective "
                "kld: the sum of its choices' sensitivities, each measured alone); KLD on calib "
                "text: the fitted config's own KLD on the calibration text the sensitivities "
                "were measured on, the prediction with the interactions of its choices:\n\n",
                100.0 * o.level, g->chunks);
        ql_table_write_md(t, out, "—");
        if (*g->fits_note)
            fprintf(out, "\nΔ mean KLD: %s.\n", g->fits_note);
    }
    ql_table_free(t);
    return rc;
}
