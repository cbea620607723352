/* core/data/dtype.h — element types of safetensors files and of lwq tensors, and the scalar
 * conversions between them.  The conversion helpers are `static inline` and marked LWQ_HD so the
 * same code compiles for the host and for CUDA device code (one definition of the rounding
 * rules, used by both backends). */
#ifndef LWQ_CORE_DTYPE_H
#define LWQ_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define LWQ_HD __host__ __device__ __forceinline__
#else
#define LWQ_HD static inline
#endif

typedef enum lwq_dtype {
    LWQ_F64 = 0,
    LWQ_F32,
    LWQ_F16,
    LWQ_BF16,
    LWQ_I64,
    LWQ_I32,
    LWQ_I16,
    LWQ_I8,
    LWQ_U8,
    LWQ_BOOL,
    LWQ_F8_E4M3,
    LWQ_F8_E5M2,
    LWQ_DTYPE_COUNT
} lwq_dtype;

/* Bytes per element (all dtypes here are whole bytes). */
size_t lwq_dtype_size(lwq_dtype t);
/* The safetensors spelling: "F32", "BF16", "F8_E4M3", ... */
const char *lwq_dtype_name(lwq_dtype t);
/* Parse a safetensors dtype string; returns 0 or LWQ_EFORMAT for an unknown spelling. */
int lwq_dtype_parse(const char *s, lwq_dtype *out);
/* True for F64/F32/F16/BF16 (the dtypes a compute path reads). */
int lwq_dtype_is_float(lwq_dtype t);

/* ---- scalar conversions (host and device) ---------------------------------------------------- */

LWQ_HD uint32_t lwq_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

LWQ_HD float lwq_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

LWQ_HD float lwq_bf16_to_f32(uint16_t h) { return lwq_bits_f32((uint32_t)h << 16); }

/* Round to nearest even, as torch's float->bfloat16 cast; NaN stays a (quiet) NaN. */
LWQ_HD uint16_t lwq_f32_to_bf16(float f)
{
    uint32_t u = lwq_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

LWQ_HD float lwq_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0)
            return lwq_bits_f32(sign);
        /* subnormal: man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    if (exp == 31)
        return lwq_bits_f32(sign | 0x7f800000u | (man << 13));
    return lwq_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Round to nearest even with overflow to inf, as IEEE (and torch) do. */
LWQ_HD uint16_t lwq_f32_to_f16(float f)
{
    uint32_t u = lwq_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);               /* NaN */
    if (a >= 0x477ff000u)                                 /* >= 65520 rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {                                /* below 2^-14: subnormal or zero */
        if (a < 0x33000000u)                              /* < 2^-25: rounds to zero */
            return sign;
        uint32_t e = a >> 23;                             /* 102..112 */
        uint32_t m = (a & 0x7fffffu) | 0x800000u;         /* value = m * 2^(e-150) */
        uint32_t shift = 126u - e;                        /* in units of 2^-24: m >> shift */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++;                                          /* 0x400 carries into the exponent */
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);           /* RNE on the 13 dropped bits */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

/* Load element i of a float array of dtype t (F32/F16/BF16/F64) as float. */
LWQ_HD float lwq_load_f(const void *p, lwq_dtype t, size_t i)
{
    switch (t) {
    case LWQ_F32: return ((const float *)p)[i];
    case LWQ_BF16: return lwq_bf16_to_f32(((const uint16_t *)p)[i]);
    case LWQ_F16: return lwq_f16_to_f32(((const uint16_t *)p)[i]);
    case LWQ_F64: return (float)((const double *)p)[i];
    default: return 0.0f;
    }
}

/* Round a float to what storing it in dtype t and reading it back gives. */
LWQ_HD float lwq_round_to(float v, lwq_dtype t)
{
    switch (t) {
    case LWQ_BF16: return lwq_bf16_to_f32(lwq_f32_to_bf16(v));
    case LWQ_F16: return lwq_f16_to_f32(lwq_f32_to_f16(v));
    default: return v;
    }
}

#endif
