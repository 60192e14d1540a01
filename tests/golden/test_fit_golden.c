/* A fitted stories260K against llama-quantize's output.
 *
 * With the candidates {Q8_0, F16} and a budget equal to the tensor bytes of
 * llama-quantize's Q8_0 file, the only assignment that fits is that file's own
 * (every tensor Q8_0, the 172-wide ffn_down F16). The fitted GGUF must then hold
 * the same tensors with byte-identical data (qlab keeps the source model's tensor
 * order; llama-quantize sorts them by layer and name, which loaders do not care
 * about), every metadata
 * key of llama-quantize's file with the same value (general.file_type included),
 * and nothing else but general.alignment and qlab's own qlab.fit.* keys: the file
 * llama.cpp wrote and loads, plus provenance. */
#include <gsl/gsl_errno.h>
#include <string.h>

#include "fit.h"
#include "gguf.h"
#include "qltest.h"

int main(void)
{
    gsl_set_error_handler_off();
    if (!ql_type_get(QL_TYPE_Q8_0)->quantize || !ql_type_get(QL_TYPE_F16)->quantize)
        qlt_skip("the quantization formats are not implemented in this build");
    ql_error err;
    ql_gguf *model = NULL, *ref = NULL, *out = NULL;
    CHECK_OK(ql_gguf_open(&model, qlt_shared("models/stories260K.gguf"), &err), &err);
    CHECK_OK(ql_gguf_open(&ref,
                          qlt_shared("golden/llamacpp-reference/quantized/stories260K-Q8_0.gguf"),
                          &err),
             &err);
    if (!model || !ref)
        return qlt_done();
    uint64_t ref_bytes = 0;
    for (int64_t i = 0; i < ref->n_tensors; i++)
        ref_bytes += ref->tensors[i].nbytes;

    ql_fit_options o;
    ql_fit_options_init(&o);
    o.types = "Q8_0,F16";
    o.cache_dir = "";
    o.quiet = true;
    ql_fit_budget b = {QL_FIT_BUDGET_BYTES, ref_bytes, 0};
    ql_fit_table *t = NULL;
    ql_fit_plan *p = NULL;
    CHECK_OK(ql_fit_plan_model(model, NULL, NULL, &b, &o, &t, &p, &err), &err);
    if (!p)
        return qlt_done();
    CHECK_EQ_INT(p->bytes, ref_bytes);
    char path[512];
    snprintf(path, sizeof path, "%s/stories260K-fit-q8_0.gguf", qlt_tmpdir());
    CHECK_OK(ql_fit_write(model, p, NULL, path, true, &err), &err);
    CHECK_OK(ql_gguf_open(&out, path, &err), &err);
    if (out) {
        CHECK_EQ_INT(out->n_tensors, ref->n_tensors);
        for (int64_t i = 0; i < ref->n_tensors; i++) {
            const ql_gguf_tensor *r = &ref->tensors[i];
            const ql_gguf_tensor *f = ql_gguf_find_tensor(out, r->name);
            CHECK_MSG(f != NULL, "tensor %s missing", r->name);
            if (!f)
                continue;
            CHECK_MSG(r->type == f->type && r->nbytes == f->nbytes &&
                          memcmp(r->data, f->data, (size_t)r->nbytes) == 0,
                      "%s: %s %llu bytes (llama-quantize) vs %s %llu bytes (fit), or data differ",
                      r->name, ql_type_name(r->type), (unsigned long long)r->nbytes,
                      ql_type_name(f->type), (unsigned long long)f->nbytes);
        }
        for (int64_t i = 0; i < ref->n_kv; i++) {
            const ql_gguf_kv *k = ql_gguf_find_kv(out, ref->kv[i].key);
            CHECK_MSG(k != NULL, "key %s missing", ref->kv[i].key);
            if (k && k->value.type != QL_GGUF_ARRAY && k->value.type != QL_GGUF_STRING)
                CHECK_MSG(k->value.type == ref->kv[i].value.type &&
                              memcmp(&k->value.v, &ref->kv[i].value.v,
                                     ql_gguf_vtype_size(k->value.type)) == 0,
                          "key %s has another value", k->key);
            if (k && k->value.type == QL_GGUF_STRING)
                CHECK_MSG(strcmp(k->value.v.str.ptr, ref->kv[i].value.v.str.ptr) == 0,
                          "key %s: '%s' vs '%s'", k->key, k->value.v.str.ptr,
                          ref->kv[i].value.v.str.ptr);
            if (k && k->value.type == QL_GGUF_ARRAY)
                CHECK_MSG(k->value.v.arr.n == ref->kv[i].value.v.arr.n, "key %s: length differs",
                          k->key);
        }
        for (int64_t i = 0; i < out->n_kv; i++) {
            const char *key = out->kv[i].key;
            CHECK_MSG(ql_gguf_find_kv(ref, key) || strcmp(key, "general.alignment") == 0 ||
                          strncmp(key, "qlab.fit.", 9) == 0,
                      "unexpected key %s", key);
        }
    }
    ql_gguf_close(out);
    ql_fit_plan_free(p);
    ql_fit_table_free(t);
    ql_gguf_close(ref);
    ql_gguf_close(model);
    return qlt_done();
}
