/* qlab: "did you mean" for every name the program reads (options, types, file types,
 * axes, named data, subcommands): one matcher, so that a typo gets the same kind of
 * suggestion wherever it is made.
 *
 * A candidate is close to a word when its edit distance (case-insensitive, '-' and
 * '_' the same letter) is at most 2, or a quarter of the word's length for long
 * words, and below the word's length; failing that, a word of two letters or more
 * that starts a candidate names it ("Q8" for Q8_0). The first closest candidate in
 * the caller's order wins. */
#ifndef QL_SUGGEST_H
#define QL_SUGGEST_H

#include <stddef.h>

/* The candidate closest to word, or NULL when none is close enough to be a likely
 * typo. NULL entries of candidates are skipped. */
const char *ql_closest_name(const char *word, const char *const *candidates, size_t n);

/* Writes "; did you mean 'PREFIX<candidate>'?" into buf (or "" when there is no
 * close candidate) and returns buf. prefix may be NULL ("--" for options). */
const char *ql_did_you_mean(char *buf, size_t size, const char *word, const char *const *candidates,
                            size_t n, const char *prefix);

#endif
