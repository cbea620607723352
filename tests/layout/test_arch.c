/* tests/layout/test_arch.c — architecture plans (linears, roles, fused groups per model type) and
 * checking a checkpoint against them. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/craft.h"
#include "layout/arch.h"
#include "layout/safetensors.h"
#include "tests/helpers/fixtures.h"

TestSuite(arch, .init = lwqt_setup, .fini = lwqt_teardown);

static void open_fixture(const char *rel, const char *cfg_rel, lwq_ckpt *c)
{
    char d[1024], p[1024];
    snprintf(d, sizeof d, "%s", lwqt_fixture(rel));
    if (cfg_rel)
        snprintf(p, sizeof p, "%s", lwqt_fixture(cfg_rel));
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open_with_config(d, cfg_rel ? p : NULL, c, &e), 0, "%s", e.msg);
}

/* Every fixture matches its plan exactly: nothing missing, mis-shaped or unknown. */
static void check_clean(const char *rel, const char *cfg_rel)
{
    lwq_ckpt c;
    open_fixture(rel, cfg_rel, &c);
    lwq_arch_report r;
    lwq_error e = {0};
    int rc = lwq_arch_check(&c, &r, &e);
    for (int i = 0; i < r.n; i++)
        cr_log_error("%s: %s %s %s", rel, lwq_arch_issue_name(r.v[i].kind), r.v[i].name,
                     r.v[i].detail);
    cr_assert_eq(rc, 0, "%s: %d blocking issues (%s)", rel, rc, e.msg);
    cr_assert_eq(r.n, 0, "%s: %d issues", rel, r.n);
    /* Every linear's weight is in the checkpoint with [out, in]. */
    for (int l = 0; l < c.cfg.num_hidden_layers; l++) {
        lwq_arch_layer p;
        cr_assert_eq(lwq_arch_layer_plan(&c.cfg, l, &p, &e), 0, "%s", e.msg);
        for (int i = 0; i < p.nlinears; i++) {
            char w[LWQ_ARCH_NAME_MAX + 8];
            snprintf(w, sizeof w, "%s.weight", p.linears[i].name);
            const lwq_ckpt_tensor *t = lwq_ckpt_find(&c, w);
            cr_assert_not_null(t, "%s missing", w);
            cr_assert_eq(t->shape[0], p.linears[i].out_features);
            cr_assert_eq(t->shape[1], p.linears[i].in_features);
        }
        lwq_arch_layer_free(&p);
    }
    lwq_arch_report_free(&r);
    lwq_ckpt_free(&c);
}

/* One test per checkpoint of the fixture table (tests/helpers/fixtures.c). */
ParameterizedTestParameters(arch, every_fixture_matches_its_plan)
{
    return cr_make_param_array(int, lwqt_ckpt_fixture_indexes(), (size_t)lwqt_nckpt_fixtures);
}
ParameterizedTest(int *i, arch, every_fixture_matches_its_plan)
{
    check_clean(lwqt_ckpt_fixtures[*i].dir, lwqt_ckpt_fixtures[*i].config);
}

static const lwq_arch_linear *lin(const lwq_arch_layer *p, const char *m)
{
    const lwq_arch_linear *x = lwq_arch_find_linear(p, m);
    cr_assert_not_null(x, "no linear %s", m);
    return x;
}

Test(arch, qwen3_moe_linears_and_groups)
{
    lwq_ckpt c;
    open_fixture("agilerl-tiny-qwen3-moe", NULL, &c);
    lwq_arch_layer p;
    lwq_error e = {0};
    cr_assert_eq(lwq_arch_layer_plan(&c.cfg, 1, &p, &e), 0, "%s", e.msg);
    cr_assert(p.is_moe);
    cr_assert_eq(p.nlinears, 4 + 1 + 4 * 3);
    cr_assert_eq(p.ngroups, 1 + 4, "{q,k,v} + one {gate,up} per expert");
    const lwq_arch_linear *q = lin(&p, "model.layers.1.self_attn.q_proj");
    cr_assert_eq(q->role, LWQ_ROLE_Q);
    cr_assert_eq(lin(&p, "model.layers.1.self_attn.k_proj")->group, q->group);
    cr_assert_eq(lin(&p, "model.layers.1.self_attn.v_proj")->group, q->group);
    cr_assert_eq(lin(&p, "model.layers.1.self_attn.o_proj")->group, -1);
    const lwq_arch_linear *r = lin(&p, "model.layers.1.mlp.gate");
    cr_assert(r->is_router);
    cr_assert_eq(r->role, LWQ_ROLE_ROUTER);
    cr_assert_eq(r->out_features, 4);
    const lwq_arch_linear *g2 = lin(&p, "model.layers.1.mlp.experts.2.gate_proj");
    const lwq_arch_linear *u2 = lin(&p, "model.layers.1.mlp.experts.2.up_proj");
    const lwq_arch_linear *d2 = lin(&p, "model.layers.1.mlp.experts.2.down_proj");
    cr_assert_eq(g2->expert, 2);
    cr_assert_eq(g2->role, LWQ_ROLE_EXPERT_GATE);
    cr_assert_eq(g2->group, u2->group);
    cr_assert_neq(g2->group, lin(&p, "model.layers.1.mlp.experts.3.gate_proj")->group);
    cr_assert_eq(d2->group, -1);
    cr_assert_eq(d2->out_features, 64);
    cr_assert_eq(d2->in_features, 32);
    int nrouters = 0;
    for (int i = 0; i < p.nlinears; i++)
        nrouters += p.linears[i].is_router;
    cr_assert_eq(nrouters, 1);
    cr_assert_not_null(lwq_arch_find_tensor(&p, "model.layers.1.self_attn.q_norm.weight"));
    lwq_arch_layer_free(&p);
    lwq_ckpt_free(&c);
}

Test(arch, mixtral_names_and_roles)
{
    lwq_ckpt c;
    open_fixture("cai-tiny-mixtral", NULL, &c);
    lwq_arch_layer p;
    cr_assert_eq(lwq_arch_layer_plan(&c.cfg, 0, &p, NULL), 0);
    cr_assert_eq(lin(&p, "model.layers.0.block_sparse_moe.experts.1.w1")->role, LWQ_ROLE_EXPERT_GATE);
    cr_assert_eq(lin(&p, "model.layers.0.block_sparse_moe.experts.1.w3")->role, LWQ_ROLE_EXPERT_UP);
    cr_assert_eq(lin(&p, "model.layers.0.block_sparse_moe.experts.1.w2")->role, LWQ_ROLE_EXPERT_DOWN);
    cr_assert_eq(lin(&p, "model.layers.0.block_sparse_moe.experts.1.w1")->group,
                 lin(&p, "model.layers.0.block_sparse_moe.experts.1.w3")->group);
    cr_assert(lin(&p, "model.layers.0.block_sparse_moe.gate")->is_router);
    lwq_arch_layer_free(&p);
    lwq_ckpt_free(&c);
}

Test(arch, qwen2_qkv_bias_but_no_o_bias)
{
    lwq_ckpt c;
    open_fixture("cai-tiny-qwen2", NULL, &c);
    lwq_arch_layer p;
    cr_assert_eq(lwq_arch_layer_plan(&c.cfg, 0, &p, NULL), 0);
    cr_assert(lin(&p, "model.layers.0.self_attn.q_proj")->has_bias);
    cr_assert(!lin(&p, "model.layers.0.self_attn.o_proj")->has_bias);
    cr_assert_not_null(lwq_arch_find_tensor(&p, "model.layers.0.self_attn.v_proj.bias"));
    lwq_arch_layer_free(&p);
    lwq_ckpt_free(&c);
}

Test(arch, deepseek_v2_dense_then_moe_with_shared_experts)
{
    lwq_ckpt c;
    open_fixture("cai-tiny-deepseek-v2", NULL, &c);
    lwq_arch_layer p0, p1;
    cr_assert_eq(lwq_arch_layer_plan(&c.cfg, 0, &p0, NULL), 0);
    cr_assert_eq(lwq_arch_layer_plan(&c.cfg, 1, &p1, NULL), 0);
    cr_assert(p0.is_mla && !p0.is_moe);
    cr_assert(p1.is_moe);
    cr_assert_eq(p0.nlinears, 4 + 3);
    cr_assert_eq(lin(&p0, "model.layers.0.self_attn.q_proj")->out_features, 20);
    cr_assert_eq(lin(&p0, "model.layers.0.self_attn.kv_a_proj_with_mqa")->role, LWQ_ROLE_KV_A);
    cr_assert_eq(lin(&p0, "model.layers.0.self_attn.kv_b_proj")->out_features, 24);
    cr_assert_eq(lin(&p0, "model.layers.0.self_attn.o_proj")->in_features, 12);
    /* without q_lora, q_proj and kv_a read the layer input: Model Optimizer 0.47's export gives
     * them one weight global scale (run on a q_lora-less deepseek_v2: docs/FAMILIES.md) */
    cr_assert(lin(&p0, "model.layers.0.self_attn.q_proj")->group >= 0 &&
                  lin(&p0, "model.layers.0.self_attn.q_proj")->group ==
                      lin(&p0, "model.layers.0.self_attn.kv_a_proj_with_mqa")->group,
              "without q_lora, q_proj and kv_a_proj_with_mqa are one fused group");
    const lwq_arch_linear *sg = lin(&p1, "model.layers.1.mlp.shared_experts.gate_proj");
    cr_assert_eq(sg->role, LWQ_ROLE_SHARED_GATE);
    cr_assert_eq(sg->out_features, 10);
    cr_assert_eq(sg->group, lin(&p1, "model.layers.1.mlp.shared_experts.up_proj")->group);
    cr_assert(!sg->is_router);
    lwq_arch_layer_free(&p0);
    lwq_arch_layer_free(&p1);
    lwq_ckpt_free(&c);
}

Test(arch, deepseek_v3_q_lora_group_and_score_bias)
{
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(lwq_config_parse("v3", "{\"model_type\":\"deepseek_v3\",\"hidden_size\":64,"
                                        "\"num_hidden_layers\":3,\"num_attention_heads\":2,"
                                        "\"vocab_size\":10,\"intermediate_size\":96,"
                                        "\"n_routed_experts\":8,\"n_shared_experts\":1,"
                                        "\"num_experts_per_tok\":2,\"moe_intermediate_size\":16,"
                                        "\"q_lora_rank\":32,\"kv_lora_rank\":16,"
                                        "\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":8,"
                                        "\"v_head_dim\":16,\"first_k_dense_replace\":1,"
                                        "\"n_group\":2,\"topk_group\":1}",
                                  &c, &e),
                 0, "%s", e.msg);
    lwq_arch_layer p;
    cr_assert_eq(lwq_arch_layer_plan(&c, 2, &p, &e), 0, "%s", e.msg);
    const lwq_arch_linear *qa = lin(&p, "model.layers.2.self_attn.q_a_proj");
    const lwq_arch_linear *kva = lin(&p, "model.layers.2.self_attn.kv_a_proj_with_mqa");
    cr_assert_eq(qa->group, kva->group, "vLLM fuses q_a and kv_a into one GEMM");
    cr_assert_neq(qa->group, -1);
    cr_assert_eq(kva->out_features, 16 + 8);
    cr_assert_eq(lin(&p, "model.layers.2.self_attn.q_b_proj")->out_features, 2 * 24);
    cr_assert_eq(lin(&p, "model.layers.2.self_attn.q_b_proj")->in_features, 32);
    cr_assert_not_null(lwq_arch_find_tensor(&p, "model.layers.2.mlp.gate.e_score_correction_bias"));
    cr_assert_not_null(lwq_arch_find_tensor(&p, "model.layers.2.self_attn.q_a_layernorm.weight"));
    cr_assert_eq(lin(&p, "model.layers.2.mlp.shared_experts.down_proj")->in_features, 16);
    lwq_arch_layer_free(&p);
    cr_assert_eq(lwq_arch_layer_plan(&c, 3, &p, &e), LWQ_EINVAL);
    lwq_config_free(&c);
}

Test(arch, kimi_wrapper_names_carry_the_prefix)
{
    char path[1024];
    snprintf(path, sizeof path, "%s", lwqt_fixture("published-nvfp4/nvidia--Kimi-K2.6-NVFP4/config.json"));
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(lwq_config_load(path, &c, &e), 0, "%s", e.msg);
    lwq_arch_layer p;
    cr_assert_eq(lwq_arch_layer_plan(&c, 1, &p, &e), 0, "%s", e.msg);
    cr_assert_eq(p.nlinears, 5 + 1 + 384 * 3 + 3);
    cr_assert_not_null(lwq_arch_find_linear(&p, "language_model.model.layers.1.mlp.experts.383.down_proj"));
    lwq_arch_layer_free(&p);
    cr_assert_eq(lwq_arch_tail_plan(&c, &p, &e), 0);
    cr_assert_str_eq(p.tensors[2].name, "language_model.lm_head.weight");
    lwq_arch_layer_free(&p);
    lwq_config_free(&c);
}

Test(arch, qwen3_next_linear_and_full_attention_layers)
{
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(lwq_config_parse("n", "{\"model_type\":\"qwen3_next\",\"hidden_size\":64,"
                                       "\"num_hidden_layers\":4,\"num_attention_heads\":4,"
                                       "\"num_key_value_heads\":2,\"vocab_size\":10,\"head_dim\":16,"
                                       "\"num_experts\":4,\"num_experts_per_tok\":2,"
                                       "\"moe_intermediate_size\":32,"
                                       "\"shared_expert_intermediate_size\":48,"
                                       "\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,"
                                       "\"linear_key_head_dim\":16,\"linear_value_head_dim\":8}",
                                  &c, &e),
                 0, "%s", e.msg);
    lwq_arch_layer p;
    cr_assert_eq(lwq_arch_layer_plan(&c, 0, &p, &e), 0, "%s", e.msg);
    cr_assert(p.is_linear_attn);
    cr_assert_eq(lin(&p, "model.layers.0.linear_attn.in_proj_qkvz")->out_features, 2 * 32 + 2 * 32);
    cr_assert_eq(lin(&p, "model.layers.0.linear_attn.in_proj_ba")->out_features, 8);
    cr_assert_eq(lin(&p, "model.layers.0.linear_attn.out_proj")->in_features, 32);
    const lwq_arch_tensor *conv = lwq_arch_find_tensor(&p, "model.layers.0.linear_attn.conv1d.weight");
    cr_assert_not_null(conv);
    cr_assert_eq(conv->shape[0], 2 * 32 + 32);
    cr_assert_eq(conv->shape[2], 4);
    cr_assert_eq(conv->ndim, 3);
    const lwq_arch_linear *cl = lin(&p, "model.layers.0.linear_attn.conv1d");
    cr_assert(cl->role == LWQ_ROLE_LIN_CONV && cl->out_features == 96 && cl->in_features == 4,
              "conv1d is a quantizable linear of out = channels, in = kernel");
    cr_assert_eq(conv->linear, (int)(cl - p.linears));
    cr_assert(lin(&p, "model.layers.0.mlp.shared_expert_gate")->is_router);
    cr_assert_eq(lin(&p, "model.layers.0.mlp.shared_expert.up_proj")->out_features, 48);
    lwq_arch_layer_free(&p);
    cr_assert_eq(lwq_arch_layer_plan(&c, 3, &p, &e), 0, "%s", e.msg);
    cr_assert(!p.is_linear_attn);
    cr_assert_eq(lin(&p, "model.layers.3.self_attn.q_proj")->out_features, 2 * 4 * 16,
                 "q_proj carries q and its output gate");
    cr_assert_eq(lin(&p, "model.layers.3.self_attn.o_proj")->in_features, 4 * 16);
    lwq_arch_layer_free(&p);
    lwq_config_free(&c);
}

/* ---- the check reports what does not fit ----------------------------------------------------- */

#define TINY_CFG "{\"model_type\":\"llama\",\"hidden_size\":16,\"intermediate_size\":32," \
                 "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"vocab_size\":8}"

/* Write a checkpoint holding exactly the plan's required tensors, with edits:
 * skip `drop`, give `reshape` a wrong first dim, add `extra` names. */
static void write_from_plan(const char *drop, const char *reshape, const char **extra, int nextra)
{
    lwqt_write_str("config.json", TINY_CFG);
    lwq_model_config c;
    lwq_error e = {0};
    cr_assert_eq(lwq_config_load(lwqt_path("config.json"), &c, &e), 0, "%s", e.msg);
    lwq_arch_layer parts[2];
    cr_assert_eq(lwq_arch_layer_plan(&c, 0, &parts[0], &e), 0);
    cr_assert_eq(lwq_arch_tail_plan(&c, &parts[1], &e), 0);
    lwq_st_out_tensor t[64];
    int n = 0;
    static float zeros[4096];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < parts[k].ntensors; i++) {
            const lwq_arch_tensor *p = &parts[k].tensors[i];
            if (p->optional || (drop && !strcmp(p->name, drop)))
                continue;
            t[n] = (lwq_st_out_tensor){.name = p->name, .dtype = LWQ_F32, .ndim = p->ndim,
                                       .data = zeros};
            memcpy(t[n].shape, p->shape, sizeof p->shape);
            if (reshape && !strcmp(p->name, reshape))
                t[n].shape[0]++;
            n++;
        }
    }
    for (int i = 0; i < nextra; i++)
        t[n++] = (lwq_st_out_tensor){.name = extra[i], .dtype = LWQ_F32, .ndim = 1, .shape = {4},
                                     .data = zeros};
    cr_assert_eq(lwq_st_write_file(lwqt_path("model.safetensors"), t, n, NULL, 0, &e), 0, "%s",
                 e.msg);
    lwq_arch_layer_free(&parts[0]);
    lwq_arch_layer_free(&parts[1]);
    lwq_config_free(&c);
}

static int run_check(lwq_arch_report *r)
{
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_dir, &c, &e), 0, "%s", e.msg);
    int rc = lwq_arch_check(&c, r, &e);
    cr_assert(rc >= 0, "%s", e.msg);
    lwq_ckpt_free(&c);
    return rc;
}

Test(arch, check_clean_crafted_model)
{
    write_from_plan(NULL, NULL, NULL, 0);
    lwq_arch_report r;
    cr_assert_eq(run_check(&r), 0);
    cr_assert_eq(r.n, 0);
    lwq_arch_report_free(&r);
}

Test(arch, check_reports_missing_tensor)
{
    write_from_plan("model.layers.0.mlp.up_proj.weight", NULL, NULL, 0);
    lwq_arch_report r;
    cr_assert_eq(run_check(&r), 1);
    cr_assert_eq(r.n, 1);
    cr_assert_eq(r.v[0].kind, LWQ_ISSUE_MISSING);
    cr_assert_eq(r.v[0].layer, 0);
    cr_assert_str_eq(r.v[0].name, "model.layers.0.mlp.up_proj.weight");
    lwq_arch_report_free(&r);
}

Test(arch, check_reports_bad_shape)
{
    write_from_plan(NULL, "model.layers.0.self_attn.k_proj.weight", NULL, 0);
    lwq_arch_report r;
    cr_assert_eq(run_check(&r), 1);
    cr_assert_eq(r.v[0].kind, LWQ_ISSUE_BAD_SHAPE);
    cr_assert_str_eq(r.v[0].detail, "expected [16, 16], found [17, 16]");
    lwq_arch_report_free(&r);
}

Test(arch, check_reports_unexpected_and_extra_layers_without_blocking)
{
    const char *extra[] = {"model.layers.0.mlp.mystery", "model.layers.1.eh_proj.weight",
                           "vision_tower.patch.weight"};
    write_from_plan(NULL, NULL, extra, 3);
    lwq_arch_report r;
    cr_assert_eq(run_check(&r), 0, "unknown tensors pass through; they do not block");
    cr_assert_eq(r.count[LWQ_ISSUE_UNEXPECTED], 2);
    cr_assert_eq(r.count[LWQ_ISSUE_EXTRA_LAYER], 1);
    int seen = 0;
    for (int i = 0; i < r.n; i++) {
        if (!strcmp(r.v[i].name, "model.layers.0.mlp.mystery"))
            seen |= 1;
        if (!strcmp(r.v[i].name, "vision_tower.patch.weight") && r.v[i].layer == -1)
            seen |= 2;
        if (!strcmp(r.v[i].name, "model.layers.1.*") && r.v[i].kind == LWQ_ISSUE_EXTRA_LAYER)
            seen |= 4;
    }
    cr_assert_eq(seen, 7);
    lwq_arch_report_free(&r);
}

Test(arch, check_reports_missing_lm_head_when_untied)
{
    write_from_plan("lm_head.weight", NULL, NULL, 0);
    lwq_arch_report r;
    cr_assert_eq(run_check(&r), 1);
    cr_assert_eq(r.v[0].layer, -1);
    cr_assert_str_eq(r.v[0].name, "lm_head.weight");
    lwq_arch_report_free(&r);
}
