/* llama-quantize's mixes from the command line, byte for byte: for every file of
 * ../shared/golden/llamacpp-reference/quantized/manifest.tsv (stories260K quantized
 * by llama-quantize b4747 to one of its file types, with and without the importance
 * matrix of ../imatrix, with and without --output-tensor-type), runs
 *     qlab quantize [--imatrix F] [--output-tensor-type T] IN OUT FTYPE
 * and compares every tensor's type and bytes and general.file_type with the file.
 * The qlab binary is $QLAB_BIN. */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/util.h"
#include "model/gguf.h"
#include "qltest.h"

extern char **environ;

#define GOLDEN_IMATRIX "golden/imatrix/imatrix-stories260K-tscalib-c128.dat"

enum { C_FILE, C_BYTES, C_SHA, C_FTYPE, C_IMAT, C_OUTSAME, C_TYPES, C_NCOLS };

/* Runs argv, output to log; true when it exits 0. */
static bool run(char *const *argv, const char *log)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return false;
    int status;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void check_file(char **col, const char *dir, int k)
{
    const char *qlab = getenv("QLAB_BIN");
    char in[4096], out[4096], log[4096], ref_path[8192], imatrix[4096];
    snprintf(in, sizeof in, "%s", qlt_shared("models/stories260K.gguf"));
    snprintf(imatrix, sizeof imatrix, "%s", qlt_shared(GOLDEN_IMATRIX));
    snprintf(out, sizeof out, "%s/mix%d.gguf", qlt_tmpdir(), k);
    snprintf(log, sizeof log, "%s/mix%d.log", qlt_tmpdir(), k);
    snprintf(ref_path, sizeof ref_path, "%s/%s", dir, col[C_FILE]);
    /* The -outsame files: --output-tensor-type names the mix's own type. */
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)qlab;
    argv[n++] = "quantize";
    argv[n++] = "--quiet";
    if (strcmp(col[C_IMAT], "1") == 0) {
        argv[n++] = "--imatrix";
        argv[n++] = imatrix;
    }
    if (strcmp(col[C_OUTSAME], "1") == 0) {
        argv[n++] = "--output-tensor-type";
        argv[n++] = col[C_FTYPE];
    }
    argv[n++] = in;
    argv[n++] = out;
    argv[n++] = col[C_FTYPE];
    argv[n] = NULL;
    const bool ok = run(argv, log);
    CHECK_MSG(ok, "%s: qlab quantize failed (log: %s)", col[C_FILE], log);
    if (!ok) {
        size_t len;
        char *text = qlt_read_file(log, &len);
        fprintf(stderr, "%s", text);
        free(text);
        return;
    }
    ql_gguf *got = NULL, *ref = NULL;
    ql_error err;
    CHECK_OK(ql_gguf_open(&got, out, &err), &err);
    CHECK_OK(ql_gguf_open(&ref, ref_path, &err), &err);
    if (got && ref) {
        const int same = qlt_same_tensors(got, ref, col[C_FILE]);
        uint32_t ft_got = 0, ft_ref = 1;
        CHECK(ql_gguf_get_u32(got, "general.file_type", &ft_got, NULL));
        CHECK(ql_gguf_get_u32(ref, "general.file_type", &ft_ref, NULL));
        CHECK_MSG(ft_got == ft_ref, "%s: general.file_type %u, llama-quantize wrote %u",
                  col[C_FILE], ft_got, ft_ref);
        printf("%-38s %-7s %s %d/%lld tensors bit-identical (%s)\n", col[C_FILE], col[C_FTYPE],
               strcmp(col[C_IMAT], "1") == 0 ? "imatrix" : "       ", same,
               (long long)got->n_tensors, col[C_TYPES]);
    }
    ql_gguf_close(got);
    ql_gguf_close(ref);
}

int main(void)
{
    if (!getenv("QLAB_BIN"))
        qlt_skip("QLAB_BIN is not set");
    char dir[4096], path[8192];
    snprintf(dir, sizeof dir, "%s", qlt_shared("golden/llamacpp-reference/quantized"));
    snprintf(path, sizeof path, "%s/manifest.tsv", dir);
    if (!ql_file_exists(path))
        qlt_skip("../shared/golden/llamacpp-reference/quantized/manifest.tsv not found");
    char *text;
    ql_error err;
    CHECK_OK(ql_file_read_all(path, &text, NULL, &err), &err);
    int k = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#' || strncmp(line, "file\t", 5) == 0)
            continue;
        char *col[16];
        const int nc = qlt_split_tabs(line, col, 16);
        CHECK_MSG(nc == C_NCOLS, "manifest line %d: %d columns, expected %d", k + 1, nc,
                  (int)C_NCOLS);
        if (nc == C_NCOLS)
            check_file(col, dir, k);
        k++;
    }
    /* Every mix of the manifest: Q2_K .. Q8_0, with and without the imatrix. */
    CHECK_MSG(k >= 33, "%d files in the manifest, expected at least 33", k);
    free(text);
    return qlt_done();
}
