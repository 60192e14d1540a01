/* A small results database for tests of the store, the queries and the CLI:
 * one model, one text, four configs (F16, Q8_0, Q4_0 done; IQ4_NL failed) and
 * one run left 'running' (Q5_0), with NaN measurements where a real sweep would
 * have none. */
#ifndef QL_STORE_FIXTURE_H
#define QL_STORE_FIXTURE_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "results/store.h"

#define QLT_FIXTURE_MODEL_SHA       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define QLT_FIXTURE_TEXT_SHA        "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define QLT_FIXTURE_CTX             128
#define QLT_FIXTURE_CHUNKS          4
#define QLT_FIXTURE_METRICS_VERSION 1
#define QLT_FIXTURE_SWEEP           "fixture"
#define QLT_FIXTURE_ERROR           "quantize: IQ4_NL is \"not implemented\", see a|b"

/* Creates the database at path (which must not exist). */
ql_status qlt_store_fixture(const char *path, ql_error *err);

/* Stores a bare model (QLT_FIXTURE_MODEL_SHA, path "m.gguf") and text
 * (QLT_FIXTURE_TEXT_SHA, name "text") in s, checking each call; their ids in
 * *model and *text. */
void qlt_store_add_inputs(ql_store *s, int64_t *model, int64_t *text);

/* Writes the schema-1 database of tests/data/store/v1-fixture.sql (what qlab wrote
 * before per-chunk metrics) to path; false, after a failed CHECK, when it cannot. */
bool qlt_v1_fixture(const char *path);
/* Replays the sqlite3 .dump tests/data/store/<name> into a new database at path. */
bool qlt_dump_fixture(const char *path, const char *name);

/* Removes a database with its WAL and shared-memory files. */
void qlt_remove_db(const char *path);
/* qlt_tmp(name), with whatever database an earlier run left there removed. */
const char *qlt_tmp_db(const char *name);

/* The first column of the first row of sql: as an integer (-999 when there is no
 * row), or as a double (NAN when NULL, -999 when there is no row). A failing
 * statement prints SQLite's message. */
int64_t qlt_sql_int(sqlite3 *db, const char *sql);
double qlt_sql_real(sqlite3 *db, const char *sql);

#endif
