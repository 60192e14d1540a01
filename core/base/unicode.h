/* qlab: the Unicode facts the tokenizers need, with llama.cpp's conventions.
 *
 * - UTF-8 decoding never fails: a byte that does not start a well-formed sequence
 *   becomes U+FFFD and decoding resumes at the next byte (llama.cpp's
 *   unicode_cpts_from_utf8). Overlong forms and surrogates are accepted as they are.
 * - Code point classes come from libutf8proc's general categories: \p{L}, \p{N},
 *   \p{P}, \p{S}, \p{M}, \p{Z}, \p{C}, unassigned. "Whitespace" is Unicode's
 *   White_Space property (the set Python's `regex` module matches with \s, which is
 *   what llama.cpp's generated tables hold): U+0009..U+000D, U+0085 and the Z*
 *   categories.
 *   Unicode version: Debian bookworm's libutf8proc 2.8.0 implements Unicode 15.0; its
 *   category groups equal Python's 15.0 tables at every code point, and its White_Space
 *   set equals llama.cpp's. llama.cpp's tables, generated with Python, may be 15.1: then
 *   627 code points differ (CJK Extension I, U+2EBF0..U+2EE5D, letters there and
 *   unassigned here; U+2FFC..U+2FFF and U+31EF, symbols there), so text containing them
 *   can split differently. No golden text contains them.
 * - GPT-2's byte-to-unicode table maps every byte to a printable code point so that
 *   byte-level BPE vocabularies can be stored as text. */
#ifndef QL_UNICODE_H
#define QL_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Category flags of a code point (exactly one of the first eight is set). */
enum {
    QL_UNI_UNDEFINED = 1u << 0, /* unassigned (Cn) or beyond U+10FFFF */
    QL_UNI_NUMBER = 1u << 1,    /* Nd Nl No */
    QL_UNI_LETTER = 1u << 2,    /* Lu Ll Lt Lm Lo */
    QL_UNI_SEPARATOR = 1u << 3, /* Zs Zl Zp */
    QL_UNI_MARK = 1u << 4,      /* Mn Mc Me */
    QL_UNI_PUNCT = 1u << 5,     /* Pc Pd Ps Pe Pi Pf Po */
    QL_UNI_SYMBOL = 1u << 6,    /* Sm Sc Sk So */
    QL_UNI_CONTROL = 1u << 7,   /* Cc Cf Cs Co */
    QL_UNI_WHITESPACE = 1u << 8,
};

#define QL_UNI_REPLACEMENT 0xFFFDu

/* Length of the UTF-8 sequence a lead byte announces, from its high nibble only
 * (continuation bytes count as 1), as llama.cpp's unicode_len_utf8. */
size_t ql_utf8_seq_len(unsigned char lead);

/* Decodes the code point at s[*pos] (len bytes in s) and advances *pos; invalid or
 * truncated sequences yield U+FFFD and advance by one byte. Requires *pos < len. */
uint32_t ql_utf8_decode(const char *s, size_t len, size_t *pos);

/* Encodes a code point (at most 0x1FFFFF, the range the decoder produces) into out;
 * returns the number of bytes (1..4). */
size_t ql_utf8_encode(uint32_t cpt, char out[4]);

/* Category and whitespace flags of a code point (QL_UNI_*). */
unsigned ql_unicode_flags(uint32_t cpt);

/* Simple lowercase mapping (the code point itself when it has none). */
uint32_t ql_unicode_tolower(uint32_t cpt);

/* Version of the Unicode tables in use (from libutf8proc), e.g. "15.0.0". */
const char *ql_unicode_version(void);

/* GPT-2 byte-level BPE alphabet: the code point byte b is written as. */
uint32_t ql_gpt2_byte_to_cpt(uint8_t b);
/* Inverse mapping: the byte a code point stands for, or -1 when it is not in the alphabet. */
int ql_gpt2_cpt_to_byte(uint32_t cpt);

#endif
