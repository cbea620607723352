/* lwq's expf versions (kernels/cpu/exp) give the C library's bits on a deterministic sample of inputs (every exponent, 2^20 spread patterns, specials, the overflow / underflow thresholds +-1 ulp) in each array form, and their table is exactly 2^(i/32). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <gnu/libc-version.h>
#endif

#include "kernels/cpu/exp/exp.h"
#include "kernels/cpu/exp/exp_kern.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Whether this process's expf is glibc's __expf_fma (glibc >= 2.28 on a CPU with FMA and AVX2),
 * the function lwq's versions reproduce; anywhere else the comparison is not the claim. */
static const char *why_not_fma(void)
{
#if defined(__GLIBC__) && defined(__x86_64__)
    int maj = 0, min = 0;
    if (sscanf(gnu_get_libc_version(), "%d.%d", &maj, &min) != 2 || maj < 2 ||
        (maj == 2 && min < 28))
        return "glibc before 2.28 has another expf";
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("fma") || !__builtin_cpu_supports("avx2"))
        return "this CPU has no FMA + AVX2: glibc's expf is __expf_sse2, other bits";
    return NULL;
#else
    return "not glibc on x86-64";
#endif
}

/* The sample: specials and thresholds +-1 ulp, every exponent of both signs with 16 mantissas,
 * and 2^20 patterns spread over all 2^32 (stride 4096, a varying low part). */
static float *sample(int64_t *n)
{
    static const uint32_t edge[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                    0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffbfffffu,
                                    0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x807fffffu,
                                    0x42b00000u, 0xc2b00000u, /* |x| = 88: the special branch */
                                    0x42b17217u,              /* 0x1p128 overflow bound */
                                    0xc2cff1b4u,              /* 0x1p-150 underflow bound */
                                    0xc2ce8ecfu,              /* 0x1p-149 (may underflow) */
                                    0x3f800000u, 0xbf800000u, 0x41a00000u, 0xc1a00000u};
    const int64_t cap = 1 << 21;
    float *v = malloc((size_t)cap * sizeof(float));
    cr_assert_not_null(v);
    int64_t k = 0;
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        for (int d = -1; d <= 1; d++)
            v[k++] = from_bits(edge[i] + (uint32_t)d);
    for (uint32_t s = 0; s < 2; s++)
        for (uint32_t e = 0; e < 256; e++)
            for (uint32_t m = 0; m < 16; m++)
                v[k++] = from_bits(s << 31 | e << 23 | (m * 0x7ffffu + (m & 1) * 0x5a5a5u));
    for (uint32_t i = 0; i < (1u << 20); i++)
        v[k++] = from_bits(i * 4096u + ((i * 2654435761u) >> 20));
    *n = k;
    return v;
}

static void check_version(const char *name)
{
    const char *why = why_not_fma();
    if (why)
        cr_skip_test("%s", why);
    const lwq_exp_kernels *k = lwq_exp_kernels_named(name);
    if (!k)
        cr_skip_test("this CPU does not run the %s version", name);
    int64_t n;
    float *x = sample(&n);
    float *y = malloc((size_t)n * sizeof(float));
    cr_assert_not_null(y);
    for (int f = 0; f < 4; f++) {
        const float m = f == 1 ? 2.75f : 0.0f;
        if (f < 2)
            k->exp_sub(x, m, y, n);
        else if (f == 2)
            k->silu(x, y, n);
        else
            k->sigmoid(x, y, n);
        for (int64_t i = 0; i < n; i++) {
            float want = f < 2    ? expf(x[i] - m)
                         : f == 2 ? x[i] / (1.0f + expf(-x[i]))
                                  : 1.0f / (1.0f + expf(-x[i]));
            if (bits(y[i]) != bits(want))
                cr_assert_fail("%s form %d (m %g): x %a (0x%08x) gives 0x%08x, libm 0x%08x", name,
                               f, (double)m, (double)x[i], bits(x[i]), bits(y[i]), bits(want));
        }
    }
    free(y);
    free(x);
}

Test(expf, avx512_gives_libm_bits) { check_version("avx512"); }
Test(expf, avx2_gives_libm_bits) { check_version("avx2"); }
Test(expf, scalar_gives_libm_bits) { check_version("scalar"); }

/* Every length 0..40 (the vector tails), in place and not, touches exactly y[0..n). */
Test(expf, tails_in_place_and_bounds)
{
    const char *why = why_not_fma();
    if (why)
        cr_skip_test("%s", why);
    static const char *names[] = {"avx512", "avx2", "scalar"};
    float x[48], y[48], want[48];
    for (int i = 0; i < 48; i++)
        x[i] = -6.0f + 0.37f * (float)i;
    for (int v = 0; v < 3; v++) {
        const lwq_exp_kernels *k = lwq_exp_kernels_named(names[v]);
        if (!k)
            continue;
        for (int n = 0; n <= 40; n++) {
            for (int i = 0; i < 48; i++)
                y[i] = -1.0f;
            k->exp_sub(x, 0.5f, y, n);
            for (int i = 0; i < 48; i++)
                cr_assert_eq(bits(y[i]), bits(i < n ? expf(x[i] - 0.5f) : -1.0f),
                             "%s n %d i %d", names[v], n, i);
            memcpy(y, x, sizeof y);
            k->silu(y, y, n);
            for (int i = 0; i < n; i++)
                want[i] = x[i] / (1.0f + expf(-x[i]));
            for (int i = 0; i < 48; i++)
                cr_assert_eq(bits(y[i]), bits(i < n ? want[i] : x[i]), "%s silu n %d i %d",
                             names[v], n, i);
        }
    }
}

Test(expf, automatic_choice_agrees_with_libm)
{
    const lwq_exp_kernels *k = lwq_exp_kernels_get();
    cr_assert(lwq_exp_kernels_agree(k), "%s", k->name);
    if (!why_not_fma() && lwq_exp_kernels_named("avx2") && !getenv("LWQ_CPU_EXP"))
        cr_assert_str_neq(k->name, "libm", "a vector version runs here and should be chosen");
    cr_assert_eq(lwq_exp_kernels_force("no-such-isa"), -1);
    cr_assert_eq(lwq_exp_kernels_get(), k);
    cr_assert_eq(lwq_exp_kernels_force("libm"), 0);
    cr_assert_str_eq(lwq_exp_kernels_get()->name, "libm");
    cr_assert_eq(lwq_exp_kernels_force(NULL), 0);
}

/* ---- the table: exact, by integer arithmetic ------------------------------------------------- */

#define LIMBS 64 /* 2048 bits: (2^54)^32 needs 1728 */

typedef struct big {
    uint32_t w[LIMBS];
} big;

static void big_mul(const big *a, const big *b, big *out)
{
    uint64_t acc[2 * LIMBS] = {0};
    for (int i = 0; i < LIMBS; i++)
        for (int j = 0; j < LIMBS && i + j < 2 * LIMBS; j++) {
            uint64_t p = (uint64_t)a->w[i] * b->w[j];
            int k = i + j;
            while (p) { /* add p at limb k with carries */
                uint64_t s = acc[k] + (p & 0xffffffffu);
                acc[k] = s & 0xffffffffu;
                p = (p >> 32) + (s >> 32);
                k++;
            }
        }
    for (int i = LIMBS; i < 2 * LIMBS; i++)
        cr_assert_eq(acc[i], 0, "bignum overflow");
    for (int i = 0; i < LIMBS; i++)
        out->w[i] = (uint32_t)acc[i];
}

static int big_cmp(const big *a, const big *b)
{
    for (int i = LIMBS - 1; i >= 0; i--)
        if (a->w[i] != b->w[i])
            return a->w[i] < b->w[i] ? -1 : 1;
    return 0;
}

static void big_pow32(uint64_t v, big *out)
{
    big a;
    memset(&a, 0, sizeof a);
    a.w[0] = (uint32_t)v;
    a.w[1] = (uint32_t)(v >> 32);
    for (int s = 0; s < 5; s++) {
        big t;
        big_mul(&a, &a, &t);
        a = t;
    }
    *out = a;
}

/* d = m 2^-52 (m in [2^52, 2^53)) is 2^(i/32) rounded to nearest iff
 * (m - 1/2) 2^-52 < 2^(i/32) < (m + 1/2) 2^-52, i.e. (2m - 1)^32 < 2^(i + 53*32) < (2m + 1)^32. */
Test(expf, table_is_exact)
{
    for (int i = 0; i < 32; i++) {
        uint64_t b = lwq_exp_tab[i] + ((uint64_t)i << 47);
        cr_assert_eq(b >> 52, 0x3ffu, "entry %d: exponent 0x%llx", i, (unsigned long long)(b >> 52));
        uint64_t m = (b & ((1ull << 52) - 1)) | (1ull << 52);
        big lo, hi, p2;
        big_pow32(2 * m - 1, &lo);
        big_pow32(2 * m + 1, &hi);
        memset(&p2, 0, sizeof p2);
        int e = i + 53 * 32;
        p2.w[e / 32] = 1u << (e % 32);
        cr_assert(big_cmp(&lo, &p2) < 0 && big_cmp(&p2, &hi) < 0,
                  "entry %d (0x%016llx) is not 2^(%d/32) rounded to nearest", i,
                  (unsigned long long)lwq_exp_tab[i], i);
    }
}
