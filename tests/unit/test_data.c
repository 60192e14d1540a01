/* The data resolver on a temporary tree: QLAB_ROOT with its own manifest, a
 * ../shared mirror next to it, a QLAB_DATA directory. Checks the search order one
 * place at a time, the not-found message (every place looked, how to get the
 * file), size and sha256 mismatches, the verified-hash cache and forced
 * verification, plain path passthrough, and manifest errors with line numbers. */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/data.h"
#include "base/util.h"
#include "qltest.h"

static char base[512], root[600], shared[600], data[600];

static void mkdirs(const char *path)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0755);
            *p = '/';
        }
    }
    mkdir(tmp, 0755);
}

/* Writes text to dir/rel, creating directories. */
static void put_file(const char *dir, const char *rel, const char *text)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    mkdirs(path);
    *slash = '/';
    FILE *f = fopen(path, "wb");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static void write_manifest(const char *lines)
{
    put_file(root, "datasets/manifest.tsv", lines);
    ql_data_reset();
}

/* The sample hash of the last v2 line of the verified-hash cache for path (static
 * buffer), NULL when there is none. */
static const char *last_stamp(const char *cache, const char *path)
{
    static char sample[65];
    char real[QL_PATH_MAX];
    if (!realpath(path, real))
        return NULL;
    FILE *f = fopen(cache, "r");
    if (!f)
        return NULL;
    char line[QL_PATH_MAX + 400];
    bool found = false;
    while (fgets(line, sizeof line, f)) {
        char sh[65], s[65], p[QL_PATH_MAX];
        if (sscanf(line, "v2 %64s %*s %*s %*s %*s %*s %64s %4095[^\n]", sh, s, p) == 3 &&
            strcmp(p, real) == 0) {
            memcpy(sample, s, sizeof sample);
            found = true;
        }
    }
    fclose(f);
    return found ? sample : NULL;
}

static void append_line(const char *path, const char *line)
{
    FILE *f = fopen(path, "a");
    if (!f || fputs(line, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "cannot append to %s\n", path);
        exit(1);
    }
}

/* Resolves name and checks the path it lands on (NULL: expect an error). */
static void expect_path(const char *name, const char *want)
{
    char path[QL_PATH_MAX];
    ql_error err;
    const ql_data_entry *e = NULL;
    ql_status st = ql_data_resolve(name, path, sizeof path, &e, &err);
    CHECK_OK(st, &err);
    if (st == QL_OK) {
        CHECK_MSG(strcmp(path, want) == 0, "'%s' resolved to %s, expected %s", name, path, want);
        CHECK(e != NULL && strcmp(e->name, name) == 0);
    }
}

int main(void)
{
    snprintf(base, sizeof base, "%s", qlt_tmpdir());
    /* <base>/tree/root is the qlab tree, <base>/tree/shared its ../shared mirror. */
    snprintf(root, sizeof root, "%s/tree/root", base);
    snprintf(shared, sizeof shared, "%s/tree/shared", base);
    snprintf(data, sizeof data, "%s/data", base);
    mkdirs(root);
    mkdirs(shared);
    mkdirs(data);
    setenv("QLAB_ROOT", root, 1);
    unsetenv("QLAB_DATA");
    CHECK(strcmp(ql_data_root(), root) == 0);

    const char *text = "the quick brown fox\n"; /* 20 bytes */
    char sha[65];
    ql_sha256_hex(text, strlen(text), sha);
    char manifest[2048];
    snprintf(manifest, sizeof manifest,
             "# name\tkind\tfile\tsha256\tbytes\tsource\tlicense\n"
             "\n"
             "fox\ttext\ttexts/fox.txt\t%s\t20\thttps://example.org/fox.txt\tCC0\n"
             "ghost\ttext\ttexts/ghost.txt\t%s\t20\thttps://example.org/ghost.txt\tCC0\n"
             "badsha\ttext\ttexts/badsha.txt\t%s\t20\thttps://example.org/b.txt\tCC0\n"
             "badsize\tmodel\tmodels/badsize.gguf\t%s\t20\thttps://example.org/m\tCC0\n",
             sha, sha, sha, sha);
    write_manifest(manifest);
    const ql_data_entry *es;
    int n;
    ql_error err;
    CHECK_OK(ql_data_manifest(&es, &n, &err), &err);
    CHECK_EQ_INT(n, 4);

    /* ---- search order: each newly added place wins over the ones before ---- */
    char want[1200];
    put_file(shared, "texts/fox.txt", text);
    snprintf(want, sizeof want, "%s/../shared/texts/fox.txt", root);
    expect_path("fox", want);
    put_file(root, "datasets/cache/fox.txt", text);
    snprintf(want, sizeof want, "%s/datasets/cache/fox.txt", root);
    expect_path("fox", want);
    put_file(root, "datasets/cache/texts/fox.txt", text);
    snprintf(want, sizeof want, "%s/datasets/cache/texts/fox.txt", root);
    expect_path("fox", want);
    setenv("QLAB_DATA", data, 1);
    expect_path("fox", want); /* QLAB_DATA set but empty: still the cache */
    put_file(data, "fox.txt", text);
    snprintf(want, sizeof want, "%s/fox.txt", data);
    expect_path("fox", want);
    put_file(data, "texts/fox.txt", text);
    snprintf(want, sizeof want, "%s/texts/fox.txt", data);
    expect_path("fox", want);
    char cands[QL_DATA_MAX_CANDIDATES][QL_PATH_MAX];
    CHECK_EQ_INT(ql_data_candidates(ql_data_find("fox", &err), cands), 5);

    /* The verified cache records the file; ql_data_list's status reads it. */
    CHECK(ql_data_is_verified(ql_data_find("fox", &err), want));
    char cache[1200];
    snprintf(cache, sizeof cache, "%s/datasets/cache/verified.tsv", root);
    CHECK(ql_file_exists(cache));

    /* Same size, same mtime, other content: the edit moved the ctime, so the file is
     * verified again (it was trusted by size and mtime alone before). */
    struct stat sb;
    CHECK(stat(want, &sb) == 0);
    const char *stamp = last_stamp(cache, want);
    CHECK_MSG(stamp != NULL, "no v2 stamp of %s in %s", want, cache);
    put_file(data, "texts/fox.txt", "the quick brown cat\n");
    struct timespec times[2] = {sb.st_atim, sb.st_mtim};
    CHECK(utimensat(AT_FDCWD, want, times, 0) == 0);
    char path[QL_PATH_MAX];
    ql_status st = ql_data_resolve("fox", path, sizeof path, NULL, &err);
    CHECK_MSG(st == QL_EFORMAT && strstr(err.msg, "sha256 mismatch for text 'fox'"), "%s", err.msg);
    CHECK(!ql_data_is_verified(ql_data_find("fox", &err), want));
    st = ql_data_verify(ql_data_find("fox", &err), true, path, sizeof path, &err);
    CHECK(st == QL_EFORMAT && strstr(err.msg, "sha256 mismatch for text 'fox'") &&
          strstr(err.msg, sha) && strstr(err.msg, want));
    /* Where the ctime cannot be trusted either (a filesystem that keeps none), the
     * sampled blocks still differ: a line with the edited file's whole stat but the
     * old sample hash is not taken for it. */
    if (stamp) {
        struct stat now;
        CHECK(stat(want, &now) == 0);
        char real[QL_PATH_MAX], line[QL_PATH_MAX + 400];
        CHECK(realpath(want, real) != NULL);
        snprintf(line, sizeof line, "v2 %s %lld %lld.%09ld %lld.%09ld %llu %llu %s %s\n", sha,
                 (long long)now.st_size, (long long)now.st_mtim.tv_sec, (long)now.st_mtim.tv_nsec,
                 (long long)now.st_ctim.tv_sec, (long)now.st_ctim.tv_nsec,
                 (unsigned long long)now.st_dev, (unsigned long long)now.st_ino, stamp, real);
        append_line(cache, line);
        st = ql_data_resolve("fox", path, sizeof path, NULL, &err);
        CHECK_MSG(st == QL_EFORMAT && strstr(err.msg, "sha256 mismatch"), "%s", err.msg);
    }
    /* A changed mtime invalidates the cache entry: the plain resolve sees it too. */
    put_file(data, "texts/fox.txt", "the quick brown cat\n");
    st = ql_data_resolve("fox", path, sizeof path, NULL, &err);
    CHECK(st == QL_EFORMAT && strstr(err.msg, "sha256 mismatch"));
    put_file(data, "texts/fox.txt", text);
    expect_path("fox", want);

    /* ---- not found: every place looked, and how to get the file ---- */
    st = ql_data_resolve("ghost", path, sizeof path, NULL, &err);
    CHECK(st == QL_ENOTFOUND);
    const char *places[][2] = {{data, "texts/ghost.txt"},
                               {data, "ghost.txt"},
                               {root, "datasets/cache/texts/ghost.txt"},
                               {root, "datasets/cache/ghost.txt"},
                               {root, "../shared/texts/ghost.txt"}};
    for (int i = 0; i < 5; i++) {
        snprintf(want, sizeof want, "%s/%s", places[i][0], places[i][1]);
        CHECK_MSG(strstr(err.msg, want) != NULL, "'%s' not in: %s", want, err.msg);
    }
    CHECK(strstr(err.msg, "datasets/fetch.sh ghost") && strstr(err.msg, "https://example.org"));
    /* The order of the list is the search order. */
    snprintf(want, sizeof want, "%s/ghost.txt", data);
    char want2[1200];
    snprintf(want2, sizeof want2, "%s/datasets/cache/texts/ghost.txt", root);
    CHECK(strstr(err.msg, want) && strstr(err.msg, want2) &&
          strstr(err.msg, want) < strstr(err.msg, want2));

    /* ---- mismatches ---- */
    put_file(shared, "texts/badsha.txt", "the quick brown dog\n");
    st = ql_data_resolve("badsha", path, sizeof path, NULL, &err);
    CHECK(st == QL_EFORMAT && strstr(err.msg, "sha256 mismatch for text 'badsha': expected") &&
          strstr(err.msg, sha));
    put_file(shared, "models/badsize.gguf", "short\n");
    st = ql_data_resolve("badsize", path, sizeof path, NULL, &err);
    CHECK(st == QL_EFORMAT && strstr(err.msg, "model 'badsize' is 6 bytes, the manifest says 20"));

    /* ---- plain paths ---- */
    char plain[1200];
    snprintf(plain, sizeof plain, "%s/plain.txt", base);
    put_file(base, "plain.txt", "x");
    const ql_data_entry *e = (const ql_data_entry *)1;
    CHECK_OK(ql_data_resolve(plain, path, sizeof path, &e, &err), &err);
    CHECK(strcmp(path, plain) == 0 && e == NULL);
    st = ql_data_resolve("no-such-name-or-file", path, sizeof path, &e, &err);
    CHECK(st == QL_ENOTFOUND && strstr(err.msg, "neither an existing file nor a dataset name") &&
          strstr(err.msg, "fox, ghost, badsha, badsize"));

    /* ---- one path rule (a sweep file's): relative to a directory, names by kind ---- */
    CHECK(ql_data_join("a/b", "c.txt", path, sizeof path) && strcmp(path, "a/b/c.txt") == 0);
    CHECK(ql_data_join("a/b/", "c.txt", path, sizeof path) && strcmp(path, "a/b/c.txt") == 0);
    CHECK(ql_data_join("/", "c.txt", path, sizeof path) && strcmp(path, "/c.txt") == 0);
    CHECK(ql_data_join("a", "/abs/c.txt", path, sizeof path) && strcmp(path, "/abs/c.txt") == 0);
    CHECK(ql_data_join("", "c.txt", path, sizeof path) && strcmp(path, "c.txt") == 0);
    CHECK(ql_data_join(NULL, "c.txt", path, sizeof path) && strcmp(path, "c.txt") == 0);
    char tiny[8];
    CHECK(!ql_data_join("abc", "def.txt", tiny, sizeof tiny));
    CHECK_OK(ql_data_resolve_in(base, NULL, "plain.txt", path, sizeof path, &e, &err), &err);
    CHECK(strcmp(path, plain) == 0 && e == NULL);
    CHECK_OK(ql_data_find_in(base, "text", "plain.txt", path, sizeof path, &err), &err);
    CHECK(strcmp(path, plain) == 0);
    /* A name is a name wherever the file that names it is; of the kind asked for. */
    CHECK_OK(ql_data_resolve_in(base, "text", "fox", path, sizeof path, &e, &err), &err);
    CHECK(e && strcmp(e->name, "fox") == 0);
    st = ql_data_resolve_in(base, "model", "fox", path, sizeof path, &e, &err);
    CHECK_MSG(st == QL_EINVAL && strcmp(err.msg, "'fox' is a text of the data manifest, not a "
                                                 "model") == 0,
              "%s", err.msg);
    /* Not found: the path looked at, and only the names of the kind. */
    st = ql_data_resolve_in(base, "model", "none.gguf", path, sizeof path, &e, &err);
    snprintf(want, sizeof want,
             "'none.gguf' is neither an existing file %s/none.gguf nor a model name (model "
             "names: badsize)",
             base);
    CHECK_MSG(st == QL_ENOTFOUND && strcmp(err.msg, want) == 0, "%s", err.msg);
    st = ql_data_find_in(base, "text", "none.txt", path, sizeof path, &err);
    CHECK_MSG(st == QL_ENOTFOUND && strstr(err.msg, "(text names: fox, ghost, badsha)"), "%s",
              err.msg);
    /* A named file that is nowhere: where it was looked for, without hashing anything. */
    st = ql_data_find_in(base, "text", "ghost", path, sizeof path, &err);
    CHECK_MSG(st == QL_ENOTFOUND && strstr(err.msg, "text 'ghost' not found; looked in:"), "%s",
              err.msg);
    /* Kind "file": a path only, never a name. */
    st = ql_data_resolve_in(base, "file", "fox", path, sizeof path, &e, &err);
    snprintf(want, sizeof want, "'fox': no such file %s/fox", base);
    CHECK_MSG(st == QL_ENOTFOUND && strcmp(err.msg, want) == 0, "%s", err.msg);
    CHECK_OK(ql_data_resolve_in(base, "file", "plain.txt", path, sizeof path, &e, &err), &err);

    /* ---- manifest errors name the line (blank and comment lines count) ---- */
#define Z64 "0000000000000000000000000000000000000000000000000000000000000000"
    struct {
        const char *text;
        const char *msg;
    } bad[] = {
        {"# c\n\nx\ttext\tf.txt\n", "manifest.tsv:3: expected 7 tab-separated columns"},
        {"x\tvideo\tf\t" Z64 "\t1\ts\tl\n", "manifest.tsv:1: 'x': kind is 'video'"},
        {"x\ttext\tf\tABC\t1\ts\tl\n", "manifest.tsv:1: 'x': sha256 'ABC' is not 64"},
        {"x\ttext\tf\t" Z64 "\t-5\ts\tl\n", "manifest.tsv:1: 'x': bytes '-5' is not a size"},
        {"x\ttext\t../f\t" Z64 "\t1\ts\tl\n", "must be a relative path without '..'"},
        {"x\ttext\t/etc/passwd\t" Z64 "\t1\ts\tl\n", "or a path under /usr/"},
        {"x\ttext\t/usr/../etc/f\t" Z64 "\t1\ts\tl\n", "must be a relative path without '..'"},
        {"x\ttext\tf\t" Z64 "\t1\ts\tl\r\nx\ttext\tg\t" Z64 "\t1\ts\tl\n",
         "manifest.tsv:2: duplicate name 'x'"},
        {"x\ttext\tf\t" Z64 "\t1\ts\tl\textra\n", "got 8 or more"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_manifest(bad[i].text);
        st = ql_data_manifest(&es, &n, &err);
        CHECK_MSG(st == QL_EFORMAT && strstr(err.msg, bad[i].msg), "case %zu: %s", i, err.msg);
    }
    /* An unreadable manifest is reported when a name is looked up. */
    char mpath[1200];
    snprintf(mpath, sizeof mpath, "%s/datasets/manifest.tsv", root);
    remove(mpath);
    ql_data_reset();
    st = ql_data_resolve("fox", path, sizeof path, NULL, &err);
    CHECK(st == QL_ENOTFOUND && strstr(err.msg, "reading the data manifest"));
    ql_data_reset();
    return qlt_done();
}
