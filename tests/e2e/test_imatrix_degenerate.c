/* End to end: importance matrices the quantizers cannot use, and block scales that
 * overflow (issue 16, item 4), on stories260K.
 *
 * 1. An all-zero imatrix, and one whose values are all denormal, quantize the model
 *    exactly as no imatrix does (every entry dropped with a warning), instead of
 *    zeroing every block (Q4_0: PPL 2e10 instead of 5.2).
 * 2. An imatrix with an importance of 3e38 is refused when read, naming the file and
 *    the entry: with it IQ4_NL wrote infinite and NaN block scales.
 * 3. Whatever the caller hands the quantizer, no block that decodes to a non-finite
 *    value leaves it: importance 3e38 given directly to IQ4_NL, and a weight of 1e7
 *    whose Q8_0 scale overflows f16, are errors naming the row and block, and
 *    `ql_quant_model` writes no file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/imatrix.h"
#include "formats/types.h"
#include "model/gguf.h"
#include "model/imatrix_io.h"
#include "model/quant.h"
#include "model/quant_model.h"
#include "qltest.h"

#define GOLDEN_IMATRIX "golden/imatrix/imatrix-stories260K-tscalib-c128.dat"

/* Quantizes model to type with the imatrix at imatrix_path (NULL: none) into out. */
static ql_status quantize(const char *model, const char *out, int32_t type,
                          const char *imatrix_path, ql_error *err)
{
    ql_imatrix *im = NULL;
    ql_imatrix_table *table = NULL;
    ql_gguf *g = NULL;
    ql_status st = QL_OK;
    if (imatrix_path &&
        ((st = ql_imatrix_read(imatrix_path, &im, err)) || (st = ql_gguf_open(&g, model, err)) ||
         (st = ql_imatrix_table_alloc(&table, im, g, err))))
        goto out;
    ql_quant_model_opts opts = {
        .cfg = {.weight_type = type, .head_type = QL_TYPE_INVALID, .embd_type = QL_TYPE_INVALID},
        .imatrix = table ? ql_imatrix_table_lookup : NULL,
        .imatrix_ctx = table,
        .quiet = true};
    ql_quant_model_report *r = NULL;
    st = ql_quant_model(model, out, &opts, &r, err);
    ql_quant_model_report_free(r);
out:
    ql_imatrix_table_free(table);
    ql_imatrix_free(im);
    ql_gguf_close(g);
    return st;
}

/* The golden imatrix with every sum replaced by f(sum), written to name (.dat). */
static const char *variant(const ql_imatrix *golden, const char *name, float (*f)(float))
{
    ql_error err;
    ql_imatrix *im;
    CHECK_OK(ql_imatrix_alloc(&im, &err), &err);
    for (int64_t i = 0; i < golden->n_entries; i++) {
        const ql_imatrix_entry *g = &golden->entries[i];
        ql_imatrix_entry *e;
        CHECK_OK(ql_imatrix_add_entry(im, g->name, g->n_values, g->n_mat, false, &e, &err), &err);
        for (int64_t j = 0; j < g->n_values; j++)
            e->sums[j] = f(g->sums[j]);
        memcpy(e->counts, g->counts, (size_t)g->n_mat * sizeof *e->counts);
    }
    const char *path = qlt_tmp(name);
    CHECK_OK(ql_imatrix_write(im, path, QL_IMATRIX_DAT, &err), &err);
    ql_imatrix_free(im);
    return path;
}

static float to_zero(float v)
{
    (void)v;
    return 0.0f;
}

static float to_denormal(float v)
{
    return v * 1e-40f;
}

static float to_huge(float v)
{
    return v > 0 ? 3e38f : 0.0f;
}

/* Degenerate matrices give the file no importance gives, tensor for tensor. */
static void degenerate_like_none(const char *model, const ql_imatrix *golden)
{
    const char *none = qlt_tmp("none.gguf");
    ql_error err;
    const int32_t types[] = {QL_TYPE_Q4_0, QL_TYPE_IQ4_NL};
    const char *zero = variant(golden, "zero.dat", to_zero);
    const char *denormal = variant(golden, "denormal.dat", to_denormal);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        CHECK_OK(quantize(model, none, types[t], NULL, &err), &err);
        const char *files[] = {zero, denormal};
        for (int k = 0; k < 2; k++) {
            ql_imatrix *im = NULL;
            CHECK_OK(ql_imatrix_read(files[k], &im, &err), &err);
            char msg[1024];
            if (im) {
                CHECK_MSG(im->n_entries == 0 && im->n_dropped == golden->n_entries,
                          "%s: %lld entries kept, %lld dropped", files[k], (long long)im->n_entries,
                          (long long)im->n_dropped);
                CHECK(ql_imatrix_dropped_warning(im, msg, sizeof msg) &&
                      strstr(msg, "35 entries carry no usable importance"));
            }
            ql_imatrix_free(im);
            const char *out = qlt_tmp("degenerate.gguf");
            CHECK_OK(quantize(model, out, types[t], files[k], &err), &err);
            ql_gguf *a = NULL, *b = NULL;
            CHECK_OK(ql_gguf_open(&a, out, &err), &err);
            CHECK_OK(ql_gguf_open(&b, none, &err), &err);
            if (a && b) {
                snprintf(msg, sizeof msg, "%s with %s", ql_type_name(types[t]), files[k]);
                const int same = qlt_same_tensors(a, b, msg);
                CHECK_EQ_INT(same, b->n_tensors);
                printf("%s: %d/%lld tensors as without an imatrix\n", msg, same,
                       (long long)b->n_tensors);
            }
            ql_gguf_close(a);
            ql_gguf_close(b);
        }
    }
}

/* stories260K with one weight of blk.1.attn_q.weight set to v, written to path. */
static void model_with_weight(const char *model, const char *path, float v)
{
    ql_error err;
    ql_gguf *g;
    ql_gguf_writer *w;
    CHECK_OK(ql_gguf_open(&g, model, &err), &err);
    CHECK_OK(ql_gguf_writer_alloc(&w, &err), &err);
    CHECK_OK(ql_gguf_writer_copy_kvs(w, g, &err), &err);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        CHECK_OK(ql_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->nbytes, &err),
                 &err);
    }
    CHECK_OK(ql_gguf_writer_begin(w, path, &err), &err);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        float *copy = malloc(t->nbytes);
        memcpy(copy, t->data, t->nbytes);
        if (strcmp(t->name, "blk.1.attn_q.weight") == 0)
            copy[3 * 64 + 40] = v; /* row 3, column 40: the block at column 32 */
        CHECK_OK(ql_gguf_writer_write_tensor(w, copy, t->nbytes, &err), &err);
        free(copy);
    }
    CHECK_OK(ql_gguf_writer_finish(w, &err), &err);
    ql_gguf_writer_free(w);
    ql_gguf_close(g);
}

static void nonfinite_scales(const char *model, const ql_imatrix *golden)
{
    ql_error err;
    /* A huge importance: refused when read. */
    const char *huge = variant(golden, "huge.dat", to_huge);
    ql_imatrix *im = NULL;
    ql_status st = ql_imatrix_read(huge, &im, &err);
    CHECK_MSG(st == QL_EFORMAT && im == NULL && strstr(err.msg, huge) &&
                  strstr(err.msg, "entry 'blk.4.ffn_down.weight': column 0 has importance") &&
                  strstr(err.msg, "overflow the quantizers' sums"),
              "%s", err.msg);
    ql_imatrix_free(im);

    /* The same importance handed to the quantizer directly. */
    enum { N = 64 * 32 };
    float x[N];
    uint64_t seed = 3;
    for (int i = 0; i < N; i++)
        x[i] = (float)(0.02 * ql_rng_gauss(&seed));
    float imat[64];
    for (int j = 0; j < 64; j++)
        imat[j] = 3e38f;
    static uint8_t q[N * 4];
    st = ql_quant_tensor(QL_TYPE_IQ4_NL, x, 32, 64, imat, q, sizeof q, NULL, &err);
    CHECK_MSG(st == QL_EFORMAT &&
                  strstr(err.msg, "quantize IQ4_NL: row 0, the block at column 0 decodes to "
                                  "non-finite values: its scale overflowed") &&
                  strstr(err.msg, "with importance weights"),
              "%s", err.msg);
    for (int j = 0; j < 64; j++)
        imat[j] = 1.0f;
    CHECK_OK(ql_quant_tensor(QL_TYPE_IQ4_NL, x, 32, 64, imat, q, sizeof q, NULL, &err), &err);

    /* A weight whose Q8_0 scale (1e7 / 127) overflows f16: no file is written. */
    const char *big = qlt_tmp("big-weight.gguf"), *out = qlt_tmp("big-weight-q8.gguf");
    model_with_weight(model, big, 1e7f);
    remove(out);
    st = quantize(big, out, QL_TYPE_Q8_0, NULL, &err);
    CHECK_MSG(st == QL_EFORMAT && strstr(err.msg, "tensor 'blk.1.attn_q.weight' (Q8_0)") &&
                  strstr(err.msg, "row 3, the block at column 32 decodes to non-finite values") &&
                  strstr(err.msg, "largest |weight| in the row 1e+07"),
              "%s", err.msg);
    CHECK(!ql_file_exists(out));
    /* F16 stores the weight itself: 1e7 is beyond its range too. */
    st = quantize(big, out, QL_TYPE_F16, NULL, &err);
    CHECK_MSG(st == QL_EFORMAT && strstr(err.msg, "quantize F16: row 3, the block at column 40"),
              "%s", err.msg);
    CHECK(!ql_file_exists(out));
    /* A large weight that still fits passes. */
    model_with_weight(model, big, 1e6f);
    CHECK_OK(quantize(big, out, QL_TYPE_Q8_0, NULL, &err), &err);
}

int main(void)
{
    const char *model = qlt_shared("models/stories260K.gguf");
    if (!ql_file_exists(model) || !ql_file_exists(qlt_shared(GOLDEN_IMATRIX)))
        qlt_skip("../shared/models/stories260K.gguf or the golden imatrix not found");
    ql_error err;
    ql_imatrix *golden = NULL;
    CHECK_OK(ql_imatrix_read(qlt_shared(GOLDEN_IMATRIX), &golden, &err), &err);
    if (golden) {
        CHECK_EQ_INT(golden->n_entries, 35);
        degenerate_like_none(model, golden);
        nonfinite_scales(model, golden);
    }
    ql_imatrix_free(golden);
    return qlt_done();
}
