/* Configs: parsing of every axis, the canonical form, the pinned content hash,
 * cross-axis rules and the capability table. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/config.h"
#include "qltest.h"

/* Parses a config string and returns its canonical form (static buffer). */
static const char *canon(const char *s)
{
    static char buf[QL_CONFIG_TEXT_MAX];
    ql_config c;
    ql_error err;
    ql_status st = ql_config_from_string(s, &c, &err);
    CHECK_OK(st, &err);
    if (st != QL_OK)
        return "";
    ql_config_to_string(&c, buf, sizeof buf);
    return buf;
}

static void check_canon(const char *in, const char *want)
{
    const char *got = canon(in);
    CHECK_MSG(strcmp(got, want) == 0, "'%s' -> '%s', expected '%s'", in, got, want);
}

/* Expects ql_config_from_string(s) to fail with exactly msg. */
static void check_bad(const char *s, const char *msg)
{
    ql_config c;
    ql_error err;
    ql_error_clear(&err);
    ql_status st = ql_config_from_string(s, &c, &err);
    CHECK_MSG(st == QL_EFORMAT, "'%s' was accepted", s);
    CHECK_MSG(strcmp(err.msg, msg) == 0, "'%s': got '%s', expected '%s'", s, err.msg, msg);
}

static void test_defaults_and_pinned_hash(void)
{
    ql_config c;
    ql_config_init(&c);
    c.weight_type = QL_TYPE_Q4_0;
    char text[QL_CONFIG_TEXT_MAX], hash[65];
    ql_config_to_string(&c, text, sizeof text);
    CHECK(strcmp(text, "weight_type=Q4_0 act_mode=f32 outlier_ratio=0 head_type=same "
                       "embd_type=same kv_type=f32 imatrix=none budget=none") == 0);
    /* Pinned: sha256 of the line above computed with sha256sum. If this fails, the
     * canonical form changed and every stored result lost its identity. */
    ql_config_hash(&c, hash);
    CHECK_MSG(strcmp(hash, "88005179d5a510460d59b37500766f264fc607741718dfc6061269de8009ddb5") == 0,
              "hash %s", hash);

    ql_config full;
    ql_error err;
    CHECK_OK(ql_config_from_string("budget=bpw:4.5 imatrix=calib:ts-calib,ctx=128 kv_type=F16 "
                                   "embd_type=q6_k head_type=f32 outlier_ratio=3.50 "
                                   "act_mode=Q8X2 weight_type=q8_0",
                                   &full, &err),
             &err);
    ql_config_hash(&full, hash);
    CHECK_MSG(strcmp(hash, "2185a400decb41a7c317e6a73967b389f2f2e9ab462bf94662c850d9ae97c600") == 0,
              "hash %s", hash);
}

/* Every line of tests/data/config/canonical-hashes.tsv (written by the qlab before the
 * axes became one declaration, for every axis and its default): the config reads to
 * the same canonical form and hash, and so does the canonical form itself. */
static void test_stored_hashes(void)
{
    size_t len;
    char *text = qlt_read_file(qlt_source("tests/data/config/canonical-hashes.tsv"), &len);
    size_t n = 0;
    bool axis_seen[QL_AXIS_COUNT] = {false};
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#')
            continue;
        char *col[4];
        CHECK_MSG(qlt_split_tabs(line, col, 4) == 3, "bad line '%s'", line);
        for (int pass = 0; pass < 2; pass++) {
            const char *in = pass ? col[1] : col[0];
            ql_config c;
            ql_error err;
            char canonical[QL_CONFIG_TEXT_MAX], hash[65];
            CHECK_OK(ql_config_from_string(in, &c, &err), &err);
            ql_config_to_string(&c, canonical, sizeof canonical);
            ql_config_hash(&c, hash);
            CHECK_MSG(strcmp(canonical, col[1]) == 0, "'%s' -> '%s', stored as '%s'", in, canonical,
                      col[1]);
            CHECK_MSG(strcmp(hash, col[2]) == 0, "'%s' -> %s, stored as %s", in, hash, col[2]);
        }
        for (int a = 0; a < QL_AXIS_COUNT; a++)
            axis_seen[a] = axis_seen[a] || strstr(col[0], ql_axis_name((ql_axis)a)) != NULL;
        n++;
    }
    CHECK(n >= 70);
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        CHECK_MSG(axis_seen[a], "no stored hash sets %s", ql_axis_name((ql_axis)a));
    free(text);
}

/* The axis list: names, labels, defaults, field ranges, capability entries and the
 * store's columns, as the rest of qlab reads them. */
static void test_axis_table(void)
{
    ql_config d;
    ql_config_init(&d);
    const ql_capability *caps;
    size_t ncap = ql_config_capabilities(&caps);
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        const ql_axis_info *ai = ql_axis_get((ql_axis)a);
        ql_axis back;
        CHECK(ql_axis_lookup(ai->name, &back) && back == (ql_axis)a);
        CHECK(strcmp(ql_axis_name((ql_axis)a), ai->name) == 0);
        CHECK(ai->label && *ai->label && ai->since >= 1);
        /* Its default parses, and ql_config_init gives it. */
        ql_config c;
        ql_error err;
        memset(&c, 0x5a, sizeof c);
        ql_config_init(&c);
        CHECK_OK(ql_config_set(&c, (ql_axis)a, ai->default_value, &err), &err);
        char x[QL_CONFIG_VALUE_MAX], y[QL_CONFIG_VALUE_MAX];
        ql_config_axis_string(&c, (ql_axis)a, x, sizeof x);
        ql_axis_default_string((ql_axis)a, y, sizeof y);
        CHECK_MSG(strcmp(x, y) == 0, "%s: %s vs %s", ai->name, x, y);
        /* The default's value class has an entry in the capability table. */
        bool listed = false;
        for (size_t i = 0; i < ncap; i++)
            listed = listed || caps[i].axis == (ql_axis)a;
        CHECK_MSG(listed, "%s has no capability entry", ai->name);
        CHECK_OK(ql_config_check_axis(&d, (ql_axis)a, &err), &err);
    }
    /* Copying one axis copies exactly its fields: all axes copied one by one give the
     * source, and copying one into a default config changes only that axis. */
    ql_config full, copy;
    ql_error err;
    CHECK_OK(ql_config_from_string("weight_type=Q8_0_XC act_mode=q8_0 outlier_ratio=3 "
                                   "head_type=Q8_0 embd_type=F16 kv_type=q8_0 "
                                   "imatrix=calib:x,ctx=64,chunks=5 budget=400000",
                                   &full, &err),
             &err);
    ql_config_init(&copy);
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        ql_config one;
        ql_config_init(&one);
        ql_config_copy_axis(&one, &full, (ql_axis)a);
        for (int b = 0; b < QL_AXIS_COUNT; b++) {
            char u[QL_CONFIG_VALUE_MAX], v[QL_CONFIG_VALUE_MAX];
            ql_config_axis_string(&one, (ql_axis)b, u, sizeof u);
            ql_config_axis_string(b == a ? &full : &d, (ql_axis)b, v, sizeof v);
            /* head/embd print relative to weight_type: only compare them with it fixed. */
            if (b != a && (b == QL_AXIS_HEAD_TYPE || b == QL_AXIS_EMBD_TYPE))
                continue;
            CHECK_MSG(strcmp(u, v) == 0, "copying %s changed %s: %s vs %s", ql_axis_name(a),
                      ql_axis_name(b), u, v);
        }
        ql_config_copy_axis(&copy, &full, (ql_axis)a);
    }
    char t1[QL_CONFIG_TEXT_MAX], t2[QL_CONFIG_TEXT_MAX];
    ql_config_to_string(&full, t1, sizeof t1);
    ql_config_to_string(&copy, t2, sizeof t2);
    CHECK(strcmp(t1, t2) == 0);

    /* The configs columns: each axis, then budget_bytes and budget_bpw. */
    const ql_config_column *cols;
    size_t n = ql_config_columns(&cols);
    CHECK_EQ_INT(n, QL_AXIS_COUNT + 2);
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        CHECK(strcmp(cols[a].name, ql_axis_name((ql_axis)a)) == 0 && cols[a].axis == (ql_axis)a);
    char text[QL_CONFIG_VALUE_MAX];
    double num;
    ql_config_column_value(&full, QL_AXIS_OUTLIER_RATIO, text, sizeof text, &num);
    CHECK(cols[QL_AXIS_OUTLIER_RATIO].type == QL_COLUMN_REAL && num == 3.0);
    ql_config_column_value(&full, QL_AXIS_IMATRIX, text, sizeof text, &num);
    CHECK(strcmp(text, "calib:x,ctx=64,chunks=5") == 0 && isnan(num));
    CHECK(strcmp(cols[QL_AXIS_COUNT].name, "budget_bytes") == 0);
    ql_config_column_value(&full, QL_AXIS_COUNT, text, sizeof text, &num);
    CHECK(num == 400000.0);
    ql_config_column_value(&full, QL_AXIS_COUNT + 1, text, sizeof text, &num);
    CHECK(isnan(num));

    /* The short label: the weight type, then name=value of what varies. */
    bool varies[QL_AXIS_COUNT] = {false};
    varies[QL_AXIS_ACT_MODE] = varies[QL_AXIS_BUDGET] = true;
    char label[256];
    ql_config_short_label(&full, varies, label, sizeof label);
    CHECK_MSG(strcmp(label, "Q8_0_XC act_mode=q8_0 budget=400000") == 0, "%s", label);
    /* tensor_types (added later) is left out at its default, like the canonical form. */
    varies[QL_AXIS_TENSOR_TYPES] = true;
    ql_config_short_label(&full, varies, label, sizeof label);
    CHECK_MSG(strcmp(label, "Q8_0_XC act_mode=q8_0 budget=400000") == 0, "%s", label);
    CHECK_OK(ql_config_set(&full, QL_AXIS_TENSOR_TYPES, "attn_v=Q8_0", &err), &err);
    ql_config_short_label(&full, varies, label, sizeof label);
    CHECK_MSG(strcmp(label, "Q8_0_XC act_mode=q8_0 budget=400000 tensor_types=attn_v=Q8_0") == 0,
              "%s", label);
    CHECK(strcmp(ql_axis_get(QL_AXIS_OUTLIER_RATIO)->shown_default, "off") == 0);
    CHECK(ql_axis_get(QL_AXIS_HEAD_TYPE)->flags & QL_AXIS_LABEL_SKIPS_DEFAULT);
    CHECK(!(ql_axis_get(QL_AXIS_KV_TYPE)->flags & QL_AXIS_WEIGHTS));
}

static void test_canonical_spelling(void)
{
    check_canon("weight_type=q4_k", "weight_type=Q4_K act_mode=f32 outlier_ratio=0 head_type=same "
                                    "embd_type=same kv_type=f32 imatrix=none budget=none");
    /* Numbers: shortest exact spelling; -0 is 0. */
    check_canon("weight_type=Q8_0 outlier_ratio=6.000",
                "weight_type=Q8_0 act_mode=f32 "
                "outlier_ratio=6 head_type=same embd_type=same kv_type=f32 imatrix=none "
                "budget=none");
    check_canon("weight_type=Q8_0 outlier_ratio=-0.0",
                "weight_type=Q8_0 act_mode=f32 "
                "outlier_ratio=0 head_type=same embd_type=same kv_type=f32 imatrix=none "
                "budget=none");
    check_canon("weight_type=Q8_0 outlier_ratio=2.25e0",
                "weight_type=Q8_0 act_mode=f32 "
                "outlier_ratio=2.25 head_type=same embd_type=same kv_type=f32 imatrix=none "
                "budget=none");
    /* A head type equal to the weight type is `same`. */
    check_canon("weight_type=Q4_0 head_type=Q4_0 embd_type=q4_0",
                "weight_type=Q4_0 act_mode=f32 outlier_ratio=0 head_type=same embd_type=same "
                "kv_type=f32 imatrix=none budget=none");
    /* kv auto resolves through act_mode. */
    check_canon("weight_type=Q4_0 act_mode=native",
                "weight_type=Q4_0 act_mode=native "
                "outlier_ratio=0 head_type=same embd_type=same kv_type=f16 imatrix=none "
                "budget=none");
    check_canon("weight_type=Q4_0 act_mode=native kv_type=q8_0",
                "weight_type=Q4_0 "
                "act_mode=native outlier_ratio=0 head_type=same embd_type=same kv_type=q8_0 "
                "imatrix=none budget=none");
    check_canon("act_mode=q8_k weight_type=INT8_ROW",
                "weight_type=INT8_ROW act_mode=q8_K "
                "outlier_ratio=0 head_type=same embd_type=same kv_type=f32 imatrix=none "
                "budget=none");
    /* Budgets: bytes as a whole number, units are powers of 1024. */
    check_canon("weight_type=F16 budget=4.5GiB",
                "weight_type=F16 act_mode=f32 outlier_ratio=0 "
                "head_type=same embd_type=same kv_type=f32 imatrix=none budget=4831838208");
    check_canon("weight_type=F16 budget=3kib",
                "weight_type=F16 act_mode=f32 outlier_ratio=0 "
                "head_type=same embd_type=same kv_type=f32 imatrix=none budget=3072");
    check_canon("weight_type=F16 budget=BPW:5.50",
                "weight_type=F16 act_mode=f32 "
                "outlier_ratio=0 head_type=same embd_type=same kv_type=f32 imatrix=none "
                "budget=bpw:5.5");
    /* imatrix: paths as written, calib options in a fixed order, chunks=0 dropped. */
    check_canon("weight_type=Q4_K imatrix=data/i.gguf",
                "weight_type=Q4_K act_mode=f32 "
                "outlier_ratio=0 head_type=same embd_type=same kv_type=f32 imatrix=data/i.gguf "
                "budget=none");
    check_canon("weight_type=Q4_K imatrix=calib:x,chunks=5,ctx=64",
                "weight_type=Q4_K "
                "act_mode=f32 outlier_ratio=0 head_type=same embd_type=same kv_type=f32 "
                "imatrix=calib:x,ctx=64,chunks=5 budget=none");
    check_canon("weight_type=Q4_K imatrix=calib:x,chunks=0",
                "weight_type=Q4_K act_mode=f32 "
                "outlier_ratio=0 head_type=same embd_type=same kv_type=f32 imatrix=calib:x "
                "budget=none");
}

static void test_round_trip(void)
{
    const char *inputs[] = {
        "weight_type=IQ4_XS head_type=Q6_K embd_type=F16 imatrix=calib:wiki,ctx=256",
        "weight_type=Q8_0_XC outlier_ratio=3 act_mode=q8_0",
        "weight_type=BF16 kv_type=q4_0 budget=1048576",
        "weight_type=Q2_K imatrix=/tmp/im.dat budget=bpw:2.625",
        "weight_type=TQ2_0 outlier_ratio=1.0000001",
    };
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        char once[QL_CONFIG_TEXT_MAX];
        ql_strlcpy(once, canon(inputs[i]), sizeof once);
        const char *twice = canon(once);
        CHECK_MSG(strcmp(once, twice) == 0, "'%s' does not read back: '%s'", once, twice);
        ql_config a, b;
        ql_error err;
        char ha[65], hb[65];
        CHECK_OK(ql_config_from_string(inputs[i], &a, &err), &err);
        CHECK_OK(ql_config_from_string(once, &b, &err), &err);
        ql_config_hash(&a, ha);
        ql_config_hash(&b, hb);
        CHECK(strcmp(ha, hb) == 0);
    }
}

static void test_errors(void)
{
    check_bad("weight_type=Q4_O", "weight_type: unknown type 'Q4_O'; did you mean 'Q4_0'?");
    check_bad("weight_type=iq4xs", "weight_type: unknown type 'iq4xs'; did you mean 'IQ4_XS'?");
    check_bad("weight_type=Q8_K",
              "weight_type: Q8_K is an activation-only format (ggml has no matmul with it as the "
              "weight)");
    check_bad("weight_type=I8", "weight_type: I8 is an integer tensor type, not a weight format");
    check_bad("head_type=sme", "head_type: unknown type 'sme'; did you mean 'same'?");
    check_bad("weight_type=same", "weight_type: 'same' is only valid for head_type and embd_type");
    check_bad("act_mode=q8_o", "act_mode: unknown mode 'q8_o'; did you mean 'q8_0'?");
    check_bad("kv_type=bf16", "kv_type: unknown type 'bf16'; did you mean 'f16'?");
    check_bad("objective=kld:block",
              "objective: unknown grouping 'block' in 'kld:block' (tensor, module, layer, kind, "
              "expert)");
    check_bad("objective=kldlayer", "objective: unknown objective 'kldlayer' (imatrix, kld, "
                                    "kld:module, kld:layer, kld:kind, kld:expert)");
    check_bad("outlier_ratio=0.5",
              "outlier_ratio: 0.5 must be 0 (off) or greater than 1 (a channel is an outlier "
              "above ratio x the median channel)");
    check_bad("outlier_ratio=1", "outlier_ratio: 1 must be 0 (off) or greater than 1 (a channel "
                                 "is an outlier above ratio x the median channel)");
    check_bad("outlier_ratio=nan", "outlier_ratio: 'nan' is not a number");
    check_bad("budget=4GB", "budget: unit 'GB' in '4GB' is ambiguous; use KiB, MiB or GiB "
                            "(powers of 1024) or a plain byte count");
    check_bad("budget=4.5", "budget: '4.5' is not a whole number of bytes (or give a unit: KiB, "
                            "MiB, GiB)");
    check_bad("budget=bpw:0", "budget: 'bpw:0' is not bpw:X with 0 < X <= 32 bits per weight");
    check_bad("budget=0", "budget: '0' is out of range (1 byte .. 2^53)");
    check_bad("imatrix=calib:", "imatrix: 'calib:' names no dataset (calib:<dataset>)");
    check_bad("imatrix=calib:x,ctx=4",
              "imatrix: ctx '4' in 'calib:x,ctx=4' is not an integer in 8..1048576");
    check_bad("imatrix=calib:x,seed=1",
              "imatrix: unknown option 'seed' in 'calib:x,seed=1' (options: ctx=N, chunks=N)");
    check_bad("wieght_type=Q4_0", "unknown axis 'wieght_type'; did you mean 'weight_type'?");
    check_bad("weight_type=Q4_0 weight_type=Q8_0", "axis 'weight_type' given twice");
    check_bad("weight_type", "config item 'weight_type' is not axis=value");
}

static void test_rules_and_capabilities(void)
{
    ql_config c;
    ql_error err;
    ql_axis bad = QL_AXIS_COUNT;
    CHECK_OK(ql_config_from_string("weight_type=Q4_0 head_type=IQ1_S", &c, &err), &err);
    CHECK(ql_config_validate(&c, &bad, &err) == QL_EFORMAT);
    CHECK(bad == QL_AXIS_HEAD_TYPE);
    CHECK(strcmp(err.msg, "head_type IQ1_S needs an importance matrix (ggml refuses to quantize "
                          "it without one), but imatrix is none") == 0);
    CHECK_OK(ql_config_from_string("weight_type=IQ2_XXS imatrix=calib:x", &c, &err), &err);
    CHECK_OK(ql_config_validate(&c, NULL, &err), &err);

    /* Today's capabilities: activation modes, the outlier split and the K/V cache types
     * (issue 7) and byte budgets (issue 9) are implemented: every entry of the table. */
    CHECK_OK(ql_config_from_string("weight_type=IQ3_S head_type=F32 imatrix=x.dat", &c, &err),
             &err);
    CHECK_OK(ql_config_check_implemented(&c, &err), &err);
    const char *now_implemented[] = {
        "weight_type=Q4_0 act_mode=q8_0",      "weight_type=Q4_0 act_mode=q8_1",
        "weight_type=Q4_K act_mode=q8_K",      "weight_type=Q8_0 act_mode=q8x2",
        "weight_type=Q4_0 act_mode=native",    "weight_type=Q8_0 outlier_ratio=3.0",
        "weight_type=Q4_0 kv_type=q8_0",       "weight_type=Q4_0 kv_type=q4_0 act_mode=q8_0",
        "weight_type=Q8_0_XC outlier_ratio=6", "weight_type=F16 kv_type=f16",
    };
    for (size_t i = 0; i < sizeof now_implemented / sizeof now_implemented[0]; i++) {
        CHECK_OK(ql_config_from_string(now_implemented[i], &c, &err), &err);
        CHECK_MSG(ql_config_check_implemented(&c, &err) == QL_OK, "%s: %s", now_implemented[i],
                  err.msg);
    }
    CHECK_OK(ql_config_from_string("weight_type=Q4_0 budget=bpw:4.5", &c, &err), &err);
    CHECK_OK(ql_config_check_axis(&c, QL_AXIS_BUDGET, &err), &err); /* issue 9 */
    const ql_capability *all;
    const size_t n_all = ql_config_capabilities(&all);
    for (size_t i = 0; i < n_all; i++)
        CHECK_MSG(all[i].implemented, "%s %s", ql_axis_name(all[i].axis), all[i].value);

    /* Every value class of every axis has exactly one entry in the table. */
    const ql_capability *caps;
    size_t n = ql_config_capabilities(&caps);
    CHECK(n > 0);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            CHECK(caps[i].axis != caps[j].axis || strcmp(caps[i].value, caps[j].value) != 0);
}

static void test_weight_type_set(void)
{
    /* Every weight type the design names is accepted. */
    const char *names[] = {"F32",    "F16",     "BF16",   "Q8_0",  "Q4_0",     "Q4_1",
                           "Q5_0",   "Q5_1",    "Q2_K",   "Q3_K",  "Q4_K",     "Q5_K",
                           "Q6_K",   "IQ4_NL",  "IQ4_XS", "IQ3_S", "IQ3_XXS",  "IQ2_S",
                           "IQ2_XS", "IQ2_XXS", "IQ1_S",  "IQ1_M", "INT8_ROW", "Q8_0_XC"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        ql_config c;
        ql_error err;
        ql_config_init(&c);
        CHECK_OK(ql_config_set(&c, QL_AXIS_WEIGHT_TYPE, names[i], &err), &err);
        CHECK(strcmp(ql_type_name(c.weight_type), names[i]) == 0);
    }
}

static void test_format_double(void)
{
    char b[40];
    ql_format_double(0.1, b, sizeof b);
    CHECK(strcmp(b, "0.1") == 0);
    ql_format_double(1.0 / 3.0, b, sizeof b);
    CHECK(strtod(b, NULL) == 1.0 / 3.0);
    ql_format_double(-0.0, b, sizeof b);
    CHECK(strcmp(b, "0") == 0);
    ql_format_double(1e300, b, sizeof b);
    CHECK(strcmp(b, "1e+300") == 0);
    ql_format_double((double)NAN, b, sizeof b);
    CHECK(strcmp(b, "nan") == 0);
}

/* Expects ql_config_validate(s) to fail on axis with exactly msg. */
static void check_invalid(const char *s, ql_axis axis, const char *msg)
{
    ql_config c;
    ql_error err;
    ql_axis bad = QL_AXIS_COUNT;
    CHECK_OK(ql_config_from_string(s, &c, &err), &err);
    CHECK_MSG(ql_config_validate(&c, &bad, &err) == QL_EFORMAT, "'%s' was valid", s);
    CHECK_MSG(bad == axis, "'%s': axis %d, expected %s", s, (int)bad, ql_axis_name(axis));
    CHECK_MSG(strcmp(err.msg, msg) == 0, "'%s': got '%s', expected '%s'", s, err.msg, msg);
}

/* llama-quantize's file types as weight types: the name of a type means the type,
 * mix:NAME the file type of that name, a name no type has the file type. */
static void test_mixes(void)
{
    ql_config c;
    ql_error err;
    static const struct {
        const char *in, *canonical, *mix; /* mix NULL: pure */
        ql_type type;
    } cases[] = {
        {"Q4_K_M", "Q4_K_M", "Q4_K_M", QL_TYPE_Q4_K},
        {"q3_k_l", "Q3_K_L", "Q3_K_L", QL_TYPE_Q3_K},
        {"IQ3_M", "IQ3_M", "IQ3_M", QL_TYPE_IQ3_S},
        {"IQ2_M", "IQ2_M", "IQ2_M", QL_TYPE_IQ2_S},
        {"Q6_K", "Q6_K", NULL, QL_TYPE_Q6_K},
        {"Q4_K", "Q4_K", NULL, QL_TYPE_Q4_K}, /* llama-quantize's alias of Q4_K_M */
        {"mix:Q6_K", "mix:Q6_K", "Q6_K", QL_TYPE_Q6_K},
        {"MIX:q8_0", "mix:Q8_0", "Q8_0", QL_TYPE_Q8_0},
        {"mix:Q4_K", "Q4_K_M", "Q4_K_M", QL_TYPE_Q4_K},
        {"mix:Q4_K_M", "Q4_K_M", "Q4_K_M", QL_TYPE_Q4_K},
        {"mix:15", "Q4_K_M", "Q4_K_M", QL_TYPE_Q4_K},
        {"mix:IQ2_S", "mix:IQ2_S", "IQ2_S", QL_TYPE_IQ2_XS}, /* its default type */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ql_config_init(&c);
        CHECK_OK(ql_config_set(&c, QL_AXIS_WEIGHT_TYPE, cases[i].in, &err), &err);
        char v[QL_CONFIG_VALUE_MAX];
        ql_config_axis_string(&c, QL_AXIS_WEIGHT_TYPE, v, sizeof v);
        CHECK_MSG(strcmp(v, cases[i].canonical) == 0, "%s -> %s", cases[i].in, v);
        CHECK_MSG(cases[i].mix ? c.weight_mix && strcmp(c.weight_mix->name, cases[i].mix) == 0
                               : c.weight_mix == NULL,
                  "%s: mix %s", cases[i].in, c.weight_mix ? c.weight_mix->name : "none");
        CHECK(c.weight_type == cases[i].type);
    }
    /* A number alone is not a type name (llama-quantize's TYPE takes it only via mix:). */
    check_bad("weight_type=15", "weight_type: unknown type '15' (valid: the GGUF weight types F32 "
                                "F16 BF16 Q8_0 Q4_0 ... IQ1_M, INT8_ROW, Q8_0_XC)");
    /* Q4_KM is as near Q4_K as Q4_K_M; it shortens the file type, the likelier meaning. */
    check_bad("weight_type=Q4_KM", "weight_type: unknown type 'Q4_KM'; did you mean 'Q4_K_M'?");
    check_bad("weight_type=Q3_K_LL", "weight_type: unknown type 'Q3_K_LL'; did you mean 'Q3_K_L'?");
    check_bad("weight_type=mix:Q4_K_MM",
              "weight_type: unknown llama-quantize file type 'Q4_K_MM'; did you mean 'Q4_K_M'?");
    check_bad("weight_type=mix:INT8_ROW",
              "weight_type: unknown llama-quantize file type 'INT8_ROW' (file types: Q4_K_M, "
              "Q3_K_L, IQ3_M, ...; see qlab quantize --help)");

    /* With a mix, `same` is the mix's rule: a head type equal to the default type is
     * an override and stays; with a pure type it is `same`. */
    check_canon("weight_type=Q4_K_M head_type=Q4_K",
                "weight_type=Q4_K_M act_mode=f32 outlier_ratio=0 head_type=Q4_K embd_type=same "
                "kv_type=f32 imatrix=none budget=none");
    check_canon("weight_type=Q4_K head_type=Q4_K",
                "weight_type=Q4_K act_mode=f32 outlier_ratio=0 head_type=same embd_type=same "
                "kv_type=f32 imatrix=none budget=none");
    ql_config a, b;
    char ha[65], hb[65];
    CHECK_OK(ql_config_from_string("weight_type=Q6_K", &a, &err), &err);
    CHECK_OK(ql_config_from_string("weight_type=mix:Q6_K", &b, &err), &err);
    ql_config_hash(&a, ha);
    ql_config_hash(&b, hb);
    CHECK(strcmp(ha, hb) != 0);
    CHECK_OK(ql_config_validate(&b, NULL, &err), &err);
}

/* tensor_types: rules REGEX=TYPE in the policy's spelling, and what is wrong with a bad one. */
static void test_tensor_types(void)
{
    check_canon("weight_type=Q4_K tensor_types=ATTN_V=q8_0;blk\\.[01]\\.ffn_down=Q6_K",
                "weight_type=Q4_K act_mode=f32 outlier_ratio=0 head_type=same embd_type=same "
                "kv_type=f32 imatrix=none budget=none "
                "tensor_types=attn_v=Q8_0;blk\\.[01]\\.ffn_down=Q6_K");
    check_canon("weight_type=Q4_K tensor_types=NONE",
                "weight_type=Q4_K act_mode=f32 outlier_ratio=0 head_type=same embd_type=same "
                "kv_type=f32 imatrix=none budget=none");
    check_bad("tensor_types=attn_v", "tensor_types: rule 'attn_v' is not REGEX=TYPE");
    check_bad("tensor_types==Q8_0", "tensor_types: rule '=Q8_0' has an empty pattern");
    check_bad("tensor_types=attn_v=", "tensor_types: rule 'attn_v=' names no type");
    check_bad("tensor_types=attn_v=Q8_0;;ffn_up=Q4_0",
              "tensor_types: empty rule in 'attn_v=Q8_0;;ffn_up=Q4_0'");
    check_bad("tensor_types=attn_v=Q8_O",
              "tensor_types: rule 'attn_v=Q8_O': unknown type 'Q8_O'; did you mean 'Q8_0'?");
    check_bad("tensor_types=attn_v=Q8_K",
              "tensor_types: rule 'attn_v=Q8_K': Q8_K is an activation-only format (ggml has no "
              "matmul with it as the weight)");
    check_bad("tensor_types=attn_v=same",
              "tensor_types: rule 'attn_v=same': 'same' is only valid for head_type and embd_type");
    check_bad("tensor_types=(attn=Q8_0",
              "tensor_types: rule '(attn=Q8_0': regex '(attn': missing closing parenthesis at "
              "character 5");

    /* The rules as the policy reads them: first match wins. */
    ql_config c;
    ql_error err;
    CHECK_OK(ql_config_from_string("tensor_types=blk\\.0\\.attn_v=Q8_0;attn_v=Q4_0", &c, &err),
             &err);
    ql_quant_overrides *o = NULL;
    CHECK_OK(ql_config_overrides(&c, &o, &err), &err);
    CHECK_EQ_INT(ql_quant_overrides_count(o), 2);
    int rule = -2;
    CHECK_OK(ql_quant_overrides_match(o, "blk.0.attn_v.weight", &rule, &err), &err);
    CHECK_EQ_INT(rule, 0);
    CHECK_OK(ql_quant_overrides_match(o, "blk.1.attn_v.weight", &rule, &err), &err);
    CHECK_EQ_INT(rule, 1);
    CHECK(ql_quant_overrides_type(o, 1) == QL_TYPE_Q4_0);
    CHECK_OK(ql_quant_overrides_match(o, "blk.1.attn_q.weight", &rule, &err), &err);
    CHECK_EQ_INT(rule, -1);
    ql_quant_overrides_free(o);
    ql_config_init(&c);
    CHECK_OK(ql_config_overrides(&c, &o, &err), &err);
    CHECK(o == NULL);
}

/* The combinations that cannot run, each with the axis a sweep's error points at. */
static void test_cross_axis_rules(void)
{
    check_invalid("weight_type=mix:IQ2_S", QL_AXIS_WEIGHT_TYPE,
                  "weight_type IQ2_S needs an importance matrix (llama-quantize refuses the mix "
                  "without one), but imatrix is none");
    check_invalid("weight_type=Q2_K_S", QL_AXIS_WEIGHT_TYPE,
                  "weight_type Q2_K_S needs an importance matrix (llama-quantize refuses the mix "
                  "without one), but imatrix is none");
    check_invalid("weight_type=Q4_K tensor_types=attn_v=Q8_0;ffn_down=IQ2_XS", QL_AXIS_TENSOR_TYPES,
                  "tensor_types rule 'ffn_down=IQ2_XS': IQ2_XS needs an importance matrix (ggml "
                  "refuses to quantize it without one), but imatrix is none");
    check_invalid("weight_type=Q4_K_M embd_type=IQ1_S", QL_AXIS_EMBD_TYPE,
                  "embd_type IQ1_S needs an importance matrix (ggml refuses to quantize it "
                  "without one), but imatrix is none");
    check_invalid("weight_type=Q8_0 outlier_ratio=3", QL_AXIS_OUTLIER_RATIO,
                  "outlier_ratio 3 needs calibration statistics, which come from the calibration "
                  "pass of imatrix = calib:<text>, but imatrix is none");
    check_invalid("weight_type=Q8_0 outlier_ratio=6 imatrix=x.dat", QL_AXIS_OUTLIER_RATIO,
                  "outlier_ratio 6 needs calibration statistics, which come from the calibration "
                  "pass of imatrix = calib:<text>, but imatrix is a file");
    check_invalid("weight_type=Q4_K_M budget=bpw:4.5", QL_AXIS_WEIGHT_TYPE,
                  "budget bpw:4.5: weight_type caps the solver's types and must be a pure type, "
                  "not the mix Q4_K_M");
    check_invalid("weight_type=Q6_K head_type=Q8_0 budget=300000", QL_AXIS_HEAD_TYPE,
                  "budget 300000 lets the solver choose the head and embedding types too; use "
                  "head_type = same and embd_type = same");
    check_invalid("weight_type=Q6_K embd_type=Q8_0 budget=300000", QL_AXIS_EMBD_TYPE,
                  "budget 300000 lets the solver choose the head and embedding types too; use "
                  "head_type = same and embd_type = same");
    check_invalid("weight_type=Q6_K tensor_types=attn_v=Q8_0 budget=bpw:5", QL_AXIS_TENSOR_TYPES,
                  "budget bpw:5 lets the solver choose every tensor's type; tensor_types must be "
                  "none");
    check_invalid("weight_type=Q4_K quantizer=gptq", QL_AXIS_QUANTIZER,
                  "quantizer gptq takes its Hessians from the calibration text of imatrix = "
                  "calib:<text>, but imatrix is none");
    check_invalid("weight_type=IQ2_XS imatrix=calib:x quantizer=gptq:order=act",
                  QL_AXIS_QUANTIZER,
                  "quantizer gptq:order=act does not apply to IQ2_XS: a lattice codebook type: "
                  "its values are decoded in groups from a shared grid point, so one column "
                  "cannot be rounded alone");
    check_invalid("weight_type=TQ2_0 imatrix=calib:x quantizer=gptq", QL_AXIS_QUANTIZER,
                  "quantizer gptq does not apply to TQ2_0: a ternary type: its levels are fixed "
                  "at {-1, 0, 1} times one block maximum, there is no scale search to split");
    check_invalid("weight_type=Q4_K imatrix=calib:x quantizer=gptq budget=bpw:4 objective=kld",
                  QL_AXIS_QUANTIZER,
                  "quantizer gptq with objective kld is not implemented (the measured "
                  "sensitivities are those of ggml's rounding); objective imatrix fits on GPTQ's "
                  "output errors");
    /* And what runs. */
    const char *fine[] = {
        "weight_type=Q4_K imatrix=calib:x quantizer=gptq",
        "weight_type=Q3_K_M imatrix=calib:x quantizer=gptq:scales=static",
        "weight_type=Q4_K imatrix=calib:x quantizer=gptq budget=bpw:4",
        "weight_type=Q5_0 imatrix=calib:x quantizer=gptq outlier_ratio=3",
        "weight_type=IQ2_XS imatrix=calib:x quantizer=ggml",
        "weight_type=mix:IQ2_S imatrix=calib:x",
        "weight_type=Q4_K tensor_types=ffn_down=IQ2_XS imatrix=y.dat",
        "weight_type=Q8_0 outlier_ratio=3 imatrix=calib:x",
        "weight_type=Q4_K_M head_type=Q8_0 tensor_types=attn_v=Q8_0",
        "weight_type=Q6_K head_type=Q6_K budget=bpw:5",
        "weight_type=IQ4_XS",
    };
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        ql_config c;
        ql_error err;
        CHECK_OK(ql_config_from_string(fine[i], &c, &err), &err);
        CHECK_MSG(ql_config_validate(&c, NULL, &err) == QL_OK, "%s: %s", fine[i], err.msg);
    }
}

int main(void)
{
    test_defaults_and_pinned_hash();
    test_stored_hashes();
    test_axis_table();
    test_canonical_spelling();
    test_round_trip();
    test_errors();
    test_rules_and_capabilities();
    test_weight_type_set();
    test_mixes();
    test_tensor_types();
    test_cross_axis_rules();
    test_format_double();
    return qlt_done();
}
