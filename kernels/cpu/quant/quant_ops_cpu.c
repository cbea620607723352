/* kernels/cpu/quant/quant_ops_cpu.c — the host row of the quantizer table (kernels/quant_ops.h): the
 * kernels/quant.h functions, which take no stream. */
#include "kernels/quant.h"
#include "kernels/quant_ops.h"

static int h_nvfp4_max(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float gamax, const char *name,
                       uint8_t *packed, uint8_t *scale, float *ws2, void *stream, lwq_error *err)
{
    (void)stream;
    return lwq_quant_nvfp4_max(w, dt, rows, cols, gamax, name, packed, scale, ws2, err);
}

static int h_nvfp4_static(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const float *bamax, float gamax,
                          const char *name, uint8_t *packed, uint8_t *scale, float *ws2, void *stream, lwq_error *err)
{
    (void)stream;
    return lwq_quant_nvfp4_static(w, dt, rows, cols, bamax, gamax, name, packed, scale, ws2, err);
}

static int h_nvfp4_sweep(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float gamax, const float *hessian,
                         const char *name, float *bamax, void *stream, lwq_error *err)
{
    (void)stream;
    return lwq_quant_nvfp4_sweep(w, dt, rows, cols, gamax, hessian, name, bamax, NULL, err);
}

static int h_nvfp4_mse(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float gamax, const char *name,
                       float *bamax, void *stream, lwq_error *err)
{
    (void)stream;
    return lwq_quant_nvfp4_mse(w, dt, rows, cols, gamax, name, bamax, err);
}

static int h_fp8(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float amax, const char *name, uint8_t *q,
                 float *ws, void *stream, lwq_error *err)
{
    (void)stream;
    return lwq_quant_fp8(w, dt, rows, cols, amax, name, q, ws, err);
}

static int h_fp8_mse(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const char *name, float *amax_out,
                     void *stream, lwq_error *err)
{
    (void)stream;
    return lwq_quant_fp8_mse(w, dt, rows, cols, name, amax_out, NULL, err);
}

static const lwq_quant_ops host_ops = {
    /* .name = */ "host",
    /* .device = */ LWQ_DEV_CPU,
    /* .nvfp4_max = */ h_nvfp4_max,
    /* .nvfp4_static = */ h_nvfp4_static,
    /* .nvfp4_sweep = */ h_nvfp4_sweep,
    /* .nvfp4_mse = */ h_nvfp4_mse,
    /* .fp8 = */ h_fp8,
    /* .fp8_mse = */ h_fp8_mse,
};

const lwq_quant_ops *lwq_quant_host_ops(void) { return &host_ops; }

#ifndef LWQ_HAVE_CUDA
const lwq_quant_ops *lwq_quant_cuda_ops(void) { return 0; }
#endif
