/* lwq quantize --recipe on a Model Optimizer auto_quantize recipe: the same search, and bytes, as its --auto-quantize-* options; what lwq lacks is refused by name. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/run.h"

TestSuite(autoq_recipe, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 600);

#define QARGS "--calib-size 6 --calib-seq 24 --batch-size 4 --quiet"

/* Model Optimizer 0.47's huggingface/qwen3_6_moe/auto_quantize/w4a16_nvfp4_fp8_at_6p0bits-active_moe
 * (comments left out), with score_size as `size` */
static void write_recipe(const char *rel, const char *size, const char *extra)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "# modelopt-schema: modelopt.recipe.config.ModelOptAutoQuantizeRecipe\n"
             "imports:\n"
             "  base_disabled_layers: configs/auto_quantize/units/base_disabled_layers\n"
             "  base_cost_excluded_layers: configs/auto_quantize/units/base_cost_excluded_layers\n"
             "  fp8: configs/ptq/presets/model/fp8\n"
             "  w4a16_nvfp4: configs/ptq/presets/model/w4a16_nvfp4\n"
             "metadata:\n"
             "  recipe_type: auto_quantize\n"
             "  description: >-\n"
             "    Qwen3.6 MoE: FP8 + NVFP4-weight-only per-layer search at 6.0 effective bits.\n"
             "auto_quantize:\n"
             "  constraints:\n"
             "    effective_bits: 6.0\n"
             "    cost_model: active_moe\n"
             "    cost:\n"
             "      active_moe_expert_ratio: 0.03125\n"
             "  candidate_formats:\n"
             "    - $import: fp8\n"
             "    - $import: w4a16_nvfp4\n"
             "  auto_quantize_method: gradient\n"
             "  score_size: %s\n"
             "  disabled_layers:\n"
             "    - $import: base_disabled_layers\n"
             "    - \"*shared_expert_gate*\"\n"
             "  cost_excluded_layers:\n"
             "    - $import: base_cost_excluded_layers\n%s",
             size, extra);
    lwqt_write_str(rel, buf);
}

static void make_moe(void)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s --arch qwen3_moe --experts 4 --top-k 2 --hidden 128 --layers 3 --heads 4 "
                         "--kv-heads 2 --vocab 512 --quiet", lwqt_bin(), lwqt_path("m")), 0);
}

static int run(const char *out, const char *extra)
{
    return lwqt_sh("%s quantize %s -o %s " QARGS " %s 2>%s", lwqt_bin(), lwqt_path("m"), lwqt_path(out), extra,
                   lwqt_path("stderr.txt"));
}

/* the recipe is --qformat fp8 --auto-quantize-bits 6 --auto-quantize-formats fp8,w4a16_nvfp4,none with
 * the active_moe cost model at 0.03125 and its score size: the same output, byte for byte */
Test(autoq_recipe, the_recipe_runs_as_its_options)
{
    make_moe();
    write_recipe("aq.yaml", "1", "");
    char extra[1024];
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("aq.yaml"));
    cr_assert_eq(run("a", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(run("b", "--qformat fp8 --auto-quantize-bits 6 --auto-quantize-formats fp8,w4a16_nvfp4,none "
                          "--auto-quantize-cost-model active_moe --auto-quantize-active-moe-ratio 0.03125 "
                          "--auto-quantize-score-size 1"), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(lwqt_sh("diff -r %s %s >/dev/null", lwqt_path("a"), lwqt_path("b")), 0);
    cr_assert_eq(lwqt_sh("test -s %s", lwqt_path("a/auto_quantize.json")), 0, "no search ran");
}

/* An auto_quantize recipe with module_search_spaces (cost_model weight, top-level candidates nvfp4); `spaces`
 * is its module_search_spaces list */
static void write_spaces(const char *rel, const char *bits, const char *spaces)
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
             "    - $import: nvfp4\n"
             "  module_search_spaces:\n%s"
             "  score_size: 1\n",
             bits, spaces);
    lwqt_write_str(rel, buf);
}

/* the candidates each group of a/auto_quantize.json was given, as "nvfp4,none" (its "candidates" keys),
 * and the format chosen; cr_asserts that group i exists */
static void group_of(const cJSON *root, int i, char *kind, char *cands, const char **chosen)
{
    const cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "groups"), i);
    cr_assert(g, "group %d missing", i);
    snprintf(kind, 32, "%s", cJSON_GetObjectItem(g, "group")->valuestring);
    cands[0] = 0;
    for (const cJSON *c = cJSON_GetObjectItem(g, "candidates")->child; c; c = c->next)
        snprintf(cands + strlen(cands), 64 - strlen(cands), "%s%s", cands[0] ? "," : "", c->string);
    *chosen = cJSON_GetObjectItem(g, "format")->valuestring;
}

/* Model Optimizer's module_search_spaces: the attention groups a space matches take its candidates (fp8
 * alone: allow_no_quant false), every other group the top-level nvfp4 and none */
Test(autoq_recipe, a_space_gives_the_groups_it_matches_its_candidates)
{
    make_moe();
    write_spaces("aq.yaml", "8.0", "    - module_name_patterns: ['*self_attn*']\n"
                                   "      candidate_formats: [{$import: fp8}]\n"
                                   "      allow_no_quant: false\n");
    char extra[1024];
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("aq.yaml"));
    cr_assert_eq(run("a", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *root = lwqt_json(lwqt_path("a/auto_quantize.json"));
    cr_assert(root);
    int n = cJSON_GetArraySize(cJSON_GetObjectItem(root, "groups")), attn = 0;
    cr_assert_gt(n, 3);
    for (int i = 0; i < n; i++) {
        char kind[32], cands[64];
        const char *chosen;
        group_of(root, i, kind, cands, &chosen);
        int is_attn = !strcmp(kind, "qkv") || !strcmp(kind, "o");
        attn += is_attn;
        cr_assert_str_eq(cands, is_attn ? "fp8" : "none,nvfp4", "group %d (%s)", i, kind);
        if (is_attn)
            cr_assert_str_eq(chosen, "fp8", "group %d (%s)", i, kind);
    }
    cr_assert_eq(attn, 6, "3 layers' qkv and o groups");
    cJSON_Delete(root);
}

/* allow_no_quant left out is Model Optimizer's default, true: the space's groups may stay unquantized */
Test(autoq_recipe, allow_no_quant_defaults_to_true)
{
    make_moe();
    write_spaces("aq.yaml", "8.0", "    - module_name_patterns: ['*self_attn*']\n"
                                   "      candidate_formats: [{$import: fp8}]\n");
    char extra[1024];
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("aq.yaml"));
    cr_assert_eq(run("a", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *root = lwqt_json(lwqt_path("a/auto_quantize.json"));
    cr_assert(root);
    char kind[32], cands[64];
    const char *chosen;
    group_of(root, 0, kind, cands, &chosen);
    cr_assert_str_eq(kind, "qkv");
    cr_assert_str_eq(cands, "none,fp8");
    cJSON_Delete(root);
}

/* a space that matches q_proj but not k_proj / v_proj (one group, one format) is refused naming the group,
 * as Model Optimizer refuses a rule that partially matches a group */
Test(autoq_recipe, a_space_matching_part_of_a_group_is_refused)
{
    make_moe();
    write_spaces("aq.yaml", "8.0", "    - module_name_patterns: ['*q_proj']\n"
                                   "      candidate_formats: [{$import: fp8}]\n");
    char extra[1024];
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("aq.yaml"));
    cr_assert_neq(run("a", extra), 0);
    char *err = lwqt_slurp(lwqt_path("stderr.txt"));
    cr_assert(strstr(err, "layer 0: module_search_spaces[0] matches part of the qkv group"), "%s", err);
    free(err);
    cr_assert_neq(lwqt_sh("test -e %s", lwqt_path("a")), 0, "an output was written");
}

/* An auto_quantize recipe with a fixed quantize baseline (its quant_cfg entries: `cfg`, NVFP4 and FP8 attributes
 * inline) and one space over attention with the qwen3_6_moe recipe's candidates, active_moe */
static void write_baseline(const char *rel, const char *cfg)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "imports:\n"
             "  fp8: configs/ptq/presets/model/fp8\n"
             "  w4a16_nvfp4: configs/ptq/presets/model/w4a16_nvfp4\n"
             "metadata:\n"
             "  recipe_type: auto_quantize\n"
             "quantize:\n"
             "  algorithm: {method: max, layerwise: {enable: false}}\n"
             "  quant_cfg:\n"
             "    - {quantizer_name: '*', enable: false}\n%s"
             "auto_quantize:\n"
             "  constraints:\n"
             "    effective_bits: 7.0\n"
             "    cost_model: active_moe\n"
             "  module_search_spaces:\n"
             "    - module_name_patterns: ['*self_attn*']\n"
             "      candidate_formats: [{$import: w4a16_nvfp4}, {$import: fp8}]\n"
             "      allow_no_quant: false\n"
             "  score_size: 1\n",
             cfg);
    lwqt_write_str(rel, buf);
}

#define NV "{num_bits: e2m1, block_sizes: {-1: 16, type: dynamic, scale_bits: e4m3}}"
#define F8 "{num_bits: e4m3, axis: null}"

/* Model Optimizer's fixed baseline ("Unmatched modules retain that fixed baseline"): the routed experts, which
 * no space matches, keep its W4A16 as their one choice (a group the solver cannot change, its bytes in the
 * budget at the expert weight), attention is searched over the space's candidates */
Test(autoq_recipe, a_baseline_fixes_the_groups_no_space_matches)
{
    make_moe();
    write_baseline("aq.yaml", "    - {quantizer_name: '*mlp.experts*weight_quantizer*', cfg: " NV "}\n");
    char extra[1024];
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("aq.yaml"));
    cr_assert_eq(run("a", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *root = lwqt_json(lwqt_path("a/auto_quantize.json"));
    cr_assert(root);
    int n = cJSON_GetArraySize(cJSON_GetObjectItem(root, "groups")), experts = 0;
    for (int i = 0; i < n; i++) {
        char kind[32], cands[64];
        const char *chosen;
        group_of(root, i, kind, cands, &chosen);
        if (!strcmp(kind, "experts")) {
            experts++;
            cr_assert_str_eq(cands, "w4a16_nvfp4", "group %d", i);
            cr_assert_str_eq(chosen, "w4a16_nvfp4", "group %d", i);
        } else if (!strcmp(kind, "lm_head")) { /* the baseline leaves it unquantized: none, its one choice */
            cr_assert_eq(i, n - 1, "lm_head's group is the last");
            cr_assert_str_eq(cands, "none");
            cr_assert_str_eq(chosen, "none");
        } else {
            cr_assert_str_eq(cands, "fp8,w4a16_nvfp4", "group %d (%s)", i, kind);
        }
    }
    cr_assert_eq(experts, 3, "one experts group a layer");
    cJSON_Delete(root);
    char *q = lwqt_slurp(lwqt_path("a/hf_quant_config.json"));
    for (int L = 0; L < 3; L++) {
        char want[128];
        snprintf(want, sizeof want, "\"model.layers.%d.mlp.experts\":\t{\n\t\t\t\t\"quant_algo\":\t\"W4A16_NVFP4\"", L);
        cr_assert(strstr(q, want), "layer %d's experts: %s", L, q);
    }
    free(q);
}

/* Model Optimizer costs the baseline at its cheapest format (estimate_quant_compression) and refuses unmatched
 * modules it gives another (_resolve_fixed_group_recipe): FP8 experts beside NVFP4 attention */
Test(autoq_recipe, a_baseline_unmatched_format_other_than_its_cheapest_is_refused)
{
    make_moe();
    write_baseline("aq.yaml", "    - {quantizer_name: '*mlp.experts*weight_quantizer*', cfg: " F8 "}\n"
                              "    - {quantizer_name: '*mlp.experts*input_quantizer*', cfg: " F8 "}\n"
                              "    - {quantizer_name: '*self_attn*weight_quantizer', cfg: " NV "}\n");
    char extra[1024];
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("aq.yaml"));
    cr_assert_neq(run("a", extra), 0);
    char *err = lwqt_slurp(lwqt_path("stderr.txt"));
    cr_assert(strstr(err, "layer 0: the fixed quantize baseline gives the experts group (model.layers.0.mlp.experts.0."),
              "%s", err);
    cr_assert(strstr(err, "fp8 at 8 effective bits, but the baseline's cost is its cheapest format's, 4.5"), "%s", err);
    free(err);
    cr_assert_neq(lwqt_sh("test -e %s", lwqt_path("a")), 0, "an output was written");
}

/* a group no space matches whose members the baseline gives two formats is refused naming both, as Model
 * Optimizer refuses incompatible formats in one runtime group */
Test(autoq_recipe, a_group_the_baseline_splits_is_refused)
{
    make_moe();
    write_baseline("aq.yaml", "    - {quantizer_name: '*mlp.experts*weight_quantizer*', cfg: " NV "}\n");
    /* the space over experts instead, attention (q/k/v one group) left to a baseline that splits it */
    char *t = lwqt_slurp(lwqt_path("aq.yaml"));
    char *at = strstr(t, "'*self_attn*'");
    cr_assert(at);
    memcpy(at, "'*mlp.exp*'  ", 13);
    lwqt_write_str("aq2.yaml", t);
    free(t);
    t = lwqt_slurp(lwqt_path("aq2.yaml"));
    char buf[4096];
    const char *cut = strstr(t, "auto_quantize:\n");
    snprintf(buf, sizeof buf, "%.*s    - {quantizer_name: '*q_proj.weight_quantizer', cfg: " F8 "}\n"
             "    - {quantizer_name: '*q_proj.input_quantizer', cfg: " F8 "}\n"
             "    - {quantizer_name: '*[kv]_proj.weight_quantizer', cfg: " NV "}\n%s", (int)(cut - t), t, cut);
    free(t);
    lwqt_write_str("aq2.yaml", buf);
    char extra[1024];
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("aq2.yaml"));
    cr_assert_neq(run("a", extra), 0);
    char *err = lwqt_slurp(lwqt_path("stderr.txt"));
    cr_assert(strstr(err, "layer 0: the fixed quantize baseline gives the qkv group two formats "
                          "(model.layers.0.self_attn.q_proj fp8, model.layers.0.self_attn.k_proj w4a16_nvfp4)"), "%s", err);
    free(err);
}

/* lwq plan does not run the search: the recipe is refused there rather than planned as its base */
Test(autoq_recipe, plan_refuses_it)
{
    make_moe();
    write_recipe("aq.yaml", "1", "");
    cr_assert_neq(lwqt_sh("%s plan %s --recipe %s 2>%s", lwqt_bin(), lwqt_path("m"), lwqt_path("aq.yaml"),
                          lwqt_path("stderr.txt")), 0);
    char *err = lwqt_slurp(lwqt_path("stderr.txt"));
    cr_assert(strstr(err, "lwq plan does not run the auto-quantize search"), "%s", err);
    free(err);
}
