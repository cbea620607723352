/* kernels/cuda/mamba2_cuda.h — the CUDA kernels behind the backend's mamba2 op (kernels/backend.h
 * lwq_backend_mamba2): conv1d + SiLU, dt, the sequential SSD scan and the grouped gated RMSNorm of
 * a Mamba2 mixer, in kernels/mamba2.h's order of arithmetic.  Internal to kernels/cuda/ (C++). */
#ifndef LWQ_KERNELS_CUDA_MAMBA2_CUDA_H
#define LWQ_KERNELS_CUDA_MAMBA2_CUDA_H

#include <cuda_runtime.h>
#include <stddef.h>

extern "C" {
#include "kernels/backend.h"
}

/* Float32 scratch the op needs (bytes): silu(conv) (n, C), dt (n, heads), the scan's y (n, I). */
size_t lwq_cuda_mamba2_scratch(const lwq_mamba2_args *a);

/* Enqueue the op on stream s with `ws` (lwq_cuda_mamba2_scratch bytes, 16-byte aligned) as its
 * scratch, on `device`.  Arguments are the checked ones of lwq_backend_mamba2.  Limits the kernels
 * have (a scan state P x N that does not fit one block's shared memory, too many blocks) are
 * LWQ_EUNSUPPORTED naming the sizes; launch errors are left for the caller's cudaGetLastError. */
int lwq_cuda_mamba2(cudaStream_t s, int device, void *ws, const lwq_mamba2_args *a, lwq_error *e);

#endif
