/* The fit error table: its cache file (round trip, every kind of damage refused
 * with a reason, mutations never crash). */
#include <gsl/gsl_errno.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "experiment/fit.h"
#include "model/imatrix_io.h"
#include "qltest.h"

static ql_fit_table *sample_table(void)
{
    ql_fit_table *t = calloc(1, sizeof *t);
    ql_strlcpy(t->model_sha256, "ab12", sizeof t->model_sha256);
    ql_strlcpy(t->imatrix_sha256, "none", sizeof t->imatrix_sha256);
    ql_strlcpy(t->types, "Q4_K,Q6_K,F16", sizeof t->types);
    t->sample_rows = 128;
    t->n_tensors = 3;
    t->tensors = calloc(3, sizeof *t->tensors);
    const char *names[] = {"blk.0.attn_norm.weight", "blk.0.attn_q.weight", "output.weight"};
    for (int i = 0; i < 3; i++) {
        ql_fit_tensor *ft = &t->tensors[i];
        ft->name = ql_strdup(names[i]);
        ft->n_dims = i == 0 ? 1 : 2;
        ft->ne[0] = 256;
        ft->ne[1] = i == 0 ? 1 : 512;
        ft->ne[2] = ft->ne[3] = 1;
        ft->n_params = ft->ne[0] * ft->ne[1];
        ft->src_type = QL_TYPE_BF16;
        t->total_params += ft->n_params;
    }
    t->tensors[0].fixed_type = QL_TYPE_F32;
    t->tensors[0].fixed_bytes = 1024;
    t->fixed_bytes = 1024;
    const int32_t types[] = {QL_TYPE_Q4_K, QL_TYPE_Q6_K, QL_TYPE_F16};
    for (int i = 1; i < 3; i++) {
        ql_fit_tensor *ft = &t->tensors[i];
        ft->assigned = true;
        ft->imp = i == 1 ? QL_FIT_IMP_IMATRIX : QL_FIT_IMP_OUTPUT_NORM;
        ft->quant_imatrix = i == 1;
        ft->rows_measured = 128;
        ft->n_choices = 3;
        ft->choices = calloc(3, sizeof *ft->choices);
        for (int c = 0; c < 3; c++) {
            ft->choices[c].type = types[c];
            ft->choices[c].bytes = 512 * ql_row_size(types[c], 256);
            /* values that do not round-trip through %.6g */
            ft->choices[c].err = (1.0 / 3.0) * pow(10.0, -c) * (double)(i + 1) + 1e-17;
        }
        t->assigned_params += ft->n_params;
    }
    t->n_notes = 1;
    t->notes = calloc(1, sizeof(char *));
    t->notes[0] = ql_strdup("IQ2_XXS skipped: it needs an imatrix");
    return t;
}

static bool tables_equal(const ql_fit_table *a, const ql_fit_table *b)
{
    if (a->n_tensors != b->n_tensors || a->fixed_bytes != b->fixed_bytes ||
        a->assigned_params != b->assigned_params || a->total_params != b->total_params ||
        a->sample_rows != b->sample_rows || strcmp(a->types, b->types) ||
        strcmp(a->model_sha256, b->model_sha256) || strcmp(a->imatrix_sha256, b->imatrix_sha256) ||
        a->n_notes != b->n_notes)
        return false;
    for (int i = 0; i < a->n_notes; i++)
        if (strcmp(a->notes[i], b->notes[i]))
            return false;
    for (int i = 0; i < a->n_tensors; i++) {
        const ql_fit_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        if (strcmp(x->name, y->name) || x->n_dims != y->n_dims || x->assigned != y->assigned ||
            x->fixed_type != y->fixed_type || x->fixed_bytes != y->fixed_bytes ||
            x->imp != y->imp || x->quant_imatrix != y->quant_imatrix ||
            x->rows_measured != y->rows_measured || x->n_choices != y->n_choices ||
            x->src_type != y->src_type || x->n_params != y->n_params)
            return false;
        for (int d = 0; d < 4; d++)
            if (x->ne[d] != y->ne[d])
                return false;
        for (int c = 0; c < x->n_choices; c++)
            if (x->choices[c].type != y->choices[c].type ||
                x->choices[c].bytes != y->choices[c].bytes ||
                memcmp(&x->choices[c].err, &y->choices[c].err, sizeof(double)) != 0)
                return false;
    }
    return true;
}

/* Rewrites the final checksum line so that a deliberate edit reaches the parser. */
static void write_with_checksum(const char *path, char *body, size_t body_len)
{
    char sum[65];
    ql_sha256_hex(body, body_len, sum);
    FILE *f = fopen(path, "wb");
    fwrite(body, 1, body_len, f);
    fprintf(f, "end\t%s\n", sum);
    fclose(f);
}

static size_t body_length(const char *buf, size_t len)
{
    size_t start = len - 2;
    while (start > 0 && buf[start - 1] != '\n')
        start--;
    return start;
}

static void expect_load_error(const char *path, const char *fragment)
{
    ql_fit_table *t = NULL;
    ql_error err;
    ql_error_clear(&err);
    ql_status s = ql_fit_table_file_read(path, &t, &err);
    CHECK_MSG(s != QL_OK && t == NULL, "damaged cache accepted (want '%s')", fragment);
    CHECK_MSG(strstr(err.msg, fragment) != NULL, "message '%s' lacks '%s'", err.msg, fragment);
    ql_fit_table_free(t);
}

/* Replaces the first occurrence of `from` in the body by `to` and re-checksums. */
static void edit_and_expect(const char *good, size_t good_len, const char *from, const char *to,
                            const char *fragment)
{
    size_t blen = body_length(good, good_len);
    char *body = malloc(blen + strlen(to) + 1);
    const char *at = strstr(good, from);
    CHECK_MSG(at && (size_t)(at - good) < blen, "'%s' not in the cache", from);
    if (!at) {
        free(body);
        return;
    }
    size_t pre = (size_t)(at - good);
    memcpy(body, good, pre);
    memcpy(body + pre, to, strlen(to));
    size_t rest = blen - pre - strlen(from);
    memcpy(body + pre + strlen(to), at + strlen(from), rest);
    char path[512];
    snprintf(path, sizeof path, "%s/edited.tsv", qlt_tmpdir());
    write_with_checksum(path, body, pre + strlen(to) + rest);
    expect_load_error(path, fragment);
    free(body);
}

static void test_cache_file(void)
{
    ql_error err;
    char path[512];
    snprintf(path, sizeof path, "%s/table.tsv", qlt_tmpdir());
    ql_fit_table *t = sample_table();
    CHECK_OK(ql_fit_table_file_write(t, path, &err), &err);
    ql_fit_table *u = NULL;
    CHECK_OK(ql_fit_table_file_read(path, &u, &err), &err);
    CHECK(u && tables_equal(t, u));
    ql_fit_table_free(u);

    size_t len;
    char *good = qlt_read_file(path, &len);
    char *copy = malloc(len + 1);
    char bad_path[512];
    snprintf(bad_path, sizeof bad_path, "%s/bad.tsv", qlt_tmpdir());

    /* A flipped digit anywhere in the body: checksum. */
    memcpy(copy, good, len);
    char *digit = strstr(copy, "\t512\t") + 1;
    *digit = '7';
    ql_file_write_all(bad_path, copy, len, &err);
    expect_load_error(bad_path, "checksum mismatch");
    /* Truncated anywhere. */
    for (size_t cut = 0; cut < len; cut += len / 17 + 1) {
        ql_file_write_all(bad_path, good, cut, &err);
        ql_fit_table *v = NULL;
        CHECK(ql_fit_table_file_read(bad_path, &v, &err) == QL_EFORMAT && v == NULL);
        ql_fit_table_free(v);
    }
    expect_load_error("/nonexistent/dir/cache.tsv", "cannot open");
    /* Edits with a valid checksum reach the parser and are still refused. */
    memcpy(copy, good, len);
    copy[len] = '\0';
    edit_and_expect(copy, len, "qlab-fit-table\t4", "qlab-fit-table\t99", "format version");
    edit_and_expect(copy, len, "model_sha256\tab12", "model_sha256\tab13", "key does not match");
    edit_and_expect(copy, len, "choice\tQ4_K\t73728", "choice\tQ4_K\t73729", "'choice' record");
    edit_and_expect(copy, len, "choice\tQ4_K", "choice\tQ9_K", "'choice' record");
    edit_and_expect(copy, len, "choice\tQ4_K", "choice\tQ8_K", "'choice' record");
    edit_and_expect(copy, len, "tensors\t3", "tensors\t4", "expected a 'tensor' record");
    edit_and_expect(copy, len, "tensors\t3", "tensors\t999999999", "tensor count");
    edit_and_expect(copy, len, "fixed_bytes\t1024", "fixed_bytes\t1025", "totals do not match");
    edit_and_expect(copy, len, "\timatrix\t", "\tmagic\t", "'tensor' record");
    edit_and_expect(copy, len, "notes\t1", "notes\t2", "unexpected end of file");
    edit_and_expect(copy, len, "notes\t1", "notes\t0", "unexpected data");
    edit_and_expect(copy, len, "\t0x", "\t-0x", "'choice' record");

    /* Random byte mutations with a fixed-up checksum never crash the reader, and
     * whatever it accepts is a consistent table. */
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, 7);
    size_t blen = body_length(good, len);
    int accepted = 0;
    for (int k = 0; k < 3000; k++) {
        memcpy(copy, good, blen);
        int n_mut = 1 + (int)gsl_rng_uniform_int(r, 3);
        for (int m = 0; m < n_mut; m++) {
            size_t at = gsl_rng_uniform_int(r, blen);
            static const char alphabet[] = "0123456789\t\nQKF_x.-abcdefpe";
            copy[at] = alphabet[gsl_rng_uniform_int(r, sizeof alphabet - 1)];
        }
        write_with_checksum(bad_path, copy, blen);
        ql_fit_table *v = NULL;
        ql_status s = ql_fit_table_file_read(bad_path, &v, &err);
        CHECK(s == QL_OK || s == QL_EFORMAT);
        if (s == QL_OK) {
            accepted++;
            uint64_t fixed = 0;
            for (int i = 0; i < v->n_tensors; i++) {
                if (!v->tensors[i].assigned)
                    fixed += v->tensors[i].fixed_bytes;
                for (int c = 0; c < v->tensors[i].n_choices; c++)
                    CHECK(isfinite(v->tensors[i].choices[c].err));
            }
            CHECK(fixed == v->fixed_bytes);
        }
        ql_fit_table_free(v);
    }
    printf("cache mutations: 3000 tried, %d still valid tables\n", accepted);
    gsl_rng_free(r);
    free(copy);
    free(good);
    ql_fit_table_free(t);
}

/* Importance from an imatrix: sums / count per matrix (1 for an empty matrix), the
 * provenance llama-quantize writes, and the shared llama-imatrix file. */
static void test_imatrix(void)
{
    ql_error err;
    ql_imatrix *im = NULL;
    ql_imatrix_entry *e = NULL;
    CHECK_OK(ql_imatrix_alloc(&im, &err), &err);
    CHECK_OK(ql_imatrix_add_entry(im, "blk.0.ffn_up_exps.weight", 6, 3, false, &e, &err), &err);
    for (int j = 0; j < 6; j++)
        e->sums[j] = (float)(j + 1);
    e->counts[0] = 2, e->counts[1] = 4, e->counts[2] = 0;
    CHECK_OK(ql_imatrix_add_entry(im, "blk.0.attn_q.weight", 2, 1, false, &e, &err), &err);
    e->sums[0] = 3, e->sums[1] = 6, e->counts[0] = 3;
    ql_imatrix_add_dataset(im, "calib.txt", &err);
    im->chunk_count = 9;
    ql_fit_imatrix *f = NULL;
    CHECK_OK(ql_fit_imatrix_wrap(im, "abc", &f, &err), &err);
    ql_imatrix_free(im); /* the wrapper keeps copies */
    if (f) {
        const ql_fit_importance *imp = ql_fit_imatrix_importance(f);
        int64_t n = 0;
        const float *v = imp->lookup(imp->user, "blk.0.ffn_up_exps.weight", &n);
        const float want[6] = {0.5f, 1.0f, 0.75f, 1.0f, 1.0f, 1.0f};
        CHECK(v && n == 6);
        for (int j = 0; v && j < 6; j++)
            CHECK_NEAR(v[j], want[j], 0);
        v = imp->lookup(imp->user, "blk.0.attn_q.weight", &n);
        CHECK(v && n == 2 && v[0] == 1.0f && v[1] == 2.0f);
        CHECK(imp->lookup(imp->user, "output.weight", &n) == NULL);
        CHECK(strcmp(imp->sha256, "abc") == 0);
        CHECK(imp->file == NULL); /* built in memory: no file to name */
        CHECK(imp->dataset && strcmp(imp->dataset, "calib.txt") == 0);
        CHECK_EQ_INT(imp->n_entries, 2);
        CHECK_EQ_INT(imp->n_chunks, 9);
        CHECK_EQ_INT(ql_fit_imatrix_entries(f), 2);
    }
    ql_fit_imatrix_free(f);
    f = NULL;

    const char *dat = qlt_shared("golden/imatrix/imatrix-stories260K-tscalib-c128.dat");
    CHECK_OK(ql_fit_imatrix_open(dat, &f, &err), &err);
    if (f) {
        const ql_fit_importance *imp = ql_fit_imatrix_importance(f);
        char sha[65];
        ql_sha256_file(dat, sha, &err);
        CHECK(strcmp(imp->sha256, sha) == 0);
        CHECK_EQ_INT(imp->n_entries, 35);
        CHECK_EQ_INT(imp->n_chunks, 606);
        CHECK(imp->dataset && strcmp(imp->dataset, "ts_calib.txt") == 0);
        CHECK(imp->file && strcmp(imp->file, dat) == 0);
        int64_t n = 0;
        CHECK(imp->lookup(imp->user, "blk.0.ffn_down.weight", &n) && n == 172);
    }
    ql_fit_imatrix_free(f);
    CHECK(ql_fit_imatrix_open("/nonexistent.dat", &f, &err) == QL_EIO && f == NULL);
    CHECK(ql_fit_imatrix_open(qlt_shared("models/stories260K.gguf"), &f, &err) != QL_OK);
    CHECK(f == NULL);
}

int main(void)
{
    gsl_set_error_handler_off();
    test_imatrix();
    test_cache_file();
    return qlt_done();
}
