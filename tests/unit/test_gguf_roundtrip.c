/* Round trip of the real stories260K.gguf through the writer: copy every key,
 * stream every tensor, re-read. Keys (besides the general.alignment the writer
 * always adds), values, tensor names, types, shapes and bytes must be identical,
 * and so must the whole data section, since the layout rules are ggml's. */
#include <string.h>

#include "model/gguf.h"
#include "qltest.h"

int main(void)
{
    const char *src_path = qlt_shared("models/stories260K.gguf");
    char out_path[512];
    snprintf(out_path, sizeof out_path, "%s/roundtrip.gguf", qlt_tmpdir());
    ql_error err;
    ql_gguf *src = NULL, *dst = NULL;
    ql_gguf_writer *w = NULL;
    ql_status st = ql_gguf_open(&src, src_path, &err);
    CHECK_OK(st, &err);
    if (st)
        return qlt_done();

    CHECK_OK(ql_gguf_writer_alloc(&w, &err), &err);
    CHECK_OK(ql_gguf_writer_set_alignment(w, src->alignment, &err), &err);
    CHECK_OK(ql_gguf_writer_copy_kvs(w, src, &err), &err);
    for (int64_t i = 0; i < src->n_tensors; i++) {
        const ql_gguf_tensor *t = &src->tensors[i];
        st = ql_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->nbytes, &err);
        CHECK_OK(st, &err);
    }
    uint64_t predicted = ql_gguf_writer_file_size(w);
    CHECK_OK(ql_gguf_writer_begin(w, out_path, &err), &err);
    for (int64_t i = 0; i < src->n_tensors; i++) {
        const ql_gguf_tensor *t = &src->tensors[i];
        CHECK_OK(ql_gguf_writer_write_tensor(w, t->data, t->nbytes, &err), &err);
    }
    CHECK_OK(ql_gguf_writer_finish(w, &err), &err);
    ql_gguf_writer_free(w);

    st = ql_gguf_open(&dst, out_path, &err);
    CHECK_OK(st, &err);
    if (st) {
        ql_gguf_close(src);
        return qlt_done();
    }
    CHECK_EQ_INT(dst->file_size, predicted);
    CHECK_EQ_INT(dst->version, 3);
    CHECK_EQ_INT(dst->alignment, src->alignment);

    /* Keys: general.alignment first (the writer's own), then the source's in order. */
    CHECK_EQ_INT(dst->n_kv, src->n_kv + 1);
    uint32_t align = 0;
    CHECK(ql_gguf_get_u32(dst, "general.alignment", &align, &err) && align == 32);
    CHECK(strcmp(dst->kv[0].key, "general.alignment") == 0);
    CHECK_EQ_INT(dst->kv[0].value.type, QL_GGUF_UINT32);
    for (int64_t i = 0; i < src->n_kv && i + 1 < dst->n_kv; i++) {
        const ql_gguf_kv *a = &src->kv[i], *b = &dst->kv[i + 1];
        CHECK_MSG(strcmp(a->key, b->key) == 0, "key %lld: '%s' vs '%s'", (long long)i, a->key,
                  b->key);
        CHECK_MSG(ql_gguf_value_equal(&a->value, &b->value), "key '%s' differs", a->key);
    }

    /* Tensors: same table, same bytes; the data sections are byte-identical. */
    CHECK_EQ_INT(dst->n_tensors, src->n_tensors);
    for (int64_t i = 0; i < src->n_tensors && i < dst->n_tensors; i++) {
        const ql_gguf_tensor *a = &src->tensors[i], *b = &dst->tensors[i];
        CHECK_MSG(strcmp(a->name, b->name) == 0, "tensor %lld: '%s' vs '%s'", (long long)i, a->name,
                  b->name);
        CHECK_EQ_INT(a->type, b->type);
        CHECK_EQ_INT(a->n_dims, b->n_dims);
        for (int d = 0; d < QL_GGUF_MAX_DIMS; d++)
            CHECK_EQ_INT(a->ne[d], b->ne[d]);
        CHECK_EQ_INT(a->nbytes, b->nbytes);
        CHECK_EQ_INT(a->offset, b->offset);
        CHECK_MSG(memcmp(a->data, b->data, a->nbytes) == 0, "tensor '%s' data differs", a->name);
    }
    uint64_t src_data = src->file_size - src->data_offset;
    uint64_t dst_data = dst->file_size - dst->data_offset;
    CHECK_EQ_INT(src_data, dst_data);
    if (src_data == dst_data)
        CHECK(memcmp((const char *)src->map + src->data_offset,
                     (const char *)dst->map + dst->data_offset, src_data) == 0);

    /* Writing the re-read file again is a fixed point: byte-identical to the first copy. */
    char out2[512];
    snprintf(out2, sizeof out2, "%s/roundtrip2.gguf", qlt_tmpdir());
    CHECK_OK(ql_gguf_writer_alloc(&w, &err), &err);
    CHECK_OK(ql_gguf_writer_copy_kvs(w, dst, &err), &err);
    for (int64_t i = 0; i < dst->n_tensors; i++) {
        const ql_gguf_tensor *t = &dst->tensors[i];
        CHECK_OK(ql_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->nbytes, &err),
                 &err);
    }
    CHECK_OK(ql_gguf_writer_begin(w, out2, &err), &err);
    for (int64_t i = 0; i < dst->n_tensors; i++)
        CHECK_OK(ql_gguf_writer_write_tensor(w, dst->tensors[i].data, dst->tensors[i].nbytes, &err),
                 &err);
    CHECK_OK(ql_gguf_writer_finish(w, &err), &err);
    ql_gguf_writer_free(w);
    size_t n1, n2;
    void *b1 = qlt_read_file(out_path, &n1), *b2 = qlt_read_file(out2, &n2);
    CHECK(n1 == n2 && memcmp(b1, b2, n1) == 0);
    free(b1);
    free(b2);

    ql_gguf_close(dst);
    ql_gguf_close(src);
    remove(out_path);
    remove(out2);
    return qlt_done();
}
