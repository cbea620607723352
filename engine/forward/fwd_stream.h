/* engine/forward/fwd_stream.h — the MoE layer forward in pieces, for expert streaming (engine/source/units.h).
 *
 * lwq_model_layer_forward runs a MoE layer at once: attention, post-attention norm, router,
 * every routed expert, combine, residual add.  Streaming splits it:
 *   1. lwq_fwd_stream_dense (per batch, with the dense unit's weights): h += attention(h);
 *      x = post_attention_layernorm(h); the router's top-k for every real token -> idx/wts on the
 *      host (expert token counts observed here); shared experts -> `shared`;
 *   2. lwq_fwd_stream_experts (per batch and expert group, with the group's weights): the group's
 *      experts run on the rows routed to them and their weighted outputs continue the per-token
 *      sum in `partial`;
 *   3. after the last group: partial += shared, h += partial (lwq_backend_add).
 * The per-token sum runs over a token's experts in ascending expert order, each step rounded to
 * the act dtype, exactly as the one-shot combine does (kernels/backend.h moe_combine); groups are
 * ascending expert ranges and the running sum is carried from group to group as an extra combine
 * row of weight 1 (exact: 1 * p rounds to p, 0 + p = p), so the bytes of h are the same for every
 * grouping and the same as lwq_model_layer_forward's.  Observations are the same too: per-linear
 * maxima and batch-ordered Hessian sums do not depend on which group ran when.
 *
 * nemotron_h: its MoE block is the whole layer.  The dense part is the norm, the DeepSeek-V3
 * routing, the ReLU^2 shared expert and fc1_latent_proj (the experts' input x is the latent); the
 * running sum is float32 (the one-shot block sums in float32 and rounds once: the act-dtype expert
 * outputs are widened exactly, and the carried row of weight 1 keeps the sum's order); after the
 * last group, lwq_fwd_stream_finish rounds it, runs fc2_latent_proj (its own unit, read last),
 * adds the shared expert and the residual.
 * Supported: qwen3_moe, mixtral, qwen3_next (attention or Gated DeltaNet, and the sigmoid-gated
 * shared expert, in the dense part), deepseek_v2, deepseek_v3 / kimi_k2 (MLA attention, DeepSeek
 * routing and the shared experts in the dense part), kimi_linear, nemotron_h (plain and latent);
 * lwq_fwd_stream_supported says why not otherwise.
 * Tensors are on the backend device; idx/wts are host (n, K). */
#ifndef LWQ_ENGINE_FWD_STREAM_H
#define LWQ_ENGINE_FWD_STREAM_H

#include "engine/forward/forward.h"

/* 0 when layer `layer` of this model can be computed in expert groups, else LWQ_EUNSUPPORTED
 * naming the reason. */
int lwq_fwd_stream_supported(const lwq_model *m, int layer, lwq_error *e);
/* Whether the dense part also yields the shared experts' output (DeepSeek / Kimi with
 * n_shared_experts > 0; qwen3_next's gated shared expert): the caller adds it to the expert sum
 * before the residual, as the one-shot block does (out = routed; out += shared; h += out). */
int lwq_fwd_stream_has_shared(const lwq_model *m);
/* The experts' input width: hidden, or nemotron_h's moe_latent_size (x is fc1_latent_proj's output). */
int64_t lwq_fwd_stream_width(const lwq_model *m);
/* The running sum's dtype: the act dtype, or F32 for nemotron_h (its one-shot block sums the
 * experts in float32 and rounds once). */
lwq_dtype lwq_fwd_stream_sum_dtype(const lwq_model *m);
/* Whether the layer has a tail unit (engine/source/units.h): nemotron_h's fc2_latent_proj, whose
 * weights lwq_fwd_stream_finish reads. */
int lwq_fwd_stream_has_tail(const lwq_model *m);
/* After the last group, per batch: h += block output from the finished sum `partial` and `shared`
 * (NULL without shared experts): partial += shared, h += partial; nemotron_h: out = the sum
 * rounded to the act dtype, fc2_latent_proj of it with a latent (w: the tail unit's weights, else
 * unused), out += shared, h += out. */
int lwq_fwd_stream_finish(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b, lwq_tensor *h,
                          lwq_tensor *partial, const lwq_tensor *shared, const lwq_observer *obs, lwq_error *e);
/* shared: (n, hidden) for the shared experts' output when lwq_fwd_stream_has_shared, else NULL. */
int lwq_fwd_stream_dense(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                         lwq_tensor *h, lwq_tensor *x, int32_t *idx, float *wts, lwq_tensor *shared,
                         const lwq_observer *obs, lwq_error *e);
/* Experts [e0, e1) on batch b.  x: (n, lwq_fwd_stream_width); partial: (n, the same width) of
 * lwq_fwd_stream_sum_dtype.  first: `partial` holds nothing yet (the sum starts at 0). */
int lwq_fwd_stream_experts(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                           const lwq_tensor *x, const int32_t *idx, const float *wts, int e0,
                           int e1, int first, lwq_tensor *partial, const lwq_observer *obs,
                           lwq_error *e);

#endif
