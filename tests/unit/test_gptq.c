/* GPTQ into ggml's formats (formats/quant_split.h, formats/gptq.h): the split quantizers
 * give ggml's bytes, GPTQ with a diagonal Hessian gives ggml's bytes, and on a random
 * matrix with correlated inputs GPTQ's layer-output error is below round-to-nearest's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "formats/gptq.h"
#include "formats/quant_split.h"
#include "formats/types.h"
#include "qltest.h"

static const int32_t TYPES[] = {QL_TYPE_Q4_0, QL_TYPE_Q4_1, QL_TYPE_Q5_0, QL_TYPE_Q5_1,
                                QL_TYPE_Q8_0, QL_TYPE_Q2_K, QL_TYPE_Q3_K, QL_TYPE_Q4_K,
                                QL_TYPE_Q5_K, QL_TYPE_Q6_K, QL_TYPE_IQ4_NL, QL_TYPE_IQ4_XS};
#define NTYPES (int)(sizeof TYPES / sizeof TYPES[0])

static uint64_t rng = 88172645463325252ull;

static double uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}

static double gauss(void)
{
    return sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform());
}

/* Rows of every kind a scale search meets: gaussian, heavy-tailed, one all-zero
 * block, a constant block, a single spike, tiny values. */
static void fill_rows(float *x, int64_t nrows, int64_t n)
{
    for (int64_t r = 0; r < nrows; r++) {
        float *row = x + r * n;
        for (int64_t j = 0; j < n; j++) {
            double g = gauss();
            switch (r % 6) {
            case 0:
                row[j] = (float)g;
                break;
            case 1:
                row[j] = (float)(g * g * g * 0.1);
                break;
            case 2:
                row[j] = j < 256 ? 0.0f : (float)g;
                break;
            case 3:
                row[j] = j < 256 ? 0.25f : (float)(g + 1.0);
                break;
            case 4:
                row[j] = j % 97 == 5 ? 40.0f : (float)(g * 0.01);
                break;
            default:
                row[j] = (float)(g * 1e-3);
            }
        }
    }
}

/* ---- the split, used in sequence, is ggml's quantizer ---- */

static void test_split_is_ggml(void)
{
    const int64_t n = 512, nrows = 12;
    float *x = malloc((size_t)(n * nrows) * sizeof *x);
    float *imat = malloc((size_t)n * sizeof *imat);
    float *deq = malloc((size_t)(n * nrows) * sizeof *deq);
    fill_rows(x, nrows, n);
    for (int64_t j = 0; j < n; j++)
        imat[j] = (float)(uniform() * uniform() * 4.0);
    for (int ti = 0; ti < NTYPES; ti++) {
        const ql_type_traits *t = ql_type_get(TYPES[ti]);
        CHECK(ql_split_applies(t->type));
        const size_t rs = ql_row_size(t->type, n);
        uint8_t *ref = malloc(rs * (size_t)nrows), *got = malloc(rs * (size_t)nrows);
        for (int with_im = 0; with_im < 2; with_im++) {
            const float *im = with_im ? imat : NULL;
            t->quantize(x, ref, nrows, n, im);
            t->dequantize(ref, deq, nrows, n);
            int bad_bytes = 0, bad_values = 0;
            for (int64_t r = 0; r < nrows; r++) {
                const float *row = x + r * n;
                for (int64_t ib = 0; ib < n / t->block_size; ib++) {
                    ql_split_block b;
                    uint8_t L[QL_SPLIT_MAX_VALUES];
                    ql_split_choose(t->type, row, row, n, ib, im, &b);
                    CHECK_EQ_INT(b.nbytes, t->type_size);
                    CHECK_EQ_INT(b.n, t->block_size);
                    for (int j = 0; j < b.n; j++) {
                        L[j] = (uint8_t)ql_split_level(&b, j, row[ib * b.n + j]);
                        const float v = ql_split_value(&b, j, L[j]);
                        const float d = deq[r * n + ib * b.n + j];
                        if (memcmp(&v, &d, sizeof v) != 0 && !(v == 0 && d == 0))
                            bad_values++;
                    }
                    uint8_t *o = got + (size_t)r * rs + (size_t)ib * t->type_size;
                    ql_split_pack(&b, L, o);
                }
            }
            for (size_t i = 0; i < rs * (size_t)nrows; i++)
                bad_bytes += ref[i] != got[i];
            CHECK_MSG(bad_bytes == 0, "%s %s: %d bytes differ from ggml's quantizer", t->name,
                      with_im ? "imatrix" : "ref", bad_bytes);
            CHECK_MSG(bad_values == 0, "%s %s: %d decoded values differ from the dequantizer",
                      t->name, with_im ? "imatrix" : "ref", bad_values);
        }
        free(ref);
        free(got);
    }
    CHECK(!ql_split_applies(QL_TYPE_IQ2_XS));
    CHECK(ql_split_why_not(QL_TYPE_IQ2_XS) != NULL);
    CHECK(ql_split_why_not(QL_TYPE_TQ1_0) != NULL);
    CHECK(ql_split_why_not(QL_TYPE_Q4_K) == NULL);
    free(x);
    free(imat);
    free(deq);
}

/* The golden inputs (llama.cpp's own vectors) through the split, against the
 * existing quantizer (which the golden suite checks against ggml's bytes). */
static void test_split_golden_inputs(void)
{
    const char *names[] = {"golden/quants/inputs/gauss512.f32", "golden/quants/inputs/heavy512.f32",
                           "golden/quants/inputs/special256.f32"};
    for (int f = 0; f < 3; f++) {
        size_t len;
        float *x = qlt_read_file(qlt_shared(names[f]), &len);
        const int64_t n = 256, nrows = (int64_t)(len / sizeof(float)) / n;
        for (int ti = 0; ti < NTYPES; ti++) {
            const ql_type_traits *t = ql_type_get(TYPES[ti]);
            const size_t rs = ql_row_size(t->type, n);
            uint8_t *ref = malloc(rs * (size_t)nrows), *got = malloc(rs * (size_t)nrows);
            t->quantize(x, ref, nrows, n, NULL);
            for (int64_t r = 0; r < nrows; r++)
                for (int64_t ib = 0; ib < n / t->block_size; ib++) {
                    ql_split_block b;
                    uint8_t L[QL_SPLIT_MAX_VALUES];
                    const float *row = x + r * n;
                    ql_split_choose(t->type, row, row, n, ib, NULL, &b);
                    for (int j = 0; j < b.n; j++)
                        L[j] = (uint8_t)ql_split_level(&b, j, row[ib * b.n + j]);
                    ql_split_pack(&b, L, got + (size_t)r * rs + (size_t)ib * t->type_size);
                }
            CHECK_MSG(memcmp(ref, got, rs * (size_t)nrows) == 0, "%s on %s", t->name, names[f]);
            free(ref);
            free(got);
        }
        free(x);
    }
}

/* ---- GPTQ with a diagonal Hessian is ggml's quantizer ---- */

static void test_diag_is_ggml(void)
{
    const int64_t n = 512, nrows = 12;
    float *x = malloc((size_t)(n * nrows) * sizeof *x);
    float *imat = malloc((size_t)n * sizeof *imat);
    double *H = calloc((size_t)(n * n), sizeof *H);
    fill_rows(x, nrows, n);
    for (int64_t j = 0; j < n; j++) {
        imat[j] = (float)(0.01 + uniform() * 3.0);
        H[j * n + j] = (double)imat[j];
    }
    ql_gptq_opts o;
    ql_error err;
    for (int ti = 0; ti < NTYPES; ti++) {
        const ql_type_traits *t = ql_type_get(TYPES[ti]);
        const size_t rs = ql_row_size(t->type, n);
        uint8_t *ref = malloc(rs * (size_t)nrows), *got = malloc(rs * (size_t)nrows);
        for (int variant = 0; variant < 4; variant++) {
            const float *im = variant & 1 ? imat : NULL;
            ql_gptq_opts_default(&o);
            if (variant & 2) {
                o.order = QL_GPTQ_ORDER_ACT;
                o.scales = variant == 2 ? QL_GPTQ_SCALES_STATIC : QL_GPTQ_SCALES_LAZY;
                o.block = 37;
            }
            t->quantize(x, ref, nrows, n, im);
            memset(got, 0xAA, rs * (size_t)nrows);
            CHECK_OK(ql_gptq_quantize(t->type, x, got, nrows, n, im, H, &o, &err), &err);
            size_t bad = 0;
            for (size_t i = 0; i < rs * (size_t)nrows; i++)
                bad += ref[i] != got[i];
            CHECK_MSG(bad == 0, "%s variant %d: %zu bytes differ from ggml's", t->name, variant,
                      bad);
        }
        free(ref);
        free(got);
    }
    /* Not applicable: said, not done. */
    uint8_t dummy[64];
    CHECK(ql_gptq_quantize(QL_TYPE_IQ2_XXS, x, dummy, 1, 256, NULL, H, &o, &err) ==
          QL_EUNSUPPORTED);
    CHECK(strstr(err.msg, "lattice") != NULL);
    free(x);
    free(imat);
    free(H);
}

/* ---- on correlated inputs GPTQ beats round-to-nearest ---- */

/* ||(W - What) X^T||^2 / ||W X^T||^2 over the tokens X (n_tok, n). */
static double output_err(const ql_type_traits *t, const float *w, const void *q, int64_t nrows,
                         int64_t n, const float *X, int64_t n_tok)
{
    float *wq = malloc((size_t)(nrows * n) * sizeof *wq);
    t->dequantize(q, wq, nrows, n);
    double num = 0, den = 0;
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t k = 0; k < n_tok; k++) {
            double a = 0, b = 0;
            for (int64_t j = 0; j < n; j++) {
                a += ((double)w[r * n + j] - (double)wq[r * n + j]) * (double)X[k * n + j];
                b += (double)w[r * n + j] * (double)X[k * n + j];
            }
            num += a * a;
            den += b * b;
        }
    free(wq);
    return num / den;
}

static void test_random_matrix(void)
{
    const int64_t n = 512, nrows = 16, n_tok = 2048, rank = 64;
    float *W = malloc((size_t)(n * nrows) * sizeof *W);
    float *X = malloc((size_t)(n_tok * n) * sizeof *X);
    float *A = malloc((size_t)(rank * n) * sizeof *A);
    double *H = calloc((size_t)(n * n), sizeof *H);
    float *imat = calloc((size_t)n, sizeof *imat);
    for (int64_t i = 0; i < n * nrows; i++)
        W[i] = (float)(gauss() * 0.02);
    /* Inputs from a low-rank mixture plus noise, a few loud channels: the correlated
     * activations of a transformer's products. */
    for (int64_t i = 0; i < rank * n; i++)
        A[i] = (float)gauss();
    for (int64_t k = 0; k < n_tok; k++) {
        double z[64];
        for (int r = 0; r < rank; r++)
            z[r] = gauss();
        for (int64_t j = 0; j < n; j++) {
            double v = 0.3 * gauss();
            for (int r = 0; r < rank; r++)
                v += z[r] * (double)A[r * n + j] * 0.15;
            if (j % 61 == 7)
                v *= 8.0;
            X[k * n + j] = (float)v;
        }
    }
    for (int64_t k = 0; k < n_tok; k++)
        for (int64_t a = 0; a < n; a++) {
            const double xa = (double)X[k * n + a];
            for (int64_t b = 0; b < n; b++)
                H[a * n + b] += xa * (double)X[k * n + b];
        }
    for (int64_t j = 0; j < n; j++)
        imat[j] = (float)H[j * n + j];
    ql_gptq_opts o;
    ql_gptq_opts_default(&o);
    ql_error err;
    for (int ti = 0; ti < NTYPES; ti++) {
        const ql_type_traits *t = ql_type_get(TYPES[ti]);
        const size_t rs = ql_row_size(t->type, n);
        uint8_t *rtn = malloc(rs * (size_t)nrows), *gq = malloc(rs * (size_t)nrows);
        t->quantize(W, rtn, nrows, n, imat);
        CHECK_OK(ql_gptq_quantize(t->type, W, gq, nrows, n, imat, H, &o, &err), &err);
        const double e_rtn = output_err(t, W, rtn, nrows, n, X, n_tok);
        const double e_gq = output_err(t, W, gq, nrows, n, X, n_tok);
        printf("%-7s rel. output error: rtn %.3e gptq %.3e (%.2fx)\n", t->name, e_rtn, e_gq,
               e_rtn / e_gq);
        CHECK_MSG(e_gq < e_rtn, "%s: gptq %.4g >= rtn %.4g", t->name, e_gq, e_rtn);
        /* Thread count does not matter: one thread gives the same bytes. */
        uint8_t *one = malloc(rs * (size_t)nrows);
        ql_threads_set(1);
        CHECK_OK(ql_gptq_quantize(t->type, W, one, nrows, n, imat, H, &o, &err), &err);
        ql_threads_set(0);
        CHECK_MSG(memcmp(one, gq, rs * (size_t)nrows) == 0, "%s: bytes depend on threads",
                  t->name);
        free(one);
        free(rtn);
        free(gq);
    }
    /* A singular Hessian without damping is refused with a message. */
    double *Z = calloc((size_t)(n * n), sizeof *Z);
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++)
            Z[a * n + b] = 1.0;
    o.damp = 0.0;
    uint8_t *q = malloc(ql_row_size(QL_TYPE_Q4_0, n) * (size_t)nrows);
    CHECK(ql_gptq_quantize(QL_TYPE_Q4_0, W, q, nrows, n, NULL, Z, &o, &err) == QL_EFORMAT);
    CHECK(strstr(err.msg, "positive definite") != NULL);
    free(q);
    free(Z);
    free(W);
    free(X);
    free(A);
    free(H);
    free(imat);
}

static void test_opts(void)
{
    ql_gptq_opts o;
    ql_error err;
    char buf[128];
    CHECK_OK(ql_gptq_opts_parse("", &o, &err), &err);
    CHECK_EQ_INT(ql_gptq_opts_print(&o, buf, sizeof buf), 0);
    CHECK_OK(ql_gptq_opts_parse("order=act,damp=0.1,block=64,scales=static,inputs=reference", &o,
                                &err),
             &err);
    ql_gptq_opts_print(&o, buf, sizeof buf);
    CHECK(strcmp(buf, "damp=0.10000000000000001,order=act,scales=static,block=64,"
                      "inputs=reference") == 0);
    ql_gptq_opts back;
    CHECK_OK(ql_gptq_opts_parse(buf, &back, &err), &err);
    CHECK(memcmp(&back, &o, sizeof o) == 0);
    CHECK_OK(ql_gptq_opts_parse("damp=0.01", &o, &err), &err);
    ql_gptq_opts_print(&o, buf, sizeof buf);
    CHECK(strcmp(buf, "") == 0);
    CHECK(ql_gptq_opts_parse("order=random", &o, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "natural or act") != NULL);
    CHECK(ql_gptq_opts_parse("blk=3", &o, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "unknown gptq option 'blk'") != NULL);
    CHECK(ql_gptq_opts_parse("damp", &o, &err) == QL_EINVAL);
    CHECK(ql_gptq_opts_parse("damp=-1", &o, &err) == QL_EINVAL);
    CHECK(ql_gptq_opts_parse("block=0", &o, &err) == QL_EINVAL);
}

int main(void)
{
    test_split_is_ggml();
    test_split_golden_inputs();
    test_diag_is_ggml();
    test_random_matrix();
    test_opts();
    return qlt_done();
}
