/* perf/bench_attn_cuda.c — the CUDA attention kernels, warp (the default) vs tiled
 * (LWQ_CUDA_ATTENTION=tiled), on the attention shapes of perf/bench_forward.c's qwen3_moe layer
 * (32 heads x 128, 4 kv heads, BF16) at calibration lengths 512 and 2048, and 64 heads at 2048.
 * Before timing, the two outputs are compared byte for byte (they compute the same function,
 * kernels/cuda/attention_cuda.h); each time is the median of REPS launches timed to a
 * synchronize, after one warm-up.  Prints one line per shape:
 *   attention B T H KV hd: warp X ms, tiled Y ms, warp/tiled Z, identical yes|NO
 * usage: bench_attn_cuda [REPS]   (default 5; exits 0 with a message when there is no GPU) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int make(lwq_backend *be, const char *mode, lwq_error *e)
{
    setenv("LWQ_CUDA_ATTENTION", mode, 1);
    int rc = lwq_backend_cuda_create(be, 0, e);
    unsetenv("LWQ_CUDA_ATTENTION");
    return rc;
}

/* Median ms of reps launches of attention on be. */
static double time_it(const lwq_backend *be, const lwq_attn_args *a, int reps, lwq_error *e)
{
    double t[64];
    if (lwq_backend_attention(be, a, e) < 0 || lwq_backend_synchronize(be, e) < 0)
        return -1;
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        if (lwq_backend_attention(be, a, e) < 0 || lwq_backend_synchronize(be, e) < 0)
            return -1;
        t[i] = (now() - t0) * 1e3;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmpd);
    return t[reps / 2];
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1 || reps > 64) {
        fprintf(stderr, "usage: bench_attn_cuda [REPS 1..64]\n");
        return 1;
    }
    lwq_error e = {0};
    if (lwq_backend_cuda_probe(&e) <= 0) {
        printf("bench_attn_cuda: nothing to measure: %s\n", e.msg);
        return 0;
    }
    lwq_backend warp, tiled;
    if (make(&warp, "warp", &e) < 0 || make(&tiled, "tiled", &e) < 0) {
        fprintf(stderr, "bench_attn_cuda: %s\n", e.msg);
        return 1;
    }
    const struct { int64_t B, T; int H, KV; int64_t hd; } shapes[] = {
        {1, 512, 32, 4, 128}, {4, 512, 32, 4, 128}, {1, 2048, 32, 4, 128}, {1, 2048, 64, 8, 128}};
    int bad = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t B = shapes[s].B, T = shapes[s].T, hd = shapes[s].hd;
        int H = shapes[s].H, KV = shapes[s].KV;
        int64_t nq = B * T * H * hd, nk = B * T * KV * hd;
        uint16_t *hq = malloc((size_t)nq * 2), *hk = malloc((size_t)nk * 2);
        uint8_t *hv = malloc((size_t)(B * T)), *o1 = malloc((size_t)nq * 2), *o2 = malloc((size_t)nq * 2);
        uint64_t x = 0x9e3779b97f4a7c15ull + s;
        for (int64_t i = 0; i < nq; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            hq[i] = lwq_f32_to_bf16((float)((x >> 40) & 0xffff) / 32768.0f - 1.0f);
        }
        for (int64_t i = 0; i < nk; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            hk[i] = lwq_f32_to_bf16((float)((x >> 40) & 0xffff) / 32768.0f - 1.0f);
        }
        for (int64_t i = 0; i < B * T; i++)
            hv[i] = (i % T) >= (i / T) * 37; /* sequence b left-padded by 37 b tokens */
        int64_t sq[2] = {B * T, H * hd}, sk[2] = {B * T, KV * hd}, sv[1] = {B * T};
        lwq_tensor q, k, v, o, val;
        if (lwq_backend_tensor_alloc(&warp, LWQ_BF16, 2, sq, &q, &e) < 0 ||
            lwq_backend_tensor_alloc(&warp, LWQ_BF16, 2, sk, &k, &e) < 0 ||
            lwq_backend_tensor_alloc(&warp, LWQ_BF16, 2, sk, &v, &e) < 0 ||
            lwq_backend_tensor_alloc(&warp, LWQ_BF16, 2, sq, &o, &e) < 0 ||
            lwq_backend_tensor_alloc(&warp, LWQ_U8, 1, sv, &val, &e) < 0 ||
            lwq_backend_upload(&warp, q.data, hq, (size_t)nq * 2, &e) < 0 ||
            lwq_backend_upload(&warp, k.data, hk, (size_t)nk * 2, &e) < 0 ||
            lwq_backend_upload(&warp, v.data, hk, (size_t)nk * 2, &e) < 0 ||
            lwq_backend_upload(&warp, val.data, hv, (size_t)(B * T), &e) < 0) {
            fprintf(stderr, "bench_attn_cuda: %s\n", e.msg);
            return 1;
        }
        lwq_attn_args a = {&q, &k, &v, &o, &val, B, T, H, KV, hd, 0.08838834764f};
        double tw = time_it(&warp, &a, reps, &e);
        int ok = tw >= 0 && lwq_backend_download(&warp, o1, o.data, (size_t)nq * 2, &e) == 0;
        double tt = ok ? time_it(&tiled, &a, reps, &e) : -1;
        ok = ok && tt >= 0 && lwq_backend_download(&tiled, o2, o.data, (size_t)nq * 2, &e) == 0;
        if (!ok) {
            fprintf(stderr, "bench_attn_cuda: %s\n", e.msg);
            return 1;
        }
        int same = memcmp(o1, o2, (size_t)nq * 2) == 0;
        bad |= !same;
        printf("attention B %lld T %lld H %d KV %d hd %lld: warp %.3f ms, tiled %.3f ms, warp/tiled %.2f, identical %s\n",
               (long long)B, (long long)T, H, KV, (long long)hd, tw, tt, tw / tt, same ? "yes" : "NO");
        fflush(stdout);
        lwq_backend_tensor_free(&warp, &q), lwq_backend_tensor_free(&warp, &k), lwq_backend_tensor_free(&warp, &v);
        lwq_backend_tensor_free(&warp, &o), lwq_backend_tensor_free(&warp, &val);
        free(hq), free(hk), free(hv), free(o1), free(o2);
    }
    lwq_backend_destroy(&tiled);
    lwq_backend_destroy(&warp);
    return bad;
}
