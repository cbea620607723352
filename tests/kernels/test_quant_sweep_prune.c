/* The CPU fp8_scale_sweep skips strongly saturated candidates (kernels/cpu/quant_search_cpu.c); this
 * checks the skip is exact: on blocks built to stress it (one spike over tiny values, all-equal
 * blocks full of ties, values on grid points, blocks far below the tensor's amax, random
 * normals), every chosen byte equals the unpruned reference search of layout/quant_formats.h. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "kernels/quant.h"
#include "layout/quant_formats.h"

static uint64_t g_s = 0x9e3779b97f4a7c15ull;
static double urand(void)
{
    g_s ^= g_s << 13;
    g_s ^= g_s >> 7;
    g_s ^= g_s << 17;
    return (double)(g_s >> 11) * 0x1p-53;
}

static float gen(int kind, int i, int b)
{
    switch (kind) {
    case 0: /* a spike and tiny values */
        return i == b % 16 ? (float)(1.0 + urand()) : (float)((urand() - 0.5) * 1e-3);
    case 1: /* all equal: every candidate ties with its neighbours somewhere */
        return 0.37f;
    case 2: /* on E2M1 grid points of some divisor */
    {
        static const float g[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
        return g[(i + b) % 8] * 0.01f * (float)(1 + b % 5) * (i & 1 ? -1.0f : 1.0f);
    }
    case 3: /* far below the tensor amax */
        return (float)((urand() - 0.5) * 1e-4);
    default: /* normal-ish */
        return (float)((urand() + urand() + urand() - 1.5) * 0.05);
    }
}

Test(quant_sweep_prune, pruned_sweep_equals_reference_search)
{
    const int64_t rows = 64, cols = 256, nb = rows * cols / 16;
    float *w = malloc((size_t)(rows * cols) * sizeof *w);
    uint8_t *scale = malloc((size_t)nb);
    for (int kind = 0; kind < 5; kind++) {
        for (int64_t b = 0; b < nb; b++)
            for (int i = 0; i < 16; i++)
                w[b * 16 + i] = gen(kind, i, (int)b);
        w[7] = 2.0f; /* the tensor amax, so most blocks sit well below it */
        lwq_error e = {0};
        cr_assert_geq(lwq_quant_nvfp4_sweep(w, LWQ_F32, rows, cols, 2.0f, NULL, "w", NULL, scale, &e), 0, "%s", e.msg);
        float ws2 = lwq_nvfp4_ws2(2.0f);
        for (int64_t b = 0; b < nb; b++) {
            uint8_t want = lwq_nvfp4_sweep_block_ref(w + b * 16, ws2, NULL);
            cr_assert_eq(scale[b], want, "kind %d block %lld: pruned sweep picked %d, the full search %d", kind,
                         (long long)b, scale[b], want);
        }
    }
    free(w);
    free(scale);
}
