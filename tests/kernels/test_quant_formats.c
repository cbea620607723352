/* Encodings of layout/format/quant_formats.h against FORMATS.md and against naive table searches. */
#include <criterion/criterion.h>
#include <math.h>

#include "kernels/quant.h"

/* Naive E4M3 value of byte b, from the definition (bias 7, 3 mantissa bits, fn variant). */
static double e4m3_naive(int b)
{
    int s = b & 0x80, e = (b >> 3) & 15, m = b & 7;
    if ((b & 0x7f) == 0x7f)
        return NAN;
    double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
    return s ? -v : v;
}

/* Naive encode: nearest of the 127 non-negative codes by a full table search, ties to the even
 * byte, saturate above 448. */
static int e4m3_encode_naive(float f)
{
    if (isnan(f))
        return 0x7f;
    int sign = signbit(f) ? 0x80 : 0;
    double a = fabs((double)f);
    int best = 0;
    double bd = INFINITY;
    for (int b = 0; b <= 0x7e; b++) {
        double d = fabs(a - e4m3_naive(b));
        if (d < bd || (d == bd && (b & 1) == 0)) {
            bd = d;
            best = b;
        }
    }
    return best | sign;
}

Test(quant_formats, all_256_e4m3_codes_decode)
{
    for (int b = 0; b < 256; b++) {
        float v = lwq_e4m3_to_f32((uint8_t)b);
        double n = e4m3_naive(b);
        if (isnan(n))
            cr_assert(isnan(v), "byte 0x%02x", b);
        else
            cr_assert_eq((double)v, n, "byte 0x%02x: %g vs %g", b, (double)v, n);
    }
    cr_assert_eq(lwq_e4m3_to_f32(0x7e), 448.0f);
    cr_assert_eq(lwq_e4m3_to_f32(0x01), 0x1p-9f);
    cr_assert(signbit(lwq_e4m3_to_f32(0x80)));
}

Test(quant_formats, e4m3_exact_values_round_trip)
{
    for (int b = 0; b < 256; b++) {
        if ((b & 0x7f) == 0x7f)
            continue;
        cr_assert_eq(lwq_e4m3_from_f32(lwq_e4m3_to_f32((uint8_t)b)), b, "byte 0x%02x", b);
    }
}

Test(quant_formats, e4m3_midpoints_tie_to_even_and_neighbours)
{
    for (int b = 0; b < 0x7e; b++) {
        float lo = lwq_e4m3_to_f32((uint8_t)b), hi = lwq_e4m3_to_f32((uint8_t)(b + 1));
        float mid = (lo + hi) / 2; /* exact: one more bit than E4M3 has */
        cr_assert_eq((double)mid, ((double)lo + (double)hi) / 2);
        int even = (b & 1) ? b + 1 : b;
        for (int s = 0; s < 2; s++) {
            float sg = s ? -1.0f : 1.0f;
            int sb = s ? 0x80 : 0;
            cr_assert_eq(lwq_e4m3_from_f32(sg * mid), even | sb, "mid %g of 0x%02x", (double)mid, b);
            cr_assert_eq(lwq_e4m3_from_f32(sg * nextafterf(mid, 0.0f)), b | sb, "below mid of 0x%02x", b);
            cr_assert_eq(lwq_e4m3_from_f32(sg * nextafterf(mid, INFINITY)), (b + 1) | sb, "above mid of 0x%02x", b);
        }
    }
}

Test(quant_formats, e4m3_saturates_beyond_448_and_never_nan_from_finite)
{
    float big[] = {448.0f, nextafterf(448.0f, INFINITY), 463.99f, 464.0f, 480.0f, 1e6f, 3.4e38f, INFINITY};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        cr_assert_eq(lwq_e4m3_from_f32(big[i]), 0x7e, "%g", (double)big[i]);
        cr_assert_eq(lwq_e4m3_from_f32(-big[i]), 0xfe, "-%g", (double)big[i]);
    }
    cr_assert_eq(lwq_e4m3_from_f32(NAN), 0x7f);
    cr_assert_eq(lwq_e4m3_from_f32(0x1p-11f), 0x00); /* below half the smallest subnormal */
    cr_assert_eq(lwq_e4m3_from_f32(0x1p-10f), 0x00); /* exact tie with 0: even */
    cr_assert_eq(lwq_e4m3_from_f32(-0.0f), 0x80);
}

Test(quant_formats, e4m3_encode_matches_table_search_on_random_floats)
{
    uint32_t s = 12345;
    for (int i = 0; i < 200000; i++) {
        s = s * 1664525u + 1013904223u;
        /* exponents spanning 2^-20 .. 2^12, any mantissa, both signs */
        float f = lwq_bits_f32((s & 0x807fffffu) | ((uint32_t)(107 + (s >> 24) % 33) << 23));
        cr_assert_eq(lwq_e4m3_from_f32(f), e4m3_encode_naive(f), "f=%a", (double)f);
    }
}

struct thr {
    float t;
    int at, below, above;
};

Test(quant_formats, e2m1_every_threshold_both_sides)
{
    /* FORMATS.md: <=0.25 -> 0, <0.75 -> 0.5, <=1.25 -> 1, <1.75 -> 1.5, <=2.5 -> 2, <3.5 -> 3,
     * <=5 -> 4, >5 -> 6 (codes 0..7 for 0, 0.5, 1, 1.5, 2, 3, 4, 6) */
    struct thr t[] = {{0.25f, 0, 0, 1}, {0.75f, 2, 1, 2}, {1.25f, 2, 2, 3}, {1.75f, 4, 3, 4},
                      {2.5f, 4, 4, 5},  {3.5f, 6, 5, 6},  {5.0f, 6, 6, 7}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        float below = nextafterf(t[i].t, 0.0f), above = nextafterf(t[i].t, INFINITY);
        cr_assert_eq(lwq_e2m1_from_f32(t[i].t), t[i].at, "at %g", (double)t[i].t);
        cr_assert_eq(lwq_e2m1_from_f32(below), t[i].below, "below %g", (double)t[i].t);
        cr_assert_eq(lwq_e2m1_from_f32(above), t[i].above, "above %g", (double)t[i].t);
        cr_assert_eq(lwq_e2m1_from_f32(-t[i].t), t[i].at | 8, "at -%g", (double)t[i].t);
        cr_assert_eq(lwq_e2m1_from_f32(-below), t[i].below | 8, "below -%g", (double)t[i].t);
        cr_assert_eq(lwq_e2m1_from_f32(-above), t[i].above | 8, "above -%g", (double)t[i].t);
    }
    cr_assert_eq(lwq_e2m1_from_f32(0.0f), 0);
    cr_assert_eq(lwq_e2m1_from_f32(-0.0f), 0, "-0.0 is not < 0");
    cr_assert_eq(lwq_e2m1_from_f32(-1e-30f), 8, "tiny negative is code 8");
    cr_assert_eq(lwq_e2m1_from_f32(6.0f), 7);
    cr_assert_eq(lwq_e2m1_from_f32(1e30f), 7);
    cr_assert_eq(lwq_e2m1_from_f32(-INFINITY), 15);
}

Test(quant_formats, e2m1_round_equals_decode_of_encode)
{
    const float vals[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int c = 0; c < 16; c++)
        cr_assert_eq(fabsf(lwq_e2m1_to_f32((uint8_t)c)), vals[c & 7]);
    uint32_t s = 99;
    for (int i = 0; i < 100000; i++) {
        s = s * 1664525u + 1013904223u;
        float q = ((float)(s >> 8) / 16777216.0f - 0.5f) * 16.0f;
        float r = lwq_e2m1_round(q), d = lwq_e2m1_to_f32(lwq_e2m1_from_f32(q));
        cr_assert(r == d, "q=%a: %g vs %g", (double)q, (double)r, (double)d);
    }
}

Test(quant_formats, e2m1_round_mag_equals_comparison_rounding)
{
    /* every float in [0, 16): all of E2M1's grid, thresholds and saturation */
    for (uint32_t u = 0; u <= 0x41800000u; u++) {
        float a = lwq_bits_f32(u);
        float want = lwq_e2m1_round(a), got = lwq_e2m1_round_mag(a);
        if (got != want)
            cr_assert_fail("a=%a: %g vs %g", (double)a, (double)got, (double)want);
    }
    float big[] = {16.0f, 1e3f, 0x1p24f, 0x1.fffffep127f, INFINITY};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        cr_assert_eq(lwq_e2m1_round_mag(big[i]), 6.0f, "%g", (double)big[i]);
}

Test(quant_formats, e2m1_thresholds_equal_division_rounding)
{
    uint64_t s = 4242;
    for (int t = 0; t < 400; t++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        /* divisors from 2^-120 to 2^30, any mantissa */
        float d = lwq_bits_f32((uint32_t)((7u + (s >> 58) % 150u) << 23) | (uint32_t)((s >> 20) & 0x7fffffu));
        float b[LWQ_E2M1_NTHR];
        lwq_e2m1_thresholds(d, b);
        for (int i = 0; i < LWQ_E2M1_NTHR; i++) {
            /* at each threshold, one float below it, and the neighbours of the exact boundary */
            float probes[4] = {b[i], nextafterf(b[i], 0.0f), nextafterf(b[i], INFINITY), b[i] * 1.5f};
            for (int k = 0; k < 4; k++) {
                float a = probes[k];
                cr_assert_eq(lwq_e2m1_round_thr(a, b), lwq_e2m1_round_mag(a / d), "d=%a a=%a", (double)d, (double)a);
            }
        }
        for (int k = 0; k < 2000; k++) { /* and random magnitudes around the grid */
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            float a = d * (float)((s >> 40) % 8000000u) * 1e-6f;
            cr_assert_eq(lwq_e2m1_round_thr(a, b), lwq_e2m1_round_mag(a / d), "d=%a a=%a", (double)d, (double)a);
        }
    }
}

Test(quant_formats, nibble_packing_low_index_in_low_nibble)
{
    cr_assert_eq(lwq_nvfp4_pack(0x7, 0xD), 0xD7);
    cr_assert_eq(lwq_nvfp4_pack(0xF, 0x0), 0x0F);
}

Test(quant_formats, mse_multipliers_span_quarter_to_four)
{
    cr_assert_eq(lwq_mse_multiplier(0), 0.25f);
    cr_assert_eq(lwq_mse_multiplier(LWQ_MSE_STEPS - 1), 4.0f);
    for (int k = 1; k < LWQ_MSE_STEPS; k++) {
        float step = lwq_mse_multiplier(k) - lwq_mse_multiplier(k - 1);
        cr_assert(fabsf(step - 3.75f / 38) < 1e-6f, "step %d = %g", k, (double)step);
    }
}

/* FORMATS.md section 2 worked example, as a 1 x 32 tensor whose second block holds the 2.0 that
 * makes the tensor amax. */
static void worked_example(lwq_dtype dt)
{
    static const float blk[16] = {1.2f,  -0.6f, 0.3f, 0.05f, -1.1f, 0.0f,  0.45f, -0.2f,
                                  0.8f,  0.1f,  -0.35f, 0.95f, 0.25f, -0.7f, -0.02f, 1.0f};
    float w32[32] = {0};
    memcpy(w32, blk, sizeof blk);
    w32[20] = 2.0f;
    uint16_t w16[32];
    for (int i = 0; i < 32; i++)
        w16[i] = lwq_f32_to_bf16(w32[i]);
    const void *w = dt == LWQ_BF16 ? (const void *)w16 : (const void *)w32;
    float amax, ws2;
    uint8_t packed[16], scale[2];
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_amax(w, dt, 32, "ex", &amax, &e), 0, "%s", e.msg);
    cr_assert_eq(amax, 2.0f);
    cr_assert_eq(lwq_quant_nvfp4_max(w, dt, 1, 32, amax, "ex", packed, scale, &ws2, &e), 0, "%s", e.msg);
    cr_assert_eq(ws2, 2.0f / 2688.0f);
    cr_assert(fabsf(ws2 - 7.440476e-4f) < 1e-9f);
    cr_assert_eq(scale[0], 0x78, "scale 0x%02x", scale[0]);
    const uint8_t want[8] = {0xD7, 0x13, 0x0F, 0xA4, 0x16, 0x6C, 0xE3, 0x78};
    for (int i = 0; i < 8; i++)
        cr_assert_eq(packed[i], want[i], "%s byte %d: %02X vs %02X", lwq_dtype_name(dt), i, packed[i], want[i]);
}

Test(quant_formats, worked_example_f32_byte_for_byte) { worked_example(LWQ_F32); }
Test(quant_formats, worked_example_bf16_byte_for_byte) { worked_example(LWQ_BF16); }

Test(quant_formats, worked_example_block_scale_is_256)
{
    float ws2 = lwq_nvfp4_ws2(2.0f);
    uint8_t s = lwq_nvfp4_scale_max(1.2f, ws2);
    cr_assert_eq(s, 0x78);
    cr_assert_eq(lwq_e4m3_to_f32(s), 256.0f);
}
