/* engine/eval/eval_internal.h — pieces of `lwq eval` shared by eval.c (the run), eval_qdir.c (quantized
 * checkpoints: validation against the source, layer reads, dequantized overlays) and
 * eval_report.c.  Not public. */
#ifndef LWQ_ENGINE_EVAL_INTERNAL_H
#define LWQ_ENGINE_EVAL_INTERNAL_H

#include "engine/eval/eval.h"
#include "engine/eval/emul/eval_emul.h"
#include "engine/source/tlist.h"
#include "layout/arch/arch.h"
#include "layout/checkpoint/checkpoint.h"

/* A quantized checkpoint directory, checked against its source. */
typedef struct lwq_qdir {
    lwq_ckpt ck;
    int open;
    char quant_algo[32];      /* "NVFP4", "FP8", "MIXED_PRECISION" */
    int kv_fp8;               /* the config declares an FP8 KV cache */
    uint64_t tail_bytes;      /* tensors outside the decoder layers */
} lwq_qdir;

/* Open `dir` and check every tensor against `src`: names, shapes and dtypes of unquantized
 * tensors; packed shapes and scale tensors of quantized linears; the declared quant_algo and KV
 * cache algorithm.  Nothing that is not emulated passes. */
int lwq_qdir_open(lwq_qdir *q, const char *dir, const lwq_ckpt *src, lwq_error *e);
void lwq_qdir_free(lwq_qdir *q);
/* Tensors of decoder layer `layer` (or the tail, -1), owned and sorted. */
int lwq_qdir_read_layer(const lwq_qdir *q, int layer, lwq_tlist *out, lwq_error *e);
/* An error whose message opens with the name of one of q's tensors (lwq_qlayer_view_make's do:
 * "model.layers.0.mlp.down_proj.weight_scale[5] is NaN ...") gets the file that holds it in
 * front, so a refusal names the file, the tensor and the limit.  Other messages are left as
 * they are. */
void lwq_qdir_name_file(const lwq_qdir *q, lwq_error *e);

/* What a layer's quantized tensors give the forward. */
typedef struct lwq_qlayer_view {
    lwq_tlist overlay;        /* "<m>.weight" dequantized to F32 for every quantized linear */
    uint64_t linear_bytes;    /* stored bytes of the layer's linear weights, scales included */
    uint64_t linear_weights;  /* their elements */
    int quantized;
} lwq_qlayer_view;

/* From the sorted tensors `qt` of a quantized layer (lwq_qlayer_run's output or a checkpoint's
 * shard): dequantize every quantized linear of `plan` into view->overlay, register its input
 * quantization with `em` (after lwq_emul_reset) unless weights_only, and set the KV cache: none
 * unless kv_fp8; then FP8 with the layer's k_scale / v_scale when present, else scale 1.0 (cast
 * mode).  The scales are checked (finite, > 0) in both modes. */
int lwq_qlayer_view_make(const lwq_arch_layer *plan, const lwq_tlist *qt, int kv_fp8, int weights_only, lwq_emul *em,
                         lwq_qlayer_view *view, lwq_error *e);
void lwq_qlayer_view_free(lwq_qlayer_view *v);

#endif
