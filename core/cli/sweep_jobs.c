/* The --jobs process pool and the fault-injection hooks of qlab sweep (sweep_jobs.h). */
#include "sweep_jobs.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/progress.h"
#include "base/util.h"

extern char **environ;

/* Starts the jobs (which handle SIGINT and SIGTERM as this process does); returns how many started
 * (an error stops at the first failure). */
static int spawn_jobs(const ql_runner *r, const ql_sweep *sw, const ql_run_opts *o, int jobs,
                      pid_t *pids, ql_error *err)
{
    int threads = ql_threads_get() / jobs;
    if (threads < 1)
        threads = 1;
    int started = 0;
    for (int j = 0; j < jobs; j++) {
        char shard[64], nthreads[16], parent[24];
        /* Child j of shard K/N is shard K + N j of N jobs. */
        snprintf(shard, sizeof shard, "%d/%d", o->shard.index + o->shard.count * j,
                 o->shard.count * jobs);
        snprintf(nthreads, sizeof nthreads, "%d", threads);
        snprintf(parent, sizeof parent, "%ld", (long)getpid());
        char *argv[] = {"qlab",
                        "sweep",
                        (char *)sw->path,
                        "--db",
                        (char *)ql_runner_db_path(r),
                        "--cache-dir",
                        (char *)ql_runner_cache_dir(r),
                        "--threads",
                        nthreads,
                        "--shard",
                        shard,
                        "--quiet",
                        "--no-summary",
                        "--job-of",
                        parent,
                        "--text",
                        (char *)sw->text,
                        NULL,
                        NULL,
                        NULL};
        /* The options a job takes from this process's, after the fixed ones. */
        size_t argc = sizeof argv / sizeof argv[0] - 3;
        if (o->strict)
            argv[argc++] = "--strict";
        if (o->no_share)
            argv[argc++] = "--no-share";
        int rc = posix_spawn(&pids[j], "/proc/self/exe", NULL, NULL, argv, environ);
        if (rc != 0) {
            ql_error_set(err, QL_EIO, "cannot start job %d of %d: %s", j + 1, jobs, strerror(rc));
            break;
        }
        started++;
    }
    return started;
}

ql_status ql_sweep_jobs_run(ql_runner *r, const ql_sweep *sw, const ql_run_opts *opts, int jobs,
                            ql_error *err)
{
    /* What the store holds before the jobs: a config counts as finished by them only in
     * an attempt they began. */
    ql_runner_snapshot *before;
    ql_status st = ql_runner_snapshot_take(r, &before, err);
    if (st)
        return st;
    pid_t *pids = calloc((size_t)jobs, sizeof *pids);
    if (!pids) {
        ql_runner_snapshot_free(before);
        return ql_error_set(err, QL_ENOMEM, "out of memory for %d jobs", jobs);
    }
    ql_error spawn_err;
    ql_error_clear(&spawn_err);
    const int started = spawn_jobs(r, sw, opts, jobs, pids, &spawn_err);
    ql_progress p;
    ql_progress_begin(&p, "configs", "config", (int64_t)ql_runner_todo(r), opts->quiet);
    const double t0 = ql_now();
    int running = started, failures = 0;
    bool forwarded = false;
    char why[256] = "";
    while (running > 0) {
        /* Interrupted: each job stops after its current block and marks its run. */
        if (ql_interrupted() && !forwarded) {
            for (int j = 0; j < started; j++)
                kill(pids[j], SIGTERM);
            forwarded = true;
        }
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            running--;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                failures++;
                if (WIFSIGNALED(status))
                    snprintf(why, sizeof why, "a job was killed by signal %d", WTERMSIG(status));
                else
                    snprintf(why, sizeof why, "a job exited with status %d", WEXITSTATUS(status));
            }
            continue;
        }
        if (pid < 0 && errno != EINTR)
            break;
        ql_progress_update(&p, (int64_t)ql_runner_finished_since(r, before), NULL);
        usleep(200 * 1000);
    }
    ql_progress_end(&p, (int64_t)ql_runner_finished_since(r, before), NULL);
    free(pids);
    st = ql_runner_collect(r, before, ql_now() - t0, err);
    ql_runner_snapshot_free(before);
    if (!st && forwarded)
        st = ql_error_set(err, QL_EINTERRUPTED, "interrupted by signal %d; the jobs stopped",
                          ql_interrupted());
    if (!st && spawn_err.status)
        st = ql_error_set(err, spawn_err.status, "%s", spawn_err.msg);
    if (!st && failures)
        st = ql_error_set(err, QL_EEXTERNAL,
                          "%s: %d of %d jobs failed (%s); finished configs are stored, run the "
                          "sweep again to resume",
                          sw->path, failures, jobs, why);
    return st;
}

/* ------------------------------------------------------------------------- */
/* Fault injection                                                            */

static int kill_after, pause_after, delay_ms;

static void fault_hook(void *ctx, int begun)
{
    (void)ctx;
    if (kill_after > 0 && begun > kill_after)
        raise(SIGKILL);
    /* Until told to stop, polled: pause() would miss a signal that came just before it,
     * or one another thread handled. */
    if (pause_after > 0 && begun > pause_after)
        while (!ql_interrupted())
            usleep(20 * 1000);
    if (delay_ms > 0) /* every run takes this long more: a window for the store tests */
        usleep((useconds_t)delay_ms * 1000);
}

void ql_sweep_faults_install(ql_run_opts *opts)
{
    const char *k = getenv("QLAB_FAULT_KILL_AFTER_RUNS");
    const char *p = getenv("QLAB_FAULT_PAUSE_AFTER_RUNS");
    if (!k || !ql_parse_int(k, &kill_after))
        kill_after = 0;
    if (!p || !ql_parse_int(p, &pause_after))
        pause_after = 0;
    const char *d = getenv("QLAB_FAULT_DELAY_MS");
    if (!d || !ql_parse_int(d, &delay_ms))
        delay_ms = 0;
    if (kill_after > 0 || pause_after > 0 || delay_ms > 0) {
        opts->on_run_begun = fault_hook;
        opts->on_run_begun_ctx = NULL;
    }
}
