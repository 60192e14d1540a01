/* BPE pre-tokenizers: word splits worked out by hand from the patterns, and the
 * hand-written GPT-2 / Llama 3 splitters (llama.cpp's) against the regex engine
 * running the very patterns they implement, on random text. */
#include <stdlib.h>
#include <string.h>

#include "base/unicode.h"
#include "model/tokenizer_impl.h"
#include "qltest.h"

/* Words of text joined by '|' (UTF-8), into out. */
static void split(const ql_pretok *p, const char *text, char *out, size_t size)
{
    ql_tok_scratch s = {0};
    ql_error err;
    size_t len = strlen(text);
    ql_status st = ql_pretok_split(p, text, len, &s, &err);
    CHECK_OK(st, &err);
    size_t o = 0, c = 0;
    out[0] = '\0';
    for (size_t w = 0; st == QL_OK && w < s.n_seg; w++) {
        if (w && o + 1 < size)
            out[o++] = '|';
        for (size_t i = 0; i < s.seg[w]; i++, c++) {
            char u[4];
            size_t ul = ql_utf8_encode(s.cpts[c], u);
            if (o + ul < size) {
                memcpy(out + o, u, ul);
                o += ul;
            }
        }
    }
    out[o] = '\0';
    ql_tok_scratch_deinit(&s);
}

static void expect_split(const char *pre, const char *text, const char *want)
{
    ql_pretok p;
    ql_error err;
    ql_status st = ql_pretok_init(&p, pre, &err);
    CHECK_OK(st, &err);
    if (st != QL_OK)
        return;
    char got[1024];
    split(&p, text, got, sizeof got);
    CHECK_MSG(strcmp(got, want) == 0, "%s: '%s'\n  expected '%s'\n  got      '%s'", pre, text, want,
              got);
    ql_pretok_deinit(&p);
}

/* Pieces random texts are made of: letters (ASCII, accented, CJK, a combining mark),
 * digits (ASCII, Arabic-Indic, Roman numeral), every kind of whitespace, quotes and
 * contractions, punctuation, symbols, emoji, control and unassigned code points. */
static const char *const ALPHABET[] = {
    "a",
    "b",
    "Z",
    "x",
    "\xC3\xA9",
    "\xC3\x9F",
    "\xE6\x97\xA5",
    "\xCC\x81",
    "1",
    "9",
    "42",
    "\xD9\xA3",
    "\xE2\x85\xAB",
    " ",
    " ",
    " ",
    "  ",
    "\t",
    "\n",
    "\r",
    "\r\n",
    "\xC2\xA0",
    "\xE3\x80\x80",
    "\xC2\x85",
    "'",
    "'s",
    "'S",
    "'ll",
    "'LL",
    "'Re",
    "'ve",
    "'d",
    "'m",
    "'t",
    "!",
    ".",
    ",",
    "-",
    "\xE2\x80\xA6",
    "\xE2\x80\x94",
    "$",
    "+",
    "~",
    "`",
    "|",
    "^",
    "\xF0\x9F\x98\x80",
    "\x01",
    "\x1F",
    "\xE2\x80\x8B",
    "\xCD\xB8",
    "\xFF",
};
#define N_ALPHABET     (sizeof ALPHABET / sizeof ALPHABET[0])
#define N_RANDOM_TEXTS 4000 /* enough to hit every pair of neighbours many times */
#define MAX_PIECES     24

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rng(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static void differential(const char *pre)
{
    ql_pretok hand, regex;
    ql_error err;
    ql_status st = ql_pretok_init(&hand, pre, &err);
    CHECK_OK(st, &err);
    st = ql_pretok_init_regex_only(&regex, pre, &err);
    CHECK_OK(st, &err);
    int mismatches = 0;
    for (int k = 0; k < N_RANDOM_TEXTS && mismatches < 5; k++) {
        char text[MAX_PIECES * 4 + 1];
        size_t o = 0;
        int n = (int)(rng() % MAX_PIECES);
        for (int i = 0; i < n; i++) {
            const char *piece = ALPHABET[rng() % N_ALPHABET];
            memcpy(text + o, piece, strlen(piece));
            o += strlen(piece);
        }
        text[o] = '\0';
        char a[1024], b[1024];
        split(&hand, text, a, sizeof a);
        split(&regex, text, b, sizeof b);
        if (strcmp(a, b) != 0) {
            mismatches++;
            CHECK_MSG(0, "%s: hand-written '%s' vs regex '%s'", pre, a, b);
        }
    }
    CHECK_EQ_INT(mismatches, 0);
    ql_pretok_deinit(&hand);
    ql_pretok_deinit(&regex);
}

int main(void)
{
    /* GPT-2: contractions (lower case only), " ?letters", " ?digits", " ?other", and a
     * whitespace run gives its last space to the following word. */
    expect_split("gpt-2", "Hello world", "Hello| world");
    expect_split("gpt-2", "I'm  you'LL", "I|'m| | you|'|LL");
    expect_split("gpt-2", "a    b", "a|   | b");
    expect_split("gpt-2", "x 12345 3.14", "x| 12345| 3|.|14");
    expect_split("gpt-2", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC!!",
                 "caf\xC3\xA9| \xE6\x97\xA5\xE6\x9C\xAC|!!");
    expect_split("gpt-2", "end  \n", "end|  \n");
    expect_split("gpt-2", "\t\tx", "\t|\t|x");
    /* Llama 3: case-insensitive contractions, one optional non-letter before letters,
     * digits in threes, newlines kept with the whitespace before them. */
    expect_split("llama-bpe", "I'M  you'LL", "I|'M| | you|'LL");
    expect_split("llama-bpe", "1234567", "123|456|7");
    expect_split("llama-bpe", "(hello) \n\n  x", "(hello|)| \n\n| | x");
    expect_split("llama-bpe", "a !!\nb", "a| !!\n|b");
    expect_split("llama-bpe", "\xC3\xA9t\xC3\xA9 42", "\xC3\xA9t\xC3\xA9| |42");
    /* Qwen2: Llama 3's pattern with single digits (regex engine, no hand-written code). */
    expect_split("qwen2", "Hello world", "Hello| world");
    expect_split("qwen2", "I'm 123 ok", "I|'m| |1|2|3| ok");
    expect_split("qwen2", "a\n\nb", "a|\n\n|b");
    expect_split("qwen2", "  x", " | x");
    expect_split("qwen2", "x!!\n", "x|!!\n");
    expect_split("qwen2",
                 "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E"
                 "abc",
                 "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E"
                 "abc");
    expect_split("qwen2", "\xD9\xA3\xD9\xA4", "\xD9\xA3|\xD9\xA4");
    /* StarCoder / SmolLM: every digit alone first, then GPT-2 inside the pieces. */
    expect_split("starcoder", "x 2024 y", "x| |2|0|2|4| y");
    expect_split("smollm", "abc123", "abc|1|2|3");
    /* DeepSeek Coder: newlines, " ?letters", " ?punctuation", CJK runs, digits. */
    expect_split("deepseek-coder", "Hi, you!\n42", "Hi|,| you|!|\n|4|2");
    /* Default (no tokenizer.ggml.pre): punctuation runs first, then GPT-2, then digit
     * runs, then three-digit groups (the rest of a run is the gap after them). */
    expect_split("default", "a+b=1234", "a|+|b|=|123|4");

    differential("gpt-2");
    differential("llama-bpe");
    differential("starcoder");
    differential("default");
    return qlt_done();
}
