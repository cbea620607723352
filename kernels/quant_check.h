/* kernels/quant_check.h — argument checks and the mse arg-min shared by the CPU (kernels/cpu/quant/quant_cpu.c) and CUDA
 * (kernels/cuda/quant_cuda.cu) quantizers, so both refuse the same inputs with the same messages.
 * Internal to kernels/; every function fills `err` and returns a negative LWQ_E* on failure. */
#ifndef LWQ_KERNELS_QUANT_CHECK_H
#define LWQ_KERNELS_QUANT_CHECK_H

#include <stdint.h>

#include "core/data/dtype.h"
#include "core/sys/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "(unnamed)" for NULL. */
const char *lwq_quant_name(const char *name);

/* A weight-like (rows, cols) input: rows, cols > 0, rows * cols without overflow, dt one of
 * F32/F16/BF16, w non-NULL, and (when block16) cols % 16 == 0. */
int lwq_quant_check_shape(const char *name, const void *w, lwq_dtype dt, int64_t rows, int64_t cols, int block16,
                          lwq_error *err);

/* The global amax a weight is scaled by: finite, >= 0, 0 or >= LWQ_QUANT_AMAX_MIN, and
 * <= max_amax.  *eff = amax, or 1.0 for 0 (the all-zero substitute); returns 1 in that case. */
int lwq_quant_check_global(const char *name, float amax, float max_amax, float *eff, lwq_error *err);

/* The error for a non-finite element at flat index idx of a (rows, cols) tensor. */
int lwq_quant_err_nonfinite(const char *name, int64_t idx, int64_t cols, lwq_error *err);

/* The error for a tensor whose own amax exceeds the global amax it was given. */
int lwq_quant_err_over_global(const char *name, float found, float global_amax, lwq_error *err);

/* The arguments of an NVFP4 (block16) or FP8 dequantization: out_dt F32/BF16/F16, a (rows, cols)
 * shape without overflow (cols % 16 == 0 when block16), non-NULL buffers, a finite scale > 0. */
int lwq_quant_check_dq(const void *in, const void *out, lwq_dtype out_dt, int64_t rows, int64_t cols, int block16,
                       float scale, lwq_error *err);

/* The `mse` search's pick: loss is (rows, steps) row-major; the candidate whose losses, added over
 * rows in ascending order in double, are smallest; ties go to the lower index. */
int lwq_quant_mse_argmin(const double *loss, int64_t rows, int steps);

#ifdef __cplusplus
}
#endif

#endif
