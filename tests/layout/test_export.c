/* tests/layout/test_export.c — hf_quant_config.json, quantization_config in config.json and the
 * index, as FORMATS.md writes them. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "layout/export.h"

static const lwq_export_module moe_nvfp4[] = {
    {"model.layers.0.self_attn.q_proj", LWQ_QFMT_NVFP4, 0, NULL},
    {"model.layers.0.mlp.gate", LWQ_QFMT_NONE, 0, NULL},
    {"model.layers.0.mlp.experts.0.up_proj", LWQ_QFMT_NVFP4, 0, NULL},
    {"model.layers.1.mlp.gate", LWQ_QFMT_NONE, 0, NULL},
};

static cJSON *parse_ok(const char *s)
{
    cJSON *j = cJSON_Parse(s);
    cr_assert_not_null(j, "output is not JSON: %s", s);
    return j;
}

Test(export, nvfp4_hf_quant_config_matches_formats_md)
{
    lwq_export_quant q = {moe_nvfp4, 4, NULL, 0, LWQ_KV_FP8_CAST, NULL, 0};
    char *s;
    lwq_error e = {0};
    cr_assert_eq(lwq_export_hf_quant_config(&q, &s, &e), 0, "%s", e.msg);
    cJSON *j = parse_ok(s);
    cJSON *qz = cJSON_GetObjectItem(j, "quantization");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "producer"), "name")->valuestring, "modelopt");
    cr_assert_str_eq(cJSON_GetObjectItem(qz, "quant_algo")->valuestring, "NVFP4");
    cr_assert_str_eq(cJSON_GetObjectItem(qz, "kv_cache_quant_algo")->valuestring, "FP8");
    cr_assert_eq(cJSON_GetObjectItem(qz, "group_size")->valueint, 16);
    cJSON *ex = cJSON_GetObjectItem(qz, "exclude_modules");
    cr_assert_eq(cJSON_GetArraySize(ex), 3);
    cr_assert_str_eq(cJSON_GetArrayItem(ex, 0)->valuestring, "lm_head");
    cr_assert_str_eq(cJSON_GetArrayItem(ex, 1)->valuestring, "model.layers.0.mlp.gate");
    cr_assert_str_eq(cJSON_GetArrayItem(ex, 2)->valuestring, "model.layers.1.mlp.gate");
    cr_assert_null(cJSON_GetObjectItem(qz, "quantized_layers"));
    cJSON_Delete(j);
    free(s);
}

Test(export, kv_none_keeps_null_key)
{
    lwq_export_quant q = {moe_nvfp4, 4, NULL, 0, LWQ_KV_NONE, NULL, 0};
    char *s;
    cr_assert_eq(lwq_export_hf_quant_config(&q, &s, NULL), 0);
    cJSON *j = parse_ok(s);
    cJSON *kv = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "quantization"), "kv_cache_quant_algo");
    cr_assert(kv && cJSON_IsNull(kv));
    cJSON_Delete(j);
    free(s);
}

Test(export, config_json_keeps_source_and_adds_quantization_config)
{
    const char *src = "{\"model_type\":\"qwen3_moe\",\"hidden_size\":64,"
                      "\"quantization_config\":{\"stale\":1}}";
    lwq_export_quant q = {moe_nvfp4, 4, NULL, 0, LWQ_KV_FP8, NULL, 0};
    char *s;
    lwq_error e = {0};
    cr_assert_eq(lwq_export_config_json(src, strlen(src), &q, &s, &e), 0, "%s", e.msg);
    cJSON *j = parse_ok(s);
    cr_assert_eq(cJSON_GetObjectItem(j, "hidden_size")->valueint, 64);
    cJSON *qc = cJSON_GetObjectItem(j, "quantization_config");
    cr_assert_null(cJSON_GetObjectItem(qc, "stale"));
    cr_assert_str_eq(cJSON_GetObjectItem(qc, "quant_method")->valuestring, "modelopt");
    cr_assert_str_eq(cJSON_GetObjectItem(qc, "quant_algo")->valuestring, "NVFP4");
    cJSON *kv = cJSON_GetObjectItem(qc, "kv_cache_scheme");
    cr_assert(cJSON_IsObject(kv), "kv_cache_scheme must be an object");
    cr_assert_eq(cJSON_GetObjectItem(kv, "num_bits")->valueint, 8);
    cJSON *g = cJSON_GetObjectItem(cJSON_GetObjectItem(qc, "config_groups"), "group_0");
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(g, "weights"), "num_bits")->valueint, 4);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(g, "input_activations"), "group_size")->valueint, 16);
    cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(g, "targets"), 0)->valuestring, "Linear");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(qc, "ignore")), 3);
    cJSON_Delete(j);
    free(s);
}

/* Typed config readers (transformers 5.20's MixtralConfig under vLLM 0.33) refuse 0 where the
 * class declares a float: the source's numbers must keep their spelling, so everything but the
 * replaced quantization_config is the source's text. */
Test(export, config_json_keeps_the_source_text)
{
    const char *src = "{\n  \"attention_dropout\": 0.0,\n  \"note\": \"a } \\\" , [\",\n"
                      "  \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]},\n"
                      "  \"rope_parameters\": {\"rope_theta\": 10000.0, \"x\": [1e-06, 2.50]},\n"
                      "  \"router_jitter_noise\": 0.0\n}\n";
    const char *want = "{\n  \"attention_dropout\": 0.0,\n  \"note\": \"a } \\\" , [\",\n"
                       "  \"rope_parameters\": {\"rope_theta\": 10000.0, \"x\": [1e-06, 2.50]},\n"
                       "  \"router_jitter_noise\": 0.0,\n  \"quantization_config\": {";
    lwq_export_quant q = {moe_nvfp4, 4, NULL, 0, LWQ_KV_NONE, NULL, 0};
    char *s;
    lwq_error e = {0};
    cr_assert_eq(lwq_export_config_json(src, strlen(src), &q, &s, &e), 0, "%s", e.msg);
    cr_assert_eq(strncmp(s, want, strlen(want)), 0, "got:\n%s", s);
    size_t n = strlen(s);
    cr_assert(n > 4 && !strcmp(s + n - 4, "}\n}\n"), "the new member, then the source's ending: %s", s);
    cJSON *j = parse_ok(s);
    cJSON *qc = cJSON_GetObjectItem(j, "quantization_config");
    cr_assert_str_eq(cJSON_GetObjectItem(qc, "quant_method")->valuestring, "modelopt");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "note")->valuestring, "a } \" , [");
    cJSON_Delete(j);
    free(s);
}

Test(export, config_json_replaces_every_quantization_config_member)
{
    /* an escaped spelling of the key, and the key twice: neither survives */
    static const char *const srcs[] = {
        "{\"quantization\\u005fconfig\": {\"a\": 1}, \"model_type\": \"llama\", \"quantization_config\": 2}",
        "{\"quantization_config\": null}",
        "{}",
    };
    lwq_export_quant q = {moe_nvfp4, 4, NULL, 0, LWQ_KV_NONE, NULL, 0};
    for (size_t t = 0; t < sizeof srcs / sizeof srcs[0]; t++) {
        char *s;
        lwq_error e = {0};
        cr_assert_eq(lwq_export_config_json(srcs[t], strlen(srcs[t]), &q, &s, &e), 0, "%s", e.msg);
        cJSON *j = parse_ok(s);
        int members = 0, qcs = 0;
        for (cJSON *it = j->child; it; it = it->next, members++)
            qcs += !strcmp(it->string, "quantization_config");
        cr_assert_eq(qcs, 1, "source %zu: %s", t, s);
        cr_assert_eq(members, t == 0 ? 2 : 1, "source %zu: %s", t, s);
        cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "quantization_config"), "quant_method")->valuestring,
                         "modelopt");
        cJSON_Delete(j);
        free(s);
    }
}

Test(export, config_json_refuses_a_source_that_is_not_an_object)
{
    lwq_export_quant q = {moe_nvfp4, 4, NULL, 0, LWQ_KV_NONE, NULL, 0};
    char *s = NULL;
    lwq_error e = {0};
    cr_assert_eq(lwq_export_config_json("[1, 2]", 6, &q, &s, &e), LWQ_EINVAL);
    cr_assert_null(s);
    cr_assert(strstr(e.msg, "not a JSON object"), "%s", e.msg);
}

Test(export, two_formats_give_mixed_precision)
{
    static const lwq_export_module m[] = {
        {"model.layers.0.self_attn.q_proj", LWQ_QFMT_FP8, 0, NULL},
        {"model.layers.0.mlp.experts.0.up_proj", LWQ_QFMT_NVFP4, 0, NULL},
        {"model.layers.0.mlp.gate", LWQ_QFMT_NONE, 0, NULL},
    };
    lwq_export_quant q = {m, 3, NULL, 0, LWQ_KV_FP8_CAST, NULL, 0};
    char *s;
    cr_assert_eq(lwq_export_hf_quant_config(&q, &s, NULL), 0);
    cJSON *j = parse_ok(s);
    cJSON *qz = cJSON_GetObjectItem(j, "quantization");
    cr_assert_str_eq(cJSON_GetObjectItem(qz, "quant_algo")->valuestring, "MIXED_PRECISION");
    cJSON *ql = cJSON_GetObjectItem(qz, "quantized_layers");
    cJSON *a = cJSON_GetObjectItem(ql, "model.layers.0.self_attn.q_proj");
    cJSON *b = cJSON_GetObjectItem(ql, "model.layers.0.mlp.experts.0.up_proj");
    cr_assert_str_eq(cJSON_GetObjectItem(a, "quant_algo")->valuestring, "FP8");
    cr_assert_null(cJSON_GetObjectItem(a, "group_size"));
    cr_assert_str_eq(cJSON_GetObjectItem(b, "quant_algo")->valuestring, "NVFP4");
    cr_assert_eq(cJSON_GetObjectItem(b, "group_size")->valueint, 16);
    cr_assert_null(cJSON_GetObjectItem(ql, "model.layers.0.mlp.gate"));
    cJSON_Delete(j);
    free(s);
}

/* Model Optimizer 0.47 (convert_hf_config.py) writes W4A16_NVFP4's config group with weights only */
Test(export, weight_only_nvfp4_is_w4a16_nvfp4_without_input_activations)
{
    static const lwq_export_module m[] = {
        {"model.layers.0.self_attn.q_proj", LWQ_QFMT_NVFP4, 1, NULL},
        {"model.layers.0.mlp.gate", LWQ_QFMT_NONE, 0, NULL},
    };
    lwq_export_quant q = {m, 2, NULL, 0, LWQ_KV_NONE, NULL, 0};
    char *s;
    lwq_error e = {0};
    cr_assert_eq(lwq_export_hf_quant_config(&q, &s, &e), 0, "%s", e.msg);
    cJSON *j = parse_ok(s);
    cJSON *qz = cJSON_GetObjectItem(j, "quantization");
    cr_assert_str_eq(cJSON_GetObjectItem(qz, "quant_algo")->valuestring, "W4A16_NVFP4");
    cr_assert_eq(cJSON_GetObjectItem(qz, "group_size")->valueint, 16);
    cJSON_Delete(j);
    free(s);
    cr_assert_eq(lwq_export_config_json("{}", 2, &q, &s, &e), 0, "%s", e.msg);
    j = parse_ok(s);
    cJSON *g = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "quantization_config"),
                                                       "config_groups"), "group_0");
    cr_assert_null(cJSON_GetObjectItem(g, "input_activations"));
    cJSON *w = cJSON_GetObjectItem(g, "weights");
    cr_assert_eq(cJSON_GetObjectItem(w, "num_bits")->valueint, 4);
    cr_assert_eq(cJSON_GetObjectItem(w, "group_size")->valueint, 16);
    cJSON_Delete(j);
    free(s);
}

Test(export, weight_only_nvfp4_beside_nvfp4_is_mixed_precision)
{
    static const lwq_export_module m[] = {
        {"model.layers.0.self_attn.q_proj", LWQ_QFMT_NVFP4, 0, NULL},
        {"model.layers.0.mlp.up_proj", LWQ_QFMT_NVFP4, 1, NULL},
    };
    lwq_export_quant q = {m, 2, NULL, 0, LWQ_KV_NONE, NULL, 0};
    char *s;
    cr_assert_eq(lwq_export_hf_quant_config(&q, &s, NULL), 0);
    cJSON *j = parse_ok(s);
    cJSON *ql = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "quantization"), "quantized_layers");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(ql, "model.layers.0.mlp.up_proj"), "quant_algo")->valuestring,
                     "W4A16_NVFP4");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(ql, "model.layers.0.self_attn.q_proj"),
                                         "quant_algo")->valuestring, "NVFP4");
    cJSON_Delete(j);
    free(s);
}

Test(export, weight_only_fp8_is_refused)
{
    static const lwq_export_module m[] = {{"model.layers.0.mlp.up_proj", LWQ_QFMT_FP8, 1, NULL}};
    lwq_export_quant q = {m, 1, NULL, 0, LWQ_KV_NONE, NULL, 0};
    char *s;
    lwq_error e = {0};
    cr_assert_lt(lwq_export_hf_quant_config(&q, &s, &e), 0);
    cr_assert(strstr(e.msg, "model.layers.0.mlp.up_proj is weight-only fp8"), "%s", e.msg);
}

/* Model Optimizer 0.47 names an NVFP4 cache in both files, kv_cache_scheme as a string */
Test(export, nvfp4_kv_cache_is_named_nvfp4)
{
    lwq_export_quant q = {moe_nvfp4, 4, NULL, 0, LWQ_KV_NVFP4_CAST, NULL, 0};
    char *s;
    lwq_error e = {0};
    cr_assert_eq(lwq_export_hf_quant_config(&q, &s, &e), 0, "%s", e.msg);
    cJSON *j = parse_ok(s);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "quantization"), "kv_cache_quant_algo")->valuestring,
                     "NVFP4");
    cJSON_Delete(j);
    free(s);
    cr_assert_eq(lwq_export_config_json("{}", 2, &q, &s, &e), 0, "%s", e.msg);
    j = parse_ok(s);
    cJSON *ks = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "quantization_config"), "kv_cache_scheme");
    cr_assert(cJSON_IsString(ks) && !strcmp(ks->valuestring, "NVFP4"), "%s", s);
    cJSON_Delete(j);
    free(s);
}

Test(export, nothing_quantized_is_refused)
{
    static const lwq_export_module m[] = {{"model.layers.0.mlp.gate", LWQ_QFMT_NONE, 0, NULL}};
    lwq_export_quant q = {m, 1, NULL, 0, LWQ_KV_FP8_CAST, NULL, 0};
    char *s;
    lwq_error e = {0};
    cr_assert_lt(lwq_export_hf_quant_config(&q, &s, &e), 0);
    cr_assert(strstr(e.msg, "no module is quantized"), "%s", e.msg);
}

Test(export, index_sorted_and_duplicates_refused)
{
    const char *names[] = {"model.norm.weight", "lm_head.weight", "model.layers.0.x"};
    const char *files[] = {"model-tail.safetensors", "model-tail.safetensors", "model-layer-00000.safetensors"};
    char *s;
    lwq_error e = {0};
    cr_assert_eq(lwq_export_index_json(names, files, 3, 1234567890123ull, &s, &e), 0);
    cJSON *j = parse_ok(s);
    cr_assert_eq((long long)cJSON_GetObjectItem(cJSON_GetObjectItem(j, "metadata"), "total_size")->valuedouble,
                 1234567890123ll);
    cJSON *wm = cJSON_GetObjectItem(j, "weight_map");
    cr_assert_str_eq(wm->child->string, "lm_head.weight");
    cr_assert_str_eq(cJSON_GetObjectItem(wm, "model.layers.0.x")->valuestring, "model-layer-00000.safetensors");
    cJSON_Delete(j);
    free(s);
    const char *dn[] = {"a", "a"};
    cr_assert_lt(lwq_export_index_json(dn, files, 2, 0, &s, &e), 0);
    cr_assert(strstr(e.msg, "listed twice"), "%s", e.msg);
}

/* ---- MIXED_PRECISION as Model Optimizer 0.47 writes it (layout/export.h) ---- */

static const lwq_export_module fused_mix[] = {
    {"model.layers.0.self_attn.q_proj", LWQ_QFMT_FP8, 0, NULL},
    {"model.layers.0.mlp.gate", LWQ_QFMT_NONE, 0, NULL},
    {"model.layers.0.mlp.experts.0.gate_proj", LWQ_QFMT_NVFP4, 0, "model.layers.0.mlp.experts"},
    {"model.layers.0.mlp.experts.0.down_proj", LWQ_QFMT_NVFP4, 0, "model.layers.0.mlp.experts"},
    {"model.layers.0.mlp.experts.1.gate_proj", LWQ_QFMT_NVFP4, 0, "model.layers.0.mlp.experts"},
    {"model.layers.0.mlp.experts.1.down_proj", LWQ_QFMT_NVFP4, 0, "model.layers.0.mlp.experts"},
};

/* the tensors stay per expert; the configs name the in-memory experts module once */
Test(export, mixed_precision_lists_fused_experts_once)
{
    lwq_export_quant q = {fused_mix, 6, NULL, 0, LWQ_KV_NONE, NULL, 0};
    char *s;
    lwq_error e = {0};
    cr_assert_eq(lwq_export_hf_quant_config(&q, &s, &e), 0, "%s", e.msg);
    cJSON *j = parse_ok(s);
    cJSON *ql = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "quantization"), "quantized_layers");
    cr_assert_eq(cJSON_GetArraySize(ql), 2, "%s", s);
    cJSON *x = cJSON_GetObjectItem(ql, "model.layers.0.mlp.experts");
    cr_assert_str_eq(cJSON_GetObjectItem(x, "quant_algo")->valuestring, "NVFP4");
    cr_assert_eq(cJSON_GetObjectItem(x, "group_size")->valueint, 16);
    cr_assert_null(cJSON_GetObjectItem(ql, "model.layers.0.mlp.experts.0.gate_proj"));
    cJSON_Delete(j);
    free(s);
    cr_assert_eq(lwq_export_config_json("{}", 2, &q, &s, &e), 0, "%s", e.msg);
    j = parse_ok(s);
    cJSON *g = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "quantization_config"),
                                                       "config_groups"), "group_1"); /* q_proj's FP8 first */
    cJSON *t = cJSON_GetObjectItem(g, "targets");
    cr_assert_eq(cJSON_GetArraySize(t), 1, "%s", s);
    cr_assert_str_eq(cJSON_GetArrayItem(t, 0)->valuestring, "model.layers.0.mlp.experts");
    cJSON_Delete(j);
    free(s);
}

/* experts of one module in two formats cannot be one entry: each is listed by its own name */
Test(export, fused_experts_in_two_formats_are_listed_per_expert)
{
    lwq_export_module m[6];
    memcpy(m, fused_mix, sizeof m);
    m[5].format = LWQ_QFMT_FP8;
    lwq_export_quant q = {m, 6, NULL, 0, LWQ_KV_NONE, NULL, 0};
    char *s;
    cr_assert_eq(lwq_export_hf_quant_config(&q, &s, NULL), 0);
    cJSON *j = parse_ok(s);
    cJSON *ql = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "quantization"), "quantized_layers");
    cr_assert_null(cJSON_GetObjectItem(ql, "model.layers.0.mlp.experts"), "%s", s);
    cr_assert_eq(cJSON_GetArraySize(ql), 5, "%s", s);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(ql, "model.layers.0.mlp.experts.1.down_proj"),
                                         "quant_algo")->valuestring, "FP8");
    cJSON_Delete(j);
    free(s);
}

/* a MIXED_PRECISION config excludes only the MTP blocks (the first nextra_mtp extras): no
 * lm_head, router, vision tower or embedding, in both files */
Test(export, mixed_precision_excludes_only_the_mtp_blocks)
{
    static const char *const extra[] = {"mtp*", "model.visual*", "model.embed_tokens"};
    lwq_export_quant q = {fused_mix, 6, extra, 3, LWQ_KV_NONE, NULL, 1};
    char *s;
    cr_assert_eq(lwq_export_hf_quant_config(&q, &s, NULL), 0);
    cJSON *j = parse_ok(s);
    cJSON *ex = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "quantization"), "exclude_modules");
    cr_assert_eq(cJSON_GetArraySize(ex), 1, "%s", s);
    cr_assert_str_eq(cJSON_GetArrayItem(ex, 0)->valuestring, "mtp*");
    cJSON_Delete(j);
    free(s);
    cr_assert_eq(lwq_export_config_json("{}", 2, &q, &s, NULL), 0);
    j = parse_ok(s);
    ex = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "quantization_config"), "ignore");
    cr_assert_eq(cJSON_GetArraySize(ex), 1, "%s", s);
    cJSON_Delete(j);
    free(s);
}

/* one format keeps the full exclusion list (lm_head, extras, unquantized linears) */
Test(export, one_format_keeps_every_exclusion)
{
    lwq_export_module m[6];
    memcpy(m, fused_mix, sizeof m);
    m[0].format = LWQ_QFMT_NVFP4;
    static const char *const extra[] = {"mtp*", "model.visual*"};
    lwq_export_quant q = {m, 6, extra, 2, LWQ_KV_NONE, NULL, 1};
    char *s;
    cr_assert_eq(lwq_export_hf_quant_config(&q, &s, NULL), 0);
    cJSON *j = parse_ok(s);
    cJSON *ex = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "quantization"), "exclude_modules");
    cr_assert_eq(cJSON_GetArraySize(ex), 4, "%s", s); /* lm_head, the gate, mtp*, model.visual* */
    cJSON_Delete(j);
    free(s);
}

/* a quantized linear's entry: its own, else its nearest listed ancestor's */
Test(export, listed_entry_of_an_expert_is_its_experts_module)
{
    cJSON *ql = cJSON_Parse("{\"model.layers.0.mlp.experts\": {\"quant_algo\": \"NVFP4\"}, "
                            "\"model.layers.0.self_attn.q_proj\": {\"quant_algo\": \"FP8\"}}");
    const cJSON *x = lwq_export_listed(ql, "model.layers.0.mlp.experts.7.up_proj");
    cr_assert_not_null(x);
    cr_assert_str_eq(cJSON_GetObjectItem(x, "quant_algo")->valuestring, "NVFP4");
    x = lwq_export_listed(ql, "model.layers.0.self_attn.q_proj");
    cr_assert_str_eq(cJSON_GetObjectItem(x, "quant_algo")->valuestring, "FP8");
    cr_assert_null(lwq_export_listed(ql, "model.layers.0.self_attn.k_proj"));
    cr_assert_null(lwq_export_listed(ql, "model.layers.1.mlp.experts.0.up_proj"));
    cJSON_Delete(ql);
}

/* config groups are numbered as Model Optimizer numbers them: in the order the modules first meet
 * each format (FP8 q_proj first above; here the NVFP4 experts come first) */
Test(export, mixed_config_groups_follow_the_modules_order)
{
    lwq_export_module m[6];
    memcpy(m, fused_mix + 2, 4 * sizeof *m);
    m[4] = fused_mix[0];
    m[5] = fused_mix[1];
    lwq_export_quant q = {m, 6, NULL, 0, LWQ_KV_NONE, NULL, 0};
    char *s;
    cr_assert_eq(lwq_export_config_json("{}", 2, &q, &s, NULL), 0);
    cJSON *j = parse_ok(s);
    cJSON *gs = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "quantization_config"), "config_groups");
    cJSON *w0 = cJSON_GetObjectItem(cJSON_GetObjectItem(gs, "group_0"), "weights");
    cJSON *w1 = cJSON_GetObjectItem(cJSON_GetObjectItem(gs, "group_1"), "weights");
    cr_assert_eq(cJSON_GetObjectItem(w0, "num_bits")->valueint, 4, "%s", s);
    cr_assert_eq(cJSON_GetObjectItem(w1, "num_bits")->valueint, 8, "%s", s);
    cJSON_Delete(j);
    free(s);
}
