/* kernels/cpu/quant_cpu.c — CPU implementation of kernels/quant.h.
 *
 * Every loop is over rows (or input blocks) on the core/parallel.h pool, and every row's output
 * depends only on that row, so results do not depend on the thread count.  The per-element work
 * calls the LWQ_HD functions of layout/quant_formats.h, the same ones the CUDA kernels call; the
 * inner loops are fixed 16-element loops over plain arrays so that GCC vectorizes them (the
 * division `x / d` stays a true division: a reciprocal would change results).  Workers report
 * bad input through atomics holding the smallest offending index, so the error message is the
 * same whatever the thread count. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel.h"
#include "kernels/quant.h"
#include "kernels/quant_check.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "quant_cpu.c stores packed codes as little-endian words"
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

static int64_t min_chunk_rows(int64_t cols) { return cols >= MIN_CHUNK_ELEMS ? 1 : MIN_CHUNK_ELEMS / cols; }

static void atomic_min_i64(_Atomic int64_t *a, int64_t v)
{
    int64_t cur = atomic_load(a);
    while (v < cur && !atomic_compare_exchange_weak(a, &cur, v)) {
    }
}

static void atomic_max_u32(_Atomic uint32_t *a, uint32_t v)
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

/* Quantize one loaded block with divisor d into 8 packed bytes.  The codes are computed in
 * 32-bit lanes (the width of the floats they come from; GCC does not vectorize the narrowing to
 * bytes inside the same loop) and packed afterwards. */
INLINE void codes16(const float *x, float d, uint8_t *out)
{
    uint32_t c[BLK];
    for (int i = 0; i < BLK; i++)
        c[i] = (uint32_t)lwq_e2m1_from_f32_i32(x[i] / d);
    /* code i goes to bits 4i..4i+3 of a little-endian 64-bit word: byte i/2, low nibble for even
     * i.  Two OR-reductions with per-lane shifts vectorize; a byte-wise loop does not. */
    uint32_t lo = 0, hi = 0;
    for (int i = 0; i < BLK / 2; i++) {
        lo |= c[i] << (4 * i);
        hi |= c[i + BLK / 2] << (4 * i);
    }
    memcpy(out, &lo, 4); /* little-endian host (checked at the top of this file) */
    memcpy(out + 4, &hi, 4);
}

/* ---- amax ----------------------------------------------------------------------------------- */

typedef struct amax_ctx {
    const void *x;
    lwq_dtype dt;
    int64_t n;
    _Atomic uint32_t amax;
    _Atomic int64_t bad;
} amax_ctx;

/* fixed 16-element inner steps: GCC's -O2 cost model vectorizes only known trip counts */
#define AMAX_LOOP(LOAD)                                                                              \
    {                                                                                               \
        int64_t i = b;                                                                              \
        for (; i + BLK <= e; i += BLK)                                                              \
            for (int l = 0; l < BLK; l++) {                                                         \
                int32_t a = (int32_t)(lwq_f32_bits(LOAD(i + l)) & 0x7fffffffu);                     \
                m = a > m ? a : m;                                                                  \
            }                                                                                       \
        for (; i < e; i++) {                                                                        \
            int32_t a = (int32_t)(lwq_f32_bits(LOAD(i)) & 0x7fffffffu);                             \
            m = a > m ? a : m;                                                                      \
        }                                                                                           \
    }
#define LD_BF16(J) lwq_bf16_to_f32(s[J])
#define LD_F16(J) lwq_f16_to_f32(s[J])
#define LD_F32(J) s[J]

LWQ_CLONES static void amax_range(void *vc, int64_t b, int64_t e, int tid)
{
    amax_ctx *c = vc;
    int32_t m = 0;
    if (c->dt == LWQ_BF16) {
        const uint16_t *s = c->x;
        AMAX_LOOP(LD_BF16)
    } else if (c->dt == LWQ_F16) {
        const uint16_t *s = c->x;
        AMAX_LOOP(LD_F16)
    } else {
        const float *s = c->x;
        AMAX_LOOP(LD_F32)
    }
    /* NaN and Inf have the largest magnitude bits, so one comparison finds them */
    if (m >= 0x7f800000) {
        for (int64_t i = b; i < e; i++)
            if (!isfinite(lwq_load_f(c->x, c->dt, (size_t)i))) {
                atomic_min_i64(&c->bad, i);
                return;
            }
    }
    atomic_max_u32(&c->amax, (uint32_t)m);
}

int lwq_quant_amax(const void *x, lwq_dtype dt, int64_t n, const char *name, float *amax, lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, x, dt, 1, n, 0, err);
    if (rc < 0)
        return rc;
    amax_ctx c = {.x = x, .dt = dt, .n = n};
    atomic_init(&c.amax, 0);
    atomic_init(&c.bad, INT64_MAX);
    lwq_parallel_for(n, 1 << 16, amax_range, &c);
    if (atomic_load(&c.bad) != INT64_MAX)
        return lwq_errf(err, LWQ_ENUMERIC, "tensor %s: non-finite value (NaN or Inf) at element %lld",
                        lwq_quant_name(name), (long long)atomic_load(&c.bad));
    *amax = lwq_bits_f32(atomic_load(&c.amax));
    return 0;
}

/* ---- scales from amax ----------------------------------------------------------------------- */

static int check_amax_pos(const char *what, const char *name, float amax, lwq_error *err)
{
    if (!isfinite(amax) || amax <= 0.0f)
        return lwq_errf(err, LWQ_ENUMERIC, "%s %s: amax %g must be finite and > 0 (was calibration data seen?)", what,
                        lwq_quant_name(name), (double)amax);
    return 0;
}

int lwq_quant_input_scale(float amax, lwq_quant_format fmt, const char *name, float *scale, lwq_error *err)
{
    int rc = check_amax_pos("input of", name, amax, err);
    if (rc < 0)
        return rc;
    if (fmt != LWQ_QUANT_NVFP4 && fmt != LWQ_QUANT_FP8)
        return lwq_errf(err, LWQ_EINVAL, "input of %s: unknown quantization format %d", lwq_quant_name(name), (int)fmt);
    float s = amax / (fmt == LWQ_QUANT_NVFP4 ? LWQ_NVFP4_WS2_DIV : LWQ_E4M3_MAX);
    if (!(s > 0.0f))
        return lwq_errf(err, LWQ_ENUMERIC, "input of %s: amax %g gives a zero scale", lwq_quant_name(name),
                        (double)amax);
    *scale = s;
    return 0;
}

int lwq_quant_kv_scale(float amax, const char *name, float *scale, lwq_error *err)
{
    int rc = check_amax_pos("kv cache", name, amax, err);
    if (rc < 0)
        return rc;
    float s = amax / LWQ_E4M3_MAX;
    if (!(s > 0.0f))
        return lwq_errf(err, LWQ_ENUMERIC, "kv cache %s: amax %g gives a zero scale", lwq_quant_name(name),
                        (double)amax);
    *scale = s;
    return 0;
}

int lwq_quant_group_unify(float *input_amax, float *weight_amax, int n, const char *group, lwq_error *err)
{
    if (n <= 0)
        return lwq_errf(err, LWQ_EINVAL, "group %s: no members", lwq_quant_name(group));
    float *arr[2] = {input_amax, weight_amax};
    const char *what[2] = {"input amax", "weight amax"};
    for (int a = 0; a < 2; a++) {
        if (!arr[a])
            continue;
        float m = 0.0f;
        for (int i = 0; i < n; i++) {
            if (!isfinite(arr[a][i]) || arr[a][i] < 0.0f)
                return lwq_errf(err, LWQ_ENUMERIC, "group %s: member %d has %s %g (expected finite and >= 0)",
                                lwq_quant_name(group), i, what[a], (double)arr[a][i]);
            m = arr[a][i] > m ? arr[a][i] : m;
        }
        for (int i = 0; i < n; i++)
            arr[a][i] = m;
    }
    return 0;
}

/* ---- NVFP4 max / static --------------------------------------------------------------------- */

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

static void nvfp4_ctx_init(nvfp4_ctx *c)
{
    atomic_init(&c->bad, INT64_MAX);
    atomic_init(&c->badamax, INT64_MAX);
    atomic_init(&c->over, 0);
}

/* A row is processed GROUP blocks at a time: load and block amax, then the scale bytes of the
 * whole group in one vectorizable loop (the per-block scale arithmetic would otherwise be
 * scalar), then the codes. */
#define GROUP 64

LWQ_CLONES static void nvfp4_rows(void *vc, int64_t r0, int64_t r1, int tid)
{
    nvfp4_ctx *c = vc;
    const int64_t nb = c->cols / BLK;
    /* am / sb / d loops run over all GROUP entries (fixed trip counts vectorize at -O2); entries
     * past ng hold 0 or an earlier group's values: valid inputs whose results are never stored */
    float x[GROUP * BLK], am[GROUP] = {0}, d[GROUP], bam[GROUP] = {0};
    int32_t sb[GROUP];
    for (int64_t r = r0; r < r1; r++) {
        for (int64_t g0 = 0; g0 < nb; g0 += GROUP) {
            const int ng = (int)(nb - g0 < GROUP ? nb - g0 : GROUP);
            const int64_t off0 = r * c->cols + g0 * BLK;
            int anybad = 0;
            uint32_t gmax = 0;
            /* convert the whole group first: reading a block back right after storing it stalls */
            for (int g = 0; g < ng; g++)
                load16(c->w, c->dt, off0 + g * BLK, x + g * BLK);
            for (int g = 0; g < ng; g++) {
                int bad;
                uint32_t m = amax16(x + g * BLK, &bad);
                anybad |= bad;
                gmax = m > gmax ? m : gmax;
                am[g] = lwq_bits_f32(m);
            }
            if (anybad) {
                for (int i = 0; i < ng * BLK; i++)
                    if (!isfinite(x[i])) {
                        atomic_min_i64(&c->bad, off0 + i);
                        return;
                    }
            }
            if (gmax > c->limit_bits)
                atomic_max_u32(&c->over, gmax);
            if (c->block_amax) {
                const float *ba = c->block_amax + r * nb + g0;
                for (int g = 0; g < ng; g++)
                    if (!isfinite(ba[g]) || ba[g] < 0.0f) {
                        atomic_min_i64(&c->badamax, r * nb + g0 + g);
                        return;
                    }
                memcpy(bam, ba, (size_t)ng * sizeof(float));
                if (c->fp8max > 0.0f)
                    for (int g = 0; g < GROUP; g++)
                        sb[g] = lwq_nvfp4_scale_static_m(bam[g], c->global_eff, c->fp8max);
                else
                    for (int g = 0; g < GROUP; g++)
                        sb[g] = lwq_nvfp4_scale_static(bam[g], c->global_eff);
            } else {
                const float t6 = 6.0f * c->ws2;
                for (int g = 0; g < GROUP; g++) { /* = lwq_nvfp4_scale_max(am[g], ws2), vectorized */
                    float s = am[g] / t6;
                    s = s == 0.0f ? 1.0f : s;
                    sb[g] = lwq_e4m3_from_f32_i32(lwq_e4m3_clamp(s));
                }
            }
            for (int g = 0; g < GROUP; g++)
                d[g] = lwq_e4m3_to_f32_i32(sb[g]) * c->ws2;
            uint8_t *so = c->scale + r * nb + g0;
            for (int g = 0; g < ng; g++)
                so[g] = (uint8_t)sb[g];
            for (int g = 0; g < ng; g++)
                codes16(x + g * BLK, d[g], c->packed + off0 / 2 + g * (BLK / 2));
        }
    }
}

static int nvfp4_finish(nvfp4_ctx *c, const char *name, float given_global, int64_t nb, lwq_error *err)
{
    if (atomic_load(&c->bad) != INT64_MAX)
        return lwq_quant_err_nonfinite(name, atomic_load(&c->bad), c->cols, err);
    if (atomic_load(&c->badamax) != INT64_MAX) {
        int64_t i = atomic_load(&c->badamax);
        return lwq_errf(err, LWQ_ENUMERIC, "tensor %s: block amax %g at block [%lld, %lld] is not finite and >= 0",
                        lwq_quant_name(name), (double)c->block_amax[i], (long long)(i / nb), (long long)(i % nb));
    }
    if (atomic_load(&c->over) != 0)
        return lwq_quant_err_over_global(name, lwq_bits_f32(atomic_load(&c->over)), given_global, err);
    return 0;
}

static int nvfp4_run(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const float *block_amax,
                     float global_amax, float fp8max, const char *name, uint8_t *packed, uint8_t *scale, float *ws2,
                     lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, w, dt, rows, cols, 1, err);
    if (rc < 0)
        return rc;
    if (!packed || !scale || !ws2)
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: NULL output buffer", lwq_quant_name(name));
    float g;
    int zero = lwq_quant_check_global(name, global_amax, INFINITY, &g, err);
    if (zero < 0)
        return zero;
    nvfp4_ctx c = {.w = w, .dt = dt, .cols = cols, .ws2 = fp8max > 0.0f ? lwq_nvfp4_ws2_m(g, fp8max) : lwq_nvfp4_ws2(g),
                   .limit_bits = lwq_f32_bits(global_amax), .global_eff = g, .block_amax = block_amax,
                   .packed = packed, .scale = scale, .fp8max = fp8max};
    nvfp4_ctx_init(&c);
    lwq_parallel_for(rows, min_chunk_rows(cols), nvfp4_rows, &c);
    rc = nvfp4_finish(&c, name, global_amax, cols / BLK, err);
    if (rc < 0)
        return rc;
    *ws2 = c.ws2;
    return zero ? LWQ_QUANT_ZERO_TENSOR : 0;
}

int lwq_quant_nvfp4_max(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                        const char *name, uint8_t *packed, uint8_t *scale, float *ws2, lwq_error *err)
{
    return nvfp4_run(w, dt, rows, cols, NULL, global_amax, 0.0f, name, packed, scale, ws2, err);
}

int lwq_quant_nvfp4_static(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const float *block_amax,
                           float global_amax, const char *name, uint8_t *packed, uint8_t *scale, float *ws2,
                           lwq_error *err)
{
    if (!block_amax)
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: static NVFP4 needs per-block amax values", lwq_quant_name(name));
    return nvfp4_run(w, dt, rows, cols, block_amax, global_amax, 0.0f, name, packed, scale, ws2, err);
}

int lwq_quant_nvfp4_static46(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const float *block_amax,
                             float global_amax, const char *name, uint8_t *packed, uint8_t *scale, float *ws2,
                             lwq_error *err)
{
    if (!block_amax)
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: static NVFP4 needs per-block amax values", lwq_quant_name(name));
    return nvfp4_run(w, dt, rows, cols, block_amax, global_amax, LWQ_NVFP4_46_FP8MAX, name, packed, scale, ws2, err);
}

/* ---- NVFP4 scale sweep ---------------------------------------------------------------------- */

/* The loss of layout/quant_formats.h's lwq_nvfp4_block_sqerr_ref / _herr_ref, bit for bit,
 * written as lane-wise loops.  It works on magnitudes: IEEE division, multiplication and
 * subtraction are symmetric under a sign flip, so rounding |x| / d, times d, |x| minus that gives
 * exactly the magnitude of the signed error.  The rounding itself uses the divisor's E2M1
 * thresholds b (lwq_e2m1_round_thr == lwq_e2m1_round_mag(fl(|x| / d)), tested), which replaces
 * 126 x 16 divisions per block by comparisons.  For the Hessian loss the sign is put back (the
 * sign of a zero error may differ from _ref's; every term it touches is a zero either way).
 * (H dw)_i accumulates over j in ascending order for every i at once; the final sum is the same
 * halving tree.  ht: H transposed (ht[j*16 + i] = H[i][j]) so the lane-wise loop reads
 * contiguously. */
INLINE float sweep_loss(const float *x, const float *ax, float d, const float *b, const float *ht)
{
    float dw[BLK], t[BLK];
    for (int i = 0; i < BLK; i++)
        dw[i] = ax[i] - lwq_e2m1_round_thr(ax[i], b) * d;
    if (ht) {
        float hd[BLK] = {0};
        for (int i = 0; i < BLK; i++)
            dw[i] = x[i] < 0.0f ? -dw[i] : dw[i];
        for (int j = 0; j < BLK; j++)
            for (int i = 0; i < BLK; i++)
                hd[i] = hd[i] + ht[j * BLK + i] * dw[j];
        for (int i = 0; i < BLK; i++)
            t[i] = dw[i] * hd[i];
    } else {
        for (int i = 0; i < BLK; i++)
            t[i] = dw[i] * dw[i];
    }
    for (int i = 0; i < 8; i++)
        t[i] = t[i] + t[i + 8];
    for (int i = 0; i < 4; i++)
        t[i] = t[i] + t[i + 4];
    for (int i = 0; i < 2; i++)
        t[i] = t[i] + t[i + 2];
    return t[0] + t[1];
}

/* thr[v] = the E2M1 thresholds of scale byte v's divisor v * ws2 (v = 1..126; thr[0] unused). */
static void search_thresholds(float ws2, float thr[][LWQ_E2M1_NTHR])
{
    for (int i = 0; i < LWQ_E2M1_NTHR; i++)
        thr[0][i] = INFINITY;
    for (int v = 1; v <= LWQ_E4M3_NPOS; v++)
        lwq_e2m1_thresholds(lwq_nvfp4_block_div((uint8_t)v, ws2), thr[v]);
}

LWQ_CLONES static void sweep_rows(void *vc, int64_t r0, int64_t r1, int tid)
{
    nvfp4_ctx *c = vc;
    const int64_t nb = c->cols / BLK;
    float dtab[LWQ_E4M3_NPOS + 1];
    for (int v = 1; v <= LWQ_E4M3_NPOS; v++)
        dtab[v] = lwq_nvfp4_block_div((uint8_t)v, c->ws2);
    for (int64_t r = r0; r < r1; r++) {
        for (int64_t b = 0; b < nb; b++) {
            int64_t off = r * c->cols + b * BLK;
            float x[BLK];
            int bad;
            load16(c->w, c->dt, off, x);
            uint32_t am = amax16(x, &bad);
            if (bad) {
                for (int i = 0; i < BLK; i++)
                    if (!isfinite(x[i])) {
                        atomic_min_i64(&c->bad, off + i);
                        return;
                    }
            }
            if (am > c->limit_bits)
                atomic_max_u32(&c->over, am);
            float htb[BLK * BLK];
            const float *h = NULL;
            if (c->hessian) {
                const float *hb = c->hessian + b * BLK * BLK;
                for (int i = 0; i < BLK; i++)
                    for (int j = 0; j < BLK; j++)
                        htb[j * BLK + i] = hb[i * BLK + j];
                h = htb;
            }
            float ax[BLK];
            for (int i = 0; i < BLK; i++)
                ax[i] = fabsf(x[i]);
            /* Once every |x| is below a candidate's first threshold, all its codes are 0, and so are
             * those of every larger candidate (thresholds grow with the divisor): the same loss
             * (dw = x) again, which cannot beat the first of them.  Stopping there is exact. */
            const float bamax = lwq_bits_f32(am);
            /* Pruning of strongly saturated candidates (plain squared error only; exact).  The
             * loss is a float sum of non-negative terms, so it is at least the computed term of
             * the block's largest element, which for a divisor d with bamax >= 12 d saturates to
             * code 6: t = fl(fl(bamax - fl(6 d))^2) >= (bamax - 6 d)^2 (1 - 2^-24)^5, with no
             * cancellation since 6 d <= bamax - 6 d; the bound below uses 1 - 2^-21 to absorb its
             * own double rounding.  A candidate whose bound exceeds the loss `ref` of another
             * candidate (the smallest unsaturated one, which the loop evaluates) is strictly worse
             * than the final best, so skipping it changes neither the argmin nor how ties resolve.
             * Natural scale bytes sit high in 1..126, so this skips most of the sweep (2x
             * measured; a bound over the whole E2M1 grid pruned more but cost more than it saved). */
            double ref = INFINITY;
            if (!h) {
                int v0 = 1;
                while (v0 < LWQ_E4M3_NPOS && 6.0 * (double)dtab[v0] < (double)bamax)
                    v0++;
                ref = (double)sweep_loss(x, ax, dtab[v0], c->thr[v0], NULL);
            }
            int best = 0;
            float best_loss = INFINITY;
            for (int v = 1; v <= LWQ_E4M3_NPOS && (v == 1 || !(bamax < c->thr[v - 1][0])); v++) {
                if ((double)bamax >= 12.0 * (double)dtab[v]) {
                    double dwt = (double)bamax - 6.0 * (double)dtab[v];
                    if (dwt * dwt * (1.0 - 0x1p-21) > ref)
                        continue;
                }
                float l = sweep_loss(x, ax, dtab[v], c->thr[v], h);
                if (best == 0) {
                    best = v;
                    best_loss = l;
                    continue;
                }
                if (l < best_loss) { /* strict: ties keep the smaller byte */
                    best = v;
                    best_loss = l;
                }
            }
            if (c->scale)
                c->scale[r * nb + b] = (uint8_t)best;
            if (c->out_amax)
                c->out_amax[r * nb + b] = lwq_nvfp4_sweep_amax((uint8_t)best, c->global_eff);
        }
    }
}

int lwq_quant_nvfp4_sweep(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                          const float *hessian, const char *name, float *block_amax, uint8_t *scale,
                          lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, w, dt, rows, cols, 1, err);
    if (rc < 0)
        return rc;
    float g;
    int zero = lwq_quant_check_global(name, global_amax, LWQ_QUANT_SEARCH_AMAX_MAX, &g, err);
    if (zero < 0)
        return zero;
    if (hessian) {
        for (int64_t i = 0; i < cols * BLK; i++)
            if (!isfinite(hessian[i]))
                return lwq_errf(err, LWQ_ENUMERIC, "tensor %s: Hessian entry %lld of input block %lld is not finite",
                                lwq_quant_name(name), (long long)(i % (BLK * BLK)), (long long)(i / (BLK * BLK)));
    }
    float thr[LWQ_E4M3_NPOS + 1][LWQ_E2M1_NTHR];
    search_thresholds(lwq_nvfp4_ws2(g), thr);
    nvfp4_ctx c = {.w = w, .dt = dt, .cols = cols, .ws2 = lwq_nvfp4_ws2(g), .limit_bits = lwq_f32_bits(global_amax),
                   .global_eff = g, .hessian = hessian, .thr = (const float(*)[LWQ_E2M1_NTHR])thr, .scale = scale,
                   .out_amax = block_amax};
    nvfp4_ctx_init(&c);
    /* ~126x the work of the max path per element: smaller chunks still pay off */
    lwq_parallel_for(rows, min_chunk_rows(cols) / 64 + 1, sweep_rows, &c);
    rc = nvfp4_finish(&c, name, global_amax, cols / BLK, err);
    if (rc < 0)
        return rc;
    return zero ? LWQ_QUANT_ZERO_TENSOR : 0;
}

/* ---- NVFP4 per-block mse -------------------------------------------------------------------- */

LWQ_CLONES static void mse_blocks_rows(void *vc, int64_t r0, int64_t r1, int tid)
{
    nvfp4_ctx *c = vc;
    const int64_t nb = c->cols / BLK;
    float mult[LWQ_MSE_STEPS];
    const int nmult = c->mult ? c->nmult : LWQ_MSE_STEPS;
    for (int k = 0; k < nmult; k++)
        mult[k] = c->mult ? c->mult[k] : lwq_mse_multiplier(k);
    for (int64_t r = r0; r < r1; r++) {
        for (int64_t b = 0; b < nb; b++) {
            int64_t off = r * c->cols + b * BLK;
            float x[BLK], ax[BLK];
            int bad;
            load16(c->w, c->dt, off, x);
            uint32_t am = amax16(x, &bad);
            if (bad) {
                for (int i = 0; i < BLK; i++)
                    if (!isfinite(x[i])) {
                        atomic_min_i64(&c->bad, off + i);
                        return;
                    }
            }
            if (am > c->limit_bits)
                atomic_max_u32(&c->over, am);
            for (int i = 0; i < BLK; i++)
                ax[i] = fabsf(x[i]);
            const float bamax = lwq_bits_f32(am);
            float best_a = bamax * mult[0], best_loss = 0.0f;
            int prev = -1;
            for (int k = 0; k < nmult; k++) {
                float a = bamax * mult[k];
                int s = c->fp8max > 0.0f ? lwq_nvfp4_scale_static_m(a, c->global_eff, c->fp8max)
                                         : lwq_nvfp4_scale_static(a, c->global_eff);
                if (s == prev) /* same byte, same loss: a tie, which the first candidate wins */
                    continue;
                prev = s;
                float l = sweep_loss(x, ax, lwq_nvfp4_block_div((uint8_t)s, c->ws2), c->thr[s], NULL);
                if (k == 0 || l < best_loss) {
                    best_a = a;
                    best_loss = l;
                }
                if (bamax < c->thr[s][0]) /* all codes 0 here and beyond (see sweep_rows) */
                    break;
            }
            c->out_amax[r * nb + b] = best_a;
        }
    }
}

static int mse_run(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax, float fp8max,
                   const float *mult, int nmult, const char *name, float *block_amax, lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, w, dt, rows, cols, 1, err);
    if (rc < 0)
        return rc;
    if (!block_amax)
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: NULL output buffer", lwq_quant_name(name));
    float g;
    int zero = lwq_quant_check_global(name, global_amax, LWQ_QUANT_SEARCH_AMAX_MAX, &g, err);
    if (zero < 0)
        return zero;
    float thr[LWQ_E4M3_NPOS + 1][LWQ_E2M1_NTHR];
    float ws2 = fp8max > 0.0f ? lwq_nvfp4_ws2_m(g, fp8max) : lwq_nvfp4_ws2(g);
    search_thresholds(ws2, thr);
    nvfp4_ctx c = {.w = w, .dt = dt, .cols = cols, .ws2 = ws2, .limit_bits = lwq_f32_bits(global_amax),
                   .global_eff = g, .thr = (const float(*)[LWQ_E2M1_NTHR])thr, .out_amax = block_amax,
                   .fp8max = fp8max, .mult = mult, .nmult = nmult};
    nvfp4_ctx_init(&c);
    lwq_parallel_for(rows, min_chunk_rows(cols) / 8 + 1, mse_blocks_rows, &c);
    rc = nvfp4_finish(&c, name, global_amax, cols / BLK, err);
    if (rc < 0)
        return rc;
    return zero ? LWQ_QUANT_ZERO_TENSOR : 0;
}

int lwq_quant_nvfp4_mse(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                        const char *name, float *block_amax, lwq_error *err)
{
    return mse_run(w, dt, rows, cols, global_amax, 0.0f, NULL, 0, name, block_amax, err);
}

int lwq_quant_nvfp4_mse46(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                          const float *mult, int nmult, const char *name, float *block_amax, lwq_error *err)
{
    if (mult && (nmult < 1 || nmult > LWQ_MSE_STEPS))
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: %d amax candidates (1 to %d)", lwq_quant_name(name), nmult,
                        LWQ_MSE_STEPS);
    for (int k = 0; mult && k < nmult; k++)
        if (!(mult[k] > 0.0f) || !isfinite(mult[k]))
            return lwq_errf(err, LWQ_EINVAL, "tensor %s: amax candidate %d is %g (finite and > 0)",
                            lwq_quant_name(name), k, (double)mult[k]);
    return mse_run(w, dt, rows, cols, global_amax, LWQ_NVFP4_46_FP8MAX, mult, nmult, name, block_amax, err);
}

/* ---- NVFP4 dequant -------------------------------------------------------------------------- */

static inline void store_f(void *out, lwq_dtype dt, int64_t i, float v)
{
    if (dt == LWQ_BF16)
        ((uint16_t *)out)[i] = lwq_f32_to_bf16(v);
    else if (dt == LWQ_F16)
        ((uint16_t *)out)[i] = lwq_f32_to_f16(v);
    else
        ((float *)out)[i] = v;
}

typedef struct dq_ctx {
    const uint8_t *q, *scale;
    float ws;
    int64_t cols;
    lwq_dtype dt;
    void *out;
} dq_ctx;

LWQ_CLONES static void nvfp4_dq_rows(void *vc, int64_t r0, int64_t r1, int tid)
{
    dq_ctx *c = vc;
    const int64_t nb = c->cols / BLK;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t b = 0; b < nb; b++) {
            float d = lwq_nvfp4_block_div(c->scale[r * nb + b], c->ws);
            int64_t off = r * c->cols + b * BLK;
            for (int i = 0; i < BLK; i++) {
                uint8_t byte = c->q[(off + i) / 2];
                store_f(c->out, c->dt, off + i, lwq_e2m1_to_f32((uint8_t)((i & 1) ? byte >> 4 : byte & 15)) * d);
            }
        }
}

int lwq_quant_nvfp4_dequant(const uint8_t *packed, const uint8_t *scale, float ws2, int64_t rows, int64_t cols,
                            lwq_dtype out_dt, void *out, lwq_error *err)
{
    int rc = lwq_quant_check_dq(packed, out, out_dt, rows, cols, 1, ws2, err);
    if (rc < 0)
        return rc;
    if (!scale)
        return lwq_errf(err, LWQ_EINVAL, "dequantize: NULL block scales");
    dq_ctx c = {.q = packed, .scale = scale, .ws = ws2, .cols = cols, .dt = out_dt, .out = out};
    lwq_parallel_for(rows, min_chunk_rows(cols), nvfp4_dq_rows, &c);
    return 0;
}

/* ---- Hessian statistics --------------------------------------------------------------------- */

typedef struct hess_ctx {
    const void *x;
    lwq_dtype dt;
    int64_t tokens, cols;
    double *h;
    _Atomic int64_t bad;
} hess_ctx;

LWQ_CLONES static void hess_blocks(void *vc, int64_t b0, int64_t b1, int tid)
{
    hess_ctx *c = vc;
    for (int64_t t = 0; t < c->tokens; t++)
        for (int64_t b = b0; b < b1; b++) {
            float x[BLK];
            int bad;
            load16(c->x, c->dt, t * c->cols + b * BLK, x);
            amax16(x, &bad);
            if (bad) {
                for (int i = 0; i < BLK; i++)
                    if (!isfinite(x[i]))
                        atomic_min_i64(&c->bad, t * c->cols + b * BLK + i);
                return;
            }
            double *h = c->h + b * BLK * BLK;
            for (int i = 0; i < BLK; i++)
                for (int j = 0; j < BLK; j++)
                    h[i * BLK + j] += (double)x[i] * (double)x[j]; /* exact product */
        }
}

int lwq_quant_hessian_accumulate(const void *x, lwq_dtype dt, int64_t tokens, int64_t cols, double *h_sum,
                                 const char *name, lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, x, dt, tokens, cols, 1, err);
    if (rc < 0)
        return rc;
    if (!h_sum)
        return lwq_errf(err, LWQ_EINVAL, "activations of %s: NULL Hessian buffer", lwq_quant_name(name));
    hess_ctx c = {.x = x, .dt = dt, .tokens = tokens, .cols = cols, .h = h_sum};
    atomic_init(&c.bad, INT64_MAX);
    lwq_parallel_for(cols / BLK, 1, hess_blocks, &c);
    if (atomic_load(&c.bad) != INT64_MAX)
        return lwq_errf(err, LWQ_ENUMERIC, "activations of %s: non-finite value at token %lld, column %lld",
                        lwq_quant_name(name), (long long)(atomic_load(&c.bad) / cols),
                        (long long)(atomic_load(&c.bad) % cols));
    return 0;
}

int lwq_quant_hessian_finalize(const double *h_sum, int64_t ntokens, int64_t cols, float *h, const char *name,
                               lwq_error *err)
{
    if (ntokens <= 0)
        return lwq_errf(err, LWQ_ENUMERIC, "Hessian of %s: no calibration tokens were accumulated",
                        lwq_quant_name(name));
    if (cols <= 0 || cols % BLK || !h_sum || !h)
        return lwq_errf(err, LWQ_EINVAL, "Hessian of %s: bad in-features %lld or NULL buffer", lwq_quant_name(name),
                        (long long)cols);
    for (int64_t i = 0; i < cols * BLK; i++) {
        float v = (float)(h_sum[i] / (double)ntokens);
        if (!isfinite(v))
            return lwq_errf(err, LWQ_ENUMERIC, "Hessian of %s: entry %lld of input block %lld overflows float32",
                            lwq_quant_name(name), (long long)(i % (BLK * BLK)), (long long)(i / (BLK * BLK)));
        h[i] = v;
    }
    return 0;
}
