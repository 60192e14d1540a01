/* Importance matrices: the in-memory form, llama.cpp's legacy .dat and GGUF
 * imatrix files, and the per-column importance a quantizer gets. See imatrix_io.h
 * for both layouts. */
#include "model/imatrix_io.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "formats/types.h"
#include "model/gguf.h"

/* A count beyond 2^53 would not survive the trip through a double; no real
 * calibration run comes near (2^53 tokens). */
#define MAX_COUNT (1ll << 53)

/* ========================================================================= */
/* Lifetime and building                                                      */

static void entry_deinit(ql_imatrix_entry *e)
{
    free(e->name);
    free(e->sums);
    free(e->in_sum);
    free(e->counts);
    memset(e, 0, sizeof *e);
}

ql_status ql_imatrix_alloc(ql_imatrix **out, ql_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return ql_error_set(err, QL_ENOMEM, "out of memory for an importance matrix");
    return QL_OK;
}

void ql_imatrix_free(ql_imatrix *im)
{
    if (!im)
        return;
    for (int64_t i = 0; i < im->n_entries; i++)
        entry_deinit(&im->entries[i]);
    free(im->entries);
    for (int64_t i = 0; i < im->n_datasets; i++)
        free(im->datasets[i]);
    free(im->datasets);
    for (int64_t i = 0; i < im->n_dropped; i++)
        free(im->dropped[i]);
    free(im->dropped);
    free(im->path);
    free(im);
}

const ql_imatrix_entry *ql_imatrix_find(const ql_imatrix *im, const char *tensor_name)
{
    for (int64_t i = 0; i < im->n_entries; i++)
        if (strcmp(im->entries[i].name, tensor_name) == 0)
            return &im->entries[i];
    return NULL;
}

ql_status ql_imatrix_add_entry(ql_imatrix *im, const char *name, int64_t n_values, int64_t n_mat,
                               bool with_in_sum, ql_imatrix_entry **out, ql_error *err)
{
    if (out)
        *out = NULL;
    size_t len = strlen(name);
    if (len == 0 || len > QL_IMATRIX_NAME_MAX)
        return ql_error_set(err, QL_EINVAL, "imatrix entry name '%s' is %zu bytes, expected 1..%d",
                            name, len, QL_IMATRIX_NAME_MAX);
    if (n_mat < 1 || n_values < n_mat || n_values % n_mat != 0 ||
        n_values > (int64_t)(SIZE_MAX / 2 / sizeof(float)))
        return ql_error_set(err, QL_EINVAL,
                            "imatrix entry '%s': %lld values for %lld matrices, expected a "
                            "positive multiple",
                            name, (long long)n_values, (long long)n_mat);
    if (ql_imatrix_find(im, name))
        return ql_error_set(err, QL_EINVAL, "imatrix entry '%s' already exists", name);
    if (im->n_entries == im->cap_entries) {
        int64_t cap = im->cap_entries ? 2 * im->cap_entries : 64;
        ql_imatrix_entry *ne = realloc(im->entries, (size_t)cap * sizeof *ne);
        if (!ne)
            return ql_error_set(err, QL_ENOMEM, "out of memory adding imatrix entry '%s'", name);
        im->entries = ne;
        im->cap_entries = cap;
    }
    ql_imatrix_entry *e = &im->entries[im->n_entries];
    memset(e, 0, sizeof *e);
    e->name = ql_strdup(name);
    e->sums = calloc((size_t)n_values, sizeof *e->sums);
    e->counts = calloc((size_t)n_mat, sizeof *e->counts);
    e->in_sum = with_in_sum ? calloc((size_t)n_values, sizeof *e->in_sum) : NULL;
    if (!e->name || !e->sums || !e->counts || (with_in_sum && !e->in_sum)) {
        entry_deinit(e);
        return ql_error_set(err, QL_ENOMEM, "out of memory for imatrix entry '%s' (%lld values)",
                            name, (long long)n_values);
    }
    e->n_values = n_values;
    e->n_mat = n_mat;
    im->n_entries++;
    if (out)
        *out = e;
    return QL_OK;
}

ql_status ql_imatrix_add_dataset(ql_imatrix *im, const char *name, ql_error *err)
{
    char **nd = realloc(im->datasets, (size_t)(im->n_datasets + 1) * sizeof *nd);
    if (!nd)
        return ql_error_set(err, QL_ENOMEM, "out of memory adding dataset '%s'", name);
    im->datasets = nd;
    nd[im->n_datasets] = ql_strdup(name);
    if (!nd[im->n_datasets])
        return ql_error_set(err, QL_ENOMEM, "out of memory adding dataset '%s'", name);
    im->n_datasets++;
    return QL_OK;
}

void ql_imatrix_drop_empty(ql_imatrix *im)
{
    int64_t kept = 0;
    for (int64_t i = 0; i < im->n_entries; i++) {
        ql_imatrix_entry *e = &im->entries[i];
        bool any = false;
        for (int64_t m = 0; m < e->n_mat; m++)
            any = any || e->counts[m] > 0;
        if (any)
            im->entries[kept++] = *e;
        else
            entry_deinit(e);
    }
    im->n_entries = kept;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const ql_imatrix_entry *)a)->name, ((const ql_imatrix_entry *)b)->name);
}

void ql_imatrix_sort(ql_imatrix *im)
{
    if (im->n_entries > 1)
        qsort(im->entries, (size_t)im->n_entries, sizeof *im->entries, cmp_entry);
}

ql_status ql_imatrix_set_chunk_size(ql_imatrix *im, int64_t chunk_size, ql_error *err)
{
    if (chunk_size < 1 || chunk_size > INT32_MAX)
        return ql_error_set(err, QL_EINVAL, "chunk size %lld, expected 1..%d",
                            (long long)chunk_size, INT32_MAX);
    if (im->chunk_size == chunk_size)
        return QL_OK;
    if (im->chunk_size != 0)
        return ql_error_set(err, QL_EINVAL,
                            "%s: counts are already in tokens of %lld-token chunks; cannot "
                            "reinterpret them as %lld-token chunks",
                            im->path ? im->path : "imatrix", (long long)im->chunk_size,
                            (long long)chunk_size);
    for (int64_t i = 0; i < im->n_entries; i++) {
        ql_imatrix_entry *e = &im->entries[i];
        for (int64_t m = 0; m < e->n_mat; m++)
            if (e->counts[m] > MAX_COUNT / chunk_size)
                return ql_error_set(err, QL_EINVAL,
                                    "entry '%s': %lld chunks of %lld tokens overflow the count",
                                    e->name, (long long)e->counts[m], (long long)chunk_size);
    }
    /* Single-precision product, as llama-imatrix computes it when it loads a .dat;
     * a product that overflows would make a file no reader accepts. */
    const float scale = (float)chunk_size;
    for (int64_t i = 0; i < im->n_entries; i++) {
        const ql_imatrix_entry *e = &im->entries[i];
        for (int64_t j = 0; j < e->n_values; j++)
            if (isinf(e->sums[j] * scale) || (e->in_sum && isinf(e->in_sum[j] * scale)))
                return ql_error_set(err, QL_EFORMAT,
                                    "%s: entry '%s': value %lld (%g) times the chunk size %lld "
                                    "overflows single precision",
                                    im->path ? im->path : "imatrix", e->name, (long long)j,
                                    (double)e->sums[j], (long long)chunk_size);
    }
    for (int64_t i = 0; i < im->n_entries; i++) {
        ql_imatrix_entry *e = &im->entries[i];
        for (int64_t j = 0; j < e->n_values; j++)
            e->sums[j] *= scale;
        if (e->in_sum)
            for (int64_t j = 0; j < e->n_values; j++)
                e->in_sum[j] *= scale;
        for (int64_t m = 0; m < e->n_mat; m++)
            e->counts[m] *= chunk_size;
    }
    im->chunk_size = chunk_size;
    return QL_OK;
}

/* ------------------------------------------------------------------------ */
/* Combining files (llama-imatrix --in-file ...)                              */

static const char *source_name(const ql_imatrix *im)
{
    return im->path ? im->path : "imatrix";
}

static bool has_dataset(const ql_imatrix *im, const char *name)
{
    for (int64_t i = 0; i < im->n_datasets; i++)
        if (strcmp(im->datasets[i], name) == 0)
            return true;
    return false;
}

ql_status ql_imatrix_merge(ql_imatrix *acc, ql_imatrix *in, ql_error *err)
{
    ql_status st;
    /* One unit for the counts: tokens when either side knows its chunk size. */
    if (acc->chunk_size != in->chunk_size) {
        if (acc->chunk_size > 0 && in->chunk_size > 0)
            return ql_error_set(err, QL_EINVAL,
                                "%s has chunks of %lld tokens, %s of %lld: counts of different "
                                "chunk sizes do not add up",
                                source_name(acc), (long long)acc->chunk_size, source_name(in),
                                (long long)in->chunk_size);
        if (acc->chunk_size == 0 && acc->n_entries > 0 &&
            (st = ql_imatrix_set_chunk_size(acc, in->chunk_size, err)))
            return st;
        if (in->chunk_size == 0 && (st = ql_imatrix_set_chunk_size(in, acc->chunk_size, err)))
            return st;
        acc->chunk_size = in->chunk_size > acc->chunk_size ? in->chunk_size : acc->chunk_size;
    }
    /* Every entry checked before any is added: a refused merge leaves acc as it was. */
    for (int64_t i = 0; i < in->n_entries; i++) {
        const ql_imatrix_entry *e = &in->entries[i];
        const ql_imatrix_entry *a = ql_imatrix_find(acc, e->name);
        if (a && (a->n_values != e->n_values || a->n_mat != e->n_mat))
            return ql_error_set(err, QL_EINVAL,
                                "entry '%s': %lld values in %lld matrices in %s, %lld in %lld in "
                                "%s: not the same weight",
                                e->name, (long long)a->n_values, (long long)a->n_mat,
                                source_name(acc), (long long)e->n_values, (long long)e->n_mat,
                                source_name(in));
        for (int64_t m = 0; a && m < e->n_mat; m++)
            if (a->counts[m] > MAX_COUNT - e->counts[m])
                return ql_error_set(err, QL_EINVAL, "entry '%s': the summed counts overflow",
                                    e->name);
    }
    for (int64_t i = 0; i < in->n_entries; i++) {
        const ql_imatrix_entry *e = &in->entries[i];
        ql_imatrix_entry *a = (ql_imatrix_entry *)ql_imatrix_find(acc, e->name);
        if (!a) {
            if ((st = ql_imatrix_add_entry(acc, e->name, e->n_values, e->n_mat, e->in_sum != NULL,
                                           &a, err)))
                return st;
        } else if (a->in_sum && !e->in_sum) {
            /* Sums of x from one side only would be half a statistic. */
            free(a->in_sum);
            a->in_sum = NULL;
        }
        for (int64_t j = 0; j < e->n_values; j++)
            a->sums[j] += e->sums[j];
        for (int64_t j = 0; a->in_sum && j < e->n_values; j++)
            a->in_sum[j] += e->in_sum[j];
        for (int64_t m = 0; m < e->n_mat; m++)
            a->counts[m] += e->counts[m];
    }
    acc->chunk_count += in->chunk_count;
    for (int64_t i = 0; i < in->n_datasets; i++)
        if (!has_dataset(acc, in->datasets[i]) &&
            (st = ql_imatrix_add_dataset(acc, in->datasets[i], err)))
            return st;
    return QL_OK;
}

void ql_imatrix_merge_finish(ql_imatrix *im)
{
    if (im->chunk_size != 0)
        return;
    for (int64_t i = 0; i < im->n_entries; i++) {
        ql_imatrix_entry *e = &im->entries[i];
        const int64_t per = e->n_values / e->n_mat;
        for (int64_t j = 0; j < e->n_values; j++) {
            const float c = (float)e->counts[j / per];
            if (c > 0)
                e->sums[j] = e->sums[j] / c * c;
        }
    }
}

/* ========================================================================= */
/* Importance weights                                                         */

/* The importance of matrix m of e, sums / count in single precision as llama-quantize
 * divides, into out (NULL: only checked); *max is the largest (-1 for a matrix that
 * counted no token, whose columns all weigh 1). QL_EFORMAT, naming the file, entry,
 * matrix and column, for a value the quantizers cannot use. */
static ql_status matrix_importance(const ql_imatrix *im, const ql_imatrix_entry *e, int64_t m,
                                   float *out, float *max, ql_error *err)
{
    const int64_t per = e->n_values / e->n_mat;
    const float *s = e->sums + m * per;
    *max = -1.0f;
    if (e->counts[m] <= 0) {
        for (int64_t j = 0; out && j < per; j++)
            out[j] = 1.0f;
        return QL_OK;
    }
    const float c = (float)e->counts[m];
    *max = 0.0f;
    for (int64_t j = 0; j < per; j++) {
        const float v = s[j] / c;
        if (!(v >= 0.0f) || !(v <= QL_IMATRIX_IMPORTANCE_MAX)) {
            char mat[48] = "";
            if (e->n_mat > 1)
                snprintf(mat, sizeof mat, " of matrix %lld", (long long)m);
            return ql_error_set(err, QL_EFORMAT,
                                "%s: entry '%s': column %lld%s has importance %g (sum %g / "
                                "count %lld), expected a finite number from 0 to %g (larger "
                                "ones overflow the quantizers' sums)",
                                im->path ? im->path : "imatrix", e->name, (long long)j, mat,
                                (double)v, (double)s[j], (long long)e->counts[m],
                                (double)QL_IMATRIX_IMPORTANCE_MAX);
        }
        if (v > *max)
            *max = v;
        if (out)
            out[j] = v;
    }
    return QL_OK;
}

/* Whether an entry counted tokens but has no matrix with usable importance; also
 * checks every value (matrix_importance). */
static ql_status entry_degenerate(const ql_imatrix *im, const ql_imatrix_entry *e, float *out,
                                  bool *degenerate, float *largest, ql_error *err)
{
    const int64_t per = e->n_values / e->n_mat;
    bool counted = false, usable = false;
    *largest = 0.0f;
    for (int64_t m = 0; m < e->n_mat; m++) {
        float mx;
        float *o = out ? out + m * per : NULL;
        ql_status st = matrix_importance(im, e, m, o, &mx, err);
        if (st)
            return st;
        if (mx < 0.0f)
            continue;
        counted = true;
        if (mx > *largest)
            *largest = mx;
        if (mx >= QL_IMATRIX_IMPORTANCE_MIN) {
            usable = true;
        } else {
            /* Such a matrix would zero every block; weigh it as one that counted nothing. */
            for (int64_t j = 0; o && j < per; j++)
                o[j] = 1.0f;
        }
    }
    *degenerate = counted && !usable;
    return QL_OK;
}

ql_status ql_imatrix_weights(const ql_imatrix *im, const char *tensor_name, int64_t n_cols,
                             float *out, ql_error *err)
{
    const char *src = im->path ? im->path : "imatrix";
    const ql_imatrix_entry *e = ql_imatrix_find(im, tensor_name);
    if (!e)
        return ql_error_set(err, QL_ENOTFOUND, "%s: no entry for tensor '%s' (%lld entries)", src,
                            tensor_name, (long long)im->n_entries);
    if (e->n_values != n_cols)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: tensor '%s': the imatrix entry has %lld values (%lld x %lld "
                            "matrices), the tensor needs %lld (ne[0] x matrices)",
                            src, tensor_name, (long long)e->n_values,
                            (long long)(e->n_values / e->n_mat), (long long)e->n_mat,
                            (long long)n_cols);
    bool degenerate;
    float largest;
    ql_status st = entry_degenerate(im, e, out, &degenerate, &largest, err);
    if (st)
        return st;
    if (degenerate)
        return ql_error_set(err, QL_ENOTFOUND,
                            "%s: entry '%s' carries no usable importance (largest %g, below %g)",
                            src, tensor_name, (double)largest, (double)QL_IMATRIX_IMPORTANCE_MIN);
    return QL_OK;
}

ql_status ql_imatrix_drop_degenerate(ql_imatrix *im, ql_error *err)
{
    int64_t kept = 0;
    for (int64_t i = 0; i < im->n_entries; i++) {
        ql_imatrix_entry *e = &im->entries[i];
        bool degenerate;
        float largest;
        ql_status st = entry_degenerate(im, e, NULL, &degenerate, &largest, err);
        if (st)
            return st;
        if (!degenerate) {
            im->entries[kept++] = *e;
            continue;
        }
        char **nd = realloc(im->dropped, (size_t)(im->n_dropped + 1) * sizeof *nd);
        if (!nd)
            return ql_error_set(err, QL_ENOMEM, "out of memory");
        im->dropped = nd;
        /* The name moves to the dropped list; the rest of the entry is freed. */
        nd[im->n_dropped++] = e->name;
        e->name = NULL;
        entry_deinit(e);
    }
    /* Entries kept so far stay valid while the loop runs: the array only shrinks. */
    for (int64_t i = kept; i < im->n_entries; i++)
        memset(&im->entries[i], 0, sizeof im->entries[i]);
    im->n_entries = kept;
    return QL_OK;
}

bool ql_imatrix_dropped_warning(const ql_imatrix *im, char *buf, size_t size)
{
    if (im->n_dropped == 0)
        return false;
    int o =
        snprintf(buf, size,
                 "%s: %lld entr%s no usable importance (all below %g, e.g. all zero), so "
                 "%s quantized without, as for a missing entry:",
                 im->path ? im->path : "imatrix", (long long)im->n_dropped,
                 im->n_dropped == 1 ? "y carries" : "ies carry", (double)QL_IMATRIX_IMPORTANCE_MIN,
                 im->n_dropped == 1 ? "its tensor is" : "their tensors are");
    const int64_t shown = im->n_dropped < 4 ? im->n_dropped : 3;
    for (int64_t i = 0; i < shown && o > 0 && (size_t)o < size; i++)
        o += snprintf(buf + o, size - (size_t)o, "%s %s", i ? "," : "", im->dropped[i]);
    if (shown < im->n_dropped && o > 0 && (size_t)o < size)
        snprintf(buf + o, size - (size_t)o, " and %lld more", (long long)(im->n_dropped - shown));
    return true;
}

/* ========================================================================= */
/* Legacy .dat reading                                                        */

typedef struct {
    const uint8_t *p;
    uint64_t size, off;
    const char *path;
    char ctx[QL_IMATRIX_NAME_MAX * 4 + 48]; /* "entry 3 'blk.0.attn_q.weight'" */
    ql_error *err;
} dcursor;

static ql_status dfail(dcursor *c, uint64_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ql_status dfail(dcursor *c, uint64_t at, const char *fmt, ...)
{
    char msg[QL_ERROR_MSG_MAX / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ql_error_set(c->err, QL_EFORMAT, "%s: offset %llu: %s%s%s", c->path,
                        (unsigned long long)at, c->ctx, c->ctx[0] ? ": " : "", msg);
}

static ql_status d_i32(dcursor *c, int32_t *v, const char *what)
{
    if (c->size - c->off < 4)
        return dfail(c, c->off,
                     "truncated file: %s needs 4 bytes, only %llu left (file is %llu bytes)", what,
                     (unsigned long long)(c->size - c->off), (unsigned long long)c->size);
    memcpy(v, c->p + c->off, 4);
    c->off += 4;
    return QL_OK;
}

/* Escapes a name for a message (control bytes as \xNN). */
static void escape(char *dst, size_t size, const uint8_t *s, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < size; i++) {
        if (s[i] < 0x20 || s[i] == 0x7f || s[i] == '\'' || s[i] == '\\')
            o += (size_t)snprintf(dst + o, size - o, "\\x%02x", s[i]);
        else
            dst[o++] = (char)s[i];
    }
    dst[o] = '\0';
}

/* True when some value is not a finite number >= 0 (sums of squares); *where is
 * the first such index. */
static bool bad_value(const float *v, int64_t n, int64_t *where)
{
    for (int64_t j = 0; j < n; j++)
        if (!(v[j] >= 0.0f) || isinf(v[j])) {
            *where = j;
            return true;
        }
    return false;
}

static ql_status read_dat(const uint8_t *p, size_t size, const char *path, ql_imatrix *im,
                          ql_error *err)
{
    dcursor c = {p, size, 0, path, "", err};
    ql_status st;
    int32_t n_entries = 0;
    if ((st = d_i32(&c, &n_entries, "entry count")))
        return st;
    /* Smallest entry: name length, one name byte, ncall, nval, one value (17 bytes). */
    if (n_entries < 1)
        return dfail(&c, 0, "entry count is %d, expected at least 1", (int)n_entries);
    if ((uint64_t)n_entries > (c.size - c.off) / 17)
        return dfail(&c, 0,
                     "entry count %d cannot fit in the %llu bytes left (at least 17 bytes each)",
                     (int)n_entries, (unsigned long long)(c.size - c.off));
    for (int32_t i = 0; i < n_entries; i++) {
        uint64_t at = c.off;
        snprintf(c.ctx, sizeof c.ctx, "entry %d", (int)i);
        int32_t len = 0;
        if ((st = d_i32(&c, &len, "name length")))
            return st;
        if (len < 1 || len > QL_IMATRIX_NAME_MAX)
            return dfail(&c, at, "name length %d, expected 1..%d (ggml tensor names)", (int)len,
                         QL_IMATRIX_NAME_MAX);
        if ((uint64_t)len > c.size - c.off)
            return dfail(&c, c.off, "truncated file: name of %d bytes, only %llu left", (int)len,
                         (unsigned long long)(c.size - c.off));
        char name[QL_IMATRIX_NAME_MAX + 1];
        memcpy(name, c.p + c.off, (size_t)len);
        name[len] = '\0';
        char esc[QL_IMATRIX_NAME_MAX * 4 + 1];
        escape(esc, sizeof esc, c.p + c.off, (size_t)len);
        snprintf(c.ctx, sizeof c.ctx, "entry %d '%s'", (int)i, esc);
        if (strlen(name) != (size_t)len)
            return dfail(&c, c.off, "name contains a NUL byte");
        c.off += (uint64_t)len;
        int32_t ncall = 0, nval = 0;
        uint64_t at_ncall = c.off;
        if ((st = d_i32(&c, &ncall, "ncall")) || (st = d_i32(&c, &nval, "value count")))
            return st;
        if (ncall < 0)
            return dfail(&c, at_ncall, "ncall is %d, expected >= 0", (int)ncall);
        if (nval < 1)
            return dfail(&c, at_ncall + 4, "value count is %d, expected at least 1", (int)nval);
        if ((uint64_t)nval > (c.size - c.off) / 4)
            return dfail(&c, c.off, "truncated file: %d values need %llu bytes, only %llu left",
                         (int)nval, (unsigned long long)nval * 4u,
                         (unsigned long long)(c.size - c.off));
        if (ql_imatrix_find(im, name))
            return dfail(&c, at, "duplicate entry (also an earlier entry)");
        ql_imatrix_entry *e;
        if ((st = ql_imatrix_add_entry(im, name, nval, 1, false, &e, err)))
            return st;
        memcpy(e->sums, c.p + c.off, (size_t)nval * 4);
        int64_t bad;
        if (bad_value(e->sums, nval, &bad))
            return dfail(&c, c.off + 4u * (uint64_t)bad,
                         "value %lld is %g, expected a finite sum of squares >= 0", (long long)bad,
                         (double)e->sums[bad]);
        c.off += (uint64_t)nval * 4u;
        /* Counts in chunks: llama-quantize divides the stored values by ncall; an
         * ncall of 0 means the values are used as they are, i.e. a count of 1. */
        e->counts[0] = ncall > 0 ? ncall : 1;
    }
    c.ctx[0] = '\0';
    /* Optional trailer (absent in the oldest files): chunk count and dataset name. */
    if (c.off == c.size)
        return QL_OK;
    int32_t chunks = 0;
    uint64_t at = c.off;
    if ((st = d_i32(&c, &chunks, "chunk count")))
        return st;
    if (chunks < 0)
        return dfail(&c, at, "chunk count is %d, expected >= 0", (int)chunks);
    im->chunk_count = chunks;
    if (c.off == c.size)
        return QL_OK;
    int32_t dlen = 0;
    at = c.off;
    if ((st = d_i32(&c, &dlen, "dataset name length")))
        return st;
    if (dlen < 0 || (uint64_t)dlen > c.size - c.off)
        return dfail(&c, at, "dataset name length %d, but %llu bytes are left", (int)dlen,
                     (unsigned long long)(c.size - c.off));
    if (dlen > 0) {
        char *ds = malloc((size_t)dlen + 1);
        if (!ds)
            return ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
        memcpy(ds, c.p + c.off, (size_t)dlen);
        ds[dlen] = '\0';
        st = ql_imatrix_add_dataset(im, ds, err);
        free(ds);
        if (st)
            return st;
    }
    c.off += (uint64_t)dlen;
    if (c.off != c.size)
        return dfail(&c, c.off, "%llu unexpected bytes after the dataset name (end of the format)",
                     (unsigned long long)(c.size - c.off));
    return QL_OK;
}

/* ========================================================================= */
/* GGUF imatrix reading                                                       */

/* Tensors of one entry, found by suffix. */
typedef struct {
    char name[QL_IMATRIX_NAME_MAX + 1];
    const ql_gguf_tensor *in_sum2, *counts, *in_sum;
} gentry;

static bool strip_suffix(const char *s, const char *suffix, char *out, size_t size)
{
    size_t n = strlen(s), k = strlen(suffix);
    if (n <= k || strcmp(s + n - k, suffix) != 0 || n - k >= size)
        return false;
    memcpy(out, s, n - k);
    out[n - k] = '\0';
    return true;
}

static ql_status check_f32(const ql_gguf *g, const ql_gguf_tensor *t, ql_error *err)
{
    if (t->type != QL_TYPE_F32)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: offset %llu: tensor '%s' has type %s, expected F32", g->path,
                            (unsigned long long)t->info_offset, t->name,
                            ql_gguf_type_known(t->type) ? ql_type_name(t->type) : "unknown");
    return QL_OK;
}

/* File offset of element j of an F32 tensor. */
static unsigned long long value_offset(const ql_gguf *g, const ql_gguf_tensor *t, int64_t j)
{
    return (unsigned long long)(g->data_offset + t->offset + 4u * (uint64_t)j);
}

static ql_status read_gguf_entry(const ql_gguf *g, const gentry *ge, ql_imatrix *im, ql_error *err)
{
    ql_status st;
    if (!ge->in_sum2 || !ge->counts) {
        const ql_gguf_tensor *have = ge->in_sum2  ? ge->in_sum2
                                     : ge->counts ? ge->counts
                                                  : ge->in_sum;
        return ql_error_set(err, QL_EFORMAT,
                            "%s: offset %llu: tensor '%s': entry '%s' has no '%s.%s' tensor "
                            "(expected both .in_sum2 and .counts)",
                            g->path, (unsigned long long)have->info_offset, have->name, ge->name,
                            ge->name, ge->in_sum2 ? "counts" : "in_sum2");
    }
    if ((st = check_f32(g, ge->in_sum2, err)) || (st = check_f32(g, ge->counts, err)) ||
        (ge->in_sum && (st = check_f32(g, ge->in_sum, err))))
        return st;
    int64_t nval = ql_gguf_tensor_nelements(ge->in_sum2);
    int64_t n_mat = ql_gguf_tensor_nelements(ge->counts);
    if (n_mat < 1 || nval < 1 || nval % n_mat != 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: offset %llu: tensor '%s': entry '%s': '.in_sum2' has %lld values "
                            "and '.counts' %lld; expected a positive multiple (ne = [values, "
                            "matrices] and [1, matrices])",
                            g->path, (unsigned long long)ge->counts->info_offset, ge->counts->name,
                            ge->name, (long long)nval, (long long)n_mat);
    if (ge->in_sum && ql_gguf_tensor_nelements(ge->in_sum) != nval)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: offset %llu: tensor '%s': entry '%s': '.in_sum' has %lld values, "
                            "'.in_sum2' %lld",
                            g->path, (unsigned long long)ge->in_sum->info_offset, ge->in_sum->name,
                            ge->name, (long long)ql_gguf_tensor_nelements(ge->in_sum),
                            (long long)nval);
    ql_imatrix_entry *e;
    if ((st = ql_imatrix_add_entry(im, ge->name, nval, n_mat, ge->in_sum != NULL, &e, err)))
        return ql_error_prefix(err, "%s: ", g->path);
    memcpy(e->sums, ge->in_sum2->data, (size_t)nval * sizeof(float));
    int64_t bad;
    if (bad_value(e->sums, nval, &bad))
        return ql_error_set(err, QL_EFORMAT,
                            "%s: offset %llu: tensor '%s': value %lld is %g, expected a finite "
                            "sum of squares >= 0",
                            g->path, value_offset(g, ge->in_sum2, bad), ge->in_sum2->name,
                            (long long)bad, (double)e->sums[bad]);
    if (ge->in_sum) {
        memcpy(e->in_sum, ge->in_sum->data, (size_t)nval * sizeof(float));
        for (int64_t j = 0; j < nval; j++)
            if (!isfinite(e->in_sum[j]))
                return ql_error_set(err, QL_EFORMAT,
                                    "%s: offset %llu: tensor '%s': value %lld is %g, expected a "
                                    "finite number",
                                    g->path, value_offset(g, ge->in_sum, j), ge->in_sum->name,
                                    (long long)j, (double)e->in_sum[j]);
    }
    const float *cnt = ge->counts->data;
    for (int64_t m = 0; m < n_mat; m++) {
        float v;
        memcpy(&v, cnt + m, sizeof v);
        if (!(v >= 0.0f) || (double)v > (double)MAX_COUNT)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: offset %llu: tensor '%s': count %lld is %g, expected a "
                                "token count >= 0",
                                g->path, value_offset(g, ge->counts, m), ge->counts->name,
                                (long long)m, (double)v);
        /* Rounded to the nearest integer, as llama-imatrix reads them. */
        e->counts[m] = llround((double)v);
    }
    return QL_OK;
}

static ql_status read_gguf(const ql_gguf *g, ql_imatrix *im, ql_error *err)
{
    ql_status st = QL_OK;
    const ql_gguf_kv *tkv = ql_gguf_find_kv(g, "general.type");
    if (tkv && (tkv->value.type != QL_GGUF_STRING || strcmp(tkv->value.v.str.ptr, "imatrix") != 0))
        return ql_error_set(err, QL_EFORMAT,
                            "%s: offset %llu: key 'general.type' is %s%s%s, expected 'imatrix' "
                            "(is this a model?)",
                            g->path, (unsigned long long)tkv->offset,
                            tkv->value.type == QL_GGUF_STRING ? "'" : "a value of type ",
                            tkv->value.type == QL_GGUF_STRING ? tkv->value.v.str.ptr
                                                              : ql_gguf_vtype_name(tkv->value.type),
                            tkv->value.type == QL_GGUF_STRING ? "'" : "");
    /* llama-quantize refuses a GGUF imatrix without these three keys. */
    const char *need[] = {"imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"};
    for (int i = 0; i < 3; i++)
        if (!ql_gguf_find_kv(g, need[i]))
            return ql_error_set(err, QL_EFORMAT,
                                "%s: key '%s' is missing (an imatrix GGUF has "
                                "imatrix.datasets, imatrix.chunk_count and "
                                "imatrix.chunk_size)",
                                g->path, need[i]);
    const ql_gguf_kv *dkv = ql_gguf_find_kv(g, "imatrix.datasets");
    if (dkv->value.type != QL_GGUF_ARRAY || dkv->value.v.arr.elem_type != QL_GGUF_STRING)
        return ql_error_set(
            err, QL_EFORMAT,
            "%s: offset %llu: key 'imatrix.datasets' has type %s%s%s, expected "
            "arr[str]",
            g->path, (unsigned long long)dkv->offset, ql_gguf_vtype_name(dkv->value.type),
            dkv->value.type == QL_GGUF_ARRAY ? " of " : "",
            dkv->value.type == QL_GGUF_ARRAY ? ql_gguf_vtype_name(dkv->value.v.arr.elem_type) : "");
    const ql_gguf_array *ds = &dkv->value.v.arr;
    uint32_t chunk_count = 0, chunk_size = 0;
    const char *ukeys[] = {"imatrix.chunk_count", "imatrix.chunk_size"};
    uint32_t *uvals[] = {&chunk_count, &chunk_size};
    for (int i = 0; i < 2; i++) {
        const ql_gguf_kv *kv = ql_gguf_find_kv(g, ukeys[i]);
        if (kv->value.type != QL_GGUF_UINT32)
            return ql_error_set(
                err, QL_EFORMAT, "%s: offset %llu: key '%s' has type %s, expected u32", g->path,
                (unsigned long long)kv->offset, ukeys[i], ql_gguf_vtype_name(kv->value.type));
        *uvals[i] = kv->value.v.u32;
    }
    if (chunk_size == 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: offset %llu: key 'imatrix.chunk_size' is 0, expected tokens per "
                            "chunk (>= 1)",
                            g->path,
                            (unsigned long long)ql_gguf_find_kv(g, "imatrix.chunk_size")->offset);
    im->chunk_count = chunk_count;
    im->chunk_size = chunk_size;
    for (uint64_t i = 0; i < ds->n; i++) {
        const ql_gguf_str *s = &((const ql_gguf_str *)ds->data)[i];
        if ((st = ql_imatrix_add_dataset(im, s->ptr, err)))
            return st;
    }

    /* Group the tensors by entry name, keeping the order of first appearance. */
    gentry *ge = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *ge);
    if (!ge)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", g->path);
    int64_t n = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        char name[QL_IMATRIX_NAME_MAX + 1];
        int kind;
        /* ".in_sum2" before ".in_sum": the shorter suffix is not a suffix of the longer. */
        if (strip_suffix(t->name, ".in_sum2", name, sizeof name))
            kind = 0;
        else if (strip_suffix(t->name, ".counts", name, sizeof name))
            kind = 1;
        else if (strip_suffix(t->name, ".in_sum", name, sizeof name))
            kind = 2;
        else
            continue; /* other tensors are ignored, as llama.cpp does */
        int64_t k = 0;
        while (k < n && strcmp(ge[k].name, name) != 0)
            k++;
        if (k == n)
            ql_strlcpy(ge[n++].name, name, sizeof ge[0].name);
        const ql_gguf_tensor **slot = kind == 0   ? &ge[k].in_sum2
                                      : kind == 1 ? &ge[k].counts
                                                  : &ge[k].in_sum;
        *slot = t; /* tensor names are unique, so a slot is filled once */
    }
    if (n == 0) {
        st = ql_error_set(err, QL_EFORMAT,
                          "%s: no imatrix entries: none of its %lld tensors is named "
                          "'<weight>.in_sum2'",
                          g->path, (long long)g->n_tensors);
        goto out;
    }
    for (int64_t k = 0; k < n && !st; k++)
        st = read_gguf_entry(g, &ge[k], im, err);
out:
    free(ge);
    return st;
}

/* ========================================================================= */

ql_status ql_imatrix_read_buffer(const void *buf, size_t size, const char *name, ql_imatrix **out,
                                 ql_error *err)
{
    *out = NULL;
    ql_imatrix *im;
    ql_status st = ql_imatrix_alloc(&im, err);
    if (st)
        return st;
    im->path = ql_strdup(name);
    if (!im->path) {
        ql_imatrix_free(im);
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", name);
    }
    if (size >= 4 && memcmp(buf, "GGUF", 4) == 0) {
        ql_gguf *g = NULL;
        st = ql_gguf_open_buffer(&g, buf, size, name, err);
        if (!st)
            st = read_gguf(g, im, err);
        ql_gguf_close(g);
    } else {
        st = read_dat(buf, size, name, im, err);
    }
    if (!st)
        st = ql_imatrix_drop_degenerate(im, err);
    if (st) {
        ql_imatrix_free(im);
        return st;
    }
    *out = im;
    return QL_OK;
}

ql_status ql_imatrix_read(const char *path, ql_imatrix **out, ql_error *err)
{
    *out = NULL;
    ql_file_map fm;
    ql_status st = ql_file_map_open(&fm, path, "importance matrix", err);
    if (st)
        return st;
    st = ql_imatrix_read_buffer(fm.data, fm.size, path, out, err);
    ql_file_map_close(&fm);
    return st;
}

/* ========================================================================= */
/* Writing                                                                    */

typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} obuf;

static void oput(obuf *b, const void *src, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void oput_i32(obuf *b, int32_t v)
{
    oput(b, &v, 4);
}

static ql_status write_dat(const ql_imatrix *im, const char *path, ql_error *err)
{
    if (im->n_entries > INT32_MAX || im->chunk_count > INT32_MAX)
        return ql_error_set(err, QL_EINVAL, "%s: too many entries or chunks for the .dat format",
                            path);
    obuf b = {0};
    ql_status st = QL_OK;
    float *tmp = NULL;
    /* Entries that saw no token at all are left out, as llama-imatrix does. */
    int64_t n_store = 0;
    for (int64_t i = 0; i < im->n_entries; i++) {
        bool any = false;
        for (int64_t m = 0; m < im->entries[i].n_mat; m++)
            any = any || im->entries[i].counts[m] > 0;
        n_store += any;
    }
    if (n_store == 0)
        return ql_error_set(err, QL_EINVAL, "%s: no imatrix entry has any counted token", path);
    oput_i32(&b, (int32_t)n_store);
    for (int64_t i = 0; i < im->n_entries; i++) {
        const ql_imatrix_entry *e = &im->entries[i];
        if (e->n_values > INT32_MAX) {
            st = ql_error_set(err, QL_EINVAL,
                              "%s: entry '%s' has %lld values, more than .dat "
                              "holds",
                              path, e->name, (long long)e->n_values);
            goto out;
        }
        int64_t max_count = 0;
        for (int64_t m = 0; m < e->n_mat; m++)
            if (e->counts[m] > max_count)
                max_count = e->counts[m];
        if (max_count == 0)
            continue;
        /* ncall: chunks behind the entry, rounded up so a partial chunk is not a zero.
         * For experts, llama-imatrix counts one call per chunk for every expert, however
         * few of the chunk's tokens were routed to it: the chunk count. */
        int64_t ncall =
            im->chunk_size > 0 ? (max_count + im->chunk_size - 1) / im->chunk_size : max_count;
        if (e->n_mat > 1 && im->chunk_size > 0 && im->chunk_count >= ncall)
            ncall = im->chunk_count;
        if (ncall > INT32_MAX) {
            st = ql_error_set(err, QL_EINVAL, "%s: entry '%s': %lld calls overflow .dat's int32",
                              path, e->name, (long long)ncall);
            goto out;
        }
        int32_t len = (int32_t)strlen(e->name);
        oput_i32(&b, len);
        oput(&b, e->name, (size_t)len);
        oput_i32(&b, (int32_t)ncall);
        oput_i32(&b, (int32_t)e->n_values);
        if (im->chunk_size == 0 && e->n_mat == 1) {
            /* Chunk units (read from a .dat): count == ncall, the stored values are the
             * sums as they are, so a .dat round-trips byte for byte. */
            oput(&b, e->sums, (size_t)e->n_values * sizeof(float));
            continue;
        }
        free(tmp);
        tmp = malloc((size_t)e->n_values * sizeof *tmp);
        if (!tmp) {
            st = ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
            goto out;
        }
        const int64_t per = e->n_values / e->n_mat;
        for (int64_t j = 0; j < e->n_values; j++) {
            float count = (float)e->counts[j / per];
            float value = e->sums[j];
            if (count == 0.0f) {
                /* No data for this matrix: importance 1 after dividing by ncall. */
                value = 1.0f;
                count = 1.0f;
            }
            tmp[j] = value / count * (float)ncall;
        }
        oput(&b, tmp, (size_t)e->n_values * sizeof *tmp);
    }
    oput_i32(&b, (int32_t)im->chunk_count);
    const char *ds = im->n_datasets ? im->datasets[im->n_datasets - 1] : "";
    size_t dlen = strlen(ds);
    if (dlen > INT32_MAX) {
        st = ql_error_set(err, QL_EINVAL, "%s: dataset name too long", path);
        goto out;
    }
    oput_i32(&b, (int32_t)dlen);
    oput(&b, ds, dlen);
    if (b.oom) {
        st = ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    st = ql_file_write_all(path, b.p, b.n, err);
out:
    free(tmp);
    free(b.p);
    return st;
}

static ql_status write_gguf(const ql_imatrix *im, const char *path, ql_error *err)
{
    if (im->chunk_size <= 0)
        return ql_error_set(err, QL_EINVAL,
                            "%s: the chunk size is unknown (imatrix read from a .dat); set it "
                            "before writing GGUF (qlab imatrix-convert --chunk-size N)",
                            path);
    if (im->chunk_count > UINT32_MAX || im->chunk_size > UINT32_MAX)
        return ql_error_set(err, QL_EINVAL, "%s: chunk count or size does not fit in u32", path);
    ql_gguf_writer *w = NULL;
    float *cnt = NULL;
    ql_status st = ql_gguf_writer_alloc(&w, err);
    if (st)
        return st;
    if ((st = ql_gguf_writer_set_str(w, "general.type", "imatrix", err)) ||
        (st = ql_gguf_writer_set_str_arr(w, "imatrix.datasets", (const char *const *)im->datasets,
                                         (uint64_t)im->n_datasets, err)) ||
        (st = ql_gguf_writer_set_u32(w, "imatrix.chunk_count", (uint32_t)im->chunk_count, err)) ||
        (st = ql_gguf_writer_set_u32(w, "imatrix.chunk_size", (uint32_t)im->chunk_size, err)))
        goto out;
    int64_t max_mat = 1;
    for (int64_t i = 0; i < im->n_entries; i++) {
        const ql_imatrix_entry *e = &im->entries[i];
        char tname[QL_IMATRIX_NAME_MAX + 16];
        if (strlen(e->name) + strlen(".in_sum2") > QL_IMATRIX_NAME_MAX) {
            st = ql_error_set(err, QL_EINVAL,
                              "%s: entry '%s': '%s.in_sum2' is longer than GGUF's %d-byte "
                              "tensor names",
                              path, e->name, e->name, QL_IMATRIX_NAME_MAX);
            goto out;
        }
        /* ne = [values per matrix, matrices] and [1, matrices], as llama-imatrix writes. */
        int64_t ne_sum[2] = {e->n_values / e->n_mat, e->n_mat};
        int64_t ne_cnt[2] = {1, e->n_mat};
        uint64_t nb = (uint64_t)e->n_values * sizeof(float);
        snprintf(tname, sizeof tname, "%s.in_sum2", e->name);
        if ((st = ql_gguf_writer_add_tensor(w, tname, 2, ne_sum, QL_TYPE_F32, nb, err)))
            goto out;
        snprintf(tname, sizeof tname, "%s.counts", e->name);
        if ((st = ql_gguf_writer_add_tensor(w, tname, 2, ne_cnt, QL_TYPE_F32,
                                            (uint64_t)e->n_mat * sizeof(float), err)))
            goto out;
        if (e->in_sum) {
            snprintf(tname, sizeof tname, "%s.in_sum", e->name);
            if ((st = ql_gguf_writer_add_tensor(w, tname, 2, ne_sum, QL_TYPE_F32, nb, err)))
                goto out;
        }
        if (e->n_mat > max_mat)
            max_mat = e->n_mat;
    }
    cnt = malloc((size_t)max_mat * sizeof *cnt);
    if (!cnt) {
        st = ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    if ((st = ql_gguf_writer_begin(w, path, err)))
        goto out;
    for (int64_t i = 0; i < im->n_entries; i++) {
        const ql_imatrix_entry *e = &im->entries[i];
        uint64_t nb = (uint64_t)e->n_values * sizeof(float);
        for (int64_t m = 0; m < e->n_mat; m++)
            cnt[m] = (float)e->counts[m];
        if ((st = ql_gguf_writer_write_tensor(w, e->sums, nb, err)) ||
            (st = ql_gguf_writer_write_tensor(w, cnt, (uint64_t)e->n_mat * sizeof(float), err)) ||
            (e->in_sum && (st = ql_gguf_writer_write_tensor(w, e->in_sum, nb, err))))
            goto out;
    }
    st = ql_gguf_writer_finish(w, err);
out:
    free(cnt);
    ql_gguf_writer_free(w);
    return st;
}

ql_status ql_imatrix_write(const ql_imatrix *im, const char *path, ql_imatrix_format format,
                           ql_error *err)
{
    if (im->n_entries == 0)
        return ql_error_set(err, QL_EINVAL, "%s: the importance matrix has no entries", path);
    return format == QL_IMATRIX_DAT ? write_dat(im, path, err) : write_gguf(im, path, err);
}

bool ql_imatrix_format_from_name(const char *path, ql_imatrix_format *out)
{
    size_t n = strlen(path);
    if (n >= 4 && strcmp(path + n - 4, ".dat") == 0) {
        *out = QL_IMATRIX_DAT;
        return true;
    }
    if (n >= 5 && strcmp(path + n - 5, ".gguf") == 0) {
        *out = QL_IMATRIX_GGUF;
        return true;
    }
    return false;
}

const char *ql_imatrix_format_name(ql_imatrix_format format)
{
    return format == QL_IMATRIX_DAT ? "dat" : "gguf";
}

bool ql_imatrix_format_parse(const char *s, ql_imatrix_format *out)
{
    if (strcmp(s, "dat") == 0)
        *out = QL_IMATRIX_DAT;
    else if (strcmp(s, "gguf") == 0)
        *out = QL_IMATRIX_GGUF;
    else
        return false;
    return true;
}
