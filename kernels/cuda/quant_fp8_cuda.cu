// kernels/cuda/quant_fp8_cuda.cu — the FP8 kernels behind kernels/cuda/quant_cuda.h: per-tensor quantize,
// the mse search's per-row losses, dequantize.  Same arithmetic and order as the CPU code, as
// quant_cuda.cu says of its kernels.
#include "kernels/cuda/quant_cuda_internal.cuh"

// ---- kernels --------------------------------------------------------------------------------

// FP8: one thread per 8 consecutive elements of the flat tensor.
__global__ void k_fp8(const void *w, lwq_dtype dt, bool vec, int64_t n, float ws, uint8_t *q, qstatus *st)
{
    int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t i0 = g * 8;
    uint32_t m = 0;
    if (i0 < n) {
        int cnt = n - i0 < 8 ? (int)(n - i0) : 8;
        float x[8];
        if (vec && cnt == 8 && dt != LWQ_F32) {
            uint4 a = *(const uint4 *)((const uint16_t *)w + i0);
            uint32_t u[4] = {a.x, a.y, a.z, a.w};
            for (int k = 0; k < 4; k++) {
                uint16_t lo = (uint16_t)(u[k] & 0xffffu), hi = (uint16_t)(u[k] >> 16);
                x[2 * k] = dt == LWQ_BF16 ? lwq_bf16_to_f32(lo) : lwq_f16_to_f32(lo);
                x[2 * k + 1] = dt == LWQ_BF16 ? lwq_bf16_to_f32(hi) : lwq_f16_to_f32(hi);
            }
        } else {
            for (int k = 0; k < cnt; k++)
                x[k] = lwq_load_f(w, dt, (size_t)(i0 + k));
        }
        uint32_t lo = 0, hi = 0;
        for (int k = 0; k < cnt; k++) {
            uint32_t a = lwq_f32_bits(x[k]) & 0x7fffffffu;
            if (a >= 0x7f800000u)
                atomicMin(&st->bad, (unsigned long long)(i0 + k));
            m = a > m ? a : m;
            /* rounded to the weight's dtype before E4M3, as the CPU kernel (kernels/quant.h) */
            uint32_t byte = lwq_e4m3_from_f32(lwq_round_to(LWQ_FDIV(x[k], ws), dt));
            if (k < 4)
                lo |= byte << (8 * k);
            else
                hi |= byte << (8 * (k - 4));
        }
        if (vec && cnt == 8) {
            *(uint2 *)(q + i0) = make_uint2(lo, hi);
        } else {
            for (int k = 0; k < cnt; k++)
                q[i0 + k] = (uint8_t)((k < 4 ? lo >> (8 * k) : hi >> (8 * (k - 4))) & 0xffu);
        }
    }
    m = __reduce_max_sync(0xffffffffu, m);
    if ((threadIdx.x & 31) == 0)
        atomicMax(&st->amax, m);
}

// FP8 mse, per-row losses: one CTA per row, thread k < 39 evaluates candidate k over the row in
// the CPU's order (lane j % 16 accumulates element j ascending, in double; the products of two
// floats are exact in double, so FMA or not gives the same sums), then the lwq_sum16_tree order.
struct mse_scales {
    float s[LWQ_MSE_STEPS];
};

__global__ void k_fp8_mse_rows(const void *w, lwq_dtype dt, int64_t cols, mse_scales sc, double *row_loss)
{
    const int k = threadIdx.x;
    if (k >= LWQ_MSE_STEPS)
        return;
    const int64_t r = blockIdx.x;
    const float s = sc.s[k];
    double lane[16];
    for (int l = 0; l < 16; l++)
        lane[l] = 0.0;
    // steps of 16 with an unrolled inner loop keep every lane index static (registers, not local
    // memory); the tail adds element j to lane j % 16 like the CPU's
    const int64_t full = cols / 16 * 16;
    for (int64_t j0 = 0; j0 < full; j0 += 16) {
#pragma unroll
        for (int l = 0; l < 16; l++) {
            float x = lwq_load_f(w, dt, (size_t)(r * cols + j0 + l));
            float e = LWQ_FSUB(x, LWQ_FMUL(lwq_e4m3_to_f32_i32(lwq_e4m3_from_f32_i32(LWQ_FDIV(x, s))), s));
            lane[l] = __dadd_rn(lane[l], __dmul_rn((double)e, (double)e));
        }
    }
#pragma unroll
    for (int l = 0; l < 16; l++) {
        if (full + l < cols) {
            float x = lwq_load_f(w, dt, (size_t)(r * cols + full + l));
            float e = LWQ_FSUB(x, LWQ_FMUL(lwq_e4m3_to_f32_i32(lwq_e4m3_from_f32_i32(LWQ_FDIV(x, s))), s));
            lane[l] = __dadd_rn(lane[l], __dmul_rn((double)e, (double)e));
        }
    }
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++)
            lane[i] = __dadd_rn(lane[i], lane[i + h]);
    row_loss[r * LWQ_MSE_STEPS + k] = lane[0];
}

__global__ void k_fp8_dq(const uint8_t *q, float ws, int64_t n, lwq_dtype dt, void *out)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        store_f(out, dt, i, LWQ_FMUL(lwq_e4m3_to_f32(q[i]), ws));
}

using lwq_qcuda::cuda_amax;

extern "C" {

int lwq_quant_cuda_fp8(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float amax, const char *name,
                       uint8_t *q, float *weight_scale, void *stream, lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, w, dt, rows, cols, 0, err);
    if (rc < 0)
        return rc;
    if (!q || !weight_scale)
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: NULL output buffer", lwq_quant_name(name));
    float g;
    int zero = lwq_quant_check_global(name, amax, INFINITY, &g, err);
    if (zero < 0)
        return zero;
    const float ws = g / LWQ_E4M3_MAX; // host division, as on the CPU path
    const int64_t n = rows * cols;
    call c(stream, name, err);
    if (!c.start())
        return c.rc;
    k_fp8<<<grid_for((n + 7) / 8, 256), 256, 0, c.s>>>(w, dt, aligned(w, 16) && aligned(q, 8), n, ws, q, c.dev);
    if (!c.finish())
        return c.rc;
    if (c.host.bad != NONE)
        return lwq_quant_err_nonfinite(name, (int64_t)c.host.bad, cols, err);
    if (zero && c.host.amax != 0)
        return lwq_quant_err_over_global(name, lwq_bits_f32(c.host.amax), amax, err);
    *weight_scale = ws;
    return zero ? LWQ_QUANT_ZERO_TENSOR : 0;
}

int lwq_quant_cuda_fp8_mse(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const char *name,
                           float *amax_out, int *mult_index, void *stream, lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, w, dt, rows, cols, 0, err);
    if (rc < 0)
        return rc;
    if (!amax_out)
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: NULL output", lwq_quant_name(name));
    if (rows > 0x7fffffff)
        return lwq_errf(err, LWQ_EUNSUPPORTED, "tensor %s: %lld rows exceed the CUDA mse grid", lwq_quant_name(name),
                        (long long)rows);
    float amax;
    int64_t bad = -1;
    rc = cuda_amax(w, dt, rows * cols, name, &amax, &bad, stream, err);
    if (rc < 0)
        return rc;
    if (bad >= 0)
        return lwq_quant_err_nonfinite(name, bad, cols, err);
    if (amax == 0.0f) {
        *amax_out = 0.0f;
        if (mult_index)
            *mult_index = -1;
        return LWQ_QUANT_ZERO_TENSOR;
    }
    float g;
    rc = lwq_quant_check_global(name, amax * lwq_mse_multiplier(0), INFINITY, &g, err);
    if (rc < 0)
        return rc;
    float cand_amax[LWQ_MSE_STEPS];
    mse_scales sc;
    for (int k = 0; k < LWQ_MSE_STEPS; k++) { // host arithmetic, as on the CPU path
        cand_amax[k] = amax * lwq_mse_multiplier(k);
        sc.s[k] = cand_amax[k] / LWQ_E4M3_MAX;
    }
    size_t bytes = (size_t)rows * LWQ_MSE_STEPS * sizeof(double);
    double *loss = (double *)malloc(bytes);
    if (!loss)
        return lwq_errf(err, LWQ_ENOMEM, "tensor %s: no memory for the mse search's %lld row losses",
                        lwq_quant_name(name), (long long)rows);
    call c(stream, name, err);
    double *dloss = NULL;
    bool ok = c.ok(cudaMallocAsync((void **)&dloss, bytes, c.s), "cudaMallocAsync");
    if (ok) {
        lwq_cuda_mem_sample();
        k_fp8_mse_rows<<<(unsigned)rows, 64, 0, c.s>>>(w, dt, cols, sc, dloss);
        ok = c.ok(cudaGetLastError(), "kernel launch") &&
             c.ok(cudaMemcpyAsync(loss, dloss, bytes, cudaMemcpyDeviceToHost, c.s), "loss download") &&
             c.ok(cudaStreamSynchronize(c.s), "cudaStreamSynchronize");
        ok = c.ok(cudaFreeAsync(dloss, c.s), "cudaFreeAsync") && ok;
    }
    if (!ok) {
        free(loss);
        return c.rc;
    }
    int best = lwq_quant_mse_argmin(loss, rows, LWQ_MSE_STEPS); /* rows in ascending order */
    free(loss);
    /* searched in F32, kept in the weight's dtype: Model Optimizer's MseCalibrator multiplies
     * the amax (a 0-dim tensor of the weight's dtype) by an F32 multiplier, which stays F32 in
     * torch, then stores the winner into the weight quantizer's amax buffer, of the weight's
     * dtype: a BF16 weight exports a BF16 amax / 448 */
    *amax_out = lwq_round_to(cand_amax[best], dt);
    if (mult_index)
        *mult_index = best;
    return 0;
}

int lwq_quant_cuda_fp8_dequant(const uint8_t *q, float weight_scale, int64_t n, lwq_dtype out_dt, void *out,
                               void *stream, lwq_error *err)
{
    int rc = lwq_quant_check_dq(q, out, out_dt, 1, n, 0, weight_scale, err);
    if (rc < 0)
        return rc;
    call c(stream, "dequantize", err);
    k_fp8_dq<<<grid_for(n, 256), 256, 0, c.s>>>(q, weight_scale, n, out_dt, out);
    if (!c.ok(cudaGetLastError(), "kernel launch") || !c.ok(cudaStreamSynchronize(c.s), "cudaStreamSynchronize"))
        return c.rc;
    return 0;
}

} // extern "C"
