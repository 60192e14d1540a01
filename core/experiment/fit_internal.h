/* qlab fit: what the fit module's files share; not part of its interface (fit.h). */
#ifndef QL_FIT_INTERNAL_H
#define QL_FIT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "experiment/fit.h"
#include "model/gguf.h"

/* Most candidate types of a table. */
#define QL_FIT_MAX_TYPES 64

/* Appends a formatted note to t; fails only for want of memory. */
ql_status ql_fit_table_add_note(ql_fit_table *t, ql_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The k-th of ns evenly spaced rows out of n (the centres of ns equal strata): the rows
 * a sampled table measures. */
int64_t ql_fit_sample_row(int64_t k, int64_t ns, int64_t n);

/* The source spelled s (as ql_fit_imp_source_name spells it). */
bool ql_fit_imp_source_parse(const char *s, ql_fit_imp_source *out);

/* ---------------------------------------------------------------------------
 * The cache (fit_table_file.c): one table file per table identity (model, imatrix, types,
 * sampling, build) in the cache directory. */

/* Sets t->cache_path from t's identity ("" when opt->cache_dir is ""), its
 * directory in dir. */
ql_status ql_fit_table_file_locate(ql_fit_table *t, const ql_fit_options *opt, char *dir,
                                   size_t dir_size, ql_error *err);

/* The cached table of t's identity for model, or NULL; a file that was there but
 * unusable leaves why in problem. */
ql_fit_table *ql_fit_table_file_find(const ql_fit_table *t, const ql_gguf *model, char *problem,
                                     size_t problem_size);

/* Saves a computed table to its cache file; a failure becomes a note and the table
 * stands without a cache. The note problem (from ql_fit_table_file_find, may be "") is
 * added after saving: notes about the cache describe this run. */
ql_status ql_fit_table_file_store(ql_fit_table *t, const char *problem, ql_error *err);

#endif
