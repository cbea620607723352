/* engine/autoq/mckp.h — the exact multiple-choice knapsack of the auto-quantize search.
 *
 * n items (the search groups of every layer), each with 1..LWQ_MCKP_MAXOPT options (formats), an
 * option j of item i costing cost[i][j] bytes (an exact integer) and scoring score[i][j] >= 0
 * (the damage of that format).  Pick one option per item, total cost <= budget, least summed
 * score.
 *
 * Method (exact):
 *   1. per item, options dominated by a cheaper one with no larger score are dropped (ties keep
 *      the lower option index);
 *   2. the LP relaxation is solved greedily over the items' lower convex hulls (upgrades sorted
 *      by score saved per byte), which gives a lower bound, and a greedy walk plus single swaps an
 *      incumbent;
 *   3. reduction: option j of item i is eliminated when the LP bound with i fixed to j cannot beat
 *      the incumbent; an item with one option left is fixed;
 *   4. the items left open are solved by dynamic programming over (cost, score) states, kept
 *      Pareto-optimal and pruned when the LP of the items still to come cannot bring them below
 *      the incumbent (Pisinger's "bounded DP"), most uncertain items (nearest the LP's break
 *      efficiency) first.
 * A solution is proven optimal up to a relative 1e-12 of the total score (float sums); the
 * search stops with LWQ_EUNSUPPORTED when more than max_states states would be kept, rather
 * than grow without bound.  Deterministic: the same input gives the same choice (every order has
 * an index tie-break).
 *
 * Errors: LWQ_EINVAL when even the cheapest option of every item exceeds the budget (the message
 * gives the least total), LWQ_EUNSUPPORTED as above, LWQ_ENOMEM. */
#ifndef LWQ_ENGINE_AUTOQ_MCKP_H
#define LWQ_ENGINE_AUTOQ_MCKP_H

#include <stdint.h>

#include "core/sys/error.h"

#define LWQ_MCKP_MAXOPT 8

typedef struct lwq_mckp_item {
    int nopt;
    uint64_t cost[LWQ_MCKP_MAXOPT];
    double score[LWQ_MCKP_MAXOPT];
} lwq_mckp_item;

typedef struct lwq_mckp_result {
    double score;            /* the optimum */
    uint64_t cost;           /* its total cost, <= budget */
    double lp_bound;         /* the LP relaxation's value (<= score) */
    int64_t nodes;           /* DP states kept */
    int free_items;          /* items with more than one option left after the reduction */
} lwq_mckp_result;

/* choice: (n) the option index picked for each item.  max_states <= 0: 8 million (192 MB). */
int lwq_mckp_solve(int n, const lwq_mckp_item *items, uint64_t budget, int64_t max_states, int *choice,
                   lwq_mckp_result *res, lwq_error *e);

#endif
