/* The store's identity and migrations: a database is refused when it is not qlab's or
 * is newer, and brought to this qlab's schema from the declarations (store_impl.h). */
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "results/store.h"
#include "results/store_impl.h"

/* The schema version, application id and number of schema objects, read in one
 * statement so they come from one snapshot: read one by one, a store another process
 * creates in between would look like tables without a qlab schema version. */
ql_status store_read_identity(ql_store *s, int64_t *version, int64_t *app_id, int64_t *n_objects,
                              ql_error *err)
{
    static const char sql[] = "SELECT (SELECT user_version FROM pragma_user_version), "
                              "(SELECT application_id FROM pragma_application_id), "
                              "(SELECT count(*) FROM sqlite_master)";
    sqlite3_stmt *st;
    ql_status rc = store_prep(s, sql, &st, err);
    if (rc)
        return rc;
    int r = store_step(s, st);
    if (r == SQLITE_ROW) {
        *version = sqlite3_column_int64(st, 0);
        *app_id = sqlite3_column_int64(st, 1);
        *n_objects = sqlite3_column_int64(st, 2);
    } else if (r == SQLITE_DONE) {
        rc = ql_error_set(err, QL_EDB, "%s: the schema identity query returned nothing", s->path);
    } else {
        rc = store_db_fail(s, r, "reading the schema identity", err);
    }
    sqlite3_finalize(st);
    return rc;
}

/* ================================================================ migration */

ql_status store_check_identity(ql_store *s, int64_t version, int64_t app_id, int64_t n_objects,
                               ql_error *err)
{
    if (app_id != 0 && app_id != QL_STORE_APPLICATION_ID)
        return ql_error_set(err, QL_EDB, "%s: not a qlab results database (application_id 0x%llx)",
                            s->path, (unsigned long long)app_id);
    if (version > QL_STORE_SCHEMA_VERSION)
        return ql_error_set(err, QL_EDB,
                            "%s: results database schema version %lld is newer than this qlab "
                            "supports (%d); use a newer qlab",
                            s->path, (long long)version, QL_STORE_SCHEMA_VERSION);
    if (version == 0 && n_objects > 0)
        return ql_error_set(err, QL_EDB,
                            "%s: not a qlab results database (it has tables but no qlab schema "
                            "version)",
                            s->path);
    return QL_OK;
}

/* Whether every view of this qlab is in the database as this qlab defines it. */
static ql_status views_current(ql_store *s, bool *current, ql_error *err)
{
    *current = false;
    sqlite3_stmt *st;
    ql_status rc =
        store_prep(s, "SELECT sql FROM sqlite_master WHERE type = 'view' AND name = ?1", &st, err);
    if (rc)
        return rc;
    bool all = true;
    for (size_t i = 0; i < store_n_views && all && !rc; i++) {
        sqlite3_reset(st);
        if ((rc = store_bind_text(s, st, 1, store_view_name(i), err)))
            break;
        int r = store_step(s, st);
        if (r == SQLITE_ROW) {
            ql_strbuf b = {0};
            store_view_sql(i, &b);
            const char *have = (const char *)sqlite3_column_text(st, 0);
            if (!(rc = store_sql_check(s, &b, err)))
                all = have && strcmp(have, ql_strbuf_cstr(&b)) == 0;
            ql_strbuf_free(&b);
        } else if (r == SQLITE_DONE) {
            all = false;
        } else {
            rc = store_db_fail(s, r, "reading the views", err);
        }
    }
    sqlite3_finalize(st);
    *current = !rc && all;
    return rc;
}

/* Brings a database from schema version `version` to the current one (inside the
 * caller's transaction): what it lacks is created from the declarations, the views
 * are created anew. Version 0 is an empty file. */
static ql_status upgrade(ql_store *s, int64_t version, ql_error *err)
{
    ql_status st;
    ql_strbuf b = {0};
    char what[160];
    for (size_t t = 0; t < store_n_tables; t++) {
        const table_def *td = &store_tables[t];
        if (td->pub.since > version) {
            snprintf(what, sizeof what, "creating table %s (schema version %d)", td->pub.name,
                     td->pub.since);
            store_create_table_sql(td, &b);
            if ((st = store_exec_sql(s, &b, what, err)))
                return st;
            for (const char *const *x = td->extra; *x; x++)
                if ((st = store_exec(s, *x, what, err)))
                    return st;
            continue;
        }
        column cols[MAX_TABLE_COLUMNS];
        size_t n = store_table_columns(td, cols);
        for (size_t i = 0; i < n; i++) {
            if (cols[i].since <= version)
                continue;
            snprintf(what, sizeof what, "adding column %s.%s (schema version %d)", td->pub.name,
                     cols[i].name, cols[i].since);
            ql_strbuf_add(&b, "ALTER TABLE %s ADD COLUMN %s %s", td->pub.name, cols[i].name,
                          cols[i].decl);
            if ((st = store_exec_sql(s, &b, what, err)))
                return st;
        }
    }
    return QL_OK;
}

/* Rewrites the constraints version > `version` changed (constraint_changes), inside the
 * caller's transaction. */
static ql_status rewrite_constraints(ql_store *s, int64_t version, ql_error *err)
{
    ql_status st = QL_OK;
    bool writable = false;
    for (size_t i = 0; i < store_n_constraint_changes && !st; i++) {
        if (store_constraint_changes[i].since <= version)
            continue;
        /* A table this migration created has the current definition already. */
        bool existed = false;
        for (size_t t = 0; t < store_n_tables; t++)
            if (strcmp(store_tables[t].pub.name, store_constraint_changes[i].table) == 0)
                existed = store_tables[t].pub.since <= version;
        if (!existed)
            continue;
        char what[160];
        snprintf(what, sizeof what, "changing a constraint of table %s (schema version %d)",
                 store_constraint_changes[i].table, store_constraint_changes[i].since);
        sqlite3_stmt *q;
        if ((st = store_prep_what(
                 s, "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1", &q, NULL,
                 what, err)))
            break;
        char *sql = NULL;
        if (!(st = store_bind_text(s, q, 1, store_constraint_changes[i].table, err))) {
            int r = store_step(s, q);
            const char *have = r == SQLITE_ROW ? (const char *)sqlite3_column_text(q, 0) : NULL;
            const char *at = have ? strstr(have, store_constraint_changes[i].before) : NULL;
            if (r != SQLITE_ROW && r != SQLITE_DONE) {
                st = store_db_fail(s, r, what, err);
            } else if (!at || strstr(at + 1, store_constraint_changes[i].before)) {
                st = ql_error_set(err, QL_EDB,
                                  "%s: %s: the table's definition does not hold \"%s\" once (a "
                                  "database changed by hand?)",
                                  s->path, what, store_constraint_changes[i].before);
            } else {
                const size_t pre = (size_t)(at - have),
                             before = strlen(store_constraint_changes[i].before);
                sql = sqlite3_mprintf("%.*s%s%s", (int)pre, have, store_constraint_changes[i].after,
                                      at + before);
                if (!sql)
                    st = ql_error_set(err, QL_ENOMEM, "%s: out of memory", s->path);
            }
        }
        sqlite3_finalize(q);
        if (!st && !writable) {
            st = store_exec(s, "PRAGMA writable_schema = ON", what, err);
            writable = !st;
        }
        if (!st &&
            !(st = store_prep_what(s,
                                   "UPDATE sqlite_master SET sql = ?1 WHERE type = 'table' AND"
                                   " name = ?2",
                                   &q, NULL, what, err))) {
            if (!(st = store_bind_text(s, q, 1, sql, err)) &&
                !(st = store_bind_text(s, q, 2, store_constraint_changes[i].table, err)))
                st = store_step_done(s, q, what, err);
            sqlite3_finalize(q);
        }
        sqlite3_free(sql);
    }
    if (!writable)
        return st;
    /* A new schema cookie makes every connection read the changed definitions. */
    int64_t cookie = 0;
    if (!st && !(st = store_pragma_int(s, "PRAGMA schema_version", &cookie, err))) {
        char set[64];
        snprintf(set, sizeof set, "PRAGMA schema_version = %lld", (long long)cookie + 1);
        st = store_exec(s, set, "changing the schema cookie", err);
    }
    sqlite3_exec(s->db, "PRAGMA writable_schema = OFF", NULL, NULL, NULL);
    return st;
}

static ql_status recreate_views(ql_store *s, ql_error *err)
{
    ql_status st;
    ql_strbuf b = {0};
    for (size_t i = store_n_views; i-- > 0;) {
        ql_strbuf_add(&b, "DROP VIEW IF EXISTS %s", store_view_name(i));
        if ((st = store_exec_sql(s, &b, "dropping the views", err)))
            return st;
    }
    for (size_t i = 0; i < store_n_views; i++) {
        store_view_sql(i, &b);
        if ((st = store_exec_sql(s, &b, "creating the views", err)))
            return st;
    }
    return QL_OK;
}

ql_status store_migrate(ql_store *s, ql_error *err)
{
    int64_t version, app_id, n_objects;
    ql_status st;
    if ((st = store_read_identity(s, &version, &app_id, &n_objects, err)) ||
        (st = store_check_identity(s, version, app_id, n_objects, err)))
        return st;
    if (s->readonly) {
        if (version == 0)
            return ql_error_set(err, QL_EDB, "%s: empty database (no qlab schema)", s->path);
        if (version < QL_STORE_SCHEMA_VERSION)
            return ql_error_set(err, QL_EDB,
                                "%s: results database schema version %lld is older than %d; "
                                "open it once read-write (e.g. with qlab sweep) to migrate it",
                                s->path, (long long)version, QL_STORE_SCHEMA_VERSION);
        return QL_OK;
    }
    bool current = false;
    if (version == QL_STORE_SCHEMA_VERSION && ((st = views_current(s, &current, err)) || current))
        return st;

    if ((st = store_begin(s, err)))
        return st;
    /* Another process may have migrated between the check and the lock. */
    if ((st = store_pragma_int(s, "PRAGMA user_version", &version, err)) ||
        (st = store_check_identity(s, version, QL_STORE_APPLICATION_ID, 0, err)) ||
        (st = upgrade(s, version, err)) || (st = rewrite_constraints(s, version, err)) ||
        (st = recreate_views(s, err)))
        goto out_rollback;
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d; PRAGMA application_id = %d",
             QL_STORE_SCHEMA_VERSION, QL_STORE_APPLICATION_ID);
    if ((st = store_exec(s, sql, "setting the schema version", err)) || (st = store_commit(s, err)))
        goto out_rollback;
    return QL_OK;
out_rollback:
    store_rollback(s);
    return st;
}
