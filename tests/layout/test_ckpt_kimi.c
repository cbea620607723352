/* A kimi_linear checkpoint's tensors listed under transformers' names (lwq_ckpt_rename_kimi), and two spellings of one tensor refused. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tests/helpers/craft.h"
#include "layout/checkpoint.h"

TestSuite(ckpt_kimi, .init = lwqt_setup, .fini = lwqt_teardown);

static void write_config(void)
{
    lwqt_write_str("config.json",
                   "{\"model_type\":\"kimi_linear\",\"hidden_size\":32,\"num_hidden_layers\":1,\"num_attention_heads\":4,"
                   "\"vocab_size\":64,\"intermediate_size\":32,\"moe_intermediate_size\":16,\"num_experts\":8,"
                   "\"num_experts_per_token\":2,\"kv_lora_rank\":16,\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":16,"
                   "\"v_head_dim\":16,\"layer_types\":[\"linear_attention\"],\"mlp_layer_types\":[\"sparse\"]}");
}

/* model.safetensors holding one 4-byte F32 tensor under each name of `names` (NULL-terminated) */
static void write_tensors(const char *const *names)
{
    char json[2048];
    size_t k = (size_t)snprintf(json, sizeof json, "{");
    int n = 0;
    for (; names[n]; n++)
        k += (size_t)snprintf(json + k, sizeof json - k, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[1],"
                              "\"data_offsets\":[%d,%d]}", n ? "," : "", names[n], 4 * n, 4 * n + 4);
    snprintf(json + k, sizeof json - k, "}");
    lwqt_write_st("model.safetensors", json, UINT64_MAX, (size_t)(4 * n));
}

Test(ckpt_kimi, tensors_are_listed_under_transformers_names)
{
    write_config();
    static const char *const names[] = {"model.layers.0.block_sparse_moe.experts.3.w2.weight",
                                        "model.layers.0.block_sparse_moe.experts.3.w1.weight",
                                        "model.layers.0.block_sparse_moe.gate.e_score_correction_bias",
                                        "model.layers.0.self_attn.f_a_proj.weight",
                                        "model.layers.0.self_attn.A_log",
                                        "model.layers.0.self_attn.dt_bias",
                                        "model.layers.0.self_attn.q_conv1d.weight",
                                        "model.norm.weight",
                                        NULL};
    write_tensors(names);
    lwq_ckpt c;
    lwq_error e = {0};
    cr_assert_eq(lwq_ckpt_open(lwqt_dir, &c, &e), 0, "%s", e.msg);
    static const char *const want[] = {"model.layers.0.mlp.experts.3.down_proj.weight",
                                       "model.layers.0.mlp.experts.3.gate_proj.weight",
                                       "model.layers.0.mlp.gate.e_score_correction_bias",
                                       "model.layers.0.self_attn.forget_gate.f_a_proj.weight",
                                       "model.layers.0.self_attn.forget_gate.A_log",
                                       "model.layers.0.self_attn.forget_gate.dt_bias",
                                       "model.layers.0.self_attn.q_conv1d.weight",
                                       "model.norm.weight"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert_not_null(lwq_ckpt_find(&c, want[i]), "no %s", want[i]);
    cr_assert_null(lwq_ckpt_find(&c, names[0]), "the checkpoint's own name is still listed");
    cr_assert_eq(c.ntensors, 8);
    cr_assert_eq(c.layers[0].n, 7);
    lwq_ckpt_free(&c);
}

Test(ckpt_kimi, two_spellings_of_one_tensor_are_refused)
{
    write_config();
    static const char *const names[] = {"model.layers.0.block_sparse_moe.gate_proj.weight",
                                        "model.layers.0.mlp.gate_proj.weight", NULL};
    write_tensors(names);
    lwq_ckpt c;
    lwq_error e = {0};
    int rc = lwq_ckpt_open(lwqt_dir, &c, &e);
    cr_assert_eq(rc, LWQ_EFORMAT, "rc %d: %s", rc, e.msg);
    cr_assert(strstr(e.msg, "model.layers.0.mlp.gate_proj.weight") && strstr(e.msg, lwqt_dir), "%s", e.msg);
}
