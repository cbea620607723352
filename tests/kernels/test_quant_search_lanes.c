/* The NVFP4 block searches (kernels/cpu/quant/quant_search_cpu.c: 16 candidates per lane pass) pick, on every block, the byte or amax the one-candidate reference functions of layout/format/quant_formats.h pick. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "kernels/quant.h"
#include "layout/format/quant_formats.h"

#define ROWS 48
#define COLS 256
#define NB (ROWS * COLS / 16)

static uint64_t g_s = 0x243f6a8885a308d3ull;
static double urand(void)
{
    g_s ^= g_s << 13;
    g_s ^= g_s >> 7;
    g_s ^= g_s << 17;
    return ((double)(g_s >> 11) + 0.5) * 0x1p-53;
}
static double nrand(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

/* kind 0: normal with rare outliers (a trained weight); 1: blocks scaled over 2^-12..2^0 (every
 * chunk position of the candidate range); 2: a spike over tiny values; 3: all equal (ties
 * everywhere); 4: E2M1 grid points of some divisor; 5: mostly zeros */
static float gen(int kind, int i, int b)
{
    switch (kind) {
    case 0: return (float)(nrand() * 0.02 * (urand() < 1.0 / 512 ? 8.0 : 1.0));
    case 1: return (float)(nrand() * ldexp(1.0, -(b % 13)));
    case 2: return i == b % 16 ? (float)(1.0 + urand()) : (float)((urand() - 0.5) * 1e-3);
    case 3: return 0.37f;
    case 4: {
        static const float g[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
        return g[(i + b) % 8] * 0.01f * (float)(1 + b % 5) * (i & 1 ? -1.0f : 1.0f);
    }
    default: return urand() < 0.9 ? 0.0f : (float)nrand();
    }
}

/* w: (ROWS, COLS) of kind, rounded to BF16 values when bf16 (stored as F32 either way); returns
 * its amax (at least the 1.0 put at element 3, so most blocks sit below the tensor's amax). */
static float fill(float *w, int kind, int bf16)
{
    float m = 0;
    for (int b = 0; b < NB; b++)
        for (int i = 0; i < 16; i++) {
            float v = gen(kind, i, b);
            w[b * 16 + i] = bf16 ? lwq_bf16_to_f32(lwq_f32_to_bf16(v)) : v;
        }
    w[3] = 1.0f;
    for (int k = 0; k < ROWS * COLS; k++)
        m = fabsf(w[k]) > m ? fabsf(w[k]) : m;
    return m;
}

/* (COLS/16) symmetric positive semi-definite 16x16 blocks: X^T X of 8 normal tokens (rank 8), and
 * every other one a multiple of the identity, where the tied candidates of the tie-heavy kinds stay
 * tied only if every lane sums exactly as the reference does */
static void hessian(float *h)
{
    for (int k = 0; k < COLS / 16; k++) {
        if (k % 2) {
            for (int i = 0; i < 256; i++)
                h[k * 256 + i] = i % 17 ? 0.0f : 0.75f;
            continue;
        }
        double x[8][16];
        for (int t = 0; t < 8; t++)
            for (int i = 0; i < 16; i++)
                x[t][i] = nrand();
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                double s = 0;
                for (int t = 0; t < 8; t++)
                    s += x[t][i] * x[t][j];
                h[k * 256 + i * 16 + j] = (float)(s / 8);
            }
    }
}

static void check_sweep(int with_h)
{
    float *w = malloc(ROWS * COLS * sizeof *w), *h = malloc(COLS * 16 * sizeof *h), *ba = malloc(NB * sizeof *ba);
    uint8_t *sc = malloc(NB);
    hessian(h);
    for (int kind = 0; kind < 6; kind++)
        for (int bf16 = 0; bf16 < 2; bf16++) {
            float g = fill(w, kind, bf16);
            lwq_error e = {0};
            cr_assert_geq(lwq_quant_nvfp4_sweep(w, LWQ_F32, ROWS, COLS, g, with_h ? h : NULL, "w", ba, sc, &e), 0,
                          "%s", e.msg);
            float ws2 = lwq_nvfp4_ws2(g);
            for (int b = 0; b < NB; b++) {
                const float *hb = with_h ? h + (b % (COLS / 16)) * 256 : NULL;
                uint8_t want = lwq_nvfp4_sweep_block_ref(w + b * 16, ws2, hb);
                cr_assert_eq(sc[b], want, "kind %d bf16 %d block %d: picked %d, the reference %d", kind, bf16, b,
                             sc[b], want);
                cr_assert_eq(lwq_f32_bits(ba[b]), lwq_f32_bits(lwq_nvfp4_sweep_amax(want, g)));
            }
        }
    free(w);
    free(h);
    free(ba);
    free(sc);
}

Test(quant_search_lanes, sweep_picks_the_reference_byte) { check_sweep(0); }

Test(quant_search_lanes, local_hessian_sweep_picks_the_reference_byte) { check_sweep(1); }

/* the mse reference: candidates a_k = bamax * mult[k] in order, each scored with the divisor of its
 * static scale byte, the first smallest kept */
static float mse_ref(const float *x, float g, float fp8max, const float *mult, int n)
{
    float bamax = 0;
    for (int i = 0; i < 16; i++)
        bamax = fabsf(x[i]) > bamax ? fabsf(x[i]) : bamax;
    float ws2 = fp8max > 0 ? lwq_nvfp4_ws2_m(g, fp8max) : lwq_nvfp4_ws2(g), best = 0, best_loss = 0;
    for (int k = 0; k < n; k++) {
        float a = bamax * mult[k];
        int s = fp8max > 0 ? lwq_nvfp4_scale_static_m(a, g, fp8max) : lwq_nvfp4_scale_static(a, g);
        float l = lwq_nvfp4_block_sqerr_ref(x, lwq_nvfp4_block_div((uint8_t)s, ws2));
        if (k == 0 || l < best_loss) {
            best = a;
            best_loss = l;
        }
    }
    return best;
}

static void check_mse(int four_over_six, const float *mult, int n)
{
    float *w = malloc(ROWS * COLS * sizeof *w), *ba = malloc(NB * sizeof *ba), all[LWQ_MSE_STEPS];
    for (int k = 0; k < LWQ_MSE_STEPS; k++)
        all[k] = lwq_mse_multiplier(k);
    for (int kind = 0; kind < 6; kind++)
        for (int bf16 = 0; bf16 < 2; bf16++) {
            float g = fill(w, kind, bf16);
            lwq_error e = {0};
            int rc = four_over_six ? lwq_quant_nvfp4_mse46(w, LWQ_F32, ROWS, COLS, g, mult, n, "w", ba, &e)
                     : mult        ? lwq_quant_nvfp4_mse_m(w, LWQ_F32, ROWS, COLS, g, mult, n, "w", ba, &e)
                                   : lwq_quant_nvfp4_mse(w, LWQ_F32, ROWS, COLS, g, "w", ba, &e);
            cr_assert_geq(rc, 0, "%s", e.msg);
            for (int b = 0; b < NB; b++) {
                float want = mse_ref(w + b * 16, g, four_over_six ? LWQ_NVFP4_46_FP8MAX : 0.0f, mult ? mult : all,
                                     mult ? n : LWQ_MSE_STEPS);
                cr_assert_eq(lwq_f32_bits(ba[b]), lwq_f32_bits(want), "kind %d bf16 %d block %d: %a, the reference %a",
                             kind, bf16, b, (double)ba[b], (double)want);
            }
        }
    free(w);
    free(ba);
}

Test(quant_search_lanes, mse_picks_the_reference_amax) { check_mse(0, NULL, 0); }

Test(quant_search_lanes, four_over_six_mse_picks_the_reference_amax)
{
    static const float m46[2] = {1.0f, 1.5f};
    check_mse(1, m46, 2);
    check_mse(1, NULL, 0);
}

/* a recipe's own range (lwq_mse_linspace), up to the 48 lanes, plain and Four-over-Six */
Test(quant_search_lanes, own_range_mse_picks_the_reference_amax)
{
    float m[LWQ_MSE_MAX_STEPS];
    int n = lwq_mse_linspace(0.1, 3.0, 0.07, m, LWQ_MSE_MAX_STEPS);
    cr_assert_eq(n, 43);
    check_mse(0, m, n);
    check_mse(1, m, n);
    n = lwq_mse_linspace(0.5, 1.5, 1.0 / 47, m, LWQ_MSE_MAX_STEPS);
    cr_assert_eq(n, LWQ_MSE_MAX_STEPS);
    check_mse(0, m, n);
}
