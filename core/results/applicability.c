/* Whether a run measured the types its config names (applicability.h). */
#include "results/applicability.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"

ql_applies ql_applies_parse(const char *text)
{
    if (!text)
        return QL_APPLIES_UNKNOWN;
    if (strcmp(text, "yes") == 0)
        return QL_APPLIES_YES;
    if (strcmp(text, "partial") == 0)
        return QL_APPLIES_PARTIAL;
    if (strcmp(text, "n/a") == 0)
        return QL_APPLIES_NONE;
    return QL_APPLIES_UNKNOWN;
}

const char *ql_applies_name(ql_applies a)
{
    switch (a) {
    case QL_APPLIES_YES:
        return "yes";
    case QL_APPLIES_PARTIAL:
        return "partial";
    case QL_APPLIES_NONE:
        return "n/a";
    case QL_APPLIES_UNKNOWN:
        break;
    }
    return "";
}

static double col_or_nan(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? (double)NAN : sqlite3_column_double(st, i);
}

static void col_text(sqlite3_stmt *st, int i, char *buf, size_t size)
{
    const char *t = (const char *)sqlite3_column_text(st, i);
    ql_strlcpy(buf, t ? t : "", size);
}

ql_status ql_run_applicability(ql_store *s, int64_t run_id, ql_applicability *out, ql_error *err)
{
    memset(out, 0, sizeof *out);
    for (int c = 0; c < QL_TENSOR_AXES; c++)
        out->share[c] = (double)NAN;
    sqlite3_stmt *st;
    ql_status rc = ql_store_prepare(s,
                                    "SELECT applies, applied_body, applied_head, applied_embd,"
                                    " types_used, fallback_note FROM results WHERE run_id = ?1",
                                    &st, NULL, "reading a run's applicability", err);
    if (rc)
        return rc;
    bool row = false;
    if ((rc = ql_store_bind_int64(s, st, 1, run_id, "reading a run's applicability", err)) ||
        (rc = ql_store_step(s, st, &row, "reading a run's applicability", err)))
        goto out;
    if (!row) {
        rc = ql_error_set(err, QL_ENOTFOUND, "%s: no finished run %lld", ql_store_path(s),
                          (long long)run_id);
        goto out;
    }
    out->applies = ql_applies_parse((const char *)sqlite3_column_text(st, 0));
    out->share[QL_TENSOR_BODY] = col_or_nan(st, 1);
    out->share[QL_TENSOR_HEAD] = col_or_nan(st, 2);
    out->share[QL_TENSOR_EMBD] = col_or_nan(st, 3);
    col_text(st, 4, out->types_used, sizeof out->types_used);
    col_text(st, 5, out->fallback_note, sizeof out->fallback_note);
out:
    sqlite3_finalize(st);
    return rc;
}

int ql_applicability_label(const ql_applicability *a, char *buf, size_t size)
{
    switch (a->applies) {
    case QL_APPLIES_PARTIAL:
    case QL_APPLIES_NONE:
        return snprintf(buf, size, "%s: %s", ql_applies_name(a->applies), a->types_used);
    case QL_APPLIES_YES:
    case QL_APPLIES_UNKNOWN:
        break;
    }
    return snprintf(buf, size, "%s", "");
}

ql_status ql_run_applicability_label(ql_store *s, int64_t run_id, char *buf, size_t size,
                                     ql_error *err)
{
    ql_applicability a;
    ql_status rc = ql_run_applicability(s, run_id, &a, err);
    if (!rc)
        ql_applicability_label(&a, buf, size);
    return rc;
}
