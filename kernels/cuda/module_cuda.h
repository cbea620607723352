/* kernels/cuda/module_cuda.h — what the CUDA module's entry point (module_cuda.c) gathers from the
 * module's files, and the one allocation path every device allocation of the module takes.
 * Module-internal: the host side sees only the table of kernels/cuda_module.h. */
#ifndef LWQ_KERNELS_CUDA_MODULE_CUDA_H
#define LWQ_KERNELS_CUDA_MODULE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "core/sys/error.h"
#include "kernels/backend.h"
#include "kernels/gptq.h"
#include "kernels/quant_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* backend_cuda.cu: the device count or the runtime's reason; the backend on `device`. */
int lwq_cuda_probe(lwq_error *e);
int lwq_cuda_backend_create(lwq_backend *be, int device, lwq_error *e);
/* quant_ops_cuda.c, gptq_cuda.cu: the tables. */
const lwq_quant_ops *lwq_cuda_quant_table(void);
const lwq_gptq_ops *lwq_cuda_gptq_table(void);

/* mem_cuda.cu: the module's measured device peak.  lwq_cuda_mem_sample() reads cudaMemGetInfo
 * (the whole device, so the context, cuBLAS/cuSOLVER workspaces and anything the libraries
 * allocate count too) and keeps the maximum of total - free; it is called after every allocation
 * below, after creating library handles, before freeing a working set and at every synchronize.
 * lwq_cuda_malloc() is cudaMalloc + that sample; on failure it clears the runtime's last error
 * (a failed cudaMalloc is not sticky, but would otherwise be reported by the next unrelated
 * launch check) and returns the cudaError_t as an int.  Test hook: LWQ_CUDA_FAIL_ALLOC=k makes
 * the k-th call of the process ask cudaMalloc for more than any device has, so a test meets the
 * runtime's real failure and its error state (tests/kernels/cuda/test_gptq_cuda.c). */
void lwq_cuda_mem_sample(void);
uint64_t lwq_cuda_mem_peak(void);
int lwq_cuda_malloc(void **p, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
