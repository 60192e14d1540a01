/* The report's plots (report_plot.h), one writer each in plot_writers at the end of
 * this file: mean KLD and PPL against bits per weight, the KLD distribution of every
 * config, the per-tensor error of one config, the divergence by block, a mixture of
 * experts' routing agreement by block, and the sensitivity heatmaps (block x tensor
 * kind, and block x expert).
 *
 * Against bits per weight, the configs of a group are told apart by the axes that
 * vary besides the weight type: the first such axis gives the colour, the second the
 * marker, and any further ones split the plot into small multiples (one panel per
 * combination of their values). Points carry error bars (± the standard error of
 * the mean), the series sit side by side around their bits per weight (configs of the
 * same size do not hide each other), the axes span the data, the Pareto front of the
 * group is dashed, and each weight type is labelled next to its point where a label
 * fits without covering another label or point; where none fits, the point gets a
 * number and the plot a key of the numbers. Labels are placed before gnuplot runs
 * (plot.h's ql_plot_label_points, panel by panel): the plot area sits at fixed screen
 * coordinates, so a data point's place on the canvas is known.
 *
 * Another plot is one more writer in that table. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "base/util.h"
#include "results/analysis.h"
#include "results/plot.h"
#include "results/report_plot.h"
#include "results/types_table.h"

typedef ql_report_row row;
typedef ql_report_group group;

/* The canvas of every plot: as the terminals of plot.h, taller for small multiples. */
#define CANVAS_W    960
#define CANVAS_H    600
#define PANEL_ROW_H 330 /* height added per further row of panels */
#define MAX_PANELS  12
#define MAX_SERIES  64
/* The markers of series s of S sit (s - (S-1)/2) times this share of the x range off
 * their bpw, so that configs of the same size stay visible side by side. */
#define DODGE 0.009
/* Per-tensor plot: a log y axis only when the errors span more than this factor. */
#define LOG_SPAN_MIN 20.0

/* Line colours and point types of the series, in order. */
static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                      "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
static const int markers[] = {7, 5, 9, 11, 13, 15, 6, 4};
#define N_COLOURS (sizeof colours / sizeof colours[0])
#define N_MARKERS (sizeof markers / sizeof markers[0])

/* ================================================================ shared helpers */

/* Renders one plot unless plots are off or gnuplot is not there; returns whether it
 * was drawn. A plot gnuplot fails on is named in the summary with gnuplot's message
 * and the script's path, and the next plot is tried all the same: one plot's script
 * costs no other plot. Its old images go first, so that none outlives a failure. */
static bool render(ql_report_writer *c, const char *script, const char *base)
{
    if (!c->opt->plots || c->no_gnuplot)
        return false;
    char path[4400];
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/%s.%s", c->dir, base, k ? "svg" : "png");
        (void)remove(path);
    }
    ql_error perr;
    ql_error_clear(&perr);
    ql_status st = ql_plot_draw(c->dir, script, base, c->opt->log, &perr);
    if (st == QL_ENOTFOUND) {
        c->no_gnuplot = true;
        c->sum->plots_skipped = true;
        ql_strlcpy(c->sum->why, perr.msg, sizeof c->sum->why);
        return false;
    }
    if (st != QL_OK) {
        snprintf(path, sizeof path, "%s/%s", c->dir, script);
        ql_report_add_problem(c, base, path, perr.msg);
        return false;
    }
    c->sum->plots++;
    c->sum->files += 2;
    return true;
}

/* Records a plot of the group (for report.md's links and report.html). */
static void add_plot(group *g, const char *base, const char *title, bool drawn)
{
    if (g->nplots >= sizeof g->plots / sizeof g->plots[0])
        return;
    ql_strlcpy(g->plots[g->nplots], base, sizeof g->plots[0]);
    ql_strlcpy(g->plot_titles[g->nplots], title, sizeof g->plot_titles[0]);
    g->plot_drawn[g->nplots] = drawn;
    g->nplots++;
}

/* A number in a gnuplot data file: round-trip exact, NaN for missing; all but the
 * first column of a line get a separating space. */
static void dat_col(FILE *f, double v, bool first)
{
    if (!first)
        fputc(' ', f);
    if (isnan(v))
        fputs("NaN", f);
    else
        fprintf(f, "%.17g", v);
}

static void dat_num(FILE *f, double v)
{
    dat_col(f, v, false);
}

/* A string column of a data file (gnuplot reads "..." as one column). */
static void dat_str(FILE *f, const char *s)
{
    fputs(" \"", f);
    for (; *s; s++)
        fputc(*s == '"' || *s == '\n' ? '\'' : *s, f);
    fputc('"', f);
}

static void dat_header(ql_report_writer *c, const group *g, FILE *f, const char *what)
{
    fprintf(f, "# qlab report: %s\n# sweep %s: %s on %s, ctx %d, %d chunks\n", what, c->sweep,
            g->model, g->dataset, g->ctx, g->chunks);
}

static void plot_title(ql_report_writer *c, const group *g, char *buf, size_t size)
{
    snprintf(buf, size, "%s: %s on %s, ctx %d, %d chunks", c->sweep, g->model, g->dataset, g->ctx,
             g->chunks);
}

/* Both terminals, one after the other: a plot made of panels cannot be replotted, so
 * the script draws it once per terminal (body: the drawing commands). */
static void both_terminals(FILE *f, const char *base, int height, const char *body)
{
    for (int svg = 0; svg < 2; svg++) {
        fprintf(f, "set terminal %s size %d,%d font 'sans,11' noenhanced%s\nset output '%s.%s'\n",
                svg ? "svg" : "pngcairo", CANVAS_W, height, svg ? " background rgb 'white'" : "",
                base, svg ? "svg" : "png");
        fputs(body, f);
    }
    fputs("unset output\n", f);
}

/* Synthetic models have random weights: their perplexity means nothing. */
static bool ppl_meaningful(const group *g)
{
    return strncmp(g->model, "synth:", 6) != 0;
}

/* ================================================================ series and panels */

/* How a group's compared configs are drawn: the axes that vary besides the weight
 * type, their values in name order, and for
 * every row its colour, marker and panel. */
typedef struct {
    int axes[QL_AXIS_COUNT];
    size_t n_axes;
    const char *values[QL_AXIS_COUNT][MAX_SERIES];
    size_t n_values[QL_AXIS_COUNT];
    size_t n_panels;
    char panel_title[MAX_PANELS][256];
    size_t *colour, *marker, *panel, *series; /* per row; series: index into the list */
    size_t n_series;
    size_t series_row[MAX_SERIES]; /* a row of each series (its label) */
} layout;

static void layout_free(layout *l)
{
    free(l->colour);
    free(l->marker);
    free(l->panel);
    free(l->series);
}

static size_t value_index(const layout *l, size_t k, const char *v)
{
    for (size_t i = 0; i < l->n_values[k]; i++)
        if (strcmp(l->values[k][i], v) == 0)
            return i;
    return 0;
}

/* An axis value as the plots tell configs apart: as the table shows it (a file
 * config's imatrix is "unknown", so its configs are a series of their own). Never the
 * weight type, whose label would need a buffer. */
static const char *layout_value(const group *g, const row *r, int a)
{
    char unused[8];
    QL_ASSERT(a != QL_AXIS_WEIGHT_TYPE);
    return ql_report_axis_cell(g, r->axis, a, unused, sizeof unused);
}

static ql_status make_layout(const group *g, layout *l, ql_error *err)
{
    memset(l, 0, sizeof *l);
    size_t n = g->nrows ? g->nrows : 1;
    l->colour = calloc(n, sizeof *l->colour);
    l->marker = calloc(n, sizeof *l->marker);
    l->panel = calloc(n, sizeof *l->panel);
    l->series = calloc(n, sizeof *l->series);
    if (!l->colour || !l->marker || !l->panel || !l->series) {
        layout_free(l);
        return ql_report_oom(err);
    }
    for (int a = 1; a < QL_AXIS_COUNT; a++)
        if (g->varies[a])
            l->axes[l->n_axes++] = a;
    for (size_t k = 0; k < l->n_axes; k++)
        for (size_t i = 0; i < g->nrows; i++)
            if (ql_report_row_compared(&g->rows[i]))
                ql_strset_add(l->values[k], &l->n_values[k], MAX_SERIES,
                              layout_value(g, &g->rows[i], l->axes[k]));
    /* Panels: the combinations of the third and further axes that occur. */
    for (size_t i = 0; i < g->nrows; i++) {
        const row *r = &g->rows[i];
        char title[256] = "";
        size_t o = 0;
        for (size_t k = 2; k < l->n_axes && o < sizeof title; k++)
            o += (size_t)snprintf(title + o, sizeof title - o, "%s%s=%s", k > 2 ? " " : "",
                                  ql_axis_get((ql_axis)l->axes[k])->label,
                                  layout_value(g, r, l->axes[k]));
        size_t p = 0;
        while (p < l->n_panels && strcmp(l->panel_title[p], title) != 0)
            p++;
        if (p == l->n_panels && l->n_panels < MAX_PANELS)
            ql_strlcpy(l->panel_title[l->n_panels++], title, sizeof l->panel_title[0]);
        l->panel[i] = p < MAX_PANELS ? p : MAX_PANELS - 1;
        l->colour[i] = l->n_axes > 0 ? value_index(l, 0, layout_value(g, r, l->axes[0])) : 0;
        l->marker[i] =
            l->n_axes > 1 ? value_index(l, 1, layout_value(g, r, l->axes[1])) : l->colour[i];
        /* The series: colour and marker. */
        size_t s = 0;
        while (s < l->n_series && !(l->colour[l->series_row[s]] == l->colour[i] &&
                                    l->marker[l->series_row[s]] == l->marker[i]))
            s++;
        if (s == l->n_series && l->n_series < MAX_SERIES)
            l->series_row[l->n_series++] = i;
        l->series[i] = s < MAX_SERIES ? s : MAX_SERIES - 1;
    }
    if (l->n_panels == 0)
        l->n_panels = 1;
    return QL_OK;
}

/* The series' key text: the first two axes' values ("act=native imatrix=none"). */
static void series_title(const group *g, const layout *l, size_t s, char *buf, size_t size)
{
    const row *r = &g->rows[l->series_row[s]];
    size_t o = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < l->n_axes && k < 2 && o < size; k++)
        o += (size_t)snprintf(buf + o, size - o, "%s%s %s", k ? ", " : "",
                              ql_axis_get((ql_axis)l->axes[k])->label,
                              layout_value(g, r, l->axes[k]));
    if (!buf[0])
        snprintf(buf, size, "configs");
}

/* The height of a canvas of small multiples (the sensitivity heatmap). */
static int canvas_height(size_t n_panels)
{
    size_t cols = n_panels <= 1 ? 1 : 2, rows = (n_panels + cols - 1) / cols;
    return CANVAS_H + (int)(rows > 1 ? (rows - 1) * PANEL_ROW_H : 0);
}

/* ================================================================ against bits per weight */

typedef struct {
    const char *name;  /* file stem: kld_bpw, ppl_bpw */
    const char *title; /* for report.md's links */
    ql_metric_id value, error;
    bool log_y;
    const char *ylabel, *short_ylabel; /* the short one on low panels */
} bpw_plot;

static const bpw_plot bpw_plots[] = {
    {"kld_bpw", "mean KLD against bpw", QL_METRIC_kld_mean, QL_METRIC_kld_mean_err, true,
     "mean KL divergence to the reference (nats)", "mean KLD (nats)"},
    {"ppl_bpw", "PPL against bpw", QL_METRIC_ppl, QL_METRIC_ppl_err, false, "perplexity",
     "perplexity"},
};

/* The numeric columns of formats.dat, in order; label and config hash follow. */
static const ql_metric_id dat_cols[] = {
    QL_METRIC_bpw, QL_METRIC_kld_mean, QL_METRIC_kld_mean_err, QL_METRIC_kld_p99,
    QL_METRIC_ppl, QL_METRIC_ppl_err,  QL_METRIC_top1_agree};

/* The gnuplot column number (1-based) of a value in formats.dat. */
static int dat_column(ql_metric_id value)
{
    for (size_t k = 0; k < sizeof dat_cols / sizeof dat_cols[0]; k++)
        if (dat_cols[k] == value)
            return (int)k + 1;
    QL_ASSERT(!"value not in formats.dat");
    return 0;
}

/* formats.dat: one block per (panel, series), index p * n_series + s. */
static ql_status write_formats_dat(ql_report_writer *c, const group *g, const layout *l,
                                   ql_error *err)
{
    ql_doc d;
    ql_status rc = ql_doc_open(&d, err);
    if (rc)
        return rc;
    dat_header(c, g, d.f,
               "one line per compared config, one block per panel and series (index = "
               "panel * series + series)");
    fputs("# columns:", d.f);
    for (size_t k = 0; k < sizeof dat_cols / sizeof dat_cols[0]; k++)
        fprintf(d.f, " %s", ql_metric_get(dat_cols[k])->name);
    fputs(" label config_hash\n", d.f);
    char label[512], title[256];
    for (size_t p = 0; p < l->n_panels; p++)
        for (size_t s = 0; s < l->n_series; s++) {
            series_title(g, l, s, title, sizeof title);
            fprintf(d.f, "%s# index %zu: %s%s%s\n", p || s ? "\n\n" : "", p * l->n_series + s,
                    title, *l->panel_title[p] ? " · " : "", l->panel_title[p]);
            for (size_t i = 0; i < g->nrows; i++) {
                const row *r = &g->rows[i];
                if (!ql_report_row_compared(r) || l->panel[i] != p || l->series[i] != s)
                    continue;
                ql_report_config_label(g, r->axis, -1, label, sizeof label);
                for (size_t k = 0; k < sizeof dat_cols / sizeof dat_cols[0]; k++)
                    dat_col(d.f, r->v[dat_cols[k]], k == 0);
                dat_str(d.f, label);
                fprintf(d.f, " %s\n", r->hash);
            }
            /* gnuplot needs at least one record in a block to count it. */
            fputs("NaN NaN NaN NaN NaN NaN NaN \"\" -\n", d.f);
        }
    char name[1100];
    snprintf(name, sizeof name, "formats%s.dat", g->suffix);
    return ql_report_doc_save(c, &d, name, err);
}

/* Whether a value can be drawn on the plot's y axis. */
static bool drawable(const bpw_plot *bp, double x, double y)
{
    return !isnan(x) && !isnan(y) && (!bp->log_y || y > 0.0);
}

/* The axis ranges: the data with its error bars, and a margin. */
static void data_ranges(const group *g, const bpw_plot *bp, ql_plot_frame *m)
{
    double xlo = (double)INFINITY, xhi = -(double)INFINITY, ylo = (double)INFINITY,
           yhi = -(double)INFINITY;
    for (size_t i = 0; i < g->nrows; i++) {
        const row *r = &g->rows[i];
        double x = r->v[QL_METRIC_bpw], y = r->v[bp->value], e = r->v[bp->error];
        if (!ql_report_row_compared(r) || !drawable(bp, x, y))
            continue;
        if (isnan(e))
            e = 0.0;
        xlo = fmin(xlo, x);
        xhi = fmax(xhi, x);
        double lo = y - e, hi = y + e;
        if (bp->log_y && !(lo > 0.0))
            lo = y;
        ylo = fmin(ylo, lo);
        yhi = fmax(yhi, hi);
    }
    if (bp->value == QL_METRIC_ppl)
        for (size_t i = 0; i < g->nrows; i++) {
            double ref = g->rows[i].v[QL_METRIC_ppl_ref];
            if (!isnan(ref)) {
                ylo = fmin(ylo, ref);
                yhi = fmax(yhi, ref);
            }
        }
    double xpad = xhi > xlo ? 0.06 * (xhi - xlo) : 0.5;
    m->xlo = xlo - xpad;
    m->xhi = xhi + xpad;
    if (bp->log_y) {
        double span = yhi > ylo ? log(yhi / ylo) : log(10.0);
        m->ylo = ylo * exp(-0.12 * span);
        m->yhi = yhi * exp(0.16 * span);
    } else {
        double pad = yhi > ylo ? 0.12 * (yhi - ylo) : fmax(0.05 * fabs(yhi), 0.5);
        m->ylo = ylo - pad;
        m->yhi = yhi + pad;
    }
    m->log_y = bp->log_y;
}

/* A gnuplot single-quoted string into the body. */
static void body_quote(ql_strbuf *b, const char *s)
{
    ql_strbuf_add(b, "'");
    for (; *s; s++)
        ql_strbuf_add(b, *s == '\'' ? "''" : "%c", *s);
    ql_strbuf_add(b, "'");
}

/* The gnuplot script of a plot: header (comment lines and settings, ending in a
 * newline), then body b once per terminal; saved as BASE.gp, drawn and recorded as
 * the group's plot `title`. Frees b's text in every case. */
static ql_status write_plot_script(ql_report_writer *c, group *g, ql_strbuf *b, const char *base,
                                   int height, const char *header, const char *title, ql_error *err)
{
    ql_doc d;
    ql_status rc = b->failed ? ql_report_oom(err) : ql_doc_open(&d, err);
    if (rc) {
        ql_strbuf_free(b);
        return rc;
    }
    fputs(header, d.f);
    both_terminals(d.f, base, height, ql_strbuf_cstr(b));
    ql_strbuf_free(b);
    char name[1200];
    snprintf(name, sizeof name, "%s.gp", base);
    if ((rc = ql_report_doc_save(c, &d, name, err)))
        return rc;
    add_plot(g, base, title, render(c, name, base));
    return QL_OK;
}

/* Ticks of a log axis over [lo, hi]: gnuplot's own are decades only, so a narrower
 * range gets none; these take 1, 2, 5 times a power of ten, or every digit when
 * that gives fewer than three. Writes "set ytics (...)" or nothing when the decades
 * do (more than two). */
static void log_ticks(ql_strbuf *f, double lo, double hi, const char *axis)
{
    if (!(lo > 0.0) || !(hi > lo))
        return;
    int decades = (int)floor(log10(hi)) - (int)ceil(log10(lo)) + 1;
    if (decades > 2)
        return;
    static const double coarse[] = {1, 2, 5}, fine[] = {1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9};
    for (int pass = 0; pass < 2; pass++) {
        const double *m = pass ? fine : coarse;
        size_t nm = pass ? sizeof fine / sizeof fine[0] : sizeof coarse / sizeof coarse[0];
        int count = 0;
        for (int e = (int)floor(log10(lo)); e <= (int)ceil(log10(hi)); e++)
            for (size_t k = 0; k < nm; k++) {
                double v = m[k] * pow(10.0, e);
                count += v >= lo && v <= hi;
            }
        if (count < 3 && !pass)
            continue;
        ql_strbuf_add(f, "set %stics (", axis);
        const char *sep = "";
        for (int e = (int)floor(log10(lo)); e <= (int)ceil(log10(hi)); e++)
            for (size_t k = 0; k < nm; k++) {
                double v = m[k] * pow(10.0, e);
                if (v >= lo && v <= hi) {
                    ql_strbuf_add(f, "%s'%.3g' %.17g", sep, v, v);
                    sep = ", ";
                }
            }
        ql_strbuf_add(f, ")\n");
        return;
    }
}

/* ================================================================ layout
 *
 * The plots against bits per weight and the KLD distribution are laid out here, in
 * pixels from the top left of the canvas (y down; gnuplot's screen coordinates are
 * fractions from the bottom left): the title at the top, wrapped to the canvas's
 * width; the panels at the full width; below them the legend, in as many columns as
 * its longest entry leaves room for; at the bottom the key of the numbered labels.
 * The script draws the title, the legend and the labels itself at screen coordinates
 * (labels, and short lines for the legend's samples), not through gnuplot's title
 * and key, so their room is known before the canvas's height is, and the panels keep
 * the width however long the entries. */

/* Text metrics in pixels (sans at the terminals' 96 dpi; measured on pngcairo and
 * rounded up, digits and capitals being the widest). */
#define TITLE_CHAR_W  7.8 /* font ',11' */
#define TITLE_LINE_H  17.0
#define LEGEND_CHAR_W 6.8 /* font ',10' */
#define LEGEND_ROW_H  18.0
#define LEGEND_SAMPLE 34.0 /* the sample line or marker and the gap before the text */
#define LEGEND_GAP    18.0 /* between legend columns */
#define NOTE_CHAR_W   6.4  /* font ',9' */
#define NOTE_LINE_H   14.0
#define LABEL_CHAR_W  6.6 /* font ',8' */
#define LABEL_H       12.0
/* Margins of a panel's plot area in its cell: tick labels and the axis label on the
 * left and below, a line per row of the panel's title above. */
#define PANEL_LEFT    84.0
#define PANEL_RIGHT   18.0
#define PANEL_BOTTOM  58.0
#define PANEL_TOP     12.0
#define PANEL_TITLE_H 16.0
/* Cell heights: one panel, or each row of several. */
#define CELL_H_ONE  470.0
#define CELL_H_MANY 330.0
/* A plot area lower than this gets the short y label. */
#define SHORT_YLABEL_H 300.0
#define LINE_MAX_CHARS 400

/* Number of characters of UTF-8 text (continuation bytes do not count). */
static size_t text_chars(const char *s, size_t bytes)
{
    size_t n = 0;
    for (size_t i = 0; i < bytes && s[i]; i++)
        n += ((unsigned char)s[i] & 0xc0) != 0x80;
    return n;
}

/* Splits text into lines of at most max_chars characters, at spaces where it can (a
 * longer word is cut at a character boundary); returns how many lines, at most
 * max_lines (the last one cut with "…" when the text goes on). */
static size_t wrap_text(const char *text, size_t max_chars, char lines[][LINE_MAX_CHARS],
                        size_t max_lines)
{
    size_t n = 0;
    if (max_chars < 8)
        max_chars = 8;
    const char *p = text;
    while (*p == ' ')
        p++;
    while (*p && n < max_lines) {
        /* The longest prefix of at most max_chars characters, ending at a space when
         * the text goes on after it. */
        size_t len = strlen(p), end = 0, chars = 0, cut = 0;
        while (end < len && chars < max_chars) {
            end++;
            while (end < len && ((unsigned char)p[end] & 0xc0) == 0x80)
                end++;
            chars++;
        }
        if (end < len) {
            for (size_t k = end; k > 0; k--)
                if (p[k] == ' ') {
                    cut = k;
                    break;
                }
            if (cut == 0)
                cut = end;
        } else {
            cut = end;
        }
        const bool last = n + 1 == max_lines && cut < len;
        if (cut >= LINE_MAX_CHARS - 4)
            cut = LINE_MAX_CHARS - 4;
        while (cut > 0 && ((unsigned char)p[cut] & 0xc0) == 0x80)
            cut--;
        snprintf(lines[n], LINE_MAX_CHARS, "%.*s%s", (int)cut, p, last ? "…" : "");
        n++;
        p += cut;
        while (*p == ' ')
            p++;
    }
    return n;
}

/* A legend entry: a marker, a line or both, and its text. */
typedef struct {
    char text[256];
    const char *colour;
    int pt;    /* marker; 0: none */
    int dt;    /* dash type of the line; 0: no line */
    double lw; /* line width */
} legend_entry;

/* Where the pieces of a plot go (pixels, y down). */
typedef struct {
    int height; /* the canvas's */
    char title[4][LINE_MAX_CHARS];
    size_t n_title;
    size_t n_panels, cols, rows;
    double panels_top, cell_w, cell_h;
    size_t panel_title_lines;
    /* The legend: its entries in rows of `legend_cols`. */
    const legend_entry *legend;
    size_t n_legend, legend_cols, legend_rows;
    double legend_top, legend_col_w;
    /* The key of the numbered labels: its lines. */
    char (*notes)[LINE_MAX_CHARS];
    size_t n_notes;
    double notes_top;
} canvas;

static double screen_x(double x)
{
    return x / CANVAS_W;
}

static double screen_y(const canvas *cv, double y)
{
    return 1.0 - y / cv->height;
}

/* Lays out the title, panels and legend; notes (NULL: none) follow at the bottom.
 * panel_title_lines: lines of the longest panel title (0 without panel titles). */
static void canvas_layout(canvas *cv, const char *title, size_t n_panels, size_t panel_title_lines,
                          const legend_entry *legend, size_t n_legend,
                          char (*notes)[LINE_MAX_CHARS], size_t n_notes)
{
    cv->n_title = wrap_text(title, (size_t)((CANVAS_W - 24.0) / TITLE_CHAR_W), cv->title, 4);
    double y = 8.0 + TITLE_LINE_H * (double)cv->n_title + 4.0;
    cv->n_panels = n_panels ? n_panels : 1;
    cv->cols = cv->n_panels == 1 ? 1 : 2;
    cv->rows = (cv->n_panels + cv->cols - 1) / cv->cols;
    cv->cell_w = CANVAS_W / (double)cv->cols;
    cv->cell_h = cv->n_panels == 1 ? CELL_H_ONE : CELL_H_MANY;
    cv->panel_title_lines = panel_title_lines;
    cv->panels_top = y;
    y += cv->cell_h * (double)cv->rows;
    /* The legend: columns as wide as its longest entry. */
    size_t longest = 1;
    for (size_t i = 0; i < n_legend; i++) {
        size_t k = text_chars(legend[i].text, strlen(legend[i].text));
        longest = k > longest ? k : longest;
    }
    cv->legend = legend;
    cv->n_legend = n_legend;
    cv->legend_col_w = LEGEND_SAMPLE + LEGEND_CHAR_W * (double)longest + LEGEND_GAP;
    const double room = CANVAS_W - 2.0 * 20.0;
    cv->legend_cols = (size_t)(room / cv->legend_col_w);
    if (cv->legend_cols < 1)
        cv->legend_cols = 1;
    if (cv->legend_cols > n_legend)
        cv->legend_cols = n_legend ? n_legend : 1;
    cv->legend_rows = n_legend ? (n_legend + cv->legend_cols - 1) / cv->legend_cols : 0;
    cv->legend_top = y + 2.0;
    y += cv->legend_rows ? LEGEND_ROW_H * (double)cv->legend_rows + 6.0 : 0.0;
    cv->notes = notes;
    cv->n_notes = n_notes;
    cv->notes_top = y + 2.0;
    y += n_notes ? NOTE_LINE_H * (double)n_notes + 6.0 : 0.0;
    cv->height = (int)ceil(y + 6.0);
}

/* The plot area of panel p (pixels, y down): left, right, top, bottom. */
static void canvas_panel(const canvas *cv, size_t p, double *x0, double *x1, double *y0, double *y1)
{
    const size_t col = p % cv->cols, rw = p / cv->cols;
    *x0 = (double)col * cv->cell_w + PANEL_LEFT;
    *x1 = (double)(col + 1) * cv->cell_w - PANEL_RIGHT;
    *y0 = cv->panels_top + (double)rw * cv->cell_h + PANEL_TOP +
          PANEL_TITLE_H * (double)cv->panel_title_lines;
    *y1 = cv->panels_top + (double)(rw + 1) * cv->cell_h - PANEL_BOTTOM;
}

/* The lines that put panel p's plot area in place. */
static void canvas_margins(ql_strbuf *b, const canvas *cv, size_t p)
{
    double x0, x1, y0, y1;
    canvas_panel(cv, p, &x0, &x1, &y0, &y1);
    ql_strbuf_add(b,
                  "set lmargin at screen %.5f\nset rmargin at screen %.5f\n"
                  "set tmargin at screen %.5f\nset bmargin at screen %.5f\n",
                  screen_x(x0), screen_x(x1), screen_y(cv, y0), screen_y(cv, y1));
}

/* A label at pixel (x, y) in the script: text, alignment, font and colour. */
static void canvas_label(ql_strbuf *b, const canvas *cv, double x, double y, const char *text,
                         const char *align, const char *font)
{
    ql_strbuf_add(b, "set label ");
    body_quote(b, text);
    ql_strbuf_add(b, " at screen %.5f, screen %.5f %s font '%s' front\n", screen_x(x),
                  screen_y(cv, y), align, font);
}

/* The title, the legend and the notes: drawn with the first panel. */
static void canvas_furniture(ql_strbuf *b, const canvas *cv)
{
    for (size_t i = 0; i < cv->n_title; i++)
        canvas_label(b, cv, CANVAS_W / 2.0, 8.0 + TITLE_LINE_H * ((double)i + 0.5) + 4.0,
                     cv->title[i], "center", ",11");
    const double width = cv->legend_col_w * (double)cv->legend_cols - LEGEND_GAP;
    const double left = (CANVAS_W - width) / 2.0;
    for (size_t i = 0; i < cv->n_legend; i++) {
        const legend_entry *e = &cv->legend[i];
        const double x = left + cv->legend_col_w * (double)(i % cv->legend_cols);
        const double y = cv->legend_top + LEGEND_ROW_H * ((double)(i / cv->legend_cols) + 0.5);
        if (e->dt)
            ql_strbuf_add(b,
                          "set arrow from screen %.5f, screen %.5f to screen %.5f, screen %.5f "
                          "nohead dt %d lw %g lc rgb '%s' front\n",
                          screen_x(x), screen_y(cv, y), screen_x(x + LEGEND_SAMPLE - 8.0),
                          screen_y(cv, y), e->dt, e->lw, e->colour);
        if (e->pt)
            ql_strbuf_add(b,
                          "set label '' at screen %.5f, screen %.5f point pt %d ps 1.2 lc rgb '%s' "
                          "front\n",
                          screen_x(x + (LEGEND_SAMPLE - 8.0) / 2.0), screen_y(cv, y), e->pt,
                          e->colour);
        canvas_label(b, cv, x + LEGEND_SAMPLE, y, e->text, "left", ",10");
    }
    for (size_t i = 0; i < cv->n_notes; i++)
        canvas_label(b, cv, 20.0, cv->notes_top + NOTE_LINE_H * ((double)i + 0.5), cv->notes[i],
                     "left", ",9");
}

/* Panel p's title above its plot area, wrapped into the lines the layout has room
 * for. */
static void canvas_panel_title(ql_strbuf *b, const canvas *cv, size_t p, const char *title)
{
    if (!*title || !cv->panel_title_lines)
        return;
    double x0, x1, y0, y1;
    canvas_panel(cv, p, &x0, &x1, &y0, &y1);
    char lines[4][LINE_MAX_CHARS];
    size_t n = wrap_text(title, (size_t)((x1 - x0) / LEGEND_CHAR_W), lines,
                         cv->panel_title_lines < 4 ? cv->panel_title_lines : 4);
    for (size_t i = 0; i < n; i++)
        canvas_label(b, cv, (x0 + x1) / 2.0, y0 - PANEL_TITLE_H * ((double)(n - i) - 0.5) - 2.0,
                     lines[i], "center", ",10");
}

/* Lines a panel title takes at the width of a panel of this layout. */
static size_t panel_title_lines(const char *title, size_t n_panels)
{
    if (!*title)
        return 0;
    const double cell = CANVAS_W / (n_panels <= 1 ? 1.0 : 2.0);
    char lines[4][LINE_MAX_CHARS];
    return wrap_text(title, (size_t)((cell - PANEL_LEFT - PANEL_RIGHT) / LEGEND_CHAR_W), lines, 2);
}

/* The key of the numbered labels as lines that fit the canvas, an entry never split:
 * "numbered points:  1 Q4_K_S,  2 IQ4_NL". Returns the lines used (the last one ends
 * in "…" when the entries go on past max_lines). */
static size_t number_notes(const char *const *texts, size_t n, char (*lines)[LINE_MAX_CHARS],
                           size_t max_lines)
{
    const size_t width = (size_t)((CANVAS_W - 40.0) / NOTE_CHAR_W);
    size_t k = 0, chars = 0;
    if (!n || !max_lines)
        return 0;
    snprintf(lines[0], LINE_MAX_CHARS, "numbered points:");
    chars = strlen(lines[0]);
    for (size_t i = 0; i < n; i++) {
        char entry[LINE_MAX_CHARS];
        snprintf(entry, sizeof entry, "%zu %s", i + 1, texts[i]);
        const size_t len = text_chars(entry, strlen(entry));
        if (chars + 3 + len > width && chars > 0) {
            if (k + 1 == max_lines) {
                size_t used = strlen(lines[k]);
                snprintf(lines[k] + used, LINE_MAX_CHARS - used, ",  …");
                break;
            }
            lines[++k][0] = '\0';
            chars = 0;
        }
        size_t used = strlen(lines[k]);
        snprintf(lines[k] + used, LINE_MAX_CHARS - used, "%s%s",
                 i || k ? (chars ? ",  " : "") : "  ", entry);
        chars += (chars ? 3 : 0) + len;
    }
    return k + 1;
}

/* A title for gnuplot's own `set title` (the plots whose key gnuplot places): lines
 * of at most TITLE_WRAP characters joined into one string expression, 'a'."\n".'b',
 * so that a long title is not cut at the canvas's edges. */
#define TITLE_WRAP 100

static void title_expr(FILE *f, const char *title)
{
    char lines[4][LINE_MAX_CHARS];
    size_t n = wrap_text(title, TITLE_WRAP, lines, 4);
    for (size_t i = 0; i < n; i++) {
        if (i)
            fputs(".\"\\n\".", f);
        ql_plot_quote(f, lines[i]);
    }
    if (!n)
        fputs("''", f);
}

/* title_expr into a body. */
static void body_title(ql_strbuf *b, const char *title)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) {
        b->failed = true;
        return;
    }
    title_expr(m, title);
    fclose(m);
    ql_strbuf_add(b, "%s", text);
    free(text);
}

/* ---------------------------------------------------------------- the steps of a bpw plot */

/* A bpw plot's data: per row its bpw and value (NAN for a row not compared) and whether
 * it is on the Pareto front; the front's file; the reference's PPL line; the axis ranges
 * with the plot area of the panel at hand. */
typedef struct {
    size_t n; /* rows */
    double *x, *y;
    bool *front;
    bool front_drawable; /* a front point can be drawn: the front's line is */
    const char *front_stem;
    double ref; /* the lowest reference PPL of the group; NAN: none (or a KLD plot) */
    ql_plot_frame m;
} bpw_data;

/* One label of a bpw plot: a cluster of points of one weight type in one panel. */
typedef struct {
    size_t panel;
    char text[64];
    ql_point_label pl;
} bpw_label;

/* A plot's labels over its panels, and the texts of the numbered ones in number order
 * (the key under the plot). */
typedef struct {
    bpw_label *labels;
    size_t n;
    const char **key_texts;
    int numbers;
} bpw_labels;

/* The x offset of series s: the series side by side, so that configs of the same size
 * do not hide each other. */
static double series_dodge(const layout *l, const ql_plot_frame *m, size_t s)
{
    return DODGE * (m->xhi - m->xlo) * ((double)s - 0.5 * (double)(l->n_series - 1));
}

/* The rows' values and the Pareto front; false when no value can be drawn. */
static bool bpw_values(const group *g, const bpw_plot *bp, bpw_data *d)
{
    bool any = false;
    for (size_t i = 0; i < d->n; i++) {
        const row *r = &g->rows[i];
        bool use = ql_report_row_compared(r);
        d->x[i] = use ? r->v[QL_METRIC_bpw] : (double)NAN;
        d->y[i] = use ? r->v[bp->value] : (double)NAN;
        any = any || drawable(bp, d->x[i], d->y[i]);
    }
    if (any)
        ql_pareto_front(d->x, d->y, d->n, d->front, NULL);
    d->front_stem = bp->value == QL_METRIC_kld_mean ? "pareto_kld" : "pareto_ppl";
    return any;
}

/* The Pareto file: the front of the whole group, in bpw order. */
static ql_status write_front(ql_report_writer *c, const group *g, const bpw_plot *bp, bpw_data *d,
                             ql_error *err)
{
    ql_doc doc = {0};
    ql_status rc = ql_doc_open(&doc, err);
    if (rc)
        return rc;
    dat_header(c, g, doc.f, "the Pareto front (configs no other config beats on both)");
    fprintf(doc.f, "# columns: bpw %s label config_hash\n", ql_metric_get(bp->value)->name);
    d->front_drawable = false;
    for (size_t i = 0; i < d->n; i++) {
        if (!d->front[i])
            continue;
        char label[512];
        ql_report_config_label(g, g->rows[i].axis, -1, label, sizeof label);
        dat_col(doc.f, d->x[i], true);
        dat_num(doc.f, d->y[i]);
        dat_str(doc.f, label);
        fprintf(doc.f, " %s\n", g->rows[i].hash);
        d->front_drawable = d->front_drawable || drawable(bp, d->x[i], d->y[i]);
    }
    char name[1200];
    snprintf(name, sizeof name, "%s%s.dat", d->front_stem, g->suffix);
    rc = ql_report_doc_save(c, &doc, name, err);
    ql_doc_discard(&doc);
    return rc;
}

/* The axis ranges and the reference's line (the lowest reference PPL of a PPL plot). */
static void bpw_ranges(const group *g, const bpw_plot *bp, bpw_data *d)
{
    data_ranges(g, bp, &d->m);
    d->ref = (double)NAN;
    for (size_t i = 0; i < d->n && bp->value == QL_METRIC_ppl; i++)
        if (!isnan(g->rows[i].v[QL_METRIC_ppl_ref]) &&
            (isnan(d->ref) || g->rows[i].v[QL_METRIC_ppl_ref] < d->ref))
            d->ref = g->rows[i].v[QL_METRIC_ppl_ref];
}

/* The legend: a marker per series, the front's and the reference's lines. */
static size_t bpw_legend(const group *g, const layout *l, const bpw_data *d, legend_entry *legend)
{
    size_t n = 0;
    for (size_t s = 0; s < l->n_series; s++) {
        legend_entry *e = &legend[n++];
        series_title(g, l, s, e->text, sizeof e->text);
        e->colour = colours[l->colour[l->series_row[s]] % N_COLOURS];
        e->pt = markers[l->marker[l->series_row[s]] % N_MARKERS];
    }
    if (d->front_drawable)
        legend[n++] = (legend_entry){"Pareto front", "black", 0, 2, 1.5};
    if (!isnan(d->ref))
        legend[n++] = (legend_entry){"unquantized reference", "gray40", 0, 3, 1.0};
    return n;
}

/* Records a numbered label for report.md's key: the configs of its cluster (the rows
 * of the panel's points whose cluster is k). */
static ql_status note_numbered(group *g, const char *plot, const char *plot_title, int number,
                               const char *text, const size_t *rows_of, const size_t *cluster_of,
                               size_t np, size_t k, ql_error *err)
{
    if (!ql_grow((void **)&g->numbered, &g->numbered_cap, g->nnumbered + 1, sizeof *g->numbered))
        return ql_report_oom(err);
    ql_report_numbered *nb = &g->numbered[g->nnumbered++];
    memset(nb, 0, sizeof *nb);
    ql_strlcpy(nb->plot, plot, sizeof nb->plot);
    ql_strlcpy(nb->plot_title, plot_title, sizeof nb->plot_title);
    nb->number = number;
    ql_strlcpy(nb->text, text, sizeof nb->text);
    size_t o = 0;
    for (size_t j = 0; j < np && o < sizeof nb->configs; j++) {
        if (cluster_of[j] != k)
            continue;
        char label[512];
        ql_report_config_label(g, g->rows[rows_of[j]].axis, -1, label, sizeof label);
        o +=
            (size_t)snprintf(nb->configs + o, sizeof nb->configs - o, "%s%s", o ? "; " : "", label);
    }
    return QL_OK;
}

/* A panel's points as the placement takes them, each array as long as the group's rows:
 * the row of each point, its cluster, the point, its kind's label size and text (a kind
 * numbered by its first point), the clusters' labels. */
typedef struct {
    size_t *rows_of, *cluster_of;
    ql_plot_point *pts;
    ql_label_size *sizes;
    char (*kind_text)[64];
    ql_point_label *pl;
} bpw_scratch;

/* The labels of panel p's points (ql_plot_label_points: one per cluster of points of one
 * weight type), appended to out; the numbered ones numbered on from the panels before
 * and recorded for report.md's key. */

static ql_status bpw_panel_labels(group *g, const layout *l, const bpw_plot *bp, bpw_data *d,
                                  size_t p, const char *base, const bpw_scratch *t, bpw_labels *out,
                                  ql_error *err)
{
    size_t np = 0;
    for (size_t i = 0; i < d->n; i++) {
        if (!drawable(bp, d->x[i], d->y[i]) || l->panel[i] != p)
            continue;
        /* A point's kind: its weight type, numbered by its first point in the panel. */
        const char *wt = g->rows[i].axis[QL_AXIS_WEIGHT_TYPE];
        size_t kind = np;
        for (size_t j = 0; j < np && kind == np; j++)
            if (strcmp(g->rows[t->rows_of[j]].axis[QL_AXIS_WEIGHT_TYPE], wt) == 0)
                kind = t->pts[j].kind;
        if (kind == np) {
            ql_report_weight_label(g, wt, t->kind_text[np], sizeof t->kind_text[np]);
            t->sizes[np] =
                (ql_label_size){.w = LABEL_CHAR_W * (double)text_chars(t->kind_text[np], 64) + 4.0,
                                .h = LABEL_H,
                                .num_w = LABEL_CHAR_W * 2.0 + 4.0};
        }
        t->rows_of[np] = i;
        t->pts[np++] = (ql_plot_point){.x = d->x[i] + series_dodge(l, &d->m, l->series[i]),
                                       .y = d->y[i],
                                       .err = g->rows[i].v[bp->error],
                                       .kind = kind};
    }
    size_t nl = 0;
    if (!ql_plot_label_points(&d->m, d->ref, t->pts, np, t->sizes, t->cluster_of, t->pl, &nl))
        return ql_report_oom(err);
    ql_status rc = QL_OK;
    for (size_t k = 0; k < nl && !rc; k++) {
        bpw_label *lb = &out->labels[out->n++];
        lb->panel = p;
        lb->pl = t->pl[k];
        ql_strlcpy(lb->text, t->kind_text[t->pts[t->pl[k].first].kind], sizeof lb->text);
        /* Numbers run on across the panels; a label with no room even for its number
         * is in report.md's key alone. */
        if (lb->pl.out.how == QL_LABEL_TEXT)
            continue;
        lb->pl.out.number = lb->pl.out.how == QL_LABEL_NUMBER ? ++out->numbers : 0;
        if (lb->pl.out.number)
            out->key_texts[out->numbers - 1] = lb->text;
        rc = note_numbered(g, base, bp->title, lb->pl.out.number, lb->text, t->rows_of,
                           t->cluster_of, np, k, err);
    }
    return rc;
}

/* The gnuplot commands of the plot (the body both terminals run): per panel its frame,
 * axes, labels and the series with their error bars, the front and the reference. */
static void bpw_body(ql_strbuf *b, const group *g, const layout *l, const bpw_plot *bp, bpw_data *d,
                     const canvas *cv, const bpw_labels *lb)
{
    ql_plot_frame *m = &d->m;
    ql_strbuf_add(b, "set multiplot\nset grid\nset pointsize 1.2\nset bars small\nunset key\n");
    /* Error bars: ± the standard error (none when it is not stored, NaN != NaN), the
     * lower end kept above zero on a log axis. */
    ql_strbuf_add(b,
                  "bar_hi(y, e) = e == e ? y + e : y\n"
                  "bar_lo(y, e) = e != e ? y : (y - e > 0 || !%d) ? y - e : y\n",
                  bp->log_y ? 1 : 0);
    for (size_t p = 0; p < l->n_panels; p++) {
        canvas_panel(cv, p, &m->x0, &m->x1, &m->y0, &m->y1);
        if (p == 0)
            canvas_furniture(b, cv);
        canvas_margins(b, cv, p);
        ql_strbuf_add(b, "set xrange [%.17g:%.17g]\nset yrange [%.17g:%.17g]\n", m->xlo, m->xhi,
                      m->ylo, m->yhi);
        ql_strbuf_add(b, "set xlabel 'bits per weight'\nset ylabel '%s'\n",
                      m->y1 - m->y0 < SHORT_YLABEL_H ? bp->short_ylabel : bp->ylabel);
        ql_strbuf_add(b, bp->log_y ? "set logscale y\nset format y '%%.0e'\nset ytics auto\n"
                                   : "unset logscale y\nset format y '%%g'\n");
        if (bp->log_y)
            log_ticks(b, m->ylo, m->yhi, "y");
        canvas_panel_title(b, cv, p, l->panel_title[p]);
        for (size_t k = 0; k < lb->n; k++) {
            const ql_label_out *o = &lb->labels[k].pl.out;
            if (lb->labels[k].panel != p || o->how == QL_LABEL_NONE)
                continue;
            char num[16];
            snprintf(num, sizeof num, "%d", o->number);
            /* Back from the placement's mirrored y to pixels down. */
            canvas_label(b, cv, 0.5 * (o->box.x0 + o->box.x1), -0.5 * (o->box.y0 + o->box.y1),
                         o->how == QL_LABEL_TEXT ? lb->labels[k].text : num, "center", ",8");
            if (o->leader) {
                double ax, ay, bx, by;
                ql_plot_leader(&lb->labels[k].pl.in.anchor, &o->box, &ax, &ay, &bx, &by);
                ql_strbuf_add(b,
                              "set arrow from screen %.5f, screen %.5f to screen %.5f, screen %.5f "
                              "nohead lw 0.8 lc rgb 'gray50' back\n",
                              screen_x(ax), screen_y(cv, -ay), screen_x(bx), screen_y(cv, -by));
            }
        }
        ql_strbuf_add(b, "plot");
        const char *sep = " ";
        for (size_t s = 0; s < l->n_series; s++) {
            size_t ci = l->colour[l->series_row[s]] % N_COLOURS;
            size_t mi = l->marker[l->series_row[s]] % N_MARKERS;
            int yc = dat_column(bp->value), ec = dat_column(bp->error);
            ql_strbuf_add(
                b,
                "%s\\\n  'formats%s.dat' index %zu using ($1 + %.17g):%d:(bar_lo($%d, $%d)):"
                "(bar_hi($%d, $%d)) with yerrorbars pt %d lc rgb '%s' notitle",
                sep, g->suffix, p * l->n_series + s, series_dodge(l, m, s), yc, yc, ec, yc, ec,
                markers[mi], colours[ci]);
            sep = ", ";
        }
        if (d->front_drawable)
            ql_strbuf_add(
                b, ", \\\n  '%s%s.dat' using 1:2 with lines dt 2 lw 1.5 lc rgb 'black' notitle",
                d->front_stem, g->suffix);
        if (!isnan(d->ref))
            ql_strbuf_add(b, ", \\\n  %.17g with lines dt 3 lc rgb 'gray40' notitle", d->ref);
        ql_strbuf_add(b, "\nunset label\nunset arrow\n");
    }
    ql_strbuf_add(b, "unset multiplot\n");
}

/* A plot against bits per weight: the values, the Pareto file, the ranges, the legend
 * and canvas, the labels panel by panel (the key of numbers then grows the canvas), the
 * gnuplot text. */
static ql_status write_bpw_plot(ql_report_writer *c, group *g, const layout *l, const bpw_plot *bp,
                                ql_error *err)
{
    const size_t n = g->nrows, n1 = n ? n : 1;
    bpw_data d = {.n = n,
                  .x = malloc(n1 * sizeof *d.x),
                  .y = malloc(n1 * sizeof *d.y),
                  .front = malloc(n1 * sizeof *d.front)};
    bpw_scratch t = {.rows_of = malloc(n1 * sizeof *t.rows_of),
                     .cluster_of = malloc(n1 * sizeof *t.cluster_of),
                     .pts = malloc(n1 * sizeof *t.pts),
                     .sizes = malloc(n1 * sizeof *t.sizes),
                     .kind_text = malloc(n1 * sizeof *t.kind_text),
                     .pl = malloc(n1 * sizeof *t.pl)};
    bpw_labels lb = {.labels = calloc(n1, sizeof *lb.labels),
                     .key_texts = calloc(n1, sizeof *lb.key_texts)};
    char(*notes)[LINE_MAX_CHARS] = calloc(8, sizeof *notes);
    legend_entry *legend = calloc(l->n_series + 2, sizeof *legend);
    ql_strbuf b = {0};
    ql_status rc = QL_OK;
    if (!d.x || !d.y || !d.front || !t.rows_of || !t.cluster_of || !t.pts || !t.sizes ||
        !t.kind_text || !t.pl || !lb.labels || !lb.key_texts || !notes || !legend) {
        rc = ql_report_oom(err);
        goto out;
    }
    if (!bpw_values(g, bp, &d)) {
        if (c->opt->log)
            fprintf(c->opt->log, "  (%s%s: no %s values to plot)\n", bp->name, g->suffix,
                    ql_metric_get(bp->value)->name);
        goto out;
    }
    if ((rc = write_front(c, g, bp, &d, err)))
        goto out;
    char base[1100], title[1024];
    snprintf(base, sizeof base, "%s%s", bp->name, g->suffix);
    bpw_ranges(g, bp, &d);
    const size_t n_legend = bpw_legend(g, l, &d, legend);
    size_t ptl = 0;
    for (size_t p = 0; p < l->n_panels; p++) {
        size_t k = panel_title_lines(l->panel_title[p], l->n_panels);
        ptl = k > ptl ? k : ptl;
    }
    plot_title(c, g, title, sizeof title);
    canvas cv;
    canvas_layout(&cv, title, l->n_panels, ptl, legend, n_legend, NULL, 0);
    for (size_t p = 0; p < l->n_panels && !rc; p++) {
        canvas_panel(&cv, p, &d.m.x0, &d.m.x1, &d.m.y0, &d.m.y1);
        rc = bpw_panel_labels(g, l, bp, &d, p, base, &t, &lb, err);
    }
    if (rc)
        goto out;
    /* The key of the numbers at the bottom: the canvas grows by its lines. */
    const size_t n_notes = number_notes(lb.key_texts, (size_t)lb.numbers, notes, 8);
    canvas_layout(&cv, title, l->n_panels, ptl, legend, n_legend, notes, n_notes);
    bpw_body(&b, g, l, bp, &d, &cv, &lb);
    char header[4096];
    snprintf(header, sizeof header,
             "# qlab report: %s against bits per weight, ± its standard error; colour and marker\n"
             "# tell apart the axes that vary besides the weight type, panels any further ones;\n"
             "# the dashed line joins the Pareto front; title, legend and labels at screen\n"
             "# coordinates. Data: formats%s.dat, %s%s.dat. Redraw: gnuplot %s.gp\n"
             "set encoding utf8\n",
             ql_metric_get(bp->value)->name, g->suffix, d.front_stem, g->suffix, base);
    rc = write_plot_script(c, g, &b, base, cv.height, header, bp->title, err);
out:
    ql_strbuf_free(&b);
    free(d.x);
    free(d.y);
    free(d.front);
    free(t.rows_of);
    free(t.cluster_of);
    free(t.pts);
    free(t.sizes);
    free(t.kind_text);
    free(t.pl);
    free(lb.labels);
    free(lb.key_texts);
    free(notes);
    free(legend);
    return rc;
}

static ql_status plot_kld_bpw(ql_report_writer *c, group *g, const layout *l, ql_error *err)
{
    return write_bpw_plot(c, g, l, &bpw_plots[0], err);
}

static ql_status plot_ppl_bpw(ql_report_writer *c, group *g, const layout *l, ql_error *err)
{
    if (!ppl_meaningful(g)) {
        if (c->opt->log)
            fprintf(c->opt->log,
                    "  (ppl_bpw%s: %s has random weights, its perplexity means "
                    "nothing; no PPL plot)\n",
                    g->suffix, g->model);
        return QL_OK;
    }
    return write_bpw_plot(c, g, l, &bpw_plots[1], err);
}

/* ================================================================ KLD distribution */

/* The points of a config's KLD distribution function: the stored percentiles. */
static const struct {
    ql_metric_id id;
    double fraction;
} cdf_points[] = {
    {QL_METRIC_kld_p01, 0.01},   {QL_METRIC_kld_p05, 0.05},   {QL_METRIC_kld_p10, 0.10},
    {QL_METRIC_kld_p25, 0.25},   {QL_METRIC_kld_median, 0.5}, {QL_METRIC_kld_p75, 0.75},
    {QL_METRIC_kld_p90, 0.90},   {QL_METRIC_kld_p95, 0.95},   {QL_METRIC_kld_p99, 0.99},
    {QL_METRIC_kld_p999, 0.999}, {QL_METRIC_kld_max, 1.0},
};
#define N_CDF (sizeof cdf_points / sizeof cdf_points[0])

/* A panel of the KLD distribution plot: every axis that varies besides the weight type,
 * with its value ("head same, imatrix none"). */
static void panel_label(const group *g, const row *r, char *buf, size_t size)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int a = 1; a < QL_AXIS_COUNT && o < size; a++)
        if (g->varies[a])
            o += (size_t)snprintf(buf + o, size - o, "%s%s %s", o ? ", " : "",
                                  ql_axis_get((ql_axis)a)->label, layout_value(g, r, a));
}

/* Whether a config has a KLD distribution to draw: positive percentiles from 25% on
 * (lower ones of a near-exact config may be 0 or rounding noise below it). */
static bool cdf_drawable(const row *r)
{
    if (!ql_report_row_compared(r))
        return false;
    for (size_t k = 0; k < N_CDF; k++)
        if (cdf_points[k].fraction >= 0.25 && !(r->v[cdf_points[k].id] > 0.0))
            return false;
    return true;
}

/* One panel per combination of the axes other than the weight type (small multiples,
 * as many as MAX_PANELS; with more, one panel), one line per weight type in each,
 * coloured by weight type alike in every panel. */
static ql_status plot_kld_cdf(ql_report_writer *c, group *g, const layout *l, ql_error *err)
{
    (void)l;
    double lo = (double)INFINITY, hi = 0.0;
    size_t drawn = 0;
    const char *types[MAX_SERIES];
    size_t n_types = 0;
    char panels[MAX_PANELS][256];
    size_t n_panels = 0;
    bool too_many = false;
    for (size_t i = 0; i < g->nrows; i++) {
        const row *r = &g->rows[i];
        if (!cdf_drawable(r))
            continue;
        drawn++;
        for (size_t k = 0; k < N_CDF; k++)
            if (r->v[cdf_points[k].id] > 0.0) {
                lo = fmin(lo, r->v[cdf_points[k].id]);
                hi = fmax(hi, r->v[cdf_points[k].id]);
            }
        /* The types in the rows' order (by bpw), as the legend lists them. */
        size_t wt = 0;
        while (wt < n_types && strcmp(types[wt], r->axis[QL_AXIS_WEIGHT_TYPE]) != 0)
            wt++;
        if (wt == n_types && n_types < MAX_SERIES)
            types[n_types++] = r->axis[QL_AXIS_WEIGHT_TYPE];
        char rest[256];
        panel_label(g, r, rest, sizeof rest);
        size_t p = 0;
        while (p < n_panels && strcmp(panels[p], rest) != 0)
            p++;
        if (p == n_panels) {
            if (n_panels < MAX_PANELS)
                ql_strlcpy(panels[n_panels++], rest, sizeof panels[0]);
            else
                too_many = true;
        }
    }
    if (!drawn) {
        if (c->opt->log)
            fprintf(c->opt->log, "  (kld_cdf%s: no stored KLD percentiles to plot)\n", g->suffix);
        return QL_OK;
    }
    if (too_many) {
        n_panels = 1;
        panels[0][0] = '\0';
    }
    char name[1200], base[1100], title[1024], label[512];
    ql_doc d;
    ql_status rc = ql_doc_open(&d, err);
    if (rc)
        return rc;
    dat_header(c, g, d.f, "KLD distribution function per config, from its stored percentiles");
    fputs("# one block per config; columns: kld fraction_at_or_below\n", d.f);
    size_t block = 0;
    for (size_t i = 0; i < g->nrows; i++) {
        const row *r = &g->rows[i];
        if (!cdf_drawable(r))
            continue;
        ql_report_config_label(g, r->axis, -1, label, sizeof label);
        fprintf(d.f, "%s# index %zu: %s %s\n", block ? "\n\n" : "", block, label, r->hash);
        for (size_t k = 0; k < N_CDF; k++)
            if (r->v[cdf_points[k].id] > 0.0)
                fprintf(d.f, "%.17g %.17g\n", r->v[cdf_points[k].id], cdf_points[k].fraction);
        block++;
    }
    snprintf(base, sizeof base, "kld_cdf%s", g->suffix);
    snprintf(name, sizeof name, "%s.dat", base);
    if ((rc = ql_report_doc_save(c, &d, name, err)))
        return rc;

    /* The legend: a line per weight type (colour, and marker past the colours), or with
     * one panel of every config a line per config (the other axes in its dashes). */
    legend_entry *legend = calloc(too_many ? drawn : n_types, sizeof *legend);
    if (!legend)
        return ql_report_oom(err);
    size_t n_legend = 0;
    block = 0;
    for (size_t i = 0; i < g->nrows && too_many; i++) {
        const row *r = &g->rows[i];
        if (!cdf_drawable(r))
            continue;
        size_t wt = 0;
        while (wt < n_types && strcmp(types[wt], r->axis[QL_AXIS_WEIGHT_TYPE]) != 0)
            wt++;
        legend_entry *e = &legend[n_legend++];
        ql_report_config_label(g, r->axis, -1, e->text, sizeof e->text);
        e->colour = colours[wt % N_COLOURS];
        e->pt = markers[(wt + wt / N_COLOURS) % N_MARKERS];
        e->dt = (int)(1 + block++ % 5);
        e->lw = 1.6;
    }
    for (size_t wt = 0; wt < n_types && !too_many; wt++) {
        legend_entry *e = &legend[n_legend++];
        ql_report_weight_label(g, types[wt], e->text, sizeof e->text);
        e->colour = colours[wt % N_COLOURS];
        e->pt = markers[(wt + wt / N_COLOURS) % N_MARKERS];
        e->dt = 1;
        e->lw = 1.6;
    }
    size_t ptl = 0;
    for (size_t p = 0; p < n_panels; p++) {
        size_t k = panel_title_lines(panels[p], n_panels);
        ptl = k > ptl ? k : ptl;
    }
    plot_title(c, g, title, sizeof title);
    canvas cv;
    canvas_layout(&cv, title, n_panels, ptl, legend, n_legend, NULL, 0);
    /* Narrow panels: a labelled tick every few decades, in short form. */
    int decades = (int)ceil(log10(hi * 2.0) - log10(lo / 2.0));
    int step = n_panels > 1 && decades > 4 ? (decades + 3) / 4 : 1;
    ql_strbuf b = {0};
    ql_strbuf_add(&b,
                  "set multiplot\nset grid\nunset key\nset logscale x\nset format x '1e%%T'\n"
                  "set xtics %g\nset xrange [%.17g:%.17g]\nset yrange [0:1.02]\n"
                  "set xlabel 'KL divergence of a token (nats, log scale)'\n",
                  pow(10.0, step), lo / 2.0, hi * 2.0);
    for (size_t p = 0; p < n_panels; p++) {
        if (p == 0)
            canvas_furniture(&b, &cv);
        double x0, x1, y0, y1;
        canvas_panel(&cv, p, &x0, &x1, &y0, &y1);
        ql_strbuf_add(&b, p % 2 ? "unset ylabel\n" : "set ylabel '%s'\n",
                      y1 - y0 < SHORT_YLABEL_H ? "share of tokens" : "share of tokens at or below");
        canvas_margins(&b, &cv, p);
        canvas_panel_title(&b, &cv, p, panels[p]);
        ql_strbuf_add(&b, "plot");
        const char *sep = " ";
        block = 0;
        for (size_t i = 0; i < g->nrows; i++) {
            const row *r = &g->rows[i];
            if (!cdf_drawable(r))
                continue;
            char rest[256];
            panel_label(g, r, rest, sizeof rest);
            size_t here = block++;
            if (!too_many && strcmp(rest, panels[p]) != 0)
                continue;
            size_t wt = 0;
            while (wt < n_types && strcmp(types[wt], r->axis[QL_AXIS_WEIGHT_TYPE]) != 0)
                wt++;
            /* One panel with every config: the other axes in the line's dashes. */
            size_t dash = too_many ? 1 + here % 5 : 1;
            ql_strbuf_add(&b,
                          "%s\\\n  '%s.dat' index %zu using 1:2 with linespoints pt %d ps 0.6 "
                          "lw 1.6 dt %zu lc rgb '%s' notitle",
                          sep, base, here, markers[(wt + wt / N_COLOURS) % N_MARKERS], dash,
                          colours[wt % N_COLOURS]);
            sep = ", ";
        }
        ql_strbuf_add(&b, "\nunset label\nunset arrow\n");
    }
    ql_strbuf_add(&b, "unset multiplot\n");
    free(legend);
    char header[2600];
    snprintf(header, sizeof header,
             "# qlab report: the distribution of per-token KLD of every config (its stored\n"
             "# percentiles 1%%..99.9%% and maximum), a panel per combination of the other\n"
             "# axes. Data: %s.dat. Redraw: gnuplot %s.gp\nset encoding utf8\n",
             base, base);
    return write_plot_script(c, g, &b, base, cv.height, header, "KLD distribution", err);
}

/* ================================================================ per-tensor plot */

/* Tensor classes in the order of a transformer block; others after, by name. */
static int class_rank(const char *cls)
{
    return ql_tensor_class_rank(cls);
}

static int cmp_points(const void *pa, const void *pb)
{
    const ql_report_tensor *a = pa, *b = pb;
    int ra = class_rank(a->cls), rb = class_rank(b->cls);
    if (ra != rb)
        return ra < rb ? -1 : 1;
    int s = strcmp(a->cls, b->cls);
    if (s)
        return s;
    return a->layer < b->layer ? -1 : a->layer > b->layer;
}

/* "blk.3.attn_q.weight" -> "attn_q". */
static void tensor_class(const char *name, char *buf, size_t size)
{
    ql_tensor_class(name, buf, size);
}

ql_status ql_report_load_tensors(ql_report_writer *c, group *g, ql_error *err)
{
    static const char sql[] =
        "SELECT tensor, layer, used_type, rmse, imatrix_err_rel, requested_type"
        " FROM tensor_errors WHERE run_id = ?1 ORDER BY tensor";
    sqlite3_stmt *st;
    ql_status rc = ql_report_prepare(c, sql, &st, err);
    if (rc)
        return rc;
    size_t cap = 0, olen = 0;
    if ((rc = ql_report_bind_int(c, st, 1, g->tensor_row->run_id, err)))
        goto out;
    for (;;) {
        bool more;
        if ((rc = ql_report_step(c, st, &more, err)) || !more)
            break;
        const char *name = (const char *)sqlite3_column_text(st, 0);
        const char *used = (const char *)sqlite3_column_text(st, 2);
        const char *req = (const char *)sqlite3_column_text(st, 5);
        if (sqlite3_column_type(st, 1) == SQLITE_NULL) {
            /* Tensors outside the blocks (embeddings, head) go into the header. */
            char v1[32], v2[32];
            ql_format_double(ql_report_col_double(st, 3), v1, sizeof v1);
            ql_format_double(ql_report_col_double(st, 4), v2, sizeof v2);
            if (olen < sizeof g->outside)
                olen += (size_t)snprintf(g->outside + olen, sizeof g->outside - olen,
                                         "#   %s %s rmse %s imatrix_err_rel %s\n",
                                         name ? name : "?", used ? used : "?", v1, v2);
            continue;
        }
        if (!ql_grow((void **)&g->pts, &cap, g->npts + 1, sizeof *g->pts)) {
            rc = ql_report_oom(err);
            break;
        }
        ql_report_tensor *p = &g->pts[g->npts++];
        tensor_class(name ? name : "", p->cls, sizeof p->cls);
        p->layer = sqlite3_column_int64(st, 1);
        ql_strlcpy(p->used, used ? used : "?", sizeof p->used);
        ql_strlcpy(p->requested, req ? req : "?", sizeof p->requested);
        p->rmse = ql_report_col_double(st, 3);
        p->rel = ql_report_col_double(st, 4);
    }
out:
    sqlite3_finalize(st);
    return rc;
}

static ql_status plot_tensors(ql_report_writer *c, group *g, const layout *l, ql_error *err)
{
    (void)l;
    const row *r = g->tensor_row;
    ql_report_tensor *pts = g->pts;
    size_t n = g->npts;
    if (!r || n == 0)
        return QL_OK;
    const char *outside = g->outside;
    ql_doc d = {0};
    ql_status rc = QL_OK;
    qsort(pts, n, sizeof *pts, cmp_points);
    bool use_rel = true;
    size_t fell = 0;
    int64_t min_layer = pts[0].layer, max_layer = pts[0].layer;
    for (size_t i = 0; i < n; i++) {
        use_rel = use_rel && !isnan(pts[i].rel);
        fell += strcmp(pts[i].used, pts[i].requested) != 0;
        min_layer = pts[i].layer < min_layer ? pts[i].layer : min_layer;
        max_layer = pts[i].layer > max_layer ? pts[i].layer : max_layer;
    }
    /* Log scale when the errors span more than LOG_SPAN_MIN; within a narrower range a
     * log axis would show one or no labelled tick. */
    double lo = (double)INFINITY, hi = 0.0;
    for (size_t i = 0; i < n; i++) {
        double v = use_rel ? pts[i].rel : pts[i].rmse;
        if (v > 0.0 && v < lo)
            lo = v;
        if (v > hi)
            hi = v;
    }
    bool log_y = hi > 0.0 && hi / lo > LOG_SPAN_MIN;
    const char *metric = use_rel ? "imatrix_err_rel" : "rmse";

    char base[1024], fname[1200], label[512], title[1600], hash12[13];
    snprintf(hash12, sizeof hash12, "%.12s", r->hash);
    snprintf(base, sizeof base, "tensors%s-%s", g->suffix, hash12);
    ql_report_config_label(g, r->axis, -1, label, sizeof label);
    if ((rc = ql_doc_open(&d, err)))
        goto out;
    dat_header(c, g, d.f, "per-tensor weight error by layer");
    fprintf(d.f, "# config %s (%s), run %lld\n# metric: %s\n", label, r->hash, (long long)r->run_id,
            use_rel ? "imatrix_err_rel = sum I (w - w')^2 / sum I w^2"
                    : "rmse of w - w' (some tensor has no importance weights)");
    if (*outside)
        fprintf(d.f, "# tensors outside the blocks:\n%s", outside);
    fprintf(d.f,
            "# one block per tensor class, then one of the tensors that fell back;\n"
            "# columns: layer %s used_type requested_type\n",
            metric);
    size_t nblocks = 0;
    char classes[64][64];
    for (size_t i = 0; i < n; i++) {
        bool first = i == 0 || strcmp(pts[i].cls, pts[i - 1].cls) != 0;
        if (first) {
            fprintf(d.f, "%s# index %zu: %s\n", i ? "\n\n" : "", nblocks, pts[i].cls);
            if (nblocks < 64)
                ql_strlcpy(classes[nblocks], pts[i].cls, sizeof classes[0]);
            nblocks++;
        }
        fprintf(d.f, "%lld", (long long)pts[i].layer);
        dat_num(d.f, use_rel ? pts[i].rel : pts[i].rmse);
        fprintf(d.f, " %s %s\n", pts[i].used, pts[i].requested);
    }
    fprintf(d.f, "\n\n# index %zu: fell back (used_type is not the requested one)\n", nblocks);
    for (size_t i = 0; i < n; i++)
        if (strcmp(pts[i].used, pts[i].requested) != 0) {
            fprintf(d.f, "%lld", (long long)pts[i].layer);
            dat_num(d.f, use_rel ? pts[i].rel : pts[i].rmse);
            fprintf(d.f, " %s %s\n", pts[i].used, pts[i].requested);
        }
    fputs("NaN NaN - -\n", d.f);
    snprintf(fname, sizeof fname, "%s.dat", base);
    if ((rc = ql_report_doc_save(c, &d, fname, err)))
        goto out;

    snprintf(fname, sizeof fname, "%s.gp", base);
    if ((rc = ql_doc_open(&d, err)))
        goto out;
    FILE *f = d.f;
    fprintf(f,
            "# qlab report: per-tensor weight error by layer, one line per tensor class; open\n"
            "# red circles mark tensors that fell back to another type (labelled with it).\n"
            "# Data: %s.dat. Redraw: gnuplot %s\n",
            base, fname);
    snprintf(title, sizeof title, "%s: %s (%s) on %s — %s%s", c->sweep, label, hash12, g->model,
             metric,
             use_rel ? " (importance-weighted)" : " (no importance matrix for every tensor)");
    fputs("set encoding utf8\nset title ", f);
    title_expr(f, title);
    fprintf(f, "\nset xlabel 'layer'\nset ylabel '%s'\n",
            use_rel ? "relative imatrix-weighted error Σ I(w−ŵ)² / Σ I w²" : "RMSE of the weights");
    fputs(log_y ? "set logscale y\nset format y '%.0e'\n" : "set format y '%.2e'\n", f);
    fprintf(f, "set grid\nset key outside right top\nset xrange [%g:%g]\n", (double)min_layer - 0.5,
            (double)max_layer + 0.5);
    if (max_layer - min_layer <= 40)
        fputs("set xtics 1\n", f);
    fprintf(f, "set terminal %s\nset output '%s.png'\nplot", QL_PLOT_PNG_TERMINAL, base);
    for (size_t k = 0; k < nblocks && k < 64; k++) {
        fprintf(f, "%s\\\n  '%s.dat' index %zu using 1:2 with linespoints pt 7 lw 1.5 title ",
                k ? ", " : " ", base, k);
        ql_plot_quote(f, classes[k]);
    }
    if (fell)
        fprintf(f,
                ", \\\n  '%s.dat' index %zu using 1:2 with points pt 6 ps 2.2 lw 2 lc rgb "
                "'#d62728' title 'fell back (type used)', \\\n  '' index %zu using 1:2:3 with "
                "labels offset char 0,-1.2 font ',8' tc rgb '#d62728' notitle",
                base, nblocks, nblocks);
    fprintf(f, "\nset terminal %s\nset output '%s.svg'\nreplot\nunset output\n",
            QL_PLOT_SVG_TERMINAL, base);
    if ((rc = ql_report_doc_save(c, &d, fname, err)))
        goto out;
    add_plot(g, base, "per-tensor error", render(c, fname, base));
out:
    ql_doc_discard(&d);
    return rc;
}

/* ================================================================ the plots of a group */

/* Every plot of a group, in the order report.md and report.html show them. Another
 * plot is a line here (its writer records itself with add_plot when it draws). */
/* ================================================================ divergence plot */

ql_status ql_report_load_layers(ql_report_writer *c, group *g, ql_error *err)
{
    static const char sql[] = "SELECT layer, rel_err_mean, rel_err_p99, cos_mean, route_agree,"
                              " route_overlap, load_shift"
                              " FROM layer_metrics WHERE run_id = ?1 ORDER BY layer";
    sqlite3_stmt *st;
    ql_status rc = ql_report_prepare(c, sql, &st, err);
    if (rc)
        return rc;
    size_t cap = 0;
    for (size_t i = 0; i < g->nrows && !rc; i++) {
        sqlite3_reset(st);
        if ((rc = ql_report_bind_int(c, st, 1, g->rows[i].run_id, err)))
            break;
        for (;;) {
            bool more;
            if ((rc = ql_report_step(c, st, &more, err)) || !more)
                break;
            if (!ql_grow((void **)&g->layers, &cap, g->nlayers + 1, sizeof *g->layers)) {
                rc = ql_report_oom(err);
                break;
            }
            g->layers[g->nlayers++] = (ql_report_layer){
                .row = i,
                .layer = sqlite3_column_int64(st, 0),
                .rel_err_mean = ql_report_col_double(st, 1),
                .rel_err_p99 = ql_report_col_double(st, 2),
                .cos_mean = ql_report_col_double(st, 3),
                .route_agree = ql_report_col_double(st, 4),
                .route_overlap = ql_report_col_double(st, 5),
                .load_shift = ql_report_col_double(st, 6),
            };
        }
    }
    sqlite3_finalize(st);
    return rc;
}

/* divergence: the mean relative error of the residual stream after each block, one
 * line per config with layer metrics (a sweep with layer_metrics = yes), log scale.
 * Nothing is written when no run of the group has them. */
static ql_status plot_divergence(ql_report_writer *c, group *g, const layout *l, ql_error *err)
{
    (void)l;
    size_t measured = 0;
    for (size_t k = 0; k < g->nlayers; k++)
        measured += !isnan(g->layers[k].rel_err_mean);
    if (!measured)
        return QL_OK; /* layer rows of a mixture of experts' routing only */
    ql_doc d;
    ql_status rc = ql_doc_open(&d, err);
    if (rc)
        return rc;
    dat_header(c, g, d.f, "per-layer divergence of the residual stream from the reference");
    fputs("# one block per config; columns: layer rel_err_mean rel_err_p99 cos_mean\n", d.f);
    size_t blocks = 0, *shown = calloc(g->nrows ? g->nrows : 1, sizeof *shown);
    if (!shown) {
        ql_doc_discard(&d);
        return ql_report_oom(err);
    }
    bool any_positive = false;
    char label[512];
    for (size_t k = 0; k < g->nlayers; k++) {
        const ql_report_layer *ly = &g->layers[k];
        if (isnan(ly->rel_err_mean))
            continue;
        if (!blocks || ly->row != shown[blocks - 1]) {
            ql_report_config_label(g, g->rows[ly->row].axis, -1, label, sizeof label);
            fprintf(d.f, "%s# index %zu: %s %s\n", blocks ? "\n\n" : "", blocks, label,
                    g->rows[ly->row].hash);
            shown[blocks++] = ly->row;
        }
        any_positive |= ly->rel_err_mean > 0.0;
        fprintf(d.f, "%lld", (long long)ly->layer);
        dat_num(d.f, ly->rel_err_mean);
        dat_num(d.f, ly->rel_err_p99);
        dat_num(d.f, ly->cos_mean);
        fputc('\n', d.f);
    }
    char name[1200], base[1100], title[1024];
    snprintf(base, sizeof base, "divergence%s", g->suffix);
    snprintf(name, sizeof name, "%s.dat", base);
    if ((rc = ql_report_doc_save(c, &d, name, err))) {
        free(shown);
        return rc;
    }
    ql_strbuf b = {0};
    plot_title(c, g, title, sizeof title);
    ql_strbuf_add(&b, "set title ");
    body_title(&b, title);
    /* A config that leaves every block exact (only the head quantized) is 0 throughout:
     * a log scale has no room for it, so the axis is linear then. */
    ql_strbuf_add(&b,
                  "\nset grid\n%sset xlabel 'block'\n"
                  "set ylabel 'mean ||h - r|| / ||r|| of the residual stream'\n"
                  "set key outside right top font ',10'\nset xtics 1\nplot",
                  any_positive ? "set logscale y\n" : "");
    for (size_t k = 0; k < blocks; k++) {
        const row *r = &g->rows[shown[k]];
        ql_report_config_label(g, r->axis, -1, label, sizeof label);
        ql_strbuf_add(&b,
                      "%s\\\n  '%s.dat' index %zu using 1:($2 > 0 ? $2 : NaN) with linespoints "
                      "pt %d ps 0.7 lw 1.6 lc rgb '%s' title ",
                      k ? "," : "", base, k, markers[k % N_MARKERS], colours[k % N_COLOURS]);
        body_quote(&b, label);
    }
    ql_strbuf_add(&b, "\n");
    free(shown);
    char header[2600];
    snprintf(header, sizeof header,
             "# qlab report: the divergence of each config's residual stream from the\n"
             "# reference's after every block (layer_metrics). Data: %s.dat. Redraw: gnuplot "
             "%s.gp\nset encoding utf8\n",
             base, base);
    return write_plot_script(c, g, &b, base, 560, header, "divergence by layer", err);
}

/* ================================================================ routing plot */

/* routing: a mixture of experts' routing agreement with the reference after each block,
 * one line per config (the share of scored tokens routed to the reference's experts,
 * and dashed, the mean share of a token's experts kept), beside the divergence plot.
 * Nothing is written when no run of the group has routing figures (a dense model). */
static ql_status plot_routing(ql_report_writer *c, group *g, const layout *l, ql_error *err)
{
    (void)l;
    size_t measured = 0;
    for (size_t k = 0; k < g->nlayers; k++)
        measured += !isnan(g->layers[k].route_agree);
    if (!measured)
        return QL_OK;
    ql_doc d;
    ql_status rc = ql_doc_open(&d, err);
    if (rc)
        return rc;
    dat_header(c, g, d.f, "per-block routing of the experts against the reference's");
    fputs("# one block per config; columns: layer route_agree route_overlap load_shift "
          "(shares in %, load_shift 0..1)\n",
          d.f);
    size_t blocks = 0, *shown = calloc(g->nrows ? g->nrows : 1, sizeof *shown);
    if (!shown) {
        ql_doc_discard(&d);
        return ql_report_oom(err);
    }
    double lowest = 100.0;
    char label[512];
    for (size_t k = 0; k < g->nlayers; k++) {
        const ql_report_layer *ly = &g->layers[k];
        if (isnan(ly->route_agree))
            continue;
        if (!blocks || ly->row != shown[blocks - 1]) {
            ql_report_config_label(g, g->rows[ly->row].axis, -1, label, sizeof label);
            fprintf(d.f, "%s# index %zu: %s %s\n", blocks ? "\n\n" : "", blocks, label,
                    g->rows[ly->row].hash);
            shown[blocks++] = ly->row;
        }
        lowest = fmin(lowest, 100.0 * ly->route_agree);
        fprintf(d.f, "%lld", (long long)ly->layer);
        dat_num(d.f, 100.0 * ly->route_agree);
        dat_num(d.f, 100.0 * ly->route_overlap);
        dat_num(d.f, ly->load_shift);
        fputc('\n', d.f);
    }
    char name[1200], base[1100], title[1024];
    snprintf(base, sizeof base, "routing%s", g->suffix);
    snprintf(name, sizeof name, "%s.dat", base);
    if ((rc = ql_report_doc_save(c, &d, name, err))) {
        free(shown);
        return rc;
    }
    ql_strbuf b = {0};
    plot_title(c, g, title, sizeof title);
    ql_strbuf_add(&b, "set title ");
    body_quote(&b, title);
    /* The y range from the lowest agreement down to a round 5 %, up to 100 %. */
    const double bottom = fmax(0.0, 5.0 * floor((lowest - 1.0) / 5.0));
    ql_strbuf_add(&b,
                  "\nset grid\nset xlabel 'block'\n"
                  "set ylabel 'tokens routed to the reference''s experts (%%)'\n"
                  "set yrange [%g:100.5]\n"
                  "set key outside right top font ',10'\nset xtics 1\nplot",
                  bottom);
    for (size_t k = 0; k < blocks; k++) {
        const row *r = &g->rows[shown[k]];
        ql_report_config_label(g, r->axis, -1, label, sizeof label);
        ql_strbuf_add(&b,
                      "%s\\\n  '%s.dat' index %zu using 1:2 with linespoints pt %d ps 0.7 lw 1.6 "
                      "lc rgb '%s' title ",
                      k ? "," : "", base, k, markers[k % N_MARKERS], colours[k % N_COLOURS]);
        body_quote(&b, label);
        ql_strbuf_add(
            &b, ",\\\n  '%s.dat' index %zu using 1:3 with lines dt 2 lw 1 lc rgb '%s' notitle",
            base, k, colours[k % N_COLOURS]);
    }
    ql_strbuf_add(&b, "\n");
    free(shown);
    char header[2600];
    snprintf(header, sizeof header,
             "# qlab report: the routing of each config's experts against the reference's\n"
             "# after every block (solid: the share of scored tokens routed to the same experts;\n"
             "# dashed: the mean share of a token's experts kept). Data: %s.dat. Redraw: gnuplot "
             "%s.gp\nset encoding utf8\n",
             base, base);
    return write_plot_script(c, g, &b, base, 560, header, "routing by block", err);
}

/* ================================================================ sensitivity heatmap */

/* The heatmap's columns: a block's products in block order, then the head and the token
 * embedding, whose layers (n_layer, -1) put each at the top or the bottom of its own
 * column; kinds not listed follow by name. */
static const char *const sens_kinds[] = {"attn_q", "attn_k",   "attn_v", "attn_output", "ffn_gate",
                                         "ffn_up", "ffn_down", "output", "token_embd"};
#define N_SENS_KINDS     (sizeof sens_kinds / sizeof sens_kinds[0])
#define MAX_SENS_COLUMNS 24
/* Layers with a labelled tick each, at most; more get a tick every few layers. */
#define SENS_LAYER_TICKS 24

typedef struct {
    const char *name[MAX_SENS_COLUMNS];
    size_t n;
} sens_columns;

static void sens_make_columns(const ql_report_sens_set *ss, sens_columns *cols)
{
    const char *extra[MAX_SENS_COLUMNS];
    size_t n_extra = 0;
    cols->n = 0;
    for (size_t k = 0; k < N_SENS_KINDS; k++)
        cols->name[cols->n++] = sens_kinds[k];
    for (size_t i = 0; i < ss->nrows; i++) {
        bool listed = false;
        for (size_t k = 0; k < N_SENS_KINDS && !listed; k++)
            listed = strcmp(ss->rows[i].kind, sens_kinds[k]) == 0;
        if (!listed)
            ql_strset_add(extra, &n_extra, MAX_SENS_COLUMNS - N_SENS_KINDS, ss->rows[i].kind);
    }
    for (size_t k = 0; k < n_extra; k++)
        cols->name[cols->n++] = extra[k];
}

/* The column of a kind; -1 for a kind past the columns (not drawn). */
static int sens_column(const sens_columns *cols, const char *kind)
{
    for (size_t k = 0; k < cols->n; k++)
        if (strcmp(cols->name[k], kind) == 0)
            return (int)k;
    return -1;
}

/* The colour of a cell: log10 of the mean KLD; NaN (an empty cell) where that is not
 * positive, as a tensor its type leaves exact measures 0. */
static double sens_log(const ql_report_sens *r)
{
    return r->kld_mean > 0.0 ? log10(r->kld_mean) : (double)NAN;
}

/* "on calib-text, ctx 64, 4 chunks, imatrix none": the set a group shows, and that it
 * is the largest when the model has several. */
static void sens_set_text(const ql_report_sens_set *ss, char *buf, size_t size)
{
    int o = snprintf(buf, size, "on %s, ctx %d, %lld chunks, imatrix %.12s", ss->text, ss->ctx,
                     (long long)ss->chunks, ss->imatrix_sha);
    if (ss->nsets > 1 && o >= 0 && (size_t)o < size)
        snprintf(buf + o, size - (size_t)o, " (the largest of %zu sets)", ss->nsets);
}

/* BASE.dat: one block per type (panel), lowest bits first; a line per tensor: its
 * column, layer, log10 of the mean KLD, the mean KLD and the tensor. */
static ql_status write_sens_dat(ql_report_writer *c, const group *g, const sens_columns *cols,
                                size_t panels, const char *base, ql_error *err)
{
    const ql_report_sens_set *ss = &g->sens;
    char set[512], name[1200];
    ql_doc d;
    ql_status rc = ql_doc_open(&d, err);
    if (rc)
        return rc;
    sens_set_text(ss, set, sizeof set);
    dat_header(c, g, d.f, "per-tensor sensitivity (mean KLD with only that tensor quantized)");
    fprintf(d.f, "# measured %s, metrics version %d\n# kinds:", set, ss->metrics_version);
    for (size_t k = 0; k < cols->n; k++)
        fprintf(d.f, " %zu=%s", k, cols->name[k]);
    fputs("\n# one block per type; columns: kind layer log10_kld_mean kld_mean tensor\n", d.f);
    for (size_t p = 0; p < panels; p++) {
        fprintf(d.f, "%s# index %zu: %s\n", p ? "\n\n" : "", p, ss->types[p]);
        for (size_t i = 0; i < ss->nrows; i++) {
            const ql_report_sens *r = &ss->rows[i];
            int col = sens_column(cols, r->kind);
            if (r->type_ix != (int)p || col < 0)
                continue;
            fprintf(d.f, "%d %lld", col, (long long)r->layer);
            dat_num(d.f, sens_log(r));
            dat_num(d.f, r->kld_mean);
            dat_str(d.f, r->tensor);
            fputc('\n', d.f);
        }
        /* gnuplot needs at least one record in a block to count it. */
        fputs("NaN NaN NaN NaN \"\"\n", d.f);
    }
    snprintf(name, sizeof name, "%s.dat", base);
    return ql_report_doc_save(c, &d, name, err);
}

/* The layer ticks: every layer (every few of many), the embedding's -1 as "embd" and
 * the head's n_layer as "head"; a numbered tick closer to those than its step is left
 * out, as the labels would touch. */
static void sens_layer_ticks(ql_strbuf *b, const ql_report_sens_set *ss, int64_t lo, int64_t hi)
{
    int64_t head = -2, step = (hi - lo + SENS_LAYER_TICKS) / SENS_LAYER_TICKS;
    bool embd = lo == -1;
    for (size_t i = 0; i < ss->nrows; i++)
        if (strcmp(ss->rows[i].kind, "output") == 0)
            head = ss->rows[i].layer;
    ql_strbuf_add(b, "set ytics (");
    const char *sep = "";
    for (int64_t y = lo; y <= hi; y++) {
        bool clear = (!embd || y + 1 >= step) && (head < 0 || head - y >= step);
        if (y == -1)
            ql_strbuf_add(b, "%s'embd' -1", sep);
        else if (y == head)
            ql_strbuf_add(b, "%s'head' %lld", sep, (long long)y);
        else if (y >= 0 && y % step == 0 && clear)
            ql_strbuf_add(b, "%s'%lld' %lld", sep, (long long)y, (long long)y);
        else
            continue;
        sep = ", ";
    }
    ql_strbuf_add(b, ")\n");
}

/* The start of a heatmap script: a grid of `panels` (two across when more than one)
 * under the title, the palette light to dark as the KLD grows, and the colour scale
 * over the log10 KLD range [lo, hi] at whole decades (none when lo > hi: no data). */
static void heatmap_start(ql_strbuf *b, size_t panels, const char *title, double lo, double hi)
{
    const size_t ncols = panels <= 1 ? 1 : 2, nrows = (panels + ncols - 1) / ncols;
    ql_strbuf_add(b, "set multiplot layout %zu,%zu title ", nrows, ncols);
    body_title(b, title);
    ql_strbuf_add(b, "\nset palette defined (0 '#fff7bc', 0.4 '#fe9929', 0.75 '#d7301f', 1 "
                     "'#67000d')\nset cblabel 'log10 mean KLD (nats)'\n");
    if (hi >= lo)
        ql_strbuf_add(b, "set cbrange [%g:%g]\n", floor(lo),
                      ceil(hi) > floor(lo) ? ceil(hi) : floor(lo) + 1.0);
}

/* sensitivity: the measured sensitivities of the group's model (the set with the most
 * rows) as a heatmap per type, tensor kind across, layer up, colour log10 of the mean
 * KLD on a scale the panels share; grey where nothing was measured. Nothing is written
 * when the model has none. */
static ql_status plot_sensitivity(ql_report_writer *c, group *g, const layout *l, ql_error *err)
{
    (void)l;
    const ql_report_sens_set *ss = &g->sens;
    if (!ss->nrows)
        return QL_OK;
    size_t panels = ss->ntypes < MAX_PANELS ? ss->ntypes : MAX_PANELS;
    sens_columns cols;
    sens_make_columns(ss, &cols);
    double lo = (double)INFINITY, hi = -(double)INFINITY;
    int64_t min_layer = ss->rows[0].layer, max_layer = ss->rows[0].layer;
    for (size_t i = 0; i < ss->nrows; i++) {
        const ql_report_sens *r = &ss->rows[i];
        min_layer = r->layer < min_layer ? r->layer : min_layer;
        max_layer = r->layer > max_layer ? r->layer : max_layer;
        if (r->type_ix >= 0 && (size_t)r->type_ix < panels && !isnan(sens_log(r))) {
            lo = fmin(lo, sens_log(r));
            hi = fmax(hi, sens_log(r));
        }
    }
    char base[1100], title[1600], set[512];
    snprintf(base, sizeof base, "sensitivity%s", g->suffix);
    ql_status rc = write_sens_dat(c, g, &cols, panels, base, err);
    if (rc)
        return rc;

    ql_strbuf b = {0};
    sens_set_text(ss, set, sizeof set);
    snprintf(title, sizeof title, "%s: %s — sensitivity %s", c->sweep, g->model, set);
    heatmap_start(&b, panels, title, lo, hi);
    ql_strbuf_add(
        &b,
        "set object 1 rectangle from graph 0, graph 0 to graph 1, graph 1 behind fillcolor "
        "rgb '#e8e8e8' fillstyle solid noborder\n"
        "set xrange [-0.5:%g]\nset yrange [%g:%g]\nset ylabel 'layer'\n"
        "set xtics rotate by 45 right font ',9' (",
        (double)cols.n - 0.5, (double)min_layer - 0.5, (double)max_layer + 0.5);
    for (size_t k = 0; k < cols.n; k++) {
        ql_strbuf_add(&b, "%s", k ? ", " : "");
        body_quote(&b, cols.name[k]);
        ql_strbuf_add(&b, " %zu", k);
    }
    ql_strbuf_add(&b, ")\n");
    sens_layer_ticks(&b, ss, min_layer, max_layer);
    for (size_t p = 0; p < panels; p++) {
        char panel[96];
        if (isnan(ss->type_bpw[p]))
            snprintf(panel, sizeof panel, "%s", ss->types[p]);
        else
            snprintf(panel, sizeof panel, "%s (%.2f bpw)", ss->types[p], ss->type_bpw[p]);
        ql_strbuf_add(&b, "set title ");
        body_quote(&b, panel);
        ql_strbuf_add(&b,
                      "\nplot '%s.dat' index %zu using 1:2:(0.5):(0.5):3 with boxxyerror fillstyle "
                      "solid 1.0 noborder lc palette notitle\n",
                      base, p);
    }
    ql_strbuf_add(&b, "unset multiplot\n");
    char header[2600];
    snprintf(header, sizeof header,
             "# qlab report: the mean KLD of the model with one tensor quantized alone, a panel\n"
             "# per type (%zu of %zu, lowest bits first), colour log10 of the KLD; grey: not\n"
             "# measured. Data: %s.dat. Redraw: gnuplot %s.gp\nset encoding utf8\n",
             panels, ss->ntypes, base, base);
    return write_plot_script(c, g, &b, base, canvas_height(panels), header, "sensitivity heatmap",
                             err);
}

/* sensitivity_experts: a mixture of experts' experts measured one at a time (objective
 * kld:expert): block x expert, a panel per type, colour log10 of the mean KLD with only that
 * expert's three matrices quantized. Nothing is written without expert rows. */
static ql_status plot_sensitivity_experts(ql_report_writer *c, group *g, const layout *l,
                                          ql_error *err)
{
    (void)l;
    const ql_report_sens_set *ss = &g->sens;
    if (!ss->n_erows)
        return QL_OK;
    const size_t panels = ss->ntypes < MAX_PANELS ? ss->ntypes : MAX_PANELS;
    double lo = (double)INFINITY, hi = -(double)INFINITY;
    int64_t min_layer = ss->erows[0].layer, max_layer = ss->erows[0].layer;
    int experts = 0;
    for (size_t i = 0; i < ss->n_erows; i++) {
        const ql_report_sens *r = &ss->erows[i];
        min_layer = r->layer < min_layer ? r->layer : min_layer;
        max_layer = r->layer > max_layer ? r->layer : max_layer;
        experts = r->expert + 1 > experts ? r->expert + 1 : experts;
        if (r->type_ix >= 0 && (size_t)r->type_ix < panels && !isnan(sens_log(r))) {
            lo = fmin(lo, sens_log(r));
            hi = fmax(hi, sens_log(r));
        }
    }
    char base[1100], name[1200], title[1600], set[512];
    snprintf(base, sizeof base, "sensitivity_experts%s", g->suffix);
    ql_doc d;
    ql_status rc = ql_doc_open(&d, err);
    if (rc)
        return rc;
    sens_set_text(ss, set, sizeof set);
    dat_header(c, g, d.f, "per-expert sensitivity (mean KLD with only that expert quantized)");
    fprintf(d.f, "# measured %s, metrics version %d\n", set, ss->metrics_version);
    fputs("# one block per type; columns: expert layer log10_kld_mean kld_mean\n", d.f);
    for (size_t p = 0; p < panels; p++) {
        fprintf(d.f, "%s# index %zu: %s\n", p ? "\n\n" : "", p, ss->types[p]);
        for (size_t i = 0; i < ss->n_erows; i++) {
            const ql_report_sens *r = &ss->erows[i];
            if (r->type_ix != (int)p)
                continue;
            fprintf(d.f, "%d %lld", r->expert, (long long)r->layer);
            dat_num(d.f, sens_log(r));
            dat_num(d.f, r->kld_mean);
            fputc('\n', d.f);
        }
        fputs("NaN NaN NaN NaN\n", d.f);
    }
    snprintf(name, sizeof name, "%s.dat", base);
    if ((rc = ql_report_doc_save(c, &d, name, err)))
        return rc;
    ql_strbuf b = {0};
    snprintf(title, sizeof title, "%s: %s — sensitivity of each expert %s", c->sweep, g->model,
             set);
    heatmap_start(&b, panels, title, lo, hi);
    ql_strbuf_add(
        &b,
        "set object 1 rectangle from graph 0, graph 0 to graph 1, graph 1 behind fillcolor "
        "rgb '#e8e8e8' fillstyle solid noborder\n"
        "set xrange [-0.5:%g]\nset yrange [%g:%g]\nset xlabel 'expert'\n"
        "set ylabel 'layer'\nset xtics %d\nset ytics %lld\n",
        (double)experts - 0.5, (double)min_layer - 0.5, (double)max_layer + 0.5,
        experts > 16 ? experts / 16 : 1,
        max_layer - min_layer > 16 ? (long long)(max_layer - min_layer) / 16 : 1LL);
    for (size_t p = 0; p < panels; p++) {
        char panel[96];
        snprintf(panel, sizeof panel, "%s", ss->types[p]);
        ql_strbuf_add(&b, "set title ");
        body_quote(&b, panel);
        ql_strbuf_add(&b,
                      "\nplot '%s.dat' index %zu using 1:2:(0.5):(0.5):3 with boxxyerror fillstyle "
                      "solid 1.0 noborder lc palette notitle\n",
                      base, p);
    }
    ql_strbuf_add(&b, "unset multiplot\n");
    char header[2600];
    snprintf(header, sizeof header,
             "# qlab report: the mean KLD of the model with one expert's matrices of one block\n"
             "# quantized alone, a panel per type (%zu of %zu, lowest bits first); grey: not\n"
             "# measured. Data: %s.dat. Redraw: gnuplot %s.gp\nset encoding utf8\n",
             panels, ss->ntypes, base, base);
    return write_plot_script(c, g, &b, base, canvas_height(panels), header,
                             "expert sensitivity heatmap", err);
}

/* ================================================================ configs x texts */

/* texts_kld: the mean KLD of every config on each evaluation text of a matrix
 * (report_texts.c), a line per config across the texts, log scale. */
ql_status ql_report_plot_texts(ql_report_writer *c, group *gs, size_t ng, ql_error *err)
{
    ql_status rc = QL_OK;
    for (size_t i = 0; i < ng && !rc; i++) {
        ql_report_texts m;
        if (!ql_report_texts_matrix(gs, ng, i, &m))
            continue;
        group *g = &gs[i];
        char base[1100], name[1200], title[1600];
        snprintf(base, sizeof base, "texts_kld%s", g->suffix);
        ql_doc d;
        if ((rc = ql_doc_open(&d, err))) {
            ql_report_texts_free(&m);
            break;
        }
        fprintf(d.f,
                "# qlab report: mean KLD of each config on each evaluation text\n"
                "# sweep %s: %s, ctx %d, %d chunks\n# texts:",
                c->sweep, g->model, g->ctx, g->chunks);
        for (size_t k = 0; k < m.ncols; k++)
            fprintf(d.f, " %zu=%s", k, gs[m.cols[k]].dataset);
        fputs("\n# one block per config; columns: text kld_mean\n", d.f);
        for (size_t r = 0; r < m.nrows; r++) {
            fprintf(d.f, "%s# index %zu: %s\n", r ? "\n\n" : "", r, m.rows[r].label);
            for (size_t k = 0; k < m.ncols; k++) {
                const row *cell = m.rows[r].cell[k];
                fprintf(d.f, "%zu", k);
                dat_num(d.f, cell ? cell->v[QL_METRIC_kld_mean] : (double)NAN);
                fputc('\n', d.f);
            }
        }
        snprintf(name, sizeof name, "%s.dat", base);
        if ((rc = ql_report_doc_save(c, &d, name, err))) {
            ql_report_texts_free(&m);
            break;
        }
        ql_strbuf b = {0};
        snprintf(title, sizeof title, "%s: %s, ctx %d, %d chunks — mean KLD on each text", c->sweep,
                 g->model, g->ctx, g->chunks);
        ql_strbuf_add(&b, "set title ");
        body_quote(&b, title);
        ql_strbuf_add(&b,
                      "\nset logscale y\nset ylabel 'mean KLD (nats)'\nset grid ytics\n"
                      "set key outside right top\nset xrange [-0.3:%g]\nset xtics (",
                      (double)m.ncols - 0.7);
        for (size_t k = 0; k < m.ncols; k++) {
            ql_strbuf_add(&b, "%s", k ? ", " : "");
            body_quote(&b, gs[m.cols[k]].dataset);
            ql_strbuf_add(&b, " %zu", k);
        }
        ql_strbuf_add(&b, ")\nplot ");
        for (size_t r = 0; r < m.nrows; r++) {
            ql_strbuf_add(
                &b,
                "%s'%s.dat' index %zu using 1:2 with linespoints lw 1.5 pt %d lc rgb '%s' "
                "title ",
                r ? ", \\\n     " : "", base, r, markers[r % N_MARKERS], colours[r % N_COLOURS]);
            body_quote(&b, m.rows[r].label);
        }
        ql_strbuf_add(&b, "\n");
        char header[2600];
        snprintf(header, sizeof header,
                 "# qlab report: the mean KLD of every config on each evaluation text (a line\n"
                 "# per config). Data: %s.dat. Redraw: gnuplot %s.gp\nset encoding utf8\n",
                 base, base);
        const int height = 520 + 18 * (int)(m.nrows > 20 ? m.nrows - 20 : 0);
        rc = write_plot_script(c, g, &b, base, height, header, "mean KLD across texts", err);
        ql_report_texts_free(&m);
    }
    return rc;
}

static ql_status (*const plot_writers[])(ql_report_writer *, group *, const layout *,
                                         ql_error *) = {
    plot_kld_bpw,    plot_ppl_bpw, plot_kld_cdf,     plot_tensors,
    plot_divergence, plot_routing, plot_sensitivity, plot_sensitivity_experts,
};

ql_status ql_report_write_plots(ql_report_writer *c, group *g, ql_error *err)
{
    layout l;
    ql_status rc = make_layout(g, &l, err);
    if (rc)
        return rc;
    rc = write_formats_dat(c, g, &l, err);
    for (size_t k = 0; k < sizeof plot_writers / sizeof plot_writers[0] && !rc; k++)
        rc = plot_writers[k](c, g, &l, err);
    layout_free(&l);
    return rc;
}
