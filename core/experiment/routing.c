/* Routing of a mixture of experts against the reference's (routing.h). */
#include "experiment/routing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ql_routes {
    int n_layer, n_expert, k;
    int n_moe; /* MoE blocks */
    int *slot; /* (n_layer,) block -> its index among the MoE blocks, -1 for dense */
    int64_t n_chunks;
    int n_scored, first;
    int16_t *sel; /* (n_chunks, n_moe, n_scored, k) */
};

ql_status ql_routes_alloc(ql_routes **out, const ql_hparams *hp, int64_t n_chunks, int n_scored,
                          int first, ql_error *err)
{
    *out = NULL;
    QL_ASSERT(hp->n_expert > 0 && hp->n_expert <= INT16_MAX);
    ql_routes *r = calloc(1, sizeof *r);
    if (!r)
        return ql_error_set(err, QL_ENOMEM, "out of memory for the reference's routes");
    r->n_layer = hp->n_layer;
    r->n_expert = hp->n_expert;
    r->k = hp->n_expert_used;
    r->n_chunks = n_chunks;
    r->n_scored = n_scored;
    r->first = first;
    r->slot = malloc((size_t)hp->n_layer * sizeof *r->slot);
    for (int l = 0; r->slot && l < hp->n_layer; l++)
        r->slot[l] = ql_hparams_moe_layer(hp, l) ? r->n_moe++ : -1;
    const size_t n = (size_t)n_chunks * (size_t)r->n_moe * (size_t)n_scored * (size_t)r->k;
    r->sel = calloc(n ? n : 1, sizeof *r->sel);
    if (!r->slot || !r->sel) {
        ql_routes_free(r);
        return ql_error_set(err, QL_ENOMEM,
                            "out of memory for the reference's routes (%zu expert indices)", n);
    }
    *out = r;
    return QL_OK;
}

void ql_routes_free(ql_routes *r)
{
    if (!r)
        return;
    free(r->slot);
    free(r->sel);
    free(r);
}

int16_t *ql_routes_data(ql_routes *r)
{
    return r->sel;
}

const int16_t *ql_routes_cdata(const ql_routes *r)
{
    return r->sel;
}

size_t ql_routes_bytes(const ql_routes *r)
{
    return (size_t)r->n_chunks * (size_t)r->n_moe * (size_t)r->n_scored * (size_t)r->k *
           sizeof *r->sel;
}

bool ql_routes_valid(const ql_routes *r)
{
    const size_t n = ql_routes_bytes(r) / sizeof *r->sel;
    for (size_t i = 0; i < n; i++)
        if (r->sel[i] < 0 || r->sel[i] >= r->n_expert)
            return false;
    return true;
}

/* The reference's experts of scored token t of chunk c in MoE block slot m. */
static int16_t *at(const ql_routes *r, int64_t c, int m, int64_t t)
{
    return r->sel + (((size_t)c * (size_t)r->n_moe + (size_t)m) * (size_t)r->n_scored + (size_t)t) *
                        (size_t)r->k;
}

/* The scored token of a pass row (row0 + i is its position in the chunk), or -1. */
static int64_t scored_index(const ql_routes *r, int64_t row0, int64_t i)
{
    const int64_t t = row0 + i - r->first;
    return t >= 0 && t < r->n_scored ? t : -1;
}

void ql_routes_record(void *ctx, int layer, int64_t chunk, int64_t row0, const int32_t *sel,
                      const float *weights, int64_t n_rows, int k)
{
    (void)weights;
    ql_routes *r = ctx;
    const int m = r->slot[layer];
    QL_ASSERT(m >= 0 && k == r->k && chunk >= 0 && chunk < r->n_chunks);
    for (int64_t i = 0; i < n_rows; i++) {
        const int64_t t = scored_index(r, row0, i);
        if (t < 0)
            continue;
        int16_t *dst = at(r, chunk, m, t);
        for (int j = 0; j < k; j++)
            dst[j] = (int16_t)sel[i * k + j];
    }
}

/* ------------------------------------------------------------------------- */
/* A config against the reference                                              */

struct ql_routing_acc {
    const ql_routes *ref;
    int64_t *n_tok;    /* (n_moe,) scored tokens seen */
    int64_t *n_same;   /* (n_moe,) of which routed to the reference's experts */
    int64_t *n_kept;   /* (n_moe,) Σ |A ∩ B| */
    int64_t *ref_load; /* (n_moe, n_expert) slots routed to each expert by the reference */
    int64_t *load;     /* (n_moe, n_expert) ... and by the config */
};

ql_status ql_routing_acc_alloc(ql_routing_acc **out, const ql_routes *ref, ql_error *err)
{
    *out = NULL;
    ql_routing_acc *a = calloc(1, sizeof *a);
    const size_t m = (size_t)(ref->n_moe > 0 ? ref->n_moe : 1), x = (size_t)ref->n_expert;
    if (a) {
        a->ref = ref;
        a->n_tok = calloc(m, sizeof *a->n_tok);
        a->n_same = calloc(m, sizeof *a->n_same);
        a->n_kept = calloc(m, sizeof *a->n_kept);
        a->ref_load = calloc(m * x, sizeof *a->ref_load);
        a->load = calloc(m * x, sizeof *a->load);
    }
    if (!a || !a->n_tok || !a->n_same || !a->n_kept || !a->ref_load || !a->load) {
        ql_routing_acc_free(a);
        return ql_error_set(err, QL_ENOMEM, "out of memory for the routing figures");
    }
    *out = a;
    return QL_OK;
}

void ql_routing_acc_free(ql_routing_acc *a)
{
    if (!a)
        return;
    free(a->n_tok);
    free(a->n_same);
    free(a->n_kept);
    free(a->ref_load);
    free(a->load);
    free(a);
}

void ql_routing_acc_reset(ql_routing_acc *a)
{
    const size_t m = (size_t)(a->ref->n_moe > 0 ? a->ref->n_moe : 1);
    const size_t x = (size_t)a->ref->n_expert;
    memset(a->n_tok, 0, m * sizeof *a->n_tok);
    memset(a->n_same, 0, m * sizeof *a->n_same);
    memset(a->n_kept, 0, m * sizeof *a->n_kept);
    memset(a->ref_load, 0, m * x * sizeof *a->ref_load);
    memset(a->load, 0, m * x * sizeof *a->load);
}

void ql_routing_acc_observe(void *ctx, int layer, int64_t chunk, int64_t row0, const int32_t *sel,
                            const float *weights, int64_t n_rows, int k)
{
    (void)weights;
    ql_routing_acc *a = ctx;
    const ql_routes *r = a->ref;
    const int m = r->slot[layer];
    QL_ASSERT(m >= 0 && k == r->k && chunk >= 0 && chunk < r->n_chunks);
    int64_t *ref_load = a->ref_load + (size_t)m * (size_t)r->n_expert;
    int64_t *load = a->load + (size_t)m * (size_t)r->n_expert;
    for (int64_t i = 0; i < n_rows; i++) {
        const int64_t t = scored_index(r, row0, i);
        if (t < 0)
            continue;
        const int16_t *want = at(r, chunk, m, t);
        const int32_t *got = sel + i * k;
        int kept = 0;
        for (int j = 0; j < k; j++) {
            ref_load[want[j]]++;
            load[got[j]]++;
            for (int q = 0; q < k; q++)
                kept += got[j] == want[q];
        }
        a->n_tok[m]++;
        a->n_kept[m] += kept;
        a->n_same[m] += kept == k;
    }
}

void ql_routing_acc_finish(const ql_routing_acc *a, ql_routing_metrics *run,
                           ql_layer_record *layers, ql_expert_load_record *loads, size_t *n_loads)
{
    const ql_routes *r = a->ref;
    const int x = r->n_expert;
    double sum_agree = 0, sum_overlap = 0, sum_shift = 0;
    int n = 0;
    size_t nl = 0;
    for (int l = 0; l < r->n_layer; l++) {
        const int m = r->slot[l];
        if (m < 0 || a->n_tok[m] == 0)
            continue;
        const double tokens = (double)a->n_tok[m], slots = tokens * r->k;
        ql_layer_record *o = &layers[l];
        o->route_agree = (double)a->n_same[m] / tokens;
        o->route_overlap = (double)a->n_kept[m] / slots;
        double shift = 0;
        for (int e = 0; e < x; e++) {
            const double ref = (double)a->ref_load[(size_t)m * x + e] / slots;
            const double got = (double)a->load[(size_t)m * x + e] / slots;
            shift += fabs(got - ref);
            if (loads)
                loads[nl++] = (ql_expert_load_record){
                    .layer = l, .expert = e, .ref_share = ref, .share = got};
        }
        o->load_shift = 0.5 * shift;
        sum_agree += o->route_agree;
        sum_overlap += o->route_overlap;
        sum_shift += o->load_shift;
        n++;
    }
    run->route_agree = n ? sum_agree / n : (double)NAN;
    run->route_overlap = n ? sum_overlap / n : (double)NAN;
    run->load_shift = n ? sum_shift / n : (double)NAN;
    if (n_loads)
        *n_loads = nl;
}
