#include "nb.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "results/plot.h"

static void help(const nb_options *o, const char *summary, const nb_extra_option *extra,
                 int n_extra)
{
    printf("usage: %s [--db PATH] [-o DIR] [--sweep NAME] [--no-plots]", o->prog);
    for (int i = 0; i < n_extra; i++)
        printf(" [%s X]", extra[i].name);
    printf("\n\n%s\n\noptions:\n"
           "  --db PATH       results database (default %s)\n"
           "  -o, --out DIR   output directory (default %s)\n"
           "  --sweep NAME    only the runs of this sweep\n"
           "  --no-plots      tables and plot data only, do not run gnuplot\n",
           summary, QL_STORE_DEFAULT_PATH, NB_DEFAULT_DIR);
    for (int i = 0; i < n_extra; i++)
        printf("  %-15s %s\n", extra[i].name, extra[i].help);
}

static int usage(const nb_options *o, const char *msg, const char *arg)
{
    fprintf(stderr, "%s: %s%s%s\nTry '%s --help'.\n", o->prog, msg, arg ? " " : "", arg ? arg : "",
            o->prog);
    return 2;
}

int nb_parse(int argc, char **argv, nb_options *o, const char *summary,
             const nb_extra_option *extra, int n_extra)
{
    const char *slash = strrchr(argv[0], '/');
    o->prog = slash ? slash + 1 : argv[0];
    o->db = QL_STORE_DEFAULT_PATH;
    o->out_dir = NB_DEFAULT_DIR;
    o->sweep = NULL;
    o->plots = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], **target = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help(o, summary, extra, n_extra);
            return 0;
        }
        if (strcmp(a, "--no-plots") == 0) {
            o->plots = false;
            continue;
        }
        if (strcmp(a, "--db") == 0)
            target = &o->db;
        else if (strcmp(a, "-o") == 0 || strcmp(a, "--out") == 0)
            target = &o->out_dir;
        else if (strcmp(a, "--sweep") == 0)
            target = &o->sweep;
        for (int k = 0; k < n_extra && !target; k++)
            if (strcmp(a, extra[k].name) == 0)
                target = extra[k].value;
        if (!target)
            return usage(o, a[0] == '-' ? "unknown option" : "unexpected argument", a);
        if (++i >= argc || !*argv[i])
            return usage(o, "a value is missing after", a);
        *target = argv[i];
    }
    return -1;
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
};

/* SELECT ... FROM <from> ORDER BY ...: the columns above, every axis in order. */
static void results_sql(char *sql, size_t size, const char *from)
{
    size_t off =
        (size_t)snprintf(sql, size, "SELECT run_id, model, dataset, ctx, chunks, config_hash");
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        off += (size_t)snprintf(sql + off, size - off, ", %s", ql_axis_name((ql_axis)a));
    off += (size_t)snprintf(sql + off, size - off,
                            ", bpw, kld_mean, ppl FROM %s ORDER BY model, dataset, ctx, chunks,"
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
