/* The types each config's tensors got, by class, from the stored tensor records
 * (types_table.h). */
#include "results/types_table.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/tensor_name.h"

/* ================================================================ classes */

/* A transformer's tensor classes in the order of its computation. */
static const char *const class_order[] = {"token_embd", "attn_q",      "attn_k",   "attn_v",
                                          "attn_qkv",   "attn_output", "ffn_gate", "ffn_up",
                                          "ffn_down",   "output"};
#define N_ORDERED (sizeof class_order / sizeof class_order[0])

void ql_tensor_class(const char *name, char *buf, size_t size)
{
    const char *p;
    ql_tensor_block(name, &p);
    size_t n = strlen(p);
    if (n > 7 && strcmp(p + n - 7, ".weight") == 0)
        n -= 7;
    snprintf(buf, size, "%.*s", (int)n, p);
}

int ql_tensor_class_rank(const char *cls)
{
    for (size_t i = 0; i < N_ORDERED; i++)
        if (strcmp(cls, class_order[i]) == 0)
            return (int)i;
    return (int)N_ORDERED;
}

/* ================================================================ data */

#define CLASS_MAX 64
#define TYPE_MAX  32

typedef struct {
    char *tensor, *cls, *requested, *used, *choice, *reason; /* choice, reason may be NULL */
    int64_t layer;                                           /* -1 outside the blocks */
} tensor_rec;

typedef struct {
    char *label, *hash;
    tensor_rec *tensors;
    size_t n, cap;
} run_rows;

struct ql_types_table {
    run_rows *runs; /* only runs with records */
    size_t n_runs;
    char (*classes)[CLASS_MAX]; /* every class of any run, in report order */
    size_t n_classes;
};

static ql_status oom(ql_error *err)
{
    return ql_error_set(err, QL_ENOMEM, "report: out of memory for the tensor types");
}

static void run_free(run_rows *r)
{
    for (size_t i = 0; i < r->n; i++) {
        tensor_rec *t = &r->tensors[i];
        free(t->tensor);
        free(t->cls);
        free(t->requested);
        free(t->used);
        free(t->choice);
        free(t->reason);
    }
    free(r->tensors);
    free(r->label);
    free(r->hash);
}

void ql_types_table_free(ql_types_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_runs; i++)
        run_free(&t->runs[i]);
    free(t->runs);
    free(t->classes);
    free(t);
}

bool ql_types_table_empty(const ql_types_table *t)
{
    return !t || t->n_runs == 0;
}

/* A text column as a heap string; NULL stays NULL (*ok false when out of memory). */
static char *col_text(sqlite3_stmt *st, int i, bool *ok)
{
    const char *v = (const char *)sqlite3_column_text(st, i);
    if (!v)
        return NULL;
    char *s = ql_strdup(v);
    *ok = *ok && s;
    return s;
}

static int cmp_class(const void *pa, const void *pb)
{
    const char *a = pa, *b = pb;
    int ra = ql_tensor_class_rank(a), rb = ql_tensor_class_rank(b);
    if (ra != rb)
        return ra < rb ? -1 : 1;
    return strcmp(a, b);
}

/* Adds a class to the table's list unless it is there. */
static ql_status add_class(ql_types_table *t, size_t *cap, const char *cls, ql_error *err)
{
    for (size_t i = 0; i < t->n_classes; i++)
        if (strcmp(t->classes[i], cls) == 0)
            return QL_OK;
    if (!ql_grow((void **)&t->classes, cap, t->n_classes + 1, sizeof *t->classes))
        return oom(err);
    ql_strlcpy(t->classes[t->n_classes++], cls, CLASS_MAX);
    return QL_OK;
}

ql_status ql_types_table_load(ql_store *s, const int64_t *run_ids, const char *const *labels,
                              const char *const *hashes, size_t n, ql_types_table **out,
                              ql_error *err)
{
    /* Model order: the embeddings, the blocks by layer, then the rest (the head). */
    static const char sql[] =
        "SELECT tensor, layer, requested_type, used_type, choice, fallback_reason"
        " FROM tensor_errors WHERE run_id = ?1"
        " ORDER BY CASE WHEN layer IS NOT NULL THEN 1 WHEN tensor LIKE 'token_embd.%' THEN 0"
        " ELSE 2 END, layer, tensor";
    *out = NULL;
    ql_types_table *t = calloc(1, sizeof *t);
    if (!t || (n && !(t->runs = calloc(n, sizeof *t->runs)))) {
        free(t);
        return oom(err);
    }
    sqlite3_stmt *st = NULL;
    size_t class_cap = 0;
    ql_status rc = ql_store_prepare(s, sql, &st, NULL, "report: reading the tensor types", err);
    for (size_t k = 0; k < n && !rc; k++) {
        run_rows *r = &t->runs[t->n_runs];
        memset(r, 0, sizeof *r);
        sqlite3_reset(st);
        if ((rc = ql_store_bind_int64(s, st, 1, run_ids[k], "report: reading the tensor types",
                                      err)))
            break;
        for (;;) {
            bool more;
            if ((rc = ql_store_step(s, st, &more, "report: reading the tensor types", err)) ||
                !more)
                break;
            if (!ql_grow((void **)&r->tensors, &r->cap, r->n + 1, sizeof *r->tensors)) {
                rc = oom(err);
                break;
            }
            tensor_rec *te = &r->tensors[r->n++];
            memset(te, 0, sizeof *te);
            bool ok = true;
            te->tensor = col_text(st, 0, &ok);
            te->layer =
                sqlite3_column_type(st, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 1);
            te->requested = col_text(st, 2, &ok);
            te->used = col_text(st, 3, &ok);
            te->choice = col_text(st, 4, &ok);
            te->reason = col_text(st, 5, &ok);
            char cls[CLASS_MAX];
            ql_tensor_class(te->tensor ? te->tensor : "", cls, sizeof cls);
            if (!ok || !te->tensor || !te->requested || !te->used || !(te->cls = ql_strdup(cls))) {
                rc = oom(err);
                break;
            }
            if ((rc = add_class(t, &class_cap, cls, err)))
                break;
        }
        if (!rc && r->n == 0) {
            run_free(r); /* no records: no row */
            continue;
        }
        t->n_runs++;
        if (!rc && (!(r->label = ql_strdup(labels[k])) || !(r->hash = ql_strdup(hashes[k]))))
            rc = oom(err);
    }
    sqlite3_finalize(st);
    if (rc) {
        ql_types_table_free(t);
        return rc;
    }
    if (t->n_classes) /* qsort wants a non-null base even for no elements */
        qsort(t->classes, t->n_classes, sizeof *t->classes, cmp_class);
    *out = t;
    return QL_OK;
}

/* ================================================================ report.md */

typedef struct {
    char type[TYPE_MAX];
    int count;
} type_count;

static int cmp_count(const void *pa, const void *pb)
{
    const type_count *a = pa, *b = pb;
    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    return strcmp(a->type, b->type);
}

/* The cell of one class of one run: its type, or each type ×count; NULL (missing)
 * when the run has no tensor of the class. */
static ql_status class_cell(const run_rows *r, const char *cls, ql_table *tab, ql_error *err)
{
    type_count *counts = calloc(r->n, sizeof *counts);
    if (!counts)
        return oom(err);
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (strcmp(r->tensors[i].cls, cls) != 0)
            continue;
        size_t k = 0;
        while (k < n && strcmp(counts[k].type, r->tensors[i].used) != 0)
            k++;
        if (k == n)
            ql_strlcpy(counts[n++].type, r->tensors[i].used, TYPE_MAX);
        counts[k].count++;
    }
    ql_status rc;
    if (n == 0) {
        rc = ql_table_put(tab, NULL, err);
    } else if (n == 1) {
        rc = ql_table_put(tab, counts[0].type, err);
    } else {
        qsort(counts, n, sizeof *counts, cmp_count);
        char cell[512];
        size_t o = 0;
        for (size_t k = 0; k < n && o < sizeof cell; k++)
            o += (size_t)snprintf(cell + o, sizeof cell - o, "%s%s ×%d", k ? " / " : "",
                                  counts[k].type, counts[k].count);
        rc = ql_table_put(tab, cell, err);
    }
    free(counts);
    return rc;
}

ql_status ql_types_table_write_md(const ql_types_table *t, FILE *out, const char *null_text,
                                  ql_error *err)
{
    if (ql_types_table_empty(t))
        return QL_OK;
    size_t ncol = 1 + t->n_classes + 1;
    ql_table_column *cols = calloc(ncol, sizeof *cols);
    if (!cols)
        return oom(err);
    cols[0] = (ql_table_column){"config", NULL, false};
    for (size_t c = 0; c < t->n_classes; c++)
        cols[1 + c] = (ql_table_column){t->classes[c], NULL, false};
    cols[ncol - 1] = (ql_table_column){"fallbacks", NULL, true};
    ql_table *tab = ql_table_alloc(cols, ncol);
    free(cols);
    if (!tab)
        return oom(err);
    ql_status rc = QL_OK;
    for (size_t i = 0; i < t->n_runs && !rc; i++) {
        const run_rows *r = &t->runs[i];
        if ((rc = ql_table_row(tab, err)) || (rc = ql_table_put(tab, r->label, err)))
            break;
        for (size_t c = 0; c < t->n_classes && !rc; c++)
            rc = class_cell(r, t->classes[c], tab, err);
        size_t fell = 0;
        for (size_t k = 0; k < r->n; k++)
            fell += strcmp(r->tensors[k].requested, r->tensors[k].used) != 0;
        if (!rc)
            rc = ql_table_putf(tab, err, "%zu of %zu", fell, r->n);
    }
    if (!rc) {
        fprintf(out, "\nTensor types (the type each class got; ×N counts the tensors of a mixed "
                     "class; the rule behind every tensor is in tensor-types.csv):\n\n");
        ql_table_write_md(tab, out, null_text);
    }
    ql_table_free(tab);
    return rc;
}

/* ================================================================ tensor-types.csv */

static const ql_table_column csv_columns[] = {
    {"config_hash", NULL, false}, {"config", NULL, false}, {"tensor", NULL, false},
    {"class", NULL, false},       {"layer", NULL, true},   {"requested_type", NULL, false},
    {"used_type", NULL, false},   {"choice", NULL, false}, {"fallback_reason", NULL, false},
};

size_t ql_types_table_csv_columns(const ql_table_column **out)
{
    *out = csv_columns;
    return sizeof csv_columns / sizeof csv_columns[0];
}

ql_status ql_types_table_csv_rows(const ql_types_table *t, ql_table *csv, const char *const *prefix,
                                  size_t n_prefix, ql_error *err)
{
    ql_status rc = QL_OK;
    for (size_t i = 0; t && i < t->n_runs && !rc; i++) {
        const run_rows *r = &t->runs[i];
        for (size_t k = 0; k < r->n && !rc; k++) {
            const tensor_rec *te = &r->tensors[k];
            if ((rc = ql_table_row(csv, err)))
                break;
            for (size_t p = 0; p < n_prefix && !rc; p++)
                rc = ql_table_put(csv, prefix[p], err);
            if (rc || (rc = ql_table_put(csv, r->hash, err)) ||
                (rc = ql_table_put(csv, r->label, err)) ||
                (rc = ql_table_put(csv, te->tensor, err)) || (rc = ql_table_put(csv, te->cls, err)))
                break;
            if (te->layer >= 0)
                rc = ql_table_putf(csv, err, "%lld", (long long)te->layer);
            else
                rc = ql_table_put(csv, NULL, err);
            if (rc || (rc = ql_table_put(csv, te->requested, err)) ||
                (rc = ql_table_put(csv, te->used, err)) ||
                (rc = ql_table_put(csv, te->choice, err)))
                break;
            rc = ql_table_put(csv, te->reason, err);
        }
    }
    return rc;
}
