/* engine/forward/forward.c — the public forward (engine/forward/forward.h): model setup (common
 * config checks, RoPE table), embedding, a decoder layer composed from the config's family row
 * (layout/arch/family.h; forward_internal.h says how), and the head.  The blocks: model_llama.c (GQA
 * attention), model_moe.c (softmax-routed experts), model_deepseek.c (MLA attention, DeepSeek
 * routing and shared experts), model_qwen3next.c (gated attention, gated DeltaNet and its
 * delta-rule core, the (1 + w) norms, the gated shared expert), model_kimi.c (Kimi delta
 * attention on that core).  Their toolkit: fwd_common.c.  Nothing here looks at
 * model_type: a family is a row of layout/arch/family.c. */
#include "engine/forward/forward.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/forward_internal.h"

/* ---- the composition ----------------------------------------------------------------------- */

int lwq_fwd_is_mla(const lwq_model_config *c)
{
    return c->family && c->family->attn == LWQ_MIXER_MLA;
}

const char *lwq_forward_supported(void)
{
    return "llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, deepseek_v2, deepseek_v3, kimi_k2, "
           "glm4_moe, minimax_m2, deepseek_v32, glm_moe_dsa, mistral4, kimi_linear, nemotron_h, qwen3_next, qwen3_5_text, qwen3_5_moe_text";
}

/* Rotary and geometry checks of the mixer kinds the model runs, before the common checks. */
static int check_mixer(const lwq_model_config *c, lwq_mixer_kind k, lwq_error *e)
{
    switch (k) {
    case LWQ_MIXER_GQA: return lwq_fwd_check_gqa_rotary(c, e);
    case LWQ_MIXER_MLA:
        /* a rope_partial MLA row (mistral4) names its rope part with partial_rotary_factor; the
         * config parser has checked that it is qk_rope_head_dim */
        if (c->family->rope_partial && (int64_t)((double)c->head_dim * c->partial_rotary_factor) == c->qk_rope_head_dim)
            return 0;
        return lwq_fwd_check_full_rotary(c, e);
    case LWQ_MIXER_GATED_GQA:
    case LWQ_MIXER_GDN:
    case LWQ_MIXER_GDN_SPLIT: return lwq_fwd_qwen3next_check(c, e);
    case LWQ_MIXER_KDA: return lwq_fwd_kda_check(c, e);
    case LWQ_MIXER_MAMBA2: return lwq_fwd_nemotron_check(c, e);
    default:
        return lwq_errf(e, LWQ_EUNSUPPORTED, "model_type '%s' has no forward in lwq (supported: "
                        "%s)", c->model_type, lwq_forward_supported());
    }
}

int lwq_fwd_mixer_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                        lwq_tensor *h, const lwq_observer *obs, lwq_error *e)
{
    lwq_mixer_kind k = lwq_config_layer_mixer(m->cfg, layer);
    switch (k) {
    case LWQ_MIXER_GQA: return lwq_fwd_attention_block(m, layer, w, b, h, obs, e);
    case LWQ_MIXER_MLA: return lwq_fwd_mla_attention_block(m, layer, w, b, h, obs, e);
    case LWQ_MIXER_GATED_GQA:
    case LWQ_MIXER_GDN:
    case LWQ_MIXER_GDN_SPLIT: return lwq_fwd_qwen3next_mixer_block(m, layer, w, b, h, obs, e);
    case LWQ_MIXER_KDA: return lwq_fwd_kda_mixer_block(m, layer, w, b, h, obs, e);
    default:
        return lwq_errf(e, LWQ_EUNSUPPORTED, "layer %d: mixer kind %d has no forward", layer,
                        (int)k);
    }
}

int lwq_fwd_post_norm(lwq_model *m, int layer, const lwq_weights *w, const lwq_tensor *h,
                      lwq_tensor *x, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    if (c->family->norm == LWQ_NORM_RMS_1P)
        return lwq_fwd_norm_1p_layer(m, layer, w, "post_attention_layernorm", h, x, e);
    char name[LWQ_NAME_MAX];
    lwq_tensor ln2;
    snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", layer);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 1, c->hidden_size, 0, 0, &ln2, e));
    return lwq_backend_rmsnorm(m->be, h, &ln2, (float)c->rms_norm_eps, x, e);
}

int lwq_fwd_has_shared(const lwq_model_config *c)
{
    switch (c->family->shared) {
    case LWQ_SHARED_DEEPSEEK: return c->n_shared_experts > 0;
    case LWQ_SHARED_GATED: return c->shared_expert_intermediate_size > 0;
    default: return 0;
    }
}

int lwq_fwd_shared_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                         const lwq_tensor *x, lwq_tensor *sh, const lwq_observer *obs, lwq_error *e)
{
    switch (m->cfg->family->shared) {
    case LWQ_SHARED_DEEPSEEK: return lwq_fwd_deepseek_shared(m, layer, w, b, x, sh, obs, e);
    case LWQ_SHARED_GATED: return lwq_fwd_qwen3next_shared(m, layer, w, b, x, sh, obs, e);
    default: return lwq_errf(e, LWQ_EINVAL, "layer %d: the model has no shared experts", layer);
    }
}

/* out = routed experts (+ shared experts), each term in the act dtype and their sum rounded once
 * (lwq_backend_add), as transformers adds the two act-dtype tensors; or the dense SwiGLU MLP. */
static int mlp_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                     const lwq_tensor *x, lwq_tensor *out, const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    if (!lwq_model_layer_is_moe(m, layer)) {
        char name[LWQ_NAME_MAX];
        snprintf(name, sizeof name, "model.layers.%d.mlp", layer);
        return lwq_fwd_swiglu_mlp(m, layer, w, name, "gate_proj", "up_proj", "down_proj",
                                  c->intermediate_size, x, &b->valid, NULL, NULL, out, obs, e);
    }
    if (c->family->router == LWQ_ROUTER_SOFTMAX)
        LWQ_TRY(lwq_fwd_moe_block(m, layer, w, b, x, out, obs, e));
    else
        LWQ_TRY(lwq_fwd_deepseek_routed(m, layer, w, b, x, out, obs, e));
    if (!lwq_fwd_has_shared(c))
        return 0;
    lwq_tensor sh;
    LWQ_TRY(lwq_fwd_tensor(m, m->act, x->shape[0], c->hidden_size, &sh, e));
    LWQ_TRY(lwq_fwd_shared_block(m, layer, w, b, x, &sh, obs, e));
    return lwq_backend_add(m->be, out, &sh, e);
}

static int layer_forward(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                         lwq_tensor *h, const lwq_observer *obs, lwq_error *e)
{
    const int64_t n = h->shape[0], D = m->cfg->hidden_size;
    lwq_tensor x, out;
    if (m->cfg->family->single) /* nemotron_h: one block per layer */
        return lwq_fwd_nemotron_layer(m, layer, w, b, h, obs, e);
    LWQ_TRY(lwq_fwd_mixer_block(m, layer, w, b, h, obs, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, D, &x, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, D, &out, e));
    LWQ_TRY(lwq_fwd_post_norm(m, layer, w, h, &x, e));
    LWQ_TRY(mlp_block(m, layer, w, b, &x, &out, obs, e));
    return lwq_backend_add(m->be, h, &out, e);
}

/* ---- model ----------------------------------------------------------------------------------- */

int lwq_model_init(lwq_model *m, const lwq_model_config *c, const lwq_backend *be, lwq_dtype act,
                   lwq_error *e)
{
    memset(m, 0, sizeof *m);
    const lwq_family *f = c->family;
    if (!f)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "model_type '%s' has no forward in lwq (supported: "
                        "%s)", c->model_type, lwq_forward_supported());
    if (!lwq_dtype_is_act(act))
        return lwq_errf(e, LWQ_EINVAL, "forward: activation dtype %s is not F32, BF16 or F16",
                        lwq_dtype_name(act));
    /* the full-attention mixer owns the rotary table; a linear mixer adds its own checks */
    const int mla = f->attn == LWQ_MIXER_MLA;
    LWQ_TRY(check_mixer(c, f->attn, e));
    if (f->linear != LWQ_MIXER_NONE && f->linear != f->attn)
        LWQ_TRY(check_mixer(c, f->linear, e));
    if (c->hidden_size <= 0 || c->num_attention_heads <= 0 || c->num_key_value_heads <= 0 ||
        c->num_attention_heads % c->num_key_value_heads || c->head_dim <= 0 ||
        (c->head_dim % 2 && !mla) /* MLA rotates only its rope part */ ||
        c->vocab_size <= 0 || c->num_hidden_layers <= 0 || c->head_dim > 4096 ||
        c->num_attention_heads > 4096)
        return lwq_errf(e, LWQ_EINVAL, "config (%s): bad geometry: hidden %" PRId64 ", heads %d, "
                        "kv_heads %d, head_dim %" PRId64 ", vocab %" PRId64 ", layers %d",
                        c->model_type, c->hidden_size, c->num_attention_heads,
                        c->num_key_value_heads, c->head_dim, c->vocab_size, c->num_hidden_layers);
    if (f->moe != LWQ_MOE_NONE && (f->keys == LWQ_KEYS_MIXTRAL || c->num_experts > 0) &&
        (c->num_experts <= 0 || c->num_experts > 4096 || c->num_experts_per_tok <= 0 ||
         c->num_experts_per_tok > c->num_experts || c->num_experts_per_tok > 64))
        return lwq_errf(e, LWQ_EINVAL, "config (%s): %d experts with %d per token is not usable",
                        c->model_type, c->num_experts, c->num_experts_per_tok);
    if (mla)
        LWQ_TRY(lwq_fwd_mla_check(c, e));
    if (f->router == LWQ_ROUTER_DEEPSEEK_V2 || f->router == LWQ_ROUTER_DEEPSEEK_V3 ||
        f->router == LWQ_ROUTER_SOFTMAX_GROUPED)
        LWQ_TRY(lwq_fwd_deepseek_routing_check(c, e));
    m->cfg = c;
    m->be = be;
    m->act = act;
    int64_t half = mla ? c->qk_rope_head_dim / 2 : lwq_fwd_gqa_rotary_dim(c) / 2;
    float *inv = (float *)malloc((size_t)half * sizeof(float));
    m->arena = lwq_fwd_arena_new();
    int rc = 0;
    if (!inv || !m->arena) {
        rc = lwq_errf(e, LWQ_ENOMEM, "forward: no memory for the model tables");
        goto out;
    }
    rc = mla ? lwq_fwd_mla_inv_freq(c, inv, &m->attn_scaling, e) : lwq_rope_inv_freq(c, inv, &m->attn_scaling, e);
    if (rc < 0)
        goto out;
    int64_t shape[1] = {half};
    if ((rc = lwq_backend_tensor_alloc(be, LWQ_F32, 1, shape, &m->inv_freq, e)) < 0 ||
        (rc = lwq_backend_upload(be, m->inv_freq.data, inv, (size_t)half * sizeof(float), e)) < 0)
        goto out;
out:
    free(inv);
    if (rc < 0)
        lwq_model_free(m);
    return rc;
}

void lwq_model_free(lwq_model *m)
{
    if (m->be)
        lwq_backend_tensor_free(m->be, &m->inv_freq);
    lwq_fwd_arena_free(m);
    memset(m, 0, sizeof *m);
}

/* ---- embed, layer, head ---------------------------------------------------------------------- */

static int check_h(const lwq_model *m, const lwq_tensor *h, int64_t n, const char *what,
                   lwq_error *e)
{
    if (h->ndim != 2 || h->shape[1] != m->cfg->hidden_size || (n >= 0 && h->shape[0] != n) ||
        h->dtype != m->act)
        return lwq_errf(e, LWQ_EINVAL, "%s: hidden state must be (%" PRId64 ", %" PRId64 ") %s, "
                        "got %d-d (%" PRId64 ", %" PRId64 ") %s", what, n, m->cfg->hidden_size,
                        lwq_dtype_name(m->act), h->ndim, h->shape[0], h->shape[1],
                        lwq_dtype_name(h->dtype));
    return 0;
}

int lwq_model_embed(lwq_model *m, const lwq_weights *w, const int32_t *tokens, lwq_tensor *h,
                    lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    LWQ_TRY(check_h(m, h, -1, "embed", e));
    int64_t n = h->shape[0];
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return lwq_errf(e, LWQ_EINVAL, "embed: token %" PRId64 " is id %d, outside the "
                            "vocabulary [0, %" PRId64 ")", i, tokens[i], c->vocab_size);
    lwq_fwd_arena_reset(m);
    lwq_tensor emb, ids;
    LWQ_TRY(lwq_fwd_weight(m, w, -1, "model.embed_tokens.weight", 2, c->vocab_size, c->hidden_size,
                           0, &emb, e));
    LWQ_TRY(lwq_fwd_tensor(m, LWQ_I32, n, 1, &ids, e));
    LWQ_TRY(lwq_backend_upload(m->be, ids.data, tokens, (size_t)n * sizeof(int32_t), e));
    ids.ndim = 1;
    LWQ_TRY(lwq_backend_gather_rows(m->be, &emb, &ids, h, e));
    return lwq_backend_synchronize(m->be, e); /* reads the device's index-error flag */
}

int lwq_model_layer_forward(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                            lwq_tensor *h, const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    if (layer < 0 || layer >= c->num_hidden_layers)
        return lwq_errf(e, LWQ_EINVAL, "forward: layer %d outside [0, %d)", layer,
                        c->num_hidden_layers);
    LWQ_TRY(check_h(m, h, b->batch * b->seq, "layer forward", e));
    lwq_fwd_arena_reset(m);
    LWQ_TRY(lwq_fwd_observe_batch(obs, layer, b, e));
    LWQ_TRY(layer_forward(m, layer, w, b, h, obs, e));
    /* the device flags errors it can only see while running (a MoE gather row out of range);
     * synchronize() reports them, so a layer never ends with one unread */
    return lwq_backend_synchronize(m->be, e);
}

int lwq_model_final_norm(lwq_model *m, const lwq_weights *w, lwq_tensor *h, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    LWQ_TRY(check_h(m, h, -1, "final norm", e));
    lwq_tensor norm;
    LWQ_TRY(lwq_fwd_weight(m, w, -1, "model.norm.weight", 1, c->hidden_size, 0, 0, &norm, e));
    if (c->family->norm == LWQ_NORM_RMS_1P)
        return lwq_fwd_rmsnorm_1p(m, h, &norm, h, e);
    return lwq_backend_rmsnorm(m->be, h, &norm, (float)c->rms_norm_eps, h, e);
}

int lwq_model_head(lwq_model *m, const lwq_weights *w, lwq_tensor *h, lwq_tensor *logits,
                   lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    LWQ_TRY(check_h(m, h, -1, "head", e));
    lwq_tensor head;
    int rc = lwq_fwd_weight(m, w, -1, "lm_head.weight", 2, c->vocab_size, c->hidden_size,
                            c->tie_word_embeddings, &head, e);
    if (rc < 0)
        return rc;
    if (rc == 1) /* tied and absent: transformers reuses the embedding matrix */
        LWQ_TRY(lwq_fwd_weight(m, w, -1, "model.embed_tokens.weight", 2, c->vocab_size,
                               c->hidden_size, 0, &head, e));
    LWQ_TRY(lwq_model_final_norm(m, w, h, e));
    return lwq_backend_gemm(m->be, h, &head, NULL, logits, e);
}

int lwq_model_forward(lwq_model *m, const lwq_weights *w, const int32_t *tokens,
                      const lwq_batch *b, lwq_tensor *logits, const lwq_observer *obs,
                      lwq_error *e)
{
    int64_t shape[2] = {b->batch * b->seq, m->cfg->hidden_size};
    lwq_tensor h;
    LWQ_TRY(lwq_backend_tensor_alloc(m->be, m->act, 2, shape, &h, e));
    int rc = lwq_model_embed(m, w, tokens, &h, e);
    for (int l = 0; rc == 0 && l < m->cfg->num_hidden_layers; l++)
        rc = lwq_model_layer_forward(m, l, w, b, &h, obs, e);
    if (rc == 0)
        rc = lwq_model_head(m, w, &h, logits, e);
    lwq_backend_tensor_free(m->be, &h);
    return rc;
}
