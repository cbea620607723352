/* kernels/cuda/attention_cuda.h — the CUDA attention kernels behind the backend's attention op
 * (kernels/backend.h lwq_backend_attention), and the element load/store helpers the backend's
 * kernels share.  Internal to kernels/cuda/ (C++ only).
 *
 * Two kernels with the same arithmetic, per query row and in the same order (so their outputs are
 * the same function of the inputs; only where K/V are read from differs):
 *   warp  (default): one warp per (sequence, head, query row); each row reads every visible key
 *         and value row from global memory: T^2/2 rows per head, at 512-2048 tokens the L2 /
 *         HBM traffic dominates.
 *   tiled (LWQ_CUDA_ATTENTION=tiled): a block per (sequence, head, tile of 32 query rows), 8
 *         warps of 4 rows each; K and V tiles of the head's kv group are staged in shared memory
 *         (as f32) once per block and read by all 32 rows, a 32x cut of the global reads.
 * Both: lanes over the head dimension, keys j <= i in ascending order, each product added into
 * the lane's partial sum in order, a fixed xor-shuffle tree across lanes, f32 online softmax
 * (m, l, expf) per key, invalid keys skipped, a row with no visible key written as zeros.  The
 * tiled kernel is opt-in until a GPU session shows it equal and faster (perf/gpu-check.sh rows
 * gpu-tests and bench-attention); see perf/RESULTS.md. */
#ifndef LWQ_KERNELS_CUDA_ATTENTION_CUDA_H
#define LWQ_KERNELS_CUDA_ATTENTION_CUDA_H

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "core/data/dtype.h"
#include "kernels/backend.h"
}

__device__ __forceinline__ float ld(const void *p, lwq_dtype t, int64_t i)
{
    return lwq_load_f(p, t, (size_t)i);
}

__device__ __forceinline__ void st(void *p, lwq_dtype t, int64_t i, float v)
{
    if (t == LWQ_F32)
        ((float *)p)[i] = v;
    else if (t == LWQ_BF16)
        ((uint16_t *)p)[i] = lwq_f32_to_bf16(v);
    else
        ((uint16_t *)p)[i] = lwq_f32_to_f16(v);
}

/* Enqueue the attention of `a` on stream s (tiled != 0: the tiled kernel).  Launch errors are
 * left for the caller's cudaGetLastError; argument limits (head_dim <= 512, grid sizes) are
 * returned as LWQ_EINVAL / LWQ_EUNSUPPORTED. */
int lwq_cuda_attention(cudaStream_t s, int tiled, const lwq_attn_args *a, lwq_error *e);

#endif
