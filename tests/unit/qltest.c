#include "qltest.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/gemm.h"
#include "formats/types.h"
#include "ql_config.h"

int qlt_failures = 0;
int qlt_checks = 0;

/* Every test program honours QLAB_GEMM as qlab does (CI runs the unit suite under both). */
__attribute__((constructor)) static void select_products(void)
{
    ql_error err;
    if (ql_gemm_select_from_env(&err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
}

static const char *join(const char *base, const char *rel)
{
    static _Thread_local char bufs[8][4096];
    static _Thread_local int next = 0;
    char *b = bufs[next++ % 8];
    snprintf(b, 4096, "%s/%s", base, rel);
    return b;
}

const char *qlt_shared(const char *rel)
{
    const char *env = getenv("QLAB_SHARED");
    if (env && *env)
        return join(env, rel);
    return join(QL_SOURCE_ROOT "/../shared", rel);
}

const char *qlt_source(const char *rel)
{
    return join(QL_SOURCE_ROOT, rel);
}

const char *qlt_tmpdir(void)
{
    static char dir[256];
    if (!dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/qltest.XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return dir;
}

const char *qlt_tmp(const char *name)
{
    static _Thread_local char bufs[16][4096];
    static _Thread_local int next = 0;
    char *b = bufs[next++ % 16];
    snprintf(b, sizeof bufs[0], "%s/%s", qlt_tmpdir(), name);
    return b;
}

void qlt_skip(const char *reason)
{
    /* A skip must not hide checks that already failed. */
    if (qlt_failures) {
        printf("FAIL: %d of %d checks failed before the test wanted to skip (%s)\n",
               qlt_failures, qlt_checks, reason);
        exit(1);
    }
    printf("SKIP: %s\n", reason);
    exit(QLT_SKIP);
}

void *qlt_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

bool qlt_same_file(const char *a, const char *b)
{
    size_t na, nb;
    void *pa = qlt_read_file(a, &na), *pb = qlt_read_file(b, &nb);
    bool same = na == nb && memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return same;
}

int qlt_split_tabs(char *line, char **col, int max)
{
    int n = 0;
    for (char *p = line; n < max;) {
        col[n++] = p;
        char *t = strchr(p, '\t');
        if (!t)
            break;
        *t = '\0';
        p = t + 1;
    }
    return n;
}

int qlt_same_tensors(const ql_gguf *out, const ql_gguf *ref, const char *label)
{
    CHECK_EQ_INT(out->n_tensors, ref->n_tensors);
    int same = 0;
    for (int64_t i = 0; i < out->n_tensors; i++) {
        const ql_gguf_tensor *a = &out->tensors[i];
        const ql_gguf_tensor *b = ql_gguf_find_tensor(ref, a->name);
        CHECK_MSG(b != NULL, "%s: no tensor %s in the reference", label, a->name);
        if (!b)
            continue;
        CHECK_MSG(a->type == b->type, "%s: %s is %s in qlab's file, %s in llama.cpp's", label,
                  a->name, ql_type_name(a->type), ql_type_name(b->type));
        if (a->type == b->type && a->nbytes == b->nbytes &&
            memcmp(a->data, b->data, a->nbytes) == 0)
            same++;
        else
            CHECK_MSG(false, "%s: tensor %s: bytes differ from llama-quantize's", label, a->name);
    }
    return same;
}

int qlt_done(void)
{
    printf("%d checks, %d failed\n", qlt_checks, qlt_failures);
    return qlt_failures ? 1 : 0;
}
