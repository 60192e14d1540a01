/* qlab: computing an importance matrix during the reference forward pass, as
 * llama-imatrix (llama.cpp b4747) does it.
 *
 * What is collected. Every product y = W x whose weight is named "blk.*" (and
 * output.weight when process_output is set, llama-imatrix's --process-output) gets
 * an entry: per input column j of W, sums[j] = sum over every token of x_j^2, and
 * counts[0] = tokens seen. token_embd.weight is a row lookup, not a product, and has
 * no entry; a tied head (which reads token_embd.weight) has none either, as in
 * llama-imatrix, whose name filter it fails. The sums are accumulated in f32, token
 * after token in the order of the pass, the same additions llama-imatrix makes.
 *
 * How the text is fed (ql_imatrix_collect). The text is tokenized once with BOS
 * when the vocabulary adds one and cut into whole chunks of ctx tokens; each chunk
 * starts a fresh sequence (empty K/V cache) with its first token replaced by BOS,
 * and every position of the chunk is run through every layer: llama-imatrix asks
 * for all logits, so no row is dropped before the last layer (ql_forward_run with
 * out_first = 0). One chunk is one call of every product. llama-imatrix skips
 * products of fewer than 16 tokens (single-token decoding); qlab only runs whole
 * chunks and collects every one, so a ctx below 16 still gives an imatrix.
 *
 * The result is an in-memory imatrix (imatrix_io.h) with counts in tokens and
 * chunk_size = ctx, entries sorted by name, ready for ql_imatrix_write() in
 * either file format: the legacy .dat then stores ncall = chunks and
 * value = sum / count * ncall, byte-compatible with llama-imatrix's output.
 *
 * Threading: the observer runs on the caller's thread (forward.h) and sums on that
 * thread, every column in token order, so the result does not depend on the thread
 * count (the forward pass's products do not either). */
#ifndef QL_IMATRIX_H
#define QL_IMATRIX_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "model/forward.h"
#include "model/imatrix_io.h"
#include "model/model.h"
#include "model/perplexity.h"

/* llama-imatrix's rule: true when products with this weight are collected. */
bool ql_imatrix_collects(const char *tensor_name, bool process_output);

/* ---- the collector (a forward observer) ---- */

typedef struct ql_imatrix_collector ql_imatrix_collector;

/* A zeroed entry for every product site of w that ql_imatrix_collects() keeps. */
ql_status ql_imatrix_collector_alloc(ql_imatrix_collector **out, const ql_weights *w,
                                     bool process_output, ql_error *err);
void ql_imatrix_collector_free(ql_imatrix_collector *c); /* NULL is fine */

/* The observer: install with ql_forward_set_observer(fw, ql_imatrix_collector_observe, c)
 * or through a ql_observer_chain. Sites it does not collect are ignored. */
void ql_imatrix_collector_observe(void *collector, int site, const ql_linear *lin, const float *x,
                                  int64_t n_tok);

/* QL_EFORMAT after a sum became infinite or NaN (the message names the tensor and
 * column; llama-imatrix stops there too), else QL_OK. */
ql_status ql_imatrix_collector_status(const ql_imatrix_collector *c, ql_error *err);

/* Hands the statistics over as an imatrix (entries sorted by name; entries that saw
 * no token are left out, as llama-imatrix leaves them out) with chunk_size and
 * chunk_count set and dataset (may be NULL) recorded. The collector is emptied. */
ql_status ql_imatrix_collector_finish(ql_imatrix_collector *c, int64_t chunk_size,
                                      int64_t chunk_count, const char *dataset, ql_imatrix **out,
                                      ql_error *err);

/* ---- a whole calibration pass ---- */

typedef struct {
    bool process_output;     /* also collect output.weight */
    const char *dataset;     /* recorded in imatrix.datasets (e.g. the text's name); may be NULL */
    bool quiet;              /* no progress line */
    ql_matmul_observer also; /* another observer sharing the pass (activation maxima), or NULL */
    void *also_ctx;
    int group; /* chunks taken through each layer at once (model/scheduler.h); 0 = 1.
                  The statistics do not depend on it: each product's sums see the chunks
                  in the same order. */
} ql_imatrix_opts;

typedef struct {
    int64_t n_chunks; /* chunks run */
    int64_t n_tokens; /* tokens run (n_chunks * ctx) */
    int64_t n_entries;
    double ppl; /* over positions ctx/2 .. ctx-2 of the chunks, as llama-imatrix prints */
    double seconds;
} ql_imatrix_summary;

/* Runs every chunk of d through fw with weight set w (fw's K/V type as set by the
 * caller; max_ctx >= d->ctx) and returns the imatrix. The observer installed on fw
 * is replaced during the pass and removed after. summary may be NULL. */
ql_status ql_imatrix_collect(ql_forward *fw, const ql_weights *w, const ql_ppl_data *d,
                             const ql_imatrix_opts *opts, ql_imatrix **out,
                             ql_imatrix_summary *summary, ql_error *err);

/* ---- feeding an imatrix to the quantizer ---- */

/* The importance vectors of every tensor of a GGUF model that has an entry, checked
 * against the model and computed once (ql_imatrix_weights: sums / count), for
 * ql_quant_model_opts.imatrix. An entry whose length is not ne[0] x ne[2] x ne[3] of
 * its tensor is an error naming the file, tensor and both lengths, as in
 * llama-quantize, except for token_embd.weight, which llama-quantize then quantizes
 * without importance (reported by ql_imatrix_table_skipped). Entries naming no
 * tensor of the model are ignored. */
typedef struct ql_imatrix_table ql_imatrix_table;

ql_status ql_imatrix_table_alloc(ql_imatrix_table **out, const ql_imatrix *im, const ql_gguf *model,
                                 ql_error *err);
void ql_imatrix_table_free(ql_imatrix_table *t); /* NULL is fine */

/* A ql_imatrix_lookup_fn (quant_model.h): the tensor's n_mats * n_per_row weights, or
 * NULL when it has no (usable) entry or another shape. ctx is the table. */
const float *ql_imatrix_table_lookup(void *table, const char *tensor, int64_t n_per_row,
                                     int64_t n_mats);

/* Entries matched to model tensors, and the tensor skipped for a length mismatch
 * (token_embd.weight) or NULL. */
int64_t ql_imatrix_table_n_matched(const ql_imatrix_table *t);
const char *ql_imatrix_table_skipped(const ql_imatrix_table *t);

#endif
