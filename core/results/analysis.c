#include "results/analysis.h"

#include <gsl/gsl_rng.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ================================================================ Pareto front */

/* Whether (xj, yj) dominates (xi, yi) under minimisation of both. */
static bool dominates(double xj, double yj, double xi, double yi)
{
    return xj <= xi && yj <= yi && (xj < xi || yj < yi);
}

void ql_pareto_front(const double *x, const double *y, size_t n, bool *on_front,
                     ptrdiff_t *dominated_by)
{
    for (size_t i = 0; i < n; i++) {
        bool valid = !isnan(x[i]) && !isnan(y[i]);
        ptrdiff_t best = -1;
        for (size_t j = 0; j < n && valid; j++) {
            if (j == i || isnan(x[j]) || isnan(y[j]) || !dominates(x[j], y[j], x[i], y[i]))
                continue;
            if (best < 0 || x[j] < x[best] || (x[j] == x[best] && y[j] < y[best]))
                best = (ptrdiff_t)j;
        }
        on_front[i] = valid && best < 0;
        if (dominated_by)
            dominated_by[i] = best;
    }
}

/* ================================================================ bootstrap */

bool ql_ci_excludes_zero(const ql_ci *ci)
{
    return ci->lo > 0.0 || ci->hi < 0.0;
}

ql_status ql_bootstrap_paired_diff(const double *a, const double *b, const double *w, size_t n,
                                   size_t resamples, double level, unsigned long seed, ql_ci *out,
                                   ql_error *err)
{
    return ql_bootstrap_paired_diffs(&a, &b, w, 1, n, resamples, level, seed, out, err);
}

ql_status ql_bootstrap_paired_diffs(const double *const *a, const double *const *b, const double *w,
                                    size_t k, size_t n, size_t resamples, double level,
                                    unsigned long seed, ql_ci *out, ql_error *err)
{
    if (n < 2)
        return ql_error_set(err, QL_EINVAL, "bootstrap: %zu chunk%s; at least 2 are needed", n,
                            n == 1 ? "" : "s");
    if (resamples < 100)
        return ql_error_set(err, QL_EINVAL, "bootstrap: %zu resamples; at least 100 are needed",
                            resamples);
    if (!(level > 0.0 && level < 1.0))
        return ql_error_set(err, QL_EINVAL, "bootstrap: level %g is not in (0, 1)", level);
    double wsum = 0.0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < k; j++) {
            if (isfinite(a[j][i]) && isfinite(b[j][i]) && isfinite(w[i]) && w[i] > 0.0)
                continue;
            char which[48] = "";
            if (k > 1)
                snprintf(which, sizeof which, "statistic %zu, ", j);
            return ql_error_set(err, QL_EINVAL,
                                "bootstrap: %schunk %zu: a = %g, b = %g, w = %g (values must be "
                                "finite, weights > 0)",
                                which, i, a[j][i], b[j][i], w[i]);
        }
        wsum += w[i];
    }
    /* The differences are formed once; a replicate only sums them. */
    double *d = malloc(k * n * sizeof *d);
    double *rep = malloc(k * resamples * sizeof *rep);
    double *ds = malloc(k * sizeof *ds);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    ql_status rc = QL_OK;
    if (!d || !rep || !ds || !rng) {
        rc = ql_error_set(err, QL_ENOMEM, "bootstrap: out of memory (%zu chunks, %zu resamples)", n,
                          resamples);
        goto out;
    }
    for (size_t j = 0; j < k; j++)
        for (size_t i = 0; i < n; i++)
            d[j * n + i] = a[j][i] - b[j][i];
    gsl_rng_set(rng, seed);
    for (size_t r = 0; r < resamples; r++) {
        double ws = 0.0;
        for (size_t j = 0; j < k; j++)
            ds[j] = 0.0;
        for (size_t c = 0; c < n; c++) {
            size_t i = (size_t)gsl_rng_uniform_int(rng, (unsigned long)n);
            for (size_t j = 0; j < k; j++)
                ds[j] += d[j * n + i];
            ws += w[i];
        }
        for (size_t j = 0; j < k; j++)
            rep[j * resamples + r] = ds[j] / ws;
    }
    for (size_t j = 0; j < k; j++) {
        double *rj = rep + j * resamples, dsum = 0.0;
        for (size_t i = 0; i < n; i++)
            dsum += d[j * n + i];
        ql_ci *o = &out[j];
        o->estimate = dsum / wsum;
        size_t below = 0, above = 0;
        for (size_t r = 0; r < resamples; r++) {
            below += rj[r] <= 0.0;
            above += rj[r] >= 0.0;
        }
        double tail = (double)(below < above ? below : above);
        o->p = fmin(1.0, (1.0 + 2.0 * tail) / (1.0 + (double)resamples));
        gsl_sort(rj, 1, resamples);
        o->lo = gsl_stats_quantile_from_sorted_data(rj, 1, resamples, (1.0 - level) / 2.0);
        o->hi = gsl_stats_quantile_from_sorted_data(rj, 1, resamples, (1.0 + level) / 2.0);
        o->se = gsl_stats_sd(rj, 1, resamples);
        o->n = n;
        o->resamples = resamples;
    }
out:
    gsl_rng_free(rng);
    free(ds);
    free(rep);
    free(d);
    return rc;
}
