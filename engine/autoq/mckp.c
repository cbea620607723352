/* engine/autoq/mckp.c — exact multiple-choice knapsack: LP bounds, reduction, bounded DP
 * (engine/autoq/mckp.h). */
#include "engine/autoq/mckp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct upgrade {
    int item;
    int from, to;   /* option indexes: consecutive points of the item's hull */
    uint64_t dc;    /* extra bytes */
    double ds;      /* score saved */
    double eff;     /* ds / dc */
} upgrade;

typedef struct solver {
    int n;
    const lwq_mckp_item *it;
    uint64_t budget;
    int *kept;      /* (n * MAXOPT) option indexes that are not dominated, by cost ascending */
    int *nkept;     /* (n) */
    uint8_t *alive; /* (n * MAXOPT) option survives the reduction */
    upgrade *up;    /* hull upgrades, by efficiency descending */
    int nup;
    uint8_t *is_free;
    int *order;     /* the items left open, in DP order */
    int m;
    int *best;
    int *lp_opt;    /* (n) the option the root LP relaxation reaches (its hull point) */
    double *crit;   /* (n) |log(eff / break eff)| of the item's upgrade nearest the break */
    double best_score, tol;
    int64_t nodes, max_nodes; /* DP states kept / the cap on them */
} solver;

#define KEPT(s, i, k) ((s)->kept[(size_t)(i) * LWQ_MCKP_MAXOPT + (size_t)(k)])
#define COST(s, i, j) ((s)->it[i].cost[j])
#define SCORE(s, i, j) ((s)->it[i].score[j])

static int cmp_upgrade(const void *a, const void *b)
{
    const upgrade *x = a, *y = b;
    if (x->eff != y->eff)
        return x->eff > y->eff ? -1 : 1;
    if (x->item != y->item)
        return x->item < y->item ? -1 : 1;
    return x->dc < y->dc ? -1 : x->dc > y->dc; /* steps of one item: hull order */
}

/* Options of item i sorted by (cost, score, index); keep those strictly better than every cheaper
 * kept one. */
static void dominance(solver *s, int i)
{
    const lwq_mckp_item *t = &s->it[i];
    int idx[LWQ_MCKP_MAXOPT];
    for (int j = 0; j < t->nopt; j++)
        idx[j] = j;
    for (int a = 1; a < t->nopt; a++) /* insertion sort: a handful of options */
        for (int b = a; b > 0; b--) {
            int p = idx[b - 1], q = idx[b];
            int after = t->cost[p] > t->cost[q] || (t->cost[p] == t->cost[q] && t->score[p] > t->score[q]);
            if (!after)
                break;
            idx[b - 1] = q;
            idx[b] = p;
        }
    int k = 0;
    for (int a = 0; a < t->nopt; a++) {
        int j = idx[a];
        if (k == 0 || t->score[j] < SCORE(s, i, KEPT(s, i, k - 1)))
            KEPT(s, i, k++) = j;
    }
    s->nkept[i] = k;
}

/* The lower convex hull of item i's kept options, as upgrades appended to s->up. */
static void hull(solver *s, int i)
{
    int h[LWQ_MCKP_MAXOPT], nh = 0;
    for (int k = 0; k < s->nkept[i]; k++) {
        int j = KEPT(s, i, k);
        while (nh >= 2) {
            int a = h[nh - 2], b = h[nh - 1];
            /* b lies on or above the segment a -> j: drop it */
            double lhs = (SCORE(s, i, a) - SCORE(s, i, b)) * (double)(COST(s, i, j) - COST(s, i, a));
            double rhs = (SCORE(s, i, a) - SCORE(s, i, j)) * (double)(COST(s, i, b) - COST(s, i, a));
            if (lhs > rhs)
                break;
            nh--;
        }
        h[nh++] = j;
    }
    for (int k = 0; k + 1 < nh; k++) {
        upgrade *u = &s->up[s->nup++];
        u->item = i;
        u->from = h[k];
        u->to = h[k + 1];
        u->dc = COST(s, i, h[k + 1]) - COST(s, i, h[k]);
        u->ds = SCORE(s, i, h[k]) - SCORE(s, i, h[k + 1]);
        u->eff = u->ds / (double)u->dc;
    }
}

/* LP relaxation over the free items, each starting at its cheapest option, with W bytes left
 * after those cheapest options (W < 0: infeasible). */
static double lp(const solver *s, double base_score, int64_t W)
{
    if (W < 0)
        return INFINITY;
    double v = base_score;
    uint64_t w = (uint64_t)W;
    for (int k = 0; k < s->nup; k++) {
        const upgrade *u = &s->up[k];
        if (!s->is_free[u->item])
            continue;
        if (u->dc <= w) {
            w -= u->dc;
            v -= u->ds;
        } else {
            v -= u->eff * (double)w;
            break;
        }
    }
    return v;
}

/* The root LP once more, noting each item's LP option and how close its upgrades are to the
 * break (the fractional upgrade): items near it are the uncertain ones, taken first. */
static void lp_root(solver *s, int64_t W)
{
    uint64_t w = (uint64_t)W;
    double brk = 0;
    for (int i = 0; i < s->n; i++) {
        s->lp_opt[i] = KEPT(s, i, 0);
        s->crit[i] = INFINITY;
    }
    for (int k = 0; k < s->nup; k++) {
        const upgrade *u = &s->up[k];
        if (u->dc <= w && s->lp_opt[u->item] == u->from) {
            w -= u->dc;
            s->lp_opt[u->item] = u->to;
        } else if (brk == 0) {
            brk = u->eff;
        }
    }
    for (int k = 0; k < s->nup; k++) {
        const upgrade *u = &s->up[k];
        double c = brk > 0 ? fabs(log(u->eff / brk)) : 0;
        s->crit[u->item] = c < s->crit[u->item] ? c : s->crit[u->item];
    }
}

/* order[0..m) by criticality, then index (insertion sort: no global for a qsort context) */
static void sort_by_crit(solver *s)
{
    for (int a = 1; a < s->m; a++)
        for (int b = a; b > 0; b--) {
            int x = s->order[b - 1], y = s->order[b];
            if (s->crit[x] < s->crit[y] || (s->crit[x] == s->crit[y] && x < y))
                break;
            s->order[b - 1] = y;
            s->order[b] = x;
        }
}

static uint64_t cmin(const solver *s, int i) { return COST(s, i, KEPT(s, i, 0)); }
static double smax(const solver *s, int i) { return SCORE(s, i, KEPT(s, i, 0)); }

/* A feasible solution from the greedy walk over the hull upgrades (an item whose next step does
 * not fit takes no later step), then single-item swaps while one lowers the score and fits. */
static void incumbent(solver *s, uint64_t base_cost)
{
    uint64_t used = base_cost;
    for (int i = 0; i < s->n; i++)
        s->best[i] = KEPT(s, i, 0);
    for (int k = 0; k < s->nup; k++) {
        const upgrade *u = &s->up[k];
        if (s->best[u->item] != u->from)
            continue; /* an earlier step of this item did not fit */
        if (used + u->dc > s->budget)
            continue;
        used += u->dc;
        s->best[u->item] = u->to;
    }
    for (int again = 1; again;) {
        again = 0;
        for (int i = 0; i < s->n; i++)
            for (int q = 0; q < s->nkept[i]; q++) {
                int j = KEPT(s, i, q), b = s->best[i];
                if (SCORE(s, i, j) < SCORE(s, i, b) && used - COST(s, i, b) + COST(s, i, j) <= s->budget) {
                    used = used - COST(s, i, b) + COST(s, i, j);
                    s->best[i] = j;
                    again = 1;
                }
            }
    }
    s->best_score = 0;
    for (int i = 0; i < s->n; i++)
        s->best_score += SCORE(s, i, s->best[i]);
}

/* One dynamic-programming state: the free items up to a stage given options, their summed cost
 * and score, and where it came from. */
typedef struct state {
    uint64_t cost;
    double score;
    int64_t back;   /* index of the parent state in the pool, -1 for the root */
    int opt;        /* option of this stage's item */
} state;

static int cmp_state(const void *a, const void *b)
{
    const state *x = a, *y = b;
    if (x->cost != y->cost)
        return x->cost < y->cost ? -1 : 1;
    if (x->score != y->score)
        return x->score < y->score ? -1 : 1;
    if (x->back != y->back)
        return x->back < y->back ? -1 : 1;
    return x->opt < y->opt ? -1 : x->opt > y->opt;
}

/* The LP relaxation of the items order[k..m) as a function of the bytes left after their
 * cheapest options: prefix sums of their hull upgrades in efficiency order. */
typedef struct lp_curve {
    int n;
    uint64_t *cum_dc;  /* (n + 1) */
    double *cum_ds;    /* (n + 1) */
    double *eff;       /* (n) */
    double base;       /* the items' scores at their cheapest options */
} lp_curve;

static void curve_build(const solver *s, lp_curve *c, double base)
{
    c->n = 0;
    c->base = base;
    c->cum_dc[0] = 0;
    c->cum_ds[0] = 0;
    for (int k = 0; k < s->nup; k++) {
        const upgrade *u = &s->up[k];
        if (!s->is_free[u->item])
            continue;
        c->eff[c->n] = u->eff;
        c->cum_dc[c->n + 1] = c->cum_dc[c->n] + u->dc;
        c->cum_ds[c->n + 1] = c->cum_ds[c->n] + u->ds;
        c->n++;
    }
}

static double curve_at(const lp_curve *c, uint64_t w)
{
    int lo = 0, hi = c->n; /* the last prefix that fits: cum_dc[lo] <= w */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (c->cum_dc[mid] <= w)
            lo = mid;
        else
            hi = mid - 1;
    }
    double v = c->base - c->cum_ds[lo];
    if (lo < c->n)
        v -= c->eff[lo] * (double)(w - c->cum_dc[lo]);
    return v;
}

/* Exact search over the free items order[0..m): states of equal items kept Pareto-optimal (no
 * cheaper state with a score as low), and pruned when even the LP of the items still to come
 * cannot bring them below the incumbent.  budget: bytes for the free items; best: the incumbent's
 * score over them.  Returns 0 and sets s->best when a better solution exists, 1 when the
 * incumbent stands, < 0 on failure. */
static int dp(solver *s, uint64_t budget, double best, lwq_error *e)
{
    size_t cap = 1u << 16, n = 1;
    int64_t max_states = s->max_nodes;
    state *pool = malloc(cap * sizeof *pool);
    lp_curve cv = {0};
    cv.cum_dc = malloc((size_t)(s->nup + 1) * sizeof *cv.cum_dc);
    cv.cum_ds = malloc((size_t)(s->nup + 1) * sizeof *cv.cum_ds);
    cv.eff = malloc((size_t)(s->nup + 1) * sizeof *cv.eff);
    int rc = pool && cv.cum_dc && cv.cum_ds && cv.eff ? 0 : lwq_errf(e, LWQ_ENOMEM, "knapsack: out of memory");
    uint64_t rest_min = 0;
    double rest_smax = 0;
    for (int k = 0; k < s->m; k++) {
        rest_min += cmin(s, s->order[k]);
        rest_smax += smax(s, s->order[k]);
    }
    size_t lo = 0; /* the current stage's states are pool[lo..n) */
    if (rc == 0)
        pool[0] = (state){0, 0, -1, -1};
    for (int k = 0; k < s->m && rc == 0; k++) {
        int i = s->order[k];
        s->is_free[i] = 0;
        rest_min -= cmin(s, i);
        rest_smax -= smax(s, i);
        curve_build(s, &cv, rest_smax);
        size_t hi = n;
        for (size_t p = lo; p < hi && rc == 0; p++)
            for (int q = 0; q < s->nkept[i]; q++) {
                int j = KEPT(s, i, q);
                if (!s->alive[(size_t)i * LWQ_MCKP_MAXOPT + (size_t)j])
                    continue;
                uint64_t c = pool[p].cost + COST(s, i, j);
                if (c > budget || budget - c < rest_min)
                    continue;
                double sc = pool[p].score + SCORE(s, i, j);
                if (curve_at(&cv, budget - c - rest_min) + sc >= best - s->tol)
                    continue;
                if ((int64_t)n >= max_states) {
                    rc = lwq_errf(e, LWQ_EUNSUPPORTED, "knapsack: more than %lld states (%d items left open after "
                                  "the reduction); not proven optimal", (long long)max_states, s->m);
                    break;
                }
                if (n == cap) {
                    state *np = realloc(pool, cap * 2 * sizeof *pool);
                    if (!np) {
                        rc = lwq_errf(e, LWQ_ENOMEM, "knapsack: out of memory for %zu states", cap * 2);
                        break;
                    }
                    pool = np;
                    cap *= 2;
                }
                pool[n++] = (state){c, sc, (int64_t)p, j};
            }
        if (rc)
            break;
        /* Pareto: by cost, keep a state only when it scores below every cheaper one */
        qsort(pool + hi, n - hi, sizeof *pool, cmp_state);
        size_t w = hi;
        for (size_t r = hi; r < n; r++)
            if (w == hi || pool[r].score < pool[w - 1].score)
                pool[w++] = pool[r];
        n = w;
        s->nodes += (int64_t)(n - hi);
        lo = hi;
        if (lo == n)
            break; /* nothing can beat the incumbent */
    }
    int found = 1;
    if (rc == 0 && lo < n && s->m > 0) {
        size_t b = lo; /* the last stage is sorted by cost with falling scores: its last state is the best */
        for (size_t r = lo; r < n; r++)
            if (pool[r].score < pool[b].score)
                b = r;
        if (pool[b].score < best) {
            found = 0;
            int64_t p = (int64_t)b;
            for (int k = s->m - 1; k >= 0; k--, p = pool[p].back)
                s->best[s->order[k]] = pool[p].opt;
        }
    }
    free(pool);
    free(cv.cum_dc);
    free(cv.cum_ds);
    free(cv.eff);
    return rc ? rc : found;
}

static void solver_free(solver *s)
{
    free(s->kept);
    free(s->nkept);
    free(s->alive);
    free(s->up);
    free(s->is_free);
    free(s->order);
    free(s->best);
    free(s->lp_opt);
    free(s->crit);
}

int lwq_mckp_solve(int n, const lwq_mckp_item *items, uint64_t budget, int64_t max_states, int *choice,
                   lwq_mckp_result *res, lwq_error *e)
{
    memset(res, 0, sizeof *res);
    solver s;
    memset(&s, 0, sizeof s);
    s.n = n;
    s.it = items;
    s.budget = budget;
    s.max_nodes = max_states > 0 ? max_states : 8000000; /* 24 bytes each */
    size_t N = (size_t)(n ? n : 1);
    s.kept = malloc(N * LWQ_MCKP_MAXOPT * sizeof *s.kept);
    s.nkept = malloc(N * sizeof *s.nkept);
    s.alive = calloc(N * LWQ_MCKP_MAXOPT, 1);
    s.up = malloc(N * LWQ_MCKP_MAXOPT * sizeof *s.up);
    s.is_free = malloc(N);
    s.order = malloc(N * sizeof *s.order);
    s.best = malloc(N * sizeof *s.best);
    s.lp_opt = malloc(N * sizeof *s.lp_opt);
    s.crit = malloc(N * sizeof *s.crit);
    if (!s.kept || !s.nkept || !s.alive || !s.up || !s.is_free || !s.order || !s.best || !s.lp_opt ||
        !s.crit) {
        solver_free(&s);
        return lwq_errf(e, LWQ_ENOMEM, "knapsack: out of memory for %d items", n);
    }
    uint64_t base_cost = 0;
    double base_score = 0;
    for (int i = 0; i < n; i++) {
        if (items[i].nopt < 1 || items[i].nopt > LWQ_MCKP_MAXOPT) {
            solver_free(&s);
            return lwq_errf(e, LWQ_EINVAL, "knapsack: item %d has %d options (1..%d)", i, items[i].nopt,
                            LWQ_MCKP_MAXOPT);
        }
        for (int j = 0; j < items[i].nopt; j++)
            if (!(items[i].score[j] >= 0) || !isfinite(items[i].score[j])) {
                solver_free(&s);
                return lwq_errf(e, LWQ_ENUMERIC, "knapsack: item %d option %d has score %g (must be finite, >= 0)", i,
                                j, items[i].score[j]);
            }
        dominance(&s, i);
        if (base_cost > UINT64_MAX - cmin(&s, i)) {
            solver_free(&s);
            return lwq_errf(e, LWQ_EINVAL, "knapsack: total cost overflows");
        }
        base_cost += cmin(&s, i);
        base_score += smax(&s, i);
        hull(&s, i);
    }
    if (base_cost > budget) {
        solver_free(&s);
        return lwq_errf(e, LWQ_EINVAL, "the budget of %llu bytes is below the least possible %llu bytes (every "
                        "group in its cheapest format)", (unsigned long long)budget, (unsigned long long)base_cost);
    }
    qsort(s.up, (size_t)s.nup, sizeof *s.up, cmp_upgrade);
    memset(s.is_free, 1, N);
    int64_t W = (int64_t)(budget - base_cost);
    res->lp_bound = lp(&s, base_score, W);
    incumbent(&s, base_cost);
    s.tol = 1e-12 * fmax(fabs(s.best_score), 1e-300);
    /* reduction: keep option j of item i only when the LP with i fixed to j can beat the
     * incumbent (the incumbent's own option always stays) */
    for (int i = 0; i < n; i++) {
        s.is_free[i] = 0;
        int alive = 0;
        for (int q = 0; q < s.nkept[i]; q++) {
            int j = KEPT(&s, i, q);
            int64_t w = W + (int64_t)cmin(&s, i) - (int64_t)COST(&s, i, j);
            double b = lp(&s, base_score - smax(&s, i) + SCORE(&s, i, j), w);
            uint8_t keep = j == s.best[i] || b < s.best_score - s.tol;
            s.alive[(size_t)i * LWQ_MCKP_MAXOPT + (size_t)j] = keep;
            alive += keep;
        }
        s.is_free[i] = 1;
        if (alive > 1)
            s.order[s.m++] = i;
    }
    res->free_items = s.m;
    lp_root(&s, W);
    sort_by_crit(&s);
    /* items with one option left are fixed at it (the incumbent's); the rest go to the DP */
    uint64_t cost = 0;
    double score = 0;
    for (int i = 0; i < n; i++)
        s.is_free[i] = 0;
    for (int k = 0; k < s.m; k++)
        s.is_free[s.order[k]] = 1;
    for (int i = 0; i < n; i++)
        if (!s.is_free[i]) {
            cost += COST(&s, i, s.best[i]);
            score += SCORE(&s, i, s.best[i]);
        }
    if (s.m > 0) {
        int rc = dp(&s, budget - cost, s.best_score - score, e);
        if (rc < 0) {
            res->nodes = s.nodes;
            solver_free(&s);
            return rc;
        }
    }
    res->nodes = s.nodes;
    res->score = 0;
    res->cost = 0;
    for (int i = 0; i < n; i++) {
        choice[i] = s.best[i];
        res->score += SCORE(&s, i, s.best[i]);
        res->cost += COST(&s, i, s.best[i]);
    }
    solver_free(&s);
    return 0;
}
