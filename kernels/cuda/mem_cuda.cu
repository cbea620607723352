/* kernels/cuda/mem_cuda.cu — the module's device-memory peak and its one cudaMalloc (see
 * module_cuda.h). */
#include <cuda_runtime.h>
#include <stdlib.h>

#include "kernels/cuda/module_cuda.h"

static unsigned long long g_peak;
static int g_allocs;

extern "C" void lwq_cuda_mem_sample(void)
{
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        (void)cudaGetLastError(); /* only a statistic */
        return;
    }
    unsigned long long used = (unsigned long long)(total_b - free_b);
    unsigned long long cur = __atomic_load_n(&g_peak, __ATOMIC_RELAXED);
    while (used > cur && !__atomic_compare_exchange_n(&g_peak, &cur, used, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

extern "C" uint64_t lwq_cuda_mem_peak(void) { return __atomic_load_n(&g_peak, __ATOMIC_RELAXED); }

extern "C" int lwq_cuda_malloc(void **p, size_t bytes)
{
    const char *fail = getenv("LWQ_CUDA_FAIL_ALLOC");
    int n = __atomic_add_fetch(&g_allocs, 1, __ATOMIC_RELAXED);
    if (fail && *fail && n == atoi(fail))
        bytes = (size_t)1 << 62; /* more than any device has: the runtime's own failure */
    cudaError_t err = cudaMalloc(p, bytes ? bytes : 1);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return (int)err;
    }
    lwq_cuda_mem_sample();
    return 0;
}
