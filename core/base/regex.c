/* Pre-tokenizer regexes: ECMAScript patterns translated for PCRE2 (see regex.h).
 *
 * The translation walks the pattern once and rewrites every construct whose
 * spelling or meaning differs between the two dialects, so that PCRE2 never sees
 * a construct it would read differently from std::regex:
 *   - every literal that is not an ASCII letter or digit becomes \x{HHHH}, so no
 *     PCRE2 metacharacter ('[' of a POSIX class, '{' of a quantifier, ...) can
 *     appear by accident; \uHHHH, \xHH, \r \n \t \f \v become \x{HHHH} too (\v is
 *     a class in PCRE2, a character in ECMAScript);
 *   - '(' becomes '(?:' (nothing is captured, and no '(*VERB)' can form);
 *   - '.' becomes a class without \n \r U+2028 U+2029 (ECMAScript's line
 *     terminators, whatever PCRE2's newline convention is);
 *   - \p{X} becomes the collapsed category's members, inside or outside a class;
 *   - a '-' after a class escape, as in [\s-x], is a literal (ECMAScript Annex B);
 *   - a '{' that does not start a valid quantifier is a literal, as in ECMAScript
 *     (PCRE2 10.43 reads '{,m}' as a quantifier);
 *   - '$' is the end of the text only (PCRE2_DOLLAR_ENDONLY);
 *   - a possessive quantifier ('a++') is a syntax error, as in ECMAScript.
 * \s \S \d \D \w \W stay as they are: without PCRE2_UCP they use PCRE2's built-in
 * "C" locale tables, which are exactly the ECMAScript sets for ASCII, and no symbol
 * above 127 is in \s, \d or \w. Syntax errors (unbalanced parentheses, unterminated
 * classes, ranges out of order) are left for PCRE2 to find; a map from translated
 * code units back to pattern characters puts its error offset in the user's terms. */
#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>

#include "base/regex.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/unicode.h"
#include "base/util.h"

/* ---------------------------------------------------------------------------
 * Symbols */

/* Collapsed-text bytes standing for non-ASCII code points of each category
 * (llama.cpp's choice; ASCII never uses them). */
enum {
    SYM_OTHER = 0xD0,
    SYM_NUMBER = 0xD1,
    SYM_LETTER = 0xD2,
    SYM_PUNCT = 0xD3,
    SYM_MARK = 0xD4,
    SYM_SYMBOL = 0xD5,
    SYM_SPACE = 0x0B, /* non-ASCII whitespace, in both modes */
};

uint32_t ql_regex_collapse(uint32_t cpt)
{
    if (cpt < 0x80)
        return cpt;
    unsigned f = ql_unicode_flags(cpt);
    if (f & QL_UNI_WHITESPACE)
        return SYM_SPACE;
    if (f & QL_UNI_NUMBER)
        return SYM_NUMBER;
    if (f & QL_UNI_LETTER)
        return SYM_LETTER;
    if (f & QL_UNI_PUNCT)
        return SYM_PUNCT;
    if (f & QL_UNI_MARK)
        return SYM_MARK;
    if (f & QL_UNI_SYMBOL)
        return SYM_SYMBOL;
    return SYM_OTHER;
}

uint32_t ql_regex_widen(uint32_t cpt)
{
    if (cpt >= 0x80 && (ql_unicode_flags(cpt) & QL_UNI_WHITESPACE))
        return SYM_SPACE;
    return cpt;
}

/* Members of each collapsed category, as PCRE2 class items: the ASCII characters
 * llama.cpp gives the category, then its collapsed byte. */
typedef struct {
    char name;         /* N L P M S */
    const char *ascii; /* class items */
    uint32_t sym;
} category;

static const category categories[] = {
    {'N', "0-9", SYM_NUMBER},
    {'L', "A-Za-z", SYM_LETTER},
    /* ASCII punctuation: !"# %&'()* ,-./ :; ?@ [\] _ { } */
    {'P',
     "\\x{21}-\\x{23}\\x{25}-\\x{2A}\\x{2C}-\\x{2F}\\x{3A}\\x{3B}\\x{3F}\\x{40}\\x{5B}-\\x{5D}"
     "\\x{5F}\\x{7B}\\x{7D}",
     SYM_PUNCT},
    {'M', "", SYM_MARK},
    /* ASCII symbols as llama.cpp lists them: $ + < = > ^ ` | (not '~') */
    {'S', "\\x{24}\\x{2B}\\x{3C}-\\x{3E}\\x{5E}\\x{60}\\x{7C}", SYM_SYMBOL},
};

/* llama.cpp collapses the text when the pattern names one of these categories. */
static bool names_category(const char *pattern)
{
    static const char *const cats[] = {"\\p{N}",  "\\p{L}",  "\\p{P}",  "\\p{M}",  "\\p{S}",
                                       "\\p{Lu}", "\\p{Ll}", "\\p{Lt}", "\\p{Lm}", "\\p{Lo}"};
    for (size_t i = 0; i < sizeof cats / sizeof cats[0]; i++)
        if (strstr(pattern, cats[i]))
            return true;
    return false;
}

/* ---------------------------------------------------------------------------
 * Translation to PCRE2 syntax */

typedef struct {
    const char *pattern; /* as given, for messages */
    const uint32_t *p;   /* the pattern as code points */
    size_t n, i;
    size_t at; /* position in p of the construct being translated */
    bool collapsed;
    PCRE2_UCHAR *out; /* the PCRE2 pattern */
    size_t *src;      /* src[k]: position in p of the construct that produced out[k] */
    size_t n_out, cap_out;
    ql_error *err;
    ql_status st;
} xlat;

static bool xfail(xlat *x, ql_status st, const char *what)
{
    if (x->st == QL_OK)
        ql_error_set(x->err, st, "regex '%s': %s at character %zu", x->pattern, what, x->at);
    x->st = st;
    return false;
}

static bool at(const xlat *x, uint32_t c)
{
    return x->i < x->n && x->p[x->i] == c;
}

static bool put_unit(xlat *x, uint32_t u)
{
    if (x->n_out == x->cap_out) {
        size_t cap = x->cap_out ? 2 * x->cap_out : 256;
        PCRE2_UCHAR *o = realloc(x->out, cap * sizeof *o);
        if (!o)
            return xfail(x, QL_ENOMEM, "out of memory");
        x->out = o;
        size_t *s = realloc(x->src, cap * sizeof *s);
        if (!s)
            return xfail(x, QL_ENOMEM, "out of memory");
        x->src = s;
        x->cap_out = cap;
    }
    x->out[x->n_out] = u;
    x->src[x->n_out] = x->at;
    x->n_out++;
    return true;
}

static bool put_str(xlat *x, const char *s)
{
    for (; *s; s++)
        if (!put_unit(x, (unsigned char)*s))
            return false;
    return true;
}

static bool is_alnum(uint32_t c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

/* A literal symbol, spelled so that PCRE2 cannot read it as anything else. */
static bool put_literal(xlat *x, uint32_t c)
{
    if (is_alnum(c))
        return put_unit(x, c);
    char buf[16];
    snprintf(buf, sizeof buf, "\\x{%" PRIX32 "}", c);
    return put_str(x, buf);
}

/* A literal written as itself in the pattern. Collapsed text has no non-ASCII code
 * points, so llama.cpp refuses such a pattern. */
static bool put_pattern_char(xlat *x, uint32_t c)
{
    if (x->collapsed && c >= 0x80)
        return xfail(x, QL_EUNSUPPORTED, "non-ASCII literal in a pattern with \\p{..}");
    return put_literal(x, c);
}

static int hex_value(uint32_t c)
{
    if (c >= '0' && c <= '9')
        return (int)(c - '0');
    if (c >= 'a' && c <= 'f')
        return (int)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F')
        return (int)(c - 'A' + 10);
    return -1;
}

/* \p{X} or \p{Lx} (x->i after the 'p'): the members of a collapsed category, as
 * class items (in_class) or as a class of their own. */
static bool put_category(xlat *x, bool in_class)
{
    uint32_t name[3] = {0};
    size_t len = 0;
    if (!at(x, '{'))
        return xfail(x, QL_EFORMAT, "expected '{' after \\p");
    x->i++;
    while (x->i < x->n && x->p[x->i] != '}' && len < 3)
        name[len++] = x->p[x->i++];
    if (!at(x, '}') || !x->collapsed)
        return xfail(x, QL_EUNSUPPORTED, "unsupported Unicode property");
    x->i++;
    if (len == 2 && name[0] == 'L' &&
        (name[1] == 'u' || name[1] == 'l' || name[1] == 't' || name[1] == 'm' || name[1] == 'o'))
        len = 1;
    const category *cat = NULL;
    for (size_t k = 0; k < sizeof categories / sizeof categories[0] && len == 1; k++)
        if ((uint32_t)categories[k].name == name[0])
            cat = &categories[k];
    if (!cat)
        return xfail(x, QL_EUNSUPPORTED, "unsupported Unicode property");
    return (in_class || put_unit(x, '[')) && put_str(x, cat->ascii) && put_literal(x, cat->sym) &&
           (in_class || put_unit(x, ']'));
}

/* The escape after a backslash (x->i at the character after it). *is_set tells a
 * class escape (\s, \p{L}, ...) from a literal. */
static bool put_escape(xlat *x, bool in_class, bool *is_set)
{
    *is_set = false;
    if (x->i >= x->n)
        return xfail(x, QL_EFORMAT, "pattern ends after '\\'");
    uint32_t c = x->p[x->i++];
    switch (c) {
    case 's':
    case 'S':
    case 'd':
    case 'D':
    case 'w':
    case 'W':
        *is_set = true;
        return put_unit(x, '\\') && put_unit(x, c);
    case 'p':
        *is_set = true;
        return put_category(x, in_class);
    case 'r':
        return put_literal(x, '\r');
    case 'n':
        return put_literal(x, '\n');
    case 't':
        return put_literal(x, '\t');
    case 'f':
        return put_literal(x, '\f');
    case 'v':
        return put_literal(x, '\v');
    case 'x':
    case 'u': {
        int nd = c == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int k = 0; k < nd; k++) {
            int h = x->i < x->n ? hex_value(x->p[x->i]) : -1;
            if (h < 0)
                return xfail(x, QL_EFORMAT, "bad hexadecimal escape");
            v = v * 16 + (uint32_t)h;
            x->i++;
        }
        return put_literal(x, v);
    }
    default:
        if (is_alnum(c))
            return xfail(x, QL_EUNSUPPORTED, "unsupported escape");
        return put_literal(x, c); /* escaped punctuation stands for itself */
    }
}

/* A bracket class; x->i is after '['. An unterminated class is left for PCRE2 to
 * report. */
static bool put_class(xlat *x)
{
    if (!put_unit(x, '['))
        return false;
    if (at(x, '^')) {
        x->i++;
        if (!put_unit(x, '^'))
            return false;
    }
    bool first = true; /* a ']' right after '[' or '[^' is a literal */
    while (x->i < x->n) {
        x->at = x->i;
        uint32_t c = x->p[x->i++];
        if (c == ']' && !first)
            return put_unit(x, ']');
        first = false;
        bool set = false;
        if (c == '\\' ? !put_escape(x, true, &set) : !put_pattern_char(x, c))
            return false;
        if (set || !at(x, '-') || x->i + 1 >= x->n || x->p[x->i + 1] == ']')
            continue;
        /* A range lo-hi: hi must be a literal too. */
        x->at = x->i++;
        if (!put_unit(x, '-'))
            return false;
        x->at = x->i;
        c = x->p[x->i++];
        if (c == '\\' ? !put_escape(x, true, &set) : !put_pattern_char(x, c))
            return false;
        if (set)
            return xfail(x, QL_EFORMAT, "class escape as a range bound");
    }
    return true;
}

/* Length of a quantifier {n}, {n,} or {n,m} starting at p[i] == '{', or 0. */
static size_t brace_quantifier_len(const xlat *x, size_t i)
{
    size_t k = i + 1, digits = 0;
    while (k < x->n && x->p[k] >= '0' && x->p[k] <= '9')
        k++, digits++;
    if (!digits)
        return 0;
    if (k < x->n && x->p[k] == ',') {
        k++;
        while (k < x->n && x->p[k] >= '0' && x->p[k] <= '9')
            k++;
    }
    return k < x->n && x->p[k] == '}' ? k + 1 - i : 0;
}

/* After a quantifier: its lazy '?', and no possessive '+' (ECMAScript has none). */
static bool put_quantifier_suffix(xlat *x)
{
    if (at(x, '?')) {
        x->i++;
        if (!put_unit(x, '?'))
            return false;
    }
    if (at(x, '+')) {
        x->at = x->i;
        return xfail(x, QL_EFORMAT, "quantifier without an operand");
    }
    return true;
}

static bool put_pattern(xlat *x)
{
    while (x->i < x->n) {
        x->at = x->i;
        uint32_t c = x->p[x->i++];
        bool set;
        size_t qlen;
        switch (c) {
        case '(':
            if (!at(x, '?')) {
                if (!put_str(x, "(?:"))
                    return false;
                break;
            }
            c = x->i + 1 < x->n ? x->p[x->i + 1] : 0;
            if (c != ':' && c != '=' && c != '!')
                return xfail(x, QL_EUNSUPPORTED, "unsupported group type");
            x->i += 2;
            if (!put_unit(x, '(') || !put_unit(x, '?') || !put_unit(x, c))
                return false;
            break;
        case ')':
        case '|':
        case '^':
        case '$':
            if (!put_unit(x, c))
                return false;
            break;
        case '*':
        case '+':
        case '?':
            if (!put_unit(x, c) || !put_quantifier_suffix(x))
                return false;
            break;
        case '{':
            qlen = brace_quantifier_len(x, x->at);
            if (!qlen) {
                if (!put_literal(x, c))
                    return false;
                break;
            }
            for (size_t k = 0; k < qlen; k++)
                if (!put_unit(x, x->p[x->at + k]))
                    return false;
            x->i = x->at + qlen;
            if (!put_quantifier_suffix(x))
                return false;
            break;
        case '[':
            if (!put_class(x))
                return false;
            break;
        case '.':
            if (!put_str(x, "[^\\x{A}\\x{D}\\x{2028}\\x{2029}]"))
                return false;
            break;
        case '\\':
            if (!put_escape(x, false, &set))
                return false;
            break;
        default:
            if (!put_pattern_char(x, c))
                return false;
            break;
        }
    }
    return true;
}

/* ---------------------------------------------------------------------------
 * Compiling */

struct ql_regex {
    char *pattern;
    bool collapsed;
    bool jit;         /* JIT code was generated; pcre2_match uses it */
    bool allow_empty; /* QL_REGEX_ALLOW_EMPTY */
    pcre2_code *code;
};

/* PCRE2's message for an error code, as a C string (its messages are ASCII). */
static void pcre2_message(int code, char *buf, size_t size)
{
    PCRE2_UCHAR msg[256];
    int n = pcre2_get_error_message(code, msg, sizeof msg / sizeof msg[0]);
    if (n < 0) {
        snprintf(buf, size, "PCRE2 error %d", code);
        return;
    }
    size_t k = 0;
    for (; k + 1 < size && k < (size_t)n; k++)
        buf[k] = msg[k] < 0x80 ? (char)msg[k] : '?';
    buf[k] = '\0';
}

ql_status ql_regex_compile(ql_regex **out, const char *pattern, unsigned flags, ql_error *err)
{
    *out = NULL;
    ql_status st = QL_OK;
    xlat x = {0};
    ql_regex *re = calloc(1, sizeof *re);
    if (!re || !(re->pattern = ql_strdup(pattern))) {
        free(re);
        return ql_error_set(err, QL_ENOMEM, "regex: out of memory");
    }
    re->collapsed = names_category(pattern);
    re->allow_empty = flags & QL_REGEX_ALLOW_EMPTY;

    size_t len = strlen(pattern);
    uint32_t *cps = malloc((len + 1) * sizeof *cps);
    if (!cps) {
        st = ql_error_set(err, QL_ENOMEM, "regex '%s': out of memory", pattern);
        goto out_fail;
    }
    x.pattern = pattern;
    x.p = cps;
    x.collapsed = re->collapsed;
    x.err = err;
    for (size_t pos = 0; pos < len;)
        cps[x.n++] = ql_utf8_decode(pattern, len, &pos);
    if (!put_pattern(&x)) {
        st = x.st;
        goto out_fail;
    }

    /* No UTF: symbols are plain 32-bit units. No UCP: \s \d \w are ASCII sets. */
    const uint32_t options = PCRE2_DOLLAR_ENDONLY | PCRE2_NEVER_UTF | PCRE2_NEVER_UCP;
    int code;
    PCRE2_SIZE offset;
    static const PCRE2_UCHAR empty[1] = {0}; /* PCRE2 refuses a NULL pattern */
    re->code = pcre2_compile(x.n_out ? x.out : empty, x.n_out, options, &code, &offset, NULL);
    if (!re->code) {
        char msg[256];
        pcre2_message(code, msg, sizeof msg);
        size_t where = offset < x.n_out ? x.src[offset] : x.n;
        st = ql_error_set(err, code == PCRE2_ERROR_NOMEMORY ? QL_ENOMEM : QL_EFORMAT,
                          "regex '%s': %s at character %zu", pattern, msg, where);
        goto out_fail;
    }
    /* A lower bound on the length of every match; 0 when some match may be empty. */
    uint32_t min_len = 0;
    if (!re->allow_empty &&
        (pcre2_pattern_info(re->code, PCRE2_INFO_MINLENGTH, &min_len) != 0 || min_len == 0)) {
        st = ql_error_set(err, QL_EUNSUPPORTED, "regex '%s': pattern can match the empty string",
                          pattern);
        goto out_fail;
    }
    /* Without JIT (unsupported CPU, no executable memory) the interpreter gives the
     * same matches, more slowly. */
    if (!(flags & QL_REGEX_NO_JIT))
        re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;

    free(cps);
    free(x.out);
    free(x.src);
    *out = re;
    return QL_OK;

out_fail:
    free(cps);
    free(x.out);
    free(x.src);
    ql_regex_free(re);
    return st;
}

void ql_regex_free(ql_regex *re)
{
    if (!re)
        return;
    pcre2_code_free(re->code);
    free(re->pattern);
    free(re);
}

bool ql_regex_is_collapsed(const ql_regex *re)
{
    return re->collapsed;
}

bool ql_regex_uses_jit(const ql_regex *re)
{
    return re->jit;
}

/* ---------------------------------------------------------------------------
 * Matching */

/* PCRE2 stops a search after 10^7 backtracking steps by default. The pre-tokenizer
 * patterns are fixed and do work linear in the segment per search, but that is
 * still more than 10^7 steps on a run of 10^7 spaces (\s*[\r\n]+ backtracks over
 * the whole run), which the hand-written engine used to split. No limit, then. */
#define MATCH_LIMIT UINT32_MAX

struct ql_regex_matcher {
    pcre2_match_data *md; /* one ovector pair: patterns capture nothing */
    pcre2_match_context *mctx;
};

ql_regex_matcher *ql_regex_matcher_alloc(void)
{
    ql_regex_matcher *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->md = pcre2_match_data_create(1, NULL);
    m->mctx = pcre2_match_context_create(NULL);
    if (!m->md || !m->mctx) {
        ql_regex_matcher_free(m);
        return NULL;
    }
    pcre2_set_match_limit(m->mctx, MATCH_LIMIT);
    pcre2_set_depth_limit(m->mctx, MATCH_LIMIT);
    return m;
}

void ql_regex_matcher_free(ql_regex_matcher *m)
{
    if (!m)
        return;
    pcre2_match_context_free(m->mctx);
    pcre2_match_data_free(m->md);
    free(m);
}

ql_status ql_regex_search(const ql_regex *re, ql_regex_matcher *m, const uint32_t *text,
                          size_t begin, size_t end, size_t from, bool *found, size_t *mstart,
                          size_t *mend, ql_error *err)
{
    *found = false;
    if (from >= end)
        return QL_OK;
    /* The subject starts at begin, so '^' anchors there. pcre2_jit_match skips
     * pcre2_match's argument checks, which cost as much as matching a short segment. */
    const uint32_t *subject = text + begin;
    const size_t len = end - begin, start = from - begin;
    int rc = re->jit ? pcre2_jit_match(re->code, subject, len, start, 0, m->md, m->mctx)
                     : pcre2_match(re->code, subject, len, start, 0, m->md, m->mctx);
    /* The JIT's stack (32 KiB) is not expected to run out on these patterns, which
     * keep no stack per repeated symbol; if it does, the interpreter uses the heap. */
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re->code, subject, len, start, PCRE2_NO_JIT, m->md, m->mctx);
    if (rc == PCRE2_ERROR_NOMATCH)
        return QL_OK;
    if (rc < 0) {
        char msg[256];
        pcre2_message(rc, msg, sizeof msg);
        return ql_error_set(err, QL_ENOMEM,
                            "regex '%s': matching symbols [%zu, %zu) from %zu failed: %s",
                            re->pattern, begin, end, from, msg);
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
    *mstart = begin + ov[0];
    *mend = begin + ov[1];
    QL_ASSERT(*mend > *mstart || re->allow_empty); /* else compile refused empty matches */
    *found = true;
    return QL_OK;
}
