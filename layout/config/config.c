/* layout/config/config.c — config.json -> lwq_model_config (contract in config.h).
 * Defaults follow the transformers configuration classes of each model_type, so a key that the
 * config class would fill in may be absent; keys the forward cannot do without are required. */
#include "layout/config/config.h"
#include "layout/config/config_internal.h"

#include "layout/checkpoint/checkpoint.h"

#include "core/sys/file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CONFIG_MAX_BYTES (16u << 20)

static int parse_dtype(const lwq_cfg_ctx *x, const cJSON *o, lwq_dtype *out, int *explicit_)
{
    /* transformers 5 writes "dtype", 4 wrote "torch_dtype"; a config may carry both. */
    const char *key = lwq_cfg_get(o, "dtype") ? "dtype" : "torch_dtype";
    const cJSON *v = lwq_cfg_get(o, key);
    if (!v) {
        *out = LWQ_BF16;
        return 0;
    }
    if (!cJSON_IsString(v))
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%s%s\" must be a string", x->path, x->section,
                        key);
    *explicit_ = 1;
    static const struct {
        const char *s;
        lwq_dtype t;
    } m[] = {{"bfloat16", LWQ_BF16}, {"float16", LWQ_F16}, {"half", LWQ_F16},
             {"float32", LWQ_F32},   {"float", LWQ_F32},   {"float64", LWQ_F64}};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        if (!strcmp(v->valuestring, m[i].s)) {
            *out = m[i].t;
            return 0;
        }
    }
    return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: \"%s%s\" = \"%s\" is not a supported dtype", x->path,
                    x->section, key, v->valuestring);
}

static int parse_rope(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    /* transformers 4: rope_theta + rope_scaling{rope_type|type, ...};
     * transformers 5: rope_parameters{rope_theta, rope_type, ...}. */
    const cJSON *params = lwq_cfg_get(o, "rope_parameters");
    const cJSON *scaling = lwq_cfg_get(o, "rope_scaling");
    if (params && !cJSON_IsObject(params))
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%srope_parameters\" must be an object", x->path,
                        x->section);
    if (scaling && !cJSON_IsObject(scaling))
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%srope_scaling\" must be an object", x->path,
                        x->section);
    double def_theta = c->family->rope_theta;
    if (lwq_cfg_get(o, "rope_theta"))
        LWQ_TRY(lwq_cfg_num(x, o, "rope_theta", def_theta, &c->rope_theta));
    else
        LWQ_TRY(lwq_cfg_num(x, params, "rope_theta", def_theta, &c->rope_theta));
    if (!(c->rope_theta > 0))
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: rope_theta must be positive", x->path);

    const cJSON *s = scaling ? scaling : params;
    double def_partial = c->family->partial_rotary;
    if (lwq_cfg_get(o, "partial_rotary_factor"))
        LWQ_TRY(lwq_cfg_num(x, o, "partial_rotary_factor", def_partial, &c->partial_rotary_factor));
    else
        LWQ_TRY(lwq_cfg_num(x, params, "partial_rotary_factor", def_partial, &c->partial_rotary_factor));
    if (!(c->partial_rotary_factor > 0 && c->partial_rotary_factor <= 1))
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: partial_rotary_factor must be in (0, 1]", x->path);

    /* mRoPE (Qwen3.5): per-axis sections of the rotary half-width.  Text positions are the same
     * on every axis, so any section layout rotates as 1-D RoPE; a layout that does not cover the
     * rotary half-width exactly is not the model the config describes. */
    const cJSON *ms = lwq_cfg_get(params, "mrope_section");
    if (!ms)
        ms = lwq_cfg_get(scaling, "mrope_section");
    if (ms) {
        const char *where = lwq_cfg_get(params, "mrope_section") ? "rope_parameters" : "rope_scaling";
        int64_t half = (int64_t)((double)c->head_dim * c->partial_rotary_factor) / 2, sum = 0;
        int n = cJSON_IsArray(ms) ? cJSON_GetArraySize(ms) : -1;
        const cJSON *it;
        int ok = n >= 1 && n <= 4;
        cJSON_ArrayForEach(it, ms)
        {
            if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
                it->valuedouble > 1e6)
                ok = 0;
            else
                sum += (int64_t)it->valuedouble;
        }
        if (!ok)
            return lwq_errf(x->e, LWQ_EFORMAT, "%s: model_type '%s': \"%s%s.mrope_section\" must list 1 to "
                            "4 non-negative integers", x->path, c->model_type, x->section, where);
        if (sum != half)
            return lwq_errf(x->e, LWQ_EUNSUPPORTED, "%s: model_type '%s': \"%s%s.mrope_section\" sums to "
                            "%lld, but the rotary half-width is %lld (head_dim %lld x "
                            "partial_rotary_factor %g / 2)", x->path, c->model_type, x->section, where,
                            (long long)sum, (long long)half, (long long)c->head_dim,
                            c->partial_rotary_factor);
    }
    c->rope_type = LWQ_ROPE_DEFAULT;
    c->rope_factor = 1.0;
    if (!s)
        return 0;
    char type[32];
    LWQ_TRY(lwq_cfg_str(x, s, lwq_cfg_get(s, "rope_type") ? "rope_type" : "type", "default", type, sizeof type));
    LWQ_TRY(lwq_cfg_num(x, s, "factor", 1.0, &c->rope_factor));
    int64_t orig;
    if (!strcmp(type, "default")) {
        c->rope_type = LWQ_ROPE_DEFAULT;
    } else if (!strcmp(type, "linear")) {
        c->rope_type = LWQ_ROPE_LINEAR;
    } else if (!strcmp(type, "llama3")) {
        c->rope_type = LWQ_ROPE_LLAMA3;
        LWQ_TRY(lwq_cfg_num(x, s, "low_freq_factor", 1.0, &c->rope_low_freq_factor));
        LWQ_TRY(lwq_cfg_num(x, s, "high_freq_factor", 4.0, &c->rope_high_freq_factor));
        LWQ_TRY(lwq_cfg_int(x, s, "original_max_position_embeddings", 1, 0, 1, INT64_C(1) << 32, &orig));
        c->rope_original_max_position = orig;
    } else if (!strcmp(type, "yarn")) {
        c->rope_type = LWQ_ROPE_YARN;
        LWQ_TRY(lwq_cfg_num(x, s, "beta_fast", 32.0, &c->rope_beta_fast));
        LWQ_TRY(lwq_cfg_num(x, s, "beta_slow", 1.0, &c->rope_beta_slow));
        LWQ_TRY(lwq_cfg_num(x, s, "mscale", 1.0, &c->rope_mscale));
        LWQ_TRY(lwq_cfg_num(x, s, "mscale_all_dim", 0.0, &c->rope_mscale_all_dim));
        LWQ_TRY(lwq_cfg_int(x, s, "original_max_position_embeddings", 0, c->max_position_embeddings, 1,
                    INT64_C(1) << 32, &orig));
        c->rope_original_max_position = orig;
    } else {
        return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                        "%s: rope type \"%s\" is not supported (default, linear, llama3, yarn)",
                        x->path, type);
    }
    if (!(c->rope_factor > 0))
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: rope scaling factor must be positive", x->path);
    return 0;
}

static int parse_linear_attn(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    int64_t v;
    LWQ_TRY(lwq_cfg_i32(x, o, "linear_num_key_heads", 1, 0, 1, 4096, &c->linear_num_key_heads));
    LWQ_TRY(lwq_cfg_i32(x, o, "linear_num_value_heads", 1, 0, 1, 4096, &c->linear_num_value_heads));
    LWQ_TRY(lwq_cfg_int(x, o, "linear_key_head_dim", 1, 0, 1, 4096, &v));
    c->linear_key_head_dim = v;
    LWQ_TRY(lwq_cfg_int(x, o, "linear_value_head_dim", 1, 0, 1, 4096, &v));
    c->linear_value_head_dim = v;
    LWQ_TRY(lwq_cfg_i32(x, o, "linear_conv_kernel_dim", 0, 4, 1, 64, &c->linear_conv_kernel_dim));
    if (c->linear_num_value_heads % c->linear_num_key_heads != 0)
        return lwq_errf(x->e, LWQ_EFORMAT,
                        "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d",
                        x->path, c->linear_num_value_heads, c->linear_num_key_heads);
    return 0;
}

/* The mixer of every decoder layer: the family's full-attention mixer, and where the family has
 * linear-attention layers, layer_types (or every full_attention_interval-th layer full). */
static int parse_layer_mixers(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    const lwq_family *f = c->family;
    int n = c->num_hidden_layers;
    c->layer_mixer = calloc((size_t)n + 1, 1);
    if (!c->layer_mixer)
        return lwq_errf(x->e, LWQ_ENOMEM, "%s: out of memory", x->path);
    for (int i = 0; i < n; i++)
        c->layer_mixer[i] = (unsigned char)f->attn;
    if (f->linear == LWQ_MIXER_NONE)
        return 0;
    const cJSON *lt = lwq_cfg_get(o, "layer_types");
    if (lt) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != n)
            return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%slayer_types\" must list %d layer types",
                            x->path, x->section, n);
        for (int i = 0; i < n; i++) {
            const cJSON *t = cJSON_GetArrayItem(lt, i);
            if (cJSON_IsString(t) && !strcmp(t->valuestring, "linear_attention"))
                c->layer_mixer[i] = (unsigned char)f->linear;
            else if (!cJSON_IsString(t) || strcmp(t->valuestring, "full_attention"))
                return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                                "%s: model_type '%s': \"%slayer_types\"[%d] = %s%s%s is not a layer "
                                "type lwq implements (\"linear_attention\", \"full_attention\")",
                                x->path, c->model_type, x->section, i,
                                cJSON_IsString(t) ? "\"" : "",
                                cJSON_IsString(t) ? t->valuestring : "a non-string",
                                cJSON_IsString(t) ? "\"" : "");
        }
    } else {
        int every = 4; /* the default; get_i32 sets it */
        LWQ_TRY(lwq_cfg_i32(x, o, "full_attention_interval", 0, 4, 1, LWQ_MAX_LAYERS, &every));
        for (int i = 0; i < n; i++)
            if ((i + 1) % every != 0)
                c->layer_mixer[i] = (unsigned char)f->linear;
    }
    return 0;
}

/* The sliding window, as transformers 5.14's configuration and modeling classes of each model_type
 * read it (family.h, lwq_window_rule; README "Sliding windows"). */
static int parse_window(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    const lwq_window_rule rule = c->family->window;
    const int n = c->num_hidden_layers;
    c->sliding_first_layer = -1;
    if (rule == LWQ_WINDOW_NEVER)
        return 0;
    int on = 1;
    if (rule == LWQ_WINDOW_QWEN_GATED || rule == LWQ_WINDOW_QWEN_LAYERS)
        LWQ_TRY(lwq_cfg_bool(x, o, "use_sliding_window", 0, &on));
    if (!on) /* Qwen*Config: sliding_window = sliding_window if use_sliding_window else None */
        return 0;
    const cJSON *raw = o ? cJSON_GetObjectItemCaseSensitive(o, "sliding_window") : NULL;
    if (raw && cJSON_IsNull(raw)) /* null: None, full attention */
        return 0;
    int64_t w;
    LWQ_TRY(lwq_cfg_int(x, o, "sliding_window", 0, rule == LWQ_WINDOW_ALL ? 0 : 4096, 1, INT64_C(1) << 32, &w));
    if (w == 0) /* mixtral without the key */
        return 0;
    snprintf(c->sliding_from, sizeof c->sliding_from, raw ? "\"%ssliding_window\": %lld" :
             "no \"%ssliding_window\": %lld, transformers' default", x->section, (long long)w);
    int from = 0;
    const cJSON *lt = lwq_cfg_get(o, "layer_types");
    if (rule == LWQ_WINDOW_QWEN_LAYERS && lt) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != n)
            return lwq_errf(x->e, LWQ_EFORMAT, "%s: \"%slayer_types\" must list %d layer types", x->path, x->section, n);
        for (int i = 0; i < n; i++) {
            const cJSON *t = cJSON_GetArrayItem(lt, i);
            int sw = cJSON_IsString(t) && !strcmp(t->valuestring, "sliding_attention");
            if (!sw && !(cJSON_IsString(t) && !strcmp(t->valuestring, "full_attention")))
                return lwq_errf(x->e, LWQ_EFORMAT, "%s: %slayer_types[%d] is not \"sliding_attention\" or "
                                "\"full_attention\"", x->path, x->section, i);
            if (sw && c->sliding_first_layer < 0)
                c->sliding_first_layer = i;
            c->sliding_layers += sw;
        }
    } else {
        if (rule == LWQ_WINDOW_QWEN_LAYERS)
            LWQ_TRY(lwq_cfg_i32(x, o, "max_window_layers", 0, 28, 0, LWQ_MAX_LAYERS, &from));
        if (from < n) {
            c->sliding_first_layer = from;
            c->sliding_layers = n - from;
        }
    }
    if (c->sliding_layers > 0)
        c->sliding_window = w;
    return 0;
}

int lwq_config_check_seq(const lwq_model_config *c, const char *model_dir, int64_t seq, const char *what,
                         const char *option, lwq_error *e)
{
    if (c->family && c->family->dsa && seq > c->index_topk)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s/config.json: %s of %lld tokens is longer than index_topk %d of "
                        "this %s model: lwq computes DeepSeek sparse attention densely, which is exact only while "
                        "the indexer keeps every key; give %s %d or less", model_dir, what, (long long)seq,
                        c->index_topk, c->model_type, option, c->index_topk);
    if (c->sliding_window <= 0 || seq <= c->sliding_window)
        return 0;
    char layers[64];
    if (c->sliding_layers == c->num_hidden_layers)
        snprintf(layers, sizeof layers, "every layer");
    else
        snprintf(layers, sizeof layers, "%d of %d layers, the first %d", c->sliding_layers, c->num_hidden_layers,
                 c->sliding_first_layer);
    return lwq_errf(e, LWQ_EUNSUPPORTED, "%s/config.json: %s of %lld tokens is longer than the sliding window of "
                    "%lld tokens of this %s model (%s; %s): lwq computes full attention only, which beyond the window "
                    "is not the model's; give %s %lld or less", model_dir, what, (long long)seq,
                    (long long)c->sliding_window, c->model_type, c->sliding_from, layers, option,
                    (long long)c->sliding_window);
}

static int parse_text_model(const lwq_cfg_ctx *x, const cJSON *o, lwq_model_config *c)
{
    const int64_t bigdim = INT64_C(1) << 22;
    int64_t v;
    const lwq_family *f = c->family;
    int moe = f->moe != LWQ_MOE_NONE;

    LWQ_TRY(parse_dtype(x, o, &c->dtype, &c->dtype_explicit));
    if (!c->dtype_explicit && c->text_config) { /* a wrapper names the dtype of the whole model */
        lwq_cfg_ctx top = {x->path, "", x->e};
        LWQ_TRY(parse_dtype(&top, c->raw, &c->dtype, &c->dtype_explicit));
    }
    LWQ_TRY(lwq_cfg_int(x, o, "hidden_size", 1, 0, 1, bigdim, &c->hidden_size));
    if (f->single) /* nemotron_h: the layer list says how many */
        LWQ_TRY(lwq_cfg_nemotron_layers(x, o, c));
    else
        LWQ_TRY(lwq_cfg_i32(x, o, "num_hidden_layers", 1, 0, 1, LWQ_MAX_LAYERS, &c->num_hidden_layers));
    LWQ_TRY(lwq_cfg_i32(x, o, "num_attention_heads", 1, 0, 1, 1 << 16, &c->num_attention_heads));
    LWQ_TRY(lwq_cfg_i32(x, o, "num_key_value_heads", 0, c->num_attention_heads, 1, 1 << 16,
                &c->num_key_value_heads));
    LWQ_TRY(lwq_cfg_int(x, o, "vocab_size", 1, 0, 1, INT64_C(1) << 26, &c->vocab_size));
    /* MoE models without dense layers may omit intermediate_size; checked below when needed.
     * Mixtral's experts are intermediate_size wide, so there it is required and at least 1. */
    int dense_opt = moe && f->keys != LWQ_KEYS_MIXTRAL;
    LWQ_TRY(lwq_cfg_int(x, o, "intermediate_size", !dense_opt, 0, dense_opt ? 0 : 1, bigdim,
                &c->intermediate_size));
    LWQ_TRY(lwq_cfg_int(x, o, "max_position_embeddings", 0, 4096, 1, INT64_C(1) << 32,
                &c->max_position_embeddings));
    double def_eps = f->rms_norm_eps;
    LWQ_TRY(lwq_cfg_num(x, o, f->single ? "layer_norm_epsilon" : "rms_norm_eps", def_eps, &c->rms_norm_eps));
    if (!(c->rms_norm_eps > 0 && c->rms_norm_eps < 1))
        return lwq_errf(x->e, LWQ_EFORMAT, "%s: rms_norm_eps must be in (0, 1)", x->path);
    LWQ_TRY(lwq_cfg_bool(x, o, "tie_word_embeddings", 0, &c->tie_word_embeddings));
    LWQ_TRY(lwq_cfg_bool(x, o, "attention_bias", f->bias == LWQ_BIAS_QKV, &c->attention_bias));
    if (f->bias == LWQ_BIAS_QKV)
        c->attention_bias = 1; /* Qwen2 q/k/v always carry biases, whatever the key says */
    if (f->qk_norm_key)
        LWQ_TRY(lwq_cfg_bool(x, o, "use_qk_norm", 0, &c->qk_norm));
    LWQ_TRY(lwq_cfg_bool(x, o, "mlp_bias", 0, &c->mlp_bias));
    LWQ_TRY(lwq_cfg_str(x, o, "hidden_act", "silu", c->hidden_act, sizeof c->hidden_act));
    if (strcmp(c->hidden_act, "silu") && strcmp(c->hidden_act, "swish"))
        return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                        "%s: hidden_act \"%s\" is not supported (SwiGLU with silu only)", x->path,
                        c->hidden_act);

    if (c->num_attention_heads % c->num_key_value_heads != 0)
        return lwq_errf(x->e, LWQ_EFORMAT,
                        "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                        x->path, c->num_attention_heads, c->num_key_value_heads);
    if (lwq_cfg_get(o, "head_dim")) {
        LWQ_TRY(lwq_cfg_int(x, o, "head_dim", 1, 0, 1, 1 << 16, &v));
        c->head_dim = v;
    } else if (f->attn != LWQ_MIXER_MLA) {
        if (c->hidden_size % c->num_attention_heads != 0)
            return lwq_errf(x->e, LWQ_EFORMAT,
                            "%s: no head_dim and hidden_size %lld is not a multiple of "
                            "num_attention_heads %d",
                            x->path, (long long)c->hidden_size, c->num_attention_heads);
        c->head_dim = c->hidden_size / c->num_attention_heads;
    }
    LWQ_TRY(parse_rope(x, o, c));
    if (f->rope_partial && f->attn != LWQ_MIXER_MLA) { /* MLA: parse_mla */
        /* transformers: int(head_dim * partial_rotary_factor) dims rotate, paired half with half */
        int64_t rot = lwq_config_rotary_dim(c);
        if (lwq_cfg_get(o, "rotary_dim")) { /* MiniMax's own key, ignored by transformers: it must agree */
            LWQ_TRY(lwq_cfg_int(x, o, "rotary_dim", 1, 0, 0, 1 << 16, &v));
            if (v != rot)
                return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                                "%s: model_type '%s': \"%srotary_dim\" = %lld disagrees with head_dim %lld x "
                                "partial_rotary_factor %g = %lld, which transformers rotates",
                                x->path, c->model_type, x->section, (long long)v, (long long)c->head_dim,
                                c->partial_rotary_factor, (long long)rot);
        }
        if (rot < 2 || rot % 2)
            return lwq_errf(x->e, LWQ_EUNSUPPORTED,
                            "%s: model_type '%s': \"%spartial_rotary_factor\" = %g gives %lld rotary dims "
                            "of head_dim %lld (lwq needs an even number, at least 2)",
                            x->path, c->model_type, x->section, c->partial_rotary_factor, (long long)rot,
                            (long long)c->head_dim);
    }

    if (moe)
        LWQ_TRY(lwq_cfg_parse_moe(x, o, c));
    if (f->attn == LWQ_MIXER_MLA)
        LWQ_TRY(lwq_cfg_parse_mla(x, o, c));
    if (f->dsa)
        LWQ_TRY(lwq_cfg_parse_dsa(x, o, c));
    if (lwq_mixer_is_gdn(f->linear))
        LWQ_TRY(parse_linear_attn(x, o, c));
    if (f->single)
        LWQ_TRY(lwq_cfg_nemotron_keys(x, o, c));
    else if (f->linear == LWQ_MIXER_KDA)
        LWQ_TRY(lwq_cfg_parse_kimi_layers(x, o, c));
    else
        LWQ_TRY(parse_layer_mixers(x, o, c));
    LWQ_TRY(parse_window(x, o, c));
    for (int i = 0; i < c->num_hidden_layers; i++) {
        if (lwq_config_layer_has_mlp(c, i) && c->intermediate_size <= 0)
            return lwq_errf(x->e, LWQ_EFORMAT,
                            "%s: layer %d has a dense MLP but \"%sintermediate_size\" is missing",
                            x->path, i, x->section);
    }
    return 0;
}

void lwq_config_free(lwq_model_config *c)
{
    if (!c)
        return;
    free(c->mlp_only_layers);
    free(c->layer_mixer);
    free(c->layer_moe);
    free(c->layer_indexer);
    cJSON_Delete(c->raw);
    free(c->text);
    memset(c, 0, sizeof *c);
}

int lwq_config_parse(const char *path, const char *json, lwq_model_config *c, lwq_error *e)
{
    memset(c, 0, sizeof *c);
    const char *end = NULL;
    c->raw = cJSON_ParseWithOpts(json, &end, 1);
    if (!c->raw) {
        size_t at = end ? (size_t)(end - json) : 0;
        return lwq_errf(e, LWQ_EFORMAT, "%s: not valid JSON (error near byte %zu)", path, at);
    }
    int rc;
    lwq_cfg_ctx x = {path, "", e};
    const cJSON *o = c->raw;
    c->text_len = strlen(json);
    if (!(c->text = malloc(c->text_len + 1))) {
        rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    memcpy(c->text, json, c->text_len + 1);
    if (!cJSON_IsObject(o)) {
        rc = lwq_errf(e, LWQ_EFORMAT, "%s: not a JSON object", path);
        goto fail;
    }
    if ((rc = lwq_cfg_str(&x, o, "model_type", "", c->model_type, sizeof c->model_type)) != 0)
        goto fail;
    if (!c->model_type[0]) {
        rc = lwq_errf(e, LWQ_EFORMAT, "%s: required key \"model_type\" is missing", path);
        goto fail;
    }
    snprintf(c->names.root, sizeof c->names.root, "model.");
    const lwq_family_wrapper *wr = lwq_family_find_wrapper(c->model_type);
    if (wr) {
        const cJSON *tc = lwq_cfg_get(o, "text_config");
        if (!tc || !cJSON_IsObject(tc)) {
            rc = lwq_errf(e, LWQ_EFORMAT, "%s: model_type '%s' needs a \"text_config\" object",
                          path, c->model_type);
            goto fail;
        }
        o = tc;
        x.section = "text_config.";
        c->text_config = 1;
        snprintf(c->names.root, sizeof c->names.root, "%s", wr->root);
        snprintf(c->names.head, sizeof c->names.head, "%s", wr->head);
        c->passthrough = wr->passthrough;
        if ((rc = lwq_cfg_str(&x, o, "model_type", "", c->model_type, sizeof c->model_type)) != 0)
            goto fail;
    }
    lwq_error sub = {0};
    if (lwq_family_lookup(c->model_type, &c->family, &sub) != 0) {
        rc = lwq_errf(e, LWQ_EUNSUPPORTED, "%s: %s", path, sub.msg);
        goto fail;
    }
    if (c->family->root && !c->text_config) { /* the row's own module names (nemotron_h's
                                                  backbone.; checkpoint.c picks the embedding's
                                                  spelling from the tensors) */
        snprintf(c->names.root, sizeof c->names.root, "%s", c->family->root);
        snprintf(c->names.embed, sizeof c->names.embed, "%s", c->family->embed ? c->family->embed : "");
        snprintf(c->names.norm, sizeof c->names.norm, "%s", c->family->final_norm ? c->family->final_norm : "");
    }
    if ((rc = parse_text_model(&x, o, c)) != 0)
        goto fail;
    return 0;
fail:
    lwq_config_free(c);
    return rc;
}

int lwq_config_load(const char *path, lwq_model_config *c, lwq_error *e)
{
    memset(c, 0, sizeof *c);
    char *buf;
    size_t n;
    int rc = lwq_file_read_all(path, CONFIG_MAX_BYTES, &buf, &n, e);
    if (rc)
        return rc;
    if (memchr(buf, 0, n)) {
        free(buf);
        return lwq_errf(e, LWQ_EFORMAT, "%s: contains a NUL byte", path);
    }
    rc = lwq_config_parse(path, buf, c, e);
    free(buf);
    return rc;
}

int lwq_config_layer_has_indexer(const lwq_model_config *c, int layer)
{
    return c->layer_indexer && layer >= 0 && layer < c->num_hidden_layers && c->layer_indexer[layer];
}

int lwq_config_qk_norm(const lwq_model_config *c)
{
    return (c->family && c->family->qk_norm) || c->qk_norm;
}

int64_t lwq_config_rotary_dim(const lwq_model_config *c)
{
    return (int64_t)((double)c->head_dim * c->partial_rotary_factor);
}

lwq_mixer_kind lwq_config_layer_mixer(const lwq_model_config *c, int layer)
{
    if (layer < 0 || layer >= c->num_hidden_layers)
        return LWQ_MIXER_NONE;
    if (c->layer_mixer)
        return (lwq_mixer_kind)c->layer_mixer[layer];
    return c->family ? c->family->attn : LWQ_MIXER_NONE;
}

/* name = module + "" or ".rest": the rest, else NULL */
static const char *under(const char *name, const char *module)
{
    size_t k = strlen(module);
    return strncmp(name, module, k) || (name[k] && name[k] != '.') ? NULL : name + k;
}

int lwq_config_layer_has_mlp(const lwq_model_config *c, int layer)
{
    if (layer < 0 || layer >= c->num_hidden_layers || lwq_config_layer_is_moe(c, layer))
        return 0;
    /* a single-block layer (nemotron_h) holds its mixer or its MLP, not both */
    return !(c->family && c->family->single) || lwq_config_layer_mixer(c, layer) == LWQ_MIXER_NONE;
}

size_t lwq_names_full(const lwq_names *n, const char *canon, char *out, size_t cap)
{
    const char *rest;
    if (n && n->embed[0] && (rest = under(canon, "model.embed_tokens")))
        return (size_t)snprintf(out, cap, "%s%s", n->embed, rest);
    if (n && n->norm[0] && (rest = under(canon, "model.norm")))
        return (size_t)snprintf(out, cap, "%s%s", n->norm, rest);
    if (!n || !n->root[0])
        return (size_t)snprintf(out, cap, "%s", canon);
    if (!strncmp(canon, "model.", 6))
        return (size_t)snprintf(out, cap, "%s%s", n->root, canon + 6);
    return (size_t)snprintf(out, cap, "%s%s", n->head, canon);
}

int lwq_names_canon(const lwq_names *n, const char *full, char *out, size_t cap)
{
    size_t r = n && n->root[0] ? strlen(n->root) : 0, h = n ? strlen(n->head) : 0;
    int k;
    const char *rest;
    if (n && n->embed[0] && (rest = under(full, n->embed)))
        k = snprintf(out, cap, "model.embed_tokens%s", rest);
    else if (n && n->norm[0] && (rest = under(full, n->norm)))
        k = snprintf(out, cap, "model.norm%s", rest);
    else if (!r)
        k = snprintf(out, cap, "%s", full);
    else if (!strncmp(full, n->root, r))
        k = snprintf(out, cap, "model.%s", full + r);
    else if (!strncmp(full, n->head, h))
        k = snprintf(out, cap, "%s", full + h);
    else
        return 0;
    return k >= 0 && (size_t)k < cap;
}

/* Declared in layout/checkpoint/checkpoint.h; here beside the name mapping (no file calls back into
 * checkpoint.c for it). */
int lwq_tensor_layer_index(const char *name)
{
    static const char pre[] = "model.layers.";
    if (strncmp(name, pre, sizeof pre - 1) != 0)
        return -1;
    const char *p = name + sizeof pre - 1;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
        return -1;
    long v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (*p - '0');
        if (v >= LWQ_MAX_LAYERS)
            return -1;
    }
    return *p == '.' ? (int)v : -1;
}
