/* libFuzzer target for the GGUF reader (see tests/fuzz/README.md).
 *
 * Every input goes through ql_gguf_open_buffer(). An input the reader accepts is
 * then used the way qlab uses a model file: every key is looked up, copied,
 * compared and freed, every tensor's shape is taken and the first and last byte of
 * its data are touched (libFuzzer's input buffer is exactly `size` bytes, so ASan
 * catches a data pointer the reader let escape the file), and the writer is fed
 * the whole header to check it agrees with what the reader accepted; then the
 * header is read as a model's (hyper-parameters against the tensors, tokenizer). A
 * rejected input must come with a message naming the buffer. Any crash, leak, sanitizer
 * report or failed invariant (abort) is a finding. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/types.h"
#include "model/gguf.h"
#include "model/hparams.h"
#include "model/tokenizer.h"

#define FUZZ_NAME "fuzz-input.gguf"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_gguf: invariant failed: %s\n", what);
        abort();
    }
}

static void exercise(const ql_gguf *g)
{
    ql_error err;
    volatile uint8_t sink = 0;
    for (int64_t i = 0; i < g->n_kv; i++) {
        const ql_gguf_kv *kv = &g->kv[i];
        check(ql_gguf_find_kv(g, kv->key) == kv, "keys are unique and found");
        ql_gguf_value copy;
        check(ql_gguf_value_copy(&copy, &kv->value, &err) == QL_OK, "an accepted value copies");
        check(ql_gguf_value_equal(&copy, &kv->value), "a copy equals its source");
        ql_gguf_value_deinit(&copy);
        uint32_t u32;
        int64_t i64;
        float f32;
        bool b;
        (void)ql_gguf_get_u32(g, kv->key, &u32, &err);
        (void)ql_gguf_get_i64(g, kv->key, &i64, &err);
        (void)ql_gguf_get_f32(g, kv->key, &f32, &err);
        (void)ql_gguf_get_bool(g, kv->key, &b, &err);
        (void)ql_gguf_get_str(g, kv->key, &err);
        (void)ql_gguf_get_arr(g, kv->key, QL_GGUF_STRING, &err);
    }
    check(g->alignment > 0 && (g->alignment & (g->alignment - 1)) == 0, "alignment power of two");
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        check(ql_gguf_find_tensor(g, t->name) == t, "tensor names are unique and found");
        check(t->n_dims >= 1 && t->n_dims <= QL_GGUF_MAX_DIMS, "n_dims in range");
        int64_t shape[QL_GGUF_MAX_DIMS];
        check(ql_gguf_tensor_shape(t, shape) == t->n_dims, "shape has n_dims entries");
        check(ql_gguf_tensor_nelements(t) >= 0, "element count fits int64");
        check(t->offset % g->alignment == 0, "offset aligned");
        if (ql_gguf_type_known(t->type)) {
            /* nbytes = elements / block size x bytes per block, computed without overflow. */
            const ql_type_traits *tr = ql_type_get(t->type);
            unsigned __int128 want = (unsigned __int128)(uint64_t)ql_gguf_tensor_nelements(t) /
                                     (unsigned __int128)tr->block_size * tr->type_size;
            check(want == t->nbytes, "tensor byte size matches its shape and type");
            check(t->data != NULL, "a tensor of a known type has data");
        } else {
            check(t->data == NULL && t->nbytes == 0, "unknown types have no size and no data");
        }
        if (t->data && t->nbytes) {
            const uint8_t *p = t->data;
            sink ^= p[0];
            sink ^= p[t->nbytes - 1];
        }
    }
    (void)sink;

    /* The writer must accept everything the reader accepted. */
    ql_gguf_writer *w = NULL;
    check(ql_gguf_writer_alloc(&w, &err) == QL_OK, "writer alloc");
    check(ql_gguf_writer_set_alignment(w, g->alignment, &err) == QL_OK, "writer alignment");
    check(ql_gguf_writer_copy_kvs(w, g, &err) == QL_OK, "writer takes the keys");
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        if (!ql_gguf_type_known(t->type))
            continue;
        check(ql_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->nbytes, &err) ==
                  QL_OK,
              "writer takes the tensors");
    }
    (void)ql_gguf_writer_file_size(w);
    ql_gguf_writer_free(w);
}

/* An accepted container read as a model header: the hyper-parameters (checked
 * against the tensors before anything is sized by them) and the tokenizer. A
 * refusal names the file; accepted counts must agree with what the file holds. */
static void model_header(const ql_gguf *g)
{
    ql_error err;
    ql_error_clear(&err);
    ql_hparams hp;
    if (ql_hparams_read(g, &hp, &err) != QL_OK) {
        check(strncmp(err.msg, FUZZ_NAME ": ", strlen(FUZZ_NAME) + 2) == 0,
              "a hyper-parameter error names the file");
    } else {
        check(hp.n_layer >= 1 && hp.n_layer <= g->n_tensors, "every block has tensors");
        const ql_gguf_tensor *emb = ql_gguf_find_tensor(g, "token_embd.weight");
        check(emb && emb->ne[0] == hp.n_embd && emb->ne[1] == hp.n_vocab, "vocabulary rows");
        check(hp.n_head >= 1 && hp.n_head_kv >= 1 && hp.n_head % hp.n_head_kv == 0, "heads");
        check(hp.head_dim >= 1 && hp.n_rot % 2 == 0 && hp.n_rot <= hp.head_dim, "head size");
        check(isfinite(hp.norm_eps) && hp.norm_eps > 0 && isfinite(hp.rope_freq_base) &&
                  hp.rope_freq_base >= 1 && isfinite(hp.rope_freq_scale) && hp.rope_freq_scale > 0,
              "finite hyper-parameters");
    }
    ql_tokenizer *tok = NULL;
    ql_error_clear(&err);
    if (ql_tokenizer_from_gguf(&tok, g, &err) != QL_OK)
        check(tok == NULL && strncmp(err.msg, FUZZ_NAME ": ", strlen(FUZZ_NAME) + 2) == 0,
              "a tokenizer error names the file");
    else
        check(ql_tokenizer_n_vocab(tok) >= 1, "a tokenizer has tokens");
    ql_tokenizer_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ql_gguf *g = NULL;
    ql_error err;
    ql_error_clear(&err);
    ql_status st = ql_gguf_open_buffer(&g, data, size, FUZZ_NAME, &err);
    if (st != QL_OK) {
        check(g == NULL, "no object on failure");
        check(strncmp(err.msg, FUZZ_NAME ": ", strlen(FUZZ_NAME) + 2) == 0,
              "the message names the file");
        return 0;
    }
    exercise(g);
    model_header(g);
    ql_gguf_close(g);
    return 0;
}
