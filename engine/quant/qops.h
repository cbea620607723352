/* engine/quant/qops.h — where a layer's weights are quantized: on the host or on a device, through the
 * quantizer table of kernels/quant_ops.h, with host buffers in and out.
 *
 * Both give the same bytes (the CUDA quantizers are tested byte-equal to the CPU reference), so
 * the choice changes speed, never output.  On a device each weight is uploaded once for its
 * search and its quantization (a one-entry cache) and the results are downloaded; amax stays on
 * the host, where it is a fast streaming max.  The device buffers for outputs (packed weights,
 * scales, block amax, Hessians) are kept and grown, so a layer's tensors cost no device
 * allocation once the largest has been seen.
 *
 * The cache's key: a host tensor record and its data are views that the engine frees and reuses
 * from layer to layer (the same record address, the same ring-slot address), so neither is an
 * identity.  The key is (generation, tensor name, data pointer, byte count): the name names the
 * layer, and lwq_qops_end_layer() starts a new generation, so nothing uploaded for one layer is
 * ever taken for another (engine/quant/qlayer.c calls it at the end of every layer). */
#ifndef LWQ_ENGINE_QOPS_H
#define LWQ_ENGINE_QOPS_H

#include <stdint.h>

#include "engine/source/tlist.h"
#include "kernels/backend.h"
#include "kernels/quant_ops.h"

#define LWQ_QOPS_SCRATCH 3

/* A device copy of w that someone else already holds (the forward's, engine/source/layersrc.h
 * lwq_layer_weights_device), or NULL. */
typedef const void *(*lwq_qops_devcopy_fn)(void *ctx, const lwq_htensor *w);

typedef struct lwq_qops {
    const lwq_backend *be;    /* the device backend whose memory `qt` reads, or NULL for the host */
    const lwq_quant_ops *qt;  /* the quantizers */
    uint64_t gen;             /* bumped by lwq_qops_end_layer */
    /* the one cached device weight */
    int cached;
    uint64_t cached_gen;
    char *cached_name;
    const void *cached_data;
    uint64_t cached_bytes;
    void *dev_w;
    uint64_t dev_cap;
    /* reusable device buffers for one call's outputs and extra inputs */
    void *scratch[LWQ_QOPS_SCRATCH];
    uint64_t scratch_cap[LWQ_QOPS_SCRATCH];
    /* the forward's device copies, read instead of uploading (NULL: none) */
    lwq_qops_devcopy_fn devcopy;
    void *devcopy_ctx;
    /* counters (tests, logs): weight uploads, device allocations, weights read from devcopy */
    uint64_t uploads, allocs, reused;
} lwq_qops;

/* be may be any backend: a CUDA one moves the work to the GPU when the build has the CUDA
 * quantizers; anything else quantizes on the host. */
void lwq_qops_init(lwq_qops *q, const lwq_backend *be);
/* Explicit choice (tests, host fakes): `qt` reads memory of `be` (be->ops alloc/upload/download);
 * be NULL: qt reads host memory directly. */
void lwq_qops_init_with(lwq_qops *q, const lwq_backend *be, const lwq_quant_ops *qt);
void lwq_qops_free(lwq_qops *q);
/* Read weights from fn's device copies when it has one (NULL: stop; call before the copies go). */
void lwq_qops_set_devcopies(lwq_qops *q, lwq_qops_devcopy_fn fn, void *ctx);
/* Forget the cached weight (its device buffer is kept for the next layer). */
void lwq_qops_end_layer(lwq_qops *q);
/* "host" or "cuda". */
const char *lwq_qops_where(const lwq_qops *q);

/* As the kernels/quant.h functions of the same names; w is (rows, cols), the last dimension cols. */
int lwq_qops_nvfp4_max(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float global_amax,
                       const char *name, uint8_t *packed, uint8_t *scale, float *ws2, lwq_error *e);
int lwq_qops_nvfp4_static(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, const float *block_amax,
                          float global_amax, const char *name, uint8_t *packed, uint8_t *scale, float *ws2,
                          lwq_error *e);
/* hessian (cols/16, 16, 16) host floats, or NULL for the plain sweep. */
int lwq_qops_nvfp4_sweep(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float global_amax,
                         const float *hessian, const char *name, float *block_amax, lwq_error *e);
int lwq_qops_nvfp4_mse(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float global_amax,
                       const char *name, float *block_amax, lwq_error *e);
int lwq_qops_fp8(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float amax, const char *name,
                 uint8_t *out, float *weight_scale, lwq_error *e);
int lwq_qops_fp8_mse(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, const char *name,
                     float *amax_out, lwq_error *e);

#endif
