/* kernels/cpu/exp/exp_kern.h — the data of glibc's expf (e_exp2f_data.c, EXP2F_TABLE_BITS 5) and
 * the per-ISA array kernels of exp.h (internal).
 *
 * Each kernel evaluates, per element and in this order (the instruction sequence of glibc 2.36's
 * __expf_fma, read from its disassembly: GCC fused z = InvLn2N x into both of its uses):
 *   xd = (double)x
 *   kd = fma(InvLn2N, xd, Shift);  ki = bits(kd);  kd = kd - Shift
 *   r  = fma(InvLn2N, xd, -kd)
 *   t  = T[ki & 31] + (ki << 47);  s = asdouble(t)
 *   p  = fma(C0, r, C1);  r2 = r * r;  q = fma(C2, r, 1.0);  y = fma(p, r2, q);  y = y * s
 *   return (float)y                                                   (then the special cases)
 * with round-to-nearest doubles throughout (the default MXCSR; lwq never changes it). */
#ifndef LWQ_KERNELS_CPU_EXP_EXP_KERN_H
#define LWQ_KERNELS_CPU_EXP_EXP_KERN_H

#include <stdint.h>

#define LWQ_EXP_INVLN2N 0x1.71547652b82fep+5    /* 32 / ln 2 */
#define LWQ_EXP_SHIFT 0x1.8p+52                 /* rounds z to an integer in the low bits */
#define LWQ_EXP_C0 0x1.c6af84b912394p-20        /* the polynomial, scaled by 1/32^3, 1/32^2, 1/32 */
#define LWQ_EXP_C1 0x1.ebfce50fac4f3p-13
#define LWQ_EXP_C2 0x1.62e42ff0c52d6p-6
#define LWQ_EXP_OFLOW 0x1.62e42ep6f              /* x above: +inf (log 2^128) */
#define LWQ_EXP_UFLOW -0x1.9fe368p6f             /* x below: +0 (log 2^-150) */
#define LWQ_EXP_MAY_UFLOW -0x1.9d1d9ep6f         /* x below (and not above): 0x1p-149 (log 2^-149) */

/* T[i] = bits of 2^(i/32) (correctly rounded double) - (i << 47); test_expf checks every entry
 * against an exact integer derivation. */
extern const uint64_t lwq_exp_tab[32];

void lwq_exp_sub_avx512(const float *x, float m, float *y, int64_t n);
void lwq_exp_silu_avx512(const float *x, float *y, int64_t n);
void lwq_exp_sigmoid_avx512(const float *x, float *y, int64_t n);
void lwq_exp_sub_avx2(const float *x, float m, float *y, int64_t n);
void lwq_exp_silu_avx2(const float *x, float *y, int64_t n);
void lwq_exp_sigmoid_avx2(const float *x, float *y, int64_t n);

#endif
