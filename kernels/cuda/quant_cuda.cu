// kernels/cuda/quant_cuda.cu — CUDA kernels behind kernels/cuda/quant_cuda.h (the FP8 ones are in
// quant_fp8_cuda.cu, what both share in quant_cuda_internal.cuh).
//
// Each kernel evaluates the same LWQ_HD functions of layout/format/quant_formats.h as the CPU code, in
// the same order per output element; the float operations there are the `_rn` intrinsics in
// device code, so every byte matches the CPU reference.  Mapping: one thread per 16-element
// block (NVFP4 quantize, sweep, dequant), per 8 elements (FP8), per Hessian entry (accumulate).
// Bad input is reported through a small status struct in device memory (atomicMin of the first
// bad index, atomicMax of an amax), read back before the wrapper returns.
#include "kernels/cuda/quant_cuda_internal.cuh"

// ---- kernels --------------------------------------------------------------------------------

__global__ void k_amax(const void *x, lwq_dtype dt, int64_t n, qstatus *st)
{
    uint32_t m = 0;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint32_t a = lwq_f32_bits(lwq_load_f(x, dt, (size_t)i)) & 0x7fffffffu;
        if (a >= 0x7f800000u)
            atomicMin(&st->bad, (unsigned long long)i);
        m = a > m ? a : m;
    }
    m = __reduce_max_sync(0xffffffffu, m);
    if ((threadIdx.x & 31) == 0)
        atomicMax(&st->amax, m);
}

// NVFP4 max (block_amax == NULL) or static path.  One thread per block of 16.
__global__ void k_nvfp4(const void *w, lwq_dtype dt, bool vec, int64_t nblk, float ws2, uint32_t limit,
                        const float *block_amax, float global_eff, uint8_t *packed, uint8_t *scale, qstatus *st)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nblk)
        return;
    float x[BLK];
    uint32_t m;
    load16(w, dt, vec, i * BLK, x);
    if (!amax16(x, i * BLK, st, &m))
        return;
    if (m > limit)
        atomicMax(&st->over, m);
    uint8_t s;
    if (block_amax) {
        float ba = block_amax[i];
        if (!(isfinite(ba) && ba >= 0.0f)) {
            atomicMin(&st->badamax, (unsigned long long)i);
            return;
        }
        s = lwq_nvfp4_scale_static(ba, global_eff);
    } else {
        s = lwq_nvfp4_scale_max(lwq_bits_f32(m), ws2);
    }
    scale[i] = s;
    float d = lwq_nvfp4_block_div(s, ws2);
    uint32_t lo = 0, hi = 0; // little-endian: element k in bits 4k..4k+3
    for (int k = 0; k < 8; k++) {
        lo |= (uint32_t)lwq_e2m1_from_f32(LWQ_FDIV(x[k], d)) << (4 * k);
        hi |= (uint32_t)lwq_e2m1_from_f32(LWQ_FDIV(x[k + 8], d)) << (4 * k);
    }
    uint8_t *o = packed + i * 8;
    if (vec) {
        *(uint2 *)o = make_uint2(lo, hi);
    } else {
        for (int k = 0; k < 4; k++) {
            o[k] = (uint8_t)(lo >> (8 * k));
            o[k + 4] = (uint8_t)(hi >> (8 * k));
        }
    }
}

// The E2M1 thresholds of the 126 scale bytes' divisors, computed on the host by the same
// LWQ_HD function the CPU path calls and passed by value (3.5 KB of kernel parameters).
struct thr_tab {
    float b[LWQ_E4M3_NPOS + 1][LWQ_E2M1_NTHR];
};
#define THR_N ((LWQ_E4M3_NPOS + 1) * LWQ_E2M1_NTHR)

// The sweep's loss for divisor d: kernels/cpu/quant/quant_cpu.c's sweep_loss, operation for operation
// (magnitudes + thresholds rounding, sign restored for the Hessian form, (H dw)_i summed over j
// in ascending order, the halving tree), hence also equal to lwq_nvfp4_block_sqerr_ref / _herr_ref.
// b: the divisor's E2M1 thresholds (lwq_e2m1_thresholds), so no division per element.
// h is read through a volatile pointer so that the compiler re-reads the 256 shared-memory
// entries per candidate instead of hoisting them into (and spilling) registers.
template <bool HESS>
__device__ __forceinline__ float sweep_loss(const float *x, const float *ax, float d, const float *b,
                                            const volatile float *h)
{
    float dw[BLK], t[BLK];
    for (int i = 0; i < BLK; i++)
        dw[i] = LWQ_FSUB(ax[i], LWQ_FMUL(lwq_e2m1_round_thr(ax[i], b), d));
    if (HESS) {
        for (int i = 0; i < BLK; i++)
            dw[i] = x[i] < 0.0f ? -dw[i] : dw[i];
        for (int i = 0; i < BLK; i++) {
            float hd = 0.0f;
            for (int j = 0; j < BLK; j++)
                hd = LWQ_FADD(hd, LWQ_FMUL(h[i * BLK + j], dw[j]));
            t[i] = LWQ_FMUL(dw[i], hd);
        }
    } else {
        for (int i = 0; i < BLK; i++)
            t[i] = LWQ_FMUL(dw[i], dw[i]);
    }
    return lwq_sum16_tree(t);
}

// Scale sweep: blockIdx.x = input block b, threads over rows; the block's Hessian and the 126
// candidate divisors sit in shared memory.  One instantiation per loss keeps the plain sweep's
// register count low.
template <bool HESS>
__global__ void k_sweep(const void *w, lwq_dtype dt, bool vec, int64_t rows, int64_t cols, float ws2,
                        uint32_t limit, const float *hessian, float global_eff, const __grid_constant__ thr_tab tab,
                        float *out_amax, uint8_t *out_scale, qstatus *st)
{
    __shared__ float hs[BLK * BLK];
    __shared__ float dtab[LWQ_E4M3_NPOS + 1];
    __shared__ float sthr[THR_N];
    for (int k = threadIdx.x; k < THR_N; k += blockDim.x)
        sthr[k] = tab.b[k / LWQ_E2M1_NTHR][k % LWQ_E2M1_NTHR];
    const int64_t b = blockIdx.x, nb = cols / BLK;
    for (int k = threadIdx.x; k < BLK * BLK; k += blockDim.x)
        hs[k] = HESS ? hessian[b * BLK * BLK + k] : 0.0f;
    for (int v = threadIdx.x; v <= LWQ_E4M3_NPOS; v += blockDim.x)
        dtab[v] = v ? lwq_nvfp4_block_div((uint8_t)v, ws2) : 0.0f;
    __syncthreads();
    int64_t r = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    const int64_t off = r * cols + b * BLK;
    float x[BLK];
    uint32_t m;
    load16(w, dt, vec, off, x);
    if (!amax16(x, off, st, &m))
        return;
    if (m > limit)
        atomicMax(&st->over, m);
    float ax[BLK];
    for (int k = 0; k < BLK; k++)
        ax[k] = fabsf(x[k]);
    const float bamax = lwq_bits_f32(m);
    // The CPU's exact saturation pruning (kernels/cpu/quant/quant_cpu.c sweep_rows, which proves it):
    // for the plain squared error, a candidate d with bamax >= 12 d has a loss of at least
    // (bamax - 6 d)^2 (1 - 2^-21); when that exceeds the loss `ref` of the smallest unsaturated
    // candidate v0, it cannot be the best, so skipping it changes neither the argmin nor ties.
    // The bound is evaluated in double with the `_rn` intrinsics, as the CPU evaluates it.
    double ref = INFINITY;
    if (!HESS) {
        int v0 = 1;
        while (v0 < LWQ_E4M3_NPOS && __dmul_rn(6.0, (double)dtab[v0]) < (double)bamax)
            v0++;
        ref = (double)sweep_loss<HESS>(x, ax, dtab[v0], sthr + v0 * LWQ_E2M1_NTHR, hs);
    }
    int best = 0;
    float best_loss = 0.0f;
#pragma unroll 1
    for (int v = 1; v <= LWQ_E4M3_NPOS; v++) {
        bool skip = false;
        if (!HESS && (double)bamax >= __dmul_rn(12.0, (double)dtab[v])) {
            double dwt = __dsub_rn((double)bamax, __dmul_rn(6.0, (double)dtab[v]));
            skip = __dmul_rn(__dmul_rn(dwt, dwt), 1.0 - 0x1p-21) > ref;
        }
        if (!skip) {
            float l = sweep_loss<HESS>(x, ax, dtab[v], sthr + v * LWQ_E2M1_NTHR, hs);
            if (best == 0 || l < best_loss) { // strict: ties keep the smaller byte
                best = v;
                best_loss = l;
            }
        }
        if (bamax < sthr[v * LWQ_E2M1_NTHR]) // all codes 0 here and beyond: exact stop (CPU: sweep_rows)
            break;
    }
    if (out_scale)
        out_scale[r * nb + b] = (uint8_t)best;
    if (out_amax)
        out_amax[r * nb + b] = lwq_nvfp4_sweep_amax((uint8_t)best, global_eff);
}

// The 39 multipliers, computed on the host (the same function the CPU path calls) and passed by value.
struct mse_mults {
    float m[LWQ_MSE_STEPS];
};

// Per-block mse (lwq_quant_nvfp4_mse): one thread per block, the CPU's loop and skip rule.
__global__ void k_mse_blocks(const void *w, lwq_dtype dt, bool vec, int64_t nblk, float ws2, uint32_t limit,
                             float global_eff, mse_mults mm, const __grid_constant__ thr_tab tab, float *out_amax,
                             qstatus *st)
{
    __shared__ float sthr[THR_N];
    for (int k = threadIdx.x; k < THR_N; k += blockDim.x)
        sthr[k] = tab.b[k / LWQ_E2M1_NTHR][k % LWQ_E2M1_NTHR];
    __syncthreads();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nblk)
        return;
    float x[BLK], ax[BLK];
    uint32_t m;
    load16(w, dt, vec, i * BLK, x);
    if (!amax16(x, i * BLK, st, &m))
        return;
    if (m > limit)
        atomicMax(&st->over, m);
    for (int k = 0; k < BLK; k++)
        ax[k] = fabsf(x[k]);
    const float bamax = lwq_bits_f32(m);
    float best_a = LWQ_FMUL(bamax, mm.m[0]), best_loss = 0.0f;
    int prev = -1;
#pragma unroll 1
    for (int k = 0; k < LWQ_MSE_STEPS; k++) {
        float a = LWQ_FMUL(bamax, mm.m[k]);
        int s = lwq_nvfp4_scale_static(a, global_eff);
        if (s == prev) // same byte, same loss: a tie, which the first candidate wins
            continue;
        prev = s;
        float l = sweep_loss<false>(x, ax, lwq_nvfp4_block_div((uint8_t)s, ws2), sthr + s * LWQ_E2M1_NTHR, NULL);
        if (k == 0 || l < best_loss) {
            best_a = a;
            best_loss = l;
        }
        if (bamax < sthr[s * LWQ_E2M1_NTHR]) // all codes 0 here and beyond
            break;
    }
    out_amax[i] = best_a;
}

__global__ void k_nvfp4_dq(const uint8_t *packed, const uint8_t *scale, float ws2, int64_t nblk, lwq_dtype dt,
                           void *out)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nblk)
        return;
    float d = lwq_nvfp4_block_div(scale[i], ws2);
    for (int k = 0; k < BLK; k++) {
        uint8_t byte = packed[i * 8 + k / 2];
        uint8_t c = (uint8_t)((k & 1) ? byte >> 4 : byte & 15);
        store_f(out, dt, i * BLK + k, LWQ_FMUL(lwq_e2m1_to_f32(c), d));
    }
}

// One thread per Hessian entry (b, i, j); the entry is summed in token order, as on the CPU.
// Products of two floats are exact in double, so FMA or not gives the same sum.
__global__ void k_hess(const void *x, lwq_dtype dt, int64_t tokens, int64_t cols, double *h, qstatus *st)
{
    const int64_t b = blockIdx.x;
    const int i = threadIdx.x / BLK, j = threadIdx.x % BLK;
    double acc = h[b * BLK * BLK + threadIdx.x];
    for (int64_t t = 0; t < tokens; t++) {
        float xi = lwq_load_f(x, dt, (size_t)(t * cols + b * BLK + i));
        float xj = lwq_load_f(x, dt, (size_t)(t * cols + b * BLK + j));
        if (j == 0 && !isfinite(xi))
            atomicMin(&st->bad, (unsigned long long)(t * cols + b * BLK + i));
        acc = __dadd_rn(acc, __dmul_rn((double)xi, (double)xj));
    }
    h[b * BLK * BLK + threadIdx.x] = acc;
}

__global__ void k_hess_fin(const double *hs, double n, int64_t count, float *h, qstatus *st)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count)
        return;
    float v = __double2float_rn(__ddiv_rn(hs[i], n));
    if (!isfinite(v))
        atomicMin(&st->badamax, (unsigned long long)i);
    h[i] = v;
}

// ---- host side ------------------------------------------------------------------------------

namespace {

// Host side, as kernels/cpu/quant/quant_cpu.c's search_thresholds: byte v's divisor v * ws2.
void search_thresholds(float ws2, thr_tab *t)
{
    for (int i = 0; i < LWQ_E2M1_NTHR; i++)
        t->b[0][i] = INFINITY;
    for (int v = 1; v <= LWQ_E4M3_NPOS; v++)
        lwq_e2m1_thresholds(lwq_nvfp4_block_div((uint8_t)v, ws2), t->b[v]);
}

} // namespace

namespace lwq_qcuda {

int cuda_amax(const void *x, lwq_dtype dt, int64_t n, const char *name, float *amax, int64_t *bad, void *stream,
              lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, x, dt, 1, n, 0, err);
    if (rc < 0)
        return rc;
    call c(stream, name, err);
    if (!c.start())
        return c.rc;
    int64_t blocks = (n + 255) / 256;
    k_amax<<<(unsigned)(blocks < 8192 ? blocks : 8192), 256, 0, c.s>>>(x, dt, n, c.dev);
    if (!c.finish())
        return c.rc;
    *bad = c.host.bad != NONE ? (int64_t)c.host.bad : -1;
    *amax = lwq_bits_f32(c.host.amax);
    return 0;
}

} // namespace lwq_qcuda
using lwq_qcuda::cuda_amax;

namespace {

int nvfp4_run(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const float *block_amax, float global_amax,
              const char *name, uint8_t *packed, uint8_t *scale, float *ws2, void *stream, lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, w, dt, rows, cols, 1, err);
    if (rc < 0)
        return rc;
    if (!packed || !scale || !ws2)
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: NULL output buffer", lwq_quant_name(name));
    float g;
    int zero = lwq_quant_check_global(name, global_amax, INFINITY, &g, err);
    if (zero < 0)
        return zero;
    const float w2 = lwq_nvfp4_ws2(g);
    const int64_t nblk = rows * cols / BLK;
    const bool vec = aligned(w, 16) && aligned(packed, 8);
    call c(stream, name, err);
    if (!c.start())
        return c.rc;
    k_nvfp4<<<grid_for(nblk, 256), 256, 0, c.s>>>(w, dt, vec, nblk, w2, lwq_f32_bits(global_amax), block_amax, g,
                                                   packed, scale, c.dev);
    if (!c.finish())
        return c.rc;
    if (c.host.bad != NONE)
        return lwq_quant_err_nonfinite(name, (int64_t)c.host.bad, cols, err);
    if (c.host.badamax != NONE) {
        int64_t i = (int64_t)c.host.badamax, nb = cols / BLK;
        float v = NAN;
        // the value is only for the message: a failed read must not leave the runtime's last
        // error set for the next, unrelated launch check to report as its own
        if (cudaMemcpyAsync(&v, block_amax + i, sizeof v, cudaMemcpyDeviceToHost, c.s) != cudaSuccess ||
            cudaStreamSynchronize(c.s) != cudaSuccess) {
            (void)cudaGetLastError();
            v = NAN;
        }
        return lwq_errf(err, LWQ_ENUMERIC, "tensor %s: block amax %g at block [%lld, %lld] is not finite and >= 0",
                        lwq_quant_name(name), (double)v, (long long)(i / nb), (long long)(i % nb));
    }
    if (c.host.over != 0)
        return lwq_quant_err_over_global(name, lwq_bits_f32(c.host.over), global_amax, err);
    *ws2 = w2;
    return zero ? LWQ_QUANT_ZERO_TENSOR : 0;
}

} // namespace

extern "C" {

int lwq_quant_cuda_device_count(void)
{
    int n = lwq_cuda_probe(NULL); // the reason, when there is none: lwq_backend_cuda_probe
    return n > 0 ? n : 0;
}

int lwq_quant_cuda_amax(const void *x, lwq_dtype dt, int64_t n, const char *name, float *amax, void *stream,
                        lwq_error *err)
{
    int64_t bad = -1;
    int rc = cuda_amax(x, dt, n, name, amax, &bad, stream, err);
    if (rc == 0 && bad >= 0)
        return lwq_errf(err, LWQ_ENUMERIC, "tensor %s: non-finite value (NaN or Inf) at element %lld",
                        lwq_quant_name(name), (long long)bad);
    return rc;
}

int lwq_quant_cuda_nvfp4_max(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                             const char *name, uint8_t *packed, uint8_t *scale, float *ws2, void *stream,
                             lwq_error *err)
{
    return nvfp4_run(w, dt, rows, cols, NULL, global_amax, name, packed, scale, ws2, stream, err);
}

int lwq_quant_cuda_nvfp4_static(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const float *block_amax,
                                float global_amax, const char *name, uint8_t *packed, uint8_t *scale, float *ws2,
                                void *stream, lwq_error *err)
{
    if (!block_amax)
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: static NVFP4 needs per-block amax values", lwq_quant_name(name));
    return nvfp4_run(w, dt, rows, cols, block_amax, global_amax, name, packed, scale, ws2, stream, err);
}

int lwq_quant_cuda_nvfp4_sweep(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                               const float *hessian, const char *name, float *block_amax, uint8_t *scale,
                               void *stream, lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, w, dt, rows, cols, 1, err);
    if (rc < 0)
        return rc;
    float g;
    int zero = lwq_quant_check_global(name, global_amax, LWQ_QUANT_SEARCH_AMAX_MAX, &g, err);
    if (zero < 0)
        return zero;
    const int threads = 128;
    if ((rows + threads - 1) / threads > 65535)
        return lwq_errf(err, LWQ_EUNSUPPORTED, "tensor %s: %lld rows exceed the CUDA sweep's grid",
                        lwq_quant_name(name), (long long)rows);
    call c(stream, name, err);
    if (!c.start())
        return c.rc;
    if (hessian) {
        // the CPU refuses a non-finite Hessian entry up front: same check on a host copy
        // (cols * 16 floats, small next to the weight)
        size_t bytes = (size_t)cols * BLK * sizeof(float);
        float *hh = (float *)malloc(bytes);
        if (!hh)
            return lwq_errf(err, LWQ_ENOMEM, "tensor %s: no memory for a host copy of the Hessian",
                            lwq_quant_name(name));
        bool good = c.ok(cudaMemcpyAsync(hh, hessian, bytes, cudaMemcpyDeviceToHost, c.s), "Hessian download") &&
                    c.ok(cudaStreamSynchronize(c.s), "cudaStreamSynchronize");
        int64_t badi = -1;
        for (int64_t i = 0; good && i < cols * BLK; i++)
            if (!isfinite(hh[i])) {
                badi = i;
                break;
            }
        free(hh);
        if (!good)
            return c.rc;
        if (badi >= 0)
            return lwq_errf(err, LWQ_ENUMERIC, "tensor %s: Hessian entry %lld of input block %lld is not finite",
                            lwq_quant_name(name), (long long)(badi % (BLK * BLK)), (long long)(badi / (BLK * BLK)));
    }
    dim3 grid((unsigned)(cols / BLK), (unsigned)((rows + threads - 1) / threads));
    thr_tab tab;
    search_thresholds(lwq_nvfp4_ws2(g), &tab);
    if (hessian)
        k_sweep<true><<<grid, threads, 0, c.s>>>(w, dt, aligned(w, 16), rows, cols, lwq_nvfp4_ws2(g),
                                                  lwq_f32_bits(global_amax), hessian, g, tab, block_amax, scale,
                                                  c.dev);
    else
        k_sweep<false><<<grid, threads, 0, c.s>>>(w, dt, aligned(w, 16), rows, cols, lwq_nvfp4_ws2(g),
                                                   lwq_f32_bits(global_amax), hessian, g, tab, block_amax, scale,
                                                   c.dev);
    if (!c.finish())
        return c.rc;
    if (c.host.bad != NONE)
        return lwq_quant_err_nonfinite(name, (int64_t)c.host.bad, cols, err);
    if (c.host.over != 0)
        return lwq_quant_err_over_global(name, lwq_bits_f32(c.host.over), global_amax, err);
    return zero ? LWQ_QUANT_ZERO_TENSOR : 0;
}

int lwq_quant_cuda_nvfp4_mse(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                             const char *name, float *block_amax, void *stream, lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, w, dt, rows, cols, 1, err);
    if (rc < 0)
        return rc;
    if (!block_amax)
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: NULL output buffer", lwq_quant_name(name));
    float g;
    int zero = lwq_quant_check_global(name, global_amax, LWQ_QUANT_SEARCH_AMAX_MAX, &g, err);
    if (zero < 0)
        return zero;
    const int64_t nblk = rows * cols / BLK;
    mse_mults mm;
    for (int k = 0; k < LWQ_MSE_STEPS; k++)
        mm.m[k] = lwq_mse_multiplier(k);
    call c(stream, name, err);
    if (!c.start())
        return c.rc;
    thr_tab tab;
    search_thresholds(lwq_nvfp4_ws2(g), &tab);
    k_mse_blocks<<<grid_for(nblk, 128), 128, 0, c.s>>>(w, dt, aligned(w, 16), nblk, lwq_nvfp4_ws2(g),
                                                        lwq_f32_bits(global_amax), g, mm, tab, block_amax, c.dev);
    if (!c.finish())
        return c.rc;
    if (c.host.bad != NONE)
        return lwq_quant_err_nonfinite(name, (int64_t)c.host.bad, cols, err);
    if (c.host.over != 0)
        return lwq_quant_err_over_global(name, lwq_bits_f32(c.host.over), global_amax, err);
    return zero ? LWQ_QUANT_ZERO_TENSOR : 0;
}

int lwq_quant_cuda_nvfp4_dequant(const uint8_t *packed, const uint8_t *scale, float ws2, int64_t rows, int64_t cols,
                                 lwq_dtype out_dt, void *out, void *stream, lwq_error *err)
{
    int rc = lwq_quant_check_dq(packed, out, out_dt, rows, cols, 1, ws2, err);
    if (rc < 0)
        return rc;
    if (!scale)
        return lwq_errf(err, LWQ_EINVAL, "dequantize: NULL block scales");
    call c(stream, "dequantize", err);
    int64_t nblk = rows * cols / BLK;
    k_nvfp4_dq<<<grid_for(nblk, 256), 256, 0, c.s>>>(packed, scale, ws2, nblk, out_dt, out);
    if (!c.ok(cudaGetLastError(), "kernel launch") || !c.ok(cudaStreamSynchronize(c.s), "cudaStreamSynchronize"))
        return c.rc;
    return 0;
}

int lwq_quant_cuda_hessian_accumulate(const void *x, lwq_dtype dt, int64_t tokens, int64_t cols, double *h_sum,
                                      const char *name, void *stream, lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, x, dt, tokens, cols, 1, err);
    if (rc < 0)
        return rc;
    if (!h_sum)
        return lwq_errf(err, LWQ_EINVAL, "activations of %s: NULL Hessian buffer", lwq_quant_name(name));
    call c(stream, name, err);
    if (!c.start())
        return c.rc;
    k_hess<<<(unsigned)(cols / BLK), BLK * BLK, 0, c.s>>>(x, dt, tokens, cols, h_sum, c.dev);
    if (!c.finish())
        return c.rc;
    if (c.host.bad != NONE)
        return lwq_errf(err, LWQ_ENUMERIC, "activations of %s: non-finite value at token %lld, column %lld",
                        lwq_quant_name(name), (long long)(c.host.bad / cols), (long long)(c.host.bad % cols));
    return 0;
}

int lwq_quant_cuda_hessian_finalize(const double *h_sum, int64_t ntokens, int64_t cols, float *h, const char *name,
                                    void *stream, lwq_error *err)
{
    if (ntokens <= 0)
        return lwq_errf(err, LWQ_ENUMERIC, "Hessian of %s: no calibration tokens were accumulated",
                        lwq_quant_name(name));
    if (cols <= 0 || cols % BLK || !h_sum || !h)
        return lwq_errf(err, LWQ_EINVAL, "Hessian of %s: bad in-features %lld or NULL buffer", lwq_quant_name(name),
                        (long long)cols);
    call c(stream, name, err);
    if (!c.start())
        return c.rc;
    int64_t count = cols * BLK;
    k_hess_fin<<<grid_for(count, 256), 256, 0, c.s>>>(h_sum, (double)ntokens, count, h, c.dev);
    if (!c.finish())
        return c.rc;
    if (c.host.badamax != NONE)
        return lwq_errf(err, LWQ_ENUMERIC, "Hessian of %s: entry %lld of input block %lld overflows float32",
                        lwq_quant_name(name), (long long)(c.host.badamax % (BLK * BLK)),
                        (long long)(c.host.badamax / (BLK * BLK)));
    return 0;
}

} // extern "C"
