/* engine/forward.c — model setup (architecture check, RoPE table), the scratch arena, batches,
 * weight lookup with checks, embedding, head, and the per-layer dispatch to the architecture
 * files (model_llama.c, model_moe.c). */
#include "engine/forward.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward_internal.h"

/* ---- arena ------------------------------------------------------------------------------------
 * Bump allocation from device blocks.  When one forward needed more than the first block, the
 * next reset replaces all blocks by one block of the peak size, so steady state is one block and
 * no device allocation per layer. */

#define ARENA_MAX_BLOCKS 64
#define ARENA_ALIGN 256

typedef struct lwq_arena {
    void *blk[ARENA_MAX_BLOCKS];
    size_t cap[ARENA_MAX_BLOCKS];
    int nblk;
    size_t used;  /* in the last block */
    size_t total; /* bytes handed out since the last reset */
    size_t peak;
} lwq_arena;

void lwq_fwd_arena_reset(lwq_model *m)
{
    lwq_arena *a = m->arena;
    if (a->total > a->peak)
        a->peak = a->total;
    if (a->nblk > 1) {
        for (int i = 0; i < a->nblk; i++)
            lwq_backend_free(m->be, a->blk[i]);
        a->nblk = 0;
        void *p;
        if (lwq_backend_alloc(m->be, a->peak, &p, NULL) == 0) {
            a->blk[0] = p;
            a->cap[0] = a->peak;
            a->nblk = 1;
        }
    }
    a->used = 0;
    a->total = 0;
}

static void arena_free(lwq_model *m)
{
    lwq_arena *a = m->arena;
    if (!a)
        return;
    for (int i = 0; i < a->nblk; i++)
        lwq_backend_free(m->be, a->blk[i]);
    free(a);
    m->arena = NULL;
}

static int arena_get(lwq_model *m, size_t bytes, void **out, lwq_error *e)
{
    lwq_arena *a = m->arena;
    if (bytes > SIZE_MAX / 4)
        return lwq_errf(e, LWQ_ENOMEM, "forward scratch: %zu bytes requested", bytes);
    bytes = (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (bytes == 0)
        bytes = ARENA_ALIGN;
    if (a->nblk == 0 || a->used + bytes > a->cap[a->nblk - 1]) {
        if (a->nblk == ARENA_MAX_BLOCKS)
            return lwq_errf(e, LWQ_ENOMEM, "forward scratch: more than %d blocks in one layer",
                            ARENA_MAX_BLOCKS);
        size_t cap = a->nblk ? 2 * a->cap[a->nblk - 1] : ((size_t)1 << 20);
        if (cap < bytes)
            cap = bytes;
        void *p;
        LWQ_TRY(lwq_backend_alloc(m->be, cap, &p, e));
        a->blk[a->nblk] = p;
        a->cap[a->nblk] = cap;
        a->nblk++;
        a->used = 0;
    }
    *out = (char *)a->blk[a->nblk - 1] + a->used;
    a->used += bytes;
    a->total += bytes;
    return 0;
}

int lwq_fwd_tensor(lwq_model *m, lwq_dtype dt, int64_t rows, int64_t cols, lwq_tensor *t,
                   lwq_error *e)
{
    if (rows < 0 || cols < 0 || (cols > 0 && rows > INT64_MAX / 16 / cols))
        return lwq_errf(e, LWQ_EINVAL, "forward scratch: bad shape (%" PRId64 ", %" PRId64 ")",
                        rows, cols);
    void *p = NULL;
    LWQ_TRY(arena_get(m, (size_t)(rows * cols) * lwq_dtype_size(dt), &p, e));
    int64_t shape[2] = {rows, cols};
    *t = lwq_tensor_view(p, dt, 2, shape);
    t->device = m->be->ops->device;
    return 0;
}

lwq_tensor lwq_fwd_rows(const lwq_tensor *t, int64_t r0, int64_t nr)
{
    lwq_tensor v = *t;
    v.shape[0] = nr;
    v.data = (char *)t->data + (size_t)(r0 * t->shape[1]) * lwq_dtype_size(t->dtype);
    return v;
}

/* ---- weights and observers ------------------------------------------------------------------- */

int lwq_fwd_weight(lwq_model *m, const lwq_weights *w, int layer, const char *name, int ndim,
                   int64_t d0, int64_t d1, int optional, lwq_tensor *out, lwq_error *e)
{
    char where[32];
    if (layer >= 0)
        snprintf(where, sizeof where, "layer %d", layer);
    else
        snprintf(where, sizeof where, "model head/tail");
    memset(out, 0, sizeof *out);
    lwq_error sub = {0};
    int rc = w->get(w->ctx, name, out, &sub);
    if (rc == LWQ_ENOENT) {
        if (optional)
            return 1;
        return lwq_errf(e, LWQ_ENOENT, "%s: tensor %s is missing%s%s", where, name,
                        sub.msg[0] ? ": " : "", sub.msg);
    }
    if (rc < 0)
        return lwq_errf(e, rc, "%s: tensor %s: %s", where, name, sub.msg);
    if (!lwq_dtype_is_act(out->dtype))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: tensor %s has dtype %s, expected F32, BF16 or "
                        "F16", where, name, lwq_dtype_name(out->dtype));
    int bad = out->ndim != ndim || out->shape[0] != d0 || (ndim == 2 && out->shape[1] != d1);
    if (bad) {
        char got[96];
        if (out->ndim == 1)
            snprintf(got, sizeof got, "(%" PRId64 ")", out->shape[0]);
        else if (out->ndim == 2)
            snprintf(got, sizeof got, "(%" PRId64 ", %" PRId64 ")", out->shape[0], out->shape[1]);
        else
            snprintf(got, sizeof got, "%d dims", out->ndim);
        if (ndim == 1)
            return lwq_errf(e, LWQ_EFORMAT, "%s: tensor %s has shape %s, expected (%" PRId64 ")",
                            where, name, got, d0);
        return lwq_errf(e, LWQ_EFORMAT, "%s: tensor %s has shape %s, expected (%" PRId64 ", %"
                        PRId64 ")", where, name, got, d0, d1);
    }
    if (!lwq_tensor_is_contiguous(out) || out->device != m->be->ops->device || !out->data)
        return lwq_errf(e, LWQ_EINVAL, "%s: tensor %s is not a contiguous view on the %s backend's "
                        "device", where, name, m->be->ops->name);
    return 0;
}

int lwq_fwd_observe(const lwq_observer *obs, int layer, const char *module, const lwq_tensor *x,
                    const lwq_tensor *valid, lwq_error *e)
{
    if (!obs || !obs->linear_input)
        return 0;
    return obs->linear_input(obs->ctx, layer, module, x, valid, e);
}

/* ---- batches --------------------------------------------------------------------------------- */

void lwq_batch_free(lwq_batch *b, const lwq_backend *be)
{
    lwq_backend_tensor_free(be, &b->pos);
    lwq_backend_tensor_free(be, &b->valid);
    free(b->valid_host);
    memset(b, 0, sizeof *b);
}

int lwq_batch_init(lwq_batch *b, const lwq_backend *be, int64_t batch, int64_t seq,
                   const int64_t *lengths, lwq_error *e)
{
    memset(b, 0, sizeof *b);
    if (batch < 0 || seq < 0 || (seq > 0 && batch > INT32_MAX / seq))
        return lwq_errf(e, LWQ_EINVAL, "batch: %" PRId64 " sequences of %" PRId64 " tokens is out "
                        "of range", batch, seq);
    int64_t n = batch * seq;
    for (int64_t s = 0; lengths && s < batch; s++)
        if (lengths[s] < 0 || lengths[s] > seq)
            return lwq_errf(e, LWQ_EINVAL, "batch: sequence %" PRId64 " has length %" PRId64
                            ", outside [0, %" PRId64 "]", s, lengths[s], seq);
    b->batch = batch;
    b->seq = seq;
    b->valid_host = (uint8_t *)malloc((size_t)n + 1);
    int32_t *pos = (int32_t *)malloc(((size_t)n + 1) * sizeof(int32_t));
    int rc = 0;
    if (!b->valid_host || !pos) {
        rc = lwq_errf(e, LWQ_ENOMEM, "batch: no memory for %" PRId64 " rows", n);
        goto out;
    }
    for (int64_t s = 0; s < batch; s++) {
        int64_t len = lengths ? lengths[s] : seq, pad = seq - len;
        for (int64_t t = 0; t < seq; t++) {
            b->valid_host[s * seq + t] = t >= pad;
            pos[s * seq + t] = t >= pad ? (int32_t)(t - pad) : 0;
        }
        b->n_valid += len;
    }
    int64_t shape[1] = {n};
    if ((rc = lwq_backend_tensor_alloc(be, LWQ_I32, 1, shape, &b->pos, e)) < 0 ||
        (rc = lwq_backend_tensor_alloc(be, LWQ_U8, 1, shape, &b->valid, e)) < 0 ||
        (rc = lwq_backend_upload(be, b->pos.data, pos, (size_t)n * 4, e)) < 0 ||
        (rc = lwq_backend_upload(be, b->valid.data, b->valid_host, (size_t)n, e)) < 0)
        goto out;
out:
    free(pos);
    if (rc < 0)
        lwq_batch_free(b, be);
    return rc;
}

/* ---- model ----------------------------------------------------------------------------------- */

const char *lwq_forward_supported(void)
{
    return "llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, deepseek_v2, deepseek_v3, kimi_k2, "
           "qwen3_next";
}

int lwq_rope_inv_freq(const lwq_model_config *c, float *inv, float *attn_scaling, lwq_error *e)
{
    const int64_t d = c->head_dim, half = d / 2;
    const float base = (float)c->rope_theta;
    if (!(c->rope_theta > 0.0))
        return lwq_errf(e, LWQ_EINVAL, "config: rope_theta %g must be > 0", c->rope_theta);
    /* as transformers: exponent and power in f32 */
    for (int64_t i = 0; i < half; i++)
        inv[i] = 1.0f / powf(base, (float)(2 * i) / (float)d);
    *attn_scaling = 1.0f;
    switch (c->rope_type) {
    case LWQ_ROPE_DEFAULT:
        return 0;
    case LWQ_ROPE_LINEAR:
        if (!(c->rope_factor > 0.0))
            return lwq_errf(e, LWQ_EINVAL, "config: rope_scaling.factor %g must be > 0",
                            c->rope_factor);
        for (int64_t i = 0; i < half; i++)
            inv[i] /= (float)c->rope_factor;
        return 0;
    case LWQ_ROPE_LLAMA3: {
        const float factor = (float)c->rope_factor, lo = (float)c->rope_low_freq_factor,
                    hi = (float)c->rope_high_freq_factor;
        const float old_ctx = (float)c->rope_original_max_position;
        if (!(factor > 0.0f) || !(hi > lo) || !(old_ctx > 0.0f))
            return lwq_errf(e, LWQ_EINVAL, "config: llama3 rope_scaling needs factor > 0, "
                            "high_freq_factor > low_freq_factor and original_max_position_"
                            "embeddings > 0 (got %g, %g, %g, %g)", c->rope_factor,
                            c->rope_low_freq_factor, c->rope_high_freq_factor, (double)old_ctx);
        const float low_wl = old_ctx / lo, high_wl = old_ctx / hi;
        for (int64_t i = 0; i < half; i++) {
            float f = inv[i];
            float wl = (float)(2.0 * M_PI) / f;
            float scaled = wl > low_wl ? f / factor : f;
            float smooth = (old_ctx / wl - lo) / (hi - lo);
            float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
            int medium = !(wl < high_wl) && !(wl > low_wl);
            inv[i] = medium ? smoothed : scaled;
        }
        return 0;
    }
    default:
        return lwq_errf(e, LWQ_EUNSUPPORTED, "config: rope type %d is not supported by the "
                        "forward of %s (default, linear, llama3 are)", (int)c->rope_type,
                        c->model_type);
    }
}

int lwq_model_layer_is_moe(const lwq_model *m, int layer)
{
    /* one definition shared with the layer plans (layout/config.c) */
    return lwq_config_layer_is_moe(m->cfg, layer);
}

int lwq_model_init(lwq_model *m, const lwq_model_config *c, const lwq_backend *be, lwq_dtype act,
                   lwq_error *e)
{
    memset(m, 0, sizeof *m);
    switch (c->arch) {
    case LWQ_ARCH_LLAMA:
    case LWQ_ARCH_QWEN2:
    case LWQ_ARCH_QWEN3:
    case LWQ_ARCH_QWEN3_MOE:
    case LWQ_ARCH_MIXTRAL:
    case LWQ_ARCH_DEEPSEEK_V2:
    case LWQ_ARCH_DEEPSEEK_V3:
    case LWQ_ARCH_QWEN3_NEXT:
        break;
    default:
        return lwq_errf(e, LWQ_EUNSUPPORTED, "model_type '%s' has no forward in lwq (supported: "
                        "%s)", c->model_type, lwq_forward_supported());
    }
    if (!lwq_dtype_is_act(act))
        return lwq_errf(e, LWQ_EINVAL, "forward: activation dtype %s is not F32, BF16 or F16",
                        lwq_dtype_name(act));
    if (c->arch == LWQ_ARCH_QWEN3_NEXT) {
        /* partial rotary; the linear-attention geometry (dims > 0, value heads a multiple of
         * key heads) was checked by the config parser */
        int64_t half = (int64_t)((double)c->head_dim * c->partial_rotary_factor) / 2;
        if (half < 1 || c->rope_type != LWQ_ROPE_DEFAULT || c->linear_num_key_heads <= 0 ||
            c->linear_num_value_heads % c->linear_num_key_heads || c->linear_conv_kernel_dim <= 0)
            return lwq_errf(e, LWQ_EUNSUPPORTED, "config (qwen3_next): needs default RoPE on at "
                            "least 2 dims (head_dim %" PRId64 " x partial_rotary_factor %g) and a "
                            "valid linear-attention geometry", c->head_dim,
                            c->partial_rotary_factor);
    } else if (c->partial_rotary_factor != 0.0 && c->partial_rotary_factor != 1.0)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "config (%s): partial_rotary_factor %g is not "
                        "supported by this forward (full rotary only)", c->model_type,
                        c->partial_rotary_factor);
    if (c->hidden_size <= 0 || c->num_attention_heads <= 0 || c->num_key_value_heads <= 0 ||
        c->num_attention_heads % c->num_key_value_heads || c->head_dim <= 0 ||
        (c->head_dim % 2 && !lwq_fwd_is_mla(c)) ||
        c->vocab_size <= 0 || c->num_hidden_layers <= 0 || c->head_dim > 4096 ||
        c->num_attention_heads > 4096)
        return lwq_errf(e, LWQ_EINVAL, "config (%s): bad geometry: hidden %" PRId64 ", heads %d, "
                        "kv_heads %d, head_dim %" PRId64 ", vocab %" PRId64 ", layers %d",
                        c->model_type, c->hidden_size, c->num_attention_heads,
                        c->num_key_value_heads, c->head_dim, c->vocab_size, c->num_hidden_layers);
    int moe = c->arch == LWQ_ARCH_MIXTRAL ||
              ((c->arch == LWQ_ARCH_QWEN3_MOE || c->arch == LWQ_ARCH_QWEN3_NEXT) && c->num_experts > 0) ||
              (lwq_fwd_is_mla(c) && c->num_experts > 0);
    if (moe && (c->num_experts <= 0 || c->num_experts > 4096 || c->num_experts_per_tok <= 0 ||
                c->num_experts_per_tok > c->num_experts || c->num_experts_per_tok > 64))
        return lwq_errf(e, LWQ_EINVAL, "config (%s): %d experts with %d per token is not usable",
                        c->model_type, c->num_experts, c->num_experts_per_tok);
    if (lwq_fwd_is_mla(c))
        LWQ_TRY(lwq_fwd_mla_check(c, e));
    m->cfg = c;
    m->be = be;
    m->act = act;
    /* MLA rotates only the qk_rope_head_dim part of each head */
    int64_t half = (lwq_fwd_is_mla(c) ? c->qk_rope_head_dim : c->head_dim) / 2;
    float *inv = (float *)malloc((size_t)half * sizeof(float));
    m->arena = (lwq_arena *)calloc(1, sizeof(lwq_arena));
    int rc = 0;
    if (!inv || !m->arena) {
        rc = lwq_errf(e, LWQ_ENOMEM, "forward: no memory for the model tables");
        goto out;
    }
    rc = lwq_fwd_is_mla(c) ? lwq_fwd_mla_inv_freq(c, inv, &m->attn_scaling, e)
                           : lwq_rope_inv_freq(c, inv, &m->attn_scaling, e);
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
    arena_free(m);
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
    if (c->arch == LWQ_ARCH_QWEN3_NEXT) {
        LWQ_TRY(lwq_fwd_qwen3next_layer(m, layer, w, b, h, obs, e));
        return lwq_backend_synchronize(m->be, e);
    }
    if (lwq_fwd_is_mla(c))
        LWQ_TRY(lwq_fwd_mla_attention_block(m, layer, w, b, h, obs, e));
    else
        LWQ_TRY(lwq_fwd_attention_block(m, layer, w, b, h, obs, e));

    char name[LWQ_NAME_MAX];
    lwq_tensor ln2, x, out;
    int64_t n = h->shape[0], D = c->hidden_size;
    snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", layer);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 1, D, 0, 0, &ln2, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, D, &x, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, D, &out, e));
    LWQ_TRY(lwq_backend_rmsnorm(m->be, h, &ln2, (float)c->rms_norm_eps, &x, e));
    if (lwq_model_layer_is_moe(m, layer) && lwq_fwd_is_mla(c)) {
        LWQ_TRY(lwq_fwd_deepseek_moe_block(m, layer, w, b, &x, &out, obs, e));
    } else if (lwq_model_layer_is_moe(m, layer)) {
        LWQ_TRY(lwq_fwd_moe_block(m, layer, w, b, &x, &out, obs, e));
    } else {
        snprintf(name, sizeof name, "model.layers.%d.mlp", layer);
        LWQ_TRY(lwq_fwd_swiglu_mlp(m, layer, w, name, "gate_proj", "up_proj", "down_proj",
                                   c->intermediate_size, &x, &b->valid, NULL, NULL, &out, obs, e));
    }
    LWQ_TRY(lwq_backend_add(m->be, h, &out, e));
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
    if (c->arch == LWQ_ARCH_QWEN3_NEXT)
        LWQ_TRY(lwq_fwd_rmsnorm_1p(m, h, &norm, h, e));
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
