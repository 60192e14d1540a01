/* qlab: what a calibration text shares with an evaluation text (issue 28).
 *
 * An importance matrix (or a kld fit's sensitivities) computed on text that is also
 * evaluated flatters that evaluation: the quantizer was tuned on the very token
 * sequences it is scored on. The measure here is the share of the evaluation's token
 * n-grams, in the model's own tokens, that occur anywhere in the calibration text:
 *
 *   share_n = |{ i : eval[i .. i+n) occurs in calib }| / (number of n-token windows of eval)
 *
 * counted over every window of the evaluated tokens (a repeated n-gram counts each
 * time, so the share is of the evaluated text, not of its distinct n-grams). Two
 * orders: 8 tokens (short shared phrases: what texts of one domain share anyway) and
 * 32 tokens (sentences: copied text; the flag is on this one).
 *
 * Hashing: each n-gram is hashed to 64 bits by folding its tokens one by one through
 * the MurmurHash3 64-bit finalizer (fmix64) with an order-dependent seed, and the
 * calibration text's hashes are kept as a sorted array of distinct values, probed by
 * binary search. A sorted array is compact (8 bytes per calibration n-gram), needs no
 * tuning, is deterministic and answers in O(log n). A rolling polynomial hash mod 2^64
 * would be faster but has known collision families (Thue-Morse sequences); the
 * per-token mix has none known, and with N calibration n-grams a window matches by a
 * collision with probability about N / 2^64 (5e-14 for a million), far below what the
 * share can show.
 *
 * Nothing here allocates beyond the set, reads files or knows about sweeps. */
#ifndef QL_OVERLAP_H
#define QL_OVERLAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* The two n-gram orders every run records (metrics calib_overlap_8, calib_overlap_32). */
#define QL_OVERLAP_SHORT 8
#define QL_OVERLAP_LONG  32

/* A run whose calibration text holds more than this share of the evaluation's
 * 32-grams is flagged (sweep summary, report, `qlab query formats`) and refused by
 * `qlab sweep --strict`. Texts of one domain that share no document stay well below:
 * ts-calib against the whole of ts-eval (two disjoint slices of TinyStories, the most
 * formulaic text here) share 0.31% of ts-eval's 32-grams under stories260K's tokenizer
 * (11% of its 8-grams); an imatrix computed on the evaluation text itself shares 100%. */
#define QL_OVERLAP_FLAG_SHARE 0.02

/* Whether a run with this 32-gram share is flagged (NAN: not measured, not flagged). */
bool ql_overlap_flagged(double share_32);

/* The flag's words: "calibration overlaps evaluation: 14% of 32-grams". */
void ql_overlap_flag_text(double share_32, char *buf, size_t size);

/* What a run whose imatrix file names no calibration text qlab can read says. */
#define QL_OVERLAP_UNKNOWN_TEXT                                                                    \
    "calibration text unknown (its imatrix file names no dataset qlab can read: a .dat file "   \
    "never does); its overlap with the evaluation cannot be measured"

/* The distinct n-gram hashes of one or more token sequences, sorted. */
typedef struct {
    int order;
    uint64_t *hashes;
    size_t n;
} ql_ngram_set;

/* The hash of tokens[0 .. order). */
uint64_t ql_ngram_hash(const int32_t *tokens, int order);

/* The set of every n-gram of order `order` (1 .. 1024) inside each of the n_seqs
 * sequences seqs[k] of lens[k] tokens (no n-gram spans two sequences; a sequence
 * shorter than order gives none). An empty set is valid. */
ql_status ql_ngram_set_build(ql_ngram_set *s, int order, const int32_t *const *seqs,
                             const int64_t *lens, size_t n_seqs, ql_error *err);
void ql_ngram_set_deinit(ql_ngram_set *s); /* NULL and an empty set are fine */

/* The share of the n-token windows of eval[0 .. n) whose n-gram the set holds (n the
 * set's order); NAN when eval has no window. */
double ql_ngram_share(const ql_ngram_set *s, const int32_t *eval, int64_t n);

#endif
