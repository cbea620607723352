/* Model Optimizer recipe YAML -> lwq recipe: the mapping per quantizer, and the refusals of the recipe's and algorithm's shape (quant_cfg entries: test_recipe_yaml_cfg.c). */
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

TestSuite(recipe_yaml, .init = lwqt_yaml_units, .fini = lwqt_teardown);

Test(recipe_yaml, weight_and_input_pairs_map_to_formats_and_algorithms)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    int rc = lwqt_yaml_load_body("  algorithm: {method: mse, fp8_scale_sweep: true}\n",
                       "    - {quantizer_name: '*.experts.*weight_quantizer', cfg: {$import: nvfp4_static}}\n"
                       "    - {quantizer_name: '*.experts.*input_quantizer', cfg: {$import: nvfp4}}\n"
                       "    - {quantizer_name: '*self_attn*weight_quantizer', cfg: {$import: fp8}}\n"
                       "    - {quantizer_name: '*self_attn*input_quantizer', cfg: {$import: fp8}}\n"
                       "    - {quantizer_name: '*shared_expert.*weight_quantizer', cfg: {$import: nvfp4}}\n"
                       "    - {quantizer_name: '*shared_expert.*input_quantizer', cfg: {$import: nvfp4}}\n"
                       "    - $import: kv_cast\n",
                       &r, &run, &e);
    cr_assert_eq(rc, 0, "%s", e.msg);
    lwq_quant_choice x = lwqt_yaml_pick(&r, "model.layers.0.mlp.experts.3.up_proj");
    cr_assert(x.format == LWQ_QFMT_NVFP4 && x.algo == LWQ_ALGO_MSE && x.fp8_scale_sweep, "static NVFP4: the sweep");
    lwq_quant_choice a = lwqt_yaml_pick(&r, "model.layers.0.self_attn.o_proj");
    cr_assert(a.format == LWQ_QFMT_FP8 && a.algo == LWQ_ALGO_MAX, "FP8 under the sweep stays max-calibrated");
    lwq_quant_choice s = lwqt_yaml_pick(&r, "model.layers.0.mlp.shared_expert.down_proj");
    cr_assert(s.format == LWQ_QFMT_NVFP4 && s.algo == LWQ_ALGO_MAX, "dynamic NVFP4 weights are not searched");
    cr_assert_eq(lwqt_yaml_pick(&r, "model.layers.0.mlp.gate").format, LWQ_QFMT_NONE);
    cr_assert_eq(r.kv, LWQ_KV_FP8_CAST);
    cr_assert_eq(lwq_recipe_resolve_kv(&r, "model.layers.0.self_attn"), LWQ_KV_FP8_CAST);
    cr_assert_str_eq(r.name, "r");
    lwq_recipe_free(&r);
}

Test(recipe_yaml, fp8_weights_take_mse_only_without_the_sweep)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body("  algorithm: {method: mse}\n",
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*input_quantizer', cfg: {$import: fp8}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    lwq_quant_choice c = lwqt_yaml_pick(&r, "model.layers.1.mlp.down_proj");
    cr_assert(c.format == LWQ_QFMT_FP8 && c.algo == LWQ_ALGO_MSE);
    cr_assert_eq(r.kv, LWQ_KV_NONE, "no [kv]_bmm entry: no KV cache quantization");
    lwq_recipe_free(&r);
}

Test(recipe_yaml, later_entries_win_and_cfg_replaces_attributes)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body("  algorithm: {method: local_hessian}\n",
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: nvfp4_static}}\n"
                           "    - {quantizer_name: '*input_quantizer', cfg: {$import: nvfp4}}\n"
                           "    - {quantizer_name: '*layers.1.*', enable: false}\n"
                           "    - {quantizer_name: '*layers.1.mlp*weight_quantizer', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*layers.1.mlp*input_quantizer', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*down_proj*', cfg: {$import: fp8}, enable: false}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    lwq_quant_choice a = lwqt_yaml_pick(&r, "model.layers.0.mlp.up_proj");
    cr_assert(a.format == LWQ_QFMT_NVFP4 && a.algo == LWQ_ALGO_LOCAL_HESSIAN);
    cr_assert_eq(lwqt_yaml_pick(&r, "model.layers.1.self_attn.q_proj").format, LWQ_QFMT_NONE);
    lwq_quant_choice b = lwqt_yaml_pick(&r, "model.layers.1.mlp.up_proj");
    cr_assert(b.format == LWQ_QFMT_FP8 && b.algo == LWQ_ALGO_MAX, "the later cfg replaced the static NVFP4");
    cr_assert_eq(lwqt_yaml_pick(&r, "model.layers.0.mlp.down_proj").format, LWQ_QFMT_NONE, "cfg + enable: false");
    lwq_recipe_free(&r);
}

Test(recipe_yaml, constant_amax_fixes_the_input_amax)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body(NULL,
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: nvfp4}}\n"
                           "    - {quantizer_name: '*input_quantizer', cfg: {$import: nvfp4, constant_amax: 2688.0}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    lwq_quant_choice c = lwqt_yaml_pick(&r, "model.layers.0.mlp.experts.0.gate_proj");
    cr_assert(c.format == LWQ_QFMT_NVFP4 && c.has_input_amax && c.input_amax == 2688.0f);
    lwq_recipe_free(&r);
}

Test(recipe_yaml, weight_and_input_in_different_formats_are_refused_by_module)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body(NULL,
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: nvfp4}}\n"
                           "    - {quantizer_name: '*mlp*input_quantizer', cfg: {$import: fp8}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    lwq_quant_choice c = lwqt_yaml_pick(&r, "model.layers.0.mlp.up_proj");
    cr_assert(c.split && c.format == LWQ_QFMT_NONE);
    lwq_recipe_split_error(&c, "model.layers.0.mlp.up_proj", &e);
    cr_assert_str_eq(e.msg, "model.layers.0.mlp.up_proj: the recipe makes its weight quantizer nvfp4 and its input "
                            "quantizer fp8; lwq writes W4A4 NVFP4, W8A8 FP8 and weight-only NVFP4 (W4A16) only "
                            "(weight and input in one format, NVFP4 weights alone, or neither quantized)");
    lwq_recipe_free(&r);
}

Test(recipe_yaml, nvfp4_weights_without_an_input_quantizer_are_weight_only_nvfp4)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body(NULL,
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: nvfp4}}\n"
                           "    - {quantizer_name: '*mlp*input_quantizer', cfg: {$import: nvfp4}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    lwq_quant_choice w = lwqt_yaml_pick(&r, "model.layers.0.self_attn.q_proj");
    cr_assert(!w.split && w.weight_only && w.format == LWQ_QFMT_NVFP4, "W4A16");
    cr_assert_str_eq(lwq_choice_format_name(&w), "w4a16_nvfp4");
    lwq_quant_choice m = lwqt_yaml_pick(&r, "model.layers.0.mlp.up_proj");
    cr_assert(!m.split && !m.weight_only && m.format == LWQ_QFMT_NVFP4, "W4A4 where the input is quantized too");
    lwq_recipe_free(&r);
}

Test(recipe_yaml, fp8_weights_without_an_input_quantizer_are_refused)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body(NULL, "    - {quantizer_name: '*weight_quantizer', cfg: {$import: fp8}}\n", &r, &run, &e), 0,
                 "%s", e.msg);
    lwq_quant_choice w = lwqt_yaml_pick(&r, "model.layers.0.self_attn.q_proj");
    cr_assert(w.split && !w.weight_only && w.weight_format == LWQ_QFMT_FP8 && w.input_format == LWQ_QFMT_NONE);
    lwq_recipe_free(&r);
}

Test(recipe_yaml, kv_cache_for_some_layers_only_is_refused_per_module)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body(NULL,
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*input_quantizer', cfg: {$import: fp8}}\n"
                           "    - $import: kv_cast\n"
                           "    - {quantizer_name: '*layers.0.*', enable: false}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_check_kv(&r, "model.layers.1.self_attn", &e), 0);
    cr_assert_neq(lwq_recipe_check_kv(&r, "model.layers.0.self_attn", &e), 0);
    cr_assert_str_eq(e.msg, "model.layers.0.self_attn: recipe \"r\" gives this attention module KV cache none but the "
                            "model fp8_cast; lwq writes one KV cache mode for every layer");
    lwq_recipe_free(&r);
}

Test(recipe_yaml, layerwise_block_sets_resume_dir_and_qdq_next)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body("  algorithm:\n    method: max\n    layerwise:\n      enable: true\n"
                           "      export_dir: /tmp/placeholder\n      checkpoint_dir: /data/ck\n"
                           "      calib_mutates_weights: false\n      get_qdq_activations_from_prev_layer: true\n",
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*input_quantizer', cfg: {$import: fp8}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    cr_assert(run.has_checkpoint_dir && !strcmp(run.checkpoint_dir, "/data/ck"));
    cr_assert(run.has_qdq_next && run.qdq_next);
    lwq_recipe_free(&r);
}

Test(recipe_yaml, printed_recipe_parses_back_to_the_same)
{
    lwq_recipe r, b;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body(NULL,
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: nvfp4}}\n"
                           "    - {quantizer_name: '*input_quantizer', cfg: {$import: nvfp4, constant_amax: 100.5}}\n"
                           "    - $import: kv_cast\n",
                           &r, &run, &e), 0, "%s", e.msg);
    char *j = lwq_recipe_to_json(&r);
    cr_assert_eq(lwq_recipe_parse("printed", j, &b, &e), 0, "%s", e.msg);
    char *j2 = lwq_recipe_to_json(&b);
    cr_assert_str_eq(j, j2);
    free(j);
    free(j2);
    lwq_recipe_free(&r);
    lwq_recipe_free(&b);
}

/* ---- refusals: recipe and algorithm ---------------------------------------------------------- */

Test(recipe_yaml, refuses_recipe_type_other_than_ptq)
{
    lwqt_recipe_refused("metadata: {recipe_type: auto_quantize}\nquantize: {quant_cfg: []}\n",
                 "r.yaml:1: metadata.recipe_type auto_quantize is not supported (lwq runs ptq recipes)");
}

Test(recipe_yaml, refuses_missing_recipe_type)
{
    lwqt_recipe_refused("quantize: {quant_cfg: []}\n", "r.yaml: a recipe needs metadata.recipe_type (ptq)");
}

Test(recipe_yaml, refuses_sparsity)
{
    lwqt_recipe_refused("metadata: {recipe_type: ptq}\nsparsity: {}\n",
                 "r.yaml:2: sparsity is not supported (lwq writes dense checkpoints)");
}

Test(recipe_yaml, refuses_awq)
{
    lwqt_yaml_refused("  algorithm: awq_lite\n", "",
            "r.yaml:4: quantize.algorithm method awq_lite is not supported: AWQ searches pre-quantization scales over "
            "the whole model, which lwq does not write per layer");
}

Test(recipe_yaml, refuses_smoothquant)
{
    lwqt_yaml_refused("  algorithm: {method: smoothquant}\n", "",
            "r.yaml:4: quantize.algorithm method smoothquant is not supported: SmoothQuant folds per-channel scales "
            "into the previous layer (INT8), which lwq does not write");
}

Test(recipe_yaml, refuses_svdquant)
{
    lwqt_yaml_refused("  algorithm: svdquant\n", "",
            "r.yaml:4: quantize.algorithm method svdquant is not supported: SVDQuant adds low-rank branches, which "
            "lwq does not write");
}

Test(recipe_yaml, refuses_no_calibration)
{
    lwqt_yaml_refused("  algorithm: null\n", "",
            "r.yaml:4: quantize.algorithm null (no calibration) is not supported; lwq calibrates (use max)");
}

Test(recipe_yaml, refuses_sweep_with_max)
{
    lwqt_yaml_refused("  algorithm: {method: max, fp8_scale_sweep: true}\n", "",
            "r.yaml:4: quantize.algorithm.fp8_scale_sweep needs method mse or local_hessian");
}

Test(recipe_yaml, refuses_local_hessian_without_the_sweep)
{
    lwqt_yaml_refused("  algorithm: {method: local_hessian, fp8_scale_sweep: false}\n", "",
            "r.yaml:4: method local_hessian with fp8_scale_sweep false (a Hessian-weighted multiplier search) is not "
            "supported; lwq's local_hessian sweeps the FP8 scale values");
}

/* Model Optimizer's published nvfp4_experts_only_input_scale1-kv_fp8_cast sets MaxCalibConfig's
 * skip_forward_without_activation_calib: it changes no output byte, so lwq reads it (it refused
 * the recipe before issue 23); with another method it is refused, as Model Optimizer has it only
 * on max. */
Test(recipe_yaml, accepts_skip_forward_without_activation_calib_on_max)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwqt_yaml_load_body("  algorithm: {method: max, skip_forward_without_activation_calib: true}\n",
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*input_quantizer', cfg: {$import: fp8}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(r.algo, LWQ_ALGO_MAX);
    cr_assert_eq(lwqt_yaml_pick(&r, "model.layers.0.self_attn.q_proj").format, LWQ_QFMT_FP8);
    lwq_recipe_free(&r);
    lwqt_yaml_refused("  algorithm: {method: mse, skip_forward_without_activation_calib: true}\n", "",
            "r.yaml:4: quantize.algorithm.skip_forward_without_activation_calib is not supported");
}

Test(recipe_yaml, refuses_other_algorithm_settings)
{
    lwqt_yaml_refused("  algorithm: {method: mse, num_bins: 4}\n", "", "r.yaml:4: quantize.algorithm.num_bins is not supported");
}

Test(recipe_yaml, refuses_unknown_layerwise_settings)
{
    lwqt_yaml_refused("  algorithm: {method: max, layerwise: {enable: true, save_every: 4}}\n", "",
            "r.yaml:4: quantize.algorithm.layerwise.save_every is not supported");
}

/* ---- refusals: the rest of the recipe's shape ------------------------------------------------ */

Test(recipe_yaml, refuses_gptq_and_unknown_methods)
{
    lwqt_yaml_refused("  algorithm: gptq\n", "",
            "r.yaml:4: quantize.algorithm method gptq is not supported: lwq's GPTQ (--algo gptq) takes each NVFP4 "
            "block scale from the weights as GPTQ has updated them, Model Optimizer's from the max-calibrated "
            "original weights, so the codes would differ");
    lwqt_yaml_refused("  algorithm: {method: lsq}\n", "",
            "r.yaml:4: quantize.algorithm method lsq is not supported (max, mse, local_hessian)");
}

Test(recipe_yaml, refuses_unknown_top_level_and_quantize_keys)
{
    lwqt_recipe_refused("metadata: {recipe_type: ptq}\nexport: {}\n",
                 "r.yaml:2: unknown top-level key \"export\" (a ptq recipe has imports, metadata and quantize)");
    lwqt_recipe_refused("metadata: {recipe_type: ptq}\nquantize: {quant_cfg: [], kv_cache: fp8}\n",
                 "r.yaml:2: quantize.kv_cache is not supported (algorithm, quant_cfg)");
}

Test(recipe_yaml, refuses_a_bad_constant_amax)
{
    lwqt_yaml_refused(NULL, "    - {quantizer_name: '*input_quantizer', cfg: {$import: fp8, constant_amax: -1}}\n",
            "r.yaml:7: quant_cfg entry '*input_quantizer': cfg.constant_amax -1: expected a number in [3.16e-35, "
            "3e+38] (the input scale it gives, amax / 2688, must be a normal float)");
}

Test(recipe_yaml, refuses_a_header_document_with_more_than_imports)
{
    lwqt_recipe_refused("metadata: {recipe_type: ptq}\n---\nquantize: {quant_cfg: []}\n",
                 "r.yaml:1: the first of two YAML documents may hold only imports");
}

Test(recipe_yaml, json_rules_check_the_per_quantizer_keys)
{
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_neq(lwq_recipe_parse("t.json", "{\"rules\":[{\"match\":\"*\",\"quantizer\":\"bias\"}]}", &r, &e), 0);
    cr_assert_str_eq(e.msg, "t.json: rules[0].quantizer must be \"weight\", \"input\", \"kv\", \"output\", "
                            "\"q_bmm\" or \"softmax\"");
    memset(&e, 0, sizeof e);
    cr_assert_neq(lwq_recipe_parse("t.json", "{\"rules\":[{\"match\":\"*\",\"kv_cache\":\"fp8\"}]}", &r, &e), 0);
    cr_assert_str_eq(e.msg, "t.json: rules[0]: kv_cache needs \"quantizer\": \"kv\"");
    memset(&e, 0, sizeof e);
    cr_assert_neq(lwq_recipe_parse("t.json", "{\"rules\":[{\"match\":\"*\",\"quantizer\":\"kv\",\"format\":\"fp8\"}]}",
                                   &r, &e), 0);
    cr_assert_str_eq(e.msg, "t.json: rules[0]: a \"quantizer\": \"kv\" rule takes only match, kv_cache and enable");
    memset(&e, 0, sizeof e);
    cr_assert_neq(lwq_recipe_parse("t.json", "{\"rules\":[{\"match\":\"*\",\"format\":\"fp8\",\"input_amax\":3}]}",
                                   &r, &e), 0);
    cr_assert_str_eq(e.msg, "t.json: rules[0]: input_amax needs \"quantizer\": \"input\" and a format");
    memset(&e, 0, sizeof e);
    cr_assert_neq(lwq_recipe_parse("t.json", "{\"rules\":[{\"match\":\"*\",\"quantizer\":\"input\",\"algo\":\"mse\"}]}",
                                   &r, &e), 0);
    cr_assert_str_eq(e.msg, "t.json: rules[0]: algo and fp8_scale_sweep concern weights, not an \"input\" rule");
}
