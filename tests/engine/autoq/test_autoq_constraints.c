/* lwq quantize --auto-quantize-*: over a sweep of budgets the bits per weight counted here from OUT's tensors never exceed the budget; routers are never quantized, q/k/v and a layer's routed experts share one format, the base recipe's exclusions and calibration settings still apply. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "layout/checkpoint.h"
#include "tests/helpers/run.h"

TestSuite(autoq_constraints, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 600);

#define QARGS "--calib-size 6 --calib-seq 24 --batch-size 4 --quiet"
#define LAYERS 3
#define EXPERTS 4

static void make_moe(void)
{
    cr_assert_eq(lwqt_sh("%s mkmodel %s --arch qwen3_moe --experts %d --top-k 2 --hidden 128 --layers %d --heads 4 "
                         "--kv-heads 2 --vocab 512 --quiet", lwqt_bin(), lwqt_path("m"), EXPERTS, LAYERS), 0);
}

/* lwq quantize m -o <out> QARGS <extra>; the exit status, stderr in stderr.txt */
static int aq(const char *out, const char *extra)
{
    return lwqt_sh("%s quantize %s -o %s " QARGS " %s 2>%s", lwqt_bin(), lwqt_path("m"), lwqt_path(out), extra,
                   lwqt_path("stderr.txt"));
}

/* Bits per weight of OUT, counted from the tensors: 8 x the bytes OUT holds for every decoder-layer
 * linear (a 2-D "model.layers.*.weight" of the source: routers and unquantized ones included) with
 * its scales, over the source's elements of those weights. */
static double counted_bits(const char *out)
{
    static const char *const parts[] = {".weight", ".weight_scale", ".weight_scale_2", ".input_scale"};
    lwq_error e = {0};
    lwq_ckpt s, q;
    cr_assert_eq(lwq_ckpt_open(lwqt_path("m"), &s, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_ckpt_open(lwqt_path(out), &q, &e), 0, "%s", e.msg);
    double bytes = 0, elems = 0;
    for (int i = 0; i < s.ntensors; i++) {
        const lwq_ckpt_tensor *t = &s.tensors[i];
        size_t n = strlen(t->name);
        if (t->layer < 0 || t->ndim != 2 || n < 7 || strcmp(t->name + n - 7, ".weight"))
            continue;
        elems += (double)t->shape[0] * (double)t->shape[1];
        for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
            char name[512];
            snprintf(name, sizeof name, "%.*s%s", (int)(n - 7), t->name, parts[k]);
            const lwq_ckpt_tensor *o = lwq_ckpt_find(&q, name);
            cr_assert(o || k, "%s: no %s", out, name);
            bytes += o ? (double)o->nbytes : 0;
        }
    }
    lwq_ckpt_free(&q);
    lwq_ckpt_free(&s);
    cr_assert_gt(elems, 0);
    return 8 * bytes / elems;
}

/* OUT/hf_quant_config.json's quantized_layers (NULL when it has none: a uniform export) */
static cJSON *quantized_layers(const char *out, cJSON **root)
{
    char f[256];
    snprintf(f, sizeof f, "%s/hf_quant_config.json", out);
    *root = lwqt_json(lwqt_path(f));
    const cJSON *q = cJSON_GetObjectItem(*root, "quantization");
    cr_assert_not_null(q, "%s: no quantization", f);
    return cJSON_GetObjectItem(q, "quantized_layers");
}

/* The quant_algo OUT gives module `name`: "" when it is not quantized. */
static const char *algo_of(const cJSON *ql, const char *name)
{
    const cJSON *m = ql ? cJSON_GetObjectItem(ql, name) : NULL;
    const cJSON *a = m ? cJSON_GetObjectItem(m, "quant_algo") : NULL;
    return cJSON_IsString(a) ? a->valuestring : "";
}

static double written_bits(const char *out)
{
    char f[256];
    snprintf(f, sizeof f, "%s/auto_quantize.json", out);
    cJSON *j = lwqt_json(lwqt_path(f));
    double b = lwqt_num(cJSON_GetObjectItem(j, "written"), "bits_per_weight");
    cJSON_Delete(j);
    return b;
}

Test(autoq_constraints, written_bits_never_above_the_budget)
{
    make_moe();
    cr_assert_eq(aq("a6", "--auto-quantize-bits 6"), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    char sc[600];
    snprintf(sc, sizeof sc, "--auto-quantize-scores %s.layerwise_resume/auto_quantize/scores.json", lwqt_path("a6"));
    /* from just above the least mix (4.5 here) to past all-FP8, one pass 1 for all */
    static const double budgets[] = {4.55, 4.7, 4.9, 5.1, 5.3, 5.6, 6, 6.3, 6.7, 7.2, 7.7, 8.3, 9, 12};
    double prev = 0;
    int distinct = 0;
    for (size_t k = 0; k < sizeof budgets / sizeof budgets[0]; k++) {
        char out[32], extra[700];
        snprintf(out, sizeof out, "b%zu", k);
        snprintf(extra, sizeof extra, "--auto-quantize-bits %g %s", budgets[k], sc);
        cr_assert_eq(aq(out, extra), 0, "budget %g: %s", budgets[k], lwqt_slurp(lwqt_path("stderr.txt")));
        double c = counted_bits(out), w = written_bits(out);
        cr_assert_leq(c, budgets[k], "budget %g: %.6f bits per weight in the output", budgets[k], c);
        /* auto_quantize.json gives 6 decimals */
        cr_assert(fabs(c - w) < 1e-6, "budget %g: the tensors hold %.9f bits per weight, auto_quantize.json says %.9f",
                  budgets[k], c, w);
        distinct += c != prev;
        prev = c;
    }
    /* the sweep crosses the budget's boundary many times, not one mix for all */
    cr_assert_geq(distinct, 6, "only %d different mixes over the sweep", distinct);
}

Test(autoq_constraints, routers_never_quantized_fused_groups_and_experts_share_a_format)
{
    make_moe();
    /* a base recipe that would quantize the routers too */
    lwqt_write_str("all.json", "{\"rules\": [{\"match\": \"*\", \"format\": \"nvfp4\"}]}");
    static const char *const budgets[] = {"5.2", "6", "7"};
    int mixed = 0;
    for (int b = 0; b < 3; b++) {
        char out[16], extra[700];
        snprintf(out, sizeof out, "o%d", b);
        snprintf(extra, sizeof extra, "--recipe %s --auto-quantize-bits %s", lwqt_path("all.json"), budgets[b]);
        cr_assert_eq(aq(out, extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
        cJSON *root;
        const cJSON *ql = quantized_layers(out, &root);
        cr_assert_not_null(ql, "budget %s: not a mixed export", budgets[b]);
        lwq_error e = {0};
        lwq_ckpt q;
        cr_assert_eq(lwq_ckpt_open(lwqt_path(out), &q, &e), 0, "%s", e.msg);
        const char *seen = NULL;
        for (int L = 0; L < LAYERS; L++) {
            char n[128], m[128];
            snprintf(n, sizeof n, "model.layers.%d.mlp.gate", L);
            cr_assert_str_eq(algo_of(ql, n), "", "budget %s: router %s is quantized", budgets[b], n);
            snprintf(m, sizeof m, "%s.weight_scale", n);
            cr_assert_null(lwq_ckpt_find(&q, m), "budget %s: %s in the output", budgets[b], m);
            snprintf(m, sizeof m, "%s.weight", n);
            const lwq_ckpt_tensor *t = lwq_ckpt_find(&q, m);
            cr_assert(t && t->dtype == LWQ_BF16, "budget %s: %s is not the source's BF16", budgets[b], m);
            /* q/k/v: one format */
            snprintf(n, sizeof n, "model.layers.%d.self_attn.q_proj", L);
            const char *qa = algo_of(ql, n);
            for (int p = 0; p < 2; p++) {
                snprintf(n, sizeof n, "model.layers.%d.self_attn.%s_proj", L, p ? "v" : "k");
                cr_assert_str_eq(algo_of(ql, n), qa, "budget %s: %s is not as q_proj (%s)", budgets[b], n, qa);
            }
            /* every routed expert of the layer, gate/up/down: one format */
            snprintf(n, sizeof n, "model.layers.%d.mlp.experts.0.gate_proj", L);
            const char *ea = algo_of(ql, n);
            static const char *const proj[] = {"gate", "up", "down"};
            for (int x = 0; x < EXPERTS; x++)
                for (int p = 0; p < 3; p++) {
                    snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.%s_proj", L, x, proj[p]);
                    cr_assert_str_eq(algo_of(ql, n), ea, "budget %s: %s is not as expert 0 (%s)", budgets[b], n, ea);
                }
            seen = seen ? seen : qa;
            mixed += strcmp(qa, seen) || strcmp(ea, seen);
        }
        lwq_ckpt_free(&q);
        cJSON_Delete(root);
    }
    cr_assert_gt(mixed, 0, "every group took one format at every budget: nothing was searched");
}

Test(autoq_constraints, the_base_recipe_exclusions_still_apply)
{
    make_moe();
    /* --qformat's exclusions: nvfp4_mlp_only leaves attention alone (in BF16, so the least is 8.37) */
    cr_assert_eq(aq("mlp", "--qformat nvfp4_mlp_only --auto-quantize-bits 10"), 0, "%s",
                 lwqt_slurp(lwqt_path("stderr.txt")));
    cJSON *root;
    const cJSON *ql = quantized_layers("mlp", &root);
    const cJSON *m;
    int n = 0;
    cJSON_ArrayForEach(m, ql)
    {
        cr_assert_null(strstr(m->string, "self_attn"), "%s is quantized under nvfp4_mlp_only", m->string);
        n++;
    }
    cJSON_Delete(root);
    cr_assert_gt(n, 0);
    /* a recipe's exclusion: layer 1 is not searched and stays unquantized */
    lwqt_write_str("r.json", "{\"rules\": [{\"match\": \"*\", \"format\": \"nvfp4\"}, {\"match\": \"*.layers.1.*\", "
                             "\"format\": \"none\"}]}");
    char extra[700];
    snprintf(extra, sizeof extra, "--recipe %s --auto-quantize-bits 10", lwqt_path("r.json")); /* least 8.36 */
    cr_assert_eq(aq("x1", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    ql = quantized_layers("x1", &root);
    n = 0;
    cJSON_ArrayForEach(m, ql)
    {
        cr_assert_null(strstr(m->string, "layers.1."), "%s is quantized; the recipe excludes layer 1", m->string);
        n++;
    }
    cJSON_Delete(root);
    cr_assert_gt(n, 0);
    cJSON *j = lwqt_json(lwqt_path("x1/auto_quantize.json"));
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(j, "groups"))
        cr_assert_neq(lwqt_num(g, "layer"), 1, "a group of layer 1 was searched");
    cJSON_Delete(j);
}

/* The bytes of tensor `name` in OUT; *n its size. */
static void *tensor_bytes(const char *out, const char *name, uint64_t *n)
{
    lwq_error e = {0};
    lwq_ckpt q;
    cr_assert_eq(lwq_ckpt_open(lwqt_path(out), &q, &e), 0, "%s", e.msg);
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&q, name);
    cr_assert_not_null(t, "%s: no %s", out, name);
    void *b = malloc(t->nbytes);
    cr_assert_not_null(b);
    cr_assert_eq(lwq_ckpt_read_tensor(&q, t, b, &e), 0, "%s", e.msg);
    *n = t->nbytes;
    lwq_ckpt_free(&q);
    return b;
}

Test(autoq_constraints, the_base_recipe_calibration_settings_still_apply)
{
    make_moe();
    lwqt_write_str("mse.json", "{\"rules\": [{\"match\": \"*\", \"format\": \"nvfp4\", \"algo\": \"mse\"}, "
                               "{\"match\": \"*.mlp.gate\", \"format\": \"none\"}]}");
    char extra[700];
    snprintf(extra, sizeof extra, "--recipe %s --auto-quantize-bits 5.2", lwqt_path("mse.json"));
    cr_assert_eq(aq("s", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    cr_assert_eq(aq("x", "--auto-quantize-bits 5.2"), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    snprintf(extra, sizeof extra, "--recipe %s", lwqt_path("mse.json"));
    cr_assert_eq(aq("u", extra), 0, "%s", lwqt_slurp(lwqt_path("stderr.txt")));
    /* an NVFP4 choice of both searches: its block scales are the mse recipe's, not max's */
    cJSON *rs, *rx;
    const cJSON *qs = quantized_layers("s", &rs), *qx = quantized_layers("x", &rx);
    const cJSON *m;
    int compared = 0;
    cJSON_ArrayForEach(m, qs)
    {
        if (strcmp(algo_of(qs, m->string), "NVFP4") || strcmp(algo_of(qx, m->string), "NVFP4"))
            continue;
        char name[300];
        size_t kl = strlen(m->string);
        /* a layer's fused experts are one entry (Model Optimizer's listing): its first expert's */
        snprintf(name, sizeof name, kl > 8 && !strcmp(m->string + kl - 8, ".experts") ? "%s.0.gate_proj.weight_scale"
                                                                                       : "%s.weight_scale", m->string);
        uint64_t ns, nu, nx;
        void *bs = tensor_bytes("s", name, &ns), *bu = tensor_bytes("u", name, &nu), *bx = tensor_bytes("x", name, &nx);
        cr_assert(ns == nu && !memcmp(bs, bu, ns), "%s: the search's differs from the mse recipe's", name);
        compared += ns == nx && memcmp(bs, bx, ns);
        free(bs);
        free(bu);
        free(bx);
    }
    cJSON_Delete(rs);
    cJSON_Delete(rx);
    cr_assert_gt(compared, 0, "no NVFP4 module of both searches whose mse scales differ from max's");
}
