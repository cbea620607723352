/* DeepSeek-V3 decoder layer (MLA with the q_lora path, yarn RoPE with mscale, sigmoid routing
 * with e_score_correction_bias and group-limited top-k, shared expert) against a float64
 * reference written here from transformers' modeling_deepseek_v3.py, on a synthetic model with
 * random weights; and a DeepSeek-V2 layer (q_proj path, plain RoPE, softmax scores with
 * "group_limited_greedy": groups ranked by their best score, no renormalisation).  The reference uses the interleaved RoPE pairs (2i, 2i+1) directly (the
 * forward de-interleaves), the v_head_dim (12) differs from the q/k head (16), and the batch is
 * left-padded.
 *
 * Bound: F32 activations, every op f32 with f32 accumulation over <= 64 terms, about 20 ops in
 * sequence with O(1) activations: a few 1e-6 relative; 1e-4 of max(1, |h|) leaves margin while a
 * semantic slip (RoPE pairing, eps of the LoRA norms, mscale, bias used in the weights, the fill
 * of the masked groups: -inf for V3 as transformers 5.14.1's DeepseekV3TopkRouter has it, 0.0 for
 * V2's group_limited_greedy) moves outputs by 1e-2 or more.  Routing decisions in the
 * reference are checked to have a margin (1e-3 V3, 1e-5 V2 probabilities), far above f32's
 * ~1e-7 error there, so f32 vs f64 cannot flip them. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/forward.h"
#include "layout/arch.h"

#define D 32
#define H 4
#define NOPE 8
#define ROPE 8
#define QK (NOPE + ROPE)
#define VD 12
#define QR 24
#define KVR 16
#define E 16
#define NG 4
#define TG 2
#define K 4
#define MI 8
#define B 2
#define T 8
#define N (B * T)
#define RSF 2.5
#define FACTOR 4.0
#define MSCALE 1.0
#define MSCALE_ALL 0.8
#define ORIG 4096.0

static const char *CONFIG =
    "{\"model_type\":\"deepseek_v3\",\"hidden_size\":32,\"num_hidden_layers\":2,"
    "\"num_attention_heads\":4,\"num_key_value_heads\":4,\"vocab_size\":10,"
    "\"intermediate_size\":24,\"n_routed_experts\":16,\"n_shared_experts\":1,"
    "\"num_experts_per_tok\":4,\"moe_intermediate_size\":8,\"q_lora_rank\":24,"
    "\"kv_lora_rank\":16,\"qk_nope_head_dim\":8,\"qk_rope_head_dim\":8,\"v_head_dim\":12,"
    "\"first_k_dense_replace\":1,\"n_group\":4,\"topk_group\":2,\"norm_topk_prob\":true,"
    "\"routed_scaling_factor\":2.5,\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0,"
    "\"max_position_embeddings\":16384,\"torch_dtype\":\"float32\","
    "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0,\"beta_fast\":32,\"beta_slow\":1,"
    "\"mscale\":1.0,\"mscale_all_dim\":0.8,\"original_max_position_embeddings\":4096}}";

/* The V2 variant of the same geometry. */
static const char *CONFIG_V2 =
    "{\"model_type\":\"deepseek_v2\",\"hidden_size\":32,\"num_hidden_layers\":2,"
    "\"num_attention_heads\":4,\"num_key_value_heads\":4,\"vocab_size\":10,"
    "\"intermediate_size\":24,\"n_routed_experts\":16,\"n_shared_experts\":1,"
    "\"num_experts_per_tok\":4,\"moe_intermediate_size\":8,\"q_lora_rank\":null,"
    "\"kv_lora_rank\":16,\"qk_nope_head_dim\":8,\"qk_rope_head_dim\":8,\"v_head_dim\":12,"
    "\"first_k_dense_replace\":1,\"n_group\":4,\"topk_group\":2,\"norm_topk_prob\":false,"
    "\"topk_method\":\"group_limited_greedy\",\"scoring_func\":\"softmax\","
    "\"routed_scaling_factor\":2.5,\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0,"
    "\"max_position_embeddings\":64,\"torch_dtype\":\"float32\"}";

static int v2; /* the reference computes the V2 variant */

typedef struct wset {
    int n;
    char names[128][160];
    float *data[128];
    lwq_tensor t[128];
} wset;

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static int get(void *ctx, const char *name, lwq_tensor *out, lwq_error *e)
{
    wset *w = ctx;
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->names[i], name)) {
            *out = w->t[i];
            return 0;
        }
    return lwq_errf(e, LWQ_ENOENT, "not generated");
}

static const float *W(const wset *w, const char *suffix)
{
    char name[160];
    snprintf(name, sizeof name, "model.layers.1.%s", suffix);
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->names[i], name))
            return w->data[i];
    cr_assert_fail("no tensor %s", name);
    return NULL;
}

/* Random tensors for every required tensor of the layer plan. */
static void make_layer(const lwq_model_config *c, int layer, wset *w)
{
    lwq_arch_layer p;
    lwq_error e = {0};
    cr_assert_eq(lwq_arch_layer_plan(c, layer, &p, &e), 0, "%s", e.msg);
    for (int i = 0; i < p.ntensors; i++) {
        const lwq_arch_tensor *at = &p.tensors[i];
        if (at->optional)
            continue;
        cr_assert_lt(w->n, 128);
        int64_t cnt = at->shape[0] * (at->ndim == 2 ? at->shape[1] : 1);
        float *d = malloc((size_t)cnt * sizeof(float));
        for (int64_t j = 0; j < cnt; j++) {
            if (at->kind == LWQ_TK_NORM)
                d[j] = (float)(1.0 + 0.3 * urand());
            else if (at->kind == LWQ_TK_PARAM) /* score bias: some strongly negative, so some
                                                  choices fall below 0, where the masked groups' fill matters */
                d[j] = (float)(j % 4 == 1 || j % 4 == 2 || j % 8 == 3 ? -1.2 + 0.1 * urand()
                                                                       : 0.4 * urand());
            else
                d[j] = (float)(urand() * 1.7 / sqrt((double)at->shape[1]));
        }
        snprintf(w->names[w->n], sizeof w->names[0], "%s", at->name);
        w->data[w->n] = d;
        w->t[w->n] = lwq_tensor_view(d, LWQ_F32, at->ndim, at->shape);
        w->n++;
    }
    lwq_arch_layer_free(&p);
}

/* ---- float64 reference ---------------------------------------------------------------------- */

static void lin(const float *w, int out, int in, const double *x, double *y)
{
    for (int o = 0; o < out; o++) {
        double s = 0;
        for (int i = 0; i < in; i++)
            s += (double)w[o * in + i] * x[i];
        y[o] = s;
    }
}

static void rms(const double *x, const float *w, int d, double eps, double *y)
{
    double s = 0;
    for (int i = 0; i < d; i++)
        s += x[i] * x[i];
    double r = 1.0 / sqrt(s / d + eps);
    for (int i = 0; i < d; i++)
        y[i] = x[i] * r * w[i];
}

static double mscale(double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * log(s) + 1.0; }

static void yarn(double *inv, double *af)
{
    double lowd = ROPE * log(ORIG / (32 * 2 * M_PI)) / (2 * log(10000.0));
    double highd = ROPE * log(ORIG / (1 * 2 * M_PI)) / (2 * log(10000.0));
    double lo = fmax(floor(lowd), 0), hi = fmin(ceil(highd), ROPE - 1);
    for (int i = 0; i < ROPE / 2; i++) {
        double pf = pow(10000.0, 2.0 * i / ROPE);
        double ramp = fmin(fmax((i - lo) / (hi - lo), 0), 1), ef = 1 - ramp;
        inv[i] = 1 / (FACTOR * pf) * (1 - ef) + 1 / pf * ef;
    }
    *af = mscale(FACTOR, MSCALE) / mscale(FACTOR, MSCALE_ALL);
}

/* interleaved pairs, in place */
static void rope(double *x, int pos, const double *inv, double af)
{
    for (int i = 0; i < ROPE / 2; i++) {
        double c = cos(pos * inv[i]) * af, s = sin(pos * inv[i]) * af;
        double a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c - b * s;
        x[2 * i + 1] = a * s + b * c;
    }
}

static void swiglu(const wset *w, const char *pre, int inter, const double *x, double *y)
{
    char n[96];
    double g[64], u[64];
    snprintf(n, sizeof n, "%s.gate_proj.weight", pre);
    lin(W(w, n), inter, D, x, g);
    snprintf(n, sizeof n, "%s.up_proj.weight", pre);
    lin(W(w, n), inter, D, x, u);
    for (int i = 0; i < inter; i++)
        g[i] = g[i] / (1 + exp(-g[i])) * u[i];
    snprintf(n, sizeof n, "%s.down_proj.weight", pre);
    lin(W(w, n), D, inter, g, y);
}

/* Best k of v (ties to the lower index); returns the gap between the k-th and the (k+1)-th, or
 * +inf when both are exact zeros (masked experts: f32 and f64 see the same tie). */
static double best(const double *v, int n, int k, int *out)
{
    int used[64] = {0};
    double kth = 0, next = -INFINITY;
    for (int s = 0; s < k; s++) {
        int b = -1;
        for (int i = 0; i < n; i++)
            if (!used[i] && (b < 0 || v[i] > v[b]))
                b = i;
        used[b] = 1;
        out[s] = b;
        kth = v[b];
    }
    for (int i = 0; i < n; i++)
        if (!used[i] && v[i] > next)
            next = v[i];
    return kth == 0.0 && next == 0.0 ? INFINITY : kth - next;
}

static int n_group_limited; /* tokens whose experts differ from a plain top-k */
static int n_fill_matters;  /* V3 tokens whose chosen groups hold fewer than top-k positive choices:
                             * a 0.0 fill would pick a masked expert there, -inf does not */
static int n_routed;        /* tokens routed */

static void reference(const wset *w, const double *h0, const int *pos, const uint8_t *valid,
                      double *out)
{
    static double q[N][H * QK], k[N][H * QK], v[N][H * VD], h1[N][D];
    double inv[ROPE / 2], af = 1.0;
    if (v2)
        for (int i = 0; i < ROPE / 2; i++)
            inv[i] = 1.0 / pow(10000.0, 2.0 * i / ROPE);
    else
        yarn(inv, &af);
    for (int t = 0; t < N; t++) {
        if (!valid[t])
            continue;
        double x[D], qa[QR], kva[KVR + ROPE], lat[KVR], kvb[H * (NOPE + VD)];
        rms(h0 + t * D, W(w, "input_layernorm.weight"), D, 1e-5, x);
        if (v2) {
            lin(W(w, "self_attn.q_proj.weight"), H * QK, D, x, q[t]);
        } else {
            lin(W(w, "self_attn.q_a_proj.weight"), QR, D, x, qa);
            rms(qa, W(w, "self_attn.q_a_layernorm.weight"), QR, 1e-6, qa);
            lin(W(w, "self_attn.q_b_proj.weight"), H * QK, QR, qa, q[t]);
        }
        lin(W(w, "self_attn.kv_a_proj_with_mqa.weight"), KVR + ROPE, D, x, kva);
        rms(kva, W(w, "self_attn.kv_a_layernorm.weight"), KVR, 1e-6, lat);
        lin(W(w, "self_attn.kv_b_proj.weight"), H * (NOPE + VD), KVR, lat, kvb);
        rope(kva + KVR, pos[t], inv, af);
        for (int hh = 0; hh < H; hh++) {
            rope(q[t] + hh * QK + NOPE, pos[t], inv, af);
            memcpy(k[t] + hh * QK, kvb + hh * (NOPE + VD), NOPE * sizeof(double));
            memcpy(k[t] + hh * QK + NOPE, kva + KVR, ROPE * sizeof(double));
            memcpy(v[t] + hh * VD, kvb + hh * (NOPE + VD) + NOPE, VD * sizeof(double));
        }
    }
    double ms = v2 ? 1.0 : mscale(FACTOR, MSCALE_ALL), scale = 1 / sqrt((double)QK) * ms * ms;
    for (int t = 0; t < N; t++) {
        if (!valid[t])
            continue;
        double a[H * VD] = {0}, o[D];
        int s0 = t / T * T;
        for (int hh = 0; hh < H; hh++) {
            double sc[T], mx = -INFINITY, z = 0;
            for (int j = s0; j <= t; j++) {
                sc[j - s0] = -INFINITY;
                if (!valid[j])
                    continue;
                double d = 0;
                for (int c = 0; c < QK; c++)
                    d += q[t][hh * QK + c] * k[j][hh * QK + c];
                sc[j - s0] = d * scale;
                mx = fmax(mx, sc[j - s0]);
            }
            for (int j = s0; j <= t; j++) {
                double p = valid[j] ? exp(sc[j - s0] - mx) : 0;
                z += p;
                for (int c = 0; c < VD; c++)
                    a[hh * VD + c] += p * v[j][hh * VD + c];
            }
            for (int c = 0; c < VD; c++)
                a[hh * VD + c] /= z;
        }
        lin(W(w, "self_attn.o_proj.weight"), D, H * VD, a, o);
        for (int i = 0; i < D; i++)
            h1[t][i] = h0[t * D + i] + o[i];
    }
    const float *bias = v2 ? NULL : W(w, "mlp.gate.e_score_correction_bias");
    for (int t = 0; t < N; t++) {
        if (!valid[t])
            continue;
        double x[D], lg[E], s[E], ch[E], gs[NG], y[D], sh[D];
        int gsel[NG], sel[K], plain[K];
        rms(h1[t], W(w, "post_attention_layernorm.weight"), D, 1e-5, x);
        lin(W(w, "mlp.gate.weight"), E, D, x, lg);
        double mx = -INFINITY, z = 0;
        for (int i = 0; i < E; i++)
            mx = fmax(mx, lg[i]);
        for (int i = 0; i < E; i++)
            z += exp(lg[i] - mx);
        for (int i = 0; i < E; i++) {
            s[i] = v2 ? exp(lg[i] - mx) / z : 1 / (1 + exp(-lg[i]));
            ch[i] = v2 ? s[i] : s[i] + bias[i];
        }
        best(ch, E, K, plain);
        for (int g = 0; g < NG; g++) {
            int two[2];
            best(ch + g * (E / NG), E / NG, 2, two);
            gs[g] = ch[g * (E / NG) + two[0]] + (v2 ? 0.0 : ch[g * (E / NG) + two[1]]);
        }
        /* f32 routing is good to ~1e-7 of these values: a margin keeps f32 and f64 in step (V2
         * probabilities are ~1/16, so their gaps are smaller than V3's sigmoid scores') */
        const double margin = v2 ? 1e-5 : 1e-3;
        cr_assert_gt(best(gs, NG, TG, gsel), margin, "token %d: group choice too close", t);
        for (int g = 0; g < NG; g++) {
            int keep = 0;
            for (int j = 0; j < TG; j++)
                keep |= gsel[j] == g;
            for (int i = 0; !keep && i < E / NG; i++)
                ch[g * (E / NG) + i] = v2 ? 0.0 : -INFINITY;
        }
        int positive = 0;
        for (int i = 0; i < E; i++)
            positive += ch[i] > 0;
        n_fill_matters += !v2 && positive < K;
        cr_assert_gt(best(ch, E, K, sel), margin, "token %d: expert choice too close", t);
        int differs = 0;
        double sum = 0;
        for (int j = 0; j < K; j++) {
            int in_plain = 0;
            for (int m = 0; m < K; m++)
                in_plain |= plain[m] == sel[j];
            differs |= !in_plain;
            sum += s[sel[j]];
        }
        n_group_limited += differs;
        n_routed++;
        memset(y, 0, sizeof y);
        for (int j = 0; j < K; j++) {
            char pre[64];
            double ye[D], wt = (v2 ? s[sel[j]] : s[sel[j]] / (sum + 1e-20)) * RSF;
            snprintf(pre, sizeof pre, "mlp.experts.%d", sel[j]);
            swiglu(w, pre, MI, x, ye);
            for (int i = 0; i < D; i++)
                y[i] += wt * ye[i];
        }
        swiglu(w, "mlp.shared_experts", MI, x, sh);
        for (int i = 0; i < D; i++)
            out[t * D + i] = h1[t][i] + y[i] + sh[i];
    }
}

static void layer_case(const char *config)
{
    lwq_error e = {0};
    lwq_model_config c;
    cr_assert_eq(lwq_config_parse("config.json", config, &c, &e), 0, "%s", e.msg);
    v2 = c.family->router == LWQ_ROUTER_DEEPSEEK_V2;
    wset *w = calloc(1, sizeof *w);
    make_layer(&c, 1, w);
    lwq_weights lw = {get, w};
    lwq_backend be;
    cr_assert_eq(lwq_backend_cpu_create(&be, 2, &e), 0);
    lwq_model m;
    cr_assert_eq(lwq_model_init(&m, &c, &be, LWQ_F32, &e), 0, "%s", e.msg);
    const int64_t lens[B] = {T, 5};
    lwq_batch b;
    cr_assert_eq(lwq_batch_init(&b, &be, B, T, lens, &e), 0, "%s", e.msg);
    static double h0[N * D], ref[N * D];
    int64_t shape[2] = {N, D};
    lwq_tensor h;
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_F32, 2, shape, &h, &e), 0);
    for (int i = 0; i < N * D; i++) {
        ((float *)h.data)[i] = (float)urand();
        h0[i] = ((float *)h.data)[i];
    }
    int pos[N];
    for (int i = 0; i < N; i++)
        pos[i] = ((const int32_t *)b.pos.data)[i];
    reference(w, h0, pos, b.valid_host, ref);
    cr_assert_gt(n_group_limited, 0, "the group restriction never changed a selection: the test "
                 "would not see it");
    cr_assert(v2 || (n_fill_matters > 0 && n_fill_matters < n_routed), "%d of %d tokens have fewer than "
              "top-k positive choices in their groups: the test needs both kinds to see -inf vs 0.0",
              n_fill_matters, n_routed);
    cr_assert_eq(lwq_model_layer_forward(&m, 1, &lw, &b, &h, NULL, &e), 0, "%s", e.msg);
    double worst = 0;
    for (int t = 0; t < N; t++) {
        if (!b.valid_host[t])
            continue;
        double scale = 1, err = 0;
        for (int i = 0; i < D; i++) {
            scale = fmax(scale, fabs(ref[t * D + i]));
            err = fmax(err, fabs(((float *)h.data)[t * D + i] - ref[t * D + i]));
        }
        worst = fmax(worst, err / scale);
    }
    cr_log_info("%s layer: max relative error %.3g (%d tokens group-limited, %d where the fill "
                "matters)", c.model_type, worst, n_group_limited, n_fill_matters);
    cr_assert_leq(worst, 1e-4, "max relative error %.3g", worst);
    lwq_backend_tensor_free(&be, &h);
    lwq_batch_free(&b, &be);
    lwq_model_free(&m);
    lwq_backend_destroy(&be);
    for (int i = 0; i < w->n; i++)
        free(w->data[i]);
    free(w);
    lwq_config_free(&c);
}

Test(forward_deepseek, v3_layer_matches_float64_reference) { layer_case(CONFIG); }
Test(forward_deepseek, v2_group_limited_layer_matches_float64_reference) { layer_case(CONFIG_V2); }

Test(forward_deepseek, v3_missing_score_bias_is_named)
{
    lwq_error e = {0};
    lwq_model_config c;
    cr_assert_eq(lwq_config_parse("v3.json", CONFIG, &c, &e), 0, "%s", e.msg);
    wset *w = calloc(1, sizeof *w);
    make_layer(&c, 1, w);
    for (int i = 0; i < w->n; i++)
        if (strstr(w->names[i], "e_score_correction_bias"))
            w->names[i][0] = '#';
    lwq_weights lw = {get, w};
    lwq_backend be;
    cr_assert_eq(lwq_backend_cpu_create(&be, 1, &e), 0);
    lwq_model m;
    cr_assert_eq(lwq_model_init(&m, &c, &be, LWQ_F32, &e), 0, "%s", e.msg);
    lwq_batch b;
    cr_assert_eq(lwq_batch_init(&b, &be, 1, 4, NULL, &e), 0, "%s", e.msg);
    int64_t shape[2] = {4, D};
    lwq_tensor h;
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_F32, 2, shape, &h, &e), 0);
    memset(h.data, 0, 4 * D * sizeof(float));
    ((float *)h.data)[0] = 1.0f;
    cr_assert_eq(lwq_model_layer_forward(&m, 1, &lw, &b, &h, NULL, &e), LWQ_ENOENT);
    cr_assert(strstr(e.msg, "layer 1: tensor model.layers.1.mlp.gate.e_score_correction_bias is "
                            "missing"), "%s", e.msg);
    lwq_backend_tensor_free(&be, &h);
    lwq_batch_free(&b, &be);
    lwq_model_free(&m);
    lwq_backend_destroy(&be);
    for (int i = 0; i < w->n; i++)
        free(w->data[i]);
    free(w);
    lwq_config_free(&c);
}

Test(forward_deepseek, nan_router_scores_are_reported_with_the_token)
{
    lwq_error e = {0};
    lwq_model_config c;
    cr_assert_eq(lwq_config_parse("v3.json", CONFIG, &c, &e), 0, "%s", e.msg);
    wset *w = calloc(1, sizeof *w);
    make_layer(&c, 1, w);
    lwq_weights lw = {get, w};
    lwq_backend be;
    cr_assert_eq(lwq_backend_cpu_create(&be, 1, &e), 0);
    lwq_model m;
    cr_assert_eq(lwq_model_init(&m, &c, &be, LWQ_F32, &e), 0, "%s", e.msg);
    lwq_batch b;
    cr_assert_eq(lwq_batch_init(&b, &be, 1, 4, NULL, &e), 0, "%s", e.msg);
    int64_t shape[2] = {4, D};
    lwq_tensor h;
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_F32, 2, shape, &h, &e), 0);
    for (int i = 0; i < 4 * D; i++)
        ((float *)h.data)[i] = (float)urand();
    ((float *)h.data)[2 * D + 3] = NAN; /* token 2; attention may spread it to its tile */
    cr_assert_eq(lwq_model_layer_forward(&m, 1, &lw, &b, &h, NULL, &e), LWQ_ENUMERIC);
    cr_assert(strstr(e.msg, "layer 1: router scores of token ") && strstr(e.msg, " are NaN"),
              "%s", e.msg);
    lwq_backend_tensor_free(&be, &h);
    lwq_batch_free(&b, &be);
    lwq_model_free(&m);
    lwq_backend_destroy(&be);
    for (int i = 0; i < w->n; i++)
        free(w->data[i]);
    free(w);
    lwq_config_free(&c);
}

/* The RoPE table against transformers' _compute_yarn_parameters written in float64, for the
 * config variants it tells apart: attention_factor given, truncate false, factor absent
 * (max_position / original), mscale absent (mscale(factor, 1)). */
static void yarn_case(const char *rope, const char *extra, double factor, int truncate,
                      double want_af)
{
    char cfg[2048];
    snprintf(cfg, sizeof cfg, "{\"model_type\":\"deepseek_v3\",\"hidden_size\":32,"
             "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"vocab_size\":10,"
             "\"intermediate_size\":24,\"n_routed_experts\":0,\"kv_lora_rank\":16,"
             "\"qk_nope_head_dim\":8,\"qk_rope_head_dim\":16,\"v_head_dim\":8,"
             "\"first_k_dense_replace\":1,\"num_experts_per_tok\":1,"
             "\"moe_intermediate_size\":8,\"max_position_embeddings\":65536%s,"
             "\"rope_scaling\":{\"type\":\"yarn\",\"original_max_position_embeddings\":4096%s}}",
             extra, rope);
    lwq_error e = {0};
    lwq_model_config c;
    cr_assert_eq(lwq_config_parse("c.json", cfg, &c, &e), 0, "%s", e.msg);
    lwq_backend be;
    cr_assert_eq(lwq_backend_cpu_create(&be, 1, &e), 0);
    lwq_model m;
    cr_assert_eq(lwq_model_init(&m, &c, &be, LWQ_F32, &e), 0, "%s", e.msg);
    const int dim = 16;
    double lo = dim * log(4096 / (32 * 2 * M_PI)) / (2 * log(10000.0));
    double hi = dim * log(4096 / (1 * 2 * M_PI)) / (2 * log(10000.0));
    if (truncate) {
        lo = floor(lo);
        hi = ceil(hi);
    }
    lo = fmax(lo, 0);
    hi = fmin(hi, dim - 1);
    for (int i = 0; i < dim / 2; i++) {
        double pf = pow(10000.0, 2.0 * i / dim), ramp = fmin(fmax((i - lo) / (hi - lo), 0), 1);
        double want = 1 / (factor * pf) * ramp + 1 / pf * (1 - ramp);
        double got = ((const float *)m.inv_freq.data)[i];
        cr_assert(fabs(got - want) <= 1e-6 * want, "inv_freq[%d]: %.9g, want %.9g", i, got, want);
    }
    cr_assert(fabs(m.attn_scaling - want_af) <= 1e-6, "attention factor %.9g, want %.9g",
              m.attn_scaling, want_af);
    lwq_model_free(&m);
    lwq_backend_destroy(&be);
    lwq_config_free(&c);
}

Test(forward_deepseek, yarn_table_variants_match_transformers)
{
    double f = 40.0;
    yarn_case(",\"factor\":40,\"mscale\":1.0,\"mscale_all_dim\":0.5", "", f, 1,
              mscale(f, 1.0) / mscale(f, 0.5));
    yarn_case(",\"factor\":40,\"attention_factor\":1.25,\"truncate\":false", "", f, 0, 1.25);
    yarn_case(",\"mscale_all_dim\":0.5", "", 16.0, 1, mscale(16.0, 1.0)); /* 65536 / 4096 */
}

Test(forward_deepseek, mla_odd_rope_dim_is_refused)
{
    lwq_error e = {0};
    lwq_model_config c;
    char cfg[2048];
    snprintf(cfg, sizeof cfg, "%s", CONFIG);
    char *p = strstr(cfg, "\"qk_rope_head_dim\":8");
    cr_assert_not_null(p);
    p[19] = '7';
    cr_assert_eq(lwq_config_parse("v3.json", cfg, &c, &e), 0, "%s", e.msg);
    lwq_backend be;
    cr_assert_eq(lwq_backend_cpu_create(&be, 1, &e), 0);
    lwq_model m;
    cr_assert_eq(lwq_model_init(&m, &c, &be, LWQ_F32, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "bad MLA geometry") && strstr(e.msg, "qk_rope_head_dim 7 (must be "
                                                                "even)"), "%s", e.msg);
    lwq_backend_destroy(&be);
    lwq_config_free(&c);
}
