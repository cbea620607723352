/* engine/forward/model_kimi.c — Kimi delta attention (KDA), the "linear_attention" mixer of
 * kimi_linear, as transformers 5.23's KimiLinearDeltaAttention computes it on its torch path
 * (chunk_kimi_delta_attention; the fla kernels are not used: docs/FAMILIES.md).  Names are
 * transformers' (layout/ckpt_fused.c lwq_ckpt_rename_kimi).
 *
 *   x = rmsnorm(h, input_layernorm); x's padding rows := 0     (apply_mask_to_padding_states)
 *   q, k, v = x Wq^T, x Wk^T, x Wv^T                 observed: q_proj, k_proj, v_proj
 *   [q | k | v] = silu(causal depthwise conv)         the weights q_conv1d | k_conv1d | v_conv1d
 *   g = -exp(A_log[head]) * softplus(f_b(f_a(x)) + dt_bias)   per channel, f32; softplus as
 *       transformers writes it: g > 20 ? g : log(1 + exp(g))
 *                                                     observed: forget_gate.f_a_proj (x),
 *                                                     forget_gate.f_b_proj (f_a's output)
 *   beta = sigmoid(b_proj(x))                         observed: b_proj
 *   per (sequence, head), from a zero state: q, k = l2norm (x / sqrt(sum x^2 + 1e-6)),
 *       q *= head_dim^-0.5;  S = diag(exp(g_t)) S;  S += k (x) ((v - S^T k) beta);  o = S^T q
 *   y = o_norm(o) * sigmoid(g_b(g_a(x)))  (KimiLinearRMSNormGated over head_dim, eps rms_norm_eps:
 *       round(o) to the act dtype, then norm, weight and gate in f32, rounded once)
 *                                                     observed: g_a_proj (x), g_b_proj (g_a's)
 *   h += o_proj(y)                                    observed: o_proj
 *
 * The convolution, the recurrence and the gated norm are the delta-rule core that gated
 * DeltaNet uses (lwq_fwd_delta_rule, model_qwen3next.c), with the decay per key channel.  It is
 * computed token by token; transformers computes it in chunks of 64 (algebraically the same, a
 * different f32 rounding): the forward dumps hold both to 1e-5.  The state is per sequence and
 * starts at zero for every calibration (and eval) sequence.  Left padding: a padded row is zero
 * before the projections, so it adds nothing to the conv window and, with k = v = 0, leaves the
 * (zero) state at zero; real rows equal the unpadded sequence's. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/forward_internal.h"

int lwq_fwd_kda_check(const lwq_model_config *c, lwq_error *e)
{
    const int64_t H = c->linear_num_key_heads, hd = c->linear_key_head_dim;
    if (H <= 0 || hd <= 0 || H > 4096 || hd > 4096 || H * hd > (1 << 20) || c->linear_conv_kernel_dim <= 0 ||
        c->linear_conv_kernel_dim > 64 || c->linear_num_value_heads != H || c->linear_value_head_dim != hd)
        return lwq_errf(e, LWQ_EINVAL, "config (%s): bad Kimi delta attention geometry: %" PRId64 " heads of %"
                        PRId64 ", conv kernel %d", c->model_type, H, hd, c->linear_conv_kernel_dim);
    return 0;
}

/* A parameter of exactly `ndim` dims `shape` (conv weights, A_log) as host f32 into dst. */
static int param_host(lwq_model *m, const lwq_weights *w, int layer, const char *name, int ndim,
                      const int64_t *shape, float *dst, lwq_error *e)
{
    lwq_tensor t;
    lwq_error sub = {0};
    memset(&t, 0, sizeof t);
    int rc = w->get(w->ctx, name, &t, &sub);
    if (rc < 0)
        return lwq_errf(e, rc, "layer %d: tensor %s %s%s", layer, name, rc == LWQ_ENOENT ? "is missing" : "",
                        sub.msg[0] ? sub.msg : "");
    int ok = lwq_dtype_is_act(t.dtype) && t.ndim == ndim && lwq_tensor_is_contiguous(&t) &&
             t.device == m->be->ops->device;
    int64_t numel = 1;
    for (int d = 0; ok && d < ndim; d++) {
        ok = t.shape[d] == shape[d];
        numel *= shape[d];
    }
    if (!ok) {
        char want[64] = "";
        size_t k = 0;
        for (int d = 0; d < ndim && k < sizeof want; d++)
            k += (size_t)snprintf(want + k, sizeof want - k, "%s%" PRId64, d ? ", " : "", shape[d]);
        return lwq_errf(e, LWQ_EFORMAT, "layer %d: tensor %s must be a contiguous float [%s] on the %s device "
                        "(got %s, %d dims)", layer, name, want, m->be->ops->name, lwq_dtype_name(t.dtype), t.ndim);
    }
    return lwq_fwd_host_fetch(m, &t, numel, dst, e);
}

/* out (n, rows) = x wt^T with weight `module`.weight (rows, cols); x observed under `module`. */
static int proj(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b, const char *module,
                int64_t rows, int64_t cols, const lwq_tensor *x, lwq_tensor *out, const lwq_observer *obs,
                lwq_error *e)
{
    char nm[LWQ_NAME_MAX];
    lwq_tensor wt;
    snprintf(nm, sizeof nm, "%s.weight", module);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 2, rows, cols, 0, &wt, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, x->shape[0], rows, out, e));
    LWQ_TRY(lwq_fwd_observe(obs, layer, module, x, &b->valid, e));
    return lwq_backend_gemm(m->be, x, &wt, NULL, out, e);
}

static inline float softplus_kimi(float g) { return g > 20.0f ? g : logf(1.0f + expf(g)); }

int lwq_fwd_kda_mixer_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                            lwq_tensor *h, const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = h->shape[0], D = c->hidden_size, H = c->linear_num_key_heads,
                  hd = c->linear_key_head_dim, qkv = H * hd;
    const int K = c->linear_conv_kernel_dim;
    const lwq_dtype dt = m->act;
    char pre[LWQ_NAME_MAX], nm[LWQ_NAME_MAX], mod[LWQ_NAME_MAX];
    snprintf(pre, sizeof pre, "model.layers.%d.self_attn", layer);
#define MOD(s) (snprintf(mod, sizeof mod, "%s.%s", pre, s), mod)

    lwq_tensor ln1, x, q, k, v, fa, fb, bl, ga, gb, core, out;
    snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", layer);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 1, D, 0, 0, &ln1, e));
    LWQ_TRY(lwq_fwd_tensor(m, dt, n, D, &x, e));
    LWQ_TRY(lwq_fwd_tensor(m, dt, n, qkv, &core, e));
    LWQ_TRY(lwq_fwd_tensor(m, dt, n, D, &out, e));
    LWQ_TRY(lwq_backend_rmsnorm(m->be, h, &ln1, (float)c->rms_norm_eps, &x, e));

    float *hx = malloc((size_t)(n * D > 0 ? n * D : 1) * sizeof(float));
    const int64_t C = 3 * qkv;
    float *hm = malloc((size_t)(n * C + 1) * sizeof(float)), *hc = malloc((size_t)(n * C + 1) * sizeof(float));
    float *hfb = malloc((size_t)(n * qkv + 1) * sizeof(float)), *hz = malloc((size_t)(n * qkv + 1) * sizeof(float));
    float *hy = malloc((size_t)(n * qkv + 1) * sizeof(float)), *hb = malloc((size_t)(n * H + 1) * sizeof(float));
    float *wc = malloc((size_t)(C * K + 1) * sizeof(float)), *alog = malloc((size_t)(H + 1) * sizeof(float));
    float *dtb = NULL, *wn = NULL;
    int rc = 0;
    if (!hx || !hm || !hc || !hfb || !hz || !hy || !hb || !wc || !alog) {
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: no host memory for the Kimi delta attention of %" PRId64 " tokens",
                      layer, n);
        goto done;
    }
    /* apply_mask_to_padding_states */
    if ((rc = lwq_fwd_host_fetch(m, &x, n * D, hx, e)) < 0)
        goto done;
    for (int64_t t = 0; t < n; t++)
        if (!b->valid_host[t])
            memset(hx + t * D, 0, (size_t)D * sizeof(float));
    if ((rc = lwq_fwd_host_store(m, hx, &x, e)) < 0)
        goto done;

    if ((rc = proj(m, layer, w, b, MOD("q_proj"), qkv, D, &x, &q, obs, e)) < 0 ||
        (rc = proj(m, layer, w, b, MOD("k_proj"), qkv, D, &x, &k, obs, e)) < 0 ||
        (rc = proj(m, layer, w, b, MOD("v_proj"), qkv, D, &x, &v, obs, e)) < 0 ||
        (rc = proj(m, layer, w, b, MOD("forget_gate.f_a_proj"), hd, D, &x, &fa, obs, e)) < 0 ||
        (rc = proj(m, layer, w, b, MOD("forget_gate.f_b_proj"), qkv, hd, &fa, &fb, obs, e)) < 0 ||
        (rc = proj(m, layer, w, b, MOD("b_proj"), H, D, &x, &bl, obs, e)) < 0 ||
        (rc = proj(m, layer, w, b, MOD("g_a_proj"), hd, D, &x, &ga, obs, e)) < 0 ||
        (rc = proj(m, layer, w, b, MOD("g_b_proj"), qkv, hd, &ga, &gb, obs, e)) < 0)
        goto done;

    /* conv input [q | k | v] per row, and the three conv weights stacked in that order */
    const lwq_tensor *parts[3] = {&q, &k, &v};
    static const char *const convs[3] = {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"};
    const int64_t cshape[3] = {qkv, 1, K}, ashape[4] = {1, 1, H, 1};
    for (int p = 0; p < 3; p++) {
        if ((rc = lwq_fwd_host_fetch(m, parts[p], n * qkv, hfb, e)) < 0 ||
            (rc = param_host(m, w, layer, MOD(convs[p]), 3, cshape, wc + p * qkv * K, e)) < 0)
            goto done;
        for (int64_t t = 0; t < n; t++)
            memcpy(hm + t * C + p * qkv, hfb + t * qkv, (size_t)qkv * sizeof(float));
    }
    if ((rc = param_host(m, w, layer, MOD("forget_gate.A_log"), 4, ashape, alog, e)) < 0 ||
        (rc = lwq_fwd_host_weight(m, w, layer, MOD("forget_gate.dt_bias"), 1, qkv, 0, &dtb, e)) < 0 ||
        (rc = lwq_fwd_host_weight(m, w, layer, MOD("o_norm.weight"), 1, hd, 0, &wn, e)) < 0 ||
        (rc = lwq_fwd_host_fetch(m, &fb, n * qkv, hfb, e)) < 0 || (rc = lwq_fwd_host_fetch(m, &bl, n * H, hb, e)) < 0 ||
        (rc = lwq_fwd_host_fetch(m, &gb, n * qkv, hz, e)) < 0)
        goto done;
    /* the forget gate in f32: -exp(A_log) * softplus(f_b(f_a(x)) + dt_bias), per channel */
    for (int64_t hh = 0; hh < H; hh++)
        alog[hh] = -expf(alog[hh]);
    for (int64_t t = 0; t < n; t++)
        for (int64_t ch = 0; ch < qkv; ch++)
            hfb[t * qkv + ch] = alog[ch / hd] * softplus_kimi(hfb[t * qkv + ch] + dtb[ch]);

    lwq_fwd_delta_job j = {.b = b, .seq = b->seq, .C = C, .kd = qkv, .vd = qkv, .dk = hd, .dv = hd,
                           .nv = (int)H, .r = 1, .K = K, .dt = dt, .eps = (float)c->rms_norm_eps,
                           .mixed = hm, .conv = hc, .wc = wc, .bb = hb, .gk = hfb, .wn = wn, .z = hz, .y = hy};
    if ((rc = lwq_fwd_delta_rule(&j, e)) < 0)
        goto done;
    if ((rc = lwq_fwd_host_store(m, hy, &core, e)) < 0 ||
        (rc = proj(m, layer, w, b, MOD("o_proj"), D, qkv, &core, &out, obs, e)) < 0)
        goto done;
    rc = lwq_backend_add(m->be, h, &out, e);
#undef MOD
done:
    free(hx);
    free(hm);
    free(hc);
    free(hfb);
    free(hz);
    free(hy);
    free(hb);
    free(wc);
    free(alog);
    free(dtb);
    free(wn);
    return rc < 0 ? rc : 0;
}
