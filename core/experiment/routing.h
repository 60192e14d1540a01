/* qlab: what quantization does to a mixture-of-experts model's routing.
 *
 * The reference pass records, for every scored position and MoE block, the k experts its
 * router chose (ql_routes); a config's pass is compared with them token by token
 * (ql_routing_acc). Per MoE block, over the N scored tokens, with A_t the reference's set
 * of k experts of token t and B_t the config's:
 *   route_agree   = #{t : B_t = A_t} / N                 (the same experts, in any order)
 *   route_overlap = Σ_t |A_t ∩ B_t| / (k N)              (the mean share of experts kept)
 *   load_e        = #{t : e ∈ B_t} / (k N)               (expert e's share of the routed
 *                                                         slots; ref_load_e from A)
 *   load_shift    = ½ Σ_e |load_e − ref_load_e|          (total variation distance of the
 *                                                         two load distributions, 0 .. 1)
 * and for the run, the means of the three over the MoE blocks. Counts are integers:
 * the figures do not depend on the order tokens are seen in. */
#ifndef QL_ROUTING_H
#define QL_ROUTING_H

#include <stdint.h>

#include "base/error.h"
#include "experiment/records.h"
#include "model/hparams.h"

typedef struct ql_routes ql_routes;

/* Room for the routes of n_chunks chunks of n_scored scored positions, the first at
 * position `first` of its chunk, of a model of hp's shape (hp->n_expert > 0). */
ql_status ql_routes_alloc(ql_routes **out, const ql_hparams *hp, int64_t n_chunks, int n_scored,
                          int first, ql_error *err);
void ql_routes_free(ql_routes *r);

/* The expert indices, (n_chunks, moe blocks, n_scored, k) int16, for a cache file. */
int16_t *ql_routes_data(ql_routes *r);
const int16_t *ql_routes_cdata(const ql_routes *r);
size_t ql_routes_bytes(const ql_routes *r);
/* Whether every index is an expert of the model (a cache file's are checked). */
bool ql_routes_valid(const ql_routes *r);

/* A ql_sched_route_fn (model/scheduler.h) with ctx a ql_routes: keeps the chosen experts
 * of the scored rows. */
void ql_routes_record(void *ctx, int layer, int64_t chunk, int64_t row0, const int32_t *sel,
                      const float *weights, int64_t n_rows, int k);

/* A config's routing against the reference's routes (borrowed). */
typedef struct ql_routing_acc ql_routing_acc;

ql_status ql_routing_acc_alloc(ql_routing_acc **out, const ql_routes *ref, ql_error *err);
void ql_routing_acc_free(ql_routing_acc *a);
void ql_routing_acc_reset(ql_routing_acc *a);

/* A ql_sched_route_fn with ctx a ql_routing_acc: compares the config's chosen experts of
 * the scored rows with the reference's. */
void ql_routing_acc_observe(void *ctx, int layer, int64_t chunk, int64_t row0, const int32_t *sel,
                            const float *weights, int64_t n_rows, int k);

/* The run's figures (means over the MoE blocks), each block's into layers[l] (n_layer
 * records; a dense block's stay NAN), and the loads into loads (n_layer * n_expert
 * records, or NULL; a dense block has none: *n_loads says how many were written). */
void ql_routing_acc_finish(const ql_routing_acc *a, ql_routing_metrics *run,
                           ql_layer_record *layers, ql_expert_load_record *loads, size_t *n_loads);

#endif
