/* Weight-only NVFP4 (w4a16_nvfp4) as a candidate of lwq quantize --auto-quantize-*: its exact cost, its weight-only score, its weight-only export, its scores file, hf_ptq's spelling. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "layout/checkpoint.h"
#include "tests/helpers/run.h"

TestSuite(autoq_w4a16, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 600);

#define QARGS "--calib-size 6 --calib-seq 24 --batch-size 4 --quiet"

/* a qwen3_moe model with a dense layer 0 and routed experts in layers 1 and 2 (transformers holds
 * them fused: one quantized_layers entry per layer) */
static void make_moe(void)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s --arch qwen3_moe --experts 4 --top-k 2 --hidden 128 --layers 3 --heads 4 "
                         "--kv-heads 2 --vocab 512 --quiet", lwqt_bin(), lwqt_path("m")), 0);
}

static int aq(const char *out, const char *extra)
{
    return lwqt_sh("%s quantize %s -o %s " QARGS " %s 2>%s", lwqt_bin(), lwqt_path("m"), lwqt_path(out), extra,
                   lwqt_path("stderr.txt"));
}

static cJSON *json_of(const char *rel)
{
    cJSON *j = lwqt_json(lwqt_path(rel));
    cr_assert_not_null(j, "%s", rel);
    return j;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItem(o, k);
    cr_assert(cJSON_IsNumber(x), "no number %s", k);
    return x->valuedouble;
}

/* Every group's w4a16_nvfp4 candidate costs its NVFP4 bytes less one input_scale (4 bytes) per
 * module: the packed weight, the block scales and weight_scale_2 as NVFP4 writes them (4.5 bits
 * per weight, Model Optimizer's effective bits for both). */
Test(autoq_w4a16, its_cost_is_nvfp4_without_the_input_scales)
{
    make_moe();
    cr_assert_eq(aq("o", "--auto-quantize-bits 16 --auto-quantize-formats nvfp4,w4a16_nvfp4"), 0, "%s",
                 lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *j = json_of("o/auto_quantize.json");
    const cJSON *g;
    int n = 0;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(j, "groups"))
    {
        const cJSON *c = cJSON_GetObjectItem(g, "candidates");
        double nv = num(cJSON_GetObjectItem(c, "nvfp4"), "bytes"), wo = num(cJSON_GetObjectItem(c, "w4a16_nvfp4"), "bytes");
        double members = num(g, "modules");
        cr_assert_eq(wo, nv - 4 * members, "layer %g %s: w4a16 %g bytes, nvfp4 %g, %g modules", num(g, "layer"),
                     cJSON_GetObjectItem(g, "group")->valuestring, wo, nv, members);
        n++;
    }
    cr_assert_geq(n, 9, "3 layers of q/k/v, o, gate/up or experts, down");
    cJSON_Delete(j);
}

/* Its score is the replay with the weights dequantized and the inputs unquantized: the same
 * weights as NVFP4, without NVFP4's activation error, so below NVFP4's for every group, and above 0 */
Test(autoq_w4a16, its_score_leaves_out_the_activation_error)
{
    make_moe();
    cr_assert_eq(aq("o", "--auto-quantize-bits 16 --auto-quantize-formats nvfp4,w4a16_nvfp4"), 0, "%s",
                 lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *j = json_of("o/auto_quantize.json");
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(j, "groups"))
    {
        const cJSON *c = cJSON_GetObjectItem(g, "candidates");
        double nv = num(cJSON_GetObjectItem(c, "nvfp4"), "score"), wo = num(cJSON_GetObjectItem(c, "w4a16_nvfp4"), "score");
        cr_assert(wo > 0 && wo < nv, "layer %g %s: w4a16 score %g, nvfp4 %g", num(g, "layer"),
                  cJSON_GetObjectItem(g, "group")->valuestring, wo, nv);
    }
    cJSON_Delete(j);
}

/* A group the search gives w4a16_nvfp4 is written weight-only (NVFP4 weight and scales, no
 * input_scale), listed W4A16_NVFP4 in quantized_layers; the written bits are the predicted ones,
 * under the budget; lwq verify accepts it; its YAML recipe gives the same tensors again. */
Test(autoq_w4a16, a_chosen_w4a16_group_is_written_weight_only)
{
    make_moe();
    cr_assert_eq(aq("o", "--qformat fp8 --kv-cache none --auto-quantize-bits 6 --auto-quantize-formats "
                    "fp8,w4a16_nvfp4"), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *r = json_of("o/auto_quantize.json");
    double pred = num(cJSON_GetObjectItem(r, "predicted"), "bits_per_weight");
    double wrote = num(cJSON_GetObjectItem(r, "written"), "bits_per_weight");
    cr_assert(pred == wrote && wrote <= 6, "predicted %g, written %g", pred, wrote);
    cJSON *h = json_of("o/hf_quant_config.json");
    const cJSON *ql = cJSON_GetObjectItem(cJSON_GetObjectItem(h, "quantization"), "quantized_layers");
    lwq_error e = {0};
    lwq_ckpt q;
    cr_assert_eq(lwq_ckpt_open(lwqt_path("o"), &q, &e), 0, "%s", e.msg);
    int wo = 0, fp8 = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ql)
    {
        const char *a = cJSON_GetObjectItem(m, "quant_algo")->valuestring;
        /* the fused experts' entry stands for expert 0's projections here */
        char mod[300];
        size_t kl = strlen(m->string);
        snprintf(mod, sizeof mod, kl > 8 && !strcmp(m->string + kl - 8, ".experts") ? "%s.0.down_proj" : "%s",
                 m->string);
        int has_in = lwq_ckpt_find_in(&q, mod, ".input_scale") != NULL;
        if (!strcmp(a, "W4A16_NVFP4")) {
            wo++;
            cr_assert(!has_in && lwq_ckpt_find_in(&q, mod, ".weight_scale_2"), "%s: W4A16 has no input_scale", mod);
            cr_assert_eq(cJSON_GetObjectItem(m, "group_size")->valueint, 16);
        } else {
            cr_assert_str_eq(a, "FP8", "%s", m->string);
            fp8++;
            cr_assert(has_in, "%s: FP8 keeps its input_scale", mod);
        }
    }
    lwq_ckpt_free(&q);
    cr_assert(wo > 0 && fp8 > 0, "at 6 bits the mix holds both (w4a16 %d, fp8 %d)", wo, fp8);
    cJSON_Delete(h);
    cJSON_Delete(r);
    cr_assert_eq(lwqt_sh("%s verify %s >/dev/null", lwqt_bin(), lwqt_path("o")), 0);
    char extra[600];
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("o/auto_quantize_recipe.yaml"));
    cr_assert_eq(aq("y", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(lwqt_sh("cd %s && for f in model-layer-*.safetensors; do cmp -s $f %s/$f || exit 1; done",
                         lwqt_path("o"), lwqt_path("y")), 0, "the YAML recipe writes other layers");
}

/* scores.json names the candidate, and a finished pass 1 serves another budget */
Test(autoq_w4a16, its_scores_are_kept_and_reused)
{
    make_moe();
    cr_assert_eq(aq("o", "--qformat fp8 --auto-quantize-bits 7 --auto-quantize-formats fp8,w4a16_nvfp4"), 0);
    cr_assert_eq(lwqt_sh("grep -q '\"w4a16_nvfp4\"' %s", lwqt_path("o.layerwise_resume/auto_quantize/scores.json")), 0);
    char extra[700];
    snprintf(extra, sizeof extra, "--qformat fp8 --auto-quantize-bits 5.5 --auto-quantize-formats fp8,w4a16_nvfp4 "
             "--auto-quantize-scores %s", lwqt_path("o.layerwise_resume/auto_quantize/scores.json"));
    cr_assert_eq(aq("p", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *r = json_of("p/auto_quantize.json");
    cr_assert_leq(num(cJSON_GetObjectItem(r, "written"), "bits_per_weight"), 5.5);
    cJSON_Delete(r);
    /* without the candidate the scores are another search's */
    snprintf(extra, sizeof extra, "--qformat fp8 --auto-quantize-bits 7 --auto-quantize-formats fp8 "
             "--auto-quantize-scores %s", lwqt_path("o.layerwise_resume/auto_quantize/scores.json"));
    cr_assert_eq(aq("x", extra), 2);
}

/* hf_ptq's --qformat w4a16_nvfp4,fp8 --auto_quantize_bits is the same search (none added, as Model
 * Optimizer always adds it) */
Test(autoq_w4a16, hf_ptq_spelling_gives_the_same_bytes)
{
    make_moe();
    cr_assert_eq(aq("a", "--qformat fp8 --auto-quantize-bits 6 --auto-quantize-formats fp8,w4a16_nvfp4,none "
                    "--auto-quantize-score-size 1"), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(lwqt_sh("%s quantize --pyt_ckpt_path %s --export_path %s --qformat w4a16_nvfp4,fp8 "
                         "--auto_quantize_bits 6 --auto_quantize_score_size 1 --calib_size 6 --calib_seq 24 "
                         "--batch_size 4 --quiet 2>%s", lwqt_bin(), lwqt_path("m"), lwqt_path("b"),
                         lwqt_path("stderr.txt")), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(lwqt_sh("diff -r %s %s >/dev/null", lwqt_path("a"), lwqt_path("b")), 0);
}
