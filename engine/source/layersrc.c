#include "engine/source/layersrc.h"

#include "engine/source/srcdeq.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys/trace.h"

/* FP8-block / MXFP4 source tensors become float tensors right after the read. */
static int dequant(const lwq_ckpt *c, lwq_tlist *src, lwq_error *e)
{
    int rc = lwq_srcdeq_apply(&c->cfg, src, e);
    if (rc < 0)
        lwq_tlist_free(src);
    return rc;
}

static const lwq_ckpt_layer *layer_of(const lwq_ckpt *c, int layer)
{
    return layer < 0 ? &c->tail : &c->layers[layer];
}

int lwq_layersrc_ranges(const lwq_ckpt *c, int layer, lwq_io_range **ranges, int *n, lwq_error *e)
{
    const lwq_ckpt_layer *L = layer_of(c, layer);
    *n = 0;
    *ranges = calloc((size_t)(L->n ? L->n : 1), sizeof **ranges);
    if (!*ranges)
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory", layer);
    for (int k = 0; k < L->n; k++) {
        const lwq_ckpt_tensor *t = &c->tensors[L->idx[k]];
        (*ranges)[k].path = c->files[t->file].path;
        (*ranges)[k].offset = t->offset;
        (*ranges)[k].length = t->nbytes;
    }
    *n = L->n;
    return 0;
}

int lwq_layersrc_views(const lwq_ckpt *c, int layer, const lwq_io_range *ranges, void *slot, lwq_tlist *src,
                       lwq_error *e)
{
    const lwq_ckpt_layer *L = layer_of(c, layer);
    memset(src, 0, sizeof *src);
    for (int k = 0; k < L->n; k++) {
        const lwq_ckpt_tensor *t = &c->tensors[L->idx[k]];
        unsigned char *p = (unsigned char *)slot + ranges[k].dst;
        size_t esz = lwq_dtype_size(t->dtype);
        int rc;
        if (esz > 1 && ((uintptr_t)p % esz) != 0) {
            void *copy = malloc(t->nbytes ? t->nbytes : 1);
            if (!copy) {
                lwq_tlist_free(src);
                return lwq_errf(e, LWQ_ENOMEM, "%s: cannot allocate %llu bytes", t->name, (unsigned long long)t->nbytes);
            }
            memcpy(copy, p, t->nbytes);
            rc = lwq_tlist_add(src, t->name, t->dtype, t->ndim, t->shape, copy, 1, e);
        } else {
            rc = lwq_tlist_add(src, t->name, t->dtype, t->ndim, t->shape, p, 0, e);
        }
        if (rc < 0) {
            lwq_tlist_free(src);
            return rc;
        }
    }
    lwq_tlist_sort(src);
    return dequant(c, src, e);
}

int lwq_layersrc_read(const lwq_ckpt *c, int layer, lwq_tlist *src, lwq_error *e)
{
    const lwq_ckpt_layer *L = layer_of(c, layer);
    memset(src, 0, sizeof *src);
    for (int k = 0; k < L->n; k++) {
        const lwq_ckpt_tensor *t = &c->tensors[L->idx[k]];
        void *buf = malloc(t->nbytes ? t->nbytes : 1);
        if (!buf) {
            lwq_tlist_free(src);
            return lwq_errf(e, LWQ_ENOMEM, "%s: cannot allocate %llu bytes", t->name, (unsigned long long)t->nbytes);
        }
        int rc = lwq_ckpt_read_tensor(c, t, buf, e);
        if (rc == 0)
            rc = lwq_tlist_add(src, t->name, t->dtype, t->ndim, t->shape, buf, 1, e);
        else
            free(buf);
        if (rc < 0) {
            lwq_tlist_free(src);
            return rc;
        }
    }
    lwq_tlist_sort(src);
    return dequant(c, src, e);
}

static int get_weight(void *ctx, const char *name, lwq_tensor *out, lwq_error *e)
{
    lwq_layer_weights *lw = ctx;
    char full[512];
    if (lw->names) {
        if (lwq_names_full(lw->names, name, full, sizeof full) >= sizeof full)
            return lwq_errf(e, LWQ_EINVAL, "tensor name %s is too long", name);
        name = full;
    }
    const lwq_htensor *t = lw->overlay ? lwq_tlist_find(lw->overlay, name) : NULL;
    if (!t)
        t = lwq_tlist_find(lw->src, name);
    if (!t)
        return LWQ_ENOENT;
    if (t->ndim > LWQ_TENSOR_MAX_DIMS)
        return lwq_errf(e, LWQ_EFORMAT, "%s: %d dimensions, the forward takes at most %d", name, t->ndim,
                        LWQ_TENSOR_MAX_DIMS);
    void *data = t->data;
    if (lw->be->ops->device != LWQ_DEV_CPU) {
        int i = lwq_name_index_find(&lw->idx, &lw->dev, name);
        if (i < 0) {
            void *p = NULL;
            int rc = 0, in_slab = lw->slab && lwq_devslab_get(lw->slab, t->nbytes, &p) == 0;
            if (!in_slab && (rc = lwq_backend_alloc(lw->be, t->nbytes ? t->nbytes : 1, &p, e)) != 0)
                return rc;
            if (lw->dev.n == lw->dev_host_cap) {
                int cap = lw->dev_host_cap ? 2 * lw->dev_host_cap : 64;
                const void **h = realloc(lw->dev_host, (size_t)cap * sizeof *h);
                if (!h)
                    rc = lwq_errf(e, LWQ_ENOMEM, "out of memory for the device weights of %s", name);
                else
                    lw->dev_host = h, lw->dev_host_cap = cap;
            }
            LWQ_TRACE_BEGIN("upload", -1);
            if (rc == 0)
                rc = lwq_backend_upload(lw->be, p, t->data, t->nbytes, e);
            LWQ_TRACE_END();
            if (rc != 0 || (rc = lwq_tlist_add(&lw->dev, name, t->dtype, t->ndim, t->shape, p, 0, e)) != 0) {
                if (!in_slab)
                    lwq_backend_free(lw->be, p);
                return rc;
            }
            i = lw->dev.n - 1;
            lw->dev_host[i] = t->data;
            if ((rc = lwq_name_index_put(&lw->idx, &lw->dev, i, e)) != 0)
                return rc; /* the copy is in dev: freed with the list */
        }
        data = lw->dev.v[i].data;
    }
    *out = lwq_tensor_view(data, t->dtype, t->ndim, t->shape);
    out->device = lw->be->ops->device;
    return 0;
}

void lwq_layer_weights_init(lwq_layer_weights *lw, const lwq_backend *be, const lwq_tlist *src, const lwq_tlist *overlay,
                            const lwq_names *names)
{
    memset(lw, 0, sizeof *lw);
    lw->names = names;
    lw->be = be;
    lw->src = src;
    lw->overlay = overlay;
    lw->w.get = get_weight;
    lw->w.ctx = lw;
}

void lwq_layer_weights_use_slab(lwq_layer_weights *lw, lwq_devslab *slab)
{
    if (!slab || slab->in_use || lw->be->ops->device == LWQ_DEV_CPU || lw->dev.n)
        return;
    slab->in_use = 1;
    lw->slab = slab;
}

const void *lwq_layer_weights_device(void *ctx, const lwq_htensor *w)
{
    lwq_layer_weights *lw = ctx;
    int i = w->name ? lwq_name_index_find(&lw->idx, &lw->dev, w->name) : -1;
    if (i < 0 || lw->dev_host[i] != w->data || lw->dev.v[i].dtype != w->dtype || lw->dev.v[i].nbytes != w->nbytes)
        return NULL;
    return lw->dev.v[i].data;
}

void lwq_layer_weights_free(lwq_layer_weights *lw)
{
    for (int i = 0; i < lw->dev.n; i++)
        if (!(lw->slab && lwq_devslab_owns(lw->slab, lw->dev.v[i].data)))
            lwq_backend_free(lw->be, lw->dev.v[i].data);
    if (lw->slab)
        lwq_devslab_reset(lw->slab);
    lw->slab = NULL;
    lwq_tlist_free(&lw->dev);
    lwq_name_index_free(&lw->idx);
    free(lw->dev_host);
    lw->dev_host = NULL;
    lw->dev_host_cap = 0;
}
