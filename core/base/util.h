/* qlab: small shared helpers: whole-file reads, SHA-256, strict number parsing,
 * time, and the thread count used by every parallel loop. */
#ifndef QL_UTIL_H
#define QL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"

/* ---- Reading files: every file qlab reads goes through these. ----
 * A path must name a regular file: a FIFO, socket, device or directory is refused at
 * once (the open cannot block: it is made non-blocking until the type is known), with
 * a message naming the file, its role and what it is instead. */

/* Largest file ql_file_read_all reads whole (texts, sweep files, manifests, tables):
 * 1 GiB, a hundred times the largest evaluation text qlab names. */
#define QL_FILE_READ_MAX ((uint64_t)1 << 30)

/* Opens path read-only after checking it is a regular file. what names the file's role
 * in messages ("sweep file", "importance matrix"); NULL means "file". On success *fd is
 * an open, blocking descriptor (caller closes) and *size the file's size. */
ql_status ql_file_open_regular(const char *path, const char *what, int *fd, uint64_t *size,
                               ql_error *err);

/* For files another library opens (SQLite databases): QL_OK when path does not exist
 * or is a regular file, else the refusal ql_file_open_regular gives. */
ql_status ql_file_refuse_special(const char *path, const char *what, ql_error *err);

/* Reads a whole regular file of at most max_bytes into a NUL-terminated heap buffer
 * (caller frees); a larger file is refused before anything is read. */
ql_status ql_file_read_capped(const char *path, const char *what, uint64_t max_bytes, char **out,
                              size_t *len, ql_error *err);

/* ql_file_read_capped(path, "file", QL_FILE_READ_MAX, ...). */
ql_status ql_file_read_all(const char *path, char **out, size_t *len, ql_error *err);

/* A regular file mapped read-only (private), for readers that parse a file in place
 * (GGUF, importance matrices). An empty file maps to data NULL, size 0. */
typedef struct {
    const void *data;
    size_t size;
} ql_file_map;

ql_status ql_file_map_open(ql_file_map *m, const char *path, const char *what, ql_error *err);
void ql_file_map_close(ql_file_map *m); /* zeroes m; a zeroed map is fine */

/* Writes a buffer to path atomically (temp file + rename). */
ql_status ql_file_write_all(const char *path, const void *data, size_t len, ql_error *err);

bool ql_file_exists(const char *path);

/* Creates a directory and its missing parents (mkdir -p, mode 0777 & ~umask). */
ql_status ql_make_dirs(const char *path, ql_error *err);

/* Lower-case hex SHA-256 (65 bytes with NUL). */
void ql_sha256_hex(const void *data, size_t len, char out[65]);
ql_status ql_sha256_file(const char *path, char out[65], ql_error *err);

/* Strict parsers: the whole string must be a number in range; no atoi. */
bool ql_parse_i64(const char *s, int64_t *out);
bool ql_parse_int(const char *s, int *out);
bool ql_parse_double(const char *s, double *out);

/* ---- Text for a terminal ----
 * Strings that come from files or databases may hold bytes a terminal obeys (escape
 * sequences, bells, C1 controls) or that are not UTF-8. These write them with every
 * control character but newline and tab, DEL, the C1 controls (U+0080..U+009F) and
 * every byte that is not part of a valid UTF-8 sequence as \xNN; the rest as is. */

/* Writes len bytes of s to f, escaped. */
void ql_fwrite_terminal(FILE *f, const char *s, size_t len);

/* The escaped form of s (NUL-terminated) into out, cut at a whole character when it
 * does not fit; returns the length written. */
size_t ql_escape_terminal(const char *s, char *out, size_t size);

/* Deterministic random numbers (splitmix64) for the synthetic inputs of the
 * benchmarks and tests: the same stream from the same seed on every platform. */
/* Next uniform value in (0, 1) (53 bits, never 0 or 1); advances *state. */
double ql_rng_uniform(uint64_t *state);
/* Next N(0, 1) value by Box-Muller: sqrt(-2 ln u1) cos(2 pi u2), u1 drawn first. */
double ql_rng_gauss(uint64_t *state);

/* Monotonic seconds. */
double ql_now(void);

/* Interrupts (SIGINT, SIGTERM): a signal handler records the signal with
 * ql_interrupt_request (async-signal-safe: it only sets a flag), long loops ask
 * ql_interrupted between steps and stop cleanly. ql_interrupted returns the signal
 * number, 0 when none came. */
void ql_interrupt_request(int sig);
int ql_interrupted(void);

/* Whether process pid runs on this machine (a process of another user counts). */
bool ql_pid_alive(long pid);

/* Temporary files of atomic writes ("NAME.tmp.PID", ql_file_write_all and the cache
 * writers) left in dir by a killed process: removed when PID is not alive here and the
 * file was not modified for min_age seconds (a writer on another machine sharing the
 * directory keeps its file fresh). Returns how many were removed; a missing directory
 * is none. */
size_t ql_remove_stale_tmp(const char *dir, double min_age);

/* Wall-clock time as "YYYY-MM-DDTHH:MM:SSZ" (UTC). */
void ql_utc_timestamp(char out[32]);

/* Threads used by qlab's parallel loops and by OpenBLAS. Default: all cores.
 * Results never depend on the thread count. */
/* Physical memory of the machine in bytes (0 when unknown). */
size_t ql_mem_total(void);

/* "1.5 GiB", "240.47 KiB", "512 B": bytes in binary units with up to 3 significant
 * decimals. */
void ql_format_bytes(double bytes, char *buf, size_t size);

void ql_threads_set(int n);
int ql_threads_get(void);

/* Copies at most size-1 bytes and always terminates; returns strlen(src). */
size_t ql_strlcpy(char *dst, const char *src, size_t size);

/* Makes the array *p of elements of size esz hold at least need of them: doubles
 * *cap (from 16) as often as needed, zeroes the new elements. False when out of
 * memory (*p and *cap unchanged). */
bool ql_grow(void **p, size_t *cap, size_t need, size_t esz);

/* Duplicates a string (NULL on allocation failure). */
char *ql_strdup(const char *s);

/* Adds s to set, an array of *n distinct strings kept in strcmp order (the
 * pointers are stored, not copies), unless it is there already or the set
 * holds max strings. Used to list the distinct values of a column, e.g. the
 * activation modes that become the series of a plot. */
void ql_strset_add(const char **set, size_t *n, size_t max, const char *s);

/* Shortest "%.Ng" spelling of a finite v that reads back as exactly v ("3", "0.1",
 * "2.5e-07"); -0 is written "0", non-finite values "nan", "inf", "-inf". Used
 * wherever a number is stored as text or compared as text (config canonical
 * forms, query output). Returns the length snprintf would write. */
int ql_format_double(double v, char *buf, size_t size);
/* The N of that spelling: the smallest N in 1..17 for which "%.Ng" of a finite v
 * reads back as exactly v (for writers with their own number syntax, e.g. JSON). */
int ql_double_precision(double v);

#endif
