/* The compact reference: head inputs kept, log-probabilities regenerated (reference.h). */
#include "experiment/reference.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/data.h"
#include "base/progress.h"
#include "base/util.h"
#include "experiment/distribution.h"
#include "experiment/routing.h"

#define REF_MAGIC        "QLREF\0\0\2"
#define REF_VERSION      2
#define REF_HEADER_BYTES 256

struct ql_reference {
    const ql_ppl_data *d;
    ql_forward *fw;
    ql_weights *w;
    int64_t n_chunks;
    int n_scored;
    int64_t n_embd, n_vocab;
    float *hidden;     /* (n_chunks * n_scored, n_embd) */
    float *logp;       /* held: (n_chunks * n_scored, n_vocab); else one chunk's */
    bool holds_logp;   /* logp has every chunk */
    ql_routes *routes; /* a mixture of experts: the experts of every scored token, else NULL */
    double seconds;
    bool from_cache;
    char path[QL_PATH_MAX];
};

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t n_scored;
    int64_t n_chunks;
    int64_t n_embd;
    int64_t n_vocab;
    char key[64];
    char payload_sha256[64];
    uint64_t route_bytes; /* the routes after the targets (0: a dense model) */
    char pad[REF_HEADER_BYTES - 8 - 4 - 4 - 8 - 8 - 8 - 64 - 64 - 8];
} ref_header;

_Static_assert(sizeof(ref_header) == REF_HEADER_BYTES, "reference cache header is 256 bytes");

void ql_reference_free(ql_reference *r)
{
    if (!r)
        return;
    free(r->hidden);
    free(r->logp);
    ql_routes_free(r->routes);
    free(r);
}

const ql_routes *ql_reference_routes(const ql_reference *r)
{
    return r->routes;
}

static size_t rows_of(const ql_ppl_data *d)
{
    return (size_t)d->n_chunks * (size_t)d->n_scored;
}

size_t ql_reference_logp_bytes(const ql_ppl_data *d, int64_t n_vocab)
{
    return rows_of(d) * (size_t)n_vocab * sizeof(float);
}

static size_t hidden_bytes(const ql_ppl_data *d, int64_t n_embd)
{
    return rows_of(d) * (size_t)n_embd * sizeof(float);
}

static size_t targets_bytes(const ql_ppl_data *d)
{
    return rows_of(d) * sizeof(int32_t);
}

size_t ql_reference_file_bytes(const ql_ppl_data *d, int64_t n_embd)
{
    return REF_HEADER_BYTES + hidden_bytes(d, n_embd) + targets_bytes(d);
}

const float *ql_reference_hidden(const ql_reference *r, int64_t chunk)
{
    return r->hidden + (size_t)chunk * (size_t)r->n_scored * (size_t)r->n_embd;
}

double ql_reference_seconds(const ql_reference *r)
{
    return r->seconds;
}

bool ql_reference_from_cache(const ql_reference *r)
{
    return r->from_cache;
}

bool ql_reference_holds_logp(const ql_reference *r)
{
    return r->holds_logp;
}

/* A reference that is not finite is not a reference: every config would be NaN. */
static ql_status check_finite(const float *v, size_t n, int64_t chunk, const char *what,
                              ql_error *err)
{
    size_t bad = n;
#pragma omp parallel for schedule(static) reduction(min : bad) if (n >= 65536)
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]) && i < bad)
            bad = i;
    if (bad == n)
        return QL_OK;
    return ql_error_set(err, QL_EFORMAT,
                        "the reference model computes non-finite %s (chunk %lld): its weights "
                        "or hyper-parameters overflow the f32 forward pass",
                        what, (long long)chunk);
}

/* Log-softmax of each of n rows of n_vocab logits in place; rows in parallel. */
static void log_softmax_rows(float *rows, int64_t n, int64_t n_vocab)
{
#pragma omp parallel for schedule(static) if (n > 1)
    for (int64_t t = 0; t < n; t++)
        ql_log_softmax(rows + t * n_vocab, n_vocab, rows + t * n_vocab);
}

/* Chunk c's log-probs into out (n_scored, n_vocab): the reference head on its kept head
 * inputs — the product of the reference pass on the same rows, so the same logits. */
static ql_status compute_logp(ql_reference *r, int64_t c, float *out, ql_error *err)
{
    ql_matmul_observer obs;
    void *obs_ctx;
    ql_forward_get_observer(r->fw, &obs, &obs_ctx);
    ql_forward_set_observer(r->fw, NULL, NULL);
    ql_status st = ql_forward_head(r->fw, r->w, ql_reference_hidden(r, c), out, r->n_scored, err);
    ql_forward_set_observer(r->fw, obs, obs_ctx);
    if (st)
        return st;
    log_softmax_rows(out, r->n_scored, r->n_vocab);
    return check_finite(out, (size_t)r->n_scored * (size_t)r->n_vocab, c, "log-probabilities", err);
}

ql_status ql_reference_logp(ql_reference *r, int64_t chunk, const float **out, ql_error *err)
{
    QL_ASSERT(chunk >= 0 && chunk < r->n_chunks);
    const size_t per_chunk = (size_t)r->n_scored * (size_t)r->n_vocab;
    if (r->holds_logp) {
        *out = r->logp + (size_t)chunk * per_chunk;
        return QL_OK;
    }
    *out = NULL;
    ql_status st = compute_logp(r, chunk, r->logp, err);
    if (st)
        return ql_error_prefix(err, "reference head, chunk %lld: ", (long long)chunk);
    *out = r->logp;
    return QL_OK;
}

static void identity_key(const ql_reference_opts *o, const ql_ppl_data *d, int64_t n_embd,
                         int64_t n_vocab, char key[65])
{
    char id[512];
    snprintf(id, sizeof id,
             "qlab reference v%d\nmodel=%s\ntext=%s\nctx=%d\nchunks=%lld\nembd=%lld\n"
             "vocab=%lld\nweights=file act=f32 kv=f32\n",
             REF_VERSION, o->model_sha256, o->text_sha256, d->ctx, (long long)d->n_chunks,
             (long long)n_embd, (long long)n_vocab);
    ql_sha256_hex(id, strlen(id), key);
}

static size_t route_bytes(const ql_reference *r)
{
    return r->routes ? ql_routes_bytes(r->routes) : 0;
}

/* The payload's checksum: the hidden states, the targets, then the routes. */
static void payload_sha(const ql_reference *r, const int32_t *targets, char out[65])
{
    const size_t hb = hidden_bytes(r->d, r->n_embd), tb = targets_bytes(r->d);
    const size_t rb = route_bytes(r);
    unsigned char *buf = malloc(hb + tb + rb);
    if (!buf) {
        memset(out, '0', 64);
        out[64] = '\0';
        return;
    }
    memcpy(buf, r->hidden, hb);
    memcpy(buf + hb, targets, tb);
    if (rb)
        memcpy(buf + hb + tb, ql_routes_cdata(r->routes), rb);
    ql_sha256_hex(buf, hb + tb + rb, out);
    free(buf);
}

/* The targets of every chunk, in order. */
static int32_t *all_targets(const ql_ppl_data *d)
{
    int32_t *t = malloc(targets_bytes(d) ? targets_bytes(d) : 1);
    for (int64_t c = 0; t && c < d->n_chunks; c++)
        memcpy(t + (size_t)c * (size_t)d->n_scored, ql_ppl_chunk_targets(d, c),
               (size_t)d->n_scored * sizeof(int32_t));
    return t;
}

/* Reads a cache file that matches exactly into r->hidden; false (with a warning for a
 * damaged file) when it does not. */
static bool try_load(ql_reference *r, const char *key)
{
    FILE *f = fopen(r->path, "rb");
    if (!f)
        return false;
    const size_t want = ql_reference_file_bytes(r->d, r->n_embd) + route_bytes(r);
    ref_header h;
    int32_t *targets = malloc(targets_bytes(r->d) ? targets_bytes(r->d) : 1);
    int32_t *expect = all_targets(r->d);
    bool ok = targets && expect && fread(&h, sizeof h, 1, f) == 1 &&
              memcmp(h.magic, REF_MAGIC, 8) == 0 && h.version == REF_VERSION &&
              h.n_scored == (uint32_t)r->n_scored && h.n_chunks == r->n_chunks &&
              h.n_embd == r->n_embd && h.n_vocab == r->n_vocab && memcmp(h.key, key, 64) == 0 &&
              h.route_bytes == route_bytes(r);
    const char *why = NULL;
    if (ok) {
        /* From here on the file claims to be this reference: a mismatch is damage. */
        ok = fread(r->hidden, 1, hidden_bytes(r->d, r->n_embd), f) ==
                 hidden_bytes(r->d, r->n_embd) &&
             fread(targets, 1, targets_bytes(r->d), f) == targets_bytes(r->d) &&
             (!r->routes ||
              fread(ql_routes_data(r->routes), 1, route_bytes(r), f) == route_bytes(r)) &&
             fgetc(f) == EOF;
        if (!ok)
            why = "its size is not the header's";
        if (ok && r->routes && !ql_routes_valid(r->routes)) {
            ok = false;
            why = "an expert index is out of range";
        }
        if (ok && memcmp(targets, expect, targets_bytes(r->d)) != 0) {
            ok = false;
            why = "its target tokens are not the text's";
        }
        char sha[65];
        if (ok) {
            payload_sha(r, targets, sha);
            if (memcmp(sha, h.payload_sha256, 64) != 0) {
                ok = false;
                why = "its contents do not match their checksum";
            }
        }
    }
    fclose(f);
    free(targets);
    free(expect);
    if (why)
        fprintf(stderr,
                "qlab: warning: the reference cache %s is damaged (%s, %zu bytes expected); "
                "computing the reference again\n",
                r->path, why, want);
    return ok;
}

/* Writes the cache atomically; a failure only costs a recomputation later. */
static void save(const ql_reference *r, const char *key)
{
    char tmp[QL_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", r->path, (long)getpid());
    int32_t *targets = all_targets(r->d);
    FILE *f = targets ? fopen(tmp, "wb") : NULL;
    if (!f) {
        fprintf(stderr, "qlab: warning: cannot write the reference cache %s: %s\n", tmp,
                targets ? strerror(errno) : "out of memory");
        free(targets);
        return;
    }
    ref_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, REF_MAGIC, 8);
    h.version = REF_VERSION;
    h.n_scored = (uint32_t)r->n_scored;
    h.n_chunks = r->n_chunks;
    h.n_embd = r->n_embd;
    h.n_vocab = r->n_vocab;
    memcpy(h.key, key, 64);
    h.route_bytes = route_bytes(r);
    char sha[65];
    payload_sha(r, targets, sha);
    memcpy(h.payload_sha256, sha, 64);
    bool ok =
        fwrite(&h, sizeof h, 1, f) == 1 &&
        fwrite(r->hidden, 1, hidden_bytes(r->d, r->n_embd), f) == hidden_bytes(r->d, r->n_embd) &&
        fwrite(targets, 1, targets_bytes(r->d), f) == targets_bytes(r->d) &&
        (!r->routes || fwrite(ql_routes_cdata(r->routes), 1, route_bytes(r), f) == route_bytes(r));
    ok = (fclose(f) == 0) && ok;
    free(targets);
    if (!ok || rename(tmp, r->path) != 0) {
        fprintf(stderr, "qlab: warning: cannot write the reference cache %s\n", r->path);
        remove(tmp);
    }
}

/* ------------------------------------------------------------------------- */
/* The reference pass                                                         */

typedef struct {
    ql_reference *r;
    ql_progress progress;
} pass_ctx;

static ql_status keep_output(void *ctx, int set, int64_t chunk, const float *hidden,
                             const float *logits, int64_t n_rows, ql_error *err)
{
    (void)set;
    ql_reference *r = ((pass_ctx *)ctx)->r;
    QL_ASSERT(n_rows == r->n_scored);
    ql_status st =
        check_finite(hidden, (size_t)n_rows * (size_t)r->n_embd, chunk, "hidden states", err);
    if (st)
        return st;
    memcpy(r->hidden + (size_t)chunk * (size_t)n_rows * (size_t)r->n_embd, hidden,
           (size_t)n_rows * (size_t)r->n_embd * sizeof(float));
    if (r->holds_logp) {
        float *out = r->logp + (size_t)chunk * (size_t)n_rows * (size_t)r->n_vocab;
        memcpy(out, logits, (size_t)n_rows * (size_t)r->n_vocab * sizeof(float));
        log_softmax_rows(out, n_rows, r->n_vocab);
        return check_finite(out, (size_t)n_rows * (size_t)r->n_vocab, chunk, "log-probabilities",
                            err);
    }
    return QL_OK;
}

static void pass_progress(void *ctx, double tokens_done)
{
    pass_ctx *p = ctx;
    ql_progress_update(&p->progress, (int64_t)tokens_done, NULL);
}

static ql_status reference_pass(ql_reference *r, ql_sched *sched, const ql_reference_opts *o,
                                ql_error *err)
{
    pass_ctx p = {.r = r};
    const int64_t tokens = r->n_chunks * (int64_t)(r->d->ctx - 1);
    ql_progress_begin(&p.progress, "reference", "tok", tokens, o->quiet);
    ql_sched_job job = {.data = r->d,
                        .chunk0 = 0,
                        .n_chunks = r->n_chunks,
                        .group = o->group > 0 ? o->group : 1,
                        .n_sets = 1,
                        .on_output = keep_output,
                        .progress = pass_progress,
                        .ctx = &p};
    /* Logits are needed only to hold the log-probs; the hidden states are always kept,
     * and a mixture of experts' routes. */
    job.sets[0] = (ql_sched_set){.w = r->w,
                                 .head = r->holds_logp,
                                 .route = r->routes ? ql_routes_record : NULL,
                                 .route_ctx = r->routes};
    double t0 = ql_now();
    ql_status st = ql_sched_run(sched, r->fw, &job, err);
    if (st)
        return ql_error_prefix(err, "reference pass: ");
    r->seconds = ql_now() - t0;
    ql_progress_end(&p.progress, tokens, NULL);
    return QL_OK;
}

ql_status ql_reference_get(ql_reference **out, ql_forward *fw, ql_sched *sched, ql_weights *w,
                           const ql_ppl_data *d, const ql_reference_opts *opts, ql_error *err)
{
    *out = NULL;
    const ql_hparams *hp = ql_forward_hparams(fw);
    ql_reference *r = calloc(1, sizeof *r);
    if (!r)
        return ql_error_set(err, QL_ENOMEM, "reference: out of memory");
    r->d = d;
    r->fw = fw;
    r->w = w;
    r->n_chunks = d->n_chunks;
    r->n_scored = d->n_scored;
    r->n_embd = hp->n_embd;
    r->n_vocab = hp->n_vocab;
    const size_t logp_all = ql_reference_logp_bytes(d, hp->n_vocab);
    r->holds_logp = opts->keep_bytes > 0 && logp_all <= opts->keep_bytes;
    const size_t logp_bytes =
        r->holds_logp ? logp_all : (size_t)d->n_scored * (size_t)hp->n_vocab * sizeof(float);
    r->hidden = malloc(hidden_bytes(d, hp->n_embd) ? hidden_bytes(d, hp->n_embd) : 1);
    r->logp = malloc(logp_bytes ? logp_bytes : 1);
    ql_status rst = hp->n_expert > 0
                        ? ql_routes_alloc(&r->routes, hp, d->n_chunks, d->n_scored, d->first, err)
                        : QL_OK;
    if (rst) {
        ql_reference_free(r);
        return rst;
    }
    if (!r->hidden || !r->logp) {
        ql_reference_free(r);
        return ql_error_set(err, QL_ENOMEM,
                            "reference: out of memory for %zu hidden states and %zu bytes of "
                            "log-probabilities",
                            rows_of(d), logp_bytes);
    }
    char key[65];
    identity_key(opts, d, r->n_embd, r->n_vocab, key);
    ql_status st = QL_OK;
    if (opts->cache_dir) {
        snprintf(r->path, sizeof r->path, "%s/ref-%.24s.bin", opts->cache_dir, key);
        r->from_cache = try_load(r, key);
    }
    if (r->from_cache) {
        /* The held log-probs from the kept head inputs: one head product per chunk. */
        for (int64_t c = 0; r->holds_logp && c < r->n_chunks && !st; c++)
            st = compute_logp(r, c, r->logp + (size_t)c * (size_t)r->n_scored * (size_t)r->n_vocab,
                              err);
    } else {
        st = reference_pass(r, sched, opts, err);
        if (!st && opts->cache_dir) {
            ql_error dir_err; /* an uncachable reference is still a good reference */
            if (ql_make_dirs(opts->cache_dir, &dir_err) == QL_OK)
                save(r, key);
            else
                fprintf(stderr, "qlab: warning: %s\n", dir_err.msg);
        }
    }
    if (st) {
        ql_reference_free(r);
        return st;
    }
    *out = r;
    return QL_OK;
}

/* ------------------------------------------------------------------------- */
/* Scoring a weight set against the reference                                 */

typedef struct {
    ql_reference *r;
    ql_dist_acc *acc;
    ql_sched_progress_fn progress;
    void *progress_ctx;
} score_ctx;

ql_status ql_reference_score_chunk(ql_reference *r, ql_dist_acc *acc, int64_t chunk,
                                   const float *logits, int64_t n_rows, ql_error *err)
{
    const float *logp;
    ql_status st = ql_reference_logp(r, chunk, &logp, err);
    if (!st)
        st = ql_dist_acc_add(acc, logp, logits, ql_ppl_chunk_targets(r->d, chunk), n_rows, err);
    return st ? ql_error_prefix(err, "chunk %lld: ", (long long)chunk) : QL_OK;
}

static ql_status score_chunk(void *ctx, int set, int64_t chunk, const float *hidden,
                             const float *logits, int64_t n_rows, ql_error *err)
{
    (void)set, (void)hidden;
    score_ctx *sc = ctx;
    return ql_reference_score_chunk(sc->r, sc->acc, chunk, logits, n_rows, err);
}

static void score_progress(void *ctx, double tokens_done)
{
    score_ctx *sc = ctx;
    if (sc->progress)
        sc->progress(sc->progress_ctx, tokens_done);
}

ql_status ql_reference_score(ql_reference *r, ql_sched *sched, ql_weights *w,
                             const ql_attn_rounding *kv, int group, ql_dist_acc *acc,
                             ql_routing_acc *routing, ql_sched_progress_fn progress,
                             void *progress_ctx, ql_error *err)
{
    ql_dist_acc_reset(acc);
    if (routing)
        ql_routing_acc_reset(routing);
    score_ctx sc = {.r = r, .acc = acc, .progress = progress, .progress_ctx = progress_ctx};
    ql_sched_job job = {.data = r->d,
                        .n_chunks = r->n_chunks,
                        .group = group > 0 ? group : 1,
                        .n_sets = 1,
                        .on_output = score_chunk,
                        .progress = score_progress,
                        .ctx = &sc};
    job.sets[0] = (ql_sched_set){.w = w,
                                 .rounding = kv,
                                 .head = true,
                                 .route = routing ? ql_routing_acc_observe : NULL,
                                 .route_ctx = routing};
    return ql_sched_run(sched, r->fw, &job, err);
}
