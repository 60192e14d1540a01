/* Regenerates the malformed importance-matrix corpus in tests/malformed/imatrix/:
 *
 *   build/tests/gen_imatrix_malformed tests/malformed/imatrix
 *
 * Legacy .dat files are written byte by byte; GGUF files with qlab's GGUF writer
 * (they are valid GGUF containers whose imatrix content is wrong). Each file
 * breaks one thing of a small valid imatrix (two entries of 4 values) and must
 * fail with the message in expected.tsv. Not run by the tests: the committed
 * files are the corpus. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/types.h"
#include "model/gguf.h"

static const char *out_dir;

static void die(const char *what)
{
    fprintf(stderr, "gen_imatrix_malformed: %s\n", what);
    exit(1);
}

/* ---- .dat ---- */

typedef struct {
    uint8_t b[4096];
    size_t n;
} dat;

static void d_raw(dat *d, const void *p, size_t n)
{
    if (d->n + n > sizeof d->b)
        die("buffer full");
    memcpy(d->b + d->n, p, n);
    d->n += n;
}

static void d_i32(dat *d, int32_t v)
{
    d_raw(d, &v, 4);
}

/* One entry: name, ncall, nval and the values given (n of them). */
static void d_entry(dat *d, const char *name, int32_t ncall, int32_t nval, const float *v, int n)
{
    d_i32(d, (int32_t)strlen(name));
    d_raw(d, name, strlen(name));
    d_i32(d, ncall);
    d_i32(d, nval);
    d_raw(d, v, (size_t)n * sizeof *v);
}

static void d_trailer(dat *d)
{
    d_i32(d, 10);
    d_i32(d, 9);
    d_raw(d, "calib.txt", 9);
}

static void d_write(const char *name, const dat *d)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (d->n && fwrite(d->b, 1, d->n, f) != d->n) || fclose(f) != 0)
        die(path);
}

static const float good[4] = {40.0f, 20.0f, 10.0f, 5.0f};

/* ---- GGUF ---- */

typedef struct {
    const char *name;
    int64_t ne[2];
    int32_t type;
    const void *data;
} gtensor;

/* Writes a GGUF imatrix with the given tensors; skip_key drops one of the three
 * imatrix keys, general_type overrides general.type (NULL: "imatrix"). */
static void g_write(const char *file, const gtensor *ts, int nt, const char *skip_key,
                    const char *general_type, uint32_t chunk_size, bool datasets_as_u32)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out_dir, file);
    ql_error err;
    ql_gguf_writer *w;
    if (ql_gguf_writer_alloc(&w, &err))
        die(err.msg);
    const char *ds[] = {"calib.txt"};
    uint32_t ds_u32[] = {7};
    ql_status st =
        ql_gguf_writer_set_str(w, "general.type", general_type ? general_type : "imatrix", &err);
    if (!st && (!skip_key || strcmp(skip_key, "imatrix.datasets") != 0))
        st = datasets_as_u32
                 ? ql_gguf_writer_set_arr(w, "imatrix.datasets", QL_GGUF_UINT32, ds_u32, 1, &err)
                 : ql_gguf_writer_set_str_arr(w, "imatrix.datasets", ds, 1, &err);
    if (!st && (!skip_key || strcmp(skip_key, "imatrix.chunk_count") != 0))
        st = ql_gguf_writer_set_u32(w, "imatrix.chunk_count", 10, &err);
    if (!st && (!skip_key || strcmp(skip_key, "imatrix.chunk_size") != 0))
        st = ql_gguf_writer_set_u32(w, "imatrix.chunk_size", chunk_size, &err);
    for (int i = 0; i < nt && !st; i++) {
        const ql_type_traits *tr = ql_type_get(ts[i].type);
        uint64_t nb = (uint64_t)(ts[i].ne[0] * ts[i].ne[1]) * tr->type_size;
        st = ql_gguf_writer_add_tensor(w, ts[i].name, 2, ts[i].ne, ts[i].type, nb, &err);
    }
    if (!st)
        st = ql_gguf_writer_begin(w, path, &err);
    for (int i = 0; i < nt && !st; i++) {
        const ql_type_traits *tr = ql_type_get(ts[i].type);
        uint64_t nb = (uint64_t)(ts[i].ne[0] * ts[i].ne[1]) * tr->type_size;
        st = ql_gguf_writer_write_tensor(w, ts[i].data, nb, &err);
    }
    if (!st)
        st = ql_gguf_writer_finish(w, &err);
    ql_gguf_writer_free(w);
    if (st)
        die(err.msg);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_imatrix_malformed OUTDIR (normally tests/malformed/imatrix)\n");
        return 2;
    }
    out_dir = argv[1];
    dat d;
    float nan_v = nanf(""), bad_neg[4] = {1.0f, 2.0f, -1.0f, 4.0f}, with_nan[4];
    memcpy(with_nan, good, sizeof good);
    with_nan[1] = fabsf(nan_v);

    /* ---- legacy .dat ---- */
    d.n = 0, d_write("empty.dat", &d);
    d.n = 0, d_i32(&d, 0), d_trailer(&d), d_write("zero_entries.dat", &d);
    d.n = 0, d_i32(&d, 100000), d_entry(&d, "blk.0.attn_q.weight", 10, 4, good, 4);
    d_write("huge_entry_count.dat", &d);
    d.n = 0, d_i32(&d, 1), d_i32(&d, -1), d_raw(&d, "blk.0.attn_q.weight", 19), d_i32(&d, 10);
    d_i32(&d, 4), d_raw(&d, good, sizeof good), d_write("negative_name_length.dat", &d);
    d.n = 0, d_i32(&d, 1), d_i32(&d, 7), d_raw(&d, "bad\0key", 7), d_i32(&d, 10), d_i32(&d, 4);
    d_raw(&d, good, sizeof good), d_write("name_with_nul.dat", &d);
    d.n = 0, d_i32(&d, 1), d_entry(&d, "blk.0.attn_q.weight", 10, 64, good, 4);
    d_write("truncated_values.dat", &d);
    d.n = 0, d_i32(&d, 1), d_entry(&d, "blk.0.attn_q.weight", -3, 4, good, 4), d_trailer(&d);
    d_write("negative_ncall.dat", &d);
    d.n = 0, d_i32(&d, 1), d_entry(&d, "blk.0.attn_q.weight", 10, 0, good, 4), d_trailer(&d);
    d_write("zero_values.dat", &d);
    d.n = 0, d_i32(&d, 1), d_entry(&d, "blk.0.attn_q.weight", 10, 4, with_nan, 4), d_trailer(&d);
    d_write("nan_value.dat", &d);
    d.n = 0, d_i32(&d, 1), d_entry(&d, "blk.0.attn_q.weight", 10, 4, bad_neg, 4), d_trailer(&d);
    d_write("negative_value.dat", &d);
    d.n = 0, d_i32(&d, 2), d_entry(&d, "blk.0.attn_q.weight", 10, 4, good, 4);
    d_entry(&d, "blk.0.attn_q.weight", 10, 4, good, 4), d_trailer(&d);
    d_write("duplicate_entry.dat", &d);
    d.n = 0, d_i32(&d, 1), d_entry(&d, "blk.0.attn_q.weight", 10, 4, good, 4), d_trailer(&d);
    d_raw(&d, "xyz", 3), d_write("trailing_bytes.dat", &d);
    d.n = 0, d_i32(&d, 1), d_entry(&d, "blk.0.attn_q.weight", 10, 4, good, 4), d_raw(&d, "\n\0", 2);
    d_write("truncated_trailer.dat", &d);
    d.n = 0, d_i32(&d, 1), d_entry(&d, "blk.0.attn_q.weight", 10, 4, good, 4), d_i32(&d, 10);
    d_i32(&d, 1000), d_raw(&d, "calib", 5), d_write("dataset_name_too_long.dat", &d);
    /* An importance the quantizers' sums overflow on (IQ4_NL wrote infinite scales). */
    static const float huge[4] = {40.0f, 3e38f, 10.0f, 5.0f};
    d.n = 0, d_i32(&d, 1), d_entry(&d, "blk.0.attn_q.weight", 10, 4, huge, 4), d_trailer(&d);
    d_write("huge_value.dat", &d);

    /* ---- GGUF ---- */
    static const float counts1[1] = {40.0f}, counts3[3] = {1, 2, 3}, neg_count[1] = {-5.0f};
    static const uint16_t f16_sums[4] = {0x3c00, 0x3c00, 0x3c00, 0x3c00};
    gtensor ok_pair[2] = {{"blk.0.attn_q.weight.in_sum2", {4, 1}, QL_TYPE_F32, good},
                          {"blk.0.attn_q.weight.counts", {1, 1}, QL_TYPE_F32, counts1}};
    g_write("missing_chunk_size.gguf", ok_pair, 2, "imatrix.chunk_size", NULL, 512, false);
    g_write("model_not_imatrix.gguf", ok_pair, 2, NULL, "model", 512, false);
    g_write("chunk_size_zero.gguf", ok_pair, 2, NULL, NULL, 0, false);
    g_write("datasets_not_strings.gguf", ok_pair, 2, NULL, NULL, 512, true);
    g_write("missing_counts.gguf", ok_pair, 1, NULL, NULL, 512, false);
    gtensor f16[2] = {{"blk.0.attn_q.weight.in_sum2", {4, 1}, QL_TYPE_F16, f16_sums}, ok_pair[1]};
    g_write("f16_sums.gguf", f16, 2, NULL, NULL, 512, false);
    gtensor mism[2] = {ok_pair[0], {"blk.0.attn_q.weight.counts", {1, 3}, QL_TYPE_F32, counts3}};
    g_write("counts_mismatch.gguf", mism, 2, NULL, NULL, 512, false);
    gtensor negc[2] = {ok_pair[0], {"blk.0.attn_q.weight.counts", {1, 1}, QL_TYPE_F32, neg_count}};
    g_write("negative_count.gguf", negc, 2, NULL, NULL, 512, false);
    gtensor nans[2] = {{"blk.0.attn_q.weight.in_sum2", {4, 1}, QL_TYPE_F32, with_nan}, ok_pair[1]};
    g_write("nan_sum.gguf", nans, 2, NULL, NULL, 512, false);
    gtensor big[2] = {{"blk.0.attn_q.weight.in_sum2", {4, 1}, QL_TYPE_F32, huge}, ok_pair[1]};
    g_write("huge_value.gguf", big, 2, NULL, NULL, 512, false);
    gtensor other[1] = {{"token_embd.weight", {4, 1}, QL_TYPE_F32, good}};
    g_write("no_entries.gguf", other, 1, NULL, NULL, 512, false);
    /* A valid imatrix cut short inside its tensor data: the GGUF reader's error. */
    g_write("truncated.gguf", ok_pair, 2, NULL, NULL, 512, false);
    char path[4096];
    snprintf(path, sizeof path, "%s/truncated.gguf", out_dir);
    FILE *f = fopen(path, "r+b");
    if (!f || fseek(f, 0, SEEK_END) != 0)
        die(path);
    long size = ftell(f);
    fclose(f);
    if (size < 40 || truncate(path, size - 40) != 0)
        die(path);

    /* ---- misfit/: well-formed imatrices that do not (or only partly) fit
     * stories260K (rows of 64, ffn_down rows of 172; misfit/expected.tsv) ---- */
    static float v64[2 * 64], v172[172];
    for (int i = 0; i < 2 * 64; i++)
        v64[i] = 1.0f + (float)(i % 7);
    for (int i = 0; i < 172; i++)
        v172[i] = 2.0f + (float)(i % 5);
    static const float one[2] = {1.0f, 1.0f};
    snprintf(path, sizeof path, "%s/misfit", argv[1]);
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        die(path);
    out_dir = path;
    d.n = 0, d_i32(&d, 2), d_entry(&d, "blk.0.attn_v.weight", 10, 64, v64, 64);
    d_entry(&d, "blk.0.attn_q.weight", 10, 32, v64, 32), d_trailer(&d);
    d_write("wrong_length.dat", &d);
    gtensor down[2] = {{"blk.3.ffn_down.weight.in_sum2", {64, 1}, QL_TYPE_F32, v64},
                       {"blk.3.ffn_down.weight.counts", {1, 1}, QL_TYPE_F32, one}};
    g_write("wrong_length.gguf", down, 2, NULL, NULL, 512, false);
    gtensor experts[2] = {{"blk.0.attn_k.weight.in_sum2", {64, 2}, QL_TYPE_F32, v64},
                          {"blk.0.attn_k.weight.counts", {1, 2}, QL_TYPE_F32, one}};
    g_write("two_matrices.gguf", experts, 2, NULL, NULL, 512, false);
    d.n = 0, d_i32(&d, 1), d_entry(&d, "blk.2.ffn_down.weight", 10, 172, v172, 172);
    d_trailer(&d), d_write("one_entry.dat", &d);
    d.n = 0, d_i32(&d, 2), d_entry(&d, "token_embd.weight", 10, 4, good, 4);
    d_entry(&d, "blk.0.attn_q.weight", 10, 64, v64, 64), d_trailer(&d);
    d_write("token_embd_length.dat", &d);
    d.n = 0, d_i32(&d, 1), d_entry(&d, "model.layers.0.self_attn.q_proj.weight", 10, 64, v64, 64);
    d_trailer(&d), d_write("foreign_names.dat", &d);
    /* Entries with no usable importance (all zero; denormal): quantized without. */
    static float zeros[64], denormal[64];
    for (int i = 0; i < 64; i++)
        denormal[i] = 1e-40f;
    d.n = 0, d_i32(&d, 2), d_entry(&d, "blk.0.attn_q.weight", 10, 64, zeros, 64);
    d_entry(&d, "blk.0.attn_k.weight", 10, 64, v64, 64), d_trailer(&d);
    d_write("all_zero.dat", &d);
    gtensor tiny[2] = {{"blk.1.attn_v.weight.in_sum2", {64, 1}, QL_TYPE_F32, denormal},
                       {"blk.1.attn_v.weight.counts", {1, 1}, QL_TYPE_F32, one}};
    g_write("denormal.gguf", tiny, 2, NULL, NULL, 512, false);

    printf("gen_imatrix_malformed: done\n");
    return 0;
}
