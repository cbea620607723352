/* kernels/cpu/quant_cpu_internal.h — what the CPU quantizers of kernels/quant.h share between
 * quant_cpu.c (amax, scales, the max / static NVFP4 paths, dequantization, Hessians) and
 * quant_search_cpu.c (the NVFP4 block searches): block loads, the per-block amax, the error
 * atomics and the NVFP4 loop context.  Not a public API. */
#ifndef LWQ_KERNELS_CPU_QUANT_CPU_INTERNAL_H
#define LWQ_KERNELS_CPU_QUANT_CPU_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "kernels/quant.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the CPU quantizers store packed codes as little-endian words"
#endif

#define BLK LWQ_NVFP4_BLOCK
#define MIN_CHUNK_ELEMS 16384
/* helpers of the cloned loops must be inlined into each clone to get its instruction set */
#define INLINE static inline __attribute__((always_inline))

/* Hot loops are compiled for AVX-512/AVX2 as well and chosen at load time (GCC ifunc); the
 * operations are IEEE single-precision ones in every clone, so the bytes are the same. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LWQ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LWQ_CLONES
#endif

static inline int64_t min_chunk_rows(int64_t cols) { return cols >= MIN_CHUNK_ELEMS ? 1 : MIN_CHUNK_ELEMS / cols; }

static inline void atomic_min_i64(_Atomic int64_t *a, int64_t v)
{
    int64_t cur = atomic_load(a);
    while (v < cur && !atomic_compare_exchange_weak(a, &cur, v)) {
    }
}

static inline void atomic_max_u32(_Atomic uint32_t *a, uint32_t v)
{
    uint32_t cur = atomic_load(a);
    while (v > cur && !atomic_compare_exchange_weak(a, &cur, v)) {
    }
}

/* Convert 16 elements at flat offset off to float. */
INLINE void load16(const void *w, lwq_dtype dt, int64_t off, float *x)
{
    if (dt == LWQ_BF16) {
        const uint16_t *s = (const uint16_t *)w + off;
        for (int i = 0; i < BLK; i++)
            x[i] = lwq_bf16_to_f32(s[i]);
    } else if (dt == LWQ_F16) {
        const uint16_t *s = (const uint16_t *)w + off;
        for (int i = 0; i < BLK; i++)
            x[i] = lwq_f16_to_f32(s[i]);
    } else {
        memcpy(x, (const float *)w + off, BLK * sizeof(float));
    }
}

/* max |x| as float bits (bit order = value order for non-negative floats) and, in *bad, whether
 * any element is NaN/Inf. */
INLINE uint32_t amax16(const float *x, int *bad)
{
    int32_t m = 0;
    for (int i = 0; i < BLK; i++) {
        int32_t a = (int32_t)(lwq_f32_bits(x[i]) & 0x7fffffffu);
        m = a > m ? a : m;
    }
    *bad = m >= 0x7f800000; /* NaN and Inf have the largest magnitude bits */
    return (uint32_t)m;
}

typedef struct nvfp4_ctx {
    const void *w;
    lwq_dtype dt;
    int64_t cols;
    float ws2;
    uint32_t limit_bits;      /* the given global amax: a block above it is an error */
    float global_eff;         /* static path: global amax used in the scale formula */
    const float *block_amax;  /* static path: (rows, cols/16); NULL on the max path */
    const float *hessian;     /* sweep */
    const float (*thr)[LWQ_E2M1_NTHR]; /* searches: E2M1 thresholds of each scale byte's divisor */
    const void *lanes;        /* searches: the same tables laid out by candidate (quant_search_cpu.c) */
    uint8_t *packed, *scale;
    float *out_amax;          /* sweep */
    float fp8max;             /* static path / mse: the block scales' normalisation max; 0 = 448
                                 (lwq_nvfp4_scale_static), LWQ_NVFP4_46_FP8MAX for Four-over-Six */
    const float *mult;        /* mse: the amax multipliers (NULL: lwq_mse_multiplier's 39) */
    int nmult;
    _Atomic int64_t bad;      /* smallest flat index of a NaN/Inf element */
    _Atomic int64_t badamax;  /* smallest block index of a bad static block amax */
    _Atomic uint32_t over;    /* largest block amax (bits) above limit_bits */
} nvfp4_ctx;

static inline void nvfp4_ctx_init(nvfp4_ctx *c)
{
    atomic_init(&c->bad, INT64_MAX);
    atomic_init(&c->badamax, INT64_MAX);
    atomic_init(&c->over, 0);
}

/* The error a finished loop over c recorded (NaN/Inf element, bad block amax, a block above the
 * given global amax), or 0.  nb: blocks per row. */
int lwq_cpu_nvfp4_finish(nvfp4_ctx *c, const char *name, float given_global, int64_t nb, lwq_error *err);

#endif
