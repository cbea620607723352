/* engine/forward/fwd_common.c — the toolkit every architecture's forward is built from: the scratch
 * arena, checked weight lookup, the observer call, left-padded batches, the RoPE table, and the
 * blocks several architectures share (a linear with its optional bias, the SwiGLU MLP, the
 * post-attention half of a decoder layer).  It calls no architecture file; engine/forward/forward.c
 * (the one switch on the architecture) and the model_*.c files call it. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/forward_internal.h"

/* ---- arena ------------------------------------------------------------------------------------
 * Bump allocation from device blocks.  When one forward needed more than the first block, the
 * next reset replaces all blocks by one block of the peak size, so steady state is one block and
 * no device allocation per layer. */

#define ARENA_MAX_BLOCKS 64
#define ARENA_ALIGN 256

typedef struct lwq_arena {
    void *blk[ARENA_MAX_BLOCKS];
    size_t cap[ARENA_MAX_BLOCKS];
    int nblk;
    size_t used;  /* in the last block */
    size_t total; /* bytes handed out since the last reset */
    size_t peak;
} lwq_arena;

void lwq_fwd_arena_reset(lwq_model *m)
{
    lwq_arena *a = m->arena;
    if (a->total > a->peak)
        a->peak = a->total;
    if (a->nblk > 1) {
        for (int i = 0; i < a->nblk; i++)
            lwq_backend_free(m->be, a->blk[i]);
        a->nblk = 0;
        void *p;
        if (lwq_backend_alloc(m->be, a->peak, &p, NULL) == 0) {
            a->blk[0] = p;
            a->cap[0] = a->peak;
            a->nblk = 1;
        }
    }
    a->used = 0;
    a->total = 0;
}

void lwq_fwd_arena_free(lwq_model *m)
{
    lwq_arena *a = m->arena;
    if (!a)
        return;
    for (int i = 0; i < a->nblk; i++)
        lwq_backend_free(m->be, a->blk[i]);
    free(a);
    m->arena = NULL;
}

int lwq_model_reserve_scratch(lwq_model *m, uint64_t bytes, lwq_error *e)
{
    lwq_arena *a = m->arena;
    if (a->nblk)
        return 0;
    if (bytes < LWQ_FWD_ARENA_FIRST)
        bytes = LWQ_FWD_ARENA_FIRST;
    if (bytes > SIZE_MAX / 4)
        return lwq_errf(e, LWQ_ENOMEM, "forward scratch: %llu bytes planned", (unsigned long long)bytes);
    void *p;
    LWQ_TRY(lwq_backend_alloc(m->be, (size_t)bytes, &p, e));
    a->blk[0] = p;
    a->cap[0] = (size_t)bytes;
    a->nblk = 1;
    a->used = 0;
    return 0;
}

struct lwq_arena *lwq_fwd_arena_new(void)
{
    return (lwq_arena *)calloc(1, sizeof(lwq_arena));
}

static int arena_get(lwq_model *m, size_t bytes, void **out, lwq_error *e)
{
    lwq_arena *a = m->arena;
    if (bytes > SIZE_MAX / 4)
        return lwq_errf(e, LWQ_ENOMEM, "forward scratch: %zu bytes requested", bytes);
    bytes = (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (bytes == 0)
        bytes = ARENA_ALIGN;
    if (a->nblk == 0 || a->used + bytes > a->cap[a->nblk - 1]) {
        if (a->nblk == ARENA_MAX_BLOCKS)
            return lwq_errf(e, LWQ_ENOMEM, "forward scratch: more than %d blocks in one layer",
                            ARENA_MAX_BLOCKS);
        size_t cap = a->nblk ? 2 * a->cap[a->nblk - 1] : (size_t)LWQ_FWD_ARENA_FIRST;
        if (cap < bytes)
            cap = bytes;
        void *p;
        LWQ_TRY(lwq_backend_alloc(m->be, cap, &p, e));
        a->blk[a->nblk] = p;
        a->cap[a->nblk] = cap;
        a->nblk++;
        a->used = 0;
    }
    *out = (char *)a->blk[a->nblk - 1] + a->used;
    a->used += bytes;
    a->total += bytes;
    return 0;
}

int lwq_fwd_tensor(lwq_model *m, lwq_dtype dt, int64_t rows, int64_t cols, lwq_tensor *t,
                   lwq_error *e)
{
    if (rows < 0 || cols < 0 || (cols > 0 && rows > INT64_MAX / 16 / cols))
        return lwq_errf(e, LWQ_EINVAL, "forward scratch: bad shape (%" PRId64 ", %" PRId64 ")",
                        rows, cols);
    void *p = NULL;
    LWQ_TRY(arena_get(m, (size_t)(rows * cols) * lwq_dtype_size(dt), &p, e));
    int64_t shape[2] = {rows, cols};
    *t = lwq_tensor_view(p, dt, 2, shape);
    t->device = m->be->ops->device;
    return 0;
}

lwq_tensor lwq_fwd_rows(const lwq_tensor *t, int64_t r0, int64_t nr)
{
    lwq_tensor v = *t;
    v.shape[0] = nr;
    v.data = (char *)t->data + (size_t)(r0 * t->shape[1]) * lwq_dtype_size(t->dtype);
    return v;
}

/* ---- weights and observers ------------------------------------------------------------------- */

int lwq_fwd_weight(lwq_model *m, const lwq_weights *w, int layer, const char *name, int ndim,
                   int64_t d0, int64_t d1, int optional, lwq_tensor *out, lwq_error *e)
{
    char where[32];
    if (layer >= 0)
        snprintf(where, sizeof where, "layer %d", layer);
    else
        snprintf(where, sizeof where, "model head/tail");
    memset(out, 0, sizeof *out);
    lwq_error sub = {0};
    int rc = w->get(w->ctx, name, out, &sub);
    if (rc == LWQ_ENOENT) {
        if (optional)
            return 1;
        return lwq_errf(e, LWQ_ENOENT, "%s: tensor %s is missing%s%s", where, name,
                        sub.msg[0] ? ": " : "", sub.msg);
    }
    if (rc < 0)
        return lwq_errf(e, rc, "%s: tensor %s: %s", where, name, sub.msg);
    if (!lwq_dtype_is_act(out->dtype))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: tensor %s has dtype %s, expected F32, BF16 or "
                        "F16", where, name, lwq_dtype_name(out->dtype));
    int bad = out->ndim != ndim || out->shape[0] != d0 || (ndim == 2 && out->shape[1] != d1);
    if (bad) {
        char got[96];
        if (out->ndim == 1)
            snprintf(got, sizeof got, "(%" PRId64 ")", out->shape[0]);
        else if (out->ndim == 2)
            snprintf(got, sizeof got, "(%" PRId64 ", %" PRId64 ")", out->shape[0], out->shape[1]);
        else
            snprintf(got, sizeof got, "%d dims", out->ndim);
        if (ndim == 1)
            return lwq_errf(e, LWQ_EFORMAT, "%s: tensor %s has shape %s, expected (%" PRId64 ")",
                            where, name, got, d0);
        return lwq_errf(e, LWQ_EFORMAT, "%s: tensor %s has shape %s, expected (%" PRId64 ", %"
                        PRId64 ")", where, name, got, d0, d1);
    }
    if (!lwq_tensor_is_contiguous(out) || out->device != m->be->ops->device || !out->data)
        return lwq_errf(e, LWQ_EINVAL, "%s: tensor %s is not a contiguous view on the %s backend's "
                        "device", where, name, m->be->ops->name);
    return 0;
}

int lwq_fwd_observe_tok(const lwq_observer *obs, int layer, const char *module, const lwq_tensor *x,
                        const lwq_tensor *valid, const int32_t *tok, lwq_error *e)
{
    if (!obs || !obs->linear_input)
        return 0;
    return obs->linear_input(obs->ctx, layer, module, x, valid, tok, e);
}

int lwq_fwd_observe(const lwq_observer *obs, int layer, const char *module, const lwq_tensor *x,
                    const lwq_tensor *valid, lwq_error *e)
{
    return lwq_fwd_observe_tok(obs, layer, module, x, valid, NULL, e);
}

int lwq_fwd_observe_batch(const lwq_observer *obs, int layer, const lwq_batch *b, lwq_error *e)
{
    if (!obs || !obs->begin_batch)
        return 0;
    return obs->begin_batch(obs->ctx, layer, b, e);
}

/* ---- batches --------------------------------------------------------------------------------- */

void lwq_batch_free(lwq_batch *b, const lwq_backend *be)
{
    lwq_backend_tensor_free(be, &b->pos);
    lwq_backend_tensor_free(be, &b->valid);
    free(b->valid_host);
    memset(b, 0, sizeof *b);
}

int lwq_batch_init(lwq_batch *b, const lwq_backend *be, int64_t batch, int64_t seq,
                   const int64_t *lengths, lwq_error *e)
{
    memset(b, 0, sizeof *b);
    if (batch < 0 || seq < 0 || (seq > 0 && batch > INT32_MAX / seq))
        return lwq_errf(e, LWQ_EINVAL, "batch: %" PRId64 " sequences of %" PRId64 " tokens is out "
                        "of range", batch, seq);
    int64_t n = batch * seq;
    for (int64_t s = 0; lengths && s < batch; s++)
        if (lengths[s] < 0 || lengths[s] > seq)
            return lwq_errf(e, LWQ_EINVAL, "batch: sequence %" PRId64 " has length %" PRId64
                            ", outside [0, %" PRId64 "]", s, lengths[s], seq);
    b->batch = batch;
    b->seq = seq;
    b->valid_host = (uint8_t *)malloc((size_t)n + 1);
    int32_t *pos = (int32_t *)malloc(((size_t)n + 1) * sizeof(int32_t));
    int rc = 0;
    if (!b->valid_host || !pos) {
        rc = lwq_errf(e, LWQ_ENOMEM, "batch: no memory for %" PRId64 " rows", n);
        goto out;
    }
    for (int64_t s = 0; s < batch; s++) {
        int64_t len = lengths ? lengths[s] : seq, pad = seq - len;
        for (int64_t t = 0; t < seq; t++) {
            b->valid_host[s * seq + t] = t >= pad;
            pos[s * seq + t] = t >= pad ? (int32_t)(t - pad) : 0;
        }
        b->n_valid += len;
    }
    int64_t shape[1] = {n};
    if ((rc = lwq_backend_tensor_alloc(be, LWQ_I32, 1, shape, &b->pos, e)) < 0 ||
        (rc = lwq_backend_tensor_alloc(be, LWQ_U8, 1, shape, &b->valid, e)) < 0 ||
        (rc = lwq_backend_upload(be, b->pos.data, pos, (size_t)n * 4, e)) < 0 ||
        (rc = lwq_backend_upload(be, b->valid.data, b->valid_host, (size_t)n, e)) < 0)
        goto out;
out:
    free(pos);
    if (rc < 0)
        lwq_batch_free(b, be);
    return rc;
}

int lwq_model_layer_is_moe(const lwq_model *m, int layer)
{
    /* one definition shared with the layer plans (layout/config/config.c) */
    return lwq_config_layer_is_moe(m->cfg, layer);
}

/* ---- RoPE ------------------------------------------------------------------------------------ */

int lwq_rope_inv_freq(const lwq_model_config *c, float *inv, float *attn_scaling, lwq_error *e)
{
    const int64_t d = lwq_fwd_gqa_rotary_dim(c), half = d / 2;
    const float base = (float)c->rope_theta;
    if (!(c->rope_theta > 0.0))
        return lwq_errf(e, LWQ_EINVAL, "config: rope_theta %g must be > 0", c->rope_theta);
    /* as transformers: exponent and power in f32 */
    for (int64_t i = 0; i < half; i++)
        inv[i] = 1.0f / powf(base, (float)(2 * i) / (float)d);
    *attn_scaling = 1.0f;
    switch (c->rope_type) {
    case LWQ_ROPE_DEFAULT:
        return 0;
    case LWQ_ROPE_LINEAR:
        if (!(c->rope_factor > 0.0))
            return lwq_errf(e, LWQ_EINVAL, "config: rope_scaling.factor %g must be > 0",
                            c->rope_factor);
        for (int64_t i = 0; i < half; i++)
            inv[i] /= (float)c->rope_factor;
        return 0;
    case LWQ_ROPE_LLAMA3: {
        const float factor = (float)c->rope_factor, lo = (float)c->rope_low_freq_factor,
                    hi = (float)c->rope_high_freq_factor;
        const float old_ctx = (float)c->rope_original_max_position;
        if (!(factor > 0.0f) || !(hi > lo) || !(old_ctx > 0.0f))
            return lwq_errf(e, LWQ_EINVAL, "config: llama3 rope_scaling needs factor > 0, "
                            "high_freq_factor > low_freq_factor and original_max_position_"
                            "embeddings > 0 (got %g, %g, %g, %g)", c->rope_factor,
                            c->rope_low_freq_factor, c->rope_high_freq_factor, (double)old_ctx);
        const float low_wl = old_ctx / lo, high_wl = old_ctx / hi;
        for (int64_t i = 0; i < half; i++) {
            float f = inv[i];
            float wl = (float)(2.0 * M_PI) / f;
            float scaled = wl > low_wl ? f / factor : f;
            float smooth = (old_ctx / wl - lo) / (hi - lo);
            float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
            int medium = !(wl < high_wl) && !(wl > low_wl);
            inv[i] = medium ? smoothed : scaled;
        }
        return 0;
    }
    default:
        return lwq_errf(e, LWQ_EUNSUPPORTED, "config: rope type %d is not supported by the "
                        "forward of %s (default, linear, llama3 are)", (int)c->rope_type,
                        c->model_type);
    }
}

int64_t lwq_fwd_gqa_rotary_dim(const lwq_model_config *c)
{
    return c->family && c->family->rope_partial ? lwq_config_rotary_dim(c) : c->head_dim;
}

int lwq_fwd_check_gqa_rotary(const lwq_model_config *c, lwq_error *e)
{
    if (!c->family || !c->family->rope_partial)
        return lwq_fwd_check_full_rotary(c, e);
    int64_t rot = lwq_fwd_gqa_rotary_dim(c);
    if (rot < 2 || rot % 2 || rot > c->head_dim)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "config (%s): partial_rotary_factor %g gives %" PRId64
                        " rotary dims of head_dim %" PRId64 " (an even number, at least 2, is needed)",
                        c->model_type, c->partial_rotary_factor, rot, c->head_dim);
    return 0;
}

lwq_tensor lwq_fwd_sview(const lwq_tensor *base, int64_t off, int ndim, int64_t d0, int64_t d1,
                         int64_t d2, int64_t s0, int64_t s1, int64_t s2)
{
    lwq_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = base->dtype;
    t.device = base->device;
    t.ndim = ndim;
    t.data = (char *)base->data + (size_t)off * lwq_dtype_size(base->dtype);
    int64_t d[3] = {d0, d1, d2}, s[3] = {s0, s1, s2};
    for (int i = 0; i < ndim; i++) {
        t.shape[i] = d[i];
        t.stride[i] = s[i];
    }
    return t;
}

int lwq_fwd_check_full_rotary(const lwq_model_config *c, lwq_error *e)
{
    if (c->partial_rotary_factor != 0.0 && c->partial_rotary_factor != 1.0)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "config (%s): partial_rotary_factor %g is not "
                        "supported by this forward (full rotary only)", c->model_type,
                        c->partial_rotary_factor);
    return 0;
}

/* ---- shared blocks --------------------------------------------------------------------------- */

int lwq_fwd_linear(lwq_model *m, const lwq_weights *w, int layer, const char *module, int64_t out,
                   int64_t in, int need_bias, lwq_tensor *wt, lwq_tensor *bias, int *has_bias,
                   lwq_error *e)
{
    char name[LWQ_NAME_MAX];
    snprintf(name, sizeof name, "%s.weight", module);
    LWQ_TRY(lwq_fwd_weight(m, w, layer, name, 2, out, in, 0, wt, e));
    snprintf(name, sizeof name, "%s.bias", module);
    int rc = lwq_fwd_weight(m, w, layer, name, 1, out, 0, !need_bias, bias, e);
    if (rc < 0)
        return rc;
    *has_bias = rc == 0;
    return 0;
}

static int swiglu_mlp(lwq_model *m, int layer, const lwq_weights *w, const char *prefix, const char *gate,
                      const char *up, const char *down, int64_t inter, const lwq_tensor *x,
                      const lwq_tensor *valid, const int32_t *tok, lwq_tensor *g, lwq_tensor *u,
                      lwq_tensor *out, const lwq_observer *obs, lwq_error *e);

int lwq_fwd_swiglu_mlp(lwq_model *m, int layer, const lwq_weights *w, const char *prefix,
                       const char *gate, const char *up, const char *down, int64_t inter,
                       const lwq_tensor *x, const lwq_tensor *valid, lwq_tensor *g, lwq_tensor *u,
                       lwq_tensor *out, const lwq_observer *obs, lwq_error *e)
{
    return swiglu_mlp(m, layer, w, prefix, gate, up, down, inter, x, valid, NULL, g, u, out, obs, e);
}

int lwq_fwd_swiglu_mlp_tok(lwq_model *m, int layer, const lwq_weights *w, const char *prefix,
                           const char *gate, const char *up, const char *down, int64_t inter,
                           const lwq_tensor *x, const int32_t *tok, lwq_tensor *g, lwq_tensor *u,
                           lwq_tensor *out, const lwq_observer *obs, lwq_error *e)
{
    return swiglu_mlp(m, layer, w, prefix, gate, up, down, inter, x, NULL, tok, g, u, out, obs, e);
}

static int swiglu_mlp(lwq_model *m, int layer, const lwq_weights *w, const char *prefix, const char *gate,
                      const char *up, const char *down, int64_t inter, const lwq_tensor *x,
                      const lwq_tensor *valid, const int32_t *tok, lwq_tensor *g, lwq_tensor *u,
                      lwq_tensor *out, const lwq_observer *obs, lwq_error *e)
{
    const int64_t n = x->shape[0], D = m->cfg->hidden_size;
    char mg[LWQ_NAME_MAX], mu[LWQ_NAME_MAX], md[LWQ_NAME_MAX];
    snprintf(mg, sizeof mg, "%s.%s", prefix, gate);
    snprintf(mu, sizeof mu, "%s.%s", prefix, up);
    snprintf(md, sizeof md, "%s.%s", prefix, down);
    /* llama's mlp_bias adds biases to all three; otherwise a bias is used when present */
    const int need_bias = m->cfg->mlp_bias && m->cfg->family->mlp_bias;
    lwq_tensor wg, wu, wd, bg, bu, bd, gs, us;
    int hbg, hbu, hbd;
    LWQ_TRY(lwq_fwd_linear(m, w, layer, mg, inter, D, need_bias, &wg, &bg, &hbg, e));
    LWQ_TRY(lwq_fwd_linear(m, w, layer, mu, inter, D, need_bias, &wu, &bu, &hbu, e));
    LWQ_TRY(lwq_fwd_linear(m, w, layer, md, D, inter, need_bias, &wd, &bd, &hbd, e));
    if (!g) {
        LWQ_TRY(lwq_fwd_tensor(m, m->act, n, inter, &gs, e));
        g = &gs;
    }
    if (!u) {
        LWQ_TRY(lwq_fwd_tensor(m, m->act, n, inter, &us, e));
        u = &us;
    }
    LWQ_TRY(lwq_fwd_observe_tok(obs, layer, mg, x, valid, tok, e));
    LWQ_TRY(lwq_fwd_observe_tok(obs, layer, mu, x, valid, tok, e));
    /* gate and up read the same x: one grouped call, which packs it once */
    const lwq_gemm_group gu[2] = {{x, &wg, hbg ? &bg : NULL, g}, {x, &wu, hbu ? &bu : NULL, u}};
    LWQ_TRY(lwq_backend_gemm_grouped(m->be, gu, 2, e));
    LWQ_TRY(lwq_backend_swiglu(m->be, g, u, g, e));
    LWQ_TRY(lwq_fwd_observe_tok(obs, layer, md, g, valid, tok, e));
    return lwq_backend_gemm(m->be, g, &wd, hbd ? &bd : NULL, out, e);
}

void lwq_fwd_experts_names(const lwq_model_config *c, int layer, char *prefix, size_t cap,
                           int *mixtral_names, int64_t *inter)
{
    *mixtral_names = c->family->experts == LWQ_EXPERTS_MIXTRAL;
    *inter = c->family->keys == LWQ_KEYS_MIXTRAL ? c->intermediate_size : c->moe_intermediate_size;
    snprintf(prefix, cap, *mixtral_names ? "model.layers.%d.block_sparse_moe"
                          : c->family->experts == LWQ_EXPERTS_NEMOTRON ? "model.layers.%d.mixer"
                                                                       : "model.layers.%d.mlp",
             layer);
}

/* y = relu(y)^2 in place, rounded once to y's dtype (transformers' ReLUSquaredActivation: relu,
 * then torch.square in the activation dtype).  y: (rows, d) contiguous on the device. */
static int relu2_inplace(lwq_model *m, lwq_tensor *y, lwq_error *e)
{
    const int64_t numel = lwq_tensor_numel(y);
    const size_t es = lwq_dtype_size(y->dtype), bytes = (size_t)numel * es;
    void *p = y->data, *tmp = NULL;
    if (y->device != LWQ_DEV_CPU) {
        if (!(p = tmp = malloc(bytes ? bytes : 1)))
            return lwq_errf(e, LWQ_ENOMEM, "relu2: no host memory for %zu bytes", bytes);
        int rc = lwq_backend_download(m->be, tmp, y->data, bytes, e);
        if (rc < 0) {
            free(tmp);
            return rc;
        }
    }
    for (int64_t i = 0; i < numel; i++) {
        float v = lwq_load_f(p, y->dtype, (size_t)i);
        v = v > 0.0f ? v * v : 0.0f;
        if (y->dtype == LWQ_BF16)
            ((uint16_t *)p)[i] = lwq_f32_to_bf16(v);
        else if (y->dtype == LWQ_F16)
            ((uint16_t *)p)[i] = lwq_f32_to_f16(v);
        else
            ((float *)p)[i] = v;
    }
    int rc = 0;
    if (tmp) {
        rc = lwq_backend_upload(m->be, y->data, tmp, bytes, e);
        free(tmp);
    }
    return rc;
}

int lwq_fwd_relu2_mlp(lwq_model *m, int layer, const lwq_weights *w, const char *prefix, int64_t inter,
                      const lwq_tensor *x, const lwq_tensor *valid, const int32_t *tok, lwq_tensor *u,
                      lwq_tensor *out, const lwq_observer *obs, lwq_error *e)
{
    const int64_t n = x->shape[0], in = x->shape[1], od = out->shape[1];
    char mu[LWQ_NAME_MAX], md[LWQ_NAME_MAX];
    snprintf(mu, sizeof mu, "%s.up_proj", prefix);
    snprintf(md, sizeof md, "%s.down_proj", prefix);
    lwq_tensor wu, wd, us, bu, bd;
    int hbu, hbd;
    LWQ_TRY(lwq_fwd_linear(m, w, layer, mu, inter, in, 0, &wu, &bu, &hbu, e));
    LWQ_TRY(lwq_fwd_linear(m, w, layer, md, od, inter, 0, &wd, &bd, &hbd, e));
    if (!u) {
        LWQ_TRY(lwq_fwd_tensor(m, m->act, n, inter, &us, e));
        u = &us;
    }
    LWQ_TRY(lwq_fwd_observe_tok(obs, layer, mu, x, valid, tok, e));
    LWQ_TRY(lwq_backend_gemm(m->be, x, &wu, hbu ? &bu : NULL, u, e));
    LWQ_TRY(relu2_inplace(m, u, e));
    LWQ_TRY(lwq_fwd_observe_tok(obs, layer, md, u, valid, tok, e));
    return lwq_backend_gemm(m->be, u, &wd, hbd ? &bd : NULL, out, e);
}

/* ---- routed experts, shared by model_moe.c and fwd_stream.c ---------------------------------- */

/* Experts [j0, j1) of ex as three grouped products (gate and up together, then down): every
 * expert's rows in one scheduled job per step, so the backend keeps all its threads busy across
 * experts (lwq_backend_gemm_grouped) instead of forking and joining three times per expert.
 * r->g and r->u hold the range's off[j1] - off[j0] rows (the caller cuts the experts into such
 * ranges); SiLU x up runs once over them.  Each product, and so each bit, is the one a per-expert
 * loop computes; the observers see the same inputs, per module in the same order. */
typedef struct moe_expert_w {
    lwq_tensor w[3], b[3];
    int hb[3];
} moe_expert_w;

static int moe_grouped(lwq_model *m, int layer, const lwq_weights *w, const lwq_fwd_experts *ex,
                       const lwq_fwd_routed *r, int j0, int j1, const char *const names[3],
                       const lwq_observer *robs, lwq_error *e)
{
    const int64_t D = m->cfg->hidden_size, I = ex->inter;
    const int need_bias = m->cfg->mlp_bias && m->cfg->family->mlp_bias;
    const int64_t rows = r->off[j1] - r->off[j0];
    const int ne = j1 - j0;
    moe_expert_w *ew = (moe_expert_w *)calloc((size_t)ne + 1, sizeof *ew);
    lwq_gemm_group *gg = (lwq_gemm_group *)calloc(2 * (size_t)ne + 1, sizeof *gg);
    lwq_tensor *views = (lwq_tensor *)calloc(5 * (size_t)ne + 1, sizeof *views);
    int rc = 0, ng = 0;
    if (!ew || !gg || !views) {
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: no memory for the plan of %d experts", layer, ne);
        goto out;
    }
    char ep[192], mod[LWQ_NAME_MAX];
    const int64_t outs[3] = {I, I, D}, ins[3] = {D, D, I};
    lwq_tensor G = lwq_fwd_rows(r->g, 0, rows), U = lwq_fwd_rows(r->u, 0, rows);
    /* gate and up: weights, observers, one grouped call */
    for (int j = j0; j < j1 && rc == 0; j++) {
        const int64_t o = r->off[j], cnt = r->off[j + 1] - o, q = 5 * (int64_t)(j - j0);
        if (cnt == 0)
            continue;
        lwq_tensor *xv = &views[q], *gv = xv + 1, *uv = xv + 2, *dv = xv + 3, *yv = xv + 4;
        *xv = lwq_fwd_rows(r->xe, o, cnt);
        *gv = lwq_fwd_rows(&G, o - r->off[j0], cnt);
        *uv = lwq_fwd_rows(&U, o - r->off[j0], cnt);
        *dv = lwq_fwd_rows(&G, o - r->off[j0], cnt);
        *yv = lwq_fwd_rows(r->y, r->y0 + o, cnt);
        snprintf(ep, sizeof ep, "%s.experts.%d", ex->prefix, ex->e0 + j);
        moe_expert_w *wj = &ew[j - j0];
        for (int k = 0; k < 3 && rc == 0; k++) {
            snprintf(mod, sizeof mod, "%s.%s", ep, names[k]);
            rc = lwq_fwd_linear(m, w, layer, mod, outs[k], ins[k], need_bias, &wj->w[k],
                                &wj->b[k], &wj->hb[k], e);
        }
        for (int k = 0; k < 2 && rc == 0; k++) {
            snprintf(mod, sizeof mod, "%s.%s", ep, names[k]);
            rc = lwq_fwd_observe_tok(robs, layer, mod, xv, NULL, r->tok + o, e);
        }
        for (int k = 0; k < 2; k++)
            gg[ng++] = (lwq_gemm_group){xv, &wj->w[k], wj->hb[k] ? &wj->b[k] : NULL, k ? uv : gv};
    }
    if (rc < 0 || (rc = lwq_backend_gemm_grouped(m->be, gg, ng, e)) < 0 ||
        (rc = lwq_backend_swiglu(m->be, &G, &U, &G, e)) < 0)
        goto out;
    /* down: observers on SiLU(gate) x up, one grouped call into y */
    ng = 0;
    for (int j = j0; j < j1 && rc == 0; j++) {
        const int64_t o = r->off[j], q = 5 * (int64_t)(j - j0);
        if (r->off[j + 1] == o)
            continue;
        const moe_expert_w *wj = &ew[j - j0];
        snprintf(mod, sizeof mod, "%s.experts.%d.%s", ex->prefix, ex->e0 + j, names[2]);
        rc = lwq_fwd_observe_tok(robs, layer, mod, &views[q + 3], NULL, r->tok + o, e);
        gg[ng++] = (lwq_gemm_group){&views[q + 3], &wj->w[2], wj->hb[2] ? &wj->b[2] : NULL,
                                    &views[q + 4]};
    }
    if (rc == 0)
        rc = lwq_backend_gemm_grouped(m->be, gg, ng, e);
out:
    free(ew);
    free(gg);
    free(views);
    return rc < 0 ? rc : 0;
}

int lwq_fwd_moe_run(lwq_model *m, int layer, const lwq_weights *w, const lwq_batch *b,
                    const lwq_tensor *x, const lwq_fwd_experts *ex, const lwq_fwd_routed *r,
                    lwq_tensor *out, int32_t *vrows, const lwq_observer *obs, lwq_error *e)
{
    const int64_t n = x->shape[0], D = x->shape[1], I = ex->inter; /* D: the experts' width */
    const char *gn = ex->mixtral_names ? "w1" : "gate_proj",
               *un = ex->mixtral_names ? "w3" : "up_proj",
               *dn = ex->mixtral_names ? "w2" : "down_proj";
    char ep[192];
    int rc = 0;
    /* in all-experts mode the routed run is not observed: the run below covers every token */
    const lwq_observer *robs = (obs && obs->all_experts) ? NULL : obs;
    const char *const names[3] = {gn, un, dn};
    /* nemotron_h's ReLU^2 experts one by one (the grouped GEMMs run SwiGLU experts) */
    for (int j = 0; ex->relu2 && j < ex->count && rc == 0; j++) {
        int64_t cnt = r->off[j + 1] - r->off[j];
        if (cnt == 0)
            continue;
        lwq_tensor xv = lwq_fwd_rows(r->xe, r->off[j], cnt);
        lwq_tensor yv = lwq_fwd_rows(r->y, r->y0 + r->off[j], cnt);
        lwq_tensor uv = lwq_fwd_rows(r->u, 0, cnt);
        snprintf(ep, sizeof ep, "%s.experts.%d", ex->prefix, ex->e0 + j);
        rc = lwq_fwd_relu2_mlp(m, layer, w, ep, I, &xv, NULL, r->tok + r->off[j], &uv, &yv, robs, e);
    }
    /* the experts in ranges of at most cap rows (the g/u scratch), each range grouped */
    const int64_t cap = r->off[ex->count] == 0 ? 0
                        : r->g->shape[0] < r->u->shape[0] ? r->g->shape[0] : r->u->shape[0];
    for (int j0 = 0, j1; !ex->relu2 && j0 < ex->count && rc == 0; j0 = j1) {
        for (j1 = j0; j1 < ex->count && r->off[j1 + 1] - r->off[j0] <= cap; j1++)
            ;
        if (j1 == j0)
            return lwq_errf(e, LWQ_EINVAL, "layer %d: expert %d has %" PRId64 " rows, its scratch "
                            "%" PRId64, layer, ex->e0 + j0, r->off[j0 + 1] - r->off[j0], cap);
        if (r->off[j1] > r->off[j0]) /* g, u, xe are not there when no row is routed */
            rc = moe_grouped(m, layer, w, ex, r, j0, j1, names, robs, e);
    }
    if (rc == 0 && r->comb_y) {
        lwq_tensor yv = lwq_fwd_rows(r->y, r->y0, r->off[ex->count]);
        rc = lwq_backend_copy(m->be, &yv, r->comb_y, e);
    }
    if (rc < 0 || (rc = lwq_backend_moe_combine(m->be, r->comb ? r->comb : r->y, r->slot, r->ws, out, e)) < 0)
        return rc;
    if (!(obs && obs->all_experts && obs->linear_input && b->n_valid > 0))
        return 0;
    int64_t nv = 0;
    for (int64_t t = 0; t < n; t++)
        if (b->valid_host[t])
            vrows[nv++] = (int32_t)t;
    lwq_tensor vr, xa, ya, ga, ua;
    LWQ_TRY(lwq_fwd_tensor(m, LWQ_I32, nv, 1, &vr, e));
    LWQ_TRY(lwq_backend_upload(m->be, vr.data, vrows, (size_t)nv * 4, e));
    vr.ndim = 1;
    LWQ_TRY(lwq_fwd_tensor(m, m->act, nv, D, &xa, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, nv, D, &ya, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, nv, I, &ga, e));
    LWQ_TRY(lwq_fwd_tensor(m, m->act, nv, I, &ua, e));
    LWQ_TRY(lwq_backend_gather_rows(m->be, x, &vr, &xa, e));
    for (int j = 0; j < ex->count && rc == 0; j++) {
        snprintf(ep, sizeof ep, "%s.experts.%d", ex->prefix, ex->e0 + j);
        rc = ex->relu2 ? lwq_fwd_relu2_mlp(m, layer, w, ep, I, &xa, NULL, vrows, &ua, &ya, obs, e)
                       : lwq_fwd_swiglu_mlp_tok(m, layer, w, ep, gn, un, dn, I, &xa, vrows, &ga, &ua, &ya, obs, e);
    }
    return rc < 0 ? rc : 0;
}
