/* qlab: named models, texts and tables.
 *
 * datasets/manifest.tsv names every file qlab knows (name, kind, file, sha256,
 * bytes, source, license). A name resolves to the first existing file among
 *   $QLAB_DATA/<file>, $QLAB_DATA/<basename>,
 *   <root>/datasets/cache/<file>, <root>/datasets/cache/<basename>,
 *   <root>/../shared/<file>
 * where <root> is $QLAB_ROOT or the source tree qlab was built from; a file given as
 * an absolute path under /usr/ (a text a Debian package installs, such as Python's
 * standard library) resolves to $QLAB_DATA/<basename>, then to that path. The sha256
 * is verified the first time a file is used and remembered in
 * <root>/datasets/cache/verified.tsv with a stamp of the file (path, size, mtime,
 * ctime, device, inode and a hash of sampled blocks, data.c): a file whose stamp
 * changed is verified again, so an edit in place is caught even when the writer
 * restored the size and mtime. A string that is
 * not a manifest name is taken as a path. When nothing is found, the error says
 * where qlab looked and where to download the file. */
#ifndef QL_DATA_H
#define QL_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define QL_PATH_MAX 4096
/* Most places a name is looked for (see the search order above). */
#define QL_DATA_MAX_CANDIDATES 5

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

/* Forgets the loaded manifest so the next call reads it again (tests; tools that
 * edit it). Not thread-safe against concurrent users of the entries. */
void ql_data_reset(void);

/* Finds a manifest entry by name; NULL if absent. */
const ql_data_entry *ql_data_find(const char *name, ql_error *err);

/* Resolves a name or a path to an existing file, verifying a named file's
 * sha256 once. entry_out (may be NULL) receives the manifest entry or NULL for
 * a plain path. */
ql_status ql_data_resolve(const char *name_or_path, char *path_out, size_t size,
                          const ql_data_entry **entry_out, ql_error *err);

/* ql_data_resolve with one path rule for a file that names its inputs (a sweep file):
 * a manifest name resolves by name (of `kind`, "model" or "text", when kind is not NULL:
 * a name of another kind is an error that says so; kind "file": no names, a path only);
 * anything else is a path, relative to base_dir when it is relative (base_dir NULL or "":
 * the current directory). An error shows the path looked at and the manifest's names
 * of the kind. */
ql_status ql_data_resolve_in(const char *base_dir, const char *kind, const char *name_or_path,
                             char *path_out, size_t size, const ql_data_entry **entry_out,
                             ql_error *err);

/* ql_data_resolve_in without verifying a named file's sha256: where it is, or the error
 * that it is nowhere (a check before any work, `qlab sweep --list`). */
ql_status ql_data_find_in(const char *base_dir, const char *kind, const char *name_or_path,
                          char *path_out, size_t size, ql_error *err);

/* path relative to base_dir into out ("" or NULL base_dir, or an absolute path: path
 * itself); false when it does not fit. */
bool ql_data_join(const char *base_dir, const char *path, char *out, size_t size);

/* The SHA-256 (hex) of a file ql_data_resolve gave: the manifest entry's (the file was
 * verified against it), or, for a plain path (entry NULL), the file's own. */
ql_status ql_data_sha256(const ql_data_entry *entry, const char *path, char sha[65],
                         ql_error *err);

/* Where a manifest entry is, without verifying; false when nowhere. Used by
 * `qlab data list`. */
bool ql_data_locate(const ql_data_entry *e, char *path_out, size_t size);

/* The places a manifest entry is looked for, in search order; returns how many. */
int ql_data_candidates(const ql_data_entry *e, char out[QL_DATA_MAX_CANDIDATES][QL_PATH_MAX]);

/* Locates an entry and checks its size and sha256: always when force, otherwise
 * only when the verified-hash cache has no record of this file with its current
 * stamp. A success is remembered in the cache. Errors: QL_ENOTFOUND (message
 * lists the places looked and how to get the file), QL_EFORMAT (size or sha256
 * mismatch, expected vs actual), QL_EIO. */
ql_status ql_data_verify(const ql_data_entry *e, bool force, char *path_out, size_t size,
                         ql_error *err);

/* True when the cache records path as verified for e with its current stamp. */
bool ql_data_is_verified(const ql_data_entry *e, const char *path);

#endif
