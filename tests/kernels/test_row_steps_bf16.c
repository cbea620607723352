/* BF16 rmsnorm, RoPE and MoE combine on the CPU give every element the bits of the scalar rounding expressions they are defined by (the vector row steps of kernels/cpu/convert_cpu.c), rounding ties, Inf and NaN included. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/data/dtype.h"
#include "kernels/backend.h"

static lwq_backend be;

static void open_be(void)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_cpu_create(&be, 2, &e), 0, "%s", e.msg);
}

static void close_be(void) { lwq_backend_destroy(&be); }

TestSuite(row_steps_bf16, .init = open_be, .fini = close_be);

static uint32_t rng = 12345u;

static uint32_t next(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

/* A BF16 value: mostly normal around 1, some with 8 random mantissa bits at every exponent (so
 * products land on rounding ties), and, where `special`, Inf, NaN, zero and huge values. */
static uint16_t val(int special)
{
    uint32_t r = next();
    if (special && r % 53 == 0)
        return (uint16_t)(r & 1 ? 0x7f80 : 0xff80); /* +-Inf */
    if (special && r % 61 == 0)
        return 0x7fc1; /* NaN */
    if (special && r % 67 == 0)
        return (uint16_t)(r & 1 ? 0x0000 : 0x8000);
    if (r % 5 == 0)
        return (uint16_t)((r >> 3) & 0xffff & ~0x7f80u) | (uint16_t)((0x30 + (r >> 20) % 0x60) << 7);
    float f = ((float)(r % 20001) - 10000.0f) / 2500.0f;
    return lwq_f32_to_bf16(f);
}

static lwq_tensor bf16(int64_t r, int64_t c, int special)
{
    int64_t s[2] = {r, c};
    lwq_tensor t;
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_BF16, c ? 2 : 1, s, &t, &e), 0, "%s", e.msg);
    uint16_t *p = (uint16_t *)t.data;
    for (int64_t i = 0; i < r * (c ? c : 1); i++)
        p[i] = val(special);
    return t;
}

static float f(const lwq_tensor *t, int64_t i) { return lwq_bf16_to_f32(((const uint16_t *)t->data)[i]); }

static void same_bits(float got, float want, const char *what, int64_t i)
{
    uint32_t a, b;
    memcpy(&a, &got, 4);
    memcpy(&b, &want, 4);
    cr_expect(a == b || (got != got && want != want), "%s element %lld: %a, expected %a", what, (long long)i,
              (double)got, (double)want);
}

Test(row_steps_bf16, rmsnorm_is_the_rounded_expression)
{
    const int64_t n = 37, d = 1000; /* not a multiple of the vector width */
    lwq_tensor x = bf16(n, d, 1), w = bf16(d, 0, 0), y = bf16(n, d, 0);
    for (int64_t i = 0; i < 3 * d; i++) /* three rows without specials: finite results to check */
        ((uint16_t *)x.data)[i] = val(0);
    lwq_error e = {0};
    const float eps = 1e-6f;
    cr_assert_eq(lwq_backend_rmsnorm(&be, &x, &w, eps, &y, &e), 0, "%s", e.msg);
    for (int64_t r = 0; r < n; r++) {
        double ss = 0.0;
        for (int64_t i = 0; i < d; i++)
            ss += (double)f(&x, r * d + i) * f(&x, r * d + i);
        float rs = 1.0f / sqrtf((float)(ss / (double)d) + eps);
        for (int64_t i = 0; i < d; i++)
            same_bits(f(&y, r * d + i), lwq_round_to(f(&w, i) * lwq_round_to(f(&x, r * d + i) * rs, LWQ_BF16), LWQ_BF16),
                      "rmsnorm", r * d + i);
    }
    lwq_backend_tensor_free(&be, &x);
    lwq_backend_tensor_free(&be, &w);
    lwq_backend_tensor_free(&be, &y);
}

Test(row_steps_bf16, rope_is_the_rounded_expression)
{
    const int64_t n = 29, hd = 80, heads = 5, cols = heads * hd, half = hd / 2;
    lwq_tensor x = bf16(n, cols, 1), x0 = bf16(n, cols, 0);
    memcpy(x0.data, x.data, (size_t)(n * cols) * 2);
    int64_t s1[1] = {n}, s2[1] = {half};
    lwq_tensor pos, inv;
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_I32, 1, s1, &pos, &e), 0);
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_F32, 1, s2, &inv, &e), 0);
    for (int i = 0; i < n; i++)
        ((int32_t *)pos.data)[i] = (i * 37) % 300;
    for (int i = 0; i < half; i++)
        ((float *)inv.data)[i] = powf(10000.0f, -2.0f * i / hd);
    const float scaling = 1.25f;
    cr_assert_eq(lwq_backend_rope(&be, &x, hd, &pos, &inv, scaling, &e), 0, "%s", e.msg);
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < half; i++) {
            float ang = (float)((int32_t *)pos.data)[r] * ((float *)inv.data)[i];
            float c = lwq_round_to(cosf(ang) * scaling, LWQ_BF16), s = lwq_round_to(sinf(ang) * scaling, LWQ_BF16);
            for (int64_t h = 0; h < heads; h++) {
                int64_t o = r * cols + h * hd + i;
                float x1 = f(&x0, o), x2 = f(&x0, o + half);
                same_bits(f(&x, o),
                          lwq_round_to(lwq_round_to(x1 * c, LWQ_BF16) + lwq_round_to(-x2 * s, LWQ_BF16), LWQ_BF16),
                          "rope first half", o);
                same_bits(f(&x, o + half),
                          lwq_round_to(lwq_round_to(x2 * c, LWQ_BF16) + lwq_round_to(x1 * s, LWQ_BF16), LWQ_BF16),
                          "rope second half", o + half);
            }
        }
    lwq_backend_tensor_free(&be, &x);
    lwq_backend_tensor_free(&be, &x0);
    lwq_backend_tensor_free(&be, &pos);
    lwq_backend_tensor_free(&be, &inv);
}

Test(row_steps_bf16, moe_combine_is_the_rounded_expression)
{
    const int64_t tokens = 23, k = 4, d = 700, rows = tokens * k;
    lwq_tensor y = bf16(rows, d, 1), out = bf16(tokens, d, 0);
    int64_t sk[2] = {tokens, k};
    lwq_tensor slots, wts;
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_I32, 2, sk, &slots, &e), 0);
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_F32, 2, sk, &wts, &e), 0);
    int32_t *sr = (int32_t *)slots.data;
    float *w = (float *)wts.data;
    for (int64_t i = 0; i < rows; i++) {
        sr[i] = i % 7 == 3 ? -1 : (int32_t)((i * 31) % rows); /* a few empty slots */
        w[i] = (float)(next() % 1000) / 997.0f;
    }
    cr_assert_eq(lwq_backend_moe_combine(&be, &y, &slots, &wts, &out, &e), 0, "%s", e.msg);
    for (int64_t t = 0; t < tokens; t++)
        for (int64_t i = 0; i < d; i++) {
            float acc = 0.0f;
            for (int64_t s = 0; s < k; s++)
                if (sr[t * k + s] >= 0)
                    acc = lwq_round_to(acc + lwq_round_to(w[t * k + s] * f(&y, sr[t * k + s] * d + i), LWQ_BF16),
                                       LWQ_BF16);
            same_bits(f(&out, t * d + i), acc, "combine", t * d + i);
        }
    lwq_backend_tensor_free(&be, &y);
    lwq_backend_tensor_free(&be, &out);
    lwq_backend_tensor_free(&be, &slots);
    lwq_backend_tensor_free(&be, &wts);
}
