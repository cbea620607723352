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
 * Where it runs: GEMMs on the backend; the conv, scan and gated norm on the host in float32 (as
 * model_qwen3next.c does for the DeltaNet, and for the same reason: one definition of a
 * recurrence for every backend). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "engine/forward/forward_internal.h"

static float *fbuf(int64_t n) { return (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); }

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
/* torch.nn.functional.softplus (beta 1, threshold 20) */
static inline float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* ---- Mamba2 ------------------------------------------------------------------------------------- */

typedef struct mamba_job {
    const lwq_batch *b;
    int64_t T, I, C, P, N, H, G, K; /* seq, inner, conv channels, head dim, state, heads, groups, kernel */
    lwq_dtype dt;
    float eps, dt_min;
    const float *proj;  /* (n, I + C + H): z, xBC, dt */
    const float *wc, *bc; /* conv (C, K), bias (C) or NULL */
    const float *alog, *dtb, *dd, *wn; /* (H), (H), (H), (I) */
    float *xbc;         /* (n, C): silu(conv) */
    float *dts;         /* (n, H): dt after softplus and clamp */
    float *y;           /* (n, I): scan output, then the gated norm's */
    float *scratch;     /* per thread: S (P x N) */
} mamba_job;

/* Causal depthwise conv + bias + SiLU of sequences [s0, s1), and dt; padded rows are 0. */
static void mamba_conv(void *ctx, int64_t s0, int64_t s1, int tid)
{
    (void)tid;
    mamba_job *j = (mamba_job *)ctx;
    const int64_t T = j->T, C = j->C, K = j->K, W = j->I + j->C + j->H;
    for (int64_t s = s0; s < s1; s++)
        for (int64_t t = 0; t < T; t++) {
            const int64_t row = s * T + t;
            float *o = j->xbc + row * C, *d = j->dts + row * j->H;
            if (!j->b->valid_host[row]) {
                memset(o, 0, (size_t)C * sizeof(float));
                memset(d, 0, (size_t)j->H * sizeof(float));
                continue;
            }
            for (int64_t ch = 0; ch < C; ch++) {
                float acc = j->bc ? j->bc[ch] : 0.0f;
                for (int64_t q = 0; q < K; q++) {
                    int64_t tt = t - (K - 1) + q;
                    if (tt < 0 || !j->b->valid_host[s * T + tt])
                        continue; /* zero history (a padded row's input is zero) */
                    acc += j->wc[ch * K + q] * j->proj[(s * T + tt) * W + j->I + ch];
                }
                float v = lwq_round_to(acc, j->dt);
                o[ch] = lwq_round_to(v * sigmoidf(v), j->dt);
            }
            const float *dr = j->proj + row * W + j->I + C;
            for (int64_t hh = 0; hh < j->H; hh++) {
                float v = lwq_round_to(softplusf(lwq_round_to(dr[hh] + j->dtb[hh], j->dt)), j->dt);
                float lo = lwq_round_to(j->dt_min, j->dt);
                d[hh] = v < lo ? lo : v;
            }
        }
}

/* Items [i0, i1) of (sequence, head): the sequential scan from a zero state. */
static void mamba_scan(void *ctx, int64_t i0, int64_t i1, int tid)
{
    mamba_job *j = (mamba_job *)ctx;
    const int64_t T = j->T, P = j->P, N = j->N, C = j->C, I = j->I;
    float *S = j->scratch + (int64_t)tid * (P * N);
    for (int64_t it = i0; it < i1; it++) {
        const int64_t s = it / j->H, hh = it % j->H, g = hh / (j->H / j->G);
        const float A = -expf(j->alog[hh]), D = j->dd[hh];
        memset(S, 0, (size_t)(P * N) * sizeof(float));
        for (int64_t t = 0; t < T; t++) {
            const int64_t row = s * T + t;
            float *y = j->y + row * I + hh * P;
            if (!j->b->valid_host[row]) {
                memset(y, 0, (size_t)P * sizeof(float));
                continue;
            }
            const float *xr = j->xbc + row * C, *x = xr + hh * P, *B = xr + I + g * N, *Cm = xr + I + j->G * N + g * N;
            const float dtv = j->dts[row * j->H + hh];
            const float decay = expf(A * dtv);
            for (int64_t p = 0; p < P; p++) {
                float *restrict Sp = S + p * N;
                const float xd = x[p] * dtv;
                float acc = 0.0f;
                for (int64_t k = 0; k < N; k++) {
                    Sp[k] = Sp[k] * decay + xd * B[k];
                    acc += Sp[k] * Cm[k];
                }
                y[p] = acc + D * x[p];
            }
        }
    }
}

/* Rows [r0, r1): y = (y * silu(z)) normalised per group, times the norm weight (float32). */
static void mamba_norm(void *ctx, int64_t r0, int64_t r1, int tid)
{
    (void)tid;
    mamba_job *j = (mamba_job *)ctx;
    const int64_t I = j->I, gs = I / j->G, W = j->I + j->C + j->H;
    for (int64_t row = r0; row < r1; row++) {
        float *y = j->y + row * I;
        if (!j->b->valid_host[row])
            continue;
        const float *z = j->proj + row * W;
        for (int64_t i = 0; i < I; i++)
            y[i] = y[i] * (z[i] * sigmoidf(z[i]));
        for (int64_t g = 0; g < j->G; g++) {
            float *yg = y + g * gs, ss = 0.0f;
            for (int64_t i = 0; i < gs; i++)
                ss += yg[i] * yg[i];
            const float r = 1.0f / sqrtf(ss / (float)gs + j->eps);
            for (int64_t i = 0; i < gs; i++)
                yg[i] = j->wn[g * gs + i] * (yg[i] * r);
        }
    }
}

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
    lwq_tensor win, wout, wconv, bconv, proj, xbc_t, core;
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
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, W, &proj, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, C, &xbc_t, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, I, &core, e));
    LWQ_TRY(lwq_fwd_observe(obs, layer, min, x, &b->valid, e));
    LWQ_TRY(lwq_backend_gemm(m->be, x, &win, NULL, &proj, e));

    const int threads = lwq_parallel_threads();
    mamba_job j = {.b = b, .T = b->seq, .I = I, .C = C, .P = P, .N = N, .H = H, .G = G, .K = K, .dt = m->act,
                   .eps = (float)c->rms_norm_eps, .dt_min = (float)c->time_step_min};
    float *hp = fbuf(n * W), *hx = fbuf(n * C), *hd = fbuf(n * H), *hy = fbuf(n * I), *wc = fbuf(C * K),
          *bc = c->mamba_conv_bias ? fbuf(C) : NULL, *alog = NULL, *dtb = NULL, *dd = NULL, *wn = NULL,
          *scratch = fbuf((int64_t)(threads > 0 ? threads : 1) * P * N);
    int rc = 0;
    if (!hp || !hx || !hd || !hy || !wc || (c->mamba_conv_bias && !bc) || !scratch) {
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: no host memory for the Mamba2 mixer of %" PRId64 " tokens", layer, n);
        goto out;
    }
    snprintf(nm, sizeof nm, "model.layers.%d.mixer.A_log", layer);
    if ((rc = lwq_fwd_host_weight(m, w, layer, nm, 1, H, 0, &alog, e)) < 0)
        goto out;
    snprintf(nm, sizeof nm, "model.layers.%d.mixer.dt_bias", layer);
    if ((rc = lwq_fwd_host_weight(m, w, layer, nm, 1, H, 0, &dtb, e)) < 0)
        goto out;
    snprintf(nm, sizeof nm, "model.layers.%d.mixer.D", layer);
    if ((rc = lwq_fwd_host_weight(m, w, layer, nm, 1, H, 0, &dd, e)) < 0)
        goto out;
    snprintf(nm, sizeof nm, "model.layers.%d.mixer.norm.weight", layer);
    if ((rc = lwq_fwd_host_weight(m, w, layer, nm, 1, I, 0, &wn, e)) < 0 ||
        (rc = lwq_fwd_host_fetch(m, &wconv, C * K, wc, e)) < 0 ||
        (bc && (rc = lwq_fwd_host_fetch(m, &bconv, C, bc, e)) < 0) ||
        (rc = lwq_fwd_host_fetch(m, &proj, n * W, hp, e)) < 0)
        goto out;
    /* a padded row's projection is that of a zero input: 0 (no in_proj bias) */
    for (int64_t t = 0; t < n; t++)
        if (!b->valid_host[t])
            memset(hp + t * W, 0, (size_t)W * sizeof(float));
    /* the conv1d's input, for a recipe that quantizes it (Model Optimizer's presets do not) */
    for (int64_t t = 0; t < n; t++)
        memcpy(hx + t * C, hp + t * W + I, (size_t)C * sizeof(float));
    if ((rc = lwq_fwd_host_store(m, hx, &xbc_t, e)) < 0 ||
        (rc = lwq_fwd_observe(obs, layer, mconv, &xbc_t, &b->valid, e)) < 0)
        goto out;
    j.proj = hp;
    j.wc = wc;
    j.bc = bc;
    j.alog = alog;
    j.dtb = dtb;
    j.dd = dd;
    j.wn = wn;
    j.xbc = hx;
    j.dts = hd;
    j.y = hy;
    j.scratch = scratch;
    lwq_parallel_for(b->batch, 1, mamba_conv, &j);
    lwq_parallel_for(b->batch * H, 1, mamba_scan, &j);
    lwq_parallel_for(n, 16, mamba_norm, &j);
    if ((rc = lwq_fwd_host_store(m, hy, &core, e)) < 0 ||
        (rc = lwq_fwd_observe(obs, layer, mout, &core, &b->valid, e)) < 0)
        goto out;
    rc = lwq_backend_gemm(m->be, &core, &wout, NULL, out, e);
out:
    free(hp);
    free(hx);
    free(hd);
    free(hy);
    free(wc);
    free(bc);
    free(alog);
    free(dtb);
    free(dd);
    free(wn);
    free(scratch);
    return rc;
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
