/* Byte-level BPE tokenizer of "gpt2" vocabularies (llama.cpp's llm_tokenizer_bpe).
 *
 * The pre-tokenizer cuts the fragment into words. Each word is re-encoded through
 * GPT-2's byte alphabet (every UTF-8 byte becomes one printable code point, so ' '
 * becomes "Ġ") and split into those characters; then the adjacent pair with the
 * lowest merge rank in tokenizer.ggml.merges is merged until no pair has a rank
 * (ties: leftmost), with the same priority-queue scheme as the SPM tokenizer. Each
 * final piece is looked up; a piece that is not a token is emitted byte by byte, and
 * only the bytes that are one-byte tokens survive (llama.cpp drops the others). */
#include <stdlib.h>
#include <string.h>

#include "base/unicode.h"
#include "model/tokenizer_impl.h"

static bool try_pair(const ql_tokenizer *t, ql_tok_scratch *s, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return true;
    const ql_sym *l = &s->syms[left], *r = &s->syms[right];
    int32_t rank = ql_tok_merge_rank(t, s->text + l->off, l->n, s->text + r->off, r->n);
    if (rank < 0)
        return true;
    /* Ranks are below 2^24 (checked at load), so the float holds them exactly. */
    ql_bigram b = {(float)rank, left, right, l->n + r->n};
    return ql_bigram_push(&s->heap, b);
}

/* Merges the byte-encoded word s->text[0, m) and appends its ids. */
static bool bpe_word(const ql_tokenizer *t, ql_tok_scratch *s, size_t m, ql_idvec *out)
{
    if (t->pre.ignore_merges) {
        int32_t id = ql_tok_find(t, s->text, m);
        if (id >= 0)
            return ql_idvec_push(out, id);
    }
    if (!ql_tok_scratch_syms(s, m))
        return false;
    if (!ql_tok_merge(t, s, 0, m, try_pair))
        return false;
    for (int32_t i = 0; i != -1; i = s->syms[i].next) {
        const ql_sym *y = &s->syms[i];
        int32_t id = ql_tok_find(t, s->text + y->off, y->n);
        if (id >= 0) {
            if (!ql_idvec_push(out, id))
                return false;
            continue;
        }
        for (uint32_t j = 0; j < y->n; j++) {
            int32_t bid = ql_tok_find(t, s->text + y->off + j, 1);
            if (bid >= 0 && !ql_idvec_push(out, bid))
                return false;
        }
    }
    return true;
}

ql_status ql_bpe_tokenize(const ql_tokenizer *t, const char *text, size_t len, ql_tok_scratch *s,
                          ql_idvec *out, ql_error *err)
{
    if (len > (size_t)INT32_MAX)
        return ql_error_set(err, QL_EINVAL, "tokenizer: text fragment of %zu bytes is too long",
                            len);
    ql_status st = ql_pretok_split(&t->pre, text, len, s, err);
    if (st != QL_OK)
        return st;
    size_t start = 0;
    for (size_t w = 0; w < s->n_seg; w++) {
        size_t wl = s->seg[w];
        /* Each code point is at most 4 UTF-8 bytes, each byte at most 2 encoded bytes. */
        if (!ql_tok_scratch_text(s, 8 * wl + 1))
            goto oom;
        size_t m = 0;
        for (size_t i = start; i < start + wl; i++) {
            char u[4];
            size_t ul = ql_utf8_encode(s->cpts[i], u);
            for (size_t k = 0; k < ul; k++) {
                uint8_t b = (uint8_t)u[k];
                memcpy(s->text + m, t->gpt2_bytes[b], t->gpt2_len[b]);
                m += t->gpt2_len[b];
            }
        }
        start += wl;
        if (m > 0 && !bpe_word(t, s, m, out))
            goto oom;
    }
    return QL_OK;
oom:
    return ql_error_set(err, QL_ENOMEM, "tokenizer: out of memory for %zu bytes of text", len);
}
