#include "nb.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "results/plot.h"

static void help(const ql_opt_parser *p)
{
    printf("usage: %s [options]\n\n%s\n\n", p->prog, (const char *)p->help_ctx);
    ql_opt_print_options(stdout, p);
}

/* The options every program has, then the program's own. */
#define NB_COMMON_OPTIONS 4

int nb_parse(int argc, char **argv, nb_options *o, const char *summary, const ql_opt *extra,
             size_t n_extra)
{
    const char *slash = strrchr(argv[0], '/');
    o->prog = slash ? slash + 1 : argv[0];
    o->db = QL_STORE_DEFAULT_PATH;
    o->out_dir = NB_DEFAULT_DIR;
    o->sweep = NULL;
    bool no_plots = false;
    QL_ASSERT(n_extra <= QL_OPT_MAX - NB_COMMON_OPTIONS);
    ql_opt opts[QL_OPT_MAX] = {
        ql_opt_str("db", 0, &o->db, "PATH", "results database (default " QL_STORE_DEFAULT_PATH ")"),
        ql_opt_str("out", 'o', &o->out_dir, "DIR", "output directory (default " NB_DEFAULT_DIR ")"),
        ql_opt_str("sweep", 0, &o->sweep, "NAME", "only the runs of this sweep"),
        ql_opt_flag("no-plots", 0, &no_plots, "tables and plot data only, do not run gnuplot"),
    };
    for (size_t i = 0; i < n_extra; i++)
        opts[NB_COMMON_OPTIONS + i] = extra[i];
    ql_opt_parser p = {.prog = o->prog,
                       .opts = opts,
                       .n_opts = NB_COMMON_OPTIONS + n_extra,
                       .help = help,
                       .help_ctx = summary};
    const int rc = ql_opt_parse(&p, argc, argv);
    o->plots = !no_plots;
    return rc;
}

ql_status nb_open(const nb_options *o, ql_store **s, ql_error *err)
{
    ql_store_options so = {.readonly = true};
    ql_status st = ql_store_open(o->db, &so, s, err);
    if (st)
        return st;
    if ((st = ql_make_dirs(o->out_dir, err))) {
        ql_store_close(*s);
        *s = NULL;
    }
    return st;
}

ql_status nb_prepare(ql_store *s, const nb_options *o, const char *sql, const char *sweep_sql,
                     ql_query **q, ql_error *err)
{
    ql_status st = ql_query_prepare(s, o->sweep ? sweep_sql : sql, q, err);
    if (!st && o->sweep && (st = ql_query_bind_text(*q, 1, o->sweep, err))) {
        ql_query_free(*q);
        *q = NULL;
    }
    return st;
}

/* Columns of the results views nb_load_results reads, in order. */
enum {
    C_RUN,
    C_MODEL,
    C_DATASET,
    C_CTX,
    C_CHUNKS,
    C_HASH,
    C_AXES,
    C_BPW = C_AXES + QL_AXIS_COUNT,
    C_KLD,
    C_PPL,
    C_APPLIES,
    C_TYPES_USED,
};

/* SELECT ... FROM <from> ORDER BY ...: the columns above, every axis in order. */
static void results_sql(char *sql, size_t size, const char *from)
{
    size_t off =
        (size_t)snprintf(sql, size, "SELECT run_id, model, dataset, ctx, chunks, config_hash");
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        off += (size_t)snprintf(sql + off, size - off, ", %s", ql_axis_name((ql_axis)a));
    off += (size_t)snprintf(
        sql + off, size - off,
        ", bpw, kld_mean, ppl, applies, types_used FROM %s ORDER BY model, dataset, ctx, chunks,"
        " bpw IS NULL, bpw",
        from);
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        off += (size_t)snprintf(sql + off, size - off, ", %s", ql_axis_name((ql_axis)a));
    off += (size_t)snprintf(sql + off, size - off, ", config_hash");
    QL_ASSERT(off + 1 < size);
}

static void read_result(const ql_query *q, nb_result *r)
{
    memset(r, 0, sizeof *r);
    r->run_id = ql_query_int(q, C_RUN);
    r->chunks = ql_query_int(q, C_CHUNKS);
    snprintf(r->group, sizeof r->group, "%s · %s · ctx %lld · %lld chunks",
             ql_query_text(q, C_MODEL) ? ql_query_text(q, C_MODEL) : "?",
             ql_query_text(q, C_DATASET), (long long)ql_query_int(q, C_CTX),
             (long long)ql_query_int(q, C_CHUNKS));
    ql_strlcpy(r->hash, ql_query_text(q, C_HASH), sizeof r->hash);
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        /* A number reads as in the canonical form (3, not 3.0). */
        if (ql_axis_get((ql_axis)a)->sql == QL_COLUMN_REAL)
            ql_format_double(ql_query_double(q, C_AXES + a), r->axis[a], sizeof r->axis[a]);
        else
            ql_strlcpy(r->axis[a], ql_query_text(q, C_AXES + a), sizeof r->axis[a]);
    }
    r->bpw = ql_query_double(q, C_BPW);
    r->kld = ql_query_double(q, C_KLD);
    r->ppl = ql_query_double(q, C_PPL);
    r->applies = ql_applies_parse(ql_query_text(q, C_APPLIES));
    const char *types = ql_query_text(q, C_TYPES_USED);
    ql_strlcpy(r->types_used, types ? types : "", sizeof r->types_used);
}

ql_status nb_load_results(ql_store *s, const nb_options *o, nb_result **out, size_t *n,
                          ql_error *err)
{
    *out = NULL;
    *n = 0;
    char all[2048], one[2048];
    results_sql(all, sizeof all, "results");
    results_sql(one, sizeof one, "sweep_results WHERE sweep = ?1");
    ql_query *q;
    ql_status st = nb_prepare(s, o, all, one, &q, err);
    if (st)
        return st;
    size_t cap = 0;
    for (;;) {
        bool row;
        if ((st = ql_query_step(q, &row, err)) || !row)
            break;
        if (!ql_grow((void **)out, &cap, *n + 1, sizeof **out)) {
            st = ql_error_set(err, QL_ENOMEM, "out of memory");
            break;
        }
        read_result(q, &(*out)[(*n)++]);
    }
    ql_query_free(q);
    if (!st && *n == 0)
        st = ql_error_set(err, QL_ENOTFOUND, "%s: no finished runs%s%s%s (run a sweep first)",
                          o->db, o->sweep ? " in sweep '" : "", o->sweep ? o->sweep : "",
                          o->sweep ? "'" : "");
    return st;
}

ql_status nb_save(const nb_options *o, ql_doc *d, const char *name, ql_error *err)
{
    return ql_doc_save(d, o->out_dir, name, stdout, err);
}

void nb_plot(const nb_options *o, const char *script, const char *base)
{
    if (!o->plots)
        return;
    ql_error err;
    ql_error_clear(&err);
    if (ql_plot_draw(o->out_dir, script, base, stdout, &err) != QL_OK)
        fprintf(stderr, "%s: plot skipped: %s (the data and %s are written)\n", o->prog, err.msg,
                script);
}

int nb_fail(const nb_options *o, const ql_error *err)
{
    fprintf(stderr, "%s: error: %s\n", o->prog, err->msg[0] ? err->msg : "failed");
    return 1;
}
