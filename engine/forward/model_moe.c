/* engine/forward/model_moe.c — the routed-expert block of qwen3_moe and mixtral.
 *
 *   logits = x Wgate^T (act dtype)                 observed: <prefix>.gate
 *   qwen3_moe: softmax(f32) -> top-k -> renormalise when norm_topk_prob
 *   mixtral:   softmax(f32) -> top-k -> renormalise (transformers' order of operations)
 *   weights cast to the act dtype (as transformers does before the expert products)
 *   out[t] = sum over t's experts, in ascending expert order, of w * expert(x[t])
 *
 * Only real (non-padding) tokens are routed; expert e runs once on the rows routed to it,
 * gathered into one contiguous block, and the per-token combine is a gather-sum in expert order
 * (deterministic, no atomics; the same rounding sequence as transformers' index_add_ loop).
 * Names: qwen3_moe model.layers.L.mlp.{gate, experts.E.{gate,up,down}_proj};
 *        mixtral   model.layers.L.block_sparse_moe.{gate, experts.E.{w1 (gate), w3 (up), w2 (down)}}.
 * In all-experts mode each expert additionally runs on every real token with the observers on,
 * and the routed run is not observed, so statistics cover all tokens and the output is exactly
 * the routed one. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/forward_internal.h"

#define MOE_GROUP_ROWS 4096 /* routed rows per grouped range (lwq_fwd_moe_run), at least */

typedef struct moe_host {
    int32_t *idx, *rows, *slot, *vrows;
    float *wts, *wsorted;
    int64_t *counts, *off;
} moe_host;

static void moe_host_free(moe_host *h)
{
    free(h->idx);
    free(h->rows);
    free(h->slot);
    free(h->vrows);
    free(h->wts);
    free(h->wsorted);
    free(h->counts);
    free(h->off);
}

/* Build the routing plan on the host: per-expert row lists (tokens ascending) and, per token,
 * its slots sorted by expert index pointing into the expert-grouped output rows. */
static int64_t moe_plan(moe_host *h, const uint8_t *valid, int64_t n, int K, int E)
{
    int64_t *cur = h->off + E + 1; /* scratch after off[0..E] */
    memset(h->counts, 0, (size_t)E * sizeof(int64_t));
    for (int64_t t = 0; t < n; t++)
        if (valid[t])
            for (int s = 0; s < K; s++)
                h->counts[h->idx[t * K + s]]++;
    h->off[0] = 0;
    for (int ex = 0; ex < E; ex++)
        h->off[ex + 1] = h->off[ex] + h->counts[ex];
    memcpy(cur, h->off, (size_t)E * sizeof(int64_t));
    for (int64_t t = 0; t < n; t++) {
        int32_t *slot = h->slot + t * K;
        float *ws = h->wsorted + t * K;
        if (!valid[t]) {
            for (int s = 0; s < K; s++) {
                slot[s] = -1;
                ws[s] = 0.0f;
            }
            continue;
        }
        /* insertion sort of this token's (expert, weight) pairs by expert */
        int32_t ex[64];
        float wv[64];
        for (int s = 0; s < K; s++) {
            int32_t xe = h->idx[t * K + s];
            float xw = h->wts[t * K + s];
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
            int64_t row = cur[ex[s]]++;
            h->rows[row] = (int32_t)t;
            slot[s] = (int32_t)row;
            ws[s] = wv[s];
        }
    }
    return h->off[E];
}

/* cols 0: a vector (rows); else a (rows, cols) matrix, also when cols is 1 (top-1 routing). */
static int upload_i32(lwq_model *m, const int32_t *src, int64_t rows, int64_t cols, lwq_tensor *t,
                      lwq_error *e)
{
    LWQ_TRY(lwq_fwd_tensor(m, LWQ_I32, rows, cols ? cols : 1, t, e));
    LWQ_TRY(lwq_backend_upload(m->be, t->data, src, (size_t)(rows * (cols ? cols : 1)) * 4, e));
    if (!cols)
        t->ndim = 1;
    return 0;
}

int lwq_fwd_moe_block(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                      const lwq_tensor *x, lwq_tensor *out, const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = x->shape[0], D = c->hidden_size;
    const int E = c->num_experts, K = c->num_experts_per_tok;
    int mixtral;
    int64_t I;
    char prefix[128], name[LWQ_NAME_MAX];
    lwq_fwd_experts_names(c, layer, prefix, sizeof prefix, &mixtral, &I);
    /* norm_topk_prob is set where the family always renormalises (mixtral) */
    const lwq_route_mode mode = c->norm_topk_prob ? LWQ_ROUTE_SOFTMAX_TOPK_NORM : LWQ_ROUTE_SOFTMAX_TOPK;
    lwq_tensor wg, logits, idx, wts;
    snprintf(name, sizeof name, "%s.gate.weight", prefix);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 2, E, D, 0, &wg, e));
    snprintf(name, sizeof name, "%s.gate", prefix);
    LWQ_TRY(lwq_fwd_observe(obs, layer, name, x, &b->valid, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, n, E, &logits, e));
    LWQ_TRY(lwq_fwd_tensor(m, LWQ_I32, n, K, &idx, e));
    LWQ_TRY(lwq_fwd_tensor(m, LWQ_F32, n, K, &wts, e));
    LWQ_TRY(lwq_backend_gemm(m->be, x, &wg, NULL, &logits, e));
    LWQ_TRY(lwq_backend_moe_route(m->be, &logits, K, mode, m->act, &idx, &wts, e));

    size_t nk = (size_t)(n * K) + 1;
    int32_t *hidx = (int32_t *)malloc(nk * 4);
    float *hwts = (float *)malloc(nk * 4);
    int rc = 0;
    if (!hidx || !hwts)
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: no memory for the routing of %" PRId64 " tokens",
                      layer, n);
    if (rc == 0 &&
        (rc = lwq_backend_download(m->be, hidx, idx.data, (size_t)(n * K) * 4, e)) == 0 &&
        (rc = lwq_backend_download(m->be, hwts, wts.data, (size_t)(n * K) * 4, e)) == 0)
        rc = lwq_fwd_moe_experts(m, layer, w, b, x, prefix, mixtral, I, hidx, hwts, out, obs, e);
    free(hidx);
    free(hwts);
    return rc < 0 ? rc : 0;
}

int lwq_fwd_moe_experts(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                        const lwq_tensor *x, const char *prefix, int mixtral_names, int64_t I,
                        const int32_t *idx_host, const float *wts_host, lwq_tensor *out,
                        const lwq_observer *obs, lwq_error *e)
{
    const lwq_model_config *c = m->cfg;
    const int64_t n = x->shape[0], D = x->shape[1]; /* hidden, or nemotron_h's latent */
    const int E = c->num_experts, K = c->num_experts_per_tok;
    if (I <= 0)
        return lwq_errf(e, LWQ_EINVAL, "layer %d: %s expert width %" PRId64 " must be > 0", layer,
                        c->model_type, I);
    moe_host h;
    memset(&h, 0, sizeof h);
    size_t nk = (size_t)(n * K) + 1;
    h.idx = (int32_t *)malloc(nk * 4);
    h.rows = (int32_t *)malloc(nk * 4);
    h.slot = (int32_t *)malloc(nk * 4);
    h.vrows = (int32_t *)malloc(((size_t)n + 1) * 4);
    h.wts = (float *)malloc(nk * 4);
    h.wsorted = (float *)malloc(nk * 4);
    h.counts = (int64_t *)malloc((size_t)E * 8);
    h.off = (int64_t *)malloc((size_t)(2 * E + 1) * 8);
    int rc = 0;
    if (!h.idx || !h.rows || !h.slot || !h.vrows || !h.wts || !h.wsorted || !h.counts || !h.off) {
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: no memory for the routing plan of %" PRId64
                      " tokens", layer, n);
        goto out;
    }
    memcpy(h.idx, idx_host, (size_t)(n * K) * 4);
    memcpy(h.wts, wts_host, (size_t)(n * K) * 4);
    for (int64_t i = 0; i < n * K; i++)
        if (b->valid_host[i / K] && (h.idx[i] < 0 || h.idx[i] >= E)) {
            rc = lwq_errf(e, LWQ_ENUMERIC, "layer %d: router chose expert %d for token %" PRId64
                          " (NaN router logits?)", layer, h.idx[i], i / K);
            goto out;
        }
    int64_t mrows = moe_plan(&h, b->valid_host, n, K, E);
    if (obs && obs->expert_counts &&
        (rc = obs->expert_counts(obs->ctx, layer, h.counts, E, e)) < 0)
        goto out;

    /* g, u: rows for the grouped experts, all routed rows up to MOE_GROUP_ROWS (more only when
     * one expert has more), so the scratch stays bounded at large batches */
    lwq_tensor rows, slot, wsorted, xe, y, g, u;
    int64_t grows = 0;
    for (int ex = 0; ex < E; ex++)
        grows = h.counts[ex] > grows ? h.counts[ex] : grows;
    grows = grows > MOE_GROUP_ROWS ? grows : mrows < MOE_GROUP_ROWS ? mrows : MOE_GROUP_ROWS;
    if ((rc = upload_i32(m, h.rows, mrows, 0, &rows, e)) < 0 ||
        (rc = upload_i32(m, h.slot, n, K, &slot, e)) < 0 ||
        (rc = lwq_fwd_tensor(m, LWQ_F32, n, K, &wsorted, e)) < 0 ||
        (rc = lwq_backend_upload(m->be, wsorted.data, h.wsorted, (size_t)(n * K) * 4, e)) < 0 ||
        (rc = lwq_fwd_tensor(m, m->act, mrows, D, &xe, e)) < 0 ||
        (rc = lwq_fwd_tensor(m, m->act, mrows, D, &y, e)) < 0 ||
        (rc = lwq_fwd_tensor(m, m->act, grows, I, &g, e)) < 0 ||
        (rc = lwq_fwd_tensor(m, m->act, grows, I, &u, e)) < 0 ||
        (rc = lwq_backend_gather_rows(m->be, x, &rows, &xe, e)) < 0)
        goto out;
    const lwq_fwd_experts ex = {prefix, mixtral_names, I, 0, E, c->family->experts == LWQ_EXPERTS_NEMOTRON};
    const lwq_fwd_routed r = {h.off, &xe, &y, &g, &u, 0, &slot, &wsorted, h.rows, NULL, NULL};
    rc = lwq_fwd_moe_run(m, layer, w, b, x, &ex, &r, out, h.vrows, obs, e);
out:
    moe_host_free(&h);
    return rc < 0 ? rc : 0;
}
