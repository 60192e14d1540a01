#include "opt.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/suggest.h"
#include "base/util.h"
#include "experiment/fit.h"
#include "formats/types.h"

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

ql_opt ql_opt_alias(ql_opt o, const char *aliases)
{
    o.aliases = aliases;
    return o;
}

ql_opt ql_opt_hidden(ql_opt o)
{
    o.hidden = true;
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
    if (n == 0) {
        const ql_type_traits *all[QL_TYPE_ID_LIMIT];
        const char *names[QL_TYPE_ID_LIMIT];
        const int nt = ql_type_list(all, QL_TYPE_ID_LIMIT);
        size_t nn = 0;
        /* The weight formats are what a mistyped name means (Q8 is Q8_0, not I8). */
        for (int i = 0; i < nt; i++)
            if (ql_type_is_weight(all[i]))
                names[nn++] = all[i]->name;
        char hint[64];
        return ql_error_set(err, QL_EINVAL, "unknown type '%s'%s", s,
                            ql_did_you_mean(hint, sizeof hint, s, names, nn, NULL));
    }
    char list[256] = "";
    size_t len = 0;
    for (size_t i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                i == 0       ? ""
                                : i + 1 == n ? " or "
                                             : ", ",
                                ql_type_name(allowed[i]));
    const char *names[64];
    size_t nn = 0;
    for (size_t i = 0; i < n && nn < 64; i++)
        names[nn++] = ql_type_name(allowed[i]);
    char hint[64] = "";
    if (!t) /* a known type that is not allowed gets the list alone */
        ql_did_you_mean(hint, sizeof hint, s, names, nn, NULL);
    return ql_error_set(err, QL_EINVAL, "expected %s, got '%s'%s", list, s, hint);
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

/* Calls fn(ctx, i, name, len) for every long name of option i: its name, then its
 * aliases; stops when fn returns true and returns that. */
typedef bool (*name_fn)(void *ctx, size_t i, const char *name, size_t len);

static bool each_name(const ql_opt *o, size_t i, name_fn fn, void *ctx)
{
    if (fn(ctx, i, o->name, strlen(o->name)))
        return true;
    for (const char *a = o->aliases; a && *a;) {
        a += strspn(a, " ");
        const size_t len = strcspn(a, " ");
        if (len && fn(ctx, i, a, len))
            return true;
        a += len;
    }
    return false;
}

/* A broken table aborts: a name or key twice, -h or --help taken, a bad key. */
typedef struct {
    const char *name[QL_OPT_MAX * 4];
    size_t len[QL_OPT_MAX * 4];
    size_t n;
} name_list;

static bool add_name(void *ctx, size_t i, const char *name, size_t len)
{
    name_list *l = ctx;
    (void)i;
    QL_ASSERT(len > 0 && strcspn(name, "=") >= len && l->n < QL_OPT_MAX * 4);
    QL_ASSERT(!(len == 4 && memcmp(name, "help", 4) == 0));
    for (size_t k = 0; k < l->n; k++)
        QL_ASSERT(!(l->len[k] == len && memcmp(l->name[k], name, len) == 0));
    l->name[l->n] = name;
    l->len[l->n++] = len;
    return false;
}

static void check_table(const ql_opt_parser *p)
{
    name_list names;
    names.n = 0;
    for (size_t i = 0; i < p->n_opts; i++) {
        const ql_opt *o = &p->opts[i];
        if (o->kind == QL_OPT_SECTION)
            continue;
        QL_ASSERT(o->name && o->key != 'h');
        QL_ASSERT(o->key == 0 || (o->key > ' ' && o->key < 127 && o->key != ':' && o->key != '-'));
        each_name(o, i, add_name, &names);
        for (size_t j = 0; j < i; j++)
            QL_ASSERT(p->opts[j].kind == QL_OPT_SECTION || o->key == 0 || p->opts[j].key != o->key);
    }
}

/* What a long option's name (len bytes of word) matches: the option whose name or
 * alias it is, else the options it abbreviates (hidden ones never). */
typedef struct {
    const char *word;
    size_t len;
    ptrdiff_t exact; /* option index, -1 */
    size_t n_prefix; /* distinct options the word abbreviates */
    size_t prefix[QL_OPT_MAX];
    const char *exact_name; /* the name as matched (for messages) */
    const char *prefix_name[QL_OPT_MAX];
    size_t prefix_len[QL_OPT_MAX];
    bool hidden;
} match;

static bool match_name(void *ctx, size_t i, const char *name, size_t len)
{
    match *m = ctx;
    if (len == m->len && memcmp(name, m->word, len) == 0) {
        m->exact = (ptrdiff_t)i;
        m->exact_name = name;
        return true;
    }
    if (m->hidden || len < m->len || memcmp(name, m->word, m->len) != 0)
        return false;
    for (size_t k = 0; k < m->n_prefix; k++)
        if (m->prefix[k] == i)
            return false; /* another name of the same option */
    m->prefix_name[m->n_prefix] = name;
    m->prefix_len[m->n_prefix] = len;
    m->prefix[m->n_prefix++] = i;
    return false;
}

/* Every listed long name, for "did you mean" (NULL-padded; the caller frees). */
static const char **listed_names(const ql_opt_parser *p, size_t *n, char ***owned)
{
    size_t cap = 1, k = 0;
    for (size_t i = 0; i < p->n_opts; i++)
        cap += 1 + (p->opts[i].aliases ? strlen(p->opts[i].aliases) : 0);
    const char **names = calloc(cap, sizeof *names);
    char **copies = calloc(cap, sizeof *copies);
    if (!names || !copies) {
        free(names);
        free(copies);
        *n = 0;
        *owned = NULL;
        return NULL;
    }
    size_t nc = 0;
    for (size_t i = 0; i < p->n_opts; i++) {
        const ql_opt *o = &p->opts[i];
        if (o->kind == QL_OPT_SECTION || o->hidden)
            continue;
        names[k++] = o->name;
        for (const char *a = o->aliases; a && *a;) {
            a += strspn(a, " ");
            const size_t len = strcspn(a, " ");
            if (len && (copies[nc] = malloc(len + 1))) {
                memcpy(copies[nc], a, len);
                copies[nc][len] = '\0';
                names[k++] = copies[nc++];
            }
            a += len;
        }
    }
    names[k++] = "help";
    *n = k;
    *owned = copies;
    return names;
}

/* "unknown option '--x'; did you mean '--y'?" */
static int unknown_long(const ql_opt_parser *p, const char *name, size_t len)
{
    char word[128];
    snprintf(word, sizeof word, "%.*s", (int)(len < sizeof word ? len : sizeof word - 1), name);
    size_t n;
    char **owned;
    const char **names = listed_names(p, &n, &owned);
    char hint[160] = "";
    if (names)
        ql_did_you_mean(hint, sizeof hint, word, names, n, "--");
    for (size_t i = 0; owned && owned[i]; i++)
        free(owned[i]);
    free(owned);
    free(names);
    return ql_opt_usage(p, "unknown option '--%s'%s", word, hint);
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

/* Option i with its value (NULL for a flag); name is how messages spell it. */
static int apply(ql_opt_parser *p, size_t i, const char *name, const char *val)
{
    const ql_opt *o = &p->opts[i];
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

/* Help was asked for: print it, exit code 0. */
static int show_help(const ql_opt_parser *p)
{
    if (p->help)
        p->help(p);
    return 0;
}

/* One "--name[=value]" element at argv[*a]; takes the next element as its value when
 * the option needs one and "=" gave none. */
static int long_option(ql_opt_parser *p, int argc, char **argv, int *a)
{
    const char *elem = argv[*a], *word = elem + 2;
    const size_t len = strcspn(word, "=");
    const char *val = word[len] == '=' ? word + len + 1 : NULL;
    match m = {.word = word, .len = len, .exact = -1};
    for (size_t i = 0; i < p->n_opts && m.exact < 0; i++) {
        const ql_opt *o = &p->opts[i];
        if (o->kind == QL_OPT_SECTION)
            continue;
        m.hidden = o->hidden;
        each_name(o, i, match_name, &m);
    }
    const bool is_help = len > 0 && len <= 4 && memcmp("help", word, len) == 0;
    if (m.exact < 0 && is_help && (len == 4 || m.n_prefix == 0)) {
        if (val)
            return ql_opt_usage(p, "--help takes no value (got '%s')", elem);
        return show_help(p);
    }
    size_t i;
    char name[128];
    if (m.exact >= 0) {
        i = (size_t)m.exact;
        snprintf(name, sizeof name, "--%.*s", (int)len, word);
    } else if (m.n_prefix == 1 && !is_help) {
        i = m.prefix[0];
        snprintf(name, sizeof name, "--%.*s", (int)m.prefix_len[0], m.prefix_name[0]);
    } else if (m.n_prefix == 0) {
        return unknown_long(p, word, len);
    } else {
        char list[512] = "";
        size_t used = 0;
        for (size_t k = 0; k < m.n_prefix && used < sizeof list; k++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s--%s", k ? ", " : "",
                                     p->opts[m.prefix[k]].name);
        if (is_help && used < sizeof list)
            snprintf(list + used, sizeof list - used, ", --help");
        return ql_opt_usage(p, "option '--%.*s' is ambiguous (%s)", (int)len, word, list);
    }
    const ql_opt *o = &p->opts[i];
    if (!takes_value(o)) {
        if (val)
            return ql_opt_usage(p, "%s takes no value (got '%s')", name, elem);
        return apply(p, i, name, NULL);
    }
    if (!val) {
        if (*a + 1 >= argc)
            return ql_opt_usage(p, "%s needs a value (%s)", name, o->arg);
        val = argv[++*a];
    }
    return apply(p, i, name, val);
}

static ptrdiff_t index_of_key(const ql_opt_parser *p, int key)
{
    for (size_t i = 0; i < p->n_opts; i++)
        if (p->opts[i].kind != QL_OPT_SECTION && p->opts[i].key == key)
            return (ptrdiff_t)i;
    return -1;
}

/* One "-abc" element: flags clustered, the last (or any) letter that takes a value
 * takes the rest of the element, or the next one. */
static int short_options(ql_opt_parser *p, int argc, char **argv, int *a)
{
    const char *elem = argv[*a];
    for (const char *c = elem + 1; *c; c++) {
        if (*c == 'h')
            return show_help(p);
        const ptrdiff_t i = index_of_key(p, (unsigned char)*c);
        if (i < 0)
            return ql_opt_usage(p, "unknown option '-%c'", *c);
        const ql_opt *o = &p->opts[i];
        char name[8];
        snprintf(name, sizeof name, "-%c", *c);
        int rc;
        if (!takes_value(o)) {
            if ((rc = apply(p, (size_t)i, name, NULL)) != QL_OPT_GO_ON)
                return rc;
            continue;
        }
        const char *val = c + 1;
        if (!*val) {
            if (*a + 1 >= argc)
                return ql_opt_usage(p, "%s needs a value (%s)", name, o->arg);
            val = argv[++*a];
        }
        return apply(p, (size_t)i, name, val);
    }
    return QL_OPT_GO_ON;
}

int ql_opt_parse(ql_opt_parser *p, int argc, char **argv)
{
    QL_ASSERT(p->prog && p->n_opts <= QL_OPT_MAX && p->n_required <= p->max_args);
    check_table(p);
    memset(p->given, 0, sizeof p->given);
    for (size_t k = 0; k < p->max_args; k++)
        p->args[k] = NULL;
    p->n_args = 0;
    p->next = argc;

    size_t count = 0; /* positional arguments so far */
    int rc = QL_OPT_GO_ON;
    bool options_end = false;
    for (int a = 1; a < argc && rc == QL_OPT_GO_ON; a++) {
        const char *w = argv[a];
        if (!options_end && strcmp(w, "--") == 0) {
            options_end = true;
            continue;
        }
        if (options_end || w[0] != '-' || w[1] == '\0') {
            rc = positional(p, &count, w);
            if (p->stop_at_arg) {
                p->next = a; /* the dispatcher hands argv + next to the subcommand */
                break;
            }
            continue;
        }
        rc = w[1] == '-' ? long_option(p, argc, argv, &a) : short_options(p, argc, argv, &a);
    }
    if (rc != QL_OPT_GO_ON)
        return rc;
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

static void print_lines(FILE *out, int column, const char *help)
{
    for (const char *s = help;;) {
        const size_t len = strcspn(s, "\n");
        fprintf(out, "%.*s\n", (int)len, s);
        if (!s[len] || !s[len + 1])
            break;
        s += len + 1;
        fprintf(out, "%*s", column, "");
    }
}

/* The option's line(s); its aliases as one more help line. */
static void print_one(FILE *out, const char *left, int column, const char *help,
                      const char *aliases)
{
    const int n = fprintf(out, "%s", left);
    if ((!help || !*help) && !aliases) {
        fputc('\n', out);
        return;
    }
    if (n + 2 > column)
        fprintf(out, "\n%*s", column, "");
    else
        fprintf(out, "%*s", column - n, "");
    if (help && *help)
        print_lines(out, column, help);
    if (!aliases)
        return;
    if (help && *help)
        fprintf(out, "%*s", column, "");
    fputs("(also", out);
    for (const char *a = aliases; *a;) {
        a += strspn(a, " ");
        const size_t len = strcspn(a, " ");
        if (len)
            fprintf(out, " --%.*s", (int)len, a);
        a += len;
    }
    fputs(")\n", out);
}

void ql_opt_print_options(FILE *out, const ql_opt_parser *p)
{
    char left[160];
    int column = (int)strlen("  -h, --help") + 2;
    for (size_t i = 0; i < p->n_opts; i++) {
        const ql_opt *o = &p->opts[i];
        if (o->kind == QL_OPT_SECTION || o->hidden)
            continue;
        const int n = left_column(o->name, o->key, o->arg, left, sizeof left) + 2;
        if (n <= HELP_COLUMN_MAX && n > column)
            column = n;
    }
    if (p->n_opts == 0 || p->opts[0].kind != QL_OPT_SECTION)
        fprintf(out, "options:\n");
    for (size_t i = 0; i < p->n_opts; i++) {
        const ql_opt *o = &p->opts[i];
        if (o->hidden)
            continue;
        if (o->kind == QL_OPT_SECTION) {
            fprintf(out, "%s%s\n", i ? "\n" : "", o->name);
            continue;
        }
        left_column(o->name, o->key, o->arg, left, sizeof left);
        print_one(out, left, column, o->help, o->aliases);
    }
    left_column("help", 'h', NULL, left, sizeof left);
    print_one(out, left, column, "print this help and exit", NULL);
}
