/* qlab: how a command spends its memory budget, each share declared once.
 *
 * A budget (`--mem`; a sweep's default is QL_RUN_MEM_SHARE of the RAM, runner.h) pays
 * first for what a pass needs: the weights, one layer bound in f32 per weight set, the
 * group's residual streams, one chunk's logits. What a command holds across configs or
 * chunks beside that (a reference's log-probs, a shared pass's hidden states) takes at
 * most half of what is left (ql_mem_hold), so the groups keep room; a side job of a
 * sweep (its calibration passes, GPTQ's plan, the kld objective's measurements) plans
 * with half of the budget it is given (ql_mem_side). Results never depend on the plan:
 * it decides only what is held or recomputed and how many chunks a pass takes at once. */
#ifndef QL_MEM_PLAN_H
#define QL_MEM_PLAN_H

#include <stddef.h>

/* What a side job of a command with this budget plans with. */
size_t ql_mem_side(size_t budget);

/* bytes when something that size may be held out of `left` (what the budget leaves after
 * the passes' needs), else 0 (it is recomputed or not kept). */
size_t ql_mem_hold(size_t bytes, size_t left);

#endif
