#include "engine/quant/qlayer_gptq.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/gptq.h"
#include "kernels/quant.h"

/* Multiply-adds the error measurement may spend on one linear before it samples rows. */
#define LWQ_GPTQ_REPORT_WORK 4294967296.0

static int add_err(lwq_qlayer_report *rep, const char *name, double eg, double em, double ref, int sampled,
                   lwq_error *e)
{
    if (rep->gptq_n == rep->gptq_cap) {
        int cap = rep->gptq_cap ? 2 * rep->gptq_cap : 16;
        lwq_qlayer_gptq_err *p = realloc(rep->gptq, (size_t)cap * sizeof *p);
        if (!p)
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", name);
        rep->gptq = p;
        rep->gptq_cap = cap;
    }
    lwq_qlayer_gptq_err *x = &rep->gptq[rep->gptq_n++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->err = eg;
    x->max_err = em;
    x->ref = ref;
    x->sampled = sampled;
    return 0;
}

/* The max-calibrated weight with the same scales, dequantized to float: the baseline. */
static int max_baseline(const lwq_htensor *w, int64_t rows, int64_t cols, int fp8, float amax, const char *name,
                        float *out, lwq_error *e)
{
    size_t n = (size_t)(rows * cols);
    uint8_t *q = malloc(fp8 ? n : n / 2), *sc = fp8 ? NULL : malloc(n / 16);
    float ws = 0;
    int rc;
    if (!q || (!fp8 && !sc))
        rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", name);
    else if (fp8)
        rc = lwq_quant_fp8(w->data, w->dtype, rows, cols, amax, name, q, &ws, e);
    else
        rc = lwq_quant_nvfp4_max(w->data, w->dtype, rows, cols, amax, name, q, sc, &ws, e);
    if (rc >= 0)
        rc = fp8 ? lwq_quant_fp8_dequant(q, ws, (int64_t)n, LWQ_F32, out, e)
                 : lwq_quant_nvfp4_dequant(q, sc, ws, rows, cols, LWQ_F32, out, e);
    free(q);
    free(sc);
    return rc;
}

int lwq_qlayer_gptq(const lwq_arch_linear *l, const lwq_quant_choice *c, const lwq_htensor *w, float amax,
                    const lwq_layer_stats *st, int idx, int on_gpu, uint8_t *packed, uint8_t *scale, uint8_t *q8,
                    float *ws, lwq_qlayer_report *rep, lwq_error *e)
{
    int64_t rows = w->shape[0], cols = w->shape[w->ndim - 1];
    int fp8 = q8 != NULL;
    const double *hs = st->hsum[idx];
    int64_t ntok = st->htokens[idx];
    if (!hs || st->hkind[idx] != LWQ_STATS_H_FULL)
        return lwq_errf(e, LWQ_ESTATE, "%s: no GPTQ Hessian was collected", l->name);
    if (st->hown[idx] != idx && st->htokens[st->hown[idx]] != ntok)
        return lwq_errf(e, LWQ_ESTATE, "%s: saw %lld calibration tokens but %s, whose input it shares, saw %lld",
                        l->name, (long long)ntok, st->plan->linears[st->hown[idx]].name,
                        (long long)st->htokens[st->hown[idx]]);
    lwq_gptq_opts o = {c->gptq_damp, c->gptq_act_order};
    int64_t *perm = malloc((size_t)cols * sizeof *perm);
    uint8_t *dead = malloc((size_t)cols);
    double *u = malloc((size_t)cols * (size_t)cols * sizeof *u);
    float *dq = NULL, *mq = NULL;
    int rc, zero = 0;
    if (!perm || !dead || !u) {
        rc = lwq_errf(e, LWQ_ENOMEM, "%s: cannot allocate the %.2f GB GPTQ factor", l->name,
                      (double)cols * (double)cols * 8 / 1e9);
        goto out;
    }
    /* on_gpu: the run's backend is CUDA, so the CUDA module is loaded and has the table */
    const lwq_gptq_ops *g = on_gpu ? lwq_gptq_cuda_ops(e) : lwq_gptq_host_ops();
    if (!g) {
        rc = LWQ_EDEVICE;
        goto out;
    }
    if ((rc = g->factor(hs, ntok, cols, &o, l->name, perm, u, dead, e)) < 0)
        goto out;
    rc = fp8 ? g->fp8(w->data, w->dtype, rows, cols, amax, perm, u, dead, l->name, q8, ws, e)
             : g->nvfp4(w->data, w->dtype, rows, cols, amax, perm, u, dead, l->name, packed, scale, ws, e);
    if (rc < 0)
        goto out;
    zero = rc;
    free(u);
    u = NULL;
    /* what GPTQ bought, against the max calibration with the same scales */
    size_t n = (size_t)(rows * cols);
    dq = malloc(n * sizeof *dq);
    mq = malloc(n * sizeof *mq);
    if (!dq || !mq) {
        rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", l->name);
        goto out;
    }
    rc = fp8 ? lwq_quant_fp8_dequant(q8, *ws, (int64_t)n, LWQ_F32, dq, e)
             : lwq_quant_nvfp4_dequant(packed, scale, *ws, rows, cols, LWQ_F32, dq, e);
    if (rc >= 0)
        rc = max_baseline(w, rows, cols, fp8, amax, l->name, mq, e);
    /* The measurement costs 3 x rows x in^2 / 2 multiply-adds (more than the sweep): beyond
     * LWQ_GPTQ_REPORT_WORK it runs on every s-th row, compacted in place (the report says so). */
    double work = LWQ_GPTQ_REPORT_WORK;
    const char *ev = getenv("LWQ_GPTQ_REPORT_WORK"); /* test hook: a small budget samples small linears */
    if (ev && atof(ev) >= 1.0)
        work = atof(ev);
    int64_t stride = (int64_t)(((double)rows * (double)cols * (double)cols + work - 1) / work);
    stride = stride < 1 ? 1 : stride;
    int64_t mrows = (rows + stride - 1) / stride;
    const void *wm = w->data;
    void *wc = NULL;
    if (rc >= 0 && stride > 1) {
        size_t rb = (size_t)cols * lwq_dtype_size(w->dtype);
        if (!(wc = malloc((size_t)mrows * rb))) {
            rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", l->name);
        } else {
            for (int64_t r = 0; r < mrows; r++) {
                memcpy((char *)wc + (size_t)r * rb, (const char *)w->data + (size_t)(r * stride) * rb, rb);
                memmove(dq + r * cols, dq + r * stride * cols, (size_t)cols * sizeof *dq);
                memmove(mq + r * cols, mq + r * stride * cols, (size_t)cols * sizeof *mq);
            }
            wm = wc;
        }
    }
    double eg = 0, em = 0, ref = 0;
    if (rc >= 0)
        rc = lwq_gptq_output_error(wm, w->dtype, dq, mrows, cols, hs, &eg, &ref, e);
    if (rc >= 0)
        rc = lwq_gptq_output_error(wm, w->dtype, mq, mrows, cols, hs, &em, NULL, e);
    free(wc);
    if (rc >= 0)
        rc = add_err(rep, l->name, eg, em, ref, mrows < rows, e);
out:
    free(perm);
    free(dead);
    free(u);
    free(dq);
    free(mq);
    return rc < 0 ? rc : zero;
}
