/* engine/forward/model_nemotron.c — the decoder layer of nemotron_h (transformers 5.14.1's
 * NemotronHForCausalLM, torch reference path NemotronHMamba2Mixer.torch_forward: the one without
 * the mamba-ssm / causal-conv1d CUDA kernels; docs/FAMILIES.md).  Each layer is one block:
 *
 *   x = rmsnorm(h, layers.L.norm)                        (float32, rounded, times the weight)
 *   Mamba2 ("mamba" / "linear_attention"):
 *     x's padded rows := 0                                  (as transformers' attention_mask does)
 *     [z (I), xBC (I + 2 G N), dt (H)] = x Win^T          observed: in_proj
 *     xBC = silu(depthwise causal conv1d(xBC) + bias)     observed: conv1d (its input); per
 *                                                         sequence, zero history; padded rows := 0
 *     [xs (H x P), B (G x N), C (G x N)] = xBC; head h reads group h / (H / G)
 *     dt = max(softplus(dt + dt_bias), time_step_min)     (act dtype, as transformers)
 *     A = -exp(A_log);  per (sequence, head), state S (P x N) from 0:
 *       S = exp(A dt_t) S + (xs_t dt_t) (x) B_t;   y_t = S C_t + D xs_t      (float32)
 *     g = y * silu(z); per group of I / G channels: g * rsqrt(mean(g^2) + eps) * norm.weight
 *                                                         (float32, rounded once) observed: out_proj
 *     out = g Wout^T
 *   attention ("attention"): GQA without RoPE (model_llama.c, names mixer.*)
 *   MLP ("mlp"): out = down(relu(up(x))^2)                observed: up_proj, down_proj
 *   MoE ("moe"): DeepSeek-V3 routing on x (model_deepseek.c, -inf group fill); the routed experts
 *     non-gated ReLU^2 on fc1_latent_proj(x) (x without a latent), their weighted sum in float32
 *     rounded once, fc2_latent_proj of it; + shared_experts(x) (ReLU^2)   observed: every linear
 *   h += out
 *
 * Numerics of the scan: SEQUENTIAL over tokens, float32 state, one product and one sum rounded at
 * a time (no FMA contraction: ISO C11).  transformers' torch path computes the same recurrence in
 * chunks of chunk_size (the SSD form: exp of segment sums, intra-chunk "attention" and inter-chunk
 * state passing), algebraically identical, in a different float32 order: the two agree to
 * float32 rounding (test_forward_peer_dumps: 1e-5 on transformers' layer outputs).  Each
 * (sequence, head) is one task, so the bytes do not depend on the thread count; each sequence's
 * state starts at zero, so they do not depend on the batch either.
 *
 * Padding: transformers zeros a padded row's input before in_proj (no in_proj bias: lwq refuses
 * use_bias) and its conv output, so a left-padded sequence sees zero history and a zero state,
 * exactly as unpadded; padded rows' outputs are 0.
 *
 * Where it runs: GEMMs on the backend; the conv, scan and gated norm are the backend's mamba2 op
 * (kernels/backend.h lwq_backend_mamba2): on the CPU the float32 reference (kernels/mamba2.h,
 * kernels/cpu/mamba2_cpu.c), on CUDA kernels in the same order of arithmetic
 * (kernels/cuda/mamba2_cuda.cu), tested against it (tests/kernels/cuda/test_mamba2_cuda.c). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/forward_internal.h"

/* ---- Mamba2 ------------------------------------------------------------------------------------- */

/* conv1d.weight [C, 1, K] (3-D: lwq_fwd_weight takes 1-D / 2-D). */
static int conv_weight(lwq_model *m, const lwq_weights *w, int layer, const char *nm, int64_t C, int64_t K,
                       lwq_tensor *t, lwq_error *e)
{
    lwq_error sub = {0};
    memset(t, 0, sizeof *t);
    int rc = w->get(w->ctx, nm, t, &sub);
    if (rc < 0)
        return lwq_errf(e, rc, "layer %d: tensor %s %s%s", layer, nm, rc == LWQ_ENOENT ? "is missing" : "",
                        sub.msg[0] ? sub.msg : "");
    if (!lwq_dtype_is_act(t->dtype) || t->ndim != 3 || t->shape[0] != C || t->shape[1] != 1 || t->shape[2] != K ||
        !lwq_tensor_is_contiguous(t) || t->device != m->be->ops->device)
        return lwq_errf(e, LWQ_EFORMAT, "layer %d: tensor %s must be a contiguous float [%" PRId64 ", 1, %" PRId64
                        "] on the %s device (got %s, %d dims [%" PRId64 ", %" PRId64 ", %" PRId64 "])", layer, nm, C,
                        K, m->be->ops->name, lwq_dtype_name(t->dtype), t->ndim, t->shape[0],
                        t->ndim > 1 ? t->shape[1] : 0, t->ndim > 2 ? t->shape[2] : 0);
    return 0;
}

static int mamba2(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b, const lwq_tensor *x,
                  lwq_tensor *out, const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = x->shape[0], Dm = c->hidden_size, H = c->mamba_num_heads, P = c->mamba_head_dim,
                  N = c->ssm_state_size, G = c->mamba_n_groups, K = c->mamba_conv_kernel;
    const int64_t I = H * P, C = I + 2 * G * N, W = I + C + H;
    char min[LWQ_NAME_MAX], mconv[LWQ_NAME_MAX], mout[LWQ_NAME_MAX], nm[LWQ_NAME_MAX];
    snprintf(min, sizeof min, "model.layers.%d.mixer.in_proj", layer);
    snprintf(mconv, sizeof mconv, "model.layers.%d.mixer.conv1d", layer);
    snprintf(mout, sizeof mout, "model.layers.%d.mixer.out_proj", layer);
    lwq_tensor win, wout, wconv, bconv, alog, dtb, dd, wn, proj, xbc_t, core;
    snprintf(nm, sizeof nm, "%s.weight", min);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 2, W, Dm, 0, &win, e));
    snprintf(nm, sizeof nm, "%s.weight", mout);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 2, Dm, I, 0, &wout, e));
    snprintf(nm, sizeof nm, "%s.weight", mconv);
    LWQ_TRY(conv_weight(m, w, layer, nm, C, K, &wconv, e));
    if (c->mamba_conv_bias) {
        snprintf(nm, sizeof nm, "%s.bias", mconv);
        LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 1, C, 0, 0, &bconv, e));
    }
    snprintf(nm, sizeof nm, "model.layers.%d.mixer.A_log", layer);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 1, H, 0, 0, &alog, e));
    snprintf(nm, sizeof nm, "model.layers.%d.mixer.dt_bias", layer);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 1, H, 0, 0, &dtb, e));
    snprintf(nm, sizeof nm, "model.layers.%d.mixer.D", layer);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 1, H, 0, 0, &dd, e));
    snprintf(nm, sizeof nm, "model.layers.%d.mixer.norm.weight", layer);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 1, I, 0, 0, &wn, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, W, &proj, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, C, &xbc_t, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, I, &core, e));
    LWQ_TRY(lwq_fwd_observe(obs, layer, min, x, &b->valid, e));
    LWQ_TRY(lwq_backend_gemm(m->be, x, &win, NULL, &proj, e));
    /* a padded row's projection is that of a zero input (no in_proj bias): the op never reads it */
    lwq_mamba2_args a = {.proj = &proj, .conv_w = &wconv, .conv_b = c->mamba_conv_bias ? &bconv : NULL,
                         .a_log = &alog, .dt_bias = &dtb, .d = &dd, .norm_w = &wn, .valid = &b->valid,
                         .xbc_in = &xbc_t, .out = &core, .batch = b->batch, .seq = b->seq, .heads = H,
                         .head_dim = P, .state = N, .groups = G, .kernel = K, .eps = (float)c->rms_norm_eps,
                         .dt_min = (float)c->time_step_min};
    lwq_error sub = {0};
    int rc = lwq_backend_mamba2(m->be, &a, &sub);
    if (rc < 0)
        return lwq_errf(e, rc, "layer %d: %s", layer, sub.msg);
    /* the conv1d's input, for a recipe that quantizes it (Model Optimizer's presets do not) */
    LWQ_TRY(lwq_fwd_observe(obs, layer, mconv, &xbc_t, &b->valid, e));
    LWQ_TRY(lwq_fwd_observe(obs, layer, mout, &core, &b->valid, e));
    return lwq_backend_gemm(m->be, &core, &wout, NULL, out, e);
}

/* ---- MoE ---------------------------------------------------------------------------------------- */

static int moe(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b, const lwq_tensor *x,
               lwq_tensor *out, const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = x->shape[0], D = c->hidden_size, L = c->moe_latent_size > 0 ? c->moe_latent_size : D;
    const int K = c->num_experts_per_tok;
    char prefix[128], name[LWQ_NAME_MAX];
    int mixtral;
    int64_t inter;
    lwq_fwd_experts_names(c, layer, prefix, sizeof prefix, &mixtral, &inter);
    size_t nk = (size_t)(n * K) + 1;
    int32_t *idx = malloc(nk * sizeof(int32_t));
    float *wts = malloc(nk * sizeof(float));
    int rc = 0;
    if (!idx || !wts) {
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: no memory for routing %" PRId64 " tokens", layer, n);
        goto out;
    }
    if ((rc = lwq_fwd_deepseek_route(m, layer, w, b, x, idx, wts, obs, e)) < 0)
        goto out;
    lwq_tensor xl = *x, wl, bl, sum32, sum, sh;
    int hb;
    if (c->moe_latent_size > 0) {
        snprintf(name, sizeof name, "%s.fc1_latent_proj", prefix);
        if ((rc = lwq_fwd_linear(m, w, layer, name, L, D, 0, &wl, &bl, &hb, e)) < 0 ||
            (rc = lwq_fwd_tensor(m, m->act, n, L, &xl, e)) < 0 ||
            (rc = lwq_fwd_observe(obs, layer, name, x, &b->valid, e)) < 0 ||
            (rc = lwq_backend_gemm(m->be, x, &wl, hb ? &bl : NULL, &xl, e)) < 0)
            goto out;
    }
    /* grouped_mm_experts_forward: the weighted expert outputs summed in float32, rounded once */
    if ((rc = lwq_fwd_tensor(m, LWQ_F32, n, L, &sum32, e)) < 0 || (rc = lwq_fwd_tensor(m, m->act, n, L, &sum, e)) < 0 ||
        (rc = lwq_fwd_moe_experts(m, layer, w, b, &xl, prefix, 0, inter, idx, wts, &sum32, obs, e)) < 0 ||
        (rc = lwq_backend_copy(m->be, &sum32, &sum, e)) < 0)
        goto out;
    if (c->moe_latent_size > 0) {
        snprintf(name, sizeof name, "%s.fc2_latent_proj", prefix);
        if ((rc = lwq_fwd_linear(m, w, layer, name, D, L, 0, &wl, &bl, &hb, e)) < 0 ||
            (rc = lwq_fwd_observe(obs, layer, name, &sum, &b->valid, e)) < 0 ||
            (rc = lwq_backend_gemm(m->be, &sum, &wl, hb ? &bl : NULL, out, e)) < 0)
            goto out;
    } else if ((rc = lwq_backend_copy(m->be, &sum, out, e)) < 0) {
        goto out;
    }
    snprintf(name, sizeof name, "%s.shared_experts", prefix);
    if ((rc = lwq_fwd_tensor(m, m->act, n, D, &sh, e)) < 0 ||
        (rc = lwq_fwd_relu2_mlp(m, layer, w, name, c->shared_expert_intermediate_size, x, &b->valid, NULL, NULL, &sh,
                                obs, e)) < 0)
        goto out;
    rc = lwq_backend_add(m->be, out, &sh, e);
out:
    free(idx);
    free(wts);
    return rc < 0 ? rc : 0;
}

/* ---- the layer ---------------------------------------------------------------------------------- */

int lwq_fwd_nemotron_layer(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b, lwq_tensor *h,
                           const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = h->shape[0], D = c->hidden_size;
    const lwq_mixer_kind k = lwq_config_layer_mixer(c, layer);
    if (!lwq_config_layer_is_moe(c, layer) && k == LWQ_MIXER_GQA)
        return lwq_fwd_attention_block(m, layer, w, b, h, obs, e); /* h += attn(norm(h)), no RoPE */
    char name[LWQ_NAME_MAX];
    lwq_tensor ln, x, out;
    snprintf(name, sizeof name, "model.layers.%d.norm.weight", layer);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 1, D, 0, 0, &ln, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, D, &x, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, D, &out, e));
    LWQ_TRY(lwq_backend_rmsnorm(m->be, h, &ln, (float)c->rms_norm_eps, &x, e));
    if (lwq_config_layer_is_moe(c, layer)) {
        LWQ_TRY(moe(m, layer, w, b, &x, &out, obs, e));
    } else if (k == LWQ_MIXER_MAMBA2) {
        LWQ_TRY(mamba2(m, layer, w, b, &x, &out, obs, e));
    } else if (k == LWQ_MIXER_NONE) {
        snprintf(name, sizeof name, "model.layers.%d.mixer", layer);
        LWQ_TRY(lwq_fwd_relu2_mlp(m, layer, w, name, c->intermediate_size, &x, &b->valid, NULL, NULL, &out, obs, e));
    } else {
        return lwq_errf(e, LWQ_EUNSUPPORTED, "layer %d: mixer kind %d has no nemotron_h forward", layer, (int)k);
    }
    return lwq_backend_add(m->be, h, &out, e);
}

int lwq_fwd_nemotron_check(const lwq_model_config *c, lwq_error *e)
{
    if (c->mamba_num_heads <= 0 || c->mamba_head_dim <= 0 || c->ssm_state_size <= 0 || c->mamba_n_groups <= 0 ||
        c->mamba_num_heads % c->mamba_n_groups || c->mamba_conv_kernel <= 0 || c->mamba_conv_kernel > 64)
        return lwq_errf(e, LWQ_EINVAL, "config (%s): bad Mamba2 geometry: %d heads of %" PRId64 ", %d groups of "
                        "state %" PRId64 ", conv kernel %d", c->model_type, c->mamba_num_heads, c->mamba_head_dim,
                        c->mamba_n_groups, c->ssm_state_size, c->mamba_conv_kernel);
    return 0;
}
