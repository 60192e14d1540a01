/* qlab: plots through gnuplot as an external program.
 *
 * qlab writes a gnuplot script and its data files next to each other and runs
 * `gnuplot SCRIPT` in that directory, so a researcher can restyle a plot and
 * rerun the same command. Scripts use relative file names only.
 *
 * gnuplot is optional: when it is not on PATH, or fails, callers still write
 * their tables and report that the plots were skipped and why. */
#ifndef QL_PLOT_H
#define QL_PLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "base/error.h"

/* Looks for an executable `gnuplot` in the directories of $PATH; fills path
 * (may be NULL) and returns true when found. */
bool ql_plot_find_gnuplot(char *path, size_t size);

/* Runs `gnuplot SCRIPT` with dir as the working directory and waits for it.
 * QL_ENOTFOUND when gnuplot is not on PATH; QL_EEXTERNAL when it cannot be
 * started, is killed or exits non-zero, with its first lines of stderr in the
 * message. gnuplot's output is not passed through (warnings are dropped when it
 * succeeds). */
ql_status ql_plot_run_gnuplot(const char *dir, const char *script, ql_error *err);

/* Checks that path holds a PNG image: the 8-byte signature, an IHDR chunk with
 * a non-zero width and height, and at least min_bytes bytes. */
ql_status ql_png_check(const char *path, size_t min_bytes, ql_error *err);

/* Runs dir/script (ql_plot_run_gnuplot), then checks the images it must have
 * written: dir/<base>.png (ql_png_check with QL_PLOT_PNG_MIN_BYTES) and
 * dir/<base>.svg (an SVG document). A missing or broken image is QL_EEXTERNAL. */
ql_status ql_plot_render(const char *dir, const char *script, const char *base, ql_error *err);

/* ql_plot_render for a program whose plots are optional (the report, the
 * notebooks): when the plot was drawn, prints "  dir/base.png" and
 * "  dir/base.svg" to log (NULL = quiet). A failure is returned for the caller
 * to report as a skipped plot with its reason, not as an error. */
ql_status ql_plot_draw(const char *dir, const char *script, const char *base, FILE *log,
                       ql_error *err);

/* ---------------------------------------------------------------- label placement
 *
 * Where the labels of a plot's points go, computed before gnuplot draws them (the plot
 * area sits at fixed screen coordinates, so a point's place on the canvas is known).
 * Coordinates are pixels, y up. Each label names an anchor (a point, or the box of a
 * cluster of points) and is tried, first for every label, right next to its anchor
 * (above, below, right, left, then the corners), then further out in rings joined to
 * the anchor by a leader line, and when its text fits nowhere, as its number (the
 * plot's key of numbers tells what it stands for). A place is taken only when the box
 * lies inside the area, clear of every obstacle (the points, their error bars), of
 * every label placed before and of their leader lines, and when its own leader line
 * crosses no label placed before. A label that fits nowhere even as a number is
 * QL_LABEL_NONE (not drawn). The result depends on nothing but the input: the same
 * points give the same labels, byte for byte in the scripts. */

typedef struct {
    double x0, y0, x1, y1; /* pixels, y up; x0 <= x1, y0 <= y1 */
} ql_plot_box;

typedef enum {
    QL_LABEL_NONE,   /* no room, not even for the number */
    QL_LABEL_TEXT,   /* the text at box */
    QL_LABEL_NUMBER, /* its number at box */
} ql_label_how;

typedef struct {
    ql_plot_box anchor; /* what the label names */
    double w, h;        /* its box at its text */
    double num_w;       /* its box's width at its number (of the same height) */
} ql_label_in;

typedef struct {
    ql_label_how how;
    ql_plot_box box;
    bool leader; /* apart from the anchor: a line joins it to the anchor's box */
    int number;  /* QL_LABEL_NUMBER: 1, 2, ... in label order; 0 otherwise */
} ql_label_out;

/* Places the n labels of `in` inside area among the obstacles (see above) into out[n].
 * Returns false when memory for the bookkeeping ran out (out is then all NONE). */
bool ql_plot_place_labels(const ql_plot_box *area, const ql_plot_box *obstacles, size_t n_obstacles,
                          const ql_label_in *in, size_t n, ql_label_out *out);

/* Whether two boxes overlap (touching edges do not). */
bool ql_plot_boxes_overlap(const ql_plot_box *a, const ql_plot_box *b);

/* Whether the segment (ax, ay)-(bx, by) passes through the inside of box b. */
bool ql_plot_segment_hits(double ax, double ay, double bx, double by, const ql_plot_box *b);

/* The leader line of a label placed apart: from the anchor's box to the label's box,
 * between their nearest points (a segment of length 0 when they touch). */
void ql_plot_leader(const ql_plot_box *anchor, const ql_plot_box *label, double *ax, double *ay,
                    double *bx, double *by);

/* ---------------------------------------------------------------- labels of a panel's points
 *
 * The labels of a plot of points with error bars (the report's plots against bits per
 * weight), as a pure function of the points, the panel's frame and the labels' sizes.
 * Points of one kind (the report's: one weight type) within QL_PLOT_CLUSTER_PX pixels of
 * each other, directly or through other points of that kind, form a cluster that gets
 * one label, anchored on the box around its markers; the labels, in the order of their
 * clusters' first points, are placed by ql_plot_place_labels inside the plot area (off
 * its frame by QL_PLOT_AREA_INSET) among the markers (radius QL_PLOT_MARK_R), the error
 * bars (half width QL_PLOT_BAR_R) and a horizontal reference line. */

/* A marker (gnuplot's pointsize 1.2) keeps this radius free; an error bar this half
 * width; the reference line this half height. */
#define QL_PLOT_MARK_R     5.0
#define QL_PLOT_BAR_R      3.0
#define QL_PLOT_LINE_R     1.0
#define QL_PLOT_CLUSTER_PX 26.0 /* points of one kind this close share a label */
#define QL_PLOT_AREA_INSET 2.0  /* labels keep this far inside the plot area's frame */

/* A panel: its plot area on the canvas (pixels, y down) and the data at its edges. */
typedef struct {
    double x0, x1, y0, y1;     /* the plot area: left, right, top, bottom */
    double xlo, xhi, ylo, yhi; /* the axis ranges; ylo > 0 on a log axis */
    bool log_y;
} ql_plot_frame;

/* Data to canvas pixels of a frame (y down; log scale when the frame's y is). */
double ql_plot_frame_x(const ql_plot_frame *f, double x);
double ql_plot_frame_y(const ql_plot_frame *f, double y);

/* A point to label: drawable on the frame (finite; y > 0 on a log axis). */
typedef struct {
    double x, y; /* data */
    double err;  /* the error bar: y ± err; NAN or <= 0: none */
    size_t kind; /* what it is (the report's weight type): an index into the label sizes */
} ql_plot_point;

/* A kind's label: its box at its text and at its number (same height). */
typedef struct {
    double w, h, num_w;
} ql_label_size;

/* One cluster's label: its anchor and sizes (ql_label_in, y up as ql_plot_place_labels
 * takes them: the canvas's y negated) and where it went. */
typedef struct {
    size_t first; /* the cluster's first point */
    ql_label_in in;
    ql_label_out out;
} ql_point_label;

/* Labels the n points of frame f: cluster_of[i] gets point i's label index, labels[] the
 * labels (at most n) in the order of their first points, *n_labels how many. ref_y: the
 * data y of a horizontal line across the area no label may cover (NAN: none). The same
 * input gives the same output. Returns false when memory ran out (no label placed). */
bool ql_plot_label_points(const ql_plot_frame *f, double ref_y, const ql_plot_point *pts, size_t n,
                          const ql_label_size *sizes, size_t *cluster_of, ql_point_label *labels,
                          size_t *n_labels);

/* Writes s as a gnuplot single-quoted string ('' escapes a quote). */
void ql_plot_quote(FILE *out, const char *s);

/* The terminals every qlab plot is drawn with: PNG through cairo and SVG. */
#define QL_PLOT_PNG_TERMINAL "pngcairo size 960,600 font 'sans,11' noenhanced"
#define QL_PLOT_SVG_TERMINAL "svg size 960,600 font 'sans,11' noenhanced background rgb 'white'"

/* A plotted PNG smaller than this is not a real plot: at 960x600 an empty
 * canvas compresses to about 3 KB and bare axes without data to about 7 KB,
 * while qlab's plots (points, lines, labels, key) take 30 KB and more. */
#define QL_PLOT_PNG_MIN_BYTES 8192

#endif
