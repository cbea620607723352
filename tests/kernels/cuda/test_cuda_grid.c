/* The CUDA kernels' launch geometry (kernels/cuda/grid.h) emulated on the host: a capped grid with the grid-stride loop covers every row exactly once. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "kernels/cuda/grid.h"

/* Emulate a launch of lwq_grid_for(n, block) blocks: count how often each item is visited. */
static uint8_t *visit_all(int64_t n, int block)
{
    uint8_t *seen = calloc((size_t)n, 1);
    cr_assert(seen);
    unsigned grid = lwq_grid_for(n, block);
    for (unsigned bid = 0; bid < grid; bid++)
        for (int tid = 0; tid < block; tid++)
            LWQ_GRID_STRIDE(i, n, bid, block, grid, tid) seen[i]++;
    return seen;
}

/* k_route took one row per thread and returned for r >= n: under the cap (65535*16 blocks) the
 * rows past grid*block were never routed (their expert indexes and weights stayed garbage). */
Test(cuda_grid, capped_grid_visits_every_row_exactly_once)
{
    const int block = 128;
    const int64_t n = LWQ_GRID_MAX_BLOCKS * block + 1000;
    cr_assert_lt((int64_t)lwq_grid_for(n, block) * block, n, "the grid is capped below n");
    uint8_t *seen = visit_all(n, block);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (seen[i] != 1)
            bad = i;
    cr_expect_eq(bad, -1, "row %lld visited %d times", (long long)bad, bad >= 0 ? seen[bad] : 1);
    free(seen);
}

Test(cuda_grid, small_and_empty_launches)
{
    cr_expect_eq(lwq_grid_for(0, 256), 1u, "an empty launch still has one block");
    cr_expect_eq(lwq_grid_for(1, 256), 1u);
    cr_expect_eq(lwq_grid_for(257, 256), 2u);
    uint8_t *seen = visit_all(300, 256);
    for (int i = 0; i < 300; i++)
        cr_expect_eq(seen[i], 1, "item %d", i);
    free(seen);
}
