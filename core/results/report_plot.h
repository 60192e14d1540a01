/* qlab report, a leaf the driver (report.c) calls: the plots of a group, and the plots of the
 * config x text matrices. Private to
 * the report; includes report_common.h only (see there). */
#ifndef QL_REPORT_PLOT_H
#define QL_REPORT_PLOT_H

#include "base/error.h"
#include "results/report_common.h"

/* Reads the tensor errors of the group's tensor_row. */
ql_status ql_report_load_tensors(ql_report_writer *c, ql_report_group *g, ql_error *err);

/* Reads the layer metrics of the group's runs into g->layers (report_plot.c). */
ql_status ql_report_load_layers(ql_report_writer *c, ql_report_group *g, ql_error *err);
/* Writes every plot of a group (data, scripts, images when gnuplot works) and
 * records the drawn ones in g->plots. */
ql_status ql_report_write_plots(ql_report_writer *c, ql_report_group *g, ql_error *err);

/* The config x text matrices' plots: texts_kld<suffix>.dat/.gp, mean KLD of each config
 * across the texts as lines (log scale), recorded as a plot of the leading group. */
ql_status ql_report_plot_texts(ql_report_writer *c, ql_report_group *gs, size_t ng, ql_error *err);

#endif
