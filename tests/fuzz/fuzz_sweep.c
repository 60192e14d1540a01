/* libFuzzer target for the sweep-file parser (ql_sweep_parse), see tests/fuzz/README.md.
 * Any bytes are a sweep file's text. A rejected input must come with a message that
 * names the file and a line; an accepted one must expand to between 1 and
 * QL_SWEEP_MAX_CONFIGS configs, each with the hash of its own config and no two alike,
 * and settings in their documented ranges. The parser reads no file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experiment/config.h"
#include "experiment/sweep.h"

#define FUZZ_NAME "fuzz-input.sweep"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_sweep: invariant failed: %s\n", what);
        abort();
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The parser takes C text: bytes up to the first NUL, as ql_sweep_load refuses a
     * file with a NUL byte before parsing. */
    char *text = malloc(size + 1);
    check(text != NULL, "allocation");
    memcpy(text, data, size);
    text[size] = '\0';
    ql_sweep sw;
    ql_error err;
    ql_error_clear(&err);
    ql_status st = ql_sweep_parse(FUZZ_NAME, text, 0, &sw, &err);
    free(text);
    if (st != QL_OK) {
        check(sw.n_points == 0 && sw.points == NULL, "no configs on failure");
        /* "<file>:<line>: ..." or "<file>: ..." (errors about the whole file). */
        check(strncmp(err.msg, FUZZ_NAME ":", strlen(FUZZ_NAME) + 1) == 0,
              "the message names the file");
        ql_sweep_deinit(&sw);
        return 0;
    }
    check(sw.n_points >= 1 && sw.n_points <= QL_SWEEP_MAX_CONFIGS, "config count in range");
    check(sw.model[0] && sw.text[0], "model and text given");
    check(sw.ctx >= QL_CTX_MIN && sw.ctx <= QL_CTX_MAX, "ctx in range");
    check(sw.chunks >= 0 && sw.chunks <= QL_SWEEP_MAX_CHUNKS, "chunks in range");
    check(sw.threads >= 0 && sw.threads <= QL_SWEEP_MAX_THREADS, "threads in range");
    const char **hashes = malloc(sw.n_points * sizeof *hashes);
    check(hashes != NULL, "allocation");
    for (size_t i = 0; i < sw.n_points; i++) {
        char hash[65];
        ql_config_hash(&sw.points[i].config, hash);
        check(strcmp(hash, sw.points[i].hash) == 0, "each point carries its config's hash");
        hashes[i] = sw.points[i].hash;
    }
    /* Expansion drops repeats: no hash appears twice. */
    qsort(hashes, sw.n_points, sizeof *hashes, cmp_str);
    for (size_t i = 1; i < sw.n_points; i++)
        check(strcmp(hashes[i - 1], hashes[i]) != 0, "no repeated config");
    free(hashes);
    ql_sweep_deinit(&sw);
    return 0;
}
