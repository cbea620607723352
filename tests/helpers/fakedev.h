/* tests/helpers/fakedev.h — a host fake of a device backend for CPU tests of device-side logic:
 * "device" memory is malloc'd host memory behind the backend table (device = CUDA), with counters
 * of allocations, uploads and live buffers. Header-only, one fake per test program. */
#ifndef LWQ_TESTS_FAKEDEV_H
#define LWQ_TESTS_FAKEDEV_H

#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"

static struct {
    int n_alloc, n_upload, n_live;
} fakedev;

static int fakedev_alloc(void *ctx, size_t bytes, void **out, lwq_error *e)
{
    (void)ctx;
    *out = malloc(bytes);
    if (!*out)
        return lwq_errf(e, LWQ_ENOMEM, "fake alloc");
    fakedev.n_alloc++;
    fakedev.n_live++;
    return 0;
}

static void fakedev_free(void *ctx, void *p)
{
    (void)ctx;
    fakedev.n_live--;
    free(p);
}

static int fakedev_download(void *ctx, void *dst, const void *src, size_t bytes, lwq_error *e)
{
    (void)ctx, (void)e;
    memcpy(dst, src, bytes);
    return 0;
}

static int fakedev_upload(void *ctx, void *dst, const void *src, size_t bytes, lwq_error *e)
{
    fakedev.n_upload++;
    return fakedev_download(ctx, dst, src, bytes, e);
}

/* Point be at the fake and zero the counters. */
static inline void fakedev_init(lwq_backend *be)
{
    static lwq_backend_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.name = "fake-device";
    ops.device = LWQ_DEV_CUDA;
    ops.alloc = fakedev_alloc;
    ops.free = fakedev_free;
    ops.upload = fakedev_upload;
    ops.download = fakedev_download;
    be->ops = &ops;
    be->ctx = NULL;
    memset(&fakedev, 0, sizeof fakedev);
}

#endif
