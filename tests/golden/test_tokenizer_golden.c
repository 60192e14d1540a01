/* Token ids against llama.cpp (b4747), from ../shared/golden/tokens (see its README).
 *
 * usage: test_tokenizer_golden vocab NAME   ggml-vocab-NAME.gguf with its .inp/.out pairs
 *        test_tokenizer_golden ids MODEL TEXT IDS
 *                                           MODEL (relative to ../shared) tokenizing TEXT
 *                                           (relative to golden/tokens) with add_special
 *                                           must give the ids listed in IDS
 *
 * The .inp/.out pairs are read the way llama.cpp's tests/test-tokenizer-0 reads them:
 * the .inp file is cut at every "\n__ggml_vocab_test__\n" (so a string's own trailing
 * newlines belong to it, the separator's newline does not), the .out file has one
 * line of ids per string, and tokenizing is done without BOS/EOS. Every case must
 * match exactly; a mismatch prints the string, the expected and the actual ids. */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "qltest.h"

#define MAX_SHOWN 40 /* ids printed per side of a mismatch */

static ql_tokenizer *load(const char *path)
{
    ql_error err;
    ql_gguf *g = NULL;
    ql_status st = ql_gguf_open(&g, path, &err);
    CHECK_OK(st, &err);
    if (st != QL_OK)
        return NULL;
    ql_tokenizer *t = NULL;
    st = ql_tokenizer_from_gguf(&t, g, &err);
    CHECK_OK(st, &err);
    ql_gguf_close(g);
    return t;
}

/* Parses every integer in s (separated by anything else) into a malloc'd array. */
static int32_t *parse_ids(const char *s, size_t len, int64_t *n)
{
    int32_t *v = malloc((len / 2 + 1) * sizeof *v);
    *n = 0;
    if (!v)
        return NULL;
    for (size_t i = 0; i < len;) {
        if (s[i] >= '0' && s[i] <= '9') {
            int64_t x = 0;
            while (i < len && s[i] >= '0' && s[i] <= '9')
                x = x * 10 + (s[i++] - '0');
            v[(*n)++] = (int32_t)x;
        } else {
            i++;
        }
    }
    return v;
}

static void print_ids(const char *label, const int32_t *ids, int64_t n)
{
    fprintf(stderr, "  %s (%lld):", label, (long long)n);
    for (int64_t i = 0; i < n && i < MAX_SHOWN; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > MAX_SHOWN ? " ...\n" : "\n");
}

/* Tokenizes text and compares with want; returns true on an exact match. */
static bool check_case(const ql_tokenizer *t, const char *what, const char *text, size_t len,
                       bool add_special, const int32_t *want, int64_t n_want)
{
    ql_error err;
    int32_t *ids = NULL;
    int64_t n = 0;
    ql_status st = ql_tokenize(t, text, len, add_special, &ids, &n, &err);
    CHECK_OK(st, &err);
    bool same = st == QL_OK && n == n_want && (n == 0 || memcmp(ids, want, (size_t)n * 4) == 0);
    CHECK_MSG(same, "%s", what);
    if (!same) {
        int64_t first = 0;
        while (first < n && first < n_want && ids[first] == want[first])
            first++;
        fprintf(stderr, "  text (%zu bytes): '%.*s'\n", len, len > 200 ? 200 : (int)len, text);
        fprintf(stderr, "  first difference at index %lld\n", (long long)first);
        int64_t from = first > 5 ? first - 5 : 0;
        print_ids("expected", want + from, n_want - from);
        print_ids("got     ", ids + from, n - from);
    }
    free(ids);
    return same;
}

static int run_vocab(const char *name)
{
    char rel[256], path[4096];
    snprintf(rel, sizeof rel, "golden/tokens/ggml-vocab-%s.gguf", name);
    ql_strlcpy(path, qlt_shared(rel), sizeof path);
    ql_tokenizer *t = load(path);
    if (!t)
        return qlt_done();

    char inp_path[4200], out_path[4200];
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);
    size_t inp_len, out_len;
    char *inp = qlt_read_file(inp_path, &inp_len);
    char *outs = qlt_read_file(out_path, &out_len);

    /* Strings of .inp, cut at each separator; a last piece without one counts too. */
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof sep - 1;
    size_t pos = 0, line_pos = 0;
    int n_cases = 0, n_ok = 0;
    while (pos < inp_len) {
        const char *next = memmem(inp + pos, inp_len - pos, sep, sep_len);
        size_t slen = next ? (size_t)(next - (inp + pos)) : inp_len - pos;
        const char *str = inp + pos;
        pos = next ? pos + slen + sep_len : inp_len;

        /* The matching line of .out. */
        CHECK_MSG(line_pos < out_len, "%s: .out has fewer lines than .inp has strings", name);
        if (line_pos >= out_len)
            break;
        const char *nl = memchr(outs + line_pos, '\n', out_len - line_pos);
        size_t llen = nl ? (size_t)(nl - (outs + line_pos)) : out_len - line_pos;
        int64_t n_want;
        int32_t *want = parse_ids(outs + line_pos, llen, &n_want);
        line_pos += llen + (nl ? 1 : 0);

        char what[64];
        snprintf(what, sizeof what, "%s case %d", name, n_cases);
        n_ok += check_case(t, what, str, slen, false, want, n_want);
        n_cases++;
        free(want);
    }
    CHECK_MSG(line_pos >= out_len, "%s: .out has more lines than .inp has strings", name);
    CHECK_MSG(n_cases > 10, "%s: only %d cases read", name, n_cases);
    printf("%s: %d of %d cases match llama.cpp\n", name, n_ok, n_cases);
    free(inp);
    free(outs);
    ql_tokenizer_free(t);
    return qlt_done();
}

static int run_ids(const char *model, const char *text_name, const char *ids_name)
{
    char rel[512], path[4096];
    ql_strlcpy(path, qlt_shared(model), sizeof path);
    ql_tokenizer *t = load(path);
    if (!t)
        return qlt_done();
    snprintf(rel, sizeof rel, "golden/tokens/%s", text_name);
    size_t text_len, ids_len;
    char *text = qlt_read_file(qlt_shared(rel), &text_len);
    snprintf(rel, sizeof rel, "golden/tokens/%s", ids_name);
    char *ids_txt = qlt_read_file(qlt_shared(rel), &ids_len);
    int64_t n_want;
    int32_t *want = parse_ids(ids_txt, ids_len, &n_want);
    CHECK(n_want > 0);

    double t0 = ql_now();
    bool ok = check_case(t, ids_name, text, text_len, true, want, n_want);
    printf("%s: %lld ids, %s (%.1f ms)\n", ids_name, (long long)n_want, ok ? "match" : "DIFFER",
           (ql_now() - t0) * 1e3);
    free(want);
    free(ids_txt);
    free(text);
    ql_tokenizer_free(t);
    return qlt_done();
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "vocab") == 0)
        return run_vocab(argv[2]);
    if (argc == 5 && strcmp(argv[1], "ids") == 0)
        return run_ids(argv[2], argv[3], argv[4]);
    fprintf(stderr, "usage: %s vocab NAME | ids MODEL TEXT IDS\n", argv[0]);
    return 2;
}
