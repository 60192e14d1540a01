/* qlab fit: the error table's file format, and the table's cache of such files keyed by
 * its identity (see fit.h and fit_internal.h). */
#include "experiment/fit_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/data.h"
#include "base/strbuf.h"
#include "base/util.h"
#include "experiment/fit.h"
#include "base/commit.h"
#include "ql_config.h"

/* Version of the error definition and the file's layout; bump when either changes.
 * 4: IQ1_S and IQ1_M measured on the bytes `qlab quantize` writes (its chunks). */
#define TABLE_FILE_FORMAT 4

/* ---------------------------------------------------------------------------
 * The table file
 *
 * Text, one record per line, tab-separated:
 *   qlab-fit-table <format>
 *   key <sha256 of the key string>
 *   model_sha256 <hex>  | imatrix_sha256 <hex|none> | types <list> | sampling <n|exact>
 *   fixed_bytes <n> | assigned_params <n> | total_params <n>
 *   tensors <n>
 *   tensor <name> <n_dims> <ne0..ne3> <src type> <assigned 0|1> <fixed type> <fixed bytes>
 *          <importance> <quant_imatrix 0|1> <rows measured> <n choices>
 *   choice <type> <bytes> <error as a C99 hex float: exact round trip>
 *   notes <n> / note <text>
 *   end <sha256 of every byte before this line>
 */

static ql_status cache_key(const ql_fit_table *t, char out[65])
{
    char key[2048];
    snprintf(key, sizeof key,
             "qlab-fit-table %d|model=%s|imatrix=%s|types=%s|sampling=%lld|build=%s %s",
             TABLE_FILE_FORMAT, t->model_sha256, t->imatrix_sha256, t->types,
             (long long)t->sample_rows, QL_VERSION, ql_commit);
    ql_sha256_hex(key, strlen(key), out);
    return QL_OK;
}

ql_status ql_fit_table_file_write(const ql_fit_table *t, const char *path, ql_error *err)
{
    ql_strbuf s = {0};
    char key[65];
    cache_key(t, key);
    ql_strbuf_add(&s, "qlab-fit-table\t%d\n", TABLE_FILE_FORMAT);
    ql_strbuf_add(&s, "key\t%s\n", key);
    ql_strbuf_add(&s, "model_sha256\t%s\n", t->model_sha256);
    ql_strbuf_add(&s, "imatrix_sha256\t%s\n", t->imatrix_sha256);
    ql_strbuf_add(&s, "types\t%s\n", t->types);
    ql_strbuf_add(&s, "sampling\t%lld\n", (long long)t->sample_rows);
    ql_strbuf_add(&s, "fixed_bytes\t%llu\n", (unsigned long long)t->fixed_bytes);
    ql_strbuf_add(&s, "assigned_params\t%lld\n", (long long)t->assigned_params);
    ql_strbuf_add(&s, "total_params\t%lld\n", (long long)t->total_params);
    ql_strbuf_add(&s, "tensors\t%d\n", t->n_tensors);
    for (int i = 0; i < t->n_tensors; i++) {
        const ql_fit_tensor *ft = &t->tensors[i];
        ql_strbuf_add(
            &s, "tensor\t%s\t%u\t%lld\t%lld\t%lld\t%lld\t%d\t%d\t%d\t%llu\t%s\t%d\t%lld\t%d\n",
            ft->name, ft->n_dims, (long long)ft->ne[0], (long long)ft->ne[1], (long long)ft->ne[2],
            (long long)ft->ne[3], (int)ft->src_type, ft->assigned ? 1 : 0, (int)ft->fixed_type,
            (unsigned long long)ft->fixed_bytes, ql_fit_imp_source_name(ft->imp),
            ft->quant_imatrix ? 1 : 0, (long long)ft->rows_measured, ft->n_choices);
        for (int c = 0; c < ft->n_choices; c++)
            ql_strbuf_add(&s, "choice\t%s\t%llu\t%a\n", ql_type_name(ft->choices[c].type),
                          (unsigned long long)ft->choices[c].bytes, ft->choices[c].err);
    }
    ql_strbuf_add(&s, "notes\t%d\n", t->n_notes);
    for (int i = 0; i < t->n_notes; i++)
        ql_strbuf_add(&s, "note\t%s\n", t->notes[i]);
    char sum[65];
    ql_sha256_hex(ql_strbuf_cstr(&s), s.len, sum); /* of a failed text: never written */
    ql_strbuf_add(&s, "end\t%s\n", sum);
    ql_status rc =
        s.failed ? ql_error_set(err, QL_ENOMEM, "%s: out of memory formatting the cache", path)
                 : ql_file_write_all(path, s.text, s.len, err);
    ql_strbuf_free(&s);
    return rc;
}

/* Line reader over a NUL-terminated buffer: splits the current line into at most
 * max tab-separated fields (in place). */
typedef struct {
    char *p;
    int line;
    const char *path;
} reader;

static int next_fields(reader *r, char **f, int max)
{
    if (!*r->p)
        return -1;
    r->line++;
    char *end = strchr(r->p, '\n');
    if (!end)
        return -2; /* no final newline: truncated */
    *end = '\0';
    int n = 0;
    char *s = r->p;
    f[n++] = s;
    while (n < max && (s = strchr(s, '\t')) != NULL) {
        *s++ = '\0';
        f[n++] = s;
    }
    r->p = end + 1;
    return n;
}

static ql_status bad(const reader *r, ql_error *err, const char *what)
{
    return ql_error_set(err, QL_EFORMAT, "%s:%d: %s", r->path, r->line, what);
}

/* Expects a line "<name>\t<value>" and returns the value. */
static ql_status expect_kv(reader *r, const char *name, char **value, ql_error *err)
{
    char *f[3];
    int n = next_fields(r, f, 3);
    if (n == -1)
        return bad(r, err, "unexpected end of file");
    if (n == -2)
        return bad(r, err, "truncated line");
    if (n != 2 || strcmp(f[0], name) != 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "expected a '%s' record", name);
        return bad(r, err, msg);
    }
    *value = f[1];
    return QL_OK;
}

static bool parse_u64(const char *s, uint64_t *out)
{
    int64_t v;
    if (!ql_parse_i64(s, &v) || v < 0)
        return false;
    *out = (uint64_t)v;
    return true;
}

static bool parse_type_id(const char *s, int32_t *out)
{
    int v;
    if (!ql_parse_int(s, &v) || !ql_type_get(v))
        return false;
    *out = v;
    return true;
}

/* Checks the last line, "end\t<sha256 of every byte before it>\n", and cuts it off
 * so that the reader stops before it. */
static ql_status strip_checksum(char *buf, size_t len, const char *path, ql_error *err)
{
    if (memchr(buf, '\0', len))
        return ql_error_set(err, QL_EFORMAT, "%s: binary data in the cache file", path);
    /* The last line starts after the last newline but one. */
    size_t start = len >= 2 ? len - 2 : 0;
    while (start > 0 && buf[start - 1] != '\n')
        start--;
    if (len < 2 || buf[len - 1] != '\n' || len - start != 4 + 64 + 1 ||
        strncmp(buf + start, "end\t", 4) != 0)
        return ql_error_set(err, QL_EFORMAT, "%s: truncated (no final 'end' checksum line)", path);
    char sum[65];
    ql_sha256_hex(buf, start, sum);
    if (strncmp(buf + start + 4, sum, 64) != 0)
        return ql_error_set(err, QL_EFORMAT,
                            "%s: checksum mismatch (the file was modified or damaged)", path);
    buf[start] = '\0';
    return QL_OK;
}

/* Expects "<name>\t<n>" with n a number >= min. */
static ql_status expect_i64(reader *r, const char *name, int64_t min, int64_t *out, ql_error *err)
{
    char *v;
    ql_status rc = expect_kv(r, name, &v, err);
    if (rc != QL_OK)
        return rc;
    if (!ql_parse_i64(v, out) || *out < min) {
        char msg[160];
        snprintf(msg, sizeof msg, "bad %s", name);
        return bad(r, err, msg);
    }
    return QL_OK;
}

/* The header: format version, key, identity, sampling and totals, up to the
 * tensor count (at most one tensor per 30 bytes of the file: a record is longer). */
static ql_status read_header(reader *r, ql_fit_table *t, char stored_key[65], size_t len,
                             int *n_tensors, ql_error *err)
{
    char *v;
    int64_t n;
    ql_status rc = expect_kv(r, "qlab-fit-table", &v, err);
    if (rc != QL_OK)
        return rc;
    int fmt;
    if (!ql_parse_int(v, &fmt) || fmt != TABLE_FILE_FORMAT)
        return bad(r, err, "unsupported cache format version");
    if ((rc = expect_kv(r, "key", &v, err)) != QL_OK)
        return rc;
    if (strlen(v) != 64)
        return bad(r, err, "key is not a sha256");
    ql_strlcpy(stored_key, v, 65);
    if ((rc = expect_kv(r, "model_sha256", &v, err)) != QL_OK)
        return rc;
    ql_strlcpy(t->model_sha256, v, sizeof t->model_sha256);
    if ((rc = expect_kv(r, "imatrix_sha256", &v, err)) != QL_OK)
        return rc;
    ql_strlcpy(t->imatrix_sha256, v, sizeof t->imatrix_sha256);
    if ((rc = expect_kv(r, "types", &v, err)) != QL_OK)
        return rc;
    ql_strlcpy(t->types, v, sizeof t->types);
    if ((rc = expect_i64(r, "sampling", 0, &t->sample_rows, err)) != QL_OK ||
        (rc = expect_i64(r, "fixed_bytes", 0, &n, err)) != QL_OK)
        return rc;
    t->fixed_bytes = (uint64_t)n;
    if ((rc = expect_i64(r, "assigned_params", 0, &t->assigned_params, err)) != QL_OK ||
        (rc = expect_i64(r, "total_params", t->assigned_params, &t->total_params, err)) != QL_OK)
        return rc;
    if ((rc = expect_kv(r, "tensors", &v, err)) != QL_OK)
        return rc;
    if (!ql_parse_int(v, n_tensors) || *n_tensors < 0 || (size_t)*n_tensors > len / 30)
        return bad(r, err, "bad tensor count");
    return QL_OK;
}

/* One "tensor" record into ft; *n_choices receives its count of choice records. */
static ql_status read_tensor(reader *r, ql_fit_tensor *ft, int *n_choices, ql_error *err)
{
    char *f[16];
    const int n = next_fields(r, f, 16);
    if (n != 15 || strcmp(f[0], "tensor") != 0)
        return bad(r, err, n < 0 ? "unexpected end of file" : "expected a 'tensor' record");
    if (!(ft->name = ql_strdup(f[1])))
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", r->path);
    int nd, assigned, qi, nc;
    bool ok = ql_parse_int(f[2], &nd) && nd >= 1 && nd <= QL_GGUF_MAX_DIMS;
    int64_t params = 1;
    for (int d = 0; ok && d < QL_GGUF_MAX_DIMS; d++) {
        ok = ql_parse_i64(f[3 + d], &ft->ne[d]) && ft->ne[d] > 0 && ft->ne[d] <= INT64_MAX / params;
        if (ok)
            params *= ft->ne[d];
    }
    ok = ok && parse_type_id(f[7], &ft->src_type) && ql_parse_int(f[8], &assigned) &&
         (assigned == 0 || assigned == 1) && parse_type_id(f[9], &ft->fixed_type) &&
         parse_u64(f[10], &ft->fixed_bytes) && ql_fit_imp_source_parse(f[11], &ft->imp) &&
         ql_parse_int(f[12], &qi) && (qi == 0 || qi == 1) &&
         ql_parse_i64(f[13], &ft->rows_measured) && ft->rows_measured >= 0 &&
         ql_parse_int(f[14], &nc) && nc >= 0 && nc <= QL_FIT_MAX_TYPES &&
         (assigned ? nc > 0 : nc == 0);
    if (!ok)
        return bad(r, err, "malformed 'tensor' record");
    ft->n_dims = (uint32_t)nd;
    ft->n_params = params;
    ft->assigned = assigned == 1;
    ft->quant_imatrix = qi == 1;
    *n_choices = nc;
    return QL_OK;
}

/* The n "choice" records of ft: a weight type, its exact bytes for the tensor's
 * shape, a finite non-negative error. */
static ql_status read_choices(reader *r, ql_fit_tensor *ft, int n, ql_error *err)
{
    if (!(ft->choices = calloc((size_t)n + 1, sizeof *ft->choices)))
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", r->path);
    const uint64_t rows = (uint64_t)(ft->n_params / ft->ne[0]);
    for (int c = 0; c < n; c++) {
        char *g[5];
        const int nf = next_fields(r, g, 5);
        ql_fit_choice *ch = &ft->choices[ft->n_choices];
        const ql_type_traits *tr = nf == 4 ? ql_type_by_name(g[1]) : NULL;
        char *end = NULL;
        if (nf == 4) {
            errno = 0;
            ch->err = strtod(g[3], &end);
        }
        if (nf != 4 || strcmp(g[0], "choice") != 0 || !tr || !ql_type_is_gguf_weight(tr) ||
            !parse_u64(g[2], &ch->bytes) || !end || *end || errno || !isfinite(ch->err) ||
            ch->err < 0 || ch->bytes != rows * ql_row_size((int32_t)tr->type, ft->ne[0]) ||
            ch->bytes == 0)
            return bad(r, err, "malformed 'choice' record (type, exact bytes, error)");
        ch->type = (int32_t)tr->type;
        ft->n_choices++;
    }
    return QL_OK;
}

/* The tensor records with their choices; the header's totals must be theirs. */
static ql_status read_tensors(reader *r, ql_fit_table *t, int n, ql_error *err)
{
    if (!(t->tensors = calloc((size_t)n + 1, sizeof *t->tensors)))
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", r->path);
    uint64_t fixed_sum = 0;
    int64_t assigned_sum = 0, total_sum = 0;
    for (int i = 0; i < n; i++) {
        ql_fit_tensor *ft = &t->tensors[t->n_tensors++];
        int n_choices = 0;
        ql_status rc = read_tensor(r, ft, &n_choices, err);
        if (rc == QL_OK)
            rc = read_choices(r, ft, n_choices, err);
        if (rc != QL_OK)
            return rc;
        total_sum += ft->n_params;
        if (ft->assigned)
            assigned_sum += ft->n_params;
        else
            fixed_sum += ft->fixed_bytes;
    }
    if (fixed_sum != t->fixed_bytes || assigned_sum != t->assigned_params ||
        total_sum != t->total_params)
        return ql_error_set(err, QL_EFORMAT, "%s: totals do not match the tensor records", r->path);
    return QL_OK;
}

/* The notes, then nothing before the end line. */
static ql_status read_notes(reader *r, ql_fit_table *t, size_t len, ql_error *err)
{
    char *v;
    ql_status rc = expect_kv(r, "notes", &v, err);
    if (rc != QL_OK)
        return rc;
    int n;
    if (!ql_parse_int(v, &n) || n < 0 || (size_t)n > len)
        return bad(r, err, "bad note count");
    for (int i = 0; i < n; i++) {
        if ((rc = expect_kv(r, "note", &v, err)) != QL_OK ||
            (rc = ql_fit_table_add_note(t, err, "%s", v)) != QL_OK)
            return rc;
    }
    if (*r->p)
        return bad(r, err, "unexpected data before the end line");
    return QL_OK;
}

ql_status ql_fit_table_file_read(const char *path, ql_fit_table **out, ql_error *err)
{
    *out = NULL;
    char *buf = NULL;
    size_t len = 0;
    ql_status rc = ql_file_read_all(path, &buf, &len, err);
    if (rc != QL_OK)
        return rc;
    ql_fit_table *t = calloc(1, sizeof *t);
    if (!t) {
        free(buf);
        return ql_error_set(err, QL_ENOMEM, "%s: out of memory", path);
    }
    reader r = {buf, 0, path};
    char stored_key[65], key[65];
    int n_tensors = 0;
    if ((rc = strip_checksum(buf, len, path, err)) != QL_OK ||
        (rc = read_header(&r, t, stored_key, len, &n_tensors, err)) != QL_OK ||
        (rc = read_tensors(&r, t, n_tensors, err)) != QL_OK ||
        (rc = read_notes(&r, t, len, err)) != QL_OK)
        goto fail;
    cache_key(t, key);
    if (strcmp(key, stored_key) != 0) {
        rc = ql_error_set(err, QL_EFORMAT, "%s: the key does not match its contents", path);
        goto fail;
    }
    free(buf);
    *out = t;
    return QL_OK;
fail:
    free(buf);
    ql_fit_table_free(t);
    return rc;
}

/* The cache entry fits this model when every tensor matches by name and shape. */
static bool table_matches_model(const ql_fit_table *t, const ql_gguf *model)
{
    if (t->n_tensors != model->n_tensors)
        return false;
    for (int i = 0; i < t->n_tensors; i++) {
        const ql_gguf_tensor *gt = &model->tensors[i];
        const ql_fit_tensor *ft = &t->tensors[i];
        if (strcmp(ft->name, gt->name) != 0 || ft->n_dims != gt->n_dims || ft->src_type != gt->type)
            return false;
        for (int d = 0; d < QL_GGUF_MAX_DIMS; d++)
            if (ft->ne[d] != gt->ne[d])
                return false;
    }
    return true;
}

/* The cache file of t (its directory in dir), "" when caching is off. */
ql_status ql_fit_table_file_locate(ql_fit_table *t, const ql_fit_options *opt, char *dir,
                                   size_t dir_size, ql_error *err)
{
    t->cache_path[0] = '\0';
    if (opt->cache_dir && !*opt->cache_dir)
        return QL_OK;
    if (opt->cache_dir)
        ql_strlcpy(dir, opt->cache_dir, dir_size);
    else
        snprintf(dir, dir_size, "%s/results/cache", ql_data_root());
    char key[65];
    cache_key(t, key);
    if ((size_t)snprintf(t->cache_path, sizeof t->cache_path, "%.4000s/fit-%.16s.tsv", dir, key) >=
        sizeof t->cache_path)
        return ql_error_set(err, QL_EINVAL, "fit: cache directory path too long: %s", dir);
    return QL_OK;
}

/* The cached table for t's identity and model, or NULL (with why in problem when
 * a file was there but not usable). */
ql_fit_table *ql_fit_table_file_find(const ql_fit_table *t, const ql_gguf *model, char *problem,
                                     size_t problem_size)
{
    if (!t->cache_path[0] || !ql_file_exists(t->cache_path))
        return NULL;
    ql_fit_table *c = NULL;
    ql_error cerr;
    ql_error_clear(&cerr);
    ql_status cs = ql_fit_table_file_read(t->cache_path, &c, &cerr);
    if (cs == QL_OK && strcmp(c->model_sha256, t->model_sha256) == 0 &&
        strcmp(c->imatrix_sha256, t->imatrix_sha256) == 0 && strcmp(c->types, t->types) == 0 &&
        c->sample_rows == t->sample_rows && table_matches_model(c, model)) {
        c->from_cache = true;
        ql_strlcpy(c->cache_path, t->cache_path, sizeof c->cache_path);
        return c;
    }
    ql_fit_table_free(c);
    snprintf(problem, problem_size, "cache %s was not usable (%s); recomputed", t->cache_path,
             cs != QL_OK ? cerr.msg : "it belongs to another model or settings");
    return NULL;
}

/* Saves a computed table to its cache file; a failure becomes a note (the table
 * stands without its cache). Notes about the cache are added after saving: they
 * describe this run. */
ql_status ql_fit_table_file_store(ql_fit_table *t, const char *problem, ql_error *err)
{
    if (t->cache_path[0]) {
        ql_error werr;
        ql_error_clear(&werr);
        if (ql_fit_table_file_write(t, t->cache_path, &werr) != QL_OK) {
            ql_status rc = ql_fit_table_add_note(t, err, "cache not written: %s", werr.msg);
            if (rc != QL_OK)
                return rc;
            t->cache_path[0] = '\0';
        }
    }
    return problem[0] ? ql_fit_table_add_note(t, err, "%s", problem) : QL_OK;
}
