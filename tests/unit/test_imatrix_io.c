/* Importance-matrix files: the real llama-imatrix .dat for stories260K against its
 * decoded values, round trips of both formats, conversion between them, expert
 * (multi-matrix) entries, the API's error paths, the validation of importances
 * (degenerate entries dropped, values the quantizers cannot use refused) and the
 * measurement behind its bounds. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "formats/types.h"
#include "model/gguf.h"
#include "model/imatrix_io.h"
#include "model/quant.h"
#include "qltest.h"

/* A value that went through sum/count*ncall and back (.dat written from token
 * counts, read with ncall) is off by at most a few float roundings. */
#define ROUNDTRIP_REL_TOL 4e-7

/* What the importance bounds promise (imatrix_io.h): the error of every quantizer at
 * the bounds stays within this factor of its error at importance 1. */
#define BOUND_ERR_FACTOR 1.25
/* The weight scales the promise covers: standard deviations 1e-4 to 300. */
static const double bound_sigmas[] = {1e-4, 300.0};

#define GOLDEN_DAT "golden/imatrix/imatrix-stories260K-tscalib-c128.dat"
#define GOLDEN_TSV "golden/imatrix/imatrix-stories260K-tscalib-c128.values.tsv"

/* Compares the importance of every entry of im with the decoded golden table:
 * rows "name \t ncall \t n \t v0,v1,...", values printed with %.9g (exact for
 * float), so the comparison is bitwise. Returns the number of rows seen. */
static int check_against_tsv(const ql_imatrix *im, const char *tsv_path)
{
    char *text;
    size_t len;
    ql_error err;
    if (ql_file_read_all(tsv_path, &text, &len, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return 0;
    }
    int rows = 0;
    char *save = NULL;
    float *w = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#' || strncmp(line, "tensor\t", 7) == 0)
            continue;
        char *name = line, *t1 = strchr(line, '\t');
        if (!t1)
            continue;
        *t1 = '\0';
        char *t2 = strchr(t1 + 1, '\t');
        char *t3 = t2 ? strchr(t2 + 1, '\t') : NULL;
        if (!t3)
            continue;
        *t2 = *t3 = '\0';
        int64_t ncall, n;
        CHECK(ql_parse_i64(t1 + 1, &ncall) && ql_parse_i64(t2 + 1, &n));
        rows++;
        const ql_imatrix_entry *e = ql_imatrix_find(im, name);
        CHECK_MSG(e != NULL, "no entry '%s'", name);
        if (!e)
            continue;
        CHECK_EQ_INT(e->n_values, n);
        free(w);
        w = malloc((size_t)n * sizeof *w);
        ql_status st = ql_imatrix_weights(im, name, n, w, &err);
        CHECK_OK(st, &err);
        if (st)
            continue;
        char *p = t3 + 1;
        int64_t bad = 0;
        for (int64_t j = 0; j < n; j++) {
            char *end;
            float want = strtof(p, &end);
            if (w[j] != want)
                bad++;
            p = *end == ',' ? end + 1 : end;
        }
        CHECK_MSG(bad == 0, "'%s': %lld of %lld values differ", name, (long long)bad, (long long)n);
    }
    free(w);
    free(text);
    return rows;
}

static void golden_tests(void)
{
    const char *dat = qlt_shared(GOLDEN_DAT);
    char tsv[512];
    snprintf(tsv, sizeof tsv, "%s", qlt_shared(GOLDEN_TSV));
    ql_error err;
    ql_imatrix *im = NULL;
    ql_status st = ql_imatrix_read(dat, &im, &err);
    CHECK_OK(st, &err);
    if (st)
        return;
    CHECK_EQ_INT(im->n_entries, 35);
    CHECK_EQ_INT(im->chunk_count, 606);
    CHECK_EQ_INT(im->chunk_size, 0);
    CHECK(im->n_datasets == 1 && strcmp(im->datasets[0], "ts_calib.txt") == 0);
    for (int64_t i = 0; i < im->n_entries; i++) {
        CHECK_EQ_INT(im->entries[i].n_mat, 1);
        CHECK_EQ_INT(im->entries[i].counts[0], 606);
        CHECK(strncmp(im->entries[i].name, "blk.", 4) == 0);
    }
    CHECK(ql_imatrix_find(im, "output.weight") == NULL);
    CHECK(ql_imatrix_find(im, "token_embd.weight") == NULL);
    CHECK_EQ_INT(check_against_tsv(im, tsv), 35);

    /* .dat -> .dat is byte-identical (entry order and values kept). */
    CHECK_OK(ql_imatrix_write(im, qlt_tmp("copy.dat"), QL_IMATRIX_DAT, &err), &err);
    CHECK(qlt_same_file(dat, qlt_tmp("copy.dat")));

    /* A .dat does not say its chunk size: GGUF needs one. */
    st = ql_imatrix_write(im, qlt_tmp("nochunk.gguf"), QL_IMATRIX_GGUF, &err);
    CHECK(st == QL_EINVAL && strstr(err.msg, "chunk size is unknown"));
    CHECK(access(qlt_tmp("nochunk.gguf"), F_OK) != 0);

    /* To tokens (128-token chunks, as the file was made): 606 x 128 tokens each. */
    CHECK_OK(ql_imatrix_set_chunk_size(im, 128, &err), &err);
    CHECK_EQ_INT(im->entries[0].counts[0], 606 * 128);
    CHECK_OK(ql_imatrix_set_chunk_size(im, 128, &err), &err); /* same size: no-op */
    CHECK_EQ_INT(im->entries[0].counts[0], 606 * 128);
    CHECK(ql_imatrix_set_chunk_size(im, 512, &err) == QL_EINVAL &&
          strstr(err.msg, "already in tokens"));
    CHECK(ql_imatrix_set_chunk_size(im, 0, &err) == QL_EINVAL);
    /* Scaling by a power of two is exact: the importance is bit-identical. */
    CHECK_EQ_INT(check_against_tsv(im, tsv), 35);

    /* -> GGUF: the layout llama-imatrix writes. */
    CHECK_OK(ql_imatrix_write(im, qlt_tmp("golden.gguf"), QL_IMATRIX_GGUF, &err), &err);
    ql_gguf *g = NULL;
    st = ql_gguf_open(&g, qlt_tmp("golden.gguf"), &err);
    CHECK_OK(st, &err);
    if (!st) {
        const char *type = ql_gguf_get_str(g, "general.type", &err);
        CHECK(type && strcmp(type, "imatrix") == 0);
        uint32_t cc = 0, cs = 0;
        CHECK(ql_gguf_get_u32(g, "imatrix.chunk_count", &cc, &err) && cc == 606);
        CHECK(ql_gguf_get_u32(g, "imatrix.chunk_size", &cs, &err) && cs == 128);
        const ql_gguf_array *ds = ql_gguf_get_arr(g, "imatrix.datasets", QL_GGUF_STRING, &err);
        CHECK(ds && ds->n == 1 && strcmp(((ql_gguf_str *)ds->data)[0].ptr, "ts_calib.txt") == 0);
        CHECK_EQ_INT(g->n_tensors, 70);
        const ql_gguf_tensor *s2 = ql_gguf_find_tensor(g, "blk.0.ffn_down.weight.in_sum2");
        const ql_gguf_tensor *c = ql_gguf_find_tensor(g, "blk.0.ffn_down.weight.counts");
        CHECK(s2 && s2->type == QL_TYPE_F32 && s2->n_dims == 2 && s2->ne[0] == 172 &&
              s2->ne[1] == 1);
        CHECK(c && c->type == QL_TYPE_F32 && c->ne[0] == 1 && c->ne[1] == 1);
        if (c)
            CHECK(((const float *)c->data)[0] == 77568.0f);
        ql_gguf_close(g);
    }

    /* GGUF -> memory: same statistics, same importance. */
    ql_imatrix *im2 = NULL;
    st = ql_imatrix_read(qlt_tmp("golden.gguf"), &im2, &err);
    CHECK_OK(st, &err);
    if (!st) {
        CHECK_EQ_INT(im2->n_entries, 35);
        CHECK_EQ_INT(im2->chunk_count, 606);
        CHECK_EQ_INT(im2->chunk_size, 128);
        for (int64_t i = 0; i < im2->n_entries && i < im->n_entries; i++) {
            const ql_imatrix_entry *a = &im->entries[i], *b = &im2->entries[i];
            CHECK(strcmp(a->name, b->name) == 0 && a->n_values == b->n_values &&
                  a->counts[0] == b->counts[0] && b->in_sum == NULL);
            CHECK(memcmp(a->sums, b->sums, (size_t)a->n_values * sizeof(float)) == 0);
        }
        CHECK_EQ_INT(check_against_tsv(im2, tsv), 35);
        /* GGUF -> GGUF is byte-identical. */
        CHECK_OK(ql_imatrix_write(im2, qlt_tmp("golden2.gguf"), QL_IMATRIX_GGUF, &err), &err);
        CHECK(qlt_same_file(qlt_tmp("golden.gguf"), qlt_tmp("golden2.gguf")));
        /* GGUF -> .dat: (sum / 77568) x 606 gives back the stored values here; the
         * file is the one llama-imatrix wrote. */
        CHECK_OK(ql_imatrix_write(im2, qlt_tmp("back.dat"), QL_IMATRIX_DAT, &err), &err);
        CHECK(qlt_same_file(dat, qlt_tmp("back.dat")));
        ql_imatrix_free(im2);
    }

    /* The importance a quantizer asks for: the right length, or an error naming the tensor. */
    float w[172];
    CHECK_OK(ql_imatrix_weights(im, "blk.2.ffn_down.weight", 172, w, &err), &err);
    st = ql_imatrix_weights(im, "blk.2.ffn_down.weight", 64, w, &err);
    CHECK(st == QL_EFORMAT && strstr(err.msg, "tensor 'blk.2.ffn_down.weight'") &&
          strstr(err.msg, "172 values") && strstr(err.msg, "needs 64") &&
          strstr(err.msg, "imatrix-stories260K-tscalib-c128.dat"));
    st = ql_imatrix_weights(im, "output.weight", 64, w, &err);
    CHECK(st == QL_ENOTFOUND && strstr(err.msg, "no entry for tensor 'output.weight'"));
    ql_imatrix_free(im);
}

/* Entries built in memory: a 3-matrix (expert) entry with an unused matrix and
 * sums of x, a dense entry, sorting, both formats. */
static void builder_tests(void)
{
    ql_error err;
    ql_imatrix *im = NULL;
    CHECK_OK(ql_imatrix_alloc(&im, &err), &err);
    ql_imatrix_entry *e = NULL;
    CHECK_OK(ql_imatrix_add_entry(im, "blk.1.ffn_up_exps.weight", 12, 3, true, &e, &err), &err);
    for (int j = 0; j < 12; j++) {
        e->sums[j] = (float)(j + 1) * 3.0f;
        e->in_sum[j] = (float)j - 5.5f;
    }
    e->counts[0] = 300, e->counts[1] = 0, e->counts[2] = 60;
    CHECK_OK(ql_imatrix_add_entry(im, "blk.0.attn_q.weight", 4, 1, false, &e, &err), &err);
    for (int j = 0; j < 4; j++)
        e->sums[j] = 100.0f * (float)(j + 1);
    e->counts[0] = 200;
    im->chunk_size = 100;
    im->chunk_count = 3;
    CHECK_OK(ql_imatrix_add_dataset(im, "a.txt", &err), &err);
    CHECK_OK(ql_imatrix_add_dataset(im, "b.txt", &err), &err);

    float w[12];
    CHECK_OK(ql_imatrix_weights(im, "blk.1.ffn_up_exps.weight", 12, w, &err), &err);
    CHECK(w[0] == 3.0f / 300.0f && w[3] == 12.0f / 300.0f);
    CHECK(w[4] == 1.0f && w[7] == 1.0f); /* the unused expert */
    CHECK(w[8] == 27.0f / 60.0f && w[11] == 36.0f / 60.0f);

    ql_imatrix_sort(im);
    CHECK(strcmp(im->entries[0].name, "blk.0.attn_q.weight") == 0);

    /* GGUF keeps everything, including in_sum and the per-matrix counts. */
    CHECK_OK(ql_imatrix_write(im, qlt_tmp("experts.gguf"), QL_IMATRIX_GGUF, &err), &err);
    ql_imatrix *g = NULL;
    ql_status st = ql_imatrix_read(qlt_tmp("experts.gguf"), &g, &err);
    CHECK_OK(st, &err);
    if (!st) {
        const ql_imatrix_entry *x = ql_imatrix_find(g, "blk.1.ffn_up_exps.weight");
        CHECK(x && x->n_mat == 3 && x->n_values == 12 && x->counts[1] == 0 && x->counts[2] == 60 &&
              x->in_sum && x->in_sum[11] == 5.5f);
        CHECK(g->n_datasets == 2 && strcmp(g->datasets[1], "b.txt") == 0);
        CHECK_EQ_INT(g->chunk_size, 100);
        float w2[12];
        CHECK_OK(ql_imatrix_weights(g, "blk.1.ffn_up_exps.weight", 12, w2, &err), &err);
        CHECK(memcmp(w, w2, sizeof w) == 0);
        ql_imatrix_free(g);
    }
    ql_gguf *gg = NULL;
    if (ql_gguf_open(&gg, qlt_tmp("experts.gguf"), &err) == QL_OK) {
        const ql_gguf_tensor *t = ql_gguf_find_tensor(gg, "blk.1.ffn_up_exps.weight.in_sum2");
        const ql_gguf_tensor *c = ql_gguf_find_tensor(gg, "blk.1.ffn_up_exps.weight.counts");
        CHECK(t && t->ne[0] == 4 && t->ne[1] == 3);
        CHECK(c && c->ne[0] == 1 && c->ne[1] == 3);
        CHECK(ql_gguf_find_tensor(gg, "blk.1.ffn_up_exps.weight.in_sum") != NULL);
        CHECK(ql_gguf_find_tensor(gg, "blk.0.attn_q.weight.in_sum") == NULL);
        ql_gguf_close(gg);
    }

    /* .dat: one ncall per entry (ceil(300 / 100) = 3), values sum/count*ncall, the
     * unused expert stored as importance 1, the last dataset name only. */
    CHECK_OK(ql_imatrix_write(im, qlt_tmp("experts.dat"), QL_IMATRIX_DAT, &err), &err);
    ql_imatrix *d = NULL;
    st = ql_imatrix_read(qlt_tmp("experts.dat"), &d, &err);
    CHECK_OK(st, &err);
    if (!st) {
        const ql_imatrix_entry *x = ql_imatrix_find(d, "blk.1.ffn_up_exps.weight");
        CHECK(x && x->n_mat == 1 && x->counts[0] == 3 && x->in_sum == NULL);
        CHECK(d->n_datasets == 1 && strcmp(d->datasets[0], "b.txt") == 0);
        CHECK_EQ_INT(d->chunk_count, 3);
        CHECK_EQ_INT(d->entries[0].counts[0], 2); /* ceil(200 / 100) */
        float w2[12];
        CHECK_OK(ql_imatrix_weights(d, "blk.1.ffn_up_exps.weight", 12, w2, &err), &err);
        for (int j = 0; j < 12; j++)
            CHECK_MSG(fabs((double)w2[j] - (double)w[j]) <= ROUNDTRIP_REL_TOL * (double)w[j],
                      "value %d: %.9g vs %.9g", j, (double)w2[j], (double)w[j]);
        ql_imatrix_free(d);
    }

    /* An entry that saw nothing is left out of a .dat, as llama-imatrix does. */
    CHECK_OK(ql_imatrix_add_entry(im, "blk.9.unused.weight", 4, 1, false, &e, &err), &err);
    CHECK_OK(ql_imatrix_write(im, qlt_tmp("skip.dat"), QL_IMATRIX_DAT, &err), &err);
    if (ql_imatrix_read(qlt_tmp("skip.dat"), &d, &err) == QL_OK) {
        CHECK_EQ_INT(d->n_entries, 2);
        CHECK(ql_imatrix_find(d, "blk.9.unused.weight") == NULL);
        ql_imatrix_free(d);
    }

    /* API errors. */
    CHECK(ql_imatrix_add_entry(im, "blk.0.attn_q.weight", 4, 1, false, NULL, &err) == QL_EINVAL &&
          strstr(err.msg, "already exists"));
    CHECK(ql_imatrix_add_entry(im, "x", 5, 2, false, NULL, &err) == QL_EINVAL);
    CHECK(ql_imatrix_add_entry(im, "x", 0, 1, false, NULL, &err) == QL_EINVAL);
    CHECK(ql_imatrix_add_entry(im, "", 4, 1, false, NULL, &err) == QL_EINVAL);
    char longname[80];
    memset(longname, 'a', 64);
    longname[64] = '\0';
    CHECK(ql_imatrix_add_entry(im, longname, 4, 1, false, NULL, &err) == QL_EINVAL);
    /* 57 bytes is a valid entry name, but "<name>.in_sum2" exceeds GGUF's 63 bytes. */
    longname[57] = '\0';
    CHECK_OK(ql_imatrix_add_entry(im, longname, 4, 1, false, &e, &err), &err);
    e->counts[0] = 1;
    CHECK(ql_imatrix_write(im, qlt_tmp("long.gguf"), QL_IMATRIX_GGUF, &err) == QL_EINVAL &&
          strstr(err.msg, "longer than GGUF's 63-byte tensor names"));
    CHECK(access(qlt_tmp("long.gguf"), F_OK) != 0);
    CHECK_OK(ql_imatrix_write(im, qlt_tmp("long.dat"), QL_IMATRIX_DAT, &err), &err);
    ql_imatrix_free(im);

    CHECK_OK(ql_imatrix_alloc(&im, &err), &err);
    CHECK(ql_imatrix_write(im, qlt_tmp("empty.dat"), QL_IMATRIX_DAT, &err) == QL_EINVAL &&
          strstr(err.msg, "no entries"));
    ql_imatrix_free(im);
    ql_imatrix_free(NULL);

    ql_imatrix_format f;
    CHECK(ql_imatrix_format_from_name("a/b.dat", &f) && f == QL_IMATRIX_DAT);
    CHECK(ql_imatrix_format_from_name("x.gguf", &f) && f == QL_IMATRIX_GGUF);
    CHECK(!ql_imatrix_format_from_name("x.bin", &f));
    CHECK(strcmp(ql_imatrix_format_name(QL_IMATRIX_GGUF), "gguf") == 0);
    CHECK(ql_imatrix_format_parse("dat", &f) && f == QL_IMATRIX_DAT);
    CHECK(ql_imatrix_format_parse("gguf", &f) && f == QL_IMATRIX_GGUF);
    CHECK(!ql_imatrix_format_parse("GGUF", &f) && !ql_imatrix_format_parse(".dat", &f));

    /* An old .dat without the trailer (chunk count, dataset) still reads. */
    static const unsigned char old[] = {1, 0, 0, 0, 1, 0, 0, 0, 'w',  2,   0,
                                        0, 0, 1, 0, 0, 0, 0, 0, 0x80, 0x40};
    CHECK_OK(ql_imatrix_read_buffer(old, sizeof old, "old.dat", &im, &err), &err);
    if (im) {
        CHECK(im->n_entries == 1 && im->chunk_count == 0 && im->n_datasets == 0);
        float one;
        CHECK_OK(ql_imatrix_weights(im, "w", 1, &one, &err), &err);
        CHECK(one == 2.0f); /* 4.0 stored, ncall 2 */
        ql_imatrix_free(im);
    }
    /* A stored value whose importance the quantizers cannot use (their sums would
     * overflow: IQ4_NL wrote infinite scales) is refused when read, naming the file,
     * the entry and the column. */
    unsigned char big[sizeof old];
    memcpy(big, old, sizeof old);
    float huge = 3e38f;
    memcpy(big + 17, &huge, 4);
    st = ql_imatrix_read_buffer(big, sizeof big, "big.dat", &im, &err);
    CHECK_MSG(st == QL_EFORMAT && im == NULL &&
                  strstr(err.msg, "big.dat: entry 'w': column 0 has importance 1.5e+38") &&
                  strstr(err.msg, "overflow"),
              "%s", err.msg);
    /* One built in memory that would overflow once scaled to tokens is refused, not
     * turned into an infinity that no reader accepts. */
    CHECK_OK(ql_imatrix_alloc(&im, &err), &err);
    ql_imatrix_entry *he;
    CHECK_OK(ql_imatrix_add_entry(im, "w", 1, 1, false, &he, &err), &err);
    he->sums[0] = huge;
    he->counts[0] = 1;
    st = ql_imatrix_set_chunk_size(im, 512, &err);
    CHECK(st == QL_EFORMAT && strstr(err.msg, "entry 'w'") && strstr(err.msg, "overflows"));
    CHECK_EQ_INT(im->chunk_size, 0);
    ql_imatrix_free(im);
    /* ncall 0: llama-quantize uses the stored values as they are. */
    static const unsigned char zero_call[] = {1, 0, 0, 0, 1, 0, 0, 0, 'w',  0,   0,
                                              0, 0, 1, 0, 0, 0, 0, 0, 0x80, 0x40};
    CHECK_OK(ql_imatrix_read_buffer(zero_call, sizeof zero_call, "z.dat", &im, &err), &err);
    if (im) {
        float v;
        CHECK_OK(ql_imatrix_weights(im, "w", 1, &v, &err), &err);
        CHECK(v == 4.0f);
        ql_imatrix_free(im);
    }

    /* Dropping the entries without a counted token keeps the others in order; an
     * entry counts when any of its matrices does. */
    CHECK_OK(ql_imatrix_alloc(&im, &err), &err);
    const char *names[] = {"a", "b", "c", "d", "e"};
    const int64_t mats[] = {1, 2, 1, 2, 1};
    const int64_t counted[][2] = {{0, 0}, {0, 3}, {5, 0}, {0, 0}, {0, 0}};
    for (int i = 0; i < 5; i++) {
        CHECK_OK(ql_imatrix_add_entry(im, names[i], 4, mats[i], i == 3, &e, &err), &err);
        for (int64_t m = 0; m < mats[i]; m++)
            e->counts[m] = counted[i][m];
    }
    ql_imatrix_drop_empty(im);
    CHECK_EQ_INT(im->n_entries, 2);
    CHECK(im->n_entries == 2 && strcmp(im->entries[0].name, "b") == 0 &&
          strcmp(im->entries[1].name, "c") == 0 && im->entries[0].n_mat == 2 &&
          im->entries[0].counts[1] == 3);
    CHECK(ql_imatrix_find(im, "a") == NULL && ql_imatrix_find(im, "d") == NULL);
    /* the freed slots can be reused */
    CHECK_OK(ql_imatrix_add_entry(im, "a", 4, 1, false, NULL, &err), &err);
    CHECK_EQ_INT(im->n_entries, 3);
    ql_imatrix_drop_empty(im);
    CHECK_EQ_INT(im->n_entries, 2);
    ql_imatrix_free(im);
}

/* Adds an entry of n_mat matrices of per values each, with the given sums and counts. */
static void add(ql_imatrix *im, const char *name, int64_t per, int64_t n_mat, const float *sums,
                const int64_t *counts)
{
    ql_error err;
    ql_imatrix_entry *e;
    CHECK_OK(ql_imatrix_add_entry(im, name, per * n_mat, n_mat, false, &e, &err), &err);
    if (!e)
        return;
    memcpy(e->sums, sums, (size_t)(per * n_mat) * sizeof *sums);
    memcpy(e->counts, counts, (size_t)n_mat * sizeof *counts);
}

/* An entry with nothing to weigh by (all zero, denormal) is dropped when read, with its
 * name kept for the warning; a matrix of a multi-matrix entry that is so weighs its
 * columns alike, as one that counted no token; values the quantizers' sums overflow
 * on, or not finite, are refused naming the entry and column, in files and in memory. */
static void degenerate_entries(void)
{
    ql_error err;
    ql_imatrix *im;
    CHECK_OK(ql_imatrix_alloc(&im, &err), &err);
    const float zero[4] = {0, 0, 0, 0}, tiny[4] = {1e-40f, 1e-41f, 0, 1e-39f};
    const float sparse[4] = {0, 0, 0, 5}, experts[4] = {0, 0, 2, 4}, edge[4] = {1e12f, 1, 1, 1};
    const int64_t c1[2] = {1, 1}, c10[1] = {10}, cx[2] = {3, 2}, c0[2] = {0, 0};
    add(im, "zero", 4, 1, zero, c10);
    add(im, "sparse", 4, 1, sparse, c1);
    add(im, "tiny", 4, 1, tiny, c1);
    add(im, "experts", 2, 2, experts, cx);
    add(im, "unused", 2, 2, zero, c0);
    add(im, "edge", 4, 1, edge, c1);
    float w[4];
    /* In memory: the degenerate entry is "no importance", with the reason. */
    ql_status st = ql_imatrix_weights(im, "zero", 4, w, &err);
    CHECK_MSG(st == QL_ENOTFOUND && strstr(err.msg, "entry 'zero' carries no usable importance "
                                                    "(largest 0, below 1e-15)"),
              "%s", err.msg);
    CHECK_OK(ql_imatrix_set_chunk_size(im, 512, &err), &err);
    const char *path = qlt_tmp("degenerate.gguf");
    CHECK_OK(ql_imatrix_write(im, path, QL_IMATRIX_GGUF, &err), &err);
    ql_imatrix_free(im);

    CHECK_OK(ql_imatrix_read(path, &im, &err), &err);
    if (!im)
        return;
    CHECK_EQ_INT(im->n_entries, 4);
    CHECK(im->n_dropped == 2 && strcmp(im->dropped[0], "zero") == 0 &&
          strcmp(im->dropped[1], "tiny") == 0);
    CHECK(ql_imatrix_find(im, "zero") == NULL && ql_imatrix_find(im, "tiny") == NULL);
    CHECK(ql_imatrix_weights(im, "zero", 4, w, &err) == QL_ENOTFOUND);
    CHECK_OK(ql_imatrix_weights(im, "sparse", 4, w, &err), &err);
    CHECK(w[0] == 0 && w[1] == 0 && w[2] == 0 && w[3] == 5.0f);
    CHECK_OK(ql_imatrix_weights(im, "experts", 4, w, &err), &err);
    CHECK(w[0] == 1 && w[1] == 1 && w[2] == 1.0f && w[3] == 2.0f);
    CHECK_OK(ql_imatrix_weights(im, "unused", 4, w, &err), &err);
    CHECK(w[0] == 1 && w[1] == 1 && w[2] == 1 && w[3] == 1);
    CHECK_OK(ql_imatrix_weights(im, "edge", 4, w, &err), &err);
    CHECK(w[0] == 1e12f);
    char msg[512];
    CHECK(ql_imatrix_dropped_warning(im, msg, sizeof msg));
    CHECK_MSG(strstr(msg, path) && strstr(msg, "2 entries carry no usable importance") &&
                  strstr(msg, "quantized without, as for a missing entry: zero, tiny"),
              "%s", msg);
    ql_imatrix_free(im);

    /* Beyond the maximum, or not finite: refused in memory and when read. */
    const float over[4] = {1, 2e12f, 1, 1};
    const float nan4[4] = {1, 1, NAN, 1};
    const struct {
        const float *sums;
        const char *msg;
    } bad[] = {{over, "entry 'w': column 1 has importance 2e+12 (sum 2e+12 / count 1), expected "
                      "a finite number from 0 to 1e+12"},
               {nan4, "entry 'w': column 2 has importance nan"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_OK(ql_imatrix_alloc(&im, &err), &err);
        add(im, "w", 4, 1, bad[i].sums, c1);
        st = ql_imatrix_weights(im, "w", 4, w, &err);
        CHECK_MSG(st == QL_EFORMAT && strstr(err.msg, bad[i].msg), "%s", err.msg);
        ql_imatrix_free(im);
    }
    CHECK_OK(ql_imatrix_alloc(&im, &err), &err);
    add(im, "w", 4, 1, over, c1);
    CHECK_OK(ql_imatrix_write(im, qlt_tmp("over.dat"), QL_IMATRIX_DAT, &err), &err);
    ql_imatrix_free(im);
    st = ql_imatrix_read(qlt_tmp("over.dat"), &im, &err);
    CHECK_MSG(st == QL_EFORMAT && im == NULL && strstr(err.msg, "over.dat: ") &&
                  strstr(err.msg, bad[0].msg),
              "%s", err.msg);
    CHECK(!ql_imatrix_dropped_warning(&(ql_imatrix){0}, msg, sizeof msg));
}

/* Relative rms error of type on x (nrows x 256) with importance imat; inf when a value
 * decodes to a non-finite number or the quantizer refuses. */
static double rel_error(int32_t type, const float *x, int64_t nrows, const float *imat, void *q,
                        size_t q_size, float *y)
{
    ql_error err;
    if (ql_quant_tensor(type, x, nrows, 256, imat, q, q_size, NULL, &err) ||
        ql_dequant_tensor(type, q, q_size, nrows, 256, y, &err))
        return (double)INFINITY;
    double se = 0, sx = 0;
    for (int64_t i = 0; i < nrows * 256; i++) {
        if (!isfinite(y[i]))
            return (double)INFINITY;
        const double d = (double)y[i] - (double)x[i];
        se += d * d;
        sx += (double)x[i] * (double)x[i];
    }
    return sqrt(se / sx);
}

/* The bounds are the measurement imatrix_io.h states: for Gaussian weights of each
 * scale, every type whose quantizer uses importance has, at importances scaled to the
 * minimum and the maximum, an error within BOUND_ERR_FACTOR of its error at 1. */
static void importance_bounds(void)
{
    enum { ROWS = 16 };
    float *x = malloc(ROWS * 256 * sizeof *x), *y = malloc(ROWS * 256 * sizeof *y);
    const size_t q_size = ROWS * 256 * 4;
    void *q = malloc(q_size);
    float base[256], lo[256], hi[256];
    for (int j = 0; j < 256; j++) {
        /* Importances that vary by a factor of 2 across the columns, largest 1. */
        base[j] = (0.5f + (float)(j % 7) / 12.0f) / (0.5f + 6.0f / 12.0f);
        lo[j] = base[j] * QL_IMATRIX_IMPORTANCE_MIN;
        hi[j] = base[j] * QL_IMATRIX_IMPORTANCE_MAX;
    }
    const ql_type_traits *list[64];
    const int n = ql_type_list(list, 64);
    int checked = 0;
    for (size_t si = 0; si < sizeof bound_sigmas / sizeof bound_sigmas[0]; si++) {
        uint64_t seed = 7;
        for (int i = 0; i < ROWS * 256; i++)
            x[i] = (float)(bound_sigmas[si] * ql_rng_gauss(&seed));
        for (int t = 0; t < n; t++) {
            const ql_type_traits *tr = list[t];
            ql_error err;
            if (!tr->quantize || tr->type == QL_TYPE_Q8_0_XC || ql_row_size(tr->type, 256) == 0 ||
                ql_type_prepare(tr->type, &err))
                continue;
            const double at1 = rel_error(tr->type, x, ROWS, base, q, q_size, y);
            const double at_lo = rel_error(tr->type, x, ROWS, lo, q, q_size, y);
            const double at_hi = rel_error(tr->type, x, ROWS, hi, q, q_size, y);
            CHECK_MSG(at_lo <= BOUND_ERR_FACTOR * at1 && at_hi <= BOUND_ERR_FACTOR * at1,
                      "%s, weights sigma %g: error %.4g at importance 1, %.4g at the minimum, "
                      "%.4g at the maximum",
                      tr->name, bound_sigmas[si], at1, at_lo, at_hi);
            checked++;
        }
    }
    CHECK(checked >= 2 * 20);
    free(x);
    free(y);
    free(q);
}

int main(void)
{
    builder_tests();
    degenerate_entries();
    importance_bounds();
    if (access(qlt_shared(GOLDEN_DAT), R_OK) == 0)
        golden_tests();
    else
        printf("note: %s not found; golden imatrix checks skipped\n", qlt_shared(GOLDEN_DAT));
    return qlt_done();
}
