/* kernels/quant_ops.h — the weight quantizers as a table of function pointers, like the compute
 * backend's (kernels/backend.h), so a caller picks where they run once instead of in #ifdefs.
 *
 * Two tables exist: the host one (kernels/cpu/quant/quant_ops_cpu.c: the kernels/quant.h functions)
 * and, in a CUDA build, the CUDA one in the CUDA module (kernels/cuda/quant_ops_cuda.c:
 * kernels/cuda/quant_cuda.h).
 * Every slot has the contract of the kernels/quant.h function of the same name (same bytes, same
 * argument checks, same messages and codes, LWQ_QUANT_ZERO_TENSOR for an all-zero weight); the
 * array arguments live where the table's `device` says (host memory or device memory), the scalars
 * (amax, returned weight scales) are host values.  `stream` is the CUDA stream (a cudaStream_t,
 * NULL = the legacy stream); the host table ignores it.  engine/quant/qops.h moves weights to the
 * table's memory and back. */
#ifndef LWQ_KERNELS_QUANT_OPS_H
#define LWQ_KERNELS_QUANT_OPS_H

#include <stdint.h>

#include "core/data/dtype.h"
#include "core/sys/error.h"
#include "core/data/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lwq_quant_ops {
    const char *name;  /* "host", "cuda" */
    lwq_device device; /* where w and every array argument live */
    int (*nvfp4_max)(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax, const char *name,
                     uint8_t *packed, uint8_t *scale, float *ws2, void *stream, lwq_error *err);
    int (*nvfp4_static)(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const float *block_amax,
                        float global_amax, const char *name, uint8_t *packed, uint8_t *scale, float *ws2,
                        void *stream, lwq_error *err);
    /* hessian (cols/16, 16, 16) or NULL for the plain FP8 scale sweep */
    int (*nvfp4_sweep)(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                       const float *hessian, const char *name, float *block_amax, void *stream, lwq_error *err);
    int (*nvfp4_mse)(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax, const char *name,
                     float *block_amax, void *stream, lwq_error *err);
    int (*fp8)(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float amax, const char *name, uint8_t *q,
               float *weight_scale, void *stream, lwq_error *err);
    /* *amax_out is a host float */
    int (*fp8_mse)(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const char *name, float *amax_out,
                   void *stream, lwq_error *err);
} lwq_quant_ops;

/* The host quantizers (always built). */
const lwq_quant_ops *lwq_quant_host_ops(void);
/* The CUDA quantizers of the loaded CUDA module (kernels/cuda_module.h), or NULL when no module is
 * loaded (a build without CUDA, a CPU run): asking never loads it. */
const lwq_quant_ops *lwq_quant_cuda_ops(void);

#ifdef __cplusplus
}
#endif

#endif
