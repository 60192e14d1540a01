#include "results/merge.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/data.h"
#include "base/strbuf.h"
#include "base/util.h"
#include "results/store.h"

/* ================================================================ tables
 *
 * The merge never names a column it does not have to: the tables and their columns
 * come from the store's declarations (ql_store_tables, ql_store_columns), so a table
 * or column added to the store later is carried along, and an older input's missing
 * columns read as the values the store's migration gives them. Only the columns
 * that hold row ids are remapped. */

#define MAX_TABLES 32

typedef struct {
    const ql_store_table *t;
    int n;
    ql_store_column col[QL_STORE_COLUMN_MAX];
} table;

typedef struct {
    ql_store *store; /* the output; its statement helpers run every statement */
    const char *out_path;
    const char *const *in_paths;
    table tab[MAX_TABLES];
    int n_tab;
} merger;

/* The name of a database in messages: -1 is the output. */
static const char *db_name(const merger *m, int64_t src)
{
    return src < 0 ? m->out_path : m->in_paths[src];
}

/* The column a staging copy is looked up by: the row id, or the run of run data. */
static const char *id_column(const table *t)
{
    return t->t->role == QL_TABLE_IDENTITY || t->t->role == QL_TABLE_RUNS ||
                   t->t->role == QL_TABLE_MEASURED
               ? "id"
               : "run_id";
}

static const table *table_named(const merger *m, const char *name)
{
    for (int t = 0; t < m->n_tab; t++)
        if (strcmp(m->tab[t].t->name, name) == 0)
            return &m->tab[t];
    QL_ASSERT(!"not a table of the store");
    return NULL;
}

/* ================================================================ SQL text */

static bool is_one_of(const char *name, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(name, *list) == 0)
            return true;
    return false;
}

/* "a, b, c": the names of t's columns but `except` (NULL: every one). */
static void add_column_names(ql_strbuf *q, const table *t, const char *except)
{
    const char *sep = "";
    for (int i = 0; i < t->n; i++)
        if (!except || strcmp(t->col[i].name, except) != 0) {
            ql_strbuf_add(q, "%s%s", sep, t->col[i].name);
            sep = ", ";
        }
}

/* ================================================================ SQLite calls */

/* Every statement runs through the output store's helpers, so that its fault
 * injection (ql_merge_options.fault_after) covers the merge; errors name the
 * database being read (an input while it is staged, else the output). */

static ql_status prep(merger *m, const char *sql, sqlite3_stmt **st, const char *what,
                      ql_error *err)
{
    return ql_store_prepare(m->store, sql, st, NULL, what, err);
}

static ql_status bind_int(merger *m, sqlite3_stmt *st, int idx, int64_t v, const char *what,
                          ql_error *err)
{
    return ql_store_bind_int64(m->store, st, idx, v, what, err);
}

static ql_status bind_text(merger *m, sqlite3_stmt *st, int idx, const char *v, const char *what,
                           ql_error *err)
{
    return ql_store_bind_text(m->store, st, idx, v, what, err);
}

/* Runs one statement that returns no rows; ?1, when the statement has it, is src. */
static ql_status run_sql(merger *m, const char *sql, int64_t src, const char *what, ql_error *err)
{
    sqlite3_stmt *st;
    ql_status rc = prep(m, sql, &st, what, err);
    if (rc)
        return rc;
    if (sqlite3_bind_parameter_count(st) > 0 && (rc = bind_int(m, st, 1, src, what, err)))
        goto out;
    rc = ql_store_step_done(m->store, st, what, err);
out:
    sqlite3_finalize(st);
    return rc;
}

/* Runs a query with ?1 bound to src (an integer) or text (when not NULL) and
 * leaves it on its first row; *row is false when there is none. The caller
 * finalizes *out. */
static ql_status query_first(merger *m, const char *sql, int64_t src, const char *text,
                             sqlite3_stmt **out, bool *row, const char *what, ql_error *err)
{
    *row = false;
    ql_status rc = prep(m, sql, out, what, err);
    if (rc)
        return rc;
    if (sqlite3_bind_parameter_count(*out) > 0 &&
        (rc = text ? bind_text(m, *out, 1, text, what, err) : bind_int(m, *out, 1, src, what, err)))
        return rc;
    return ql_store_step(m->store, *out, row, what, err);
}

/* One integer from a query (0 when it returns no row or NULL). */
static ql_status query_int(merger *m, const char *sql, int64_t src, int64_t *v, const char *what,
                           ql_error *err)
{
    sqlite3_stmt *st;
    bool row;
    ql_status rc = query_first(m, sql, src, NULL, &st, &row, what, err);
    *v = !rc && row ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return rc;
}

/* Statements built in a ql_strbuf (from the store's column lists, whose length only
 * the schema bounds) run through these: a buffer whose building ran out of memory is
 * an error, and the buffer is freed whatever the outcome (empty again for reuse). */

static ql_status built(merger *m, const ql_strbuf *sql, const char *what, ql_error *err)
{
    return sql->failed ? ql_error_set(err, QL_ENOMEM, "%s: %s: out of memory building a statement",
                                      m->out_path, what)
                       : QL_OK;
}

static ql_status run_built(merger *m, ql_strbuf *sql, int64_t src, const char *what, ql_error *err)
{
    ql_status rc = built(m, sql, what, err);
    if (!rc)
        rc = run_sql(m, ql_strbuf_cstr(sql), src, what, err);
    ql_strbuf_free(sql);
    return rc;
}

/* query_first over a built statement: *out is NULL when it could not be prepared. */
static ql_status query_built(merger *m, ql_strbuf *sql, int64_t src, const char *text,
                             sqlite3_stmt **out, bool *row, const char *what, ql_error *err)
{
    *out = NULL;
    *row = false;
    ql_status rc = built(m, sql, what, err);
    if (!rc)
        rc = query_first(m, ql_strbuf_cstr(sql), src, text, out, row, what, err);
    ql_strbuf_free(sql);
    return rc;
}

/* ================================================================ staging */

/* The store's tables and their columns, as the output has them (it was opened,
 * so migrated, by this qlab). */
static void read_tables(merger *m)
{
    const ql_store_table *t;
    size_t n = ql_store_tables(&t);
    QL_ASSERT(n <= MAX_TABLES);
    m->n_tab = (int)n;
    for (size_t i = 0; i < n; i++) {
        m->tab[i].t = &t[i];
        m->tab[i].n = (int)ql_store_columns(&t[i], m->tab[i].col);
    }
}

/* Temporary tables of the merge: s_<table> holds every input's rows with the
 * input's index in src; km maps the runs of the input being merged to the
 * output; in_setup / out_setup hold the (model, text, ctx, chunks, metrics
 * version) sets of sweeps; the origin tables remember which database brought a
 * sweep or a run into the output (-1 = the output itself), for messages. */
static ql_status create_temp_tables(merger *m, ql_error *err)
{
    ql_status rc;
    read_tables(m);
    for (int t = 0; t < m->n_tab; t++) {
        const table *tb = &m->tab[t];
        ql_strbuf b = {0};
        ql_strbuf_add(&b, "CREATE TEMP TABLE s_%s AS SELECT 0 AS src", tb->t->name);
        for (int i = 0; i < tb->n; i++)
            ql_strbuf_add(&b, ", %s", tb->col[i].name);
        ql_strbuf_add(&b, " FROM main.%s WHERE 0", tb->t->name);
        if ((rc = run_built(m, &b, 0, "creating the staging tables", err)))
            return rc;
        /* Child rows are looked up by run and key when runs are compared (the key
         * columns are NOT NULL, so `=` finds them through this index). */
        bool keyed = tb->t->role == QL_TABLE_RUN_DATA && tb->t->key;
        ql_strbuf_add(&b, "CREATE INDEX temp.s_%s_by_src ON s_%s (src, %s%s%s)", tb->t->name,
                      tb->t->name, id_column(tb), keyed ? ", " : "", keyed ? tb->t->key : "");
        if ((rc = run_built(m, &b, 0, "creating the staging tables", err)))
            return rc;
    }
    static const char *const more[] = {
        "CREATE TEMP TABLE km (in_id INTEGER PRIMARY KEY, config_id INTEGER, model_id INTEGER,"
        " dataset_id INTEGER, ctx INTEGER, chunks INTEGER, in_status TEXT, in_mv INTEGER,"
        " out_id INTEGER, out_status TEXT, out_mv INTEGER, action TEXT)",
        "CREATE TEMP TABLE in_setup (sweep TEXT, model TEXT, text TEXT, ctx INTEGER,"
        " chunks INTEGER, mv INTEGER)",
        "CREATE TEMP TABLE out_setup (sweep TEXT, model TEXT, text TEXT, ctx INTEGER,"
        " chunks INTEGER, mv INTEGER)",
        "CREATE TEMP TABLE sweep_origin (sweep TEXT PRIMARY KEY, src INTEGER NOT NULL)",
        "CREATE TEMP TABLE run_origin (run_id INTEGER PRIMARY KEY, src INTEGER NOT NULL)",
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        if ((rc = run_sql(m, more[i], 0, "creating the staging tables", err)))
            return rc;
    return QL_OK;
}

/* Checks that the attached input is a qlab results database this qlab can read
 * and returns its schema version. */
static ql_status check_input_schema(merger *m, int64_t src, int64_t *version, ql_error *err)
{
    const char *path = m->in_paths[src];
    int64_t app_id, n_objects;
    ql_status rc;
    if ((rc = query_int(m, "PRAGMA qin.application_id", 0, &app_id, "reading it", err)) ||
        (rc = query_int(m, "PRAGMA qin.user_version", 0, version, "reading it", err)) ||
        (rc = query_int(m, "SELECT count(*) FROM qin.sqlite_master", 0, &n_objects, "reading it",
                        err)))
        return rc;
    if (app_id != QL_STORE_APPLICATION_ID || *version == 0 || n_objects == 0)
        return ql_error_set(err, QL_EDB,
                            "%s: not a qlab results database (application_id 0x%llx, schema "
                            "version %lld)",
                            path, (unsigned long long)app_id, (long long)*version);
    if (*version > QL_STORE_SCHEMA_VERSION)
        return ql_error_set(err, QL_EDB,
                            "%s: results database schema version %lld is newer than this qlab "
                            "supports (%d); merge with a newer qlab",
                            path, (long long)*version, QL_STORE_SCHEMA_VERSION);
    return QL_OK;
}

/* Copies every table of input src into the staging tables, in one read
 * transaction so a shard still being written is read as one snapshot. */
static ql_status stage_input(merger *m, int64_t src, ql_error *err)
{
    const char *path = m->in_paths[src];
    ql_store_set_subject(m->store, path);
    sqlite3_stmt *st;
    ql_status rc = prep(m, "ATTACH ?1 AS qin", &st, "attaching it", err);
    if (rc)
        goto out;
    if (!(rc = bind_text(m, st, 1, path, "attaching it", err)))
        rc = ql_store_step_done(m->store, st, "attaching it", err);
    sqlite3_finalize(st);
    if (rc)
        goto out;

    int64_t version = 0;
    if ((rc = check_input_schema(m, src, &version, err)) ||
        (rc = run_sql(m, "BEGIN", 0, "reading it", err)))
        goto out_detach;
    for (int t = 0; t < m->n_tab; t++) {
        const table *tb = &m->tab[t];
        if (tb->t->since > version)
            continue; /* an older input lacks the table */
        ql_strbuf b = {0};
        ql_strbuf_add(&b, "INSERT INTO temp.s_%s (src", tb->t->name);
        for (int i = 0; i < tb->n; i++)
            ql_strbuf_add(&b, ", %s", tb->col[i].name);
        ql_strbuf_add(&b, ") SELECT ?1");
        /* A column added after the input's version reads as migration gives it. */
        for (int i = 0; i < tb->n; i++)
            ql_strbuf_add(&b, ", %s",
                          tb->col[i].since > version ? tb->col[i].dflt : tb->col[i].name);
        ql_strbuf_add(&b, " FROM qin.%s", tb->t->name);
        if ((rc = run_built(m, &b, src, "reading its tables", err)))
            goto out_detach;
    }
    rc = run_sql(m, "COMMIT", 0, "reading its tables", err);
out_detach:
    ql_store_rollback(m->store);
    /* Not fault-injected: like rollback, the way back from any failure above. */
    if (sqlite3_exec(ql_store_handle(m->store), "DETACH qin", NULL, NULL, NULL) != SQLITE_OK && !rc)
        rc = ql_error_set(err, QL_EDB, "%s: detaching it: %s", path,
                          sqlite3_errmsg(ql_store_handle(m->store)));
out:
    ql_store_set_subject(m->store, NULL);
    return rc;
}

/* ================================================================ checks */

static ql_status check_configs(merger *m, int64_t src, ql_error *err)
{
    static const char by_hash[] =
        "SELECT s.hash, s.canonical, o.canonical FROM temp.s_configs s"
        " JOIN main.configs o ON o.hash = s.hash"
        " WHERE s.src = ?1 AND o.canonical IS NOT s.canonical ORDER BY s.id LIMIT 1";
    static const char by_text[] =
        "SELECT s.canonical, s.hash, o.hash FROM temp.s_configs s"
        " JOIN main.configs o ON o.canonical = s.canonical"
        " WHERE s.src = ?1 AND o.hash IS NOT s.hash ORDER BY s.id LIMIT 1";
    sqlite3_stmt *st;
    bool row;
    ql_status rc = query_first(m, by_hash, src, NULL, &st, &row, "comparing configs", err);
    if (!rc && row)
        rc = ql_error_set(err, QL_EINVAL,
                          "%s: config %.12s is '%s' in %s but '%s' in %s (a changed canonical "
                          "form?); nothing was merged",
                          m->in_paths[src], (const char *)sqlite3_column_text(st, 0),
                          (const char *)sqlite3_column_text(st, 1), m->in_paths[src],
                          (const char *)sqlite3_column_text(st, 2), m->out_path);
    sqlite3_finalize(st);
    if (rc)
        return rc;
    rc = query_first(m, by_text, src, NULL, &st, &row, "comparing configs", err);
    if (!rc && row)
        rc = ql_error_set(err, QL_EINVAL,
                          "%s: config '%s' has hash %.12s in %s but %.12s in %s (a changed "
                          "config hash?); nothing was merged",
                          m->in_paths[src], (const char *)sqlite3_column_text(st, 0),
                          (const char *)sqlite3_column_text(st, 1), m->in_paths[src],
                          (const char *)sqlite3_column_text(st, 2), m->out_path);
    sqlite3_finalize(st);
    return rc;
}

/* What a sweep was run on: one element of its set of setups. */
typedef struct {
    char model[65], text[65];
    int64_t ctx, chunks, mv;
} setup;

#define SETUP_COLS "model, text, ctx, chunks, mv"

/* The first setup of sweep `sweep` in table `a` that table `b` lacks (b NULL:
 * the first setup in a); *found is false when there is none. */
static ql_status first_setup(merger *m, const char *a, const char *b, const char *sweep, setup *out,
                             bool *found, ql_error *err)
{
    ql_strbuf q = {0};
    ql_strbuf_add(&q, "SELECT " SETUP_COLS " FROM temp.%s WHERE sweep = ?1", a);
    if (b)
        ql_strbuf_add(&q, " EXCEPT SELECT " SETUP_COLS " FROM temp.%s WHERE sweep = ?1", b);
    ql_strbuf_add(&q, " ORDER BY 1, 2, 3, 4, 5 LIMIT 1");
    sqlite3_stmt *st;
    ql_status rc = query_built(m, &q, 0, sweep, &st, found, "comparing sweeps", err);
    if (!rc && *found) {
        ql_strlcpy(out->model, (const char *)sqlite3_column_text(st, 0), sizeof out->model);
        ql_strlcpy(out->text, (const char *)sqlite3_column_text(st, 1), sizeof out->text);
        out->ctx = sqlite3_column_int64(st, 2);
        out->chunks = sqlite3_column_int64(st, 3);
        out->mv = sqlite3_column_int64(st, 4);
    }
    sqlite3_finalize(st);
    return rc;
}

/* "name (sha256 0123456789ab...)" of a model or text, looked up in the input's
 * staging rows (src >= 0) or the output. */
static ql_status describe_file(merger *m, bool model, int64_t src, const char *sha, char *out,
                               size_t size, ql_error *err)
{
    ql_strbuf q = {0};
    const char *name_expr = model ? "coalesce(name, path)" : "name";
    if (src >= 0)
        ql_strbuf_add(&q, "SELECT %s FROM temp.s_%s WHERE src = %lld AND sha256 = ?1 LIMIT 1",
                      name_expr, model ? "models" : "datasets", (long long)src);
    else
        ql_strbuf_add(&q, "SELECT %s FROM main.%s WHERE sha256 = ?1", name_expr,
                      model ? "models" : "datasets");
    sqlite3_stmt *st;
    bool row;
    ql_status rc = query_built(m, &q, 0, sha, &st, &row, "describing a sweep", err);
    const char *name = !rc && row ? (const char *)sqlite3_column_text(st, 0) : NULL;
    snprintf(out, size, "%s %s (sha256 %.12s...)", model ? "model" : "text", name ? name : "?",
             sha);
    sqlite3_finalize(st);
    return rc;
}

/* Room for the differing fields of a setup: at most five parts of PART_MAX. */
#define PART_MAX     256
#define DESCRIBE_MAX (5 * PART_MAX + 16)

static void append_part(char *out, size_t size, const char *part)
{
    size_t len = strlen(out);
    snprintf(out + len, size - len, "%s%s", len ? ", " : "", part);
}

/* "model x (sha256 ...), ctx 64": the fields where s differs from other. */
static ql_status describe_setup(merger *m, const setup *s, const setup *other, int64_t src,
                                char out[DESCRIBE_MAX], ql_error *err)
{
    char part[PART_MAX];
    out[0] = '\0';
    ql_status rc;
    if (strcmp(s->model, other->model) != 0) {
        if ((rc = describe_file(m, true, src, s->model, part, sizeof part, err)))
            return rc;
        append_part(out, DESCRIBE_MAX, part);
    }
    if (strcmp(s->text, other->text) != 0) {
        if ((rc = describe_file(m, false, src, s->text, part, sizeof part, err)))
            return rc;
        append_part(out, DESCRIBE_MAX, part);
    }
    if (s->ctx != other->ctx) {
        snprintf(part, sizeof part, "ctx %lld", (long long)s->ctx);
        append_part(out, DESCRIBE_MAX, part);
    }
    if (s->chunks != other->chunks) {
        snprintf(part, sizeof part, "chunks %lld", (long long)s->chunks);
        append_part(out, DESCRIBE_MAX, part);
    }
    if (s->mv != other->mv) {
        snprintf(part, sizeof part, "metrics version %lld", (long long)s->mv);
        append_part(out, DESCRIBE_MAX, part);
    }
    return QL_OK;
}

/* Every sweep the input takes part in must have been run on the same set of
 * (model, text, ctx, chunks, metrics version) as the same sweep in the output. */
static ql_status check_sweeps(merger *m, int64_t src, ql_error *err)
{
    static const char *const collect[] = {
        "DELETE FROM temp.in_setup",
        "WITH members (sweep, run_id) AS ("
        "  SELECT sweep, run_id FROM temp.s_sweep_runs WHERE src = ?1"
        "  UNION SELECT sweep, id FROM temp.s_runs WHERE src = ?1 AND sweep IS NOT NULL)"
        " INSERT INTO temp.in_setup SELECT DISTINCT b.sweep, mo.sha256, d.sha256, r.ctx,"
        " r.chunks, r.metrics_version FROM members b"
        " JOIN temp.s_runs r ON r.src = ?1 AND r.id = b.run_id"
        " JOIN temp.s_models mo ON mo.src = ?1 AND mo.id = r.model_id"
        " JOIN temp.s_datasets d ON d.src = ?1 AND d.id = r.dataset_id",
        "DELETE FROM temp.out_setup",
        "WITH members (sweep, run_id) AS ("
        "  SELECT sweep, run_id FROM main.sweep_runs"
        "  WHERE sweep IN (SELECT sweep FROM temp.in_setup)"
        "  UNION SELECT sweep, id FROM main.runs WHERE sweep IN (SELECT sweep FROM temp.in_setup))"
        " INSERT INTO temp.out_setup SELECT DISTINCT b.sweep, mo.sha256, d.sha256, r.ctx,"
        " r.chunks, r.metrics_version FROM members b"
        " JOIN main.runs r ON r.id = b.run_id"
        " JOIN main.models mo ON mo.id = r.model_id"
        " JOIN main.datasets d ON d.id = r.dataset_id",
    };
    ql_status rc;
    for (size_t i = 0; i < sizeof collect / sizeof collect[0]; i++)
        if ((rc = run_sql(m, collect[i], src, "comparing sweeps", err)))
            return rc;

    static const char mismatch[] =
        "SELECT sweep FROM (SELECT * FROM temp.in_setup"
        "  WHERE sweep IN (SELECT sweep FROM temp.out_setup)"
        "  EXCEPT SELECT * FROM temp.out_setup)"
        " UNION SELECT sweep FROM (SELECT * FROM temp.out_setup EXCEPT SELECT * FROM temp.in_setup)"
        " ORDER BY 1 LIMIT 1";
    sqlite3_stmt *st;
    bool row;
    if ((rc = query_first(m, mismatch, src, NULL, &st, &row, "comparing sweeps", err)) || !row) {
        sqlite3_finalize(st);
        return rc;
    }
    char *sweep = ql_strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    st = NULL;
    if (!sweep)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", m->out_path);

    /* A setup of each side the other lacks; when one side's set is a subset of the
     * other's, its first setup stands in. Either way the two differ. */
    setup in, out;
    bool in_extra, out_extra, found;
    if ((rc = first_setup(m, "in_setup", "out_setup", sweep, &in, &in_extra, err)) ||
        (!in_extra && (rc = first_setup(m, "in_setup", NULL, sweep, &in, &found, err))) ||
        (rc = first_setup(m, "out_setup", "in_setup", sweep, &out, &out_extra, err)) ||
        (!out_extra && (rc = first_setup(m, "out_setup", NULL, sweep, &out, &found, err))))
        goto out;
    int64_t origin;
    if ((rc = query_first(m, "SELECT src FROM temp.sweep_origin WHERE sweep = ?1", 0, sweep, &st,
                          &row, "comparing sweeps", err)))
        goto out;
    origin = row ? sqlite3_column_int64(st, 0) : -1;
    char used[DESCRIBE_MAX], has[DESCRIBE_MAX];
    if ((rc = describe_setup(m, &in, &out, src, used, err)) ||
        (rc = describe_setup(m, &out, &in, -1, has, err)))
        goto out;
    const char *in_name = m->in_paths[src], *out_name = db_name(m, origin);
    char what[2 * DESCRIBE_MAX + 2 * QL_PATH_MAX];
    if (in_extra && out_extra)
        snprintf(what, sizeof what, "used %s but %s has %s", used, out_name, has);
    else if (in_extra)
        snprintf(what, sizeof what, "used %s, which the sweep in %s did not", used, out_name);
    else
        snprintf(what, sizeof what, "has no runs with %s, which the sweep in %s has", has,
                 out_name);
    rc = ql_error_set(err, QL_EINVAL,
                      "%s: sweep '%s' %s; shards of one sweep must agree on model, text, ctx, "
                      "chunks and metrics version; nothing was merged",
                      in_name, sweep, what);
out:
    sqlite3_finalize(st);
    free(sweep);
    return rc;
}

/* ================================================================ runs */

static ql_status map_runs(merger *m, int64_t src, ql_error *err)
{
    static const char *const map[] = {
        "DELETE FROM temp.km",
        /* Scalar subqueries rather than joins: they pin the plan to one index
         * lookup per run (the staging tables have no statistics). */
        "INSERT INTO temp.km (in_id, config_id, model_id, dataset_id, ctx, chunks, in_status,"
        " in_mv) SELECT r.id,"
        " (SELECT oc.id FROM temp.s_configs c JOIN main.configs oc ON oc.hash = c.hash"
        "  WHERE c.src = r.src AND c.id = r.config_id),"
        " (SELECT om.id FROM temp.s_models mo JOIN main.models om ON om.sha256 = mo.sha256"
        "  WHERE mo.src = r.src AND mo.id = r.model_id),"
        " (SELECT od.id FROM temp.s_datasets d JOIN main.datasets od ON od.sha256 = d.sha256"
        "  WHERE d.src = r.src AND d.id = r.dataset_id),"
        " r.ctx, r.chunks, r.status, r.metrics_version FROM temp.s_runs r WHERE r.src = ?1",
        "UPDATE temp.km SET (out_id, out_status, out_mv) = (SELECT o.id, o.status,"
        " o.metrics_version FROM main.runs o WHERE o.config_id = km.config_id"
        " AND o.model_id = km.model_id AND o.dataset_id = km.dataset_id AND o.ctx = km.ctx"
        " AND o.chunks = km.chunks)",
    };
    ql_status rc;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if ((rc = run_sql(m, map[i], src, "mapping runs", err)))
            return rc;
    int64_t lost;
    if ((rc = query_int(m,
                        "SELECT count(*) FROM temp.km WHERE config_id IS NULL"
                        " OR model_id IS NULL OR dataset_id IS NULL",
                        src, &lost, "mapping runs", err)))
        return rc;
    if (lost != 0)
        return ql_error_set(err, QL_EDB,
                            "%s: %lld runs refer to a config, model or text the database does "
                            "not hold (a damaged file?); nothing was merged",
                            m->in_paths[src], (long long)lost);
    return QL_OK;
}

/* Runs done on both sides with the same metrics version. */
#define BOTH_DONE "k.in_status = 'done' AND k.out_status = 'done' AND k.in_mv = k.out_mv"

/* A value of a result column for messages. */
static void value_text(sqlite3_stmt *st, int col, char *out, size_t size)
{
    switch (sqlite3_column_type(st, col)) {
    case SQLITE_NULL:
        snprintf(out, size, "NULL");
        break;
    case SQLITE_INTEGER:
        snprintf(out, size, "%lld", (long long)sqlite3_column_int64(st, col));
        break;
    case SQLITE_FLOAT:
        ql_format_double(sqlite3_column_double(st, col), out, size);
        break;
    default:
        snprintf(out, size, "'%s'", (const char *)sqlite3_column_text(st, col));
        break;
    }
}

/* The kernel name at the end of a blas_kernel ("OpenBLAS 0.3.21 Haswell" -> "Haswell"). */
static const char *kernel_short(const char *k)
{
    const char *sp = strrchr(k, ' ');
    return sp && sp[1] ? sp + 1 : k;
}

/* The blas_kernel of run in_id of input src and of the output's run of the same identity
 * ("" where not recorded). */
static ql_status run_kernels(merger *m, int64_t src, int64_t in_id, char kin[QL_MERGE_KERNEL_MAX],
                             char kout[QL_MERGE_KERNEL_MAX], ql_error *err)
{
    kin[0] = kout[0] = '\0';
    const char *what = "reading the runs' BLAS kernels";
    sqlite3_stmt *st;
    bool row = false;
    ql_status rc = prep(m,
                        "SELECT s.blas_kernel, o.blas_kernel FROM temp.km k"
                        " JOIN temp.s_runs s ON s.src = ?1 AND s.id = k.in_id"
                        " LEFT JOIN main.runs o ON o.id = k.out_id WHERE k.in_id = ?2",
                        &st, what, err);
    if (rc)
        return rc;
    if (!(rc = bind_int(m, st, 1, src, what, err)) && !(rc = bind_int(m, st, 2, in_id, what, err)))
        rc = ql_store_step(m->store, st, &row, what, err);
    if (!rc && !row)
        rc = ql_error_set(err, QL_EDB, "%s: run %lld vanished", m->out_path, (long long)in_id);
    if (!rc) {
        const char *a = (const char *)sqlite3_column_text(st, 0);
        const char *b = (const char *)sqlite3_column_text(st, 1);
        ql_strlcpy(kin, a ? a : "", QL_MERGE_KERNEL_MAX);
        ql_strlcpy(kout, b ? b : "", QL_MERGE_KERNEL_MAX);
    }
    sqlite3_finalize(st);
    return rc;
}

/* Refuses the merge over run in_id of input src: `what` differs, with the
 * input's and the output's value when given. */
static ql_status refuse_run(merger *m, int64_t src, int64_t in_id, const char *what,
                            const char *in_value, const char *out_value, ql_error *err)
{
    static const char sql[] =
        "SELECT c.hash, c.canonical, coalesce(mo.name, mo.path), d.name, k.ctx, k.chunks,"
        " k.in_mv, coalesce(ro.src, -1) FROM temp.km k"
        " JOIN main.configs c ON c.id = k.config_id JOIN main.models mo ON mo.id = k.model_id"
        " JOIN main.datasets d ON d.id = k.dataset_id"
        " LEFT JOIN temp.run_origin ro ON ro.run_id = k.out_id WHERE k.in_id = ?1";
    sqlite3_stmt *st;
    bool row;
    ql_status rc = query_first(m, sql, in_id, NULL, &st, &row, "describing a run", err);
    if (rc || !row) {
        sqlite3_finalize(st);
        return rc ? rc
                  : ql_error_set(err, QL_EDB, "%s: run %lld vanished", m->out_path,
                                 (long long)in_id);
    }
    const char *in_name = m->in_paths[src];
    const char *out_name = db_name(m, sqlite3_column_int64(st, 7));
    char values[256] = "";
    if (in_value && out_value)
        snprintf(values, sizeof values, " (%s in %s, %s in %s)", in_value, in_name, out_value,
                 out_name);
    char kin[QL_MERGE_KERNEL_MAX], kout[QL_MERGE_KERNEL_MAX], why[4 * QL_MERGE_KERNEL_MAX + 256];
    if ((rc = run_kernels(m, src, in_id, kin, kout, err))) {
        sqlite3_finalize(st);
        return rc;
    }
    /* Results do not depend on the thread count, but the last bits of a product depend
     * on the BLAS kernel: when the kernels differ, that is the likely cause. */
    if (kin[0] && kout[0] && strcmp(kin, kout) != 0)
        snprintf(why, sizeof why,
                 "the two were computed with different BLAS kernels (kernel %s vs %s: %s in "
                 "%s, %s in %s), whose products differ in their last bits; merge stores made "
                 "under one kernel (OPENBLAS_CORETYPE)",
                 kernel_short(kin), kernel_short(kout), kin, in_name, kout, out_name);
    else
        snprintf(why, sizeof why,
                 "qlab's results are reproducible, so the two come from different builds or "
                 "inputs");
    rc = ql_error_set(
        err, QL_EINVAL,
        "%s: config %.12s (%s) on model %s, text %s, ctx %lld, chunks %lld is done "
        "in both %s and %s with metrics version %lld, but %s%s; %s; nothing was merged",
        in_name, (const char *)sqlite3_column_text(st, 0), (const char *)sqlite3_column_text(st, 1),
        (const char *)sqlite3_column_text(st, 2), (const char *)sqlite3_column_text(st, 3),
        (long long)sqlite3_column_int64(st, 4), (long long)sqlite3_column_int64(st, 5), in_name,
        out_name, (long long)sqlite3_column_int64(st, 6), what, values, why);
    sqlite3_finalize(st);
    return rc;
}

/* The one row of a run's table (metrics) of runs done on both sides must be equal,
 * column by column. */
static ql_status check_columns(merger *m, const table *c, int64_t src, ql_error *err)
{
    ql_strbuf q = {0};
    ql_strbuf_add(&q, "SELECT k.in_id");
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->col[i].name, "run_id") != 0)
            ql_strbuf_add(&q, ", s.%s, o.%s", c->col[i].name, c->col[i].name);
    ql_strbuf_add(&q,
                  " FROM temp.km k JOIN temp.s_%s s ON s.src = ?1 AND s.run_id = k.in_id"
                  " JOIN main.%s o ON o.run_id = k.out_id WHERE " BOTH_DONE " AND (0",
                  c->t->name, c->t->name);
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->col[i].name, "run_id") != 0)
            ql_strbuf_add(&q, " OR s.%s IS NOT o.%s", c->col[i].name, c->col[i].name);
    ql_strbuf_add(&q, ") ORDER BY k.in_id LIMIT 1");
    sqlite3_stmt *st;
    bool row;
    ql_status rc = query_built(m, &q, src, NULL, &st, &row, "comparing metrics", err);
    if (rc || !row) {
        sqlite3_finalize(st);
        return rc;
    }
    int64_t in_id = sqlite3_column_int64(st, 0);
    char what[64], a[64] = "", b[64] = "";
    snprintf(what, sizeof what, "the %s differ", c->t->name);
    int col = 1;
    for (int i = 0; i < c->n; i++) {
        if (strcmp(c->col[i].name, "run_id") == 0)
            continue;
        value_text(st, col, a, sizeof a);
        value_text(st, col + 1, b, sizeof b);
        if (strcmp(a, b) != 0) {
            snprintf(what, sizeof what, "%s differs", c->col[i].name);
            break;
        }
        col += 2;
    }
    sqlite3_finalize(st);
    return refuse_run(m, src, in_id, what, a, b, err);
}

/* The rows of a run's child table (tensor errors, per-chunk sums, activation
 * roundings) of runs done on both sides must be the same set. */
static ql_status check_children(merger *m, const table *c, int64_t src, ql_error *err)
{
    const char *name = c->t->name;
    ql_strbuf q = {0};
    for (int side = 0; side < 2; side++) {
        /* side 0: input rows the output lacks; side 1: the other way round. */
        const char *have = side == 0 ? "temp.s_" : "main.";
        const char *lack = side == 0 ? "main." : "temp.s_";
        const char *h = side == 0 ? "s" : "o", *l = side == 0 ? "o" : "s";
        ql_strbuf_add(&q, "%sSELECT k.in_id, %s.%s FROM temp.km k JOIN %s%s %s ON %s.run_id = %s",
                      side ? " UNION ALL " : "", h, c->t->key, have, name, h, h,
                      side == 0 ? "k.in_id AND s.src = ?1" : "k.out_id");
        ql_strbuf_add(&q,
                      " WHERE " BOTH_DONE
                      " AND NOT EXISTS (SELECT 1 FROM %s%s %s WHERE %s.run_id = %s"
                      " AND %s.%s = %s.%s",
                      lack, name, l, l, side == 0 ? "k.out_id" : "k.in_id AND s.src = ?1", l,
                      c->t->key, h, c->t->key);
        for (int i = 0; i < c->n; i++)
            if (strcmp(c->col[i].name, "run_id") != 0)
                ql_strbuf_add(&q, " AND %s.%s IS %s.%s", l, c->col[i].name, h, c->col[i].name);
        ql_strbuf_add(&q, ")");
    }
    ql_strbuf_add(&q, " LIMIT 1");
    sqlite3_stmt *st;
    bool row;
    ql_status rc = query_built(m, &q, src, NULL, &st, &row, "comparing runs", err);
    if (rc || !row) {
        sqlite3_finalize(st);
        return rc;
    }
    int64_t in_id = sqlite3_column_int64(st, 0);
    char key[64], what[256];
    value_text(st, 1, key, sizeof key);
    snprintf(what, sizeof what, "%s %s differ", c->t->row, key);
    sqlite3_finalize(st);
    return refuse_run(m, src, in_id, what, NULL, NULL, err);
}

/* ================================================================ writing */

/* Inserts the input's models, datasets and configs the output lacks, and fills
 * in model and dataset fields the output does not know yet. */
static ql_status merge_identities(merger *m, int64_t src, ql_error *err)
{
    for (int t = 0; t < m->n_tab; t++) {
        const table *c = &m->tab[t];
        if (c->t->role != QL_TABLE_IDENTITY)
            continue;
        /* A config is its content hash: nothing of it is ever filled in. */
        bool immutable = strcmp(c->t->name, "configs") == 0;
        const char *conflict = c->t->key;
        ql_strbuf q = {0};
        ql_strbuf_add(&q, "INSERT INTO main.%s (", c->t->name);
        add_column_names(&q, c, "id");
        ql_strbuf_add(&q, ") SELECT ");
        int n = 0;
        for (int i = 0; i < c->n; i++) {
            const char *col = c->col[i].name;
            if (strcmp(col, "id") == 0)
                continue;
            if (strcmp(col, "tokens_model_id") == 0)
                ql_strbuf_add(&q,
                              "%s(SELECT om.id FROM temp.s_models sm JOIN main.models om"
                              " ON om.sha256 = sm.sha256 WHERE sm.src = s.src AND sm.id = s.%s)",
                              n++ ? ", " : "", col);
            else
                ql_strbuf_add(&q, "%ss.%s", n++ ? ", " : "", col);
        }
        ql_strbuf_add(&q, " FROM temp.s_%s s WHERE s.src = ?1 ORDER BY s.id ON CONFLICT (%s) ",
                      c->t->name, conflict);
        if (immutable) {
            ql_strbuf_add(&q, "DO NOTHING");
        } else {
            /* Only when there is something to fill in, so merging twice writes nothing. */
            const char *const fixed[] = {"id", conflict, NULL};
            ql_strbuf_add(&q, "DO UPDATE SET ");
            n = 0;
            for (int i = 0; i < c->n; i++)
                if (!is_one_of(c->col[i].name, fixed))
                    ql_strbuf_add(&q, "%s%s = coalesce(%s, excluded.%s)", n++ ? ", " : "",
                                  c->col[i].name, c->col[i].name, c->col[i].name);
            ql_strbuf_add(&q, " WHERE 0");
            for (int i = 0; i < c->n; i++)
                if (!is_one_of(c->col[i].name, fixed))
                    ql_strbuf_add(&q, " OR (%s IS NULL AND excluded.%s IS NOT NULL)",
                                  c->col[i].name, c->col[i].name);
        }
        ql_status rc = run_built(m, &q, src, "merging models, texts and configs", err);
        if (rc)
            return rc;
    }
    return QL_OK;
}

/* Adds the input's measurements the output lacks (a measurement is its key: one that
 * both have is the output's). */
static ql_status merge_measured(merger *m, int64_t src, ql_error *err)
{
    for (int t = 0; t < m->n_tab; t++) {
        const table *c = &m->tab[t];
        if (c->t->role != QL_TABLE_MEASURED)
            continue;
        ql_strbuf q = {0};
        ql_strbuf_add(&q, "INSERT OR IGNORE INTO main.%s (", c->t->name);
        add_column_names(&q, c, "id");
        ql_strbuf_add(&q, ") SELECT ");
        add_column_names(&q, c, "id");
        ql_strbuf_add(&q, " FROM temp.s_%s s WHERE s.src = ?1 ORDER BY s.id", c->t->name);
        ql_status rc = run_built(m, &q, src, "merging measurements", err);
        if (rc)
            return rc;
    }
    return QL_OK;
}

/* Copies the rows of a run's child table for the runs being added or replaced
 * (sweep memberships: for every run of the input, ignoring those present). */
static ql_status copy_children(merger *m, const table *c, int64_t src, ql_error *err)
{
    bool membership = c->t->role == QL_TABLE_MEMBERS;
    ql_strbuf q = {0};
    ql_strbuf_add(&q, "INSERT %sINTO main.%s (", membership ? "OR IGNORE " : "", c->t->name);
    add_column_names(&q, c, NULL);
    ql_strbuf_add(&q, ") SELECT ");
    for (int i = 0; i < c->n; i++) {
        if (strcmp(c->col[i].name, "run_id") == 0)
            ql_strbuf_add(&q, "%sk.out_id", i ? ", " : "");
        else
            ql_strbuf_add(&q, "%ss.%s", i ? ", " : "", c->col[i].name);
    }
    ql_strbuf_add(&q, " FROM temp.s_%s s JOIN temp.km k ON k.in_id = s.run_id WHERE s.src = ?1%s",
                  c->t->name, membership ? "" : " AND k.action IN ('insert', 'replace')");
    ql_strbuf_add(&q, " ORDER BY s.rowid");
    return run_built(m, &q, src, "merging runs", err);
}

static ql_status write_runs(merger *m, int64_t src, ql_error *err)
{
    const table *c = table_named(m, "runs");
    static const char *const remapped[] = {"config_id", "model_id", "dataset_id", NULL};
    static const char *const identity[] = {"id",  "config_id", "model_id", "dataset_id",
                                           "ctx", "chunks",    "attempts", NULL};
    ql_status rc;
    ql_strbuf q = {0};

    /* New identities: the input's run rows with the output's ids. */
    ql_strbuf_add(&q, "INSERT INTO main.runs (");
    add_column_names(&q, c, "id");
    ql_strbuf_add(&q, ") SELECT ");
    int n = 0;
    for (int i = 0; i < c->n; i++) {
        const char *col = c->col[i].name;
        if (strcmp(col, "id") != 0)
            ql_strbuf_add(&q, "%s%s.%s", n++ ? ", " : "", is_one_of(col, remapped) ? "k" : "s",
                          col);
    }
    ql_strbuf_add(&q, " FROM temp.s_runs s JOIN temp.km k ON k.in_id = s.id"
                      " WHERE s.src = ?1 AND k.action = 'insert' ORDER BY s.id");
    if ((rc = run_built(m, &q, src, "merging runs", err)) ||
        (rc = run_sql(m,
                      "UPDATE temp.km SET out_id = (SELECT o.id FROM main.runs o"
                      " WHERE o.config_id = km.config_id AND o.model_id = km.model_id"
                      " AND o.dataset_id = km.dataset_id AND o.ctx = km.ctx"
                      " AND o.chunks = km.chunks) WHERE action = 'insert'",
                      src, "merging runs", err)))
        return rc;

    /* Replaced runs keep their id (and so their sweep memberships); everything
     * else comes from the input, and the attempts add up to the larger count. */
    for (int t = 0; t < m->n_tab; t++) {
        if (m->tab[t].t->role != QL_TABLE_RUN_DATA)
            continue;
        ql_strbuf_add(&q,
                      "DELETE FROM main.%s WHERE run_id IN (SELECT out_id FROM temp.km"
                      " WHERE action = 'replace')",
                      m->tab[t].t->name);
        if ((rc = run_built(m, &q, src, "merging runs", err)))
            return rc;
    }
    ql_strbuf_add(&q, "UPDATE main.runs SET attempts = max(runs.attempts, s.attempts)");
    for (int i = 0; i < c->n; i++)
        if (!is_one_of(c->col[i].name, identity))
            ql_strbuf_add(&q, ", %s = s.%s", c->col[i].name, c->col[i].name);
    ql_strbuf_add(&q, " FROM temp.s_runs s JOIN temp.km k ON k.in_id = s.id"
                      " WHERE s.src = ?1 AND k.action = 'replace' AND runs.id = k.out_id");
    if ((rc = run_built(m, &q, src, "merging runs", err)))
        return rc;

    /* What the runs stored, then their sweep memberships. */
    for (int t = 0; t < m->n_tab; t++)
        if (m->tab[t].t->role == QL_TABLE_RUN_DATA && (rc = copy_children(m, &m->tab[t], src, err)))
            return rc;
    for (int t = 0; t < m->n_tab; t++)
        if (m->tab[t].t->role == QL_TABLE_MEMBERS && (rc = copy_children(m, &m->tab[t], src, err)))
            return rc;
    return QL_OK;
}

/* What runs done on both sides stored must be equal: their one-row tables (metrics)
 * column by column, the others as sets of rows. */
static ql_status check_run_data(merger *m, int64_t src, ql_error *err)
{
    ql_status rc = QL_OK;
    for (int t = 0; t < m->n_tab && !rc; t++) {
        const table *c = &m->tab[t];
        if (c->t->role == QL_TABLE_RUN_DATA)
            rc = c->t->key ? check_children(m, c, src, err) : check_columns(m, c, src, err);
    }
    return rc;
}

/* Runs done on both sides (and equal: check_run_data passed) under different BLAS
 * kernels, with the first pair of kernels. */
static ql_status count_other_kernel(merger *m, int64_t src, ql_merge_counts *counts, ql_error *err)
{
    sqlite3_stmt *st;
    bool row;
    ql_status rc = query_first(m,
                               "SELECT count(*), min(s.blas_kernel), min(o.blas_kernel)"
                               " FROM temp.km k JOIN temp.s_runs s ON s.src = ?1 AND s.id = k.in_id"
                               " JOIN main.runs o ON o.id = k.out_id WHERE " BOTH_DONE
                               " AND s.blas_kernel <> o.blas_kernel",
                               src, NULL, &st, &row, "comparing the runs' BLAS kernels", err);
    if (!rc && row && sqlite3_column_int64(st, 0) > 0) {
        counts->other_kernel = (size_t)sqlite3_column_int64(st, 0);
        ql_strlcpy(counts->kernel_in, (const char *)sqlite3_column_text(st, 1),
                   sizeof counts->kernel_in);
        ql_strlcpy(counts->kernel_out, (const char *)sqlite3_column_text(st, 2),
                   sizeof counts->kernel_out);
    }
    sqlite3_finalize(st);
    return rc;
}

/* Folds input src into the output (inside the merge's transaction). */
static ql_status merge_one(merger *m, int64_t src, ql_merge_counts *counts, ql_error *err)
{
    /* Which run wins: done over failed over running; among done runs the newer
     * metrics version; otherwise the output's. */
    static const char decide[] =
        "UPDATE temp.km SET action = CASE"
        " WHEN out_id IS NULL THEN 'insert'"
        " WHEN (CASE in_status WHEN 'done' THEN 3 WHEN 'failed' THEN 2 ELSE 1 END)"
        "    > (CASE out_status WHEN 'done' THEN 3 WHEN 'failed' THEN 2 ELSE 1 END)"
        " THEN 'replace'"
        " WHEN in_status = 'done' AND out_status = 'done' AND in_mv > out_mv THEN 'replace'"
        " ELSE 'keep' END";
    ql_status rc;
    if ((rc = check_configs(m, src, err)) || (rc = check_sweeps(m, src, err)) ||
        (rc = merge_identities(m, src, err)) || (rc = merge_measured(m, src, err)) ||
        (rc = map_runs(m, src, err)) || (rc = check_run_data(m, src, err)) ||
        (rc = count_other_kernel(m, src, counts, err)) ||
        (rc = run_sql(m, decide, src, "merging runs", err)) || (rc = write_runs(m, src, err)))
        return rc;

    static const char *const remember[] = {
        "INSERT OR REPLACE INTO temp.run_origin (run_id, src)"
        " SELECT out_id, ?1 FROM temp.km WHERE action IN ('insert', 'replace')",
        "INSERT OR IGNORE INTO temp.sweep_origin (sweep, src)"
        " SELECT DISTINCT sweep, ?1 FROM temp.in_setup",
    };
    for (size_t i = 0; i < sizeof remember / sizeof remember[0]; i++)
        if ((rc = run_sql(m, remember[i], src, "merging runs", err)))
            return rc;

    sqlite3_stmt *st;
    bool row;
    rc = query_first(m,
                     "SELECT count(*), total(action = 'insert'), total(action = 'replace'),"
                     " total(action = 'keep') FROM temp.km",
                     src, NULL, &st, &row, "counting runs", err);
    if (!rc && row) {
        counts->runs = (size_t)sqlite3_column_int64(st, 0);
        counts->added = (size_t)sqlite3_column_double(st, 1);
        counts->replaced = (size_t)sqlite3_column_double(st, 2);
        counts->kept = (size_t)sqlite3_column_double(st, 3);
    }
    sqlite3_finalize(st);
    return rc;
}

static ql_status merge_all(merger *m, size_t n_in, ql_merge_counts *counts, ql_error *err)
{
    ql_status rc;
    if ((rc = run_sql(m, "BEGIN IMMEDIATE", 0, "starting the merge transaction", err)) ||
        (rc = run_sql(m,
                      "INSERT OR IGNORE INTO temp.sweep_origin (sweep, src)"
                      " SELECT sweep, -1 FROM main.sweep_runs"
                      " UNION SELECT sweep, -1 FROM main.runs WHERE sweep IS NOT NULL",
                      0, "merging runs", err)))
        goto out;
    for (size_t i = 0; i < n_in; i++)
        if ((rc = merge_one(m, (int64_t)i, &counts[i], err)))
            goto out;
    rc = run_sql(m, "COMMIT", 0, "committing the merge", err);
out:
    if (rc)
        ql_store_rollback(m->store);
    return rc;
}

/* ================================================================ entry */

/* An input must be an existing file other than the output. */
static ql_status check_input_file(const char *path, const char *out_path, const struct stat *out_st,
                                  ql_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return ql_error_set(err, QL_EIO, "%s: cannot read: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ql_error_set(err, QL_EIO, "%s: not a regular file", path);
    if (out_st && st.st_dev == out_st->st_dev && st.st_ino == out_st->st_ino)
        return ql_error_set(err, QL_EINVAL, "%s: is the output database %s itself", path, out_path);
    return QL_OK;
}

/* Removes a database the merge created, with its WAL and shared-memory files. */
static void remove_created(const char *path)
{
    static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
        char f[QL_PATH_MAX + 16];
        snprintf(f, sizeof f, "%s%s", path, suffix[i]);
        unlink(f);
    }
}

ql_status ql_merge(const char *out_path, const char *const *in_paths, size_t n_in,
                   const ql_merge_options *opt, ql_merge_counts *counts, ql_error *err)
{
    if (n_in == 0)
        return ql_error_set(err, QL_EINVAL, "%s: no input databases to merge", out_path);
    if (strlen(out_path) >= QL_PATH_MAX)
        return ql_error_set(err, QL_EINVAL, "%s: path too long", out_path);
    struct stat out_st;
    bool existed = stat(out_path, &out_st) == 0;
    ql_status rc;
    for (size_t i = 0; i < n_in; i++)
        if ((rc = check_input_file(in_paths[i], out_path, existed ? &out_st : NULL, err)))
            return rc;

    ql_merge_counts *tally = calloc(n_in, sizeof *tally);
    if (!tally)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", out_path);
    ql_store *store = NULL;
    merger *m = NULL;
    if ((rc = ql_store_open(out_path, NULL, &store, err)))
        goto out_free;
    /* On the heap: the column lists of every table are large for a stack. */
    m = calloc(1, sizeof *m);
    if (!m) {
        rc = ql_error_set(err, QL_ENOMEM, "%s: out of memory", out_path);
        goto out_close;
    }
    m->store = store;
    m->out_path = out_path;
    m->in_paths = in_paths;
    if (opt && opt->fault_after > 0)
        ql_store_inject_fault(store, opt->fault_after);
    if ((rc = create_temp_tables(m, err)))
        goto out_close;
    for (size_t i = 0; i < n_in; i++)
        if ((rc = stage_input(m, (int64_t)i, err)))
            goto out_close;
    if ((rc = merge_all(m, n_in, tally, err)))
        goto out_close;
    if (counts)
        memcpy(counts, tally, n_in * sizeof *tally);
out_close:
    free(m);
    ql_store_close(store);
    if (rc && !existed)
        remove_created(out_path);
out_free:
    free(tally);
    return rc;
}
