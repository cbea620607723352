/* layout/recipe/recipe_yaml_out.h — a per-module quantization written as Model Optimizer's PTQ recipe
 * YAML (the schema layout/recipe/recipe_yaml.h reads; docs/RECIPES.md), self-contained: no imports.
 *
 * The YAML turns every quantizer off (`{quantizer_name: '*', enable: false}`), then per module
 * glob enables its weight and input quantizers (`<glob>.weight_quantizer`; a glob ending in `*`,
 * a layer's routed experts, `<glob>weight_quantizer`, so that it also names Model Optimizer's
 * fused-experts quantizers `...experts.gate_up_proj_weight_quantizer`) with inline attributes (NVFP4: e2m1 in blocks of
 * 16 with e4m3 scales, dynamic or static; FP8: e4m3 per tensor; a fixed input amax as
 * constant_amax), and sets the KV cache (`*[kv]_bmm_quantizer`).  Model Optimizer has one
 * calibration algorithm per recipe, and a module's own algorithm is told by its attributes
 * (docs/RECIPES.md section 6): NVFP4 weights with max calibration are dynamic blocks, with the
 * recipe's mse / local_hessian static ones; FP8 weights follow the method (mse searches them
 * unless the FP8 scale sweep is on).  A choice those rules cannot express (an FP8 weight with
 * max under a plain mse recipe, NVFP4 max under local_hessian with ...) is refused: the call
 * returns NULL and names the module in `why`. */
#ifndef LWQ_LAYOUT_RECIPE_YAML_OUT_H
#define LWQ_LAYOUT_RECIPE_YAML_OUT_H

#include <stddef.h>

#include "layout/recipe/recipe.h"

typedef struct lwq_yaml_module {
    const char *glob;          /* module name or glob, e.g. "model.layers.3.mlp.experts.*" */
    lwq_quant_choice c;        /* format NONE: the module stays disabled (nothing is written) */
} lwq_yaml_module;

/* The YAML text (malloc'd), or NULL with `why` filled (a choice not expressible, or out of
 * memory).  method / sweep: the recipe's algorithm; kv: its KV cache; description: one line. */
char *lwq_recipe_yaml_render(const char *description, lwq_calib_algo method, int sweep, lwq_kv_mode kv,
                             const lwq_yaml_module *m, int n, char *why, size_t why_cap);
/* The same with the recipe's mse multipliers (mse_range LWQ_MSE_RANGE_*, mult its start, stop, step),
 * written as the algorithm's start_multiplier / stop_multiplier / step_size under method mse; every module
 * whose weights take the multiplier search must have them.  A Four-over-Six module (static NVFP4 weights,
 * `four_over_six: true`) needs method mse without the FP8 scale sweep. */
char *lwq_recipe_yaml_render_range(const char *description, lwq_calib_algo method, int sweep, int mse_range,
                                   const double *mult, lwq_kv_mode kv, const lwq_yaml_module *m, int n, char *why,
                                   size_t why_cap);

#endif
