/* engine/qops.h — where a layer's weights are quantized: on the host (kernels/quant.h) or on the
 * GPU (kernels/cuda/quant_cuda.h), behind one interface with host buffers in and out.
 *
 * Both give the same bytes (the CUDA quantizers are tested byte-equal to the CPU reference), so
 * the choice changes speed, never output.  On the GPU each weight is uploaded once for its
 * search and its quantization (a one-entry cache keyed by the host tensor) and the results are
 * downloaded; amax stays on the host, where it is a fast streaming max.  The FP8 `mse` search and
 * the Hessian finalisation run where their inputs are. */
#ifndef LWQ_ENGINE_QOPS_H
#define LWQ_ENGINE_QOPS_H

#include <stdint.h>

#include "engine/tlist.h"
#include "kernels/backend.h"

typedef struct lwq_qops {
    const lwq_backend *be;    /* a CUDA backend, or NULL for the host */
    const lwq_htensor *cached;
    void *dev_w;              /* device copy of `cached` */
    uint64_t dev_cap;
} lwq_qops;

/* be may be any backend: only a CUDA one (in a CUDA build) moves the work to the GPU. */
void lwq_qops_init(lwq_qops *q, const lwq_backend *be);
void lwq_qops_free(lwq_qops *q);
/* "host" or "cuda". */
const char *lwq_qops_where(const lwq_qops *q);

/* As the kernels/quant.h functions of the same names; w is (rows, cols), the last dimension cols. */
int lwq_qops_nvfp4_max(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float global_amax,
                       const char *name, uint8_t *packed, uint8_t *scale, float *ws2, lwq_error *e);
int lwq_qops_nvfp4_static(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, const float *block_amax,
                          float global_amax, const char *name, uint8_t *packed, uint8_t *scale, float *ws2,
                          lwq_error *e);
/* hessian (cols/16, 16, 16) host floats, or NULL for the plain sweep. */
int lwq_qops_nvfp4_sweep(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float global_amax,
                         const float *hessian, const char *name, float *block_amax, lwq_error *e);
int lwq_qops_nvfp4_mse(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float global_amax,
                       const char *name, float *block_amax, lwq_error *e);
int lwq_qops_fp8(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float amax, const char *name,
                 uint8_t *out, float *weight_scale, lwq_error *e);
int lwq_qops_fp8_mse(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, const char *name,
                     float *amax_out, lwq_error *e);

#endif
