/* lm_head as a search group of the auto-quantize search (a module_search_spaces pattern matching it, Model Optimizer 0.47's semantics): its candidates, its exact bytes in the budget, the written recipe and output, resume, and the refusals naming it. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "layout/checkpoint/checkpoint.h"
#include "tests/helpers/run.h"

TestSuite(autoq_head, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 600);

#define QARGS "--calib-size 6 --calib-seq 24 --batch-size 4 --quiet"

static void make_moe(const char *extra)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s --arch qwen3_moe --experts 4 --top-k 2 --hidden 128 --layers 2 --heads 4 "
                         "--kv-heads 2 --vocab 512 --quiet %s", lwqt_bin(), lwqt_path("m"), extra), 0);
}

/* An auto_quantize recipe (cost model weight, top-level candidates fp8, score `method`) whose spaces are
 * `space` */
static void write_recipe_scored(const char *bits, const char *space, const char *method)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "imports:\n"
             "  nvfp4: configs/ptq/presets/model/nvfp4\n"
             "  fp8: configs/ptq/presets/model/fp8\n"
             "  w4a16_nvfp4: configs/ptq/presets/model/w4a16_nvfp4\n"
             "metadata:\n"
             "  recipe_type: auto_quantize\n"
             "auto_quantize:\n"
             "  constraints:\n"
             "    effective_bits: %s\n"
             "  candidate_formats:\n"
             "    - $import: fp8\n"
             "  module_search_spaces:\n%s"
             "  auto_quantize_method: %s\n"
             "  score_size: 2\n",
             bits, space, method);
    lwqt_write_str("aq.yaml", buf);
}

static void write_recipe(const char *bits, const char *space) { write_recipe_scored(bits, space, "gradient"); }

#define HEAD_SPACE "    - module_name_patterns: ['*lm_head*']\n" \
                   "      candidate_formats: [{$import: fp8}, {$import: w4a16_nvfp4}]\n" \
                   "      allow_no_quant: false\n"

static int run(const char *env, const char *out, const char *extra)
{
    return lwqt_sh("%s %s quantize %s -o %s " QARGS " --recipe %s %s 2>>%s", env ? env : "", lwqt_bin(), lwqt_path("m"),
                   lwqt_path(out), lwqt_path("aq.yaml"), extra ? extra : "", lwqt_path("stderr.txt"));
}

/* the lm_head group of OUT/auto_quantize.json (the last group): its candidates "fp8,w4a16_nvfp4" and choice */
static cJSON *head_group(cJSON *root)
{
    const cJSON *gs = cJSON_GetObjectItem(root, "groups");
    cJSON *g = cJSON_GetArrayItem(gs, cJSON_GetArraySize(gs) - 1);
    cr_assert(g && !strcmp(cJSON_GetObjectItem(g, "group")->valuestring, "lm_head"), "no lm_head group last");
    return g;
}

static const char *err_text(void)
{
    static char buf[8192];
    char *s = lwqt_slurp(lwqt_path("stderr.txt"));
    snprintf(buf, sizeof buf, "%s", s ? s : "");
    free(s);
    return buf;
}

/* the space's candidates (fp8, w4a16_nvfp4; allow_no_quant false) and their exact bytes: V*H + 8 and
 * 9*V*H/16 + 4 for this 512 x 128 lm_head */
Test(autoq_head, a_space_matching_lm_head_makes_it_a_group_with_its_candidates_and_exact_bytes)
{
    make_moe("");
    write_recipe("12", HEAD_SPACE);
    cr_assert_eq(run(NULL, "a", NULL), 0, "%s", err_text());
    cJSON *root = lwqt_json(lwqt_path("a/auto_quantize.json"));
    cr_assert(root);
    cJSON *g = head_group(root);
    const cJSON *c = cJSON_GetObjectItem(g, "candidates");
    cr_assert_eq(cJSON_GetArraySize(c), 2);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "fp8"), "bytes")->valuedouble, 512.0 * 128 + 8);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "w4a16_nvfp4"), "bytes")->valuedouble,
                 512.0 * 128 * 9 / 16 + 4);
    cr_assert_null(cJSON_GetObjectItem(g, "layer"), "lm_head is in no layer");
    cJSON_Delete(root);
}

/* the W8A8 candidate adds less error to the logits than weight-only NVFP4 (layer score: the squared error
 * relative to the logits), and at a budget of 12 bits FP8 is chosen and written W8A8 */
Test(autoq_head, fp8_scores_better_than_w4a16_and_is_written_w8a8)
{
    make_moe("");
    write_recipe("12", HEAD_SPACE);
    cr_assert_eq(run(NULL, "a", NULL), 0, "%s", err_text());
    cJSON *root = lwqt_json(lwqt_path("a/auto_quantize.json"));
    cJSON *g = head_group(root);
    const cJSON *c = cJSON_GetObjectItem(g, "candidates");
    double f = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "fp8"), "score")->valuedouble;
    double w = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "w4a16_nvfp4"), "score")->valuedouble;
    cr_assert(f > 0 && w > f, "fp8 %g, w4a16_nvfp4 %g", f, w);
    cr_assert_str_eq(cJSON_GetObjectItem(g, "format")->valuestring, "fp8");
    cJSON_Delete(root);
    lwq_ckpt ck;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_path("a"), &ck, &e), 0, "%s", e.msg);
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&ck, "lm_head.weight");
    cr_assert(t && t->dtype == LWQ_F8_E4M3);
    cr_assert_not_null(lwq_ckpt_find(&ck, "lm_head.input_scale"));
    lwq_ckpt_free(&ck);
}

/* the kl score measures lm_head at the logits directly: both candidates > 0, NVFP4 weights worse */
Test(autoq_head, the_kl_score_ranks_lm_heads_candidates)
{
    make_moe("");
    write_recipe_scored("12", HEAD_SPACE, "kl_div");
    cr_assert_eq(run(NULL, "a", NULL), 0, "%s", err_text());
    cJSON *root = lwqt_json(lwqt_path("a/auto_quantize.json"));
    const cJSON *c = cJSON_GetObjectItem(head_group(root), "candidates");
    double f = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "fp8"), "score")->valuedouble;
    double w = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "w4a16_nvfp4"), "score")->valuedouble;
    cr_assert(f > 0 && w > f, "fp8 KL %g, w4a16_nvfp4 KL %g", f, w);
    cJSON_Delete(root);
}

/* lm_head is in the budget's numerator and denominator: the least budget makes it weight-only NVFP4, and the
 * bits written (counted from OUT's tensors, lm_head included) are the predicted ones, under the budget */
Test(autoq_head, at_a_tight_budget_lm_head_is_w4a16_and_the_written_bits_count_it)
{
    make_moe("");
    write_recipe("4.6", HEAD_SPACE);
    cr_assert_neq(run(NULL, "a", NULL), 0);
    const char *err = err_text();
    const char *p = strstr(err, "allow with --auto-quantize-formats ");
    p = p ? strstr(p, ": ") : NULL;
    cr_assert(p, "%s", err);
    double least = atof(p + 2);
    char bits[32];
    snprintf(bits, sizeof bits, "%.4f", least);
    lwqt_sh("rm -rf %s %s.layerwise_resume %s", lwqt_path("a"), lwqt_path("a"), lwqt_path("stderr.txt"));
    write_recipe(bits, HEAD_SPACE);
    cr_assert_eq(run(NULL, "a", NULL), 0, "%s", err_text());
    cJSON *root = lwqt_json(lwqt_path("a/auto_quantize.json"));
    cr_assert_str_eq(cJSON_GetObjectItem(head_group(root), "format")->valuestring, "w4a16_nvfp4");
    double pred = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "predicted"), "bits_per_weight")->valuedouble;
    double wrote = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "written"), "bits_per_weight")->valuedouble;
    double lin = cJSON_GetObjectItem(root, "linear_weights")->valuedouble;
    cJSON_Delete(root);
    cr_assert(pred == wrote && wrote <= least, "predicted %.6f, written %.6f, budget %.4f", pred, wrote, least);
    /* the denominator: lm_head's 512 x 128 weights beside the same search without lm_head */
    write_recipe("12", "    - module_name_patterns: ['*self_attn*']\n"
                        "      candidate_formats: [{$import: fp8}]\n");
    cr_assert_eq(run(NULL, "b", NULL), 0, "%s", err_text());
    root = lwqt_json(lwqt_path("b/auto_quantize.json"));
    double lin_b = cJSON_GetObjectItem(root, "linear_weights")->valuedouble;
    cJSON_Delete(root);
    cr_assert_eq(lin - lin_b, 512.0 * 128, "the budget counts %.0f weights with lm_head, %.0f without", lin, lin_b);
}

/* the written recipes (lwq JSON and Model Optimizer YAML) carry lm_head's choice: rerun, the same tensors */
Test(autoq_head, the_written_recipes_rerun_to_the_same_lm_head)
{
    make_moe("");
    write_recipe("12", HEAD_SPACE);
    cr_assert_eq(run(NULL, "a", NULL), 0, "%s", err_text());
    cr_assert_eq(lwqt_sh("grep -q \"'lm_head.input_quantizer'\" %s", lwqt_path("a/auto_quantize_recipe.yaml")), 0);
    static const char *const files[] = {"a/auto_quantize_recipe.json", "a/auto_quantize_recipe.yaml"};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(lwqt_sh("%s quantize %s -o %s " QARGS " --recipe %s 2>>%s", lwqt_bin(), lwqt_path("m"),
                             lwqt_path(i ? "y" : "j"), lwqt_path(files[i]), lwqt_path("stderr.txt")), 0, "%s",
                     err_text());
        cr_assert_eq(lwqt_sh("%s diff %s %s >/dev/null", lwqt_bin(), lwqt_path("a"), lwqt_path(i ? "y" : "j")), 0,
                     "%s reruns to other bytes", files[i]);
    }
}

/* a kill anywhere in pass 1 (the last layer's commit and lm_head's scoring after it included) resumes to the
 * same output */
Test(autoq_head, kills_in_pass_1_resume_byte_identical)
{
    make_moe("");
    write_recipe("12", HEAD_SPACE);
    cr_assert_eq(run(NULL, "ref", NULL), 0, "%s", err_text());
    int killed = 0;
    for (int k = 0; k < 60; k += 3) {
        lwqt_sh("rm -rf %s %s.layerwise_resume", lwqt_path("o"), lwqt_path("o"));
        char env[64];
        snprintf(env, sizeof env, "LWQ_SYS_CRASH_STEP=%d LWQ_SYS_CRASH_MODE=kill", k);
        int rc = run(env, "o", NULL);
        if (rc == 0)
            break;
        cr_assert_eq(rc, 128 + SIGKILL, "step %d: exit %d: %s", k, rc, err_text());
        if (access(lwqt_path("o.layerwise_resume/manifest.json"), F_OK) != 0)
            killed++; /* in pass 1 */
        cr_assert_eq(run(NULL, "o", NULL), 0, "resume after a kill at step %d: %s", k, err_text());
        cr_assert_eq(lwqt_sh("diff -r %s %s >/dev/null", lwqt_path("ref"), lwqt_path("o")), 0,
                     "a kill at step %d, then the same command: the output differs", k);
    }
    cr_assert_geq(killed, 3, "only %d kills landed in pass 1", killed);
}

/* an edited lm_head cost in a scores file is refused by the check, naming the lm_head record */
Test(autoq_head, an_edited_lm_head_cost_in_the_scores_is_refused)
{
    make_moe("");
    write_recipe("12", HEAD_SPACE);
    cr_assert_eq(run(NULL, "a", NULL), 0, "%s", err_text());
    const char *sc = lwqt_path("a.layerwise_resume/auto_quantize/scores.json");
    char *s = lwqt_slurp(sc);
    char *p = strstr(s, "\"head\":");
    p = p ? strstr(p, "\"bytes\":\t65544") : NULL;
    cr_assert(p, "%s", s);
    memcpy(p, "\"bytes\":\t16544", 14);
    lwqt_write_str("edited.json", s);
    free(s);
    lwqt_sh("rm -f %s", lwqt_path("stderr.txt"));
    char extra[600];
    snprintf(extra, sizeof extra, "--auto-quantize-bits 12 --auto-quantize-scores %s", lwqt_path("edited.json"));
    cr_assert_neq(run(NULL, "b", extra), 0);
    cr_assert(strstr(err_text(), "the lm_head record: its candidates or their bytes differ"), "%s", err_text());
}

/* NVFP4 W4A4 offered to lm_head: refused before anything is written, naming lm_head and the space */
Test(autoq_head, an_nvfp4_candidate_on_lm_head_is_refused)
{
    make_moe("");
    write_recipe("12", "    - module_name_patterns: ['*lm_head*']\n"
                        "      candidate_formats: [{$import: nvfp4}, {$import: fp8}]\n");
    cr_assert_neq(run(NULL, "a", NULL), 0);
    cr_assert(strstr(err_text(), "lm_head: module_search_spaces[0] (line "), "%s", err_text());
    cr_assert(strstr(err_text(), "offers it nvfp4 (W4A4)"), "%s", err_text());
    cr_assert_neq(access(lwqt_path("a"), F_OK), 0, "an output was written");
}

/* a checkpoint whose lm_head is the tied embedding: refused naming lm_head, nothing written */
Test(autoq_head, a_tied_lm_head_is_refused)
{
    make_moe("--tie");
    write_recipe("12", HEAD_SPACE);
    cr_assert_neq(run(NULL, "a", NULL), 0);
    cr_assert(strstr(err_text(), "lm_head: module_search_spaces[0] (line ") &&
              strstr(err_text(), "the checkpoint has no lm_head.weight (tie_word_embeddings)"), "%s", err_text());
    cr_assert_neq(access(lwqt_path("a"), F_OK), 0, "an output was written");
}

/* two spaces matching lm_head: refused naming both */
Test(autoq_head, two_spaces_matching_lm_head_are_refused)
{
    make_moe("");
    write_recipe("12", HEAD_SPACE "    - module_name_patterns: ['lm_h*']\n"
                                   "      candidate_formats: [{$import: fp8}]\n");
    cr_assert_neq(run(NULL, "a", NULL), 0);
    cr_assert(strstr(err_text(), "lm_head: module_search_spaces[0] (line ") && strstr(err_text(), "both match it"), "%s",
              err_text());
}

/* lwq eval does not emulate a quantized lm_head: the searched output is refused naming lm_head.weight */
Test(autoq_head, lwq_eval_refuses_the_output_naming_lm_head)
{
    make_moe("");
    write_recipe("12", HEAD_SPACE);
    cr_assert_eq(run(NULL, "a", NULL), 0, "%s", err_text());
    lwqt_sh("rm -f %s", lwqt_path("stderr.txt"));
    cr_assert_eq(lwqt_sh("%s eval %s %s --data-size 2 --data-seq 16 --quiet 2>>%s", lwqt_bin(), lwqt_path("m"),
                         lwqt_path("a"), lwqt_path("stderr.txt")), 2);
    cr_assert(strstr(err_text(), "lm_head.weight is quantized; a quantized lm_head outside the decoder layers is not "
                                 "emulated"), "%s", err_text());
}

/* a fixed quantize baseline whose spaces leave lm_head out: lm_head keeps the baseline's weight-only NVFP4 as
 * its one choice, a group inside the budget (Model Optimizer resolves an unmatched group with the baseline) */
Test(autoq_head, a_baseline_fixes_lm_head_at_its_format_inside_the_budget)
{
    make_moe("");
    lwqt_write_str("aq.yaml",
                   "imports:\n"
                   "  fp8: configs/ptq/presets/model/fp8\n"
                   "  w4a16_nvfp4: configs/ptq/presets/model/w4a16_nvfp4\n"
                   "metadata:\n"
                   "  recipe_type: auto_quantize\n"
                   "quantize:\n"
                   "  algorithm: max\n"
                   "  quant_cfg:\n"
                   "    - {quantizer_name: '*', enable: false}\n"
                   "    - {quantizer_name: '*mlp.experts*weight_quantizer*', cfg: {num_bits: e2m1, block_sizes: "
                   "{-1: 16, type: dynamic, scale_bits: e4m3}}}\n"
                   "    - {quantizer_name: '*lm_head*weight_quantizer', cfg: {num_bits: e2m1, block_sizes: "
                   "{-1: 16, type: dynamic, scale_bits: e4m3}}}\n"
                   "auto_quantize:\n"
                   "  constraints:\n"
                   "    effective_bits: 12\n"
                   "  module_search_spaces:\n"
                   "    - module_name_patterns: ['*self_attn*']\n"
                   "      candidate_formats: [{$import: w4a16_nvfp4}, {$import: fp8}]\n"
                   "      allow_no_quant: false\n"
                   "  score_size: 2\n");
    cr_assert_eq(run(NULL, "a", NULL), 0, "%s", err_text());
    cJSON *root = lwqt_json(lwqt_path("a/auto_quantize.json"));
    cJSON *g = head_group(root);
    const cJSON *c = cJSON_GetObjectItem(g, "candidates");
    cr_assert_eq(cJSON_GetArraySize(c), 1);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "w4a16_nvfp4"), "bytes")->valuedouble, 512.0 * 128 * 9 / 16 + 4);
    cr_assert_str_eq(cJSON_GetObjectItem(g, "format")->valuestring, "w4a16_nvfp4");
    double pred = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "predicted"), "bits_per_weight")->valuedouble;
    double wrote = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "written"), "bits_per_weight")->valuedouble;
    cJSON_Delete(root);
    cr_assert_eq(pred, wrote, "predicted %.6f, written %.6f (lm_head counted in both)", pred, wrote);
    lwq_ckpt ck;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_path("a"), &ck, &e), 0, "%s", e.msg);
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&ck, "lm_head.weight");
    cr_assert(t && t->dtype == LWQ_U8, "lm_head.weight is not NVFP4-packed");
    lwq_ckpt_free(&ck);
}
