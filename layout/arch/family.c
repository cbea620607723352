/* layout/arch/family.c — the family table (contract in family.h).  Each row follows transformers'
 * configuration and modeling classes of its model_type (spec/ARCHITECTURES.md). */
#include "layout/arch/family.h"

#include <stddef.h>
#include <string.h>

/* Designated initialisers: a field a row does not name is 0 (NONE / KEY / RMS / HF / QWEN). */
static const lwq_family families[] = {
    {.model_type = "llama", .name = "llama", .attn = LWQ_MIXER_GQA, .mlp_bias = 1,
     .rope_theta = 10000.0, .rms_norm_eps = 1e-6, .partial_rotary = 1.0},
    {.model_type = "mistral", .name = "llama", .attn = LWQ_MIXER_GQA, .mlp_bias = 1,
     .rope_theta = 10000.0, .rms_norm_eps = 1e-6, .partial_rotary = 1.0, .window = LWQ_WINDOW_ALL_4096},
    {.model_type = "qwen2", .name = "qwen2", .attn = LWQ_MIXER_GQA, .bias = LWQ_BIAS_QKV,
     .rope_theta = 10000.0, .rms_norm_eps = 1e-6, .partial_rotary = 1.0, .window = LWQ_WINDOW_QWEN_LAYERS},
    {.model_type = "qwen3", .name = "qwen3", .attn = LWQ_MIXER_GQA, .qk_norm = 1,
     .rope_theta = 10000.0, .rms_norm_eps = 1e-6, .partial_rotary = 1.0, .window = LWQ_WINDOW_QWEN_LAYERS},
    {.model_type = "qwen3_moe", .fused_experts = 1, .name = "qwen3_moe", .attn = LWQ_MIXER_GQA, .qk_norm = 1,
     .moe = LWQ_MOE_SPARSE_STEP, .keys = LWQ_KEYS_QWEN, .router = LWQ_ROUTER_SOFTMAX,
     .experts = LWQ_EXPERTS_HF, .rope_theta = 10000.0, .rms_norm_eps = 1e-6,
     .partial_rotary = 1.0, .window = LWQ_WINDOW_QWEN_GATED},
    {.model_type = "mixtral", .fused_experts = 1, .name = "mixtral", .attn = LWQ_MIXER_GQA, .bias = LWQ_BIAS_NEVER,
     .moe = LWQ_MOE_ALL, .keys = LWQ_KEYS_MIXTRAL, .router = LWQ_ROUTER_SOFTMAX,
     .experts = LWQ_EXPERTS_MIXTRAL, .norm_topk_fixed = 1, .rope_theta = 1e6,
     .rms_norm_eps = 1e-5, .partial_rotary = 1.0, .window = LWQ_WINDOW_ALL},
    {.model_type = "deepseek_v2", .fused_experts = 1, .name = "deepseek_v2", .attn = LWQ_MIXER_MLA,
     .moe = LWQ_MOE_FIRST_K, .keys = LWQ_KEYS_DEEPSEEK, .router = LWQ_ROUTER_DEEPSEEK_V2,
     .shared = LWQ_SHARED_DEEPSEEK, .rope_theta = 10000.0, .rms_norm_eps = 1e-6,
     .partial_rotary = 1.0},
    {.model_type = "deepseek_v3", .fused_experts = 1, .name = "deepseek_v3", .attn = LWQ_MIXER_MLA,
     .moe = LWQ_MOE_FIRST_K, .keys = LWQ_KEYS_DEEPSEEK, .router = LWQ_ROUTER_DEEPSEEK_V3,
     .group_mask_inf = 1, .shared = LWQ_SHARED_DEEPSEEK, .norm_topk_default = 1, .rope_theta = 10000.0,
     .rms_norm_eps = 1e-6, .partial_rotary = 1.0},
    {.model_type = "kimi_k2", .name = "deepseek_v3", .attn = LWQ_MIXER_MLA,
     .moe = LWQ_MOE_FIRST_K, .keys = LWQ_KEYS_DEEPSEEK, .router = LWQ_ROUTER_DEEPSEEK_V3,
     .group_mask_inf = 1, .shared = LWQ_SHARED_DEEPSEEK, .norm_topk_default = 1, .rope_theta = 10000.0,
     .rms_norm_eps = 1e-6, .partial_rotary = 1.0},
    /* GLM-4.5 / 4.6 / 4.7 (Glm4MoeForCausalLM): GQA with q/k/v biases (o_proj none), optional
     * per-head q/k norm, partial rotary (transformers' default 0.5), DeepSeek-V3 routing with
     * shared experts after first_k_dense_replace dense layers; the MTP layers
     * (num_nextn_predict_layers, stored as model.layers.N past num_hidden_layers) pass through */
    {.model_type = "glm4_moe", .fused_experts = 1, .name = "glm4_moe", .attn = LWQ_MIXER_GQA, .bias = LWQ_BIAS_KEY_QKV,
     .qk_norm_key = 1, .rope_partial = 1, .moe = LWQ_MOE_FIRST_K, .keys = LWQ_KEYS_DEEPSEEK,
     .router = LWQ_ROUTER_DEEPSEEK_V3, .group_mask_inf = 1, .shared = LWQ_SHARED_DEEPSEEK,
     .norm_topk_default = 1, .rope_theta = 10000.0, .rms_norm_eps = 1e-5, .partial_rotary = 0.5},
    /* MiniMax-M2 / M2.1 / M2.5 (MiniMaxM2ForCausalLM): GQA without biases, q/k RMSNorm over the
     * whole projection, partial rotary (0.5 in the published configs), every layer MoE with
     * Mixtral's names and sigmoid + e_score_correction_bias routing without groups */
    {.model_type = "minimax_m2", .fused_experts = 1, .name = "minimax_m2", .attn = LWQ_MIXER_GQA, .bias = LWQ_BIAS_NEVER,
     .qk_norm = 1, .qk_norm_full = 1, .rope_partial = 1, .moe = LWQ_MOE_ALL, .keys = LWQ_KEYS_MIXTRAL,
     .router = LWQ_ROUTER_SIGMOID_BIAS, .experts = LWQ_EXPERTS_MIXTRAL, .norm_topk_fixed = 1,
     .rope_theta = 5e6, .rms_norm_eps = 1e-6, .partial_rotary = 1.0},
    /* DeepSeek-V3.2 (DeepseekV32ForCausalLM) and GLM-5 (GlmMoeDsaForCausalLM): the V3 text model
     * (MLA, V3 routing with transformers 5's -inf group fill, shared experts) plus the DSA indexer
     * on every layer, or on glm_moe_dsa's "full" layers */
    {.model_type = "deepseek_v32", .fused_experts = 1, .name = "deepseek_v32", .attn = LWQ_MIXER_MLA, .dsa = 1,
     .moe = LWQ_MOE_FIRST_K, .keys = LWQ_KEYS_DEEPSEEK, .router = LWQ_ROUTER_DEEPSEEK_V3,
     .group_mask_inf = 1, .shared = LWQ_SHARED_DEEPSEEK, .norm_topk_default = 1, .rope_theta = 10000.0,
     .rms_norm_eps = 1e-6, .partial_rotary = 1.0},
    {.model_type = "glm_moe_dsa", .fused_experts = 1, .name = "glm_moe_dsa", .attn = LWQ_MIXER_MLA, .dsa = 2,
     .moe = LWQ_MOE_FIRST_K, .keys = LWQ_KEYS_DEEPSEEK, .router = LWQ_ROUTER_DEEPSEEK_V3,
     .group_mask_inf = 1, .shared = LWQ_SHARED_DEEPSEEK, .norm_topk_default = 1, .rope_theta = 10000.0,
     .rms_norm_eps = 1e-5, .partial_rotary = 1.0},
    /* Mistral-Small-4 (Mistral4ForCausalLM): DeepSeek-V3's MLA (interleaved yarn RoPE on the
     * rope part, given by partial_rotary_factor) with the plain qk_head_dim^-0.5 softmax scale and
     * the Llama-4 query scale, a softmax router with DeepSeek groups in the activation dtype,
     * shared experts after first_k_dense_replace dense layers; transformers writes its routed
     * experts fused 3-D (layout/checkpoint/ckpt_fused.c splits them) */
    {.model_type = "mistral4", .fused_experts = 1, .name = "mistral4", .attn = LWQ_MIXER_MLA, .rope_partial = 1,
     .mla_plain_scale = 1, .llama4_qscale = 1, .moe = LWQ_MOE_FIRST_K, .keys = LWQ_KEYS_DEEPSEEK,
     .router = LWQ_ROUTER_SOFTMAX_GROUPED, .shared = LWQ_SHARED_DEEPSEEK, .norm_topk_default = 1,
     .rope_theta = 10000.0, .rms_norm_eps = 1e-6, .partial_rotary = 1.0},
    /* Kimi-Linear (KimiLinearForCausalLM, transformers >= 5.23): Kimi delta attention layers
     * ("linear_attention") alternating with MLA without RoPE ("full_attention"); the first MLPs
     * dense (mlp_layer_types / first_k_dense_replace), the others DeepSeek-V3 routing (-inf group
     * fill) with shared experts.  Names as transformers holds them (kimi_names) */
    {.model_type = "kimi_linear", .fused_experts = 1, .name = "kimi_linear", .attn = LWQ_MIXER_MLA,
     .linear = LWQ_MIXER_KDA, .mla_nope = 1, .kimi_names = 1,
     .moe = LWQ_MOE_FIRST_K, .keys = LWQ_KEYS_KIMI, .router = LWQ_ROUTER_DEEPSEEK_V3,
     .experts = LWQ_EXPERTS_HF, .group_mask_inf = 1, .shared = LWQ_SHARED_DEEPSEEK,
     .norm_topk_default = 1, .rope_theta = 10000.0, .rms_norm_eps = 1e-5, .partial_rotary = 1.0},
    /* Nemotron-H / Nemotron-3 Nano, Super, Ultra (NemotronHForCausalLM): one block per layer from
     * layers_block_type (or hybrid_override_pattern): Mamba2, GQA attention without RoPE, a ReLU^2
     * MLP, or a MoE with DeepSeek-V3 routing (-inf group fill), non-gated ReLU^2 experts in an
     * optional latent and one ReLU^2 shared expert; the backbone. root */
    {.model_type = "nemotron_h", .name = "nemotron_h", .attn = LWQ_MIXER_GQA, .linear = LWQ_MIXER_MAMBA2,
     .bias = LWQ_BIAS_NEVER, .single = 1, .nope = 1, .moe = LWQ_MOE_LAYER_TYPES, .keys = LWQ_KEYS_DEEPSEEK,
     .router = LWQ_ROUTER_DEEPSEEK_V3, .group_mask_inf = 1, .experts = LWQ_EXPERTS_NEMOTRON, .fused_experts = 1,
     .shared = LWQ_SHARED_NEMOTRON, .norm_topk_default = 1, .rope_theta = 10000.0, .rms_norm_eps = 1e-5,
     .partial_rotary = 1.0, .root = "backbone.", .embed = "backbone.embeddings", .final_norm = "backbone.norm_f"},
    {.model_type = "qwen3_next", .fused_experts = 1, .name = "qwen3_next", .attn = LWQ_MIXER_GATED_GQA,
     .linear = LWQ_MIXER_GDN, .bias = LWQ_BIAS_NEVER, .qk_norm = 1, .norm = LWQ_NORM_RMS_1P,
     .moe = LWQ_MOE_SPARSE_STEP, .keys = LWQ_KEYS_QWEN, .router = LWQ_ROUTER_SOFTMAX,
     .experts = LWQ_EXPERTS_HF, .shared = LWQ_SHARED_GATED, .rope_theta = 10000.0,
     .rms_norm_eps = 1e-6, .partial_rotary = 0.25, .mtp = 1},
    /* Qwen3.5 / 3.6 / 3.8 text models (Qwen3_5ForCausalLM; under "text_config" of the
     * qwen3_5 VLM wrapper): qwen3_next's blocks with split DeltaNet projections, every layer
     * dense.  mRoPE (mrope_section) is text-only here: the three position ids are equal and it
     * is 1-D RoPE. */
    {.model_type = "qwen3_5_text", .name = "qwen3_5", .attn = LWQ_MIXER_GATED_GQA,
     .linear = LWQ_MIXER_GDN_SPLIT, .bias = LWQ_BIAS_NEVER, .qk_norm = 1, .norm = LWQ_NORM_RMS_1P,
     .rope_theta = 10000.0, .rms_norm_eps = 1e-6, .partial_rotary = 0.25, .mtp = 1},
    /* ... and their MoE: every layer routed (softmax top-k, always renormalised) plus the gated
     * shared expert (Qwen3_5MoeSparseMoeBlock) */
    {.model_type = "qwen3_5_moe_text", .fused_experts = 1, .name = "qwen3_5_moe", .attn = LWQ_MIXER_GATED_GQA,
     .linear = LWQ_MIXER_GDN_SPLIT, .bias = LWQ_BIAS_NEVER, .qk_norm = 1, .norm = LWQ_NORM_RMS_1P,
     .moe = LWQ_MOE_ALL, .keys = LWQ_KEYS_QWEN, .router = LWQ_ROUTER_SOFTMAX,
     .experts = LWQ_EXPERTS_HF, .shared = LWQ_SHARED_GATED, .norm_topk_fixed = 1,
     .rope_theta = 10000.0, .rms_norm_eps = 1e-6, .partial_rotary = 0.25, .mtp = 1},
};

static const lwq_family_wrapper wrappers[] = {
    {"kimi_k25", "language_model.model.", "language_model.", NULL},
    /* Qwen3_5[Moe]ForConditionalGeneration: the text model under model.language_model, lm_head
     * and mtp.* at the top, the vision tower model.visual.* */
    {"qwen3_5", "model.language_model.", "", "model.visual."},
    {"qwen3_5_moe", "model.language_model.", "", "model.visual."},
};

const char *lwq_supported_model_types(void)
{
    /* every row's model_type in table order (tests/layout/test_family.c checks it) */
    return "llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, deepseek_v2, deepseek_v3, kimi_k2, "
           "glm4_moe, minimax_m2, deepseek_v32, glm_moe_dsa, mistral4, kimi_linear, nemotron_h, qwen3_next, qwen3_5_text, qwen3_5_moe_text (and kimi_k25, qwen3_5, qwen3_5_moe via their "
           "text_config)";
}

const lwq_family *lwq_family_find(const char *mt)
{
    for (size_t i = 0; mt && i < sizeof families / sizeof families[0]; i++)
        if (!strcmp(mt, families[i].model_type))
            return &families[i];
    return NULL;
}

int lwq_family_lookup(const char *mt, const lwq_family **out, lwq_error *e)
{
    if ((*out = lwq_family_find(mt)) != NULL)
        return 0;
    return lwq_errf(e, LWQ_EUNSUPPORTED, "unknown model_type '%s' (supported: %s)", mt,
                    lwq_supported_model_types());
}

const char *lwq_family_name(const lwq_family *f) { return f ? f->name : "?"; }

int lwq_mixer_is_gdn(lwq_mixer_kind k) { return k == LWQ_MIXER_GDN || k == LWQ_MIXER_GDN_SPLIT; }

int lwq_mixer_is_recurrent(lwq_mixer_kind k)
{
    return lwq_mixer_is_gdn(k) || k == LWQ_MIXER_KDA || k == LWQ_MIXER_MAMBA2;
}

int lwq_mixer_is_attention(lwq_mixer_kind k)
{
    return k == LWQ_MIXER_GQA || k == LWQ_MIXER_GATED_GQA || k == LWQ_MIXER_MLA;
}

const lwq_family_wrapper *lwq_family_find_wrapper(const char *mt)
{
    for (size_t i = 0; i < sizeof wrappers / sizeof wrappers[0]; i++)
        if (!strcmp(mt, wrappers[i].model_type))
            return &wrappers[i];
    return NULL;
}
