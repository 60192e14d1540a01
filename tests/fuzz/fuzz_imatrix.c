/* libFuzzer target for the importance-matrix reader and validator (.dat and GGUF),
 * see tests/fuzz/README.md. An accepted input must give every entry's importance at
 * its own length, within the range the quantizers can use, and refuse any other
 * length; degenerate entries must be dropped and warned about; a rejected input must
 * name the file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/imatrix_io.h"

#define FUZZ_NAME "fuzz-input.imatrix"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_imatrix: invariant failed: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ql_imatrix *im = NULL;
    ql_error err;
    ql_error_clear(&err);
    if (ql_imatrix_read_buffer(data, size, FUZZ_NAME, &im, &err) != QL_OK) {
        check(im == NULL, "no object on failure");
        check(strncmp(err.msg, FUZZ_NAME ": ", strlen(FUZZ_NAME) + 2) == 0,
              "the message names the file");
        return 0;
    }
    check(im->n_entries + im->n_dropped >= 1, "at least one entry");
    for (int64_t i = 0; i < im->n_entries; i++) {
        const ql_imatrix_entry *e = &im->entries[i];
        check(e->n_mat >= 1 && e->n_values % e->n_mat == 0, "values per matrix");
        check(ql_imatrix_find(im, e->name) == e, "names unique");
        float *w = malloc((size_t)e->n_values * sizeof *w);
        check(w != NULL, "allocation");
        check(ql_imatrix_weights(im, e->name, e->n_values, w, &err) == QL_OK, "weights");
        /* Read entries are validated: importances a quantizer can use, none degenerate. */
        for (int64_t j = 0; j < e->n_values; j++)
            check(w[j] >= 0.0f && w[j] <= QL_IMATRIX_IMPORTANCE_MAX, "importance in range");
        check(ql_imatrix_weights(im, e->name, e->n_values + 1, w, &err) == QL_EFORMAT,
              "wrong length refused");
        free(w);
    }
    char warning[QL_ERROR_MSG_MAX];
    check(ql_imatrix_dropped_warning(im, warning, sizeof warning) == (im->n_dropped > 0),
          "a warning exactly when entries were dropped");
    for (int64_t i = 0; i < im->n_dropped; i++)
        check(ql_imatrix_find(im, im->dropped[i]) == NULL, "dropped entries are gone");
    if (im->chunk_size == 0)
        (void)ql_imatrix_set_chunk_size(im, 512, &err);
    ql_imatrix_free(im);
    return 0;
}
