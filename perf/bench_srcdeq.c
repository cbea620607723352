/* perf/bench_srcdeq.c — CPU throughput of the source dequantizers (layout/checkpoint/srcfmt.h): FP8
 * 128x128 blocks and MXFP4 groups to BF16, on one DeepSeek-V3-sized expert weight.  The output
 * is first checked element by element against a direct formula, then timed (best of N runs).
 * Throughput is bytes of BF16 written per second (what the engine then reads).
 * Usage: bench_srcdeq [rows cols [threads]]   (default 2048 x 7168, all threads). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/parallel/parallel.h"
#include "layout/format/quant_formats.h"
#include "layout/checkpoint/srcfmt.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

int main(int argc, char **argv)
{
    int64_t rows = argc > 2 ? atoll(argv[1]) : 2048, cols = argc > 2 ? atoll(argv[2]) : 7168;
    if (argc > 3)
        lwq_parallel_set_threads(atoi(argv[3]));
    if (rows <= 0 || cols <= 0 || cols % 32) {
        fprintf(stderr, "bench_srcdeq: rows, cols > 0 and cols %% 32 == 0\n");
        return 2;
    }
    const int64_t n = rows * cols, sr = (rows + 127) / 128, sc = (cols + 127) / 128;
    uint8_t *w = malloc((size_t)n), *blk = malloc((size_t)n / 2), *mxs = malloc((size_t)n / 32);
    float *s = malloc((size_t)(sr * sc) * sizeof(float));
    uint16_t *out = malloc((size_t)n * 2);
    if (!w || !blk || !mxs || !s || !out)
        return 2;
    for (int64_t i = 0; i < n; i++) {
        w[i] = (uint8_t)rnd();
        if ((w[i] & 0x7f) == 0x7f)
            w[i] ^= 1;
    }
    for (int64_t i = 0; i < n / 2; i++)
        blk[i] = (uint8_t)rnd();
    for (int64_t i = 0; i < n / 32; i++)
        mxs[i] = (uint8_t)(100 + rnd() % 40);
    for (int64_t i = 0; i < sr * sc; i++)
        s[i] = ldexpf(1.0f + (float)(rnd() % 100) / 100.0f, -12);
    lwq_error e = {0};
    double best[2] = {1e9, 1e9};
    for (int k = 0; k < 2; k++) {
        for (int run = 0; run < 5; run++) {
            double t0 = now();
            int rc = k == 0 ? lwq_srcfmt_fp8_dequant("w", w, rows, cols, s, LWQ_F32, sr, sc, 128,
                                                     128, LWQ_BF16, out, &e)
                            : lwq_srcfmt_mxfp4_dequant("w", blk, mxs, rows, cols / 32, LWQ_BF16,
                                                       out, &e);
            double dt = now() - t0;
            if (rc != 0) {
                fprintf(stderr, "bench_srcdeq: %s\n", e.msg);
                return 2;
            }
            best[k] = dt < best[k] ? dt : best[k];
        }
        for (int64_t i = 0; i < n; i += 997) { /* spot check against the formula */
            int64_t r = i / cols, c = i % cols;
            float v = k == 0 ? lwq_e4m3_to_f32(w[i]) * s[(r / 128) * sc + c / 128]
                             : ldexpf(lwq_e2m1_to_f32(i % 2 ? blk[i / 2] >> 4 : blk[i / 2] & 15),
                                      (int)mxs[i / 32] - 127);
            if (out[i] != lwq_f32_to_bf16(v)) {
                fprintf(stderr, "bench_srcdeq: %s element %lld wrong\n", k ? "mxfp4" : "fp8",
                        (long long)i);
                return 1;
            }
        }
    }
    printf("bench_srcdeq: %lld x %lld, %d threads\n", (long long)rows, (long long)cols,
           lwq_parallel_threads());
    printf("  fp8 128x128 -> bf16: %.3f ms, %.2f GB/s of bf16 out\n", best[0] * 1e3,
           (double)n * 2 / best[0] / 1e9);
    printf("  mxfp4       -> bf16: %.3f ms, %.2f GB/s of bf16 out\n", best[1] * 1e3,
           (double)n * 2 / best[1] / 1e9);
    free(w);
    free(blk);
    free(mxs);
    free(s);
    free(out);
    return 0;
}
