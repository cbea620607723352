/* Model Optimizer's active_moe cost model in lwq quantize --auto-quantize-*: routed experts weigh the active ratio in costs and budget, the ratio's default, its refusals. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/autoq/autoq_internal.h"
#include "layout/checkpoint.h"
#include "tests/helpers/run.h"

TestSuite(autoq_active_moe, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 600);

#define QARGS "--calib-size 6 --calib-seq 24 --batch-size 4 --quiet --qformat fp8 --kv-cache none"
#define ACTIVE "--auto-quantize-cost-model active_moe"

/* qwen3_moe, routed experts (4, top-2) in every layer */
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

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItem(o, k);
    cr_assert(cJSON_IsString(x), "no string %s", k);
    return x->valuestring;
}

/* weight elements of the source's routed-expert linears, counted from its tensor table */
static double expert_elements(void)
{
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_path("m"), &c, &e), 0, "%s", e.msg);
    double n = 0;
    for (int i = 0; i < c.ntensors; i++) {
        const lwq_ckpt_tensor *t = &c.tensors[i];
        size_t l = strlen(t->name);
        if (strstr(t->name, ".mlp.experts.") && l > 7 && !strcmp(t->name + l - 7, ".weight")) {
            double k = 1;
            for (int d = 0; d < t->ndim; d++)
                k *= (double)t->shape[d];
            n += k;
        }
    }
    lwq_ckpt_free(&c);
    cr_assert_gt(n, 0, "the source has routed experts");
    return n;
}

/* Model Optimizer's is_routed_moe_module_name: "experts" as a whole name part, never a shared expert */
Test(autoq_active_moe, routed_names_are_model_optimizers)
{
    cr_assert(lwq_aq_routed_name("model.layers.0.mlp.experts.3.down_proj"));
    cr_assert(lwq_aq_routed_name("model.language_model.layers.1.mlp.experts"));
    cr_assert(lwq_aq_routed_name("experts.0.up_proj"));
    cr_assert(!lwq_aq_routed_name("model.layers.0.mlp.shared_expert.gate_proj"));
    cr_assert(!lwq_aq_routed_name("model.layers.0.mlp.shared_experts.down_proj"));
    cr_assert(!lwq_aq_routed_name("model.layers.0.mlp.myexperts.0.down_proj"));
    cr_assert(!lwq_aq_routed_name("model.layers.0.mlp.experts_gate"));
    cr_assert(!lwq_aq_routed_name("model.layers.0.mlp.gate"));
}

/* Each routed-expert group weighs the ratio, every other group 1; the budget's denominator is the
 * linears' weights weighted alike (Model Optimizer: cost_weight x uncompressed size), and the
 * weighted bytes of the choice (fixed linears at weight 1) stay within bits / 8 of it */
Test(autoq_active_moe, routed_experts_weigh_the_ratio_in_cost_and_budget)
{
    make_moe();
    cr_assert_eq(aq("o", "--auto-quantize-bits 6 --auto-quantize-formats fp8,w4a16_nvfp4 " ACTIVE
                    " --auto-quantize-active-moe-ratio 0.25"), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *r = json_of("o/auto_quantize.json");
    const cJSON *cm = cJSON_GetObjectItem(r, "cost_model");
    cr_assert_str_eq(str(cm, "name"), "active_moe");
    cr_assert_eq(num(cm, "active_moe_expert_ratio"), 0.25);
    double L = num(r, "linear_weights"), W = num(cm, "weighted_linear_weights");
    cr_assert_eq(W, L - 0.75 * expert_elements(), "weighted %g of %g weights", W, L);
    double chosen = 0, wchosen = 0;
    int experts = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(r, "groups"))
    {
        double w = num(g, "cost_weight"), b = num(cJSON_GetObjectItem(cJSON_GetObjectItem(g, "candidates"),
                                                                      str(g, "format")), "bytes");
        int routed = !strcmp(str(g, "group"), "experts");
        experts += routed;
        cr_assert_eq(w, routed ? 0.25 : 1, "layer %g %s weighs %g", num(g, "layer"), str(g, "group"), w);
        chosen += b;
        wchosen += w * b;
    }
    cr_assert_eq(experts, 3);
    double fixed = num(cJSON_GetObjectItem(r, "predicted"), "linear_bytes") - chosen;
    double active = num(cm, "predicted_active_bits_per_weight");
    cr_assert(fabs(active - 8 * (wchosen + fixed) / W) < 1e-6, "active bits %g, recounted %g", active,
              8 * (wchosen + fixed) / W);
    cr_assert_leq(wchosen + fixed, floor(6 * W / 8), "weighted bytes %g over the budget", wchosen + fixed);
    cJSON_Delete(r);
}

/* The ratio defaults to num_experts_per_tok / num_experts (Model Optimizer's inference): 2 / 4 */
Test(autoq_active_moe, the_ratio_defaults_to_top_k_over_experts)
{
    make_moe();
    cr_assert_eq(aq("o", "--auto-quantize-bits 6 --auto-quantize-formats fp8,w4a16_nvfp4 " ACTIVE), 0, "%s",
                 lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *r = json_of("o/auto_quantize.json");
    cr_assert_eq(num(cJSON_GetObjectItem(r, "cost_model"), "active_moe_expert_ratio"), 0.5);
    cJSON_Delete(r);
}

/* At the recipes' ratio (0.03125) the routed experts cost next to nothing against the budget:
 * at 6 bits they all take FP8, which the weight cost model cannot afford them, and the written
 * bits per weight may pass 6 (the budget bounds the active bits) */
Test(autoq_active_moe, cheap_experts_take_the_better_format)
{
    make_moe();
    cr_assert_eq(aq("w", "--auto-quantize-bits 6 --auto-quantize-formats fp8,w4a16_nvfp4"), 0);
    cr_assert_eq(aq("a", "--auto-quantize-bits 6 --auto-quantize-formats fp8,w4a16_nvfp4 " ACTIVE
                    " --auto-quantize-active-moe-ratio 0.03125"), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *w = json_of("w/auto_quantize.json"), *a = json_of("a/auto_quantize.json");
    int w_fp8 = 0, a_fp8 = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(w, "groups")) w_fp8 +=
        !strcmp(str(g, "group"), "experts") && !strcmp(str(g, "format"), "fp8");
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(a, "groups")) a_fp8 +=
        !strcmp(str(g, "group"), "experts") && !strcmp(str(g, "format"), "fp8");
    cr_assert_lt(w_fp8, 3, "the weight cost model gives every expert group FP8 at 6 bits");
    cr_assert_eq(a_fp8, 3, "active_moe: %d of 3 expert groups in FP8", a_fp8);
    cr_assert_gt(num(cJSON_GetObjectItem(a, "written"), "bits_per_weight"), 6);
    cJSON_Delete(w);
    cJSON_Delete(a);
}

/* A model without routed experts in its config has no ratio to infer: refused, naming the keys
 * and the option, nothing written */
Test(autoq_active_moe, a_dense_model_needs_the_ratio)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s --arch llama --hidden 64 --layers 2 --heads 4 --kv-heads 2 --vocab 512 "
                         "--quiet", lwqt_bin(), lwqt_path("m")), 0);
    cr_assert_eq(aq("o", "--auto-quantize-bits 6 " ACTIVE), 2);
    const char *err = lwqt_slurp(lwqt_path("stderr.txt"));
    cr_assert(strstr(err, "num_experts_per_tok") && strstr(err, "--auto-quantize-active-moe-ratio"), "%s", err);
    cr_assert_neq(lwqt_sh("test -e %s", lwqt_path("o/auto_quantize.json")), 0);
}

/* A GB budget counts bytes on disk: active_moe is refused with it */
Test(autoq_active_moe, a_gb_budget_is_refused)
{
    make_moe();
    cr_assert_eq(aq("o", "--auto-quantize-gb 0.001 " ACTIVE), 2);
    cr_assert(strstr(lwqt_slurp(lwqt_path("stderr.txt")), "--auto-quantize-gb"));
}

/* A ratio without the active_moe cost model, or outside (0, 1], is refused */
Test(autoq_active_moe, a_stray_or_bad_ratio_is_refused)
{
    make_moe();
    cr_assert_eq(aq("o", "--auto-quantize-bits 6 --auto-quantize-active-moe-ratio 0.25"), 2);
    cr_assert(strstr(lwqt_slurp(lwqt_path("stderr.txt")), "needs cost model active_moe"));
    cr_assert_eq(aq("o", "--auto-quantize-bits 6 " ACTIVE " --auto-quantize-active-moe-ratio 1.5"), 2);
    cr_assert_eq(aq("o", "--auto-quantize-bits 6 " ACTIVE " --auto-quantize-active-moe-ratio 0"), 2);
    cr_assert_eq(aq("o", "--auto-quantize-bits 6 --auto-quantize-cost-model bytes"), 2);
}

/* A base recipe that leaves the routed experts unquantized puts them in no search group, where
 * lwq's per-layer fixed bytes would count them at weight 1: refused, naming the expert and the
 * recipe, nothing written */
Test(autoq_active_moe, a_routed_expert_outside_the_search_is_refused)
{
    make_moe();
    FILE *f = fopen(lwqt_path("base.json"), "w");
    cr_assert_not_null(f);
    fputs("{\"name\": \"fp8_no_experts\", \"algorithm\": {\"method\": \"max\"}, \"kv_cache\": \"none\", \"rules\": "
          "[{\"match\": \"*\", \"format\": \"fp8\"}, {\"match\": \"*.mlp.gate\", \"enable\": false}, "
          "{\"match\": \"*.experts.*\", \"enable\": false}]}\n", f);
    fclose(f);
    char extra[600];
    snprintf(extra, sizeof extra, "--recipe %s --auto-quantize-bits 7 --auto-quantize-formats fp8,w4a16_nvfp4 " ACTIVE,
             lwqt_path("base.json"));
    cr_assert_eq(lwqt_sh("%s quantize %s -o %s --calib-size 6 --calib-seq 24 --batch-size 4 --quiet %s 2>%s",
                         lwqt_bin(), lwqt_path("m"), lwqt_path("o"), extra, lwqt_path("stderr.txt")), 2);
    const char *err = lwqt_slurp(lwqt_path("stderr.txt"));
    cr_assert(strstr(err, "routed expert model.layers.0.mlp.experts.") && strstr(err, "in no search group"), "%s", err);
    cr_assert_neq(lwqt_sh("test -e %s", lwqt_path("o/auto_quantize.json")), 0);
}
