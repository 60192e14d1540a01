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
#include "base/strbuf.h"
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

/* ================================================================ built statements (store_db.c)
 *
 * Statements built from the declarations are ql_strbufs (their length grows with the
 * schema). These take one, fail with an out-of-memory error when building it failed,
 * and free it whatever the outcome (it is empty again, for reuse). */

/* QL_OK when sql was built whole, else "path: out of memory building a statement". */
ql_status store_sql_check(ql_store *s, const ql_strbuf *sql, ql_error *err);
ql_status store_prep_sql(ql_store *s, ql_strbuf *sql, sqlite3_stmt **st, ql_error *err);
ql_status store_exec_sql(ql_store *s, ql_strbuf *sql, const char *what, ql_error *err);

/* ================================================================ schema (store_schema.c) */

/* Where a column's value comes from when a row is written: a field of one of the
 * structs the writer passes (src: its index), read by the field's C type. A NULL text,
 * a NaN real and (unless keep_negative) a negative integer are written as NULL. A
 * column without a field (ctype STORE_C_NONE) is bound by name by its writer. */
typedef enum { STORE_C_NONE, STORE_C_TEXT, STORE_C_INT, STORE_C_INT64, STORE_C_REAL } store_ctype;

typedef struct {
    store_ctype ctype;
    unsigned char src;
    bool keep_negative;
    size_t offset;
} store_field;

#define STORE_CTYPE(x)                                                                             \
    _Generic((x), const char *: STORE_C_TEXT, int: STORE_C_INT, int64_t: STORE_C_INT64,            \
             double: STORE_C_REAL)
/* Field f of struct T, the writer's source number `source`; FIELD is source 0. */
#define FIELD_OF(source, T, f)                                                                     \
    {                                                                                              \
        .ctype = STORE_CTYPE(((T *)0)->f), .src = (source), .offset = offsetof(T, f)               \
    }
#define FIELD(T, f) FIELD_OF(0, T, f)
/* An integer field whose negative values are values (not "unknown"). */
#define SIGNED_FIELD_OF(source, T, f)                                                              \
    {                                                                                              \
        .ctype = STORE_CTYPE(((T *)0)->f), .src = (source), .keep_negative = true,                 \
        .offset = offsetof(T, f)                                                                   \
    }

/* Which statements write a column (col_def.writes). A column with none is written by
 * its table's INSERT (STORE_ROW), unless it is an INTEGER PRIMARY KEY (the row id). The
 * runs table's columns say which steps of a run write them. */
enum {
    STORE_ROW = 1u << 0,       /* the table's INSERT */
    STORE_RUN_KEY = 1u << 1,   /* the run's identity: the INSERT of a new run */
    STORE_RUN_CLAIM = 1u << 2, /* a claim: the INSERT of a new run and the UPDATE of a retry */
    STORE_RUN_DONE = 1u << 3,  /* the UPDATE of a finished run (a retry clears them) */
    STORE_RUN_END = 1u << 4,   /* the UPDATE of a failed or interrupted run (a retry clears them) */
};

/* The sources of the tables whose rows come from more than one struct (field.src). */
enum {
    STORE_RUN_SRC_KEY,
    STORE_RUN_SRC_INFO,
    STORE_RUN_SRC_TIMING,
    STORE_RUN_SRC_RESULT,
    STORE_RUN_SRCS
};
enum { STORE_SENS_SRC_KEY, STORE_SENS_SRC_ROW, STORE_SENS_SRCS };

/* A column: its SQL declaration (type and constraints), the schema version that
 * added it and a comment for the schema. A column added after its table needs a
 * declaration ALTER TABLE accepts (no PRIMARY KEY or UNIQUE; NOT NULL with a DEFAULT).
 * Then how rows are written: the field it is read from, the statements that write it
 * (writes) and, in a table whose INSERT merges into the row of the same key
 * (STORE_CONFLICT_MERGE), the SQL of its value then (merge; NULL: the stored value,
 * or the new one where none is stored). */
typedef struct {
    const char *name;
    const char *decl;
    int since;
    const char *comment;
    store_field field;
    unsigned writes;
    const char *merge;
} col_def;

enum { DERIVED_NONE, DERIVED_CONFIGS, DERIVED_METRICS };

/* What a table's INSERT does with a row whose key is stored already. */
typedef enum {
    STORE_CONFLICT_FAIL,   /* fails (the constraint's error) */
    STORE_CONFLICT_IGNORE, /* INSERT OR IGNORE: the stored row stays */
    STORE_CONFLICT_KEEP,   /* ON CONFLICT (key) DO NOTHING */
    STORE_CONFLICT_MERGE,  /* ON CONFLICT (key) DO UPDATE SET each column's merge; RETURNING id */
} store_conflict;

typedef struct {
    ql_store_table pub;
    const char *comment;      /* a line of SQL comment before CREATE TABLE, or NULL */
    const col_def *cols;      /* the declared columns, up to a NULL name */
    int derived;              /* then the columns of a list: DERIVED_* */
    const char *constraints;  /* table constraints, one per line, or NULL */
    const char *options;      /* after the closing parenthesis ("WITHOUT ROWID"), or "" */
    const char *const *extra; /* further statements (indexes) with the table, NULL-terminated */
    store_conflict conflict;  /* of its INSERT */
} table_def;

/* The tables, referenced ones first. */
extern const table_def *const store_tables;
extern const size_t store_n_tables;
/* The table of that name (one of the store's). */
const table_def *store_table(const char *name);

/* A column as created: the declaration of a derived one is built here. */
typedef struct {
    const char *name;
    char decl[160];
    int since;
    const char *comment;
    store_field field; /* none for a derived one */
    unsigned writes;
    const char *merge;
} column;

#define MAX_TABLE_COLUMNS QL_STORE_COLUMN_MAX

/* The columns of table t, in creation order. */
size_t store_table_columns(const table_def *t, column *out);
/* Its CREATE TABLE statement, into b (replacing what b held, as store_insert_sql,
 * store_update_sql and store_view_sql do too). */
void store_create_table_sql(const table_def *t, ql_strbuf *b);
/* Whether statements for `writes` (STORE_*) write column c. */
bool store_column_written(const column *c, unsigned writes);
/* "INSERT INTO t (a, b) VALUES (:a, :b)" over the columns written for `writes`, with
 * the table's conflict clause: every parameter is the column's name. */
void store_insert_sql(const table_def *t, unsigned writes, ql_strbuf *b);
/* "UPDATE t SET a = :a, b = :b" over the columns written for `writes`, then
 * "c = NULL" for those written for `clear` and not for `writes`; the caller adds the
 * rest (more assignments, WHERE). */
void store_update_sql(const table_def *t, unsigned writes, unsigned clear, ql_strbuf *b);

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
void store_view_sql(size_t i, ql_strbuf *b);

/* ================================================================ rows bound by name (store_db.c)
 *
 * A statement whose parameters are named after columns (":col"), bound by name, and
 * stepped only when every parameter is bound: a column added to a statement and not
 * bound is a broken invariant, not a NULL. */

#define STORE_PARAM_MAX (QL_STORE_COLUMN_MAX + 8)

typedef struct {
    ql_store *s;
    sqlite3_stmt *st;
    unsigned char bound[STORE_PARAM_MAX + 1]; /* by parameter index */
} store_stmt;

/* Prepares the built statement sql (freeing it, as the built statements' helpers do). */
ql_status store_stmt_prep(ql_store *s, ql_strbuf *sql, store_stmt *q, ql_error *err);
/* Forgets the bindings for the next row. */
void store_stmt_reset(store_stmt *q);
void store_stmt_finalize(store_stmt *q);
/* Column col's parameter: a text (NULL: NULL), a count (negative: NULL), an integer
 * as it is, a real (NaN: NULL). */
ql_status store_put_text(store_stmt *q, const char *col, const char *v, ql_error *err);
ql_status store_put_count(store_stmt *q, const char *col, int64_t v, ql_error *err);
ql_status store_put_int(store_stmt *q, const char *col, int64_t v, ql_error *err);
ql_status store_put_real(store_stmt *q, const char *col, double v, ql_error *err);
/* Every column of t the statement has a parameter for and that has a field, from
 * src[field.src] (n_src sources). */
ql_status store_put_fields(store_stmt *q, const table_def *t, const void *const *src, size_t n_src,
                           ql_error *err);
/* Steps it to completion (no rows), or to the one id it returns. */
ql_status store_stmt_done(store_stmt *q, const char *what, ql_error *err);
ql_status store_stmt_id(store_stmt *q, const char *what, int64_t *id, ql_error *err);

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
