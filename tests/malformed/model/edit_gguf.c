/* Writes a copy of a GGUF model with edits, to make the malformed-model corpus from the
 * real stories260K at test time (model/cases.tsv) instead of committing megabytes of
 * near-identical files:
 *
 *   build/tests/edit_gguf IN.gguf OUT.gguf EDIT...
 *
 * EDIT is one of
 *   set:KEY=TYPE:VALUE   add or replace a key; TYPE u32, i32, u64, f32, f64 or str;
 *                        f32 and f64 values may be inf, -inf, nan
 *   del:KEY              leave a key out
 *   drop:PREFIX          leave out every tensor whose name starts with PREFIX
 *                        ("drop:" leaves out all of them)
 *   token:I=TEXT         token I of tokenizer.ggml.tokens becomes TEXT
 *   tokens:N             keep the first N tokens (and scores and types)
 *   rows:NAME=N          tensor NAME (2-D, F32) gets N rows: the first rows of the
 *                        original, repeated when there are more
 *   add:NAME=N           a 1-D F32 tensor NAME of N zeros after the others
 * The tensors keep their types and bytes otherwise. Exit 0 on success, 1 with a message
 * on stderr for a bad edit or a file it cannot read or write. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "formats/types.h"
#include "model/gguf.h"

#define MAX_EDITS 32

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "edit_gguf: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void check(ql_status st, const ql_error *err)
{
    if (st)
        die("%s", err->msg);
}

/* The text after "kind:" when edit starts with it, else NULL. */
static const char *arg_of(const char *edit, const char *kind)
{
    size_t n = strlen(kind);
    return strncmp(edit, kind, n) == 0 && edit[n] == ':' ? edit + n + 1 : NULL;
}

/* Splits "A=B" into a copy of A (in buf) and B. */
static const char *split_eq(const char *s, char *buf, size_t size)
{
    const char *eq = strchr(s, '=');
    if (!eq || (size_t)(eq - s) >= size)
        die("'%s': expected NAME=VALUE", s);
    memcpy(buf, s, (size_t)(eq - s));
    buf[eq - s] = '\0';
    return eq + 1;
}

static void set_key(ql_gguf_writer *w, const char *spec)
{
    char key[256];
    const char *tv = split_eq(spec, key, sizeof key);
    const char *colon = strchr(tv, ':');
    if (!colon)
        die("'%s': expected KEY=TYPE:VALUE", spec);
    char type[8];
    if ((size_t)(colon - tv) >= sizeof type)
        die("'%s': unknown type", spec);
    memcpy(type, tv, (size_t)(colon - tv));
    type[colon - tv] = '\0';
    const char *v = colon + 1;
    ql_gguf_value val;
    memset(&val, 0, sizeof val);
    char *end = NULL;
    errno = 0;
    if (strcmp(type, "str") == 0) {
        val.type = QL_GGUF_STRING;
        val.v.str.ptr = (char *)(uintptr_t)v;
        val.v.str.len = strlen(v);
        end = (char *)(uintptr_t)(v + strlen(v));
    } else if (strcmp(type, "u32") == 0) {
        val.type = QL_GGUF_UINT32;
        val.v.u32 = (uint32_t)strtoul(v, &end, 0);
    } else if (strcmp(type, "i32") == 0) {
        val.type = QL_GGUF_INT32;
        val.v.i32 = (int32_t)strtol(v, &end, 0);
    } else if (strcmp(type, "u64") == 0) {
        val.type = QL_GGUF_UINT64;
        val.v.u64 = strtoull(v, &end, 0);
    } else if (strcmp(type, "f32") == 0) {
        val.type = QL_GGUF_FLOAT32;
        val.v.f32 = strtof(v, &end);
    } else if (strcmp(type, "f64") == 0) {
        val.type = QL_GGUF_FLOAT64;
        val.v.f64 = strtod(v, &end);
    } else {
        die("'%s': unknown type (u32, i32, u64, f32, f64, str)", spec);
    }
    if (!end || *end || end == v)
        die("'%s': bad value", spec);
    ql_error err;
    check(ql_gguf_writer_set_kv(w, key, &val, &err), &err);
}

/* Rewrites the token arrays with token edits and a new length. */
static void edit_tokens(ql_gguf_writer *w, const ql_gguf *g, char **edits, int n_edits)
{
    ql_error err;
    const ql_gguf_array *toks = ql_gguf_get_arr(g, "tokenizer.ggml.tokens", QL_GGUF_STRING, &err);
    if (!toks)
        die("%s: no tokenizer.ggml.tokens", g->path);
    uint64_t n = toks->n;
    const char **strs = calloc(n, sizeof *strs);
    if (!strs)
        die("out of memory");
    for (uint64_t i = 0; i < n; i++)
        strs[i] = ((const ql_gguf_str *)toks->data)[i].ptr;
    bool changed = false;
    for (int e = 0; e < n_edits; e++) {
        const char *a;
        if ((a = arg_of(edits[e], "tokens"))) {
            uint64_t k = strtoull(a, NULL, 10);
            if (k > n)
                die("'%s': more tokens than the file has", edits[e]);
            n = k;
            changed = true;
        } else if ((a = arg_of(edits[e], "token"))) {
            char idx[32];
            const char *text = split_eq(a, idx, sizeof idx);
            uint64_t i = strtoull(idx, NULL, 10);
            if (i >= n)
                die("'%s': no such token", edits[e]);
            strs[i] = text;
            changed = true;
        }
    }
    if (changed) {
        check(ql_gguf_writer_set_str_arr(w, "tokenizer.ggml.tokens", strs, n, &err), &err);
        const ql_gguf_array *sc =
            ql_gguf_get_arr(g, "tokenizer.ggml.scores", QL_GGUF_FLOAT32, NULL);
        const ql_gguf_array *ty =
            ql_gguf_get_arr(g, "tokenizer.ggml.token_type", QL_GGUF_INT32, NULL);
        if (sc)
            check(ql_gguf_writer_set_arr(w, "tokenizer.ggml.scores", QL_GGUF_FLOAT32, sc->data, n,
                                         &err),
                  &err);
        if (ty)
            check(ql_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", QL_GGUF_INT32, ty->data, n,
                                         &err),
                  &err);
    }
    free(strs);
}

/* The rows a rows: edit gives tensor name, or -1. */
static int64_t new_rows(const char *name, char **edits, int n_edits)
{
    int64_t rows = -1;
    for (int e = 0; e < n_edits; e++) {
        const char *a = arg_of(edits[e], "rows");
        char tn[128];
        if (a) {
            const char *v = split_eq(a, tn, sizeof tn);
            if (strcmp(tn, name) == 0)
                rows = strtoll(v, NULL, 10);
        }
    }
    return rows;
}

static bool dropped(const char *name, char **edits, int n_edits)
{
    for (int e = 0; e < n_edits; e++) {
        const char *a = arg_of(edits[e], "drop");
        if (a && strncmp(name, a, strlen(a)) == 0)
            return true;
    }
    return false;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc - 3 > MAX_EDITS) {
        fprintf(stderr, "usage: edit_gguf IN.gguf OUT.gguf EDIT... (at most %d edits)\n",
                MAX_EDITS);
        return 1;
    }
    char **edits = argv + 3;
    const int n_edits = argc - 3;
    for (int e = 0; e < n_edits; e++)
        if (!arg_of(edits[e], "set") && !arg_of(edits[e], "del") && !arg_of(edits[e], "drop") &&
            !arg_of(edits[e], "token") && !arg_of(edits[e], "tokens") &&
            !arg_of(edits[e], "rows") && !arg_of(edits[e], "add"))
            die("unknown edit '%s'", edits[e]);
    ql_error err;
    ql_gguf *g;
    check(ql_gguf_open(&g, argv[1], &err), &err);
    ql_gguf_writer *w;
    check(ql_gguf_writer_alloc(&w, &err), &err);
    check(ql_gguf_writer_set_alignment(w, g->alignment, &err), &err);
    check(ql_gguf_writer_copy_kvs(w, g, &err), &err);
    edit_tokens(w, g, edits, n_edits);
    for (int e = 0; e < n_edits; e++) {
        const char *a;
        if ((a = arg_of(edits[e], "set")))
            set_key(w, a);
        else if ((a = arg_of(edits[e], "del")) && !ql_gguf_writer_remove_kv(w, a))
            die("del: no key '%s'", a);
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        if (dropped(t->name, edits, n_edits))
            continue;
        int64_t ne[QL_GGUF_MAX_DIMS];
        memcpy(ne, t->ne, sizeof ne);
        uint64_t nbytes = t->nbytes;
        const int64_t rows = new_rows(t->name, edits, n_edits);
        if (rows >= 0) {
            if (t->n_dims != 2 || t->type != QL_TYPE_F32)
                die("rows: '%s' is not a 2-D F32 tensor", t->name);
            ne[1] = rows;
            nbytes = (uint64_t)(ne[0] * rows) * sizeof(float);
        }
        check(ql_gguf_writer_add_tensor(w, t->name, t->n_dims, ne, t->type, nbytes, &err), &err);
    }
    for (int e = 0; e < n_edits; e++) {
        const char *a = arg_of(edits[e], "add");
        char name[128];
        if (!a)
            continue;
        const int64_t ne[1] = {strtoll(split_eq(a, name, sizeof name), NULL, 10)};
        if (ne[0] < 1)
            die("add: '%s' needs a length >= 1", a);
        check(ql_gguf_writer_add_tensor(w, name, 1, ne, QL_TYPE_F32,
                                        (uint64_t)ne[0] * sizeof(float), &err),
              &err);
    }
    check(ql_gguf_writer_begin(w, argv[2], &err), &err);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        if (dropped(t->name, edits, n_edits))
            continue;
        const int64_t rows = new_rows(t->name, edits, n_edits);
        if (rows < 0) {
            check(ql_gguf_writer_write_tensor(w, t->data, t->nbytes, &err), &err);
            continue;
        }
        const size_t row_bytes = (size_t)t->ne[0] * sizeof(float);
        char *buf = malloc(row_bytes * (size_t)(rows ? rows : 1));
        if (!buf)
            die("out of memory");
        for (int64_t r = 0; r < rows; r++)
            memcpy(buf + (size_t)r * row_bytes,
                   (const char *)t->data + (size_t)(r % t->ne[1]) * row_bytes, row_bytes);
        check(ql_gguf_writer_write_tensor(w, buf, row_bytes * (size_t)rows, &err), &err);
        free(buf);
    }
    for (int e = 0; e < n_edits; e++) {
        const char *a = arg_of(edits[e], "add");
        char name[128];
        if (!a)
            continue;
        const size_t n = (size_t)strtoll(split_eq(a, name, sizeof name), NULL, 10);
        float *zeros = calloc(n, sizeof *zeros);
        if (!zeros)
            die("out of memory");
        check(ql_gguf_writer_write_tensor(w, zeros, n * sizeof *zeros, &err), &err);
        free(zeros);
    }
    check(ql_gguf_writer_finish(w, &err), &err);
    ql_gguf_writer_free(w);
    ql_gguf_close(g);
    return 0;
}
