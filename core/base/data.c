#include "base/data.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/suggest.h"
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
    /* A relative path of the shared mirror's layout, or an absolute one under /usr/ (a
     * file a Debian package installs: its source column names the package). */
    if (!cols[2][0] || !take(e->file, sizeof e->file, cols[2]) ||
        (cols[2][0] == '/' && strncmp(cols[2], "/usr/", 5) != 0) || strstr(cols[2], ".."))
        return ql_error_set(err, QL_EFORMAT,
                            "%s:%d: '%s': file '%s' must be a relative path without '..', or a "
                            "path under /usr/ (at most %zu bytes)",
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
    if (e->file[0] == '/') {
        /* A system file: $QLAB_DATA may hold a copy by its base name. */
        if (data && *data)
            snprintf(out[n++], QL_PATH_MAX, "%s/%s", data, base);
        snprintf(out[n++], QL_PATH_MAX, "%s", e->file);
        return n;
    }
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

ql_status ql_data_sha256(const ql_data_entry *entry, const char *path, char sha[65],
                         ql_error *err)
{
    if (!entry)
        return ql_sha256_file(path, sha, err);
    ql_strlcpy(sha, entry->sha256, 65);
    return QL_OK;
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

/* ------------------------------------------------------------------------ */
/* The verified-hash cache                                                    */

/* A file whose sha256 was checked is trusted while its stamp is unchanged: one line
 *   v2 <sha256> <size> <mtime> <ctime> <device> <inode> <sample> <path>
 * per verification in <root>/datasets/cache/verified.tsv (mtime and ctime with
 * nanoseconds). Any write to a file moves its ctime, even when the writer puts the
 * mtime back (touch -d, cp -p, rsync -t); where a filesystem keeps no honest ctime,
 * <sample> still catches most in-place edits: the SHA-256 of SAMPLE_BLOCKS blocks of
 * SAMPLE_BYTES at evenly spaced offsets, the first and the last block included (the
 * whole file when it is smaller), a few hundred KiB read whatever the file's size.
 * Lines of older qlab versions (without "v2") match nothing: such a file is verified
 * once more. */
#define SAMPLE_BLOCKS 64
#define SAMPLE_BYTES  4096
/* Largest cache file read; a larger one is ignored (every file is verified again). */
#define CACHE_MAX_BYTES ((uint64_t)64 << 20)

/* SHA-256 of the sampled blocks of path (hex); false when it cannot be read. */
static bool sample_hash(const char *path, char out[65])
{
    int fd;
    uint64_t size;
    if (ql_file_open_regular(path, "data file", &fd, &size, NULL))
        return false;
    bool ok = true;
    /* Offsets and blocks into one buffer: an edit that moves bytes between blocks
     * changes the hash too. */
    const size_t rec = sizeof(uint64_t) + SAMPLE_BYTES;
    unsigned char *buf = calloc(SAMPLE_BLOCKS, rec);
    size_t used = 0;
    if (!buf) {
        ok = false;
        goto out;
    }
    const uint64_t span = size > SAMPLE_BYTES ? size - SAMPLE_BYTES : 0;
    for (uint64_t i = 0; i < SAMPLE_BLOCKS; i++) {
        const uint64_t off = span * i / (SAMPLE_BLOCKS - 1);
        memcpy(buf + used, &off, sizeof off);
        used += sizeof off;
        size_t got = 0;
        while (got < SAMPLE_BYTES) {
            ssize_t r = pread(fd, buf + used + got, SAMPLE_BYTES - got, (off_t)(off + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                ok = false;
                goto out;
            }
            if (r == 0)
                break;
            got += (size_t)r;
        }
        used += got;
        if (span == 0)
            break; /* the whole file was the first block */
    }
    ql_sha256_hex(buf, used, out);
out:
    free(buf);
    close(fd);
    return ok;
}

/* The cache line of path with stat sb and the given sha256; false when the file
 * cannot be sampled or the line does not fit. */
static bool stamp_line(const char *path, const char *sha, const struct stat *sb, char *line,
                       size_t size)
{
    char sample[65];
    if (!sample_hash(path, sample))
        return false;
    int n =
        snprintf(line, size, "v2 %s %lld %lld.%09ld %lld.%09ld %llu %llu %s %s\n", sha,
                 (long long)sb->st_size, (long long)sb->st_mtim.tv_sec, (long)sb->st_mtim.tv_nsec,
                 (long long)sb->st_ctim.tv_sec, (long)sb->st_ctim.tv_nsec,
                 (unsigned long long)sb->st_dev, (unsigned long long)sb->st_ino, sample, path);
    return n > 0 && (size_t)n < size;
}

static bool already_verified(const char *cache, const char *path, const char *sha,
                             const struct stat *sb)
{
    char want[QL_PATH_MAX + 320];
    if (!stamp_line(path, sha, sb, want, sizeof want))
        return false;
    char *text;
    size_t len;
    if (ql_file_read_capped(cache, "verified-hash cache", CACHE_MAX_BYTES, &text, &len, NULL))
        return false;
    const size_t wl = strlen(want);
    bool found = false;
    for (const char *line = text; line < text + len && !found;) {
        const char *nl = memchr(line, '\n', (size_t)(text + len - line));
        const size_t ll = nl ? (size_t)(nl - line) + 1 : (size_t)(text + len - line);
        found = ll == wl && memcmp(line, want, wl) == 0;
        line += ll;
    }
    free(text);
    return found;
}

static void remember_verified(const char *cache, const char *path, const char *sha,
                              const struct stat *sb)
{
    char dir[QL_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/datasets/cache", ql_data_root());
    mkdir(dir, 0755); /* may exist; a read-only tree just means we verify every time */
    char line[QL_PATH_MAX + 320];
    if (!stamp_line(path, sha, sb, line, sizeof line))
        return;
    /* One append-mode write per line keeps concurrent shards from interleaving. */
    int fd = open(cache, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, strlen(line));
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

bool ql_data_join(const char *base_dir, const char *path, char *out, size_t size)
{
    int n = base_dir && *base_dir && path[0] != '/'
                ? snprintf(out, size, "%s%s%s", base_dir,
                           base_dir[strlen(base_dir) - 1] == '/' ? "" : "/", path)
                : snprintf(out, size, "%s", path);
    return n >= 0 && (size_t)n < size;
}

/* "stories260K, tiny256": the manifest's names of a kind (NULL: models and texts), within
 * size; "" when the manifest cannot be read (msg then says why). hint: "; did you mean
 * 'x'?" for the name closest to `name`, or "". */
static void known_names(const char *kind, const char *name, char *names, size_t size, char *hint,
                        size_t hint_size, ql_error *merr)
{
    const ql_data_entry *es;
    int n;
    size_t o = 0;
    names[0] = '\0';
    hint[0] = '\0';
    if (ql_data_manifest(&es, &n, merr) != QL_OK)
        return;
    const char *cands[256];
    size_t nc = 0;
    for (int i = 0; i < n && o < size; i++) {
        if (kind ? strcmp(es[i].kind, kind) != 0 : strcmp(es[i].kind, "table") == 0)
            continue;
        o += (size_t)snprintf(names + o, size - o, "%s%s", o ? ", " : "", es[i].name);
        if (nc < sizeof cands / sizeof cands[0])
            cands[nc++] = es[i].name;
    }
    ql_did_you_mean(hint, hint_size, name, cands, nc, NULL);
}

/* ql_data_resolve_in and ql_data_find_in: a named file verified or only found. */
static ql_status resolve(const char *base_dir, const char *kind, const char *name_or_path,
                         bool verify, char *path_out, size_t size, const ql_data_entry **entry_out,
                         ql_error *err)
{
    if (entry_out)
        *entry_out = NULL;
    ql_error merr;
    ql_error_clear(&merr);
    const bool path_only = kind && strcmp(kind, "file") == 0;
    const ql_data_entry *e = path_only ? NULL : ql_data_find(name_or_path, &merr);
    if (e && kind && strcmp(e->kind, kind) != 0)
        return ql_error_set(err, QL_EINVAL, "'%s' is a %s of the data manifest, not a %s",
                            name_or_path, e->kind, kind);
    if (e) {
        /* Not found, ql_data_verify says where it looked and how to get the file. */
        ql_status st = !verify && ql_data_locate(e, path_out, size)
                           ? QL_OK
                           : ql_data_verify(e, false, path_out, size, err);
        if (st == QL_OK && entry_out)
            *entry_out = e;
        return st;
    }
    char path[QL_PATH_MAX];
    if (!ql_data_join(base_dir, name_or_path, path, sizeof path))
        return ql_error_set(err, QL_EINVAL, "'%.64s...': the path is too long", name_or_path);
    if (is_file(path)) {
        if (!take(path_out, size, path))
            return ql_error_set(err, QL_EINVAL, "%.64s...: the path is too long", path);
        return QL_OK;
    }
    /* A FIFO or device is not a file to read: say so rather than "not found". */
    if (ql_file_exists(path))
        return ql_file_refuse_special(path, "file", err);
    /* The path looked at, when it is not the value itself (a sweep file's directory). */
    char looked[QL_PATH_MAX + 32] = "";
    if (strcmp(path, name_or_path) != 0)
        snprintf(looked, sizeof looked, " %s", path);
    if (path_only)
        return ql_error_set(err, QL_ENOTFOUND, "'%s': no such file%s", name_or_path, looked);
    char names[1024], hint[QL_PATH_MAX + 32];
    known_names(kind, name_or_path, names, sizeof names, hint, sizeof hint, &merr);
    if (kind)
        return ql_error_set(err, QL_ENOTFOUND,
                            "'%s' is neither an existing file%s nor a %s name%s (%s names: %s)",
                            name_or_path, looked, kind, hint, kind, names[0] ? names : merr.msg);
    return ql_error_set(err, QL_ENOTFOUND,
                        "'%s' is neither an existing file%s nor a dataset name%s (known names: "
                        "%s)",
                        name_or_path, looked, hint, names[0] ? names : merr.msg);
}

ql_status ql_data_resolve_in(const char *base_dir, const char *kind, const char *name_or_path,
                             char *path_out, size_t size, const ql_data_entry **entry_out,
                             ql_error *err)
{
    return resolve(base_dir, kind, name_or_path, true, path_out, size, entry_out, err);
}

ql_status ql_data_find_in(const char *base_dir, const char *kind, const char *name_or_path,
                          char *path_out, size_t size, ql_error *err)
{
    return resolve(base_dir, kind, name_or_path, false, path_out, size, NULL, err);
}

ql_status ql_data_resolve(const char *name_or_path, char *path_out, size_t size,
                          const ql_data_entry **entry_out, ql_error *err)
{
    return ql_data_resolve_in(NULL, NULL, name_or_path, path_out, size, entry_out, err);
}
