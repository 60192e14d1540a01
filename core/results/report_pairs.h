/* qlab report, a leaf the driver (report.c) calls: the one-axis comparisons of a group and
 * its fitted configs against the smaller ones (read from the chunk sums, and their
 * report.md sections). Private to
 * the report; includes report_common.h only (see there). */
#ifndef QL_REPORT_PAIRS_H
#define QL_REPORT_PAIRS_H

#include <stdio.h>

#include "base/error.h"
#include "results/report_common.h"

/* Finds and compares the one-axis pairs of a group (reads chunk sums). */
ql_status ql_report_load_pairs(ql_report_writer *c, ql_report_group *g, ql_error *err);
/* report.md's section of them. */
ql_status ql_report_md_pairs(const ql_report_group *g, FILE *out, ql_error *err);

/* Finds the fitted configs of a group and compares each with the configs no larger
 * than it (reads chunk sums). */
ql_status ql_report_load_fits(ql_report_writer *c, ql_report_group *g, ql_error *err);
/* report.md's table of them; nothing when the group has no budget config. */
ql_status ql_report_md_fits(const ql_report_group *g, FILE *out, ql_error *err);

#endif
