/* tests/layout/test_config.c — config.json parsing per architecture, transformers 4 and 5
 * spellings, RoPE scaling, bad values. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/helpers/craft.h"
#include "layout/config.h"
#include "tests/helpers/fixtures.h"

TestSuite(config, .init = lwqt_setup, .fini = lwqt_teardown);

static void load_fixture(const char *rel, lwq_model_config *c)
{
    char p[1024];
    snprintf(p, sizeof p, "%s", lwqt_fixture(rel));
    lwq_error e = {0};
    cr_assert_eq(lwq_config_load(p, c, &e), 0, "%s", e.msg);
}

static int parse(const char *json, lwq_model_config *c, lwq_error *e)
{
    return lwq_config_parse("x/config.json", json, c, e);
}

static void expect_fail(const char *json, int code, const char *want)
{
    lwq_model_config c;
    lwq_error e = {0};
    int rc = parse(json, &c, &e);
    cr_assert_eq(rc, code, "rc %d: %s", rc, e.msg);
    cr_assert(strstr(e.msg, "x/config.json"), "message does not name the file: %s", e.msg);
    cr_assert(strstr(e.msg, want), "message lacks '%s': %s", want, e.msg);
}

Test(config, llama_transformers4_fixture)
{
    lwq_model_config c;
    load_fixture("cai-tiny-llama/config.json", &c);
    cr_assert_str_eq(lwq_family_name(c.family), "llama");
    cr_assert_eq(c.hidden_size, 8);
    cr_assert_eq(c.num_hidden_layers, 2);
    cr_assert_eq(c.num_key_value_heads, 1);
    cr_assert_eq(c.head_dim, 4);
    cr_assert_eq(c.dtype, LWQ_BF16, "absent dtype defaults to BF16");
    cr_assert_eq(c.dtype_explicit, 0);
    cr_assert_eq(c.rope_type, LWQ_ROPE_DEFAULT);
    cr_assert_eq(c.num_experts, 0);
    cr_assert_not_null(c.raw);
    lwq_config_free(&c);
}

Test(config, llama3_rope_scaling)
{
    lwq_model_config c;
    load_fixture("mlxd-tiny-llama3-bf16/config.json", &c);
    cr_assert_eq(c.rope_type, LWQ_ROPE_LLAMA3);
    cr_assert_float_eq(c.rope_factor, 8.0, 1e-12);
    cr_assert_float_eq(c.rope_high_freq_factor, 4.0, 1e-12);
    cr_assert_eq(c.rope_original_max_position, 8192);
    cr_assert_float_eq(c.rope_theta, 500000.0, 1e-6);
    cr_assert_eq(c.head_dim, 16);
    lwq_config_free(&c);
}

Test(config, qwen3_moe_transformers5_spellings)
{
    lwq_model_config c;
    load_fixture("agilerl-tiny-qwen3-moe/config.json", &c);
    cr_assert_str_eq(lwq_family_name(c.family), "qwen3_moe");
    cr_assert_eq(c.num_experts, 4, "num_local_experts is the transformers-5 spelling");
    cr_assert_eq(c.num_experts_per_tok, 2);
    cr_assert_eq(c.moe_intermediate_size, 32);
    cr_assert_eq(c.dtype, LWQ_F32, "\"dtype\" is the transformers-5 spelling");
    cr_assert_eq(c.dtype_explicit, 1);
    cr_assert_float_eq(c.rope_theta, 10000.0, 1e-9);
    cr_assert_eq(c.norm_topk_prob, 0);
    cr_assert(lwq_config_layer_is_moe(&c, 0) && lwq_config_layer_is_moe(&c, 1));
    lwq_config_free(&c);
}

Test(config, qwen3_moe_transformers4_spellings)
{
    lwq_model_config c;
    load_fixture("cai-tiny-qwen3-moe/config.json", &c);
    cr_assert_eq(c.num_experts, 4);
    cr_assert_eq(c.head_dim, 6);
    cr_assert_eq(c.norm_topk_prob, 1);
    lwq_config_free(&c);
}

Test(config, qwen2_always_has_qkv_bias)
{
    lwq_model_config c;
    load_fixture("cai-tiny-qwen2/config.json", &c);
    cr_assert_str_eq(lwq_family_name(c.family), "qwen2");
    cr_assert_eq(c.attention_bias, 1);
    lwq_config_free(&c);
}

Test(config, mixtral_experts_use_intermediate_size)
{
    lwq_model_config c;
    load_fixture("cai-tiny-mixtral/config.json", &c);
    cr_assert_str_eq(lwq_family_name(c.family), "mixtral");
    cr_assert_eq(c.num_experts, 4);
    cr_assert_eq(c.moe_intermediate_size, 12);
    cr_assert_eq(c.norm_topk_prob, 1);
    lwq_config_free(&c);
}

Test(config, deepseek_v2_fixture)
{
    lwq_model_config c;
    load_fixture("cai-tiny-deepseek-v2/config.json", &c);
    cr_assert_str_eq(lwq_family_name(c.family), "deepseek_v2");
    cr_assert_eq(c.q_lora_rank, 0, "q_lora_rank null means a plain q_proj");
    cr_assert_eq(c.kv_lora_rank, 5);
    cr_assert_eq(c.head_dim, 10);
    cr_assert_eq(c.num_experts, 4);
    cr_assert_eq(c.n_shared_experts, 2);
    cr_assert_float_eq(c.routed_scaling_factor, 1.5, 1e-12);
    cr_assert_str_eq(c.scoring_func, "softmax");
    cr_assert(!lwq_config_layer_is_moe(&c, 0));
    cr_assert(lwq_config_layer_is_moe(&c, 1));
    lwq_config_free(&c);
}

Test(config, published_deepseek_v3_yarn)
{
    lwq_model_config c;
    load_fixture("published-nvfp4/nvidia--DeepSeek-V3.1-NVFP4/config.json", &c);
    cr_assert_str_eq(lwq_family_name(c.family), "deepseek_v3");
    cr_assert_eq(c.rope_type, LWQ_ROPE_YARN, "\"type\": \"yarn\" (old spelling of rope_type)");
    cr_assert_float_eq(c.rope_factor, 40.0, 1e-12);
    cr_assert_eq(c.rope_original_max_position, 4096);
    cr_assert_eq(c.num_experts, 256);
    cr_assert_eq(c.q_lora_rank, 1536);
    cr_assert_eq(c.n_group, 8);
    cr_assert_eq(c.topk_group, 4);
    cr_assert_eq(c.num_nextn_predict_layers, 1);
    cr_assert_str_eq(c.scoring_func, "sigmoid");
    cr_assert_str_eq(c.topk_method, "noaux_tc");
    cr_assert(!lwq_config_layer_is_moe(&c, 2));
    cr_assert(lwq_config_layer_is_moe(&c, 3));
    lwq_config_free(&c);
}

Test(config, published_kimi_wrapper_reads_text_config)
{
    lwq_model_config c;
    load_fixture("published-nvfp4/nvidia--Kimi-K2.6-NVFP4/config.json", &c);
    cr_assert_str_eq(lwq_family_name(c.family), "deepseek_v3");
    cr_assert_str_eq(c.model_type, "deepseek_v3");
    cr_assert_str_eq(c.names.root, "language_model.model.");
    cr_assert_str_eq(c.names.head, "language_model.");
    cr_assert_eq(c.num_experts, 384);
    cr_assert_eq(c.vocab_size, 163840);
    cr_assert_eq(c.first_k_dense_replace, 1);
    lwq_config_free(&c);
}

Test(config, published_dense_and_moe)
{
    lwq_model_config c;
    load_fixture("published-nvfp4/nvidia--Llama-3.1-70B-Instruct-FP8/config.json", &c);
    cr_assert_eq(c.num_hidden_layers, 80);
    cr_assert_eq(c.rope_type, LWQ_ROPE_LLAMA3);
    lwq_config_free(&c);
    load_fixture("published-nvfp4/nvidia--Qwen3-235B-A22B-NVFP4/config.json", &c);
    cr_assert_eq(c.num_experts, 128);
    cr_assert_eq(c.num_hidden_layers, 94);
    lwq_config_free(&c);
    load_fixture("published-nvfp4/Qwen--Qwen3-32B-FP8-Static-PerTensor/config.json", &c);
    cr_assert_str_eq(lwq_family_name(c.family), "qwen3");
    cr_assert_eq(c.head_dim, 128);
    lwq_config_free(&c);
}

Test(config, kimi_k2_is_deepseek_v3)
{
    const lwq_family *a;
    cr_assert_eq(lwq_family_lookup("kimi_k2", &a, NULL), 0);
    cr_assert_str_eq(a->name, "deepseek_v3");
    cr_assert_eq(lwq_family_lookup("mistral", &a, NULL), 0);
    cr_assert_str_eq(a->name, "llama");
}

#define BASE "\"hidden_size\":64,\"num_hidden_layers\":4,\"num_attention_heads\":4,\"vocab_size\":10"

Test(config, qwen3_next_layer_types)
{
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(parse("{\"model_type\":\"qwen3_next\"," BASE ",\"head_dim\":16,"
                       "\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"
                       "\"shared_expert_intermediate_size\":32,\"linear_num_key_heads\":2,"
                       "\"linear_num_value_heads\":4,\"linear_key_head_dim\":16,"
                       "\"linear_value_head_dim\":16,\"rope_parameters\":{\"rope_theta\":1e7,"
                       "\"partial_rotary_factor\":0.25}}",
                       &c, &e),
                 0, "%s", e.msg);
    cr_assert_str_eq(lwq_family_name(c.family), "qwen3_next");
    cr_assert_eq((int)lwq_config_layer_mixer(&c, 0) == LWQ_MIXER_GDN, 1);
    cr_assert_eq((int)lwq_config_layer_mixer(&c, 3) == LWQ_MIXER_GDN, 0, "full_attention_interval 4: every 4th layer is full");
    cr_assert_float_eq(c.partial_rotary_factor, 0.25, 1e-12);
    cr_assert_float_eq(c.rope_theta, 1e7, 1e-3);
    cr_assert_eq(c.n_shared_experts, 1);
    cr_assert_eq(c.linear_conv_kernel_dim, 4);
    lwq_config_free(&c);
    cr_assert_eq(parse("{\"model_type\":\"qwen3_next\"," BASE ",\"head_dim\":16,"
                       "\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"
                       "\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,"
                       "\"linear_key_head_dim\":16,\"linear_value_head_dim\":16,\"layer_types\":"
                       "[\"full_attention\",\"linear_attention\",\"full_attention\","
                       "\"linear_attention\"]}",
                       &c, &e),
                 0, "%s", e.msg);
    cr_assert_eq((int)lwq_config_layer_mixer(&c, 0) == LWQ_MIXER_GDN, 0);
    cr_assert_eq((int)lwq_config_layer_mixer(&c, 1) == LWQ_MIXER_GDN, 1);
    lwq_config_free(&c);
}

Test(config, qwen3_moe_dense_layers)
{
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(parse("{\"model_type\":\"qwen3_moe\"," BASE ",\"intermediate_size\":128,"
                       "\"num_experts\":4,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"
                       "\"decoder_sparse_step\":2,\"mlp_only_layers\":[3]}",
                       &c, &e),
                 0, "%s", e.msg);
    cr_assert(!lwq_config_layer_is_moe(&c, 0));
    cr_assert(lwq_config_layer_is_moe(&c, 1));
    cr_assert(!lwq_config_layer_is_moe(&c, 2));
    cr_assert(!lwq_config_layer_is_moe(&c, 3), "listed in mlp_only_layers");
    lwq_config_free(&c);
}

Test(config, missing_required_key)
{
    expect_fail("{\"model_type\":\"llama\",\"num_hidden_layers\":2,\"num_attention_heads\":2,"
                "\"vocab_size\":10,\"intermediate_size\":8}",
                LWQ_EFORMAT, "\"hidden_size\" is missing");
    expect_fail("{\"hidden_size\":8}", LWQ_EFORMAT, "\"model_type\" is missing");
    expect_fail("{\"model_type\":\"mixtral\"," BASE ",\"intermediate_size\":8,"
                "\"num_experts_per_tok\":2}",
                LWQ_EFORMAT, "num_local_experts");
    expect_fail("{\"model_type\":\"deepseek_v3\"," BASE ",\"intermediate_size\":8,"
                "\"n_routed_experts\":4,\"num_experts_per_tok\":2,\"moe_intermediate_size\":4}",
                LWQ_EFORMAT, "\"kv_lora_rank\" is missing");
    expect_fail("{\"model_type\":\"qwen3_moe\"," BASE ",\"num_experts\":4,"
                "\"num_experts_per_tok\":2,\"moe_intermediate_size\":4,\"mlp_only_layers\":[0]}",
                LWQ_EFORMAT, "layer 0 has a dense MLP");
}

/* found by fuzz_config: a Mixtral with intermediate_size 0 planned experts of 0 rows */
Test(config, mixtral_zero_intermediate_size)
{
    expect_fail("{\"model_type\":\"mixtral\"," BASE ",\"intermediate_size\":0,"
                "\"num_local_experts\":2,\"num_experts_per_tok\":2}",
                LWQ_EFORMAT, "\"intermediate_size\" = 0 is outside [1, ");
}

Test(config, unknown_model_type)
{
    expect_fail("{\"model_type\":\"gpt2\"," BASE "}", LWQ_EUNSUPPORTED,
                "unknown model_type 'gpt2'");
}

Test(config, wrong_types_and_absurd_values)
{
    expect_fail("{\"model_type\":\"llama\",\"hidden_size\":\"64\",\"num_hidden_layers\":4,"
                "\"num_attention_heads\":4,\"vocab_size\":10,\"intermediate_size\":8}",
                LWQ_EFORMAT, "\"hidden_size\" must be an integer");
    expect_fail("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":-1,"
                "\"num_attention_heads\":4,\"vocab_size\":10,\"intermediate_size\":8}",
                LWQ_EFORMAT, "\"num_hidden_layers\" = -1 is outside");
    expect_fail("{\"model_type\":\"llama\"," BASE ",\"intermediate_size\":8,"
                "\"num_key_value_heads\":3}",
                LWQ_EFORMAT, "not a multiple of num_key_value_heads 3");
    expect_fail("{\"model_type\":\"llama\"," BASE ",\"intermediate_size\":8,"
                "\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2}}",
                LWQ_EUNSUPPORTED, "rope type \"dynamic\"");
    expect_fail("{\"model_type\":\"llama\"," BASE ",\"intermediate_size\":8,"
                "\"hidden_act\":\"gelu\"}",
                LWQ_EUNSUPPORTED, "hidden_act \"gelu\"");
    expect_fail("{\"model_type\":\"llama\"," BASE ",\"intermediate_size\":8,"
                "\"torch_dtype\":\"int8\"}",
                LWQ_EUNSUPPORTED, "\"torch_dtype\" = \"int8\"");
}

Test(config, invalid_json)
{
    expect_fail("{\"model_type\": \"llama\",", LWQ_EFORMAT, "not valid JSON");
    expect_fail("[1]", LWQ_EFORMAT, "not a JSON object");
}

Test(config, oversized_file_is_refused)
{
    FILE *fp = fopen(lwqt_path("config.json"), "wb");
    cr_assert_not_null(fp);
    fputs("{\"pad\":\"", fp);
    for (int i = 0; i < (17 << 20) / 64; i++)
        fputs("0123456789012345678901234567890123456789012345678901234567890123", fp);
    fputs("\"}", fp);
    fclose(fp);
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(lwq_config_load(lwqt_path("config.json"), &c, &e), LWQ_EFORMAT);
    cr_assert(strstr(e.msg, "byte limit"), "%s", e.msg);
}

/* Mutated configs (fixed seed): each parses or fails with a message; none crashes. */
Test(config, mutated_configs_fail_cleanly)
{
    const char *base = "{\"model_type\":\"qwen3_moe\",\"hidden_size\":64,\"num_hidden_layers\":4,"
                       "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":10,"
                       "\"intermediate_size\":128,\"num_experts\":4,\"num_experts_per_tok\":2,"
                       "\"moe_intermediate_size\":32,\"mlp_only_layers\":[1],"
                       "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}";
    size_t n = strlen(base);
    static const char alphabet[] = "{}[]\",:0123456789-.eE ntul_";
    uint64_t s = 42;
    char *buf = malloc(n + 1);
    int ok = 0, failed = 0;
    for (int it = 0; it < 5000; it++) {
        memcpy(buf, base, n + 1);
        for (int k = 0; k < 1 + (int)(s % 3); k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            buf[(s >> 33) % n] = alphabet[(s >> 20) % (sizeof alphabet - 1)];
        }
        lwq_model_config c;
        lwq_error e = {0};
        if (lwq_config_parse("fuzz.json", buf, &c, &e) == 0) {
            ok++;
            cr_assert(c.hidden_size > 0 && c.num_hidden_layers > 0 && c.head_dim > 0);
            for (int l = 0; l < c.num_hidden_layers; l++)
                (void)lwq_config_layer_is_moe(&c, l);
            lwq_config_free(&c);
        } else {
            failed++;
            cr_assert(e.msg[0]);
        }
    }
    free(buf);
    cr_assert(ok > 0 && failed > 0, "ok %d failed %d", ok, failed);
}

#define Q35_TEXT                                                                                   \
    "\"hidden_size\":64,\"num_hidden_layers\":4,\"num_attention_heads\":4,\"vocab_size\":10,"      \
    "\"head_dim\":16,\"intermediate_size\":96,\"linear_num_key_heads\":2,"                          \
    "\"linear_num_value_heads\":4,\"linear_key_head_dim\":8,\"linear_value_head_dim\":8,"           \
    "\"layer_types\":[\"linear_attention\",\"linear_attention\",\"linear_attention\","             \
    "\"full_attention\"]"

Test(config, qwen3_5_vlm_wrapper)
{
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(parse("{\"model_type\":\"qwen3_5\",\"dtype\":\"float32\",\"text_config\":{"
                       "\"model_type\":\"qwen3_5_text\"," Q35_TEXT ",\"rope_parameters\":{"
                       "\"rope_theta\":1e7,\"partial_rotary_factor\":0.25,\"mrope_section\":[1,1,0],"
                       "\"mrope_interleaved\":true}},\"vision_config\":{\"depth\":1}}",
                       &c, &e),
                 0, "%s", e.msg);
    cr_assert_str_eq(lwq_family_name(c.family), "qwen3_5");
    cr_assert_str_eq(c.names.root, "model.language_model.");
    cr_assert_str_eq(c.names.head, "");
    cr_assert_str_eq(c.passthrough, "model.visual.");
    cr_assert_eq(c.dtype, LWQ_F32, "the wrapper's dtype names the text model's");
    cr_assert_eq((int)lwq_config_layer_mixer(&c, 0), LWQ_MIXER_GDN_SPLIT);
    cr_assert_eq((int)lwq_config_layer_mixer(&c, 3), LWQ_MIXER_GATED_GQA);
    cr_assert_eq(lwq_config_layer_is_moe(&c, 0), 0);
    char full[128];
    lwq_names_full(&c.names, "model.layers.2.mlp.up_proj.weight", full, sizeof full);
    cr_assert_str_eq(full, "model.language_model.layers.2.mlp.up_proj.weight");
    lwq_names_full(&c.names, "lm_head.weight", full, sizeof full);
    cr_assert_str_eq(full, "lm_head.weight");
    cr_assert(lwq_names_canon(&c.names, "model.language_model.norm.weight", full, sizeof full));
    cr_assert_str_eq(full, "model.norm.weight");
    lwq_config_free(&c);
}

Test(config, qwen3_5_moe_every_layer_routed_and_renormalised)
{
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(parse("{\"model_type\":\"qwen3_5_moe_text\"," Q35_TEXT ",\"num_experts\":4,"
                       "\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"
                       "\"shared_expert_intermediate_size\":48}",
                       &c, &e),
                 0, "%s", e.msg);
    for (int l = 0; l < 4; l++)
        cr_assert(lwq_config_layer_is_moe(&c, l), "layer %d", l);
    cr_assert_eq(c.norm_topk_prob, 1);
    cr_assert_eq(c.n_shared_experts, 1);
    cr_assert_eq(c.shared_expert_intermediate_size, 48);
    cr_assert_float_eq(c.partial_rotary_factor, 0.25, 1e-12);
    lwq_config_free(&c);
}

Test(config, qwen3_5_mrope_section_must_cover_the_rotary_half)
{
    expect_fail("{\"model_type\":\"qwen3_5_text\"," Q35_TEXT ",\"rope_parameters\":{"
                "\"rope_theta\":1e7,\"partial_rotary_factor\":0.25,\"mrope_section\":[11,11,10]}}",
                LWQ_EUNSUPPORTED, "\"rope_parameters.mrope_section\" sums to 32, but the rotary half-width is 2");
    expect_fail("{\"model_type\":\"qwen3_5_text\"," Q35_TEXT ",\"rope_parameters\":{"
                "\"mrope_section\":[1,\"x\"]}}",
                LWQ_EFORMAT, "mrope_section\" must list 1 to 4 non-negative integers");
}

Test(config, unknown_layer_type_names_model_type_key_and_value)
{
    expect_fail("{\"model_type\":\"qwen3_5\",\"text_config\":{\"model_type\":\"qwen3_5_text\","
                "\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":10,"
                "\"head_dim\":16,\"intermediate_size\":96,\"linear_num_key_heads\":2,"
                "\"linear_num_value_heads\":4,\"linear_key_head_dim\":8,\"linear_value_head_dim\":8,"
                "\"layer_types\":[\"linear_attention\",\"sliding_attention\"]}}",
                LWQ_EUNSUPPORTED,
                "model_type 'qwen3_5_text': \"text_config.layer_types\"[1] = \"sliding_attention\" is not a "
                "layer type lwq implements");
}

/* mistral4: Mistral4Config's own defaults and key precedence (transformers 5.14.1) */
#define MISTRAL4_BASE                                                                                          \
    "\"model_type\": \"mistral4\", \"hidden_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, " \
    "\"vocab_size\": 64, \"n_routed_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16, "    \
    "\"q_lora_rank\": 16, \"kv_lora_rank\": 16, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 16, "             \
    "\"v_head_dim\": 16"

/* without rope_parameters the class fills in its yarn dict and ignores top-level rope keys */
Test(config, mistral4_without_rope_parameters_takes_the_class_yarn_defaults)
{
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(parse("{" MISTRAL4_BASE ", \"rope_theta\": 500000.0, \"partial_rotary_factor\": 0.25}", &c, &e), 0,
                 "%s", e.msg);
    cr_assert_eq(c.rope_type, LWQ_ROPE_YARN);
    cr_assert_float_eq(c.rope_theta, 10000.0, 0);
    cr_assert_float_eq(c.rope_factor, 128.0, 0);
    cr_assert_eq(c.rope_original_max_position, 8192);
    cr_assert(c.rope_beta_fast == 32.0 && c.rope_beta_slow == 1.0 && c.rope_mscale == 1.0 &&
              c.rope_mscale_all_dim == 1.0);
    cr_assert_float_eq(c.llama4_beta, 0.1, 0);
    cr_assert_eq(c.llama4_orig_max, 8192);
    cr_assert_float_eq(c.partial_rotary_factor, 0.5, 0, "qk_rope_head_dim / head_dim");
    lwq_config_free(&c);
}

#define MISTRAL4_ROPE(theta)                                                                                   \
    "\"rope_parameters\": {\"rope_type\": \"yarn\", " theta "\"factor\": 32.0, "                               \
    "\"original_max_position_embeddings\": 8, \"llama_4_scaling_beta\": 0.1}"

Test(config, mistral4_rope_parameters_rope_theta_wins_over_the_top_level_key)
{
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(parse("{" MISTRAL4_BASE ", \"rope_theta\": 500000.0, " MISTRAL4_ROPE("\"rope_theta\": 20000.0, ") "}",
                       &c, &e), 0, "%s", e.msg);
    cr_assert_float_eq(c.rope_theta, 20000.0, 0);
    lwq_config_free(&c);
}

/* transformers' convert_rope_params_to_dict: setdefault("rope_theta", the top-level key) */
Test(config, mistral4_top_level_rope_theta_fills_in_a_missing_one)
{
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(parse("{" MISTRAL4_BASE ", \"rope_theta\": 500000.0, " MISTRAL4_ROPE("") "}", &c, &e), 0, "%s",
                 e.msg);
    cr_assert_float_eq(c.rope_theta, 500000.0, 0);
    cr_assert_eq(c.llama4_orig_max, 8);
    lwq_config_free(&c);
}
