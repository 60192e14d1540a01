/* A config's public face over the axis table (config_impl.h): defaults, setting and copying
 * an axis, the configs columns, and the canonical form, its hash and short labels. */
#include "experiment/config_impl.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/suggest.h"
#include "base/util.h"

const ql_axis_info *ql_axis_get(ql_axis axis)
{
    QL_ASSERT(axis >= 0 && axis < QL_AXIS_COUNT);
    return &config_axes[axis].info;
}

const char *ql_axis_name(ql_axis axis)
{
    return ql_axis_get(axis)->name;
}

bool ql_axis_lookup(const char *name, ql_axis *out)
{
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        if (strcmp(name, config_axis_names[a]) == 0) {
            *out = (ql_axis)a;
            return true;
        }
    return false;
}

int ql_axis_default_string(ql_axis axis, char *buf, size_t size)
{
    ql_config d;
    ql_config_init(&d);
    return ql_config_axis_string(&d, axis, buf, size);
}

size_t ql_config_columns(const ql_config_column **out)
{
    static ql_config_column list[CONFIG_N_COLUMNS];
    for (size_t i = 0; i < CONFIG_N_COLUMNS; i++)
        list[i] = config_columns[i].col;
    *out = list;
    return CONFIG_N_COLUMNS;
}

void ql_config_column_value(const ql_config *c, size_t i, char *buf, size_t size, double *number)
{
    QL_ASSERT(i < CONFIG_N_COLUMNS && size > 0);
    buf[0] = '\0';
    *number = (double)NAN;
    if (config_columns[i].number) {
        *number = config_columns[i].number(c);
        return;
    }
    ql_config_axis_string(c, config_columns[i].col.axis, buf, size);
    /* A REAL axis's canonical value is its number's shortest exact spelling. */
    if (config_columns[i].col.type == QL_COLUMN_REAL)
        *number = strtod(buf, NULL);
}

/* ---------------------------------------------------------------- public */

void ql_config_init(ql_config *c)
{
    memset(c, 0, sizeof *c);
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        ql_status st = config_axes[a].parse(c, config_axes[a].info.default_value, NULL);
        QL_ASSERT(st == QL_OK);
    }
}

ql_status ql_config_set(ql_config *c, ql_axis axis, const char *v, ql_error *err)
{
    QL_ASSERT(axis >= 0 && axis < QL_AXIS_COUNT);
    return config_axes[axis].parse(c, v, err);
}

void ql_config_copy_axis(ql_config *dst, const ql_config *src, ql_axis axis)
{
    QL_ASSERT(axis >= 0 && axis < QL_AXIS_COUNT);
    memcpy((char *)dst + config_axes[axis].offset, (const char *)src + config_axes[axis].offset, config_axes[axis].size);
}

ql_type ql_config_head_type(const ql_config *c)
{
    return c->head_type == QL_TYPE_SAME ? c->weight_type : c->head_type;
}

ql_type ql_config_embd_type(const ql_config *c)
{
    return c->embd_type == QL_TYPE_SAME ? c->weight_type : c->embd_type;
}

ql_kv_type ql_config_kv_type(const ql_config *c)
{
    if (c->kv_type != QL_KV_AUTO)
        return c->kv_type;
    /* llama.cpp's default K/V cache is f16: a native config reproduces its numbers. */
    return c->act_mode == QL_ACT_NATIVE ? QL_KV_F16 : QL_KV_F32;
}

int ql_config_axis_string(const ql_config *c, ql_axis axis, char *buf, size_t size)
{
    QL_ASSERT(axis >= 0 && axis < QL_AXIS_COUNT);
    return config_axes[axis].print(c, buf, size);
}

/* Whether the canonical form leaves the axis out: flagged, and at its default. */
static bool omitted(const ql_config *c, ql_axis axis, const char *value)
{
    if (!(config_axes[axis].info.flags & QL_AXIS_OMIT_DEFAULT))
        return false;
    char dflt[QL_CONFIG_VALUE_MAX];
    ql_axis_default_string(axis, dflt, sizeof dflt);
    return strcmp(value, dflt) == 0;
}

int ql_config_to_string(const ql_config *c, char *buf, size_t size)
{
    int total = 0;
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        char val[QL_CONFIG_VALUE_MAX];
        ql_config_axis_string(c, (ql_axis)a, val, sizeof val);
        if (omitted(c, (ql_axis)a, val))
            continue;
        size_t off = (size_t)total < size ? (size_t)total : size;
        total += snprintf(buf + off, size - off, "%s%s=%s", total ? " " : "", config_axis_names[a], val);
    }
    return total;
}

void ql_config_hash(const ql_config *c, char out[65])
{
    char text[QL_CONFIG_TEXT_MAX];
    int n = ql_config_to_string(c, text, sizeof text);
    QL_ASSERT(n > 0 && (size_t)n < sizeof text);
    ql_sha256_hex(text, (size_t)n, out);
}

ql_status ql_config_from_string(const char *s, ql_config *c, ql_error *err)
{
    ql_config_init(c);
    bool seen[QL_AXIS_COUNT] = {false};
    const char *p = s;
    for (;;) {
        while (*p && isspace((unsigned char)*p))
            p++;
        if (!*p)
            break;
        const char *end = p;
        while (*end && !isspace((unsigned char)*end))
            end++;
        char tok[QL_CONFIG_VALUE_MAX];
        size_t len = (size_t)(end - p);
        if (len >= sizeof tok)
            return ql_error_set(err, QL_EFORMAT, "config item '%.40s...' is too long", p);
        memcpy(tok, p, len);
        tok[len] = '\0';
        p = end;
        char *eq = strchr(tok, '=');
        if (!eq)
            return ql_error_set(err, QL_EFORMAT, "config item '%s' is not axis=value", tok);
        *eq = '\0';
        ql_axis axis;
        if (!ql_axis_lookup(tok, &axis)) {
            const char *near = ql_closest_name(tok, config_axis_names, QL_AXIS_COUNT);
            if (near)
                return ql_error_set(err, QL_EFORMAT, "unknown axis '%s'; did you mean '%s'?", tok,
                                    near);
            return ql_error_set(err, QL_EFORMAT, "unknown axis '%s'", tok);
        }
        if (seen[axis])
            return ql_error_set(err, QL_EFORMAT, "axis '%s' given twice", tok);
        seen[axis] = true;
        ql_status st = ql_config_set(c, axis, eq + 1, err);
        if (st != QL_OK)
            return st;
    }
    return QL_OK;
}

void ql_config_short_label(const ql_config *c, const bool varies[QL_AXIS_COUNT], char *buf,
                           size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        if (a != QL_AXIS_WEIGHT_TYPE && !varies[a])
            continue;
        char v[QL_CONFIG_VALUE_MAX];
        ql_config_axis_string(c, (ql_axis)a, v, sizeof v);
        /* A file by its name: the path and hash are the canonical form's. */
        if (a == QL_AXIS_WEIGHT_TYPE && c->weight_file[0]) {
            const char *base = strrchr(c->weight_file, '/');
            snprintf(v, sizeof v, CONFIG_FILE_PREFIX "%s", base ? base + 1 : c->weight_file);
        }
        /* An axis added later goes without saying at its default, as in the canonical form. */
        if (a != QL_AXIS_WEIGHT_TYPE && omitted(c, (ql_axis)a, v))
            continue;
        int k =
            a == QL_AXIS_WEIGHT_TYPE
                ? snprintf(buf + used, size - used, "%s%s", used ? " " : "", v)
                : snprintf(buf + used, size - used, "%s%s=%s", used ? " " : "", config_axis_names[a], v);
        if (k < 0 || (size_t)k >= size - used)
            break;
        used += (size_t)k;
    }
}
