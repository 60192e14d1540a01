/* qlab: a generated text file (table, plot data, gnuplot script) built in
 * memory and then written atomically, so that a failed or interrupted run
 * never leaves a half-written file where a complete one stood. Used by
 * `qlab report` and the notebooks-c programs.
 *
 *     ql_doc d;
 *     if (ql_doc_open(&d, err)) return ...;
 *     fprintf(d.f, ...);
 *     st = ql_doc_save(&d, dir, "report.md", log, err);
 *
 * A ql_doc that was saved or discarded can be opened again; discarding a
 * zero-initialized, saved or discarded one does nothing. */
#ifndef QL_DOC_H
#define QL_DOC_H

#include <stddef.h>
#include <stdio.h>

#include "base/error.h"

typedef struct {
    FILE *f; /* write the content here (an open_memstream stream) */
    char *p; /* the stream's buffer, owned */
    size_t n;
} ql_doc;

/* Starts an empty document. */
ql_status ql_doc_open(ql_doc *d, ql_error *err);

/* Writes an open document to dir/name (ql_file_write_all: temp file + rename),
 * prints "  dir/name" to log when that worked (log NULL = quiet), and frees the
 * document, also on error. A write to d->f that failed (out of memory) is an
 * error naming the file. */
ql_status ql_doc_save(ql_doc *d, const char *dir, const char *name, FILE *log, ql_error *err);

/* Frees the document without writing it. */
void ql_doc_discard(ql_doc *d);

#endif
