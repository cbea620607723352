/* Left padding, observers, all-experts mode and the forward's error paths.
 *
 * Padding: sequences run alone vs the same sequences left-padded into one batch (pad token ids
 * are arbitrary real ids, so a leak would show).  Per-token outputs and every observed amax
 * (linear inputs, k/v) must agree and expert token counts must be equal.  Every op computes a
 * row independently of the others and attention sees padded keys as exact zeros, so on this
 * machine (OpenBLAS SkylakeX kernels) the results are bitwise equal; but an sgemm kernel may
 * round a row differently depending on how many rows the call has (valgrind's CPU model selects
 * another kernel and shows ~1e-6 differences in the MoE fixtures, whose experts see different row
 * sets), so we allow f32 re-association noise: 1e-5 relative for F32, one BF16 ulp (2^-7
 * relative) for BF16.  A leak of padding into real rows changes values by O(1). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/model/fwd_fixture.h"

#define MAXMOD 256

typedef struct rec {
    const lwq_backend *be;
    int n;
    char name[MAXMOD][128];
    float amax[MAXMOD];
    int64_t rows[MAXMOD];
    float kv_amax[8][2];
    int64_t counts[8][64];
    int fail_on; /* linear_input call number that returns an error (0 = never) */
    int calls;
} rec;

static int rec_slot(rec *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->name[i], name))
            return i;
    cr_assert(r->n < MAXMOD);
    snprintf(r->name[r->n], sizeof r->name[0], "%s", name);
    r->amax[r->n] = 0;
    r->rows[r->n] = 0;
    return r->n++;
}

static int on_linear(void *ctx, int layer, const char *module, const lwq_tensor *x,
                     const lwq_tensor *valid, const int32_t *tok, lwq_error *e)
{
    (void)tok;
    rec *r = ctx;
    if (++r->calls == r->fail_on)
        return lwq_errf(e, LWQ_ECANCELED, "observer stops at %s", module);
    float a;
    int rc = lwq_backend_amax(r->be, x, valid, &a, e);
    int s = rec_slot(r, module);
    r->amax[s] = fmaxf(r->amax[s], a);
    int64_t rows = x->shape[0];
    if (valid)
        for (int64_t i = 0, n = x->shape[0]; i < n; i++)
            rows -= !((const uint8_t *)valid->data)[i];
    r->rows[s] += rows;
    return rc;
}

static int on_kv(void *ctx, int layer, const lwq_tensor *k, const lwq_tensor *v,
                 const lwq_tensor *valid, lwq_error *e)
{
    rec *r = ctx;
    float a, b;
    int rc = lwq_backend_amax(r->be, k, valid, &a, e);
    if (rc == 0)
        rc = lwq_backend_amax(r->be, v, valid, &b, e);
    if (rc)
        return rc;
    r->kv_amax[layer][0] = fmaxf(r->kv_amax[layer][0], a);
    r->kv_amax[layer][1] = fmaxf(r->kv_amax[layer][1], b);
    return rc;
}

static int on_counts(void *ctx, int layer, const int64_t *counts, int n, lwq_error *e)
{
    rec *r = ctx;
    for (int i = 0; i < n && i < 64; i++)
        r->counts[layer][i] += counts[i];
    return 0;
}

typedef struct env {
    lwq_backend be;
    fwd_fixture f;
    lwq_model m;
    lwq_dtype act;
} env;

static void env_open(env *v, const char *fixture, lwq_dtype act)
{
    char dir[1024];
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_cpu_create(&v->be, 2, &e), 0);
    cr_assert_eq(fwd_fixture_open(&v->f, fwd_fixture_dir(fixture, dir, sizeof dir), NULL, &e), 0,
                 "%s", e.msg);
    cr_assert_eq(lwq_model_init(&v->m, &v->f.ck.cfg, &v->be, act, &e), 0, "%s", e.msg);
    v->act = act;
}

static void env_close(env *v)
{
    lwq_model_free(&v->m);
    fwd_fixture_free(&v->f);
    lwq_backend_destroy(&v->be);
}

/* Run all layers on tokens (B, T) with lengths; final hidden state into out (B*T*D floats). */
static int run(env *v, const lwq_weights *w, const int32_t *tok, int64_t B, int64_t T,
               const int64_t *lens, rec *r, int all_experts, float *out, lwq_error *e)
{
    lwq_batch b;
    int rc = lwq_batch_init(&b, &v->be, B, T, lens, e);
    cr_assert_eq(rc, 0, "%s", e->msg);
    int64_t D = v->f.ck.cfg.hidden_size, shape[2] = {B * T, D};
    lwq_tensor h;
    cr_assert_eq(lwq_backend_tensor_alloc(&v->be, v->act, 2, shape, &h, e), 0);
    lwq_observer obs = {r, on_linear, on_kv, on_counts, all_experts, NULL};
    rc = lwq_model_embed(&v->m, w, tok, &h, e);
    for (int l = 0; rc == 0 && l < v->f.ck.cfg.num_hidden_layers; l++)
        rc = lwq_model_layer_forward(&v->m, l, w, &b, &h, r ? &obs : NULL, e);
    for (int64_t i = 0; rc == 0 && out && i < B * T * D; i++)
        out[i] = lwq_load_f(h.data, v->act, (size_t)i);
    lwq_backend_tensor_free(&v->be, &h);
    lwq_batch_free(&b, &v->be);
    return rc;
}

static void padding_case(const char *fixture, lwq_dtype act, double rtol)
{
    env v;
    env_open(&v, fixture, act);
    const lwq_model_config *c = &v.f.ck.cfg;
    const int64_t B = 3, T = 16, D = c->hidden_size, lens[3] = {16, 9, 4};
    int32_t tok[48];
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 5 + 3) % (int)c->vocab_size; /* pads are real ids too */
    rec *alone = calloc(1, sizeof *alone), *batch = calloc(1, sizeof *batch);
    alone->be = batch->be = &v.be;
    float *hb = malloc((size_t)(B * T * D) * 4), *ha = malloc((size_t)(T * D) * 4);
    lwq_error e = {0};
    cr_assert_eq(run(&v, &v.f.w, tok, B, T, lens, batch, 0, hb, &e), 0, "%s", e.msg);
    for (int64_t s = 0; s < B; s++) {
        const int32_t *ts = tok + s * T + (T - lens[s]);
        cr_assert_eq(run(&v, &v.f.w, ts, 1, lens[s], NULL, alone, 0, ha, &e), 0, "%s", e.msg);
        for (int64_t t = 0; t < lens[s]; t++)
            for (int64_t d = 0; d < D; d++) {
                float a = ha[t * D + d], b = hb[(s * T + T - lens[s] + t) * D + d];
                cr_assert(fabsf(a - b) <= rtol * (1 + fabsf(a)), "seq %lld token %lld dim %lld: "
                          "alone %.9g, padded batch %.9g", (long long)s, (long long)t,
                          (long long)d, a, b);
            }
    }
    cr_assert_eq(alone->n, batch->n);
    for (int i = 0; i < batch->n; i++) {
        int j = rec_slot(alone, batch->name[i]);
        cr_assert(fabsf(alone->amax[j] - batch->amax[i]) <= rtol * alone->amax[j],
                  "%s: amax alone %.9g, padded batch %.9g", batch->name[i], alone->amax[j],
                  batch->amax[i]);
        cr_assert_eq(alone->rows[j], batch->rows[i], "%s: rows", batch->name[i]);
    }
    for (int l = 0; l < c->num_hidden_layers; l++) {
        for (int k = 0; k < 2; k++)
            cr_assert(fabsf(alone->kv_amax[l][k] - batch->kv_amax[l][k]) <=
                          rtol * alone->kv_amax[l][k], "layer %d %s amax", l, k ? "v" : "k");
        for (int x = 0; x < c->num_experts && x < 64; x++)
            cr_assert_eq(alone->counts[l][x], batch->counts[l][x], "layer %d expert %d count", l,
                         x);
    }
    free(alone), free(batch), free(hb), free(ha);
    env_close(&v);
}

Test(forward_observe, left_padding_moe_f32) { padding_case("cai-tiny-qwen3-moe", LWQ_F32, 1e-5); }
Test(forward_observe, left_padding_mixtral_f32) { padding_case("cai-tiny-mixtral", LWQ_F32, 1e-5); }
Test(forward_observe, left_padding_llama3_bf16) { padding_case("mlxd-tiny-llama3-bf16", LWQ_BF16, 1.0 / 128); }

Test(forward_observe, all_experts_mode_observes_every_token_and_keeps_the_output)
{
    env v;
    env_open(&v, "cai-tiny-qwen3-moe", LWQ_F32);
    const lwq_model_config *c = &v.f.ck.cfg;
    const int64_t B = 2, T = 16, D = c->hidden_size, lens[2] = {16, 7};
    int32_t tok[32];
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 3 + 1) % (int)c->vocab_size;
    rec *routed = calloc(1, sizeof *routed), *all = calloc(1, sizeof *all);
    routed->be = all->be = &v.be;
    float *h0 = malloc((size_t)(B * T * D) * 4), *h1 = malloc((size_t)(B * T * D) * 4);
    lwq_error e = {0};
    cr_assert_eq(run(&v, &v.f.w, tok, B, T, lens, routed, 0, h0, &e), 0, "%s", e.msg);
    cr_assert_eq(run(&v, &v.f.w, tok, B, T, lens, all, 1, h1, &e), 0, "%s", e.msg);
    cr_assert(memcmp(h0, h1, (size_t)(B * T * D) * 4) == 0, "all-experts mode changed the output");
    char name[128];
    for (int l = 0; l < c->num_hidden_layers; l++) {
        int64_t routed_rows = 0;
        for (int x = 0; x < c->num_experts; x++) {
            snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.down_proj", l, x);
            cr_assert_eq(all->rows[rec_slot(all, name)], 23, "%s sees every real token", name);
            routed_rows += routed->rows[rec_slot(routed, name)];
            cr_assert_eq(routed->counts[l][x], all->counts[l][x]);
            cr_assert_geq(all->amax[rec_slot(all, name)], routed->amax[rec_slot(routed, name)]);
        }
        cr_assert_eq(routed_rows, 23 * c->num_experts_per_tok, "layer %d routed rows", l);
    }
    free(routed), free(all), free(h0), free(h1);
    env_close(&v);
}

Test(forward_observe, observer_error_stops_the_forward)
{
    env v;
    env_open(&v, "cai-tiny-llama", LWQ_F32);
    rec *r = calloc(1, sizeof *r);
    r->be = &v.be;
    r->fail_on = 5; /* q, k, v, o, then layer 0 gate_proj */
    int32_t tok[4] = {1, 2, 3, 4};
    lwq_error e = {0};
    cr_assert_eq(run(&v, &v.f.w, tok, 1, 4, NULL, r, 0, NULL, &e), LWQ_ECANCELED);
    cr_assert(strstr(e.msg, "observer stops at model.layers.0.mlp.gate_proj"), "%s", e.msg);
    free(r);
    env_close(&v);
}

/* A CUDA backend reports what its kernels flag on the device (k_gather's row out of range) at
 * synchronize(); the engine never called it, so the flag went unread.  Here a CPU backend whose
 * synchronize() reports such a flag stands in for the device. */
static int flagged_sync(void *ctx, lwq_error *e)
{
    (void)ctx;
    return lwq_errf(e, LWQ_EINVAL, "device flag: a row index was outside its source");
}

Test(forward_observe, a_device_error_flag_read_at_synchronize_stops_the_forward)
{
    env v;
    env_open(&v, "cai-tiny-qwen3-moe", LWQ_F32);
    const lwq_backend_ops *orig = v.be.ops;
    lwq_backend_ops ops = *orig;
    ops.synchronize = flagged_sync;
    v.be.ops = &ops;
    int32_t tok[4] = {1, 2, 3, 4};
    lwq_error e = {0};
    int rc = run(&v, &v.f.w, tok, 1, 4, NULL, NULL, 0, NULL, &e);
    v.be.ops = orig;
    cr_expect_eq(rc, LWQ_EINVAL, "the forward returned %d (%s)", rc, e.msg);
    cr_expect(strstr(e.msg, "row index was outside") != NULL, "%s", e.msg);
    env_close(&v);
}

/* ---- weights that lie ------------------------------------------------------------------------ */

typedef struct liar {
    fwd_fixture *f;
    const char *name;
    int mode; /* 0 missing, 1 transposed shape, 2 integer dtype */
    lwq_tensor t;
} liar;

static int liar_get(void *ctx, const char *name, lwq_tensor *out, lwq_error *e)
{
    liar *l = ctx;
    int rc = l->f->w.get(l->f->w.ctx, name, out, e);
    if (rc < 0 || strcmp(name, l->name))
        return rc;
    if (l->mode == 0)
        return LWQ_ENOENT;
    if (l->mode == 1) {
        int64_t s0 = out->shape[0];
        out->shape[0] = out->shape[1];
        out->shape[1] = s0;
        out->stride[0] = out->shape[1];
    } else {
        out->dtype = LWQ_I32;
    }
    return 0;
}

static void liar_case(const char *fixture, const char *name, int mode, int code, const char *msg)
{
    env v;
    env_open(&v, fixture, LWQ_F32);
    liar l = {&v.f, name, mode, {0}};
    lwq_weights w = {liar_get, &l};
    int32_t tok[4] = {1, 2, 3, 4};
    lwq_error e = {0};
    cr_assert_eq(run(&v, &w, tok, 1, 4, NULL, NULL, 0, NULL, &e), code, "%s", e.msg);
    cr_assert(strstr(e.msg, msg), "got: %s", e.msg);
    env_close(&v);
}

Test(forward_observe, missing_expert_weight_names_tensor_and_layer)
{
    liar_case("cai-tiny-qwen3-moe", "model.layers.1.mlp.experts.2.up_proj.weight", 0, LWQ_ENOENT,
              "layer 1: tensor model.layers.1.mlp.experts.2.up_proj.weight is missing");
}

Test(forward_observe, wrong_shape_names_tensor_layer_and_shapes)
{
    liar_case("cai-tiny-qwen3", "model.layers.0.self_attn.q_proj.weight", 1, LWQ_EFORMAT,
              "layer 0: tensor model.layers.0.self_attn.q_proj.weight has shape (8, 12), "
              "expected (12, 8)");
}

Test(forward_observe, wrong_dtype_is_refused)
{
    liar_case("cai-tiny-mixtral", "model.layers.0.block_sparse_moe.gate.weight", 2,
              LWQ_EUNSUPPORTED, "layer 0: tensor model.layers.0.block_sparse_moe.gate.weight has "
              "dtype I32");
}

Test(forward_observe, missing_qwen2_bias_is_an_error)
{
    liar_case("cai-tiny-qwen2", "model.layers.0.self_attn.k_proj.bias", 0, LWQ_ENOENT,
              "layer 0: tensor model.layers.0.self_attn.k_proj.bias is missing");
}

Test(forward_observe, token_outside_vocabulary_is_refused)
{
    env v;
    env_open(&v, "cai-tiny-llama", LWQ_F32);
    int32_t tok[3] = {1, 11, 2};
    lwq_error e = {0};
    cr_assert_eq(run(&v, &v.f.w, tok, 1, 3, NULL, NULL, 0, NULL, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "embed: token 1 is id 11, outside the vocabulary [0, 11)"), "%s",
              e.msg);
    env_close(&v);
}

Test(forward_observe, bad_lengths_are_refused)
{
    lwq_backend be;
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_cpu_create(&be, 1, &e), 0);
    lwq_batch b;
    int64_t lens[2] = {3, 5};
    cr_assert_eq(lwq_batch_init(&b, &be, 2, 4, lens, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "sequence 1 has length 5, outside [0, 4]"), "%s", e.msg);
    lwq_backend_destroy(&be);
}

Test(forward_observe, llama_mlp_bias_is_required_when_configured)
{
    env v;
    env_open(&v, "cai-tiny-llama", LWQ_F32);
    v.f.ck.cfg.mlp_bias = 1; /* the model borrows this config */
    int32_t tok[2] = {1, 2};
    lwq_error e = {0};
    cr_assert_eq(run(&v, &v.f.w, tok, 1, 2, NULL, NULL, 0, NULL, &e), LWQ_ENOENT);
    cr_assert(strstr(e.msg, "layer 0: tensor model.layers.0.mlp.gate_proj.bias is missing"), "%s",
              e.msg);
    env_close(&v);
}

Test(forward_observe, partial_rotary_is_refused)
{
    env v;
    env_open(&v, "cai-tiny-llama", LWQ_F32);
    lwq_model m;
    lwq_error e = {0};
    v.f.ck.cfg.partial_rotary_factor = 0.5;
    cr_assert_eq(lwq_model_init(&m, &v.f.ck.cfg, &v.be, LWQ_F32, &e), LWQ_EUNSUPPORTED);
    cr_assert(strstr(e.msg, "partial_rotary_factor 0.5 is not supported"), "%s", e.msg);
    env_close(&v);
}
