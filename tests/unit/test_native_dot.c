/* act_mode native on real rows with 256-multiple widths (../shared/models/tiny256.gguf):
 * for every weight type with a native product, the product qlab's forward pass computes
 * (the plan's activation rounding, the f32 product of the decoded weights, the q8_1
 * block-sum term, or Q6_K's integer kernel) against this file's own re-implementation
 * of the dot product ggml-cpu runs for that type, written from the block layouts:
 * integer sums per block, the f32 product of the block scales, the q8_1 block sums s
 * and the q8_K block sums as ggml uses them. The products agree within f32 rounding
 * (a bound per output, below), and Q6_K's bit for bit with ggml's AVX2 arithmetic.
 * The IQ lattice types and TQ1_0 are checked against the exact product of their
 * decoded values, which their ggml dot products factor over exactly.
 * Inputs are what each product sees in a forward pass of tiny256; the weights are
 * tiny256's, quantized with importance weights from those inputs. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "base/util.h"
#include "experiment/actquant.h"
#include "formats/quant_iq4.h"
#include "formats/quant_k.h"
#include "formats/quant_legacy.h"
#include "formats/quant_ternary.h"
#include "formats/types.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/quant.h"
#include "qltest.h"

#define N_TOK 32

/* |y - ggml| <= (n_in + ROUNDINGS) * u * sum_j |w_j x_j|, u = 2^-24: the fake-quant
 * product rounds n_in products and their n_in - 1 partial sums (first order: n_in + 1
 * terms), the decoded weights and activations once each, the block-sum term of q8_1
 * once more; ggml rounds the product of the block scales and its own sums (at most
 * n_in / 32 + 3). 8 covers the constant terms; n_in dominates. */
#define ROUNDINGS 8

static const int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                         1,    13,   25,  38,  53,  69,  89,  113};

/* ---- the inputs each product sees ---- */

typedef struct {
    int sites[3];
    float *x[3]; /* (N_TOK, n_in) copies */
} capture;

static void observe(void *ctx, int site, const ql_linear *lin, const float *x, int64_t n_tok)
{
    capture *c = ctx;
    for (int i = 0; i < 3; i++)
        if (c->sites[i] == site && n_tok == N_TOK) {
            c->x[i] = malloc((size_t)(n_tok * lin->n_in) * sizeof(float));
            memcpy(c->x[i], x, (size_t)(n_tok * lin->n_in) * sizeof(float));
        }
}

/* ---- ggml's dot products, from the block layouts ---- */

/* One weight block in integer form: value j = D * lv[j] * sc[j / sub] + M * mn[j / sub]
 * (M = 0 without mins), the way ggml's dot products see it. */
typedef struct {
    int lv[256];
    int sc[16], mn[16];
    int sub;        /* values per scale (the block size when there is one scale) */
    float D, M;     /* fp16 scales widened; M is added (Q4_1/Q5_1) or subtracted below */
    bool minus_min; /* K-quants: value = D sc lv - M mn */
} int_block;

static int nibble(const uint8_t *qs, int j, int half)
{
    return j < half ? qs[j] & 15 : qs[j - half] >> 4;
}

/* Q2_K/Q3_K/TQ2_0 2-bit levels: byte l of 32-byte group g holds values 128g + l + 32k. */
static int two_bits(const uint8_t *qs, int e)
{
    return qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32)) & 3;
}

/* Q4_K/Q5_K six-bit scale and min of sub-block j (layout in quant_k.h). */
static void k4_scale(const uint8_t *s, int j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* Decodes block b of a row of type t; false for the types checked by their values. */
static bool decode(int32_t t, const void *row, int64_t b, int_block *o)
{
    memset(o, 0, sizeof *o);
    switch (t) {
    case QL_TYPE_Q4_0: {
        const ql_block_q4_0 *x = (const ql_block_q4_0 *)row + b;
        for (int j = 0; j < 32; j++)
            o->lv[j] = nibble(x->qs, j, 16) - 8;
        o->D = ql_fp16_to_fp32(x->d), o->sub = 32, o->sc[0] = 1;
        return true;
    }
    case QL_TYPE_Q4_1: {
        const ql_block_q4_1 *x = (const ql_block_q4_1 *)row + b;
        for (int j = 0; j < 32; j++)
            o->lv[j] = nibble(x->qs, j, 16);
        o->D = ql_fp16_to_fp32(x->d), o->M = ql_fp16_to_fp32(x->m), o->sub = 32;
        o->sc[0] = o->mn[0] = 1;
        return true;
    }
    case QL_TYPE_Q5_0:
    case QL_TYPE_Q5_1: {
        const bool one = t == QL_TYPE_Q5_1;
        const uint8_t *qh =
            one ? ((const ql_block_q5_1 *)row + b)->qh : ((const ql_block_q5_0 *)row + b)->qh;
        const uint8_t *qs =
            one ? ((const ql_block_q5_1 *)row + b)->qs : ((const ql_block_q5_0 *)row + b)->qs;
        uint32_t h;
        memcpy(&h, qh, 4);
        for (int j = 0; j < 32; j++)
            o->lv[j] = (nibble(qs, j, 16) | (int)(h >> j & 1) << 4) - (one ? 0 : 16);
        o->D = ql_fp16_to_fp32(one ? ((const ql_block_q5_1 *)row + b)->d
                                   : ((const ql_block_q5_0 *)row + b)->d);
        o->M = one ? ql_fp16_to_fp32(((const ql_block_q5_1 *)row + b)->m) : 0.0f;
        o->sub = 32, o->sc[0] = 1, o->mn[0] = one;
        return true;
    }
    case QL_TYPE_Q8_0: {
        const ql_block_q8_0 *x = (const ql_block_q8_0 *)row + b;
        for (int j = 0; j < 32; j++)
            o->lv[j] = x->qs[j];
        o->D = ql_fp16_to_fp32(x->d), o->sub = 32, o->sc[0] = 1;
        return true;
    }
    case QL_TYPE_IQ4_NL: {
        const ql_block_iq4_nl *x = (const ql_block_iq4_nl *)row + b;
        for (int j = 0; j < 32; j++)
            o->lv[j] = kvalues_iq4nl[nibble(x->qs, j, 16)];
        o->D = ql_fp16_to_fp32(x->d), o->sub = 32, o->sc[0] = 1;
        return true;
    }
    case QL_TYPE_Q2_K: {
        const ql_block_q2_K *x = (const ql_block_q2_K *)row + b;
        for (int e = 0; e < 256; e++)
            o->lv[e] = two_bits(x->qs, e);
        for (int j = 0; j < 16; j++)
            o->sc[j] = x->scales[j] & 15, o->mn[j] = x->scales[j] >> 4;
        o->D = ql_fp16_to_fp32(x->d), o->M = ql_fp16_to_fp32(x->dmin);
        o->sub = 16, o->minus_min = true;
        return true;
    }
    case QL_TYPE_Q3_K: {
        const ql_block_q3_K *x = (const ql_block_q3_K *)row + b;
        for (int e = 0; e < 256; e++)
            o->lv[e] = two_bits(x->qs, e) - ((x->hmask[e % 32] >> (e / 32) & 1) ? 0 : 4);
        for (int j = 0; j < 16; j++)
            o->sc[j] = ((x->scales[j % 8] >> (4 * (j / 8)) & 15) |
                        (x->scales[8 + j % 4] >> (2 * (j / 4)) & 3) << 4) -
                       32;
        o->D = ql_fp16_to_fp32(x->d), o->sub = 16;
        return true;
    }
    case QL_TYPE_Q4_K:
    case QL_TYPE_Q5_K: {
        const bool five = t == QL_TYPE_Q5_K;
        const ql_block_q4_K *x4 = (const ql_block_q4_K *)row + b;
        const ql_block_q5_K *x5 = (const ql_block_q5_K *)row + b;
        const uint8_t *qs = five ? x5->qs : x4->qs;
        for (int e = 0; e < 256; e++) {
            /* 32-byte group g: values 64g + l (low nibble), 64g + 32 + l (high) */
            const uint8_t byte = qs[32 * (e / 64) + e % 32];
            o->lv[e] = (e % 64) < 32 ? byte & 15 : byte >> 4;
            if (five)
                o->lv[e] |= (x5->qh[e % 32] >> (e / 32) & 1) << 4;
        }
        for (int j = 0; j < 8; j++)
            k4_scale(five ? x5->scales : x4->scales, j, &o->sc[j], &o->mn[j]);
        o->D = ql_fp16_to_fp32(five ? x5->d : x4->d);
        o->M = ql_fp16_to_fp32(five ? x5->dmin : x4->dmin);
        o->sub = 32, o->minus_min = true;
        return true;
    }
    case QL_TYPE_Q6_K: {
        const ql_block_q6_K *x = (const ql_block_q6_K *)row + b;
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int a = x->ql[64 * h + l], c = x->ql[64 * h + 32 + l];
                const int hb = x->qh[32 * h + l];
                o->lv[128 * h + l] = ((a & 15) | (hb & 3) << 4) - 32;
                o->lv[128 * h + 32 + l] = ((c & 15) | (hb >> 2 & 3) << 4) - 32;
                o->lv[128 * h + 64 + l] = ((a >> 4) | (hb >> 4 & 3) << 4) - 32;
                o->lv[128 * h + 96 + l] = ((c >> 4) | (hb >> 6 & 3) << 4) - 32;
            }
        for (int j = 0; j < 16; j++)
            o->sc[j] = x->scales[j];
        o->D = ql_fp16_to_fp32(x->d), o->sub = 16;
        return true;
    }
    case QL_TYPE_IQ4_XS: {
        const ql_block_iq4_xs *x = (const ql_block_iq4_xs *)row + b;
        for (int e = 0; e < 256; e++)
            o->lv[e] = kvalues_iq4nl[nibble(x->qs + 16 * (e / 32), e % 32, 16)];
        for (int j = 0; j < 8; j++)
            o->sc[j] =
                ((x->scales_l[j / 2] >> (4 * (j % 2)) & 15) | (x->scales_h >> (2 * j) & 3) << 4) -
                32;
        o->D = ql_fp16_to_fp32(x->d), o->sub = 32;
        return true;
    }
    case QL_TYPE_TQ2_0: {
        const ql_block_tq2_0 *x = (const ql_block_tq2_0 *)row + b;
        for (int e = 0; e < 256; e++)
            o->lv[e] = two_bits(x->qs, e) - 1;
        o->D = ql_fp16_to_fp32(x->d), o->sub = 256, o->sc[0] = 1;
        return true;
    }
    default:
        return false;
    }
}

/* ggml's dot product of weight row w (type t, n values) with the activations x
 * rounded to the type's vec_dot_type, in double except where ggml rounds in f32: the
 * product of the block scales. Also sum |w_j x_j|. */
static double ggml_dot(int32_t t, ql_actq aq, const void *w, const float *x, int64_t n,
                       double *abs_sum)
{
    double y = 0;
    *abs_sum = 0;
    const int64_t bs = aq == QL_ACTQ_Q8_K ? 256 : 32;
    for (int64_t b = 0; b < n / bs; b++) {
        int_block ib;
        QL_ASSERT(decode(t, w, b, &ib));
        int v[256];
        float dx, sx = 0;
        int bsum[16] = {0};
        if (aq == QL_ACTQ_Q8_K) {
            ql_block_q8_K q;
            ql_quantize_row_q8_K_ref(x + b * bs, &q, bs);
            for (int j = 0; j < 256; j++)
                v[j] = q.qs[j];
            for (int j = 0; j < 16; j++)
                bsum[j] = q.bsums[j];
            dx = q.d;
        } else {
            ql_block_q8_1 q; /* q8_0 has the same d and levels (actquant.h) */
            ql_quantize_row_q8_1_ref(x + b * bs, &q, bs);
            for (int j = 0; j < 32; j++)
                v[j] = q.qs[j];
            dx = ql_fp16_to_fp32(q.d);
            sx = ql_fp16_to_fp32(q.s);
        }
        const float d = dx * ib.D; /* f32, as ggml */
        int64_t isum = 0;
        for (int j = 0; j < bs; j++) {
            isum += (int64_t)ib.sc[j / ib.sub] * ib.lv[j] * v[j];
            const double wv = (double)ib.D * ib.sc[j / ib.sub] * ib.lv[j] +
                              (ib.minus_min ? -1.0 : 1.0) * (double)ib.M * ib.mn[j / ib.sub];
            *abs_sum += fabs(wv * (double)dx * v[j]);
        }
        y += (double)d * (double)isum;
        if (ib.minus_min) {
            /* K-quant mins: dmin times the sub-block mins times the q8_K block sums */
            int64_t msum = 0;
            for (int j = 0; j < 256 / ib.sub; j++) {
                int s = 0;
                for (int k = 0; k < ib.sub / 16; k++)
                    s += bsum[j * ib.sub / 16 + k];
                msum += (int64_t)ib.mn[j] * s;
            }
            y -= (double)(dx * ib.M) * (double)msum;
        } else if (ib.mn[0]) {
            y += (double)ib.M * (double)sx; /* Q4_1/Q5_1: m times q8_1's s */
        }
    }
    return y;
}

/* ggml-cpu's AVX2 Q6_K kernel in its f32 steps (qgemm.h): eight int32 lanes per block,
 * lane k holding positions 4k..4k+3 of every 32-value chunk, one fused multiply-add
 * per lane and block, the lanes summed as its hsum_float_8 does. */
static float q6_K_avx2_dot(const void *w, const float *x, int64_t n)
{
    float acc[8] = {0};
    for (int64_t b = 0; b < n / 256; b++) {
        int_block ib;
        decode(QL_TYPE_Q6_K, w, b, &ib);
        ql_block_q8_K q;
        ql_quantize_row_q8_K_ref(x + b * 256, &q, 256);
        int32_t lane[8] = {0};
        for (int e = 0; e < 256; e++)
            lane[(e % 32) / 4] += ib.sc[e / 16] * ib.lv[e] * q.qs[e];
        const float d = q.d * ib.D;
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* The exact product of the decoded weights and the rounded activations (the types
 * whose dot products factor over their decoded values). */
static double value_dot(const float *wd, const float *xq, int64_t n, double *abs_sum)
{
    double y = 0;
    *abs_sum = 0;
    for (int64_t j = 0; j < n; j++) {
        y += (double)wd[j] * (double)xq[j];
        *abs_sum += fabs((double)wd[j] * (double)xq[j]);
    }
    return y;
}

/* ---- one type at one site ---- */

typedef struct {
    const ql_model *m;
    ql_forward *fw;
    int site;
    const float *x; /* (N_TOK, n_in) */
    const float *imatrix;
} site_case;

/* Runs the site's product through the forward pass's seam with weights of type t and
 * returns how many outputs break the bound (-1 when the type is not checked here). */
static int check_type(const site_case *sc, const ql_type_traits *tr, bool with_bytes, bool *integer)
{
    ql_error err;
    const ql_linear *ref = &sc->m->weights->lin[sc->site];
    const int64_t n_in = ref->n_in, n_out = ref->n_out;
    const size_t bytes = ql_row_size(tr->type, n_in) * (size_t)n_out;
    void *q = malloc(bytes);
    float *wd = malloc((size_t)(n_in * n_out) * sizeof *wd);
    float *y = malloc((size_t)(N_TOK * n_out) * sizeof *y);
    float *xq = malloc((size_t)(N_TOK * n_in) * sizeof *xq);
    QL_ASSERT(ref->src.type == QL_TYPE_F32 && q && wd && y && xq);
    int bad = -1;
    if (ql_type_prepare(tr->type, &err) ||
        ql_quant_tensor(tr->type, ref->src.data, n_out, n_in, sc->imatrix, q, bytes, NULL, &err) ||
        ql_dequant_tensor(tr->type, q, bytes, n_out, n_in, wd, &err)) {
        CHECK_MSG(false, "%s: %s", tr->name, err.msg);
        goto out;
    }
    /* the configuration's weight set, as the harness builds it: decoded values bound,
     * the quantized bytes given to the activation plan */
    ql_weights *ws;
    CHECK_OK(ql_weights_copy(&ws, sc->m->weights, &err), &err);
    ql_linear_set_weights(&ws->lin[sc->site], wd, false);
    int32_t types[64];
    const void *site_q[64] = {0};
    QL_ASSERT(ws->n_lin <= 64);
    for (int s = 0; s < ws->n_lin; s++)
        types[s] = QL_TYPE_F32;
    types[sc->site] = tr->type;
    site_q[sc->site] = with_bytes ? q : NULL;
    ql_act_plan *ap;
    CHECK_OK(ql_act_plan_build(&ap, ws, QL_ACT_NATIVE, types, site_q, NULL, &err), &err);
    ql_act_plan_install(ap, ws);
    const ql_act_choice *ch = ql_act_plan_choice(ap, sc->site);
    *integer = ch->integer;
    ql_forward_matmul(sc->fw, sc->site, &ws->lin[sc->site], sc->x, y, N_TOK);
    ql_actq_round(ch->used, sc->x, xq, N_TOK * n_in);

    bad = 0;
    int not_ggml = 0;
    double worst = 0;
    const size_t row = ql_row_size(tr->type, n_in);
    int_block probe;
    const bool by_ints = decode(tr->type, q, 0, &probe);
    for (int64_t t = 0; t < N_TOK; t++)
        for (int64_t o = 0; o < n_out; o++) {
            double abs_sum;
            const double g = by_ints ? ggml_dot(tr->type, ch->used, (const char *)q + o * row,
                                                sc->x + t * n_in, n_in, &abs_sum)
                                     : value_dot(wd + o * n_in, xq + t * n_in, n_in, &abs_sum);
            const double e = fabs((double)y[t * n_out + o] - g);
            bad += e > (double)(n_in + ROUNDINGS) * 0x1p-24 * abs_sum;
            if (ch->integer) {
                const float a = q6_K_avx2_dot((const char *)q + o * row, sc->x + t * n_in, n_in);
                not_ggml += memcmp(&a, &y[t * n_out + o], sizeof a) != 0;
            }
            if (abs_sum > 0)
                worst = fmax(worst, e / abs_sum);
        }
    printf("  %-8s %-5s %s%s: |qlab - ggml| <= %.2g of sum |w x|, %d outputs beyond the bound\n",
           tr->name, ql_actq_name(ch->used), by_ints ? "integer dot" : "decoded values",
           ch->integer  ? " (integer kernel)"
           : with_bytes ? ""
                        : " (no weight bytes: no q8_1 term)",
           worst, bad);
    CHECK_MSG(not_ggml == 0, "%s: %d outputs differ from ggml's AVX2 arithmetic", tr->name,
              not_ggml);
    ql_act_plan_free(ap);
    ql_weights_free(ws);
out:
    free(q);
    free(wd);
    free(y);
    free(xq);
    return bad;
}

int main(void)
{
    const char *path = qlt_shared("models/tiny256.gguf");
    ql_error err;
    ql_model *m;
    if (ql_model_load(&m, path, &err) != QL_OK)
        qlt_skip("tiny256.gguf not loadable (../shared/models)");
    ql_forward *fw;
    CHECK_OK(ql_forward_alloc(&fw, &m->hp, N_TOK, &err), &err);
    /* inputs of a 256-wide (blk.0.attn_q), a 768-wide (blk.1.ffn_down) and the head's
     * product over a chunk of pseudo-random tokens */
    capture cap = {.sites = {ql_weights_site(m->weights, 0, QL_SITE_Q),
                             ql_weights_site(m->weights, m->hp.n_layer - 1, QL_SITE_DOWN),
                             ql_site_output(m->weights)}};
    int32_t tok[N_TOK];
    uint32_t s = 99;
    tok[0] = 1;
    for (int i = 1; i < N_TOK; i++) {
        s = s * 1664525u + 1013904223u;
        tok[i] = (int32_t)((s >> 8) % (uint32_t)m->hp.n_vocab);
    }
    float *logits = malloc((size_t)N_TOK * m->hp.n_vocab * sizeof *logits);
    ql_forward_set_observer(fw, observe, &cap);
    CHECK_OK(ql_forward_run(fw, m->weights, tok, N_TOK, 0, 0, logits, &err), &err);
    ql_forward_set_observer(fw, NULL, NULL);

    const ql_type_traits *list[64];
    const int n_types = ql_type_list(list, 64);
    int n_checked = 0;
    for (int i = 0; i < 3; i++) {
        const ql_linear *lin = &m->weights->lin[cap.sites[i]];
        CHECK(cap.x[i] != NULL && lin->n_in % 256 == 0);
        if (!cap.x[i])
            continue;
        /* importance: mean x^2 of the site's inputs (IQ2_XXS, IQ2_XS, IQ1_S need one) */
        float *im = calloc((size_t)lin->n_in, sizeof *im);
        for (int64_t t = 0; t < N_TOK; t++)
            for (int64_t j = 0; j < lin->n_in; j++)
                im[j] += cap.x[i][t * lin->n_in + j] * cap.x[i][t * lin->n_in + j] / N_TOK;
        printf("%s (%lld x %lld):\n", lin->name, (long long)lin->n_out, (long long)lin->n_in);
        const site_case sc = {.m = m, .fw = fw, .site = cap.sites[i], .x = cap.x[i], .imatrix = im};
        for (int k = 0; k < n_types; k++) {
            const ql_type_traits *tr = list[k];
            /* the weight types a GGUF holds whose products round their activations */
            if (!ql_type_is_gguf_weight(tr) || tr->native_act == QL_ACTQ_F32 || !tr->quantize ||
                tr->storage != tr->type)
                continue;
            bool integer = false;
            CHECK_MSG(check_type(&sc, tr, true, &integer) == 0, "%s at %s", tr->name, lin->name);
            n_checked++;
            CHECK_MSG(integer == (tr->type == QL_TYPE_Q6_K), "%s: integer kernel %d", tr->name,
                      (int)integer);
            /* the bound is tight enough to see q8_1's block-sum term missing */
            if (tr->type == QL_TYPE_Q4_1 || tr->type == QL_TYPE_Q5_1)
                CHECK_MSG(check_type(&sc, tr, false, &integer) > 0, "%s without the block-sum term",
                          tr->name);
        }
        free(im);
        free(cap.x[i]);
    }
    printf("%d type x site products checked\n", n_checked);
    CHECK(n_checked >= 3 * 20);
    free(logits);
    ql_forward_free(fw);
    ql_model_free(m);
    return qlt_done();
}
