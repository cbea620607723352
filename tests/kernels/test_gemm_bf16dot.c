/* The CPU GEMM's BF16 dot-product paths (amx, avx512bf16): batch- and thread-independent bits, within the f32 bound.
 *
 * These paths have bits of their own (gemm_isa.h), so they are not compared with the FMA rule;
 * what must hold is what the run's determinism rests on: a token's output row has the same bits
 * whether it is computed alone or among 37 rows, with 1 or 2 threads, and every element is within
 * the f32 summation bound of the exact product sum, (k + 2) * 2^-24 * sum |x_k w_k| (the products
 * are exact; each of at most k additions rounds once).  Shapes are off every tile edge: 37 rows,
 * 70 outputs (a partial 16-output tile), k with and without a partial 32-block.  A path this CPU
 * or kernel cannot run is skipped with a message. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm/gemm_isa.h"

static lwq_backend g_be;

static void be_open(void)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_cpu_create(&g_be, 2, &e), 0, "%s", e.msg);
}

static void be_close(void)
{
    lwq_cpu_kernels_force(NULL);
    lwq_parallel_set_threads(2);
    lwq_backend_destroy(&g_be);
}

static void fill_bf16(uint16_t *p, int64_t n, uint64_t s)
{
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float v = (float)((s >> 40) & 0xFFFFFF) / (float)0x1000000 - 0.5f;
        p[i] = lwq_f32_to_bf16(v * (i % 7 == 0 ? 100.0f : 1.0f));
    }
}

/* y (rows, out) f32 = x[r0 .. r0 + rows) W^T with `threads` threads, bias optional (f32). */
static void gemm(const uint16_t *x, const uint16_t *w, const float *bias, int64_t rows, int64_t k,
                 int64_t out, int threads, float *y)
{
    lwq_parallel_set_threads(threads);
    int64_t xs[2] = {rows, k}, ws[2] = {out, k}, ys[2] = {rows, out}, bs[1] = {out};
    lwq_tensor X = lwq_tensor_view((void *)x, LWQ_BF16, 2, xs), W = lwq_tensor_view((void *)w, LWQ_BF16, 2, ws);
    lwq_tensor Y = lwq_tensor_view(y, LWQ_F32, 2, ys), B = lwq_tensor_view((void *)bias, LWQ_F32, 1, bs);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_gemm(&g_be, &X, &W, bias ? &B : NULL, &Y, &e), 0, "%s", e.msg);
}

static void check_path(const char *name, int with_bias)
{
    if (lwq_cpu_kernels_force(name) != 0) {
        cr_skip_test("kernels %s: this CPU (or its OS) cannot run them", name);
    }
    cr_assert_str_eq(lwq_cpu_kernels_get()->name, name);
    static const int64_t ks[] = {13, 64, 100, 1100};
    const int64_t n = 37, out = 70;
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        const int64_t k = ks[ki];
        uint16_t *x = malloc((size_t)(n * k) * 2), *w = malloc((size_t)(out * k) * 2);
        float *bias = malloc((size_t)out * 4), *all = malloc((size_t)(n * out) * 4);
        float *one = malloc((size_t)out * 4), *all1 = malloc((size_t)(n * out) * 4);
        fill_bf16(x, n * k, 3 + (uint64_t)k);
        fill_bf16(w, out * k, 5 + (uint64_t)k);
        for (int64_t o = 0; o < out; o++)
            bias[o] = with_bias ? 0.25f * (float)o : 0.0f;
        gemm(x, w, with_bias ? bias : NULL, n, k, out, 2, all);
        gemm(x, w, with_bias ? bias : NULL, n, k, out, 1, all1);
        cr_assert(memcmp(all, all1, (size_t)(n * out) * 4) == 0, "%s, k %lld: 1 and 2 threads differ", name,
                  (long long)k);
        for (int64_t r = 0; r < n; r++) {
            gemm(x + r * k, w, with_bias ? bias : NULL, 1, k, out, 2, one);
            for (int64_t o = 0; o < out; o++) {
                cr_assert(memcmp(&one[o], &all[r * out + o], 4) == 0,
                          "%s, k %lld: row %lld output %lld is %.9g alone, %.9g among %lld rows", name,
                          (long long)k, (long long)r, (long long)o, one[o], all[r * out + o], (long long)n);
                double exact = with_bias ? bias[o] : 0.0, mag = fabs(exact);
                for (int64_t i = 0; i < k; i++) {
                    double p = (double)lwq_bf16_to_f32(x[r * k + i]) * lwq_bf16_to_f32(w[o * k + i]);
                    exact += p;
                    mag += fabs(p);
                }
                double bound = (double)(k + 2) * ldexp(1.0, -24) * mag;
                cr_assert(fabs(one[o] - exact) <= bound, "%s, k %lld: y[%lld][%lld] = %.9g, exact %.9g, bound %.3g",
                          name, (long long)k, (long long)r, (long long)o, one[o], exact, bound);
            }
        }
        free(x), free(w), free(bias), free(all), free(one), free(all1);
    }
}

Test(gemm_bf16dot, amx_rows_alone_or_batched_same_bits, .init = be_open, .fini = be_close) { check_path("amx", 0); }
Test(gemm_bf16dot, amx_with_bias_same_bits, .init = be_open, .fini = be_close) { check_path("amx", 1); }
Test(gemm_bf16dot, avx512bf16_rows_alone_or_batched_same_bits, .init = be_open, .fini = be_close)
{
    check_path("avx512bf16", 0);
}

/* F32 activations never take a BF16 dot path: the FMA rule's bits, whatever path is forced. */
Test(gemm_bf16dot, f32_activations_keep_the_fma_bits, .init = be_open, .fini = be_close)
{
    const int64_t n = 5, k = 100, out = 20;
    float *x = malloc((size_t)(n * k) * 4), *ya = malloc((size_t)(n * out) * 4), *yb = malloc((size_t)(n * out) * 4);
    uint16_t *w = malloc((size_t)(out * k) * 2);
    for (int64_t i = 0; i < n * k; i++)
        x[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    fill_bf16(w, out * k, 11);
    int64_t xs[2] = {n, k}, ws[2] = {out, k}, ys[2] = {n, out};
    lwq_tensor X = lwq_tensor_view(x, LWQ_F32, 2, xs), W = lwq_tensor_view(w, LWQ_BF16, 2, ws);
    lwq_tensor YA = lwq_tensor_view(ya, LWQ_F32, 2, ys), YB = lwq_tensor_view(yb, LWQ_F32, 2, ys);
    lwq_error e = {0};
    cr_assert_eq(lwq_cpu_kernels_force("portable"), 0);
    cr_assert_eq(lwq_backend_gemm(&g_be, &X, &W, NULL, &YA, &e), 0, "%s", e.msg);
    int ran = 0;
    for (int p = 0; p < 2; p++) {
        if (lwq_cpu_kernels_force(p ? "avx512bf16" : "amx") != 0)
            continue;
        ran++;
        cr_assert_eq(lwq_backend_gemm(&g_be, &X, &W, NULL, &YB, &e), 0, "%s", e.msg);
        cr_assert(memcmp(ya, yb, (size_t)(n * out) * 4) == 0, "%s changed an f32 x bf16 product",
                  lwq_cpu_kernels_get()->name);
    }
    free(x), free(ya), free(yb), free(w);
    if (!ran)
        cr_skip_test("neither amx nor avx512bf16 runs here: nothing compared");
}

/* AMX packs at most 256 tokens (about 1 MiB) per slice: rows of a 300-row call on both sides of
 * the slice boundary, and in the partial last weight block (out 40), have the bits they have alone. */
Test(gemm_bf16dot, amx_rows_across_token_slices_same_bits, .init = be_open, .fini = be_close)
{
    if (lwq_cpu_kernels_force("amx") != 0) {
        cr_skip_test("kernels amx: this CPU (or its OS) cannot run them");
    }
    const int64_t n = 300, k = 2048, out = 40;
    uint16_t *x = malloc((size_t)(n * k) * 2), *w = malloc((size_t)(out * k) * 2);
    float *all = malloc((size_t)(n * out) * 4), *one = malloc((size_t)out * 4);
    fill_bf16(x, n * k, 21);
    fill_bf16(w, out * k, 22);
    gemm(x, w, NULL, n, k, out, 2, all);
    static const int64_t rows[] = {0, 15, 16, 255, 256, 257, 287, 288, 299};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        gemm(x + rows[i] * k, w, NULL, 1, k, out, 2, one);
        cr_assert(memcmp(one, all + rows[i] * out, (size_t)out * 4) == 0,
                  "row %lld of 300 differs from the row alone", (long long)rows[i]);
    }
    free(x), free(w), free(all), free(one);
}

/* Grouped products (the routed experts' one scheduled loop) give each group the bits of its own
 * lwq_backend_gemm: groups of 0, 1, 17, 64 and 300 rows (two token slices), partial output blocks,
 * k with a partial 32-block, on the amx path and on the FMA path, with 1 and 2 threads. */
static void grouped_vs_single(const char *path, int threads)
{
    if (lwq_cpu_kernels_force(path) != 0) {
        cr_skip_test("kernels %s: this CPU (or its OS) cannot run them", path);
    }
    lwq_parallel_set_threads(threads);
    enum { NG = 5 };
    static const int64_t rows[NG] = {17, 0, 64, 1, 300}, outs[NG] = {40, 48, 33, 16, 70};
    const int64_t k = 1100;
    uint16_t *x[NG], *w[NG];
    float *yg[NG], *ys[NG];
    lwq_tensor X[NG], W[NG], YG[NG], YS[NG];
    lwq_gemm_group g[NG];
    lwq_error e = {0};
    for (int i = 0; i < NG; i++) {
        int64_t xs[2] = {rows[i], k}, ws[2] = {outs[i], k}, yss[2] = {rows[i], outs[i]};
        x[i] = malloc((size_t)(rows[i] * k) * 2 + 2);
        w[i] = malloc((size_t)(outs[i] * k) * 2);
        yg[i] = malloc((size_t)(rows[i] * outs[i]) * 4 + 4);
        ys[i] = malloc((size_t)(rows[i] * outs[i]) * 4 + 4);
        fill_bf16(x[i], rows[i] * k, 31 + (uint64_t)i);
        fill_bf16(w[i], outs[i] * k, 41 + (uint64_t)i);
        X[i] = lwq_tensor_view(x[i], LWQ_BF16, 2, xs);
        W[i] = lwq_tensor_view(w[i], LWQ_BF16, 2, ws);
        YG[i] = lwq_tensor_view(yg[i], LWQ_F32, 2, yss);
        YS[i] = lwq_tensor_view(ys[i], LWQ_F32, 2, yss);
        g[i] = (lwq_gemm_group){&X[i], &W[i], NULL, &YG[i]};
        cr_assert_eq(lwq_backend_gemm(&g_be, &X[i], &W[i], NULL, &YS[i], &e), 0, "%s", e.msg);
    }
    cr_assert_eq(lwq_backend_gemm_grouped(&g_be, g, NG, &e), 0, "%s", e.msg);
    for (int i = 0; i < NG; i++) {
        cr_assert(memcmp(yg[i], ys[i], (size_t)(rows[i] * outs[i]) * 4) == 0,
                  "%s, %d threads: group %d (%lld rows) differs from its own gemm", path, threads, i,
                  (long long)rows[i]);
        free(x[i]), free(w[i]), free(yg[i]), free(ys[i]);
    }
}

Test(gemm_bf16dot, amx_grouped_same_bits_as_single, .init = be_open, .fini = be_close)
{
    grouped_vs_single("amx", 2);
    grouped_vs_single("amx", 1);
}
Test(gemm_bf16dot, fma_grouped_same_bits_as_single, .init = be_open, .fini = be_close)
{
    grouped_vs_single("avx512", 2);
}

/* The FMA paths' one scheduled loop (no bias, k a multiple of 32): products that share x (an
 * expert's gate and up: consecutive groups on one x, packed once per row slice), others on their own
 * x, groups of 0, 1, 70 (two row slices) and 130 rows, partial output blocks; each group gets the
 * bits of its own lwq_backend_gemm on every FMA path, with 1 and 2 threads. */
static void families_vs_single(const char *path, int threads)
{
    if (lwq_cpu_kernels_force(path) != 0) {
        cr_log_info("kernels %s: this CPU cannot run them, skipped", path);
        return;
    }
    lwq_parallel_set_threads(threads);
    enum { NG = 7 };
    /* groups 0-1 share x 0, 2 is alone on x 1, 3-5 share x 2, 6 is alone on x 3 (0 rows) */
    static const int xof[NG] = {0, 0, 1, 2, 2, 2, 3};
    static const int64_t xrows[4] = {70, 1, 130, 0}, outs[NG] = {100, 100, 48, 33, 16, 96, 20};
    const int64_t k = 320;
    uint16_t *x[4], *w[NG];
    float *yg[NG], *ys[NG];
    lwq_tensor X[4], W[NG], YG[NG], YS[NG];
    lwq_gemm_group g[NG];
    lwq_error e = {0};
    for (int i = 0; i < 4; i++) {
        int64_t xs[2] = {xrows[i], k};
        x[i] = malloc((size_t)(xrows[i] * k) * 2 + 2);
        fill_bf16(x[i], xrows[i] * k, 61 + (uint64_t)i);
        X[i] = lwq_tensor_view(x[i], LWQ_BF16, 2, xs);
    }
    for (int i = 0; i < NG; i++) {
        const int64_t n = xrows[xof[i]];
        int64_t ws[2] = {outs[i], k}, yss[2] = {n, outs[i]};
        w[i] = malloc((size_t)(outs[i] * k) * 2);
        yg[i] = malloc((size_t)(n * outs[i]) * 4 + 4);
        ys[i] = malloc((size_t)(n * outs[i]) * 4 + 4);
        fill_bf16(w[i], outs[i] * k, 71 + (uint64_t)i);
        W[i] = lwq_tensor_view(w[i], LWQ_BF16, 2, ws);
        YG[i] = lwq_tensor_view(yg[i], i % 2 ? LWQ_BF16 : LWQ_F32, 2, yss);
        YS[i] = lwq_tensor_view(ys[i], i % 2 ? LWQ_BF16 : LWQ_F32, 2, yss);
        g[i] = (lwq_gemm_group){&X[xof[i]], &W[i], NULL, &YG[i]};
        cr_assert_eq(lwq_backend_gemm(&g_be, &X[xof[i]], &W[i], NULL, &YS[i], &e), 0, "%s", e.msg);
    }
    cr_assert_eq(lwq_backend_gemm_grouped(&g_be, g, NG, &e), 0, "%s", e.msg);
    for (int i = 0; i < NG; i++) {
        const int64_t n = xrows[xof[i]];
        cr_assert(memcmp(yg[i], ys[i], (size_t)(n * outs[i]) * lwq_dtype_size(YS[i].dtype)) == 0,
                  "%s, %d threads: group %d (%lld rows) differs from its own gemm", path, threads, i,
                  (long long)n);
        free(w[i]), free(yg[i]), free(ys[i]);
    }
    for (int i = 0; i < 4; i++)
        free(x[i]);
}

Test(gemm_bf16dot, fma_grouped_families_same_bits_as_single, .init = be_open, .fini = be_close)
{
    static const char *const paths[] = {"avx512", "avx2", "portable", "avx512bf16"};
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        families_vs_single(paths[p], 2);
        families_vs_single(paths[p], 1);
    }
}

/* A bad group is refused naming its index, before any product runs. */
Test(gemm_bf16dot, grouped_bad_group_is_named, .init = be_open, .fini = be_close)
{
    uint16_t x[4 * 8] = {0}, w[3 * 8] = {0}, w2[3 * 7] = {0};
    float y[4 * 3], y2[4 * 3];
    int64_t xs[2] = {4, 8}, ws[2] = {3, 8}, ws2[2] = {3, 7}, ys[2] = {4, 3};
    lwq_tensor X = lwq_tensor_view(x, LWQ_BF16, 2, xs), W = lwq_tensor_view(w, LWQ_BF16, 2, ws);
    lwq_tensor W2 = lwq_tensor_view(w2, LWQ_BF16, 2, ws2), Y = lwq_tensor_view(y, LWQ_F32, 2, ys);
    lwq_tensor Y2 = lwq_tensor_view(y2, LWQ_F32, 2, ys);
    lwq_gemm_group g[2] = {{&X, &W, NULL, &Y}, {&X, &W2, NULL, &Y2}};
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_gemm_grouped(&g_be, g, 2, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "group 1") != NULL, "message: %s", e.msg);
}
