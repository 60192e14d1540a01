/* qlab fit: the multiple-choice knapsack solver and plans (see fit.h).
 *
 * Per item the options are first reduced to the efficient ones (sorted by bytes,
 * strictly decreasing error: an option with more bytes and no less error is never
 * worth taking), and their lower convex hull is built. A hull segment of item i
 * from option a to option b has a "slope" (err_a - err_b) / (bytes_b - bytes_a),
 * the error saved per byte; along a hull the slopes strictly decrease. */
#include "experiment/fit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "formats/types.h"
#include "model/quant_policy.h"

/* The branch and bound only looks for improvements larger than this fraction of
 * the current best error: below it the difference is summation round-off
 * (errors are sums of ~1e6 doubles), not a better assignment. */
#define PRUNE_REL 1e-12

typedef struct {
    int n;           /* efficient options */
    int *orig;       /* original option index of each */
    uint64_t *bytes; /* ascending */
    double *err;     /* strictly descending */
    int n_hull;
    int *hull;     /* positions (into the efficient arrays) of the hull vertices */
    double *slope; /* slope[h] of the segment hull[h] -> hull[h+1] (n_hull - 1 of them) */
} eff_item;

typedef struct {
    int item;
    int h; /* segment from hull vertex h to h + 1 */
    uint64_t dbytes;
    double derr;
    double slope;
} segment;

typedef struct {
    int n;
    eff_item *items;
    int n_seg;
    segment *seg; /* sorted by slope, steepest first */
    uint64_t capacity;
} problem;

/* ---------------------------------------------------------------------------
 * Preparation */

static int cmp_opt(const void *pa, const void *pb, void *ctx)
{
    const ql_fit_item *it = ctx;
    int a = *(const int *)pa, b = *(const int *)pb;
    if (it->bytes[a] != it->bytes[b])
        return it->bytes[a] < it->bytes[b] ? -1 : 1;
    if (it->err[a] != it->err[b])
        return it->err[a] < it->err[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

static double seg_slope(const eff_item *e, int a, int b)
{
    return (e->err[a] - e->err[b]) / (double)(e->bytes[b] - e->bytes[a]);
}

static ql_status prepare_item(const ql_fit_item *it, int index, eff_item *e, ql_error *err)
{
    memset(e, 0, sizeof *e);
    if (it->n <= 0)
        return ql_error_set(err, QL_EINVAL, "item %d has no options", index);
    for (int k = 0; k < it->n; k++)
        if (!isfinite(it->err[k]) || it->err[k] < 0)
            return ql_error_set(err, QL_EINVAL,
                                "item %d option %d: error %g is not a "
                                "non-negative number",
                                index, k, it->err[k]);
    int *order = malloc(sizeof(int) * (size_t)it->n);
    e->orig = malloc(sizeof(int) * (size_t)it->n);
    e->bytes = malloc(sizeof(uint64_t) * (size_t)it->n);
    e->err = malloc(sizeof(double) * (size_t)it->n);
    e->hull = malloc(sizeof(int) * (size_t)it->n);
    e->slope = malloc(sizeof(double) * (size_t)it->n);
    if (!order || !e->orig || !e->bytes || !e->err || !e->hull || !e->slope) {
        free(order);
        return ql_error_set(err, QL_ENOMEM, "solver: out of memory");
    }
    for (int k = 0; k < it->n; k++)
        order[k] = k;
    qsort_r(order, (size_t)it->n, sizeof(int), cmp_opt, (void *)it);
    /* Keep an option only when it beats every cheaper one. */
    for (int k = 0; k < it->n; k++) {
        int o = order[k];
        if (e->n > 0 && it->err[o] >= e->err[e->n - 1])
            continue;
        if (e->n > 0 && it->bytes[o] == e->bytes[e->n - 1])
            continue; /* same size, error not lower (sorted by error within a size) */
        e->orig[e->n] = o;
        e->bytes[e->n] = it->bytes[o];
        e->err[e->n] = it->err[o];
        e->n++;
    }
    free(order);
    /* Lower convex hull (monotone chain). A vertex is kept only when the saving
     * per byte strictly drops after it; the same computed slopes are stored, so
     * the stored sequence is strictly decreasing. */
    for (int k = 0; k < e->n; k++) {
        while (e->n_hull >= 2 && seg_slope(e, e->hull[e->n_hull - 2], e->hull[e->n_hull - 1]) <=
                                     seg_slope(e, e->hull[e->n_hull - 1], k))
            e->n_hull--;
        e->hull[e->n_hull++] = k;
    }
    for (int h = 0; h + 1 < e->n_hull; h++)
        e->slope[h] = seg_slope(e, e->hull[h], e->hull[h + 1]);
    return QL_OK;
}

static void free_problem(problem *p)
{
    if (p->items)
        for (int i = 0; i < p->n; i++) {
            free(p->items[i].orig);
            free(p->items[i].bytes);
            free(p->items[i].err);
            free(p->items[i].hull);
            free(p->items[i].slope);
        }
    free(p->items);
    free(p->seg);
    memset(p, 0, sizeof *p);
}

static int cmp_seg(const void *pa, const void *pb)
{
    const segment *a = pa, *b = pb;
    if (a->slope != b->slope)
        return a->slope > b->slope ? -1 : 1;
    if (a->item != b->item)
        return a->item < b->item ? -1 : 1;
    return a->h < b->h ? -1 : a->h > b->h;
}

static ql_status prepare(problem *p, const ql_fit_item *items, int n, uint64_t capacity,
                         ql_error *err)
{
    memset(p, 0, sizeof *p);
    p->n = n;
    p->capacity = capacity;
    p->items = calloc(n > 0 ? (size_t)n : 1, sizeof(eff_item));
    if (!p->items)
        return ql_error_set(err, QL_ENOMEM, "solver: out of memory");
    size_t n_seg = 0;
    for (int i = 0; i < n; i++) {
        ql_status st = prepare_item(&items[i], i, &p->items[i], err);
        if (st != QL_OK)
            return st;
        n_seg += (size_t)(p->items[i].n_hull - 1);
    }
    p->seg = malloc(sizeof(segment) * (n_seg > 0 ? n_seg : 1));
    if (!p->seg)
        return ql_error_set(err, QL_ENOMEM, "solver: out of memory");
    for (int i = 0; i < n; i++) {
        const eff_item *e = &p->items[i];
        for (int h = 0; h + 1 < e->n_hull; h++) {
            segment *s = &p->seg[p->n_seg++];
            s->item = i;
            s->h = h;
            s->dbytes = e->bytes[e->hull[h + 1]] - e->bytes[e->hull[h]];
            s->derr = e->err[e->hull[h]] - e->err[e->hull[h + 1]];
            s->slope = e->slope[h];
        }
    }
    qsort(p->seg, (size_t)p->n_seg, sizeof(segment), cmp_seg);
    return QL_OK;
}

static void totals(const problem *p, const int *pos, uint64_t *bytes, double *e)
{
    uint64_t b = 0;
    double s = 0;
    for (int i = 0; i < p->n; i++) {
        b += p->items[i].bytes[pos[i]];
        s += p->items[i].err[pos[i]];
    }
    *bytes = b;
    *e = s;
}

/* ---------------------------------------------------------------------------
 * (a) Lagrangian relaxation
 *
 * For a multiplier lambda >= 0, item i takes the hull vertex minimising
 * err + lambda * bytes: by convexity that is the vertex reached after taking every
 * hull segment whose slope exceeds lambda (ties stay at fewer bytes). The total
 * size only changes at the segment slopes, so bisecting lambda over the sorted
 * distinct slopes finds the smallest multiplier whose assignment fits. */

static uint64_t lagrange_assign(const problem *p, double lambda, int *pos)
{
    uint64_t total = 0;
    for (int i = 0; i < p->n; i++) {
        const eff_item *e = &p->items[i];
        int h = 0;
        while (h + 1 < e->n_hull && e->slope[h] > lambda)
            h++;
        pos[i] = e->hull[h];
        total += e->bytes[pos[i]];
    }
    return total;
}

static void lagrange(const problem *p, int *pos)
{
    /* Distinct slopes, steepest first (the segments are sorted that way). */
    int m = 0;
    double *lam = malloc(sizeof(double) * (size_t)(p->n_seg + 1));
    if (!lam) { /* fall back to the cheapest assignment; later stages still improve it */
        lagrange_assign(p, (double)INFINITY, pos);
        return;
    }
    for (int s = 0; s < p->n_seg; s++)
        if (m == 0 || p->seg[s].slope != lam[m - 1])
            lam[m++] = p->seg[s].slope;
    lam[m] = 0.0; /* lambda = 0: every segment taken (slopes are positive) */
    /* The assignment at lam[k] takes the segments of the k steepest slope groups;
     * its size grows with k. Find the largest k in [0, m] that fits. */
    int lo = 0, hi = m;
    if (lagrange_assign(p, lam[m], pos) <= p->capacity) {
        lo = m;
    } else {
        /* invariant: lam[lo] fits (lam[0] takes nothing: the cheapest choices fit,
         * checked by the caller), lam[hi] does not */
        while (hi - lo > 1) {
            int mid = lo + (hi - lo) / 2;
            if (lagrange_assign(p, lam[mid], pos) <= p->capacity)
                lo = mid;
            else
                hi = mid;
        }
    }
    lagrange_assign(p, lam[lo], pos);
    free(lam);
}

/* ---------------------------------------------------------------------------
 * (b) Greedy top-up: spend the slack on the best single-item upgrades. */

static void greedy(const problem *p, int *pos)
{
    uint64_t used;
    double e;
    totals(p, pos, &used, &e);
    for (;;) {
        uint64_t slack = p->capacity - used;
        int bi = -1, bk = -1;
        double best = 0;
        uint64_t best_db = 0;
        for (int i = 0; i < p->n; i++) {
            const eff_item *it = &p->items[i];
            for (int k = pos[i] + 1; k < it->n; k++) {
                uint64_t db = it->bytes[k] - it->bytes[pos[i]];
                if (db > slack)
                    break; /* bytes ascend */
                double r = (it->err[pos[i]] - it->err[k]) / (double)db;
                if (bi < 0 || r > best || (r == best && db < best_db)) {
                    bi = i;
                    bk = k;
                    best = r;
                    best_db = db;
                }
            }
        }
        if (bi < 0)
            return;
        used += p->items[bi].bytes[bk] - p->items[bi].bytes[pos[bi]];
        pos[bi] = bk;
    }
}

/* ---------------------------------------------------------------------------
 * (c) Pairwise exchange: move item i down (or keep it) and item j up, taking the
 * best strict improvement that fits, until none is left. Each accepted move
 * lowers the error, so this terminates; the pass count is capped for very large
 * models, where the branch and bound cannot finish anyway. */

#define EXCHANGE_MAX_PASSES 1000

static void exchange(const problem *p, int *pos)
{
    uint64_t used;
    double total;
    totals(p, pos, &used, &total);
    for (int pass = 0; pass < EXCHANGE_MAX_PASSES; pass++) {
        double best_gain = 0;
        int bi = -1, bki = -1, bj = -1, bkj = -1;
        for (int i = 0; i < p->n; i++) {
            const eff_item *a = &p->items[i];
            for (int ki = 0; ki < pos[i]; ki++) {
                uint64_t freed = a->bytes[pos[i]] - a->bytes[ki];
                double loss = a->err[ki] - a->err[pos[i]];
                uint64_t room = p->capacity - used + freed;
                for (int j = 0; j < p->n; j++) {
                    if (j == i)
                        continue;
                    const eff_item *b = &p->items[j];
                    for (int kj = pos[j] + 1; kj < b->n; kj++) {
                        uint64_t db = b->bytes[kj] - b->bytes[pos[j]];
                        if (db > room)
                            break;
                        double gain = (b->err[pos[j]] - b->err[kj]) - loss;
                        if (gain > best_gain) {
                            best_gain = gain;
                            bi = i, bki = ki, bj = j, bkj = kj;
                        }
                    }
                }
            }
        }
        if (bi < 0 || !(best_gain > PRUNE_REL * total))
            return;
        used = used - (p->items[bi].bytes[pos[bi]] - p->items[bi].bytes[bki]) +
               (p->items[bj].bytes[bkj] - p->items[bj].bytes[pos[bj]]);
        pos[bi] = bki;
        pos[bj] = bkj;
        greedy(p, pos); /* the exchange may leave room for another upgrade */
        totals(p, pos, &used, &total);
    }
}

/* ---------------------------------------------------------------------------
 * (d) Branch and bound.
 *
 * Items are decided in a fixed order (largest error range first); a node at depth
 * d has fixed items order[0..d-1]. Its bound is the LP relaxation of the rest:
 * every free item at its cheapest option, then hull segments of the free items
 * taken steepest first while they fit, the last one fractionally. That is the
 * exact LP optimum of a multiple-choice knapsack, so the bound is valid. */

typedef struct {
    const problem *p;
    int *order;          /* depth -> item */
    int *depth_of;       /* item -> depth */
    uint64_t *suf_bytes; /* sum of cheapest bytes of items at depth >= d (n + 1 entries) */
    double *suf_err;     /* sum of their errors */
    int *cur;            /* positions on the current path */
    int *best;           /* best assignment found */
    double best_err;
    int64_t nodes;
    int64_t work, limit; /* segments scanned by the bounds so far, and the cap */
    bool aborted;
} bb_state;

static double lp_bound(bb_state *s, int d, uint64_t cap)
{
    if (cap < s->suf_bytes[d])
        return (double)INFINITY;
    uint64_t room = cap - s->suf_bytes[d];
    double e = s->suf_err[d];
    const problem *p = s->p;
    s->work += p->n_seg;
    for (int k = 0; k < p->n_seg; k++) {
        const segment *g = &p->seg[k];
        if (s->depth_of[g->item] < d)
            continue;
        if (g->dbytes <= room) {
            room -= g->dbytes;
            e -= g->derr;
        } else {
            e -= g->slope * (double)room;
            break;
        }
    }
    return e > 0 ? e : 0;
}

static void bb_dfs(bb_state *s, int d, uint64_t cap, double acc)
{
    const problem *p = s->p;
    if (d == p->n) {
        if (acc < s->best_err) {
            s->best_err = acc;
            memcpy(s->best, s->cur, sizeof(int) * (size_t)p->n);
        }
        return;
    }
    const int i = s->order[d];
    const eff_item *e = &p->items[i];
    /* Most accurate option first: it tends to lead to good leaves early. */
    for (int k = e->n - 1; k >= 0; k--) {
        if (s->aborted)
            return;
        if (e->bytes[k] > cap || cap - e->bytes[k] < s->suf_bytes[d + 1])
            continue;
        double child = acc + e->err[k] + lp_bound(s, d + 1, cap - e->bytes[k]);
        if (child >= s->best_err - PRUNE_REL * s->best_err)
            continue;
        s->nodes++;
        if (s->work > s->limit) {
            s->aborted = true;
            return;
        }
        s->cur[i] = k;
        bb_dfs(s, d + 1, cap - e->bytes[k], acc + e->err[k]);
    }
}

static int cmp_range(const void *pa, const void *pb, void *ctx)
{
    const problem *p = ctx;
    int a = *(const int *)pa, b = *(const int *)pb;
    const eff_item *ea = &p->items[a], *eb = &p->items[b];
    double ra = ea->err[0] - ea->err[ea->n - 1], rb = eb->err[0] - eb->err[eb->n - 1];
    if (ra != rb)
        return ra > rb ? -1 : 1;
    return a < b ? -1 : a > b;
}

static ql_status branch_and_bound(const problem *p, int64_t limit, int *pos, ql_fit_solve_stats *st,
                                  ql_error *err)
{
    const int n = p->n;
    bb_state s = {0};
    s.p = p;
    s.limit = limit;
    s.order = malloc(sizeof(int) * (size_t)(n + 1));
    s.depth_of = malloc(sizeof(int) * (size_t)(n + 1));
    s.suf_bytes = malloc(sizeof(uint64_t) * (size_t)(n + 1));
    s.suf_err = malloc(sizeof(double) * (size_t)(n + 1));
    s.cur = malloc(sizeof(int) * (size_t)(n + 1));
    s.best = malloc(sizeof(int) * (size_t)(n + 1));
    ql_status rc = QL_OK;
    if (!s.order || !s.depth_of || !s.suf_bytes || !s.suf_err || !s.cur || !s.best) {
        rc = ql_error_set(err, QL_ENOMEM, "solver: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++)
        s.order[i] = i;
    qsort_r(s.order, (size_t)n, sizeof(int), cmp_range, (void *)p);
    for (int d = 0; d < n; d++)
        s.depth_of[s.order[d]] = d;
    s.suf_bytes[n] = 0;
    s.suf_err[n] = 0;
    for (int d = n - 1; d >= 0; d--) {
        s.suf_bytes[d] = s.suf_bytes[d + 1] + p->items[s.order[d]].bytes[0];
        s.suf_err[d] = s.suf_err[d + 1] + p->items[s.order[d]].err[0];
    }
    uint64_t used;
    totals(p, pos, &used, &s.best_err);
    memcpy(s.best, pos, sizeof(int) * (size_t)n);
    st->lower_bound = lp_bound(&s, 0, p->capacity);
    if (st->lower_bound >= s.best_err - PRUNE_REL * s.best_err) {
        st->optimal = true; /* the incumbent already meets the bound */
        goto out;
    }
    if (limit > 0) {
        s.work = 0;
        bb_dfs(&s, 0, p->capacity, 0.0);
        st->optimal = !s.aborted;
        memcpy(pos, s.best, sizeof(int) * (size_t)n);
    }
    st->bb_nodes = s.nodes;
out:
    free(s.order);
    free(s.depth_of);
    free(s.suf_bytes);
    free(s.suf_err);
    free(s.cur);
    free(s.best);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Public solver */

void ql_fit_solve_options_init(ql_fit_solve_options *o)
{
    memset(o, 0, sizeof *o);
    o->bb_work_limit = QL_FIT_BB_WORK;
}

ql_status ql_fit_solve_items(const ql_fit_item *items, int n, uint64_t capacity,
                             const ql_fit_solve_options *opt, int *choice,
                             ql_fit_solve_stats *stats, ql_error *err)
{
    ql_fit_solve_options defaults;
    if (!opt) {
        ql_fit_solve_options_init(&defaults);
        opt = &defaults;
    }
    ql_fit_solve_stats st;
    memset(&st, 0, sizeof st);
    problem p;
    int *pos = NULL;
    ql_status rc = prepare(&p, items, n, capacity, err);
    if (rc != QL_OK)
        goto out;
    for (int i = 0; i < n; i++)
        st.min_bytes += p.items[i].bytes[0];
    if (st.min_bytes > capacity) {
        rc = ql_error_set(err, QL_EINVAL,
                          "the smallest feasible size is %llu bytes (every tensor at its "
                          "cheapest candidate type), above the capacity of %llu bytes",
                          (unsigned long long)st.min_bytes, (unsigned long long)capacity);
        goto out;
    }
    pos = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!pos) {
        rc = ql_error_set(err, QL_ENOMEM, "solver: out of memory");
        goto out;
    }
    uint64_t used;
    lagrange(&p, pos);
    totals(&p, pos, &used, &st.err_lagrange);
    greedy(&p, pos);
    totals(&p, pos, &used, &st.err_greedy);
    if (!opt->no_exchange)
        exchange(&p, pos);
    totals(&p, pos, &used, &st.err_exchange);
    rc = branch_and_bound(&p, opt->bb_work_limit, pos, &st, err);
    if (rc != QL_OK)
        goto out;
    totals(&p, pos, &st.bytes, &st.err);
    QL_ASSERT(st.bytes <= capacity);
    for (int i = 0; i < n; i++)
        choice[i] = p.items[i].orig[pos[i]];
out:
    if (stats)
        *stats = st;
    free(pos);
    free_problem(&p);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Plans */

/* The knapsack of a table: one item per ungrouped assigned tensor and per group (the
 * types all its tensors take, their bytes and errors summed). */
typedef struct {
    int n;
    ql_fit_item *items;
    uint64_t **bytes;
    double **errs;
    int32_t **types; /* by item: each choice's type */
    int *item_of;    /* by tensor: its item */
} table_items;

static void items_free(table_items *ti)
{
    for (int i = 0; i < ti->n; i++) {
        free(ti->bytes ? ti->bytes[i] : NULL);
        free(ti->errs ? ti->errs[i] : NULL);
        free(ti->types ? ti->types[i] : NULL);
    }
    free(ti->items);
    free(ti->bytes);
    free(ti->errs);
    free(ti->types);
    free(ti->item_of);
}

static ql_status items_alloc(table_items *ti, const ql_fit_table *t, ql_error *err)
{
    memset(ti, 0, sizeof *ti);
    int n = 0;
    for (int i = 0; i < t->n_tensors; i++)
        n += t->tensors[i].assigned;
    ti->items = calloc((size_t)n + 1, sizeof *ti->items);
    ti->bytes = calloc((size_t)n + 1, sizeof *ti->bytes);
    ti->errs = calloc((size_t)n + 1, sizeof *ti->errs);
    ti->types = calloc((size_t)n + 1, sizeof *ti->types);
    ti->item_of = calloc((size_t)t->n_tensors + 1, sizeof *ti->item_of);
    if (!ti->items || !ti->bytes || !ti->errs || !ti->types || !ti->item_of)
        return ql_error_set(err, QL_ENOMEM, "fit: out of memory");
    for (int i = 0; i < t->n_tensors; i++) {
        const ql_fit_tensor *ft = &t->tensors[i];
        if (!ft->assigned)
            continue;
        const int lead = ql_fit_group_lead(t, i);
        if (lead != i) {
            ti->item_of[i] = ti->item_of[lead];
            continue;
        }
        if (ft->n_choices <= 0)
            return ql_error_set(err, QL_EINVAL, "fit: tensor '%s' has no candidate type", ft->name);
        const int k = ti->n++;
        ti->bytes[k] = malloc(sizeof(uint64_t) * (size_t)ft->n_choices);
        ti->errs[k] = malloc(sizeof(double) * (size_t)ft->n_choices);
        ti->types[k] = malloc(sizeof(int32_t) * (size_t)ft->n_choices);
        if (!ti->bytes[k] || !ti->errs[k] || !ti->types[k])
            return ql_error_set(err, QL_ENOMEM, "fit: out of memory");
        int m = 0;
        for (int c = 0; c < ft->n_choices; c++)
            if (ql_fit_group_choice(t, i, ft->choices[c].type, &ti->bytes[k][m], &ti->errs[k][m]))
                ti->types[k][m++] = ft->choices[c].type;
        if (m == 0)
            return ql_error_set(err, QL_EINVAL,
                                "fit: the group of tensor '%s' has no type all its tensors take",
                                ft->name);
        ti->items[k] = (ql_fit_item){m, ti->bytes[k], ti->errs[k]};
        ti->item_of[i] = k;
    }
    return QL_OK;
}

/* The plan's tensors from the chosen item options, and its totals. */
static void fill_plan(ql_fit_plan *p, const ql_fit_table *t, const table_items *ti,
                      const int *choice)
{
    int64_t assigned_params = 0, all_params = 0;
    uint64_t assigned_bytes = 0;
    for (int i = 0; i < t->n_tensors; i++) {
        const ql_fit_tensor *ft = &t->tensors[i];
        ql_fit_assignment *a = &p->tensors[i];
        a->name = ft->name;
        a->assigned = ft->assigned;
        a->n_params = ft->n_params;
        all_params += ft->n_params;
        if (ft->assigned) {
            const int k = ti->item_of[i];
            const int32_t type = ti->types[k][choice[k]];
            const ql_fit_choice *c = ft->choices;
            while (c->type != type) /* the item's types are every member's */
                c++;
            a->type = c->type;
            a->bytes = c->bytes;
            a->err = c->err;
            assigned_params += ft->n_params;
            assigned_bytes += c->bytes;
            p->err += c->err;
        } else {
            a->type = ft->fixed_type;
            a->bytes = ft->fixed_bytes;
        }
    }
    p->bytes = assigned_bytes + t->fixed_bytes;
    p->slack = p->budget - p->bytes;
    p->bpw = assigned_params > 0 ? 8.0 * (double)assigned_bytes / (double)assigned_params : 0;
    p->bpw_all = all_params > 0 ? 8.0 * (double)p->bytes / (double)all_params : 0;
    p->stats.min_bytes += t->fixed_bytes;
    p->stats.bytes += t->fixed_bytes;
}

ql_status ql_fit_solve(const ql_fit_table *t, uint64_t budget, const ql_fit_solve_options *opt,
                       ql_fit_plan **out, ql_error *err)
{
    *out = NULL;
    const double t0 = ql_now();
    table_items ti;
    ql_status rc = items_alloc(&ti, t, err);
    ql_fit_plan *p = calloc(1, sizeof *p);
    int *choice = calloc((size_t)ti.n + 1, sizeof *choice);
    if (rc == QL_OK &&
        (!p || !choice || !(p->tensors = calloc((size_t)t->n_tensors + 1, sizeof *p->tensors))))
        rc = ql_error_set(err, QL_ENOMEM, "fit: out of memory");
    if (rc != QL_OK)
        goto out;
    p->n_tensors = t->n_tensors;
    p->budget = budget;
    p->fixed_bytes = t->fixed_bytes;
    if (budget < ql_fit_table_min_bytes(t)) {
        char need[64], have[64];
        ql_fit_format_size(ql_fit_table_min_bytes(t), need, sizeof need);
        ql_fit_format_size(budget, have, sizeof have);
        rc = ql_error_set(err, QL_EINVAL,
                          "budget %s is below the smallest feasible size %s (every weight "
                          "tensor at its cheapest candidate type, a group's tensors in one "
                          "type, fixed tensors included)",
                          have, need);
        goto out;
    }
    rc = ql_fit_solve_items(ti.items, ti.n, budget - t->fixed_bytes, opt, choice, &p->stats, err);
    if (rc != QL_OK)
        goto out;
    fill_plan(p, t, &ti, choice);
    p->seconds = ql_now() - t0;
    *out = p;
    p = NULL;
out:
    items_free(&ti);
    free(choice);
    ql_fit_plan_free(p);
    return rc;
}

void ql_fit_plan_free(ql_fit_plan *p)
{
    if (!p)
        return;
    free(p->tensors);
    free(p);
}

int32_t ql_fit_plan_type(const ql_fit_plan *p, const char *tensor)
{
    for (int i = 0; i < p->n_tensors; i++)
        if (strcmp(p->tensors[i].name, tensor) == 0)
            return p->tensors[i].type;
    return QL_TYPE_INVALID;
}

void ql_fit_plan_print(FILE *out, const ql_fit_plan *p, const ql_fit_table *t)
{
    fprintf(out, "%-36s %-14s %-8s %14s %7s %13s  %s\n", "tensor", "shape", "type", "bytes", "bpw",
            "error", "importance");
    for (int i = 0; i < p->n_tensors; i++) {
        const ql_fit_assignment *a = &p->tensors[i];
        const ql_fit_tensor *ft = &t->tensors[i];
        char shape[64];
        if (ft->n_dims >= 3)
            snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)ft->ne[0],
                     (long long)ft->ne[1], (long long)ft->ne[2]);
        else if (ft->n_dims == 2)
            snprintf(shape, sizeof shape, "%lldx%lld", (long long)ft->ne[0], (long long)ft->ne[1]);
        else
            snprintf(shape, sizeof shape, "%lld", (long long)ft->ne[0]);
        double bpw = a->n_params > 0 ? 8.0 * (double)a->bytes / (double)a->n_params : 0;
        if (a->assigned)
            fprintf(out, "%-36s %-14s %-8s %14llu %7.3f %13.6g  %s\n", a->name, shape,
                    ql_type_name(a->type), (unsigned long long)a->bytes, bpw, a->err,
                    ql_fit_imp_source_name(ft->imp));
        else
            fprintf(out, "%-36s %-14s %-8s %14llu %7.3f %13s  fixed\n", a->name, shape,
                    ql_type_name(a->type), (unsigned long long)a->bytes, bpw, "-");
    }
    /* Per-type totals over the assigned tensors. */
    fprintf(out, "\n%-8s %8s %14s %16s\n", "type", "tensors", "params", "bytes");
    const ql_type_traits *all[128];
    int n_all = ql_type_list(all, 128);
    for (int k = 0; k < n_all; k++) {
        int cnt = 0;
        int64_t params = 0;
        uint64_t bytes = 0;
        for (int i = 0; i < p->n_tensors; i++)
            if (p->tensors[i].type == (int32_t)all[k]->type) {
                cnt++;
                params += p->tensors[i].n_params;
                bytes += p->tensors[i].bytes;
            }
        if (cnt > 0)
            fprintf(out, "%-8s %8d %14lld %16llu\n", all[k]->name, cnt, (long long)params,
                    (unsigned long long)bytes);
    }
    char b[64], u[64], f[64], s[64];
    ql_fit_format_size(p->budget, b, sizeof b);
    ql_fit_format_size(p->bytes, u, sizeof u);
    ql_fit_format_size(p->fixed_bytes, f, sizeof f);
    ql_fit_format_size(p->slack, s, sizeof s);
    fprintf(out, "\nbudget      %s\n", b);
    fprintf(out, "used        %s = %.4f%% of the budget (fixed tensors %s)\n", u,
            p->budget > 0 ? 100.0 * (double)p->bytes / (double)p->budget : 0.0, f);
    fprintf(out, "slack       %s\n", s);
    fprintf(out, "bpw         %.4f (assigned weights), %.4f (whole model)\n", p->bpw, p->bpw_all);
    if (p->stats.optimal)
        fprintf(out, "error       %.6g (proven optimal; LP lower bound %.6g)\n", p->err,
                p->stats.lower_bound);
    else
        fprintf(out,
                "error       %.6g (within %.3g%% of the lower bound %.6g; branch and bound "
                "stopped at its work limit)\n",
                p->err, p->err > 0 ? 100.0 * (p->err - p->stats.lower_bound) / p->err : 0.0,
                p->stats.lower_bound);
    fprintf(out,
            "solver      lagrange %.6g -> greedy %.6g -> exchange %.6g -> final %.6g, "
            "%lld B&B nodes, %.3f s\n",
            p->stats.err_lagrange, p->stats.err_greedy, p->stats.err_exchange, p->err,
            (long long)p->stats.bb_nodes, p->seconds);
}

/* The file type llama-quantize's TYPE argument of the type's name means: the mixes
 * of one base type are named after it (Q6_K, IQ2_S), the K types by the _M mix their
 * name is an alias of (Q4_K -> Q4_K_M), as a fitted model is a mix. */
static uint32_t file_type_of(int32_t type)
{
    const ql_quant_mix *m = ql_quant_mix_by_name(ql_type_name(type));
    return m ? (uint32_t)m->ftype : 0;
}

uint32_t ql_fit_plan_file_type(const ql_fit_plan *p)
{
    int32_t best = QL_TYPE_F32;
    int64_t best_params = -1;
    for (int i = 0; i < p->n_tensors; i++) {
        if (!p->tensors[i].assigned)
            continue;
        int32_t ty = p->tensors[i].type;
        int64_t params = 0;
        for (int j = 0; j < p->n_tensors; j++)
            if (p->tensors[j].assigned && p->tensors[j].type == ty)
                params += p->tensors[j].n_params;
        if (params > best_params || (params == best_params && ty < best)) {
            best = ty;
            best_params = params;
        }
    }
    return file_type_of(best);
}
