/* strbuf.h: appends, growth far past the first allocation, cutting back and reuse,
 * printf's output exactly, a failed add keeping the text so far, free. */
#include <stdio.h>
#include <string.h>
#include <wchar.h>

#include "base/strbuf.h"
#include "qltest.h"

/* Past the first allocation many times over, so that the buffer grows repeatedly. */
#define BIG_LEN 100000

static void empty_buffer(void)
{
    ql_strbuf b = {0};
    CHECK(b.text == NULL && b.len == 0 && !b.failed);
    CHECK(strcmp(ql_strbuf_cstr(&b), "") == 0);
    ql_strbuf_truncate(&b, 0); /* nothing to cut, nothing allocated */
    CHECK(b.text == NULL);
    /* An empty piece still makes a NUL-terminated text. */
    ql_strbuf_add(&b, "%s", "");
    CHECK(b.text != NULL && b.len == 0 && strcmp(b.text, "") == 0);
    ql_strbuf_free(&b);
    ql_strbuf_free(NULL);
}

static void appends(void)
{
    ql_strbuf b = {0};
    ql_strbuf_add(&b, "SELECT %s", "a");
    ql_strbuf_add(&b, ", %s", "b");
    ql_strbuf_add(&b, " FROM t WHERE id = %d", 42);
    CHECK(strcmp(ql_strbuf_cstr(&b), "SELECT a, b FROM t WHERE id = 42") == 0);
    CHECK_EQ_INT(b.len, strlen("SELECT a, b FROM t WHERE id = 42"));
    CHECK(!b.failed && b.cap > b.len);
    ql_strbuf_free(&b);
}

/* Many small adds and one large one, both to BIG_LEN bytes. */
static void growth(void)
{
    ql_strbuf b = {0};
    for (int i = 0; i < BIG_LEN; i++)
        ql_strbuf_add(&b, "%c", 'a' + i % 26);
    CHECK(!b.failed);
    CHECK_EQ_INT(b.len, BIG_LEN);
    CHECK(b.cap > b.len && b.text[BIG_LEN] == '\0' && strlen(b.text) == BIG_LEN);
    int wrong = 0;
    for (int i = 0; i < BIG_LEN; i++)
        wrong += b.text[i] != 'a' + i % 26;
    CHECK_EQ_INT(wrong, 0);
    ql_strbuf_free(&b);

    ql_strbuf_add(&b, "<%*s>", BIG_LEN, "x");
    CHECK(!b.failed);
    CHECK_EQ_INT(b.len, BIG_LEN + 2);
    CHECK(b.text[0] == '<' && b.text[1] == ' ' && b.text[BIG_LEN] == 'x' &&
          b.text[BIG_LEN + 1] == '>' && b.text[BIG_LEN + 2] == '\0');
    ql_strbuf_free(&b);
}

static void truncate_and_reuse(void)
{
    ql_strbuf b = {0};
    ql_strbuf_add(&b, "DROP VIEW IF EXISTS %s", "results");
    ql_strbuf_truncate(&b, 4);
    CHECK(strcmp(ql_strbuf_cstr(&b), "DROP") == 0 && b.len == 4);
    ql_strbuf_add(&b, " TABLE %s", "runs");
    CHECK(strcmp(ql_strbuf_cstr(&b), "DROP TABLE runs") == 0);
    /* Emptied and filled again with a shorter text: the memory is reused. */
    const char *mem = b.text;
    const size_t cap = b.cap;
    ql_strbuf_truncate(&b, 0);
    CHECK(strcmp(ql_strbuf_cstr(&b), "") == 0 && b.len == 0);
    ql_strbuf_add(&b, "%s", "BEGIN");
    CHECK(strcmp(ql_strbuf_cstr(&b), "BEGIN") == 0);
    CHECK(b.text == mem && b.cap == cap);
    ql_strbuf_free(&b);
}

/* Every piece exactly as snprintf writes it. */
static void same_as_snprintf(void)
{
    ql_strbuf b = {0};
    char want[512];
    int n = snprintf(want, sizeof want, "%-8s|%5d|%lld|%zu|%.17g|%a|%x|%%|%c|%.3s", "col", -7,
                     -1234567890123ll, (size_t)99, 0.1, 1.5, 255u, 'q', "truncated");
    ql_strbuf_add(&b, "%-8s|%5d|%lld|%zu|%.17g|%a|%x|%%|%c|%.3s", "col", -7, -1234567890123ll,
                  (size_t)99, 0.1, 1.5, 255u, 'q', "truncated");
    CHECK(n > 0 && (size_t)n < sizeof want);
    CHECK_MSG(strcmp(ql_strbuf_cstr(&b), want) == 0, "'%s' vs '%s'", ql_strbuf_cstr(&b), want);
    CHECK_EQ_INT(b.len, n);
    ql_strbuf_free(&b);
}

/* A piece vsnprintf refuses (a wide character the C locale cannot write: EILSEQ) is
 * a failure: the text so far stays, NUL-terminated, and later adds do nothing, also
 * after cutting back; free clears it. */
static void failure_is_sticky(void)
{
    ql_strbuf b = {0};
    ql_strbuf_add(&b, "kept %d", 1);
    ql_strbuf_add(&b, "lost %lc lost", (wint_t)0xD800);
    CHECK(b.failed);
    CHECK(strcmp(ql_strbuf_cstr(&b), "kept 1") == 0 && b.len == 6);
    ql_strbuf_add(&b, " also lost");
    CHECK(b.failed && strcmp(ql_strbuf_cstr(&b), "kept 1") == 0);
    ql_strbuf_truncate(&b, 0);
    ql_strbuf_add(&b, "after");
    CHECK(b.failed && strcmp(ql_strbuf_cstr(&b), "") == 0);
    ql_strbuf_free(&b);
    CHECK(b.text == NULL && b.len == 0 && b.cap == 0 && !b.failed);
    ql_strbuf_add(&b, "again %s", "whole");
    CHECK(!b.failed && strcmp(ql_strbuf_cstr(&b), "again whole") == 0);
    ql_strbuf_free(&b);
}

int main(void)
{
    empty_buffer();
    appends();
    growth();
    truncate_and_reuse();
    same_as_snprintf();
    failure_is_sticky();
    return qlt_done();
}
