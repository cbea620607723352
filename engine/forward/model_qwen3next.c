/* engine/forward/model_qwen3next.c — the decoder layer of qwen3_next (transformers' Qwen3NextForCausalLM;
 * ../shared/spec/ARCHITECTURES.md): a hybrid of Gated DeltaNet (linear attention) layers and
 * gated full-attention layers, each followed by a sparse MoE with a gated shared expert (or a
 * dense MLP on mlp_only_layers).
 *
 *   x = rms1p(h, input_layernorm)          rms1p: f32 x*rsqrt(mean x^2 + eps)*(1+w), one rounding
 *   linear_attention:  x's padded rows := 0                                (as transformers does)
 *     qkvz = x Wqkvz^T, ba = x Wba^T                   observed: in_proj_qkvz, in_proj_ba
 *     per key head g: [q_g, k_g, v_g (r heads), z_g (r heads)] and [b_g (r), a_g (r)], r = Hv/Hk
 *     mixed = [q, k, v]                                 observed: conv1d (its input)
 *     mixed = silu(causal depthwise conv1d(mixed))      per sequence, zero history
 *     beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias)
 *     q, k = l2norm(q), l2norm(k) (eps 1e-6); q *= dk^-0.5; q, k repeated to the value heads
 *     per value head: S = S*exp(g_t); S += k_t (x) ((v_t - S^T k_t) * beta_t); o_t = S^T q_t
 *     o = rmsnorm(o) * w * silu(z) (gated RMSNorm, plain weight)   observed: out_proj
 *     out = o Wout^T
 *   full_attention:
 *     [q | gate] per head = x Wq^T (2 x heads x head_dim)  observed: q_proj, k_proj, v_proj
 *     q, k = rms1p(q, q_norm), rms1p(k, k_norm) per head; partial rotate-half RoPE on the first
 *     head_dim * partial_rotary_factor dims               observed: kv(k, v)
 *     a = causal_gqa_attention(q, k, v) * sigmoid(gate)    observed: o_proj
 *     out = a Wo^T
 *   h += out;  x = rms1p(h, post_attention_layernorm)
 *   MoE: routed experts (softmax, top-k, norm_topk_prob; model_moe.c) + sigmoid(x Wsg^T) *
 *        shared_expert(x)                                  observed: every expert linear
 *   h += mlp
 *
 * Where the work runs: GEMMs, attention and the MoE go through the backend.  The qwen3_next-only
 * element-wise steps (the (1+w) norms, the q/gate split, partial RoPE, the output gate) and the
 * whole Gated DeltaNet core (conv1d, recurrence, gated norm) run on the host in f32, on data
 * downloaded from the backend and uploaded back.  Why on the host: the delta rule is a recurrence
 * over tokens, not a GEMM; computing it sequentially here gives one exact definition of it for
 * every backend (the CUDA path then produces bit-identical statistics for these layers) without
 * a chunked-algorithm kernel per backend.  Cost per linear-attention layer and batch is
 * ~4 * tokens * Hv * dk * dv flops (spread over threads per (sequence, value head)) plus moving
 * a few (tokens x width) activations over the bus, small beside the expert GEMMs.
 *
 * Numerics: the recurrence is computed SEQUENTIALLY, token by token, with the state S of every
 * (sequence, value head) an FP32 dk x dv matrix starting at zero; l2norm, beta, g, exp(g) and all
 * sums are f32 (as the fused FLA kernels do), and the core output is rounded once to the
 * activation dtype.  transformers' torch fallback computes the same recurrence in chunks of 64
 * (algebraically identical, different f32 rounding).  Other steps round where transformers'
 * ops do (conv1d, silu, beta, gated-norm stages, q/k norms, RoPE products, sigmoid gate).
 *
 * Padding: a left-padded row is zeroed before the projections, so it adds nothing to the conv
 * window and, with k = v = 0, leaves the state at exactly zero; real rows therefore match the
 * unpadded sequence exactly.  Padded rows' mixer outputs are set to 0. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "engine/forward/forward_internal.h"

/* ---- host transfers ---------------------------------------------------------------------------- */

/* dst[0..numel) = t's elements as f32 (t on the backend device, float dtype). */
int lwq_fwd_host_fetch(lwq_model *m, const lwq_tensor *t, int64_t numel, float *dst, lwq_error *e)
{
    const void *src = t->data;
    void *tmp = NULL;
    size_t bytes = (size_t)numel * lwq_dtype_size(t->dtype);
    if (t->device != LWQ_DEV_CPU) {
        if (!(tmp = malloc(bytes ? bytes : 1)))
            return lwq_errf(e, LWQ_ENOMEM, "forward: no host memory for %zu bytes", bytes);
        int rc = lwq_backend_download(m->be, tmp, t->data, bytes, e);
        if (rc < 0) {
            free(tmp);
            return rc;
        }
        src = tmp;
    }
    for (int64_t i = 0; i < numel; i++)
        dst[i] = lwq_load_f(src, t->dtype, (size_t)i);
    free(tmp);
    return 0;
}

/* t's elements = src rounded to t's dtype. */
int lwq_fwd_host_store(lwq_model *m, const float *src, lwq_tensor *t, lwq_error *e)
{
    int64_t numel = lwq_tensor_numel(t);
    size_t es = lwq_dtype_size(t->dtype), bytes = (size_t)numel * es;
    void *dst = t->data, *tmp = NULL;
    if (t->device != LWQ_DEV_CPU) {
        if (!(dst = tmp = malloc(bytes ? bytes : 1)))
            return lwq_errf(e, LWQ_ENOMEM, "forward: no host memory for %zu bytes", bytes);
    }
    for (int64_t i = 0; i < numel; i++) {
        float v = src[i];
        if (t->dtype == LWQ_BF16)
            ((uint16_t *)dst)[i] = lwq_f32_to_bf16(v);
        else if (t->dtype == LWQ_F16)
            ((uint16_t *)dst)[i] = lwq_f32_to_f16(v);
        else
            ((float *)dst)[i] = v;
    }
    int rc = 0;
    if (tmp) {
        rc = lwq_backend_upload(m->be, t->data, tmp, bytes, e);
        free(tmp);
    }
    return rc;
}

/* A weight as host f32 (malloc'd into *out); ndim 1 (d0) or 2 (d0, d1). */
int lwq_fwd_host_weight(lwq_model *m, const lwq_weights *w, int layer, const char *name, int ndim,
                       int64_t d0, int64_t d1, float **out, lwq_error *e)
{
    lwq_tensor t;
    *out = NULL;
    LWQ_TRY(lwq_fwd_weight(m, w, layer, name, ndim, d0, d1, 0, &t, e));
    int64_t n = d0 * (ndim == 2 ? d1 : 1);
    if (!(*out = (float *)malloc((size_t)(n ? n : 1) * sizeof(float))))
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: no memory for %s", layer, name);
    return lwq_fwd_host_fetch(m, &t, n, *out, e);
}

static float *fbuf(int64_t n) { return (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); }

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* torch.nn.functional.softplus (beta 1, threshold 20) */
static inline float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Qwen3NextRMSNorm on one row: f32 x * rsqrt(mean(x^2) + eps) * (1 + w), rounded once. */
static void rms1p(const float *x, const float *w, int64_t d, float eps, lwq_dtype dt, float *y)
{
    float ss = 0.0f;
    for (int64_t i = 0; i < d; i++)
        ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)d + eps);
    for (int64_t i = 0; i < d; i++)
        y[i] = lwq_round_to(x[i] * r * (1.0f + w[i]), dt);
}

/* xo (n, D) host = rms1p of h's rows with the layer norm `which`. */
static int norm_hidden(lwq_model *m, int layer, const lwq_weights *w, const char *which,
                       const lwq_tensor *h, float *xo, lwq_error *e)
{
    const int64_t n = h->shape[0], D = m->cfg->hidden_size;
    char name[LWQ_NAME_MAX];
    float *wn = NULL;
    snprintf(name, sizeof name, "model.layers.%d.%s.weight", layer, which);
    int rc = lwq_fwd_host_weight(m, w, layer, name, 1, D, 0, &wn, e);
    if (rc == 0)
        rc = lwq_fwd_host_fetch(m, h, n * D, xo, e);
    for (int64_t t = 0; rc == 0 && t < n; t++)
        rms1p(xo + t * D, wn, D, (float)m->cfg->rms_norm_eps, m->act, xo + t * D);
    free(wn);
    return rc;
}

int lwq_fwd_rmsnorm_1p(lwq_model *m, const lwq_tensor *x, const lwq_tensor *w, lwq_tensor *y,
                       lwq_error *e)
{
    const int64_t n = x->shape[0], d = x->shape[1];
    float *hx = fbuf(n * d), *hw = fbuf(d);
    int rc = 0;
    if (!hx || !hw)
        rc = lwq_errf(e, LWQ_ENOMEM, "rmsnorm: no host memory for %" PRId64 " rows", n);
    if (rc == 0 && (rc = lwq_fwd_host_fetch(m, w, d, hw, e)) == 0 && (rc = lwq_fwd_host_fetch(m, x, n * d, hx, e)) == 0) {
        for (int64_t t = 0; t < n; t++)
            rms1p(hx + t * d, hw, d, (float)m->cfg->rms_norm_eps, y->dtype, hx + t * d);
        rc = lwq_fwd_host_store(m, hx, y, e);
    }
    free(hx);
    free(hw);
    return rc;
}

/* ---- gated full attention ---------------------------------------------------------------------- */

static int full_attention(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                          const lwq_tensor *x, lwq_tensor *out, const lwq_observer *obs,
                          lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = x->shape[0], D = c->hidden_size, hd = c->head_dim;
    const int H = c->num_attention_heads, KV = c->num_key_value_heads;
    const lwq_dtype dt = m->act;
    const float eps = (float)c->rms_norm_eps;
    const int64_t half = (int64_t)((double)hd * c->partial_rotary_factor) / 2, rot = 2 * half;
    char mq[LWQ_NAME_MAX], mk[LWQ_NAME_MAX], mv[LWQ_NAME_MAX], mo[LWQ_NAME_MAX], nm[LWQ_NAME_MAX];
    snprintf(mq, sizeof mq, "model.layers.%d.self_attn.q_proj", layer);
    snprintf(mk, sizeof mk, "model.layers.%d.self_attn.k_proj", layer);
    snprintf(mv, sizeof mv, "model.layers.%d.self_attn.v_proj", layer);
    snprintf(mo, sizeof mo, "model.layers.%d.self_attn.o_proj", layer);
    lwq_tensor wq, wk, wv, wo, qf, q, k, v, a;
    snprintf(nm, sizeof nm, "%s.weight", mq);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 2, 2 * H * hd, D, 0, &wq, e));
    snprintf(nm, sizeof nm, "%s.weight", mk);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 2, KV * hd, D, 0, &wk, e));
    snprintf(nm, sizeof nm, "%s.weight", mv);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 2, KV * hd, D, 0, &wv, e));
    snprintf(nm, sizeof nm, "%s.weight", mo);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 2, D, H * hd, 0, &wo, e));
    LWQ_TRY(lwq_fwd_tensor(m, dt, n, 2 * H * hd, &qf, e));
    LWQ_TRY(lwq_fwd_tensor(m, dt, n, H * hd, &q, e));
    LWQ_TRY(lwq_fwd_tensor(m, dt, n, KV * hd, &k, e));
    LWQ_TRY(lwq_fwd_tensor(m, dt, n, KV * hd, &v, e));
    LWQ_TRY(lwq_fwd_tensor(m, dt, n, H * hd, &a, e));

    LWQ_TRY(lwq_fwd_observe(obs, layer, mq, x, &b->valid, e));
    LWQ_TRY(lwq_fwd_observe(obs, layer, mk, x, &b->valid, e));
    LWQ_TRY(lwq_fwd_observe(obs, layer, mv, x, &b->valid, e));
    LWQ_TRY(lwq_backend_gemm(m->be, x, &wq, NULL, &qf, e));
    LWQ_TRY(lwq_backend_gemm(m->be, x, &wk, NULL, &k, e));
    LWQ_TRY(lwq_backend_gemm(m->be, x, &wv, NULL, &v, e));

    float *qn = NULL, *kn = NULL, *hq = fbuf(n * 2 * H * hd), *hk = fbuf(n * KV * hd),
          *hg = fbuf(n * H * hd), *cs = fbuf(2 * (half ? half : 1)), *row = fbuf(hd);
    int32_t *pos = (int32_t *)malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    int rc = 0;
    if (!hq || !hk || !hg || !cs || !row || !pos) {
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: no host memory for the attention of %" PRId64
                      " tokens", layer, n);
        goto out;
    }
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_norm.weight", layer);
    if ((rc = lwq_fwd_host_weight(m, w, layer, nm, 1, hd, 0, &qn, e)) < 0)
        goto out;
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_norm.weight", layer);
    if ((rc = lwq_fwd_host_weight(m, w, layer, nm, 1, hd, 0, &kn, e)) < 0 ||
        (rc = lwq_fwd_host_fetch(m, &qf, n * 2 * H * hd, hq, e)) < 0 || (rc = lwq_fwd_host_fetch(m, &k, n * KV * hd, hk, e)) < 0 ||
        (rc = lwq_backend_download(m->be, pos, b->pos.data, (size_t)n * sizeof(int32_t), e)) < 0)
        goto out;
    /* inv_freq over the rotary dims, f32 as transformers' default rope computes it */
    float inv[2048];
    for (int64_t i = 0; i < half; i++)
        inv[i] = 1.0f / powf((float)c->rope_theta, (float)(2 * i) / (float)rot);
    for (int64_t t = 0; t < n; t++) {
        float *cn = cs, *sn = cs + half;
        for (int64_t i = 0; i < half; i++) {
            float ang = (float)pos[t] * inv[i];
            cn[i] = lwq_round_to(cosf(ang), dt);
            sn[i] = lwq_round_to(sinf(ang), dt);
        }
        for (int hh = 0; hh < H + KV; hh++) {
            int isq = hh < H;
            /* q_proj's output per head is [q (hd), gate (hd)] */
            float *src = isq ? hq + t * 2 * H * hd + (int64_t)hh * 2 * hd
                             : hk + t * KV * hd + (int64_t)(hh - H) * hd;
            float *dst = isq ? hq + t * 2 * H * hd + (int64_t)hh * 2 * hd : src;
            if (isq)
                for (int64_t i = 0; i < hd; i++)
                    hg[t * H * hd + (int64_t)hh * hd + i] = src[hd + i];
            rms1p(src, isq ? qn : kn, hd, eps, dt, row);
            for (int64_t i = 0; i < rot; i++) {
                float rh = i < half ? -row[i + half] : row[i - half];
                float p1 = lwq_round_to(row[i] * cn[i % half], dt);
                float p2 = lwq_round_to(rh * sn[i % half], dt);
                dst[i] = lwq_round_to(p1 + p2, dt);
            }
            for (int64_t i = rot; i < hd; i++)
                dst[i] = row[i];
        }
        /* compact q: head hh's rotated q moves from hh*2hd to hh*hd (left to right is safe) */
        for (int hh = 0; hh < H; hh++)
            memmove(hq + t * H * hd + (int64_t)hh * hd, hq + t * 2 * H * hd + (int64_t)hh * 2 * hd,
                    (size_t)hd * sizeof(float));
    }
    /* rows are compacted in place too: row t's q now starts at t*H*hd (t ascending, safe) */
    if ((rc = lwq_fwd_host_store(m, hq, &q, e)) < 0 || (rc = lwq_fwd_host_store(m, hk, &k, e)) < 0)
        goto out;
    if (obs && obs->kv && (rc = obs->kv(obs->ctx, layer, &k, &v, &b->valid, e)) < 0)
        goto out;
    lwq_attn_args aa = {&q, &k, &v, &a, &b->valid, b->batch, b->seq, H, KV, hd,
                        (float)(1.0 / sqrt((double)hd))};
    if ((rc = lwq_backend_attention(m->be, &aa, e)) < 0 || (rc = lwq_fwd_host_fetch(m, &a, n * H * hd, hq, e)) < 0)
        goto out;
    for (int64_t i = 0; i < n * H * hd; i++)
        hq[i] = lwq_round_to(hq[i] * lwq_round_to(sigmoidf(hg[i]), dt), dt);
    if ((rc = lwq_fwd_host_store(m, hq, &a, e)) < 0 || (rc = lwq_fwd_observe(obs, layer, mo, &a, &b->valid, e)) < 0)
        goto out;
    rc = lwq_backend_gemm(m->be, &a, &wo, NULL, out, e);
out:
    free(qn);
    free(kn);
    free(hq);
    free(hk);
    free(hg);
    free(cs);
    free(row);
    free(pos);
    return rc;
}

/* ---- Gated DeltaNet ---------------------------------------------------------------------------- */

typedef lwq_fwd_delta_job gdn_job;

/* Causal depthwise conv + SiLU of sequences [s0, s1): rows before a sequence's first real token
 * count as zero history. */
static void gdn_conv(void *ctx, int64_t s0, int64_t s1, int tid)
{
    (void)tid;
    gdn_job *j = (gdn_job *)ctx;
    const int64_t T = j->seq, C = j->C;
    const int K = j->K;
    for (int64_t s = s0; s < s1; s++)
        for (int64_t t = 0; t < T; t++) {
            int64_t row = s * T + t;
            float *o = j->conv + row * C;
            if (!j->b->valid_host[row]) {
                memset(o, 0, (size_t)C * sizeof(float));
                continue;
            }
            for (int64_t ch = 0; ch < C; ch++) {
                float acc = 0.0f;
                for (int q = 0; q < K; q++) {
                    int64_t tt = t - (K - 1) + q;
                    if (tt < 0 || !j->b->valid_host[s * T + tt])
                        continue;
                    acc += j->wc[ch * K + q] * j->mixed[(s * T + tt) * C + ch];
                }
                float v = lwq_round_to(acc, j->dt);
                o[ch] = lwq_round_to(v * sigmoidf(v), j->dt);
            }
        }
}

static void l2norm_f32(const float *x, int64_t d, float mul, float *y)
{
    float ss = 0.0f;
    for (int64_t i = 0; i < d; i++)
        ss += x[i] * x[i];
    float r = mul / sqrtf(ss + 1e-6f);
    for (int64_t i = 0; i < d; i++)
        y[i] = x[i] * r;
}

/* KDA's l2norm (transformers' kimi_linear, "to match the original triton"): x / sqrt(sum x^2 +
 * 1e-6), then times mul (q's dk^-0.5) as a second product. */
static void l2norm_div_f32(const float *x, int64_t d, float mul, float *y)
{
    float ss = 0.0f;
    for (int64_t i = 0; i < d; i++)
        ss += x[i] * x[i];
    float s = sqrtf(ss + 1e-6f);
    for (int64_t i = 0; i < d; i++)
        y[i] = mul == 1.0f ? x[i] / s : (x[i] / s) * mul;
}

/* Items [i0, i1) of (sequence, value head): the sequential delta rule and the gated norm. */
static void gdn_heads(void *ctx, int64_t i0, int64_t i1, int tid)
{
    gdn_job *j = (gdn_job *)ctx;
    const int64_t dk = j->dk, dv = j->dv, C = j->C, T = j->seq;
    const lwq_dtype dt = j->dt;
    float *S = j->scratch + (int64_t)tid * (dk * dv + 2 * dk + 2 * dv);
    float *qn = S + dk * dv, *kn = qn + dk, *o = kn + dk;
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int64_t it = i0; it < i1; it++) {
        const int64_t s = it / j->nv;
        const int hv = (int)(it % j->nv), kh = hv / j->r;
        const float A = j->gk ? 0.0f : -expf(j->alog[hv]);
        memset(S, 0, (size_t)(dk * dv) * sizeof(float));
        for (int64_t t = 0; t < T; t++) {
            const int64_t row = s * T + t;
            float *y = j->y + row * j->vd + (int64_t)hv * dv;
            if (!j->b->valid_host[row]) {
                memset(y, 0, (size_t)dv * sizeof(float));
                continue;
            }
            const float *cr = j->conv + row * C;
            (j->gk ? l2norm_div_f32 : l2norm_f32)(cr + (int64_t)kh * dk, dk, qscale, qn);
            (j->gk ? l2norm_div_f32 : l2norm_f32)(cr + j->kd + (int64_t)kh * dk, dk, 1.0f, kn);
            const float *v = cr + 2 * j->kd + (int64_t)hv * dv;
            const float beta = lwq_round_to(sigmoidf(j->bb[row * j->nv + hv]), dt);
            /* the decay of S's row i: one per head (gated DeltaNet), or per key channel (KDA) */
            const float *gk = j->gk ? j->gk + (row * j->nv + hv) * dk : NULL;
            const float decay = gk ? 1.0f : expf(A * softplusf(j->aa[row * j->nv + hv] + j->dtb[hv]));
            /* two passes over S per token, each fusing two steps of the rule (row i of S is
             * final for step 1 before step 2 reads it, so this is the plain order):
             *   S *= exp(g);  u = S^T k            (the memory's prediction of v)
             *   delta = (v - u) * beta;  S += k (x) delta;  o = S^T q */
            /* restrict: S, u and o do not overlap, so the d loops vectorize */
            float *restrict u = qn + 2 * dk + dv; /* dv floats after o */
            float *restrict oo = o;
            for (int64_t d = 0; d < dv; d++)
                u[d] = 0.0f;
            for (int64_t i = 0; i < dk; i++) {
                float *restrict Si = S + i * dv;
                const float ki = kn[i], di = gk ? expf(gk[i]) : decay;
                for (int64_t d = 0; d < dv; d++) {
                    Si[d] *= di;
                    u[d] += Si[d] * ki;
                }
            }
            for (int64_t d = 0; d < dv; d++) {
                u[d] = (v[d] - u[d]) * beta;
                oo[d] = 0.0f;
            }
            for (int64_t i = 0; i < dk; i++) {
                float *restrict Si = S + i * dv;
                const float ki = kn[i], qi = qn[i];
                for (int64_t d = 0; d < dv; d++) {
                    Si[d] += ki * u[d];
                    oo[d] += Si[d] * qi;
                }
            }
            /* gated RMSNorm: round(round(round(o) * rsqrt(var + eps)) * w) * silu(z), rounded (GDN) */
            float ss = 0.0f;
            for (int64_t d = 0; d < dv; d++) {
                o[d] = lwq_round_to(o[d], dt);
                ss += o[d] * o[d];
            }
            const float rr = 1.0f / sqrtf(ss / (float)dv + j->eps);
            const float *z = j->z + row * j->vd + (int64_t)hv * dv;
            if (gk) /* KDA's KimiLinearRMSNormGated: all in f32, sigmoid gate, one rounding */
                for (int64_t d = 0; d < dv; d++)
                    y[d] = lwq_round_to(j->wn[d] * (o[d] * rr) * sigmoidf(z[d]), dt);
            else
                for (int64_t d = 0; d < dv; d++) {
                    float nrm = lwq_round_to(lwq_round_to(o[d] * rr, dt) * j->wn[d], dt);
                    y[d] = lwq_round_to(nrm * (z[d] * sigmoidf(z[d])), dt);
                }
        }
    }
}

int lwq_fwd_delta_rule(lwq_fwd_delta_job *j, lwq_error *e)
{
    int T = lwq_parallel_threads();
    float *scratch = fbuf((int64_t)(T > 0 ? T : 1) * (j->dk * j->dv + 2 * j->dk + 2 * j->dv));
    if (!scratch)
        return lwq_errf(e, LWQ_ENOMEM, "delta rule: no host memory for the per-thread state");
    j->scratch = scratch;
    lwq_parallel_for(j->b->batch, 1, gdn_conv, j);
    lwq_parallel_for(j->b->batch * j->nv, 1, gdn_heads, j);
    j->scratch = NULL;
    free(scratch);
    return 0;
}

static int linear_attention(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                            const lwq_tensor *x, lwq_tensor *out, const lwq_observer *obs,
                            lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = x->shape[0], D = c->hidden_size;
    const int nk = c->linear_num_key_heads, nv = c->linear_num_value_heads, r = nv / nk;
    const int64_t dk = c->linear_key_head_dim, dv = c->linear_value_head_dim;
    const int64_t kd = nk * dk, vd = nv * dv, C = 2 * kd + vd, P = 2 * kd + 2 * vd;
    const int K = c->linear_conv_kernel_dim;
    const lwq_dtype dt = m->act;
    /* split: Qwen3.5's in_proj_qkv (C = [q, k, v]) and in_proj_z (vd), in_proj_b and in_proj_a
     * (nv each), already in the order the core reads; else Qwen3-Next's per-key-head interleaved
     * in_proj_qkvz (P) and in_proj_ba (2 nv) */
    const int split = lwq_config_layer_mixer(c, layer) == LWQ_MIXER_GDN_SPLIT;
    char mqkvz[LWQ_NAME_MAX], mba[LWQ_NAME_MAX], mconv[LWQ_NAME_MAX], mout[LWQ_NAME_MAX],
        nm[LWQ_NAME_MAX], mz[LWQ_NAME_MAX], ma[LWQ_NAME_MAX];
    snprintf(mqkvz, sizeof mqkvz, split ? "model.layers.%d.linear_attn.in_proj_qkv"
                                        : "model.layers.%d.linear_attn.in_proj_qkvz", layer);
    snprintf(mba, sizeof mba, split ? "model.layers.%d.linear_attn.in_proj_b"
                                    : "model.layers.%d.linear_attn.in_proj_ba", layer);
    snprintf(mz, sizeof mz, "model.layers.%d.linear_attn.in_proj_z", layer);
    snprintf(ma, sizeof ma, "model.layers.%d.linear_attn.in_proj_a", layer);
    /* rows of the two projections as the GEMMs write them */
    const int64_t P1 = split ? C : P, B1 = split ? nv : 2 * (int64_t)nv;
    snprintf(mconv, sizeof mconv, "model.layers.%d.linear_attn.conv1d", layer);
    snprintf(mout, sizeof mout, "model.layers.%d.linear_attn.out_proj", layer);
    lwq_tensor wqkvz, wba, wz, wa, wout, wconv, qkvz, ba, zt, at, mixed, core;
    snprintf(nm, sizeof nm, "%s.weight", mqkvz);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 2, P1, D, 0, &wqkvz, e));
    snprintf(nm, sizeof nm, "%s.weight", mba);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 2, B1, D, 0, &wba, e));
    if (split) {
        snprintf(nm, sizeof nm, "%s.weight", mz);
        LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 2, vd, D, 0, &wz, e));
        snprintf(nm, sizeof nm, "%s.weight", ma);
        LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 2, nv, D, 0, &wa, e));
    }
    snprintf(nm, sizeof nm, "%s.weight", mout);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 2, D, vd, 0, &wout, e));
    /* conv1d.weight is 3-D [C, 1, K]: lwq_fwd_weight checks 1-D/2-D only */
    snprintf(nm, sizeof nm, "%s.weight", mconv);
    lwq_error sub = {0};
    memset(&wconv, 0, sizeof wconv);
    int rc = w->get(w->ctx, nm, &wconv, &sub);
    if (rc < 0)
        return lwq_errf(e, rc, "layer %d: tensor %s %s%s", layer, nm,
                        rc == LWQ_ENOENT ? "is missing" : "", sub.msg[0] ? sub.msg : "");
    if (!lwq_dtype_is_act(wconv.dtype) || wconv.ndim != 3 || wconv.shape[0] != C ||
        wconv.shape[1] != 1 || wconv.shape[2] != K || !lwq_tensor_is_contiguous(&wconv) ||
        wconv.device != m->be->ops->device)
        return lwq_errf(e, LWQ_EFORMAT, "layer %d: tensor %s must be a contiguous float [%" PRId64
                        ", 1, %d] on the %s device (got %s, %d dims [%" PRId64 ", %" PRId64 ", %"
                        PRId64 "])", layer, nm, C, K, m->be->ops->name,
                        lwq_dtype_name(wconv.dtype), wconv.ndim, wconv.shape[0],
                        wconv.ndim > 1 ? wconv.shape[1] : 0, wconv.ndim > 2 ? wconv.shape[2] : 0);
    LWQ_TRY(lwq_fwd_tensor(m, dt, n, P1, &qkvz, e));
    LWQ_TRY(lwq_fwd_tensor(m, dt, n, B1, &ba, e));
    LWQ_TRY(lwq_fwd_tensor(m, dt, n, C, &mixed, e));
    LWQ_TRY(lwq_fwd_tensor(m, dt, n, vd, &core, e));

    LWQ_TRY(lwq_fwd_observe(obs, layer, mqkvz, x, &b->valid, e));
    if (split)
        LWQ_TRY(lwq_fwd_observe(obs, layer, mz, x, &b->valid, e));
    LWQ_TRY(lwq_fwd_observe(obs, layer, mba, x, &b->valid, e));
    if (split)
        LWQ_TRY(lwq_fwd_observe(obs, layer, ma, x, &b->valid, e));
    LWQ_TRY(lwq_backend_gemm(m->be, x, &wqkvz, NULL, &qkvz, e));
    LWQ_TRY(lwq_backend_gemm(m->be, x, &wba, NULL, &ba, e));
    if (split) {
        LWQ_TRY(lwq_fwd_tensor(m, dt, n, vd, &zt, e));
        LWQ_TRY(lwq_fwd_tensor(m, dt, n, nv, &at, e));
        LWQ_TRY(lwq_backend_gemm(m->be, x, &wz, NULL, &zt, e));
        LWQ_TRY(lwq_backend_gemm(m->be, x, &wa, NULL, &at, e));
    }

    gdn_job j = {.b = b, .seq = b->seq, .C = C, .kd = kd, .vd = vd, .dk = dk, .dv = dv, .nv = nv,
                 .r = r, .K = K, .dt = dt, .eps = (float)c->rms_norm_eps};
    float *hp = fbuf(n * P1), *hba = fbuf(n * B1), *hm = fbuf(n * C), *hc = fbuf(n * C),
          *hz = fbuf(n * vd), *hb = fbuf(n * nv), *ha = fbuf(n * nv), *hy = fbuf(n * vd),
          *wc = fbuf(C * K), *alog = NULL, *dtb = NULL, *wn = NULL;
    int T = lwq_parallel_threads();
    float *scratch = fbuf((int64_t)(T > 0 ? T : 1) * (dk * dv + 2 * dk + 2 * dv));
    if (!hp || !hba || !hm || !hc || !hz || !hb || !ha || !hy || !wc || !scratch) {
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: no host memory for the linear attention of %"
                      PRId64 " tokens", layer, n);
        goto out;
    }
    snprintf(nm, sizeof nm, "model.layers.%d.linear_attn.A_log", layer);
    if ((rc = lwq_fwd_host_weight(m, w, layer, nm, 1, nv, 0, &alog, e)) < 0)
        goto out;
    snprintf(nm, sizeof nm, "model.layers.%d.linear_attn.dt_bias", layer);
    if ((rc = lwq_fwd_host_weight(m, w, layer, nm, 1, nv, 0, &dtb, e)) < 0)
        goto out;
    snprintf(nm, sizeof nm, "model.layers.%d.linear_attn.norm.weight", layer);
    if ((rc = lwq_fwd_host_weight(m, w, layer, nm, 1, dv, 0, &wn, e)) < 0 ||
        (rc = lwq_fwd_host_fetch(m, &wconv, C * K, wc, e)) < 0 || (rc = lwq_fwd_host_fetch(m, &qkvz, n * P1, hp, e)) < 0 ||
        (rc = lwq_fwd_host_fetch(m, &ba, n * B1, hba, e)) < 0)
        goto out;
    if (split) { /* already [q, k, v]; z, b, a as they come */
        memcpy(hm, hp, (size_t)(n * C) * sizeof(float));
        memcpy(hb, hba, (size_t)(n * nv) * sizeof(float));
        if ((rc = lwq_fwd_host_fetch(m, &zt, n * vd, hz, e)) < 0 || (rc = lwq_fwd_host_fetch(m, &at, n * nv, ha, e)) < 0)
            goto out;
        goto ungrouped;
    }
    /* un-group the projections: per key head g, qkvz holds [q_g, k_g, v_g (r heads), z_g] and
     * ba holds [b_g (r), a_g (r)] */
    const int64_t gw = 2 * dk + 2 * r * dv;
    for (int64_t t = 0; t < n; t++) {
        const float *pr = hp + t * P, *br = hba + t * 2 * nv;
        float *mr = hm + t * C, *zr = hz + t * vd;
        for (int g = 0; g < nk; g++) {
            const float *pg = pr + g * gw;
            memcpy(mr + g * dk, pg, (size_t)dk * sizeof(float));
            memcpy(mr + kd + g * dk, pg + dk, (size_t)dk * sizeof(float));
            memcpy(mr + 2 * kd + (int64_t)g * r * dv, pg + 2 * dk, (size_t)(r * dv) * sizeof(float));
            memcpy(zr + (int64_t)g * r * dv, pg + 2 * dk + r * dv, (size_t)(r * dv) * sizeof(float));
            for (int i = 0; i < r; i++) {
                hb[t * nv + g * r + i] = br[g * 2 * r + i];
                ha[t * nv + g * r + i] = br[g * 2 * r + r + i];
            }
        }
    }
ungrouped:
    if ((rc = lwq_fwd_host_store(m, hm, &mixed, e)) < 0 ||
        (rc = lwq_fwd_observe(obs, layer, mconv, &mixed, &b->valid, e)) < 0)
        goto out;
    j.mixed = hm;
    j.conv = hc;
    j.wc = wc;
    j.bb = hb;
    j.aa = ha;
    j.alog = alog;
    j.dtb = dtb;
    j.wn = wn;
    j.z = hz;
    j.y = hy;
    j.scratch = scratch;
    lwq_parallel_for(b->batch, 1, gdn_conv, &j);
    lwq_parallel_for(b->batch * nv, 1, gdn_heads, &j);
    if ((rc = lwq_fwd_host_store(m, hy, &core, e)) < 0 ||
        (rc = lwq_fwd_observe(obs, layer, mout, &core, &b->valid, e)) < 0)
        goto out;
    rc = lwq_backend_gemm(m->be, &core, &wout, NULL, out, e);
out:
    free(hp);
    free(hba);
    free(hm);
    free(hc);
    free(hz);
    free(hb);
    free(ha);
    free(hy);
    free(wc);
    free(alog);
    free(dtb);
    free(wn);
    free(scratch);
    return rc;
}

/* ---- MoE with the gated shared expert ---------------------------------------------------------- */

int lwq_fwd_qwen3next_shared(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                             const lwq_tensor *x, lwq_tensor *sg, const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = x->shape[0], D = c->hidden_size, SI = c->shared_expert_intermediate_size;
    char prefix[LWQ_NAME_MAX], nm[LWQ_NAME_MAX];
    snprintf(prefix, sizeof prefix, "model.layers.%d.mlp.shared_expert", layer);
    lwq_tensor so, gl, wg;
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, D, &so, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, 1, &gl, e));
    LWQ_TRY(lwq_fwd_swiglu_mlp(m, layer, w, prefix, "gate_proj", "up_proj", "down_proj", SI, x,
                               &b->valid, NULL, NULL, &so, obs, e));
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.shared_expert_gate.weight", layer);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, nm, 2, 1, D, 0, &wg, e));
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.shared_expert_gate", layer);
    LWQ_TRY(lwq_fwd_observe(obs, layer, nm, x, &b->valid, e));
    LWQ_TRY(lwq_backend_gemm(m->be, x, &wg, NULL, &gl, e));
    float *hs = fbuf(n * D), *hg = fbuf(n);
    int rc = 0;
    if (!hs || !hg)
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: no host memory for the shared expert", layer);
    if (rc == 0 && (rc = lwq_fwd_host_fetch(m, &so, n * D, hs, e)) == 0 && (rc = lwq_fwd_host_fetch(m, &gl, n, hg, e)) == 0) {
        const lwq_dtype dt = m->act;
        for (int64_t t = 0; t < n; t++) {
            float gate = lwq_round_to(sigmoidf(hg[t]), dt);
            for (int64_t d = 0; d < D; d++)
                hs[t * D + d] = lwq_round_to(gate * hs[t * D + d], dt);
        }
        rc = lwq_fwd_host_store(m, hs, sg, e);
    }
    free(hs);
    free(hg);
    return rc;
}

/* ---- the mixer block -------------------------------------------------------------------------- */

int lwq_fwd_norm_1p_layer(lwq_model *m, int layer, const lwq_weights *w, const char *which,
                          const lwq_tensor *h, lwq_tensor *x, lwq_error *e)
{
    const int64_t n = h->shape[0], D = m->cfg->hidden_size;
    float *hx = fbuf(n * D);
    if (!hx)
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: no host memory for %" PRId64 " rows", layer, n);
    int rc = norm_hidden(m, layer, w, which, h, hx, e);
    if (rc == 0)
        rc = lwq_fwd_host_store(m, hx, x, e);
    free(hx);
    return rc < 0 ? rc : 0;
}

int lwq_fwd_qwen3next_mixer_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                                  lwq_tensor *h, const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = h->shape[0], D = c->hidden_size;
    const int linear = lwq_mixer_is_gdn(lwq_config_layer_mixer(c, layer));
    lwq_tensor x, out;
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, D, &x, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, D, &out, e));
    float *hx = fbuf(n * D);
    if (!hx)
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: no host memory for %" PRId64 " rows", layer, n);
    int rc = norm_hidden(m, layer, w, "input_layernorm", h, hx, e);
    if (rc == 0 && linear) /* apply_mask_to_padding_states */
        for (int64_t t = 0; t < n; t++)
            if (!b->valid_host[t])
                memset(hx + t * D, 0, (size_t)D * sizeof(float));
    if (rc == 0)
        rc = lwq_fwd_host_store(m, hx, &x, e);
    free(hx);
    if (rc == 0)
        rc = linear ? linear_attention(m, layer, w, b, &x, &out, obs, e)
                    : full_attention(m, layer, w, b, &x, &out, obs, e);
    if (rc == 0)
        rc = lwq_backend_add(m->be, h, &out, e);
    return rc < 0 ? rc : 0;
}

/* Partial rotary; the linear-attention geometry (dims > 0, value heads a multiple of key heads)
 * was checked by the config parser. */
int lwq_fwd_qwen3next_check(const lwq_model_config *c, lwq_error *e)
{
    int64_t half = (int64_t)((double)c->head_dim * c->partial_rotary_factor) / 2;
    if (half < 1 || c->rope_type != LWQ_ROPE_DEFAULT || c->linear_num_key_heads <= 0 ||
        c->linear_num_value_heads % c->linear_num_key_heads || c->linear_conv_kernel_dim <= 0)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "config (qwen3_next): needs default RoPE on at "
                        "least 2 dims (head_dim %" PRId64 " x partial_rotary_factor %g) and a "
                        "valid linear-attention geometry", c->head_dim,
                        c->partial_rotary_factor);
    return 0;
}
