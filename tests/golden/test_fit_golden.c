/* Fitted stories260K models against llama-quantize's output.
 *
 * With the candidates {T, F16} and a budget equal to the tensor bytes of
 * llama-quantize's file for type T with the output in T too (Q8_0 is that way by
 * default), the only assignment that fits is that file's own: every tensor T, the
 * 172-wide ffn_down F16. The fitted GGUF must then hold the same tensors with
 * byte-identical data (qlab keeps the source model's tensor order; llama-quantize
 * sorts them by layer and name, which loaders do not care about), every metadata
 * key of llama-quantize's file with the same value (general.file_type and the
 * quantize.imatrix.* provenance included; only the imatrix file name differs, as
 * llama-quantize records the path it was given), and nothing else but
 * general.alignment and qlab's own qlab.fit.* keys: the file llama.cpp wrote and
 * loads, plus provenance. With an imatrix this also checks that every tensor got
 * its own entry, as llama-quantize hands them out. */
#include <gsl/gsl_errno.h>
#include <string.h>

#include "experiment/fit.h"
#include "model/gguf.h"
#include "qltest.h"

static const char *const IMATRIX = "golden/imatrix/imatrix-stories260K-tscalib-c128.dat";

static void compare(const ql_gguf *model, const char *ref_name, const char *types,
                    bool with_imatrix)
{
    ql_error err;
    char rel[256];
    snprintf(rel, sizeof rel, "golden/llamacpp-reference/quantized/%s", ref_name);
    ql_gguf *ref = NULL, *out = NULL;
    CHECK_OK(ql_gguf_open(&ref, qlt_shared(rel), &err), &err);
    ql_fit_imatrix *im = NULL;
    if (with_imatrix)
        CHECK_OK(ql_fit_imatrix_open(qlt_shared(IMATRIX), &im, &err), &err);
    if (!ref || (with_imatrix && !im)) {
        ql_gguf_close(ref);
        return;
    }
    const ql_fit_importance *imp = im ? ql_fit_imatrix_importance(im) : NULL;
    uint64_t ref_bytes = 0;
    for (int64_t i = 0; i < ref->n_tensors; i++)
        ref_bytes += ref->tensors[i].nbytes;

    ql_fit_options o;
    ql_fit_options_init(&o);
    o.types = types;
    o.cache_dir = "";
    o.quiet = true;
    ql_fit_budget b = {QL_FIT_BUDGET_BYTES, ref_bytes, 0};
    ql_fit_table *t = NULL;
    ql_fit_plan *p = NULL;
    CHECK_OK(ql_fit_plan_model(model, NULL, imp, &b, &o, &t, &p, &err), &err);
    char path[512];
    snprintf(path, sizeof path, "%s/fit-%s", qlt_tmpdir(), ref_name);
    if (p) {
        CHECK_EQ_INT(p->bytes, ref_bytes);
        CHECK_OK(ql_fit_write(model, p, imp, NULL, path, true, &err), &err);
        CHECK_OK(ql_gguf_open(&out, path, &err), &err);
    }
    if (out) {
        CHECK_EQ_INT(qlt_same_tensors(out, ref, ref_name), ref->n_tensors);
        for (int64_t i = 0; i < ref->n_kv; i++) {
            const ql_gguf_kv *k = ql_gguf_find_kv(out, ref->kv[i].key);
            CHECK_MSG(k != NULL, "%s: key %s missing", ref_name, ref->kv[i].key);
            if (!k || strcmp(k->key, "quantize.imatrix.file") == 0)
                continue;
            CHECK_MSG(ql_gguf_value_equal(&k->value, &ref->kv[i].value),
                      "%s: key %s has another value", ref_name, k->key);
        }
        for (int64_t i = 0; i < out->n_kv; i++) {
            const char *key = out->kv[i].key;
            CHECK_MSG(ql_gguf_find_kv(ref, key) || strcmp(key, "general.alignment") == 0 ||
                          strncmp(key, "qlab.fit.", 9) == 0,
                      "%s: unexpected key %s", ref_name, key);
        }
    }
    ql_gguf_close(out);
    ql_fit_plan_free(p);
    ql_fit_table_free(t);
    ql_fit_imatrix_free(im);
    ql_gguf_close(ref);
}

int main(void)
{
    gsl_set_error_handler_off();
    ql_error err;
    ql_gguf *model = NULL;
    CHECK_OK(ql_gguf_open(&model, qlt_shared("models/stories260K.gguf"), &err), &err);
    if (!model)
        return qlt_done();
    compare(model, "stories260K-Q8_0.gguf", "Q8_0,F16", false);
    compare(model, "stories260K-Q4_0-outsame.gguf", "Q4_0,F16", false);
    compare(model, "stories260K-Q4_0-outsame-imat.gguf", "Q4_0,F16", true);
    compare(model, "stories260K-Q5_1-outsame-imat.gguf", "Q5_1,F16", true);
    compare(model, "stories260K-IQ4_NL-outsame-imat.gguf", "IQ4_NL,F16", true);
    ql_gguf_close(model);
    return qlt_done();
}
