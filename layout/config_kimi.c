/* layout/config_kimi.c — kimi_linear's config keys (config_keys.h), as transformers 5.23's
 * KimiLinearConfig reads them (transformers 5.14.1 has no kimi_linear: docs/FAMILIES.md).
 *
 * KimiLinearConfig has an attribute_map: save_pretrained writes num_experts,
 * num_experts_per_token, num_shared_experts, num_expert_group and moe_renormalize, and a config
 * may spell them num_local_experts, num_experts_per_tok, n_shared_experts, n_group and
 * norm_topk_prob instead; both spellings of one key that disagree are refused by name.  The
 * published checkpoints keep the KDA geometry and the layer kinds in a "linear_attn_config"
 * object (head_dim, num_heads, short_conv_kernel_size, kda_layers / full_attn_layers, 1-based),
 * which __post_init__ prefers to the top-level linear_* keys; "layer_types", when present, wins
 * over its layer lists.  Keys transformers does not read but that would describe another model
 * than the one it builds (a RoPE'd MLA, a softmax router, a moe_layer_freq) are refused by name:
 * transformers would calibrate a different model from the one the config announces. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/config_internal.h"

/* Which of two spellings of one key the config uses (`a` when neither): both present with
 * different values is an error naming both. */
static int spelling(const lwq_cfg_ctx *x, const cJSON *o, const lwq_model_config *c, const char *a,
                    const char *b, const char **key)
{
    const cJSON *va = lwq_cfg_get(o, a), *vb = lwq_cfg_get(o, b);
    *key = va || !vb ? a : b;
    if (va && vb && !cJSON_Compare(va, vb, 1))
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: model_type '%s': \"%s%s\" and \"%s%s\" are one key of "
                        "KimiLinearConfig and disagree", x->path, c->model_type, x->section, a, x->section, b);
    return 0;
}

int lwq_cfg_parse_kimi_moe(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    const int big = 1 << 16;
    const char *k;
    int64_t v;
    LWQ_TRY(spelling(x, o, c, "num_experts", "num_local_experts", &k));
    LWQ_TRY(lwq_cfg_i32(x, o, k, 1, 0, 1, big, &c->num_experts));
    LWQ_TRY(spelling(x, o, c, "num_experts_per_token", "num_experts_per_tok", &k));
    LWQ_TRY(lwq_cfg_i32(x, o, k, 1, 0, 1, big, &c->num_experts_per_tok));
    if (c->num_experts_per_tok > c->num_experts)
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%s%s\" = %d exceeds the %d experts", x->path, x->section, k,
                        c->num_experts_per_tok, c->num_experts);
    LWQ_TRY(spelling(x, o, c, "num_shared_experts", "n_shared_experts", &k));
    LWQ_TRY(lwq_cfg_i32(x, o, k, 0, 1, 0, big, &c->n_shared_experts));
    LWQ_TRY(spelling(x, o, c, "num_expert_group", "n_group", &k));
    LWQ_TRY(lwq_cfg_i32(x, o, k, 0, 1, 1, big, &c->n_group));
    LWQ_TRY(lwq_cfg_i32(x, o, "topk_group", 0, 1, 1, big, &c->topk_group));
    if (c->topk_group > c->n_group || c->num_experts % c->n_group)
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: model_type '%s': %d experts in %s%s %d groups with topk_group %d "
                        "is not usable", x->path, c->model_type, c->num_experts, x->section, k, c->n_group,
                        c->topk_group);
    LWQ_TRY(spelling(x, o, c, "moe_renormalize", "norm_topk_prob", &k));
    LWQ_TRY(lwq_cfg_bool(x, o, k, 1, &c->norm_topk_prob));
    LWQ_TRY(lwq_cfg_num(x, o, "routed_scaling_factor", 2.446, &c->routed_scaling_factor));
    LWQ_TRY(lwq_cfg_int(x, o, "moe_intermediate_size", 1, 0, 1, INT64_C(1) << 22, &v));
    c->moe_intermediate_size = v;
    snprintf(c->scoring_func, sizeof c->scoring_func, "sigmoid");
    snprintf(c->topk_method, sizeof c->topk_method, "noaux_tc");
    c->moe_layer_freq = 1;
    /* keys of the published configs that transformers' router does not read: they must say
     * what it computes (sigmoid scores, the group top-k, every layer past the dense ones) */
    char act[32];
    int grouped = 1, freq = 1;
    LWQ_TRY(lwq_cfg_str(x, o, "moe_router_activation_func", "sigmoid", act, sizeof act));
    if (strcmp(act, "sigmoid"))
        return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: model_type '%s': \"%smoe_router_activation_func\" = \"%s\" "
                        "is not what transformers' KimiLinearTopkRouter computes (sigmoid)", x->path,
                        c->model_type, x->section, act);
    LWQ_TRY(lwq_cfg_bool(x, o, "use_grouped_topk", 1, &grouped));
    if (!grouped && c->n_group > 1)
        return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: model_type '%s': \"%suse_grouped_topk\" = false with %d "
                        "expert groups: transformers' router always picks the topk_group groups first", x->path,
                        c->model_type, x->section, c->n_group);
    LWQ_TRY(lwq_cfg_i32(x, o, "moe_layer_freq", 0, 1, 1, 1 << 20, &freq));
    if (freq != 1)
        return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: model_type '%s': \"%smoe_layer_freq\" = %d: transformers "
                        "builds routed experts on every layer past the dense ones (mlp_layer_types)", x->path,
                        c->model_type, x->section, freq);
    return 0;
}

/* The 1-based layer list `key` of linear_attn_config into kind[] (0 unset): entries outside
 * 1..n, non-integers and a layer listed twice are refused. */
static int layer_list(const lwq_cfg_ctx *x, const lwq_model_config *c, const cJSON *lac, const char *key,
                      unsigned char val, unsigned char *kind)
{
    const cJSON *l = lwq_cfg_get(lac, key), *it;
    const int n = c->num_hidden_layers;
    if (!cJSON_IsArray(l) || cJSON_GetArraySize(l) > n)
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%slinear_attn_config.%s\" must list at most %d layers", x->path,
                        x->section, key, n);
    cJSON_ArrayForEach(it, l)
    {
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (d != floor(d) || d < 1 || d > n)
            return lwq_errf(x->e, LWQ_EFORMAT, "%s: model_type '%s': \"%slinear_attn_config.%s\" holds an entry "
                            "that is not a layer number in 1..%d (the list is 1-based)", x->path, c->model_type,
                            x->section, key, n);
        int i = (int)d - 1;
        if (kind[i])
            return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: model_type '%s': layer %d (number %d) is listed twice in "
                            "\"%slinear_attn_config\" (kda_layers / full_attn_layers)", x->path, c->model_type, i,
                            i + 1, x->section);
        kind[i] = val;
    }
    return 0;
}

int lwq_cfg_parse_kimi_layers(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    const int n = c->num_hidden_layers;
    const cJSON *lac = lwq_cfg_get(o, "linear_attn_config");
    if (lac && !cJSON_IsObject(lac))
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%slinear_attn_config\" must be an object", x->path, x->section);
    int64_t hd, nh, ks;
    /* linear_attn_config's keys override the top-level ones (KimiLinearConfig.__post_init__) */
    if (lwq_cfg_get(lac, "head_dim"))
        LWQ_TRY(lwq_cfg_int(x, lac, "head_dim", 1, 0, 1, 4096, &hd));
    else
        LWQ_TRY(lwq_cfg_int(x, o, "linear_head_dim", 0, 128, 1, 4096, &hd));
    if (lwq_cfg_get(lac, "num_heads"))
        LWQ_TRY(lwq_cfg_int(x, lac, "num_heads", 1, 0, 1, 4096, &nh));
    else
        LWQ_TRY(lwq_cfg_int(x, o, "linear_num_heads", 0, 32, 1, 4096, &nh));
    if (lwq_cfg_get(lac, "short_conv_kernel_size"))
        LWQ_TRY(lwq_cfg_int(x, lac, "short_conv_kernel_size", 1, 0, 1, 64, &ks));
    else
        LWQ_TRY(lwq_cfg_int(x, o, "linear_conv_kernel_dim", 0, 4, 1, 64, &ks));
    c->linear_num_key_heads = c->linear_num_value_heads = (int)nh;
    c->linear_key_head_dim = c->linear_value_head_dim = hd;
    c->linear_conv_kernel_dim = (int)ks;

    /* MLA: transformers' KimiLinearAttention rotates nothing, and its keys have one head per
     * query head (repeat_kv by num_attention_heads / num_key_value_heads would not fit them) */
    int nope = 1;
    LWQ_TRY(lwq_cfg_bool(x, o, "mla_use_nope", 1, &nope));
    if (!nope)
        return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: model_type '%s': \"%smla_use_nope\" = false: transformers' "
                        "KimiLinearAttention applies no RoPE", x->path, c->model_type, x->section);
    if (c->num_key_value_heads != c->num_attention_heads)
        return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: model_type '%s': \"%snum_key_value_heads\" = %d differs from "
                        "num_attention_heads %d: the MLA keys have one head per query head", x->path,
                        c->model_type, x->section, c->num_key_value_heads, c->num_attention_heads);

    c->layer_mixer = calloc((size_t)n + 1, 1);
    c->layer_moe = calloc((size_t)n + 1, 1);
    if (!c->layer_mixer || !c->layer_moe)
        return lwq_errf(x->e, LWQ_ENOMEM, "%s: out of memory", x->path);
    const cJSON *lt = lwq_cfg_get(o, "layer_types");
    if (lt) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != n)
            return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%slayer_types\" must list %d layer types", x->path,
                            x->section, n);
        for (int i = 0; i < n; i++) {
            const cJSON *t = cJSON_GetArrayItem(lt, i);
            int lin = cJSON_IsString(t) && !strcmp(t->valuestring, "linear_attention");
            if (!lin && !(cJSON_IsString(t) && !strcmp(t->valuestring, "full_attention")))
                return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: model_type '%s': \"%slayer_types\"[%d] = %s%s%s is not "
                                "a layer type lwq implements (\"linear_attention\", \"full_attention\")", x->path,
                                c->model_type, x->section, i, cJSON_IsString(t) ? "\"" : "",
                                cJSON_IsString(t) ? t->valuestring : "a non-string", cJSON_IsString(t) ? "\"" : "");
            c->layer_mixer[i] = (unsigned char)(lin ? LWQ_MIXER_KDA : LWQ_MIXER_MLA);
        }
    } else if (lwq_cfg_get(lac, "full_attn_layers") && lwq_cfg_get(lac, "kda_layers")) {
        LWQ_TRY(layer_list(x, c, lac, "full_attn_layers", LWQ_MIXER_MLA, c->layer_mixer));
        LWQ_TRY(layer_list(x, c, lac, "kda_layers", LWQ_MIXER_KDA, c->layer_mixer));
        for (int i = 0; i < n; i++)
            if (!c->layer_mixer[i]) /* transformers would leave its type None */
                return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: model_type '%s': layer %d (number %d) is in neither "
                                "\"%slinear_attn_config.kda_layers\" nor full_attn_layers", x->path,
                                c->model_type, i, i + 1, x->section);
    } else { /* transformers' default: full attention on layers 4, 8, ... */
        for (int i = 0; i < n; i++)
            c->layer_mixer[i] = (unsigned char)(i && i % 4 == 0 ? LWQ_MIXER_MLA : LWQ_MIXER_KDA);
    }

    const cJSON *mt = lwq_cfg_get(o, "mlp_layer_types");
    if (mt) {
        if (!cJSON_IsArray(mt) || cJSON_GetArraySize(mt) != n)
            return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%smlp_layer_types\" must list %d layer types", x->path,
                            x->section, n);
        for (int i = 0; i < n; i++) {
            const cJSON *t = cJSON_GetArrayItem(mt, i);
            int sparse = cJSON_IsString(t) && !strcmp(t->valuestring, "sparse");
            if (!sparse && !(cJSON_IsString(t) && !strcmp(t->valuestring, "dense")))
                return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: model_type '%s': \"%smlp_layer_types\"[%d] = %s%s%s is "
                                "not an MLP type lwq implements (\"dense\", \"sparse\")", x->path, c->model_type,
                                x->section, i, cJSON_IsString(t) ? "\"" : "",
                                cJSON_IsString(t) ? t->valuestring : "a non-string", cJSON_IsString(t) ? "\"" : "");
            c->layer_moe[i] = (unsigned char)sparse;
        }
    } else {
        LWQ_TRY(lwq_cfg_i32(x, o, "first_k_dense_replace", 0, 1, 0, LWQ_MAX_LAYERS, &c->first_k_dense_replace));
        for (int i = 0; i < n; i++)
            c->layer_moe[i] = i >= c->first_k_dense_replace;
    }
    return 0;
}
