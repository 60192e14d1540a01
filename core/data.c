#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ql_config.h"
#include "util.h"

static ql_data_entry *manifest;
static int n_manifest = -1;
static pthread_mutex_t manifest_lock = PTHREAD_MUTEX_INITIALIZER;

const char *ql_data_root(void)
{
    const char *env = getenv("QLAB_ROOT");
    return env && *env ? env : QL_SOURCE_ROOT;
}

static ql_status parse_manifest(const char *path, ql_error *err)
{
    char *text;
    size_t len;
    ql_status st = ql_file_read_all(path, &text, &len, err);
    if (st)
        return st;
    int cap = 64, n = 0, lineno = 0;
    ql_data_entry *es = calloc((size_t)cap, sizeof *es);
    if (!es) {
        free(text);
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
    }
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\0')
            continue;
        char *cols[7] = {0};
        int nc = 0;
        char *p = line;
        while (nc < 7) {
            cols[nc++] = p;
            char *tab = strchr(p, '\t');
            if (!tab)
                break;
            *tab = '\0';
            p = tab + 1;
        }
        if (nc != 7) {
            free(es);
            free(text);
            return ql_error_set(err, QL_EFORMAT, "%s:%d: expected 7 tab-separated columns, got %d",
                                path, lineno, nc);
        }
        if (n == cap) {
            cap *= 2;
            ql_data_entry *ne = realloc(es, (size_t)cap * sizeof *ne);
            if (!ne) {
                free(es);
                free(text);
                return ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
            }
            es = ne;
        }
        ql_data_entry *e = &es[n];
        memset(e, 0, sizeof *e);
        ql_strlcpy(e->name, cols[0], sizeof e->name);
        ql_strlcpy(e->kind, cols[1], sizeof e->kind);
        ql_strlcpy(e->file, cols[2], sizeof e->file);
        ql_strlcpy(e->sha256, cols[3], sizeof e->sha256);
        if (!ql_parse_i64(cols[4], &e->bytes) || strlen(e->sha256) != 64) {
            ql_error_set(err, QL_EFORMAT, "%s:%d: bad bytes or sha256 column for '%s'", path,
                         lineno, e->name);
            free(es);
            free(text);
            return QL_EFORMAT;
        }
        ql_strlcpy(e->source, cols[5], sizeof e->source);
        ql_strlcpy(e->license, cols[6], sizeof e->license);
        n++;
    }
    free(text);
    manifest = es;
    n_manifest = n;
    return QL_OK;
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

/* Fills the candidate paths in search order; returns how many. */
static int candidates(const ql_data_entry *e, char out[5][QL_PATH_MAX])
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

bool ql_data_locate(const ql_data_entry *e, char *path_out, size_t size)
{
    char c[5][QL_PATH_MAX];
    int n = candidates(e, c);
    for (int i = 0; i < n; i++) {
        if (is_file(c[i])) {
            ql_strlcpy(path_out, c[i], size);
            return true;
        }
    }
    return false;
}

/* The verified-hash cache: lines "sha256 size mtime path". */
static bool already_verified(const char *cache, const char *path, const char *sha,
                             const struct stat *sb)
{
    FILE *f = fopen(cache, "r");
    if (!f)
        return false;
    char line[QL_PATH_MAX + 128];
    char want[QL_PATH_MAX + 128];
    snprintf(want, sizeof want, "%s %lld %lld %s\n", sha, (long long)sb->st_size,
             (long long)sb->st_mtime, path);
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
    int n = snprintf(line, sizeof line, "%s %lld %lld %s\n", sha, (long long)sb->st_size,
                     (long long)sb->st_mtime, path);
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

ql_status ql_data_resolve(const char *name_or_path, char *path_out, size_t size,
                          const ql_data_entry **entry_out, ql_error *err)
{
    if (entry_out)
        *entry_out = NULL;
    ql_error merr;
    const ql_data_entry *e = ql_data_find(name_or_path, &merr);
    if (!e) {
        if (is_file(name_or_path)) {
            ql_strlcpy(path_out, name_or_path, size);
            return QL_OK;
        }
        const ql_data_entry *es;
        int n;
        char names[1024] = "";
        if (ql_data_manifest(&es, &n, &merr) == QL_OK) {
            for (int i = 0; i < n; i++) {
                if (strcmp(es[i].kind, "table") == 0)
                    continue;
                if (names[0])
                    strncat(names, ", ", sizeof names - strlen(names) - 1);
                strncat(names, es[i].name, sizeof names - strlen(names) - 1);
            }
        }
        return ql_error_set(err, QL_ENOTFOUND,
                            "'%s' is neither an existing file nor a dataset name (known names: "
                            "%s)",
                            name_or_path, names[0] ? names : "manifest unreadable");
    }
    char c[5][QL_PATH_MAX];
    int n = candidates(e, c);
    const char *found = NULL;
    for (int i = 0; i < n && !found; i++)
        if (is_file(c[i]))
            found = c[i];
    if (!found) {
        char looked[5 * QL_PATH_MAX + 64] = "";
        for (int i = 0; i < n; i++) {
            strncat(looked, "\n  ", sizeof looked - strlen(looked) - 1);
            strncat(looked, c[i], sizeof looked - strlen(looked) - 1);
        }
        return ql_error_set(err, QL_ENOTFOUND,
                            "%s '%s' not found; looked in:%s\ndownload it from %s (sha256 %s, %lld "
                            "bytes) into %s/datasets/cache/%s",
                            e->kind, e->name, looked, e->source, e->sha256, (long long)e->bytes,
                            ql_data_root(), e->file);
    }
    struct stat sb;
    if (stat(found, &sb) != 0)
        return ql_error_set(err, QL_EIO, "%s: cannot stat: %s", found, strerror(errno));
    char cache[QL_PATH_MAX];
    snprintf(cache, sizeof cache, "%s/datasets/cache/verified.tsv", ql_data_root());
    char real[QL_PATH_MAX];
    if (!realpath(found, real))
        ql_strlcpy(real, found, sizeof real);
    if (!already_verified(cache, real, e->sha256, &sb)) {
        if ((int64_t)sb.st_size != e->bytes)
            return ql_error_set(err, QL_EFORMAT, "%s: %s '%s' is %lld bytes, the manifest says %lld",
                                found, e->kind, e->name, (long long)sb.st_size, (long long)e->bytes);
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
    if (entry_out)
        *entry_out = e;
    return QL_OK;
}
