/* tests/layout/recipe/test_recipe.c — recipes: glob matching, presets, rule order, JSON round trip,
 * errors. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "layout/recipe/recipe.h"

Test(recipe, glob_basics)
{
    cr_assert(lwq_glob_match("*", "model.layers.0.mlp.gate"));
    cr_assert(lwq_glob_match("*.mlp.gate", "model.layers.0.mlp.gate"));
    cr_assert_not(lwq_glob_match("*.mlp.gate", "model.layers.0.mlp.gate_proj"));
    cr_assert(lwq_glob_match("model.layers.?.self_attn*", "model.layers.3.self_attn.q_proj"));
    cr_assert_not(lwq_glob_match("model.layers.?.self_attn*", "model.layers.13.self_attn.q_proj"));
    cr_assert(lwq_glob_match("*experts.*.up_proj", "model.layers.1.mlp.experts.17.up_proj"));
    cr_assert(lwq_glob_match("", "") && !lwq_glob_match("", "a") && lwq_glob_match("**", ""));
}

Test(recipe, glob_pathological_is_fast)
{
    /* exponential for naive recursive matchers; must finish at once here */
    char name[4001], pat[200];
    memset(name, 'a', 4000);
    name[4000] = 0;
    int k = 0;
    for (int i = 0; i < 60; i++) {
        pat[k++] = '*';
        pat[k++] = 'a';
    }
    pat[k++] = 'b';
    pat[k] = 0;
    cr_assert_not(lwq_glob_match(pat, name));
}

Test(recipe, preset_nvfp4_skips_routers)
{
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_preset("nvfp4", &r, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.self_attn.q_proj").format, LWQ_QFMT_NVFP4);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.mlp.experts.3.down_proj").format, LWQ_QFMT_NVFP4);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.mlp.gate").format, LWQ_QFMT_NONE);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.block_sparse_moe.gate").format, LWQ_QFMT_NONE);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.mlp.gate_proj").format, LWQ_QFMT_NVFP4);
    lwq_recipe_free(&r);
}

/* Model Optimizer's default_disabled_quantizers keeps qwen3_next's linear_attn.conv1d and
 * in_proj_a* / in_proj_b* unquantized in its nvfp4 and fp8 presets; lwq's quantized in_proj_ba
 * (both) and conv1d (fp8) before the side-by-side comparison (issue 23). */
Test(recipe, presets_keep_the_deltanet_ba_projection_and_conv1d)
{
    const char *presets[] = {"nvfp4", "fp8"};
    for (int p = 0; p < 2; p++) {
        lwq_recipe r;
        lwq_error e = {0};
        cr_assert_eq(lwq_recipe_preset(presets[p], &r, &e), 0, "%s", e.msg);
        cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.linear_attn.in_proj_ba").format, LWQ_QFMT_NONE, "%s",
                     presets[p]);
        cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.linear_attn.conv1d").format, LWQ_QFMT_NONE, "%s",
                     presets[p]);
        cr_assert_neq(lwq_recipe_resolve(&r, "model.layers.0.linear_attn.in_proj_qkvz").format, LWQ_QFMT_NONE, "%s",
                      presets[p]);
        cr_assert_neq(lwq_recipe_resolve(&r, "model.layers.0.linear_attn.out_proj").format, LWQ_QFMT_NONE, "%s",
                      presets[p]);
        lwq_recipe_free(&r);
    }
}

Test(recipe, preset_experts_only)
{
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_preset("nvfp4_experts_only", &r, &e), 0);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.2.mlp.experts.0.gate_proj").format, LWQ_QFMT_NVFP4);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.2.block_sparse_moe.experts.1.w2").format, LWQ_QFMT_NVFP4);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.2.self_attn.q_proj").format, LWQ_QFMT_NONE);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.2.mlp.shared_expert.up_proj").format, LWQ_QFMT_NONE);
    lwq_recipe_free(&r);
}

Test(recipe, preset_mixed_sets_algorithms_per_rule)
{
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_preset("nvfp4_experts-fp8_attn", &r, &e), 0, "%s", e.msg);
    lwq_quant_choice a = lwq_recipe_resolve(&r, "model.layers.0.self_attn.o_proj");
    cr_assert(a.format == LWQ_QFMT_FP8 && a.algo == LWQ_ALGO_MAX && !a.fp8_scale_sweep);
    lwq_quant_choice x = lwq_recipe_resolve(&r, "model.layers.0.mlp.experts.7.up_proj");
    cr_assert(x.format == LWQ_QFMT_NVFP4 && x.algo == LWQ_ALGO_MSE && x.fp8_scale_sweep);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.mlp.gate").format, LWQ_QFMT_NONE);
    lwq_recipe_free(&r);
}

Test(recipe, later_rules_win)
{
    lwq_recipe r;
    lwq_error e = {0};
    const char *j = "{\"algorithm\":{\"method\":\"mse\"},\"rules\":["
                    "{\"match\":\"*\",\"format\":\"fp8\"},"
                    "{\"match\":\"*.layers.1.*\",\"enable\":false},"
                    "{\"match\":\"*.layers.1.self_attn.*\",\"enable\":true,\"algo\":\"max\"}]}";
    cr_assert_eq(lwq_recipe_parse("t.json", j, &r, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.mlp.up_proj").format, LWQ_QFMT_FP8);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.mlp.up_proj").algo, LWQ_ALGO_MSE);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.1.mlp.up_proj").format, LWQ_QFMT_NONE);
    lwq_quant_choice c = lwq_recipe_resolve(&r, "model.layers.1.self_attn.k_proj");
    cr_assert(c.format == LWQ_QFMT_FP8 && c.algo == LWQ_ALGO_MAX);
    lwq_recipe_free(&r);
}

Test(recipe, json_round_trip)
{
    lwq_recipe r, r2;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_preset("nvfp4_experts-fp8_attn", &r, &e), 0);
    char *s = lwq_recipe_to_json(&r);
    cr_assert_not_null(s);
    cr_assert_eq(lwq_recipe_parse("rt", s, &r2, &e), 0, "%s", e.msg);
    char *s2 = lwq_recipe_to_json(&r2);
    cr_assert_str_eq(s, s2);
    free(s);
    free(s2);
    lwq_recipe_free(&r);
    lwq_recipe_free(&r2);
}

Test(recipe, unknown_preset_lists_presets)
{
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_preset("int4", &r, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "int4") && strstr(e.msg, "nvfp4_experts_only"), "%s", e.msg);
}

Test(recipe, unsupported_algorithm_named)
{
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_parse("r.json", "{\"algorithm\":{\"method\":\"awq\"}}", &r, &e), LWQ_EUNSUPPORTED);
    cr_assert(strstr(e.msg, "awq") && strstr(e.msg, "not supported"), "%s", e.msg);
    lwq_error_clear(&e);
    cr_assert_eq(lwq_recipe_parse("r.json", "{\"rules\":[{\"match\":\"*\",\"algo\":\"smoothquant\"}]}", &r, &e),
                 LWQ_EUNSUPPORTED);
    cr_assert(strstr(e.msg, "rules[0].algo"), "%s", e.msg);
}

Test(recipe, gptq_method_rule_and_settings)
{
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_parse("r.json",
                                  "{\"algorithm\":{\"method\":\"gptq\",\"gptq_damp\":0.05,\"gptq_act_order\":true},"
                                  "\"rules\":[{\"match\":\"*\",\"format\":\"nvfp4\"},"
                                  "{\"match\":\"*.o_proj\",\"algo\":\"max\"}]}",
                                  &r, &e),
                 0, "%s", e.msg);
    cr_assert(lwq_recipe_uses_gptq(&r));
    lwq_quant_choice c = lwq_recipe_resolve(&r, "model.layers.0.self_attn.q_proj");
    cr_assert_eq(c.algo, LWQ_ALGO_GPTQ);
    cr_assert_eq(c.gptq_damp, 0.05);
    cr_assert_eq(c.gptq_act_order, 1);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.self_attn.o_proj").algo, LWQ_ALGO_MAX);
    /* the canonical JSON round-trips the GPTQ settings */
    char *j = lwq_recipe_to_json(&r);
    lwq_recipe r2;
    cr_assert_eq(lwq_recipe_parse("canon", j, &r2, &e), 0, "%s", e.msg);
    cr_assert_eq(r2.gptq_damp, 0.05);
    cr_assert_eq(r2.gptq_act_order, 1);
    free(j);
    lwq_recipe_free(&r2);
    lwq_recipe_free(&r);
    /* a per-rule gptq alone makes the recipe a GPTQ one, with the default dampening */
    cr_assert_eq(lwq_recipe_parse("r.json", "{\"rules\":[{\"match\":\"*.experts.*\",\"format\":\"fp8\",\"algo\":\"gptq\"}]}",
                                  &r, &e),
                 0, "%s", e.msg);
    cr_assert(lwq_recipe_uses_gptq(&r));
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.mlp.experts.3.up_proj").gptq_damp, 0.01);
    lwq_recipe_free(&r);
    /* recipes without gptq keep their canonical JSON (and so their run fingerprints) */
    cr_assert_eq(lwq_recipe_preset("nvfp4", &r, &e), 0);
    j = lwq_recipe_to_json(&r);
    cr_assert_null(strstr(j, "gptq"), "%s", j);
    free(j);
    lwq_recipe_free(&r);
    static const char *bad[] = {"{\"algorithm\":{\"gptq_damp\":0}}", "{\"algorithm\":{\"gptq_damp\":\"x\"}}",
                                "{\"algorithm\":{\"gptq_act_order\":1}}"};
    for (int i = 0; i < 3; i++) {
        lwq_error_clear(&e);
        cr_assert_eq(lwq_recipe_parse("r.json", bad[i], &r, &e), LWQ_EFORMAT, "%s", bad[i]);
        cr_assert(strstr(e.msg, "algorithm.gptq_"), "%s", e.msg);
    }
}

/* Model Optimizer's nvfp4_four_over_six: weights with the 256 normalisation, searched over x1.0 and
 * x1.5; a later format rule resets four_over_six, as a new cfg does there */
Test(recipe, four_over_six_preset_and_rules)
{
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_preset("nvfp4_four_over_six", &r, &e), 0, "%s", e.msg);
    lwq_quant_choice c = lwq_recipe_resolve(&r, "model.layers.0.mlp.down_proj");
    cr_assert(c.format == LWQ_QFMT_NVFP4 && c.four_over_six && !c.weight_only && c.algo == LWQ_ALGO_MSE &&
              c.mse_range == LWQ_MSE_RANGE_OWN);
    cr_assert_eq(lwq_recipe_resolve(&r, "model.layers.0.mlp.gate").format, LWQ_QFMT_NONE);
    char *j = lwq_recipe_to_json(&r);
    lwq_recipe b;
    cr_assert_eq(lwq_recipe_parse("canonical", j, &b, &e), 0, "%s", e.msg);
    c = lwq_recipe_resolve(&b, "model.layers.0.mlp.down_proj");
    cr_assert(c.four_over_six && c.mse_range == LWQ_MSE_RANGE_OWN, "the canonical JSON keeps it: %s", j);
    free(j);
    lwq_recipe_free(&b);
    lwq_recipe_free(&r);
    cr_assert_eq(lwq_recipe_parse("r.json", "{\"rules\":[{\"match\":\"*\",\"format\":\"nvfp4\",\"four_over_six\":true},"
                                              "{\"match\":\"*.o_proj\",\"format\":\"nvfp4\"}]}", &r, &e), 0, "%s", e.msg);
    cr_assert(lwq_recipe_resolve(&r, "model.layers.0.self_attn.q_proj").four_over_six);
    cr_assert(!lwq_recipe_resolve(&r, "model.layers.0.self_attn.o_proj").four_over_six);
    lwq_recipe_free(&r);
}

Test(recipe, bad_recipes_name_the_key)
{
    static const struct {
        const char *json, *want;
    } cases[] = {
        {"[1]", "JSON object"},
        {"{\"rules\":[{\"format\":\"nvfp4\"}]}", "rules[0] has no \"match\""},
        {"{\"rules\":[{\"match\":\"*\",\"format\":\"int8\"}]}", "rules[0].format"},
        {"{\"rules\":[{\"match\":\"*\",\"enable\":1}]}", "rules[0].enable"},
        {"{\"rules\":[{\"match\":\"*\",\"colour\":1}]}", "unknown key \"colour\""},
        {"{\"kv_cache\":\"int8\"}", "kv_cache"},
        {"{\"rules\":", "invalid JSON"},
        {"{\"extra\":1}", "unknown key \"extra\""},
        {"{\"rules\":[{\"match\":\"*\",\"quantizer\":\"input\",\"four_over_six\":true}]}", "four_over_six concerns"},
        {"{\"algorithm\":{\"method\":\"mse\",\"mse_multipliers\":[0.5,2.0,0.01]}}", "mse_multipliers must be"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lwq_recipe r;
        lwq_error e = {0};
        cr_assert_lt(lwq_recipe_parse("r.json", cases[i].json, &r, &e), 0, "case %zu", i);
        cr_assert(strstr(e.msg, cases[i].want) && strstr(e.msg, "r.json"), "case %zu: %s", i, e.msg);
    }
}

/* an lwq recipe rule that quantizes the embedding table: refused naming the rule (lwq keeps it) */
Test(recipe, a_rule_quantizing_the_embedding_is_refused)
{
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_parse("t.json", "{\"rules\":[{\"match\":\"*embed_tokens*\",\"format\":\"fp8\"}]}", &r, &e),
                 LWQ_EUNSUPPORTED);
    cr_assert(strstr(e.msg, "t.json: rule 0 ('*embed_tokens*') quantizes an embedding's weight (fp8)"), "%s", e.msg);
}
