/* Two configs compared on the same tokens (compare.h). */
#include "results/compare.h"

#include <ctype.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"
#include "experiment/config.h"

static const struct {
    const char *name, *label;
} stats[QL_CMP_STATS] = {
    [QL_CMP_KLD] = {"kld_mean", "mean KLD"},
    [QL_CMP_LN_PPL] = {"ln_ppl", "ln PPL"},
    [QL_CMP_TOP1] = {"top1_agree", "top-1"},
};

const char *ql_compare_stat_name(ql_compare_stat s)
{
    QL_ASSERT(s >= 0 && s < QL_CMP_STATS);
    return stats[s].name;
}

const char *ql_compare_stat_label(ql_compare_stat s)
{
    QL_ASSERT(s >= 0 && s < QL_CMP_STATS);
    return stats[s].label;
}

void ql_bootstrap_opts_init(ql_bootstrap_opts *o)
{
    o->resamples = QL_BOOTSTRAP_RESAMPLES;
    o->level = QL_BOOTSTRAP_LEVEL;
    o->seed = QL_BOOTSTRAP_SEED;
}

static ql_status oom(ql_error *err)
{
    return ql_error_set(err, QL_ENOMEM, "compare: out of memory");
}

/* ---------------------------------------------------------------- chunks */

/* The per-chunk sums of a run, in chunk order; sum[stat][i] is NAN where not stored. */
typedef struct {
    size_t n;
    int64_t *chunk;
    double *tokens;
    double *sum[QL_CMP_STATS];
} chunks;

static void chunks_free(chunks *c)
{
    free(c->chunk);
    free(c->tokens);
    for (int k = 0; k < QL_CMP_STATS; k++)
        free(c->sum[k]);
    memset(c, 0, sizeof *c);
}

static double col_or_nan(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? (double)NAN : sqlite3_column_double(st, i);
}

static ql_status load_chunks(ql_store *s, int64_t run_id, chunks *c, ql_error *err)
{
    static const char what[] = "compare: reading the chunk sums";
    memset(c, 0, sizeof *c);
    sqlite3_stmt *st;
    ql_status rc = ql_store_prepare(s,
                                    "SELECT chunk, n_tokens, kld_sum, nll_sum, top1_count"
                                    " FROM chunk_metrics WHERE run_id = ?1 ORDER BY chunk",
                                    &st, NULL, what, err);
    if (rc)
        return rc;
    size_t cap = 0;
    if ((rc = ql_store_bind_int64(s, st, 1, run_id, what, err)))
        goto out;
    for (;;) {
        bool row;
        if ((rc = ql_store_step(s, st, &row, what, err)) || !row)
            break;
        if (c->n == cap) {
            size_t want = cap ? 2 * cap : 64;
            int64_t *ck = realloc(c->chunk, want * sizeof *ck);
            if (ck)
                c->chunk = ck;
            double *tk = realloc(c->tokens, want * sizeof *tk);
            if (tk)
                c->tokens = tk;
            bool ok = ck && tk;
            for (int k = 0; k < QL_CMP_STATS; k++) {
                double *v = realloc(c->sum[k], want * sizeof *v);
                if (v)
                    c->sum[k] = v;
                ok = ok && v;
            }
            if (!ok) {
                rc = oom(err);
                break;
            }
            cap = want;
        }
        c->chunk[c->n] = sqlite3_column_int64(st, 0);
        c->tokens[c->n] = col_or_nan(st, 1);
        c->sum[QL_CMP_KLD][c->n] = col_or_nan(st, 2);
        c->sum[QL_CMP_LN_PPL][c->n] = col_or_nan(st, 3);
        c->sum[QL_CMP_TOP1][c->n] = col_or_nan(st, 4);
        c->n++;
    }
out:
    sqlite3_finalize(st);
    if (rc)
        chunks_free(c);
    return rc;
}

/* Whether statistic k is stored for every chunk. */
static bool complete(const chunks *c, int k)
{
    for (size_t i = 0; i < c->n; i++)
        if (isnan(c->sum[k][i]))
            return false;
    return c->n > 0;
}

ql_status ql_compare_runs(ql_store *s, int64_t run_a, int64_t run_b, const ql_bootstrap_opts *o,
                          ql_comparison *out, ql_error *err)
{
    memset(out, 0, sizeof *out);
    chunks ca, cb;
    ql_status rc = load_chunks(s, run_a, &ca, err);
    if (rc)
        return rc;
    if ((rc = load_chunks(s, run_b, &cb, err))) {
        chunks_free(&ca);
        return rc;
    }
    const double *a[QL_CMP_STATS], *b[QL_CMP_STATS];
    int idx[QL_CMP_STATS];
    size_t k = 0;
    ql_ci ci[QL_CMP_STATS];
    if (ca.n == 0 || cb.n == 0) {
        rc = ql_error_set(err, QL_ENOTFOUND,
                          "%s: run %lld has no per-chunk sums (stored by a qlab before schema 2?); "
                          "rerun its sweep to compare it",
                          ql_store_path(s), (long long)(ca.n == 0 ? run_a : run_b));
        goto out;
    }
    if (ca.n != cb.n) {
        rc = ql_error_set(err, QL_EINVAL,
                          "%s: runs %lld and %lld have %zu and %zu chunks: not the same tokens",
                          ql_store_path(s), (long long)run_a, (long long)run_b, ca.n, cb.n);
        goto out;
    }
    for (size_t i = 0; i < ca.n; i++)
        if (ca.chunk[i] != cb.chunk[i] || ca.tokens[i] != cb.tokens[i]) {
            rc = ql_error_set(err, QL_EINVAL,
                              "%s: runs %lld and %lld: chunk %lld has %.0f and %.0f scored tokens "
                              "(chunks cannot be paired)",
                              ql_store_path(s), (long long)run_a, (long long)run_b,
                              (long long)ca.chunk[i], ca.tokens[i], cb.tokens[i]);
            goto out;
        }
    out->chunks = ca.n;
    for (size_t i = 0; i < ca.n; i++)
        out->tokens += ca.tokens[i];
    for (int j = 0; j < QL_CMP_STATS; j++) {
        if (!complete(&ca, j) || !complete(&cb, j))
            continue;
        double sa = 0, sb = 0;
        for (size_t i = 0; i < ca.n; i++) {
            sa += ca.sum[j][i];
            sb += cb.sum[j][i];
        }
        out->v[j].ok = true;
        out->v[j].a = sa / out->tokens;
        out->v[j].b = sb / out->tokens;
        a[k] = ca.sum[j];
        b[k] = cb.sum[j];
        idx[k++] = j;
    }
    if (k > 0 && (rc = ql_bootstrap_paired_diffs(a, b, ca.tokens, k, ca.n, o->resamples, o->level,
                                                 o->seed, ci, err))) {
        ql_error_prefix(err, "%s: runs %lld and %lld: ", ql_store_path(s), (long long)run_a,
                        (long long)run_b);
        goto out;
    }
    for (size_t j = 0; j < k; j++)
        out->v[idx[j]].diff = ci[j];
out:
    chunks_free(&ca);
    chunks_free(&cb);
    return rc;
}

/* ---------------------------------------------------------------- a front beyond the noise */

/* Whether (xj, yj) is at least as cheap and as good as (xi, yi), one strictly. */
static bool plainly_dominates(double xj, double yj, double xi, double yi)
{
    return !isnan(xj) && !isnan(yj) && !isnan(xi) && !isnan(yi) && xj <= xi && yj <= yi &&
           (xj < xi || yj < yi);
}

ql_status ql_pareto_beyond_noise(ql_store *s, const int64_t *run_ids, const double *x,
                                 const double *y, size_t n, ql_compare_stat stat,
                                 const ql_bootstrap_opts *o, ql_domination *out, bool *plain,
                                 ql_error *err)
{
    *plain = false;
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    if (!order)
        return oom(err);
    for (size_t i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].beaten_by = out[i].within = -1;
        /* Insertion sort by x (stable): the candidates, cheapest first. */
        size_t k = i;
        while (k > 0 && x[order[k - 1]] > x[i])
            order[k] = order[k - 1], k--;
        order[k] = i;
    }
    ql_status rc = QL_OK;
    for (size_t i = 0; i < n && !rc; i++)
        for (size_t c = 0; c < n && out[i].beaten_by < 0; c++) {
            size_t j = order[c];
            if (j == i || !plainly_dominates(x[j], y[j], x[i], y[i]))
                continue;
            if (*plain) {
                out[i].beaten_by = (ptrdiff_t)j;
                break;
            }
            ql_comparison cmp;
            rc = ql_compare_runs(s, run_ids[i], run_ids[j], o, &cmp, err);
            if (rc == QL_ENOTFOUND) {
                /* No chunk sums: plain dominance for every point, from the start. */
                rc = QL_OK;
                *plain = true;
                for (size_t k = 0; k < n; k++)
                    out[k].beaten_by = out[k].within = -1;
                i = (size_t)-1; /* start over: the loop's i++ makes it 0 */
                break;
            }
            if (rc)
                break;
            const ql_compare_value *v = &cmp.v[stat];
            if (v->ok && v->diff.lo > 0.0) {
                out[i].beaten_by = (ptrdiff_t)j;
                out[i].beaten_diff = v->diff;
            } else if (out[i].within < 0) {
                out[i].within = (ptrdiff_t)j;
                out[i].within_diff = v->diff;
            }
        }
    free(order);
    return rc;
}

/* ---------------------------------------------------------------- picking configs */

typedef struct {
    char hash[65];
    char *canonical;
} candidate;

static void candidates_free(candidate *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(c[i].canonical);
    free(c);
}

/* The configs with a finished run (of the sweep). */
static ql_status load_candidates(ql_store *s, const char *sweep, candidate **out, size_t *n,
                                 ql_error *err)
{
    static const char what[] = "compare: reading the configs";
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    ql_status rc = ql_store_prepare(
        s,
        "SELECT DISTINCT c.hash, c.canonical FROM configs c JOIN runs r ON r.config_id = c.id"
        " WHERE r.status = 'done' AND (?1 IS NULL OR EXISTS (SELECT 1 FROM sweep_runs m"
        " WHERE m.run_id = r.id AND m.sweep = ?1)) ORDER BY c.hash",
        &st, NULL, what, err);
    if (rc)
        return rc;
    size_t cap = 0;
    if ((rc = ql_store_bind_text(s, st, 1, sweep, what, err)))
        goto out;
    for (;;) {
        bool row;
        if ((rc = ql_store_step(s, st, &row, what, err)) || !row)
            break;
        if (!ql_grow((void **)out, &cap, *n + 1, sizeof **out)) {
            rc = oom(err);
            break;
        }
        candidate *c = &(*out)[*n];
        ql_strlcpy(c->hash, (const char *)sqlite3_column_text(st, 0), sizeof c->hash);
        const char *canon = (const char *)sqlite3_column_text(st, 1);
        if (!(c->canonical = ql_strdup(canon ? canon : ""))) {
            rc = oom(err);
            break;
        }
        (*n)++;
    }
out:
    sqlite3_finalize(st);
    return rc;
}

static bool is_hex_prefix(const char *s)
{
    size_t n = strlen(s);
    if (n < 4 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    return true;
}

static bool hash_has_prefix(const char *hash, const char *prefix)
{
    for (; *prefix; prefix++, hash++)
        if (*hash != tolower((unsigned char)*prefix))
            return false;
    return true;
}

/* An axis by its name or its report label (any case). */
static bool axis_by_key(const char *key, ql_axis *out)
{
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        if (strcasecmp(key, ql_axis_name((ql_axis)a)) == 0 ||
            strcasecmp(key, ql_axis_get((ql_axis)a)->label) == 0) {
            *out = (ql_axis)a;
            return true;
        }
    return false;
}

/* Whether config c has every term of the label (checked by check_label first). */
static bool label_matches(const ql_config *c, char *const *terms, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(terms[i], '=');
        char key[64];
        ql_axis axis = QL_AXIS_WEIGHT_TYPE;
        const char *value = terms[i];
        if (eq) {
            snprintf(key, sizeof key, "%.*s", (int)(eq - terms[i]), terms[i]);
            axis_by_key(key, &axis);
            value = eq + 1;
        }
        ql_config with = *c;
        ql_error e;
        if (ql_config_set(&with, axis, value, &e) != QL_OK)
            return false;
        char have[QL_CONFIG_VALUE_MAX], want[QL_CONFIG_VALUE_MAX];
        ql_config_axis_string(c, axis, have, sizeof have);
        ql_config_axis_string(&with, axis, want, sizeof want);
        if (strcmp(have, want) != 0)
            return false;
    }
    return true;
}

/* Splits a label into terms (in place) and checks each names an axis and a value
 * the axis accepts. */
static ql_status check_label(char *text, char **terms, size_t max, size_t *n, ql_error *err)
{
    *n = 0;
    for (char *save = NULL, *t = strtok_r(text, " \t", &save); t;
         t = strtok_r(NULL, " \t", &save)) {
        if (*n == max)
            return ql_error_set(err, QL_EINVAL, "'%s': more than %zu terms", t, max);
        const char *eq = strchr(t, '=');
        ql_axis axis = QL_AXIS_WEIGHT_TYPE;
        if (eq) {
            char key[64];
            snprintf(key, sizeof key, "%.*s", (int)(eq - t), t);
            if (!axis_by_key(key, &axis))
                return ql_error_set(err, QL_EINVAL,
                                    "'%s': no axis '%s' (axes: weight_type, act_mode, ... or "
                                    "their labels weights, act, ...)",
                                    t, key);
        }
        ql_config probe;
        ql_config_init(&probe);
        ql_status rc = ql_config_set(&probe, axis, eq ? eq + 1 : t, err);
        if (rc)
            return rc;
        terms[(*n)++] = t;
    }
    if (*n == 0)
        return ql_error_set(err, QL_EINVAL, "an empty config label");
    return QL_OK;
}

ql_status ql_compare_find_config(ql_store *s, const char *sweep, const char *spec, char hash[65],
                                 ql_error *err)
{
    candidate *cands;
    size_t nc;
    ql_status rc = load_candidates(s, sweep, &cands, &nc, err);
    if (rc)
        return rc;
    bool hex = is_hex_prefix(spec);
    char *text = ql_strdup(spec), *terms[QL_AXIS_COUNT * 2];
    size_t nt = 0;
    size_t *hits = calloc(nc ? nc : 1, sizeof *hits), nh = 0;
    if (!text || !hits) {
        rc = oom(err);
        goto out;
    }
    /* A hex word may be a hash prefix or a weight type (BF16): both are tried. */
    ql_error label_err;
    ql_error_clear(&label_err);
    bool label_ok = check_label(text, terms, sizeof terms / sizeof terms[0], &nt, &label_err) == 0;
    if (!hex && !label_ok) {
        rc = ql_error_set(err, QL_EINVAL, "config '%s': %s", spec, label_err.msg);
        goto out;
    }
    for (size_t i = 0; i < nc; i++) {
        bool hit = hex && hash_has_prefix(cands[i].hash, spec);
        if (!hit && label_ok) {
            ql_config c;
            ql_error e;
            hit = ql_config_from_string(cands[i].canonical, &c, &e) == QL_OK &&
                  label_matches(&c, terms, nt);
        }
        if (hit)
            hits[nh++] = i;
    }
    const char *where = sweep ? " of sweep " : "", *sw = sweep ? sweep : "";
    if (nh == 1) {
        memcpy(hash, cands[hits[0]].hash, 65);
    } else if (nh == 0) {
        rc = ql_error_set(err, QL_ENOTFOUND,
                          "%s: no finished config%s%s matches '%s' (see 'qlab query configs')",
                          ql_store_path(s), where, sw, spec);
    } else {
        char list[1024];
        size_t o = 0;
        for (size_t i = 0; i < nh && i < 4 && o < sizeof list; i++)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%.12s (%s)", i ? "; " : "",
                                  cands[hits[i]].hash, cands[hits[i]].canonical);
        rc = ql_error_set(err, QL_EINVAL,
                          "%s: %zu configs%s%s match '%s': %s%s; name more axes or give a hash "
                          "prefix",
                          ql_store_path(s), nh, where, sw, spec, list, nh > 4 ? "; ..." : "");
    }
out:
    free(hits);
    free(text);
    candidates_free(cands, nc);
    return rc;
}

ql_status ql_compare_groups(ql_store *s, const char *sweep, const char *hash_a, const char *hash_b,
                            ql_compare_group **out, size_t *n, ql_error *err)
{
    static const char what[] = "compare: pairing the runs";
    *out = NULL;
    *n = 0;
    /* Runs of the two configs (in the sweep, when given) by model, text, ctx, chunks. */
    static const char sql[] =
        "WITH done AS (SELECT r.id, c.hash, r.model_id, r.dataset_id, r.ctx, r.chunks"
        " FROM runs r JOIN configs c ON c.id = r.config_id WHERE r.status = 'done'"
        " AND (?3 IS NULL OR EXISTS (SELECT 1 FROM sweep_runs m WHERE m.run_id = r.id"
        " AND m.sweep = ?3)))"
        " SELECT a.id, b.id, coalesce(mo.name, mo.path), d.name, a.ctx, a.chunks"
        " FROM done a JOIN done b ON b.model_id = a.model_id AND b.dataset_id = a.dataset_id"
        " AND b.ctx = a.ctx AND b.chunks = a.chunks"
        " JOIN models mo ON mo.id = a.model_id JOIN datasets d ON d.id = a.dataset_id"
        " WHERE a.hash = ?1 AND b.hash = ?2 ORDER BY 3, 4, a.ctx, a.chunks";
    sqlite3_stmt *st;
    ql_status rc = ql_store_prepare(s, sql, &st, NULL, what, err);
    if (rc)
        return rc;
    size_t cap = 0;
    if ((rc = ql_store_bind_text(s, st, 1, hash_a, what, err)) ||
        (rc = ql_store_bind_text(s, st, 2, hash_b, what, err)) ||
        (rc = ql_store_bind_text(s, st, 3, sweep, what, err)))
        goto out;
    for (;;) {
        bool row;
        if ((rc = ql_store_step(s, st, &row, what, err)) || !row)
            break;
        if (!ql_grow((void **)out, &cap, *n + 1, sizeof **out)) {
            rc = oom(err);
            break;
        }
        ql_compare_group *g = &(*out)[(*n)++];
        g->run_a = sqlite3_column_int64(st, 0);
        g->run_b = sqlite3_column_int64(st, 1);
        const char *m = (const char *)sqlite3_column_text(st, 2);
        const char *d = (const char *)sqlite3_column_text(st, 3);
        ql_strlcpy(g->model, m ? m : "", sizeof g->model);
        ql_strlcpy(g->dataset, d ? d : "", sizeof g->dataset);
        g->ctx = sqlite3_column_int(st, 4);
        g->chunks = sqlite3_column_int(st, 5);
    }
    if (!rc && *n == 0)
        rc = ql_error_set(err, QL_ENOTFOUND,
                          "%s: configs %.12s and %.12s have no finished runs on the same model, "
                          "text, ctx and chunks",
                          ql_store_path(s), hash_a, hash_b);
out:
    sqlite3_finalize(st);
    if (rc) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}
