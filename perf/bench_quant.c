/* perf/bench_quant.c — CPU throughput of the quantizers in kernels/quant.h on a BF16 weight.
 * Each kernel's output is first checked against the per-block reference of
 * layout/format/quant_formats.h, then timed (best of N runs).  Throughput is bytes of BF16 input per
 * second.  Usage: bench_quant [rows cols]   (default 4096 x 4096). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/parallel/parallel.h"
#include "kernels/quant.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static float rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((float)(rng >> 40) / 16777216.0f - 0.5f) * 0.1f;
}

#define CHECK(c)                                                                                        \
    do {                                                                                                \
        if (!(c)) {                                                                                     \
            fprintf(stderr, "bench_quant: check failed: %s (line %d)\n", #c, __LINE__);                 \
            return 1;                                                                                   \
        }                                                                                               \
    } while (0)

typedef int (*run_fn)(void *ctx);

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best wall time of `reps` runs, and the process CPU time of that run: on a machine shared with
 * other jobs the wall time includes waiting for a core, the CPU time does not. */
static double best_time(run_fn f, void *ctx, int reps, double *cpu)
{
    double best = 1e30, bcpu = 0;
    for (int i = 0; i < reps; i++) {
        double c = cpu_now(), t = now();
        if (f(ctx) < 0) {
            *cpu = 1;
            return -1;
        }
        t = now() - t;
        c = cpu_now() - c;
        if (t < best)
            best = t, bcpu = c;
    }
    *cpu = bcpu;
    return best;
}

typedef struct bctx {
    uint16_t *w;
    int64_t rows, cols;
    float amax, ws;
    uint8_t *packed, *scale, *q;
    float *h, *bamax;
} bctx;

static int run_max(void *v)
{
    bctx *c = v;
    return lwq_quant_nvfp4_max(c->w, LWQ_BF16, c->rows, c->cols, c->amax, "w", c->packed, c->scale, &c->ws, NULL);
}
static int run_fp8(void *v)
{
    bctx *c = v;
    return lwq_quant_fp8(c->w, LWQ_BF16, c->rows, c->cols, c->amax, "w", c->q, &c->ws, NULL);
}
static int run_amax(void *v)
{
    bctx *c = v;
    return lwq_quant_amax(c->w, LWQ_BF16, c->rows * c->cols, "w", &c->amax, NULL);
}
static int run_sweep(void *v)
{
    bctx *c = v;
    return lwq_quant_nvfp4_sweep(c->w, LWQ_BF16, c->rows, c->cols, c->amax, NULL, "w", NULL, c->scale, NULL);
}
static int run_hsweep(void *v)
{
    bctx *c = v;
    return lwq_quant_nvfp4_sweep(c->w, LWQ_BF16, c->rows, c->cols, c->amax, c->h, "w", NULL, c->scale, NULL);
}
static int run_bmse(void *v)
{
    bctx *c = v;
    return lwq_quant_nvfp4_mse(c->w, LWQ_BF16, c->rows, c->cols, c->amax, "w", c->bamax, NULL);
}
static int run_mse(void *v)
{
    bctx *c = v;
    float a;
    return lwq_quant_fp8_mse(c->w, LWQ_BF16, c->rows, c->cols, "w", &a, NULL, NULL);
}

static void report(const char *what, int64_t rows, int64_t cols, run_fn f, void *ctx, int reps)
{
    double cpu = 0, t = best_time(f, ctx, reps, &cpu);
    double bytes = (double)rows * (double)cols * 2.0;
    printf("%-22s %6lld x %-6lld %9.3f ms  %8.3f GB/s  (%.3f GB/s per CPU-second)\n", what, (long long)rows,
           (long long)cols, t * 1e3, bytes / t / 1e9, bytes / cpu / 1e9);
}

int main(int argc, char **argv)
{
    int64_t rows = argc > 2 ? atoll(argv[1]) : 4096, cols = argc > 2 ? atoll(argv[2]) : 4096;
    CHECK(rows > 0 && cols > 0 && cols % 16 == 0);
    int64_t n = rows * cols, nb = n / 16;
    bctx c = {.rows = rows, .cols = cols};
    c.w = malloc((size_t)n * 2);
    c.packed = malloc((size_t)n / 2);
    c.scale = malloc((size_t)nb);
    c.q = malloc((size_t)n);
    CHECK(c.w && c.packed && c.scale && c.q);
    for (int64_t i = 0; i < n; i++)
        c.w[i] = lwq_f32_to_bf16(rnd());
    printf("bench_quant: %d threads\n", lwq_parallel_threads());

    /* correctness first: every block of the fast paths against the header reference */
    CHECK(run_amax(&c) == 0);
    CHECK(run_max(&c) == 0);
    float ws2 = lwq_nvfp4_ws2(c.amax);
    CHECK(c.ws == ws2);
    for (int64_t b = 0; b < nb; b++) {
        float x[16], am = 0;
        uint8_t ref[8];
        for (int i = 0; i < 16; i++) {
            x[i] = lwq_bf16_to_f32(c.w[b * 16 + i]);
            am = fabsf(x[i]) > am ? fabsf(x[i]) : am;
        }
        uint8_t s = lwq_nvfp4_scale_max(am, ws2);
        lwq_nvfp4_quant_block_ref(x, s, ws2, ref);
        CHECK(c.scale[b] == s && memcmp(c.packed + b * 8, ref, 8) == 0);
    }
    CHECK(run_fp8(&c) == 0);
    for (int64_t i = 0; i < n; i++)
        CHECK(c.q[i] == lwq_fp8_quant_ref(lwq_bf16_to_f32(c.w[i]), c.amax / 448.0f));

    report("amax", rows, cols, run_amax, &c, 15);
    report("nvfp4 max", rows, cols, run_max, &c, 15);
    report("fp8 per-tensor", rows, cols, run_fp8, &c, 15);

    /* the searches are ~100x the work: time them on a slice of rows */
    bctx s = c;
    s.rows = rows / 16 > 0 ? rows / 16 : 1;
    CHECK(run_sweep(&s) == 0);
    for (int64_t b = 0; b < s.rows * cols / 16; b++) {
        float x[16];
        for (int i = 0; i < 16; i++)
            x[i] = lwq_bf16_to_f32(c.w[b * 16 + i]);
        CHECK(s.scale[b] == lwq_nvfp4_sweep_block_ref(x, ws2, NULL));
    }
    report("nvfp4 fp8_scale_sweep", s.rows, cols, run_sweep, &s, 3);
    s.h = calloc((size_t)cols * 16, sizeof(float));
    CHECK(s.h);
    for (int64_t i = 0; i < cols * 16; i++)
        s.h[i] = (i % 16 == (i / 16) % 16) ? 1.0f : 0.01f;
    bctx hs = s;
    hs.rows = s.rows / 4 > 0 ? s.rows / 4 : 1;
    report("nvfp4 local_hessian", hs.rows, cols, run_hsweep, &hs, 2);
    report("fp8 mse (39 cand.)", s.rows, cols, run_mse, &s, 2);
    s.bamax = malloc((size_t)(s.rows * cols / 16) * sizeof(float));
    CHECK(s.bamax);
    CHECK(run_bmse(&s) == 0);
    for (int64_t b = 0; b < s.rows * cols / 16; b += 97) { /* a sample, against the _ref loss */
        float x[16], am = 0, best_a = 0, bl = 0;
        for (int i = 0; i < 16; i++) {
            x[i] = lwq_bf16_to_f32(c.w[b * 16 + i]);
            am = fabsf(x[i]) > am ? fabsf(x[i]) : am;
        }
        for (int k = 0; k < LWQ_MSE_STEPS; k++) {
            float a = am * lwq_mse_multiplier(k);
            float l = lwq_nvfp4_block_sqerr_ref(x, lwq_nvfp4_block_div(lwq_nvfp4_scale_static(a, c.amax), ws2));
            if (k == 0 || l < bl)
                bl = l, best_a = a;
        }
        CHECK(s.bamax[b] == best_a);
    }
    report("nvfp4 block mse (39)", s.rows, cols, run_bmse, &s, 2);
    free(s.bamax);
    free(s.h);
    free(c.w), free(c.packed), free(c.scale), free(c.q);
    lwq_parallel_shutdown();
    return 0;
}
