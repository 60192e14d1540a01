/* Calibration maxima, outlier selection and the weight side of the outlier split. */
#include "experiment/outliers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "formats/quant_xc.h"
#include "formats/types.h"
#include "model/quant.h"

/* ------------------------------------------------------------------------- */
/* Calibration statistics                                                      */

ql_status ql_act_stats_alloc(ql_act_stats **out, int n_sites, const int64_t *n_in, ql_error *err)
{
    *out = NULL;
    if (n_sites <= 0)
        return ql_error_set(err, QL_EINVAL, "activation statistics: %d sites", n_sites);
    for (int s = 0; s < n_sites; s++)
        if (n_in[s] <= 0)
            return ql_error_set(err, QL_EINVAL, "activation statistics: site %d has width %lld", s,
                                (long long)n_in[s]);
    ql_act_stats *st = calloc(1, sizeof *st);
    if (!st)
        goto out_nomem;
    st->n_sites = n_sites;
    st->n_in = calloc((size_t)n_sites, sizeof *st->n_in);
    st->amax = calloc((size_t)n_sites, sizeof *st->amax);
    st->n_rows = calloc((size_t)n_sites, sizeof *st->n_rows);
    if (!st->n_in || !st->amax || !st->n_rows)
        goto out_nomem;
    for (int s = 0; s < n_sites; s++) {
        st->n_in[s] = n_in[s];
        st->amax[s] = calloc((size_t)n_in[s], sizeof(float));
        if (!st->amax[s])
            goto out_nomem;
    }
    *out = st;
    return QL_OK;
out_nomem:
    ql_act_stats_free(st);
    return ql_error_set(err, QL_ENOMEM, "activation statistics: out of memory");
}

void ql_act_stats_free(ql_act_stats *s)
{
    if (!s)
        return;
    if (s->amax)
        for (int i = 0; i < s->n_sites; i++)
            free(s->amax[i]);
    free(s->amax);
    free(s->n_in);
    free(s->n_rows);
    free(s);
}

void ql_act_stats_reset(ql_act_stats *s)
{
    for (int i = 0; i < s->n_sites; i++) {
        memset(s->amax[i], 0, (size_t)s->n_in[i] * sizeof(float));
        s->n_rows[i] = 0;
    }
}

void ql_act_stats_add(ql_act_stats *s, int site, const float *x, int64_t n_rows)
{
    QL_ASSERT(site >= 0 && site < s->n_sites);
    const int64_t n = s->n_in[site];
    float *m = s->amax[site];
    for (int64_t t = 0; t < n_rows; t++) {
        const float *xr = x + t * n;
        for (int64_t j = 0; j < n; j++) {
            const float a = fabsf(xr[j]);
            if (a > m[j]) /* false for NaN */
                m[j] = a;
        }
    }
    s->n_rows[site] += n_rows;
}

ql_status ql_act_stats_merge(ql_act_stats *a, const ql_act_stats *b, ql_error *err)
{
    if (a->n_sites != b->n_sites)
        return ql_error_set(err, QL_EINVAL, "activation statistics: %d sites vs %d", a->n_sites,
                            b->n_sites);
    for (int s = 0; s < a->n_sites; s++)
        if (a->n_in[s] != b->n_in[s])
            return ql_error_set(err, QL_EINVAL,
                                "activation statistics: site %d is %lld wide vs %lld", s,
                                (long long)a->n_in[s], (long long)b->n_in[s]);
    for (int s = 0; s < a->n_sites; s++) {
        for (int64_t j = 0; j < a->n_in[s]; j++)
            if (b->amax[s][j] > a->amax[s][j])
                a->amax[s][j] = b->amax[s][j];
        a->n_rows[s] += b->n_rows[s];
    }
    return QL_OK;
}

ql_status ql_act_stats_alloc_for(ql_act_stats **out, const ql_weights *w, ql_error *err)
{
    *out = NULL;
    int64_t *widths = malloc((size_t)w->n_lin * sizeof *widths);
    if (!widths)
        return ql_error_set(err, QL_ENOMEM, "activation statistics: out of memory");
    for (int s = 0; s < w->n_lin; s++)
        widths[s] = w->lin[s].n_in;
    ql_status st = ql_act_stats_alloc(out, w->n_lin, widths, err);
    free(widths);
    return st;
}

void ql_act_stats_observe(void *ctx, int site, const ql_linear *lin, const float *x, int64_t n_tok)
{
    ql_act_stats *st = ctx;
    QL_ASSERT(site >= 0 && site < st->n_sites && lin->n_in == st->n_in[site]);
    ql_act_stats_add(st, site, x, n_tok);
}

/* ------------------------------------------------------------------------- */
/* The cache file (layout in outliers.h)                                       */

#define AMAX_MAGIC        "QLAMAX\0\0\1"
#define AMAX_VERSION      1
#define AMAX_HEADER_BYTES 256

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t n_sites;
    int64_t chunk_size;
    int64_t chunk_count;
    char model_sha256[64];
    char text_sha256[64];
    char body_sha256[64];
    char pad[AMAX_HEADER_BYTES - 8 - 4 - 4 - 8 - 8 - 3 * 64];
} amax_header;

_Static_assert(sizeof(amax_header) == AMAX_HEADER_BYTES, "maxima header is 256 bytes");

static bool is_sha256_hex(const char *s, size_t len)
{
    if (len != 64)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

ql_status ql_act_stats_write(const ql_act_stats *s, const ql_act_stats_origin *origin,
                             const char *path, ql_error *err)
{
    if (!is_sha256_hex(origin->model_sha256, strlen(origin->model_sha256)) ||
        !is_sha256_hex(origin->text_sha256, strlen(origin->text_sha256)))
        return ql_error_set(err, QL_EINVAL,
                            "%s: the model and text must be named by hex SHA-256 digests", path);
    if (origin->chunk_size < 1 || origin->chunk_count < 1)
        return ql_error_set(err, QL_EINVAL, "%s: %lld chunks of %lld tokens", path,
                            (long long)origin->chunk_count, (long long)origin->chunk_size);
    size_t n_values = 0;
    for (int i = 0; i < s->n_sites; i++)
        n_values += (size_t)s->n_in[i];
    const size_t body = (size_t)s->n_sites * 2 * sizeof(int64_t) + n_values * sizeof(float);
    uint8_t *buf = calloc(1, AMAX_HEADER_BYTES + body);
    if (!buf)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory for %zu bytes", path,
                            AMAX_HEADER_BYTES + body);
    uint8_t *p = buf + AMAX_HEADER_BYTES;
    memcpy(p, s->n_in, (size_t)s->n_sites * sizeof(int64_t));
    p += (size_t)s->n_sites * sizeof(int64_t);
    memcpy(p, s->n_rows, (size_t)s->n_sites * sizeof(int64_t));
    p += (size_t)s->n_sites * sizeof(int64_t);
    for (int i = 0; i < s->n_sites; i++) {
        memcpy(p, s->amax[i], (size_t)s->n_in[i] * sizeof(float));
        p += (size_t)s->n_in[i] * sizeof(float);
    }
    amax_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, AMAX_MAGIC, sizeof h.magic);
    h.version = AMAX_VERSION;
    h.n_sites = (uint32_t)s->n_sites;
    h.chunk_size = origin->chunk_size;
    h.chunk_count = origin->chunk_count;
    memcpy(h.model_sha256, origin->model_sha256, 64);
    memcpy(h.text_sha256, origin->text_sha256, 64);
    char digest[65];
    ql_sha256_hex(buf + AMAX_HEADER_BYTES, body, digest);
    memcpy(h.body_sha256, digest, 64);
    memcpy(buf, &h, sizeof h);
    ql_status st = ql_file_write_all(path, buf, AMAX_HEADER_BYTES + body, err);
    free(buf);
    return st;
}

/* Checks one file's header and body against each other (the layout's rules). */
static ql_status parse_act_stats(const uint8_t *buf, size_t size, const char *path,
                                 ql_act_stats **out, ql_act_stats_origin *origin, ql_error *err)
{
    if (size < AMAX_HEADER_BYTES)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: %zu bytes, shorter than the %d-byte header of an activation "
                            "maxima file",
                            path, size, AMAX_HEADER_BYTES);
    amax_header h;
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, AMAX_MAGIC, sizeof h.magic) != 0)
        return ql_error_set(err, QL_EFORMAT, "%s: offset 0: not an activation maxima file (magic)",
                            path);
    if (h.version != AMAX_VERSION)
        return ql_error_set(err, QL_EFORMAT, "%s: offset 8: version %u, expected %d", path,
                            (unsigned)h.version, AMAX_VERSION);
    const size_t body = size - AMAX_HEADER_BYTES;
    if (h.n_sites < 1 || h.n_sites > INT32_MAX || h.n_sites > body / (2 * sizeof(int64_t)))
        return ql_error_set(err, QL_EFORMAT,
                            "%s: offset 12: %u sites, expected 1 to %zu for a body of %zu bytes",
                            path, (unsigned)h.n_sites, body / (2 * sizeof(int64_t)), body);
    if (h.chunk_size < 1 || h.chunk_count < 1)
        return ql_error_set(err, QL_EFORMAT, "%s: offset 16: %lld chunks of %lld tokens", path,
                            (long long)h.chunk_count, (long long)h.chunk_size);
    if (!is_sha256_hex(h.model_sha256, 64) || !is_sha256_hex(h.text_sha256, 64) ||
        !is_sha256_hex(h.body_sha256, 64))
        return ql_error_set(err, QL_EFORMAT, "%s: offset 32: a SHA-256 field is not 64 hex digits",
                            path);
    const int n = (int)h.n_sites;
    const uint8_t *widths = buf + AMAX_HEADER_BYTES;
    /* The widths fix the body's size. Each, and their sum, is bounded by what the body
     * could hold at all, so the sum cannot overflow; the size is checked after. */
    const size_t cap = body / sizeof(float);
    size_t n_values = 0;
    for (int i = 0; i < n; i++) {
        int64_t w;
        memcpy(&w, widths + (size_t)i * sizeof w, sizeof w);
        if (w < 1 || (uint64_t)w > cap - n_values)
            return ql_error_set(err, QL_EFORMAT,
                                "%s: offset %zu: site %d is %lld wide, expected 1 to %zu (what "
                                "a file of %zu bytes can hold)",
                                path, AMAX_HEADER_BYTES + (size_t)i * sizeof w, i, (long long)w,
                                cap - n_values, size);
        n_values += (size_t)w;
    }
    const size_t want =
        AMAX_HEADER_BYTES + (size_t)n * 2 * sizeof(int64_t) + n_values * sizeof(float);
    if (size != want)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: %zu bytes, expected %zu for %d sites of %zu values in all", path,
                            size, want, n, n_values);
    char digest[65];
    ql_sha256_hex(buf + AMAX_HEADER_BYTES, body, digest);
    if (memcmp(digest, h.body_sha256, 64) != 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: the body's SHA-256 is %.16s..., the header says %.16s... (a "
                            "corrupt file)",
                            path, digest, h.body_sha256);

    int64_t *n_in = malloc((size_t)n * sizeof *n_in);
    if (!n_in)
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
    memcpy(n_in, widths, (size_t)n * sizeof *n_in);
    ql_act_stats *st = NULL;
    ql_status rc = ql_act_stats_alloc(&st, n, n_in, err);
    free(n_in);
    if (rc)
        return rc;
    const uint8_t *p = widths + (size_t)n * sizeof(int64_t);
    memcpy(st->n_rows, p, (size_t)n * sizeof(int64_t));
    p += (size_t)n * sizeof(int64_t);
    for (int i = 0; i < n && !rc; i++) {
        if (st->n_rows[i] < 0)
            rc = ql_error_set(err, QL_EFORMAT, "%s: site %d: %lld rows", path, i,
                              (long long)st->n_rows[i]);
        memcpy(st->amax[i], p, (size_t)st->n_in[i] * sizeof(float));
        for (int64_t j = 0; j < st->n_in[i] && !rc; j++)
            if (!(st->amax[i][j] >= 0.0f)) /* also NaN */
                rc = ql_error_set(err, QL_EFORMAT,
                                  "%s: offset %zu: site %d channel %lld has maximum %g, expected "
                                  ">= 0",
                                  path, (size_t)(p - buf) + (size_t)j * sizeof(float), i,
                                  (long long)j, (double)st->amax[i][j]);
        p += (size_t)st->n_in[i] * sizeof(float);
    }
    if (rc) {
        ql_act_stats_free(st);
        return rc;
    }
    memcpy(origin->model_sha256, h.model_sha256, 64);
    origin->model_sha256[64] = '\0';
    memcpy(origin->text_sha256, h.text_sha256, 64);
    origin->text_sha256[64] = '\0';
    origin->chunk_size = h.chunk_size;
    origin->chunk_count = h.chunk_count;
    *out = st;
    return QL_OK;
}

ql_status ql_act_stats_read(const char *path, ql_act_stats **out, ql_act_stats_origin *origin,
                            ql_error *err)
{
    *out = NULL;
    memset(origin, 0, sizeof *origin);
    char *buf = NULL;
    size_t size = 0;
    ql_status st = ql_file_read_all(path, &buf, &size, err);
    if (st)
        return st;
    st = parse_act_stats((const uint8_t *)buf, size, path, out, origin, err);
    free(buf);
    return st;
}

/* ------------------------------------------------------------------------- */
/* Selection                                                                   */

static int cmp_float(const void *pa, const void *pb)
{
    const float a = *(const float *)pa, b = *(const float *)pb;
    return (a > b) - (a < b);
}

/* Candidate order: larger magnitude first, then the lower channel. */
typedef struct {
    float mag;
    int64_t col;
} candidate;

static int cmp_candidate(const void *pa, const void *pb)
{
    const candidate *a = pa, *b = pb;
    if (a->mag != b->mag)
        return a->mag > b->mag ? -1 : 1;
    return (a->col > b->col) - (a->col < b->col);
}

static int cmp_i64(const void *pa, const void *pb)
{
    const int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

ql_status ql_outliers_select(const float *amax, int64_t n_in, double ratio, ql_outlier_cols *out,
                             ql_error *err)
{
    memset(out, 0, sizeof *out);
    out->n_in = n_in;
    if (n_in <= 0)
        return ql_error_set(err, QL_EINVAL, "outlier selection: width %lld", (long long)n_in);
    if (!(ratio >= 0.0) || isinf(ratio))
        return ql_error_set(err, QL_EINVAL, "outlier selection: ratio %g", ratio);
    for (int64_t j = 0; j < n_in; j++)
        if (!(amax[j] >= 0.0f) || isinf(amax[j]))
            return ql_error_set(err, QL_EINVAL,
                                "outlier selection: channel %lld has magnitude %g (expected "
                                "finite and >= 0)",
                                (long long)j, (double)amax[j]);

    float *sorted = malloc((size_t)n_in * sizeof *sorted);
    candidate *cand = malloc((size_t)n_in * sizeof *cand);
    if (!sorted || !cand) {
        free(sorted);
        free(cand);
        return ql_error_set(err, QL_ENOMEM, "outlier selection: out of memory");
    }
    memcpy(sorted, amax, (size_t)n_in * sizeof *sorted);
    qsort(sorted, (size_t)n_in, sizeof *sorted, cmp_float);
    out->median = n_in % 2 ? (double)sorted[n_in / 2]
                           : 0.5 * ((double)sorted[n_in / 2 - 1] + (double)sorted[n_in / 2]);
    free(sorted);
    if (ratio <= 0.0) {
        free(cand);
        return QL_OK;
    }
    out->threshold = ratio * out->median;

    int64_t n_cand = 0;
    for (int64_t j = 0; j < n_in; j++)
        if ((double)amax[j] > out->threshold)
            cand[n_cand++] = (candidate){amax[j], j};
    out->n_above = n_cand;
    qsort(cand, (size_t)n_cand, sizeof *cand, cmp_candidate);
    const int64_t cap = n_in / QL_OUTLIER_CAP_DIV;
    out->n = n_cand < cap ? n_cand : cap;
    if (out->n > 0) {
        out->cols = malloc((size_t)out->n * sizeof *out->cols);
        if (!out->cols) {
            free(cand);
            out->n = 0;
            return ql_error_set(err, QL_ENOMEM, "outlier selection: out of memory");
        }
        for (int64_t i = 0; i < out->n; i++)
            out->cols[i] = cand[i].col;
        qsort(out->cols, (size_t)out->n, sizeof *out->cols, cmp_i64);
    }
    free(cand);
    return QL_OK;
}

void ql_outlier_cols_deinit(ql_outlier_cols *c)
{
    free(c->cols);
    c->cols = NULL;
    c->n = 0;
}

ql_status ql_outlier_set_build(const ql_act_stats *st, double ratio, ql_outlier_set **out,
                               ql_error *err)
{
    *out = NULL;
    ql_outlier_set *s = calloc(1, sizeof *s);
    if (!s || !(s->site = calloc((size_t)st->n_sites, sizeof *s->site))) {
        free(s);
        return ql_error_set(err, QL_ENOMEM, "outlier selection: out of memory");
    }
    s->n_sites = st->n_sites;
    s->ratio = ratio;
    for (int i = 0; i < st->n_sites; i++) {
        ql_status rc = ql_outliers_select(st->amax[i], st->n_in[i], ratio, &s->site[i], err);
        if (rc) {
            ql_error_prefix(err, "site %d: ", i);
            ql_outlier_set_free(s);
            return rc;
        }
        s->n_total += s->site[i].n;
    }
    *out = s;
    return QL_OK;
}

void ql_outlier_set_free(ql_outlier_set *s)
{
    if (!s)
        return;
    if (s->site)
        for (int i = 0; i < s->n_sites; i++)
            ql_outlier_cols_deinit(&s->site[i]);
    free(s->site);
    free(s);
}

/* ------------------------------------------------------------------------- */
/* The weight side                                                             */

uint64_t ql_outliers_bytes(int64_t n_out, int64_t n_in, int64_t n_cols)
{
    const uint64_t index_bytes = n_in <= 65536 ? 2 : 4;
    return (uint64_t)n_cols * ((uint64_t)n_out * sizeof(float) + index_bytes);
}

void ql_outliers_zero_cols(float *w, int64_t n_out, int64_t n_in, const int64_t *cols, int64_t n)
{
    for (int64_t r = 0; r < n_out; r++)
        for (int64_t i = 0; i < n; i++)
            w[r * n_in + cols[i]] = 0.0f;
}

void ql_outliers_copy_cols(float *dst, const float *src, int64_t n_out, int64_t n_in,
                           const int64_t *cols, int64_t n)
{
    for (int64_t r = 0; r < n_out; r++)
        for (int64_t i = 0; i < n; i++)
            dst[r * n_in + cols[i]] = src[r * n_in + cols[i]];
}

ql_status ql_outliers_quant_weight(int32_t type, const float *w, int64_t n_out, int64_t n_in,
                                   const float *imatrix, const ql_outlier_cols *oc, float *w_eff,
                                   void *q, size_t q_size, uint64_t *q_bytes,
                                   uint64_t *outlier_bytes, ql_error *err)
{
    const ql_type_traits *tr = ql_type_get(type);
    if (!tr)
        return ql_error_set(err, QL_EINVAL, "outlier split: unknown type id %d", (int)type);
    if (n_out <= 0 || n_in <= 0)
        return ql_error_set(err, QL_EINVAL, "outlier split: %s matrix of %lld x %lld", tr->name,
                            (long long)n_out, (long long)n_in);
    const int64_t n_cols = oc ? oc->n : 0;
    if (oc && oc->n_in != n_in)
        return ql_error_set(err, QL_EINVAL,
                            "outlier split: channel list for %lld inputs applied to a %lld-wide "
                            "%s matrix",
                            (long long)oc->n_in, (long long)n_in, tr->name);
    const size_t row = ql_row_size(tr->storage, n_in);
    if (row == 0)
        return ql_error_set(err, QL_EINVAL,
                            "outlier split: %s rows of %lld values do not split "
                            "into blocks of %lld",
                            tr->name, (long long)n_in, (long long)tr->block_size);
    const size_t need = row * (size_t)n_out;
    if (q && q_size < need)
        return ql_error_set(err, QL_EINVAL, "outlier split: %s buffer of %zu bytes, need %zu",
                            tr->name, q_size, need);

    ql_status rc = QL_OK;
    void *tmp = NULL;
    float *imat0 = NULL;
    if (!q) {
        tmp = malloc(need);
        if (!tmp)
            return ql_error_set(err, QL_ENOMEM, "outlier split: out of memory for %zu bytes", need);
        q = tmp;
        q_size = need;
    }

    if (type == QL_TYPE_Q8_0_XC) {
        /* The outlier weights stay inside the Q8_0 bytes (exact scales where possible). */
        rc = ql_quant_q8_0_xc(w, n_out, n_in, n_cols ? oc->cols : NULL, n_cols, q, q_size, NULL,
                              err);
        if (!rc)
            rc = ql_dequant_tensor(QL_TYPE_Q8_0, q, need, n_out, n_in, w_eff, err);
        if (!rc && outlier_bytes)
            *outlier_bytes = 0;
        goto out;
    }

    /* w_eff doubles as the zeroed copy that is quantized. */
    memcpy(w_eff, w, (size_t)(n_out * n_in) * sizeof(float));
    if (n_cols) {
        ql_outliers_zero_cols(w_eff, n_out, n_in, oc->cols, n_cols);
        if (imatrix) {
            imat0 = malloc((size_t)n_in * sizeof *imat0);
            if (!imat0) {
                rc = ql_error_set(err, QL_ENOMEM, "outlier split: out of memory");
                goto out;
            }
            memcpy(imat0, imatrix, (size_t)n_in * sizeof *imat0);
            ql_outliers_zero_cols(imat0, 1, n_in, oc->cols, n_cols);
            imatrix = imat0;
        }
    }
    rc = ql_quant_tensor(type, w_eff, n_out, n_in, imatrix, q, q_size, NULL, err);
    if (!rc)
        rc = ql_dequant_tensor(type, q, need, n_out, n_in, w_eff, err);
    if (rc)
        goto out;
    if (n_cols)
        ql_outliers_copy_cols(w_eff, w, n_out, n_in, oc->cols, n_cols);
    if (outlier_bytes)
        *outlier_bytes = ql_outliers_bytes(n_out, n_in, n_cols);
out:
    if (!rc && q_bytes)
        *q_bytes = need;
    free(tmp);
    free(imat0);
    return rc;
}
