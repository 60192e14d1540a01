/* ql_quant_model on a small synthetic GGUF with 256-wide rows: F16 and BF16 sources,
 * a 3-D tensor quantized per 2-D matrix with its own importance vector, the imatrix
 * hook feeding both the quantizer and the weighted error, the refusal of types that
 * need an imatrix, quantized sources, and bytes equal to ql_quant_tensor; the one
 * per-tensor entry point, ql_quant_tensor_rows, giving any range of rows the bytes
 * of the whole tensor from every kind of source. */
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

/* ---------------------------------------------------------------------------
 * ql_quant_tensor_rows: any range of rows gets the bytes of the whole tensor */

/* Chunks of 32 rows of 512: a matrix of 37 rows ends inside a chunk. */
enum { RC = 512, RR = 37, RE = 3, RN = RR * RE };

static float rows_f32[RN * RC], rows_imat[RE * RC];
static uint16_t rows_f16[RN * RC];
static uint8_t want_q[RN * RC], got_q[RN * RC];

/* Odd rows are zero but for one 32-group in four: IQ1_S and IQ1_M give those zero
 * groups the shifts of the row before, if it was quantized in the same call. */
static void make_rows(void)
{
    for (int i = 0; i < RN * RC; i++) {
        const int row = i / RC, group = i % RC / 32;
        const float v = row % 2 == 1 && group % 4 != 0 ? 0.0f : value(i, 3);
        rows_f16[i] = ql_fp32_to_fp16(v);
        rows_f32[i] = ql_fp16_to_fp32(rows_f16[i]);
    }
    for (int j = 0; j < RE * RC; j++)
        rows_imat[j] = 0.25f + (float)((j * 5) % 17);
}

/* The definition: each matrix on its own, in chunks of ql_quant_chunk_rows rows from
 * its first row, one call of the format's quantizer per chunk. */
static void expected_bytes(int32_t type, bool per_mat)
{
    const ql_type_traits *tr = ql_type_get(type);
    const size_t rs = ql_row_size(type, RC);
    const int64_t chunk = ql_quant_chunk_rows(RC);
    ql_error err;
    CHECK_OK(ql_type_prepare(type, &err), &err);
    for (int m = 0; m < RE; m++)
        for (int64_t r = 0; r < RR; r += chunk) {
            const int64_t n = r + chunk < RR ? chunk : RR - r;
            const int64_t row = m * RR + r;
            tr->quantize(rows_f32 + row * RC, want_q + (size_t)row * rs, n, RC,
                         rows_imat + (per_mat ? m * RC : 0));
        }
}

static ql_gguf_tensor rows_tensor(void)
{
    ql_gguf_tensor gt = {.name = "blk.0.ffn_up_exps.weight",
                         .n_dims = 3,
                         .ne = {RC, RR, RE, 1},
                         .type = QL_TYPE_F16,
                         .nbytes = sizeof rows_f16,
                         .data = rows_f16};
    return gt;
}

static void check_range(const ql_quant_src *s, int32_t type, int64_t r0, int64_t n, const char *how)
{
    const size_t rs = ql_row_size(type, RC);
    ql_error err;
    memset(got_q, 0xA5, sizeof got_q);
    CHECK_OK(ql_quant_tensor_rows(s, type, r0, n, got_q, (size_t)n * rs, &err), &err);
    CHECK_MSG(memcmp(got_q, want_q + (size_t)r0 * rs, (size_t)n * rs) == 0,
              "%s, %s: rows %lld..%lld differ from the whole tensor's", ql_type_name(type), how,
              (long long)r0, (long long)(r0 + n - 1));
}

static void tensor_rows(int32_t type)
{
    static const int64_t ranges[][2] = {{0, RN}, {0, 1},  {5, 3},   {15, 2},   {16, 16}, {30, 20},
                                        {36, 1}, {37, 1}, {40, 71}, {100, 11}, {110, 1}};
    const ql_gguf_tensor gt = rows_tensor();
    ql_quant_src from_f32, from_gguf;
    ql_quant_src_from_f32(&from_f32, gt.ne, rows_f32);
    ql_quant_src_from_gguf(&from_gguf, &gt);
    from_f32.imatrix = from_gguf.imatrix = rows_imat;
    from_f32.imatrix_per_mat = from_gguf.imatrix_per_mat = true;
    expected_bytes(type, true);
    for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++) {
        const int64_t r0 = ranges[k][0], n = ranges[k][1];
        check_range(&from_f32, type, r0, n, "f32 rows");
        check_range(&from_gguf, type, r0, n, "decoded rows");
        /* Only the rows asked for in f32: the rows before them in their chunk are
         * decoded from the tensor. */
        ql_quant_src window = from_gguf;
        window.rows = rows_f32 + r0 * RC;
        window.rows_first = r0;
        window.rows_n = n;
        check_range(&window, type, r0, n, "f32 window");
    }
    /* One importance vector for every matrix. */
    expected_bytes(type, false);
    from_f32.imatrix_per_mat = false;
    check_range(&from_f32, type, 30, 20, "shared importance");
}

/* What ql_quant_tensor_rows refuses, and why. */
static void tensor_rows_errors(void)
{
    ql_gguf_tensor gt = rows_tensor();
    ql_quant_src s;
    ql_quant_src_from_f32(&s, gt.ne, rows_f32);
    s.imatrix = rows_imat;
    ql_error err;
    const size_t rs = ql_row_size(QL_TYPE_IQ1_S, RC);
    CHECK_EQ_INT(ql_quant_tensor_rows(&s, QL_TYPE_IQ1_S, 100, 12, got_q, sizeof got_q, &err),
                 QL_EINVAL);
    CHECK_MSG(strstr(err.msg, "outside the 111 rows"), "%s", err.msg);
    CHECK_EQ_INT(ql_quant_tensor_rows(&s, QL_TYPE_IQ1_S, 0, 4, got_q, 4 * rs - 1, &err), QL_EINVAL);
    CHECK_MSG(strstr(err.msg, "smaller than 4 rows"), "%s", err.msg);
    CHECK_EQ_INT(ql_quant_tensor_rows(&s, 999, 0, 1, got_q, sizeof got_q, &err), QL_EINVAL);
    CHECK_MSG(strstr(err.msg, "unknown type id 999"), "%s", err.msg);
    s.imatrix = NULL;
    CHECK_EQ_INT(ql_quant_tensor_rows(&s, QL_TYPE_IQ1_S, 0, 1, got_q, sizeof got_q, &err),
                 QL_EINVAL);
    CHECK_MSG(strstr(err.msg, "importance matrix"), "%s", err.msg);
    /* A window without a tensor: enough for a format without row state, not for a
     * range that starts inside a chunk of IQ1_M. */
    s.rows = rows_f32 + 5 * RC;
    s.rows_first = 5;
    s.rows_n = 3;
    CHECK_OK(ql_quant_tensor_rows(&s, QL_TYPE_Q4_K, 5, 3, got_q, sizeof got_q, &err), &err);
    CHECK_EQ_INT(ql_quant_tensor_rows(&s, QL_TYPE_IQ1_M, 5, 3, got_q, sizeof got_q, &err),
                 QL_EINVAL);
    CHECK_MSG(strstr(err.msg, "rows 0..7 are not among the source rows"), "%s", err.msg);
    /* A source type qlab cannot decode. */
    gt.type = QL_TYPE_I32;
    ql_quant_src_from_gguf(&s, &gt);
    CHECK_EQ_INT(ql_quant_tensor_rows(&s, QL_TYPE_Q4_K, 0, 1, got_q, sizeof got_q, &err),
                 QL_EUNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "ffn_up_exps") && strstr(err.msg, "source type I32"), "%s", err.msg);
}

int main(void)
{
    make_rows();
    tensor_rows(QL_TYPE_IQ1_S);
    tensor_rows(QL_TYPE_IQ1_M);
    tensor_rows(QL_TYPE_Q4_K);
    tensor_rows_errors();

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
