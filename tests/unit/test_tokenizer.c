/* Tokenizers: hand-checked GPT-2 byte-level BPE cases, the SentencePiece rules
 * (scores, leading space, byte fallback, unknown token, user-defined tokens, BOS/EOS)
 * on tiny vocabularies written here, byte-level BPE merge ranks, and every error path
 * of loading and of ql_token_to_piece. The comparisons with llama.cpp's own ids are
 * in tests/golden/test_tokenizer_golden.c. */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "qltest.h"

#define SP "\xE2\x96\x81" /* U+2581, SentencePiece's space */

/* ---------------------------------------------------------------------------
 * Helpers */

static ql_tokenizer *load_path(const char *path)
{
    ql_error err;
    ql_gguf *g = NULL;
    ql_tokenizer *t = NULL;
    ql_status st = ql_gguf_open(&g, path, &err);
    CHECK_OK(st, &err);
    if (st == QL_OK) {
        st = ql_tokenizer_from_gguf(&t, g, &err);
        CHECK_OK(st, &err);
    }
    ql_gguf_close(g);
    return t;
}

/* Tokenizes and returns "id id id" and "piece|piece|piece" (pieces escaped minimally:
 * only for reading failures; expectations below avoid '|'). */
static void run(const ql_tokenizer *t, const char *text, bool add_special, char *ids_out,
                char *pieces_out, size_t size)
{
    ql_error err;
    int32_t *ids = NULL;
    int64_t n = 0;
    ql_status st = ql_tokenize(t, text, strlen(text), add_special, &ids, &n, &err);
    CHECK_OK(st, &err);
    size_t io = 0, po = 0;
    ids_out[0] = pieces_out[0] = '\0';
    for (int64_t i = 0; i < n; i++) {
        io += (size_t)snprintf(ids_out + io, size - io, i ? " %d" : "%d", ids[i]);
        char piece[256];
        size_t pl = ql_token_to_piece(t, ids[i], piece, sizeof piece);
        if (i && po + 1 < size)
            pieces_out[po++] = '|';
        if (po + pl < size) {
            memcpy(pieces_out + po, piece, pl);
            po += pl;
        }
        pieces_out[po] = '\0';
    }
    free(ids);
}

static void expect(const ql_tokenizer *t, const char *text, bool add_special, const char *want_ids,
                   const char *want_pieces)
{
    char ids[2048], pieces[2048];
    run(t, text, add_special, ids, pieces, sizeof ids);
    if (want_ids)
        CHECK_MSG(strcmp(ids, want_ids) == 0, "'%s': ids '%s', expected '%s'", text, ids, want_ids);
    if (want_pieces)
        CHECK_MSG(strcmp(pieces, want_pieces) == 0, "'%s': pieces '%s', expected '%s'", text,
                  pieces, want_pieces);
}

/* A vocabulary-only GGUF under construction. */
static ql_gguf_writer *vocab_begin(const char *model, const char *const *tokens, int n,
                                   const float *scores, const int32_t *types)
{
    ql_error err;
    ql_gguf_writer *w = NULL;
    CHECK(ql_gguf_writer_alloc(&w, &err) == QL_OK);
    ql_gguf_writer_set_str(w, "general.architecture", "llama", &err);
    if (model)
        ql_gguf_writer_set_str(w, "tokenizer.ggml.model", model, &err);
    if (tokens)
        ql_gguf_writer_set_str_arr(w, "tokenizer.ggml.tokens", tokens, (uint64_t)n, &err);
    if (scores)
        ql_gguf_writer_set_arr(w, "tokenizer.ggml.scores", QL_GGUF_FLOAT32, scores, (uint64_t)n,
                               &err);
    if (types)
        ql_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", QL_GGUF_INT32, types, (uint64_t)n,
                               &err);
    return w;
}

/* Writes the file and builds its tokenizer; returns the status (t NULL on error). */
static ql_status vocab_load(ql_gguf_writer *w, const char *name, ql_tokenizer **t, ql_error *err)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.gguf", qlt_tmpdir(), name);
    ql_status st = ql_gguf_writer_begin(w, path, err);
    if (st == QL_OK)
        st = ql_gguf_writer_finish(w, err);
    ql_gguf_writer_free(w);
    CHECK_OK(st, err);
    *t = NULL;
    if (st != QL_OK)
        return st;
    ql_gguf *g = NULL;
    st = ql_gguf_open(&g, path, err);
    CHECK_OK(st, err);
    if (st == QL_OK)
        st = ql_tokenizer_from_gguf(t, g, err);
    ql_gguf_close(g);
    return st;
}

static void expect_load_error(ql_gguf_writer *w, const char *name, ql_status want,
                              const char *msg_part)
{
    ql_error err;
    ql_error_clear(&err);
    ql_tokenizer *t = NULL;
    ql_status st = vocab_load(w, name, &t, &err);
    CHECK_MSG(st == want, "%s: status %d (%s), expected %d", name, (int)st, err.msg, (int)want);
    CHECK(t == NULL);
    CHECK_MSG(strstr(err.msg, msg_part) != NULL, "%s: message '%s' lacks '%s'", name, err.msg,
              msg_part);
    CHECK_MSG(strstr(err.msg, name) != NULL, "%s: message '%s' does not name the file", name,
              err.msg);
    ql_tokenizer_free(t);
}

/* ---------------------------------------------------------------------------
 * GPT-2 byte-level BPE, checked by hand: the word boundaries follow from the GPT-2
 * pattern, and the ids are GPT-2's well-known ones. */

static void test_gpt2(void)
{
    ql_tokenizer *t = load_path(qlt_shared("golden/tokens/ggml-vocab-gpt-2.gguf"));
    if (!t)
        return;
    CHECK_EQ_INT(ql_tokenizer_n_vocab(t), 50257);
    CHECK(!ql_tokenizer_adds_bos(t)); /* gpt2 vocabularies add no BOS by default */
    CHECK(strcmp(ql_tokenizer_model(t), "gpt2") == 0);
    CHECK(strcmp(ql_tokenizer_pre(t), "gpt-2") == 0);
    CHECK(ql_tokenizer_warning(t) == NULL);

    expect(t, "Hello world", true, "15496 995", "Hello| world");
    /* Contractions are words of their own; the space goes with the next word. */
    expect(t, "I don't know", false, "40 836 470 760", "I| don|'t| know");
    expect(t, "we're here", false, "732 821 994", "we|'re| here");
    /* GPT-2's contractions are lower case only: "'LL" is a quote then letters. */
    expect(t, "I'LL", false, "40 6 3069", "I|'|LL");
    /* A typographic apostrophe is punctuation, split at the byte level (E2 80 99). */
    expect(t, "don\xE2\x80\x99t", false, "9099 447 247 83", "don|\xE2\x80|\x99|t");
    /* Whitespace runs: all but the last space form a word; GPT-2 has no multi-space
     * tokens, so each space is " " (220). */
    expect(t, "a    b", false, "64 220 220 220 275", "a| | | | b");
    expect(t, "  spaces  ", false, "220 9029 220 220", " | spaces| | ");
    expect(t, "hello\n\n\nworld", false, "31373 628 198 6894", "hello|\n\n|\n|world");
    expect(t, "x\ty", false, "87 197 88", "x|\t|y");
    /* Digits: " ?\p{N}+" keeps a digit run whole for BPE, '.' and ' ' cut it. */
    expect(t, "12345 67", false, "10163 2231 8275", "123|45| 67");
    expect(t, "3.14159", false, "18 13 1415 19707", "3|.|14|159");
    /* Multi-byte UTF-8: letters stay in their word and BPE may cut inside a character
     * (pieces are bytes); 4-byte letters (U+1D518..) likewise. */
    expect(t, "caf\xC3\xA9", false, "66 1878 2634", "c|af|\xC3\xA9");
    expect(t, "Z\xC3\xBCrich", false, "57 9116 7527", "Z|\xC3\xBC|rich");
    expect(t, "\xF0\x9D\x94\x98\xF0\x9D\x94\xAB", false, "47728 242 246 47728 242 104",
           "\xF0\x9D|\x94|\x98|\xF0\x9D|\x94|\xAB");
    expect(t, "ok...!!", false, "482 986 3228", "ok|...|!!");
    /* Invalid UTF-8 becomes U+FFFD (EF BF BD), one per bad byte. */
    expect(t, "\xFF", false, NULL, "\xEF\xBF\xBD");
    /* Control-token text is ordinary text (parse_special = false). */
    char ids[1024], pieces[1024];
    run(t, "<|endoftext|>", false, ids, pieces, sizeof ids);
    CHECK(strstr(ids, "50256") == NULL);
    CHECK_MSG(strcmp(pieces, "<|endoftext|>") != 0 || strchr(ids, ' ') != NULL, "%s", ids);
    ql_tokenizer_free(t);
}

/* ---------------------------------------------------------------------------
 * SentencePiece on the real stories260K model */

static void test_stories(void)
{
    ql_tokenizer *t = load_path(qlt_shared("models/stories260K.gguf"));
    if (!t)
        return;
    CHECK(ql_tokenizer_adds_bos(t));
    CHECK(!ql_tokenizer_adds_eos(t));
    CHECK_EQ_INT(ql_tokenizer_bos(t), 1);
    CHECK_EQ_INT(ql_tokenizer_eos(t), 2);
    CHECK(ql_tokenizer_pre(t) == NULL);
    /* BOS first, and the leading-space rule turns "Hello" into "▁Hello". */
    expect(t, "Hello", true, "1 346 306 414", "<s>| He|ll|o");
    expect(t, "Hello", false, "346 306 414", " He|ll|o");
    expect(t, "", true, "1", "<s>");
    expect(t, "", false, "", "");
    /* Byte fallback: 日 (E6 97 A5) has no token; byte tokens <0x00>.. start at id 3. */
    expect(t, "\xE6\x97\xA5", false, "410 233 154 168", " |\xE6|\x97|\xA5");
    /* Control-token text is ordinary text. */
    char ids[256], pieces[256];
    run(t, "</s>", false, ids, pieces, sizeof ids);
    CHECK(strcmp(ids, "2") != 0);

    /* Pieces and their error path. */
    char buf[16];
    CHECK_EQ_INT(ql_token_to_piece(t, 1, buf, sizeof buf), 3);
    CHECK(strcmp(buf, "<s>") == 0);
    CHECK_EQ_INT(ql_token_to_piece(t, 1, buf, 2), 3); /* truncated, like snprintf */
    CHECK(strcmp(buf, "<") == 0);
    CHECK_EQ_INT(ql_token_to_piece(t, 3 + 0x41, buf, sizeof buf), 1); /* <0x41> -> "A" */
    CHECK(strcmp(buf, "A") == 0);
    CHECK_EQ_INT(ql_token_to_piece(t, 512, buf, sizeof buf), 0);
    CHECK(buf[0] == '\0');
    CHECK_EQ_INT(ql_token_to_piece(t, -1, buf, sizeof buf), 0);
    ql_error err;
    const char *p;
    size_t pl;
    CHECK(ql_tokenizer_piece(t, 512, &p, &pl, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "512") && strstr(err.msg, "0..511"));
    CHECK(ql_tokenizer_piece(t, -5, &p, &pl, &err) == QL_EINVAL);
    CHECK(ql_tokenizer_piece(t, 511, &p, &pl, &err) == QL_OK);

    int32_t *out = NULL;
    int64_t n = 0;
    CHECK(ql_tokenize(t, NULL, 3, true, &out, &n, &err) == QL_EINVAL);
    CHECK(out == NULL && n == 0);
    ql_tokenizer_free(t);
}

/* ---------------------------------------------------------------------------
 * SentencePiece rules on a tiny vocabulary: the highest-scoring pair merges first,
 * ties go left, characters without token or byte fallback become <unk>. */

static const char *const SPM_TOKENS[] = {"<unk>", "<s>", "</s>", SP, "a", "b", SP "a", "ab", "<x>"};
static const int32_t SPM_TYPES[] = {2, 3, 3, 1, 1, 1, 1, 1, 4};
#define SPM_N 9

static ql_tokenizer *spm_vocab(const char *name, float score_ab, int extra)
{
    float scores[SPM_N] = {0, 0, 0, -5, -5, -5, -1.0f, score_ab, 0};
    ql_gguf_writer *w = vocab_begin("llama", SPM_TOKENS, SPM_N, scores, SPM_TYPES);
    ql_error err;
    if (extra == 1)
        ql_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", false, &err);
    if (extra == 2)
        ql_gguf_writer_set_str(w, "general.name", "Phi3 mini", &err);
    if (extra == 3)
        ql_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", true, &err);
    ql_tokenizer *t = NULL;
    CHECK(vocab_load(w, name, &t, &err) == QL_OK);
    return t;
}

static void test_spm_rules(void)
{
    /* "abc" -> "▁abc": "▁a" (-1) beats "ab" (-2); "▁ab" is no token; 'c' -> <unk>. */
    ql_tokenizer *t = spm_vocab("spm1", -2.0f, 0);
    if (t) {
        expect(t, "abc", false, "6 5 0", NULL);
        expect(t, "abc", true, "1 6 5 0", NULL);
        /* A user-defined token splits the text; the text after it gets a space too. */
        expect(t, "a<x>b", false, "6 8 3 5", NULL);
        expect(t, "a<x>  b", false, "6 8 3 3 3 5", NULL);
        /* Control-token text is not matched. */
        char ids[256], pieces[256];
        run(t, "</s>", false, ids, pieces, sizeof ids);
        CHECK(strstr(ids, "2") == NULL);
        ql_tokenizer_free(t);
    }
    /* "ab" (-0.5) now beats "▁a": "▁|ab|c". */
    t = spm_vocab("spm2", -0.5f, 0);
    if (t) {
        expect(t, "abc", false, "3 7 0", NULL);
        ql_tokenizer_free(t);
    }
    /* Equal scores: the leftmost pair merges first. */
    t = spm_vocab("spm3", -1.0f, 0);
    if (t) {
        expect(t, "abc", false, "6 5 0", NULL);
        ql_tokenizer_free(t);
    }
    /* tokenizer.ggml.add_space_prefix = false: no "▁" in front. */
    t = spm_vocab("spm4", -2.0f, 1);
    if (t) {
        expect(t, "abc", false, "7 0", NULL);
        expect(t, "a b", false, "4 3 5", NULL);
        ql_tokenizer_free(t);
    }
    /* A model named Phi-3: whitespace after a special token is dropped. */
    t = spm_vocab("spm5", -2.0f, 2);
    if (t) {
        expect(t, "a<x>  b", false, "6 8 3 5", NULL);
        ql_tokenizer_free(t);
    }
    /* tokenizer.ggml.add_eos_token = true: EOS at the end. */
    t = spm_vocab("spm6", -2.0f, 3);
    if (t) {
        CHECK(ql_tokenizer_adds_eos(t));
        expect(t, "b", true, "1 3 5 2", NULL);
        expect(t, "b", false, "3 5", NULL);
        ql_tokenizer_free(t);
    }
}

/* ---------------------------------------------------------------------------
 * Byte-level BPE merges on a tiny vocabulary: lowest rank first; a piece that is no
 * token falls apart into its one-byte tokens, and bytes without one are dropped
 * (llama.cpp does the same). */

static const char *const BPE_TOKENS[] = {"a", "b", "c", "ab", "bc", "abc", "\xC4\xA0"}; /* Ġ */
#define BPE_N 7

static ql_tokenizer *bpe_vocab(const char *name, const char *pre, const char *const *merges,
                               int n_merges)
{
    ql_gguf_writer *w = vocab_begin("gpt2", BPE_TOKENS, BPE_N, NULL, NULL);
    ql_error err;
    if (pre)
        ql_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre, &err);
    if (pre && strcmp(pre, "llama-bpe") == 0) /* it adds BOS; the default id 11 is no token */
        ql_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 6, &err);
    if (merges)
        ql_gguf_writer_set_str_arr(w, "tokenizer.ggml.merges", merges, (uint64_t)n_merges, &err);
    ql_tokenizer *t = NULL;
    ql_status st = vocab_load(w, name, &t, &err);
    CHECK_OK(st, &err);
    return t;
}

static void test_bpe_rules(void)
{
    static const char *const m1[] = {"a b", "b c", "ab c"};
    ql_tokenizer *t = bpe_vocab("bpe1", "gpt-2", m1, 3);
    if (t) {
        expect(t, "abc", false, "5", NULL);      /* a b -> ab, then ab c -> abc */
        expect(t, "abd", false, "3", NULL);      /* 'd' has no token: dropped */
        expect(t, "ab c", false, "3 6 2", NULL); /* " c": no "Ġ c" merge */
        ql_tokenizer_free(t);
    }
    static const char *const m2[] = {"b c", "a b"};
    t = bpe_vocab("bpe2", "gpt-2", m2, 2);
    if (t) {
        expect(t, "abc", false, "0 4", NULL); /* b c (rank 0) first, then no "a bc" */
        ql_tokenizer_free(t);
    }
    /* Llama 3 pre-tokenizers take a word that is a token as it is, merges or not. */
    static const char *const m3[] = {"a b"};
    t = bpe_vocab("bpe3", "llama-bpe", m3, 1);
    if (t) {
        CHECK(ql_tokenizer_adds_bos(t) == true); /* the llama-bpe default */
        expect(t, "abc", false, "5", NULL);
        expect(t, "abc", true, "6 5", NULL);
        ql_tokenizer_free(t);
    }
    t = bpe_vocab("bpe4", "gpt-2", m3, 1);
    if (t) {
        expect(t, "abc", false, "3 2", NULL);
        ql_tokenizer_free(t);
    }
    /* No tokenizer.ggml.pre: the default pre-tokenizer and a warning. */
    t = bpe_vocab("bpe5", NULL, m1, 3);
    if (t) {
        CHECK(strcmp(ql_tokenizer_pre(t), "default") == 0);
        CHECK(ql_tokenizer_warning(t) && strstr(ql_tokenizer_warning(t), "tokenizer.ggml.pre"));
        expect(t, "abc", false, "5", NULL);
        ql_tokenizer_free(t);
    }
}

/* ---------------------------------------------------------------------------
 * Loading errors: each names the file and the key. */

static void test_errors(void)
{
    static const char *const toks[] = {"a", "b"};
    static const int32_t itoks[] = {1, 2};
    static const float short_scores[] = {0.0f};
    static const char *const merges[] = {"a b"};
    ql_error err;

    /* A GGUF without tokenizer keys. */
    expect_load_error(vocab_begin(NULL, NULL, 0, NULL, NULL), "notok", QL_ENOTFOUND,
                      "tokenizer.ggml.model");
    /* A gpt2 vocabulary without merges. */
    ql_gguf_writer *w = vocab_begin("gpt2", toks, 2, NULL, NULL);
    ql_gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2", &err);
    expect_load_error(w, "nomerges", QL_ENOTFOUND, "tokenizer.ggml.merges");
    /* An unknown pre-tokenizer. */
    w = vocab_begin("gpt2", toks, 2, NULL, NULL);
    ql_gguf_writer_set_str(w, "tokenizer.ggml.pre", "frobnicate", &err);
    ql_gguf_writer_set_str_arr(w, "tokenizer.ggml.merges", merges, 1, &err);
    expect_load_error(w, "badpre", QL_EUNSUPPORTED, "'frobnicate'");
    /* Tokenizer families qlab does not implement. */
    expect_load_error(vocab_begin("bert", toks, 2, NULL, NULL), "bert", QL_EUNSUPPORTED, "'bert'");
    /* No token list; a token list of the wrong type. */
    expect_load_error(vocab_begin("llama", NULL, 0, NULL, NULL), "notokens", QL_ENOTFOUND,
                      "tokenizer.ggml.tokens");
    w = vocab_begin("llama", NULL, 0, NULL, NULL);
    ql_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", QL_GGUF_INT32, itoks, 2, &err);
    expect_load_error(w, "inttokens", QL_EFORMAT, "tokenizer.ggml.tokens");
    /* Fewer scores than tokens. */
    w = vocab_begin("llama", toks, 2, NULL, NULL);
    ql_gguf_writer_set_arr(w, "tokenizer.ggml.scores", QL_GGUF_FLOAT32, short_scores, 1, &err);
    expect_load_error(w, "shortscores", QL_EFORMAT, "tokenizer.ggml.scores");
    /* The same text twice. */
    static const char *const dup[] = {"<unk>", "<s>", "</s>", "x", "x"};
    expect_load_error(vocab_begin("llama", dup, 5, NULL, NULL), "duptok", QL_EFORMAT, "repeats");
    /* Llama 3 asks for BOS, but gpt2's default BOS id 11 is outside this vocabulary. */
    w = vocab_begin("gpt2", toks, 2, NULL, NULL);
    ql_gguf_writer_set_str(w, "tokenizer.ggml.pre", "llama-bpe", &err);
    ql_gguf_writer_set_str_arr(w, "tokenizer.ggml.merges", merges, 1, &err);
    expect_load_error(w, "nobos3", QL_EFORMAT, "add_bos_token");
    /* SPM asks for BOS, but its default id 1 does not exist in a one-token vocabulary. */
    static const char *const one[] = {"<unk>"};
    expect_load_error(vocab_begin("llama", one, 1, NULL, NULL), "nobos", QL_EFORMAT,
                      "add_bos_token");
    /* A special-token id outside the vocabulary is ignored with a warning. */
    static const char *const three[] = {"<unk>", "<s>", "</s>"};
    w = vocab_begin("llama", three, 3, NULL, NULL);
    ql_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 99, &err);
    ql_tokenizer *t = NULL;
    CHECK(vocab_load(w, "bigeos", &t, &err) == QL_OK);
    if (t) {
        CHECK_EQ_INT(ql_tokenizer_eos(t), 2);
        CHECK(ql_tokenizer_warning(t) && strstr(ql_tokenizer_warning(t), "eos_token_id"));
        ql_tokenizer_free(t);
    }
}

int main(void)
{
    test_gpt2();
    test_stories();
    test_spm_rules();
    test_bpe_rules();
    test_errors();
    return qlt_done();
}
