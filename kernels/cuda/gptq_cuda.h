/* kernels/cuda/gptq_cuda.h — GPTQ (kernels/gptq.h) on a CUDA device.
 *
 * The same contract as lwq_gptq_factor / lwq_gptq_nvfp4 / lwq_gptq_fp8, with HOST buffers in and
 * out (the engine keeps the Hessian sums on the host): the factor is the host's preparation (dead
 * inputs, act order, dampening; lwq_gptq_prepare) followed by cuSOLVER's Cholesky (potrf), inverse
 * (potri) and Cholesky again; the sweep runs one thread per row through each 128-column block and
 * applies the block's errors to the columns after it with one cuBLAS DGEMM (the lazy batch
 * update).
 *
 * Not bit-equal to the CPU: cuSOLVER and cuBLAS sum in their own (blocked, fused multiply-add)
 * order.  Expected tolerance against the CPU on the same Hessian: factor entries within ~1e-12
 * relative (double precision, condition number bounded by the dampening), updated weights within
 * ~1e-14 relative, so a code differs only where a weight lands within that distance of an
 * E2M1/E4M3 rounding threshold (and then later columns of that row may follow it): on random
 * linears we expect more than 99.9% of codes equal and the layer-output error within 0.1% of the
 * CPU's; tests/kernels/cuda/test_gptq_cuda.c asserts >= 99% and 1%.  Deterministic on one GPU model
 * (cuSOLVER potrf/potri and cuBLAS DGEMM use no atomics). */
#ifndef LWQ_KERNELS_CUDA_GPTQ_CUDA_H
#define LWQ_KERNELS_CUDA_GPTQ_CUDA_H

#include <stdint.h>

#include "core/data/dtype.h"
#include "core/sys/error.h"
#include "kernels/gptq.h"

#ifdef __cplusplus
extern "C" {
#endif

int lwq_gptq_cuda_factor(const double *h_sum, int64_t ntokens, int64_t cols, const lwq_gptq_opts *o,
                         const char *name, int64_t *perm, double *u, uint8_t *dead, lwq_error *err);
int lwq_gptq_cuda_nvfp4(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                        const int64_t *perm, const double *u, const uint8_t *dead, const char *name, uint8_t *packed,
                        uint8_t *scale, float *ws2, lwq_error *err);
int lwq_gptq_cuda_fp8(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float amax, const int64_t *perm,
                      const double *u, const uint8_t *dead, const char *name, uint8_t *q, float *weight_scale,
                      lwq_error *err);

#ifdef __cplusplus
}
#endif

#endif
