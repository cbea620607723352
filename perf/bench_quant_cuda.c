/* perf/bench_quant_cuda.c — GPU throughput of kernels/cuda/quant_cuda.h on a BF16 weight.
 * Checks the GPU bytes against the CPU reference on the same data first, then times each call
 * as the engine makes it (wrapper included: status allocation, launch, read-back, sync), best of
 * N.  Throughput = bytes of BF16 input per second; the H200's HBM3e peak is ~4.8 TB/s.
 * Targets (issue 3): NVFP4 max >= 500 GB/s, fp8_scale_sweep >= 50 GB/s.
 * Usage: bench_quant_cuda [rows cols]   (default 8192 x 8192).  Exits 0 with a message when
 * lwq is built without CUDA or no device is present; 1 when a check fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/quant.h"

#ifndef LWQ_HAVE_CUDA
int main(void)
{
    printf("bench_quant_cuda: lwq built without CUDA; nothing to measure\n");
    return 0;
}
#else
#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/quant_cuda.h"

#define CHECK(c)                                                                                                       \
    do {                                                                                                               \
        if (!(c)) {                                                                                                    \
            fprintf(stderr, "bench_quant_cuda: check failed: %s (line %d)\n", #c, __LINE__);                           \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((float)(rng >> 40) / 16777216.0f - 0.5f) * 0.1f;
}

typedef struct g {
    int64_t rows, cols;
    void *w;
    uint8_t *packed, *scale, *q;
    float *h, *bamax;
    void *out;
    float amax, ws;
} g;

enum { K_AMAX, K_MAX, K_FP8, K_SWEEP, K_HSWEEP, K_BMSE, K_FMSE, K_DQ };

static int run(g *c, int k)
{
    switch (k) {
    case K_AMAX:
        return lwq_quant_cuda_amax(c->w, LWQ_BF16, c->rows * c->cols, "w", &c->amax, NULL, NULL);
    case K_MAX:
        return lwq_quant_cuda_nvfp4_max(c->w, LWQ_BF16, c->rows, c->cols, c->amax, "w", c->packed, c->scale, &c->ws,
                                        NULL, NULL);
    case K_FP8:
        return lwq_quant_cuda_fp8(c->w, LWQ_BF16, c->rows, c->cols, c->amax, "w", c->q, &c->ws, NULL, NULL);
    case K_SWEEP:
        return lwq_quant_cuda_nvfp4_sweep(c->w, LWQ_BF16, c->rows, c->cols, c->amax, NULL, "w", c->bamax, c->scale,
                                          NULL, NULL);
    case K_HSWEEP:
        return lwq_quant_cuda_nvfp4_sweep(c->w, LWQ_BF16, c->rows, c->cols, c->amax, c->h, "w", c->bamax, c->scale,
                                          NULL, NULL);
    case K_FMSE: {
        float a;
        return lwq_quant_cuda_fp8_mse(c->w, LWQ_BF16, c->rows, c->cols, "w", &a, NULL, NULL, NULL);
    }
    case K_BMSE:
        return lwq_quant_cuda_nvfp4_mse(c->w, LWQ_BF16, c->rows, c->cols, c->amax, "w", c->bamax, NULL, NULL);
    default:
        return lwq_quant_cuda_nvfp4_dequant(c->packed, c->scale, c->ws, c->rows, c->cols, LWQ_BF16, c->out, NULL, NULL);
    }
}

static double best_ms(g *c, int k, int reps)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    float best = 1e30f;
    for (int i = 0; i < reps; i++) {
        cudaEventRecord(a, NULL);
        if (run(c, k) < 0)
            return -1;
        cudaEventRecord(b, NULL);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        best = ms < best ? ms : best;
    }
    cudaEventDestroy(a), cudaEventDestroy(b);
    return best;
}

static void report(const char *what, int64_t rows, int64_t cols, double ms)
{
    double gbs = (double)rows * (double)cols * 2.0 / (ms * 1e-3) / 1e9;
    printf("%-24s %6lld x %-6lld %9.3f ms  %9.1f GB/s  (%.1f%% of 4.8 TB/s)\n", what, (long long)rows, (long long)cols,
           ms, gbs, gbs / 48.0);
}

int main(int argc, char **argv)
{
    lwq_error pe = {0};
    if (lwq_backend_cuda_probe(&pe) <= 0) {
        printf("bench_quant_cuda: nothing to measure: %s\n", pe.msg);
        return 0;
    }
    int64_t rows = argc > 2 ? atoll(argv[1]) : 8192, cols = argc > 2 ? atoll(argv[2]) : 8192;
    CHECK(rows > 0 && cols > 0 && cols % 16 == 0);
    int64_t n = rows * cols, nb = n / 16;
    uint16_t *w = malloc((size_t)n * 2);
    uint8_t *pc = malloc((size_t)n / 2), *sc = malloc((size_t)nb), *pg = malloc((size_t)n / 2),
            *sg = malloc((size_t)nb);
    CHECK(w && pc && sc && pg && sg);
    for (int64_t i = 0; i < n; i++)
        w[i] = lwq_f32_to_bf16(rnd());
    g c = {.rows = rows, .cols = cols};
    CHECK(cudaMalloc(&c.w, (size_t)n * 2) == cudaSuccess &&
          cudaMalloc((void **)&c.packed, (size_t)n / 2) == cudaSuccess &&
          cudaMalloc((void **)&c.scale, (size_t)nb) == cudaSuccess &&
          cudaMalloc((void **)&c.q, (size_t)n) == cudaSuccess &&
          cudaMalloc((void **)&c.bamax, (size_t)nb * 4) == cudaSuccess &&
          cudaMalloc((void **)&c.h, (size_t)cols * 16 * 4) == cudaSuccess &&
          cudaMalloc(&c.out, (size_t)n * 2) == cudaSuccess);
    CHECK(cudaMemcpy(c.w, w, (size_t)n * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    float *h = malloc((size_t)cols * 16 * 4);
    CHECK(h);
    for (int64_t i = 0; i < cols * 16; i++)
        h[i] = (i % 16 == (i / 16) % 16) ? 1.0f : 0.01f;
    CHECK(cudaMemcpy(c.h, h, (size_t)cols * 16 * 4, cudaMemcpyHostToDevice) == cudaSuccess);

    /* correctness: GPU bytes == CPU bytes */
    float amax, ws2;
    CHECK(lwq_quant_amax(w, LWQ_BF16, n, "w", &amax, NULL) == 0);
    CHECK(run(&c, K_AMAX) == 0 && c.amax == amax);
    CHECK(lwq_quant_nvfp4_max(w, LWQ_BF16, rows, cols, amax, "w", pc, sc, &ws2, NULL) == 0);
    CHECK(run(&c, K_MAX) == 0 && c.ws == ws2);
    CHECK(cudaMemcpy(pg, c.packed, (size_t)n / 2, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(cudaMemcpy(sg, c.scale, (size_t)nb, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(memcmp(pc, pg, (size_t)n / 2) == 0 && memcmp(sc, sg, (size_t)nb) == 0);
    int64_t srows = rows < 64 ? rows : 64; /* the CPU sweep is slow: check a slice */
    CHECK(lwq_quant_nvfp4_sweep(w, LWQ_BF16, srows, cols, amax, h, "w", NULL, sc, NULL) == 0);
    CHECK(run(&c, K_HSWEEP) == 0);
    CHECK(cudaMemcpy(sg, c.scale, (size_t)(srows * cols / 16), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(memcmp(sc, sg, (size_t)(srows * cols / 16)) == 0);
    CHECK(lwq_quant_nvfp4_sweep(w, LWQ_BF16, srows, cols, amax, NULL, "w", NULL, sc, NULL) == 0);
    CHECK(run(&c, K_SWEEP) == 0);
    CHECK(cudaMemcpy(sg, c.scale, (size_t)(srows * cols / 16), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(memcmp(sc, sg, (size_t)(srows * cols / 16)) == 0);
    float *bc = malloc((size_t)(srows * cols / 16) * sizeof(float)),
          *bg = malloc((size_t)(srows * cols / 16) * sizeof(float));
    CHECK(bc && bg);
    CHECK(lwq_quant_nvfp4_mse(w, LWQ_BF16, srows, cols, amax, "w", bc, NULL) == 0);
    CHECK(run(&c, K_BMSE) == 0);
    CHECK(cudaMemcpy(bg, c.bamax, (size_t)(srows * cols / 16) * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(memcmp(bc, bg, (size_t)(srows * cols / 16) * sizeof(float)) == 0);
    free(bc), free(bg);
    float fa_c, fa_g;
    CHECK(lwq_quant_fp8_mse(w, LWQ_BF16, srows, cols, "w", &fa_c, NULL, NULL) == 0);
    CHECK(lwq_quant_cuda_fp8_mse(c.w, LWQ_BF16, srows, cols, "w", &fa_g, NULL, NULL, NULL) == 0);
    CHECK(fa_c == fa_g);
    CHECK(run(&c, K_MAX) == 0); /* restore the max-path scales for the dequant timing */
    printf("bench_quant_cuda: GPU bytes equal CPU bytes (nvfp4 max, sweep, local_hessian, block mse, fp8 mse on %lld rows)\n",
           (long long)srows);

    report("amax", rows, cols, best_ms(&c, K_AMAX, 20));
    report("nvfp4 max", rows, cols, best_ms(&c, K_MAX, 20));
    report("fp8 per-tensor", rows, cols, best_ms(&c, K_FP8, 20));
    report("nvfp4 dequant -> bf16", rows, cols, best_ms(&c, K_DQ, 20));
    report("nvfp4 fp8_scale_sweep", rows, cols, best_ms(&c, K_SWEEP, 5));
    report("nvfp4 local_hessian", rows, cols, best_ms(&c, K_HSWEEP, 3));
    report("nvfp4 block mse (39)", rows, cols, best_ms(&c, K_BMSE, 5));
    report("fp8 mse (39)", rows, cols, best_ms(&c, K_FMSE, 3));
    cudaFree(c.w), cudaFree(c.packed), cudaFree(c.scale), cudaFree(c.q), cudaFree(c.bamax), cudaFree(c.h),
        cudaFree(c.out);
    free(w), free(pc), free(sc), free(pg), free(sg), free(h);
    return 0;
}
#endif
