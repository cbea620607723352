/* engine/eval/eval.h — `lwq eval`: what quantization cost, measured layer by layer with one layer of
 * each stream in memory.
 *
 * Streams walk the decoder layers together, each over its own boundary activations: the source
 * model on the eval tokens, one quantized model per candidate on the same tokens, and — when a
 * candidate is built in memory from a recipe — the source model on the calibration tokens, whose
 * statistics quantize each layer exactly as `lwq quantize` does (same engine/quant/qlayer.h, same
 * observer), so an in-memory candidate holds the bytes `lwq quantize` would write.  A candidate
 * is either such a recipe or a quantized checkpoint directory (lwq's export or a Model Optimizer
 * HF export: NVFP4, FP8, MIXED_PRECISION), whose weights are dequantized from its own bytes.
 * The quantized streams run with the serving engine's activation and KV-cache quantization
 * emulated (engine/eval/emul/eval_emul.h; docs/EVAL.md), or, with weights_only, with the dequantized
 * weights alone: every activation and the KV cache stay in the activation dtype, which is what a
 * framework running the dequantized model computes (transformers on a dequantized checkpoint).
 * The source's layers come through the prefetch ring; a quantized checkpoint's layer is read
 * when its turn comes.
 *
 * Reports per layer and candidate the relative MSE ||h_q - h||^2 / ||h||^2 and the max abs
 * difference of the hidden state over the real eval tokens (and, for MoE layers, the experts
 * with the largest relative output error); at the end, from the final norm and lm_head of each
 * model (f32 logits), per next-token prediction: mean KL(P_src || P_q) in nats, top-1 agreement,
 * and the perplexity of the eval tokens under both models.
 *
 * Errors: 0 or a negative LWQ_E* code with the message naming the tensor, layer or file.  A
 * quantized checkpoint that does not match the source (names, shapes, dtypes), an unknown
 * quant_algo, or a format that is not emulated is refused before any layer is computed. */
#ifndef LWQ_ENGINE_EVAL_H
#define LWQ_ENGINE_EVAL_H

#include <stdint.h>
#include <stdio.h>

#include "engine/run/engine.h"

#define LWQ_EVAL_WORST 5

typedef struct lwq_eval_candidate {
    char name[128];
    const lwq_recipe *recipe;   /* built in memory from this recipe, or NULL */
    const char *quant_dir;      /* or read from this quantized checkpoint */
    int kv_none;                /* quant_dir: do not emulate the KV cache the checkpoint declares */
} lwq_eval_candidate;

typedef struct lwq_eval_opts {
    const char *model_dir;      /* SRC */
    int ncand;
    const lwq_eval_candidate *cand;
    const lwq_calib_set *calib; /* calibration of in-memory candidates (NULL when there is none) */
    const lwq_calib_set *data;  /* the eval token sequences */
    int batch_size;             /* sequences per batch, calibration and eval (0: 8) */
    int include_padding, all_experts;
    lwq_device_choice device;
    int threads;
    double max_gpu_gb, max_cpu_gb;
    int prefetch;
    const char *log_json;       /* JSON lines: one per layer, one summary */
    int quiet;
    int weights_only;           /* candidates: dequantized weights only; no activation or KV-cache
                                   quantization is emulated */
} lwq_eval_opts;

typedef struct lwq_eval_expert {
    int expert;
    double rel_err;             /* ||E_q(x) - E_src(x)||^2 / ||E_src(x)||^2 over its routed tokens */
    int64_t tokens;
} lwq_eval_expert;

typedef struct lwq_eval_layer {
    double rel_mse, max_abs;
    int nworst;
    lwq_eval_expert worst[LWQ_EVAL_WORST];
} lwq_eval_layer;

typedef struct lwq_eval_cand_result {
    char name[128];
    double kl, top1_agree, ppl, nll;
    uint64_t output_bytes;      /* decoder layers + tail as the checkpoint stores them */
    uint64_t linear_weights;    /* elements of every decoder-layer linear weight */
    uint64_t linear_bytes;      /* their stored bytes, scales included */
    double bits_per_weight;     /* 8 * linear_bytes / linear_weights */
    int quantized_linears;
    lwq_eval_layer *layers;     /* nlayers */
} lwq_eval_cand_result;

typedef struct lwq_eval_result {
    char model[256];
    int nlayers, ncand;
    int64_t tokens;             /* next-token predictions scored */
    int64_t eval_tokens;        /* real tokens run through the layers */
    double nll_src, ppl_src;
    double wall_s, forward_src_s, forward_q_s, calib_s, quantize_s;
    uint64_t peak_rss_bytes;    /* VmHWM of the process at the end */
    int weights_only;           /* the run's lwq_eval_opts.weights_only */
    lwq_eval_cand_result *c;
} lwq_eval_result;

int lwq_eval_run(const lwq_eval_opts *o, lwq_eval_result *r, lwq_error *e);
void lwq_eval_result_free(lwq_eval_result *r);

/* Predicted peak host memory of an eval run (headers only), printed for people. */
int lwq_eval_plan(const lwq_eval_opts *o, lwq_mem_plan *p, lwq_error *e);
void lwq_eval_plan_print(const lwq_mem_plan *p, const lwq_eval_opts *o, FILE *fp);

/* eval_report.c: the --json object and the table for people. */
int lwq_eval_write_json(const lwq_eval_result *r, const char *path, lwq_error *e);
void lwq_eval_print_table(const lwq_eval_result *r, FILE *fp);

#endif
