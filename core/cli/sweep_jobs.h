/* qlab sweep --jobs N: the configs of a sweep evaluated by N child processes at once,
 * each `qlab sweep FILE --shard k/n` of this run's shard, sharing its database (SQLite
 * serializes their short transactions) and cache directory (where this process has
 * just made the reference and the calibration matrices they load). */
#ifndef QL_CLI_SWEEP_JOBS_H
#define QL_CLI_SWEEP_JOBS_H

#include "base/error.h"
#include "experiment/sweep.h"
#include "harness/runner.h"

/* Runs the configs still to do in r (opened and prepared) in `jobs` processes with
 * threads / jobs threads each, shows one progress line for the whole sweep, then
 * collects their results into r's summary. A job that fails is an error saying that
 * the finished configs are stored. */
ql_status ql_sweep_jobs_run(ql_runner *r, const ql_sweep *sw, const ql_run_opts *opts, int jobs,
                            ql_error *err);

/* The resume and store tests' fault injection, from the environment:
 * QLAB_FAULT_KILL_AFTER_RUNS=N kills the process (SIGKILL) when its run N+1 begins,
 * QLAB_FAULT_PAUSE_AFTER_RUNS=N waits for a signal there, QLAB_FAULT_DELAY_MS=MS sleeps
 * that long when each run begins. Installs the hook on opts when any is set. */
void ql_sweep_faults_install(ql_run_opts *opts);

#endif
