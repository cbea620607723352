/* engine/eval/emul/eval_emul.h — what a serving engine does to activations, emulated on the host in f32.
 *
 * NVFP4 W4A4 GEMM input (docs/EVAL.md gives the formulas in FORMATS.md terms): for every row and
 * every block of 16 consecutive input elements x[0..16) (read from the activation dtype into f32),
 *     amax   = max |x[i]|
 *     s      = amax / (6 * input_scale)            (f32: 6 * input_scale rounded first)
 *     bs     = e4m3(s)                             (round to nearest even, saturating at 448)
 *     d      = float(bs) * input_scale             (f32)
 *     q[i]   = e2m1(x[i] / d)                      (FORMATS.md 2 rounding; saturates at 6)
 *     out[i] = e2m1_value(q[i]) * d                (f32; exact: d times a 2-bit mantissa)
 * A block whose bs is 0 (amax 0, or amax below half the smallest E4M3 subnormal times
 * 6 * input_scale) comes out as zeros, as the serving kernels do (their reciprocal scale is 0).
 * FP8 (static per-tensor) input:  out[i] = float(e4m3(x[i] / input_scale)) * input_scale.
 * FP8 KV cache: the same with k_scale / v_scale (1.0 in cast mode), applied to k after RoPE and
 * to v, then rounded to the activation dtype the attention op reads.
 *
 * lwq_emul_backend wraps a compute backend: every op passes through unchanged except gemm (when
 * the weight is one of the registered quantized linears, its input is quantized as above, held
 * in f32, and the GEMM runs on that f32 input) and attention (k and v go through the FP8 cache
 * when the stream has one).  On a GPU backend the activations make a round trip through the host.
 * Results do not depend on the thread count (rows are independent).  With a memo attached
 * (em->memo, CPU backend), GEMM and attention results are recorded or replayed around the
 * emulation, which changes no bit of any result.
 *
 * Ownership: the wrapper borrows the inner backend (it must outlive it).  One thread. */
#ifndef LWQ_ENGINE_EVAL_EMUL_H
#define LWQ_ENGINE_EVAL_EMUL_H

#include <stdint.h>

#include "engine/eval/emul/eval_memo.h"
#include "engine/forward/forward.h"
#include "kernels/backend.h"
#include "layout/recipe/recipe.h"

/* x: (rows, cols) of dt (F32, BF16, F16), cols % 16 == 0; out: (rows, cols) f32.  out may not
 * alias x unless dt is F32. */
void lwq_emul_nvfp4_act(const void *x, lwq_dtype dt, int64_t rows, int64_t cols, float input_scale, float *out);
/* x: (n,) of dt -> out (n,) f32 */
void lwq_emul_fp8_act(const void *x, lwq_dtype dt, int64_t n, float scale, float *out);

/* One quantized linear of the layer being run. */
typedef struct lwq_emul_linear {
    char module[256];        /* "model.layers.3.mlp.down_proj" */
    lwq_qformat fmt;         /* NVFP4 or FP8 */
    float input_scale;
    const void *dev_weight;  /* the weight's data pointer as the forward receives it (set by the
                                weight lookup), NULL until fetched */
    int64_t hits;            /* GEMMs run with this weight */
} lwq_emul_linear;

typedef struct lwq_emul {
    lwq_backend inner;
    lwq_backend_ops ops;     /* the forwarding table */
    lwq_backend be;          /* pass this one to lwq_model_init */
    int n, cap;
    lwq_emul_linear *lin;    /* the current layer's quantized linears */
    int kv_fp8;              /* k/v go through an FP8 cache */
    float *scratch;          /* the emulated GEMM input (CPU backend), grown as needed */
    size_t scratch_bytes;
    /* the input bytes scratch was computed from, with its format and scale */
    void *last_x;
    size_t last_cap;
    int last_ok;
    lwq_qformat last_fmt;
    float last_scale;
    int64_t last_n, last_in;
    lwq_dtype last_dt;
    float k_scale, v_scale;
    lwq_memo *memo;          /* NULL, or GEMM / attention results recorded and replayed
                                (engine/eval/emul/eval_memo.h; CPU backend only) */
} lwq_emul;

/* The wrapper is self-referential (be.ctx points to it): do not copy it after init. */
void lwq_emul_init(lwq_emul *em, const lwq_backend *inner);
void lwq_emul_free(lwq_emul *em);
/* Forget the previous layer's linears (keeps the array). */
void lwq_emul_reset(lwq_emul *em);
int lwq_emul_add(lwq_emul *em, const char *module, lwq_qformat fmt, float input_scale, lwq_error *e);
/* The registered linear whose weight tensor is `name` ("<module>.weight"), or NULL. */
lwq_emul_linear *lwq_emul_find_weight(lwq_emul *em, const char *name);

/* The weight lookup of an emulated stream: inner's tensors, noting the device pointer of each
 * registered linear's weight as the forward fetches it, so the wrapper knows its GEMMs.  names:
 * cfg.names (the registered module names are the checkpoint's, the forward's canonical). */
typedef struct lwq_emul_weights {
    const lwq_weights *inner;
    lwq_emul *em;
    const lwq_names *names;
    lwq_weights w;           /* pass to the forward; points into this struct */
} lwq_emul_weights;
void lwq_emul_weights_init(lwq_emul_weights *ew, lwq_emul *em, const lwq_weights *inner, const lwq_names *names);

#endif
