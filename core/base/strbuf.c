/* A growable string: see strbuf.h. */
#include "base/strbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"

/* The first allocation: most texts built here are a statement or a few lines. */
#define FIRST_CAP 256

/* A failed add may have written part of its piece after the text: cut it off. */
static void fail(ql_strbuf *b)
{
    b->failed = true;
    if (b->text)
        b->text[b->len] = '\0';
}

void ql_strbuf_add(ql_strbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    /* Formats into the room left; when the piece does not fit, grows to hold it and
     * formats again (the second pass fits: same arguments, same length). */
    for (;;) {
        const size_t room = b->cap - b->len;
        va_list ap;
        va_start(ap, fmt);
        const int n = vsnprintf(b->text ? b->text + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n >= SIZE_MAX - b->len) {
            fail(b);
            return;
        }
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        const size_t need = b->len + (size_t)n + 1;
        size_t cap = b->cap > SIZE_MAX / 2 ? SIZE_MAX : 2 * b->cap;
        cap = cap < FIRST_CAP ? FIRST_CAP : cap;
        cap = cap < need ? need : cap;
        char *t = realloc(b->text, cap);
        if (!t) {
            fail(b);
            return;
        }
        b->text = t;
        b->cap = cap;
    }
}

void ql_strbuf_truncate(ql_strbuf *b, size_t len)
{
    QL_ASSERT(len <= b->len);
    b->len = len;
    if (b->text)
        b->text[len] = '\0';
}

const char *ql_strbuf_cstr(const ql_strbuf *b)
{
    return b->text ? b->text : "";
}

void ql_strbuf_free(ql_strbuf *b)
{
    if (!b)
        return;
    free(b->text);
    *b = (ql_strbuf){0};
}
