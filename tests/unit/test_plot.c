/* The plots' label placement (plot.h, ql_plot_place_labels): the geometry helpers on
 * hand-checked cases; labels next to their points when there is room; in a crowded
 * cluster, every label (text, or its number where the text has no room) inside the
 * area and clear of every point, error bar, other label and leader line, numbers in
 * order; no room at all gives no label; the result is the same on every run. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "qltest.h"
#include "results/plot.h"

static void test_geometry(void)
{
    const ql_plot_box a = {0, 0, 10, 10}, b = {10, 0, 20, 10}, c = {9, 9, 12, 12};
    CHECK(!ql_plot_boxes_overlap(&a, &b)); /* touching edges do not overlap */
    CHECK(ql_plot_boxes_overlap(&a, &c) && ql_plot_boxes_overlap(&c, &a));
    /* Through, beside, ending before, along an edge. */
    CHECK(ql_plot_segment_hits(-5, 5, 15, 5, &a));
    CHECK(!ql_plot_segment_hits(-5, 15, 15, 15, &a));
    CHECK(!ql_plot_segment_hits(-5, 5, -1, 5, &a));
    CHECK(!ql_plot_segment_hits(-5, 0, 15, 0, &a));
    CHECK(ql_plot_segment_hits(5, 5, 5, 5, &a)); /* a point inside */
    CHECK(ql_plot_segment_hits(-5, -5, 15, 15, &a));
    /* The leader joins the nearest points of the two boxes. */
    const ql_plot_box label = {30, 20, 50, 30};
    double ax, ay, bx, by;
    ql_plot_leader(&a, &label, &ax, &ay, &bx, &by);
    CHECK(ax == 10 && ay == 10 && bx == 30 && by == 20);
    const ql_plot_box above = {2, 20, 8, 26};
    ql_plot_leader(&a, &above, &ax, &ay, &bx, &by);
    CHECK(ax == 5 && ay == 10 && bx == 5 && by == 20);
}

/* A point's box of radius r at (x, y). */
static ql_plot_box point_box(double x, double y, double r)
{
    return (ql_plot_box){x - r, y - r, x + r, y + r};
}

static ql_label_in label_at(double x, double y, size_t chars)
{
    return (ql_label_in){point_box(x, y, 5), 6.6 * (double)chars + 4, 12, 6.6 * 2 + 4};
}

/* The placement's promises for every label placed. */
static void check_placement(const ql_plot_box *area, const ql_plot_box *obst, size_t n_obst,
                            const ql_label_in *in, const ql_label_out *out, size_t n,
                            const char *what)
{
    int last_number = 0;
    for (size_t i = 0; i < n; i++) {
        const ql_label_out *o = &out[i];
        if (o->how == QL_LABEL_NONE) {
            CHECK_MSG(o->number == 0 && !o->leader, "%s: label %zu: none, yet numbered", what, i);
            continue;
        }
        const ql_plot_box *b = &o->box;
        const double w = o->how == QL_LABEL_TEXT ? in[i].w : in[i].num_w;
        CHECK_MSG(fabs(b->x1 - b->x0 - w) < 1e-9 && fabs(b->y1 - b->y0 - in[i].h) < 1e-9,
                  "%s: label %zu: box %gx%g for %gx%g", what, i, b->x1 - b->x0, b->y1 - b->y0, w,
                  in[i].h);
        CHECK_MSG(b->x0 >= area->x0 && b->x1 <= area->x1 && b->y0 >= area->y0 && b->y1 <= area->y1,
                  "%s: label %zu outside the area", what, i);
        for (size_t k = 0; k < n_obst; k++)
            CHECK_MSG(!ql_plot_boxes_overlap(b, &obst[k]), "%s: label %zu covers obstacle %zu",
                      what, i, k);
        for (size_t j = 0; j < n; j++) {
            if (j == i || out[j].how == QL_LABEL_NONE)
                continue;
            CHECK_MSG(j < i || !ql_plot_boxes_overlap(b, &out[j].box),
                      "%s: labels %zu and %zu overlap", what, i, j);
            if (out[j].leader) {
                double ax, ay, bx, by;
                ql_plot_leader(&in[j].anchor, &out[j].box, &ax, &ay, &bx, &by);
                CHECK_MSG(!ql_plot_segment_hits(ax, ay, bx, by, b),
                          "%s: the leader of label %zu crosses label %zu", what, j, i);
            }
        }
        if (o->how == QL_LABEL_NUMBER) {
            CHECK_MSG(o->number == last_number + 1, "%s: label %zu numbered %d after %d", what, i,
                      o->number, last_number);
            last_number = o->number;
        } else {
            CHECK_MSG(o->number == 0, "%s: text label %zu numbered", what, i);
        }
        /* Next to its anchor, or joined to it. */
        if (!o->leader) {
            const ql_plot_box *a = &in[i].anchor;
            const double gap_x = fmax(b->x0 - a->x1, a->x0 - b->x1),
                         gap_y = fmax(b->y0 - a->y1, a->y0 - b->y1);
            CHECK_MSG(fmax(gap_x, gap_y) <= 2.0 + 1e-9, "%s: label %zu is %g px off its point",
                      what, i, fmax(gap_x, gap_y));
        }
    }
}

/* Room for everyone: each label right above its point. */
static void test_sparse(void)
{
    const ql_plot_box area = {0, 0, 400, 300};
    ql_label_in in[3] = {label_at(50, 50, 4), label_at(200, 150, 6), label_at(350, 250, 4)};
    ql_plot_box obst[3];
    for (int i = 0; i < 3; i++)
        obst[i] = in[i].anchor;
    ql_label_out out[3];
    CHECK(ql_plot_place_labels(&area, obst, 3, in, 3, out));
    check_placement(&area, obst, 3, in, out, 3, "sparse");
    for (int i = 0; i < 3; i++) {
        CHECK(out[i].how == QL_LABEL_TEXT && !out[i].leader);
        CHECK(out[i].box.y0 == in[i].anchor.y1 + 2.0);
        CHECK(fabs(0.5 * (out[i].box.x0 + out[i].box.x1) -
                   0.5 * (in[i].anchor.x0 + in[i].anchor.x1)) < 1e-9);
    }
    /* A point at the top edge: its label goes below. */
    in[0] = label_at(100, 295, 4);
    obst[0] = in[0].anchor;
    CHECK(ql_plot_place_labels(&area, obst, 1, in, 1, out));
    CHECK(out[0].how == QL_LABEL_TEXT && out[0].box.y1 == in[0].anchor.y0 - 2.0);
}

/* 60 points in a 240 x 120 patch of an 800 x 400 area, each with an error bar: the
 * crowd of the 4-5 bpw formats. */
enum { CROWD = 60 };

static void crowd(ql_plot_box *area, ql_label_in *in, ql_plot_box *obst, size_t *n_obst)
{
    *area = (ql_plot_box){0, 0, 800, 400};
    uint32_t seed = 12345;
    *n_obst = 0;
    for (int i = 0; i < CROWD; i++) {
        seed = seed * 1664525u + 1013904223u;
        const double x = 280 + (double)(seed >> 8) / (double)(1u << 24) * 240;
        seed = seed * 1664525u + 1013904223u;
        const double y = 140 + (double)(seed >> 8) / (double)(1u << 24) * 120;
        in[i] = label_at(x, y, 4 + (size_t)(i % 3));
        obst[(*n_obst)++] = in[i].anchor;
        obst[(*n_obst)++] = (ql_plot_box){x - 3, y - 12, x + 3, y + 12};
    }
}

static void test_crowded(void)
{
    ql_plot_box area, obst[2 * CROWD];
    ql_label_in in[CROWD];
    size_t n_obst;
    crowd(&area, in, obst, &n_obst);
    ql_label_out out[CROWD], again[CROWD];
    CHECK(ql_plot_place_labels(&area, obst, n_obst, in, CROWD, out));
    check_placement(&area, obst, n_obst, in, out, CROWD, "crowded");
    int text = 0, numbers = 0, leaders = 0, none = 0;
    for (int i = 0; i < CROWD; i++) {
        text += out[i].how == QL_LABEL_TEXT;
        numbers += out[i].how == QL_LABEL_NUMBER;
        none += out[i].how == QL_LABEL_NONE;
        leaders += out[i].leader;
    }
    printf("crowded: %d text (%d with leaders), %d numbers, %d without room\n", text, leaders,
           numbers, none);
    /* The case exercises every fallback: far labels with leaders, and numbers. */
    CHECK_MSG(text > 0 && leaders > 0 && numbers > 0, "text %d, leaders %d, numbers %d, none %d",
              text, leaders, numbers, none);
    /* The same input, the same labels. */
    CHECK(ql_plot_place_labels(&area, obst, n_obst, in, CROWD, again));
    CHECK(memcmp(out, again, sizeof out) == 0);
}

/* No room at all: no label, and nothing drawn over the point. */
static void test_no_room(void)
{
    const ql_plot_box area = {0, 0, 12, 12};
    ql_label_in in = label_at(6, 6, 5);
    ql_label_out out;
    CHECK(ql_plot_place_labels(&area, &in.anchor, 1, &in, 1, &out));
    CHECK(out.how == QL_LABEL_NONE && out.number == 0 && !out.leader);
    CHECK(ql_plot_place_labels(&area, NULL, 0, NULL, 0, NULL));
}

int main(void)
{
    test_geometry();
    test_sparse();
    test_crowded();
    test_no_room();
    return qlt_done();
}
