/* Activation rounding: every block format goes through the type-traits table (the
 * functions that define the format), one block at a time through a stack buffer. */
#include "experiment/actquant.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/fp16.h"
#include "formats/qgemm.h"
#include "formats/quant_common.h"
#include "formats/quant_k.h"
#include "formats/quant_legacy.h"
#include "formats/types.h"

ql_actq ql_actq_for_mode(ql_act_mode mode, int32_t weight_type)
{
    switch (mode) {
    case QL_ACT_F32:
        return QL_ACTQ_F32;
    case QL_ACT_NATIVE:
        return ql_actq_native(weight_type);
    case QL_ACT_Q8_0:
        return QL_ACTQ_Q8_0;
    case QL_ACT_Q8_1:
        return QL_ACTQ_Q8_1;
    case QL_ACT_Q8_K:
        return QL_ACTQ_Q8_K;
    case QL_ACT_Q8X2:
        return QL_ACTQ_Q8X2;
    default:
        QL_ASSERT(!"unknown activation mode");
        return QL_ACTQ_F32;
    }
}

void ql_act_choose(ql_act_mode mode, int32_t weight_type, int64_t n_in, ql_act_choice *out)
{
    memset(out, 0, sizeof *out);
    out->requested = ql_actq_for_mode(mode, weight_type);
    out->used = out->requested;
    if (ql_actq_fits(out->requested, n_in)) {
        const ql_type_traits *tr = ql_type_get(weight_type);
        const ql_type_traits *st = tr ? ql_type_get(tr->storage) : NULL;
        out->needs_sums = out->used == QL_ACTQ_Q8_1 && st && st->block_min_offset != 0;
        out->has_kernel = st && st->integer_product && out->used == st->native_act;
        return;
    }
    /* The row does not split into the blocks: take the rounding of the weight type
     * llama-quantize's fallback would leave (see actquant.h). */
    out->fallback = true;
    out->used = out->requested == QL_ACTQ_Q8_K && ql_actq_fits(QL_ACTQ_Q8_0, n_in) ? QL_ACTQ_Q8_0
                                                                                   : QL_ACTQ_F16;
    snprintf(out->note, sizeof out->note,
             "%s activations need rows of a multiple of %lld values; %lld-wide input rounded "
             "to %s",
             ql_actq_name(out->requested), (long long)ql_actq_block(out->requested),
             (long long)n_in, ql_actq_name(out->used));
}

/* ------------------------------------------------------------------------- */
/* The transform of one product                                               */

ql_status ql_act_ctx_init(ql_act_ctx *c, ql_actq q, int64_t n_in, const int64_t *keep,
                          int64_t n_keep, ql_error *err)
{
    memset(c, 0, sizeof *c);
    if (q < 0 || q >= QL_ACTQ_COUNT)
        return ql_error_set(err, QL_EINVAL, "activation rounding id %d is unknown", (int)q);
    if (!ql_actq_fits(q, n_in))
        return ql_error_set(err, QL_EINVAL,
                            "%s activations need rows of a multiple of %lld values, not %lld",
                            ql_actq_name(q), (long long)ql_actq_block(q), (long long)n_in);
    if (n_keep < 0 || (n_keep > 0 && !keep))
        return ql_error_set(err, QL_EINVAL, "kept channel list of %lld entries without data",
                            (long long)n_keep);
    for (int64_t i = 0; i < n_keep; i++)
        if (keep[i] < 0 || keep[i] >= n_in || (i > 0 && keep[i] <= keep[i - 1]))
            return ql_error_set(err, QL_EINVAL,
                                "kept channel %lld at position %lld: channels must be "
                                "ascending and distinct within [0, %lld)",
                                (long long)keep[i], (long long)i, (long long)n_in);
    c->q = q;
    c->n_in = n_in;
    c->keep = n_keep > 0 ? keep : NULL;
    c->n_keep = n_keep;
    return QL_OK;
}

bool ql_act_ctx_is_identity(const ql_act_ctx *c)
{
    return c->q == QL_ACTQ_F32 && c->n_keep == 0;
}

ql_status ql_act_block_mins(int32_t type, const void *q, int64_t n_out, int64_t n_in, float *mins,
                            ql_error *err)
{
    const ql_type_traits *tr = ql_type_get(type);
    if (!tr || tr->block_min_offset == 0)
        return ql_error_set(err, QL_EINVAL, "block mins: %s has none", ql_type_name(type));
    if (n_in <= 0 || n_in % tr->block_size != 0)
        return ql_error_set(err, QL_EINVAL, "block mins: rows of %lld values", (long long)n_in);
    const int64_t n = n_out * (n_in / tr->block_size);
    const unsigned char *b = q;
    for (int64_t i = 0; i < n; i++) {
        uint16_t m;
        memcpy(&m, b + (size_t)i * tr->type_size + tr->block_min_offset, sizeof m);
        mins[i] = ql_fp16_to_fp32(m);
    }
    return QL_OK;
}

void ql_act_rows(const ql_act_ctx *c, const float *x, float *xq, int64_t n_rows)
{
    const int64_t n = c->n_in;
    for (int64_t t = 0; t < n_rows; t++) {
        const float *xr = x + t * n;
        float *yr = xq + t * n;
        if (c->n_keep == 0) {
            ql_actq_round(c->q, xr, yr, n);
            continue;
        }
        /* Kept channels must not set any block's scale: zero them, round the rest,
         * then write them back unrounded. */
        memcpy(yr, xr, (size_t)n * sizeof(float));
        for (int64_t i = 0; i < c->n_keep; i++)
            yr[c->keep[i]] = 0.0f;
        ql_actq_round(c->q, yr, yr, n);
        for (int64_t i = 0; i < c->n_keep; i++)
            yr[c->keep[i]] = xr[c->keep[i]];
    }
}

void ql_act_apply(void *ctx, const ql_linear *lin, const float *x, float *xq, int64_t n_tok)
{
    const ql_act_ctx *c = ctx;
    QL_ASSERT(lin->n_in == c->n_in);
    ql_act_rows(c, x, xq, n_tok);
}

void ql_act_post(void *ctx, const ql_linear *lin, const float *x, float *y, int64_t n_tok)
{
    const ql_act_ctx *c = ctx;
    /* lin may be a view of one expert: its rows row0 .. of the site's mins */
    QL_ASSERT(c->mins && c->q == QL_ACTQ_Q8_1 && lin->n_in == c->n_in &&
              lin->row0 + lin->n_out <= c->n_out);
    const int64_t n = c->n_in, nb = n / QL_QK8_1;
    const float *mins = c->mins + lin->row0 * nb;
    /* delta (n_tok, nb): s_b - D_b sum_j q_j per block of the rounded input, as ggml's
     * Q4_1/Q5_1 dot products see it (kept channels zeroed, as for the rounding) */
    float *delta = malloc((size_t)(n_tok * nb) * sizeof *delta);
    float *row = c->n_keep ? malloc((size_t)n * sizeof *row) : NULL;
    QL_ASSERT(delta && (row || !c->n_keep));
    for (int64_t t = 0; t < n_tok; t++) {
        const float *xr = x + t * n;
        if (row) {
            memcpy(row, xr, (size_t)n * sizeof *row);
            for (int64_t i = 0; i < c->n_keep; i++)
                row[c->keep[i]] = 0.0f;
            xr = row;
        }
        for (int64_t b = 0; b < nb; b++) {
            ql_block_q8_1 blk;
            ql_quantize_row_q8_1_ref(xr + b * QL_QK8_1, &blk, QL_QK8_1);
            int32_t sum = 0;
            for (int j = 0; j < QL_QK8_1; j++)
                sum += blk.qs[j];
            delta[t * nb + b] = (float)((double)ql_fp16_to_fp32(blk.s) -
                                        (double)ql_fp16_to_fp32(blk.d) * (double)sum);
        }
    }
    /* y (n_tok, n_out) += delta (n_tok, nb) mins^T (nb, n_out) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n_tok, (int)lin->n_out, (int)nb, 1.0f,
                delta, (int)nb, mins, (int)nb, 1.0f, y, (int)lin->n_out);
    free(delta);
    free(row);
}

void ql_act_product(void *ctx, const ql_linear *lin, const float *x, float *y, int64_t n_tok)
{
    const ql_act_ctx *c = ctx;
    /* lin may be a view of one expert: its rows row0 .. of the site's bytes */
    QL_ASSERT(c->q6_K && c->q == QL_ACTQ_Q8_K && c->n_keep == 0 && lin->n_in == c->n_in &&
              lin->row0 + lin->n_out <= c->n_out);
    /* xq (n_tok, n_in/256): the q8_K blocks llama.cpp quantizes the input into */
    const int64_t nb = c->n_in / QL_QK_K;
    ql_block_q8_K *xq = malloc((size_t)(n_tok * nb) * sizeof *xq);
    QL_ASSERT(xq);
    ql_quantize_row_q8_K_ref(x, xq, n_tok * c->n_in);
    ql_gemm_q6_K((const ql_block_q6_K *)c->q6_K + lin->row0 * nb, xq, y, n_tok, lin->n_out,
                 c->n_in);
    free(xq);
}

/* ------------------------------------------------------------------------- */
/* A whole weight set                                                          */

struct ql_act_plan {
    int n_sites;
    ql_act_choice *choice; /* (n_sites,) */
    ql_act_ctx *ctx;       /* (n_sites,) */
    float **mins;          /* (n_sites,) block mins for the q8_1 block-sum term, or NULL */
    int n_fallback;
};

void ql_act_site_types(const ql_weights *w, const ql_quant_plan *plan, int32_t *types)
{
    for (int s = 0; s < w->n_lin; s++) {
        types[s] = w->lin[s].src_type;
        for (int64_t i = 0; i < plan->n; i++)
            if (strcmp(plan->entries[i].name, w->lin[s].name) == 0) {
                types[s] = plan->entries[i].used;
                break;
            }
    }
}

ql_status ql_act_plan_build(ql_act_plan **out, const ql_weights *w, ql_act_mode mode,
                            const int32_t *types, const void *const *site_q,
                            const ql_outlier_set *outliers, ql_error *err)
{
    *out = NULL;
    if (mode < 0 || mode >= QL_ACT_COUNT)
        return ql_error_set(err, QL_EINVAL, "activation mode id %d is unknown", (int)mode);
    if (outliers && outliers->n_sites != w->n_lin)
        return ql_error_set(err, QL_EINVAL,
                            "outlier channel lists for %d sites, the weight set has %d",
                            outliers->n_sites, w->n_lin);
    ql_act_plan *p = calloc(1, sizeof *p);
    if (!p || !(p->choice = calloc((size_t)w->n_lin, sizeof *p->choice)) ||
        !(p->ctx = calloc((size_t)w->n_lin, sizeof *p->ctx)) ||
        !(p->mins = calloc((size_t)w->n_lin, sizeof *p->mins))) {
        ql_act_plan_free(p);
        return ql_error_set(err, QL_ENOMEM, "activation plan: out of memory");
    }
    p->n_sites = w->n_lin;
    for (int s = 0; s < w->n_lin; s++) {
        const ql_linear *lin = &w->lin[s];
        ql_act_choose(mode, types[s], lin->n_in, &p->choice[s]);
        p->n_fallback += p->choice[s].fallback;
        const ql_outlier_cols *oc = outliers ? &outliers->site[s] : NULL;
        if (oc && oc->n_in != lin->n_in) {
            ql_act_plan_free(p);
            return ql_error_set(err, QL_EINVAL,
                                "site %d '%s': outlier channels of a %lld-wide input for a "
                                "%lld-wide product",
                                s, lin->name, (long long)oc->n_in, (long long)lin->n_in);
        }
        ql_status st = ql_act_ctx_init(&p->ctx[s], p->choice[s].used, lin->n_in,
                                       oc ? oc->cols : NULL, oc ? oc->n : 0, err);
        if (!st && p->choice[s].needs_sums && site_q && site_q[s]) {
            const int64_t n = lin->n_out * (lin->n_in / QL_QK8_1);
            const ql_type_traits *tr = ql_type_get(types[s]);
            if (!(p->mins[s] = malloc((size_t)n * sizeof(float))))
                st = ql_error_set(err, QL_ENOMEM, "out of memory for block mins");
            else
                st = ql_act_block_mins(tr->storage, site_q[s], lin->n_out, lin->n_in, p->mins[s],
                                       err);
            p->ctx[s].mins = p->mins[s];
            p->ctx[s].n_out = lin->n_out;
            p->choice[s].block_sums = !st;
        }
        if (!st && p->choice[s].has_kernel && p->ctx[s].n_keep == 0) {
            /* the bytes the integer product reads: the config's, else the source's */
            const void *q = site_q ? site_q[s] : NULL;
            if (!q && lin->src.type == types[s] && lin->src.n_exact == 0)
                q = lin->src.data;
            p->ctx[s].q6_K = q;
            p->ctx[s].n_out = lin->n_out;
            p->choice[s].integer = q != NULL;
        }
        if (st) {
            ql_act_plan_free(p);
            return ql_error_prefix(err, "site %d '%s': ", s, lin->name);
        }
    }
    *out = p;
    return QL_OK;
}

void ql_act_plan_free(ql_act_plan *p)
{
    if (!p)
        return;
    if (p->mins)
        for (int s = 0; s < p->n_sites; s++)
            free(p->mins[s]);
    free(p->mins);
    free(p->choice);
    free(p->ctx);
    free(p);
}

void ql_act_plan_install(const ql_act_plan *p, ql_weights *w)
{
    QL_ASSERT(p->n_sites == w->n_lin);
    for (int s = 0; s < w->n_lin; s++) {
        const bool identity = ql_act_ctx_is_identity(&p->ctx[s]);
        w->lin[s].act = identity ? NULL : ql_act_apply;
        w->lin[s].act_ctx = identity ? NULL : (void *)&p->ctx[s];
        w->lin[s].act_post = p->ctx[s].mins ? ql_act_post : NULL;
        w->lin[s].product = p->ctx[s].q6_K ? ql_act_product : NULL;
    }
}

const ql_act_choice *ql_act_plan_choice(const ql_act_plan *p, int site)
{
    QL_ASSERT(site >= 0 && site < p->n_sites);
    return &p->choice[site];
}

int ql_act_plan_n_fallback(const ql_act_plan *p)
{
    return p->n_fallback;
}
