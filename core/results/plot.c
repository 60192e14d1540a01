#include "results/plot.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"

bool ql_gnuplot_find(char *path, size_t size)
{
    const char *env = getenv("PATH");
    if (!env || !*env)
        return false;
    const char *p = env;
    for (;;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char cand[4096];
        /* An empty PATH entry means the current directory. */
        int n = len ? snprintf(cand, sizeof cand, "%.*s/gnuplot", (int)len, p)
                    : snprintf(cand, sizeof cand, "./gnuplot");
        struct stat st;
        if (n > 0 && (size_t)n < sizeof cand && stat(cand, &st) == 0 && S_ISREG(st.st_mode) &&
            access(cand, X_OK) == 0) {
            if (path)
                ql_strlcpy(path, cand, size);
            return true;
        }
        if (!end)
            return false;
        p = end + 1;
    }
}

/* The first lines of gnuplot's output, for an error message. */
static void first_lines(const char *s, char *out, size_t size, int max_lines)
{
    size_t o = 0;
    int lines = 0;
    for (; *s && o + 4 < size && lines < max_lines; s++) {
        if (*s == '\n') {
            lines++;
            if (lines < max_lines && s[1])
                out[o++] = '|';
            continue;
        }
        out[o++] = *s == '\r' || *s == '\t' ? ' ' : *s;
    }
    out[o] = '\0';
}

ql_status ql_gnuplot_run(const char *dir, const char *script, ql_error *err)
{
    char exe[4096];
    if (!ql_gnuplot_find(exe, sizeof exe))
        return ql_error_set(err, QL_ENOTFOUND, "gnuplot not found on PATH");
    int fd[2];
    if (pipe(fd) != 0)
        return ql_error_set(err, QL_EEXTERNAL, "gnuplot %s: cannot create a pipe: %s", script,
                            strerror(errno));
    /* Everything the child needs is prepared before fork: after it, only
     * async-signal-safe calls. */
    char *const argv[] = {exe, (char *)script, NULL};
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fd[0]);
        close(fd[1]);
        return ql_error_set(err, QL_EEXTERNAL, "gnuplot %s: cannot fork: %s", script, strerror(e));
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        dup2(fd[1], STDOUT_FILENO);
        dup2(fd[1], STDERR_FILENO);
        close(fd[0]);
        close(fd[1]);
        if (chdir(dir) != 0)
            _exit(126);
        execv(exe, argv);
        _exit(127);
    }
    close(fd[1]);

    /* Keep the start of the output for the message; drain the rest. */
    char msg[4096];
    size_t len = 0;
    for (;;) {
        char chunk[4096];
        ssize_t n = read(fd[0], chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        size_t take = (size_t)n < sizeof msg - 1 - len ? (size_t)n : sizeof msg - 1 - len;
        memcpy(msg + len, chunk, take);
        len += take;
    }
    msg[len] = '\0';
    close(fd[0]);

    int status;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
        ;
    if (w < 0)
        return ql_error_set(err, QL_EEXTERNAL, "gnuplot %s: waitpid: %s", script, strerror(errno));
    char lines[1024];
    first_lines(msg, lines, sizeof lines, 3);
    if (WIFSIGNALED(status))
        return ql_error_set(err, QL_EEXTERNAL, "gnuplot %s/%s: killed by signal %d%s%s", dir,
                            script, WTERMSIG(status), *lines ? ": " : "", lines);
    int code = WEXITSTATUS(status);
    if (code == 126)
        return ql_error_set(err, QL_EEXTERNAL, "gnuplot: cannot enter directory %s", dir);
    if (code == 127)
        return ql_error_set(err, QL_EEXTERNAL, "gnuplot: cannot run %s", exe);
    if (code != 0)
        return ql_error_set(err, QL_EEXTERNAL, "gnuplot %s/%s: exit status %d%s%s", dir, script,
                            code, *lines ? ": " : "", lines);
    return QL_OK;
}

/* Big-endian 32-bit value. */
static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

ql_status ql_png_check(const char *path, size_t min_bytes, ql_error *err)
{
    static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    FILE *f = fopen(path, "rb");
    if (!f)
        return ql_error_set(err, QL_EIO, "%s: cannot open: %s", path, strerror(errno));
    /* Signature, then the IHDR chunk: length 13, type, width, height. */
    unsigned char head[24];
    size_t got = fread(head, 1, sizeof head, f);
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    fclose(f);
    if (got < sizeof head || memcmp(head, signature, 8) != 0)
        return ql_error_set(err, QL_EFORMAT, "%s: not a PNG file (no PNG signature)", path);
    if (be32(head + 8) != 13 || memcmp(head + 12, "IHDR", 4) != 0)
        return ql_error_set(err, QL_EFORMAT, "%s: PNG without an IHDR chunk first", path);
    if (be32(head + 16) == 0 || be32(head + 20) == 0)
        return ql_error_set(err, QL_EFORMAT, "%s: PNG of size %ux%u", path, be32(head + 16),
                            be32(head + 20));
    if (size < 0 || (size_t)size < min_bytes)
        return ql_error_set(err, QL_EFORMAT, "%s: PNG of %ld bytes, expected at least %zu", path,
                            size, min_bytes);
    return QL_OK;
}

ql_status ql_plot_render(const char *dir, const char *script, const char *base, ql_error *err)
{
    ql_status st = ql_gnuplot_run(dir, script, err);
    if (st)
        return st;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.png", dir, base);
    if (ql_png_check(path, QL_PLOT_PNG_MIN_BYTES, err) != QL_OK) {
        ql_error_prefix(err, "gnuplot %s wrote no usable image: ", script);
        if (err)
            err->status = QL_EEXTERNAL;
        return QL_EEXTERNAL;
    }
    snprintf(path, sizeof path, "%s/%s.svg", dir, base);
    FILE *f = fopen(path, "rb");
    char head[512] = {0};
    size_t n = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f)
        fclose(f);
    head[n] = '\0';
    if (!strstr(head, "<svg"))
        return ql_error_set(err, QL_EEXTERNAL, "gnuplot %s wrote no SVG document to %s", script,
                            path);
    return QL_OK;
}

ql_status ql_plot_draw(const char *dir, const char *script, const char *base, FILE *log,
                       ql_error *err)
{
    ql_status st = ql_plot_render(dir, script, base, err);
    if (!st && log)
        fprintf(log, "  %s/%s.png\n  %s/%s.svg\n", dir, base, dir, base);
    return st;
}

void ql_gnuplot_quote(FILE *out, const char *s)
{
    fputc('\'', out);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', out);
        if (*s != '\n' && *s != '\r')
            fputc(*s, out);
    }
    fputc('\'', out);
}
