/* NVFP4 quantization (max, static, sweep, local_hessian, dequant) against tests/helpers/check/quant_naive.h. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/quant.h"
#include "tests/helpers/check/quant_naive.h"

typedef struct tens {
    lwq_dtype dt;
    int64_t rows, cols;
    void *data;
    float *f; /* the same values as float (after the dtype cast) */
} tens;

static tens make(lwq_dtype dt, int64_t rows, int64_t cols, float scale, uint64_t seed)
{
    tens t = {dt, rows, cols, malloc((size_t)(rows * cols) * 4), malloc((size_t)(rows * cols) * 4)};
    for (int64_t i = 0; i < rows * cols; i++) {
        float v = nv_rand_val(&seed, scale);
        if (dt == LWQ_BF16)
            ((uint16_t *)t.data)[i] = lwq_f32_to_bf16(v), v = lwq_bf16_to_f32(lwq_f32_to_bf16(v));
        else if (dt == LWQ_F16)
            ((uint16_t *)t.data)[i] = lwq_f32_to_f16(v), v = lwq_f16_to_f32(lwq_f32_to_f16(v));
        else
            ((float *)t.data)[i] = v;
        t.f[i] = v;
    }
    /* a zero block in the first row exercises s == 0 -> 1.0 */
    if (cols >= 32)
        for (int64_t i = 16; i < 32; i++) {
            t.f[i] = 0.0f;
            if (dt == LWQ_F32)
                ((float *)t.data)[i] = 0.0f;
            else
                ((uint16_t *)t.data)[i] = 0;
        }
    return t;
}

static void drop(tens *t)
{
    free(t->data);
    free(t->f);
}

static float naive_amax(const tens *t)
{
    double m = 0;
    for (int64_t i = 0; i < t->rows * t->cols; i++)
        m = fmax(m, fabs((double)t->f[i]));
    return (float)m;
}

static const lwq_dtype dts[3] = {LWQ_BF16, LWQ_F16, LWQ_F32};
static const float scales[5] = {1e-6f, 1e-3f, 1.0f, 1e2f, 1e4f};
static const int64_t shapes[5][2] = {{1, 16}, {3, 48}, {17, 256}, {40, 1024}, {5, 2080}};

Test(quant_nvfp4, max_path_matches_naive_on_random_tensors)
{
    uint64_t seed = 1;
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 5; s++)
            for (int sh = 0; sh < 5; sh++) {
                if (dts[d] == LWQ_F16 && scales[s] > 1e3f)
                    continue; /* f16 overflows */
                tens t = make(dts[d], shapes[sh][0], shapes[sh][1], scales[s], seed++);
                int64_t n = t.rows * t.cols, nb = n / 16;
                uint8_t *p = malloc((size_t)n / 2), *sc = malloc((size_t)nb);
                float amax, ws2;
                lwq_error e = {0};
                cr_assert_eq(lwq_quant_amax(t.data, t.dt, n, "w", &amax, &e), 0, "%s", e.msg);
                cr_assert_eq(amax, naive_amax(&t));
                cr_assert_eq(lwq_quant_nvfp4_max(t.data, t.dt, t.rows, t.cols, amax, "w", p, sc, &ws2, &e), 0, "%s",
                             e.msg);
                float nws2 = amax / 2688.0f;
                cr_assert_eq(ws2, nws2);
                for (int64_t b = 0; b < nb; b++) {
                    int sb = nv_scale_max(t.f + b * 16, nws2);
                    uint8_t want[8];
                    nv_block_codes(t.f + b * 16, sb, nws2, want);
                    cr_assert_eq(sc[b], sb, "%s scale %g block %ld", lwq_dtype_name(t.dt), (double)scales[s], (long)b);
                    cr_assert_eq(memcmp(p + b * 8, want, 8), 0, "%s scale %g block %ld codes", lwq_dtype_name(t.dt),
                                 (double)scales[s], (long)b);
                }
                free(p);
                free(sc);
                drop(&t);
            }
}

Test(quant_nvfp4, group_global_amax_larger_than_tensor_amax)
{
    tens t = make(LWQ_BF16, 5, 64, 0.5f, 77);
    float g = naive_amax(&t) * 3.0f, ws2;
    uint8_t p[160], sc[20];
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_nvfp4_max(t.data, t.dt, 5, 64, g, "w", p, sc, &ws2, &e), 0, "%s", e.msg);
    cr_assert_eq(ws2, g / 2688.0f);
    for (int b = 0; b < 20; b++) {
        uint8_t want[8];
        int sb = nv_scale_max(t.f + b * 16, ws2);
        nv_block_codes(t.f + b * 16, sb, ws2, want);
        cr_assert_eq(sc[b], sb);
        cr_assert_eq(memcmp(p + b * 8, want, 8), 0);
    }
    drop(&t);
}

Test(quant_nvfp4, static_path_matches_naive)
{
    tens t = make(LWQ_F32, 6, 64, 2.0f, 5);
    float g = naive_amax(&t), ba[24], ws2;
    uint64_t s = 9;
    for (int b = 0; b < 24; b++)
        ba[b] = b % 7 == 0 ? 0.0f : fabsf(nv_rand_val(&s, g));
    uint8_t p[192], sc[24];
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_nvfp4_static(t.data, t.dt, 6, 64, ba, g, "w", p, sc, &ws2, &e), 0, "%s", e.msg);
    for (int b = 0; b < 24; b++) {
        uint8_t want[8];
        int sb = nv_scale_static(ba[b], g);
        nv_block_codes(t.f + b * 16, sb, ws2, want);
        cr_assert_eq(sc[b], sb, "block %d amax %g", b, (double)ba[b]);
        cr_assert_eq(memcmp(p + b * 8, want, 8), 0);
    }
    drop(&t);
}

Test(quant_nvfp4, sweep_amax_maps_back_to_its_byte_through_static_path)
{
    uint64_t s = 3;
    for (int i = 0; i < 300; i++) {
        float g = fabsf(nv_rand_val(&s, 1.0f)) * powf(10.0f, (float)(i % 40) - 20.0f) + 1e-25f;
        for (int v = 1; v <= 126; v++)
            cr_assert_eq(lwq_nvfp4_scale_static(lwq_nvfp4_sweep_amax((uint8_t)v, g), g), v, "g=%g v=%d", (double)g, v);
    }
}

/* Model Optimizer's rounding (NVFP4MSECalibrator: global_amax * (v / 448) in F32), which differs
 * from (global_amax * v) / 448 by an ulp for some pairs: those are checked to exist */
Test(quant_nvfp4, sweep_amax_is_global_amax_times_the_rounded_candidate)
{
    uint64_t s = 5;
    int differs = 0;
    for (int i = 0; i < 300; i++) {
        float g = fabsf(nv_rand_val(&s, 1.0f)) * powf(10.0f, (float)(i % 40) - 20.0f) + 1e-25f;
        for (int v = 1; v <= 126; v++) {
            volatile float c = lwq_e4m3_to_f32((uint8_t)v) / 448.0f, want = g * c;
            volatile float other = g * lwq_e4m3_to_f32((uint8_t)v) / 448.0f;
            cr_assert_eq(lwq_f32_bits(lwq_nvfp4_sweep_amax((uint8_t)v, g)), lwq_f32_bits(want), "g=%a v=%d", (double)g,
                         v);
            differs += lwq_f32_bits(other) != lwq_f32_bits(want);
        }
    }
    cr_assert_gt(differs, 0, "no pair where the two roundings differ: the test shows nothing");
}

static void check_sweep(lwq_dtype dt, int64_t rows, int64_t cols, float scale, const float *h, uint64_t seed)
{
    tens t = make(dt, rows, cols, scale, seed);
    int64_t nb = rows * cols / 16;
    float g = naive_amax(&t), *ba = malloc((size_t)nb * 4);
    uint8_t *sc = malloc((size_t)nb);
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_nvfp4_sweep(t.data, dt, rows, cols, g, h, "w", ba, sc, &e), 0, "%s", e.msg);
    float ws2 = g / 2688.0f;
    for (int64_t b = 0; b < nb; b++) {
        double ld[127];
        const float *hb = h ? h + (b % (cols / 16)) * 256 : NULL;
        int want = nv_sweep(t.f + b * 16, ws2, hb, ld);
        cr_assert_eq(sc[b], want, "block %ld: %d vs %d", (long)b, sc[b], want);
        cr_assert_eq(ba[b], g * ((float)nv_e4m3_val(want) / 448.0f)); /* Model Optimizer's rounding */
        /* and it is the argmin in exact arithmetic too, up to float rounding of the loss */
        double mn = INFINITY;
        for (int v = 1; v <= 126; v++)
            mn = fmin(mn, ld[v]);
        cr_assert(ld[want] <= mn * (1 + 1e-4) + 1e-30, "block %ld: %g vs min %g", (long)b, ld[want], mn);
    }
    free(ba);
    free(sc);
    drop(&t);
}

Test(quant_nvfp4, sweep_picks_brute_force_argmin)
{
    check_sweep(LWQ_BF16, 4, 64, 1.0f, NULL, 11);
    check_sweep(LWQ_F32, 3, 32, 1e-4f, NULL, 12);
    check_sweep(LWQ_F16, 2, 48, 30.0f, NULL, 13);
}

Test(quant_nvfp4, block_mse_picks_brute_force_argmin)
{
    const lwq_dtype d3[3] = {LWQ_BF16, LWQ_F16, LWQ_F32};
    for (int d = 0; d < 3; d++) {
        tens t = make(d3[d], 9, 160, d == 1 ? 2.0f : 0.01f, 70 + (uint64_t)d);
        int64_t nb = 9 * 10;
        float g = naive_amax(&t) * (d == 2 ? 1.5f : 1.0f), ws2 = g / 2688.0f, out[90];
        lwq_error e = {0};
        cr_assert_eq(lwq_quant_nvfp4_mse(t.data, t.dt, 9, 160, g, "w", out, &e), 0, "%s", e.msg);
        int moved = 0; /* blocks whose choice is not the first candidate: the search did something */
        for (int64_t b = 0; b < nb; b++) {
            double m = 0;
            for (int i = 0; i < 16; i++)
                m = fmax(m, fabs((double)t.f[b * 16 + i]));
            moved += out[b] != (float)m * lwq_mse_multiplier(0);
            float best_a = 0, bl = 0;
            for (int k = 0; k < 39; k++) {
                float a = (float)m * lwq_mse_multiplier(k);
                float dd = (float)nv_e4m3_val(nv_scale_static(a, g)) * ws2;
                float l = nv_loss(t.f + b * 16, dd, NULL);
                if (k == 0 || l < bl)
                    bl = l, best_a = a;
            }
            cr_assert_eq(out[b], best_a, "%s block %ld: %g vs %g", lwq_dtype_name(t.dt), (long)b, (double)out[b],
                         (double)best_a);
        }
        cr_assert(moved > nb / 2, "%s: only %d of %ld blocks moved", lwq_dtype_name(t.dt), moved, (long)nb);
        drop(&t);
    }
}

Test(quant_nvfp4, searches_exact_on_blocks_far_below_the_global_amax)
{
    /* rows scaled by 1 .. 1e-4 of one outlier: the searches stop early on small blocks (once all
     * codes are 0); the brute force below does not, and must agree */
    int64_t r = 10, c = 64, nb = r * c / 16;
    float *w = malloc((size_t)(r * c) * 4), ws2, out_a[40], out_m[40];
    uint8_t sc[40];
    uint64_t seed = 91;
    for (int64_t i = 0; i < r * c; i++)
        w[i] = nv_rand_val(&seed, 1.0f) * powf(10.0f, -(float)((i / c) % 5));
    w[3] = 40.0f;
    float g = 40.0f;
    ws2 = g / 2688.0f;
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_nvfp4_sweep(w, LWQ_F32, r, c, g, NULL, "w", out_a, sc, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_quant_nvfp4_mse(w, LWQ_F32, r, c, g, "w", out_m, &e), 0, "%s", e.msg);
    for (int64_t b = 0; b < nb; b++) {
        cr_assert_eq(sc[b], nv_sweep(w + b * 16, ws2, NULL, NULL), "block %ld", (long)b);
        double m = 0;
        for (int i = 0; i < 16; i++)
            m = fmax(m, fabs((double)w[b * 16 + i]));
        float best_a = 0, bl = 0;
        for (int k = 0; k < 39; k++) {
            float a = (float)m * lwq_mse_multiplier(k);
            float l = nv_loss(w + b * 16, (float)nv_e4m3_val(nv_scale_static(a, g)) * ws2, NULL);
            if (k == 0 || l < bl)
                bl = l, best_a = a;
        }
        cr_assert_eq(out_m[b], best_a, "block %ld", (long)b);
    }
    free(w);
}

static float *random_hessian(int64_t nb, uint64_t seed)
{
    /* H = A^T A / 16 + diag, positive definite with unequal weights */
    float *h = malloc((size_t)nb * 256 * 4);
    for (int64_t b = 0; b < nb; b++) {
        float a[16][16];
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++)
                a[i][j] = nv_rand_val(&seed, 1.0f);
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                double s = i == j ? 0.1 * (i + 1) : 0;
                for (int k = 0; k < 16; k++)
                    s += (double)a[k][i] * a[k][j] / 16;
                h[b * 256 + i * 16 + j] = (float)s;
            }
    }
    return h;
}

Test(quant_nvfp4, local_hessian_sweep_picks_brute_force_argmin)
{
    float *h = random_hessian(4, 21);
    check_sweep(LWQ_BF16, 3, 64, 1.0f, h, 22);
    check_sweep(LWQ_F32, 2, 64, 1e3f, h, 23);
    free(h);
}

Test(quant_nvfp4, local_hessian_with_identity_equals_plain_sweep)
{
    tens t = make(LWQ_BF16, 8, 128, 0.7f, 31);
    float *h = calloc(8 * 256, 4);
    for (int b = 0; b < 8; b++)
        for (int i = 0; i < 16; i++)
            h[b * 256 + i * 17] = 1.0f;
    uint8_t s1[64], s2[64];
    float g = naive_amax(&t);
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_nvfp4_sweep(t.data, t.dt, 8, 128, g, NULL, "w", NULL, s1, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_quant_nvfp4_sweep(t.data, t.dt, 8, 128, g, h, "w", NULL, s2, &e), 0, "%s", e.msg);
    cr_assert_eq(memcmp(s1, s2, 64), 0);
    /* and the identity loss equals the plain loss bit for bit on every candidate */
    for (int b = 1; b <= 126; b++) {
        float d = lwq_nvfp4_block_div((uint8_t)b, g / 2688.0f);
        cr_assert_eq(lwq_nvfp4_block_herr_ref(t.f, d, h), lwq_nvfp4_block_sqerr_ref(t.f, d));
    }
    free(h);
    drop(&t);
}

Test(quant_nvfp4, hessian_accumulate_and_finalize_match_naive)
{
    tens x = make(LWQ_BF16, 37, 48, 3.0f, 41);
    double *hs = calloc(3 * 256, sizeof(double));
    float h[3 * 256];
    lwq_error e = {0};
    /* two calls (20 + 17 tokens) accumulate like one */
    cr_assert_eq(lwq_quant_hessian_accumulate(x.data, x.dt, 20, 48, hs, "x", &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_quant_hessian_accumulate((uint16_t *)x.data + 20 * 48, x.dt, 17, 48, hs, "x", &e), 0, "%s",
                 e.msg);
    cr_assert_eq(lwq_quant_hessian_finalize(hs, 37, 48, h, "x", &e), 0, "%s", e.msg);
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                double s = 0;
                for (int t = 0; t < 37; t++)
                    s += (double)x.f[t * 48 + b * 16 + i] * x.f[t * 48 + b * 16 + j];
                cr_assert_eq(hs[b * 256 + i * 16 + j], s);
                cr_assert_eq(h[b * 256 + i * 16 + j], (float)(s / 37));
            }
    free(hs);
    drop(&x);
}

Test(quant_nvfp4, dequant_matches_naive_f32_and_bf16)
{
    tens t = make(LWQ_BF16, 7, 96, 0.02f, 51);
    uint8_t p[336], sc[42];
    float ws2, out[672];
    uint16_t outb[672];
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_nvfp4_max(t.data, t.dt, 7, 96, naive_amax(&t), "w", p, sc, &ws2, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_quant_nvfp4_dequant(p, sc, ws2, 7, 96, LWQ_F32, out, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_quant_nvfp4_dequant(p, sc, ws2, 7, 96, LWQ_BF16, outb, &e), 0, "%s", e.msg);
    for (int i = 0; i < 672; i++) {
        int c = (p[i / 2] >> ((i & 1) * 4)) & 15;
        float d = (float)nv_e4m3_val(sc[i / 16]) * ws2;
        float want = (float)(nv_e2m1_val(c) * d);
        cr_assert_eq(out[i], want, "i=%d", i);
        cr_assert_eq(outb[i], lwq_f32_to_bf16(want));
        /* within one E2M1 step of the source (saturation aside: the max path never saturates) */
        cr_assert(fabsf(out[i] - t.f[i]) <= d * 1.0f + 1e-30f, "i=%d %g vs %g", i, (double)out[i], (double)t.f[i]);
    }
    drop(&t);
}

Test(quant_nvfp4, zero_tensor_gets_defined_scales)
{
    uint16_t w[2 * 32] = {0};
    w[5] = 0x8000; /* -0.0 */
    uint8_t p[32], sc[4];
    float ws2, out[64];
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_nvfp4_max(w, LWQ_BF16, 2, 32, 0.0f, "z", p, sc, &ws2, &e), LWQ_QUANT_ZERO_TENSOR);
    cr_assert_eq(ws2, 1.0f / 2688.0f);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(sc[i], 0x38);
    for (int i = 0; i < 32; i++)
        cr_assert_eq(p[i], 0);
    cr_assert_eq(lwq_quant_nvfp4_dequant(p, sc, ws2, 2, 32, LWQ_F32, out, &e), 0);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(out[i], 0.0f);
    uint8_t s2[4];
    cr_assert_eq(lwq_quant_nvfp4_sweep(w, LWQ_BF16, 2, 32, 0.0f, NULL, "z", NULL, s2, &e), LWQ_QUANT_ZERO_TENSOR);
    for (int i = 0; i < 4; i++)
        cr_assert(isfinite(lwq_e4m3_to_f32(s2[i])) && lwq_e4m3_to_f32(s2[i]) > 0);
}

Test(quant_nvfp4, same_bytes_for_one_and_two_threads)
{
    tens t = make(LWQ_BF16, 64, 512, 1.0f, 61);
    uint8_t p1[16384], p2[16384], s1[2048], s2[2048], w1[2048], w2[2048];
    float a, ws2;
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_amax(t.data, t.dt, 64 * 512, "w", &a, &e), 0);
    lwq_parallel_set_threads(1);
    cr_assert_eq(lwq_quant_nvfp4_max(t.data, t.dt, 64, 512, a, "w", p1, s1, &ws2, &e), 0);
    cr_assert_eq(lwq_quant_nvfp4_sweep(t.data, t.dt, 64, 512, a, NULL, "w", NULL, w1, &e), 0);
    lwq_parallel_set_threads(2);
    cr_assert_eq(lwq_quant_nvfp4_max(t.data, t.dt, 64, 512, a, "w", p2, s2, &ws2, &e), 0);
    cr_assert_eq(lwq_quant_nvfp4_sweep(t.data, t.dt, 64, 512, a, NULL, "w", NULL, w2, &e), 0);
    cr_assert_eq(memcmp(p1, p2, sizeof p1), 0);
    cr_assert_eq(memcmp(s1, s2, sizeof s1), 0);
    cr_assert_eq(memcmp(w1, w2, sizeof w1), 0);
    lwq_parallel_shutdown();
    drop(&t);
}
