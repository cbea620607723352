/* kernels/cpu/exp/exp_cpu.c — lwq_expf (glibc's __expf_fma in portable C), the scalar and libm
 * array forms, and the run-time choice of exp.h (like the GEMM kernels' in gemm_cpu.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/exp/exp.h"
#include "kernels/cpu/exp/exp_kern.h"

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float lwq_expf(float x)
{
    /* the special cases first, in glibc's order (|x| >= 88 or NaN) */
    if (((f32_bits(x) >> 20) & 0x7ffu) >= 0x42bu) {
        if (f32_bits(x) == 0xff800000u)
            return 0.0f;
        if (((f32_bits(x) >> 20) & 0x7ffu) >= 0x7f8u)
            return x + x;
        if (x > LWQ_EXP_OFLOW)
            return INFINITY;
        if (x < LWQ_EXP_UFLOW)
            return 0.0f;
        if (x < LWQ_EXP_MAY_UFLOW)
            return 0x1p-149f;
    }
    const double xd = (double)x;
    double kd = fma(LWQ_EXP_INVLN2N, xd, LWQ_EXP_SHIFT);
    uint64_t ki;
    memcpy(&ki, &kd, 8);
    kd = kd - LWQ_EXP_SHIFT;
    const double r = fma(LWQ_EXP_INVLN2N, xd, -kd);
    const uint64_t t = lwq_exp_tab[ki & 31] + (ki << 47);
    double s;
    memcpy(&s, &t, 8);
    const double p = fma(LWQ_EXP_C0, r, LWQ_EXP_C1), r2 = r * r, q = fma(LWQ_EXP_C2, r, 1.0);
    return (float)(fma(p, r2, q) * s);
}

/* ---- the scalar and libm array forms ------------------------------------------------------- */

static void sub_scalar(const float *x, float m, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = lwq_expf(x[i] - m);
}

static void silu_scalar(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] / (1.0f + lwq_expf(-x[i]));
}

static void sigmoid_scalar(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = 1.0f / (1.0f + lwq_expf(-x[i]));
}

static void sub_libm(const float *x, float m, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = expf(x[i] - m);
}

static void silu_libm(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] / (1.0f + expf(-x[i]));
}

static void sigmoid_libm(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = 1.0f / (1.0f + expf(-x[i]));
}

/* ---- choice -------------------------------------------------------------------------------- */

static const lwq_exp_kernels k_avx512 = {"avx512", lwq_exp_sub_avx512, lwq_exp_silu_avx512,
                                         lwq_exp_sigmoid_avx512};
static const lwq_exp_kernels k_avx2 = {"avx2", lwq_exp_sub_avx2, lwq_exp_silu_avx2,
                                       lwq_exp_sigmoid_avx2};
static const lwq_exp_kernels k_scalar = {"scalar", sub_scalar, silu_scalar, sigmoid_scalar};
static const lwq_exp_kernels k_libm = {"libm", sub_libm, silu_libm, sigmoid_libm};

const lwq_exp_kernels *lwq_exp_kernels_named(const char *name)
{
    if (!name)
        return NULL;
    __builtin_cpu_init();
    if (!strcmp(name, "avx512"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") ? &k_avx512
                                                                                  : NULL;
    if (!strcmp(name, "avx2"))
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? &k_avx2 : NULL;
    if (!strcmp(name, "scalar"))
        return &k_scalar;
    if (!strcmp(name, "libm"))
        return &k_libm;
    return NULL;
}

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The check sample: specials, the thresholds +-2 ulp, every exponent of both signs with 8
 * mantissas, and 4096 values spread over the finite range [-104, 89]. */
#define SAMPLE_MAX 8400
static int check_sample(float *v)
{
    static const uint32_t edge[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                    0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u,
                                    0x7fffffffu, 0x00000001u, 0x80000001u, 0x7f7fffffu,
                                    0xff7fffffu, 0x42b00000u, 0xc2b00000u, 0x42b17218u,
                                    0xc2cff1b5u, 0xc2ce8ed0u, 0x42b17217u, 0xc2cff1b4u,
                                    0xc2ce8ecfu};
    int n = 0;
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        for (int d = -2; d <= 2; d++)
            v[n++] = bits_f32(edge[i] + (uint32_t)d);
    uint32_t s = 0x9e3779b9u;
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t ex = 0; ex < 256; ex++)
            for (int j = 0; j < 8; j++) {
                uint32_t man = j == 0 ? 0 : j == 1 ? 0x7fffffu : lcg(&s) >> 9;
                v[n++] = bits_f32(sign << 31 | ex << 23 | man);
            }
    for (int i = 0; i < 4096; i++)
        v[n++] = -104.0f + 193.0f * (float)(lcg(&s) >> 8) * 0x1p-24f;
    return n;
}

int lwq_exp_kernels_agree(const lwq_exp_kernels *k)
{
    float *v = malloc(4 * SAMPLE_MAX * sizeof(float));
    if (!v)
        return 0;
    float *got = v + SAMPLE_MAX, *want = got + SAMPLE_MAX, *tmp = want + SAMPLE_MAX;
    const int n = check_sample(v);
    int ok = 1;
    for (int form = 0; form < 4 && ok; form++) {
        const float m = form == 1 ? 1.5f : 0.0f;
        memcpy(tmp, v, (size_t)n * sizeof(float));
        if (form < 2) {
            k->exp_sub(v, m, got, n);
            sub_libm(v, m, want, n);
        } else if (form == 2) {
            k->silu(tmp, tmp, n); /* in place, as ew_rows calls it */
            memcpy(got, tmp, (size_t)n * sizeof(float));
            silu_libm(v, want, n);
        } else {
            k->sigmoid(v, got, n);
            sigmoid_libm(v, want, n);
        }
        ok = memcmp(got, want, (size_t)n * sizeof(float)) == 0;
    }
    free(v);
    return ok;
}

static const lwq_exp_kernels *g_exp;

static const lwq_exp_kernels *exp_auto(void)
{
    const char *env = getenv("LWQ_CPU_EXP");
    const lwq_exp_kernels *k = env && *env ? lwq_exp_kernels_named(env) : NULL;
    if (k)
        return k;
    static const char *const order[] = {"avx512", "avx2"};
    for (int i = 0; i < 2; i++)
        if ((k = lwq_exp_kernels_named(order[i])) != NULL && lwq_exp_kernels_agree(k))
            return k;
    return &k_libm;
}

const lwq_exp_kernels *lwq_exp_kernels_get(void)
{
    const lwq_exp_kernels *k = __atomic_load_n(&g_exp, __ATOMIC_ACQUIRE);
    if (!k) {
        k = exp_auto();
        __atomic_store_n(&g_exp, k, __ATOMIC_RELEASE);
    }
    return k;
}

int lwq_exp_kernels_force(const char *name)
{
    const lwq_exp_kernels *k = name ? lwq_exp_kernels_named(name) : exp_auto();
    if (!k)
        return -1;
    __atomic_store_n(&g_exp, k, __ATOMIC_RELEASE);
    return 0;
}
