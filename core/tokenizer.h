/* qlab: tokenizers read from GGUF metadata (tokenizer.ggml.*).
 *
 * Two families, as llama.cpp implements them:
 * - "llama": SentencePiece-style BPE over scores, with byte-fallback tokens
 *   <0xNN> and the leading-space rule (tokenizer.ggml.add_space_prefix);
 * - "gpt2": byte-level BPE with merges and the pre-tokenizer named by
 *   tokenizer.ggml.pre (llama-bpe, qwen2, gpt2, smollm, ...).
 * Tokenizing produces exactly the ids llama.cpp's tokenizer gives for the same
 * text with parse_special = false (special-token text is ordinary text). */
#ifndef QL_TOKENIZER_H
#define QL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "gguf.h"

typedef struct ql_tokenizer ql_tokenizer;

/* Builds the tokenizer of a GGUF file (model or vocab-only). Errors name the file
 * and the key (e.g. a missing tokenizer.ggml.merges for a gpt2 vocab). */
ql_status ql_tokenizer_from_gguf(ql_tokenizer **out, const ql_gguf *g, ql_error *err);
void ql_tokenizer_free(ql_tokenizer *t);

/* Tokenizes len bytes of text. add_bos: prepend BOS when the vocabulary asks for it
 * (tokenizer.ggml.add_bos_token, default true for llama, as llama.cpp decides).
 * *ids is malloc'd (caller frees), *n_ids its length. */
ql_status ql_tokenize(const ql_tokenizer *t, const char *text, size_t len, bool add_bos,
                      int32_t **ids, int64_t *n_ids, ql_error *err);

/* Text of one token as it appears in output (byte tokens decoded, the SentencePiece
 * space marker turned into a space); writes at most size bytes, returns the length. */
size_t ql_token_to_piece(const ql_tokenizer *t, int32_t id, char *out, size_t size);

int32_t ql_tokenizer_n_vocab(const ql_tokenizer *t);
int32_t ql_tokenizer_bos(const ql_tokenizer *t); /* -1 when none */
int32_t ql_tokenizer_eos(const ql_tokenizer *t);
/* Whether llama.cpp adds BOS at the start of a text for this vocabulary. */
bool ql_tokenizer_adds_bos(const ql_tokenizer *t);

#endif
