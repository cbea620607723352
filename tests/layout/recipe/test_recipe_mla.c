/* Presets on DeepSeek (MLA) layer plans: the published NVIDIA NVFP4 DeepSeek-V3.1 quantizes
 * o_proj, the dense and shared MLPs and the routed experts and keeps every MLA q/kv projection,
 * the routers and lm_head in BF16; Kimi-K2.6 (nvfp4_experts_only) quantizes routed experts only.
 * The selector is the architecture's "MLA projection" fact, so llama's q_proj is unaffected. */
#include <criterion/criterion.h>
#include <string.h>

#include "layout/arch/arch.h"
#include "layout/recipe/recipe.h"

#define V3 "{\"model_type\":\"deepseek_v3\",\"hidden_size\":64,\"num_hidden_layers\":2," \
           "\"num_attention_heads\":2,\"vocab_size\":10,\"intermediate_size\":96,"        \
           "\"n_routed_experts\":4,\"n_shared_experts\":1,\"num_experts_per_tok\":2,"       \
           "\"moe_intermediate_size\":32,\"kv_lora_rank\":16,\"qk_nope_head_dim\":16,"      \
           "\"qk_rope_head_dim\":16,\"v_head_dim\":16,\"first_k_dense_replace\":1"

static lwq_qformat fmt(const char *preset, const char *cfg_json, int layer, const char *module)
{
    lwq_model_config c;
    lwq_recipe r;
    lwq_arch_layer p;
    lwq_error e = {0};
    cr_assert_eq(lwq_config_parse("config.json", cfg_json, &c, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_preset(preset, &r, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_arch_layer_plan(&c, layer, &p, &e), 0, "%s", e.msg);
    const lwq_arch_linear *l = lwq_arch_find_linear(&p, module);
    cr_assert_not_null(l, "%s not in the plan", module);
    lwq_quant_choice ch = lwq_recipe_resolve_module(
        &r, module, lwq_arch_is_mla_projection(&p, l) ? LWQ_MODULE_MLA_PROJ : 0);
    lwq_arch_layer_free(&p);
    lwq_recipe_free(&r);
    lwq_config_free(&c);
    return ch.format;
}

Test(recipe_mla, nvfp4_matches_published_deepseek_v31)
{
    const char *q = V3 ",\"q_lora_rank\":32}";
    const char *none[] = {"self_attn.q_a_proj", "self_attn.q_b_proj",
                          "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj", "mlp.gate"};
    const char *fp4[] = {"self_attn.o_proj", "mlp.experts.3.down_proj",
                         "mlp.shared_experts.gate_proj", "mlp.shared_experts.down_proj"};
    char m[128];
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        snprintf(m, sizeof m, "model.layers.1.%s", none[i]);
        cr_assert_eq(fmt("nvfp4", q, 1, m), LWQ_QFMT_NONE, "%s", m);
    }
    for (size_t i = 0; i < sizeof fp4 / sizeof fp4[0]; i++) {
        snprintf(m, sizeof m, "model.layers.1.%s", fp4[i]);
        cr_assert_eq(fmt("nvfp4", q, 1, m), LWQ_QFMT_NVFP4, "%s", m);
    }
    cr_assert_eq(fmt("nvfp4", q, 0, "model.layers.0.mlp.down_proj"), LWQ_QFMT_NVFP4);
    /* V2-style q_proj path: an MLA projection too */
    cr_assert_eq(fmt("nvfp4", V3 "}", 1, "model.layers.1.self_attn.q_proj"), LWQ_QFMT_NONE);
}

Test(recipe_mla, experts_only_matches_published_kimi_k26)
{
    const char *q = V3 ",\"q_lora_rank\":32}";
    cr_assert_eq(fmt("nvfp4_experts_only", q, 1, "model.layers.1.mlp.experts.0.up_proj"),
                 LWQ_QFMT_NVFP4);
    cr_assert_eq(fmt("nvfp4_experts_only", q, 1, "model.layers.1.mlp.shared_experts.up_proj"),
                 LWQ_QFMT_NONE);
    cr_assert_eq(fmt("nvfp4_experts_only", q, 1, "model.layers.1.self_attn.o_proj"),
                 LWQ_QFMT_NONE);
    cr_assert_eq(fmt("nvfp4_experts_only", q, 0, "model.layers.0.mlp.up_proj"), LWQ_QFMT_NONE);
}

Test(recipe_mla, llama_q_proj_is_not_an_mla_projection)
{
    const char *llama = "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":1,"
                        "\"num_attention_heads\":2,\"vocab_size\":10,\"intermediate_size\":96}";
    cr_assert_eq(fmt("nvfp4", llama, 0, "model.layers.0.self_attn.q_proj"), LWQ_QFMT_NVFP4);
}

Test(recipe_mla, selector_parses_round_trips_and_rejects_non_bool)
{
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_parse("r.json", "{\"rules\":[{\"match\":\"*\",\"format\":\"fp8\"},"
                                            "{\"match\":\"*\",\"mla_projection\":false,"
                                            "\"enable\":false}]}", &r, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_recipe_resolve_module(&r, "x", LWQ_MODULE_MLA_PROJ).format, LWQ_QFMT_FP8);
    cr_assert_eq(lwq_recipe_resolve_module(&r, "x", 0).format, LWQ_QFMT_NONE);
    char *js = lwq_recipe_to_json(&r);
    cr_assert(strstr(js, "\"mla_projection\":\tfalse"), "%s", js);
    lwq_recipe r2;
    cr_assert_eq(lwq_recipe_parse("again", js, &r2, &e), 0, "%s", e.msg);
    cr_assert_eq(r2.rules[1].has_mla, 1);
    cr_assert_eq(r2.rules[1].mla, 0);
    free(js);
    lwq_recipe_free(&r2);
    lwq_recipe_free(&r);
    cr_assert_eq(lwq_recipe_parse("bad.json", "{\"rules\":[{\"match\":\"*\",\"mla_projection\":"
                                              "\"yes\"}]}", &r, &e), LWQ_EFORMAT);
    cr_assert(strstr(e.msg, "bad.json: rules[0].mla_projection must be true or false"), "%s",
              e.msg);
}
