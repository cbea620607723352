/* Model Optimizer recipe YAML -> lwq recipe: quant_cfg entries, their refusals' exact messages, and the lm_head and embedding rules. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/helpers/craft.h"
#include "tests/helpers/check/recipe_refused.h"
#include "tests/helpers/check/recipe_yaml_body.h"
#include "layout/format/quant_formats.h"
#include "layout/recipe/recipe.h"
#include "layout/recipe/recipe_yaml.h"

TestSuite(recipe_yaml_cfg, .init = lwqt_yaml_units, .fini = lwqt_teardown);

/* ---- refusals: quant_cfg entries (the first user entry is on line 7) ---------------------------- */

#define W(cfg) "    - {quantizer_name: '*weight_quantizer', cfg: " cfg "}\n"

Test(recipe_yaml_cfg, refuses_a_first_entry_other_than_deny_all)
{
    lwqt_recipe_refused("metadata: {recipe_type: ptq}\nquantize:\n  quant_cfg:\n"
                 "    - {quantizer_name: '*weight_quantizer', enable: false}\n",
                 "r.yaml:4: quant_cfg must start with {quantizer_name: '*', enable: false} "
                 "(configs/ptq/units/base_disable_all): quantizers no entry names keep Model Optimizer's default "
                 "attributes (8-bit integer), which lwq does not write");
}

Test(recipe_yaml_cfg, refuses_enable_without_cfg)
{
    lwqt_yaml_refused(NULL, "    - {quantizer_name: '*mlp*', enable: true}\n",
            "r.yaml:7: quant_cfg entry '*mlp*': enable: true without cfg turns a quantizer back on with whatever "
            "attributes it had; lwq needs the cfg in the same entry");
}

Test(recipe_yaml_cfg, refuses_parent_class_selection)
{
    lwqt_yaml_refused(NULL, "    - {quantizer_name: '*', parent_class: nn.Linear, enable: false}\n",
            "r.yaml:7: quant_cfg entry '*': parent_class nn.Linear is not supported (lwq selects quantizers by name; "
            "only entries that disable a class lwq never quantizes, such as nn.BatchNorm2d or nn.Embedding, are "
            "accepted)");
}

Test(recipe_yaml_cfg, refuses_int8)
{
    lwqt_yaml_refused(NULL, W("{num_bits: 8, axis: 0}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.axis 0 is not supported (per-channel scales; lwq "
            "writes per-tensor FP8 and 16-element NVFP4 blocks)");
    lwqt_yaml_refused(NULL, W("{num_bits: 8}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.num_bits 8 is not supported (lwq writes e2m1 NVFP4 "
            "and e4m3 FP8; integers are INT formats)");
}

Test(recipe_yaml_cfg, refuses_int4_blocks)
{
    lwqt_yaml_refused(NULL, W("{num_bits: 4, block_sizes: {-1: 128}}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.num_bits 4 is not supported (lwq writes e2m1 NVFP4 "
            "and e4m3 FP8; integers are INT formats)");
}

Test(recipe_yaml_cfg, refuses_e5m2)
{
    lwqt_yaml_refused(NULL, W("{num_bits: [5, 2]}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.num_bits [5, 2] is not supported (lwq writes e2m1 "
            "NVFP4 and e4m3 FP8)");
}

Test(recipe_yaml_cfg, refuses_another_block_size)
{
    lwqt_yaml_refused(NULL, W("{num_bits: e2m1, block_sizes: {-1: 32, type: dynamic, scale_bits: e4m3}}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.block_sizes {-1: 32} is not supported (NVFP4 blocks "
            "are 16 along the last axis)");
}

Test(recipe_yaml_cfg, refuses_mx_block_scales)
{
    lwqt_yaml_refused(NULL, W("{num_bits: e2m1, block_sizes: {-1: 16, type: dynamic, scale_bits: e8m0}}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.block_sizes.scale_bits e8m0 is not supported "
            "(NVFP4 block scales are e4m3)");
}

Test(recipe_yaml_cfg, refuses_fp4_without_blocks)
{
    lwqt_yaml_refused(NULL, W("{num_bits: e2m1}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.num_bits e2m1 needs block_sizes {-1: 16, type: "
            "dynamic|static, scale_bits: e4m3} (NVFP4)");
}

Test(recipe_yaml_cfg, refuses_block_fp8)
{
    lwqt_yaml_refused(NULL, W("{num_bits: e4m3, block_sizes: {-1: 128, -2: 128}}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.block_sizes with num_bits e4m3 (block-scaled FP8) "
            "is not supported; lwq writes per-tensor FP8");
}

Test(recipe_yaml_cfg, refuses_sequential_quantizers)
{
    lwqt_yaml_refused(NULL, W("[{num_bits: 4}, {num_bits: e4m3}]"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg as a list (sequential quantizers, as in W4A8) is not "
            "supported");
}

Test(recipe_yaml_cfg, refuses_attributes_that_change_numbers)
{
    lwqt_yaml_refused(NULL, W("{$import: fp8, rotate: true}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.rotate true is not supported");
    lwqt_yaml_refused(NULL, W("{$import: fp8, type: dynamic}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.type dynamic is not supported (dynamic per-tensor "
            "scales are not written to a checkpoint)");
    lwqt_yaml_refused(NULL, W("{$import: fp8, bias: {enable: true}}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.bias (a mapping) is not supported");
    lwqt_yaml_refused(NULL, W("{$import: fp8, learn_rate: 1}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.learn_rate is not supported");
    lwqt_yaml_refused(NULL, W("{$import: fp8, enable: true}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.enable is not supported (give enable on the entry)");
    lwqt_yaml_refused(NULL, W("{axis: null}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg without num_bits means Model Optimizer's default "
            "8-bit integer, which lwq does not write");
}

Test(recipe_yaml_cfg, refuses_constant_amax_where_it_has_no_lwq_form)
{
    lwqt_yaml_refused(NULL, W("{$import: fp8, use_constant_amax: true}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.use_constant_amax on weight quantizers is not "
            "supported (it is for the k/v cache: FP8 cast)");
    lwqt_yaml_refused(NULL, W("{$import: fp8, constant_amax: 3.0}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.constant_amax on weight quantizers (a fixed weight "
            "amax) is not supported");
    lwqt_yaml_refused(NULL, "    - {quantizer_name: '*[kv]_bmm_quantizer', cfg: {$import: fp8, constant_amax: 3.0}}\n",
            "r.yaml:7: quant_cfg entry '*[kv]_bmm_quantizer': cfg.constant_amax on the k/v cache quantizers is not "
            "supported (use use_constant_amax: FP8 cast)");
    lwqt_yaml_refused(NULL, "    - {quantizer_name: '*input_quantizer', cfg: {$import: fp8, use_constant_amax: true}}\n",
            "r.yaml:7: quant_cfg entry '*input_quantizer': cfg.use_constant_amax on input quantizers is not "
            "supported (it is for the k/v cache: FP8 cast; constant_amax fixes an input amax)");
}

Test(recipe_yaml_cfg, refuses_static_activation_blocks)
{
    lwqt_yaml_refused("  algorithm: mse\n", "    - {quantizer_name: '*input_quantizer', cfg: {$import: nvfp4_static}}\n",
            "r.yaml:7: quant_cfg entry '*input_quantizer': cfg.block_sizes.type static on input quantizers "
            "(calibrated NVFP4 activation blocks) is not supported");
}

Test(recipe_yaml_cfg, refuses_static_weights_under_max)
{
    lwqt_yaml_refused(NULL, W("{$import: nvfp4_static}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.block_sizes.type static with algorithm method max "
            "is not supported (lwq's max path writes dynamic block scales; use method mse or local_hessian, or type "
            "dynamic)");
}

Test(recipe_yaml_cfg, refuses_a_calibrated_nvfp4_kv_cache)
{
    lwqt_yaml_refused(NULL, "    - {quantizer_name: '*[kv]_bmm_quantizer', cfg: {$import: nvfp4}}\n",
            "r.yaml:7: quant_cfg entry '*[kv]_bmm_quantizer': cfg.num_bits e2m1 on the k/v cache quantizers without "
            "use_constant_amax (a calibrated NVFP4 KV cache) is not supported; the cast mode (use_constant_amax: "
            "true) is");
}

/* Model Optimizer's kv_nvfp4_cast unit: NVFP4 numerics with use_constant_amax */
Test(recipe_yaml_cfg, an_nvfp4_kv_cache_in_cast_mode_is_nvfp4_cast)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body(NULL,
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*input_quantizer', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*[kv]_bmm_quantizer', cfg: {$import: nvfp4, use_constant_amax: true}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(r.kv, LWQ_KV_NVFP4_CAST);
    cr_assert_str_eq(lwq_kv_mode_name(r.kv), "nvfp4_cast");
    lwq_recipe_free(&r);
}

#define F46_W "    - {quantizer_name: '*weight_quantizer', cfg: {num_bits: e2m1, block_sizes: {-1: 16, type: %s, " \
              "scale_bits: e4m3, four_over_six: true}}}\n"
#define F46_HEAD "  algorithm: {method: mse, fp8_scale_sweep: false, start_multiplier: 1.0, stop_multiplier: 1.5, " \
                 "step_size: 0.5}\n"

Test(recipe_yaml_cfg, four_over_six_static_weights_under_its_mse_range)
{
    char body[512];
    snprintf(body, sizeof body, F46_W "    - {quantizer_name: '*input_quantizer', cfg: {$import: nvfp4}}\n", "static");
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body(F46_HEAD, body, &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(r.mse_range, LWQ_MSE_RANGE_OWN);
    lwq_quant_choice c = lwqt_yaml_pick(&r, "model.layers.0.mlp.up_proj");
    cr_assert(c.format == LWQ_QFMT_NVFP4 && c.four_over_six && c.algo == LWQ_ALGO_MSE && !c.weight_only);
    lwq_recipe_free(&r);
}

Test(recipe_yaml_cfg, refuses_four_over_six_on_dynamic_blocks)
{
    char body[512];
    snprintf(body, sizeof body, F46_W, "dynamic");
    lwqt_yaml_refused(F46_HEAD, body, "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.block_sizes.four_over_six is "
                            "implemented for static NVFP4 weights under algorithm method mse without fp8_scale_sweep "
                            "(Model Optimizer's nvfp4_four_over_six)");
}

Test(recipe_yaml_cfg, refuses_an_mse_range_of_too_many_candidates)
{
    lwqt_yaml_refused("  algorithm: {method: mse, step_size: 0.01}\n",
            "    - {quantizer_name: '*weight_quantizer', cfg: {$import: nvfp4_static}}\n",
            "r.yaml:4: quantize.algorithm start_multiplier 0.25, stop_multiplier 4, step_size 0.01: lwq needs 0 < "
            "start_multiplier <= stop_multiplier, step_size > 0 and at most 48 candidates (ceil((stop - start) / "
            "step) + 1)");
    lwqt_yaml_refused("  algorithm: {method: mse, start_multiplier: 2.0, stop_multiplier: 1.0}\n",
            "    - {quantizer_name: '*weight_quantizer', cfg: {$import: fp8}}\n",
            "r.yaml:4: quantize.algorithm start_multiplier 2, stop_multiplier 1, step_size 0.1: lwq needs 0 < "
            "start_multiplier <= stop_multiplier, step_size > 0 and at most 48 candidates (ceil((stop - start) / "
            "step) + 1)");
}

/* Nemotron-3 Ultra's nvfp4-4o6: the recipe's [1.0, 1.5] reaches its FP8 per-tensor weights too
 * (Model Optimizer's MseCalibrator searches every static weight quantizer over the range), and any
 * other range is the recipe's own: it reaches the choice and the printed JSON, which loads back */
Test(recipe_yaml_cfg, an_own_mse_range_reaches_fp8_and_static_nvfp4_weights)
{
    lwq_recipe r, b;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body("  algorithm: {method: mse, start_multiplier: 0.5, stop_multiplier: 2.0, step_size: 0.05}\n",
                           "    - {quantizer_name: '*mlp.up_proj*', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*mlp.down_proj*weight_quantizer', cfg: {$import: nvfp4_static}}\n"
                           "    - {quantizer_name: '*mlp.down_proj*input_quantizer', cfg: {$import: nvfp4}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(r.mse_range, LWQ_MSE_RANGE_OWN);
    lwq_quant_choice c = lwqt_yaml_pick(&r, "model.layers.0.mlp.up_proj");
    float m[LWQ_MSE_MAX_STEPS];
    cr_assert(c.format == LWQ_QFMT_FP8 && c.algo == LWQ_ALGO_MSE);
    cr_assert_eq(lwq_choice_mse_candidates(&c, m), 31);
    cr_assert(m[0] == 0.5f && m[30] == 2.0f);
    c = lwqt_yaml_pick(&r, "model.layers.0.mlp.down_proj");
    cr_assert(c.format == LWQ_QFMT_NVFP4 && !c.four_over_six);
    cr_assert_eq(lwq_choice_mse_candidates(&c, m), 31);
    char *j = lwq_recipe_to_json(&r);
    cr_assert_not_null(strstr(j, "\"mse_multipliers\""), "%s", j);
    cr_assert_eq(lwq_recipe_parse("printed", j, &b, &e), 0, "%s", e.msg);
    c = lwq_recipe_resolve(&b, "model.layers.0.mlp.up_proj");
    cr_assert(c.mse_range == LWQ_MSE_RANGE_OWN && c.mse_mult[0] == 0.5 && c.mse_mult[1] == 2.0 && c.mse_mult[2] == 0.05);
    free(j);
    lwq_recipe_free(&b);
    lwq_recipe_free(&r);
}

Test(recipe_yaml_cfg, refuses_k_and_v_apart)
{
    lwqt_yaml_refused(NULL, "    - {quantizer_name: '*k_bmm_quantizer', cfg: {$import: fp8}}\n",
            "r.yaml:7: quant_cfg entry '*k_bmm_quantizer' treats the k and v cache quantizers differently; lwq "
            "writes one mode for both");
}

/* Model Optimizer matches a quantizer_name against the quantizer's full name (conversion.py,
 * _match_quantizer), so an entry enabling every quantizer enables the output and attention ones,
 * which lwq does not write: the module is refused, naming it and the rule */
Test(recipe_yaml_cfg, an_enabled_output_or_softmax_quantizer_refuses_its_module)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body(NULL, "    - {quantizer_name: '*', cfg: {$import: fp8}}\n", &r, &run, &e), 0, "%s", e.msg);
    cr_assert_neq(lwq_recipe_check_unwritten(&r, "model.layers.0.mlp.up_proj", 0, LWQ_QSEL_OUTPUT, &e), 0);
    cr_assert_str_eq(e.msg, "model.layers.0.mlp.up_proj: recipe \"r\" rule 7 ('*') leaves its output quantizer "
                            "enabled, which lwq does not write");
    lwq_error e2 = {0};
    cr_assert_neq(lwq_recipe_check_unwritten(&r, "model.layers.0.self_attn", 0, LWQ_QSEL_SOFTMAX, &e2), 0);
    cr_assert(strstr(e2.msg, "leaves its softmax quantizer enabled"), "%s", e2.msg);
    cr_assert_eq(lwq_recipe_check_unwritten(&r, "lm_head", 0, LWQ_QSEL_OUTPUT, &e), 0,
                 "the deny-all rule on '*lm_head*' comes last");
    lwq_recipe_free(&r);
}

/* the order counts, as in Model Optimizer: a later entry that disables them leaves them off */
Test(recipe_yaml_cfg, output_quantizers_disabled_later_are_off)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body(NULL,
                           "    - {quantizer_name: '*', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*output_quantizer', enable: false}\n"
                           "    - {quantizer_name: '*[qs][_o]*_quantizer', enable: false}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_check_unwritten(&r, "model.layers.0.mlp.up_proj", 0, LWQ_QSEL_OUTPUT, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_check_unwritten(&r, "model.layers.0.self_attn", 0, LWQ_QSEL_QBMM, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_check_unwritten(&r, "model.layers.0.self_attn", 0, LWQ_QSEL_SOFTMAX, &e), 0, "%s", e.msg);
    cr_assert_eq(lwqt_yaml_pick(&r, "model.layers.0.mlp.up_proj").format, LWQ_QFMT_FP8);
    lwq_recipe_free(&r);
}

/* the huggingface/qwen3_5*\/ptq/w4a16_* recipes' '*mlp*gate_proj*weight_quantizer*': Model Optimizer
 * matches it against "...mlp.gate_proj.weight_quantizer" only (no module is named
 * "...weight_quantizer"), so it reaches no output, input or k/v quantizer; lwq refused it as
 * enabling output quantizers */
Test(recipe_yaml_cfg, a_pattern_ending_in_weight_quantizer_star_reaches_only_weights)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body("  algorithm: {method: mse, fp8_scale_sweep: true}\n",
                           "    - {quantizer_name: '*mlp*gate_proj*weight_quantizer*', cfg: {$import: nvfp4_static}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    lwq_quant_choice c = lwqt_yaml_pick(&r, "model.layers.0.mlp.gate_proj");
    cr_assert(c.format == LWQ_QFMT_NVFP4 && c.weight_only && c.algo == LWQ_ALGO_MSE && c.fp8_scale_sweep);
    cr_assert_eq(lwq_recipe_check_unwritten(&r, "model.layers.0.mlp.gate_proj", 0, LWQ_QSEL_OUTPUT, &e), 0, "%s", e.msg);
    cr_assert_eq(lwqt_yaml_pick(&r, "model.layers.0.mlp.up_proj").format, LWQ_QFMT_NONE);
    char *j = lwq_recipe_to_json(&r);
    /* one rule, on weight quantizers only, by the entry's own quantizer_name; none on outputs */
    cr_assert(strstr(j, "\"quantizer_name\":\t\"*mlp*gate_proj*weight_quantizer*\",\n\t\t\t\"quantizer\":\t\"weight\""), "%s", j);
    cr_assert(!strstr(j, "\"output\""), "no output quantizer rule: %s", j);
    free(j);
    lwq_recipe_free(&r);
}

/* FP8 on every weight and input quantizer reaches lm_head too (as in Model Optimizer): W8A8 FP8 lm_head */
Test(recipe_yaml_cfg, fp8_on_every_quantizer_quantizes_lm_head_w8a8)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    lwqt_write_str("r.yaml", "imports: {fp8: n/fp8, off: u/off}\nmetadata: {recipe_type: ptq}\nquantize:\n  quant_cfg:\n"
                             "    - $import: off\n"
                             "    - {quantizer_name: '*weight_quantizer', cfg: {$import: fp8}}\n"
                             "    - {quantizer_name: '*input_quantizer', cfg: {$import: fp8}}\n");
    cr_assert_eq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(r.lm_head, LWQ_LMHEAD_W8A8);
    char *j = lwq_recipe_to_json(&r);
    cr_assert(strstr(j, "\"lm_head\":\t\"fp8\""), "%s", j);
    free(j);
    lwq_recipe_free(&r);
}

/* an NVFP4 input quantizer on lm_head (W4A4) is no lm_head lwq writes */
Test(recipe_yaml_cfg, refuses_quantizing_lm_head)
{
    lwqt_recipe_refused("imports: {nvfp4: n/nvfp4, off: u/off}\nmetadata: {recipe_type: ptq}\nquantize:\n  quant_cfg:\n"
                 "    - $import: off\n"
                 "    - {quantizer_name: '*weight_quantizer', cfg: {$import: nvfp4}}\n"
                 "    - {quantizer_name: '*input_quantizer', cfg: {$import: nvfp4}}\n",
                 "r.yaml: the recipe quantizes lm_head (nvfp4), which lwq keeps in the source dtype unless it is "
                 "weight-only NVFP4 (dynamic blocks, or static ones under mse, Four-over-Six too), weight-only FP8 or "
                 "W8A8 FP8 under max; add {quantizer_name: '*lm_head*', enable: false}");
}

/* the huggingface/qwen3_5*\/ptq/w4a16_* recipes: '*lm_head*weight_quantizer' with nvfp4, last */
Test(recipe_yaml_cfg, a_weight_only_nvfp4_lm_head_is_quantized)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    lwqt_write_str("r.yaml", "imports: {nvfp4: n/nvfp4, off: u/off}\nmetadata: {recipe_type: ptq}\nquantize:\n"
                             "  quant_cfg:\n    - $import: off\n"
                             "    - {quantizer_name: '*mlp*weight_quantizer', cfg: {$import: nvfp4}}\n"
                             "    - {quantizer_name: '*lm_head*weight_quantizer', cfg: {$import: nvfp4}}\n");
    cr_assert_eq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(r.lm_head, 1);
    char *j = lwq_recipe_to_json(&r);
    cr_assert(strstr(j, "\"lm_head\":\t\"w4a16_nvfp4\""), "%s", j);
    free(j);
    lwq_recipe_free(&r);
    lwqt_recipe_refused("imports: {nvfp4: n/nvfp4, off: u/off}\nmetadata: {recipe_type: ptq}\nquantize:\n  quant_cfg:\n"
                 "    - $import: off\n"
                 "    - {quantizer_name: '*lm_head*weight_quantizer', cfg: {$import: nvfp4}}\n"
                 "    - {quantizer_name: '*lm_head*input_quantizer', cfg: {$import: nvfp4}}\n",
                 "r.yaml: the recipe quantizes lm_head (nvfp4), which lwq keeps in the source dtype unless it is "
                 "weight-only NVFP4 (dynamic blocks, or static ones under mse, Four-over-Six too), weight-only FP8 or "
                 "W8A8 FP8 under max; add {quantizer_name: '*lm_head*', enable: false}");
}

/* the huggingface/qwen3_5*\/ptq/w4a16_nvfp4_mse-* recipes: '*lm_head*weight_quantizer' with
 * nvfp4_static under method mse + fp8_scale_sweep (lwq refused it: only dynamic blocks were
 * written) */
Test(recipe_yaml_cfg, a_static_nvfp4_lm_head_under_mse_takes_the_sweep)
{
    lwq_recipe r, back;
    lwq_recipe_run run;
    lwq_error e = {0};
    lwqt_write_str("r.yaml", "imports: {nvfp4_static: n/nvfp4_static, off: u/off}\nmetadata: {recipe_type: ptq}\n"
                             "quantize:\n  algorithm: {method: mse, fp8_scale_sweep: true}\n"
                             "  quant_cfg:\n    - $import: off\n"
                             "    - {quantizer_name: '*mlp*weight_quantizer', cfg: {$import: nvfp4_static}}\n"
                             "    - {quantizer_name: '*lm_head*weight_quantizer', cfg: {$import: nvfp4_static}}\n");
    cr_assert_eq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(r.lm_head, LWQ_LMHEAD_SWEEP);
    char *j = lwq_recipe_to_json(&r);
    cr_assert(strstr(j, "\"lm_head\":\t\"w4a16_nvfp4-fp8_scale_sweep\""), "%s", j);
    cr_assert_eq(lwq_recipe_parse("j", j, &back, &e), 0, "%s", e.msg);
    cr_assert_eq(back.lm_head, LWQ_LMHEAD_SWEEP, "the canonical JSON gives the same lm_head");
    free(j);
    lwq_recipe_free(&back);
    lwq_recipe_free(&r);
}

/* the NVIDIA-Nemotron-3-Nano-4B nvfp4_w4a16 recipe's '*embeddings*weight_quantizer' with nvfp4: Model
 * Optimizer 0.47 wraps nn.Embedding (QuantEmbedding) and exports its table weight-only NVFP4, and so
 * does lwq (lwq refused the rule) */
Test(recipe_yaml_cfg, a_rule_quantizing_an_embedding_makes_it_weight_only_nvfp4)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body(NULL,
                           "    - {quantizer_name: '*mlp*weight_quantizer', cfg: {$import: nvfp4}}\n"
                           "    - {quantizer_name: '*embeddings*weight_quantizer', enable: true, cfg: {$import: nvfp4}}\n",
                           &r, &run, &e),
                 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_embedding(&r, "backbone.embeddings", &e), LWQ_LMHEAD_MAX, "%s", e.msg);
    cr_assert_eq(lwq_recipe_embedding(&r, "model.embed_tokens", &e), LWQ_LMHEAD_NONE, "'*embeddings*' only");
    cr_assert_eq(lwqt_yaml_pick(&r, "model.layers.0.mlp.up_proj").weight_only, 1);
    lwq_recipe_free(&r);
}

/* default_disabled_quantizers' {parent_class: nn.Embedding, quantizer_name: '*', enable: false}
 * switches the embedding off after '*weight_quantizer' (and nothing else) */
Test(recipe_yaml_cfg, the_embedding_class_entry_disables_only_the_embedding)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    lwqt_write_str("r.yaml", "imports: {nvfp4: n/nvfp4, off: u/off}\nmetadata: {recipe_type: ptq}\nquantize:\n"
                             "  quant_cfg:\n    - $import: off\n"
                             "    - {quantizer_name: '*weight_quantizer', cfg: {$import: nvfp4}}\n"
                             "    - {quantizer_name: '*lm_head*', enable: false}\n"
                             "    - {parent_class: 'nn.Embedding', quantizer_name: '*', enable: false}\n");
    cr_assert_eq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_embedding(&r, "model.embed_tokens", &e), LWQ_LMHEAD_NONE, "%s", e.msg);
    cr_assert_eq(lwqt_yaml_pick(&r, "model.layers.0.mlp.up_proj").format, LWQ_QFMT_NVFP4);
    lwq_recipe r2;
    char *j = lwq_recipe_to_json(&r);
    cr_assert_eq(lwq_recipe_parse("j", j, &r2, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_embedding(&r2, "model.embed_tokens", &e), LWQ_LMHEAD_NONE, "the JSON keeps the class rule");
    free(j);
    lwq_recipe_free(&r2);
    lwq_recipe_free(&r);
    /* without it, Model Optimizer quantizes the table too */
    lwqt_write_str("r.yaml", "imports: {nvfp4: n/nvfp4, off: u/off}\nmetadata: {recipe_type: ptq}\nquantize:\n"
                             "  quant_cfg:\n    - $import: off\n"
                             "    - {quantizer_name: '*weight_quantizer', cfg: {$import: nvfp4}}\n"
                             "    - {quantizer_name: '*lm_head*', enable: false}\n");
    cr_assert_eq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_embedding(&r, "model.embed_tokens", &e), LWQ_LMHEAD_MAX, "%s", e.msg);
    lwq_recipe_free(&r);
}

/* a format lwq does not write on an embedding (FP8) is refused naming the module */
Test(recipe_yaml_cfg, an_fp8_embedding_is_refused_by_name)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body(NULL, "    - {quantizer_name: '*embed_tokens*weight_quantizer', cfg: {$import: fp8}}\n", &r,
                           &run, &e), 0, "%s", e.msg);
    cr_assert_lt(lwq_recipe_embedding(&r, "model.embed_tokens", &e), 0);
    cr_assert_str_eq(e.msg, "model.embed_tokens: recipe \"r\" quantizes the token embedding's weight as fp8 (max); lwq "
                            "writes an embedding as weight-only NVFP4 only (dynamic blocks, or static ones under mse)");
    lwq_recipe_free(&r);
}

/* a rule that switches an embedding's quantizer off is what lwq does anyway: accepted */
Test(recipe_yaml_cfg, a_rule_disabling_an_embedding_is_accepted)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body(NULL,
                           "    - {quantizer_name: '*mlp*weight_quantizer', cfg: {$import: nvfp4}}\n"
                           "    - {quantizer_name: '*embed_tokens*', enable: false}\n",
                           &r, &run, &e),
                 0, "%s", e.msg);
    lwq_recipe_free(&r);
}

Test(recipe_yaml_cfg, refuses_entries_that_do_nothing_or_are_malformed)
{
    lwqt_yaml_refused(NULL, "    - {quantizer_name: '*mlp*'}\n",
            "r.yaml:7: quant_cfg entry '*mlp*' has neither cfg nor enable, so it does nothing");
    lwqt_yaml_refused(NULL, "    - {quantizer_name: '*mlp*', cfg: {}}\n",
            "r.yaml:7: quant_cfg entry '*mlp*': cfg is empty (drop it, or give enable: false)");
    lwqt_yaml_refused(NULL, "    - {quantizer_name: '*mlp*', enable: false, scope: all}\n",
            "r.yaml:7: quant_cfg entry '*mlp*': unknown key \"scope\" (quantizer_name, parent_class, cfg, enable)");
    lwqt_yaml_refused(NULL, "    - {enable: false}\n", "r.yaml:7: a quant_cfg entry needs quantizer_name");
}

