/* kernels/cpu/gemm/gemm_ref.c — the portable GEMM kernels of gemm_isa.h: plain C, one fmaf per lane
 * and product, for CPUs without AVX2/FMA.  Also the readable statement of the arithmetic the
 * vector kernels must match bit for bit (tests/kernels/test_gemm_isa.c compares them). */
#include <math.h>
#include <stdint.h>

#include "kernels/cpu/gemm/gemm_isa.h"

typedef struct v16 {
    float l[16];
} v16;

static inline v16 v_zero(void)
{
    v16 v;
    for (int i = 0; i < 16; i++)
        v.l[i] = 0.0f;
    return v;
}
static inline v16 v_set1(float a)
{
    v16 v;
    for (int i = 0; i < 16; i++)
        v.l[i] = a;
    return v;
}
static inline v16 v_fma(v16 a, v16 b, v16 c)
{
    for (int i = 0; i < 16; i++)
        c.l[i] = fmaf(a.l[i], b.l[i], c.l[i]);
    return c;
}
static inline v16 v_add(v16 a, v16 b)
{
    for (int i = 0; i < 16; i++)
        a.l[i] = a.l[i] + b.l[i];
    return a;
}
static inline v16 v_ld(const float *p)
{
    v16 v;
    for (int i = 0; i < 16; i++)
        v.l[i] = p[i];
    return v;
}
static inline void v_st(float *p, v16 v)
{
    for (int i = 0; i < 16; i++)
        p[i] = v.l[i];
}
static inline float v_sum(v16 a)
{
    float t[8], u[4], v[2];
    for (int i = 0; i < 8; i++)
        t[i] = a.l[i] + a.l[i + 8];
    for (int i = 0; i < 4; i++)
        u[i] = t[i] + t[i + 4];
    for (int i = 0; i < 2; i++)
        v[i] = u[i] + u[i + 2];
    return v[0] + v[1];
}

static inline void w_bf16(const char *p, v16 *e, v16 *o)
{
    const uint16_t *q = (const uint16_t *)p;
    for (int i = 0; i < 16; i++) {
        e->l[i] = lwq_bf16_to_f32(q[2 * i]);
        o->l[i] = lwq_bf16_to_f32(q[2 * i + 1]);
    }
}
static inline void w_f16(const char *p, v16 *e, v16 *o)
{
    const uint16_t *q = (const uint16_t *)p;
    for (int i = 0; i < 16; i++) {
        e->l[i] = lwq_f16_to_f32(q[2 * i]);
        o->l[i] = lwq_f16_to_f32(q[2 * i + 1]);
    }
}
static inline void w_f32(const char *p, v16 *e, v16 *o)
{
    const float *q = (const float *)p;
    for (int i = 0; i < 16; i++) {
        e->l[i] = q[2 * i];
        o->l[i] = q[2 * i + 1];
    }
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
#define W_BF16(p, e, o) w_bf16(p, &(e), &(o))
#define W_F16(p, e, o) w_f16(p, &(e), &(o))
#define W_F32(p, e, o) w_f32(p, &(e), &(o))

#define MR 1
#define MC 1
#define KLIST(X, K) X(K, 1, 1)
#define KNAME(s) lwq_gemm_##s##_ref_
#define lwq_gemm_panel_ref_ lwq_gemm_panel_ref
#define lwq_gemm_axpy_ref_ lwq_gemm_axpy_ref
#define lwq_gemm_pv_ref_ lwq_gemm_pv_ref
#define lwq_gemm_scores_ref_ lwq_gemm_scores_ref
#define SC_R 1
#define SC_C 1

#include "kernels/cpu/gemm/gemm_kern.h"
