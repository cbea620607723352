/* engine/quant/qops.c — the quantizer table (kernels/quant_ops.h) driven with host buffers: on the host
 * the buffers go straight in; on a device the weight is uploaded once per (generation, name, data,
 * size) and outputs come back through reusable device buffers.  See qops.h for the cache's key. */
#include "engine/quant/qops.h"

#include <stdlib.h>
#include <string.h>

void lwq_qops_init_with(lwq_qops *q, const lwq_backend *be, const lwq_quant_ops *qt)
{
    memset(q, 0, sizeof *q);
    q->be = be;
    q->qt = qt;
}

void lwq_qops_init(lwq_qops *q, const lwq_backend *be)
{
    const lwq_quant_ops *cu = lwq_quant_cuda_ops();
    if (be && be->ops->device == LWQ_DEV_CUDA && cu)
        lwq_qops_init_with(q, be, cu);
    else
        lwq_qops_init_with(q, NULL, lwq_quant_host_ops());
}

void lwq_qops_set_devcopies(lwq_qops *q, lwq_qops_devcopy_fn fn, void *ctx)
{
    q->devcopy = fn;
    q->devcopy_ctx = ctx;
}

void lwq_qops_end_layer(lwq_qops *q)
{
    q->gen++;
    q->cached = 0;
}

void lwq_qops_free(lwq_qops *q)
{
    if (q->be) {
        lwq_backend_free(q->be, q->dev_w);
        for (int i = 0; i < LWQ_QOPS_SCRATCH; i++)
            lwq_backend_free(q->be, q->scratch[i]);
    }
    free(q->cached_name);
    memset(q, 0, sizeof *q);
}

const char *lwq_qops_where(const lwq_qops *q) { return q->qt ? q->qt->name : "host"; }

/* A device buffer of at least `bytes` in *p / *cap, grown (never shrunk) on demand. */
static int grow(lwq_qops *q, void **p, uint64_t *cap, uint64_t bytes, lwq_error *e)
{
    if (bytes <= *cap && *p)
        return 0;
    lwq_backend_free(q->be, *p);
    *p = NULL;
    *cap = 0;
    int rc = lwq_backend_alloc(q->be, (size_t)bytes, p, e);
    if (rc < 0)
        return rc;
    q->allocs++;
    *cap = bytes;
    return 0;
}

static int same_key(const lwq_qops *q, const lwq_htensor *w)
{
    return q->cached && q->cached_gen == q->gen && q->cached_data == w->data && q->cached_bytes == w->nbytes &&
           q->cached_name && w->name && strcmp(q->cached_name, w->name) == 0;
}

/* Where the quantizer reads w: its host data, or its device copy (uploaded unless cached; the
 * shape is checked against the data first, so no device size is computed from a bad one). */
static int weight_ptr(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, const void **out,
                      lwq_error *e)
{
    if (!q->be) { /* the host quantizers check the shape themselves, with their own messages */
        *out = w->data;
        return 0;
    }
    if (rows <= 0 || cols <= 0 || rows > INT64_MAX / 8 / cols ||
        (uint64_t)(rows * cols) * lwq_dtype_size(w->dtype) > w->nbytes)
        return lwq_errf(e, LWQ_EINVAL, "tensor %s: shape [%lld, %lld] does not fit its %llu bytes of data",
                        w->name ? w->name : "(unnamed)", (long long)rows, (long long)cols,
                        (unsigned long long)w->nbytes);
    const void *held = q->devcopy ? q->devcopy(q->devcopy_ctx, w) : NULL;
    if (held) { /* the forward's copy of this very tensor: no second upload */
        q->reused++;
        *out = held;
        return 0;
    }
    if (!same_key(q, w)) {
        q->cached = 0;
        free(q->cached_name);
        q->cached_name = NULL;
        int rc = grow(q, &q->dev_w, &q->dev_cap, w->nbytes, e);
        if (rc == 0)
            rc = lwq_backend_upload(q->be, q->dev_w, w->data, (size_t)w->nbytes, e);
        if (rc < 0)
            return rc;
        q->uploads++;
        size_t n = w->name ? strlen(w->name) + 1 : 0;
        if (n && (q->cached_name = malloc(n)) != NULL) { /* no name copy: no cache, still correct */
            memcpy(q->cached_name, w->name, n);
            q->cached = 1;
            q->cached_gen = q->gen;
            q->cached_data = w->data;
            q->cached_bytes = w->nbytes;
        }
    }
    *out = q->dev_w;
    return 0;
}

/* An output buffer: the caller's host buffer, or device scratch slot i. */
static int out_buf(lwq_qops *q, int i, void *host, uint64_t bytes, void **p, lwq_error *e)
{
    if (!q->be) {
        *p = host;
        return 0;
    }
    int rc = grow(q, &q->scratch[i], &q->scratch_cap[i], bytes ? bytes : 1, e);
    *p = q->scratch[i];
    return rc;
}

/* An input array: the caller's host buffer, or its copy in device scratch slot i. */
static int in_buf(lwq_qops *q, int i, const void *host, uint64_t bytes, const void **p, lwq_error *e)
{
    if (!q->be || !host) {
        *p = host;
        return 0;
    }
    void *d;
    int rc = out_buf(q, i, NULL, bytes, &d, e);
    if (rc == 0)
        rc = lwq_backend_upload(q->be, d, host, (size_t)bytes, e);
    *p = d;
    return rc;
}

/* After the quantizer returned rc: bring an output back to the host (a no-op on the host). */
static int fetch(lwq_qops *q, int rc, void *host, const void *dev, uint64_t bytes, lwq_error *e)
{
    if (rc < 0 || !q->be)
        return rc;
    int d = lwq_backend_download(q->be, host, dev, (size_t)bytes, e);
    return d < 0 ? d : rc;
}

int lwq_qops_nvfp4_max(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float gamax, const char *name,
                       uint8_t *packed, uint8_t *scale, float *ws2, lwq_error *e)
{
    const void *dw;
    void *dp, *ds;
    int rc = weight_ptr(q, w, rows, cols, &dw, e);
    uint64_t np = (uint64_t)(rows * cols) / 2, ns = (uint64_t)(rows * (cols / 16));
    if (rc < 0 || (rc = out_buf(q, 0, packed, np, &dp, e)) < 0 || (rc = out_buf(q, 1, scale, ns, &ds, e)) < 0)
        return rc;
    rc = q->qt->nvfp4_max(dw, w->dtype, rows, cols, gamax, name, dp, ds, ws2, NULL, e);
    rc = fetch(q, rc, packed, dp, np, e);
    return fetch(q, rc, scale, ds, ns, e);
}

int lwq_qops_nvfp4_static(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, const float *bamax,
                          float gamax, const char *name, uint8_t *packed, uint8_t *scale, float *ws2, lwq_error *e)
{
    const void *dw, *db;
    void *dp, *ds;
    int rc = weight_ptr(q, w, rows, cols, &dw, e);
    uint64_t np = (uint64_t)(rows * cols) / 2, ns = (uint64_t)(rows * (cols / 16));
    if (rc < 0 || (rc = out_buf(q, 0, packed, np, &dp, e)) < 0 || (rc = out_buf(q, 1, scale, ns, &ds, e)) < 0 ||
        (rc = in_buf(q, 2, bamax, ns * sizeof(float), &db, e)) < 0)
        return rc;
    rc = q->qt->nvfp4_static(dw, w->dtype, rows, cols, db, gamax, name, dp, ds, ws2, NULL, e);
    rc = fetch(q, rc, packed, dp, np, e);
    return fetch(q, rc, scale, ds, ns, e);
}

int lwq_qops_nvfp4_sweep(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float gamax,
                         const float *hessian, const char *name, float *bamax, lwq_error *e)
{
    const void *dw, *dh;
    void *db;
    int rc = weight_ptr(q, w, rows, cols, &dw, e);
    uint64_t ns = (uint64_t)(rows * (cols / 16)), nh = (uint64_t)(cols / 16) * 256 * sizeof(float);
    if (rc < 0 || (rc = out_buf(q, 0, bamax, ns * sizeof(float), &db, e)) < 0 ||
        (rc = in_buf(q, 1, hessian, nh, &dh, e)) < 0)
        return rc;
    rc = q->qt->nvfp4_sweep(dw, w->dtype, rows, cols, gamax, dh, name, db, NULL, e);
    return fetch(q, rc, bamax, db, ns * sizeof(float), e);
}

int lwq_qops_nvfp4_mse(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float gamax, const char *name,
                       float *bamax, lwq_error *e)
{
    const void *dw;
    void *db;
    int rc = weight_ptr(q, w, rows, cols, &dw, e);
    uint64_t ns = (uint64_t)(rows * (cols / 16));
    if (rc < 0 || (rc = out_buf(q, 0, bamax, ns * sizeof(float), &db, e)) < 0)
        return rc;
    rc = q->qt->nvfp4_mse(dw, w->dtype, rows, cols, gamax, name, db, NULL, e);
    return fetch(q, rc, bamax, db, ns * sizeof(float), e);
}

int lwq_qops_fp8(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, float amax, const char *name,
                 uint8_t *out, float *ws, lwq_error *e)
{
    const void *dw;
    void *dq;
    int rc = weight_ptr(q, w, rows, cols, &dw, e);
    uint64_t n = (uint64_t)(rows * cols);
    if (rc < 0 || (rc = out_buf(q, 0, out, n, &dq, e)) < 0)
        return rc;
    rc = q->qt->fp8(dw, w->dtype, rows, cols, amax, name, dq, ws, NULL, e);
    return fetch(q, rc, out, dq, n, e);
}

int lwq_qops_fp8_mse(lwq_qops *q, const lwq_htensor *w, int64_t rows, int64_t cols, const char *name,
                     float *amax_out, lwq_error *e)
{
    const void *dw;
    int rc = weight_ptr(q, w, rows, cols, &dw, e);
    return rc < 0 ? rc : q->qt->fp8_mse(dw, w->dtype, rows, cols, name, amax_out, NULL, e);
}
