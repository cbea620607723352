/* engine/run/run_stream.c — expert streaming in the depth loop (issue 16): a MoE layer read and computed
 * as units (engine/source/units.h), the dense part first, then groups of routed experts.
 *
 * Per streamed layer:
 *   dense unit: every batch through attention, the post-attention norm and the router
 *     (engine/forward/fwd_stream.h); the residual h goes to the output boundary, the MoE input x and the
 *     routing to host arrays; the dense linears are quantized and the unit's slot released;
 *   each expert group: every batch's routed rows through the group's experts, the weighted sum
 *     continued in `partial`; the group's experts are quantized (their statistics are final), their
 *     quantized tensors parked in the layer's spill file (engine/run/spill.h), the slot released;
 *   nemotron_h's latent MoE: a tail unit, its fc2_latent_proj, read last: the finished float32 sum
 *     rounded, projected (fc2_latent_proj observed, then quantized), the shared expert added;
 *   then h += partial per batch (lwq_fwd_stream_finish; with a tail, done there), the experts' input scales recomputed from the final statistics
 *     (cold experts filled from siblings in any group: they were quantized in their group and
 *     kept "quantized-pending" only for that scalar, no second read), and the shard committed by
 *     the usual protocol (shard -> boundary -> manifest), spilled tensors read back in name order.
 * The ring and the prefetcher work on units: while a unit computes, the next one (of this layer or
 * the next) is read.  A kill inside a layer leaves the previous manifest: the layer is recomputed. */
#include <inttypes.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys/log.h"
#include "core/sys/proc.h"
#include "core/sys/trace.h"
#include "engine/forward/fwd_stream.h"
#include "engine/source/layersrc.h"
#include "engine/run/run_internal.h"
#include "engine/source/units.h"

struct lwq_stream {
    int group;                  /* experts per group */
    lwq_units *units;           /* [nlayers] (layers before start_layer empty) */
    lwq_io_range ***ranges;     /* [layer][unit] */
    int64_t *job0;              /* first prefetch job of each layer */
    unsigned char *x, *partial; /* MoE input and running expert sum, one boundary each (host) */
    unsigned char *shared;      /* DeepSeek's shared-expert output, one boundary (or NULL) */
    int32_t *idx;               /* routing of every calibration row (rows, K) */
    float *wts;
    lwq_tensor dx, dp;          /* device staging of x and partial (GPU backends) */
};

void lwq_run_stream_free(lwq_run *r)
{
    lwq_stream *s = r->stream;
    if (!s)
        return;
    for (int L = 0; L < r->nlayers && s->units; L++) {
        for (int u = 0; s->ranges && s->ranges[L] && u < s->units[L].n; u++)
            free(s->ranges[L][u]);
        if (s->ranges)
            free(s->ranges[L]);
        lwq_units_free(&s->units[L]);
    }
    free(s->units);
    free(s->ranges);
    free(s->job0);
    free(s->x);
    free(s->partial);
    free(s->shared);
    free(s->idx);
    free(s->wts);
    if (s->dx.data)
        lwq_backend_tensor_free(&r->be, &s->dx);
    if (s->dp.data)
        lwq_backend_tensor_free(&r->be, &s->dp);
    free(s);
    r->stream = NULL;
}

int lwq_run_stream_init(lwq_run *r, int group, lwq_error *e)
{
    if (group <= 0)
        return 0;
    if (r->o->qdq_next && r->o->recipe && lwq_recipe_uses_gptq(r->o->recipe))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "GPTQ calibrates each layer on the quantized previous layers' outputs "
                        "(--qdq-next), which expert streaming cannot do yet (the quantized layer would have to be "
                        "read twice); give a budget that holds a whole layer");
    if (r->o->qdq_next)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "expert streaming and --qdq-next cannot be combined (the quantized "
                        "layer would have to be read twice); give a budget that holds a whole layer");
    for (int L = r->start_layer; L < r->nlayers; L++)
        if (lwq_model_layer_is_moe(&r->model, L)) {
            int rc = lwq_fwd_stream_supported(&r->model, L, e);
            if (rc)
                return rc;
        }
    lwq_stream *s = calloc(1, sizeof *s);
    if (!s)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    r->stream = s;
    s->group = group;
    s->units = calloc((size_t)r->nlayers, sizeof *s->units);
    s->ranges = calloc((size_t)r->nlayers, sizeof *s->ranges);
    s->job0 = calloc((size_t)r->nlayers, sizeof *s->job0);
    if (!s->units || !s->ranges || !s->job0)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    for (int L = r->start_layer; L < r->nlayers; L++) {
        int rc = lwq_units_split(&r->ck, L, lwq_model_layer_is_moe(&r->model, L) ? group : 0, &s->units[L], e);
        if (rc)
            return rc;
        if (!(s->ranges[L] = calloc((size_t)s->units[L].n, sizeof **s->ranges)))
            return lwq_errf(e, LWQ_ENOMEM, "out of memory");
        for (int u = 0; u < s->units[L].n; u++)
            if ((rc = lwq_units_ranges(&r->ck, &s->units[L].v[u], &s->ranges[L][u], e)) != 0)
                return rc;
    }
    return 0;
}

/* Whether linear `name` of layer L is computed in the layer's tail unit (units.h). */
int lwq_run_stream_tail_linear(const lwq_run *r, int L, const char *name)
{
    const lwq_units *us = &r->stream->units[L];
    return us->n > 1 && us->v[us->n - 1].tail && lwq_units_is_tail(name);
}

int lwq_run_stream_active(const lwq_run *r, int L)
{
    return r->stream && r->stream->units[L].n > 1;
}

int lwq_run_stream_slot(lwq_run *r, uint64_t *slot, lwq_error *e)
{
    lwq_stream *s = r->stream;
    for (int L = r->start_layer; L < r->nlayers; L++)
        for (int u = 0; u < s->units[L].n; u++) {
            uint64_t b;
            int rc = lwq_units_slot_bytes(&r->ck, &s->units[L].v[u], &b, e);
            if (rc)
                return rc;
            *slot = b > *slot ? b : *slot;
        }
    return 0;
}

int lwq_run_stream_submit(lwq_run *r, int L, int64_t *job, lwq_error *e)
{
    lwq_stream *s = r->stream;
    for (int u = 0; u < s->units[L].n; u++) {
        int64_t id = lwq_prefetch_submit(r->pf, s->ranges[L][u], (size_t)s->units[L].v[u].n, e);
        if (id < 0)
            return e->code ? e->code : (int)id;
        if (u == 0)
            s->job0[L] = id;
    }
    *job = s->job0[L];
    return 0;
}

int64_t lwq_run_stream_job0(const lwq_run *r, int L)
{
    return r->stream->job0[L];
}

int lwq_run_stream_views(lwq_run *r, int L, void *slot, lwq_tlist *src, lwq_error *e)
{
    return lwq_units_views(&r->ck, &r->stream->units[L].v[0], r->stream->ranges[L][0], slot, src, e);
}

/* ---- per-batch staging --------------------------------------------------------------------- */

static int64_t row0(const lwq_run *r, int b)
{
    return (int64_t)(lwq_run_bofs(r, b) / ((uint64_t)r->hidden * lwq_dtype_size(r->act)));
}

/* Batch b of a host array of `width` x `dt` per row as a device tensor: a view on the CPU backend,
 * else a view of the staging tensor `dev` (uploaded when `load`).  The MoE input and the running
 * sum are lwq_fwd_stream_width wide (nemotron_h's latent), the sum of lwq_fwd_stream_sum_dtype. */
static size_t sofs(const lwq_run *r, int b, int64_t width, lwq_dtype dt)
{
    return (size_t)row0(r, b) * (size_t)width * lwq_dtype_size(dt);
}

static int stage_w(lwq_run *r, unsigned char *host, lwq_tensor *dev, int b, int load, int64_t width, lwq_dtype dt,
                   lwq_tensor *t, lwq_error *e)
{
    int64_t shape[2] = {r->rows[b], width};
    size_t n = (size_t)r->rows[b] * (size_t)width * lwq_dtype_size(dt);
    if (r->be.ops->device == LWQ_DEV_CPU) {
        *t = lwq_tensor_view(host + sofs(r, b, width, dt), dt, 2, shape);
        return 0;
    }
    *t = lwq_tensor_view(dev->data, dt, 2, shape);
    t->device = dev->device;
    return load ? lwq_backend_upload(&r->be, t->data, host + sofs(r, b, width, dt), n, e) : 0;
}

static int stage(lwq_run *r, unsigned char *host, lwq_tensor *dev, int b, int load, lwq_tensor *t, lwq_error *e)
{
    return stage_w(r, host, dev, b, load, r->hidden, r->act, t, e);
}

static int unstage(lwq_run *r, unsigned char *host, const lwq_tensor *t, int b, lwq_error *e)
{
    if (r->be.ops->device == LWQ_DEV_CPU)
        return 0;
    return lwq_backend_download(&r->be, host + sofs(r, b, t->shape[1], t->dtype), t->data,
                                (size_t)(t->shape[0] * t->shape[1]) * lwq_dtype_size(t->dtype), e);
}

static int buffers(lwq_run *r, lwq_error *e)
{
    lwq_stream *s = r->stream;
    if (s->x)
        return 0;
    int64_t rows = 0, maxr = 0;
    for (int b = r->b0; b < r->b1; b++) {
        rows += r->rows[b];
        maxr = r->rows[b] > maxr ? r->rows[b] : maxr;
    }
    size_t K = (size_t)r->ck.cfg.num_experts_per_tok;
    const int64_t W = lwq_fwd_stream_width(&r->model);
    const lwq_dtype sdt = lwq_fwd_stream_sum_dtype(&r->model);
    /* x and the sum, W wide (<= hidden: lwq_fwd_stream_supported), the sum of its own dtype */
    size_t pbytes = (size_t)rows * (size_t)W * lwq_dtype_size(sdt);
    s->x = malloc(r->bnd_bytes ? r->bnd_bytes : 1);
    s->partial = malloc(pbytes ? pbytes : 1);
    s->idx = malloc(((size_t)rows * K + 1) * sizeof *s->idx);
    s->wts = malloc(((size_t)rows * K + 1) * sizeof *s->wts);
    int sh = lwq_fwd_stream_has_shared(&r->model);
    if (sh)
        s->shared = malloc(r->bnd_bytes ? r->bnd_bytes : 1);
    if (!s->x || !s->partial || !s->idx || !s->wts || (sh && !s->shared))
        return lwq_errf(e, LWQ_ENOMEM, "expert streaming: cannot allocate %d x %.2f GB of MoE activations",
                        2 + sh, (double)r->bnd_bytes / 1e9);
    if (r->be.ops->device != LWQ_DEV_CPU) {
        /* dx stages x, then the shared experts' output (hidden wide) in the finish */
        int64_t shape[2] = {maxr, r->hidden}, pshape[2] = {maxr, W};
        int rc = lwq_backend_tensor_alloc(&r->be, r->act, 2, shape, &s->dx, e);
        if (rc == 0)
            rc = lwq_backend_tensor_alloc(&r->be, sdt, 2, pshape, &s->dp, e);
        return rc;
    }
    return 0;
}

static int h_load(lwq_run *r, const unsigned char *buf, int b, lwq_tensor *h, lwq_error *e)
{
    *h = r->work;
    h->shape[0] = r->rows[b];
    size_t n = (size_t)(r->boff[b + 1] - r->boff[b]);
    if (r->be.ops->device == LWQ_DEV_CPU) {
        memcpy(r->work.data, buf + lwq_run_bofs(r, b), n);
        return 0;
    }
    return lwq_backend_upload(&r->be, r->work.data, buf + lwq_run_bofs(r, b), n, e);
}

static int h_store(lwq_run *r, unsigned char *buf, int b, lwq_error *e)
{
    size_t n = (size_t)(r->boff[b + 1] - r->boff[b]);
    if (r->be.ops->device == LWQ_DEV_CPU) {
        memcpy(buf + lwq_run_bofs(r, b), r->work.data, n);
        return 0;
    }
    return lwq_backend_download(&r->be, buf + lwq_run_bofs(r, b), r->work.data, n, e);
}

/* ---- one streamed layer --------------------------------------------------------------------- */

/* Passed-through tensors are views into the unit's slot: copy them, so the slot can go back. */
static int own_views(lwq_tlist *out, int from, lwq_error *e)
{
    for (int i = from; i < out->n; i++) {
        lwq_htensor *t = &out->v[i];
        if (t->owned || t->spilled || !t->data)
            continue;
        void *p = malloc(t->nbytes ? t->nbytes : 1);
        if (!p)
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", t->name);
        memcpy(p, t->data, t->nbytes);
        t->data = p;
        t->owned = 1;
    }
    return 0;
}

typedef struct stream_layer {
    lwq_run *r;
    int L;
    const lwq_arch_layer *p;
    lwq_layer_stats st;
    lwq_tlist out;
    lwq_spill spill;
    lwq_qlayer_report rep;
    uint8_t *only;
} stream_layer;

/* Wait for unit u, compute it over every batch, quantize its linears, release its slot. */
static int run_unit(stream_layer *sl, int u, lwq_error *e)
{
    lwq_run *r = sl->r;
    lwq_stream *s = r->stream;
    const lwq_unit *un = &s->units[sl->L].v[u];
    struct lwq_layer_log *ls = &r->lstat[sl->L];
    int64_t job = s->job0[sl->L] + u;
    int K = r->ck.cfg.num_experts_per_tok, nxt = 1 - r->cur;
    void *slot;
    double t = lwq_now();
    LWQ_TRACE_BEGIN("read-wait", sl->L);
    int rc = lwq_prefetch_wait(r->pf, job, &slot, e);
    LWQ_TRACE_END();
    ls->read_wait_s += lwq_now() - t;
    ls->bytes_read += un->bytes;
    r->read_wait_total += lwq_now() - t;
    r->bytes_read += un->bytes;
    lwq_tlist src = {0};
    if (rc == 0)
        rc = lwq_units_views(&r->ck, un, s->ranges[sl->L][u], slot, &src, e);
    if ((rc = lwq_run_agree(r, rc, e)) != 0) { /* every rank meets every unit's collectives, or none */
        lwq_tlist_free(&src);
        return rc;
    }
    lwq_layer_weights lw;
    lwq_layer_weights_init(&lw, &r->be, &src, NULL, &r->ck.cfg.names);
    t = lwq_now();
    LWQ_TRACE_BEGIN(u == 0 ? "forward dense" : un->tail ? "forward tail" : "forward experts", sl->L);
    const int64_t W = lwq_fwd_stream_width(&r->model);
    const lwq_dtype sdt = lwq_fwd_stream_sum_dtype(&r->model);
    for (int b = r->b0; b < r->b1 && rc == 0; b++) {
        lwq_tensor h, x, part, sh;
        size_t ko = (size_t)row0(r, b) * (size_t)K;
        if (un->tail) { /* nemotron_h's fc2_latent_proj on the finished sum, + shared, h += out */
            if ((rc = h_load(r, r->bnd[nxt], b, &h, e)) == 0 &&
                (rc = stage_w(r, s->partial, &s->dp, b, 1, W, sdt, &part, e)) == 0 &&
                (rc = stage(r, s->shared, &s->dx, b, 1, &sh, e)) == 0 &&
                (rc = lwq_fwd_stream_finish(&r->model, sl->L, &lw.w, &r->batches[b], &h, &part, &sh, &sl->st.obs,
                                            e)) == 0)
                rc = h_store(r, r->bnd[nxt], b, e);
        } else if (u == 0) {
            if ((rc = h_load(r, r->bnd[r->cur], b, &h, e)) == 0 &&
                (rc = stage_w(r, s->x, &s->dx, b, 0, W, r->act, &x, e)) == 0 &&
                (!s->shared || (rc = stage(r, s->shared, &s->dp, b, 0, &sh, e)) == 0) &&
                (rc = lwq_fwd_stream_dense(&r->model, sl->L, &lw.w, &r->batches[b], &h, &x, s->idx + ko, s->wts + ko,
                                           s->shared ? &sh : NULL, &sl->st.obs, e)) == 0 &&
                (rc = h_store(r, r->bnd[nxt], b, e)) == 0 && (rc = unstage(r, s->x, &x, b, e)) == 0 && s->shared)
                rc = unstage(r, s->shared, &sh, b, e);
        } else {
            if ((rc = stage_w(r, s->x, &s->dx, b, 1, W, r->act, &x, e)) == 0 &&
                (rc = stage_w(r, s->partial, &s->dp, b, u > 1, W, sdt, &part, e)) == 0 &&
                (rc = lwq_fwd_stream_experts(&r->model, sl->L, &lw.w, &r->batches[b], &x, s->idx + ko, s->wts + ko,
                                             un->e0, un->e1, u == 1, &part, &sl->st.obs, e)) == 0)
                rc = unstage(r, s->partial, &part, b, e);
        }
    }
    LWQ_TRACE_END();
    lwq_layer_weights_free(&lw);
    ls->forward_s += lwq_now() - t;
    t = lwq_now();
    LWQ_TRACE_BEGIN("quantize", sl->L);
    int from = sl->out.n;
    rc = lwq_run_agree(r, rc, e); /* the forward's outcome, on every rank, before the reduction */
    if (rc == 0) {
        for (int i = 0; i < sl->p->nlinears; i++) {
            int x = sl->p->linears[i].expert, tl = lwq_run_stream_tail_linear(r, sl->L, sl->p->linears[i].name);
            sl->only[i] = un->tail ? tl : u == 0 ? x < 0 && !tl : x >= un->e0 && x < un->e1;
        }
        lwq_qlayer_report rp = {0};
        rc = lwq_run_stats_done(r, &sl->st, sl->only, u == 0, rc, e);
        if (rc == 0)
            rc = lwq_run_ranks_quantize(r, sl->L, &sl->st, &src, sl->only, u == 0 ? r->o->recipe->kv : LWQ_KV_NONE, 0,
                                        &sl->out, &rp, e);
        sl->rep.quantized += rp.quantized;
        sl->rep.zero_weights += rp.zero_weights;
        sl->rep.hessian_fallback += rp.hessian_fallback;
        lwq_qlayer_report_free(&rp); /* GPTQ entries: none, GPTQ implies --qdq-next, refused above */
    }
    if (rc == 0)
        rc = own_views(&sl->out, from, e);
    if (rc == 0 && u > 0 && !un->tail && r->rk->rank == 0) /* rank 0 holds the layer's quantized experts */
        rc = lwq_spill_move(&sl->spill, &sl->out, from, e);
    LWQ_TRACE_END();
    ls->quantize_s += lwq_now() - t;
    lwq_tlist_free(&src);
    /* The group's quantized buffers are freed but sit between the small tensors the layer keeps
     * (names, scalars): give their pages back, or the heap grows by a layer's quantized bytes
     * (buffers of 1 MB and more are mmapped and gone already). */
    malloc_trim(0);
    int rrc = lwq_prefetch_release(r->pf, job, rc ? NULL : e);
    return rc ? rc : rrc;
}

static int finish_layer(stream_layer *sl, lwq_error *e)
{
    lwq_run *r = sl->r;
    lwq_stream *s = r->stream;
    int nxt = 1 - r->cur, rc = 0;
    double t = lwq_now();
    const int64_t W = lwq_fwd_stream_width(&r->model);
    const lwq_dtype sdt = lwq_fwd_stream_sum_dtype(&r->model);
    /* as the one-shot block (lwq_fwd_stream_finish); with a tail unit it ran there */
    for (int b = r->b0; b < r->b1 && rc == 0 && !lwq_fwd_stream_has_tail(&r->model); b++) {
        lwq_tensor h, part, sh;
        if ((rc = h_load(r, r->bnd[nxt], b, &h, e)) == 0 &&
            (rc = stage_w(r, s->partial, &s->dp, b, 1, W, sdt, &part, e)) == 0 &&
            (!s->shared || (rc = stage(r, s->shared, &s->dx, b, 1, &sh, e)) == 0) &&
            (rc = lwq_fwd_stream_finish(&r->model, sl->L, NULL, &r->batches[b], &h, &part, s->shared ? &sh : NULL,
                                        NULL, e)) == 0)
            rc = h_store(r, r->bnd[nxt], b, e);
    }
    r->lstat[sl->L].forward_s += lwq_now() - t;
    if (rc == 0 && r->rk->rank == 0) /* where the experts' input scales are */
        rc = lwq_qlayer_finish_inputs(sl->p, r->choice[sl->L], &sl->st, &sl->out, &sl->rep, e);
    return lwq_run_agree(r, rc, e);
}

int lwq_run_stream_layer(lwq_run *r, int L, lwq_error *e)
{
    lwq_stream *s = r->stream;
    const lwq_units *us = &s->units[L];
    if (r->o->dry_read) {
        for (int u = 0; u < us->n; u++) {
            void *slot;
            int rc = lwq_prefetch_wait(r->pf, s->job0[L] + u, &slot, e);
            if (rc == 0)
                rc = lwq_prefetch_release(r->pf, s->job0[L] + u, e);
            if (rc)
                return rc;
            r->lstat[L].bytes_read += us->v[u].bytes;
            r->bytes_read += us->v[u].bytes;
        }
        return 0;
    }
    stream_layer sl;
    memset(&sl, 0, sizeof sl);
    sl.r = r;
    sl.L = L;
    sl.p = &r->plans[L];
    sl.spill.fd = -1;
    int nE = r->ck.cfg.num_experts;
    sl.only = calloc((size_t)(sl.p->nlinears ? sl.p->nlinears : 1), 1);
    int rc = sl.only ? buffers(r, e) : lwq_errf(e, LWQ_ENOMEM, "out of memory");
    int st_open = rc == 0 && (rc = lwq_run_stats_init(r, L, &sl.st, e)) == 0; /* the observers of a whole layer */
    if (rc == 0 && r->rk->rank == 0) /* rank 0 alone keeps the quantized experts */
        rc = lwq_spill_open(&sl.spill, r->resume_dir, L, e);
    if ((rc = lwq_run_agree(r, rc, e)) != 0) {
        if (st_open)
            lwq_stats_free(&sl.st);
        lwq_spill_close(&sl.spill);
        free(sl.only);
        return rc;
    }
    lwq_run_wait_boundary(r, 1 - r->cur);
    for (int u = 0; u < us->n && rc == 0; u++)
        rc = run_unit(&sl, u, e);
    if (rc == 0)
        rc = finish_layer(&sl, e);
    if (rc == 0) {
        struct lwq_layer_log *ls = &r->lstat[L];
        ls->cold_experts = sl.rep.cold_experts;
        ls->n_experts = nE;
        r->cold_total += sl.rep.cold_experts;
        free(r->man.layers[L].report);
        r->man.layers[L].report = lwq_run_layer_report(L, &sl.rep, sl.st.expert_tokens);
        if (!r->man.layers[L].report)
            rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
    }
    lwq_stats_free(&sl.st);
    free(sl.only);
    if (rc) {
        lwq_tlist_free(&sl.out);
        lwq_spill_close(&sl.spill);
        return rc;
    }
    /* a W8A8 lm_head's input amax, from the last layer's output, goes with its commit */
    if (L == r->nlayers - 1 && (rc = lwq_run_head_amax(r, 1 - r->cur, e)) != 0) {
        lwq_tlist_free(&sl.out);
        lwq_spill_close(&sl.spill);
        return rc;
    }
    lwq_tlist none = {0};
    return lwq_run_commit_layer_spill(r, L, &sl.out, &none, -1, &sl.spill, e);
}
