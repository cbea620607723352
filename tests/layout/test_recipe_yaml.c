/* Model Optimizer recipe YAML -> lwq recipe: the mapping per quantizer, and every refusal's exact message. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/helpers/craft.h"
#include "tests/helpers/check/recipe_refused.h"
#include "layout/format/quant_formats.h"
#include "layout/recipe/recipe.h"
#include "layout/recipe/recipe_yaml.h"

/* Units every recipe below may import (written by the test, in Model Optimizer's schema). */
static void units(void)
{
    lwqt_setup();
    cr_assert_eq(chdir(lwqt_dir), 0);
    mkdir("n", 0755);
    mkdir("u", 0755);
    lwqt_write_str("n/fp8.yaml", "# modelopt-schema: modelopt.torch.quantization.config.QuantizerAttributeConfig\n"
                                 "num_bits: e4m3\naxis:\n");
    lwqt_write_str("n/nvfp4.yaml", "# modelopt-schema: modelopt.torch.quantization.config.QuantizerAttributeConfig\n"
                                   "num_bits: e2m1\nblock_sizes: {-1: 16, type: dynamic, scale_bits: e4m3}\n");
    lwqt_write_str("n/nvfp4_static.yml",
                   "# modelopt-schema: modelopt.torch.quantization.config.QuantizerAttributeConfig\n"
                   "num_bits: e2m1\nblock_sizes: {-1: 16, type: static, scale_bits: e4m3}\n");
    lwqt_write_str("u/off.yaml", "# modelopt-schema: modelopt.torch.quantization.config.QuantizerCfgEntry\n"
                                 "quantizer_name: '*'\nenable: false\n");
    lwqt_write_str("u/kv_cast.yaml", "# modelopt-schema: modelopt.torch.quantization.config.QuantizerCfgListConfig\n"
                                     "imports:\n  fp8: n/fp8\n---\n"
                                     "- quantizer_name: '*[kv]_bmm_quantizer'\n"
                                     "  cfg: {$import: fp8, use_constant_amax: true}\n");
}

TestSuite(recipe_yaml, .init = units, .fini = lwqt_teardown);

/* A recipe whose quant_cfg starts with the deny-all entry (line 6) and goes on with `entries`. */
static int load_body(const char *head, const char *entries, lwq_recipe *r, lwq_recipe_run *run, lwq_error *e)
{
    char buf[8192];
    snprintf(buf, sizeof buf,
             "imports: {fp8: n/fp8, nvfp4: n/nvfp4, nvfp4_static: n/nvfp4_static, off: u/off, kv_cast: u/kv_cast}\n"
             "metadata: {recipe_type: ptq}\n"
             "quantize:\n"
             "%s"
             "  quant_cfg:\n"
             "    - $import: off\n"
             "%s"
             "    - {quantizer_name: '*lm_head*', enable: false}\n",
             head ? head : "  algorithm: max\n", entries);
    lwqt_write_str("r.yaml", buf);
    return lwq_recipe_yaml_load("r.yaml", NULL, r, run, e);
}

static void refused(const char *head, const char *entries, const char *msg)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_neq(load_body(head, entries, &r, &run, &e), 0, "accepted: %s", entries);
    cr_assert_str_eq(e.msg, msg);
}

static lwq_quant_choice pick(const lwq_recipe *r, const char *m) { return lwq_recipe_resolve(r, m); }

Test(recipe_yaml, weight_and_input_pairs_map_to_formats_and_algorithms)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    int rc = load_body("  algorithm: {method: mse, fp8_scale_sweep: true}\n",
                       "    - {quantizer_name: '*.experts.*weight_quantizer', cfg: {$import: nvfp4_static}}\n"
                       "    - {quantizer_name: '*.experts.*input_quantizer', cfg: {$import: nvfp4}}\n"
                       "    - {quantizer_name: '*self_attn*weight_quantizer', cfg: {$import: fp8}}\n"
                       "    - {quantizer_name: '*self_attn*input_quantizer', cfg: {$import: fp8}}\n"
                       "    - {quantizer_name: '*shared_expert.*weight_quantizer', cfg: {$import: nvfp4}}\n"
                       "    - {quantizer_name: '*shared_expert.*input_quantizer', cfg: {$import: nvfp4}}\n"
                       "    - $import: kv_cast\n",
                       &r, &run, &e);
    cr_assert_eq(rc, 0, "%s", e.msg);
    lwq_quant_choice x = pick(&r, "model.layers.0.mlp.experts.3.up_proj");
    cr_assert(x.format == LWQ_QFMT_NVFP4 && x.algo == LWQ_ALGO_MSE && x.fp8_scale_sweep, "static NVFP4: the sweep");
    lwq_quant_choice a = pick(&r, "model.layers.0.self_attn.o_proj");
    cr_assert(a.format == LWQ_QFMT_FP8 && a.algo == LWQ_ALGO_MAX, "FP8 under the sweep stays max-calibrated");
    lwq_quant_choice s = pick(&r, "model.layers.0.mlp.shared_expert.down_proj");
    cr_assert(s.format == LWQ_QFMT_NVFP4 && s.algo == LWQ_ALGO_MAX, "dynamic NVFP4 weights are not searched");
    cr_assert_eq(pick(&r, "model.layers.0.mlp.gate").format, LWQ_QFMT_NONE);
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
    cr_assert_eq(load_body("  algorithm: {method: mse}\n",
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*input_quantizer', cfg: {$import: fp8}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    lwq_quant_choice c = pick(&r, "model.layers.1.mlp.down_proj");
    cr_assert(c.format == LWQ_QFMT_FP8 && c.algo == LWQ_ALGO_MSE);
    cr_assert_eq(r.kv, LWQ_KV_NONE, "no [kv]_bmm entry: no KV cache quantization");
    lwq_recipe_free(&r);
}

Test(recipe_yaml, later_entries_win_and_cfg_replaces_attributes)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_body("  algorithm: {method: local_hessian}\n",
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: nvfp4_static}}\n"
                           "    - {quantizer_name: '*input_quantizer', cfg: {$import: nvfp4}}\n"
                           "    - {quantizer_name: '*layers.1.*', enable: false}\n"
                           "    - {quantizer_name: '*layers.1.mlp*weight_quantizer', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*layers.1.mlp*input_quantizer', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*down_proj*', cfg: {$import: fp8}, enable: false}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    lwq_quant_choice a = pick(&r, "model.layers.0.mlp.up_proj");
    cr_assert(a.format == LWQ_QFMT_NVFP4 && a.algo == LWQ_ALGO_LOCAL_HESSIAN);
    cr_assert_eq(pick(&r, "model.layers.1.self_attn.q_proj").format, LWQ_QFMT_NONE);
    lwq_quant_choice b = pick(&r, "model.layers.1.mlp.up_proj");
    cr_assert(b.format == LWQ_QFMT_FP8 && b.algo == LWQ_ALGO_MAX, "the later cfg replaced the static NVFP4");
    cr_assert_eq(pick(&r, "model.layers.0.mlp.down_proj").format, LWQ_QFMT_NONE, "cfg + enable: false");
    lwq_recipe_free(&r);
}

Test(recipe_yaml, constant_amax_fixes_the_input_amax)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_body(NULL,
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: nvfp4}}\n"
                           "    - {quantizer_name: '*input_quantizer', cfg: {$import: nvfp4, constant_amax: 2688.0}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    lwq_quant_choice c = pick(&r, "model.layers.0.mlp.experts.0.gate_proj");
    cr_assert(c.format == LWQ_QFMT_NVFP4 && c.has_input_amax && c.input_amax == 2688.0f);
    lwq_recipe_free(&r);
}

Test(recipe_yaml, weight_and_input_in_different_formats_are_refused_by_module)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_body(NULL,
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: nvfp4}}\n"
                           "    - {quantizer_name: '*mlp*input_quantizer', cfg: {$import: fp8}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    lwq_quant_choice c = pick(&r, "model.layers.0.mlp.up_proj");
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
    cr_assert_eq(load_body(NULL,
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: nvfp4}}\n"
                           "    - {quantizer_name: '*mlp*input_quantizer', cfg: {$import: nvfp4}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    lwq_quant_choice w = pick(&r, "model.layers.0.self_attn.q_proj");
    cr_assert(!w.split && w.weight_only && w.format == LWQ_QFMT_NVFP4, "W4A16");
    cr_assert_str_eq(lwq_choice_format_name(&w), "w4a16_nvfp4");
    lwq_quant_choice m = pick(&r, "model.layers.0.mlp.up_proj");
    cr_assert(!m.split && !m.weight_only && m.format == LWQ_QFMT_NVFP4, "W4A4 where the input is quantized too");
    lwq_recipe_free(&r);
}

Test(recipe_yaml, fp8_weights_without_an_input_quantizer_are_refused)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_body(NULL, "    - {quantizer_name: '*weight_quantizer', cfg: {$import: fp8}}\n", &r, &run, &e), 0,
                 "%s", e.msg);
    lwq_quant_choice w = pick(&r, "model.layers.0.self_attn.q_proj");
    cr_assert(w.split && !w.weight_only && w.weight_format == LWQ_QFMT_FP8 && w.input_format == LWQ_QFMT_NONE);
    lwq_recipe_free(&r);
}

Test(recipe_yaml, kv_cache_for_some_layers_only_is_refused_per_module)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_body(NULL,
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
    cr_assert_eq(load_body("  algorithm:\n    method: max\n    layerwise:\n      enable: true\n"
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
    cr_assert_eq(load_body(NULL,
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
    refused("  algorithm: awq_lite\n", "",
            "r.yaml:4: quantize.algorithm method awq_lite is not supported: AWQ searches pre-quantization scales over "
            "the whole model, which lwq does not write per layer");
}

Test(recipe_yaml, refuses_smoothquant)
{
    refused("  algorithm: {method: smoothquant}\n", "",
            "r.yaml:4: quantize.algorithm method smoothquant is not supported: SmoothQuant folds per-channel scales "
            "into the previous layer (INT8), which lwq does not write");
}

Test(recipe_yaml, refuses_svdquant)
{
    refused("  algorithm: svdquant\n", "",
            "r.yaml:4: quantize.algorithm method svdquant is not supported: SVDQuant adds low-rank branches, which "
            "lwq does not write");
}

Test(recipe_yaml, refuses_no_calibration)
{
    refused("  algorithm: null\n", "",
            "r.yaml:4: quantize.algorithm null (no calibration) is not supported; lwq calibrates (use max)");
}

Test(recipe_yaml, refuses_sweep_with_max)
{
    refused("  algorithm: {method: max, fp8_scale_sweep: true}\n", "",
            "r.yaml:4: quantize.algorithm.fp8_scale_sweep needs method mse or local_hessian");
}

Test(recipe_yaml, refuses_local_hessian_without_the_sweep)
{
    refused("  algorithm: {method: local_hessian, fp8_scale_sweep: false}\n", "",
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
    cr_assert_eq(load_body("  algorithm: {method: max, skip_forward_without_activation_calib: true}\n",
                           "    - {quantizer_name: '*weight_quantizer', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*input_quantizer', cfg: {$import: fp8}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(r.algo, LWQ_ALGO_MAX);
    cr_assert_eq(pick(&r, "model.layers.0.self_attn.q_proj").format, LWQ_QFMT_FP8);
    lwq_recipe_free(&r);
    refused("  algorithm: {method: mse, skip_forward_without_activation_calib: true}\n", "",
            "r.yaml:4: quantize.algorithm.skip_forward_without_activation_calib is not supported");
}

Test(recipe_yaml, refuses_other_algorithm_settings)
{
    refused("  algorithm: {method: mse, num_bins: 4}\n", "", "r.yaml:4: quantize.algorithm.num_bins is not supported");
}

Test(recipe_yaml, refuses_unknown_layerwise_settings)
{
    refused("  algorithm: {method: max, layerwise: {enable: true, save_every: 4}}\n", "",
            "r.yaml:4: quantize.algorithm.layerwise.save_every is not supported");
}

/* ---- refusals: quant_cfg entries (the first user entry is on line 7) ---------------------------- */

#define W(cfg) "    - {quantizer_name: '*weight_quantizer', cfg: " cfg "}\n"

Test(recipe_yaml, refuses_a_first_entry_other_than_deny_all)
{
    lwqt_recipe_refused("metadata: {recipe_type: ptq}\nquantize:\n  quant_cfg:\n"
                 "    - {quantizer_name: '*weight_quantizer', enable: false}\n",
                 "r.yaml:4: quant_cfg must start with {quantizer_name: '*', enable: false} "
                 "(configs/ptq/units/base_disable_all): quantizers no entry names keep Model Optimizer's default "
                 "attributes (8-bit integer), which lwq does not write");
}

Test(recipe_yaml, refuses_enable_without_cfg)
{
    refused(NULL, "    - {quantizer_name: '*mlp*', enable: true}\n",
            "r.yaml:7: quant_cfg entry '*mlp*': enable: true without cfg turns a quantizer back on with whatever "
            "attributes it had; lwq needs the cfg in the same entry");
}

Test(recipe_yaml, refuses_parent_class_selection)
{
    refused(NULL, "    - {quantizer_name: '*', parent_class: nn.Linear, enable: false}\n",
            "r.yaml:7: quant_cfg entry '*': parent_class nn.Linear is not supported (lwq selects quantizers by name; "
            "only entries that disable a class lwq never quantizes, such as nn.BatchNorm2d or nn.Embedding, are "
            "accepted)");
}

Test(recipe_yaml, refuses_int8)
{
    refused(NULL, W("{num_bits: 8, axis: 0}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.axis 0 is not supported (per-channel scales; lwq "
            "writes per-tensor FP8 and 16-element NVFP4 blocks)");
    refused(NULL, W("{num_bits: 8}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.num_bits 8 is not supported (lwq writes e2m1 NVFP4 "
            "and e4m3 FP8; integers are INT formats)");
}

Test(recipe_yaml, refuses_int4_blocks)
{
    refused(NULL, W("{num_bits: 4, block_sizes: {-1: 128}}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.num_bits 4 is not supported (lwq writes e2m1 NVFP4 "
            "and e4m3 FP8; integers are INT formats)");
}

Test(recipe_yaml, refuses_e5m2)
{
    refused(NULL, W("{num_bits: [5, 2]}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.num_bits [5, 2] is not supported (lwq writes e2m1 "
            "NVFP4 and e4m3 FP8)");
}

Test(recipe_yaml, refuses_another_block_size)
{
    refused(NULL, W("{num_bits: e2m1, block_sizes: {-1: 32, type: dynamic, scale_bits: e4m3}}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.block_sizes {-1: 32} is not supported (NVFP4 blocks "
            "are 16 along the last axis)");
}

Test(recipe_yaml, refuses_mx_block_scales)
{
    refused(NULL, W("{num_bits: e2m1, block_sizes: {-1: 16, type: dynamic, scale_bits: e8m0}}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.block_sizes.scale_bits e8m0 is not supported "
            "(NVFP4 block scales are e4m3)");
}

Test(recipe_yaml, refuses_fp4_without_blocks)
{
    refused(NULL, W("{num_bits: e2m1}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.num_bits e2m1 needs block_sizes {-1: 16, type: "
            "dynamic|static, scale_bits: e4m3} (NVFP4)");
}

Test(recipe_yaml, refuses_block_fp8)
{
    refused(NULL, W("{num_bits: e4m3, block_sizes: {-1: 128, -2: 128}}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.block_sizes with num_bits e4m3 (block-scaled FP8) "
            "is not supported; lwq writes per-tensor FP8");
}

Test(recipe_yaml, refuses_sequential_quantizers)
{
    refused(NULL, W("[{num_bits: 4}, {num_bits: e4m3}]"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg as a list (sequential quantizers, as in W4A8) is not "
            "supported");
}

Test(recipe_yaml, refuses_attributes_that_change_numbers)
{
    refused(NULL, W("{$import: fp8, rotate: true}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.rotate true is not supported");
    refused(NULL, W("{$import: fp8, type: dynamic}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.type dynamic is not supported (dynamic per-tensor "
            "scales are not written to a checkpoint)");
    refused(NULL, W("{$import: fp8, bias: {enable: true}}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.bias (a mapping) is not supported");
    refused(NULL, W("{$import: fp8, learn_rate: 1}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.learn_rate is not supported");
    refused(NULL, W("{$import: fp8, enable: true}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.enable is not supported (give enable on the entry)");
    refused(NULL, W("{axis: null}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg without num_bits means Model Optimizer's default "
            "8-bit integer, which lwq does not write");
}

Test(recipe_yaml, refuses_constant_amax_where_it_has_no_lwq_form)
{
    refused(NULL, W("{$import: fp8, use_constant_amax: true}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.use_constant_amax on weight quantizers is not "
            "supported (it is for the k/v cache: FP8 cast)");
    refused(NULL, W("{$import: fp8, constant_amax: 3.0}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.constant_amax on weight quantizers (a fixed weight "
            "amax) is not supported");
    refused(NULL, "    - {quantizer_name: '*[kv]_bmm_quantizer', cfg: {$import: fp8, constant_amax: 3.0}}\n",
            "r.yaml:7: quant_cfg entry '*[kv]_bmm_quantizer': cfg.constant_amax on the k/v cache quantizers is not "
            "supported (use use_constant_amax: FP8 cast)");
    refused(NULL, "    - {quantizer_name: '*input_quantizer', cfg: {$import: fp8, use_constant_amax: true}}\n",
            "r.yaml:7: quant_cfg entry '*input_quantizer': cfg.use_constant_amax on input quantizers is not "
            "supported (it is for the k/v cache: FP8 cast; constant_amax fixes an input amax)");
}

Test(recipe_yaml, refuses_static_activation_blocks)
{
    refused("  algorithm: mse\n", "    - {quantizer_name: '*input_quantizer', cfg: {$import: nvfp4_static}}\n",
            "r.yaml:7: quant_cfg entry '*input_quantizer': cfg.block_sizes.type static on input quantizers "
            "(calibrated NVFP4 activation blocks) is not supported");
}

Test(recipe_yaml, refuses_static_weights_under_max)
{
    refused(NULL, W("{$import: nvfp4_static}"),
            "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.block_sizes.type static with algorithm method max "
            "is not supported (lwq's max path writes dynamic block scales; use method mse or local_hessian, or type "
            "dynamic)");
}

Test(recipe_yaml, refuses_a_calibrated_nvfp4_kv_cache)
{
    refused(NULL, "    - {quantizer_name: '*[kv]_bmm_quantizer', cfg: {$import: nvfp4}}\n",
            "r.yaml:7: quant_cfg entry '*[kv]_bmm_quantizer': cfg.num_bits e2m1 on the k/v cache quantizers without "
            "use_constant_amax (a calibrated NVFP4 KV cache) is not supported; the cast mode (use_constant_amax: "
            "true) is");
}

/* Model Optimizer's kv_nvfp4_cast unit: NVFP4 numerics with use_constant_amax */
Test(recipe_yaml, an_nvfp4_kv_cache_in_cast_mode_is_nvfp4_cast)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_body(NULL,
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

Test(recipe_yaml, four_over_six_static_weights_under_its_mse_range)
{
    char body[512];
    snprintf(body, sizeof body, F46_W "    - {quantizer_name: '*input_quantizer', cfg: {$import: nvfp4}}\n", "static");
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_body(F46_HEAD, body, &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(r.mse_range, LWQ_MSE_RANGE_OWN);
    lwq_quant_choice c = pick(&r, "model.layers.0.mlp.up_proj");
    cr_assert(c.format == LWQ_QFMT_NVFP4 && c.four_over_six && c.algo == LWQ_ALGO_MSE && !c.weight_only);
    lwq_recipe_free(&r);
}

Test(recipe_yaml, refuses_four_over_six_on_dynamic_blocks)
{
    char body[512];
    snprintf(body, sizeof body, F46_W, "dynamic");
    refused(F46_HEAD, body, "r.yaml:7: quant_cfg entry '*weight_quantizer': cfg.block_sizes.four_over_six is "
                            "implemented for static NVFP4 weights under algorithm method mse without fp8_scale_sweep "
                            "(Model Optimizer's nvfp4_four_over_six)");
}

Test(recipe_yaml, refuses_an_mse_range_of_too_many_candidates)
{
    refused("  algorithm: {method: mse, step_size: 0.01}\n",
            "    - {quantizer_name: '*weight_quantizer', cfg: {$import: nvfp4_static}}\n",
            "r.yaml:4: quantize.algorithm start_multiplier 0.25, stop_multiplier 4, step_size 0.01: lwq needs 0 < "
            "start_multiplier <= stop_multiplier, step_size > 0 and at most 48 candidates (ceil((stop - start) / "
            "step) + 1)");
    refused("  algorithm: {method: mse, start_multiplier: 2.0, stop_multiplier: 1.0}\n",
            "    - {quantizer_name: '*weight_quantizer', cfg: {$import: fp8}}\n",
            "r.yaml:4: quantize.algorithm start_multiplier 2, stop_multiplier 1, step_size 0.1: lwq needs 0 < "
            "start_multiplier <= stop_multiplier, step_size > 0 and at most 48 candidates (ceil((stop - start) / "
            "step) + 1)");
}

/* Nemotron-3 Ultra's nvfp4-4o6: the recipe's [1.0, 1.5] reaches its FP8 per-tensor weights too
 * (Model Optimizer's MseCalibrator searches every static weight quantizer over the range), and any
 * other range is the recipe's own: it reaches the choice and the printed JSON, which loads back */
Test(recipe_yaml, an_own_mse_range_reaches_fp8_and_static_nvfp4_weights)
{
    lwq_recipe r, b;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_body("  algorithm: {method: mse, start_multiplier: 0.5, stop_multiplier: 2.0, step_size: 0.05}\n",
                           "    - {quantizer_name: '*mlp.up_proj*', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*mlp.down_proj*weight_quantizer', cfg: {$import: nvfp4_static}}\n"
                           "    - {quantizer_name: '*mlp.down_proj*input_quantizer', cfg: {$import: nvfp4}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(r.mse_range, LWQ_MSE_RANGE_OWN);
    lwq_quant_choice c = pick(&r, "model.layers.0.mlp.up_proj");
    float m[LWQ_MSE_MAX_STEPS];
    cr_assert(c.format == LWQ_QFMT_FP8 && c.algo == LWQ_ALGO_MSE);
    cr_assert_eq(lwq_choice_mse_candidates(&c, m), 31);
    cr_assert(m[0] == 0.5f && m[30] == 2.0f);
    c = pick(&r, "model.layers.0.mlp.down_proj");
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

Test(recipe_yaml, refuses_k_and_v_apart)
{
    refused(NULL, "    - {quantizer_name: '*k_bmm_quantizer', cfg: {$import: fp8}}\n",
            "r.yaml:7: quant_cfg entry '*k_bmm_quantizer' treats the k and v cache quantizers differently; lwq "
            "writes one mode for both");
}

/* Model Optimizer matches a quantizer_name against the quantizer's full name (conversion.py,
 * _match_quantizer), so an entry enabling every quantizer enables the output and attention ones,
 * which lwq does not write: the module is refused, naming it and the rule */
Test(recipe_yaml, an_enabled_output_or_softmax_quantizer_refuses_its_module)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_body(NULL, "    - {quantizer_name: '*', cfg: {$import: fp8}}\n", &r, &run, &e), 0, "%s", e.msg);
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
Test(recipe_yaml, output_quantizers_disabled_later_are_off)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_body(NULL,
                           "    - {quantizer_name: '*', cfg: {$import: fp8}}\n"
                           "    - {quantizer_name: '*output_quantizer', enable: false}\n"
                           "    - {quantizer_name: '*[qs][_o]*_quantizer', enable: false}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_check_unwritten(&r, "model.layers.0.mlp.up_proj", 0, LWQ_QSEL_OUTPUT, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_check_unwritten(&r, "model.layers.0.self_attn", 0, LWQ_QSEL_QBMM, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_check_unwritten(&r, "model.layers.0.self_attn", 0, LWQ_QSEL_SOFTMAX, &e), 0, "%s", e.msg);
    cr_assert_eq(pick(&r, "model.layers.0.mlp.up_proj").format, LWQ_QFMT_FP8);
    lwq_recipe_free(&r);
}

/* the huggingface/qwen3_5*\/ptq/w4a16_* recipes' '*mlp*gate_proj*weight_quantizer*': Model Optimizer
 * matches it against "...mlp.gate_proj.weight_quantizer" only (no module is named
 * "...weight_quantizer"), so it reaches no output, input or k/v quantizer; lwq refused it as
 * enabling output quantizers */
Test(recipe_yaml, a_pattern_ending_in_weight_quantizer_star_reaches_only_weights)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_body("  algorithm: {method: mse, fp8_scale_sweep: true}\n",
                           "    - {quantizer_name: '*mlp*gate_proj*weight_quantizer*', cfg: {$import: nvfp4_static}}\n",
                           &r, &run, &e), 0, "%s", e.msg);
    lwq_quant_choice c = pick(&r, "model.layers.0.mlp.gate_proj");
    cr_assert(c.format == LWQ_QFMT_NVFP4 && c.weight_only && c.algo == LWQ_ALGO_MSE && c.fp8_scale_sweep);
    cr_assert_eq(lwq_recipe_check_unwritten(&r, "model.layers.0.mlp.gate_proj", 0, LWQ_QSEL_OUTPUT, &e), 0, "%s", e.msg);
    cr_assert_eq(pick(&r, "model.layers.0.mlp.up_proj").format, LWQ_QFMT_NONE);
    char *j = lwq_recipe_to_json(&r);
    /* one rule, on weight quantizers only, by the entry's own quantizer_name; none on outputs */
    cr_assert(strstr(j, "\"quantizer_name\":\t\"*mlp*gate_proj*weight_quantizer*\",\n\t\t\t\"quantizer\":\t\"weight\""), "%s", j);
    cr_assert(!strstr(j, "\"output\""), "no output quantizer rule: %s", j);
    free(j);
    lwq_recipe_free(&r);
}

Test(recipe_yaml, refuses_quantizing_lm_head)
{
    lwqt_recipe_refused("imports: {fp8: n/fp8, off: u/off}\nmetadata: {recipe_type: ptq}\nquantize:\n  quant_cfg:\n"
                 "    - $import: off\n"
                 "    - {quantizer_name: '*weight_quantizer', cfg: {$import: fp8}}\n"
                 "    - {quantizer_name: '*input_quantizer', cfg: {$import: fp8}}\n",
                 "r.yaml: the recipe quantizes lm_head (fp8), which lwq keeps in the source dtype unless it is "
                 "weight-only: NVFP4 (dynamic blocks, or static ones under mse, Four-over-Six too) or FP8 under max; "
                 "add {quantizer_name: '*lm_head*', enable: false}");
}

/* the huggingface/qwen3_5*\/ptq/w4a16_* recipes: '*lm_head*weight_quantizer' with nvfp4, last */
Test(recipe_yaml, a_weight_only_nvfp4_lm_head_is_quantized)
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
                 "weight-only: NVFP4 (dynamic blocks, or static ones under mse, Four-over-Six too) or FP8 under max; "
                 "add {quantizer_name: '*lm_head*', enable: false}");
}

/* the huggingface/qwen3_5*\/ptq/w4a16_nvfp4_mse-* recipes: '*lm_head*weight_quantizer' with
 * nvfp4_static under method mse + fp8_scale_sweep (lwq refused it: only dynamic blocks were
 * written) */
Test(recipe_yaml, a_static_nvfp4_lm_head_under_mse_takes_the_sweep)
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
Test(recipe_yaml, a_rule_quantizing_an_embedding_makes_it_weight_only_nvfp4)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_body(NULL,
                           "    - {quantizer_name: '*mlp*weight_quantizer', cfg: {$import: nvfp4}}\n"
                           "    - {quantizer_name: '*embeddings*weight_quantizer', enable: true, cfg: {$import: nvfp4}}\n",
                           &r, &run, &e),
                 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_embedding(&r, "backbone.embeddings", &e), LWQ_LMHEAD_MAX, "%s", e.msg);
    cr_assert_eq(lwq_recipe_embedding(&r, "model.embed_tokens", &e), LWQ_LMHEAD_NONE, "'*embeddings*' only");
    cr_assert_eq(pick(&r, "model.layers.0.mlp.up_proj").weight_only, 1);
    lwq_recipe_free(&r);
}

/* default_disabled_quantizers' {parent_class: nn.Embedding, quantizer_name: '*', enable: false}
 * switches the embedding off after '*weight_quantizer' (and nothing else) */
Test(recipe_yaml, the_embedding_class_entry_disables_only_the_embedding)
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
    cr_assert_eq(pick(&r, "model.layers.0.mlp.up_proj").format, LWQ_QFMT_NVFP4);
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
Test(recipe_yaml, an_fp8_embedding_is_refused_by_name)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_body(NULL, "    - {quantizer_name: '*embed_tokens*weight_quantizer', cfg: {$import: fp8}}\n", &r,
                           &run, &e), 0, "%s", e.msg);
    cr_assert_lt(lwq_recipe_embedding(&r, "model.embed_tokens", &e), 0);
    cr_assert_str_eq(e.msg, "model.embed_tokens: recipe \"r\" quantizes the token embedding's weight as fp8 (max); lwq "
                            "writes an embedding as weight-only NVFP4 only (dynamic blocks, or static ones under mse)");
    lwq_recipe_free(&r);
}

/* a rule that switches an embedding's quantizer off is what lwq does anyway: accepted */
Test(recipe_yaml, a_rule_disabling_an_embedding_is_accepted)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(load_body(NULL,
                           "    - {quantizer_name: '*mlp*weight_quantizer', cfg: {$import: nvfp4}}\n"
                           "    - {quantizer_name: '*embed_tokens*', enable: false}\n",
                           &r, &run, &e),
                 0, "%s", e.msg);
    lwq_recipe_free(&r);
}

Test(recipe_yaml, refuses_entries_that_do_nothing_or_are_malformed)
{
    refused(NULL, "    - {quantizer_name: '*mlp*'}\n",
            "r.yaml:7: quant_cfg entry '*mlp*' has neither cfg nor enable, so it does nothing");
    refused(NULL, "    - {quantizer_name: '*mlp*', cfg: {}}\n",
            "r.yaml:7: quant_cfg entry '*mlp*': cfg is empty (drop it, or give enable: false)");
    refused(NULL, "    - {quantizer_name: '*mlp*', enable: false, scope: all}\n",
            "r.yaml:7: quant_cfg entry '*mlp*': unknown key \"scope\" (quantizer_name, parent_class, cfg, enable)");
    refused(NULL, "    - {enable: false}\n", "r.yaml:7: a quant_cfg entry needs quantizer_name");
}

/* ---- refusals: the rest of the recipe's shape ------------------------------------------------ */

Test(recipe_yaml, refuses_gptq_and_unknown_methods)
{
    refused("  algorithm: gptq\n", "",
            "r.yaml:4: quantize.algorithm method gptq is not supported: lwq's GPTQ (--algo gptq) takes each NVFP4 "
            "block scale from the weights as GPTQ has updated them, Model Optimizer's from the max-calibrated "
            "original weights, so the codes would differ");
    refused("  algorithm: {method: lsq}\n", "",
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
    refused(NULL, "    - {quantizer_name: '*input_quantizer', cfg: {$import: fp8, constant_amax: -1}}\n",
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
