/* The pre-tokenizer regexes on PCRE2: ECMAScript match semantics (leftmost, first
 * alternative, greedy with backtracking, atomic lookahead), llama.cpp's collapsed
 * categories, the patterns refused, and PCRE2's JIT against its interpreter. */
#include <stdlib.h>
#include <string.h>

#include "base/regex.h"
#include "base/unicode.h"
#include "qltest.h"

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

/* Searches pattern in sym[0, n) from symbol `from`, with and without JIT; expects
 * [ms, me) or no match (ms < 0). */
static void expect_syms(const char *pattern, const char *what, const uint32_t *sym, size_t n,
                        size_t from, int ms, int me)
{
    for (int pass = 0; pass < 2; pass++) {
        ql_error err;
        ql_regex *re = NULL;
        ql_status st = ql_regex_compile(&re, pattern, pass ? QL_REGEX_NO_JIT : 0, &err);
        CHECK_OK(st, &err);
        if (st != QL_OK)
            return;
        ql_regex_matcher *m = ql_regex_matcher_alloc();
        CHECK(m != NULL);
        bool found = false;
        size_t s = 0, e = 0;
        st = ql_regex_search(re, m, sym, 0, n, from, &found, &s, &e, &err);
        CHECK_OK(st, &err);
        if (ms < 0)
            CHECK_MSG(!found, "/%s/ on '%s': expected no match, got [%zu, %zu)", pattern, what, s,
                      e);
        else
            CHECK_MSG(found && s == (size_t)ms && e == (size_t)me,
                      "/%s/ on '%s' from %zu (%s): expected [%d, %d), got found=%d [%zu, %zu)",
                      pattern, what, from, pass ? "interpreter" : "JIT", ms, me, (int)found, s, e);
        ql_regex_matcher_free(m);
        ql_regex_free(re);
    }
}

/* The same on a UTF-8 text, turned into symbols as the pre-tokenizer does. */
static void expect(const char *pattern, const char *text, size_t from, int ms, int me)
{
    ql_error err;
    ql_regex *re = NULL;
    ql_status st = ql_regex_compile(&re, pattern, 0, &err);
    CHECK_OK(st, &err);
    if (st != QL_OK)
        return;
    uint32_t sym[256];
    size_t n = to_syms(re, text, sym);
    ql_regex_free(re);
    expect_syms(pattern, text, sym, n, from, ms, me);
}

/* Expects compiling pattern to fail with status want and a message that names the
 * pattern and contains `says` (NULL: anything). */
static void expect_error_says(const char *pattern, ql_status want, const char *says)
{
    ql_error err;
    ql_error_clear(&err);
    ql_regex *re = NULL;
    ql_status st = ql_regex_compile(&re, pattern, 0, &err);
    CHECK_MSG(st == want, "/%s/: status %d, expected %d (%s)", pattern, (int)st, (int)want,
              err.msg);
    CHECK(re == NULL);
    if (st != QL_OK) {
        CHECK_MSG(strstr(err.msg, pattern) != NULL, "message names the pattern: %s", err.msg);
        if (says)
            CHECK_MSG(strstr(err.msg, says) != NULL, "message says '%s': %s", says, err.msg);
    }
    ql_regex_free(re);
}

static void expect_error(const char *pattern, ql_status want)
{
    expect_error_says(pattern, want, NULL);
}

/* Symbols (collapsed) of the pre-tokenizer patterns' interesting inputs. */
static const uint32_t RANDOM_SYMS[] = {'a', 'Z',  's',  'S',  'l',  'L',  '1',  '9',
                                       ' ', '\t', '\n', '\r', '\'', '!',  '.',  '$',
                                       '~', 0x0B, 0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5};
#define N_RANDOM_SYMS  (sizeof RANDOM_SYMS / sizeof RANDOM_SYMS[0])
#define N_RANDOM_TEXTS 2000
#define MAX_RANDOM_LEN 40

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint32_t rng(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* Every match of pattern, searched from left to right, in random texts: PCRE2's JIT
 * code and its interpreter must agree (when there is no JIT both are the interpreter). */
static void jit_vs_interpreter(const char *pattern)
{
    ql_error err;
    ql_regex *jit = NULL, *interp = NULL;
    ql_status st = ql_regex_compile(&jit, pattern, 0, &err);
    CHECK_OK(st, &err);
    st = ql_regex_compile(&interp, pattern, QL_REGEX_NO_JIT, &err);
    CHECK_OK(st, &err);
    ql_regex_matcher *m = ql_regex_matcher_alloc();
    CHECK(m != NULL);
    if (!jit || !interp || !m)
        goto out;
    CHECK(!ql_regex_uses_jit(interp));
    if (!ql_regex_uses_jit(jit))
        printf("note: PCRE2 has no JIT here; /%s/ compared with itself\n", pattern);
    int mismatches = 0;
    for (int k = 0; k < N_RANDOM_TEXTS && mismatches < 5; k++) {
        uint32_t text[MAX_RANDOM_LEN];
        size_t n = 1 + rng() % MAX_RANDOM_LEN;
        for (size_t i = 0; i < n; i++)
            text[i] = RANDOM_SYMS[rng() % N_RANDOM_SYMS];
        size_t pa = 0, pb = 0;
        for (;;) {
            bool fa = false, fb = false;
            size_t sa = 0, ea = 0, sb = 0, eb = 0;
            CHECK_OK(ql_regex_search(jit, m, text, 0, n, pa, &fa, &sa, &ea, &err), &err);
            CHECK_OK(ql_regex_search(interp, m, text, 0, n, pb, &fb, &sb, &eb, &err), &err);
            if (fa != fb || sa != sb || ea != eb) {
                mismatches++;
                CHECK_MSG(0,
                          "/%s/ text %d: JIT found=%d [%zu, %zu), interpreter found=%d [%zu, %zu)",
                          pattern, k, (int)fa, sa, ea, (int)fb, sb, eb);
                break;
            }
            if (!fa)
                break;
            pa = ea;
            pb = eb;
        }
    }
    CHECK_EQ_INT(mismatches, 0);
out:
    ql_regex_matcher_free(m);
    ql_regex_free(jit);
    ql_regex_free(interp);
}

/* Runs longer than PCRE2's default limit of 10^7 backtracking steps: splitting a run
 * of spaces with Llama 3's pattern backtracks over all of it in \s*[\r\n]+. */
#define LONG_RUN 12000000

static void long_run(void)
{
    const char *pattern =
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
        "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    uint32_t *text = malloc((LONG_RUN + 1) * sizeof *text);
    CHECK(text != NULL);
    if (!text)
        return;
    for (size_t i = 0; i < LONG_RUN; i++)
        text[i] = ' ';
    text[LONG_RUN] = 'x';
    /* \s+(?!\S) leaves the last space to the word. */
    expect_syms(pattern, "12000000 spaces, x", text, LONG_RUN + 1, 0, 0, LONG_RUN - 1);
    free(text);
}

/* '^' and '$' anchor at the ends of the searched range [begin, end), not of the text. */
static void anchors_in_range(void)
{
    static const uint32_t text[] = {'a', 'b', 'c', 'd'};
    ql_error err;
    ql_regex *bol = NULL, *eol = NULL;
    CHECK_OK(ql_regex_compile(&bol, "^[bc]", 0, &err), &err);
    CHECK_OK(ql_regex_compile(&eol, "[bc]$", 0, &err), &err);
    ql_regex_matcher *m = ql_regex_matcher_alloc();
    CHECK(m != NULL);
    if (!bol || !eol || !m)
        goto out;
    bool found = false;
    size_t s = 0, e = 0;
    CHECK_OK(ql_regex_search(bol, m, text, 1, 4, 1, &found, &s, &e, &err), &err);
    CHECK(found && s == 1 && e == 2);
    CHECK_OK(ql_regex_search(bol, m, text, 1, 4, 2, &found, &s, &e, &err), &err);
    CHECK(!found); /* 'c' is not at the start of [1, 4) */
    CHECK_OK(ql_regex_search(eol, m, text, 0, 3, 0, &found, &s, &e, &err), &err);
    CHECK(found && s == 2 && e == 3);
    CHECK_OK(ql_regex_search(eol, m, text, 0, 3, 3, &found, &s, &e, &err), &err);
    CHECK(!found); /* nothing left to search */
out:
    ql_regex_matcher_free(m);
    ql_regex_free(bol);
    ql_regex_free(eol);
}

/* QL_REGEX_ALLOW_EMPTY: patterns that can match nothing compile, and a search may
 * report an empty match (at the search's start when nothing longer matches there). */
static void allow_empty(void)
{
    static const uint32_t text[] = {'x', 'a', 'a'};
    static const struct {
        const char *pattern;
        size_t ms, me;
    } cases[] = {{"a*", 0, 0}, {"x|", 0, 1}, {"", 0, 0}, {".*", 0, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ql_error err;
        ql_regex *re = NULL;
        ql_status st = ql_regex_compile(&re, cases[i].pattern, QL_REGEX_ALLOW_EMPTY, &err);
        CHECK_OK(st, &err);
        if (st)
            continue;
        ql_regex_matcher *m = ql_regex_matcher_alloc();
        bool found = false;
        size_t s = 9, e = 9;
        CHECK_OK(ql_regex_search(re, m, text, 0, 3, 0, &found, &s, &e, &err), &err);
        CHECK_MSG(found && s == cases[i].ms && e == cases[i].me,
                  "/%s/ with empty matches allowed: found=%d [%zu, %zu)", cases[i].pattern,
                  (int)found, s, e);
        ql_regex_matcher_free(m);
        ql_regex_free(re);
    }
}

int main(void)
{
    allow_empty();
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
    anchors_in_range();
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

    /* PCRE2 runs without UTF and UCP: \s \d \w are ASCII sets (so NEL, NBSP, U+3000 and
     * the collapsed bytes are none of them; \v is), '.' stops only at \n \r U+2028 U+2029. */
    static const uint32_t spaces[] = {0x85, 0xA0, 0x1C, 0x3000, 0x2028, 0xD0, 0x0B, ' '};
    expect_syms("\\s+", "NEL NBSP FS U+3000 LS 0xD0 VT SP", spaces, 8, 0, 6, 8);
    static const uint32_t digits[] = {0x663, 0xD1, 0xFF10, '7'};
    expect_syms("\\d", "Arabic-Indic 3, 0xD1, fullwidth 0, 7", digits, 4, 0, 3, 4);
    static const uint32_t words[] = {0xE9, 0xD2, 0x65E5, '-', '_', 'q'};
    expect_syms("\\w+", "e-acute 0xD2 CJK - _ q", words, 6, 0, 4, 6);
    static const uint32_t lines[] = {'a', 0x85, 0x0B, 0x2028, 'b', 0x2029, '\r'};
    expect_syms(".+", "a NEL VT LS b PS CR", lines, 7, 0, 0, 3);
    expect_syms(".+", "a NEL VT LS b PS CR", lines, 7, 4, 4, 5);
    /* Where PCRE2's syntax differs, the ECMAScript meaning is kept. */
    expect("\\v", "a\nb\vc", 0, 3, 4);    /* a character, not PCRE2's vertical-space class */
    expect("a{,3}", "aa{,3}", 0, 1, 6);   /* '{,3}' is no quantifier in ECMAScript */
    expect("[[:]+", "a:[[b", 0, 1, 4);    /* '[' in a class is a literal, not [:class:] */
    expect("[\\s-x]+", "ab- x", 0, 2, 5); /* '-' after a class escape is a literal */
    expect("a$", "a\n", 0, -1, -1);       /* '$' only at the end, not before a last \n */
    expect("(a*)*b", "caab", 0, 1, 4);    /* a starred operand that can be empty */
    expect("(?=a)*b", "ab", 0, 1, 2);     /* a quantified lookahead (Annex B) */

    /* Refused patterns name themselves in the message. */
    expect_error("a*", QL_EUNSUPPORTED);    /* can match the empty string */
    expect_error("(a*)*", QL_EUNSUPPORTED); /* ... through a starred operand */
    expect_error("x|", QL_EUNSUPPORTED);
    expect_error("", QL_EUNSUPPORTED);
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
    expect_error("a++", QL_EFORMAT);     /* no possessive quantifiers in ECMAScript */
    expect_error("(*UTF)a", QL_EFORMAT); /* no PCRE2 verbs either */
    expect_error("\\x4", QL_EFORMAT);
    /* PCRE2's own messages, with its offset turned into the pattern's character. */
    expect_error_says("[z-a]", QL_EFORMAT, "range out of order in character class at character 3");
    expect_error_says("(ab", QL_EFORMAT, "missing closing parenthesis at character 3");
    expect_error_says("\\p{L}\\s[\\p{N}x", QL_EFORMAT,
                      "missing terminating ] for character class at character 14");

    jit_vs_interpreter(
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)");
    jit_vs_interpreter("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
                       "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                       "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
    jit_vs_interpreter("[\\p{P}\\$\\+<=>\\^~\\|]+");
    long_run();
    return qlt_done();
}
