/* The CUDA router's row logic (kernels/cuda/route.h, run here on the host) routes like the CPU backend: same experts and weights for random, tied and NaN logits; an all-NaN row goes to k distinct experts (torch.topk's order) with NaN weights, not index -1. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cuda/route.h"

#define E 8
#define ROWS 6

static lwq_backend g_cpu;

static void setup(void)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_cpu_create(&g_cpu, 1, &e), 0, "%s", e.msg);
}

static void teardown(void) { lwq_backend_destroy(&g_cpu); }

TestSuite(cuda_route, .init = setup, .fini = teardown);

static lwq_tensor t2(void *data, lwq_dtype dt, int64_t r, int64_t c)
{
    lwq_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.ndim = 2;
    t.shape[0] = r;
    t.shape[1] = c;
    t.stride[0] = c;
    t.stride[1] = 1;
    t.device = LWQ_DEV_CPU;
    return t;
}

/* Route `lg` (ROWS x E, f32) both ways and compare every index and every weight's bits. */
static void same_routing(const float *lg, int k, lwq_route_mode mode)
{
    int32_t ic[ROWS * E], ig[ROWS * E];
    float wc[ROWS * E], wg[ROWS * E], ps[E];
    int32_t qs[E];
    lwq_tensor L = t2((void *)lg, LWQ_F32, ROWS, E), I = t2(ic, LWQ_I32, ROWS, k), W = t2(wc, LWQ_F32, ROWS, k);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_moe_route(&g_cpu, &L, k, mode, LWQ_BF16, &I, &W, &e), 0, "%s", e.msg);
    for (int64_t r = 0; r < ROWS; r++)
        lwq_route_row(lg, LWQ_F32, r, E, k, (int)mode, LWQ_BF16, ig, wg, ps, qs);
    for (int i = 0; i < ROWS * k; i++) {
        cr_expect_eq(ig[i], ic[i], "mode %d k %d row %d slot %d: expert %d on CUDA, %d on the CPU", (int)mode, k,
                     i / k, i % k, ig[i], ic[i]);
        uint32_t a, b;
        memcpy(&a, &wg[i], 4);
        memcpy(&b, &wc[i], 4);
        cr_expect(a == b || (wg[i] != wg[i] && wc[i] != wc[i]), "mode %d k %d row %d slot %d: weight %g vs %g",
                  (int)mode, k, i / k, i % k, (double)wg[i], (double)wc[i]);
    }
}

static const lwq_route_mode modes[] = {LWQ_ROUTE_SOFTMAX_TOPK, LWQ_ROUTE_SOFTMAX_TOPK_NORM, LWQ_ROUTE_TOPK_SOFTMAX};

static void all_modes(const float *lg)
{
    for (int m = 0; m < 3; m++)
        for (int k = 1; k <= E; k++)
            same_routing(lg, k, modes[m]);
}

/* The kernel skipped NaN and, with nothing else left, wrote index -1 and weight 0: the CPU gives
 * two distinct experts and NaN weights (torch.topk's order of 8 tied NaN at k = 2: 6, 5). */
Test(cuda_route, all_nan_logits_route_as_on_the_cpu)
{
    float lg[ROWS * E];
    for (int i = 0; i < ROWS * E; i++)
        lg[i] = NAN;
    all_modes(lg);
    int32_t idx[E];
    float w[E], ps[E];
    int32_t qs[E];
    lwq_route_row(lg, LWQ_F32, 0, E, 2, LWQ_ROUTE_SOFTMAX_TOPK, LWQ_F32, idx, w, ps, qs);
    cr_expect(idx[0] == 6 && idx[1] == 5, "all-NaN row: experts %d %d", idx[0], idx[1]);
    cr_expect(w[0] != w[0] && w[1] != w[1], "all-NaN row: weights %g %g", (double)w[0], (double)w[1]);
}

Test(cuda_route, some_nan_logits_route_as_on_the_cpu)
{
    float lg[ROWS * E];
    srand(7);
    for (int i = 0; i < ROWS * E; i++)
        lg[i] = (float)rand() / (float)RAND_MAX * 8.0f - 4.0f;
    lg[0 * E + 3] = NAN;                    /* one NaN */
    lg[1 * E + 0] = lg[1 * E + 7] = NAN;    /* NaN at both ends */
    for (int i = 0; i < E; i += 2)          /* half NaN: k > 4 reaches them */
        lg[2 * E + i] = NAN;
    lg[3 * E + 5] = INFINITY;
    lg[4 * E + 1] = -INFINITY;
    all_modes(lg);
}

Test(cuda_route, random_and_tied_logits_route_as_on_the_cpu)
{
    float lg[ROWS * E];
    srand(11);
    for (int i = 0; i < ROWS * E; i++)
        lg[i] = (float)rand() / (float)RAND_MAX * 6.0f - 3.0f;
    for (int i = 0; i < E; i++) /* a row of ties, and one of +-0 */
        lg[5 * E + i] = 0.5f;
    for (int i = 0; i < E; i++)
        lg[4 * E + i] = i % 2 ? -0.0f : 0.0f;
    all_modes(lg);
}
