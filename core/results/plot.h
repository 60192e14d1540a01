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
bool ql_gnuplot_find(char *path, size_t size);

/* Runs `gnuplot SCRIPT` with dir as the working directory and waits for it.
 * QL_ENOTFOUND when gnuplot is not on PATH; QL_EEXTERNAL when it cannot be
 * started, is killed or exits non-zero, with its first lines of stderr in the
 * message. gnuplot's output is not passed through (warnings are dropped when it
 * succeeds). */
ql_status ql_gnuplot_run(const char *dir, const char *script, ql_error *err);

/* Checks that path holds a PNG image: the 8-byte signature, an IHDR chunk with
 * a non-zero width and height, and at least min_bytes bytes. */
ql_status ql_png_check(const char *path, size_t min_bytes, ql_error *err);

/* Runs dir/script (ql_gnuplot_run), then checks the images it must have
 * written: dir/<base>.png (ql_png_check with QL_PLOT_PNG_MIN_BYTES) and
 * dir/<base>.svg (an SVG document). A missing or broken image is QL_EEXTERNAL. */
ql_status ql_plot_render(const char *dir, const char *script, const char *base, ql_error *err);

/* ql_plot_render for a program whose plots are optional (the report, the
 * notebooks): when the plot was drawn, prints "  dir/base.png" and
 * "  dir/base.svg" to log (NULL = quiet). A failure is returned for the caller
 * to report as a skipped plot with its reason, not as an error. */
ql_status ql_plot_draw(const char *dir, const char *script, const char *base, FILE *log,
                       ql_error *err);

/* Writes s as a gnuplot single-quoted string ('' escapes a quote). */
void ql_gnuplot_quote(FILE *out, const char *s);

/* The terminals every qlab plot is drawn with: PNG through cairo and SVG. */
#define QL_PLOT_PNG_TERMINAL "pngcairo size 960,600 font 'sans,11' noenhanced"
#define QL_PLOT_SVG_TERMINAL "svg size 960,600 font 'sans,11' noenhanced background rgb 'white'"

/* A plotted PNG smaller than this is not a real plot: at 960x600 an empty
 * canvas compresses to about 3 KB and bare axes without data to about 7 KB,
 * while qlab's plots (points, lines, labels, key) take 30 KB and more. */
#define QL_PLOT_PNG_MIN_BYTES 8192

#endif
