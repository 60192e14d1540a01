/* qlab: whether a run measured the types its config names.
 *
 * A config names a weight type for the body's matmul weights and, optionally, types
 * for the LM head and the embeddings; a tensor whose rows do not split into a type's
 * blocks falls back to another type, so a config may measure
 * other types than it names. From the run's tensor records the store keeps the share
 * of each class's parameters that got the type asked for (applied_body, applied_head,
 * applied_embd, records.h) and its results views say what that means:
 *
 *   applies        'yes'      every class got its type on all its parameters
 *                  'partial'  some class got it on some of them only
 *                  'n/a'      some class got it on none: the config is not what its
 *                             label says; the report keeps it out of its comparison
 *                             tables, fronts and pairs and lists it apart
 *                  NULL       no tensor records
 *   types_used     the types the body got, by share of its parameters, then the
 *                  head's and the embeddings' when they fell back:
 *                  "IQ4_NL 86.5%, F16 13.5%; head Q4_0"
 *   fallback_note  why the largest tensor that fell back did
 *
 * This module reads them for a run and words them as a label. */
#ifndef QL_APPLICABILITY_H
#define QL_APPLICABILITY_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "experiment/records.h"
#include "results/store.h"

typedef enum {
    QL_APPLIES_UNKNOWN, /* no tensor records */
    QL_APPLIES_YES,
    QL_APPLIES_PARTIAL,
    QL_APPLIES_NONE, /* 'n/a' */
} ql_applies;

#define QL_APPLICABILITY_TEXT_MAX 512

typedef struct {
    ql_applies applies;
    double share[QL_TENSOR_AXES];            /* applied_body, _head, _embd; NAN = none */
    char types_used[QL_APPLICABILITY_TEXT_MAX]; /* "" when unknown */
    char fallback_note[QL_APPLICABILITY_TEXT_MAX];
} ql_applicability;

/* The applies column's text as the enum (NULL: unknown). */
ql_applies ql_applies_parse(const char *text);

/* A short word for the enum: "yes", "partial", "n/a", "" (unknown). */
const char *ql_applies_name(ql_applies a);

/* The applicability of a finished run (from the results view). QL_ENOTFOUND when
 * the run is not a finished one. */
ql_status ql_run_applicability(ql_store *s, int64_t run_id, ql_applicability *out, ql_error *err);

/* The label of a run's applicability, for tables next to the config's own label:
 * "" when its types applied (or nothing is known), "partial: Q4_K 60.0%, Q5_0 40.0%",
 * "n/a: IQ4_NL 86.5%, F16 13.5%" (the types used instead). Returns what snprintf
 * returns. */
int ql_applicability_label(const ql_applicability *a, char *buf, size_t size);

/* Both at once, for the sweep summary: the label of run_id into buf. */
ql_status ql_run_applicability_label(ql_store *s, int64_t run_id, char *buf, size_t size,
                                     ql_error *err);

#endif
