/* llama-quantize on a mixture-of-experts model (../shared/golden/moe/README.md):
 *   - qlab quantize --imatrix moe-llama.imatrix.dat moe-llama-f32.gguf OUT Q4_K_M gives
 *     llama-quantize's moe-llama-Q4_K_M-imat.gguf tensor for tensor, byte for byte (each
 *     expert of a 3-D tensor quantized as its own matrix with its slice of the imatrix);
 *   - for Q4_K_M, Q3_K_M, Q2_K and IQ4_XS every tensor gets the type llama-quantize chose
 *     (moe-llama.quant-types.tsv: the router stays F32, ffn_down_exps follows the ffn_down
 *     rules with the layer from its name);
 *   - --pure gives every expert tensor the mix's default type, the router still F32.
 * The qlab binary is $QLAB_BIN. */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "formats/types.h"
#include "model/gguf.h"
#include "qltest.h"

extern char **environ;

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

/* Quantizes the F32 expert model to ftype (with the golden imatrix, optionally --pure);
 * returns the opened output or NULL. */
static ql_gguf *quantize(const char *ftype, bool pure)
{
    char in[4096], imat[4096], out[4096], log[4096];
    snprintf(in, sizeof in, "%s", qlt_shared("golden/moe/moe-llama-f32.gguf"));
    snprintf(imat, sizeof imat, "%s", qlt_shared("golden/moe/moe-llama.imatrix.dat"));
    snprintf(out, sizeof out, "%s/%s%s.gguf", qlt_tmpdir(), ftype, pure ? "-pure" : "");
    snprintf(log, sizeof log, "%s/%s%s.log", qlt_tmpdir(), ftype, pure ? "-pure" : "");
    char *argv[12];
    int n = 0;
    argv[n++] = getenv("QLAB_BIN");
    argv[n++] = "quantize";
    argv[n++] = "--quiet";
    if (pure)
        argv[n++] = "--pure";
    argv[n++] = "--imatrix";
    argv[n++] = imat;
    argv[n++] = in;
    argv[n++] = out;
    argv[n++] = (char *)ftype;
    argv[n] = NULL;
    const bool ok = run(argv, log);
    CHECK_MSG(ok, "qlab quantize %s failed (log %s)", ftype, log);
    if (!ok) {
        size_t len;
        char *text = qlt_read_file(log, &len);
        fprintf(stderr, "%s", text);
        free(text);
        return NULL;
    }
    ql_gguf *g = NULL;
    ql_error err;
    ql_error_clear(&err);
    CHECK_OK(ql_gguf_open(&g, out, &err), &err);
    return g;
}

static void test_bytes(void)
{
    ql_gguf *got = quantize("Q4_K_M", false), *ref = NULL;
    ql_error err;
    ql_error_clear(&err);
    CHECK_OK(ql_gguf_open(&ref, qlt_shared("golden/moe/moe-llama-Q4_K_M-imat.gguf"), &err), &err);
    if (got && ref) {
        const int same = qlt_same_tensors(got, ref, "moe-llama Q4_K_M");
        printf("Q4_K_M with the imatrix: %d of %lld tensors identical to llama-quantize's\n", same,
               (long long)ref->n_tensors);
        CHECK_EQ_INT(same, ref->n_tensors);
    }
    ql_gguf_close(got);
    ql_gguf_close(ref);
}

static void test_types(void)
{
    static const char *const mixes[] = {"Q4_K_M", "Q3_K_M", "Q2_K", "IQ4_XS"};
    ql_gguf *out[4];
    for (int i = 0; i < 4; i++)
        out[i] = quantize(mixes[i], false);
    size_t len;
    char *text = qlt_read_file(qlt_shared("golden/moe/moe-llama.quant-types.tsv"), &len);
    int rows = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *col[8];
        if (qlt_split_tabs(line, col, 8) != 7 || strcmp(col[0], "tensor") == 0)
            continue;
        rows++;
        for (int i = 0; i < 4; i++) {
            const ql_gguf_tensor *t = out[i] ? ql_gguf_find_tensor(out[i], col[0]) : NULL;
            CHECK_MSG(t != NULL, "%s: no tensor %s", mixes[i], col[0]);
            if (t)
                CHECK_MSG(strcmp(ql_type_name(t->type), col[3 + i]) == 0,
                          "%s: %s is %s, llama-quantize chose %s", mixes[i], col[0],
                          ql_type_name(t->type), col[3 + i]);
        }
    }
    CHECK_EQ_INT(rows, 23);
    printf("types of %d tensors in 4 mixes as llama-quantize chose them\n", rows);
    free(text);
    for (int i = 0; i < 4; i++)
        ql_gguf_close(out[i]);
}

static void test_pure(void)
{
    ql_gguf *g = quantize("Q3_K_M", true);
    if (!g)
        return;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        const bool vec = t->n_dims == 1, router = strstr(t->name, "ffn_gate_inp") != NULL;
        const int32_t want = vec || router ? QL_TYPE_F32 : QL_TYPE_Q3_K;
        CHECK_MSG(t->type == want, "--pure Q3_K_M: %s is %s, expected %s", t->name,
                  ql_type_name(t->type), ql_type_name(want));
    }
    ql_gguf_close(g);
}

int main(void)
{
    if (!getenv("QLAB_BIN"))
        qlt_skip("QLAB_BIN is not set");
    test_bytes();
    test_types();
    test_pure();
    return qlt_done();
}
