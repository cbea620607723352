/* layout/arch/family.h — architectures as data: the table of model families and the blocks they are
 * made of.
 *
 * A family is one row (lwq_family): which mixer its full-attention layers run (GQA attention,
 * Qwen3-Next's gated attention, DeepSeek's multi-head latent attention) and which its
 * "linear_attention" layers run (gated DeltaNet), its attention biases and q/k norms, its RMSNorm
 * kind, its MLP (dense SwiGLU or routed experts: how the layers that carry experts are chosen, the
 * router, how the experts are named, which shared experts ride along), the config keys it reads
 * its expert counts from, its defaults (rope_theta, rms_norm_eps, partial_rotary_factor), and the
 * blocks outside the decoder layers it may carry (Qwen's MTP block) that pass through untouched.
 * The config parser (layout/config/config.h) picks the row by model_type and fills in the per-layer
 * choices (layer_types); the layer plans (layout/arch/arch.c) and the forward (engine/forward/) compose
 * their blocks from the row and never look at model_type.  A new family is a row here, plus only
 * the blocks no row has yet.
 *
 * Rows are static and read-only; any thread may read them. */
#ifndef LWQ_LAYOUT_FAMILY_H
#define LWQ_LAYOUT_FAMILY_H

#include "core/sys/error.h"

/* What mixes the tokens in a decoder layer. */
typedef enum lwq_mixer_kind {
    LWQ_MIXER_NONE = 0,
    LWQ_MIXER_GQA,       /* self_attn.{q,k,v,o}_proj, grouped-query softmax attention, RoPE */
    LWQ_MIXER_GATED_GQA, /* Qwen3-Next: q_proj also yields a sigmoid output gate (2x wide), (1 + w)
                            q/k RMSNorms, partial rotary */
    LWQ_MIXER_MLA,       /* DeepSeek multi-head latent attention (q_a/q_b or q_proj, kv_a, kv_b) */
    LWQ_MIXER_GDN,       /* gated DeltaNet, linear_attn.in_proj_qkvz / in_proj_ba interleaved per
                            key head (Qwen3-Next) */
    LWQ_MIXER_GDN_SPLIT, /* the same gated DeltaNet with split projections in_proj_qkv ([q, k, v]),
                            in_proj_z, in_proj_b, in_proj_a (Qwen3.5) */
    LWQ_MIXER_KDA,       /* Kimi delta attention (kimi_linear): the gated delta rule with a
                            per-channel forget gate; self_attn.{q,k,v}_proj, {q,k,v}_conv1d,
                            f_a/f_b_proj + dt_bias + A_log, b_proj, g_a/g_b_proj, o_norm, o_proj */
    LWQ_MIXER_MAMBA2,    /* Nemotron-H's Mamba2 mixer: mixer.in_proj -> [z, xBC, dt], depthwise causal
                            mixer.conv1d + SiLU, the SSD scan (A_log, D, dt_bias), grouped gated
                            RMSNorm, mixer.out_proj */
} lwq_mixer_kind;

/* When the config sets q/k/v (and o) biases. */
typedef enum lwq_bias_rule {
    LWQ_BIAS_KEY = 0, /* "attention_bias" (default false) sets q/k/v and o */
    LWQ_BIAS_QKV,     /* q/k/v always, o never (qwen2) */
    LWQ_BIAS_NEVER,   /* the attention class has no bias option */
    LWQ_BIAS_KEY_QKV, /* "attention_bias" (default false) sets q/k/v; o never (glm4_moe) */
} lwq_bias_rule;

typedef enum lwq_norm_kind {
    LWQ_NORM_RMS = 0, /* x * rsqrt(mean(x^2) + eps) * w */
    LWQ_NORM_RMS_1P,  /* zero-centred weight: x * rsqrt(mean(x^2) + eps) * (1 + w), in f32 */
} lwq_norm_kind;

/* Which decoder layers carry routed experts (the others a dense MLP). */
typedef enum lwq_moe_rule {
    LWQ_MOE_NONE = 0,    /* dense only */
    LWQ_MOE_ALL,         /* every layer (mixtral) */
    LWQ_MOE_SPARSE_STEP, /* (i + 1) % decoder_sparse_step == 0 unless in mlp_only_layers (qwen) */
    LWQ_MOE_FIRST_K,     /* i >= first_k_dense_replace and i % moe_layer_freq == 0 (deepseek) */
    LWQ_MOE_LAYER_TYPES, /* the layers layers_block_type names "moe" (nemotron_h) */
} lwq_moe_rule;

typedef enum lwq_router_kind {
    LWQ_ROUTER_SOFTMAX = 0, /* softmax over experts, top-k, renormalised when norm_topk_prob */
    LWQ_ROUTER_DEEPSEEK_V2, /* softmax, greedy or group_limited_greedy, routed_scaling_factor */
    LWQ_ROUTER_DEEPSEEK_V3, /* sigmoid + e_score_correction_bias, group top-k (noaux_tc) */
    LWQ_ROUTER_SIGMOID_BIAS, /* MiniMax-M2: logits in the activation dtype, sigmoid, top-k of
                                sigmoid + <moe>.e_score_correction_bias without groups, the chosen
                                sigmoids / their sum; no routed_scaling_factor */
    LWQ_ROUTER_SOFTMAX_GROUPED, /* Mistral-Small-4: logits in the activation dtype, softmax over all
                                   experts, DeepSeek groups (sum of each group's two best, 0.0 outside
                                   the topk_group chosen), top-k, the chosen scores / (sum + 1e-20)
                                   when norm_topk_prob, times routed_scaling_factor; every step
                                   rounded to the activation dtype; no correction bias */
} lwq_router_kind;

/* How the routed experts' tensors are named. */
typedef enum lwq_experts_layout {
    LWQ_EXPERTS_HF = 0,   /* mlp.gate, mlp.experts.E.{gate,up,down}_proj */
    LWQ_EXPERTS_MIXTRAL,  /* block_sparse_moe.gate, block_sparse_moe.experts.E.{w1,w3,w2} */
    LWQ_EXPERTS_NEMOTRON, /* mixer.gate, mixer.experts.E.{up,down}_proj: NON-gated ReLU^2 experts,
                             between mixer.fc1_latent_proj / fc2_latent_proj when moe_latent_size */
} lwq_experts_layout;

typedef enum lwq_shared_kind {
    LWQ_SHARED_NONE = 0,
    LWQ_SHARED_DEEPSEEK, /* mlp.shared_experts.*: n_shared_experts x moe_intermediate_size wide */
    LWQ_SHARED_GATED,    /* mlp.shared_expert.* (shared_expert_intermediate_size wide) scaled by
                            sigmoid(mlp.shared_expert_gate(x)) (qwen3_next) */
    LWQ_SHARED_NEMOTRON, /* mixer.shared_experts.{up,down}_proj, ReLU^2, always present,
                            moe_shared_expert_intermediate_size wide (nemotron_h) */
} lwq_shared_kind;

/* Where a family reads its expert counts from. */
typedef enum lwq_expert_keys {
    LWQ_KEYS_QWEN = 0, /* num_experts / num_local_experts, moe_intermediate_size */
    LWQ_KEYS_MIXTRAL,  /* num_local_experts; experts are intermediate_size wide */
    LWQ_KEYS_DEEPSEEK, /* n_routed_experts, n_shared_experts, moe_intermediate_size */
    LWQ_KEYS_KIMI,     /* kimi_linear: num_experts, num_experts_per_token, num_shared_experts,
                          num_expert_group, moe_renormalize (or their DeepSeek / transformers
                          spellings), moe_intermediate_size; DeepSeek-V3 routing */
} lwq_expert_keys;

/* Where the config turns on sliding-window attention, as transformers' configuration and
 * modeling classes of the model_type read it (transformers 5.14; README "Sliding windows").  lwq
 * computes full attention only, so a window shorter than a sequence is refused
 * (lwq_config_check_seq). */
typedef enum lwq_window_rule {
    LWQ_WINDOW_NEVER = 0,  /* no sliding attention: a "sliding_window" key is ignored */
    LWQ_WINDOW_ALL_4096,   /* mistral: "sliding_window" on every layer, 4096 when absent, null: off */
    LWQ_WINDOW_ALL,        /* mixtral: "sliding_window" on every layer, off when absent or null */
    LWQ_WINDOW_QWEN_GATED, /* qwen3_moe: only with "use_sliding_window": true (4096 when absent) */
    LWQ_WINDOW_QWEN_LAYERS,/* qwen2, qwen3: the same, on the layers layer_types names
                            * "sliding_attention", without layer_types from max_window_layers on */
} lwq_window_rule;

typedef struct lwq_family {
    const char *model_type; /* as config.json names it */
    const char *name;       /* the family it belongs to ("llama" for mistral) */
    /* mixers */
    lwq_mixer_kind attn;    /* full-attention layers */
    lwq_mixer_kind linear;  /* "linear_attention" layers of layer_types; NONE: no such layers */
    lwq_bias_rule bias;
    int qk_norm;            /* per-head self_attn.{q,k}_norm before RoPE */
    int qk_norm_key;        /* ... only when "use_qk_norm" is true (glm4_moe); the config's
                               lwq_model_config.qk_norm says which a model has */
    int qk_norm_full;       /* the q/k norms span the whole projection (heads x head_dim), one
                               RMS over all heads (minimax_m2), not one per head */
    int dsa;                /* DeepSeek sparse attention: MLA plus self_attn.indexer.{wq_b, wk,
                               k_norm, weights_proj}; 1: on every layer (deepseek_v32), 2: on the
                               "full" layers of indexer_types (glm_moe_dsa).  Computed dense: exact
                               while a sequence is at most index_topk long (longer ones refused) */
    int mla_nope;           /* MLA without RoPE: q and the shared k part are not rotated
                               (kimi_linear's KimiLinearAttention) */
    int kimi_names;         /* the checkpoint names tensors as Kimi-Linear's own code does and
                               transformers 5.23 renames them on load (layout/checkpoint/ckpt_fused.c
                               lwq_ckpt_rename_kimi): lwq reads, plans and writes transformers'
                               names, as Model Optimizer 0.47 exports them */
    int rope_partial;       /* the GQA block rotates head_dim * partial_rotary_factor dims
                               (rotate-half over that slice, the rest passes; glm4_moe); on an MLA
                               row: rope_parameters.partial_rotary_factor names the rope part of
                               the q/k head (int(head_dim * factor) must be qk_rope_head_dim;
                               qk_rope_head_dim / head_dim when absent: mistral4) */
    int mla_plain_scale;    /* MLA softmax scale qk_head_dim^-0.5 without DeepSeek's yarn
                               mscale(mscale_all_dim)^2 (mistral4) */
    int llama4_qscale;      /* the whole query times 1 + llama_4_scaling_beta * ln(1 + floor(pos /
                               original_max_position_embeddings)) after RoPE, both keys from
                               rope_parameters (mistral4); "rope_interleave" is read (false refused) */
    int mlp_bias;           /* "mlp_bias" adds gate/up/down biases */
    int single;             /* every decoder layer is h += block(norm(h)) with ONE block, under
                               layers.L.mixer: the layer's mixer (Mamba2 / attention), or an MLP
                               (ReLU^2, up/down) or a MoE, as layers_block_type says (nemotron_h);
                               no post-attention norm.  The root is "backbone." (norm_f,
                               embeddings) */
    int nope;               /* attention without position embedding (no RoPE) */
    lwq_norm_kind norm;     /* every RMSNorm of the model (layers and final) */
    /* MLP */
    lwq_moe_rule moe;
    lwq_expert_keys keys;
    lwq_router_kind router;
    lwq_experts_layout experts;
    lwq_shared_kind shared;
    int fused_experts;      /* transformers 5.14 holds a layer's routed experts as one module with
                               3-D parameters (Qwen3MoeExperts, DeepseekV3Experts, ...), whatever
                               the checkpoint stores: Model Optimizer lists it once in a
                               MIXED_PRECISION config (layout/format/export.h).  0: separate linears in
                               memory (kimi_k2's remote code) */
    int norm_topk_default;  /* norm_topk_prob when the key is absent */
    int norm_topk_fixed;    /* the router always renormalises, whatever the key says */
    int group_mask_inf;     /* DeepSeek-V3 routing: experts outside the topk_group groups get a
                               choice score of -inf (transformers 5.14.1: every V3-routed row), not 0.0 */
    /* defaults */
    double rope_theta, rms_norm_eps, partial_rotary;
    /* outside the decoder layers */
    int mtp;                /* an optional mtp.* block (passes through unquantized) */
    const char *root;       /* the layers' root instead of "model." (nemotron_h: "backbone."), NULL:
                               "model."; then the embedding's and final norm's module names */
    const char *embed, *final_norm;
    lwq_window_rule window; /* sliding-window attention keys */
} lwq_family;

/* The row of model_type, or NULL. */
const lwq_family *lwq_family_find(const char *model_type);
/* Name -> row; unknown names give LWQ_EUNSUPPORTED with the list of supported ones. */
int lwq_family_lookup(const char *model_type, const lwq_family **out, lwq_error *e);
/* "llama, mistral, qwen2, ..." (every row, in table order, and the wrappers). */
const char *lwq_supported_model_types(void);
/* The row's short family name ("llama", "qwen3_moe", ...); "?" for NULL. */
const char *lwq_family_name(const lwq_family *f);
/* Whether mixer kind k is a gated DeltaNet (either projection layout). */
int lwq_mixer_is_gdn(lwq_mixer_kind k);
/* Whether mixer kind k carries a recurrent state per sequence (gated DeltaNet, Mamba2, KDA): the state
 * starts at zero for every sequence. */
int lwq_mixer_is_recurrent(lwq_mixer_kind k);
/* Whether mixer kind k is softmax attention over a KV cache (GQA, gated GQA, MLA). */
int lwq_mixer_is_attention(lwq_mixer_kind k);

/* Wrapper configs whose text model is a row of the table under "text_config": the wrapper's
 * model_type and where its weights keep the text model (layout/config/config.h lwq_names: what "model."
 * becomes, what other names carry before them). */
typedef struct lwq_family_wrapper {
    const char *model_type, *root, *head;
    /* the wrapper's own modules (a vision tower), outside the text model: every tensor whose name
     * starts with this passes through unquantized and is excluded as "<prefix without the dot>*",
     * as Model Optimizer excludes it (NULL: none) */
    const char *passthrough;
} lwq_family_wrapper;
const lwq_family_wrapper *lwq_family_find_wrapper(const char *model_type);

#endif
