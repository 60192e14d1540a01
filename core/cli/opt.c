#include "opt.h"

#include <getopt.h>
#include <stdarg.h>
#include <string.h>

#include "base/util.h"
#include "experiment/fit.h"
#include "formats/types.h"

/* getopt_long's code of an option without a short alias: past every character. */
#define LONG_CODE_BASE 256
/* Widest "  -k, --name ARG" column before the help moves to the next line. */
#define HELP_COLUMN_MAX 26

/* ========================================================================= */
/* Constructors                                                               */

static ql_opt make(const char *name, int key, ql_opt_kind kind, void *dest, const char *arg,
                   const char *help)
{
    return (ql_opt){.name = name, .key = key, .kind = kind, .dest = dest, .arg = arg, .help = help};
}

ql_opt ql_opt_flag(const char *name, int key, bool *dest, const char *help)
{
    return make(name, key, QL_OPT_FLAG, dest, NULL, help);
}

ql_opt ql_opt_set(const char *name, int key, int *dest, int value, const char *help)
{
    ql_opt o = make(name, key, QL_OPT_SET, dest, NULL, help);
    o.lo = value;
    return o;
}

ql_opt ql_opt_str(const char *name, int key, const char **dest, const char *arg, const char *help)
{
    return make(name, key, QL_OPT_STR, (void *)dest, arg, help);
}

ql_opt ql_opt_text(const char *name, int key, const char **dest, const char *arg, const char *help)
{
    return make(name, key, QL_OPT_TEXT, (void *)dest, arg, help);
}

ql_opt ql_opt_int(const char *name, int key, int *dest, int lo, int hi, const char *arg,
                  const char *help)
{
    ql_opt o = make(name, key, QL_OPT_INT, dest, arg, help);
    o.lo = lo;
    o.hi = hi;
    return o;
}

ql_opt ql_opt_i64(const char *name, int key, int64_t *dest, int64_t lo, int64_t hi, const char *arg,
                  const char *help)
{
    ql_opt o = make(name, key, QL_OPT_I64, dest, arg, help);
    o.lo = lo;
    o.hi = hi;
    return o;
}

ql_opt ql_opt_double(const char *name, int key, double *dest, double lo, double hi, const char *arg,
                     const char *help)
{
    ql_opt o = make(name, key, QL_OPT_DOUBLE, dest, arg, help);
    o.dlo = lo;
    o.dhi = hi;
    return o;
}

ql_opt ql_opt_size(const char *name, int key, uint64_t *dest, const char *arg, const char *help)
{
    return make(name, key, QL_OPT_SIZE, dest, arg, help);
}

ql_opt ql_opt_type(const char *name, int key, int32_t *dest, const int32_t *allowed, size_t n,
                   const char *arg, const char *help)
{
    ql_opt o = make(name, key, QL_OPT_TYPE, dest, arg, help);
    o.types = allowed;
    o.n_types = allowed ? n : 0;
    return o;
}

ql_opt ql_opt_func(const char *name, int key, ql_opt_fn fn, void *ctx, const char *arg,
                   const char *help)
{
    ql_opt o = make(name, key, QL_OPT_FUNC, NULL, arg, help);
    o.fn = fn;
    o.ctx = ctx;
    return o;
}

ql_opt ql_opt_section(const char *heading)
{
    return make(heading, 0, QL_OPT_SECTION, NULL, NULL, NULL);
}

ql_opt ql_opt_required(ql_opt o)
{
    o.required = true;
    return o;
}

ql_opt ql_opt_threads(int *dest, const char *help)
{
    ql_opt o = ql_opt_int("threads", 't', dest, 1, QL_OPT_THREADS_MAX, "N", help);
    o.env = "OMP_NUM_THREADS";
    return o;
}

/* ========================================================================= */
/* Values                                                                     */

ql_status ql_opt_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out, ql_error *err)
{
    int64_t v;
    if (ql_parse_i64(s, &v) && v >= lo && v <= hi) {
        *out = v;
        return QL_OK;
    }
    if (hi == INT64_MAX && lo == 0)
        return ql_error_set(err, QL_EINVAL, "expected a non-negative integer, got '%s'", s);
    if (hi == INT64_MAX)
        return ql_error_set(err, QL_EINVAL, "expected an integer >= %lld, got '%s'", (long long)lo,
                            s);
    return ql_error_set(err, QL_EINVAL, "expected an integer in %lld..%lld, got '%s'",
                        (long long)lo, (long long)hi, s);
}

ql_status ql_opt_parse_double(const char *s, double lo, double hi, double *out, ql_error *err)
{
    double v;
    if (ql_parse_double(s, &v) && v >= lo && v <= hi) {
        *out = v;
        return QL_OK;
    }
    return ql_error_set(err, QL_EINVAL, "expected a number in %g..%g, got '%s'", lo, hi, s);
}

ql_status ql_opt_parse_type(const char *s, const int32_t *allowed, size_t n, int32_t *out,
                            ql_error *err)
{
    const ql_type_traits *t = ql_type_by_name(s);
    bool ok = t && n == 0;
    for (size_t i = 0; t && i < n; i++)
        ok = ok || allowed[i] == t->type;
    if (ok) {
        *out = t->type;
        return QL_OK;
    }
    if (n == 0)
        return ql_error_set(err, QL_EINVAL, "unknown type '%s'", s);
    char list[256] = "";
    size_t len = 0;
    for (size_t i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                i == 0       ? ""
                                : i + 1 == n ? " or "
                                             : ", ",
                                ql_type_name(allowed[i]));
    return ql_error_set(err, QL_EINVAL, "expected %s, got '%s'", list, s);
}

/* Stores val into o's variable; err says what is wrong with it. */
static ql_status store(const ql_opt *o, const char *val, ql_error *err)
{
    int64_t i;
    ql_status st = QL_OK;
    switch (o->kind) {
    case QL_OPT_STR:
        if (!*val)
            return ql_error_set(err, QL_EINVAL, "expected %s, got an empty value",
                                o->arg ? o->arg : "a value");
        *(const char **)o->dest = val;
        return QL_OK;
    case QL_OPT_TEXT:
        *(const char **)o->dest = val;
        return QL_OK;
    case QL_OPT_INT:
        if (!(st = ql_opt_parse_int(val, o->lo, o->hi, &i, err)))
            *(int *)o->dest = (int)i;
        return st;
    case QL_OPT_I64:
        return ql_opt_parse_int(val, o->lo, o->hi, (int64_t *)o->dest, err);
    case QL_OPT_DOUBLE:
        return ql_opt_parse_double(val, o->dlo, o->dhi, (double *)o->dest, err);
    case QL_OPT_SIZE:
        return ql_fit_parse_size(val, (uint64_t *)o->dest, err);
    case QL_OPT_TYPE:
        return ql_opt_parse_type(val, o->types, o->n_types, (int32_t *)o->dest, err);
    case QL_OPT_FUNC:
        return o->fn(o->ctx, val, err);
    case QL_OPT_FLAG:
    case QL_OPT_SET:
    case QL_OPT_SECTION:
        break;
    }
    QL_ASSERT(!"store: the option takes no value");
    return QL_EINVAL;
}

/* ========================================================================= */
/* Messages                                                                   */

static void vusage(FILE *out, const char *prog, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static void vusage(FILE *out, const char *prog, const char *fmt, va_list ap)
{
    fprintf(out, "%s: error: ", prog);
    vfprintf(out, fmt, ap);
    fprintf(out, "\nTry '%s --help'.\n", prog);
}

int ql_opt_usage(const ql_opt_parser *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vusage(p->err ? p->err : stderr, p->prog, fmt, ap);
    va_end(ap);
    return 2;
}

int ql_opt_usage_prog(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vusage(stderr, prog, fmt, ap);
    va_end(ap);
    return 2;
}

/* ========================================================================= */
/* The parser                                                                 */

static bool takes_value(const ql_opt *o)
{
    return o->kind != QL_OPT_FLAG && o->kind != QL_OPT_SET;
}

static int code_of(const ql_opt_parser *p, size_t i)
{
    return p->opts[i].key ? p->opts[i].key : LONG_CODE_BASE + (int)i;
}

static ptrdiff_t index_of_code(const ql_opt_parser *p, int code)
{
    for (size_t i = 0; i < p->n_opts; i++)
        if (p->opts[i].kind != QL_OPT_SECTION && code_of(p, i) == code)
            return (ptrdiff_t)i;
    return -1;
}

/* The positional slot an option fills (-m for MODEL), or -1. */
static ptrdiff_t slot_of(const ql_opt_parser *p, const ql_opt *o)
{
    for (size_t k = 0; o->kind == QL_OPT_STR && k < p->max_args; k++)
        if (o->dest == (void *)&p->args[k])
            return (ptrdiff_t)k;
    return -1;
}

static const char *arg_name(const ql_opt_parser *p, size_t k)
{
    return p->arg_names && p->arg_names[k] ? p->arg_names[k] : "an argument";
}

/* The option as the user spelled it: "--name" or "-k". */
static void spelling(const ql_opt *o, bool is_long, char *buf, size_t size)
{
    if (is_long || !o->key)
        snprintf(buf, size, "--%s", o->name);
    else
        snprintf(buf, size, "-%c", o->key);
}

/* Builds getopt_long's tables; a name or key given twice (or taking -h) aborts. */
static void build_tables(const ql_opt_parser *p, struct option *longs, char *shorts)
{
    size_t nl = 0, ns = 0;
    shorts[ns++] = p->stop_at_arg ? '+' : '-'; /* '-': positional arguments in order, as code 1 */
    shorts[ns++] = ':';                        /* a missing value is ':', not '?' */
    shorts[ns++] = 'h';
    for (size_t i = 0; i < p->n_opts; i++) {
        const ql_opt *o = &p->opts[i];
        if (o->kind == QL_OPT_SECTION)
            continue;
        QL_ASSERT(o->name && strcmp(o->name, "help") != 0 && o->key != 'h');
        QL_ASSERT(o->key == 0 || (o->key > ' ' && o->key < 127 && o->key != ':' && o->key != '-'));
        for (size_t j = 0; j < i; j++)
            QL_ASSERT(p->opts[j].kind == QL_OPT_SECTION ||
                      (strcmp(p->opts[j].name, o->name) != 0 &&
                       (o->key == 0 || p->opts[j].key != o->key)));
        const int has_arg = takes_value(o) ? required_argument : no_argument;
        longs[nl++] = (struct option){o->name, has_arg, NULL, code_of(p, i)};
        if (o->key) {
            shorts[ns++] = (char)o->key;
            if (has_arg == required_argument)
                shorts[ns++] = ':';
        }
    }
    longs[nl++] = (struct option){"help", no_argument, NULL, 'h'};
    longs[nl] = (struct option){NULL, 0, NULL, 0};
    shorts[ns] = '\0';
}

/* "option '--s' is ambiguous: --sweep, --shard" or "unknown option '--x'" for the
 * long option getopt_long did not take (element: "--name" or "--name=value"). */
static int bad_long_option(const ql_opt_parser *p, const char *element)
{
    const char *name = element + 2;
    const size_t len = strcspn(name, "=");
    char matches[512] = "";
    size_t n = 0, used = 0;
    for (size_t i = 0; i <= p->n_opts; i++) {
        const char *cand = i < p->n_opts ? p->opts[i].name : "help";
        if ((i < p->n_opts && p->opts[i].kind == QL_OPT_SECTION) || strncmp(cand, name, len) != 0)
            continue;
        if (used < sizeof matches)
            used += (size_t)snprintf(matches + used, sizeof matches - used, "%s--%s", n ? ", " : "",
                                     cand);
        n++;
    }
    if (n > 1)
        return ql_opt_usage(p, "option '--%.*s' is ambiguous (%s)", (int)len, name, matches);
    return ql_opt_usage(p, "unknown option '--%.*s'", (int)len, name);
}

/* A positional argument: the next slot, unless an option filled it already. */
static int positional(ql_opt_parser *p, size_t *count, const char *val)
{
    const size_t k = (*count)++;
    if (k >= p->max_args)
        return ql_opt_usage(p, "unexpected argument '%s'", val);
    if (p->args[k])
        return ql_opt_usage(p, "%s given twice ('%s' and '%s')", arg_name(p, k), p->args[k], val);
    p->args[k] = val;
    if (p->n_args < k + 1)
        p->n_args = k + 1;
    return QL_OPT_GO_ON;
}

/* Option i with its value (NULL for a flag) as spelled. */
static int apply(ql_opt_parser *p, size_t i, bool is_long, const char *val)
{
    const ql_opt *o = &p->opts[i];
    char name[80];
    spelling(o, is_long, name, sizeof name);
    p->given[i] = true;
    if (o->kind == QL_OPT_FLAG) {
        *(bool *)o->dest = true;
        return QL_OPT_GO_ON;
    }
    if (o->kind == QL_OPT_SET) {
        *(int *)o->dest = (int)o->lo;
        return QL_OPT_GO_ON;
    }
    const ptrdiff_t k = slot_of(p, o);
    if (k >= 0 && p->args[k])
        return ql_opt_usage(p, "%s given twice ('%s' and '%s' from %s)", arg_name(p, (size_t)k),
                            p->args[k], val, name);
    ql_error err;
    ql_error_clear(&err);
    if (store(o, val, &err) != QL_OK)
        return ql_opt_usage(p, "%s: %s", name, err.msg);
    if (k >= 0 && p->n_args < (size_t)k + 1)
        p->n_args = (size_t)k + 1;
    return QL_OPT_GO_ON;
}

/* An option not given takes the first item of its environment variable, if set. */
static int apply_env(ql_opt_parser *p, size_t i)
{
    const ql_opt *o = &p->opts[i];
    const char *v = getenv(o->env);
    if (!v)
        return QL_OPT_GO_ON;
    char item[64];
    v += strspn(v, " \t");
    size_t len = strcspn(v, ",");
    while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t'))
        len--;
    if (len == 0 && !strchr(v, ','))
        return QL_OPT_GO_ON; /* set but empty: as if unset */
    if (len >= sizeof item)
        return ql_opt_usage(p, "%s: '%s' is too long a value", o->env, v);
    memcpy(item, v, len);
    item[len] = '\0';
    ql_error err;
    ql_error_clear(&err);
    if (store(o, item, &err) != QL_OK)
        return ql_opt_usage(p, "%s (the default of --%s): %s", o->env, o->name, err.msg);
    p->given[i] = true;
    return QL_OPT_GO_ON;
}

int ql_opt_parse(ql_opt_parser *p, int argc, char **argv)
{
    QL_ASSERT(p->prog && p->n_opts <= QL_OPT_MAX && p->n_required <= p->max_args);
    struct option longs[QL_OPT_MAX + 2];
    char shorts[4 + 2 * QL_OPT_MAX];
    build_tables(p, longs, shorts);
    memset(p->given, 0, sizeof p->given);
    for (size_t k = 0; k < p->max_args; k++)
        p->args[k] = NULL;
    p->n_args = 0;
    p->next = argc;

    size_t count = 0; /* positional arguments so far */
    int rc = QL_OPT_GO_ON;
    optind = 0; /* glibc: start afresh (a second parse in one process) */
    opterr = 0;
    for (;;) {
        int li = -1;
        const int c = getopt_long(argc, argv, shorts, longs, &li);
        if (c == -1)
            break;
        if (c == 1) {
            rc = positional(p, &count, optarg);
        } else if (c == 'h') {
            if (p->help)
                p->help(p);
            return 0;
        } else if (c == ':' || c == '?') {
            /* getopt has stepped past the element in question. */
            const char *element = argv[optind - 1];
            const bool is_long = strncmp(element, "--", 2) == 0;
            const ptrdiff_t i = optopt ? index_of_code(p, optopt) : -1;
            char name[80];
            if (i >= 0)
                spelling(&p->opts[i], is_long, name, sizeof name);
            else
                snprintf(name, sizeof name, optopt == 'h' ? "--help" : "-%c", optopt);
            if (c == ':') {
                QL_ASSERT(i >= 0); /* only an option of the table takes a value */
                return ql_opt_usage(p, "%s needs a value (%s)", name, p->opts[i].arg);
            }
            if (i >= 0 || optopt == 'h')
                return ql_opt_usage(p, "%s takes no value (got '%s')", name, element);
            if (optopt == 0 && is_long)
                return bad_long_option(p, element);
            return ql_opt_usage(p, "unknown option '-%c'", optopt);
        } else {
            const ptrdiff_t i = index_of_code(p, c);
            QL_ASSERT(i >= 0);
            rc = apply(p, (size_t)i, li >= 0, optarg);
        }
        if (rc != QL_OPT_GO_ON)
            return rc;
    }
    if (p->stop_at_arg) {
        p->next = optind;
        if (optind < argc && (rc = positional(p, &count, argv[optind])) != QL_OPT_GO_ON)
            return rc;
    } else {
        for (int a = optind; a < argc; a++) /* after "--" */
            if ((rc = positional(p, &count, argv[a])) != QL_OPT_GO_ON)
                return rc;
    }
    for (size_t i = 0; i < p->n_opts; i++)
        if (p->opts[i].env && !p->given[i] && (rc = apply_env(p, i)) != QL_OPT_GO_ON)
            return rc;
    for (size_t k = 0; k < p->n_required; k++)
        if (!p->args[k])
            return ql_opt_usage(p, "missing %s", arg_name(p, k));
    for (size_t i = 0; i < p->n_opts; i++)
        if (p->opts[i].required && !p->given[i])
            return ql_opt_usage(p, "missing --%s %s", p->opts[i].name,
                                p->opts[i].arg ? p->opts[i].arg : "");
    return QL_OPT_GO_ON;
}

bool ql_opt_given(const ql_opt_parser *p, const char *name)
{
    for (size_t i = 0; i < p->n_opts; i++)
        if (p->opts[i].kind != QL_OPT_SECTION && strcmp(p->opts[i].name, name) == 0)
            return p->given[i];
    QL_ASSERT(!"ql_opt_given: no such option");
    return false;
}

/* ========================================================================= */
/* --help                                                                     */

/* "  -k, --name ARG" into buf; returns its length. */
static int left_column(const char *name, int key, const char *arg, char *buf, size_t size)
{
    char k[8] = "    ";
    if (key)
        snprintf(k, sizeof k, "-%c, ", key);
    return snprintf(buf, size, "  %s--%s%s%s", k, name, arg ? " " : "", arg ? arg : "");
}

static void print_one(FILE *out, const char *left, int column, const char *help)
{
    const int n = fprintf(out, "%s", left);
    if (!help || !*help) {
        fputc('\n', out);
        return;
    }
    if (n + 2 > column)
        fprintf(out, "\n%*s", column, "");
    else
        fprintf(out, "%*s", column - n, "");
    for (const char *s = help;;) {
        const size_t len = strcspn(s, "\n");
        fprintf(out, "%.*s\n", (int)len, s);
        if (!s[len] || !s[len + 1])
            break;
        s += len + 1;
        fprintf(out, "%*s", column, "");
    }
}

void ql_opt_print_options(FILE *out, const ql_opt_parser *p)
{
    char left[160];
    int column = (int)strlen("  -h, --help") + 2;
    for (size_t i = 0; i < p->n_opts; i++) {
        const ql_opt *o = &p->opts[i];
        if (o->kind == QL_OPT_SECTION)
            continue;
        const int n = left_column(o->name, o->key, o->arg, left, sizeof left) + 2;
        if (n <= HELP_COLUMN_MAX && n > column)
            column = n;
    }
    if (p->n_opts == 0 || p->opts[0].kind != QL_OPT_SECTION)
        fprintf(out, "options:\n");
    for (size_t i = 0; i < p->n_opts; i++) {
        const ql_opt *o = &p->opts[i];
        if (o->kind == QL_OPT_SECTION) {
            fprintf(out, "%s%s\n", i ? "\n" : "", o->name);
            continue;
        }
        left_column(o->name, o->key, o->arg, left, sizeof left);
        print_one(out, left, column, o->help);
    }
    left_column("help", 'h', NULL, left, sizeof left);
    print_one(out, left, column, "print this help and exit");
}
