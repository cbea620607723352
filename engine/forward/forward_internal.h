/* engine/forward/forward_internal.h — inside the forward.  Calls go one way:
 *   forward.c (the public API and the composition of a layer from the family row)
 *     -> model_llama.c, model_deepseek.c, model_qwen3next.c, model_moe.c (the blocks)
 *     -> fwd_common.c (the toolkit: arena, weights, observers, batches, RoPE, shared blocks).
 * Not public. */
#ifndef LWQ_ENGINE_FORWARD_INTERNAL_H
#define LWQ_ENGINE_FORWARD_INTERNAL_H

#include "engine/forward/forward.h"

#define LWQ_NAME_MAX 256

/* ---- the composition (forward.c) -------------------------------------------------------------
 * A decoder layer is composed from the config's family row (layout/arch/family.h):
 *   h += mixer(input_layernorm(h))        lwq_fwd_mixer_block: by the layer's mixer kind
 *   x  = post_attention_layernorm(h)      lwq_fwd_post_norm: by the family's norm kind
 *   out = mlp(x)                          dense SwiGLU, or routed experts (by router kind) plus
 *                                         the shared experts (by shared kind)
 *   h += out
 * Expert streaming (fwd_stream.c) runs the same pieces, the routed experts in groups. */

int lwq_fwd_mixer_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                        lwq_tensor *h, const lwq_observer *obs, lwq_error *e);
/* x (n, hidden) = post_attention_layernorm(h). */
int lwq_fwd_post_norm(lwq_model *m, int layer, const lwq_weights *w, const lwq_tensor *h,
                      lwq_tensor *x, lwq_error *e);
/* Whether MoE layers of this config add shared experts to the routed sum. */
int lwq_fwd_has_shared(const lwq_model_config *c);
/* sh (n, hidden) = the shared experts' term of x (lwq_fwd_has_shared). */
int lwq_fwd_shared_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                         const lwq_tensor *x, lwq_tensor *sh, const lwq_observer *obs, lwq_error *e);

/* ---- the toolkit (fwd_common.c) -------------------------------------------------------------- */

/* Scratch tensor (rows, cols) on the device from the model's arena; valid until the next
 * lwq_fwd_arena_reset (start of each layer forward). */
int lwq_fwd_tensor(lwq_model *m, lwq_dtype dt, int64_t rows, int64_t cols, lwq_tensor *t,
                   lwq_error *e);
void lwq_fwd_arena_reset(lwq_model *m);
struct lwq_arena *lwq_fwd_arena_new(void);
void lwq_fwd_arena_free(lwq_model *m);

/* Fetch `name` and check it is a float tensor of ndim 1 (d0) or 2 (d0, d1) on the device.
 * Missing: LWQ_ENOENT "layer L: tensor NAME is missing" (unless optional, then returns 1). */
int lwq_fwd_weight(lwq_model *m, const lwq_weights *w, int layer, const char *name, int ndim,
                   int64_t d0, int64_t d1, int optional, lwq_tensor *out, lwq_error *e);

/* Rows [r0, r0+nr) of a contiguous 2-D tensor, as a view. */
lwq_tensor lwq_fwd_rows(const lwq_tensor *t, int64_t r0, int64_t nr);

int lwq_fwd_observe(const lwq_observer *obs, int layer, const char *module, const lwq_tensor *x,
                    const lwq_tensor *valid, lwq_error *e);
/* The same for an input gathered from the batch's rows tok (host; NULL: the batch's rows). */
int lwq_fwd_observe_tok(const lwq_observer *obs, int layer, const char *module, const lwq_tensor *x,
                        const lwq_tensor *valid, const int32_t *tok, lwq_error *e);
/* obs->begin_batch, when set. */
int lwq_fwd_observe_batch(const lwq_observer *obs, int layer, const lwq_batch *b, lwq_error *e);

/* `module`.weight (out, in) and `module`.bias (out): the bias is required when need_bias, else
 * used when present (*has_bias). */
int lwq_fwd_linear(lwq_model *m, const lwq_weights *w, int layer, const char *module, int64_t out,
                   int64_t in, int need_bias, lwq_tensor *wt, lwq_tensor *bias, int *has_bias,
                   lwq_error *e);

/* LWQ_EUNSUPPORTED unless partial_rotary_factor is 0 (unset) or 1. */
int lwq_fwd_check_full_rotary(const lwq_model_config *c, lwq_error *e);
/* The dims a GQA head rotates: head_dim, or int(head_dim * partial_rotary_factor) where the row
 * has partial rotary (family->rope_partial); LWQ_EUNSUPPORTED unless even and >= 2. */
int64_t lwq_fwd_gqa_rotary_dim(const lwq_model_config *c);
int lwq_fwd_check_gqa_rotary(const lwq_model_config *c, lwq_error *e);

/* A strided view of `base` starting `off` elements in (ndim <= 3 dims and strides). */
lwq_tensor lwq_fwd_sview(const lwq_tensor *base, int64_t off, int ndim, int64_t d0, int64_t d1,
                         int64_t d2, int64_t s0, int64_t s1, int64_t s2);

/* out = down(silu(gate(x)) * up(x)) with the linears named `prefix`.{gate,up,down}.weight.
 * g/u are (rows, inter) scratch (may be NULL: taken from the arena).  Observes the inputs when
 * obs is non-NULL. */
int lwq_fwd_swiglu_mlp(lwq_model *m, int layer, const lwq_weights *w, const char *prefix,
                       const char *gate, const char *up, const char *down, int64_t inter,
                       const lwq_tensor *x, const lwq_tensor *valid, lwq_tensor *g, lwq_tensor *u,
                       lwq_tensor *out, const lwq_observer *obs, lwq_error *e);
/* The same on rows gathered from the batch's rows tok (host; observers get tok). */
int lwq_fwd_swiglu_mlp_tok(lwq_model *m, int layer, const lwq_weights *w, const char *prefix,
                           const char *gate, const char *up, const char *down, int64_t inter,
                           const lwq_tensor *x, const int32_t *tok, lwq_tensor *g, lwq_tensor *u,
                           lwq_tensor *out, const lwq_observer *obs, lwq_error *e);

/* out = down(relu(up(x))^2) with `prefix`.{up,down}_proj (nemotron_h's MLP, shared expert and
 * routed experts): x (rows, in), out (rows, out) give the widths; u: (rows, inter) scratch or NULL.
 * Observes up's and down's inputs (valid mask or batch rows tok). */
int lwq_fwd_relu2_mlp(lwq_model *m, int layer, const lwq_weights *w, const char *prefix, int64_t inter,
                      const lwq_tensor *x, const lwq_tensor *valid, const int32_t *tok, lwq_tensor *u,
                      lwq_tensor *out, const lwq_observer *obs, lwq_error *e);

/* The routed experts' tensor prefix of `layer` (fwd_common.c) ("model.layers.L.mlp" or ".block_sparse_moe"),
 * whether they carry Mixtral's w1/w3/w2 names, and their width. */
void lwq_fwd_experts_names(const lwq_model_config *c, int layer, char *prefix, size_t cap,
                           int *mixtral_names, int64_t *inter);

/* A set of routed experts: `prefix`.experts.E.{gate,up,down}_proj ({w1,w3,w2} with
 * mixtral_names), inter wide, for E in [e0, e0 + count). */
typedef struct lwq_fwd_experts {
    const char *prefix;
    int mixtral_names;
    int64_t inter;
    int e0, count;
    int relu2;            /* non-gated ReLU^2 experts: `prefix`.experts.E.{up,down}_proj (nemotron_h) */
} lwq_fwd_experts;

/* The experts' rows gathered on the device: expert e0 + j runs on rows [off[j], off[j + 1]) of xe
 * (expert-major) and writes rows y0 + off[j] .. of y; g, u: scratch, inter wide, of at least the
 * largest count's rows: the experts run in consecutive ranges whose rows fit it, each range as
 * grouped products (lwq_backend_gemm_grouped); xe, g, u are not read when off[count] is 0.
 * slot, ws: moe_combine's operands. */
typedef struct lwq_fwd_routed {
    const int64_t *off;
    const lwq_tensor *xe;
    lwq_tensor *y, *g, *u;
    int64_t y0;
    const lwq_tensor *slot, *ws;
    const int32_t *tok;   /* (off[count]) host: the batch row of each gathered row */
    lwq_tensor *comb;     /* NULL, or the combine's rows when they are wider than y (an F32 sum
                             carried over expert groups, fwd_stream.c): y's off[count] rows are
                             copied (widened, exact) into comb_y, comb's rows for them, and the
                             combine reads comb */
    lwq_tensor *comb_y;
} lwq_fwd_routed;

/* Each expert of ex on its rows (in expert order), then out = moe_combine(y, slot, ws).  The
 * routed run is observed unless obs->all_experts; then (with linear_input observers and real
 * tokens) every expert also runs on all real tokens of x with obs on, its output dropped, so
 * statistics cover all tokens and out is exactly the routed one.  vrows: host scratch of x's
 * row count. */
int lwq_fwd_moe_run(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                    const lwq_tensor *x, const lwq_fwd_experts *ex, const lwq_fwd_routed *r,
                    lwq_tensor *out, int32_t *vrows, const lwq_observer *obs, lwq_error *e);

/* ---- the blocks ----------------------------------------------------------------------------- */

/* h += self_attn(input_layernorm(h)): GQA attention (model_llama.c). */
int lwq_fwd_attention_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                            lwq_tensor *h, const lwq_observer *obs, lwq_error *e);

/* out (n, hidden) = routed experts of x (n, hidden): softmax top-k router (model_moe.c). */
int lwq_fwd_moe_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                      const lwq_tensor *x, lwq_tensor *out, const lwq_observer *obs, lwq_error *e);

/* The expert half of a MoE block, given the routing on the host: idx/wts (n, K) (rows of padding
 * tokens are not read).  Experts are `prefix`.experts.E.{gate,up,down}_proj ({w1,w3,w2} with
 * mixtral_names; non-gated {up,down}_proj for nemotron_h) of width I, reading x's width (hidden,
 * or nemotron_h's latent); out (n, x's width) receives the weighted combine in out's dtype (the
 * act dtype; F32 accumulates in f32). */
int lwq_fwd_moe_experts(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                        const lwq_tensor *x, const char *prefix, int mixtral_names, int64_t I,
                        const int32_t *idx_host, const float *wts_host, lwq_tensor *out,
                        const lwq_observer *obs, lwq_error *e);

/* ---- DeepSeek (model_deepseek.c) ---- */

/* Geometry checks of an MLA config; its rotary table (qk_rope_head_dim / 2 wide,
 * yarn included). */
int lwq_fwd_mla_check(const lwq_model_config *c, lwq_error *e);
/* Groups, topk_group and topk_method of a DeepSeek-routed config (V2 / V3 router, MLA or not). */
int lwq_fwd_deepseek_routing_check(const lwq_model_config *c, lwq_error *e);
int lwq_fwd_mla_inv_freq(const lwq_model_config *c, float *inv, float *attn_scaling, lwq_error *e);
/* h += mla_attention(input_layernorm(h)). */
int lwq_fwd_mla_attention_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                                lwq_tensor *h, const lwq_observer *obs, lwq_error *e);
/* out (n, hidden) = routed experts (V2 softmax / V3 sigmoid group routing). */
int lwq_fwd_deepseek_routed(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                            const lwq_tensor *x, lwq_tensor *out, const lwq_observer *obs,
                            lwq_error *e);

/* The DeepSeek router alone: top-k experts and weights (n, K) on the host for x's real tokens
 * (observes the gate input).  Expert streaming runs it with the dense part (engine/forward/fwd_stream.h). */
int lwq_fwd_deepseek_route(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                           const lwq_tensor *x, int32_t *idx, float *wts, const lwq_observer *obs,
                           lwq_error *e);
/* sh (n, hidden) = the shared experts of x (n_shared_experts x moe_intermediate_size wide). */
int lwq_fwd_deepseek_shared(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                            const lwq_tensor *x, lwq_tensor *sh, const lwq_observer *obs, lwq_error *e);

/* ---- Nemotron-H (model_nemotron.c) ---- */

/* The Mamba2 geometry and the MoE router of a nemotron_h config. */
int lwq_fwd_nemotron_check(const lwq_model_config *c, lwq_error *e);
/* h += block(norm(h)): layer's one block (Mamba2, NoPE attention, ReLU^2 MLP or MoE). */
int lwq_fwd_nemotron_layer(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b, lwq_tensor *h,
                           const lwq_observer *obs, lwq_error *e);

/* ---- Qwen3-Next (model_qwen3next.c) ---- */

/* Host f32 copies of device tensors (model_qwen3next.c): dst = t's numel elements as f32; t's
 * elements = src rounded to t's dtype; *out = a malloc'd f32 copy of weight `name` (ndim 1: d0,
 * 2: d0 x d1), checked as lwq_fwd_weight checks it. */
int lwq_fwd_host_fetch(lwq_model *m, const lwq_tensor *t, int64_t numel, float *dst, lwq_error *e);
int lwq_fwd_host_store(lwq_model *m, const float *src, lwq_tensor *t, lwq_error *e);
int lwq_fwd_host_weight(lwq_model *m, const lwq_weights *w, int layer, const char *name, int ndim,
                        int64_t d0, int64_t d1, float **out, lwq_error *e);

/* The delta-rule core shared by gated DeltaNet (Qwen3-Next / 3.5) and Kimi delta attention, on the
 * host in f32, per sequence from a zero state (model_qwen3next.c says how it rounds):
 *   conv = silu(causal depthwise conv(mixed, wc)) per sequence (padding rows: zero history)
 *   per (sequence, value head): q, k = l2norm (KDA: x / sqrt(.), GDN: x * rsqrt(.)), q *= dk^-0.5;
 *     S = diag(decay) S;  S += k (x) ((v - S^T k) * beta);  o = S^T q
 *     decay: exp(-exp(A_log) softplus(a + dt_bias)) per head (GDN), or exp(gk) per key channel
 *     (KDA: gk set); beta = sigmoid(bb)
 *   y = rmsnorm(o) * wn * silu(z) (the gated norm over dv; KDA: * sigmoid(z), all in f32)
 * Padding rows get y = 0. */
typedef struct lwq_fwd_delta_job {
    const lwq_batch *b;
    int64_t seq, C, kd, vd, dk, dv;
    int nv, r, K;             /* value heads, value heads per key head, conv kernel */
    lwq_dtype dt;
    float eps;
    const float *mixed;       /* (n, C) conv input [q (kd) | k (kd) | v (vd)] */
    float *conv;              /* (n, C) silu(conv) */
    const float *wc;          /* (C, K) */
    const float *bb, *aa;     /* (n, nv) beta logits; GDN's a (unused with gk) */
    const float *alog, *dtb;  /* (nv) each, GDN only */
    const float *gk;          /* (n, nv * dk) KDA's per-channel log decay, or NULL */
    const float *wn;          /* (dv) */
    const float *z;           /* (n, vd) the output gate */
    float *y;                 /* (n, vd) gated-norm output */
    float *scratch;           /* per thread (lwq_fwd_delta_rule allocates it) */
} lwq_fwd_delta_job;
/* Runs the conv and the recurrence of j over j->b's sequences, threaded (the result does not
 * depend on the thread count). */
int lwq_fwd_delta_rule(lwq_fwd_delta_job *j, lwq_error *e);

/* ---- Kimi-Linear (model_kimi.c) ---- */

/* KDA geometry (heads, head_dim, kernel) of a kimi_linear config. */
int lwq_fwd_kda_check(const lwq_model_config *c, lwq_error *e);
/* h += kda(rmsnorm(h, input_layernorm)) on a "linear_attention" layer of kimi_linear. */
int lwq_fwd_kda_mixer_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                            lwq_tensor *h, const lwq_observer *obs, lwq_error *e);

/* Partial default RoPE and a valid linear-attention geometry. */
int lwq_fwd_qwen3next_check(const lwq_model_config *c, lwq_error *e);
/* h += mixer(rms1p(h, input_layernorm)): gated full attention or gated DeltaNet (the layer's
 * mixer kind). */
int lwq_fwd_qwen3next_mixer_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                                  lwq_tensor *h, const lwq_observer *obs, lwq_error *e);
/* x (n, hidden) = rms1p(h, model.layers.L.`which`). */
int lwq_fwd_norm_1p_layer(lwq_model *m, int layer, const lwq_weights *w, const char *which,
                          const lwq_tensor *h, lwq_tensor *x, lwq_error *e);
/* sg (n, hidden) = sigmoid(shared_expert_gate(x)) * shared_expert(x), rounded to the act dtype:
 * the term the MoE block adds to its routed sum (shared_expert_intermediate_size > 0). */
int lwq_fwd_qwen3next_shared(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                             const lwq_tensor *x, lwq_tensor *sg, const lwq_observer *obs, lwq_error *e);

/* Qwen3-Next's RMSNorm (zero-centred weight): y = x * rsqrt(mean(x^2) + eps) * (1 + w) in f32,
 * rounded once to y's dtype.  x, y: (rows, d), y may alias x; w: (d). */
int lwq_fwd_rmsnorm_1p(lwq_model *m, const lwq_tensor *x, const lwq_tensor *w, lwq_tensor *y,
                       lwq_error *e);

#endif
