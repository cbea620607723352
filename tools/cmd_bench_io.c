/* tools/cmd_bench_io.c — `lwq bench-io`: cold sequential read throughput of files, per I/O path.
 *
 * Each mode reads every file whole, window by window, into one page-aligned (pool) buffer the
 * way the prefetcher fills a slot, after dropping the files from the page cache
 * (POSIX_FADV_DONTNEED; O_DIRECT modes bypass the cache anyway).  The time is the wall clock of
 * the whole loop per file.  The bytes are checked inside that loop (a sampled checksum, cheap
 * enough not to matter): every mode must produce the same checksum per file. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/sys/file.h"
#include "core/sys/log.h"
#include "io/pool.h"
#include "io/reader.h"
#include "tools/commands.h"

typedef enum { BM_URING_DIRECT_REG, BM_URING_DIRECT, BM_PREAD, BM_MMAP, BM_COUNT } bench_mode;
static const char *bm_name[BM_COUNT] = {"uring-direct-reg", "uring-direct", "pread", "mmap"};

typedef struct {
    char **paths;
    int npaths;
    unsigned qd;
    size_t block;
    size_t window;
    unsigned threads;
    int json, verify, busy;
    int modes[BM_COUNT];
} bench_args;

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: lwq bench-io PATH... [--qd N] [--block MiB] [--window MiB] [--threads N]\n"
            "                    [--mode uring-direct-reg|uring-direct|pread|mmap|all] [--json]\n"
            "                    [--busy-core] [--no-verify]\n\n"
            "Reads the files cold and prints the throughput of each I/O path:\n"
            "  uring-direct-reg  io_uring, O_DIRECT, registered buffers and files (the engine's)\n"
            "  uring-direct      io_uring, O_DIRECT, plain buffers\n"
            "  pread             buffered pread from --threads threads (the fallback)\n"
            "  mmap              mmap + copy into the buffer\n"
            "--qd N         requests in flight (default 32)\n"
            "--block MiB    request size (default 2; fractions allowed, multiple of 4 KiB)\n"
            "--window MiB   bytes read per job, like one layer (default 512)\n"
            "--busy-core    run a compute thread that keeps one core busy meanwhile\n"
            "--json         one JSON object per line per mode\n");
}

static int parse_mib(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v > 0) || v > 65536)
        return -1;
    *out = (size_t)llround(v * 1048576.0);
    return 0;
}

static int parse_args(int argc, char **argv, bench_args *a)
{
    *a = (bench_args){.qd = 32, .block = 2u << 20, .window = 512u << 20, .threads = 4,
                      .verify = 1};
    a->paths = calloc((size_t)argc, sizeof *a->paths);
    int any_mode = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(s, "--json")) {
            a->json = 1;
        } else if (!strcmp(s, "--busy-core")) {
            a->busy = 1;
        } else if (!strcmp(s, "--no-verify")) {
            a->verify = 0;
        } else if (!strcmp(s, "--qd") && v) {
            char *end;
            long q = strtol(v, &end, 10);
            if (*end || q < 1 || q > 4096) {
                fprintf(stderr, "lwq bench-io: --qd %s: expected 1..4096\n", v);
                return -1;
            }
            a->qd = (unsigned)q;
            i++;
        } else if (!strcmp(s, "--threads") && v) {
            char *end;
            long t = strtol(v, &end, 10);
            if (*end || t < 1 || t > 256) {
                fprintf(stderr, "lwq bench-io: --threads %s: expected 1..256\n", v);
                return -1;
            }
            a->threads = (unsigned)t;
            i++;
        } else if ((!strcmp(s, "--block") || !strcmp(s, "--window")) && v) {
            size_t b;
            if (parse_mib(v, &b) < 0 || b % 4096) {
                fprintf(stderr, "lwq bench-io: %s %s: expected MiB, a multiple of 4 KiB\n", s, v);
                return -1;
            }
            *(!strcmp(s, "--block") ? &a->block : &a->window) = b;
            i++;
        } else if (!strcmp(s, "--mode") && v) {
            int found = 0;
            for (int m = 0; m < BM_COUNT; m++)
                if (!strcmp(v, bm_name[m]) || !strcmp(v, "all")) {
                    a->modes[m] = 1;
                    found = 1;
                }
            if (!found) {
                fprintf(stderr, "lwq bench-io: unknown --mode %s\n", v);
                return -1;
            }
            any_mode = 1;
            i++;
        } else if (s[0] == '-') {
            fprintf(stderr, "lwq bench-io: unknown or incomplete option %s\n", s);
            return -1;
        } else {
            a->paths[a->npaths++] = argv[i];
        }
    }
    if (!any_mode)
        for (int m = 0; m < BM_COUNT; m++)
            a->modes[m] = 1;
    if (a->npaths == 0) {
        usage(stderr);
        return -1;
    }
    if (a->block > (64u << 20)) {
        fprintf(stderr, "lwq bench-io: --block at most 64 MiB\n");
        return -1;
    }
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the busy core: a dot-product loop on L1-resident data --------------------------------- */

static atomic_int busy_stop;
static double busy_flops;

static void *busy_main(void *arg)
{
    (void)arg;
    float x[512], y[512];
    for (int i = 0; i < 512; i++) {
        x[i] = 1.0f + (float)i * 1e-3f;
        y[i] = 1.0f - (float)i * 1e-4f;
    }
    double acc = 0, flops = 0;
    while (!atomic_load_explicit(&busy_stop, memory_order_relaxed)) {
        for (int r = 0; r < 256; r++) {
            float s = 0;
            for (int i = 0; i < 512; i++)
                s += x[i] * y[i];
            acc += s;
            x[r] += 1e-7f * (float)acc; /* a dependency the compiler cannot hoist */
        }
        flops += 256.0 * 1024.0;
    }
    busy_flops = flops + (acc == -1.0); /* keep acc alive */
    return NULL;
}

/* ---- reading -------------------------------------------------------------------------------- */

/* FNV-style hash of the first 4 KiB of every MiB at `base_off` in the file: cheap enough to run
 * inside the timed loop (0.4% of the bytes), and still catches misplaced or missing blocks. */
static uint64_t checksum(const unsigned char *p, size_t n, uint64_t base_off, uint64_t h)
{
    const uint64_t MIB = 1u << 20;
    for (uint64_t o = (MIB - base_off % MIB) % MIB; o < n; o += MIB) {
        size_t k = n - o < 4096 ? (size_t)(n - o) : 4096;
        for (size_t i = 0; i < k; i++)
            h = (h ^ p[o + i]) * 0x100000001B3ull;
    }
    return h;
}

static int drop_cache(const char *path, uint64_t *size)
{
    struct stat st;
    lwq_error e = {0};
    int fd = lwq_file_open_regular(path, 0, &st, &e); /* a FIFO is refused, not waited on */
    if (fd < 0) {
        fprintf(stderr, "lwq bench-io: %s\n", e.msg);
        return -1;
    }
    *size = (uint64_t)st.st_size;
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (rc)
        fprintf(stderr, "lwq bench-io: warning: cannot drop %s from the page cache: %s\n", path,
                strerror(rc));
    close(fd);
    return 0;
}

/* Read one file with the reader; *secs gets the wall time of the whole loop. */
static int read_with_reader(lwq_io_reader *rd, const char *path, uint64_t size, lwq_pool *pool,
                            const bench_args *a, double *secs, uint64_t *sum)
{
    lwq_error e = {0};
    double t0 = now_s();
    for (uint64_t w = 0; w < size; w += a->window) {
        uint64_t len = size - w < a->window ? size - w : a->window;
        lwq_io_range r = {path, w, len, 0};
        lwq_io_plan p;
        int rc = lwq_io_plan_build(&p, &r, 1, 0, &e);
        if (rc == 0)
            rc = lwq_io_reader_read(rd, &p, pool->base, pool->slot_bytes, NULL, &e);
        lwq_io_plan_free(&p);
        if (rc < 0) {
            fprintf(stderr, "lwq bench-io: %s\n", e.msg);
            return -1;
        }
        if (a->verify)
            *sum = checksum(pool->base + r.dst, len, w, *sum);
    }
    *secs += now_s() - t0;
    return 0;
}

static int read_with_mmap(const char *path, uint64_t size, lwq_pool *pool, const bench_args *a,
                          double *secs, uint64_t *sum)
{
    if (size == 0)
        return 0;
    lwq_error e = {0};
    int fd = lwq_file_open_regular(path, 0, NULL, &e);
    if (fd < 0) {
        fprintf(stderr, "lwq bench-io: %s\n", e.msg);
        return -1;
    }
    double t0 = now_s();
    unsigned char *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        fprintf(stderr, "lwq bench-io: mmap %s: %s\n", path, strerror(errno));
        return -1;
    }
    madvise(m, size, MADV_SEQUENTIAL);
    for (uint64_t w = 0; w < size; w += a->window) {
        size_t len = size - w < a->window ? (size_t)(size - w) : a->window;
        memcpy(pool->base, m + w, len);
        if (a->verify)
            *sum = checksum(pool->base, len, w, *sum);
    }
    *secs += now_s() - t0;
    munmap(m, size);
    return 0;
}

static int run_mode(bench_mode m, const bench_args *a, lwq_pool *pool, uint64_t *sums,
                    int *have_sums)
{
    lwq_io_reader *rd = NULL;
    char desc[256] = "mmap + memcpy";
    if (m != BM_MMAP) {
        lwq_io_reader_opts o;
        lwq_io_reader_opts_default(&o);
        o.use_uring = m != BM_PREAD;
        o.direct = m != BM_PREAD;
        o.register_buffers = o.register_files = m == BM_URING_DIRECT_REG;
        o.queue_depth = a->qd;
        o.block_bytes = a->block;
        o.pread_threads = a->threads;
        lwq_error e = {0};
        if (lwq_io_reader_init(&rd, &o, &e) < 0 ||
            lwq_io_reader_register(rd, pool->base, pool->slot_bytes, &e) < 0) {
            fprintf(stderr, "lwq bench-io: %s\n", e.msg);
            lwq_io_reader_free(rd);
            return -1;
        }
    }
    double secs = 0;
    uint64_t bytes = 0;
    for (int f = 0; f < a->npaths; f++) {
        uint64_t size, sum = 0xcbf29ce484222325ull;
        if (drop_cache(a->paths[f], &size) < 0)
            goto fail;
        int rc = m == BM_MMAP ? read_with_mmap(a->paths[f], size, pool, a, &secs, &sum)
                              : read_with_reader(rd, a->paths[f], size, pool, a, &secs, &sum);
        if (rc < 0)
            goto fail;
        bytes += size;
        if (a->verify) {
            if (have_sums[f] && sums[f] != sum) {
                fprintf(stderr, "lwq bench-io: mode %s read different bytes of %s than an earlier "
                                "mode (checksum %016llx vs %016llx)\n",
                        bm_name[m], a->paths[f], (unsigned long long)sum,
                        (unsigned long long)sums[f]);
                goto fail;
            }
            sums[f] = sum;
            have_sums[f] = 1;
        }
    }
    if (rd)
        snprintf(desc, sizeof desc, "%s", lwq_io_reader_describe(rd));
    lwq_io_reader_free(rd);
    double gbps = secs > 0 ? (double)bytes / secs / 1e9 : 0;
    if (a->json)
        printf("{\"mode\":\"%s\",\"bytes\":%llu,\"seconds\":%.6f,\"gbps\":%.4f,\"qd\":%u,"
               "\"block_bytes\":%zu,\"window_bytes\":%zu,\"busy_core\":%s,\"path\":\"%s\"}\n",
               bm_name[m], (unsigned long long)bytes, secs, gbps,
               m == BM_MMAP ? 0 : m == BM_PREAD ? a->threads : a->qd,
               m == BM_MMAP ? a->window : a->block, a->window, a->busy ? "true" : "false", desc);
    else
        printf("%-18s %14llu %9.3f %8.3f  %s\n", bm_name[m], (unsigned long long)bytes, secs, gbps,
               desc);
    fflush(stdout);
    return 0;
fail:
    lwq_io_reader_free(rd);
    return -1;
}

int lwq_cmd_bench_io(int argc, char **argv)
{
    bench_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) {
        free(a.paths);
        return rc > 0 ? LWQ_EXIT_OK : LWQ_EXIT_ERR;
    }
    uint64_t maxsize = 0;
    for (int f = 0; f < a.npaths; f++) {
        struct stat st;
        int bad = stat(a.paths[f], &st) < 0 ? errno : 0;
        if (bad || !S_ISREG(st.st_mode)) {
            if (bad)
                fprintf(stderr, "lwq bench-io: %s: %s\n", a.paths[f], strerror(bad));
            else
                fprintf(stderr, "lwq bench-io: %s: not a regular file (%s); lwq reads only regular files\n", a.paths[f],
                        lwq_file_kind(st.st_mode));
            free(a.paths);
            return LWQ_EXIT_ERR;
        }
        if ((uint64_t)st.st_size > maxsize)
            maxsize = (uint64_t)st.st_size;
    }
    size_t window = maxsize < a.window ? (size_t)((maxsize + 4095) / 4096 * 4096) : a.window;
    if (window == 0)
        window = 4096;
    a.window = window;
    lwq_pool pool;
    lwq_error e = {0};
    lwq_pool_opts po = {.slot_bytes = window, .nslots = 1, .numa_node = -1};
    if (lwq_pool_init(&pool, &po, &e) < 0) {
        fprintf(stderr, "lwq bench-io: %s\n", e.msg);
        free(a.paths);
        return LWQ_EXIT_ERR;
    }
    uint64_t *sums = calloc((size_t)a.npaths, sizeof *sums);
    int *have = calloc((size_t)a.npaths, sizeof *have);
    pthread_t busy;
    int busy_on = 0;
    double t_busy = 0;
    if (a.busy) {
        atomic_store(&busy_stop, 0);
        busy_on = pthread_create(&busy, NULL, busy_main, NULL) == 0;
        t_busy = now_s();
    }
    if (!a.json)
        printf("%-18s %14s %9s %8s  %s\n", "mode", "bytes", "seconds", "GB/s", "path");
    int status = LWQ_EXIT_OK;
    for (int m = 0; m < BM_COUNT && status == LWQ_EXIT_OK; m++)
        if (a.modes[m] && run_mode((bench_mode)m, &a, &pool, sums, have) < 0)
            status = LWQ_EXIT_ERR;
    if (busy_on) {
        atomic_store(&busy_stop, 1);
        pthread_join(busy, NULL);
        double dt = now_s() - t_busy;
        if (!a.json)
            printf("busy core: %.2f GFLOP/s of dot products meanwhile\n", busy_flops / dt / 1e9);
    }
    free(sums);
    free(have);
    lwq_pool_free(&pool);
    free(a.paths);
    return status;
}
