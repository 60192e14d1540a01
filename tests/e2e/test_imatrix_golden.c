/* End to end: qlab's importance matrix against llama-imatrix's.
 *
 * golden/imatrix/imatrix-stories260K-tscalib-c128.dat was written by llama-imatrix
 * (b4747) for stories260K on ts_calib.txt with -c 128: 606 chunks, every position
 * counted, llama.cpp's default f16 K/V cache. qlab computes the same with
 * ql_imatrix_collect at ctx 128 with an f16 K/V rounding and must give the same
 * entries, the same counts (606 calls of 128 tokens each) and per-column importance
 * within IMPORTANCE_REL_TOL; its legacy .dat has the same size as llama-imatrix's.
 * With qlab's exact f32 K/V the agreement is looser; the test prints both. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/imatrix.h"
#include "formats/types.h"
#include "model/forward.h"
#include "model/imatrix_io.h"
#include "model/kvcache.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/tokenizer.h"
#include "qltest.h"

#define GOLDEN_DAT "golden/imatrix/imatrix-stories260K-tscalib-c128.dat"
#define CALIB_TEXT "golden/llamacpp-reference/ts_calib.txt"
#define CTX        128
/* The bound. Measured with f16 K/V: 4.3e-5 at worst (blk.4.attn_output),
 * exactly 0 for layer 0's Q/K/V, whose inputs depend on no attention; the rest is the
 * forward pass's own rounding differences from ggml, growing with depth. */
#define IMPORTANCE_REL_TOL 1e-4

/* Largest relative difference between the importance of a and golden, entry by entry. */
static double max_rel_diff(const ql_imatrix *a, const ql_imatrix *golden, char *worst,
                           size_t worst_size)
{
    double max = 0;
    for (int64_t i = 0; i < golden->n_entries; i++) {
        const ql_imatrix_entry *g = &golden->entries[i];
        const ql_imatrix_entry *e = ql_imatrix_find(a, g->name);
        if (!e || e->n_values != g->n_values)
            return (double)INFINITY;
        float *wa = malloc((size_t)g->n_values * sizeof *wa);
        float *wg = malloc((size_t)g->n_values * sizeof *wg);
        ql_error err;
        CHECK_OK(ql_imatrix_weights(a, g->name, g->n_values, wa, &err), &err);
        CHECK_OK(ql_imatrix_weights(golden, g->name, g->n_values, wg, &err), &err);
        for (int64_t j = 0; j < g->n_values; j++) {
            double rel = fabs((double)wa[j] - (double)wg[j]) / fabs((double)wg[j]);
            if (rel > max) {
                max = rel;
                snprintf(worst, worst_size, "%s column %lld", g->name, (long long)j);
            }
        }
        free(wa);
        free(wg);
    }
    return max;
}

static ql_imatrix *compute(const ql_model *m, const ql_ppl_data *d, int32_t kv_type, double *secs)
{
    ql_error err;
    ql_forward *fw = NULL;
    ql_imatrix *im = NULL;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, CTX, &err), &err);
    if (!fw)
        return NULL;
    CHECK_OK(ql_forward_set_kv_type(fw, kv_type, &err), &err);
    ql_imatrix_opts o = {false, "ts_calib.txt", true, NULL, NULL, 4};
    ql_imatrix_summary sum;
    CHECK_OK(ql_imatrix_collect(fw, m->weights, d, &o, &im, &sum, &err), &err);
    *secs = sum.seconds;
    ql_forward_free(fw);
    return im;
}

int main(void)
{
    const char *model_path = qlt_shared("models/stories260K.gguf");
    if (!ql_file_exists(model_path) || !ql_file_exists(qlt_shared(GOLDEN_DAT)))
        qlt_skip("stories260K.gguf or the golden imatrix not found under ../shared");
    ql_error err;
    ql_model *m = NULL;
    ql_tokenizer *tok = NULL;
    ql_imatrix *golden = NULL, *f16 = NULL, *f32 = NULL, *back = NULL;
    ql_ppl_data d;
    memset(&d, 0, sizeof d);
    if (ql_model_load(&m, model_path, &err) || ql_tokenizer_from_gguf(&tok, m->gguf, &err) ||
        ql_ppl_data_from_file(&d, tok, qlt_shared(CALIB_TEXT), CTX, 0, &err) ||
        ql_imatrix_read(qlt_shared(GOLDEN_DAT), &golden, &err)) {
        CHECK_OK(err.status, &err);
        goto out;
    }
    CHECK_EQ_INT(d.n_chunks, 606);
    double s16 = 0, s32 = 0;
    f16 = compute(m, &d, QL_TYPE_F16, &s16);
    f32 = compute(m, &d, QL_TYPE_F32, &s32);
    if (!f16 || !f32)
        goto out;

    /* Same entries and counts: 606 calls of 128 tokens. */
    CHECK_EQ_INT(golden->n_entries, 35);
    CHECK_EQ_INT(f16->n_entries, golden->n_entries);
    CHECK_EQ_INT(golden->chunk_count, 606);
    CHECK_EQ_INT(f16->chunk_count, golden->chunk_count);
    for (int64_t i = 0; i < golden->n_entries; i++) {
        const ql_imatrix_entry *g = &golden->entries[i];
        const ql_imatrix_entry *e = ql_imatrix_find(f16, g->name);
        CHECK_MSG(e != NULL, "qlab has no entry '%s'", g->name);
        if (!e)
            continue;
        CHECK_EQ_INT(e->n_values, g->n_values);
        /* The .dat stores calls (chunks); qlab counts tokens. */
        CHECK_EQ_INT(g->counts[0], 606);
        CHECK_EQ_INT(e->counts[0], 606 * CTX);
    }
    char worst16[160] = "", worst32[160] = "";
    double rel16 = max_rel_diff(f16, golden, worst16, sizeof worst16);
    double rel32 = max_rel_diff(f32, golden, worst32, sizeof worst32);
    printf("importance vs llama-imatrix: max relative difference %.3g with f16 K/V (%s), "
           "%.3g with f32 K/V (%s)\n",
           rel16, worst16, rel32, worst32);
    printf("time: %.2f s with f16 K/V, %.2f s with f32 K/V for %lld tokens\n", s16, s32,
           (long long)(606 * CTX));
    CHECK_MSG(rel16 < IMPORTANCE_REL_TOL, "max relative difference %.3g at %s", rel16, worst16);

    /* Written as .dat: llama-imatrix's layout (ncall 606 per entry, the chunk count and
     * dataset name trailer), so the same size; read back, the same importance. */
    const char *dat = "imatrix-qlab.dat";
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", qlt_tmpdir(), dat);
    CHECK_OK(ql_imatrix_write(f16, path, QL_IMATRIX_DAT, &err), &err);
    size_t n_ours = 0, n_golden = 0;
    void *a = qlt_read_file(path, &n_ours), *b = qlt_read_file(qlt_shared(GOLDEN_DAT), &n_golden);
    CHECK_EQ_INT(n_ours, n_golden);
    free(a);
    free(b);
    CHECK_OK(ql_imatrix_read(path, &back, &err), &err);
    if (back) {
        CHECK_EQ_INT(back->chunk_count, 606);
        for (int64_t i = 0; i < back->n_entries; i++)
            CHECK_EQ_INT(back->entries[i].counts[0], 606);
        char w[160];
        CHECK(max_rel_diff(back, golden, w, sizeof w) < IMPORTANCE_REL_TOL);
    }
out:
    ql_imatrix_free(golden);
    ql_imatrix_free(f16);
    ql_imatrix_free(f32);
    ql_imatrix_free(back);
    ql_ppl_data_deinit(&d);
    ql_tokenizer_free(tok);
    ql_model_free(m);
    return qlt_done();
}
