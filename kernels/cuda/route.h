/* kernels/cuda/route.h — the MoE router's per-row work (kernels/backend.h lwq_backend_moe_route),
 * shared by the CUDA kernel (backend_cuda.cu k_route) and the host test that checks it against
 * the CPU backend (tests/kernels/cuda/test_cuda_route.c).  LWQ_HD: compiled for the device by nvcc and
 * as plain C for the test.
 *
 * Picks follow the CPU's argmax_free order (kernels/cpu/backend_cpu.c): values that are not NaN
 * by value descending, ties to the lower index; once those are used up, NaN values by index
 * ascending.  So a row whose logits are all NaN (or, in the softmax modes, that has any NaN:
 * the sum is NaN) routes to experts 0..k-1 with NaN weights, as on the CPU, instead of index -1. */
#ifndef LWQ_KERNELS_CUDA_ROUTE_H
#define LWQ_KERNELS_CUDA_ROUTE_H

#include <math.h>
#include <stdint.h>

#include "core/data/dtype.h"
#include "kernels/backend.h"

/* The next pick after (pv, pi) in that order, or -1 when every expert is taken; *v its value. */
LWQ_HD int lwq_route_next(const void *lg, lwq_dtype dt, int64_t base, int E, int soft, float mx, float sum,
                          float pv, int pi, float *v)
{
    int best = -1;
    float bv = 0.0f;
    const int pnan = pi >= 0 && pv != pv; /* the previous pick was already a NaN */
    if (!pnan)
        for (int i = 0; i < E; i++) {
            float x = lwq_load_f(lg, dt, (size_t)(base + i));
            if (soft)
                x = expf(x - mx) / sum;
            if (x != x || (pi >= 0 && !(x < pv || (x == pv && i > pi))))
                continue;
            if (best < 0 || x > bv) {
                best = i;
                bv = x;
            }
        }
    if (best < 0) /* no value left that is not NaN: the lowest NaN index after the last one taken */
        for (int i = pnan ? pi + 1 : 0; i < E; i++) {
            float x = lwq_load_f(lg, dt, (size_t)(base + i));
            if (soft)
                x = expf(x - mx) / sum;
            if (x != x) {
                best = i;
                bv = x;
                break;
            }
        }
    *v = bv;
    return best;
}

/* Row `r` of logits lg (E experts of dtype dt) -> idx (k), w (k) as lwq_backend_moe_route. */
LWQ_HD void lwq_route_row(const void *lg, lwq_dtype dt, int64_t r, int E, int k, int mode, lwq_dtype wdt,
                          int32_t *idx, float *w)
{
    const int64_t base = r * E;
    float mx = -INFINITY, sum = 0.0f;
    const int soft = mode != LWQ_ROUTE_TOPK_SOFTMAX;
    if (soft) {
        for (int i = 0; i < E; i++) {
            float v = lwq_load_f(lg, dt, (size_t)(base + i));
            mx = v > mx ? v : mx;
        }
        for (int i = 0; i < E; i++)
            sum += expf(lwq_load_f(lg, dt, (size_t)(base + i)) - mx);
    }
    float pv = INFINITY;
    int pi = -1;
    for (int s = 0; s < k; s++) {
        float bv;
        int best = lwq_route_next(lg, dt, base, E, soft, mx, sum, pv, pi, &bv);
        idx[r * k + s] = best;
        w[r * k + s] = bv;
        pv = bv;
        pi = best;
    }
    float *wr = w + r * k;
    if (mode == LWQ_ROUTE_TOPK_SOFTMAX) {
        float m0 = wr[0], z = 0.0f;
        for (int s = 0; s < k; s++) {
            wr[s] = expf(wr[s] - m0);
            z += wr[s];
        }
        for (int s = 0; s < k; s++)
            wr[s] /= z;
    } else if (mode == LWQ_ROUTE_SOFTMAX_TOPK_NORM) {
        float z = 0.0f;
        for (int s = 0; s < k; s++)
            z += wr[s];
        for (int s = 0; s < k; s++)
            wr[s] /= z;
    }
    for (int s = 0; s < k; s++)
        wr[s] = lwq_round_to(wr[s], wdt);
}

#endif
