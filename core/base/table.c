#include "base/table.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

struct ql_table {
    size_t ncol;
    ql_table_column *cols; /* names owned (strdup) */
    bool *hidden;
    char **cells;     /* nrow x ncol, row-major; NULL = missing */
    size_t nrow, cap; /* rows used, rows allocated */
    size_t next;      /* next column of the current row */
};

ql_table *ql_table_alloc(const ql_table_column *cols, size_t ncol)
{
    ql_table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->ncol = ncol;
    t->cols = calloc(ncol ? ncol : 1, sizeof *t->cols);
    t->hidden = calloc(ncol ? ncol : 1, sizeof *t->hidden);
    if (!t->cols || !t->hidden)
        goto fail;
    for (size_t c = 0; c < ncol; c++) {
        t->cols[c].md = ql_strdup(cols[c].md);
        t->cols[c].csv = ql_strdup(cols[c].csv ? cols[c].csv : cols[c].md);
        t->cols[c].right = cols[c].right;
        if (!t->cols[c].md || !t->cols[c].csv)
            goto fail;
    }
    t->next = ncol; /* no row started */
    return t;
fail:
    ql_table_free(t);
    return NULL;
}

void ql_table_free(ql_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nrow * t->ncol; i++)
        free(t->cells[i]);
    free(t->cells);
    if (t->cols)
        for (size_t c = 0; c < t->ncol; c++) {
            free((char *)t->cols[c].md);
            free((char *)t->cols[c].csv);
        }
    free(t->cols);
    free(t->hidden);
    free(t);
}

ql_status ql_table_row(ql_table *t, ql_error *err)
{
    /* Grown by whole rows (ql_grow checks cap * row size for overflow); the
     * new rows come zeroed, so every cell of a new row starts missing. */
    if (!ql_grow((void **)&t->cells, &t->cap, t->nrow + 1,
                 (t->ncol ? t->ncol : 1) * sizeof *t->cells))
        return ql_error_set(err, QL_ENOMEM, "table: out of memory at row %zu", t->nrow);
    t->nrow++;
    t->next = 0;
    return QL_OK;
}

ql_status ql_table_put(ql_table *t, const char *text, ql_error *err)
{
    QL_ASSERT(t->nrow > 0 && t->next < t->ncol);
    char *copy = NULL;
    if (text && !(copy = ql_strdup(text)))
        return ql_error_set(err, QL_ENOMEM, "table: out of memory");
    t->cells[(t->nrow - 1) * t->ncol + t->next++] = copy;
    return QL_OK;
}

ql_status ql_table_putf(ql_table *t, ql_error *err, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return ql_table_put(t, buf, err);
}

/* Whether fmt has exactly one conversion and it takes a double: flags, width and
 * precision digits, then one of a e f g (either case); "%%" is text. */
static bool one_double_conversion(const char *fmt)
{
    int n = 0;
    for (const char *p = fmt; *p; p++) {
        if (*p != '%')
            continue;
        if (*++p == '%')
            continue;
        p += strspn(p, "-+ #0");
        p += strspn(p, "0123456789");
        if (*p == '.')
            p += 1 + strspn(p + 1, "0123456789");
        if (!*p || !strchr("aAeEfFgG", *p))
            return false;
        n++;
    }
    return n == 1;
}

ql_status ql_table_put_num(ql_table *t, double v, const char *fmt, ql_error *err)
{
    QL_ASSERT(one_double_conversion(fmt));
    if (isnan(v))
        return ql_table_put(t, NULL, err);
    char buf[512];
    /* fmt is checked above: one conversion of a double. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(buf, sizeof buf, fmt, v);
#pragma GCC diagnostic pop
    return ql_table_put(t, buf, err);
}

size_t ql_table_rows(const ql_table *t)
{
    return t->nrow;
}

const char *ql_table_cell(const ql_table *t, size_t row, size_t col)
{
    QL_ASSERT(row < t->nrow && col < t->ncol);
    return t->cells[row * t->ncol + col];
}

bool ql_table_col_empty(const ql_table *t, size_t col)
{
    for (size_t r = 0; r < t->nrow; r++)
        if (t->cells[r * t->ncol + col])
            return false;
    return true;
}

void ql_table_hide(ql_table *t, size_t col, bool hidden)
{
    QL_ASSERT(col < t->ncol);
    t->hidden[col] = hidden;
}

void ql_table_align_right(ql_table *t, size_t col, bool right)
{
    QL_ASSERT(col < t->ncol);
    t->cols[col].right = right;
}

/* ================================================================ Markdown */

/* Width in UTF-8 code points, with '|' counted twice (it is escaped). */
static size_t md_width(const char *s)
{
    size_t w = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        w += ((*p & 0xc0) != 0x80) + (*p == '|');
    return w;
}

static void md_put(FILE *out, const char *s, size_t width, bool right)
{
    size_t w = md_width(s), pad = width > w ? width - w : 0;
    if (right)
        fprintf(out, "%*s", (int)pad, "");
    for (const char *p = s; *p; p++) {
        if (*p == '|')
            fputs("\\|", out);
        else if (*p == '\n' || *p == '\r')
            fputc(' ', out);
        else
            fputc(*p, out);
    }
    if (!right)
        fprintf(out, "%*s", (int)pad, "");
}

void ql_table_write_md(const ql_table *t, FILE *out, const char *null_text)
{
    size_t *width = calloc(t->ncol ? t->ncol : 1, sizeof *width);
    if (!width) {
        /* Mark the stream failed so the caller's ferror() check reports it. */
        fputs("(out of memory)\n", out);
        return;
    }
    for (size_t c = 0; c < t->ncol; c++) {
        width[c] = md_width(t->cols[c].md);
        if (width[c] < 3)
            width[c] = 3;
        for (size_t r = 0; r < t->nrow; r++) {
            const char *s = t->cells[r * t->ncol + c];
            size_t w = md_width(s ? s : null_text);
            if (w > width[c])
                width[c] = w;
        }
    }
    /* Header, rule, rows. */
    for (size_t c = 0; c < t->ncol; c++)
        if (!t->hidden[c]) {
            fputs("| ", out);
            md_put(out, t->cols[c].md, width[c], t->cols[c].right);
            fputc(' ', out);
        }
    fputs("|\n", out);
    for (size_t c = 0; c < t->ncol; c++)
        if (!t->hidden[c]) {
            fputc('|', out);
            for (size_t k = 0; k < width[c] + 1; k++)
                fputc('-', out);
            fputc(t->cols[c].right ? ':' : '-', out);
        }
    fputs("|\n", out);
    for (size_t r = 0; r < t->nrow; r++) {
        for (size_t c = 0; c < t->ncol; c++)
            if (!t->hidden[c]) {
                const char *s = t->cells[r * t->ncol + c];
                fputs("| ", out);
                md_put(out, s ? s : null_text, width[c], t->cols[c].right);
                fputc(' ', out);
            }
        fputs("|\n", out);
    }
    free(width);
}

/* ================================================================ CSV */

void ql_csv_write_field(FILE *out, const char *s)
{
    bool quote = s[0] == ' ' || (s[0] && s[strlen(s) - 1] == ' ');
    for (const char *p = s; *p && !quote; p++)
        quote = *p == ',' || *p == '"' || *p == '\n' || *p == '\r';
    if (!quote) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (const char *p = s; *p; p++) {
        if (*p == '"')
            fputc('"', out);
        fputc(*p, out);
    }
    fputc('"', out);
}

void ql_table_write_csv(const ql_table *t, FILE *out)
{
    for (size_t c = 0; c < t->ncol; c++) {
        if (c)
            fputc(',', out);
        ql_csv_write_field(out, t->cols[c].csv);
    }
    fputc('\n', out);
    for (size_t r = 0; r < t->nrow; r++) {
        for (size_t c = 0; c < t->ncol; c++) {
            const char *s = t->cells[r * t->ncol + c];
            if (c)
                fputc(',', out);
            if (s)
                ql_csv_write_field(out, s);
        }
        fputc('\n', out);
    }
}

/* ================================================================ numbers */

char *ql_fmt_bytes(double bytes, char *buf, size_t size)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    if (isnan(bytes)) {
        snprintf(buf, size, "?");
        return buf;
    }
    int u = 0;
    double v = bytes;
    while (fabs(v) >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%.0f B", bytes);
    else
        snprintf(buf, size, "%.2f %s", v, unit[u]);
    return buf;
}

char *ql_fmt_count(int64_t v, char *buf, size_t size)
{
    char digits[32];
    unsigned long long mag = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    snprintf(digits, sizeof digits, "%llu", mag);
    size_t n = strlen(digits), o = 0;
    char tmp[48];
    if (v < 0)
        tmp[o++] = '-';
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            tmp[o++] = ',';
        tmp[o++] = digits[i];
    }
    tmp[o] = '\0';
    ql_strlcpy(buf, tmp, size);
    return buf;
}

const char *ql_fmt_exact(double v, char *buf, size_t size)
{
    if (isnan(v))
        return NULL;
    ql_format_double(v, buf, size);
    return buf;
}
