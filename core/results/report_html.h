/* qlab report, a leaf the driver (report.c) calls: report.html. Private to
 * the report; includes report_common.h only (see there). */
#ifndef QL_REPORT_HTML_H
#define QL_REPORT_HTML_H

#include "base/error.h"
#include "results/report_common.h"

/* Writes report.html: the sweep's groups, their tables sortable and their plots
 * inline, in one self-contained page. */
ql_status ql_report_write_html(ql_report_writer *c, ql_report_group *gs, size_t ng, ql_error *err);

#endif
