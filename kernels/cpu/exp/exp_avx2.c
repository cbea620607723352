/* kernels/cpu/exp/exp_avx2.c — the array forms of exp.h for AVX2 + FMA CPUs: 8 floats a step, as
 * two vectors of 4 doubles with exp_kern.h's sequence (the table looked up with a 64-bit gather);
 * the special cases are blended in only when a lane needs one.  Compiled for AVX2 as a whole
 * file; called only after the run-time check of exp_cpu.c. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/exp/exp_kern.h"

#if defined(__clang__)
#include <immintrin.h>
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#endif

static inline __m256d exp_pd(__m256d xd)
{
    const __m256d inv = _mm256_set1_pd(LWQ_EXP_INVLN2N), sh = _mm256_set1_pd(LWQ_EXP_SHIFT);
    __m256d kd = _mm256_fmadd_pd(inv, xd, sh);
    const __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, sh);
    const __m256d r = _mm256_fmsub_pd(inv, xd, kd);
    const __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    const __m256i t = _mm256_add_epi64(
        _mm256_i64gather_epi64((const long long *)lwq_exp_tab, idx, 8), _mm256_slli_epi64(ki, 47));
    const __m256d p = _mm256_fmadd_pd(_mm256_set1_pd(LWQ_EXP_C0), r, _mm256_set1_pd(LWQ_EXP_C1));
    const __m256d r2 = _mm256_mul_pd(r, r);
    const __m256d q = _mm256_fmadd_pd(_mm256_set1_pd(LWQ_EXP_C2), r, _mm256_set1_pd(1.0));
    return _mm256_mul_pd(_mm256_fmadd_pd(p, r2, q), _mm256_castsi256_pd(t));
}

static inline __m256 exp_ps(__m256 x)
{
    const __m128 yl = _mm256_cvtpd_ps(exp_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
    const __m128 yh = _mm256_cvtpd_ps(exp_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
    __m256 y = _mm256_insertf128_ps(_mm256_castps128_ps256(yl), yh, 1);
    const __m256 big = _mm256_cmp_ps(x, _mm256_set1_ps(LWQ_EXP_OFLOW), _CMP_GT_OQ);
    const __m256 small = _mm256_cmp_ps(x, _mm256_set1_ps(LWQ_EXP_MAY_UFLOW), _CMP_LT_OQ);
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    if (_mm256_movemask_ps(_mm256_or_ps(_mm256_or_ps(big, small), nan))) {
        const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(LWQ_EXP_UFLOW), _CMP_LT_OQ);
        y = _mm256_blendv_ps(y, _mm256_set1_ps(0x1p-149f), small);
        y = _mm256_blendv_ps(y, _mm256_setzero_ps(), tiny);           /* -inf too */
        y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), big);      /* +inf too */
        y = _mm256_blendv_ps(y, _mm256_add_ps(x, x), nan);
    }
    return y;
}

/* form 0: exp(x - m), 1: x / (1 + exp(-x)), 2: 1 / (1 + exp(-x)) */
static inline __m256 form(int f, __m256 x, __m256 m)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    if (f == 0)
        return exp_ps(_mm256_sub_ps(x, m));
    const __m256 d = _mm256_add_ps(one, exp_ps(_mm256_xor_ps(x, _mm256_set1_ps(-0.0f))));
    return _mm256_div_ps(f == 1 ? x : one, d);
}

static inline void run(int f, const float *x, float mv, float *y, int64_t n)
{
    const __m256 m = _mm256_set1_ps(mv);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, form(f, _mm256_loadu_ps(x + i), m));
    if (i < n) {
        float buf[8] = {0};
        memcpy(buf, x + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(buf, form(f, _mm256_loadu_ps(buf), m));
        memcpy(y + i, buf, (size_t)(n - i) * sizeof(float));
    }
}

void lwq_exp_sub_avx2(const float *x, float m, float *y, int64_t n) { run(0, x, m, y, n); }
void lwq_exp_silu_avx2(const float *x, float *y, int64_t n) { run(1, x, 0.0f, y, n); }
void lwq_exp_sigmoid_avx2(const float *x, float *y, int64_t n) { run(2, x, 0.0f, y, n); }

#if defined(__clang__)
#pragma clang attribute pop
#endif
