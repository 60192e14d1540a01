/* The report's CSV files (report_csv.h): formats.csv, tensor-types.csv and
 * sensitivity.csv, full precision, for scripts and spreadsheets. */
#include "results/report_csv.h"

#include <string.h>

#include "base/table.h"
#include "base/util.h"
#include "results/types_table.h"

typedef ql_report_row row;
typedef ql_report_group group;

/* formats.csv: every finished config of every group, full precision: the group's
 * columns, every axis and the metrics the list puts in the CSV. */
static ql_status write_formats_csv(ql_report_writer *c, group *gs, size_t ng, ql_error *err)
{
    enum { G_MODEL, G_DATASET, G_CTX, G_CHUNKS, G_HASH, N_G };
    static const char *const group_cols[N_G] = {"model", "dataset", "ctx", "chunks", "config_hash"};
    ql_table_column cols[N_G + QL_AXIS_COUNT + QL_N_METRICS];
    size_t nc = 0;
    for (int i = 0; i < N_G; i++)
        cols[nc++] = (ql_table_column){group_cols[i], NULL, false};
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        cols[nc++] = (ql_table_column){ql_axis_name((ql_axis)a), NULL, false};
    /* The metrics the list puts in the CSV, in report order. */
    ql_metric_id all[QL_N_METRICS], ids[QL_N_METRICS];
    size_t n_all = ql_metrics_reported(all), nm = 0;
    for (size_t k = 0; k < n_all; k++)
        if (ql_metric_get(all[k])->flags & QL_METRIC_CSV)
            ids[nm++] = all[k];
    for (size_t m = 0; m < nm; m++)
        cols[nc++] = (ql_table_column){ql_metric_get(ids[m])->name, NULL, true};
    ql_table *t = ql_table_alloc(cols, nc);
    if (!t)
        return ql_report_oom(err);
    ql_status rc = QL_OK;
    char buf[64];
    for (size_t i = 0; i < ng && !rc; i++) {
        const group *g = &gs[i];
        for (size_t k = 0; k < g->nrows && !rc; k++) {
            const row *r = &g->rows[k];
            if ((rc = ql_table_row(t, err)) || (rc = ql_table_put(t, g->model, err)) ||
                (rc = ql_table_put(t, g->dataset, err)) ||
                (rc = ql_table_putf(t, err, "%d", g->ctx)) ||
                (rc = ql_table_putf(t, err, "%d", g->chunks)) ||
                (rc = ql_table_put(t, r->hash, err)))
                break;
            for (int a = 0; a < QL_AXIS_COUNT && !rc; a++)
                rc = ql_table_put(t, r->axis[a], err);
            for (size_t m = 0; m < nm && !rc; m++)
                rc = ql_table_put(t, ql_fmt_exact(r->v[ids[m]], buf, sizeof buf), err);
        }
    }
    ql_doc d;
    if (!rc && !(rc = ql_doc_open(&d, err))) {
        ql_table_write_csv(t, d.f);
        rc = ql_report_doc_save(c, &d, "formats.csv", err);
    }
    ql_table_free(t);
    return rc;
}

/* tensor-types.csv: every tensor of every config with per-tensor records, after the
 * group's columns; not written when no config has any. */
static ql_status write_types_csv(ql_report_writer *c, group *gs, size_t ng, ql_error *err)
{
    bool any = false;
    for (size_t i = 0; i < ng; i++)
        any |= !ql_types_table_empty(gs[i].types);
    if (!any)
        return QL_OK;
    static const char *const group_cols[] = {"model", "dataset", "ctx", "chunks"};
    enum { N_G = sizeof group_cols / sizeof group_cols[0] };
    const ql_table_column *tc;
    size_t nt = ql_types_table_csv_columns(&tc);
    ql_table_column cols[N_G + 16];
    QL_ASSERT(nt <= 16);
    for (size_t i = 0; i < N_G; i++)
        cols[i] = (ql_table_column){group_cols[i], NULL, false};
    memcpy(cols + N_G, tc, nt * sizeof *tc);
    ql_table *t = ql_table_alloc(cols, N_G + nt);
    if (!t)
        return ql_report_oom(err);
    ql_status rc = QL_OK;
    for (size_t i = 0; i < ng && !rc; i++) {
        char ctx_s[32], chunks_s[32];
        snprintf(ctx_s, sizeof ctx_s, "%d", gs[i].ctx);
        snprintf(chunks_s, sizeof chunks_s, "%d", gs[i].chunks);
        const char *prefix[N_G] = {gs[i].model, gs[i].dataset, ctx_s, chunks_s};
        rc = ql_types_table_csv_rows(gs[i].types, t, prefix, N_G, err);
    }
    ql_doc d;
    if (!rc && !(rc = ql_doc_open(&d, err))) {
        ql_table_write_csv(t, d.f);
        rc = ql_report_doc_save(c, &d, "tensor-types.csv", err);
    }
    ql_table_free(t);
    return rc;
}

/* sensitivity.csv: the sensitivities each group shows, after the set's columns, once
 * per model (groups of one model show the same set); not written when there are none. */
static ql_status write_sens_csv(ql_report_writer *c, group *gs, size_t ng, ql_error *err)
{
    bool any = false;
    for (size_t i = 0; i < ng; i++)
        any |= gs[i].sens.nrows > 0;
    if (!any)
        return QL_OK;
    static const char *const set_cols[] = {"model",  "text",           "text_sha256",    "ctx",
                                           "chunks", "imatrix_sha256", "metrics_version"};
    static const char *const row_cols[] = {"tensor",       "layer",        "kind",
                                           "type",         "bytes",        "kld_mean",
                                           "kld_mean_err", "ln_ppl_ratio", "ln_ppl_ratio_err",
                                           "seconds"};
    enum {
        N_SET = sizeof set_cols / sizeof set_cols[0],
        N_COLS = N_SET + sizeof row_cols / sizeof row_cols[0]
    };
    ql_table_column cols[N_COLS];
    for (size_t k = 0; k < N_COLS; k++)
        cols[k] = (ql_table_column){k < N_SET ? set_cols[k] : row_cols[k - N_SET], NULL, false};
    ql_table *t = ql_table_alloc(cols, N_COLS);
    if (!t)
        return ql_report_oom(err);
    ql_status rc = QL_OK;
    for (size_t i = 0; i < ng && !rc; i++) {
        const group *g = &gs[i];
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(gs[j].model_sha, g->model_sha) == 0;
        if (seen)
            continue;
        const ql_report_sens_set *ss = &g->sens;
        for (size_t k = 0; k < ss->nrows && !rc; k++) {
            const ql_report_sens *r = &ss->rows[k];
            char b[5][64];
            if ((rc = ql_table_row(t, err)) || (rc = ql_table_put(t, g->model, err)) ||
                (rc = ql_table_put(t, ss->text, err)) ||
                (rc = ql_table_put(t, ss->text_sha, err)) ||
                (rc = ql_table_putf(t, err, "%d", ss->ctx)) ||
                (rc = ql_table_putf(t, err, "%lld", (long long)ss->chunks)) ||
                (rc = ql_table_put(t, ss->imatrix_sha, err)) ||
                (rc = ql_table_putf(t, err, "%d", ss->metrics_version)) ||
                (rc = ql_table_put(t, r->tensor, err)) ||
                (rc = ql_table_putf(t, err, "%lld", (long long)r->layer)) ||
                (rc = ql_table_put(t, r->kind, err)) || (rc = ql_table_put(t, r->type, err)) ||
                (rc = ql_table_putf(t, err, "%lld", (long long)r->bytes)) ||
                (rc = ql_table_put(t, ql_fmt_exact(r->kld_mean, b[0], sizeof b[0]), err)) ||
                (rc = ql_table_put(t, ql_fmt_exact(r->kld_mean_err, b[1], sizeof b[1]), err)) ||
                (rc = ql_table_put(t, ql_fmt_exact(r->ln_ppl_ratio, b[2], sizeof b[2]), err)) ||
                (rc = ql_table_put(t, ql_fmt_exact(r->ln_ppl_ratio_err, b[3], sizeof b[3]), err)))
                break;
            rc = ql_table_put(t, ql_fmt_exact(r->seconds, b[4], sizeof b[4]), err);
        }
    }
    ql_doc d;
    if (!rc && !(rc = ql_doc_open(&d, err))) {
        ql_table_write_csv(t, d.f);
        rc = ql_report_doc_save(c, &d, "sensitivity.csv", err);
    }
    ql_table_free(t);
    return rc;
}

ql_status ql_report_write_csv(ql_report_writer *c, ql_report_group *gs, size_t ng, ql_error *err)
{
    ql_status rc = write_formats_csv(c, gs, ng, err);
    if (!rc)
        rc = write_types_csv(c, gs, ng, err);
    if (!rc)
        rc = write_sens_csv(c, gs, ng, err);
    return rc;
}
