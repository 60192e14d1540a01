/* qlab: calibration/evaluation n-gram overlap (overlap.h). */
#include "experiment/overlap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define ORDER_MAX 1024

/* MurmurHash3's 64-bit finalizer: every input bit flips each output bit with
 * probability close to 1/2. */
static uint64_t fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

uint64_t ql_ngram_hash(const int32_t *tokens, int order)
{
    /* The seed depends on the order, so that n-grams of different orders never share
     * a hash by construction. */
    uint64_t h = fmix64(0x9e3779b97f4a7c15ull ^ (uint64_t)order);
    for (int i = 0; i < order; i++)
        h = fmix64(h ^ ((uint64_t)(uint32_t)tokens[i] + 0x9e3779b97f4a7c15ull + (h << 6)));
    return h;
}

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

ql_status ql_ngram_set_build(ql_ngram_set *s, int order, const int32_t *const *seqs,
                             const int64_t *lens, size_t n_seqs, ql_error *err)
{
    s->order = order;
    s->hashes = NULL;
    s->n = 0;
    if (order < 1 || order > ORDER_MAX)
        return ql_error_set(err, QL_EINVAL, "n-gram order %d is out of range (1..%d)", order,
                            ORDER_MAX);
    size_t total = 0;
    for (size_t k = 0; k < n_seqs; k++)
        if (lens[k] >= order)
            total += (size_t)(lens[k] - order + 1);
    if (!total)
        return QL_OK;
    if (!(s->hashes = malloc(total * sizeof *s->hashes)))
        return ql_error_set(err, QL_ENOMEM, "out of memory for %zu n-gram hashes", total);
    size_t n = 0;
    for (size_t k = 0; k < n_seqs; k++)
        for (int64_t i = 0; i + order <= lens[k]; i++)
            s->hashes[n++] = ql_ngram_hash(seqs[k] + i, order);
    qsort(s->hashes, n, sizeof *s->hashes, cmp_u64);
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (w == 0 || s->hashes[w - 1] != s->hashes[i])
            s->hashes[w++] = s->hashes[i];
    s->n = w;
    return QL_OK;
}

void ql_ngram_set_deinit(ql_ngram_set *s)
{
    if (!s)
        return;
    free(s->hashes);
    s->hashes = NULL;
    s->n = 0;
}

static int has(const ql_ngram_set *s, uint64_t h)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (s->hashes[mid] < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n && s->hashes[lo] == h;
}

double ql_ngram_share(const ql_ngram_set *s, const int32_t *eval, int64_t n)
{
    if (n < s->order)
        return (double)NAN;
    const int64_t windows = n - s->order + 1;
    int64_t hits = 0;
    for (int64_t i = 0; i < windows; i++)
        hits += has(s, ql_ngram_hash(eval + i, s->order));
    return (double)hits / (double)windows;
}

bool ql_overlap_flagged(double share_32)
{
    return !isnan(share_32) && share_32 > QL_OVERLAP_FLAG_SHARE;
}

void ql_overlap_flag_text(double share_32, char *buf, size_t size)
{
    /* Whole percents, but never "0%" or "100%" for what is neither. */
    double pct = 100.0 * share_32;
    if (pct < 99.5 && pct >= 1.0)
        snprintf(buf, size, "calibration overlaps evaluation: %.0f%% of %d-grams", pct,
                 QL_OVERLAP_LONG);
    else
        snprintf(buf, size, "calibration overlaps evaluation: %.3g%% of %d-grams", pct,
                 QL_OVERLAP_LONG);
}
