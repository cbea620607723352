/* kernels/cpu/quant/quant_search_cpu.c — the NVFP4 block searches of kernels/quant.h on the CPU: the
 * FP8 scale sweep (plain and local_hessian) and the per-block `mse` multiplier search (with its
 * Four-over-Six form).
 *
 * Each block tries scale-byte candidates and keeps the one with the smallest loss, the first on
 * ties.  The losses are those of layout/format/quant_formats.h's reference functions, bit for bit
 * (sweep_loss).  The hot part evaluates 16 candidates of one block at once, a candidate per lane
 * (scan16): every lane performs the same IEEE single-precision operations in the same order as
 * sweep_loss does for its candidate (the 16-term halving tree included), so the losses, and the
 * choices, are unchanged; there is no horizontal reduction, and the Hessian product's 16 sums run
 * side by side instead of one after another.  The candidates a block evaluates, and their order,
 * are exactly those of the one-at-a-time loop (sweep_rows' comment says why the range is exact).
 * Loops are over rows on the core/parallel/parallel.h pool; each row's output depends only on that row. */
#include <math.h>
#include <stdlib.h>

#include "core/parallel/parallel.h"
#include "kernels/cpu/quant/quant_cpu_internal.h"
#include "kernels/quant_check.h"

/* Scale-byte candidates 1..126, padded so that a 16-lane chunk starting at any candidate stays in
 * the table (the lanes past 126 are never used). */
#define SCAN_N (LWQ_E4M3_NPOS + 1 + 16 + 1)

/* The search tables laid out by candidate: b[k][v] the k-th E2M1 threshold of byte v's divisor,
 * d[v] that divisor. */
typedef struct scan_tab {
    float b[LWQ_E2M1_NTHR][SCAN_N];
    float d[SCAN_N];
} scan_tab;

/* The loss of layout/format/quant_formats.h's lwq_nvfp4_block_sqerr_ref / _herr_ref, bit for bit,
 * written as lane-wise loops.  It works on magnitudes: IEEE division, multiplication and
 * subtraction are symmetric under a sign flip, so rounding |x| / d, times d, |x| minus that gives
 * exactly the magnitude of the signed error.  The rounding itself uses the divisor's E2M1
 * thresholds b (lwq_e2m1_round_thr == lwq_e2m1_round_mag(fl(|x| / d)), tested), which replaces
 * 126 x 16 divisions per block by comparisons.  For the Hessian loss the sign is put back (the
 * sign of a zero error may differ from _ref's; every term it touches is a zero either way).
 * (H dw)_i accumulates over j in ascending order for every i at once; the final sum is the same
 * halving tree.  ht: H transposed (ht[j*16 + i] = H[i][j]) so the lane-wise loop reads
 * contiguously.  The one-candidate form: scan16 is this for 16 candidates. */
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

/* 16 floats as one value: GCC's generic vectors, which each clone lowers to its own registers
 * (one zmm with AVX-512, two ymm with AVX2, four xmm in the default clone) and keeps there, where
 * arrays of 16 would live in memory.  Every operation is the IEEE one of each lane. */
/* the helpers below are always inlined: no call, so no ABI to warn about (GCC and clang) */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v16f __attribute__((vector_size(64)));

INLINE v16f vload(const float *p)
{
    v16f v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE v16f vsplat(float x)
{
    v16f v;
    for (int j = 0; j < 16; j++)
        v[j] = x;
    return v;
}

/* loss[j] = sweep_loss(x, ax, d[j], (b[0][j], ..., b[6][j]), H^T) for 16 candidates j, bit for
 * bit: lane j does candidate j's operations in sweep_loss's order.  b: 7 rows of `stride` floats
 * (candidate j's k-th threshold at b[k * stride + j]); d: (16,); h: H itself (h[i*16 + k] =
 * H[i][k]), or NULL for the squared error. */
INLINE void scan16(const float *x, const float *ax, const float *b, int stride, const float *d, const float *h,
                   float *loss)
{
    /* the rounding as plain lane loops: GCC turns each select into one compare and one masked
     * blend (with generic vectors it needs three operations) */
    float dwa[BLK][16], ta[BLK][16];
    for (int i = 0; i < BLK; i++) {
        const float a = ax[i];
        for (int j = 0; j < 16; j++) { /* lwq_e2m1_round_thr, lane-wise */
            float m = a >= b[j] ? 0.5f : 0.0f;
            m = a >= b[stride + j] ? 1.0f : m;
            m = a >= b[2 * stride + j] ? 1.5f : m;
            m = a >= b[3 * stride + j] ? 2.0f : m;
            m = a >= b[4 * stride + j] ? 3.0f : m;
            m = a >= b[5 * stride + j] ? 4.0f : m;
            m = a >= b[6 * stride + j] ? 6.0f : m;
            dwa[i][j] = a - m * d[j];
        }
    }
    if (!h) {
        for (int i = 0; i < BLK; i++)
            for (int j = 0; j < 16; j++)
                ta[i][j] = dwa[i][j] * dwa[i][j];
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 16; j++)
                ta[i][j] = ta[i][j] + ta[i + 8][j];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 16; j++)
                ta[i][j] = ta[i][j] + ta[i + 4][j];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 16; j++)
                ta[i][j] = ta[i][j] + ta[i + 2][j];
        for (int j = 0; j < 16; j++)
            loss[j] = ta[0][j] + ta[1][j];
        return;
    }
    /* the Hessian product in generic vectors, whose sums stay in registers */
    const v16f zero = vsplat(0.0f);
    v16f dw[BLK], t[BLK];
    for (int i = 0; i < BLK; i++)
        dw[i] = x[i] < 0.0f ? -vload(dwa[i]) : vload(dwa[i]);
    /* (H dw)_i accumulates over k in ascending order from +0, as sweep_loss's; four rows at a
     * time, so that four independent sums hide each add's latency */
    for (int i = 0; i < BLK; i += 4) {
        const float *h0 = h + i * BLK, *h1 = h0 + BLK, *h2 = h1 + BLK, *h3 = h2 + BLK;
        v16f a0 = zero + vsplat(h0[0]) * dw[0], a1 = zero + vsplat(h1[0]) * dw[0];
        v16f a2 = zero + vsplat(h2[0]) * dw[0], a3 = zero + vsplat(h3[0]) * dw[0];
        for (int k = 1; k < BLK; k++) {
            a0 = a0 + vsplat(h0[k]) * dw[k];
            a1 = a1 + vsplat(h1[k]) * dw[k];
            a2 = a2 + vsplat(h2[k]) * dw[k];
            a3 = a3 + vsplat(h3[k]) * dw[k];
        }
        t[i] = dw[i] * a0;
        t[i + 1] = dw[i + 1] * a1;
        t[i + 2] = dw[i + 2] * a2;
        t[i + 3] = dw[i + 3] * a3;
    }
    for (int i = 0; i < 8; i++)
        t[i] = t[i] + t[i + 8];
    for (int i = 0; i < 4; i++)
        t[i] = t[i] + t[i + 4];
    for (int i = 0; i < 2; i++)
        t[i] = t[i] + t[i + 2];
    v16f sum = t[0] + t[1];
    memcpy(loss, &sum, sizeof sum);
}

/* thr[v] = the E2M1 thresholds of scale byte v's divisor v * ws2 (v = 1..126; thr[0] unused),
 * and the same by candidate in *tab (padding: thresholds +inf, divisor 1). */
static void search_thresholds(float ws2, float thr[][LWQ_E2M1_NTHR], scan_tab *tab)
{
    for (int i = 0; i < LWQ_E2M1_NTHR; i++)
        thr[0][i] = INFINITY;
    for (int v = 1; v <= LWQ_E4M3_NPOS; v++)
        lwq_e2m1_thresholds(lwq_nvfp4_block_div((uint8_t)v, ws2), thr[v]);
    for (int v = 0; v < SCAN_N; v++) {
        int real = v >= 1 && v <= LWQ_E4M3_NPOS;
        for (int k = 0; k < LWQ_E2M1_NTHR; k++)
            tab->b[k][v] = real ? thr[v][k] : INFINITY;
        tab->d[v] = real ? lwq_nvfp4_block_div((uint8_t)v, ws2) : 1.0f;
    }
}

/* Which candidates a block evaluates: v in [*lo, *end), in ascending order.
 *  - end: once every |x| is below a candidate's first threshold, all its codes are 0, and so are
 *    those of every larger candidate (thresholds grow with the divisor): the same loss (dw = x)
 *    again, which cannot beat the first of them.  Stopping there is exact.  The one-at-a-time loop
 *    ran v = 1, 2, ... while v == 1 || bamax >= thr[v-1][0]; thr[v][0] does not decrease with v,
 *    so that is v < end, end = the first v >= 2 with bamax < thr[v-1][0] (127 if none).
 *  - lo: pruning of strongly saturated candidates (plain squared error only; exact).  The loss is
 *    a float sum of non-negative terms, so it is at least the computed term of the block's
 *    largest element, which for a divisor d with bamax >= 12 d saturates to code 6: t =
 *    fl(fl(bamax - fl(6 d))^2) >= (bamax - 6 d)^2 (1 - 2^-24)^5, with no cancellation since 6 d <=
 *    bamax - 6 d; the bound below uses 1 - 2^-21 to absorb its own double rounding.  A candidate
 *    whose bound exceeds the loss `ref` of another candidate (the smallest unsaturated one, v0) is
 *    strictly worse than the final best, so skipping it changes neither the argmin nor how ties
 *    resolve.  Both conditions hold for a prefix of the candidates (the divisor grows with v), v0
 *    is never skipped (its bound is below its own loss), and a skipped candidate is never where
 *    the loop would have stopped (bamax >= 12 d is above every first threshold), so the skipped
 *    ones are exactly v < lo.  Natural scale bytes sit high in 1..126, so this skips most of the
 *    sweep (2x measured; a bound over the whole E2M1 grid pruned more but cost more than it
 *    saved). */
INLINE void sweep_range(const float *x, const float *ax, float bamax, const float (*thr)[LWQ_E2M1_NTHR],
                        const float *dtab, int plain, int *lo, int *end)
{
    /* each a bisection for the first v where a condition that is false, then true, holds */
    int l = 2, e = LWQ_E4M3_NPOS + 1;
    while (l < e) {
        int v = l + (e - l) / 2;
        if (bamax < thr[v - 1][0])
            e = v;
        else
            l = v + 1;
    }
    *end = l;
    *lo = 1;
    if (!plain)
        return;
    const double am = (double)bamax;
    l = 1, e = LWQ_E4M3_NPOS; /* v0: the first v with 6 d >= bamax, or 126 */
    while (l < e) {
        int v = l + (e - l) / 2;
        if (!(6.0 * (double)dtab[v] < am))
            e = v;
        else
            l = v + 1;
    }
    const int v0 = l;
    const double ref = (double)sweep_loss(x, ax, dtab[v0], thr[v0], NULL);
    l = 1, e = v0; /* the first v not skipped */
    while (l < e) {
        int v = l + (e - l) / 2;
        double dwt = am - 6.0 * (double)dtab[v];
        if (!(am >= 12.0 * (double)dtab[v] && dwt * dwt * (1.0 - 0x1p-21) > ref))
            e = v;
        else
            l = v + 1;
    }
    *lo = l;
}

LWQ_CLONES static void sweep_rows(void *vc, int64_t r0, int64_t r1, int tid)
{
    nvfp4_ctx *c = vc;
    const scan_tab *tab = c->lanes;
    const int64_t nb = c->cols / BLK;
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
            const float *h = c->hessian ? c->hessian + b * BLK * BLK : NULL;
            float ax[BLK];
            for (int i = 0; i < BLK; i++)
                ax[i] = fabsf(x[i]);
            const float bamax = lwq_bits_f32(am);
            int lo, end;
            sweep_range(x, ax, bamax, c->thr, tab->d, !h, &lo, &end);
            int best = 0;
            float best_loss = INFINITY;
            for (int v0 = lo; v0 < end; v0 += 16) {
                float l[16];
                scan16(x, ax, &tab->b[0][v0], SCAN_N, &tab->d[v0], h, l);
                for (int j = 0; j < 16 && v0 + j < end; j++)
                    if (best == 0 || l[j] < best_loss) { /* strict: ties keep the smaller byte */
                        best = v0 + j;
                        best_loss = l[j];
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
    scan_tab tab;
    search_thresholds(lwq_nvfp4_ws2(g), thr, &tab);
    nvfp4_ctx c = {.w = w, .dt = dt, .cols = cols, .ws2 = lwq_nvfp4_ws2(g), .limit_bits = lwq_f32_bits(global_amax),
                   .global_eff = g, .hessian = hessian, .thr = (const float(*)[LWQ_E2M1_NTHR])thr, .lanes = &tab,
                   .scale = scale, .out_amax = block_amax};
    nvfp4_ctx_init(&c);
    /* ~126x the work of the max path per element: smaller chunks still pay off */
    lwq_parallel_for(rows, min_chunk_rows(cols) / 64 + 1, sweep_rows, &c);
    rc = lwq_cpu_nvfp4_finish(&c, name, global_amax, cols / BLK, err);
    if (rc < 0)
        return rc;
    return zero ? LWQ_QUANT_ZERO_TENSOR : 0;
}

/* ---- NVFP4 per-block mse -------------------------------------------------------------------- */

/* Block b's candidates are a_k = bamax * mult[k], k ascending, each mapped through the static path
 * to its scale byte s_k (non-decreasing in k, as a_k is).  The one-at-a-time loop skipped a k
 * whose byte equals the previous one (the same loss: a tie, which the first candidate wins) and
 * stopped after the first byte whose codes are all 0 (see sweep_range); it kept the first k of
 * smallest loss.  Here the losses of every byte from s_0 to the last one are computed 16 at a
 * time, and the same rule picks among the same candidates in the same order. */
#define MSE_LANES LWQ_MSE_MAX_STEPS /* up to 48 candidates (the default 39), padded to whole vectors */
_Static_assert(MSE_LANES % 16 == 0 && MSE_LANES >= LWQ_MSE_STEPS, "whole vectors, the default's 39 included");

LWQ_CLONES static void mse_blocks_rows(void *vc, int64_t r0, int64_t r1, int tid)
{
    nvfp4_ctx *c = vc;
    const scan_tab *tab = c->lanes;
    const int64_t nb = c->cols / BLK;
    float mult[MSE_LANES];
    const int nmult = c->mult ? c->nmult : LWQ_MSE_STEPS;
    for (int k = 0; k < MSE_LANES; k++) {
        int kk = k < nmult ? k : nmult - 1;
        mult[k] = c->mult ? c->mult[kk] : lwq_mse_multiplier(kk);
    }
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
            /* the candidates' bytes, up to and with the stop; their losses, byte by byte */
            /* every candidate's byte first, in fixed-length loops that vectorize (the lanes past
             * nmult repeat the last candidate and are not read) */
            float av[MSE_LANES];
            int32_t sv[MSE_LANES];
            for (int k = 0; k < MSE_LANES; k++)
                av[k] = bamax * mult[k];
            if (c->fp8max > 0.0f)
                for (int k = 0; k < MSE_LANES; k++)
                    sv[k] = lwq_nvfp4_scale_static_m(av[k], c->global_eff, c->fp8max);
            else
                for (int k = 0; k < MSE_LANES; k++)
                    sv[k] = lwq_nvfp4_scale_static(av[k], c->global_eff);
            int ss[MSE_LANES], n = 0, lo = LWQ_E4M3_NPOS, hi = 1;
            for (int k = 0; k < nmult; k++) {
                int s = sv[k];
                ss[n++] = s;
                lo = s < lo ? s : lo; /* (a caller's multipliers need not ascend) */
                hi = s > hi ? s : hi;
                if (bamax < c->thr[s][0])
                    break;
            }
            float loss[SCAN_N];
            for (int v0 = lo; v0 <= hi; v0 += 16)
                scan16(x, ax, &tab->b[0][v0], SCAN_N, &tab->d[v0], NULL, loss + v0);
            int best_k = 0;
            float best_loss = loss[ss[0]];
            for (int k = 1; k < n; k++)
                if (ss[k] != ss[k - 1] && loss[ss[k]] < best_loss) {
                    best_k = k;
                    best_loss = loss[ss[k]];
                }
            c->out_amax[r * nb + b] = bamax * mult[best_k];
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
    scan_tab tab;
    float ws2 = fp8max > 0.0f ? lwq_nvfp4_ws2_m(g, fp8max) : lwq_nvfp4_ws2(g);
    search_thresholds(ws2, thr, &tab);
    nvfp4_ctx c = {.w = w, .dt = dt, .cols = cols, .ws2 = ws2, .limit_bits = lwq_f32_bits(global_amax),
                   .global_eff = g, .thr = (const float(*)[LWQ_E2M1_NTHR])thr, .lanes = &tab,
                   .out_amax = block_amax, .fp8max = fp8max, .mult = mult, .nmult = nmult};
    nvfp4_ctx_init(&c);
    lwq_parallel_for(rows, min_chunk_rows(cols) / 8 + 1, mse_blocks_rows, &c);
    rc = lwq_cpu_nvfp4_finish(&c, name, global_amax, cols / BLK, err);
    if (rc < 0)
        return rc;
    return zero ? LWQ_QUANT_ZERO_TENSOR : 0;
}

int lwq_quant_nvfp4_mse(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                        const char *name, float *block_amax, lwq_error *err)
{
    return mse_run(w, dt, rows, cols, global_amax, 0.0f, NULL, 0, name, block_amax, err);
}

static int check_mult(const float *mult, int nmult, const char *name, lwq_error *err)
{
    if (mult && (nmult < 1 || nmult > LWQ_MSE_MAX_STEPS))
        return lwq_errf(err, LWQ_EINVAL, "tensor %s: %d amax candidates (1 to %d)", lwq_quant_name(name), nmult,
                        LWQ_MSE_MAX_STEPS);
    for (int k = 0; mult && k < nmult; k++)
        if (!(mult[k] > 0.0f) || !isfinite(mult[k]))
            return lwq_errf(err, LWQ_EINVAL, "tensor %s: amax candidate %d is %g (finite and > 0)",
                            lwq_quant_name(name), k, (double)mult[k]);
    return 0;
}

int lwq_quant_nvfp4_mse_m(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                          const float *mult, int nmult, const char *name, float *block_amax, lwq_error *err)
{
    int rc = check_mult(mult, nmult, name, err);
    return rc < 0 ? rc : mse_run(w, dt, rows, cols, global_amax, 0.0f, mult, nmult, name, block_amax, err);
}

int lwq_quant_nvfp4_mse46(const void *w, lwq_dtype dt, int64_t rows, int64_t cols, float global_amax,
                          const float *mult, int nmult, const char *name, float *block_amax, lwq_error *err)
{
    int rc = check_mult(mult, nmult, name, err);
    return rc < 0 ? rc
                  : mse_run(w, dt, rows, cols, global_amax, LWQ_NVFP4_46_FP8MAX, mult, nmult, name, block_amax, err);
}
