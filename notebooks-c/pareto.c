/* pareto: which formats are worth their bits? For every (model, text, ctx,
 * chunks) of the finished runs, the Pareto front across configs in bits per
 * weight against mean KLD and against PPL (both minimised). A config is dominated
 * only when another config of at most its bits per weight is better by more than
 * the noise: the 95% paired-bootstrap interval over chunks of the difference (mean
 * KLD, or ln PPL for the PPL front; results/compare.h) excludes zero. Configs within
 * the noise of a cheaper one stay on the front, with the cheaper one named. Configs
 * whose types did not apply (results/applicability.h) are listed apart. Runs without
 * per-chunk sums fall back to plain dominance, as the table says. Writes pareto.md
 * (every config with its front membership, the cheapest config that beats it and by
 * how much) and one plot per group (pareto[-N].png/.svg: KLD and PPL panels, the
 * fronts joined). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/table.h"
#include "base/util.h"
#include "experiment/config.h"
#include "nb.h"
#include "results/analysis.h"
#include "results/compare.h"
#include "results/plot.h"

/* A metric's cell as the metric list formats it; missing for NaN. */
static ql_status put_metric(ql_table *t, ql_metric_id id, double v, ql_error *err)
{
    char buf[64];
    ql_metric_format(id, v, buf, sizeof buf);
    return ql_table_put(t, buf[0] ? buf : NULL, err);
}

/* Labels: the weight type and the axes other than act_mode that vary within
 * the group [lo, hi), leaving out their plain values. */
static void make_labels(nb_result *v, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++)
        ql_strlcpy(v[i].label, v[i].axis[QL_AXIS_WEIGHT_TYPE], sizeof v[i].label);
    for (int a = QL_AXIS_OUTLIER_RATIO; a < QL_AXIS_COUNT; a++) {
        bool varies = false;
        for (size_t i = lo + 1; i < hi; i++)
            varies = varies || strcmp(v[i].axis[a], v[lo].axis[a]) != 0;
        if (!varies)
            continue;
        const ql_axis_info *ai = ql_axis_get((ql_axis)a);
        char dflt[QL_CONFIG_VALUE_MAX];
        ql_axis_default_string((ql_axis)a, dflt, sizeof dflt);
        for (size_t i = lo; i < hi; i++) {
            const char *val = v[i].axis[a];
            if ((ai->flags & QL_AXIS_LABEL_SKIPS_DEFAULT) && strcmp(val, dflt) == 0)
                continue;
            size_t n = strlen(v[i].label);
            snprintf(v[i].label + n, sizeof v[i].label - n, " %s=%s", ai->label, val);
        }
    }
}

/* The two panels (KLD, PPL) of a group's plot. */
static void write_panels(FILE *f, const char *base, const char *title, bool kld_log)
{
    fputs("set multiplot layout 1,2 title ", f);
    ql_plot_quote(f, title);
    fputs("\nset grid\nset xlabel 'bits per weight'\nset key top right\n"
          "set offsets graph 0.05, graph 0.05, graph 0.08, graph 0.05\n"
          "set ylabel 'mean KLD (nats)'\n",
          f);
    if (kld_log)
        fputs("set logscale y\nset format y '%.0e'\n", f);
    fprintf(f,
            "plot '%s.dat' index 0 using 1:2 with points pt 7 lc rgb 'gray60' title 'config', \\\n"
            "     '' index 1 using 1:2 with linespoints pt 7 ps 1.3 lw 2 lc rgb 'dark-red' "
            "title 'front', \\\n"
            "     '' index 1 using 1:2:4 with labels offset char 0,1.1 font ',8' notitle\n"
            "unset logscale y\nset format y '%%g'\nset ylabel 'perplexity'\n"
            "plot '%s.dat' index 0 using 1:3 with points pt 7 lc rgb 'gray60' title 'config', "
            "\\\n"
            "     '' index 2 using 1:3 with linespoints pt 7 ps 1.3 lw 2 lc rgb 'dark-blue' "
            "title 'front', \\\n"
            "     '' index 2 using 1:3:4 with labels offset char 0,1.1 font ',8' notitle\n"
            "unset multiplot\n",
            base, base);
}

/* The plot of one group: all configs, and each front joined in bpw order. */
static ql_status write_plot(const nb_options *o, const nb_result *v, size_t n, const bool *fk,
                            const bool *fp, const char *suffix, ql_error *err)
{
    char base[256], name[300];
    snprintf(base, sizeof base, "pareto%s", suffix);
    ql_doc d;
    ql_status st = ql_doc_open(&d, err);
    if (st)
        return st;
    fprintf(d.f, "# pareto: %s\n# columns: bpw kld_mean ppl label act_mode\n", v[0].group);
    /* index 0: every config; 1: the KLD front; 2: the PPL front. */
    for (int block = 0; block < 3; block++) {
        fprintf(d.f, "%s# index %d: %s\n", block ? "\n\n" : "", block,
                block == 0   ? "all configs"
                : block == 1 ? "front in (bpw, KLD)"
                             : "front in (bpw, PPL)");
        for (size_t i = 0; i < n; i++) {
            if ((block == 1 && !fk[i]) || (block == 2 && !fp[i]) || v[i].applies == QL_APPLIES_NONE)
                continue;
            /* The plot's label names the activation mode unless it is f32. */
            const char *act = v[i].axis[QL_AXIS_ACT_MODE];
            bool f32 = strcmp(act, "f32") == 0;
            fprintf(d.f, "%.17g %.17g %.17g \"%s%s%s\" %s\n", v[i].bpw, v[i].kld, v[i].ppl,
                    v[i].label, f32 ? "" : " act=", f32 ? "" : act, act);
        }
    }
    snprintf(name, sizeof name, "%s.dat", base);
    if ((st = nb_save(o, &d, name, err)) || (st = ql_doc_open(&d, err)))
        return st;
    bool kld_positive = false;
    for (size_t i = 0; i < n; i++)
        kld_positive = kld_positive || (fk[i] && v[i].kld > 0.0);
    fprintf(d.f,
            "# pareto: the front across formats (joined; a config within the noise of a\n"
            "# cheaper one stays on it) among all configs (grey).\n"
            "# Data: %s.dat. Redraw: gnuplot %s.gp\nset encoding utf8\n",
            base, base);
    /* A multiplot cannot be replotted: the panels are drawn once per terminal. */
    for (int svg = 0; svg < 2; svg++) {
        fprintf(d.f, "set terminal %s\nset output '%s.%s'\n",
                svg ? QL_PLOT_SVG_TERMINAL : QL_PLOT_PNG_TERMINAL, base, svg ? "svg" : "png");
        write_panels(d.f, base, v[0].group, kld_positive);
    }
    fputs("unset output\n", d.f);
    snprintf(name, sizeof name, "%s.gp", base);
    if ((st = nb_save(o, &d, name, err)))
        return st;
    nb_plot(o, name, base);
    return QL_OK;
}

/* Dominance beyond the noise in a group [v, v + n) on KLD (dk) and PPL (dp); configs
 * whose types did not apply take no part. *plain: some run has no chunk sums. */
static ql_status dominance(ql_store *s, const nb_result *v, size_t n, const ql_bootstrap_opts *bo,
                           ql_domination *dk, ql_domination *dp, bool *plain, ql_error *err)
{
    int64_t *runs = malloc(n * sizeof *runs);
    double *x = malloc(n * sizeof *x), *yk = malloc(n * sizeof *yk), *yp = malloc(n * sizeof *yp);
    ql_status st = QL_OK;
    if (!runs || !x || !yk || !yp) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        bool used = v[i].applies != QL_APPLIES_NONE;
        runs[i] = v[i].run_id;
        x[i] = used ? v[i].bpw : (double)NAN;
        yk[i] = v[i].kld;
        yp[i] = v[i].ppl;
    }
    bool plain_k = false, plain_p = false;
    if (!(st = ql_pareto_beyond_noise(s, runs, x, yk, n, QL_CMP_KLD, bo, dk, &plain_k, err)))
        st = ql_pareto_beyond_noise(s, runs, x, yp, n, QL_CMP_LN_PPL, bo, dp, &plain_p, err);
    *plain = plain_k || plain_p;
out:
    free(runs);
    free(x);
    free(yk);
    free(yp);
    return st;
}

/* "Q8_0 (f32): +1.2e-03 [+1.0e-03, +1.4e-03]", the config and i's excess over it. */
static void dominator_text(const nb_result *v, ptrdiff_t j, const ql_ci *d, bool plain, bool ppl,
                           char *buf, size_t size)

{
    if (plain)
        snprintf(buf, size, "%s (%s)", v[j].label, v[j].axis[QL_AXIS_ACT_MODE]);
    else
        snprintf(buf, size, ppl ? "%s (%s): %+.4f [%+.4f, %+.4f]" : "%s (%s): %+.2e [%+.2e, %+.2e]",
                 v[j].label, v[j].axis[QL_AXIS_ACT_MODE], d->estimate, d->lo, d->hi);
}

int main(int argc, char **argv)
{
    nb_options o;
    /* Fewer resamples than qlab compare: one comparison per dominated pair. */
    int64_t resamples = 2000, seed = (int64_t)QL_BOOTSTRAP_SEED;
    char seed_help[80];
    snprintf(seed_help, sizeof seed_help, "seed of the bootstrap's random numbers (default %lld)",
             (long long)seed);
    const ql_opt extra[] = {
        ql_opt_i64("resamples", 0, &resamples, 100, 100000000, "N",
                   "bootstrap resamples per comparison (default 2000)"),
        ql_opt_i64("seed", 's', &seed, 0, INT64_MAX, "S", seed_help),
    };
    int rc = nb_parse(argc, argv, &o,
                      "The Pareto front across formats: bits per weight against mean KLD and "
                      "against PPL,\nper model, text and context; a config is dominated only "
                      "by a difference beyond\nthe noise (95% paired-bootstrap interval over "
                      "chunks). Writes pareto.md and\npareto[-N].png/.svg.",
                      extra, QL_OPT_COUNT(extra));
    if (rc != QL_OPT_GO_ON)
        return rc;
    ql_bootstrap_opts bo;
    ql_bootstrap_opts_init(&bo);
    bo.resamples = (size_t)resamples;
    bo.seed = (unsigned long)seed;
    ql_error err;
    ql_error_clear(&err);
    ql_store *s = NULL;
    nb_result *all = NULL;
    size_t n_all = 0;
    bool *fk = NULL, *fp = NULL;
    ql_domination *dk = NULL, *dp = NULL;
    ql_table *t = NULL;
    ql_doc d = {0};
    ql_status st;
    if ((st = nb_open(&o, &s, &err)) || (st = nb_load_results(s, &o, &all, &n_all, &err)))
        goto out;
    fk = calloc(n_all, sizeof *fk);
    fp = calloc(n_all, sizeof *fp);
    dk = calloc(n_all, sizeof *dk);
    dp = calloc(n_all, sizeof *dp);
    /* The metrics as the metric list labels and formats them (records.h). */
    static const ql_metric_id shown[] = {QL_METRIC_bpw, QL_METRIC_kld_mean, QL_METRIC_ppl};
    const ql_table_column cols[] = {
        {"config", NULL, false},
        {ql_axis_get(QL_AXIS_ACT_MODE)->label, NULL, false},
        {ql_metric_get(shown[0])->label, NULL, true},
        {ql_metric_get(shown[1])->label, NULL, true},
        {ql_metric_get(shown[2])->label, NULL, true},
        {"KLD front", NULL, false},
        {"PPL front", NULL, false},
        {"beaten on KLD by (ΔKLD, 95% CI)", NULL, false},
        {"within the noise of", NULL, false},
    };
    if (!fk || !fp || !dk || !dp || (st = ql_doc_open(&d, &err))) {
        st = st ? st : ql_error_set(&err, QL_ENOMEM, "out of memory");
        goto out;
    }
    fprintf(d.f,
            "# Pareto front across formats\n\n"
            "Source: `%s`%s%s%s. A config is on a front unless another config of the same "
            "model, text and context has at most its bits per weight and a lower error (mean "
            "KLD, or PPL) by more than the noise: the 95%% paired-bootstrap interval over the "
            "chunks (%lld resamples) of the difference excludes zero. \"Beaten on KLD by\" "
            "names the cheapest config that does, with this config's excess KLD over it; "
            "\"within the noise of\" the cheapest that is as good within the interval.\n",
            o.db, o.sweep ? ", sweep `" : "", o.sweep ? o.sweep : "", o.sweep ? "`" : "",
            (long long)resamples);
    int groups = 0;
    for (size_t lo = 0, hi; lo < n_all; lo = hi) {
        for (hi = lo + 1; hi < n_all && strcmp(all[hi].group, all[lo].group) == 0; hi++)
            ;
        size_t n = hi - lo;
        nb_result *v = all + lo;
        make_labels(all, lo, hi);
        bool plain = false;
        if ((st = dominance(s, v, n, &bo, dk, dp, &plain, &err)))
            goto out;
        size_t nk = 0, np = 0, na = 0;
        for (size_t i = 0; i < n; i++) {
            bool used = v[i].applies != QL_APPLIES_NONE;
            fk[i] = used && !isnan(v[i].kld) && dk[i].beaten_by < 0;
            fp[i] = used && !isnan(v[i].ppl) && dp[i].beaten_by < 0;
            nk += fk[i];
            np += fp[i];
            na += !used;
        }
        t = ql_table_alloc(cols, sizeof cols / sizeof cols[0]);
        if (!t) {
            st = ql_error_set(&err, QL_ENOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < n && !st; i++) {
            if (v[i].applies == QL_APPLIES_NONE)
                continue;
            if ((st = ql_table_row(t, &err)) || (st = ql_table_put(t, v[i].label, &err)) ||
                (st = ql_table_put(t, v[i].axis[QL_AXIS_ACT_MODE], &err)) ||
                (st = put_metric(t, shown[0], v[i].bpw, &err)) ||
                (st = put_metric(t, shown[1], v[i].kld, &err)) ||
                (st = put_metric(t, shown[2], v[i].ppl, &err)) ||
                (st = ql_table_put(t, fk[i] ? "yes" : "no", &err)) ||
                (st = ql_table_put(t, fp[i] ? "yes" : "no", &err)))
                break;
            char beaten[700], within[700];
            if (dk[i].beaten_by >= 0)
                dominator_text(v, dk[i].beaten_by, &dk[i].beaten_diff, plain, false, beaten,
                               sizeof beaten);
            if (dk[i].beaten_by < 0 && dk[i].within >= 0)
                dominator_text(v, dk[i].within, &dk[i].within_diff, plain, false, within,
                               sizeof within);
            if ((st = ql_table_put(t, dk[i].beaten_by >= 0 ? beaten : NULL, &err)))
                break;
            st = ql_table_put(t, dk[i].beaten_by < 0 && dk[i].within >= 0 ? within : NULL, &err);
        }
        if (st)
            goto out;
        fprintf(d.f, "\n## %s\n\n%zu configs: %zu on the KLD front, %zu on the PPL front.%s\n\n",
                v[0].group, n - na, nk, np,
                plain ? " These runs have no per-chunk sums: plain dominance, without the "
                        "noise."
                      : "");
        ql_table_write_md(t, d.f, "—");
        ql_table_free(t);
        t = NULL;
        if (na) {
            fprintf(d.f, "\nNot applicable (their types applied to no tensor of a class; left "
                         "out of the fronts):\n\n");
            for (size_t i = 0; i < n; i++)
                if (v[i].applies == QL_APPLIES_NONE)
                    fprintf(d.f, "- %s (%s): measured %s\n", v[i].label,
                            v[i].axis[QL_AXIS_ACT_MODE], v[i].types_used);
        }
        char suffix[32] = "";
        if (lo > 0 || hi < n_all)
            snprintf(suffix, sizeof suffix, "-%d", groups + 1);
        if ((st = write_plot(&o, v, n, fk, fp, suffix, &err)))
            goto out;
        groups++;
    }
    st = nb_save(&o, &d, "pareto.md", &err);
out:
    ql_doc_discard(&d);
    ql_table_free(t);
    free(fk);
    free(fp);
    free(dk);
    free(dp);
    free(all);
    ql_store_close(s);
    return st ? nb_fail(&o, &err) : 0;
}
