/* hf_ptq.py's flags on `lwq quantize`: each refusal's exact message, the no-effect notes, the qformat names. */
#include <criterion/criterion.h>

#include "tests/helpers/run.h"

TestSuite(hfptq_cli, .init = lwqt_setup, .fini = lwqt_teardown);

/* `lwq quantize --pyt_ckpt_path m --export_path o ARGS...` fails with exactly `msg` on stderr. */
static void refused(const char *const *args, const char *msg)
{
    const char *v[32] = {"quantize", "--pyt_ckpt_path", lwqt_path("m"), "--export_path", lwqt_path("o")};
    int n = 5;
    for (int i = 0; args[i]; i++)
        v[n++] = args[i];
    v[n] = NULL;
    cr_assert_eq(lwqt_run(v), 2);
    char *err = lwqt_err();
    cr_assert_str_eq(err, msg);
    free(err);
}

#define REFUSES(name, msg, ...)                                                                                        \
    Test(hfptq_cli, name)                                                                                              \
    {                                                                                                                  \
        const char *a[] = {__VA_ARGS__, NULL};                                                                         \
        refused(a, msg);                                                                                               \
    }

REFUSES(refuses_fsdp2, "lwq: --use_fsdp2 is not supported: lwq is one process; FSDP2 ranks would each write the same "
                       "shards\n", "--use_fsdp2")
REFUSES(refuses_low_memory_mode, "lwq: --low_memory_mode is not supported: lwq always streams one layer at a time; "
                                 "hf_ptq's low-memory loader sets up quantizers from --qformat and cannot honor a "
                                 "recipe\n", "--low_memory_mode")
REFUSES(refuses_vllm_fakequant_export, "lwq: --vllm_fakequant_export is not supported: lwq writes the quantized "
                                       "checkpoint, not a vLLM fake-quant state\n", "--vllm_fakequant_export")
REFUSES(refuses_sparsity, "lwq: --sparsity_fmt sparsegpt is not supported: lwq writes dense checkpoints\n",
        "--sparsity_fmt", "sparsegpt")
REFUSES(refuses_awq_flags, "lwq: --awq_block_size is not supported: AWQ searches pre-quantization scales over the "
                           "whole model, which lwq does not write per layer\n", "--awq_block_size", "128")
REFUSES(refuses_auto_quantize_candidates_that_are_no_format, "lwq: --qformat nvfp4,int8 with --auto_quantize_bits: "
        "candidate int8 is not supported: lwq's search chooses a format (nvfp4, fp8, w4a16_nvfp4, "
        "nvfp4_w4a4_weight_mse_fp8_sweep or none) per group of every layer; give the formats (e.g. --qformat nvfp4,fp8)\n", "--auto_quantize_bits=4.8", "--qformat", "nvfp4,int8")
REFUSES(refuses_an_unknown_auto_quantize_cost_model, "lwq: --auto_quantize_cost_model flops: unknown (weight, "
        "active_moe)\n", "--auto_quantize_bits", "6", "--auto_quantize_cost_model", "flops")
REFUSES(refuses_unknown_flags, "lwq: unknown option --calib_with_images (lwq quantize --help)\n", "--calib_with_images")
REFUSES(refuses_int8_smoothquant, "lwq: --qformat int8_smoothquant is not supported: SmoothQuant folds scales into "
                                  "the previous layer (INT8), a format per-layer export cannot write (supported: "
                                  "nvfp4, fp8, nvfp4_experts_only, nvfp4_mlp_only, nvfp4_w4a4_weight_mse_fp8_sweep "
                                  "(= nvfp4 --algo mse --fp8-scale-sweep), nvfp4_w4a4_weight_local_hessian (= nvfp4 "
                                  "--algo local_hessian), nvfp4_experts-fp8_attn, qwen3next_production, w4a16_nvfp4 (weight-only NVFP4), nvfp4_four_over_six, mamba_moe_{nvfp4,fp8}_{aggressive,conservative})\n",
        "--qformat", "int8_smoothquant")
REFUSES(refuses_awq_qformats, "lwq: --qformat nvfp4_awq_lite is not supported: AWQ searches pre-quantization scales "
                              "over the whole model, which lwq does not write per layer (supported: nvfp4, fp8, "
                              "nvfp4_experts_only, nvfp4_mlp_only, nvfp4_w4a4_weight_mse_fp8_sweep (= nvfp4 --algo "
                              "mse --fp8-scale-sweep), nvfp4_w4a4_weight_local_hessian (= nvfp4 --algo "
                              "local_hessian), nvfp4_experts-fp8_attn, qwen3next_production, w4a16_nvfp4 (weight-only NVFP4), nvfp4_four_over_six, mamba_moe_{nvfp4,fp8}_{aggressive,conservative})\n",
        "--qformat", "nvfp4_awq_lite")
REFUSES(refuses_nvfp4_with_blocks_of_32, "lwq: --qformat nvfp4_mlp_weight_only is not supported: its weight-only "
                                         "NVFP4 uses blocks of 32 (numerics nvfp4_bs32); lwq writes NVFP4 with blocks "
                                         "of 16 (w4a16_nvfp4) (supported: nvfp4, fp8, nvfp4_experts_only, "
                                         "nvfp4_mlp_only, nvfp4_w4a4_weight_mse_fp8_sweep (= nvfp4 --algo mse "
                                         "--fp8-scale-sweep), nvfp4_w4a4_weight_local_hessian (= nvfp4 --algo "
                                         "local_hessian), nvfp4_experts-fp8_attn, qwen3next_production, w4a16_nvfp4 "
                                         "(weight-only NVFP4), nvfp4_four_over_six, mamba_moe_{nvfp4,fp8}_{aggressive,conservative})\n",
        "--qformat", "nvfp4_mlp_weight_only")
REFUSES(refuses_unknown_qformats, "lwq: --qformat nvfp5: unknown (supported: nvfp4, fp8, nvfp4_experts_only, "
                                  "nvfp4_mlp_only, nvfp4_w4a4_weight_mse_fp8_sweep (= nvfp4 --algo mse "
                                  "--fp8-scale-sweep), nvfp4_w4a4_weight_local_hessian (= nvfp4 --algo local_hessian), "
                                  "nvfp4_experts-fp8_attn, qwen3next_production, w4a16_nvfp4 (weight-only NVFP4), nvfp4_four_over_six, mamba_moe_{nvfp4,fp8}_{aggressive,conservative})\n", "--qformat", "nvfp5")
REFUSES(refuses_calibrated_nvfp4_kv_cache, "lwq: --kv_cache_qformat nvfp4 is not supported: a calibrated NVFP4 KV "
                                           "cache is not written by lwq, its cast mode is (supported: none, fp8, "
                                           "fp8_cast, nvfp4_cast)\n", "--kv_cache_qformat", "nvfp4")
REFUSES(refuses_affine_kv_cache, "lwq: --kv_cache_qformat fp8_affine is not supported: affine (biased) KV cache "
                                 "quantization is not written by lwq (supported: none, fp8, fp8_cast, nvfp4_cast)\n",
        "--kv_cache_qformat", "fp8_affine")
REFUSES(refuses_hub_datasets, "lwq: --dataset nemotron-post-training-dataset-v2: not a local file or directory; lwq "
                              "reads no Hugging Face hub datasets: export it to .jsonl (one {\"text\": ...} or "
                              "{\"messages\": [...]} per line) and pass that path\n",
        "--dataset", "nemotron-post-training-dataset-v2")
REFUSES(refuses_dataset_lists, "lwq: --dataset a.jsonl,b.jsonl: lwq calibrates on one dataset (one .jsonl / .txt file "
                               "or a directory)\n", "--dataset", "a.jsonl,b.jsonl")
REFUSES(refuses_calib_size_lists, "lwq: --calib_size 256,256: lwq calibrates on one dataset, so give one size\n",
        "--calib_size", "256,256")

/* Flags with no effect are accepted and reported; hf_ptq's defaults fill what is left out. */
Test(hfptq_cli, no_effect_flags_are_reported_and_defaults_are_hf_ptqs)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--hidden", "64", "--layers", "2", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    const char *q[] = {"quantize", "--model", lwqt_path("m"), "--export_path", lwqt_path("o"), "--trust_remote_code",
                       "--skip_generate", "--calib_size", "4", "--quiet", NULL};
    int rc = lwqt_run(q);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(err, "lwq: note: --trust_remote_code has no effect in lwq (lwq runs no model code)\n"
                          "lwq: note: --skip_generate has no effect in lwq (lwq runs no generation preview)\n"
                          "lwq: note: hf_ptq's defaults apply: --qformat fp8, --calib_seq 512, --batch_size 0\n"
                          "lwq: note: no --dataset: lwq calibrates on its built-in text (hf_ptq would download its "
                          "default hub datasets)\n");
    free(err);
    char *hq = lwqt_slurp(lwqt_path("o/hf_quant_config.json"));
    cr_assert(strstr(hq, "\"quant_algo\":\t\"FP8\""), "hf_ptq's default --qformat is fp8: %s", hq);
    free(hq);
}

Test(hfptq_cli, modelopt_sweep_preset_is_nvfp4_with_the_sweep)
{
    const char *a[] = {"quantize", "--print-recipe", "--qformat", "nvfp4_w4a4_weight_mse_fp8_sweep", NULL};
    cr_assert_eq(lwqt_run(a), 0);
    const char *b[] = {"quantize", "--print-recipe", "--qformat", "nvfp4", "--algo", "mse", "--fp8-scale-sweep", NULL};
    char *x = lwqt_out();
    cr_assert_eq(lwqt_run(b), 0);
    char *y = lwqt_out();
    cr_assert_str_eq(x, y);
    cr_assert(strstr(x, "\"method\":\t\"mse\"") && strstr(x, "\"fp8_scale_sweep\":\ttrue"), "%s", x);
    free(x);
    free(y);
}

Test(hfptq_cli, w4a16_nvfp4_is_nvfp4_weights_with_the_input_quantizer_off)
{
    const char *a[] = {"quantize", "--print-recipe", "--qformat", "w4a16_nvfp4", NULL};
    cr_assert_eq(lwqt_run(a), 0);
    char *x = lwqt_out();
    cr_assert(strstr(x, "\"name\":\t\"w4a16_nvfp4\"") && strstr(x, "\"quantizer\":\t\"input\""), "%s", x);
    free(x);
}

/* AutoQuantize: --auto_quantize_bits with the candidates of --qformat; the gradient method and the
 * search-state checkpoint are reported, not silently taken */
Test(hfptq_cli, auto_quantize_flags_are_translated_and_reported)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--hidden", "64", "--layers", "2", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    const char *q[] = {"quantize", "--model", lwqt_path("m"), "--export_path", lwqt_path("o"), "--qformat", "nvfp4,fp8",
                       "--auto_quantize_bits", "6", "--auto_quantize_method", "gradient", "--auto_quantize_checkpoint",
                       "x.pth", "--calib_size", "4", "--calib_seq", "32", "--batch_size", "2", "--quiet", NULL};
    int rc = lwqt_run(q);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(err, "lwq: note: --auto_quantize_method gradient: lwq computes no gradients; it scores each group "
                          "by the error it adds to its layer's output (kl_div: by the KL of the logits)\n"), "%s", err);
    cr_assert(strstr(err, "lwq: note: --auto_quantize_checkpoint has no effect in lwq (lwq keeps the search's scores in "
                          "the resume directory"), "%s", err);
    free(err);
    char *rep = lwqt_slurp(lwqt_path("o/auto_quantize.json"));
    cr_assert(strstr(rep, "\"formats\":\t[\"nvfp4\", \"fp8\", \"none\"]") && strstr(rep, "\"base_recipe\":\t\"fp8\""),
              "%s", rep);
    free(rep);
}
/* hf_ptq's active_moe cost model and its ratio become lwq's (engine/autoq/autoq.h) */
Test(hfptq_cli, auto_quantize_active_moe_is_translated)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "qwen3_moe", "--experts", "4", "--top-k", "2", "--hidden",
                        "64", "--layers", "2", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    const char *q[] = {"quantize", "--model", lwqt_path("m"), "--export_path", lwqt_path("o"), "--qformat",
                       "fp8,w4a16_nvfp4", "--auto_quantize_bits", "6", "--auto_quantize_cost_model", "active_moe",
                       "--auto_quantize_active_moe_expert_ratio", "0.03125", "--calib_size", "4", "--calib_seq", "32",
                       "--batch_size", "2", "--quiet", NULL};
    int rc = lwqt_run(q);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "%s", err);
    free(err);
    char *rep = lwqt_slurp(lwqt_path("o/auto_quantize.json"));
    cr_assert(strstr(rep, "\"name\":\t\"active_moe\"") && strstr(rep, "\"active_moe_expert_ratio\":\t0.03125"),
              "%s", rep);
    free(rep);
}
REFUSES(refuses_unknown_kv_formats, "lwq: --kv_cache_qformat int8: unknown (supported: none, fp8, fp8_cast, "
                                      "nvfp4_cast)\n",
        "--kv_cache_qformat", "int8")
REFUSES(refuses_a_missing_value, "lwq: --calib_seq needs a value\n", "--calib_seq")
REFUSES(refuses_a_value_on_a_switch, "lwq: --trust_remote_code takes no value\n", "--trust_remote_code=1")

Test(hfptq_cli, kv_cache_qformat_is_ignored_with_a_recipe)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--hidden", "64", "--layers", "2", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    FILE *fp = fopen(lwqt_path("r.json"), "w");
    fprintf(fp, "{\"kv_cache\": \"none\", \"rules\": [{\"match\": \"*\", \"format\": \"fp8\"}]}");
    fclose(fp);
    const char *q[] = {"quantize", "--model", lwqt_path("m"), "--export_path", lwqt_path("o"), "--recipe",
                       lwqt_path("r.json"), "--kv_cache_qformat", "fp8", "--calib_size", "4", "--calib_seq", "32",
                       "--batch_size", "2", "--dataset", lwqt_path("m"), "--quiet", NULL};
    (void)q;
    const char *q2[] = {"quantize", "--model", lwqt_path("m"), "--export_path", lwqt_path("o"), "--recipe",
                        lwqt_path("r.json"), "--kv_cache_qformat", "fp8", "--calib_size", "4", "--calib_seq", "32",
                        "--batch_size", "2", "--quiet", NULL};
    int rc = lwqt_run(q2);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(err, "lwq: note: --kv_cache_qformat fp8 is ignored: the --recipe sets the KV cache (as in "
                          "hf_ptq)\n"), "%s", err);
    free(err);
    char *hq = lwqt_slurp(lwqt_path("o/hf_quant_config.json"));
    cr_assert(strstr(hq, "\"kv_cache_quant_algo\":\tnull"), "the recipe's none: %s", hq);
    free(hq);
}

Test(hfptq_cli, a_batch_of_one_over_the_budget_is_refused)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--hidden", "64", "--layers", "2", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    const char *q[] = {"plan", lwqt_path("m"), "--batch-size", "0", "--max-cpu-memory-gb", "0.001", NULL};
    cr_assert_eq(lwqt_run(q), 2);
    char *err = lwqt_err();
    cr_assert(strstr(err, "lwq: --batch-size 0: even a batch of 1 needs "), "%s", err);
    cr_assert(strstr(err, " GB GPU, over the budget of 0.001 GB host\n"), "%s", err);
    free(err);
}
