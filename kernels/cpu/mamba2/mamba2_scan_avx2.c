/* kernels/cpu/mamba2/mamba2_scan_avx2.c — the Mamba2 scan of mamba2_scan.h for AVX2 CPUs: 8 head
 * channels per ymm, up to 4 ymm (32 channels) per pass over the state (4 independent acc chains);
 * k stays sequential, so the bits are the portable kernel's.  Compiled for AVX2 as a whole file;
 * called only after gemm_cpu.c's run-time check. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/mamba2/mamba2_scan.h"

#if defined(__clang__)
#include <immintrin.h>
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC target("avx2")
#include <immintrin.h>
#endif

/* channels [p0, p0 + 8 nv) of one token; `last`: the lanes of the last vector inside P (sign bits) */
static inline __attribute__((always_inline)) void pass(int nv, __m256i last, float *S, int64_t ld, int64_t N,
                                                       const float *x, const float *B, const float *Cm,
                                                       float dtv, float decay, float D, float *y)
{
    const __m256i all = _mm256_set1_epi32(-1);
    __m256 xv[4], xd[4], acc[4];
    const __m256 vdt = _mm256_set1_ps(dtv), vdec = _mm256_set1_ps(decay);
    for (int v = 0; v < nv; v++) {
        xv[v] = _mm256_maskload_ps(x + 8 * v, v == nv - 1 ? last : all);
        xd[v] = _mm256_mul_ps(xv[v], vdt);
        acc[v] = _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < N; k++, S += ld) {
        const __m256 b = _mm256_set1_ps(B[k]), c = _mm256_set1_ps(Cm[k]);
        for (int v = 0; v < nv; v++) {
            __m256 s = _mm256_add_ps(_mm256_mul_ps(_mm256_load_ps(S + 8 * v), vdec), _mm256_mul_ps(xd[v], b));
            _mm256_store_ps(S + 8 * v, s);
            acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(s, c));
        }
    }
    const __m256 vD = _mm256_set1_ps(D);
    for (int v = 0; v < nv; v++)
        _mm256_maskstore_ps(y + 8 * v, v == nv - 1 ? last : all, _mm256_add_ps(acc[v], _mm256_mul_ps(vD, xv[v])));
}

void lwq_mamba2_scan_avx2(const lwq_mamba2_scan_item *it)
{
    const int64_t P = it->P, N = it->N, ld = lwq_mamba2_scan_ld(P);
    memset(it->S, 0, (size_t)(N * ld) * sizeof(float));
    for (int64_t t = 0; t < it->T; t++) {
        float *y = it->y + t * it->ldy;
        if (!it->valid[t]) {
            memset(y, 0, (size_t)P * sizeof(float));
            continue;
        }
        const float *xr = it->x + t * it->ldx, *B = it->B + t * it->ldx, *Cm = it->C + t * it->ldx;
        const float dtv = it->dt[t * it->ldd], decay = expf(it->A * dtv);
        for (int64_t p0 = 0; p0 < P; p0 += 32) {
            const int64_t rem = P - p0;
            const int nv = rem >= 32 ? 4 : (int)((rem + 7) / 8);
            const int tail = (int)(rem - 8 * (nv - 1)); /* 1..8 lanes in the last vector */
            const __m256i last = _mm256_cmpgt_epi32(_mm256_set1_epi32(tail), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            float *Sp = it->S + p0;
            switch (nv) {
            case 4: pass(4, last, Sp, ld, N, xr + p0, B, Cm, dtv, decay, it->D, y + p0); break;
            case 3: pass(3, last, Sp, ld, N, xr + p0, B, Cm, dtv, decay, it->D, y + p0); break;
            case 2: pass(2, last, Sp, ld, N, xr + p0, B, Cm, dtv, decay, it->D, y + p0); break;
            default: pass(1, last, Sp, ld, N, xr + p0, B, Cm, dtv, decay, it->D, y + p0); break;
            }
        }
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
