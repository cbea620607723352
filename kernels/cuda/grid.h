/* kernels/cuda/grid.h — launch geometry shared by the CUDA kernels and the host tests that
 * emulate their index math (tests/kernels/cuda/test_cuda_grid.c): the capped grid size and the
 * grid-stride loop every element-wise or per-row kernel uses.  Plain C: no CUDA types here. */
#ifndef LWQ_KERNELS_CUDA_GRID_H
#define LWQ_KERNELS_CUDA_GRID_H

#include <stdint.h>

#include "core/data/dtype.h"

/* The most blocks a launch gets; kernels cover larger n with the grid-stride loop below. */
#define LWQ_GRID_MAX_BLOCKS ((int64_t)65535 * 16)

/* Blocks of `block` threads for n items: ceil(n / block), at least 1, at most LWQ_GRID_MAX_BLOCKS. */
LWQ_HD unsigned lwq_grid_for(int64_t n, int block)
{
    int64_t g = (n + block - 1) / block;
    return (unsigned)(g > LWQ_GRID_MAX_BLOCKS ? LWQ_GRID_MAX_BLOCKS : (g < 1 ? 1 : g));
}

/* for each item i in [0, n) that thread `tid` of block `bid` owns, in a grid of `gdim` blocks of
 * `bdim` threads: every item exactly once, whatever the grid size. */
#define LWQ_GRID_STRIDE(i, n, bid, bdim, gdim, tid)                                                \
    for (int64_t i = (int64_t)(bid) * (int64_t)(bdim) + (int64_t)(tid); i < (n);                   \
         i += (int64_t)(gdim) * (int64_t)(bdim))

#define LWQ_CUDA_GRID_STRIDE(i, n) LWQ_GRID_STRIDE(i, n, blockIdx.x, blockDim.x, gridDim.x, threadIdx.x)

#endif
