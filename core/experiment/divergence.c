/* Per-layer divergence (divergence.h). */
#include "experiment/divergence.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "experiment/distribution.h"

struct ql_divergence {
    int n_layer;
    int64_t max_tokens;
    int64_t *n;      /* (n_layer,) tokens added per layer */
    double *rel;     /* (n_layer, max_tokens) */
    double *cos;     /* (n_layer, max_tokens) */
};

ql_status ql_divergence_alloc(ql_divergence **out, int n_layer, int64_t max_tokens, ql_error *err)
{
    *out = NULL;
    ql_divergence *d = calloc(1, sizeof *d);
    if (!d)
        return ql_error_set(err, QL_ENOMEM, "out of memory for the per-layer divergence");
    d->n_layer = n_layer;
    d->max_tokens = max_tokens;
    const size_t cells = (size_t)n_layer * (size_t)(max_tokens > 0 ? max_tokens : 1);
    d->n = calloc((size_t)n_layer, sizeof *d->n);
    d->rel = malloc(cells * sizeof *d->rel);
    d->cos = malloc(cells * sizeof *d->cos);
    if (!d->n || !d->rel || !d->cos) {
        ql_divergence_free(d);
        return ql_error_set(err, QL_ENOMEM,
                            "out of memory for the per-layer divergence of %d layers x %lld "
                            "tokens",
                            n_layer, (long long)max_tokens);
    }
    *out = d;
    return QL_OK;
}

void ql_divergence_free(ql_divergence *d)
{
    if (!d)
        return;
    free(d->n);
    free(d->rel);
    free(d->cos);
    free(d);
}

void ql_divergence_reset(ql_divergence *d)
{
    memset(d->n, 0, (size_t)d->n_layer * sizeof *d->n);
}

ql_status ql_divergence_add(ql_divergence *d, int layer, const float *h, const float *r,
                            int64_t n_tok, int64_t n_embd, ql_error *err)
{
    if (layer < 0 || layer >= d->n_layer || d->n[layer] + n_tok > d->max_tokens)
        return ql_error_set(err, QL_EINVAL, "divergence: layer %d, %lld tokens more than %lld",
                            layer, (long long)n_tok, (long long)d->max_tokens);
    double *rel = d->rel + (size_t)layer * (size_t)d->max_tokens + d->n[layer];
    double *cos = d->cos + (size_t)layer * (size_t)d->max_tokens + d->n[layer];
#pragma omp parallel for schedule(static) if (n_tok * n_embd >= 65536)
    for (int64_t t = 0; t < n_tok; t++) {
        const float *a = h + t * n_embd, *b = r + t * n_embd;
        double diff = 0, rr = 0, hh = 0, hr = 0;
        for (int64_t i = 0; i < n_embd; i++) {
            const double x = (double)a[i], y = (double)b[i];
            diff += (x - y) * (x - y);
            rr += y * y;
            hh += x * x;
            hr += x * y;
        }
        rel[t] = rr > 0 ? sqrt(diff / rr) : (double)NAN;
        cos[t] = rr > 0 && hh > 0 ? hr / sqrt(hh * rr) : (double)NAN;
    }
    d->n[layer] += n_tok;
    return QL_OK;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void ql_divergence_finish(const ql_divergence *d, ql_layer_record *out)
{
    double *sorted = malloc((size_t)(d->max_tokens > 0 ? d->max_tokens : 1) * sizeof *sorted);
    for (int l = 0; l < d->n_layer; l++) {
        const double *rel = d->rel + (size_t)l * (size_t)d->max_tokens;
        const double *cos = d->cos + (size_t)l * (size_t)d->max_tokens;
        int64_t n = 0, nc = 0;
        double sum = 0, sum_cos = 0;
        for (int64_t t = 0; t < d->n[l]; t++) {
            if (!isnan(rel[t])) {
                sum += rel[t];
                if (sorted)
                    sorted[n] = rel[t];
                n++;
            }
            if (!isnan(cos[t])) {
                sum_cos += cos[t];
                nc++;
            }
        }
        ql_layer_record *o = &out[l];
        o->layer = l;
        o->rel_err_mean = n ? sum / (double)n : (double)NAN;
        o->cos_mean = nc ? sum_cos / (double)nc : (double)NAN;
        o->rel_err_p99 = (double)NAN;
        if (n && sorted) {
            qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
            o->rel_err_p99 = ql_percentile_sorted(sorted, n, 0.99);
        }
    }
    free(sorted);
}
