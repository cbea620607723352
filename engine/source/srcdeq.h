/* engine/source/srcdeq.h — a layer's tensors as the forward and the quantizer want them: FP8-block and
 * MXFP4 source tensors (layout/checkpoint/srcfmt.h) replaced, right after the read, by dequantized tensors
 * in the model's float dtype under the names the unquantized model uses ("X.weight" for an FP8
 * "X.weight" + "X.weight_scale_inv"; "X" for "X_blocks" + "X_scales"), the scale tensors
 * dropped, every other tensor moved over unchanged (views stay views, owned buffers stay owned).
 *
 * The dequantization runs on the host (threaded over rows) whatever the backend: the GPU receives
 * the dequantized tensors as it receives any BF16 source tensor.  Memory: each dequantized tensor
 * is a new host buffer of rows x cols x 2 bytes (BF16), owned by the list.
 * Failure: the list keeps its tensors and their ownership (the caller frees it); the error
 * names the tensor. */
#ifndef LWQ_ENGINE_SRCDEQ_H
#define LWQ_ENGINE_SRCDEQ_H

#include "engine/source/tlist.h"
#include "layout/checkpoint/srcfmt.h"

/* src is sorted first (by name), whatever the outcome.  A list with no packed tensor is untouched
 * (one scan); a packed tensor without the matching quantization_config is an error. */
int lwq_srcdeq_apply(const lwq_model_config *cfg, lwq_tlist *src, lwq_error *e);

#endif
