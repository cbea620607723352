/* kernels/cpu/convert_cpu.c — the bulk BF16 <-> f32 conversions behind every CPU op.
 * Out of line and compiled per ISA (target_clones picks AVX-512 / AVX2 / baseline at load time)
 * with the vectorizer on, because at -O2 GCC leaves these loops scalar and the GEMM's weight
 * widening then costs as much as the small expert GEMMs themselves.  Same rounding as
 * core/data/dtype.h's scalar helpers (nearest even, NaN stays NaN), element by element. */
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

/* GCC only, as in quant_cpu.c: clang has no optimize attribute, vectorizes at -O2 anyway, and its
 * (14's) target_clones on a function called from other files resolves those calls to the resolver
 * itself, so a clang build keeps plain functions */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LWQ_VEC                                                                                    \
    __attribute__((target_clones("avx512f", "avx2", "default"),                                   \
                   optimize("tree-vectorize", "vect-cost-model=dynamic")))
#else
#define LWQ_VEC
#endif

LWQ_VEC void lwq_cpu_bf16_to_f32(const uint16_t *restrict s, float *restrict d, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)s[i] << 16;
        memcpy(&d[i], &u, 4);
    }
}

LWQ_VEC void lwq_cpu_f32_to_bf16(const float *restrict s, uint16_t *restrict d, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &s[i], 4);
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        uint32_t q = (u >> 16) | 0x40u;
        d[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
    }
}
