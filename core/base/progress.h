/* qlab: progress reporting for long work.
 *
 * On a terminal: one line rewritten in place with count, rate and ETA.
 * Otherwise (a log file, CI): a plain line at most every few seconds and at the
 * end, so logs stay short but show the work is alive. Written to stderr. */
#ifndef QL_PROGRESS_H
#define QL_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    char label[64];
    char unit[16];  /* what the rate counts: "tok", "MB", "config" */
    int64_t total;  /* items expected (0 = unknown) */
    double t_start;
    double t_last_print;
    bool tty;
    bool quiet;
    bool printed;
} ql_progress;

/* quiet suppresses everything (for library callers that print their own). */
void ql_progress_begin(ql_progress *p, const char *label, const char *unit, int64_t total,
                       bool quiet);
/* done = items finished so far; note = short extra text (may be NULL). */
void ql_progress_update(ql_progress *p, int64_t done, const char *note);
void ql_progress_end(ql_progress *p, int64_t done, const char *note);

/* Formats seconds as "1h02m", "3m05s" or "12.3s". */
void ql_format_duration(double seconds, char *out, int size);

#endif
