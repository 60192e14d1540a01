/* qlab report, a leaf the driver (report.c) calls: what a sweep of several evaluation
 * texts shows beyond one table per text (the config x text matrices) and the warnings of
 * a group, in report.md. Private to
 * the report; includes report_common.h only (see there). */
#ifndef QL_REPORT_TEXTS_H
#define QL_REPORT_TEXTS_H

#include <stdio.h>

#include "base/error.h"
#include "results/report_common.h"

/* report.md's list of a group's warnings ("Warnings:"); nothing without any. */
void ql_report_md_warnings(const ql_report_group *g, FILE *out);

/* report.md's matrices of the sweep ("### Configs × texts ..."), one per model, ctx and
 * chunk count measured on several texts. */
ql_status ql_report_md_texts(const ql_report_group *gs, size_t ng, FILE *out, ql_error *err);

#endif
