/* qlab report's summary (report_options.h). */
#include "results/report_options.h"

#include <stdlib.h>

void ql_report_summary_deinit(ql_report_summary *summary)
{
    if (!summary)
        return;
    free(summary->problems);
    summary->problems = NULL;
    summary->n_problems = 0;
}
