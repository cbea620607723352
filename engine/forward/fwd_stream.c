/* engine/forward/fwd_stream.c — a MoE layer's forward as dense part + expert groups (+ nemotron_h's tail) (fwd_stream.h). */
#include "engine/forward/fwd_stream.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/forward_internal.h"

int lwq_fwd_stream_supported(const lwq_model *m, int layer, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    if (!lwq_model_layer_is_moe(m, layer))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "layer %d has no routed experts", layer);
    if (c->family->single) { /* nemotron_h: the MoE block is the whole layer */
        if (c->family->experts != LWQ_EXPERTS_NEMOTRON)
            return lwq_errf(e, LWQ_EUNSUPPORTED, "expert streaming is not implemented for %s: run without "
                            "--expert-group, with a budget that holds a whole layer", c->model_type);
        if (c->moe_latent_size > c->hidden_size)
            return lwq_errf(e, LWQ_EUNSUPPORTED, "expert streaming of %s: moe_latent_size %" PRId64 " is wider "
                            "than hidden_size %" PRId64 " (the streamed MoE input is kept in a hidden-wide "
                            "boundary): run without --expert-group", c->model_type, (int64_t)c->moe_latent_size,
                            (int64_t)c->hidden_size);
        return 0;
    }
    /* every routed-expert block the family table has streams; the check stays for a block added
     * later without a streamed form */
    if (c->family->router != LWQ_ROUTER_SOFTMAX && c->family->router != LWQ_ROUTER_DEEPSEEK_V2 &&
        c->family->router != LWQ_ROUTER_DEEPSEEK_V3 && c->family->router != LWQ_ROUTER_SIGMOID_BIAS &&
        c->family->router != LWQ_ROUTER_SOFTMAX_GROUPED)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "expert streaming is implemented for qwen3_moe, mixtral, qwen3_next, "
                        "deepseek_v2, deepseek_v3 and kimi_k2, not for %s: run without --expert-group, with a "
                        "budget that holds a whole layer", c->model_type);
    return 0;
}

static int count_experts(lwq_model *m, int layer, const lwq_batch *b, const int32_t *idx, const lwq_observer *obs,
                         lwq_error *e);

static void moe_names(const lwq_model *m, int layer, char *prefix, size_t cap, int *mixtral, int64_t *I)
{
    lwq_fwd_experts_names(m->cfg, layer, prefix, cap, mixtral, I);
}

/* nemotron_h (family->experts NEMOTRON): its MoE always runs the ReLU^2 shared expert */
static int nemotron(const lwq_model *m)
{
    return m->cfg->family->single && m->cfg->family->experts == LWQ_EXPERTS_NEMOTRON;
}

int lwq_fwd_stream_has_shared(const lwq_model *m)
{
    return nemotron(m) || lwq_fwd_has_shared(m->cfg);
}

int64_t lwq_fwd_stream_width(const lwq_model *m)
{
    return nemotron(m) && m->cfg->moe_latent_size > 0 ? m->cfg->moe_latent_size : m->cfg->hidden_size;
}

lwq_dtype lwq_fwd_stream_sum_dtype(const lwq_model *m)
{
    return nemotron(m) ? LWQ_F32 : m->act;
}

int lwq_fwd_stream_has_tail(const lwq_model *m)
{
    return nemotron(m) && m->cfg->moe_latent_size > 0;
}

/* nemotron_h's dense unit: x = norm(h); the DeepSeek-V3 routing and the shared expert on it;
 * the experts' input: fc1_latent_proj(x) with a latent, else x (model_nemotron.c's moe, up to
 * the experts).  h itself is unchanged: the block's output is added after the last group. */
static int nemotron_dense(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b, const lwq_tensor *h,
                          lwq_tensor *xe, int32_t *idx, float *wts, lwq_tensor *shared, const lwq_observer *obs,
                          lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = h->shape[0], D = c->hidden_size;
    char name[LWQ_NAME_MAX], prefix[128];
    int mixtral;
    int64_t I;
    moe_names(m, layer, prefix, sizeof prefix, &mixtral, &I);
    lwq_tensor ln, xs, *x = xe, wl, bl;
    if (c->moe_latent_size > 0) {
        LWQ_TRY(lwq_fwd_tensor(m, m->act, n, D, &xs, e));
        x = &xs;
    }
    snprintf(name, sizeof name, "model.layers.%d.norm.weight", layer);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 1, D, 0, 0, &ln, e));
    LWQ_TRY(lwq_backend_rmsnorm(m->be, h, &ln, (float)c->rms_norm_eps, x, e));
    LWQ_TRY(lwq_fwd_deepseek_route(m, layer, w, b, x, idx, wts, obs, e));
    snprintf(name, sizeof name, "%s.shared_experts", prefix);
    LWQ_TRY(lwq_fwd_relu2_mlp(m, layer, w, name, c->shared_expert_intermediate_size, x, &b->valid, NULL, NULL, shared,
                              obs, e));
    if (c->moe_latent_size > 0) {
        int hb;
        snprintf(name, sizeof name, "%s.fc1_latent_proj", prefix);
        LWQ_TRY(lwq_fwd_linear(m, w, layer, name, c->moe_latent_size, D, 0, &wl, &bl, &hb, e));
        LWQ_TRY(lwq_fwd_observe(obs, layer, name, x, &b->valid, e));
        LWQ_TRY(lwq_backend_gemm(m->be, x, &wl, hb ? &bl : NULL, xe, e));
    }
    LWQ_TRY(lwq_backend_synchronize(m->be, e));
    return count_experts(m, layer, b, idx, obs, e);
}

int lwq_fwd_stream_finish(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b, lwq_tensor *h,
                          lwq_tensor *partial, const lwq_tensor *shared, const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = h->shape[0], D = c->hidden_size;
    if (!nemotron(m)) { /* as the one-shot block: out = routed sum; out += shared experts; h += out */
        if (shared)
            LWQ_TRY(lwq_backend_add(m->be, partial, shared, e));
        return lwq_backend_add(m->be, h, partial, e);
    }
    /* model_nemotron.c's moe after the experts: the float32 sum rounded once, fc2_latent_proj of it
     * (the tail unit's weights), + the shared expert; h += out */
    lwq_fwd_arena_reset(m);
    LWQ_TRY(lwq_fwd_observe_batch(obs, layer, b, e));
    const int64_t L = lwq_fwd_stream_width(m);
    lwq_tensor sum, out, wl, bl;
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, L, &sum, e));
    LWQ_TRY(lwq_backend_copy(m->be, partial, &sum, e));
    if (c->moe_latent_size > 0) {
        char prefix[128], name[LWQ_NAME_MAX];
        int mixtral, hb;
        int64_t I;
        moe_names(m, layer, prefix, sizeof prefix, &mixtral, &I);
        snprintf(name, sizeof name, "%s.fc2_latent_proj", prefix);
        LWQ_TRY(lwq_fwd_tensor(m, m->act, n, D, &out, e));
        LWQ_TRY(lwq_fwd_linear(m, w, layer, name, D, L, 0, &wl, &bl, &hb, e));
        LWQ_TRY(lwq_fwd_observe(obs, layer, name, &sum, &b->valid, e));
        LWQ_TRY(lwq_backend_gemm(m->be, &sum, &wl, hb ? &bl : NULL, &out, e));
    } else {
        out = sum;
    }
    LWQ_TRY(lwq_backend_add(m->be, &out, shared, e));
    LWQ_TRY(lwq_backend_add(m->be, h, &out, e));
    return lwq_backend_synchronize(m->be, e);
}


int lwq_fwd_stream_dense(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                         lwq_tensor *h, lwq_tensor *x, int32_t *idx, float *wts, lwq_tensor *shared,
                         const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    LWQ_TRY(lwq_fwd_stream_supported(m, layer, e));
    const int64_t n = h->shape[0], D = c->hidden_size, W = lwq_fwd_stream_width(m);
    const int E = c->num_experts, K = c->num_experts_per_tok;
    if (n != b->batch * b->seq || x->shape[0] != n || h->shape[1] != D || x->shape[1] != W)
        return lwq_errf(e, LWQ_EINVAL, "layer %d: streamed forward on (%" PRId64 ", %" PRId64 ") rows, batch "
                        "has %" PRId64, layer, h->shape[0], h->shape[1], b->batch * b->seq);
    const int deepseek = c->family->router != LWQ_ROUTER_SOFTMAX;
    if (lwq_fwd_stream_has_shared(m) && (!shared || shared->shape[0] != n || shared->shape[1] != D))
        return lwq_errf(e, LWQ_EINVAL, "layer %d: the shared experts' output needs a (%" PRId64 ", %" PRId64
                        ") tensor", layer, n, D);
    lwq_fwd_arena_reset(m);
    LWQ_TRY(lwq_fwd_observe_batch(obs, layer, b, e));
    if (nemotron(m))
        return nemotron_dense(m, layer, w, b, h, x, idx, wts, shared, obs, e);
    /* the layer as forward.c composes it, up to the routed experts */
    LWQ_TRY(lwq_fwd_mixer_block(m, layer, w, b, h, obs, e));
    LWQ_TRY(lwq_fwd_post_norm(m, layer, w, h, x, e));
    char name[LWQ_NAME_MAX], prefix[128];
    int mixtral;
    int64_t I;
    moe_names(m, layer, prefix, sizeof prefix, &mixtral, &I);
    lwq_tensor wg, logits, ti, tw;
    if (deepseek) { /* DeepSeek routing, then the shared experts (dense part) */
        LWQ_TRY(lwq_fwd_deepseek_route(m, layer, w, b, x, idx, wts, obs, e));
        if (lwq_fwd_stream_has_shared(m))
            LWQ_TRY(lwq_fwd_shared_block(m, layer, w, b, x, shared, obs, e));
        LWQ_TRY(lwq_backend_synchronize(m->be, e));
        return count_experts(m, layer, b, idx, obs, e);
    }
    /* the router, as lwq_fwd_moe_block runs it */
    const lwq_route_mode mode = c->norm_topk_prob ? LWQ_ROUTE_SOFTMAX_TOPK_NORM : LWQ_ROUTE_SOFTMAX_TOPK;
    snprintf(name, sizeof name, "%s.gate.weight", prefix);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 2, E, D, 0, &wg, e));
    snprintf(name, sizeof name, "%s.gate", prefix);
    LWQ_TRY(lwq_fwd_observe(obs, layer, name, x, &b->valid, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, E, &logits, e));
    LWQ_TRY(lwq_fwd_tensor(m, LWQ_I32, n, K, &ti, e));
    LWQ_TRY(lwq_fwd_tensor(m, LWQ_F32, n, K, &tw, e));
    LWQ_TRY(lwq_backend_gemm(m->be, x, &wg, NULL, &logits, e));
    LWQ_TRY(lwq_backend_moe_route(m->be, &logits, K, mode, m->act, &ti, &tw, e));
    LWQ_TRY(lwq_backend_download(m->be, idx, ti.data, (size_t)(n * K) * 4, e));
    LWQ_TRY(lwq_backend_download(m->be, wts, tw.data, (size_t)(n * K) * 4, e));
    if (lwq_fwd_stream_has_shared(m)) /* the gated shared expert (dense part) */
        LWQ_TRY(lwq_fwd_shared_block(m, layer, w, b, x, shared, obs, e));
    LWQ_TRY(lwq_backend_synchronize(m->be, e)); /* the dense part's device errors (see below) */
    return count_experts(m, layer, b, idx, obs, e);
}

/* Check the routing of the real tokens and report the per-expert token counts. */
static int count_experts(lwq_model *m, int layer, const lwq_batch *b, const int32_t *idx, const lwq_observer *obs,
                         lwq_error *e)
{
    const int E = m->cfg->num_experts, K = m->cfg->num_experts_per_tok;
    const int64_t n = b->batch * b->seq;
    int64_t *counts = calloc((size_t)E, sizeof *counts);
    if (!counts)
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory", layer);
    int rc = 0;
    for (int64_t i = 0; i < n * K && rc == 0; i++) {
        if (!b->valid_host[i / K])
            continue;
        if (idx[i] < 0 || idx[i] >= E)
            rc = lwq_errf(e, LWQ_ENUMERIC, "layer %d: router chose expert %d for token %" PRId64
                          " (NaN router logits?)", layer, idx[i], i / K);
        else
            counts[idx[i]]++;
    }
    if (rc == 0 && obs && obs->expert_counts)
        rc = obs->expert_counts(obs->ctx, layer, counts, E, e);
    free(counts);
    return rc < 0 ? rc : 0;
}

typedef struct group_host {
    int32_t *rows, *slot, *vrows;
    float *ws;
    int64_t *off;
} group_host;

static void group_host_free(group_host *g)
{
    free(g->rows);
    free(g->slot);
    free(g->vrows);
    free(g->ws);
    free(g->off);
}

static int upload_i32(lwq_model *m, const int32_t *src, int64_t rows, int64_t cols, lwq_tensor *t, lwq_error *e)
{
    LWQ_TRY(lwq_fwd_tensor(m, LWQ_I32, rows, cols, t, e));
    LWQ_TRY(lwq_backend_upload(m->be, t->data, src, (size_t)(rows * cols) * 4, e));
    if (cols == 1)
        t->ndim = 1;
    return 0;
}

/* Rows of the group's experts: expert-major, tokens ascending within an expert (the order of
 * lwq_fwd_moe_experts), and per token a combine row: column 0 the running sum (row t of the
 * first n rows, weight 1; -1 for the first group or a padding token), columns 1..K the token's
 * experts in ascending expert order, -1 where the expert is outside the group. */
static int64_t group_plan(group_host *g, const int32_t *idx, const float *wts, const uint8_t *valid, int64_t n,
                          int K, int e0, int e1, int first)
{
    int G = e1 - e0;
    int64_t *cnt = g->off + G + 1;
    memset(cnt, 0, (size_t)G * sizeof *cnt);
    for (int64_t t = 0; t < n; t++)
        if (valid[t])
            for (int s = 0; s < K; s++)
                if (idx[t * K + s] >= e0 && idx[t * K + s] < e1)
                    cnt[idx[t * K + s] - e0]++;
    g->off[0] = 0;
    for (int x = 0; x < G; x++)
        g->off[x + 1] = g->off[x] + cnt[x];
    memcpy(cnt, g->off, (size_t)G * sizeof *cnt); /* cnt becomes the write cursor */
    int64_t C = K + 1;
    for (int64_t t = 0; t < n; t++) {
        int32_t *slot = g->slot + t * C;
        float *ws = g->ws + t * C;
        for (int s = 0; s < C; s++) {
            slot[s] = -1;
            ws[s] = 0.0f;
        }
        if (!valid[t])
            continue;
        if (!first) {
            slot[0] = (int32_t)t;
            ws[0] = 1.0f;
        }
        int32_t ex[64];
        float wv[64];
        for (int s = 0; s < K; s++) { /* insertion sort by expert, as lwq_fwd_moe_experts */
            int32_t xe = idx[t * K + s];
            float xw = wts[t * K + s];
            int p = s;
            while (p > 0 && ex[p - 1] > xe) {
                ex[p] = ex[p - 1];
                wv[p] = wv[p - 1];
                p--;
            }
            ex[p] = xe;
            wv[p] = xw;
        }
        for (int s = 0; s < K; s++) {
            if (ex[s] < e0 || ex[s] >= e1)
                continue;
            int64_t row = cnt[ex[s] - e0]++;
            g->rows[row] = (int32_t)t;
            slot[1 + s] = (int32_t)(n + row);
            ws[1 + s] = wv[s];
        }
    }
    return g->off[G];
}

int lwq_fwd_stream_experts(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                           const lwq_tensor *x, const int32_t *idx, const float *wts, int e0,
                           int e1, int first, lwq_tensor *partial, const lwq_observer *obs,
                           lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    LWQ_TRY(lwq_fwd_stream_supported(m, layer, e));
    const int64_t n = x->shape[0], D = lwq_fwd_stream_width(m); /* hidden, or nemotron_h's latent */
    const int E = c->num_experts, K = c->num_experts_per_tok, G = e1 - e0;
    if (x->shape[1] != D || partial->shape[0] != n || partial->shape[1] != D ||
        partial->dtype != lwq_fwd_stream_sum_dtype(m))
        return lwq_errf(e, LWQ_EINVAL, "layer %d: streamed experts on x (%" PRId64 ", %" PRId64 ") and a %s sum "
                        "(%" PRId64 ", %" PRId64 "); expected (%" PRId64 ", %" PRId64 ") and %s", layer, x->shape[0],
                        x->shape[1], lwq_dtype_name(partial->dtype), partial->shape[0], partial->shape[1], n, D,
                        lwq_dtype_name(lwq_fwd_stream_sum_dtype(m)));
    if (e0 < 0 || e1 > E || G <= 0)
        return lwq_errf(e, LWQ_EINVAL, "layer %d: expert group [%d, %d) outside [0, %d)", layer, e0, e1, E);
    char prefix[128];
    int mixtral;
    int64_t I;
    moe_names(m, layer, prefix, sizeof prefix, &mixtral, &I);
    lwq_fwd_arena_reset(m);
    LWQ_TRY(lwq_fwd_observe_batch(obs, layer, b, e));
    group_host g;
    memset(&g, 0, sizeof g);
    size_t nk = (size_t)(n * K) + 1, nc = (size_t)(n * (K + 1)) + 1;
    g.rows = malloc(nk * 4);
    g.slot = malloc(nc * 4);
    g.ws = malloc(nc * 4);
    g.vrows = malloc(((size_t)n + 1) * 4);
    g.off = malloc((size_t)(2 * G + 1) * 8);
    int rc = 0;
    if (!g.rows || !g.slot || !g.ws || !g.vrows || !g.off) {
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: no memory for the routing of %" PRId64 " tokens", layer, n);
        goto out;
    }
    int64_t mrows = group_plan(&g, idx, wts, b->valid_host, n, K, e0, e1, first);
    int64_t maxc = 0;
    for (int xg = 0; xg < G; xg++)
        maxc = g.off[xg + 1] - g.off[xg] > maxc ? g.off[xg + 1] - g.off[xg] : maxc;
    /* the combine's rows: the running sum (n rows), then the group's expert outputs; with a sum
     * wider than the act dtype (nemotron_h's float32) the experts write act-dtype rows `ya`,
     * widened exactly into the combine's rows (as the one-shot combine reads them) */
    const lwq_dtype sdt = partial->dtype;
    const int wide = sdt != m->act;
    lwq_tensor rows, slot, ws, xe, y, ya, gt, ut, ident;
    if ((rc = upload_i32(m, g.slot, n, K + 1, &slot, e)) < 0 ||
        (rc = lwq_fwd_tensor(m, LWQ_F32, n, K + 1, &ws, e)) < 0 ||
        (rc = lwq_backend_upload(m->be, ws.data, g.ws, (size_t)(n * (K + 1)) * 4, e)) < 0 ||
        (rc = lwq_fwd_tensor(m, sdt, n + mrows, D, &y, e)) < 0 ||
        (wide && mrows > 0 && (rc = lwq_fwd_tensor(m, m->act, mrows, D, &ya, e)) < 0))
        goto out;
    if (!first) { /* the running sum into y's first n rows */
        for (int64_t t = 0; t < n; t++)
            g.vrows[t] = (int32_t)t;
        lwq_tensor y0 = lwq_fwd_rows(&y, 0, n);
        if ((rc = upload_i32(m, g.vrows, n, 1, &ident, e)) < 0 ||
            (rc = lwq_backend_gather_rows(m->be, partial, &ident, &y0, e)) < 0)
            goto out;
    }
    if (mrows > 0 &&
        ((rc = upload_i32(m, g.rows, mrows, 1, &rows, e)) < 0 ||
         (rc = lwq_fwd_tensor(m, m->act, mrows, D, &xe, e)) < 0 ||
         (rc = lwq_fwd_tensor(m, m->act, maxc, I, &gt, e)) < 0 ||
         (rc = lwq_fwd_tensor(m, m->act, maxc, I, &ut, e)) < 0 ||
         (rc = lwq_backend_gather_rows(m->be, x, &rows, &xe, e)) < 0))
        goto out;
    const lwq_fwd_experts ex = {prefix, mixtral, I, e0, G, c->family->experts == LWQ_EXPERTS_NEMOTRON};
    lwq_tensor yw = mrows > 0 ? lwq_fwd_rows(&y, n, mrows) : y;
    const lwq_fwd_routed r = {g.off, &xe, wide ? &ya : &y, &gt, &ut, wide ? 0 : n, &slot, &ws, g.rows,
                              wide ? &y : NULL, wide && mrows > 0 ? &yw : NULL};
    rc = lwq_fwd_moe_run(m, layer, w, b, x, &ex, &r, partial, g.vrows, obs, e);
    /* as lwq_model_layer_forward: the device flags errors it only sees while running (a gather
     * row out of range); synchronize reports them, so no unit ends with one unread */
    if (rc >= 0)
        rc = lwq_backend_synchronize(m->be, e);
out:
    group_host_free(&g);
    return rc < 0 ? rc : 0;
}
