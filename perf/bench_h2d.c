/* perf/bench_h2d.c — host-to-device copy throughput, the way the engine uploads a layer.
 *
 * The engine reads a layer into an io/pool slot (an anonymous, mlock'ed mapping that the CUDA
 * backend page-locks through lwq_backend_host_register) and uploads each tensor with
 * lwq_backend_upload.  This measures that call on a pool slot, in tensor-sized pieces (default
 * 64 MiB, about one expert's three matrices at hidden 4096), before (pageable) and after the slot
 * is registered (the engine's path), best of REPS passes over the slot.  Every copy is first checked: a download of the device
 * buffer must equal the slot.  Prints a line per mode and, with --json, one JSON object
 * ({"pageable_gbps":..,"pinned_gbps":..,"bytes":..}) for perf/gpu-check.sh.
 * Usage: bench_h2d [--json] [SLOT_MIB [PIECE_MIB [REPS]]]   (defaults 1024 64 5)
 * Exits 0 with a message when lwq is built without CUDA or no device is present; 1 on a failed
 * check or a CUDA error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/pool.h"
#include "kernels/backend.h"

#ifndef LWQ_HAVE_CUDA
int main(int argc, char **argv)
{
    int json = argc > 1 && !strcmp(argv[1], "--json");
    printf(json ? "{\"skipped\":\"lwq built without CUDA\"}\n" : "bench_h2d: lwq built without CUDA; nothing to measure\n");
    return 0;
}
#else
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best-of-reps GB/s of uploading [src, src+bytes) in `piece`-byte calls; -1 on an error. */
static double upload_gbps(const lwq_backend *be, void *dev, const unsigned char *src, size_t bytes, size_t piece,
                          int reps, lwq_error *e)
{
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t = now();
        for (size_t off = 0; off < bytes; off += piece) {
            size_t n = bytes - off < piece ? bytes - off : piece;
            if (lwq_backend_upload(be, (unsigned char *)dev + off, src + off, n, e) != 0)
                return -1;
        }
        double gbps = (double)bytes / 1e9 / (now() - t);
        best = gbps > best ? gbps : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    int json = argc > 1 && !strcmp(argv[1], "--json");
    int a = json ? 2 : 1;
    size_t slot_mib = argc > a ? strtoul(argv[a], NULL, 10) : 1024;
    size_t piece_mib = argc > a + 1 ? strtoul(argv[a + 1], NULL, 10) : 64;
    int reps = argc > a + 2 ? atoi(argv[a + 2]) : 5;
    if (!slot_mib || !piece_mib || reps < 1 || slot_mib > (1u << 20)) {
        fprintf(stderr, "usage: bench_h2d [--json] [SLOT_MIB [PIECE_MIB [REPS]]]\n");
        return 1;
    }
    lwq_error pe = {0};
    if (lwq_backend_cuda_probe(&pe) <= 0) {
        printf(json ? "{\"skipped\":\"%s\"}\n" : "bench_h2d: nothing to measure: %s\n", pe.msg);
        return 0;
    }
    size_t bytes = slot_mib << 20, piece = piece_mib << 20;
    lwq_error e = {0};
    lwq_backend be;
    lwq_pool pool;
    lwq_pool_opts po = {0};
    po.slot_bytes = bytes;
    po.nslots = 1;
    po.numa_node = -1;
    void *dev = NULL;
    unsigned char *back = malloc(bytes);
    if (!back || lwq_backend_cuda_create(&be, 0, &e) != 0 || lwq_pool_init(&pool, &po, &e) != 0 ||
        lwq_backend_alloc(&be, bytes, &dev, &e) != 0) {
        fprintf(stderr, "bench_h2d: set-up failed: %s\n", e.msg[0] ? e.msg : "out of memory");
        return 1;
    }
    unsigned char *src = lwq_pool_slot(&pool, 0);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < bytes; i += 8) { /* not zeros: no copy path may special-case them */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(src + i, &x, bytes - i < 8 ? bytes - i : 8);
    }
    /* correctness first */
    if (upload_gbps(&be, dev, src, bytes, piece, 1, &e) < 0 || lwq_backend_download(&be, back, dev, bytes, &e) != 0) {
        fprintf(stderr, "bench_h2d: %s\n", e.msg);
        return 1;
    }
    if (memcmp(back, src, bytes) != 0) {
        fprintf(stderr, "bench_h2d: check failed: the device copy differs from the slot\n");
        return 1;
    }
    double pageable = upload_gbps(&be, dev, src, bytes, piece, reps, &e);
    double pinned = -1;
    lwq_error re = {0};
    if (pageable >= 0 && lwq_backend_host_register(&be, src, bytes, &re) == 0) {
        pinned = upload_gbps(&be, dev, src, bytes, piece, reps, &e);
        lwq_backend_host_unregister(&be, src);
    } else if (pageable >= 0) {
        fprintf(stderr, "bench_h2d: host registration refused: %s\n", re.msg);
    }
    if (pageable < 0) {
        fprintf(stderr, "bench_h2d: %s\n", e.msg);
        return 1;
    }
    if (json)
        printf("{\"bytes\":%zu,\"piece_bytes\":%zu,\"pageable_gbps\":%.3f,\"pinned_gbps\":%.3f}\n", bytes, piece,
               pageable, pinned);
    else
        printf("bench_h2d: %zu MiB slot in %zu MiB uploads, best of %d: pageable %.2f GB/s; registered as the "
               "engine does (lwq_backend_host_register) %.2f GB/s%s\n",
               slot_mib, piece_mib, reps, pageable, pinned, pinned < 0 ? " (registration refused)" : "");
    lwq_backend_free(&be, dev);
    lwq_pool_free(&pool);
    lwq_backend_destroy(&be);
    free(back);
    return 0;
}
#endif
