/* engine/autoq/autoq.h — `lwq quantize --auto-quantize-bits B | --auto-quantize-gb G`: the most
 * accurate checkpoint under a size budget, with NVFP4, FP8, weight-only NVFP4 or the source dtype
 * chosen per search group (engine/autoq/autoq_groups.h), one layer in memory.
 *
 *   pass 1  score: one pass over the disk.  Per layer, the calibration forward (the observer of
 *           lwq quantize) over every calibration sample; the layer quantized once per candidate
 *           format (engine/quant/qlayer.h, the bytes lwq quantize would write); then, on the
 *           scored samples (the first --auto-quantize-score-size, by default 1/8 of the
 *           calibration samples: the replays cost ~6-9 layer forwards of the scored rows per
 *           candidate pair of formats, perf/RESULTS.md), each group alone in each
 *           format, everything else in the source dtype, run through the layer with the serving
 *           engine's activation quantization emulated (engine/eval/emul/eval_emul.h).  Score "layer":
 *           the squared error this adds to the layer's output relative to that output, times the
 *           gains of the later layers (each layer's gain: how much it grows the relative error
 *           of a perturbed input, measured with a probe, the previous layer's replay of one
 *           group, run through it; errors of early layers pass through more gains).
 *           Score "kl": that output carried through the rest of the model in the source dtype to
 *           the logits, KL(P_src || P_q) per scored token (a stream per group and format: for
 *           models small enough).  Replays reuse the source's GEMM and attention results where
 *           their inputs are unchanged (engine/eval/emul/eval_memo.h; CPU backend).  Each layer's
 *           scores and exact byte costs are committed to the resume directory with the boundary
 *           (the calibration activations entering the next layer), so a killed pass 1 resumes at
 *           the first uncommitted layer; the identical command gives identical scores.
 *   solve   the exact multiple-choice knapsack (engine/autoq/mckp.h) over every group: least
 *           summed score with the written bytes under the budget.  Routers are never quantized;
 *           a fused group lies in one search group; the base recipe's exclusions and calibration
 *           settings apply.  The mix is written as a recipe: lwq JSON and Model Optimizer YAML.
 *   pass 2  lwq quantize with that recipe: the layerwise run, resumable and byte-identical on
 *           resume, exported as MIXED_PRECISION with quantized_layers.
 *   report  per group the format chosen; predicted and written bits per weight (written: counted
 *           from the output's tensors, as lwq eval counts them).
 *
 * Budgets: bits per weight = 8 x (bytes of every decoder-layer linear weight and its scales) /
 * (their elements), routers and the base recipe's unquantized linears included at their source
 * bytes, exactly lwq eval's bits/weight; GB = 1e9 bytes of every tensor written (decoder layers
 * and the tail; safetensors headers excluded).  lm_head is a search group too when a
 * module_search_spaces entry matches it (engine/autoq/head/autoq_head.h: scored at the logits after
 * the last layer), and then counts in both sums of the bits per weight.
 *
 * Cost model active_moe (Model Optimizer 0.47's constraints.cost_model, _auto_quantize_cost.py):
 * a routed-expert group (a member named ".experts." and not "shared_expert") weighs ratio, every
 * other linear 1, in the groups' costs and in the budget's weights alike: sum over linears of
 * weight x bytes <= bits / 8 x sum of weight x elements (Model Optimizer: sum of cost_weight x
 * compressed size <= effective_bits / 16 x sum of cost_weight x uncompressed size).  Integer
 * costs for the exact knapsack: weights in units of 2^-20 (ratio rounded to the nearest; exact
 * for top_k / num_experts with num_experts a power of two, e.g. the recipes' 0.03125).  Written
 * bits per weight stay the unweighted count; the report gives both.  A --auto-quantize-gb budget
 * counts real bytes: active_moe is refused with it.  A routed expert the base recipe leaves
 * unquantized (in no group) is refused by name (lwq's fixed bytes are per layer, unweighted).
 *
 * Files: <resume>/auto_quantize/ holds scores.json (the pass-1 manifest: fingerprint, committed
 * layers with their groups' scores and costs, the state file's size and checksum) and
 * state-0.bin / state-1.bin (the boundary and, for the kl score, the streams); the recipe goes to
 * OUT/auto_quantize_recipe.json and .yaml and OUT/auto_quantize.json holds the report.  Pass 1's
 * inputs (source, config, calibration tokens, base recipe, formats, score, score size, backend)
 * are its fingerprint: a rerun with other inputs is refused, naming them; the budget is not
 * among them (a new budget reuses the scores while pass 2 has not started).
 *
 * Errors: 0 or a negative LWQ_E* with the message naming the layer, module or file; a budget
 * below the smallest mix is refused with the least bits per weight (or GB) that can be met. */
#ifndef LWQ_ENGINE_AUTOQ_H
#define LWQ_ENGINE_AUTOQ_H

#include <stdint.h>

#include "engine/run/engine.h"
#include "layout/recipe/recipe_yaml.h"

typedef enum lwq_aq_score { LWQ_AQ_SCORE_LAYER = 0, LWQ_AQ_SCORE_KL } lwq_aq_score;

/* The candidate formats of a search group: indexed as lwq_qformat (NONE, NVFP4 = W4A4, FP8 =
 * W8A8), then LWQ_AQ_W4A16, weight-only NVFP4 (W4A16_NVFP4: NVFP4 weights and weight scales, no
 * input quantizer, no input_scale), a candidate of Model Optimizer's qwen3_6_moe auto_quantize
 * recipes.  Its cost is what lwq writes (4.5 bits per weight plus weight_scale_2; Model Optimizer
 * counts NVFP4 and W4A16 alike, 4.5 effective bits: the weight quantizer's, configs/numerics/nvfp4);
 * its score the replay with the weights dequantized and the inputs unquantized.  LWQ_AQ_NVFP4_MSE is
 * NVFP4 W4A4 whose weights get their own algorithm, the mse search with the FP8 scale sweep (static
 * block scales; Model Optimizer's preset configs/ptq/presets/model/nvfp4_w4a4_weight_mse_fp8_sweep,
 * the candidate of its general/auto_quantize/nvfp4_mse_fp8_at_6p0bits): Model Optimizer calibrates each
 * candidate with its own algorithm (algorithms.py before_search: calibrate(model, recipe.config.algorithm)
 * with every group set to that candidate), so the other candidates keep the base recipe's.  Its bytes
 * are NVFP4's; its score the replay of those weights. */
enum { LWQ_AQ_W4A16 = 3, LWQ_AQ_NVFP4_MSE = 4, LWQ_AQ_W4A16_F46 = 5, LWQ_AQ_FORMATS = 6 };
/* LWQ_AQ_W4A16_F46 is weight-only Four-over-Six NVFP4 (lwq's --qformat nvfp4_four_over_six weights without
 * the input quantizer): the mse search over the multipliers 1.0 and 1.5 (start 1.0, stop 1.5, step 0.5,
 * no FP8 scale sweep) with block scales normalised to 256, as the inline candidate of Model Optimizer's
 * Muse-Glimmer-30B w4a16_nvfp4_4o6_mixed recipe asks; W4A16's bytes. */
#define LWQ_AQ_F46_MULT {1.0, 1.5, 0.5}

typedef struct lwq_autoq_opts {
    lwq_quantize_opts q;     /* pass 2's run; q.recipe is the base recipe, q.calib the calibration */
    double bits;             /* the budget in bits per weight, or 0 */
    double gb;               /* the budget in GB (1e9 bytes), or 0 */
    uint8_t formats[LWQ_AQ_FORMATS]; /* the candidate formats asked for (NONE may be left out) */
    lwq_aq_score score;
    int score_size;          /* calibration samples scored (the first ones); 0: 1/8 of them, rounded up
                                (Model Optimizer's ratio: 128 scored of hf_ptq's 1024) */
    int no_memo;             /* replays compute every op (the memo's own check) */
    int pass1_only;          /* stop after pass 1 and the solve: write the recipe, quantize nothing */
    const char *scores_from; /* a complete scores.json of an earlier search with the same inputs:
                                pass 1 is skipped (another budget needs only the solve and pass 2) */
    int active_moe;          /* Model Optimizer's cost_model active_moe (else "weight"): see below */
    double active_moe_ratio; /* its active_moe_expert_ratio in (0, 1]; 0: num_experts_per_tok /
                                num_experts of the config, as Model Optimizer infers it */
    /* Model Optimizer 0.47's module_search_spaces (an auto_quantize recipe's; nspaces 0: none).  A group
     * every member of which matches one of a space's patterns takes that space's candidates (none only
     * with its allow_no_quant: without it a group keeps a quantized format, as Model Optimizer filters
     * its internal no-quant reference out before the LP); a group no space matches takes `unmatched`
     * (the recipe's top-level candidate_formats and none; only none when it has none).  `formats` is then
     * every candidate of either: what pass 1 quantizes and scores.  A space matching part of a group, or
     * two spaces matching one group, is an error naming both, as Model Optimizer refuses them. */
    const lwq_recipe_aq_space *spaces;
    int nspaces;
    uint8_t unmatched[LWQ_AQ_FORMATS];
    /* q.recipe is the recipe's fixed `quantize` baseline (Model Optimizer 0.47's fixed_quantization_config,
     * algorithms.py _resolve_fixed_group_recipe): a group no space matches is not searched but keeps the
     * baseline's format, a search group with that one choice, so its bytes enter the budget (weighted by
     * the cost model, as its fixed hparam's cost does) and the solver cannot change it; `unmatched` is
     * unused.  The baseline must give every such group one and the same format (or leave it unquantized:
     * then it is in no group), its cheapest; anything else is refused naming the group, as Model
     * Optimizer refuses it. */
    int baseline;
    double baseline_bits;    /* the baseline's effective_bits (0: none): Model Optimizer then costs every group
                                it quantizes at them, so lwq_aq_baseline_check's cheapest-format test is moot */
    /* The candidates carry their own calibration algorithm, as Model Optimizer 0.47 calibrates each
     * candidate with its own (an auto_quantize recipe's: its presets' max, or an inline candidate's):
     * nvfp4, fp8 and w4a16_nvfp4 are then max-calibrated whatever the base recipe's algorithm (a fixed
     * baseline's mse, say).  0: they keep the base recipe's (lwq's own --qformat X --auto-quantize-*). */
    int own_algos;
} lwq_autoq_opts;

int lwq_autoq_run(const lwq_autoq_opts *o, lwq_error *e);

/* "none", "nvfp4", "fp8", "w4a16_nvfp4", "nvfp4_w4a4_weight_mse_fp8_sweep", "w4a16_nvfp4_four_over_six":
 * candidate f as --auto-quantize-formats and scores.json spell it (Model Optimizer's preset names where it
 * has one); "?" out of range. */
const char *lwq_aq_format_name(int f);
/* name -> candidate index; -1 when unknown */
int lwq_aq_format_parse(const char *name);

/* "layer", "kl" */
const char *lwq_aq_score_name(lwq_aq_score s);
/* The calibration samples pass 1 scores (the first ones). */
int lwq_aq_score_samples(const lwq_autoq_opts *o);

#endif
