/* qlab report, the common part (report_common.h): the store's statement helpers, how
 * configs, metrics, pairs and the config x text matrices read in the report's files,
 * saving a file and recording what could not be written. */
#include "results/report_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/table.h"
#include "base/util.h"
#include "experiment/distribution.h"
#include "experiment/overlap.h"

typedef ql_report_row row;
typedef ql_report_group group;

/* ================================================================ SQLite */

/* The store's statement helpers (fault injection covers the report), with the
 * report's messages: "db: report: reading: reason". */
ql_status ql_report_prepare(ql_report_writer *c, const char *sql, sqlite3_stmt **st, ql_error *err)
{
    return ql_store_prepare(c->store, sql, st, NULL, "report: preparing a query", err);
}

/* Steps; *got tells whether a row came. */
ql_status ql_report_step(ql_report_writer *c, sqlite3_stmt *st, bool *got, ql_error *err)
{
    return ql_store_step(c->store, st, got, "report: reading", err);
}

double ql_report_col_double(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? (double)NAN : sqlite3_column_double(st, i);
}

/* A text column as a heap string ("" for NULL); a REAL column in its shortest
 * exact decimal form, so that outlier ratios read as in the canonical form. */
char *ql_report_col_string(sqlite3_stmt *st, int i)
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

ql_status ql_report_bind_text(ql_report_writer *c, sqlite3_stmt *st, int idx, const char *v,
                              ql_error *err)
{
    return ql_store_bind_text(c->store, st, idx, v, "report: binding a parameter", err);
}

ql_status ql_report_bind_int(ql_report_writer *c, sqlite3_stmt *st, int idx, int64_t v,
                             ql_error *err)
{
    return ql_store_bind_int64(c->store, st, idx, v, "report: binding a parameter", err);
}

ql_status ql_report_oom(ql_error *err)
{
    return ql_error_set(err, QL_ENOMEM, "report: out of memory");
}

/* Whether v is the axis's default (canonical) value. */
bool ql_report_is_default(int a, const char *v)
{
    char d[QL_CONFIG_VALUE_MAX];
    ql_axis_default_string((ql_axis)a, d, sizeof d);
    return strcmp(v, d) == 0;
}

/* How an axis value reads in a table: the default as the axis list says (an
 * outlier ratio of 0 is "off"). */
const char *ql_report_axis_display(int a, const char *v)
{
    const char *shown = ql_axis_get((ql_axis)a)->shown_default;
    return shown && ql_report_is_default(a, v) ? shown : v;
}

/* Whether an axis added later is at its default: as the canonical form leaves it out,
 * so does the summary (a sweep from before it existed reads as it did). */
static bool omitted_default(int a, const char *v)
{
    return (ql_axis_get((ql_axis)a)->flags & QL_AXIS_OMIT_DEFAULT) && ql_report_is_default(a, v);
}

/* Whether a label can leave an axis value out (head same, outliers off, ...). */
bool ql_report_is_plain(int a, const char *v)
{
    return (ql_axis_get((ql_axis)a)->flags & QL_AXIS_LABEL_SKIPS_DEFAULT) &&
           ql_report_is_default(a, v);
}

/* ---------------------------------------------------------------- file configs */

#define FILE_PREFIX "file:"

bool ql_report_is_file(const char *value, char *sha)
{
    if (sha)
        sha[0] = '\0';
    if (strncmp(value, FILE_PREFIX, strlen(FILE_PREFIX)) != 0)
        return false;
    const char *at = strrchr(value, '@');
    if (sha && at && strlen(at + 1) == 64)
        ql_strlcpy(sha, at + 1, 65);
    return true;
}

/* The name of a file config at a level of detail: 0 its file name, 1 its path, 2 and 3
 * the same with the first 8 digits of its hash, 4 the whole value. */
static void file_name_at(const char *value, int level, char *buf, size_t size)
{
    char sha[65];
    ql_report_is_file(value, sha);
    const char *path = value + strlen(FILE_PREFIX);
    const char *at = sha[0] ? strrchr(path, '@') : NULL;
    size_t len = at ? (size_t)(at - path) : strlen(path);
    const char *slash = NULL;
    for (size_t i = 0; i < len; i++)
        if (path[i] == '/')
            slash = path + i;
    const char *name = level % 2 == 0 && slash ? slash + 1 : path;
    const size_t name_len = len - (size_t)(name - path);
    if (level >= 4)
        snprintf(buf, size, "%s", value);
    else if (level >= 2 && sha[0])
        snprintf(buf, size, FILE_PREFIX "%.*s@%.8s", (int)name_len, name, sha);
    else
        snprintf(buf, size, FILE_PREFIX "%.*s", (int)name_len, name);
}

/* Whether another file value of the group reads as `name` at this level. */
static bool file_name_taken(const group *g, const char *value, int level, const char *name)
{
    for (size_t i = 0; i < g->nrows + g->nfails; i++) {
        const char *w = i < g->nrows ? g->rows[i].axis[QL_AXIS_WEIGHT_TYPE]
                                     : g->fails[i - g->nrows].axis[QL_AXIS_WEIGHT_TYPE];
        char other[QL_CONFIG_VALUE_MAX];
        if (strcmp(w, value) == 0 || !ql_report_is_file(w, NULL))
            continue;
        file_name_at(w, level, other, sizeof other);
        if (strcmp(other, name) == 0)
            return true;
    }
    return false;
}

const char *ql_report_weight_label(const group *g, const char *value, char *buf, size_t size)
{
    if (!ql_report_is_file(value, NULL)) {
        snprintf(buf, size, "%s", value);
        return buf;
    }
    /* The shortest name no other file of the group has. */
    for (int level = 0; level < 4; level++) {
        file_name_at(value, level, buf, size);
        if (!file_name_taken(g, value, level, buf))
            return buf;
    }
    file_name_at(value, 4, buf, size);
    return buf;
}

/* How axis a of a config reads in the group's tables: the weight type by its label, the
 * imatrix of a file config "unknown" (qlab cannot tell what the file was quantized
 * with), any other value as the axis list shows it. */
const char *ql_report_axis_cell(const group *g, char *const *axis, int a, char *buf, size_t size)
{
    if (a == QL_AXIS_WEIGHT_TYPE)
        return ql_report_weight_label(g, axis[a], buf, size);
    if (a == QL_AXIS_IMATRIX && ql_report_is_file(axis[QL_AXIS_WEIGHT_TYPE], NULL) &&
        ql_report_is_default(a, axis[a]))
        return "unknown";
    return ql_report_axis_display(a, axis[a]);
}

/* "Q4_0 head=F32": the weight type and the axes that vary within the group,
 * except skip_axis and plain values (head same, outliers off, ...). */
void ql_report_config_label(const group *g, char *const *axis, int skip_axis, char *buf,
                            size_t size)
{
    char wt[QL_CONFIG_VALUE_MAX];
    size_t o = (size_t)snprintf(
        buf, size, "%s", ql_report_weight_label(g, axis[QL_AXIS_WEIGHT_TYPE], wt, sizeof wt));
    for (int a = 1; a < QL_AXIS_COUNT && o < size; a++)
        if (g->varies[a] && a != skip_axis && !ql_report_is_plain(a, axis[a]))
            o += (size_t)snprintf(buf + o, size - o, " %s=%s", ql_axis_get((ql_axis)a)->label,
                                  axis[a]);
}

/* ================================================================ output files */

/* Writes a document to the sweep's directory, logs and counts it (ql_doc_save). */
void ql_report_rest_label(const group *g, char *const *axis, int skip_axis, char *buf, size_t size)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int a = 1; a < QL_AXIS_COUNT && o < size; a++)
        if (g->varies[a] && a != skip_axis && !ql_report_is_plain(a, axis[a]))
            o += (size_t)snprintf(buf + o, size - o, "%s%s=%s", o ? " " : "",
                                  ql_axis_get((ql_axis)a)->label, axis[a]);
}

bool ql_report_row_compared(const row *r)
{
    return r->applies != QL_APPLIES_NONE;
}

ql_status ql_report_doc_save(ql_report_writer *c, ql_doc *d, const char *name, ql_error *err)
{
    ql_status rc = ql_doc_save(d, c->dir, name, c->opt->log, err);
    if (!rc)
        c->sum->files++;
    return rc;
}

void ql_report_add_problem(ql_report_writer *c, const char *what, const char *script,
                           const char *why)
{
    ql_report_summary *sum = c->sum;
    if (*what) {
        sum->plots_skipped = true;
        if (!sum->why[0])
            ql_strlcpy(sum->why, why, sizeof sum->why);
    }
    if (!ql_grow((void **)&sum->problems, &c->problems_cap, sum->n_problems + 1,
                 sizeof *sum->problems))
        return; /* out of memory: the count and the first reason stand */
    ql_report_problem *p = &sum->problems[sum->n_problems++];
    ql_strlcpy(p->sweep, c->sweep ? c->sweep : "", sizeof p->sweep);
    ql_strlcpy(p->what, what, sizeof p->what);
    ql_strlcpy(p->script, script, sizeof p->script);
    ql_strlcpy(p->why, why, sizeof p->why);
}

/* ================================================================ metric cells */

size_t ql_report_md_metrics(ql_metric_id *ids)
{
    ql_metric_id all[QL_N_METRICS];
    size_t n_all = ql_metrics_reported(all), n = 0;
    for (size_t k = 0; k < n_all; k++)
        if (ql_metric_get(all[k])->label)
            ids[n++] = all[k];
    return n;
}

/* A metric cell: the value as the list says, "± err" for QL_METRIC_PM when the
 * error is known; "" without a value. */
void ql_report_metric_text(const row *r, ql_metric_id id, char *buf, size_t size)
{
    const ql_metric_info *mi = ql_metric_get(id);
    char v[64], e[64];
    buf[0] = '\0';
    /* An imatrix file that names no readable calibration text: its overlap is not
     * "none" but unknown. */
    if (isnan(r->v[id]) && (id == QL_METRIC_calib_overlap_8 || id == QL_METRIC_calib_overlap_32) &&
        ql_report_calib_unknown(r)) {
        snprintf(buf, size, "unknown");
        return;
    }
    if (isnan(r->v[id]))
        return;
    ql_metric_format(id, r->v[id], v, sizeof v);
    if (mi->flags & QL_METRIC_PM) {
        char name[96];
        snprintf(name, sizeof name, "%s_err", mi->name);
        const ql_metric_info *ei = ql_metric_find(name);
        QL_ASSERT(ei); /* the list's contract for QL_METRIC_PM */
        ql_metric_id eid = (ql_metric_id)(ei - ql_metric_get((ql_metric_id)0));
        if (!isnan(r->v[eid])) {
            ql_metric_format(eid, r->v[eid], e, sizeof e);
            snprintf(buf, size, "%s ± %s", v, e);
            return;
        }
    }
    snprintf(buf, size, "%s", v);
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
        snprintf(buf, size, QL_REPORT_NULL_TEXT);
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

void ql_report_md_summary(const group *g, FILE *out)
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
    size_t files = 0;
    for (size_t i = 0; i < g->nrows + g->nfails; i++)
        files += ql_report_is_file(i < g->nrows ? g->rows[i].axis[QL_AXIS_WEIGHT_TYPE]
                                                : g->fails[i - g->nrows].axis[QL_AXIS_WEIGHT_TYPE],
                                   NULL);
    if (any) {
        bool first = true;
        for (int a = 0; a < QL_AXIS_COUNT; a++)
            if (!g->varies[a] && !omitted_default(a, any[a])) {
                char cell[QL_CONFIG_VALUE_MAX];
                const char *v = ql_report_axis_cell(g, any, a, cell, sizeof cell);
                /* A file's importance matrix is unknown to qlab; the other configs' is
                 * the fixed value. */
                if (a == QL_AXIS_IMATRIX && files && ql_report_is_default(a, any[a]))
                    v = files == g->nrows + g->nfails ? "unknown"
                                                      : "none (unknown for the file configs)";
                fprintf(out, "%s%s %s", first ? "- fixed: " : " · ", ql_axis_get((ql_axis)a)->label,
                        v);
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

/* ================================================================ warnings */

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
    snprintf(
        buf, size, "%+.4f ± %.4f%s", r->v[QL_METRIC_ln_ppl_ratio], r->v[QL_METRIC_ln_ppl_ratio_err],
        ql_beats_reference(r->v[QL_METRIC_ln_ppl_ratio], r->v[QL_METRIC_ln_ppl_ratio_err]) ? " (!)"
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

/* ================================================================ one-axis pairs */

/* "+1.23e-02 [+1.01e-02, +1.45e-02] *": the estimate, its interval, and a star where
 * the interval excludes zero. */
void ql_report_stat_cell(ql_compare_stat k, const ql_compare_value *v, char *buf, size_t size)
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
        ql_report_stat_cell((ql_compare_stat)k, &p->cmp.v[k], cells[k], sizeof cells[k]);
}
