/* kimi_linear's config.json as lwq reads it: layer kinds, KDA geometry, and each refusal by name. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "layout/arch.h"
#include "layout/config.h"

/* A 3-layer kimi_linear config as transformers 5.23 writes it, with `extra` keys spliced in
 * (they win over the ones before: cJSON keeps the first, so extra goes first). */
static int parse(const char *extra, lwq_model_config *c, lwq_error *e)
{
    char json[4096];
    snprintf(json, sizeof json,
             "{%s\"model_type\":\"kimi_linear\",\"hidden_size\":32,\"num_hidden_layers\":3,"
             "\"num_attention_heads\":4,\"num_key_value_heads\":4,\"vocab_size\":64,\"intermediate_size\":32,"
             "\"moe_intermediate_size\":16,\"num_experts\":8,\"num_experts_per_token\":2,\"num_shared_experts\":1,"
             "\"num_expert_group\":2,\"topk_group\":1,\"moe_renormalize\":true,\"routed_scaling_factor\":2.5,"
             "\"q_lora_rank\":null,\"kv_lora_rank\":16,\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":16,"
             "\"v_head_dim\":16,\"linear_head_dim\":16,\"linear_num_heads\":2,\"linear_conv_kernel_dim\":4,"
             "\"layer_types\":[\"linear_attention\",\"full_attention\",\"linear_attention\"],"
             "\"mlp_layer_types\":[\"dense\",\"sparse\",\"sparse\"],\"dtype\":\"float32\"}",
             extra);
    return lwq_config_parse("x/config.json", json, c, e);
}

/* The parse fails with LWQ_EUNSUPPORTED or LWQ_EFORMAT and its message holds every needle. */
static void refused(const char *extra, const char *n1, const char *n2)
{
    lwq_model_config c;
    lwq_error e = {0};
    int rc = parse(extra, &c, &e);
    cr_assert(rc == LWQ_EUNSUPPORTED || rc == LWQ_EFORMAT, "accepted %s (rc %d)", extra, rc);
    cr_assert(strstr(e.msg, n1) && (!n2 || strstr(e.msg, n2)), "message does not name %s / %s: %s", n1,
              n2 ? n2 : "-", e.msg);
    cr_assert(strstr(e.msg, "x/config.json"), "message does not name the file: %s", e.msg);
}

Test(config_kimi, layers_alternate_kda_and_mla_with_dense_first)
{
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(parse("", &c, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_config_layer_mixer(&c, 0), LWQ_MIXER_KDA);
    cr_assert_eq(lwq_config_layer_mixer(&c, 1), LWQ_MIXER_MLA);
    cr_assert(!lwq_config_layer_is_moe(&c, 0) && lwq_config_layer_is_moe(&c, 1) && lwq_config_layer_is_moe(&c, 2));
    cr_assert(c.num_experts == 8 && c.num_experts_per_tok == 2 && c.n_group == 2 && c.n_shared_experts == 1);
    cr_assert(c.linear_num_key_heads == 2 && c.linear_key_head_dim == 16 && c.linear_conv_kernel_dim == 4);
    lwq_config_free(&c);
}

Test(config_kimi, linear_attn_config_geometry_wins_over_linear_keys)
{
    lwq_model_config c;
    lwq_error e = {0};
    /* no layer_types: the published linear_attn_config with 1-based lists wins over linear_* */
    cr_assert_eq(parse("\"linear_attn_config\":{\"head_dim\":16,\"num_heads\":2,\"short_conv_kernel_size\":4,"
                       "\"kda_layers\":[1,2],\"full_attn_layers\":[3]},\"linear_head_dim\":64,",
                       &c, &e),
                 0, "%s", e.msg);
    /* layer_types (in the base config) still wins over the lists */
    cr_assert_eq(lwq_config_layer_mixer(&c, 1), LWQ_MIXER_MLA);
    cr_assert_eq(c.linear_key_head_dim, 16, "linear_attn_config.head_dim overrides linear_head_dim");
    lwq_config_free(&c);
}

Test(config_kimi, plan_names_transformers_modules)
{
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(parse("", &c, &e), 0, "%s", e.msg);
    lwq_arch_layer p;
    cr_assert_eq(lwq_arch_layer_plan(&c, 0, &p, &e), 0, "%s", e.msg);
    const lwq_arch_linear *fa = lwq_arch_find_linear(&p, "model.layers.0.self_attn.forget_gate.f_a_proj");
    const lwq_arch_linear *q = lwq_arch_find_linear(&p, "model.layers.0.self_attn.q_proj");
    const lwq_arch_linear *fb = lwq_arch_find_linear(&p, "model.layers.0.self_attn.forget_gate.f_b_proj");
    cr_assert(fa && q && fb && fa->group == q->group && fa->group >= 0 && fb->group == -1,
              "the layer input's projections are one fused group, f_b_proj alone");
    cr_assert_not_null(lwq_arch_find_tensor(&p, "model.layers.0.self_attn.q_conv1d.weight"));
    cr_assert_not_null(lwq_arch_find_linear(&p, "model.layers.0.mlp.gate_proj"), "layer 0 is dense");
    lwq_arch_layer_free(&p);
    cr_assert_eq(lwq_arch_layer_plan(&c, 1, &p, &e), 0, "%s", e.msg);
    const lwq_arch_linear *r = lwq_arch_find_linear(&p, "model.layers.1.mlp.gate");
    cr_assert(r && r->is_router, "the router is mlp.gate and never quantized");
    cr_assert_not_null(lwq_arch_find_linear(&p, "model.layers.1.mlp.experts.7.down_proj"));
    cr_assert_not_null(lwq_arch_find_linear(&p, "model.layers.1.mlp.shared_experts.up_proj"));
    lwq_arch_layer_free(&p);
    lwq_config_free(&c);
}

Test(config_kimi, refuses_rope_on_mla) { refused("\"mla_use_nope\":false,", "mla_use_nope", "kimi_linear"); }

Test(config_kimi, refuses_a_softmax_router)
{
    refused("\"moe_router_activation_func\":\"softmax\",", "moe_router_activation_func", "softmax");
}

Test(config_kimi, refuses_disagreeing_spellings_of_one_key)
{
    refused("\"num_experts_per_tok\":4,", "num_experts_per_token", "num_experts_per_tok");
}

Test(config_kimi, refuses_an_unknown_layer_type)
{
    refused("\"layer_types\":[\"linear_attention\",\"sliding_attention\",\"linear_attention\"],", "layer_types\"[1]",
            "sliding_attention");
}

Test(config_kimi, refuses_an_unknown_mlp_layer_type)
{
    refused("\"mlp_layer_types\":[\"dense\",\"moe\",\"sparse\"],", "mlp_layer_types\"[1]", "\"moe\"");
}

Test(config_kimi, refuses_a_layer_in_neither_list)
{
    char x[512];
    snprintf(x, sizeof x, "\"linear_attn_config\":{\"kda_layers\":[1],\"full_attn_layers\":[2]},");
    /* layer_types is in the base config: take it away for this one */
    lwq_model_config c;
    lwq_error e = {0};
    char json[2048];
    snprintf(json, sizeof json,
             "{\"model_type\":\"kimi_linear\",\"hidden_size\":32,\"num_hidden_layers\":3,\"num_attention_heads\":4,"
             "\"vocab_size\":64,\"intermediate_size\":32,\"moe_intermediate_size\":16,\"num_experts\":8,"
             "\"num_experts_per_token\":2,\"kv_lora_rank\":16,\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":16,"
             "\"v_head_dim\":16,%s\"dtype\":\"float32\"}",
             x);
    int rc = lwq_config_parse("x/config.json", json, &c, &e);
    cr_assert_eq(rc, LWQ_EUNSUPPORTED, "accepted a layer in neither list: %s", e.msg);
    cr_assert(strstr(e.msg, "layer 2 (number 3)") && strstr(e.msg, "kda_layers"), "%s", e.msg);
}

Test(config_kimi, refuses_grouped_kv_heads)
{
    refused("\"num_key_value_heads\":2,", "num_key_value_heads", "num_attention_heads");
}

Test(config_kimi, refuses_a_moe_layer_freq)
{
    refused("\"moe_layer_freq\":2,", "moe_layer_freq", NULL);
}
