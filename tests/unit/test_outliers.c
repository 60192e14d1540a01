/* Outlier split: calibration maxima, hand-checked selection (median, ratio, the n_in/16
 * cap, largest first), the size count, the weight side (columns zeroed before
 * quantizing and written back exactly; Q8_0_XC), and the equivalence of the single
 * product W_eff x_eff with the two-part product, term by term. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/actquant.h"
#include "experiment/outliers.h"
#include "formats/quant_xc.h"
#include "formats/types.h"
#include "model/quant.h"
#include "qltest.h"

static uint64_t rng_state;
static float gauss(void)
{
    return (float)ql_rng_gauss(&rng_state);
}

static void stats_accumulate(void)
{
    ql_error err;
    ql_act_stats *st = NULL, *st2 = NULL, *bad = NULL;
    const int64_t widths[2] = {4, 3};
    CHECK_OK(ql_act_stats_alloc(&st, 2, widths, &err), &err);
    const float x0[8] = {1, -2, 0.5f, 0, -3, 1, NAN, 0.25f};
    ql_act_stats_add(st, 0, x0, 2);
    const float want0[4] = {3, 2, 0.5f, 0.25f};
    CHECK(memcmp(st->amax[0], want0, sizeof want0) == 0);
    CHECK_EQ_INT(st->n_rows[0], 2);
    CHECK_EQ_INT(st->n_rows[1], 0);

    CHECK_OK(ql_act_stats_alloc(&st2, 2, widths, &err), &err);
    const float x1[3] = {7, -1, 0};
    ql_act_stats_add(st2, 1, x1, 1);
    const float x2[4] = {0, 0, -9, 0};
    ql_act_stats_add(st2, 0, x2, 1);
    CHECK_OK(ql_act_stats_merge(st, st2, &err), &err);
    const float want0m[4] = {3, 2, 9, 0.25f}, want1[3] = {7, 1, 0};
    CHECK(memcmp(st->amax[0], want0m, sizeof want0m) == 0);
    CHECK(memcmp(st->amax[1], want1, sizeof want1) == 0);
    CHECK_EQ_INT(st->n_rows[0], 3);
    CHECK_EQ_INT(st->n_rows[1], 1);

    const int64_t other[2] = {4, 5};
    CHECK_OK(ql_act_stats_alloc(&bad, 2, other, &err), &err);
    CHECK(ql_act_stats_merge(st, bad, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "site 1 is 3 wide vs 5") != NULL);
    ql_act_stats_reset(st);
    CHECK(st->amax[0][2] == 0.0f && st->n_rows[0] == 0);

    const int64_t zero[1] = {0};
    ql_act_stats *none;
    CHECK(ql_act_stats_alloc(&none, 1, zero, &err) == QL_EINVAL && none == NULL);
    ql_act_stats_free(st);
    ql_act_stats_free(st2);
    ql_act_stats_free(bad);
    ql_act_stats_free(NULL);
}

/* Writes `size` bytes of buf to name under the test's directory; returns the path. */
static const char *put_file(const char *name, const void *buf, size_t size)
{
    const char *path = qlt_tmp(name);
    ql_error err;
    CHECK_OK(ql_file_write_all(path, buf, size, &err), &err);
    return path;
}

/* ql_act_stats_read on a copy of good (size bytes) changed by the caller: the status
 * and a piece of the message. */
static void expect_bad(const char *name, const void *buf, size_t size, const char *msg)
{
    ql_error err;
    ql_act_stats *st = (ql_act_stats *)1;
    ql_act_stats_origin o;
    const char *path = put_file(name, buf, size);
    ql_status rc = ql_act_stats_read(path, &st, &o, &err);
    CHECK_MSG(rc == QL_EFORMAT && st == NULL && strstr(err.msg, path) && strstr(err.msg, msg),
              "%s: status %d, message '%s', expected '%s'", name, (int)rc, err.msg, msg);
}

/* Re-signs a changed body so that only the check under test fails. */
static void resign(uint8_t *buf, size_t size)
{
    char digest[65];
    ql_sha256_hex(buf + 256, size - 256, digest);
    memcpy(buf + 160, digest, 64);
}

/* The cache file: a bit-exact round trip, and every kind of damage refused by name. */
static void stats_file(void)
{
    ql_error err;
    ql_act_stats *st = NULL, *back = NULL;
    const int64_t widths[3] = {4, 1, 6};
    CHECK_OK(ql_act_stats_alloc(&st, 3, widths, &err), &err);
    rng_state = 11;
    float x[2 * 6];
    for (int s = 0; s < 3; s++) {
        for (int64_t j = 0; j < 2 * widths[s]; j++)
            x[j] = gauss();
        ql_act_stats_add(st, s, x, 2);
    }
    ql_act_stats_add(st, 2, x, 1); /* rows differ per site */
    ql_act_stats_origin o, ob;
    memset(&o, 0, sizeof o);
    ql_sha256_hex("model", 5, o.model_sha256);
    ql_sha256_hex("text", 4, o.text_sha256);
    o.chunk_size = 64;
    o.chunk_count = 8;
    const char *path = qlt_tmp("stats.amax");
    CHECK_OK(ql_act_stats_write(st, &o, path, &err), &err);
    CHECK_OK(ql_act_stats_read(path, &back, &ob, &err), &err);
    if (back) {
        CHECK_EQ_INT(back->n_sites, 3);
        for (int s = 0; s < 3 && back->n_sites == 3; s++) {
            CHECK_EQ_INT(back->n_in[s], widths[s]);
            CHECK_EQ_INT(back->n_rows[s], st->n_rows[s]);
            CHECK(memcmp(back->amax[s], st->amax[s], (size_t)widths[s] * sizeof(float)) == 0);
        }
        CHECK(strcmp(ob.model_sha256, o.model_sha256) == 0);
        CHECK(strcmp(ob.text_sha256, o.text_sha256) == 0);
        CHECK(ob.chunk_size == 64 && ob.chunk_count == 8);
    }
    ql_act_stats_free(back);

    char *good = NULL;
    size_t size = 0;
    CHECK_OK(ql_file_read_all(path, &good, &size, &err), &err);
    /* header, 3 widths and 3 row counts, 11 floats */
    CHECK_EQ_INT((int64_t)size, 256 + 3 * 16 + 11 * 4);
    uint8_t *b = malloc(size + 8);
    if (!good || !b || size != 256 + 3 * 16 + 11 * 4) {
        free(good);
        free(b);
        ql_act_stats_free(st);
        return;
    }
    expect_bad("empty.amax", good, 0, "shorter than the 256-byte header");
    expect_bad("short.amax", good, size - 1, "expected 348");
    memcpy(b, good, size);
    b[size] = 0;
    expect_bad("long.amax", b, size + 1, "349 bytes, expected 348");
    memcpy(b, good, size);
    b[1] = 'X';
    expect_bad("magic.amax", b, size, "not an activation maxima file");
    memcpy(b, good, size);
    b[8] = 2;
    expect_bad("version.amax", b, size, "version 2, expected 1");
    memcpy(b, good, size);
    memset(b + 12, 0, 4);
    expect_bad("nosites.amax", b, size, "0 sites");
    memcpy(b, good, size);
    memset(b + 16, 0, 8);
    expect_bad("chunks.amax", b, size, "8 chunks of 0 tokens");
    memcpy(b, good, size);
    b[40] = 'Z';
    expect_bad("sha.amax", b, size, "not 64 hex digits");
    /* A width that claims more values than the file has, or none. */
    memcpy(b, good, size);
    int64_t w = 1000;
    memcpy(b + 256 + 8, &w, sizeof w);
    expect_bad("wide.amax", b, size, "site 1 is 1000 wide");
    memcpy(b, good, size);
    w = 0;
    memcpy(b + 256, &w, sizeof w);
    expect_bad("narrow.amax", b, size, "site 0 is 0 wide");
    /* One changed bit of a maximum: the checksum catches it. */
    memcpy(b, good, size);
    b[size - 3] ^= 0x10;
    expect_bad("flipped.amax", b, size, "corrupt");
    /* Well-formed and signed, but impossible values. */
    memcpy(b, good, size);
    float neg = -1.0f;
    memcpy(b + 256 + 48 + 4 * 5, &neg, sizeof neg);
    resign(b, size);
    expect_bad("negative.amax", b, size, "site 2 channel 0 has maximum -1");
    memcpy(b, good, size);
    float nan = NAN;
    memcpy(b + 256 + 48, &nan, sizeof nan);
    resign(b, size);
    expect_bad("nan.amax", b, size, "site 0 channel 0 has maximum nan");
    memcpy(b, good, size);
    int64_t rows = -2;
    memcpy(b + 256 + 24 + 8, &rows, sizeof rows);
    resign(b, size);
    expect_bad("rows.amax", b, size, "site 1: -2 rows");
    /* A missing file is an I/O error, not a format error. */
    ql_act_stats_origin om;
    CHECK(ql_act_stats_read(qlt_tmp("no-such.amax"), &back, &om, &err) == QL_EIO && !back);
    /* The writer refuses an origin it could not read back. */
    ql_act_stats_origin bad = o;
    ql_strlcpy(bad.text_sha256, "not-a-digest", sizeof bad.text_sha256);
    CHECK(ql_act_stats_write(st, &bad, qlt_tmp("bad.amax"), &err) == QL_EINVAL);
    bad = o;
    bad.chunk_count = 0;
    CHECK(ql_act_stats_write(st, &bad, qlt_tmp("bad.amax"), &err) == QL_EINVAL);
    free(good);
    free(b);
    ql_act_stats_free(st);
}

static void selection_hand_checked(void)
{
    ql_error err;
    ql_outlier_cols oc;
    /* 32 channels 1..32 with four replaced by 50 (ch 3), 200 (ch 9), 60 (ch 20) and
     * 49.5 (ch 31). Sorted, the 16th and 17th values are 18 and 19: median 18.5 (even
     * count: the mean of the middle pair). r = 2.5: threshold 46.25, four channels above,
     * cap 32/16 = 2 keeps the largest two, 200 (ch 9) and 60 (ch 20), listed ascending. */
    float a[32];
    for (int j = 0; j < 32; j++)
        a[j] = (float)(j + 1);
    a[3] = 50;
    a[9] = 200;
    a[20] = 60;
    a[31] = 49.5f;
    CHECK_OK(ql_outliers_select(a, 32, 2.5, &oc, &err), &err);
    CHECK(oc.median == 18.5);
    CHECK(oc.threshold == 46.25);
    CHECK_EQ_INT(oc.n_above, 4);
    CHECK_EQ_INT(oc.n, 2);
    CHECK(oc.cols[0] == 9 && oc.cols[1] == 20);
    ql_outlier_cols_deinit(&oc);
    /* r = 3: threshold 55.5, only 200 and 60 are above */
    CHECK_OK(ql_outliers_select(a, 32, 3.0, &oc, &err), &err);
    CHECK(oc.n_above == 2 && oc.n == 2 && oc.cols[0] == 9 && oc.cols[1] == 20);
    ql_outlier_cols_deinit(&oc);

    /* odd count: median is the middle value; ties at the cap go to the lower channel */
    /* sorted: eight 1s, five 2s, 8, three 9s: the 9th of 17 is 2; r = 4: threshold 8,
     * which 8 does not exceed (strictly above); the cap 17/16 = 1 keeps one of the equal
     * 9s, the lowest channel (9) */
    const float b[17] = {1, 1, 1, 1, 1, 1, 1, 1, 2, 9, 9, 8, 2, 2, 2, 2, 9};
    CHECK_OK(ql_outliers_select(b, 17, 4.0, &oc, &err), &err);
    CHECK(oc.median == 2.0 && oc.n_above == 3 && oc.n == 1 && oc.cols[0] == 9);
    ql_outlier_cols_deinit(&oc);

    /* ratio 0: nothing, but the median is reported */
    CHECK_OK(ql_outliers_select(b, 17, 0.0, &oc, &err), &err);
    CHECK(oc.n == 0 && oc.cols == NULL && oc.median == 2.0);
    /* fewer than 16 channels: cap 0 */
    CHECK_OK(ql_outliers_select(b, 15, 2.0, &oc, &err), &err);
    CHECK(oc.n == 0 && oc.n_above == 3);
    /* median 0 (sparse input): nonzero channels up to the cap, largest first */
    float sparse[64] = {0};
    sparse[2] = 0.5f;
    sparse[60] = 3.0f;
    sparse[33] = 1.0f;
    sparse[7] = 0.25f;
    sparse[8] = 0.25f;
    CHECK_OK(ql_outliers_select(sparse, 64, 6.0, &oc, &err), &err);
    CHECK(oc.median == 0.0 && oc.n_above == 5 && oc.n == 4);
    CHECK(oc.cols[0] == 2 && oc.cols[1] == 7 && oc.cols[2] == 33 && oc.cols[3] == 60);
    ql_outlier_cols_deinit(&oc);

    /* bad input */
    float neg[16] = {1, -1};
    CHECK(ql_outliers_select(neg, 16, 3.0, &oc, &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "channel 1 has magnitude -1") != NULL);
    CHECK(ql_outliers_select(b, 17, (double)NAN, &oc, &err) == QL_EINVAL);
    CHECK(ql_outliers_select(b, 0, 3.0, &oc, &err) == QL_EINVAL);
}

static void set_and_bytes(void)
{
    ql_error err;
    const int64_t widths[2] = {64, 32};
    ql_act_stats *st;
    CHECK_OK(ql_act_stats_alloc(&st, 2, widths, &err), &err);
    for (int j = 0; j < 64; j++)
        st->amax[0][j] = 1.0f + 0.01f * (float)j;
    st->amax[0][10] = 100;
    st->amax[0][50] = 5;
    st->amax[0][51] = 4;
    st->amax[0][52] = 3.9f;
    for (int j = 0; j < 32; j++)
        st->amax[1][j] = 1.0f;
    ql_outlier_set *set;
    CHECK_OK(ql_outlier_set_build(st, 3.0, &set, &err), &err);
    CHECK(set->n_sites == 2 && set->ratio == 3.0);
    /* median about 1.3, threshold about 3.9: channels 10, 50, 51 are above; cap 4 */
    CHECK_EQ_INT(set->site[0].n, 3);
    CHECK(set->site[0].cols[0] == 10 && set->site[0].cols[1] == 50 && set->site[0].cols[2] == 51);
    CHECK_EQ_INT(set->site[1].n, 0);
    CHECK_EQ_INT(set->n_total, 3);
    ql_outlier_set_free(set);
    st->amax[1][3] = -1;
    CHECK(ql_outlier_set_build(st, 3.0, &set, &err) == QL_EINVAL && set == NULL);
    CHECK(strncmp(err.msg, "site 1: ", 8) == 0);
    ql_act_stats_free(st);
    ql_outlier_set_free(NULL);

    /* 16-bit indices up to 65536 inputs, 32-bit beyond */
    CHECK_EQ_INT(ql_outliers_bytes(100, 4096, 3), 3 * (400 + 2));
    CHECK_EQ_INT(ql_outliers_bytes(100, 65536, 1), 402);
    CHECK_EQ_INT(ql_outliers_bytes(100, 65537, 1), 404);
    CHECK_EQ_INT(ql_outliers_bytes(100, 4096, 0), 0);
}

/* A weight (n_out, n_in) and an input batch with massive channels. */
enum { N_OUT = 24, N_IN = 128, N_TOK = 6 };
static const int64_t out_cols[3] = {5, 64, 100};

static void make_problem(float *w, float *x)
{
    rng_state = 3;
    for (int i = 0; i < N_OUT * N_IN; i++)
        w[i] = 0.05f * gauss();
    for (int t = 0; t < N_TOK; t++)
        for (int j = 0; j < N_IN; j++)
            x[t * N_IN + j] = gauss() * (j == 5     ? 60.0f
                                         : j == 64  ? -40.0f
                                         : j == 100 ? 25.0f
                                                    : 1.0f);
}

/* The weight side: exact columns, the rest quantized from the zeroed matrix, sizes. */
static void weight_side(void)
{
    ql_error err;
    float *w = malloc(N_OUT * N_IN * sizeof *w), *x = malloc(N_TOK * N_IN * sizeof *x);
    float *we = malloc(N_OUT * N_IN * sizeof *we), *ref = malloc(N_OUT * N_IN * sizeof *ref);
    make_problem(w, x);
    ql_outlier_cols oc = {.n_in = N_IN, .n = 3, .cols = (int64_t *)out_cols};
    const size_t qsz = ql_row_size(QL_TYPE_Q4_1, N_IN) * N_OUT;
    unsigned char *q = malloc(qsz), *qref = malloc(qsz);
    uint64_t qb = 0, ob = 0;
    CHECK_OK(ql_outliers_quant_weight(QL_TYPE_Q4_1, w, N_OUT, N_IN, NULL, &oc, we, q, qsz, &qb, &ob,
                                      &err),
             &err);
    CHECK_EQ_INT(qb, qsz);
    CHECK_EQ_INT(ob, 3 * (4 * N_OUT + 2));
    /* reference: zero, quantize, decode, write back */
    memcpy(ref, w, N_OUT * N_IN * sizeof *ref);
    ql_outliers_zero_cols(ref, N_OUT, N_IN, out_cols, 3);
    CHECK_OK(ql_quant_tensor(QL_TYPE_Q4_1, ref, N_OUT, N_IN, NULL, qref, qsz, NULL, &err), &err);
    CHECK(memcmp(q, qref, qsz) == 0);
    CHECK_OK(ql_dequant_tensor(QL_TYPE_Q4_1, qref, qsz, N_OUT, N_IN, ref, &err), &err);
    int nonzero_zeroed = 0;
    for (int r = 0; r < N_OUT; r++)
        for (int j = 0; j < N_IN; j++) {
            const bool out = j == 5 || j == 64 || j == 100;
            if (out) {
                CHECK(we[r * N_IN + j] == w[r * N_IN + j]);
                nonzero_zeroed += ref[r * N_IN + j] != 0.0f; /* Q4_1's min: 0 decodes to m */
            } else {
                CHECK(we[r * N_IN + j] == ref[r * N_IN + j]);
            }
        }
    printf("Q4_1: %d of %d zeroed outlier weights decode to nonzero values\n", nonzero_zeroed,
           3 * N_OUT);

    /* with an imatrix, the outlier columns' importance is zeroed too */
    float imat[N_IN];
    for (int j = 0; j < N_IN; j++)
        imat[j] = 0.5f + (float)(j % 7);
    CHECK_OK(ql_outliers_quant_weight(QL_TYPE_Q4_1, w, N_OUT, N_IN, imat, &oc, we, q, qsz, NULL,
                                      NULL, &err),
             &err);
    float imat0[N_IN];
    memcpy(imat0, imat, sizeof imat0);
    ql_outliers_zero_cols(imat0, 1, N_IN, out_cols, 3);
    memcpy(ref, w, N_OUT * N_IN * sizeof *ref);
    ql_outliers_zero_cols(ref, N_OUT, N_IN, out_cols, 3);
    CHECK_OK(ql_quant_tensor(QL_TYPE_Q4_1, ref, N_OUT, N_IN, imat0, qref, qsz, NULL, &err), &err);
    CHECK(memcmp(q, qref, qsz) == 0);
    CHECK(imat[5] == 0.5f + 5.0f); /* the caller's imatrix is untouched */

    /* no outliers: a plain quantization, no extra bytes; temporary buffer */
    CHECK_OK(ql_outliers_quant_weight(QL_TYPE_Q8_0, w, N_OUT, N_IN, NULL, NULL, we, NULL, 0, &qb,
                                      &ob, &err),
             &err);
    CHECK_EQ_INT(ob, 0);
    CHECK_EQ_INT(qb, ql_row_size(QL_TYPE_Q8_0, N_IN) * N_OUT);
    const size_t q8sz = ql_row_size(QL_TYPE_Q8_0, N_IN) * N_OUT;
    unsigned char *q8 = malloc(q8sz), *q8ref = malloc(q8sz);
    CHECK_OK(ql_quant_tensor(QL_TYPE_Q8_0, w, N_OUT, N_IN, NULL, q8ref, q8sz, NULL, &err), &err);
    CHECK_OK(ql_dequant_tensor(QL_TYPE_Q8_0, q8ref, qb, N_OUT, N_IN, ref, &err), &err);
    CHECK(memcmp(we, ref, N_OUT * N_IN * sizeof *we) == 0);

    /* Q8_0_XC: the channels steer the scales; the bytes are Q8_0, nothing added */
    CHECK_OK(ql_outliers_quant_weight(QL_TYPE_Q8_0_XC, w, N_OUT, N_IN, NULL, &oc, we, q8, q8sz, &qb,
                                      &ob, &err),
             &err);
    CHECK_EQ_INT(ob, 0);
    CHECK_EQ_INT(qb, q8sz);
    CHECK_OK(ql_quant_q8_0_xc(w, N_OUT, N_IN, out_cols, 3, q8ref, q8sz, NULL, &err), &err);
    CHECK(memcmp(q8, q8ref, q8sz) == 0);
    CHECK_OK(ql_dequant_tensor(QL_TYPE_Q8_0, q8ref, q8sz, N_OUT, N_IN, ref, &err), &err);
    CHECK(memcmp(we, ref, N_OUT * N_IN * sizeof *we) == 0);

    /* errors */
    ql_outlier_cols wrong = {.n_in = 64, .n = 1, .cols = (int64_t *)out_cols};
    CHECK(ql_outliers_quant_weight(QL_TYPE_Q4_1, w, N_OUT, N_IN, NULL, &wrong, we, NULL, 0, NULL,
                                   NULL, &err) == QL_EINVAL);
    CHECK(ql_outliers_quant_weight(QL_TYPE_Q4_1, w, N_OUT, 100, NULL, NULL, we, NULL, 0, NULL, NULL,
                                   &err) == QL_EINVAL);
    CHECK(strstr(err.msg, "rows of 100 values") != NULL);
    CHECK(ql_outliers_quant_weight(QL_TYPE_Q4_1, w, N_OUT, N_IN, NULL, NULL, we, q, 10, NULL, NULL,
                                   &err) == QL_EINVAL);
    free(w);
    free(x);
    free(we);
    free(ref);
    free(q);
    free(qref);
    free(q8);
    free(q8ref);
}

/* Worst-case bound of f32 recursive summation of n terms: |error| <= n * u * sum |terms|
 * (u = 2^-24), for each of the two orders compared, hence the factor 2. */
#define SUM_BOUND(n, abs_sum) (2.0 * (double)(n)*0x1p-24 * (abs_sum))

/* The single product W_eff x_eff against the two-part product
 * dequant(quant(W_0)) actquant(x_0) + W_O x_O, term by term and summed. */
static void split_equivalence(void)
{
    ql_error err;
    float *w = malloc(N_OUT * N_IN * sizeof *w), *x = malloc(N_TOK * N_IN * sizeof *x);
    float *we = malloc(N_OUT * N_IN * sizeof *we), *wq0 = malloc(N_OUT * N_IN * sizeof *wq0);
    float *xe = malloc(N_TOK * N_IN * sizeof *xe), *xq0 = malloc(N_TOK * N_IN * sizeof *xq0);
    make_problem(w, x);
    ql_outlier_cols oc = {.n_in = N_IN, .n = 3, .cols = (int64_t *)out_cols};
    CHECK_OK(ql_outliers_quant_weight(QL_TYPE_Q4_1, w, N_OUT, N_IN, NULL, &oc, we, NULL, 0, NULL,
                                      NULL, &err),
             &err);
    /* two-part pieces: the quantized zeroed weight and the rounded zeroed input */
    memcpy(wq0, w, N_OUT * N_IN * sizeof *wq0);
    ql_outliers_zero_cols(wq0, N_OUT, N_IN, out_cols, 3);
    const size_t qsz = ql_row_size(QL_TYPE_Q4_1, N_IN) * N_OUT;
    void *q = malloc(qsz);
    CHECK_OK(ql_quant_tensor(QL_TYPE_Q4_1, wq0, N_OUT, N_IN, NULL, q, qsz, NULL, &err), &err);
    CHECK_OK(ql_dequant_tensor(QL_TYPE_Q4_1, q, qsz, N_OUT, N_IN, wq0, &err), &err);
    memcpy(xq0, x, N_TOK * N_IN * sizeof *xq0);
    ql_outliers_zero_cols(xq0, N_TOK, N_IN, out_cols, 3);

    const ql_actq modes[] = {QL_ACTQ_Q8_0, QL_ACTQ_Q8X2, QL_ACTQ_F16, QL_ACTQ_BF16};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        ql_act_ctx c;
        CHECK_OK(ql_act_ctx_init(&c, modes[m], N_IN, out_cols, 3, &err), &err);
        ql_act_rows(&c, x, xe, N_TOK);
        float *xr = malloc(N_TOK * N_IN * sizeof *xr);
        ql_actq_round(modes[m], xq0, xr, N_TOK * N_IN);
        int term_diff = 0, worst_t = 0;
        double worst = 0;
        for (int t = 0; t < N_TOK; t++)
            for (int o = 0; o < N_OUT; o++) {
                float single = 0, part1 = 0, part2 = 0;
                double abs_sum = 0;
                for (int j = 0; j < N_IN; j++) {
                    const bool out = j == 5 || j == 64 || j == 100;
                    const float ts = we[o * N_IN + j] * xe[t * N_IN + j];
                    const float t1 = wq0[o * N_IN + j] * xr[t * N_IN + j];
                    const float t2 = out ? w[o * N_IN + j] * x[t * N_IN + j] : 0.0f;
                    /* term by term: the same floats, the zeroed input contributes 0 */
                    if (out ? (t1 != 0.0f || ts != t2) : ts != t1)
                        term_diff++;
                    single += ts;
                    part1 += t1;
                    part2 += t2;
                    abs_sum += fabs((double)ts);
                }
                const double diff = fabs((double)single - (double)(part1 + part2));
                if (diff > SUM_BOUND(N_IN + 1, abs_sum))
                    worst_t++;
                if (diff / abs_sum > worst)
                    worst = diff / abs_sum;
            }
        CHECK_MSG(term_diff == 0, "%s: %d terms differ", ql_actq_name(modes[m]), term_diff);
        CHECK_MSG(worst_t == 0, "%s: %d sums outside the summation bound", ql_actq_name(modes[m]),
                  worst_t);
        printf("%s: single vs two-part product: terms identical, sums differ by <= %.2g of "
               "sum |terms|\n",
               ql_actq_name(modes[m]), worst);
        free(xr);
    }

    /* The split pays: against the exact product, the error with outliers kept out is far
     * below the error of plain Q4_1 + q8_0 (massive channels set the block scales). */
    float *wp = malloc(N_OUT * N_IN * sizeof *wp), *xp = malloc(N_TOK * N_IN * sizeof *xp);
    CHECK_OK(ql_outliers_quant_weight(QL_TYPE_Q4_1, w, N_OUT, N_IN, NULL, NULL, wp, NULL, 0, NULL,
                                      NULL, &err),
             &err);
    ql_actq_round(QL_ACTQ_Q8_0, x, xp, N_TOK * N_IN);
    ql_act_ctx c;
    CHECK_OK(ql_act_ctx_init(&c, QL_ACTQ_Q8_0, N_IN, out_cols, 3, &err), &err);
    ql_act_rows(&c, x, xe, N_TOK);
    double e_split = 0, e_plain = 0;
    for (int t = 0; t < N_TOK; t++)
        for (int o = 0; o < N_OUT; o++) {
            double y = 0, ys = 0, yp = 0;
            for (int j = 0; j < N_IN; j++) {
                y += (double)w[o * N_IN + j] * (double)x[t * N_IN + j];
                ys += (double)we[o * N_IN + j] * (double)xe[t * N_IN + j];
                yp += (double)wp[o * N_IN + j] * (double)xp[t * N_IN + j];
            }
            e_split += (ys - y) * (ys - y);
            e_plain += (yp - y) * (yp - y);
        }
    printf("product error: plain %.3g, split %.3g\n", sqrt(e_plain), sqrt(e_split));
    CHECK(e_split * 4 < e_plain);
    free(w);
    free(x);
    free(we);
    free(wq0);
    free(xe);
    free(xq0);
    free(q);
    free(wp);
    free(xp);
}

int main(void)
{
    stats_accumulate();
    stats_file();
    selection_hand_checked();
    set_and_bytes();
    weight_side();
    split_equivalence();
    return qlt_done();
}
