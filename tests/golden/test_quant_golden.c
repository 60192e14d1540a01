/* Bit-exactness against ggml: for every case of one type in
 * ../shared/golden/quants/manifest.tsv, quantize the input (with the case's
 * importance weights when it has them) and compare the bytes exactly, then
 * dequantize ggml's bytes and compare the floats exactly.
 * Usage: test_quant_golden TYPE (as the manifest spells it, e.g. q4_K).
 * Every type of the manifest is implemented: one without a quantizer fails. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "formats/types.h"
#include "qltest.h"

enum { C_CASE, C_MATRIX, C_TYPE, C_ID, C_ROWS, C_COLS, C_SEED, C_IMAT, C_INPUT, C_IMATFILE,
       C_QUANT, C_DEQUANT, C_QBYTES, C_NCOLS_MIN = 13 };

static void report_byte_diff(const char *name, const uint8_t *got, const uint8_t *want,
                             size_t n, size_t row_bytes, size_t block_bytes)
{
    size_t ndiff = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i] && ndiff++ == 0)
            first = i;
    size_t row = first / row_bytes, in_row = first % row_bytes;
    CHECK_MSG(ndiff == 0,
              "%s: %zu of %zu quantized bytes differ; first at byte %zu (row %zu, block %zu, "
              "byte %zu of the block): got 0x%02x, ggml wrote 0x%02x",
              name, ndiff, n, first, row, in_row / block_bytes, in_row % block_bytes, got[first],
              want[first]);
}

static void report_float_diff(const char *name, const float *got, const float *want, size_t n)
{
    size_t ndiff = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && ndiff++ == 0)
            first = i;
    CHECK_MSG(ndiff == 0, "%s: %zu of %zu dequantized values differ; first at %zu: %.9g vs %.9g",
              name, ndiff, n, first, (double)got[first], (double)want[first]);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s TYPE\n", argv[0]);
        return 2;
    }
    const char *want_type = argv[1];
    const ql_type_traits *tr = ql_type_by_name(want_type);
    if (!tr) {
        fprintf(stderr, "qlab has no type named %s\n", want_type);
        return 1;
    }
    const char *dir = qlt_shared("golden/quants");
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.tsv", dir);
    char *text;
    ql_error err;
    if (ql_file_read_all(path, &text, NULL, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    /* Count this type's cases first so that a failure can say how many were not checked. */
    int n_cases = 0, n_checked = 0, n_passed = 0;
    char *save = NULL;
    char *copy = ql_strdup(text);
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#' || strncmp(line, "case\t", 5) == 0)
            continue;
        char *tab1 = strchr(line, '\t'), *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
        char *tab3 = tab2 ? strchr(tab2 + 1, '\t') : NULL;
        if (tab2 && tab3 && (size_t)(tab3 - tab2 - 1) == strlen(want_type) &&
            strncmp(tab2 + 1, want_type, strlen(want_type)) == 0)
            n_cases++;
    }
    free(copy);
    CHECK_MSG(n_cases > 0, "no golden cases for %s in %s", want_type, path);
    CHECK_MSG(tr->quantize && tr->dequantize,
              "%s: no quantize or dequantize function (%d golden cases not checked)", tr->name,
              n_cases);
    if (!tr->quantize || !tr->dequantize) {
        free(text);
        return qlt_done();
    }
    /* The IQ lattice tables come from ../shared/golden: they must load. */
    ql_status st = ql_type_prepare(tr->type, &err);
    CHECK_MSG(st == QL_OK, "%s: cannot prepare the type: %s", tr->name, err.msg);
    if (st != QL_OK) {
        free(text);
        return qlt_done();
    }

    save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#' || strncmp(line, "case\t", 5) == 0)
            continue;
        char *col[32];
        int nc = qlt_split_tabs(line, col, 32);
        if (nc <= C_TYPE || strcmp(col[C_TYPE], want_type) != 0)
            continue;
        CHECK_MSG(nc >= C_NCOLS_MIN, "%s: %d columns, expected at least %d", col[C_CASE], nc,
                  (int)C_NCOLS_MIN);
        if (nc < C_NCOLS_MIN)
            continue;
        int64_t rows = 0, cols = 0, qbytes = 0;
        bool parsed = ql_parse_i64(col[C_ROWS], &rows) && ql_parse_i64(col[C_COLS], &cols) &&
                      ql_parse_i64(col[C_QBYTES], &qbytes);
        CHECK_MSG(parsed, "%s: bad rows/cols/bytes columns", col[C_CASE]);
        if (!parsed)
            continue;
        const char *name = col[C_CASE];
        bool with_imat = strcmp(col[C_IMAT], "1") == 0;
        char p[4096];
        size_t len;
        snprintf(p, sizeof p, "%s/%s", dir, col[C_INPUT]);
        float *x = qlt_read_file(p, &len);
        CHECK_EQ_INT(len, (size_t)(rows * cols) * sizeof(float));
        float *imat = NULL;
        if (with_imat) {
            snprintf(p, sizeof p, "%s/%s", dir, col[C_IMATFILE]);
            imat = qlt_read_file(p, &len);
            CHECK_EQ_INT(len, (size_t)cols * sizeof(float));
        }
        snprintf(p, sizeof p, "%s/%s", dir, col[C_QUANT]);
        uint8_t *want_q = qlt_read_file(p, &len);
        CHECK_EQ_INT(len, qbytes);
        snprintf(p, sizeof p, "%s/%s", dir, col[C_DEQUANT]);
        float *want_y = qlt_read_file(p, &len);
        CHECK_EQ_INT(len, (size_t)(rows * cols) * sizeof(float));

        size_t row_bytes = ql_row_size(tr->type, cols);
        CHECK_EQ_INT(row_bytes * (size_t)rows, qbytes);
        uint8_t *q = calloc(1, (size_t)qbytes + 64);
        float *y = calloc((size_t)(rows * cols), sizeof(float));
        n_checked++;
        size_t wrote = tr->quantize(x, q, rows, cols, imat);
        CHECK_MSG(wrote == (size_t)qbytes, "%s: quantize returned %zu bytes, expected %lld", name,
                  wrote, (long long)qbytes);
        int before = qlt_failures;
        report_byte_diff(name, q, want_q, (size_t)qbytes, row_bytes, tr->type_size);
        tr->dequantize(want_q, y, rows, cols);
        report_float_diff(name, y, want_y, (size_t)(rows * cols));
        if (qlt_failures == before) {
            n_passed++;
            printf("ok: %s (%lld x %lld, %s)\n", name, (long long)rows, (long long)cols,
                   with_imat ? "with imatrix" : "no imatrix");
        }
        free(x);
        free(imat);
        free(want_q);
        free(want_y);
        free(q);
        free(y);
    }
    /* Every case counted above was compared: none was passed over unread. */
    CHECK_MSG(n_checked == n_cases, "%s: %d of %d golden cases compared", tr->name, n_checked,
              n_cases);
    printf("%s: %d of %d golden cases bit-exact\n", tr->name, n_passed, n_cases);
    free(text);
    return qlt_done();
}
