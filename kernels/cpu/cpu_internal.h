/* kernels/cpu/cpu_internal.h — pieces shared by the CPU backend's files (not a public API).
 * Row conversion between the activation dtypes and f32, and the op entry points that
 * backend_cpu.c puts in its table. */
#ifndef LWQ_KERNELS_CPU_INTERNAL_H
#define LWQ_KERNELS_CPU_INTERNAL_H

#include <stdint.h>
#include <stdlib.h>

#include "kernels/backend.h"

/* Vectorized bulk conversions (convert_cpu.c); same results as the scalar helpers. */
void lwq_cpu_bf16_to_f32(const uint16_t *restrict s, float *restrict d, int64_t n);
void lwq_cpu_f32_to_bf16(const float *restrict s, uint16_t *restrict d, int64_t n);

/* lwq_gemm_pack_row (gemm_isa.h) of a BF16 row (widened on the way) or an f32 row: the same
 * packed floats, bit for bit, vectorized (convert_cpu.c). */
void lwq_cpu_pack_row_bf16(const uint16_t *restrict s, int64_t k, float *restrict d);
void lwq_cpu_pack_row_f32(const float *restrict s, int64_t k, float *restrict d);

/* The GEMM's (nr, nc) f32 output tile (rows nc apart), plus bias[c] when bias, rounded to BF16 rows
 * ldd apart (convert_cpu.c): the per-row store's bits, one vectorized call per tile. */
void lwq_cpu_store_tile_bf16(const float *restrict src, int64_t nr, int64_t nc,
                             const float *restrict bias, uint16_t *restrict dst, int64_t ldd);

/* The element-wise tails of the row ops (convert_cpu.c), each element exactly the scalar
 * lwq_round_to expression written beside it, vectorized for BF16:
 *   norm_apply  y[i] = R_ydt(w[i] * R_xdt(x[i] * rs))                 (y may be x)
 *   axpy_round  acc[i] = R(acc[i] + R(a * y[i]))
 *   rope_apply  x[i], x[i + half] = R(R(x1 cs) + R(-x2 sn)), R(R(x2 cs) + R(x1 sn)) */
void lwq_cpu_norm_apply(const float *x, float rs, const float *w, float *y, int64_t n, lwq_dtype xdt,
                        lwq_dtype ydt);
void lwq_cpu_axpy_round(float *acc, float a, const float *y, int64_t n, lwq_dtype dt);
void lwq_cpu_rope_apply(float *x, const float *cs, const float *sn, int64_t half, lwq_dtype dt);
/* a[i] = R_dt(a[i]) * b[i]                 (SwiGLU's product after the SiLU; a, b distinct) */
void lwq_cpu_mul_round(float *a, const float *b, int64_t n, lwq_dtype dt);

/* dst[i] = (float)src[off + i] for i < n. */
static inline void lwq_cpu_load_f32(const void *src, lwq_dtype dt, int64_t off, int64_t n,
                                    float *dst)
{
    if (dt == LWQ_F32) {
        const float *s = (const float *)src + off;
        for (int64_t i = 0; i < n; i++)
            dst[i] = s[i];
    } else if (dt == LWQ_BF16) {
        lwq_cpu_bf16_to_f32((const uint16_t *)src + off, dst, n);
    } else {
        const uint16_t *s = (const uint16_t *)src + off;
        for (int64_t i = 0; i < n; i++)
            dst[i] = lwq_f16_to_f32(s[i]);
    }
}

/* dst[off + i] = src[i] rounded (nearest even) to dt. */
static inline void lwq_cpu_store_f32(void *dst, lwq_dtype dt, int64_t off, int64_t n,
                                     const float *src)
{
    if (dt == LWQ_F32) {
        float *d = (float *)dst + off;
        for (int64_t i = 0; i < n; i++)
            d[i] = src[i];
    } else if (dt == LWQ_BF16) {
        lwq_cpu_f32_to_bf16(src, (uint16_t *)dst + off, n);
    } else {
        uint16_t *d = (uint16_t *)dst + off;
        for (int64_t i = 0; i < n; i++)
            d[i] = lwq_f32_to_f16(src[i]);
    }
}

/* The calling thread's kept scratch of `slot` (scratch_cpu.c): at least count x elem bytes,
 * 64-byte aligned, reused by the next call on this thread with that slot (never free it; its
 * contents are undefined on entry).  NULL on failure or overflow.  The ops use it instead of a
 * per-call allocation, so a forward allocates nothing per op call. */
enum {
    LWQ_SCRATCH_GEMM,      /* gemm: the threads' tiles and packed slices */
    LWQ_SCRATCH_GEMM_AUX,  /* gemm: the weight tails or the f32 bias */
    LWQ_SCRATCH_GEMM_AUX2, /* gemm: the other of the two */
    LWQ_SCRATCH_ATTN,      /* attention: the threads' tiles */
    LWQ_SCRATCH_ATTN_SEQ,  /* attention: per-sequence first keys */
    LWQ_SCRATCH_ROWS,      /* the row ops (rmsnorm, rope, moe_route): the threads' rows */
    LWQ_SCRATCH_SLOTS
};
void *lwq_cpu_scratch_slot(int slot, int64_t count, size_t elem);

int lwq_cpu_gemm(void *ctx, const lwq_tensor *x, const lwq_tensor *w, const lwq_tensor *bias,
                 lwq_tensor *y, lwq_error *e);
/* AMX-BF16 (gemm_amx.c): whether this CPU and OS run it (asks Linux for the tile state once per
 * process), and y = x W^T (+ bias, f32) for BF16 x and BF16 w of any shape. */
int lwq_gemm_amx_usable(void);
int lwq_gemm_amx(const lwq_tensor *x, const lwq_tensor *w, const float *bias, lwq_tensor *y,
                 lwq_error *e);
/* count BF16 products without bias in one scheduled loop (gemm_amx.c), each with lwq_gemm_amx's
 * bits; and the backend's op, which takes that path where it can and lwq_cpu_gemm otherwise. */
int lwq_gemm_amx_grouped(const lwq_gemm_group *g, int count, lwq_error *e);
int lwq_cpu_gemm_grouped(void *ctx, const lwq_gemm_group *g, int count, lwq_error *e);
int lwq_cpu_attention(void *ctx, const lwq_attn_args *a, lwq_error *e);
/* the Mamba2 op: lwq_mamba2_ref on float32 copies of its tensors (mamba2_cpu.c; the scan per ISA in mamba2/) */
int lwq_cpu_mamba2(void *ctx, const lwq_mamba2_args *a, lwq_error *e);

#endif
