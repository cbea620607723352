/* kernels/cpu/quant_cpu.c — CPU implementation of kernels/quant.h, but for the NVFP4 block
 * searches (sweep, local_hessian, mse: kernels/cpu/quant_search_cpu.c).
 *
 * Every loop is over rows (or input blocks) on the core/parallel.h pool, and every row's output
 * depends only on that row, so results do not depend on the thread count.  The per-element work
 * calls the LWQ_HD functions of layout/quant_formats.h, the same ones the CUDA kernels call; the
 * inner loops are fixed 16-element loops over plain arrays so that GCC vectorizes them (the
 * division `x / d` stays a true division: a reciprocal would change results).  Workers report
 * bad input through atomics holding the smallest offending index, so the error message is the
 * same whatever the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel.h"
#include "kernels/cpu/quant_cpu_internal.h"
#include "kernels/quant.h"
#include "kernels/quant_check.h"

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

int lwq_cpu_nvfp4_finish(nvfp4_ctx *c, const char *name, float given_global, int64_t nb, lwq_error *err)
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
    rc = lwq_cpu_nvfp4_finish(&c, name, global_amax, cols / BLK, err);
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
