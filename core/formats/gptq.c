/* GPTQ into ggml's block formats. See gptq.h. */
#include "formats/gptq.h"

#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "formats/quant_split.h"
#include "formats/types.h"

void ql_gptq_opts_default(ql_gptq_opts *o)
{
    o->damp = QL_GPTQ_DEFAULT_DAMP;
    o->order = QL_GPTQ_ORDER_NATURAL;
    o->scales = QL_GPTQ_SCALES_LAZY;
    o->block = QL_GPTQ_DEFAULT_BLOCK;
    o->inputs = QL_GPTQ_INPUTS_QUANTIZED;
}

/* ======================================================================== */
/* Options                                                                   */
/* ======================================================================== */

static ql_status parse_one(const char *key, size_t klen, const char *val, size_t vlen,
                           ql_gptq_opts *o, ql_error *err)
{
    char v[64];
    if (vlen == 0 || vlen >= sizeof v)
        return ql_error_set(err, QL_EINVAL, "gptq option '%.*s': missing or overlong value",
                            (int)klen, key);
    memcpy(v, val, vlen);
    v[vlen] = '\0';
#define KEY_IS(s) (klen == strlen(s) && memcmp(key, s, klen) == 0)
    if (KEY_IS("damp")) {
        char *end;
        double d = strtod(v, &end);
        if (*end || !(d >= 0.0) || !(d < 1e6))
            return ql_error_set(err, QL_EINVAL,
                                "gptq option damp=%s: expected a number >= 0 (relative to the "
                                "mean of diag H; GPTQ's default 0.01)",
                                v);
        o->damp = d;
    } else if (KEY_IS("order")) {
        if (strcmp(v, "natural") == 0)
            o->order = QL_GPTQ_ORDER_NATURAL;
        else if (strcmp(v, "act") == 0)
            o->order = QL_GPTQ_ORDER_ACT;
        else
            return ql_error_set(err, QL_EINVAL, "gptq option order=%s: expected natural or act",
                                v);
    } else if (KEY_IS("scales")) {
        if (strcmp(v, "lazy") == 0)
            o->scales = QL_GPTQ_SCALES_LAZY;
        else if (strcmp(v, "static") == 0)
            o->scales = QL_GPTQ_SCALES_STATIC;
        else
            return ql_error_set(err, QL_EINVAL, "gptq option scales=%s: expected lazy or static",
                                v);
    } else if (KEY_IS("block")) {
        char *end;
        long b = strtol(v, &end, 10);
        if (*end || b < 1 || b > 1 << 20)
            return ql_error_set(err, QL_EINVAL,
                                "gptq option block=%s: expected a column count >= 1", v);
        o->block = (int)b;
    } else if (KEY_IS("inputs")) {
        if (strcmp(v, "quantized") == 0)
            o->inputs = QL_GPTQ_INPUTS_QUANTIZED;
        else if (strcmp(v, "reference") == 0)
            o->inputs = QL_GPTQ_INPUTS_REFERENCE;
        else
            return ql_error_set(err, QL_EINVAL,
                                "gptq option inputs=%s: expected quantized or reference", v);
    } else {
        return ql_error_set(err, QL_EINVAL,
                            "unknown gptq option '%.*s' (expected damp, order, scales, block or "
                            "inputs)",
                            (int)klen, key);
    }
#undef KEY_IS
    return QL_OK;
}

ql_status ql_gptq_opts_parse(const char *s, ql_gptq_opts *o, ql_error *err)
{
    ql_gptq_opts_default(o);
    const char *p = s;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq)
            return ql_error_set(err, QL_EINVAL, "gptq option '%.*s': expected KEY=VALUE", (int)len,
                                p);
        ql_status st =
            parse_one(p, (size_t)(eq - p), eq + 1, len - (size_t)(eq - p) - 1, o, err);
        if (st)
            return st;
        p = comma ? comma + 1 : NULL;
    }
    return QL_OK;
}

int ql_gptq_opts_print(const ql_gptq_opts *o, char *buf, size_t size)
{
    char tmp[256];
    size_t n = 0;
    tmp[0] = '\0';
#define ADD(...) n += (size_t)snprintf(tmp + n, sizeof tmp - n, __VA_ARGS__)
    if (o->damp != QL_GPTQ_DEFAULT_DAMP)
        ADD("%sdamp=%.17g", n ? "," : "", o->damp);
    if (o->order != QL_GPTQ_ORDER_NATURAL)
        ADD("%sorder=act", n ? "," : "");
    if (o->scales != QL_GPTQ_SCALES_LAZY)
        ADD("%sscales=static", n ? "," : "");
    if (o->block != QL_GPTQ_DEFAULT_BLOCK)
        ADD("%sblock=%d", n ? "," : "", o->block);
    if (o->inputs != QL_GPTQ_INPUTS_QUANTIZED)
        ADD("%sinputs=reference", n ? "," : "");
#undef ADD
    return snprintf(buf, size, "%s", tmp);
}

/* ======================================================================== */
/* The factor                                                                */
/* ======================================================================== */

/* U (n x n, row-major upper triangle, zeros below): the upper Cholesky factor of
 * (H + damping)^-1 in processing order perm, with dead columns' diagonals set to 1. */
static ql_status hinv_factor(const double *H, int64_t n, const int64_t *perm, const bool *dead,
                             double damp, double *U, ql_error *err)
{
    double mean = 0.0;
    for (int64_t i = 0; i < n; i++)
        mean += dead[i] ? 1.0 : H[i * n + i];
    mean /= (double)n;
    const double add = damp * mean;
    for (int64_t a = 0; a < n; a++) {
        const int64_t pa = perm[a];
        for (int64_t b = 0; b < n; b++) {
            const int64_t pb = perm[b];
            double h = H[pa * n + pb];
            if (dead[pa] || dead[pb])
                h = pa == pb ? 1.0 : 0.0;
            if (a == b)
                h += add;
            if (!isfinite(h))
                return ql_error_set(err, QL_EFORMAT,
                                    "gptq: Hessian entry (%lld, %lld) is not finite",
                                    (long long)pa, (long long)pb);
            U[a * n + b] = h;
        }
    }
    /* H = L L^T, then H^-1 from L, then H^-1 = U^T U. Row-major 'U' is the same
     * triangle LAPACK sees as column-major 'L'; the matrix is symmetric throughout. */
    lapack_int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'U', (lapack_int)n, U, (lapack_int)n);
    if (info == 0)
        info = LAPACKE_dpotri(LAPACK_ROW_MAJOR, 'U', (lapack_int)n, U, (lapack_int)n);
    if (info != 0)
        return ql_error_set(err, QL_EFORMAT,
                            "gptq: the damped Hessian (%lld columns, damp %g) is not positive "
                            "definite (LAPACK info %d): raise damp",
                            (long long)n, damp, (int)info);
    info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'U', (lapack_int)n, U, (lapack_int)n);
    if (info != 0)
        return ql_error_set(err, QL_EFORMAT,
                            "gptq: the inverse Hessian (%lld columns) is not positive definite "
                            "(LAPACK info %d): raise damp",
                            (long long)n, (int)info);
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < a; b++)
            U[a * n + b] = 0.0;
    return QL_OK;
}

/* ======================================================================== */
/* One row                                                                   */
/* ======================================================================== */

typedef struct {
    double *w;            /* n: the row in processing order, compensated as it goes */
    float *cur;           /* n: the row in column order (floats the search sees) */
    double *e;            /* block: the scaled errors of the current lazy block */
    uint8_t *L;           /* n: levels in column order */
    ql_split_block *blk;  /* n / bs: the blocks' parameters */
    bool *chosen;         /* n / bs */
} row_work;

/* Rows GPTQ takes together: each row of U, once in cache, serves all of them (one row
 * at a time would stream the whole n x n factor from memory for every row). Every row's
 * arithmetic is the same in any batch, so the bytes do not depend on it. */
#define GPTQ_ROW_BATCH 16

static void gptq_rows(int32_t type, int64_t bs, const float *src, int nr, const float *imatrix,
                      const bool *dead, const int64_t *perm, const double *U, int64_t n,
                      const ql_gptq_opts *o, row_work *rws, uint8_t *out, size_t row_bytes,
                      size_t block_bytes)
{
    const int64_t nb = n / bs;
    for (int r = 0; r < nr; r++) {
        row_work *rw = &rws[r];
        const float *x = src + (int64_t)r * n;
        for (int64_t c = 0; c < n; c++)
            rw->cur[c] = dead[c] ? 0.0f : x[c];
        for (int64_t a = 0; a < n; a++)
            rw->w[a] = (double)rw->cur[perm[a]];
        for (int64_t ib = 0; ib < nb; ib++) {
            rw->chosen[ib] = o->scales == QL_GPTQ_SCALES_STATIC;
            if (rw->chosen[ib])
                ql_split_choose(type, rw->cur, x, n, ib, imatrix, &rw->blk[ib]);
        }
    }
    const int64_t B = o->block;
    for (int64_t i1 = 0; i1 < n; i1 += B) {
        const int64_t i2 = i1 + B < n ? i1 + B : n;
        for (int64_t i = i1; i < i2; i++) {
            const int64_t c = perm[i];
            const int64_t ib = c / bs;
            const int j = (int)(c - ib * bs);
            const double *u = U + i * n;
            for (int r = 0; r < nr; r++) {
                row_work *rw = &rws[r];
                if (!rw->chosen[ib]) {
                    /* The block's current values, in column order, for ggml's search. */
                    for (int64_t a = i; a < n; a++) {
                        const int64_t cc = perm[a];
                        if (cc / bs == ib)
                            rw->cur[cc] = (float)rw->w[a];
                    }
                    ql_split_choose(type, rw->cur, src + (int64_t)r * n, n, ib, imatrix,
                                    &rw->blk[ib]);
                    rw->chosen[ib] = true;
                }
                const float v = (float)rw->w[i];
                const int lev = ql_split_level(&rw->blk[ib], j, v);
                rw->L[c] = (uint8_t)lev;
                const double q = (double)ql_split_value(&rw->blk[ib], j, lev);
                const double e = (rw->w[i] - q) / u[i];
                rw->e[i - i1] = e;
                double *w = rw->w;
                /* Element by element (no reduction): vector lanes compute what scalar
                 * code does, bit for bit. */
#pragma omp simd
                for (int64_t k = i + 1; k < i2; k++)
                    w[k] -= e * u[k];
            }
        }
        /* The lazy update of the columns after the block. */
        for (int64_t t = 0; t < i2 - i1; t++) {
            const double *u = U + (i1 + t) * n;
            for (int r = 0; r < nr; r++) {
                const double e = rws[r].e[t];
                double *w = rws[r].w;
#pragma omp simd
                for (int64_t k = i2; k < n; k++)
                    w[k] -= e * u[k];
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int64_t ib = 0; ib < nb; ib++)
            ql_split_pack(&rws[r].blk[ib], rws[r].L + ib * bs,
                          out + (size_t)r * row_bytes + (size_t)ib * block_bytes);
}

size_t ql_gptq_work_bytes(int64_t n_per_row, int threads)
{
    const size_t n = (size_t)n_per_row;
    const size_t per_row = GPTQ_ROW_BATCH * (n * (sizeof(double) + sizeof(float) + 1 + sizeof(bool)) +
                           (n / 32 + 1) * sizeof(ql_split_block) + QL_GPTQ_DEFAULT_BLOCK * 8);
    return n * n * sizeof(double) + n * (sizeof(int64_t) + sizeof(bool) + sizeof(double)) +
           (size_t)(threads > 0 ? threads : 1) * per_row;
}


/* Processing order by decreasing diag(H), ties by column (a stable order whatever
 * qsort does). */
typedef struct {
    double h;
    int64_t c;
} diag_key;

static int cmp_key(const void *pa, const void *pb)
{
    const diag_key *a = pa, *b = pb;
    if (a->h != b->h)
        return a->h > b->h ? -1 : 1;
    return a->c < b->c ? -1 : a->c > b->c;
}

struct ql_gptq_factor {
    int64_t n;
    ql_gptq_opts o;
    double *U;     /* (n, n) upper Cholesky factor of the damped H^-1, processing order */
    int64_t *perm; /* (n,) processing order: column of position a */
    bool *dead;    /* (n,) diag(H) == 0 */
};

void ql_gptq_factor_free(ql_gptq_factor *f)
{
    if (!f)
        return;
    free(f->U);
    free(f->perm);
    free(f->dead);
    free(f);
}

ql_status ql_gptq_factor_alloc(ql_gptq_factor **out, const double *H, int64_t n,
                               const ql_gptq_opts *o, ql_error *err)
{
    *out = NULL;
    if (n <= 0 || o->block < 1)
        return ql_error_set(err, QL_EINVAL, "gptq: %lld columns, block %d", (long long)n, o->block);
    ql_gptq_factor *f = calloc(1, sizeof *f);
    diag_key *keys = malloc((size_t)n * sizeof *keys);
    ql_status st = QL_OK;
    if (!f || !keys || !(f->U = malloc((size_t)n * (size_t)n * sizeof *f->U)) ||
        !(f->perm = malloc((size_t)n * sizeof *f->perm)) ||
        !(f->dead = malloc((size_t)n * sizeof *f->dead))) {
        st = ql_error_set(err, QL_ENOMEM, "gptq: no memory for the %lld x %lld inverse Hessian",
                          (long long)n, (long long)n);
        goto out;
    }
    f->n = n;
    f->o = *o;
    for (int64_t c = 0; c < n; c++) {
        f->dead[c] = H[c * n + c] == 0.0;
        keys[c].h = f->dead[c] ? 0.0 : H[c * n + c];
        keys[c].c = c;
    }
    if (o->order == QL_GPTQ_ORDER_ACT)
        qsort(keys, (size_t)n, sizeof *keys, cmp_key);
    for (int64_t a = 0; a < n; a++)
        f->perm[a] = keys[a].c;
    st = hinv_factor(H, n, f->perm, f->dead, o->damp, f->U, err);
out:
    free(keys);
    if (st)
        ql_gptq_factor_free(f);
    else
        *out = f;
    return st;
}

ql_status ql_gptq_quantize_rows(const ql_gptq_factor *f, int32_t type, const float *src, void *dst,
                                int64_t nrows, const float *imatrix, ql_error *err)
{
    if (!ql_split_applies(type))
        return ql_error_set(err, QL_EUNSUPPORTED, "gptq: %s: %s", ql_type_name(type),
                            ql_split_why_not(type));
    const ql_type_traits *t = ql_type_get(type);
    const int64_t bs = t->block_size, n = f->n;
    if (n % bs)
        return ql_error_set(err, QL_EINVAL, "gptq: %s: row length %lld is not a multiple of %lld",
                            t->name, (long long)n, (long long)bs);
    const ql_gptq_opts *o = &f->o;
    const size_t row_bytes = ql_row_size(type, n);
    const int64_t nb = n / bs;
    int failed = 0;
    const int64_t n_batches = (nrows + GPTQ_ROW_BATCH - 1) / GPTQ_ROW_BATCH;
#pragma omp parallel reduction(| : failed) num_threads(ql_threads_get()) if (n_batches > 1)
    {
        row_work rws[GPTQ_ROW_BATCH];
        bool ok = true;
        for (int r = 0; r < GPTQ_ROW_BATCH; r++) {
            row_work *rw = &rws[r];
            rw->w = malloc((size_t)n * sizeof *rw->w);
            rw->cur = malloc((size_t)n * sizeof *rw->cur);
            rw->e = malloc((size_t)o->block * sizeof *rw->e);
            rw->L = malloc((size_t)n);
            rw->blk = malloc((size_t)nb * sizeof *rw->blk);
            rw->chosen = malloc((size_t)nb * sizeof *rw->chosen);
            ok = ok && rw->w && rw->cur && rw->e && rw->L && rw->blk && rw->chosen;
        }
        if (!ok)
            failed = 1;
#pragma omp for schedule(static)
        for (int64_t bi = 0; bi < n_batches; bi++) {
            const int64_t r0 = bi * GPTQ_ROW_BATCH;
            const int nr = (int)(nrows - r0 < GPTQ_ROW_BATCH ? nrows - r0 : GPTQ_ROW_BATCH);
            if (ok)
                gptq_rows(type, bs, src + r0 * n, nr, imatrix, f->dead, f->perm, f->U, n, o, rws,
                          (uint8_t *)dst + (size_t)r0 * row_bytes, row_bytes, t->type_size);
        }
        for (int r = 0; r < GPTQ_ROW_BATCH; r++) {
            free(rws[r].w);
            free(rws[r].cur);
            free(rws[r].e);
            free(rws[r].L);
            free(rws[r].blk);
            free(rws[r].chosen);
        }
    }
    if (failed)
        return ql_error_set(err, QL_ENOMEM, "gptq: no memory for a row's work arrays (%lld values)",
                            (long long)n);
    return QL_OK;
}

ql_status ql_gptq_quantize(int32_t type, const float *src, void *dst, int64_t nrows,
                           int64_t n_per_row, const float *imatrix, const double *H,
                           const ql_gptq_opts *o, ql_error *err)
{
    if (!ql_split_applies(type))
        return ql_error_set(err, QL_EUNSUPPORTED, "gptq: %s: %s", ql_type_name(type),
                            ql_split_why_not(type));
    const ql_type_traits *t = ql_type_get(type);
    if (n_per_row <= 0 || n_per_row % t->block_size)
        return ql_error_set(err, QL_EINVAL, "gptq: %s: row length %lld is not a multiple of %lld",
                            t->name, (long long)n_per_row, (long long)t->block_size);
    ql_gptq_factor *f = NULL;
    ql_status st = ql_gptq_factor_alloc(&f, H, n_per_row, o, err);
    if (!st)
        st = ql_gptq_quantize_rows(f, type, src, dst, nrows, imatrix, err);
    ql_gptq_factor_free(f);
    return st;
}
