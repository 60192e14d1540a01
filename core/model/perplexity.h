/* qlab: the llama-perplexity protocol.
 *
 * The whole text is tokenized once (BOS first when the vocabulary adds it) and cut
 * into chunks of ctx tokens; chunk i covers tokens [i*ctx, (i+1)*ctx) with its first
 * token replaced by BOS. Positions first = ctx/2 .. ctx-2 are scored, each
 * predicting the next token of the text: n_scored = ctx - 1 - ctx/2 per chunk.
 * Only whole chunks are used, as llama-perplexity does.
 *
 * A harness computes the reference once and quantized passes against it:
 *   ql_ppl_data d;  ql_ppl_data_from_text(&d, tok, text, len, ctx, max_chunks, &err);
 *   for (i = 0; i < d.n_chunks; i++) {
 *       ql_ppl_run_chunk(fw, weights, &d, i, logits, &err);   // (n_scored, n_vocab)
 *       targets = ql_ppl_chunk_targets(&d, i);                 // (n_scored,)
 *       ...  // keep reference log-probs, or compare against them
 *   }
 * or ql_sched_perplexity() (model/scheduler.h), layer by layer over groups of chunks. */
#ifndef QL_PERPLEXITY_H
#define QL_PERPLEXITY_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "model/forward.h"
#include "model/tokenizer.h"

typedef struct {
    int32_t *tokens; /* the whole text's token ids (owned) */
    int64_t n_tokens;
    int ctx;          /* chunk length */
    int64_t n_chunks; /* chunks evaluated: min(requested, n_tokens / ctx) */
    int32_t bos;      /* first token of every chunk; -1 keeps the text's token */
    int first;        /* first scored position (ctx / 2) */
    int n_scored;     /* scored positions per chunk (ctx - 1 - first) */
} ql_ppl_data;

/* Tokenizes text (with BOS when the tokenizer adds it) and sets up chunks of ctx
 * tokens; max_chunks <= 0 means all. Fails when the text has fewer than ctx tokens. */
ql_status ql_ppl_data_from_text(ql_ppl_data *d, const ql_tokenizer *tok, const char *text,
                                size_t len, int ctx, int64_t max_chunks, ql_error *err);

/* Whether a pass of ctx tokens goes beyond the context the model was trained on
 * (hp->n_ctx_train, when the file gives one): then msg gets llama-perplexity's
 * warning ("the model was trained on only N context tokens (M specified)"), which
 * every command that starts a pass over a text prints before it. */
bool ql_ppl_ctx_beyond_training(const ql_hparams *hp, int ctx, char *msg, size_t size);

/* Same from the text file at path; a tokenizing or chunking error is prefixed with
 * "<path>: " (read errors name the file already). */
ql_status ql_ppl_data_from_file(ql_ppl_data *d, const ql_tokenizer *tok, const char *path, int ctx,
                                int64_t max_chunks, ql_error *err);

/* Same from token ids (copied); bos < 0 keeps each chunk's first token. */
ql_status ql_ppl_data_from_tokens(ql_ppl_data *d, const int32_t *tokens, int64_t n_tokens,
                                  int32_t bos, int ctx, int64_t max_chunks, ql_error *err);

void ql_ppl_data_deinit(ql_ppl_data *d);

/* Input ids of chunk i (ctx,), BOS first. */
void ql_ppl_chunk_input(const ql_ppl_data *d, int64_t i, int32_t *out);

/* The tokens the scored positions of chunk i predict (n_scored,). */
const int32_t *ql_ppl_chunk_targets(const ql_ppl_data *d, int64_t i);

/* Total scored tokens (n_chunks * n_scored). */
int64_t ql_ppl_n_scored_total(const ql_ppl_data *d);

/* Runs chunk i and writes the logits of its scored positions to logits
 * (n_scored, n_vocab). The chunk's last token is not run: it predicts nothing that is
 * scored and, attention being causal, changes no scored position. fw must have been
 * allocated with max_ctx >= ctx. */
ql_status ql_ppl_run_chunk(ql_forward *fw, const ql_weights *w, const ql_ppl_data *d, int64_t i,
                           float *logits, ql_error *err);

/* -log softmax(logits)[target] as llama-perplexity computes it: max subtracted, the
 * sum of expf in double. */
double ql_nll(const float *logits, int64_t n_vocab, int32_t target);

/* Running mean negative log-likelihood. */
typedef struct {
    double sum;  /* sum of NLL */
    double sum2; /* sum of NLL^2 */
    int64_t n;
} ql_nll_acc;

void ql_nll_acc_add(ql_nll_acc *a, double nll);
/* exp(mean NLL). */
double ql_nll_acc_ppl(const ql_nll_acc *a);
/* PPL * standard error of the mean NLL, as llama-perplexity prints after '±':
 * PPL * sqrt((E[x^2] - E[x]^2) / (n - 1)); NAN for fewer than two tokens. */
double ql_nll_acc_ppl_err(const ql_nll_acc *a);

#endif
