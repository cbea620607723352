/* kernels/cpu/gptq/gptq_cpu.c — the GPTQ sweep of kernels/gptq.h (NVFP4 and FP8 codes).
 *
 * GPTQ's updates never mix rows: row r's result depends on row r of W and on the shared factor U
 * only.  Threads therefore take tiles of rows, and each tile runs the whole sweep in double
 * precision: for each block of 128 visited columns, column by column quantize, compute the error,
 * update the rest of the block at once; then apply the block's errors to the columns after it
 * (the lazy batch update: U's block rows are read once per tile instead of once per column).
 * Every element receives its updates one subtraction at a time with k ascending, exactly as in
 * the unblocked algorithm, so tiling, blocking and threads change no bit.  Compiled with
 * -ffp-contract=off (CMakeLists.txt). */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/gptq.h"
#include "kernels/quant.h"
#include "kernels/quant_check.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LWQ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LWQ_CLONES
#endif

#define BLK LWQ_NVFP4_BLOCK
#define TILE 8 /* rows per tile: U's block rows are reused across them */

typedef struct sweep_ctx {
    const void *w;
    lwq_dtype dt;
    int64_t rows, cols;
    const int64_t *perm, *inv;  /* visiting order and its inverse */
    const int64_t *first;       /* NVFP4: per 16-block, the visiting position of its first column */
    const double *u;
    const uint8_t *dead;
    int fp8;
    float ws2;                  /* NVFP4 weight_scale_2, or FP8 weight_scale */
    uint8_t *packed, *scale;    /* NVFP4 outputs */
    uint8_t *q;                 /* FP8 output */
    _Atomic int64_t bad;        /* smallest flat index of a NaN/Inf weight */
    _Atomic int nomem;
} sweep_ctx;

static void atomic_min_i64(_Atomic int64_t *a, int64_t v)
{
    int64_t cur = atomic_load(a);
    while (v < cur && !atomic_compare_exchange_weak(a, &cur, v)) {
    }
}

/* The value column position p (>= i2, outside the current block) of one row would have now in
 * the unblocked sweep: its stored value less the pending updates of block columns i1..i-1. */
static double pending_value(const double *wr, const double *er, const double *u, int64_t n, int64_t p, int64_t i1,
                            int64_t i)
{
    double v = wr[p];
    for (int64_t k = i1; k < i; k++)
        v = v - er[k - i1] * u[k * n + p];
    return v;
}

/* NVFP4 scale byte of original block b for one row, from the block's current values. */
static uint8_t block_scale(const sweep_ctx *c, const double *wr, const double *er, int64_t b, int64_t i1, int64_t i2,
                           int64_t i)
{
    float am = 0.0f;
    for (int j = 0; j < BLK; j++) {
        int64_t p = c->inv[b * BLK + j];
        double v = p < i2 ? wr[p] : pending_value(wr, er, c->u, c->cols, p, i1, i);
        float a = fabsf((float)v);
        am = a > am ? a : am;
    }
    return lwq_nvfp4_scale_max(am, c->ws2);
}

LWQ_CLONES static void sweep_tiles(void *vc, int64_t t0, int64_t t1, int tid)
{
    sweep_ctx *c = vc;
    const int64_t n = c->cols, nb = n / BLK;
    double *w = malloc((size_t)(TILE * n) * sizeof *w);
    double *e = malloc((size_t)(TILE * LWQ_GPTQ_BLOCK) * sizeof *e);
    uint8_t *sb = c->fp8 ? NULL : malloc((size_t)(TILE * nb));
    if (!w || !e || (!c->fp8 && !sb)) {
        atomic_store(&c->nomem, 1);
        goto out;
    }
    for (int64_t t = t0; t < t1; t++) {
        const int64_t r0 = t * TILE, nr = c->rows - r0 < TILE ? c->rows - r0 : TILE;
        for (int64_t r = 0; r < nr; r++)
            for (int64_t p = 0; p < n; p++) {
                int64_t col = c->perm[p];
                float v = lwq_load_f(c->w, c->dt, (size_t)((r0 + r) * n + col));
                if (!isfinite(v)) {
                    atomic_min_i64(&c->bad, (r0 + r) * n + col);
                    goto out;
                }
                w[r * n + p] = c->dead && c->dead[col] ? 0.0 : (double)v;
            }
        for (int64_t i1 = 0; i1 < n; i1 += LWQ_GPTQ_BLOCK) {
            const int64_t i2 = n - i1 < LWQ_GPTQ_BLOCK ? n : i1 + LWQ_GPTQ_BLOCK;
            for (int64_t i = i1; i < i2; i++) {
                const double *ui = c->u + i * n;
                const double uii = ui[i];
                const int64_t col = c->perm[i];
                for (int64_t r = 0; r < nr; r++) {
                    double *wr = w + r * n, *er = e + r * LWQ_GPTQ_BLOCK;
                    const int64_t row = r0 + r;
                    float x = (float)wr[i], qv;
                    if (c->fp8) {
                        uint8_t code = lwq_fp8_quant_ref(x, c->ws2);
                        c->q[row * n + col] = code;
                        qv = lwq_e4m3_to_f32(code) * c->ws2;
                    } else {
                        int64_t b = col / BLK;
                        if (c->first[b] == i)
                            sb[r * nb + b] = block_scale(c, wr, er, b, i1, i2, i);
                        float d = lwq_nvfp4_block_div(sb[r * nb + b], c->ws2);
                        uint8_t code = lwq_e2m1_from_f32(x / d);
                        uint8_t *pk = c->packed + (row * n + col) / 2;
                        *pk = (col & 1) ? (uint8_t)((*pk & 0x0f) | (code << 4)) : (uint8_t)((*pk & 0xf0) | code);
                        qv = lwq_e2m1_to_f32(code) * d;
                    }
                    const double err = (wr[i] - (double)qv) / uii;
                    er[i - i1] = err;
                    for (int64_t j = i + 1; j < i2; j++)
                        wr[j] = wr[j] - err * ui[j];
                }
            }
            /* lazy batch: the block's errors reach the columns after it, k ascending */
            for (int64_t k = i1; k < i2; k++) {
                const double *uk = c->u + k * n;
                for (int64_t r = 0; r < nr; r++) {
                    double *wr = w + r * n;
                    const double err = e[r * LWQ_GPTQ_BLOCK + k - i1];
                    for (int64_t j = i2; j < n; j++)
                        wr[j] = wr[j] - err * uk[j];
                }
            }
        }
        if (!c->fp8)
            for (int64_t r = 0; r < nr; r++)
                memcpy(c->scale + (r0 + r) * nb, sb + r * nb, (size_t)nb);
    }
out:
    free(w);
    free(e);
    free(sb);
}

static int run(sweep_ctx *c, const char *name, lwq_error *err)
{
    const int64_t n = c->cols;
    int64_t *inv = malloc((size_t)n * sizeof *inv);
    int64_t *first = c->fp8 ? NULL : malloc((size_t)(n / BLK) * sizeof *first);
    if (!inv || (!c->fp8 && !first)) {
        free(inv);
        free(first);
        return lwq_errf(err, LWQ_ENOMEM, "GPTQ of %s: out of memory", lwq_quant_name(name));
    }
    for (int64_t p = 0; p < n; p++)
        inv[p] = -1;
    for (int64_t p = 0; p < n; p++) {
        if (c->perm[p] < 0 || c->perm[p] >= n || inv[c->perm[p]] >= 0) {
            free(inv);
            free(first);
            return lwq_errf(err, LWQ_EINVAL, "GPTQ of %s: the column order is not a permutation", lwq_quant_name(name));
        }
        inv[c->perm[p]] = p;
    }
    for (int64_t b = 0; first && b < n / BLK; b++) {
        first[b] = n;
        for (int j = 0; j < BLK; j++)
            first[b] = inv[b * BLK + j] < first[b] ? inv[b * BLK + j] : first[b];
    }
    for (int64_t i = 0; i < n; i++)
        if (!(c->u[i * n + i] > 0.0) || !isfinite(c->u[i * n + i])) {
            free(inv);
            free(first);
            return lwq_errf(err, LWQ_EINVAL, "GPTQ of %s: factor diagonal %lld is not positive", lwq_quant_name(name),
                            (long long)i);
        }
    c->inv = inv;
    c->first = first;
    atomic_init(&c->bad, INT64_MAX);
    atomic_init(&c->nomem, 0);
    lwq_parallel_for((c->rows + TILE - 1) / TILE, 1, sweep_tiles, c);
    free(inv);
    free(first);
    if (atomic_load(&c->nomem))
        return lwq_errf(err, LWQ_ENOMEM, "GPTQ of %s: out of memory", lwq_quant_name(name));
    if (atomic_load(&c->bad) != INT64_MAX)
        return lwq_quant_err_nonfinite(name, atomic_load(&c->bad), n, err);
    return 0;
}

int lwq_gptq_nvfp4(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax, const int64_t *perm,
                   const double *u, const uint8_t *dead, const char *name, uint8_t *packed, uint8_t *scale,
                   float *ws2, lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, w, dt, rows, cols, 1, err);
    if (rc < 0)
        return rc;
    if (!perm || !u || !packed || !scale || !ws2)
        return lwq_errf(err, LWQ_EINVAL, "GPTQ of %s: NULL buffer", lwq_quant_name(name));
    float g;
    int zero = lwq_quant_check_global(name, global_amax, INFINITY, &g, err);
    if (zero < 0)
        return zero;
    sweep_ctx c = {.w = w, .dt = dt, .rows = rows, .cols = cols, .perm = perm, .u = u, .dead = dead,
                   .ws2 = lwq_nvfp4_ws2(g), .packed = packed, .scale = scale};
    if ((rc = run(&c, name, err)) < 0)
        return rc;
    *ws2 = c.ws2;
    return zero ? LWQ_QUANT_ZERO_TENSOR : 0;
}

int lwq_gptq_fp8(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float amax, const int64_t *perm,
                 const double *u, const uint8_t *dead, const char *name, uint8_t *q, float *weight_scale,
                 lwq_error *err)
{
    int rc = lwq_quant_check_shape(name, w, dt, rows, cols, 0, err);
    if (rc < 0)
        return rc;
    if (!perm || !u || !q || !weight_scale)
        return lwq_errf(err, LWQ_EINVAL, "GPTQ of %s: NULL buffer", lwq_quant_name(name));
    float g;
    int zero = lwq_quant_check_global(name, amax, INFINITY, &g, err);
    if (zero < 0)
        return zero;
    sweep_ctx c = {.w = w, .dt = dt, .rows = rows, .cols = cols, .perm = perm, .u = u, .dead = dead, .fp8 = 1,
                   .ws2 = g / LWQ_E4M3_MAX, .q = q};
    if (!(c.ws2 > 0.0f))
        return lwq_errf(err, LWQ_ENUMERIC, "GPTQ of %s: amax %g gives a zero scale", lwq_quant_name(name), (double)g);
    if ((rc = run(&c, name, err)) < 0)
        return rc;
    *weight_scale = c.ws2;
    return zero ? LWQ_QUANT_ZERO_TENSOR : 0;
}

static const lwq_gptq_ops host_gptq = {"host", lwq_gptq_factor, lwq_gptq_nvfp4, lwq_gptq_fp8};

const lwq_gptq_ops *lwq_gptq_host_ops(void) { return &host_gptq; }
