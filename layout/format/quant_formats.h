/* layout/format/quant_formats.h — the bit-level encodings of lwq's output formats, in one header shared
 * by the C (CPU) and CUDA code paths (../shared/spec/FORMATS.md sections 1, 2 and 4).
 *
 * Everything here is a pure `LWQ_HD` function of its arguments: no state, no allocation, safe
 * from any thread or GPU thread.  Both backends call exactly these functions (or, on the CPU,
 * loops that perform the same float operations in the same order), which is what makes their
 * output bytes identical.  Every float operation whose rounding matters goes through LWQ_FMUL /
 * LWQ_FADD / LWQ_FDIV: on the device they are the `_rn` intrinsics, so nvcc can never contract a
 * multiply and an add into one FMA (which rounds once instead of twice); on the host the code is
 * compiled as ISO C11, where GCC does not contract either.
 *
 * Contents:
 *   - E4M3 (`fn` variant): decode of all 256 codes, encode with round-to-nearest-even and a
 *     saturating clamp to +-448 (a finite input never gives NaN; NaN input gives 0x7F/0xFF).
 *   - E2M1: encode with FORMATS.md's thresholds (exact ties to the even code, saturation at 6,
 *     sign from `q < 0`), decode, and the rounded value itself (for the scale searches).
 *   - NVFP4 block formulas: weight_scale_2 from the global amax, the per-block scale byte of the
 *     dynamic (max) and static paths, the quantization of one 16-element block, and the losses
 *     that the searches minimise.  Functions with a `_ref` suffix are the straightforward
 *     reference quantizers the fast paths are tested against.
 *
 * Degenerate inputs are the callers' business (kernels/quant.h validates them): these functions
 * assume finite elements and a positive, normal weight_scale_2. */
#ifndef LWQ_LAYOUT_QUANT_FORMATS_H
#define LWQ_LAYOUT_QUANT_FORMATS_H

#include <math.h>
#include <stdint.h>

#include "core/data/dtype.h"

#if defined(__CUDA_ARCH__) /* device code: explicit rounding, no FMA contraction */
#define LWQ_FMUL(a, b) __fmul_rn((a), (b))
#define LWQ_FADD(a, b) __fadd_rn((a), (b))
#define LWQ_FSUB(a, b) __fsub_rn((a), (b))
#define LWQ_FDIV(a, b) __fdiv_rn((a), (b))
#else
#define LWQ_FMUL(a, b) ((a) * (b))
#define LWQ_FADD(a, b) ((a) + (b))
#define LWQ_FSUB(a, b) ((a) - (b))
#define LWQ_FDIV(a, b) ((a) / (b))
#endif
#if defined(__cplusplus)
#define LWQ_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define LWQ_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#define LWQ_E2M1_MAX 6.0f
#define LWQ_E4M3_MAX 448.0f
#define LWQ_E4M3_MIN_SUB 0.001953125f /* 2^-9, the smallest positive E4M3 value */
#define LWQ_E4M3_NAN 0x7F
#define LWQ_E4M3_NPOS 126             /* positive finite codes 0x01..0x7E */
#define LWQ_NVFP4_BLOCK 16
#define LWQ_NVFP4_WS2_DIV 2688.0f     /* 6 * 448 */
#define LWQ_MSE_STEPS 39
#define LWQ_MSE_MAX_STEPS 48 /* the most candidates of a recipe's own multiplier range */

/* One NVFP4 block as stored: 16 E2M1 codes in 8 bytes (low nibble = lower index) plus one E4M3
 * scale byte that lives in the separate `weight_scale` tensor.  These structs exist to pin the
 * sizes the storage arithmetic relies on; arrays are addressed as plain bytes. */
typedef struct lwq_nvfp4_codes {
    uint8_t qs[LWQ_NVFP4_BLOCK / 2];
} lwq_nvfp4_codes;
typedef struct lwq_e4m3 {
    uint8_t bits;
} lwq_e4m3;
LWQ_STATIC_ASSERT(sizeof(lwq_nvfp4_codes) == 8, "16 E2M1 codes pack into 8 bytes");
LWQ_STATIC_ASSERT(sizeof(lwq_e4m3) == 1, "an E4M3 scale is one byte");
LWQ_STATIC_ASSERT(LWQ_NVFP4_BLOCK % 2 == 0, "codes are packed in pairs");

/* ---- E4M3 ----------------------------------------------------------------------------------- */

/* Exact value of an E4M3 byte given in an int32 (0..255); 0x7F/0xFF decode to NaN, 0x80 to -0.
 * Selects, not branches; the int32 form keeps CPU loops in one lane width. */
LWQ_HD float lwq_e4m3_to_f32_i32(int32_t b)
{
    uint32_t u = (uint32_t)b;
    uint32_t sign = (u & 0x80u) << 24;
    uint32_t e = (u >> 3) & 15u, m = u & 7u;
    uint32_t sub = lwq_f32_bits(LWQ_FMUL((float)(int32_t)m, LWQ_E4M3_MIN_SUB)); /* m * 2^-9, exact */
    uint32_t nrm = ((e + 120u) << 23) | (m << 20);
    /* selects as masks: GCC does not if-convert the ternary form of this loop body */
    uint32_t is_sub = 0u - (uint32_t)(e == 0u), is_nan = 0u - (uint32_t)((u & 0x7fu) == 0x7fu);
    uint32_t bits = (sub & is_sub) | (nrm & ~is_sub);
    bits = (0x7fc00000u & is_nan) | (bits & ~is_nan);
    return lwq_bits_f32(bits | sign);
}

LWQ_HD float lwq_e4m3_to_f32(uint8_t b) { return lwq_e4m3_to_f32_i32((int32_t)b); }

/* The codes a checkpoint may hold: an FP8 weight code is anything but NaN (0x7F/0xFF); an NVFP4
 * block scale is positive and finite (0x01..0x7E: zero would erase the block, a negative one flip
 * its signs, NaN poison it), as lwq writes them and as lwq verify requires. */
LWQ_HD int lwq_e4m3_is_nan(uint8_t b) { return (b & 0x7fu) == 0x7fu; }
LWQ_HD int lwq_e4m3_is_block_scale(uint8_t b) { return b >= 0x01u && b <= 0x7eu; }

/* float32 -> E4M3 byte (in an int32, 0..255): one rounding (nearest, ties to even), |f| > 448
 * saturates to +-448 (0x7E/0xFE), infinities too; NaN -> 0x7F with its sign.  Written with
 * 32-bit signed lanes and selects, not branches, so that CPU loops calling it vectorize. */
LWQ_HD int32_t lwq_e4m3_from_f32_i32(float f)
{
    int32_t u = (int32_t)lwq_f32_bits(f);
    int32_t sign = (u >> 24) & 0x80;
    int32_t a = u & 0x7fffffff;
    int32_t is_nan = a > 0x7f800000;
    a = a > 0x43e00000 ? 0x43e00000 : a; /* 448 = 0x43e00000; bit order = value order */
    /* normal range (>= 2^-6): round the float mantissa to 3 bits, rebias 127 -> 7 */
    int32_t rn = ((a + 0x7ffff + ((a >> 20) & 1)) >> 20) - 960;
    /* subnormal range: k * 2^-9 with k = rint(|f| * 2^9) in 0..8 (8 is the smallest normal, whose
     * byte is also 8); adding and removing 2^23 rounds to an integer, ties to even, exactly. */
    float k = LWQ_FSUB(LWQ_FADD(LWQ_FMUL(lwq_bits_f32((uint32_t)a), 512.0f), 8388608.0f), 8388608.0f);
    int32_t rs = (int32_t)k;
    int32_t r = a >= 0x3c800000 ? rn : rs;
    r = is_nan ? 0x7f : r;
    return r | sign;
}

LWQ_HD uint8_t lwq_e4m3_from_f32(float f) { return (uint8_t)lwq_e4m3_from_f32_i32(f); }

/* ---- E2M1 ----------------------------------------------------------------------------------- */

/* FORMATS.md rounding of |q|: <=0.25 -> 0, <0.75 -> 0.5, <=1.25 -> 1, <1.75 -> 1.5, <=2.5 -> 2,
 * <3.5 -> 3, <=5 -> 4, >5 -> 6; i.e. each exact tie goes to the even code.  The magnitude code is
 * the number of thresholds passed.  Sign bit 3 is `q < 0` (so -0.0 gives code 0, a tiny negative
 * value code 8).  NaN gives code 0 (callers never pass one). */
LWQ_HD int32_t lwq_e2m1_from_f32_i32(float q)
{
    float a = lwq_bits_f32(lwq_f32_bits(q) & 0x7fffffffu);
    return (int32_t)(a > 0.25f) + (int32_t)(a >= 0.75f) + (int32_t)(a > 1.25f) + (int32_t)(a >= 1.75f) +
           (int32_t)(a > 2.5f) + (int32_t)(a >= 3.5f) + (int32_t)(a > 5.0f) + ((int32_t)(q < 0.0f) << 3);
}

LWQ_HD uint8_t lwq_e2m1_from_f32(float q) { return (uint8_t)lwq_e2m1_from_f32_i32(q); }

/* Value of an E2M1 code (low 4 bits used); code 8 is -0. */
LWQ_HD float lwq_e2m1_to_f32(uint8_t c)
{
    uint32_t m = c & 7u;
    /* 0, 0.5, 1, 1.5, 2, 3, 4, 6 */
    float v = m < 4u ? LWQ_FMUL((float)m, 0.5f) : (m < 6u ? (float)(m - 2u) : (m == 6u ? 4.0f : 6.0f));
    return (c & 8u) ? -v : v;
}

/* The value q rounds to, lwq_e2m1_to_f32(lwq_e2m1_from_f32(q)), computed as a sum of exact
 * steps so that the searches can evaluate it without a table lookup. */
LWQ_HD float lwq_e2m1_round(float q)
{
    float a = lwq_bits_f32(lwq_f32_bits(q) & 0x7fffffffu);
    float m = (a > 0.25f ? 0.5f : 0.0f) + (a >= 0.75f ? 0.5f : 0.0f) + (a > 1.25f ? 0.5f : 0.0f) +
              (a >= 1.75f ? 0.5f : 0.0f) + (a > 2.5f ? 1.0f : 0.0f) + (a >= 3.5f ? 1.0f : 0.0f) +
              (a > 5.0f ? 2.0f : 0.0f); /* every partial sum is exact */
    return q < 0.0f ? -m : m;
}

/* The same rounding for a magnitude a >= 0 by three round-to-integer steps instead of seven
 * comparisons: adding and removing 2^22 / 2^23 / 2^24 rounds to the nearest multiple of 0.5 / 1 /
 * 2 with ties to the even multiple, which is exactly E2M1's grid and tie rule on [0,2), [2,4)
 * and [4,6] (6 caps everything above).  Equal to |lwq_e2m1_round(a)| for every non-NaN a >= 0
 * (test_quant_formats checks every float in [0, 16) and samples above). */
LWQ_HD float lwq_e2m1_round_mag(float a)
{
    float r05 = LWQ_FSUB(LWQ_FADD(a, 0x1p22f), 0x1p22f);
    float r1 = LWQ_FSUB(LWQ_FADD(a, 0x1p23f), 0x1p23f);
    float r2 = LWQ_FSUB(LWQ_FADD(a, 0x1p24f), 0x1p24f);
    r2 = r2 > 6.0f ? 6.0f : r2;
    return a < 2.0f ? r05 : (a < 4.0f ? r1 : r2);
}

/* E2M1 rounding of a quotient without the division.  For a magnitude a >= 0 and a divisor d > 0,
 * each of the seven tests of lwq_e2m1_from_f32 on q = fl(a / d) (q > 0.25, q >= 0.75, q > 1.25,
 * q >= 1.75, q > 2.5, q >= 3.5, q > 5) is monotone in a, because division by d > 0 and rounding
 * are monotone.  So each holds exactly when a >= b[i], b[i] the smallest float for which it
 * holds; lwq_e2m1_thresholds finds the seven b[i] by bisection over the bit patterns of
 * [0, +inf] (one division per step, 31 steps), once per divisor.  The searches try the same 126
 * divisors on every block, so they pay for this once per tensor and then round by comparisons. */
#define LWQ_E2M1_NTHR 7

LWQ_HD int lwq_e2m1_test(float q, int i)
{
    switch (i) {
    case 0: return q > 0.25f;
    case 1: return q >= 0.75f;
    case 2: return q > 1.25f;
    case 3: return q >= 1.75f;
    case 4: return q > 2.5f;
    case 5: return q >= 3.5f;
    default: return q > 5.0f;
    }
}

LWQ_HD void lwq_e2m1_thresholds(float d, float *b)
{
    for (int i = 0; i < LWQ_E2M1_NTHR; i++) {
        uint32_t lo = 0, hi = 0x7f800000u; /* test false at 0, true at +inf */
        while (hi - lo > 1u) {
            uint32_t mid = lo + (hi - lo) / 2u;
            if (lwq_e2m1_test(LWQ_FDIV(lwq_bits_f32(mid), d), i))
                hi = mid;
            else
                lo = mid;
        }
        b[i] = lwq_bits_f32(hi);
    }
}

/* lwq_e2m1_round_mag(fl(a / d)) from the thresholds of d (a >= 0, not NaN).  The tests are
 * nested (each implies the one before), so b[] ascends and the value is that of the highest
 * threshold passed: one compare and one select per threshold. */
LWQ_HD float lwq_e2m1_round_thr(float a, const float *b)
{
    float m = a >= b[0] ? 0.5f : 0.0f;
    m = a >= b[1] ? 1.0f : m;
    m = a >= b[2] ? 1.5f : m;
    m = a >= b[3] ? 2.0f : m;
    m = a >= b[4] ? 3.0f : m;
    m = a >= b[5] ? 4.0f : m;
    return a >= b[6] ? 6.0f : m;
}

/* Two codes in one byte: the lower-index element in the low nibble. */
LWQ_HD uint8_t lwq_nvfp4_pack(uint8_t lo, uint8_t hi) { return (uint8_t)((lo & 15u) | ((hi & 15u) << 4)); }

/* ---- NVFP4 scales --------------------------------------------------------------------------- */

/* weight_scale_2 = global_amax / (6 * 448), one float32 division. */
LWQ_HD float lwq_nvfp4_ws2(float global_amax) { return LWQ_FDIV(global_amax, LWQ_NVFP4_WS2_DIV); }

LWQ_HD float lwq_e4m3_clamp(float s)
{
    s = s < LWQ_E4M3_MIN_SUB ? LWQ_E4M3_MIN_SUB : s;
    return s > LWQ_E4M3_MAX ? LWQ_E4M3_MAX : s;
}

/* Dynamic/max path: s = block_amax / (6 * ws2) (the product rounded first, as ModelOpt computes
 * it), an all-zero block gets s = 1, then clamp to [2^-9, 448] and encode. */
LWQ_HD uint8_t lwq_nvfp4_scale_max(float block_amax, float ws2)
{
    float s = LWQ_FDIV(block_amax, LWQ_FMUL(6.0f, ws2));
    s = s == 0.0f ? 1.0f : s;
    return lwq_e4m3_from_f32(lwq_e4m3_clamp(s));
}

/* Static path: s = block_amax / 6 (0 -> 1), then s * 448 / (global_amax / 6), clamp, encode. */
LWQ_HD uint8_t lwq_nvfp4_scale_static(float block_amax, float global_amax)
{
    float s = LWQ_FDIV(block_amax, 6.0f);
    s = s == 0.0f ? 1.0f : s;
    s = LWQ_FDIV(LWQ_FMUL(s, LWQ_E4M3_MAX), LWQ_FDIV(global_amax, 6.0f));
    return lwq_e4m3_from_f32(lwq_e4m3_clamp(s));
}

/* Four-over-Six (Model Optimizer 0.47: numeric_utils.fp8_max_for_normalization, E4M3_MAX_46):
 * the static path normalises the block scales to fp8max = 256 instead of 448, so that a block
 * amax raised by 1.5 (its M = 4 candidate) still fits E4M3: weight_scale_2 = global_amax /
 * (6 * fp8max) (get_weights_scaling_factor_2_from_quantizer) and the scale byte
 * e4m3(clamp(s * fp8max / (global_amax / 6))) (_cast_per_block_scale_to_fp8).  With fp8max = 448
 * both are exactly lwq_nvfp4_ws2 / lwq_nvfp4_scale_static. */
#define LWQ_NVFP4_46_FP8MAX 256.0f
LWQ_HD float lwq_nvfp4_ws2_m(float global_amax, float fp8max)
{
    return LWQ_FDIV(global_amax, LWQ_FMUL(6.0f, fp8max)); /* 6 * 256 = 1536, exact */
}
LWQ_HD uint8_t lwq_nvfp4_scale_static_m(float block_amax, float global_amax, float fp8max)
{
    float s = LWQ_FDIV(block_amax, 6.0f);
    s = s == 0.0f ? 1.0f : s;
    s = LWQ_FDIV(LWQ_FMUL(s, fp8max), LWQ_FDIV(global_amax, 6.0f));
    return lwq_e4m3_from_f32(lwq_e4m3_clamp(s));
}

/* The block amax that the static path maps back to scale byte `b` (FORMATS.md section 4:
 * global_amax * v / 448); what the scale sweep reports as its calibrated amax.  Rounded as Model
 * Optimizer 0.47 computes it, global_amax * fl(v / 448) (calib/mse.py, NVFP4MSECalibrator:
 * candidates fp8_scale_candidates() = v / 448 in F32, amax = global_amax * candidate; its Triton
 * sweep the same): when the export's fused-group amax differs from the search's, the static path
 * maps this amax to another byte, and there one ulp can matter. */
LWQ_HD float lwq_nvfp4_sweep_amax(uint8_t b, float global_amax)
{
    return LWQ_FMUL(global_amax, LWQ_FDIV(lwq_e4m3_to_f32(b), LWQ_E4M3_MAX));
}

/* The divisor of a block's elements: float(weight_scale) * weight_scale_2, rounded once. */
LWQ_HD float lwq_nvfp4_block_div(uint8_t scale, float ws2) { return LWQ_FMUL(lwq_e4m3_to_f32(scale), ws2); }

/* Quantize one block with a given scale byte: q = x / d, rounded to E2M1, packed.
 * x: (16,) values already in the checkpoint dtype; out: (8,) bytes. */
LWQ_HD void lwq_nvfp4_quant_block_ref(const float *x, uint8_t scale, float ws2, uint8_t *out)
{
    float d = lwq_nvfp4_block_div(scale, ws2);
    for (int i = 0; i < LWQ_NVFP4_BLOCK; i += 2)
        out[i / 2] = lwq_nvfp4_pack(lwq_e2m1_from_f32(LWQ_FDIV(x[i], d)), lwq_e2m1_from_f32(LWQ_FDIV(x[i + 1], d)));
}

/* ---- search losses -------------------------------------------------------------------------- */

/* Sum of 16 terms in a fixed halving tree (t[i] + t[i+8], then +4, +2, +1): the order both
 * backends use, chosen because it maps onto SIMD lanes. t is overwritten. */
LWQ_HD float lwq_sum16_tree(float *t)
{
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++)
            t[i] = LWQ_FADD(t[i], t[i + h]);
    return t[0];
}

/* Squared error of a block dequantized with divisor d: sum (x - e2m1_round(x/d) * d)^2. */
LWQ_HD float lwq_nvfp4_block_sqerr_ref(const float *x, float d)
{
    float t[LWQ_NVFP4_BLOCK];
    for (int i = 0; i < LWQ_NVFP4_BLOCK; i++) {
        float e = LWQ_FSUB(x[i], LWQ_FMUL(lwq_e2m1_round(LWQ_FDIV(x[i], d)), d));
        t[i] = LWQ_FMUL(e, e);
    }
    return lwq_sum16_tree(t);
}

/* Hessian-weighted error dw^T H dw, dw = x - dequant; (H dw)_i summed over j in ascending order,
 * then dw_i * (H dw)_i summed with the tree above.  With H = I this equals the plain squared
 * error bit for bit (the added zeros are exact).  h: (16, 16) row-major. */
LWQ_HD float lwq_nvfp4_block_herr_ref(const float *x, float d, const float *h)
{
    float dw[LWQ_NVFP4_BLOCK], t[LWQ_NVFP4_BLOCK];
    for (int i = 0; i < LWQ_NVFP4_BLOCK; i++)
        dw[i] = LWQ_FSUB(x[i], LWQ_FMUL(lwq_e2m1_round(LWQ_FDIV(x[i], d)), d));
    for (int i = 0; i < LWQ_NVFP4_BLOCK; i++) {
        float hd = 0.0f;
        for (int j = 0; j < LWQ_NVFP4_BLOCK; j++)
            hd = LWQ_FADD(hd, LWQ_FMUL(h[i * LWQ_NVFP4_BLOCK + j], dw[j]));
        t[i] = LWQ_FMUL(dw[i], hd);
    }
    return lwq_sum16_tree(t);
}

/* fp8_scale_sweep for one block: the positive E4M3 byte (1..126) whose divisor v * ws2 gives the
 * smallest loss; ties go to the smaller byte (strict `<`, ascending).  h: (16,16) or NULL for the
 * plain squared error. */
LWQ_HD uint8_t lwq_nvfp4_sweep_block_ref(const float *x, float ws2, const float *h)
{
    uint8_t best = 1;
    float best_loss = 0.0f;
    for (int b = 1; b <= LWQ_E4M3_NPOS; b++) {
        float d = lwq_nvfp4_block_div((uint8_t)b, ws2);
        float l = h ? lwq_nvfp4_block_herr_ref(x, d, h) : lwq_nvfp4_block_sqerr_ref(x, d);
        if (b == 1 || l < best_loss) {
            best = (uint8_t)b;
            best_loss = l;
        }
    }
    return best;
}

/* ---- mse multipliers ------------------------------------------------------------------------ */

/* Multiplier k (0..38) of the `mse` search, bit for bit the k-th value of Model Optimizer's
 * candidates torch.linspace(0.25, 4.0, 39) (MseCalibrator._generate_candidates,
 * modelopt/torch/quantization/calib/mse.py): torch computes in float, step = (4 - 0.25) / 38,
 * the first half start + step * k and the second half end - step * (38 - k), each with one
 * rounding (a fused multiply-add in its vectorized CPU kernel and on CUDA).  Both ends are exact.
 * (lwq's earlier double formula differed in the last bit for 12 of the 39 and so picked a
 * different FP8 weight_scale for some tensors.) */
LWQ_HD float lwq_mse_multiplier(int k)
{
    const float step = 3.75f / 38.0f;
    return k < 19 ? fmaf(step, (float)k, 0.25f) : fmaf(-step, (float)(38 - k), 4.0f);
}

/* The candidates of Model Optimizer's MseCalibrator for (start_multiplier, stop_multiplier,
 * step_size) (modelopt/torch/quantization/calib/mse.py): n = ceil((stop - start) / step) + 1 in
 * double (Python's math.ceil), then torch.linspace(start, stop, n) in float: step_f = (float(stop)
 * - float(start)) / float(n - 1), the first n / 2 values fmaf(step_f, k, start), the others
 * fmaf(-step_f, n - 1 - k, stop) (checked against torch 2.13's CPU linspace on 300 ranges of up to
 * 200 values); n = 1 gives [start].  Writes at most `max` values to out; returns n, or -1 when the
 * range is not a finite, positive, ascending one (start > 0, stop >= start, step > 0).  For the
 * default range it gives lwq_mse_multiplier's 39. */
static inline int lwq_mse_linspace(double start, double stop, double step, float *out, int max)
{
    if (!(start > 0.0) || !(stop >= start) || !(step > 0.0) || !isfinite(stop) || !isfinite(step))
        return -1;
    double nd = ceil((stop - start) / step) + 1.0;
    if (!(nd >= 1.0) || nd > 1e6)
        return -1;
    int n = (int)nd;
    float fs = (float)start, fe = (float)stop;
    float st = n > 1 ? (fe - fs) / (float)(n - 1) : 0.0f;
    for (int k = 0; k < n && k < max; k++)
        out[k] = n == 1 ? fs : k < n / 2 ? fmaf(st, (float)k, fs) : fmaf(-st, (float)(n - 1 - k), fe);
    return n;
}

/* FP8 per-tensor: the element stored for x with per-tensor scale `ws` (= amax / 448). */
LWQ_HD uint8_t lwq_fp8_quant_ref(float x, float ws) { return lwq_e4m3_from_f32(LWQ_FDIV(x, ws)); }

#endif
