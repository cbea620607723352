/* engine/forward/forward.c — the public forward (engine/forward/forward.h): the one switch on the architecture,
 * model setup (common config checks, RoPE table), embedding, the decoder layer through the
 * architecture's entry, and the head.  The architectures: model_llama.c (llama, mistral, qwen2,
 * qwen3, qwen3_moe, mixtral; routed experts in model_moe.c), model_deepseek.c (deepseek_v2,
 * deepseek_v3, kimi_k2), model_qwen3next.c (qwen3_next).  Their toolkit: fwd_common.c. */
#include "engine/forward/forward.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/forward_internal.h"

/* ---- THE architecture switch ------------------------------------------------------------------
 * The only place the forward looks at the architecture.  Adding one = a plan entry
 * (layout/arch.c), a forward file defining its lwq_fwd_arch (engine/forward/model_*.c), and a case here. */

static const lwq_fwd_arch *arch_of(const lwq_model_config *c)
{
    switch (c->arch) {
    case LWQ_ARCH_LLAMA:
    case LWQ_ARCH_QWEN2:
    case LWQ_ARCH_QWEN3:
    case LWQ_ARCH_QWEN3_MOE:
    case LWQ_ARCH_MIXTRAL:
        return &lwq_fwd_arch_llama;
    case LWQ_ARCH_DEEPSEEK_V2:
    case LWQ_ARCH_DEEPSEEK_V3:
        return &lwq_fwd_arch_deepseek;
    case LWQ_ARCH_QWEN3_NEXT:
        return &lwq_fwd_arch_qwen3next;
    default:
        return NULL;
    }
}

int lwq_fwd_is_mla(const lwq_model_config *c)
{
    return arch_of(c) == &lwq_fwd_arch_deepseek;
}

const char *lwq_forward_supported(void)
{
    return "llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, deepseek_v2, deepseek_v3, kimi_k2, "
           "qwen3_next";
}

/* ---- model ----------------------------------------------------------------------------------- */

int lwq_model_init(lwq_model *m, const lwq_model_config *c, const lwq_backend *be, lwq_dtype act,
                   lwq_error *e)
{
    memset(m, 0, sizeof *m);
    const lwq_fwd_arch *a = arch_of(c);
    if (!a)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "model_type '%s' has no forward in lwq (supported: "
                        "%s)", c->model_type, lwq_forward_supported());
    if (!lwq_dtype_is_act(act))
        return lwq_errf(e, LWQ_EINVAL, "forward: activation dtype %s is not F32, BF16 or F16",
                        lwq_dtype_name(act));
    LWQ_TRY(a->check_rope(c, e));
    if (c->hidden_size <= 0 || c->num_attention_heads <= 0 || c->num_key_value_heads <= 0 ||
        c->num_attention_heads % c->num_key_value_heads || c->head_dim <= 0 ||
        (c->head_dim % 2 && !a->odd_head_dim) ||
        c->vocab_size <= 0 || c->num_hidden_layers <= 0 || c->head_dim > 4096 ||
        c->num_attention_heads > 4096)
        return lwq_errf(e, LWQ_EINVAL, "config (%s): bad geometry: hidden %" PRId64 ", heads %d, "
                        "kv_heads %d, head_dim %" PRId64 ", vocab %" PRId64 ", layers %d",
                        c->model_type, c->hidden_size, c->num_attention_heads,
                        c->num_key_value_heads, c->head_dim, c->vocab_size, c->num_hidden_layers);
    if (a->has_experts(c) &&
        (c->num_experts <= 0 || c->num_experts > 4096 || c->num_experts_per_tok <= 0 ||
         c->num_experts_per_tok > c->num_experts || c->num_experts_per_tok > 64))
        return lwq_errf(e, LWQ_EINVAL, "config (%s): %d experts with %d per token is not usable",
                        c->model_type, c->num_experts, c->num_experts_per_tok);
    if (a->check)
        LWQ_TRY(a->check(c, e));
    m->cfg = c;
    m->be = be;
    m->act = act;
    m->arch = a;
    int64_t half = a->rope_half ? a->rope_half(c) : c->head_dim / 2;
    float *inv = (float *)malloc((size_t)half * sizeof(float));
    m->arena = lwq_fwd_arena_new();
    int rc = 0;
    if (!inv || !m->arena) {
        rc = lwq_errf(e, LWQ_ENOMEM, "forward: no memory for the model tables");
        goto out;
    }
    rc = a->inv_freq ? a->inv_freq(c, inv, &m->attn_scaling, e) : lwq_rope_inv_freq(c, inv, &m->attn_scaling, e);
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
    LWQ_TRY(m->arch->layer(m, layer, w, b, h, obs, e));
    /* the device flags errors it can only see while running (a MoE gather row out of range);
     * synchronize() reports them, so a layer never ends with one unread */
    return lwq_backend_synchronize(m->be, e);
}

int lwq_model_head(lwq_model *m, const lwq_weights *w, lwq_tensor *h, lwq_tensor *logits,
                   lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    LWQ_TRY(check_h(m, h, -1, "head", e));
    lwq_tensor norm, head;
    LWQ_TRY(lwq_fwd_weight(m, w, -1, "model.norm.weight", 1, c->hidden_size, 0, 0, &norm, e));
    int rc = lwq_fwd_weight(m, w, -1, "lm_head.weight", 2, c->vocab_size, c->hidden_size,
                            c->tie_word_embeddings, &head, e);
    if (rc < 0)
        return rc;
    if (rc == 1) /* tied and absent: transformers reuses the embedding matrix */
        LWQ_TRY(lwq_fwd_weight(m, w, -1, "model.embed_tokens.weight", 2, c->vocab_size,
                               c->hidden_size, 0, &head, e));
    if (m->arch->final_norm)
        LWQ_TRY(m->arch->final_norm(m, h, &norm, h, e));
    else
        LWQ_TRY(lwq_backend_rmsnorm(m->be, h, &norm, (float)c->rms_norm_eps, h, e));
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
