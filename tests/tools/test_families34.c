/* The issue-34 families end to end on the transformers-written tiny checkpoints of tests/data/peers: expert streaming and resume byte-identical, inspect / verify / eval, and each family's refusals by name (before any weight is read, nothing written). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "tests/helpers/shell.h"

static char g_tmp[256];

static void setup(void) { lwqt_tmpdir(g_tmp, sizeof g_tmp, "lwq-fam34"); }
static void teardown(void) { lwqt_rmtree(g_tmp); }

TestSuite(families34, .init = setup, .fini = teardown, .timeout = 300);

static const char *data_root(void)
{
    static char path[1024];
    const char *me = __FILE__, *cut = strstr(me, "tests/tools/");
    cr_assert_not_null(cut, "cannot find the source tree from %s", me);
    snprintf(path, sizeof path, "%.*stests/data/peers", (int)(cut - me), me);
    return path;
}

/* g_tmp/m: a copy of src/<src> (glm4_moe's holds its MTP layer model.layers.2.*). */
static void copy_model(const char *src)
{
    cr_assert_eq(lwqt_sh("cp -r '%s/src/%s' %s/m", data_root(), src, g_tmp), 0);
}

static int quantize(const char *out, const char *env, const char *extra)
{
    return lwqt_sh("%s '%s' quantize %s/m -o %s/%s --calib '%s/calib.jsonl' --calib-size 8 --calib-seq 32 "
                   "--batch-size 4 --threads 2 --quiet %s 2>>%s/stderr.txt",
                   env ? env : "", lwqt_bin(), g_tmp, g_tmp, out, data_root(), extra, g_tmp);
}

static void streaming_is_byte_identical(const char *src)
{
    copy_model(src);
    cr_assert_eq(quantize("a", NULL, "--qformat nvfp4"), 0);
    cr_assert_eq(quantize("b", NULL, "--qformat nvfp4 --expert-group 3"), 0);
    cr_assert_eq(lwqt_sh("cd %s && for f in a/*.safetensors; do cmp -s $f b/${f#a/} || exit 1; done", g_tmp), 0,
                 "streamed shards differ");
}

static void resume_is_byte_identical(const char *src)
{
    copy_model(src);
    cr_assert_eq(quantize("ref", NULL, "--qformat fp8"), 0);
    int rc = quantize("out", "LWQ_SYS_CRASH_STEP=6 LWQ_SYS_CRASH_MODE=kill", "--qformat fp8");
    cr_assert_eq(rc, 128 + SIGKILL, "exit %d, expected a SIGKILL at step 6", rc);
    cr_assert_eq(quantize("out", NULL, "--qformat fp8"), 0, "resume failed");
    cr_assert_eq(lwqt_sh("diff -r %s/ref %s/out >/dev/null 2>&1", g_tmp, g_tmp), 0, "resumed output differs");
}

/* eval_extra: an MLA model's FP8 KV cache (it caches the latent when served) is not emulated by
 * lwq eval: "--kv-cache none" leaves it out */
static void verify_and_eval(const char *src, const char *eval_extra)
{
    copy_model(src);
    cr_assert_eq(quantize("q", NULL, "--qformat nvfp4"), 0);
    cr_assert_eq(lwqt_sh("'%s' verify %s/q >/dev/null 2>&1", lwqt_bin(), g_tmp), 0, "verify failed");
    cr_assert_eq(lwqt_sh("'%s' eval %s/m %s/q --data '%s/calib.jsonl' --data-size 2 --data-seq 16 --threads 2 "
                         "--quiet %s --json %s/ev.json >/dev/null 2>&1 && test -s %s/ev.json",
                         lwqt_bin(), g_tmp, g_tmp, data_root(), eval_extra, g_tmp, g_tmp),
                 0, "eval failed");
}

/* config.json edited with the sed expression `edit` (checked with grep `check`), the weights made
 * unreadable (a refusal that read them would fail differently): quantize exits 2, stderr holds
 * `want` (a fixed string), the output directory stays empty. */
static void refused(const char *src, const char *edit, const char *check, const char *want)
{
    copy_model(src);
    cr_assert_eq(lwqt_sh("cd %s/m && sed -i '%s' config.json && grep -qF '%s' config.json && "
                         "truncate -s 100 model.safetensors && mkdir -p %s/out",
                         g_tmp, edit, check, g_tmp),
                 0, "could not edit config.json");
    int rc = quantize("out", NULL, "--qformat nvfp4");
    cr_assert_eq(rc, 2, "exit %d", rc);
    char wp[300];
    snprintf(wp, sizeof wp, "%s/want.txt", g_tmp);
    FILE *f = fopen(wp, "w");
    cr_assert(f && fputs(want, f) >= 0 && fclose(f) == 0, "%s", wp);
    cr_assert_eq(lwqt_sh("grep -qF -f %s %s/stderr.txt", wp, g_tmp), 0, "the message does not say %s", want);
    cr_assert_eq(lwqt_sh("test -z \"$(ls -A %s/out)\"", g_tmp), 0, "something was written");
}

Test(families34, glm4_moe_expert_streaming_is_byte_identical) { streaming_is_byte_identical("glm4_moe-f32"); }
Test(families34, glm4_moe_resume_after_a_kill_is_byte_identical) { resume_is_byte_identical("glm4_moe-f32"); }
Test(families34, glm4_moe_verify_and_eval) { verify_and_eval("glm4_moe-f32", ""); }

Test(families34, glm4_moe_passes_its_mtp_layer_through_and_excludes_it)
{
    copy_model("glm4_moe-f32");
    cr_assert_eq(lwqt_sh("'%s' inspect %s/m 2>&1 | grep -q 'model.layers.2.\\* .* pass through'", lwqt_bin(), g_tmp),
                 0, "inspect does not pass the MTP layer through");
    cr_assert_eq(quantize("q", NULL, "--qformat nvfp4"), 0);
    cr_assert_eq(lwqt_sh("grep -q '\"model.layers.2\\*\"' %s/q/hf_quant_config.json", g_tmp), 0,
                 "the MTP layer is not excluded");
}

/* head_dim 16 x 0.1 = 1 rotary dim */
Test(families34, glm4_moe_unrotatable_partial_rotary_factor_is_refused_by_name)
{
    refused("glm4_moe-f32", "s/\"partial_rotary_factor\": 0.5/\"partial_rotary_factor\": 0.1/",
            "\"partial_rotary_factor\": 0.1",
            "model_type 'glm4_moe': \"partial_rotary_factor\" = 0.1 gives 1 rotary dims");
}

Test(families34, minimax_m2_expert_streaming_is_byte_identical) { streaming_is_byte_identical("minimax_m2-f32"); }
Test(families34, minimax_m2_resume_after_a_kill_is_byte_identical) { resume_is_byte_identical("minimax_m2-f32"); }
Test(families34, minimax_m2_verify_and_eval) { verify_and_eval("minimax_m2-f32", ""); }

/* the published configs' rotary_dim (transformers ignores it) must agree with what it rotates */
Test(families34, minimax_m2_disagreeing_rotary_dim_is_refused_by_name)
{
    refused("minimax_m2-f32", "s/\"head_dim\": 16,/\"head_dim\": 16, \"rotary_dim\": 4,/", "\"rotary_dim\": 4",
            "model_type 'minimax_m2': \"rotary_dim\" = 4 disagrees with head_dim 16 x partial_rotary_factor 0.5");
}

Test(families34, minimax_m2_softmax_scoring_func_is_refused_by_name)
{
    refused("minimax_m2-f32", "s/\"head_dim\": 16,/\"head_dim\": 16, \"scoring_func\": \"softmax\",/",
            "\"scoring_func\": \"softmax\"", "model_type 'minimax_m2': \"scoring_func\" = \"softmax\" is not");
}

Test(families34, deepseek_v32_expert_streaming_is_byte_identical) { streaming_is_byte_identical("deepseek_v32-f32"); }
Test(families34, deepseek_v32_resume_after_a_kill_is_byte_identical) { resume_is_byte_identical("deepseek_v32-f32"); }
/* local_hessian on glm_moe_dsa with the 16 calibration samples, where expert 6 of layer 1 gets
 * no token: streamed in groups of 3, the shards and the calibration report (which counts the cold
 * expert's 3 linears) are those of the unstreamed run.  Before, a streamed unit's count of them
 * was not added to the layer's report. */
Test(families34, glm_moe_dsa_local_hessian_streaming_reports_the_cold_expert)
{
    copy_model("glm_moe_dsa-bf16");
    const char *a = "--qformat nvfp4 --algo local_hessian --calib-size 16";
    cr_assert_eq(quantize("a", NULL, a), 0);
    char b[200];
    snprintf(b, sizeof b, "%s --expert-group 3", a);
    cr_assert_eq(quantize("b", NULL, b), 0);
    cr_assert_eq(lwqt_sh("grep -Eq '\"local_hessian_cold_without_hessian\":[[:space:]]*3' %s/a/calibration_report.json",
                         g_tmp), 0, "the unstreamed run has no cold expert: the test no longer tests this");
    cr_assert_eq(lwqt_sh("cd %s && for f in a/*.safetensors a/calibration_report.json; do cmp -s $f b/${f#a/} || "
                         "exit 1; done", g_tmp), 0, "streamed in groups of 3: other shards or another report");
}

Test(families34, deepseek_v32_verify_and_eval) { verify_and_eval("deepseek_v32-f32", "--kv-cache none"); }
Test(families34, glm_moe_dsa_verify_and_eval) { verify_and_eval("glm_moe_dsa-f32", "--kv-cache none"); }

/* index_topk is 32: a 40-token calibration sequence would need the sparse attention, which lwq
 * does not compute; refused before anything is written, naming index_topk */
Test(families34, deepseek_v32_calibration_longer_than_index_topk_is_refused_by_name)
{
    copy_model("deepseek_v32-f32");
    cr_assert_eq(lwqt_sh("for i in 1 2 3 4; do printf '{\"input_ids\": [%%s]}\\n' "
                         "\"$(seq -s, 1 40)\"; done > %s/long.jsonl && mkdir -p %s/out",
                         g_tmp, g_tmp),
                 0);
    int rc = lwqt_sh("'%s' quantize %s/m -o %s/out --calib %s/long.jsonl --calib-size 4 --calib-seq 40 --quiet "
                     "--qformat fp8 2>%s/stderr.txt",
                     lwqt_bin(), g_tmp, g_tmp, g_tmp, g_tmp);
    cr_assert_eq(rc, 2, "exit %d", rc);
    cr_assert_eq(lwqt_sh("grep -q 'sequence of 40 tokens is longer than index_topk 32' %s/stderr.txt && "
                         "grep -q 'give --calib-seq 32 or less' %s/stderr.txt",
                         g_tmp, g_tmp),
                 0, "the refusal does not name index_topk");
    cr_assert_eq(lwqt_sh("test -z \"$(ls -A %s/out)\"", g_tmp), 0, "something was written");
    cr_assert_eq(lwqt_sh("'%s' quantize %s/m -o %s/ok --calib %s/long.jsonl --calib-size 4 --calib-seq 32 --quiet "
                         "--qformat fp8 2>>%s/stderr.txt",
                         lwqt_bin(), g_tmp, g_tmp, g_tmp, g_tmp),
                 0, "--calib-seq 32 (= index_topk) is refused");
}

Test(families34, glm_moe_dsa_unknown_indexer_type_is_refused_by_name)
{
    refused("glm_moe_dsa-f32", "s/\"shared\"/\"sliding\"/", "\"sliding\"",
            "model_type 'glm_moe_dsa': \"indexer_types\"[1] = \"sliding\" is not an indexer type");
}

Test(families34, mistral4_expert_streaming_is_byte_identical) { streaming_is_byte_identical("mistral4-f32"); }
Test(families34, mistral4_resume_after_a_kill_is_byte_identical) { resume_is_byte_identical("mistral4-f32"); }
Test(families34, mistral4_verify_and_eval) { verify_and_eval("mistral4-f32", "--kv-cache none"); }

/* transformers writes mistral4's routed experts fused 3-D; lwq reads them as the per-expert
 * tensors of the plan (3 x 8 per layer), as Model Optimizer exports them */
Test(families34, mistral4_fused_experts_are_listed_per_expert)
{
    copy_model("mistral4-f32");
    cr_assert_eq(lwqt_sh("grep -q 'mlp.experts.gate_up_proj' %s/m/model.safetensors", g_tmp), 0,
                 "the source no longer holds fused experts");
    cr_assert_eq(lwqt_sh("'%s' inspect %s/m > %s/inspect.txt 2>&1", lwqt_bin(), g_tmp, g_tmp), 0, "inspect failed");
    cr_assert_eq(lwqt_sh("grep -q 'experts 48.0 KiB (24 tensors, 8 experts)' %s/inspect.txt && "
                         "grep -q 'ok: every tensor matches the mistral4 plan' %s/inspect.txt", g_tmp, g_tmp),
                 0, "inspect does not read the fused experts as 24 per-expert tensors of the plan");
}

/* head_dim 32 x 0.25 = 8 rotary dims, but qk_rope_head_dim is 16 */
Test(families34, mistral4_partial_rotary_factor_other_than_the_rope_part_is_refused_by_name)
{
    refused("mistral4-f32", "s/\"partial_rotary_factor\": 0.5/\"partial_rotary_factor\": 0.25/",
            "\"partial_rotary_factor\": 0.25",
            "model_type 'mistral4': \"rope_parameters.partial_rotary_factor\" = 0.25 rotates 8 of the 32 q/k head "
            "dims, but the rope part (qk_rope_head_dim) is 16");
}

Test(families34, mistral4_rope_type_other_than_yarn_is_refused_by_name)
{
    refused("mistral4-f32", "s/\"rope_type\": \"yarn\"/\"rope_type\": \"linear\"/", "\"rope_type\": \"linear\"",
            "model_type 'mistral4': \"rope_parameters.rope_type\" = \"linear\" is not supported");
}

Test(families34, mistral4_rope_interleave_false_is_refused_by_name)
{
    refused("mistral4-f32", "s/\"rope_interleave\": true/\"rope_interleave\": false/", "\"rope_interleave\": false",
            "model_type 'mistral4': \"rope_interleave\" = false is not supported");
}

Test(families34, mistral4_attention_bias_is_refused_by_name)
{
    refused("mistral4-f32", "s/\"attention_bias\": false/\"attention_bias\": true/", "\"attention_bias\": true",
            "model_type 'mistral4': \"attention_bias\" = true is not supported");
}

Test(families34, mistral4_missing_llama_4_scaling_beta_is_refused_by_name)
{
    refused("mistral4-f32", "/\"llama_4_scaling_beta\"/d", "\"rope_type\": \"yarn\"",
            "model_type 'mistral4': \"rope_parameters\" has no \"llama_4_scaling_beta\"");
}

/* transformers 4's key would replace Mistral4Config's rope_parameters */
Test(families34, mistral4_rope_scaling_is_refused_by_name)
{
    refused("mistral4-f32", "s/\"rope_parameters\"/\"rope_scaling\"/", "\"rope_scaling\"",
            "model_type 'mistral4': \"rope_scaling\" is not read for this model_type");
}

Test(families34, mistral4_sigmoid_scoring_func_is_refused_by_name)
{
    refused("mistral4-f32", "s/\"n_group\": 1,/\"n_group\": 1, \"scoring_func\": \"sigmoid\",/",
            "\"scoring_func\": \"sigmoid\"", "model_type 'mistral4': \"scoring_func\" = \"sigmoid\" is not what");
}

/* transformers routes every layer from first_k_dense_replace on, whatever moe_layer_freq says */
Test(families34, mistral4_moe_layer_freq_is_refused_by_name)
{
    refused("mistral4-f32", "s/\"n_group\": 1,/\"n_group\": 1, \"moe_layer_freq\": 2,/", "\"moe_layer_freq\": 2",
            "model_type 'mistral4': \"moe_layer_freq\" = 2 is not what the model does");
}

/* 8 experts in 8 groups: the router's top-2 per group has one expert to pick from */
Test(families34, mistral4_groups_of_one_expert_are_refused_by_name)
{
    refused("mistral4-f32", "s/\"n_group\": 1,/\"n_group\": 8,/", "\"n_group\": 8",
            "model_type 'mistral4': \"n_group\" = 8 leaves 1 expert(s) per group");
}

/* 4 groups of 2, one chosen: 2 experts for 3 per token */
Test(families34, mistral4_chosen_groups_smaller_than_top_k_are_refused_by_name)
{
    refused("mistral4-f32", "s/\"n_group\": 1,/\"n_group\": 4,/; s/\"num_experts_per_tok\": 2/\"num_experts_per_tok\": 3/",
            "\"num_experts_per_tok\": 3",
            "model_type 'mistral4': \"topk_group\" = 1 groups of 2 experts hold fewer than num_experts_per_tok 3");
}
