/* kernels/cuda/backend_cuda.cu — the CUDA backend: cuBLAS for the GEMMs (BF16/F16/F32 in, FP32
 * accumulate), simple kernels for everything else, all on one stream per backend.
 *
 * Every kernel follows the CPU reference's formula and rounding sequence (backend.h); none uses
 * an order that depends on scheduling (amax uses atomicMax on non-negative float bits, which is
 * order-independent), so results are deterministic.  Reductions run in f32 (the CPU reference may
 * use wider accumulators), so CPU-vs-CUDA tests compare with stated tolerances.
 * Device-side index errors (gather rows out of range) set a flag that the next synchronize()
 * reports.  upload/download are synchronous with respect to the host. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "core/sys/log.h"
#include "kernels/backend.h"
}
#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/grid.h"
#include "kernels/cuda/mamba2_cuda.h"
#include "kernels/cuda/module_cuda.h"
#include "kernels/cuda/route.h"

typedef struct cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *ws;            /* GEMM workspace (f32 staging), grown on demand */
    size_t ws_cap;
    unsigned int *flags; /* device: [0] amax bits, [1] amax NaN, [2] index error */
    /* the first failure of a call that cannot return one (free, host unregister), reported by
     * the next synchronize() */
    cudaError_t deferred;
    const char *deferred_what;
    int attn_tiled;      /* LWQ_CUDA_ATTENTION=tiled (attention_cuda.h) */
} cuda_ctx;

/* Every failing runtime call is followed by cudaGetLastError(), which resets the thread's
 * last-error state: a failure the caller tolerates (a refused host registration, a failed
 * allocation that falls back to a smaller one) must not be reported again by the next launch's
 * LAUNCHED() check.  Sticky errors (a faulted context) cannot be reset; every later call reports
 * them, as it should. */
#define CU(call, what)                                                                             \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) {                                                                 \
            (void)cudaGetLastError();                                                              \
            return lwq_errf(e, LWQ_EDEVICE, "cuda %s: %s", what, cudaGetErrorString(err_));        \
        }                                                                                          \
    } while (0)

/* A call whose failure cannot be returned: kept for the next synchronize(). */
static void defer(cuda_ctx *c, cudaError_t err, const char *what)
{
    if (err == cudaSuccess)
        return;
    (void)cudaGetLastError();
    if (c->deferred == cudaSuccess) {
        c->deferred = err;
        c->deferred_what = what;
    }
}

#define CUBLAS(call, what)                                                                         \
    do {                                                                                           \
        cublasStatus_t st_ = (call);                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                          \
            return lwq_errf(e, LWQ_EDEVICE, "cublas %s: status %d", what, (int)st_);               \
    } while (0)

#define LAUNCHED(what) CU(cudaGetLastError(), what)

static inline unsigned grid_for(int64_t n, int block) { return lwq_grid_for(n, block); }

/* ---- memory ---------------------------------------------------------------------------------- */

static int cu_alloc(void *vctx, size_t bytes, void **out, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    int err = lwq_cuda_malloc(out, bytes); /* callers may fall back (forward.c's arena) */
    if (err)
        return lwq_errf(e, LWQ_ENOMEM, "cuda alloc of %zu bytes: %s", bytes,
                        cudaGetErrorString((cudaError_t)err));
    return 0;
}

/* the module-wide peak (mem_cuda.cu): GPTQ and the quantizers allocate outside this backend */
static uint64_t cu_mem_peak(void *vctx)
{
    (void)vctx;
    return lwq_cuda_mem_peak();
}

/* The prefetch pool is page-aligned anonymous memory that O_DIRECT reads fill; registering it
 * (rather than allocating with cudaHostAlloc) keeps it usable for O_DIRECT and makes uploads
 * from it DMA at full PCIe speed. */
static int cu_host_register(void *vctx, void *ptr, size_t bytes, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    CU(cudaHostRegister(ptr, bytes, cudaHostRegisterDefault), "host register");
    return 0;
}

static void cu_host_unregister(void *vctx, void *ptr)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    defer(c, cudaSetDevice(c->device), "set device");
    defer(c, cudaHostUnregister(ptr), "host unregister");
}

static int cu_pci_bus_id(void *vctx, char *out, size_t cap)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    return cudaDeviceGetPCIBusId(out, (int)cap, c->device) == cudaSuccess ? 0 : -1;
}

static void cu_free(void *vctx, void *p)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    defer(c, cudaSetDevice(c->device), "set device");
    defer(c, cudaStreamSynchronize(c->stream), "free: synchronize");
    defer(c, cudaFree(p), "free");
}

static int cu_upload(void *vctx, void *dst, const void *src, size_t bytes, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream), "upload");
    CU(cudaStreamSynchronize(c->stream), "upload sync");
    return 0;
}

static int cu_download(void *vctx, void *dst, const void *src, size_t bytes, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), "download");
    CU(cudaStreamSynchronize(c->stream), "download sync");
    return 0;
}

static int cu_memset0(void *vctx, void *dst, size_t bytes, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    CU(cudaMemsetAsync(dst, 0, bytes, c->stream), "memset");
    return 0;
}

static int cu_sync(void *vctx, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    unsigned int f[3];
    CU(cudaSetDevice(c->device), "set device");
    CU(cudaMemcpyAsync(f, c->flags, sizeof f, cudaMemcpyDeviceToHost, c->stream), "flag read");
    CU(cudaStreamSynchronize(c->stream), "synchronize");
    lwq_cuda_mem_sample();
    if (c->deferred != cudaSuccess) {
        cudaError_t d = c->deferred;
        c->deferred = cudaSuccess;
        return lwq_errf(e, LWQ_EDEVICE, "cuda %s (an earlier call): %s", c->deferred_what,
                        cudaGetErrorString(d));
    }
    if (f[2]) {
        CU(cudaMemsetAsync(c->flags + 2, 0, sizeof(unsigned int), c->stream), "flag reset");
        return lwq_errf(e, LWQ_EINVAL, "cuda gather_rows: a row index was outside its source "
                        "(rows were zero-filled)");
    }
    return 0;
}

static int ws_reserve(cuda_ctx *c, size_t bytes, lwq_error *e)
{
    if (bytes <= c->ws_cap)
        return 0;
    CU(cudaStreamSynchronize(c->stream), "workspace sync");
    if (c->ws)
        CU(cudaFree(c->ws), "gemm workspace free");
    c->ws = NULL;
    c->ws_cap = 0;
    int err = lwq_cuda_malloc(&c->ws, bytes);
    if (err)
        return lwq_errf(e, LWQ_ENOMEM, "cuda gemm workspace of %zu bytes: %s", bytes,
                        cudaGetErrorString((cudaError_t)err));
    c->ws_cap = bytes;
    return 0;
}

/* ---- gemm ------------------------------------------------------------------------------------ */

__global__ void k_to_f32(const void *src, lwq_dtype dt, float *dst, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = ld(src, dt, i);
}

__global__ void k_bias_cast(const float *cbuf, const void *bias, lwq_dtype bdt, void *y,
                            lwq_dtype ydt, int64_t rows, int64_t cols)
{
    int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = cbuf[i];
        if (bias)
            v += ld(bias, bdt, i % cols);
        st(y, ydt, i, v);
    }
}

static cudaDataType_t cuda_type(lwq_dtype t)
{
    return t == LWQ_BF16 ? CUDA_R_16BF : t == LWQ_F16 ? CUDA_R_16F : CUDA_R_32F;
}

static int cu_gemm(void *vctx, const lwq_tensor *x, const lwq_tensor *w, const lwq_tensor *bias,
                   lwq_tensor *y, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    const int64_t n = x->shape[0], in = x->shape[1], out = w->shape[0];
    if (n > INT32_MAX || in > INT32_MAX || out > INT32_MAX)
        return lwq_errf(e, LWQ_EINVAL, "cuda gemm: dims exceed the cuBLAS int range");
    CU(cudaSetDevice(c->device), "set device");
    /* mixed input dtypes: widen the narrower operand(s) to f32 (lossless) */
    const int same = x->dtype == w->dtype;
    const lwq_dtype in_dt = same ? x->dtype : LWQ_F32;
    const int conv_x = x->dtype != in_dt, conv_w = w->dtype != in_dt;
    /* cuBLAS writes C directly when it is the output dtype it supports for these inputs and no
     * bias is needed; otherwise C is f32 staging and one kernel adds the bias and rounds once */
    const int direct = !bias && (y->dtype == in_dt || y->dtype == LWQ_F32);
    /* each staging region starts 256-byte aligned (cuBLAS picks faster kernels for aligned
     * operands) */
    size_t bx = conv_x ? ((size_t)(n * in) * 4 + 255) & ~(size_t)255 : 0;
    size_t bw = conv_w ? ((size_t)(out * in) * 4 + 255) & ~(size_t)255 : 0;
    size_t bc = direct ? 0 : (size_t)(n * out) * 4;
    int rc = ws_reserve(c, bx + bw + bc + 256, e);
    if (rc < 0)
        return rc;
    char *ws = (char *)c->ws;
    const void *xp = x->data, *wp = w->data;
    if (conv_x) {
        k_to_f32<<<grid_for(n * in, 256), 256, 0, c->stream>>>(x->data, x->dtype, (float *)ws,
                                                                n * in);
        LAUNCHED("gemm convert x");
        xp = ws;
    }
    if (conv_w) {
        k_to_f32<<<grid_for(out * in, 256), 256, 0, c->stream>>>(w->data, w->dtype,
                                                                 (float *)(ws + bx), out * in);
        LAUNCHED("gemm convert w");
        wp = ws + bx;
    }
    void *cp = direct ? y->data : (void *)(ws + bx + bw);
    cudaDataType_t ct = direct ? cuda_type(y->dtype) : CUDA_R_32F;
    const float alpha = 1.0f, beta = 0.0f;
    /* row-major y (n, out) = x (n, in) W^T is column-major y^T (out, n) = W (out, in) x^T:
     * A = W seen column-major as (in, out) -> op T; B = x seen as (in, n) -> op N */
    CUBLAS(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in, &alpha, wp,
                        cuda_type(in_dt), (int)in, xp, cuda_type(in_dt), (int)in, &beta, cp, ct,
                        (int)out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
           "gemm");
    if (!direct) {
        k_bias_cast<<<grid_for(n * out, 256), 256, 0, c->stream>>>(
            (const float *)cp, bias ? bias->data : NULL, bias ? bias->dtype : LWQ_F32, y->data,
            y->dtype, n, out);
        LAUNCHED("gemm bias/cast");
    }
    return 0;
}

/* ---- rmsnorm, rope, element-wise ------------------------------------------------------------- */

#define NORM_BLOCK 256

__global__ void k_rmsnorm(const void *x, lwq_dtype xdt, const void *w, lwq_dtype wdt, void *y,
                          lwq_dtype ydt, int64_t d, float eps)
{
    __shared__ float sh[NORM_BLOCK];
    const int64_t r = blockIdx.x;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += NORM_BLOCK) {
        float v = ld(x, xdt, r * d + i);
        ss += v * v;
    }
    sh[threadIdx.x] = ss;
    __syncthreads();
    for (int s = NORM_BLOCK / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    const float rs = 1.0f / sqrtf(sh[0] / (float)d + eps);
    for (int64_t i = threadIdx.x; i < d; i += NORM_BLOCK) {
        float v = lwq_round_to(ld(x, xdt, r * d + i) * rs, xdt);
        st(y, ydt, r * d + i, lwq_round_to(ld(w, wdt, i) * v, ydt));
    }
}

static int cu_rmsnorm(void *vctx, const lwq_tensor *x, const lwq_tensor *w, float eps,
                      lwq_tensor *y, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (x->shape[0] > INT32_MAX)
        return lwq_errf(e, LWQ_EINVAL, "cuda rmsnorm: %lld rows exceed the grid",
                        (long long)x->shape[0]);
    CU(cudaSetDevice(c->device), "set device");
    k_rmsnorm<<<(unsigned)x->shape[0], NORM_BLOCK, 0, c->stream>>>(
        x->data, x->dtype, w->data, w->dtype, y->data, y->dtype, x->shape[1], eps);
    LAUNCHED("rmsnorm");
    return 0;
}

__global__ void k_rope(void *x, lwq_dtype dt, int64_t rows, int64_t cols, int64_t hd,
                       const int32_t *pos, const float *inv, float scaling)
{
    const int64_t half = hd / 2, per_row = cols / 2, n = rows * per_row;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = t / per_row, p = t % per_row, h = p / half, i = p % half;
        /* __fmul_rn / __fadd_rn: every product and sum rounds on its own, as on the CPU; nvcc
         * would otherwise contract a product and the following add into one FMA */
        float ang = __fmul_rn((float)pos[r], inv[i]);
        float cs = lwq_round_to(__fmul_rn(cosf(ang), scaling), dt);
        float sn = lwq_round_to(__fmul_rn(sinf(ang), scaling), dt);
        int64_t a = r * cols + h * hd + i, b = a + half;
        float x1 = ld(x, dt, a), x2 = ld(x, dt, b);
        st(x, dt, a, __fadd_rn(lwq_round_to(__fmul_rn(x1, cs), dt), lwq_round_to(__fmul_rn(-x2, sn), dt)));
        st(x, dt, b, __fadd_rn(lwq_round_to(__fmul_rn(x2, cs), dt), lwq_round_to(__fmul_rn(x1, sn), dt)));
    }
}

static int cu_rope(void *vctx, lwq_tensor *x, int64_t head_dim, const lwq_tensor *pos,
                   const lwq_tensor *inv_freq, float attn_scaling, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    int64_t n = x->shape[0] * (x->shape[1] / 2);
    k_rope<<<grid_for(n, 256), 256, 0, c->stream>>>(x->data, x->dtype, x->shape[0], x->shape[1],
                                                     head_dim, (const int32_t *)pos->data,
                                                     (const float *)inv_freq->data, attn_scaling);
    LAUNCHED("rope");
    return 0;
}

/* round(round(silu(g)) * u).  __fadd_rn / __fdiv_rn / __fmul_rn: nvcc contracted the last
 * multiply inside expf with the `1.0f +` into one FMA (seen in the PTX; ctest
 * test_cuda_ptx checks the kernel), so the sum rounded differently from the CPU's */
__global__ void k_swiglu(const void *g, lwq_dtype gdt, const void *u, lwq_dtype udt, void *out,
                         lwq_dtype odt, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float x = ld(g, gdt, i), y = ld(u, udt, i);
        float s = lwq_round_to(__fdiv_rn(x, __fadd_rn(1.0f, expf(-x))), gdt);
        st(out, odt, i, __fmul_rn(s, y));
    }
}

__global__ void k_add(void *acc, lwq_dtype adt, const void *x, lwq_dtype xdt, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        st(acc, adt, i, __fadd_rn(ld(acc, adt, i), ld(x, xdt, i)));
}

static int cu_swiglu(void *vctx, const lwq_tensor *g, const lwq_tensor *u, lwq_tensor *out,
                     lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    int64_t n = lwq_tensor_numel(out);
    k_swiglu<<<grid_for(n, 256), 256, 0, c->stream>>>(g->data, g->dtype, u->data, u->dtype,
                                                       out->data, out->dtype, n);
    LAUNCHED("swiglu");
    return 0;
}

static int cu_add(void *vctx, lwq_tensor *acc, const lwq_tensor *x, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    int64_t n = lwq_tensor_numel(acc);
    k_add<<<grid_for(n, 256), 256, 0, c->stream>>>(acc->data, acc->dtype, x->data, x->dtype, n);
    LAUNCHED("add");
    return 0;
}

/* ---- attention (kernels/cuda/attention_cuda.cu) ------------------------------------------- */

static int cu_attention(void *vctx, const lwq_attn_args *a, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    int rc = lwq_cuda_attention(c->stream, c->attn_tiled, a, e);
    if (rc < 0)
        return rc;
    LAUNCHED("attention");
    return 0;
}

/* ---- Mamba2 (kernels/cuda/mamba2_cuda.cu) --------------------------------------------------- */

/* The scratch is the GEMM workspace: every user of it is on this stream, so the scan's kernels
 * finish before a later GEMM writes it (and ws_reserve synchronizes before it reallocates). */
static int cu_mamba2(void *vctx, const lwq_mamba2_args *a, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    LWQ_TRY(ws_reserve(c, lwq_cuda_mamba2_scratch(a), e));
    LWQ_TRY(lwq_cuda_mamba2(c->stream, c->device, c->ws, a, e));
    LAUNCHED("mamba2");
    return 0;
}

/* ---- MoE ------------------------------------------------------------------------------------- */

__global__ void k_route(const void *lg, lwq_dtype dt, int64_t n, int E, int k, int mode,
                        lwq_dtype wdt, int32_t *idx, float *w, float *ps, int32_t *qs)
{
    /* grid-stride: grid_for() caps the grid, so one thread may own several rows; row r's
     * scratch is ps/qs + r * E (the top-k works on a position array, kernels/topk.h) */
    LWQ_CUDA_GRID_STRIDE(r, n) lwq_route_row(lg, dt, r, E, k, mode, wdt, idx, w, ps + r * E, qs + r * E);
}

/* The scratch is the GEMM workspace, on this stream like every other user of it. */
static int cu_moe_route(void *vctx, const lwq_tensor *logits, int k, lwq_route_mode mode,
                        lwq_dtype wdt, lwq_tensor *idx, lwq_tensor *wts, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    int64_t n = logits->shape[0], E = logits->shape[1];
    LWQ_TRY(ws_reserve(c, (size_t)n * (size_t)E * (sizeof(float) + sizeof(int32_t)), e));
    float *ps = (float *)c->ws;
    int32_t *qs = (int32_t *)(ps + n * E);
    k_route<<<grid_for(n, 128), 128, 0, c->stream>>>(logits->data, logits->dtype, n, (int)E, k, (int)mode, wdt,
                                                      (int32_t *)idx->data, (float *)wts->data, ps, qs);
    LAUNCHED("moe_route");
    return 0;
}

__global__ void k_gather(const void *src, lwq_dtype sdt, int64_t nsrc, const int32_t *rows,
                         void *dst, lwq_dtype ddt, int64_t m, int64_t d, unsigned int *err)
{
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < m * d;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = t / d, col = t % d;
        int32_t r = rows[i];
        if (r < 0 || r >= nsrc) {
            atomicOr(err, 1u);
            st(dst, ddt, t, 0.0f);
            continue;
        }
        st(dst, ddt, t, ld(src, sdt, (int64_t)r * d + col));
    }
}

static int cu_gather_rows(void *vctx, const lwq_tensor *src, const lwq_tensor *rows,
                          lwq_tensor *dst, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    int64_t m = rows->shape[0], d = src->shape[1];
    k_gather<<<grid_for(m * d, 256), 256, 0, c->stream>>>(src->data, src->dtype, src->shape[0],
                                                           (const int32_t *)rows->data, dst->data,
                                                           dst->dtype, m, d, c->flags + 2);
    LAUNCHED("gather_rows");
    return 0;
}

__global__ void k_combine(const void *y, lwq_dtype ydt, int64_t my, const int32_t *slot,
                          const float *w, void *out, lwq_dtype odt, int64_t n, int64_t k, int64_t d)
{
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n * d;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t tok = t / d, col = t % d;
        float acc = 0.0f;
        for (int64_t s = 0; s < k; s++) {
            int32_t r = slot[tok * k + s];
            if (r < 0 || r >= my)
                continue;
            /* no FMA: the product rounds to out's dtype before the add (see k_rope) */
            acc = lwq_round_to(
                __fadd_rn(acc, lwq_round_to(__fmul_rn(w[tok * k + s], ld(y, ydt, r * d + col)), odt)),
                odt);
        }
        st(out, odt, t, acc);
    }
}

static int cu_moe_combine(void *vctx, const lwq_tensor *y, const lwq_tensor *slot_rows,
                          const lwq_tensor *wts, lwq_tensor *out, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    int64_t n = out->shape[0], d = out->shape[1];
    k_combine<<<grid_for(n * d, 256), 256, 0, c->stream>>>(
        y->data, y->dtype, y->shape[0], (const int32_t *)slot_rows->data,
        (const float *)wts->data, out->data, out->dtype, n, slot_rows->shape[1], d);
    LAUNCHED("moe_combine");
    return 0;
}

/* ---- amax ------------------------------------------------------------------------------------ */

__global__ void k_amax(const void *x, lwq_dtype dt, const uint8_t *valid, int64_t rows, int64_t d,
                       unsigned int *flags)
{
    __shared__ float sh[256];
    __shared__ int shn[256];
    float m = 0.0f;
    int nan = 0;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < rows * d;
         t += (int64_t)gridDim.x * blockDim.x) {
        if (valid && !valid[t / d])
            continue;
        float a = fabsf(ld(x, dt, t));
        nan |= a != a;
        m = a > m ? a : m;
    }
    sh[threadIdx.x] = m;
    shn[threadIdx.x] = nan;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
            shn[threadIdx.x] |= shn[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        /* non-negative floats order like their bit patterns: max is exact and order-free */
        atomicMax(flags, __float_as_uint(sh[0]));
        if (shn[0])
            atomicOr(flags + 1, 1u);
    }
}

static int cu_amax(void *vctx, const lwq_tensor *x, const lwq_tensor *row_valid, float *out,
                   lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    CU(cudaMemsetAsync(c->flags, 0, 2 * sizeof(unsigned int), c->stream), "amax reset");
    int64_t rows = x->shape[0], d = x->shape[1];
    k_amax<<<grid_for(rows * d, 256) > 4096 ? 4096 : grid_for(rows * d, 256), 256, 0,
             c->stream>>>(x->data, x->dtype,
                          row_valid ? (const uint8_t *)row_valid->data : NULL, rows, d, c->flags);
    LAUNCHED("amax");
    unsigned int f[2];
    CU(cudaMemcpyAsync(f, c->flags, sizeof f, cudaMemcpyDeviceToHost, c->stream), "amax read");
    CU(cudaStreamSynchronize(c->stream), "amax sync");
    float v;
    memcpy(&v, &f[0], 4);
    *out = f[1] ? NAN : v;
    return 0;
}

/* ---- table ----------------------------------------------------------------------------------- */

static void cu_destroy(void *vctx)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    if (!c)
        return;
    defer(c, cudaSetDevice(c->device), "set device");
    if (c->stream)
        defer(c, cudaStreamSynchronize(c->stream), "synchronize");
    if (c->ws)
        defer(c, cudaFree(c->ws), "free gemm workspace");
    if (c->flags)
        defer(c, cudaFree(c->flags), "free flags");
    if (c->blas && cublasDestroy(c->blas) != CUBLAS_STATUS_SUCCESS && c->deferred == cudaSuccess)
        c->deferred_what = "cublasDestroy";
    if (c->stream)
        defer(c, cudaStreamDestroy(c->stream), "stream destroy");
    /* destroy() returns nothing: the first failure of the backend's last calls goes to the log */
    if (c->deferred != cudaSuccess || c->deferred_what)
        LWQ_WARN("cuda backend teardown: %s failed: %s", c->deferred_what ? c->deferred_what : "?",
                 c->deferred != cudaSuccess ? cudaGetErrorString(c->deferred) : "cuBLAS error");
    free(c);
}

/* ---- strided copy ---------------------------------------------------------------------------- */

typedef struct cu_copy_geom {
    int ndim;
    int64_t shape[LWQ_TENSOR_MAX_DIMS], ss[LWQ_TENSOR_MAX_DIMS], ds[LWQ_TENSOR_MAX_DIMS];
} cu_copy_geom;

__global__ void k_copy(const void *src, lwq_dtype sdt, void *dst, lwq_dtype ddt, cu_copy_geom g,
                       int64_t n)
{
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = t, so = 0, dof = 0;
        for (int i = g.ndim - 1; i >= 0; i--) {
            int64_t k = rem % g.shape[i];
            rem /= g.shape[i];
            so += k * g.ss[i];
            dof += k * g.ds[i];
        }
        st(dst, ddt, dof, ld(src, sdt, so));
    }
}

static int cu_copy(void *vctx, const lwq_tensor *src, lwq_tensor *dst, lwq_error *e)
{
    cuda_ctx *c = (cuda_ctx *)vctx;
    CU(cudaSetDevice(c->device), "set device");
    cu_copy_geom g;
    g.ndim = src->ndim;
    int64_t n = 1;
    for (int i = 0; i < src->ndim; i++) {
        g.shape[i] = src->shape[i];
        g.ss[i] = src->stride[i];
        g.ds[i] = dst->stride[i];
        n *= src->shape[i];
    }
    k_copy<<<grid_for(n, 256), 256, 0, c->stream>>>(src->data, src->dtype, dst->data, dst->dtype,
                                                     g, n);
    LAUNCHED("copy");
    return 0;
}

/* Positional, like ggml's backend tables (this file is C++, where designated initializers
 * are not portable before C++20); the comments name each slot of lwq_backend_ops
 * (kernels/backend.h) in declaration order, and the size check below fails the build when a
 * slot is added or removed without this table following. */
static_assert(sizeof(lwq_backend_ops) == 26 * sizeof(void *), "cuda_ops: lwq_backend_ops changed; update the table");
static const lwq_backend_ops cuda_ops = {
    /* .name = */            "cuda",
    /* .device = */          LWQ_DEV_CUDA,
    /* .destroy = */         cu_destroy,
    /* .alloc = */           cu_alloc,
    /* .free = */            cu_free,
    /* .upload = */          cu_upload,
    /* .download = */        cu_download,
    /* .memset0 = */         cu_memset0,
    /* .gemm = */            cu_gemm,
    /* .rmsnorm = */         cu_rmsnorm,
    /* .rope = */            cu_rope,
    /* .attention = */       cu_attention,
    /* .swiglu = */          cu_swiglu,
    /* .add = */             cu_add,
    /* .moe_route = */       cu_moe_route,
    /* .gather_rows = */     cu_gather_rows,
    /* .moe_combine = */     cu_moe_combine,
    /* .amax = */            cu_amax,
    /* .synchronize = */     cu_sync,
    /* .mem_peak = */        cu_mem_peak,
    /* .host_register = */   cu_host_register,
    /* .host_unregister = */ cu_host_unregister,
    /* .pci_bus_id = */      cu_pci_bus_id,
    /* .copy = */            cu_copy,
    /* .gemm_grouped = */    NULL, /* the wrapper runs the groups one cuBLAS GEMM each */
    /* .mamba2 = */          cu_mamba2,
};

extern "C" int lwq_cuda_probe(lwq_error *e)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        (void)cudaGetLastError(); /* see CU() */
        int drv = 0, rt = 0;
        cudaDriverGetVersion(&drv);
        cudaRuntimeGetVersion(&rt);
        (void)cudaGetLastError();
        char why[96] = "";
        if (err == cudaErrorInsufficientDriver && drv > 0)
            snprintf(why, sizeof why, " (the driver supports CUDA %d.%d; lwq was built for CUDA %d.%d)",
                     drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
        else if (drv == 0)
            snprintf(why, sizeof why, " (no CUDA driver was found: libcuda.so is not loadable)");
        return lwq_errf(e, LWQ_EDEVICE, "cuda: cudaGetDeviceCount: %s [%s]%s", cudaGetErrorString(err),
                        cudaGetErrorName(err), why);
    }
    if (n == 0)
        return lwq_errf(e, LWQ_EDEVICE, "cuda: the driver reports no CUDA device");
    return n;
}

extern "C" int lwq_cuda_backend_create(lwq_backend *be, int device, lwq_error *e)
{
    be->ops = NULL;
    be->ctx = NULL;
    int n = lwq_cuda_probe(e);
    if (n < 0)
        return n; /* the runtime's reason: no driver, a driver too old, no device */
    if (device < 0 || device >= n)
        return lwq_errf(e, LWQ_EDEVICE, "cuda backend: device %d requested, %d present", device,
                        n);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!c)
        return lwq_errf(e, LWQ_ENOMEM, "cuda backend: no memory for the context");
    c->device = device;
    const char *am = getenv("LWQ_CUDA_ATTENTION");
    c->attn_tiled = am && !strcmp(am, "tiled");
    if (am && *am && strcmp(am, "tiled") && strcmp(am, "warp")) {
        free(c);
        return lwq_errf(e, LWQ_EINVAL, "LWQ_CUDA_ATTENTION=%s: expected warp or tiled", am);
    }
    int rc = 0;
    cudaError_t err;
    /* the flags are zeroed on the backend's own stream, and that stream is synchronized: a
     * legacy-stream cudaMemset is not ordered before work on a non-blocking stream, so the first
     * gather could have read (or its error flag been overwritten by) a memset still in flight */
    if ((err = cudaSetDevice(device)) != cudaSuccess ||
        (err = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (err = (cudaError_t)lwq_cuda_malloc((void **)&c->flags, 4 * sizeof(unsigned int))) != cudaSuccess ||
        (err = cudaMemsetAsync(c->flags, 0, 4 * sizeof(unsigned int), c->stream)) != cudaSuccess ||
        (err = cudaStreamSynchronize(c->stream)) != cudaSuccess) {
        (void)cudaGetLastError(); /* see CU() */
        rc = lwq_errf(e, LWQ_EDEVICE, "cuda backend on device %d: %s", device,
                      cudaGetErrorString(err));
    } else if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS ||
               cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS ||
               /* "FP32 accumulation, one rounding" (backend.h): without this flag cuBLAS may
                * round split-K partial sums to a BF16/F16 output type before adding them */
               cublasSetMathMode(c->blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                          CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) !=
                   CUBLAS_STATUS_SUCCESS) {
        rc = lwq_errf(e, LWQ_EDEVICE, "cuda backend on device %d: cuBLAS init failed", device);
    }
    if (rc < 0) {
        cu_destroy(c);
        return rc;
    }
    lwq_cuda_mem_sample(); /* the context and cuBLAS's handle */
    be->ops = &cuda_ops;
    be->ctx = c;
    return 0;
}
