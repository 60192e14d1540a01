#include "experiment/sweep.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* ---------------------------------------------------------------- keys */

typedef enum {
    KEY_NAME,
    KEY_MODEL,
    KEY_TEXT,
    KEY_CTX,
    KEY_CHUNKS,
    KEY_THREADS,
    KEY_COUNT
} sweep_key;

static const char *const key_names[KEY_COUNT] = {"name", "model",  "text",
                                                 "ctx",  "chunks", "threads"};

/* Everything a [sweep] key may be, for "did you mean" (keys then axes). */
static size_t all_key_names(const char **out)
{
    size_t n = 0;
    for (int k = 0; k < KEY_COUNT; k++)
        out[n++] = key_names[k];
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

/* One axis as the file gives it: its values (each parsed into a config that
 * differs from the defaults only in that axis) and where. */
typedef struct {
    ql_config *values;
    int n;
    int line; /* line of the key; 0 = not given */
    bool in_grid;
} axis_list;

typedef struct {
    const char *path;
    unsigned flags;
    ql_sweep *sw;
    ql_error *err;
    int key_line[KEY_COUNT];
    axis_list axes[QL_AXIS_COUNT];
    int sweep_line; /* line of the [sweep] header; 0 = absent */
    int grid_line;
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
    case KEY_TEXT: {
        char *dst = key == KEY_MODEL ? sw->model : sw->text;
        if (strlen(v) >= QL_PATH_MAX)
            return fail(p, line, QL_EFORMAT, "%s '%.64s...' is too long", key_names[key], v);
        ql_strlcpy(dst, v, QL_PATH_MAX);
        return QL_OK;
    }
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
    case KEY_COUNT:
        break;
    }
    QL_ASSERT(!"bad key");
    return QL_EINVAL;
}

static ql_status set_axis(parser *p, int line, ql_axis axis, bool in_grid, char **tok, int n)
{
    axis_list *al = &p->axes[axis];
    al->values = calloc((size_t)n, sizeof *al->values);
    if (!al->values)
        return fail(p, line, QL_ENOMEM, "out of memory");
    al->line = line;
    al->in_grid = in_grid;
    for (int i = 0; i < n; i++) {
        ql_config *c = &al->values[i];
        ql_config_init(c);
        ql_status st = ql_config_set(c, axis, tok[i], p->err);
        if (st != QL_OK)
            return located(p, line, st);
        if (!(p->flags & QL_SWEEP_ALLOW_UNIMPLEMENTED)) {
            st = ql_config_check_axis(c, axis, p->err);
            if (st != QL_OK)
                return located(p, line, st);
        }
        al->n++;
    }
    return QL_OK;
}

/* ---------------------------------------------------------------- lines */

enum { SECTION_NONE, SECTION_SWEEP, SECTION_GRID };

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
    bool is_axis = ql_axis_lookup(key, &axis);
    bool is_key = !is_axis && lookup_key(key, &sk);
    const char *sect = section == SECTION_SWEEP ? "[sweep]" : "[grid]";
    if (!is_axis && !is_key) {
        const char *names[KEY_COUNT + QL_AXIS_COUNT];
        size_t nn = all_key_names(names);
        const char *near = section == SECTION_SWEEP
                               ? ql_closest_name(key, names, nn)
                               : ql_closest_name(key, names + KEY_COUNT, QL_AXIS_COUNT);
        if (near)
            return fail(p, lineno, QL_EFORMAT, "unknown key '%s' in %s; did you mean '%s'?", key,
                        sect, near);
        return fail(p, lineno, QL_EFORMAT, "unknown key '%s' in %s", key, sect);
    }
    if (is_key) {
        if (section == SECTION_GRID)
            return fail(p, lineno, QL_EFORMAT, "'%s' is not an axis; it belongs in [sweep]", key);
        if (p->key_line[sk])
            return fail(p, lineno, QL_EFORMAT, "duplicate key '%s' (first given on line %d)", key,
                        p->key_line[sk]);
        if (n != 1)
            return fail(p, lineno, QL_EFORMAT, "'%s' takes one value, got %d: '%s ...'", key, n,
                        tok[0]);
        p->key_line[sk] = lineno;
        return set_scalar(p, lineno, sk, tok[0]);
    }
    axis_list *al = &p->axes[axis];
    if (al->line) {
        if (al->in_grid == (section == SECTION_GRID))
            return fail(p, lineno, QL_EFORMAT, "duplicate key '%s' (first given on line %d)", key,
                        al->line);
        return fail(p, lineno, QL_EFORMAT,
                    "axis '%s' is given in both [sweep] and [grid] (lines "
                    "%d and %d)",
                    key, al->line < lineno ? al->line : lineno,
                    al->line < lineno ? lineno : al->line);
    }
    if (section == SECTION_SWEEP && n != 1)
        return fail(p, lineno, QL_EFORMAT,
                    "axis '%s' in [sweep] takes one value, got %d (put lists in [grid])", key, n);
    return set_axis(p, lineno, axis, section == SECTION_GRID, tok, n);
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
                if (p->grid_line)
                    return fail(p, lineno, QL_EFORMAT,
                                "duplicate section [grid] (first on line %d)", p->grid_line);
                p->grid_line = lineno;
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
    if (!p->axes[QL_AXIS_WEIGHT_TYPE].line)
        return fail(p, p->grid_line ? p->grid_line : p->sweep_line, QL_EFORMAT,
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

static ql_status expand(parser *p)
{
    ql_sweep *sw = p->sw;
    size_t total = 1;
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        int n = p->axes[a].n ? p->axes[a].n : 1;
        sw->n_values[a] = p->axes[a].n;
        total *= (size_t)n; /* at most 64^8 = 2^48: no overflow in size_t */
    }
    if (total > QL_SWEEP_MAX_CONFIGS)
        return fail(p, p->grid_line ? p->grid_line : p->sweep_line, QL_EFORMAT,
                    "the grid expands to %zu configs, more than %d", total, QL_SWEEP_MAX_CONFIGS);
    sw->points = calloc(total, sizeof *sw->points);
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
    int idx[QL_AXIS_COUNT] = {0};
    for (size_t it = 0; it < total; it++) {
        ql_config c;
        ql_config_init(&c);
        for (int a = 0; a < QL_AXIS_COUNT; a++)
            if (p->axes[a].n)
                ql_config_copy_axis(&c, &p->axes[a].values[idx[a]], (ql_axis)a);
        /* A calibration context equal to the run's is the default: one spelling. */
        if (c.imatrix_kind == QL_IMATRIX_CALIB && c.imatrix_ctx == sw->ctx)
            c.imatrix_ctx = 0;

        ql_axis bad = QL_AXIS_WEIGHT_TYPE;
        st = ql_config_validate(&c, &bad, p->err);
        if (st != QL_OK) {
            int line = p->axes[bad].line ? p->axes[bad].line : p->axes[QL_AXIS_WEIGHT_TYPE].line;
            st = located(p, line, st);
            goto out;
        }
        if (!(p->flags & QL_SWEEP_ALLOW_UNIMPLEMENTED)) {
            for (int a = 0; a < QL_AXIS_COUNT; a++) {
                st = ql_config_check_axis(&c, (ql_axis)a, p->err);
                if (st != QL_OK) {
                    /* Only kv_type = auto can fail here (through act_mode). */
                    int line = p->axes[a].line ? p->axes[a].line : p->axes[QL_AXIS_ACT_MODE].line;
                    st = located(p, line ? line : p->sweep_line, st);
                    goto out;
                }
            }
        }
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
            slots[h] = sw->n_points;
        }
        /* Odometer: the last axis turns fastest. */
        for (int a = QL_AXIS_COUNT - 1; a >= 0; a--) {
            int n = p->axes[a].n ? p->axes[a].n : 1;
            if (++idx[a] < n)
                break;
            idx[a] = 0;
        }
    }
out:
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
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        free(p.axes[a].values);
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
}

/* ---------------------------------------------------------------- shards */

static ql_status env_int(const char *name, bool required, int dflt, int *out, ql_error *err)
{
    const char *v = getenv(name);
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

ql_status ql_shard_parse(const char *spec, ql_shard *out, ql_error *err)
{
    int k, n;
    if (strcmp(spec, "auto") == 0) {
        int id, min, step;
        ql_status st;
        if ((st = env_int("SLURM_ARRAY_TASK_ID", true, 0, &id, err)) ||
            (st = env_int("SLURM_ARRAY_TASK_COUNT", true, 0, &n, err)) ||
            (st = env_int("SLURM_ARRAY_TASK_MIN", false, 0, &min, err)) ||
            (st = env_int("SLURM_ARRAY_TASK_STEP", false, 1, &step, err)))
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
