/* kernels/quant.h — quantization numerics the engine calls once per layer: NVFP4 and FP8 weight
 * quantization, the activation / KV-cache scales, fused-group unification, the scale searches
 * (`mse`, `fp8_scale_sweep`, `local_hessian`) and dequantization.  The formulas are those of
 * ../shared/spec/FORMATS.md sections 1-5; the bit-level encodings live in layout/format/quant_formats.h,
 * shared with the CUDA versions (kernels/cuda/quant_cuda.h), which give identical bytes.
 *
 * These are the CPU implementations and the reference for every other backend.  All pointers are
 * host pointers owned by the caller; outputs are written in full only on success (on failure
 * their contents are unspecified).  Loops run over rows on the core/parallel/parallel.h pool; results do
 * not depend on the thread count.  Functions are thread-safe with respect to each other as long
 * as their output buffers do not overlap (the pool serializes concurrent loops).
 *
 * Shapes: a weight is `w: (rows, cols) row-major` = (out, in) of the linear, in its checkpoint
 * dtype (BF16, F16 or F32); every element is read exactly as that dtype holds it (the "cast to
 * the checkpoint dtype" of FORMATS.md is the caller passing the checkpoint's own bytes).  NVFP4
 * blocks are 16 consecutive elements of a row, so cols % 16 == 0 is required.
 *
 * Errors (return value < 0, message in `err` naming the tensor `name`): LWQ_EINVAL for an empty
 * tensor, cols % 16 != 0 (NVFP4), an unsupported dtype, a NULL buffer or an amax argument that
 * contradicts the data; LWQ_ENUMERIC for a NaN/Inf element (the message gives its [row, col]),
 * a NaN/Inf/negative/zero amax where a positive one is needed, or an amax so small
 * (0 < amax < LWQ_QUANT_AMAX_MIN) that the scales would be subnormal floats.
 *
 * All-zero weights: FORMATS.md requires every written scale to be finite and > 0, while the
 * formulas give weight_scale_2 = 0 (and 0/0 per block).  lwq therefore quantizes an all-zero
 * weight as if its amax were 1.0: NVFP4 weight_scale_2 = 1/2688, every block scale byte 0x38
 * (1.0) on the max path, every code 0; FP8 weight_scale = 1/448, every byte 0.  The dequantized
 * tensor is exactly zero either way.  Functions that apply this rule return
 * LWQ_QUANT_ZERO_TENSOR (a positive value, not an error) so the caller can report it.  For
 * activation and KV scales no such substitute exists: an amax of 0 is an error (FORMATS.md 3). */
#ifndef LWQ_KERNELS_QUANT_H
#define LWQ_KERNELS_QUANT_H

#include <stdint.h>

#include "core/data/dtype.h"
#include "core/sys/error.h"
#include "layout/format/quant_formats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Returned (>0) when an all-zero weight was quantized with the substitute amax 1.0. */
#define LWQ_QUANT_ZERO_TENSOR 1
/* A positive amax below this (2^-100) is refused: weight_scale_2 * 2^-9 would be subnormal. */
#define LWQ_QUANT_AMAX_MIN 0x1p-100f
/* The searches' float32 losses overflow for weights near 2^64; larger amax values are refused. */
#define LWQ_QUANT_SEARCH_AMAX_MAX 0x1p60f

typedef enum lwq_quant_format { LWQ_QUANT_NVFP4 = 0, LWQ_QUANT_FP8 = 1 } lwq_quant_format;

/* ---- amax, activation and KV scales --------------------------------------------------------- */

/* amax = max |x| over x: (n,) of dtype dt.  NaN/Inf -> LWQ_ENUMERIC naming the index. */
int lwq_quant_amax(const void *x, lwq_dtype dt, int64_t n, const char *name, float *amax, lwq_error *err);

/* input_scale = amax / (6 * 448) for NVFP4, amax / 448 for FP8; amax must be finite and > 0. */
int lwq_quant_input_scale(float amax, lwq_quant_format fmt, const char *name, float *scale, lwq_error *err);
/* k_scale / v_scale = amax / 448; amax must be finite and > 0. */
int lwq_quant_kv_scale(float amax, const char *name, float *scale, lwq_error *err);

/* Fused-group unification (NVFP4 only; FORMATS.md 5): every member's input amax becomes the max
 * over the group, and so does every member's weight global amax.  input_amax and weight_amax are
 * (n,) arrays, either may be NULL.  A NaN/Inf/negative entry -> LWQ_ENUMERIC naming the member
 * index and the group. */
int lwq_quant_group_unify(float *input_amax, float *weight_amax, int n, const char *group, lwq_error *err);

/* ---- NVFP4 weights -------------------------------------------------------------------------- */

/* Dynamic/max path.  global_amax: the tensor's amax, or the group's after unification (must be
 * >= the tensor's own amax; 0 only for an all-zero tensor).
 * w: (rows, cols); packed: (rows, cols/2) out; scale: (rows, cols/16) E4M3 out;
 * *ws2 = weight_scale_2 out.  Returns 0 or LWQ_QUANT_ZERO_TENSOR. */
int lwq_quant_nvfp4_max(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                        const char *name, uint8_t *packed, uint8_t *scale, float *ws2, lwq_error *err);

/* Static path: per-block amax from a search.  block_amax: (rows, cols/16), each finite and >= 0
 * (0 -> scale 1.0 before the 448 / (global_amax / 6) factor, as FORMATS.md 2 says); global_amax
 * as above.  Outputs and return value as for lwq_quant_nvfp4_max. */
int lwq_quant_nvfp4_static(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const float *block_amax,
                           float global_amax, const char *name, uint8_t *packed, uint8_t *scale, float *ws2,
                           lwq_error *err);

/* fp8_scale_sweep / local_hessian search: per block, the positive E4M3 byte v whose divisor
 * v * weight_scale_2 minimises the block's loss (squared error of the dequantized block, or
 * dw^T H dw when hessian != NULL; ties -> smaller byte).  hessian: (cols/16, 16, 16) from
 * lwq_quant_hessian_finalize, or NULL.  Outputs (either may be NULL): block_amax: (rows, cols/16)
 * = global_amax * v / 448, which lwq_quant_nvfp4_static maps back to exactly v;
 * scale: (rows, cols/16) the bytes v.  global_amax as above and <= LWQ_QUANT_SEARCH_AMAX_MAX
 * (0: all-zero tensor, searched with the substitute 1.0; returns LWQ_QUANT_ZERO_TENSOR). */
int lwq_quant_nvfp4_sweep(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                          const float *hessian, const char *name, float *block_amax, uint8_t *scale,
                          lwq_error *err);

/* Per-block `mse` search for static NVFP4 without the FP8 sweep: block b tries the 39 amax
 * candidates a_k = amax_b * lwq_mse_multiplier(k) (amax_b = the block's own max |w|, the product
 * rounded to float), maps each through the static path to its scale byte, and keeps the a_k
 * whose dequantized block has the smallest squared error (the sweep's loss and summation
 * order; first k on ties).  block_amax: (rows, cols/16) out, for lwq_quant_nvfp4_static.
 * global_amax as for lwq_quant_nvfp4_sweep. */
int lwq_quant_nvfp4_mse(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                        const char *name, float *block_amax, lwq_error *err);
/* The same over the candidates bamax * mult[k], k < nmult (1..LWQ_MSE_MAX_STEPS; mult NULL: the
 * 39).  CPU. */
int lwq_quant_nvfp4_mse_m(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                          const float *mult, int nmult, const char *name, float *block_amax, lwq_error *err);

/* Four-over-Six (Model Optimizer 0.47, `four_over_six: true` on a static NVFP4 weight
 * quantizer): block scales normalised to LWQ_NVFP4_46_FP8MAX = 256 (layout/format/quant_formats.h).
 * lwq_quant_nvfp4_mse46 is lwq_quant_nvfp4_mse with that normalisation and the candidates
 * a_k = amax_b * mult[k] (1 <= nmult <= 39; the published recipe's [1.0, 1.5]: M = 6 or M = 4;
 * mult NULL: lwq_mse_multiplier's 39);
 * lwq_quant_nvfp4_static46 writes them (weight_scale_2 = global_amax / 1536).  CPU only: the
 * engine runs them on the host whatever the device. */
int lwq_quant_nvfp4_mse46(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                          const float *mult, int nmult, const char *name, float *block_amax, lwq_error *err);
int lwq_quant_nvfp4_static46(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const float *block_amax,
                             float global_amax, const char *name, uint8_t *packed, uint8_t *scale, float *ws2,
                             lwq_error *err);

/* packed: (rows, cols/2), scale: (rows, cols/16) -> out: (rows, cols) of out_dt (F32, BF16 or F16),
 * out = e2m1 * (float(scale) * ws2), the product rounded once, then cast to out_dt. */
int lwq_quant_nvfp4_dequant(const uint8_t *packed, const uint8_t *scale, float ws2, int64_t rows, int64_t cols,
                            lwq_dtype out_dt, void *out, lwq_error *err);

/* ---- local_hessian statistics ---------------------------------------------------------------- */

/* h_sum[b] += sum over tokens of x_b^T x_b, x_b the 16-wide input block b of a token.
 * x: (tokens, cols) of dt; h_sum: (cols/16, 16, 16) double, zeroed by the caller before the first
 * call.  The products are exact in double and each entry is summed in token order, so the result
 * does not depend on threads or backend.  NaN/Inf in x -> LWQ_ENUMERIC. */
int lwq_quant_hessian_accumulate(const void *x, lwq_dtype dt, int64_t tokens, int64_t cols, double *h_sum,
                                 const char *name, lwq_error *err);
/* h = (float)(h_sum / ntokens); h, h_sum: (cols/16, 16, 16).  ntokens == 0 -> LWQ_ENUMERIC. */
int lwq_quant_hessian_finalize(const double *h_sum, int64_t ntokens, int64_t cols, float *h, const char *name,
                               lwq_error *err);

/* ---- FP8 per-tensor weights ----------------------------------------------------------------- */

/* weight_scale = amax / 448, q = e4m3(round_dt(w / weight_scale)) saturating, where round_dt
 * rounds the F32 quotient to w's dtype first (BF16/F16; nothing for F32), as Model Optimizer's
 * export does (a BF16 weight divided by an F32 scalar is BF16 in torch, then cast to E4M3).  amax: from the tensor
 * (lwq_quant_amax) or from lwq_quant_fp8_mse; 0 only for an all-zero tensor.
 * w: (rows, cols); q: (rows, cols) E4M3 out.  Returns 0 or LWQ_QUANT_ZERO_TENSOR. */
int lwq_quant_fp8(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float amax, const char *name,
                  uint8_t *q, float *weight_scale, lwq_error *err);

/* `mse` search for a per-tensor FP8 scale: of the 39 candidates amax * lwq_mse_multiplier(k), the
 * one with the smallest quantize->dequantize squared error (first on ties).  The loss sums
 * (x - dq)^2 in double: per row, lane j % 16 accumulates element j in ascending order, lanes are
 * added in the lwq_sum16_tree order, rows in ascending order.  *amax_out = the chosen amax
 * rounded to w's dtype, as Model Optimizer stores it (the data's amax if it is 0); *mult_index
 * (may be NULL) = k. */
int lwq_quant_fp8_mse(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const char *name, float *amax_out,
                      int *mult_index, lwq_error *err);
/* The same over the candidates amax * mult[k], k < nmult (1..LWQ_MSE_MAX_STEPS: a recipe's own
 * start_multiplier / stop_multiplier / step_size, lwq_mse_linspace); mult NULL: the 39.  CPU. */
int lwq_quant_fp8_mse_m(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const float *mult, int nmult,
                        const char *name, float *amax_out, int *mult_index, lwq_error *err);

/* q: (n,) E4M3 -> out: (n,) of out_dt (F32, BF16 or F16), out = float(q) * weight_scale. */
int lwq_quant_fp8_dequant(const uint8_t *q, float weight_scale, int64_t n, lwq_dtype out_dt, void *out,
                          lwq_error *err);

#ifdef __cplusplus
}
#endif

#endif
