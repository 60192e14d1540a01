/* qlab report (report_texts.h): what a sweep of several evaluation texts shows beyond
 * one table per text (issue 28): report.md's config x text matrices of mean KLD and ln
 * PPL ratio (the matrices and their cells are report_common's, shared with report.html
 * and the plots), and each group's warnings (calibration overlapping the evaluated
 * text, or unknown; a reference beaten beyond its interval). */
#include <stdio.h>

#include "results/report_texts.h"

typedef ql_report_group group;

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
