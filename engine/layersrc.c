#include "engine/layersrc.h"

#include "engine/srcdeq.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/trace.h"

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
    if (lw->prefix) {
        if ((size_t)snprintf(full, sizeof full, "%s%s", lw->prefix, name) >= sizeof full)
            return lwq_errf(e, LWQ_EINVAL, "tensor name %s%s is too long", lw->prefix, name);
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
        const lwq_htensor *d = NULL;
        for (int i = 0; i < lw->dev.n && !d; i++)
            if (!strcmp(lw->dev.v[i].name, name))
                d = &lw->dev.v[i];
        if (!d) {
            void *p;
            int rc = lwq_backend_alloc(lw->be, t->nbytes ? t->nbytes : 1, &p, e);
            if (rc)
                return rc;
            LWQ_TRACE_BEGIN("upload", -1);
            rc = lwq_backend_upload(lw->be, p, t->data, t->nbytes, e);
            LWQ_TRACE_END();
            if (rc != 0 ||
                (rc = lwq_tlist_add(&lw->dev, name, t->dtype, t->ndim, t->shape, p, 0, e)) != 0) {
                lwq_backend_free(lw->be, p);
                return rc;
            }
            d = &lw->dev.v[lw->dev.n - 1];
        }
        data = d->data;
    }
    *out = lwq_tensor_view(data, t->dtype, t->ndim, t->shape);
    out->device = lw->be->ops->device;
    return 0;
}

void lwq_layer_weights_init(lwq_layer_weights *lw, const lwq_backend *be, const lwq_tlist *src, const lwq_tlist *overlay,
                            const char *prefix)
{
    memset(lw, 0, sizeof *lw);
    lw->prefix = prefix && prefix[0] ? prefix : NULL;
    lw->be = be;
    lw->src = src;
    lw->overlay = overlay;
    lw->w.get = get_weight;
    lw->w.ctx = lw;
}

void lwq_layer_weights_free(lwq_layer_weights *lw)
{
    for (int i = 0; i < lw->dev.n; i++)
        lwq_backend_free(lw->be, lw->dev.v[i].data);
    lwq_tlist_free(&lw->dev);
}
