/* qlab: format-comparison tables and plots from the results store (`qlab report`).
 *
 * For every sweep (or the one asked for) the report writes, under
 * OUT/<sweep>/ (the sweep name with characters outside [A-Za-z0-9._+-]
 * replaced by '_'):
 *
 *   report.md       a summary (model, text, ctx, chunks, reference PPL, configs
 *                   done/failed, the axes held fixed), the format-comparison table of
 *                   the configs whose types applied (one row per finished config
 *                   sorted by bpw; "types used" where some fell back), the configs
 *                   that are not applicable (applicability.h) with what they measured,
 *                   the failed configs with their errors, the one-axis comparisons
 *                   with paired-bootstrap intervals (report_pairs.c), the fitted
 *                   configs (budget != none) against every config no larger in bytes
 *                   that is not fitted (measured and predicted KLD, the paired
 *                   difference of mean KLD with its interval), the model's measured
 *                   sensitivities (which set, its size and time, the ten most sensitive
 *                   tensors at the lowest-bit type), links to the plots; what follows
 *                   the table is between <!-- details --> marks
 *   report.html     the same and more columns in one self-contained page, the tables
 *                   sortable, the plots inline (report_html.c)
 *   formats.csv     the rows with full-precision values, every axis and CSV metric
 *   formats.dat     plot data: one block per panel and series (report_plot.c)
 *   pareto_kld.dat  the configs on the Pareto front in (bpw, mean KLD)
 *   pareto_ppl.dat  the same in (bpw, PPL)
 *   kld_bpw.gp      gnuplot script -> kld_bpw.png, kld_bpw.svg (log-scale y)
 *   ppl_bpw.gp      gnuplot script -> ppl_bpw.png, ppl_bpw.svg (not for synth: models)
 *   kld_cdf.dat/.gp -> .png, .svg: the KLD distribution of every config
 *   tensors-<hash12>.dat/.gp -> .png, .svg: per-tensor error by layer and
 *                   tensor class for one config, fallbacks marked
 *   divergence.dat/.gp -> .png, .svg: the residual stream's divergence by layer
 *   sensitivity.dat/.gp -> .png, .svg: the sensitivity table's rows for the model
 *                   as a heatmap per type (tensor kind across, layer up, colour
 *                   log10 of the mean KLD); of several sets (text, ctx, chunks,
 *                   importance matrix, metrics version) the one with the most rows
 *   sensitivity.csv those rows, full precision, once per model of the sweep
 *
 * A sweep whose runs span several (model, text, ctx, chunks) groups gets one
 * section per group in report.md (groups ordered by model, text, ctx, chunks),
 * one CSV with the group columns, and plot files with a suffix
 * "-<model>-<text>-ctx<N>-c<chunks>" per group.
 *
 * Table rows are sorted by bpw (NULL last), then by the axes (weight type,
 * act mode, outlier ratio, head, embd, KV type, imatrix, budget) and the
 * config hash, so the order is total. Markdown columns: the weight type, the
 * other axes that vary within the group, "types used" when a config's types applied
 * in part only, then the metrics the metric list gives
 * a label, in its report order (today bpw, size, PPL ± err, ΔPPL, KLD mean, KLD
 * p99, top-1 %, max |Δp| and the relative imatrix-weighted weight error); a
 * metric column with no value in any row is left out of the Markdown unless the
 * list keeps it (the CSV keeps it). Missing values are "—" in Markdown and empty
 * in CSV. Numbers have the list's formats; nothing
 * depends on the time or the machine, so the same database gives
 * byte-identical tables and data files. Images are not compared.
 *
 * Per-tensor plot: the config given by a hash prefix, or by default the run
 * with the largest mean KLD among those with per-tensor errors (ties: lower
 * bpw, then hash): the format that suffers most shows where its error sits.
 * The metric is imatrix_err_rel when every block tensor has it, else rmse.
 *
 * The report reads everything it shows first, in one read transaction (a
 * consistent snapshot of a store a sweep may be writing), and only then writes:
 * a database failure leaves every output file as it was.
 *
 * Columns, labels, formats and the legend come from the metric and axis lists
 * (experiment/records.h, experiment/config.h).
 *
 * gnuplot is optional: without it on PATH, or when it fails on a plot, every table,
 * data file and other plot is still written and the summary says which plots were
 * left out and why; that is not an error. report.md and report.html link the images
 * of the plots drawn and the scripts of the others.
 *
 * Plots against bpw are laid out for crowded sweeps (report_plot.c): the legend below
 * the panels at their full width, one label per cluster of points of a weight type,
 * placed where it covers no point, error bar or other label (ql_plot_label_points),
 * else the cluster's number, listed in a key under the plot and in report.md. */
#ifndef QL_REPORT_H
#define QL_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "base/error.h"
#include "results/report_options.h"
#include "results/store.h"

/* Writes the report. Every sweep stands alone: a plot gnuplot fails on is left out
 * (its script stays, report.md and report.html link the script instead of images) and
 * named in the summary with gnuplot's message; a sweep whose files cannot be written
 * does not stop the others. Errors: no sweep in the store, an unknown sweep name, a
 * --tensors prefix that matches no finished config of the reported sweeps or several,
 * database errors (nothing written); after writing the other sweeps, the first sweep
 * that could not be written ("sweep NAME: ..."; every one is in the summary).
 * gnuplot missing or failing is not an error. The summary is filled in every case
 * (ql_report_summary_deinit frees it). */
ql_status ql_report_write(ql_store *s, const ql_report_options *opt, ql_report_summary *summary,
                          ql_error *err);

#endif
