/* Unicode helpers: llama.cpp's lenient UTF-8 decoding, the whitespace set and category
 * groups its tables hold, and GPT-2's byte alphabet. */
#include <string.h>

#include "base/unicode.h"
#include "qltest.h"

/* Decodes s and compares the code points with want[0..n). */
static void expect_decode(const char *s, size_t len, const uint32_t *want, size_t n)
{
    size_t pos = 0, k = 0;
    bool ok = true;
    while (pos < len) {
        uint32_t c = ql_utf8_decode(s, len, &pos);
        ok = ok && k < n && c == want[k];
        k++;
    }
    CHECK_MSG(ok && k == n, "decoding %zu bytes gave %zu code points (expected %zu)", len, k, n);
}

int main(void)
{
    /* Valid sequences of 1..4 bytes. */
    const uint32_t v[] = {'a', 0xE9, 0x65E5, 0x1F642};
    expect_decode("a\xC3\xA9\xE6\x97\xA5\xF0\x9F\x99\x82", 10, v, 4);
    /* A stray continuation byte, a bad lead byte and a truncated sequence each give
     * U+FFFD for one byte; decoding resumes right after it. */
    const uint32_t bad[] = {0xFFFD, 'x', 0xFFFD, 'y', 0xFFFD, 0xFFFD};
    expect_decode("\x80x\xFFy\xE6\x97", 6, bad, 6);
    /* Overlong forms and surrogates are accepted, as llama.cpp accepts them. */
    const uint32_t lax[] = {0x2F, 0xD800};
    expect_decode("\xC0\xAF\xED\xA0\x80", 5, lax, 2);
    /* Round trip through the encoder, including the decoder's F4..F7 range. */
    const uint32_t cps[] = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF, 0x1FFFFF};
    for (size_t i = 0; i < sizeof cps / sizeof cps[0]; i++) {
        char u[4];
        size_t n = ql_utf8_encode(cps[i], u), pos = 0;
        CHECK_EQ_INT(ql_utf8_seq_len((unsigned char)u[0]), n);
        CHECK_EQ_INT(ql_utf8_decode(u, n, &pos), cps[i]);
        CHECK_EQ_INT(pos, n);
    }

    /* Whitespace is exactly the White_Space set of llama.cpp's unicode-data.cpp. */
    static const uint32_t ws[] = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,
                                  0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
                                  0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028,
                                  0x2029, 0x202F, 0x205F, 0x3000};
    size_t n_ws = 0;
    bool all_listed = true;
    for (uint32_t c = 0; c <= 0x10FFFF; c++) {
        if (!(ql_unicode_flags(c) & QL_UNI_WHITESPACE))
            continue;
        bool listed = false;
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            listed = listed || ws[i] == c;
        all_listed = all_listed && listed;
        n_ws++;
    }
    CHECK(all_listed);
    CHECK_EQ_INT(n_ws, sizeof ws / sizeof ws[0]);
    /* One category group per code point; examples from each group. */
    CHECK_EQ_INT(ql_unicode_flags('A'), QL_UNI_LETTER);
    CHECK_EQ_INT(ql_unicode_flags(0x65E5), QL_UNI_LETTER); /* 日 Lo */
    CHECK_EQ_INT(ql_unicode_flags(0x0663), QL_UNI_NUMBER); /* Arabic-Indic 3 */
    CHECK_EQ_INT(ql_unicode_flags(0x216B), QL_UNI_NUMBER); /* Roman numeral Nl */
    CHECK_EQ_INT(ql_unicode_flags(0x0301), QL_UNI_MARK);   /* combining acute */
    CHECK_EQ_INT(ql_unicode_flags(0x2014), QL_UNI_PUNCT);  /* em dash */
    CHECK_EQ_INT(ql_unicode_flags('~'), QL_UNI_SYMBOL);
    CHECK_EQ_INT(ql_unicode_flags(0x1F642), QL_UNI_SYMBOL); /* emoji So */
    CHECK_EQ_INT(ql_unicode_flags(0x3000), QL_UNI_SEPARATOR | QL_UNI_WHITESPACE);
    CHECK_EQ_INT(ql_unicode_flags('\n'), QL_UNI_CONTROL | QL_UNI_WHITESPACE);
    CHECK_EQ_INT(ql_unicode_flags(0x200B), QL_UNI_CONTROL);   /* ZWSP is Cf */
    CHECK_EQ_INT(ql_unicode_flags(0x0378), QL_UNI_UNDEFINED); /* unassigned */
    CHECK_EQ_INT(ql_unicode_flags(0x110000), QL_UNI_UNDEFINED);
    CHECK_EQ_INT(ql_unicode_tolower('Q'), 'q');
    CHECK_EQ_INT(ql_unicode_tolower(0xC9), 0xE9);
    CHECK(strncmp(ql_unicode_version(), "15.", 3) == 0 ||
          strncmp(ql_unicode_version(), "16.", 3) == 0);

    /* GPT-2's alphabet: a bijection between bytes and 256 printable code points; the
     * space is 'Ġ' (U+0120), the newline 'Ċ' (U+010A). */
    bool seen[0x144] = {false};
    bool bijective = true;
    for (int b = 0; b < 256; b++) {
        uint32_t c = ql_gpt2_byte_to_cpt((uint8_t)b);
        bijective = bijective && c < 0x144 && !seen[c] && ql_gpt2_cpt_to_byte(c) == b;
        if (c < 0x144)
            seen[c] = true;
    }
    CHECK(bijective);
    CHECK_EQ_INT(ql_gpt2_byte_to_cpt(' '), 0x120);
    CHECK_EQ_INT(ql_gpt2_byte_to_cpt('\n'), 0x10A);
    CHECK_EQ_INT(ql_gpt2_byte_to_cpt('a'), 'a');
    CHECK_EQ_INT(ql_gpt2_byte_to_cpt(0xAD), 0x143);
    CHECK_EQ_INT(ql_gpt2_cpt_to_byte(0x20), -1);
    CHECK_EQ_INT(ql_gpt2_cpt_to_byte(0x144), -1);
    return qlt_done();
}
