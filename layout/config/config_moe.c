/* layout/config/config_moe.c — the config keys of routed experts, DeepSeek routing, MLA and the DSA
 * indexer (contract in config.h and config_internal.h).  Defaults follow the transformers
 * configuration class of each model_type; keys that would make lwq compute another model than
 * transformers does are refused by name (model_type, key, value). */
#include "layout/config/config_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Mistral-Small-4's router (Mistral4TopkRouter) is fixed: softmax scores, every layer from
 * first_k_dense_replace on routed, group scores the sum of each group's two best.  Keys of
 * DeepSeek configs that would say otherwise, which transformers ignores here, are refused by name,
 * as are groups of fewer than two experts (transformers' top-2 per group fails on them) and chosen
 * groups holding fewer than num_experts_per_tok experts. */
static int parse_softmax_grouped(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    if (strcmp(c->scoring_func, "softmax"))
        return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                        "%s: model_type '%s': \"%sscoring_func\" = \"%s\" is not what its router computes "
                        "(softmax scores)", x->path, c->model_type, x->section, c->scoring_func);
    if (c->moe_layer_freq != 1)
        return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                        "%s: model_type '%s': \"%smoe_layer_freq\" = %d is not what the model does (transformers "
                        "routes every layer from first_k_dense_replace on)", x->path, c->model_type, x->section,
                        c->moe_layer_freq);
    const int gs = c->num_experts / c->n_group;
    if (gs < 2 && c->num_experts > 0)
        return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                        "%s: model_type '%s': \"%sn_group\" = %d leaves %d expert(s) per group; its router "
                        "scores a group by its two best", x->path, c->model_type, x->section, c->n_group, gs);
    if ((int64_t)c->topk_group * gs < c->num_experts_per_tok)
        return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                        "%s: model_type '%s': \"%stopk_group\" = %d groups of %d experts hold fewer than "
                        "num_experts_per_tok %d", x->path, c->model_type, x->section, c->topk_group, gs,
                        c->num_experts_per_tok);
    return 0;
}

/* DeepSeek's routing keys (every family with LWQ_KEYS_DEEPSEEK: deepseek_v2/v3, kimi_k2, glm4_moe):
 * which layers are dense, the groups, the scaling, the MTP layer count. */
static int parse_deepseek_routing(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    int v3 = c->family->router == LWQ_ROUTER_DEEPSEEK_V3;
    LWQ_TRY(lwq_cfg_i32(x, o, "first_k_dense_replace", 0, 0, 0, LWQ_MAX_LAYERS, &c->first_k_dense_replace));
    LWQ_TRY(lwq_cfg_i32(x, o, "moe_layer_freq", 0, 1, 1, LWQ_MAX_LAYERS, &c->moe_layer_freq));
    LWQ_TRY(lwq_cfg_i32(x, o, "n_group", 0, 1, 1, 1 << 16, &c->n_group));
    LWQ_TRY(lwq_cfg_i32(x, o, "topk_group", 0, 1, 1, 1 << 16, &c->topk_group));
    LWQ_TRY(lwq_cfg_i32(x, o, "num_nextn_predict_layers", 0, 0, 0, 64, &c->num_nextn_predict_layers));
    LWQ_TRY(lwq_cfg_num(x, o, "routed_scaling_factor", 1.0, &c->routed_scaling_factor));
    LWQ_TRY(lwq_cfg_str(x, o, "scoring_func", v3 ? "sigmoid" : "softmax", c->scoring_func,
                sizeof c->scoring_func));
    LWQ_TRY(lwq_cfg_str(x, o, "topk_method", v3 ? "noaux_tc" : "greedy", c->topk_method,
                sizeof c->topk_method));
    if (strcmp(c->scoring_func, "softmax") && strcmp(c->scoring_func, "sigmoid"))
        return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: scoring_func \"%s\" is not supported", x->path,
                        c->scoring_func);
    if (c->topk_group > c->n_group)
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: topk_group %d exceeds n_group %d", x->path,
                        c->topk_group, c->n_group);
    if (c->num_experts % c->n_group != 0)
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: n_routed_experts %d is not a multiple of n_group %d",
                        x->path, c->num_experts, c->n_group);
    return 0;
}

/* MiniMax-M2's routing: what transformers 5.14.1 computes is fixed (sigmoid, the correction bias,
 * no scaling); keys of the published configs that would say otherwise are refused by name, as
 * is a rotary_dim that disagrees with head_dim x partial_rotary_factor. */
static int parse_sigmoid_router(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    char sf[16];
    int bias = 1;
    LWQ_TRY(lwq_cfg_str(x, o, "scoring_func", "sigmoid", sf, sizeof sf));
    LWQ_TRY(lwq_cfg_bool(x, o, "use_routing_bias", 1, &bias));
    if (strcmp(sf, "sigmoid") || !bias)
        return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                        "%s: model_type '%s': \"%s%s\" = %s%s%s is not what its router computes "
                        "(sigmoid scores with the e_score_correction_bias)",
                        x->path, c->model_type, x->section, strcmp(sf, "sigmoid") ? "scoring_func" : "use_routing_bias",
                        strcmp(sf, "sigmoid") ? "\"" : "", strcmp(sf, "sigmoid") ? sf : "false",
                        strcmp(sf, "sigmoid") ? "\"" : "");
    c->routed_scaling_factor = 1.0;
    return 0;
}

int lwq_cfg_parse_moe(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    const int big = 1 << 16;
    const int64_t bigdim = INT64_C(1) << 22;
    int64_t v;
    const lwq_family *f = c->family;
    if (f->keys == LWQ_KEYS_KIMI)
        return lwq_cfg_parse_kimi_moe(x, o, c);
    if (f->keys == LWQ_KEYS_DEEPSEEK) {
        LWQ_TRY(lwq_cfg_i32(x, o, "n_routed_experts", 1, 0, 0, big, &c->num_experts));
        LWQ_TRY(lwq_cfg_i32(x, o, "n_shared_experts", 0, 0, 0, big, &c->n_shared_experts));
        LWQ_TRY(parse_deepseek_routing(x, o, c));
    } else {
        /* transformers 4 qwen3_moe: num_experts; mixtral and transformers 5: num_local_experts */
        const char *key = lwq_cfg_get(o, "num_local_experts") ? "num_local_experts" : "num_experts";
        if (!lwq_cfg_get(o, key) && !lwq_cfg_get(o, "num_experts"))
            return lwq_errf(x->e, LWQ_EFORMAT,
                            "%s: required key \"%snum_experts\" (or \"num_local_experts\") is "
                            "missing",
                            x->path, x->section);
        LWQ_TRY(lwq_cfg_i32(x, o, key, 1, 0, 1, big, &c->num_experts));
    }
    LWQ_TRY(lwq_cfg_i32(x, o, "num_experts_per_tok", 1, 0, 1, big, &c->num_experts_per_tok));
    if (c->num_experts > 0 && c->num_experts_per_tok > c->num_experts)
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: num_experts_per_tok %d exceeds the %d experts",
                        x->path, c->num_experts_per_tok, c->num_experts);
    if (f->keys == LWQ_KEYS_MIXTRAL) {
        c->moe_intermediate_size = c->intermediate_size; /* Mixtral experts use intermediate_size */
    } else {
        LWQ_TRY(lwq_cfg_int(x, o, "moe_intermediate_size", 1, 0, 1, bigdim, &v));
        c->moe_intermediate_size = v;
    }
    if (f->router == LWQ_ROUTER_SIGMOID_BIAS)
        LWQ_TRY(parse_sigmoid_router(x, o, c));
    if (f->router == LWQ_ROUTER_SOFTMAX_GROUPED)
        LWQ_TRY(parse_softmax_grouped(x, o, c));
    if (f->norm_topk_fixed)
        c->norm_topk_prob = 1; /* the router always renormalises */
    else
        LWQ_TRY(lwq_cfg_bool(x, o, "norm_topk_prob", f->norm_topk_default, &c->norm_topk_prob));
    if (f->moe == LWQ_MOE_SPARSE_STEP) {
        LWQ_TRY(lwq_cfg_i32(x, o, "decoder_sparse_step", 0, 1, 1, LWQ_MAX_LAYERS, &c->decoder_sparse_step));
        const cJSON *ml = lwq_cfg_get(o, "mlp_only_layers");
        if (ml) {
            if (!cJSON_IsArray(ml))
                return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%smlp_only_layers\" must be an array",
                                x->path, x->section);
            int n = cJSON_GetArraySize(ml);
            c->mlp_only_layers = calloc((size_t)n + 1, sizeof *c->mlp_only_layers);
            if (!c->mlp_only_layers)
                return lwq_errf(x->e, LWQ_ENOMEM, "%s: out of memory", x->path);
            const cJSON *it;
            cJSON_ArrayForEach(it, ml)
            {
                if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
                    it->valuedouble < 0 || it->valuedouble >= c->num_hidden_layers)
                    return lwq_errf(x->e, LWQ_EFORMAT,
                                    "%s: \"%smlp_only_layers\" holds an entry that is not a layer "
                                    "index below %d",
                                    x->path, x->section, c->num_hidden_layers);
                c->mlp_only_layers[c->n_mlp_only_layers++] = (int)it->valuedouble;
            }
        }
    } else {
        c->decoder_sparse_step = 1;
    }
    if (f->moe == LWQ_MOE_SPARSE_STEP || f->shared == LWQ_SHARED_GATED) {
        LWQ_TRY(lwq_cfg_int(x, o, "shared_expert_intermediate_size", 0, 0, 0, bigdim, &v));
        c->shared_expert_intermediate_size = v;
        if (f->shared == LWQ_SHARED_GATED && v > 0)
            c->n_shared_experts = 1;
    }
    return 0;
}

/* Mistral-Small-4's RoPE and query scale as Mistral4Config and Mistral4Attention read them
 * (transformers 5.14.1).  Without rope_parameters the config class fills in its yarn defaults
 * (theta 1e4, factor 128, original_max_position_embeddings 8192, beta_fast 32, beta_slow 1,
 * mscale and mscale_all_dim 1, llama_4_scaling_beta 0.1) and ignores a top-level rope_theta;
 * inside rope_parameters, rope_theta and partial_rotary_factor win over top-level keys (the
 * partial factor defaults to qk_rope_head_dim / head_dim).  The rope part is int(head_dim *
 * partial_rotary_factor) dims, which must be qk_rope_head_dim (the attention splits q and k at
 * it).  Refused by name: rope_scaling (transformers 4's key: it would replace the class's
 * rope_parameters and their partial factor), a factor giving another rope width, a rope type
 * other than yarn (transformers' own default RoPE here rotates head_dim dims, usable only
 * without a nope part), attention_bias true, rope_interleave false (lwq's MLA rotates interleaved pairs), and the
 * Llama-4 scale keys missing (transformers fails without them). */
static int parse_mla_llama4(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    if (lwq_cfg_get(o, "rope_scaling"))
        return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                        "%s: model_type '%s': \"%srope_scaling\" is not read for this model_type (it would "
                        "replace Mistral4Config's rope_parameters); give rope_parameters",
                        x->path, c->model_type, x->section);
    const cJSON *s = lwq_cfg_get(o, "rope_parameters");
    if (!s) {
        c->rope_type = LWQ_ROPE_YARN;
        c->rope_theta = 10000.0;
        c->rope_factor = 128.0;
        c->rope_original_max_position = 8192;
        c->rope_beta_fast = 32.0;
        c->rope_beta_slow = 1.0;
        c->rope_mscale = c->rope_mscale_all_dim = 1.0;
        c->llama4_beta = 0.1;
        c->llama4_orig_max = 8192;
    } else if (lwq_cfg_get(s, "rope_theta")) {
        LWQ_TRY(lwq_cfg_num(x, s, "rope_theta", 10000.0, &c->rope_theta));
        if (!(c->rope_theta > 0))
            return lwq_errf(x->e, LWQ_EFORMAT, "%s: rope_theta must be positive", x->path);
    }
    const double def_partial = (double)c->qk_rope_head_dim / (double)c->head_dim;
    double partial = def_partial;
    LWQ_TRY(lwq_cfg_num(x, s, "partial_rotary_factor", def_partial, &partial));
    if ((int64_t)((double)c->head_dim * partial) != c->qk_rope_head_dim)
        return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                        "%s: model_type '%s': \"%srope_parameters.partial_rotary_factor\" = %g rotates %lld of "
                        "the %lld q/k head dims, but the rope part (qk_rope_head_dim) is %lld",
                        x->path, c->model_type, x->section, partial, (long long)((double)c->head_dim * partial),
                        (long long)c->head_dim, (long long)c->qk_rope_head_dim);
    c->partial_rotary_factor = partial;
    if (c->rope_type != LWQ_ROPE_YARN && !(c->rope_type == LWQ_ROPE_DEFAULT && c->qk_nope_head_dim == 0)) {
        char type[32];
        LWQ_TRY(lwq_cfg_str(x, s, lwq_cfg_get(s, "rope_type") ? "rope_type" : "type", "default", type, sizeof type));
        return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                        "%s: model_type '%s': \"%srope_parameters.rope_type\" = \"%s\" is not supported: lwq "
                        "runs this model's yarn RoPE (default only with qk_nope_head_dim 0)",
                        x->path, c->model_type, x->section, type);
    }
    if (c->attention_bias)
        return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                        "%s: model_type '%s': \"%sattention_bias\" = true is not supported (lwq's MLA has no "
                        "q_a / kv_a / o_proj biases)", x->path, c->model_type, x->section);
    int inter = 1;
    LWQ_TRY(lwq_cfg_bool(x, o, "rope_interleave", 1, &inter));
    if (!inter)
        return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                        "%s: model_type '%s': \"%srope_interleave\" = false is not supported (lwq's MLA "
                        "rotates interleaved pairs)", x->path, c->model_type, x->section);
    if (s) {
        const char *miss = !lwq_cfg_get(s, "llama_4_scaling_beta") ? "llama_4_scaling_beta"
                           : !lwq_cfg_get(s, "original_max_position_embeddings") ? "original_max_position_embeddings"
                                                                          : NULL;
        if (miss)
            return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                            "%s: model_type '%s': \"%srope_parameters\" has no \"%s\": transformers' Llama-4 "
                            "query scale needs it", x->path, c->model_type, x->section, miss);
        LWQ_TRY(lwq_cfg_num(x, s, "llama_4_scaling_beta", 0, &c->llama4_beta));
        LWQ_TRY(lwq_cfg_int(x, s, "original_max_position_embeddings", 1, 0, 1, INT64_C(1) << 32, &c->llama4_orig_max));
    }
    return 0;
}

int lwq_cfg_parse_mla(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    const int64_t bigdim = INT64_C(1) << 20;
    LWQ_TRY(lwq_cfg_int(x, o, "q_lora_rank", 0, 0, 0, bigdim, &c->q_lora_rank)); /* null: plain q_proj */
    LWQ_TRY(lwq_cfg_int(x, o, "kv_lora_rank", 1, 0, 1, bigdim, &c->kv_lora_rank));
    LWQ_TRY(lwq_cfg_int(x, o, "qk_nope_head_dim", 1, 0, 0, bigdim, &c->qk_nope_head_dim));
    LWQ_TRY(lwq_cfg_int(x, o, "qk_rope_head_dim", 1, 0, 1, bigdim, &c->qk_rope_head_dim));
    LWQ_TRY(lwq_cfg_int(x, o, "v_head_dim", 1, 0, 1, bigdim, &c->v_head_dim));
    c->head_dim = c->qk_nope_head_dim + c->qk_rope_head_dim; /* the q/k head width */
    if (c->family->llama4_qscale)
        LWQ_TRY(parse_mla_llama4(x, o, c));
    return 0;
}

/* The DSA indexer's geometry and its layers: every layer (deepseek_v32), or glm_moe_dsa's
 * indexer_types ("full" / "shared"), index_topk_pattern ("F" / "S" per layer) or the
 * index_topk_freq / index_skip_topk_offset schedule, as transformers derives them.  mlp_layer_types,
 * where present, must be what first_k_dense_replace gives. */
int lwq_cfg_parse_dsa(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    const int n = c->num_hidden_layers;
    LWQ_TRY(lwq_cfg_i32(x, o, "index_topk", 1, 0, 1, 1 << 30, &c->index_topk));
    LWQ_TRY(lwq_cfg_i32(x, o, "index_n_heads", 1, 0, 1, 1 << 16, &c->index_n_heads));
    LWQ_TRY(lwq_cfg_int(x, o, "index_head_dim", 1, 0, 1, 1 << 16, &c->index_head_dim));
    if (c->q_lora_rank <= 0 || c->index_head_dim < c->qk_rope_head_dim)
        return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                        "%s: model_type '%s': the DSA indexer needs q_lora_rank > 0 (got %lld) and index_head_dim "
                        "%lld >= qk_rope_head_dim %lld",
                        x->path, c->model_type, (long long)c->q_lora_rank, (long long)c->index_head_dim,
                        (long long)c->qk_rope_head_dim);
    if (!(c->layer_indexer = calloc((size_t)n + 1, 1)))
        return lwq_errf(x->e, LWQ_ENOMEM, "%s: out of memory", x->path);
    const cJSON *types = lwq_cfg_get(o, "indexer_types"), *pat = lwq_cfg_get(o, "index_topk_pattern");
    for (int i = 0; i < n; i++)
        c->layer_indexer[i] = 1;
    if (c->family->dsa == 2 && types) {
        if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != n)
            return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%sindexer_types\" must list %d layer types", x->path,
                            x->section, n);
        for (int i = 0; i < n; i++) {
            const cJSON *t = cJSON_GetArrayItem(types, i);
            int full = cJSON_IsString(t) && !strcmp(t->valuestring, "full");
            if (!full && !(cJSON_IsString(t) && !strcmp(t->valuestring, "shared")))
                return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                                "%s: model_type '%s': \"%sindexer_types\"[%d] = %s%s%s is not an indexer type lwq "
                                "implements (\"full\", \"shared\")",
                                x->path, c->model_type, x->section, i, cJSON_IsString(t) ? "\"" : "",
                                cJSON_IsString(t) ? t->valuestring : "a non-string", cJSON_IsString(t) ? "\"" : "");
            c->layer_indexer[i] = (unsigned char)full;
        }
    } else if (c->family->dsa == 2 && pat) {
        size_t len = cJSON_IsString(pat) ? strlen(pat->valuestring) : 0;
        for (int i = 0; i < n; i++) {
            char ch = i < (int)len ? pat->valuestring[i] : 0;
            if (len != (size_t)n || (ch != 'F' && ch != 'S'))
                return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                                "%s: model_type '%s': \"%sindex_topk_pattern\" must be %d letters F or S, one per "
                                "layer",
                                x->path, c->model_type, x->section, n);
            c->layer_indexer[i] = ch == 'F';
        }
    } else if (c->family->dsa == 2) {
        int freq = 1, off = 2;
        LWQ_TRY(lwq_cfg_i32(x, o, "index_topk_freq", 0, 1, 1, LWQ_MAX_LAYERS, &freq));
        LWQ_TRY(lwq_cfg_i32(x, o, "index_skip_topk_offset", 0, 2, 0, LWQ_MAX_LAYERS, &off));
        for (int i = 0; i < n; i++)
            c->layer_indexer[i] = ((i - off + 1 > 0 ? i - off + 1 : 0) % freq) == 0;
    }
    if (!c->layer_indexer[0])
        return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                        "%s: model_type '%s': layer 0 shares the indexer selection of no earlier layer", x->path,
                        c->model_type);
    const cJSON *mt = lwq_cfg_get(o, "mlp_layer_types");
    if (mt) {
        if (!cJSON_IsArray(mt) || cJSON_GetArraySize(mt) != n)
            return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%smlp_layer_types\" must list %d layer types", x->path,
                            x->section, n);
        for (int i = 0; i < n; i++) {
            const cJSON *t = cJSON_GetArrayItem(mt, i);
            const char *want = lwq_config_layer_is_moe(c, i) ? "sparse" : "dense";
            if (!cJSON_IsString(t) || strcmp(t->valuestring, want))
                return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                                "%s: model_type '%s': \"%smlp_layer_types\"[%d] = %s%s%s, but first_k_dense_replace "
                                "%d makes layer %d %s",
                                x->path, c->model_type, x->section, i, cJSON_IsString(t) ? "\"" : "",
                                cJSON_IsString(t) ? t->valuestring : "a non-string", cJSON_IsString(t) ? "\"" : "",
                                c->first_k_dense_replace, i, want);
        }
    }
    return 0;
}

int lwq_config_layer_is_moe(const lwq_model_config *c, int layer)
{
    if (c->num_experts <= 0 || layer < 0)
        return 0;
    if (c->layer_moe) /* a per-layer list (kimi_linear's mlp_layer_types) */
        return layer < c->num_hidden_layers && c->layer_moe[layer];
    switch (c->family ? c->family->moe : LWQ_MOE_NONE) {
    case LWQ_MOE_ALL: return 1;
    case LWQ_MOE_SPARSE_STEP:
        for (int i = 0; i < c->n_mlp_only_layers; i++)
            if (c->mlp_only_layers[i] == layer)
                return 0;
        return (layer + 1) % (c->decoder_sparse_step > 0 ? c->decoder_sparse_step : 1) == 0;
    case LWQ_MOE_FIRST_K:
        return layer >= c->first_k_dense_replace &&
               layer % (c->moe_layer_freq > 0 ? c->moe_layer_freq : 1) == 0;
    case LWQ_MOE_LAYER_TYPES:
        return c->layer_moe && layer < c->num_hidden_layers && c->layer_moe[layer];
    default: return 0;
    }
}
