/* kernels/cpu/gemm/gemm_avx512.c — the GEMM kernels of gemm_isa.h for AVX-512F CPUs.
 * The 16 lanes are one zmm; a register tile is 6 rows x 3 outputs: 18 accumulators, the 6 widened
 * weight vectors of a 32-block, and the block's 2 x vectors, pinned in registers so that each is
 * loaded once per block rather than folded into every FMA (measured: 8 rows x 3 or 10-12 rows x 2
 * spill and run slower).  BF16 weights widen in registers: a 64-byte load of 32 values, then a
 * shift (even k) and a mask (odd k); F16 and F32 weights are put in even/odd order with two
 * permutes.  Compiled for AVX-512 as a whole file; called only after the run-time check of
 * gemm_cpu.c. */
#include <math.h>
#include <stdint.h>

#include "kernels/cpu/gemm/gemm_isa.h"

#if defined(__clang__)
/* clang has no `#pragma GCC target`: its intrinsics carry their own target, and this gives every
 * function below the ISA (popped at the end of the file) */
#include <immintrin.h>
#pragma clang attribute push(__attribute__((target("avx512f,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx512f,fma,f16c")
#include <immintrin.h>
#endif

#define V __m512
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(a) _mm512_set1_ps(a)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_LD(p) _mm512_loadu_ps(p)
#define V_ST(p, v) _mm512_storeu_ps(p, v)
#define V_SUM(v) v_sum(v)
#define V_PIN(v) __asm__("" : "+v"(v))

static inline float v_sum(__m512 a)
{
    __m256 lo = _mm512_castps512_ps256(a);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    __m256 t = _mm256_add_ps(lo, hi);                                          /* i + (i+8) */
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)); /* + (i+4) */
    __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));                              /* + (i+2) */
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));                    /* 0 + 1 */
}

#define W_BF16(p, e, o)                                                                            \
    do {                                                                                           \
        __m512i w_ = _mm512_loadu_si512((const void *)(p));                                        \
        (e) = _mm512_castsi512_ps(_mm512_slli_epi32(w_, 16));                                      \
        (o) = _mm512_castsi512_ps(_mm512_and_si512(w_, _mm512_set1_epi32((int)0xFFFF0000u)));     \
    } while (0)

#define EVEN_IDX _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
#define ODD_IDX _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31)

#define W_SPLIT(lo, hi, e, o)                                                                      \
    do {                                                                                           \
        (e) = _mm512_permutex2var_ps(lo, EVEN_IDX, hi);                                            \
        (o) = _mm512_permutex2var_ps(lo, ODD_IDX, hi);                                             \
    } while (0)

#define W_F16(p, e, o)                                                                             \
    do {                                                                                           \
        __m512 l_ = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)));                     \
        __m512 h_ = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p) + 1));                 \
        W_SPLIT(l_, h_, e, o);                                                                     \
    } while (0)

#define W_F32(p, e, o)                                                                             \
    do {                                                                                           \
        __m512 l_ = _mm512_loadu_ps((const float *)(p));                                           \
        __m512 h_ = _mm512_loadu_ps((const float *)(p) + 16);                                      \
        W_SPLIT(l_, h_, e, o);                                                                     \
    } while (0)

#ifndef MR
#define MR 6
#endif
#ifndef MC
#define MC 3
#endif
#if MC == 2
#define KR(X, K, R) X(K, R, 1) X(K, R, 2)
#elif MC == 3
#define KR(X, K, R) X(K, R, 1) X(K, R, 2) X(K, R, 3)
#else
#define KR(X, K, R) X(K, R, 1) X(K, R, 2) X(K, R, 3) X(K, R, 4)
#endif
#if MR == 4
#define KLIST(X, K) KR(X, K, 1) KR(X, K, 2) KR(X, K, 3) KR(X, K, 4)
#elif MR == 6
#define KLIST(X, K) KR(X, K, 1) KR(X, K, 2) KR(X, K, 3) KR(X, K, 4) KR(X, K, 5) KR(X, K, 6)
#elif MR == 7
#define KLIST(X, K) KR(X, K, 1) KR(X, K, 2) KR(X, K, 3) KR(X, K, 4) KR(X, K, 5) KR(X, K, 6) KR(X, K, 7)
#else
#define KLIST(X, K)                                                                                \
    KR(X, K, 1) KR(X, K, 2) KR(X, K, 3) KR(X, K, 4) KR(X, K, 5) KR(X, K, 6) KR(X, K, 7) KR(X, K, 8)
#endif
#define KNAME(s) lwq_gemm_##s##_avx512_
#define lwq_gemm_panel_avx512_ lwq_gemm_panel_avx512
#define lwq_gemm_axpy_avx512_ lwq_gemm_axpy_avx512
#define lwq_gemm_pv_avx512_ lwq_gemm_pv_avx512
#define lwq_gemm_scores_avx512_ lwq_gemm_scores_avx512
#define SC_R 2 /* scores: query rows x 16-key vectors per register tile */
#define SC_C 2

#include "kernels/cpu/gemm/gemm_kern.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
