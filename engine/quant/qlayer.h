/* engine/quant/qlayer.h — turn one calibrated decoder layer into the tensors of its output shard.
 *
 * Input: the layer plan, the format/algorithm chosen for each linear (recipe), the statistics the
 * forward collected, and the layer's source tensors (host views).  Output: every tensor of the
 * shard under its full name (spec/FORMATS.md 2-6): quantized linears as weight / weight_scale /
 * weight_scale_2 / input_scale (NVFP4) or weight / weight_scale / input_scale (FP8), k_scale and
 * v_scale for a calibrated FP8 KV cache, and every other source tensor passed through unchanged
 * (as a view of the source bytes, so the source buffer must outlive the output list).
 *
 * Rules applied here (as NVIDIA Model Optimizer 0.47 exports them; perf/RESULTS.md "Side by side
 * with Model Optimizer"): NVFP4 fused groups share the max input amax and the max weight amax
 * (section 5); dense FP8 groups are not unified, but an FP8 routed expert's gate and up share one
 * weight amax (Model Optimizer quantizes them as one gate_up_proj slice); every routed expert of a
 * layer takes the same input amax per input -- the max over all experts' gate/up inputs, and over
 * all down inputs -- so an expert no calibration token reached ("cold") needs no fill of its own
 * (counted and reported); any other linear without calibration data, and any zero or non-finite
 * amax, is an error naming the module.  GPTQ linears (engine/quant/qlayer_gptq.h) rewrite the weight before its
 * codes are taken; a cold expert has no Hessian and takes the max path under GPTQ, the sweep without
 * a Hessian under local_hessian (both counted in the report);
 * GPTQ on a depthwise conv1d (not a matrix product) is the max path too.  Deterministic: same
 * inputs, same bytes.  The report is filled even on failure: free it with lwq_qlayer_report_free. */
#ifndef LWQ_ENGINE_QLAYER_H
#define LWQ_ENGINE_QLAYER_H

#include "engine/quant/qops.h"
#include "engine/quant/stats.h"
#include "engine/source/tlist.h"
#include "layout/recipe/recipe.h"

/* One GPTQ linear's layer-output errors ||WX - ŴX||^2 over its calibration tokens. */
typedef struct lwq_qlayer_gptq_err {
    char name[LWQ_ARCH_NAME_MAX];
    double err;                /* with the GPTQ weight */
    double max_err;            /* with the max-calibrated weight (same scales) */
    double ref;                /* ||WX||^2, to make both relative */
    int sampled;               /* measured on every s-th row only (large linears) */
} lwq_qlayer_gptq_err;

typedef struct lwq_qlayer_report {
    int n_experts;
    int cold_experts;          /* experts no routed token reached */
    int filled_experts;        /* of those, experts whose input scales came from siblings */
    int zero_weights;          /* all-zero weights quantized with the substitute amax */
    int quantized;             /* linears quantized */
    int gptq_fallback;         /* GPTQ linears without calibration tokens (cold experts): max path */
    int hessian_fallback;      /* local_hessian linears without calibration tokens (cold experts):
                                * the sweep without a Hessian */
    int gptq_n, gptq_cap;      /* GPTQ linears, in quantization order (owned; lwq_qlayer_report_free) */
    lwq_qlayer_gptq_err *gptq;
} lwq_qlayer_report;

void lwq_qlayer_report_free(lwq_qlayer_report *rep);

/* The quantization of linear i of layer plan p: the recipe's choice for its module, except that
 * routers are never quantized, whatever a rule matched.  The one home of that rule. */
lwq_quant_choice lwq_qlayer_choice(const lwq_recipe *r, const lwq_arch_layer *p, int i);

/* The Hessian the calibration of linear l with choice c wants from the statistics:
 * LWQ_STATS_H_BLOCK for NVFP4 local_hessian, LWQ_STATS_H_FULL for GPTQ (not on a conv1d),
 * LWQ_STATS_H_NONE otherwise.  The one home of that condition. */
int lwq_qlayer_hessian(const lwq_arch_linear *l, const lwq_quant_choice *c);

/* Check, before any weight is read, that the choices can be honoured: no router quantized, NVFP4
 * in-features % 16 == 0, every fused group in one format.  Errors name the module. */
int lwq_qlayer_check(const lwq_arch_layer *plan, const lwq_quant_choice *choice, lwq_error *e);

/* src must be sorted (lwq_tlist_sort).  rep is reset first.  out receives the shard's tensors, unsorted.  qo says where
 * the quantizers run (engine/quant/qops.h; same bytes either way). */
int lwq_qlayer_run(const lwq_arch_layer *plan, const lwq_quant_choice *choice, lwq_kv_mode kv,
                   const lwq_layer_stats *st, const lwq_tlist *src, lwq_qops *qo, lwq_tlist *out,
                   lwq_qlayer_report *rep, lwq_error *e);

/* Expert streaming (engine/source/units.h): quantize only the linears with only[i] != 0, from the unit's
 * source tensors src (every other src tensor passes through, as above).  The experts' input
 * scales are provisional (experts in later groups are not observed yet); after the layer's last
 * group, lwq_qlayer_finish_inputs recomputes every expert's input_scale in out from the final
 * statistics (the same values lwq_qlayer_run gives) and sets the report's expert counts.  The
 * weights themselves do not depend on input amaxes, so nothing else changes. */
int lwq_qlayer_run_part(const lwq_arch_layer *plan, const lwq_quant_choice *choice, lwq_kv_mode kv,
                        const lwq_layer_stats *st, const lwq_tlist *src, lwq_qops *qo, const uint8_t *only,
                        lwq_tlist *out, lwq_qlayer_report *rep, lwq_error *e);
/* Rows [r0, r1) of a linear's output features (r0 == r1: none): a rank's share of a layer. */
typedef struct lwq_qlayer_rows {
    int64_t r0, r1;
} lwq_qlayer_rows;

/* A layer (or with only != NULL, a streamed unit as above) split over ranks: quantize only the
 * rows mine[i] of each linear, from the reduced statistics, giving exactly those rows of the
 * tensors lwq_qlayer_run gives.  A linear's rows quantize apart only where every block depends on
 * its own weights and the group's global amax alone (engine/quant/dist.h lwq_dist_splittable);
 * any other linear is mine whole or not at all.  A partial share's weight and weight_scale come
 * out as pieces (lwq_htensor row0 / rows_all, joined by engine/quant/dist.h); its scalars
 * (weight_scale_2, input_scale) and its report counts come from the share with r0 == 0 alone.
 * With `rest`, also every pass-through tensor and the k/v scales (the rank that writes the shard).
 * rep's expert counts are the layer's (the same on every rank). */
int lwq_qlayer_run_mine(const lwq_arch_layer *plan, const lwq_quant_choice *choice, lwq_kv_mode kv,
                        const lwq_layer_stats *st, const lwq_tlist *src, lwq_qops *qo, const uint8_t *only,
                        const lwq_qlayer_rows *mine, int rest, lwq_tlist *out, lwq_qlayer_report *rep, lwq_error *e);
int lwq_qlayer_finish_inputs(const lwq_arch_layer *plan, const lwq_quant_choice *choice, const lwq_layer_stats *st,
                             lwq_tlist *out, lwq_qlayer_report *rep, lwq_error *e);

#endif
