/* Unicode helpers for the tokenizers: lenient UTF-8, categories from libutf8proc,
 * GPT-2's byte alphabet. */
#include "base/unicode.h"

#include <utf8proc.h>

size_t ql_utf8_seq_len(unsigned char lead)
{
    /* 0x0-0xB: ASCII or a stray continuation byte; 0xC-0xD: 2 bytes; 0xE: 3; 0xF: 4. */
    static const unsigned char len_by_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len_by_nibble[lead >> 4];
}

static int is_cont(const char *s, size_t len, size_t i)
{
    return i < len && ((unsigned char)s[i] & 0xC0) == 0x80;
}

uint32_t ql_utf8_decode(const char *s, size_t len, size_t *pos)
{
    const size_t p = *pos;
    const unsigned char b0 = (unsigned char)s[p];
    if (b0 < 0x80) {
        *pos = p + 1;
        return b0;
    }
    /* The lead byte's prefix bits decide the length; every continuation byte must be
     * present and of the form 10xxxxxx. Nothing else is checked (llama.cpp accepts
     * overlong forms and surrogates, and so must we to give the same ids). */
    if ((b0 & 0x40) == 0) {
        *pos = p + 1;
        return QL_UNI_REPLACEMENT;
    }
    if ((b0 & 0x20) == 0) {
        if (is_cont(s, len, p + 1)) {
            *pos = p + 2;
            return ((uint32_t)(b0 & 0x1F) << 6) | ((unsigned char)s[p + 1] & 0x3Fu);
        }
    } else if ((b0 & 0x10) == 0) {
        if (is_cont(s, len, p + 1) && is_cont(s, len, p + 2)) {
            *pos = p + 3;
            return ((uint32_t)(b0 & 0x0F) << 12) | (((unsigned char)s[p + 1] & 0x3Fu) << 6) |
                   ((unsigned char)s[p + 2] & 0x3Fu);
        }
    } else if ((b0 & 0x08) == 0) {
        if (is_cont(s, len, p + 1) && is_cont(s, len, p + 2) && is_cont(s, len, p + 3)) {
            *pos = p + 4;
            return ((uint32_t)(b0 & 0x07) << 18) | (((unsigned char)s[p + 1] & 0x3Fu) << 12) |
                   (((unsigned char)s[p + 2] & 0x3Fu) << 6) | ((unsigned char)s[p + 3] & 0x3Fu);
        }
    }
    *pos = p + 1;
    return QL_UNI_REPLACEMENT;
}

size_t ql_utf8_encode(uint32_t cpt, char out[4])
{
    if (cpt < 0x80) {
        out[0] = (char)cpt;
        return 1;
    }
    if (cpt < 0x800) {
        out[0] = (char)(0xC0 | (cpt >> 6));
        out[1] = (char)(0x80 | (cpt & 0x3F));
        return 2;
    }
    if (cpt < 0x10000) {
        out[0] = (char)(0xE0 | (cpt >> 12));
        out[1] = (char)(0x80 | ((cpt >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cpt & 0x3F));
        return 3;
    }
    /* Up to 0x1FFFFF: the decoder yields such values for F4..F7 lead bytes, and
     * re-encoding them gives back the original bytes. */
    out[0] = (char)(0xF0 | ((cpt >> 18) & 0x07));
    out[1] = (char)(0x80 | ((cpt >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cpt >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cpt & 0x3F));
    return 4;
}

unsigned ql_unicode_flags(uint32_t cpt)
{
    if (cpt > 0x10FFFF)
        return QL_UNI_UNDEFINED;
    unsigned f;
    switch (utf8proc_category((utf8proc_int32_t)cpt)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
        f = QL_UNI_LETTER;
        break;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
        f = QL_UNI_MARK;
        break;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
        f = QL_UNI_NUMBER;
        break;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
        f = QL_UNI_PUNCT;
        break;
    case UTF8PROC_CATEGORY_SM:
    case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
        f = QL_UNI_SYMBOL;
        break;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
        f = QL_UNI_SEPARATOR | QL_UNI_WHITESPACE;
        break;
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
        f = QL_UNI_CONTROL;
        break;
    default:
        f = QL_UNI_UNDEFINED;
        break;
    }
    /* White_Space outside the Z* categories: TAB, LF, VT, FF, CR and NEL. */
    if ((cpt >= 0x09 && cpt <= 0x0D) || cpt == 0x85)
        f |= QL_UNI_WHITESPACE;
    return f;
}

uint32_t ql_unicode_tolower(uint32_t cpt)
{
    if (cpt > 0x10FFFF)
        return cpt;
    return (uint32_t)utf8proc_tolower((utf8proc_int32_t)cpt);
}

const char *ql_unicode_version(void)
{
    return utf8proc_unicode_version();
}

/* GPT-2 keeps the 188 printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF as the code
 * points of the same value and maps the other 68 bytes, in increasing order, to
 * U+0100..U+0143: 0x00..0x20 -> +0..32, 0x7F..0xA0 -> +33..66, 0xAD -> +67. */
uint32_t ql_gpt2_byte_to_cpt(uint8_t b)
{
    if (b <= 0x20)
        return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0)
        return 0x100u + 33u + (uint32_t)(b - 0x7F);
    if (b == 0xAD)
        return 0x100u + 67u;
    return b;
}

int ql_gpt2_cpt_to_byte(uint32_t cpt)
{
    if ((cpt >= 0x21 && cpt <= 0x7E) || (cpt >= 0xA1 && cpt <= 0xAC) ||
        (cpt >= 0xAE && cpt <= 0xFF))
        return (int)cpt;
    if (cpt >= 0x100 && cpt <= 0x120)
        return (int)(cpt - 0x100);
    if (cpt >= 0x121 && cpt <= 0x142)
        return (int)(cpt - 0x121 + 0x7F);
    if (cpt == 0x143)
        return 0xAD;
    return -1;
}
