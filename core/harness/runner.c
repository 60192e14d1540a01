/* The sweep runner: reference once, then every config against it (runner.h). */
#include "harness/runner.h"
#include "harness/mem_plan.h"
#include "harness/sensitivities.h"

#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/data.h"
#include "base/gemm.h"
#include "base/progress.h"
#include "base/strbuf.h"
#include "base/table.h"
#include "base/util.h"
#include "experiment/calib.h"
#include "experiment/divergence.h"
#include "experiment/distribution.h"
#include "experiment/overlap.h"
#include "experiment/qweights.h"
#include "experiment/reference.h"
#include "experiment/routing.h"
#include "formats/types.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/kvcache.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/scheduler.h"
#include "model/quant_policy.h"
#include "model/synth.h"
#include "model/tensor_name.h"
#include "model/tokenizer.h"
#include "results/store.h"

void ql_run_opts_init(ql_run_opts *o)
{
    memset(o, 0, sizeof *o);
    o->shard.index = 0;
    o->shard.count = 1;
}

/* ------------------------------------------------------------------------- */
/* The state of one sweep in this process                                     */

typedef struct {
    size_t index;
    char label[160];
    const char *status;
    double metric[QL_N_METRICS]; /* NAN = not measured */
} summary_row;

/* How the memory budget is spent (plan_memory). */
typedef struct {
    size_t budget;      /* bytes */
    int group;          /* chunks per group of a pass */
    size_t keep_logp;   /* reference log-probs held when they fit in this */
    size_t cache;       /* quantized tensors kept between configs */
    size_t keep_hidden; /* the heads' input of a whole pass, held for configs sharing its blocks */
    size_t keep_prefix; /* the residual streams entering a block, held for the next config */
} mem_plan;

/* A whole pass's hidden states (the heads' input), held for the configs after it whose
 * blocks are the same and which differ only in the head: each computes its head alone
 * on them (ql_sched_run_heads), bit-identical to its own whole pass. What the blocks
 * also decide (the per-layer divergence, the routing of a mixture of experts) is held
 * with them. */
typedef struct {
    char key[65];         /* body_key of the pass held; "" = none */
    char config_hash[65]; /* the config whose pass it was */
    float *hidden;        /* (n_chunks, n_scored, n_embd) */
    double forward_seconds;
    ql_run_metrics m; /* its routing metrics */
    ql_layer_record *layers;
    size_t n_layers;
    ql_expert_load_record *loads;
    size_t n_loads;
} held_body;

/* The residual streams entering block `layer` of a pass, held for the next config when its
 * blocks 0..layer-1 are this pass's (configs that differ only from that block on, as
 * tensor_types recipes touching late blocks do): it starts its pass there
 * (ql_sched_job.resume), bit-identical to its own whole pass. Not with per-layer records
 * (layer_metrics, a mixture of experts' routing), which the skipped blocks would miss. */
typedef struct {
    char key[65];         /* prefix_key of the pass held, for `layer`; "" = none */
    char config_hash[65]; /* the config whose pass it was */
    int layer;
    float *streams; /* (n_chunks, ctx - 1, n_embd) */
    double forward_alone_seconds;
} held_prefix;

/* The overlap of one calibration source (a calib: value, or an imatrix file) with the
 * evaluated text; NAN figures when the source names no text qlab can read. */
typedef struct {
    char key[QL_PATH_MAX + 16];
    ql_overlap_metrics m;
} overlap_entry;

struct ql_runner {
    const ql_sweep *sw;
    ql_run_opts opts;
    /* The run of another text of the sweep whose model-level parts this one borrows (the
     * model and its tokenizer, the calibration, the tensor cache, the pass buffers); NULL
     * when it owns them. */
    ql_runner *owner;
    char text_name[QL_PATH_MAX]; /* the sweep's text this run evaluates, as the file writes it */
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
    ql_sched *sched;
    mem_plan mem;
    ql_reference *ref;

    ql_calib *calib;     /* the importance matrices and outlier sets the configs name */
    ql_qweights *qw;     /* the configs' quantized weights and the tensor cache they share */
    ql_sens_source sens; /* what the kld objective's measurements need */
    const ql_imatrix *metric_imatrix;

    ql_store *store;
    int64_t model_id, dataset_id;
    ql_dist_acc *acc;
    ql_divergence *div;      /* per-layer divergence, when the sweep asks for it */
    ql_routing_acc *routing; /* a mixture of experts: its routing against the reference's */

    bool *todo; /* (sw->n_points,) */
    size_t n_todo;
    summary_row *rows; /* this shard's configs, in order */
    size_t n_rows;
    ql_run_summary sum;

    overlap_entry *overlaps; /* each calibration source measured against the text */
    size_t n_overlaps, cap_overlaps;

    /* The order configs run in (rows' positions): each followed by the later ones that
     * differ from it only in the head, which then share its blocks (held_body). */
    size_t *order;
    char (*headless)[65];   /* (n_rows,) SHA-256 of each row's config without its head type */
    size_t n_head_siblings; /* rows whose config differs from an earlier row's only in the head */
    held_body body;
    /* ... and, after those, the later ones of the same family (SHA-256 of the config less
     * its head and tensor_types: they may share their first blocks, held_prefix). */
    char (*family)[65];
    size_t n_family_siblings;
    held_prefix prefix;

    char eta_note[64]; /* "sweep ETA 3m05s", shown on each config's progress line */
    int begun;
};

/* ------------------------------------------------------------------------- */
/* Memory                                                                     */

/* Spends the budget: the quantized weights of a config (at most the model file's bytes
 * for 16-bit sources) come first; then a pass of one chunk; then the reference's
 * log-probs if they fit in what is left with room to spare; then the groups as large as
 * what is left allows; the tensor cache keeps earlier configs' tensors up to half the
 * file (the current config's always stay). */
static void plan_memory(ql_runner *s)
{
    const ql_hparams *hp = &s->model->hp;
    const ql_ppl_data *d = &s->data;
    mem_plan *m = &s->mem;
    const size_t ram = ql_mem_total();
    m->budget = s->opts.mem_bytes ? s->opts.mem_bytes : (size_t)((double)ram * QL_RUN_MEM_SHARE);
    const size_t weights = (size_t)s->model->gguf->file_size;
    const int n_sets = s->sw->layer_metrics ? 2 : 1;
    const size_t one = ql_sched_bytes(hp, d->ctx, 1, n_sets);
    size_t left = m->budget > weights + one ? m->budget - weights - one : 0;
    /* Texts evaluated together each hold their own; they share the passes' buffers. */
    const size_t texts = s->opts.texts_together > 1 ? (size_t)s->opts.texts_together : 1;
    size_t own = left / texts;
    const size_t logp = ql_reference_logp_bytes(d, hp->n_vocab);
    m->keep_logp = ql_mem_hold(logp, own);
    own -= m->keep_logp;
    /* Configs that differ only in the head share their blocks when a pass's hidden states
     * fit beside the groups. */
    const size_t hidden = sizeof(float) * (size_t)ql_ppl_n_scored_total(d) * (size_t)hp->n_embd;
    m->keep_hidden = s->n_head_siblings && !s->opts.no_share ? ql_mem_hold(hidden, own) : 0;
    own -= m->keep_hidden;
    /* Configs of one family share their first blocks when a pass's residual streams fit
     * too, and no per-layer record needs every block run. */
    const size_t streams =
        sizeof(float) * (size_t)d->n_chunks * ql_sched_stream_floats(hp, d, false);
    m->keep_prefix = s->n_family_siblings && !s->opts.no_share && !s->sw->layer_metrics &&
                             hp->n_expert == 0
                         ? ql_mem_hold(streams, own)
                         : 0;
    left -= texts * (m->keep_logp + m->keep_hidden + m->keep_prefix);
    m->group = 1;
    while (m->group < d->n_chunks && ql_sched_bytes(hp, d->ctx, m->group + 1, n_sets) - one <= left)
        m->group++;
    size_t cache = weights / 2;
    if (cache > QL_QWEIGHTS_CACHE_BYTES)
        cache = QL_QWEIGHTS_CACHE_BYTES;
    m->cache = s->opts.cache_bytes ? s->opts.cache_bytes : cache;
}

static void print_header(const ql_runner *s)
{
    if (s->opts.quiet)
        return;
    const ql_sweep *sw = s->sw;
    char budget[32];
    ql_format_bytes((double)s->mem.budget, budget, sizeof budget);
    fprintf(stderr,
            "sweep %s: %zu configs%s, %zu to run; model %s (%lld params), text %s: %lld "
            "chunks of %d tokens, %lld scored\n"
            "memory: budget %s; passes in groups of %d chunk%s; reference log-probs %s\n",
            sw->name, s->sum.n_configs, s->opts.shard.count > 1 ? " in this shard" : "", s->n_todo,
            sw->model, (long long)s->model->n_params, s->text_name, (long long)s->data.n_chunks,
            sw->ctx, (long long)ql_ppl_n_scored_total(&s->data), budget, s->mem.group,
            s->mem.group == 1 ? "" : "s",
            s->mem.keep_logp ? "held in memory" : "regenerated per config from the hidden states");
    if (s->n_head_siblings) {
        char held[32];
        ql_format_bytes((double)s->mem.keep_hidden, held, sizeof held);
        if (s->mem.keep_hidden)
            fprintf(stderr,
                    "shared blocks: %zu of the configs differ from an earlier one only in the "
                    "head: each computes its head alone on that one's hidden states (%s held)\n",
                    s->n_head_siblings, held);
        else
            fprintf(stderr,
                    "shared blocks: off (%s): %zu of the configs differ from an earlier one only "
                    "in the head, each runs its whole pass\n",
                    s->opts.no_share ? "--no-share" : "a pass's hidden states exceed the budget",
                    s->n_head_siblings);
    }
    if (s->n_family_siblings) {
        char held[32];
        ql_format_bytes((double)s->mem.keep_prefix, held, sizeof held);
        if (s->mem.keep_prefix)
            fprintf(stderr,
                    "shared prefixes: %zu of the configs differ from the one before them at most "
                    "in tensor_types and the head: each starts its pass at the first block whose "
                    "tensors differ, from that one's residual streams (%s held)\n",
                    s->n_family_siblings, held);
        else
            fprintf(stderr,
                    "shared prefixes: off (%s): %zu of the configs differ from the one before "
                    "them at most in tensor_types and the head, each runs its whole pass\n",
                    s->opts.no_share         ? "--no-share"
                    : s->sw->layer_metrics   ? "layer_metrics needs every block"
                    : s->model->hp.n_expert ? "a mixture of experts' routing needs every block"
                                             : "a pass's residual streams exceed the budget",
                    s->n_family_siblings);
    }
}

/* ------------------------------------------------------------------------- */
/* Configs that differ only in the head                                       */

/* SHA-256 of config c's canonical form with the head type left out: configs with the
 * same one differ at most in the head. */
static void headless_hash(const ql_config *c, char out[65])
{
    ql_config h = *c;
    h.head_type = QL_TYPE_SAME;
    char text[QL_CONFIG_TEXT_MAX];
    const int n = ql_config_to_string(&h, text, sizeof text);
    ql_sha256_hex(text, n > 0 && (size_t)n < sizeof text ? (size_t)n : strlen(text), out);
}

/* SHA-256 of config c's canonical form less its head type and tensor_types: configs with
 * the same one differ at most in the recipe and the head, and may share their first
 * blocks (prefix_key says whether they do). */
static void family_hash(const ql_config *c, char out[65])
{
    ql_config h = *c;
    h.head_type = QL_TYPE_SAME;
    h.tensor_types[0] = '\0';
    char text[QL_CONFIG_TEXT_MAX];
    const int n = ql_config_to_string(&h, text, sizeof text);
    ql_sha256_hex(text, n > 0 && (size_t)n < sizeof text ? (size_t)n : strlen(text), out);
}

/* SHA-256 of what a config's blocks 0..layer-1 compute from: hash (the config less what
 * the tensors' types already say, as its caller names it) and the type and exact columns
 * of every tensor before that block but the head's (the embedding's among them). "" for a
 * weight set read from a file (its bytes are the file's). */
static ql_status tensors_key(const char hash[65], const ql_qweights_result *q, int layer,
                             char out[65], ql_error *err)
{
    out[0] = '\0';
    if (q->file_model)
        return QL_OK;
    ql_strbuf text = {0};
    ql_strbuf_add(&text, "%s|blocks<%d", hash, layer);
    for (size_t i = 0; i < q->n_tensors; i++) {
        const ql_tensor_record *r = &q->tensors[i];
        if (ql_tensor_axis_of(r->tensor) != QL_TENSOR_HEAD &&
            ql_tensor_block(r->tensor, NULL) < layer)
            ql_strbuf_add(&text, "|%.*s=%d:%lld", QL_QUANT_NAME_MAX, r->tensor,
                          (int)r->used_type, (long long)r->outlier_cols);
    }
    const bool failed = text.failed;
    if (!failed)
        ql_sha256_hex(text.text, text.len, out);
    ql_strbuf_free(&text);
    return failed ? ql_error_set(err, QL_ENOMEM, "out of memory for a config's blocks key")
                  : QL_OK;
}

/* What decides a config's blocks: the config less its head type (the activation and K/V
 * roundings, the imatrix, the outlier split, the quantizer) and every tensor but the
 * head (a budget's solver may move the body's types with the head's). Two configs of one
 * key compute the same blocks. */
static ql_status body_key(const ql_config *c, const ql_qweights_result *q, char out[65],
                          ql_error *err)
{
    char hash[65];
    headless_hash(c, hash);
    return tensors_key(hash, q, INT_MAX, out, err);
}

/* What decides a config's blocks 0..layer-1: its family (family_hash) and its tensors
 * before that block. Two configs of one key compute the same residual streams entering
 * block `layer`. */
static ql_status prefix_key(const ql_config *c, const ql_qweights_result *q, int layer,
                            char out[65], ql_error *err)
{
    char hash[65];
    family_hash(c, hash);
    return tensors_key(hash, q, layer, out, err);
}

/* The first block whose tensors two configs of one family plan differently (the type
 * policy with each one's tensor_types, quant_policy.h), 0 when the embedding's differs or
 * a plan cannot be made, n_layer when only the head's or none does. A prediction, made
 * before the second config is built: prefix_key on its built weights decides. */
static int common_blocks(const ql_runner *s, const ql_config *a, const ql_config *b)
{
    const int n_layer = s->model->hp.n_layer;
    const ql_config *c[2] = {a, b};
    ql_quant_plan *plan[2] = {NULL, NULL};
    int common = 0;
    ql_error e;
    for (int i = 0; i < 2; i++) {
        ql_quant_overrides *rules = NULL;
        if (ql_config_overrides(c[i], &rules, &e))
            goto out;
        const ql_quant_config qc =
            ql_config_quant_request(c[i], rules, c[i]->imatrix_kind != QL_IMATRIX_NONE);
        const ql_status st = ql_quant_plan_build(s->model->gguf, &qc, &plan[i], &e);
        ql_quant_overrides_free(rules);
        if (st)
            goto out;
    }
    common = n_layer;
    for (int64_t i = 0; i < plan[0]->n && i < plan[1]->n && common > 0; i++) {
        const ql_quant_plan_entry *x = &plan[0]->entries[i], *y = &plan[1]->entries[i];
        if (x->used == y->used || ql_tensor_axis_of(x->name) == QL_TENSOR_HEAD)
            continue;
        const int block = ql_tensor_block(x->name, NULL);
        common = block < 0 ? 0 : block < common ? block : common;
    }
out:
    ql_quant_plan_free(plan[0]);
    ql_quant_plan_free(plan[1]);
    return common;
}

/* The members of the family of row k still to place, in run order (members[0..*n)): k
 * first, then the others by the first block they plan differently from k's, earliest
 * first, so that each can start where the one before it started or later (a config that
 * resumes at block L holds the streams from L on only); one per headless group (its head
 * siblings follow it). pt maps rows to sweep points. */
static void family_order(const ql_runner *s, const size_t *pt, size_t rows, size_t k,
                         const bool *placed, size_t *members, int *depth, size_t *n)
{
    const ql_config *base = &s->sw->points[pt[k]].config;
    *n = 0;
    for (size_t f = k; f < rows; f++) {
        if (placed[f] || strcmp(s->family[f], s->family[k]) != 0)
            continue;
        bool sibling = false;
        for (size_t m = 0; m < *n && !sibling; m++)
            sibling = strcmp(s->headless[members[m]], s->headless[f]) == 0;
        if (sibling)
            continue;
        const int d = f == k ? INT_MAX : common_blocks(s, base, &s->sw->points[pt[f]].config);
        size_t at = *n; /* insertion: stable, members[0] (INT_MAX) stays first */
        while (at > 1 && depth[at - 1] > d) {
            members[at] = members[at - 1];
            depth[at] = depth[at - 1];
            at--;
        }
        members[at] = f;
        depth[at] = d;
        (*n)++;
    }
}

/* The run order of this shard's configs (s->order, positions of s->rows as find_todo
 * makes them: the shard's points in index order): each followed by the later ones that
 * differ from it only in the head (n_head_siblings counts those), then by the later ones
 * of its family in family_order, each with its own head siblings (n_family_siblings counts
 * the family's members after the first). */
static ql_status plan_order(ql_runner *s, ql_error *err)
{
    const ql_sweep *sw = s->sw;
    const size_t n = sw->n_points ? sw->n_points : 1;
    s->order = calloc(n, sizeof *s->order);
    s->headless = calloc(n, sizeof *s->headless);
    s->family = calloc(n, sizeof *s->family);
    bool *placed = calloc(n, sizeof *placed);
    size_t *pt = calloc(n, sizeof *pt), *members = calloc(n, sizeof *members);
    int *depth = calloc(n, sizeof *depth);
    ql_status st = QL_OK;
    if (!s->order || !s->headless || !s->family || !placed || !pt || !members || !depth) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory for the config list");
        goto out;
    }
    size_t rows = 0;
    for (size_t i = 0; i < sw->n_points; i++)
        if (ql_shard_keeps(&s->opts.shard, i)) {
            pt[rows] = i;
            headless_hash(&sw->points[i].config, s->headless[rows]);
            family_hash(&sw->points[i].config, s->family[rows++]);
        }
    size_t at = 0;
    s->n_head_siblings = s->n_family_siblings = 0;
    for (size_t k = 0; k < rows; k++) {
        if (placed[k])
            continue;
        size_t n_members;
        family_order(s, pt, rows, k, placed, members, depth, &n_members);
        for (size_t m = 0; m < n_members; m++) {
            const size_t f = members[m];
            s->order[at++] = f;
            placed[f] = true;
            s->n_family_siblings += f != k;
            for (size_t j = f + 1; j < rows; j++)
                if (!placed[j] && strcmp(s->headless[j], s->headless[f]) == 0) {
                    s->order[at++] = j;
                    placed[j] = true;
                    s->n_head_siblings++;
                }
        }
    }
out:
    free(placed);
    free(pt);
    free(members);
    free(depth);
    return st;
}

static void held_body_drop(held_body *b)
{
    b->key[0] = '\0';
    free(b->layers);
    free(b->loads);
    b->layers = NULL;
    b->loads = NULL;
    b->n_layers = b->n_loads = 0;
}

/* ------------------------------------------------------------------------- */
/* One config                                                                 */

typedef struct {
    ql_run_metrics m;
    ql_chunk_record *chunks;
    ql_run_timing timing;
    const ql_qweights_result *q; /* the weight set, its tensor and activation records */
    ql_layer_record *layers;     /* (n_layer,) with layer_metrics or experts, else NULL */
    size_t n_layers;
    ql_expert_load_record *loads; /* a mixture of experts: (n_layer * n_expert,) */
    size_t n_loads;
    const char *body_of; /* the config whose held pass computed its blocks; NULL = its own */
    int shared_blocks;   /* how many of them (ql_run_result.shared_blocks) */
    char body_of_hash[65]; /* body_of's text when it came from the held prefix */
} config_result;

static void config_result_deinit(config_result *r)
{
    free(r->chunks);
    free(r->layers);
    free(r->loads);
    memset(r, 0, sizeof *r);
}

typedef struct {
    ql_runner *s;
    ql_progress progress;
    int config_set; /* the job's set that is the config (1 in lock-step with the reference) */
    float *capture; /* the heads' input of every chunk is copied here (held_body); NULL = not */
} pass_ctx;

/* A chunk's logits against the reference's log-probs. */
static ql_status score_chunk(void *ctx, int set, int64_t chunk, const float *hidden,
                             const float *logits, int64_t n_rows, ql_error *err)
{
    pass_ctx *p = ctx;
    if (set != p->config_set)
        return QL_OK;
    ql_runner *s = p->s;
    if (p->capture) {
        if (n_rows != s->data.n_scored)
            return ql_error_set(err, QL_EINVAL, "pass: chunk %lld has %lld output rows, not %d",
                                (long long)chunk, (long long)n_rows, s->data.n_scored);
        const size_t per_chunk = (size_t)n_rows * (size_t)s->model->hp.n_embd;
        memcpy(p->capture + (size_t)chunk * per_chunk, hidden, per_chunk * sizeof *hidden);
    }
    return ql_reference_score_chunk(s->ref, s->acc, chunk, logits, n_rows, err);
}

/* After each block in lock-step: the config's residual stream (set 1) against the
 * reference's (set 0) at the scored positions. */
static ql_status block_divergence(void *ctx, int layer, int64_t chunk, int64_t row0, int64_t n_rows,
                                  const float *const *x, ql_error *err)
{
    (void)chunk;
    ql_runner *s = ((pass_ctx *)ctx)->s;
    const int64_t n_embd = s->model->hp.n_embd;
    const int64_t skip = s->data.first > row0 ? s->data.first - row0 : 0;
    if (skip >= n_rows)
        return QL_OK;
    return ql_divergence_add(s->div, layer, x[1] + skip * n_embd, x[0] + skip * n_embd,
                             n_rows - skip, n_embd, err);
}

static void pass_progress(void *ctx, double tokens_done)
{
    pass_ctx *p = ctx;
    ql_progress_update(&p->progress, (int64_t)tokens_done,
                       p->s->eta_note[0] ? p->s->eta_note : NULL);
}

/* A malloc'd copy of bytes bytes at p; NULL for none (or out of memory). */
static void *copy_of(const void *p, size_t bytes)
{
    void *q = bytes ? malloc(bytes) : NULL;
    if (q)
        memcpy(q, p, bytes);
    return q;
}

/* The metrics of a pass scored into s->acc: the distribution's, the per-chunk sums and,
 * from the pass's accumulators or (shared blocks) from the held pass, the per-layer
 * divergence and the routing. */
static ql_status finish_pass(ql_runner *s, const held_body *from, config_result *r, ql_error *err)
{
    const ql_ppl_data *d = &s->data;
    ql_dist_metrics dm;
    ql_dist_acc_finish(s->acc, &dm);
    ql_status st = ql_dist_metrics_check_finite(&dm, err);
    if (st)
        return st;
        /* The metrics records.h says come from the distribution, field by field. */
#define QL_METRIC_FROM_DIST(name) r->m.name = (double)dm.name;
#define QL_METRIC_FROM_WEIGHTS(name)
#define QL_METRIC_FROM_ROUTING(name)
#define QL_METRIC_FROM_OVERLAP(name)
    QL_RUN_METRICS(QL_METRIC_BY_SOURCE)
#undef QL_METRIC_FROM_DIST
#undef QL_METRIC_FROM_WEIGHTS
#undef QL_METRIC_FROM_ROUTING
#undef QL_METRIC_FROM_OVERLAP

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
    if (!s->div && !s->routing)
        return QL_OK;
    const ql_hparams *hp = &s->model->hp;
    ql_routing_metrics rm = {
        .route_agree = (double)NAN, .route_overlap = (double)NAN, .load_shift = (double)NAN};
    if (from) {
        r->n_layers = from->n_layers;
        r->n_loads = from->n_loads;
        r->layers = copy_of(from->layers, from->n_layers * sizeof *r->layers);
        r->loads = copy_of(from->loads, from->n_loads * sizeof *r->loads);
        if ((from->n_layers && !r->layers) || (from->n_loads && !r->loads))
            return ql_error_set(err, QL_ENOMEM, "out of memory for the layer metrics");
            /* The metrics records.h says come from the routing, field by field. */
#define QL_METRIC_FROM_DIST(name)
#define QL_METRIC_FROM_WEIGHTS(name)
#define QL_METRIC_FROM_ROUTING(name) r->m.name = from->m.name;
#define QL_METRIC_FROM_OVERLAP(name)
        QL_RUN_METRICS(QL_METRIC_BY_SOURCE)
#undef QL_METRIC_FROM_DIST
#undef QL_METRIC_FROM_WEIGHTS
#undef QL_METRIC_FROM_ROUTING
#undef QL_METRIC_FROM_OVERLAP
        return QL_OK;
    }
    r->n_layers = (size_t)hp->n_layer;
    if (!(r->layers = calloc(r->n_layers, sizeof *r->layers)))
        return ql_error_set(err, QL_ENOMEM, "out of memory for the layer metrics");
    for (size_t l = 0; l < r->n_layers; l++)
        r->layers[l] = (ql_layer_record){.layer = (int32_t)l,
                                         .rel_err_mean = (double)NAN,
                                         .rel_err_p99 = (double)NAN,
                                         .cos_mean = (double)NAN,
                                         .route_agree = (double)NAN,
                                         .route_overlap = (double)NAN,
                                         .load_shift = (double)NAN};
    if (s->div)
        ql_divergence_finish(s->div, r->layers);
    if (s->routing) {
        r->loads = calloc((size_t)hp->n_layer * (size_t)hp->n_expert, sizeof *r->loads);
        if (!r->loads)
            return ql_error_set(err, QL_ENOMEM, "out of memory for the expert loads");
        ql_routing_acc_finish(s->routing, &rm, r->layers, r->loads, &r->n_loads);
    }
    /* The metrics records.h says come from the routing, field by field. */
#define QL_METRIC_FROM_DIST(name)
#define QL_METRIC_FROM_WEIGHTS(name)
#define QL_METRIC_FROM_ROUTING(name) r->m.name = rm.name;
#define QL_METRIC_FROM_OVERLAP(name)
    QL_RUN_METRICS(QL_METRIC_BY_SOURCE)
#undef QL_METRIC_FROM_DIST
#undef QL_METRIC_FROM_WEIGHTS
#undef QL_METRIC_FROM_ROUTING
#undef QL_METRIC_FROM_OVERLAP
    return QL_OK;
}

/* How a pass shares with the configs around it: from block resume_layer on only, from
 * the held prefix's streams (0: every block); the streams entering block capture_layer
 * copied into the held prefix for the next config (0: not); the heads' input of every
 * chunk copied into capture_hidden (NULL: not). */
typedef struct {
    int resume_layer, capture_layer;
    float *capture_hidden;
} pass_sharing;

/* The quantized pass over every chunk, scored against the reference, shared as sh says. */
static ql_status run_pass(ql_runner *s, ql_weights *w, const ql_attn_rounding *kv,
                          const char *label, const pass_sharing *sh, config_result *r,
                          ql_error *err)
{
    const ql_ppl_data *d = &s->data;
    ql_dist_acc_reset(s->acc);
    const bool lockstep = s->div != NULL;
    pass_ctx p = {.s = s, .config_set = lockstep ? 1 : 0, .capture = sh->capture_hidden};
    const int64_t tokens = d->n_chunks * (int64_t)(d->ctx - 1);
    ql_progress_begin(&p.progress, label, "tok", tokens, s->opts.quiet);
    ql_sched_job job = {.data = d,
                        .n_chunks = d->n_chunks,
                        .group = s->mem.group,
                        .n_sets = 1,
                        .on_output = score_chunk,
                        .progress = pass_progress,
                        .ctx = &p,
                        .capture_layer = sh->capture_layer,
                        .capture = sh->capture_layer ? s->prefix.streams : NULL,
                        .resume_layer = sh->resume_layer,
                        .resume = sh->resume_layer ? s->prefix.streams : NULL};
    QL_ASSERT(!lockstep || (!sh->capture_layer && !sh->resume_layer));
    if (lockstep) {
        /* The reference's blocks beside the config's, for the divergence after each;
         * its output is the cached reference's, so it needs no head. */
        ql_divergence_reset(s->div);
        job.n_sets = 2;
        job.on_block = block_divergence;
        job.sets[0] = (ql_sched_set){.w = s->model->weights, .head = false};
    }
    job.sets[job.n_sets - 1] = (ql_sched_set){.w = w,
                                              .rounding = kv,
                                              .head = true,
                                              .route = s->routing ? ql_routing_acc_observe : NULL,
                                              .route_ctx = s->routing};
    if (s->routing)
        ql_routing_acc_reset(s->routing);
    double t0 = ql_now();
    ql_status st = ql_sched_run(s->sched, s->fw, &job, err);
    if (st)
        return st;
    r->timing.forward_seconds = r->timing.forward_alone_seconds = ql_now() - t0;
    ql_progress_end(&p.progress, tokens, NULL);
    return finish_pass(s, NULL, r, err);
}

/* The config's head alone on the held pass's hidden states (its blocks are that pass's),
 * scored against the reference. */
static ql_status run_heads(ql_runner *s, ql_weights *w, const char *label, config_result *r,
                           ql_error *err)
{
    const ql_ppl_data *d = &s->data;
    ql_dist_acc_reset(s->acc);
    pass_ctx p = {.s = s};
    const int64_t tokens = d->n_chunks * (int64_t)(d->ctx - 1);
    ql_progress_begin(&p.progress, label, "tok", tokens, s->opts.quiet);
    ql_sched_job job = {.data = d,
                        .n_chunks = d->n_chunks,
                        .group = 1,
                        .n_sets = 1,
                        .on_output = score_chunk,
                        .progress = pass_progress,
                        .ctx = &p};
    job.sets[0] = (ql_sched_set){.w = w, .head = true};
    double t0 = ql_now();
    ql_status st = ql_sched_run_heads(s->sched, s->fw, &job, s->body.hidden, err);
    if (st)
        return st;
    r->timing.forward_seconds = ql_now() - t0;
    r->timing.forward_alone_seconds = s->body.forward_seconds;
    r->body_of = s->body.config_hash;
    r->shared_blocks = s->model->hp.n_layer;
    ql_progress_end(&p.progress, tokens, NULL);
    return finish_pass(s, &s->body, r, err);
}

/* Holds the pass of config c (its hidden states are in s->body.hidden) for the configs
 * after it that share its blocks. */
static ql_status hold_body(ql_runner *s, const ql_sweep_point *pt, const char *key,
                           const config_result *r, ql_error *err)
{
    held_body *b = &s->body;
    held_body_drop(b);
    b->layers = copy_of(r->layers, r->n_layers * sizeof *r->layers);
    b->loads = copy_of(r->loads, r->n_loads * sizeof *r->loads);
    if ((r->n_layers && !b->layers) || (r->n_loads && !b->loads)) {
        held_body_drop(b);
        return ql_error_set(err, QL_ENOMEM, "out of memory for a pass's layer metrics");
    }
    b->n_layers = r->n_layers;
    b->n_loads = r->n_loads;
    b->m = r->m;
    b->forward_seconds = r->timing.forward_alone_seconds; /* its whole pass, even resumed */
    ql_strlcpy(b->config_hash, pt->hash, sizeof b->config_hash);
    ql_strlcpy(b->key, key, sizeof b->key);
    return QL_OK;
}

/* One config: its quantized weights (qweights.h), the quantized pass with the config's
 * K/V type, and the metrics against the reference. */
/* ------------------------------------------------------------------------- */
/* Calibration/evaluation overlap                                             */

/* Both orders of the calibration sequences against the evaluated tokens. */
static ql_status measure_overlap(const ql_runner *s, const int32_t *const *seqs,
                                 const int64_t *lens, size_t n, ql_overlap_metrics *m,
                                 ql_error *err)
{
    /* The evaluated tokens: the chunks the passes read, as the text has them. */
    const int32_t *eval = s->data.tokens;
    const int64_t n_eval = s->data.n_chunks * s->data.ctx;
    static const int orders[2] = {QL_OVERLAP_SHORT, QL_OVERLAP_LONG};
    double *out[2] = {&m->calib_overlap_8, &m->calib_overlap_32};
    for (int k = 0; k < 2; k++) {
        ql_ngram_set set;
        ql_status st = ql_ngram_set_build(&set, orders[k], seqs, lens, n, err);
        if (st)
            return st;
        *out[k] = ql_ngram_share(&set, eval, n_eval);
        ql_ngram_set_deinit(&set);
    }
    return QL_OK;
}

/* Whether path is a GGUF file (its magic): the imatrix form that names its datasets. */
static bool is_gguf_file(const char *path)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    char magic[4] = {0};
    const bool yes = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    if (f)
        fclose(f);
    return yes;
}

/* An imatrix file's calibration texts: the datasets its GGUF form names, each read
 * and tokenized whole. NAN figures (unknown) for a legacy .dat file (it names no
 * dataset), a GGUF file that names none, or a name qlab cannot find as a text. */
static ql_status file_overlap(const ql_runner *s, const ql_imatrix *im, ql_overlap_metrics *m,
                              ql_error *err)
{
    if (!im || !im->n_datasets || !is_gguf_file(im->path))
        return QL_OK;
    const size_t n = (size_t)im->n_datasets;
    int32_t **toks = calloc(n, sizeof *toks);
    int64_t *lens = calloc(n, sizeof *lens);
    ql_status st = toks && lens ? QL_OK : ql_error_set(err, QL_ENOMEM, "out of memory");
    bool found = true;
    for (size_t k = 0; k < n && !st && found; k++) {
        char path[QL_PATH_MAX];
        ql_error ferr;
        if (ql_data_find_in(s->sw->dir, "text", im->datasets[k], path, sizeof path, &ferr)) {
            found = false;
            break;
        }
        char *text;
        size_t len;
        if ((st = ql_file_read_all(path, &text, &len, err)))
            break;
        st = ql_tokenize(s->tok, text, len, true, &toks[k], &lens[k], err);
        free(text);
        if (st)
            ql_error_prefix(err, "%s: ", path);
    }
    if (!st && found)
        st = measure_overlap(s, (const int32_t *const *)toks, lens, n, m, err);
    for (size_t k = 0; toks && k < n; k++)
        free(toks[k]);
    free(toks);
    free(lens);
    return st;
}

/* The overlap of c's calibration text (its calib: imatrix, whose text a kld fit's
 * sensitivities are measured on too, or the datasets its imatrix file names) with the
 * evaluated text; NAN figures for imatrix none and for an unknown text. Measured once
 * per calibration source. */
static ql_status config_overlap(ql_runner *s, const ql_config *c, const ql_calib_slot *slot,
                                ql_overlap_metrics *m, ql_error *err)
{
    m->calib_overlap_8 = m->calib_overlap_32 = (double)NAN;
    if (c->imatrix_kind == QL_IMATRIX_NONE)
        return QL_OK;
    char key[sizeof s->overlaps[0].key];
    snprintf(key, sizeof key, "%s:%s", c->imatrix_kind == QL_IMATRIX_CALIB ? "calib" : "file",
             c->imatrix);
    for (size_t i = 0; i < s->n_overlaps; i++)
        if (strcmp(s->overlaps[i].key, key) == 0) {
            *m = s->overlaps[i].m;
            return QL_OK;
        }
    ql_status st;
    if (c->imatrix_kind == QL_IMATRIX_CALIB) {
        ql_ppl_data d;
        char sha[65];
        if ((st = ql_calib_config_text(s->calib, c, &d, sha, err)))
            return st;
        /* What the calibration pass read: its chunks, as the text has them. */
        const int32_t *seqs[1] = {d.tokens};
        const int64_t lens[1] = {d.n_chunks * d.ctx};
        st = measure_overlap(s, seqs, lens, 1, m, err);
        ql_ppl_data_deinit(&d);
    } else {
        st = file_overlap(s, ql_calib_slot_imatrix(slot), m, err);
    }
    if (st)
        return st;
    if (!ql_grow((void **)&s->overlaps, &s->cap_overlaps, s->n_overlaps + 1, sizeof *s->overlaps))
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    ql_strlcpy(s->overlaps[s->n_overlaps].key, key, sizeof key);
    s->overlaps[s->n_overlaps++].m = *m;
    return QL_OK;
}

/* The calibration of the configs' weights and the kld objective's measurements are the
 * run that owns the model's. */
static ql_sens_source *sens_of(ql_runner *s)
{
    return s->owner ? &s->owner->sens : &s->sens;
}

/* Config c's quantized weights (the same for every text) into q, with its K/V rounding;
 * a kld fit's KLD on its calibration text. */
static ql_status build_config(ql_runner *s, const ql_config *c, ql_calib_slot *slot,
                              ql_qweights_result *q, ql_attn_rounding *kv, ql_error *err)
{
    ql_status st =
        ql_kv_rounding(ql_kv_ggml_type(ql_config_kv_type(c)), s->model->hp.head_dim, kv, err);
    if (!st)
        st = ql_qweights_build(s->qw, s->calib, c, slot, q, err);
    /* A kld fit's prediction with its interactions: the config on its calibration text. */
    if (!st && c->objective == QL_OBJECTIVE_KLD)
        st = ql_sens_calib_kld(sens_of(s), c, q->weights, kv, &q->calib_kld, err);
    return st;
}

/* What the config after this one may share of its pass (next_sharing). */
typedef struct {
    bool head;        /* it differs only in the head: hold the heads' input */
    int prefix_layer; /* it may share blocks 0..prefix_layer-1: hold the streams entering
                         that block (0: none) */
} next_sharing;

/* The pass of a config that may start from the held prefix (resume) and hold its own for
 * the next config (next->prefix_layer), with sh's other sharing. */
static ql_status run_prefixed_pass(ql_runner *s, const ql_sweep_point *pt,
                                   const ql_qweights_result *q, const ql_attn_rounding *kv,
                                   const char *label, const next_sharing *next, pass_sharing *sh,
                                   config_result *r, ql_error *err)
{
    held_prefix *hp = &s->prefix;
    const ql_config *c = &pt->config;
    char key[65] = "";
    ql_status st = QL_OK;
    if (hp->key[0] && !(st = prefix_key(c, q, hp->layer, key, err)) && key[0] &&
        strcmp(key, hp->key) == 0)
        sh->resume_layer = hp->layer;
    /* The streams the next config may start from, captured in place (a resumed pass reads
     * a chunk's streams before it writes them), so not before where this pass starts. */
    const int cap = next->prefix_layer;
    if (!st && cap > 0 && s->mem.keep_prefix && cap >= sh->resume_layer && !q->file_model) {
        if (!hp->streams && !(hp->streams = malloc(s->mem.keep_prefix)))
            return ql_error_set(err, QL_ENOMEM, "out of memory for a pass's residual streams");
        sh->capture_layer = cap;
    }
    if (st)
        return st;
    if (sh->resume_layer) {
        ql_strlcpy(r->body_of_hash, hp->config_hash, sizeof r->body_of_hash);
        r->body_of = r->body_of_hash;
        r->shared_blocks = sh->resume_layer;
    }
    const double alone = hp->forward_alone_seconds;
    if (sh->capture_layer)
        hp->key[0] = '\0'; /* overwritten by this pass: valid again once it is done */
    if ((st = run_pass(s, q->weights, kv, label, sh, r, err)))
        return st;
    if (sh->resume_layer)
        r->timing.forward_alone_seconds = alone;
    if (sh->capture_layer) {
        if ((st = prefix_key(c, q, cap, hp->key, err)))
            return st;
        hp->layer = cap;
        ql_strlcpy(hp->config_hash, pt->hash, sizeof hp->config_hash);
        hp->forward_alone_seconds = r->timing.forward_alone_seconds;
    }
    return QL_OK;
}

/* Config pt's pass with its weights q (or, when the held pass computed the same blocks,
 * its head alone; or, when the held prefix is its first blocks', from there on; next:
 * what to hold for the config after it) and the metrics against the reference. */
static ql_status evaluate_config(ql_runner *s, const ql_sweep_point *pt,
                                 const ql_qweights_result *q, const ql_attn_rounding *kv,
                                 const ql_overlap_metrics *om, const char *label,
                                 const next_sharing *next, config_result *r, ql_error *err)
{
    const ql_config *c = &pt->config;
    double t0 = ql_now();
    ql_run_metrics_init(&r->m);
    ql_run_timing_init(&r->timing);
    r->q = q;
    char key[65] = "";
    ql_status st = QL_OK;
    if (s->body.key[0] || next->head)
        st = body_key(c, q, key, err);
    if (!st && key[0] && strcmp(key, s->body.key) == 0) {
        st = run_heads(s, q->weights, label, r, err);
    } else if (!st) {
        held_body_drop(&s->body);
        const bool hold = next->head && key[0] && s->mem.keep_hidden;
        if (hold && !s->body.hidden && !(s->body.hidden = malloc(s->mem.keep_hidden)))
            st = ql_error_set(err, QL_ENOMEM, "out of memory for a pass's hidden states");
        pass_sharing sh = {.capture_hidden = hold ? s->body.hidden : NULL};
        if (!st)
            st = run_prefixed_pass(s, pt, q, kv, label, next, &sh, r, err);
        if (!st && hold)
            st = hold_body(s, pt, key, r, err);
    }
    if (st)
        return st;
        /* The metrics records.h says come from the weights, field by field. */
#define QL_METRIC_FROM_DIST(name)
#define QL_METRIC_FROM_WEIGHTS(name) r->m.name = q->name;
#define QL_METRIC_FROM_ROUTING(name)
#define QL_METRIC_FROM_OVERLAP(name) r->m.name = om->name;
    QL_RUN_METRICS(QL_METRIC_BY_SOURCE)
#undef QL_METRIC_FROM_DIST
#undef QL_METRIC_FROM_WEIGHTS
#undef QL_METRIC_FROM_ROUTING
#undef QL_METRIC_FROM_OVERLAP
    r->timing.ref_seconds = ql_reference_seconds(s->ref);
    r->timing.seconds = ql_now() - t0;
    return QL_OK;
}

/* ------------------------------------------------------------------------- */
/* Sweep set-up                                                               */

/* The model, its identity and its tokenizer. */
static ql_status open_model(ql_runner *s, ql_error *err)
{
    const ql_sweep *sw = s->sw;
    const ql_data_entry *me = NULL;
    /* Every file the sweep names is there (its line and the path looked at when not),
     * before a synthetic model is made or a file hashed. */
    ql_status st = ql_sweep_check_inputs(sw, err);
    if (st)
        return st;
    if (ql_synth_is_spec(sw->model) &&
        (st = ql_synth_materialize(sw->model, s->cache_dir, s->model_path, sizeof s->model_path,
                                   err)))
        return ql_error_prefix(err, "%s: model: ", sw->path);
    if (!ql_synth_is_spec(sw->model) &&
        (st = ql_sweep_resolve(sw, QL_SWEEP_MODEL, s->model_path, sizeof s->model_path, &me, err)))
        return st;
    if ((st = ql_data_sha256(me, s->model_path, s->model_sha, err)))
        return st;
    if ((st = ql_model_load(&s->model, s->model_path, err)))
        return st;
    /* A split set is the model: every file of it is in its identity. */
    if (s->model->gguf->n_files > 1 && (st = ql_gguf_sha256(s->model->gguf, s->model_sha, err)))
        return st;
    /* A sweep measures quantizations against the unquantized model: a quantized file as
     * the reference would be quantized again and reported as "unquantized". */
    const ql_linear *q = ql_model_first_quantized(s->model);
    if (q)
        return ql_error_set(err, QL_EINVAL,
                            "%s: model %s is quantized (%s is %s): give the unquantized source "
                            "model as `model` and the quantized file as a config",
                            sw->path, s->model_path, q->name, ql_type_name(q->src_type));
    if ((st = ql_tokenizer_from_gguf(&s->tok, s->model->gguf, err)))
        return st;
    char ctx_warning[256];
    if (ql_ppl_ctx_beyond_training(&s->model->hp, sw->ctx, ctx_warning, sizeof ctx_warning))
        fprintf(stderr, "qlab: warning: %s: %s: %s\n", sw->path, s->model_path, ctx_warning);
    return QL_OK;
}

/* The evaluated text (the sweep's selected one), in chunks. */
static ql_status open_text(ql_runner *s, ql_error *err)
{
    const ql_sweep *sw = s->sw;
    const ql_data_entry *te = NULL;
    ql_strlcpy(s->text_name, sw->text, sizeof s->text_name);
    ql_status st = ql_sweep_resolve(sw, QL_SWEEP_TEXT, s->text_path, sizeof s->text_path, &te, err);
    if (st)
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
    return QL_OK;
}

static ql_status open_store(ql_runner *s, ql_error *err)
{
    char dir[QL_PATH_MAX];
    ql_strlcpy(dir, s->db_path, sizeof dir);
    ql_status st = ql_make_dirs(dirname(dir), err);
    if (st)
        return st;
    ql_store_options so = {.busy_timeout_ms = s->opts.busy_timeout_ms,
                           .lock_patience_ms = s->opts.lock_patience_ms};
    if ((st = ql_store_open(s->db_path, &so, &s->store, err)))
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
    d.name = s->text_name;
    d.path = s->text_path;
    d.bytes = s->text_bytes;
    d.tokens = s->data.n_tokens;
    d.tokens_model = s->model_id;
    return ql_store_upsert_dataset(s->store, &d, &s->dataset_id, err);
}

/* ------------------------------------------------------------------------- */
/* The summary printed at the end                                            */

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

/* What the figures of a config warn about (the calibration text overlapping the evaluated
 * one, or unknown; a reference beaten beyond its interval), one line each, into f; returns
 * the count of each kind. */
static void config_warnings(const ql_runner *s, const summary_row *r, FILE *f, size_t *overlapping,
                            size_t *beaten)
{
    const ql_config *c = &s->sw->points[r->index].config;
    const double o32 = r->metric[QL_METRIC_calib_overlap_32];
    char why[160];
    if (ql_overlap_flagged(o32)) {
        ql_overlap_flag_text(o32, why, sizeof why);
        if (f)
            fprintf(f, "warning: config %zu (%s): %s (8-grams %.1f%%)\n", r->index, r->label, why,
                    100.0 * r->metric[QL_METRIC_calib_overlap_8]);
        ++*overlapping;
    } else if (f && c->imatrix_kind == QL_IMATRIX_FILE && isnan(o32) &&
               strcmp(r->status, "ok") == 0) {
        fprintf(f, "note: config %zu (%s): %s\n", r->index, r->label, QL_OVERLAP_UNKNOWN_TEXT);
    }
    const double lr = r->metric[QL_METRIC_ln_ppl_ratio], le = r->metric[QL_METRIC_ln_ppl_ratio_err];
    if (ql_beats_reference(lr, le)) {
        if (f)
            fprintf(f,
                    "warning: config %zu (%s): PPL %.4f is below the reference's %.4f beyond its "
                    "interval (ln PPL ratio %+.4f ± %.4f); %s\n",
                    r->index, r->label, r->metric[QL_METRIC_ppl], r->metric[QL_METRIC_ppl_ref], lr,
                    le, QL_BEATEN_HINT);
        ++*beaten;
    }
}

static void print_warnings(const summary_row *rows, size_t n, const ql_runner *s)
{
    size_t o = 0, b = 0;
    for (size_t i = 0; i < n; i++)
        config_warnings(s, &rows[i], stdout, &o, &b);
}

/* Counts the warnings of the rows into the summary (for --strict). */
static void count_warnings(ql_runner *s)
{
    s->sum.n_overlapping = s->sum.n_beaten = 0;
    for (size_t i = 0; i < s->n_rows; i++)
        config_warnings(s, &s->rows[i], NULL, &s->sum.n_overlapping, &s->sum.n_beaten);
}

static void print_summary(const summary_row *rows, size_t n, const ql_run_summary *sum,
                          const ql_runner *s)
{
    if (s->opts.no_summary)
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
    /* What this sweep left undone: configs still to do that no process finished (an
     * interrupt, a job that died), the interrupted ones among them. */
    size_t not_run = 0, interrupted = 0;
    for (size_t i = 0; i < n; i++) {
        const bool stopped = strcmp(rows[i].status, "interrupted") == 0;
        interrupted += stopped;
        not_run += stopped || strcmp(rows[i].status, "not run") == 0;
    }
    char elsewhere[64] = "", left[64] = "";
    if (sum->n_elsewhere)
        snprintf(elsewhere, sizeof elsewhere, ", %zu left to another process", sum->n_elsewhere);
    if (not_run)
        snprintf(left, sizeof left, ", %zu not run", not_run);
    char on_text[QL_PATH_MAX + 16] = "";
    if (s->sw->n_texts > 1)
        snprintf(on_text, sizeof on_text, " on text %s", s->text_name);
    printf("\nsweep %s%s: %zu config%s (%zu run, %zu already done, %zu failed%s%s), %lld scored "
           "tokens per pass\n",
           s->sw->name, on_text, sum->n_configs, sum->n_configs == 1 ? "" : "s", sum->n_run,
           sum->n_skipped, sum->n_failed, elsewhere, left, (long long)sum->scored_tokens);
    if (not_run) {
        const int sig = ql_interrupted();
        char why[96] = "stopped";
        if (sig)
            snprintf(why, sizeof why, "interrupted (%s)",
                     sig == SIGINT    ? "SIGINT"
                     : sig == SIGTERM ? "SIGTERM"
                                      : "a signal");
        char marked[96] = "";
        if (interrupted)
            snprintf(marked, sizeof marked,
                     " (%zu of them stopped in progress, marked interrupted)", interrupted);
        printf("%s: %zu config%s stored by this sweep, %zu not run%s; the same command resumes\n",
               why, sum->n_run + sum->n_failed, sum->n_run + sum->n_failed == 1 ? "" : "s", not_run,
               marked);
    }
    if (sum->n_shared || sum->n_prefix_shared)
        printf("shared blocks: %zu config%s computed only the head on the pass of a config "
               "differing only in the head, %zu started at a later block from a config's "
               "residual streams: the quantized passes took %.1f s, %.1f s alone\n",
               sum->n_shared, sum->n_shared == 1 ? "" : "s", sum->n_prefix_shared,
               sum->forward_seconds, sum->forward_alone_seconds);
    double per_pass = sum->n_run ? sum->forward_seconds / (double)sum->n_run : (double)NAN;
    if (s->ref && !ql_reference_from_cache(s->ref) && !sum->n_run)
        printf("timing: reference pass %s; no config ran\n", ref);
    else if (s->ref && !ql_reference_from_cache(s->ref))
        printf("timing: reference pass %s; %zu quantized passes %s (forward %.1f s each, %.2f "
               "reference passes each): %zu configs cost %.1f reference passes\n",
               ref, sum->n_run, cfg, per_pass, per_pass / sum->ref_seconds, sum->n_run,
               (sum->ref_seconds + sum->configs_seconds) / sum->ref_seconds);
    else if (sum->n_run)
        printf("timing: reference %s; %zu quantized passes %s (forward %.1f s each)\n",
               s->ref ? "loaded from cache" : "not needed", sum->n_run, cfg, per_pass);
    else if (s->n_todo == 0)
        printf("timing: nothing to run (every config was done before)\n");
    else /* configs to do, none of them run here: failed, stopped, or another's */
        printf("timing: reference %s; no config ran to the end\n",
               s->ref ? "loaded from cache" : "not computed");
    print_warnings(rows, n, s);
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

/* ------------------------------------------------------------------------- */
/* Runs stored by other processes                                            */

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
static const ql_store_run_state *finished_run(const ql_runner *s, size_t i,
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
static ql_status run_states(ql_runner *s, ql_store_run_state **out, size_t *n, ql_error *err)
{
    return ql_store_run_states(s->store, s->model_sha, s->text_sha, s->sw->ctx,
                               (int)s->data.n_chunks, out, n, err);
}

/* ------------------------------------------------------------------------- */
/* The steps                                                                  */

static void default_paths(ql_runner *s)
{
    ql_strlcpy(s->db_path, s->opts.db_path ? s->opts.db_path : "results/qlab.db",
               sizeof s->db_path);
    if (s->opts.cache_dir) {
        ql_strlcpy(s->cache_dir, s->opts.cache_dir, sizeof s->cache_dir);
    } else {
        char dir[QL_PATH_MAX];
        ql_strlcpy(dir, s->db_path, sizeof dir);
        snprintf(s->cache_dir, sizeof s->cache_dir, "%s/cache", dirname(dir));
    }
}

/* The rows of this shard's configs and which of them are still to do; done ones are
 * recorded as members of this sweep. */
static ql_status find_todo(ql_runner *s, ql_error *err)
{
    const ql_sweep *sw = s->sw;
    s->todo = calloc(sw->n_points ? sw->n_points : 1, sizeof *s->todo);
    s->rows = calloc(sw->n_points ? sw->n_points : 1, sizeof *s->rows);
    if (!s->todo || !s->rows)
        return ql_error_set(err, QL_ENOMEM, "out of memory for the config list");
    bool varies[QL_AXIS_COUNT];
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        varies[a] = sw->n_values[a] > 1;
    for (size_t i = 0; i < sw->n_points; i++) {
        if (!ql_shard_keeps(&s->opts.shard, i))
            continue;
        s->sum.n_configs++;
        summary_row *row = &s->rows[s->n_rows++];
        summary_row_init(row, i);
        ql_config_short_label(&sw->points[i].config, varies, row->label, sizeof row->label);
        int64_t done = 0;
        ql_status st =
            ql_store_find_done(s->store, sw->points[i].hash, s->model_sha, s->text_sha, sw->ctx,
                               (int)s->data.n_chunks, QL_METRICS_VERSION, &done, err);
        if (st)
            return st;
        s->todo[i] = done == 0;
        if (done) {
            s->sum.n_skipped++;
            row->status = "done before";
            stored_row(s->store, done, row);
            if ((st = ql_store_add_to_sweep(s->store, sw->name, done, err)))
                return st;
        } else {
            s->n_todo++;
            row->status = "not run";
        }
    }
    return QL_OK;
}

/* A run of the sweep's selected text; with owner, borrowing owner's model-level parts
 * (ql_runner_open_text). */
static ql_status open_run(ql_runner **out, const ql_sweep *sw, const ql_run_opts *opts,
                          ql_runner *owner, ql_error *err)
{
    *out = NULL;
    ql_runner *s = calloc(1, sizeof *s);
    if (!s)
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    s->sw = sw;
    s->opts = *opts;
    s->owner = owner;
    default_paths(s);
    if (owner) {
        ql_strlcpy(s->model_path, owner->model_path, sizeof s->model_path);
        ql_strlcpy(s->model_sha, owner->model_sha, sizeof s->model_sha);
        s->model = owner->model;
        s->tok = owner->tok;
        s->fw = owner->fw;
        s->sched = owner->sched;
        s->calib = owner->calib;
        s->qw = owner->qw;
        s->metric_imatrix = owner->metric_imatrix;
    }
    /* What killed cache writes left (reference, imatrix, synthetic model). */
    size_t stale = ql_remove_stale_tmp(s->cache_dir, QL_RUN_STALE_TMP_SECONDS);
    if (stale && !opts->quiet)
        fprintf(stderr, "qlab: removed %zu stale temporary file%s of killed cache writes in %s\n",
                stale, stale == 1 ? "" : "s", s->cache_dir);
    ql_threads_set(opts->threads > 0 ? opts->threads : sw->threads);
    ql_status st = owner ? QL_OK : open_model(s, err);
    if (!st)
        st = open_text(s, err);
    if (!st && !owner) /* what the model decides about the configs, before anything runs */
        st = ql_sweep_check_model(sw, s->model->gguf, err);
    if (!st && !owner) /* the configs that are existing GGUF files: the same model's shapes */
        st = ql_sweep_check_files(sw, s->model, err);
    if (!st && !owner)
        st = ql_forward_alloc(&s->fw, &s->model->hp, sw->ctx, err);
    if (!st)
        st = plan_order(s, err);
    if (!st)
        plan_memory(s);
    if (!st && !owner) {
        ql_calib_source cs = {.model = s->model,
                              .tok = s->tok,
                              .model_sha = s->model_sha,
                              .cache_dir = s->cache_dir,
                              .ctx = sw->ctx,
                              .quiet = opts->quiet,
                              .mem_bytes = ql_mem_side(s->mem.budget),
                              .base_dir = sw->dir};
        st = ql_calib_alloc(&s->calib, &cs, err);
    }
    /* The imatrix that weighs every run's imatrix_err columns (calib.h). */
    if (!st && !owner)
        st = ql_calib_pick_metric_imatrix(s->calib, sw, &s->metric_imatrix, err);
    if (!st)
        st = open_store(s, err);
    if (!st && !owner)
        st = ql_sched_alloc(&s->sched, err);
    if (!st && !owner) {
        /* Texts evaluated together share the configs' weights: each refuses its own
         * calibration text (kld_calib_check), not the first's for all. */
        s->sens = (ql_sens_source){.model = s->model,
                                   .model_sha = s->model_sha,
                                   .eval_text_sha = opts->texts_together > 1 ? "" : s->text_sha,
                                   .cache_dir = s->cache_dir,
                                   .calib = s->calib,
                                   .store = s->store,
                                   .mem_bytes = ql_mem_side(s->mem.budget),
                                   .quiet = opts->quiet};
        ql_qweights_opts qo = {.model = s->model,
                               .model_sha = s->model_sha,
                               .cache_dir = s->cache_dir,
                               .metric_imatrix = s->metric_imatrix,
                               .cache_bytes = s->mem.cache,
                               .gptq_bytes = ql_mem_side(s->mem.budget),
                               .quiet = opts->quiet,
                               .sensitivities = ql_sens_fill_table,
                               .sens_ctx = &s->sens};
        st = ql_qweights_alloc(&s->qw, &qo, err);
    }
    if (!st)
        st = ql_dist_acc_alloc(&s->acc, ql_ppl_n_scored_total(&s->data), s->model->hp.n_vocab, err);
    if (!st && sw->layer_metrics)
        st = ql_divergence_alloc(&s->div, (int)s->model->hp.n_layer,
                                 ql_ppl_n_scored_total(&s->data), err);
    /* Which configs still need work: decided before the reference is computed, so a
     * finished sweep costs nothing. */
    if (!st)
        st = find_todo(s, err);
    if (st) {
        ql_runner_close(s);
        return st;
    }
    s->sum.scored_tokens = ql_ppl_n_scored_total(&s->data);
    print_header(s);
    *out = s;
    return QL_OK;
}

ql_status ql_runner_open(ql_runner **out, const ql_sweep *sw, const ql_run_opts *opts,
                         ql_error *err)
{
    return open_run(out, sw, opts, NULL, err);
}

ql_status ql_runner_open_text(ql_runner **out, const ql_sweep *sw, const ql_run_opts *opts,
                              ql_runner *owner, ql_error *err)
{
    return open_run(out, sw, opts, owner, err);
}

void ql_runner_close(ql_runner *s)
{
    if (!s)
        return;
    if (!s->owner) {
        ql_qweights_free(s->qw);
        ql_sched_free(s->sched);
        ql_forward_free(s->fw);
        ql_calib_free(s->calib);
        ql_tokenizer_free(s->tok);
        ql_model_free(s->model);
    }
    ql_dist_acc_free(s->acc);
    ql_divergence_free(s->div);
    ql_routing_acc_free(s->routing);
    ql_reference_free(s->ref);
    ql_ppl_data_deinit(&s->data);
    ql_store_close(s->store);
    free(s->todo);
    free(s->rows);
    free(s->order);
    free(s->headless);
    free(s->family);
    held_body_drop(&s->body);
    free(s->body.hidden);
    free(s->prefix.streams);
    free(s->overlaps);
    free(s);
}

size_t ql_runner_todo(const ql_runner *s)
{
    return s->n_todo;
}

const ql_run_summary *ql_runner_summary(ql_runner *s)
{
    count_warnings(s);
    return &s->sum;
}

const char *ql_runner_db_path(const ql_runner *s)
{
    return s->db_path;
}

const char *ql_runner_cache_dir(const ql_runner *s)
{
    return s->cache_dir;
}

ql_status ql_runner_prepare(ql_runner *s, ql_error *err)
{
    if (s->n_todo == 0 || s->ref)
        return QL_OK;
    ql_reference_opts ro = {.model_sha256 = s->model_sha,
                            .text_sha256 = s->text_sha,
                            .cache_dir = s->cache_dir,
                            .quiet = s->opts.quiet,
                            .group = s->mem.group,
                            .keep_bytes = s->mem.keep_logp};
    ql_status st =
        ql_reference_get(&s->ref, s->fw, s->sched, s->model->weights, &s->data, &ro, err);
    if (st)
        return st;
    s->sum.ref_seconds = ql_reference_seconds(s->ref);
    const ql_routes *routes = ql_reference_routes(s->ref);
    if (routes && (st = ql_routing_acc_alloc(&s->routing, routes, err)))
        return st;
    /* The calibration matrices, made once and cached for the configs (and for other
     * processes); a failure here is the config's, reported when it runs. */
    for (size_t i = 0; i < s->sw->n_points; i++) {
        ql_calib_slot *slot;
        ql_error cerr;
        if (s->todo[i])
            (void)ql_calib_config_imatrix(s->calib, &s->sw->points[i].config, &slot, &cerr);
    }
    return QL_OK;
}

/* The whole sweep's ETA from the configs evaluated so far, for the progress line. */
static void update_eta(ql_runner *s, double t_configs)
{
    const size_t evaluated = s->sum.n_run + s->sum.n_failed;
    s->eta_note[0] = '\0';
    if (evaluated == 0 || s->n_todo <= evaluated)
        return;
    char eta[32];
    ql_format_duration((ql_now() - t_configs) / (double)evaluated * (double)(s->n_todo - evaluated),
                       eta, sizeof eta);
    snprintf(s->eta_note, sizeof s->eta_note, "sweep ETA %s", eta);
}

/* Adds config i to the summary's interrupted configs. */
static void note_interrupted(ql_runner *s, size_t i, const summary_row *row)
{
    char *list = s->sum.interrupted;
    size_t len = strlen(list);
    snprintf(list + len, sizeof s->sum.interrupted - len, "%s%zu (%s)", len ? ", " : "", i,
             row->label);
}

/* After a store write of config i's run failed: whether to try again. A lock that
 * stayed taken through the store's waits (another process holds it for long) is waited
 * for again, saying so, until it is free or the sweep is interrupted: a computed config
 * is not given up for a lock. */
static bool still_locked(ql_runner *s, size_t i, const summary_row *row, const char *what,
                         const ql_error *err)
{
    if (!ql_store_busy(s->store) || ql_interrupted())
        return false;
    fprintf(stderr,
            "qlab: %s: config %zu (%s): storing its %s waits for the lock another process "
            "holds (%s); trying again (Ctrl-C stops the sweep)\n",
            s->db_path, i, row->label, what, err->msg);
    return true;
}

/* Claims config i's run on s's text (slot: its importance matrix, whose SHA-256 the run
 * records). *begun: this process runs it; otherwise another process did or does, which
 * the row records. */
static ql_status claim_config(ql_runner *s, size_t i, summary_row *row, ql_calib_slot *slot,
                              int64_t *run_id, bool *begun, ql_error *err)
{
    *begun = false;
    const ql_sweep_point *pt = &s->sw->points[i];
    int64_t config_id;
    ql_status st;
    do
        st = ql_store_upsert_config(s->store, &pt->config, &config_id, err);
    while (st && still_locked(s, i, row, "config", err));
    if (st)
        return st;
    ql_store_run_key key = {.config_id = config_id,
                            .model_id = s->model_id,
                            .dataset_id = s->dataset_id,
                            .ctx = s->sw->ctx,
                            .chunks = (int)s->data.n_chunks};
    ql_store_run_info info = {.sweep = s->sw->name,
                              .threads = ql_threads_get(),
                              .metrics_version = QL_METRICS_VERSION,
                              .imatrix_sha256 = ql_calib_slot_sha256(slot),
                              .blas_kernel = ql_gemm_kernel(),
                              .mem_budget = (int64_t)s->mem.budget,
                              .group_chunks = s->mem.group};
    ql_store_claim claim;
    do
        st = ql_store_claim_run(s->store, &key, &info, run_id, &claim, err);
    while (st && still_locked(s, i, row, "start", err));
    if (st)
        return st;
    if (claim != QL_CLAIM_BEGUN) {
        /* Another sweep on this store finished it since this one started, or runs it. */
        s->sum.n_elsewhere++;
        if (claim == QL_CLAIM_DONE) {
            row->status = "done by another process";
            stored_row(s->store, *run_id, row);
            return ql_store_add_to_sweep(s->store, s->sw->name, *run_id, err);
        }
        row->status = "running in another process";
        if (!s->opts.quiet)
            fprintf(stderr, "  %s: left to the other process running it\n", row->label);
        return QL_OK;
    }
    s->begun++;
    if (s->opts.on_run_begun)
        s->opts.on_run_begun(s->opts.on_run_begun_ctx, s->begun);
    *begun = true;
    return QL_OK;
}

/* Stores config i's run on s's text: done with every record of r, or failed with cerr,
 * or (cst QL_EINTERRUPTED, or any failure under a signal) interrupted, which returns
 * QL_EINTERRUPTED. t0: when the run began. */
static ql_status store_config(ql_runner *s, size_t i, summary_row *row, int64_t run_id, double t0,
                              ql_status cst, const ql_error *cerr, const config_result *r,
                              ql_error *err)
{
    ql_status st;
    if (cst == QL_EINTERRUPTED || (cst && ql_interrupted())) {
        /* Not the config's failure: it is retried by the next sweep. */
        char why[64];
        snprintf(why, sizeof why, "interrupted by signal %d", ql_interrupted());
        note_interrupted(s, i, row);
        row->status = "interrupted";
        st = ql_store_interrupt_run(s->store, run_id, why, ql_now() - t0, err);
        if (st)
            return ql_error_prefix(err,
                                   "config %zu (%s): interrupted, and its run could not be "
                                   "marked so (it stays 'running' until the next sweep takes it "
                                   "over): ",
                                   i, row->label);
        return ql_error_set(err, QL_EINTERRUPTED, "config %zu (%s): %s", i, row->label, why);
    }
    if (cst) {
        s->sum.n_failed++;
        row->status = "failed";
        fprintf(stderr, "qlab: config %zu (%s) failed: %s\n", i, row->label, cerr->msg);
        do
            st = ql_store_fail_run(s->store, run_id, cerr->msg, ql_now() - t0, err);
        while (st && still_locked(s, i, row, "failure", err));
        return st;
    }
    const ql_qweights_result *q = r->q;
    ql_run_result res = {.metrics = &r->m,
                         .tensors = q->tensors,
                         .n_tensors = q->n_tensors,
                         .chunks = r->chunks,
                         .n_chunks = (size_t)s->data.n_chunks,
                         .timing = &r->timing,
                         .acts = q->acts,
                         .n_acts = q->n_acts,
                         .layers = r->layers,
                         .n_layers = r->n_layers,
                         .loads = r->loads,
                         .n_loads = r->n_loads,
                         .experts = q->experts,
                         .n_experts = q->n_experts,
                         .body_of = r->body_of,
                         .shared_blocks = r->shared_blocks};
    do
        st = ql_store_finish_run_result(s->store, run_id, &res, err);
    while (st && still_locked(s, i, row, "result", err));
    if (st && !ql_store_busy(s->store)) {
        /* Not storable (a full disk, a damaged file): the run is failed with the
         * reason, not left running. */
        ql_error ferr;
        if (ql_store_fail_run(s->store, run_id, err->msg, ql_now() - t0, &ferr) == QL_OK)
            ql_error_prefix(err, "config %zu (%s): its run is marked failed: ", i, row->label);
    } else if (st) {
        ql_error_prefix(err,
                        "config %zu (%s) is computed but could not be stored (its run stays "
                        "'running' until the next sweep takes it over): ",
                        i, row->label);
    }
    s->sum.n_run++;
    s->sum.forward_seconds += r->timing.forward_seconds;
    s->sum.forward_alone_seconds += r->timing.forward_alone_seconds;
    s->sum.n_shared += r->body_of && r->shared_blocks == s->model->hp.n_layer;
    s->sum.n_prefix_shared += r->body_of && r->shared_blocks < s->model->hp.n_layer;
    row->status = "ok";
    if (!st)
        stored_row(s->store, run_id, row);
    if (!s->opts.quiet)
        fprintf(stderr, "  %s: bpw %.3f, PPL %.4f (ref %.4f), KLD %.3e, top-1 %.2f%%\n", row->label,
                r->m.bpw, r->m.ppl, r->m.ppl_ref, r->m.kld_mean, 100.0 * r->m.top1_agree);
    return st;
}

/* One text's part in running a config. */
typedef struct {
    bool begun; /* its run is this process's */
    int64_t run_id;
    double t0;
    ql_status cst; /* the config's failure on this text (stored as the run's) */
    ql_error cerr;
    ql_overlap_metrics om;
} text_part;

/* A config refused on s's text before its weights are built: its calibration overlapping
 * the evaluated text under --strict, or (texts evaluated together, sharing the weights)
 * a kld fit calibrated on the evaluated text. */
static ql_status refuse_on_text(ql_runner *s, const ql_config *c, ql_calib_slot *slot,
                                ql_overlap_metrics *om, ql_error *err)
{
    ql_status st = config_overlap(s, c, slot, om, err);
    if (!st && s->opts.strict && ql_overlap_flagged(om->calib_overlap_32)) {
        char why[128];
        ql_overlap_flag_text(om->calib_overlap_32, why, sizeof why);
        st = ql_error_set(err, QL_EINVAL, "refused under --strict: %s", why);
    }
    if (!st && c->objective == QL_OBJECTIVE_KLD && s->opts.texts_together > 1) {
        ql_ppl_data d;
        char sha[65];
        if (!(st = ql_calib_config_text(s->calib, c, &d, sha, err)))
            ql_ppl_data_deinit(&d);
        if (!st)
            st = ql_sens_check_calib_text(c, sha, s->text_sha, err);
    }
    return st;
}

/* Config i (row position k) on every text of runs that still needs it: its runs claimed,
 * its weights built once, then per text its pass and its run stored (done, failed or
 * interrupted); next[t]: what text t's next config can share of this pass. */
static ql_status run_config_texts(ql_runner **runs, size_t n, size_t i, size_t k,
                                  const next_sharing *next, ql_error *err)
{
    ql_runner *s0 = runs[0];
    const ql_sweep_point *pt = &s0->sw->points[i];
    text_part *parts = calloc(n, sizeof *parts);
    if (!parts)
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    /* The importance matrix is loaded before the runs begin so that they record which
     * one they used; failing to load it fails them. */
    ql_error slot_err;
    ql_error_clear(&slot_err);
    ql_calib_slot *slot = NULL;
    const ql_status slot_st = ql_calib_config_imatrix(s0->calib, &pt->config, &slot, &slot_err);
    ql_status st = QL_OK;
    ql_runner *builder = NULL; /* the first text evaluating the config */
    for (size_t t = 0; t < n && !st; t++) {
        ql_runner *s = runs[t];
        text_part *p = &parts[t];
        if (!s->todo[i])
            continue;
        st = claim_config(s, i, &s->rows[k], slot, &p->run_id, &p->begun, err);
        if (st || !p->begun)
            continue;
        p->t0 = ql_now();
        p->cst = slot_st;
        p->cerr = slot_err;
        if (!p->cst)
            p->cst = refuse_on_text(s, &pt->config, slot, &p->om, &p->cerr);
        if (!p->cst && !builder)
            builder = s;
    }
    ql_qweights_result q;
    memset(&q, 0, sizeof q);
    ql_attn_rounding kv;
    ql_error berr;
    ql_error_clear(&berr);
    double build_seconds = 0;
    ql_status bst = QL_OK;
    if (!st && builder) {
        const double tb = ql_now();
        bst = build_config(builder, &pt->config, slot, &q, &kv, &berr);
        build_seconds = ql_now() - tb;
    }
    bool first = true;
    for (size_t t = 0; t < n; t++) {
        ql_runner *s = runs[t];
        text_part *p = &parts[t];
        if (!p->begun)
            continue;
        if (st) /* a store error on another text: this one's run is not left running */
            p->cst = QL_EINTERRUPTED;
        if (!p->cst && bst) {
            p->cst = bst;
            p->cerr = berr;
        }
        config_result r;
        memset(&r, 0, sizeof r);
        if (!p->cst && ql_interrupted())
            p->cst = QL_EINTERRUPTED;
        if (!p->cst) {
            char label[256];
            snprintf(label, sizeof label, "config %zu/%zu %s%s%.48s", k + 1, s->sum.n_configs,
                     s->rows[k].label, n > 1 ? " on " : "", n > 1 ? s->text_name : "");
            p->cst = evaluate_config(s, pt, &q, &kv, &p->om, label, &next[t], &r, &p->cerr);
            /* The weights are built for the first text; the others reuse them. */
            r.timing.quantize_seconds = first ? q.quantize_seconds : 0.0;
            r.timing.seconds += first ? build_seconds : 0.0;
            first = false;
        }
        const ql_status rst =
            store_config(s, i, &s->rows[k], p->run_id, p->t0, p->cst, &p->cerr, &r, err);
        config_result_deinit(&r);
        s->sum.configs_seconds += ql_now() - p->t0;
        if (rst && !st)
            st = rst;
    }
    ql_qweights_result_deinit(&q);
    free(parts);
    return st;
}

/* What the configs after position `at` of s's run order that s still has to do can share
 * of row k's pass: the next one its blocks when it differs only in the head; the next one
 * that differs in more its first blocks when it is of the same family and plans them
 * alike (common_blocks). */
static next_sharing next_shares(const ql_runner *s, size_t at, size_t k)
{
    next_sharing n = {false, 0};
    bool first = true;
    for (size_t nx = at + 1; nx < s->n_rows; nx++) {
        const size_t kn = s->order[nx];
        if (!s->todo[s->rows[kn].index])
            continue;
        const bool head_sibling = strcmp(s->headless[kn], s->headless[k]) == 0;
        if (first)
            n.head = head_sibling && s->mem.keep_hidden;
        first = false;
        if (head_sibling)
            continue;
        if (s->mem.keep_prefix && strcmp(s->family[kn], s->family[k]) == 0) {
            const int l = common_blocks(s, &s->sw->points[s->rows[k].index].config,
                                        &s->sw->points[s->rows[kn].index].config);
            n.prefix_layer = l > 0 && l < s->model->hp.n_layer ? l : 0;
        }
        break;
    }
    return n;
}

ql_status ql_runner_configs_texts(ql_runner **runs, size_t n, ql_error *err)
{
    ql_status st = QL_OK;
    for (size_t t = 0; t < n && !st; t++)
        st = ql_runner_prepare(runs[t], err);
    next_sharing *share = calloc(n ? n : 1, sizeof *share);
    if (!st && !share)
        st = ql_error_set(err, QL_ENOMEM, "out of memory");
    const double t0 = ql_now();
    const ql_runner *s0 = runs[0];
    for (size_t at = 0; at < s0->n_rows && !st; at++) {
        const size_t k = s0->order[at], i = s0->rows[k].index;
        bool todo = false;
        for (size_t t = 0; t < n; t++)
            todo = todo || runs[t]->todo[i];
        if (!todo)
            continue;
        if (ql_interrupted()) {
            st = ql_error_set(err, QL_EINTERRUPTED, "interrupted by signal %d between configs",
                              ql_interrupted());
            break;
        }
        for (size_t t = 0; t < n; t++) {
            update_eta(runs[t], t0);
            share[t] = next_shares(runs[t], at, k);
        }
        st = run_config_texts(runs, n, i, k, share, err);
    }
    free(share);
    return st;
}

ql_status ql_runner_configs(ql_runner *s, ql_error *err)
{
    return ql_runner_configs_texts(&s, 1, err);
}

struct ql_runner_snapshot {
    ql_store_run_state *states;
    size_t n;
};

ql_status ql_runner_snapshot_take(ql_runner *s, ql_runner_snapshot **out, ql_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    ql_status st = run_states(s, &(*out)->states, &(*out)->n, err);
    if (st) {
        free(*out);
        *out = NULL;
    }
    return st;
}

void ql_runner_snapshot_free(ql_runner_snapshot *snap)
{
    if (!snap)
        return;
    free(snap->states);
    free(snap);
}

size_t ql_runner_finished_since(ql_runner *s, const ql_runner_snapshot *before)
{
    ql_store_run_state *now;
    size_t n_now, n = 0;
    ql_error e;
    if (run_states(s, &now, &n_now, &e) != QL_OK)
        return 0;
    for (size_t i = 0; i < s->sw->n_points; i++)
        n += s->todo[i] && finished_run(s, i, before->states, before->n, now, n_now) != NULL;
    free(now);
    return n;
}

ql_status ql_runner_collect(ql_runner *s, const ql_runner_snapshot *before, double configs_seconds,
                            ql_error *err)
{
    ql_store_run_state *now = NULL;
    size_t n_now = 0;
    ql_status st = run_states(s, &now, &n_now, err);
    if (st)
        return st;
    s->sum.configs_seconds += configs_seconds;
    for (size_t k = 0; k < s->n_rows; k++) {
        summary_row *row = &s->rows[k];
        if (!s->todo[row->index])
            continue;
        const ql_store_run_state *run =
            finished_run(s, row->index, before->states, before->n, now, n_now);
        ql_store_run_brief b;
        ql_error serr;
        const ql_store_run_state *now_run = find_state(now, n_now, s->sw->points[row->index].hash);
        const ql_store_run_state *was =
            find_state(before->states, before->n, s->sw->points[row->index].hash);
        if (!run && now_run && strcmp(now_run->status, "interrupted") == 0 &&
            (!was || now_run->attempts > was->attempts)) {
            row->status = "interrupted";
            note_interrupted(s, row->index, row);
        } else if (!run) {
            row->status = "not run";
        } else if (strcmp(run->status, "failed") == 0) {
            s->sum.n_failed++;
            row->status = "failed";
        } else {
            s->sum.n_run++;
            row->status = "ok";
            stored_row(s->store, run->run_id, row);
            if (ql_store_run_brief_get(s->store, run->run_id, &b, &serr) == QL_OK &&
                !isnan(b.forward_seconds))
                s->sum.forward_seconds += b.forward_seconds;
        }
    }
    free(now);
    return QL_OK;
}

void ql_runner_print(const ql_runner *s)
{
    print_summary(s->rows, s->n_rows, &s->sum, s);
}

void ql_run_summary_add(ql_run_summary *into, const ql_run_summary *part)
{
    into->n_configs += part->n_configs;
    into->n_run += part->n_run;
    into->n_skipped += part->n_skipped;
    into->n_failed += part->n_failed;
    into->n_elsewhere += part->n_elsewhere;
    into->n_overlapping += part->n_overlapping;
    into->n_beaten += part->n_beaten;
    if (part->interrupted[0])
        ql_strlcpy(into->interrupted, part->interrupted, sizeof into->interrupted);
    into->ref_seconds += part->ref_seconds;
    into->configs_seconds += part->configs_seconds;
    into->forward_seconds += part->forward_seconds;
    into->forward_alone_seconds += part->forward_alone_seconds;
    into->n_shared += part->n_shared;
    into->n_prefix_shared += part->n_prefix_shared;
    into->scored_tokens += part->scored_tokens;
}
