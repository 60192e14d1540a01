/* qlab compare: two configs of a results store compared on the same tokens, with
 * paired-bootstrap intervals over chunks (results/compare.h). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/table.h"
#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "results/compare.h"
#include "results/store.h"

enum { OUT_TEXT, OUT_CSV, OUT_JSON };

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab compare [--db PATH] [--sweep NAME] [--text NAME] [--resamples N]\n"
           "                    [--seed S] [--level L] [--csv | --json] A B\n"
           "\n"
           "Compares config A with config B on the tokens both were evaluated on (same model,\n"
           "text, ctx and chunks): the differences A - B of mean KLD, ln PPL and top-1\n"
           "agreement, each with a confidence interval and a p-value from a paired bootstrap\n"
           "over the evaluation chunks (the same resampled chunks for both configs and all\n"
           "three statistics). A difference whose interval excludes zero is more than the\n"
           "noise of the text.\n"
           "\n"
           "A and B: a config hash or prefix (at least 4 hex digits, see 'qlab query\n"
           "configs'), or a label: a weight type and axis=value terms, by axis name or\n"
           "report label ('Q4_0', 'Q4_0 act=native', 'weight_type=Q5_0 head_type=F32').\n"
           "Each must match exactly one config with a finished run.\n"
           "A sweep of several texts gives one comparison per text; --text keeps one.\n"
           "\n");
    ql_opt_print_options(stdout, p);
}

/* Number formats of a statistic's means and difference in the text table. */
static void fmt_value(ql_compare_stat k, double v, bool diff, char *buf, size_t size)
{
    switch (k) {
    case QL_CMP_KLD:
        snprintf(buf, size, diff ? "%+.3e" : "%.3e", v);
        break;
    case QL_CMP_LN_PPL:
        snprintf(buf, size, diff ? "%+.5f" : "%.5f", v);
        break;
    case QL_CMP_TOP1:
    case QL_CMP_STATS:
        snprintf(buf, size, diff ? "%+.2f" : "%.2f", 100.0 * v);
        break;
    }
}

static ql_status text_block(const ql_compare_group *g, const ql_comparison *cmp,
                            const ql_bootstrap_opts *o, ql_error *err)
{
    char tokens[32], res[32], head[64];
    printf("\n%s · %s · ctx %d · %d chunks · %s scored tokens\n", g->model, g->dataset, g->ctx,
           g->chunks, ql_fmt_count((int64_t)cmp->tokens, tokens, sizeof tokens));
    printf("paired bootstrap over chunks: %s resamples, %g%% intervals, seed %lu (runs %lld, "
           "%lld)\n\n",
           ql_fmt_count((int64_t)o->resamples, res, sizeof res), 100.0 * o->level, o->seed,
           (long long)g->run_a, (long long)g->run_b);
    snprintf(head, sizeof head, "%g%% interval", 100.0 * o->level);
    const ql_table_column cols[] = {
        {"statistic", NULL, false}, {"A", NULL, true},   {"B", NULL, true},
        {"A − B", NULL, true},      {head, NULL, false}, {"p", NULL, true},
        {"differs", NULL, false},
    };
    ql_table *t = ql_table_alloc(cols, QL_OPT_COUNT(cols));
    if (!t)
        return ql_error_set(err, QL_ENOMEM, "out of memory");
    ql_status rc = QL_OK;
    for (int k = 0; k < QL_CMP_STATS && !rc; k++) {
        const ql_compare_value *v = &cmp->v[k];
        char a[32], b[32], d[32], lo[32], hi[32], label[32];
        snprintf(label, sizeof label, "%s%s", ql_compare_stat_label((ql_compare_stat)k),
                 k == QL_CMP_TOP1 ? " %" : "");
        if ((rc = ql_table_row(t, err)) || (rc = ql_table_put(t, label, err)))
            break;
        if (!v->ok) {
            rc = ql_table_put(t, "not stored", err);
            continue;
        }
        fmt_value((ql_compare_stat)k, v->a, false, a, sizeof a);
        fmt_value((ql_compare_stat)k, v->b, false, b, sizeof b);
        fmt_value((ql_compare_stat)k, v->diff.estimate, true, d, sizeof d);
        fmt_value((ql_compare_stat)k, v->diff.lo, true, lo, sizeof lo);
        fmt_value((ql_compare_stat)k, v->diff.hi, true, hi, sizeof hi);
        if ((rc = ql_table_put(t, a, err)) || (rc = ql_table_put(t, b, err)) ||
            (rc = ql_table_put(t, d, err)) || (rc = ql_table_putf(t, err, "[%s, %s]", lo, hi)) ||
            (rc = ql_table_putf(t, err, "%.4f", v->diff.p)))
            break;
        rc = ql_table_put(t, ql_ci_excludes_zero(&v->diff) ? "yes" : "no", err);
    }
    if (!rc)
        ql_table_write_md(t, stdout, "—");
    ql_table_free(t);
    return rc;
}

static const ql_table_column csv_cols[] = {
    {"model", NULL, false},    {"dataset", NULL, false},   {"ctx", NULL, true},
    {"chunks", NULL, true},    {"tokens", NULL, true},     {"config_a", NULL, false},
    {"config_b", NULL, false}, {"statistic", NULL, false}, {"a", NULL, true},
    {"b", NULL, true},         {"diff", NULL, true},       {"lo", NULL, true},
    {"hi", NULL, true},        {"se", NULL, true},         {"p", NULL, true},
    {"level", NULL, true},     {"resamples", NULL, true},  {"seed", NULL, true},
};

static ql_status csv_rows(ql_table *t, const ql_compare_group *g, const ql_comparison *cmp,
                          const char *ha, const char *hb, const ql_bootstrap_opts *o, ql_error *err)
{
    ql_status rc = QL_OK;
    for (int k = 0; k < QL_CMP_STATS && !rc; k++) {
        const ql_compare_value *v = &cmp->v[k];
        if (!v->ok)
            continue;
        char buf[8][40];
        const double nums[] = {v->a,       v->b,       v->diff.estimate, v->diff.lo,
                               v->diff.hi, v->diff.se, v->diff.p,        o->level};
        if ((rc = ql_table_row(t, err)) || (rc = ql_table_put(t, g->model, err)) ||
            (rc = ql_table_put(t, g->dataset, err)) || (rc = ql_table_putf(t, err, "%d", g->ctx)) ||
            (rc = ql_table_putf(t, err, "%d", g->chunks)) ||
            (rc = ql_table_putf(t, err, "%.0f", cmp->tokens)) || (rc = ql_table_put(t, ha, err)) ||
            (rc = ql_table_put(t, hb, err)) ||
            (rc = ql_table_put(t, ql_compare_stat_name((ql_compare_stat)k), err)))
            break;
        for (size_t i = 0; i < 8 && !rc; i++)
            rc = ql_table_put(t, ql_fmt_exact(nums[i], buf[i], sizeof buf[i]), err);
        if (!rc && !(rc = ql_table_putf(t, err, "%zu", o->resamples)))
            rc = ql_table_putf(t, err, "%lu", o->seed);
    }
    return rc;
}

/* A real as JSON: null when not finite (jansson cannot write NaN). */
static json_t *jreal(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *json_group(const ql_compare_group *g, const ql_comparison *cmp)
{
    json_t *stats = json_object();
    for (int k = 0; k < QL_CMP_STATS; k++) {
        const ql_compare_value *v = &cmp->v[k];
        if (!v->ok)
            continue;
        json_object_set_new(stats, ql_compare_stat_name((ql_compare_stat)k),
                            json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b}", "a", jreal(v->a),
                                      "b", jreal(v->b), "diff", jreal(v->diff.estimate), "lo",
                                      jreal(v->diff.lo), "hi", jreal(v->diff.hi), "se",
                                      jreal(v->diff.se), "p", jreal(v->diff.p), "excludes_zero",
                                      ql_ci_excludes_zero(&v->diff)));
    }
    return json_pack("{s:s, s:s, s:i, s:i, s:I, s:I, s:I, s:o}", "model", g->model, "dataset",
                     g->dataset, "ctx", g->ctx, "chunks", g->chunks, "tokens",
                     (json_int_t)cmp->tokens, "run_a", (json_int_t)g->run_a, "run_b",
                     (json_int_t)g->run_b, "stats", stats);
}

int ql_cmd_compare(int argc, char **argv)
{
    const char *db = QL_STORE_DEFAULT_PATH, *sweep = NULL, *only_text = NULL, *args[2] = {NULL, NULL};
    int format = OUT_TEXT;
    int64_t resamples = QL_BOOTSTRAP_RESAMPLES, seed = (int64_t)QL_BOOTSTRAP_SEED;
    double level = QL_BOOTSTRAP_LEVEL;
    const ql_opt opts[] = {
        ql_opt_str("db", 0, &db, "PATH", "results database (default " QL_STORE_DEFAULT_PATH ")"),
        ql_opt_str("sweep", 0, &sweep, "NAME", "only the runs of this sweep"),
        ql_opt_str("text", 0, &only_text, "NAME",
                   "only the runs on this evaluation text (its name in the store, as\n"
                   "'qlab query formats' shows it in column dataset)"),
        ql_opt_i64("resamples", 0, &resamples, 100, 100000000, "N",
                   "bootstrap resamples (default 10000)"),
        ql_opt_i64("seed", 's', &seed, 0, INT64_MAX, "S",
                   "seed of the bootstrap's random numbers (default 20240601)"),
        ql_opt_double("level", 0, &level, 0.5, 0.999, "L", "confidence level (default 0.95)"),
        ql_opt_set("csv", 0, &format, OUT_CSV, "CSV, one row per statistic, full precision"),
        ql_opt_set("json", 0, &format, OUT_JSON, "JSON"),
    };
    static const char *const names[] = {"A", "B"};
    ql_opt_parser p = {.prog = "qlab compare",
                       .opts = opts,
                       .n_opts = QL_OPT_COUNT(opts),
                       .args = args,
                       .max_args = 2,
                       .arg_names = names,
                       .n_required = 2,
                       .help = help};
    const int prc = ql_opt_parse(&p, argc, argv);
    if (prc != QL_OPT_GO_ON)
        return prc;
    ql_bootstrap_opts bo = {(size_t)resamples, level, (unsigned long)seed};

    ql_error err;
    ql_error_clear(&err);
    ql_store *s = NULL;
    ql_store_options so = {.readonly = true};
    ql_compare_group *groups = NULL;
    size_t ng = 0;
    ql_table *csv = NULL;
    json_t *jgroups = NULL;
    char ha[65], hb[65];
    ql_status st;
    if ((st = ql_store_open(db, &so, &s, &err)))
        goto out;
    if ((st = ql_compare_find_config(s, sweep, args[0], ha, &err))) {
        ql_error_prefix(&err, "A: ");
        goto out;
    }
    if ((st = ql_compare_find_config(s, sweep, args[1], hb, &err))) {
        ql_error_prefix(&err, "B: ");
        goto out;
    }
    if ((st = ql_compare_groups(s, sweep, ha, hb, &groups, &ng, &err)))
        goto out;
    if (only_text) {
        /* Only the text asked for; the error lists the texts both configs ran on. */
        char where[1024] = "";
        size_t kept = 0, used = 0;
        for (size_t i = 0; i < ng; i++) {
            if (used < sizeof where)
                used += (size_t)snprintf(where + used, sizeof where - used, "%s%s",
                                         i ? ", " : "", groups[i].dataset);
            if (strcmp(groups[i].dataset, only_text) == 0)
                groups[kept++] = groups[i];
        }
        if (!kept) {
            st = ql_error_set(&err, QL_ENOTFOUND,
                              "A and B have no finished runs on text '%s' to compare (they "
                              "have on: %s)",
                              only_text, ng ? where : "none");
            goto out;
        }
        ng = kept;
    }
    if (format == OUT_CSV && !(csv = ql_table_alloc(csv_cols, QL_OPT_COUNT(csv_cols)))) {
        st = ql_error_set(&err, QL_ENOMEM, "out of memory");
        goto out;
    }
    jgroups = json_array();
    if (format == OUT_TEXT)
        printf("A: %.12s (%s)\nB: %.12s (%s)\n", ha, args[0], hb, args[1]);
    for (size_t i = 0; i < ng; i++) {
        ql_comparison cmp;
        if ((st = ql_compare_runs(s, groups[i].run_a, groups[i].run_b, &bo, &cmp, &err)))
            goto out;
        if (format == OUT_TEXT)
            st = text_block(&groups[i], &cmp, &bo, &err);
        else if (format == OUT_CSV)
            st = csv_rows(csv, &groups[i], &cmp, ha, hb, &bo, &err);
        else
            json_array_append_new(jgroups, json_group(&groups[i], &cmp));
        if (st)
            goto out;
    }
    if (format == OUT_CSV) {
        ql_table_write_csv(csv, stdout);
    } else if (format == OUT_JSON) {
        json_t *doc = json_pack("{s:s, s:s, s:I, s:f, s:I, s:O}", "config_a", ha, "config_b", hb,
                                "resamples", (json_int_t)bo.resamples, "level", bo.level, "seed",
                                (json_int_t)bo.seed, "groups", jgroups);
        char *text = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        json_decref(doc);
        if (!text) {
            st = ql_error_set(&err, QL_ENOMEM, "out of memory for the JSON output");
            goto out;
        }
        printf("%s\n", text);
        free(text);
    }
    if (fflush(stdout) != 0)
        st = ql_error_set(&err, QL_EIO, "writing the output failed");
out:
    json_decref(jgroups);
    ql_table_free(csv);
    free(groups);
    ql_store_close(s);
    return st ? ql_cli_fail(&err) : 0;
}
