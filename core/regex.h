/* qlab: a small backtracking regular-expression engine for the BPE pre-tokenizers.
 *
 * llama.cpp splits text with hand-written splitters for two patterns and with
 * std::regex (ECMAScript grammar) for all others. This engine reproduces the
 * ECMAScript semantics those patterns rely on: the leftmost match wins, alternatives
 * are tried in order, quantifiers are greedy (or lazy with a trailing '?') and
 * backtrack, lookaheads are atomic.
 *
 * Supported syntax: literals, '.', '^', '$', groups '(...)' '(?:...)', lookaheads
 * '(?=...)' '(?!...)', alternation, quantifiers '?' '*' '+' '{n}' '{n,}' '{n,m}',
 * bracket classes with ranges and negation, escapes \s \S \d \D \w \W \r \n \t \f \v
 * \xHH \uHHHH and \p{N} \p{L} \p{P} \p{M} \p{S} (and \p{Lu} \p{Ll} \p{Lt} \p{Lm}
 * \p{Lo}, which llama.cpp treats as \p{L}).
 *
 * Text is an array of uint32 symbols. Like llama.cpp, a pattern that names a Unicode
 * category runs on the "collapsed" text (ql_regex_collapse): ASCII stays itself and
 * every other code point becomes one byte standing for its category, so \p{L} is
 * [A-Za-z] plus that byte. Other patterns run on code points in which non-ASCII
 * whitespace is replaced by U+000B (ql_regex_widen), because std::wregex's \s only
 * knows ASCII whitespace. \s is [\t\n\v\f\r ] in both modes.
 *
 * Patterns that can match the empty string are rejected at compile time: the
 * pre-tokenizers never use them and they would make splitting ambiguous. */
#ifndef QL_REGEX_H
#define QL_REGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef struct ql_regex ql_regex;

/* Compiles a UTF-8 pattern. Errors name the pattern and the offending position. */
ql_status ql_regex_compile(ql_regex **out, const char *pattern, ql_error *err);
void ql_regex_free(ql_regex *re);

/* True when the pattern names a Unicode category and must run on collapsed text. */
bool ql_regex_is_collapsed(const ql_regex *re);

/* Symbol of a code point in the collapsed text / in the widened code-point text. */
uint32_t ql_regex_collapse(uint32_t cpt);
uint32_t ql_regex_widen(uint32_t cpt);

/* Backtracking stack, reused across searches; one per thread. Zero-initialize it;
 * release with ql_regex_stack_deinit. */
typedef struct {
    void *entries;
    size_t n, cap;
} ql_regex_stack;

void ql_regex_stack_deinit(ql_regex_stack *st);

/* Leftmost match inside text[begin, end) that starts at or after `from`
 * (begin <= from <= end); '^' and '$' anchor at begin and end. Returns 1 and sets
 * [*mstart, *mend) when found, 0 when there is none, -1 when the stack cannot grow
 * (out of memory). */
int ql_regex_search(const ql_regex *re, ql_regex_stack *st, const uint32_t *text, size_t begin,
                    size_t end, size_t from, size_t *mstart, size_t *mend);

#endif
