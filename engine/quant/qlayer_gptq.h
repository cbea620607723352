/* engine/quant/qlayer_gptq.h — GPTQ for one linear of a layer being quantized (engine/quant/qlayer.c calls it).
 *
 * From the layer statistics' full Hessian sums of the linear (engine/quant/stats.h) it builds the factor
 * (kernels/gptq.h: dead inputs, act order, dampening as the choice says) and runs the sweep into
 * the same tensors the max path writes: NVFP4 packed codes + E4M3 block scales with the given
 * global amax (the unmodified weight's, or its fused group's), or FP8 codes with the given
 * per-tensor amax.  It also measures what GPTQ bought: the layer-output error ||WX - ŴX||^2 over the
 * calibration tokens of the GPTQ weight and of the max-calibrated weight (same scales), appended
 * to the report (on a regular sample of the rows when all of them would cost more than ~4e9
 * multiply-adds; the entry says so).  Working memory (the factor, in^2 doubles, and two dequantized copies) is held
 * for one linear at a time.  on_gpu (a CUDA build with the CUDA backend): the factor and the sweep
 * run on the GPU (kernels/cuda/gptq_cuda.h; not bit-equal to the CPU, the run fingerprint names
 * the backend); the Hessian sums and the error report stay on the host. */
#ifndef LWQ_ENGINE_QLAYER_GPTQ_H
#define LWQ_ENGINE_QLAYER_GPTQ_H

#include "engine/quant/qlayer.h"

/* fmt NVFP4: packed (rows, cols/2), scale (rows, cols/16), *ws = weight_scale_2; FP8: q8 (rows,
 * cols), *ws = weight_scale.  Returns 0 or LWQ_QUANT_ZERO_TENSOR, < 0 on error. */
int lwq_qlayer_gptq(const lwq_arch_linear *l, const lwq_quant_choice *c, const lwq_htensor *w, float amax,
                    const lwq_layer_stats *st, int idx, int on_gpu, uint8_t *packed, uint8_t *scale, uint8_t *q8,
                    float *ws, lwq_qlayer_report *rep, lwq_error *e);

#endif
