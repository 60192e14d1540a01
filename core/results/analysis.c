#include "results/analysis.h"

#include <gsl/gsl_rng.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <math.h>
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

ql_status ql_bootstrap_paired_diff(const double *a, const double *b, const double *w, size_t n,
                                   size_t resamples, double level, unsigned long seed, ql_ci *out,
                                   ql_error *err)
{
    if (n < 2)
        return ql_error_set(err, QL_EINVAL, "bootstrap: %zu chunk%s; at least 2 are needed", n,
                            n == 1 ? "" : "s");
    if (resamples < 100)
        return ql_error_set(err, QL_EINVAL, "bootstrap: %zu resamples; at least 100 are needed",
                            resamples);
    if (!(level > 0.0 && level < 1.0))
        return ql_error_set(err, QL_EINVAL, "bootstrap: level %g is not in (0, 1)", level);
    double dsum = 0.0, wsum = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i]) || !isfinite(w[i]) || !(w[i] > 0.0))
            return ql_error_set(err, QL_EINVAL,
                                "bootstrap: chunk %zu: a = %g, b = %g, w = %g (values must be "
                                "finite, weights > 0)",
                                i, a[i], b[i], w[i]);
        dsum += a[i] - b[i];
        wsum += w[i];
    }

    /* The differences are formed once; a replicate only sums them. */
    double *d = malloc(n * sizeof *d);
    double *rep = malloc(resamples * sizeof *rep);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    ql_status rc = QL_OK;
    if (!d || !rep || !rng) {
        rc = ql_error_set(err, QL_ENOMEM, "bootstrap: out of memory (%zu chunks, %zu resamples)", n,
                          resamples);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        d[i] = a[i] - b[i];
    gsl_rng_set(rng, seed);
    for (size_t r = 0; r < resamples; r++) {
        double ds = 0.0, ws = 0.0;
        for (size_t k = 0; k < n; k++) {
            size_t i = (size_t)gsl_rng_uniform_int(rng, (unsigned long)n);
            ds += d[i];
            ws += w[i];
        }
        rep[r] = ds / ws;
    }
    gsl_sort(rep, 1, resamples);
    out->estimate = dsum / wsum;
    out->lo = gsl_stats_quantile_from_sorted_data(rep, 1, resamples, (1.0 - level) / 2.0);
    out->hi = gsl_stats_quantile_from_sorted_data(rep, 1, resamples, (1.0 + level) / 2.0);
    out->se = gsl_stats_sd(rep, 1, resamples);
    out->n = n;
    out->resamples = resamples;
out:
    gsl_rng_free(rng);
    free(rep);
    free(d);
    return rc;
}
