#include "nb.h"

#include <stdlib.h>
#include <string.h>

#include "plot.h"
#include "util.h"

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

ql_status nb_doc_open(nb_doc *d, ql_error *err)
{
    d->p = NULL;
    d->n = 0;
    d->f = open_memstream(&d->p, &d->n);
    return d->f ? QL_OK : ql_error_set(err, QL_ENOMEM, "out of memory");
}

ql_status nb_doc_save(const nb_options *o, nb_doc *d, const char *name, ql_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", o->out_dir, name);
    bool failed = ferror(d->f) != 0;
    if (fclose(d->f) != 0)
        failed = true;
    d->f = NULL;
    ql_status st = failed ? ql_error_set(err, QL_ENOMEM, "%s: out of memory while writing", path)
                          : ql_file_write_all(path, d->p, d->n, err);
    if (!st)
        printf("  %s\n", path);
    free(d->p);
    d->p = NULL;
    return st;
}

void nb_doc_discard(nb_doc *d)
{
    if (d->f)
        fclose(d->f);
    free(d->p);
    d->f = NULL;
    d->p = NULL;
}

void nb_plot(const nb_options *o, const char *script, const char *base)
{
    if (!o->plots)
        return;
    ql_error err;
    ql_error_clear(&err);
    if (ql_plot_render(o->out_dir, script, base, &err) != QL_OK) {
        fprintf(stderr, "%s: plot skipped: %s (the data and %s are written)\n", o->prog, err.msg,
                script);
        return;
    }
    printf("  %s/%s.png\n  %s/%s.svg\n", o->out_dir, base, o->out_dir, base);
}

int nb_fail(const nb_options *o, const ql_error *err)
{
    fprintf(stderr, "%s: error: %s\n", o->prog, err->msg[0] ? err->msg : "failed");
    return 1;
}
