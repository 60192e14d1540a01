/* The labels of a panel's points (plot.h, ql_plot_label_points), the pure function the
 * report's plots against bits per weight place their labels with: the frame's mapping
 * (linear and log); points of one kind close together sharing one label, far apart or
 * of different kinds not; labels of points that lie on top of each other moved apart
 * (no two overlap, none covers a marker, an error bar or the reference line, a label
 * apart joined by its leader line); every label inside the plot area; no room giving no
 * label; the same input giving the same output, byte for byte. */
#include <math.h>
#include <string.h>

#include "qltest.h"
#include "results/plot.h"

/* Pixels are compared exactly where the arithmetic is exact, else to this: far below
 * the 1e-5 of a screen coordinate in the scripts (a pixel of 960 is 1e-3). */
#define PX_TOL 1e-9

/* A panel of 400 x 300 pixels at (100, 50), bpw 2..10, the value 0..1 or 1e-3..1e-1. */
static ql_plot_frame frame(bool log_y)
{
    return (ql_plot_frame){.x0 = 100,
                           .x1 = 500,
                           .y0 = 50,
                           .y1 = 350,
                           .xlo = 2,
                           .xhi = 10,
                           .ylo = log_y ? 1e-3 : 0.0,
                           .yhi = log_y ? 1e-1 : 1.0,
                           .log_y = log_y};
}

/* A label of c characters in the report's font ',8'. */
static ql_label_size size_of(size_t chars)
{
    return (ql_label_size){.w = 6.6 * (double)chars + 4, .h = 12, .num_w = 6.6 * 2 + 4};
}

/* A box of canvas pixels (y down) as the labels' y up. */
static ql_plot_box up(double x0, double x1, double top, double bottom)
{
    return (ql_plot_box){x0, -bottom, x1, -top};
}

static void test_frame(void)
{
    const ql_plot_frame lin = frame(false), lg = frame(true);
    CHECK_NEAR(ql_plot_frame_x(&lin, 2), 100, PX_TOL);
    CHECK_NEAR(ql_plot_frame_x(&lin, 10), 500, PX_TOL);
    CHECK_NEAR(ql_plot_frame_x(&lin, 6), 300, PX_TOL);
    CHECK_NEAR(ql_plot_frame_y(&lin, 0), 350, PX_TOL); /* y down: the bottom */
    CHECK_NEAR(ql_plot_frame_y(&lin, 1), 50, PX_TOL);
    CHECK_NEAR(ql_plot_frame_y(&lin, 0.25), 275, PX_TOL);
    /* Log y: a decade is half the height, 1e-2 the middle. */
    CHECK_NEAR(ql_plot_frame_y(&lg, 1e-3), 350, PX_TOL);
    CHECK_NEAR(ql_plot_frame_y(&lg, 1e-2), 200, 1e-6);
    CHECK_NEAR(ql_plot_frame_y(&lg, 1e-1), 50, 1e-6);
}

/* Every promise for the labels of n points: each placed label inside the area (inset),
 * clear of every marker, error bar, the reference line and every other label, its box
 * the size of its text or number; every point's cluster a label of its kind whose
 * anchor holds the point's marker. */
static void check_labels(const ql_plot_frame *f, double ref_y, const ql_plot_point *pts, size_t n,
                         const ql_label_size *sizes, const size_t *cluster_of,
                         const ql_point_label *labels, size_t nl, const char *what)
{
    const double in = QL_PLOT_AREA_INSET, r = QL_PLOT_MARK_R;
    const ql_plot_box area = up(f->x0 + in, f->x1 - in, f->y0 + in, f->y1 - in);
    for (size_t i = 0; i < n; i++) {
        CHECK_MSG(cluster_of[i] < nl, "%s: point %zu has no label", what, i);
        if (cluster_of[i] >= nl)
            continue;
        const ql_point_label *lb = &labels[cluster_of[i]];
        CHECK_MSG(pts[lb->first].kind == pts[i].kind, "%s: point %zu labelled as another kind",
                  what, i);
        const double px = ql_plot_frame_x(f, pts[i].x), py = ql_plot_frame_y(f, pts[i].y);
        const ql_plot_box *a = &lb->in.anchor;
        CHECK_MSG(a->x0 <= px - r + PX_TOL && a->x1 >= px + r - PX_TOL &&
                      a->y0 <= -py - r + PX_TOL && a->y1 >= -py + r - PX_TOL,
                  "%s: point %zu outside its label's anchor", what, i);
    }
    for (size_t k = 0; k < nl; k++) {
        const ql_label_out *o = &labels[k].out;
        if (o->how == QL_LABEL_NONE)
            continue;
        const ql_plot_box *b = &o->box;
        const ql_label_size *sz = &sizes[pts[labels[k].first].kind];
        const double w = o->how == QL_LABEL_TEXT ? sz->w : sz->num_w;
        CHECK_MSG(fabs(b->x1 - b->x0 - w) < PX_TOL && fabs(b->y1 - b->y0 - sz->h) < PX_TOL,
                  "%s: label %zu: box %gx%g for %gx%g", what, k, b->x1 - b->x0, b->y1 - b->y0, w,
                  sz->h);
        CHECK_MSG(b->x0 >= area.x0 && b->x1 <= area.x1 && b->y0 >= area.y0 && b->y1 <= area.y1,
                  "%s: label %zu outside the plot area", what, k);
        for (size_t i = 0; i < n; i++) {
            const double px = ql_plot_frame_x(f, pts[i].x), py = ql_plot_frame_y(f, pts[i].y);
            const ql_plot_box mark = up(px - r, px + r, py - r, py + r);
            CHECK_MSG(!ql_plot_boxes_overlap(b, &mark), "%s: label %zu covers point %zu", what, k,
                      i);
            if (!isnan(pts[i].err) && pts[i].err > 0) {
                const double lo =
                    pts[i].y - pts[i].err > 0 || !f->log_y ? pts[i].y - pts[i].err : pts[i].y;
                const ql_plot_box bar =
                    up(px - QL_PLOT_BAR_R, px + QL_PLOT_BAR_R,
                       ql_plot_frame_y(f, pts[i].y + pts[i].err), ql_plot_frame_y(f, lo));
                CHECK_MSG(!ql_plot_boxes_overlap(b, &bar),
                          "%s: label %zu covers the error bar of point %zu", what, k, i);
            }
        }
        if (!isnan(ref_y)) {
            const double yr = ql_plot_frame_y(f, ref_y);
            const ql_plot_box line = up(f->x0, f->x1, yr - QL_PLOT_LINE_R, yr + QL_PLOT_LINE_R);
            CHECK_MSG(!ql_plot_boxes_overlap(b, &line), "%s: label %zu covers the reference line",
                      what, k);
        }
        for (size_t j = k + 1; j < nl; j++)
            CHECK_MSG(labels[j].out.how == QL_LABEL_NONE ||
                          !ql_plot_boxes_overlap(b, &labels[j].out.box),
                      "%s: labels %zu and %zu overlap", what, k, j);
    }
}

/* Two lone points of different kinds: a label each, right next to its point. */
static void test_apart(void)
{
    const ql_plot_frame f = frame(false);
    const ql_plot_point pts[] = {{.x = 3, .y = 0.3, .err = 0.02, .kind = 0},
                                 {.x = 8, .y = 0.7, .err = (double)NAN, .kind = 1}};
    const ql_label_size sizes[] = {size_of(4), size_of(6)};
    size_t cluster_of[2], nl = 99;
    ql_point_label labels[2];
    CHECK(ql_plot_label_points(&f, (double)NAN, pts, 2, sizes, cluster_of, labels, &nl));
    CHECK_EQ_INT((int)nl, 2);
    CHECK(cluster_of[0] == 0 && cluster_of[1] == 1 && labels[0].first == 0 && labels[1].first == 1);
    for (size_t k = 0; k < nl; k++)
        CHECK_MSG(labels[k].out.how == QL_LABEL_TEXT && !labels[k].out.leader &&
                      labels[k].out.number == 0,
                  "label %zu: how %d, leader %d", k, (int)labels[k].out.how,
                  (int)labels[k].out.leader);
    check_labels(&f, (double)NAN, pts, 2, sizes, cluster_of, labels, nl, "apart");
}

/* Points of one kind within QL_PLOT_CLUSTER_PX of each other (through a middle one)
 * share a label; the same kind far off, and another kind on top, get their own. */
static void test_clusters(void)
{
    const ql_plot_frame f = frame(false); /* 50 px per bpw, 3 px per 0.01 */
    const ql_plot_point pts[] = {
        {.x = 4.0, .y = 0.5, .err = (double)NAN, .kind = 0},
        {.x = 4.4, .y = 0.5, .err = (double)NAN, .kind = 0}, /* 20 px from the first */
        {.x = 4.8, .y = 0.5, .err = (double)NAN, .kind = 0}, /* 20 px on: 40 from the first */
        {.x = 8.0, .y = 0.5, .err = (double)NAN, .kind = 0}, /* far */
        {.x = 4.4, .y = 0.5, .err = (double)NAN, .kind = 1}, /* on top, another kind */
    };
    const size_t n = sizeof pts / sizeof pts[0];
    const ql_label_size sizes[] = {size_of(4), size_of(4)};
    size_t cluster_of[5], nl = 0;
    ql_point_label labels[5];
    CHECK(ql_plot_label_points(&f, (double)NAN, pts, n, sizes, cluster_of, labels, &nl));
    CHECK_EQ_INT((int)nl, 3);
    CHECK(cluster_of[0] == 0 && cluster_of[1] == 0 && cluster_of[2] == 0);
    CHECK(cluster_of[3] == 1 && cluster_of[4] == 2);
    CHECK(labels[0].first == 0 && labels[1].first == 3 && labels[2].first == 4);
    /* The cluster's anchor spans its three markers. */
    const ql_plot_box *a = &labels[0].in.anchor;
    CHECK_NEAR(a->x0, 200 - QL_PLOT_MARK_R, PX_TOL);
    CHECK_NEAR(a->x1, 240 + QL_PLOT_MARK_R, PX_TOL);
    check_labels(&f, (double)NAN, pts, n, sizes, cluster_of, labels, nl, "clusters");
}

/* Two points of different kinds on the same spot: both labels drawn as text, not
 * on each other (the second moved to another side of the spot). */
static void test_same_spot(void)
{
    const ql_plot_frame f = frame(false);
    const ql_plot_point pts[] = {{.x = 6, .y = 0.5, .err = 0.02, .kind = 0},
                                 {.x = 6, .y = 0.5, .err = 0.02, .kind = 1}};
    const ql_label_size sizes[] = {size_of(6), size_of(6)};
    size_t cluster_of[2], nl = 0;
    ql_point_label labels[2];
    CHECK(ql_plot_label_points(&f, (double)NAN, pts, 2, sizes, cluster_of, labels, &nl));
    CHECK_EQ_INT((int)nl, 2);
    CHECK(labels[0].out.how == QL_LABEL_TEXT && labels[1].out.how == QL_LABEL_TEXT);
    CHECK(!ql_plot_boxes_overlap(&labels[0].out.box, &labels[1].out.box));
    check_labels(&f, (double)NAN, pts, 2, sizes, cluster_of, labels, nl, "same spot");
}

/* Eight kinds on one spot with error bars, next to the reference line: the labels
 * placed (text, apart with a leader, or a number) are moved apart from each other and
 * from every point, bar and line, inside the area. Run twice, the output is the same
 * bytes. */
static void test_crowded(void)
{
    const ql_plot_frame f = frame(true);
    ql_plot_point pts[8];
    ql_label_size sizes[8];
    for (size_t i = 0; i < 8; i++) {
        pts[i] = (ql_plot_point){.x = 2.3 + 0.01 * (double)i,
                                 .y = 2e-3 * (1.0 + 0.02 * (double)i),
                                 .err = 3e-4,
                                 .kind = i};
        sizes[i] = size_of(5 + i);
    }
    const double ref = 1.2e-2;
    size_t cluster_of[8], nl = 0;
    ql_point_label labels[8];
    CHECK(ql_plot_label_points(&f, ref, pts, 8, sizes, cluster_of, labels, &nl));
    CHECK_EQ_INT((int)nl, 8);
    /* Where eight labels cannot all find room around one spot (the leader lines block
     * each other), the ones left are NONE, for the report's key; those placed keep
     * every promise. */
    size_t placed = 0;
    for (size_t k = 0; k < nl; k++)
        placed += labels[k].out.how != QL_LABEL_NONE;
    CHECK_MSG(placed >= 4, "%zu of 8 labels placed", placed);
    check_labels(&f, ref, pts, 8, sizes, cluster_of, labels, nl, "crowded");

    size_t cluster_of2[8], nl2 = 0;
    ql_point_label labels2[8];
    memset(labels2, 0x5a, sizeof labels2);
    CHECK(ql_plot_label_points(&f, ref, pts, 8, sizes, cluster_of2, labels2, &nl2));
    CHECK(nl2 == nl && memcmp(cluster_of, cluster_of2, sizeof cluster_of) == 0);
    for (size_t k = 0; k < nl; k++)
        CHECK_MSG(labels[k].first == labels2[k].first && labels[k].out.how == labels2[k].out.how &&
                      memcmp(&labels[k].out.box, &labels2[k].out.box, sizeof labels[k].out.box) ==
                          0 &&
                      memcmp(&labels[k].in, &labels2[k].in, sizeof labels[k].in) == 0,
                  "label %zu differs between two runs", k);
}

/* A plot area too small for any label: none placed, and none drawn outside it. */
static void test_no_room(void)
{
    ql_plot_frame f = frame(false);
    f.x1 = f.x0 + 12;
    f.y1 = f.y0 + 12;
    const ql_plot_point pts[] = {{.x = 6, .y = 0.5, .err = (double)NAN, .kind = 0}};
    const ql_label_size sizes[] = {size_of(6)};
    size_t cluster_of[1], nl = 0;
    ql_point_label labels[1];
    CHECK(ql_plot_label_points(&f, (double)NAN, pts, 1, sizes, cluster_of, labels, &nl));
    CHECK_EQ_INT((int)nl, 1);
    CHECK(labels[0].out.how == QL_LABEL_NONE && labels[0].out.number == 0);
    /* No points: no labels. */
    CHECK(ql_plot_label_points(&f, (double)NAN, pts, 0, sizes, cluster_of, labels, &nl));
    CHECK_EQ_INT((int)nl, 0);
}

int main(void)
{
    test_frame();
    test_apart();
    test_clusters();
    test_same_spot();
    test_crowded();
    test_no_room();
    return qlt_done();
}
