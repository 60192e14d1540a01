/* GGUF reader on the real stories260K file: header, keys, tensor table, data pointers. */
#include <math.h>
#include <string.h>

#include "formats/types.h"
#include "model/gguf.h"
#include "qltest.h"

/* The names of a split set's files, as llama.cpp's llama_split_path and
 * llama_split_prefix make and read them. */
static void split_names(void)
{
    char buf[64], prefix[64];
    int k = -1, n = -1;
    CHECK(ql_gguf_split_path(buf, sizeof buf, "m/q", 1, 4) &&
          strcmp(buf, "m/q-00002-of-00004.gguf") == 0);
    CHECK(!ql_gguf_split_path(buf, 16, "m/q", 1, 4)); /* does not fit */
    CHECK(ql_gguf_split_prefix("m/q-00002-of-00004.gguf", prefix, sizeof prefix, &k, &n) &&
          strcmp(prefix, "m/q") == 0 && k == 1 && n == 4);
    CHECK(ql_gguf_split_prefix("a-b-00001-of-00001.gguf", prefix, sizeof prefix, &k, &n) &&
          strcmp(prefix, "a-b") == 0 && k == 0 && n == 1);
    CHECK(ql_gguf_split_prefix("x-123456-of-123456.gguf", prefix, sizeof prefix, &k, &n) &&
          k == 123455 && n == 123456); /* %05d grows */
    CHECK(!ql_gguf_split_prefix("x-0001-of-00004.gguf", prefix, sizeof prefix, &k, &n));
    CHECK(!ql_gguf_split_prefix("x-00005-of-00004.gguf", prefix, sizeof prefix, &k, &n));
    CHECK(!ql_gguf_split_prefix("x-00000-of-00004.gguf", prefix, sizeof prefix, &k, &n));
    CHECK(!ql_gguf_split_prefix("x-00001-of-00004.bin", prefix, sizeof prefix, &k, &n));
    CHECK(!ql_gguf_split_prefix("00001-of-00004.gguf", prefix, sizeof prefix, &k, &n));
    CHECK(!ql_gguf_split_prefix("model.gguf", prefix, sizeof prefix, &k, &n));
}

int main(void)
{
    split_names();
    const char *path = qlt_shared("models/stories260K.gguf");
    ql_error err;
    ql_gguf *g = NULL;
    ql_status st = ql_gguf_open(&g, path, &err);
    CHECK_OK(st, &err);
    if (st)
        return qlt_done();
    CHECK_EQ_INT(g->version, 3);
    CHECK_EQ_INT(g->n_kv, 19);
    CHECK_EQ_INT(g->n_tensors, 48);
    CHECK_EQ_INT(g->alignment, 32);
    CHECK_EQ_INT(g->data_offset, 14176);
    uint32_t n_layer = 0;
    CHECK(ql_gguf_get_u32(g, "llama.block_count", &n_layer, &err));
    CHECK_EQ_INT(n_layer, 5);
    float eps = 0;
    CHECK(ql_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps, &err));
    CHECK_NEAR(eps, 1e-5, 1e-9);
    const char *arch = ql_gguf_get_str(g, "general.architecture", &err);
    CHECK(arch && strcmp(arch, "llama") == 0);
    const ql_gguf_array *tok = ql_gguf_get_arr(g, "tokenizer.ggml.tokens", QL_GGUF_STRING, &err);
    CHECK(tok && tok->n == 512);
    if (tok)
        CHECK(strcmp(((ql_gguf_str *)tok->data)[1].ptr, "<s>") == 0);
    const ql_gguf_tensor *t = ql_gguf_find_tensor(g, "blk.0.ffn_down.weight");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(t->ne[0], 172);
        CHECK_EQ_INT(t->ne[1], 64);
        CHECK_EQ_INT(t->type, QL_TYPE_F32);
        CHECK_EQ_INT(t->nbytes, 44032);
        int64_t shape[4];
        CHECK_EQ_INT(ql_gguf_tensor_shape(t, shape), 2);
        CHECK_EQ_INT(shape[0], 64);
        CHECK_EQ_INT(shape[1], 172);
    }
    uint64_t total = 0;
    int64_t params = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        total += g->tensors[i].nbytes;
        params += ql_gguf_tensor_nelements(&g->tensors[i]);
    }
    CHECK_EQ_INT(total, 1171200);
    CHECK_EQ_INT(params, 292800);
    /* Last tensor ends exactly at the end of the file. */
    const ql_gguf_tensor *last = &g->tensors[g->n_tensors - 1];
    CHECK_EQ_INT(g->data_offset + last->offset + last->nbytes, g->file_size);
    /* output_norm min value from the listing: 0.972. */
    const ql_gguf_tensor *on = ql_gguf_find_tensor(g, "output_norm.weight");
    float mn = 1e9f;
    for (int i = 0; i < 64; i++) {
        float v;
        memcpy(&v, (const char *)on->data + 4 * i, 4);
        if (v < mn)
            mn = v;
    }
    CHECK_NEAR(mn, 0.972, 0.001);
    ql_gguf_close(g);

    /* Opening a missing file is an error naming it. */
    st = ql_gguf_open(&g, "/nonexistent/x.gguf", &err);
    CHECK(st == QL_EIO && g == NULL && strstr(err.msg, "/nonexistent/x.gguf"));
    return qlt_done();
}
