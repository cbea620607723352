/* kernels/cpu/exp/exp_avx512.c — the array forms of exp.h for AVX-512F CPUs: 16 floats a step,
 * evaluated as two vectors of 8 doubles with exp_kern.h's sequence (the 32-entry table in four
 * registers, looked up with two two-source permutes and a blend on bit 4 of the index); the
 * special cases are blended in only when a lane needs one.  Compiled for AVX-512 as a whole file;
 * called only after the run-time check of exp_cpu.c. */
#include <math.h>
#include <stdint.h>

#include "kernels/cpu/exp/exp_kern.h"

#if defined(__clang__)
#include <immintrin.h>
#pragma clang attribute push(__attribute__((target("avx512f,fma"))), apply_to = function)
#else
#pragma GCC target("avx512f,fma")
#include <immintrin.h>
#endif

typedef struct tab_regs {
    __m512i t0, t1, t2, t3; /* lwq_exp_tab[0..7], [8..15], [16..23], [24..31] */
} tab_regs;

static inline tab_regs load_tab(void)
{
    tab_regs t;
    t.t0 = _mm512_loadu_si512((const void *)(lwq_exp_tab + 0));
    t.t1 = _mm512_loadu_si512((const void *)(lwq_exp_tab + 8));
    t.t2 = _mm512_loadu_si512((const void *)(lwq_exp_tab + 16));
    t.t3 = _mm512_loadu_si512((const void *)(lwq_exp_tab + 24));
    return t;
}

static inline __m512d exp_pd(__m512d xd, const tab_regs *T)
{
    const __m512d inv = _mm512_set1_pd(LWQ_EXP_INVLN2N), sh = _mm512_set1_pd(LWQ_EXP_SHIFT);
    __m512d kd = _mm512_fmadd_pd(inv, xd, sh);
    const __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, sh);
    const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
    /* T[ki & 31]: bits 0-3 pick one of 16 in each pair of registers, bit 4 the pair */
    const __m512i lo = _mm512_permutex2var_epi64(T->t0, ki, T->t1);
    const __m512i hi = _mm512_permutex2var_epi64(T->t2, ki, T->t3);
    const __mmask8 up = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
    const __m512i t = _mm512_add_epi64(_mm512_mask_blend_epi64(up, lo, hi), _mm512_slli_epi64(ki, 47));
    const __m512d p = _mm512_fmadd_pd(_mm512_set1_pd(LWQ_EXP_C0), r, _mm512_set1_pd(LWQ_EXP_C1));
    const __m512d r2 = _mm512_mul_pd(r, r);
    const __m512d q = _mm512_fmadd_pd(_mm512_set1_pd(LWQ_EXP_C2), r, _mm512_set1_pd(1.0));
    return _mm512_mul_pd(_mm512_fmadd_pd(p, r2, q), _mm512_castsi512_pd(t));
}

static inline __m512 exp_ps(__m512 x, const tab_regs *T)
{
    const __m256 xl = _mm512_castps512_ps256(x);
    const __m256 xh = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
    const __m256 yl = _mm512_cvtpd_ps(exp_pd(_mm512_cvtps_pd(xl), T));
    const __m256 yh = _mm512_cvtpd_ps(exp_pd(_mm512_cvtps_pd(xh), T));
    __m512 y = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(yl)),
                                                   _mm256_castps_pd(yh), 1));
    const __mmask16 big = _mm512_cmp_ps_mask(x, _mm512_set1_ps(LWQ_EXP_OFLOW), _CMP_GT_OQ);
    const __mmask16 small = _mm512_cmp_ps_mask(x, _mm512_set1_ps(LWQ_EXP_MAY_UFLOW), _CMP_LT_OQ);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    if (big | small | nan) {
        const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(LWQ_EXP_UFLOW), _CMP_LT_OQ);
        y = _mm512_mask_mov_ps(y, small, _mm512_set1_ps(0x1p-149f));
        y = _mm512_mask_mov_ps(y, tiny, _mm512_setzero_ps()); /* -inf too */
        y = _mm512_mask_mov_ps(y, big, _mm512_set1_ps(INFINITY)); /* +inf too */
        y = _mm512_mask_add_ps(y, nan, x, x);
    }
    return y;
}

static inline __m512 neg(__m512 x)
{
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}

/* form 0: exp(x - m), 1: x / (1 + exp(-x)), 2: 1 / (1 + exp(-x)) */
static inline __m512 form(int f, __m512 x, __m512 m, const tab_regs *T)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    if (f == 0)
        return exp_ps(_mm512_sub_ps(x, m), T);
    const __m512 d = _mm512_add_ps(one, exp_ps(neg(x), T));
    return _mm512_div_ps(f == 1 ? x : one, d);
}

static inline void run(int f, const float *x, float mv, float *y, int64_t n)
{
    const tab_regs T = load_tab();
    const __m512 m = _mm512_set1_ps(mv);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, form(f, _mm512_loadu_ps(x + i), m, &T));
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, k, form(f, _mm512_maskz_loadu_ps(k, x + i), m, &T));
    }
}

void lwq_exp_sub_avx512(const float *x, float m, float *y, int64_t n) { run(0, x, m, y, n); }
void lwq_exp_silu_avx512(const float *x, float *y, int64_t n) { run(1, x, 0.0f, y, n); }
void lwq_exp_sigmoid_avx512(const float *x, float *y, int64_t n) { run(2, x, 0.0f, y, n); }

#if defined(__clang__)
#pragma clang attribute pop
#endif
