/* CUDA quantizers (kernels/cuda/quant_cuda.h) against the CPU reference (kernels/quant.h) on the
 * same random inputs: the contract is byte equality, so every comparison is exact (memcmp).
 * Skipped with a message when lwq is built without CUDA or no device is present. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"

#ifdef LWQ_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/quant_cuda.h"
#endif

#include "tests/helpers/check/quant_naive.h"

#ifndef LWQ_HAVE_CUDA

Test(quant_cuda, cpu_vs_cuda_bytes)
{
    cr_skip("lwq built without CUDA (LWQ_HAVE_CUDA undefined): CPU-vs-CUDA quantizer tests skipped");
}

#else

static void setup(void)
{
    lwq_error e = {0};
    if (lwq_backend_cuda_probe(&e) <= 0)
        cr_skip("CPU-vs-CUDA quantizer tests skipped: %s", e.msg);
}

TestSuite(quant_cuda, .init = setup);

static void *up(const void *h, size_t bytes)
{
    void *d = NULL;
    cr_assert_eq(cudaMalloc(&d, bytes + 64), cudaSuccess);
    if (h)
        cr_assert_eq(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    else
        cr_assert_eq(cudaMemset(d, 0, bytes), cudaSuccess);
    return d;
}

static void down(void *h, const void *d, size_t bytes)
{
    cr_assert_eq(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

/* Random weights of dtype dt; *f gets the float values. */
static void *rand_w(lwq_dtype dt, int64_t n, float scale, uint64_t seed)
{
    void *w = malloc((size_t)n * 4 + 64);
    for (int64_t i = 0; i < n; i++) {
        float v = nv_rand_val(&seed, scale);
        if (dt == LWQ_BF16)
            ((uint16_t *)w)[i] = lwq_f32_to_bf16(v);
        else if (dt == LWQ_F16)
            ((uint16_t *)w)[i] = lwq_f32_to_f16(v);
        else
            ((float *)w)[i] = v;
    }
    return w;
}

static const lwq_dtype dts[3] = {LWQ_BF16, LWQ_F16, LWQ_F32};

Test(quant_cuda, amax_and_nvfp4_max_equal_cpu)
{
    const int64_t shapes[3][2] = {{1, 16}, {33, 80}, {256, 1024}};
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 3; s++)
            for (int mis = 0; mis < 2; mis++) { /* mis: a 2-element offset defeats the vector loads */
                int64_t r = shapes[s][0], c = shapes[s][1], n = r * c, es = (int64_t)lwq_dtype_size(dts[d]);
                void *w = rand_w(dts[d], n, d == 1 ? 3.0f : 0.05f, 1000 + (uint64_t)(d * 10 + s));
                uint8_t *dw = up(NULL, (size_t)(n * es + 16));
                cr_assert_eq(cudaMemcpy(dw + mis * 2 * es, w, (size_t)(n * es), cudaMemcpyHostToDevice), cudaSuccess);
                float ac, ag, wc, wg;
                lwq_error e = {0};
                cr_assert_eq(lwq_quant_amax(w, dts[d], n, "w", &ac, &e), 0, "%s", e.msg);
                cr_assert_eq(lwq_quant_cuda_amax(dw + mis * 2 * es, dts[d], n, "w", &ag, NULL, &e), 0, "%s", e.msg);
                cr_assert_eq(ac, ag);
                uint8_t *pc = malloc((size_t)n / 2), *sc = malloc((size_t)n / 16), *pg = malloc((size_t)n / 2),
                        *sg = malloc((size_t)n / 16);
                uint8_t *dp = up(NULL, (size_t)n / 2 + 8), *ds = up(NULL, (size_t)n / 16);
                cr_assert_eq(lwq_quant_nvfp4_max(w, dts[d], r, c, ac, "w", pc, sc, &wc, &e), 0, "%s", e.msg);
                cr_assert_eq(lwq_quant_cuda_nvfp4_max(dw + mis * 2 * es, dts[d], r, c, ac, "w", dp + mis, ds, &wg, NULL,
                                                      &e),
                             0, "%s", e.msg);
                down(pg, dp + mis, (size_t)n / 2);
                down(sg, ds, (size_t)n / 16);
                cr_assert_eq(wc, wg);
                cr_assert_eq(memcmp(pc, pg, (size_t)n / 2), 0, "%s [%ld,%ld] packed", lwq_dtype_name(dts[d]), (long)r,
                             (long)c);
                cr_assert_eq(memcmp(sc, sg, (size_t)n / 16), 0, "%s scales", lwq_dtype_name(dts[d]));
                free(w), free(pc), free(sc), free(pg), free(sg);
                cudaFree(dw), cudaFree(dp), cudaFree(ds);
            }
}

Test(quant_cuda, nvfp4_static_equal_cpu)
{
    int64_t r = 40, c = 256, n = r * c, nb = n / 16;
    void *w = rand_w(LWQ_BF16, n, 1.0f, 7);
    float *ba = malloc((size_t)nb * 4), ws_c, ws_g, g = 0;
    cr_assert_eq(lwq_quant_amax(w, LWQ_BF16, n, "w", &g, NULL), 0);
    uint64_t s = 5;
    for (int64_t b = 0; b < nb; b++)
        ba[b] = b % 9 == 0 ? 0.0f : fabsf(nv_rand_val(&s, g));
    uint8_t pc[5120], sc[640], pg[5120], sg[640];
    void *dw = up(w, (size_t)n * 2), *dba = up(ba, (size_t)nb * 4);
    uint8_t *dp = up(NULL, sizeof pg), *ds = up(NULL, sizeof sg);
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_nvfp4_static(w, LWQ_BF16, r, c, ba, g, "w", pc, sc, &ws_c, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_quant_cuda_nvfp4_static(dw, LWQ_BF16, r, c, dba, g, "w", dp, ds, &ws_g, NULL, &e), 0, "%s", e.msg);
    down(pg, dp, sizeof pg);
    down(sg, ds, sizeof sg);
    cr_assert_eq(memcmp(pc, pg, sizeof pc), 0);
    cr_assert_eq(memcmp(sc, sg, sizeof sc), 0);
    free(w), free(ba);
    cudaFree(dw), cudaFree(dba), cudaFree(dp), cudaFree(ds);
}

static void sweep_case(lwq_dtype dt, int64_t r, int64_t c, int with_h, uint64_t seed)
{
    int64_t n = r * c, nb = n / 16, es = (int64_t)lwq_dtype_size(dt);
    void *w = rand_w(dt, n, 0.3f, seed);
    float g, *h = NULL, *dh = NULL;
    lwq_error e = {0};
    cr_assert_eq(lwq_quant_amax(w, dt, n, "w", &g, &e), 0);
    if (with_h) {
        /* Hessian from random activations, through both backends' accumulate + finalize */
        int64_t tok = 50;
        void *x = rand_w(dt, tok * c, 2.0f, seed + 1);
        double *hs = calloc((size_t)c * 16, sizeof(double)), *hs_g = malloc((size_t)c * 16 * sizeof(double));
        h = malloc((size_t)c * 16 * 4);
        float *h_g = malloc((size_t)c * 16 * 4);
        void *dx = up(x, (size_t)(tok * c * es));
        double *dhs = up(NULL, (size_t)c * 16 * sizeof(double));
        dh = up(NULL, (size_t)c * 16 * 4);
        cr_assert_eq(lwq_quant_hessian_accumulate(x, dt, tok, c, hs, "x", &e), 0, "%s", e.msg);
        cr_assert_eq(lwq_quant_hessian_finalize(hs, tok, c, h, "x", &e), 0, "%s", e.msg);
        cr_assert_eq(lwq_quant_cuda_hessian_accumulate(dx, dt, tok, c, dhs, "x", NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(lwq_quant_cuda_hessian_finalize(dhs, tok, c, dh, "x", NULL, &e), 0, "%s", e.msg);
        down(hs_g, dhs, (size_t)c * 16 * sizeof(double));
        down(h_g, dh, (size_t)c * 16 * 4);
        cr_assert_eq(memcmp(hs, hs_g, (size_t)c * 16 * sizeof(double)), 0, "Hessian sums differ");
        cr_assert_eq(memcmp(h, h_g, (size_t)c * 16 * 4), 0, "Hessians differ");
        free(x), free(hs), free(hs_g), free(h_g);
        cudaFree(dx), cudaFree(dhs);
    }
    uint8_t *sc = malloc((size_t)nb), *sg = malloc((size_t)nb);
    float *ac = malloc((size_t)nb * 4), *ag = malloc((size_t)nb * 4);
    void *dw = up(w, (size_t)(n * es));
    uint8_t *ds = up(NULL, (size_t)nb);
    float *da = up(NULL, (size_t)nb * 4);
    cr_assert_eq(lwq_quant_nvfp4_sweep(w, dt, r, c, g, h, "w", ac, sc, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_quant_cuda_nvfp4_sweep(dw, dt, r, c, g, dh, "w", da, ds, NULL, &e), 0, "%s", e.msg);
    down(sg, ds, (size_t)nb);
    down(ag, da, (size_t)nb * 4);
    cr_assert_eq(memcmp(sc, sg, (size_t)nb), 0, "%s hessian=%d: sweep bytes differ", lwq_dtype_name(dt), with_h);
    cr_assert_eq(memcmp(ac, ag, (size_t)nb * 4), 0, "sweep amax differ");
    free(w), free(h), free(sc), free(sg), free(ac), free(ag);
    cudaFree(dw), cudaFree(ds), cudaFree(da), cudaFree(dh);
}

Test(quant_cuda, sweep_equal_cpu)
{
    for (int d = 0; d < 3; d++)
        sweep_case(dts[d], 200, 128, 0, 300 + (uint64_t)d);
}

Test(quant_cuda, local_hessian_and_its_statistics_equal_cpu)
{
    for (int d = 0; d < 3; d++)
        sweep_case(dts[d], 70, 96, 1, 400 + (uint64_t)d);
}

Test(quant_cuda, block_mse_equal_cpu)
{
    for (int d = 0; d < 3; d++) {
        int64_t r = 50, c = 320, n = r * c, nb = n / 16, es = (int64_t)lwq_dtype_size(dts[d]);
        void *w = rand_w(dts[d], n, 0.2f, 700 + (uint64_t)d);
        float g, *ac = malloc((size_t)nb * 4), *ag = malloc((size_t)nb * 4);
        lwq_error e = {0};
        cr_assert_eq(lwq_quant_amax(w, dts[d], n, "w", &g, &e), 0);
        void *dw = up(w, (size_t)(n * es));
        float *da = up(NULL, (size_t)nb * 4);
        cr_assert_eq(lwq_quant_nvfp4_mse(w, dts[d], r, c, g, "w", ac, &e), 0, "%s", e.msg);
        cr_assert_eq(lwq_quant_cuda_nvfp4_mse(dw, dts[d], r, c, g, "w", da, NULL, &e), 0, "%s", e.msg);
        down(ag, da, (size_t)nb * 4);
        cr_assert_eq(memcmp(ac, ag, (size_t)nb * 4), 0, "%s", lwq_dtype_name(dts[d]));
        free(w), free(ac), free(ag);
        cudaFree(dw), cudaFree(da);
    }
}

Test(quant_cuda, fp8_mse_equal_cpu)
{
    const int64_t shapes[3][2] = {{3, 37}, {64, 256}, {9, 1000}};
    for (int d = 0; d < 3; d++)
        for (int sh = 0; sh < 3; sh++) {
            int64_t r = shapes[sh][0], c = shapes[sh][1], n = r * c, es = (int64_t)lwq_dtype_size(dts[d]);
            void *w = rand_w(dts[d], n, 0.01f, 800 + (uint64_t)(d * 3 + sh));
            void *dw = up(w, (size_t)(n * es));
            float ac, ag;
            int kc, kg;
            lwq_error e = {0};
            cr_assert_eq(lwq_quant_fp8_mse(w, dts[d], r, c, "w", &ac, &kc, &e), 0, "%s", e.msg);
            cr_assert_eq(lwq_quant_cuda_fp8_mse(dw, dts[d], r, c, "w", &ag, &kg, NULL, &e), 0, "%s", e.msg);
            cr_assert_eq(kc, kg, "%s [%ld,%ld]", lwq_dtype_name(dts[d]), (long)r, (long)c);
            cr_assert_eq(ac, ag);
            free(w);
            cudaFree(dw);
        }
}

Test(quant_cuda, fp8_and_dequant_equal_cpu)
{
    const int64_t shapes[3][2] = {{1, 5}, {13, 77}, {128, 512}};
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 3; s++) {
            int64_t r = shapes[s][0], c = shapes[s][1], n = r * c, es = (int64_t)lwq_dtype_size(dts[d]);
            void *w = rand_w(dts[d], n, 0.5f, 500 + (uint64_t)(d * 3 + s));
            float a, wc, wg;
            cr_assert_eq(lwq_quant_amax(w, dts[d], n, "w", &a, NULL), 0);
            uint8_t *qc = malloc((size_t)n), *qg = malloc((size_t)n);
            void *dw = up(w, (size_t)(n * es));
            uint8_t *dq = up(NULL, (size_t)n);
            lwq_error e = {0};
            cr_assert_eq(lwq_quant_fp8(w, dts[d], r, c, a, "w", qc, &wc, &e), 0, "%s", e.msg);
            cr_assert_eq(lwq_quant_cuda_fp8(dw, dts[d], r, c, a, "w", dq, &wg, NULL, &e), 0, "%s", e.msg);
            down(qg, dq, (size_t)n);
            cr_assert_eq(wc, wg);
            cr_assert_eq(memcmp(qc, qg, (size_t)n), 0, "%s [%ld,%ld]", lwq_dtype_name(dts[d]), (long)r, (long)c);
            /* FP8 dequant to the weight's dtype */
            void *oc = malloc((size_t)(n * es)), *og = malloc((size_t)(n * es));
            void *dout = up(NULL, (size_t)(n * es));
            cr_assert_eq(lwq_quant_fp8_dequant(qc, wc, n, dts[d], oc, &e), 0, "%s", e.msg);
            cr_assert_eq(lwq_quant_cuda_fp8_dequant(dq, wg, n, dts[d], dout, NULL, &e), 0, "%s", e.msg);
            down(og, dout, (size_t)(n * es));
            cr_assert_eq(memcmp(oc, og, (size_t)(n * es)), 0);
            free(w), free(qc), free(qg), free(oc), free(og);
            cudaFree(dw), cudaFree(dq), cudaFree(dout);
        }
}

Test(quant_cuda, nvfp4_dequant_equal_cpu)
{
    int64_t r = 64, c = 256, n = r * c;
    void *w = rand_w(LWQ_BF16, n, 0.1f, 600);
    float a, ws2;
    uint8_t *p = malloc((size_t)n / 2), *s = malloc((size_t)n / 16);
    cr_assert_eq(lwq_quant_amax(w, LWQ_BF16, n, "w", &a, NULL), 0);
    cr_assert_eq(lwq_quant_nvfp4_max(w, LWQ_BF16, r, c, a, "w", p, s, &ws2, NULL), 0);
    void *dp = up(p, (size_t)n / 2), *ds = up(s, (size_t)n / 16);
    for (int d = 0; d < 3; d++) {
        size_t bytes = (size_t)n * lwq_dtype_size(dts[d]);
        void *oc = malloc(bytes), *og = malloc(bytes), *dout = up(NULL, bytes);
        lwq_error e = {0};
        cr_assert_eq(lwq_quant_nvfp4_dequant(p, s, ws2, r, c, dts[d], oc, &e), 0, "%s", e.msg);
        cr_assert_eq(lwq_quant_cuda_nvfp4_dequant(dp, ds, ws2, r, c, dts[d], dout, NULL, &e), 0, "%s", e.msg);
        down(og, dout, bytes);
        cr_assert_eq(memcmp(oc, og, bytes), 0, "%s", lwq_dtype_name(dts[d]));
        free(oc), free(og);
        cudaFree(dout);
    }
    free(w), free(p), free(s);
    cudaFree(dp), cudaFree(ds);
}

Test(quant_cuda, errors_match_cpu_messages)
{
    float w[4 * 32];
    for (int i = 0; i < 128; i++)
        w[i] = (float)(i % 5) - 2.0f;
    w[2 * 32 + 7] = INFINITY;
    void *dw = up(w, sizeof w);
    uint8_t *dp = up(NULL, 64), *ds = up(NULL, 8), p[64], s[8];
    float ws;
    lwq_error ec = {0}, eg = {0};
    cr_assert_eq(lwq_quant_nvfp4_max(w, LWQ_F32, 4, 32, 2.0f, "t", p, s, &ws, &ec), LWQ_ENUMERIC);
    cr_assert_eq(lwq_quant_cuda_nvfp4_max(dw, LWQ_F32, 4, 32, 2.0f, "t", dp, ds, &ws, NULL, &eg), LWQ_ENUMERIC);
    cr_assert_str_eq(ec.msg, eg.msg);
    w[2 * 32 + 7] = 5.0f; /* above the given global amax */
    cr_assert_eq(cudaMemcpy(dw, w, sizeof w, cudaMemcpyHostToDevice), cudaSuccess);
    lwq_error_clear(&ec), lwq_error_clear(&eg);
    cr_assert_eq(lwq_quant_nvfp4_max(w, LWQ_F32, 4, 32, 2.0f, "t", p, s, &ws, &ec), LWQ_EINVAL);
    cr_assert_eq(lwq_quant_cuda_nvfp4_max(dw, LWQ_F32, 4, 32, 2.0f, "t", dp, ds, &ws, NULL, &eg), LWQ_EINVAL);
    cr_assert_str_eq(ec.msg, eg.msg);
    cudaFree(dw), cudaFree(dp), cudaFree(ds);
}

#endif
