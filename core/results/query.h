/* qlab: read-only queries on the results store, and their output as an aligned
 * text table, CSV, JSON or Markdown.
 *
 * Only statements SQLite reports as read-only (sqlite3_stmt_readonly: SELECT,
 * WITH ... SELECT, read-only PRAGMAs, EXPLAIN) are accepted, one at a time, and
 * ATTACH is refused, whatever mode the store was opened in.
 *
 * ql_query_print makes the whole output before it writes any of it: a query that
 * fails on the way (a store failure included) writes nothing.
 *
 * Output conventions (shared by `qlab query` and the report):
 *   - numbers: integers as is, reals in their shortest exact decimal form
 *     (ql_format_double), infinities as inf / -inf;
 *   - NULL (not measured): "NULL" in the text table, an empty cell in CSV and
 *     Markdown, null in JSON;
 *   - text table: columns separated by two spaces, numeric columns right-aligned,
 *     a dashed rule under the header and "(N rows)" at the end;
 *   - CSV: RFC 4180 quoting, "\n" line ends, a header row;
 *   - JSON: an array with one object per row (keys in column order), one row per
 *     line; infinities as the strings "inf" / "-inf", blobs as hex strings;
 *   - Markdown: the pipe table of ql_table_write_md (table.h): numeric columns
 *     right-aligned (`--:`), `|` escaped, line breaks as spaces (as in the text
 *     table). */
#ifndef QL_QUERY_H
#define QL_QUERY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "results/store.h"

typedef enum { QL_QUERY_TABLE, QL_QUERY_CSV, QL_QUERY_JSON, QL_QUERY_MD } ql_query_format;

typedef struct ql_query ql_query;

/* Prepares one read-only statement; anything else is refused with a message
 * quoting it. */
ql_status ql_query_prepare(ql_store *s, const char *sql, ql_query **out, ql_error *err);
void ql_query_free(ql_query *q);

/* Binds ?idx (1-based) to a text or an integer value. */
ql_status ql_query_bind_text(ql_query *q, int idx, const char *v, ql_error *err);
ql_status ql_query_bind_int64(ql_query *q, int idx, int64_t v, ql_error *err);

/* Advances to the next row; *row is false at the end. */
ql_status ql_query_step(ql_query *q, bool *row, ql_error *err);

/* Columns and the current row's values. */
int ql_query_columns(const ql_query *q);
const char *ql_query_column_name(const ql_query *q, int i);
bool ql_query_is_null(const ql_query *q, int i);
int64_t ql_query_int(const ql_query *q, int i);
double ql_query_double(const ql_query *q, int i);    /* NAN for NULL */
const char *ql_query_text(const ql_query *q, int i); /* NULL for NULL */

/* Runs sql with n_params text parameters and writes every row to out. */
ql_status ql_query_print(ql_store *s, const char *sql, const char *const *params, int n_params,
                         ql_query_format fmt, FILE *out, ql_error *err);

/* The named queries of `qlab query NAME`. */
typedef struct {
    const char *name;
    const char *args; /* usage of the parameters ("" or "<config-hash-prefix>") */
    int n_params;
    const char *summary;
    const char *sql;
} ql_named_query;

size_t ql_named_queries(const ql_named_query **out);
const ql_named_query *ql_named_query_find(const char *name);

#endif
