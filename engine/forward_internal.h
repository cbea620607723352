/* engine/forward_internal.h — pieces shared by forward.c and the per-architecture files
 * (model_llama.c: attention block and dense MLP; model_moe.c: routed experts).  Not public. */
#ifndef LWQ_ENGINE_FORWARD_INTERNAL_H
#define LWQ_ENGINE_FORWARD_INTERNAL_H

#include "engine/forward.h"

#define LWQ_NAME_MAX 256

/* Scratch tensor (rows, cols) on the device from the model's arena; valid until the next
 * lwq_fwd_arena_reset (start of each layer forward). */
int lwq_fwd_tensor(lwq_model *m, lwq_dtype dt, int64_t rows, int64_t cols, lwq_tensor *t,
                   lwq_error *e);
void lwq_fwd_arena_reset(lwq_model *m);

/* Fetch `name` and check it is a float tensor of ndim 1 (d0) or 2 (d0, d1) on the device.
 * Missing: LWQ_ENOENT "layer L: tensor NAME is missing" (unless optional, then returns 1). */
int lwq_fwd_weight(lwq_model *m, const lwq_weights *w, int layer, const char *name, int ndim,
                   int64_t d0, int64_t d1, int optional, lwq_tensor *out, lwq_error *e);

/* Rows [r0, r0+nr) of a contiguous 2-D tensor, as a view. */
lwq_tensor lwq_fwd_rows(const lwq_tensor *t, int64_t r0, int64_t nr);

int lwq_fwd_observe(const lwq_observer *obs, int layer, const char *module, const lwq_tensor *x,
                    const lwq_tensor *valid, lwq_error *e);

/* h += self_attn(input_layernorm(h)). */
int lwq_fwd_attention_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                            lwq_tensor *h, const lwq_observer *obs, lwq_error *e);

/* out = down(silu(gate(x)) * up(x)) with the linears named `prefix`.{gate,up,down}.weight.
 * g/u are (rows, inter) scratch (may be NULL: taken from the arena).  Observes the inputs when
 * obs is non-NULL. */
int lwq_fwd_swiglu_mlp(lwq_model *m, int layer, const lwq_weights *w, const char *prefix,
                       const char *gate, const char *up, const char *down, int64_t inter,
                       const lwq_tensor *x, const lwq_tensor *valid, lwq_tensor *g, lwq_tensor *u,
                       lwq_tensor *out, const lwq_observer *obs, lwq_error *e);

/* out (n, hidden) = routed experts of x (n, hidden). */
int lwq_fwd_moe_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                      const lwq_tensor *x, lwq_tensor *out, const lwq_observer *obs, lwq_error *e);

/* The expert half of a MoE block, given the routing on the host: idx/wts (n, K) (rows of padding
 * tokens are not read).  Experts are `prefix`.experts.E.{gate,up,down}_proj ({w1,w3,w2} with
 * mixtral_names) of width I; out (n, hidden) receives the weighted combine in out's dtype (the
 * act dtype; F32 would accumulate in f32). */
int lwq_fwd_moe_experts(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                        const lwq_tensor *x, const char *prefix, int mixtral_names, int64_t I,
                        const int32_t *idx_host, const float *wts_host, lwq_tensor *out,
                        const lwq_observer *obs, lwq_error *e);

/* ---- DeepSeek (model_deepseek.c) ---- */

/* Whether the config uses multi-head latent attention (deepseek_v2, deepseek_v3, kimi_k2). */
int lwq_fwd_is_mla(const lwq_model_config *c);
/* Geometry and routing checks of an MLA config (called by lwq_model_init). */
int lwq_fwd_mla_check(const lwq_model_config *c, lwq_error *e);
/* RoPE table of the rope part (qk_rope_head_dim/2 entries) with default or yarn scaling;
 * *attn_scaling is the yarn cos/sin factor. */
int lwq_fwd_mla_inv_freq(const lwq_model_config *c, float *inv_freq, float *attn_scaling,
                         lwq_error *e);
/* h += mla_attention(input_layernorm(h)). */
int lwq_fwd_mla_attention_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                                lwq_tensor *h, const lwq_observer *obs, lwq_error *e);
/* out (n, hidden) = routed experts (V2 softmax / V3 sigmoid group routing) + shared experts. */
int lwq_fwd_deepseek_moe_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                               const lwq_tensor *x, lwq_tensor *out, const lwq_observer *obs,
                               lwq_error *e);

/* The DeepSeek router alone: top-k experts and weights (n, K) on the host for x's real tokens
 * (observes the gate input).  Expert streaming runs it with the dense part (engine/fwd_stream.h). */
int lwq_fwd_deepseek_route(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                           const lwq_tensor *x, int32_t *idx, float *wts, const lwq_observer *obs,
                           lwq_error *e);
/* sh (n, hidden) = the shared experts of x (n_shared_experts x moe_intermediate_size wide). */
int lwq_fwd_deepseek_shared(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                            const lwq_tensor *x, lwq_tensor *sh, const lwq_observer *obs, lwq_error *e);

/* ---- Qwen3-Next (model_qwen3next.c) ---- */

/* A qwen3_next layer up to its MLP: h += attention (full or Gated DeltaNet) of the input norm;
 * x (n, hidden) = post_attention_layernorm(h).  Expert streaming runs it with the dense part. */
int lwq_fwd_qwen3next_attn(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                           lwq_tensor *h, lwq_tensor *x, const lwq_observer *obs, lwq_error *e);
/* sg (n, hidden) = sigmoid(shared_expert_gate(x)) * shared_expert(x), rounded to the act dtype:
 * the term the MoE block adds to its routed sum (shared_expert_intermediate_size > 0). */
int lwq_fwd_qwen3next_shared(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                             const lwq_tensor *x, lwq_tensor *sg, const lwq_observer *obs, lwq_error *e);
/* One whole qwen3_next decoder layer in place on h (model_qwen3next.c). */
int lwq_fwd_qwen3next_layer(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                            lwq_tensor *h, const lwq_observer *obs, lwq_error *e);

/* Qwen3-Next's RMSNorm (zero-centred weight): y = x * rsqrt(mean(x^2) + eps) * (1 + w) in f32,
 * rounded once to y's dtype.  x, y: (rows, d), y may alias x; w: (d). */
int lwq_fwd_rmsnorm_1p(lwq_model *m, const lwq_tensor *x, const lwq_tensor *w, lwq_tensor *y,
                       lwq_error *e);

#define LWQ_TRY(x)                                                                                 \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)

#endif
