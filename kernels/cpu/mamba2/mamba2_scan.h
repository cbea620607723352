/* kernels/cpu/mamba2/mamba2_scan.h — the Mamba2 SSD scan of one (sequence, head) on the host, per
 * ISA (internal to kernels/cpu/mamba2_cpu.c, which picks one with the GEMM's kernel choice:
 * LWQ_CPU_KERNELS / lwq_cpu_kernels_force, gemm_isa.h).
 *
 * Every kernel computes the same bits: per token t (ascending) and head channel p,
 *   xd = x[p] * dt;  acc = +0;
 *   for k = 0..N-1 ascending: S[p][k] = S[p][k] * decay + xd * B[k];  acc = acc + S[p][k] * C[k];
 *   y[p] = acc + D * x[p]                                  (decay = expf(A dt), one libm call)
 * each product and sum rounded to f32 on its own (no FMA).  The portable kernel runs it with p
 * outside and k inside, as kernels/mamba2.h writes it; the vector kernels hold 16 (AVX-512) or 8
 * (AVX2) consecutive p in the lanes of a register and keep k sequential, so every lane performs
 * exactly the scalar sequence of its p: the lanes never meet, and no sum is reordered.  The state
 * S is then stored k-major, N rows of lwq_mamba2_scan_ld(P) floats (64-byte aligned), lanes past P
 * holding zeros. */
#ifndef LWQ_KERNELS_CPU_MAMBA2_SCAN_H
#define LWQ_KERNELS_CPU_MAMBA2_SCAN_H

#include <stdint.h>

typedef struct lwq_mamba2_scan_item {
    int64_t T, P, N;
    const float *x, *B, *C; /* token 0's x (P), B (N), C (N) of this head; rows ldx floats apart */
    int64_t ldx;
    const float *dt;        /* token 0's dt of this head (after softplus and clamp); ldd apart */
    int64_t ldd;
    const uint8_t *valid;   /* (T): a padded token gets y = 0 and leaves S unchanged */
    float A, D;             /* A = -exp(A_log) */
    float *y;               /* token 0's y (P); rows ldy floats apart */
    int64_t ldy;
    float *S;               /* scratch: N * lwq_mamba2_scan_ld(P) floats, 64-byte aligned */
} lwq_mamba2_scan_item;

typedef void (*lwq_mamba2_scan_fn)(const lwq_mamba2_scan_item *it);

/* floats per k-row of the vector kernels' state: P rounded up to 16 */
static inline int64_t lwq_mamba2_scan_ld(int64_t P) { return (P + 15) / 16 * 16; }

void lwq_mamba2_scan_ref(const lwq_mamba2_scan_item *it);
void lwq_mamba2_scan_avx512(const lwq_mamba2_scan_item *it);
void lwq_mamba2_scan_avx2(const lwq_mamba2_scan_item *it);

#endif
