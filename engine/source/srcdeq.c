/* engine/source/srcdeq.c — dequantize a layer's FP8-block / MXFP4 source tensors in place of their
 * packed form (contract in srcdeq.h; formats in layout/checkpoint/srcfmt.h). */
#include "engine/source/srcdeq.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const lwq_htensor *sibling(const lwq_tlist *l, const char *base, const char *suf)
{
    char n[512];
    if ((size_t)snprintf(n, sizeof n, "%s%s", base, suf) >= sizeof n)
        return NULL;
    return lwq_tlist_find(l, n);
}

static int fp8_tensor(const lwq_srcfmt *f, const lwq_htensor *w, const lwq_htensor *s,
                      lwq_tlist *out, lwq_error *e)
{
    if (f->kind != LWQ_SRCFMT_FP8_BLOCK)
        return lwq_errf(e, LWQ_EFORMAT, "%s is F8_E4M3 with %s" LWQ_SRCFMT_SCALE_INV ", but "
                        "config.json's quantization_config does not declare FP8 blocks "
                        "(quant_method \"fp8\" with weight_block_size); source format is %s",
                        w->name, w->name, lwq_srcfmt_name(f->kind));
    if (w->ndim != 2 || s->ndim != 2)
        return lwq_errf(e, LWQ_EFORMAT, "%s: FP8 block weights must be 2-D with a 2-D "
                        LWQ_SRCFMT_SCALE_INV " (got %d-D and %d-D)", w->name, w->ndim, s->ndim);
    size_t bytes = (size_t)(w->shape[0] * w->shape[1]) * lwq_dtype_size(f->out);
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        return lwq_errf(e, LWQ_ENOMEM, "%s: no memory for %zu dequantized bytes", w->name, bytes);
    int rc = lwq_srcfmt_fp8_dequant(w->name, w->data, w->shape[0], w->shape[1], s->data, s->dtype,
                                    s->shape[0], s->shape[1], f->block_rows, f->block_cols, f->out,
                                    buf, e);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    return lwq_tlist_add(out, w->name, f->out, 2, w->shape, buf, 1, e);
}

static int mx_tensor(const lwq_srcfmt *f, const char *base, const lwq_htensor *b,
                     const lwq_htensor *s, lwq_tlist *out, lwq_error *e)
{
    if (f->kind != LWQ_SRCFMT_MXFP4)
        return lwq_errf(e, LWQ_EFORMAT, "%s is stored as " LWQ_SRCFMT_BLOCKS "/" LWQ_SRCFMT_SCALES
                        ", but config.json's quantization_config does not declare mxfp4; source "
                        "format is %s", base, lwq_srcfmt_name(f->kind));
    int same = b->dtype == LWQ_U8 && s->dtype == LWQ_U8 && b->ndim >= 2 &&
               s->ndim == b->ndim - 1 && b->shape[b->ndim - 1] == LWQ_MXFP4_GROUP / 2;
    for (int i = 0; same && i < s->ndim; i++)
        same = s->shape[i] == b->shape[i];
    if (!same)
        return lwq_errf(e, LWQ_EFORMAT, "%s: " LWQ_SRCFMT_BLOCKS " must be U8 [..., G, 16] and "
                        LWQ_SRCFMT_SCALES " U8 [..., G] (got %s %d-D, %s %d-D)", base,
                        lwq_dtype_name(b->dtype), b->ndim, lwq_dtype_name(s->dtype), s->ndim);
    int64_t rows = 1, groups = s->shape[s->ndim - 1], shape[LWQ_ST_MAX_DIMS];
    for (int i = 0; i < s->ndim - 1; i++) {
        rows *= s->shape[i];
        shape[i] = s->shape[i];
    }
    shape[s->ndim - 1] = groups * LWQ_MXFP4_GROUP;
    size_t bytes = (size_t)(rows * groups * LWQ_MXFP4_GROUP) * lwq_dtype_size(f->out);
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        return lwq_errf(e, LWQ_ENOMEM, "%s: no memory for %zu dequantized bytes", base, bytes);
    int rc = lwq_srcfmt_mxfp4_dequant(base, b->data, s->data, rows, groups, f->out, buf, e);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    return lwq_tlist_add(out, base, f->out, s->ndim, shape, buf, 1, e);
}

int lwq_srcdeq_apply(const lwq_model_config *cfg, lwq_tlist *src, lwq_error *e)
{
    /* the common case costs one scan: nothing packed, nothing to do */
    lwq_tlist_sort(src); /* the sibling lookups bisect */
    int packed = 0;
    char base[512];
    for (int i = 0; i < src->n && !packed; i++) {
        const lwq_htensor *t = &src->v[i];
        packed = t->dtype == LWQ_F8_E4M3 ||
                 (lwq_srcfmt_strip_suffix(t->name, LWQ_SRCFMT_BLOCKS, base, sizeof base) &&
                  sibling(src, base, LWQ_SRCFMT_SCALES));
    }
    if (!packed)
        return 0;
    lwq_srcfmt f;
    int rc = lwq_srcfmt_from_config(cfg, &f, e);
    if (rc < 0)
        return rc;
    /* Phase 1 makes the dequantized tensors; phase 2 adds the others as views; ownership moves
     * only once nothing can fail any more, so on error src is exactly as it was. */
    lwq_tlist out = {0};
    unsigned char *keep = calloc((size_t)src->n + 1, 1);
    if (!keep)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory dequantizing %d tensors", src->n);
    for (int i = 0; rc == 0 && i < src->n; i++) {
        const lwq_htensor *t = &src->v[i], *o;
        if (t->dtype == LWQ_F8_E4M3 && (o = sibling(src, t->name, LWQ_SRCFMT_SCALE_INV))) {
            rc = fp8_tensor(&f, t, o, &out, e);
        } else if (t->dtype == LWQ_F8_E4M3 && f.kind == LWQ_SRCFMT_FP8_BLOCK) {
            rc = lwq_errf(e, LWQ_EFORMAT, "%s is F8_E4M3 but %s" LWQ_SRCFMT_SCALE_INV " is "
                          "missing", t->name, t->name);
        } else if (lwq_srcfmt_strip_suffix(t->name, LWQ_SRCFMT_SCALE_INV, base, sizeof base) &&
                   (o = lwq_tlist_find(src, base)) && o->dtype == LWQ_F8_E4M3) {
            continue; /* consumed by its weight */
        } else if (lwq_srcfmt_strip_suffix(t->name, LWQ_SRCFMT_BLOCKS, base, sizeof base) &&
                   (o = sibling(src, base, LWQ_SRCFMT_SCALES))) {
            rc = mx_tensor(&f, base, t, o, &out, e);
        } else if (lwq_srcfmt_strip_suffix(t->name, LWQ_SRCFMT_SCALES, base, sizeof base) &&
                   sibling(src, base, LWQ_SRCFMT_BLOCKS)) {
            continue;
        } else {
            keep[i] = 1; /* unquantized in the source: moves over as it is */
        }
    }
    int first_kept = out.n;
    for (int i = 0; rc == 0 && i < src->n; i++)
        if (keep[i])
            rc = lwq_tlist_add(&out, src->v[i].name, src->v[i].dtype, src->v[i].ndim,
                               src->v[i].shape, src->v[i].data, 0, e);
    if (rc < 0) {
        free(keep);
        lwq_tlist_free(&out);
        return rc;
    }
    for (int i = 0, k = first_kept; i < src->n; i++)
        if (keep[i]) {
            out.v[k++].owned = src->v[i].owned;
            src->v[i].owned = 0;
        }
    free(keep);
    lwq_tlist_free(src);
    lwq_tlist_sort(&out);
    *src = out;
    return 0;
}
