/* lwq eval's activation emulation (NVFP4 W4A4 input blocks, FP8 inputs) against a naive implementation written from the formulas. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/data/dtype.h"
#include "engine/eval/emul/eval_emul.h"

/* ---- naive reference: nearest representable value by exhaustive search, ties to the even code -- */

static double e4m3_value(int code) /* code 0..126, non-negative finite */
{
    int e = (code >> 3) & 15, m = code & 7;
    return e == 0 ? m * ldexp(1.0, -9) : (1.0 + m / 8.0) * ldexp(1.0, e - 7);
}

static float naive_e4m3(float s) /* s >= 0; saturates at 448 */
{
    if (s >= 448.0f)
        return 448.0f;
    int best = 0;
    for (int c = 1; c <= 126; c++) {
        double d = fabs(e4m3_value(c) - s), db = fabs(e4m3_value(best) - s);
        if (d < db || (d == db && (c & 1) == 0))
            best = c;
    }
    return (float)e4m3_value(best);
}

static float naive_e2m1(float q)
{
    static const float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    float a = fabsf(q);
    int best = 0;
    for (int c = 1; c < 8; c++) {
        float d = fabsf(mag[c] - a), db = fabsf(mag[best] - a);
        if (d < db || (d == db && (c & 1) == 0))
            best = c;
    }
    return q < 0 ? -mag[best] : mag[best];
}

static void naive_nvfp4_block(const float *x, float is, float *out)
{
    float amax = 0;
    for (int i = 0; i < 16; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    float six_is = 6.0f * is;
    float bs = naive_e4m3(amax / six_is);
    float d = bs * is;
    for (int i = 0; i < 16; i++)
        out[i] = d == 0.0f ? 0.0f : naive_e2m1(x[i] / d) * d;
}

static void check_block(const float *x, float is, const char *what)
{
    float got[16], want[16];
    lwq_emul_nvfp4_act(x, LWQ_F32, 1, 16, is, got);
    naive_nvfp4_block(x, is, want);
    for (int i = 0; i < 16; i++)
        cr_assert(memcmp(&got[i], &want[i], sizeof got[i]) == 0, /* bits: -0 and +0 too */
                  "%s: element %d of %g: got %.9g, naive %.9g", what, i, (double)x[i], (double)got[i],
                  (double)want[i]);
}

/* A block whose amax is `amax`, the other elements spread over the E2M1 grid with both signs. */
static void make_block(float amax, float *x)
{
    static const float frac[15] = {0.0f, 0.04f, -0.083f, 0.125f, -0.2f, 0.25f, -0.3125f, 0.375f,
                                   -0.5f, 0.58f, -0.625f, 0.75f, -0.83f, 0.9f, -0.97f};
    x[0] = amax;
    for (int i = 1; i < 16; i++)
        x[i] = amax * frac[i - 1];
}

Test(eval_emul, every_e4m3_block_scale_boundary)
{
    const float is = 1.0f / 6.0f;
    cr_assert_eq(6.0f * is, 1.0f, "the test needs 6 * input_scale == 1 exactly in f32");
    int checked = 0;
    for (int c = 0; c < 126; c++) {
        float lo = (float)e4m3_value(c), hi = (float)e4m3_value(c + 1), mid = (lo + hi) / 2; /* exact */
        float probes[5] = {nextafterf(mid, 0), mid, nextafterf(mid, 1000), lo, hi};
        for (int k = 0; k < 5; k++) {
            if (!(probes[k] > 0))
                continue;
            float x[16];
            make_block(probes[k], x);
            char what[96];
            snprintf(what, sizeof what, "E4M3 boundary %d/%d (amax %.9g)", c, c + 1, (double)probes[k]);
            check_block(x, is, what);
            x[0] = -x[0]; /* the amax element negative */
            check_block(x, is, what);
            checked += 2;
        }
    }
    cr_assert_gt(checked, 1200);
}

Test(eval_emul, boundary_rounds_to_even_scale_code)
{
    /* midway between 1.0 (0x38) and 1.125 (0x39): ties go to the even code, 1.0 */
    const float is = 1.0f / 6.0f;
    float x[16] = {1.0625f};
    float out[16];
    lwq_emul_nvfp4_act(x, LWQ_F32, 1, 16, is, out);
    /* d = 1.0 * is; 1.0625 / d = 6.375 -> saturates at 6 */
    cr_assert_eq(out[0], 6.0f * (1.0f * is));
}

Test(eval_emul, saturation_of_block_scale_and_values)
{
    const float is = 1.0f / 6.0f;
    float x[16];
    make_block(1000.0f, x); /* amax / (6 is) = 1000 > 448: the scale saturates, x/d = 13.4 > 6 */
    check_block(x, is, "saturated block");
    float out[16];
    lwq_emul_nvfp4_act(x, LWQ_F32, 1, 16, is, out);
    cr_assert_eq(out[0], 6.0f * (448.0f * is), "the largest value saturates at 6 * d");
    /* a scale rounded down makes x/d slightly above 6: that saturates too */
    make_block(447.0f, x);
    check_block(x, is, "scale rounded down");
}

Test(eval_emul, all_zero_and_vanishing_blocks)
{
    const float is = 1.0f / 6.0f;
    float x[16] = {0}, out[16];
    memset(out, 0xff, sizeof out);
    lwq_emul_nvfp4_act(x, LWQ_F32, 1, 16, is, out);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(out[i], 0.0f);
    /* amax at half the smallest subnormal (2^-10) rounds to scale 0 (even): zeros, no NaN */
    make_block(ldexpf(1.0f, -10), x);
    check_block(x, is, "amax 2^-10");
    lwq_emul_nvfp4_act(x, LWQ_F32, 1, 16, is, out);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(out[i], 0.0f, "element %d: %g", i, (double)out[i]);
    /* just above it: the smallest scale 2^-9 */
    make_block(nextafterf(ldexpf(1.0f, -10), 1), x);
    check_block(x, is, "just above 2^-10");
}

Test(eval_emul, random_rows_and_dtypes_match_naive)
{
    enum { R = 37, C = 64 };
    static float x[R * C], got[R * C], want[R * C];
    static uint16_t xb[R * C];
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < R * C; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float u = (float)((s >> 11) * 0x1p-53) - 0.5f;
        float scale = ldexpf(1.0f, (int)(s % 12) - 6); /* blocks of very different magnitudes */
        xb[i] = lwq_f32_to_bf16(u * scale);
        x[i] = lwq_bf16_to_f32(xb[i]);
    }
    const float is = 0.37f / 2688.0f;
    lwq_emul_nvfp4_act(x, LWQ_F32, R, C, is, got);
    for (int b = 0; b < R * C / 16; b++)
        naive_nvfp4_block(x + 16 * b, is, want + 16 * b);
    cr_assert_eq(memcmp(got, want, sizeof got), 0, "f32 rows differ from the naive blocks");
    lwq_emul_nvfp4_act(xb, LWQ_BF16, R, C, is, got);
    cr_assert_eq(memcmp(got, want, sizeof got), 0, "bf16 input differs from its f32 value");
}

Test(eval_emul, fp8_static_input_matches_naive_and_saturates)
{
    const float is = 0.01f;
    float x[8] = {0.0f, 1e-6f, -0.0123f, 0.5f, -3.0f, 4.48f, 4.49f, -100.0f}, out[8];
    lwq_emul_fp8_act(x, LWQ_F32, 8, is, out);
    for (int i = 0; i < 8; i++) {
        float q = x[i] / is, a = naive_e4m3(fabsf(q));
        float want = (q < 0 ? -a : a) * is;
        cr_assert(out[i] == want, "element %d (%g): got %.9g, naive %.9g", i, (double)x[i], (double)out[i],
                  (double)want);
    }
    cr_assert_eq(out[7], -448.0f * is, "saturates at -448 * scale");
}
