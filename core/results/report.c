#include "results/report.h"

#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "base/doc.h"
#include "base/table.h"
#include "base/util.h"
#include "experiment/config.h"
#include "results/analysis.h"
#include "results/plot.h"
#include "results/types_table.h"

/* Markdown text of a missing value. */
#define NULL_TEXT "—"
/* Per-tensor plot: a log y axis only when the errors span more than this factor. */
#define LOG_SPAN_MIN 20.0
/* Longest error text quoted in report.md (the CSV-free failure list). */
#define ERROR_TEXT_MAX 200

/* ================================================================ data */

typedef struct {
    int64_t run_id;
    char hash[65];
    char *axis[QL_AXIS_COUNT]; /* canonical values */
    double v[QL_N_METRICS];    /* by ql_metric_id; NAN = NULL */
} row;

typedef struct {
    char *axis[QL_AXIS_COUNT];
    char *error;
} failure;

/* The runs of one sweep on one (model, text, ctx, chunks). */
typedef struct {
    char *model_sha, *model, *arch, *dataset_sha, *dataset;
    int64_t params; /* -1 = unknown */
    int ctx, chunks;
    int64_t done, failed, running;
    row *rows;
    size_t nrows;
    failure *fails;
    size_t nfails;
    bool varies[QL_AXIS_COUNT];
    char suffix[512]; /* file name suffix; "" for a sweep of one group */
    /* The per-tensor plot: the run it shows (NULL: none), its tensors inside the
     * blocks, and a header line per tensor outside them. */
    const row *tensor_row;
    struct tensor_point *pts;
    size_t npts;
    char outside[2048];
    ql_types_table *types; /* which type each tensor class got, per row (types_table.h) */
} group;

/* One sweep: everything its files show, read before any is written. */
typedef struct {
    group *gs;
    size_t ng;
} sweep_data;

typedef struct {
    ql_store *store;
    const ql_report_options *opt;
    ql_report_summary *sum;
    const char *sweep;
    char dir[4096];
    int tensors_found; /* runs matching opt->tensors, over every sweep */
} ctx;

static void group_free(group *g)
{
    for (size_t i = 0; i < g->nrows; i++)
        for (int a = 0; a < QL_AXIS_COUNT; a++)
            free(g->rows[i].axis[a]);
    for (size_t i = 0; i < g->nfails; i++) {
        for (int a = 0; a < QL_AXIS_COUNT; a++)
            free(g->fails[i].axis[a]);
        free(g->fails[i].error);
    }
    free(g->rows);
    free(g->fails);
    free(g->pts);
    ql_types_table_free(g->types);
    free(g->model_sha);
    free(g->model);
    free(g->arch);
    free(g->dataset_sha);
    free(g->dataset);
    memset(g, 0, sizeof *g);
}

/* ================================================================ SQLite */

/* The store's statement helpers (fault injection covers the report), with the
 * report's messages: "db: report: reading: reason". */
static ql_status prepare(ctx *c, const char *sql, sqlite3_stmt **st, ql_error *err)
{
    return ql_store_prepare(c->store, sql, st, NULL, "report: preparing a query", err);
}

/* Steps; *got tells whether a row came. */
static ql_status step(ctx *c, sqlite3_stmt *st, bool *got, ql_error *err)
{
    return ql_store_step(c->store, st, got, "report: reading", err);
}

static double col_double(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? (double)NAN : sqlite3_column_double(st, i);
}

/* A text column as a heap string ("" for NULL); a REAL column in its shortest
 * exact decimal form, so that outlier ratios read as in the canonical form. */
static char *col_string(sqlite3_stmt *st, int i)
{
    char num[64];
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_NULL:
        return ql_strdup("");
    case SQLITE_FLOAT:
        ql_format_double(sqlite3_column_double(st, i), num, sizeof num);
        return ql_strdup(num);
    default: {
        const char *t = (const char *)sqlite3_column_text(st, i);
        return ql_strdup(t ? t : "");
    }
    }
}

static ql_status bind_text(ctx *c, sqlite3_stmt *st, int idx, const char *v, ql_error *err)
{
    return ql_store_bind_text(c->store, st, idx, v, "report: binding a parameter", err);
}

static ql_status bind_int(ctx *c, sqlite3_stmt *st, int idx, int64_t v, ql_error *err)
{
    return ql_store_bind_int64(c->store, st, idx, v, "report: binding a parameter", err);
}

static ql_status oom(ql_error *err)
{
    return ql_error_set(err, QL_ENOMEM, "report: out of memory");
}

/* ================================================================ loading */

static ql_status list_sweeps(ctx *c, char ***out, size_t *n, ql_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    ql_status rc = prepare(c, "SELECT DISTINCT sweep FROM sweep_runs ORDER BY sweep", &st, err);
    if (rc)
        return rc;
    char **names = NULL;
    size_t cap = 0;
    for (;;) {
        bool more;
        if ((rc = step(c, st, &more, err)) || !more)
            break;
        if (!ql_grow((void **)&names, &cap, *n + 1, sizeof *names)) {
            rc = oom(err);
            break;
        }
        if (!(names[*n] = col_string(st, 0))) {
            rc = oom(err);
            break;
        }
        (*n)++;
    }
    sqlite3_finalize(st);
    *out = names;
    return rc;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static ql_status load_groups(ctx *c, group **out, size_t *n, ql_error *err)
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
    ql_status rc = prepare(c, sql, &st, err);
    if (rc)
        return rc;
    group *gs = NULL;
    size_t cap = 0;
    if ((rc = bind_text(c, st, 1, c->sweep, err)))
        goto out;
    for (;;) {
        bool more;
        if ((rc = step(c, st, &more, err)) || !more)
            break;
        if (!ql_grow((void **)&gs, &cap, *n + 1, sizeof *gs)) {
            rc = oom(err);
            break;
        }
        group *g = &gs[*n];
        memset(g, 0, sizeof *g);
        (*n)++;
        g->model_sha = col_string(st, 0);
        g->model = col_string(st, 1);
        g->arch = col_string(st, 2);
        g->params = sqlite3_column_type(st, 3) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 3);
        g->dataset_sha = col_string(st, 4);
        g->dataset = col_string(st, 5);
        g->ctx = sqlite3_column_int(st, 6);
        g->chunks = sqlite3_column_int(st, 7);
        g->done = sqlite3_column_int64(st, 8);
        g->failed = sqlite3_column_int64(st, 9);
        g->running = sqlite3_column_int64(st, 10);
        if (!g->model_sha || !g->model || !g->arch || !g->dataset_sha || !g->dataset) {
            rc = oom(err);
            break;
        }
    }
out:
    sqlite3_finalize(st);
    *out = gs;
    return rc;
}

/* Binds sweep, model, text, ctx, chunks at ?1..?5. */
static ql_status bind_group(ctx *c, sqlite3_stmt *st, const group *g, ql_error *err)
{
    ql_status rc;
    if ((rc = bind_text(c, st, 1, c->sweep, err)) ||
        (rc = bind_text(c, st, 2, g->model_sha, err)) ||
        (rc = bind_text(c, st, 3, g->dataset_sha, err)) || (rc = bind_int(c, st, 4, g->ctx, err)))
        return rc;
    return bind_int(c, st, 5, g->chunks, err);
}

/* A select list of every axis (prefix: "" or "c.") into sql at *off. */
static void add_axes(char *sql, size_t size, size_t *off, const char *prefix)
{
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        *off +=
            (size_t)snprintf(sql + *off, size - *off, ", %s%s", prefix, ql_axis_name((ql_axis)a));
}

static ql_status load_rows(ctx *c, group *g, ql_error *err)
{
    char sql[4096];
    size_t off = (size_t)snprintf(sql, sizeof sql, "SELECT run_id, config_hash");
    add_axes(sql, sizeof sql, &off, "");
    for (int v = 0; v < QL_N_METRICS; v++)
        off += (size_t)snprintf(sql + off, sizeof sql - off, ", %s",
                                ql_metric_get((ql_metric_id)v)->name);
    off += (size_t)snprintf(sql + off, sizeof sql - off,
                            " FROM sweep_results WHERE sweep = ?1 AND model_sha256 = ?2 AND"
                            " dataset_sha256 = ?3 AND ctx = ?4 AND chunks = ?5"
                            " ORDER BY bpw IS NULL, bpw");
    add_axes(sql, sizeof sql, &off, "");
    off += (size_t)snprintf(sql + off, sizeof sql - off, ", config_hash");
    QL_ASSERT(off + 1 < sizeof sql);

    sqlite3_stmt *st;
    ql_status rc = prepare(c, sql, &st, err);
    if (rc)
        return rc;
    size_t cap = 0;
    if ((rc = bind_group(c, st, g, err)))
        goto out;
    for (;;) {
        bool more;
        if ((rc = step(c, st, &more, err)) || !more)
            break;
        if (!ql_grow((void **)&g->rows, &cap, g->nrows + 1, sizeof *g->rows)) {
            rc = oom(err);
            break;
        }
        row *r = &g->rows[g->nrows++];
        memset(r, 0, sizeof *r);
        r->run_id = sqlite3_column_int64(st, 0);
        const char *h = (const char *)sqlite3_column_text(st, 1);
        ql_strlcpy(r->hash, h ? h : "", sizeof r->hash);
        bool ok = true;
        for (int a = 0; a < QL_AXIS_COUNT; a++)
            ok = (r->axis[a] = col_string(st, 2 + a)) != NULL && ok;
        for (int v = 0; v < QL_N_METRICS; v++)
            r->v[v] = col_double(st, 2 + QL_AXIS_COUNT + v);
        if (!ok) {
            rc = oom(err);
            break;
        }
    }
out:
    sqlite3_finalize(st);
    return rc;
}

static ql_status load_failures(ctx *c, group *g, ql_error *err)
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
    ql_status rc = prepare(c, sql, &st, err);
    if (rc)
        return rc;
    size_t cap = 0;
    if ((rc = bind_group(c, st, g, err)))
        goto out;
    for (;;) {
        bool more;
        if ((rc = step(c, st, &more, err)) || !more)
            break;
        if (!ql_grow((void **)&g->fails, &cap, g->nfails + 1, sizeof *g->fails)) {
            rc = oom(err);
            break;
        }
        failure *f = &g->fails[g->nfails++];
        memset(f, 0, sizeof *f);
        bool ok = (f->error = col_string(st, 0)) != NULL;
        for (int a = 0; a < QL_AXIS_COUNT; a++)
            ok = (f->axis[a] = col_string(st, 1 + a)) != NULL && ok;
        if (!ok) {
            rc = oom(err);
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

/* Whether v is the axis's default (canonical) value. */
static bool is_default(int a, const char *v)
{
    char d[QL_CONFIG_VALUE_MAX];
    ql_axis_default_string((ql_axis)a, d, sizeof d);
    return strcmp(v, d) == 0;
}

/* How an axis value reads in a table: the default as the axis list says (an
 * outlier ratio of 0 is "off"). */
static const char *axis_display(int a, const char *v)
{
    const char *shown = ql_axis_get((ql_axis)a)->shown_default;
    return shown && is_default(a, v) ? shown : v;
}

/* Whether an axis added later is at its default: as the canonical form leaves it out,
 * so does the summary (a sweep from before it existed reads as it did). */
static bool omitted_default(int a, const char *v)
{
    return (ql_axis_get((ql_axis)a)->flags & QL_AXIS_OMIT_DEFAULT) && is_default(a, v);
}

/* Whether a label can leave an axis value out (head same, outliers off, ...). */
static bool is_plain(int a, const char *v)
{
    return (ql_axis_get((ql_axis)a)->flags & QL_AXIS_LABEL_SKIPS_DEFAULT) && is_default(a, v);
}

/* "Q4_0 head=F32": the weight type and the axes that vary within the group,
 * except skip_axis and plain values (head same, outliers off, ...). */
static void config_label(const group *g, char *const *axis, int skip_axis, char *buf, size_t size)
{
    size_t o = (size_t)snprintf(buf, size, "%s", axis[QL_AXIS_WEIGHT_TYPE]);
    for (int a = 1; a < QL_AXIS_COUNT && o < size; a++)
        if (g->varies[a] && a != skip_axis && !is_plain(a, axis[a]))
            o += (size_t)snprintf(buf + o, size - o, " %s=%s", ql_axis_get((ql_axis)a)->label,
                                  axis[a]);
}

/* ================================================================ output files */

/* Writes a document to the sweep's directory, logs and counts it (ql_doc_save). */
static ql_status doc_save(ctx *c, ql_doc *d, const char *name, ql_error *err)
{
    ql_status rc = ql_doc_save(d, c->dir, name, c->opt->log, err);
    if (!rc)
        c->sum->files++;
    return rc;
}

/* Renders one plot unless plots are off or were given up; a failure of
 * gnuplot turns plotting off with the reason (not an error). */
static void render(ctx *c, const char *script, const char *base)
{
    if (!c->opt->plots || c->sum->plots_skipped)
        return;
    ql_error perr;
    ql_error_clear(&perr);
    if (ql_plot_draw(c->dir, script, base, c->opt->log, &perr) != QL_OK) {
        c->sum->plots_skipped = true;
        ql_strlcpy(c->sum->why, perr.msg, sizeof c->sum->why);
        return;
    }
    c->sum->plots++;
    c->sum->files += 2;
}

/* ================================================================ the table */

/* The metric columns of report.md (a label in the metric list), in report order. */
static size_t md_metrics(ql_metric_id *ids)
{
    ql_metric_id all[QL_N_METRICS];
    size_t n_all = ql_metrics_reported(all), n = 0;
    for (size_t k = 0; k < n_all; k++)
        if (ql_metric_get(all[k])->label)
            ids[n++] = all[k];
    return n;
}

/* A metric cell: the value as the list says, "± err" for QL_METRIC_PM when the
 * error is known; NULL (missing) without a value. */
static ql_status put_metric(ql_table *t, const row *r, ql_metric_id id, ql_error *err)
{
    const ql_metric_info *mi = ql_metric_get(id);
    char v[64], e[64];
    if (isnan(r->v[id]))
        return ql_table_put(t, NULL, err);
    ql_metric_format(id, r->v[id], v, sizeof v);
    if (mi->flags & QL_METRIC_PM) {
        char name[96];
        snprintf(name, sizeof name, "%s_err", mi->name);
        const ql_metric_info *ei = ql_metric_find(name);
        QL_ASSERT(ei); /* the list's contract for QL_METRIC_PM */
        ql_metric_id eid = (ql_metric_id)(ei - ql_metric_get((ql_metric_id)0));
        if (!isnan(r->v[eid])) {
            ql_metric_format(eid, r->v[eid], e, sizeof e);
            return ql_table_putf(t, err, "%s ± %s", v, e);
        }
    }
    return ql_table_put(t, v, err);
}

/* Writes the group's table; shown[id] is set for every metric column shown. */
static ql_status md_table(const group *g, FILE *out, bool shown[QL_N_METRICS], ql_error *err)
{
    ql_metric_id ids[QL_N_METRICS];
    size_t nm = md_metrics(ids);
    ql_table_column cols[QL_AXIS_COUNT + QL_N_METRICS];
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        cols[a] = (ql_table_column){ql_axis_get((ql_axis)a)->label, NULL, false};
    for (size_t m = 0; m < nm; m++)
        cols[QL_AXIS_COUNT + m] = (ql_table_column){ql_metric_get(ids[m])->label, NULL, true};
    ql_table *t = ql_table_alloc(cols, QL_AXIS_COUNT + nm);
    if (!t)
        return oom(err);
    ql_status rc = QL_OK;
    for (size_t i = 0; i < g->nrows && !rc; i++) {
        const row *r = &g->rows[i];
        if ((rc = ql_table_row(t, err)))
            break;
        for (int a = 0; a < QL_AXIS_COUNT && !rc; a++)
            rc = ql_table_put(t, axis_display(a, r->axis[a]), err);
        for (size_t m = 0; m < nm && !rc; m++)
            rc = put_metric(t, r, ids[m], err);
    }
    if (!rc) {
        for (int a = 1; a < QL_AXIS_COUNT; a++)
            ql_table_hide(t, (size_t)a, !g->varies[a]);
        /* Empty metric columns go, unless the list keeps them (bpw, size). */
        for (size_t m = 0; m < nm; m++) {
            bool empty = !(ql_metric_get(ids[m])->flags & QL_METRIC_KEEP) &&
                         ql_table_col_empty(t, QL_AXIS_COUNT + m);
            ql_table_hide(t, QL_AXIS_COUNT + m, empty);
            if (!empty)
                shown[ids[m]] = true;
        }
        ql_table_write_md(t, out, NULL_TEXT);
    }
    ql_table_free(t);
    return rc;
}

/* The reference PPL of a group: one value, or a range when runs disagree. */
static void ref_ppl_text(const group *g, char *buf, size_t size)
{
    double lo = (double)NAN, hi = (double)NAN, lo_err = (double)NAN;
    for (size_t i = 0; i < g->nrows; i++) {
        double v = g->rows[i].v[QL_METRIC_ppl_ref];
        if (isnan(v))
            continue;
        if (isnan(lo) || v < lo) {
            lo = v;
            lo_err = g->rows[i].v[QL_METRIC_ppl_ref_err];
        }
        if (isnan(hi) || v > hi)
            hi = v;
    }
    if (isnan(lo))
        snprintf(buf, size, NULL_TEXT);
    else if (lo != hi)
        snprintf(buf, size, "%.4f to %.4f (differs between runs)", lo, hi);
    else if (isnan(lo_err))
        snprintf(buf, size, "%.4f", lo);
    else
        snprintf(buf, size, "%.4f ± %.4f", lo, lo_err);
}

static void tokens_text(const group *g, char *buf, size_t size)
{
    double lo = (double)NAN, hi = (double)NAN;
    for (size_t i = 0; i < g->nrows; i++) {
        double v = g->rows[i].v[QL_METRIC_n_tokens];
        if (!isnan(v)) {
            lo = isnan(lo) || v < lo ? v : lo;
            hi = isnan(hi) || v > hi ? v : hi;
        }
    }
    char a[32], b[32];
    if (isnan(lo))
        buf[0] = '\0';
    else if (lo == hi)
        snprintf(buf, size, ", %s scored tokens", ql_fmt_count((int64_t)lo, a, sizeof a));
    else
        snprintf(buf, size, ", %s to %s scored tokens", ql_fmt_count((int64_t)lo, a, sizeof a),
                 ql_fmt_count((int64_t)hi, b, sizeof b));
}

static void md_summary(const group *g, FILE *out)
{
    char buf[256], num[32];
    fprintf(out, "- model: %s", g->model);
    if (*g->arch && g->params >= 0)
        fprintf(out, " (%s, %s params)", g->arch, ql_fmt_count(g->params, num, sizeof num));
    else if (*g->arch)
        fprintf(out, " (%s)", g->arch);
    tokens_text(g, buf, sizeof buf);
    fprintf(out, "\n- text: %s; ctx %d, %d chunks%s\n", g->dataset, g->ctx, g->chunks, buf);
    ref_ppl_text(g, buf, sizeof buf);
    fprintf(out, "- reference PPL (unquantized): %s\n", buf);
    /* Axes held fixed, from any config of the group. */
    char *const *any = g->nrows ? g->rows[0].axis : g->nfails ? g->fails[0].axis : NULL;
    if (any) {
        bool first = true;
        for (int a = 0; a < QL_AXIS_COUNT; a++)
            if (!g->varies[a] && !omitted_default(a, any[a])) {
                fprintf(out, "%s%s %s", first ? "- fixed: " : " · ", ql_axis_get((ql_axis)a)->label,
                        axis_display(a, any[a]));
                first = false;
            }
        if (!first)
            fputc('\n', out);
    }
    fprintf(out, "- configs: %lld done, %lld failed", (long long)g->done, (long long)g->failed);
    if (g->running)
        fprintf(out, ", %lld unfinished", (long long)g->running);
    fputc('\n', out);
}

static void md_failures(const group *g, FILE *out)
{
    if (!g->nfails)
        return;
    fprintf(out, "\nFailed:\n\n");
    for (size_t i = 0; i < g->nfails; i++) {
        const failure *f = &g->fails[i];
        char label[512], text[ERROR_TEXT_MAX + 8];
        config_label(g, f->axis, -1, label, sizeof label);
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

static ql_status write_report_md(ctx *c, group *gs, size_t ng, ql_error *err)
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
        md_summary(g, d.f);
        fputc('\n', d.f);
        if (g->nrows)
            rc = md_table(g, d.f, shown, err);
        else
            fprintf(d.f, "No finished configs.\n");
        md_failures(g, d.f);
        if (!rc)
            rc = ql_types_table_write_md(g->types, d.f, NULL_TEXT, err);
    }
    if (rc) {
        ql_doc_discard(&d);
        return rc;
    }
    /* The legend: what the columns shown mean, in report order. */
    ql_metric_id ids[QL_N_METRICS];
    size_t nm = md_metrics(ids);
    const char *sep = "\n";
    for (size_t m = 0; m < nm; m++) {
        const ql_metric_info *mi = ql_metric_get(ids[m]);
        if (shown[ids[m]] && mi->note) {
            fprintf(d.f, "%s%s", sep, mi->note);
            sep = " ";
        }
    }
    if (*sep == ' ')
        fputc('\n', d.f);
    return doc_save(c, &d, "report.md", err);
}

static ql_status write_csv(ctx *c, group *gs, size_t ng, ql_error *err)
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
        return oom(err);
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
        rc = doc_save(c, &d, "formats.csv", err);
    }
    ql_table_free(t);
    return rc;
}

/* ================================================================ plots */

/* A number in a gnuplot data file: round-trip exact, NaN for missing; all but
 * the first column of a line get a separating space. */
static void dat_col(FILE *f, double v, bool first)
{
    if (!first)
        fputc(' ', f);
    if (isnan(v))
        fputs("NaN", f);
    else
        fprintf(f, "%.17g", v);
}

static void dat_num(FILE *f, double v)
{
    dat_col(f, v, false);
}

/* A string column of a data file (gnuplot reads "..." as one column). */
static void dat_str(FILE *f, const char *s)
{
    fputs(" \"", f);
    for (; *s; s++)
        fputc(*s == '"' || *s == '\n' ? '\'' : *s, f);
    fputc('"', f);
}

static void dat_header(ctx *c, const group *g, FILE *f, const char *what)
{
    fprintf(f, "# qlab report: %s\n# sweep %s: %s on %s, ctx %d, %d chunks\n", what, c->sweep,
            g->model, g->dataset, g->ctx, g->chunks);
}

static void plot_title(ctx *c, const group *g, char *buf, size_t size)
{
    snprintf(buf, size, "%s: %s on %s, ctx %d, %d chunks", c->sweep, g->model, g->dataset, g->ctx,
             g->chunks);
}

/* The distinct activation modes of a group, sorted by name: the series of the
 * plots, in the same order in every plot. */
static size_t act_modes(const group *g, const char **modes, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < g->nrows; i++)
        ql_strset_add(modes, &n, max, g->rows[i].axis[QL_AXIS_ACT_MODE]);
    return n;
}

#define MAX_SERIES 16

/* The numeric columns of formats.dat, in order; the label and the config hash
 * follow them. The plot scripts find their y column here (dat_column). */
static const ql_metric_id dat_cols[] = {QL_METRIC_bpw, QL_METRIC_kld_mean, QL_METRIC_kld_p99,
                                        QL_METRIC_ppl, QL_METRIC_ppl_err,  QL_METRIC_top1_agree};

/* The gnuplot column number (1-based) of a value in formats.dat. */
static int dat_column(ql_metric_id value)
{
    for (size_t k = 0; k < sizeof dat_cols / sizeof dat_cols[0]; k++)
        if (dat_cols[k] == value)
            return (int)k + 1;
    QL_ASSERT(!"value not in formats.dat");
    return 0;
}

typedef struct {
    const char *name;  /* file stem: kld_bpw, ppl_bpw */
    const char *front; /* pareto_kld, pareto_ppl */
    int value;         /* QL_METRIC_kld_mean or QL_METRIC_ppl */
    bool log_y;
    const char *ylabel;
} metric_plot;

static const metric_plot metric_plots[] = {
    {"kld_bpw", "pareto_kld", QL_METRIC_kld_mean, true,
     "mean KL divergence to the reference (nats)"},
    {"ppl_bpw", "pareto_ppl", QL_METRIC_ppl, false, "perplexity"},
};

/* Whether a value can be drawn on the plot's y axis. */
static bool drawable(const metric_plot *mp, double x, double y)
{
    return !isnan(x) && !isnan(y) && (!mp->log_y || y > 0.0);
}

static ql_status write_metric_plot(ctx *c, const group *g, const metric_plot *mp,
                                   const char **modes, size_t nmodes, ql_error *err)
{
    char fname[1200], script[1200], base[1024], title[1024], label[512];
    size_t n = g->nrows;
    double *x = malloc((n ? n : 1) * sizeof *x), *y = malloc((n ? n : 1) * sizeof *y);
    bool *front = malloc((n ? n : 1) * sizeof *front);
    ql_status rc = QL_OK;
    ql_doc d = {0};
    if (!x || !y || !front) {
        rc = oom(err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        x[i] = g->rows[i].v[QL_METRIC_bpw];
        y[i] = g->rows[i].v[mp->value];
    }
    ql_pareto_front(x, y, n, front, NULL);

    /* The front in bpw order (rows are sorted by bpw already). */
    if ((rc = ql_doc_open(&d, err)))
        goto out;
    dat_header(c, g, d.f,
               mp->value == QL_METRIC_kld_mean ? "Pareto front in (bpw, mean KLD)"
                                               : "Pareto front in (bpw, PPL)");
    fprintf(d.f,
            "# configs no other config beats on both; columns: bpw %s label act_mode "
            "config_hash\n",
            ql_metric_get(mp->value)->name);
    bool front_drawable = false;
    for (size_t i = 0; i < n; i++) {
        if (!front[i])
            continue;
        const row *r = &g->rows[i];
        config_label(g, r->axis, QL_AXIS_ACT_MODE, label, sizeof label);
        dat_col(d.f, x[i], true);
        dat_num(d.f, y[i]);
        dat_str(d.f, label);
        dat_str(d.f, r->axis[QL_AXIS_ACT_MODE]);
        fprintf(d.f, " %s\n", r->hash);
        front_drawable = front_drawable || drawable(mp, x[i], y[i]);
    }
    snprintf(fname, sizeof fname, "%s%s.dat", mp->front, g->suffix);
    if ((rc = doc_save(c, &d, fname, err)))
        goto out;

    /* Which series have something to draw. */
    bool series_ok[MAX_SERIES] = {false};
    bool any = false;
    for (size_t i = 0; i < n; i++)
        for (size_t s = 0; s < nmodes; s++)
            if (strcmp(g->rows[i].axis[QL_AXIS_ACT_MODE], modes[s]) == 0 &&
                drawable(mp, x[i], y[i]))
                any = series_ok[s] = true;
    if (!any) {
        if (c->opt->log)
            fprintf(c->opt->log, "  (%s%s: no %s values to plot)\n", mp->name, g->suffix,
                    ql_metric_get(mp->value)->name);
        goto out;
    }

    snprintf(base, sizeof base, "%s%s", mp->name, g->suffix);
    snprintf(script, sizeof script, "%s.gp", base);
    if ((rc = ql_doc_open(&d, err)))
        goto out;
    FILE *f = d.f;
    fprintf(f,
            "# qlab report: %s against bits per weight, one series per activation mode;\n"
            "# the dashed line joins the Pareto front (configs no other config beats on\n"
            "# both). Data: formats%s.dat, %s%s.dat. Redraw: gnuplot %s\n",
            ql_metric_get(mp->value)->name, g->suffix, mp->front, g->suffix, script);
    plot_title(c, g, title, sizeof title);
    fputs("set encoding utf8\nset title ", f);
    ql_gnuplot_quote(f, title);
    fprintf(f, "\nset xlabel 'bits per weight'\nset ylabel '%s'\n", mp->ylabel);
    fprintf(f, "set grid\nset key top right\nset pointsize 1.3\n");
    if (mp->log_y)
        fputs("set logscale y\nset format y '%.0e'\n", f);
    fprintf(f, "set offsets graph 0.05, graph 0.05, graph 0.08, graph 0.05\n");
    /* The reference PPL as a horizontal line. */
    double ref = (double)NAN;
    for (size_t i = 0; i < n && mp->value == QL_METRIC_ppl; i++)
        if (!isnan(g->rows[i].v[QL_METRIC_ppl_ref]) &&
            (isnan(ref) || g->rows[i].v[QL_METRIC_ppl_ref] < ref))
            ref = g->rows[i].v[QL_METRIC_ppl_ref];
    fprintf(f, "set terminal %s\nset output '%s.png'\nplot", QL_PLOT_PNG_TERMINAL, base);
    const char *sep = " ";
    static const int point_types[] = {7, 5, 9, 11, 13, 15};
    for (size_t s = 0; s < nmodes; s++) {
        if (!series_ok[s])
            continue;
        int pt = point_types[s % (sizeof point_types / sizeof point_types[0])];
        fprintf(f, "%s\\\n  'formats%s.dat' index %zu using 1:%d with points pt %d lc %zu title ",
                sep, g->suffix, s, dat_column(mp->value), pt, s + 1);
        char t[128];
        snprintf(t, sizeof t, "act %s", modes[s]);
        ql_gnuplot_quote(f, t);
        sep = ", ";
    }
    if (front_drawable)
        fprintf(f,
                ", \\\n  '%s%s.dat' using 1:2 with lines dt 2 lw 1.5 lc rgb 'black' title "
                "'Pareto front'"
                ", \\\n  '%s%s.dat' using 1:2 with points pt 6 ps 2.4 lc rgb 'black' notitle"
                ", \\\n  '%s%s.dat' using 1:2:3 with labels offset char 0,1.3 font ',9' notitle",
                mp->front, g->suffix, mp->front, g->suffix, mp->front, g->suffix);
    if (!isnan(ref))
        fprintf(f, ", \\\n  %.17g with lines dt 3 lc rgb 'gray40' title 'unquantized reference'",
                ref);
    fprintf(f, "\nset terminal %s\nset output '%s.svg'\nreplot\nunset output\n",
            QL_PLOT_SVG_TERMINAL, base);
    if ((rc = doc_save(c, &d, script, err)))
        goto out;
    render(c, script, base);
out:
    ql_doc_discard(&d);
    free(x);
    free(y);
    free(front);
    return rc;
}

static ql_status write_plots(ctx *c, const group *g, ql_error *err)
{
    const char *modes[MAX_SERIES];
    size_t nmodes = act_modes(g, modes, MAX_SERIES);
    char fname[1024], label[512];
    ql_doc d;
    ql_status rc = ql_doc_open(&d, err);
    if (rc)
        return rc;
    dat_header(c, g, d.f, "one line per finished config, one block per activation mode");
    fputs("# columns:", d.f);
    for (size_t k = 0; k < sizeof dat_cols / sizeof dat_cols[0]; k++)
        fprintf(d.f, " %s", ql_metric_get(dat_cols[k])->name);
    fputs(" label config_hash\n", d.f);
    for (size_t s = 0; s < nmodes; s++) {
        fprintf(d.f, "%s# index %zu: act_mode %s\n", s ? "\n\n" : "", s, modes[s]);
        for (size_t i = 0; i < g->nrows; i++) {
            const row *r = &g->rows[i];
            if (strcmp(r->axis[QL_AXIS_ACT_MODE], modes[s]) != 0)
                continue;
            config_label(g, r->axis, QL_AXIS_ACT_MODE, label, sizeof label);
            for (size_t k = 0; k < sizeof dat_cols / sizeof dat_cols[0]; k++)
                dat_col(d.f, r->v[dat_cols[k]], k == 0);
            dat_str(d.f, label);
            fprintf(d.f, " %s\n", r->hash);
        }
    }
    snprintf(fname, sizeof fname, "formats%s.dat", g->suffix);
    if ((rc = doc_save(c, &d, fname, err)))
        return rc;
    for (size_t p = 0; p < sizeof metric_plots / sizeof metric_plots[0] && !rc; p++)
        rc = write_metric_plot(c, g, &metric_plots[p], modes, nmodes, err);
    return rc;
}

/* ---------------------------------------------------------------- per-tensor plot */

typedef struct tensor_point {
    char cls[64];
    int64_t layer;
    char used[32];
    double rmse, rel;
} tensor_point;

/* Tensor classes in the order of a transformer block; others after, by name. */
static int class_rank(const char *cls)
{
    return ql_tensor_class_rank(cls);
}

static int cmp_points(const void *pa, const void *pb)
{
    const tensor_point *a = pa, *b = pb;
    int ra = class_rank(a->cls), rb = class_rank(b->cls);
    if (ra != rb)
        return ra < rb ? -1 : 1;
    int s = strcmp(a->cls, b->cls);
    if (s)
        return s;
    return a->layer < b->layer ? -1 : a->layer > b->layer;
}

/* "blk.3.attn_q.weight" -> "attn_q". */
static void tensor_class(const char *name, char *buf, size_t size)
{
    ql_tensor_class(name, buf, size);
}

/* Reads the tensor errors of the group's plotted run into the group. */
static ql_status load_tensor_points(ctx *c, group *g, ql_error *err)
{
    static const char sql[] = "SELECT tensor, layer, used_type, rmse, imatrix_err_rel"
                              " FROM tensor_errors WHERE run_id = ?1 ORDER BY tensor";
    sqlite3_stmt *st;
    ql_status rc = prepare(c, sql, &st, err);
    if (rc)
        return rc;
    size_t cap = 0, olen = 0;
    if ((rc = bind_int(c, st, 1, g->tensor_row->run_id, err)))
        goto out;
    for (;;) {
        bool more;
        if ((rc = step(c, st, &more, err)) || !more)
            break;
        const char *name = (const char *)sqlite3_column_text(st, 0);
        const char *used = (const char *)sqlite3_column_text(st, 2);
        if (sqlite3_column_type(st, 1) == SQLITE_NULL) {
            /* Tensors outside the blocks (embeddings, head) go into the header. */
            char v1[32], v2[32];
            ql_format_double(col_double(st, 3), v1, sizeof v1);
            ql_format_double(col_double(st, 4), v2, sizeof v2);
            if (olen < sizeof g->outside)
                olen += (size_t)snprintf(g->outside + olen, sizeof g->outside - olen,
                                         "#   %s %s rmse %s imatrix_err_rel %s\n",
                                         name ? name : "?", used ? used : "?", v1, v2);
            continue;
        }
        if (!ql_grow((void **)&g->pts, &cap, g->npts + 1, sizeof *g->pts)) {
            rc = oom(err);
            break;
        }
        tensor_point *p = &g->pts[g->npts++];
        tensor_class(name ? name : "", p->cls, sizeof p->cls);
        p->layer = sqlite3_column_int64(st, 1);
        ql_strlcpy(p->used, used ? used : "?", sizeof p->used);
        p->rmse = col_double(st, 3);
        p->rel = col_double(st, 4);
    }
out:
    sqlite3_finalize(st);
    return rc;
}

static ql_status write_tensor_plot(ctx *c, group *g, ql_error *err)
{
    const row *r = g->tensor_row;
    tensor_point *pts = g->pts;
    size_t n = g->npts;
    const char *outside = g->outside;
    size_t olen = strlen(outside);
    ql_doc d = {0};
    ql_status rc = QL_OK;
    if (n == 0)
        return QL_OK;
    qsort(pts, n, sizeof *pts, cmp_points);
    bool use_rel = true;
    int64_t min_layer = pts[0].layer, max_layer = pts[0].layer;
    for (size_t i = 0; i < n; i++) {
        use_rel = use_rel && !isnan(pts[i].rel);
        min_layer = pts[i].layer < min_layer ? pts[i].layer : min_layer;
        max_layer = pts[i].layer > max_layer ? pts[i].layer : max_layer;
    }
    /* Log scale when the errors span more than LOG_SPAN_MIN; within a narrower
     * range a log axis would show one or no labelled tick. */
    double lo = (double)INFINITY, hi = 0.0;
    for (size_t i = 0; i < n; i++) {
        double v = use_rel ? pts[i].rel : pts[i].rmse;
        if (v > 0.0 && v < lo)
            lo = v;
        if (v > hi)
            hi = v;
    }
    bool log_y = hi > 0.0 && hi / lo > LOG_SPAN_MIN;
    const char *metric = use_rel ? "imatrix_err_rel" : "rmse";

    char base[1024], fname[1200], label[512], title[1600], hash12[13];
    snprintf(hash12, sizeof hash12, "%.12s", r->hash);
    snprintf(base, sizeof base, "tensors%s-%s", g->suffix, hash12);
    config_label(g, r->axis, -1, label, sizeof label);
    if ((rc = ql_doc_open(&d, err)))
        goto out;
    dat_header(c, g, d.f, "per-tensor weight error by layer");
    fprintf(d.f, "# config %s (%s), run %lld\n# metric: %s\n", label, r->hash, (long long)r->run_id,
            use_rel ? "imatrix_err_rel = sum I (w - w')^2 / sum I w^2" : "rmse of w - w'");
    if (olen)
        fprintf(d.f, "# tensors outside the blocks:\n%s", outside);
    fprintf(d.f, "# one block per tensor class; columns: layer %s used_type\n", metric);
    size_t nblocks = 0;
    char classes[64][64];
    for (size_t i = 0; i < n; i++) {
        bool first = i == 0 || strcmp(pts[i].cls, pts[i - 1].cls) != 0;
        if (first) {
            fprintf(d.f, "%s# index %zu: %s\n", i ? "\n\n" : "", nblocks, pts[i].cls);
            if (nblocks < 64)
                ql_strlcpy(classes[nblocks], pts[i].cls, sizeof classes[0]);
            nblocks++;
        }
        fprintf(d.f, "%lld", (long long)pts[i].layer);
        dat_num(d.f, use_rel ? pts[i].rel : pts[i].rmse);
        fprintf(d.f, " %s\n", pts[i].used);
    }
    snprintf(fname, sizeof fname, "%s.dat", base);
    if ((rc = doc_save(c, &d, fname, err)))
        goto out;

    snprintf(fname, sizeof fname, "%s.gp", base);
    if ((rc = ql_doc_open(&d, err)))
        goto out;
    FILE *f = d.f;
    fprintf(f,
            "# qlab report: per-tensor weight error by layer, one line per tensor class.\n"
            "# Data: %s.dat. Redraw: gnuplot %s\n",
            base, fname);
    snprintf(title, sizeof title, "%s: %s (%s) on %s", c->sweep, label, hash12, g->model);
    fputs("set encoding utf8\nset title ", f);
    ql_gnuplot_quote(f, title);
    fprintf(f, "\nset xlabel 'layer'\nset ylabel '%s'\n",
            use_rel ? "relative imatrix-weighted error" : "RMSE of the weights");
    fputs(log_y ? "set logscale y\nset format y '%.0e'\n" : "set format y '%.2e'\n", f);
    fprintf(f, "set grid\nset key outside right top\nset xrange [%g:%g]\n", (double)min_layer - 0.5,
            (double)max_layer + 0.5);
    if (max_layer - min_layer <= 40)
        fputs("set xtics 1\n", f);
    fprintf(f, "set terminal %s\nset output '%s.png'\nplot", QL_PLOT_PNG_TERMINAL, base);
    for (size_t b = 0; b < nblocks && b < 64; b++) {
        fprintf(f, "%s\\\n  '%s.dat' index %zu using 1:2 with linespoints pt 7 lw 1.5 title ",
                b ? ", " : " ", base, b);
        ql_gnuplot_quote(f, classes[b]);
    }
    fprintf(f, "\nset terminal %s\nset output '%s.svg'\nreplot\nunset output\n",
            QL_PLOT_SVG_TERMINAL, base);
    if ((rc = doc_save(c, &d, fname, err)))
        goto out;
    snprintf(fname, sizeof fname, "%s.gp", base);
    render(c, fname, base);
out:
    ql_doc_discard(&d);
    return rc;
}

/* Whether a run has per-tensor errors inside the blocks. */
static ql_status has_layer_tensors(ctx *c, int64_t run_id, bool *yes, ql_error *err)
{
    sqlite3_stmt *st;
    ql_status rc = prepare(
        c, "SELECT EXISTS (SELECT 1 FROM tensor_errors WHERE run_id = ?1 AND layer IS NOT NULL)",
        &st, err);
    if (rc)
        return rc;
    bool more = false;
    if (!(rc = bind_int(c, st, 1, run_id, err)) && !(rc = step(c, st, &more, err)))
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
static ql_status tensor_run(ctx *c, const group *g, const row **out, ql_error *err)
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
static ql_status check_tensor_prefix(ctx *c, const group *gs, size_t ng, ql_error *err)
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
static ql_status load_types(ctx *c, group *g, ql_error *err)
{
    int64_t *ids = calloc(g->nrows ? g->nrows : 1, sizeof *ids);
    char **labels = calloc(g->nrows ? g->nrows : 1, sizeof *labels);
    const char **hashes = calloc(g->nrows ? g->nrows : 1, sizeof *hashes);
    ql_status rc = ids && labels && hashes ? QL_OK : oom(err);
    for (size_t i = 0; i < g->nrows && !rc; i++) {
        char label[512];
        config_label(g, g->rows[i].axis, -1, label, sizeof label);
        ids[i] = g->rows[i].run_id;
        hashes[i] = g->rows[i].hash;
        if (!(labels[i] = ql_strdup(label)))
            rc = oom(err);
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

/* tensor-types.csv: every tensor of every config with per-tensor records, after the
 * group's columns; not written when no config has any. */
static ql_status write_types_csv(ctx *c, group *gs, size_t ng, ql_error *err)
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
        return oom(err);
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
        rc = doc_save(c, &d, "tensor-types.csv", err);
    }
    ql_table_free(t);
    return rc;
}

/* ================================================================ driver */

/* Reads everything the files of sweep c->sweep show. */
static ql_status load_sweep(ctx *c, sweep_data *sd, ql_error *err)
{
    ql_status rc = load_groups(c, &sd->gs, &sd->ng, err);
    for (size_t i = 0; i < sd->ng && !rc; i++) {
        group *g = &sd->gs[i];
        if ((rc = load_rows(c, g, err)) || (rc = load_failures(c, g, err)))
            break;
        find_varying(g);
        if ((rc = load_types(c, g, err)))
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
            rc = load_tensor_points(c, g, err);
    }
    return rc;
}

/* Writes the files of sweep c->sweep from what load_sweep read. */
static ql_status write_sweep(ctx *c, sweep_data *sd, ql_error *err)
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
    if ((rc = write_report_md(c, sd->gs, sd->ng, err)) ||
        (rc = write_csv(c, sd->gs, sd->ng, err)) || (rc = write_types_csv(c, sd->gs, sd->ng, err)))
        return rc;
    for (size_t i = 0; i < sd->ng && !rc; i++) {
        group *g = &sd->gs[i];
        if (!g->nrows)
            continue;
        if (!(rc = write_plots(c, g, err)) && g->tensor_row)
            rc = write_tensor_plot(c, g, err);
    }
    if (!rc)
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
    ctx c = {.store = s, .opt = opt, .sum = summary};
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
        rc = oom(err);
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
    for (size_t i = 0; i < n && !rc; i++) {
        if (opt->sweep && strcmp(opt->sweep, sweeps[i]) != 0)
            continue;
        c.sweep = sweeps[i];
        rc = write_sweep(&c, &data[i], err);
    }
out:
    ql_store_rollback(s); /* a no-op unless reading failed */
    sweep_data_free(data, data ? n : 0);
    free_names(sweeps, n);
    return rc;
}
