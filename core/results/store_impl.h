/* qlab results store internals, shared by the store's own files (not a public interface:
 * only store*.c include it):
 *   store_db.c       the SQLite seam: statement helpers with fault injection, transactions,
 *                    the busy handler, opening (locking, read-only, foreign files), closing;
 *   store_schema.c   the tables and columns, declared once with their schema versions, the
 *                    DDL and views built from them, and the INSERT/UPDATE statements;
 *   store_migrate.c  the identity of a database (application id, schema version) and its
 *                    migration to this qlab's schema;
 *   store_runs.c     a run's lifecycle: claim, finish with its results, fail, interrupt, and
 *                    the queries of its state;
 *   store.c          models, datasets, configs and sensitivity rows. */
#ifndef QL_STORE_IMPL_H
#define QL_STORE_IMPL_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/data.h"
#include "base/error.h"
#include "base/util.h"
#include "results/store.h"

struct ql_store {
    sqlite3 *db;
    char path[QL_PATH_MAX];
    const char *subject; /* the file failures are about (ql_store_set_subject); NULL = path */
    bool readonly;
    int fault;     /* countdown to an injected failure; 0 = off */
    bool injected; /* the failure being reported was injected */
    bool busy;     /* the last failure was SQLITE_BUSY (the lock stayed taken) */
    /* The lock waits (busy_wait): when to say so, when to give up. */
    int note_ms, patience_ms;
    double busy_since, busy_noted;
    double interrupted_since; /* when the wait in progress saw the interrupt (0: not yet) */
};

/* ================================================================ SQLite calls (store_db.c)
 *
 * Every SQLite call that can fail goes through these, so that a test can make the n-th
 * one fail (ql_store_inject_fault) and check the error path. A failure is "path: what:
 * reason". */

/* "path: what: reason", the reason being the injected fault or SQLite's message. */
ql_status store_db_fail(ql_store *s, int rc, const char *what, ql_error *err);
ql_status store_prep_what(ql_store *s, const char *sql, sqlite3_stmt **st, const char **tail,
                          const char *what, ql_error *err);
ql_status store_prep(ql_store *s, const char *sql, sqlite3_stmt **st, ql_error *err);
/* sqlite3_step, or SQLITE_IOERR when the fault is injected. */
int store_step(ql_store *s, sqlite3_stmt *st);
/* Runs one statement to completion (no rows expected). */
ql_status store_step_done(ql_store *s, sqlite3_stmt *st, const char *what, ql_error *err);
/* Steps a statement that returns one id (RETURNING id / SELECT id). */
ql_status store_step_id(ql_store *s, sqlite3_stmt *st, const char *what, int64_t *id,
                        ql_error *err);
ql_status store_exec(ql_store *s, const char *sql, const char *what, ql_error *err);
/* Bind helpers: NULL for a NULL string, a negative count or a NaN. */
ql_status store_bind_text(ql_store *s, sqlite3_stmt *st, int idx, const char *v, ql_error *err);
ql_status store_bind_count(ql_store *s, sqlite3_stmt *st, int idx, int64_t v, ql_error *err);
ql_status store_bind_real(ql_store *s, sqlite3_stmt *st, int idx, double v, ql_error *err);
/* A column's value, NAN for NULL. */
double store_col_or_nan(sqlite3_stmt *st, int i);
/* Transactions: BEGIN IMMEDIATE, COMMIT, and a ROLLBACK of the open one (if any) that
 * never fails and is never fault-injected. */
ql_status store_begin(ql_store *s, ql_error *err);
ql_status store_commit(ql_store *s, ql_error *err);
void store_rollback(ql_store *s);
/* The one integer a PRAGMA returns. */
ql_status store_pragma_int(ql_store *s, const char *sql, int64_t *out, ql_error *err);

/* ================================================================ SQL text (store_schema.c) */

/* Statements are built from the declarations (a bounded number of short names), so a
 * fixed buffer always suffices; running out is a broken invariant, not an input error. */
#define SQL_MAX 65536

typedef struct {
    char text[SQL_MAX];
    size_t len;
} sqlbuf;

void store_sql_add(sqlbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ================================================================ schema (store_schema.c) */

/* A column: its SQL declaration (type and constraints), the schema version that
 * added it and a comment for the schema. A column added after its table needs a
 * declaration ALTER TABLE accepts (no PRIMARY KEY or UNIQUE; NOT NULL with a DEFAULT). */
typedef struct {
    const char *name;
    const char *decl;
    int since;
    const char *comment;
} col_def;

enum { DERIVED_NONE, DERIVED_CONFIGS, DERIVED_METRICS };

typedef struct {
    ql_store_table pub;
    const char *comment;      /* a line of SQL comment before CREATE TABLE, or NULL */
    const col_def *cols;      /* the declared columns, up to a NULL name */
    int derived;              /* then the columns of a list: DERIVED_* */
    const char *constraints;  /* table constraints, one per line, or NULL */
    const char *options;      /* after the closing parenthesis ("WITHOUT ROWID"), or "" */
    const char *const *extra; /* further statements (indexes) with the table, NULL-terminated */
} table_def;

/* The tables, referenced ones first. */
extern const table_def *const store_tables;
extern const size_t store_n_tables;

/* A column as created: the declaration of a derived one is built here. */
typedef struct {
    const char *name;
    char decl[160];
    int since;
    const char *comment;
} column;

#define MAX_TABLE_COLUMNS QL_STORE_COLUMN_MAX

/* The columns of table t, in creation order. */
size_t store_table_columns(const table_def *t, column *out);
/* Its CREATE TABLE statement. */
void store_create_table_sql(const table_def *t, sqlbuf *b);

/* Constraints a version changed: in a database older than `since`, the table's stored
 * CREATE TABLE holds `before` where this qlab declares `after` (store_migrate.c rewrites
 * them). */
typedef struct {
    const char *table;
    int since;
    const char *before, *after;
} store_constraint_change;

extern const store_constraint_change store_constraint_changes[];
extern const size_t store_n_constraint_changes;

/* The views, in creation order: their names and SQL as sqlite_master keeps it (without
 * trailing white space). */
extern const size_t store_n_views;
const char *store_view_name(size_t i);
void store_view_sql(size_t i, sqlbuf *b);

/* ================================================================ identity (store_migrate.c) */

/* The schema version, application id and number of schema objects, from one snapshot. */
ql_status store_read_identity(ql_store *s, int64_t *version, int64_t *app_id, int64_t *n_objects,
                              ql_error *err);
/* Refuses a database that is not qlab's or is newer than this qlab. */
ql_status store_check_identity(ql_store *s, int64_t version, int64_t app_id, int64_t n_objects,
                               ql_error *err);
/* Brings the database to this qlab's schema (a read-only store must be current). */
ql_status store_migrate(ql_store *s, ql_error *err);

#endif
