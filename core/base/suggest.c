/* "Did you mean": see suggest.h. */
#include "base/suggest.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Longest word or candidate the distance is computed for (longer: no suggestion). */
#define MAXLEN 64

/* Letters that count as the same: any case, and '-' for '_' (options spell with
 * dashes what sweep axes spell with underscores). */
static int fold(char c)
{
    return c == '_' ? '-' : tolower((unsigned char)c);
}

/* Levenshtein distance with one row of the DP table; (size_t)-1 when too long. */
static size_t edit_distance(const char *a, const char *b)
{
    const size_t la = strlen(a), lb = strlen(b);
    if (la >= MAXLEN || lb >= MAXLEN)
        return (size_t)-1;
    size_t row[MAXLEN + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            const size_t up = row[j];
            const size_t cost = fold(a[i - 1]) == fold(b[j - 1]) ? 0 : 1;
            size_t best = diag + cost;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static bool starts(const char *s, const char *prefix)
{
    for (; *prefix; s++, prefix++)
        if (!*s || fold(*s) != fold(*prefix))
            return false;
    return true;
}

/* Whether word's letters appear in name in order (the typist left some out: Q4_KM in
 * Q4_K_M). */
static bool subsequence(const char *word, const char *name)
{
    for (; *word && *name; name++)
        if (fold(*word) == fold(*name))
            word++;
    return *word == '\0';
}

const char *ql_closest_name(const char *word, const char *const *candidates, size_t n)
{
    const size_t len = strlen(word);
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        if (!candidates[i])
            continue;
        const size_t d = edit_distance(word, candidates[i]);
        /* At the same distance a name the word is a shortening of wins: a left-out
         * letter is the likelier typo (Q4_KM is Q4_K_M rather than Q4_K). */
        if (d < best_d ||
            (d == best_d && best && !subsequence(word, best) && subsequence(word, candidates[i]))) {
            best_d = d;
            best = candidates[i];
        }
    }
    /* Two edits catch the usual typos (Q4_O, q4k, IQ4XS, --imatrx) without
     * suggesting unrelated names for short words; long names allow a few more. */
    const size_t allowed = len / 4 > 2 ? len / 4 : 2;
    if (best && best_d <= allowed && best_d < len)
        return best;
    /* A short word that starts a name ("Q8" for Q8_0): the shortest such name. */
    best = NULL;
    for (size_t i = 0; len >= 2 && i < n; i++)
        if (candidates[i] && starts(candidates[i], word) &&
            (!best || strlen(candidates[i]) < strlen(best)))
            best = candidates[i];
    return best;
}

const char *ql_did_you_mean(char *buf, size_t size, const char *word, const char *const *candidates,
                            size_t n, const char *prefix)
{
    const char *near = ql_closest_name(word, candidates, n);
    if (size == 0)
        return buf;
    buf[0] = '\0';
    if (near)
        snprintf(buf, size, "; did you mean '%s%s'?", prefix ? prefix : "", near);
    return buf;
}
