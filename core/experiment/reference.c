#include "experiment/reference.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/data.h"
#include "base/progress.h"
#include "base/util.h"
#include "experiment/metrics.h"

#define REF_MAGIC "QLREF\0\0\1"
#define REF_VERSION 1
#define REF_HEADER_BYTES 128

struct ql_reference {
    int64_t n_chunks;
    int n_scored;
    int64_t n_vocab;
    float *logp;    /* (n_chunks * n_scored, n_vocab): heap or mapping */
    void *map;      /* the mapping when loaded from the cache */
    size_t map_size;
    double seconds;
    bool from_cache;
    char path[QL_PATH_MAX];
};

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t n_scored;
    int64_t n_chunks;
    int64_t n_vocab;
    char key[64];
    char pad[REF_HEADER_BYTES - 8 - 4 - 4 - 8 - 8 - 64];
} ref_header;

_Static_assert(sizeof(ref_header) == REF_HEADER_BYTES, "reference cache header is 128 bytes");

void ql_reference_free(ql_reference *r)
{
    if (!r)
        return;
    if (r->map)
        munmap(r->map, r->map_size);
    else
        free(r->logp);
    free(r);
}

const float *ql_reference_chunk(const ql_reference *r, int64_t chunk)
{
    return r->logp + (size_t)chunk * (size_t)r->n_scored * (size_t)r->n_vocab;
}

double ql_reference_seconds(const ql_reference *r)
{
    return r->seconds;
}

bool ql_reference_from_cache(const ql_reference *r)
{
    return r->from_cache;
}

static void identity_key(const ql_reference_opts *o, const ql_ppl_data *d, int64_t n_vocab,
                         char key[65])
{
    char id[512];
    snprintf(id, sizeof id,
             "qlab reference v%d\nmodel=%s\ntext=%s\nctx=%d\nchunks=%lld\nvocab=%lld\n"
             "weights=f32 act=f32 kv=f32\n",
             REF_VERSION, o->model_sha256, o->text_sha256, d->ctx, (long long)d->n_chunks,
             (long long)n_vocab);
    ql_sha256_hex(id, strlen(id), key);
}

/* Maps a cache file when it matches exactly; false (and nothing kept) otherwise. */
static bool try_load(ql_reference *r, const ql_ppl_data *d, const char *key)
{
    int fd = open(r->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat sb;
    size_t n_rows = (size_t)r->n_chunks * (size_t)r->n_scored;
    size_t want = REF_HEADER_BYTES + n_rows * (size_t)r->n_vocab * sizeof(float) +
                  n_rows * sizeof(int32_t);
    if (fstat(fd, &sb) != 0 || (size_t)sb.st_size != want) {
        close(fd);
        return false;
    }
    void *m = mmap(NULL, want, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return false;
    const ref_header *h = m;
    bool ok = memcmp(h->magic, REF_MAGIC, 8) == 0 && h->version == REF_VERSION &&
              h->n_scored == (uint32_t)r->n_scored && h->n_chunks == r->n_chunks &&
              h->n_vocab == r->n_vocab && memcmp(h->key, key, 64) == 0;
    const int32_t *targets =
        (const int32_t *)((const char *)m + REF_HEADER_BYTES +
                          n_rows * (size_t)r->n_vocab * sizeof(float));
    for (int64_t c = 0; ok && c < r->n_chunks; c++)
        ok = memcmp(targets + (size_t)c * (size_t)r->n_scored, ql_ppl_chunk_targets(d, c),
                    (size_t)r->n_scored * sizeof(int32_t)) == 0;
    if (!ok) {
        munmap(m, want);
        return false;
    }
    r->map = m;
    r->map_size = want;
    r->logp = (float *)((char *)m + REF_HEADER_BYTES);
    r->from_cache = true;
    return true;
}

/* Writes the cache atomically; a failure only costs a recomputation later. */
static void save(const ql_reference *r, const ql_ppl_data *d, const char *key)
{
    char tmp[QL_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", r->path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "qlab: warning: cannot write the reference cache %s: %s\n", tmp,
                strerror(errno));
        return;
    }
    ref_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, REF_MAGIC, 8);
    h.version = REF_VERSION;
    h.n_scored = (uint32_t)r->n_scored;
    h.n_chunks = r->n_chunks;
    h.n_vocab = r->n_vocab;
    memcpy(h.key, key, 64);
    size_t n_rows = (size_t)r->n_chunks * (size_t)r->n_scored;
    bool ok = fwrite(&h, sizeof h, 1, f) == 1 &&
              fwrite(r->logp, sizeof(float) * (size_t)r->n_vocab, n_rows, f) == n_rows;
    for (int64_t c = 0; ok && c < r->n_chunks; c++)
        ok = fwrite(ql_ppl_chunk_targets(d, c), sizeof(int32_t), (size_t)r->n_scored, f) ==
             (size_t)r->n_scored;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, r->path) != 0) {
        fprintf(stderr, "qlab: warning: cannot write the reference cache %s\n", r->path);
        remove(tmp);
    }
}

ql_status ql_reference_get(ql_reference **out, ql_forward *fw, const ql_weights *w,
                           const ql_ppl_data *d, const ql_reference_opts *opts, ql_error *err)
{
    *out = NULL;
    const ql_hparams *hp = ql_forward_hparams(fw);
    ql_reference *r = calloc(1, sizeof *r);
    if (!r)
        return ql_error_set(err, QL_ENOMEM, "reference: out of memory");
    r->n_chunks = d->n_chunks;
    r->n_scored = d->n_scored;
    r->n_vocab = hp->n_vocab;
    char key[65];
    identity_key(opts, d, r->n_vocab, key);
    if (opts->cache_dir) {
        snprintf(r->path, sizeof r->path, "%s/ref-%.24s.bin", opts->cache_dir, key);
        if (try_load(r, d, key)) {
            *out = r;
            return QL_OK;
        }
    }
    size_t n_rows = (size_t)r->n_chunks * (size_t)r->n_scored;
    r->logp = malloc(n_rows * (size_t)r->n_vocab * sizeof(float));
    if (!r->logp) {
        ql_reference_free(r);
        return ql_error_set(err, QL_ENOMEM,
                            "reference: out of memory for %zu x %lld log-probabilities", n_rows,
                            (long long)hp->n_vocab);
    }
    ql_progress p;
    ql_progress_begin(&p, "reference", "tok", ql_ppl_n_scored_total(d), opts->quiet);
    double t0 = ql_now();
    for (int64_t c = 0; c < r->n_chunks; c++) {
        float *rows = r->logp + (size_t)c * (size_t)r->n_scored * (size_t)r->n_vocab;
        ql_status st = ql_ppl_run_chunk(fw, w, d, c, rows, err);
        if (st) {
            ql_reference_free(r);
            return ql_error_prefix(err, "reference pass, chunk %lld: ", (long long)c);
        }
        for (int t = 0; t < r->n_scored; t++) {
            float *row = rows + (size_t)t * (size_t)r->n_vocab;
            ql_log_softmax(row, r->n_vocab, row);
        }
        ql_progress_update(&p, (c + 1) * r->n_scored, NULL);
    }
    r->seconds = ql_now() - t0;
    ql_progress_end(&p, ql_ppl_n_scored_total(d), NULL);
    if (opts->cache_dir) {
        ql_error dir_err; /* an uncachable reference is still a good reference */
        if (ql_make_dirs(opts->cache_dir, &dir_err) == QL_OK)
            save(r, d, key);
        else
            fprintf(stderr, "qlab: warning: %s\n", dir_err.msg);
    }
    *out = r;
    return QL_OK;
}
