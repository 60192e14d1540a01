/* qlab: the regular expressions of the BPE pre-tokenizers, matched by PCRE2.
 *
 * llama.cpp splits text with hand-written splitters for two patterns and with
 * std::regex (ECMAScript grammar) for all others. qlab translates those ECMAScript
 * patterns into PCRE2 syntax and runs them with libpcre2-32, whose code units are
 * uint32 symbols. The semantics the patterns rely on are the same in both: the
 * leftmost match wins, alternatives are tried in order, quantifiers are greedy (or
 * lazy with a trailing '?') and backtrack, lookaheads are atomic.
 *
 * Accepted syntax (ECMAScript's, minus what std::regex lacks or the patterns never
 * use): literals, '.', '^', '$', groups '(...)' '(?:...)', lookaheads '(?=...)'
 * '(?!...)', alternation, quantifiers '?' '*' '+' '{n}' '{n,}' '{n,m}' (a '{' that
 * starts none of these is a literal), bracket classes with ranges and negation,
 * escapes \s \S \d \D \w \W \r \n \t \f \v \xHH \uHHHH, escaped punctuation, and
 * \p{N} \p{L} \p{P} \p{M} \p{S} (and \p{Lu} \p{Ll} \p{Lt} \p{Lm} \p{Lo}, which
 * llama.cpp treats as \p{L}). Anything else is refused with QL_EUNSUPPORTED; syntax
 * errors PCRE2 finds are QL_EFORMAT.
 *
 * Text is an array of uint32 symbols. Like llama.cpp, a pattern that names a Unicode
 * category runs on the "collapsed" text (ql_regex_collapse): ASCII stays itself and
 * every other code point becomes one byte standing for its category, so \p{L} is
 * [A-Za-z] plus that byte. Other patterns run on code points in which non-ASCII
 * whitespace is replaced by U+000B (ql_regex_widen), because std::wregex's \s only
 * knows ASCII whitespace. PCRE2 runs without UTF and UCP, so \s is [\t\n\v\f\r ],
 * \d is [0-9] and \w is [0-9A-Z_a-z] in both modes, and '.' is any symbol but
 * \n \r U+2028 U+2029.
 *
 * Patterns that can match the empty string are rejected at compile time (unless
 * QL_REGEX_ALLOW_EMPTY): the pre-tokenizers never use them and they would make
 * splitting ambiguous; a search for one may report an empty match.
 *
 * A compiled ql_regex is read-only and may be shared by threads; each thread needs
 * its own ql_regex_matcher. */
#ifndef QL_REGEX_H
#define QL_REGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct ql_regex ql_regex;

/* ql_regex_compile flags. */
enum {
    QL_REGEX_NO_JIT = 1u << 0,      /* match with PCRE2's interpreter, never its JIT */
    QL_REGEX_ALLOW_EMPTY = 1u << 1, /* accept patterns that can match the empty string */
};

/* Compiles a UTF-8 pattern (flags: QL_REGEX_*). Errors name the pattern and the
 * offending character position. */
ql_status ql_regex_compile(ql_regex **out, const char *pattern, unsigned flags, ql_error *err);
void ql_regex_free(ql_regex *re);

/* True when the pattern names a Unicode category and must run on collapsed text. */
bool ql_regex_is_collapsed(const ql_regex *re);

/* True when PCRE2 generated JIT code for the pattern (not with QL_REGEX_NO_JIT, nor
 * where PCRE2 has no JIT); matches are the same either way. */
bool ql_regex_uses_jit(const ql_regex *re);

/* Symbol of a code point in the collapsed text / in the widened code-point text. */
uint32_t ql_regex_collapse(uint32_t cpt);
uint32_t ql_regex_widen(uint32_t cpt);

/* Per-thread match state (PCRE2 match data and JIT stack), reusable for any pattern.
 * _alloc returns NULL when out of memory. */
typedef struct ql_regex_matcher ql_regex_matcher;

ql_regex_matcher *ql_regex_matcher_alloc(void);
void ql_regex_matcher_free(ql_regex_matcher *m);

/* Leftmost match inside text[begin, end) that starts at or after `from`
 * (begin <= from <= end); '^' and '$' anchor at begin and end. Sets *found, and
 * [*mstart, *mend) when found (never empty without QL_REGEX_ALLOW_EMPTY). Fails
 * only when PCRE2 gives up (QL_ENOMEM), with a message naming the pattern and the
 * position. */
ql_status ql_regex_search(const ql_regex *re, ql_regex_matcher *m, const uint32_t *text,
                          size_t begin, size_t end, size_t from, bool *found, size_t *mstart,
                          size_t *mend, ql_error *err);

#endif
