/* qwen3_next layer forward against a float64 reference written here from the spec
 * (ARCHITECTURES.md "qwen3_next", transformers' Qwen3NextForCausalLM): one Gated DeltaNet layer
 * (layer 0) and one gated full-attention layer (layer 3) of a synthetic `lwq mkmodel --arch
 * qwen3_next` model, both with the MoE + gated shared expert.  The reference recurrence is the
 * plain sequential one: per value head S = S*exp(g); S += k (x) ((v - S^T k) * beta); o = S^T q.
 *
 * Batch: 2 sequences of 11 tokens, the second LEFT-padded to 7 real tokens.  The reference runs
 * each sequence alone on its real tokens (positions 0..len-1), so a padding leak shows as an
 * error on the padded sequence.  Both layers get the embedding output as input.
 *
 * Measure per sequence: max over its real tokens and dims of |ours - ref| divided by the max of
 * |ref - x| (x = the layer input), i.e. relative to the size of the layer's residual update (x
 * itself cancels), which is more sensitive than comparing whole h.
 * Bounds (measured values in the test log):
 *  - F32 activations 2e-5 (measured <= 1e-6): every step is f32 with sums over <= 128 terms, and
 *    the order of summation is the only difference; a wrong head mapping, gate, ordering or a
 *    padding leak gives > 5e-2.
 *  - BF16 gated attention 3e-2 (measured ~1e-2): ~20 rounding points of 2^-9 each.
 *  - BF16 Gated DeltaNet 0.1 (measured ~7e-2): at a sequence's first token the core output is
 *    (k.q) * beta * v; in this model k.q of the two unit vectors is -0.003 for one key head, a
 *    cancellation, and mean(o^2) ~1e-8 is below the gated norm's eps (1e-6), so the norm does not
 *    rescale it away: bf16 rounding of q and k (2^-9 relative) becomes ~10% of that token's
 *    output.  A structural error still gives > 0.5 (checked by mutating the key-head mapping).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/model/fwd_fixture.h"
#include "tests/helpers/run.h"

typedef struct refw {
    fwd_fixture *f;
    int layer;
} refw;

static double *W(refw *r, const char *suffix)
{
    char name[256];
    snprintf(name, sizeof name, "model.layers.%d.%s", r->layer, suffix);
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&r->f->ck, name);
    cr_assert_not_null(t, "no tensor %s", name);
    const lwq_tensor *v = &r->f->t[t - r->f->ck.tensors];
    int64_t n = lwq_tensor_numel(v);
    double *d = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        d[i] = lwq_load_f(v->data, v->dtype, (size_t)i);
    return d;
}

/* Qwen3-Next RMSNorm (zero-centred weight) when one_plus, else plain weight. */
static void rms(const double *x, const double *w, double eps, int64_t d, int one_plus, double *y)
{
    double ss = 0;
    for (int64_t i = 0; i < d; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / d + eps);
    for (int64_t i = 0; i < d; i++)
        y[i] = x[i] * r * (one_plus ? 1.0 + w[i] : w[i]);
}

static void lin(const double *x, const double *w, int64_t in, int64_t out, double *y)
{
    for (int64_t o = 0; o < out; o++) {
        double s = 0;
        for (int64_t i = 0; i < in; i++)
            s += x[i] * w[o * in + i];
        y[o] = s;
    }
}

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu(double x) { return x * sigm(x); }

static void l2n(double *x, int64_t d)
{
    double ss = 0;
    for (int64_t i = 0; i < d; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss + 1e-6);
    for (int64_t i = 0; i < d; i++)
        x[i] *= r;
}

/* swiglu MLP of `prefix` (gate/up/down) on one row */
static void mlp(refw *r, const char *prefix, const double *x, int64_t D, int64_t I, double *y)
{
    char n[192];
    snprintf(n, sizeof n, "%s.gate_proj.weight", prefix);
    double *wg = W(r, n);
    snprintf(n, sizeof n, "%s.up_proj.weight", prefix);
    double *wu = W(r, n);
    snprintf(n, sizeof n, "%s.down_proj.weight", prefix);
    double *wd = W(r, n);
    double *g = malloc((size_t)I * 8), *u = malloc((size_t)I * 8);
    lin(x, wg, D, I, g);
    lin(x, wu, D, I, u);
    for (int64_t i = 0; i < I; i++)
        g[i] = silu(g[i]) * u[i];
    lin(g, wd, I, D, y);
    free(wg);
    free(wu);
    free(wd);
    free(g);
    free(u);
}

/* h += moe(rms1p(h)) for one row: softmax router, top-k, renormalised, + gated shared expert */
static void moe_row(const lwq_model_config *c, refw *r, double *h)
{
    const int64_t D = c->hidden_size;
    const int E = c->num_experts, K = c->num_experts_per_tok;
    double *ln2 = W(r, "post_attention_layernorm.weight"), *wr = W(r, "mlp.gate.weight"),
           *wsg = W(r, "mlp.shared_expert_gate.weight");
    double x[512], p[64], y[512], acc[512], sg;
    rms(h, ln2, c->rms_norm_eps, D, 1, x);
    lin(x, wr, D, E, p);
    double mx = p[0], z = 0;
    for (int i = 1; i < E; i++)
        mx = fmax(mx, p[i]);
    for (int i = 0; i < E; i++)
        z += (p[i] = exp(p[i] - mx));
    for (int i = 0; i < E; i++)
        p[i] /= z;
    int chosen[64] = {0}, pick[64];
    double sum = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int i = 0; i < E; i++)
            if (!chosen[i] && (best < 0 || p[i] > p[best]))
                best = i;
        chosen[best] = 1;
        pick[k] = best;
        sum += p[best];
    }
    memset(acc, 0, sizeof acc);
    for (int k = 0; k < K; k++) {
        char pre[64];
        snprintf(pre, sizeof pre, "mlp.experts.%d", pick[k]);
        mlp(r, pre, x, D, c->moe_intermediate_size, y);
        for (int64_t d = 0; d < D; d++)
            acc[d] += p[pick[k]] / sum * y[d];
    }
    mlp(r, "mlp.shared_expert", x, D, c->shared_expert_intermediate_size, y);
    lin(x, wsg, D, 1, &sg);
    for (int64_t d = 0; d < D; d++)
        h[d] += acc[d] + sigm(sg) * y[d];
    free(ln2);
    free(wr);
    free(wsg);
}

/* Gated DeltaNet layer on T rows of one unpadded sequence; hout = layer output. */
static void ref_linear(const lwq_model_config *c, fwd_fixture *f, int layer, const double *hin,
                       int64_t T, double *hout)
{
    refw r = {f, layer};
    const int64_t D = c->hidden_size, dk = c->linear_key_head_dim, dv = c->linear_value_head_dim;
    const int nk = c->linear_num_key_heads, nv = c->linear_num_value_heads, rr = nv / nk;
    const int K = c->linear_conv_kernel_dim;
    const int64_t kd = nk * dk, vd = nv * dv, C = 2 * kd + vd, P = 2 * kd + 2 * vd;
    double *ln1 = W(&r, "input_layernorm.weight"), *wp = W(&r, "linear_attn.in_proj_qkvz.weight"),
           *wba = W(&r, "linear_attn.in_proj_ba.weight"), *wc = W(&r, "linear_attn.conv1d.weight"),
           *alog = W(&r, "linear_attn.A_log"), *dtb = W(&r, "linear_attn.dt_bias"),
           *wn = W(&r, "linear_attn.norm.weight"), *wo = W(&r, "linear_attn.out_proj.weight");
    double *mixed = calloc((size_t)(T * C), 8), *z = calloc((size_t)(T * vd), 8),
           *bb = calloc((size_t)(T * nv), 8), *aa = calloc((size_t)(T * nv), 8),
           *cv = calloc((size_t)(T * C), 8), *core = calloc((size_t)(T * vd), 8),
           *S = calloc((size_t)(dk * dv), 8), *x = malloc((size_t)D * 8),
           *pr = malloc((size_t)P * 8), *br = malloc((size_t)(2 * nv) * 8);
    for (int64_t t = 0; t < T; t++) {
        rms(hin + t * D, ln1, c->rms_norm_eps, D, 1, x);
        lin(x, wp, D, P, pr);
        lin(x, wba, D, 2 * nv, br);
        /* grouped per key head: [q, k, v (rr heads), z (rr heads)] and [b (rr), a (rr)] */
        for (int g = 0; g < nk; g++) {
            const double *pg = pr + g * (2 * dk + 2 * rr * dv);
            for (int64_t i = 0; i < dk; i++) {
                mixed[t * C + g * dk + i] = pg[i];
                mixed[t * C + kd + g * dk + i] = pg[dk + i];
            }
            for (int64_t i = 0; i < rr * dv; i++) {
                mixed[t * C + 2 * kd + g * rr * dv + i] = pg[2 * dk + i];
                z[t * vd + g * rr * dv + i] = pg[2 * dk + rr * dv + i];
            }
            for (int i = 0; i < rr; i++) {
                bb[t * nv + g * rr + i] = br[g * 2 * rr + i];
                aa[t * nv + g * rr + i] = br[g * 2 * rr + rr + i];
            }
        }
    }
    /* causal depthwise conv (F.conv1d with padding K-1, first T outputs) + SiLU */
    for (int64_t t = 0; t < T; t++)
        for (int64_t ch = 0; ch < C; ch++) {
            double s = 0;
            for (int j = 0; j < K; j++) {
                int64_t tt = t - (K - 1) + j;
                if (tt >= 0)
                    s += wc[ch * K + j] * mixed[tt * C + ch];
            }
            cv[t * C + ch] = silu(s);
        }
    for (int hv = 0; hv < nv; hv++) {
        int kh = hv / rr; /* repeat_interleave of the key heads */
        memset(S, 0, (size_t)(dk * dv) * 8);
        for (int64_t t = 0; t < T; t++) {
            double q[256], k[256], kv[256];
            const double *v = cv + t * C + 2 * kd + hv * dv;
            memcpy(q, cv + t * C + kh * dk, (size_t)dk * 8);
            memcpy(k, cv + t * C + kd + kh * dk, (size_t)dk * 8);
            l2n(q, dk);
            l2n(k, dk);
            for (int64_t i = 0; i < dk; i++)
                q[i] /= sqrt((double)dk);
            double beta = sigm(bb[t * nv + hv]);
            double a = aa[t * nv + hv] + dtb[hv];
            double g = -exp(alog[hv]) * (a > 20 ? a : log1p(exp(a)));
            for (int64_t i = 0; i < dk * dv; i++)
                S[i] *= exp(g);
            for (int64_t d = 0; d < dv; d++) {
                kv[d] = 0;
                for (int64_t i = 0; i < dk; i++)
                    kv[d] += S[i * dv + d] * k[i];
            }
            for (int64_t i = 0; i < dk; i++)
                for (int64_t d = 0; d < dv; d++)
                    S[i * dv + d] += k[i] * (v[d] - kv[d]) * beta;
            double *o = core + t * vd + hv * dv;
            for (int64_t d = 0; d < dv; d++) {
                o[d] = 0;
                for (int64_t i = 0; i < dk; i++)
                    o[d] += S[i * dv + d] * q[i];
            }
            rms(o, wn, c->rms_norm_eps, dv, 0, o);
            for (int64_t d = 0; d < dv; d++)
                o[d] *= silu(z[t * vd + hv * dv + d]);
        }
    }
    for (int64_t t = 0; t < T; t++) {
        lin(core + t * vd, wo, vd, D, hout + t * D);
        for (int64_t d = 0; d < D; d++)
            hout[t * D + d] += hin[t * D + d];
        moe_row(c, &r, hout + t * D);
    }
    double *all[] = {ln1, wp, wba, wc, alog, dtb, wn, wo, mixed, z, bb, aa, cv, core, S, x, pr, br};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* Gated full-attention layer on T rows of one unpadded sequence. */
static void ref_full(const lwq_model_config *c, fwd_fixture *f, int layer, const double *hin,
                     int64_t T, double *hout)
{
    refw r = {f, layer};
    const int64_t D = c->hidden_size, hd = c->head_dim;
    const int H = c->num_attention_heads, KV = c->num_key_value_heads;
    const int64_t rot = 2 * ((int64_t)(hd * c->partial_rotary_factor) / 2), half = rot / 2;
    double *ln1 = W(&r, "input_layernorm.weight"), *wq = W(&r, "self_attn.q_proj.weight"),
           *wk = W(&r, "self_attn.k_proj.weight"), *wv = W(&r, "self_attn.v_proj.weight"),
           *wo = W(&r, "self_attn.o_proj.weight"), *qn = W(&r, "self_attn.q_norm.weight"),
           *kn = W(&r, "self_attn.k_norm.weight");
    double *q = malloc((size_t)(T * H * hd) * 8), *gate = malloc((size_t)(T * H * hd) * 8),
           *k = malloc((size_t)(T * KV * hd) * 8), *v = malloc((size_t)(T * KV * hd) * 8),
           *a = malloc((size_t)(T * H * hd) * 8), *qf = malloc((size_t)(2 * H * hd) * 8),
           *x = malloc((size_t)D * 8), *s = malloc((size_t)T * 8);
    for (int64_t t = 0; t < T; t++) {
        rms(hin + t * D, ln1, c->rms_norm_eps, D, 1, x);
        lin(x, wq, D, 2 * H * hd, qf);
        lin(x, wk, D, KV * hd, k + t * KV * hd);
        lin(x, wv, D, KV * hd, v + t * KV * hd);
        for (int h = 0; h < H + KV; h++) {
            double *dst = h < H ? q + (t * H + h) * hd : k + (t * KV + h - H) * hd;
            if (h < H) {
                memcpy(dst, qf + h * 2 * hd, (size_t)hd * 8);
                memcpy(gate + (t * H + h) * hd, qf + h * 2 * hd + hd, (size_t)hd * 8);
            }
            rms(dst, h < H ? qn : kn, c->rms_norm_eps, hd, 1, dst);
            for (int64_t i = 0; i < half; i++) {
                double ang = (double)t * pow(c->rope_theta, -(double)(2 * i) / (double)rot);
                double x1 = dst[i], x2 = dst[i + half];
                dst[i] = x1 * cos(ang) - x2 * sin(ang);
                dst[i + half] = x2 * cos(ang) + x1 * sin(ang);
            }
        }
    }
    for (int64_t t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            int g = h / (H / KV);
            double mx = -INFINITY, zs = 0;
            for (int64_t j = 0; j <= t; j++) {
                double d = 0;
                for (int64_t i = 0; i < hd; i++)
                    d += q[(t * H + h) * hd + i] * k[(j * KV + g) * hd + i];
                s[j] = d / sqrt((double)hd);
                mx = fmax(mx, s[j]);
            }
            for (int64_t j = 0; j <= t; j++)
                zs += exp(s[j] - mx);
            for (int64_t i = 0; i < hd; i++) {
                double o = 0;
                for (int64_t j = 0; j <= t; j++)
                    o += exp(s[j] - mx) / zs * v[(j * KV + g) * hd + i];
                a[(t * H + h) * hd + i] = o * sigm(gate[(t * H + h) * hd + i]);
            }
        }
    for (int64_t t = 0; t < T; t++) {
        lin(a + t * H * hd, wo, H * hd, D, hout + t * D);
        for (int64_t d = 0; d < D; d++)
            hout[t * D + d] += hin[t * D + d];
        moe_row(c, &r, hout + t * D);
    }
    double *all[] = {ln1, wq, wk, wv, wo, qn, kn, q, gate, k, v, a, qf, x, s};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

TestSuite(forward_qwen3next, .init = lwqt_setup, .fini = lwqt_teardown);

static void make_model(const char *dtype)
{
    const char *args[] = {"mkmodel", lwqt_path("m"), "--arch", "qwen3_next", "--hidden", "64",
                          "--layers", "4", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
                          "--experts", "4", "--top-k", "2", "--moe-intermediate", "32",
                          "--shared-intermediate", "48", "--linear-key-heads", "2",
                          "--linear-value-heads", "4", "--linear-key-dim", "16",
                          "--linear-value-dim", "8", "--vocab", "300", "--dtype", dtype,
                          "--seed", "7", "--weight-std", "0.15", "--quiet", NULL};
    cr_assert_eq(lwqt_run(args), 0, "mkmodel failed");
}

static void run(const char *dtype, lwq_dtype act, int layer, double bound)
{
    make_model(dtype);
    lwq_error e = {0};
    lwq_backend be;
    fwd_fixture f;
    cr_assert_eq(lwq_backend_cpu_create(&be, 2, &e), 0);
    cr_assert_eq(fwd_fixture_open(&f, lwqt_path("m"), NULL, &e), 0, "%s", e.msg);
    const lwq_model_config *c = &f.ck.cfg;
    cr_assert_eq(lwq_config_layer_mixer(c, layer) == LWQ_MIXER_GDN, layer != 3);
    lwq_model m;
    cr_assert_eq(lwq_model_init(&m, c, &be, act, &e), 0, "%s", e.msg);
    const int64_t B = 2, T = 11, D = c->hidden_size, lens[2] = {11, 7};
    lwq_batch b;
    cr_assert_eq(lwq_batch_init(&b, &be, B, T, lens, &e), 0, "%s", e.msg);
    int32_t tok[22];
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 37 + 11) % (int)c->vocab_size;
    int64_t shape[2] = {B * T, D};
    lwq_tensor h;
    cr_assert_eq(lwq_backend_tensor_alloc(&be, act, 2, shape, &h, &e), 0);
    cr_assert_eq(lwq_model_embed(&m, &f.w, tok, &h, &e), 0, "%s", e.msg);
    double *in = malloc((size_t)(B * T * D) * 8), *ref = malloc((size_t)(T * D) * 8);
    for (int64_t i = 0; i < B * T * D; i++)
        in[i] = lwq_load_f(h.data, act, (size_t)i);
    cr_assert_eq(lwq_model_layer_forward(&m, layer, &f.w, &b, &h, NULL, &e), 0, "%s", e.msg);
    double worst = 0;
    for (int s = 0; s < B; s++) {
        int64_t pad = T - lens[s];
        const double *x = in + (s * T + pad) * D;
        if (layer == 3)
            ref_full(c, &f, layer, x, lens[s], ref);
        else
            ref_linear(c, &f, layer, x, lens[s], ref);
        double num = 0, den = 0;
        for (int64_t t = 0; t < lens[s]; t++)
            for (int64_t d = 0; d < D; d++) {
                double ours = lwq_load_f(h.data, act, (size_t)((s * T + pad + t) * D + d));
                num = fmax(num, fabs(ours - ref[t * D + d]));
                den = fmax(den, fabs(ref[t * D + d] - x[t * D + d]));
            }
        cr_assert_gt(den, 0);
        worst = fmax(worst, num / den);
        cr_assert_lt(num / den, bound, "%s layer %d sequence %d: relative error %.3g (bound %g)",
                     dtype, layer, s, num / den, bound);
    }
    fprintf(stderr, "qwen3_next %s layer %d (%s): max relative error of the residual update "
            "%.3g\n", dtype, layer, layer == 3 ? "full attention" : "Gated DeltaNet", worst);
    free(in);
    free(ref);
    lwq_backend_tensor_free(&be, &h);
    lwq_batch_free(&b, &be);
    lwq_model_free(&m);
    fwd_fixture_free(&f);
    lwq_backend_destroy(&be);
}

Test(forward_qwen3next, gated_deltanet_layer_matches_f64_reference_f32)
{
    run("f32", LWQ_F32, 0, 2e-5);
}

Test(forward_qwen3next, gated_attention_layer_matches_f64_reference_f32)
{
    run("f32", LWQ_F32, 3, 2e-5);
}

Test(forward_qwen3next, gated_deltanet_layer_matches_f64_reference_bf16)
{
    run("bf16", LWQ_BF16, 1, 0.1);
}

Test(forward_qwen3next, gated_attention_layer_matches_f64_reference_bf16)
{
    run("bf16", LWQ_BF16, 3, 3e-2);
}

/* A weight source that hides or reshapes one tensor of the fixture. */
typedef struct bad_src {
    fwd_fixture *f;
    const char *name;
    int drop;
} bad_src;

static int bad_get(void *ctx, const char *name, lwq_tensor *out, lwq_error *e)
{
    bad_src *b = ctx;
    if (!strcmp(name, b->name) && b->drop)
        return LWQ_ENOENT;
    int rc = b->f->w.get(b->f->w.ctx, name, out, e);
    if (rc == 0 && !strcmp(name, b->name))
        out->shape[out->ndim - 1] -= 1; /* a view that claims one element less per row */
    return rc;
}

static void expect_refusal(const char *tensor, int drop, int rc_want, const char *msg)
{
    make_model("f32");
    lwq_error e = {0};
    lwq_backend be;
    fwd_fixture f;
    cr_assert_eq(lwq_backend_cpu_create(&be, 1, &e), 0);
    cr_assert_eq(fwd_fixture_open(&f, lwqt_path("m"), NULL, &e), 0, "%s", e.msg);
    lwq_model m;
    cr_assert_eq(lwq_model_init(&m, &f.ck.cfg, &be, LWQ_F32, &e), 0, "%s", e.msg);
    lwq_batch b;
    cr_assert_eq(lwq_batch_init(&b, &be, 1, 4, NULL, &e), 0, "%s", e.msg);
    int64_t shape[2] = {4, f.ck.cfg.hidden_size};
    lwq_tensor h;
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_F32, 2, shape, &h, &e), 0);
    int32_t tok[4] = {1, 2, 3, 4};
    cr_assert_eq(lwq_model_embed(&m, &f.w, tok, &h, &e), 0, "%s", e.msg);
    bad_src bs = {&f, tensor, drop};
    lwq_weights w = {bad_get, &bs};
    cr_assert_eq(lwq_model_layer_forward(&m, 0, &w, &b, &h, NULL, &e), rc_want, "%s", e.msg);
    cr_assert(strstr(e.msg, msg), "message: %s", e.msg);
    lwq_backend_tensor_free(&be, &h);
    lwq_batch_free(&b, &be);
    lwq_model_free(&m);
    fwd_fixture_free(&f);
    lwq_backend_destroy(&be);
}

Test(forward_qwen3next, missing_conv1d_weight_is_named)
{
    expect_refusal("model.layers.0.linear_attn.conv1d.weight", 1, LWQ_ENOENT,
                   "layer 0: tensor model.layers.0.linear_attn.conv1d.weight is missing");
}

Test(forward_qwen3next, misshaped_conv1d_weight_is_named)
{
    expect_refusal("model.layers.0.linear_attn.conv1d.weight", 0, LWQ_EFORMAT,
                   "tensor model.layers.0.linear_attn.conv1d.weight must be a contiguous float "
                   "[96, 1, 4] on the cpu device (got F32, 3 dims [96, 1, 3])");
}

Test(forward_qwen3next, misshaped_a_log_is_named)
{
    expect_refusal("model.layers.0.linear_attn.A_log", 0, LWQ_EFORMAT,
                   "layer 0: tensor model.layers.0.linear_attn.A_log has shape (3), expected (4)");
}

/* The head: model.norm is a (1 + w) norm too, then lm_head. */
Test(forward_qwen3next, head_uses_the_zero_centred_final_norm)
{
    make_model("f32");
    lwq_error e = {0};
    lwq_backend be;
    fwd_fixture f;
    cr_assert_eq(lwq_backend_cpu_create(&be, 1, &e), 0);
    cr_assert_eq(fwd_fixture_open(&f, lwqt_path("m"), NULL, &e), 0, "%s", e.msg);
    const lwq_model_config *c = &f.ck.cfg;
    lwq_model m;
    cr_assert_eq(lwq_model_init(&m, c, &be, LWQ_F32, &e), 0, "%s", e.msg);
    const int64_t n = 5, D = c->hidden_size, V = c->vocab_size;
    int64_t sh[2] = {n, D}, sl[2] = {n, V};
    lwq_tensor h, logits;
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_F32, 2, sh, &h, &e), 0);
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_F32, 2, sl, &logits, &e), 0);
    int32_t tok[5] = {3, 14, 15, 92, 65};
    cr_assert_eq(lwq_model_embed(&m, &f.w, tok, &h, &e), 0, "%s", e.msg);
    double *x = malloc((size_t)(n * D) * 8), *y = malloc((size_t)D * 8), *ref = malloc((size_t)V * 8);
    for (int64_t i = 0; i < n * D; i++)
        x[i] = ((float *)h.data)[i];
    cr_assert_eq(lwq_model_head(&m, &f.w, &h, &logits, &e), 0, "%s", e.msg);
    const lwq_ckpt_tensor *tn = lwq_ckpt_find(&f.ck, "model.norm.weight"),
                          *th = lwq_ckpt_find(&f.ck, "lm_head.weight");
    const float *wn = f.t[tn - f.ck.tensors].data, *wh = f.t[th - f.ck.tensors].data;
    double wnd[512], worst = 0;
    for (int64_t d = 0; d < D; d++)
        wnd[d] = wn[d];
    for (int64_t t = 0; t < n; t++) {
        rms(x + t * D, wnd, c->rms_norm_eps, D, 1, y);
        double num = 0, den = 0;
        for (int64_t v = 0; v < V; v++) {
            double s = 0;
            for (int64_t d = 0; d < D; d++)
                s += y[d] * wh[v * D + d];
            num = fmax(num, fabs(s - ((float *)logits.data)[t * V + v]));
            den = fmax(den, fabs(s));
        }
        worst = fmax(worst, num / den);
    }
    cr_assert_lt(worst, 1e-5, "head logits relative error %.3g", worst);
    free(x);
    free(y);
    free(ref);
    lwq_backend_tensor_free(&be, &h);
    lwq_backend_tensor_free(&be, &logits);
    lwq_model_free(&m);
    fwd_fixture_free(&f);
    lwq_backend_destroy(&be);
}
