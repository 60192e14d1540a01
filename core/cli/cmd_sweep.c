/* qlab sweep: run a sweep file into the results store, or list its configs. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "experiment/sweep.h"
#include "harness/runner.h"

static void help(void)
{
    printf("usage: qlab sweep FILE [--db PATH] [--threads N] [--jobs N] [--shard K/N|auto]\n"
           "                 [--cache-dir DIR] [--quiet] [--strict] [--no-summary] [--list]\n"
           "\n"
           "Reads a sweep file (experiments/*.sweep), checks it and expands its [grid] into\n"
           "configs (every error names the file and line), then evaluates every config that\n"
           "the results store does not already hold: the reference pass once, then per\n"
           "config the quantized weights, the quantized forward pass and every metric, stored\n"
           "in one transaction. A failed config is stored with its error; an interrupted\n"
           "sweep resumes where it stopped.\n"
           "\n"
           "options:\n"
           "  --db PATH      results store (default results/qlab.db)\n"
           "  --threads N    threads (default: the sweep's 'threads', else all cores)\n"
           "  --jobs N       evaluate N configs at once in separate processes (threads are\n"
           "                 divided among them); the best use of cores for small models\n"
           "  --cache-dir D  where the reference log-probs and the calibration imatrices\n"
           "                 (imatrix = calib:NAME) are cached (default <db dir>/cache);\n"
           "                 shards of one sweep may share it\n"
           "  --quiet        no progress lines\n"
           "  --strict       exit 1 when a config failed (failures are stored either way)\n"
           "  --no-summary   do not print the summary table (the store has everything)\n"
           "  --list         print the configs (index, hash prefix, canonical form) and stop\n"
           "  --shard K/N    keep configs i with i mod N == K (0 <= K < N); 'auto' takes K and N\n"
           "                 from SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT\n"
           "  --job-of PID   (set by --jobs) this process is a job of sweep process PID and\n"
           "                 ends when that process ends\n"
           "\n"
           "Axes and what is implemented today:\n");
    const ql_capability *caps;
    size_t n = ql_config_capabilities(&caps);
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        printf("  %-14s", ql_axis_name((ql_axis)a));
        for (size_t i = 0; i < n; i++)
            if (caps[i].axis == (ql_axis)a)
                printf(" %s%s", caps[i].value, caps[i].implemented ? "" : "(later)");
        printf("\n");
    }
    printf("kv_type auto (the default) is f16 for act_mode native, else f32.\n"
           "imatrix calib:NAME[,ctx=N][,chunks=K] computes the importance matrix as\n"
           "'qlab imatrix' does over the text NAME (ctx default: the sweep's, chunks default:\n"
           "all), once per sweep, cached in the cache directory. Every run's imatrix_err is\n"
           "weighed by the first imatrix the sweep names, with or without it quantizing.\n");
}

int ql_cmd_sweep(int argc, char **argv)
{
    const char *file = NULL, *shard_spec = NULL;
    bool list = false, strict = false;
    ql_run_opts ro;
    ql_run_opts_init(&ro);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help();
            return QL_EXIT_OK;
        } else if (strcmp(a, "--list") == 0) {
            list = true;
        } else if (strcmp(a, "--quiet") == 0) {
            ro.quiet = true;
        } else if (strcmp(a, "--no-summary") == 0) {
            ro.no_summary = true;
        } else if (strcmp(a, "--strict") == 0) {
            strict = true;
        } else if (strcmp(a, "--db") == 0 || strcmp(a, "--cache-dir") == 0) {
            if (++i >= argc)
                return ql_cli_usage("sweep", "%s needs a path", a);
            if (strcmp(a, "--db") == 0)
                ro.db_path = argv[i];
            else
                ro.cache_dir = argv[i];
        } else if (strcmp(a, "--jobs") == 0 || strcmp(a, "-j") == 0) {
            if (++i >= argc)
                return ql_cli_usage("sweep", "--jobs needs a value");
            if (!ql_cli_parse_int_opt("sweep", "--jobs", argv[i], 1, 256, &ro.jobs))
                return QL_EXIT_USAGE;
        } else if (strcmp(a, "--threads") == 0) {
            if (++i >= argc)
                return ql_cli_usage("sweep", "--threads needs a value");
            if (!ql_cli_parse_int_opt("sweep", "--threads", argv[i], 1, 4096, &ro.threads))
                return QL_EXIT_USAGE;
        } else if (strcmp(a, "--job-of") == 0) {
            int parent;
            if (++i >= argc)
                return ql_cli_usage("sweep", "--job-of needs a process id");
            if (!ql_cli_parse_int_opt("sweep", "--job-of", argv[i], 1, 1 << 30, &parent))
                return QL_EXIT_USAGE;
            /* A job must not outlive the sweep that started it: a rerun of that sweep
             * would start a second job on the same configs. */
            if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != (pid_t)parent) {
                fprintf(stderr, "qlab sweep: the sweep process %d that started this job is gone\n",
                        parent);
                return QL_EXIT_RUNTIME;
            }
        } else if (strcmp(a, "--shard") == 0) {
            if (++i >= argc)
                return ql_cli_usage("sweep", "--shard needs a value (K/N or auto)");
            shard_spec = argv[i];
        } else if (a[0] == '-' && a[1] != '\0') {
            return ql_cli_usage("sweep", "unknown option '%s'", a);
        } else if (!file) {
            file = a;
        } else {
            return ql_cli_usage("sweep", "one sweep file at a time (got '%s' and '%s')", file, a);
        }
    }
    if (!file)
        return ql_cli_usage("sweep", "missing the sweep FILE");

    ql_error err;
    ql_error_clear(&err);
    ql_shard shard = {0, 1};
    if (shard_spec && ql_shard_parse(shard_spec, &shard, &err) != QL_OK)
        return ql_cli_usage("sweep", "%s", err.msg);

    /* Checked before anything else, so a bad file fails before any work. */
    ql_sweep sw;
    if (ql_sweep_load(file, 0, &sw, &err) != QL_OK)
        return ql_cli_fail(&err);

    if (!list) {
        ro.shard = shard;
        ql_run_summary sum;
        ql_status st = ql_sweep_execute(&sw, &ro, &sum, &err);
        ql_sweep_deinit(&sw);
        if (st)
            return ql_cli_fail(&err);
        if (sum.n_failed)
            fprintf(stderr,
                    "qlab: %zu config%s failed; their errors are stored ('qlab query failed' "
                    "lists them)\n",
                    sum.n_failed, sum.n_failed == 1 ? "" : "s");
        return sum.n_failed && strict ? QL_EXIT_RUNTIME : QL_EXIT_OK;
    }

    size_t kept = 0;
    for (size_t i = 0; i < sw.n_points; i++)
        kept += ql_shard_keeps(&shard, i);
    printf("# sweep %s: model %s, text %s, ctx %d, chunks ", sw.name, sw.model, sw.text, sw.ctx);
    if (sw.chunks)
        printf("%d", sw.chunks);
    else
        printf("all");
    printf(", %zu configs", sw.n_points);
    if (shard.count > 1)
        printf(", shard %d/%d: %zu", shard.index, shard.count, kept);
    printf("\n");
    for (size_t i = 0; i < sw.n_points; i++) {
        if (!ql_shard_keeps(&shard, i))
            continue;
        char text[QL_CONFIG_TEXT_MAX];
        ql_config_to_string(&sw.points[i].config, text, sizeof text);
        printf("%4zu  %.12s  %s\n", i, sw.points[i].hash, text);
    }
    ql_sweep_deinit(&sw);
    if (fflush(stdout) != 0) {
        ql_error_set(&err, QL_EIO, "writing the config list to stdout failed");
        return ql_cli_fail(&err);
    }
    return QL_EXIT_OK;
}
