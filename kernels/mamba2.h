/* kernels/mamba2.h — the Mamba2 mixer's non-GEMM part on host float32 arrays: the reference
 * (lwq_mamba2_ref) that the CPU backend's mamba2 op runs and the CUDA op is tested against
 * (tests/kernels/cuda/test_mamba2_cuda.c).  The formulas are engine/forward/model_nemotron.c's.
 *
 * Order of arithmetic (the CUDA kernels follow it step for step; kernels/cuda/mamba2_cuda.cu):
 *   conv:  acc = bias (or 0); for q = 0..K-1 over the visible history: acc += w[q] * x[t-K+1+q];
 *          v = round(acc); xbc = round(v * sigmoid(v))                 (round: to the act dtype)
 *   dt:    round(softplus(round(dt + dt_bias))), clamped below by round(dt_min)
 *   scan:  per (sequence, head, channel p), t ascending, k ascending within a token:
 *          S[p][k] = S[p][k] * exp(A dt) + (x[p] dt) * B[k];  acc += S[p][k] * C[k];
 *          y[p] = acc + D x[p]                                          (A = -exp(A_log))
 *   norm:  y *= z * sigmoid(z); per group, ss += y^2 in ascending order, r = 1 / sqrt(ss/gs + eps),
 *          y = w * (y * r)
 * Every product and sum is rounded to f32 on its own (ISO C11: no FMA contraction).
 * How the host runs it (kernels/cpu/mamba2_cpu.c): the conv, dt and norm row by row over
 * core/parallel's threads (a row reads only its own inputs and the K-1 rows before it), the
 * element-wise loops vectorized per ISA with the scalar operations above (expf stays libm's); the
 * scan one (sequence, head) per task, with the AVX-512, AVX2 or portable kernel of the GEMM's
 * kernel choice (kernels/cpu/mamba2/mamba2_scan.h: head channels in vector lanes, k sequential),
 * which all give the portable kernel's bits.  So the bytes depend neither on the thread count nor
 * on the batch nor on the ISA.
 * Thread-safety: reentrant.  Failure: LWQ_ENOMEM for its scratch. */
#ifndef LWQ_KERNELS_MAMBA2_H
#define LWQ_KERNELS_MAMBA2_H

#include <stdint.h>

#include "core/data/dtype.h"
#include "core/sys/error.h"

typedef struct lwq_mamba2_ref_args {
    int64_t batch, seq, heads, head_dim, state, groups, kernel;
    lwq_dtype act;               /* the dtype of every framework rounding */
    float eps, dt_min;
    const uint8_t *valid;        /* (batch*seq) */
    const float *proj;           /* (n, W): z | xBC | dt; padded rows are not read */
    const float *conv_w, *conv_b;/* (C, K); (C) or NULL */
    const float *a_log, *dt_bias, *d, *norm_w; /* (heads) x 3, (I) */
    float *xbc;                  /* (n, C) out: silu(conv), padded rows 0 */
    float *dts;                  /* (n, heads) out: dt after softplus and clamp, padded rows 0 */
    float *y;                    /* (n, I) out: the gated norm's output, padded rows 0 */
} lwq_mamba2_ref_args;

int lwq_mamba2_ref(const lwq_mamba2_ref_args *a, lwq_error *e);

#endif
