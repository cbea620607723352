/* perf/bench_sweep.c — the NVFP4 block searches of kernels/quant.h (fp8_scale_sweep, the
 * local_hessian sweep, the 39-step mse) on a weight shaped and distributed like a real one.
 *
 *   bench_sweep [rows cols [reps]]    (default 768 x 2048: one routed expert's gate/up of the 4 GB
 *                                      model of perf/bench_e2e.sh; 5 reps, best kept)
 *
 * The weight is BF16, normal (Box-Muller, fixed seed) with one element in 4096 scaled by 8 (the
 * outliers real checkpoints have), so the blocks' amaxes spread over a few octaves below the
 * tensor's as in a trained model; the Hessian is X^T X of 64 normal tokens per input block.  For
 * each search it prints the best wall time, the CPU time of that run, GB/s of BF16 input and an
 * FNV-1a hash of the output bytes: two builds that print the same hashes wrote the same bytes
 * (perf/bench_sweep_ab.sh runs two builds alternately and compares).  BENCH_DIST=ih: the weights
 * of `lwq mkmodel` instead (bounded Irwin-Hall, no outliers: short candidate ranges, where a
 * block's fixed costs weigh most; the 4 GB model of perf/bench_e2e.sh is made of these). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/quant.h"
#include "layout/format/quant_formats.h"

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double urand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) * 0x1p-53;
}
static double nrand(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

static uint64_t fnv(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

typedef struct bench {
    uint16_t *w;
    int64_t rows, cols;
    float amax, *h, *bamax;
    uint8_t *scale;
} bench;

enum { SWEEP, HSWEEP, MSE };
static const char *const names[] = {"nvfp4 fp8_scale_sweep", "nvfp4 local_hessian", "nvfp4 mse (39)"};

static int run(bench *b, int which)
{
    if (which == MSE)
        return lwq_quant_nvfp4_mse(b->w, LWQ_BF16, b->rows, b->cols, b->amax, "w", b->bamax, NULL);
    return lwq_quant_nvfp4_sweep(b->w, LWQ_BF16, b->rows, b->cols, b->amax, which == HSWEEP ? b->h : NULL, "w",
                                 b->bamax, b->scale, NULL);
}

int main(int argc, char **argv)
{
    int64_t rows = argc > 2 ? atoll(argv[1]) : 768, cols = argc > 2 ? atoll(argv[2]) : 2048;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    if (rows <= 0 || cols <= 0 || cols % 16 || rows > (1 << 20) || cols > (1 << 20) || reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: bench_sweep [rows cols [reps]]  (cols %% 16 == 0, each <= 2^20, reps 1..1000)\n");
        return 2;
    }
    int64_t n = rows * cols, nb = n / 16;
    bench b = {.rows = rows, .cols = cols};
    b.w = malloc((size_t)n * 2);
    b.h = malloc((size_t)(cols / 16) * 256 * sizeof *b.h);
    b.bamax = malloc((size_t)nb * sizeof *b.bamax);
    b.scale = malloc((size_t)nb);
    if (!b.w || !b.h || !b.bamax || !b.scale) {
        fprintf(stderr, "bench_sweep: out of memory\n");
        return 1;
    }
    const char *dist = getenv("BENCH_DIST");
    const int ih = dist && !strcmp(dist, "ih");
    for (int64_t i = 0; i < n; i++) {
        /* ih: lwq mkmodel's weights (Irwin-Hall of four uniforms at unit variance, times 0.02):
         * bounded, so most blocks sit near the tensor's amax and each block tries few candidates */
        float v = ih ? (float)((urand() + urand() + urand() + urand() - 2.0) * 1.7320508075688772 * 0.02)
                     : (float)(nrand() * 0.02 * (urand() < 1.0 / 4096 ? 8.0 : 1.0));
        b.w[i] = lwq_f32_to_bf16(v);
    }
    for (int64_t k = 0; k < cols / 16; k++) {
        double x[64][16];
        for (int t = 0; t < 64; t++)
            for (int i = 0; i < 16; i++)
                x[t][i] = nrand();
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                double s = 0;
                for (int t = 0; t < 64; t++)
                    s += x[t][i] * x[t][j];
                b.h[k * 256 + i * 16 + j] = (float)(s / 64);
            }
    }
    if (lwq_quant_amax(b.w, LWQ_BF16, n, "w", &b.amax, NULL) < 0)
        return 1;
    printf("bench_sweep: %lld x %lld BF16 (%.1f MB), amax %g\n", (long long)rows, (long long)cols, (double)n * 2e-6,
           (double)b.amax);
    for (int which = SWEEP; which <= MSE; which++) {
        double best = 1e30, bcpu = 0;
        uint64_t hash = 0;
        for (int r = 0; r < reps; r++) {
            double c = clock_s(CLOCK_PROCESS_CPUTIME_ID), t = clock_s(CLOCK_MONOTONIC);
            if (run(&b, which) < 0) {
                fprintf(stderr, "bench_sweep: %s failed\n", names[which]);
                return 1;
            }
            t = clock_s(CLOCK_MONOTONIC) - t;
            c = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c;
            uint64_t hh = fnv(b.bamax, (size_t)nb * sizeof *b.bamax) ^ (which == MSE ? 0 : fnv(b.scale, (size_t)nb));
            if (r > 0 && hh != hash) {
                fprintf(stderr, "bench_sweep: %s gave other bytes on run %d\n", names[which], r);
                return 1;
            }
            hash = hh;
            if (t < best)
                best = t, bcpu = c;
        }
        printf("%-22s %9.2f ms  cpu %9.2f ms  %7.4f GB/s  (%.4f GB/s per CPU-second)  hash %016llx\n", names[which],
               best * 1e3, bcpu * 1e3, (double)n * 2 / best * 1e-9, (double)n * 2 / bcpu * 1e-9,
               (unsigned long long)hash);
    }
    free(b.w);
    free(b.h);
    free(b.bamax);
    free(b.scale);
    return 0;
}
