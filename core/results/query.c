#include "results/query.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "base/table.h"
#include "base/util.h"
#include "experiment/distribution.h"
#include "experiment/overlap.h"

struct ql_query {
    ql_store *store;
    sqlite3_stmt *st;
};

/* ================================================================ named queries */

/* `formats`: every axis, whether its types applied and which were used
 * (applicability.h), then the metrics the metric list gives digits for (records.h),
 * rounded to them, in report order. Built once. */
static char formats_sql[8192];
static pthread_once_t formats_once = PTHREAD_ONCE_INIT;

static void build_formats_sql(void)
{
    size_t off = (size_t)snprintf(formats_sql, sizeof formats_sql,
                                  "SELECT substr(config_hash, 1, 12) AS config, sweep, model,"
                                  " dataset, ctx");
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        off += (size_t)snprintf(formats_sql + off, sizeof formats_sql - off, ", %s",
                                ql_axis_name((ql_axis)a));
    off += (size_t)snprintf(formats_sql + off, sizeof formats_sql - off, ", applies, types_used");
    ql_metric_id ids[QL_N_METRICS];
    size_t n = ql_metrics_reported(ids);
    for (size_t k = 0; k < n; k++) {
        const ql_metric_info *mi = ql_metric_get(ids[k]);
        if (mi->digits < 0)
            continue;
        if (mi->kind == QL_METRIC_KIND_COUNT)
            off += (size_t)snprintf(formats_sql + off, sizeof formats_sql - off, ", %s", mi->name);
        else
            off += (size_t)snprintf(formats_sql + off, sizeof formats_sql - off,
                                    ", round(%s, %d) AS %s", mi->name, mi->digits, mi->name);
    }
    /* The warnings of a run, as the sweep summary and the report give them
     * (experiment/overlap.h, experiment/distribution.h). */
    off += (size_t)snprintf(
        formats_sql + off, sizeof formats_sql - off,
        ", trim(CASE WHEN calib_overlap_32 > %.17g THEN"
        " printf('calibration overlaps evaluation: %%s%%%% of %d-grams',"
        " CASE WHEN 100 * calib_overlap_32 >= 1 AND 100 * calib_overlap_32 < 99.5"
        " THEN printf('%%.0f', 100 * calib_overlap_32) ELSE printf('%%.3g', 100 * calib_overlap_32)"
        " END) WHEN calib_overlap_32 IS NULL AND imatrix NOT LIKE 'calib:%%' AND imatrix <> 'none'"
        " THEN 'calibration text unknown' ELSE '' END"
        " || CASE WHEN ln_ppl_ratio + %.17g * ln_ppl_ratio_err < 0 AND ln_ppl_ratio < -%.17g"
        " THEN '; PPL below the reference beyond its interval: look at KLD' ELSE '' END, '; ')"
        " AS warning",
        QL_OVERLAP_FLAG_SHARE, QL_OVERLAP_LONG, QL_BEATEN_Z, QL_BEATEN_MIN);
    off += (size_t)snprintf(formats_sql + off, sizeof formats_sql - off,
                            " FROM results ORDER BY model, dataset, ctx, results.bpw, config_hash");
    QL_ASSERT(off + 1 < sizeof formats_sql);
}

static ql_named_query named[] = {
    {"formats", "", 0, "one row per finished config (and model, text), sorted by bpw", formats_sql},
    {"failed", "", 0, "failed runs with their errors (retried by the next sweep)",
     "SELECT run_id, sweep, substr(config_hash, 1, 12) AS config, canonical, model, dataset,"
     " ctx, chunks, attempts, finished, error FROM failed_runs ORDER BY run_id"},
    {"runs", "", 0, "every run with its status and provenance",
     "SELECT run_id, sweep, status, attempts, substr(config_hash, 1, 12) AS config, model,"
     " dataset, ctx, chunks, started, round(seconds, 2) AS seconds, threads, host,"
     " qlab_version, qlab_commit, metrics_version FROM run_log ORDER BY run_id"},
    {"sweeps", "", 0, "per sweep: runs done, failed and running",
     "SELECT s.sweep, count(*) AS runs, sum(r.status = 'done') AS done,"
     " sum(r.status = 'failed') AS failed, sum(r.status = 'running') AS running"
     " FROM sweep_runs s JOIN runs r ON r.id = s.run_id GROUP BY s.sweep ORDER BY s.sweep"},
    {"configs", "", 0, "every config with its hash prefix and canonical form",
     "SELECT substr(hash, 1, 12) AS config, canonical FROM configs ORDER BY id"},
    {"tensors", "<config-hash-prefix>", 1,
     "per-tensor types and errors of the finished runs of one config",
     "SELECT substr(config_hash, 1, 12) AS config, model, dataset, tensor, layer,"
     " requested_type AS requested, used_type AS used, fallback_reason, n_rows, n_cols, bytes,"
     " round(bpw, 4) AS bpw, rmse, max_err, imatrix_err, imatrix_err_rel, outlier_cols"
     " FROM tensor_results WHERE substr(config_hash, 1, length(?1)) = lower(?1)"
     " ORDER BY config_hash, run_id, coalesce(layer, -1), tensor"},
};

size_t ql_named_queries(const ql_named_query **out)
{
    pthread_once(&formats_once, build_formats_sql);
    *out = named;
    return sizeof named / sizeof named[0];
}

const ql_named_query *ql_named_query_find(const char *name)
{
    const ql_named_query *all;
    size_t n = ql_named_queries(&all);
    for (size_t i = 0; i < n; i++)
        if (strcmp(all[i].name, name) == 0)
            return &all[i];
    return NULL;
}

/* ================================================================ statements */

/* ATTACH would open (or create) another file behind the read-only contract. */
static int deny_attach(void *user, int action, const char *a, const char *b, const char *c,
                       const char *d)
{
    return action == SQLITE_ATTACH || action == SQLITE_DETACH ? SQLITE_DENY : SQLITE_OK;
}

ql_status ql_query_prepare(ql_store *s, const char *sql, ql_query **out, ql_error *err)
{
    *out = NULL;
    sqlite3 *db = ql_store_handle(s);
    sqlite3_stmt *st = NULL, *extra = NULL;
    const char *tail = NULL;
    ql_status rc;

    sqlite3_set_authorizer(db, deny_attach, NULL);
    if ((rc = ql_store_prepare(s, sql, &st, &tail, "query", err)))
        goto out;
    if (!st) {
        rc = ql_error_set(err, QL_EINVAL, "%s: query: no SQL statement in '%s'", ql_store_path(s),
                          sql);
        goto out;
    }
    /* What follows the first statement must be whitespace or comments. */
    if (tail && *tail) {
        ql_error ignored;
        if (ql_store_prepare(s, tail, &extra, NULL, "query", &ignored) != QL_OK || extra) {
            rc = ql_error_set(err, QL_EINVAL,
                              "%s: query: one statement at a time; refused the rest: '%.200s'",
                              ql_store_path(s), tail);
            goto out;
        }
    }
    if (!sqlite3_stmt_readonly(st)) {
        rc = ql_error_set(err, QL_EINVAL,
                          "%s: query: only read-only statements (SELECT, WITH, read-only "
                          "PRAGMA) are allowed; refused '%.200s'",
                          ql_store_path(s), sql);
        goto out;
    }
    ql_query *q = calloc(1, sizeof *q);
    if (!q) {
        rc = ql_error_set(err, QL_ENOMEM, "query: out of memory");
        goto out;
    }
    q->store = s;
    q->st = st;
    st = NULL;
    *out = q;
out:
    sqlite3_set_authorizer(db, NULL, NULL);
    sqlite3_finalize(extra);
    sqlite3_finalize(st);
    return rc;
}

void ql_query_free(ql_query *q)
{
    if (!q)
        return;
    sqlite3_finalize(q->st);
    free(q);
}

/* A parameter the statement does not have is the caller's mistake (QL_EINVAL),
 * a failing store the database's. */
static ql_status check_param(ql_query *q, int idx, char *what, size_t size, ql_error *err)
{
    snprintf(what, size, "query: parameter %d", idx);
    if (idx < 1 || idx > sqlite3_bind_parameter_count(q->st))
        return ql_error_set(err, QL_EINVAL, "%s: %s: %s", ql_store_path(q->store), what,
                            sqlite3_errstr(SQLITE_RANGE));
    return QL_OK;
}

ql_status ql_query_bind_text(ql_query *q, int idx, const char *v, ql_error *err)
{
    char what[48];
    ql_status rc = check_param(q, idx, what, sizeof what, err);
    return rc ? rc : ql_store_bind_text(q->store, q->st, idx, v, what, err);
}

ql_status ql_query_bind_int64(ql_query *q, int idx, int64_t v, ql_error *err)
{
    char what[48];
    ql_status rc = check_param(q, idx, what, sizeof what, err);
    return rc ? rc : ql_store_bind_int64(q->store, q->st, idx, v, what, err);
}

ql_status ql_query_step(ql_query *q, bool *row, ql_error *err)
{
    return ql_store_step(q->store, q->st, row, "query", err);
}

int ql_query_columns(const ql_query *q)
{
    return sqlite3_column_count(q->st);
}

const char *ql_query_column_name(const ql_query *q, int i)
{
    const char *n = sqlite3_column_name(q->st, i);
    return n ? n : "?";
}

bool ql_query_is_null(const ql_query *q, int i)
{
    return sqlite3_column_type(q->st, i) == SQLITE_NULL;
}

int64_t ql_query_int(const ql_query *q, int i)
{
    return sqlite3_column_int64(q->st, i);
}

double ql_query_double(const ql_query *q, int i)
{
    return ql_query_is_null(q, i) ? (double)NAN : sqlite3_column_double(q->st, i);
}

const char *ql_query_text(const ql_query *q, int i)
{
    return (const char *)sqlite3_column_text(q->st, i);
}

/* ================================================================ output */

/* A growable string. */
typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} buf;

static void buf_add(buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (!ql_grow((void **)&b->p, &b->cap, b->len + n + 1, 1)) {
        b->oom = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_str(buf *b, const char *s)
{
    buf_add(b, s, strlen(s));
}

/* Takes the string out of b (never NULL unless out of memory). */
static char *buf_take(buf *b)
{
    if (!b->p && !b->oom)
        buf_add(b, "", 0);
    char *p = b->oom ? NULL : b->p;
    if (b->oom)
        free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    return p;
}

/* The value of a cell as plain text (NULL for SQL NULL). */
static char *cell_text(sqlite3_stmt *st, int i)
{
    buf b = {0};
    char num[64];
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_NULL:
        return NULL;
    case SQLITE_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)sqlite3_column_int64(st, i));
        buf_str(&b, num);
        break;
    case SQLITE_FLOAT:
        ql_format_double(sqlite3_column_double(st, i), num, sizeof num);
        buf_str(&b, num);
        break;
    case SQLITE_BLOB: {
        const unsigned char *p = sqlite3_column_blob(st, i);
        int n = sqlite3_column_bytes(st, i);
        buf_str(&b, "x'");
        for (int k = 0; k < n; k++) {
            snprintf(num, sizeof num, "%02x", p[k]);
            buf_str(&b, num);
        }
        buf_str(&b, "'");
        break;
    }
    default: {
        const char *t = (const char *)sqlite3_column_text(st, i);
        buf_add(&b, t ? t : "", (size_t)sqlite3_column_bytes(st, i));
        break;
    }
    }
    char *s = buf_take(&b);
    return s ? s : ql_strdup("?"); /* out of memory for one cell: visible, not fatal */
}

/* Reads every row into a table of cell texts (missing = SQL NULL), because the
 * aligned formats need every width before their first line. A column is numeric
 * (*numeric, ncol flags, caller frees; right-aligned in t) when it holds numbers
 * and nothing else but NULLs. */
static ql_status collect(ql_query *q, ql_table **t, bool **numeric, ql_error *err)
{
    int ncol = ql_query_columns(q);
    ql_table_column *cols = calloc((size_t)ncol + 1, sizeof *cols);
    bool *seen_other = calloc((size_t)ncol + 1, sizeof *seen_other);
    *numeric = calloc((size_t)ncol + 1, sizeof **numeric);
    *t = NULL;
    ql_status rc = QL_OK;
    if (cols && seen_other && *numeric) {
        for (int c = 0; c < ncol; c++)
            cols[c] = (ql_table_column){ql_query_column_name(q, c), NULL, false};
        *t = ql_table_alloc(cols, (size_t)ncol);
    }
    if (!*t) {
        rc = ql_error_set(err, QL_ENOMEM, "query: out of memory");
        goto out;
    }
    for (;;) {
        bool row;
        if ((rc = ql_query_step(q, &row, err)) || !row || (rc = ql_table_row(*t, err)))
            break;
        for (int c = 0; c < ncol && !rc; c++) {
            int type = sqlite3_column_type(q->st, c);
            if (type == SQLITE_INTEGER || type == SQLITE_FLOAT)
                (*numeric)[c] = true;
            else if (type != SQLITE_NULL)
                seen_other[c] = true;
            char *text = cell_text(q->st, c);
            rc = ql_table_put(*t, text, err);
            free(text);
        }
        if (rc)
            break;
    }
    for (int c = 0; c < ncol && !rc; c++) {
        (*numeric)[c] = (*numeric)[c] && !seen_other[c];
        ql_table_align_right(*t, (size_t)c, (*numeric)[c]);
    }
out:
    free(cols);
    free(seen_other);
    return rc;
}

/* Display width: UTF-8 code points. */
static size_t display_width(const char *s)
{
    size_t w = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        w += (*p & 0xc0) != 0x80;
    return w;
}

/* One cell of the text table, padded to width; line breaks and tabs are
 * written as spaces, which would break the alignment. */
static void put_padded(FILE *out, const char *s, size_t width, bool right, bool last)
{
    size_t w = display_width(s), pad = width > w ? width - w : 0;
    if (right)
        fprintf(out, "%*s", (int)pad, "");
    for (const char *p = s; *p; p++)
        fputc(*p == '\n' || *p == '\r' || *p == '\t' ? ' ' : *p, out);
    if (!right && !last)
        fprintf(out, "%*s", (int)pad, "");
}

/* The text table: columns two spaces apart, numeric ones right-aligned, the
 * last one unpadded; a dashed rule under the header, "NULL" for SQL NULL and
 * "(N rows)" at the end. */
static ql_status write_text(const ql_query *q, const ql_table *t, const bool *numeric, FILE *out,
                            ql_error *err)
{
    size_t ncol = (size_t)ql_query_columns(q), nrow = ql_table_rows(t);
    size_t *width = calloc(ncol + 1, sizeof *width);
    if (!width)
        return ql_error_set(err, QL_ENOMEM, "query: out of memory");
    for (size_t c = 0; c < ncol; c++) {
        width[c] = display_width(ql_query_column_name(q, (int)c));
        for (size_t r = 0; r < nrow; r++) {
            const char *s = ql_table_cell(t, r, c);
            size_t w = display_width(s ? s : "NULL");
            if (w > width[c])
                width[c] = w;
        }
    }
    for (size_t c = 0; c < ncol; c++) {
        fputs(c ? "  " : "", out);
        put_padded(out, ql_query_column_name(q, (int)c), width[c], numeric[c], c + 1 == ncol);
    }
    fputc('\n', out);
    for (size_t c = 0; c < ncol; c++) {
        fputs(c ? "  " : "", out);
        for (size_t k = 0; k < width[c]; k++)
            fputc('-', out);
    }
    fputc('\n', out);
    for (size_t r = 0; r < nrow; r++) {
        for (size_t c = 0; c < ncol; c++) {
            const char *s = ql_table_cell(t, r, c);
            fputs(c ? "  " : "", out);
            put_padded(out, s ? s : "NULL", width[c], numeric[c], c + 1 == ncol);
        }
        fputc('\n', out);
    }
    fprintf(out, "(%zu row%s)\n", nrow, nrow == 1 ? "" : "s");
    free(width);
    return QL_OK;
}

/* The text table or, with markdown, ql_table_write_md with SQL NULL as an
 * empty cell. */
static ql_status print_table(ql_query *q, FILE *out, bool markdown, ql_error *err)
{
    ql_table *t;
    bool *numeric;
    ql_status rc = collect(q, &t, &numeric, err);
    if (!rc) {
        if (markdown)
            ql_table_write_md(t, out, "");
        else
            rc = write_text(q, t, numeric, out, err);
    }
    ql_table_free(t);
    free(numeric);
    return rc;
}

static ql_status print_csv(ql_query *q, FILE *out, ql_error *err)
{
    int ncol = ql_query_columns(q);
    for (int c = 0; c < ncol; c++) {
        if (c)
            fputc(',', out);
        ql_csv_write_field(out, ql_query_column_name(q, c));
    }
    fputc('\n', out);
    for (;;) {
        bool row;
        ql_status rc = ql_query_step(q, &row, err);
        if (rc || !row)
            return rc;
        for (int c = 0; c < ncol; c++) {
            if (c)
                fputc(',', out);
            char *t = cell_text(q->st, c);
            if (t)
                ql_csv_write_field(out, t);
            free(t);
        }
        fputc('\n', out);
    }
}

/* One JSON value, encoded; reals with the shortest precision that reads back
 * exactly. NULL when it cannot be encoded (text that is not UTF-8). */
static char *json_cell(sqlite3_stmt *st, int c)
{
    json_t *j;
    int precision = 17;
    switch (sqlite3_column_type(st, c)) {
    case SQLITE_NULL:
        j = json_null();
        break;
    case SQLITE_INTEGER:
        j = json_integer((json_int_t)sqlite3_column_int64(st, c));
        break;
    case SQLITE_FLOAT: {
        double v = sqlite3_column_double(st, c);
        if (isinf(v)) {
            j = json_string(v > 0 ? "inf" : "-inf");
        } else {
            precision = ql_double_precision(v);
            j = json_real(v);
        }
        break;
    }
    case SQLITE_BLOB: {
        char *t = cell_text(st, c);
        j = t ? json_string(t) : NULL;
        free(t);
        break;
    }
    default:
        j = json_stringn((const char *)sqlite3_column_text(st, c),
                         (size_t)sqlite3_column_bytes(st, c));
        break;
    }
    char *s = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_REAL_PRECISION(precision)) : NULL;
    json_decref(j);
    return s;
}

static ql_status print_json(ql_query *q, FILE *out, ql_error *err)
{
    int ncol = ql_query_columns(q);
    size_t nrow = 0;
    ql_status rc = QL_OK;
    /* The keys, encoded once. */
    char **keys = calloc((size_t)ncol + 1, sizeof *keys);
    if (!keys)
        return ql_error_set(err, QL_ENOMEM, "query: out of memory");
    for (int c = 0; c < ncol && !rc; c++) {
        json_t *key = json_string(ql_query_column_name(q, c));
        if (!key || !(keys[c] = json_dumps(key, JSON_ENCODE_ANY)))
            rc = ql_error_set(err, QL_EINVAL,
                              "query: column %d: cannot encode its name '%s' as JSON (not UTF-8?)",
                              c + 1, ql_query_column_name(q, c));
        json_decref(key);
    }
    if (rc)
        goto out;
    fputc('[', out);
    for (;;) {
        bool row;
        if ((rc = ql_query_step(q, &row, err)) || !row)
            break;
        fputs(nrow ? ",\n{" : "\n{", out);
        for (int c = 0; c < ncol && !rc; c++) {
            char *v = json_cell(q->st, c);
            if (v)
                fprintf(out, "%s%s: %s", c ? ", " : "", keys[c], v);
            else
                rc = ql_error_set(err, QL_EINVAL,
                                  "query: row %zu, column '%s': cannot encode as JSON (text "
                                  "that is not UTF-8?)",
                                  nrow + 1, ql_query_column_name(q, c));
            free(v);
        }
        if (rc)
            break;
        fputc('}', out);
        nrow++;
    }
    if (!rc)
        fputs(nrow ? "\n]\n" : "]\n", out);
out:
    for (int c = 0; c < ncol; c++)
        free(keys[c]);
    free(keys);
    return rc;
}

ql_status ql_query_print(ql_store *s, const char *sql, const char *const *params, int n_params,
                         ql_query_format fmt, FILE *out, ql_error *err)
{
    ql_query *q;
    ql_status rc = ql_query_prepare(s, sql, &q, err);
    if (rc)
        return rc;
    /* The output is made in memory and written whole: a query that fails on the
     * way writes nothing. */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) {
        ql_query_free(q);
        return ql_error_set(err, QL_ENOMEM, "query: out of memory");
    }
    for (int i = 0; i < n_params && !rc; i++)
        rc = ql_query_bind_text(q, i + 1, params[i], err);
    if (!rc) {
        switch (fmt) {
        case QL_QUERY_TABLE:
            rc = print_table(q, mem, false, err);
            break;
        case QL_QUERY_MD:
            rc = print_table(q, mem, true, err);
            break;
        case QL_QUERY_CSV:
            rc = print_csv(q, mem, err);
            break;
        case QL_QUERY_JSON:
            rc = print_json(q, mem, err);
            break;
        }
    }
    ql_query_free(q);
    bool mem_ok = !ferror(mem);
    if (fclose(mem) != 0 || !mem_ok)
        rc = rc ? rc : ql_error_set(err, QL_ENOMEM, "query: out of memory for the output");
    if (!rc && len > 0 && fwrite(text, 1, len, out) != len)
        rc = ql_error_set(err, QL_EIO, "query: writing the output failed");
    if (!rc && ferror(out))
        rc = ql_error_set(err, QL_EIO, "query: writing the output failed");
    free(text);
    return rc;
}
