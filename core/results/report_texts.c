/* qlab report: what a sweep of several evaluation texts shows beyond one table per text
 * (issue 28): the config x text matrices of mean KLD and ln PPL ratio, and each group's
 * warnings (calibration overlapping the evaluated text, or unknown; a reference beaten
 * beyond its interval). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/metrics.h"
#include "experiment/overlap.h"
#include "results/report_impl.h"

typedef ql_report_row row;
typedef ql_report_group group;
typedef ql_report_ctx ctx;

bool ql_report_calib_unknown(const ql_report_row *r)
{
    const char *im = r->axis[QL_AXIS_IMATRIX];
    return im && strcmp(im, "none") != 0 && strncmp(im, "calib:", 6) != 0 &&
           isnan(r->v[QL_METRIC_calib_overlap_32]);
}

size_t ql_report_row_warnings(const ql_report_row *r, char lines[][256], size_t max)
{
    size_t n = 0;
    const double o32 = r->v[QL_METRIC_calib_overlap_32];
    if (ql_overlap_flagged(o32) && n < max) {
        char why[160];
        ql_overlap_flag_text(o32, why, sizeof why);
        snprintf(lines[n++], 256, "%s (8-grams %.1f%%)", why,
                 100.0 * r->v[QL_METRIC_calib_overlap_8]);
    } else if (ql_report_calib_unknown(r) && n < max) {
        snprintf(lines[n++], 256, "%s", QL_OVERLAP_UNKNOWN_TEXT);
    }
    const double lr = r->v[QL_METRIC_ln_ppl_ratio], le = r->v[QL_METRIC_ln_ppl_ratio_err];
    if (ql_beats_reference(lr, le) && n < max)
        snprintf(lines[n++], 256,
                 "PPL below the reference's beyond its interval (ln PPL ratio %+.4f ± %.4f); %s",
                 lr, le, QL_BEATEN_HINT);
    return n;
}

void ql_report_md_warnings(const group *g, FILE *out)
{
    bool any = false;
    for (size_t i = 0; i < g->nrows; i++) {
        char lines[3][256];
        const size_t n = ql_report_row_warnings(&g->rows[i], lines, 3);
        for (size_t k = 0; k < n; k++) {
            if (!any)
                fprintf(out, "\nWarnings:\n\n");
            any = true;
            char label[512];
            ql_report_config_label(g, g->rows[i].axis, -1, label, sizeof label);
            fprintf(out, "- %s: %s\n", label, lines[k]);
        }
    }
}

/* ---------------------------------------------------------------- config x text */

/* The groups of one model, ctx and chunk count: a matrix when there are several texts. */
static bool same_matrix(const group *a, const group *b)
{
    return strcmp(a->model_sha, b->model_sha) == 0 && a->ctx == b->ctx && a->chunks == b->chunks;
}

size_t ql_report_texts_matrix(const group *gs, size_t ng, size_t first, ql_report_texts *m)
{
    memset(m, 0, sizeof *m);
    for (size_t j = 0; j < first; j++)
        if (same_matrix(&gs[j], &gs[first]))
            return 0; /* an earlier group leads this matrix */
    for (size_t j = first; j < ng && m->ncols < QL_REPORT_MAX_TEXTS; j++)
        if (same_matrix(&gs[j], &gs[first]))
            m->cols[m->ncols++] = j;
    if (m->ncols < 2)
        return 0;
    /* Configs in the order of the first group that has each (its bpw order). */
    for (size_t k = 0; k < m->ncols; k++) {
        const group *g = &gs[m->cols[k]];
        for (size_t i = 0; i < g->nrows; i++) {
            if (!ql_report_row_compared(&g->rows[i]))
                continue;
            bool seen = false;
            for (size_t r = 0; r < m->nrows && !seen; r++)
                seen = strcmp(m->rows[r].hash, g->rows[i].hash) == 0;
            if (seen)
                continue;
            ql_report_texts_row *tr = realloc(m->rows, (m->nrows + 1) * sizeof *m->rows);
            if (!tr)
                return m->nrows ? m->ncols : 0;
            m->rows = tr;
            memset(&m->rows[m->nrows], 0, sizeof m->rows[m->nrows]);
            ql_strlcpy(m->rows[m->nrows].hash, g->rows[i].hash, sizeof m->rows[0].hash);
            ql_report_config_label(g, g->rows[i].axis, -1, m->rows[m->nrows].label,
                                   sizeof m->rows[0].label);
            m->nrows++;
        }
    }
    for (size_t r = 0; r < m->nrows; r++)
        for (size_t k = 0; k < m->ncols; k++) {
            const group *g = &gs[m->cols[k]];
            m->rows[r].cell[k] = NULL;
            for (size_t i = 0; i < g->nrows; i++)
                if (strcmp(g->rows[i].hash, m->rows[r].hash) == 0)
                    m->rows[r].cell[k] = &g->rows[i];
        }
    return m->ncols;
}

void ql_report_texts_free(ql_report_texts *m)
{
    free(m->rows);
    memset(m, 0, sizeof *m);
}

/* The cell of a matrix: mean KLD, or ln PPL ratio ± its error. */
void ql_report_texts_cell(const ql_report_row *r, bool kld, char *buf, size_t size)
{
    if (!r || (kld ? isnan(r->v[QL_METRIC_kld_mean]) : isnan(r->v[QL_METRIC_ln_ppl_ratio]))) {
        snprintf(buf, size, "—");
        return;
    }
    if (kld) {
        ql_metric_format(QL_METRIC_kld_mean, r->v[QL_METRIC_kld_mean], buf, size);
        return;
    }
    snprintf(buf, size, "%+.4f ± %.4f%s", r->v[QL_METRIC_ln_ppl_ratio],
             r->v[QL_METRIC_ln_ppl_ratio_err],
             ql_beats_reference(r->v[QL_METRIC_ln_ppl_ratio], r->v[QL_METRIC_ln_ppl_ratio_err])
                 ? " (!)"
                 : "");
}

bool ql_report_texts_effect(const group *g, const ql_report_row *r, char *buf, size_t size)
{
    snprintf(buf, size, "—");
    if (!r)
        return false;
    const size_t ix = (size_t)(r - g->rows);
    for (size_t p = 0; p < g->npairs; p++) {
        const ql_report_pair *pr = &g->pairs[p];
        if (pr->axis != QL_AXIS_IMATRIX || pr->b != ix)
            continue;
        const ql_compare_value *v = &pr->cmp.v[QL_CMP_KLD];
        const double base = g->rows[pr->a].v[QL_METRIC_kld_mean];
        if (!v->ok || !(base > 0.0))
            return true;
        snprintf(buf, size, "%+.1f%% [%+.1f, %+.1f]%s", 100.0 * v->diff.estimate / base,
                 100.0 * v->diff.lo / base, 100.0 * v->diff.hi / base,
                 ql_ci_excludes_zero(&v->diff) ? " *" : "");
        return true;
    }
    return false;
}

/* Whether a matrix row has an imatrix to compare with imatrix none. */
static bool has_effect(const group *gs, const ql_report_texts *m, size_t r)
{
    for (size_t k = 0; k < m->ncols; k++) {
        char cell[96];
        if (ql_report_texts_effect(&gs[m->cols[k]], m->rows[r].cell[k], cell, sizeof cell))
            return true;
    }
    return false;
}

ql_status ql_report_md_texts(const group *gs, size_t ng, FILE *out, ql_error *err)
{
    (void)err;
    for (size_t i = 0; i < ng; i++) {
        ql_report_texts m;
        if (!ql_report_texts_matrix(gs, ng, i, &m))
            continue;
        const group *g0 = &gs[i];
        fprintf(out, "\n### Configs × texts · %s · ctx %d · %d chunks\n", g0->model, g0->ctx,
                g0->chunks);
        for (int kld = 1; kld >= 0; kld--) {
            fprintf(out, "\n%s, each text against its own reference%s:\n\n",
                    kld ? "Mean KLD" : "ln(PPL(Q)/PPL(ref)) ± its paired standard error",
                    kld ? "" : " ((!): below the reference beyond its interval, look at KLD)");
            fputs("| config |", out);
            for (size_t k = 0; k < m.ncols; k++)
                fprintf(out, " %s |", gs[m.cols[k]].dataset);
            fputs("\n|---|", out);
            for (size_t k = 0; k < m.ncols; k++)
                fputs("---:|", out);
            fputc('\n', out);
            for (size_t r = 0; r < m.nrows; r++) {
                fprintf(out, "| %s |", m.rows[r].label);
                for (size_t k = 0; k < m.ncols; k++) {
                    char cell[96];
                    ql_report_texts_cell(m.rows[r].cell[k], kld != 0, cell, sizeof cell);
                    fprintf(out, " %s |", cell);
                }
                fputc('\n', out);
            }
        }
        bool any = false;
        for (size_t r = 0; r < m.nrows && !any; r++)
            any = has_effect(gs, &m, r);
        if (any) {
            fputs("\nWhat each importance matrix does to the mean KLD on each text, against the "
                  "same config with imatrix none: the relative change and its 95% paired-bootstrap "
                  "interval over chunks (* : the interval excludes 0):\n\n| config |",
                  out);
            for (size_t k = 0; k < m.ncols; k++)
                fprintf(out, " %s |", gs[m.cols[k]].dataset);
            fputs("\n|---|", out);
            for (size_t k = 0; k < m.ncols; k++)
                fputs("---:|", out);
            fputc('\n', out);
            for (size_t r = 0; r < m.nrows; r++) {
                if (!has_effect(gs, &m, r))
                    continue;
                fprintf(out, "| %s |", m.rows[r].label);
                for (size_t k = 0; k < m.ncols; k++) {
                    char cell[96];
                    ql_report_texts_effect(&gs[m.cols[k]], m.rows[r].cell[k], cell, sizeof cell);
                    fprintf(out, " %s |", cell);
                }
                fputc('\n', out);
            }
        }
        ql_report_texts_free(&m);
    }
    return QL_OK;
}
