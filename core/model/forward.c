/* The reference forward pass: one function per mathematical block, read top to
 * bottom in ql_forward_run(). Shapes in comments are (rows, columns), row-major. */
#include "model/forward.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/gemm.h"

#include "base/util.h"
#include "formats/types.h"

/* Element-wise work below this many values runs on the calling thread: a parallel
 * region costs more than it saves (see QL_GEMM_SERIAL_MACS for products). */
#define SERIAL_VALUES (64 * 1024)

/* Queries per attention tile: the score buffer is (ATT_TILE, max_ctx), not
 * (max_ctx, max_ctx), and later tiles skip the keys after their last query. */
#define ATT_TILE 256

struct ql_forward {
    ql_hparams hp;
    int max_ctx;
    int64_t max_in; /* widest product input (for the transform scratch) */

    /* activations of the current chunk (n = max_ctx rows) */
    float *x;                /* (n, n_embd) residual stream */
    float *xb;               /* (n, n_embd) normalized input of a block */
    float *q;                /* (n, n_head * head_dim) queries */
    float *k;                /* (n, n_head_kv * head_dim) keys of the chunk, before the cache */
    float *v;                /* (n, n_head_kv * head_dim) values of the chunk */
    float *att;              /* (n, n_head * head_dim) attention output, heads concatenated */
    float *proj;             /* (n, n_embd) output of attn_output / ffn_down */
    float *hg;               /* (n, ff_max) gate, then silu(gate) * up */
    float *hu;               /* (n, ff_max) up */
    float *xq;               /* (n, max_in) transformed product input */
    float *rope;             /* (n, n_rot) cos, sin pairs per position */
    int rope_pos0, rope_n;   /* positions the table holds (rope_n = 0: none) */
    const float *rope_freqs; /* the frequency factors it was built with */
    float *scores;           /* (score_slots, ATT_TILE, max_ctx) scores, then probabilities */
    int score_slots;         /* one per thread that may run an attention task */

    /* ql_forward_run's own binding buffers, allocated on first use */
    float *layer_buf; /* (ql_weights_layer_floats) one layer's products in f32 */
    size_t layer_buf_floats;
    float *tiles; /* (tile_slots, ql_gemm_scratch_floats) a decoded weight tile per
                     thread, for products whose weight is not bound */
    int tile_slots;
    float *xrun; /* (n, n_embd) residual stream of ql_forward_run */

    /* mixture of experts (allocated when the model has experts) */
    float *probs;      /* (n, n_expert) router logits, then their softmax */
    int32_t *sel;      /* (n, k) chosen experts per token, most probable first */
    float *sel_w;      /* (n, k) their weights */
    int32_t *ex_start; /* (n_expert + 1,) expert e's routed (token, slot)s start here */
    int32_t *ex_next;  /* (n_expert,) the counting sort's cursors */
    int32_t *ex_pairs; /* (n * k,) token * k + slot, by expert, tokens ascending */
    /* (ex_slots, ex_work_floats) per thread: an expert's gathered inputs (n, n_embd), gate
     * and up (n, ff_max each), outputs (n, n_embd) and rounded inputs (n, max_in) */
    float *ex_work;
    size_t ex_work_floats;
    int ex_slots;
    float *ex_out;   /* (n, n_embd) the shared expert's outputs */
    float *slot_out; /* (n, k, n_embd) weighted output of each token's j-th expert */
    float *gate_sh;  /* (n,) the shared expert's gate */

    /* K/V cache per layer: (n_layer, max_ctx, n_head_kv * head_dim) */
    float *k_cache;
    float *v_cache;

    ql_matmul_observer observer;
    void *observer_ctx;
    ql_route_observer route_observer;
    void *route_ctx;
    ql_forward_profile *profile; /* NULL: not timed */
    ql_attn_rounding rounding;
};

/* ------------------------------------------------------------------------ */
/* Allocation                                                                 */

static void *alloc_floats(int64_t n, size_t elem)
{
    return calloc((size_t)(n > 0 ? n : 1), elem);
}

ql_status ql_forward_alloc(ql_forward **out, const ql_hparams *hp, int max_ctx, ql_error *err)
{
    *out = NULL;
    if (max_ctx <= 0)
        return ql_error_set(err, QL_EINVAL, "forward: context length %d must be positive", max_ctx);
    ql_forward *fw = calloc(1, sizeof *fw);
    if (!fw)
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    fw->hp = *hp;
    fw->max_ctx = max_ctx;
    const int64_t n = max_ctx, E = hp->n_embd, F = ql_hparams_ff_max(hp);
    const int64_t QD = (int64_t)hp->n_head * hp->head_dim;
    const int64_t KD = (int64_t)hp->n_head_kv * hp->head_dim;
    fw->max_in = E > F ? E : F;
    if (QD > fw->max_in)
        fw->max_in = QD;
    fw->x = alloc_floats(n * E, sizeof(float));
    fw->xb = alloc_floats(n * E, sizeof(float));
    fw->q = alloc_floats(n * QD, sizeof(float));
    fw->k = alloc_floats(n * KD, sizeof(float));
    fw->v = alloc_floats(n * KD, sizeof(float));
    fw->att = alloc_floats(n * QD, sizeof(float));
    fw->proj = alloc_floats(n * E, sizeof(float));
    fw->hg = alloc_floats(n * F, sizeof(float));
    fw->hu = alloc_floats(n * F, sizeof(float));
    fw->xq = alloc_floats(n * fw->max_in, sizeof(float));
    fw->rope = alloc_floats(n * hp->n_rot, sizeof(float));
    fw->score_slots = 1;
    fw->scores = alloc_floats((n < ATT_TILE ? n : ATT_TILE) * n, sizeof(float));
    fw->xrun = alloc_floats(n * E, sizeof(float));
    fw->k_cache = alloc_floats((int64_t)hp->n_layer * n * KD, sizeof(float));
    fw->v_cache = alloc_floats((int64_t)hp->n_layer * n * KD, sizeof(float));
    bool moe_ok = true;
    if (hp->n_expert > 0) {
        const int64_t X = hp->n_expert, k = hp->n_expert_used;
        fw->probs = alloc_floats(n * X, sizeof(float));
        fw->sel = alloc_floats(n * k, sizeof(int32_t));
        fw->sel_w = alloc_floats(n * k, sizeof(float));
        fw->ex_start = alloc_floats(X + 1, sizeof(int32_t));
        fw->ex_next = alloc_floats(X, sizeof(int32_t));
        fw->ex_pairs = alloc_floats(n * k, sizeof(int32_t));
        fw->ex_out = alloc_floats(n * E, sizeof(float));
        fw->slot_out = alloc_floats(n * k * E, sizeof(float));
        fw->gate_sh = alloc_floats(n, sizeof(float));
        moe_ok = fw->probs && fw->sel && fw->sel_w && fw->ex_start && fw->ex_next && fw->ex_pairs &&
                 fw->ex_out && fw->slot_out && fw->gate_sh;
    }
    if (!moe_ok || !fw->x || !fw->xb || !fw->q || !fw->k || !fw->v || !fw->att || !fw->proj ||
        !fw->hg || !fw->hu || !fw->xq || !fw->rope || !fw->scores || !fw->k_cache || !fw->v_cache ||
        !fw->xrun) {
        ql_forward_free(fw);
        return ql_error_set(err, QL_ENOMEM, "forward: out of memory for a context of %d tokens",
                            max_ctx);
    }
    ql_strlcpy(fw->rounding.name, "f32", sizeof fw->rounding.name);
    *out = fw;
    return QL_OK;
}

void ql_forward_free(ql_forward *fw)
{
    if (!fw)
        return;
    free(fw->x);
    free(fw->xb);
    free(fw->q);
    free(fw->k);
    free(fw->v);
    free(fw->att);
    free(fw->proj);
    free(fw->hg);
    free(fw->hu);
    free(fw->xq);
    free(fw->rope);
    free(fw->scores);
    free(fw->k_cache);
    free(fw->v_cache);
    free(fw->layer_buf);
    free(fw->tiles);
    free(fw->xrun);
    free(fw->probs);
    free(fw->sel);
    free(fw->sel_w);
    free(fw->ex_start);
    free(fw->ex_next);
    free(fw->ex_pairs);
    free(fw->ex_work);
    free(fw->ex_out);
    free(fw->slot_out);
    free(fw->gate_sh);
    free(fw);
}

const ql_hparams *ql_forward_hparams(const ql_forward *fw)
{
    return &fw->hp;
}

int ql_forward_max_ctx(const ql_forward *fw)
{
    return fw->max_ctx;
}

void ql_forward_set_profile(ql_forward *fw, ql_forward_profile *p)
{
    fw->profile = p;
}

ql_forward_profile *ql_forward_get_profile(const ql_forward *fw)
{
    return fw->profile;
}

/* The clock when profiling, else 0 (no clock read). */
static double prof_now(const ql_forward *fw)
{
    return fw->profile ? ql_now() : 0.0;
}

void ql_forward_set_route_observer(ql_forward *fw, ql_route_observer fn, void *ctx)
{
    fw->route_observer = fn;
    fw->route_ctx = fn ? ctx : NULL;
}

void ql_forward_get_route_observer(const ql_forward *fw, ql_route_observer *fn, void **ctx)
{
    *fn = fw->route_observer;
    *ctx = fw->route_ctx;
}

void ql_forward_set_observer(ql_forward *fw, ql_matmul_observer fn, void *ctx)
{
    fw->observer = fn;
    fw->observer_ctx = fn ? ctx : NULL;
}

void ql_forward_get_observer(const ql_forward *fw, ql_matmul_observer *fn, void **ctx)
{
    *fn = fw->observer;
    *ctx = fw->observer_ctx;
}

void ql_observer_chain_init(ql_observer_chain *c)
{
    memset(c, 0, sizeof *c);
}

ql_status ql_observer_chain_add(ql_observer_chain *c, ql_matmul_observer fn, void *ctx,
                                ql_error *err)
{
    if (!fn)
        return QL_OK;
    if (c->n >= QL_OBSERVER_CHAIN_MAX)
        return ql_error_set(err, QL_EINVAL, "observer chain: more than %d observers",
                            QL_OBSERVER_CHAIN_MAX);
    c->fn[c->n] = fn;
    c->ctx[c->n] = ctx;
    c->n++;
    return QL_OK;
}

void ql_observer_chain_observe(void *chain, int site, const ql_linear *lin, const float *x,
                               int64_t n_tok)
{
    const ql_observer_chain *c = chain;
    for (int i = 0; i < c->n; i++)
        c->fn[i](c->ctx[i], site, lin, x, n_tok);
}

/* ------------------------------------------------------------------------ */
/* Attention rounding                                                         */

void ql_forward_set_attn_rounding(ql_forward *fw, const ql_attn_rounding *r)
{
    if (r) {
        fw->rounding = *r;
        fw->rounding.name[sizeof fw->rounding.name - 1] = '\0';
    } else {
        memset(&fw->rounding, 0, sizeof fw->rounding);
        ql_strlcpy(fw->rounding.name, "f32", sizeof fw->rounding.name);
    }
}

void ql_forward_get_attn_rounding(const ql_forward *fw, ql_attn_rounding *out)
{
    *out = fw->rounding;
}

const char *ql_forward_attn_rounding_name(const ql_forward *fw)
{
    return fw->rounding.name;
}

/* ------------------------------------------------------------------------ */
/* The matmul seam                                                            */

/* ql_gemm_rows_fn over a linear prepared by ql_linear_prepare. */
static void decode_tile(const void *lin, int64_t row0, int64_t n_rows, float *out)
{
    ql_linear_decode_prepared(lin, row0, n_rows, out);
}

void ql_forward_matmul(ql_forward *fw, int site, const ql_linear *lin, const float *x, float *y,
                       int64_t n_tok)
{
    QL_ASSERT(n_tok <= fw->max_ctx && lin->n_in <= fw->max_in);
    const double t0 = prof_now(fw);
    if (fw->observer)
        fw->observer(fw->observer_ctx, site, lin, x, n_tok);
    const int64_t n_in = lin->n_in, n_out = lin->n_out;
    if (lin->product) {
        /* the linear's own kernel, e.g. an integer one on its quantized bytes */
        lin->product(lin->act_ctx, lin, x, y, n_tok);
    } else {
        const float *in = x;
        if (lin->act) {
            lin->act(lin->act_ctx, lin, x, fw->xq, n_tok);
            in = fw->xq;
        }
        /* y (n_tok, n_out) = in (n_tok, n_in) @ W^T, W (n_out, n_in), on gemm.h's fixed
         * tile grid: the result does not depend on the thread count
         * (tests/unit/test_synth.c). */
        ql_dot_wtype wt;
        if (ql_linear_direct(lin, &wt)) {
            /* F16/BF16 rows widened in the kernel: the bits of the decoded product */
            ql_dotgemm(n_tok, n_out, n_in, 1.0f, in, n_in, lin->src.data, wt, n_in, y, n_out);
        } else if (lin->w) {
            ql_gemm(true, n_tok, n_out, n_in, 1.0f, in, n_in, lin->w, n_in, y, n_out);
        } else {
            /* Not bound (the head, mostly): decoded tile by tile, the same tile grid. */
            QL_ASSERT(fw->tile_slots >= omp_get_max_threads() && "thread_slots() first");
            ql_gemm_decoded(n_tok, n_out, n_in, 1.0f, in, n_in, decode_tile, lin, fw->tiles,
                            fw->tile_slots, y, n_out);
        }
    }
    if (lin->act_post)
        lin->act_post(lin->act_ctx, lin, x, y, n_tok);
    if (lin->b) {
#pragma omp parallel for schedule(static) if (n_tok * n_out >= SERIAL_VALUES)
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t o = 0; o < n_out; o++)
                y[t * n_out + o] += lin->b[o];
    }
    if (fw->profile)
        fw->profile->products[lin->kind] += ql_now() - t0;
}

/* ------------------------------------------------------------------------ */
/* Blocks                                                                     */
/* The element-wise blocks (norms, RoPE, softmax, SwiGLU) run one row per task on
 * OpenMP's threads, the same pool as the products; a row's arithmetic never depends
 * on which thread runs it. */

/* out (n, d) = x / sqrt(mean(x^2) + eps) * w, per row; sums in double as ggml does. */
static void rmsnorm(float *out, const float *x, const float *w, int64_t n, int64_t d, float eps)
{
#pragma omp parallel for schedule(static) if (n * d >= SERIAL_VALUES)
    for (int64_t t = 0; t < n; t++) {
        const float *xr = x + t * d;
        float *o = out + t * d;
        double sum = 0.0;
        for (int64_t i = 0; i < d; i++)
            sum += (double)(xr[i] * xr[i]);
        const double mean = sum / (double)d;
        const float scale = 1.0f / sqrtf((float)(mean + (double)eps));
        for (int64_t i = 0; i < d; i++)
            o[i] = (xr[i] * scale) * w[i];
    }
}

/* cos/sin table (n, n_rot) for positions pos0..pos0+n-1: angle of pair i at position p
 * is p * base^(-2i/n_rot) * freq_scale / freq_factor[i], the power built by repeated
 * multiplication with theta_scale as ggml's rope cache does. */
static void rope_table(float *tab, const ql_hparams *hp, const float *freq_factors, int pos0,
                       int64_t n)
{
    const float theta_scale = powf(hp->rope_freq_base, -2.0f / (float)hp->n_rot);
    for (int64_t t = 0; t < n; t++) {
        float theta = (float)(pos0 + t);
        float *c = tab + t * hp->n_rot;
        for (int i = 0; i < hp->n_rot; i += 2) {
            const float ff = freq_factors ? freq_factors[i / 2] : 1.0f;
            const float angle = hp->rope_freq_scale * (theta / ff);
            c[i] = cosf(angle);
            c[i + 1] = sinf(angle);
            theta *= theta_scale;
        }
    }
}

/* The table for positions pos0..pos0+n-1, built when the last one was for others. */
static void rope_prepare(ql_forward *fw, const float *freq_factors, int pos0, int64_t n)
{
    if (fw->rope_n == n && fw->rope_pos0 == pos0 && fw->rope_freqs == freq_factors)
        return;
    rope_table(fw->rope, &fw->hp, freq_factors, pos0, n);
    fw->rope_pos0 = pos0;
    fw->rope_n = (int)n;
    fw->rope_freqs = freq_factors;
}

/* Rotates the first n_rot dims of each head of x (n, n_heads * head_dim) in place:
 * NORM pairs (2i, 2i+1), NEOX pairs (i, i + n_rot/2). */
static void rope(float *x, const float *tab, const ql_hparams *hp, int64_t n, int n_heads)
{
    const int hd = hp->head_dim, half = hp->n_rot / 2;
#pragma omp parallel for schedule(static) if (n * n_heads * hd >= SERIAL_VALUES)
    for (int64_t t = 0; t < n; t++) {
        const float *c = tab + t * hp->n_rot;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (t * n_heads + h) * hd;
            for (int i = 0; i < hp->n_rot; i += 2) {
                const int a = hp->rope_type == QL_ROPE_NORM ? i : i / 2;
                const int b = hp->rope_type == QL_ROPE_NORM ? i + 1 : i / 2 + half;
                const float x0 = v[a], x1 = v[b];
                v[a] = x0 * c[i] - x1 * c[i + 1];
                v[b] = x0 * c[i + 1] + x1 * c[i];
            }
        }
    }
}

/* Per-head RMSNorm of x (n, n_heads * head_dim) with weight w (head_dim,) (qwen3). */
static void head_norm(float *x, const float *w, const ql_hparams *hp, int64_t n, int n_heads)
{
    rmsnorm(x, x, w, n * n_heads, hp->head_dim, hp->norm_eps);
}

/* Per-thread buffers: a score buffer (ATT_TILE, max_ctx) for attention tasks and a
 * weight tile for products of unbound weights, one per thread that may run a task. */
static ql_status thread_slots(ql_forward *fw, ql_error *err)
{
    const int want = omp_get_max_threads();
    if (fw->score_slots < want) {
        const int64_t per =
            (fw->max_ctx < ATT_TILE ? fw->max_ctx : ATT_TILE) * (int64_t)fw->max_ctx;
        float *s = realloc(fw->scores, (size_t)(per * want) * sizeof *s);
        if (!s)
            return ql_error_set(err, QL_ENOMEM, "forward: out of memory for %d attention buffers",
                                want);
        fw->scores = s;
        fw->score_slots = want;
    }
    if (fw->hp.n_expert > 0 && fw->ex_slots < want) {
        const size_t n = (size_t)fw->max_ctx, E = (size_t)fw->hp.n_embd;
        const size_t F = (size_t)ql_hparams_ff_max(&fw->hp);
        fw->ex_work_floats = n * (2 * E + 2 * F + (size_t)fw->max_in);
        float *w = realloc(fw->ex_work, fw->ex_work_floats * (size_t)want * sizeof *w);
        if (!w)
            return ql_error_set(err, QL_ENOMEM, "forward: out of memory for %d expert workspaces",
                                want);
        fw->ex_work = w;
        fw->ex_slots = want;
    }
    if (fw->tile_slots < want) {
        int64_t rows = fw->hp.n_vocab > fw->max_in ? fw->hp.n_vocab : fw->max_in;
        if (fw->hp.n_expert > rows)
            rows = fw->hp.n_expert;
        const size_t per = ql_gemm_scratch_floats(rows, fw->max_in);
        float *t = realloc(fw->tiles, per * (size_t)want * sizeof *t);
        if (!t)
            return ql_error_set(err, QL_ENOMEM, "forward: out of memory for %d weight tiles", want);
        fw->tiles = t;
        fw->tile_slots = want;
    }
    return QL_OK;
}

/* Causal grouped-query attention for the chunk's queries q (n, n_head*hd) at positions
 * pos0.., over cached keys/values kc, vc (pos0+n, n_head_kv*hd); out (n, n_head*hd).
 * Query head h reads kv head g = h / (n_head / n_head_kv). Per head and tile of
 * up to ATT_TILE queries (one task each, on one thread):
 *   S (nt, n_kv) = Q_h K_g^T * scale               (sgemm)
 *   P = causal softmax of S per row: max subtracted, sum in double, later positions 0
 *   O_h (nt, hd) = P V_g                            (sgemm)
 * Tasks write disjoint parts of out, so the result does not depend on the thread
 * count. */
static void attention(ql_forward *fw, float *out, const float *q, const float *kc, const float *vc,
                      int pos0, int64_t n)
{
    const ql_hparams *hp = &fw->hp;
    const int hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    const int QD = hp->n_head * hd, KD = hp->n_head_kv * hd;
    const int M = fw->max_ctx;
    const float scale = 1.0f / sqrtf((float)hd);
    const ql_attn_rounding *r = &fw->rounding;
    const int n_tiles = (int)((n + ATT_TILE - 1) / ATT_TILE);
    const int64_t per_slot = (M < ATT_TILE ? M : ATT_TILE) * (int64_t)M;
    const int tasks = hp->n_head * n_tiles;
    const bool parallel = (int64_t)hp->n_head * n * (pos0 + n) * hd >= QL_GEMM_SERIAL_MACS;
#pragma omp parallel for schedule(dynamic, 1) if (parallel && tasks > 1)
    for (int task = 0; task < tasks; task++) {
        const int h = task / n_tiles, t0 = (task % n_tiles) * ATT_TILE;
        const int g = h / group;
        float *s = fw->scores + (int64_t)omp_get_thread_num() * per_slot;
        const int nt = (int)n - t0 < ATT_TILE ? (int)n - t0 : ATT_TILE;
        const int n_kv = pos0 + t0 + nt; /* positions the tile's last query sees */
        /* S (nt, n_kv) = Q_h K_g^T * scale */
        ql_gemm_serial(true, nt, n_kv, hd, scale, q + (int64_t)t0 * QD + h * hd, QD, kc + g * hd,
                       KD, s, M);
        for (int i = 0; i < nt; i++) {
            float *p = s + (int64_t)i * M;
            const int len = pos0 + t0 + i + 1; /* causal: positions 0..pos0+t */
            float max = -INFINITY;
            for (int j = 0; j < len; j++)
                if (p[j] > max)
                    max = p[j];
            double sum = 0.0;
            for (int j = 0; j < len; j++) {
                p[j] = expf(p[j] - max);
                sum += (double)p[j];
            }
            const float inv = (float)(1.0 / sum);
            for (int j = 0; j < len; j++)
                p[j] *= inv;
            if (r->round_p)
                r->round_p(r->ctx, p, 1, len);
            for (int j = len; j < n_kv; j++)
                p[j] = 0.0f;
        }
        /* O_h (nt, hd) = P (nt, n_kv) V_g (n_kv, hd) */
        ql_gemm_serial(false, nt, hd, n_kv, 1.0f, s, M, vc + g * hd, KD,
                       out + (int64_t)t0 * QD + h * hd, QD);
    }
}

/* h (n, n_ff) = silu(gate) * up, silu(x) = x / (1 + exp(-x)). */
static void swiglu(float *gate, const float *up, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= SERIAL_VALUES)
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        gate[i] = (g / (1.0f + expf(-g))) * up[i];
    }
}

static void add_inplace(float *x, const float *y, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= SERIAL_VALUES)
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* ------------------------------------------------------------------------ */
/* Feed-forward blocks                                                        */

/* proj (n, n_embd) = Wdown (silu(Wgate m) * (Wup m)), m = xb (n, n_embd): the dense
 * feed-forward of block l (biases, where the file has them, added by the products). */
static void dense_ffn(ql_forward *fw, const ql_weights *w, int l, int64_t n)
{
    const int sg = ql_weights_site(w, l, QL_SITE_GATE), su = ql_weights_site(w, l, QL_SITE_UP);
    const int sd = ql_weights_site(w, l, QL_SITE_DOWN);
    ql_forward_matmul(fw, sg, &w->lin[sg], fw->xb, fw->hg, n);
    ql_forward_matmul(fw, su, &w->lin[su], fw->xb, fw->hu, n);
    swiglu(fw->hg, fw->hu, n * w->lin[sg].n_out);
    ql_forward_matmul(fw, sd, &w->lin[sd], fw->hg, fw->proj, n);
}

/* Routing of n tokens from the router's logits in fw->probs (n, n_expert): per token
 * p = softmax(logits) (max subtracted, sum in double, as ggml), the k experts of
 * largest p in decreasing order (the lower index first on a tie), their p as weights,
 * divided by their sum (in double, as ggml's sum_rows) where the architecture
 * renormalises. */
static void route(ql_forward *fw, int64_t n)
{
    const ql_hparams *hp = &fw->hp;
    const int X = hp->n_expert, k = hp->n_expert_used;
#pragma omp parallel for schedule(static) if (n * X >= SERIAL_VALUES)
    for (int64_t t = 0; t < n; t++) {
        float *p = fw->probs + t * X;
        float max = -INFINITY;
        for (int e = 0; e < X; e++)
            if (p[e] > max)
                max = p[e];
        double sum = 0.0;
        for (int e = 0; e < X; e++) {
            p[e] = expf(p[e] - max);
            sum += (double)p[e];
        }
        const float inv = (float)(1.0 / sum);
        for (int e = 0; e < X; e++)
            p[e] *= inv;
        int32_t *sel = fw->sel + t * k;
        float *sw = fw->sel_w + t * k;
        /* top k by insertion: k is small (2 .. 8 in released models) */
        int n_sel = 0;
        for (int e = 0; e < X; e++) {
            int j = n_sel < k ? n_sel++ : k;
            if (j == k && !(p[e] > p[sel[k - 1]]))
                continue;
            if (j == k)
                j = k - 1;
            while (j > 0 && p[e] > p[sel[j - 1]]) {
                sel[j] = sel[j - 1];
                j--;
            }
            sel[j] = e;
        }
        double wsum = 0.0;
        for (int j = 0; j < k; j++) {
            sw[j] = p[sel[j]];
            wsum += (double)sw[j];
        }
        if (hp->expert_weights_norm)
            for (int j = 0; j < k; j++)
                sw[j] = sw[j] / (float)wsum;
    }
}

/* Groups the (token, slot) pairs by expert, tokens ascending within an expert (a
 * counting sort): ex_pairs[ex_start[e] .. ex_start[e + 1]) are expert e's. */
static void group_by_expert(ql_forward *fw, int64_t n)
{
    const int X = fw->hp.n_expert, k = fw->hp.n_expert_used;
    int32_t *start = fw->ex_start, *next = fw->ex_next;
    memset(start, 0, (size_t)(X + 1) * sizeof *start);
    for (int64_t i = 0; i < n * k; i++)
        start[fw->sel[i] + 1]++;
    for (int e = 0; e < X; e++)
        start[e + 1] += start[e];
    memcpy(next, start, (size_t)X * sizeof *next);
    for (int64_t i = 0; i < n * k; i++)
        fw->ex_pairs[next[fw->sel[i]]++] = (int32_t)i;
}

/* y (n_tok, n_out) = x W^T (+ hooks, bias) of one expert's view, as ql_forward_matmul
 * computes a product but with one sgemm on the calling thread (ql_gemm_serial) and the
 * caller's scratch for the rounded input: experts run side by side on several threads.
 * The observer is called when installed (then on the caller's thread only). */
static void expert_product(ql_forward *fw, int site, const ql_linear *lin, const float *x, float *y,
                           int64_t n_tok, float *xq)
{
    QL_ASSERT(lin->w && "an expert's layer is bound before its block runs");
    if (fw->observer)
        fw->observer(fw->observer_ctx, site, lin, x, n_tok);
    if (lin->product) {
        lin->product(lin->act_ctx, lin, x, y, n_tok);
    } else {
        const float *in = x;
        if (lin->act) {
            lin->act(lin->act_ctx, lin, x, xq, n_tok);
            in = xq;
        }
        if (ql_gemm_selected() == QL_GEMM_DOT) /* f32 rows of a weight: gemm.h */
            ql_dotgemm_serial(n_tok, lin->n_out, lin->n_in, 1.0f, in, lin->n_in, lin->w,
                              QL_DOT_F32, lin->n_in, y, lin->n_out);
        else
            ql_gemm_serial(true, n_tok, lin->n_out, lin->n_in, 1.0f, in, lin->n_in, lin->w,
                           lin->n_in, y, lin->n_out);
    }
    if (lin->act_post)
        lin->act_post(lin->act_ctx, lin, x, y, n_tok);
    if (lin->b)
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t o = 0; o < lin->n_out; o++)
                y[t * lin->n_out + o] += lin->b[o];
}

/* Expert e of block l's mixture on the tokens routed to it (fw->ex_pairs), in workspace
 * `slot`: gathered inputs, gate and up, SwiGLU, down, and the outputs times their weights
 * into slot_out (each (token, slot) pair its own row: threads write apart). */
static void run_expert(ql_forward *fw, const ql_weights *w, int sg, int su, int sd, int e, int slot)
{
    const int64_t E = fw->hp.n_embd, n = fw->max_ctx;
    const int k = fw->hp.n_expert_used;
    const int32_t *pairs = fw->ex_pairs + fw->ex_start[e];
    const int64_t c = fw->ex_start[e + 1] - fw->ex_start[e];
    if (c == 0)
        return;
    const int64_t F = ql_hparams_ff_max(&fw->hp);
    float *ex_in = fw->ex_work + (size_t)slot * fw->ex_work_floats;
    float *hg = ex_in + n * E, *hu = hg + n * F, *out = hu + n * F, *xq = out + n * E;
    /* ex_in (c, E) = the routed tokens' inputs */
    for (int64_t i = 0; i < c; i++)
        memcpy(ex_in + i * E, fw->xb + (int64_t)(pairs[i] / k) * E, (size_t)E * sizeof(float));
    ql_linear gate, up, down;
    ql_linear_expert(&w->lin[sg], e, &gate);
    ql_linear_expert(&w->lin[su], e, &up);
    ql_linear_expert(&w->lin[sd], e, &down);
    expert_product(fw, sg, &gate, ex_in, hg, c, xq);
    expert_product(fw, su, &up, ex_in, hu, c, xq);
    for (int64_t i = 0; i < c * gate.n_out; i++) {
        const float g = hg[i];
        hg[i] = (g / (1.0f + expf(-g))) * hu[i];
    }
    expert_product(fw, sd, &down, hg, out, c, xq);
    /* slot_out[t, j] = w_tj * out (ggml multiplies the expert outputs by their weights) */
    for (int64_t i = 0; i < c; i++) {
        const float wt = fw->sel_w[pairs[i]];
        const float *o = out + i * E;
        float *dst = fw->slot_out + (int64_t)pairs[i] * E;
        for (int64_t d = 0; d < E; d++)
            dst[d] = o[d] * wt;
    }
}

/* proj (n, n_embd) = the mixture of experts of block l on xb (n, n_embd):
 *   Σ_j w_tj · down_e(silu(gate_e m_t) * (up_e m_t)),  e = sel_tj, summed over j in
 *   order of decreasing probability (llama.cpp adds the k expert outputs in that order),
 * plus, with a shared expert, sigmoid(gate_inp_shexp m_t) · down_sh(silu(gate_sh m_t) *
 * (up_sh m_t)). Each expert multiplies only the tokens routed to it: their inputs are
 * gathered, one product per expert and kind, the outputs scattered back by slot; the
 * experts run side by side on the threads (run_expert). */
static void moe_ffn(ql_forward *fw, const ql_weights *w, int l, int64_t n)
{
    const ql_hparams *hp = &fw->hp;
    const int64_t E = hp->n_embd;
    const int X = hp->n_expert, k = hp->n_expert_used;
    const int sr = ql_weights_site(w, l, QL_SITE_GATE_INP);
    ql_forward_matmul(fw, sr, &w->lin[sr], fw->xb, fw->probs, n);
    route(fw, n);
    if (fw->route_observer)
        fw->route_observer(fw->route_ctx, l, fw->sel, fw->sel_w, n, k);
    group_by_expert(fw, n);

    const int sg = ql_weights_site(w, l, QL_SITE_GATE_EXPS);
    const int su = ql_weights_site(w, l, QL_SITE_UP_EXPS);
    const int sd = ql_weights_site(w, l, QL_SITE_DOWN_EXPS);
    /* Experts are independent: without an observer (which must see the products in
     * order, on the caller's thread) they are shared out among the threads, each expert's
     * products computed by the thread that takes it. Either way each product is one
     * sgemm (expert_product), so the result does not depend on the threads. */
    const bool spread = !fw->observer;
    const double t0 = prof_now(fw);
#pragma omp parallel for schedule(dynamic, 1) if (spread)
    for (int e = 0; e < X; e++)
        run_expert(fw, w, sg, su, sd, e, spread ? omp_get_thread_num() : 0);
    if (fw->profile)
        fw->profile->experts += ql_now() - t0;
        /* proj[t] = slot 0 + slot 1 + ... in slot order */
#pragma omp parallel for schedule(static) if (n * k * E >= SERIAL_VALUES)
    for (int64_t t = 0; t < n; t++) {
        float *dst = fw->proj + t * E;
        const float *src = fw->slot_out + t * k * E;
        memcpy(dst, src, (size_t)E * sizeof(float));
        for (int j = 1; j < k; j++)
            for (int64_t d = 0; d < E; d++)
                dst[d] += src[j * E + d];
    }
    if (hp->n_ff_shexp == 0)
        return;
    const int sgi = ql_weights_site(w, l, QL_SITE_GATE_INP_SHEXP);
    const int shg = ql_weights_site(w, l, QL_SITE_GATE_SHEXP);
    const int shu = ql_weights_site(w, l, QL_SITE_UP_SHEXP);
    const int shd = ql_weights_site(w, l, QL_SITE_DOWN_SHEXP);
    ql_forward_matmul(fw, sgi, &w->lin[sgi], fw->xb, fw->gate_sh, n);
    ql_forward_matmul(fw, shg, &w->lin[shg], fw->xb, fw->hg, n);
    ql_forward_matmul(fw, shu, &w->lin[shu], fw->xb, fw->hu, n);
    swiglu(fw->hg, fw->hu, n * w->lin[shg].n_out);
    ql_forward_matmul(fw, shd, &w->lin[shd], fw->hg, fw->ex_out, n);
    /* proj[t] += sigmoid(g_t) * shared[t] */
#pragma omp parallel for schedule(static) if (n * E >= SERIAL_VALUES)
    for (int64_t t = 0; t < n; t++) {
        const float g = 1.0f / (1.0f + expf(-fw->gate_sh[t]));
        const float *o = fw->ex_out + t * E;
        float *dst = fw->proj + t * E;
        for (int64_t d = 0; d < E; d++)
            dst[d] += o[d] * g;
    }
}

/* ------------------------------------------------------------------------ */
/* The pass                                                                   */

ql_status ql_forward_check_weights(const ql_forward *fw, const ql_weights *w, ql_error *err)
{
    const ql_hparams *hp = &fw->hp;
    if (w->n_layer != hp->n_layer || w->tok_embd.n_in != hp->n_embd ||
        w->tok_embd.n_out != hp->n_vocab)
        return ql_error_set(err, QL_EINVAL,
                            "forward: weight set (%d layers, embedding %lldx%lld) does not "
                            "match the model (%d layers, %dx%d)",
                            w->n_layer, (long long)w->tok_embd.n_out, (long long)w->tok_embd.n_in,
                            hp->n_layer, hp->n_vocab, hp->n_embd);
    for (int i = 0; i < w->n_lin; i++) {
        const ql_linear *l = &w->lin[i];
        int64_t in, rows;
        int n_expert;
        ql_site_dims(hp, l->kind, &in, &rows, &n_expert);
        const int64_t out = rows * n_expert;
        const bool has_values = l->w || l->src.data;
        if (!has_values || l->n_in != in || l->n_out != out || l->n_expert != n_expert)
            return ql_error_set(err, QL_EINVAL,
                                "forward: weight set site %d '%s' is %lldx%lld%s, the model "
                                "needs %lldx%lld",
                                i, l->name, (long long)l->n_in, (long long)l->n_out,
                                has_values ? "" : " without data", (long long)in, (long long)out);
        ql_status st = ql_linear_prepare(l, err);
        if (st)
            return st;
    }
    return QL_OK;
}

ql_status ql_forward_embed(ql_forward *fw, const ql_weights *w, const int32_t *tokens, int n_tok,
                           int pos0, float *x, ql_error *err)
{
    const ql_hparams *hp = &fw->hp;
    const int64_t E = hp->n_embd;
    for (int t = 0; t < n_tok; t++) {
        if (tokens[t] < 0 || tokens[t] >= hp->n_vocab)
            return ql_error_set(err, QL_EINVAL,
                                "forward: token id %d at position %d outside "
                                "the vocabulary (0..%d)",
                                (int)tokens[t], pos0 + t, hp->n_vocab - 1);
        ql_status st = ql_linear_decode_rows(&w->tok_embd, tokens[t], 1, x + t * E, err);
        if (st)
            return st;
    }
    return QL_OK;
}

ql_status ql_forward_block(ql_forward *fw, const ql_weights *w, int l, float *x, int n_tok,
                           int pos0, int out_first, int *n_out, ql_error *err)
{
    const ql_hparams *hp = &fw->hp;
    if (n_tok <= 0 || pos0 < 0 || (int64_t)pos0 + n_tok > fw->max_ctx)
        return ql_error_set(err, QL_EINVAL,
                            "forward: %d tokens at position %d do not fit the context of %d", n_tok,
                            pos0, fw->max_ctx);
    if (out_first < 0 || out_first >= n_tok)
        return ql_error_set(err, QL_EINVAL, "forward: first output row %d outside 0..%d", out_first,
                            n_tok - 1);
    QL_ASSERT(l >= 0 && l < hp->n_layer && ql_weights_layer_bound(w, l));
    const double tb = prof_now(fw);
    ql_status st = thread_slots(fw, err);
    if (st)
        return st;
    const int64_t E = hp->n_embd, hd = hp->head_dim;
    const int64_t QD = (int64_t)hp->n_head * hd, KD = (int64_t)hp->n_head_kv * hd;
    const ql_attn_rounding *r = &fw->rounding;
    const ql_layer_norms *nm = &w->norms[l];
    const int sq = ql_weights_site(w, l, QL_SITE_Q), sk = ql_weights_site(w, l, QL_SITE_K);
    const int sv = ql_weights_site(w, l, QL_SITE_V), so = ql_weights_site(w, l, QL_SITE_O);
    float *kc = fw->k_cache + (int64_t)l * fw->max_ctx * KD;
    float *vc = fw->v_cache + (int64_t)l * fw->max_ctx * KD;
    int64_t n = n_tok;
    rope_prepare(fw, w->rope_freqs, pos0, n);

    /* attention block */
    rmsnorm(fw->xb, x, nm->attn_norm, n, E, hp->norm_eps);
    ql_forward_matmul(fw, sq, &w->lin[sq], fw->xb, fw->q, n);
    ql_forward_matmul(fw, sk, &w->lin[sk], fw->xb, fw->k, n);
    ql_forward_matmul(fw, sv, &w->lin[sv], fw->xb, fw->v, n);
    if (nm->q_norm) {
        head_norm(fw->q, nm->q_norm, hp, n, hp->n_head);
        head_norm(fw->k, nm->k_norm, hp, n, hp->n_head_kv);
    }
    rope(fw->q, fw->rope, hp, n, hp->n_head);
    rope(fw->k, fw->rope, hp, n, hp->n_head_kv);
    /* K, V of this chunk into the cache at positions pos0.. (rounded to the cache type) */
    float *kdst = kc + (int64_t)pos0 * KD, *vdst = vc + (int64_t)pos0 * KD;
    memcpy(kdst, fw->k, (size_t)(n * KD) * sizeof(float));
    memcpy(vdst, fw->v, (size_t)(n * KD) * sizeof(float));
    if (r->round_k)
        r->round_k(r->ctx, kdst, n * hp->n_head_kv, hd);
    if (r->round_v)
        r->round_v(r->ctx, vdst, n * hp->n_head_kv, hd);
    if (r->round_q)
        r->round_q(r->ctx, fw->q, n * hp->n_head, hd);
    const double ta = prof_now(fw);
    attention(fw, fw->att, fw->q, kc, vc, pos0, n);
    if (fw->profile)
        fw->profile->attention += ql_now() - ta;

    if (out_first > 0) {
        /* drop rows without outputs, as llama.cpp does before the last projection */
        n -= out_first;
        memmove(x, x + (int64_t)out_first * E, (size_t)(n * E) * sizeof(float));
        memmove(fw->att, fw->att + (int64_t)out_first * QD, (size_t)(n * QD) * sizeof(float));
    }
    ql_forward_matmul(fw, so, &w->lin[so], fw->att, fw->proj, n);
    add_inplace(x, fw->proj, n * E);

    /* feed-forward block */
    rmsnorm(fw->xb, x, nm->ffn_norm, n, E, hp->norm_eps);
    if (ql_hparams_moe_layer(hp, l))
        moe_ffn(fw, w, l, n);
    else
        dense_ffn(fw, w, l, n);
    add_inplace(x, fw->proj, n * E);
    if (n_out)
        *n_out = (int)n;
    if (fw->profile)
        fw->profile->blocks += ql_now() - tb;
    return QL_OK;
}

void ql_forward_output_norm(ql_forward *fw, const ql_weights *w, const float *x, float *xn,
                            int64_t n)
{
    rmsnorm(xn, x, w->output_norm, n, fw->hp.n_embd, fw->hp.norm_eps);
}

ql_status ql_forward_head(ql_forward *fw, const ql_weights *w, const float *xn, float *logits,
                          int64_t n, ql_error *err)
{
    const ql_linear *head = &w->lin[ql_site_output(w)];
    ql_status st = thread_slots(fw, err);
    if (!st)
        st = ql_linear_prepare(head, err);
    if (st)
        return st;
    ql_forward_matmul(fw, ql_site_output(w), head, xn, logits, n);
    return QL_OK;
}

/* ql_forward_run's binding buffer, allocated when a weight set first needs it. */
static ql_status run_buffer(ql_forward *fw, const ql_weights *w, ql_error *err)
{
    if (!fw->layer_buf) {
        fw->layer_buf_floats = ql_weights_layer_floats(w);
        fw->layer_buf = malloc(fw->layer_buf_floats * sizeof(float));
        if (!fw->layer_buf)
            return ql_error_set(err, QL_ENOMEM, "forward: out of memory for one layer in f32");
    }
    return QL_OK;
}

ql_status ql_forward_run(ql_forward *fw, const ql_weights *w, const int32_t *tokens, int n_tok,
                         int pos0, int out_first, float *logits, ql_error *err)
{
    const ql_hparams *hp = &fw->hp;
    if (n_tok <= 0 || pos0 < 0 || (int64_t)pos0 + n_tok > fw->max_ctx)
        return ql_error_set(err, QL_EINVAL,
                            "forward: %d tokens at position %d do not fit the context of %d", n_tok,
                            pos0, fw->max_ctx);
    if (out_first < 0 || out_first >= n_tok)
        return ql_error_set(err, QL_EINVAL, "forward: first output row %d outside 0..%d", out_first,
                            n_tok - 1);
    ql_status st = ql_forward_check_weights(fw, w, err);
    if (!st)
        st = ql_forward_embed(fw, w, tokens, n_tok, pos0, fw->xrun, err);
    if (st)
        return st;
    /* The set is the caller's; binding only adds f32 values for the call's duration. */
    ql_weights *ww = (ql_weights *)w;
    int n = n_tok;
    for (int l = 0; l < hp->n_layer && !st; l++) {
        const bool bind = !ql_weights_layer_bound(w, l);
        if (bind && (st = run_buffer(fw, w, err)))
            break;
        if (bind && (st = ql_weights_bind_layer(ww, l, fw->layer_buf, fw->layer_buf_floats, err)))
            break;
        st = ql_forward_block(fw, w, l, fw->xrun, n, pos0, l == hp->n_layer - 1 ? out_first : 0, &n,
                              err);
        if (bind)
            ql_weights_unbind_layer(ww, l);
    }
    if (st)
        return st;
    /* final norm and LM head: logits (n, n_vocab) */
    ql_forward_output_norm(fw, w, fw->xrun, fw->xb, n);
    return ql_forward_head(fw, w, fw->xb, logits, n, err);
}
