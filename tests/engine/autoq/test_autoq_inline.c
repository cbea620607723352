/* Inline auto_quantize candidates and weight-only Four-over-Six NVFP4 (w4a16_nvfp4_four_over_six) as a candidate: its bytes, its weights, each candidate's own algorithm under a baseline with another, the YAML it can and cannot be written as, Muse-Glimmer's recipe. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/checkpoint/checkpoint.h"
#include "tests/helpers/fixtures.h"
#include "tests/helpers/run.h"

TestSuite(autoq_inline, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 600);

#define QARGS "--calib-size 6 --calib-seq 24 --batch-size 4 --quiet"
#define F46 "w4a16_nvfp4_four_over_six"

static void make_llama(void)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s --arch llama --hidden 128 --layers 3 --heads 4 --kv-heads 2 --vocab 512 "
                         "--quiet", lwqt_bin(), lwqt_path("m")), 0);
}

/* lwq quantize SRC -o <out> <args> <extra>; stderr to stderr.txt */
static int q_src(const char *src, const char *out, const char *args, const char *extra)
{
    return lwqt_sh("%s quantize %s -o %s %s %s 2>%s", lwqt_bin(), src, lwqt_path(out), args, extra,
                   lwqt_path("stderr.txt"));
}

static int aq(const char *out, const char *extra) { return q_src(lwqt_path("m"), out, QARGS, extra); }

static cJSON *json_of(const char *rel)
{
    cJSON *j = lwqt_json(lwqt_path(rel));
    cr_assert_not_null(j, "%s", rel);
    return j;
}

static double cand(const cJSON *g, const char *f, const char *k)
{
    const cJSON *x = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(g, "candidates"), f), k);
    cr_assert(cJSON_IsNumber(x), "no %s.%s", f, k);
    return x->valuedouble;
}

static int same_bytes(const lwq_ckpt *x, const lwq_ckpt_tensor *t, const lwq_ckpt *y, const lwq_ckpt_tensor *u)
{
    if (!u || u->nbytes != t->nbytes || u->dtype != t->dtype)
        return 0;
    lwq_error e = {0};
    void *p = malloc(t->nbytes + 1), *q = malloc(u->nbytes + 1);
    cr_assert(p && q);
    cr_assert_eq(lwq_ckpt_read_tensor(x, t, p, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_ckpt_read_tensor(y, u, q, &e), 0, "%s", e.msg);
    int same = !memcmp(p, q, t->nbytes);
    free(p);
    free(q);
    return same;
}

/* Every decoder-layer weight tensor (weight, weight_scale, weight_scale_2) of checkpoint a equals that of
 * one of the nref checkpoints ref (the first that holds it alike counts it in n[]); the first that
 * equals none in bad, else "" */
static void weights_from(const char *a, const char *const *ref, int nref, int *n, char *bad, size_t cap)
{
    lwq_ckpt x, y[4];
    lwq_error e = {0};
    cr_assert(nref <= 4);
    cr_assert_eq(lwq_ckpt_open(lwqt_path(a), &x, &e), 0, "%s", e.msg);
    for (int k = 0; k < nref; k++) {
        cr_assert_eq(lwq_ckpt_open(lwqt_path(ref[k]), &y[k], &e), 0, "%s", e.msg);
        n[k] = 0;
    }
    bad[0] = 0;
    for (int i = 0; i < x.ntensors && !bad[0]; i++) {
        const lwq_ckpt_tensor *t = &x.tensors[i];
        if (t->layer < 0 || !strstr(t->name, ".weight") || strstr(t->name, "norm"))
            continue;
        int k = 0;
        while (k < nref && !same_bytes(&x, t, &y[k], lwq_ckpt_find(&y[k], t->name)))
            k++;
        if (k < nref)
            n[k]++;
        else
            snprintf(bad, cap, "%s", t->name);
    }
    lwq_ckpt_free(&x);
    for (int k = 0; k < nref; k++)
        lwq_ckpt_free(&y[k]);
}

/* Its bytes are weight-only NVFP4's (no input_scale) */
Test(autoq_inline, its_cost_is_w4a16s)
{
    make_llama();
    cr_assert_eq(aq("o", "--auto-quantize-bits 16 --auto-quantize-formats w4a16_nvfp4," F46), 0, "%s",
                 lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *j = json_of("o/auto_quantize.json");
    const cJSON *g;
    int n = 0;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(j, "groups"))
    {
        cr_assert_eq(cand(g, F46, "bytes"), cand(g, "w4a16_nvfp4", "bytes"));
        cr_assert(cand(g, F46, "score") != cand(g, "w4a16_nvfp4", "score"), "the scores of other weights");
        n++;
    }
    cr_assert_eq(n, 12);
    cJSON_Delete(j);
}

/* Its weights are those of lwq quantize --qformat nvfp4_four_over_six (Four-over-Six block scales, mse
 * over 1.0 and 1.5), written without an input_scale; its YAML names four_over_six and the multipliers
 * and reruns to the same layers */
Test(autoq_inline, its_weights_are_four_over_sixs)
{
    make_llama();
    cr_assert_eq(aq("o", "--kv-cache none --auto-quantize-bits 16 --auto-quantize-formats " F46), 0, "%s",
                 lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(aq("p", "--kv-cache none --qformat nvfp4_four_over_six"), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    char bad[300];
    const char *ref[] = {"p"};
    int nb;
    weights_from("o", ref, 1, &nb, bad, sizeof bad);
    cr_assert_str_eq(bad, "", "%s differs from Four-over-Six's", bad);
    cr_assert_eq(nb, 3 * 7 * 3, "3 layers of 7 linears, 3 weight tensors each: %d", nb);
    cr_assert_eq(lwqt_sh("grep -q input_scale %s", lwqt_path("o/model.safetensors.index.json")), 1);
    char *y = lwqt_slurp(lwqt_path("o/auto_quantize_recipe.yaml"));
    cr_assert(strstr(y, "    method: mse\n    fp8_scale_sweep: false\n    start_multiplier: 1\n    stop_multiplier: 1.5\n"
                        "    step_size: 0.5\n") && strstr(y, "four_over_six: true"), "%s", y);
    free(y);
    char extra[600];
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("o/auto_quantize_recipe.yaml"));
    cr_assert_eq(aq("y", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(lwqt_sh("cd %s && for f in model-layer-*.safetensors; do cmp -s $f %s/$f || exit 1; done",
                         lwqt_path("o"), lwqt_path("y")), 0, "the YAML recipe writes other layers");
}

/* A recipe in Muse-Glimmer's shape for llama's names: a fixed baseline under mse (Four-over-Six on the
 * MLP and attention projections), one space over them with its two inline candidates */
static void write_glimmer(const char *rel)
{
    lwqt_write_str(rel,
                   "metadata:\n  recipe_type: auto_quantize\n"
                   "quantize:\n  effective_bits: 4.5\n"
                   "  algorithm: {method: mse, fp8_scale_sweep: false, start_multiplier: 1.0, stop_multiplier: 1.5, "
                   "step_size: 0.5}\n"
                   "  quant_cfg:\n    - {quantizer_name: '*', enable: false}\n"
                   "    - quantizer_name: '*layers.*.mlp*.weight_quantizer'\n"
                   "      cfg: {num_bits: e2m1, block_sizes: {-1: 16, type: static, scale_bits: e4m3, four_over_six: true}}\n"
                   "    - quantizer_name: '*layers.*.self_attn.*_proj.weight_quantizer'\n"
                   "      cfg: {num_bits: e2m1, block_sizes: {-1: 16, type: static, scale_bits: e4m3, four_over_six: true}}\n"
                   "auto_quantize:\n  constraints:\n    effective_bits: 6\n    cost_model: weight\n"
                   "  module_search_spaces:\n"
                   "    - module_name_patterns: ['*layers.*.mlp*', '*layers.*.self_attn.*_proj']\n"
                   "      candidate_formats:\n"
                   "        - effective_bits: 4.5\n"
                   "          algorithm: {method: mse, fp8_scale_sweep: false, start_multiplier: 1.0, "
                   "stop_multiplier: 1.5, step_size: 0.5}\n"
                   "          quant_cfg:\n            - {quantizer_name: '*', enable: false}\n"
                   "            - quantizer_name: '*weight_quantizer'\n"
                   "              cfg: {num_bits: e2m1, block_sizes: {-1: 16, type: static, scale_bits: e4m3, "
                   "four_over_six: true}}\n"
                   "        - algorithm: max\n"
                   "          quant_cfg:\n            - {quantizer_name: '*', enable: false}\n"
                   "            - {quantizer_name: '*weight_quantizer', cfg: {num_bits: e4m3, axis: null}}\n"
                   "            - {quantizer_name: '*input_quantizer', cfg: {num_bits: e4m3, axis: null}}\n"
                   "      allow_no_quant: true\n"
                   "  auto_quantize_method: gradient\n  score_size: 2\n");
}

/* Each candidate keeps its own algorithm under a baseline with another (mse): a group the search gives
 * FP8 is written as lwq quantize --qformat fp8 (max) writes it, a Four-over-Six group as
 * --qformat nvfp4_four_over_six (one it leaves unquantized as the source); the mix of the two is no one-algorithm YAML, and the report says why */
Test(autoq_inline, each_candidate_keeps_its_own_algorithm)
{
    make_llama();
    write_glimmer("r.yaml");
    char extra[600];
    snprintf(extra, sizeof extra, "--kv-cache none --recipe %s", lwqt_path("r.yaml"));
    cr_assert_eq(aq("o", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(aq("f", "--kv-cache none --qformat fp8"), 0);
    cr_assert_eq(aq("p", "--kv-cache none --qformat nvfp4_four_over_six"), 0);
    char bad[300];
    const char *ref[] = {"f", "p", "m"};
    int n[3];
    weights_from("o", ref, 3, n, bad, sizeof bad);
    cr_assert_str_eq(bad, "", "%s is neither FP8 max's, Four-over-Six's nor the source's", bad);
    cr_assert(n[0] > 0 && n[1] > 0, "at 6 bits the mix holds both (fp8 tensors %d, four-over-six %d)", n[0], n[1]);
    /* FP8 modules under max where the baseline says mse (the bytes alone could not tell: mse over 1.0 and 1.5
     * picks 1.0, max's amax, for these weights) */
    cJSON *j = json_of("o/auto_quantize_recipe.json");
    const cJSON *rule;
    int fp8 = 0;
    cJSON_ArrayForEach(rule, cJSON_GetObjectItem(j, "rules"))
    {
        const cJSON *f = cJSON_GetObjectItem(rule, "format"), *al = cJSON_GetObjectItem(rule, "algo");
        if (cJSON_IsString(f) && !strcmp(f->valuestring, "fp8") && cJSON_GetObjectItem(rule, "match")) {
            cr_assert(cJSON_IsString(al) && !strcmp(al->valuestring, "max"), "an FP8 rule without algo max");
            fp8++;
        }
    }
    cr_assert_gt(fp8, 0);
    cJSON_Delete(j);
    cJSON *r = json_of("o/auto_quantize.json");
    const cJSON *why = cJSON_GetObjectItem(r, "yaml_not_written");
    cr_assert(cJSON_IsString(why) && strstr(why->valuestring, "four_over_six cannot be told apart"), "no reason given");
    cJSON_Delete(r);
}

/* Model Optimizer's Muse-Glimmer-30B recipe: its *lm_head* entry, which offers lm_head Four-over-Six
 * (not among lm_head's searched formats), is refused with the file and line; without it, the recipe runs
 * on a qwen3_5 VLM (its model.language_model.layers names) as its candidates, the linear attention kept
 * unquantized by its baseline, lm_head a fixed group at the baseline's none */
Test(autoq_inline, muse_glimmer_runs_without_its_lm_head_pattern)
{
    char root[600], src[600], recipe[800], calib[600];
    snprintf(root, sizeof root, "%s/tests/data/peers/modelopt_recipes", lwqt_source_dir());
    snprintf(src, sizeof src, "%s/tests/data/peers/src/qwen3_5-f32", lwqt_source_dir());
    snprintf(calib, sizeof calib, "%s/tests/data/peers/calib.jsonl", lwqt_source_dir());
    snprintf(recipe, sizeof recipe, "%s/models/meta-models/Muse-Glimmer-30B/auto_quantize/w4a16_nvfp4_4o6_mixed.yaml",
             root);
    char args[2000];
    snprintf(args, sizeof args, QARGS " --calib %s --recipe-root %s --recipe %s", calib, root, recipe);
    cr_assert_eq(q_src(src, "o", args, ""), 2);
    char *err = lwqt_slurp(lwqt_path("stderr.txt"));
    cr_assert(strstr(err, "w4a16_nvfp4_4o6_mixed.yaml:45: auto_quantize") &&
              strstr(err, "w4a16_nvfp4_4o6_mixed.yaml:51) pattern *lm_head* offers lm_head w4a16_nvfp4_four_over_six, "
                          "which lwq's lm_head search does not have"), "%s", err);
    free(err);
    cr_assert_eq(lwqt_sh("grep -v '^        - \"\\*lm_head\\*\"$' %s > %s", recipe, lwqt_path("g.yaml")), 0);
    snprintf(args, sizeof args, QARGS " --calib %s --recipe-root %s --recipe %s --auto-quantize-bits 17", calib, root,
             lwqt_path("g.yaml"));
    cr_assert_eq(q_src(src, "g", args, ""), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *r = json_of("g/auto_quantize.json");
    const cJSON *g;
    int n = 0;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(r, "groups"))
    {
        const cJSON *c = cJSON_GetObjectItem(g, "candidates");
        if (!cJSON_GetObjectItem(g, "layer")) { /* lm_head: a fixed group at the baseline's none */
            cr_assert(cJSON_GetObjectItem(c, "none") && cJSON_GetArraySize(c) == 1);
            continue;
        }
        cr_assert(cJSON_GetObjectItem(c, F46) && cJSON_GetObjectItem(c, "fp8") && cJSON_GetObjectItem(c, "none") &&
                  cJSON_GetArraySize(c) == 3, "%s", cJSON_GetObjectItem(g, "first_module")->valuestring);
        cr_assert(!strstr(cJSON_GetObjectItem(g, "first_module")->valuestring, "linear_attn"));
        n++;
    }
    cr_assert_eq(n, 6, "layer 0's MLP (2 groups), layer 1's attention and MLP (4)");
    cJSON_Delete(r);
}
