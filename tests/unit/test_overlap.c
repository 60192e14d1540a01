/* experiment/overlap: n-gram hashes, sets and the share of an evaluation's n-grams a
 * calibration text holds: all of them for the text itself, none for a disjoint one,
 * the exact share for a constructed half, no n-gram across two sequences. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "experiment/overlap.h"
#include "qltest.h"

/* A deterministic token stream (xorshift) over a vocabulary of v tokens from base. */
static void stream(int32_t *t, int64_t n, uint32_t seed, int32_t base, int32_t v)
{
    uint32_t x = seed;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        t[i] = base + (int32_t)(x % (uint32_t)v);
    }
}

static double share_of(const int32_t *calib, int64_t nc, const int32_t *eval, int64_t ne,
                       int order)
{
    ql_ngram_set s;
    ql_error err;
    const int32_t *seqs[1] = {calib};
    int64_t lens[1] = {nc};
    CHECK_OK(ql_ngram_set_build(&s, order, seqs, lens, 1, &err), &err);
    const double sh = ql_ngram_share(&s, eval, ne);
    ql_ngram_set_deinit(&s);
    return sh;
}

int main(void)
{
    enum { N = 20000 };
    int32_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c = malloc(N * sizeof *c);
    if (!a || !b || !c)
        return 1;
    stream(a, N, 1u, 0, 512);
    stream(b, N, 7u, 0, 512);
    /* The same text: every window. */
    CHECK(share_of(a, N, a, N, QL_OVERLAP_LONG) == 1.0);
    CHECK(share_of(a, N, a, N, QL_OVERLAP_SHORT) == 1.0);
    /* A disjoint text (another random stream of the same vocabulary): no 8-gram in common
     * (a match by chance has probability ~ N / 512^8). */
    CHECK(share_of(a, N, b, N, QL_OVERLAP_SHORT) == 0.0);
    CHECK(share_of(a, N, b, N, QL_OVERLAP_LONG) == 0.0);
    /* Half of the evaluation copied from the calibration: windows inside the copy match,
     * those crossing into the other half do not. */
    for (int64_t i = 0; i < N; i++)
        c[i] = i < N / 2 ? a[i + 1000] : b[i];
    const int n = QL_OVERLAP_LONG;
    const double want = (double)(N / 2 - n + 1) / (double)(N - n + 1);
    const double got = share_of(a, N, c, N, n);
    CHECK_MSG(fabs(got - want) < 1e-12, "half copied: %.6f, want %.6f", got, want);
    /* Too short for one window: NAN; order out of range: an error. */
    CHECK(isnan(share_of(a, N, a, 5, 8)));
    ql_ngram_set s;
    ql_error err;
    const int32_t *seqs[2] = {a, b};
    int64_t lens[2] = {N, 4};
    CHECK(ql_ngram_set_build(&s, 0, seqs, lens, 1, &err) == QL_EINVAL);
    /* No n-gram spans two sequences: the 8-gram at the seam of a's end and b's start is
     * not in the set of {a, b}, though it is in the set of their concatenation. */
    int32_t seam[8];
    for (int i = 0; i < 4; i++) {
        seam[i] = a[N - 4 + i];
        seam[4 + i] = b[i];
    }
    CHECK_OK(ql_ngram_set_build(&s, 8, seqs, lens, 2, &err), &err);
    CHECK(ql_ngram_share(&s, seam, 8) == 0.0);
    CHECK(s.n > 0 && s.n <= (size_t)(N - 7));
    ql_ngram_set_deinit(&s);
    /* Sorted and distinct. */
    int32_t rep[64];
    for (int i = 0; i < 64; i++)
        rep[i] = i % 4;
    const int32_t *rs[1] = {rep};
    int64_t rl[1] = {64};
    CHECK_OK(ql_ngram_set_build(&s, 8, rs, rl, 1, &err), &err);
    CHECK_EQ_INT(s.n, 4); /* a period-4 sequence has four distinct 8-grams */
    for (size_t i = 1; i < s.n; i++)
        CHECK(s.hashes[i - 1] < s.hashes[i]);
    ql_ngram_set_deinit(&s);
    ql_ngram_set_deinit(NULL);
    /* The hash depends on the order and on every token. */
    CHECK(ql_ngram_hash(a, 8) != ql_ngram_hash(a, 9));
    int32_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {1, 2, 3, 4, 5, 6, 7, 9};
    CHECK(ql_ngram_hash(x, 8) != ql_ngram_hash(y, 8));
    free(a);
    free(b);
    free(c);
    return qlt_done();
}
