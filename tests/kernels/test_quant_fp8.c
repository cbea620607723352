/* FP8 per-tensor quantization, the mse search, activation/KV scales and group unification. */
#include <criterion/criterion.h>
#include <string.h>

#include "kernels/quant.h"
#include "layout/format/quant_formats.h"
#include "tests/helpers/check/quant_naive.h"

static void fill(lwq_dtype dt, void *data, float *f, int64_t n, float scale, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++) {
        float v = nv_rand_val(&seed, scale);
        if (dt == LWQ_BF16)
            ((uint16_t *)data)[i] = lwq_f32_to_bf16(v), v = lwq_bf16_to_f32(lwq_f32_to_bf16(v));
        else if (dt == LWQ_F16)
            ((uint16_t *)data)[i] = lwq_f32_to_f16(v), v = lwq_f16_to_f32(lwq_f32_to_f16(v));
        else
            ((float *)data)[i] = v;
        f[i] = v;
    }
}

Test(quant_fp8, matches_naive_on_random_tensors)
{
    const lwq_dtype dts[3] = {LWQ_BF16, LWQ_F16, LWQ_F32};
    const float scales[5] = {1e-6f, 1e-3f, 1.0f, 1e2f, 1e4f};
    const int64_t shapes[4][2] = {{1, 1}, {3, 17}, {9, 100}, {33, 640}};
    uint64_t seed = 100;
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 5; s++)
            for (int sh = 0; sh < 4; sh++) {
                if (dts[d] == LWQ_F16 && scales[s] > 1e3f)
                    continue;
                int64_t r = shapes[sh][0], c = shapes[sh][1], n = r * c;
                void *w = malloc((size_t)n * 4);
                float *f = malloc((size_t)n * 4), amax, ws, na = 0;
                uint8_t *q = malloc((size_t)n);
                fill(dts[d], w, f, n, scales[s], seed++);
                for (int64_t i = 0; i < n; i++)
                    na = fmaxf(na, fabsf(f[i]));
                lwq_error e = {0};
                cr_assert_eq(lwq_quant_amax(w, dts[d], n, "w", &amax, &e), 0, "%s", e.msg);
                cr_assert_eq(amax, na);
                if (amax == 0.0f) { /* a 1x1 tensor can draw an exact zero */
                    free(w), free(f), free(q);
                    continue;
                }
                cr_assert_eq(lwq_quant_fp8(w, dts[d], r, c, amax, "w", q, &ws, &e), 0, "%s", e.msg);
                float nws = na / 448.0f;
                cr_assert_eq(ws, nws);
                for (int64_t i = 0; i < n; i++) {
                    float x = lwq_round_to(f[i] / nws, dts[d]); /* in the weight's dtype first */
                    int want = fabsf(x) >= 448.0f ? (0x7e | (signbit(x) ? 0x80 : 0)) : nv_e4m3_enc(x);
                    cr_assert_eq(q[i], want, "%s scale %g i=%ld x=%a", lwq_dtype_name(dts[d]), (double)scales[s],
                                 (long)i, (double)x);
                }
                free(w), free(f), free(q);
            }
}

/* Model Optimizer's export divides a BF16 weight by the F32 scale in torch, which gives a BF16
 * quotient, then casts that to E4M3: two roundings.  3 / (1264 / 448) = 1.06329 in F32 is above the
 * E4M3 midpoint 1.0625 between 1.0 and 1.125 (-> 0x39), but rounds to exactly 1.0625 in BF16,
 * which ties to the even 1.0 (0x38).  lwq used to round once and wrote 0x39. */
Test(quant_fp8, bf16_weight_rounds_through_bf16_like_model_optimizer)
{
    float v[16] = {3.0f, 1264.0f};
    uint16_t wb[16];
    for (int i = 0; i < 16; i++)
        wb[i] = lwq_f32_to_bf16(v[i]);
    uint8_t q[16];
    float ws;
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_fp8(wb, LWQ_BF16, 1, 16, 1264.0f, "w", q, &ws, &e), 0, "%s", e.msg);
    cr_assert_eq(q[0], 0x38, "BF16 weight: got 0x%02x, Model Optimizer writes 0x38 (1.0)", q[0]);
    cr_assert_eq(q[1], 0x7e);
    cr_assert_eq(lwq_quant_fp8(v, LWQ_F32, 1, 16, 1264.0f, "w", q, &ws, &e), 0, "%s", e.msg);
    cr_assert_eq(q[0], 0x39, "F32 weight: one rounding, 1.06329 -> 1.125 (0x39), got 0x%02x", q[0]);
}

/* The mse candidates are Model Optimizer's: torch.linspace(0.25, 4.0, 39) in float32, whose bits
 * (printed by torch 2.13 on the CPU) are below.  lwq's double formula differed in the last bit of
 * 12 of them, enough to pick another FP8 weight_scale for some tensors (issue 23). */
Test(quant_fp8, mse_multipliers_are_torch_linspace_bit_for_bit)
{
    static const uint32_t want[LWQ_MSE_STEPS] = {
        0x3e800000, 0x3eb286bd, 0x3ee50d7a, 0x3f0bca1b, 0x3f250d7a, 0x3f3e50d8, 0x3f579436, 0x3f70d795,
        0x3f850d7a, 0x3f91af29, 0x3f9e50d8, 0x3faaf287, 0x3fb79436, 0x3fc435e5, 0x3fd0d795, 0x3fdd7944,
        0x3fea1af3, 0x3ff6bca2, 0x4001af29, 0x40080000, 0x400e50d7, 0x4014a1af, 0x401af286, 0x4021435e,
        0x40279436, 0x402de50d, 0x403435e5, 0x403a86bc, 0x4040d794, 0x4047286c, 0x404d7943, 0x4053ca1b,
        0x405a1af2, 0x40606bca, 0x4066bca2, 0x406d0d79, 0x40735e51, 0x4079af28, 0x40800000};
    for (int k = 0; k < LWQ_MSE_STEPS; k++)
        cr_assert_eq(lwq_f32_bits(lwq_mse_multiplier(k)), want[k], "multiplier %d: %a, torch gives %a", k,
                     (double)lwq_mse_multiplier(k), (double)lwq_bits_f32(want[k]));
}

Test(quant_fp8, saturates_when_amax_is_below_the_data)
{
    float w[4] = {1.0f, -2.0f, 0.5f, 4.0f};
    uint8_t q[4];
    float ws;
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_fp8(w, LWQ_F32, 1, 4, 2.0f, "w", q, &ws, &e), 0, "%s", e.msg);
    cr_assert_eq(q[1], 0xfe);
    cr_assert_eq(q[3], 0x7e);
    cr_assert_eq(q[0], nv_e4m3_enc(1.0f / (2.0f / 448.0f)));
}

/* Naive mse loss of candidate k, summed in the documented order. */
static double naive_mse(const float *f, int64_t r, int64_t c, float amax_k)
{
    float s = amax_k / 448.0f;
    double tot = 0;
    for (int64_t i = 0; i < r; i++) {
        double lane[16] = {0};
        for (int64_t j = 0; j < c; j++) {
            float x = f[i * c + j] / s;
            int b = fabsf(x) >= 448.0f ? (0x7e | (signbit(x) ? 0x80 : 0)) : nv_e4m3_enc(x);
            float dq = (float)(nv_e4m3_val(b) * (double)s);
            float e = f[i * c + j] - dq;
            lane[j % 16] += (double)e * e;
        }
        for (int h = 8; h; h >>= 1)
            for (int l = 0; l < h; l++)
                lane[l] += lane[l + h];
        tot += lane[0];
    }
    return tot;
}

Test(quant_fp8, mse_picks_brute_force_argmin)
{
    const int64_t shapes[3][2] = {{4, 37}, {8, 64}, {2, 300}};
    for (int t = 0; t < 3; t++) {
        int64_t r = shapes[t][0], c = shapes[t][1], n = r * c;
        uint16_t *w = malloc((size_t)n * 2);
        float *f = malloc((size_t)n * 4), amax = 0, got;
        fill(LWQ_BF16, w, f, n, 0.01f, 200 + (uint64_t)t);
        f[3] *= 40.0f; /* an outlier makes clipping pay off */
        w[3] = lwq_f32_to_bf16(f[3]);
        f[3] = lwq_bf16_to_f32(w[3]);
        for (int64_t i = 0; i < n; i++)
            amax = fmaxf(amax, fabsf(f[i]));
        int k = -2, bk = 0;
        double bl = INFINITY;
        for (int m = 0; m < 39; m++) {
            double l = naive_mse(f, r, c, amax * lwq_mse_multiplier(m));
            if (l < bl)
                bl = l, bk = m;
        }
        lwq_error e = {0};
        cr_assert_eq(lwq_quant_fp8_mse(w, LWQ_BF16, r, c, "w", &got, &k, &e), 0, "%s", e.msg);
        cr_assert_eq(k, bk, "shape %d: k=%d vs %d", t, k, bk);
        /* searched in F32, kept in BF16 (Model Optimizer's amax buffer has the weight's dtype) */
        cr_assert_eq(got, lwq_round_to(amax * lwq_mse_multiplier(bk), LWQ_BF16));
        free(w), free(f);
    }
}

/* Model Optimizer keeps the amax its mse search picks for a BF16 weight as a BF16 value (issue 23:
 * for one llama q_proj lwq wrote the amax 0.37993425 / 448 where Model Optimizer wrote the BF16
 * 0.380859375 / 448 of the same multiplier). */
Test(quant_fp8, mse_amax_of_a_bf16_weight_is_bf16)
{
    uint16_t w[64];
    float f[64];
    fill(LWQ_BF16, w, f, 64, 0.05f, 77);
    float got;
    int k;
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_fp8_mse(w, LWQ_BF16, 4, 16, "w", &got, &k, &e), 0, "%s", e.msg);
    cr_assert_eq(got, lwq_round_to(got, LWQ_BF16), "chosen amax %a is not a BF16 value", (double)got);
}

Test(quant_fp8, zero_tensor_gets_defined_scale)
{
    float w[8] = {0, -0.0f, 0, 0, 0, 0, 0, 0}, ws, amax, out[8];
    uint8_t q[8];
    int k;
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_fp8_mse(w, LWQ_F32, 2, 4, "z", &amax, &k, &e), LWQ_QUANT_ZERO_TENSOR);
    cr_assert_eq(amax, 0.0f);
    cr_assert_eq(k, -1);
    cr_assert_eq(lwq_quant_fp8(w, LWQ_F32, 2, 4, amax, "z", q, &ws, &e), LWQ_QUANT_ZERO_TENSOR);
    cr_assert_eq(ws, 1.0f / 448.0f);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(q[i] & 0x7f, 0);
    cr_assert_eq(lwq_quant_fp8_dequant(q, ws, 8, LWQ_F32, out, &e), 0);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(out[i], 0.0f);
}

Test(quant_fp8, dequant_is_value_times_scale)
{
    uint8_t q[256];
    float out[256];
    uint16_t ob[256];
    for (int i = 0; i < 256; i++)
        q[i] = (uint8_t)i;
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_fp8_dequant(q, 0.375f, 256, LWQ_F32, out, &e), 0);
    cr_assert_eq(lwq_quant_fp8_dequant(q, 0.375f, 256, LWQ_BF16, ob, &e), 0);
    for (int i = 0; i < 256; i++) {
        if ((i & 0x7f) == 0x7f)
            continue;
        cr_assert_eq(out[i], (float)(nv_e4m3_val(i) * 0.375));
        cr_assert_eq(ob[i], lwq_f32_to_bf16(out[i]));
    }
}

Test(quant_fp8, input_and_kv_scales)
{
    float s;
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_input_scale(12.0f, LWQ_QUANT_NVFP4, "q_proj", &s, &e), 0);
    cr_assert_eq(s, 12.0f / 2688.0f);
    cr_assert_eq(lwq_quant_input_scale(12.0f, LWQ_QUANT_FP8, "q_proj", &s, &e), 0);
    cr_assert_eq(s, 12.0f / 448.0f);
    cr_assert_eq(lwq_quant_kv_scale(3.5f, "k_proj", &s, &e), 0);
    cr_assert_eq(s, 3.5f / 448.0f);
}

Test(quant_fp8, zero_or_nan_activation_amax_is_an_error)
{
    float s = -1;
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_input_scale(0.0f, LWQ_QUANT_NVFP4, "layers.3.mlp.down_proj", &s, &e), LWQ_ENUMERIC);
    cr_assert(strstr(e.msg, "layers.3.mlp.down_proj") && strstr(e.msg, "amax 0"), "%s", e.msg);
    lwq_error_clear(&e);
    cr_assert_eq(lwq_quant_kv_scale(NAN, "layers.0.self_attn.v_proj", &s, &e), LWQ_ENUMERIC);
    cr_assert(strstr(e.msg, "layers.0.self_attn.v_proj") && strstr(e.msg, "nan"), "%s", e.msg);
    lwq_error_clear(&e);
    cr_assert_eq(lwq_quant_input_scale(INFINITY, LWQ_QUANT_FP8, "o", &s, &e), LWQ_ENUMERIC);
    cr_assert_eq(s, -1.0f, "output untouched on error");
}

Test(quant_fp8, group_unify_takes_the_max_of_both_amaxes)
{
    float in[3] = {1.0f, 5.0f, 2.0f}, wa[3] = {0.3f, 0.1f, 0.7f};
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_group_unify(in, wa, 3, "layers.0.qkv", &e), 0);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(in[i], 5.0f);
        cr_assert_eq(wa[i], 0.7f);
    }
    float only[2] = {4.0f, 9.0f};
    cr_assert_eq(lwq_quant_group_unify(NULL, only, 2, "g", &e), 0);
    cr_assert_eq(only[0], 9.0f);
}

Test(quant_fp8, group_unify_refuses_nan_member)
{
    float in[3] = {1.0f, NAN, 2.0f};
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_group_unify(in, NULL, 3, "layers.7.mlp.gate_up", &e), LWQ_ENUMERIC);
    cr_assert(strstr(e.msg, "layers.7.mlp.gate_up") && strstr(e.msg, "member 1"), "%s", e.msg);
    cr_assert(in[0] == 1.0f, "inputs untouched on error");
}

/* A recipe's own start_multiplier / stop_multiplier / step_size: Model Optimizer's candidates
 * torch.linspace(start, stop, ceil((stop - start) / step) + 1) in float32, bits printed by torch 2.13
 * on the CPU; the default range gives the 39 above. */
Test(quant_fp8, mse_linspace_is_torch_linspace_bit_for_bit)
{
    static const uint32_t a[31] = {
        0x3f000000u, 0x3f0ccccdu, 0x3f19999au, 0x3f266666u, 0x3f333333u, 0x3f400000u, 0x3f4ccccdu, 0x3f59999au,
        0x3f666666u, 0x3f733333u, 0x3f800000u, 0x3f866666u, 0x3f8ccccdu, 0x3f933333u, 0x3f99999au, 0x3fa00000u,
        0x3fa66666u, 0x3faccccdu, 0x3fb33333u, 0x3fb9999au, 0x3fc00000u, 0x3fc66666u, 0x3fcccccdu, 0x3fd33333u,
        0x3fd9999au, 0x3fe00000u, 0x3fe66666u, 0x3feccccdu, 0x3ff33333u, 0x3ff9999au, 0x40000000u};
    static const uint32_t b[43] = {
        0x3dcccccdu, 0x3e2d1ad2u, 0x3e73cf3eu, 0x3e9d41d4u, 0x3ec09c0au, 0x3ee3f640u, 0x3f03a83bu, 0x3f155556u,
        0x3f270271u, 0x3f38af8cu, 0x3f4a5ca6u, 0x3f5c09c1u, 0x3f6db6dcu, 0x3f7f63f7u, 0x3f888889u, 0x3f915f16u,
        0x3f9a35a4u, 0x3fa30c31u, 0x3fabe2bfu, 0x3fb4b94cu, 0x3fbd8fdau, 0x3fc66666u, 0x3fcf3cf3u, 0x3fd81381u,
        0x3fe0ea0eu, 0x3fe9c09cu, 0x3ff29729u, 0x3ffb6db6u, 0x40022222u, 0x40068d69u, 0x400af8afu, 0x400f63f6u,
        0x4013cf3du, 0x40183a84u, 0x401ca5cau, 0x40211111u, 0x40257c58u, 0x4029e79eu, 0x402e52e5u, 0x4032be2cu,
        0x40372973u, 0x403b94b9u, 0x40400000u};
    float m[LWQ_MSE_MAX_STEPS];
    cr_assert_eq(lwq_mse_linspace(0.5, 2.0, 0.05, m, LWQ_MSE_MAX_STEPS), 31);
    for (int k = 0; k < 31; k++)
        cr_assert_eq(lwq_f32_bits(m[k]), a[k], "[0.5, 2.0, 0.05] %d: %a", k, (double)m[k]);
    cr_assert_eq(lwq_mse_linspace(0.1, 3.0, 0.07, m, LWQ_MSE_MAX_STEPS), 43);
    for (int k = 0; k < 43; k++)
        cr_assert_eq(lwq_f32_bits(m[k]), b[k], "[0.1, 3.0, 0.07] %d: %a", k, (double)m[k]);
    cr_assert_eq(lwq_mse_linspace(1.0, 1.5, 0.5, m, LWQ_MSE_MAX_STEPS), 2);
    cr_assert(m[0] == 1.0f && m[1] == 1.5f);
    cr_assert_eq(lwq_mse_linspace(0.25, 4.0, 0.1, m, LWQ_MSE_MAX_STEPS), LWQ_MSE_STEPS);
    for (int k = 0; k < LWQ_MSE_STEPS; k++)
        cr_assert_eq(lwq_f32_bits(m[k]), lwq_f32_bits(lwq_mse_multiplier(k)), "default %d", k);
    cr_assert_eq(lwq_mse_linspace(1.0, 1.0, 0.1, m, LWQ_MSE_MAX_STEPS), 1);
    cr_assert_eq(m[0], 1.0f);
    cr_assert_eq(lwq_mse_linspace(0.0, 1.0, 0.1, m, LWQ_MSE_MAX_STEPS), -1, "start 0 is refused");
    cr_assert_eq(lwq_mse_linspace(2.0, 1.0, 0.1, m, LWQ_MSE_MAX_STEPS), -1, "a descending range is refused");
    cr_assert_eq(lwq_mse_linspace(1.0, 2.0, 0.0, m, LWQ_MSE_MAX_STEPS), -1, "step 0 is refused");
}

/* The search over a recipe's candidates (Nemotron-3 Ultra's FP8 mamba projections: [1.0, 1.5])
 * picks the brute-force argmin among them; NULL candidates are the default 39. */
Test(quant_fp8, mse_over_own_candidates_picks_brute_force_argmin)
{
    const int64_t r = 8, c = 64, n = r * c;
    uint16_t *w = malloc((size_t)n * 2);
    float *f = malloc((size_t)n * 4), amax = 0, got, dflt;
    fill(LWQ_BF16, w, f, n, 0.01f, 77);
    f[5] *= 40.0f;
    w[5] = lwq_f32_to_bf16(f[5]);
    f[5] = lwq_bf16_to_f32(w[5]);
    for (int64_t i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(f[i]));
    float m[LWQ_MSE_MAX_STEPS];
    int nm = lwq_mse_linspace(0.5, 2.0, 0.05, m, LWQ_MSE_MAX_STEPS), bk = 0, k = -2;
    double bl = INFINITY;
    for (int j = 0; j < nm; j++) {
        double l = naive_mse(f, r, c, amax * m[j]);
        if (l < bl)
            bl = l, bk = j;
    }
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_fp8_mse_m(w, LWQ_BF16, r, c, m, nm, "w", &got, &k, &e), 0, "%s", e.msg);
    cr_assert_eq(k, bk, "k=%d vs %d", k, bk);
    cr_assert_eq(got, lwq_round_to(amax * m[bk], LWQ_BF16));
    cr_assert_eq(lwq_quant_fp8_mse_m(w, LWQ_BF16, r, c, NULL, 0, "w", &got, &k, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_quant_fp8_mse(w, LWQ_BF16, r, c, "w", &dflt, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(got, dflt);
    cr_assert_lt(lwq_quant_fp8_mse_m(w, LWQ_BF16, r, c, m, LWQ_MSE_MAX_STEPS + 1, "w", &got, &k, &e), 0);
    free(w), free(f);
}
