/* Tokenizers from GGUF metadata: loading, special-token partitioning, pieces.
 * The merge loops live in tokenizer_spm.c and tokenizer_bpe.c, the BPE
 * pre-tokenizers in tokenizer_pre.c. */
#include "model/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "base/unicode.h"
#include "base/util.h"
#include "model/tokenizer_impl.h"

/* ===========================================================================
 * Small containers */

/* FNV-1a, 64 bit. */
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME  0x100000001b3ull

static uint64_t fnv_bytes(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= FNV_PRIME;
    }
    return h;
}

static bool strhash_init(ql_strhash *h, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    h->slots = calloc(cap, sizeof *h->slots);
    h->mask = cap - 1;
    return h->slots != NULL;
}

int32_t ql_tok_find(const ql_tokenizer *t, const char *s, size_t len)
{
    const ql_strhash *h = &t->token_index;
    for (size_t i = fnv_bytes(FNV_OFFSET, s, len) & h->mask;; i = (i + 1) & h->mask) {
        uint32_t v = h->slots[i];
        if (v == 0)
            return -1;
        const ql_token *tok = &t->tokens[v - 1];
        if (tok->len == len && memcmp(tok->text, s, len) == 0)
            return (int32_t)(v - 1);
    }
}

static uint64_t merge_hash(const char *l, size_t llen, const char *r, size_t rlen)
{
    uint64_t h = fnv_bytes(FNV_OFFSET, l, llen);
    h = fnv_bytes(h, " ", 1);
    return fnv_bytes(h, r, rlen);
}

int32_t ql_tok_merge_rank(const ql_tokenizer *t, const char *l, size_t llen, const char *r,
                          size_t rlen)
{
    const ql_strhash *h = &t->merge_index;
    for (size_t i = merge_hash(l, llen, r, rlen) & h->mask;; i = (i + 1) & h->mask) {
        uint32_t v = h->slots[i];
        if (v == 0)
            return -1;
        const ql_merge *m = &t->merges[v - 1];
        if (m->llen == llen && m->rlen == rlen && memcmp(m->left, l, llen) == 0 &&
            memcmp(m->right, r, rlen) == 0)
            return (int32_t)(v - 1);
    }
}

bool ql_idvec_push(ql_idvec *v, int32_t id)
{
    if (v->n == v->cap) {
        int64_t cap = v->cap ? 2 * v->cap : 256;
        int32_t *p = realloc(v->ids, (size_t)cap * sizeof *p);
        if (!p)
            return false;
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return true;
}

static bool bigram_less(const ql_bigram *a, const ql_bigram *b)
{
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

bool ql_bigram_push(ql_bigram_heap *h, ql_bigram b)
{
    if (h->n == h->cap && !ql_grow((void **)&h->a, &h->cap, h->n + 1, sizeof *h->a))
        return false;
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_less(&b, &h->a[parent]))
            break;
        h->a[i] = h->a[parent];
        i = parent;
    }
    h->a[i] = b;
    return true;
}

ql_bigram ql_bigram_pop(ql_bigram_heap *h)
{
    ql_bigram top = h->a[0];
    ql_bigram last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && bigram_less(&h->a[c + 1], &h->a[c]))
            c++;
        if (!bigram_less(&h->a[c], &last))
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n > 0)
        h->a[i] = last;
    return top;
}

bool ql_tok_scratch_text(ql_tok_scratch *s, size_t n)
{
    return n <= s->cap_text || ql_grow((void **)&s->text, &s->cap_text, n, 1);
}

bool ql_tok_scratch_syms(ql_tok_scratch *s, size_t n)
{
    return n <= s->cap_syms || ql_grow((void **)&s->syms, &s->cap_syms, n, sizeof *s->syms);
}

bool ql_tok_merge(const ql_tokenizer *t, ql_tok_scratch *s, size_t off, size_t n,
                  ql_tok_pair_fn try_pair)
{
    int32_t n_sym = 0;
    for (size_t pos = off, end = off + n; pos < end;) {
        size_t l = ql_utf8_seq_len((unsigned char)s->text[pos]);
        if (l > end - pos)
            l = end - pos;
        ql_sym *y = &s->syms[n_sym];
        y->off = pos;
        y->n = (uint32_t)l;
        y->prev = n_sym - 1;
        pos += l;
        y->next = pos == end ? -1 : n_sym + 1;
        n_sym++;
    }
    s->heap.n = 0;
    for (int32_t i = 1; i < n_sym; i++)
        if (!try_pair(t, s, i - 1, i))
            return false;
    while (s->heap.n > 0) {
        ql_bigram b = ql_bigram_pop(&s->heap);
        ql_sym *l = &s->syms[b.left], *r = &s->syms[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue; /* stale: a side was merged elsewhere since the pair was queued */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->syms[r->next].prev = b.left;
        if (!try_pair(t, s, l->prev, b.left) || !try_pair(t, s, b.left, l->next))
            return false;
    }
    return true;
}

/* ===========================================================================
 * Loading */

#define KEY_MODEL  "tokenizer.ggml.model"
#define KEY_PRE    "tokenizer.ggml.pre"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_TYPES  "tokenizer.ggml.token_type"
#define KEY_MERGES "tokenizer.ggml.merges"

/* GGUF token types. */
enum {
    TT_NORMAL = 1,
    TT_UNKNOWN = 2,
    TT_CONTROL = 3,
    TT_USER_DEFINED = 4,
    TT_UNUSED = 5,
    TT_BYTE = 6
};

static uint32_t attr_of_type(int32_t type)
{
    switch (type) {
    case TT_NORMAL:
        return QL_TOK_NORMAL;
    case TT_UNKNOWN:
        return QL_TOK_UNKNOWN;
    case TT_CONTROL:
        return QL_TOK_CONTROL;
    case TT_USER_DEFINED:
        return QL_TOK_USER_DEFINED;
    case TT_UNUSED:
        return QL_TOK_UNUSED;
    case TT_BYTE:
        return QL_TOK_BYTE;
    default:
        return QL_TOK_UNDEFINED;
    }
}

static void add_warning(ql_tokenizer *t, const char *msg)
{
    size_t used = strlen(t->warning);
    snprintf(t->warning + used, sizeof t->warning - used, "%s%s", used ? "; " : "", msg);
}

/* Reads an optional array key of one element type with at least n elements. Returns
 * QL_OK with *arr NULL when absent. */
static ql_status opt_array(const ql_gguf *g, const char *key, ql_gguf_vtype elem, uint64_t n,
                           const ql_gguf_array **arr, ql_error *err)
{
    *arr = NULL;
    const ql_gguf_kv *kv = ql_gguf_find_kv(g, key);
    if (!kv)
        return QL_OK;
    if (kv->value.type != QL_GGUF_ARRAY || kv->value.v.arr.elem_type != elem)
        return ql_error_set(
            err, QL_EFORMAT, "%s: key '%s' has type %s, expected an array of %s", g->path, key,
            kv->value.type == QL_GGUF_ARRAY ? ql_gguf_vtype_name(kv->value.v.arr.elem_type)
                                            : ql_gguf_vtype_name(kv->value.type),
            ql_gguf_vtype_name(elem));
    if (kv->value.v.arr.n < n)
        return ql_error_set(err, QL_EFORMAT, "%s: key '%s' has %llu elements, expected %llu",
                            g->path, key, (unsigned long long)kv->value.v.arr.n,
                            (unsigned long long)n);
    *arr = &kv->value.v.arr;
    return QL_OK;
}

/* An optional special-token id key: kept only when it names a token (llama.cpp warns
 * and keeps its default otherwise). */
static ql_status special_id(ql_tokenizer *t, const ql_gguf *g, const char *key, int32_t *id,
                            bool *present, ql_error *err)
{
    if (present)
        *present = false;
    ql_error e2;
    ql_error_clear(&e2);
    uint32_t v;
    if (!ql_gguf_get_u32(g, key, &v, &e2)) {
        if (e2.status != QL_OK)
            return ql_error_set(err, e2.status, "%s", e2.msg);
        return QL_OK;
    }
    if (present)
        *present = true;
    if (v >= (uint32_t)t->n_vocab) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s = %u is not a token id (vocabulary of %d), kept %d", key, v,
                 t->n_vocab, *id);
        add_warning(t, msg);
        return QL_OK;
    }
    *id = (int32_t)v;
    return QL_OK;
}

static ql_status opt_bool(const ql_gguf *g, const char *key, bool *val, ql_error *err)
{
    ql_error e2;
    ql_error_clear(&e2);
    bool v;
    if (ql_gguf_get_bool(g, key, &v, &e2))
        *val = v;
    else if (e2.status != QL_OK)
        return ql_error_set(err, e2.status, "%s", e2.msg);
    return QL_OK;
}

/* Marks as control a token whose text is one of names (the first in id order), unless
 * the id is set by a key. llama.cpp recognises end-of-turn and fill-in-the-middle
 * tokens by their text this way; as control tokens they no longer split the text. */
static void mark_control_first(ql_tokenizer *t, const char *const *names, bool key_set)
{
    if (key_set)
        return;
    int32_t best = -1;
    for (const char *const *n = names; *n; n++) {
        int32_t id = ql_tok_find(t, *n, strlen(*n));
        if (id >= 0 && (best < 0 || id < best))
            best = id;
    }
    if (best >= 0 && !(t->tokens[best].attr & QL_TOK_CONTROL))
        t->tokens[best].attr = QL_TOK_CONTROL;
}

static const char *const EOT_NAMES[] = {"<|eot_id|>",
                                        "<|im_end|>",
                                        "<|end|>",
                                        "<end_of_turn>",
                                        "<|endoftext|>",
                                        "<EOT>",
                                        "_<EOT>",
                                        "<\xEF\xBD\x9C"
                                        "end\xE2\x96\x81"
                                        "of\xE2\x96\x81"
                                        "sentence\xEF\xBD\x9C>", /* <｜end▁of▁sentence｜> */
                                        NULL};
static const char *const EOM_NAMES[] = {"<|eom_id|>", NULL};
static const char *const FIM_PRE_NAMES[] = {"<|fim_prefix|>", "<fim-prefix>",
                                            "<\xEF\xBD\x9C"
                                            "fim\xE2\x96\x81"
                                            "begin\xEF\xBD\x9C>",
                                            "<PRE>", NULL};
static const char *const FIM_SUF_NAMES[] = {"<|fim_suffix|>", "<fim-suffix>",
                                            "<\xEF\xBD\x9C"
                                            "fim\xE2\x96\x81"
                                            "hole\xEF\xBD\x9C>",
                                            "<SUF>", NULL};
static const char *const FIM_MID_NAMES[] = {"<|fim_middle|>", "<fim-middle>",
                                            "<\xEF\xBD\x9C"
                                            "fim\xE2\x96\x81"
                                            "end\xEF\xBD\x9C>",
                                            "<MID>", NULL};
static const char *const FIM_PAD_NAMES[] = {"<|fim_pad|>", "<fim-pad>", "<PAD>", NULL};
static const char *const FIM_REP_NAMES[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                            NULL};
static const char *const FIM_SEP_NAMES[] = {"<|file_sep|>", NULL};
/* End-of-generation texts: every one present becomes a control token. */
static const char *const EOG_NAMES[] = {"<|eot_id|>",    "<|im_end|>",    "<|end|>",
                                        "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                                        "<EOT>",         "_<EOT>",        NULL};

static ql_status detect_control(ql_tokenizer *t, const ql_gguf *g, ql_error *err)
{
    static const struct {
        const char *key;
        const char *const *names;
    } groups[] = {
        {"tokenizer.ggml.eot_token_id", EOT_NAMES},
        {"tokenizer.ggml.eom_token_id", EOM_NAMES},
        {"tokenizer.ggml.fim_pre_token_id", FIM_PRE_NAMES},
        {"tokenizer.ggml.fim_suf_token_id", FIM_SUF_NAMES},
        {"tokenizer.ggml.fim_mid_token_id", FIM_MID_NAMES},
        {"tokenizer.ggml.fim_pad_token_id", FIM_PAD_NAMES},
        {"tokenizer.ggml.fim_rep_token_id", FIM_REP_NAMES},
        {"tokenizer.ggml.fim_sep_token_id", FIM_SEP_NAMES},
    };
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        int32_t id = -1;
        bool present = false;
        ql_status st = special_id(t, g, groups[i].key, &id, &present, err);
        if (st != QL_OK)
            return st;
        /* The deprecated prefix/suffix/middle keys also set the FIM ids. */
        if (!present && i >= 2 && i <= 4) {
            static const char *const old_keys[] = {"tokenizer.ggml.prefix_token_id",
                                                   "tokenizer.ggml.suffix_token_id",
                                                   "tokenizer.ggml.middle_token_id"};
            st = special_id(t, g, old_keys[i - 2], &id, &present, err);
            if (st != QL_OK)
                return st;
        }
        mark_control_first(t, groups[i].names, present && id >= 0);
    }
    for (const char *const *n = EOG_NAMES; *n; n++) {
        int32_t id = ql_tok_find(t, *n, strlen(*n));
        if (id >= 0 && !(t->tokens[id].attr & QL_TOK_CONTROL))
            t->tokens[id].attr = QL_TOK_CONTROL;
    }
    return QL_OK;
}

/* Phi-3: llama.cpp strips whitespace after every special token (except <unk>, <s> and
 * <|endoftext|>) and after </s>, recognising the model by its general.name. */
static void phi3_strip_flags(ql_tokenizer *t, const ql_gguf *g)
{
    const char *name = ql_gguf_get_str(g, "general.name", NULL);
    if (!name)
        return;
    char lower[256];
    size_t n = 0;
    for (; name[n] && n + 1 < sizeof lower; n++)
        lower[n] = (name[n] >= 'A' && name[n] <= 'Z') ? (char)(name[n] + 32) : name[n];
    lower[n] = '\0';
    if (!strstr(lower, "phi-3") && !strstr(lower, "phi3"))
        return;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->tokens[i].attr & (QL_TOK_CONTROL | QL_TOK_USER_DEFINED | QL_TOK_UNKNOWN))
            t->tokens[i].attr |= QL_TOK_RSTRIP;
    int32_t id = ql_tok_find(t, "</s>", 4);
    if (id >= 0)
        t->tokens[id].attr |= QL_TOK_RSTRIP;
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t i = 0; i < 3; i++) {
        id = ql_tok_find(t, keep[i], strlen(keep[i]));
        if (id >= 0)
            t->tokens[id].attr &= ~(uint32_t)QL_TOK_RSTRIP;
    }
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const ql_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->tokens[x].len, ly = t->tokens[y].len;
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Tokens that partition the text before tokenizing, longest first (ties by id; the
 * order among equal lengths only matters for overlapping texts, where llama.cpp's own
 * order is unspecified). */
static bool collect_specials(ql_tokenizer *t)
{
    int32_t n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        uint32_t a = t->tokens[i].attr;
        if ((a & QL_TOK_USER_DEFINED) && !(a & (QL_TOK_CONTROL | QL_TOK_UNKNOWN)) &&
            t->tokens[i].len > 0)
            n++;
    }
    if (n == 0)
        return true;
    t->specials = malloc((size_t)n * sizeof *t->specials);
    if (!t->specials)
        return false;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        uint32_t a = t->tokens[i].attr;
        if ((a & QL_TOK_USER_DEFINED) && !(a & (QL_TOK_CONTROL | QL_TOK_UNKNOWN)) &&
            t->tokens[i].len > 0)
            t->specials[t->n_specials++] = i;
    }
    qsort_r(t->specials, (size_t)n, sizeof *t->specials, cmp_special, t);
    return true;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Byte value of a byte token "<0xNN>" (llama.cpp reads the two characters at 3..4). */
static int byte_of_token(const ql_token *tok)
{
    if (tok->len < 5)
        return -1;
    int hi = hex_digit(tok->text[3]), lo = hex_digit(tok->text[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

typedef struct {
    char *p;
    size_t n, cap;
} buf;

static bool buf_put(buf *b, const void *s, size_t n)
{
    if (b->n + n > b->cap && !ql_grow((void **)&b->p, &b->cap, b->n + n, 1))
        return false;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return true;
}

/* llama.cpp's token_to_piece with special = true. */
static bool make_piece(const ql_tokenizer *t, int32_t id, buf *b)
{
    const ql_token *tok = &t->tokens[id];
    if (tok->attr & (QL_TOK_UNKNOWN | QL_TOK_CONTROL | QL_TOK_USER_DEFINED))
        return buf_put(b, tok->text, tok->len);
    if (tok->attr & QL_TOK_NORMAL) {
        if (t->kind == QL_VOCAB_SPM) {
            for (uint32_t i = 0; i < tok->len;) {
                if (tok->len - i >= 3 && memcmp(tok->text + i, "\xE2\x96\x81", 3) == 0) {
                    if (!buf_put(b, " ", 1))
                        return false;
                    i += 3;
                } else {
                    if (!buf_put(b, tok->text + i, 1))
                        return false;
                    i++;
                }
            }
            return true;
        }
        /* Byte-level BPE: each character of the token stands for one byte. */
        for (size_t pos = 0; pos < tok->len;) {
            size_t start = pos;
            uint32_t c = ql_utf8_decode(tok->text, tok->len, &pos);
            int byte = ql_gpt2_cpt_to_byte(c);
            if (byte >= 0) {
                unsigned char ch = (unsigned char)byte;
                if (!buf_put(b, &ch, 1))
                    return false;
            } else {
                /* llama.cpp writes "[UNK_BYTE_0x<hex of the character>" + token + "]". */
                char tmp[64];
                size_t ul = pos - start;
                int w = snprintf(tmp, sizeof tmp, "[UNK_BYTE_0x");
                for (size_t k = 0; k < ul && w > 0 && (size_t)w + 3 < sizeof tmp; k++)
                    w += snprintf(tmp + w, sizeof tmp - (size_t)w, "%02x",
                                  (unsigned char)tok->text[start + k]);
                if (!buf_put(b, tmp, (size_t)w) || !buf_put(b, tok->text, tok->len) ||
                    !buf_put(b, "]", 1))
                    return false;
            }
        }
        return true;
    }
    if (tok->attr & QL_TOK_BYTE) {
        int v = byte_of_token(tok);
        if (v >= 0) {
            unsigned char ch = (unsigned char)v;
            return buf_put(b, &ch, 1);
        }
    }
    return true; /* unused and undefined tokens print as nothing */
}

static bool build_pieces(ql_tokenizer *t)
{
    buf b = {0};
    t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->piece_off);
    if (!t->piece_off)
        return false;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        t->piece_off[i] = b.n;
        if (!make_piece(t, i, &b)) {
            free(b.p);
            return false;
        }
    }
    t->piece_off[t->n_vocab] = b.n;
    if (!buf_put(&b, "", 1)) { /* never an empty allocation */
        free(b.p);
        return false;
    }
    t->pieces = b.p;
    return true;
}

static ql_status load_merges(ql_tokenizer *t, const ql_gguf *g, char **arena_pos, ql_error *err)
{
    const ql_gguf_array *arr = NULL;
    ql_status st = opt_array(g, KEY_MERGES, QL_GGUF_STRING, 0, &arr, err);
    if (st != QL_OK)
        return st;
    if (!arr)
        return ql_error_set(err, QL_ENOTFOUND,
                            "%s: key '%s' is missing (a gpt2 vocabulary needs its BPE merges)",
                            g->path, KEY_MERGES);
    /* Ranks go through a float in the merge heap: keep them exact. */
    if (arr->n > (1u << 24))
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "%s: key '%s' has %llu merges, at most %u "
                            "supported",
                            g->path, KEY_MERGES, (unsigned long long)arr->n, 1u << 24);
    const ql_gguf_str *strs = arr->data;
    t->merges = calloc(arr->n ? arr->n : 1, sizeof *t->merges);
    if (!t->merges || !strhash_init(&t->merge_index, arr->n))
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory for %llu merges", g->path,
                            (unsigned long long)arr->n);
    for (uint64_t i = 0; i < arr->n; i++) {
        /* "left right", split at the first space after the first byte. A line without
         * one can never match a pair of non-empty pieces; llama.cpp keeps it as an
         * empty pair, qlab skips it. */
        const char *s = strs[i].ptr;
        size_t len = (size_t)strs[i].len;
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        ql_merge *m = &t->merges[i];
        if (!sp)
            continue;
        memcpy(*arena_pos, s, len);
        (*arena_pos)[len] = '\0';
        m->left = *arena_pos;
        m->llen = (uint32_t)(sp - s);
        m->right = *arena_pos + m->llen + 1;
        m->rlen = (uint32_t)(len - m->llen - 1);
        *arena_pos += len + 1;
        /* The first line of a duplicated pair keeps its rank, as in llama.cpp. */
        const ql_strhash *h = &t->merge_index;
        for (size_t k = merge_hash(m->left, m->llen, m->right, m->rlen) & h->mask;;
             k = (k + 1) & h->mask) {
            uint32_t v = h->slots[k];
            if (v == 0) {
                h->slots[k] = (uint32_t)i + 1;
                break;
            }
            const ql_merge *o = &t->merges[v - 1];
            if (o->llen == m->llen && o->rlen == m->rlen &&
                memcmp(o->left, m->left, m->llen) == 0 && memcmp(o->right, m->right, m->rlen) == 0)
                break;
        }
    }
    return QL_OK;
}

/* The family from tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (BPE). */
static ql_status read_family(ql_tokenizer *t, const ql_gguf *g, ql_error *err)
{
    if (!ql_gguf_find_kv(g, KEY_MODEL))
        return ql_error_set(err, QL_ENOTFOUND,
                            "%s: key '%s' is missing (the file has no tokenizer)", t->path,
                            KEY_MODEL);
    const char *model = ql_gguf_get_str(g, KEY_MODEL, err);
    if (!model)
        return err ? err->status : QL_EFORMAT;
    if (strcmp(model, "llama") == 0)
        t->kind = QL_VOCAB_SPM;
    else if (strcmp(model, "gpt2") == 0)
        t->kind = QL_VOCAB_BPE;
    else
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "%s: %s '%s' is not supported (qlab reads 'llama' and 'gpt2')", t->path,
                            KEY_MODEL, model);
    return QL_OK;
}

/* The vocabulary's arrays as the file holds them. */
typedef struct {
    const ql_gguf_array *tokens, *scores, *types; /* scores, types: NULL when absent */
    const ql_gguf_array *merges;                  /* BPE only; NULL when absent */
} vocab_arrays;

/* Finds the arrays: the tokens (required, 1 to INT32_MAX - 1), scores and types
 * (optional, one per token) and, for BPE, the merges. */
static ql_status read_arrays(ql_tokenizer *t, const ql_gguf *g, vocab_arrays *v, ql_error *err)
{
    memset(v, 0, sizeof *v);
    ql_status st = opt_array(g, KEY_TOKENS, QL_GGUF_STRING, 0, &v->tokens, err);
    if (st != QL_OK)
        return st;
    if (!v->tokens)
        return ql_error_set(err, QL_ENOTFOUND, "%s: key '%s' is missing", t->path, KEY_TOKENS);
    const uint64_t n = v->tokens->n;
    if (n == 0 || n > (uint64_t)INT32_MAX - 1)
        return ql_error_set(err, QL_EFORMAT, "%s: key '%s' has %llu tokens", t->path, KEY_TOKENS,
                            (unsigned long long)n);
    t->n_vocab = (int32_t)n;
    if ((st = opt_array(g, KEY_SCORES, QL_GGUF_FLOAT32, n, &v->scores, err)) != QL_OK ||
        (st = opt_array(g, KEY_TYPES, QL_GGUF_INT32, n, &v->types, err)) != QL_OK)
        return st;
    if (t->kind == QL_VOCAB_BPE)
        st = opt_array(g, KEY_MERGES, QL_GGUF_STRING, 0, &v->merges, err);
    return st;
}

/* The token table, its index and one arena for token texts and merge lines, each
 * NUL-terminated. */
static ql_status alloc_tables(ql_tokenizer *t, const vocab_arrays *v, ql_error *err)
{
    size_t arena_size = 1;
    const ql_gguf_str *ts = v->tokens->data;
    for (uint64_t i = 0; i < v->tokens->n; i++)
        arena_size += (size_t)ts[i].len + 1;
    if (v->merges) {
        const ql_gguf_str *ms = v->merges->data;
        for (uint64_t i = 0; i < v->merges->n; i++)
            arena_size += (size_t)ms[i].len + 1;
    }
    t->arena = malloc(arena_size);
    t->tokens = calloc((size_t)t->n_vocab, sizeof *t->tokens);
    if (!t->arena || !t->tokens || !strhash_init(&t->token_index, (size_t)t->n_vocab))
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory for %d tokens", t->path, t->n_vocab);
    return QL_OK;
}

/* Indexes token i by its text; a repeated text would make ids ambiguous (llama.cpp
 * aborts). */
static ql_status index_token(ql_tokenizer *t, int32_t i, ql_error *err)
{
    const ql_token *tok = &t->tokens[i];
    const ql_strhash *h = &t->token_index;
    for (size_t k = fnv_bytes(FNV_OFFSET, tok->text, tok->len) & h->mask;; k = (k + 1) & h->mask) {
        const uint32_t v = h->slots[k];
        if (v == 0) {
            h->slots[k] = (uint32_t)i + 1;
            return QL_OK;
        }
        const ql_token *o = &t->tokens[v - 1];
        if (o->len == tok->len && memcmp(o->text, tok->text, tok->len) == 0)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: key '%s': token %d repeats the text of token %u ('%s')",
                                t->path, KEY_TOKENS, i, v - 1, tok->text);
    }
}

/* Every token: its text into the arena at *ap, score, attributes, index entry. */
static ql_status load_tokens(ql_tokenizer *t, const vocab_arrays *v, char **ap, ql_error *err)
{
    const ql_gguf_str *ts = v->tokens->data;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        ql_token *tok = &t->tokens[i];
        if (ts[i].len > UINT32_MAX)
            return ql_error_set(err, QL_EFORMAT, "%s: token %d is too long", t->path, i);
        memcpy(*ap, ts[i].ptr, (size_t)ts[i].len);
        (*ap)[ts[i].len] = '\0';
        tok->text = *ap;
        tok->len = (uint32_t)ts[i].len;
        *ap += ts[i].len + 1;
        tok->score = v->scores ? ((const float *)v->scores->data)[i] : 0.0f;
        tok->attr = v->types ? attr_of_type(((const int32_t *)v->types->data)[i]) : QL_TOK_NORMAL;
        ql_status st = index_token(t, i, err);
        if (st != QL_OK)
            return st;
    }
    return QL_OK;
}

/* llama.cpp's defaults of the family; BPE also reads its pre-tokenizer and merges
 * (merge lines go into the arena at *ap). */
static ql_status family_defaults(ql_tokenizer *t, const ql_gguf *g, char **ap, ql_error *err)
{
    if (t->kind == QL_VOCAB_SPM) {
        t->bos = 1;
        t->eos = 2;
        t->unk = 0;
        t->add_bos = true;
        t->add_eos = false;
        t->add_space_prefix = true;
        return QL_OK;
    }
    const char *pre = NULL;
    if (ql_gguf_find_kv(g, KEY_PRE)) {
        if (!(pre = ql_gguf_get_str(g, KEY_PRE, err)))
            return err ? err->status : QL_EFORMAT;
    } else {
        add_warning(t, "key 'tokenizer.ggml.pre' is missing: using the 'default' "
                       "pre-tokenizer (llama.cpp does the same and warns that the "
                       "tokenization may be wrong)");
    }
    ql_status st = ql_pretok_init(&t->pre, pre, err);
    if (st != QL_OK)
        return ql_error_prefix(err, "%s: ", t->path);
    if ((st = load_merges(t, g, ap, err)) != QL_OK)
        return st;
    /* llama.cpp's gpt2 defaults are BOS = EOS = 11 (a Falcon legacy). */
    t->bos = 11;
    t->eos = 11;
    t->unk = -1;
    t->add_bos = t->pre.add_bos;
    t->add_eos = false;
    t->add_space_prefix = false;
    return QL_OK;
}

/* The keys that override the defaults: special ids (a default beyond the
 * vocabulary is none) and the add_* flags, which need the token they add. */
static ql_status special_keys(ql_tokenizer *t, const ql_gguf *g, ql_error *err)
{
    if (t->bos >= t->n_vocab)
        t->bos = -1;
    if (t->eos >= t->n_vocab)
        t->eos = -1;
    if (t->unk >= t->n_vocab)
        t->unk = -1;
    ql_status st;
    if ((st = special_id(t, g, "tokenizer.ggml.bos_token_id", &t->bos, NULL, err)) != QL_OK ||
        (st = special_id(t, g, "tokenizer.ggml.eos_token_id", &t->eos, NULL, err)) != QL_OK ||
        (st = special_id(t, g, "tokenizer.ggml.unknown_token_id", &t->unk, NULL, err)) != QL_OK ||
        (st = opt_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err)) != QL_OK ||
        (st = opt_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err)) != QL_OK ||
        (st = opt_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err)) != QL_OK)
        return st;
    if (t->add_bos && t->bos < 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: tokenizer.ggml.add_bos_token is true but there is no BOS token",
                            t->path);
    if (t->add_eos && t->eos < 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: tokenizer.ggml.add_eos_token is true but there is no EOS token",
                            t->path);
    return QL_OK;
}

/* Per byte: its byte token (SPM: "<0xNN>", else the one-character token) and its
 * GPT-2 character. SPM also marks the ASCII characters no token of two or more
 * bytes contains (barriers for the merge search). */
static void byte_tables(ql_tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int32_t id = t->kind == QL_VOCAB_SPM ? ql_tok_find(t, hex, 6) : -1;
        if (id < 0 && t->kind == QL_VOCAB_SPM) {
            char one = (char)b;
            id = ql_tok_find(t, &one, 1);
        }
        t->byte_token[b] = id;
        char u[4];
        size_t ul = ql_utf8_encode(ql_gpt2_byte_to_cpt((uint8_t)b), u);
        memcpy(t->gpt2_bytes[b], u, ul);
        t->gpt2_len[b] = (uint8_t)ul;
    }
    if (t->kind != QL_VOCAB_SPM)
        return;
    bool seen[128] = {false};
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->tokens[i].len >= 2)
            for (uint32_t k = 0; k < t->tokens[i].len; k++)
                if ((unsigned char)t->tokens[i].text[k] < 128)
                    seen[(unsigned char)t->tokens[i].text[k]] = true;
    for (int c = 0; c < 128; c++)
        t->spm_barrier[c] = !seen[c];
}

/* The token attributes llama.cpp adjusts, then the tables derived from them. */
static ql_status derived_tables(ql_tokenizer *t, const ql_gguf *g, ql_error *err)
{
    ql_status st = detect_control(t, g, err);
    if (st != QL_OK)
        return st;
    phi3_strip_flags(t, g);
    if (!collect_specials(t))
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory building the tokenizer", t->path);
    byte_tables(t);
    if (!build_pieces(t))
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory building the tokenizer", t->path);
    return QL_OK;
}

ql_status ql_tokenizer_from_gguf(ql_tokenizer **out, const ql_gguf *g, ql_error *err)
{
    *out = NULL;
    ql_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", g->path);
    ql_status st = QL_OK;
    if (!(t->path = ql_strdup(g->path ? g->path : "(buffer)")))
        st = ql_error_set(err, QL_ENOMEM, "%s: out of memory", g->path);
    vocab_arrays v;
    if (st == QL_OK)
        st = read_family(t, g, err);
    if (st == QL_OK)
        st = read_arrays(t, g, &v, err);
    if (st == QL_OK)
        st = alloc_tables(t, &v, err);
    char *ap = t->arena; /* the arena's free part */
    if (st == QL_OK)
        st = load_tokens(t, &v, &ap, err);
    if (st == QL_OK)
        st = family_defaults(t, g, &ap, err);
    if (st == QL_OK)
        st = special_keys(t, g, err);
    if (st == QL_OK)
        st = derived_tables(t, g, err);
    if (st != QL_OK) {
        ql_tokenizer_free(t);
        return st;
    }
    *out = t;
    return QL_OK;
}

void ql_tokenizer_free(ql_tokenizer *t)
{
    if (!t)
        return;
    ql_pretok_deinit(&t->pre);
    free(t->merge_index.slots);
    free(t->merges);
    free(t->token_index.slots);
    free(t->tokens);
    free(t->arena);
    free(t->specials);
    free(t->pieces);
    free(t->piece_off);
    free(t->path);
    free(t);
}

/* ===========================================================================
 * Tokenizing */

/* A run of ordinary text (tok < 0) or one special token. */
typedef struct {
    int32_t tok;
    size_t off, len;
} fragment;

typedef struct {
    fragment *f;
    size_t n, cap;
} fraglist;

static bool frag_push(fraglist *l, int32_t tok, size_t off, size_t len)
{
    if (l->n == l->cap && !ql_grow((void **)&l->f, &l->cap, l->n + 1, sizeof *l->f))
        return false;
    l->f[l->n].tok = tok;
    l->f[l->n].off = off;
    l->f[l->n].len = len;
    l->n++;
    return true;
}

static bool is_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Splits the text at every occurrence of each partitioning token, longest tokens
 * first (llama.cpp's tokenizer_st_partition with parse_special = false). */
static bool partition(const ql_tokenizer *t, const char *text, size_t len, fraglist *cur)
{
    fraglist next = {0};
    if (!frag_push(cur, -1, 0, len))
        return false;
    for (int32_t k = 0; k < t->n_specials; k++) {
        const int32_t id = t->specials[k];
        const ql_token *sp = &t->tokens[id];
        next.n = 0;
        for (size_t i = 0; i < cur->n; i++) {
            const fragment f = cur->f[i];
            if (f.tok >= 0) {
                if (!frag_push(&next, f.tok, 0, 0))
                    goto oom;
                continue;
            }
            size_t base = f.off, rem = f.len;
            for (;;) {
                const char *m = memmem(text + base, rem, sp->text, sp->len);
                if (!m) {
                    if (rem > 0 && !frag_push(&next, -1, base, rem))
                        goto oom;
                    break;
                }
                size_t mpos = (size_t)(m - text);
                size_t llen = mpos - base;
                if (sp->attr & QL_TOK_LSTRIP)
                    while (llen > 0 && is_space(text[base + llen - 1]))
                        llen--;
                if ((llen > 0 && !frag_push(&next, -1, base, llen)) || !frag_push(&next, id, 0, 0))
                    goto oom;
                size_t roff = mpos + sp->len, rlen = base + rem - roff;
                if (sp->attr & QL_TOK_RSTRIP)
                    while (rlen > 0 && is_space(text[roff])) {
                        roff++;
                        rlen--;
                    }
                base = roff;
                rem = rlen;
            }
        }
        fraglist tmp = *cur;
        *cur = next;
        next = tmp;
    }
    free(next.f);
    return true;
oom:
    free(next.f);
    return false;
}

ql_status ql_tokenize(const ql_tokenizer *t, const char *text, size_t len, bool add_special,
                      int32_t **ids, int64_t *n_ids, ql_error *err)
{
    *ids = NULL;
    *n_ids = 0;
    if (!text && len > 0)
        return ql_error_set(err, QL_EINVAL, "tokenizer: NULL text of %zu bytes", len);
    ql_status st = QL_OK;
    ql_idvec out = {0};
    fraglist frags = {0};
    ql_tok_scratch s = {0};

    if (len > 0 && !partition(t, text, len, &frags))
        goto out_oom;
    if (add_special && t->add_bos && !ql_idvec_push(&out, t->bos))
        goto out_oom;
    /* SPM: a space is prefixed to the text at the start and after each special token. */
    bool prev_special = true;
    for (size_t i = 0; i < frags.n; i++) {
        const fragment *f = &frags.f[i];
        if (f->tok >= 0) {
            if (!ql_idvec_push(&out, f->tok))
                goto out_oom;
            prev_special = true;
            continue;
        }
        if (t->kind == QL_VOCAB_SPM)
            st = ql_spm_tokenize(t, text + f->off, f->len, t->add_space_prefix && prev_special, &s,
                                 &out, err);
        else
            st = ql_bpe_tokenize(t, text + f->off, f->len, &s, &out, err);
        if (st != QL_OK)
            goto out;
        prev_special = false;
    }
    if (add_special && t->add_eos && !ql_idvec_push(&out, t->eos))
        goto out_oom;
    *ids = out.ids;
    *n_ids = out.n;
    out.ids = NULL;
    goto out;

out_oom:
    st = ql_error_set(err, QL_ENOMEM, "tokenizer: out of memory for %zu bytes of text", len);
out:
    free(out.ids);
    free(frags.f);
    ql_tok_scratch_deinit(&s);
    return st;
}

/* ===========================================================================
 * Accessors */

ql_status ql_tokenizer_piece(const ql_tokenizer *t, int32_t id, const char **piece, size_t *len,
                             ql_error *err)
{
    if (id < 0 || id >= t->n_vocab) {
        *piece = "";
        *len = 0;
        return ql_error_set(err, QL_EINVAL, "%s: token id %d is outside the vocabulary (0..%d)",
                            t->path, id, t->n_vocab - 1);
    }
    *piece = t->pieces + t->piece_off[id];
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return QL_OK;
}

size_t ql_token_to_piece(const ql_tokenizer *t, int32_t id, char *out, size_t size)
{
    const char *p;
    size_t n;
    if (ql_tokenizer_piece(t, id, &p, &n, NULL) != QL_OK)
        n = 0;
    if (size > 0) {
        size_t c = n < size - 1 ? n : size - 1;
        memcpy(out, p, c);
        out[c] = '\0';
    }
    return n;
}

int32_t ql_tokenizer_n_vocab(const ql_tokenizer *t)
{
    return t->n_vocab;
}

int32_t ql_tokenizer_bos(const ql_tokenizer *t)
{
    return t->bos;
}

int32_t ql_tokenizer_eos(const ql_tokenizer *t)
{
    return t->eos;
}

bool ql_tokenizer_adds_bos(const ql_tokenizer *t)
{
    return t->add_bos;
}

bool ql_tokenizer_adds_eos(const ql_tokenizer *t)
{
    return t->add_eos;
}

const char *ql_tokenizer_model(const ql_tokenizer *t)
{
    return t->kind == QL_VOCAB_SPM ? "llama" : "gpt2";
}

const char *ql_tokenizer_pre(const ql_tokenizer *t)
{
    return t->kind == QL_VOCAB_BPE ? t->pre.name : NULL;
}

const char *ql_tokenizer_warning(const ql_tokenizer *t)
{
    return t->warning[0] ? t->warning : NULL;
}
