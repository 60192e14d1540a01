/* qlab inspect: everything a GGUF file says about itself, and a check that the
 * header and the tensor data account for every byte of the file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli.h"
#include "commands.h"
#include "formats/types.h"
#include "model/gguf.h"

#define DEFAULT_MAX_ARRAY  8
#define DEFAULT_MAX_STRING 200
/* "all" on the command line. */
#define NO_LIMIT INT64_MAX
/* Widest key column before values start on the same line anyway. */
#define KEY_COLUMN_MAX 40

static void help(const ql_opt_parser *p)
{
    printf("usage: qlab inspect FILE.gguf [--max-array N] [--max-string N]\n"
           "\n"
           "Validates a GGUF file (v2 or v3) and prints its header (version, file size,\n"
           "alignment, data offset), every metadata key with its type and value, every\n"
           "tensor with its ggml dimensions (ne[0], the row length, first), type, element\n"
           "count, bytes and offset (relative to the data section), then the totals and a\n"
           "check that header + tensor data + alignment padding add up to the file size.\n"
           "Tensor types qlab does not know are shown as \"type id N\". The first file of\n"
           "a split set (NAME-00001-of-0000N.gguf) shows the whole set, each file checked.\n"
           "\n");
    ql_opt_print_options(stdout, p);
    printf("\n"
           "Exit codes: 0 valid file, 1 malformed or unreadable file (the message names\n"
           "the file, the byte offset, the key or tensor, and expected vs actual), 2 usage.\n");
}

/* ========================================================================= */
/* Value printing                                                             */

typedef struct {
    FILE *out;
    int64_t max_array;
    int64_t max_string;
    int64_t budget; /* elements left to print for the current key (bounds nested output) */
} printer;

/* Length of a valid UTF-8 sequence at s (1..4), or 0 when the bytes are not one. */
static int utf8_len(const unsigned char *s, uint64_t left)
{
    unsigned c = s[0];
    int n;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if ((uint64_t)n > left)
        return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    /* Overlong forms, surrogates, beyond U+10FFFF, and C1 controls are escaped. */
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0x80 && cp <= 0x9f))
        return 0;
    return n;
}

/* A string in double quotes with C-style escapes; valid UTF-8 is kept as is. */
static void print_string(printer *p, const char *s, uint64_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    uint64_t shown = len < (uint64_t)p->max_string ? len : (uint64_t)p->max_string;
    fputc('"', p->out);
    uint64_t i = 0;
    while (i < shown) {
        unsigned c = u[i];
        int n = utf8_len(u + i, len - i);
        if (c == '"' || c == '\\') {
            fprintf(p->out, "\\%c", c);
        } else if (c == '\n') {
            fputs("\\n", p->out);
        } else if (c == '\t') {
            fputs("\\t", p->out);
        } else if (c == '\r') {
            fputs("\\r", p->out);
        } else if (c < 0x20 || c == 0x7f || n == 0) {
            fprintf(p->out, "\\x%02x", c);
        } else {
            fwrite(u + i, 1, (size_t)n, p->out);
            i += (uint64_t)n;
            continue;
        }
        i++;
    }
    fputc('"', p->out);
    if (shown < len)
        fprintf(p->out, "... (%llu bytes)", (unsigned long long)len);
}

static void print_scalar(printer *p, ql_gguf_vtype t, const void *v)
{
    switch (t) {
    case QL_GGUF_UINT8:
        fprintf(p->out, "%u", (unsigned)*(const uint8_t *)v);
        break;
    case QL_GGUF_INT8:
        fprintf(p->out, "%d", (int)*(const int8_t *)v);
        break;
    case QL_GGUF_UINT16:
        fprintf(p->out, "%u", (unsigned)*(const uint16_t *)v);
        break;
    case QL_GGUF_INT16:
        fprintf(p->out, "%d", (int)*(const int16_t *)v);
        break;
    case QL_GGUF_UINT32:
        fprintf(p->out, "%lu", (unsigned long)*(const uint32_t *)v);
        break;
    case QL_GGUF_INT32:
        fprintf(p->out, "%ld", (long)*(const int32_t *)v);
        break;
    case QL_GGUF_UINT64:
        fprintf(p->out, "%llu", (unsigned long long)*(const uint64_t *)v);
        break;
    case QL_GGUF_INT64:
        fprintf(p->out, "%lld", (long long)*(const int64_t *)v);
        break;
    /* %.9g and %.17g print the shortest forms that read back to the same float/double. */
    case QL_GGUF_FLOAT32:
        fprintf(p->out, "%.9g", (double)*(const float *)v);
        break;
    case QL_GGUF_FLOAT64:
        fprintf(p->out, "%.17g", *(const double *)v);
        break;
    case QL_GGUF_BOOL:
        fputs(*(const uint8_t *)v ? "true" : "false", p->out);
        break;
    default:
        fputs("?", p->out);
        break;
    }
}

/* "arr[f32,512]", "arr[arr,3]". */
static void print_type(FILE *out, const ql_gguf_value *v)
{
    if (v->type != QL_GGUF_ARRAY) {
        fputs(ql_gguf_vtype_name(v->type), out);
        return;
    }
    fprintf(out, "arr[%s,%llu]", ql_gguf_vtype_name(v->v.arr.elem_type),
            (unsigned long long)v->v.arr.n);
}

static void print_value(printer *p, const ql_gguf_value *v);

static void print_array(printer *p, const ql_gguf_array *a)
{
    fputc('[', p->out);
    uint64_t shown = 0;
    for (uint64_t i = 0; i < a->n; i++) {
        if ((int64_t)i >= p->max_array || p->budget <= 0)
            break;
        p->budget--;
        if (i)
            fputs(", ", p->out);
        if (a->elem_type == QL_GGUF_STRING) {
            const ql_gguf_str *s = &((const ql_gguf_str *)a->data)[i];
            print_string(p, s->ptr, s->len);
        } else if (a->elem_type == QL_GGUF_ARRAY) {
            print_value(p, &((const ql_gguf_value *)a->data)[i]);
        } else {
            size_t sz = ql_gguf_vtype_size(a->elem_type);
            print_scalar(p, a->elem_type, (const char *)a->data + i * sz);
        }
        shown++;
    }
    if (shown < a->n)
        fprintf(p->out, "%s... (%llu more)", shown ? ", " : "", (unsigned long long)(a->n - shown));
    fputc(']', p->out);
}

static void print_value(printer *p, const ql_gguf_value *v)
{
    switch (v->type) {
    case QL_GGUF_STRING:
        print_string(p, v->v.str.ptr, v->v.str.len);
        break;
    case QL_GGUF_ARRAY:
        print_array(p, &v->v.arr);
        break;
    case QL_GGUF_BOOL: {
        uint8_t b = v->v.b ? 1 : 0;
        print_scalar(p, v->type, &b);
        break;
    }
    default:
        print_scalar(p, v->type, &v->v);
        break;
    }
}

/* ========================================================================= */
/* Tensor table and totals                                                    */

static int cmp_u64_pair(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* "64 x 512" in ggml order (ne[0] first). */
static void format_dims(char *buf, size_t size, const ql_gguf_tensor *t)
{
    size_t o = 0;
    for (uint32_t d = 0; d < t->n_dims && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", d ? " x " : "", (long long)t->ne[d]);
}

static void check_layout(FILE *out, const ql_gguf *g, const char *label);

/* Prints the totals and the byte accounting of the data section (of each file). */
static void print_totals(FILE *out, const ql_gguf *g)
{
    int64_t params = 0, n_unknown = 0;
    uint64_t bytes = 0;
    /* Types in table order with their tensor counts; unknown ids are listed by id. */
    int32_t type_ids[64];
    int64_t type_counts[64];
    int n_types = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        params += ql_gguf_tensor_nelements(t);
        if (ql_gguf_type_known(t->type))
            bytes += t->nbytes;
        else
            n_unknown++;
        int k = 0;
        while (k < n_types && type_ids[k] != t->type)
            k++;
        if (k == n_types && n_types < 64) {
            type_ids[n_types] = t->type;
            type_counts[n_types++] = 0;
        }
        if (k < n_types)
            type_counts[k]++;
    }
    fprintf(out, "\ntotals: %lld tensors, %lld parameters, %llu tensor bytes (%.2f MiB)\n",
            (long long)g->n_tensors, (long long)params, (unsigned long long)bytes,
            (double)bytes / (1024.0 * 1024.0));
    if (n_unknown)
        fprintf(out, "        (%lld tensors of unknown type are not counted in the bytes)\n",
                (long long)n_unknown);
    fprintf(out, "tensor types:");
    for (int k = 0; k < n_types; k++) {
        const char *name = ql_gguf_type_known(type_ids[k]) ? ql_type_name(type_ids[k]) : NULL;
        if (name)
            fprintf(out, "%s %s x %lld", k ? "," : "", name, (long long)type_counts[k]);
        else
            fprintf(out, "%s type id %d x %lld", k ? "," : "", (int)type_ids[k],
                    (long long)type_counts[k]);
    }
    if (n_types == 1)
        fprintf(out, " (all %s)",
                ql_gguf_type_known(type_ids[0]) ? ql_type_name(type_ids[0])
                                                : "of one unknown type");
    fputc('\n', out);
    if (g->n_files == 1) {
        check_layout(out, g, "check");
        return;
    }
    for (int k = 0; k < g->n_files; k++) {
        char label[64];
        snprintf(label, sizeof label, "check, file %d of %d", k + 1, (int)g->n_files);
        check_layout(out, ql_gguf_file(g, k), label);
    }
}

/* The byte accounting of one file's data section, on a line that starts with label. */
static void check_layout(FILE *out, const ql_gguf *g, const char *label)
{
    int64_t n_unknown = 0;
    uint64_t bytes = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        if (ql_gguf_type_known(g->tensors[i].type))
            bytes += g->tensors[i].nbytes;
        else
            n_unknown++;
    }
    if (n_unknown) {
        fprintf(out, "%s: skipped: %lld tensors have a type of unknown size\n", label,
                (long long)n_unknown);
        return;
    }
    /* Walk the tensors in data order: every gap must be alignment padding (shorter
     * than the alignment), and the file must end at the last tensor, possibly padded. */
    uint64_t *order = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * 2 * sizeof *order);
    if (!order) {
        fprintf(out, "%s: skipped: out of memory\n", label);
        return;
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        order[2 * i] = g->tensors[i].offset;
        order[2 * i + 1] = g->tensors[i].nbytes;
    }
    qsort(order, (size_t)g->n_tensors, 2 * sizeof *order, cmp_u64_pair);
    uint64_t end = 0, padding = 0, unexplained = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        uint64_t gap = order[2 * i] - end;
        if (gap < g->alignment)
            padding += gap;
        else
            unexplained += gap;
        end = order[2 * i] + order[2 * i + 1];
    }
    free(order);
    uint64_t data_bytes = g->file_size >= g->data_offset ? g->file_size - g->data_offset : 0;
    uint64_t tail = data_bytes - end;
    if (tail < g->alignment)
        padding += tail;
    else
        unexplained += tail;
    if (g->n_tensors == 0 && g->data_offset > g->file_size) {
        /* No tensors: a writer may stop right after the tensor table, unpadded. */
        fprintf(out, "%s: header %llu bytes, no tensor data, file %llu bytes: OK\n", label,
                (unsigned long long)g->file_size, (unsigned long long)g->file_size);
        return;
    }
    uint64_t sum = g->data_offset + bytes + padding;
    fprintf(out, "%s: header %llu + tensor data %llu + alignment padding %llu = %llu", label,
            (unsigned long long)g->data_offset, (unsigned long long)bytes,
            (unsigned long long)padding, (unsigned long long)sum);
    if (unexplained == 0 && sum == g->file_size)
        fprintf(out, " = file size: OK\n");
    else
        fprintf(out, ", file size %llu: MISMATCH: %llu bytes belong to no tensor\n",
                (unsigned long long)g->file_size, (unsigned long long)unexplained);
}

/* True when a name from the file can be printed as is (printable ASCII, no quotes). */
static bool plain_name(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x21 || (unsigned char)*s >= 0x7f || *s == '"' || *s == '\\')
            return false;
    return true;
}

/* A key or tensor name padded to width, or quoted and escaped when it is not plain. */
static void print_name(printer *p, const char *name, int width)
{
    if (plain_name(name)) {
        fprintf(p->out, "%-*s", width, name);
        return;
    }
    printer np = *p;
    np.max_string = 4 * KEY_COLUMN_MAX;
    print_string(&np, name, strlen(name));
}

static void print_tensors(printer *p, const ql_gguf *g)
{
    FILE *out = p->out;
    int wname = 4, wdims = 15;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        int n = (int)strlen(g->tensors[i].name);
        if (n > wname)
            wname = n;
        char dims[128];
        format_dims(dims, sizeof dims, &g->tensors[i]);
        if ((int)strlen(dims) > wdims)
            wdims = (int)strlen(dims);
    }
    if (g->n_files > 1)
        fprintf(out, "\ntensors (%lld; offsets relative to the data offset of their file):\n",
                (long long)g->n_tensors);
    else
        fprintf(out, "\ntensors (%lld; offsets relative to the data offset %llu):\n",
                (long long)g->n_tensors, (unsigned long long)g->data_offset);
    fprintf(out, "  %5s  %-*s  %-8s  %-*s  %12s  %12s  %12s\n", "#", wname, "name", "type", wdims,
            "ne (ggml order)", "elements", "bytes", "offset");
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const ql_gguf_tensor *t = &g->tensors[i];
        char dims[128];
        format_dims(dims, sizeof dims, t);
        char type[32];
        char nbytes[32];
        if (ql_gguf_type_known(t->type)) {
            snprintf(type, sizeof type, "%s", ql_type_name(t->type));
            snprintf(nbytes, sizeof nbytes, "%llu", (unsigned long long)t->nbytes);
        } else {
            snprintf(type, sizeof type, "type id %d", (int)t->type);
            snprintf(nbytes, sizeof nbytes, "?");
        }
        fprintf(out, "  %5lld  ", (long long)i);
        print_name(p, t->name, wname);
        fprintf(out, "  %-8s  %-*s  %12lld  %12s  %12llu", type, wdims, dims,
                (long long)ql_gguf_tensor_nelements(t), nbytes, (unsigned long long)t->offset);
        if (g->n_files > 1)
            fprintf(out, "  file %d", (int)t->file + 1);
        fputc('\n', out);
    }
}

static void print_keys(printer *p, const ql_gguf *g)
{
    FILE *out = p->out;
    int wkey = 3;
    for (int64_t i = 0; i < g->n_kv; i++) {
        int n = (int)strlen(g->kv[i].key);
        if (n > wkey && n <= KEY_COLUMN_MAX)
            wkey = n;
    }
    fprintf(out, "\nmetadata (%lld keys):\n", (long long)g->n_kv);
    for (int64_t i = 0; i < g->n_kv; i++) {
        const ql_gguf_kv *kv = &g->kv[i];
        char type[48];
        FILE *tf = fmemopen(type, sizeof type, "w");
        if (tf) {
            print_type(tf, &kv->value);
            fclose(tf);
        } else {
            snprintf(type, sizeof type, "%s", ql_gguf_vtype_name(kv->value.type));
        }
        /* Keys come from the file: escaped like strings unless plain. */
        fputs("  ", out);
        print_name(p, kv->key, wkey);
        fprintf(out, "  %-14s ", type);
        /* Nested arrays multiply: N elements at each level could mean N^8 lines. */
        p->budget =
            p->max_array >= 1000000 ? INT64_MAX : (p->max_array + 1) * (p->max_array + 1) * 4;
        print_value(p, &kv->value);
        fputc('\n', out);
    }
}

/* ========================================================================= */

/* --max-array, --max-string: N >= 0 or "all". */
static ql_status parse_limit(void *ctx, const char *val, ql_error *err)
{
    if (strcmp(val, "all") == 0) {
        *(int64_t *)ctx = NO_LIMIT;
        return QL_OK;
    }
    if (ql_opt_parse_int(val, 0, INT64_MAX, ctx, err) != QL_OK)
        return ql_error_set(err, QL_EINVAL, "expected a number >= 0 or 'all', got '%s'", val);
    return QL_OK;
}

int ql_cmd_inspect(int argc, char **argv)
{
    const char *args[1];
    printer p = {stdout, DEFAULT_MAX_ARRAY, DEFAULT_MAX_STRING, 0};
    char array_help[160], string_help[160];
    snprintf(array_help, sizeof array_help,
             "show at most N elements of each array, at every nesting\n"
             "level (default %d; 'all' for no limit)",
             DEFAULT_MAX_ARRAY);
    snprintf(string_help, sizeof string_help,
             "cut strings after N bytes (default %d; 'all' for no limit)", DEFAULT_MAX_STRING);
    const ql_opt opts[] = {
        ql_opt_func("max-array", 0, parse_limit, &p.max_array, "N", array_help),
        ql_opt_func("max-string", 0, parse_limit, &p.max_string, "N", string_help),
    };
    static const char *const names[] = {"FILE.gguf"};
    ql_opt_parser op = {.prog = "qlab inspect",
                        .opts = opts,
                        .n_opts = QL_OPT_COUNT(opts),
                        .args = args,
                        .max_args = 1,
                        .arg_names = names,
                        .n_required = 1,
                        .help = help};
    const int rc = ql_opt_parse(&op, argc, argv);
    if (rc != QL_OPT_GO_ON)
        return rc;
    const char *path = args[0];

    ql_error err;
    ql_error_clear(&err);
    ql_gguf *g = NULL;
    if (ql_gguf_open(&g, path, &err) != QL_OK)
        return ql_cli_fail(&err);

    bool has_align = ql_gguf_find_kv(g, "general.alignment") != NULL;
    printf("%s: GGUF v%u, %lld keys, %lld tensors, %llu bytes\n", path, g->version,
           (long long)g->n_kv, (long long)g->n_tensors, (unsigned long long)g->file_size);
    printf("  version      %u\n", g->version);
    printf("  file size    %llu bytes (%.2f MiB)\n", (unsigned long long)g->file_size,
           (double)g->file_size / (1024.0 * 1024.0));
    printf("  alignment    %llu%s\n", (unsigned long long)g->alignment,
           has_align ? " (general.alignment)" : " (default; no general.alignment key)");
    printf("  data offset  %llu\n", (unsigned long long)g->data_offset);
    if (g->n_files > 1) {
        printf("  split set    %d files (split.count), read as one model; the keys are the "
               "first file's\n",
               (int)g->n_files);
        for (int k = 0; k < g->n_files; k++) {
            const ql_gguf *f = ql_gguf_file(g, k);
            printf("    file %d: %s: %lld tensors, %llu bytes, data offset %llu\n", k + 1, f->path,
                   (long long)f->n_tensors, (unsigned long long)f->file_size,
                   (unsigned long long)f->data_offset);
        }
    }
    print_keys(&p, g);
    print_tensors(&p, g);
    print_totals(stdout, g);
    ql_gguf_close(g);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        ql_error_set(&err, QL_EIO, "writing to standard output failed");
        return ql_cli_fail(&err);
    }
    return QL_EXIT_OK;
}
