/* qlab: named models, texts and tables (DESIGN.md section 7).
 *
 * datasets/manifest.tsv names every file qlab knows (name, kind, file, sha256,
 * bytes, source, license). A name resolves to the first existing file among
 *   $QLAB_DATA/<file>, $QLAB_DATA/<basename>,
 *   <root>/datasets/cache/<file>, <root>/datasets/cache/<basename>,
 *   <root>/../shared/<file>
 * where <root> is $QLAB_ROOT or the source tree qlab was built from. The sha256
 * is verified the first time a file is used and remembered in
 * <root>/datasets/cache/verified.tsv (by path, size and mtime). A string that is
 * not a manifest name is taken as a path. When nothing is found, the error says
 * where qlab looked and where to download the file. */
#ifndef QL_DATA_H
#define QL_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define QL_PATH_MAX 4096

typedef struct {
    char name[128];
    char kind[16]; /* model | text | table */
    char file[512];
    char sha256[65];
    int64_t bytes;
    char source[512];
    char license[256];
} ql_data_entry;

/* Root directory of the qlab tree ($QLAB_ROOT or the build's source root). */
const char *ql_data_root(void);

/* Loads the manifest (cached after the first call; thread-safe after that). */
ql_status ql_data_manifest(const ql_data_entry **entries, int *n, ql_error *err);

/* Finds a manifest entry by name; NULL if absent. */
const ql_data_entry *ql_data_find(const char *name, ql_error *err);

/* Resolves a name or a path to an existing file, verifying a named file's
 * sha256 once. entry_out (may be NULL) receives the manifest entry or NULL for
 * a plain path. */
ql_status ql_data_resolve(const char *name_or_path, char *path_out, size_t size,
                          const ql_data_entry **entry_out, ql_error *err);

/* Where a manifest entry is, without verifying (NULL path when nowhere). Used by
 * `qlab data list`. */
bool ql_data_locate(const ql_data_entry *e, char *path_out, size_t size);

#endif
