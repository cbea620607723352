/* CUDA GPTQ (kernels/cuda/gptq_cuda.h) against the CPU (kernels/gptq.h) on the same random linears,
 * with the tolerance gptq_cuda.h states.  Skipped without CUDA or a device. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gptq.h"
#include "kernels/quant.h"

#ifndef LWQ_HAVE_CUDA

Test(gptq_cuda, cpu_vs_cuda)
{
    cr_skip("lwq built without CUDA (LWQ_HAVE_CUDA undefined): CPU-vs-CUDA GPTQ tests skipped");
}

#else

#include <cuda_runtime.h>

#include "kernels/cuda/gptq_cuda.h"
#include "kernels/cuda/quant_cuda.h"

static void setup(void)
{
    if (lwq_quant_cuda_device_count() <= 0)
        cr_skip("no CUDA device: CPU-vs-CUDA GPTQ tests skipped");
}

TestSuite(gptq_cuda, .init = setup);

static double urand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0 - 0.5;
}

/* w: (rows, n) f32; hs: (n, n) sums of x x^T over correlated random tokens */
static void make(int64_t rows, int64_t n, int64_t T, uint64_t seed, float **w, double **hs)
{
    float *x = malloc((size_t)(T * n) * 4);
    *w = malloc((size_t)(rows * n) * 4);
    *hs = calloc((size_t)(n * n), 8);
    for (int64_t i = 0; i < rows * n; i++)
        (*w)[i] = (float)(urand(&seed) * 0.1);
    for (int64_t t = 0; t < T; t++) {
        double z = urand(&seed) * 3;
        for (int64_t j = 0; j < n; j++)
            x[t * n + j] = (float)(z * (1 + j % 5) + urand(&seed));
    }
    lwq_error e = {0};
    cr_assert_eq(lwq_gptq_hessian_accumulate(x, LWQ_F32, T, n, *hs, "x", &e), 0, "%s", e.msg);
    free(x);
}

static void compare(int fp8, int act)
{
    const int64_t rows = 96, n = 400, T = 512;
    float *w;
    double *hs;
    make(rows, n, T, 42 + fp8 + 2 * act, &w, &hs);
    lwq_gptq_opts o = {0.01, act};
    lwq_error e = {0};
    int64_t *pc = malloc(n * 8), *pg = malloc(n * 8);
    double *uc = malloc(n * n * 8), *ug = malloc(n * n * 8);
    uint8_t *dc = malloc(n), *dg = malloc(n);
    cr_assert_eq(lwq_gptq_factor(hs, T, n, &o, "w", pc, uc, dc, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_gptq_cuda_factor(hs, T, n, &o, "w", pg, ug, dg, &e), 0, "%s", e.msg);
    cr_assert_eq(memcmp(pc, pg, n * 8), 0);
    double um = 0, ud = 0;
    for (int64_t i = 0; i < n * n; i++) {
        um = fmax(um, fabs(uc[i]));
        ud = fmax(ud, fabs(uc[i] - ug[i]));
    }
    cr_assert_lt(ud, 1e-9 * um, "factors differ by %g (max %g)", ud, um);
    float amax = 0;
    for (int64_t i = 0; i < rows * n; i++)
        amax = fmaxf(amax, fabsf(w[i]));
    size_t cb = fp8 ? (size_t)(rows * n) : (size_t)(rows * n / 2);
    uint8_t *qc = malloc(cb), *qg = malloc(cb), *sc = malloc(rows * n / 16 + 1), *sg = malloc(rows * n / 16 + 1);
    float wsc, wsg, *dqc = malloc(rows * n * 4), *dqg = malloc(rows * n * 4);
    if (fp8) {
        cr_assert_geq(lwq_gptq_fp8(w, LWQ_F32, rows, n, amax, pc, uc, dc, "w", qc, &wsc, &e), 0, "%s", e.msg);
        cr_assert_geq(lwq_gptq_cuda_fp8(w, LWQ_F32, rows, n, amax, pc, uc, dc, "w", qg, &wsg, &e), 0, "%s", e.msg);
        lwq_quant_fp8_dequant(qc, wsc, rows * n, LWQ_F32, dqc, &e);
        lwq_quant_fp8_dequant(qg, wsg, rows * n, LWQ_F32, dqg, &e);
    } else {
        cr_assert_geq(lwq_gptq_nvfp4(w, LWQ_F32, rows, n, amax, pc, uc, dc, "w", qc, sc, &wsc, &e), 0, "%s", e.msg);
        cr_assert_geq(lwq_gptq_cuda_nvfp4(w, LWQ_F32, rows, n, amax, pc, uc, dc, "w", qg, sg, &wsg, &e), 0, "%s",
                      e.msg);
        lwq_quant_nvfp4_dequant(qc, sc, wsc, rows, n, LWQ_F32, dqc, &e);
        lwq_quant_nvfp4_dequant(qg, sg, wsg, rows, n, LWQ_F32, dqg, &e);
    }
    cr_assert_eq(wsc, wsg);
    int64_t same = 0;
    for (int64_t i = 0; i < rows * n; i++)
        same += dqc[i] == dqg[i];
    cr_assert_geq((double)same, 0.99 * (double)(rows * n), "only %lld of %lld weights equal", (long long)same,
                  (long long)(rows * n));
    double ec, eg;
    cr_assert_eq(lwq_gptq_output_error(w, LWQ_F32, dqc, rows, n, hs, &ec, NULL, &e), 0);
    cr_assert_eq(lwq_gptq_output_error(w, LWQ_F32, dqg, rows, n, hs, &eg, NULL, &e), 0);
    cr_assert_leq(fabs(ec - eg), 0.01 * ec, "output error CPU %g, GPU %g", ec, eg);
    free(w), free(hs), free(pc), free(pg), free(uc), free(ug), free(dc), free(dg);
    free(qc), free(qg), free(sc), free(sg), free(dqc), free(dqg);
}

/* GPTQ's device allocations were bare cudaMalloc calls: a failed one returned the error but left
 * cudaErrorMemoryAllocation as the runtime's last error, which the CUDA backend's next launch
 * check then reported as its own.  LWQ_CUDA_FAIL_ALLOC makes the sweep's second allocation fail
 * for real. */
Test(gptq_cuda, a_failed_device_allocation_leaves_no_error_behind)
{
    const int64_t rows = 32, n = 64, T = 128;
    float *w;
    double *hs;
    make(rows, n, T, 7, &w, &hs);
    lwq_gptq_opts o = {0.01, 0};
    lwq_error e = {0};
    int64_t *perm = malloc(n * 8);
    double *u = malloc(n * n * 8);
    uint8_t *dead = malloc(n), *q = malloc(rows * n);
    cr_assert_eq(lwq_gptq_factor(hs, T, n, &o, "w", perm, u, dead, &e), 0, "%s", e.msg);
    float ws;
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    setenv("LWQ_CUDA_FAIL_ALLOC", "2", 1);
    int rc = lwq_gptq_cuda_fp8(w, LWQ_F32, rows, n, 1.0f, perm, u, dead, "w", q, &ws, &e);
    unsetenv("LWQ_CUDA_FAIL_ALLOC");
    cr_expect_eq(rc, LWQ_EDEVICE, "rc %d: %s", rc, e.msg);
    cr_expect(strstr(e.msg, "out of device memory") != NULL, "%s", e.msg);
    cr_expect_eq(cudaGetLastError(), cudaSuccess, "the failed allocation stayed behind as the last error");
    lwq_error_clear(&e);
    cr_expect_geq(lwq_gptq_cuda_fp8(w, LWQ_F32, rows, n, 1.0f, perm, u, dead, "w", q, &ws, &e), 0, "%s", e.msg);
    free(w), free(hs), free(perm), free(u), free(dead), free(q);
}

Test(gptq_cuda, nvfp4_within_tolerance_of_cpu) { compare(0, 0); }
Test(gptq_cuda, nvfp4_act_order_within_tolerance_of_cpu) { compare(0, 1); }
Test(gptq_cuda, fp8_within_tolerance_of_cpu) { compare(1, 1); }

#endif
