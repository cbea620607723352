/* The formats of Model Optimizer 0.47's published recipes end to end: weight-only NVFP4 (W4A16), an NVFP4 KV cache in cast mode, and weight-only FP8 / Four-over-Six lm_heads, quantized, described and verified (issues 33, 35). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "layout/checkpoint/checkpoint.h"
#include "tests/helpers/run.h"

TestSuite(recipe_formats, .init = lwqt_setup, .fini = lwqt_teardown);

static void quantize(const char *out, const char *qformat, const char *kv)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "qwen3_moe", "--layers", "2", "--experts", "4",
                        "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    const char *a[] = {"quantize", lwqt_path("m"), "-o", out, "--qformat", qformat, "--kv-cache", kv,
                       "--calib-size", "6", "--calib-seq", "24", "--quiet", NULL};
    int rc = lwqt_run(a);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "quantize --qformat %s --kv-cache %s: %s", qformat, kv, err);
    free(err);
}

static int count_suffix(const lwq_ckpt *c, const char *suffix)
{
    int n = 0;
    size_t L = strlen(suffix);
    for (int i = 0; i < c->ntensors; i++) {
        size_t k = strlen(c->tensors[i].name);
        n += k > L && !strcmp(c->tensors[i].name + k - L, suffix);
    }
    return n;
}

static void verify_ok(const char *dir)
{
    const char *v[] = {"verify", dir, NULL};
    int rc = lwqt_run(v);
    char *out = lwqt_out();
    cr_assert_eq(rc, 0, "verify %s: %s", dir, out);
    free(out);
}

Test(recipe_formats, w4a16_writes_nvfp4_weights_without_input_scales_and_verifies)
{
    char out[600];
    snprintf(out, sizeof out, "%s", lwqt_path("o"));
    quantize(out, "w4a16_nvfp4", "none");
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(out, &c, &e), 0, "%s", e.msg);
    cr_assert_gt(count_suffix(&c, ".weight_scale_2"), 0, "no NVFP4 linear was written");
    cr_assert_eq(count_suffix(&c, ".input_scale"), 0, "a weight-only output has input scales");
    lwq_ckpt_free(&c);
    char p[700];
    snprintf(p, sizeof p, "%s/hf_quant_config.json", out);
    char *hq = lwqt_slurp(p);
    cr_assert(strstr(hq, "\"quant_algo\":\t\"W4A16_NVFP4\""), "%s", hq);
    free(hq);
    snprintf(p, sizeof p, "%s/config.json", out);
    char *cj = lwqt_slurp(p);
    cr_assert(!strstr(cj, "input_activations"), "a weight-only config group has input_activations: %s", cj);
    free(cj);
    verify_ok(out);
}

/* verify reads quant_algo per module: a W4A4 NVFP4 linear without its input_scale is reported */
Test(recipe_formats, verify_reports_a_w4a4_output_that_lost_an_input_scale)
{
    char out[600], p[700];
    snprintf(out, sizeof out, "%s", lwqt_path("o"));
    quantize(out, "w4a16_nvfp4", "none");
    snprintf(p, sizeof p, "%s/hf_quant_config.json", out);
    char *hq = lwqt_slurp(p);
    char *at = strstr(hq, "W4A16_NVFP4");
    cr_assert_not_null(at);
    memmove(at, at + 6, strlen(at + 6) + 1); /* "W4A16_NVFP4" -> "NVFP4" */
    lwqt_write_str("o/hf_quant_config.json", hq);
    free(hq);
    const char *v[] = {"verify", out, NULL};
    cr_assert_eq(lwqt_run(v), 1);
    char *o = lwqt_out();
    cr_assert(strstr(o, "lacks model.layers.0.self_attn.q_proj.input_scale"), "%s", o);
    free(o);
}

Test(recipe_formats, nvfp4_cast_kv_cache_writes_no_kv_scales_and_names_nvfp4)
{
    char out[600], p[700];
    snprintf(out, sizeof out, "%s", lwqt_path("o"));
    quantize(out, "nvfp4", "nvfp4_cast");
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(out, &c, &e), 0, "%s", e.msg);
    cr_assert_eq(count_suffix(&c, ".k_scale") + count_suffix(&c, ".v_scale"), 0);
    cr_assert_gt(count_suffix(&c, ".input_scale"), 0);
    lwq_ckpt_free(&c);
    snprintf(p, sizeof p, "%s/hf_quant_config.json", out);
    char *hq = lwqt_slurp(p);
    cr_assert(strstr(hq, "\"kv_cache_quant_algo\":\t\"NVFP4\""), "%s", hq);
    free(hq);
    snprintf(p, sizeof p, "%s/config.json", out);
    char *cj = lwqt_slurp(p);
    cr_assert(strstr(cj, "\"kv_cache_scheme\":\t\"NVFP4\"") || strstr(cj, "\"kv_cache_scheme\": \"NVFP4\""), "%s", cj);
    free(cj);
    verify_ok(out);
}

/* Four-over-Six is Model Optimizer's mse search; with max calibration it is refused by module */
Test(recipe_formats, four_over_six_without_mse_is_refused_naming_the_module)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "llama", "--layers", "1", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    lwqt_write_str("r.json", "{\"rules\":[{\"match\":\"*\",\"format\":\"nvfp4\",\"four_over_six\":true}]}");
    const char *a[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("o"), "--recipe", lwqt_path("r.json"),
                       "--calib-size", "4", "--quiet", NULL};
    cr_assert_eq(lwqt_run(a), 2);
    char *err = lwqt_err();
    cr_assert(strstr(err, "model.layers.0.self_attn.q_proj: Four-over-Six NVFP4 is implemented with the mse "
                          "multiplier search"), "%s", err);
    free(err);
}

/* "lm_head": "w4a16_nvfp4": the tail's lm_head written weight-only, listed as quantized, not excluded */
Test(recipe_formats, a_weight_only_lm_head_is_written_and_verifies)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "llama", "--layers", "1", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    lwqt_write_str("r.json", "{\"lm_head\":\"w4a16_nvfp4\",\"rules\":[{\"match\":\"*\",\"format\":\"nvfp4\"}]}");
    char out[600], p[700];
    snprintf(out, sizeof out, "%s", lwqt_path("o"));
    const char *a[] = {"quantize", lwqt_path("m"), "-o", out, "--recipe", lwqt_path("r.json"), "--calib-size", "4",
                       "--quiet", NULL};
    int rc = lwqt_run(a);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "%s", err);
    free(err);
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(out, &c, &e), 0, "%s", e.msg);
    const lwq_ckpt_tensor *w = lwq_ckpt_find(&c, "lm_head.weight");
    cr_assert(w && w->dtype == LWQ_U8, "lm_head.weight is not NVFP4-packed");
    cr_assert_not_null(lwq_ckpt_find(&c, "lm_head.weight_scale_2"));
    cr_assert_null(lwq_ckpt_find(&c, "lm_head.input_scale"));
    lwq_ckpt_free(&c);
    snprintf(p, sizeof p, "%s/hf_quant_config.json", out);
    char *hq = lwqt_slurp(p);
    cr_assert(strstr(hq, "\"MIXED_PRECISION\"") && strstr(hq, "\"lm_head\":\t{") && !strstr(hq, "\"lm_head\",") &&
              !strstr(hq, "\"lm_head\"\n"), "%s", hq);
    free(hq);
    verify_ok(out);
}

/* lm_head.weight of the source in `dir` as F32 (mkmodel writes BF16 or F32), and its amax. */
static float source_lm_head_amax(const char *dir)
{
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(dir, &c, &e), 0, "%s", e.msg);
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&c, "lm_head.weight");
    cr_assert(t && (t->dtype == LWQ_F32 || t->dtype == LWQ_BF16));
    void *buf = malloc(t->nbytes);
    cr_assert_eq(lwq_ckpt_read_tensor(&c, t, buf, &e), 0, "%s", e.msg);
    float amax = 0;
    for (uint64_t i = 0; i < t->nbytes / lwq_dtype_size(t->dtype); i++) {
        float x;
        if (t->dtype == LWQ_F32) {
            memcpy(&x, (const char *)buf + 4 * i, 4);
        } else {
            uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
            memcpy(&x, &u, 4);
        }
        amax = fabsf(x) > amax ? fabsf(x) : amax;
    }
    free(buf);
    lwq_ckpt_free(&c);
    return amax;
}

static float scalar_of(const lwq_ckpt *c, const char *name)
{
    const lwq_ckpt_tensor *t = lwq_ckpt_find(c, name);
    cr_assert(t && t->dtype == LWQ_F32 && t->nbytes == 4, "%s is not an F32 scalar", name);
    float v;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_read_tensor(c, t, &v, &e), 0, "%s", e.msg);
    return v;
}

/* a JSON recipe's lm_head on a one-layer llama, quantized; the output is opened into c */
static void quantize_lm_head(const char *lm_head, const char *algorithm, lwq_ckpt *c, float *src_amax)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "llama", "--layers", "1", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    char r[512];
    snprintf(r, sizeof r, "{%s\"lm_head\":\"%s\",\"rules\":[{\"match\":\"*\",\"format\":\"nvfp4\"}]}", algorithm,
             lm_head);
    lwqt_write_str("r.json", r);
    const char *a[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("o"), "--recipe", lwqt_path("r.json"),
                       "--calib-size", "4", "--quiet", NULL};
    int rc = lwqt_run(a);
    char *err = lwqt_err();
    cr_assert_eq(rc, 0, "%s", err);
    free(err);
    *src_amax = source_lm_head_amax(lwqt_path("m"));
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_path("o"), c, &e), 0, "%s", e.msg);
}

/* "lm_head": "w8a16_fp8" (Nemotron-3-Nano-4B's nvfp4_w4a16): the E4M3 weight, weight_scale = amax /
 * 448, no input_scale, listed as quant_algo FP8 as Model Optimizer 0.47 lists it; verify accepts it */
Test(recipe_formats, a_weight_only_fp8_lm_head_is_written_and_verifies)
{
    lwq_ckpt c;
    float amax;
    quantize_lm_head("w8a16_fp8", "", &c, &amax);
    const lwq_ckpt_tensor *w = lwq_ckpt_find(&c, "lm_head.weight");
    cr_assert(w && w->dtype == LWQ_F8_E4M3 && w->ndim == 2, "lm_head.weight is not FP8");
    cr_assert_eq(scalar_of(&c, "lm_head.weight_scale"), amax / 448.0f);
    cr_assert_null(lwq_ckpt_find(&c, "lm_head.input_scale"));
    cr_assert_null(lwq_ckpt_find(&c, "lm_head.weight_scale_2"));
    lwq_ckpt_free(&c);
    char *hq = lwqt_slurp(lwqt_path("o/hf_quant_config.json"));
    cr_assert(strstr(hq, "\"MIXED_PRECISION\"") && strstr(hq, "\"lm_head\":\t{\n\t\t\t\t\"quant_algo\":\t\"FP8\""), "%s",
              hq);
    free(hq);
    verify_ok(lwqt_path("o"));
}

/* "lm_head": "w4a16_nvfp4-four_over_six" (Nemotron-3.5-Lightning's w4a16_nvfp4_4o6): weight-only
 * NVFP4 whose block scales are normalised to 256, weight_scale_2 = amax / 1536 (plain NVFP4: 2688) */
Test(recipe_formats, a_four_over_six_lm_head_is_written_weight_only_and_verifies)
{
    lwq_ckpt c;
    float amax;
    quantize_lm_head("w4a16_nvfp4-four_over_six", "\"algorithm\":{\"method\":\"mse\",\"mse_multipliers\":[1.0,1.5,0.5]},",
                     &c, &amax);
    const lwq_ckpt_tensor *w = lwq_ckpt_find(&c, "lm_head.weight");
    cr_assert(w && w->dtype == LWQ_U8, "lm_head.weight is not NVFP4-packed");
    cr_assert_eq(scalar_of(&c, "lm_head.weight_scale_2"), amax / 1536.0f);
    cr_assert_null(lwq_ckpt_find(&c, "lm_head.input_scale"));
    lwq_ckpt_free(&c);
    char *hq = lwqt_slurp(lwqt_path("o/hf_quant_config.json"));
    cr_assert(strstr(hq, "\"lm_head\":\t{\n\t\t\t\t\"quant_algo\":\t\"W4A16_NVFP4\""), "%s", hq);
    free(hq);
    verify_ok(lwqt_path("o"));
}

/* a weight-only FP8 lm_head is written at the weight's amax only: under mse it is refused, by name */
Test(recipe_formats, a_weight_only_fp8_lm_head_under_mse_is_refused)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "llama", "--layers", "1", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0);
    lwqt_write_str("r.yaml", "metadata: {recipe_type: ptq}\nquantize:\n  algorithm: mse\n  quant_cfg:\n"
                             "    - {quantizer_name: '*', enable: false}\n"
                             "    - {quantizer_name: '*mlp*weight_quantizer', cfg: {num_bits: e4m3}}\n"
                             "    - {quantizer_name: '*mlp*input_quantizer', cfg: {num_bits: e4m3}}\n"
                             "    - {quantizer_name: '*lm_head*weight_quantizer', cfg: {num_bits: e4m3}}\n");
    const char *a[] = {"quantize", lwqt_path("m"), "-o", lwqt_path("o"), "--recipe", lwqt_path("r.yaml"),
                       "--calib-size", "4", "--quiet", NULL};
    cr_assert_eq(lwqt_run(a), 2);
    char *err = lwqt_err();
    cr_assert(strstr(err, "r.yaml: the recipe quantizes lm_head as weight-only FP8 under mse; lwq writes a "
                          "weight-only FP8 lm_head under max only"), "%s", err);
    free(err);
    cr_assert_neq(access(lwqt_path("o/model.safetensors.index.json"), F_OK), 0, "an output was written");
}
