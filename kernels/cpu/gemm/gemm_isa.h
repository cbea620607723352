/* kernels/cpu/gemm/gemm_isa.h — the CPU GEMM's arithmetic, and its per-ISA kernels (internal).
 *
 * y[r][o] = sum over k of x[r][k] * w[o][k], computed the same way, bit for bit, by every kernel
 * (AVX-512, AVX2, portable C), for every call shape and thread count:
 *   1. k is cut into blocks of 32 (the last one zero-padded on both sides);
 *   2. 16 lane sums start at +0; lane l takes, block after block, the products of k = 32b + 2l
 *      and then k = 32b + 2l + 1, each added with one fused multiply-add (fmaf);
 *   3. the lanes are summed as a fixed tree: t_i = l_i + l_(i+8) (i < 8), u_i = t_i + t_(i+4),
 *      v_i = u_i + u_(i+2), result = v_0 + v_1.
 * A row's result therefore depends only on that row of x and the weight row: not on the batch,
 * the padding, the other rows of the call, the thread count or the CPU.  The one exception to "or
 * the CPU": BF16 activations x BF16 weights on a CPU with AVX512-BF16 take a pair's two products
 * in one vdpbf16ps (gemm_avx512bf16.c), the same lanes and tree but that instruction's rounding;
 * still independent of batch, rows and threads.  The lane order (even and
 * odd k of a block in two vectors) lets a BF16 weight widen with one shift or one mask per 16
 * values; x is packed once per call into that order (lwq_gemm_pack_row). */
#ifndef LWQ_KERNELS_CPU_GEMM_ISA_H
#define LWQ_KERNELS_CPU_GEMM_ISA_H

#include <stdint.h>

#include "core/data/dtype.h"

#define LWQ_GEMM_MAXC 64          /* outputs per panel, at most */
#define LWQ_GEMM_ACC_FLOATS 9216  /* accumulator scratch a panel needs (floats, 64-byte aligned) */

/* nr rows x nc outputs of y (f32, row stride ldy) over the whole k. */
typedef struct lwq_gemm_panel {
    const float *x;   /* packed rows (lwq_gemm_pack_row), ldx floats apart */
    const uint16_t *xh; /* the dot-product panel's rows instead: raw BF16, zero-padded to
                           lwq_gemm_kp(k), ldx elements apart */
    int64_t ldx;
    const char *w;    /* weight row of the panel's first output; rows ldw bytes apart */
    int64_t ldw;
    const char *wt;   /* the partial last 32-block of each weight row, zero-padded to 32 elements,
                         rows 32 elements apart; NULL when k % 32 == 0 */
    int wkind;        /* 0 BF16, 1 F16, 2 F32 weights */
    int64_t nfull;    /* full 32-blocks of k */
    float *y;
    int64_t ldy;
    int64_t nr, nc;   /* nc <= LWQ_GEMM_MAXC */
} lwq_gemm_panel;

typedef void (*lwq_gemm_panel_fn)(const lwq_gemm_panel *p, float *accbuf);
typedef void (*lwq_axpy_fn)(float a, const float *x, float *y, int64_t n);
/* acc[r][d] = fma(p[r][c], v[c][d], acc[r][d]) over c in order: nc axpy calls per row, blocked */
typedef void (*lwq_pv_fn)(const float *p, int64_t ldp, const float *v, int64_t ldv, float *acc,
                          int64_t lda, int64_t nr, int64_t nc, int64_t n);

/* s[r][c] = the dot product above of packed query row r and key c, the keys transposed
 * (kt[k * ldk + c], zero past the head dim, columns readable up to nc rounded up to 16): attention's
 * Q K^T with the panel's bits, vectorised over 16 keys (gemm_kern.h) */
typedef void (*lwq_scores_fn)(const float *q, int64_t ldq, const float *kt, int64_t ldk, int64_t nblk,
                              float *s, int64_t lds, int64_t nr, int64_t nc);

typedef struct lwq_cpu_kernels {
    const char *name; /* "amx", "avx512bf16", "avx512", "avx2", "portable" */
    lwq_gemm_panel_fn panel;
    lwq_axpy_fn axpy;
    /* BF16 x BF16 products with a dot-product instruction (its own bits, see
       gemm_avx512bf16.c), or NULL: then BF16 activations go through `panel` like the rest */
    lwq_gemm_panel_fn panel_bf16;
    int amx; /* 1: BF16 x BF16 products on AMX tiles instead (gemm_amx.c, bits of their own) */
    lwq_pv_fn pv; /* attention's P V, the same bits as `axpy` per element */
    lwq_scores_fn scores; /* attention's Q K^T, the same bits as `panel` per score */
} lwq_cpu_kernels;

void lwq_gemm_panel_avx512(const lwq_gemm_panel *p, float *accbuf);
void lwq_gemm_panel_avx2(const lwq_gemm_panel *p, float *accbuf);
void lwq_gemm_panel_ref(const lwq_gemm_panel *p, float *accbuf);
void lwq_gemm_panel_avx512bf16(const lwq_gemm_panel *p, float *accbuf);
void lwq_gemm_axpy_avx512(float a, const float *x, float *y, int64_t n);
void lwq_gemm_axpy_avx2(float a, const float *x, float *y, int64_t n);
void lwq_gemm_axpy_ref(float a, const float *x, float *y, int64_t n);
void lwq_gemm_pv_avx512(const float *p, int64_t ldp, const float *v, int64_t ldv, float *acc,
                        int64_t lda, int64_t nr, int64_t nc, int64_t n);
void lwq_gemm_pv_avx2(const float *p, int64_t ldp, const float *v, int64_t ldv, float *acc,
                      int64_t lda, int64_t nr, int64_t nc, int64_t n);
void lwq_gemm_pv_ref(const float *p, int64_t ldp, const float *v, int64_t ldv, float *acc,
                     int64_t lda, int64_t nr, int64_t nc, int64_t n);
void lwq_gemm_scores_avx512(const float *q, int64_t ldq, const float *kt, int64_t ldk, int64_t nblk,
                            float *s, int64_t lds, int64_t nr, int64_t nc);
void lwq_gemm_scores_avx2(const float *q, int64_t ldq, const float *kt, int64_t ldk, int64_t nblk,
                          float *s, int64_t lds, int64_t nr, int64_t nc);
void lwq_gemm_scores_ref(const float *q, int64_t ldq, const float *kt, int64_t ldk, int64_t nblk,
                         float *s, int64_t lds, int64_t nr, int64_t nc);

/* The kernels in use: the fastest this CPU runs (amx; avx512bf16 on AMD; avx512, avx2, portable), unless
 * LWQ_CPU_KERNELS (amx | avx512bf16 | avx512 | avx2 | portable) or lwq_cpu_kernels_force chose
 * others.  avx512, avx2 and portable give the same bits everywhere; amx and avx512bf16 give bits
 * of their own for BF16 x BF16 products (and the FMA paths' bits for every other dtype pair).
 * avx512bf16 is picked by itself on AMD CPUs only: vdpbf16ps runs at twice the FMA rate on the AMD
 * EPYC measured, at half of it on the Sapphire Rapids VM (perf/RESULTS.md). */
const lwq_cpu_kernels *lwq_cpu_kernels_get(void);
/* Use `name`'s kernels from now on (NULL: back to the automatic choice).  -1 when this CPU cannot
 * run them or the name is unknown; the choice is then unchanged. */
int lwq_cpu_kernels_force(const char *name);

/* Floats in a packed row of k elements: k rounded up to a multiple of 32. */
static inline int64_t lwq_gemm_kp(int64_t k) { return (k + 31) / 32 * 32; }

/* Pack one row of k f32 values into lwq_gemm_kp(k) floats: per 32-block its 16 even-k values,
 * then its 16 odd-k values, zeros past k. */
static inline void lwq_gemm_pack_row(const float *src, int64_t k, float *dst)
{
    for (int64_t b = 0; b < k; b += 32)
        for (int l = 0; l < 16; l++) {
            int64_t i = b + 2 * l;
            dst[b + l] = i < k ? src[i] : 0.0f;
            dst[b + 16 + l] = i + 1 < k ? src[i + 1] : 0.0f;
        }
}

#endif
