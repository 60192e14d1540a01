/* qlab: small shared helpers: whole-file reads, SHA-256, strict number parsing,
 * time, and the thread count used by every parallel loop. */
#ifndef QL_UTIL_H
#define QL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* Reads a whole file into a NUL-terminated heap buffer (caller frees). */
ql_status ql_file_read_all(const char *path, char **out, size_t *len, ql_error *err);

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

/* Deterministic random numbers (splitmix64) for the synthetic inputs of the
 * benchmarks and tests: the same stream from the same seed on every platform. */
/* Next uniform value in (0, 1) (53 bits, never 0 or 1); advances *state. */
double ql_rng_uniform(uint64_t *state);
/* Next N(0, 1) value by Box-Muller: sqrt(-2 ln u1) cos(2 pi u2), u1 drawn first. */
double ql_rng_gauss(uint64_t *state);

/* Monotonic seconds. */
double ql_now(void);

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
