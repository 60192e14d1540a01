#include "base/util.h"

#include <errno.h>
#include <signal.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "base/unicode.h"

/* Bytes hashed per read. */
#define HASH_BUFFER ((size_t)1 << 20)

/* What a non-regular file is, for messages. */
static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO (named pipe)";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

static ql_status not_regular(const char *path, const char *what, mode_t mode, ql_error *err)
{
    return ql_error_set(err, QL_EIO, "%s: %s is %s, expected a regular file", path, what,
                        file_kind(mode));
}

ql_status ql_file_open_regular(const char *path, const char *what, int *fd, uint64_t *size,
                               ql_error *err)
{
    *fd = -1;
    *size = 0;
    if (!what)
        what = "file";
    /* Non-blocking, so that a FIFO without a writer is refused instead of waited for. */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) {
        int e = errno;
        struct stat sb;
        /* A socket cannot be opened at all (ENXIO): say what it is. */
        if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
            return not_regular(path, what, sb.st_mode, err);
        return ql_error_set(err, QL_EIO, "%s: cannot open %s: %s", path, what, strerror(e));
    }
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        int e = errno;
        close(f);
        return ql_error_set(err, QL_EIO, "%s: cannot stat %s: %s", path, what, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        return not_regular(path, what, sb.st_mode, err);
    }
    int flags = fcntl(f, F_GETFL);
    if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(f);
        return ql_error_set(err, QL_EIO, "%s: cannot set up %s for reading: %s", path, what,
                            strerror(e));
    }
    *fd = f;
    *size = (uint64_t)sb.st_size;
    return QL_OK;
}

ql_status ql_file_refuse_special(const char *path, const char *what, ql_error *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode))
        return QL_OK;
    return not_regular(path, what ? what : "file", sb.st_mode, err);
}

/* read() until n bytes or the end of the file; false on an error (errno set). */
static bool read_full(int fd, char *buf, size_t n, size_t *got)
{
    *got = 0;
    while (*got < n) {
        ssize_t r = read(fd, buf + *got, n - *got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return false;
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return true;
}

ql_status ql_file_read_capped(const char *path, const char *what, uint64_t max_bytes, char **out,
                              size_t *len, ql_error *err)
{
    *out = NULL;
    if (len)
        *len = 0;
    if (!what)
        what = "file";
    int fd;
    uint64_t size;
    ql_status st = ql_file_open_regular(path, what, &fd, &size, err);
    if (st)
        return st;
    if (max_bytes > SIZE_MAX - 2)
        max_bytes = SIZE_MAX - 2;
    if (size > max_bytes) {
        st = ql_error_set(err, QL_EIO, "%s: %s is %llu bytes, more than the %llu qlab reads", path,
                          what, (unsigned long long)size, (unsigned long long)max_bytes);
        goto out_close;
    }
    /* The size from fstat is a hint (a file may grow while read, /proc files say 0):
     * read until the end, refusing anything past the cap. */
    size_t cap = (size_t)size + 2, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        st = ql_error_set(err, QL_ENOMEM, "%s: out of memory for %s of %llu bytes", path, what,
                          (unsigned long long)size);
        goto out_close;
    }
    for (;;) {
        size_t got;
        if (!read_full(fd, buf + n, cap - 1 - n, &got)) {
            st = ql_error_set(err, QL_EIO, "%s: read error in %s: %s", path, what, strerror(errno));
            goto out_free;
        }
        n += got;
        if (n > max_bytes) {
            st = ql_error_set(err, QL_EIO, "%s: %s grew past the %llu bytes qlab reads", path, what,
                              (unsigned long long)max_bytes);
            goto out_free;
        }
        if (n < cap - 1)
            break;
        size_t ncap = cap > (max_bytes + 2) / 2 ? (size_t)max_bytes + 2 : cap * 2;
        char *nb = realloc(buf, ncap);
        if (!nb) {
            st = ql_error_set(err, QL_ENOMEM, "%s: out of memory after %zu bytes of %s", path, n,
                              what);
            goto out_free;
        }
        buf = nb;
        cap = ncap;
    }
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    goto out_close;
out_free:
    free(buf);
out_close:
    close(fd);
    return st;
}

ql_status ql_file_read_all(const char *path, char **out, size_t *len, ql_error *err)
{
    return ql_file_read_capped(path, "file", QL_FILE_READ_MAX, out, len, err);
}

ql_status ql_file_map_open(ql_file_map *m, const char *path, const char *what, ql_error *err)
{
    memset(m, 0, sizeof *m);
    if (!what)
        what = "file";
    int fd;
    uint64_t size;
    ql_status st = ql_file_open_regular(path, what, &fd, &size, err);
    if (st)
        return st;
    if (size > SIZE_MAX) {
        close(fd);
        return ql_error_set(err, QL_EIO, "%s: %s of %llu bytes cannot be mapped", path, what,
                            (unsigned long long)size);
    }
    if (size > 0) {
        void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return ql_error_set(err, QL_EIO, "%s: cannot map %s of %llu bytes: %s", path, what,
                                (unsigned long long)size, strerror(e));
        }
        m->data = p;
        m->size = (size_t)size;
    }
    close(fd);
    return QL_OK;
}

void ql_file_map_close(ql_file_map *m)
{
    if (m->data && m->size)
        munmap((void *)(uintptr_t)m->data, m->size);
    memset(m, 0, sizeof *m);
}

ql_status ql_file_write_all(const char *path, const void *data, size_t len, ql_error *err)
{
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp)
        return ql_error_set(err, QL_EINVAL, "%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return ql_error_set(err, QL_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    size_t w = len ? fwrite(data, 1, len, f) : 0;
    int close_rc = fclose(f);
    if (w != len || close_rc != 0) {
        remove(tmp);
        return ql_error_set(err, QL_EIO, "%s: write failed: %s", path, strerror(errno));
    }
    if (rename(tmp, path) != 0) {
        remove(tmp);
        return ql_error_set(err, QL_EIO, "%s: cannot rename from %s: %s", path, tmp,
                            strerror(errno));
    }
    return QL_OK;
}

bool ql_file_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

ql_status ql_make_dirs(const char *path, ql_error *err)
{
    char p[4096];
    if (!*path || strlen(path) >= sizeof p)
        return ql_error_set(err, QL_EINVAL, "'%s': not a usable directory path", path);
    ql_strlcpy(p, path, sizeof p);
    /* Each prefix ending before a '/', then the whole path. */
    for (char *q = p + 1;; q++) {
        if (*q != '/' && *q != '\0')
            continue;
        char saved = *q;
        *q = '\0';
        struct stat st;
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return ql_error_set(err, QL_EIO, "%s: cannot create directory: %s", p, strerror(errno));
        if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
            return ql_error_set(err, QL_EIO, "%s: exists and is not a directory", p);
        *q = saved;
        if (!saved)
            return QL_OK;
    }
}

static void hex_digest(const unsigned char *md, unsigned n, char *out)
{
    static const char hexd[] = "0123456789abcdef";
    for (unsigned i = 0; i < n; i++) {
        out[2 * i] = hexd[md[i] >> 4];
        out[2 * i + 1] = hexd[md[i] & 15];
    }
    out[2 * n] = '\0';
}

void ql_sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL);
    hex_digest(md, mdlen, out);
}

ql_status ql_sha256_file(const char *path, char out[65], ql_error *err)
{
    int fd;
    uint64_t size;
    ql_status st = ql_file_open_regular(path, "file", &fd, &size, err);
    if (st)
        return st;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    char *buf = malloc(HASH_BUFFER);
    if (!ctx || !buf) {
        st = ql_error_set(err, QL_ENOMEM, "%s: out of memory for hashing", path);
        goto out;
    }
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (;;) {
        size_t got;
        if (!read_full(fd, buf, HASH_BUFFER, &got)) {
            st = ql_error_set(err, QL_EIO, "%s: read error: %s", path, strerror(errno));
            goto out;
        }
        if (got == 0)
            break;
        EVP_DigestUpdate(ctx, buf, got);
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    hex_digest(md, mdlen, out);
out:
    free(buf);
    EVP_MD_CTX_free(ctx);
    close(fd);
    return st;
}

bool ql_parse_i64(const char *s, int64_t *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = (int64_t)v;
    return true;
}

bool ql_parse_int(const char *s, int *out)
{
    int64_t v;
    if (!ql_parse_i64(s, &v) || v < -2147483647 - 1 || v > 2147483647)
        return false;
    *out = (int)v;
    return true;
}

bool ql_parse_double(const char *s, double *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v))
        return false;
    *out = v;
    return true;
}

/* Bytes of the character at s[i] to write as they are (1..4), or 0 when its first
 * byte is to be escaped. */
static size_t terminal_safe(const char *s, size_t len, size_t i)
{
    const unsigned char b = (unsigned char)s[i];
    if (b < 0x80)
        return b == '\n' || b == '\t' || (b >= 0x20 && b != 0x7f) ? 1 : 0;
    size_t next = i;
    const uint32_t cp = ql_utf8_decode(s, len, &next);
    /* An invalid sequence decodes to U+FFFD over one byte; a real U+FFFD takes three. */
    if ((cp == QL_UNI_REPLACEMENT && next - i == 1) || (cp >= 0x80 && cp <= 0x9f))
        return 0;
    return next - i;
}

void ql_fwrite_terminal(FILE *f, const char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        const size_t n = terminal_safe(s, len, i);
        if (n) {
            fwrite(s + i, 1, n, f);
            i += n;
        } else {
            fprintf(f, "\\x%02x", (unsigned char)s[i++]);
        }
    }
}

size_t ql_escape_terminal(const char *s, char *out, size_t size)
{
    const size_t len = strlen(s);
    size_t o = 0;
    if (size == 0)
        return 0;
    for (size_t i = 0; i < len;) {
        const size_t n = terminal_safe(s, len, i);
        const size_t need = n ? n : 4;
        if (o + need >= size)
            break;
        if (n)
            memcpy(out + o, s + i, n);
        else
            snprintf(out + o, 5, "\\x%02x", (unsigned char)s[i]);
        o += need;
        i += n ? n : 1;
    }
    out[o] = '\0';
    return o;
}

double ql_rng_uniform(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) * 0x1p-53;
}

double ql_rng_gauss(uint64_t *state)
{
    const double u1 = ql_rng_uniform(state), u2 = ql_rng_uniform(state);
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

double ql_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ql_utc_timestamp(char out[32])
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int n_threads = 0;

size_t ql_mem_total(void)
{
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

void ql_format_bytes(double bytes, char *buf, size_t size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%.0f B", bytes);
    else
        snprintf(buf, size, "%.*f %s", bytes < 10 ? 2 : bytes < 100 ? 1 : 0, bytes, units[u]);
}

void ql_threads_set(int n)
{
    if (n <= 0)
        n = omp_get_num_procs();
    n_threads = n;
    omp_set_num_threads(n);
    /* Products split their work across OpenMP's threads themselves (gemm.h): OpenBLAS's
     * own threads would make the result depend on the thread count. */
    openblas_set_num_threads(1);
}

int ql_threads_get(void)
{
    if (n_threads <= 0)
        ql_threads_set(0);
    return n_threads;
}

size_t ql_strlcpy(char *dst, const char *src, size_t size)
{
    size_t n = strlen(src);
    if (size > 0) {
        size_t c = n < size - 1 ? n : size - 1;
        memcpy(dst, src, c);
        dst[c] = '\0';
    }
    return n;
}

bool ql_grow(void **p, size_t *cap, size_t need, size_t esz)
{
    if (need <= *cap)
        return true;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / esz)
            return false;
        ncap *= 2;
    }
    void *np = realloc(*p, ncap * esz);
    if (!np)
        return false;
    memset((char *)np + *cap * esz, 0, (ncap - *cap) * esz);
    *p = np;
    *cap = ncap;
    return true;
}

char *ql_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

void ql_strset_add(const char **set, size_t *n, size_t max, const char *s)
{
    size_t i = 0;
    int c = 1;
    while (i < *n && (c = strcmp(set[i], s)) < 0)
        i++;
    if ((i < *n && c == 0) || *n >= max)
        return;
    memmove(set + i + 1, set + i, (*n - i) * sizeof *set);
    set[i] = s;
    (*n)++;
}

int ql_format_double(double v, char *buf, size_t size)
{
    if (isnan(v))
        return snprintf(buf, size, "nan");
    if (isinf(v))
        return snprintf(buf, size, v > 0 ? "inf" : "-inf");
    if (v == 0.0)
        return snprintf(buf, size, "0");
    return snprintf(buf, size, "%.*g", ql_double_precision(v), v);
}

int ql_double_precision(double v)
{
    char tmp[40];
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    return prec;
}

/* ---------------------------------------------------------------- interrupts */

static volatile sig_atomic_t interrupt_signal;

void ql_interrupt_request(int sig)
{
    interrupt_signal = sig;
}

int ql_interrupted(void)
{
    return interrupt_signal;
}

bool ql_pid_alive(long pid)
{
    if (pid <= 0 || pid != (long)(pid_t)pid)
        return false;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* "NAME.tmp.PID": the PID, or -1 for any other name. */
static long tmp_file_pid(const char *name)
{
    const char *t = strstr(name, ".tmp.");
    if (!t || t == name)
        return -1;
    /* The last ".tmp." (a name may hold one of its own). */
    for (const char *n; (n = strstr(t + 1, ".tmp.")) != NULL;)
        t = n;
    const char *d = t + 5;
    long pid = 0;
    if (*d < '1' || *d > '9')
        return -1;
    for (; *d; d++) {
        if (*d < '0' || *d > '9' || pid > 100000000L)
            return -1;
        pid = pid * 10 + (*d - '0');
    }
    return pid;
}

size_t ql_remove_stale_tmp(const char *dir, double min_age)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t removed = 0;
    const time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const long pid = tmp_file_pid(e->d_name);
        if (pid <= 0 || ql_pid_alive(pid))
            continue;
        char path[4096];
        struct stat sb;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path ||
            lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode) ||
            difftime(now, sb.st_mtime) < min_age)
            continue;
        removed += unlink(path) == 0;
    }
    closedir(d);
    return removed;
}
