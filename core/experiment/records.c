/* Run records: the metric list as a table, and "not measured" everywhere before
 * anything is measured. */
#include "experiment/records.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/table.h"
#include "base/util.h"

/* ---------------------------------------------------------------- the metric table */

/* The SQL of a DERIVED metric, the field offset of a stored one. */
#define SQL_REAL(source)     NULL
#define SQL_COUNT(source)    NULL
#define SQL_DERIVED(source)  source
#define OFFSET_REAL(name)    offsetof(ql_run_metrics, name)
#define OFFSET_COUNT(name)   offsetof(ql_run_metrics, name)
#define OFFSET_DERIVED(name) ((size_t)-1)

#define INFO(n, k, since_, src, pos_, label_, show_, format_, digits_, flags_, note_)              \
    [QL_METRIC_##n] = {.name = #n,                                                                 \
                       .kind = QL_METRIC_KIND_##k,                                                 \
                       .since = since_,                                                            \
                       .sql = SQL_##k(src),                                                        \
                       .offset = OFFSET_##k(n),                                                    \
                       .pos = pos_,                                                                \
                       .label = label_,                                                            \
                       .show = QL_METRIC_SHOW_##show_,                                             \
                       .format = format_,                                                          \
                       .digits = digits_,                                                          \
                       .flags = flags_,                                                            \
                       .note = note_},
static const ql_metric_info table[QL_N_METRICS] = {QL_RUN_METRICS(INFO)};
#undef INFO

/* What the compiler can check of every metric: the SQL of a derived one (a
 * source of a stored one is checked where the figures are copied: QL_METRIC_FROM_*),
 * a schema version, and a place for every output it is in. */
#define SOURCE_REAL(source)
#define SOURCE_COUNT(source)
#define SOURCE_DERIVED(source) _Static_assert(sizeof(source) > 1, "a derived metric needs its SQL");
#define CHECK(name, kind, since, source, pos, label, show, format, digits, flags, note)            \
    SOURCE_##kind(source) _Static_assert((since) >= 1, #name ": schema versions start at 1");      \
    _Static_assert((pos) > 0 || ((flags) & (QL_METRIC_CSV | QL_METRIC_SUMMARY)) == 0,              \
                   #name ": a metric in the CSV or the summary needs a place (pos)");              \
    _Static_assert((pos) > 0 || (digits) < 0, #name ": a metric in the query needs a place");
QL_RUN_METRICS(CHECK)
#undef CHECK

/* One formatter per metric, so that the compiler checks each format against its
 * double. */
#define FORMATTER(name, kind, since, source, pos, label, show, format, ...)                        \
    static int format_##name(char *buf, size_t size, double v)                                     \
    {                                                                                              \
        return snprintf(buf, size, format, v);                                                     \
    }
QL_RUN_METRICS(FORMATTER)
#undef FORMATTER

static int (*const formatters[QL_N_METRICS])(char *, size_t, double) = {
#define FORMATTER_REF(name, ...) [QL_METRIC_##name] = format_##name,
    QL_RUN_METRICS(FORMATTER_REF)
#undef FORMATTER_REF
};

size_t ql_metrics(const ql_metric_info **out)
{
    *out = table;
    return QL_N_METRICS;
}

const ql_metric_info *ql_metric_get(ql_metric_id id)
{
    QL_ASSERT(id >= 0 && id < QL_N_METRICS);
    return &table[id];
}

const ql_metric_info *ql_metric_find(const char *name)
{
    for (size_t i = 0; i < QL_N_METRICS; i++)
        if (strcmp(table[i].name, name) == 0)
            return &table[i];
    return NULL;
}

size_t ql_metrics_reported(ql_metric_id out[QL_N_METRICS])
{
    /* Insertion sort by pos: a few dozen entries. */
    size_t n = 0;
    for (int m = 0; m < QL_N_METRICS; m++) {
        if (table[m].pos <= 0)
            continue;
        size_t k = n++;
        while (k > 0 && table[out[k - 1]].pos > table[m].pos) {
            out[k] = out[k - 1];
            k--;
        }
        out[k] = (ql_metric_id)m;
    }
    return n;
}

int ql_metric_format(ql_metric_id id, double v, char *buf, size_t size)
{
    const ql_metric_info *mi = ql_metric_get(id);
    if (isnan(v))
        return snprintf(buf, size, "%s", "");
    switch (mi->show) {
    case QL_METRIC_SHOW_PCT:
        return formatters[id](buf, size, 100.0 * v);
    case QL_METRIC_SHOW_BYTES: {
        char tmp[64];
        return snprintf(buf, size, "%s", ql_fmt_bytes(v, tmp, sizeof tmp));
    }
    case QL_METRIC_SHOW_NUM:
        break;
    }
    return formatters[id](buf, size, v);
}

double ql_run_metric(const ql_run_metrics *m, ql_metric_id id)
{
    const ql_metric_info *mi = ql_metric_get(id);
    if (mi->kind == QL_METRIC_KIND_DERIVED)
        return (double)NAN;
    double v;
    memcpy(&v, (const char *)m + mi->offset, sizeof v);
    return v;
}

/* ---------------------------------------------------------------- init */

void ql_run_metrics_init(ql_run_metrics *m)
{
#define SET_NAN(name, kind, ...) SET_NAN_##kind(name)
#define SET_NAN_REAL(name)       m->name = (double)NAN;
#define SET_NAN_COUNT(name)      m->name = (double)NAN;
#define SET_NAN_DERIVED(name)
    QL_RUN_METRICS(SET_NAN)
#undef SET_NAN
}

void ql_run_timing_init(ql_run_timing *t)
{
    t->seconds = t->quantize_seconds = t->ref_seconds = t->forward_seconds =
        t->forward_alone_seconds = (double)NAN;
}

/* ---------------------------------------------------------------- tensor classes */

/* The GGUF names of the two tensors outside the body. */
#define HEAD_TENSOR "output.weight"
#define EMBD_TENSOR "token_embd.weight"

ql_tensor_axis ql_tensor_axis_of(const char *name)
{
    if (strcmp(name, HEAD_TENSOR) == 0)
        return QL_TENSOR_HEAD;
    if (strcmp(name, EMBD_TENSOR) == 0)
        return QL_TENSOR_EMBD;
    return QL_TENSOR_BODY;
}

void ql_tensor_shares(const ql_tensor_record *t, size_t n, double share[QL_TENSOR_AXES])
{
    double all[QL_TENSOR_AXES] = {0}, got[QL_TENSOR_AXES] = {0};
    bool seen[QL_TENSOR_AXES] = {false};
    for (size_t i = 0; i < n; i++) {
        ql_tensor_axis c = ql_tensor_axis_of(t[i].tensor ? t[i].tensor : "");
        seen[c] = true;
        all[c] += (double)t[i].params;
        if (t[i].used_type == t[i].requested_type)
            got[c] += (double)t[i].params;
    }
    for (int c = 0; c < QL_TENSOR_AXES; c++)
        share[c] = !seen[c] ? (double)NAN : all[c] > 0 ? got[c] / all[c] : 1.0;
}
