/* kernels/cpu/quant/quant_fp8_cpu.c — CPU implementation of the FP8 per-tensor part of kernels/quant.h:
 * quantization, the `mse` scale search and dequantization.  Threads over rows; each row's result
 * depends only on that row, and the search's per-row losses are added in row order afterwards,
 * so the chosen scale does not depend on the thread count. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/quant.h"
#include "kernels/quant_check.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LWQ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LWQ_CLONES
#endif

#define LANES 16

typedef struct fp8_ctx {
    const void *w;
    lwq_dtype dt;
    int64_t cols;
    float ws;                   /* quantization: weight_scale */
    uint8_t *q;
    const float *cand_scale;    /* mse: (ncand,) candidate scales */
    int ncand;
    double *row_loss;           /* mse: (rows, ncand) */
    _Atomic int64_t bad;        /* smallest flat index of a NaN/Inf */
    _Atomic uint32_t amax;      /* max |w| as bits */
    _Atomic int nomem;
} fp8_ctx;

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

static int64_t min_rows(int64_t cols) { return cols >= 16384 ? 1 : 16384 / cols; }

/* Record the first non-finite element of row r (called only when the row has one). */
static void report_bad_row(fp8_ctx *c, int64_t r)
{
    for (int64_t j = 0; j < c->cols; j++)
        if (!isfinite(lwq_load_f(c->w, c->dt, (size_t)(r * c->cols + j)))) {
            atomic_min_i64(&c->bad, r * c->cols + j);
            return;
        }
}

/* One row: q[j] = e4m3(round_dt(x[j] / ws)); m = running max |x| bits (NaN/Inf make it >= 0x7f800000).  The dtype branches are
 * outside the loops, and the body runs in fixed 16-element steps (plus a tail) because GCC's -O2
 * cost model only vectorizes loops whose trip count is a known multiple of the vector width. */
#define CHUNK 64
#define FP8_ROW_LOOP(LOAD, RND)                                                                                 \
    {                                                                                                        \
        int64_t j = 0;                                                                                       \
        for (; j + CHUNK <= n; j += CHUNK) {                                                                 \
            float x[CHUNK];                                                                                  \
            int32_t t[CHUNK];                                                                                \
            for (int l = 0; l < CHUNK; l++)                                                                  \
                x[l] = LOAD(j + l);                                                                          \
            for (int l = 0; l < CHUNK; l++)                                                                  \
                t[l] = lwq_e4m3_from_f32_i32(RND(x[l] / ws));                                                \
            for (int k = 0; k < CHUNK; k += LANES)                                                           \
                for (int l = 0; l < LANES; l++) {                                                            \
                    int32_t a = (int32_t)(lwq_f32_bits(x[k + l]) & 0x7fffffffu);                             \
                    mv[l] = a > mv[l] ? a : mv[l];                                                           \
                }                                                                                            \
            for (int l = 0; l < CHUNK; l++)                                                                  \
                q[j + l] = (uint8_t)t[l];                                                                    \
        }                                                                                                    \
        for (; j < n; j++) {                                                                                 \
            float x = LOAD(j);                                                                               \
            int32_t a = (int32_t)(lwq_f32_bits(x) & 0x7fffffffu);                                            \
            mv[0] = a > mv[0] ? a : mv[0];                                                                   \
            q[j] = lwq_e4m3_from_f32(RND(x / ws));                                                           \
        }                                                                                                    \
    }
/* round_dt: the quotient is rounded to the weight's own dtype before the E4M3 cast, as Model
 * Optimizer's export computes it: to_quantized_weight (modelopt/torch/export/quant_utils.py) does
 * (weight / weights_scaling_factor).to(torch.float8_e4m3fn), and a BF16 tensor divided by a 0-dim
 * F32 tensor is a BF16 tensor in torch -- two roundings, BF16 then E4M3 (F32 sources: one). */
#define RND_BF16(V) lwq_bf16_to_f32(lwq_f32_to_bf16(V))
#define RND_F16(V) lwq_f16_to_f32(lwq_f32_to_f16(V))
#define RND_F32(V) (V)
#define LD_BF16(J) lwq_bf16_to_f32(s[J])
#define LD_F16(J) lwq_f16_to_f32(s[J])
#define LD_F32(J) s[J]

LWQ_CLONES static void fp8_rows(void *vc, int64_t r0, int64_t r1, int tid)
{
    fp8_ctx *c = vc;
    const int64_t n = c->cols;
    const float ws = c->ws;
    int32_t mv[LANES] = {0}; /* lane-wise running max |x| bits; reduced once per row */
    int32_t m = 0;
    for (int64_t r = r0; r < r1; r++) {
        uint8_t *q = c->q + r * n;
        if (c->dt == LWQ_BF16) {
            const uint16_t *s = (const uint16_t *)c->w + r * n;
            FP8_ROW_LOOP(LD_BF16, RND_BF16)
        } else if (c->dt == LWQ_F16) {
            const uint16_t *s = (const uint16_t *)c->w + r * n;
            FP8_ROW_LOOP(LD_F16, RND_F16)
        } else {
            const float *s = (const float *)c->w + r * n;
            FP8_ROW_LOOP(LD_F32, RND_F32)
        }
        for (int l = 0; l < LANES; l++)
            m = mv[l] > m ? mv[l] : m;
        if (m >= 0x7f800000) { /* NaN/Inf have the largest magnitude bits */
            report_bad_row(c, r);
            return;
        }
    }
    atomic_max_u32(&c->amax, (uint32_t)m);
}

int lwq_quant_fp8(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float amax, const char *name,
                  uint8_t *q, float *weight_scale, lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, w, dt, rows, cols, 0, err);
    if (rc < 0)
        return rc;
    if (!q || !weight_scale)
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: NULL output buffer", lwq_quant_name(name));
    float g;
    int zero = lwq_quant_check_global(name, amax, INFINITY, &g, err);
    if (zero < 0)
        return zero;
    fp8_ctx c = {.w = w, .dt = dt, .cols = cols, .ws = g / LWQ_E4M3_MAX, .q = q};
    atomic_init(&c.bad, INT64_MAX);
    atomic_init(&c.amax, 0);
    lwq_parallel_for(rows, min_rows(cols), fp8_rows, &c);
    if (atomic_load(&c.bad) != INT64_MAX)
        return lwq_quant_err_nonfinite(name, atomic_load(&c.bad), cols, err);
    if (zero && atomic_load(&c.amax) != 0)
        return lwq_quant_err_over_global(name, lwq_bits_f32(atomic_load(&c.amax)), amax, err);
    *weight_scale = c.ws;
    return zero ? LWQ_QUANT_ZERO_TENSOR : 0;
}

/* ---- mse search ----------------------------------------------------------------------------- */

static double sum16_tree_d(double *t)
{
    for (int h = LANES / 2; h >= 1; h /= 2)
        for (int i = 0; i < h; i++)
            t[i] += t[i + h];
    return t[0];
}

LWQ_CLONES static void mse_rows(void *vc, int64_t r0, int64_t r1, int tid)
{
    fp8_ctx *c = vc;
    const int64_t n = c->cols, full = n / LANES * LANES;
    float *x = malloc((size_t)n * sizeof(float));
    if (!x) {
        atomic_store(&c->nomem, 1);
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        for (int64_t j = 0; j < n; j++)
            x[j] = lwq_load_f(c->w, c->dt, (size_t)(r * n + j));
        for (int k = 0; k < c->ncand; k++) {
            const float s = c->cand_scale[k];
            double lane[LANES] = {0};
            for (int64_t j = 0; j < full; j += LANES) {
                float e[LANES]; /* float stage and double stage apart: each loop vectorizes */
                for (int l = 0; l < LANES; l++)
                    e[l] = x[j + l] - lwq_e4m3_to_f32_i32(lwq_e4m3_from_f32_i32(x[j + l] / s)) * s;
                for (int l = 0; l < LANES; l++)
                    lane[l] += (double)e[l] * (double)e[l];
            }
            for (int64_t j = full; j < n; j++) {
                float e = x[j] - lwq_e4m3_to_f32(lwq_e4m3_from_f32(x[j] / s)) * s;
                lane[j - full] += (double)e * (double)e;
            }
            c->row_loss[r * c->ncand + k] = sum16_tree_d(lane);
        }
    }
    free(x);
}

int lwq_quant_fp8_mse(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const char *name, float *amax_out,
                      int *mult_index, lwq_error *err)
{
    return lwq_quant_fp8_mse_m(w, dt, rows, cols, NULL, 0, name, amax_out, mult_index, err);
}

int lwq_quant_fp8_mse_m(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, const float *mult, int nmult,
                        const char *name, float *amax_out, int *mult_index, lwq_error *err)
{
    if (mult && (nmult < 1 || nmult > LWQ_MSE_MAX_STEPS))
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: %d mse candidates (1 to %d)", lwq_quant_name(name), nmult,
                        LWQ_MSE_MAX_STEPS);
    const int nc = mult ? nmult : LWQ_MSE_STEPS;
    float amax;
    int rc = lwq_quant_check_shape(name, w, dt, rows, cols, 0, err);
    if (rc < 0)
        return rc;
    if (!amax_out)
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: NULL output", lwq_quant_name(name));
    rc = lwq_quant_amax(w, dt, rows * cols, name, &amax, NULL);
    if (rc == LWQ_ENUMERIC) {
        /* only on this error path: find the element again to name it as [row, col] */
        for (int64_t i = 0; i < rows * cols; i++)
            if (!isfinite(lwq_load_f(w, dt, (size_t)i)))
                return lwq_quant_err_nonfinite(name, i, cols, err);
    }
    if (rc < 0)
        return lwq_errf(err, rc, "tensor %s: amax failed", lwq_quant_name(name));
    if (amax == 0.0f) {
        *amax_out = 0.0f;
        if (mult_index)
            *mult_index = -1;
        return LWQ_QUANT_ZERO_TENSOR;
    }
    float g;
    float cand_amax[LWQ_MSE_MAX_STEPS], cand_scale[LWQ_MSE_MAX_STEPS];
    for (int k = 0; k < nc; k++) {
        cand_amax[k] = amax * (mult ? mult[k] : lwq_mse_multiplier(k));
        /* a usable scale: the first of the 39 (the smallest), every one of a caller's (which need
         * not ascend) */
        if ((k == 0 || mult) && (rc = lwq_quant_check_global(name, cand_amax[k], INFINITY, &g, err)) < 0)
            return rc;
        cand_scale[k] = cand_amax[k] / LWQ_E4M3_MAX;
    }
    if ((uint64_t)rows > SIZE_MAX / sizeof(double) / (uint64_t)nc)
        return lwq_errf(err, LWQ_ENOMEM, "tensor %s: %lld rows are too many for the mse search", lwq_quant_name(name),
                        (long long)rows);
    double *loss = malloc((size_t)rows * (size_t)nc * sizeof(double));
    if (!loss)
        return lwq_errf(err, LWQ_ENOMEM, "tensor %s: no memory for the mse search's %lld row losses",
                        lwq_quant_name(name), (long long)rows);
    fp8_ctx c = {.w = w, .dt = dt, .cols = cols, .cand_scale = cand_scale, .ncand = nc, .row_loss = loss};
    atomic_init(&c.nomem, 0);
    lwq_parallel_for(rows, min_rows(cols * nc), mse_rows, &c);
    if (atomic_load(&c.nomem)) {
        free(loss);
        return lwq_errf(err, LWQ_ENOMEM, "tensor %s: no memory for a row buffer of the mse search",
                        lwq_quant_name(name));
    }
    int best = lwq_quant_mse_argmin(loss, rows, nc); /* rows in ascending order */
    free(loss);
    /* searched in F32, kept in the weight's dtype: Model Optimizer's MseCalibrator multiplies
     * the amax (a 0-dim tensor of the weight's dtype) by an F32 multiplier, which stays F32 in
     * torch, then stores the winner into the weight quantizer's amax buffer, of the weight's
     * dtype: a BF16 weight exports a BF16 amax / 448 */
    *amax_out = lwq_round_to(cand_amax[best], dt);
    if (mult_index)
        *mult_index = best;
    return 0;
}

/* ---- dequant -------------------------------------------------------------------------------- */

typedef struct fp8_dq_ctx {
    const uint8_t *q;
    float ws;
    lwq_dtype dt;
    void *out;
} fp8_dq_ctx;

LWQ_CLONES static void fp8_dq_range(void *vc, int64_t b, int64_t e, int tid)
{
    fp8_dq_ctx *c = vc;
    if (c->dt == LWQ_BF16) {
        uint16_t *o = c->out;
        for (int64_t i = b; i < e; i++)
            o[i] = lwq_f32_to_bf16(lwq_e4m3_to_f32(c->q[i]) * c->ws);
    } else if (c->dt == LWQ_F16) {
        uint16_t *o = c->out;
        for (int64_t i = b; i < e; i++)
            o[i] = lwq_f32_to_f16(lwq_e4m3_to_f32(c->q[i]) * c->ws);
    } else {
        float *o = c->out;
        for (int64_t i = b; i < e; i++)
            o[i] = lwq_e4m3_to_f32(c->q[i]) * c->ws;
    }
}

int lwq_quant_fp8_dequant(const uint8_t *q, float weight_scale, int64_t n, lwq_dtype out_dt, void *out,
                          lwq_error *err)
{
    if (out_dt != LWQ_F32 && out_dt != LWQ_BF16 && out_dt != LWQ_F16)
        return lwq_errf(err, LWQ_EUNSUPPORTED, "dequantize: output dtype %s (expected F32, BF16 or F16)",
                        lwq_dtype_name(out_dt));
    if (n <= 0 || !q || !out)
        return lwq_errf(err, LWQ_EINVAL, "dequantize: empty tensor (%lld elements) or NULL buffer", (long long)n);
    if (!isfinite(weight_scale) || weight_scale <= 0.0f)
        return lwq_errf(err, LWQ_ENUMERIC, "dequantize: scale %g is not finite and > 0", (double)weight_scale);
    fp8_dq_ctx c = {.q = q, .ws = weight_scale, .dt = out_dt, .out = out};
    lwq_parallel_for(n, 1 << 16, fp8_dq_range, &c);
    return 0;
}
