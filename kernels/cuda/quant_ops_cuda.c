/* kernels/cuda/quant_ops_cuda.c — the CUDA row of the quantizer table (kernels/quant_ops.h): the
 * kernels/cuda/quant_cuda.h functions over device pointers.  Part of the CUDA module
 * (kernels/cuda_module.h), which hands it to lwq_quant_cuda_ops(). */
#include "kernels/cuda/module_cuda.h"
#include "kernels/cuda/quant_cuda.h"
#include "kernels/quant_ops.h"

static int c_nvfp4_max(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float gamax, const char *name,
                       uint8_t *packed, uint8_t *scale, float *ws2, void *stream, lwq_error *err)
{
    return lwq_quant_cuda_nvfp4_max(w, dt, rows, cols, gamax, name, packed, scale, ws2, stream, err);
}

static int c_nvfp4_static(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const float *bamax, float gamax,
                          const char *name, uint8_t *packed, uint8_t *scale, float *ws2, void *stream, lwq_error *err)
{
    return lwq_quant_cuda_nvfp4_static(w, dt, rows, cols, bamax, gamax, name, packed, scale, ws2, stream, err);
}

static int c_nvfp4_sweep(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float gamax, const float *hessian,
                         const char *name, float *bamax, void *stream, lwq_error *err)
{
    return lwq_quant_cuda_nvfp4_sweep(w, dt, rows, cols, gamax, hessian, name, bamax, NULL, stream, err);
}

static int c_nvfp4_mse(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float gamax, const char *name,
                       float *bamax, void *stream, lwq_error *err)
{
    return lwq_quant_cuda_nvfp4_mse(w, dt, rows, cols, gamax, name, bamax, stream, err);
}

static int c_fp8(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float amax, const char *name, uint8_t *q,
                 float *ws, void *stream, lwq_error *err)
{
    return lwq_quant_cuda_fp8(w, dt, rows, cols, amax, name, q, ws, stream, err);
}

static int c_fp8_mse(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const char *name, float *amax_out,
                     void *stream, lwq_error *err)
{
    return lwq_quant_cuda_fp8_mse(w, dt, rows, cols, name, amax_out, NULL, stream, err);
}

static const lwq_quant_ops cuda_ops = {
    /* .name = */ "cuda",
    /* .device = */ LWQ_DEV_CUDA,
    /* .nvfp4_max = */ c_nvfp4_max,
    /* .nvfp4_static = */ c_nvfp4_static,
    /* .nvfp4_sweep = */ c_nvfp4_sweep,
    /* .nvfp4_mse = */ c_nvfp4_mse,
    /* .fp8 = */ c_fp8,
    /* .fp8_mse = */ c_fp8_mse,
};

const lwq_quant_ops *lwq_cuda_quant_table(void) { return &cuda_ops; }
