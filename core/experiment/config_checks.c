/* What a config may be: the values the pipeline implements (the capability table) and the
 * rules across axes (an imatrix for the types that need one, a budget's constraints...). */
#include "experiment/config_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "formats/quant_split.h"

/* ---------------------------------------------------------------- capabilities */

/* What the evaluation pipeline implements today. The issue that lands a mode
 * flips its entry; until then a sweep naming it is rejected before anything runs.
 * Type names are validated against the type table only: whether a format's
 * quantizer exists is checked when the sweep quantizes. */
static const ql_capability capabilities[] = {
    {QL_AXIS_WEIGHT_TYPE, "<type>", true},
    {QL_AXIS_WEIGHT_TYPE, "file:<path>", true},
    {QL_AXIS_ACT_MODE, "f32", true},
    {QL_AXIS_ACT_MODE, "native", true},
    {QL_AXIS_ACT_MODE, "q8_0", true},
    {QL_AXIS_ACT_MODE, "q8_1", true},
    {QL_AXIS_ACT_MODE, "q8_K", true},
    {QL_AXIS_ACT_MODE, "q8x2", true},
    {QL_AXIS_OUTLIER_RATIO, "0", true},
    {QL_AXIS_OUTLIER_RATIO, ">1", true},
    {QL_AXIS_HEAD_TYPE, "same", true},
    {QL_AXIS_HEAD_TYPE, "<type>", true},
    {QL_AXIS_EMBD_TYPE, "same", true},
    {QL_AXIS_EMBD_TYPE, "<type>", true},
    {QL_AXIS_KV_TYPE, "f32", true},
    {QL_AXIS_KV_TYPE, "f16", true},
    {QL_AXIS_KV_TYPE, "q8_0", true},
    {QL_AXIS_KV_TYPE, "q4_0", true},
    {QL_AXIS_IMATRIX, "none", true},
    {QL_AXIS_IMATRIX, "<path>", true},
    {QL_AXIS_IMATRIX, "calib:<dataset>", true},
    {QL_AXIS_BUDGET, "none", true},
    {QL_AXIS_BUDGET, "<bytes>", true},
    {QL_AXIS_BUDGET, "bpw:<x>", true},
    {QL_AXIS_BUDGET, "<type>", true},
    {QL_AXIS_TENSOR_TYPES, "none", true},
    {QL_AXIS_TENSOR_TYPES, "<rules>", true},
    {QL_AXIS_OBJECTIVE, "imatrix", true},
    {QL_AXIS_OBJECTIVE, "kld", true},
    {QL_AXIS_OBJECTIVE, "kld:<grouping>", true},
    {QL_AXIS_QUANTIZER, "ggml", true},
    {QL_AXIS_QUANTIZER, "gptq", true},
};

size_t ql_config_capabilities(const ql_capability **out)
{
    *out = capabilities;
    return sizeof capabilities / sizeof capabilities[0];
}

/* Sets *bad_axis and the message of a broken rule. */
static ql_status broken(ql_axis *bad_axis, ql_axis axis, ql_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static ql_status broken(ql_axis *bad_axis, ql_axis axis, ql_error *err, const char *fmt, ...)
{
    if (bad_axis)
        *bad_axis = axis;
    char msg[QL_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ql_error_set(err, QL_EFORMAT, "%s", msg);
}

/* The importance rules: types and mixes that cannot be made without an imatrix. */
static ql_status validate_imatrix(const ql_config *c, ql_axis *bad_axis, ql_error *err)
{
    if (c->imatrix_kind != QL_IMATRIX_NONE)
        return QL_OK;
    if (c->weight_mix && c->weight_mix->needs_imatrix)
        return broken(bad_axis, QL_AXIS_WEIGHT_TYPE, err,
                      "weight_type %s needs an importance matrix (llama-quantize refuses the mix "
                      "without one), but imatrix is none",
                      c->weight_mix->name);
    const struct {
        ql_axis axis;
        ql_type type;
    } roles[] = {
        {QL_AXIS_WEIGHT_TYPE, c->weight_mix ? QL_TYPE_SAME : c->weight_type},
        {QL_AXIS_HEAD_TYPE, config_role_is_same(c, c->head_type) ? QL_TYPE_SAME : c->head_type},
        {QL_AXIS_EMBD_TYPE, config_role_is_same(c, c->embd_type) ? QL_TYPE_SAME : c->embd_type},
    };
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        const ql_type_traits *t = ql_type_get(roles[i].type);
        if (t && t->requires_imatrix)
            return broken(bad_axis, roles[i].axis, err,
                          "%s %s needs an importance matrix (ggml refuses to quantize it without "
                          "one), but imatrix is none",
                          config_axis_names[roles[i].axis], t->name);
    }
    if (!c->tensor_types[0])
        return QL_OK;
    char text[QL_CONFIG_RECIPE_MAX];
    ql_strlcpy(text, c->tensor_types, sizeof text);
    for (char *rule = text; rule;) {
        char *next = strchr(rule, CONFIG_RULE_SEP);
        if (next)
            *next++ = '\0';
        const ql_type_traits *t = ql_type_by_name(strrchr(rule, '=') + 1);
        if (t && t->requires_imatrix)
            return broken(bad_axis, QL_AXIS_TENSOR_TYPES, err,
                          "tensor_types rule '%s': %s needs an importance matrix (ggml refuses to "
                          "quantize it without one), but imatrix is none",
                          rule, t->name);
        rule = next;
    }
    return QL_OK;
}

/* A file config: the file decides every tensor, so no axis may say how to quantize. */
static ql_status validate_file(const ql_config *c, ql_axis *bad_axis, ql_error *err)
{
    ql_config d;
    ql_config_init(&d);
    const ql_axis weight_axes[] = {QL_AXIS_OUTLIER_RATIO, QL_AXIS_HEAD_TYPE, QL_AXIS_EMBD_TYPE,
                                   QL_AXIS_IMATRIX,       QL_AXIS_BUDGET,    QL_AXIS_TENSOR_TYPES,
                                   QL_AXIS_OBJECTIVE,     QL_AXIS_QUANTIZER};
    for (size_t i = 0; i < sizeof weight_axes / sizeof weight_axes[0]; i++) {
        char v[QL_CONFIG_VALUE_MAX], dv[QL_CONFIG_VALUE_MAX];
        ql_config_axis_string(c, weight_axes[i], v, sizeof v);
        ql_config_axis_string(&d, weight_axes[i], dv, sizeof dv);
        if (strcmp(v, dv) != 0)
            return broken(bad_axis, weight_axes[i], err,
                          "%s %s: weight_type file:%s takes every tensor as the file has it; "
                          "%s must be %s (put the file in a [grid] of its own)",
                          config_axis_names[weight_axes[i]], v, c->weight_file, config_axis_names[weight_axes[i]],
                          dv);
    }
    return QL_OK;
}

ql_status ql_config_validate(const ql_config *c, ql_axis *bad_axis, ql_error *err)
{
    if (c->weight_file[0])
        return validate_file(c, bad_axis, err);
    ql_status st = validate_imatrix(c, bad_axis, err);
    if (st != QL_OK)
        return st;
    char v[QL_CONFIG_VALUE_MAX];
    if (c->outlier_ratio > 0 && c->imatrix_kind != QL_IMATRIX_CALIB) {
        ql_config_axis_string(c, QL_AXIS_OUTLIER_RATIO, v, sizeof v);
        return broken(bad_axis, QL_AXIS_OUTLIER_RATIO, err,
                      "outlier_ratio %s needs calibration statistics, which come from the "
                      "calibration pass of imatrix = calib:<text>, but imatrix is %s",
                      v, c->imatrix_kind == QL_IMATRIX_NONE ? "none" : "a file");
    }
    if (c->objective == QL_OBJECTIVE_KLD && c->budget_kind == QL_BUDGET_NONE)
        return broken(bad_axis, QL_AXIS_OBJECTIVE, err,
                      "objective kld is what a budget's solver minimises; give a budget");
    if (c->objective == QL_OBJECTIVE_KLD && c->imatrix_kind != QL_IMATRIX_CALIB)
        return broken(bad_axis, QL_AXIS_OBJECTIVE, err,
                      "objective kld measures each tensor's sensitivity on the calibration text "
                      "of imatrix = calib:<text>, but imatrix is %s",
                      c->imatrix_kind == QL_IMATRIX_NONE ? "none" : "a file");
    if (c->quantizer_gptq) {
        ql_config_axis_string(c, QL_AXIS_QUANTIZER, v, sizeof v);
        if (c->imatrix_kind != QL_IMATRIX_CALIB)
            return broken(bad_axis, QL_AXIS_QUANTIZER, err,
                          "quantizer %s takes its Hessians from the calibration text of imatrix "
                          "= calib:<text>, but imatrix is %s",
                          v, c->imatrix_kind == QL_IMATRIX_NONE ? "none" : "a file");
        if (!c->weight_mix && !ql_split_applies(c->weight_type))
            return broken(bad_axis, QL_AXIS_QUANTIZER, err,
                          "quantizer %s does not apply to %s: %s", v,
                          ql_type_name(c->weight_type), ql_split_why_not(c->weight_type));
        if (c->objective == QL_OBJECTIVE_KLD)
            return broken(bad_axis, QL_AXIS_QUANTIZER, err,
                          "quantizer %s with objective kld is not implemented (the measured "
                          "sensitivities are those of ggml's rounding); objective imatrix fits "
                          "on GPTQ's output errors",
                          v);
    }
    if (c->budget_kind == QL_BUDGET_NONE)
        return QL_OK;
    /* A budget: the exact-fit solver chooses every tensor's type up to weight_type. */
    ql_config_axis_string(c, QL_AXIS_BUDGET, v, sizeof v);
    if (c->weight_mix)
        return broken(bad_axis, QL_AXIS_WEIGHT_TYPE, err,
                      "budget %s: weight_type caps the solver's types and must be a pure type, "
                      "not the mix %s",
                      v, c->weight_mix->name);
    if (!config_role_is_same(c, c->head_type) || !config_role_is_same(c, c->embd_type))
        return broken(bad_axis,
                      !config_role_is_same(c, c->head_type) ? QL_AXIS_HEAD_TYPE : QL_AXIS_EMBD_TYPE, err,
                      "budget %s lets the solver choose the head and embedding types too; use "
                      "head_type = same and embd_type = same",
                      v);
    if (c->tensor_types[0])
        return broken(bad_axis, QL_AXIS_TENSOR_TYPES, err,
                      "budget %s lets the solver choose every tensor's type; tensor_types must be "
                      "none",
                      v);
    return QL_OK;
}

ql_status ql_config_check_axis(const ql_config *c, ql_axis axis, ql_error *err)
{
    QL_ASSERT(axis >= 0 && axis < QL_AXIS_COUNT);
    const char *cls = config_axes[axis].value_class(c);
    for (size_t i = 0; i < sizeof capabilities / sizeof capabilities[0]; i++) {
        if (capabilities[i].axis != axis || strcmp(capabilities[i].value, cls) != 0)
            continue;
        if (capabilities[i].implemented)
            return QL_OK;
        char val[QL_CONFIG_VALUE_MAX];
        ql_config_axis_string(c, axis, val, sizeof val);
        if (axis == QL_AXIS_KV_TYPE && c->kv_type == QL_KV_AUTO)
            return ql_error_set(err, QL_EUNSUPPORTED,
                                "kv_type %s (implied by act_mode %s) is not implemented yet", val,
                                ql_act_mode_name(c->act_mode));
        return ql_error_set(err, QL_EUNSUPPORTED, "%s %s is not implemented yet", config_axis_names[axis],
                            val);
    }
    QL_ASSERT(!"axis value missing from the capability table");
    return QL_EINVAL;
}

ql_status ql_config_check_implemented(const ql_config *c, ql_error *err)
{
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        ql_status st = ql_config_check_axis(c, (ql_axis)a, err);
        if (st != QL_OK)
            return st;
    }
    return QL_OK;
}
