/* tests/core/test_parallel.c — the thread pool visits every index once; nested calls run inline. */
#include <criterion/criterion.h>

#include "core/parallel.h"

static void fill(void *ctx, int64_t b, int64_t e, int tid)
{
    int *a = ctx;
    for (int64_t i = b; i < e; i++)
        a[i] += (int)i + 1;
}

Test(parallel, every_index_visited_once)
{
    for (int t = 1; t <= 4; t++) {
        lwq_parallel_set_threads(t);
        for (int64_t n = 0; n < 50; n++) {
            int a[64] = {0};
            lwq_parallel_for(n, 1, fill, a);
            for (int64_t i = 0; i < 64; i++)
                cr_assert_eq(a[i], i < n ? (int)i + 1 : 0, "t=%d n=%ld i=%ld", t, (long)n, (long)i);
        }
    }
    lwq_parallel_shutdown();
}

static void nested(void *ctx, int64_t b, int64_t e, int tid)
{
    for (int64_t i = b; i < e; i++)
        lwq_parallel_for(4, 1, fill, (int *)ctx + 4 * i);
}

Test(parallel, nested_call_runs_inline)
{
    lwq_parallel_set_threads(3);
    int a[32] = {0};
    lwq_parallel_for(8, 1, nested, a);
    for (int i = 0; i < 32; i++)
        cr_assert_eq(a[i], i % 4 + 1);
    lwq_parallel_shutdown();
}
