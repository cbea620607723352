/* engine/source/layersrc.h — a layer's source tensors: where to read them, views of them once read, and
 * the weight lookup the forward uses.
 *
 * lwq_layersrc_ranges turns the tensors of decoder layer i (or the tail, i = -1) into read
 * ranges for io/; after the read, lwq_layersrc_views makes a sorted tensor list of views into
 * the slot (a tensor whose bytes land misaligned for its dtype is copied to an aligned buffer, so
 * no op ever reads a misaligned element).  lwq_layer_weights serves those tensors to the forward:
 * host views on the CPU backend, uploaded device copies (cached for the layer) on a GPU, and an
 * optional overlay (the dequantized weights for --qdq-next) that takes precedence.  Both views
 * and read lists come back with FP8-block / MXFP4 source tensors already dequantized
 * (engine/source/srcdeq.h). */
#ifndef LWQ_ENGINE_LAYERSRC_H
#define LWQ_ENGINE_LAYERSRC_H

#include "engine/source/devslab.h"
#include "engine/forward/forward.h"
#include "engine/source/tlist.h"
#include "io/reader.h"
#include "layout/checkpoint/checkpoint.h"

/* Ranges of one read job closer than this on the same file are read as one extent (gap bytes
 * included).  The ring slots are sized from plans built with this gap and the prefetcher merges
 * with it, so the two must agree: a layer whose tensors are interleaved with another layer's in
 * the file needs a larger slot than its own bytes. */
#define LWQ_LAYERSRC_MERGE_GAP ((uint64_t)256 << 10)

/* ranges[k] for the k-th tensor of the layer (c->layers[i].idx order, or c->tail for -1). */
int lwq_layersrc_ranges(const lwq_ckpt *c, int layer, lwq_io_range **ranges, int *n, lwq_error *e);
/* Views into `slot` after the ranges were read there. */
int lwq_layersrc_views(const lwq_ckpt *c, int layer, const lwq_io_range *ranges, void *slot,
                       lwq_tlist *src, lwq_error *e);
/* Read the layer's tensors with plain preads into owned buffers (whole-model path, tail). */
int lwq_layersrc_read(const lwq_ckpt *c, int layer, lwq_tlist *src, lwq_error *e);

typedef struct lwq_layer_weights {
    const lwq_backend *be;
    const lwq_tlist *src;      /* sorted */
    const lwq_tlist *overlay;  /* sorted, or NULL */
    const lwq_names *names;    /* cfg.names: the forward asks for canonical "model.layers..." names,
                                  wrapped checkpoints store "language_model.model.layers..." */
    lwq_tlist dev;             /* device copies (CUDA), data = device pointers */
    lwq_name_index idx;        /* name -> index in dev */
    const void **dev_host;     /* the host data each device copy was made from */
    int dev_host_cap;
    lwq_devslab *slab;         /* device memory for the copies, or NULL: one allocation each */
    lwq_weights w;             /* pass to the forward */
} lwq_layer_weights;

void lwq_layer_weights_init(lwq_layer_weights *lw, const lwq_backend *be, const lwq_tlist *src,
                            const lwq_tlist *overlay, const lwq_names *names);
/* Take the copies from `slab` (one user at a time; ignored when it is in use): see devslab.h. */
void lwq_layer_weights_use_slab(lwq_layer_weights *lw, lwq_devslab *slab);
/* The device copy the forward made of host tensor w (same name and host data), or NULL: lets the
 * quantizer read it instead of uploading w again (lwq_qops_set_devcopies).  lw: a
 * lwq_layer_weights. */
const void *lwq_layer_weights_device(void *lw, const lwq_htensor *w);
/* Frees device copies (and resets the slab for the next layer). */
void lwq_layer_weights_free(lwq_layer_weights *lw);

#endif
