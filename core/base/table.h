/* qlab: tables of text cells written as aligned Markdown or as CSV, and the
 * number formats the generated tables share. Used by `qlab report` and the
 * notebooks-c programs.
 *
 * A table has a fixed list of columns; rows are appended cell by cell. A cell
 * is a string or missing (NULL): Markdown shows a missing cell as the table's
 * null text (e.g. "—"), CSV as an empty field. Output depends only on the
 * cells, so the same cells give byte-identical files.
 *
 * Markdown: a pipe table whose columns are padded to a common width (counted
 * in UTF-8 code points) so that the raw text reads well too; '|' in a cell is
 * escaped and a line break becomes a space; right-aligned columns get a `--:`
 * rule. Columns can be hidden from the Markdown output (CSV always has every
 * column).
 * CSV: RFC 4180 quoting, "\n" line ends, one header row. */
#ifndef QL_TABLE_H
#define QL_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"

typedef struct ql_table ql_table;

typedef struct {
    const char *md;  /* Markdown header */
    const char *csv; /* CSV header (NULL = same as md) */
    bool right;      /* right-aligned (numbers) */
} ql_table_column;

/* Copies the column descriptions; NULL when out of memory. */
ql_table *ql_table_alloc(const ql_table_column *cols, size_t ncol);
void ql_table_free(ql_table *t);

/* Starts a new row; its cells are then given in column order by ql_table_put
 * and ql_table_putf. A row left short is completed with missing cells. */
ql_status ql_table_row(ql_table *t, ql_error *err);
/* The next cell of the current row; NULL = missing. Too many cells is a
 * programmer error (abort). */
ql_status ql_table_put(ql_table *t, const char *text, ql_error *err);
ql_status ql_table_putf(ql_table *t, ql_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The next cell: v formatted by fmt, a printf format that converts exactly one
 * double (e.g. "%.3f", "%+.4f", "%.3e"; anything else is a programmer error),
 * or a missing cell when v is NaN. */
ql_status ql_table_put_num(ql_table *t, double v, const char *fmt, ql_error *err)
    __attribute__((format(printf, 3, 0)));

size_t ql_table_rows(const ql_table *t);
/* The cell (NULL when missing). */
const char *ql_table_cell(const ql_table *t, size_t row, size_t col);
/* Whether every cell of a column is missing (true for a table without rows). */
bool ql_table_col_empty(const ql_table *t, size_t col);

/* Hides a column from the Markdown output. */
void ql_table_hide(ql_table *t, size_t col, bool hidden);
/* Right- or left-aligns a column, e.g. once its values show it holds numbers. */
void ql_table_align_right(ql_table *t, size_t col, bool right);

/* Writes the table (write errors show in ferror(out)). */
void ql_table_write_md(const ql_table *t, FILE *out, const char *null_text);
void ql_table_write_csv(const ql_table *t, FILE *out);
/* One CSV field with RFC 4180 quoting: quoted when it holds a comma, a quote or a
 * line break or starts or ends with a space; quotes doubled. */
void ql_csv_write_field(FILE *out, const char *s);

/* Number formats of the generated tables. Each returns buf. */
/* Bytes in binary units: "512 B", "4.50 KiB", "1.23 MiB", "2.00 GiB". */
char *ql_fmt_bytes(double bytes, char *buf, size_t size);
/* An integer with thousands separators: "1,234,567". */
char *ql_fmt_count(int64_t v, char *buf, size_t size);
/* Shortest exact decimal (ql_format_double) for CSV; NULL for NaN. */
const char *ql_fmt_exact(double v, char *buf, size_t size);

#endif
