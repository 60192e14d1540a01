/* End to end: quantizing stories260K with an importance matrix.
 *
 * 1. With llama-imatrix's file (golden/imatrix), qlab writes the same tensor bytes as
 *    llama-quantize --imatrix did (golden/llamacpp-reference/quantized, the "-imat" files:
 *    output.weight Q8_0 by default, the same type in the -outsame- files; token_embd
 *    and output have no entry and are quantized without, ffn_down falls back to F16),
 *    and the quantize.imatrix.* keys llama-quantize writes.
 * 2. The imatrix-weighted error sum_rows sum_j I_j (w - w^)^2 over the tensors with an
 *    entry is lower when the quantizer gets the imatrix than when it does not (both
 *    weighed by the same imatrix), for the formats whose quantizers use it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/imatrix.h"
#include "formats/types.h"
#include "model/gguf.h"
#include "model/imatrix_io.h"
#include "model/quant_model.h"
#include "qltest.h"

#define GOLDEN_IMATRIX "golden/imatrix/imatrix-stories260K-tscalib-c128.dat"

static const struct {
    const char *file;
    const char *type;
    const char *head; /* NULL: same as type */
} refs[] = {
    {"stories260K-IQ4_NL-imat.gguf", "IQ4_NL", "Q8_0"},
    {"stories260K-IQ4_NL-outsame-imat.gguf", "IQ4_NL", NULL},
    {"stories260K-Q4_0-imat.gguf", "Q4_0", "Q8_0"},
    {"stories260K-Q4_0-outsame-imat.gguf", "Q4_0", NULL},
    {"stories260K-Q4_1-imat.gguf", "Q4_1", "Q8_0"},
    {"stories260K-Q4_1-outsame-imat.gguf", "Q4_1", NULL},
    {"stories260K-Q5_0-imat.gguf", "Q5_0", "Q8_0"},
    {"stories260K-Q5_0-outsame-imat.gguf", "Q5_0", NULL},
    {"stories260K-Q5_1-imat.gguf", "Q5_1", "Q8_0"},
    {"stories260K-Q5_1-outsame-imat.gguf", "Q5_1", NULL},
    /* Every row falls back (64 and 172 wide): to IQ4_NL with the imatrix, or Q8_0. */
    {"stories260K-IQ4_XS-imat.gguf", "IQ4_XS", "Q8_0"},
    {"stories260K-Q2_K-imat.gguf", "Q2_K", "Q8_0"},
    {"stories260K-Q6_K-imat.gguf", "Q6_K", "Q8_0"},
};

typedef struct {
    ql_imatrix *im;
    ql_imatrix_table *table;
    ql_gguf *model;
} fixture;

static ql_status quantize(const fixture *fx, const char *model, const char *out, int32_t type,
                          int32_t head, bool with_imatrix, bool stats,
                          const ql_quant_imatrix_meta *meta, ql_quant_model_report **r)
{
    ql_quant_model_opts opts = {
        .cfg = {.weight_type = type, .head_type = head, .embd_type = QL_TYPE_INVALID},
        .imatrix = with_imatrix ? ql_imatrix_table_lookup : NULL,
        .imatrix_ctx = with_imatrix ? fx->table : NULL,
        .stats = stats,
        .quiet = true,
        .stats_imatrix = stats ? ql_imatrix_table_lookup : NULL,
        .stats_imatrix_ctx = stats ? fx->table : NULL,
        .imatrix_meta = meta};
    ql_error err;
    ql_status st = ql_quant_model(model, out, &opts, r, &err);
    CHECK_OK(st, &err);
    return st;
}

static void compare_with_reference(const fixture *fx, const char *model, const char *dir, int k)
{
    char ref_path[4096 + 64], out_path[4096];
    snprintf(ref_path, sizeof ref_path, "%s/%s", dir, refs[k].file);
    snprintf(out_path, sizeof out_path, "%s/imat%d.gguf", qlt_tmpdir(), k);
    ql_quant_imatrix_meta meta = {"imatrix.dat", "ts_calib.txt", fx->im->n_entries,
                                  fx->im->chunk_count};
    ql_quant_model_report *r = NULL;
    if (quantize(fx, model, out_path, ql_type_by_name(refs[k].type)->type,
                 refs[k].head ? ql_type_by_name(refs[k].head)->type : QL_TYPE_INVALID, true, false,
                 &meta, &r))
        return;
    ql_error err;
    ql_gguf *ref = NULL, *out = NULL;
    CHECK_OK(ql_gguf_open(&ref, ref_path, &err), &err);
    CHECK_OK(ql_gguf_open(&out, out_path, &err), &err);
    if (!ref || !out)
        goto done;
    int same = qlt_same_tensors(out, ref, refs[k].file), with_imat = 0;
    for (int64_t i = 0; i < out->n_tensors; i++) {
        const ql_gguf_tensor *a = &out->tensors[i];
        with_imat += r->has_imatrix[i];
        /* token_embd and output have no entry: quantized without, as llama-quantize. */
        if (strcmp(a->name, "token_embd.weight") == 0 || strcmp(a->name, "output.weight") == 0)
            CHECK_MSG(!r->has_imatrix[i], "%s: %s used an imatrix", refs[k].file, a->name);
    }
    /* The 35 entries are the 5 x 7 block products, all converted (ffn_down to F16). */
    CHECK_EQ_INT(with_imat, 35);
    printf("%-38s %d/%lld tensors bit-identical to llama-quantize --imatrix\n", refs[k].file, same,
           (long long)out->n_tensors);
    /* The keys llama-quantize writes, with its value types (str, str, i32, i32). */
    const char *file = ql_gguf_get_str(out, "quantize.imatrix.file", NULL);
    const char *dataset = ql_gguf_get_str(out, "quantize.imatrix.dataset", NULL);
    CHECK(file && strcmp(file, "imatrix.dat") == 0);
    CHECK(dataset && strcmp(dataset, "ts_calib.txt") == 0);
    static const char *const counts[] = {"quantize.imatrix.entries_count",
                                         "quantize.imatrix.chunks_count"};
    for (int c = 0; c < 2; c++) {
        const ql_gguf_kv *a = ql_gguf_find_kv(out, counts[c]), *b = ql_gguf_find_kv(ref, counts[c]);
        CHECK_MSG(a && b && a->value.type == QL_GGUF_INT32 && b->value.type == QL_GGUF_INT32 &&
                      a->value.v.i32 == b->value.v.i32,
                  "%s: key %s differs from llama-quantize's", refs[k].file, counts[c]);
    }
done:
    ql_gguf_close(ref);
    ql_gguf_close(out);
    ql_quant_model_report_free(r);
}

/* Weighted error with and without the imatrix in the quantizer, weighed alike. */
static void weighted_error_lower(const fixture *fx, const char *model, const char *type_name)
{
    int32_t type = ql_type_by_name(type_name)->type;
    char out_path[4096];
    snprintf(out_path, sizeof out_path, "%s/werr.gguf", qlt_tmpdir());
    ql_quant_model_report *with = NULL, *without = NULL;
    if (quantize(fx, model, out_path, type, QL_TYPE_INVALID, true, true, NULL, &with) ||
        quantize(fx, model, out_path, type, QL_TYPE_INVALID, false, true, NULL, &without)) {
        ql_quant_model_report_free(with);
        ql_quant_model_report_free(without);
        return;
    }
    const ql_weight_error *a = &with->total, *b = &without->total;
    CHECK(a->weighted && b->weighted);
    /* The imatrix terms cover the 35 entries' tensors: 5 layers x (64x64 x 2 + 64x32 x 2
     * + 64x172 x 2 + 172x64) = 226,560 weights. */
    CHECK_EQ_INT(a->w_n, 226560);
    CHECK_EQ_INT(b->w_n, 226560);
    printf("%-7s imatrix-weighted error: %.6e with the imatrix, %.6e without (relative %.4e vs "
           "%.4e, %.1f%% lower)\n",
           type_name, a->w_sse, b->w_sse, ql_weight_error_rel(a), ql_weight_error_rel(b),
           100.0 * (1.0 - a->w_sse / b->w_sse));
    CHECK_MSG(a->w_sse < b->w_sse, "%s: weighted error %.6e with the imatrix, %.6e without",
              type_name, a->w_sse, b->w_sse);
    CHECK(ql_weight_error_rel(a) < ql_weight_error_rel(b));
    ql_quant_model_report_free(with);
    ql_quant_model_report_free(without);
}

int main(void)
{
    const char *model = qlt_shared("models/stories260K.gguf");
    if (!ql_file_exists(model))
        qlt_skip("../shared/models/stories260K.gguf not found");
    fixture fx = {NULL, NULL, NULL};
    ql_error err;
    ql_status st = ql_imatrix_read(qlt_shared(GOLDEN_IMATRIX), &fx.im, &err);
    CHECK_OK(st, &err);
    if (!st)
        CHECK_OK(st = ql_gguf_open(&fx.model, model, &err), &err);
    if (!st)
        CHECK_OK(st = ql_imatrix_table_alloc(&fx.table, fx.im, fx.model, &err), &err);
    if (!st) {
        CHECK_EQ_INT(ql_imatrix_table_n_matched(fx.table), 35);
        CHECK(ql_imatrix_table_skipped(fx.table) == NULL);
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", qlt_shared("golden/llamacpp-reference/quantized"));
        for (size_t k = 0; k < sizeof refs / sizeof refs[0]; k++)
            compare_with_reference(&fx, model, dir, (int)k);
        const char *types[] = {"Q4_0", "IQ4_NL", "Q4_1", "Q5_0", "Q5_1"};
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
            weighted_error_lower(&fx, model, types[k]);
    }
    ql_imatrix_table_free(fx.table);
    ql_imatrix_free(fx.im);
    ql_gguf_close(fx.model);
    return qlt_done();
}
