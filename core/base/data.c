#include "base/data.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "ql_config.h"

static ql_data_entry *manifest;
static int n_manifest = -1;
static pthread_mutex_t manifest_lock = PTHREAD_MUTEX_INITIALIZER;

const char *ql_data_root(void)
{
    const char *env = getenv("QLAB_ROOT");
    return env && *env ? env : QL_SOURCE_ROOT;
}

/* Copies a column into a fixed field; false when it does not fit. */
static bool take(char *dst, size_t size, const char *src)
{
    return ql_strlcpy(dst, src, size) < size;
}

/* Parses one non-comment manifest line into e; sets a message naming path:line. */
static ql_status parse_line(char *line, const char *path, int lineno, ql_data_entry *e,
                            ql_error *err)
{
    char *cols[8] = {0};
    int nc = 0;
    for (char *p = line; nc < 8;) {
        cols[nc++] = p;
        char *tab = strchr(p, '\t');
        if (!tab)
            break;
        *tab = '\0';
        p = tab + 1;
    }
    if (nc != 7)
        return ql_error_set(err, QL_EFORMAT,
                            "%s:%d: expected 7 tab-separated columns (name, kind, file, sha256, "
                            "bytes, source, license), got %d%s",
                            path, lineno, nc, nc == 8 ? " or more" : "");
    memset(e, 0, sizeof *e);
    if (!cols[0][0] || !take(e->name, sizeof e->name, cols[0]))
        return ql_error_set(err, QL_EFORMAT, "%s:%d: name is empty or longer than %zu bytes", path,
                            lineno, sizeof e->name - 1);
    if (strcmp(cols[1], "model") != 0 && strcmp(cols[1], "text") != 0 &&
        strcmp(cols[1], "table") != 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s:%d: '%s': kind is '%s', expected model, text or table", path,
                            lineno, e->name, cols[1]);
    ql_strlcpy(e->kind, cols[1], sizeof e->kind);
    if (!cols[2][0] || !take(e->file, sizeof e->file, cols[2]) || cols[2][0] == '/' ||
        strstr(cols[2], ".."))
        return ql_error_set(err, QL_EFORMAT,
                            "%s:%d: '%s': file '%s' must be a relative path without '..' (at "
                            "most %zu bytes)",
                            path, lineno, e->name, cols[2], sizeof e->file - 1);
    bool hex = strlen(cols[3]) == 64;
    for (const char *h = cols[3]; hex && *h; h++)
        hex = (*h >= '0' && *h <= '9') || (*h >= 'a' && *h <= 'f');
    if (!hex)
        return ql_error_set(err, QL_EFORMAT,
                            "%s:%d: '%s': sha256 '%s' is not 64 lower-case hex digits", path,
                            lineno, e->name, cols[3]);
    ql_strlcpy(e->sha256, cols[3], sizeof e->sha256);
    if (!ql_parse_i64(cols[4], &e->bytes) || e->bytes < 0)
        return ql_error_set(err, QL_EFORMAT, "%s:%d: '%s': bytes '%s' is not a size", path, lineno,
                            e->name, cols[4]);
    if (!take(e->source, sizeof e->source, cols[5]) ||
        !take(e->license, sizeof e->license, cols[6]))
        return ql_error_set(err, QL_EFORMAT, "%s:%d: '%s': source or license too long", path,
                            lineno, e->name);
    return QL_OK;
}

static ql_status parse_manifest(const char *path, ql_error *err)
{
    char *text;
    size_t len;
    ql_status st = ql_file_read_all(path, &text, &len, err);
    if (st)
        return ql_error_prefix(err, "reading the data manifest: ");
    int cap = 64, n = 0, lineno = 0;
    ql_data_entry *es = calloc((size_t)cap, sizeof *es);
    if (!es) {
        st = ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
        goto out_text;
    }
    /* Split by hand (not strtok) so that blank lines still count in line numbers. */
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        lineno++;
        size_t ll = strlen(line);
        if (ll && line[ll - 1] == '\r')
            line[--ll] = '\0';
        if (line[0] != '#' && line[0] != '\0') {
            if (n == cap) {
                cap *= 2;
                ql_data_entry *ne = realloc(es, (size_t)cap * sizeof *ne);
                if (!ne) {
                    st = ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
                    goto out_entries;
                }
                es = ne;
            }
            if ((st = parse_line(line, path, lineno, &es[n], err)))
                goto out_entries;
            for (int i = 0; i < n; i++)
                if (strcmp(es[i].name, es[n].name) == 0) {
                    st = ql_error_set(err, QL_EFORMAT, "%s:%d: duplicate name '%s'", path, lineno,
                                      es[n].name);
                    goto out_entries;
                }
            n++;
        }
        line = nl ? nl + 1 : NULL;
    }
    manifest = es;
    n_manifest = n;
    goto out_text;
out_entries:
    free(es);
out_text:
    free(text);
    return st;
}

void ql_data_reset(void)
{
    pthread_mutex_lock(&manifest_lock);
    free(manifest);
    manifest = NULL;
    n_manifest = -1;
    pthread_mutex_unlock(&manifest_lock);
}

ql_status ql_data_manifest(const ql_data_entry **entries, int *n, ql_error *err)
{
    ql_status st = QL_OK;
    pthread_mutex_lock(&manifest_lock);
    if (n_manifest < 0) {
        char path[QL_PATH_MAX];
        snprintf(path, sizeof path, "%s/datasets/manifest.tsv", ql_data_root());
        st = parse_manifest(path, err);
    }
    pthread_mutex_unlock(&manifest_lock);
    if (st)
        return st;
    *entries = manifest;
    *n = n_manifest;
    return QL_OK;
}

const ql_data_entry *ql_data_find(const char *name, ql_error *err)
{
    const ql_data_entry *es;
    int n;
    if (ql_data_manifest(&es, &n, err))
        return NULL;
    for (int i = 0; i < n; i++)
        if (strcmp(es[i].name, name) == 0)
            return &es[i];
    return NULL;
}

static bool is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Fills the candidate paths in search order (data.h); returns how many. */
static int candidates(const ql_data_entry *e, char out[QL_DATA_MAX_CANDIDATES][QL_PATH_MAX])
{
    const char *base = strrchr(e->file, '/');
    base = base ? base + 1 : e->file;
    const char *data = getenv("QLAB_DATA");
    const char *root = ql_data_root();
    int n = 0;
    if (data && *data) {
        snprintf(out[n++], QL_PATH_MAX, "%s/%s", data, e->file);
        snprintf(out[n++], QL_PATH_MAX, "%s/%s", data, base);
    }
    snprintf(out[n++], QL_PATH_MAX, "%s/datasets/cache/%s", root, e->file);
    snprintf(out[n++], QL_PATH_MAX, "%s/datasets/cache/%s", root, base);
    snprintf(out[n++], QL_PATH_MAX, "%s/../shared/%s", root, e->file);
    return n;
}

int ql_data_candidates(const ql_data_entry *e, char out[QL_DATA_MAX_CANDIDATES][QL_PATH_MAX])
{
    return candidates(e, out);
}

bool ql_data_locate(const ql_data_entry *e, char *path_out, size_t size)
{
    char c[QL_DATA_MAX_CANDIDATES][QL_PATH_MAX];
    int n = candidates(e, c);
    for (int i = 0; i < n; i++) {
        if (is_file(c[i])) {
            ql_strlcpy(path_out, c[i], size);
            return true;
        }
    }
    return false;
}

/* The verified-hash cache: lines "sha256 size mtime path", mtime with nanoseconds
 * so that a file rewritten within the same second is not taken for the old one. */
static bool already_verified(const char *cache, const char *path, const char *sha,
                             const struct stat *sb)
{
    FILE *f = fopen(cache, "r");
    if (!f)
        return false;
    char line[QL_PATH_MAX + 128];
    char want[QL_PATH_MAX + 128];
    snprintf(want, sizeof want, "%s %lld %lld.%09ld %s\n", sha, (long long)sb->st_size,
             (long long)sb->st_mtim.tv_sec, (long)sb->st_mtim.tv_nsec, path);
    bool found = false;
    while (fgets(line, sizeof line, f))
        if (strcmp(line, want) == 0) {
            found = true;
            break;
        }
    fclose(f);
    return found;
}

static void remember_verified(const char *cache, const char *path, const char *sha,
                              const struct stat *sb)
{
    char dir[QL_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/datasets/cache", ql_data_root());
    mkdir(dir, 0755); /* may exist; a read-only tree just means we verify every time */
    char line[QL_PATH_MAX + 128];
    int n = snprintf(line, sizeof line, "%s %lld %lld.%09ld %s\n", sha, (long long)sb->st_size,
                     (long long)sb->st_mtim.tv_sec, (long)sb->st_mtim.tv_nsec, path);
    if (n <= 0 || (size_t)n >= sizeof line)
        return;
    /* One append-mode write per line keeps concurrent shards from interleaving. */
    int fd = open(cache, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

/* Path of the verified-hash cache. */
static void cache_path(char *out, size_t size)
{
    snprintf(out, size, "%s/datasets/cache/verified.tsv", ql_data_root());
}

bool ql_data_is_verified(const ql_data_entry *e, const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return false;
    char cache[QL_PATH_MAX], real[QL_PATH_MAX];
    cache_path(cache, sizeof cache);
    if (!realpath(path, real))
        ql_strlcpy(real, path, sizeof real);
    return already_verified(cache, real, e->sha256, &sb);
}

ql_status ql_data_verify(const ql_data_entry *e, bool force, char *path_out, size_t size,
                         ql_error *err)
{
    char c[QL_DATA_MAX_CANDIDATES][QL_PATH_MAX];
    int n = candidates(e, c);
    const char *found = NULL;
    for (int i = 0; i < n && !found; i++)
        if (is_file(c[i]))
            found = c[i];
    if (!found) {
        char looked[QL_DATA_MAX_CANDIDATES * (QL_PATH_MAX + 4)] = "";
        size_t o = 0;
        for (int i = 0; i < n && o < sizeof looked; i++)
            o += (size_t)snprintf(looked + o, sizeof looked - o, "\n  %s", c[i]);
        return ql_error_set(err, QL_ENOTFOUND,
                            "%s '%s' not found; looked in:%s\nget it with 'datasets/fetch.sh %s' "
                            "(source: %s; sha256 %s, %lld bytes) or put the file at %s/datasets/"
                            "cache/%s",
                            e->kind, e->name, looked, e->name, e->source, e->sha256,
                            (long long)e->bytes, ql_data_root(), e->file);
    }
    struct stat sb;
    if (stat(found, &sb) != 0)
        return ql_error_set(err, QL_EIO, "%s: cannot stat: %s", found, strerror(errno));
    char cache[QL_PATH_MAX];
    cache_path(cache, sizeof cache);
    char real[QL_PATH_MAX];
    if (!realpath(found, real))
        ql_strlcpy(real, found, sizeof real);
    if (force || !already_verified(cache, real, e->sha256, &sb)) {
        if ((int64_t)sb.st_size != e->bytes)
            return ql_error_set(
                err, QL_EFORMAT, "%s: %s '%s' is %lld bytes, the manifest says %lld (sha256 %s)",
                found, e->kind, e->name, (long long)sb.st_size, (long long)e->bytes, e->sha256);
        char sha[65];
        ql_status st = ql_sha256_file(found, sha, err);
        if (st)
            return st;
        if (strcmp(sha, e->sha256) != 0)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: sha256 mismatch for %s '%s': expected %s, got %s", found,
                                e->kind, e->name, e->sha256, sha);
        remember_verified(cache, real, e->sha256, &sb);
    }
    ql_strlcpy(path_out, found, size);
    return QL_OK;
}

ql_status ql_data_resolve(const char *name_or_path, char *path_out, size_t size,
                          const ql_data_entry **entry_out, ql_error *err)
{
    if (entry_out)
        *entry_out = NULL;
    ql_error merr;
    ql_error_clear(&merr);
    const ql_data_entry *e = ql_data_find(name_or_path, &merr);
    if (!e) {
        if (is_file(name_or_path)) {
            ql_strlcpy(path_out, name_or_path, size);
            return QL_OK;
        }
        /* A FIFO or device is not a file to read: say so rather than "not found". */
        if (ql_file_exists(name_or_path))
            return ql_file_refuse_special(name_or_path, "file", err);
        const ql_data_entry *es;
        int n;
        char names[1024] = "";
        size_t o = 0;
        if (ql_data_manifest(&es, &n, &merr) == QL_OK) {
            for (int i = 0; i < n && o < sizeof names; i++) {
                if (strcmp(es[i].kind, "table") == 0)
                    continue;
                o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", o ? ", " : "",
                                      es[i].name);
            }
        }
        return ql_error_set(err, QL_ENOTFOUND,
                            "'%s' is neither an existing file nor a dataset name (known names: "
                            "%s)",
                            name_or_path, names[0] ? names : merr.msg);
    }
    ql_status st = ql_data_verify(e, false, path_out, size, err);
    if (st == QL_OK && entry_out)
        *entry_out = e;
    return st;
}
