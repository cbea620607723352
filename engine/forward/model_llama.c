/* engine/forward/model_llama.c — the GQA attention block (LWQ_MIXER_GQA) of llama / mistral
 * (plain), qwen2 (q/k/v biases), qwen3 and qwen3_moe (per-head q/k RMSNorm before RoPE, head_dim
 * independent of hidden/heads), mixtral (plain attention), glm4_moe (q/k/v biases, optional q/k norm,
 * partial rotary), minimax_m2 (full-width q/k norm, partial rotary), nemotron_h (no RoPE, names
 * layers.L.norm and layers.L.mixer.*): the family row says which.
 *
 *   x = input_layernorm(h)
 *   q, k, v = x Wq^T (+bq), x Wk^T (+bk), x Wv^T (+bv)      observed: q_proj, k_proj, v_proj
 *   [qwen3, glm4_moe use_qk_norm] q, k = q_norm(q), k_norm(k) per head
 *   [minimax_m2] q, k = q_norm(q), k_norm(k) over the whole row (all heads: one RMS)
 *   q, k = rope(q), rope(k)                                 observed: kv(k, v)
 *          [glm4_moe] the first head_dim * partial_rotary_factor dims of each head
 *   a = causal_gqa_attention(q, k, v)                       observed: o_proj
 *   h = h + a Wo^T (+bo)
 *
 * Attention is full causal attention: a model with a sliding window is refused before it gets
 * here when a sequence is longer than the window (layout/config/config.h, lwq_config_check_seq;
 * README "Sliding windows"), so for every sequence that reaches it the two are the same. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "engine/forward/forward_internal.h"

static int has_qk_norm(const lwq_model_config *c) { return lwq_config_qk_norm(c); }

/* RoPE on x (n, heads * head_dim): every dim, or with partial rotary the first `rot` of each head
 * (rotate-half over that slice, as transformers' apply_rotary_pos_emb splits q_rot / q_pass),
 * gathered into a contiguous (n, heads * rot), rotated, and put back. */
static int rope(lwq_model *m, lwq_tensor *x, int heads, const lwq_batch *b, lwq_error *e)
{
    const int64_t n = x->shape[0], hd = m->cfg->head_dim, rot = lwq_fwd_gqa_rotary_dim(m->cfg);
    if (rot == hd)
        return lwq_backend_rope(m->be, x, hd, &b->pos, &m->inv_freq, m->attn_scaling, e);
    lwq_tensor r;
    LWQ_TRY(lwq_fwd_tensor(m, x->dtype, n, heads * rot, &r, e));
    lwq_tensor part = lwq_fwd_sview(x, 0, 3, n, heads, rot, heads * hd, hd, 1);
    lwq_tensor dense = lwq_fwd_sview(&r, 0, 3, n, heads, rot, heads * rot, rot, 1);
    LWQ_TRY(lwq_backend_copy(m->be, &part, &dense, e));
    LWQ_TRY(lwq_backend_rope(m->be, &r, rot, &b->pos, &m->inv_freq, m->attn_scaling, e));
    return lwq_backend_copy(m->be, &dense, &part, e);
}

int lwq_fwd_attention_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                            lwq_tensor *h, const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = h->shape[0], D = c->hidden_size, hd = c->head_dim;
    const int H = c->num_attention_heads, KV = c->num_key_value_heads;
    /* qwen2's q/k/v biases: the config parser sets attention_bias for them; glm4_moe's
     * attention_bias covers q/k/v, not o_proj (whose bias is then taken only when present) */
    const int need_bias = c->family->bias == LWQ_BIAS_QKV || c->attention_bias;
    const float eps = (float)c->rms_norm_eps;
    char name[LWQ_NAME_MAX], mq[LWQ_NAME_MAX], mk[LWQ_NAME_MAX], mv[LWQ_NAME_MAX],
        mo[LWQ_NAME_MAX];
    /* nemotron_h (family->single): the layer's one block is mixer.*, after layers.L.norm */
    const char *at = c->family->single ? "mixer" : "self_attn";
    snprintf(mq, sizeof mq, "model.layers.%d.%s.q_proj", layer, at);
    snprintf(mk, sizeof mk, "model.layers.%d.%s.k_proj", layer, at);
    snprintf(mv, sizeof mv, "model.layers.%d.%s.v_proj", layer, at);
    snprintf(mo, sizeof mo, "model.layers.%d.%s.o_proj", layer, at);

    lwq_tensor ln1, wq, wk, wv, wo, bq, bk, bv, bo, qn, kn;
    int hbq, hbk, hbv, hbo;
    snprintf(name, sizeof name, "model.layers.%d.%s.weight", layer,
             c->family->single ? "norm" : "input_layernorm");
    LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 1, D, 0, 0, &ln1, e));
    LWQ_TRY(lwq_fwd_linear(m, w, layer, mq, H * hd, D, need_bias, &wq, &bq, &hbq, e));
    LWQ_TRY(lwq_fwd_linear(m, w, layer, mk, KV * hd, D, need_bias, &wk, &bk, &hbk, e));
    LWQ_TRY(lwq_fwd_linear(m, w, layer, mv, KV * hd, D, need_bias, &wv, &bv, &hbv, e));
    /* qwen2 has no o_proj bias; llama's attention_bias covers o_proj too: take it when present */
    LWQ_TRY(lwq_fwd_linear(m, w, layer, mo, D, H * hd, 0, &wo, &bo, &hbo, e));
    const int full_norm = c->family->qk_norm_full; /* minimax_m2: over all heads at once */
    if (has_qk_norm(c)) {
        snprintf(name, sizeof name, "model.layers.%d.self_attn.q_norm.weight", layer);
        LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 1, full_norm ? H * hd : hd, 0, 0, &qn, e));
        snprintf(name, sizeof name, "model.layers.%d.self_attn.k_norm.weight", layer);
        LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 1, full_norm ? KV * hd : hd, 0, 0, &kn, e));
    }

    const lwq_backend *be = m->be;
    lwq_tensor x, q, k, v, a, o;
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, D, &x, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, H * hd, &q, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, KV * hd, &k, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, KV * hd, &v, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, H * hd, &a, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, D, &o, e));

    LWQ_TRY(lwq_backend_rmsnorm(be, h, &ln1, eps, &x, e));
    LWQ_TRY(lwq_fwd_observe(obs, layer, mq, &x, &b->valid, e));
    LWQ_TRY(lwq_fwd_observe(obs, layer, mk, &x, &b->valid, e));
    LWQ_TRY(lwq_fwd_observe(obs, layer, mv, &x, &b->valid, e));
    /* one grouped call: the three products read the same x, which the backend packs once */
    const lwq_gemm_group qkv[3] = {{&x, &wq, hbq ? &bq : NULL, &q}, {&x, &wk, hbk ? &bk : NULL, &k},
                                   {&x, &wv, hbv ? &bv : NULL, &v}};
    LWQ_TRY(lwq_backend_gemm_grouped(be, qkv, 3, e));
    if (has_qk_norm(c) && full_norm) {
        LWQ_TRY(lwq_backend_rmsnorm(be, &q, &qn, eps, &q, e));
        LWQ_TRY(lwq_backend_rmsnorm(be, &k, &kn, eps, &k, e));
    } else if (has_qk_norm(c)) {
        /* per head: view (n, heads*hd) as (n*heads, hd) */
        int64_t sq[2] = {n * H, hd}, sk[2] = {n * KV, hd};
        lwq_tensor qv = lwq_tensor_view(q.data, q.dtype, 2, sq), kv = lwq_tensor_view(k.data,
                                                                                     k.dtype, 2, sk);
        qv.device = kv.device = q.device;
        LWQ_TRY(lwq_backend_rmsnorm(be, &qv, &qn, eps, &qv, e));
        LWQ_TRY(lwq_backend_rmsnorm(be, &kv, &kn, eps, &kv, e));
    }
    if (!c->family->nope) { /* nemotron_h's attention has no position embedding */
        LWQ_TRY(rope(m, &q, H, b, e));
        LWQ_TRY(rope(m, &k, KV, b, e));
    }
    if (obs && obs->kv)
        LWQ_TRY(obs->kv(obs->ctx, layer, &k, &v, &b->valid, e));

    lwq_attn_args aa = {&q, &k, &v, &a, &b->valid, b->batch, b->seq, H, KV, hd, 0.0f};
    aa.scale = (float)(1.0 / sqrt((double)hd));
    LWQ_TRY(lwq_backend_attention(be, &aa, e));
    LWQ_TRY(lwq_fwd_observe(obs, layer, mo, &a, &b->valid, e));
    LWQ_TRY(lwq_backend_gemm(be, &a, &wo, hbo ? &bo : NULL, &o, e));
    return lwq_backend_add(be, h, &o, e);
}
