#include "engine/qops.h"

#include <string.h>

#include "kernels/quant.h"
#ifdef LWQ_HAVE_CUDA
#include "kernels/cuda/quant_cuda.h"
#endif

void lwq_qops_init(lwq_qops *q, const lwq_backend *be)
{
    memset(q, 0, sizeof *q);
#ifdef LWQ_HAVE_CUDA
    if (be && be->ops->device == LWQ_DEV_CUDA)
        q->be = be;
#else
    (void)be;
#endif
}

void lwq_qops_free(lwq_qops *q)
{
    if (q->be && q->dev_w)
        lwq_backend_free(q->be, q->dev_w);
    memset(q, 0, sizeof *q);
}

const char *lwq_qops_where(const lwq_qops *q) { return q->be ? "cuda" : "host"; }

#ifdef LWQ_HAVE_CUDA
/* Device copy of w (uploaded once while it stays the current weight). */
static int dev_weight(lwq_qops *q, const lwq_htensor *w, const void **out, lwq_error *e)
{
    if (q->cached != w) {
        if (w->nbytes > q->dev_cap) {
            if (q->dev_w)
                lwq_backend_free(q->be, q->dev_w);
            q->dev_w = NULL;
            q->dev_cap = 0;
            int rc = lwq_backend_alloc(q->be, w->nbytes, &q->dev_w, e);
            if (rc)
                return rc;
            q->dev_cap = w->nbytes;
        }
        q->cached = NULL;
        int rc = lwq_backend_upload(q->be, q->dev_w, w->data, w->nbytes, e);
        if (rc)
            return rc;
        q->cached = w;
    }
    *out = q->dev_w;
    return 0;
}

/* Scratch device buffers for one call's outputs (and inputs such as H or block amax). */
typedef struct dbufs {
    const lwq_backend *be;
    void *p[4];
} dbufs;

static int dalloc(dbufs *d, int i, size_t bytes, lwq_error *e)
{
    return lwq_backend_alloc(d->be, bytes ? bytes : 1, &d->p[i], e);
}

static void dfree(dbufs *d)
{
    for (int i = 0; i < 4; i++)
        if (d->p[i])
            lwq_backend_free(d->be, d->p[i]);
}
#endif

int lwq_qops_nvfp4_max(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float gamax, const char *name,
                       uint8_t *packed, uint8_t *scale, float *ws2, lwq_error *e)
{
#ifdef LWQ_HAVE_CUDA
    if (q->be) {
        const void *dw;
        dbufs d = {q->be, {0}};
        size_t np = (size_t)(rows * cols / 2), ns = (size_t)(rows * (cols / 16));
        int rc = dev_weight(q, w, &dw, e);
        if (rc == 0 && (rc = dalloc(&d, 0, np, e)) == 0 && (rc = dalloc(&d, 1, ns, e)) == 0)
            rc = lwq_quant_cuda_nvfp4_max(dw, w->dtype, rows, cols, gamax, name, d.p[0], d.p[1], ws2, NULL, e);
        if (rc >= 0) {
            int keep = rc;
            if ((rc = lwq_backend_download(q->be, packed, d.p[0], np, e)) == 0 &&
                (rc = lwq_backend_download(q->be, scale, d.p[1], ns, e)) == 0)
                rc = keep;
        }
        dfree(&d);
        return rc;
    }
#endif
    return lwq_quant_nvfp4_max(w->data, w->dtype, rows, cols, gamax, name, packed, scale, ws2, e);
}

int lwq_qops_nvfp4_static(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, const float *bamax,
                          float gamax, const char *name, uint8_t *packed, uint8_t *scale, float *ws2, lwq_error *e)
{
#ifdef LWQ_HAVE_CUDA
    if (q->be) {
        const void *dw;
        dbufs d = {q->be, {0}};
        size_t np = (size_t)(rows * cols / 2), ns = (size_t)(rows * (cols / 16));
        int rc = dev_weight(q, w, &dw, e);
        if (rc == 0 && (rc = dalloc(&d, 0, np, e)) == 0 && (rc = dalloc(&d, 1, ns, e)) == 0 &&
            (rc = dalloc(&d, 2, ns * sizeof(float), e)) == 0 &&
            (rc = lwq_backend_upload(q->be, d.p[2], bamax, ns * sizeof(float), e)) == 0)
            rc = lwq_quant_cuda_nvfp4_static(dw, w->dtype, rows, cols, d.p[2], gamax, name, d.p[0], d.p[1], ws2, NULL, e);
        if (rc >= 0) {
            int keep = rc;
            if ((rc = lwq_backend_download(q->be, packed, d.p[0], np, e)) == 0 &&
                (rc = lwq_backend_download(q->be, scale, d.p[1], ns, e)) == 0)
                rc = keep;
        }
        dfree(&d);
        return rc;
    }
#endif
    return lwq_quant_nvfp4_static(w->data, w->dtype, rows, cols, bamax, gamax, name, packed, scale, ws2, e);
}

int lwq_qops_nvfp4_sweep(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float gamax,
                         const float *hessian, const char *name, float *bamax, lwq_error *e)
{
#ifdef LWQ_HAVE_CUDA
    if (q->be) {
        const void *dw;
        dbufs d = {q->be, {0}};
        size_t ns = (size_t)(rows * (cols / 16)), nh = (size_t)(cols / 16) * 256 * sizeof(float);
        int rc = dev_weight(q, w, &dw, e);
        if (rc == 0 && (rc = dalloc(&d, 0, ns * sizeof(float), e)) == 0 && hessian &&
            (rc = dalloc(&d, 1, nh, e)) == 0)
            rc = lwq_backend_upload(q->be, d.p[1], hessian, nh, e);
        if (rc == 0)
            rc = lwq_quant_cuda_nvfp4_sweep(dw, w->dtype, rows, cols, gamax, hessian ? d.p[1] : NULL, name, d.p[0],
                                            NULL, NULL, e);
        if (rc >= 0) {
            int keep = rc;
            rc = lwq_backend_download(q->be, bamax, d.p[0], ns * sizeof(float), e);
            if (rc == 0)
                rc = keep;
        }
        dfree(&d);
        return rc;
    }
#endif
    return lwq_quant_nvfp4_sweep(w->data, w->dtype, rows, cols, gamax, hessian, name, bamax, NULL, e);
}

int lwq_qops_nvfp4_mse(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float gamax, const char *name,
                       float *bamax, lwq_error *e)
{
#ifdef LWQ_HAVE_CUDA
    if (q->be) {
        const void *dw;
        dbufs d = {q->be, {0}};
        size_t ns = (size_t)(rows * (cols / 16));
        int rc = dev_weight(q, w, &dw, e);
        if (rc == 0 && (rc = dalloc(&d, 0, ns * sizeof(float), e)) == 0)
            rc = lwq_quant_cuda_nvfp4_mse(dw, w->dtype, rows, cols, gamax, name, d.p[0], NULL, e);
        if (rc >= 0) {
            int keep = rc;
            rc = lwq_backend_download(q->be, bamax, d.p[0], ns * sizeof(float), e);
            if (rc == 0)
                rc = keep;
        }
        dfree(&d);
        return rc;
    }
#endif
    return lwq_quant_nvfp4_mse(w->data, w->dtype, rows, cols, gamax, name, bamax, e);
}

int lwq_qops_fp8(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float amax, const char *name,
                 uint8_t *out, float *ws, lwq_error *e)
{
#ifdef LWQ_HAVE_CUDA
    if (q->be) {
        const void *dw;
        dbufs d = {q->be, {0}};
        size_t n = (size_t)(rows * cols);
        int rc = dev_weight(q, w, &dw, e);
        if (rc == 0 && (rc = dalloc(&d, 0, n, e)) == 0)
            rc = lwq_quant_cuda_fp8(dw, w->dtype, rows, cols, amax, name, d.p[0], ws, NULL, e);
        if (rc >= 0) {
            int keep = rc;
            rc = lwq_backend_download(q->be, out, d.p[0], n, e);
            if (rc == 0)
                rc = keep;
        }
        dfree(&d);
        return rc;
    }
#endif
    return lwq_quant_fp8(w->data, w->dtype, rows, cols, amax, name, out, ws, e);
}

int lwq_qops_fp8_mse(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, const char *name, float *amax_out,
                     lwq_error *e)
{
#ifdef LWQ_HAVE_CUDA
    if (q->be) {
        const void *dw;
        int rc = dev_weight(q, w, &dw, e);
        return rc ? rc : lwq_quant_cuda_fp8_mse(dw, w->dtype, rows, cols, name, amax_out, NULL, NULL, e);
    }
#endif
    return lwq_quant_fp8_mse(w->data, w->dtype, rows, cols, name, amax_out, NULL, e);
}
