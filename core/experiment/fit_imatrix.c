/* qlab fit: importance weights from an imatrix (see fit.h). */
#include "experiment/fit.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/imatrix_io.h"

struct ql_fit_imatrix {
    int64_t n;
    char **names;    /* entry names */
    float **weights; /* per entry: sums / count per matrix, as the quantizers get it */
    int64_t *lens;
    char identity[65];
    char *file, *dataset; /* provenance copies */
    ql_fit_importance imp;
};

static const float *lookup(void *user, const char *tensor, int64_t *n)
{
    const ql_fit_imatrix *f = user;
    for (int64_t i = 0; i < f->n; i++)
        if (strcmp(f->names[i], tensor) == 0) {
            *n = f->lens[i];
            return f->weights[i];
        }
    return NULL;
}

void ql_fit_imatrix_free(ql_fit_imatrix *f)
{
    if (!f)
        return;
    for (int64_t i = 0; i < f->n; i++) {
        free(f->names[i]);
        free(f->weights[i]);
    }
    free(f->names);
    free(f->weights);
    free(f->lens);
    free(f->file);
    free(f->dataset);
    free(f);
}

ql_status ql_fit_imatrix_wrap(const ql_imatrix *im, const char *identity, ql_fit_imatrix **out,
                              ql_error *err)
{
    *out = NULL;
    ql_fit_imatrix *f = calloc(1, sizeof *f);
    if (!f)
        return ql_error_set(err, QL_ENOMEM, "fit: out of memory");
    const size_t n = (size_t)im->n_entries + 1;
    f->names = calloc(n, sizeof *f->names);
    f->weights = calloc(n, sizeof *f->weights);
    f->lens = calloc(n, sizeof *f->lens);
    ql_status rc = QL_OK;
    if (!f->names || !f->weights || !f->lens) {
        rc = ql_error_set(err, QL_ENOMEM, "fit: out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < im->n_entries; i++) {
        const ql_imatrix_entry *e = &im->entries[i];
        f->names[i] = ql_strdup(e->name);
        f->weights[i] = malloc(sizeof(float) * (size_t)e->n_values);
        f->n = i + 1;
        if (!f->names[i] || !f->weights[i]) {
            rc = ql_error_set(err, QL_ENOMEM, "fit: out of memory");
            goto fail;
        }
        f->lens[i] = e->n_values;
        if ((rc = ql_imatrix_weights(im, e->name, e->n_values, f->weights[i], err)) != QL_OK)
            goto fail;
    }
    ql_strlcpy(f->identity, identity && *identity ? identity : "unnamed", sizeof f->identity);
    f->imp.sha256 = f->identity;
    f->imp.lookup = lookup;
    f->imp.user = f;
    /* Provenance for the fitted GGUF, as llama-quantize records it (no file name:
     * no keys). */
    f->file = im->path ? ql_strdup(im->path) : NULL;
    f->dataset = im->n_datasets > 0 ? ql_strdup(im->datasets[0]) : NULL;
    f->imp.file = f->file;
    f->imp.dataset = f->dataset;
    f->imp.n_entries = im->n_entries;
    f->imp.n_chunks = im->chunk_count;
    *out = f;
    return QL_OK;
fail:
    ql_fit_imatrix_free(f);
    return rc;
}

ql_status ql_fit_imatrix_open(const char *path, ql_fit_imatrix **out, ql_error *err)
{
    *out = NULL;
    char sha[65];
    ql_status rc = ql_sha256_file(path, sha, err);
    if (rc != QL_OK)
        return rc;
    ql_imatrix *im = NULL;
    if ((rc = ql_imatrix_read(path, &im, err)) != QL_OK)
        return rc;
    rc = ql_fit_imatrix_wrap(im, sha, out, err);
    ql_imatrix_free(im); /* the weights are copied */
    if (rc != QL_OK)
        return rc;
    if (!(*out)->file) {
        (*out)->file = ql_strdup(path);
        (*out)->imp.file = (*out)->file;
    }
    return QL_OK;
}

const ql_fit_importance *ql_fit_imatrix_importance(const ql_fit_imatrix *f)
{
    return &f->imp;
}

int64_t ql_fit_imatrix_entries(const ql_fit_imatrix *f)
{
    return f->n;
}
