/* Search groups (engine/autoq/autoq_groups.h): which linears each architecture's groups hold, fused groups inside one search group, routers and the base recipe's exclusions out, NVFP4 only where every member can take it. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/autoq/autoq_groups.h"
#include "layout/checkpoint.h"
#include "tests/helpers/run.h"

TestSuite(autoq_groups, .init = lwqt_setup, .fini = lwqt_teardown);

static const uint8_t ALL[LWQ_AQ_FORMATS] = {1, 1, 1, 0}; /* the default: nvfp4, fp8, none */

/* Groups of layer L of a mkmodel checkpoint under preset `preset`, as "kind:members" joined by
 * spaces; every fused group of the plan must lie in one search group. */
static void groups_of(const char *mk, int L, const char *preset, char *out, size_t cap)
{
    cr_assert_eq(lwqt_sh("rm -rf %s && %s mkmodel %s %s --quiet", lwqt_path("g"), lwqt_bin(), lwqt_path("g"), mk), 0);
    lwq_error e = {0};
    lwq_ckpt ck;
    cr_assert_eq(lwq_ckpt_open(lwqt_path("g"), &ck, &e), 0, "%s", e.msg);
    lwq_arch_layer p;
    cr_assert_eq(lwq_arch_layer_plan(&ck.cfg, L, &p, &e), 0, "%s", e.msg);
    lwq_recipe r;
    cr_assert_eq(lwq_recipe_preset(preset, &r, &e), 0);
    lwq_aq_layer A;
    cr_assert_eq(lwq_aq_layer_init(&A, &p, &r, ALL, &e), 0, "%s", e.msg);
    out[0] = 0;
    for (int k = 0; k < A.ngroups; k++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s:%d", k ? " " : "", lwq_aq_kind_name(A.g[k].kind), A.g[k].n);
    for (int i = 0; i < p.nlinears; i++) {
        if (p.linears[i].is_router)
            cr_assert_eq(A.group_of[i], -1, "router %s is in a group", p.linears[i].name);
        for (int j = 0; j < p.nlinears; j++)
            if (p.linears[i].group >= 0 && p.linears[j].group == p.linears[i].group)
                cr_assert_eq(A.group_of[i], A.group_of[j], "%s and %s are fused but searched apart",
                             p.linears[i].name, p.linears[j].name);
    }
    lwq_aq_layer_free(&A);
    lwq_recipe_free(&r);
    lwq_arch_layer_free(&p);
    lwq_ckpt_free(&ck);
}

#define MK "--hidden 64 --layers 2 --heads 4 --kv-heads 2 --vocab 300"

Test(autoq_groups, llama)
{
    char g[256];
    groups_of("--arch llama " MK, 1, "nvfp4", g, sizeof g);
    cr_assert_str_eq(g, "qkv:3 o:1 gate_up:2 down:1");
}

Test(autoq_groups, routed_experts_together_router_out)
{
    char g[256];
    groups_of("--arch qwen3_moe --experts 4 --top-k 2 " MK, 0, "nvfp4", g, sizeof g);
    cr_assert_str_eq(g, "qkv:3 o:1 experts:12");
}

Test(autoq_groups, mla_projections_follow_the_base_recipe)
{
    char g[256];
    /* lwq's nvfp4 preset keeps the MLA q/kv projections unquantized: they are not searched */
    groups_of("--arch deepseek_v3 " MK, 1, "nvfp4", g, sizeof g);
    cr_assert(!strstr(g, "qkv"), "%s", g);
    groups_of("--arch deepseek_v3 " MK, 1, "fp8", g, sizeof g);
    cr_assert(strstr(g, "qkv:") && strstr(g, "experts:") && strstr(g, "gate_up:2") && strstr(g, "down:1"), "%s", g);
}

Test(autoq_groups, linear_attention_projections_together_conv_out)
{
    char g[256];
    groups_of("--arch qwen3_next " MK, 0, "qwen3next_production", g, sizeof g);
    cr_assert(strstr(g, "linear_attn:3"), "in_proj_qkvz, in_proj_ba, out_proj: %s", g);
}

Test(autoq_groups, nvfp4_only_where_every_member_takes_it)
{
    /* stories260K's MLP: down_proj has 172 in-features */
    lwq_arch_linear l[3] = {
        {.name = "m.gate_proj", .role = LWQ_ROLE_GATE, .expert = -1, .out_features = 172, .in_features = 64, .group = 0},
        {.name = "m.up_proj", .role = LWQ_ROLE_UP, .expert = -1, .out_features = 172, .in_features = 64, .group = 0},
        {.name = "m.down_proj", .role = LWQ_ROLE_DOWN, .expert = -1, .out_features = 64, .in_features = 172, .group = -1},
    };
    lwq_arch_layer p = {.layer = 0, .nlinears = 3, .linears = l, .ngroups = 1};
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_preset("fp8", &r, &e), 0);
    lwq_aq_layer A;
    cr_assert_eq(lwq_aq_layer_init(&A, &p, &r, ALL, &e), 0, "%s", e.msg);
    cr_assert_eq(A.ngroups, 2);
    cr_assert(A.g[0].allowed[LWQ_QFMT_NVFP4] && A.g[0].allowed[LWQ_QFMT_FP8] && A.g[0].allowed[LWQ_QFMT_NONE]);
    cr_assert(!A.g[1].allowed[LWQ_QFMT_NVFP4] && A.g[1].allowed[LWQ_QFMT_FP8]);
    /* the formats given restrict it further, none included (issue 36, finding 9) */
    const uint8_t fp8only[LWQ_AQ_FORMATS] = {0, 0, 1, 0}, nvfp4only[LWQ_AQ_FORMATS] = {0, 1, 0, 0};
    lwq_aq_layer_free(&A);
    cr_assert_eq(lwq_aq_layer_init(&A, &p, &r, nvfp4only, &e), LWQ_EINVAL, "down_proj (172 in) takes no NVFP4");
    cr_assert(strstr(e.msg, "the down group can take none of --auto-quantize-formats nvfp4") &&
              strstr(e.msg, "m.down_proj has 172"), "%s", e.msg);
    cr_assert_eq(lwq_aq_layer_init(&A, &p, &r, fp8only, &e), 0);
    cr_assert(!A.g[0].allowed[LWQ_QFMT_NVFP4] && !A.g[0].allowed[LWQ_QFMT_NONE] && A.g[0].allowed[LWQ_QFMT_FP8]);
    /* choices: the base's settings with the group's format */
    uint8_t f[2] = {LWQ_QFMT_FP8, LWQ_QFMT_NONE}; /* candidates: FP8, none */
    lwq_quant_choice c[3];
    lwq_aq_choices(&A, &p, f, c);
    cr_assert(c[0].format == LWQ_QFMT_FP8 && c[1].format == LWQ_QFMT_FP8 && c[2].format == LWQ_QFMT_NONE);
    lwq_aq_layer_free(&A);
    lwq_recipe_free(&r);
}

/* weight-only NVFP4 needs what NVFP4 needs (in-features % 16), and a group given it gets NVFP4
 * weights with the input quantizer off: weight_only, no input format, no fixed input amax */
Test(autoq_groups, w4a16_is_nvfp4_weights_with_the_input_off)
{
    lwq_arch_linear l[3] = {
        {.name = "m.gate_proj", .role = LWQ_ROLE_GATE, .expert = -1, .out_features = 172, .in_features = 64, .group = 0},
        {.name = "m.up_proj", .role = LWQ_ROLE_UP, .expert = -1, .out_features = 172, .in_features = 64, .group = 0},
        {.name = "m.down_proj", .role = LWQ_ROLE_DOWN, .expert = -1, .out_features = 64, .in_features = 172, .group = -1},
    };
    lwq_arch_layer p = {.layer = 0, .nlinears = 3, .linears = l, .ngroups = 1};
    lwq_recipe r;
    lwq_error e = {0};
    cr_assert_eq(lwq_recipe_preset("fp8", &r, &e), 0);
    const uint8_t want[LWQ_AQ_FORMATS] = {0, 0, 1, 1}; /* fp8, w4a16_nvfp4 */
    lwq_aq_layer A;
    cr_assert_eq(lwq_aq_layer_init(&A, &p, &r, want, &e), 0, "%s", e.msg);
    cr_assert(A.g[0].allowed[LWQ_AQ_W4A16] && A.g[0].allowed[LWQ_QFMT_FP8], "gate/up (64 in) take both");
    cr_assert(!A.g[1].allowed[LWQ_AQ_W4A16] && A.g[1].allowed[LWQ_QFMT_FP8], "down (172 in) takes FP8 only");
    uint8_t f[2] = {LWQ_AQ_W4A16, LWQ_QFMT_FP8};
    lwq_quant_choice c[3];
    lwq_aq_choices(&A, &p, f, c);
    cr_assert(c[0].format == LWQ_QFMT_NVFP4 && c[0].weight_only && c[0].weight_format == LWQ_QFMT_NVFP4 &&
              c[0].input_format == LWQ_QFMT_NONE && !c[0].has_input_amax && !c[0].split, "gate: W4A16");
    cr_assert_str_eq(lwq_choice_format_name(&c[1]), "w4a16_nvfp4");
    cr_assert(c[2].format == LWQ_QFMT_FP8 && !c[2].weight_only, "down: FP8");
    lwq_aq_layer_free(&A);
    const uint8_t w4only[LWQ_AQ_FORMATS] = {0, 0, 0, 1};
    cr_assert_eq(lwq_aq_layer_init(&A, &p, &r, w4only, &e), LWQ_EINVAL, "down_proj takes no w4a16_nvfp4");
    cr_assert(strstr(e.msg, "--auto-quantize-formats w4a16_nvfp4"), "%s", e.msg);
    lwq_recipe_free(&r);
}
