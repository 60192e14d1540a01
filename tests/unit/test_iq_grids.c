/* The IQ codebook loader: the real tables load and give ggml's encoder maps,
 * loading is safe from many threads, and a missing or malformed table gives an
 * error that names the table, the file and what is wrong.
 *
 * The data manifest and the loaded codebooks are cached per process, so every
 * scenario with its own temporary data tree ($QLAB_ROOT with a manifest,
 * $QLAB_DATA with the tables) runs in a forked child. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/data.h"
#include "base/util.h"
#include "formats/iq_grids.h"
#include "formats/quant_iq.h"
#include "formats/types.h"
#include "qltest.h"

static const char *const table_files[] = {
    "iq2xxs_grid.txt",    "iq2xs_grid.txt",     "iq2s_grid.txt",       "iq3xxs_grid.txt",
    "iq3s_grid.txt",      "iq1s_grid.txt",      "ksigns_iq2xs.txt",    "kmask_iq2xs.txt",
    "kgrid_2bit_256.txt", "kgrid_2bit_512.txt", "kgrid_2bit_1024.txt", "kgrid_1bit_2048.txt",
    "kgrid_256.txt",      "kgrid_512.txt",
};
#define N_TABLES (sizeof table_files / sizeof table_files[0])

/* ------------------------------------------------------------------------- */
/* The real tables                                                             */
/* ------------------------------------------------------------------------- */

static int dist2(const ql_iq_grid *g, int32_t code, int j)
{
    int s = 0;
    for (int k = 0; k < g->dim; k++) {
        int pos =
            2 * (int)(((uint32_t)code >> (g->code_bits * k)) & ((1u << g->code_bits) - 1)) + 1;
        int d = g->lattice[(size_t)j * (size_t)g->dim + (size_t)k] - pos;
        s += d * d;
    }
    return s;
}

/* Every grid point maps to itself; every reachable off-grid code lists whole
 * distance shells, nearest first, ties by index (ggml's sort order). */
static void check_maps(const ql_iq_grid *g, int max_shells)
{
    int bad = 0;
    for (int j = 0; j < g->n_points; j++) {
        int32_t code = 0;
        for (int k = 0; k < g->dim; k++)
            code |= ((g->lattice[(size_t)j * (size_t)g->dim + (size_t)k] - 1) / 2)
                    << (g->code_bits * k);
        if (g->map[code] != j && bad++ < 3)
            CHECK_MSG(false, "%s: grid point %d has code %d mapping to %d", g->name, j, (int)code,
                      (int)g->map[code]);
    }
    int n_off = 0;
    for (int32_t code = 0; code < g->map_size; code++) {
        int32_t m = g->map[code];
        if (m >= 0 || m == QL_IQ_MAP_UNREACHABLE)
            continue;
        n_off++;
        const uint16_t *nb = g->neighbours + (-(int64_t)m - 1);
        int n = nb[0], shells = 1, ok = n > 0;
        for (int i = 2; i <= n && ok; i++) {
            int a = dist2(g, code, nb[i - 1]), b = dist2(g, code, nb[i]);
            ok = a < b || (a == b && nb[i - 1] < nb[i]);
            shells += a < b;
        }
        int far = n > 0 ? dist2(g, code, nb[n]) : -1, within = 0;
        for (int j = 0; j < g->n_points; j++)
            within += dist2(g, code, j) <= far;
        ok = ok && shells <= max_shells && within == n;
        if (!ok && bad++ < 3)
            CHECK_MSG(false, "%s: neighbour list of code %d is wrong (%d entries, %d shells)",
                      g->name, (int)code, n, shells);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(n_off > 0);
}

static void real_tables_load(void)
{
    static const int32_t types[] = {QL_TYPE_IQ2_XXS, QL_TYPE_IQ2_XS, QL_TYPE_IQ2_S, QL_TYPE_IQ3_XXS,
                                    QL_TYPE_IQ3_S,   QL_TYPE_IQ1_S,  QL_TYPE_IQ1_M};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        ql_error err;
        ql_status st = ql_type_prepare(types[i], &err);
        CHECK_OK(st, &err);
    }
    /* ggml keeps 2 distance shells per off-grid code for IQ2_XXS/IQ2_XS/IQ3_XXS,
     * 1 for IQ2_S and 3 for IQ1 and IQ3_S. */
    static const int shells[QL_IQ_GRID_COUNT] = {2, 2, 1, 3, 2, 3};
    static const int points[QL_IQ_GRID_COUNT] = {256, 512, 1024, 2048, 256, 512};
    for (int id = 0; id < QL_IQ_GRID_COUNT; id++) {
        const ql_iq_grid *g = ql_iq_grid_get((ql_iq_grid_id)id);
        CHECK(g != NULL);
        if (!g)
            continue;
        CHECK_EQ_INT(g->n_points, points[id]);
        check_maps(g, shells[id]);
    }
    /* Spot values of the decode tables: the first IQ2 point is all 8s, the first
     * IQ1 point all -1s, the second IQ3_S point ends in a 3. */
    const ql_iq_grid *g2 = ql_iq_grid_get(QL_IQ_GRID_IQ2_XXS),
                     *g1 = ql_iq_grid_get(QL_IQ_GRID_IQ1_S);
    const ql_iq_grid *g3 = ql_iq_grid_get(QL_IQ_GRID_IQ3_S);
    if (g2 && g1 && g3) {
        CHECK_EQ_INT(g2->values[0], 8);
        CHECK_EQ_INT(g2->values[8], 0x2b); /* point 1 is 0x080808080808082b: byte 0 */
        CHECK_EQ_INT(g1->values[0], 0xff);
        CHECK_EQ_INT(g3->values[4], 3);
        CHECK_EQ_INT(g2->signs[3], 3 | 0); /* two bits set: even, no parity bit */
        CHECK_EQ_INT(g2->signs[1], 129);
        CHECK(g1->signs == NULL);
    }
    ql_error err;
    CHECK_EQ_INT(ql_iq_prepare(QL_TYPE_Q4_K, &err), QL_EINVAL);
}

/* ------------------------------------------------------------------------- */
/* Temporary data trees                                                        */
/* ------------------------------------------------------------------------- */

typedef enum { T_NONE, T_REMOVE, T_REPLACE, T_DELETE_LAST, T_APPEND, T_SWAP } tamper_kind;

typedef struct {
    const char *name;
    const char *file; /* table file to tamper with */
    tamper_kind kind;
    int line;         /* 1-based line of the file (T_REPLACE; T_SWAP swaps line and line+1) */
    const char *text; /* replacement or appended line */
    int32_t type;     /* type whose preparation is checked */
    ql_status want;
    const char *msg[3]; /* substrings the error must contain */
} scenario;

static const scenario scenarios[] = {
    {"complete", NULL, T_NONE, 0, NULL, QL_TYPE_IQ2_XXS, QL_OK, {NULL}},
    {"missing",
     "iq2xxs_grid.txt",
     T_REMOVE,
     0,
     NULL,
     QL_TYPE_IQ2_XXS,
     QL_ENOTFOUND,
     {"loading the IQ2_XXS codebook", "iq-grids/iq2xxs_grid", "not found"}},
    {"missing-signs",
     "ksigns_iq2xs.txt",
     T_REMOVE,
     0,
     NULL,
     QL_TYPE_IQ3_S,
     QL_ENOTFOUND,
     {"loading the IQ3_S codebook", "iq-grids/ksigns_iq2xs", "not found"}},
    {"short",
     "kgrid_2bit_512.txt",
     T_DELETE_LAST,
     0,
     NULL,
     QL_TYPE_IQ2_XS,
     QL_EFORMAT,
     {"kgrid_2bit_512.txt", "has 511 values, expected 512", NULL}},
    {"long",
     "kgrid_256.txt",
     T_APPEND,
     0,
     "4000",
     QL_TYPE_IQ3_XXS,
     QL_EFORMAT,
     {"kgrid_256.txt:258:", "more than the expected 256", NULL}},
    {"bad-number",
     "iq3s_grid.txt",
     T_REPLACE,
     6,
     "0x0101zz03",
     QL_TYPE_IQ3_S,
     QL_EFORMAT,
     {"iq3s_grid.txt:6:", "'0x0101zz03' is not an unsigned 32-bit value", NULL}},
    {"negative",
     "iq3xxs_grid.txt",
     T_REPLACE,
     2,
     "-4",
     QL_TYPE_IQ3_XXS,
     QL_EFORMAT,
     {"iq3xxs_grid.txt:2:", "'-4' is not an unsigned 32-bit value", NULL}},
    {"too-wide",
     "kgrid_2bit_1024.txt",
     T_REPLACE,
     3,
     "70000",
     QL_TYPE_IQ2_S,
     QL_EFORMAT,
     {"kgrid_2bit_1024.txt:3:", "not an unsigned 16-bit value", NULL}},
    {"level",
     "kgrid_2bit_256.txt",
     T_REPLACE,
     3,
     "3",
     QL_TYPE_IQ2_XXS,
     QL_EFORMAT,
     {"kgrid_2bit_256", "entry 1 (code 3)", "has level 3, the lattice has 3 levels"}},
    {"duplicate",
     "kgrid_1bit_2048.txt",
     T_REPLACE,
     3,
     "0",
     QL_TYPE_IQ1_M,
     QL_EFORMAT,
     {"loading the IQ1_S/IQ1_M codebook", "entries 0 and 1 are the same code 0", NULL}},
    {"shuffled",
     "iq2s_grid.txt",
     T_SWAP,
     3,
     NULL,
     QL_TYPE_IQ2_S,
     QL_EFORMAT,
     {"table iq-grids/iq2s_grid: entry 1", "decodes to", NULL}},
    {"signs",
     "ksigns_iq2xs.txt",
     T_REPLACE,
     5,
     "131",
     QL_TYPE_IQ2_XS,
     QL_EFORMAT,
     {"ksigns_iq2xs: entry 3 is 131, expected 3", NULL, NULL}},
};
#define N_SCENARIOS (sizeof scenarios / sizeof scenarios[0])

static void mkdir_or_die(const char *path)
{
    if (mkdir(path, 0755) != 0 && !ql_file_exists(path)) {
        perror(path);
        exit(1);
    }
}

static void write_or_die(const char *path, const char *data, size_t len)
{
    ql_error err;
    if (ql_file_write_all(path, data, len, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
}

/* Applies a tamper operation to a text file's lines; returns a new buffer. */
static char *tamper(const char *text, const scenario *s, size_t *len)
{
    size_t n = strlen(text), cap = n + 256;
    char *out = malloc(cap);
    char *lines[4096];
    int nl = 0;
    char *copy = ql_strdup(text);
    for (char *p = copy; *p && nl < 4096;) {
        lines[nl++] = p;
        char *e = strchr(p, '\n');
        if (!e)
            break;
        *e = '\0';
        p = e + 1;
    }
    if (s->kind == T_DELETE_LAST)
        nl--;
    if (s->kind == T_SWAP) {
        char *t = lines[s->line - 1];
        lines[s->line - 1] = lines[s->line];
        lines[s->line] = t;
    }
    size_t o = 0;
    for (int i = 0; i < nl; i++) {
        const char *l = s->kind == T_REPLACE && i == s->line - 1 ? s->text : lines[i];
        o += (size_t)snprintf(out + o, cap - o, "%s\n", l);
    }
    if (s->kind == T_APPEND)
        o += (size_t)snprintf(out + o, cap - o, "%s\n", s->text);
    free(copy);
    *len = o;
    return out;
}

/* Builds <tmp>/<name>/datasets/manifest.tsv and <tmp>/<name>/data/ from the real tables
 * with the scenario's change; the tampered table's manifest sha256 and size are
 * updated so the loader, not the checksum, has to find the problem. */
static void build_tree(const scenario *s, char *root, size_t rsize)
{
    snprintf(root, rsize, "%s/%s", qlt_tmpdir(), s->name);
    char p[4096], data[2048];
    mkdir_or_die(root);
    snprintf(p, sizeof p, "%s/datasets", root);
    mkdir_or_die(p);
    snprintf(data, sizeof data, "%s/data", root);
    mkdir_or_die(data);
    char new_sha[65] = "";
    size_t new_len = 0;
    for (size_t i = 0; i < N_TABLES; i++) {
        size_t len;
        snprintf(p, sizeof p, "%s/%s", qlt_shared("golden/iq-grids"), table_files[i]);
        char *raw = qlt_read_file(p, &len);
        char *text = malloc(len + 1);
        memcpy(text, raw, len);
        text[len] = '\0';
        free(raw);
        snprintf(p, sizeof p, "%s/%s", data, table_files[i]);
        if (s->file && strcmp(s->file, table_files[i]) == 0) {
            if (s->kind != T_REMOVE) {
                size_t tl;
                char *t = tamper(text, s, &tl);
                write_or_die(p, t, tl);
                ql_sha256_hex(t, tl, new_sha);
                new_len = tl;
                free(t);
            }
        } else {
            write_or_die(p, text, len);
        }
        free(text);
    }
    /* The manifest: the real one, with the tampered table's checksum replaced. */
    size_t mlen;
    char *m = qlt_read_file(qlt_source("datasets/manifest.tsv"), &mlen);
    char *out = malloc(mlen + 256), *copy = malloc(mlen + 1);
    memcpy(copy, m, mlen);
    copy[mlen] = '\0';
    char want_file[256] = "";
    if (new_sha[0])
        snprintf(want_file, sizeof want_file, "golden/iq-grids/%s", s->file);
    size_t o = 0;
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        /* name, kind, file, sha256, bytes, source, license */
        char *col[7] = {0};
        int nc = 0;
        for (char *q = line; q && nc < 7; nc++) {
            col[nc] = q;
            q = strchr(q, '\t');
            if (q)
                *q++ = '\0';
        }
        char bytes[32];
        if (nc == 7 && want_file[0] && strcmp(col[2], want_file) == 0) {
            snprintf(bytes, sizeof bytes, "%zu", new_len);
            col[3] = new_sha;
            col[4] = bytes;
        }
        for (int c = 0; c < nc; c++)
            o +=
                (size_t)snprintf(out + o, mlen + 256 - o, "%s%s", col[c], c + 1 < nc ? "\t" : "\n");
    }
    snprintf(p, sizeof p, "%s/datasets/manifest.tsv", root);
    write_or_die(p, out, o);
    free(m);
    free(out);
    free(copy);
}

/* Runs fn(arg) in a child process and checks that it exited 0. */
static void in_child(const char *what, void (*fn)(const void *), const void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        fn(arg);
        fflush(stdout);
        _exit(qlt_failures ? 1 : 0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: child failed (status %d)", what,
              status);
}

static void run_scenario(const void *arg)
{
    const scenario *s = arg;
    char root[1024], data[2048];
    build_tree(s, root, sizeof root);
    snprintf(data, sizeof data, "%s/data", root);
    setenv("QLAB_ROOT", root, 1);
    setenv("QLAB_DATA", data, 1);
    ql_error err;
    ql_error_clear(&err);
    ql_status st = ql_type_prepare(s->type, &err);
    CHECK_MSG(st == s->want, "%s: status %d (%s), expected %d; message: %s", s->name, (int)st,
              ql_status_name(st), (int)s->want, err.msg);
    for (int i = 0; i < 3 && s->msg[i]; i++)
        CHECK_MSG(strstr(err.msg, s->msg[i]) != NULL, "%s: message lacks '%s': %s", s->name,
                  s->msg[i], err.msg);
    if (st != QL_OK) {
        printf("ok: %s: %s\n", s->name, err.msg);
        /* A failed load is not cached: asking again gives the same error. */
        ql_error again;
        CHECK_EQ_INT(ql_type_prepare(s->type, &again), st);
        CHECK_MSG(strcmp(again.msg, err.msg) == 0, "%s: second error differs: %s", s->name,
                  again.msg);
    }
}

/* ------------------------------------------------------------------------- */
/* Concurrent first load                                                       */
/* ------------------------------------------------------------------------- */

enum { N_THREADS = 8 };

static void *prepare_thread(void *arg)
{
    ql_error err;
    int32_t type = (int32_t)(intptr_t)arg;
    return (void *)(intptr_t)ql_type_prepare(type, &err);
}

static void concurrent_load(const void *arg)
{
    (void)arg;
    pthread_t th[N_THREADS];
    int32_t types[N_THREADS] = {QL_TYPE_IQ1_S, QL_TYPE_IQ1_M, QL_TYPE_IQ1_S, QL_TYPE_IQ2_S,
                                QL_TYPE_IQ3_S, QL_TYPE_IQ1_M, QL_TYPE_IQ2_S, QL_TYPE_IQ3_XXS};
    for (int i = 0; i < N_THREADS; i++)
        CHECK(pthread_create(&th[i], NULL, prepare_thread, (void *)(intptr_t)types[i]) == 0);
    for (int i = 0; i < N_THREADS; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        CHECK_EQ_INT((intptr_t)ret, QL_OK);
    }
    CHECK(ql_iq_grid_get(QL_IQ_GRID_IQ1_S) != NULL);
    CHECK(ql_iq_grid_get(QL_IQ_GRID_IQ2_XXS) == NULL); /* nobody asked for it */
}

int main(void)
{
    (void)qlt_tmpdir(); /* one temporary directory, shared by the children */
    in_child("concurrent first load", concurrent_load, NULL);
    for (size_t i = 0; i < N_SCENARIOS; i++)
        in_child(scenarios[i].name, run_scenario, &scenarios[i]);
    real_tables_load();
    return qlt_done();
}
