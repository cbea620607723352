/* kernels/cuda/gptq_cuda.cu — see gptq_cuda.h.  The sweep's per-element work is the CPU's
 * (kernels/cpu/gptq/gptq_cpu.c), written with the `_rn` intrinsics of layout/format/quant_formats.h for the
 * float parts; the double updates inside a block run one thread per row in the CPU's order, the
 * updates after a block go through cuBLAS DGEMM. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// core/ headers have no C++ guards: give their declarations C linkage here
extern "C" {
#include "core/data/dtype.h"
#include "core/sys/error.h"
#include "core/sys/log.h"
}
#include "kernels/cuda/gptq_cuda.h"
#include "kernels/cuda/module_cuda.h"
#include "kernels/quant.h"
#include "kernels/quant_check.h"
#include "layout/format/quant_formats.h"

#define BLK LWQ_NVFP4_BLOCK
#define GB LWQ_GPTQ_BLOCK

typedef struct gctx {
    cublasHandle_t blas;
    cusolverDnHandle_t sol;
    void *buf[8];
    int nbuf;
} gctx;

static int cuda_fail(lwq_error *err, const char *name, const char *what, const char *why)
{
    return lwq_errf(err, LWQ_EDEVICE, "GPTQ of %s on the GPU: %s failed: %s", lwq_quant_name(name), what, why);
}

#define CU(call, what)                                                                                    \
    do {                                                                                                  \
        cudaError_t ce_ = (call);                                                                         \
        if (ce_ != cudaSuccess) {                                                                         \
            (void)cudaGetLastError(); /* see dalloc */                                                    \
            rc = cuda_fail(err, name, what, cudaGetErrorString(ce_));                                     \
            goto out;                                                                                     \
        }                                                                                                 \
    } while (0)
#define CB(call, what)                                                                                    \
    do {                                                                                                  \
        if ((call) != CUBLAS_STATUS_SUCCESS) {                                                            \
            rc = cuda_fail(err, name, what, "cuBLAS error");                                              \
            goto out;                                                                                     \
        }                                                                                                 \
    } while (0)
#define CS(call, what)                                                                                    \
    do {                                                                                                  \
        if ((call) != CUSOLVER_STATUS_SUCCESS) {                                                          \
            rc = cuda_fail(err, name, what, "cuSOLVER error");                                            \
            goto out;                                                                                     \
        }                                                                                                 \
    } while (0)

/* lwq_cuda_malloc: sampled for the measured peak, and a failure does not stay behind as the
 * runtime's last error (a bare cudaMalloc here left cudaErrorMemoryAllocation set, and the
 * backend's next launch check reported it as its own) */
static void *dalloc(gctx *g, size_t bytes)
{
    void *p = NULL;
    if (g->nbuf >= 8 || lwq_cuda_malloc(&p, bytes) != 0)
        return NULL;
    g->buf[g->nbuf++] = p;
    return p;
}

/* Frees the working set; a failure to free is logged (nothing can be returned from here) and the
 * last error cleared for the same reason as in dalloc. */
static void gfree(gctx *g)
{
    lwq_cuda_mem_sample(); /* the working set at its largest, library workspaces included */
    for (int i = 0; i < g->nbuf; i++)
        if (cudaFree(g->buf[i]) != cudaSuccess)
            LWQ_WARN("GPTQ on the GPU: cudaFree: %s", cudaGetErrorString(cudaGetLastError()));
    if (g->blas)
        cublasDestroy(g->blas);
    if (g->sol)
        cusolverDnDestroy(g->sol);
    memset(g, 0, sizeof *g);
}

/* ---- factor --------------------------------------------------------------------------------- */

extern "C" int lwq_gptq_cuda_factor(const double *h_sum, int64_t ntokens, int64_t cols, const lwq_gptq_opts *o,
                                    const char *name, int64_t *perm, double *u, uint8_t *dead, lwq_error *err)
{
    /* a = P H P^T dampened, full and symmetric (row-major = column-major) */
    int rc = lwq_gptq_prepare(h_sum, ntokens, cols, o, name, perm, u, dead, err);
    if (rc < 0)
        return rc;
    const int n = (int)cols;
    gctx g = {};
    double *da;
    int *dinfo, info = 0, lw = 0, lw2 = 0;
    double *work;
    if (cols > INT32_MAX / 2)
        return lwq_errf(err, LWQ_EINVAL, "GPTQ of %s: %lld in-features is too wide for cuSOLVER", lwq_quant_name(name),
                        (long long)cols);
    if (cusolverDnCreate(&g.sol) != CUSOLVER_STATUS_SUCCESS)
        return cuda_fail(err, name, "cusolverDnCreate", "no device or out of memory");
    if (!(da = (double *)dalloc(&g, (size_t)n * n * sizeof(double))) || !(dinfo = (int *)dalloc(&g, sizeof(int)))) {
        rc = cuda_fail(err, name, "cudaMalloc", "out of device memory");
        goto out;
    }
    CU(cudaMemcpy(da, u, (size_t)n * n * sizeof(double), cudaMemcpyHostToDevice), "upload");
    CS(cusolverDnDpotrf_bufferSize(g.sol, CUBLAS_FILL_MODE_LOWER, n, da, n, &lw), "potrf workspace");
    CS(cusolverDnDpotri_bufferSize(g.sol, CUBLAS_FILL_MODE_LOWER, n, da, n, &lw2), "potri workspace");
    lw = lw > lw2 ? lw : lw2;
    if (!(work = (double *)dalloc(&g, (size_t)lw * sizeof(double)))) {
        rc = cuda_fail(err, name, "cudaMalloc", "out of device memory");
        goto out;
    }
    for (int step = 0; step < 3; step++) {
        if (step == 1)
            CS(cusolverDnDpotri(g.sol, CUBLAS_FILL_MODE_LOWER, n, da, n, work, lw, dinfo), "potri");
        else
            CS(cusolverDnDpotrf(g.sol, CUBLAS_FILL_MODE_LOWER, n, da, n, work, lw, dinfo), "potrf");
        CU(cudaMemcpy(&info, dinfo, sizeof info, cudaMemcpyDeviceToHost), "info download");
        if (info != 0) {
            rc = lwq_errf(err, LWQ_ENUMERIC, "GPTQ of %s: the %s is not positive definite (pivot %d); raise "
                          "--gptq-damp (now %g)", lwq_quant_name(name), step ? "inverse Hessian" : "dampened Hessian",
                          info, o->damp);
            goto out;
        }
    }
    /* the column-major lower factor L2 of H^-1, read row-major, is U = L2^T */
    CU(cudaMemcpy(u, da, (size_t)n * n * sizeof(double), cudaMemcpyDeviceToHost), "download");
    for (int64_t i = 0; i < cols; i++)
        for (int64_t j = 0; j < i; j++)
            u[i * cols + j] = 0.0;
    rc = 0;
out:
    gfree(&g);
    return rc;
}

/* ---- sweep ---------------------------------------------------------------------------------- */

typedef struct sweep_args {
    double *w;            /* (rows, n) visiting order */
    double *e;            /* (rows, GB) errors of the block */
    const double *u;      /* (n, n) */
    const int64_t *perm, *inv, *first;
    uint8_t *codes;       /* NVFP4 packed (rows, n/2) or FP8 (rows, n) */
    uint8_t *scale;       /* NVFP4 (rows, n/16) */
    int64_t rows, n, i1, i2;
    int fp8;
    float ws;
} sweep_args;

__global__ void k_load(const void *w, lwq_dtype dt, const int64_t *perm, const uint8_t *dead, int64_t rows,
                       int64_t n, double *out, int *bad)
{
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * n)
        return;
    int64_t r = idx / n, p = idx % n, col = perm[p];
    float v = lwq_load_f(w, dt, (size_t)(r * n + col));
    if (!isfinite(v))
        atomicExch(bad, 1);
    out[idx] = dead && dead[col] ? 0.0 : (double)v;
}

__global__ void k_block(sweep_args a)
{
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= a.rows)
        return;
    const int64_t n = a.n;
    double *wr = a.w + r * n, *er = a.e + r * GB;
    for (int64_t i = a.i1; i < a.i2; i++) {
        const double *ui = a.u + i * n;
        const int64_t col = a.perm[i];
        float x = (float)wr[i], qv;
        if (a.fp8) {
            uint8_t code = lwq_fp8_quant_ref(x, a.ws);
            a.codes[r * n + col] = code;
            qv = LWQ_FMUL(lwq_e4m3_to_f32(code), a.ws);
        } else {
            int64_t b = col / BLK, nb = n / BLK;
            if (a.first[b] == i) {
                float am = 0.0f;
                for (int j = 0; j < BLK; j++) {
                    int64_t p = a.inv[b * BLK + j];
                    double v = wr[p];
                    if (p >= a.i2) /* the pending updates of this block's earlier columns */
                        for (int64_t k = a.i1; k < i; k++)
                            v = __dsub_rn(v, __dmul_rn(er[k - a.i1], a.u[k * n + p]));
                    float f = fabsf((float)v);
                    am = f > am ? f : am;
                }
                a.scale[r * nb + b] = lwq_nvfp4_scale_max(am, a.ws);
            }
            float d = lwq_nvfp4_block_div(a.scale[r * nb + b], a.ws);
            uint8_t code = lwq_e2m1_from_f32(LWQ_FDIV(x, d));
            uint8_t *pk = a.codes + (r * n + col) / 2;
            *pk = (col & 1) ? (uint8_t)((*pk & 0x0f) | (code << 4)) : (uint8_t)((*pk & 0xf0) | code);
            qv = LWQ_FMUL(lwq_e2m1_to_f32(code), d);
        }
        const double e = __ddiv_rn(__dsub_rn(wr[i], (double)qv), ui[i]);
        er[i - a.i1] = e;
        for (int64_t j = i + 1; j < a.i2; j++)
            wr[j] = __dsub_rn(wr[j], __dmul_rn(e, ui[j]));
    }
}

static int sweep(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const int64_t *perm, const double *u,
                 const uint8_t *dead, const char *name, int fp8, float ws, uint8_t *codes, uint8_t *scale,
                 lwq_error *err)
{
    const int64_t n = cols, nb = n / BLK;
    size_t wbytes = (size_t)(rows * cols) * lwq_dtype_size(dt), cbytes = fp8 ? (size_t)(rows * n) : (size_t)(rows * n / 2);
    int64_t *hinv = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    int64_t *hfirst = fp8 ? NULL : (int64_t *)malloc((size_t)nb * sizeof(int64_t));
    gctx g = {};
    int rc = 0, bad = 0;
    void *dw;
    double *dW, *dE, *dU;
    int64_t *dperm, *dinv, *dfirst = NULL;
    uint8_t *dcodes, *dscale = NULL, *ddead = NULL;
    int *dbad;
    if (!hinv || (!fp8 && !hfirst)) {
        rc = lwq_errf(err, LWQ_ENOMEM, "GPTQ of %s: out of memory", lwq_quant_name(name));
        goto out;
    }
    for (int64_t p = 0; p < n; p++)
        hinv[p] = -1;
    for (int64_t p = 0; p < n; p++) {
        if (perm[p] < 0 || perm[p] >= n || hinv[perm[p]] >= 0) {
            rc = lwq_errf(err, LWQ_EINVAL, "GPTQ of %s: the column order is not a permutation", lwq_quant_name(name));
            goto out;
        }
        hinv[perm[p]] = p;
    }
    for (int64_t b = 0; hfirst && b < nb; b++) {
        hfirst[b] = n;
        for (int j = 0; j < BLK; j++)
            hfirst[b] = hinv[b * BLK + j] < hfirst[b] ? hinv[b * BLK + j] : hfirst[b];
    }
    if (cublasCreate(&g.blas) != CUBLAS_STATUS_SUCCESS) {
        rc = cuda_fail(err, name, "cublasCreate", "no device or out of memory");
        goto out;
    }
    /* DGEMM without TF32/emulation tricks: plain double */
    CB(cublasSetMathMode(g.blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    if (!(dw = dalloc(&g, wbytes)) || !(dW = (double *)dalloc(&g, (size_t)(rows * n) * sizeof(double))) ||
        !(dE = (double *)dalloc(&g, (size_t)(rows * GB) * sizeof(double))) ||
        !(dU = (double *)dalloc(&g, (size_t)(n * n) * sizeof(double))) ||
        !(dperm = (int64_t *)dalloc(&g, (size_t)(2 * n + nb + 1) * sizeof(int64_t))) ||
        !(dcodes = (uint8_t *)dalloc(&g, cbytes + (fp8 ? 0 : (size_t)(rows * nb)) + (size_t)n)) ||
        !(dbad = (int *)dalloc(&g, sizeof(int)))) {
        rc = cuda_fail(err, name, "cudaMalloc", "out of device memory");
        goto out;
    }
    dinv = dperm + n;
    if (!fp8) {
        dfirst = dinv + n;
        dscale = dcodes + cbytes;
    }
    ddead = dcodes + cbytes + (fp8 ? 0 : (size_t)(rows * nb));
    CU(cudaMemcpy(dw, w, wbytes, cudaMemcpyHostToDevice), "upload weight");
    CU(cudaMemcpy(dU, u, (size_t)(n * n) * sizeof(double), cudaMemcpyHostToDevice), "upload factor");
    CU(cudaMemcpy(dperm, perm, (size_t)n * sizeof(int64_t), cudaMemcpyHostToDevice), "upload order");
    CU(cudaMemcpy(dinv, hinv, (size_t)n * sizeof(int64_t), cudaMemcpyHostToDevice), "upload order");
    if (!fp8)
        CU(cudaMemcpy(dfirst, hfirst, (size_t)nb * sizeof(int64_t), cudaMemcpyHostToDevice), "upload blocks");
    if (dead)
        CU(cudaMemcpy(ddead, dead, (size_t)n, cudaMemcpyHostToDevice), "upload dead inputs");
    CU(cudaMemset(dbad, 0, sizeof(int)), "memset");
    CU(cudaMemset(dcodes, 0, cbytes), "memset");
    {
        int64_t tot = rows * n;
        k_load<<<(unsigned)((tot + 255) / 256), 256>>>(dw, dt, dperm, dead ? ddead : NULL, rows, n, dW, dbad);
        CU(cudaGetLastError(), "load kernel");
        CU(cudaMemcpy(&bad, dbad, sizeof bad, cudaMemcpyDeviceToHost), "flag download");
        if (bad) {
            /* the host names the first bad element, as the CPU does */
            for (int64_t i = 0; i < tot; i++)
                if (!isfinite(lwq_load_f(w, dt, (size_t)i))) {
                    rc = lwq_quant_err_nonfinite(name, i, cols, err);
                    goto out;
                }
        }
    }
    for (int64_t i1 = 0; i1 < n; i1 += GB) {
        const int64_t i2 = n - i1 < GB ? n : i1 + GB;
        sweep_args a = {dW, dE, dU, dperm, dinv, dfirst, dcodes, dscale, rows, n, i1, i2, fp8, ws};
        k_block<<<(unsigned)((rows + 127) / 128), 128>>>(a);
        CU(cudaGetLastError(), "block kernel");
        if (i2 < n) {
            /* row-major W[:, i2:] -= E[:, :i2-i1] U[i1:i2, i2:], i.e. column-major
             * W^T(n-i2, rows) -= U^T(n-i2, k) E^T(k, rows) */
            const double one = 1.0, minus = -1.0;
            CB(cublasDgemm(g.blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)(n - i2), (int)rows, (int)(i2 - i1), &minus,
                           dU + i1 * n + i2, (int)n, dE, GB, &one, dW + i2, (int)n),
               "DGEMM");
        }
    }
    CU(cudaMemcpy(codes, dcodes, cbytes, cudaMemcpyDeviceToHost), "download codes");
    if (!fp8)
        CU(cudaMemcpy(scale, dscale, (size_t)(rows * nb), cudaMemcpyDeviceToHost), "download scales");
    rc = 0;
out:
    gfree(&g);
    free(hinv);
    free(hfirst);
    return rc;
}

extern "C" int lwq_gptq_cuda_nvfp4(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                                   const int64_t *perm, const double *u, const uint8_t *dead, const char *name,
                                   uint8_t *packed, uint8_t *scale, float *ws2, lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, w, dt, rows, cols, 1, err);
    if (rc < 0)
        return rc;
    if (!perm || !u || !packed || !scale || !ws2)
        return lwq_errf(err, LWQ_EINVAL, "GPTQ of %s: NULL buffer", lwq_quant_name(name));
    if (rows > INT32_MAX || cols > INT32_MAX)
        return lwq_errf(err, LWQ_EINVAL, "GPTQ of %s: too large for cuBLAS", lwq_quant_name(name));
    float g;
    int zero = lwq_quant_check_global(name, global_amax, INFINITY, &g, err);
    if (zero < 0)
        return zero;
    float ws = lwq_nvfp4_ws2(g);
    if ((rc = sweep(w, dt, rows, cols, perm, u, dead, name, 0, ws, packed, scale, err)) < 0)
        return rc;
    *ws2 = ws;
    return zero ? LWQ_QUANT_ZERO_TENSOR : 0;
}

extern "C" int lwq_gptq_cuda_fp8(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float amax,
                                 const int64_t *perm, const double *u, const uint8_t *dead, const char *name,
                                 uint8_t *q, float *weight_scale, lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, w, dt, rows, cols, 0, err);
    if (rc < 0)
        return rc;
    if (!perm || !u || !q || !weight_scale)
        return lwq_errf(err, LWQ_EINVAL, "GPTQ of %s: NULL buffer", lwq_quant_name(name));
    if (rows > INT32_MAX || cols > INT32_MAX)
        return lwq_errf(err, LWQ_EINVAL, "GPTQ of %s: too large for cuBLAS", lwq_quant_name(name));
    float g;
    int zero = lwq_quant_check_global(name, amax, INFINITY, &g, err);
    if (zero < 0)
        return zero;
    float ws = g / LWQ_E4M3_MAX;
    if (!(ws > 0.0f))
        return lwq_errf(err, LWQ_ENUMERIC, "GPTQ of %s: amax %g gives a zero scale", lwq_quant_name(name), (double)g);
    if ((rc = sweep(w, dt, rows, cols, perm, u, dead, name, 1, ws, q, NULL, err)) < 0)
        return rc;
    *weight_scale = ws;
    return zero ? LWQ_QUANT_ZERO_TENSOR : 0;
}

static const lwq_gptq_ops cuda_gptq = {"cuda", lwq_gptq_cuda_factor, lwq_gptq_cuda_nvfp4, lwq_gptq_cuda_fp8};

extern "C" const lwq_gptq_ops *lwq_cuda_gptq_table(void) { return &cuda_gptq; }
