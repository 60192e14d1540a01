/* A mixture of experts' routing figures (experiment/routing.h) on hand-made routes whose
 * answers are known: the same experts in another order agree, one expert of two kept is
 * an overlap of 1/2, the load shift is half the L1 distance of the loads; rows outside
 * the scored positions do not count; the reference against itself agrees fully. */
#include <math.h>
#include <string.h>

#include "experiment/routing.h"
#include "qltest.h"

#define TOL 1e-12

int main(void)
{
    ql_error err;
    ql_error_clear(&err);
    ql_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layer = 2;
    hp.n_expert = 4;
    hp.n_expert_used = 2;
    /* one chunk of 4 scored positions, the first at position 2 */
    ql_routes *ref;
    CHECK_OK(ql_routes_alloc(&ref, &hp, 1, 4, 2, &err), &err);
    /* block 0 rows are positions 0.., block 1 (the last) rows start at position 2 */
    const int32_t ref0[6 * 2] = {3, 3, 3, 3, 0, 1, 0, 1, 2, 3, 2, 3};
    const int32_t ref1[4 * 2] = {0, 1, 1, 2, 2, 3, 3, 0};
    ql_routes_record(ref, 0, 0, 0, ref0, NULL, 6, 2);
    ql_routes_record(ref, 1, 0, 2, ref1, NULL, 4, 2);
    CHECK(ql_routes_valid(ref));
    CHECK_EQ_INT(ql_routes_bytes(ref), 1 * 2 * 4 * 2 * 2);

    ql_routing_acc *a;
    CHECK_OK(ql_routing_acc_alloc(&a, ref, &err), &err);
    /* block 0: position 2 same order, 3 swapped (agrees), 4 keeps one of two, 5 none */
    const int32_t got0[6 * 2] = {0, 0, 0, 0, 0, 1, 1, 0, 2, 0, 0, 1};
    /* block 1: all the reference's */
    ql_routing_acc_observe(a, 0, 0, 0, got0, NULL, 6, 2);
    ql_routing_acc_observe(a, 1, 0, 2, ref1, NULL, 4, 2);
    ql_routing_metrics rm;
    ql_layer_record layers[2];
    for (int l = 0; l < 2; l++)
        layers[l] = (ql_layer_record){l, (double)NAN, (double)NAN, (double)NAN, (double)NAN, (double)NAN, (double)NAN};
    ql_expert_load_record loads[8];
    size_t n_loads;
    ql_routing_acc_finish(a, &rm, layers, loads, &n_loads);
    CHECK_NEAR(layers[0].route_agree, 2.0 / 4.0, TOL);
    CHECK_NEAR(layers[0].route_overlap, (2 + 2 + 1 + 0) / 8.0, TOL);
    /* loads of block 0's 8 slots: the reference's 2 2 2 2, the config's (0,1) (1,0) (2,0)
     * (0,1): 4 3 1 0 */
    const double shift0 = 0.5 * (2 + 1 + 1 + 2) / 8.0; /* |4-2| + |3-2| + |1-2| + |0-2| */
    CHECK_NEAR(layers[0].load_shift, shift0, TOL);
    CHECK_NEAR(layers[1].route_agree, 1.0, TOL);
    CHECK_NEAR(layers[1].route_overlap, 1.0, TOL);
    CHECK_NEAR(layers[1].load_shift, 0.0, TOL);
    CHECK_NEAR(rm.route_agree, (0.5 + 1.0) / 2, TOL);
    CHECK_NEAR(rm.load_shift, shift0 / 2, TOL);
    CHECK_EQ_INT(n_loads, 8);
    CHECK(loads[0].layer == 0 && loads[0].expert == 0);
    CHECK_NEAR(loads[0].ref_share, 2.0 / 8.0, TOL);
    CHECK_NEAR(loads[0].share, 4.0 / 8.0, TOL);
    double sum = 0;
    for (int e = 0; e < 4; e++)
        sum += loads[4 + e].share;
    CHECK_NEAR(sum, 1.0, TOL);

    /* reset: the reference against itself */
    ql_routing_acc_reset(a);
    ql_routing_acc_observe(a, 0, 0, 0, ref0, NULL, 6, 2);
    ql_routing_acc_observe(a, 1, 0, 2, ref1, NULL, 4, 2);
    ql_routing_acc_finish(a, &rm, layers, NULL, NULL);
    CHECK_NEAR(rm.route_agree, 1.0, TOL);
    CHECK_NEAR(rm.route_overlap, 1.0, TOL);
    CHECK_NEAR(rm.load_shift, 0.0, TOL);

    /* an index past the experts is not a valid route (a damaged cache file) */
    ql_routes_data(ref)[3] = 9;
    CHECK(!ql_routes_valid(ref));
    ql_routing_acc_free(a);
    ql_routes_free(ref);
    return qlt_done();
}
