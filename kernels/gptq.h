/* kernels/gptq.h — GPTQ weight quantization (Frantar et al., 2022) for NVFP4 and FP8 weights.
 *
 * GPTQ quantizes a linear's weight column by column and, after each column, moves the rounding
 * error onto the columns not yet quantized, weighted by the inverse Hessian of the layer-output
 * error ||WX - ŴX||^2, H = 2/N X^T X over the linear's N calibration tokens.  Unlike the scale
 * searches of kernels/quant.h it rewrites the weight; the exported bytes are the codes of the
 * rewritten weight, in the unchanged output format (spec/FORMATS.md 1-2).
 *
 * The steps, as the paper gives them:
 *  1. dead inputs: H_ii == 0 (the input was 0 on every token) -> H_ii = 1 and W[:, i] = 0;
 *  2. act order (optional): columns visited by descending H_ii (ties: lower index first);
 *  3. dampening: H_ii += damp * mean(diag H);
 *  4. U = the upper Cholesky factor of H^-1 (H^-1 = U^T U), via the Cholesky factor of H;
 *  5. for each column i in visiting order: q_i = Q(w_i); e = (w_i - q_i) / U_ii;
 *     w_j -= e * U_ij for every later j.  Columns are visited in blocks of 128 with lazy batch
 *     updates: inside the block each column's error updates the block at once, the columns after
 *     the block get the block's updates when it is done.  The updates reach every element in the
 *     same order as the unblocked algorithm (k ascending, one subtraction each), so the blocked
 *     sweep gives bit-for-bit the result of the column-by-column one on the same factor.
 * NVFP4: weight_scale_2 comes from the global amax the caller gives (the unmodified weight's, or
 * its fused group's); each 16-column block's E4M3 scale is fixed, by the max rule of FORMATS.md 2,
 * when the sweep reaches the first column of that block it visits, from the block's 16 values as
 * updated so far.  FP8: the per-tensor scale is amax / 448 with the caller's amax (the unmodified
 * weight's); values beyond the E4M3 range saturate.
 *
 * Determinism by construction: the Hessian entries are exact products summed in token order in
 * double; the factorization and the sweep are our own fixed-order double-precision loops (no
 * LAPACK, whose results depend on the CPU kernel it picks); threads split rows, whose results
 * depend only on the row.  Same inputs, same bytes, for any thread count or CPU.
 *
 * Shapes: w: (rows, cols) row-major in BF16/F16/F32, cols = the linear's in-features; the Hessian
 * sums h_sum: (cols, cols) double, of which only the upper triangle (j >= i) is accumulated and
 * read.  Errors: < 0 with `err` naming the tensor (NaN/Inf input, bad shapes, a Hessian that is not
 * positive definite even after dampening). */
#ifndef LWQ_KERNELS_GPTQ_H
#define LWQ_KERNELS_GPTQ_H

#include <stdint.h>

#include "core/data/dtype.h"
#include "core/sys/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LWQ_GPTQ_BLOCK 128          /* lazy-batch column block */
#define LWQ_GPTQ_DAMP_DEFAULT 0.01

typedef struct lwq_gptq_opts {
    double damp;                    /* fraction of the mean diagonal added to it (> 0) */
    int act_order;                  /* visit columns by descending H_ii */
} lwq_gptq_opts;

/* h_sum[i, j] += sum over tokens of x_i x_j for j >= i, each entry summed in token order (exact
 * double products), so the sums do not depend on how tokens are split into calls, nor on threads.
 * x: (tokens, cols) of dt; h_sum: (cols, cols) double, zeroed before the first call.  NaN/Inf in x
 * -> LWQ_ENUMERIC naming the token and column. */
int lwq_gptq_hessian_accumulate(const void *x, lwq_dtype dt, int64_t tokens, int64_t cols, double *h_sum,
                                const char *name, lwq_error *err);

/* The factor the sweep uses.  From h_sum over ntokens tokens: H = 2/ntokens * h_sum, steps 1-4
 * above.  perm: (cols) out, perm[p] = the column visited p-th (identity without act order);
 * u: (cols, cols) double out, row-major, U in visiting order (upper triangle; the rest 0);
 * dead: (cols) out or NULL, 1 for dead inputs.  Not positive definite -> LWQ_ENUMERIC. */
int lwq_gptq_factor(const double *h_sum, int64_t ntokens, int64_t cols, const lwq_gptq_opts *o, const char *name,
                    int64_t *perm, double *u, uint8_t *dead, lwq_error *err);

/* Steps 1-3 alone (the part of lwq_gptq_factor before the factorization, shared with the CUDA
 * version): perm and dead as above; a: (cols, cols) double out, P H P^T with the dampened diagonal,
 * both triangles. */
int lwq_gptq_prepare(const double *h_sum, int64_t ntokens, int64_t cols, const lwq_gptq_opts *o, const char *name,
                     int64_t *perm, double *a, uint8_t *dead, lwq_error *err);

/* NVFP4 GPTQ.  global_amax as for lwq_quant_nvfp4_max (>= the weight's own amax; 0 only for an
 * all-zero weight, which takes the substitute 1.0 and returns LWQ_QUANT_ZERO_TENSOR).
 * packed: (rows, cols/2), scale: (rows, cols/16), *ws2 out; exactly the format of
 * lwq_quant_nvfp4_max.  perm, u from lwq_gptq_factor; dead may be NULL. */
int lwq_gptq_nvfp4(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax, const int64_t *perm,
                   const double *u, const uint8_t *dead, const char *name, uint8_t *packed, uint8_t *scale,
                   float *ws2, lwq_error *err);

/* FP8 GPTQ.  amax: the unmodified weight's (0 only for an all-zero weight).  q: (rows, cols) E4M3
 * out, *weight_scale = amax / 448, as lwq_quant_fp8. */
int lwq_gptq_fp8(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float amax, const int64_t *perm,
                 const double *u, const uint8_t *dead, const char *name, uint8_t *q, float *weight_scale,
                 lwq_error *err);

/* ||(W - Ŵ) X||^2 = sum over rows of d^T S d, d = w - ŵ, S = h_sum mirrored (so, up to rounding,
 * the layer-output squared error over the calibration tokens); *ref (may be NULL) = ||W X||^2.
 * w: (rows, cols) of dt; wq: (rows, cols) float, the dequantized weight.  Rows are summed in
 * order, so the value is deterministic. */
int lwq_gptq_output_error(const void *w, lwq_dtype dt, const float *wq, int64_t rows, int64_t cols,
                          const double *h_sum, double *out_err, double *ref, lwq_error *err);

/* GPTQ as a table, like the quantizers' (kernels/quant_ops.h): the factor and the two sweeps with
 * the contracts above, all buffers on the host.  The CUDA row (kernels/cuda/gptq_cuda.h) factors
 * with cuSOLVER and sweeps on the device. */
typedef struct lwq_gptq_ops {
    const char *name; /* "host", "cuda" */
    int (*factor)(const double *h_sum, int64_t ntokens, int64_t cols, const lwq_gptq_opts *o, const char *name,
                  int64_t *perm, double *u, uint8_t *dead, lwq_error *err);
    int (*nvfp4)(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax, const int64_t *perm,
                 const double *u, const uint8_t *dead, const char *name, uint8_t *packed, uint8_t *scale,
                 float *ws2, lwq_error *err);
    int (*fp8)(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float amax, const int64_t *perm,
               const double *u, const uint8_t *dead, const char *name, uint8_t *q, float *weight_scale,
               lwq_error *err);
} lwq_gptq_ops;

/* The host table (the functions above). */
const lwq_gptq_ops *lwq_gptq_host_ops(void);
/* The CUDA table from the loaded CUDA module (kernels/cuda_module.h), or NULL with the reason in e
 * when there is none (a build without CUDA, no module, a library missing). */
const lwq_gptq_ops *lwq_gptq_cuda_ops(lwq_error *e);

#ifdef __cplusplus
}
#endif

#endif
