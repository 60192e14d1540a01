/* The grammar of each config axis: how a value is parsed, printed in canonical form and
 * classed for the capability table; and the axis table that binds them (config_impl.h). */
#include "experiment/config_impl.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"

/* ---------------------------------------------------------------- names */

static const char *const act_names[QL_ACT_COUNT] = {"f32",  "native", "q8_0",
                                                    "q8_1", "q8_K",   "q8x2"};

static const char *const kv_names[QL_KV_COUNT] = {"auto", "f32", "f16", "q8_0", "q4_0"};

const char *ql_act_mode_name(ql_act_mode mode)
{
    QL_ASSERT(mode >= 0 && mode < QL_ACT_COUNT);
    return act_names[mode];
}

const char *ql_kv_type_name(ql_kv_type kv)
{
    QL_ASSERT(kv >= 0 && kv < QL_KV_COUNT);
    return kv_names[kv];
}

/* ---------------------------------------------------------------- helpers */

bool ql_config_is_weight_type(const ql_type_traits *t, const char **why)
{
    if (why)
        *why = t->not_weight;
    return ql_type_is_weight(t);
}

/* Every weight type name, in table order, plus `same` when allowed. */
static size_t weight_type_names(const char **names, size_t max, bool with_same)
{
    const ql_type_traits *all[128];
    int n = ql_type_list(all, 128);
    size_t k = 0;
    for (int i = 0; i < n && k < max; i++)
        if (ql_config_is_weight_type(all[i], NULL))
            names[k++] = all[i]->name;
    if (with_same && k < max)
        names[k++] = "same";
    return k;
}

static ql_status parse_type(const char *axis, const char *v, bool allow_same, ql_type *out,
                            ql_error *err)
{
    if (allow_same && strcasecmp(v, "same") == 0) {
        *out = QL_TYPE_SAME;
        return QL_OK;
    }
    if (!allow_same && strcasecmp(v, "same") == 0)
        return ql_error_set(err, QL_EFORMAT, "%s: 'same' is only valid for head_type and embd_type",
                            axis);
    const ql_type_traits *t = ql_type_by_name(v);
    if (!t) {
        const char *names[128];
        size_t n = weight_type_names(names, 128, allow_same);
        const char *near = ql_closest_name(v, names, n);
        if (near)
            return ql_error_set(err, QL_EFORMAT, "%s: unknown type '%s'; did you mean '%s'?", axis,
                                v, near);
        return ql_error_set(err, QL_EFORMAT,
                            "%s: unknown type '%s' (valid: the GGUF weight types F32 F16 BF16 "
                            "Q8_0 Q4_0 ... IQ1_M, INT8_ROW, Q8_0_XC%s)",
                            axis, v, allow_same ? ", same" : "");
    }
    const char *why = NULL;
    if (!ql_config_is_weight_type(t, &why))
        return ql_error_set(err, QL_EFORMAT, "%s: %s is %s", axis, t->name, why);
    *out = t->type;
    return QL_OK;
}

static bool is_plain_token(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (isspace(*p) || iscntrl(*p) || *p == '"')
            return false;
    return true;
}

static ql_status parse_calib(ql_config *c, const char *v, ql_error *err)
{
    /* calib:NAME[,ctx=N][,chunks=N] */
    const char *name = v + strlen("calib:");
    const char *comma = strchr(name, ',');
    size_t nlen = comma ? (size_t)(comma - name) : strlen(name);
    if (nlen == 0)
        return ql_error_set(err, QL_EFORMAT, "imatrix: '%s' names no dataset (calib:<dataset>)", v);
    if (nlen >= sizeof c->imatrix)
        return ql_error_set(err, QL_EFORMAT, "imatrix: dataset name in '%s' is too long", v);
    memcpy(c->imatrix, name, nlen);
    c->imatrix[nlen] = '\0';
    c->imatrix_ctx = 0;
    c->imatrix_chunks = 0;
    bool have_ctx = false, have_chunks = false;
    while (comma) {
        const char *opt = comma + 1;
        comma = strchr(opt, ',');
        size_t olen = comma ? (size_t)(comma - opt) : strlen(opt);
        char buf[64];
        if (olen >= sizeof buf)
            return ql_error_set(err, QL_EFORMAT, "imatrix: bad option in '%s'", v);
        memcpy(buf, opt, olen);
        buf[olen] = '\0';
        char *eq = strchr(buf, '=');
        if (!eq)
            return ql_error_set(err, QL_EFORMAT,
                                "imatrix: option '%s' in '%s' is not ctx=N or chunks=N", buf, v);
        *eq = '\0';
        const char *val = eq + 1;
        int n;
        if (strcmp(buf, "ctx") == 0) {
            if (have_ctx)
                return ql_error_set(err, QL_EFORMAT, "imatrix: ctx given twice in '%s'", v);
            if (!ql_parse_int(val, &n) || n < QL_CTX_MIN || n > QL_CTX_MAX)
                return ql_error_set(err, QL_EFORMAT,
                                    "imatrix: ctx '%s' in '%s' is not an integer in %d..%d", val, v,
                                    QL_CTX_MIN, QL_CTX_MAX);
            c->imatrix_ctx = n;
            have_ctx = true;
        } else if (strcmp(buf, "chunks") == 0) {
            if (have_chunks)
                return ql_error_set(err, QL_EFORMAT, "imatrix: chunks given twice in '%s'", v);
            if (!ql_parse_int(val, &n) || n < 0)
                return ql_error_set(err, QL_EFORMAT,
                                    "imatrix: chunks '%s' in '%s' is not an integer >= 0 (0 = all)",
                                    val, v);
            c->imatrix_chunks = n;
            have_chunks = true;
        } else {
            return ql_error_set(err, QL_EFORMAT,
                                "imatrix: unknown option '%s' in '%s' (options: ctx=N, chunks=N)",
                                buf, v);
        }
    }
    c->imatrix_kind = QL_IMATRIX_CALIB;
    return QL_OK;
}

static ql_status parse_imatrix(ql_config *c, const char *v, ql_error *err)
{
    if (!is_plain_token(v) || !*v)
        return ql_error_set(err, QL_EFORMAT,
                            "imatrix: '%s' contains whitespace, quotes or control characters", v);
    if (strcasecmp(v, "none") == 0) {
        c->imatrix_kind = QL_IMATRIX_NONE;
        c->imatrix[0] = '\0';
        c->imatrix_ctx = c->imatrix_chunks = 0;
        return QL_OK;
    }
    if (strncmp(v, "calib:", 6) == 0)
        return parse_calib(c, v, err);
    if (strlen(v) >= sizeof c->imatrix)
        return ql_error_set(err, QL_EFORMAT, "imatrix: path '%.64s...' is too long (max %d)", v,
                            QL_CONFIG_IMATRIX_MAX - 1);
    c->imatrix_kind = QL_IMATRIX_FILE;
    ql_strlcpy(c->imatrix, v, sizeof c->imatrix);
    c->imatrix_ctx = c->imatrix_chunks = 0;
    return QL_OK;
}

/* A byte count above 2^53 would not survive a round trip through a double. */
#define BUDGET_BYTES_MAX ((int64_t)1 << 53)
/* The widest weight format is F32. */
#define BUDGET_BPW_MAX 32.0

static ql_status parse_budget(ql_config *c, const char *v, ql_error *err)
{
    if (strcasecmp(v, "none") == 0) {
        c->budget_kind = QL_BUDGET_NONE;
        c->budget_bytes = 0;
        c->budget_bpw = 0.0;
        return QL_OK;
    }
    if (strncasecmp(v, "bpw:", 4) == 0) {
        double x;
        if (!ql_parse_double(v + 4, &x) || !(x > 0.0) || x > BUDGET_BPW_MAX)
            return ql_error_set(err, QL_EFORMAT,
                                "budget: '%s' is not bpw:X with 0 < X <= 32 bits per weight", v);
        c->budget_kind = QL_BUDGET_BPW;
        c->budget_bpw = x;
        c->budget_bytes = 0;
        return QL_OK;
    }
    /* A type or mix: the size of this model quantized so. */
    if (isalpha((unsigned char)v[0])) {
        ql_config t;
        ql_config_init(&t);
        ql_error e2;
        if (ql_config_set(&t, QL_AXIS_WEIGHT_TYPE, v, &e2) == QL_OK &&
            strncasecmp(v, "file:", 5) != 0) {
            char name[QL_CONFIG_VALUE_MAX];
            ql_config_axis_string(&t, QL_AXIS_WEIGHT_TYPE, name, sizeof name);
            if (strlen(name) < sizeof c->budget_like) {
                c->budget_kind = QL_BUDGET_LIKE;
                ql_strlcpy(c->budget_like, name, sizeof c->budget_like);
                c->budget_bytes = 0;
                c->budget_bpw = 0.0;
                return QL_OK;
            }
        }
    }
    /* A number, optionally followed by a binary unit. */
    size_t len = strlen(v), ulen = 0;
    while (ulen < len && isalpha((unsigned char)v[len - 1 - ulen]))
        ulen++;
    char num[64];
    if (len - ulen == 0 || len - ulen >= sizeof num)
        return ql_error_set(err, QL_EFORMAT,
                            "budget: '%s' is not none, a byte count (4718592, 512MiB, 4.5GiB), "
                            "bpw:X or a type or mix (Q4_K_M)",
                            v);
    memcpy(num, v, len - ulen);
    num[len - ulen] = '\0';
    const char *unit = v + len - ulen;
    double scale;
    if (ulen == 0)
        scale = 1.0;
    else if (strcasecmp(unit, "KiB") == 0)
        scale = 1024.0;
    else if (strcasecmp(unit, "MiB") == 0)
        scale = 1024.0 * 1024.0;
    else if (strcasecmp(unit, "GiB") == 0)
        scale = 1024.0 * 1024.0 * 1024.0;
    else if (strcasecmp(unit, "KB") == 0 || strcasecmp(unit, "MB") == 0 ||
             strcasecmp(unit, "GB") == 0)
        return ql_error_set(err, QL_EFORMAT,
                            "budget: unit '%s' in '%s' is ambiguous; use KiB, MiB or GiB (powers "
                            "of 1024) or a plain byte count",
                            unit, v);
    else
        return ql_error_set(err, QL_EFORMAT,
                            "budget: unknown unit '%s' in '%s' (units: KiB, MiB, GiB)", unit, v);
    int64_t bytes;
    if (ulen == 0) {
        if (!ql_parse_i64(num, &bytes))
            return ql_error_set(err, QL_EFORMAT,
                                "budget: '%s' is not a whole number of bytes (or give a unit: "
                                "KiB, MiB, GiB)",
                                v);
    } else {
        double x;
        if (!ql_parse_double(num, &x))
            return ql_error_set(err, QL_EFORMAT, "budget: '%s' in '%s' is not a number", num, v);
        double b = floor(x * scale);
        if (!(b >= 1.0) || b > (double)BUDGET_BYTES_MAX)
            return ql_error_set(err, QL_EFORMAT, "budget: '%s' is out of range (1 byte .. 2^53)",
                                v);
        bytes = (int64_t)b;
    }
    if (bytes < 1 || bytes > BUDGET_BYTES_MAX)
        return ql_error_set(err, QL_EFORMAT, "budget: '%s' is out of range (1 byte .. 2^53)", v);
    c->budget_kind = QL_BUDGET_BYTES;
    c->budget_bytes = bytes;
    c->budget_bpw = 0.0;
    return QL_OK;
}

/* ---------------------------------------------------------------- the axes
 *
 * What each axis of QL_AXES means: parse_<name> reads one value (names
 * case-insensitive) into its fields, print_<name> writes its canonical value, and
 * class_<name> names the capability-table class of its value. */

/* The prefix that names llama-quantize's file type where a type has the same name. */
#define MIX_PREFIX "mix:"

/* Every llama-quantize file type name, for "did you mean". */
static size_t mix_names(const char **names, size_t max)
{
    const ql_quant_mix *all[QL_FTYPE_LIMIT];
    int n = ql_quant_mix_list(all, QL_FTYPE_LIMIT);
    size_t k = 0;
    for (int i = 0; i < n && k < max; i++)
        names[k++] = all[i]->name;
    return k;
}

static void set_mix(ql_config *c, const ql_quant_mix *m)
{
    c->weight_mix = m;
    c->weight_type = m->default_type;
}

/* A pure type by its name; a mix by a name no type has, or by mix:NAME (any of
 * llama-quantize's TYPE spellings). */
/* The prefix of a weight_type that names an existing GGUF file. */

static bool is_hex64(const char *s)
{
    if (strlen(s) != 64)
        return false;
    for (const char *p = s; *p; p++)
        if (!isxdigit((unsigned char)*p))
            return false;
    return true;
}

/* file:PATH or file:PATH@SHA256 (the canonical form, as the store keeps it). */
static ql_status parse_weight_file(ql_config *c, const char *v, ql_error *err)
{
    const char *path = v + strlen(CONFIG_FILE_PREFIX);
    const char *at = strrchr(path, '@');
    const bool with_sha = at && is_hex64(at + 1);
    const size_t n = with_sha ? (size_t)(at - path) : strlen(path);
    if (n == 0)
        return ql_error_set(err, QL_EFORMAT, "weight_type: '%s' names no file (file:PATH)", v);
    if (!is_plain_token(path))
        return ql_error_set(err, QL_EFORMAT,
                            "weight_type: '%s' contains whitespace, quotes or control characters",
                            v);
    /* Room for "file:", the path, "@" and the hash in a canonical value. */
    if (n >= sizeof c->weight_file - 80)
        return ql_error_set(err, QL_EFORMAT, "weight_type: path '%.64s...' is too long (max %d)",
                            path, (int)sizeof c->weight_file - 81);
    c->weight_mix = NULL;
    c->weight_type = QL_TYPE_F32;
    memcpy(c->weight_file, path, n);
    c->weight_file[n] = '\0';
    ql_strlcpy(c->weight_file_open, c->weight_file, sizeof c->weight_file_open);
    c->weight_file_sha[0] = '\0';
    if (with_sha)
        for (int i = 0; i < 64; i++)
            c->weight_file_sha[i] = (char)tolower((unsigned char)at[1 + i]);
    c->weight_file_sha[with_sha ? 64 : 0] = '\0';
    return QL_OK;
}

static ql_status parse_weight_type(ql_config *c, const char *v, ql_error *err)
{
    c->weight_file[0] = c->weight_file_sha[0] = c->weight_file_open[0] = '\0';
    if (strncasecmp(v, CONFIG_FILE_PREFIX, strlen(CONFIG_FILE_PREFIX)) == 0)
        return parse_weight_file(c, v, err);
    if (strncasecmp(v, MIX_PREFIX, strlen(MIX_PREFIX)) == 0) {
        const char *name = v + strlen(MIX_PREFIX);
        const ql_quant_mix *m = ql_quant_mix_by_name(name);
        if (m) {
            set_mix(c, m);
            return QL_OK;
        }
        const char *names[QL_FTYPE_LIMIT];
        const char *near = ql_closest_name(name, names, mix_names(names, QL_FTYPE_LIMIT));
        if (near)
            return ql_error_set(err, QL_EFORMAT,
                                "weight_type: unknown llama-quantize file type '%s'; did you mean "
                                "'%s'?",
                                name, near);
        return ql_error_set(err, QL_EFORMAT,
                            "weight_type: unknown llama-quantize file type '%s' (file types: "
                            "Q4_K_M, Q3_K_L, IQ3_M, ...; see qlab quantize --help)",
                            name);
    }
    int number;
    const ql_quant_mix *m = ql_quant_mix_by_name(v);
    if (!ql_type_by_name(v) && m && !ql_parse_int(v, &number)) {
        set_mix(c, m);
        return QL_OK;
    }
    c->weight_mix = NULL;
    if (!ql_type_by_name(v) && strcasecmp(v, "same") != 0) {
        /* A typo of a type or of a mix (Q4_K_N): the closest of both, types first. */
        const char *names[128 + QL_FTYPE_LIMIT];
        size_t n = weight_type_names(names, 128, false);
        n += mix_names(names + n, QL_FTYPE_LIMIT);
        const char *near = ql_closest_name(v, names, n);
        if (near)
            return ql_error_set(err, QL_EFORMAT,
                                "weight_type: unknown type '%s'; did you mean '%s'?", v, near);
    }
    return parse_type("weight_type", v, false, &c->weight_type, err);
}

/* A mix as llama-quantize names it, with mix: where a type has that name. */
static int print_weight_type(const ql_config *c, char *buf, size_t size)
{
    if (c->weight_file[0])
        return snprintf(buf, size, CONFIG_FILE_PREFIX "%s%s%s", c->weight_file,
                        c->weight_file_sha[0] ? "@" : "", c->weight_file_sha);
    if (c->weight_mix)
        return snprintf(buf, size, "%s%s", ql_type_by_name(c->weight_mix->name) ? MIX_PREFIX : "",
                        c->weight_mix->name);
    return snprintf(buf, size, "%s", ql_type_name(c->weight_type));
}

static const char *class_weight_type(const ql_config *c)
{
    return c->weight_file[0] ? CONFIG_FILE_PREFIX "<path>" : "<type>";
}

static ql_status parse_act_mode(ql_config *c, const char *v, ql_error *err)
{
    for (int m = 0; m < QL_ACT_COUNT; m++)
        if (strcasecmp(v, act_names[m]) == 0) {
            c->act_mode = (ql_act_mode)m;
            return QL_OK;
        }
    const char *near = ql_closest_name(v, act_names, QL_ACT_COUNT);
    if (near)
        return ql_error_set(err, QL_EFORMAT, "act_mode: unknown mode '%s'; did you mean '%s'?", v,
                            near);
    return ql_error_set(err, QL_EFORMAT,
                        "act_mode: unknown mode '%s' (modes: f32 native q8_0 q8_1 q8_K q8x2)", v);
}

static int print_act_mode(const ql_config *c, char *buf, size_t size)
{
    return snprintf(buf, size, "%s", ql_act_mode_name(c->act_mode));
}

static const char *class_act_mode(const ql_config *c)
{
    return ql_act_mode_name(c->act_mode);
}

static ql_status parse_outlier_ratio(ql_config *c, const char *v, ql_error *err)
{
    double r;
    if (!ql_parse_double(v, &r))
        return ql_error_set(err, QL_EFORMAT, "outlier_ratio: '%s' is not a number", v);
    if (r == 0.0) {
        c->outlier_ratio = 0.0; /* also turns -0 into 0 */
        return QL_OK;
    }
    if (!(r > 1.0))
        return ql_error_set(err, QL_EFORMAT,
                            "outlier_ratio: %s must be 0 (off) or greater than 1 (a channel is an "
                            "outlier above ratio x the median channel)",
                            v);
    c->outlier_ratio = r;
    return QL_OK;
}

static int print_outlier_ratio(const ql_config *c, char *buf, size_t size)
{
    char num[40];
    ql_format_double(c->outlier_ratio, num, sizeof num);
    return snprintf(buf, size, "%s", num);
}

static const char *class_outlier_ratio(const ql_config *c)
{
    return c->outlier_ratio == 0.0 ? "0" : ">1";
}

static ql_status parse_head_type(ql_config *c, const char *v, ql_error *err)
{
    return parse_type("head_type", v, true, &c->head_type, err);
}

/* Whether a head or embedding type (the axis's field, QL_TYPE_SAME or a type) reads
 * `same`: it equals a pure weight type, or it is not given for a mix (whose rules
 * choose it, so a type there is an override even when it is the default type). */
bool config_role_is_same(const ql_config *c, ql_type field)
{
    if (c->weight_mix || c->weight_file[0])
        return field == QL_TYPE_SAME;
    return field == QL_TYPE_SAME || field == c->weight_type;
}

/* A head or embedding type that reads `same` is written so. */
static int print_role_type(const ql_config *c, ql_type field, char *buf, size_t size)
{
    return snprintf(buf, size, "%s", config_role_is_same(c, field) ? "same" : ql_type_name(field));
}

static int print_head_type(const ql_config *c, char *buf, size_t size)
{
    return print_role_type(c, c->head_type, buf, size);
}

static const char *class_head_type(const ql_config *c)
{
    return config_role_is_same(c, c->head_type) ? "same" : "<type>";
}

static ql_status parse_embd_type(ql_config *c, const char *v, ql_error *err)
{
    return parse_type("embd_type", v, true, &c->embd_type, err);
}

static int print_embd_type(const ql_config *c, char *buf, size_t size)
{
    return print_role_type(c, c->embd_type, buf, size);
}

static const char *class_embd_type(const ql_config *c)
{
    return config_role_is_same(c, c->embd_type) ? "same" : "<type>";
}

static ql_status parse_kv_type(ql_config *c, const char *v, ql_error *err)
{
    for (int k = 0; k < QL_KV_COUNT; k++)
        if (strcasecmp(v, kv_names[k]) == 0) {
            c->kv_type = (ql_kv_type)k;
            return QL_OK;
        }
    const char *near = ql_closest_name(v, kv_names, QL_KV_COUNT);
    if (near)
        return ql_error_set(err, QL_EFORMAT, "kv_type: unknown type '%s'; did you mean '%s'?", v,
                            near);
    return ql_error_set(err, QL_EFORMAT,
                        "kv_type: unknown type '%s' (types: auto f32 f16 q8_0 q4_0)", v);
}

/* `auto` is written as the type it stands for. */
static int print_kv_type(const ql_config *c, char *buf, size_t size)
{
    return snprintf(buf, size, "%s", ql_kv_type_name(ql_config_kv_type(c)));
}

static const char *class_kv_type(const ql_config *c)
{
    return ql_kv_type_name(ql_config_kv_type(c));
}

static int print_imatrix(const ql_config *c, char *buf, size_t size)
{
    if (c->imatrix_kind == QL_IMATRIX_NONE)
        return snprintf(buf, size, "none");
    if (c->imatrix_kind == QL_IMATRIX_FILE)
        return snprintf(buf, size, "%s", c->imatrix);
    /* calib: the options in a fixed order, defaults (0) left out. */
    char ctx[32] = "", chunks[32] = "";
    if (c->imatrix_ctx > 0)
        snprintf(ctx, sizeof ctx, ",ctx=%d", c->imatrix_ctx);
    if (c->imatrix_chunks > 0)
        snprintf(chunks, sizeof chunks, ",chunks=%d", c->imatrix_chunks);
    return snprintf(buf, size, "calib:%s%s%s", c->imatrix, ctx, chunks);
}

static const char *class_imatrix(const ql_config *c)
{
    return c->imatrix_kind == QL_IMATRIX_NONE   ? "none"
           : c->imatrix_kind == QL_IMATRIX_FILE ? "<path>"
                                                : "calib:<dataset>";
}

/* A byte budget as a whole number of bytes, a bpw budget as bpw:X. */
static int print_budget(const ql_config *c, char *buf, size_t size)
{
    char num[40];
    if (c->budget_kind == QL_BUDGET_NONE)
        return snprintf(buf, size, "none");
    if (c->budget_kind == QL_BUDGET_BYTES)
        return snprintf(buf, size, "%lld", (long long)c->budget_bytes);
    if (c->budget_kind == QL_BUDGET_LIKE)
        return snprintf(buf, size, "%s", c->budget_like);
    ql_format_double(c->budget_bpw, num, sizeof num);
    return snprintf(buf, size, "bpw:%s", num);
}

static const char *class_budget(const ql_config *c)
{
    return c->budget_kind == QL_BUDGET_NONE    ? "none"
           : c->budget_kind == QL_BUDGET_BYTES ? "<bytes>"
           : c->budget_kind == QL_BUDGET_LIKE  ? "<type>"
                                               : "bpw:<x>";
}

static const char *const grouping_names[QL_GROUPING_COUNT] = {"tensor", "module", "layer", "kind",
                                                              "expert"};

const char *ql_grouping_name(ql_grouping g)
{
    QL_ASSERT(g >= 0 && g < QL_GROUPING_COUNT);
    return grouping_names[g];
}

bool ql_grouping_parse(const char *s, ql_grouping *out)
{
    for (int g = 0; g < QL_GROUPING_COUNT; g++)
        if (strcasecmp(s, grouping_names[g]) == 0) {
            *out = (ql_grouping)g;
            return true;
        }
    return false;
}

/* objective: imatrix, or kld[:GROUPING] (kld alone, canonical, is kld:tensor). */
static ql_status parse_objective(ql_config *c, const char *v, ql_error *err)
{
    c->grouping = QL_GROUPING_TENSOR;
    if (strcasecmp(v, "imatrix") == 0) {
        c->objective = QL_OBJECTIVE_IMATRIX;
        return QL_OK;
    }
    if (strncasecmp(v, "kld", 3) == 0 && (v[3] == '\0' || v[3] == ':')) {
        c->objective = QL_OBJECTIVE_KLD;
        if (v[3] == ':' && !ql_grouping_parse(v + 4, &c->grouping))
            return ql_error_set(err, QL_EFORMAT,
                                "objective: unknown grouping '%s' in '%s' (tensor, module, layer, "
                                "kind, expert)",
                                v + 4, v);
        return QL_OK;
    }
    return ql_error_set(err, QL_EFORMAT,
                        "objective: unknown objective '%s' (imatrix, kld, kld:module, kld:layer, "
                        "kld:kind, kld:expert)",
                        v);
}

static int print_objective(const ql_config *c, char *buf, size_t size)
{
    if (c->objective == QL_OBJECTIVE_IMATRIX)
        return snprintf(buf, size, "imatrix");
    if (c->grouping == QL_GROUPING_TENSOR)
        return snprintf(buf, size, "kld");
    return snprintf(buf, size, "kld:%s", ql_grouping_name(c->grouping));
}

static const char *class_objective(const ql_config *c)
{
    return c->objective == QL_OBJECTIVE_IMATRIX ? "imatrix"
           : c->grouping == QL_GROUPING_TENSOR  ? "kld"
                                                : "kld:<grouping>";
}

static double column_budget_bytes(const ql_config *c)
{
    return c->budget_kind == QL_BUDGET_BYTES ? (double)c->budget_bytes : (double)NAN;
}

static double column_budget_bpw(const ql_config *c)
{
    return c->budget_kind == QL_BUDGET_BPW ? c->budget_bpw : (double)NAN;
}

/* tensor_types: `none`, or --tensor-type rules REGEX=TYPE separated by ';' (first
 * match wins, model/quant_policy.h). Each rule is checked on its own: the type by
 * name, then the pattern by compiling it as the policy will. */

static ql_status parse_rule(const char *rule, char *out, size_t size, ql_error *err)
{
    const char *eq = strchr(rule, '=');
    if (!eq)
        return ql_error_set(err, QL_EFORMAT, "tensor_types: rule '%s' is not REGEX=TYPE", rule);
    if (eq == rule)
        return ql_error_set(err, QL_EFORMAT, "tensor_types: rule '%s' has an empty pattern", rule);
    const char *type = eq + 1;
    if (!*type)
        return ql_error_set(err, QL_EFORMAT, "tensor_types: rule '%s' names no type", rule);
    char what[QL_CONFIG_RECIPE_MAX + 32];
    snprintf(what, sizeof what, "tensor_types: rule '%s'", rule);
    ql_type t;
    ql_status st = parse_type(what, type, false, &t, err);
    if (st != QL_OK)
        return st;
    /* The pattern as the policy matches it: lowercased (llama-quantize's rule). */
    size_t plen = (size_t)(eq - rule);
    int n = snprintf(out, size, "%.*s=%s", (int)plen, rule, ql_type_name(t));
    if (n < 0 || (size_t)n >= size)
        return ql_error_set(err, QL_EFORMAT, "tensor_types: rule '%.40s...' is too long", rule);
    for (size_t i = 0; i < plen; i++)
        out[i] = (char)tolower((unsigned char)out[i]);
    const char *one[1] = {out};
    ql_quant_overrides *o = NULL;
    st = ql_quant_overrides_parse(one, 1, &o, err);
    ql_quant_overrides_free(o);
    if (st == QL_OK)
        return QL_OK;
    /* The policy names the rule as an option of qlab quantize; here it is the axis's. */
    char policy[QL_CONFIG_RECIPE_MAX + 32], msg[QL_ERROR_MSG_MAX];
    snprintf(policy, sizeof policy, "--tensor-type '%s': ", out);
    ql_strlcpy(msg, err->msg, sizeof msg);
    const char *why = strncmp(msg, policy, strlen(policy)) == 0 ? msg + strlen(policy) : msg;
    return ql_error_set(err, st == QL_ENOMEM ? st : QL_EFORMAT, "%s: %s", what, why);
}

static ql_status parse_tensor_types(ql_config *c, const char *v, ql_error *err)
{
    if (strcasecmp(v, "none") == 0) {
        c->tensor_types[0] = '\0';
        return QL_OK;
    }
    if (!*v || !is_plain_token(v))
        return ql_error_set(err, QL_EFORMAT,
                            "tensor_types: '%s' contains whitespace, quotes or control characters",
                            v);
    char text[QL_CONFIG_RECIPE_MAX];
    size_t used = 0;
    for (const char *p = v;;) {
        const char *end = strchr(p, CONFIG_RULE_SEP);
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char rule[QL_CONFIG_RECIPE_MAX], canon[QL_CONFIG_RECIPE_MAX];
        if (len == 0)
            return ql_error_set(err, QL_EFORMAT, "tensor_types: empty rule in '%s'", v);
        if (len >= sizeof rule)
            return ql_error_set(err, QL_EFORMAT, "tensor_types: rule '%.40s...' is too long", p);
        memcpy(rule, p, len);
        rule[len] = '\0';
        ql_status st = parse_rule(rule, canon, sizeof canon, err);
        if (st != QL_OK)
            return st;
        size_t clen = strlen(canon);
        if (used + (used ? 1 : 0) + clen >= sizeof text)
            return ql_error_set(err, QL_EFORMAT,
                                "tensor_types: the rules of '%.40s...' are longer than %d bytes", v,
                                QL_CONFIG_RECIPE_MAX - 1);
        if (used)
            text[used++] = CONFIG_RULE_SEP;
        memcpy(text + used, canon, clen + 1);
        used += clen;
        if (!end)
            break;
        p = end + 1;
    }
    memcpy(c->tensor_types, text, used + 1);
    return QL_OK;
}

static int print_tensor_types(const ql_config *c, char *buf, size_t size)
{
    return snprintf(buf, size, "%s", c->tensor_types[0] ? c->tensor_types : "none");
}

static const char *class_tensor_types(const ql_config *c)
{
    return c->tensor_types[0] ? "<rules>" : "none";
}

/* quantizer: ggml, or gptq[:OPTS] (formats/gptq.h's options; canonical: those that
 * differ from GPTQ's defaults, in its fixed order). */
static ql_status parse_quantizer(ql_config *c, const char *v, ql_error *err)
{
    ql_gptq_opts_default(&c->gptq);
    if (strcasecmp(v, "ggml") == 0) {
        c->quantizer_gptq = false;
        return QL_OK;
    }
    if (strncasecmp(v, "gptq", 4) == 0 && (v[4] == '\0' || v[4] == ':')) {
        c->quantizer_gptq = true;
        ql_status st = ql_gptq_opts_parse(v[4] ? v + 5 : "", &c->gptq, err);
        return st ? ql_error_prefix(err, "quantizer: ") : QL_OK;
    }
    return ql_error_set(err, QL_EFORMAT,
                        "quantizer: unknown quantizer '%s' (ggml, or gptq[:damp=X,order=natural|"
                        "act,scales=lazy|static,block=N,inputs=quantized|reference])",
                        v);
}

static int print_quantizer(const ql_config *c, char *buf, size_t size)
{
    if (!c->quantizer_gptq)
        return snprintf(buf, size, "ggml");
    char o[160];
    ql_gptq_opts_print(&c->gptq, o, sizeof o);
    return snprintf(buf, size, "gptq%s%s", o[0] ? ":" : "", o);
}

static const char *class_quantizer(const ql_config *c)
{
    return c->quantizer_gptq ? "gptq" : "ggml";
}

ql_quant_config ql_config_quant_request(const ql_config *c, const ql_quant_overrides *rules,
                                        bool has_imatrix)
{
    return (ql_quant_config){.weight_type = c->weight_type,
                             .head_type = c->head_type,
                             .embd_type = c->embd_type,
                             .mix = c->weight_mix,
                             .has_imatrix = has_imatrix,
                             .overrides = rules};
}

ql_status ql_config_overrides(const ql_config *c, ql_quant_overrides **out, ql_error *err)
{
    *out = NULL;
    if (!c->tensor_types[0])
        return QL_OK;
    /* The canonical rules split at ';' (no pattern holds one: it separates them). */
    char text[QL_CONFIG_RECIPE_MAX];
    const char *rules[QL_CONFIG_RECIPE_MAX / 4];
    int n = 0;
    ql_strlcpy(text, c->tensor_types, sizeof text);
    for (char *p = text; p && n < (int)(sizeof rules / sizeof rules[0]);) {
        rules[n++] = p;
        p = strchr(p, CONFIG_RULE_SEP);
        if (p)
            *p++ = '\0';
    }
    return ql_quant_overrides_parse(rules, n, out, err);
}

/* ---------------------------------------------------------------- the table */

/* The bytes of ql_config from field first to field last. */
#define FIELD_END(f)        (offsetof(ql_config, f) + sizeof(((ql_config *)0)->f))
#define FIELDS(first, last) offsetof(ql_config, first), FIELD_END(last) - offsetof(ql_config, first)

#define AXIS_DEF(ID, name, first, last, dflt, sql, since, label, shown, flags, comment)            \
    [QL_AXIS_##ID] = {{#name, label, shown, dflt, QL_COLUMN_##sql, since, flags},                  \
                      FIELDS(first, last),                                                         \
                      parse_##name,                                                                \
                      print_##name,                                                                \
                      class_##name},
const config_axis config_axes[QL_AXIS_COUNT] = {QL_AXES(AXIS_DEF)};
#undef AXIS_DEF

/* What the compiler can check of every axis: a column an ALTER TABLE can add, fields
 * in order, and a later axis left out of the canonical form at its default. */
#define AXIS_CHECK(ID, name, first, last, dflt, sql, since, label, shown, flags, comment)          \
    _Static_assert(QL_COLUMN_##sql != QL_COLUMN_INTEGER,                                           \
                   #name ": an axis column is TEXT or REAL");                                      \
    _Static_assert(offsetof(ql_config, first) <= offsetof(ql_config, last),                        \
                   #name ": fields out of order");                                                 \
    _Static_assert((since) >= 1, #name ": schema versions start at 1");                            \
    _Static_assert((since) == 1 || ((flags)&QL_AXIS_OMIT_DEFAULT),                                 \
                   #name ": an axis added later must be left out of the canonical form at its "    \
                         "default (QL_AXIS_OMIT_DEFAULT), or every stored config hash changes");
QL_AXES(AXIS_CHECK)
#undef AXIS_CHECK

const char *const config_axis_names[QL_AXIS_COUNT] = {
#define AXIS_NAME(ID, name, ...) [QL_AXIS_##ID] = #name,
    QL_AXES(AXIS_NAME)
#undef AXIS_NAME
};

/* The configs columns: the axes', then the extra ones. */
const config_column config_columns[] = {
#define AXIS_COLUMN(ID, name, first, last, dflt, sql, since, label, shown, flags, comment)         \
    {{#name, QL_AXIS_##ID, QL_COLUMN_##sql, since, comment}, NULL},
    QL_AXES(AXIS_COLUMN)
#undef AXIS_COLUMN
#define EXTRA_COLUMN(ID, name, type, since, comment)                                               \
    {{#name, QL_AXIS_##ID, QL_COLUMN_##type, since, comment}, column_##name},
        QL_CONFIG_EXTRA_COLUMNS(EXTRA_COLUMN)
#undef EXTRA_COLUMN
};
_Static_assert(sizeof config_columns / sizeof config_columns[0] == CONFIG_N_COLUMNS,
               "CONFIG_N_COLUMNS counts every column");

int32_t ql_kv_ggml_type(ql_kv_type kv)
{
    switch (kv) {
    case QL_KV_F32:
        return QL_TYPE_F32;
    case QL_KV_F16:
        return QL_TYPE_F16;
    case QL_KV_Q8_0:
        return QL_TYPE_Q8_0;
    case QL_KV_Q4_0:
        return QL_TYPE_Q4_0;
    default:
        QL_ASSERT(!"kv_type auto must be resolved with ql_config_kv_type");
        return QL_TYPE_F32;
    }
}
