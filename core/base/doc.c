#include "base/doc.h"

#include <stdbool.h>
#include <stdlib.h>

#include "base/util.h"

ql_status ql_doc_open(ql_doc *d, ql_error *err)
{
    d->p = NULL;
    d->n = 0;
    d->f = open_memstream(&d->p, &d->n);
    return d->f ? QL_OK : ql_error_set(err, QL_ENOMEM, "out of memory for a document");
}

ql_status ql_doc_save(ql_doc *d, const char *dir, const char *name, FILE *log, ql_error *err)
{
    /* Closing the stream settles d->p and d->n (and reports a failed growth). */
    bool failed = ferror(d->f) != 0;
    if (fclose(d->f) != 0)
        failed = true;
    d->f = NULL;
    char path[4608];
    ql_status st;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        st = ql_error_set(err, QL_EINVAL, "%s/%s: path too long", dir, name);
    else if (failed)
        st = ql_error_set(err, QL_ENOMEM, "%s: out of memory while writing", path);
    else if (!(st = ql_file_write_all(path, d->p, d->n, err)) && log)
        fprintf(log, "  %s\n", path);
    free(d->p);
    d->p = NULL;
    d->n = 0;
    return st;
}

void ql_doc_discard(ql_doc *d)
{
    if (d->f)
        fclose(d->f);
    free(d->p);
    d->f = NULL;
    d->p = NULL;
    d->n = 0;
}
