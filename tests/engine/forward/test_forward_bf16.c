/* Layer outputs of the BF16 fixtures (mlxd-tiny-llama3-bf16: llama3 rope scaling, GQA;
 * mlxd-tiny-qwen3-bf16: q/k norm) against a float64 reference written here from the
 * transformers formulas (ARCHITECTURES.md), layer by layer: each layer's reference gets the same
 * input as ours (our previous layer's output), so the bound is per layer, not compounded.
 * A batch of 2 sequences, the second left-padded, checks real rows only.
 *
 * Error measure per token: max_d |ours - ref| / max_d |ref|.
 * Bounds: F32 activations 1e-5 (f32 rounding of ~15 ops with sums over <= 128 terms: ~1e-6);
 * BF16 activations 3e-2: every op rounds its output to 8 significant bits (2^-9 = 2e-3
 * relative); the residual add, the attention/MLP outputs and the two norms each contribute one
 * or two such roundings relative to the hidden state's scale, and GEMM inputs carry the
 * previous roundings into sums, so a handful of 2e-3 errors (~1e-2) is expected; 3e-2 flags
 * anything structurally wrong (a skipped rounding costs nothing, a wrong rope or norm >> 1e-1). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/model/fwd_fixture.h"

typedef struct refw {
    fwd_fixture *f;
    int layer;
} refw;

/* Weight as doubles (malloc'd). */
static double *W(refw *r, const char *suffix, int64_t *numel)
{
    char name[256];
    snprintf(name, sizeof name, "model.layers.%d.%s", r->layer, suffix);
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&r->f->ck, name);
    if (!t)
        return NULL;
    const lwq_tensor *v = &r->f->t[t - r->f->ck.tensors];
    int64_t n = lwq_tensor_numel(v);
    double *d = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        d[i] = lwq_load_f(v->data, v->dtype, (size_t)i);
    if (numel)
        *numel = n;
    return d;
}

static void rms(const double *x, const double *w, double eps, int64_t d, double *y)
{
    double ss = 0;
    for (int64_t i = 0; i < d; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / d + eps);
    for (int64_t i = 0; i < d; i++)
        y[i] = x[i] * r * w[i];
}

static void lin(const double *x, const double *w, const double *b, int64_t in, int64_t out,
                double *y)
{
    for (int64_t o = 0; o < out; o++) {
        double s = b ? b[o] : 0;
        for (int64_t i = 0; i < in; i++)
            s += x[i] * w[o * in + i];
        y[o] = s;
    }
}

/* inv_freq in double, transformers' default / llama3 formulas. */
static void inv_freq64(const lwq_model_config *c, double *inv)
{
    int64_t d = c->head_dim;
    for (int64_t i = 0; i < d / 2; i++) {
        double f = 1.0 / pow(c->rope_theta, (double)(2 * i) / d);
        if (c->rope_type == LWQ_ROPE_LLAMA3) {
            double old = c->rope_original_max_position, lo = c->rope_low_freq_factor,
                   hi = c->rope_high_freq_factor, fac = c->rope_factor;
            double wl = 2 * M_PI / f;
            if (wl < old / hi) {
            } else if (wl > old / lo) {
                f = f / fac;
            } else {
                double s = (old / wl - lo) / (hi - lo);
                f = (1 - s) * f / fac + s * f;
            }
        }
        inv[i] = f;
    }
}

static void rope64(double *x, int64_t hd, const double *inv, int pos)
{
    for (int64_t i = 0; i < hd / 2; i++) {
        double a = pos * inv[i], x1 = x[i], x2 = x[i + hd / 2];
        x[i] = x1 * cos(a) - x2 * sin(a);
        x[i + hd / 2] = x2 * cos(a) + x1 * sin(a);
    }
}

/* One decoder layer in float64 on T rows (one unpadded sequence, positions 0..T-1). */
static void ref_layer(const lwq_model_config *c, fwd_fixture *f, int layer, const double *hin,
                      int64_t T, double *hout)
{
    refw r = {f, layer};
    const int64_t D = c->hidden_size, hd = c->head_dim, I = c->intermediate_size;
    const int H = c->num_attention_heads, KV = c->num_key_value_heads;
    double *ln1 = W(&r, "input_layernorm.weight", NULL), *ln2 = W(&r,
                                                                  "post_attention_layernorm.weight",
                                                                  NULL);
    double *wq = W(&r, "self_attn.q_proj.weight", NULL), *wk = W(&r, "self_attn.k_proj.weight", NULL),
           *wv = W(&r, "self_attn.v_proj.weight", NULL), *wo = W(&r, "self_attn.o_proj.weight", NULL);
    double *qn = W(&r, "self_attn.q_norm.weight", NULL), *kn = W(&r, "self_attn.k_norm.weight", NULL);
    double *wg = W(&r, "mlp.gate_proj.weight", NULL), *wu = W(&r, "mlp.up_proj.weight", NULL),
           *wd = W(&r, "mlp.down_proj.weight", NULL);
    double *inv = malloc((size_t)hd / 2 * sizeof(double));
    inv_freq64(c, inv);
    double *x = malloc((size_t)(T * D) * 8), *q = malloc((size_t)(T * H * hd) * 8),
           *k = malloc((size_t)(T * KV * hd) * 8), *v = malloc((size_t)(T * KV * hd) * 8),
           *a = malloc((size_t)(T * H * hd) * 8), *g = malloc((size_t)I * 8),
           *u = malloc((size_t)I * 8), *s = malloc((size_t)T * 8), *tmp = malloc((size_t)D * 8);
    for (int64_t t = 0; t < T; t++) {
        rms(hin + t * D, ln1, c->rms_norm_eps, D, x + t * D);
        lin(x + t * D, wq, NULL, D, H * hd, q + t * H * hd);
        lin(x + t * D, wk, NULL, D, KV * hd, k + t * KV * hd);
        lin(x + t * D, wv, NULL, D, KV * hd, v + t * KV * hd);
        for (int h = 0; h < H; h++) {
            if (qn)
                rms(q + t * H * hd + h * hd, qn, c->rms_norm_eps, hd, q + t * H * hd + h * hd);
            rope64(q + t * H * hd + h * hd, hd, inv, (int)t);
        }
        for (int h = 0; h < KV; h++) {
            if (kn)
                rms(k + t * KV * hd + h * hd, kn, c->rms_norm_eps, hd, k + t * KV * hd + h * hd);
            rope64(k + t * KV * hd + h * hd, hd, inv, (int)t);
        }
    }
    for (int64_t t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            int g2 = h / (H / KV);
            double mx = -INFINITY, z = 0;
            for (int64_t j = 0; j <= t; j++) {
                double d = 0;
                for (int64_t i = 0; i < hd; i++)
                    d += q[t * H * hd + h * hd + i] * k[j * KV * hd + g2 * hd + i];
                s[j] = d / sqrt((double)hd);
                mx = fmax(mx, s[j]);
            }
            for (int64_t j = 0; j <= t; j++)
                z += exp(s[j] - mx);
            for (int64_t i = 0; i < hd; i++) {
                double o = 0;
                for (int64_t j = 0; j <= t; j++)
                    o += exp(s[j] - mx) / z * v[j * KV * hd + g2 * hd + i];
                a[t * H * hd + h * hd + i] = o;
            }
        }
    for (int64_t t = 0; t < T; t++) {
        double *ho = hout + t * D;
        lin(a + t * H * hd, wo, NULL, H * hd, D, ho);
        for (int64_t i = 0; i < D; i++)
            ho[i] += hin[t * D + i];
        rms(ho, ln2, c->rms_norm_eps, D, tmp);
        lin(tmp, wg, NULL, D, I, g);
        lin(tmp, wu, NULL, D, I, u);
        for (int64_t i = 0; i < I; i++)
            g[i] = g[i] / (1 + exp(-g[i])) * u[i];
        lin(g, wd, NULL, I, D, tmp);
        for (int64_t i = 0; i < D; i++)
            ho[i] += tmp[i];
    }
    double *all[] = {ln1, ln2, wq, wk, wv, wo, qn, kn, wg, wu, wd, inv, x, q, k, v, a, g, u, s, tmp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static void run(const char *fixture, lwq_dtype act, double bound)
{
    char dir[1024];
    lwq_error e = {0};
    lwq_backend be;
    fwd_fixture f;
    cr_assert_eq(lwq_backend_cpu_create(&be, 2, &e), 0);
    cr_assert_eq(fwd_fixture_open(&f, fwd_fixture_dir(fixture, dir, sizeof dir), NULL, &e), 0,
                 "%s", e.msg);
    const lwq_model_config *c = &f.ck.cfg;
    cr_assert_eq(c->dtype, LWQ_BF16);
    lwq_model m;
    cr_assert_eq(lwq_model_init(&m, c, &be, act, &e), 0, "%s", e.msg);
    const int64_t B = 2, T = 24, D = c->hidden_size, lens[2] = {24, 17};
    lwq_batch b;
    cr_assert_eq(lwq_batch_init(&b, &be, B, T, lens, &e), 0, "%s", e.msg);
    int32_t tok[48];
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 37 + 11) % (int)c->vocab_size;
    int64_t shape[2] = {B * T, D};
    lwq_tensor h;
    cr_assert_eq(lwq_backend_tensor_alloc(&be, act, 2, shape, &h, &e), 0);
    cr_assert_eq(lwq_model_embed(&m, &f.w, tok, &h, &e), 0, "%s", e.msg);
    double *hin = malloc((size_t)(T * D) * 8), *ref = malloc((size_t)(T * D) * 8);
    for (int layer = 0; layer < c->num_hidden_layers; layer++) {
        double *in_all = malloc((size_t)(B * T * D) * 8);
        for (int64_t i = 0; i < B * T * D; i++)
            in_all[i] = lwq_load_f(h.data, act, (size_t)i);
        cr_assert_eq(lwq_model_layer_forward(&m, layer, &f.w, &b, &h, NULL, &e), 0, "%s", e.msg);
        double worst = 0;
        for (int64_t s = 0; s < B; s++) {
            int64_t pad = T - lens[s];
            memcpy(hin, in_all + (s * T + pad) * D, (size_t)(lens[s] * D) * 8);
            ref_layer(c, &f, layer, hin, lens[s], ref);
            for (int64_t t = 0; t < lens[s]; t++) {
                double scale = 0, err = 0;
                for (int64_t d = 0; d < D; d++) {
                    double ours = lwq_load_f(h.data, act, (size_t)((s * T + pad + t) * D + d));
                    scale = fmax(scale, fabs(ref[t * D + d]));
                    err = fmax(err, fabs(ours - ref[t * D + d]));
                }
                worst = fmax(worst, err / scale);
            }
        }
        fprintf(stderr, "%s layer %d (%s activations): max relative error %.3g\n", fixture, layer,
                lwq_dtype_name(act), worst);
        cr_assert(worst <= bound, "%s layer %d: error %.3g exceeds %.1g", fixture, layer, worst,
                  bound);
        free(in_all);
    }
    free(hin);
    free(ref);
    lwq_backend_tensor_free(&be, &h);
    lwq_batch_free(&b, &be);
    lwq_model_free(&m);
    fwd_fixture_free(&f);
    lwq_backend_destroy(&be);
}

Test(forward_bf16, llama3_bf16_activations) { run("mlxd-tiny-llama3-bf16", LWQ_BF16, 3e-2); }
Test(forward_bf16, llama3_f32_activations) { run("mlxd-tiny-llama3-bf16", LWQ_F32, 1e-5); }
Test(forward_bf16, qwen3_bf16_activations) { run("mlxd-tiny-qwen3-bf16", LWQ_BF16, 3e-2); }
Test(forward_bf16, qwen3_f32_activations) { run("mlxd-tiny-qwen3-bf16", LWQ_F32, 1e-5); }
/* F16 activations (11-bit significands, 2^-12 relative per rounding): same reasoning, 16x
 * tighter than BF16: 5e-3. */
Test(forward_bf16, qwen3_f16_activations) { run("mlxd-tiny-qwen3-bf16", LWQ_F16, 5e-3); }
