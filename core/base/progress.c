#include "base/progress.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

/* Plain (non-terminal) output prints at most this often. */
#define PLAIN_INTERVAL_S 5.0
/* Terminal output is redrawn at most this often. */
#define TTY_INTERVAL_S 0.2

void ql_format_duration(double s, char *out, int size)
{
    if (s < 0)
        s = 0;
    if (s < 60)
        snprintf(out, (size_t)size, "%.1fs", s);
    else if (s < 3600)
        snprintf(out, (size_t)size, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else
        snprintf(out, (size_t)size, "%dh%02dm", (int)(s / 3600), ((int)s % 3600) / 60);
}

void ql_progress_begin(ql_progress *p, const char *label, const char *unit, int64_t total,
                       bool quiet)
{
    memset(p, 0, sizeof *p);
    ql_strlcpy(p->label, label, sizeof p->label);
    ql_strlcpy(p->unit, unit ? unit : "it", sizeof p->unit);
    p->total = total;
    p->t_start = ql_now();
    p->t_last_print = p->t_start;
    p->tty = isatty(STDERR_FILENO) == 1;
    p->quiet = quiet;
}

static void print_line(ql_progress *p, int64_t done, const char *note, bool final)
{
    double now = ql_now();
    double el = now - p->t_start;
    double rate = el > 0 ? (double)done / el : 0.0;
    char elapsed[32], eta[32] = "?";
    ql_format_duration(el, elapsed, sizeof elapsed);
    if (p->total > 0 && rate > 0)
        ql_format_duration((double)(p->total - done) / rate, eta, sizeof eta);
    char line[512];
    if (p->total > 0)
        snprintf(line, sizeof line, "%s: %lld/%lld (%.0f%%), %.1f %s/s, elapsed %s%s%s%s%s",
                 p->label, (long long)done, (long long)p->total,
                 100.0 * (double)done / (double)p->total, rate, p->unit, elapsed,
                 final ? "" : ", ETA ", final ? "" : eta, note ? "  " : "", note ? note : "");
    else
        snprintf(line, sizeof line, "%s: %lld, %.1f %s/s, elapsed %s%s%s", p->label,
                 (long long)done, rate, p->unit, elapsed, note ? "  " : "", note ? note : "");
    if (p->tty)
        fprintf(stderr, "\r\033[K%s%s", line, final ? "\n" : "");
    else
        fprintf(stderr, "%s\n", line);
    fflush(stderr);
    p->t_last_print = now;
    p->printed = true;
}

void ql_progress_update(ql_progress *p, int64_t done, const char *note)
{
    if (p->quiet)
        return;
    double now = ql_now();
    double interval = p->tty ? TTY_INTERVAL_S : PLAIN_INTERVAL_S;
    if (now - p->t_last_print < interval && p->printed)
        return;
    if (!p->tty && !p->printed && now - p->t_start < interval)
        return;
    print_line(p, done, note, false);
}

void ql_progress_end(ql_progress *p, int64_t done, const char *note)
{
    if (p->quiet)
        return;
    print_line(p, done, note, true);
}
