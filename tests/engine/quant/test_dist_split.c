/* engine/quant/dist_split: batches split over ranks by rows, linears assigned by cost, fused groups on one rank. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/quant/dist.h"

Test(dist_split, every_rank_gets_contiguous_batches_balanced_by_rows)
{
    int64_t rows[6] = {100, 100, 100, 100, 100, 100};
    int first[4];
    cr_assert_eq(lwq_dist_split_batches(rows, 6, 3, first, NULL), 0);
    cr_assert(first[0] == 0 && first[1] == 2 && first[2] == 4 && first[3] == 6);
    /* one long batch: the others share the rest, each rank still has one */
    int64_t skew[4] = {1000, 10, 10, 10};
    int f2[3];
    cr_assert_eq(lwq_dist_split_batches(skew, 4, 2, f2, NULL), 0);
    cr_assert(f2[0] == 0 && f2[1] == 1 && f2[2] == 4, "%d %d %d", f2[0], f2[1], f2[2]);
}

Test(dist_split, each_rank_gets_at_least_one_batch)
{
    int64_t rows[4] = {1, 1, 1, 1000};
    int first[5];
    cr_assert_eq(lwq_dist_split_batches(rows, 4, 4, first, NULL), 0);
    for (int r = 0; r < 4; r++)
        cr_assert_eq(first[r + 1] - first[r], 1, "rank %d", r);
}

Test(dist_split, more_ranks_than_batches_is_refused_saying_how_many_can_work)
{
    int64_t rows[2] = {8, 8};
    int first[4];
    lwq_error e = {0};
    cr_assert_eq(lwq_dist_split_batches(rows, 2, 3, first, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "3 ranks, but the calibration set makes only 2 batches") && strstr(e.msg, "at most 2 ranks"),
              "%s", e.msg);
}

/* q, k, v fused (group 0), o alone, gate and up fused (group 1), down alone, a router */
static lwq_arch_linear L[7] = {
    {.name = "q", .out_features = 512, .in_features = 512, .group = 0, .expert = -1},
    {.name = "k", .out_features = 128, .in_features = 512, .group = 0, .expert = -1},
    {.name = "v", .out_features = 128, .in_features = 512, .group = 0, .expert = -1},
    {.name = "o", .out_features = 512, .in_features = 512, .group = -1, .expert = -1},
    {.name = "gate", .out_features = 1024, .in_features = 512, .group = 1, .expert = -1},
    {.name = "up", .out_features = 1024, .in_features = 512, .group = 1, .expert = -1},
    {.name = "down", .out_features = 512, .in_features = 1024, .group = -1, .expert = -1},
};

static void choices(lwq_quant_choice *c, lwq_calib_algo algo)
{
    for (int i = 0; i < 7; i++)
        c[i] = (lwq_quant_choice){.format = LWQ_QFMT_NVFP4, .algo = algo, .fp8_scale_sweep = 1};
}

Test(dist_split, fused_groups_go_to_one_rank_and_every_linear_has_one_owner)
{
    lwq_arch_layer p = {.nlinears = 7, .linears = L, .ngroups = 2};
    lwq_quant_choice c[7];
    choices(c, LWQ_ALGO_MSE);
    for (int size = 1; size <= 5; size++) {
        int owner[7];
        cr_assert_eq(lwq_dist_assign(&p, c, NULL, size, owner, NULL), 0);
        for (int i = 0; i < 7; i++)
            cr_assert(owner[i] >= 0 && owner[i] < size, "%d ranks: %s has owner %d", size, L[i].name, owner[i]);
        cr_assert(owner[0] == owner[1] && owner[1] == owner[2], "%d ranks: q, k, v split", size);
        cr_assert_eq(owner[4], owner[5], "%d ranks: gate and up split", size);
    }
}

Test(dist_split, the_largest_items_are_spread_over_the_ranks)
{
    lwq_arch_layer p = {.nlinears = 7, .linears = L, .ngroups = 2};
    lwq_quant_choice c[7];
    choices(c, LWQ_ALGO_MSE);
    int owner[7];
    cr_assert_eq(lwq_dist_assign(&p, c, NULL, 2, owner, NULL), 0);
    /* gate+up (2 x 1024 x 512) is the largest item, q+k+v (768 x 512) and down (512 x 1024) next:
     * gate+up on one rank, down (and then q+k+v, o) on the other */
    cr_assert_neq(owner[4], owner[6]);
    double load[2] = {0, 0};
    for (int i = 0; i < 7; i++)
        load[owner[i]] += lwq_dist_cost(&L[i], &c[i]);
    cr_assert(load[0] > 0.8 * load[1] && load[1] > 0.8 * load[0], "loads %g %g", load[0], load[1]);
}

Test(dist_split, only_and_unquantized_linears_have_no_owner)
{
    lwq_arch_layer p = {.nlinears = 7, .linears = L, .ngroups = 2};
    lwq_quant_choice c[7];
    choices(c, LWQ_ALGO_MAX);
    c[3].format = LWQ_QFMT_NONE;
    uint8_t only[7] = {1, 1, 1, 1, 0, 0, 1};
    int owner[7];
    cr_assert_eq(lwq_dist_assign(&p, c, only, 3, owner, NULL), 0);
    cr_assert(owner[3] == -1 && owner[4] == -1 && owner[5] == -1);
    cr_assert(owner[0] >= 0 && owner[6] >= 0);
}
