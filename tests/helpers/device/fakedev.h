/* tests/helpers/device/fakedev.h — host fakes of a device backend for CPU tests of device-side logic:
 * "device" memory is malloc'd host memory behind the backend table (device = CUDA).
 *   fakedev_init: memory only (alloc, free, upload, download), with counters of allocations,
 *     uploads and live buffers;
 *   fakecu_init: a fake CUDA device that computes, with the CPU backend's ops, so the whole engine
 *     runs its device paths (uploads, device buffers, synchronize) on a machine without a GPU; it
 *     counts live "device" bytes and their peak (mem_peak reports it: the engine's share of what
 *     cudaMemGetInfo would see), and emulates the CUDA gather's error path (kernels/cuda/
 *     backend_cuda.cu): a row index out of range, or the gather numbered fakecu.flag_gather,
 *     zero-fills and sets a flag that only the next synchronize() reports.
 * Header-only, one fake per test program. */
#ifndef LWQ_TESTS_FAKEDEV_H
#define LWQ_TESTS_FAKEDEV_H

#include <stdint.h>
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

/* ---- fakecu: the CPU backend's ops on host memory tagged LWQ_DEV_CUDA ------------------------- */

static struct {
    uint64_t live, peak;  /* bytes */
    int gathers, syncs;   /* calls so far */
    int flag_gather;      /* > 0: that gather (1-based) flags an error, as a bad row would */
    int flagged;          /* set by a gather, cleared and reported by synchronize */
    lwq_backend cpu;
} fakecu;

#define FAKECU_HDR 64 /* keeps the blocks 64-byte aligned, as the CPU kernels expect */

static int fakecu_alloc(void *ctx, size_t bytes, void **out, lwq_error *e)
{
    (void)ctx;
    char *p = aligned_alloc(64, (FAKECU_HDR + bytes + 63) / 64 * 64);
    if (!p)
        return lwq_errf(e, LWQ_ENOMEM, "fake cuda alloc of %zu bytes", bytes);
    memcpy(p, &bytes, sizeof bytes);
    fakecu.live += bytes;
    fakecu.peak = fakecu.live > fakecu.peak ? fakecu.live : fakecu.peak;
    *out = p + FAKECU_HDR;
    return 0;
}

static void fakecu_free(void *ctx, void *p)
{
    (void)ctx;
    size_t bytes;
    memcpy(&bytes, (char *)p - FAKECU_HDR, sizeof bytes);
    fakecu.live -= bytes;
    free((char *)p - FAKECU_HDR);
}

static int fakecu_memset0(void *ctx, void *dst, size_t bytes, lwq_error *e)
{
    (void)ctx, (void)e;
    memset(dst, 0, bytes);
    return 0;
}

static int fakecu_gather(void *ctx, const lwq_tensor *src, const lwq_tensor *rows, lwq_tensor *dst, lwq_error *e)
{
    (void)ctx;
    fakecu.gathers++;
    const int32_t *r = (const int32_t *)rows->data;
    int bad = fakecu.gathers == fakecu.flag_gather;
    for (int64_t i = 0; i < rows->shape[0]; i++)
        bad |= r[i] < 0 || r[i] >= src->shape[0];
    if (bad) { /* the kernel zero-fills and raises the flag; the call itself succeeds */
        memset(dst->data, 0, (size_t)lwq_tensor_numel(dst) * lwq_dtype_size(dst->dtype));
        fakecu.flagged = 1;
        return 0;
    }
    return fakecu.cpu.ops->gather_rows(fakecu.cpu.ctx, src, rows, dst, e);
}

static int fakecu_sync(void *ctx, lwq_error *e)
{
    (void)ctx;
    fakecu.syncs++;
    if (fakecu.flagged) {
        fakecu.flagged = 0;
        return lwq_errf(e, LWQ_EINVAL, "fake cuda gather_rows: a row index was outside its source");
    }
    return 0;
}

static uint64_t fakecu_mem_peak(void *ctx)
{
    (void)ctx;
    return fakecu.peak;
}

/* Point be at the fake CUDA device (threads as lwq_backend_cpu_create's) and zero its counters. */
static inline void fakecu_init(lwq_backend *be, int threads)
{
    static lwq_backend_ops ops;
    lwq_error e = {0};
    memset(&fakecu, 0, sizeof fakecu);
    if (lwq_backend_cpu_create(&fakecu.cpu, threads, &e) != 0)
        abort();
    ops = *fakecu.cpu.ops;
    ops.name = "fake-cuda";
    ops.device = LWQ_DEV_CUDA;
    ops.destroy = NULL;
    ops.alloc = fakecu_alloc;
    ops.free = fakecu_free;
    ops.upload = fakedev_download; /* memcpy both ways */
    ops.download = fakedev_download;
    ops.memset0 = fakecu_memset0;
    ops.gather_rows = fakecu_gather;
    ops.synchronize = fakecu_sync;
    ops.mem_peak = fakecu_mem_peak;
    ops.host_register = NULL;
    ops.host_unregister = NULL;
    ops.pci_bus_id = NULL;
    be->ops = &ops;
    be->ctx = NULL;
}

#endif
