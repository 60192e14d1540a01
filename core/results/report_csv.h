/* qlab report, a leaf the driver (report.c) calls: the sweep's CSV files. Private to
 * the report; includes report_common.h only (see there). */
#ifndef QL_REPORT_CSV_H
#define QL_REPORT_CSV_H

#include "base/error.h"
#include "results/report_common.h"

/* Writes formats.csv (every finished config, every axis and CSV metric, full
 * precision), tensor-types.csv (every tensor of the configs with per-tensor records;
 * not written without any) and sensitivity.csv (the sensitivities each model's groups
 * show, once per model; not written without any). */
ql_status ql_report_write_csv(ql_report_writer *c, ql_report_group *gs, size_t ng, ql_error *err);

#endif
