/* The llama-perplexity protocol: chunking, running chunks, NLL and PPL. */
#include "model/perplexity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

ql_status ql_ppl_data_from_tokens(ql_ppl_data *d, const int32_t *tokens, int64_t n_tokens,
                                  int32_t bos, int ctx, int64_t max_chunks, ql_error *err)
{
    memset(d, 0, sizeof *d);
    /* ctx 2 would leave nothing to score (positions 1..0). */
    if (ctx < 4)
        return ql_error_set(err, QL_EINVAL, "perplexity: context %d is too short (at least 4)",
                            ctx);
    if (n_tokens < ctx)
        return ql_error_set(err, QL_EINVAL,
                            "perplexity: the text has %lld tokens, fewer than one chunk of %d",
                            (long long)n_tokens, ctx);
    d->tokens = malloc((size_t)n_tokens * sizeof *d->tokens);
    if (!d->tokens)
        return ql_error_set(err, QL_ENOMEM, "out of memory for %lld tokens", (long long)n_tokens);
    memcpy(d->tokens, tokens, (size_t)n_tokens * sizeof *tokens);
    d->n_tokens = n_tokens;
    d->ctx = ctx;
    d->n_chunks = n_tokens / ctx;
    if (max_chunks > 0 && max_chunks < d->n_chunks)
        d->n_chunks = max_chunks;
    d->bos = bos;
    d->first = ctx / 2;
    d->n_scored = ctx - 1 - d->first;
    return QL_OK;
}

ql_status ql_ppl_data_from_text(ql_ppl_data *d, const ql_tokenizer *tok, const char *text,
                                size_t len, int ctx, int64_t max_chunks, ql_error *err)
{
    memset(d, 0, sizeof *d);
    int32_t *ids = NULL;
    int64_t n = 0;
    bool add_bos = ql_tokenizer_adds_bos(tok);
    ql_status st = ql_tokenize(tok, text, len, add_bos, &ids, &n, err);
    if (st)
        return st;
    st = ql_ppl_data_from_tokens(d, ids, n, add_bos ? ql_tokenizer_bos(tok) : -1, ctx, max_chunks,
                                 err);
    free(ids);
    return st;
}

bool ql_ppl_ctx_beyond_training(const ql_hparams *hp, int ctx, char *msg, size_t size)
{
    if (hp->n_ctx_train <= 0 || ctx <= hp->n_ctx_train)
        return false;
    /* Positions past the trained context are extrapolation (RoPE beyond its range):
     * the figures describe a model outside its domain, and the pass costs
     * O(ctx^2) attention for it. */
    snprintf(msg, size,
             "the model was trained on only %d context tokens (%d specified): positions past "
             "%d are outside its training, as llama-perplexity warns",
             hp->n_ctx_train, ctx, hp->n_ctx_train);
    return true;
}

ql_status ql_ppl_data_from_file(ql_ppl_data *d, const ql_tokenizer *tok, const char *path, int ctx,
                                int64_t max_chunks, ql_error *err)
{
    memset(d, 0, sizeof *d);
    char *text = NULL;
    size_t len = 0;
    ql_status st = ql_file_read_all(path, &text, &len, err);
    if (st)
        return st;
    if ((st = ql_ppl_data_from_text(d, tok, text, len, ctx, max_chunks, err)))
        ql_error_prefix(err, "%s: ", path);
    free(text);
    return st;
}

void ql_ppl_data_deinit(ql_ppl_data *d)
{
    free(d->tokens);
    memset(d, 0, sizeof *d);
}

void ql_ppl_chunk_input(const ql_ppl_data *d, int64_t i, int32_t *out)
{
    QL_ASSERT(i >= 0 && i < d->n_chunks);
    memcpy(out, d->tokens + i * d->ctx, (size_t)d->ctx * sizeof *out);
    if (d->bos >= 0)
        out[0] = d->bos;
}

const int32_t *ql_ppl_chunk_targets(const ql_ppl_data *d, int64_t i)
{
    QL_ASSERT(i >= 0 && i < d->n_chunks);
    return d->tokens + i * d->ctx + d->first + 1;
}

int64_t ql_ppl_n_scored_total(const ql_ppl_data *d)
{
    return d->n_chunks * d->n_scored;
}

ql_status ql_ppl_run_chunk(ql_forward *fw, const ql_weights *w, const ql_ppl_data *d, int64_t i,
                           float *logits, ql_error *err)
{
    if (i < 0 || i >= d->n_chunks)
        return ql_error_set(err, QL_EINVAL, "perplexity: chunk %lld outside 0..%lld", (long long)i,
                            (long long)d->n_chunks - 1);
    if (ql_forward_max_ctx(fw) < d->ctx)
        return ql_error_set(err, QL_EINVAL,
                            "perplexity: forward state holds %d tokens, chunks have %d",
                            ql_forward_max_ctx(fw), d->ctx);
    int32_t *in = malloc((size_t)d->ctx * sizeof *in);
    if (!in)
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    ql_ppl_chunk_input(d, i, in);
    /* tokens 0..ctx-2 give the logits of positions first..ctx-2 */
    ql_status st = ql_forward_run(fw, w, in, d->ctx - 1, 0, d->first, logits, err);
    free(in);
    return st;
}

double ql_nll(const float *logits, int64_t n_vocab, int32_t target)
{
    float max = logits[0];
    for (int64_t v = 1; v < n_vocab; v++)
        if (logits[v] > max)
            max = logits[v];
    double sum_exp = 0.0;
    for (int64_t v = 0; v < n_vocab; v++)
        sum_exp += (double)expf(logits[v] - max);
    return -((double)(logits[target] - max) - log(sum_exp));
}

void ql_nll_acc_add(ql_nll_acc *a, double nll)
{
    a->sum += nll;
    a->sum2 += nll * nll;
    a->n++;
}

double ql_nll_acc_ppl(const ql_nll_acc *a)
{
    return a->n > 0 ? exp(a->sum / (double)a->n) : (double)NAN;
}

double ql_nll_acc_ppl_err(const ql_nll_acc *a)
{
    if (a->n < 2)
        return (double)NAN;
    const double mean = a->sum / (double)a->n;
    const double var = a->sum2 / (double)a->n - mean * mean;
    return var > 0 ? exp(mean) * sqrt(var / (double)(a->n - 1)) : 0.0;
}
