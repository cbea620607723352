/* layout/config/config.h — config.json -> lwq_model_config.
 *
 * Accepts both transformers-4 and transformers-5 spellings (num_experts / num_local_experts,
 * torch_dtype / dtype, rope_theta / rope_parameters.rope_theta, rope_scaling / rope_parameters).
 * Required keys missing, wrong types, non-positive or absurd dimensions, and unknown model_type
 * are errors naming config.json and the key.  The parsed cJSON tree is kept (raw) so the exporter
 * can copy the source config and add quantization_config.  A wrapper config whose text model
 * lives under "text_config" (kimi_k25: DeepSeek-V3 text model) is read from that object.
 * Thread-safety: none needed (no global state). */
#ifndef LWQ_LAYOUT_CONFIG_H
#define LWQ_LAYOUT_CONFIG_H

#include <stdint.h>

#include "core/data/dtype.h"
#include "core/sys/error.h"
#include "layout/arch/family.h"

struct cJSON;

typedef enum lwq_rope_type {
    LWQ_ROPE_DEFAULT = 0,
    LWQ_ROPE_LLAMA3,
    LWQ_ROPE_LINEAR,
    LWQ_ROPE_YARN,
} lwq_rope_type;

#define LWQ_MAX_LAYERS 4096

/* Where a checkpoint keeps the text model.  Every part of lwq names tensors canonically, as a
 * plain causal LM does ("model.layers.3.mlp.gate_proj.weight", "model.norm.weight",
 * "lm_head.weight"); lwq_names_full maps a canonical name to the checkpoint's: "model." becomes
 * `root` ("model." for plain causal LMs, "model.language_model." for Qwen3.5's VLM wrappers,
 * "language_model.model." for kimi_k25), any other name gets `head` before it ("" or
 * "language_model."). */
typedef struct lwq_names {
    char root[40];
    char head[32];
    /* Where the root names the embedding and the final norm otherwise (nemotron_h:
     * "backbone.embeddings" or, as transformers writes it, "backbone.embedding", and
     * "backbone.norm_f"): the checkpoint's module name of the canonical "model.embed_tokens" /
     * "model.norm"; "" maps them with root like any other name. */
    char embed[48];
    char norm[48];
} lwq_names;

/* out = the checkpoint's name of `canon` (n NULL: canon itself); the length it needs, as snprintf
 * returns it (>= cap: truncated). */
size_t lwq_names_full(const lwq_names *n, const char *canon, char *out, size_t cap);
/* out = the canonical name of the checkpoint's `full`; 0 when `full` is not under the mapping
 * (or out is too small), else 1. */
int lwq_names_canon(const lwq_names *n, const char *full, char *out, size_t cap);

typedef struct lwq_model_config {
    char model_type[64];      /* as written in config.json */
    const lwq_family *family; /* the row of model_type (layout/arch/family.h): what the layers hold */
    lwq_dtype dtype;          /* torch_dtype / dtype; BF16 when absent */
    int dtype_explicit;       /* 0 when the config names no dtype (then use the tensors') */

    int64_t hidden_size;
    int64_t intermediate_size;
    int num_hidden_layers;
    int num_attention_heads;
    int num_key_value_heads;  /* = num_attention_heads when absent */
    int64_t head_dim;         /* explicit or hidden / heads */
    int64_t vocab_size;
    int64_t max_position_embeddings;
    double rms_norm_eps;
    int tie_word_embeddings;
    int attention_bias;       /* q/k/v biases (qwen2 always; llama "attention_bias") */
    int qk_norm;              /* "use_qk_norm" where the row reads it (lwq_config_qk_norm) */
    int mlp_bias;             /* llama "mlp_bias": gate/up/down biases */
    char hidden_act[32];      /* "silu" when absent; anything else is refused */

    /* RoPE */
    double rope_theta;
    lwq_rope_type rope_type;
    double rope_factor;
    double rope_low_freq_factor, rope_high_freq_factor;
    int64_t rope_original_max_position;
    double rope_beta_fast, rope_beta_slow, rope_mscale, rope_mscale_all_dim; /* yarn */
    double partial_rotary_factor; /* 1.0 when absent */
    /* The Llama-4 query scale (family->llama4_qscale): q times 1 + llama4_beta * ln(1 +
     * floor(pos / llama4_orig_max)) */
    double llama4_beta;
    int64_t llama4_orig_max;

    /* MoE (0 experts = dense) */
    int num_experts;
    int num_experts_per_tok;
    int64_t moe_intermediate_size;
    int norm_topk_prob;
    int decoder_sparse_step;  /* qwen3_moe; 1 when absent */
    int n_mlp_only_layers;
    int *mlp_only_layers;     /* owned */
    int n_shared_experts;
    int64_t shared_expert_intermediate_size;

    /* DeepSeek MLA / routing */
    int64_t q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    int first_k_dense_replace, moe_layer_freq, n_group, topk_group, num_nextn_predict_layers;
    double routed_scaling_factor;
    char scoring_func[16], topk_method[32];

    /* DeepSeek sparse attention (family->dsa): the indexer's geometry, and which layers carry one
     * (num_hidden_layers entries, owned; read with lwq_config_layer_has_indexer) */
    int index_topk, index_n_heads;
    int64_t index_head_dim;
    unsigned char *layer_indexer;

    /* The mixer of each decoder layer (lwq_mixer_kind): family->attn, or family->linear where
     * layer_types says "linear_attention".  num_hidden_layers entries, owned; NULL (a config
     * built by hand) means family->attn everywhere: read it with lwq_config_layer_mixer. */
    unsigned char *layer_mixer;
    /* Whether each decoder layer's MLP is routed experts, where the config lists it per layer
     * (kimi_linear's mlp_layer_types, or its first_k_dense_replace; nemotron_h's "moe" layers, whose
     * "mlp" and "moe" layers have mixer LWQ_MIXER_NONE); NULL: the family's moe rule.
     * num_hidden_layers entries, owned; read with lwq_config_layer_is_moe. */
    unsigned char *layer_moe;
    int linear_num_key_heads, linear_num_value_heads;
    int64_t linear_key_head_dim, linear_value_head_dim;
    int linear_conv_kernel_dim;

    /* nemotron_h (family->single): the Mamba2 geometry, the MoE latent */
    int mamba_num_heads, mamba_n_groups, mamba_conv_kernel, mamba_conv_bias;
    int64_t mamba_head_dim, ssm_state_size;
    double time_step_min;     /* transformers' torch path clamps softplus(dt + dt_bias) below it */
    int64_t moe_latent_size;  /* 0: the experts run at hidden_size */

    /* Sliding-window attention as transformers reads the keys of this model_type
     * (family->window): on `sliding_layers` layers, the first `sliding_first_layer`, a token
     * attends to the last `sliding_window` tokens, itself included.  0: full attention on every
     * layer (no window, or one switched off: use_sliding_window false, sliding_window null, or no
     * layer at or past max_window_layers).  sliding_from says which key set it. */
    int64_t sliding_window;
    int sliding_first_layer, sliding_layers;
    char sliding_from[96];

    /* Where the checkpoint keeps the text model (lwq_names_full). */
    lwq_names names;
    int text_config;          /* the text model's keys are under "text_config" (a wrapper) */
    const char *passthrough;  /* the wrapper's own modules ("model.visual."): copied unquantized
                                 and excluded as a whole (layout/arch/family.h), or NULL; static */

    struct cJSON *raw;        /* the whole config.json, owned */
    char *text;               /* its bytes as read (the exporter keeps them), owned */
    size_t text_len;
} lwq_model_config;

/* Whether decoder layer `layer` has a DSA indexer (self_attn.indexer.*). */
int lwq_config_layer_has_indexer(const lwq_model_config *c, int layer);
/* Whether the GQA q/k carry per-head RMSNorms: the row says always (qwen3), or "use_qk_norm"
 * does (glm4_moe; lwq_model_config.qk_norm). */
int lwq_config_qk_norm(const lwq_model_config *c);
/* The rotary dims of a GQA head: int(head_dim * partial_rotary_factor), as transformers. */
int64_t lwq_config_rotary_dim(const lwq_model_config *c);

/* Parse config.json at `path`.  Input is bounded (a config over 16 MiB is refused). */
int lwq_config_load(const char *path, lwq_model_config *c, lwq_error *e);
int lwq_config_parse(const char *path_for_errors, const char *json, lwq_model_config *c, lwq_error *e);
void lwq_config_free(lwq_model_config *c);
/* 0 when a sequence of `seq` tokens sees the attention lwq computes, full causal attention: no
 * layer has a sliding window shorter than it, and a DSA model's index_topk is not shorter.  Else LWQ_EUNSUPPORTED naming the model directory's
 * config.json, `what` ("a calibration sequence"), both lengths, the key and the model_type, and
 * `option`, the one that shortens the sequences. */
int lwq_config_check_seq(const lwq_model_config *c, const char *model_dir, int64_t seq, const char *what,
                         const char *option, lwq_error *e);
/* Whether decoder layer i has a routed-expert MoE block. */
int lwq_config_layer_is_moe(const lwq_model_config *c, int layer);
/* Whether decoder layer i has a dense MLP (every non-MoE layer, except a nemotron_h mixer layer). */
int lwq_config_layer_has_mlp(const lwq_model_config *c, int layer);
/* The mixer of decoder layer i. */
lwq_mixer_kind lwq_config_layer_mixer(const lwq_model_config *c, int layer);

#endif
