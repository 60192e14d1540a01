/* qlab: tokenizers read from GGUF metadata (tokenizer.ggml.*).
 *
 * Two families, as llama.cpp implements them:
 * - "llama": SentencePiece-style BPE over scores, with byte-fallback tokens
 *   <0xNN> and the leading-space rule (tokenizer.ggml.add_space_prefix);
 * - "gpt2": byte-level BPE with merges and the pre-tokenizer named by
 *   tokenizer.ggml.pre (llama-bpe, qwen2, gpt2, smollm, starcoder, deepseek-coder, ...).
 * Tokenizing produces exactly the ids llama.cpp's tokenizer (b4747) gives for the same
 * text with parse_special = false (special-token text is ordinary text; user-defined
 * tokens are still matched literally first, as llama.cpp does).
 *
 * Decisions where llama.cpp is silent or fails:
 * - tokenizer.ggml.pre absent: the "default" pre-tokenizer, with a warning
 *   (ql_tokenizer_warning), as llama.cpp does. An unknown name is an error
 *   (QL_EUNSUPPORTED); llama.cpp refuses to load such a model too.
 * - SPM byte fallback when the vocabulary has neither <0xNN> nor a one-byte token:
 *   the unknown token (llama.cpp throws); an error if there is none.
 * Unicode categories come from libutf8proc (see unicode.h).
 *
 * Thread safety: a tokenizer is immutable after ql_tokenizer_from_gguf; any number of
 * threads may tokenize with it at once. */
#ifndef QL_TOKENIZER_H
#define QL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/gguf.h"

typedef struct ql_tokenizer ql_tokenizer;

/* Builds the tokenizer of a GGUF file (model or vocab-only). Errors name the file
 * and the key (e.g. a missing tokenizer.ggml.merges for a gpt2 vocab). The tokenizer
 * copies what it needs: g may be closed afterwards. */
ql_status ql_tokenizer_from_gguf(ql_tokenizer **out, const ql_gguf *g, ql_error *err);
void ql_tokenizer_free(ql_tokenizer *t);

/* Tokenizes len bytes of text (any bytes; invalid UTF-8 is handled as llama.cpp does).
 * add_special: add BOS in front when the vocabulary asks for it
 * (tokenizer.ggml.add_bos_token, default true for "llama", false for "gpt2" except
 * Llama 3), and EOS at the end when it asks for that (add_eos_token, default false);
 * this is llama.cpp's add_special. *ids is malloc'd (caller frees; NULL when
 * *n_ids == 0), *n_ids its length. */
ql_status ql_tokenize(const ql_tokenizer *t, const char *text, size_t len, bool add_special,
                      int32_t **ids, int64_t *n_ids, ql_error *err);

/* Text of one token as llama.cpp's token_to_piece(special = true) gives it: byte
 * tokens decoded, the SentencePiece space marker turned into a space, GPT-2 byte
 * characters turned back into bytes, control and user-defined tokens as written.
 * Works like snprintf: returns the piece's length n, writes min(n, size - 1) bytes
 * and a terminating NUL when size > 0 (a piece may itself contain NUL bytes). An id
 * outside 0..n_vocab-1 gives the empty piece (use ql_tokenizer_piece to detect it). */
size_t ql_token_to_piece(const ql_tokenizer *t, int32_t id, char *out, size_t size);

/* The same piece without copying (*piece stays valid while t lives). An id outside
 * 0..n_vocab-1 is QL_EINVAL. */
ql_status ql_tokenizer_piece(const ql_tokenizer *t, int32_t id, const char **piece, size_t *len,
                             ql_error *err);

int32_t ql_tokenizer_n_vocab(const ql_tokenizer *t);
int32_t ql_tokenizer_bos(const ql_tokenizer *t); /* -1 when none */
int32_t ql_tokenizer_eos(const ql_tokenizer *t);
/* Whether llama.cpp adds BOS at the start / EOS at the end of a text (add_special). */
bool ql_tokenizer_adds_bos(const ql_tokenizer *t);
bool ql_tokenizer_adds_eos(const ql_tokenizer *t);

/* "llama" or "gpt2"; the pre-tokenizer name for gpt2 vocabularies, NULL for llama. */
const char *ql_tokenizer_model(const ql_tokenizer *t);
const char *ql_tokenizer_pre(const ql_tokenizer *t);

/* A remark made while loading (e.g. missing tokenizer.ggml.pre), or NULL. */
const char *ql_tokenizer_warning(const ql_tokenizer *t);

#endif
