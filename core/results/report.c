/* qlab report's driver (report.h): per sweep, every group read from the store in one
 * read transaction (its rows, failures, sensitivities, tensor types; the leaves read
 * their own parts), then the files written: the plots (report_plot), report.md from its
 * own sections and those of report_pairs and report_texts, the CSV files (report_csv)
 * and report.html (report_html). What the leaves share with it is report_common. */
#include "results/report.h"

#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "base/doc.h"
#include "base/table.h"
#include "base/util.h"
#include "experiment/config.h"
#include "formats/types.h"
#include "results/analysis.h"
#include "results/plot.h"
#include "results/report_common.h"
#include "results/report_csv.h"
#include "results/report_html.h"
#include "results/report_pairs.h"
#include "results/report_plot.h"
#include "results/report_texts.h"
#include "results/types_table.h"

/* report.md marks what follows a group's table (comparisons, plots, the legend). */
#define DETAILS_BEGIN "<!-- details -->"
#define DETAILS_END   "<!-- /details -->"
/* Longest error text quoted in report.md (the CSV-free failure list). */
#define ERROR_TEXT_MAX 200

/* ================================================================ data */

typedef ql_report_row row;
typedef ql_report_failure failure;
typedef ql_report_group group;

/* One sweep: everything its files show, read before any is written. */
typedef struct {
    group *gs;
    size_t ng;
} sweep_data;

static void group_free(group *g)
{
    for (size_t i = 0; i < g->nrows; i++) {
        for (int a = 0; a < QL_AXIS_COUNT; a++)
            free(g->rows[i].axis[a]);
        free(g->rows[i].types_used);
        free(g->rows[i].fallback_note);
    }
    for (size_t i = 0; i < g->nfails; i++) {
        for (int a = 0; a < QL_AXIS_COUNT; a++)
            free(g->fails[i].axis[a]);
        free(g->fails[i].error);
    }
    free(g->rows);
    free(g->fails);
    free(g->pts);
    free(g->pairs);
    free(g->fits);
    free(g->sens.text);
    free(g->sens.text_sha);
    free(g->sens.imatrix_sha);
    free(g->sens.rows);
    free(g->sens.erows);
    ql_types_table_free(g->types);
    free(g->layers);
    free(g->numbered);
    free(g->model_sha);
    free(g->model);
    free(g->arch);
    free(g->dataset_sha);
    free(g->dataset);
    memset(g, 0, sizeof *g);
}

/* ================================================================ loading */

static ql_status list_sweeps(ql_report_writer *c, char ***out, size_t *n, ql_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    ql_status rc =
        ql_report_prepare(c, "SELECT DISTINCT sweep FROM sweep_runs ORDER BY sweep", &st, err);
    if (rc)
        return rc;
    char **names = NULL;
    size_t cap = 0;
    for (;;) {
        bool more;
        if ((rc = ql_report_step(c, st, &more, err)) || !more)
            break;
        if (!ql_grow((void **)&names, &cap, *n + 1, sizeof *names)) {
            rc = ql_report_oom(err);
            break;
        }
        if (!(names[*n] = ql_report_col_string(st, 0))) {
            rc = ql_report_oom(err);
            break;
        }
        (*n)++;
    }
    sqlite3_finalize(st);
    if (rc) { /* a failed read leaves nothing to free */
        for (size_t i = 0; i < *n; i++)
            free(names[i]);
        free(names);
        *n = 0;
        return rc;
    }
    *out = names;
    return rc;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static ql_status load_groups(ql_report_writer *c, group **out, size_t *n, ql_error *err)
{
    static const char sql[] =
        "SELECT mo.sha256, coalesce(mo.name, mo.path), mo.arch, mo.params, d.sha256, d.name,"
        " r.ctx, r.chunks, sum(r.status = 'done'), sum(r.status = 'failed'),"
        " sum(r.status = 'running')"
        " FROM sweep_runs s JOIN runs r ON r.id = s.run_id"
        " JOIN models mo ON mo.id = r.model_id JOIN datasets d ON d.id = r.dataset_id"
        " WHERE s.sweep = ?1 GROUP BY r.model_id, r.dataset_id, r.ctx, r.chunks"
        " ORDER BY 2, 1, d.name, d.sha256, r.ctx, r.chunks";
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    ql_status rc = ql_report_prepare(c, sql, &st, err);
    if (rc)
        return rc;
    group *gs = NULL;
    size_t cap = 0;
    if ((rc = ql_report_bind_text(c, st, 1, c->sweep, err)))
        goto out;
    for (;;) {
        bool more;
        if ((rc = ql_report_step(c, st, &more, err)) || !more)
            break;
        if (!ql_grow((void **)&gs, &cap, *n + 1, sizeof *gs)) {
            rc = ql_report_oom(err);
            break;
        }
        group *g = &gs[*n];
        memset(g, 0, sizeof *g);
        (*n)++;
        g->model_sha = ql_report_col_string(st, 0);
        g->model = ql_report_col_string(st, 1);
        g->arch = ql_report_col_string(st, 2);
        g->params = sqlite3_column_type(st, 3) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 3);
        g->dataset_sha = ql_report_col_string(st, 4);
        g->dataset = ql_report_col_string(st, 5);
        g->ctx = sqlite3_column_int(st, 6);
        g->chunks = sqlite3_column_int(st, 7);
        g->done = sqlite3_column_int64(st, 8);
        g->failed = sqlite3_column_int64(st, 9);
        g->running = sqlite3_column_int64(st, 10);
        if (!g->model_sha || !g->model || !g->arch || !g->dataset_sha || !g->dataset) {
            rc = ql_report_oom(err);
            break;
        }
    }
out:
    sqlite3_finalize(st);
    *out = gs;
    return rc;
}

/* Binds sweep, model, text, ctx, chunks at ?1..?5. */
static ql_status bind_group(ql_report_writer *c, sqlite3_stmt *st, const group *g, ql_error *err)
{
    ql_status rc;
    if ((rc = ql_report_bind_text(c, st, 1, c->sweep, err)) ||
        (rc = ql_report_bind_text(c, st, 2, g->model_sha, err)) ||
        (rc = ql_report_bind_text(c, st, 3, g->dataset_sha, err)) ||
        (rc = ql_report_bind_int(c, st, 4, g->ctx, err)))
        return rc;
    return ql_report_bind_int(c, st, 5, g->chunks, err);
}

/* A select list of every axis (prefix: "" or "c.") into sql at *off. */
static void add_axes(char *sql, size_t size, size_t *off, const char *prefix)
{
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        *off +=
            (size_t)snprintf(sql + *off, size - *off, ", %s%s", prefix, ql_axis_name((ql_axis)a));
}

static ql_status load_rows(ql_report_writer *c, group *g, ql_error *err)
{
    char sql[8192];
    size_t off = (size_t)snprintf(sql, sizeof sql, "SELECT run_id, config_hash");
    add_axes(sql, sizeof sql, &off, "");
    for (int v = 0; v < QL_N_METRICS; v++)
        off += (size_t)snprintf(sql + off, sizeof sql - off, ", %s",
                                ql_metric_get((ql_metric_id)v)->name);
    off += (size_t)snprintf(sql + off, sizeof sql - off, ", applies, types_used, fallback_note");
    off += (size_t)snprintf(sql + off, sizeof sql - off,
                            " FROM sweep_results WHERE sweep = ?1 AND model_sha256 = ?2 AND"
                            " dataset_sha256 = ?3 AND ctx = ?4 AND chunks = ?5"
                            " ORDER BY bpw IS NULL, bpw");
    add_axes(sql, sizeof sql, &off, "");
    off += (size_t)snprintf(sql + off, sizeof sql - off, ", config_hash");
    QL_ASSERT(off + 1 < sizeof sql);

    sqlite3_stmt *st;
    ql_status rc = ql_report_prepare(c, sql, &st, err);
    if (rc)
        return rc;
    size_t cap = 0;
    if ((rc = bind_group(c, st, g, err)))
        goto out;
    for (;;) {
        bool more;
        if ((rc = ql_report_step(c, st, &more, err)) || !more)
            break;
        if (!ql_grow((void **)&g->rows, &cap, g->nrows + 1, sizeof *g->rows)) {
            rc = ql_report_oom(err);
            break;
        }
        row *r = &g->rows[g->nrows++];
        memset(r, 0, sizeof *r);
        r->run_id = sqlite3_column_int64(st, 0);
        const char *h = (const char *)sqlite3_column_text(st, 1);
        ql_strlcpy(r->hash, h ? h : "", sizeof r->hash);
        bool ok = true;
        for (int a = 0; a < QL_AXIS_COUNT; a++)
            ok = (r->axis[a] = ql_report_col_string(st, 2 + a)) != NULL && ok;
        for (int v = 0; v < QL_N_METRICS; v++)
            r->v[v] = ql_report_col_double(st, 2 + QL_AXIS_COUNT + v);
        int k = 2 + QL_AXIS_COUNT + QL_N_METRICS;
        r->applies = ql_applies_parse((const char *)sqlite3_column_text(st, k));
        ok = (r->types_used = ql_report_col_string(st, k + 1)) != NULL && ok;
        ok = (r->fallback_note = ql_report_col_string(st, k + 2)) != NULL && ok;
        if (!ok) {
            rc = ql_report_oom(err);
            break;
        }
    }
out:
    sqlite3_finalize(st);
    return rc;
}

static ql_status load_failures(ql_report_writer *c, group *g, ql_error *err)
{
    char sql[1024];
    size_t off = (size_t)snprintf(sql, sizeof sql, "SELECT r.error");
    add_axes(sql, sizeof sql, &off, "c.");
    off += (size_t)snprintf(sql + off, sizeof sql - off,
                            " FROM sweep_runs s JOIN runs r ON r.id = s.run_id"
                            " JOIN configs c ON c.id = r.config_id"
                            " JOIN models mo ON mo.id = r.model_id"
                            " JOIN datasets d ON d.id = r.dataset_id"
                            " WHERE s.sweep = ?1 AND mo.sha256 = ?2 AND d.sha256 = ?3 AND"
                            " r.ctx = ?4 AND r.chunks = ?5 AND r.status = 'failed'"
                            " ORDER BY c.weight_type, c.canonical");
    QL_ASSERT(off + 1 < sizeof sql);
    sqlite3_stmt *st;
    ql_status rc = ql_report_prepare(c, sql, &st, err);
    if (rc)
        return rc;
    size_t cap = 0;
    if ((rc = bind_group(c, st, g, err)))
        goto out;
    for (;;) {
        bool more;
        if ((rc = ql_report_step(c, st, &more, err)) || !more)
            break;
        if (!ql_grow((void **)&g->fails, &cap, g->nfails + 1, sizeof *g->fails)) {
            rc = ql_report_oom(err);
            break;
        }
        failure *f = &g->fails[g->nfails++];
        memset(f, 0, sizeof *f);
        bool ok = (f->error = ql_report_col_string(st, 0)) != NULL;
        for (int a = 0; a < QL_AXIS_COUNT; a++)
            ok = (f->axis[a] = ql_report_col_string(st, 1 + a)) != NULL && ok;
        if (!ok) {
            rc = ql_report_oom(err);
            break;
        }
    }
out:
    sqlite3_finalize(st);
    return rc;
}

/* An axis varies when the group's configs (finished or failed) differ in it. */
static void find_varying(group *g)
{
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        const char *first = NULL;
        g->varies[a] = false;
        for (size_t i = 0; i < g->nrows + g->nfails; i++) {
            const char *v = i < g->nrows ? g->rows[i].axis[a] : g->fails[i - g->nrows].axis[a];
            if (!first)
                first = v;
            else if (strcmp(first, v) != 0)
                g->varies[a] = true;
        }
    }
}

/* ---------------------------------------------------------------- sensitivities */

/* Picks the sensitivity set of the group's model with the most rows and counts the
 * sets. Ties go to the newest metrics version, then by text name, text, ctx, chunks and
 * importance matrix, so the same store always shows the same set. The report shows
 * tensors' rows (layer x kind); the rows of groups of tensors (objective kld:<grouping>)
 * are the store's. */
static ql_status pick_sens_set(ql_report_writer *c, group *g, ql_error *err)
{
    static const char sql[] =
        "SELECT text_sha256, coalesce(min(text), ''), ctx, chunks, imatrix_sha256,"
        " metrics_version, count(*), sum(seconds) FROM sensitivity WHERE model_sha256 = ?1"
        " AND grouping = 'tensor' GROUP BY text_sha256, ctx, chunks, imatrix_sha256, "
        "metrics_version"
        " ORDER BY count(*) DESC, metrics_version DESC, 2, text_sha256, ctx, chunks,"
        " imatrix_sha256";
    ql_report_sens_set *ss = &g->sens;
    sqlite3_stmt *st;
    ql_status rc = ql_report_prepare(c, sql, &st, err);
    if (rc)
        return rc;
    if ((rc = ql_report_bind_text(c, st, 1, g->model_sha, err)))
        goto out;
    for (;;) {
        bool more;
        if ((rc = ql_report_step(c, st, &more, err)) || !more)
            break;
        if (ss->nsets++)
            continue;
        ss->text_sha = ql_report_col_string(st, 0);
        ss->text = ql_report_col_string(st, 1);
        ss->ctx = sqlite3_column_int(st, 2);
        ss->chunks = sqlite3_column_int64(st, 3);
        ss->imatrix_sha = ql_report_col_string(st, 4);
        ss->metrics_version = sqlite3_column_int(st, 5);
        ss->seconds = ql_report_col_double(st, 7);
        if (!ss->text_sha || !ss->text || !ss->imatrix_sha) {
            rc = ql_report_oom(err);
            break;
        }
    }
out:
    sqlite3_finalize(st);
    return rc;
}

/* A type of a sensitivity set and its bits per weight (NAN: unknown to qlab). */
typedef struct {
    double bpw;
    const char *name;
} sens_type;

/* By bits per weight, unknown types last, then by name. */
static int cmp_sens_types(const void *pa, const void *pb)
{
    const sens_type *a = pa, *b = pb;
    if (a->bpw != b->bpw) {
        if (isnan(a->bpw) || isnan(b->bpw))
            return isnan(a->bpw) ? 1 : -1;
        return a->bpw < b->bpw ? -1 : 1;
    }
    return strcmp(a->name, b->name);
}

/* The set's types by bits per weight (the heatmap's panels, the lowest-bit type of
 * report.md's list), and each row's index among them. */
/* Each row's place among the set's types. */
static void set_type_ix(const ql_report_sens_set *ss, ql_report_sens *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        rows[i].type_ix = -1;
        for (size_t k = 0; k < ss->ntypes && rows[i].type_ix < 0; k++)
            if (strcmp(rows[i].type, ss->types[k]) == 0)
                rows[i].type_ix = (int)k;
    }
}

static void order_sens_types(ql_report_sens_set *ss)
{
    const char *names[QL_REPORT_SENS_TYPES];
    size_t n = 0;
    for (size_t i = 0; i < ss->nrows; i++)
        ql_strset_add(names, &n, QL_REPORT_SENS_TYPES, ss->rows[i].type);
    for (size_t i = 0; i < ss->n_erows; i++)
        ql_strset_add(names, &n, QL_REPORT_SENS_TYPES, ss->erows[i].type);
    sens_type by_bpw[QL_REPORT_SENS_TYPES];
    for (size_t k = 0; k < n; k++) {
        const ql_type_traits *t = ql_type_by_name(names[k]);
        by_bpw[k].bpw = t ? ql_type_bpw(t->type) : (double)NAN;
        by_bpw[k].name = names[k];
    }
    qsort(by_bpw, n, sizeof by_bpw[0], cmp_sens_types);
    for (size_t k = 0; k < n; k++) {
        ql_strlcpy(ss->types[k], by_bpw[k].name, sizeof ss->types[0]);
        ss->type_bpw[k] = by_bpw[k].bpw;
    }
    ss->ntypes = n;
    set_type_ix(ss, ss->rows, ss->nrows);
    set_type_ix(ss, ss->erows, ss->n_erows);
}

/* The rows of one grouping of the group's sensitivity set ('tensor' or 'expert') into
 * *rows. Expert rows ("blk.L.exp.E") in expert order, the number read from the name. */
static ql_status load_sens_rows(ql_report_writer *c, group *g, const char *grouping,
                                ql_report_sens **rows, size_t *nrows, ql_error *err)
{
    static const char sql[] =
        "SELECT tensor, layer, kind, type, bytes, kld_mean, kld_mean_err, ln_ppl_ratio,"
        " ln_ppl_ratio_err, seconds FROM sensitivity WHERE model_sha256 = ?1 AND"
        " text_sha256 = ?2 AND ctx = ?3 AND chunks = ?4 AND imatrix_sha256 = ?5 AND"
        " metrics_version = ?6 AND grouping = ?7 ORDER BY layer, length(tensor), tensor, type";
    ql_report_sens_set *ss = &g->sens;
    sqlite3_stmt *st;
    ql_status rc = ql_report_prepare(c, sql, &st, err);
    if (rc)
        return rc;
    size_t cap = 0;
    if ((rc = ql_report_bind_text(c, st, 1, g->model_sha, err)) ||
        (rc = ql_report_bind_text(c, st, 2, ss->text_sha, err)) ||
        (rc = ql_report_bind_int(c, st, 3, ss->ctx, err)) ||
        (rc = ql_report_bind_int(c, st, 4, ss->chunks, err)) ||
        (rc = ql_report_bind_text(c, st, 5, ss->imatrix_sha, err)) ||
        (rc = ql_report_bind_int(c, st, 6, ss->metrics_version, err)) ||
        (rc = ql_report_bind_text(c, st, 7, grouping, err)))
        goto out;
    for (;;) {
        bool more;
        if ((rc = ql_report_step(c, st, &more, err)) || !more)
            break;
        if (!ql_grow((void **)rows, &cap, *nrows + 1, sizeof **rows)) {
            rc = ql_report_oom(err);
            break;
        }
        ql_report_sens *r = &(*rows)[(*nrows)++];
        const char *tensor = (const char *)sqlite3_column_text(st, 0);
        const char *kind = (const char *)sqlite3_column_text(st, 2);
        const char *type = (const char *)sqlite3_column_text(st, 3);
        ql_strlcpy(r->tensor, tensor ? tensor : "", sizeof r->tensor);
        ql_strlcpy(r->kind, kind ? kind : "", sizeof r->kind);
        ql_strlcpy(r->type, type ? type : "", sizeof r->type);
        r->layer = sqlite3_column_int64(st, 1);
        r->bytes = sqlite3_column_int64(st, 4);
        r->kld_mean = ql_report_col_double(st, 5);
        r->kld_mean_err = ql_report_col_double(st, 6);
        r->ln_ppl_ratio = ql_report_col_double(st, 7);
        r->ln_ppl_ratio_err = ql_report_col_double(st, 8);
        r->seconds = ql_report_col_double(st, 9);
        const char *dot = strrchr(r->tensor, '.');
        r->expert = strcmp(grouping, "expert") == 0 && dot ? (int)strtol(dot + 1, NULL, 10) : -1;
    }
out:
    sqlite3_finalize(st);
    return rc;
}

/* Reads the sensitivities the report shows for the group's model (none: nrows 0). */
static ql_status load_sensitivity(ql_report_writer *c, group *g, ql_error *err)
{
    ql_report_sens_set *ss = &g->sens;
    ql_status rc = pick_sens_set(c, g, err);
    if (rc || !ss->nsets)
        return rc;
    if (!(rc = load_sens_rows(c, g, "tensor", &ss->rows, &ss->nrows, err)) &&
        !(rc = load_sens_rows(c, g, "expert", &ss->erows, &ss->n_erows, err)))
        order_sens_types(ss);
    return rc;
}

/* ================================================================ text helpers */

/* A file-name-safe version of s: characters outside [A-Za-z0-9._+-] become
 * '_', as does a leading '.'; "" becomes "_". Names the sweep directories and
 * the group suffixes of the plot files. */
static void slug(const char *s, char *buf, size_t size)
{
    size_t o = 0;
    for (; *s && o + 1 < size; s++) {
        char ch = *s;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' || ch == '+';
        buf[o++] = ok ? ch : '_';
    }
    buf[o] = '\0';
    if (buf[0] == '.')
        buf[0] = '_';
    if (!buf[0])
        ql_strlcpy(buf, "_", size);
}

/* ================================================================ report.md */

static ql_status put_metric(ql_table *t, const row *r, ql_metric_id id, ql_error *err)
{
    char text[160];
    ql_report_metric_text(r, id, text, sizeof text);
    return ql_table_put(t, *text ? text : NULL, err);
}

/* Writes the group's table of the configs whose types applied (fully or in part);
 * shown[id] is set for every metric column shown. A "types used" column follows the
 * axes when some config got its types on part of its weights only. */
static ql_status md_table(const group *g, FILE *out, bool shown[QL_N_METRICS], ql_error *err)
{
    ql_metric_id ids[QL_N_METRICS];
    size_t nm = ql_report_md_metrics(ids);
    enum { TYPES = QL_AXIS_COUNT, METRICS };
    ql_table_column cols[METRICS + QL_N_METRICS + 1];
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        cols[a] = (ql_table_column){ql_axis_get((ql_axis)a)->label, NULL, false};
    cols[TYPES] = (ql_table_column){"types used", NULL, false};
    for (size_t m = 0; m < nm; m++)
        cols[METRICS + m] = (ql_table_column){ql_metric_get(ids[m])->label, NULL, true};
    /* A file config's hash in a column of its own, last: it names the file's contents. */
    const size_t FILE_SHA = METRICS + nm;
    cols[FILE_SHA] = (ql_table_column){"file sha256", NULL, false};
    ql_table *t = ql_table_alloc(cols, FILE_SHA + 1);
    if (!t)
        return ql_report_oom(err);
    ql_status rc = QL_OK;
    bool partial = false, files = false;
    for (size_t i = 0; i < g->nrows && !rc; i++) {
        const row *r = &g->rows[i];
        if (!ql_report_row_compared(r))
            continue;
        partial = partial || r->applies == QL_APPLIES_PARTIAL;
        if ((rc = ql_table_row(t, err)))
            break;
        for (int a = 0; a < QL_AXIS_COUNT && !rc; a++) {
            char cell[QL_CONFIG_VALUE_MAX];
            rc = ql_table_put(t, ql_report_axis_cell(g, r->axis, a, cell, sizeof cell), err);
        }
        if (!rc)
            rc = ql_table_put(t, *r->types_used ? r->types_used : NULL, err);
        for (size_t m = 0; m < nm && !rc; m++)
            rc = put_metric(t, r, ids[m], err);
        char sha[65];
        const bool file = ql_report_is_file(r->axis[QL_AXIS_WEIGHT_TYPE], sha);
        files = files || file;
        if (!rc)
            rc = file && sha[0] ? ql_table_putf(t, err, "%.12s", sha) : ql_table_put(t, NULL, err);
    }
    if (!rc) {
        for (int a = 1; a < QL_AXIS_COUNT; a++)
            ql_table_hide(t, (size_t)a, !g->varies[a]);
        ql_table_hide(t, TYPES, !partial);
        ql_table_hide(t, FILE_SHA, !files);
        /* Empty metric columns go, unless the list keeps them (bpw, size). */
        for (size_t m = 0; m < nm; m++) {
            bool empty = !(ql_metric_get(ids[m])->flags & QL_METRIC_KEEP) &&
                         ql_table_col_empty(t, METRICS + m);
            ql_table_hide(t, METRICS + m, empty);
            if (!empty)
                shown[ids[m]] = true;
        }
        ql_table_write_md(t, out, QL_REPORT_NULL_TEXT);
        if (partial)
            fprintf(out, "\n\"types used\": the types the matmul weights got, by share of their "
                         "parameters, where some fell back (rows that do not split into the "
                         "type's blocks).\n");
    }
    ql_table_free(t);
    return rc;
}

/* The configs none of whose weights (or head, or embeddings) got the type they name:
 * listed apart, with what they measured instead and why. */
static void md_not_applicable(const group *g, FILE *out)
{
    bool any = false;
    for (size_t i = 0; i < g->nrows; i++) {
        const row *r = &g->rows[i];
        if (ql_report_row_compared(r))
            continue;
        if (!any)
            fprintf(out, "\nNot applicable (the types they name applied to no tensor of their "
                         "class; left out of the table, the fronts and the comparisons):\n\n");
        any = true;
        char label[512];
        ql_report_config_label(g, r->axis, -1, label, sizeof label);
        fprintf(out, "- %s: measured %s", label, r->types_used);
        if (*r->fallback_note)
            fprintf(out, " (%s)", r->fallback_note);
        fputc('\n', out);
    }
}

static void md_failures(const group *g, FILE *out)
{
    if (!g->nfails)
        return;
    fprintf(out, "\nFailed:\n\n");
    for (size_t i = 0; i < g->nfails; i++) {
        const failure *f = &g->fails[i];
        char label[512], text[ERROR_TEXT_MAX + 8];
        ql_report_config_label(g, f->axis, -1, label, sizeof label);
        /* First line, cut at ERROR_TEXT_MAX bytes on a UTF-8 boundary. */
        size_t n = strcspn(f->error, "\r\n"), cut = n;
        if (cut > ERROR_TEXT_MAX) {
            cut = ERROR_TEXT_MAX;
            while (cut > 0 && ((unsigned char)f->error[cut] & 0xc0) == 0x80)
                cut--;
        }
        snprintf(text, sizeof text, "%.*s%s", (int)cut, f->error, cut < n ? "…" : "");
        fprintf(out, "- %s: %s\n", label, text);
    }
}

/* The most sensitive tensors report.md lists. */
#define SENS_TOP 10

/* By mean KLD, largest first (NaN last), then by tensor name. */
static int cmp_sens_kld(const void *pa, const void *pb)
{
    const ql_report_sens *a = *(const ql_report_sens *const *)pa;
    const ql_report_sens *b = *(const ql_report_sens *const *)pb;
    if (a->kld_mean != b->kld_mean) {
        if (isnan(a->kld_mean) || isnan(b->kld_mean))
            return isnan(a->kld_mean) ? 1 : -1;
        return a->kld_mean > b->kld_mean ? -1 : 1;
    }
    return strcmp(a->tensor, b->tensor);
}

/* "v ± e" in the metric list's formats of both; "" without v. */
static void sens_pm(ql_metric_id id, double v, ql_metric_id eid, double e, char *buf, size_t size)
{
    char a[64], b[64];
    buf[0] = '\0';
    if (isnan(v))
        return;
    ql_metric_format(id, v, a, sizeof a);
    if (isnan(e)) {
        snprintf(buf, size, "%s", a);
        return;
    }
    ql_metric_format(eid, e, b, sizeof b);
    snprintf(buf, size, "%s ± %s", a, b);
}

/* report.md's section of the group's sensitivities: which set, how much of it, and the
 * tensors that suffer most at the lowest-bit type measured (where a fit's choices
 * matter most). */
static ql_status md_sensitivity(const group *g, FILE *out, ql_error *err)
{
    const ql_report_sens_set *ss = &g->sens;
    if (!ss->nrows)
        return QL_OK;
    const ql_report_sens **top = malloc(ss->nrows * sizeof *top);
    if (!top)
        return ql_report_oom(err);
    size_t n = 0, tensors = 0;
    for (size_t i = 0; i < ss->nrows; i++) {
        if (ss->rows[i].type_ix == 0)
            top[n++] = &ss->rows[i];
        /* Rows come by layer and tensor: a tensor's types are adjacent. */
        tensors += i == 0 || strcmp(ss->rows[i].tensor, ss->rows[i - 1].tensor) != 0;
    }
    qsort(top, n, sizeof *top, cmp_sens_kld);
    char types[QL_REPORT_SENS_TYPES * 34] = "", secs[32] = QL_REPORT_NULL_TEXT;
    size_t o = 0;
    for (size_t k = 0; k < ss->ntypes && o < sizeof types; k++)
        o += (size_t)snprintf(types + o, sizeof types - o, "%s%s", k ? ", " : "", ss->types[k]);
    if (!isnan(ss->seconds))
        snprintf(secs, sizeof secs, "%.2f s", ss->seconds);
    fprintf(out,
            "\nSensitivity (the mean KLD of the model with one tensor quantized alone, the rest "
            "unquantized; every (tensor, type) in sensitivity.csv):\n\n");
    fprintf(out, "- measured on %s, ctx %d, %lld chunks, imatrix %.12s, metrics version %d",
            ss->text, ss->ctx, (long long)ss->chunks, ss->imatrix_sha, ss->metrics_version);
    if (ss->nsets > 1)
        fprintf(out, " (the largest of the %zu sets stored for this model)", ss->nsets);
    fprintf(out, "\n- %zu (tensor, type) pairs: %zu tensors, %zu type%s (%s); %s of measuring\n",
            ss->nrows, tensors, ss->ntypes, ss->ntypes == 1 ? "" : "s", types, secs);

    const ql_table_column cols[] = {
        {"#", NULL, true},
        {"tensor", NULL, false},
        {"KLD mean", NULL, true},
        {"ln PPL ratio", NULL, true},
    };
    ql_table *t = ql_table_alloc(cols, sizeof cols / sizeof cols[0]);
    ql_status rc = t ? QL_OK : ql_report_oom(err);
    for (size_t k = 0; k < n && k < SENS_TOP && !rc; k++) {
        char kld[160], ppl[160];
        sens_pm(QL_METRIC_kld_mean, top[k]->kld_mean, QL_METRIC_kld_mean_err, top[k]->kld_mean_err,
                kld, sizeof kld);
        sens_pm(QL_METRIC_ln_ppl_ratio, top[k]->ln_ppl_ratio, QL_METRIC_ln_ppl_ratio_err,
                top[k]->ln_ppl_ratio_err, ppl, sizeof ppl);
        if ((rc = ql_table_row(t, err)) || (rc = ql_table_putf(t, err, "%zu", k + 1)) ||
            (rc = ql_table_put(t, top[k]->tensor, err)) ||
            (rc = ql_table_put(t, *kld ? kld : NULL, err)))
            break;
        rc = ql_table_put(t, *ppl ? ppl : NULL, err);
    }
    if (!rc) {
        fprintf(out, "\nMost sensitive at %s, the lowest-bit type measured:\n\n", ss->types[0]);
        ql_table_write_md(t, out, QL_REPORT_NULL_TEXT);
    }
    ql_table_free(t);
    free(top);
    return rc;
}

/* Links to the group's plots and the page: the images of the plots drawn, the
 * gnuplot scripts of the others (plots not asked for, gnuplot missing or failing on
 * them): only files that are there. */
static void md_plots(const group *g, FILE *out)
{
    if (!g->nplots)
        return;
    for (int drawn = 1; drawn >= 0; drawn--) {
        size_t k = 0;
        for (size_t i = 0; i < g->nplots; i++) {
            if (g->plot_drawn[i] != (drawn != 0))
                continue;
            if (k++ == 0)
                fputs(drawn ? "\nPlots:" : "\nPlots not drawn, their gnuplot scripts:", out);
            fprintf(out, "%s [%s](%s.%s)", k > 1 ? " ·" : "", g->plot_titles[i], g->plots[i],
                    drawn ? "svg" : "gp");
        }
        if (k)
            fputs(".\n", out);
    }
    fprintf(out, "All of it in one page: [report.html](report.html).\n");
}

/* The key of the numbered labels of the group's plots: the points whose labels had no
 * room, by their numbers, with the configs each stands for. */
static ql_status md_numbered(const group *g, FILE *out, ql_error *err)
{
    if (!g->nnumbered)
        return QL_OK;
    const ql_table_column cols[] = {
        {"plot", NULL, false},
        {"#", NULL, true},
        {"weights", NULL, false},
        {"configs", NULL, false},
    };
    ql_table *t = ql_table_alloc(cols, sizeof cols / sizeof cols[0]);
    if (!t)
        return ql_report_oom(err);
    ql_status rc = QL_OK;
    for (size_t i = 0; i < g->nnumbered && !rc; i++) {
        const ql_report_numbered *nb = &g->numbered[i];
        if ((rc = ql_table_row(t, err)) || (rc = ql_table_put(t, nb->plot_title, err)))
            break;
        rc = nb->number ? ql_table_putf(t, err, "%d", nb->number)
                        : ql_table_put(t, "(no room)", err);
        if (!rc && !(rc = ql_table_put(t, nb->text, err)))
            rc = ql_table_put(t, nb->configs, err);
    }
    if (!rc) {
        fprintf(out, "\nNumbered points (no room on the plot for their labels):\n\n");
        ql_table_write_md(t, out, QL_REPORT_NULL_TEXT);
    }
    ql_table_free(t);
    return rc;
}

static ql_status write_report_md(ql_report_writer *c, group *gs, size_t ng, ql_error *err)
{
    ql_doc d;
    ql_status rc = ql_doc_open(&d, err);
    if (rc)
        return rc;
    fprintf(d.f, "## Sweep %s\n", c->sweep);
    bool shown[QL_N_METRICS] = {false};
    for (size_t i = 0; i < ng && !rc; i++) {
        const group *g = &gs[i];
        if (ng > 1)
            fprintf(d.f, "\n### %s · %s · ctx %d · %d chunks\n", g->model, g->dataset, g->ctx,
                    g->chunks);
        fputc('\n', d.f);
        ql_report_md_summary(g, d.f);
        fputc('\n', d.f);
        if (g->nrows)
            rc = md_table(g, d.f, shown, err);
        else
            fprintf(d.f, "No finished configs.\n");
        md_not_applicable(g, d.f);
        ql_report_md_warnings(g, d.f);
        md_failures(g, d.f);
        /* The fits against what they compete with belong to the table's result. */
        if (!rc)
            rc = ql_report_md_fits(g, d.f, err);
        /* What follows is marked, so that a copy of the tables can leave it out
         * (scripts/readme-tables.sh). */
        fputs("\n" DETAILS_BEGIN "\n", d.f);
        if (!rc)
            rc = ql_types_table_write_md(g->types, d.f, QL_REPORT_NULL_TEXT, err);
        if (!rc)
            rc = ql_report_md_pairs(g, d.f, err);
        if (!rc)
            rc = md_sensitivity(g, d.f, err);
        md_plots(g, d.f);
        if (!rc)
            rc = md_numbered(g, d.f, err);
        fputs(DETAILS_END "\n", d.f);
    }
    if (!rc)
        rc = ql_report_md_texts(gs, ng, d.f, err);
    if (rc) {
        ql_doc_discard(&d);
        return rc;
    }
    /* The legend: what the columns shown mean, in report order. */
    ql_metric_id ids[QL_N_METRICS];
    size_t nm = ql_report_md_metrics(ids);
    fputs("\n" DETAILS_BEGIN "\n", d.f);
    const char *sep = "";
    for (size_t m = 0; m < nm; m++) {
        const ql_metric_info *mi = ql_metric_get(ids[m]);
        if (shown[ids[m]] && mi->note) {
            fprintf(d.f, "%s%s", sep, mi->note);
            sep = " ";
        }
    }
    if (*sep == ' ')
        fputc('\n', d.f);
    fputs(DETAILS_END "\n", d.f);
    return ql_report_doc_save(c, &d, "report.md", err);
}

/* Whether a run has per-tensor errors inside the blocks. */
static ql_status has_layer_tensors(ql_report_writer *c, int64_t run_id, bool *yes, ql_error *err)
{
    sqlite3_stmt *st;
    ql_status rc = ql_report_prepare(
        c, "SELECT EXISTS (SELECT 1 FROM tensor_errors WHERE run_id = ?1 AND layer IS NOT NULL)",
        &st, err);
    if (rc)
        return rc;
    bool more = false;
    if (!(rc = ql_report_bind_int(c, st, 1, run_id, err)) &&
        !(rc = ql_report_step(c, st, &more, err)))
        *yes = more && sqlite3_column_int(st, 0) != 0;
    sqlite3_finalize(st);
    return rc;
}

static bool hash_matches(const char *hash, const char *prefix)
{
    for (; *prefix; prefix++, hash++) {
        char p = *prefix >= 'A' && *prefix <= 'F' ? (char)(*prefix - 'A' + 'a') : *prefix;
        if (*hash != p)
            return false;
    }
    return true;
}

/* The run of a group whose per-tensor errors are plotted, or NULL. */
static ql_status tensor_run(ql_report_writer *c, const group *g, const row **out, ql_error *err)
{
    *out = NULL;
    const char *prefix = c->opt->tensors;
    for (size_t i = 0; i < g->nrows; i++) {
        const row *r = &g->rows[i];
        bool ok = false;
        if (prefix && !hash_matches(r->hash, prefix))
            continue;
        ql_status rc = has_layer_tensors(c, r->run_id, &ok, err);
        if (rc)
            return rc;
        if (!ok)
            continue;
        if (prefix) {
            *out = r;
            c->tensors_found++;
            return QL_OK;
        }
        /* Largest mean KLD; ties: lower bpw (rows come in bpw order), then hash. */
        const row *b = *out;
        if (!b || (!isnan(r->v[QL_METRIC_kld_mean]) &&
                   (isnan(b->v[QL_METRIC_kld_mean]) ||
                    r->v[QL_METRIC_kld_mean] > b->v[QL_METRIC_kld_mean])))
            *out = r;
    }
    return QL_OK;
}

/* A --tensors prefix must name one config of the sweep. */
static ql_status check_tensor_prefix(ql_report_writer *c, const group *gs, size_t ng, ql_error *err)
{
    const char *prefix = c->opt->tensors, *first = NULL;
    if (!prefix)
        return QL_OK;
    for (size_t i = 0; i < ng; i++)
        for (size_t k = 0; k < gs[i].nrows; k++) {
            const char *h = gs[i].rows[k].hash;
            if (!hash_matches(h, prefix))
                continue;
            if (first && strcmp(first, h) != 0)
                return ql_error_set(err, QL_EINVAL,
                                    "--tensors %s: several configs of sweep '%s' match (%.12s, "
                                    "%.12s); give more digits",
                                    prefix, c->sweep, first, h);
            first = h;
        }
    return QL_OK;
}

/* ================================================================ tensor types */

/* The group's table of tensor types, one row per finished config, labelled as the
 * failures are. */
static ql_status load_types(ql_report_writer *c, group *g, ql_error *err)
{
    int64_t *ids = calloc(g->nrows ? g->nrows : 1, sizeof *ids);
    char **labels = calloc(g->nrows ? g->nrows : 1, sizeof *labels);
    const char **hashes = calloc(g->nrows ? g->nrows : 1, sizeof *hashes);
    ql_status rc = ids && labels && hashes ? QL_OK : ql_report_oom(err);
    for (size_t i = 0; i < g->nrows && !rc; i++) {
        char label[512];
        ql_report_config_label(g, g->rows[i].axis, -1, label, sizeof label);
        ids[i] = g->rows[i].run_id;
        hashes[i] = g->rows[i].hash;
        if (!(labels[i] = ql_strdup(label)))
            rc = ql_report_oom(err);
    }
    if (!rc)
        rc = ql_types_table_load(c->store, ids, (const char *const *)labels, hashes, g->nrows,
                                 &g->types, err);
    for (size_t i = 0; labels && i < g->nrows; i++)
        free(labels[i]);
    free(labels);
    free(hashes);
    free(ids);
    return rc;
}

/* ================================================================ driver */

/* Reads everything the files of sweep c->sweep show. */
static ql_status load_sweep(ql_report_writer *c, sweep_data *sd, ql_error *err)
{
    ql_status rc = load_groups(c, &sd->gs, &sd->ng, err);
    for (size_t i = 0; i < sd->ng && !rc; i++) {
        group *g = &sd->gs[i];
        if ((rc = load_rows(c, g, err)) || (rc = load_failures(c, g, err)))
            break;
        find_varying(g);
        if ((rc = load_types(c, g, err)) || (rc = load_sensitivity(c, g, err)))
            break;
        if (sd->ng > 1) {
            char m[200], d[200];
            slug(g->model, m, sizeof m);
            slug(g->dataset, d, sizeof d);
            snprintf(g->suffix, sizeof g->suffix, "-%s-%s-ctx%d-c%d", m, d, g->ctx, g->chunks);
        }
    }
    if (rc || (rc = check_tensor_prefix(c, sd->gs, sd->ng, err)))
        return rc;
    for (size_t i = 0; i < sd->ng && !rc; i++) {
        group *g = &sd->gs[i];
        if (g->nrows && !(rc = tensor_run(c, g, &g->tensor_row, err)) && g->tensor_row)
            rc = ql_report_load_tensors(c, g, err);
        if (!rc)
            rc = ql_report_load_pairs(c, g, err);
        if (!rc)
            rc = ql_report_load_fits(c, g, err);
        if (!rc)
            rc = ql_report_load_layers(c, g, err);
    }
    return rc;
}

/* Writes the files of sweep c->sweep from what load_sweep read. */
static ql_status write_sweep(ql_report_writer *c, sweep_data *sd, ql_error *err)
{
    char name[1024];
    slug(c->sweep, name, sizeof name);
    if ((size_t)snprintf(c->dir, sizeof c->dir, "%s/%s", c->opt->out_dir, name) >= sizeof c->dir)
        return ql_error_set(err, QL_EINVAL, "%s: output path too long", c->opt->out_dir);
    ql_status rc = ql_make_dirs(c->dir, err);
    if (rc)
        return rc;
    if (c->opt->log)
        fprintf(c->opt->log, "sweep %s:\n", c->sweep);
    /* The plots first: report.md links them and report.html embeds their images. */
    for (size_t i = 0; i < sd->ng && !rc; i++)
        if (sd->gs[i].nrows)
            rc = ql_report_write_plots(c, &sd->gs[i], err);
    if (!rc)
        rc = ql_report_plot_texts(c, sd->gs, sd->ng, err);
    if (rc || (rc = write_report_md(c, sd->gs, sd->ng, err)) ||
        (rc = ql_report_write_csv(c, sd->gs, sd->ng, err)) ||
        (rc = ql_report_write_html(c, sd->gs, sd->ng, err)))
        return rc;
    c->sum->sweeps++;
    return rc;
}

static void sweep_data_free(sweep_data *sd, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        for (size_t i = 0; i < sd[k].ng; i++)
            group_free(&sd[k].gs[i]);
        free(sd[k].gs);
    }
    free(sd);
}

ql_status ql_report_write(ql_store *s, const ql_report_options *opt, ql_report_summary *summary,
                          ql_error *err)
{
    memset(summary, 0, sizeof *summary);
    ql_report_writer c = {.store = s, .opt = opt, .sum = summary};
    sweep_data *data = NULL;
    if (opt->tensors) {
        size_t n = strlen(opt->tensors);
        bool hex = n >= 1 && n <= 64;
        for (size_t i = 0; i < n && hex; i++)
            hex = strchr("0123456789abcdefABCDEF", opt->tensors[i]) != NULL;
        if (!hex)
            return ql_error_set(err, QL_EINVAL,
                                "--tensors '%s': not a config hash prefix (hex digits; see "
                                "'qlab query configs')",
                                opt->tensors);
    }
    char **sweeps;
    size_t n;
    ql_status rc = list_sweeps(&c, &sweeps, &n, err);
    if (rc)
        return rc;
    if (n == 0) {
        rc =
            ql_error_set(err, QL_ENOTFOUND, "%s: no sweeps in this database (run qlab sweep first)",
                         ql_store_path(s));
        goto out;
    }
    bool found = !opt->sweep;
    for (size_t i = 0; i < n; i++)
        found = found || strcmp(opt->sweep, sweeps[i]) == 0;
    if (!found) {
        /* List what there is, within the message's room. */
        char list[1024];
        size_t o = 0;
        for (size_t i = 0; i < n && o < sizeof list; i++)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", sweeps[i]);
        rc = ql_error_set(err, QL_ENOTFOUND, "%s: no sweep '%s' (sweeps: %s)", ql_store_path(s),
                          opt->sweep, list);
        goto out;
    }
    /* Everything is read first, in one read transaction (a consistent snapshot of a
     * store a sweep may be writing), so that no file is written when reading fails. */
    if (!(data = calloc(n, sizeof *data))) {
        rc = ql_report_oom(err);
        goto out;
    }
    if ((rc = ql_store_exec(s, "BEGIN", "report: reading", err)))
        goto out;
    for (size_t i = 0; i < n && !rc; i++) {
        if (opt->sweep && strcmp(opt->sweep, sweeps[i]) != 0)
            continue;
        c.sweep = sweeps[i];
        rc = load_sweep(&c, &data[i], err);
    }
    if (!rc && opt->tensors && c.tensors_found == 0)
        rc = ql_error_set(err, QL_ENOTFOUND,
                          "--tensors %s: no finished run with per-tensor errors of a config with "
                          "this hash prefix in the reported sweep%s",
                          opt->tensors, opt->sweep ? "" : "s");
    if (rc || (rc = ql_store_exec(s, "COMMIT", "report: reading", err)))
        goto out;
    /* Each sweep on its own: one that cannot be written is named and the next one
     * written all the same; the first failure is the result. */
    for (size_t i = 0; i < n; i++) {
        if (opt->sweep && strcmp(opt->sweep, sweeps[i]) != 0)
            continue;
        c.sweep = sweeps[i];
        ql_error e;
        ql_error_clear(&e);
        if (write_sweep(&c, &data[i], &e) == QL_OK)
            continue;
        summary->sweeps_failed++;
        ql_report_add_problem(&c, "", "", e.msg);
        if (!rc) {
            rc = e.status;
            ql_error_set(err, e.status, "sweep %s: %s", sweeps[i], e.msg);
        }
    }
out:
    ql_store_rollback(s); /* a no-op unless reading failed */
    sweep_data_free(data, data ? n : 0);
    free_names(sweeps, n);
    return rc;
}
