/* kernels/cuda/quant_cuda.h — CUDA versions of the quantizers of kernels/quant.h, giving the same
 * bytes as the CPU reference (both evaluate the LWQ_HD functions of layout/format/quant_formats.h; the
 * device side uses the `_rn` intrinsics, so no FMA contraction and IEEE division).
 *
 * Pointers: every array argument (weights, activations, outputs, block amax, Hessians) is a
 * DEVICE pointer; scalars (amax, the returned weight_scale_2 / weight_scale) are host values.
 * `stream` is a cudaStream_t (NULL = the legacy default stream).  Each call enqueues its kernels
 * on `stream` and then synchronizes that stream, because it must read the error flags back
 * (NaN/Inf position, amax violations) before it can return an error naming the tensor; outputs
 * are complete when a call returns 0.  Argument checks, messages, the all-zero rule
 * (LWQ_QUANT_ZERO_TENSOR) and the error codes are those of kernels/quant.h; a CUDA failure is
 * LWQ_EDEVICE with the CUDA error string.  Calls may run concurrently on different streams.
 *
 * Not here (CPU only): group unification and the activation / KV scale helpers (host
 * arithmetic on a few floats). */
#ifndef LWQ_KERNELS_CUDA_QUANT_CUDA_H
#define LWQ_KERNELS_CUDA_QUANT_CUDA_H

#include <stdint.h>

#include "core/data/dtype.h"
#include "core/sys/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (0 when there is no driver or no device). */
int lwq_quant_cuda_device_count(void);

/* x: (n,) -> *amax (host). */
int lwq_quant_cuda_amax(const void *x, lwq_dtype dt, int64_t n, const char *name, float *amax, void *stream,
                        lwq_error *err);

/* w: (rows, cols); packed: (rows, cols/2); scale: (rows, cols/16); *ws2 host. */
int lwq_quant_cuda_nvfp4_max(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                             const char *name, uint8_t *packed, uint8_t *scale, float *ws2, void *stream,
                             lwq_error *err);
/* block_amax: (rows, cols/16). */
int lwq_quant_cuda_nvfp4_static(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const float *block_amax,
                                float global_amax, const char *name, uint8_t *packed, uint8_t *scale, float *ws2,
                                void *stream, lwq_error *err);
/* hessian: (cols/16, 16, 16) or NULL; block_amax, scale: (rows, cols/16) outputs, either NULL. */
int lwq_quant_cuda_nvfp4_sweep(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                               const float *hessian, const char *name, float *block_amax, uint8_t *scale,
                               void *stream, lwq_error *err);
/* Per-block mse (see lwq_quant_nvfp4_mse); block_amax: (rows, cols/16) out. */
int lwq_quant_cuda_nvfp4_mse(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                             const char *name, float *block_amax, void *stream, lwq_error *err);
/* packed: (rows, cols/2), scale: (rows, cols/16) -> out: (rows, cols) of out_dt. */
int lwq_quant_cuda_nvfp4_dequant(const uint8_t *packed, const uint8_t *scale, float ws2, int64_t rows, int64_t cols,
                                 lwq_dtype out_dt, void *out, void *stream, lwq_error *err);

/* x: (tokens, cols); h_sum: (cols/16, 16, 16) double, accumulated in token order per entry. */
int lwq_quant_cuda_hessian_accumulate(const void *x, lwq_dtype dt, int64_t tokens, int64_t cols, double *h_sum,
                                      const char *name, void *stream, lwq_error *err);
/* h = (float)(h_sum / ntokens), both (cols/16, 16, 16). */
int lwq_quant_cuda_hessian_finalize(const double *h_sum, int64_t ntokens, int64_t cols, float *h, const char *name,
                                    void *stream, lwq_error *err);

/* w: (rows, cols); q: (rows, cols); *weight_scale host. */
int lwq_quant_cuda_fp8(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float amax, const char *name,
                       uint8_t *q, float *weight_scale, void *stream, lwq_error *err);
/* FP8 `mse` search (see lwq_quant_fp8_mse): same candidates, loss order and result; the per-row
 * losses are computed on the device, added on the host in row order. */
int lwq_quant_cuda_fp8_mse(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const char *name,
                           float *amax_out, int *mult_index, void *stream, lwq_error *err);
/* q: (n,) -> out: (n,) of out_dt. */
int lwq_quant_cuda_fp8_dequant(const uint8_t *q, float weight_scale, int64_t n, lwq_dtype out_dt, void *out,
                               void *stream, lwq_error *err);

#ifdef __cplusplus
}
#endif

#endif
