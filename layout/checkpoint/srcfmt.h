/* layout/checkpoint/srcfmt.h — quantized source checkpoints, read directly and dequantized per tensor.
 *
 * Two storage formats of published checkpoints are understood, as config.json's
 * "quantization_config" declares them (top level, or under "text_config" for wrappers):
 *   - FP8 blocks ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [br, bc]},
 *     DeepSeek-V3 / Kimi-K2): a linear's "X.weight" is F8_E4M3 [rows, cols] and
 *     "X.weight_scale_inv" holds one float per br x bc block [ceil(rows/br), ceil(cols/bc)]
 *     (edge blocks are partial); W = e4m3(w) * scale_inv[r / br][c / bc].
 *   - MXFP4 ({"quant_method": "mxfp4"}): "X_blocks" U8 [..., G, 16] holds 32 E2M1 codes per
 *     group (low nibble = even element) and "X_scales" U8 [..., G] one E8M0 exponent per group;
 *     X = e2m1 * 2^(scale - 127), shape [..., G * 32].  Scale byte 255 (NaN) is refused.
 * Dequantized values are computed in f32 (FP8: e4m3 * scale rounded to f32, as DeepSeek's own
 * weight_dequant kernel does; MXFP4: exact) and rounded to nearest even to the output dtype (the
 * model's float dtype; BF16 when the config names none).  Tensors that are not quantized in the
 * source pass through.
 *
 * This module holds the config parsing, the per-tensor kernels (CPU, threaded over rows with
 * core/parallel; bit-exact for any thread count) and the naming rules; engine/source/srcdeq.c applies
 * them to a layer's tensors after the read, and layout/arch/arch.c asks the naming rules so a packed
 * checkpoint passes the architecture check.  Stateless; thread-safe.  Failures: LWQ_EFORMAT
 * naming the tensor and the offending value/shape, LWQ_EUNSUPPORTED for other quant methods. */
#ifndef LWQ_LAYOUT_SRCFMT_H
#define LWQ_LAYOUT_SRCFMT_H

#include <stdint.h>

#include "core/sys/error.h"
#include "layout/checkpoint/checkpoint.h"
#include "layout/config/config.h"

typedef enum lwq_srcfmt_kind {
    LWQ_SRCFMT_PLAIN = 0, /* no quantization_config: float tensors only */
    LWQ_SRCFMT_FP8_BLOCK,
    LWQ_SRCFMT_MXFP4,
} lwq_srcfmt_kind;

typedef struct lwq_srcfmt {
    lwq_srcfmt_kind kind;
    int64_t block_rows, block_cols; /* FP8: weight_block_size */
    lwq_dtype out;                  /* dtype of dequantized tensors */
} lwq_srcfmt;

#define LWQ_SRCFMT_SCALE_INV "_scale_inv"
#define LWQ_SRCFMT_BLOCKS "_blocks"
#define LWQ_SRCFMT_SCALES "_scales"
#define LWQ_MXFP4_GROUP 32

/* From c->raw.  A quant_method other than fp8 / mxfp4 is LWQ_EUNSUPPORTED naming it. */
int lwq_srcfmt_from_config(const lwq_model_config *c, lwq_srcfmt *f, lwq_error *e);
const char *lwq_srcfmt_name(lwq_srcfmt_kind k); /* "plain", "fp8-block", "mxfp4" */

/* FP8 blocks: w (rows, cols) E4M3 bytes, sinv (srows, scols) of dtype sdt (F32/BF16/F16), with
 * srows == ceil(rows / br) and scols == ceil(cols / bc); out (rows, cols) of out_dt.  A NaN byte
 * (0x7F/0xFF) or a non-finite scale is an error naming `name` and the element. */
int lwq_srcfmt_fp8_dequant(const char *name, const uint8_t *w, int64_t rows, int64_t cols,
                           const void *sinv, lwq_dtype sdt, int64_t srows, int64_t scols,
                           int64_t br, int64_t bc, lwq_dtype out_dt, void *out, lwq_error *e);
/* MXFP4: blocks (rows, groups, 16) bytes, scales (rows, groups) bytes; out (rows, groups * 32).
 * A scale of 255, or a value that overflows out_dt, is an error naming `name` and the group. */
int lwq_srcfmt_mxfp4_dequant(const char *name, const uint8_t *blocks, const uint8_t *scales,
                             int64_t rows, int64_t groups, lwq_dtype out_dt, void *out,
                             lwq_error *e);

/* Naming rules on a checkpoint, for the architecture check.  lwq_srcfmt_packed_shape: when
 * `name` is stored as name_blocks + name_scales, fill the logical shape and return 1, else 0.
 * lwq_srcfmt_is_aux: 1 for a tensor that only serves another's dequantization (an
 * X_scale_inv beside an F8_E4M3 X, either half of an X_blocks / X_scales pair). */
/* `name` without the suffix `suf` into out (cap bytes); 1 when name ends with suf and fits, else 0. */
int lwq_srcfmt_strip_suffix(const char *name, const char *suf, char *out, size_t cap);
int lwq_srcfmt_packed_shape(const lwq_ckpt *c, const char *name, int *ndim, int64_t *shape);
int lwq_srcfmt_is_aux(const lwq_ckpt *c, const char *name);

#endif
