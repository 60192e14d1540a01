/* qlab: one way to build a string whose length is not known in advance (SQL from
 * the store's declarations, gnuplot scripts, the fit table's file): a growable,
 * NUL-terminated heap string appended to with printf formats.
 *
 * A zero-initialised ql_strbuf is empty: `ql_strbuf b = {0};`. A failure (no memory,
 * or a format vsnprintf refuses) sets `failed`, keeps the text built so far and makes
 * later adds do nothing, so a builder makes all its adds and checks `failed` once,
 * before it uses the text. Not thread-safe: one buffer, one thread. */
#ifndef QL_STRBUF_H
#define QL_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *text;  /* NULL while nothing was allocated, else NUL-terminated at len */
    size_t len;  /* bytes of text before its NUL */
    size_t cap;  /* bytes allocated for text */
    bool failed; /* an add failed: the text lacks a piece (cleared only by ql_strbuf_free) */
} ql_strbuf;

/* Appends printf(fmt, ...) to b; on failure sets b->failed (see above). */
void ql_strbuf_add(ql_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Cuts b's text back to its first len bytes (len <= b->len), keeping the memory for
 * reuse: len 0 empties it. A failure stays set: a text cut back to before a failed
 * piece would look whole while a later piece is still missing. */
void ql_strbuf_truncate(ql_strbuf *b, size_t len);

/* b's text, "" while nothing was added (never NULL). */
const char *ql_strbuf_cstr(const ql_strbuf *b);

/* Frees b's text and makes it empty again (failed cleared); NULL does nothing. */
void ql_strbuf_free(ql_strbuf *b);

#endif
