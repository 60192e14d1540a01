/* The pre-tokenizer regex engine: ECMAScript match semantics (leftmost, first
 * alternative, greedy with backtracking, atomic lookahead), llama.cpp's collapsed
 * categories, and the patterns it refuses. */
#include <string.h>

#include "qltest.h"
#include "regex.h"
#include "unicode.h"

/* Symbols of a UTF-8 text as the engine sees them for this pattern. */
static size_t to_syms(const ql_regex *re, const char *text, uint32_t *sym)
{
    size_t n = 0, len = strlen(text);
    for (size_t pos = 0; pos < len;) {
        uint32_t c = ql_utf8_decode(text, len, &pos);
        sym[n++] = ql_regex_is_collapsed(re) ? ql_regex_collapse(c) : ql_regex_widen(c);
    }
    return n;
}

/* Searches pattern in text from symbol `from`; expects [ms, me) or no match (ms < 0). */
static void expect(const char *pattern, const char *text, size_t from, int ms, int me)
{
    ql_error err;
    ql_regex *re = NULL;
    ql_status st = ql_regex_compile(&re, pattern, &err);
    CHECK_OK(st, &err);
    if (st != QL_OK)
        return;
    uint32_t sym[256];
    size_t n = to_syms(re, text, sym);
    ql_regex_stack stack = {0};
    size_t s = 0, e = 0;
    int r = ql_regex_search(re, &stack, sym, 0, n, from, &s, &e);
    if (ms < 0)
        CHECK_MSG(r == 0, "/%s/ on '%s': expected no match, got [%zu, %zu)", pattern, text, s, e);
    else
        CHECK_MSG(r == 1 && s == (size_t)ms && e == (size_t)me,
                  "/%s/ on '%s' from %zu: expected [%d, %d), got r=%d [%zu, %zu)", pattern, text,
                  from, ms, me, r, s, e);
    ql_regex_stack_deinit(&stack);
    ql_regex_free(re);
}

static void expect_error(const char *pattern, ql_status want)
{
    ql_error err;
    ql_error_clear(&err);
    ql_regex *re = NULL;
    ql_status st = ql_regex_compile(&re, pattern, &err);
    CHECK_MSG(st == want, "/%s/: status %d, expected %d (%s)", pattern, (int)st, (int)want,
              err.msg);
    CHECK(re == NULL);
    if (st != QL_OK)
        CHECK_MSG(strstr(err.msg, pattern) != NULL, "message names the pattern: %s", err.msg);
    ql_regex_free(re);
}

int main(void)
{
    /* Ordered alternation: the first alternative that matches wins, not the longest. */
    expect("a|ab", "ab", 0, 0, 1);
    expect("ab|a", "ab", 0, 0, 2);
    /* Leftmost match, then greedy with backtracking. */
    expect("b+", "aabbbc", 0, 2, 5);
    expect("a+ab", "aaab", 0, 0, 4);
    expect("a+?", "aaa", 0, 0, 1);
    expect("x", "abc", 0, -1, -1);
    expect("b", "abcb", 2, 3, 4);
    /* {n,m}: at most three digits per match. */
    expect("\\d{1,3}", "12345", 0, 0, 3);
    expect("\\d{1,3}", "12345", 3, 3, 5);
    expect("a{2}", "aaa", 0, 0, 2);
    expect("a{2,}", "aaaa", 0, 0, 4);
    expect("a{x", "a{x", 0, 0, 3); /* not a quantifier: '{' is a literal */
    /* Lookahead: \s+(?!\S) leaves the last space before a word. */
    expect("\\s+(?!\\S)", "   x", 0, 0, 2);
    expect("\\s+(?!\\S)", "   ", 0, 0, 3);
    expect("\\s+(?!\\S)", " x", 0, -1, -1);
    expect("a(?=b)", "acab", 0, 2, 3);
    /* Anchors relative to the searched range. */
    expect("\\s+$", "a  ", 0, 1, 3);
    expect("\\s+$", "a  b", 0, -1, -1);
    expect("^a", "ba", 0, -1, -1);
    expect("^b", "ba", 0, 0, 1);
    /* Groups and classes. */
    expect("(?:'[sS]|'[lL][lL])", "x'LL", 0, 1, 4);
    expect("[\\r\\n]+", "ab\r\n\ncd", 0, 2, 5);
    expect("[^a-c]+", "abcxyzab", 0, 3, 6);
    expect("[a\\-]+", "x-a-y", 0, 1, 4);
    expect(".+", "ab\ncd", 0, 0, 2);
    expect("\\w+", "  foo_1!", 0, 2, 7);

    /* Categories run on collapsed text: any non-ASCII letter is \p{L}, and so on. */
    expect("\\p{L}+", "na\xC3\xAFve!", 0, 0, 5);      /* naïve */
    expect("\\p{N}+", "x\xD9\xA3\xD9\xA4y", 0, 1, 3); /* Arabic-Indic 3 4 */
    expect("[^\\s\\p{L}\\p{N}]+",
           "ab!?\xE2\x80\xA6"
           "c",
           0, 2, 5); /* !?… */
    expect("\\p{P}+",
           "a\xE2\x80\x94"
           "b",
           0, 1, 2);                                  /* em dash */
    expect("\\p{Lu}+", "\xC3\x89t\xC3\xA9", 0, 0, 3); /* Lu is any letter */
    /* Non-ASCII whitespace collapses to \v, so \s sees it. */
    expect("\\s+",
           "a\xC2\xA0\xE3\x80\x80"
           "b",
           0, 1, 3);
    /* llama.cpp's ASCII \p{S} omits '~'. */
    expect("\\p{S}", "~$", 0, 1, 2);
    /* Without categories, ranges are code points (wregex mode). */
    expect("[\\u4E00-\\u9FA5]+",
           "ab\xE6\x97\xA5\xE6\x9C\xAC"
           "c",
           0, 2, 4); /* 日本 */
    expect("\\s?[\\u4E00-\\u9FA5]+", "a \xE6\x97\xA5", 0, 1, 3);

    /* Refused patterns name themselves in the message. */
    expect_error("a*", QL_EUNSUPPORTED);     /* can match the empty string */
    expect_error("(a*)*b", QL_EUNSUPPORTED); /* a starred operand that can be empty */
    expect_error("[abc", QL_EFORMAT);
    expect_error("a)", QL_EFORMAT);
    expect_error("(ab", QL_EFORMAT);
    expect_error("\\p{Han}+", QL_EUNSUPPORTED);
    expect_error("(?<=a)b", QL_EUNSUPPORTED);
    expect_error("\xC3\xA9\\p{L}", QL_EUNSUPPORTED); /* non-ASCII next to a category */
    expect_error("[z-a]", QL_EFORMAT);
    expect_error("+a", QL_EFORMAT);
    expect_error("a{5,2}", QL_EFORMAT);
    expect_error("\\q", QL_EUNSUPPORTED);
    return qlt_done();
}
