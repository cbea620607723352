/* engine/run/run_layer.c — one decoder layer over the calibration set, the piece both paths share
 * (the layerwise loop of run.c and the whole-model reference of run_reference.c): batches move
 * between a host boundary buffer and the device work tensor, the layer runs over every batch
 * with its observers, and --qdq-next gets the dequantized weights of a quantized layer.
 * Engine thread only. */
#include <stdlib.h>
#include <string.h>

#include "core/sys/proc.h"
#include "engine/quant/dist.h"
#include "engine/source/layersrc.h"
#include "engine/run/run_internal.h"
#include "kernels/quant.h"

lwq_tensor lwq_run_work_view(lwq_run *r, int b)
{
    lwq_tensor t = r->work;
    t.shape[0] = r->rows[b];
    return t;
}

static int to_work(lwq_run *r, int b, const unsigned char *buf, lwq_error *e)
{
    size_t n = (size_t)(r->boff[b + 1] - r->boff[b]);
    if (r->be.ops->device == LWQ_DEV_CPU) {
        memcpy(r->work.data, buf + lwq_run_bofs(r, b), n);
        return 0;
    }
    return lwq_backend_upload(&r->be, r->work.data, buf + lwq_run_bofs(r, b), n, e);
}

static int from_work(lwq_run *r, int b, unsigned char *buf, lwq_error *e)
{
    size_t n = (size_t)(r->boff[b + 1] - r->boff[b]);
    if (r->be.ops->device == LWQ_DEV_CPU) {
        memcpy(buf + lwq_run_bofs(r, b), r->work.data, n);
        return 0;
    }
    return lwq_backend_download(&r->be, buf + lwq_run_bofs(r, b), r->work.data, n, e);
}

int lwq_run_embed(lwq_run *r, unsigned char *dst, lwq_error *e)
{
    /* only the embedding matrix: lm_head, as large, is not needed to embed */
    lwq_tlist tail = {0};
    char name[128];
    lwq_names_full(&r->ck.cfg.names, "model.embed_tokens.weight", name, sizeof name);
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&r->ck, name);
    int rc = 0;
    if (t && t->dtype != LWQ_F8_E4M3 && t->dtype != LWQ_U8) {
        void *buf = malloc(t->nbytes ? t->nbytes : 1);
        if (!buf)
            return lwq_errf(e, LWQ_ENOMEM, "%s: cannot allocate %llu bytes", name, (unsigned long long)t->nbytes);
        if ((rc = lwq_ckpt_read_tensor(&r->ck, t, buf, e)) == 0)
            rc = lwq_tlist_add(&tail, t->name, t->dtype, t->ndim, t->shape, buf, 1, e);
        else
            free(buf);
    } else { /* absent (the forward names it) or packed: the general path */
        rc = lwq_layersrc_read(&r->ck, -1, &tail, e);
    }
    if (rc) {
        lwq_tlist_free(&tail);
        return rc;
    }
    lwq_layer_weights lw;
    lwq_layer_weights_init(&lw, &r->be, &tail, NULL, &r->ck.cfg.names);
    for (int b = r->b0; b < r->b1 && rc == 0; b++) {
        lwq_tensor h = lwq_run_work_view(r, b);
        if ((rc = lwq_model_embed(&r->model, &lw.w, r->tokens[b], &h, e)) == 0)
            rc = from_work(r, b, dst, e);
    }
    lwq_layer_weights_free(&lw);
    lwq_tlist_free(&tail);
    return rc;
}

static uint8_t *hessian_wanted(lwq_run *r, int L)
{
    const lwq_arch_layer *p = &r->plans[L];
    uint8_t *w = calloc((size_t)(p->nlinears ? p->nlinears : 1), 1);
    for (int i = 0; w && i < p->nlinears; i++)
        w[i] = (uint8_t)lwq_qlayer_hessian(&p->linears[i], &r->choice[L][i]);
    return w;
}

int lwq_run_stats_init(lwq_run *r, int L, lwq_layer_stats *st, lwq_error *e)
{
    const lwq_arch_layer *p = &r->plans[L];
    uint8_t *wh = hessian_wanted(r, L);
    int rc = wh ? lwq_stats_init(st, p, &r->be, p->is_moe ? r->ck.cfg.num_experts : 0, r->o->include_padding,
                                 r->o->all_experts, wh, &r->ck.cfg.names, e)
                : lwq_errf(e, LWQ_ENOMEM, "out of memory");
    free(wh);
    return rc;
}

int lwq_run_qdq_overlay(lwq_run *r, int L, lwq_tlist *out, const lwq_tlist *src, lwq_tlist *ov, lwq_error *e)
{
    const lwq_arch_layer *p = &r->plans[L];
    lwq_tlist_sort(out);
    memset(ov, 0, sizeof *ov);
    for (int i = 0; i < p->nlinears; i++) {
        lwq_qformat f = r->choice[L][i].format;
        if (f == LWQ_QFMT_NONE)
            continue;
        char n[LWQ_ARCH_NAME_MAX + 32];
        snprintf(n, sizeof n, "%s.weight", p->linears[i].name);
        const lwq_htensor *s = lwq_tlist_find(src, n), *q = lwq_tlist_find(out, n);
        snprintf(n, sizeof n, "%s.weight_scale", p->linears[i].name);
        const lwq_htensor *sc = lwq_tlist_find(out, n);
        snprintf(n, sizeof n, "%s.weight_scale_2", p->linears[i].name);
        const lwq_htensor *s2 = lwq_tlist_find(out, n);
        if (!s || !q || !sc || (f == LWQ_QFMT_NVFP4 && !s2))
            return lwq_errf(e, LWQ_ESTATE, "%s: quantized tensors missing for --qdq-next", p->linears[i].name);
        /* FP8 dequantizes every element (a conv1d weight is 3-D) */
        int64_t rows = s->shape[0], cols = s->shape[1];
        void *buf = malloc((size_t)s->nbytes);
        if (!buf)
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", s->name);
        int rc = f == LWQ_QFMT_NVFP4
                     ? lwq_quant_nvfp4_dequant(q->data, sc->data, *(const float *)s2->data, rows, cols, s->dtype, buf, e)
                     : lwq_quant_fp8_dequant(q->data, *(const float *)sc->data,
                                             (int64_t)(s->nbytes / lwq_dtype_size(s->dtype)), s->dtype, buf, e);
        if (rc < 0) {
            free(buf);
            return rc;
        }
        /* lwq_tlist_add takes buf over, and frees it when it fails */
        if ((rc = lwq_tlist_add(ov, s->name, s->dtype, s->ndim, s->shape, buf, 1, e)) < 0)
            return rc;
    }
    lwq_tlist_sort(ov);
    return 0;
}

int lwq_run_forward_layer(lwq_run *r, int L, const lwq_weights *w, int in, int outb, lwq_layer_stats *st,
                          lwq_error *e)
{
    int rc = 0;
    for (int b = r->b0; b < r->b1 && rc == 0; b++) {
        lwq_tensor h = lwq_run_work_view(r, b);
        if ((rc = to_work(r, b, r->bnd[in], e)) == 0 &&
            (rc = lwq_model_layer_forward(&r->model, L, w, &r->batches[b], &h, st ? &st->obs : NULL, e)) == 0 &&
            outb >= 0)
            rc = from_work(r, b, r->bnd[outb], e);
    }
    return rc;
}

int lwq_run_stats_done(lwq_run *r, lwq_layer_stats *st, const uint8_t *only, int wide, int rc, lwq_error *e)
{
    double t = lwq_now();
    if (rc == 0)
        rc = lwq_stats_flush(st, only, e);
    if (r->rk->size > 1 || r->nccl) { /* every rank meets here, failed or not */
        if ((rc = lwq_ranks_agree(r->rk, rc, e)) == 0)
            rc = lwq_dist_reduce_stats(r->rk, r->nccl, st, only, wide, e);
        rc = lwq_ranks_agree(r->rk, rc, e);
    }
    if (rc == 0)
        rc = lwq_stats_finalize(st, only, e);
    r->lstat[st->plan->layer].reduce_s += lwq_now() - t;
    return rc;
}

int lwq_run_head_amax_batch(lwq_run *r, const lwq_weights *tail, int b, lwq_tensor *h, float *amax, lwq_error *e)
{
    float a = 0;
    int rc = lwq_model_final_norm(&r->model, tail, h, e);
    if (rc == 0)
        rc = lwq_backend_amax(&r->be, h, r->o->include_padding ? NULL : &r->batches[b].valid, &a, e);
    if (rc == 0 && a > *amax)
        *amax = a;
    return rc;
}

/* The final norm's weight alone (the tail's embedding and lm_head are the largest tensors). */
static int read_final_norm(lwq_run *r, lwq_tlist *t, lwq_error *e)
{
    char name[LWQ_ARCH_NAME_MAX + 8];
    lwq_names_full(&r->ck.cfg.names, "model.norm.weight", name, sizeof name);
    const lwq_ckpt_tensor *s = lwq_ckpt_find(&r->ck, name);
    if (!s) /* the forward names what it misses */
        return 0;
    void *buf = malloc(s->nbytes ? s->nbytes : 1);
    if (!buf)
        return lwq_errf(e, LWQ_ENOMEM, "%s: cannot allocate %llu bytes", name, (unsigned long long)s->nbytes);
    int rc = lwq_ckpt_read_tensor(&r->ck, s, buf, e);
    if (rc) {
        free(buf);
        return rc;
    }
    return lwq_tlist_add(t, s->name, s->dtype, s->ndim, s->shape, buf, 1, e) < 0 ? e->code : 0;
}

int lwq_run_head_amax(lwq_run *r, int outb, lwq_error *e)
{
    if (r->o->recipe->lm_head != LWQ_LMHEAD_W8A8)
        return 0;
    lwq_tlist tail = {0};
    float amax = 0;
    int rc = read_final_norm(r, &tail, e);
    lwq_layer_weights lw;
    lwq_layer_weights_init(&lw, &r->be, &tail, NULL, &r->ck.cfg.names);
    for (int b = r->b0; b < r->b1 && rc == 0; b++) {
        lwq_tensor h = lwq_run_work_view(r, b);
        if ((rc = to_work(r, b, r->bnd[outb], e)) == 0)
            rc = lwq_run_head_amax_batch(r, &lw.w, b, &h, &amax, e);
    }
    lwq_layer_weights_free(&lw);
    lwq_tlist_free(&tail);
    if (r->rk->size > 1 && (rc = lwq_ranks_agree(r->rk, rc, e)) == 0)
        rc = lwq_ranks_max_f32(r->rk, &amax, 1, e);
    if (rc == 0) {
        r->has_head_amax = 1;
        r->head_amax = amax;
    }
    return rc;
}
