/* Model Optimizer auto_quantize recipe YAML -> the search's options and spaces, and every refusal's exact message. */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/helpers/craft.h"
#include "tests/helpers/check/recipe_refused.h"
#include "layout/recipe/recipe.h"
#include "layout/recipe/recipe_yaml.h"

static void setup(void)
{
    lwqt_setup();
    cr_assert_eq(chdir(lwqt_dir), 0);
}

TestSuite(recipe_autoq, .init = setup, .fini = lwqt_teardown);

static lwq_quant_choice pick(const lwq_recipe *r, const char *m) { return lwq_recipe_resolve(r, m); }

Test(recipe_autoq, refuses_auto_quantize)
{
    lwqt_recipe_refused("metadata: {recipe_type: ptq}\nauto_quantize: {}\n",
                 "r.yaml:2: auto_quantize (AutoQuantize searches per-layer formats over the whole model) is not read "
                 "as a recipe: lwq's search takes it as options: --qformat nvfp4 --auto-quantize-bits B "
                 "--auto-quantize-formats F,... (lm_head and routers are not searched); candidate_formats is empty");
}

/* Model Optimizer's qwen3_6_moe auto_quantize recipe (its shape: presets imported as candidates,
 * the shared LayerPatternList units, the active_moe cost model) */
#define QWEN36_AQ \
    "imports:\n  base_disabled_layers: configs/auto_quantize/units/base_disabled_layers\n" \
    "  fp8: configs/ptq/presets/model/fp8\n  w4a16_nvfp4: configs/ptq/presets/model/w4a16_nvfp4\n" \
    "metadata:\n  recipe_type: auto_quantize\n" \
    "auto_quantize:\n  constraints:\n    effective_bits: 6.0\n    cost_model: active_moe\n" \
    "    cost:\n      active_moe_expert_ratio: 0.03125\n  candidate_formats:\n    - $import: fp8\n    - $import: w4a16_nvfp4\n" \
    "  auto_quantize_method: gradient\n  score_size: 128\n" \
    "  disabled_layers:\n    - $import: base_disabled_layers\n    - \"*shared_expert_gate*\"\n"

/* it is read as the search's options (its imports, schemas lwq does not read, are not loaded), and
 * its base recipe is the fp8 preset */
Test(recipe_autoq, an_auto_quantize_recipe_gives_the_search_options)
{
    lwq_recipe r, b;
    lwq_recipe_run run;
    lwq_error e = {0};
    lwqt_write_str("r.yaml", QWEN36_AQ);
    cr_assert_eq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0, "%s", e.msg);
    cr_assert(run.is_aq);
    cr_assert_str_eq(run.aq_qformat, "fp8");
    cr_assert_float_eq(run.aq_bits, 6.0, 1e-12);
    cr_assert(!run.aq_nvfp4 && run.aq_fp8 && run.aq_w4a16);
    cr_assert(run.aq_active_moe);
    cr_assert_float_eq(run.aq_moe_ratio, 0.03125, 1e-12);
    cr_assert(!run.aq_kl);
    cr_assert_eq(run.aq_score_size, 128);
    cr_assert_eq(lwq_recipe_preset("fp8", &b, &e), 0, "%s", e.msg);
    cr_assert_eq(pick(&r, "model.layers.0.mlp.down_proj").format, pick(&b, "model.layers.0.mlp.down_proj").format);
    lwq_recipe_free(&r);
    lwq_recipe_free(&b);
}

/* the qwen3_6_moe module-spaces recipe's shape without top-level candidates: one space over attention, a
 * fixed baseline `quantize` (its quant_cfg: `baseline`) */
#define BASELINE_AQ(baseline) \
    "imports:\n  base_disabled_layers: configs/auto_quantize/units/base_disabled_layers\n" \
    "  fp8: configs/ptq/presets/model/fp8\n  w4a16_nvfp4: configs/ptq/presets/model/w4a16_nvfp4\n" \
    "  nv: u/nvfp4\n" \
    "metadata:\n  recipe_type: auto_quantize\n" \
    "quantize:\n  algorithm: {method: max, layerwise: {enable: false}}\n  quant_cfg:\n" baseline \
    "auto_quantize:\n  constraints:\n    effective_bits: 6.0\n    cost_model: active_moe\n" \
    "  module_search_spaces:\n    - module_name_patterns: ['*self_attn*']\n" \
    "      candidate_formats: [{$import: w4a16_nvfp4}, {$import: fp8}]\n      allow_no_quant: false\n" \
    "  disabled_layers:\n    - $import: base_disabled_layers\n"

#define BASELINE_CFG \
    "    - {quantizer_name: '*', enable: false}\n" \
    "    - {quantizer_name: '*mlp.experts*weight_quantizer*', cfg: {$import: nv}}\n" \
    "    - {quantizer_name: '*lm_head*weight_quantizer', cfg: {$import: nv}}\n" \
    "    - {quantizer_name: '*[kv]_bmm_quantizer', cfg: {num_bits: e4m3, use_constant_amax: true}}\n"

/* the fixed baseline is the base recipe: compiled as a ptq recipe's quantize block is, with only the imports
 * it names loaded (the candidate presets and layer units, which are not here, are not read) */
Test(recipe_autoq, an_auto_quantize_baseline_is_the_base_recipe)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(mkdir("u", 0755), 0);
    lwqt_write_str("u/nvfp4.yaml", "# modelopt-schema: modelopt.torch.quantization.config.QuantizerAttributeConfig\n"
                   "num_bits: e2m1\nblock_sizes: {-1: 16, type: dynamic, scale_bits: e4m3}\n");
    lwqt_write_str("r.yaml", BASELINE_AQ(BASELINE_CFG));
    cr_assert_eq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0, "%s", e.msg);
    cr_assert(run.is_aq && run.aq_baseline);
    cr_assert_eq(run.aq_nspaces, 1);
    cr_assert(!run.aq_nvfp4 && !run.aq_fp8 && !run.aq_w4a16, "no top-level candidates");
    lwq_quant_choice x = pick(&r, "model.layers.0.mlp.experts.3.down_proj");
    cr_assert(x.format == LWQ_QFMT_NVFP4 && x.weight_only, "the experts W4A16 (%d, %d)", x.format, x.weight_only);
    cr_assert_eq(pick(&r, "model.layers.0.self_attn.q_proj").format, LWQ_QFMT_NONE);
    cr_assert_eq(r.kv, LWQ_KV_FP8_CAST);
    cr_assert_eq(r.lm_head, LWQ_LMHEAD_MAX);
    lwq_recipe_free(&r);
}

/* Model Optimizer's schema (ModelOptAutoQuantizeRecipe): a baseline comes without top-level candidates ... */
Test(recipe_autoq, a_baseline_with_top_level_candidates_is_refused)
{
    lwqt_recipe_refused(QWEN36_AQ "  module_search_spaces:\n    - module_name_patterns: ['*self_attn*']\n"
                        "      candidate_formats: [{$import: fp8}]\nquantize:\n  quant_cfg: []\n",
                 "r.yaml:7: an auto_quantize recipe with a fixed quantize baseline must omit top-level "
                 "auto_quantize.candidate_formats and list the searched modules under module_search_spaces (Model "
                 "Optimizer's schema refuses it alike: the baseline covers the modules no search space matches)");
}

/* ... and with module_search_spaces */
Test(recipe_autoq, a_baseline_without_spaces_is_refused)
{
    lwqt_recipe_refused("metadata: {recipe_type: auto_quantize}\nquantize:\n  quant_cfg: []\n"
                        "auto_quantize:\n  constraints: {effective_bits: 6.0}\n",
                 "r.yaml:4: an auto_quantize recipe with a fixed quantize baseline must have at least one "
                 "auto_quantize.module_search_spaces entry (Model Optimizer's schema refuses it alike: the baseline "
                 "covers the modules no search space matches)");
}

/* a disabled_layers pattern beyond the base unit is named */
Test(recipe_autoq, an_auto_quantize_disabled_pattern_lwq_lacks_is_named)
{
    lwqt_recipe_refused(QWEN36_AQ "    - \"*mlp.experts.0.*\"\n",
                 "r.yaml:7: auto_quantize (AutoQuantize searches per-layer formats over the whole model) is not read "
                 "as a recipe: lwq's search takes it as options: --qformat fp8 --auto-quantize-bits 6.0 "
                 "--auto-quantize-formats fp8,w4a16_nvfp4,none --auto-quantize-cost-model active_moe "
                 "--auto-quantize-active-moe-ratio 0.03125 --auto-quantize-score-size 128 (lm_head and routers are "
                 "not searched); disabled_layers[2] (*mlp.experts.0.*) is not implemented (lwq keeps "
                 "configs/auto_quantize/units/base_disabled_layers)");
}

/* module_search_spaces are read: each entry's patterns, its candidates by preset path, allow_no_quant
 * (Model Optimizer's default true); the top-level candidates stay the unmatched groups' */
Test(recipe_autoq, an_auto_quantize_module_search_spaces_are_read)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    lwqt_write_str("r.yaml", QWEN36_AQ "  module_search_spaces:\n"
                   "    - module_name_patterns: ['*mlp.shared_expert*', '*self_attn*']\n"
                   "      candidate_formats: [{$import: w4a16_nvfp4}, {$import: fp8}]\n"
                   "      allow_no_quant: false\n"
                   "    - module_name_patterns: ['*mlp.experts*']\n"
                   "      candidate_formats: [{$import: w4a16_nvfp4}]\n");
    cr_assert_eq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0, "%s", e.msg);
    cr_assert(run.is_aq);
    cr_assert_eq(run.aq_nspaces, 2);
    cr_assert_eq(run.aq_space[0].npatterns, 2);
    cr_assert_str_eq(run.aq_space[0].pattern[1], "*self_attn*");
    cr_assert(run.aq_space[0].w4a16 && run.aq_space[0].fp8 && !run.aq_space[0].nvfp4);
    cr_assert(!run.aq_space[0].allow_no_quant);
    cr_assert(run.aq_space[1].w4a16 && !run.aq_space[1].fp8 && run.aq_space[1].allow_no_quant);
    cr_assert(!run.aq_nvfp4 && run.aq_fp8 && run.aq_w4a16, "the top-level candidates");
    lwq_recipe_free(&r);
}

/* an entry with a key Model Optimizer's schema lacks is refused naming the entry */
Test(recipe_autoq, an_auto_quantize_space_with_an_unknown_key_is_refused)
{
    lwqt_recipe_refused(QWEN36_AQ "  module_search_spaces:\n"
                 "    - module_name_patterns: ['*self_attn*']\n"
                 "      candidate_formats: [{$import: fp8}]\n"
                 "      allow_bf16: true\n",
                 "r.yaml:7: auto_quantize.module_search_spaces[0]: an entry is a mapping of module_name_patterns (1 "
                 "to 16 strings of at most 127 characters), candidate_formats (at least one) and allow_no_quant (a "
                 "boolean); at most 16 entries");
}

/* an inline candidate (a QuantizeConfig written in the entry, as Muse-Glimmer's) is named */
Test(recipe_autoq, an_auto_quantize_inline_space_candidate_is_named)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    lwqt_write_str("r.yaml", QWEN36_AQ "  module_search_spaces:\n"
                   "    - module_name_patterns: ['*self_attn*']\n"
                   "      candidate_formats:\n"
                   "        - algorithm: max\n"
                   "          quant_cfg: []\n");
    cr_assert_eq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), LWQ_EUNSUPPORTED);
    cr_assert(strstr(e.msg, "; module_search_spaces[0].candidate_formats[0] (inline, r.yaml:24) is no format lwq "
                            "searches: its quant_cfg is empty (it enables no quantizer)"), "%s", e.msg);
}

/* bad numbers are refused as Model Optimizer's schema refuses them */
Test(recipe_autoq, an_auto_quantize_bad_bits_is_refused)
{
    lwqt_recipe_refused("metadata: {recipe_type: auto_quantize}\nimports: {fp8: configs/ptq/presets/model/fp8}\n"
                 "auto_quantize: {constraints: {effective_bits: 17}, candidate_formats: [{$import: fp8}]}\n",
                 "r.yaml:3: auto_quantize: effective_bits must be in (0, 16], active_moe_expert_ratio in (0, 1], "
                 "score_size in [1, 1048576], auto_quantize_method gradient or kl_div");
}

/* a cost model lwq lacks is named */
Test(recipe_autoq, an_auto_quantize_cost_model_lwq_lacks_is_named)
{
    lwqt_recipe_refused("metadata: {recipe_type: auto_quantize}\n"
                 "auto_quantize: {constraints: {effective_bits: 6.0, cost_model: flops}}\n",
                 "r.yaml:2: auto_quantize (AutoQuantize searches per-layer formats over the whole model) is not read "
                 "as a recipe: lwq's search takes it as options: --qformat nvfp4 --auto-quantize-bits 6.0 "
                 "--auto-quantize-formats F,... (lm_head and routers are not searched); constraints.cost_model flops "
                 "is not implemented (lwq has weight and active_moe)");
}

/* a candidate lwq does not search is named (general/auto_quantize/w4a8_awq_beta_fp8_at_6p0bits) */
Test(recipe_autoq, an_auto_quantize_candidate_lwq_lacks_is_named)
{
    lwqt_recipe_refused("imports: {w4a8: configs/ptq/presets/model/w4a8_awq_beta, fp8: configs/ptq/presets/model/fp8}\n"
                 "metadata: {recipe_type: auto_quantize}\n"
                 "auto_quantize: {constraints: {effective_bits: 6.0}, candidate_formats: [{$import: w4a8}, "
                 "{$import: fp8}], auto_quantize_method: kl_div}\n",
                 "r.yaml:3: auto_quantize (AutoQuantize searches per-layer formats over the whole model) is not read "
                 "as a recipe: lwq's search takes it as options: --qformat fp8 --auto-quantize-bits 6.0 "
                 "--auto-quantize-formats fp8,none --auto-quantize-score kl (lm_head and routers are not searched); "
                 "candidate_formats[0] (configs/ptq/presets/model/w4a8_awq_beta, r.yaml:3) is no format lwq searches "
                 "(nvfp4, fp8, w4a16_nvfp4, nvfp4_w4a4_weight_mse_fp8_sweep, or an inline candidate that compiles to "
                 "one of them or to weight-only Four-over-Six NVFP4)");
}

/* general/auto_quantize/nvfp4_mse_fp8_at_6p0bits: its NVFP4 candidate with its own weight algorithm
 * (the nvfp4_w4a4_weight_mse_fp8_sweep preset) is that candidate, not plain NVFP4 */
Test(recipe_autoq, an_auto_quantize_mse_sweep_candidate_is_read)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    lwqt_write_str("r.yaml", "imports:\n  nvfp4_mse: configs/ptq/presets/model/nvfp4_w4a4_weight_mse_fp8_sweep\n"
                   "  fp8: configs/ptq/presets/model/fp8\nmetadata:\n  recipe_type: auto_quantize\n"
                   "auto_quantize:\n  constraints:\n    effective_bits: 6.0\n"
                   "  candidate_formats:\n    - $import: nvfp4_mse\n    - $import: fp8\n");
    cr_assert_eq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0, "%s", e.msg);
    cr_assert(run.is_aq && run.aq_nvfp4_mse && run.aq_fp8 && !run.aq_nvfp4 && !run.aq_w4a16);
    cr_assert_str_eq(run.aq_qformat, "fp8");
    lwq_recipe_free(&r);
}

/* An auto_quantize recipe with one module_search_spaces entry whose candidates are `cands` (inline
 * QuantizeConfigs, YAML at the entry's indentation), loaded into run */
static int load_inline(const char *cands, lwq_recipe *r, lwq_recipe_run *run, lwq_error *e)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "metadata:\n  recipe_type: auto_quantize\n"
             "auto_quantize:\n  constraints:\n    effective_bits: 6.0\n  module_search_spaces:\n"
             "    - module_name_patterns: ['*layers.*']\n      candidate_formats:\n%s", cands);
    lwqt_write_str("r.yaml", buf);
    return lwq_recipe_yaml_load("r.yaml", NULL, r, run, e);
}

#define OFF "            - {quantizer_name: '*', enable: false}\n"
#define W_F46 "            - {quantizer_name: '*weight_quantizer', cfg: {num_bits: e2m1, block_sizes: {-1: 16, type: " \
              "static, scale_bits: e4m3, four_over_six: true}}}\n"
#define MSE_46(start, stop, step) "        - algorithm: {method: mse, fp8_scale_sweep: false, start_multiplier: " \
              start ", stop_multiplier: " stop ", step_size: " step "}\n          effective_bits: 4.5\n" \
              "          quant_cfg:\n" OFF W_F46
#define FP8_MAX "        - algorithm: max\n          quant_cfg:\n" OFF \
              "            - {quantizer_name: '*weight_quantizer', cfg: {num_bits: e4m3, axis: null}}\n" \
              "            - {quantizer_name: '*input_quantizer', cfg: {num_bits: e4m3, axis: null}}\n"

/* Muse-Glimmer's inline candidates: weight-only Four-over-Six NVFP4 under mse over 1.0 and 1.5, and
 * W8A8 FP8 under max, are lwq's w4a16_nvfp4_four_over_six and fp8 */
Test(recipe_autoq, inline_candidates_are_identified)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_inline(MSE_46("1.0", "1.5", "0.5") FP8_MAX, &r, &run, &e), 0, "%s", e.msg);
    cr_assert(run.is_aq && run.aq_nspaces == 1);
    const lwq_recipe_aq_space *sp = &run.aq_space[0];
    cr_assert(sp->w4a16_f46 && sp->fp8 && !sp->nvfp4 && !sp->w4a16 && !sp->nvfp4_mse);
    cr_assert_str_eq(run.aq_qformat, "fp8");
    lwq_recipe_free(&r);
}

/* Four-over-Six with other multipliers is another format: refused naming them */
Test(recipe_autoq, inline_four_over_six_with_other_multipliers_is_refused)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_inline(MSE_46("1.0", "2.0", "0.5"), &r, &run, &e), LWQ_EUNSUPPORTED);
    cr_assert(strstr(e.msg, "module_search_spaces[0].candidate_formats[0] (inline, r.yaml:9) is no format lwq "
                            "searches: weight-only Four-over-Six NVFP4 with algorithm start_multiplier 1, "
                            "stop_multiplier 2, step_size 0.5"), "%s", e.msg);
}

/* NVFP4 W4A4 under mse without the FP8 scale sweep is no candidate: refused naming the method */
Test(recipe_autoq, inline_nvfp4_under_plain_mse_is_refused)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_inline("        - algorithm: {method: mse}\n          quant_cfg:\n" OFF
                             "            - {quantizer_name: '*weight_quantizer', cfg: {num_bits: e2m1, block_sizes: "
                             "{-1: 16, type: static, scale_bits: e4m3}}}\n"
                             "            - {quantizer_name: '*input_quantizer', cfg: {num_bits: e2m1, block_sizes: "
                             "{-1: 16, type: dynamic, scale_bits: e4m3}}}\n", &r, &run, &e), LWQ_EUNSUPPORTED);
    cr_assert(strstr(e.msg, "is no format lwq searches: NVFP4 under algorithm.method mse (lwq's NVFP4 candidates"),
              "%s", e.msg);
}

/* an inline candidate that does not compile is refused with its file and line */
Test(recipe_autoq, an_inline_candidate_that_does_not_compile_names_its_line)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_inline("        - algorithm: max\n          quant_cfg:\n"
                             "            - {quantizer_name: '*weight_quantizer', cfg: {num_bits: 7}}\n", &r, &run, &e),
                 LWQ_EUNSUPPORTED);
    cr_assert(strstr(e.msg, "r.yaml:11"), "%s", e.msg);
}

/* a fixed baseline's quantize.effective_bits (Muse-Glimmer's 4.5) is read */
Test(recipe_autoq, a_baseline_effective_bits_is_read)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    lwqt_write_str("r.yaml", "metadata:\n  recipe_type: auto_quantize\n"
                   "quantize:\n  effective_bits: 4.5\n  algorithm: max\n  quant_cfg:\n"
                   "    - {quantizer_name: '*', enable: false}\n"
                   "auto_quantize:\n  constraints:\n    effective_bits: 6.0\n  module_search_spaces:\n"
                   "    - module_name_patterns: ['*layers.*']\n      candidate_formats:\n" FP8_MAX);
    cr_assert_eq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0, "%s", e.msg);
    cr_assert(run.aq_baseline);
    cr_assert_float_eq(run.aq_baseline_bits, 4.5, 1e-12);
    lwq_recipe_free(&r);
}
