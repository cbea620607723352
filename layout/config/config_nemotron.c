/* layout/config/config_nemotron.c — nemotron_h's keys (config_internal.h), as transformers 5.14.1's
 * NemotronHConfig reads them: the layer list, the Mamba2 geometry with its legacy spellings
 * (mamba_n_groups, mamba_d_conv, mamba_dt_min, mamba_conv_bias), the ReLU^2 MLP and the MoE.
 * Everything lwq cannot compute as transformers does is refused here, before any weight is read,
 * naming config.json, the key, its value and (for a geometry that does not divide) the first
 * layer that needs it. */
#include "layout/config/config_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One layers_block_type / layer_types entry (current or legacy names) or pattern letter. */
static int block_of(const char *s, char letter, lwq_mixer_kind *mixer, int *moe)
{
    *moe = 0;
    if ((s && (!strcmp(s, "mamba") || !strcmp(s, "linear_attention"))) || letter == 'M')
        *mixer = LWQ_MIXER_MAMBA2;
    else if ((s && (!strcmp(s, "attention") || !strcmp(s, "full_attention"))) || letter == '*')
        *mixer = LWQ_MIXER_GQA;
    else if ((s && !strcmp(s, "mlp")) || letter == '-')
        *mixer = LWQ_MIXER_NONE;
    else if ((s && !strcmp(s, "moe")) || letter == 'E') {
        *mixer = LWQ_MIXER_NONE;
        *moe = 1;
    } else
        return -1;
    return 0;
}

int lwq_cfg_nemotron_layers(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    /* transformers: layers_block_type (layer_types is its attribute alias) wins over the legacy
     * hybrid_override_pattern; without either, its default four layers */
    const char *key = "layers_block_type";
    const cJSON *lt = lwq_cfg_get(o, key);
    if (!lt && (lt = lwq_cfg_get(o, "layer_types")))
        key = "layer_types";
    const cJSON *pat = lt ? NULL : lwq_cfg_get(o, "hybrid_override_pattern");
    static const char *const dflt[] = {"linear_attention", "moe", "full_attention", "mlp"};
    int n;
    if (lt) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) < 1 || cJSON_GetArraySize(lt) > LWQ_MAX_LAYERS)
            return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%s%s\" must be a list of 1 to %d layer types", x->path,
                            x->section, key, LWQ_MAX_LAYERS);
        n = cJSON_GetArraySize(lt);
    } else if (pat) {
        if (!cJSON_IsString(pat) || strlen(pat->valuestring) < 1 || strlen(pat->valuestring) > LWQ_MAX_LAYERS)
            return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%shybrid_override_pattern\" must be a string of 1 to %d "
                            "letters", x->path, x->section, LWQ_MAX_LAYERS);
        n = (int)strlen(pat->valuestring);
        key = "hybrid_override_pattern";
    } else {
        n = 4;
    }
    int64_t declared;
    LWQ_TRY(lwq_cfg_int(x, o, "num_hidden_layers", 0, n, 1, LWQ_MAX_LAYERS, &declared));
    if (declared != n) /* transformers warns and takes the list; two answers are refused here */
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: model_type '%s': \"%snum_hidden_layers\" = %lld, but \"%s%s\" "
                        "lists %d layers", x->path, c->model_type, x->section, (long long)declared, x->section,
                        lt || pat ? key : "layers_block_type (transformers' default)", n);
    c->num_hidden_layers = n;
    if (!(c->layer_mixer = calloc((size_t)n + 1, 1)) || !(c->layer_moe = calloc((size_t)n + 1, 1)))
        return lwq_errf(x->e, LWQ_ENOMEM, "%s: out of memory", x->path);
    for (int i = 0; i < n; i++) {
        const cJSON *t = lt ? cJSON_GetArrayItem(lt, i) : NULL;
        const char *s = lt ? (cJSON_IsString(t) ? t->valuestring : NULL) : pat ? NULL : dflt[i];
        char letter = pat ? pat->valuestring[i] : 0;
        lwq_mixer_kind k;
        int moe;
        if (block_of(s, letter, &k, &moe) < 0) {
            if (pat)
                return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: model_type '%s': \"%shybrid_override_pattern\"[%d] = "
                                "'%c' (layer %d) is not a block type lwq implements (M mamba, * attention, - mlp, "
                                "E moe)", x->path, c->model_type, x->section, i,
                                letter >= 0x20 && letter < 0x7f ? letter : '?', i);
            return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: model_type '%s': \"%s%s\"[%d] = %s%.64s%s (layer %d) is not "
                            "a block type lwq implements (mamba / linear_attention, attention / full_attention, "
                            "mlp, moe)", x->path, c->model_type, x->section, key, i, s ? "\"" : "",
                            s ? s : "a non-string", s ? "\"" : "", i);
        }
        c->layer_mixer[i] = (unsigned char)k;
        c->layer_moe[i] = (unsigned char)moe;
    }
    return 0;
}

/* The first layer whose mixer is k, or -1. */
static int first_layer(const lwq_model_config *c, lwq_mixer_kind k, int moe)
{
    for (int i = 0; i < c->num_hidden_layers; i++)
        if (moe ? c->layer_moe[i] : (!c->layer_moe[i] && c->layer_mixer[i] == k))
            return i;
    return -1;
}

/* key (or its legacy spelling, which NemotronHConfig pops in its place) */
static const char *spelled(const cJSON *o, const char *key, const char *legacy)
{
    return lwq_cfg_get(o, legacy) ? legacy : key;
}

static int want_false(const lwq_cfg_ctx *x, const cJSON *o, const lwq_model_config *c, const char *key,
                      const char *why)
{
    int v = 0;
    LWQ_TRY(lwq_cfg_bool(x, o, key, 0, &v));
    if (v)
        return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: model_type '%s': \"%s%s\" = true is not supported (%s)",
                        x->path, c->model_type, x->section, key, why);
    return 0;
}

static int want_str(const lwq_cfg_ctx *x, const cJSON *o, const lwq_model_config *c, const char *key,
                    const char *want, int layer, const char *what)
{
    char v[32];
    LWQ_TRY(lwq_cfg_str(x, o, key, want, v, sizeof v));
    if (layer >= 0 && strcmp(v, want))
        return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: model_type '%s': \"%s%s\" = \"%s\" (layer %d's %s) is not "
                        "supported (%s only)", x->path, c->model_type, x->section, key, v, layer, what, want);
    return 0;
}

int lwq_cfg_nemotron_keys(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    const int64_t bigdim = INT64_C(1) << 22;
    const int lm = first_layer(c, LWQ_MIXER_MAMBA2, 0), lmlp = first_layer(c, LWQ_MIXER_NONE, 0),
              le = first_layer(c, LWQ_MIXER_NONE, 1);
    /* the biases transformers would add: in_proj / out_proj (use_bias), the MLP's, the experts'
     * latent projections and the shared expert's (mlp_bias); NemotronHAttention has none at all,
     * whatever attention_bias says */
    LWQ_TRY(want_false(x, o, c, "use_bias", "the Mamba2 in_proj / out_proj biases"));
    LWQ_TRY(want_false(x, o, c, "mlp_bias", "the MLP and MoE projection biases"));
    c->attention_bias = 0;
    c->mlp_bias = 0;
    LWQ_TRY(want_str(x, o, c, "mlp_hidden_act", "relu2", lmlp >= 0 ? lmlp : le, lmlp >= 0 ? "MLP" : "MoE"));
    LWQ_TRY(want_str(x, o, c, "mamba_hidden_act", "silu", lm, "Mamba2 conv1d"));

    LWQ_TRY(lwq_cfg_i32(x, o, "mamba_num_heads", 0, 128, 1, 1 << 16, &c->mamba_num_heads));
    LWQ_TRY(lwq_cfg_int(x, o, "mamba_head_dim", 0, 64, 1, 1 << 16, &c->mamba_head_dim));
    LWQ_TRY(lwq_cfg_int(x, o, "ssm_state_size", 0, 128, 1, 1 << 16, &c->ssm_state_size));
    const char *kg = spelled(o, "n_groups", "mamba_n_groups"), *kk = spelled(o, "conv_kernel", "mamba_d_conv"),
               *kt = spelled(o, "time_step_min", "mamba_dt_min"), *kb = spelled(o, "use_conv_bias", "mamba_conv_bias");
    LWQ_TRY(lwq_cfg_i32(x, o, kg, 0, 8, 1, 1 << 16, &c->mamba_n_groups));
    LWQ_TRY(lwq_cfg_i32(x, o, kk, 0, 4, 1, 64, &c->mamba_conv_kernel));
    LWQ_TRY(lwq_cfg_num(x, o, kt, 0.001, &c->time_step_min));
    LWQ_TRY(lwq_cfg_bool(x, o, kb, 1, &c->mamba_conv_bias));
    if (lm >= 0 && c->mamba_num_heads % c->mamba_n_groups)
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: model_type '%s': \"%s%s\" = %d does not divide \"%smamba_num_heads\" "
                        "= %d (layer %d is Mamba2: each group's B and C serve a whole number of heads)", x->path,
                        c->model_type, x->section, kg, c->mamba_n_groups, x->section, c->mamba_num_heads, lm);
    if (lm >= 0 && (int64_t)c->mamba_num_heads * c->mamba_head_dim > bigdim)
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: model_type '%s': \"%smamba_num_heads\" %d x \"%smamba_head_dim\" "
                        "%lld is absurd (layer %d)", x->path, c->model_type, x->section, c->mamba_num_heads, x->section,
                        (long long)c->mamba_head_dim, lm);
    if (lm >= 0 && (int64_t)c->mamba_n_groups * c->ssm_state_size > bigdim)
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: model_type '%s': \"%s%s\" %d x \"%sssm_state_size\" %lld is absurd "
                        "(layer %d)", x->path, c->model_type, x->section, kg, c->mamba_n_groups, x->section,
                        (long long)c->ssm_state_size, lm);
    if (lm >= 0 && !(c->time_step_min >= 0.0 && c->time_step_min < 1e3))
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: model_type '%s': \"%s%s\" = %g is outside [0, 1000) (layer %d)",
                        x->path, c->model_type, x->section, kt, c->time_step_min, lm);

    int64_t v;
    LWQ_TRY(lwq_cfg_int(x, o, "moe_shared_expert_intermediate_size", le >= 0, 0, 1, bigdim, &v));
    c->shared_expert_intermediate_size = v;
    LWQ_TRY(lwq_cfg_int(x, o, "moe_latent_size", 0, 0, 1, bigdim, &c->moe_latent_size));
    if (le >= 0)
        c->n_shared_experts = 1; /* NemotronHMoE always builds its one shared MLP */
    /* the attention: heads and head_dim were read as for every GQA row; a layer list without
     * attention layers needs them only for the messages */
    return 0;
}
