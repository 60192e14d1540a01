/* ql_quant_model on a small synthetic GGUF with 256-wide rows: F16 and BF16 sources,
 * a 3-D tensor quantized per 2-D matrix with its own importance vector, the imatrix
 * hook feeding both the quantizer and the weighted error, the refusal of types that
 * need an imatrix, quantized sources, and bytes equal to ql_quant_tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "formats/types.h"
#include "model/gguf.h"
#include "model/quant.h"
#include "model/quant_model.h"
#include "qltest.h"

enum { C = 256, R = 8, E = 3 };

static float weights_2d[R * C], weights_3d[E * R * C], norm[C];
static float imat_q[C], imat_exp[E * C];
static int lookups;

static float value(int i, int salt)
{
    return sinf((float)i * 0.37f + (float)salt) * 0.05f + (i % 97 == 5 ? 0.4f : 0.0f);
}

/* Writes the synthetic model: attn_q F16, ffn_down_exps (3-D) BF16, a norm F32,
 * and (when quantized_src) attn_k already in Q8_0. */
static void write_model(const char *path, bool quantized_src)
{
    ql_gguf_writer *w;
    ql_error err;
    CHECK_OK(ql_gguf_writer_alloc(&w, &err), &err);
    CHECK_OK(ql_gguf_writer_set_str(w, "general.architecture", "llama", &err), &err);
    int64_t ne2[2] = {C, R}, ne3[3] = {C, R, E}, ne1[1] = {C};
    uint16_t *h2 = malloc(sizeof(uint16_t) * R * C), *h3 = malloc(sizeof(uint16_t) * E * R * C);
    for (int i = 0; i < R * C; i++) {
        h2[i] = ql_fp32_to_fp16(value(i, 1));
        weights_2d[i] = ql_fp16_to_fp32(h2[i]);
    }
    for (int i = 0; i < E * R * C; i++) {
        h3[i] = ql_fp32_to_bf16(value(i, 2));
        weights_3d[i] = ql_bf16_to_fp32(h3[i]);
    }
    for (int i = 0; i < C; i++)
        norm[i] = 1.0f + (float)i / 256.0f;
    CHECK_OK(ql_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", 2, ne2, QL_TYPE_F16,
                                       sizeof(uint16_t) * R * C, &err),
             &err);
    CHECK_OK(ql_gguf_writer_add_tensor(w, "blk.0.ffn_down_exps.weight", 3, ne3, QL_TYPE_BF16,
                                       sizeof(uint16_t) * E * R * C, &err),
             &err);
    CHECK_OK(ql_gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", 1, ne1, QL_TYPE_F32,
                                       sizeof(float) * C, &err),
             &err);
    uint8_t q8[R * C / 32 * 34];
    if (quantized_src) {
        ql_quant_tensor(QL_TYPE_Q8_0, weights_2d, R, C, NULL, q8, sizeof q8, NULL, &err);
        CHECK_OK(ql_gguf_writer_add_tensor(w, "blk.0.attn_k.weight", 2, ne2, QL_TYPE_Q8_0,
                                           sizeof q8, &err),
                 &err);
    }
    CHECK_OK(ql_gguf_writer_begin(w, path, &err), &err);
    CHECK_OK(ql_gguf_writer_write_tensor(w, h2, sizeof(uint16_t) * R * C, &err), &err);
    CHECK_OK(ql_gguf_writer_write_tensor(w, h3, sizeof(uint16_t) * E * R * C, &err), &err);
    CHECK_OK(ql_gguf_writer_write_tensor(w, norm, sizeof(float) * C, &err), &err);
    if (quantized_src)
        CHECK_OK(ql_gguf_writer_write_tensor(w, q8, sizeof q8, &err), &err);
    CHECK_OK(ql_gguf_writer_finish(w, &err), &err);
    ql_gguf_writer_free(w);
    free(h2);
    free(h3);
}

static const float *lookup(void *ctx, const char *tensor, int64_t n_per_row, int64_t n_mats)
{
    lookups++;
    CHECK_EQ_INT(n_per_row, C);
    if (strcmp(tensor, "blk.0.attn_q.weight") == 0) {
        CHECK_EQ_INT(n_mats, 1);
        return imat_q;
    }
    if (strcmp(tensor, "blk.0.ffn_down_exps.weight") == 0) {
        CHECK_EQ_INT(n_mats, E);
        return imat_exp;
    }
    return NULL;
}

/* Runs ql_quant_model and checks every tensor against ql_quant_tensor per matrix. */
static void quantize_and_compare(const char *in, int32_t type, bool with_imat)
{
    char out[4096];
    snprintf(out, sizeof out, "%s/out_%s_%d.gguf", qlt_tmpdir(), ql_type_name(type), with_imat);
    ql_quant_model_opts opts = {
        .cfg = {.weight_type = type, .head_type = QL_TYPE_INVALID, .embd_type = QL_TYPE_INVALID},
        .imatrix = with_imat ? lookup : NULL,
        .stats = true,
        .quiet = true};
    ql_quant_model_report *r = NULL;
    ql_error err;
    ql_status st = ql_quant_model(in, out, &opts, &r, &err);
    CHECK_OK(st, &err);
    if (st)
        return;
    ql_gguf *g = NULL;
    CHECK_OK(ql_gguf_open(&g, out, &err), &err);
    if (!g) {
        ql_quant_model_report_free(r);
        return;
    }
    uint8_t want[E * R * C * 4];
    const ql_gguf_tensor *t = ql_gguf_find_tensor(g, "blk.0.attn_q.weight");
    CHECK(t && t->type == type);
    ql_quant_tensor(type, weights_2d, R, C, with_imat ? imat_q : NULL, want, sizeof want, NULL,
                    &err);
    CHECK(t && memcmp(t->data, want, t->nbytes) == 0);

    t = ql_gguf_find_tensor(g, "blk.0.ffn_down_exps.weight");
    CHECK(t && t->type == type && t->n_dims == 3);
    size_t mat = ql_row_size(type, C) * R;
    for (int m = 0; m < E; m++) {
        ql_quant_tensor(type, weights_3d + m * R * C, R, C, with_imat ? imat_exp + m * C : NULL,
                        want + m * mat, mat, NULL, &err);
    }
    CHECK_MSG(t && memcmp(t->data, want, E * mat) == 0, "%s: 3-D tensor differs",
              ql_type_name(type));

    t = ql_gguf_find_tensor(g, "blk.0.attn_norm.weight");
    CHECK(t && t->type == QL_TYPE_F32 && memcmp(t->data, norm, sizeof norm) == 0);

    /* Stats: weighted exactly when every quantized tensor had weights. */
    CHECK_EQ_INT(r->has_imatrix[0], with_imat);
    CHECK_EQ_INT(r->errors[0].weighted, with_imat);
    CHECK(r->errors[2].sse == 0.0);
    CHECK(r->errors[1].sse > 0.0);
    if (with_imat) {
        double rel = ql_weight_error_rel(&r->errors[1]);
        CHECK(rel > 0 && rel < 0.05);
    }
    ql_gguf_close(g);
    ql_quant_model_report_free(r);
}

int main(void)
{
    for (int j = 0; j < C; j++)
        imat_q[j] = 0.5f + (float)(j % 11);
    for (int j = 0; j < E * C; j++)
        imat_exp[j] = 1.0f + (float)((j * 7) % 13);
    char in[4096], bad[4096], out[4096];
    snprintf(in, sizeof in, "%s/model.gguf", qlt_tmpdir());
    snprintf(bad, sizeof bad, "%s/quantized.gguf", qlt_tmpdir());
    snprintf(out, sizeof out, "%s/refused.gguf", qlt_tmpdir());
    write_model(in, false);
    write_model(bad, true);

    const int32_t types[] = {QL_TYPE_Q4_K, QL_TYPE_Q6_K, QL_TYPE_IQ4_XS, QL_TYPE_Q5_0};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        quantize_and_compare(in, types[i], false);
        quantize_and_compare(in, types[i], true);
    }
    CHECK(lookups >= 8);

    ql_quant_model_opts opts = {.cfg = {.weight_type = QL_TYPE_IQ2_XXS,
                                        .head_type = QL_TYPE_INVALID,
                                        .embd_type = QL_TYPE_INVALID},
                                .quiet = true};
    ql_quant_model_report *r = NULL;
    ql_error err;
    CHECK_EQ_INT(ql_quant_model(in, out, &opts, &r, &err), QL_EINVAL);
    CHECK(strstr(err.msg, "importance matrix") && strstr(err.msg, "attn_q"));
    opts.imatrix = lookup;
    CHECK_OK(ql_quant_model(in, out, &opts, &r, &err), &err);
    ql_quant_model_report_free(r);
    r = NULL;
    opts.imatrix = NULL;

    /* Non-finite weights are reported with their position. */
    char nan_path[4096];
    snprintf(nan_path, sizeof nan_path, "%s/nan.gguf", qlt_tmpdir());
    {
        ql_gguf_writer *w;
        CHECK_OK(ql_gguf_writer_alloc(&w, &err), &err);
        int64_t ne[2] = {32, 2};
        float v[64] = {0};
        v[40] = NAN;
        CHECK_OK(
            ql_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", 2, ne, QL_TYPE_F32, sizeof v, &err),
            &err);
        CHECK_OK(ql_gguf_writer_begin(w, nan_path, &err), &err);
        CHECK_OK(ql_gguf_writer_write_tensor(w, v, sizeof v, &err), &err);
        CHECK_OK(ql_gguf_writer_finish(w, &err), &err);
        ql_gguf_writer_free(w);
    }
    opts.cfg.weight_type = QL_TYPE_Q8_0;
    CHECK_EQ_INT(ql_quant_model(nan_path, out, &opts, &r, &err), QL_EFORMAT);
    CHECK(strstr(err.msg, "row 1, column 8 is NaN") && strstr(err.msg, "attn_q"));

    /* A tensor that is already quantized cannot be requantized. */
    opts.cfg.weight_type = QL_TYPE_Q4_0;
    CHECK_EQ_INT(ql_quant_model(bad, out, &opts, &r, &err), QL_EUNSUPPORTED);
    CHECK(strstr(err.msg, "attn_k") && strstr(err.msg, "Q8_0"));
    /* ... unless it stays in its type: Q8_0 to Q8_0 is copied. */
    opts.cfg.weight_type = QL_TYPE_Q8_0;
    CHECK_OK(ql_quant_model(bad, out, &opts, &r, &err), &err);
    ql_quant_model_report_free(r);
    return qlt_done();
}
