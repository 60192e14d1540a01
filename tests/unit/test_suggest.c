/* base/suggest.h: the one "did you mean" matcher: typos within the edit budget,
 * case and '-'/'_' folded, a short word that starts a name, nothing for unrelated
 * words. */
#include <string.h>

#include "base/suggest.h"
#include "qltest.h"

static const char *const types[] = {"F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q8_0_XC", "IQ4_XS"};
static const char *const mixes[] = {"Q4_K_S", "Q4_K_M", "Q5_K_M", "IQ3_M"};
static const char *const opts[] = {"imatrix", "kl-divergence-base", "ctx-size", "threads"};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void expect(const char *word, const char *const *cands, size_t n, const char *want)
{
    const char *got = ql_closest_name(word, cands, n);
    CHECK_MSG(want ? got && strcmp(got, want) == 0 : got == NULL, "'%s': got %s, expected %s", word,
              got ? got : "NULL", want ? want : "NULL");
}

int main(void)
{
    expect("Q4_O", types, N(types), "Q4_0");
    expect("q4k", types, N(types), "Q4_K");
    expect("IQ4XS", types, N(types), "IQ4_XS");
    expect("Q8", types, N(types), "Q8_0"); /* starts Q8_0 and Q8_0_XC: the shorter */
    expect("Q4_KM", mixes, N(mixes), "Q4_K_M");
    /* The same distance to a type and a file type: the one the word shortens. */
    const char *const both[] = {"Q4_K", "Q4_0", "Q4_K_S", "Q4_K_M"};
    expect("Q4_KM", both, N(both), "Q4_K_M");
    expect("Q4_KX", both, N(both), "Q4_K"); /* no shortening: the first closest */
    expect("imatrx", opts, N(opts), "imatrix");
    expect("ctx_size", opts, N(opts), "ctx-size");
    expect("kl-divergance-bas", opts, N(opts), "kl-divergence-base");
    expect("zebra", types, N(types), NULL);
    expect("X", types, N(types), NULL);
    expect("Q", types, N(types), NULL); /* one letter starts too much to mean anything */

    char buf[64];
    CHECK(strcmp(ql_did_you_mean(buf, sizeof buf, "thread", opts, N(opts), "--"),
                 "; did you mean '--threads'?") == 0);
    CHECK(strcmp(ql_did_you_mean(buf, sizeof buf, "zzzzzz", opts, N(opts), NULL), "") == 0);
    const char *const with_null[] = {NULL, "verify", "list"};
    expect("lst", with_null, 3, "list");
    return qlt_done();
}
