/* qlab: status codes and the caller-owned error.
 *
 * Every library call that can fail on input returns a ql_status and fills a
 * ql_error supplied by the caller. The message names the file, the offset or
 * line, the key or tensor, and expected vs actual. Only main() turns a status
 * into an exit code. A NULL error pointer is allowed: the message is dropped. */
#ifndef QL_ERROR_H
#define QL_ERROR_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum {
    QL_OK = 0,
    QL_EIO,          /* cannot open, read or write a file */
    QL_EFORMAT,      /* malformed input: GGUF, imatrix, sweep file, ... */
    QL_EINVAL,       /* invalid argument or impossible request */
    QL_ENOMEM,       /* allocation failed */
    QL_ENOTFOUND,    /* named dataset, key or tensor does not exist */
    QL_EUNSUPPORTED, /* valid but not implemented (e.g. a type qlab cannot quantize) */
    QL_EDB,          /* SQLite error */
    QL_EEXTERNAL,    /* an external program (gnuplot) failed */
    QL_EINTERRUPTED, /* stopped by a signal (SIGINT, SIGTERM; ql_interrupted in util.h) */
} ql_status;

#define QL_ERROR_MSG_MAX 2048

typedef struct {
    ql_status status;
    char msg[QL_ERROR_MSG_MAX];
} ql_error;

/* Clears err (status QL_OK, empty message). */
void ql_error_clear(ql_error *err);

/* Sets status and message; returns status so callers can write
 * `return ql_error_set(err, QL_EFORMAT, "%s: ...", path);` */
ql_status ql_error_set(ql_error *err, ql_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends context ("loading model x: ") to an error already set; returns its status. */
ql_status ql_error_prefix(ql_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Short name of a status ("format error"). */
const char *ql_status_name(ql_status status);

/* Programmer errors (broken invariants) abort with file:line; never used for input errors. */
#define QL_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "qlab: internal error at %s:%d: assertion '%s' failed\n", __FILE__,   \
                    __LINE__, #cond);                                                              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
