/* tests/tools/test_inspect.c — `lwq inspect`: the report, exit codes and usage. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "layout/checkpoint/checkpoint.h"
#include "tests/helpers/run.h"
#include "tests/helpers/fixtures.h"

TestSuite(inspect, .init = lwqt_setup, .fini = lwqt_teardown);

/* inspect --json on a fixture agrees with its config and with the library's own table. */
static void check_fixture(const char *rel, const char *cfg_rel)
{
    char dir[1024], cfg[1024];
    snprintf(dir, sizeof dir, "%s", lwqt_fixture(rel));
    snprintf(cfg, sizeof cfg, "%s", cfg_rel ? lwqt_fixture(cfg_rel) : "");
    const char *a1[] = {"inspect", "--json", dir, NULL};
    const char *a2[] = {"inspect", "--json", "--config", cfg, dir, NULL};
    int rc = lwqt_run(cfg_rel ? a2 : a1);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "%s: exit %d: %s", rel, rc, err);
    free(err);
    char *out = lwqt_out();
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "%s: output is not JSON: %.200s", rel, out);
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open_with_config(dir, cfg_rel ? cfg : NULL, &c, &e), 0, "%s", e.msg);
    cr_assert_eq(cJSON_GetObjectItem(j, "num_hidden_layers")->valueint, c.cfg.num_hidden_layers);
    cr_assert_eq(cJSON_GetObjectItem(j, "checkpoint_layers")->valueint, c.cfg.num_hidden_layers);
    cr_assert_eq(cJSON_GetObjectItem(j, "num_experts")->valueint, c.cfg.num_experts);
    cr_assert_eq(cJSON_GetObjectItem(j, "num_experts_per_tok")->valueint, c.cfg.num_experts_per_tok);
    int largest = 0;
    for (int l = 1; l < c.nlayers; l++)
        if (c.layers[l].bytes > c.layers[largest].bytes)
            largest = l;
    cJSON *big = cJSON_GetObjectItem(j, "largest_layer");
    cr_assert_eq(cJSON_GetObjectItem(big, "index")->valueint, largest, "%s", rel);
    cr_assert_eq((uint64_t)cJSON_GetObjectItem(big, "bytes")->valuedouble, c.layers[largest].bytes);
    int moe = lwq_config_layer_is_moe(&c.cfg, largest);
    cr_assert_eq(cJSON_GetObjectItem(big, "experts")->valueint, moe ? c.cfg.num_experts : 0);
    cr_assert_eq((uint64_t)cJSON_GetObjectItem(j, "total_bytes")->valuedouble, c.total_bytes);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "issues")), 0, "%s: %.400s", rel, out);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "tail")), c.tail.n);
    lwq_ckpt_free(&c);
    cJSON_Delete(j);
    free(out);
}

/* One test per checkpoint of the fixture table (tests/helpers/fixtures.c). */
ParameterizedTestParameters(inspect, every_fixture_agrees_with_its_config)
{
    return cr_make_param_array(int, lwqt_ckpt_fixture_indexes(), (size_t)lwqt_nckpt_fixtures);
}
ParameterizedTest(int *i, inspect, every_fixture_agrees_with_its_config)
{
    check_fixture(lwqt_ckpt_fixtures[*i].dir, lwqt_ckpt_fixtures[*i].config);
}

Test(inspect, text_output_names_the_largest_layer_and_tail)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", lwqt_fixture("cai-tiny-deepseek-v2"));
    const char *a[] = {"inspect", dir, NULL};
    cr_assert_eq(lwqt_run(a), 0);
    char *out = lwqt_out();
    cr_assert(strstr(out, "largest     layer 1:"), "%s", out);
    cr_assert(strstr(out, "4 experts"), "%s", out);
    cr_assert(strstr(out, "model.embed_tokens.weight F32 [11, 8]"), "%s", out);
    cr_assert(strstr(out, "check       ok"), "%s", out);
    free(out);
}

Test(inspect, unreadable_checkpoint_is_exit_2_with_reason)
{
    const char *a[] = {"inspect", lwqt_dir, NULL};
    cr_assert_eq(lwqt_run(a), 2);
    char *err = lwqt_err();
    cr_assert(strstr(err, "config.json"), "%s", err);
    free(err);
}

Test(inspect, missing_tensor_is_exit_1)
{
    lwqt_write_str("config.json", "{\"model_type\":\"llama\",\"hidden_size\":4,\"intermediate_size\":4,"
                                  "\"num_hidden_layers\":1,\"num_attention_heads\":1,\"vocab_size\":2}");
    lwqt_write_st("model.safetensors",
                  "{\"model.layers.0.input_layernorm.weight\":{\"dtype\":\"F32\",\"shape\":[4],"
                  "\"data_offsets\":[0,16]}}",
                  UINT64_MAX, 16);
    const char *a[] = {"inspect", lwqt_dir, NULL};
    cr_assert_eq(lwqt_run(a), 1);
    char *out = lwqt_out();
    cr_assert(strstr(out, "missing: model.layers.0.self_attn.q_proj.weight"), "%s", out);
    free(out);
}

Test(inspect, usage)
{
    const char *h[] = {"inspect", "--help", NULL};
    cr_assert_eq(lwqt_run(h), 0);
    char *out = lwqt_out();
    cr_assert(strstr(out, "exit status"));
    free(out);
    const char *bad[] = {"inspect", "--bogus", "x", NULL};
    cr_assert_eq(lwqt_run(bad), 2);
    const char *none[] = {"inspect", NULL};
    cr_assert_eq(lwqt_run(none), 2);
}

/* lwq's own quantized output is described as a quantized checkpoint (it exited 1, every scale
 * listed as unexpected and every packed weight as a bad shape), and a damaged one still fails. */
Test(inspect, a_quantized_output_is_described_as_one)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "qwen3_moe", "--hidden", "64", "--layers", "2", "--heads",
                        "4", "--kv-heads", "2", "--experts", "4", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    const char *q[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("q"), "--qformat", "nvfp4_experts-fp8_attn",
                       "--kv-cache", "fp8", "--calib-size", "4", "--calib-seq", "16", "--quiet", NULL};
    cr_assert_eq(lwqt_run(q), 0);
    const char *in[] = {"inspect", lwqt_path("q"), NULL};
    int rc = lwqt_run(in);
    char *out = lwqt_out();
    cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
    cr_assert(strstr(out, "quantized   24 linears NVFP4, 8 FP8, each with its scales; 4 KV cache scales; config.json "
                          "declares MIXED_PRECISION"), "%s", out);
    cr_assert(strstr(out, "check       ok: every tensor matches the qwen3_moe plan"), "%s", out);
    free(out);
    const char *js[] = {"inspect", "--json", lwqt_path("q"), NULL};
    cr_assert_eq(lwqt_run(js), 0);
    out = lwqt_out();
    cJSON *j = cJSON_Parse(out);
    cJSON *qz = cJSON_GetObjectItem(j, "quantized");
    cr_assert_eq(cJSON_GetObjectItem(qz, "nvfp4_linears")->valueint, 24);
    cr_assert_eq(cJSON_GetObjectItem(qz, "fp8_linears")->valueint, 8);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "issues")), 0);
    cJSON_Delete(j);
    free(out);
}

/* ... and a quantized source is refused by quantize with that reason, not as bad shapes. */
Test(inspect, quantizing_a_quantized_checkpoint_is_refused_by_name)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "4",
                        "--kv-heads", "2", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    const char *q[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("q"), "--calib-size", "4", "--calib-seq", "16",
                       "--quiet", NULL};
    cr_assert_eq(lwqt_run(q), 0);
    const char *q2[] = {"quantize", lwqt_path("q"), "-o", lwqt_path("q2"), "--calib-size", "4", "--calib-seq", "16",
                        "--quiet", NULL};
    cr_assert_eq(lwqt_run(q2), 2);
    char *err = lwqt_err();
    char want[600];
    snprintf(want, sizeof want, "lwq: %s is already quantized (model.layers.0.self_attn.q_proj.weight and 13 more "
             "linear weights are stored as NVFP4 or FP8 with their scales)", lwqt_path("q"));
    cr_assert(strstr(err, want), "%s", err);
    free(err);
}
