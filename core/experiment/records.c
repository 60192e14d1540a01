/* Run records: "not measured" everywhere before anything is measured. */
#include "experiment/records.h"

#include <math.h>

void ql_run_metrics_init(ql_run_metrics *m)
{
#define SET_NAN(name, is_count) m->name = (double)NAN;
    QL_RUN_METRICS(SET_NAN)
#undef SET_NAN
}

void ql_run_timing_init(ql_run_timing *t)
{
    t->seconds = t->quantize_seconds = t->ref_seconds = t->quant_seconds = (double)NAN;
}
