#include "results/plot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"

bool ql_plot_find_gnuplot(char *path, size_t size)
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

/* gnuplot's own message from its output: the last `"FILE" line N: ...` line that is
 * not a warning (an error stops gnuplot, so it comes last), with the command it quotes
 * above its caret line when it does; else the first lines of the output. */
static void gnuplot_message(const char *s, char *out, size_t size)
{
    const char *lines[64];
    size_t len[64], n = 0;
    for (const char *p = s; *p && n < 64;) {
        const char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        lines[n] = p;
        len[n++] = l;
        p += l + (nl ? 1 : 0);
    }
    size_t k = n;
    for (size_t i = 0; i < n; i++) {
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)len[i], lines[i]);
        if (line[0] == '"' && strstr(line, "\" line ") && strstr(line, ": ") &&
            !strstr(line, ": warning:"))
            k = i;
    }
    if (k == n) {
        first_lines(s, out, size, 3);
        return;
    }
    /* Trimmed lines: the message, the caret line above it, the command above that. */
    char msg[480], caret[480] = "", cmd[480] = "";
    snprintf(msg, sizeof msg, "%.*s", (int)len[k], lines[k]);
    if (k >= 2) {
        const char *c = lines[k - 1];
        size_t cl = len[k - 1];
        while (cl && (*c == ' ' || *c == '\t'))
            c++, cl--;
        snprintf(caret, sizeof caret, "%.*s", (int)cl, c);
        const char *m = lines[k - 2];
        size_t ml = len[k - 2];
        while (ml && (*m == ' ' || *m == '\t'))
            m++, ml--;
        snprintf(cmd, sizeof cmd, "%.*s", (int)ml, m);
    }
    if (strcmp(caret, "^") == 0 && cmd[0])
        snprintf(out, size, "%s (at: %s)", msg, cmd);
    else
        snprintf(out, size, "%s", msg);
}

ql_status ql_plot_run_gnuplot(const char *dir, const char *script, ql_error *err)
{
    char exe[4096];
    if (!ql_plot_find_gnuplot(exe, sizeof exe))
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
    gnuplot_message(msg, lines, sizeof lines);
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
    ql_status st = ql_plot_run_gnuplot(dir, script, err);
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

/* ---------------------------------------------------------------- label placement */

/* Rings of places further out than next to the anchor, each a label height further. */
#define LABEL_RINGS 8
/* Pixels between a label and its anchor (and between ring steps beyond the height). */
#define LABEL_GAP 2.0

bool ql_plot_boxes_overlap(const ql_plot_box *a, const ql_plot_box *b)
{
    return a->x0 < b->x1 && b->x0 < a->x1 && a->y0 < b->y1 && b->y0 < a->y1;
}

/* Liang-Barsky: the segment against the box shrunk by half a pixel, so that a line
 * that only touches an edge does not count. */
bool ql_plot_segment_hits(double ax, double ay, double bx, double by, const ql_plot_box *b)
{
    const double x0 = b->x0 + 0.5, x1 = b->x1 - 0.5, y0 = b->y0 + 0.5, y1 = b->y1 - 0.5;
    if (x0 >= x1 || y0 >= y1)
        return false;
    const double dx = bx - ax, dy = by - ay;
    const double p[4] = {-dx, dx, -dy, dy}, q[4] = {ax - x0, x1 - ax, ay - y0, y1 - ay};
    double t0 = 0.0, t1 = 1.0;
    for (int k = 0; k < 4; k++) {
        if (p[k] == 0.0) {
            if (q[k] < 0.0)
                return false;
            continue;
        }
        const double r = q[k] / p[k];
        if (p[k] < 0.0)
            t0 = r > t0 ? r : t0;
        else
            t1 = r < t1 ? r : t1;
        if (t0 > t1)
            return false;
    }
    return true;
}

static double clampd(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

void ql_plot_leader(const ql_plot_box *anchor, const ql_plot_box *label, double *ax, double *ay,
                    double *bx, double *by)
{
    const double cx = 0.5 * (label->x0 + label->x1), cy = 0.5 * (label->y0 + label->y1);
    *ax = clampd(cx, anchor->x0, anchor->x1);
    *ay = clampd(cy, anchor->y0, anchor->y1);
    *bx = clampd(*ax, label->x0, label->x1);
    *by = clampd(*ay, label->y0, label->y1);
}

/* Places a box of w x h may take around anchor a: ring 0 touches it, ring r lies r
 * steps further out. k runs over the places of a ring in order of preference: above
 * and below (centred, then shifted half a width right and left), right, left, the
 * four corners. false past the last place. */
enum { PLACES_PER_RING = 10 };

static bool candidate(const ql_plot_box *a, double w, double h, int ring, int k, ql_plot_box *b)
{
    const double g = LABEL_GAP + ring * (h + LABEL_GAP);
    const double cx = 0.5 * (a->x0 + a->x1), cy = 0.5 * (a->y0 + a->y1);
    const double shift = 0.5 * w + LABEL_GAP;
    double x0, y0;
    switch (k) {
    case 0: /* above */
    case 1: /* below */
        x0 = cx - 0.5 * w;
        y0 = k == 0 ? a->y1 + g : a->y0 - g - h;
        break;
    case 2: /* above, right */
    case 3: /* below, right */
        x0 = cx - 0.5 * w + shift;
        y0 = k == 2 ? a->y1 + g : a->y0 - g - h;
        break;
    case 4: /* above, left */
    case 5: /* below, left */
        x0 = cx - 0.5 * w - shift;
        y0 = k == 4 ? a->y1 + g : a->y0 - g - h;
        break;
    case 6: /* right */
        x0 = a->x1 + g;
        y0 = cy - 0.5 * h;
        break;
    case 7: /* left */
        x0 = a->x0 - g - w;
        y0 = cy - 0.5 * h;
        break;
    case 8: /* the corners: up right, up left */
    case 9:
        x0 = k == 8 ? a->x1 + g : a->x0 - g - w;
        y0 = a->y1 + g;
        break;
    default:
        return false;
    }
    *b = (ql_plot_box){x0, y0, x0 + w, y0 + h};
    return true;
}

/* What is placed so far: boxes and the leader lines of the labels placed apart. */
typedef struct {
    ql_plot_box *boxes;
    size_t n_boxes;
    double (*leaders)[4];
    size_t n_leaders;
} placed_set;

static bool fits(const ql_plot_box *area, const ql_plot_box *obstacles, size_t n_obstacles,
                 const placed_set *ps, const ql_plot_box *b, const double *leader)
{
    if (b->x0 < area->x0 || b->x1 > area->x1 || b->y0 < area->y0 || b->y1 > area->y1)
        return false;
    for (size_t i = 0; i < n_obstacles; i++)
        if (ql_plot_boxes_overlap(b, &obstacles[i]))
            return false;
    for (size_t i = 0; i < ps->n_boxes; i++)
        if (ql_plot_boxes_overlap(b, &ps->boxes[i]) ||
            (leader &&
             ql_plot_segment_hits(leader[0], leader[1], leader[2], leader[3], &ps->boxes[i])))
            return false;
    for (size_t i = 0; i < ps->n_leaders; i++)
        if (ql_plot_segment_hits(ps->leaders[i][0], ps->leaders[i][1], ps->leaders[i][2],
                                 ps->leaders[i][3], b))
            return false;
    return true;
}

/* Tries the rings from..to of a label at width w; on success takes the place. */
static bool try_rings(const ql_plot_box *area, const ql_plot_box *obstacles, size_t n_obstacles,
                      placed_set *ps, const ql_label_in *in, double w, int from, int to,
                      ql_label_out *out)
{
    for (int ring = from; ring <= to; ring++)
        for (int k = 0; k < PLACES_PER_RING; k++) {
            ql_plot_box b;
            if (!candidate(&in->anchor, w, in->h, ring, k, &b))
                break;
            double line[4];
            ql_plot_leader(&in->anchor, &b, &line[0], &line[1], &line[2], &line[3]);
            const bool apart = ring > 0;
            if (!fits(area, obstacles, n_obstacles, ps, &b, apart ? line : NULL))
                continue;
            out->box = b;
            out->leader = apart;
            ps->boxes[ps->n_boxes++] = b;
            if (apart)
                memcpy(ps->leaders[ps->n_leaders++], line, sizeof line);
            return true;
        }
    return false;
}

bool ql_plot_place_labels(const ql_plot_box *area, const ql_plot_box *obstacles, size_t n_obstacles,
                          const ql_label_in *in, size_t n, ql_label_out *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = (ql_label_out){QL_LABEL_NONE, {0, 0, 0, 0}, false, 0};
    placed_set ps = {malloc((n ? n : 1) * sizeof *ps.boxes), 0,
                     malloc((n ? n : 1) * sizeof *ps.leaders), 0};
    if (!ps.boxes || !ps.leaders) {
        free(ps.boxes);
        free(ps.leaders);
        return false;
    }
    /* Next to its anchor for every label first; then further out; then the numbers. */
    for (size_t i = 0; i < n; i++)
        if (try_rings(area, obstacles, n_obstacles, &ps, &in[i], in[i].w, 0, 0, &out[i]))
            out[i].how = QL_LABEL_TEXT;
    for (size_t i = 0; i < n; i++)
        if (out[i].how == QL_LABEL_NONE &&
            try_rings(area, obstacles, n_obstacles, &ps, &in[i], in[i].w, 1, LABEL_RINGS, &out[i]))
            out[i].how = QL_LABEL_TEXT;
    for (size_t i = 0; i < n; i++)
        if (out[i].how == QL_LABEL_NONE && try_rings(area, obstacles, n_obstacles, &ps, &in[i],
                                                     in[i].num_w, 0, LABEL_RINGS, &out[i]))
            out[i].how = QL_LABEL_NUMBER;
    int number = 0;
    for (size_t i = 0; i < n; i++)
        if (out[i].how == QL_LABEL_NUMBER)
            out[i].number = ++number;
    free(ps.boxes);
    free(ps.leaders);
    return true;
}

/* ---------------------------------------------------------------- labels of a panel's points */

double ql_plot_frame_x(const ql_plot_frame *f, double x)
{
    return f->x0 + (x - f->xlo) / (f->xhi - f->xlo) * (f->x1 - f->x0);
}

double ql_plot_frame_y(const ql_plot_frame *f, double y)
{
    const double k = f->log_y ? (log(y) - log(f->ylo)) / (log(f->yhi) - log(f->ylo))
                              : (y - f->ylo) / (f->yhi - f->ylo);
    return f->y1 - k * (f->y1 - f->y0);
}

/* A box of canvas pixels (y down) as the placement's y up (the y axis mirrored). */
static ql_plot_box box_up(double x0, double x1, double y_top, double y_bottom)
{
    return (ql_plot_box){x0, -y_bottom, x1, -y_top};
}

/* Union-find over the points: the clusters that share a label. */
static size_t uf_find(size_t *parent, size_t i)
{
    while (parent[i] != i)
        i = parent[i] = parent[parent[i]];
    return i;
}

bool ql_plot_label_points(const ql_plot_frame *f, double ref_y, const ql_plot_point *pts, size_t n,
                          const ql_label_size *sizes, size_t *cluster_of, ql_point_label *labels,
                          size_t *n_labels)
{
    *n_labels = 0;
    double *px = malloc((n ? n : 1) * sizeof *px), *py = malloc((n ? n : 1) * sizeof *py);
    size_t *parent = malloc((n ? n : 1) * sizeof *parent);
    ql_plot_box *obstacles = malloc((2 * n + 1) * sizeof *obstacles);
    ql_label_in *in = malloc((n ? n : 1) * sizeof *in);
    ql_label_out *out = malloc((n ? n : 1) * sizeof *out);
    bool ok = px && py && parent && obstacles && in && out;
    if (!ok)
        goto out;
    /* The markers in pixels, and their clusters. */
    for (size_t i = 0; i < n; i++) {
        px[i] = ql_plot_frame_x(f, pts[i].x);
        py[i] = ql_plot_frame_y(f, pts[i].y);
        parent[i] = i;
        for (size_t j = 0; j < i; j++)
            if (pts[j].kind == pts[i].kind &&
                hypot(px[j] - px[i], py[j] - py[i]) <= QL_PLOT_CLUSTER_PX)
                parent[uf_find(parent, j)] = uf_find(parent, i);
    }
    /* What no label may cover: the reference line, the markers, the error bars. */
    size_t n_obst = 0;
    if (!isnan(ref_y)) {
        const double yr = ql_plot_frame_y(f, ref_y);
        obstacles[n_obst++] = box_up(f->x0, f->x1, yr - QL_PLOT_LINE_R, yr + QL_PLOT_LINE_R);
    }
    const double r = QL_PLOT_MARK_R;
    for (size_t i = 0; i < n; i++) {
        const double e = pts[i].err, y = pts[i].y;
        obstacles[n_obst++] = box_up(px[i] - r, px[i] + r, py[i] - r, py[i] + r);
        if (!isnan(e) && e > 0.0) {
            const double lo = y - e > 0.0 || !f->log_y ? y - e : y;
            obstacles[n_obst++] = box_up(px[i] - QL_PLOT_BAR_R, px[i] + QL_PLOT_BAR_R,
                                         ql_plot_frame_y(f, y + e), ql_plot_frame_y(f, lo));
        }
        /* A cluster's label at its first point; its anchor grows by each further one. */
        const size_t root = uf_find(parent, i);
        size_t k = 0;
        while (k < *n_labels && uf_find(parent, labels[k].first) != root)
            k++;
        cluster_of[i] = k;
        const ql_plot_box mark = box_up(px[i] - r, px[i] + r, py[i] - r, py[i] + r);
        if (k == *n_labels) {
            const ql_label_size *sz = &sizes[pts[i].kind];
            in[k] = (ql_label_in){.anchor = mark, .w = sz->w, .h = sz->h, .num_w = sz->num_w};
            labels[k].first = i;
            (*n_labels)++;
        } else {
            ql_plot_box *a = &in[k].anchor;
            a->x0 = fmin(a->x0, mark.x0);
            a->x1 = fmax(a->x1, mark.x1);
            a->y0 = fmin(a->y0, mark.y0);
            a->y1 = fmax(a->y1, mark.y1);
        }
    }
    const double inset = QL_PLOT_AREA_INSET;
    const ql_plot_box area = box_up(f->x0 + inset, f->x1 - inset, f->y0 + inset, f->y1 - inset);
    ok = ql_plot_place_labels(&area, obstacles, n_obst, in, *n_labels, out);
    for (size_t k = 0; k < *n_labels; k++) {
        labels[k].in = in[k];
        labels[k].out = ok ? out[k] : (ql_label_out){QL_LABEL_NONE, {0, 0, 0, 0}, false, 0};
    }
out:
    if (!ok)
        *n_labels = 0;
    free(px);
    free(py);
    free(parent);
    free(obstacles);
    free(in);
    free(out);
    return ok;
}

void ql_plot_quote(FILE *out, const char *s)
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
