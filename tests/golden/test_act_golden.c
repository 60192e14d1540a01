/* Activation roundings against ggml's own rounding: q8_0 (and q8_1, whose values are
 * the same) activations are the Q8_0 weight format, f16/bf16 activations the F16/BF16
 * formats, so the fake quant of every golden input must equal ggml's dequantized bytes
 * of that input bit for bit (../shared/golden/quants/manifest.tsv). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/actquant.h"
#include "qltest.h"

enum {
    C_CASE,
    C_MATRIX,
    C_TYPE,
    C_ID,
    C_ROWS,
    C_COLS,
    C_SEED,
    C_IMAT,
    C_INPUT,
    C_IMATFILE,
    C_QUANT,
    C_DEQUANT,
    C_NCOLS_MIN = 12
};

/* The golden type whose decoded values each rounding must reproduce. */
static const struct {
    ql_actq q;
    const char *golden_type;
} pairs[] = {
    {QL_ACTQ_Q8_0, "q8_0"},
    {QL_ACTQ_Q8_1, "q8_0"},
    {QL_ACTQ_F16, "f16"},
    {QL_ACTQ_BF16, "bf16"},
};

int main(void)
{
    const char *dir = qlt_shared("golden/quants");
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.tsv", dir);
    char *text;
    ql_error err;
    if (ql_file_read_all(path, &text, NULL, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int n_checked[sizeof pairs / sizeof pairs[0]] = {0};
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#' || strncmp(line, "case\t", 5) == 0)
            continue;
        char *col[32];
        int nc = qlt_split_tabs(line, col, 32);
        /* Q8_0, F16 and BF16 ignore the importance matrix: the no-imatrix cases suffice. */
        if (nc < C_NCOLS_MIN || strcmp(col[C_IMAT], "0") != 0)
            continue;
        for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
            if (strcmp(col[C_TYPE], pairs[k].golden_type) != 0)
                continue;
            int64_t rows = 0, cols = 0;
            CHECK(ql_parse_i64(col[C_ROWS], &rows) && ql_parse_i64(col[C_COLS], &cols));
            size_t len;
            snprintf(path, sizeof path, "%s/%s", dir, col[C_INPUT]);
            float *x = qlt_read_file(path, &len);
            CHECK_EQ_INT(len, (size_t)(rows * cols) * sizeof(float));
            snprintf(path, sizeof path, "%s/%s", dir, col[C_DEQUANT]);
            float *want = qlt_read_file(path, &len);
            CHECK_EQ_INT(len, (size_t)(rows * cols) * sizeof(float));
            float *got = malloc((size_t)(rows * cols) * sizeof(float));
            /* one activation row per matrix row, as a product sees them */
            for (int64_t r = 0; r < rows; r++)
                ql_actq_round(pairs[k].q, x + r * cols, got + r * cols, cols);
            int64_t ndiff = 0, first = -1;
            for (int64_t i = 0; i < rows * cols; i++)
                if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && ndiff++ == 0)
                    first = i;
            CHECK_MSG(ndiff == 0,
                      "%s activations on %s: %lld of %lld values differ from ggml's; "
                      "first at %lld: %.9g vs %.9g",
                      ql_actq_name(pairs[k].q), col[C_CASE], (long long)ndiff,
                      (long long)(rows * cols), (long long)first,
                      first >= 0 ? (double)got[first] : 0.0,
                      first >= 0 ? (double)want[first] : 0.0);
            if (ndiff == 0)
                printf("ok: %s activations = ggml %s on %s (%lld x %lld)\n",
                       ql_actq_name(pairs[k].q), pairs[k].golden_type, col[C_MATRIX],
                       (long long)rows, (long long)cols);
            n_checked[k]++;
            free(x);
            free(want);
            free(got);
        }
    }
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++)
        CHECK_MSG(n_checked[k] >= 3, "%s: only %d golden inputs found", ql_actq_name(pairs[k].q),
                  n_checked[k]);
    free(text);
    return qlt_done();
}
