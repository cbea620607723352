/* tools/mkmodel/mkmodel_qwen3next.c — qwen3_next options, config keys and value distribution of
 * `lwq mkmodel` (contract in mkmodel_qwen3next.h). */
#include "tools/mkmodel/mkmodel_qwen3next.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "layout/config/config.h"
#include "tools/tool_util.h"

int lwq_mkmodel_qwen3next_option(mk_qn_opts *q, int c, const char *arg)
{
    switch (c) {
    case 1: return lwq_tool_parse_i64("--linear-key-heads", arg, 1, 4096, &q->lin_k_heads);
    case 2: return lwq_tool_parse_i64("--linear-value-heads", arg, 1, 4096, &q->lin_v_heads);
    case 3: return lwq_tool_parse_i64("--linear-key-dim", arg, 1, 4096, &q->lin_k_dim);
    case 4: return lwq_tool_parse_i64("--linear-value-dim", arg, 1, 4096, &q->lin_v_dim);
    case 5: return lwq_tool_parse_i64("--conv-kernel", arg, 1, 64, &q->conv_kernel);
    case 6: return lwq_tool_parse_i64("--full-attn-every", arg, 1, LWQ_MAX_LAYERS, &q->full_every);
    case 7:
        return lwq_tool_parse_i64("--shared-intermediate", arg, 1, INT64_C(1) << 20, &q->shared_inter);
    case 8: q->mtp = 1; return 0;
    default: return -1;
    }
}

int lwq_mkmodel_qwen3next_finish(mk_qn_opts *q, const char *arch, int64_t head_dim,
                                 int64_t moe_inter)
{
    if (q->mtp && strcmp(arch, "qwen3_next") && strncmp(arch, "qwen3_5", 7)) {
        fprintf(stderr, "lwq mkmodel: --mtp is for --arch qwen3_next and qwen3_5* only\n");
        return -1;
    }
    if (!q->lin_k_heads)
        q->lin_k_heads = 2;
    if (!q->lin_v_heads)
        q->lin_v_heads = 2 * q->lin_k_heads;
    if (!q->lin_k_dim)
        q->lin_k_dim = head_dim;
    if (!q->lin_v_dim)
        q->lin_v_dim = head_dim;
    if (!q->conv_kernel)
        q->conv_kernel = 4;
    if (!q->full_every)
        q->full_every = 4;
    if (!q->shared_inter)
        q->shared_inter = moe_inter;
    return 0;
}

void lwq_mkmodel_qwen3next_config(cJSON *c, const mk_qn_opts *q, int64_t layers, int64_t experts,
                                  int64_t topk, int64_t moe_inter)
{
    cJSON_AddNumberToObject(c, "num_experts", (double)experts);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", (double)topk);
    cJSON_AddNumberToObject(c, "moe_intermediate_size", (double)moe_inter);
    cJSON_AddNumberToObject(c, "shared_expert_intermediate_size", (double)q->shared_inter);
    cJSON_AddNumberToObject(c, "decoder_sparse_step", 1);
    cJSON_AddItemToObject(c, "mlp_only_layers", cJSON_CreateArray());
    cJSON_AddBoolToObject(c, "norm_topk_prob", 1);
    cJSON_AddNumberToObject(c, "partial_rotary_factor", 0.25);
    cJSON_AddNumberToObject(c, "linear_num_key_heads", (double)q->lin_k_heads);
    cJSON_AddNumberToObject(c, "linear_num_value_heads", (double)q->lin_v_heads);
    cJSON_AddNumberToObject(c, "linear_key_head_dim", (double)q->lin_k_dim);
    cJSON_AddNumberToObject(c, "linear_value_head_dim", (double)q->lin_v_dim);
    cJSON_AddNumberToObject(c, "linear_conv_kernel_dim", (double)q->conv_kernel);
    cJSON_AddNumberToObject(c, "full_attention_interval", (double)q->full_every);
    cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
    for (int64_t i = 0; i < layers; i++)
        cJSON_AddItemToArray(lt, cJSON_CreateString((i + 1) % q->full_every ? "linear_attention"
                                                                            : "full_attention"));
    if (q->mtp)
        cJSON_AddNumberToObject(c, "mtp_num_hidden_layers", 1);
}

void lwq_mkmodel_qwen3next_dist(const lwq_arch_tensor *p, float *mean, float *std)
{
    if (p->kind == LWQ_TK_NORM && !strstr(p->name, "linear_attn.norm.")) {
        *mean = 0.0f; /* Qwen3NextRMSNorm multiplies by (1 + w) */
        *std = 0.1f;
    } else if (strstr(p->name, "conv1d.weight")) {
        *std = 0.3f;
    } else if (strstr(p->name, ".A_log") || strstr(p->name, ".dt_bias")) {
        *std = 0.5f;
    }
}
