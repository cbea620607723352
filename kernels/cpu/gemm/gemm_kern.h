/* kernels/cpu/gemm/gemm_kern.h — the CPU GEMM's register-tiled micro-kernel, as a template.
 *
 * Included once by each ISA file (gemm_avx512.c, gemm_avx2.c, gemm_ref.c) after it defines:
 *   V                16 f32 lanes (one zmm, two ymm, or 16 scalars)
 *   V_ZERO()         all lanes +0
 *   V_FMA(a, b, c)   lane-wise fused a * b + c (one rounding)
 *   V_LD(p), V_ST(p, v)   16 floats at p (any alignment)
 *   V_SUM(v)         the lane tree of gemm_isa.h: ((l_i + l_i+8) + (.. i+4)) + (.. i+2), then 0 + 1
 *   V_ADD(a, b)      lane-wise a + b
 *   SC_R, SC_C       query rows and 16-key vectors of a scores register tile
 *   W_BF16(p, e, o), W_F16(p, e, o), W_F32(p, e, o)
 *                    widen the 32 weights at p into e (lane l = p[2l]) and o (lane l = p[2l+1])
 *   MR, MC           rows and outputs of a full register tile
 *   KNAME(s)         the ISA's name for symbol s
 * and it defines KNAME(panel), the lwq_gemm_panel_fn of gemm_isa.h.
 *
 * The arithmetic per output element is the one gemm_isa.h defines, whatever MR, MC, the chunking
 * over k or the ISA: a row's result depends on that row and the weight row alone. */
#include "kernels/cpu/gemm/gemm_isa.h"

#ifndef KC
#define KC 32 /* 32-blocks of k per chunk: the x rows of a chunk stay in L1 across all outputs */
#endif

_Static_assert(((LWQ_GEMM_MAXC + MC - 1) / MC) * MR * MC * 16 <= LWQ_GEMM_ACC_FLOATS,
               "accumulator buffer too small for this tile shape");

static inline __attribute__((always_inline)) void
KNAME(tile)(const int R, const int C, const int kind, const float *x, int64_t ldx, const char *w,
            int64_t ldw, int64_t nblk, int first, int last, float *acc, float *y, int64_t ldy)
{
    V a[MR][MC];
    const int64_t bb = kind == 2 ? 128 : 64; /* bytes per 32-block of one weight row */
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            a[r][c] = first ? V_ZERO() : V_LD(acc + (r * MC + c) * 16);
    for (int64_t b = 0; b < nblk; b++) {
        V we[MC], wo[MC];
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            const char *p = w + c * ldw + b * bb;
            if (kind == 0)
                W_BF16(p, we[c], wo[c]);
            else if (kind == 1)
                W_F16(p, we[c], wo[c]);
            else
                W_F32(p, we[c], wo[c]);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const float *xr = x + r * ldx + 32 * b;
            V xe = V_LD(xr), xo = V_LD(xr + 16);
            V_PIN(xe);
            V_PIN(xo);
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) {
                a[r][c] = V_FMA(xe, we[c], a[r][c]);
                a[r][c] = V_FMA(xo, wo[c], a[r][c]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            if (last)
                y[r * ldy + c] = V_SUM(a[r][c]);
            else
                V_ST(acc + (r * MC + c) * 16, a[r][c]);
        }
}

/* One call per (kind, rows, outputs) shape; the shapes a panel can meet are listed by KLIST. */
static void KNAME(run)(int kind, int R, int C, const float *x, int64_t ldx, const char *w,
                       int64_t ldw, int64_t nblk, int first, int last, float *acc, float *y,
                       int64_t ldy)
{
    switch ((kind * 16 + R) * 16 + C) {
#define KCASE(K, R_, C_)                                                                           \
    case ((K) * 16 + (R_)) * 16 + (C_):                                                            \
        KNAME(tile)(R_, C_, K, x, ldx, w, ldw, nblk, first, last, acc, y, ldy);                    \
        break;
        KLIST(KCASE, 0)
        KLIST(KCASE, 1)
        KLIST(KCASE, 2)
#undef KCASE
    default:
        break;
    }
}

void KNAME(panel)(const lwq_gemm_panel *p, float *accbuf)
{
    const int64_t es = p->wkind == 2 ? 4 : 2;
    const int64_t ntot = p->nfull + (p->wt != NULL);
    for (int64_t r0 = 0; r0 < p->nr; r0 += MR) {
        const int R = (int)(p->nr - r0 < MR ? p->nr - r0 : MR);
        const float *x = p->x + r0 * p->ldx;
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
                    KNAME(run)(p->wkind, R, C, x + 32 * b0, p->ldx, p->w + c0 * p->ldw + b0 * 32 * es,
                               p->ldw, m1 > b0 ? m1 - b0 : 0, first, last && !tail, acc, y + c0, p->ldy);
                if (tail)
                    KNAME(run)(p->wkind, R, C, x + 32 * p->nfull, p->ldx, p->wt + c0 * 32 * es, 32 * es,
                               1, first && m1 <= b0, last, acc, y + c0, p->ldy);
            }
            b0 = b1;
        } while (b0 < ntot);
    }
}

/* y[i] = fma(a, x[i], y[i]) for i < n: attention's P V, one fused chain per output element. */
void KNAME(axpy)(float a, const float *x, float *y, int64_t n)
{
    int64_t i = 0;
    V av = V_SET1(a);
    for (; i + 16 <= n; i += 16)
        V_ST(y + i, V_FMA(av, V_LD(x + i), V_LD(y + i)));
    for (; i < n; i++)
        y[i] = fmaf(a, x[i], y[i]);
}

/* acc[r][d] = fma(p[r][c], v[c][d], acc[r][d]) for c = 0 .. nc - 1 in order, r < nr, d < n
 * (p rows ldp apart, v rows ldv apart, acc rows lda apart): attention's P V over keys every one
 * of the nr rows sees.  Per element it is the chain of nc axpy calls above, bit for bit; blocked
 * 4 rows x 64 outputs so each value row is loaded once per 4 query rows and the accumulators
 * stay in registers across the keys. */
void KNAME(pv)(const float *p, int64_t ldp, const float *v, int64_t ldv, float *acc, int64_t lda,
               int64_t nr, int64_t nc, int64_t n)
{
    int64_t r = 0;
    for (; r + 4 <= nr; r += 4) {
        int64_t d = 0;
        for (; d + 64 <= n; d += 64) {
            V a[4][4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++)
                    a[i][q] = V_LD(acc + (r + i) * lda + d + 16 * q);
            for (int64_t c = 0; c < nc; c++) {
                V w[4];
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++)
                    w[q] = V_LD(v + c * ldv + d + 16 * q);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    V pb = V_SET1(p[(r + i) * ldp + c]);
#pragma GCC unroll 4
                    for (int q = 0; q < 4; q++)
                        a[i][q] = V_FMA(pb, w[q], a[i][q]);
                }
            }
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++)
                    V_ST(acc + (r + i) * lda + d + 16 * q, a[i][q]);
        }
        for (; d + 16 <= n; d += 16) {
            V a[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                a[i] = V_LD(acc + (r + i) * lda + d);
            for (int64_t c = 0; c < nc; c++) {
                V w = V_LD(v + c * ldv + d);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++)
                    a[i] = V_FMA(V_SET1(p[(r + i) * ldp + c]), w, a[i]);
            }
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                V_ST(acc + (r + i) * lda + d, a[i]);
        }
        for (; d < n; d++)
            for (int i = 0; i < 4; i++)
                for (int64_t c = 0; c < nc; c++)
                    acc[(r + i) * lda + d] = fmaf(p[(r + i) * ldp + c], v[c * ldv + d],
                                                  acc[(r + i) * lda + d]);
    }
    for (; r < nr; r++)
        for (int64_t c = 0; c < nc; c++)
            KNAME(axpy)(p[r * ldp + c], v + c * ldv, acc + r * lda, n);
}

/* ---- attention scores: the panel's dot products, vectorised over keys ------------------------- */

/* acc[r][c] = lane l's chain of gemm_isa.h for query row r and the 16 keys of vector c: the fmas
 * of k = 32b + 2l, then k = 32b + 2l + 1, block after block, from +0 (q packed: its value of k =
 * 32b + 2l + h at 32b + 16h + l; keys transposed: key j's value of k at kt[k * ldk + j]). */
static inline __attribute__((always_inline)) void
KNAME(sc_lane)(const int R, const int C, int l, const float *q, int64_t ldq, const float *kt,
               int64_t ldk, int64_t nblk, V acc[SC_R][SC_C])
{
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            acc[r][c] = V_ZERO();
    for (int64_t b = 0; b < nblk; b++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const float *kr = kt + (32 * b + 2 * l + h) * ldk;
            V kv[SC_C];
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                kv[c] = V_LD(kr + 16 * c);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const V qb = V_SET1(q[r * ldq + 32 * b + 16 * h + l]);
#pragma GCC unroll 4
                for (int c = 0; c < C; c++)
                    acc[r][c] = V_FMA(qb, kv[c], acc[r][c]);
            }
        }
}

/* t = lane l + lane l + 8 (the first level of the tree) */
static inline __attribute__((always_inline)) void
KNAME(sc_pair)(const int R, const int C, int l, const float *q, int64_t ldq, const float *kt,
               int64_t ldk, int64_t nblk, V t[SC_R][SC_C])
{
    V hi[SC_R][SC_C];
    KNAME(sc_lane)(R, C, l, q, ldq, kt, ldk, nblk, t);
    KNAME(sc_lane)(R, C, l + 8, q, ldq, kt, ldk, nblk, hi);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            t[r][c] = V_ADD(t[r][c], hi[r][c]);
}

static inline __attribute__((always_inline)) void
KNAME(sc_add)(const int R, const int C, V a[SC_R][SC_C], V b[SC_R][SC_C])
{
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            a[r][c] = V_ADD(a[r][c], b[r][c]);
}

/* R query rows x C vectors of 16 keys: s = ((t0 + t4) + (t2 + t6)) + ((t1 + t5) + (t3 + t7)), the
 * lane tree of gemm_isa.h (V_SUM) with each level's operands in V_SUM's order. */
static inline __attribute__((always_inline)) void
KNAME(sc_tile)(const int R, const int C, const float *q, int64_t ldq, const float *kt, int64_t ldk,
               int64_t nblk, float *s, int64_t lds, int64_t nc)
{
    V v0[SC_R][SC_C], v1[SC_R][SC_C], a[SC_R][SC_C], b[SC_R][SC_C];
    KNAME(sc_pair)(R, C, 0, q, ldq, kt, ldk, nblk, v0);
    KNAME(sc_pair)(R, C, 4, q, ldq, kt, ldk, nblk, a);
    KNAME(sc_add)(R, C, v0, a); /* u0 */
    KNAME(sc_pair)(R, C, 2, q, ldq, kt, ldk, nblk, a);
    KNAME(sc_pair)(R, C, 6, q, ldq, kt, ldk, nblk, b);
    KNAME(sc_add)(R, C, a, b); /* u2 */
    KNAME(sc_add)(R, C, v0, a); /* v0 = u0 + u2 */
    KNAME(sc_pair)(R, C, 1, q, ldq, kt, ldk, nblk, v1);
    KNAME(sc_pair)(R, C, 5, q, ldq, kt, ldk, nblk, a);
    KNAME(sc_add)(R, C, v1, a); /* u1 */
    KNAME(sc_pair)(R, C, 3, q, ldq, kt, ldk, nblk, a);
    KNAME(sc_pair)(R, C, 7, q, ldq, kt, ldk, nblk, b);
    KNAME(sc_add)(R, C, a, b); /* u3 */
    KNAME(sc_add)(R, C, v1, a); /* v1 = u1 + u3 */
    KNAME(sc_add)(R, C, v0, v1);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const int64_t n = nc - 16 * c < 16 ? nc - 16 * c : 16;
            if (n == 16) {
                V_ST(s + r * lds + 16 * c, v0[r][c]);
            } else if (n > 0) {
                float tmp[16];
                V_ST(tmp, v0[r][c]);
                for (int64_t i = 0; i < n; i++)
                    s[r * lds + 16 * c + i] = tmp[i];
            }
        }
}

/* s[r][c] (rows lds apart) = the dot product of gemm_isa.h of packed query row r (q, rows ldq
 * apart, nblk 32-blocks, lwq_gemm_pack_row's order) and key c, for r < nr, c < nc; the keys
 * transposed: kt[k * ldk + c] = key c's element k, zero for k past the head dim, columns readable
 * up to nc rounded up to 16.  Each score is exactly the panel's (the same fmas per lane in the same
 * order, the same tree), computed for 16 keys at once without a horizontal sum or weight permutes. */
void KNAME(scores)(const float *q, int64_t ldq, const float *kt, int64_t ldk, int64_t nblk, float *s,
                   int64_t lds, int64_t nr, int64_t nc)
{
    for (int64_t r0 = 0; r0 < nr; r0 += SC_R) {
        const int R = nr - r0 < SC_R ? (int)(nr - r0) : SC_R;
        for (int64_t c0 = 0; c0 < nc; c0 += 16 * SC_C) {
            const int C = nc - c0 < 16 * SC_C ? (int)((nc - c0 + 15) / 16) : SC_C;
            const float *qr = q + r0 * ldq, *kc = kt + c0;
            float *sr = s + r0 * lds + c0;
            if (R == SC_R && C == SC_C)
                KNAME(sc_tile)(SC_R, SC_C, qr, ldq, kc, ldk, nblk, sr, lds, nc - c0);
            else if (R == SC_R)
                KNAME(sc_tile)(SC_R, 1, qr, ldq, kc, ldk, nblk, sr, lds, nc - c0);
            else if (C == SC_C)
                KNAME(sc_tile)(1, SC_C, qr, ldq, kc, ldk, nblk, sr, lds, nc - c0);
            else
                KNAME(sc_tile)(1, 1, qr, ldq, kc, ldk, nblk, sr, lds, nc - c0);
        }
    }
}
