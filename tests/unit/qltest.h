/* qlab tests: a few assertion macros and helpers shared by every test program.
 * A failed CHECK prints file:line and the values and marks the test failed; the
 * program goes on so one run shows every failure. Exit 77 means skipped. */
#ifndef QL_TEST_H
#define QL_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/gguf.h"

extern int qlt_failures;
extern int qlt_checks;

#define QLT_SKIP 77

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        qlt_checks++;                                                                              \
        if (!(cond)) {                                                                             \
            qlt_failures++;                                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);              \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        qlt_checks++;                                                                              \
        if (!(cond)) {                                                                             \
            qlt_failures++;                                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);              \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    CHECK_MSG((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a), (long long)(b))

#define CHECK_NEAR(a, b, tol)                                                                      \
    CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g (tol %.3g)", (double)(a),  \
              (double)(b), (double)(tol))

/* Status check: prints the error message when st != QL_OK. */
#define CHECK_OK(st, err)                                                                          \
    CHECK_MSG((st) == QL_OK, "status %d: %s", (int)(st), (err)->msg)

/* Path under ../shared (from $QLAB_SHARED, else <source>/../shared); static buffer per call site. */
const char *qlt_shared(const char *rel);
/* Path under the source tree. */
const char *qlt_source(const char *rel);
/* Temporary directory for this test (created once, removed by the OS / CI). */
const char *qlt_tmpdir(void);
/* Path of name in that directory, from a pool of 16 buffers: the 16 latest stay valid. */
const char *qlt_tmp(const char *name);
/* Prints "SKIP: reason" and exits 77; exits 1 instead when a check already failed. */
void qlt_skip(const char *reason) __attribute__((noreturn));
/* Reads a whole binary file (exits the test with a failure when it cannot). */
void *qlt_read_file(const char *path, size_t *len);
/* Whether two files hold the same bytes (exits like qlt_read_file when one is missing). */
bool qlt_same_file(const char *a, const char *b);
/* Splits line in place at its tabs into at most max columns; returns how many. */
int qlt_split_tabs(char *line, char **col, int max);
/* Compares qlab's file out with llama.cpp's ref, file name label: as many tensors,
 * and every tensor of out in ref with the same type and bytes (a failed check per
 * tensor that is not). Returns the number of identical tensors. */
int qlt_same_tensors(const ql_gguf *out, const ql_gguf *ref, const char *label);
/* Prints a summary and returns the exit code (0 ok, 1 failures). */
int qlt_done(void);

#endif
