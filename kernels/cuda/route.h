/* kernels/cuda/route.h — the MoE router's per-row work (kernels/backend.h lwq_backend_moe_route),
 * shared by the CUDA kernel (backend_cuda.cu k_route) and the host test that checks it against
 * the CPU backend (tests/kernels/cuda/test_cuda_route.c).  LWQ_HD: compiled for the device by nvcc and
 * as plain C for the test.
 *
 * Picks follow the CPU backend (kernels/cpu/backend_cpu.c route_rows): torch.topk's CPU order
 * (kernels/topk.h), sorted, over the softmax probabilities (or the logits in TOPK_SOFTMAX mode),
 * NaN counting above every number as in torch.  So a row whose logits are all NaN (or, in the
 * softmax modes, that has any NaN: the sum is NaN) routes to k distinct experts with NaN
 * weights, as on the CPU, never to index -1. */
#ifndef LWQ_KERNELS_CUDA_ROUTE_H
#define LWQ_KERNELS_CUDA_ROUTE_H

#include <math.h>
#include <stdint.h>

#include "core/data/dtype.h"
#include "kernels/backend.h"
#include "kernels/topk.h"

/* Row `r` of logits lg (E experts of dtype dt) -> idx (k), w (k) as lwq_backend_moe_route;
 * p (E floats) and q (E int32): this row's scratch. */
LWQ_HD void lwq_route_row(const void *lg, lwq_dtype dt, int64_t r, int E, int k, int mode, lwq_dtype wdt,
                          int32_t *idx, float *w, float *p, int32_t *q)
{
    const int64_t base = r * E;
    float mx = -INFINITY, sum = 0.0f;
    const int soft = mode != LWQ_ROUTE_TOPK_SOFTMAX;
    for (int i = 0; i < E; i++)
        p[i] = lwq_load_f(lg, dt, (size_t)(base + i));
    if (soft) {
        for (int i = 0; i < E; i++)
            mx = p[i] > mx ? p[i] : mx;
        for (int i = 0; i < E; i++) {
            p[i] = expf(p[i] - mx);
            sum += p[i];
        }
        for (int i = 0; i < E; i++)
            p[i] /= sum;
    }
    lwq_topk_torch(p, E, k, 1, q, idx + r * k);
    for (int s = 0; s < k; s++)
        w[r * k + s] = p[idx[r * k + s]];
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
