#include "report_fixture.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "experiment/config.h"
#include "formats/types.h"
#include "results/store.h"

#define MODEL_A_SHA "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
#define MODEL_B_SHA "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
#define TEXT_SHA    "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"
#define IMATRIX     " imatrix=calib:fixture-calib"

/* The model: n_embd 32, n_ff 64, vocab 64, 2 layers, 160 norm weights in F32. */
#define N_LAYER     2
#define NORM_PARAMS 160
#define MAX_TENSORS (2 + 7 * N_LAYER)
#define PPL_REL_ERR 0.0390625 /* relative standard error of the PPLs */

typedef enum { ROLE_EMBD, ROLE_BODY, ROLE_HEAD } role;

typedef struct {
    const char *name; /* class, or the full name outside the blocks */
    int64_t n_cols, n_rows;
    double sigma;      /* scale of the weights */
    double difficulty; /* relative quantization error of the class */
    role r;
} tensor_class;

static const tensor_class classes[] = {
    {"attn_q", 32, 32, 0.03125, 1.0, ROLE_BODY},
    {"attn_k", 32, 32, 0.03125, 1.0, ROLE_BODY},
    {"attn_v", 32, 32, 0.03125, 0.875, ROLE_BODY},
    {"attn_output", 32, 32, 0.03125, 1.125, ROLE_BODY},
    {"ffn_gate", 32, 64, 0.03125, 1.0, ROLE_BODY},
    {"ffn_up", 32, 64, 0.03125, 1.0, ROLE_BODY},
    {"ffn_down", 64, 32, 0.03125, 1.25, ROLE_BODY},
};
static const tensor_class embd = {"token_embd.weight", 32, 64, 0.0625, 1.0, ROLE_EMBD};
static const tensor_class head = {"output.weight", 32, 64, 0.03125, 1.0, ROLE_HEAD};

/* Relative RMS weight error of a type (what a quantizer of that width achieves). */
static double type_error(ql_type t)
{
    switch (t) {
    case QL_TYPE_F32:
        return 0.0;
    case QL_TYPE_F16:
        return 1.0 / 2048;
    case QL_TYPE_Q8_0:
        return 1.125 / 256;
    default:
        return 1.0 / 16;
    }
}

typedef struct {
    ql_tensor_record te[MAX_TENSORS];
    char names[MAX_TENSORS][48];
    size_t n;
    double params, bytes, params_body, bytes_body;
    double sq_err, max_err, imat_err, imat_norm;
} weights;

static void add_tensor(weights *w, const tensor_class *tc, int layer, ql_type type)
{
    ql_tensor_record *t = &w->te[w->n];
    if (layer >= 0)
        snprintf(w->names[w->n], sizeof w->names[0], "blk.%d.%s.weight", layer, tc->name);
    else
        snprintf(w->names[w->n], sizeof w->names[0], "%s", tc->name);
    double sigma = tc->sigma * (layer >= 0 ? 1.0 + 0.25 * layer : 1.0);
    double eps = type_error(type) * tc->difficulty;
    t->tensor = w->names[w->n];
    t->requested_type = t->used_type = type;
    t->fallback_reason = NULL;
    t->n_rows = tc->n_rows;
    t->n_cols = tc->n_cols;
    t->params = tc->n_rows * tc->n_cols;
    t->bytes = (int64_t)ql_row_size(type, tc->n_cols) * tc->n_rows;
    t->rmse = eps * sigma;
    t->max_err = 4.0 * t->rmse;
    t->outlier_cols = -1;
    /* Embeddings are looked up, not multiplied: the imatrix has no entry for them. */
    if (tc->r == ROLE_EMBD) {
        t->imatrix_err = t->imatrix_err_rel = (double)NAN;
    } else {
        double norm = 1.5 * (double)t->params * sigma * sigma; /* sum of I w^2 */
        t->imatrix_err_rel = 0.75 * eps * eps * (layer >= 0 ? 1.0 + 0.125 * layer : 1.0);
        t->imatrix_err = t->imatrix_err_rel * norm;
        w->imat_err += t->imatrix_err;
        w->imat_norm += norm;
    }
    w->params += (double)t->params;
    w->bytes += (double)t->bytes;
    if (tc->r == ROLE_BODY) {
        w->params_body += (double)t->params;
        w->bytes_body += (double)t->bytes;
    }
    w->sq_err += (double)t->params * t->rmse * t->rmse;
    if (t->max_err > w->max_err)
        w->max_err = t->max_err;
    w->n++;
}

static void make_weights(const ql_config *c, weights *w)
{
    memset(w, 0, sizeof *w);
    add_tensor(w, &embd, -1, ql_config_embd_type(c));
    for (int l = 0; l < N_LAYER; l++)
        for (size_t k = 0; k < sizeof classes / sizeof classes[0]; k++)
            add_tensor(w, &classes[k], l, c->weight_type);
    add_tensor(w, &head, -1, ql_config_head_type(c));
    /* Norms stay F32. */
    w->params += NORM_PARAMS;
    w->bytes += 4.0 * NORM_PARAMS;
}

typedef struct {
    const char *sweep;
    const char *model_sha;
    const char *canon;
    const char *fail; /* error text of a failed run, or NULL */
    bool no_max_dp;   /* max |dp| not measured */
} fixture_run;

static const fixture_run runs[] = {
    {"fixture-formats", MODEL_A_SHA, "weight_type=F16" IMATRIX, NULL, false},
    {"fixture-formats", MODEL_A_SHA, "weight_type=F16 act_mode=q8_0" IMATRIX, NULL, false},
    {"fixture-formats", MODEL_A_SHA, "weight_type=Q8_0" IMATRIX, NULL, false},
    {"fixture-formats", MODEL_A_SHA, "weight_type=Q8_0 act_mode=q8_0" IMATRIX, NULL, false},
    {"fixture-formats", MODEL_A_SHA, "weight_type=Q4_0" IMATRIX, NULL, false},
    {"fixture-formats", MODEL_A_SHA, "weight_type=Q4_0 act_mode=q8_0" IMATRIX, NULL, false},
    {"fixture-formats", MODEL_A_SHA, "weight_type=Q4_0 head_type=F32" IMATRIX, NULL, true},
    {"fixture-formats", MODEL_A_SHA, "weight_type=IQ4_NL" IMATRIX, QLT_REPORT_FAILURE, false},
    {"fixture-mixed", MODEL_A_SHA, "weight_type=Q8_0" IMATRIX, NULL, false},
    {"fixture-mixed", MODEL_B_SHA, "weight_type=Q8_0" IMATRIX, NULL, false},
    {"fixture-mixed", MODEL_B_SHA, "weight_type=Q4_0" IMATRIX, NULL, false},
    {"fixture-failed", MODEL_B_SHA, "weight_type=IQ4_NL" IMATRIX, "IQ4_NL: not implemented yet",
     false},
};

/* Sample standard error of the mean of v[0..n). */
static double std_error(const double *v, int n)
{
    double mean = 0.0, ss = 0.0;
    for (int i = 0; i < n; i++)
        mean += v[i];
    mean /= n;
    for (int i = 0; i < n; i++)
        ss += (v[i] - mean) * (v[i] - mean);
    return sqrt(ss / (n - 1)) / sqrt((double)n);
}

/* Per-chunk sums and the run metrics derived from them. */
static void make_metrics(const ql_config *c, const weights *w, int k, bool model_b, bool no_max_dp,
                         ql_run_metrics *m, ql_chunk_record *ck)
{
    const int T = QLT_REPORT_TOKENS;
    /* KLD per token grows with the importance-weighted weight error; quantized
     * activations add their own share. */
    double rel = w->imat_err / w->imat_norm;
    double base =
        16.0 * rel * (model_b ? 1.5 : 1.0) + (c->act_mode == QL_ACT_Q8_0 ? 1.0 / 1024 : 0.0);
    double kld = 0.0, nll = 0.0, nll_ref = 0.0, top1 = 0.0;
    double chunk_kld[QLT_REPORT_CHUNKS], chunk_dnll[QLT_REPORT_CHUNKS];
    for (int i = 0; i < QLT_REPORT_CHUNKS; i++) {
        /* Chunks differ in difficulty (shared by every config) and a little noise. */
        double hard = 1.0 + (double)((i * 5) % 8) / 8.0;
        double noise = 1.0 + (double)((3 * i + k) % 5 - 2) / 32.0; /* k: per weight type */
        double mean = base * hard * noise;
        ql_chunk_record *x = &ck[i];
        x->chunk = i;
        x->n_tokens = T;
        x->kld_sum = mean * T;
        x->nll_ref_sum = T * (2.25 + (double)(i % 4) / 8.0);
        x->nll_sum = x->nll_ref_sum + 0.5 * mean * T;
        x->top1_count = T - (int64_t)floor(0.8 * T * sqrt(mean));
        chunk_kld[i] = mean;
        chunk_dnll[i] = 0.5 * mean;
        kld += x->kld_sum;
        nll += x->nll_sum;
        nll_ref += x->nll_ref_sum;
        top1 += (double)x->top1_count;
    }
    double n = (double)(T * QLT_REPORT_CHUNKS);
    ql_run_metrics_init(m);
    m->n_tokens = n;
    m->kld_mean = kld / n;
    m->kld_mean_err = std_error(chunk_kld, QLT_REPORT_CHUNKS);
    m->kld_median = 0.375 * m->kld_mean;
    m->kld_p90 = 2.5 * m->kld_mean;
    m->kld_p99 = 7.0 * m->kld_mean;
    m->kld_p999 = 15.0 * m->kld_mean;
    m->kld_max = 40.0 * m->kld_mean;
    /* The further percentiles (dyadic multiples, as the ones above). */
    m->kld_min = 0.0;
    m->kld_p01 = 0.0078125 * m->kld_mean;
    m->kld_p05 = 0.03125 * m->kld_mean;
    m->kld_p10 = 0.0625 * m->kld_mean;
    m->kld_p25 = 0.1875 * m->kld_mean;
    m->kld_p75 = 1.125 * m->kld_mean;
    m->kld_p95 = 4.0 * m->kld_mean;
    m->rkld_mean = 1.125 * m->kld_mean;
    m->ln_ppl_ratio = (nll - nll_ref) / n;
    m->ln_ppl_ratio_err = std_error(chunk_dnll, QLT_REPORT_CHUNKS);
    /* exp() is left out on purpose (see the header): second-order expansion. */
    double r = m->ln_ppl_ratio;
    m->ppl_ref = model_b ? 12.25 : 10.5;
    m->ppl_ref_err = PPL_REL_ERR * m->ppl_ref;
    m->ppl = m->ppl_ref * (1.0 + r + 0.5 * r * r);
    m->ppl_err = PPL_REL_ERR * m->ppl;
    m->top1_agree = top1 / n;
    m->dp_mean = -0.25 * m->kld_mean;
    m->dp_rms = 0.5 * sqrt(m->kld_mean);
    m->dp_min = -0.5 * sqrt(m->kld_p99);
    m->dp_max = 0.25 * sqrt(m->kld_p99);
    m->max_abs_prob_err = no_max_dp ? (double)NAN : fmin(1.0, 0.5 * sqrt(m->kld_max));
    m->rmse = sqrt(w->sq_err / w->params);
    m->max_err = w->max_err;
    m->imatrix_err = w->imat_err;
    m->imatrix_err_rel = rel;
    m->params = w->params;
    m->bytes = w->bytes;
    m->bpw = 8.0 * w->bytes / w->params;
    m->params_body = w->params_body;
    m->bytes_body = w->bytes_body;
    m->bpw_body = 8.0 * w->bytes_body / w->params_body;
    m->gguf_bytes = w->bytes + 4096.0;
}

static ql_status add_model(ql_store *s, const char *sha, const char *name, int64_t *id,
                           ql_error *err)
{
    ql_store_model m;
    ql_store_model_init(&m);
    m.sha256 = sha;
    m.path = strcmp(name, "fixture-a") == 0 ? "models/fixture-a.gguf" : "models/fixture-b.gguf";
    m.name = name;
    m.arch = "llama";
    m.params = 2048 + N_LAYER * (4 * 1024 + 3 * 2048) + 2048 + NORM_PARAMS;
    m.n_layer = N_LAYER;
    m.n_embd = 32;
    m.n_ff = 64;
    m.n_vocab = 64;
    return ql_store_upsert_model(s, &m, id, err);
}

ql_status qlt_report_fixture(const char *path, bool chunks, ql_error *err)
{
    ql_store *s;
    ql_status st = ql_store_open(path, NULL, &s, err);
    if (st)
        return st;
    int64_t model_a, model_b, text;
    ql_store_dataset d;
    ql_store_dataset_init(&d);
    d.sha256 = TEXT_SHA;
    d.name = "fixture-text";
    d.bytes = 65536;
    if ((st = add_model(s, MODEL_A_SHA, "fixture-a", &model_a, err)) ||
        (st = add_model(s, MODEL_B_SHA, "fixture-b", &model_b, err)) ||
        (st = ql_store_upsert_dataset(s, &d, &text, err)))
        goto out;
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        const fixture_run *fr = &runs[k];
        bool is_b = strcmp(fr->model_sha, MODEL_B_SHA) == 0;
        ql_config c;
        int64_t cid, run;
        char hash[65];
        if ((st = ql_config_from_string(fr->canon, &c, err)) ||
            (st = ql_store_upsert_config(s, &c, &cid, err)))
            goto out;
        ql_config_hash(&c, hash);
        if ((st = ql_store_find_done(s, hash, fr->model_sha, TEXT_SHA, QLT_REPORT_CTX,
                                     QLT_REPORT_CHUNKS, 1, &run, err)))
            goto out;
        if (run) {
            if ((st = ql_store_add_to_sweep(s, fr->sweep, run, err)))
                goto out;
            continue;
        }
        ql_store_run_key key = {cid, is_b ? model_b : model_a, text, QLT_REPORT_CTX,
                                QLT_REPORT_CHUNKS};
        ql_store_run_info info = {fr->sweep, 2, 1, NULL, NULL, 0, 0};
        if ((st = ql_store_begin_run(s, &key, &info, &run, err)))
            goto out;
        if (fr->fail) {
            if ((st = ql_store_fail_run(s, run, fr->fail, 0.25, err)))
                goto out;
            continue;
        }
        weights w;
        make_weights(&c, &w);
        ql_run_metrics m;
        ql_chunk_record ck[QLT_REPORT_CHUNKS];
        make_metrics(&c, &w, (int)c.weight_type, is_b, fr->no_max_dp, &m, ck);
        ql_run_timing t = {.seconds = 2.5,
                           .quantize_seconds = 0.25,
                           .ref_seconds = 1.0,
                           .forward_seconds = 1.0,
                           .forward_alone_seconds = (double)NAN};
        ql_run_result res = {.metrics = &m,
                             .tensors = w.te,
                             .n_tensors = w.n,
                             .chunks = ck,
                             .n_chunks = chunks ? QLT_REPORT_CHUNKS : 0,
                             .timing = &t};
        if ((st = ql_store_finish_run_result(s, run, &res, err)))
            goto out;
    }
out:
    ql_store_close(s);
    return st;
}

/* ================================================================ the crowded fixture */

/* Weight types of the crowded sweep: bits per weight of the body at head same, the
 * mean KLD without an imatrix, and the factor an imatrix gives it (tiny256's figures,
 * rounded to dyadic fractions). Several sit within 0.2 bpw of each other, as the
 * 4-5 bpw formats do. */
static const struct {
    const char *type;
    double bpw, kld, imatrix;
} crowd_types[] = {
    {"Q2_K", 2.625, 0.4375, 0.875},
    {"Q3_K_S", 3.6875, 0.078125, 1.03125},
    {"Q3_K_M", 4.0625, 0.0546875, 1.125},
    {"Q3_K_L", 4.3125, 0.046875, 1.0625},
    {"IQ4_XS", 4.375, 0.0390625, 0.875},
    {"Q4_0", 4.5, 0.03515625, 0.8125},
    {"IQ4_NL", 4.5625, 0.03125, 0.875},
    {"Q4_K_S", 4.6875, 0.021484375, 0.875},
    {"Q4_K_M", 4.9375, 0.01953125, 0.84375},
    {"Q4_1", 5.0, 0.0234375, 0.875},
    {"Q5_0", 5.5, 0.0087890625, 0.90625},
    {"Q5_K_S", 5.59375, 0.0050048828125, 1.0625},
    {"Q5_K_M", 5.71875, 0.00439453125, 1.0625},
    {"Q6_K", 6.5625, 0.0016326904296875, 1.03125},
    {"Q8_0", 8.5, 0.0001373291015625, 1.0},
};
#define CROWD_TYPES   (sizeof crowd_types / sizeof crowd_types[0])
#define CROWD_IMATRIX "calib:tinystories-calib,chunks=5"
#define CROWD_PARAMS  (256 * 256 * 7 * 2 + 2 * 256 * 512)
#define CROWD_SHA     "abababababababababababababababababababababababababababababababab"
#define FILES_SHA     "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"

/* Per-chunk spread of a config's KLD around its mean (mean 1, dyadic). */
static const double chunk_shape[QLT_REPORT_CHUNKS] = {0.75,  1.25,  0.875, 1.125,
                                                      0.625, 1.375, 1.0,   1.0};

/* The metrics and per-chunk sums of a config of mean KLD kld at bpw: the standard
 * errors and the other metrics follow from the chunk values as a runner's would. */
static void crowd_metrics(double bpw, double kld, ql_run_metrics *m, ql_chunk_record *ck)
{
    const int T = QLT_REPORT_TOKENS;
    double chunk_kld[QLT_REPORT_CHUNKS], chunk_dnll[QLT_REPORT_CHUNKS], top1 = 0.0;
    for (int i = 0; i < QLT_REPORT_CHUNKS; i++) {
        ql_chunk_record *x = &ck[i];
        x->chunk = i;
        x->n_tokens = T;
        chunk_kld[i] = kld * chunk_shape[i];
        chunk_dnll[i] = 0.5 * chunk_kld[i];
        x->kld_sum = chunk_kld[i] * T;
        x->nll_ref_sum = T * (2.875 + (double)(i % 4) / 8.0);
        x->nll_sum = x->nll_ref_sum + chunk_dnll[i] * T;
        x->top1_count = T - (int64_t)floor(0.8 * T * sqrt(chunk_kld[i]));
        top1 += (double)x->top1_count;
    }
    const double n = (double)(T * QLT_REPORT_CHUNKS);
    ql_run_metrics_init(m);
    m->n_tokens = n;
    m->kld_mean = kld;
    m->kld_mean_err = std_error(chunk_kld, QLT_REPORT_CHUNKS);
    m->kld_min = 0.0;
    m->kld_p01 = 0.0078125 * kld;
    m->kld_p05 = 0.03125 * kld;
    m->kld_p10 = 0.0625 * kld;
    m->kld_p25 = 0.1875 * kld;
    m->kld_median = 0.375 * kld;
    m->kld_p75 = 1.125 * kld;
    m->kld_p90 = 2.5 * kld;
    m->kld_p95 = 4.0 * kld;
    m->kld_p99 = 7.0 * kld;
    m->kld_p999 = 15.0 * kld;
    m->kld_max = 40.0 * kld;
    m->rkld_mean = 1.125 * kld;
    m->ln_ppl_ratio = 0.5 * kld;
    m->ln_ppl_ratio_err = std_error(chunk_dnll, QLT_REPORT_CHUNKS);
    const double r = m->ln_ppl_ratio;
    m->ppl_ref = 18.5;
    m->ppl_ref_err = PPL_REL_ERR * m->ppl_ref;
    m->ppl = m->ppl_ref * (1.0 + r + 0.5 * r * r);
    m->ppl_err = PPL_REL_ERR * m->ppl;
    m->top1_agree = top1 / n;
    m->dp_mean = -0.25 * kld;
    m->dp_rms = 0.5 * sqrt(kld);
    m->dp_min = -0.5 * sqrt(m->kld_p99);
    m->dp_max = 0.25 * sqrt(m->kld_p99);
    m->max_abs_prob_err = fmin(1.0, 0.5 * sqrt(m->kld_max));
    m->params = CROWD_PARAMS;
    m->bpw = bpw;
    m->bytes = bpw * CROWD_PARAMS / 8.0;
    m->params_body = 256 * 256 * 7 * 2;
    m->bpw_body = bpw;
    m->bytes_body = bpw * m->params_body / 8.0;
    m->gguf_bytes = m->bytes + 4096.0;
    m->rmse = 0.0625 * sqrt(kld);
    m->max_err = 4.0 * m->rmse;
}

/* Per-tensor records of a config: 2 blocks of 256-wide products in the config's type
 * (a mix's default type), the error growing with the layer. */
typedef struct {
    ql_tensor_record te[7 * N_LAYER];
    char names[7 * N_LAYER][48];
    size_t n;
} crowd_tensors;

static void crowd_make_tensors(ql_type type, double kld, crowd_tensors *w)
{
    w->n = 0;
    for (int l = 0; l < N_LAYER; l++)
        for (size_t k = 0; k < sizeof classes / sizeof classes[0]; k++) {
            ql_tensor_record *t = &w->te[w->n];
            snprintf(w->names[w->n], sizeof w->names[0], "blk.%d.%s.weight", l, classes[k].name);
            memset(t, 0, sizeof *t);
            t->tensor = w->names[w->n];
            t->requested_type = t->used_type = type;
            t->n_rows = t->n_cols = 256;
            t->params = 256 * 256;
            t->bytes = (int64_t)ql_row_size(type, 256) * 256;
            t->rmse = 0.0625 * sqrt(kld) * classes[k].difficulty * (1.0 + 0.25 * l);
            t->max_err = 4.0 * t->rmse;
            t->imatrix_err_rel = 0.5 * kld * classes[k].difficulty * (1.0 + 0.125 * l);
            t->imatrix_err = t->imatrix_err_rel * 1024.0;
            t->outlier_cols = -1;
            w->n++;
        }
}

/* One run of a config: stored done with its metrics, chunks and tensors. */
static ql_status crowd_run(ql_store *s, const char *sweep, int64_t model, int64_t text,
                           const char *model_sha, const char *canon, double bpw, double kld,
                           ql_error *err)
{
    ql_config c;
    int64_t cid, run;
    ql_status st;
    if ((st = ql_config_from_string(canon, &c, err)) ||
        (st = ql_store_upsert_config(s, &c, &cid, err)))
        return st;
    char hash[65];
    ql_config_hash(&c, hash);
    if ((st = ql_store_find_done(s, hash, model_sha, TEXT_SHA, QLT_REPORT_CTX, QLT_REPORT_CHUNKS, 1,
                                 &run, err)))
        return st;
    if (run) /* measured for another sweep: the same run */
        return ql_store_add_to_sweep(s, sweep, run, err);
    ql_store_run_key key = {cid, model, text, QLT_REPORT_CTX, QLT_REPORT_CHUNKS};
    ql_store_run_info info = {sweep, 2, 1, NULL, NULL, 0, 0};
    if ((st = ql_store_begin_run(s, &key, &info, &run, err)))
        return st;
    ql_run_metrics m;
    ql_chunk_record ck[QLT_REPORT_CHUNKS];
    crowd_metrics(bpw, kld, &m, ck);
    crowd_tensors w;
    crowd_make_tensors(c.weight_file[0] ? QL_TYPE_Q4_K : c.weight_type, kld, &w);
    ql_run_timing t = {.seconds = 2.5,
                       .quantize_seconds = 0.25,
                       .ref_seconds = 1.0,
                       .forward_seconds = 1.0,
                       .forward_alone_seconds = (double)NAN};
    ql_run_result res = {.metrics = &m,
                         .tensors = w.te,
                         .n_tensors = w.n,
                         .chunks = ck,
                         .n_chunks = QLT_REPORT_CHUNKS,
                         .timing = &t};
    return ql_store_finish_run_result(s, run, &res, err);
}

ql_status qlt_report_fixture_crowded(const char *path, ql_error *err)
{
    ql_store *s;
    ql_status st = ql_store_open(path, NULL, &s, err);
    if (st)
        return st;
    int64_t model, text;
    ql_store_model mo;
    ql_store_model_init(&mo);
    mo.sha256 = CROWD_SHA;
    mo.path = "models/tiny256.gguf";
    mo.name = "fixture-tiny256";
    mo.arch = "llama";
    mo.params = CROWD_PARAMS;
    mo.n_layer = N_LAYER;
    mo.n_embd = 256;
    mo.n_ff = 256;
    mo.n_vocab = 512;
    ql_store_dataset d;
    ql_store_dataset_init(&d);
    d.sha256 = TEXT_SHA;
    d.name = "fixture-text";
    d.bytes = 65536;
    if ((st = ql_store_upsert_model(s, &mo, &model, err)) ||
        (st = ql_store_upsert_dataset(s, &d, &text, err)))
        goto out;
    /* crowd-a: every type x imatrix none/calib x head same/Q8_0 (the head adds a
     * quarter bit and takes a tenth of the KLD off). */
    for (size_t k = 0; k < CROWD_TYPES && !st; k++)
        for (int h8 = 0; h8 < 2 && !st; h8++)
            for (int im = 0; im < 2 && !st; im++) {
                char canon[256];
                snprintf(canon, sizeof canon, "weight_type=%s%s%s", crowd_types[k].type,
                         h8 ? " head_type=Q8_0" : "", im ? " imatrix=" CROWD_IMATRIX : "");
                const double kld =
                    crowd_types[k].kld * (h8 ? 0.90625 : 1.0) * (im ? crowd_types[k].imatrix : 1.0);
                st = crowd_run(s, "crowd-a", model, text, CROWD_SHA, canon,
                               crowd_types[k].bpw + (h8 ? 0.25 : 0.0), kld, err);
            }
    /* crowd-c: the crowded middle (Q3_K_M to Q5_K_M) x act f32/q8_0 x KV f32/f16 x
     * imatrix none/calib, two half-width panels (by imatrix) of 40 points each. */
    for (size_t k = 2; k + 2 < CROWD_TYPES && !st; k++)
        for (int q8 = 0; q8 < 2 && !st; q8++)
            for (int kv = 0; kv < 2 && !st; kv++)
                for (int im = 0; im < 2 && !st; im++) {
                    char canon[256];
                    snprintf(canon, sizeof canon, "weight_type=%s%s%s%s", crowd_types[k].type,
                             q8 ? " act_mode=q8_0" : "", kv ? " kv_type=f16" : "",
                             im ? " imatrix=" CROWD_IMATRIX : "");
                    const double kld = crowd_types[k].kld * (q8 ? 1.0625 : 1.0) *
                                       (kv ? 1.03125 : 1.0) * (im ? crowd_types[k].imatrix : 1.0);
                    st = crowd_run(s, "crowd-c", model, text, CROWD_SHA, canon, crowd_types[k].bpw,
                                   kld, err);
                }
    /* crowd-d: 24 files of long names within a tenth of a bit and a twentieth of the
     * KLD of each other (a directory of quantizations with different recipes): more
     * labels than their neighbourhood has room for. */
    for (int k = 0; k < 24 && !st; k++) {
        char canon[256];
        snprintf(canon, sizeof canon,
                 "weight_type=file:quants/tiny256-recipe-%02d-Q4_K_M.gguf@%064d", k, k + 1);
        st = crowd_run(s, "crowd-d", model, text, CROWD_SHA, canon, 4.5 + 0.00390625 * (k % 24),
                       0.0205078125 + 0.0000152587890625 * ((k * 7) % 24), err);
    }
    /* crowd-b, reported after crowd-a: qlab's own Q4_0 and Q4_K_M, and existing files
     * (two with the same name in other directories). */
    static const struct {
        const char *canon;
        double bpw, kld;
    } files[] = {
        {"weight_type=Q4_0", 4.5, 0.03515625},
        {"weight_type=Q4_K_M", 4.9375, 0.01953125},
        {"weight_type=Q4_K_M imatrix=" CROWD_IMATRIX, 4.9375, 0.0166015625},
        {"weight_type=file:quants/lq-Q4_K_M-im.gguf@" FILES_SHA, 4.9375, 0.015625},
        {"weight_type=file:quants/lq-Q4_K_M-im.gguf@" FILES_SHA " act_mode=q8_0", 4.9375,
         0.017578125},
        {"weight_type=file:other/pure-q4_0.gguf@"
         "1111111111111111111111111111111111111111111111111111111111111111",
         4.5, 0.03515625},
        {"weight_type=file:a/dup.gguf@"
         "2222222222222222222222222222222222222222222222222222222222222222",
         5.0, 0.0234375},
        {"weight_type=file:b/dup.gguf@"
         "3333333333333333333333333333333333333333333333333333333333333333",
         5.5, 0.0087890625},
    };
    for (size_t k = 0; k < sizeof files / sizeof files[0] && !st; k++)
        st = crowd_run(s, "crowd-b", model, text, CROWD_SHA, files[k].canon, files[k].bpw,
                       files[k].kld, err);
out:
    ql_store_close(s);
    return st;
}
