/* SentencePiece-style tokenizer of "llama" vocabularies (llama.cpp's llm_tokenizer_spm).
 *
 * The fragment is escaped (optional leading space, every ' ' -> U+2581 "▁") and cut
 * into UTF-8 characters. Then, repeatedly, the adjacent pair whose concatenation is
 * the vocabulary token with the highest score is merged (ties: leftmost pair). A
 * priority queue of candidate pairs keeps this O(n log n): after each merge only the
 * two new neighbour pairs are added, and entries made stale by earlier merges are
 * recognised by their recorded length and skipped. Each final piece that is a token
 * is emitted; any other (a character missing from the vocabulary) falls back to byte
 * tokens <0xXX>. */
#include <stdlib.h>
#include <string.h>

#include "base/unicode.h"
#include "model/tokenizer_impl.h"

#define SPACE_MARK "\xE2\x96\x81" /* U+2581, SentencePiece's visible space */

/* Queues the pair (left, right) if their concatenation is a token. */
static bool try_pair(const ql_tokenizer *t, ql_tok_scratch *s, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return true;
    const ql_sym *l = &s->syms[left], *r = &s->syms[right];
    uint32_t size = l->n + r->n;
    int32_t id = ql_tok_find(t, s->text + l->off, size);
    if (id < 0)
        return true;
    ql_bigram b = {-t->tokens[id].score, left, right, size};
    return ql_bigram_push(&s->heap, b);
}

/* Merges the symbols of s->text[off, off + n) and appends the ids. */
static bool spm_region(const ql_tokenizer *t, ql_tok_scratch *s, size_t off, size_t n,
                       ql_idvec *out, int32_t *missing_byte)
{
    if (!ql_tok_merge(t, s, off, n, try_pair))
        return false;

    /* Every merged piece is a token by construction; single characters may not be.
     * (llama.cpp also consults a table of undone merges here, but a piece that is not
     * a token was never merged, so that table never applies.) */
    for (int32_t i = 0; i != -1; i = s->syms[i].next) {
        const ql_sym *y = &s->syms[i];
        int32_t id = ql_tok_find(t, s->text + y->off, y->n);
        if (id >= 0) {
            if (!ql_idvec_push(out, id))
                return false;
            continue;
        }
        for (uint32_t j = 0; j < y->n; j++) {
            unsigned char byte = (unsigned char)s->text[y->off + j];
            int32_t bid = t->byte_token[byte];
            if (bid < 0)
                bid = t->unk; /* no byte fallback in this vocabulary: <unk> */
            if (bid < 0) {
                *missing_byte = byte;
                return true;
            }
            if (!ql_idvec_push(out, bid))
                return false;
        }
    }
    return true;
}

ql_status ql_spm_tokenize(const ql_tokenizer *t, const char *text, size_t len, bool prefix_space,
                          ql_tok_scratch *s, ql_idvec *out, ql_error *err)
{
    /* Escaping at most triples the length. */
    if (len > ((size_t)INT32_MAX - 3) / 3)
        return ql_error_set(err, QL_EINVAL, "tokenizer: text fragment of %zu bytes is too long",
                            len);
    if (!ql_tok_scratch_text(s, 3 * len + 3))
        goto oom;
    size_t m = 0;
    if (prefix_space) {
        memcpy(s->text, SPACE_MARK, 3);
        m = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s->text + m, SPACE_MARK, 3);
            m += 3;
        } else {
            s->text[m++] = text[i];
        }
    }
    if (!ql_tok_scratch_syms(s, m))
        goto oom;

    /* A character found in no token longer than one byte (typically '\n') can never
     * be merged, so the text on either side of it is tokenized independently: cutting
     * there gives the same ids and keeps the priority queue short. */
    int32_t missing = -1;
    size_t r0 = 0;
    for (size_t i = 0; i < m && missing < 0; i++) {
        unsigned char c = (unsigned char)s->text[i];
        if (c >= 0x80 || !t->spm_barrier[c])
            continue;
        if ((i > r0 && !spm_region(t, s, r0, i - r0, out, &missing)) ||
            (missing < 0 && !spm_region(t, s, i, 1, out, &missing)))
            goto oom;
        r0 = i + 1;
    }
    if (missing < 0 && m > r0 && !spm_region(t, s, r0, m - r0, out, &missing))
        goto oom;
    if (missing >= 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: byte 0x%02X has no token (<0x%02X>) and the vocabulary has no "
                            "unknown token",
                            t->path, (unsigned)missing, (unsigned)missing);
    return QL_OK;
oom:
    return ql_error_set(err, QL_ENOMEM, "tokenizer: out of memory for %zu bytes of text", len);
}
