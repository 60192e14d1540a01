/* The store's SQLite seam: every call that can fail (with fault injection), transactions,
 * the busy handler, and opening and closing a store (store_impl.h). */
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/util.h"
#include "results/store.h"
#include "results/store_impl.h"

/* ================================================================ SQLite calls */

/* Every SQLite call that can fail goes through these, so that a test can make
 * the n-th one fail (ql_store_inject_fault) and check the error path. */
static bool fault_now(ql_store *s)
{
    if (s->fault > 0 && --s->fault == 0) {
        s->injected = true;
        return true;
    }
    return false;
}

/* "path: what: reason", the reason being the injected fault or SQLite's message. */
ql_status store_db_fail(ql_store *s, int rc, const char *what, ql_error *err)
{
    const char *path = s->subject ? s->subject : s->path;
    s->busy = !s->injected && (rc & 0xff) == SQLITE_BUSY;
    if (s->injected) {
        s->injected = false;
        return ql_error_set(err, QL_EDB, "%s: %s: injected fault", path, what);
    }
    return ql_error_set(err, QL_EDB, "%s: %s: %s", path, what,
                        s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
}

ql_status store_prep_what(ql_store *s, const char *sql, sqlite3_stmt **st, const char **tail,
                          const char *what, ql_error *err)
{
    *st = NULL;
    if (fault_now(s))
        return store_db_fail(s, SQLITE_IOERR, what, err);
    int rc = sqlite3_prepare_v2(s->db, sql, -1, st, tail);
    if (rc != SQLITE_OK) {
        ql_status r = store_db_fail(s, rc, what, err);
        sqlite3_finalize(*st);
        *st = NULL;
        return r;
    }
    return QL_OK;
}

ql_status store_prep(ql_store *s, const char *sql, sqlite3_stmt **st, ql_error *err)
{
    return store_prep_what(s, sql, st, NULL, "preparing a statement", err);
}

int store_step(ql_store *s, sqlite3_stmt *st)
{
    if (fault_now(s))
        return SQLITE_IOERR;
    int rc = sqlite3_step(st);
    /* sqlite3_errmsg may say less than the step's code (an error of another call). */
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        s->busy = (rc & 0xff) == SQLITE_BUSY;
    return rc;
}

/* Runs one statement to completion (no rows expected). */
ql_status store_step_done(ql_store *s, sqlite3_stmt *st, const char *what, ql_error *err)
{
    int rc = store_step(s, st);
    if (rc == SQLITE_DONE)
        return QL_OK;
    if (rc == SQLITE_ROW)
        return ql_error_set(err, QL_EDB, "%s: %s: unexpected result row",
                            s->subject ? s->subject : s->path, what);
    return store_db_fail(s, rc, what, err);
}

ql_status store_exec(ql_store *s, const char *sql, const char *what, ql_error *err)
{
    if (fault_now(s))
        return store_db_fail(s, SQLITE_IOERR, what, err);
    char *msg = NULL;
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        s->busy = (rc & 0xff) == SQLITE_BUSY;
        ql_error_set(err, QL_EDB, "%s: %s: %s", s->subject ? s->subject : s->path, what,
                     msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
        return QL_EDB;
    }
    return QL_OK;
}

/* ---------------------------------------------------------------- built statements */

ql_status store_sql_check(ql_store *s, const ql_strbuf *sql, ql_error *err)
{
    return sql->failed ? ql_error_set(err, QL_ENOMEM, "%s: out of memory building a statement",
                                      s->subject ? s->subject : s->path)
                       : QL_OK;
}

ql_status store_prep_sql(ql_store *s, ql_strbuf *sql, sqlite3_stmt **st, ql_error *err)
{
    *st = NULL;
    ql_status rc = store_sql_check(s, sql, err);
    if (!rc)
        rc = store_prep(s, ql_strbuf_cstr(sql), st, err);
    ql_strbuf_free(sql);
    return rc;
}

ql_status store_exec_sql(ql_store *s, ql_strbuf *sql, const char *what, ql_error *err)
{
    ql_status rc = store_sql_check(s, sql, err);
    if (!rc)
        rc = store_exec(s, ql_strbuf_cstr(sql), what, err);
    ql_strbuf_free(sql);
    return rc;
}

/* Bind helpers: NULL for a NULL string, a negative count or a NaN. */
static ql_status bind_rc(ql_store *s, int rc, int idx, const char *what, ql_error *err)
{
    if (rc == SQLITE_OK)
        return QL_OK;
    char buf[160];
    if (!what) {
        snprintf(buf, sizeof buf, "binding parameter %d", idx);
        what = buf;
    }
    return store_db_fail(s, rc, what, err);
}

ql_status store_bind_text(ql_store *s, sqlite3_stmt *st, int idx, const char *v, ql_error *err)
{
    if (fault_now(s))
        return bind_rc(s, SQLITE_IOERR, idx, NULL, err);
    int rc = v ? sqlite3_bind_text(st, idx, v, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(st, idx);
    return bind_rc(s, rc, idx, NULL, err);
}

ql_status store_bind_count(ql_store *s, sqlite3_stmt *st, int idx, int64_t v, ql_error *err)
{
    if (fault_now(s))
        return bind_rc(s, SQLITE_IOERR, idx, NULL, err);
    int rc = v >= 0 ? sqlite3_bind_int64(st, idx, v) : sqlite3_bind_null(st, idx);
    return bind_rc(s, rc, idx, NULL, err);
}

ql_status store_bind_real(ql_store *s, sqlite3_stmt *st, int idx, double v, ql_error *err)
{
    if (fault_now(s))
        return bind_rc(s, SQLITE_IOERR, idx, NULL, err);
    int rc = isnan(v) ? sqlite3_bind_null(st, idx) : sqlite3_bind_double(st, idx, v);
    return bind_rc(s, rc, idx, NULL, err);
}

/* Transactions. BEGIN IMMEDIATE takes the write lock at once, so a concurrent
 * writer waits in the busy handler instead of failing at the first write. */
ql_status store_begin(ql_store *s, ql_error *err)
{
    return store_exec(s, "BEGIN IMMEDIATE", "starting a transaction", err);
}

ql_status store_commit(ql_store *s, ql_error *err)
{
    return store_exec(s, "COMMIT", "committing", err);
}

/* Undoes the open transaction, if any. Not subject to fault injection: it is the
 * recovery path every injected fault must reach. */
void store_rollback(ql_store *s)
{
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

ql_status store_pragma_int(ql_store *s, const char *sql, int64_t *out, ql_error *err)
{
    sqlite3_stmt *st;
    ql_status rc = store_prep(s, sql, &st, err);
    if (rc)
        return rc;
    int r = store_step(s, st);
    if (r == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else
        rc = r == SQLITE_DONE ? ql_error_set(err, QL_EDB, "%s: '%s' returned nothing", s->path, sql)
                              : store_db_fail(s, r, sql, err);
    sqlite3_finalize(st);
    return rc;
}

/* Steps a statement that returns one id (RETURNING id / SELECT id). */
ql_status store_step_id(ql_store *s, sqlite3_stmt *st, const char *what, int64_t *id, ql_error *err)
{
    int rc = store_step(s, st);
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(st, 0);
        /* Drain so that an INSERT ... RETURNING completes. */
        rc = store_step(s, st);
        if (rc == SQLITE_DONE)
            return QL_OK;
    } else if (rc == SQLITE_DONE) {
        return ql_error_set(err, QL_EDB, "%s: %s: no row", s->path, what);
    }
    return store_db_fail(s, rc, what, err);
}

double store_col_or_nan(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? (double)NAN : sqlite3_column_double(st, i);
}

/* ---------------------------------------------------------------- rows bound by name */

ql_status store_stmt_prep(ql_store *s, ql_strbuf *sql, store_stmt *q, ql_error *err)
{
    memset(q, 0, sizeof *q);
    q->s = s;
    ql_status rc = store_prep_sql(s, sql, &q->st, err);
    QL_ASSERT(rc || sqlite3_bind_parameter_count(q->st) <= STORE_PARAM_MAX);
    return rc;
}

void store_stmt_reset(store_stmt *q)
{
    sqlite3_reset(q->st);
    memset(q->bound, 0, sizeof q->bound);
}

void store_stmt_finalize(store_stmt *q)
{
    sqlite3_finalize(q->st);
    q->st = NULL;
}

/* The index of col's parameter, 0 when the statement has none. */
static int param_index(const store_stmt *q, const char *col)
{
    char name[96];
    int n = snprintf(name, sizeof name, ":%s", col);
    QL_ASSERT(n > 0 && (size_t)n < sizeof name);
    return sqlite3_bind_parameter_index(q->st, name);
}

/* Marks col's parameter bound and gives its index (a statement without it is a
 * writer naming a column its statement does not write). */
static int param_of(store_stmt *q, const char *col)
{
    int idx = param_index(q, col);
    QL_ASSERT(idx > 0 && idx <= STORE_PARAM_MAX);
    q->bound[idx] = 1;
    return idx;
}

static ql_status put_rc(store_stmt *q, int rc, const char *col, ql_error *err)
{
    if (rc == SQLITE_OK)
        return QL_OK;
    char what[128];
    snprintf(what, sizeof what, "binding column %s", col);
    return store_db_fail(q->s, rc, what, err);
}

ql_status store_put_text(store_stmt *q, const char *col, const char *v, ql_error *err)
{
    int idx = param_of(q, col);
    if (fault_now(q->s))
        return put_rc(q, SQLITE_IOERR, col, err);
    int rc =
        v ? sqlite3_bind_text(q->st, idx, v, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(q->st, idx);
    return put_rc(q, rc, col, err);
}

ql_status store_put_int(store_stmt *q, const char *col, int64_t v, ql_error *err)
{
    int idx = param_of(q, col);
    if (fault_now(q->s))
        return put_rc(q, SQLITE_IOERR, col, err);
    return put_rc(q, sqlite3_bind_int64(q->st, idx, (sqlite3_int64)v), col, err);
}

ql_status store_put_count(store_stmt *q, const char *col, int64_t v, ql_error *err)
{
    if (v >= 0)
        return store_put_int(q, col, v, err);
    int idx = param_of(q, col);
    if (fault_now(q->s))
        return put_rc(q, SQLITE_IOERR, col, err);
    return put_rc(q, sqlite3_bind_null(q->st, idx), col, err);
}

ql_status store_put_real(store_stmt *q, const char *col, double v, ql_error *err)
{
    int idx = param_of(q, col);
    if (fault_now(q->s))
        return put_rc(q, SQLITE_IOERR, col, err);
    int rc = isnan(v) ? sqlite3_bind_null(q->st, idx) : sqlite3_bind_double(q->st, idx, v);
    return put_rc(q, rc, col, err);
}

ql_status store_put_fields(store_stmt *q, const table_def *t, const void *const *src, size_t n_src,
                           ql_error *err)
{
    for (const col_def *c = t->cols; c->name; c++) {
        const store_field *f = &c->field;
        if (f->ctype == STORE_C_NONE || param_index(q, c->name) == 0)
            continue;
        QL_ASSERT(f->src < n_src && src[f->src]);
        const char *at = (const char *)src[f->src] + f->offset;
        ql_status rc;
        int64_t v = 0;
        switch (f->ctype) {
        case STORE_C_TEXT: {
            const char *text;
            memcpy(&text, at, sizeof text);
            rc = store_put_text(q, c->name, text, err);
            break;
        }
        case STORE_C_REAL: {
            double d;
            memcpy(&d, at, sizeof d);
            rc = store_put_real(q, c->name, d, err);
            break;
        }
        case STORE_C_INT: {
            int i;
            memcpy(&i, at, sizeof i);
            v = i;
            rc = f->keep_negative ? store_put_int(q, c->name, v, err)
                                  : store_put_count(q, c->name, v, err);
            break;
        }
        case STORE_C_INT64:
        default:
            memcpy(&v, at, sizeof v);
            rc = f->keep_negative ? store_put_int(q, c->name, v, err)
                                  : store_put_count(q, c->name, v, err);
            break;
        }
        if (rc)
            return rc;
    }
    return QL_OK;
}

/* Every parameter of the statement has been bound. */
static void check_bound(const store_stmt *q)
{
    const int n = sqlite3_bind_parameter_count(q->st);
    for (int i = 1; i <= n; i++)
        QL_ASSERT(q->bound[i] || !"a parameter of the statement was not bound");
}

ql_status store_stmt_done(store_stmt *q, const char *what, ql_error *err)
{
    check_bound(q);
    return store_step_done(q->s, q->st, what, err);
}

ql_status store_stmt_id(store_stmt *q, const char *what, int64_t *id, ql_error *err)
{
    check_bound(q);
    return store_step_id(q->s, q->st, what, id, err);
}

/* ---------------------------------------------------------------- for the results layer */

ql_status ql_store_prepare(ql_store *s, const char *sql, sqlite3_stmt **st, const char **tail,
                           const char *what, ql_error *err)
{
    return store_prep_what(s, sql, st, tail, what, err);
}

ql_status ql_store_step(ql_store *s, sqlite3_stmt *st, bool *row, const char *what, ql_error *err)
{
    int rc = store_step(s, st);
    *row = rc == SQLITE_ROW;
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? QL_OK : store_db_fail(s, rc, what, err);
}

ql_status ql_store_step_done(ql_store *s, sqlite3_stmt *st, const char *what, ql_error *err)
{
    return store_step_done(s, st, what, err);
}

ql_status ql_store_bind_text(ql_store *s, sqlite3_stmt *st, int idx, const char *v,
                             const char *what, ql_error *err)
{
    if (fault_now(s))
        return bind_rc(s, SQLITE_IOERR, idx, what, err);
    int rc = v ? sqlite3_bind_text(st, idx, v, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(st, idx);
    return bind_rc(s, rc, idx, what, err);
}

ql_status ql_store_bind_int64(ql_store *s, sqlite3_stmt *st, int idx, int64_t v, const char *what,
                              ql_error *err)
{
    if (fault_now(s))
        return bind_rc(s, SQLITE_IOERR, idx, what, err);
    return bind_rc(s, sqlite3_bind_int64(st, idx, (sqlite3_int64)v), idx, what, err);
}

ql_status ql_store_bind_real(ql_store *s, sqlite3_stmt *st, int idx, double v, const char *what,
                             ql_error *err)
{
    if (fault_now(s))
        return bind_rc(s, SQLITE_IOERR, idx, what, err);
    int rc = isnan(v) ? sqlite3_bind_null(st, idx) : sqlite3_bind_double(st, idx, v);
    return bind_rc(s, rc, idx, what, err);
}

ql_status ql_store_exec(ql_store *s, const char *sql, const char *what, ql_error *err)
{
    return store_exec(s, sql, what, err);
}

void ql_store_rollback(ql_store *s)
{
    store_rollback(s);
}

void ql_store_set_subject(ql_store *s, const char *path)
{
    s->subject = path;
}

/* SQLite's busy handler: another connection holds the lock this one needs. Waits with
 * a backoff (1 ms doubling to 1 s), says so on stderr once the wait passes note_ms (and
 * every note_ms after), and gives up after patience_ms, or QL_STORE_INTERRUPT_GRACE_MS
 * after the process is told to stop (SIGINT, SIGTERM; the wait in progress then counts
 * from that moment): the caller then gets SQLITE_BUSY (ql_store_busy). The grace lets an
 * interrupted run be marked so while a sibling job holds the lock to mark its own. */
static int busy_wait(void *ctx, int count)
{
    ql_store *s = ctx;
    const double now = ql_now();
    if (count == 0) {
        s->busy_since = now;
        s->busy_noted = 0.0;
        s->interrupted_since = 0.0;
    }
    const double waited_ms = (now - s->busy_since) * 1000.0;
    if (ql_interrupted() && s->interrupted_since == 0.0)
        s->interrupted_since = now;
    if (s->interrupted_since > 0.0 &&
        (now - s->interrupted_since) * 1000.0 >= (double)QL_STORE_INTERRUPT_GRACE_MS)
        return 0;
    if (s->patience_ms > 0 && waited_ms >= (double)s->patience_ms)
        return 0;
    if (waited_ms >= (double)s->note_ms &&
        (s->busy_noted == 0.0 || (now - s->busy_noted) * 1000.0 >= (double)s->note_ms)) {
        fprintf(stderr,
                "qlab: %s: the results store is locked by another process; waiting for it "
                "(%.0f s so far, giving up after %.0f s)\n",
                s->path, waited_ms / 1000.0, (double)s->patience_ms / 1000.0);
        s->busy_noted = now;
    }
    sqlite3_sleep(count < 10 ? 1 << count : 1000);
    return 1;
}

bool ql_store_busy(const ql_store *s)
{
    return s->busy;
}

static ql_status configure(ql_store *s, ql_error *err)
{
    ql_status st;
    int rc = sqlite3_busy_handler(s->db, busy_wait, s);
    if (rc != SQLITE_OK)
        return store_db_fail(s, rc, "setting the busy handler", err);
    if ((st = store_exec(s, "PRAGMA foreign_keys = ON", "enabling foreign keys", err)))
        return st;
    int64_t fk = 0;
    if ((st = store_pragma_int(s, "PRAGMA foreign_keys", &fk, err)))
        return st;
    if (fk != 1)
        return ql_error_set(err, QL_EDB, "%s: this SQLite cannot enforce foreign keys", s->path);
    if (s->readonly)
        return QL_OK;
    /* WAL: readers never block the writer; NORMAL sync is durable against a
     * killed process (only a power loss can lose the last transactions). */
    sqlite3_stmt *q;
    if ((st = store_prep(s, "PRAGMA journal_mode = WAL", &q, err)))
        return st;
    /* Switching a new database to WAL needs it to itself: when another process is
     * creating the same store, SQLite can say busy without calling the busy handler
     * (it would deadlock waiting), so the switch is retried with the handler's waits. */
    for (int tries = 0;
         (rc = store_step(s, q)) != SQLITE_ROW && (rc & 0xff) == SQLITE_BUSY && busy_wait(s, tries);
         tries++)
        sqlite3_reset(q);
    if (rc != SQLITE_ROW)
        st = store_db_fail(s, rc, "switching to WAL", err);
    else if (strcmp((const char *)sqlite3_column_text(q, 0), "wal") != 0)
        st = ql_error_set(err, QL_EDB, "%s: cannot use WAL journal mode (got '%s')", s->path,
                          (const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    if (st)
        return st;
    return store_exec(s, "PRAGMA synchronous = NORMAL", "setting synchronous", err);
}

/* A file: URI of path for sqlite3_open_v2 (reserved characters escaped), with query. */
static bool file_uri(const char *path, const char *query, char *out, size_t size)
{
    size_t o = 0;
    const char *pre = path[0] == '/' ? "file:" : "file:./";
    for (const char *p = pre; *p && o + 1 < size; p++)
        out[o++] = *p;
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (o + 4 >= size)
            return false;
        if (*p == '%' || *p == '?' || *p == '#' || *p < 0x20 || *p >= 0x7f)
            o += (size_t)snprintf(out + o, size - o, "%%%02X", *p);
        else
            out[o++] = (char)*p;
    }
    int n = snprintf(out + o, size - o, "?%s", query);
    return n > 0 && (size_t)n < size - o;
}

/* Whether a read-only open must not touch the file system: the directory (where SQLite
 * creates the -shm and -wal files of a WAL database) or the file is not writable (or
 * nobody may write it, or its file system is mounted read-only). The
 * database is then read as immutable: no locks, no WAL (a WAL file left there is not
 * read; it is said). */
static bool needs_immutable(const char *path)
{
    char dir[QL_PATH_MAX];
    ql_strlcpy(dir, path, sizeof dir);
    char *slash = strrchr(dir, '/');
    if (!slash)
        ql_strlcpy(dir, ".", sizeof dir);
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    /* access() says yes to root whatever the modes: a file nobody may write (mode
     * 0444) and a read-only file system count too. */
    struct statvfs fs;
    struct stat sb;
    return access(dir, W_OK) != 0 || access(path, W_OK) != 0 ||
           (statvfs(dir, &fs) == 0 && (fs.f_flag & ST_RDONLY)) ||
           (stat(path, &sb) == 0 && (sb.st_mode & 0222) == 0);
}

/* A file that is not a qlab results database is refused before a read-write open
 * changes anything in it (the WAL switch rewrites its header): its identity is read on
 * a read-only connection first. An empty or missing file is a new store. */
static ql_status check_foreign(const char *path, ql_error *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || sb.st_size == 0)
        return QL_OK;
    ql_store probe;
    memset(&probe, 0, sizeof probe);
    ql_strlcpy(probe.path, path, sizeof probe.path);
    probe.readonly = true;
    probe.note_ms = QL_STORE_BUSY_TIMEOUT_MS;
    probe.patience_ms = QL_STORE_BUSY_TIMEOUT_MS;
    char uri[QL_PATH_MAX * 3 + 32];
    const bool immutable = needs_immutable(path);
    if (immutable && !file_uri(path, "immutable=1", uri, sizeof uri))
        return ql_error_set(err, QL_EINVAL, "%s: path too long", path);
    int rc = sqlite3_open_v2(immutable ? uri : path, &probe.db,
                             SQLITE_OPEN_READONLY | (immutable ? SQLITE_OPEN_URI : 0), NULL);
    ql_status st = QL_OK;
    if (rc != SQLITE_OK) {
        st = ql_error_set(err, QL_EDB, "%s: cannot open database: %s", path,
                          probe.db ? sqlite3_errmsg(probe.db) : sqlite3_errstr(rc));
    } else {
        sqlite3_busy_handler(probe.db, busy_wait, &probe);
        int64_t version, app_id, n_objects;
        if (!(st = store_read_identity(&probe, &version, &app_id, &n_objects, err)))
            st = store_check_identity(&probe, version, app_id, n_objects, err);
    }
    sqlite3_close_v2(probe.db);
    return st;
}

ql_status ql_store_open(const char *path, const ql_store_options *opt, ql_store **out,
                        ql_error *err)
{
    *out = NULL;
    ql_store_options defaults = {0};
    if (!opt)
        opt = &defaults;
    if (opt->readonly && !ql_file_exists(path))
        return ql_error_set(err, QL_EIO, "%s: no results database here (run a sweep first)", path);
    /* SQLite would block on a FIFO and read a device without end. */
    ql_status st = ql_file_refuse_special(path, "results database", err);
    if (st)
        return st;
    ql_store *s = calloc(1, sizeof *s);
    if (!s)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
    if (strlen(path) >= sizeof s->path) {
        free(s);
        return ql_error_set(err, QL_EINVAL, "%s: path too long", path);
    }
    ql_strlcpy(s->path, path, sizeof s->path);
    s->readonly = opt->readonly;
    s->fault = opt->fault_after;
    s->note_ms = opt->busy_timeout_ms > 0 ? opt->busy_timeout_ms : QL_STORE_BUSY_TIMEOUT_MS;
    s->patience_ms = opt->lock_patience_ms != 0 ? opt->lock_patience_ms : QL_STORE_LOCK_PATIENCE_MS;
    if (s->patience_ms < 0)
        s->patience_ms = 0; /* no limit */

    if (!opt->readonly && (st = check_foreign(path, err)))
        goto out_close;
    int flags = opt->readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    char uri[QL_PATH_MAX * 3 + 32];
    const char *name = path;
    if (opt->readonly && needs_immutable(path)) {
        if (!file_uri(path, "immutable=1", uri, sizeof uri)) {
            st = ql_error_set(err, QL_EINVAL, "%s: path too long", path);
            goto out_close;
        }
        char wal[QL_PATH_MAX + 8];
        struct stat sb;
        snprintf(wal, sizeof wal, "%s-wal", path);
        if (stat(wal, &sb) == 0 && sb.st_size > 0)
            fprintf(stderr,
                    "qlab: warning: %s cannot be written here, so it is read as it is without "
                    "its write-ahead log %s (%lld bytes): the latest transactions may be "
                    "missing\n",
                    path, wal, (long long)sb.st_size);
        name = uri;
        flags |= SQLITE_OPEN_URI;
    }
    int rc = sqlite3_open_v2(name, &s->db, flags, NULL);
    if (rc != SQLITE_OK) {
        st = ql_error_set(err, QL_EDB, "%s: cannot open database: %s", path,
                          s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        goto out_close;
    }
    sqlite3_extended_result_codes(s->db, 1);
    if ((st = configure(s, err)) || (st = store_migrate(s, err)))
        goto out_close;
    *out = s;
    return QL_OK;
out_close:
    ql_store_close(s);
    return st;
}

void ql_store_close(ql_store *s)
{
    if (!s)
        return;
    /* sqlite3_close_v2 closes once the last statement is finalized; every
     * function here finalizes its own, so this closes at once. */
    sqlite3_close_v2(s->db);
    free(s);
}

struct sqlite3 *ql_store_handle(ql_store *s)
{
    return s->db;
}

const char *ql_store_path(const ql_store *s)
{
    return s->path;
}

void ql_store_inject_fault(ql_store *s, int n)
{
    s->fault = n;
}
