/* util.h: the deterministic random stream the benchmarks and tests draw from; the
 * file readers' refusal of special files and of files over their size cap. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/util.h"
#include "qltest.h"

/* Box-Muller over 10^5 draws: the sample mean and variance of N(0,1) have standard
 * errors 1/sqrt(n) ~ 0.003 and sqrt(2/n) ~ 0.0045; five of them. */
#define GAUSS_N       100000
#define GAUSS_MOM_TOL 0.025

static void splitmix64_stream(void)
{
    /* The first outputs of splitmix64 from seed 0 (Steele, Lea and Flood's
     * reference), as 53-bit uniforms with the half-step offset. */
    static const uint64_t ref[3] = {0xE220A8397B1DCDAFull, 0x6E789E6AA1B965F4ull,
                                    0x06C45D188009454Full};
    uint64_t s = 0;
    for (int i = 0; i < 3; i++)
        CHECK(ql_rng_uniform(&s) == ((double)(ref[i] >> 11) + 0.5) * 0x1p-53);
    CHECK(s == 3 * 0x9E3779B97F4A7C15ull);

    /* A gauss draw takes two uniforms, the first for the radius. */
    uint64_t a = 42, b = 42;
    const double u1 = ql_rng_uniform(&b), u2 = ql_rng_uniform(&b);
    CHECK(ql_rng_gauss(&a) == sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
    CHECK(a == b);

    double sum = 0, sum2 = 0;
    uint64_t g = 7;
    for (int i = 0; i < GAUSS_N; i++) {
        const double x = ql_rng_gauss(&g);
        sum += x;
        sum2 += x * x;
    }
    const double mean = sum / GAUSS_N;
    CHECK_NEAR(mean, 0.0, GAUSS_MOM_TOL);
    CHECK_NEAR(sum2 / GAUSS_N - mean * mean, 1.0, GAUSS_MOM_TOL);
}

/* ql_grow keeps what the array held, zeroes what it adds, grows geometrically, and
 * refuses a size that would overflow without touching the array. */
static void grow_array(void)
{
    int *a = NULL;
    size_t cap = 0;
    CHECK(ql_grow((void **)&a, &cap, 1, sizeof *a));
    CHECK(a != NULL && cap == 16);
    for (int i = 0; i < 16; i++)
        CHECK(a[i] == 0);
    for (int i = 0; i < 16; i++)
        a[i] = i + 1;
    int *before = a;
    CHECK(ql_grow((void **)&a, &cap, 16, sizeof *a) && a == before && cap == 16);
    CHECK(ql_grow((void **)&a, &cap, 100, sizeof *a));
    CHECK(cap == 128);
    int kept = 1;
    for (int i = 0; i < 16; i++)
        kept &= a[i] == i + 1;
    for (size_t i = 16; i < cap; i++)
        kept &= a[i] == 0;
    CHECK(kept);
    before = a;
    CHECK(!ql_grow((void **)&a, &cap, SIZE_MAX / 2, sizeof *a));
    CHECK(a == before && cap == 128);
    free(a);
}

/* ql_strset_add keeps distinct strings in strcmp order and stops at max. */
static void string_set(void)
{
    const char *set[3];
    size_t n = 0;
    const char *in[] = {"q8_0", "f32", "q8_0", "native", "f32", "int8", "aaa"};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        ql_strset_add(set, &n, 3, in[i]);
    /* The first three distinct values, sorted; later ones do not fit. */
    CHECK_EQ_INT(n, 3);
    CHECK(n == 3 && strcmp(set[0], "f32") == 0 && strcmp(set[1], "native") == 0 &&
          strcmp(set[2], "q8_0") == 0);
}

/* ql_double_precision: the fewest %g digits that read back exactly, which is
 * also what ql_format_double writes. */
static void shortest_precision(void)
{
    CHECK_EQ_INT(ql_double_precision(0.5), 1);
    CHECK_EQ_INT(ql_double_precision(0.1), 1);
    CHECK_EQ_INT(ql_double_precision(1.0 / 3), 16);
    CHECK_EQ_INT(ql_double_precision(0.1 + 0.2), 17);
    CHECK_EQ_INT(ql_double_precision(2.5e-7), 2);
    char buf[40];
    CHECK(ql_format_double(0.1 + 0.2, buf, sizeof buf) == 19 &&
          strcmp(buf, "0.30000000000000004") == 0);
    CHECK(ql_format_double(2.5e-7, buf, sizeof buf) == 7 && strcmp(buf, "2.5e-07") == 0);
}

/* Writes n bytes of 'x' to path. */
static void write_bytes(const char *path, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    for (size_t i = 0; i < n; i++)
        fputc('x', f);
    CHECK(fclose(f) == 0);
}

/* One refusal: status, file, role and what it is, all in the message. */
#define CHECK_REFUSED(st, err, path, what, kind)                                                   \
    CHECK_MSG((st) == QL_EIO && strstr((err).msg, path) && strstr((err).msg, what) &&              \
                  strstr((err).msg, kind),                                                         \
              "status %d: %s", (int)(st), (err).msg)

/* Every reader refuses a FIFO (without blocking: no writer ever opens it), a device,
 * a directory and a socket, naming the file and what it is; whole-file reads stop at
 * their cap before reading; regular files, empty ones included, read and map. */
static void special_files(void)
{
    const char *fifo = qlt_tmp("fifo");
    CHECK(mkfifo(fifo, 0600) == 0);
    const char *sock = qlt_tmp("sock");
    int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    CHECK(sfd >= 0 && bind(sfd, (struct sockaddr *)&sa, sizeof sa) == 0);
    const struct {
        const char *path, *kind;
    } bad[] = {
        {fifo, "a FIFO (named pipe)"},
        {"/dev/zero", "a character device"},
        {qlt_tmpdir(), "a directory"},
        {sock, "a socket"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ql_error err;
        char *buf = (char *)1;
        size_t len = 1;
        ql_status st = ql_file_read_all(bad[i].path, &buf, &len, &err);
        CHECK_REFUSED(st, err, bad[i].path, "file is", bad[i].kind);
        CHECK(buf == NULL && len == 0);
        st = ql_file_read_capped(bad[i].path, "sweep file", 100, &buf, &len, &err);
        CHECK_REFUSED(st, err, bad[i].path, "sweep file is", bad[i].kind);
        ql_file_map m;
        st = ql_file_map_open(&m, bad[i].path, "GGUF file", &err);
        CHECK_REFUSED(st, err, bad[i].path, "GGUF file is", bad[i].kind);
        CHECK(m.data == NULL && m.size == 0);
        char sha[65];
        st = ql_sha256_file(bad[i].path, sha, &err);
        CHECK_REFUSED(st, err, bad[i].path, "file is", bad[i].kind);
        int fd = 7;
        uint64_t size = 7;
        st = ql_file_open_regular(bad[i].path, NULL, &fd, &size, &err);
        CHECK_REFUSED(st, err, bad[i].path, "expected a regular file", bad[i].kind);
        CHECK(fd == -1 && size == 0);
    }
    close(sfd);

    /* The cap: at the cap is read, one byte over is refused with both sizes. */
    const char *f = qlt_tmp("capped.txt");
    write_bytes(f, 100);
    ql_error err;
    char *buf;
    size_t len;
    CHECK_OK(ql_file_read_capped(f, "text", 100, &buf, &len, &err), &err);
    CHECK(len == 100 && buf[100] == '\0' && buf[99] == 'x');
    free(buf);
    ql_status st = ql_file_read_capped(f, "text", 99, &buf, &len, &err);
    CHECK_MSG(st == QL_EIO && strstr(err.msg, "text is 100 bytes, more than the 99"), "%s",
              err.msg);
    /* Larger than the first buffer guess (a /proc file says size 0): still read whole. */
    CHECK_OK(ql_file_read_capped("/proc/self/status", "proc file", 1 << 20, &buf, &len, &err),
             &err);
    CHECK(len > 0 && strlen(buf) == len && strstr(buf, "Name:"));
    free(buf);
    const char *empty = qlt_tmp("empty.txt");
    write_bytes(empty, 0);
    CHECK_OK(ql_file_read_all(empty, &buf, &len, &err), &err);
    CHECK(len == 0 && buf && buf[0] == '\0');
    free(buf);
    ql_file_map m;
    CHECK_OK(ql_file_map_open(&m, empty, NULL, &err), &err);
    CHECK(m.data == NULL && m.size == 0);
    ql_file_map_close(&m);
    CHECK_OK(ql_file_map_open(&m, f, NULL, &err), &err);
    CHECK(m.size == 100 && m.data && ((const char *)m.data)[42] == 'x');
    ql_file_map_close(&m);
    CHECK(m.data == NULL);
    st = ql_file_read_all(qlt_tmp("missing"), &buf, &len, &err);
    CHECK_MSG(st == QL_EIO && strstr(err.msg, "cannot open file: No such file"), "%s", err.msg);
}

/* Terminal text: C0 controls but newline and tab, DEL, C1 controls and bytes outside
 * valid UTF-8 become \xNN; printable ASCII, valid UTF-8 (U+FFFD itself included)
 * stays; the buffer form cuts at a whole character. */
static void terminal_text(void)
{
    const char in[] = "a\033[2J\tb\n\x7f\xc2\x9b\xc3\xa9\xef\xbf\xbd\xff\xe2\x82\0z";
    const char want[] = "a\\x1b[2J\tb\n\\x7f\\xc2\\x9b\xc3\xa9\xef\xbf\xbd\\xff\\xe2\\x82\\x00z";
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    CHECK(mem != NULL);
    if (mem) {
        ql_fwrite_terminal(mem, in, sizeof in - 1);
        CHECK(fclose(mem) == 0);
        CHECK_MSG(len == strlen(want) && memcmp(text, want, len) == 0, "got '%s'", text);
        free(text);
    }
    char out[64];
    /* Up to the NUL, which ends a C string. */
    const size_t n = ql_escape_terminal(in, out, sizeof out);
    CHECK(n == strlen(out) && strncmp(out, want, n) == 0 && n == strlen(want) - 5);
    /* "a\x1b" is 5 bytes: a 6-byte buffer holds it, a 5-byte one only "a". */
    CHECK(ql_escape_terminal("a\033", out, 6) == 5 && strcmp(out, "a\\x1b") == 0);
    CHECK(ql_escape_terminal("a\033", out, 5) == 1 && strcmp(out, "a") == 0);
    CHECK(ql_escape_terminal("\xc3\xa9", out, 2) == 0 && out[0] == '\0');
}

int main(void)
{
    special_files();
    terminal_text();
    splitmix64_stream();
    grow_array();
    string_set();
    shortest_precision();
    return qlt_done();
}
