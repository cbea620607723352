/* kernels/cpu/mamba2/mamba2_scan_avx512.c — the Mamba2 scan of mamba2_scan.h for AVX-512F CPUs:
 * 16 head channels per zmm, up to 4 zmm (64 channels) per pass over the state so that 4 independent
 * acc chains hide the add latency; k stays sequential, so the bits are the portable kernel's.
 * Compiled for AVX-512 as a whole file; called only after gemm_cpu.c's run-time check. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/mamba2/mamba2_scan.h"

#if defined(__clang__)
#include <immintrin.h>
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC target("avx512f")
#include <immintrin.h>
#endif

/* channels [p0, p0 + 16 nv) of one token; `last`: the lanes of the last vector inside P */
static inline __attribute__((always_inline)) void pass(int nv, __mmask16 last, float *S, int64_t ld,
                                                       int64_t N, const float *x, const float *B,
                                                       const float *Cm, float dtv, float decay, float D,
                                                       float *y)
{
    __m512 xv[4], xd[4], acc[4];
    const __m512 vdt = _mm512_set1_ps(dtv), vdec = _mm512_set1_ps(decay);
    for (int v = 0; v < nv; v++) {
        xv[v] = _mm512_maskz_loadu_ps(v == nv - 1 ? last : (__mmask16)0xffff, x + 16 * v);
        xd[v] = _mm512_mul_ps(xv[v], vdt);
        acc[v] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < N; k++, S += ld) {
        const __m512 b = _mm512_set1_ps(B[k]), c = _mm512_set1_ps(Cm[k]);
        for (int v = 0; v < nv; v++) {
            __m512 s = _mm512_add_ps(_mm512_mul_ps(_mm512_load_ps(S + 16 * v), vdec), _mm512_mul_ps(xd[v], b));
            _mm512_store_ps(S + 16 * v, s);
            acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(s, c));
        }
    }
    const __m512 vD = _mm512_set1_ps(D);
    for (int v = 0; v < nv; v++)
        _mm512_mask_storeu_ps(y + 16 * v, v == nv - 1 ? last : (__mmask16)0xffff,
                              _mm512_add_ps(acc[v], _mm512_mul_ps(vD, xv[v])));
}

void lwq_mamba2_scan_avx512(const lwq_mamba2_scan_item *it)
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
        for (int64_t p0 = 0; p0 < P; p0 += 64) {
            const int64_t rem = P - p0;
            const int nv = rem >= 64 ? 4 : (int)((rem + 15) / 16);
            const int64_t tail = rem - 16 * (nv - 1); /* 1..16 lanes in the last vector */
            const __mmask16 last = tail >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << tail) - 1u);
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
