/* make_split IN.gguf PREFIX N [--tensors-count C] [--no K]: writes IN as a split set
 * PREFIX-0000k-of-0000N.gguf the way gguf-split --split writes one (every key in the
 * first file, the split keys split.no (u16), split.count (u16) and
 * split.tensors.count (i32) in every file, the tensors in their order cut into N
 * runs of nearly equal counts), for the tests of split input. --tensors-count writes
 * C instead of the true count and --no K writes split.no K into the second file: the
 * two inconsistencies the reader must refuse. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/gguf.h"

static int fail(const ql_error *err)
{
    fprintf(stderr, "make_split: %s\n", err->msg);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: make_split IN.gguf PREFIX N [--tensors-count C] [--no K]\n");
        return 2;
    }
    int64_t n = 0, count_override = -1, no_override = -1;
    bool ok = ql_parse_i64(argv[3], &n);
    for (int a = 4; ok && a < argc; a += 2) {
        if (a + 1 >= argc)
            ok = false;
        else if (strcmp(argv[a], "--tensors-count") == 0)
            ok = ql_parse_i64(argv[a + 1], &count_override);
        else if (strcmp(argv[a], "--no") == 0)
            ok = ql_parse_i64(argv[a + 1], &no_override);
        else
            ok = false;
    }
    if (!ok) {
        fprintf(stderr, "make_split: malformed arguments\n");
        return 2;
    }
    ql_error err;
    ql_error_clear(&err);
    ql_gguf *g = NULL;
    if (ql_gguf_open(&g, argv[1], &err))
        return fail(&err);
    if (n < 1 || n > g->n_tensors) {
        fprintf(stderr, "make_split: N must be 1..%lld\n", (long long)g->n_tensors);
        return 2;
    }
    int rc = 0;
    for (int k = 0; k < (int)n && !rc; k++) {
        const int64_t t0 = g->n_tensors * k / n, t1 = g->n_tensors * (k + 1) / n;
        char path[4096];
        ql_gguf_split_path(path, sizeof path, argv[2], k, (int)n);
        ql_gguf_writer *w = NULL;
        ql_gguf_value u16 = {.type = QL_GGUF_UINT16};
        ql_status st = ql_gguf_writer_alloc(&w, &err);
        if (!st)
            st = ql_gguf_writer_set_alignment(w, g->alignment, &err);
        if (!st && k == 0)
            st = ql_gguf_writer_copy_kvs(w, g, &err);
        u16.v.u16 = (uint16_t)(k == 1 && no_override >= 0 ? (int)no_override : k);
        if (!st)
            st = ql_gguf_writer_set_kv(w, QL_GGUF_SPLIT_NO, &u16, &err);
        u16.v.u16 = (uint16_t)n;
        if (!st)
            st = ql_gguf_writer_set_kv(w, QL_GGUF_SPLIT_COUNT, &u16, &err);
        if (!st)
            st = ql_gguf_writer_set_i32(
                w, QL_GGUF_SPLIT_TENSORS_COUNT,
                (int32_t)(count_override >= 0 ? count_override : g->n_tensors), &err);
        for (int64_t i = t0; !st && i < t1; i++) {
            const ql_gguf_tensor *t = &g->tensors[i];
            st = ql_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->nbytes, &err);
        }
        if (!st)
            st = ql_gguf_writer_begin(w, path, &err);
        for (int64_t i = t0; !st && i < t1; i++)
            st = ql_gguf_writer_write_tensor(w, g->tensors[i].data, g->tensors[i].nbytes, &err);
        if (!st)
            st = ql_gguf_writer_finish(w, &err);
        ql_gguf_writer_free(w);
        if (st)
            rc = fail(&err);
    }
    ql_gguf_close(g);
    return rc;
}
