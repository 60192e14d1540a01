/* Sweep files: reading, the union of grids with their exclude/only patterns, and
 * the checks that come before anything runs (sweep.h has the syntax).
 *
 * Design. The text is read line by line into sections; every value is parsed the
 * moment its line is read (config_axes.c's parser for an axis), so an error names its
 * line. A [sweep] section holds the scalar keys and one value per axis, a default
 * for every grid; each [grid] holds value lists. Patterns (`exclude`, `only`) are
 * configs with a subset of their axes set; a config matches one when, for every axis
 * it sets, the config with that axis replaced by the pattern's value reads the same
 * (the canonical form decides, so spellings that compute the same thing match).
 *
 * What is checked where, so that a file either runs as written or is refused before
 * the reference pass:
 *   - a value alone (a known type, a number in range, a rule that compiles): when
 *     its line is read;
 *   - a combination (ql_config_validate): for every config the patterns keep, with
 *     the line of the axis that breaks the rule;
 *   - a pattern that matches nothing, a grid left empty: after the expansion;
 *   - what needs the model (ql_sweep_check_model): by the runner once the model is
 *     open. */
#include "experiment/sweep.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"
#include "model/gguf.h"
#include "model/quant_policy.h"
#include "model/synth.h"

/* ---------------------------------------------------------------- keys */

typedef enum {
    KEY_NAME,
    KEY_MODEL,
    KEY_TEXT,
    KEY_CTX,
    KEY_CHUNKS,
    KEY_THREADS,
    KEY_LAYER_METRICS,
    KEY_COUNT
} sweep_key;

static const char *const key_names[KEY_COUNT] = {"name",   "model",   "text",         "ctx",
                                                 "chunks", "threads", "layer_metrics"};

/* The pattern keys, allowed in both sections and repeatable. */
typedef enum { FILTER_EXCLUDE, FILTER_ONLY, FILTER_COUNT } filter_kind;

static const char *const filter_names[FILTER_COUNT] = {"exclude", "only"};

/* Everything a key may be, for "did you mean": the scalar keys (in [sweep] only),
 * the pattern keys, the axes. Returns the count; *first is where a [grid]'s
 * candidates start. */
static size_t all_key_names(const char **out, size_t *first)
{
    size_t n = 0;
    for (int k = 0; k < KEY_COUNT; k++)
        out[n++] = key_names[k];
    *first = n;
    for (int f = 0; f < FILTER_COUNT; f++)
        out[n++] = filter_names[f];
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        out[n++] = ql_axis_name((ql_axis)a);
    return n;
}

static bool lookup_key(const char *s, sweep_key *out)
{
    for (int k = 0; k < KEY_COUNT; k++)
        if (strcmp(s, key_names[k]) == 0) {
            *out = (sweep_key)k;
            return true;
        }
    return false;
}

static bool lookup_filter(const char *s, filter_kind *out)
{
    for (int f = 0; f < FILTER_COUNT; f++)
        if (strcmp(s, filter_names[f]) == 0) {
            *out = (filter_kind)f;
            return true;
        }
    return false;
}

/* ---------------------------------------------------------------- parser state */

/* One axis as a section gives it: its values, each parsed into a config that
 * differs from the defaults only in that axis, and the key's line. */
typedef struct {
    ql_config *values;
    int n;
    int line; /* 0 = not given in this section */
} axis_list;

/* An exclude or only pattern: the axes it sets and their values. */
typedef struct {
    filter_kind kind;
    int line;
    char text[256]; /* as written, for messages */
    bool set[QL_AXIS_COUNT];
    ql_config config;
    size_t matches; /* configs of its scope it matched */
} pattern;

typedef struct {
    pattern *items;
    size_t n, cap;
} pattern_list;

typedef struct {
    int line; /* of its [grid] header; 0 for the grid a file without [grid] implies */
    axis_list axes[QL_AXIS_COUNT];
    pattern_list patterns;
    size_t kept; /* configs the patterns kept */
} grid;

typedef struct {
    const char *path;
    unsigned flags;
    ql_sweep *sw;
    ql_error *err;
    int key_line[KEY_COUNT];
    int sweep_line;                 /* line of the [sweep] header; 0 = absent */
    axis_list fixed[QL_AXIS_COUNT]; /* [sweep]'s single values */
    pattern_list patterns;          /* [sweep]'s: every grid */
    grid *grids;
    size_t n_grids, cap_grids;
} parser;

static ql_status fail(parser *p, int line, ql_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static ql_status fail(parser *p, int line, ql_status st, const char *fmt, ...)
{
    char msg[QL_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ql_error_set(p->err, st, "%s:%d: %s", p->path, line, msg);
}

/* Prefixes an error a config function already set with file:line. */
static ql_status located(parser *p, int line, ql_status st)
{
    ql_error_prefix(p->err, "%s:%d: ", p->path, line);
    return st;
}

static void axis_lists_free(axis_list *axes)
{
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        free(axes[a].values);
}

static void parser_free(parser *p)
{
    axis_lists_free(p->fixed);
    free(p->patterns.items);
    for (size_t g = 0; g < p->n_grids; g++) {
        axis_lists_free(p->grids[g].axes);
        free(p->grids[g].patterns.items);
    }
    free(p->grids);
}

/* ---------------------------------------------------------------- values */

/* Splits s in place at whitespace; returns the number of tokens (at most max). */
static int split_values(char *s, char **tok, int max, int *total)
{
    int n = 0, all = 0;
    char *q = s;
    for (;;) {
        while (*q && isspace((unsigned char)*q))
            q++;
        if (!*q)
            break;
        char *start = q;
        while (*q && !isspace((unsigned char)*q))
            q++;
        if (*q)
            *q++ = '\0';
        if (n < max)
            tok[n++] = start;
        all++;
    }
    *total = all;
    return n;
}

static bool valid_name(const char *s)
{
    if (!*s)
        return false;
    for (const unsigned char *q = (const unsigned char *)s; *q; q++)
        if (!isalnum(*q) && *q != '-' && *q != '_' && *q != '.' && *q != '+')
            return false;
    return true;
}

/* Cuts a comment: `#` at the start or after whitespace. */
static void strip_comment(char *line)
{
    for (char *q = line; *q; q++)
        if (*q == '#' && (q == line || isspace((unsigned char)q[-1]))) {
            *q = '\0';
            return;
        }
}

static char *trim(char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* text = A B ...: the evaluation texts, each once; the first is the current one. */
static ql_status set_texts(parser *p, int line, char **tok, int n)
{
    ql_sweep *sw = p->sw;
    if (n > QL_SWEEP_MAX_TEXTS)
        return fail(p, line, QL_EFORMAT, "text lists %d texts; at most %d", n,
                    QL_SWEEP_MAX_TEXTS);
    if (!(sw->texts = calloc((size_t)n, sizeof *sw->texts)))
        return fail(p, line, QL_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        if (strlen(tok[i]) >= QL_PATH_MAX)
            return fail(p, line, QL_EFORMAT, "text '%.64s...' is too long", tok[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(tok[i], sw->texts[j]) == 0)
                return fail(p, line, QL_EFORMAT, "text '%s' is listed twice", tok[i]);
        ql_strlcpy(sw->texts[i], tok[i], QL_PATH_MAX);
    }
    sw->n_texts = n;
    ql_strlcpy(sw->text, sw->texts[0], sizeof sw->text);
    sw->text_line = line;
    return QL_OK;
}

static ql_status set_scalar(parser *p, int line, sweep_key key, const char *v)
{
    ql_sweep *sw = p->sw;
    int n;
    switch (key) {
    case KEY_NAME:
        if (!valid_name(v) || strlen(v) >= sizeof sw->name)
            return fail(p, line, QL_EFORMAT,
                        "name '%s' must be letters, digits, '-', '_', '.', '+' (at most %d)", v,
                        QL_SWEEP_NAME_MAX - 1);
        ql_strlcpy(sw->name, v, sizeof sw->name);
        return QL_OK;
    case KEY_MODEL:
        if (strlen(v) >= QL_PATH_MAX)
            return fail(p, line, QL_EFORMAT, "%s '%.64s...' is too long", key_names[key], v);
        ql_strlcpy(sw->model, v, QL_PATH_MAX);
        sw->model_line = line;
        return QL_OK;
    case KEY_TEXT: /* set_texts */
    case KEY_CTX:
        if (!ql_parse_int(v, &n))
            return fail(p, line, QL_EFORMAT, "ctx '%s' is not an integer", v);
        if (n < QL_CTX_MIN || n > QL_CTX_MAX)
            return fail(p, line, QL_EFORMAT, "ctx %d is out of range (%d..%d)", n, QL_CTX_MIN,
                        QL_CTX_MAX);
        sw->ctx = n;
        return QL_OK;
    case KEY_CHUNKS:
        if (!ql_parse_int(v, &n))
            return fail(p, line, QL_EFORMAT, "chunks '%s' is not an integer", v);
        if (n < 0 || n > QL_SWEEP_MAX_CHUNKS)
            return fail(p, line, QL_EFORMAT, "chunks %d is out of range (0..%d, 0 = all)", n,
                        QL_SWEEP_MAX_CHUNKS);
        sw->chunks = n;
        return QL_OK;
    case KEY_THREADS:
        if (!ql_parse_int(v, &n))
            return fail(p, line, QL_EFORMAT, "threads '%s' is not an integer", v);
        if (n < 0 || n > QL_SWEEP_MAX_THREADS)
            return fail(p, line, QL_EFORMAT, "threads %d is out of range (0..%d, 0 = all cores)", n,
                        QL_SWEEP_MAX_THREADS);
        sw->threads = n;
        return QL_OK;
    case KEY_LAYER_METRICS:
        if (strcmp(v, "yes") != 0 && strcmp(v, "no") != 0)
            return fail(p, line, QL_EFORMAT, "layer_metrics '%s' must be yes or no", v);
        sw->layer_metrics = strcmp(v, "yes") == 0;
        return QL_OK;
    case KEY_COUNT:
        break;
    }
    QL_ASSERT(!"bad key");
    return QL_EINVAL;
}

/* Recipe files: one REGEX=TYPE rule per line, read into the ';'-joined rules of a
 * tensor_types value. Each rule is checked on its own so that an error names its
 * line in the recipe. */
#define RECIPE_MAX_BYTES (1 << 20)

/* what: "" or "exclude: " (a pattern's value), before every message. */
static ql_status read_recipe(parser *p, int line, const char *what, const char *file, char *rules,
                             size_t size)
{
    /* A relative path is relative to the sweep file's directory (recipes live beside
     * the sweeps that use them, wherever qlab runs from). */
    char path[QL_PATH_MAX];
    if (!ql_sweep_path(p->sw, file, path, sizeof path))
        return fail(p, line, QL_EFORMAT, "%stensor_types: recipe '%.64s...': the path is too long",
                    what, file);
    char *text;
    size_t len;
    ql_error ferr;
    ql_error_clear(&ferr);
    if (ql_file_read_all(path, &text, &len, &ferr) != QL_OK)
        return fail(p, line, QL_EFORMAT,
                    "%stensor_types: '%s' is neither REGEX=TYPE rules nor a readable recipe file "
                    "(%s)",
                    what, file, ferr.msg);
    ql_status st = QL_OK;
    size_t used = 0;
    int rline = 0;
    if (len > RECIPE_MAX_BYTES || strlen(text) != len) {
        st = fail(p, line, QL_EFORMAT, "%stensor_types: recipe '%s' is not a text file of rules",
                  what, file);
        goto out;
    }
    for (char *next = text; next && !st;) {
        char *l = next;
        char *nl = strchr(l, '\n');
        next = nl ? nl + 1 : NULL;
        if (nl)
            *nl = '\0';
        rline++;
        strip_comment(l);
        l = trim(l);
        if (!*l)
            continue;
        /* `REGEX = TYPE` reads as REGEX=TYPE. */
        char rule[QL_CONFIG_RECIPE_MAX];
        char *eq = strchr(l, '=');
        if (eq) {
            *eq = '\0';
            snprintf(rule, sizeof rule, "%s=%s", trim(l), trim(eq + 1));
        } else {
            ql_strlcpy(rule, l, sizeof rule);
        }
        ql_config one;
        ql_config_init(&one);
        if (strchr(rule, ';'))
            st = fail(p, line, QL_EFORMAT,
                      "%stensor_types: recipe '%s' line %d: one rule per line, without ';'", what,
                      file, rline);
        else if (ql_config_set(&one, QL_AXIS_TENSOR_TYPES, rule, p->err) != QL_OK) {
            char msg[QL_ERROR_MSG_MAX];
            const char *why = p->err->msg;
            if (strncmp(why, "tensor_types: ", 14) == 0)
                why += 14;
            ql_strlcpy(msg, why, sizeof msg);
            st = fail(p, line, QL_EFORMAT, "%stensor_types: recipe '%s' line %d: %s", what, file,
                      rline, msg);
        } else {
            size_t n = strlen(one.tensor_types);
            if (used + 1 + n >= size)
                st = fail(p, line, QL_EFORMAT,
                          "%stensor_types: recipe '%s' holds more than %zu bytes of rules", what,
                          file, size - 1);
            else {
                if (used)
                    rules[used++] = ';';
                memcpy(rules + used, one.tensor_types, n + 1);
                used += n;
            }
        }
    }
    if (!st && used == 0)
        st = fail(p, line, QL_EFORMAT, "%stensor_types: recipe '%s' has no rules", what, file);
out:
    free(text);
    return st;
}

/* The identity of a quantized file a config names: its SHA-256, or for the first file of
 * a split set the set's (every file's), as for a model. */
static ql_status weight_file_sha256(const char *path, char out[65], ql_error *err)
{
    char prefix[4096];
    int k, n;
    if (!ql_gguf_split_prefix(path, prefix, sizeof prefix, &k, &n) || n < 2)
        return ql_sha256_file(path, out, err);
    ql_gguf *g;
    ql_status st = ql_gguf_open(&g, path, err);
    if (st)
        return st;
    st = ql_gguf_sha256(g, out, err);
    ql_gguf_close(g);
    return st;
}

/* weight_type file:PATH: the path resolved against the sweep file's directory (as a
 * recipe's) and the file (or split set) hashed, so that the config's identity is the
 * file's contents. */
static ql_status weight_file(parser *p, int line, const char *what, ql_config *c)
{
    if (c->weight_file_sha[0])
        return fail(p, line, QL_EFORMAT,
                    "%sweight_type: file:%s: give the path alone; qlab hashes the file itself",
                    what, c->weight_file);
    if (!ql_sweep_path(p->sw, c->weight_file, c->weight_file_open, sizeof c->weight_file_open))
        return fail(p, line, QL_EFORMAT, "%sweight_type: file:%s: the path is too long", what,
                    c->weight_file);
    ql_error ferr;
    ql_error_clear(&ferr);
    if (weight_file_sha256(c->weight_file_open, c->weight_file_sha, &ferr) != QL_OK) {
        c->weight_file_sha[0] = '\0';
        return fail(p, line, QL_EFORMAT, "%sweight_type: file:%s: %s", what, c->weight_file,
                    ferr.msg);
    }
    return QL_OK;
}

/* One value of an axis into c, as a sweep file may write it (a tensor_types value
 * without '=' names a recipe file, a weight_type file:PATH is hashed); what as
 * read_recipe's. */
static ql_status axis_value(parser *p, int line, const char *what, ql_axis axis, const char *v,
                            ql_config *c)
{
    char rules[QL_CONFIG_RECIPE_MAX];
    if (axis == QL_AXIS_TENSOR_TYPES && strcasecmp(v, "none") != 0 && !strchr(v, '=')) {
        ql_status st = read_recipe(p, line, what, v, rules, sizeof rules);
        if (st != QL_OK)
            return st;
        v = rules;
    }
    ql_status st = ql_config_set(c, axis, v, p->err);
    if (st == QL_OK && axis == QL_AXIS_WEIGHT_TYPE && c->weight_file[0] &&
        (st = weight_file(p, line, what, c)) != QL_OK)
        return st;
    if (st == QL_OK && !(p->flags & QL_SWEEP_ALLOW_UNIMPLEMENTED))
        st = ql_config_check_axis(c, axis, p->err);
    if (st != QL_OK)
        ql_error_prefix(p->err, "%s:%d: %s", p->path, line, what);
    return st;
}

static ql_status set_axis(parser *p, int line, axis_list *al, ql_axis axis, char **tok, int n)
{
    al->values = calloc((size_t)n, sizeof *al->values);
    if (!al->values)
        return fail(p, line, QL_ENOMEM, "out of memory");
    al->line = line;
    for (int i = 0; i < n; i++) {
        ql_config *c = &al->values[i];
        ql_config_init(c);
        ql_status st = axis_value(p, line, "", axis, tok[i], c);
        if (st != QL_OK)
            return st;
        al->n++;
    }
    return QL_OK;
}

/* `exclude = axis=value ...` / `only = ...`: a pattern of the section's scope. */
static ql_status add_pattern(parser *p, int line, pattern_list *list, filter_kind kind, char **tok,
                             int n)
{
    const char *what = filter_names[kind];
    if (list->n == list->cap &&
        !ql_grow((void **)&list->items, &list->cap, list->n + 1, sizeof *list->items))
        return fail(p, line, QL_ENOMEM, "out of memory");
    pattern *pt = &list->items[list->n];
    memset(pt, 0, sizeof *pt);
    pt->kind = kind;
    pt->line = line;
    ql_config_init(&pt->config);
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        used +=
            (size_t)snprintf(pt->text + used, used < sizeof pt->text ? sizeof pt->text - used : 0,
                             "%s%s", i ? " " : "", tok[i]);
        used = used < sizeof pt->text ? used : sizeof pt->text;
        char *eq = strchr(tok[i], '=');
        if (!eq)
            return fail(p, line, QL_EFORMAT, "%s: '%s' is not axis=value", what, tok[i]);
        *eq = '\0';
        ql_axis axis;
        if (!ql_axis_lookup(tok[i], &axis)) {
            const char *names[QL_AXIS_COUNT];
            for (int a = 0; a < QL_AXIS_COUNT; a++)
                names[a] = ql_axis_name((ql_axis)a);
            const char *near = ql_closest_name(tok[i], names, QL_AXIS_COUNT);
            if (near)
                return fail(p, line, QL_EFORMAT, "%s: unknown axis '%s'; did you mean '%s'?", what,
                            tok[i], near);
            return fail(p, line, QL_EFORMAT, "%s: unknown axis '%s'", what, tok[i]);
        }
        if (pt->set[axis])
            return fail(p, line, QL_EFORMAT, "%s: axis '%s' given twice", what, tok[i]);
        pt->set[axis] = true;
        char prefix[16];
        snprintf(prefix, sizeof prefix, "%s: ", what);
        ql_status st = axis_value(p, line, prefix, axis, eq + 1, &pt->config);
        if (st != QL_OK)
            return st;
    }
    list->n++;
    return QL_OK;
}

/* ---------------------------------------------------------------- lines */

enum { SECTION_NONE, SECTION_SWEEP, SECTION_GRID };

/* An axis of the current section: refused when the other kind of section has it. */
static ql_status axis_line(parser *p, int lineno, int section, ql_axis axis, char **tok, int n)
{
    const char *key = ql_axis_name(axis);
    int other = 0;
    axis_list *al;
    if (section == SECTION_GRID) {
        al = &p->grids[p->n_grids - 1].axes[axis];
        other = p->fixed[axis].line;
    } else {
        al = &p->fixed[axis];
        for (size_t g = 0; g < p->n_grids && !other; g++)
            other = p->grids[g].axes[axis].line;
    }
    if (al->line)
        return fail(p, lineno, QL_EFORMAT, "duplicate key '%s' (first given on line %d)", key,
                    al->line);
    if (other)
        return fail(p, lineno, QL_EFORMAT,
                    "axis '%s' is given in both [sweep] and [grid] (lines %d and %d)", key,
                    other < lineno ? other : lineno, other < lineno ? lineno : other);
    if (section == SECTION_SWEEP && n != 1)
        return fail(p, lineno, QL_EFORMAT,
                    "axis '%s' in [sweep] takes one value, got %d (put lists in [grid])", key, n);
    return set_axis(p, lineno, al, axis, tok, n);
}

/* Handles `key = values` in the current section. line is modified. */
static ql_status key_line(parser *p, int lineno, int section, char *line)
{
    char *eq = strchr(line, '=');
    if (!eq)
        return fail(p, lineno, QL_EFORMAT, "missing '=' in '%s' (expected key = value)", line);
    *eq = '\0';
    char *key = line, *val = eq + 1;
    size_t kl = strlen(key);
    while (kl > 0 && isspace((unsigned char)key[kl - 1]))
        key[--kl] = '\0';
    if (kl == 0)
        return fail(p, lineno, QL_EFORMAT, "missing key before '=' in '=%s'", val);

    char *tok[64];
    int total;
    /* 64 values of one axis is far more than any grid needs; the count below
     * reports the real number when there are more. */
    int n = split_values(val, tok, 64, &total);
    if (total > n)
        return fail(p, lineno, QL_EFORMAT, "'%s' lists %d values; at most 64 per axis", key, total);
    if (n == 0)
        return fail(p, lineno, QL_EFORMAT, "empty value list for '%s'", key);

    ql_axis axis;
    sweep_key sk;
    filter_kind fk;
    const char *sect = section == SECTION_SWEEP ? "[sweep]" : "[grid]";
    if (ql_axis_lookup(key, &axis))
        return axis_line(p, lineno, section, axis, tok, n);
    if (lookup_filter(key, &fk))
        return add_pattern(
            p, lineno, section == SECTION_GRID ? &p->grids[p->n_grids - 1].patterns : &p->patterns,
            fk, tok, n);
    if (!lookup_key(key, &sk)) {
        const char *names[KEY_COUNT + FILTER_COUNT + QL_AXIS_COUNT];
        size_t first, nn = all_key_names(names, &first);
        const char *near = section == SECTION_SWEEP
                               ? ql_closest_name(key, names, nn)
                               : ql_closest_name(key, names + first, nn - first);
        if (near)
            return fail(p, lineno, QL_EFORMAT, "unknown key '%s' in %s; did you mean '%s'?", key,
                        sect, near);
        return fail(p, lineno, QL_EFORMAT, "unknown key '%s' in %s", key, sect);
    }
    if (section == SECTION_GRID)
        return fail(p, lineno, QL_EFORMAT, "'%s' is not an axis; it belongs in [sweep]", key);
    if (p->key_line[sk])
        return fail(p, lineno, QL_EFORMAT, "duplicate key '%s' (first given on line %d)", key,
                    p->key_line[sk]);
    p->key_line[sk] = lineno;
    if (sk == KEY_TEXT)
        return set_texts(p, lineno, tok, n);
    if (n != 1)
        return fail(p, lineno, QL_EFORMAT, "'%s' takes one value, got %d: '%s ...'", key, n,
                    tok[0]);
    return set_scalar(p, lineno, sk, tok[0]);
}

/* Whether a line starts with `identifier =` (after optional whitespace). */
static bool looks_like_key(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (!isalpha((unsigned char)*s) && *s != '_')
        return false;
    while (isalnum((unsigned char)*s) || *s == '_')
        s++;
    while (*s == ' ' || *s == '\t')
        s++;
    return *s == '=';
}

static ql_status new_grid(parser *p, int lineno)
{
    if (p->n_grids == p->cap_grids &&
        !ql_grow((void **)&p->grids, &p->cap_grids, p->n_grids + 1, sizeof *p->grids))
        return fail(p, lineno, QL_ENOMEM, "out of memory");
    memset(&p->grids[p->n_grids], 0, sizeof p->grids[p->n_grids]);
    p->grids[p->n_grids++].line = lineno;
    return QL_OK;
}

static ql_status parse_lines(parser *p, char *text)
{
    int section = SECTION_NONE, lineno = 0;
    char *next = text;
    while (next) {
        char *line = next;
        char *nl = strchr(line, '\n');
        next = nl ? nl + 1 : NULL;
        if (nl)
            *nl = '\0';
        lineno++;
        char raw_first = *line;
        strip_comment(line);
        line = trim(line);
        if (!*line)
            continue;
        if (*line == '[') {
            size_t n = strlen(line);
            if (line[n - 1] != ']')
                return fail(p, lineno, QL_EFORMAT, "section header '%s' has no closing ']'", line);
            line[n - 1] = '\0';
            char *name = trim(line + 1);
            if (strcmp(name, "sweep") == 0) {
                if (p->sweep_line)
                    return fail(p, lineno, QL_EFORMAT,
                                "duplicate section [sweep] (first on line %d)", p->sweep_line);
                p->sweep_line = lineno;
                section = SECTION_SWEEP;
            } else if (strcmp(name, "grid") == 0) {
                ql_status st = new_grid(p, lineno);
                if (st != QL_OK)
                    return st;
                section = SECTION_GRID;
            } else {
                return fail(p, lineno, QL_EFORMAT,
                            "unknown section [%s] (expected [sweep] or [grid])", name);
            }
            continue;
        }
        if (section == SECTION_NONE)
            return fail(p, lineno, QL_EFORMAT, "'%s' is outside any section (start with [sweep])",
                        line);
        if (isspace((unsigned char)raw_first) && !looks_like_key(line))
            return fail(p, lineno, QL_EFORMAT,
                        "indented line '%s' continues no key (continuation lines follow a "
                        "'key = values' line)",
                        line);
        /* A value list may go on over the following indented lines that are not
         * themselves `key = ...` lines. */
        int key_lineno = lineno;
        char *logical = line;
        char *joined = NULL;
        while (next && (*next == ' ' || *next == '\t' || *next == '\n' || *next == '\r') &&
               !looks_like_key(next)) {
            char *cont = next;
            char *cnl = strchr(cont, '\n');
            next = cnl ? cnl + 1 : NULL;
            if (cnl)
                *cnl = '\0';
            lineno++;
            strip_comment(cont);
            cont = trim(cont);
            if (!*cont)
                continue;
            size_t a = strlen(logical), b = strlen(cont);
            char *grown = realloc(joined, a + b + 2);
            if (!grown) {
                free(joined);
                return fail(p, lineno, QL_ENOMEM, "out of memory");
            }
            if (!joined)
                memcpy(grown, logical, a + 1);
            joined = grown;
            joined[a] = ' ';
            memcpy(joined + a + 1, cont, b + 1);
            logical = joined;
        }
        ql_status st = key_line(p, key_lineno, section, logical);
        free(joined);
        if (st != QL_OK)
            return st;
    }
    if (!p->sweep_line)
        return fail(p, 1, QL_EFORMAT, "no [sweep] section (it names the model and the text)");
    if (!p->key_line[KEY_MODEL])
        return fail(p, p->sweep_line, QL_EFORMAT, "[sweep] has no 'model' (required)");
    if (!p->key_line[KEY_TEXT])
        return fail(p, p->sweep_line, QL_EFORMAT, "[sweep] has no 'text' (required)");
    /* A file without [grid] is one grid of [sweep]'s values. */
    p->sw->n_grids = (int)p->n_grids;
    if (p->n_grids == 0) {
        ql_status st = new_grid(p, 0);
        if (st != QL_OK)
            return st;
    }
    for (size_t g = 0; g < p->n_grids; g++)
        if (!p->fixed[QL_AXIS_WEIGHT_TYPE].line && !p->grids[g].axes[QL_AXIS_WEIGHT_TYPE].line)
            return fail(p, p->grids[g].line ? p->grids[g].line : p->sweep_line, QL_EFORMAT,
                        "no weight_type given (in [sweep] or [grid])");
    return QL_OK;
}

/* ---------------------------------------------------------------- expansion */

static uint64_t hash_key(const char *hex)
{
    uint64_t k = 0;
    for (int i = 0; i < 16; i++) {
        char c = hex[i];
        k = (k << 4) | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    return k;
}

/* Normal form of an expanded config: a calibration context equal to the run's is
 * the default, one spelling. */
static void normalize(const ql_sweep *sw, ql_config *c)
{
    if (c->imatrix_kind == QL_IMATRIX_CALIB && c->imatrix_ctx == sw->ctx)
        c->imatrix_ctx = 0;
}

/* Whether c matches every axis the pattern sets (header comment). */
static bool pattern_matches(const parser *p, const pattern *pt, const ql_config *c)
{
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        if (!pt->set[a])
            continue;
        ql_config t = *c;
        ql_config_copy_axis(&t, &pt->config, (ql_axis)a);
        normalize(p->sw, &t);
        char want[QL_CONFIG_VALUE_MAX], have[QL_CONFIG_VALUE_MAX];
        ql_config_axis_string(&t, (ql_axis)a, want, sizeof want);
        ql_config_axis_string(c, (ql_axis)a, have, sizeof have);
        if (strcmp(want, have) != 0)
            return false;
    }
    return true;
}

/* Applies a scope's patterns to c (counting their matches): false when an exclude
 * matches or the scope has `only` patterns and none matches. */
static bool patterns_keep(const parser *p, pattern_list *list, const ql_config *c)
{
    bool excluded = false, has_only = false, in_only = false;
    for (size_t i = 0; i < list->n; i++) {
        pattern *pt = &list->items[i];
        bool m = pattern_matches(p, pt, c);
        pt->matches += m;
        if (pt->kind == FILTER_EXCLUDE)
            excluded |= m;
        else {
            has_only = true;
            in_only |= m;
        }
    }
    return !excluded && (!has_only || in_only);
}

/* Every pattern matched some config of its scope. */
static ql_status check_patterns(parser *p, const pattern_list *list, const grid *g)
{
    for (size_t i = 0; i < list->n; i++) {
        const pattern *pt = &list->items[i];
        if (pt->matches)
            continue;
        if (g)
            return fail(p, pt->line, QL_EFORMAT,
                        "%s '%s' matches no config of the [grid] on line %d",
                        filter_names[pt->kind], pt->text, g->line);
        return fail(p, pt->line, QL_EFORMAT, "%s '%s' matches no config of the sweep",
                    filter_names[pt->kind], pt->text);
    }
    return QL_OK;
}

/* The line a config's axis value came from (0: the default). */
static int axis_source(const parser *p, const grid *g, int a)
{
    return g->axes[a].line ? g->axes[a].line : p->fixed[a].line;
}

/* Checks one config the patterns kept, with the line of the axis at fault. */
static ql_status check_config(parser *p, const grid *g, const ql_config *c)
{
    ql_axis bad = QL_AXIS_WEIGHT_TYPE;
    ql_status st = ql_config_validate(c, &bad, p->err);
    if (st != QL_OK) {
        int line = axis_source(p, g, bad);
        return located(p, line ? line : axis_source(p, g, QL_AXIS_WEIGHT_TYPE), st);
    }
    if (p->flags & QL_SWEEP_ALLOW_UNIMPLEMENTED)
        return QL_OK;
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        if ((st = ql_config_check_axis(c, (ql_axis)a, p->err)) != QL_OK) {
            /* Only kv_type = auto can fail here (through act_mode). */
            int line =
                axis_source(p, g, a) ? axis_source(p, g, a) : axis_source(p, g, QL_AXIS_ACT_MODE);
            return located(p, line ? line : p->sweep_line, st);
        }
    }
    return QL_OK;
}

/* Configs in one grid: the product of its lists (with [sweep]'s values and the
 * defaults for the axes it does not list). */
static size_t grid_size(const parser *p, const grid *g)
{
    (void)p;
    size_t n = 1;
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        n *= (size_t)(g->axes[a].n ? g->axes[a].n : 1); /* at most 64^9 = 2^54 */
    return n;
}

static int cmp_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* sw->n_values: distinct canonical values per axis among the points (0 when the
 * file gives the axis nowhere). */
static ql_status count_values(parser *p)
{
    ql_sweep *sw = p->sw;
    char **vals = calloc(sw->n_points ? sw->n_points : 1, sizeof *vals);
    if (!vals)
        return fail(p, 1, QL_ENOMEM, "out of memory");
    ql_status st = QL_OK;
    for (int a = 0; a < QL_AXIS_COUNT && !st; a++) {
        bool given = p->fixed[a].line != 0;
        for (size_t g = 0; g < p->n_grids; g++)
            given |= p->grids[g].axes[a].line != 0;
        sw->n_values[a] = 0;
        if (!given)
            continue;
        size_t n = 0;
        for (size_t i = 0; i < sw->n_points; i++) {
            char v[QL_CONFIG_VALUE_MAX];
            ql_config_axis_string(&sw->points[i].config, (ql_axis)a, v, sizeof v);
            if (!(vals[n] = ql_strdup(v))) {
                st = fail(p, 1, QL_ENOMEM, "out of memory");
                break;
            }
            n++;
        }
        if (!st) {
            qsort(vals, n, sizeof *vals, cmp_strings);
            for (size_t i = 0; i < n; i++)
                sw->n_values[a] += i == 0 || strcmp(vals[i], vals[i - 1]) != 0;
        }
        for (size_t i = 0; i < n; i++)
            free(vals[i]);
    }
    free(vals);
    return st;
}

static ql_status expand(parser *p)
{
    ql_sweep *sw = p->sw;
    size_t total = 0;
    for (size_t g = 0; g < p->n_grids; g++) {
        size_t n = grid_size(p, &p->grids[g]);
        total = n > QL_SWEEP_MAX_CONFIGS ? n : total + n;
        if (total > QL_SWEEP_MAX_CONFIGS) {
            int line = p->grids[g].line ? p->grids[g].line : p->sweep_line;
            if (p->n_grids == 1)
                return fail(p, line, QL_EFORMAT, "the grid expands to %zu configs, more than %d",
                            total, QL_SWEEP_MAX_CONFIGS);
            return fail(p, line, QL_EFORMAT,
                        "the grids up to this one expand to %zu configs, more than %d", total,
                        QL_SWEEP_MAX_CONFIGS);
        }
    }
    sw->points = calloc(total ? total : 1, sizeof *sw->points);
    /* Open addressing on the first 64 bits of the hash, at most half full. */
    size_t cap = 2;
    while (cap < 2 * total)
        cap *= 2;
    size_t *slots = calloc(cap, sizeof *slots); /* index + 1; 0 = empty */
    if (!sw->points || !slots) {
        free(slots);
        return fail(p, 1, QL_ENOMEM, "out of memory for %zu configs", total);
    }
    ql_status st = QL_OK;
    for (size_t gi = 0; gi < p->n_grids && !st; gi++) {
        grid *g = &p->grids[gi];
        size_t n = grid_size(p, g);
        int idx[QL_AXIS_COUNT] = {0};
        for (size_t it = 0; it < n && !st; it++) {
            ql_config c;
            ql_config_init(&c);
            int lines[QL_AXIS_COUNT];
            for (int a = 0; a < QL_AXIS_COUNT; a++) {
                if (g->axes[a].n)
                    ql_config_copy_axis(&c, &g->axes[a].values[idx[a]], (ql_axis)a);
                else if (p->fixed[a].n)
                    ql_config_copy_axis(&c, &p->fixed[a].values[0], (ql_axis)a);
                lines[a] = axis_source(p, g, a);
            }
            normalize(sw, &c);
            /* Odometer: the last axis turns fastest. */
            for (int a = QL_AXIS_COUNT - 1; a >= 0; a--) {
                int na = g->axes[a].n ? g->axes[a].n : 1;
                if (++idx[a] < na)
                    break;
                idx[a] = 0;
            }
            /* Both scopes see every config, so that each counts its matches. */
            bool keep = patterns_keep(p, &g->patterns, &c);
            keep = patterns_keep(p, &p->patterns, &c) && keep;
            if (!keep)
                continue;
            g->kept++;
            if ((st = check_config(p, g, &c)) != QL_OK)
                break;
            char hash[65];
            ql_config_hash(&c, hash);
            size_t h = (size_t)hash_key(hash) & (cap - 1);
            bool dup = false;
            while (slots[h]) {
                if (strcmp(sw->points[slots[h] - 1].hash, hash) == 0) {
                    dup = true;
                    break;
                }
                h = (h + 1) & (cap - 1);
            }
            if (!dup) {
                ql_sweep_point *pt = &sw->points[sw->n_points++];
                pt->config = c;
                memcpy(pt->hash, hash, sizeof pt->hash);
                memcpy(pt->line, lines, sizeof pt->line);
                slots[h] = sw->n_points;
            }
        }
    }
    /* A pattern that matches nothing explains an empty grid: it is reported first. */
    for (size_t gi = 0; gi < p->n_grids && !st; gi++)
        st = check_patterns(p, &p->grids[gi].patterns, &p->grids[gi]);
    if (!st)
        st = check_patterns(p, &p->patterns, NULL);
    for (size_t gi = 0; gi < p->n_grids && !st; gi++)
        if (p->grids[gi].kept == 0)
            st = fail(p, p->grids[gi].line ? p->grids[gi].line : p->sweep_line, QL_EFORMAT,
                      "exclude/only leave no config of this [grid]");
    if (!st)
        st = count_values(p);
    free(slots);
    return st;
}

/* ---------------------------------------------------------------- public */

static void default_name(ql_sweep *sw, const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    ql_strlcpy(sw->name, base, sizeof sw->name);
    char *dot = strrchr(sw->name, '.');
    if (dot && dot != sw->name)
        *dot = '\0';
    /* Characters a name may not hold become '_' so the default is always valid. */
    for (char *q = sw->name; *q; q++)
        if (!isalnum((unsigned char)*q) && *q != '-' && *q != '_' && *q != '.' && *q != '+')
            *q = '_';
    if (!sw->name[0])
        ql_strlcpy(sw->name, "sweep", sizeof sw->name);
}

ql_status ql_sweep_parse(const char *path, const char *text, unsigned flags, ql_sweep *sw,
                         ql_error *err)
{
    memset(sw, 0, sizeof *sw);
    ql_strlcpy(sw->path, path, sizeof sw->path);
    /* "a/b.sweep" -> "a", "/b.sweep" -> "/", "b.sweep" -> "" (the current directory). */
    const char *slash = strrchr(sw->path, '/');
    if (slash)
        snprintf(sw->dir, sizeof sw->dir, "%.*s", slash == sw->path ? 1 : (int)(slash - sw->path),
                 sw->path);
    sw->ctx = QL_SWEEP_DEFAULT_CTX;
    default_name(sw, path);

    parser p;
    memset(&p, 0, sizeof p);
    p.path = path;
    p.flags = flags;
    p.sw = sw;
    p.err = err;

    /* Editors on Windows start UTF-8 files with a byte order mark: not part of the text. */
    if (strncmp(text, "\xef\xbb\xbf", 3) == 0)
        text += 3;
    char *copy = ql_strdup(text);
    if (!copy)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
    ql_status st = parse_lines(&p, copy);
    if (st == QL_OK)
        st = expand(&p);
    free(copy);
    parser_free(&p);
    if (st != QL_OK)
        ql_sweep_deinit(sw);
    return st;
}

ql_status ql_sweep_load(const char *path, unsigned flags, ql_sweep *sw, ql_error *err)
{
    memset(sw, 0, sizeof *sw);
    char *text;
    size_t len;
    ql_status st = ql_file_read_all(path, &text, &len, err);
    if (st != QL_OK)
        return st;
    size_t nul = strlen(text);
    if (nul != len) {
        int line = 1;
        for (size_t i = 0; i < nul; i++)
            line += text[i] == '\n';
        free(text);
        return ql_error_set(err, QL_EFORMAT, "%s:%d: NUL byte at offset %zu (not a text file?)",
                            path, line, nul);
    }
    st = ql_sweep_parse(path, text, flags, sw, err);
    free(text);
    return st;
}

void ql_sweep_deinit(ql_sweep *sw)
{
    if (!sw)
        return;
    free(sw->points);
    sw->points = NULL;
    sw->n_points = 0;
    free(sw->texts);
    sw->texts = NULL;
    sw->n_texts = 0;
}

void ql_sweep_select_text(ql_sweep *sw, int i)
{
    QL_ASSERT(i >= 0 && i < sw->n_texts);
    ql_strlcpy(sw->text, sw->texts[i], sizeof sw->text);
}

int ql_sweep_find_text(const ql_sweep *sw, const char *text)
{
    for (int i = 0; i < sw->n_texts; i++)
        if (strcmp(sw->texts[i], text) == 0)
            return i;
    return -1;
}

/* ---------------------------------------------------------------- the inputs and the model */

/* "file:line: " of an axis of a point (the sweep file alone for a default). */
static void point_at(const ql_sweep *sw, const ql_sweep_point *pt, ql_axis a, char *buf,
                     size_t size)
{
    int line = pt->line[a] ? pt->line[a] : pt->line[QL_AXIS_WEIGHT_TYPE];
    if (line)
        snprintf(buf, size, "%s:%d: ", sw->path, line);
    else
        snprintf(buf, size, "%s: ", sw->path);
}

static bool axis_is(const ql_config *c, ql_axis a, const char *value)
{
    char v[QL_CONFIG_VALUE_MAX];
    ql_config_axis_string(c, a, v, sizeof v);
    return strcmp(v, value) == 0;
}

bool ql_sweep_path(const ql_sweep *sw, const char *path, char *out, size_t size)
{
    return ql_data_join(sw->dir, path, out, size);
}

ql_status ql_sweep_resolve(const ql_sweep *sw, ql_sweep_input which, char *path, size_t size,
                           const ql_data_entry **entry, ql_error *err)
{
    const bool model = which == QL_SWEEP_MODEL;
    ql_status st = ql_data_resolve_in(sw->dir, model ? "model" : "text",
                                      model ? sw->model : sw->text, path, size, entry, err);
    if (st)
        ql_error_prefix(err, "%s:%d: %s: ", sw->path, model ? sw->model_line : sw->text_line,
                        model ? "model" : "text");
    return st;
}

ql_status ql_sweep_check_inputs(const ql_sweep *sw, ql_error *err)
{
    char path[QL_PATH_MAX];
    ql_status st = QL_OK;
    if (!ql_synth_is_spec(sw->model) &&
        (st = ql_data_find_in(sw->dir, "model", sw->model, path, sizeof path, err)))
        return ql_error_prefix(err, "%s:%d: model: ", sw->path, sw->model_line);
    for (int t = 0; t < sw->n_texts; t++)
        if ((st = ql_data_find_in(sw->dir, "text", sw->texts[t], path, sizeof path, err)))
            return ql_error_prefix(err, "%s:%d: text: ", sw->path, sw->text_line);
    /* Each importance matrix once: a file, or the text of a calib: one. */
    for (size_t i = 0; i < sw->n_points && !st; i++) {
        const ql_config *c = &sw->points[i].config;
        bool seen = c->imatrix_kind == QL_IMATRIX_NONE;
        for (size_t j = 0; j < i && !seen; j++)
            seen = sw->points[j].config.imatrix_kind == c->imatrix_kind &&
                   strcmp(sw->points[j].config.imatrix, c->imatrix) == 0;
        if (seen)
            continue;
        const bool calib = c->imatrix_kind == QL_IMATRIX_CALIB;
        if ((st = ql_data_find_in(sw->dir, calib ? "text" : "file", c->imatrix, path, sizeof path,
                                  err))) {
            char at[QL_PATH_MAX + 32];
            point_at(sw, &sw->points[i], QL_AXIS_IMATRIX, at, sizeof at);
            if (calib)
                ql_error_prefix(err, "%simatrix calib:%s: ", at, c->imatrix);
            else
                ql_error_prefix(err, "%simatrix: ", at);
        }
    }
    return st;
}

/* One config against the model: its plan, the explicit requests that would fall
 * back, the rules that match nothing. */
static ql_status check_point(const ql_sweep *sw, const ql_sweep_point *pt, const ql_gguf *model,
                             ql_error *err)
{
    const ql_config *c = &pt->config;
    char at[QL_PATH_MAX + 32], v[QL_CONFIG_VALUE_MAX];
    ql_quant_overrides *rules = NULL;
    ql_quant_plan *plan = NULL;
    bool *matched = NULL;
    if (c->weight_file[0])
        return QL_OK; /* no plan: the file's tensors (ql_sweep_check_files) */
    ql_status st = ql_config_overrides(c, &rules, err);
    if (st != QL_OK)
        return st;
    ql_quant_config qc = ql_config_quant_request(c, rules, c->imatrix_kind != QL_IMATRIX_NONE);
    if ((st = ql_quant_plan_build(model, &qc, &plan, err)) != QL_OK) {
        point_at(sw, pt, QL_AXIS_WEIGHT_TYPE, at, sizeof at);
        ql_config_axis_string(c, QL_AXIS_WEIGHT_TYPE, v, sizeof v);
        ql_error_prefix(err, "%sweight_type %s: ", at, v);
        goto out;
    }
    const int n_rules = ql_quant_overrides_count(rules);
    if (n_rules && !(matched = calloc((size_t)n_rules, sizeof *matched))) {
        st = ql_error_set(err, QL_ENOMEM, "out of memory");
        goto out;
    }
    const bool head_same = axis_is(c, QL_AXIS_HEAD_TYPE, "same");
    const bool embd_same = axis_is(c, QL_AXIS_EMBD_TYPE, "same");
    bool has_output = false;
    for (int64_t i = 0; i < plan->n; i++)
        has_output |= strcmp(plan->entries[i].name, "output.weight") == 0;
    for (int64_t i = 0; i < plan->n && !st; i++) {
        const ql_quant_plan_entry *e = &plan->entries[i];
        if (e->role != QL_ROLE_WEIGHT && e->role != QL_ROLE_HEAD && e->role != QL_ROLE_EMBD)
            continue;
        /* Who asked for this tensor's type: head_type / embd_type (the embeddings of a
         * model without output.weight are its head too, quant_policy.h), else the
         * first rule that matches, else the weight type or the mix. */
        ql_axis by = QL_AXIS_COUNT;
        int rule = -1;
        if (e->role == QL_ROLE_EMBD && !embd_same)
            by = QL_AXIS_EMBD_TYPE;
        else if ((e->role == QL_ROLE_HEAD || (e->role == QL_ROLE_EMBD && !has_output)) &&
                 !head_same)
            by = QL_AXIS_HEAD_TYPE;
        else if ((st = ql_quant_overrides_match(rules, e->name, &rule, err)) != QL_OK)
            break;
        else if (rule >= 0) {
            by = QL_AXIS_TENSOR_TYPES;
            matched[rule] = true;
        }
        if (by == QL_AXIS_COUNT || e->fallback != QL_FALLBACK_ROW_LENGTH)
            continue;
        point_at(sw, pt, by, at, sizeof at);
        if (by == QL_AXIS_TENSOR_TYPES)
            snprintf(v, sizeof v, "tensor_types rule '%s'", ql_quant_overrides_rule(rules, rule));
        else
            snprintf(v, sizeof v, "%s %s", ql_axis_name(by), ql_type_name(e->requested));
        st = ql_error_set(err, QL_EFORMAT,
                          "%s%s: tensor '%s' of %s would fall back: %s (choose a type whose "
                          "blocks divide its rows)",
                          at, v, e->name, model->path, e->reason);
    }
    for (int r = 0; r < n_rules && !st; r++)
        if (!matched[r]) {
            point_at(sw, pt, QL_AXIS_TENSOR_TYPES, at, sizeof at);
            st = ql_error_set(err, QL_EFORMAT,
                              "%stensor_types rule '%s' matches no tensor of %s whose type a "
                              "rule may set",
                              at, ql_quant_overrides_rule(rules, r), model->path);
        }
out:
    free(matched);
    ql_quant_plan_free(plan);
    ql_quant_overrides_free(rules);
    return st;
}

ql_status ql_sweep_check_model(const ql_sweep *sw, const ql_gguf *model, ql_error *err)
{
    for (size_t i = 0; i < sw->n_points; i++) {
        ql_status st = check_point(sw, &sw->points[i], model, err);
        if (st != QL_OK)
            return st;
    }
    return QL_OK;
}

ql_status ql_sweep_check_files(const ql_sweep *sw, const ql_model *ref, ql_error *err)
{
    for (size_t i = 0; i < sw->n_points; i++) {
        const ql_sweep_point *pt = &sw->points[i];
        const ql_config *c = &pt->config;
        bool seen = false; /* each file once */
        for (size_t j = 0; j < i && !seen && c->weight_file[0]; j++)
            seen = strcmp(sw->points[j].config.weight_file_open, c->weight_file_open) == 0;
        if (!c->weight_file[0] || seen)
            continue;
        char at[QL_PATH_MAX + 32];
        point_at(sw, pt, QL_AXIS_WEIGHT_TYPE, at, sizeof at);
        ql_model *m = NULL;
        ql_status st = ql_model_load(&m, c->weight_file_open, err);
        if (!st && (st = ql_model_check_same_shape(ref, m, err)) != QL_OK)
            ql_error_prefix(err, "not a quantization of the sweep's model: ");
        ql_model_free(m);
        if (st != QL_OK)
            return ql_error_prefix(err, "%sweight_type file:%s: ", at, c->weight_file);
    }
    return QL_OK;
}

/* ---------------------------------------------------------------- shards */

/* One job-array variable v (NULL: not set) named name. */
static ql_status array_int(const char *name, const char *v, bool required, int dflt, int *out,
                           ql_error *err)
{
    if (!v || !*v) {
        if (required)
            return ql_error_set(err, QL_EINVAL,
                                "--shard auto: %s is not set (not inside a Slurm job array?)",
                                name);
        *out = dflt;
        return QL_OK;
    }
    if (!ql_parse_int(v, out))
        return ql_error_set(err, QL_EINVAL, "--shard auto: %s='%s' is not an integer", name, v);
    return QL_OK;
}

ql_status ql_shard_parse(const char *spec, const ql_shard_array *array, ql_shard *out,
                         ql_error *err)
{
    int k, n;
    if (strcmp(spec, "auto") == 0) {
        static const ql_shard_array none;
        const ql_shard_array *a = array ? array : &none;
        int id, min, step;
        ql_status st;
        if ((st = array_int("SLURM_ARRAY_TASK_ID", a->task_id, true, 0, &id, err)) ||
            (st = array_int("SLURM_ARRAY_TASK_COUNT", a->task_count, true, 0, &n, err)) ||
            (st = array_int("SLURM_ARRAY_TASK_MIN", a->task_min, false, 0, &min, err)) ||
            (st = array_int("SLURM_ARRAY_TASK_STEP", a->task_step, false, 1, &step, err)))
            return st;
        if (step < 1 || id < min || (id - min) % step != 0)
            return ql_error_set(err, QL_EINVAL,
                                "--shard auto: task id %d is not min %d + a multiple of step %d",
                                id, min, step);
        k = (id - min) / step;
        if (n < 1 || k >= n)
            return ql_error_set(err, QL_EINVAL,
                                "--shard auto: task %d of SLURM_ARRAY_TASK_COUNT=%d is out of "
                                "range (array ids must be contiguous from the minimum)",
                                k, n);
    } else {
        char buf[64];
        const char *slash = strchr(spec, '/');
        size_t kl = slash ? (size_t)(slash - spec) : 0;
        if (!slash || kl >= sizeof buf)
            return ql_error_set(err, QL_EINVAL, "--shard '%s' is not K/N or auto", spec);
        memcpy(buf, spec, kl);
        buf[kl] = '\0';
        if (!ql_parse_int(buf, &k) || !ql_parse_int(slash + 1, &n))
            return ql_error_set(err, QL_EINVAL, "--shard '%s' is not K/N or auto", spec);
        if (n < 1 || k < 0 || k >= n)
            return ql_error_set(err, QL_EINVAL, "--shard %s: need 0 <= K < N", spec);
    }
    out->index = k;
    out->count = n;
    return QL_OK;
}

bool ql_shard_keeps(const ql_shard *s, size_t i)
{
    return i % (size_t)s->count == (size_t)s->index;
}
