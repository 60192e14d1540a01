/* act_cost: what does quantizing the activations cost, per weight type?
 *
 * Pairs every finished run with quantized activations (act_mode X != f32) with
 * the run of the same weights (weight type, outlier ratio, head and embedding
 * types, imatrix, budget) on the same model, text, ctx and chunks with f32
 * activations, preferring the f32 run with the same K/V type, else the one with
 * an f32 K/V cache (so a `native` config, which implies an f16 K/V cache, is
 * charged for the cache as well unless an f32-activation run with an f16 cache
 * exists). For each pair:
 *
 *   ΔKLD      = mean KLD(X) − mean KLD(f32)           (token-weighted means)
 *   Δ ln PPL  = ln PPL(X) − ln PPL(f32)
 *
 * with 95% intervals from a paired bootstrap over the evaluation chunks (the
 * same resampled chunks for both runs, from the store's chunk_metrics). Writes
 * act_cost.md and act_cost[-N].png/.svg (ΔKLD per weight type with its
 * interval, one series per activation mode). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/table.h"
#include "base/util.h"
#include "experiment/config.h"
#include "nb.h"
#include "results/analysis.h"
#include "results/plot.h"

typedef struct {
    size_t x, base;  /* indices into the run list: quantized-activation run, f32 run */
    bool has_chunks; /* both runs have matching per-chunk sums */
    bool has_nll;
    ql_ci dkld, dlnppl;
    size_t chunks;
} pair;

/* ---------------------------------------------------------------- chunks */

/* The per-chunk sums of a run, in chunk order. */
typedef struct {
    size_t n;
    int64_t *chunk;
    double *tokens, *kld, *nll;
    bool nll_ok; /* every chunk has nll_sum */
} chunks;

static void chunks_free(chunks *c)
{
    free(c->chunk);
    free(c->tokens);
    free(c->kld);
    free(c->nll);
    memset(c, 0, sizeof *c);
}

static ql_status load_chunks(ql_store *s, int64_t run_id, size_t expect, chunks *c, ql_error *err)
{
    memset(c, 0, sizeof *c);
    ql_query *q;
    ql_status st = ql_query_prepare(s,
                                    "SELECT chunk, n_tokens, kld_sum, nll_sum FROM chunk_metrics"
                                    " WHERE run_id = ?1 ORDER BY chunk",
                                    &q, err);
    if (st)
        return st;
    c->chunk = calloc(expect, sizeof *c->chunk);
    c->tokens = calloc(expect, sizeof *c->tokens);
    c->kld = calloc(expect, sizeof *c->kld);
    c->nll = calloc(expect, sizeof *c->nll);
    c->nll_ok = true;
    if (!c->chunk || !c->tokens || !c->kld || !c->nll) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory");
        goto out;
    }
    if ((st = ql_query_bind_int64(q, 1, run_id, err)))
        goto out;
    for (;;) {
        bool row;
        if ((st = ql_query_step(q, &row, err)) || !row)
            break;
        if (c->n == expect) {
            st = ql_error_set(err, QL_EFORMAT, "run %lld: more than %zu per-chunk records",
                              (long long)run_id, expect);
            break;
        }
        c->chunk[c->n] = ql_query_int(q, 0);
        c->tokens[c->n] = ql_query_double(q, 1);
        c->kld[c->n] = ql_query_double(q, 2);
        c->nll[c->n] = ql_query_double(q, 3);
        c->nll_ok = c->nll_ok && !isnan(c->nll[c->n]);
        if (isnan(c->kld[c->n])) {
            /* Without KLD sums the run cannot be resampled. */
            c->n = 0;
            break;
        }
        c->n++;
    }
out:
    ql_query_free(q);
    if (st)
        chunks_free(c);
    return st;
}

/* Loads both runs' chunks and bootstraps the pair. A run without per-chunk
 * data leaves has_chunks false; chunks that do not line up are an error. */
static ql_status bootstrap_pair(ql_store *s, const nb_result *runs, pair *p, size_t resamples,
                                unsigned long seed, ql_error *err)
{
    const nb_result *x = &runs[p->x], *b = &runs[p->base];
    size_t expect = x->chunks > 0 ? (size_t)x->chunks : 1;
    chunks cx, cb;
    ql_status st = load_chunks(s, x->run_id, expect, &cx, err);
    if (st)
        return st;
    if ((st = load_chunks(s, b->run_id, expect, &cb, err))) {
        chunks_free(&cx);
        return st;
    }
    p->has_chunks = cx.n > 0 && cb.n > 0;
    if (p->has_chunks && cx.n != cb.n)
        st = ql_error_set(err, QL_EFORMAT, "runs %lld and %lld: %zu and %zu chunks (same text?)",
                          (long long)x->run_id, (long long)b->run_id, cx.n, cb.n);
    for (size_t i = 0; p->has_chunks && !st && i < cx.n; i++)
        if (cx.chunk[i] != cb.chunk[i] || cx.tokens[i] != cb.tokens[i])
            st = ql_error_set(err, QL_EFORMAT,
                              "runs %lld and %lld: chunk %lld has %.0f and %.0f scored tokens "
                              "(chunks cannot be paired)",
                              (long long)x->run_id, (long long)b->run_id, (long long)cx.chunk[i],
                              cx.tokens[i], cb.tokens[i]);
    if (p->has_chunks && !st) {
        p->chunks = cx.n;
        st = ql_bootstrap_paired_diff(cx.kld, cb.kld, cx.tokens, cx.n, resamples,
                                      QL_BOOTSTRAP_LEVEL, seed, &p->dkld, err);
        p->has_nll = cx.nll_ok && cb.nll_ok;
        if (!st && p->has_nll)
            st = ql_bootstrap_paired_diff(cx.nll, cb.nll, cx.tokens, cx.n, resamples,
                                          QL_BOOTSTRAP_LEVEL, seed, &p->dlnppl, err);
        if (st)
            ql_error_prefix(err, "runs %lld and %lld: ", (long long)x->run_id,
                            (long long)b->run_id);
    }
    chunks_free(&cx);
    chunks_free(&cb);
    return st;
}

/* ---------------------------------------------------------------- pairing */

/* Same group and the same values of every axis that shapes the weights. */
static bool same_weights(const nb_result *a, const nb_result *b)
{
    if (strcmp(a->group, b->group) != 0)
        return false;
    for (int x = 0; x < QL_AXIS_COUNT; x++)
        if ((ql_axis_get((ql_axis)x)->flags & QL_AXIS_WEIGHTS) &&
            strcmp(a->axis[x], b->axis[x]) != 0)
            return false;
    return true;
}

/* The f32-activation twin of run x, or -1. */
static ptrdiff_t find_base(const nb_result *runs, size_t n, size_t x)
{
    ptrdiff_t same_kv = -1, f32_kv = -1;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(runs[i].axis[QL_AXIS_ACT_MODE], "f32") != 0 || !same_weights(&runs[i], &runs[x]))
            continue;
        if (strcmp(runs[i].axis[QL_AXIS_KV_TYPE], runs[x].axis[QL_AXIS_KV_TYPE]) == 0 &&
            same_kv < 0)
            same_kv = (ptrdiff_t)i;
        if (strcmp(runs[i].axis[QL_AXIS_KV_TYPE], "f32") == 0 && f32_kv < 0)
            f32_kv = (ptrdiff_t)i;
    }
    return same_kv >= 0 ? same_kv : f32_kv;
}

/* ---------------------------------------------------------------- output */

static ql_status put_ci(ql_table *t, bool ok, const ql_ci *ci, ql_error *err)
{
    if (!ok)
        return ql_table_put(t, NULL, err);
    return ql_table_putf(t, err, "[%+.3e, %+.3e]", ci->lo, ci->hi);
}

/* Weight-type label of a pair: the weight type plus the other axes that shape
 * the weights and vary among the group's pairs (outliers, head, embd, ...). */
static void weights_label(const nb_result *runs, const pair *ps, size_t lo, size_t hi, size_t i,
                          char *buf, size_t size)
{
    const nb_result *r = &runs[ps[i].x];
    size_t o = (size_t)snprintf(buf, size, "%s", r->axis[QL_AXIS_WEIGHT_TYPE]);
    for (int a = 0; a < QL_AXIS_COUNT && o < size; a++) {
        const ql_axis_info *ai = ql_axis_get((ql_axis)a);
        if (a == QL_AXIS_WEIGHT_TYPE || !(ai->flags & QL_AXIS_WEIGHTS))
            continue;
        bool varies = false;
        for (size_t j = lo; j < hi; j++)
            varies = varies || strcmp(runs[ps[j].x].axis[a], r->axis[a]) != 0;
        if (varies)
            o += (size_t)snprintf(buf + o, size - o, " %s=%s", ai->label, r->axis[a]);
    }
}

static ql_status write_plot(const nb_options *o, const nb_result *runs, const pair *ps, size_t lo,
                            size_t hi, const char *suffix, ql_error *err)
{
    /* Series: activation modes in name order; x: weights in order of the pairs
     * (the runs are in bpw order). */
    const char *modes[16];
    size_t nm = 0;
    for (size_t i = lo; i < hi; i++)
        ql_strset_add(modes, &nm, sizeof modes / sizeof modes[0],
                      runs[ps[i].x].axis[QL_AXIS_ACT_MODE]);
    char labels[64][256];
    size_t nl = 0;
    ql_doc d;
    ql_status st = ql_doc_open(&d, err);
    if (st)
        return st;
    fprintf(d.f,
            "# act_cost: %s\n# one block per activation mode; columns: x dkld lo hi "
            "weights\n",
            runs[ps[lo].x].group);
    for (size_t m = 0; m < nm; m++) {
        fprintf(d.f, "%s# index %zu: act_mode %s\n", m ? "\n\n" : "", m, modes[m]);
        for (size_t i = lo; i < hi; i++) {
            if (!ps[i].has_chunks || strcmp(runs[ps[i].x].axis[QL_AXIS_ACT_MODE], modes[m]) != 0)
                continue;
            char label[256];
            weights_label(runs, ps, lo, hi, i, label, sizeof label);
            size_t k = 0;
            while (k < nl && strcmp(labels[k], label) != 0)
                k++;
            if (k == nl && nl < 64)
                ql_strlcpy(labels[nl++], label, sizeof labels[0]);
            /* Series side by side around each weight type. */
            double x = (double)k + 0.15 * ((double)m - 0.5 * (double)(nm - 1));
            fprintf(d.f, "%.6g %.17g %.17g %.17g \"%s\"\n", x, ps[i].dkld.estimate, ps[i].dkld.lo,
                    ps[i].dkld.hi, label);
        }
    }
    char base[64], name[96];
    snprintf(base, sizeof base, "act_cost%s", suffix);
    snprintf(name, sizeof name, "%s.dat", base);
    if ((st = nb_save(o, &d, name, err)) || (st = ql_doc_open(&d, err)))
        return st;
    FILE *f = d.f;
    fprintf(f,
            "# act_cost: ΔKLD (quantized minus f32 activations) per weight type with its\n"
            "# 95%% paired-bootstrap interval. Data: %s.dat. Redraw: gnuplot %s.gp\n"
            "set encoding utf8\nset title ",
            base, base);
    ql_plot_quote(f, runs[ps[lo].x].group);
    fprintf(f,
            "\nset ylabel 'ΔKLD vs f32 activations (nats)'\nset xlabel 'weights'\n"
            "set grid ytics\nset key top left\nset xrange [-0.6:%g]\nset xtics (",
            (double)nl - 0.4);
    for (size_t k = 0; k < nl; k++) {
        fprintf(f, "%s", k ? ", " : "");
        ql_plot_quote(f, labels[k]);
        fprintf(f, " %zu", k);
    }
    fprintf(f, ")\nset terminal %s\nset output '%s.png'\nplot 0 with lines lc rgb 'gray50' notitle",
            QL_PLOT_PNG_TERMINAL, base);
    for (size_t m = 0; m < nm; m++) {
        fprintf(f,
                ", \\\n  '%s.dat' index %zu using 1:2:3:4 with yerrorbars pt 7 ps 1.3 lw 1.5 "
                "title ",
                base, m);
        char t[64];
        snprintf(t, sizeof t, "act %s", modes[m]);
        ql_plot_quote(f, t);
    }
    fprintf(f, "\nset terminal %s\nset output '%s.svg'\nreplot\nunset output\n",
            QL_PLOT_SVG_TERMINAL, base);
    snprintf(name, sizeof name, "%s.gp", base);
    if ((st = nb_save(o, &d, name, err)))
        return st;
    nb_plot(o, name, base);
    return QL_OK;
}

int main(int argc, char **argv)
{
    nb_options o;
    int64_t resamples = QL_BOOTSTRAP_RESAMPLES, seed = (int64_t)QL_BOOTSTRAP_SEED;
    char resamples_help[80], seed_help[80];
    snprintf(resamples_help, sizeof resamples_help,
             "bootstrap resamples (default %d, at least 100)", QL_BOOTSTRAP_RESAMPLES);
    snprintf(seed_help, sizeof seed_help, "seed of the bootstrap's random numbers (default %lld)",
             (long long)seed);
    const ql_opt extra[] = {
        ql_opt_i64("resamples", 0, &resamples, 100, 100000000, "N", resamples_help),
        ql_opt_i64("seed", 's', &seed, 0, INT64_MAX, "S", seed_help),
    };
    const int rc = nb_parse(argc, argv, &o,
                            "The cost of activation quantization per weight type: ΔKLD and Δ ln "
                            "PPL against the\nsame weights with f32 activations, with "
                            "paired-bootstrap intervals over chunks.\nWrites act_cost.md and "
                            "act_cost[-N].png/.svg.",
                            extra, QL_OPT_COUNT(extra));
    if (rc != QL_OPT_GO_ON)
        return rc;

    ql_error err;
    ql_error_clear(&err);
    ql_store *s = NULL;
    nb_result *runs = NULL;
    size_t n = 0, np = 0;
    pair *ps = NULL;
    ql_table *t = NULL;
    ql_doc d = {0};
    ql_status st;
    if ((st = nb_open(&o, &s, &err)) || (st = nb_load_results(s, &o, &runs, &n, &err)))
        goto out;
    ps = calloc(n, sizeof *ps);
    if (!ps) {
        st = ql_error_set(&err, QL_ENOMEM, "out of memory");
        goto out;
    }
    size_t with_chunks = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(runs[i].axis[QL_AXIS_ACT_MODE], "f32") == 0)
            continue;
        ptrdiff_t b = find_base(runs, n, i);
        if (b < 0)
            continue;
        ps[np] = (pair){.x = i, .base = (size_t)b};
        if ((st = bootstrap_pair(s, runs, &ps[np], (size_t)resamples, (unsigned long)seed, &err)))
            goto out;
        with_chunks += ps[np].has_chunks;
        np++;
    }
    if (np == 0) {
        st = ql_error_set(&err, QL_ENOTFOUND,
                          "%s: no pair of finished runs that differ only in act_mode (needs, for "
                          "the same weights, model, text and context, a run with act_mode f32 "
                          "and one with quantized activations, e.g. a sweep with act_mode = f32 "
                          "q8_0)",
                          o.db);
        goto out;
    }
    if (with_chunks == 0) {
        st = ql_error_set(&err, QL_ENOTFOUND,
                          "%s: %zu pair%s of runs found, but none has per-chunk metrics "
                          "(chunk_metrics, store schema 2) to resample; rerun the sweep with a "
                          "qlab that records them",
                          o.db, np, np == 1 ? "" : "s");
        goto out;
    }

    static const ql_table_column cols[] = {
        {"weights", NULL, false},    {"act", NULL, false},     {"KLD (f32 act)", NULL, true},
        {"KLD", NULL, true},         {"ΔKLD", NULL, true},     {"95% CI", NULL, true},
        {"act share %", NULL, true}, {"Δ ln PPL", NULL, true}, {"95% CI", NULL, true},
    };
    if ((st = ql_doc_open(&d, &err)))
        goto out;
    fprintf(d.f,
            "# Cost of activation quantization\n\n"
            "Source: `%s`%s%s%s. ΔKLD = mean KLD with quantized activations − mean KLD with f32 "
            "activations, for the same weights, model, text and context; Δ ln PPL likewise; "
            "act share = ΔKLD / KLD. Intervals: %.0f%% paired bootstrap over the evaluation "
            "chunks (%lld resamples, seed %lld), the same chunks resampled for both runs.\n",
            o.db, o.sweep ? ", sweep `" : "", o.sweep ? o.sweep : "", o.sweep ? "`" : "",
            100.0 * QL_BOOTSTRAP_LEVEL, (long long)resamples, (long long)seed);
    int groups = 0;
    for (size_t lo = 0, hi; lo < np; lo = hi) {
        const char *group = runs[ps[lo].x].group;
        for (hi = lo + 1; hi < np && strcmp(runs[ps[hi].x].group, group) == 0; hi++)
            ;
        if (!(t = ql_table_alloc(cols, sizeof cols / sizeof cols[0]))) {
            st = ql_error_set(&err, QL_ENOMEM, "out of memory");
            goto out;
        }
        size_t missing = 0;
        for (size_t i = lo; i < hi && !st; i++) {
            const pair *p = &ps[i];
            const nb_result *x = &runs[p->x], *b = &runs[p->base];
            char label[256];
            weights_label(runs, ps, lo, hi, i, label, sizeof label);
            missing += !p->has_chunks;
            double share =
                p->has_chunks && x->kld > 0 ? 100.0 * p->dkld.estimate / x->kld : (double)NAN;
            if ((st = ql_table_row(t, &err)) || (st = ql_table_put(t, label, &err)) ||
                (st = ql_table_put(t, x->axis[QL_AXIS_ACT_MODE], &err)) ||
                (st = ql_table_put_num(t, b->kld, "%.3e", &err)) ||
                (st = ql_table_put_num(t, x->kld, "%.3e", &err)) ||
                (st = ql_table_put_num(t, p->has_chunks ? p->dkld.estimate : (double)NAN, "%+.3e",
                                       &err)) ||
                (st = put_ci(t, p->has_chunks, &p->dkld, &err)) ||
                (st = ql_table_put_num(t, share, "%.1f", &err)) ||
                (st = ql_table_put_num(t, p->has_nll ? p->dlnppl.estimate : (double)NAN, "%+.3e",
                                       &err)) ||
                (st = put_ci(t, p->has_nll, &p->dlnppl, &err)))
                break;
        }
        if (st)
            goto out;
        fprintf(d.f, "\n## %s\n\n", group);
        ql_table_write_md(t, d.f, "—");
        if (missing)
            fprintf(d.f, "\n%zu pair%s without per-chunk metrics (no interval).\n", missing,
                    missing == 1 ? "" : "s");
        ql_table_free(t);
        t = NULL;
        char suffix[32] = "";
        if (lo > 0 || hi < np)
            snprintf(suffix, sizeof suffix, "-%d", groups + 1);
        groups++;
        if (missing < hi - lo && (st = write_plot(&o, runs, ps, lo, hi, suffix, &err)))
            goto out;
    }
    st = nb_save(&o, &d, "act_cost.md", &err);
out:
    ql_doc_discard(&d);
    ql_table_free(t);
    free(ps);
    free(runs);
    ql_store_close(s);
    return st ? nb_fail(&o, &err) : 0;
}
