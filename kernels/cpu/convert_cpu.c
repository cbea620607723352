/* kernels/cpu/convert_cpu.c — the bulk BF16 <-> f32 conversions behind every CPU op.
 * Out of line and compiled per ISA (target_clones picks AVX-512 / AVX2 / baseline at load time)
 * with the vectorizer on, because at -O2 GCC leaves these loops scalar and the GEMM's weight
 * widening then costs as much as the small expert GEMMs themselves.  Same rounding as
 * core/data/dtype.h's scalar helpers (nearest even, NaN stays NaN), element by element. */
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/vec_clones.h"

LWQ_VEC void lwq_cpu_bf16_to_f32(const uint16_t *restrict s, float *restrict d, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)s[i] << 16;
        memcpy(&d[i], &u, 4);
    }
}

/* core/data/dtype.h's lwq_f32_to_bf16 without branches, so the loops that use it vectorize:
 * nearest even on the bits, NaN kept quiet */
static inline uint32_t bf16_bits(uint32_t u)
{
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t q = (u >> 16) | 0x40u;
    return (u & 0x7fffffffu) > 0x7f800000u ? q : r;
}

LWQ_VEC void lwq_cpu_f32_to_bf16(const float *restrict s, uint16_t *restrict d, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &s[i], 4);
        d[i] = (uint16_t)bf16_bits(u);
    }
}

/* lwq_gemm_pack_row (gemm_isa.h) without the scalar loop: each 32-block's even-k values, then its
 * odd-k values, zeros past k.  From BF16 the widening is the packing: a pair (k, k + 1) read as one
 * 32-bit word w gives the even value's f32 bits as w << 16 and the odd one's as w & 0xffff0000
 * (little-endian), exactly lwq_bf16_to_f32 of each.  Values are moved as bits, never as floats. */
LWQ_VEC void lwq_cpu_pack_row_bf16(const uint16_t *restrict s, int64_t k, float *restrict d)
{
    const int64_t nf = k / 32;
    for (int64_t b = 0; b < nf; b++)
        for (int l = 0; l < 16; l++) {
            uint32_t w;
            memcpy(&w, s + 32 * b + 2 * l, 4);
            const uint32_t ev = w << 16, od = w & 0xffff0000u;
            memcpy(&d[32 * b + l], &ev, 4);
            memcpy(&d[32 * b + 16 + l], &od, 4);
        }
    if (nf * 32 < k)
        for (int l = 0; l < 16; l++) {
            const int64_t i = nf * 32 + 2 * l;
            const uint32_t ev = i < k ? (uint32_t)s[i] << 16 : 0u;
            const uint32_t od = i + 1 < k ? (uint32_t)s[i + 1] << 16 : 0u;
            memcpy(&d[nf * 32 + l], &ev, 4);
            memcpy(&d[nf * 32 + 16 + l], &od, 4);
        }
}

LWQ_VEC void lwq_cpu_pack_row_f32(const float *restrict s, int64_t k, float *restrict d)
{
    const uint32_t *u = (const uint32_t *)(const void *)s;
    const int64_t nf = k / 32;
    for (int64_t b = 0; b < nf; b++)
        for (int l = 0; l < 16; l++) {
            uint32_t ev, od;
            memcpy(&ev, u + 32 * b + 2 * l, 4);
            memcpy(&od, u + 32 * b + 2 * l + 1, 4);
            memcpy(&d[32 * b + l], &ev, 4);
            memcpy(&d[32 * b + 16 + l], &od, 4);
        }
    if (nf * 32 < k)
        for (int l = 0; l < 16; l++) {
            const int64_t i = nf * 32 + 2 * l;
            uint32_t ev = 0, od = 0;
            if (i < k)
                memcpy(&ev, u + i, 4);
            if (i + 1 < k)
                memcpy(&od, u + i + 1, 4);
            memcpy(&d[nf * 32 + l], &ev, 4);
            memcpy(&d[nf * 32 + 16 + l], &od, 4);
        }
}

/* The GEMM's output tile to BF16 rows: dst[r * ldd + c] = bf16(src[r * nc + c] (+ bias[c])) for
 * r < nr, c < nc: the f32 add (when bias) and lwq_cpu_f32_to_bf16's rounding, one call per tile
 * instead of one per row. */
LWQ_VEC void lwq_cpu_store_tile_bf16(const float *restrict src, int64_t nr, int64_t nc,
                                     const float *restrict bias, uint16_t *restrict dst, int64_t ldd)
{
    for (int64_t r = 0; r < nr; r++) {
        const float *s = src + r * nc;
        uint16_t *d = dst + r * ldd;
        if (bias)
            for (int64_t c = 0; c < nc; c++) {
                const float v = s[c] + bias[c];
                uint32_t u;
                memcpy(&u, &v, 4);
                d[c] = (uint16_t)bf16_bits(u);
            }
        else
            for (int64_t c = 0; c < nc; c++) {
                uint32_t u;
                memcpy(&u, &s[c], 4);
                d[c] = (uint16_t)bf16_bits(u);
            }
    }
}

/* ---- fused row steps: the element-wise tails of the ops, BF16 rounding in vector lanes ------- */

/* lwq_round_to(f, LWQ_BF16) without the dtype switch or a call, so the loops below vectorize */
static inline float bf16r(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u = bf16_bits(u) << 16;
    memcpy(&f, &u, 4);
    return f;
}

LWQ_VEC static void norm_apply_bf16(const float *x, float rs, const float *restrict w, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = bf16r(w[i] * bf16r(x[i] * rs));
}

void lwq_cpu_norm_apply(const float *x, float rs, const float *w, float *y, int64_t n, lwq_dtype xdt,
                        lwq_dtype ydt)
{
    if (xdt == LWQ_BF16 && ydt == LWQ_BF16) {
        norm_apply_bf16(x, rs, w, y, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        y[i] = lwq_round_to(w[i] * lwq_round_to(x[i] * rs, xdt), ydt);
}

LWQ_VEC static void axpy_round_bf16(float *restrict acc, float a, const float *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        acc[i] = bf16r(acc[i] + bf16r(a * y[i]));
}

void lwq_cpu_axpy_round(float *acc, float a, const float *y, int64_t n, lwq_dtype dt)
{
    if (dt == LWQ_BF16) {
        axpy_round_bf16(acc, a, y, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        acc[i] = lwq_round_to(acc[i] + lwq_round_to(a * y[i], dt), dt);
}

LWQ_VEC static void rope_half_bf16(float *restrict x1, float *restrict x2, const float *restrict cs,
                                   const float *restrict sn, int64_t half)
{
    for (int64_t i = 0; i < half; i++) {
        float a = x1[i], b = x2[i];
        x1[i] = bf16r(bf16r(a * cs[i]) + bf16r(-b * sn[i]));
        x2[i] = bf16r(bf16r(b * cs[i]) + bf16r(a * sn[i]));
    }
}

void lwq_cpu_rope_apply(float *x, const float *cs, const float *sn, int64_t half, lwq_dtype dt)
{
    if (dt == LWQ_BF16) {
        rope_half_bf16(x, x + half, cs, sn, half);
        return;
    }
    for (int64_t i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = lwq_round_to(lwq_round_to(a * cs[i], dt) + lwq_round_to(-b * sn[i], dt), dt);
        x[i + half] = lwq_round_to(lwq_round_to(b * cs[i], dt) + lwq_round_to(a * sn[i], dt), dt);
    }
}

LWQ_VEC static void mul_round_bf16(float *restrict a, const float *restrict b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        a[i] = bf16r(a[i]) * b[i];
}

void lwq_cpu_mul_round(float *a, const float *b, int64_t n, lwq_dtype dt)
{
    if (dt == LWQ_BF16) {
        mul_round_bf16(a, b, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        a[i] = lwq_round_to(a[i], dt) * b[i];
}
