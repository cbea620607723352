/* CPU-vs-CUDA op tests: the two backends, a suite that skips with a message without a device, the
 * shared random stream and the tensor kept on both backends. One test file includes it. */
#ifndef LWQ_TESTS_CUDA_PAIR_H
#define LWQ_TESTS_CUDA_PAIR_H

#include <criterion/criterion.h>

#include "kernels/backend.h"

static lwq_backend cpu, gpu;

/* TestSuite `name` whose setup makes both backends, skipping with "`what` skipped: <why>" */
#define LWQT_CUDA_SUITE(name, what)                                                           \
    static void setup(void)                                                                   \
    {                                                                                         \
        lwq_error e = {0};                                                                    \
        cr_assert_eq(lwq_backend_cpu_create(&cpu, 2, &e), 0);                                 \
        if (lwq_backend_cuda_probe(&e) <= 0)                                                  \
            cr_skip_test(what " skipped: %s", e.msg);                                         \
        cr_assert_eq(lwq_backend_cuda_create(&gpu, 0, &e), 0, "%s", e.msg);                   \
    }                                                                                         \
    static void teardown(void)                                                                \
    {                                                                                         \
        lwq_backend_destroy(&cpu);                                                            \
        if (gpu.ops)                                                                          \
            lwq_backend_destroy(&gpu);                                                        \
    }                                                                                         \
    TestSuite(name, .init = setup, .fini = teardown)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

typedef struct pair {
    lwq_tensor c, g; /* same contents on cpu and gpu */
} pair;

static void drop(pair *p)
{
    lwq_backend_tensor_free(&cpu, &p->c);
    lwq_backend_tensor_free(&gpu, &p->g);
}

#endif
