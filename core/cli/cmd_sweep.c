/* qlab sweep: run a sweep file into the results store, or list its configs. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "experiment/sweep.h"
#include "harness/runner.h"
#include "sweep_jobs.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab sweep FILE [--db PATH] [--threads N] [--jobs N] [--mem SIZE]\n"
           "                 [--shard K/N|auto] [--cache-dir DIR] [--quiet] [--strict]\n"
           "                 [--no-summary] [--no-share] [--text NAME] [--list]\n"
           "\n"
           "Reads a sweep file (experiments/*.sweep), checks it and expands its [grid] into\n"
           "configs (every error names the file and line), then evaluates every config that\n"
           "the results store does not already hold: the reference pass once, then per\n"
           "config the quantized weights, the quantized forward pass and every metric, stored\n"
           "in one transaction. A failed config is stored with its error; an interrupted\n"
           "sweep resumes where it stopped.\n"
           "\n");
    ql_opt_print_options(stdout, p);
    printf("\n"
           "Axes and what is implemented today:\n");
    const ql_capability *caps;
    size_t n = ql_config_capabilities(&caps);
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        printf("  %-14s", ql_axis_name((ql_axis)a));
        if (a == QL_AXIS_KV_TYPE)
            printf(" auto"); /* the default, not a rounding of its own */
        for (size_t i = 0; i < n; i++)
            if (caps[i].axis == (ql_axis)a)
                printf(" %s%s", caps[i].value, caps[i].implemented ? "" : "(later)");
        if (a == QL_AXIS_WEIGHT_TYPE || a == QL_AXIS_BUDGET)
            printf(" <file type> mix:<file type>");
        if (a == QL_AXIS_TENSOR_TYPES)
            printf(" <recipe file>");
        printf("\n");
    }
    printf("<type>: a GGUF weight type (F32 F16 BF16 Q8_0 Q4_0 ... IQ1_M TQ1_0 TQ2_0) or\n"
           "INT8_ROW, Q8_0_XC. <file type>: a llama-quantize file type (Q4_K_M, Q3_K_S,\n"
           "IQ3_M, ...) with its per-tensor rules; mix:<name> names the file type where a\n"
           "type has the same name (mix:Q6_K). file:<path>: an existing GGUF of the model,\n"
           "evaluated as it is.\n"
           "kv_type auto (the default) is f16 for act_mode native, else f32.\n"
           "imatrix calib:NAME[,ctx=N][,chunks=K] computes the importance matrix as\n"
           "'qlab imatrix' does over the text NAME (ctx default: the sweep's, chunks default:\n"
           "all), once per sweep, cached in the cache directory. Every run's imatrix_err is\n"
           "weighed by the first imatrix the sweep names, with or without it quantizing.\n"
           "\n"
           "The file: [sweep] takes name, model, text (several: every config is measured\n"
           "on each, each text with its own reference), ctx, chunks, threads and\n"
           "layer_metrics (yes: per-block divergence of every config), and any axis as the\n"
           "default of every config; each [grid] section lists values per axis (their\n"
           "product is its configs; several grids add up). exclude = axis=value ... drops\n"
           "the configs that match every term, only = axis=value ... keeps the ones that\n"
           "match (in [grid] for that grid, in [sweep] for all; repeatable).\n"
           "\n"
           "Every path a sweep file names (model, text, an imatrix file or calib: text,\n"
           "file: configs, tensor_types recipes) is relative to the sweep file's directory,\n"
           "wherever qlab runs from; a name from datasets/manifest.tsv is found by name.\n");
}

/* SIGINT, SIGTERM: only a flag; the runner stops between blocks and configs. */
static void on_signal(int sig)
{
    ql_interrupt_request(sig);
}

static void catch_interrupts(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a wait (pause, waitpid) returns */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* What an interrupted sweep tells: what is stored, what was marked, how to resume. */
static void report_interrupt(const ql_sweep *sw, const ql_run_opts *ro, const ql_run_summary *sum)
{
    const int sig = ql_interrupted();
    char marked[600] = "no run was in progress";
    if (sum->interrupted[0])
        snprintf(marked, sizeof marked, "the run of config %s marked interrupted",
                 sum->interrupted);
    char shard[48] = "";
    if (ro->shard.count > 1)
        snprintf(shard, sizeof shard, " --shard %d/%d", ro->shard.index, ro->shard.count);
    fprintf(stderr,
            "qlab: interrupted (%s): %zu config%s stored, %s; resume with: qlab sweep %s --db "
            "%s%s\n",
            sig == SIGTERM  ? "SIGTERM"
            : sig == SIGINT ? "SIGINT"
                            : "signal",
            sum->n_run + sum->n_failed, sum->n_run + sum->n_failed == 1 ? "" : "s", marked,
            sw->path, ro->db_path ? ro->db_path : "results/qlab.db", shard);
}

/* The sweep on one text in this process, or its configs in `jobs` processes
 * (sweep_jobs.h). */
static ql_status run_text(const ql_sweep *sw, const ql_run_opts *ro, int jobs, ql_run_summary *sum,
                          ql_error *err)
{
    ql_runner *r;
    ql_status st = ql_runner_open(&r, sw, ro, err);
    if (st)
        return st;
    if (jobs > 1 && ql_runner_todo(r) > 1) {
        /* The jobs load the reference and calibration matrices this process makes. */
        st = ql_runner_prepare(r, err);
        if (!st)
            st = ql_sweep_jobs_run(r, sw, ro, jobs, err);
    } else {
        st = ql_runner_configs(r, err);
    }
    if (!st || st == QL_EEXTERNAL || st == QL_EINTERRUPTED)
        ql_runner_print(r);
    *sum = *ql_runner_summary(r);
    ql_runner_close(r);
    return st;
}

/* Every evaluation text of the sweep in this process, together: a run per text (each with
 * its own reference), the first owning the model, the calibration and the tensor cache
 * the others borrow; config after config, its weights built once for every text. */
static ql_status run_together(ql_sweep *sw, const ql_run_opts *ro, ql_run_summary *sum,
                              ql_error *err)
{
    const size_t n = (size_t)sw->n_texts;
    ql_runner **runs = calloc(n, sizeof *runs);
    if (!runs)
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    ql_run_opts o = *ro;
    o.texts_together = sw->n_texts;
    ql_status st = QL_OK;
    for (size_t t = 0; t < n && !st; t++) {
        ql_sweep_select_text(sw, (int)t);
        st = t == 0 ? ql_runner_open(&runs[0], sw, &o, err)
                    : ql_runner_open_text(&runs[t], sw, &o, runs[0], err);
    }
    if (!st)
        st = ql_runner_configs_texts(runs, n, err);
    for (size_t t = 0; t < n && runs[t]; t++) {
        if (!st || st == QL_EEXTERNAL || st == QL_EINTERRUPTED)
            ql_runner_print(runs[t]);
        ql_run_summary_add(sum, ql_runner_summary(runs[t]));
    }
    for (size_t t = n; t-- > 0;) /* the owner last */
        ql_runner_close(runs[t]);
    free(runs);
    return st;
}

/* Each evaluation text of the sweep (or only_text), each with its own reference: in this
 * process all together, or in turn with their configs in `jobs` processes. */
static ql_status run(ql_sweep *sw, int only_text, const ql_run_opts *ro, int jobs,
                     ql_run_summary *sum, ql_error *err)
{
    if (only_text < 0 && jobs <= 1 && sw->n_texts > 1)
        return run_together(sw, ro, sum, err);
    ql_status st = QL_OK;
    for (int t = 0; t < sw->n_texts && !st; t++) {
        if (only_text >= 0 && t != only_text)
            continue;
        ql_sweep_select_text(sw, t);
        ql_run_summary part;
        memset(&part, 0, sizeof part);
        st = run_text(sw, ro, jobs, &part, err);
        ql_run_summary_add(sum, &part);
        if (ql_interrupted())
            break;
    }
    return st;
}

int ql_cmd_sweep(int argc, char **argv)
{
    const char *args[1], *shard_spec = NULL, *only_text = NULL;
    bool list = false, strict = false;
    int parent = 0, jobs = 1;
    uint64_t mem = 0;
    ql_run_opts ro;
    ql_run_opts_init(&ro);
    const ql_opt opts[] = {
        ql_opt_str("db", 0, &ro.db_path, "PATH", "results store (default results/qlab.db)"),
        ql_opt_threads(&ro.threads, "threads (default: $OMP_NUM_THREADS, else the sweep's\n"
                                    "'threads', else all cores)"),
        ql_opt_int("jobs", 'j', &jobs, 1, 256, "N",
                   "evaluate N configs at once in separate processes (threads are\n"
                   "divided among them); the best use of cores for small models"),
        ql_opt_size("mem", 0, &mem, "SIZE",
                    "memory budget (e.g. 16GiB; default 70% of the RAM): sizes the\n"
                    "groups of chunks a pass takes through each layer, whether the\n"
                    "reference's log-probs are held, the tensors kept between configs;\n"
                    "results do not depend on it"),
        ql_opt_str("cache-dir", 0, &ro.cache_dir, "DIR",
                   "where the reference log-probs and the calibration imatrices\n"
                   "(imatrix = calib:NAME) are cached (default <db dir>/cache);\n"
                   "shards of one sweep may share it"),
        ql_opt_flag("quiet", 'q', &ro.quiet, "no progress lines"),
        ql_opt_flag("strict", 0, &strict,
                    "exit 1 when a config failed (failures are stored either way);\n"
                    "refuse a config whose calibration text overlaps the evaluated\n"
                    "text (more than 2% of its 32-grams: stored as failed, not run)"),
        ql_opt_flag("no-share", 0, &ro.no_share,
                    "every config runs its whole pass (by default a config that differs\n"
                    "from an earlier one only in the head computes its head alone on\n"
                    "that one's hidden states: the same numbers, bit for bit)"),
        ql_opt_flag("no-summary", 0, &ro.no_summary,
                    "do not print the summary table (the store has everything)"),
        ql_opt_str("text", 0, &only_text, "NAME",
                   "measure on this one of the sweep's texts only (as the file\n"
                   "writes it; default: every text of `text = ...`)"),
        ql_opt_flag("list", 0, &list,
                    "print the configs (index, hash prefix, canonical form) and stop"),
        ql_opt_str("shard", 0, &shard_spec, "K/N",
                   "keep configs i with i mod N == K (0 <= K < N); 'auto' takes K and N\n"
                   "from SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT"),
        ql_opt_hidden(ql_opt_int("job-of", 0, &parent, 1, 1 << 30, "PID",
                                 "(set by --jobs) this process is a job of sweep process PID and\n"
                                 "ends when that process ends")),
    };
    static const char *const names[] = {"the sweep FILE"};
    ql_opt_parser p = {.prog = "qlab sweep",
                       .opts = opts,
                       .n_opts = QL_OPT_COUNT(opts),
                       .args = args,
                       .max_args = 1,
                       .arg_names = names,
                       .n_required = 1,
                       .help = help};
    const int rc = ql_opt_parse(&p, argc, argv);
    if (rc != QL_OPT_GO_ON)
        return rc;
    const char *file = args[0];
    /* A job must not outlive the sweep that started it: a rerun of that sweep would
     * start a second job on the same configs. */
    if (parent && (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != (pid_t)parent)) {
        fprintf(stderr, "qlab sweep: the sweep process %d that started this job is gone\n", parent);
        return QL_EXIT_RUNTIME;
    }

    ql_error err;
    ql_error_clear(&err);
    ql_shard shard = {0, 1};
    const ql_shard_array array = ql_cli_shard_array();
    if (shard_spec && ql_shard_parse(shard_spec, &array, &shard, &err) != QL_OK)
        return ql_opt_usage(&p, "%s", err.msg);

    /* Checked before anything else, so a bad file fails before any work. */
    ql_sweep sw;
    if (ql_sweep_load(file, 0, &sw, &err) != QL_OK)
        return ql_cli_fail(&err);

    int text_ix = -1;
    if (only_text && (text_ix = ql_sweep_find_text(&sw, only_text)) < 0) {
        ql_error_set(&err, QL_EINVAL, "%s:%d: --text %s: not one of the sweep's texts", sw.path,
                     sw.text_line, only_text);
        ql_sweep_deinit(&sw);
        return ql_cli_fail(&err);
    }

    if (!list) {
        ro.shard = shard;
        ro.strict = strict;
        ro.mem_bytes = (size_t)mem;
        ql_sweep_faults_install(&ro);
        /* Tests: short lock waits (the defaults are 30 s before saying so, 10 min). */
        const char *bt = getenv("QLAB_STORE_BUSY_TIMEOUT_MS"),
                   *lp = getenv("QLAB_STORE_LOCK_PATIENCE_MS");
        if (bt && !ql_parse_int(bt, &ro.busy_timeout_ms))
            ro.busy_timeout_ms = 0;
        if (lp && !ql_parse_int(lp, &ro.lock_patience_ms))
            ro.lock_patience_ms = 0;
        ql_run_summary sum;
        memset(&sum, 0, sizeof sum);
        catch_interrupts();
        ql_status st = run(&sw, text_ix, &ro, jobs, &sum, &err);
        if (ql_interrupted() && (st == QL_EINTERRUPTED || !st || parent)) {
            /* A job tells nothing: its sweep process reports for all of them. */
            if (!parent)
                report_interrupt(&sw, &ro, &sum);
            ql_sweep_deinit(&sw);
            return 128 + ql_interrupted();
        }
        ql_sweep_deinit(&sw);
        if (st)
            return ql_cli_fail(&err);
        if (sum.n_failed)
            fprintf(stderr,
                    "qlab: %zu config%s failed; their errors are stored ('qlab query failed' "
                    "lists them)\n",
                    sum.n_failed, sum.n_failed == 1 ? "" : "s");
        if (sum.n_overlapping)
            fprintf(stderr,
                    "qlab: %zu stored config%s calibrated on text overlapping the evaluated "
                    "text (the warnings above)%s\n",
                    sum.n_overlapping, sum.n_overlapping == 1 ? "" : "s",
                    strict ? "; --strict refuses it: exit 1" : "");
        return (sum.n_failed || sum.n_overlapping) && strict ? QL_EXIT_RUNTIME : QL_EXIT_OK;
    }

    /* The list is of configs that can run: the files they read are there. */
    if (ql_sweep_check_inputs(&sw, &err) != QL_OK) {
        ql_sweep_deinit(&sw);
        return ql_cli_fail(&err);
    }
    size_t kept = 0;
    for (size_t i = 0; i < sw.n_points; i++)
        kept += ql_shard_keeps(&shard, i);
    printf("# sweep %s: model %s, text", sw.name, sw.model);
    for (int t = 0; t < sw.n_texts; t++)
        if (text_ix < 0 || t == text_ix)
            printf(" %s", sw.texts[t]);
    printf(", ctx %d, chunks ", sw.ctx);
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
