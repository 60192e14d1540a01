/* qlab: tokenizer internals shared by tokenizer.c (loading, special tokens, pieces),
 * tokenizer_spm.c, tokenizer_bpe.c and tokenizer_pre.c. Not a public header. */
#ifndef QL_TOKENIZER_IMPL_H
#define QL_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/regex.h"
#include "model/tokenizer.h"

/* Token attributes, as llama.cpp derives them from tokenizer.ggml.token_type
 * (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte) plus the
 * strip flags it sets by model name. */
enum {
    QL_TOK_UNDEFINED = 0,
    QL_TOK_UNKNOWN = 1u << 0,
    QL_TOK_UNUSED = 1u << 1,
    QL_TOK_NORMAL = 1u << 2,
    QL_TOK_CONTROL = 1u << 3,
    QL_TOK_USER_DEFINED = 1u << 4,
    QL_TOK_BYTE = 1u << 5,
    QL_TOK_LSTRIP = 1u << 7, /* drop whitespace before the token when partitioning */
    QL_TOK_RSTRIP = 1u << 8, /* drop whitespace after it */
};

typedef enum { QL_VOCAB_SPM, QL_VOCAB_BPE } ql_vocab_kind;

typedef struct {
    const char *text; /* into the tokenizer's arena; not NUL-terminated in general */
    uint32_t len;
    uint32_t attr;
    float score;
} ql_token;

/* Open-addressing hash set over byte strings that live elsewhere; slots hold index+1. */
typedef struct {
    uint32_t *slots;
    size_t mask; /* capacity - 1 (capacity is a power of two) */
} ql_strhash;

/* One BPE merge: left and right halves of a line of tokenizer.ggml.merges. */
typedef struct {
    const char *left, *right;
    uint32_t llen, rlen;
} ql_merge;

/* ---------------------------------------------------------------------------
 * Pre-tokenizer (byte-level BPE): a list of splitting stages. */

typedef enum {
    QL_STAGE_GPT2,   /* llama.cpp's hand-written splitter for the GPT-2 pattern */
    QL_STAGE_LLAMA3, /* ... and for the Llama 3 pattern */
    QL_STAGE_REGEX,  /* any other pattern, through PCRE2 (regex.c) */
} ql_stage_kind;

#define QL_PRETOK_MAX_STAGES 8

typedef struct {
    char name[64]; /* tokenizer.ggml.pre as resolved ("default" when the key is absent) */
    int n_stages;
    ql_stage_kind kind[QL_PRETOK_MAX_STAGES];
    ql_regex *re[QL_PRETOK_MAX_STAGES];
    bool ignore_merges; /* a word that is itself a token skips the merges (Llama 3) */
    bool add_bos;       /* llama.cpp's default for tokenizer.ggml.add_bos_token */
} ql_pretok;

/* Resolves a tokenizer.ggml.pre name (NULL = absent) into stages. Unknown names are an
 * error (QL_EUNSUPPORTED, listing the names qlab knows). */
ql_status ql_pretok_init(ql_pretok *p, const char *name, ql_error *err);
/* The same with every pattern run by PCRE2, even those llama.cpp splits by hand (for
 * testing the hand-written splitters against the patterns they implement). */
ql_status ql_pretok_init_regex_only(ql_pretok *p, const char *name, ql_error *err);
void ql_pretok_deinit(ql_pretok *p);

/* Writes the space-separated list of the pre-tokenizer names qlab supports. */
void ql_pretok_names(char *out, size_t size);

/* One symbol of the merge loops: a run of bytes of the working text, linked to its
 * neighbours (llama.cpp's llm_symbol). A symbol merged into its left neighbour has n = 0. */
typedef struct {
    int32_t prev, next;
    uint32_t n;
    size_t off;
} ql_sym;

/* The binary heap both merge loops use: the best entry has the smallest prio, ties go
 * to the smallest left index (llama.cpp's comparators, with SPM's prio = -score). */
typedef struct {
    float prio;
    int32_t left, right;
    uint32_t size; /* byte length of left + right when pushed; a mismatch marks it stale */
} ql_bigram;

typedef struct {
    ql_bigram *a;
    size_t n, cap;
} ql_bigram_heap;

bool ql_bigram_push(ql_bigram_heap *h, ql_bigram b);
ql_bigram ql_bigram_pop(ql_bigram_heap *h); /* requires h->n > 0 */

/* Per-call scratch buffers (grown on demand, freed with _deinit). */
typedef struct {
    /* BPE pre-tokenizer */
    uint32_t *cpts;  /* code points of the fragment */
    uint16_t *flags; /* their ql_unicode_flags */
    uint32_t *sym;   /* collapsed or widened symbols for a regex stage */
    size_t cap_cpts;
    size_t *seg, *seg2; /* segment lengths (in code points) before/after a stage */
    size_t cap_seg, cap_seg2;
    size_t n_seg;
    ql_regex_matcher *matcher; /* created by the first regex stage */
    /* merge loops */
    char *text; /* working text: SPM's escaped fragment or BPE's byte-encoded word */
    size_t cap_text;
    ql_sym *syms;
    size_t cap_syms;
    ql_bigram_heap heap;
} ql_tok_scratch;

void ql_tok_scratch_deinit(ql_tok_scratch *s);
/* Make room for n bytes of working text / n symbols; false when out of memory. */
bool ql_tok_scratch_text(ql_tok_scratch *s, size_t n);
bool ql_tok_scratch_syms(ql_tok_scratch *s, size_t n);

/* Queues the pair (left, right) of s->syms on s->heap when the two may merge
 * (nothing for a negative index: no neighbour); false when out of memory. */
typedef bool (*ql_tok_pair_fn)(const ql_tokenizer *t, ql_tok_scratch *s, int32_t left,
                               int32_t right);

/* The merge loop of both tokenizers (llama.cpp's bigram queue): s->text[off, off + n)
 * is cut into one symbol per UTF-8 character (s->syms must have room for n), then the
 * best queued pair is merged and its new neighbour pairs queued until none is left;
 * entries made stale by earlier merges are recognised by their length and skipped.
 * The pieces are the list from s->syms[0] along next. False when out of memory. */
bool ql_tok_merge(const ql_tokenizer *t, ql_tok_scratch *s, size_t off, size_t n,
                  ql_tok_pair_fn try_pair);

/* Splits text[0, len) into words; on return s->seg[0..s->n_seg) are word lengths in
 * code points of s->cpts. */
ql_status ql_pretok_split(const ql_pretok *p, const char *text, size_t len, ql_tok_scratch *s,
                          ql_error *err);

/* ---------------------------------------------------------------------------
 * The tokenizer */

struct ql_tokenizer {
    ql_vocab_kind kind;
    int32_t n_vocab;
    ql_token *tokens;
    char *arena; /* token texts (each NUL-terminated) */
    ql_strhash token_index;

    int32_t bos, eos, unk; /* -1 when absent */
    bool add_bos, add_eos;
    bool add_space_prefix; /* SPM: prefix a space to text at the start and after a special token */

    /* Tokens that split the text before tokenizing (user-defined ones; llama.cpp
     * leaves control and unknown tokens alone when parse_special is false), longest
     * first. */
    int32_t *specials;
    int32_t n_specials;

    /* SPM: token of each byte for byte fallback (<0xXX>, else the one-byte token), -1. */
    int32_t byte_token[256];
    /* SPM: ASCII characters that occur in no token longer than one byte. */
    bool spm_barrier[128];

    /* BPE */
    ql_pretok pre;
    ql_merge *merges;
    ql_strhash merge_index;
    char gpt2_bytes[256][2]; /* UTF-8 of the GPT-2 code point of each byte */
    uint8_t gpt2_len[256];

    /* token_to_piece results for every id (llama.cpp's cache, special = true) */
    char *pieces;
    size_t *piece_off; /* n_vocab + 1 offsets into pieces */

    char *path;        /* file the tokenizer came from (for messages) */
    char warning[512]; /* non-fatal load remark, "" when none */
};

/* Id of a byte string in the vocabulary, or -1. */
int32_t ql_tok_find(const ql_tokenizer *t, const char *s, size_t len);

/* Rank of the merge (left, right), or -1. */
int32_t ql_tok_merge_rank(const ql_tokenizer *t, const char *l, size_t llen, const char *r,
                          size_t rlen);

/* Growable id output of a tokenize call. */
typedef struct {
    int32_t *ids;
    int64_t n, cap;
} ql_idvec;

bool ql_idvec_push(ql_idvec *v, int32_t id);

/* Tokenizes one fragment of ordinary text (no special tokens in it) and appends ids.
 * prefix_space: SPM only, prepend a space first. */
ql_status ql_spm_tokenize(const ql_tokenizer *t, const char *text, size_t len, bool prefix_space,
                          ql_tok_scratch *s, ql_idvec *out, ql_error *err);
ql_status ql_bpe_tokenize(const ql_tokenizer *t, const char *text, size_t len, ql_tok_scratch *s,
                          ql_idvec *out, ql_error *err);

#endif
