/* The report's single page (report_html.h): report.html per sweep, self-contained
 * (no network, no external file or script): per group the summary, the table of the
 * compared configs with more columns than report.md (sortable by a click on a header,
 * by a short inline script), the configs that are not applicable, the failures, every
 * plot of the group as inline SVG (the .svg gnuplot drew; a plot not drawn says so)
 * and the one-axis comparisons. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/table.h"
#include "base/util.h"
#include "results/report_html.h"

typedef ql_report_row row;
typedef ql_report_group group;

/* Columns of the page's table beyond report.md's: the further distribution metrics. */
static const ql_metric_id extra_cols[] = {
    QL_METRIC_rkld_mean,      QL_METRIC_kld_median,      QL_METRIC_kld_p90,
    QL_METRIC_kld_p999,       QL_METRIC_kld_max,         QL_METRIC_dp_rms,
    QL_METRIC_top5_ref_in_q,  QL_METRIC_top10_ref_in_q,  QL_METRIC_top5_q_in_ref,
    QL_METRIC_kld_conf_0_25,  QL_METRIC_kld_conf_25_50,  QL_METRIC_kld_conf_50_75,
    QL_METRIC_kld_conf_75_95, QL_METRIC_kld_conf_95_100, QL_METRIC_applied_body,
};

static const char style[] =
    "body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1400px}"
    "h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}h3{font-size:1em}"
    "table{border-collapse:collapse;font-size:13px;margin:0.5em 0}"
    "th,td{border:1px solid #ccc;padding:2px 6px;white-space:nowrap}"
    "th{background:#f0f0f0;cursor:pointer;user-select:none}"
    "th[aria-sort=ascending]::after{content:' \\25B2'}"
    "th[aria-sort=descending]::after{content:' \\25BC'}"
    "td.n{text-align:right;font-variant-numeric:tabular-nums}"
    ".scroll{overflow-x:auto}figure{margin:1em 0}figcaption{font-size:13px;color:#555}"
    "svg{max-width:100%;height:auto}.note{font-size:13px;color:#555}";

/* Sorts a table by the clicked column: numbers by data-v, text otherwise; a second
 * click reverses. "report.html#sort=N" (or #sort=N-desc) opens the first table sorted
 * by its column N (from 0), a link to a sorted view. Marks the page once set up (the
 * browser test looks for it). */
static const char script[] =
    "(function(){\n"
    "function key(td){var v=td.getAttribute('data-v');"
    "return v===null?td.textContent:(v===''?NaN:parseFloat(v));}\n"
    "function sort(th){var tr=th.parentNode,table=tr.closest('table'),i=Array.prototype"
    ".indexOf.call(tr.children,th),up=th.getAttribute('aria-sort')!=='ascending',"
    "body=table.tBodies[0],rows=Array.prototype.slice.call(body.rows);\n"
    "rows.sort(function(a,b){var x=key(a.cells[i]),y=key(b.cells[i]);"
    "if(typeof x==='number'&&typeof y==='number'){if(isNaN(x))return 1;if(isNaN(y))return -1;"
    "return up?x-y:y-x;}return up?String(x).localeCompare(y):String(y).localeCompare(x);});\n"
    "rows.forEach(function(r){body.appendChild(r);});"
    "Array.prototype.forEach.call(tr.children,function(h){h.removeAttribute('aria-sort');});"
    "th.setAttribute('aria-sort',up?'ascending':'descending');}\n"
    "document.querySelectorAll('table.sortable th').forEach(function(th){"
    "th.addEventListener('click',function(){sort(th);});});\n"
    "var m=/^#sort=(\\d+)(-desc)?$/.exec(location.hash),t=document.querySelector("
    "'table.sortable');\n"
    "if(m&&t){var th=t.tHead.rows[0].cells[+m[1]];if(th){sort(th);if(m[2])sort(th);}}\n"
    "document.documentElement.setAttribute('data-sortable','ready');\n"
    "})();\n";

/* Text with &, <, > and " escaped. */
static void esc(FILE *f, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
}

/* report.md's summary lines as a list (their Markdown is plain text but for "- "). */
static ql_status summary(const group *g, FILE *f, ql_error *err)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return ql_report_oom(err);
    ql_report_md_summary(g, m);
    fclose(m);
    fputs("<ul>\n", f);
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        fputs("<li>", f);
        esc(f, strncmp(line, "- ", 2) == 0 ? line + 2 : line);
        fputs("</li>\n", f);
    }
    fputs("</ul>\n", f);
    free(text);
    return QL_OK;
}

/* The group's warnings (report_texts.c), as report.md lists them. */
static void warnings(const group *g, FILE *f)
{
    bool any = false;
    for (size_t i = 0; i < g->nrows; i++) {
        char lines[3][256];
        const size_t n = ql_report_row_warnings(&g->rows[i], lines, 3);
        for (size_t k = 0; k < n; k++) {
            if (!any)
                fputs("<p class=\"warn\">Warnings:</p>\n<ul>\n", f);
            any = true;
            char label[512];
            ql_report_config_label(g, g->rows[i].axis, -1, label, sizeof label);
            fputs("<li><b>", f);
            esc(f, label);
            fputs("</b>: ", f);
            esc(f, lines[k]);
            fputs("</li>\n", f);
        }
    }
    if (any)
        fputs("</ul>\n", f);
}

/* The config x text matrices, as report.md has them. */
static void texts_matrices(const group *gs, size_t ng, FILE *f)
{
    for (size_t i = 0; i < ng; i++) {
        ql_report_texts m;
        if (!ql_report_texts_matrix(gs, ng, i, &m))
            continue;
        fputs("<h2>Configs × texts · ", f);
        esc(f, gs[i].model);
        fprintf(f, " · ctx %d · %d chunks</h2>\n", gs[i].ctx, gs[i].chunks);
        for (int kld = 1; kld >= 0; kld--) {
            fprintf(f, "<p>%s, each text against its own reference.</p>\n",
                    kld ? "Mean KLD"
                        : "ln(PPL(Q)/PPL(ref)) ± its paired standard error ((!): below the "
                          "reference beyond its interval, look at KLD)");
            fputs("<div class=\"scroll\"><table class=\"sortable\">\n<thead><tr><th>config</th>",
                  f);
            for (size_t k = 0; k < m.ncols; k++) {
                fputs("<th>", f);
                esc(f, gs[m.cols[k]].dataset);
                fputs("</th>", f);
            }
            fputs("</tr></thead>\n<tbody>\n", f);
            for (size_t r = 0; r < m.nrows; r++) {
                fputs("<tr><td>", f);
                esc(f, m.rows[r].label);
                fputs("</td>", f);
                for (size_t k = 0; k < m.ncols; k++) {
                    char cell[96];
                    ql_report_texts_cell(m.rows[r].cell[k], kld != 0, cell, sizeof cell);
                    fputs("<td class=\"n\">", f);
                    esc(f, cell);
                    fputs("</td>", f);
                }
                fputs("</tr>\n", f);
            }
            fputs("</tbody></table></div>\n", f);
        }
        /* Each importance matrix against imatrix none, as report.md has it. */
        bool any = false;
        char cell[96];
        for (size_t r = 0; r < m.nrows && !any; r++)
            for (size_t k = 0; k < m.ncols && !any; k++)
                any = ql_report_texts_effect(&gs[m.cols[k]], m.rows[r].cell[k], cell, sizeof cell);
        if (any) {
            fputs("<p>What each importance matrix does to the mean KLD on each text, against the "
                  "same config with imatrix none (95% paired-bootstrap interval; *: it excludes "
                  "0).</p>\n<div class=\"scroll\"><table class=\"sortable\">\n<thead><tr>"
                  "<th>config</th>",
                  f);
            for (size_t k = 0; k < m.ncols; k++) {
                fputs("<th>", f);
                esc(f, gs[m.cols[k]].dataset);
                fputs("</th>", f);
            }
            fputs("</tr></thead>\n<tbody>\n", f);
            for (size_t r = 0; r < m.nrows; r++) {
                bool row_any = false;
                for (size_t k = 0; k < m.ncols; k++)
                    row_any = ql_report_texts_effect(&gs[m.cols[k]], m.rows[r].cell[k], cell,
                                                     sizeof cell) ||
                              row_any;
                if (!row_any)
                    continue;
                fputs("<tr><td>", f);
                esc(f, m.rows[r].label);
                fputs("</td>", f);
                for (size_t k = 0; k < m.ncols; k++) {
                    ql_report_texts_effect(&gs[m.cols[k]], m.rows[r].cell[k], cell, sizeof cell);
                    fputs("<td class=\"n\">", f);
                    esc(f, cell);
                    fputs("</td>", f);
                }
                fputs("</tr>\n", f);
            }
            fputs("</tbody></table></div>\n", f);
        }
        ql_report_texts_free(&m);
    }
}

static const char *header_of(ql_metric_id id)
{
    const ql_metric_info *mi = ql_metric_get(id);
    return mi->label ? mi->label : mi->name;
}

/* A numeric cell: the value as shown, the exact value to sort by. */
static void num_cell(FILE *f, const row *r, ql_metric_id id)
{
    char text[160], exact[40];
    ql_report_metric_text(r, id, text, sizeof text);
    fprintf(f, "<td class=\"n\" data-v=\"%s\">",
            isnan(r->v[id]) ? "" : ql_fmt_exact(r->v[id], exact, sizeof exact));
    esc(f, *text ? text : "—");
    fputs("</td>", f);
}

static void table(const group *g, FILE *f)
{
    ql_metric_id ids[QL_N_METRICS + sizeof extra_cols / sizeof extra_cols[0]];
    size_t nm = ql_report_md_metrics(ids);
    for (size_t k = 0; k < sizeof extra_cols / sizeof extra_cols[0]; k++)
        ids[nm++] = extra_cols[k];
    /* Metric columns with no value in any row go, as in report.md. */
    bool shown[sizeof ids / sizeof ids[0]];
    bool partial = false;
    for (size_t m = 0; m < nm; m++) {
        shown[m] = (ql_metric_get(ids[m])->flags & QL_METRIC_KEEP) != 0;
        for (size_t i = 0; i < g->nrows && !shown[m]; i++)
            shown[m] = ql_report_row_compared(&g->rows[i]) && !isnan(g->rows[i].v[ids[m]]);
    }
    for (size_t i = 0; i < g->nrows; i++)
        partial = partial || g->rows[i].applies == QL_APPLIES_PARTIAL;
    fputs("<div class=\"scroll\"><table class=\"sortable\">\n<thead><tr>", f);
    bool files = false;
    for (size_t i = 0; i < g->nrows; i++)
        files = files || (ql_report_row_compared(&g->rows[i]) &&
                          ql_report_is_file(g->rows[i].axis[QL_AXIS_WEIGHT_TYPE], NULL));
    for (int a = 0; a < QL_AXIS_COUNT; a++)
        if (a == QL_AXIS_WEIGHT_TYPE || g->varies[a]) {
            fputs("<th>", f);
            esc(f, ql_axis_get((ql_axis)a)->label);
            fputs("</th>", f);
        }
    if (partial)
        fputs("<th>types used</th>", f);
    for (size_t m = 0; m < nm; m++)
        if (shown[m]) {
            fprintf(f, "<th title=\"%s\">", ql_metric_get(ids[m])->name);
            esc(f, header_of(ids[m]));
            fputs("</th>", f);
        }
    if (files)
        fputs("<th title=\"the SHA-256 of a file config's file\">file sha256</th>", f);
    fputs("</tr></thead>\n<tbody>\n", f);
    for (size_t i = 0; i < g->nrows; i++) {
        const row *r = &g->rows[i];
        if (!ql_report_row_compared(r))
            continue;
        char sha[65];
        const bool file = ql_report_is_file(r->axis[QL_AXIS_WEIGHT_TYPE], sha);
        fputs("<tr>", f);
        for (int a = 0; a < QL_AXIS_COUNT; a++)
            if (a == QL_AXIS_WEIGHT_TYPE || g->varies[a]) {
                char cell[QL_CONFIG_VALUE_MAX];
                /* A file by its name; the whole value (path and hash) on hover. */
                if (a == QL_AXIS_WEIGHT_TYPE && file) {
                    fputs("<td title=\"", f);
                    esc(f, r->axis[a]);
                    fputs("\">", f);
                } else {
                    fputs("<td>", f);
                }
                esc(f, ql_report_axis_cell(g, r->axis, a, cell, sizeof cell));
                fputs("</td>", f);
            }
        if (partial) {
            fputs("<td>", f);
            esc(f, r->types_used);
            fputs("</td>", f);
        }
        for (size_t m = 0; m < nm; m++)
            if (shown[m])
                num_cell(f, r, ids[m]);
        if (files && file && sha[0])
            fprintf(f, "<td title=\"%s\"><code>%.12s</code></td>", sha, sha);
        else if (files)
            fputs("<td>—</td>", f);
        fputs("</tr>\n", f);
    }
    fputs("</tbody></table></div>\n", f);
}

static void not_applicable(const group *g, FILE *f)
{
    bool any = false;
    for (size_t i = 0; i < g->nrows; i++) {
        const row *r = &g->rows[i];
        if (ql_report_row_compared(r))
            continue;
        if (!any)
            fputs("<h3>Not applicable</h3>\n<p class=\"note\">The types these configs name "
                  "applied to no tensor of their class; they are left out of the table, the "
                  "fronts and the comparisons.</p>\n<ul>\n",
                  f);
        any = true;
        char label[512];
        ql_report_config_label(g, r->axis, -1, label, sizeof label);
        fputs("<li>", f);
        esc(f, label);
        fputs(": measured ", f);
        esc(f, r->types_used);
        if (*r->fallback_note) {
            fputs(" (", f);
            esc(f, r->fallback_note);
            fputs(")", f);
        }
        fputs("</li>\n", f);
    }
    if (any)
        fputs("</ul>\n", f);
}

static void failures(const group *g, FILE *f)
{
    if (!g->nfails)
        return;
    fputs("<h3>Failed</h3>\n<ul>\n", f);
    for (size_t i = 0; i < g->nfails; i++) {
        char label[512];
        ql_report_config_label(g, g->fails[i].axis, -1, label, sizeof label);
        fputs("<li>", f);
        esc(f, label);
        fputs(": ", f);
        esc(f, g->fails[i].error);
        fputs("</li>\n", f);
    }
    fputs("</ul>\n", f);
}

static void pairs(const group *g, FILE *f)
{
    if (*g->pairs_note) {
        fputs("<p class=\"note\">", f);
        esc(f, g->pairs_note);
        fputs(".</p>\n", f);
        return;
    }
    if (!g->npairs)
        return;
    ql_bootstrap_opts o;
    ql_bootstrap_opts_init(&o);
    fprintf(f,
            "<h3>One axis at a time</h3>\n<p class=\"note\">B − A on the same tokens (mean "
            "KLD, ln PPL, top-1 in percentage points), %g%% paired-bootstrap intervals over the "
            "%d chunks; * where the interval excludes zero.</p>\n",
            100.0 * o.level, g->chunks);
    for (int a = 0; a < QL_AXIS_COUNT; a++) {
        bool any = false;
        for (size_t i = 0; i < g->npairs; i++) {
            const ql_report_pair *p = &g->pairs[i];
            if (p->axis != a)
                continue;
            const char *label = ql_axis_get((ql_axis)a)->label;
            if (!any)
                fprintf(f,
                        "<p>%s:</p>\n<div class=\"scroll\"><table class=\"sortable\">\n"
                        "<thead><tr><th>%s</th><th>%s A</th><th>%s B</th><th>Δ mean KLD</th>"
                        "<th>Δ ln PPL</th><th>Δ top-1</th></tr></thead>\n<tbody>\n",
                        ql_axis_name((ql_axis)a),
                        a == QL_AXIS_WEIGHT_TYPE ? "other axes" : "config", label, label);
            any = true;
            char rest[512], cells[QL_CMP_STATS][96], exact[40];
            ql_report_pair_cells(g, p, rest, sizeof rest, cells);
            char va[QL_CONFIG_VALUE_MAX], vb[QL_CONFIG_VALUE_MAX];
            fputs("<tr><td>", f);
            esc(f, *rest ? rest : "—");
            fputs("</td><td>", f);
            esc(f, ql_report_axis_cell(g, g->rows[p->a].axis, a, va, sizeof va));
            fputs("</td><td>", f);
            esc(f, ql_report_axis_cell(g, g->rows[p->b].axis, a, vb, sizeof vb));
            fputs("</td>", f);
            for (int k = 0; k < QL_CMP_STATS; k++) {
                const ql_compare_value *v = &p->cmp.v[k];
                fprintf(f, "<td class=\"n\" data-v=\"%s\">",
                        v->ok ? ql_fmt_exact(v->diff.estimate, exact, sizeof exact) : "");
                esc(f, *cells[k] ? cells[k] : "—");
                fputs("</td>", f);
            }
            fputs("</tr>\n", f);
        }
        if (any)
            fputs("</tbody></table></div>\n", f);
    }
}

/* The group's plots as inline SVG, from the files gnuplot wrote now; a plot not drawn
 * says so and links its script (only files that are there). */
static void plots(ql_report_writer *c, const group *g, FILE *f)
{
    for (size_t i = 0; i < g->nplots; i++) {
        char path[5200];
        snprintf(path, sizeof path, "%s/%s.svg", c->dir, g->plots[i]);
        char *svg = NULL;
        size_t len = 0;
        ql_error e;
        const char *start = NULL;
        if (g->plot_drawn[i] && ql_file_read_all(path, &svg, &len, &e) == QL_OK)
            start = strstr(svg, "<svg");
        fputs("<figure>\n", f);
        if (start)
            fputs(start, f);
        else
            fputs("<p class=\"note\">(not drawn: plots were not asked for, gnuplot is not "
                  "installed, or it failed on this plot's script; qlab report said which)</p>\n",
                  f);
        fputs("<figcaption>", f);
        esc(f, g->plot_titles[i]);
        if (start)
            fprintf(f, " — <a href=\"%s.svg\">%s.svg</a>, data and script: %s.gp", g->plots[i],
                    g->plots[i], g->plots[i]);
        else
            fprintf(f, " — its gnuplot script: <a href=\"%s.gp\">%s.gp</a>", g->plots[i],
                    g->plots[i]);
        fputs("</figcaption>\n</figure>\n", f);
        free(svg);
    }
}

/* The key of the plots' numbered labels (as report.md's). */
static void numbered(const group *g, FILE *f)
{
    if (!g->nnumbered)
        return;
    fputs("<p>Numbered points (no room on the plot for their labels):</p>\n<div "
          "class=\"scroll\"><table>\n<thead><tr><th>plot</th><th>#</th><th>weights</th>"
          "<th>configs</th></tr></thead>\n<tbody>\n",
          f);
    for (size_t i = 0; i < g->nnumbered; i++) {
        const ql_report_numbered *nb = &g->numbered[i];
        fputs("<tr><td>", f);
        esc(f, nb->plot_title);
        if (nb->number)
            fprintf(f, "</td><td class=\"n\">%d</td><td>", nb->number);
        else
            fputs("</td><td>(no room)</td><td>", f);
        esc(f, nb->text);
        fputs("</td><td>", f);
        esc(f, nb->configs);
        fputs("</td></tr>\n", f);
    }
    fputs("</tbody></table></div>\n", f);
}

ql_status ql_report_write_html(ql_report_writer *c, group *gs, size_t ng, ql_error *err)
{
    ql_doc d;
    ql_status rc = ql_doc_open(&d, err);
    if (rc)
        return rc;
    FILE *f = d.f;
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>qlab "
          "report: ",
          f);
    esc(f, c->sweep);
    fprintf(f, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>Sweep ", style);
    esc(f, c->sweep);
    fputs("</h1>\n<p class=\"note\">Written by <code>qlab report</code>; the same tables as "
          "<a href=\"report.md\">report.md</a> and <a href=\"formats.csv\">formats.csv</a>, "
          "with more columns. Click a column header to sort.</p>\n",
          f);
    for (size_t i = 0; i < ng && !rc; i++) {
        const group *g = &gs[i];
        if (ng > 1) {
            fputs("<h2>", f);
            esc(f, g->model);
            fprintf(f, " · ");
            esc(f, g->dataset);
            fprintf(f, " · ctx %d · %d chunks</h2>\n", g->ctx, g->chunks);
        }
        if ((rc = summary(g, f, err)))
            break;
        if (g->nrows)
            table(g, f);
        else
            fputs("<p>No finished configs.</p>\n", f);
        not_applicable(g, f);
        warnings(g, f);
        failures(g, f);
        plots(c, g, f);
        numbered(g, f);
        pairs(g, f);
    }
    texts_matrices(gs, ng, f);
    fprintf(f, "<script>\n%s</script>\n</body>\n</html>\n", script);
    if (rc) {
        ql_doc_discard(&d);
        return rc;
    }
    return ql_report_doc_save(c, &d, "report.html", err);
}
