/* engine/quant/dist_split: batches split over ranks by rows; linears whole or by rows, balanced by cost. */
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

/* Every quantized linear's rows, exactly once, as contiguous ranges in rank order; the ranks'
 * estimated loads into load (may be NULL). */
static void check_cover(const lwq_arch_layer *p, const lwq_quant_choice *c, const uint8_t *only, int size,
                        const lwq_qlayer_rows *share, double *load)
{
    for (int r = 0; load && r < size; r++)
        load[r] = 0;
    for (int i = 0; i < p->nlinears; i++) {
        int want = c[i].format != LWQ_QFMT_NONE && (!only || only[i]);
        int64_t at = 0;
        for (int r = 0; r < size; r++) {
            lwq_qlayer_rows s = share[i * size + r];
            if (s.r1 == s.r0)
                continue;
            cr_assert(want, "%d ranks: %s is not quantized but rank %d has rows of it", size, p->linears[i].name, r);
            cr_assert(s.r0 == at && s.r1 > s.r0, "%d ranks: %s rank %d has [%lld, %lld) after row %lld", size,
                      p->linears[i].name, r, (long long)s.r0, (long long)s.r1, (long long)at);
            at = s.r1;
            if (load)
                load[r] += lwq_dist_cost(&p->linears[i], &c[i]) * (double)(s.r1 - s.r0) /
                           (double)p->linears[i].out_features;
        }
        cr_assert_eq(at, want ? p->linears[i].out_features : 0, "%d ranks: %s covered to row %lld", size,
                     p->linears[i].name, (long long)at);
    }
}

static int whole_on(const lwq_qlayer_rows *share, int size, int i, const lwq_arch_linear *l)
{
    for (int r = 0; r < size; r++)
        if (share[i * size + r].r0 == 0 && share[i * size + r].r1 == l->out_features)
            return r;
    return -1;
}

Test(dist_split, every_quantized_row_has_one_rank_in_rank_order)
{
    lwq_arch_layer p = {.nlinears = 7, .linears = L, .ngroups = 2};
    lwq_calib_algo algos[] = {LWQ_ALGO_MAX, LWQ_ALGO_MSE, LWQ_ALGO_LOCAL_HESSIAN, LWQ_ALGO_GPTQ};
    for (int a = 0; a < 4; a++)
        for (int size = 1; size <= 5; size++) {
            lwq_quant_choice c[7];
            lwq_qlayer_rows share[7 * 5];
            choices(c, algos[a]);
            cr_assert_eq(lwq_dist_assign(&p, c, NULL, size, share, NULL), 0);
            check_cover(&p, c, NULL, size, share, NULL);
        }
}

Test(dist_split, gptq_linears_go_whole_and_fused_groups_to_one_rank)
{
    lwq_arch_layer p = {.nlinears = 7, .linears = L, .ngroups = 2};
    lwq_quant_choice c[7];
    choices(c, LWQ_ALGO_GPTQ);
    for (int size = 1; size <= 5; size++) {
        lwq_qlayer_rows share[7 * 5];
        cr_assert_eq(lwq_dist_assign(&p, c, NULL, size, share, NULL), 0);
        int owner[7];
        for (int i = 0; i < 7; i++) {
            owner[i] = whole_on(share, size, i, &L[i]);
            cr_assert(owner[i] >= 0, "%d ranks: %s is split", size, L[i].name);
        }
        cr_assert(owner[0] == owner[1] && owner[1] == owner[2], "%d ranks: q, k, v apart", size);
        cr_assert_eq(owner[4], owner[5], "%d ranks: gate and up apart", size);
    }
}

Test(dist_split, splittable_linears_level_the_ranks_loads)
{
    lwq_arch_layer p = {.nlinears = 7, .linears = L, .ngroups = 2};
    lwq_quant_choice c[7];
    choices(c, LWQ_ALGO_MSE);
    for (int size = 2; size <= 5; size++) {
        lwq_qlayer_rows share[7 * 5];
        double load[5], total = 0, row = 130.0 * 1024; /* the cost of one row of down */
        cr_assert_eq(lwq_dist_assign(&p, c, NULL, size, share, NULL), 0);
        check_cover(&p, c, NULL, size, share, load);
        for (int r = 0; r < size; r++)
            total += load[r];
        for (int r = 0; r < size; r++)
            cr_assert(load[r] > total / size - row && load[r] < total / size + row, "%d ranks: rank %d has %g of %g",
                      size, r, load[r], total);
    }
}

Test(dist_split, whole_linears_go_first_and_the_split_ones_fill_around_them)
{
    lwq_arch_layer p = {.nlinears = 7, .linears = L, .ngroups = 2};
    lwq_quant_choice c[7];
    choices(c, LWQ_ALGO_MSE);
    c[0].algo = LWQ_ALGO_GPTQ; /* q whole (512^3 / 8 + 512^3 / 3), less than half of the layer */
    lwq_qlayer_rows share[7 * 2];
    double load[2];
    cr_assert_eq(lwq_dist_assign(&p, c, NULL, 2, share, NULL), 0);
    check_cover(&p, c, NULL, 2, share, load);
    cr_assert_eq(whole_on(share, 2, 0, &L[0]), 0, "q (the one whole item) is not on rank 0 whole");
    double total = load[0] + load[1], row = 130.0 * 1024;
    cr_assert(load[0] > total / 2 - row && load[0] < total / 2 + row, "loads %g %g", load[0], load[1]);
}

Test(dist_split, a_whole_linear_above_the_level_leaves_the_rest_to_the_other_ranks)
{
    lwq_arch_layer p = {.nlinears = 7, .linears = L, .ngroups = 2};
    lwq_quant_choice c[7];
    choices(c, LWQ_ALGO_MSE);
    c[6].algo = LWQ_ALGO_GPTQ; /* down whole: 512 x 1024^2 / 8 + 1024^3 / 3, more than everything else */
    lwq_qlayer_rows share[7 * 2];
    cr_assert_eq(lwq_dist_assign(&p, c, NULL, 2, share, NULL), 0);
    check_cover(&p, c, NULL, 2, share, NULL);
    cr_assert_eq(whole_on(share, 2, 6, &L[6]), 0);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(whole_on(share, 2, i, &L[i]), 1, "%s is not wholly on rank 1", L[i].name);
}

Test(dist_split, only_and_unquantized_linears_have_no_rows)
{
    lwq_arch_layer p = {.nlinears = 7, .linears = L, .ngroups = 2};
    lwq_quant_choice c[7];
    choices(c, LWQ_ALGO_MAX);
    c[3].format = LWQ_QFMT_NONE;
    uint8_t only[7] = {1, 1, 1, 1, 0, 0, 1};
    lwq_qlayer_rows share[7 * 3];
    cr_assert_eq(lwq_dist_assign(&p, c, only, 3, share, NULL), 0);
    check_cover(&p, c, only, 3, share, NULL);
    for (int r = 0; r < 3; r++)
        cr_assert(share[3 * 3 + r].r1 == 0 && share[4 * 3 + r].r1 == 0 && share[5 * 3 + r].r1 == 0);
}
