// kernels/cuda/quant_cuda_internal.cuh — what quant_cuda.cu and quant_fp8_cuda.cu share: the status
// struct the kernels report bad input through, the loads, the per-call host wrapper.
#pragma once

#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// core/ headers have no C++ guards: give their declarations C linkage here
extern "C" {
#include "core/data/dtype.h"
#include "core/sys/error.h"
#include "core/sys/log.h"
#include "kernels/backend.h"
}
#include "kernels/cuda/module_cuda.h"
#include "kernels/cuda/quant_cuda.h"
#include "kernels/quant.h"
#include "kernels/quant_check.h"
#include "layout/format/quant_formats.h"

#define BLK LWQ_NVFP4_BLOCK
#define NONE 0xffffffffffffffffull

struct qstatus {
    unsigned long long bad;     // smallest flat index of a NaN/Inf element
    unsigned long long badamax; // smallest index of a bad static block amax / Hessian entry
    unsigned int over;          // largest block amax bits above the allowed global amax
    unsigned int amax;          // max |x| bits
};
static_assert(sizeof(qstatus) == 24 && offsetof(qstatus, over) == 16, "call::start() memsets this layout");

// ---- loads ----------------------------------------------------------------------------------

// 16 elements at flat offset off; vector loads when the base pointer allows them.
__device__ __forceinline__ void load16(const void *w, lwq_dtype dt, bool vec, int64_t off, float *x)
{
    if (dt == LWQ_BF16 || dt == LWQ_F16) {
        const uint16_t *s = (const uint16_t *)w + off;
        uint32_t u[8];
        if (vec) {
            uint4 a = ((const uint4 *)s)[0], b = ((const uint4 *)s)[1];
            u[0] = a.x, u[1] = a.y, u[2] = a.z, u[3] = a.w, u[4] = b.x, u[5] = b.y, u[6] = b.z, u[7] = b.w;
        } else {
            for (int k = 0; k < 8; k++)
                u[k] = (uint32_t)s[2 * k] | ((uint32_t)s[2 * k + 1] << 16);
        }
        for (int k = 0; k < 8; k++) {
            uint16_t lo = (uint16_t)(u[k] & 0xffffu), hi = (uint16_t)(u[k] >> 16);
            x[2 * k] = dt == LWQ_BF16 ? lwq_bf16_to_f32(lo) : lwq_f16_to_f32(lo);
            x[2 * k + 1] = dt == LWQ_BF16 ? lwq_bf16_to_f32(hi) : lwq_f16_to_f32(hi);
        }
    } else {
        const float *s = (const float *)w + off;
        if (vec) {
            for (int k = 0; k < 4; k++) {
                float4 v = ((const float4 *)s)[k];
                x[4 * k] = v.x, x[4 * k + 1] = v.y, x[4 * k + 2] = v.z, x[4 * k + 3] = v.w;
            }
        } else {
            for (int k = 0; k < BLK; k++)
                x[k] = s[k];
        }
    }
}

// max |x| bits of 16 values; false if one is NaN/Inf (and then the first is reported).
__device__ __forceinline__ bool amax16(const float *x, int64_t off, qstatus *st, uint32_t *m)
{
    uint32_t mm = 0;
    for (int k = 0; k < BLK; k++) {
        uint32_t a = lwq_f32_bits(x[k]) & 0x7fffffffu;
        mm = a > mm ? a : mm;
    }
    *m = mm;
    if (mm < 0x7f800000u)
        return true;
    for (int k = 0; k < BLK; k++)
        if ((lwq_f32_bits(x[k]) & 0x7fffffffu) >= 0x7f800000u) {
            atomicMin(&st->bad, (unsigned long long)(off + k));
            break;
        }
    return false;
}

__device__ __forceinline__ void store_f(void *out, lwq_dtype dt, int64_t i, float v)
{
    if (dt == LWQ_BF16)
        ((uint16_t *)out)[i] = lwq_f32_to_bf16(v);
    else if (dt == LWQ_F16)
        ((uint16_t *)out)[i] = lwq_f32_to_f16(v);
    else
        ((float *)out)[i] = v;
}

// ---- host side ------------------------------------------------------------------------------

namespace {

// The status struct of one call, allocated on the call's stream.
struct call {
    cudaStream_t s;
    qstatus *dev = nullptr;
    qstatus host;
    const char *name;
    lwq_error *err;
    int rc = 0;

    call(void *stream, const char *n, lwq_error *e) : s((cudaStream_t)stream), name(lwq_quant_name(n)), err(e)
    {
        host.bad = NONE;
        host.badamax = NONE;
        host.over = 0;
        host.amax = 0;
    }
    ~call()
    {
        // a destructor cannot return the failure: it goes to the log, and the last-error state
        // is reset so the next call's launch check does not take it for its own (see ok())
        if (dev && cudaFreeAsync(dev, s) != cudaSuccess)
            LWQ_WARN("tensor %s: cudaFreeAsync of the status buffer: %s", name,
                     cudaGetErrorString(cudaGetLastError()));
    }
    // Every failure resets the thread's last-error state (cudaGetLastError), so a caller that
    // tolerates it does not see it again as the next launch's error.
    bool ok(cudaError_t e, const char *what)
    {
        if (e == cudaSuccess)
            return true;
        (void)cudaGetLastError();
        if (rc == 0)
            rc = lwq_errf(err, LWQ_EDEVICE, "tensor %s: %s: %s", name, what, cudaGetErrorString(e));
        return false;
    }
    // bad / badamax = NONE (all ones), over / amax = 0: two memsets, no host round trip
    bool start()
    {
        return ok(cudaMallocAsync((void **)&dev, sizeof(qstatus), s), "cudaMallocAsync") && sampled() &&
               ok(cudaMemsetAsync(dev, 0xff, 2 * sizeof(unsigned long long), s), "status init") &&
               ok(cudaMemsetAsync(&dev->over, 0, 2 * sizeof(unsigned int), s), "status init");
    }
    bool sampled()
    {
        lwq_cuda_mem_sample();
        return true;
    }
    // After the kernels: launch errors, then read the status back (synchronizes the stream).
    bool finish()
    {
        return ok(cudaGetLastError(), "kernel launch") &&
               ok(cudaMemcpyAsync(&host, dev, sizeof host, cudaMemcpyDeviceToHost, s), "status download") &&
               ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    }
};

inline unsigned grid_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

inline bool aligned(const void *p, unsigned a) { return ((uintptr_t)p % a) == 0; }

} // namespace

namespace lwq_qcuda {
// max |x| of x: (n,); *bad = the first NaN/Inf index or -1 (then *amax is meaningless).  quant_cuda.cu.
int cuda_amax(const void *x, lwq_dtype dt, int64_t n, const char *name, float *amax, int64_t *bad, void *stream,
              lwq_error *err);
} // namespace lwq_qcuda
