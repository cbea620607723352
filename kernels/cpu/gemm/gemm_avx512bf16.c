/* kernels/cpu/gemm/gemm_avx512bf16.c — the GEMM panel for BF16 activations x BF16 weights on CPUs with
 * AVX512-BF16 (vdpbf16ps: Cooper Lake, Sapphire Rapids and later Xeons, AMD Zen 4 and later).
 *
 * The arithmetic keeps gemm_isa.h's shape: k in 32-blocks (the last one zero-padded on both
 * sides), 16 lane sums from +0, lane l of block b taking k = 32b + 2l and 32b + 2l + 1, the same
 * fixed tree over the lanes.  What changes is the step inside a lane: one vdpbf16ps adds both
 * products of the pair (each BF16 x BF16 product is exact in f32) with the instruction's own
 * rounding, denormal inputs read as zero and denormal results flushed, instead of two fused
 * multiply-adds.  So a row's result still depends on that row and the weight row alone (not on
 * the batch, the other rows, the thread count) but its bits are this instruction's, not the FMA
 * path's: the CPUs that run this panel agree with each other only as far as their vdpbf16ps
 * rounds alike (README, "Which CPUs give which bytes").
 *
 * x arrives packed as raw BF16 rows of lwq_gemm_kp(k) elements (a pair is adjacent in memory, as
 * the instruction wants it); weights are read in place, 64 bytes per 32-block.  A register tile
 * is 6 rows x 4 outputs: 24 accumulators, 4 weight vectors, 1 x vector.  Compiled for AVX512-BF16
 * as a whole file; called only after gemm_cpu.c's run-time check. */
#include <stdint.h>

#include "kernels/cpu/gemm/gemm_isa.h"

#if defined(__clang__)
#include <immintrin.h>
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512bf16"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512bf16")
#include <immintrin.h>
#endif

#define MR 6
#define MC 4
#define KC 32 /* 32-blocks per chunk: 6 rows' x (12 KiB) stay in L1 across the panel's outputs */

_Static_assert(((LWQ_GEMM_MAXC + MC - 1) / MC) * MR * MC * 16 <= LWQ_GEMM_ACC_FLOATS,
               "accumulator buffer too small for this tile shape");

static inline float v_sum(__m512 a)
{
    __m256 lo = _mm512_castps512_ps256(a);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    __m256 t = _mm256_add_ps(lo, hi);                                              /* i + (i+8) */
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)); /* + (i+4) */
    __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));                                  /* + (i+2) */
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));                        /* 0 + 1 */
}

/* R rows x C outputs over nblk 32-blocks; x: (R, ldx) BF16, w: C rows ldw bytes apart. */
static inline __attribute__((always_inline)) void
tile(const int R, const int C, const uint16_t *x, int64_t ldx, const char *w, int64_t ldw,
     int64_t nblk, int first, int last, float *acc, float *y, int64_t ldy)
{
    __m512 a[MR][MC];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            a[r][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + (r * MC + c) * 16);
    for (int64_t b = 0; b < nblk; b++) {
        __m512bh wv[MC];
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            wv[c] = (__m512bh)_mm512_loadu_si512((const void *)(w + c * ldw + b * 64));
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512bh xv = (__m512bh)_mm512_loadu_si512((const void *)(x + r * ldx + 32 * b));
            __asm__("" : "+v"(xv));
#pragma GCC unroll 8
            for (int c = 0; c < C; c++)
                a[r][c] = _mm512_dpbf16_ps(a[r][c], xv, wv[c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            if (last)
                y[r * ldy + c] = v_sum(a[r][c]);
            else
                _mm512_storeu_ps(acc + (r * MC + c) * 16, a[r][c]);
        }
}

static void run(int R, int C, const uint16_t *x, int64_t ldx, const char *w, int64_t ldw,
                int64_t nblk, int first, int last, float *acc, float *y, int64_t ldy)
{
    switch (R * 8 + C) {
#define TC(R_, C_)                                                                                 \
    case (R_) * 8 + (C_):                                                                          \
        tile(R_, C_, x, ldx, w, ldw, nblk, first, last, acc, y, ldy);                              \
        break;
#define TR(R_) TC(R_, 1) TC(R_, 2) TC(R_, 3) TC(R_, 4)
        TR(1) TR(2) TR(3) TR(4) TR(5) TR(6)
#undef TR
#undef TC
    default:
        break;
    }
}

void lwq_gemm_panel_avx512bf16(const lwq_gemm_panel *p, float *accbuf)
{
    const int64_t ntot = p->nfull + (p->wt != NULL);
    for (int64_t r0 = 0; r0 < p->nr; r0 += MR) {
        const int R = (int)(p->nr - r0 < MR ? p->nr - r0 : MR);
        const uint16_t *x = p->xh + r0 * p->ldx;
        float *y = p->y + r0 * p->ldy;
        int64_t b0 = 0;
        do {
            int64_t b1 = ntot - b0 < KC ? ntot : b0 + KC;
            int first = b0 == 0, last = b1 == ntot;
            for (int64_t c0 = 0; c0 < p->nc; c0 += MC) {
                const int C = (int)(p->nc - c0 < MC ? p->nc - c0 : MC);
                float *acc = accbuf + (c0 / MC) * (MR * MC * 16);
                int64_t m1 = b1 < p->nfull ? b1 : p->nfull;
                int tail = b1 > p->nfull;
                if (m1 > b0 || !tail)
                    run(R, C, x + 32 * b0, p->ldx, p->w + c0 * p->ldw + b0 * 64, p->ldw,
                        m1 > b0 ? m1 - b0 : 0, first, last && !tail, acc, y + c0, p->ldy);
                if (tail)
                    run(R, C, x + 32 * p->nfull, p->ldx, p->wt + c0 * 64, 64, 1, first && m1 <= b0,
                        last, acc, y + c0, p->ldy);
            }
            b0 = b1;
        } while (b0 < ntot);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
