/* kernels/cpu/gemm/gemm_avx2.c — the GEMM kernels of gemm_isa.h for AVX2 + FMA + F16C CPUs.
 * The 16 lanes are two ymm (lanes 0-7, 8-15); with 16 registers a tile is 2 rows x 2 outputs
 * (8 accumulator registers, 4 widened weights, 2 x halves).  BF16 weights widen in registers
 * (a shift for even k, a mask for odd k); F16 and F32 weights go to even/odd order with a shuffle
 * and a lane permute.  Compiled for AVX2 as a whole file; called only after the run-time check
 * of gemm_cpu.c. */
#include <math.h>
#include <stdint.h>

#include "kernels/cpu/gemm/gemm_isa.h"

#if defined(__clang__)
/* clang has no `#pragma GCC target`: its intrinsics carry their own target, and this gives every
 * function below the ISA (popped at the end of the file) */
#include <immintrin.h>
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>
#endif

typedef struct v16 {
    __m256 lo, hi; /* lanes 0-7, 8-15 */
} v16;

static inline v16 v_zero(void) { return (v16){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline v16 v_set1(float a) { return (v16){_mm256_set1_ps(a), _mm256_set1_ps(a)}; }
static inline v16 v_fma(v16 a, v16 b, v16 c)
{
    return (v16){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
static inline v16 v_add(v16 a, v16 b) { return (v16){_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
static inline v16 v_ld(const float *p) { return (v16){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
static inline void v_st(float *p, v16 v)
{
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
}
static inline float v_sum(v16 a)
{
    __m256 t = _mm256_add_ps(a.lo, a.hi);                                          /* i + (i+8) */
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)); /* + (i+4) */
    __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));                              /* + (i+2) */
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));                    /* 0 + 1 */
}

#define V v16
#define V_ZERO() v_zero()
#define V_SET1(a) v_set1(a)
#define V_FMA(a, b, c) v_fma(a, b, c)
#define V_ADD(a, b) v_add(a, b)
#define V_LD(p) v_ld(p)
#define V_ST(p, v) v_st(p, v)
#define V_SUM(v) v_sum(v)
#define V_PIN(v) ((void)0)

#define W_BF16(p, e, o)                                                                            \
    do {                                                                                           \
        __m256i a_ = _mm256_loadu_si256((const __m256i *)(p));     /* k 0..15 */                   \
        __m256i b_ = _mm256_loadu_si256((const __m256i *)(p) + 1); /* k 16..31 */                  \
        __m256i m_ = _mm256_set1_epi32((int)0xFFFF0000u);                                          \
        (e).lo = _mm256_castsi256_ps(_mm256_slli_epi32(a_, 16));                                   \
        (e).hi = _mm256_castsi256_ps(_mm256_slli_epi32(b_, 16));                                   \
        (o).lo = _mm256_castsi256_ps(_mm256_and_si256(a_, m_));                                    \
        (o).hi = _mm256_castsi256_ps(_mm256_and_si256(b_, m_));                                    \
    } while (0)

/* a = k 0..7, b = k 8..15 of a half block -> the 8 even and the 8 odd k, in order */
#define SPLIT8(a, b, e, o)                                                                         \
    do {                                                                                           \
        (e) = _mm256_castpd_ps(_mm256_permute4x64_pd(                                              \
            _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))), 0xD8));            \
        (o) = _mm256_castpd_ps(_mm256_permute4x64_pd(                                              \
            _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))), 0xD8));            \
    } while (0)

#define W_F16(p, e, o)                                                                             \
    do {                                                                                           \
        const __m128i *q_ = (const __m128i *)(p);                                                  \
        __m256 a_ = _mm256_cvtph_ps(_mm_loadu_si128(q_)), b_ = _mm256_cvtph_ps(_mm_loadu_si128(q_ + 1)); \
        __m256 c_ = _mm256_cvtph_ps(_mm_loadu_si128(q_ + 2)), d_ = _mm256_cvtph_ps(_mm_loadu_si128(q_ + 3)); \
        SPLIT8(a_, b_, (e).lo, (o).lo);                                                            \
        SPLIT8(c_, d_, (e).hi, (o).hi);                                                            \
    } while (0)

#define W_F32(p, e, o)                                                                             \
    do {                                                                                           \
        const float *q_ = (const float *)(p);                                                      \
        __m256 a_ = _mm256_loadu_ps(q_), b_ = _mm256_loadu_ps(q_ + 8);                             \
        __m256 c_ = _mm256_loadu_ps(q_ + 16), d_ = _mm256_loadu_ps(q_ + 24);                       \
        SPLIT8(a_, b_, (e).lo, (o).lo);                                                            \
        SPLIT8(c_, d_, (e).hi, (o).hi);                                                            \
    } while (0)

#define MR 2
#define MC 2
#define KLIST(X, K) X(K, 1, 1) X(K, 1, 2) X(K, 2, 1) X(K, 2, 2)
#define KNAME(s) lwq_gemm_##s##_avx2_
#define lwq_gemm_panel_avx2_ lwq_gemm_panel_avx2
#define lwq_gemm_axpy_avx2_ lwq_gemm_axpy_avx2
#define lwq_gemm_pv_avx2_ lwq_gemm_pv_avx2
#define lwq_gemm_scores_avx2_ lwq_gemm_scores_avx2
#define SC_R 1
#define SC_C 1

#include "kernels/cpu/gemm/gemm_kern.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
