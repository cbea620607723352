/* kernels/cpu/exp/exp.h — expf with the C library's bits, vectorized, and the array forms the
 * CPU forward calls (softmax rows, SiLU, sigmoid).
 *
 * The forward's bytes were defined with libm's expf per element.  On x86-64 with FMA and AVX2,
 * glibc (2.28 and later, Debian 12's 2.36 here) resolves expf to __expf_fma: the algorithm of
 * sysdeps/ieee754/flt-32/e_expf.c evaluated in double with fused multiply-adds, which this module
 * reproduces bit for bit (exp_kern.h has the arithmetic and the data; exp_scalar.c the one-value
 * form):
 *   z  = x * 32/ln2 (double);  k = z rounded to an integer (the 1.5 * 2^52 shift);  r = z - k
 *   s  = 2^(k/32) = asdouble(T[k % 32] + (k << 47))     (T[i]: the bits of 2^(i/32) - (i << 47))
 *   y  = s * (C0 r^3 + C1 r^2 + C2 r + 1), rounded once to float
 *   |x| >= 88 and NaN: exp(-inf) = 0; NaN, +inf: x + x; x > 0x1.62e42ep6: +inf;
 *   x < -0x1.9fe368p6: +0; x < -0x1.9d1d9ep6: 0x1p-149 (glibc's __math_may_uflowf value)
 * (errno and the FP exception flags are not reproduced: nothing in lwq reads them.)
 *
 * Versions: "avx512" (16 floats per step), "avx2" (8), "scalar" (lwq_expf per element, C with
 * fma(): the reference the others are checked against) and "libm" (the C library's expf per
 * element).  The automatic choice is the fastest the CPU runs whose results equal the C
 * library's expf on a fixed sample of inputs checked once per process (every exponent,
 * specials, the overflow / underflow thresholds): on another C library, or on a CPU where glibc
 * takes its non-FMA path (__expf_sse2, other bits), that check fails and the forward keeps libm's
 * expf, so its bytes never change with this module.  LWQ_CPU_EXP=avx512|avx2|scalar|libm, or
 * lwq_exp_kernels_force, overrides it (tests, comparisons).  perf/bench_expf checks each version
 * against libm over all 2^32 inputs (perf/RESULTS.md).
 *
 * The array forms compute each element exactly as the scalar expression beside it rounds it
 * (float operations, IEEE, no contraction); y may be x.  Thread-safe; no allocation. */
#ifndef LWQ_KERNELS_CPU_EXP_EXP_H
#define LWQ_KERNELS_CPU_EXP_EXP_H

#include <stdint.h>

typedef struct lwq_exp_kernels {
    const char *name; /* "avx512", "avx2", "scalar", "libm" */
    /* y[i] = expf(x[i] - m) */
    void (*exp_sub)(const float *x, float m, float *y, int64_t n);
    /* y[i] = x[i] / (1.0f + expf(-x[i]))        (SiLU) */
    void (*silu)(const float *x, float *y, int64_t n);
    /* y[i] = 1.0f / (1.0f + expf(-x[i]))        (sigmoid) */
    void (*sigmoid)(const float *x, float *y, int64_t n);
} lwq_exp_kernels;

/* glibc's __expf_fma, one value (portable C; fma() is exact on every CPU, slow without FMA). */
float lwq_expf(float x);

/* The versions in use (the automatic choice above unless forced).  Never NULL. */
const lwq_exp_kernels *lwq_exp_kernels_get(void);
/* The version `name` (NULL: NULL), or NULL when this CPU cannot run it or the name is unknown;
 * no check against libm (the caller's to make). */
const lwq_exp_kernels *lwq_exp_kernels_named(const char *name);
/* Use `name` from now on (NULL: back to the automatic choice).  -1 when this CPU cannot run it or
 * the name is unknown; the choice is then unchanged. */
int lwq_exp_kernels_force(const char *name);
/* 1 when k's three array forms give libm's bits on the module's check sample, else 0. */
int lwq_exp_kernels_agree(const lwq_exp_kernels *k);

#endif
