/* engine/run/engine.h — `lwq quantize`: the layerwise run, and `lwq plan`: its memory prediction.
 *
 * Depth outside, data inside (../shared/DESIGN.md): the calibration set is embedded once into the
 * boundary; then for each decoder layer the prefetched weights run over every batch with the
 * statistics observer, the layer is quantized (engine/quant/qlayer.h), its shard goes to the writer
 * thread, and after the shard and the next boundary are durable the resume manifest is committed
 * (engine/run/resume/manifest.h).  The tail, the index and the config files finish the output.  The
 * whole-model path (data outside, depth inside, every layer resident) is kept as the reference:
 * it produces byte-identical output.
 *
 * Errors: 0 or a negative LWQ_E* code with the message filled; nothing half-written is ever
 * committed, and a rerun of the same command resumes after the last committed layer. */
#ifndef LWQ_ENGINE_ENGINE_H
#define LWQ_ENGINE_ENGINE_H

#include <stdint.h>

#include "core/sys/error.h"
#include "layout/recipe/recipe.h"

/* Calibration token sequences (unpadded), in order. */
typedef struct lwq_calib_set {
    int n;
    int32_t **ids;           /* ids[i][0..len[i]) */
    int64_t *len;
    int32_t pad_id;          /* token placed in padded positions */
    char source[256];        /* what it came from, for the log */
} lwq_calib_set;

void lwq_calib_set_free(lwq_calib_set *c);
/* The longest sequence's length (0 for none or NULL). */
int64_t lwq_calib_set_longest(const lwq_calib_set *c);
/* The model's sliding window (layout/config/config.h) against the longest sequence of c: refused, before
 * any weight is read, when lwq's full attention would not be the model's.  `what` names the set
 * ("a calibration sequence"), `option` the option that shortens it. */
struct lwq_model_config;
int lwq_calib_set_check_window(const lwq_calib_set *c, const struct lwq_model_config *cfg, const char *model_dir,
                               const char *what, const char *option, lwq_error *e);

typedef enum lwq_device_choice { LWQ_DEVICE_AUTO = 0, LWQ_DEVICE_CPU, LWQ_DEVICE_CUDA } lwq_device_choice;

typedef struct lwq_quantize_opts {
    const char *model_dir;
    const char *out_dir;
    const char *resume_dir;      /* NULL: "<out>.layerwise_resume" */
    const lwq_recipe *recipe;
    const lwq_calib_set *calib;
    int batch_size;              /* sequences per batch (left padding) */
    int include_padding;         /* padded rows count in statistics (Model Optimizer parity) */
    int all_experts;             /* every expert also runs on every token for statistics */
    int qdq_next;                /* the next layer sees the quantized layer's output */
    int whole_model;             /* reference path: all layers resident, data outside */
    int dry_read;                /* every layer through the I/O path; nothing computed/written */
    lwq_device_choice device;
    /* NULL: the run makes its backend from `device`.  Else the run computes on this one and does
     * not destroy it (the tests run the engine on a fake device: tests/helpers/device/fakedev.h); the
     * plan still follows `device`. */
    const struct lwq_backend *backend;
    int threads;                 /* 0: all cores */
    double max_gpu_gb, max_cpu_gb; /* 0: no limit */
    int prefetch;                /* ring slots K (0: 2) */
    int expert_group;            /* routed experts per streamed unit (0: streaming only when a layer
                                    does not fit the budget, sized to it) */
    const char *log_json;        /* NULL: none */
    int quiet;
    int repair;                  /* recompute a committed layer whose shard fails its checksum */
    struct lwq_ranks *ranks;     /* the ranks of a run under MPI (core/parallel/ranks.h); NULL: one process */
    int plan_ranks;              /* lwq plan --ranks N: per-rank memory of a run over N ranks (0: 1) */
} lwq_quantize_opts;

typedef struct lwq_mem_plan {
    int largest_layer;
    uint64_t largest_layer_bytes;  /* source bytes */
    uint64_t slot_bytes;           /* one ring slot (aligned read extents) */
    int slots;
    uint64_t boundary_bytes;       /* two boundaries (input and output of a layer) */
    uint64_t workspace_bytes;      /* forward scratch for one batch */
    uint64_t stats_bytes;          /* Hessian sums etc. */
    uint64_t gptq_hessian_bytes;   /* of which GPTQ's full in x in sums (also in stats_bytes) */
    uint64_t gptq_factor_bytes;    /* GPTQ working memory for the largest linear */
    uint64_t search_bytes;         /* the host's FP8 weight search for its largest linear: per-row
                                      losses over every candidate (a recipe's own range: up to
                                      LWQ_MSE_MAX_STEPS) and a routed expert's stacked gate+up copy */
    uint64_t writer_bytes;         /* quantized output of up to two layers in flight */
    uint64_t embed_bytes;          /* embedding matrix during the embedding step */
    uint64_t process_bytes;        /* the process itself: fixed allowances + the calibration ids (plan.c) */
    uint64_t host_peak, gpu_peak;  /* predicted peaks (gpu 0 on the CPU backend) */
    /* parts of gpu_peak besides the layer's weights, activations and scratch */
    uint64_t gpu_runtime_bytes;    /* CUDA context + cuBLAS workspace (allowances, see engine/run/plan/plan.c) */
    uint64_t gpu_staging_bytes;    /* F32 staging of the widest mixed-dtype / bias GEMM */
    uint64_t gpu_quant_bytes;      /* the quantizer's copy of the largest weight + its outputs */
    uint64_t gpu_gptq_bytes;       /* GPTQ's device buffers for its largest linear + the cuBLAS /
                                      cuSOLVER handles and workspaces (live with gpu_quant_bytes) */
    uint64_t gpu_weights_bytes;    /* weights on the device: the largest layer and its dequantized
                                      sources, or with --whole-model every layer and the embedding */
    uint64_t gpu_act_bytes;        /* one batch's activations + the forward's scratch */
    uint64_t gpu_embed_bytes;      /* the embedding step: the embedding matrix uploaded + one batch */
    uint64_t output_bytes;         /* predicted bytes written */
    uint64_t source_bytes;
    int64_t calib_tokens, calib_rows;
    /* expert streaming (engine/run/plan/plan_stream.c) */
    int expert_group;              /* experts per unit when streaming, 0 when layers are whole */
    int num_experts;
    uint64_t dense_bytes;          /* largest dense part (attention, norms, router, shared experts) */
    uint64_t expert_bytes;         /* largest single routed expert */
    uint64_t stream_bytes;         /* MoE input + running expert sum + routing (host) */
    uint64_t stream_min_host, stream_min_gpu; /* peaks with one expert per unit (0: no experts) */
} lwq_mem_plan;

/* Predict memory and output size for a run with these options (nothing is read but headers). */
int lwq_quantize_plan(const lwq_quantize_opts *o, lwq_mem_plan *p, lwq_error *e);
struct lwq_ckpt;
/* The same on a checkpoint already open (the run's own, so its headers are not parsed twice). */
int lwq_quantize_plan_ckpt(const lwq_quantize_opts *o, const struct lwq_ckpt *ck, lwq_mem_plan *p, lwq_error *e);
/* Expert streaming in a plan: the group size from o->expert_group or, when a whole layer does not
 * fit --max-cpu-memory-gb / --max-gpu-memory-gb, the largest that does; the peaks then follow
 * the units.  Called by lwq_quantize_plan_ckpt. */
int lwq_plan_stream(const lwq_quantize_opts *o, const struct lwq_ckpt *ck, lwq_mem_plan *p, lwq_error *e);
/* The refusal of a plan over its budget when expert streaming is what decides it: an
 * --expert-group too large for the budget, or a budget below the dense part + one expert (the
 * message gives the least that works).  0 when the generic over-budget message applies. */
int lwq_plan_stream_refusal(const lwq_quantize_opts *o, const lwq_mem_plan *p, lwq_error *e);
/* Print a plan for people. */
void lwq_mem_plan_print(const lwq_mem_plan *p, const lwq_quantize_opts *o);
int lwq_quantize_run(const lwq_quantize_opts *o, lwq_error *e);

/* Set by SIGINT/SIGTERM handlers: the run stops at the next safe point after committing the
 * layer in flight. */
void lwq_engine_request_stop(void);
/* Whether a stop was requested (for loops outside the run, e.g. the auto-quantize search). */
int lwq_engine_stop_requested(void);

#endif
