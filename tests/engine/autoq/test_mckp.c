/* The auto-quantize knapsack (engine/autoq/mckp.h): optimal against brute force, within budget, deterministic, infeasible budgets refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/autoq/mckp.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Exhaustive optimum: least score with cost <= budget (INFINITY when none fits). */
static double brute(int n, const lwq_mckp_item *it, uint64_t budget)
{
    int pick[16] = {0};
    double best = INFINITY;
    for (;;) {
        uint64_t c = 0;
        double s = 0;
        for (int i = 0; i < n; i++) {
            c += it[i].cost[pick[i]];
            s += it[i].score[pick[i]];
        }
        if (c <= budget && s < best)
            best = s;
        int i = 0;
        while (i < n && ++pick[i] == it[i].nopt)
            pick[i++] = 0;
        if (i == n)
            break;
    }
    return best;
}

/* Items shaped like the search's: 3 formats per group, cost up with score down, plus noise that
 * breaks the shape sometimes (dominated options, equal costs). */
static void random_items(int n, lwq_mckp_item *it)
{
    for (int i = 0; i < n; i++) {
        it[i].nopt = 1 + (int)(next() % 3);
        uint64_t base = 100 + next() % 1000;
        for (int j = 0; j < it[i].nopt; j++) {
            it[i].cost[j] = base * (uint64_t)(1 + j * 2) + next() % 50;
            it[i].score[j] = j == it[i].nopt - 1 && next() % 2 ? 0.0 : (double)(next() % 10000) / 100.0;
        }
        if (next() % 5 == 0 && it[i].nopt > 1)
            it[i].cost[1] = it[i].cost[0]; /* a tie in cost */
    }
}

Test(mckp, matches_brute_force_on_random_instances)
{
    lwq_mckp_item it[12];
    int choice[12];
    for (int t = 0; t < 400; t++) {
        int n = 1 + (int)(next() % 11);
        random_items(n, it);
        uint64_t lo = 0, hi = 0;
        for (int i = 0; i < n; i++) {
            uint64_t mn = it[i].cost[0], mx = it[i].cost[0];
            for (int j = 1; j < it[i].nopt; j++) {
                mn = it[i].cost[j] < mn ? it[i].cost[j] : mn;
                mx = it[i].cost[j] > mx ? it[i].cost[j] : mx;
            }
            lo += mn;
            hi += mx;
        }
        uint64_t budget = lo + (hi > lo ? next() % (hi - lo + 1) : 0);
        double want = brute(n, it, budget);
        lwq_error e = {0};
        lwq_mckp_result r;
        cr_assert_eq(lwq_mckp_solve(n, it, budget, 0, choice, &r, &e), 0, "instance %d: %s", t, e.msg);
        uint64_t c = 0;
        double s = 0;
        for (int i = 0; i < n; i++) {
            cr_assert(choice[i] >= 0 && choice[i] < it[i].nopt);
            c += it[i].cost[choice[i]];
            s += it[i].score[choice[i]];
        }
        cr_assert_leq(c, budget, "instance %d: cost %llu over the budget %llu", t, (unsigned long long)c,
                      (unsigned long long)budget);
        cr_assert_eq(c, r.cost);
        cr_assert(fabs(s - want) <= 1e-9 * fmax(1, want), "instance %d: score %.17g, optimum %.17g", t, s, want);
        cr_assert(r.lp_bound <= s + 1e-9 * fmax(1, s), "instance %d: LP bound %g above the optimum %g", t, r.lp_bound,
                  s);
    }
}

Test(mckp, budget_below_the_cheapest_is_refused_with_the_least_total)
{
    lwq_mckp_item it[2] = {{2, {10, 20}, {1, 0}}, {2, {5, 7}, {3, 1}}};
    int choice[2];
    lwq_error e = {0};
    lwq_mckp_result r;
    cr_assert_eq(lwq_mckp_solve(2, it, 14, 0, choice, &r, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "15 bytes"), "%s", e.msg);
    cr_assert_eq(lwq_mckp_solve(2, it, 15, 0, choice, &r, &e), 0, "%s", e.msg);
    cr_assert(choice[0] == 0 && choice[1] == 0);
}

Test(mckp, ties_resolve_the_same_way_every_time)
{
    /* 40 identical items: many optimal solutions, one answer */
    lwq_mckp_item it[40];
    for (int i = 0; i < 40; i++)
        it[i] = (lwq_mckp_item){3, {10, 20, 40}, {4, 1, 0}};
    int a[40], b[40];
    lwq_error e = {0};
    lwq_mckp_result r1, r2;
    cr_assert_eq(lwq_mckp_solve(40, it, 40 * 10 + 15 * 10, 0, a, &r1, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_mckp_solve(40, it, 40 * 10 + 15 * 10, 0, b, &r2, &e), 0, "%s", e.msg);
    cr_assert_eq(memcmp(a, b, sizeof a), 0);
    /* 150 extra bytes: 15 upgrades to option 1 save 45; nothing better fits */
    cr_assert(fabs(r1.score - (40 * 4 - 45)) < 1e-12, "score %g", r1.score);
}

Test(mckp, hundreds_of_items_solve_quickly)
{
    static lwq_mckp_item it[600];
    static int choice[600];
    for (int i = 0; i < 600; i++) {
        uint64_t c = 1000 + (uint64_t)(i % 4) * 777;
        it[i] = (lwq_mckp_item){3, {c * 9 / 16 + 8, c + 8, 2 * c}, {0, 0, 0}};
        it[i].score[0] = 1.0 + (double)(next() % 100000) / 1000.0;
        it[i].score[1] = it[i].score[0] * (0.05 + (double)(next() % 100) / 1000.0);
        it[i].score[2] = 0;
    }
    uint64_t lo = 0;
    for (int i = 0; i < 600; i++)
        lo += it[i].cost[0];
    lwq_error e = {0};
    lwq_mckp_result r;
    cr_assert_eq(lwq_mckp_solve(600, it, lo + lo / 3, 0, choice, &r, &e), 0, "%s", e.msg);
    cr_assert_leq(r.cost, lo + lo / 3);
    fprintf(stderr, "600 items: score %.6f lp %.6f nodes %lld free %d\n", r.score, r.lp_bound, (long long)r.nodes, r.free_items);
    cr_assert(r.lp_bound <= r.score);
}

Test(mckp, a_search_that_outgrows_its_state_cap_is_refused)
{
    /* costs that pack in many ways and scores that keep every option alive */
    static lwq_mckp_item it[200];
    static int choice[200];
    for (int i = 0; i < 200; i++) {
        uint64_t c = 1000 + next() % 3000;
        it[i] = (lwq_mckp_item){3, {c, c + 1 + next() % 2000, 3 * c}, {0, 0, 0}};
        it[i].score[0] = 100 + (double)(next() % 1000);
        it[i].score[1] = it[i].score[0] * (double)(it[i].cost[0]) / (double)it[i].cost[1] * 0.6;
    }
    uint64_t lo = 0;
    for (int i = 0; i < 200; i++)
        lo += it[i].cost[0];
    lwq_error e = {0};
    lwq_mckp_result r;
    cr_assert_eq(lwq_mckp_solve(200, it, lo * 2, 0, choice, &r, &e), 0, "%s", e.msg);
    cr_assert_gt(r.nodes, 10, "only %lld states: not a test of the cap", (long long)r.nodes);
    int rc = lwq_mckp_solve(200, it, lo * 2, r.nodes / 2, choice, &r, &e);
    cr_assert(rc == LWQ_EUNSUPPORTED && strstr(e.msg, "not proven optimal"), "rc %d: %s", rc, e.msg);
}
