/* layout/recipe/recipe_presets.c — the built-in recipes (--qformat NAME), as recipe JSON. */
#include "layout/recipe/recipe.h"

#include <string.h>

#define ROUTERS_OFF                                                                                \
    "{\"match\":\"*.mlp.gate\",\"enable\":false},"                                                 \
    "{\"match\":\"*.block_sparse_moe.gate\",\"enable\":false},"                                    \
    "{\"match\":\"*.mixer.gate\",\"enable\":false},"                                               \
    "{\"match\":\"*.shared_expert_gate\",\"enable\":false}"

/* What Model Optimizer's default_disabled_quantizers unit (modelopt_recipes/configs/ptq/units/,
 * imported by its nvfp4 and fp8 presets) keeps unquantized in the Gated DeltaNet of qwen3_next:
 * the depthwise conv1d and in_proj_a* / in_proj_b* (transformers' in_proj_ba).  Routers are
 * ROUTERS_OFF. */
#define LINEAR_ATTN_OFF                                                                            \
    "{\"match\":\"*.linear_attn.conv1d\",\"enable\":false},"                                          \
    "{\"match\":\"*.linear_attn.in_proj_a*\",\"enable\":false},"                                      \
    "{\"match\":\"*.linear_attn.in_proj_b*\",\"enable\":false},"                                    \
    "{\"match\":\"*.mixer.conv1d\",\"enable\":false}"

/* NVIDIA's production recipe for the Qwen3-Next / Qwen3.8 hybrids (seed article
 * "Quantizing a 4.9 TB Qwen3.8 Model on a Single GPU"): routed experts NVFP4 with MSE-searched
 * static weight scales and the FP8 scale sweep; self-attention q/k/v/o and the whole
 * linear-attention path (in_proj_qkvz, in_proj_ba, conv1d, out_proj) FP8 W8A8 (per-tensor,
 * max-calibrated: in Model Optimizer the FP8 scale sweep refines only static NVFP4 weights and
 * leaves per-tensor FP8 weights at their max amax); KV cache FP8 cast.  Routers, shared experts, shared_expert_gate, lm_head, embeddings and the
 * MTP block (mtp.*, outside the decoder layers) match no rule and stay BF16, excluded.  The same
 * recipe ships as recipes/qwen3next_production.json. */
#define QWEN3NEXT_PRODUCTION                                                                       \
    "{\"name\":\"qwen3next_production\","                                                         \
    "\"algorithm\":{\"method\":\"mse\",\"fp8_scale_sweep\":true},\"kv_cache\":\"fp8_cast\","         \
    "\"rules\":["                                                                                 \
    "{\"match\":\"*.mlp.experts.*\",\"format\":\"nvfp4\"},"                                       \
    "{\"match\":\"*.self_attn.q_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"                                     \
    "{\"match\":\"*.self_attn.k_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"                                     \
    "{\"match\":\"*.self_attn.v_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"                                     \
    "{\"match\":\"*.self_attn.o_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"                                     \
    "{\"match\":\"*.linear_attn.in_proj_qkvz\",\"format\":\"fp8\",\"algo\":\"max\"},"                             \
    "{\"match\":\"*.linear_attn.in_proj_ba\",\"format\":\"fp8\",\"algo\":\"max\"},"                               \
    "{\"match\":\"*.linear_attn.conv1d\",\"format\":\"fp8\",\"algo\":\"max\"},"                                   \
    "{\"match\":\"*.linear_attn.out_proj\",\"format\":\"fp8\",\"algo\":\"max\"}]}"

/* NVIDIA's NVFP4 DeepSeek-V3.1 / Kimi-K2.6 keep the MLA q/kv projections in BF16, and so does
 * lwq's nvfp4 preset (tests/layout/recipe/test_recipe_mla.c).  Model Optimizer 0.47's nvfp4 preset
 * quantizes them; its recipe YAML read by lwq (--recipe general/ptq/nvfp4_default-kv_fp8) does
 * what it does (perf/RESULTS.md, "Side by side with Model Optimizer"). */
#define MLA_PROJ_OFF "{\"match\":\"*\",\"mla_projection\":true,\"enable\":false}"

/* Model Optimizer 0.47's Mamba-MoE presets (configs/ptq/presets/model/mamba_moe_{fp8,nvfp4}_
 * {aggressive,conservative}.yaml, hf_ptq --qformat): its fp8 / nvfp4 preset (base_disable_all, the
 * format, default_disabled_quantizers) plus mamba_moe_disabled_quantizers: the MoE latent
 * projections and every attention projection (q/k/v/o_proj; the Megatron names do not occur in an
 * HF checkpoint) stay unquantized; conservative also keeps the Mamba2 in_proj / out_proj. */
#define MAMBA_MOE_OFF                                                                              \
    "{\"match\":\"*fc1_latent_proj*\",\"enable\":false},"                                          \
    "{\"match\":\"*fc2_latent_proj*\",\"enable\":false},"                                          \
    "{\"match\":\"*q_proj*\",\"enable\":false},"                                                   \
    "{\"match\":\"*k_proj*\",\"enable\":false},"                                                   \
    "{\"match\":\"*v_proj*\",\"enable\":false},"                                                   \
    "{\"match\":\"*o_proj*\",\"enable\":false}"
#define MAMBA_PROJ_OFF                                                                             \
    "{\"match\":\"*mixer.in_proj*\",\"enable\":false},"                                            \
    "{\"match\":\"*mixer.out_proj*\",\"enable\":false}"
#define MAMBA_MOE(name, fmt, extra)                                                                \
    {name, "{\"name\":\"" name "\",\"rules\":[{\"match\":\"*\",\"format\":\"" fmt "\"}," ROUTERS_OFF      \
           "," LINEAR_ATTN_OFF "," MAMBA_MOE_OFF extra "]}"}

static const struct {
    const char *name;
    const char *json;
} presets[] = {
    {"nvfp4", "{\"name\":\"nvfp4\",\"rules\":[{\"match\":\"*\",\"format\":\"nvfp4\"}," ROUTERS_OFF
              "," LINEAR_ATTN_OFF "," MLA_PROJ_OFF "]}"},
    {"nvfp4_experts_only",
     "{\"name\":\"nvfp4_experts_only\",\"rules\":["
     "{\"match\":\"*.mlp.experts.*\",\"format\":\"nvfp4\"},"
     "{\"match\":\"*.block_sparse_moe.experts.*\",\"format\":\"nvfp4\"}]}"},
    {"nvfp4_mlp_only",
     "{\"name\":\"nvfp4_mlp_only\",\"rules\":["
     "{\"match\":\"*.mlp.*\",\"format\":\"nvfp4\"},"
     "{\"match\":\"*.block_sparse_moe.*\",\"format\":\"nvfp4\"}," ROUTERS_OFF "]}"},
    {"fp8", "{\"name\":\"fp8\",\"rules\":[{\"match\":\"*\",\"format\":\"fp8\"}," ROUTERS_OFF
            "," LINEAR_ATTN_OFF "]}"},
    {"nvfp4_experts-fp8_attn",
     "{\"name\":\"nvfp4_experts-fp8_attn\",\"rules\":["
     "{\"match\":\"*.self_attn.q_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"
     "{\"match\":\"*.self_attn.k_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"
     "{\"match\":\"*.self_attn.v_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"
     "{\"match\":\"*.self_attn.o_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"
     "{\"match\":\"*.mlp.experts.*\",\"format\":\"nvfp4\",\"algo\":\"mse\",\"fp8_scale_sweep\":true},"
     "{\"match\":\"*.block_sparse_moe.experts.*\",\"format\":\"nvfp4\",\"algo\":\"mse\",\"fp8_scale_sweep\":true},"
     MLA_PROJ_OFF "]}"},
    {"qwen3next_production", QWEN3NEXT_PRODUCTION},
    /* Model Optimizer's nvfp4_four_over_six preset (NVFP4_FOUR_OVER_SIX_CFG): W4A4 NVFP4 with the
     * weights' block scales normalised to 256 and each block's amax searched over x1.0 (M = 6) and
     * x1.5 (M = 4); default_disabled_quantizers.  MLA projections are quantized, as there. */
    {"nvfp4_four_over_six",
     "{\"name\":\"nvfp4_four_over_six\",\"algorithm\":{\"method\":\"mse\",\"mse_multipliers\":[1.0,1.5,0.5]},"
     "\"rules\":[{\"match\":\"*\",\"format\":\"nvfp4\",\"four_over_six\":true}," ROUTERS_OFF "," LINEAR_ATTN_OFF
     "]}"},
    /* Model Optimizer's W4A16_NVFP4_CFG (hf_ptq --qformat w4a16_nvfp4): every weight quantizer
     * NVFP4, no input quantizer, default_disabled_quantizers (routers, conv1d, in_proj_a/b) */
    MAMBA_MOE("mamba_moe_nvfp4_aggressive", "nvfp4", ""),
    MAMBA_MOE("mamba_moe_nvfp4_conservative", "nvfp4", "," MAMBA_PROJ_OFF),
    MAMBA_MOE("mamba_moe_fp8_aggressive", "fp8", ""),
    MAMBA_MOE("mamba_moe_fp8_conservative", "fp8", "," MAMBA_PROJ_OFF),
    {"w4a16_nvfp4", "{\"name\":\"w4a16_nvfp4\",\"rules\":[{\"match\":\"*\",\"format\":\"nvfp4\"},"
                    "{\"match\":\"*\",\"quantizer\":\"input\",\"enable\":false}," ROUTERS_OFF "," LINEAR_ATTN_OFF
                    "]}"},
};

const char *lwq_recipe_preset_names(void)
{
    return "nvfp4, nvfp4_experts_only, nvfp4_mlp_only, fp8, nvfp4_experts-fp8_attn, qwen3next_production, "
           "w4a16_nvfp4, nvfp4_four_over_six, mamba_moe_nvfp4_aggressive, mamba_moe_nvfp4_conservative, "
           "mamba_moe_fp8_aggressive, mamba_moe_fp8_conservative";
}

int lwq_recipe_preset(const char *name, lwq_recipe *r, lwq_error *e)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(name, presets[i].name))
            return lwq_recipe_parse(name, presets[i].json, r, e);
    memset(r, 0, sizeof *r);
    return lwq_errf(e, LWQ_EINVAL, "unknown --qformat \"%s\" (presets: %s)", name, lwq_recipe_preset_names());
}
