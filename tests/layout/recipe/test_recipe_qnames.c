/* Recipe globs against the names Model Optimizer 0.47 sees (transformers' in-memory modules), checked against its own quantizer lists (tests/data/peers/qnames). */
#include <criterion/criterion.h>
#include <limits.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sys/file.h"
#include "layout/arch/arch_qnames.h"
#include "layout/recipe/recipe_yaml.h"
#include "tests/helpers/craft.h"
#include "tests/helpers/fixtures.h"

static const char *data_root(void)
{
    static char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tests/data/peers", lwqt_source_dir());
    return path;
}

Test(recipe_qnames, fused_expert_lists_match_as_model_optimizer_normalises_them)
{
    /* conversion.py _normalize_fused_experts_quantizer_name: weight/input_quantizer[s].N -> singular */
    const char *w5 = "model.layers.3.mlp.experts.gate_up_proj_weight_quantizers.5";
    cr_assert(lwq_qname_match("*weight_quantizer", w5));
    cr_assert(lwq_qname_match("*mlp.experts.*weight_quantizer", w5));
    cr_assert(lwq_qname_match("*quantizers.[0-5]", w5));
    cr_assert(!lwq_qname_match("*quantizers.[0-4]", w5));
    cr_assert(!lwq_qname_match("*experts.5.*", w5), "no pattern singles out an expert by experts.E.");
    cr_assert(lwq_qname_match("*weight_quantizer.x", "a.weight_quantizers.12.x"), "an index before a dot too");
    cr_assert(!lwq_qname_match("*weight_quantizer", "a.weight_quantizers.1x"), "not a whole index");
    cr_assert(!lwq_qname_match("*up_proj.weight_quantizer", w5));
}

/* Model Optimizer's quantizer names of one source, or NULL (the test then skips naming it). */
static cJSON *mo_names(const char *src)
{
    char p[1200], *s = NULL;
    lwq_error e = {0};
    snprintf(p, sizeof p, "%s/qnames/%s.json", data_root(), src);
    if (lwq_file_read_all(p, 1u << 22, &s, NULL, &e) != 0)
        return NULL;
    cJSON *j = cJSON_Parse(s);
    free(s);
    cr_assert_not_null(j, "%s: not JSON", p);
    return j;
}

static int has(const cJSON *list, const char *name)
{
    const cJSON *x;
    cJSON_ArrayForEach(x, list)
        if (!strcmp(x->valuestring, name))
            return 1;
    return 0;
}

/* Every quantizer lwq resolves a planned module's choice with exists under that name in Model
 * Optimizer's model, and every per-expert weight quantizer Model Optimizer has is one lwq names. */
static void check_source(const char *src)
{
    cJSON *j = mo_names(src);
    if (!j) {
        cr_skip_test("tests/data/peers/qnames/%s.json is missing (peers/quantizer_names.py)", src);
        return;
    }
    const cJSON *list = cJSON_GetObjectItem(j, "quantizers");
    char cfgp[1200];
    snprintf(cfgp, sizeof cfgp, "%s/src/%s/config.json", data_root(), src);
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(lwq_config_load(cfgp, &c, &e), 0, "%s", e.msg);
    int nexpert = 0, seen_expert = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, list)
        nexpert += strstr(x->valuestring, "_weight_quantizers.") != NULL;
    for (int L = 0; L < c.num_hidden_layers; L++) {
        lwq_arch_layer p;
        cr_assert_eq(lwq_arch_layer_plan(&c, L, &p, &e), 0, "%s", e.msg);
        for (int i = 0; i < p.nlinears; i++) {
            const lwq_arch_linear *l = &p.linears[i];
            if (l->is_router)
                continue;
            lwq_qnames q;
            lwq_arch_qnames(&p, l, &q);
            for (int k = 0; k < q.nweight; k++)
                cr_assert(has(list, q.weight[k]) || (k == 1 && q.nweight == 2), "%s: %s (of %s) is not a Model "
                          "Optimizer quantizer", src, q.weight[k], l->name);
            seen_expert += q.nweight == 2 && strstr(q.weight[0], "_weight_quantizers.") != NULL;
            cr_assert(has(list, q.input), "%s: %s (of %s)", src, q.input, l->name);
            cr_assert(!q.output[0] || has(list, q.output), "%s: %s (of %s)", src, q.output, l->name);
            if (l->role == LWQ_ROLE_O && p.mixer != LWQ_MIXER_MAMBA2) {
                char attn[LWQ_ARCH_NAME_MAX], kq[LWQ_QNAME_MAX + 20];
                snprintf(attn, sizeof attn, "%s", l->name);
                *strrchr(attn, '.') = 0;
                lwq_qnames aq;
                lwq_arch_qnames_module(c.family, attn, &aq);
                snprintf(kq, sizeof kq, "%s.k_bmm_quantizer", aq.base);
                cr_assert(has(list, kq), "%s: %s (of %s)", src, kq, attn);
            }
        }
        lwq_arch_layer_free(&p);
    }
    /* gate and up of one expert are one quantizer in memory: each list entry is named twice */
    cr_assert(seen_expert >= nexpert, "%s: Model Optimizer has %d per-expert weight quantizers, lwq named %d", src,
              nexpert, seen_expert);
    char em[LWQ_ARCH_NAME_MAX];
    lwq_names_full(&c.names, "model.embed_tokens", em, sizeof em);
    lwq_qnames eq;
    lwq_arch_qnames_module(c.family, em, &eq);
    cr_assert(has(list, eq.weight[0]), "%s: %s (of %s)", src, eq.weight[0], em);
    lwq_config_free(&c);
    cJSON_Delete(j);
}

Test(recipe_qnames, mixtral_names_are_model_optimizers) { check_source("mixtral-f32"); }
Test(recipe_qnames, minimax_m2_names_are_model_optimizers) { check_source("minimax_m2-f32"); }
Test(recipe_qnames, qwen3_moe_names_are_model_optimizers) { check_source("qwen3_moe-f32"); }
Test(recipe_qnames, deepseek_v3_names_are_model_optimizers) { check_source("deepseek_v3-f32"); }
Test(recipe_qnames, deepseek_v32_names_are_model_optimizers) { check_source("deepseek_v32-f32"); }
Test(recipe_qnames, glm4_moe_names_are_model_optimizers) { check_source("glm4_moe-f32"); }
Test(recipe_qnames, glm_moe_dsa_names_are_model_optimizers) { check_source("glm_moe_dsa-f32"); }
Test(recipe_qnames, mistral4_names_are_model_optimizers) { check_source("mistral4-f32"); }
Test(recipe_qnames, nemotron_h_names_are_model_optimizers) { check_source("nemotron_h-f32"); }
Test(recipe_qnames, nemotron_h_latent_names_are_model_optimizers) { check_source("nemotron_h_latent-f32"); }
Test(recipe_qnames, qwen3_next_names_are_model_optimizers) { check_source("qwen3_next-f32"); }
Test(recipe_qnames, qwen3_5_moe_names_are_model_optimizers) { check_source("qwen3_5_moe-f32"); }
Test(recipe_qnames, qwen3_5_moe_text_names_are_model_optimizers) { check_source("qwen3_5_moe_text-f32"); }
Test(recipe_qnames, llama_names_are_model_optimizers) { check_source("llama-f32"); }

/* A recipe read from `yaml` (a Model Optimizer PTQ recipe): what it gives linear `hub` of layer L of
 * source src, under the in-memory names (as lwq quantize resolves it) and under the checkpoint's. */
typedef struct picked {
    lwq_qformat mem, hub;
    lwq_qformat mem_weight; /* the weight quantizer's format in memory (a split choice keeps it) */
} picked;

static picked pick(const char *src, const char *yaml, int L, const char *hub)
{
    lwqt_setup();
    cr_assert_eq(chdir(lwqt_dir), 0);
    lwqt_write_str("r.yaml", yaml);
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0, "%s", e.msg);
    char cfgp[1200];
    snprintf(cfgp, sizeof cfgp, "%s/src/%s/config.json", data_root(), src);
    lwq_model_config c;
    cr_assert_eq(lwq_config_load(cfgp, &c, &e), 0, "%s", e.msg);
    lwq_arch_layer p;
    cr_assert_eq(lwq_arch_layer_plan(&c, L, &p, &e), 0, "%s", e.msg);
    const lwq_arch_linear *l = lwq_arch_find_linear(&p, hub);
    cr_assert_not_null(l, "%s: no %s in layer %d", src, hub, L);
    lwq_qnames q;
    lwq_arch_qnames(&p, l, &q);
    lwq_quant_choice m = lwq_recipe_resolve_names(&r, &q, 0);
    picked out = {m.format, lwq_recipe_resolve_module(&r, hub, 0).format, m.weight_format};
    lwq_arch_layer_free(&p);
    lwq_config_free(&c);
    lwq_recipe_free(&r);
    lwqt_teardown();
    return out;
}

/* One FP8 entry whose glob names `pattern`'s quantizers (weight and input), everything else off. */
static const char *recipe_of(const char *pattern, char *buf, size_t cap)
{
    snprintf(buf, cap,
             "metadata: {recipe_type: ptq}\nquantize:\n  algorithm: max\n  quant_cfg:\n"
             "    - {quantizer_name: '*', enable: false}\n"
             "    - {quantizer_name: '%s', cfg: {num_bits: e4m3, axis: null}}\n",
             pattern);
    return buf;
}

/* Per family: a glob Model Optimizer matches on the in-memory names selects the expert there and
 * not under the hub names lwq matched before, and a glob on the hub names the other way round. */
static void differs(const char *src, int L, const char *hub, const char *mem_glob, const char *hub_glob)
{
    char buf[512];
    picked a = pick(src, recipe_of(mem_glob, buf, sizeof buf), L, hub);
    cr_assert_eq(a.mem, LWQ_QFMT_FP8, "%s: '%s' reaches %s in memory", src, mem_glob, hub);
    cr_assert_eq(a.hub, LWQ_QFMT_NONE, "%s: '%s' does not reach %s by its hub name", src, mem_glob, hub);
    picked b = pick(src, recipe_of(hub_glob, buf, sizeof buf), L, hub);
    cr_assert_eq(b.hub, LWQ_QFMT_FP8, "%s: '%s' reaches %s by its hub name", src, hub_glob, hub);
    cr_assert_eq(b.mem, LWQ_QFMT_NONE, "%s: '%s' reaches nothing in memory, as in Model Optimizer", src, hub_glob);
}

Test(recipe_qnames, mixtral_glob_selects_model_optimizers_modules)
{
    differs("mixtral-f32", 0, "model.layers.0.block_sparse_moe.experts.1.w1", "*mlp.experts*gate_up_proj*",
            "*block_sparse_moe.experts.*.w1*");
}
Test(recipe_qnames, minimax_m2_glob_selects_model_optimizers_modules)
{
    differs("minimax_m2-f32", 0, "model.layers.0.block_sparse_moe.experts.2.w3", "*mlp.experts.*",
            "*block_sparse_moe*");
}
Test(recipe_qnames, qwen3_moe_glob_selects_model_optimizers_modules)
{
    differs("qwen3_moe-f32", 1, "model.layers.1.mlp.experts.0.gate_proj", "*experts*gate_up_proj*",
            "*experts.*.gate_proj*");
}
Test(recipe_qnames, deepseek_v3_glob_selects_model_optimizers_modules)
{
    differs("deepseek_v3-f32", 1, "model.layers.1.mlp.experts.3.down_proj", "*experts.down_proj_*",
            "*experts.3.down_proj*");
}
Test(recipe_qnames, deepseek_v32_glob_selects_model_optimizers_modules)
{
    differs("deepseek_v32-f32", 1, "model.layers.1.mlp.experts.0.up_proj", "*experts.gate_up_proj*",
            "*experts.0.up_proj*");
}
Test(recipe_qnames, glm4_moe_glob_selects_model_optimizers_modules)
{
    differs("glm4_moe-f32", 1, "model.layers.1.mlp.experts.1.up_proj", "*experts.gate_up_proj_[wi]*",
            "*experts.1.*");
}
Test(recipe_qnames, glm_moe_dsa_glob_selects_model_optimizers_modules)
{
    differs("glm_moe_dsa-f32", 1, "model.layers.1.mlp.experts.0.gate_proj", "*experts.gate_up*",
            "*experts.0.gate_proj.*");
}
Test(recipe_qnames, mistral4_glob_selects_model_optimizers_modules)
{
    differs("mistral4-f32", 1, "model.layers.1.mlp.experts.2.down_proj", "*down_proj_*quantizer",
            "*experts.2.down_proj.*quantizer");
}
Test(recipe_qnames, nemotron_h_glob_selects_model_optimizers_modules)
{
    differs("nemotron_h-f32", 3, "backbone.layers.3.mixer.experts.1.up_proj", "model.layers.3.mixer.experts.up_proj_*",
            "backbone.layers.3.*");
}
Test(recipe_qnames, nemotron_h_attention_is_model_layers_in_memory)
{
    differs("nemotron_h-f32", 2, "backbone.layers.2.mixer.q_proj", "model.layers.*q_proj*", "backbone.*q_proj*");
}
Test(recipe_qnames, qwen3_next_glob_selects_model_optimizers_modules)
{
    differs("qwen3_next-f32", 0, "model.layers.0.mlp.experts.1.down_proj", "*mlp.experts.down_proj*",
            "*mlp.experts.1.*");
}
Test(recipe_qnames, qwen3_5_moe_glob_selects_model_optimizers_modules)
{
    differs("qwen3_5_moe-f32", 0, "model.language_model.layers.0.mlp.experts.0.gate_proj",
            "*language_model.layers.0.mlp.experts.gate_up_proj*", "*experts.0.gate_proj*");
}
Test(recipe_qnames, qwen3_5_moe_text_glob_selects_model_optimizers_modules)
{
    differs("qwen3_5_moe_text-f32", 0, "model.layers.0.mlp.experts.0.up_proj", "*gate_up_proj*",
            "*experts.0.up_proj*");
}

Test(recipe_qnames, a_recipe_singling_out_experts_by_index_reaches_those_quantizers)
{
    char buf[512];
    /* per-expert weight quantizers 0 and 1 only; the input quantizer (shared) stays off, so the
     * choice is split (refused when planned), but the weight side shows which experts it reached */
    const char *g = "*experts.gate_up_proj_weight_quantizers.[01]";
    picked a = pick("mixtral-f32", recipe_of(g, buf, sizeof buf), 0, "model.layers.0.block_sparse_moe.experts.1.w3");
    cr_assert_eq(a.mem_weight, LWQ_QFMT_FP8);
    picked b = pick("mixtral-f32", recipe_of(g, buf, sizeof buf), 0, "model.layers.0.block_sparse_moe.experts.2.w3");
    cr_assert_eq(b.mem_weight, LWQ_QFMT_NONE);
    picked c = pick("mixtral-f32", recipe_of(g, buf, sizeof buf), 0, "model.layers.0.block_sparse_moe.experts.1.w2");
    cr_assert_eq(c.mem_weight, LWQ_QFMT_NONE, "down_proj's list is another one");
}
