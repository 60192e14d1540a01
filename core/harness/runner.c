/* The sweep runner: reference once, then every config against it (runner.h). */
#include "harness/runner.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/data.h"
#include "base/progress.h"
#include "base/table.h"
#include "base/util.h"
#include "experiment/calib.h"
#include "experiment/metrics.h"
#include "experiment/qweights.h"
#include "experiment/reference.h"
#include "formats/types.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/imatrix_io.h"
#include "model/kvcache.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/synth.h"
#include "model/tokenizer.h"
#include "results/store.h"

void ql_run_opts_init(ql_run_opts *o)
{
    memset(o, 0, sizeof *o);
    o->shard.index = 0;
    o->shard.count = 1;
}

/* ------------------------------------------------------------------------- */
/* The state of one sweep                                                     */

typedef struct {
    const ql_sweep *sw;
    const ql_run_opts *opts;
    char db_path[QL_PATH_MAX];
    char cache_dir[QL_PATH_MAX];

    char model_path[QL_PATH_MAX];
    char model_sha[65];
    ql_model *model;
    ql_tokenizer *tok;
    char text_path[QL_PATH_MAX];
    char text_sha[65];
    int64_t text_bytes;
    ql_ppl_data data;
    ql_forward *fw;
    ql_reference *ref;

    ql_calib *calib; /* the importance matrices and outlier sets the configs name */
    ql_qweights *qw; /* the configs' quantized weights and the tensor cache they share */

    ql_store *store;
    int64_t model_id, dataset_id;

    ql_dist_acc *acc;
    float *logits; /* (n_scored, n_vocab) */

    char eta_note[64]; /* "sweep ETA 3m05s", shown on each config's progress line */
    int kill_after;    /* fault injection: SIGKILL after this many begun runs (0 = never) */
    int pause_after;   /* fault injection: wait for a signal after this many begun runs */
    int begun;
} sweep_ctx;

/* ------------------------------------------------------------------------- */
/* One config                                                                 */

typedef struct {
    ql_run_metrics m;
    ql_chunk_record *chunks;
    ql_run_timing timing;
    ql_qweights_result q; /* the weight set, its tensor and activation records */
} config_result;

static void config_result_deinit(config_result *r)
{
    free(r->chunks);
    ql_qweights_result_deinit(&r->q);
    memset(r, 0, sizeof *r);
}

/* Runs the quantized forward pass over every chunk and compares with the reference. */
static ql_status run_chunks(sweep_ctx *s, const ql_weights *w, const char *label, config_result *r,
                            ql_error *err)
{
    const ql_ppl_data *d = &s->data;
    ql_dist_acc_reset(s->acc);
    ql_progress p;
    ql_progress_begin(&p, label, "tok", ql_ppl_n_scored_total(d), s->opts->quiet);
    double t0 = ql_now();
    for (int64_t c = 0; c < d->n_chunks; c++) {
        ql_status st = ql_ppl_run_chunk(s->fw, w, d, c, s->logits, err);
        if (!st)
            st = ql_dist_acc_add(s->acc, ql_reference_chunk(s->ref, c), s->logits,
                                 ql_ppl_chunk_targets(d, c), d->n_scored, err);
        if (st)
            return ql_error_prefix(err, "chunk %lld: ", (long long)c);
        ql_progress_update(&p, (c + 1) * d->n_scored, s->eta_note[0] ? s->eta_note : NULL);
    }
    r->timing.quant_seconds = ql_now() - t0;
    ql_progress_end(&p, ql_ppl_n_scored_total(d), NULL);

    ql_dist_metrics dm;
    ql_dist_acc_finish(s->acc, &dm);
    /* The metrics records.h says come from the distribution, field by field. */
#define QL_METRIC_FROM_DIST(name) r->m.name = (double)dm.name;
#define QL_METRIC_FROM_WEIGHTS(name)
    QL_RUN_METRICS(QL_METRIC_BY_SOURCE)
#undef QL_METRIC_FROM_DIST
#undef QL_METRIC_FROM_WEIGHTS

    r->chunks = calloc((size_t)d->n_chunks, sizeof *r->chunks);
    if (!r->chunks)
        return ql_error_set(err, QL_ENOMEM, "out of memory for per-chunk metrics");
    for (int64_t c = 0; c < d->n_chunks; c++) {
        ql_chunk_record *cm = &r->chunks[c];
        cm->chunk = (int32_t)c;
        cm->n_tokens = d->n_scored;
        ql_dist_acc_range(s->acc, c * d->n_scored, (c + 1) * d->n_scored, &cm->kld_sum,
                          &cm->nll_sum, &cm->nll_ref_sum, &cm->top1_count);
    }
    return QL_OK;
}

/* One config: its quantized weights (qweights.h), the quantized forward pass over
 * every chunk with the config's K/V type, and the metrics against the reference. */
static ql_status evaluate_config(sweep_ctx *s, const ql_config *c, ql_calib_slot *slot,
                                 const char *label, config_result *r, ql_error *err)
{
    double t0 = ql_now();
    ql_run_metrics_init(&r->m);
    ql_run_timing_init(&r->timing);
    const ql_qweights_result *q = &r->q;
    ql_status st = ql_qweights_build(s->qw, s->calib, c, slot, &r->q, err);
    if (st)
        return st;
    st = ql_forward_set_kv_type(s->fw, ql_kv_ggml_type(ql_config_kv_type(c)), err);
    if (!st)
        st = run_chunks(s, q->weights, label, r, err);
    ql_forward_set_kv_type(s->fw, QL_TYPE_F32, NULL);
    if (st)
        return st;
        /* The metrics records.h says come from the weights, field by field. */
#define QL_METRIC_FROM_DIST(name)
#define QL_METRIC_FROM_WEIGHTS(name) r->m.name = q->name;
    QL_RUN_METRICS(QL_METRIC_BY_SOURCE)
#undef QL_METRIC_FROM_DIST
#undef QL_METRIC_FROM_WEIGHTS
    r->timing.quantize_seconds = q->quantize_seconds;
    r->timing.ref_seconds = ql_reference_seconds(s->ref);
    r->timing.seconds = ql_now() - t0;
    return QL_OK;
}

/* ------------------------------------------------------------------------- */
/* Sweep set-up                                                               */

static ql_status open_inputs(sweep_ctx *s, ql_error *err)
{
    const ql_sweep *sw = s->sw;
    const ql_data_entry *me = NULL, *te = NULL;
    ql_status st;
    if (ql_synth_is_spec(sw->model))
        st =
            ql_synth_materialize(sw->model, s->cache_dir, s->model_path, sizeof s->model_path, err);
    else
        st = ql_data_resolve(sw->model, s->model_path, sizeof s->model_path, &me, err);
    if (st)
        return ql_error_prefix(err, "%s: model: ", sw->path);
    if (me)
        ql_strlcpy(s->model_sha, me->sha256, sizeof s->model_sha);
    else if ((st = ql_sha256_file(s->model_path, s->model_sha, err)))
        return st;
    if ((st = ql_data_resolve(sw->text, s->text_path, sizeof s->text_path, &te, err)))
        return ql_error_prefix(err, "%s: text: ", sw->path);
    if ((st = ql_model_load(&s->model, s->model_path, err)))
        return st;
    if ((st = ql_tokenizer_from_gguf(&s->tok, s->model->gguf, err)))
        return st;
    char *text;
    size_t len;
    if ((st = ql_file_read_all(s->text_path, &text, &len, err)))
        return st;
    s->text_bytes = (int64_t)len;
    if (te)
        ql_strlcpy(s->text_sha, te->sha256, sizeof s->text_sha);
    else
        ql_sha256_hex(text, len, s->text_sha);
    st = ql_ppl_data_from_text(&s->data, s->tok, text, len, sw->ctx, sw->chunks, err);
    free(text);
    if (st)
        return ql_error_prefix(err, "%s: ", s->text_path);
    return ql_forward_alloc(&s->fw, &s->model->hp, sw->ctx, err);
}

static ql_status open_store(sweep_ctx *s, ql_error *err)
{
    char dir[QL_PATH_MAX];
    ql_strlcpy(dir, s->db_path, sizeof dir);
    ql_status st = ql_make_dirs(dirname(dir), err);
    if (st)
        return st;
    if ((st = ql_store_open(s->db_path, NULL, &s->store, err)))
        return st;
    const ql_hparams *hp = &s->model->hp;
    ql_store_model m;
    ql_store_model_init(&m);
    m.sha256 = s->model_sha;
    m.path = s->model_path;
    m.name = s->sw->model;
    m.arch = hp->arch_name;
    m.file_bytes = (int64_t)s->model->gguf->file_size;
    m.params = s->model->n_params;
    m.n_layer = hp->n_layer;
    m.n_embd = hp->n_embd;
    m.n_ff = hp->n_ff;
    m.n_head = hp->n_head;
    m.n_head_kv = hp->n_head_kv;
    m.n_vocab = hp->n_vocab;
    m.n_ctx_train = hp->n_ctx_train;
    if ((st = ql_store_upsert_model(s->store, &m, &s->model_id, err)))
        return st;
    ql_store_dataset d;
    ql_store_dataset_init(&d);
    d.sha256 = s->text_sha;
    d.name = s->sw->text;
    d.path = s->text_path;
    d.bytes = s->text_bytes;
    d.tokens = s->data.n_tokens;
    d.tokens_model = s->model_id;
    return ql_store_upsert_dataset(s->store, &d, &s->dataset_id, err);
}

static void sweep_ctx_deinit(sweep_ctx *s)
{
    ql_qweights_free(s->qw);
    ql_dist_acc_free(s->acc);
    free(s->logits);
    ql_reference_free(s->ref);
    ql_forward_free(s->fw);
    ql_ppl_data_deinit(&s->data);
    ql_calib_free(s->calib);
    ql_tokenizer_free(s->tok);
    ql_model_free(s->model);
    ql_store_close(s->store);
}

/* ------------------------------------------------------------------------- */
/* The summary printed at the end                                            */

typedef struct {
    size_t index;
    char label[160];
    const char *status;
    double metric[QL_N_METRICS]; /* NAN = not measured */
} summary_row;

static void summary_row_init(summary_row *r, size_t index)
{
    r->index = index;
    for (int m = 0; m < QL_N_METRICS; m++)
        r->metric[m] = (double)NAN;
}

/* The metrics of the summary table (QL_METRIC_SUMMARY), in report order. */
static size_t summary_metrics(ql_metric_id *ids)
{
    ql_metric_id all[QL_N_METRICS];
    size_t n_all = ql_metrics_reported(all), n = 0;
    for (size_t k = 0; k < n_all; k++)
        if (ql_metric_get(all[k])->flags & QL_METRIC_SUMMARY)
            ids[n++] = all[k];
    return n;
}

static void print_summary(const summary_row *rows, size_t n, const ql_run_summary *sum,
                          const sweep_ctx *s)
{
    if (s->opts->no_summary)
        return;
    ql_metric_id ids[QL_N_METRICS];
    size_t nm = summary_metrics(ids);
    ql_table_column cols[3 + QL_N_METRICS] = {
        {"#", NULL, true}, {"config", NULL, false}, {"status", NULL, false}};
    for (size_t k = 0; k < nm; k++)
        cols[3 + k] = (ql_table_column){ql_metric_get(ids[k])->label, NULL, true};
    ql_table *t = ql_table_alloc(cols, 3 + nm);
    if (!t)
        return;
    ql_error err;
    for (size_t i = 0; i < n; i++) {
        const summary_row *r = &rows[i];
        ql_table_row(t, &err);
        ql_table_putf(t, &err, "%zu", r->index);
        ql_table_put(t, r->label, &err);
        ql_table_put(t, r->status, &err);
        for (size_t k = 0; k < nm; k++) {
            char cell[64];
            ql_metric_format(ids[k], r->metric[ids[k]], cell, sizeof cell);
            ql_table_put(t, cell[0] ? cell : NULL, &err);
        }
    }
    printf("\n");
    ql_table_write_md(t, stdout, "—");
    ql_table_free(t);
    char ref[32], cfg[32];
    ql_format_duration(sum->ref_seconds, ref, sizeof ref);
    ql_format_duration(sum->configs_seconds, cfg, sizeof cfg);
    printf("\nsweep %s: %zu config%s (%zu run, %zu already done, %zu failed), %lld scored tokens "
           "per pass\n",
           s->sw->name, sum->n_configs, sum->n_configs == 1 ? "" : "s", sum->n_run, sum->n_skipped,
           sum->n_failed, (long long)sum->scored_tokens);
    double per_pass = sum->n_run ? sum->forward_seconds / (double)sum->n_run : (double)NAN;
    if (s->ref && !ql_reference_from_cache(s->ref))
        printf("timing: reference pass %s; %zu quantized passes %s (forward %.1f s each, %.2f "
               "reference passes each): %zu configs cost %.1f reference passes\n",
               ref, sum->n_run, cfg, per_pass, per_pass / sum->ref_seconds, sum->n_run,
               (sum->ref_seconds + sum->configs_seconds) / sum->ref_seconds);
    else if (sum->n_run)
        printf("timing: reference %s; %zu quantized passes %s (forward %.1f s each)\n",
               s->ref ? "loaded from cache" : "not needed", sum->n_run, cfg, per_pass);
    else
        printf("timing: nothing to run (every config was done before)\n");
    printf("results: %s\n", s->db_path);
}

/* Fills a summary row of a done run from the store (left as it is when unreadable). */
static void stored_row(ql_store *store, int64_t run_id, summary_row *row)
{
    ql_store_run_brief b;
    ql_error e;
    if (ql_store_run_brief_get(store, run_id, &b, &e) != QL_OK)
        return;
    memcpy(row->metric, b.metric, sizeof row->metric);
}

/* Short label of a config: the axes that vary in the sweep. */
static void config_label(const ql_sweep *sw, const ql_config *c, char *buf, size_t size)
{
    bool varies[QL_AXIS_COUNT];
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        varies[a] = sw->n_values[a] > 1;
    ql_config_short_label(c, varies, buf, size);
}

/* ------------------------------------------------------------------------- */
/* Several configs at once (--jobs): child processes, each a shard of this run    */

extern char **environ;

static int cmp_run_state(const void *a, const void *b)
{
    return strcmp(((const ql_store_run_state *)a)->config_hash,
                  ((const ql_store_run_state *)b)->config_hash);
}

/* The run of a config among states sorted by hash, or NULL. */
static const ql_store_run_state *find_state(const ql_store_run_state *st, size_t n,
                                            const char *hash)
{
    ql_store_run_state key;
    ql_strlcpy(key.config_hash, hash, sizeof key.config_hash);
    return n ? bsearch(&key, st, n, sizeof *st, cmp_run_state) : NULL;
}

/* The run of config i if the jobs finished it: done with this metrics version, or
 * failed, in an attempt begun after `before` (the states before the jobs started). */
static const ql_store_run_state *finished_run(const sweep_ctx *s, size_t i,
                                              const ql_store_run_state *before, size_t n_before,
                                              const ql_store_run_state *now, size_t n_now)
{
    const char *hash = s->sw->points[i].hash;
    const ql_store_run_state *r = find_state(now, n_now, hash);
    if (!r || !(strcmp(r->status, "failed") == 0 ||
                (strcmp(r->status, "done") == 0 && r->metrics_version == QL_METRICS_VERSION)))
        return NULL;
    const ql_store_run_state *b = find_state(before, n_before, hash);
    return !b || r->attempts > b->attempts ? r : NULL;
}

/* The store's run states of this sweep's model, text, ctx and chunks. */
static ql_status run_states(sweep_ctx *s, ql_store_run_state **out, size_t *n, ql_error *err)
{
    return ql_store_run_states(s->store, s->model_sha, s->text_sha, s->sw->ctx,
                               (int)s->data.n_chunks, out, n, err);
}

/* How many todo configs the jobs finished so far (0 when the store is busy). */
static size_t count_finished(sweep_ctx *s, const bool *todo, const ql_store_run_state *before,
                             size_t n_before)
{
    ql_store_run_state *now;
    size_t n_now, n = 0;
    ql_error e;
    if (run_states(s, &now, &n_now, &e) != QL_OK)
        return 0;
    for (size_t i = 0; i < s->sw->n_points; i++)
        n += todo[i] && finished_run(s, i, before, n_before, now, n_now) != NULL;
    free(now);
    return n;
}

/* Runs the todo configs in `jobs` child processes: `qlab sweep FILE --shard k/n` with
 * this run's shard refined (child j of shard K/N is shard K + N j of N jobs), the same
 * database (SQLite serializes their short transactions) and cache directory (so they
 * load the reference and calibration matrices this process just made). The parent
 * shows one progress line for the whole sweep and fills the summary rows from the
 * store afterwards. */
static ql_status run_jobs(sweep_ctx *s, const bool *todo, size_t n_todo, summary_row *rows,
                          ql_run_summary *sum, ql_error *err)
{
    const ql_run_opts *o = s->opts;
    const int jobs = o->jobs;
    int threads = ql_threads_get() / jobs;
    if (threads < 1)
        threads = 1;
    /* What the store holds before the jobs: a config counts as finished by them only
     * in an attempt they began. */
    ql_store_run_state *before = NULL;
    size_t n_before = 0;
    ql_status st = run_states(s, &before, &n_before, err);
    if (st)
        return st;
    pid_t *pids = calloc((size_t)jobs, sizeof *pids);
    if (!pids) {
        free(before);
        return ql_error_set(err, QL_ENOMEM, "out of memory for %d jobs", jobs);
    }
    int started = 0;
    for (int j = 0; j < jobs; j++) {
        char shard[64], nthreads[16], parent[24];
        snprintf(shard, sizeof shard, "%d/%d", o->shard.index + o->shard.count * j,
                 o->shard.count * jobs);
        snprintf(nthreads, sizeof nthreads, "%d", threads);
        snprintf(parent, sizeof parent, "%ld", (long)getpid());
        char *argv[] = {"qlab",        "sweep",      (char *)s->sw->path, "--db",     s->db_path,
                        "--cache-dir", s->cache_dir, "--threads",         nthreads,   "--shard",
                        shard,         "--quiet",    "--no-summary",      "--job-of", parent,
                        NULL};
        int rc = posix_spawn(&pids[j], "/proc/self/exe", NULL, NULL, argv, environ);
        if (rc != 0) {
            st = ql_error_set(err, QL_EIO, "cannot start job %d of %d: %s", j + 1, jobs,
                              strerror(rc));
            break;
        }
        started++;
    }
    ql_progress p;
    ql_progress_begin(&p, "configs", "config", (int64_t)n_todo, o->quiet);
    double t0 = ql_now();
    int running = started, failures = 0;
    char why[256] = "";
    while (running > 0) {
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
        ql_progress_update(&p, (int64_t)count_finished(s, todo, before, n_before), NULL);
        usleep(200 * 1000);
    }
    ql_progress_end(&p, (int64_t)count_finished(s, todo, before, n_before), NULL);
    free(pids);
    sum->configs_seconds = ql_now() - t0;
    if (!st && failures)
        st = ql_error_set(err, QL_EEXTERNAL,
                          "%s: %d of %d jobs failed (%s); finished configs are stored, run the "
                          "sweep again to resume",
                          s->sw->path, failures, jobs, why);

    /* The summary rows of the configs the jobs ran, from the store. */
    ql_store_run_state *now = NULL;
    size_t n_now = 0;
    ql_error serr;
    if (run_states(s, &now, &n_now, &serr) != QL_OK && !st)
        st = ql_error_set(err, serr.status, "%s", serr.msg);
    for (size_t i = 0, r = 0; i < s->sw->n_points; i++) {
        if (!ql_shard_keeps(&o->shard, i))
            continue;
        summary_row *row = &rows[r++];
        if (!todo[i])
            continue;
        const ql_store_run_state *run = finished_run(s, i, before, n_before, now, n_now);
        ql_store_run_brief b;
        if (!run) {
            row->status = "not run";
        } else if (strcmp(run->status, "failed") == 0) {
            sum->n_failed++;
            row->status = "failed";
        } else {
            sum->n_run++;
            row->status = "ok";
            stored_row(s->store, run->run_id, row);
            if (ql_store_run_brief_get(s->store, run->run_id, &b, &serr) == QL_OK &&
                !isnan(b.quant_seconds))
                sum->forward_seconds += b.quant_seconds;
        }
    }
    free(before);
    free(now);
    return st;
}

/* ------------------------------------------------------------------------- */

ql_status ql_sweep_execute(const ql_sweep *sw, const ql_run_opts *opts, ql_run_summary *sum,
                           ql_error *err)
{
    memset(sum, 0, sizeof *sum);
    sweep_ctx s;
    memset(&s, 0, sizeof s);
    bool *todo = NULL;
    summary_row *rows = NULL;
    s.sw = sw;
    s.opts = opts;
    ql_strlcpy(s.db_path, opts->db_path ? opts->db_path : "results/qlab.db", sizeof s.db_path);
    if (opts->cache_dir) {
        ql_strlcpy(s.cache_dir, opts->cache_dir, sizeof s.cache_dir);
    } else {
        char dir[QL_PATH_MAX];
        ql_strlcpy(dir, s.db_path, sizeof dir);
        snprintf(s.cache_dir, sizeof s.cache_dir, "%s/cache", dirname(dir));
    }
    const char *kill = getenv("QLAB_FAULT_KILL_AFTER_RUNS");
    if (kill && !ql_parse_int(kill, &s.kill_after))
        s.kill_after = 0;
    const char *pause_env = getenv("QLAB_FAULT_PAUSE_AFTER_RUNS");
    if (pause_env && !ql_parse_int(pause_env, &s.pause_after))
        s.pause_after = 0;
    ql_threads_set(opts->threads > 0 ? opts->threads : sw->threads);

    /* The imatrix that weighs every run's imatrix_err columns (calib.h). */
    const ql_imatrix *metric_imatrix = NULL;
    ql_status st = open_inputs(&s, err);
    if (!st) /* what the model decides about the configs, before anything runs */
        st = ql_sweep_check_model(sw, s.model->gguf, err);
    if (!st) {
        ql_calib_source cs = {s.model, s.tok, s.model_sha, s.cache_dir, sw->ctx, opts->quiet};
        st = ql_calib_alloc(&s.calib, &cs, err);
    }
    if (!st)
        st = ql_calib_pick_metric_imatrix(s.calib, sw, &metric_imatrix, err);
    if (!st)
        st = open_store(&s, err);
    if (st)
        goto out;
    const ql_hparams *hp = &s.model->hp;
    int64_t n_scored = ql_ppl_n_scored_total(&s.data);
    sum->scored_tokens = n_scored;
    ql_qweights_opts qo = {s.model,        s.model_sha,       s.cache_dir,
                           metric_imatrix, opts->cache_bytes, opts->quiet};
    if ((st = ql_qweights_alloc(&s.qw, &qo, err)))
        goto out;
    s.logits = malloc((size_t)s.data.n_scored * (size_t)hp->n_vocab * sizeof(float));
    if (!s.logits) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory for the sweep buffers");
        goto out;
    }
    if ((st = ql_dist_acc_alloc(&s.acc, n_scored, hp->n_vocab, err)))
        goto out;

    /* Which configs still need work: decided before the reference is computed, so
     * a finished sweep costs nothing. */
    size_t n_todo = 0;
    todo = calloc(sw->n_points ? sw->n_points : 1, sizeof *todo);
    if (!todo) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory for the config list");
        goto out;
    }
    for (size_t i = 0; i < sw->n_points; i++) {
        if (!ql_shard_keeps(&opts->shard, i))
            continue;
        sum->n_configs++;
        int64_t done = 0;
        st = ql_store_find_done(s.store, sw->points[i].hash, s.model_sha, s.text_sha, sw->ctx,
                                (int)s.data.n_chunks, QL_METRICS_VERSION, &done, err);
        if (st)
            goto out;
        todo[i] = done == 0;
        n_todo += done == 0;
    }
    if (!opts->quiet)
        fprintf(stderr,
                "sweep %s: %zu configs%s, %zu to run; model %s (%lld params), text %s: %lld "
                "chunks of %d tokens, %lld scored\n",
                sw->name, sum->n_configs, opts->shard.count > 1 ? " in this shard" : "", n_todo,
                sw->model, (long long)s.model->n_params, sw->text, (long long)s.data.n_chunks,
                sw->ctx, (long long)n_scored);
    if (n_todo > 0) {
        ql_reference_opts ro = {s.model_sha, s.text_sha, s.cache_dir, opts->quiet};
        if ((st = ql_reference_get(&s.ref, s.fw, s.model->weights, &s.data, &ro, err)))
            goto out;
        sum->ref_seconds = ql_reference_seconds(s.ref);
    }

    rows = calloc(sum->n_configs ? sum->n_configs : 1, sizeof *rows);
    if (!rows) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory for the summary");
        goto out;
    }
    if (opts->jobs > 1 && n_todo > 1) {
        /* The jobs load the calibration matrices from the cache: make them here once. */
        for (size_t i = 0; i < sw->n_points && !st; i++) {
            ql_calib_slot *slot;
            ql_error cerr;
            if (todo[i])
                (void)ql_calib_config_imatrix(s.calib, &sw->points[i].config, &slot, &cerr);
        }
        size_t r = 0;
        for (size_t i = 0; i < sw->n_points; i++) {
            if (!ql_shard_keeps(&opts->shard, i))
                continue;
            summary_row *row = &rows[r++];
            summary_row_init(row, i);
            config_label(sw, &sw->points[i].config, row->label, sizeof row->label);
            if (!todo[i]) {
                int64_t done = 0;
                sum->n_skipped++;
                row->status = "done before";
                if (!(st = ql_store_find_done(s.store, sw->points[i].hash, s.model_sha, s.text_sha,
                                              sw->ctx, (int)s.data.n_chunks, QL_METRICS_VERSION,
                                              &done, err)) &&
                    done) {
                    stored_row(s.store, done, row);
                    st = ql_store_add_to_sweep(s.store, sw->name, done, err);
                }
            }
        }
        if (!st)
            st = run_jobs(&s, todo, n_todo, rows, sum, err);
        if (!st || st == QL_EEXTERNAL)
            print_summary(rows, r, sum, &s);
        goto out;
    }
    size_t n_rows = 0, k = 0;
    double t_configs = ql_now();
    for (size_t i = 0; i < sw->n_points && !st; i++) {
        if (!ql_shard_keeps(&opts->shard, i))
            continue;
        k++;
        const ql_sweep_point *pt = &sw->points[i];
        summary_row *row = &rows[n_rows++];
        summary_row_init(row, i);
        config_label(sw, &pt->config, row->label, sizeof row->label);
        int64_t done = 0;
        st = ql_store_find_done(s.store, pt->hash, s.model_sha, s.text_sha, sw->ctx,
                                (int)s.data.n_chunks, QL_METRICS_VERSION, &done, err);
        if (st)
            break;
        if (done) {
            sum->n_skipped++;
            row->status = "done before";
            stored_row(s.store, done, row);
            st = ql_store_add_to_sweep(s.store, sw->name, done, err);
            continue;
        }
        int64_t config_id, run_id;
        if ((st = ql_store_upsert_config(s.store, &pt->config, &config_id, err)))
            break;
        /* The importance matrix is loaded before the run begins so that the run
         * records which one it used; failing to load it fails the run. */
        ql_error cerr;
        ql_error_clear(&cerr);
        ql_calib_slot *slot = NULL;
        ql_status cst = ql_calib_config_imatrix(s.calib, &pt->config, &slot, &cerr);
        ql_store_run_key key = {config_id, s.model_id, s.dataset_id, sw->ctx, (int)s.data.n_chunks};
        ql_store_run_info info = {sw->name, ql_threads_get(), QL_METRICS_VERSION,
                                  ql_calib_slot_sha256(slot)};
        if ((st = ql_store_begin_run(s.store, &key, &info, &run_id, err)))
            break;
        /* Fault injection for the resume tests: die, or hang until signalled, mid-sweep. */
        s.begun++;
        if (s.kill_after > 0 && s.begun > s.kill_after)
            raise(SIGKILL);
        if (s.pause_after > 0 && s.begun > s.pause_after)
            pause();

        char label[256];
        snprintf(label, sizeof label, "config %zu/%zu %s", k, sum->n_configs, row->label);
        /* The whole sweep's ETA from the configs evaluated so far. */
        size_t evaluated = sum->n_run + sum->n_failed;
        s.eta_note[0] = '\0';
        if (evaluated > 0 && n_todo > evaluated) {
            char eta[32];
            ql_format_duration((ql_now() - t_configs) / (double)evaluated *
                                   (double)(n_todo - evaluated),
                               eta, sizeof eta);
            snprintf(s.eta_note, sizeof s.eta_note, "sweep ETA %s", eta);
        }
        config_result r;
        memset(&r, 0, sizeof r);
        double t0 = ql_now();
        if (!cst)
            cst = evaluate_config(&s, &pt->config, slot, label, &r, &cerr);
        if (cst) {
            sum->n_failed++;
            row->status = "failed";
            fprintf(stderr, "qlab: config %zu (%s) failed: %s\n", i, row->label, cerr.msg);
            st = ql_store_fail_run(s.store, run_id, cerr.msg, ql_now() - t0, err);
        } else {
            ql_run_result res = {
                &r.m,      r.q.tensors, r.q.n_tensors, r.chunks, (size_t)s.data.n_chunks,
                &r.timing, r.q.acts,    r.q.n_acts};
            st = ql_store_finish_run_result(s.store, run_id, &res, err);
            sum->n_run++;
            sum->forward_seconds += r.timing.quant_seconds;
            row->status = "ok";
            if (!st)
                stored_row(s.store, run_id, row);
            if (!opts->quiet)
                fprintf(stderr, "  %s: bpw %.3f, PPL %.4f (ref %.4f), KLD %.3e, top-1 %.2f%%\n",
                        row->label, r.m.bpw, r.m.ppl, r.m.ppl_ref, r.m.kld_mean,
                        100.0 * r.m.top1_agree);
        }
        config_result_deinit(&r);
    }
    sum->configs_seconds = ql_now() - t_configs;
    if (!st)
        print_summary(rows, n_rows, sum, &s);
out:
    free(rows);
    free(todo);
    sweep_ctx_deinit(&s);
    return st;
}
