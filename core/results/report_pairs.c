/* The report's one-axis comparisons (report_impl.h): for every axis that varies in a
 * group, the pairs of compared configs that differ in that axis alone, each compared
 * on the same tokens with paired-bootstrap intervals (compare.h).
 *
 * Which pairs: for the weight type, each type against the next larger one (by bpw)
 * with every other axis equal, the question a format table asks; for any other axis,
 * each value against the axis's baseline (its default value when the group has it,
 * else its first value by name) with every other axis equal: imatrix none against
 * calib for each weight type, head same against F16, act f32 against native. The
 * difference is B - A, A being the baseline or the smaller type. */
#include <string.h>

#include "base/table.h"
#include "base/util.h"
#include "results/report_impl.h"

typedef ql_report_row row;
typedef ql_report_group group;
typedef ql_report_ctx ctx;

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

static ql_status add_pair(ctx *c, group *g, size_t *cap, int axis, size_t a, size_t b,
                          bool *no_chunks, ql_error *err)
{
    if (!ql_grow((void **)&g->pairs, cap, g->npairs + 1, sizeof *g->pairs))
        return ql_report_oom(err);
    ql_report_pair *p = &g->pairs[g->npairs];
    p->axis = axis;
    p->a = a;
    p->b = b;
    ql_bootstrap_opts o;
    ql_bootstrap_opts_init(&o);
    if (c->opt->resamples)
        o.resamples = c->opt->resamples;
    ql_error e;
    ql_error_clear(&e);
    /* B - A. */
    ql_status rc = ql_compare_runs(c->store, g->rows[b].run_id, g->rows[a].run_id, &o, &p->cmp, &e);
    if (rc == QL_ENOTFOUND) {
        /* Runs stored without per-chunk sums: nothing to resample. */
        *no_chunks = true;
        return QL_OK;
    }
    if (rc) {
        *err = e;
        return ql_error_prefix(err, "report: ");
    }
    g->npairs++;
    return QL_OK;
}

ql_status ql_report_load_pairs(ctx *c, group *g, ql_error *err)
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
                /* The next compared row in bpw order with the same other axes. */
                for (size_t j = i + 1; j < g->nrows; j++)
                    if (ql_report_row_compared(&g->rows[j]) && same_but(g, i, j, a)) {
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

/* "+1.23e-02 [+1.01e-02, +1.45e-02] *": the estimate, its interval, and a star where
 * the interval excludes zero. */
static void cell(ql_compare_stat k, const ql_compare_value *v, char *buf, size_t size)
{
    if (!v->ok) {
        buf[0] = '\0';
        return;
    }
    const char *star = ql_ci_excludes_zero(&v->diff) ? " *" : "";
    const ql_ci *d = &v->diff;
    if (k == QL_CMP_KLD)
        snprintf(buf, size, "%+.2e [%+.2e, %+.2e]%s", d->estimate, d->lo, d->hi, star);
    else if (k == QL_CMP_TOP1)
        snprintf(buf, size, "%+.2f [%+.2f, %+.2f]%s", 100.0 * d->estimate, 100.0 * d->lo,
                 100.0 * d->hi, star);
    else
        snprintf(buf, size, "%+.4f [%+.4f, %+.4f]%s", d->estimate, d->lo, d->hi, star);
}

void ql_report_pair_cells(const group *g, const ql_report_pair *p, char *rest, size_t rest_size,
                          char cells[QL_CMP_STATS][96])
{
    /* What both configs share: for a weight type pair only the other axes. */
    if (p->axis == QL_AXIS_WEIGHT_TYPE)
        ql_report_rest_label(g, g->rows[p->a].axis, p->axis, rest, rest_size);
    else
        ql_report_config_label(g, g->rows[p->a].axis, p->axis, rest, rest_size);
    for (int k = 0; k < QL_CMP_STATS; k++)
        cell((ql_compare_stat)k, &p->cmp.v[k], cells[k], sizeof cells[k]);
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
            char rest[512], cells[QL_CMP_STATS][96];
            ql_report_pair_cells(g, p, rest, sizeof rest, cells);
            if ((rc = ql_table_row(t, err)) || (rc = ql_table_put(t, *rest ? rest : NULL, err)) ||
                (rc = ql_table_put(t, ql_report_axis_display(a, g->rows[p->a].axis[a]), err)) ||
                (rc = ql_table_put(t, ql_report_axis_display(a, g->rows[p->b].axis[a]), err)))
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
