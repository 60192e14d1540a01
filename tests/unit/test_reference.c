/* The compact reference: the log-probabilities it holds, the ones it regenerates from
 * the kept head inputs and the ones loaded from its cache file all equal, bit for bit,
 * the log-softmax of the logits of each chunk run alone; the cache holds n_embd floats
 * a scored token; a damaged cache is noticed by its checksum and recomputed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/distribution.h"
#include "experiment/reference.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/scheduler.h"
#include "model/tokenizer.h"
#include "qltest.h"

#define CTX    64
#define CHUNKS 4

/* Every chunk's log-probs (as float, after log-softmax) computed directly. */
static float *direct_logp(ql_forward *fw, const ql_model *m, const ql_ppl_data *d)
{
    ql_error err;
    const size_t per = (size_t)d->n_scored * (size_t)m->hp.n_vocab;
    float *out = malloc((size_t)d->n_chunks * per * sizeof *out);
    for (int64_t c = 0; c < d->n_chunks; c++) {
        float *rows = out + (size_t)c * per;
        CHECK_OK(ql_ppl_run_chunk(fw, m->weights, d, c, rows, &err), &err);
        for (int t = 0; t < d->n_scored; t++)
            ql_log_softmax(rows + (size_t)t * (size_t)m->hp.n_vocab, m->hp.n_vocab,
                           rows + (size_t)t * (size_t)m->hp.n_vocab);
    }
    return out;
}

/* Whether r's log-probs of every chunk equal want. */
static bool same_logp(ql_reference *r, const ql_ppl_data *d, int64_t n_vocab, const float *want)
{
    ql_error err;
    const size_t per = (size_t)d->n_scored * (size_t)n_vocab;
    for (int64_t c = 0; c < d->n_chunks; c++) {
        const float *lp;
        CHECK_OK(ql_reference_logp(r, c, &lp, &err), &err);
        if (!lp || memcmp(lp, want + (size_t)c * per, per * sizeof(float)) != 0)
            return false;
    }
    return true;
}

static void test_reference(const char *path, const char *cache_name)
{
    ql_error err;
    ql_model *m = NULL;
    ql_tokenizer *tok = NULL;
    ql_ppl_data d;
    memset(&d, 0, sizeof d);
    CHECK_OK(ql_model_load(&m, path, &err), &err);
    if (!m)
        qlt_skip("model missing");
    CHECK_OK(ql_tokenizer_from_gguf(&tok, m->gguf, &err), &err);
    CHECK_OK(ql_ppl_data_from_file(
                 &d, tok, qlt_shared("datasets/tinystories/tinystories_valid_first1000.txt"), CTX,
                 CHUNKS, &err),
             &err);
    ql_forward *fw;
    ql_sched *s;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, CTX, &err), &err);
    CHECK_OK(ql_sched_alloc(&s, &err), &err);
    float *want = direct_logp(fw, m, &d);

    const char *dir = qlt_tmp(cache_name);
    ql_reference_opts held = {"model", "text", dir, true, 3, (size_t)1 << 40};
    ql_reference_opts regen = {"model", "text", NULL, true, 1, 0};
    ql_reference *r = NULL;

    /* computed, log-probs held */
    CHECK_OK(ql_reference_get(&r, fw, s, m->weights, &d, &held, &err), &err);
    CHECK(r && ql_reference_holds_logp(r) && !ql_reference_from_cache(r));
    CHECK_MSG(r && same_logp(r, &d, m->hp.n_vocab, want), "%s: held log-probs differ", path);
    ql_reference_free(r);

    /* computed, regenerated per chunk from the head inputs */
    CHECK_OK(ql_reference_get(&r, fw, s, m->weights, &d, &regen, &err), &err);
    CHECK(r && !ql_reference_holds_logp(r));
    CHECK_MSG(r && same_logp(r, &d, m->hp.n_vocab, want), "%s: regenerated log-probs differ", path);
    ql_reference_free(r);

    /* loaded from the cache the first pass wrote: n_embd floats a token */
    char file[4096];
    CHECK_OK(ql_reference_get(&r, fw, s, m->weights, &d, &held, &err), &err);
    CHECK(r && ql_reference_from_cache(r));
    CHECK_MSG(r && same_logp(r, &d, m->hp.n_vocab, want), "%s: cached log-probs differ", path);
    ql_reference_free(r);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "ls %s/ref-*.bin", dir);
    FILE *ls = popen(cmd, "r");
    CHECK(ls && fgets(file, sizeof file, ls) != NULL);
    if (ls)
        pclose(ls);
    file[strcspn(file, "\n")] = '\0';
    size_t len = 0;
    unsigned char *bytes = qlt_read_file(file, &len);
    CHECK_EQ_INT(len, ql_reference_file_bytes(&d, m->hp.n_embd));
    CHECK(len < ql_reference_logp_bytes(&d, m->hp.n_vocab) / 4);

    /* one damaged float in the middle: the checksum notices, the reference is recomputed
     * (and is right) */
    bytes[len / 2] ^= 0x40;
    FILE *f = fopen(file, "wb");
    CHECK(f && fwrite(bytes, 1, len, f) == len);
    if (f)
        fclose(f);
    free(bytes);
    CHECK_OK(ql_reference_get(&r, fw, s, m->weights, &d, &held, &err), &err);
    CHECK_MSG(r && !ql_reference_from_cache(r), "a damaged cache file was used");
    CHECK(r && same_logp(r, &d, m->hp.n_vocab, want));
    ql_reference_free(r);

    free(want);
    ql_sched_free(s);
    ql_forward_free(fw);
    ql_ppl_data_deinit(&d);
    ql_tokenizer_free(tok);
    ql_model_free(m);
}

int main(void)
{
    ql_threads_set(2);
    test_reference(qlt_shared("models/stories260K.gguf"), "cache-f32");
    /* Q4_0 weights: every layer decoded, the head decoded tile by tile */
    test_reference(qlt_shared("golden/llamacpp-reference/quantized/stories260K-Q4_0.gguf"),
                   "cache-q4_0");
    return qlt_done();
}
