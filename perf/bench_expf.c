/* perf/bench_expf.c — lwq's expf versions (kernels/cpu/exp/exp.h) against the C library's:
 * correctness first, then time per element.
 *
 * usage: bench_expf [--exhaustive] [VERSION...]     (VERSION: avx512 avx2 scalar; default: every
 *                                                    one this CPU runs)
 *
 * Without --exhaustive: each version's three array forms against libm on the module's own check
 * sample (lwq_exp_kernels_agree), then ns per element of exp(x - m) over softmax-like rows
 * (x - m in [-30, 0]) and of SiLU over [-8, 8], each version and libm, one thread.
 * With --exhaustive: every one of the 2^32 float bit patterns x through each version, checked
 * bit for bit against libm: exp(x - 0) = expf(x) (x - 0 is x bit for bit, a signalling NaN quieted
 * as expf's own x + x quiets it), x / (1 + expf(-x)) and 1 / (1 + expf(-x)).  Minutes per version
 * on one core (run it with nice); prints the mismatch count per form and the first few. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/exp/exp.h"

#define CHUNK 65536

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* mismatches of k over all 2^32 inputs, per form (0 exp, 1 silu, 2 sigmoid) */
static int exhaustive(const lwq_exp_kernels *k)
{
    static float x[CHUNK], got[CHUNK];
    uint64_t bad[3] = {0, 0, 0};
    int shown = 0;
    double t0 = now();
    for (uint64_t base = 0; base < (1ull << 32); base += CHUNK) {
        for (uint32_t i = 0; i < CHUNK; i++) {
            uint32_t u = (uint32_t)(base + i);
            memcpy(&x[i], &u, 4);
        }
        for (int f = 0; f < 3; f++) {
            if (f == 0)
                k->exp_sub(x, 0.0f, got, CHUNK);
            else if (f == 1)
                k->silu(x, got, CHUNK);
            else
                k->sigmoid(x, got, CHUNK);
            for (uint32_t i = 0; i < CHUNK; i++) {
                float want = f == 0   ? expf(x[i])
                             : f == 1 ? x[i] / (1.0f + expf(-x[i]))
                                      : 1.0f / (1.0f + expf(-x[i]));
                if (bits(got[i]) != bits(want)) {
                    bad[f]++;
                    if (shown++ < 10)
                        printf("  %s form %d: x %a (0x%08x): got %a (0x%08x), libm %a (0x%08x)\n",
                               k->name, f, (double)x[i], bits(x[i]), (double)got[i],
                               bits(got[i]), (double)want, bits(want));
                }
            }
        }
    }
    printf("%-7s exhaustive (2^32 inputs each): exp %llu, silu %llu, sigmoid %llu mismatches "
           "(%.0f s CPU)\n",
           k->name, (unsigned long long)bad[0], (unsigned long long)bad[1],
           (unsigned long long)bad[2], now() - t0);
    return bad[0] || bad[1] || bad[2];
}

static double time_form(const lwq_exp_kernels *k, int f, const float *x, float *y, int n, int reps)
{
    double best = 1e30;
    for (int t = 0; t < 5; t++) {
        double t0 = now();
        for (int r = 0; r < reps; r++) {
            if (f == 0)
                k->exp_sub(x, 0.5f, y, n);
            else
                k->silu(x, y, n);
            __asm__ volatile("" ::"r"(y) : "memory");
        }
        double dt = (now() - t0) / ((double)n * reps) * 1e9;
        best = dt < best ? dt : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    int ex = 0, nv = 0;
    const char *names[8];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--exhaustive"))
            ex = 1;
        else if (nv < 8)
            names[nv++] = argv[i];
    }
    if (nv == 0) {
        static const char *all[] = {"avx512", "avx2", "scalar"};
        for (int i = 0; i < 3; i++)
            if (lwq_exp_kernels_named(all[i]))
                names[nv++] = all[i];
    }
    printf("automatic choice: %s\n", lwq_exp_kernels_get()->name);
    int fail = 0;
    for (int v = 0; v < nv; v++) {
        const lwq_exp_kernels *k = lwq_exp_kernels_named(names[v]);
        if (!k) {
            printf("%-7s not run by this CPU (or unknown)\n", names[v]);
            continue;
        }
        int ok = lwq_exp_kernels_agree(k);
        printf("%-7s check sample: %s\n", k->name, ok ? "libm's bits" : "DIFFERS from libm");
        fail |= !ok;
        if (ex)
            fail |= exhaustive(k);
    }
    if (ex)
        return fail;
    enum { N = 4096, REPS = 2000 };
    static float xs[N], xg[N], y[N];
    uint32_t s = 1;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        float u = (float)(s >> 8) * 0x1p-24f;
        xs[i] = 0.5f - 30.0f * u; /* x - 0.5 in [-30, 0] */
        xg[i] = -8.0f + 16.0f * u;
    }
    const lwq_exp_kernels *libm = lwq_exp_kernels_named("libm");
    double l0 = time_form(libm, 0, xs, y, N, REPS / 4), l1 = time_form(libm, 1, xg, y, N, REPS / 4);
    printf("%-7s exp(x - m) %6.3f ns/elem   silu %6.3f ns/elem\n", "libm", l0, l1);
    for (int v = 0; v < nv; v++) {
        const lwq_exp_kernels *k = lwq_exp_kernels_named(names[v]);
        if (!k)
            continue;
        int reps = strcmp(k->name, "scalar") ? REPS : REPS / 8;
        double t0 = time_form(k, 0, xs, y, N, reps), t1 = time_form(k, 1, xg, y, N, reps);
        printf("%-7s exp(x - m) %6.3f ns/elem (%.1fx libm)   silu %6.3f ns/elem (%.1fx libm)\n",
               k->name, t0, l0 / t0, t1, l1 / t1);
    }
    return fail;
}
