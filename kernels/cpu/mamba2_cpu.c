/* kernels/cpu/mamba2_cpu.c — the Mamba2 mixer's non-GEMM part on the host: the float32 reference
 * (kernels/mamba2.h, moved here from engine/forward/model_nemotron.c unchanged in its arithmetic)
 * and the CPU backend's mamba2 op, which reads its tensors into float32, runs the reference and
 * rounds the outputs once to their dtype.  The scan's per-ISA kernels are kernels/cpu/mamba2/;
 * the conv and norm rows are vectorized here by the compiler (LWQ_VEC), operation for operation;
 * perf/RESULTS.md (issue 35) has what it costs beside attention. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/gemm/gemm_isa.h"
#include "kernels/cpu/mamba2/mamba2_scan.h"
#include "kernels/cpu/vec_clones.h"
#include "kernels/mamba2.h"

/* torch.nn.functional.softplus (beta 1, threshold 20) */
static inline float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* The element-wise row loops below are LWQ_VEC (kernels/cpu/vec_clones.h): element by element,
 * the norm's sum of squares sequential, expf / log1pf libm calls, so every clone gives the bits
 * of the plain loop. */

typedef struct mamba_job {
    const lwq_mamba2_ref_args *a;
    int64_t I, C, W;
    const float *wt; /* (K, C): conv_w transposed, so a tap is one contiguous row */
    lwq_mamba2_scan_fn scan;
    float *scratch;  /* per thread: one scan state, `per` floats, 64-byte aligned */
    int64_t per;
    float *rowtmp;   /* per thread: max(C, I) floats */
    int64_t ntmp;
} mamba_job;

/* v[i] = round(v[i]) to act (lwq_round_to, element by element) */
LWQ_VEC static void round_row(float *restrict v, int64_t n, lwq_dtype act)
{
    if (act == LWQ_BF16) {
        for (int64_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            uint32_t r = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16, q = ((u >> 16) | 0x40u) << 16;
            u = (u & 0x7fffffffu) > 0x7f800000u ? q : r;
            memcpy(&v[i], &u, 4);
        }
    } else if (act == LWQ_F16) {
        for (int64_t i = 0; i < n; i++)
            v[i] = lwq_round_to(v[i], act);
    }
}

/* acc[c] = bias[c] (or 0), then acc[c] += w[q][c] * x_q[c] for each visible tap q ascending;
 * o = round(v * sigmoid(v)) with v = round(acc): the scalar reference's order per channel. */
LWQ_VEC static void conv_row(const mamba_job *j, int64_t s, int64_t t, float *restrict o, float *restrict e)
{
    const lwq_mamba2_ref_args *a = j->a;
    const int64_t T = a->seq, C = j->C, K = a->kernel, W = j->W;
    if (a->conv_b)
        memcpy(o, a->conv_b, (size_t)C * sizeof(float));
    else
        memset(o, 0, (size_t)C * sizeof(float));
    for (int64_t q = 0; q < K; q++) {
        const int64_t tt = t - (K - 1) + q;
        if (tt < 0 || !a->valid[s * T + tt])
            continue; /* zero history (a padded row's input is zero) */
        const float *restrict xr = a->proj + (s * T + tt) * W + j->I, *restrict wq = j->wt + q * C;
        for (int64_t c = 0; c < C; c++)
            o[c] = o[c] + wq[c] * xr[c];
    }
    round_row(o, C, a->act);
    for (int64_t c = 0; c < C; c++)
        e[c] = expf(-o[c]);
    for (int64_t c = 0; c < C; c++)
        o[c] = o[c] * (1.0f / (1.0f + e[c]));
    round_row(o, C, a->act);
}

/* Rows [r0, r1) of every sequence (row = s * seq + t): causal depthwise conv + bias + SiLU, and dt;
 * padded rows are 0.  A row reads only proj's rows t-K+1..t of its sequence, so any split of the
 * rows gives the same bytes. */
static void mamba_conv(void *ctx, int64_t r0, int64_t r1, int tid)
{
    const mamba_job *j = (const mamba_job *)ctx;
    const lwq_mamba2_ref_args *a = j->a;
    const int64_t T = a->seq, C = j->C, W = j->W, H = a->heads;
    const float lo = lwq_round_to(a->dt_min, a->act);
    float *e = j->rowtmp + (int64_t)tid * j->ntmp;
    for (int64_t row = r0; row < r1; row++) {
        float *o = a->xbc + row * C, *d = a->dts + row * H;
        if (!a->valid[row]) {
            memset(o, 0, (size_t)C * sizeof(float));
            memset(d, 0, (size_t)H * sizeof(float));
            continue;
        }
        conv_row(j, row / T, row % T, o, e);
        const float *dr = a->proj + row * W + j->I + C;
        for (int64_t hh = 0; hh < H; hh++) {
            float v = lwq_round_to(softplusf(lwq_round_to(dr[hh] + a->dt_bias[hh], a->act)), a->act);
            d[hh] = v < lo ? lo : v;
        }
    }
}

/* Items [i0, i1) of (sequence, head): the scan from a zero state (mamba2/mamba2_scan.h). */
static void mamba_scan(void *ctx, int64_t i0, int64_t i1, int tid)
{
    const mamba_job *j = (const mamba_job *)ctx;
    const lwq_mamba2_ref_args *a = j->a;
    const int64_t T = a->seq, P = a->head_dim, N = a->state, C = j->C, I = j->I, H = a->heads, G = a->groups;
    for (int64_t it = i0; it < i1; it++) {
        const int64_t s = it / H, hh = it % H, g = hh / (H / G);
        const float *xr = a->xbc + s * T * C;
        lwq_mamba2_scan_item item = {.T = T, .P = P, .N = N, .x = xr + hh * P, .B = xr + I + g * N,
                                     .C = xr + I + G * N + g * N, .ldx = C, .dt = a->dts + s * T * H + hh,
                                     .ldd = H, .valid = a->valid + s * T, .A = -expf(a->a_log[hh]),
                                     .D = a->d[hh], .y = a->y + s * T * I + hh * P, .ldy = I,
                                     .S = j->scratch + (int64_t)tid * j->per};
        j->scan(&item);
    }
}
/* One row: y = (y * silu(z)) normalised per group (a sequential sum of squares), times the norm
 * weight (float32); the scalar reference's operations in its order. */
LWQ_VEC static void norm_row(const mamba_job *j, float *restrict y, const float *restrict z, float *restrict e)
{
    const lwq_mamba2_ref_args *a = j->a;
    const int64_t I = j->I, gs = I / a->groups;
    for (int64_t i = 0; i < I; i++)
        e[i] = expf(-z[i]);
    for (int64_t i = 0; i < I; i++)
        y[i] = y[i] * (z[i] * (1.0f / (1.0f + e[i])));
    for (int64_t g = 0; g < a->groups; g++) {
        float *restrict yg = y + g * gs, ss = 0.0f;
        const float *restrict wg = a->norm_w + g * gs;
        for (int64_t i = 0; i < gs; i++)
            ss += yg[i] * yg[i];
        const float r = 1.0f / sqrtf(ss / (float)gs + a->eps);
        for (int64_t i = 0; i < gs; i++)
            yg[i] = wg[i] * (yg[i] * r);
    }
}

static void mamba_norm(void *ctx, int64_t r0, int64_t r1, int tid)
{
    const mamba_job *j = (const mamba_job *)ctx;
    const lwq_mamba2_ref_args *a = j->a;
    float *e = j->rowtmp + (int64_t)tid * j->ntmp;
    for (int64_t row = r0; row < r1; row++)
        if (a->valid[row])
            norm_row(j, a->y + row * j->I, a->proj + row * j->W, e);
}

/* The scan kernel of the GEMM's kernel choice (gemm_isa.h): AVX-512 with amx / avx512bf16 /
 * avx512 (each implies AVX-512F there), AVX2 with avx2, the portable one otherwise; all give the
 * same bits. */
static lwq_mamba2_scan_fn scan_kernel(void)
{
    const char *k = lwq_cpu_kernels_get()->name;
    if (!strcmp(k, "portable"))
        return lwq_mamba2_scan_ref;
    if (!strcmp(k, "avx2"))
        return lwq_mamba2_scan_avx2;
    return lwq_mamba2_scan_avx512;
}

int lwq_mamba2_ref(const lwq_mamba2_ref_args *a, lwq_error *e)
{
    const int64_t I = a->heads * a->head_dim, C = I + 2 * a->groups * a->state, n = a->batch * a->seq;
    const int64_t K = a->kernel;
    const int threads = lwq_parallel_threads() > 0 ? lwq_parallel_threads() : 1;
    /* one state per thread, in floats rounded up to a 64-byte line */
    const int64_t per = (a->state * lwq_mamba2_scan_ld(a->head_dim) + 15) / 16 * 16;
    const int64_t ntmp = (C > I ? C : I) + 1;
    const size_t bytes = (size_t)threads * (size_t)(per > 0 ? per : 16) * sizeof(float);
    float *scratch = aligned_alloc(64, bytes);
    float *rowtmp = malloc((size_t)threads * (size_t)ntmp * sizeof(float));
    float *wt = malloc((size_t)(C * K + 1) * sizeof(float));
    if (!scratch || !rowtmp || !wt) {
        free(scratch);
        free(rowtmp);
        free(wt);
        return lwq_errf(e, LWQ_ENOMEM, "mamba2: no host memory for %d scan states of %" PRId64 " x %" PRId64,
                        threads, a->head_dim, a->state);
    }
    for (int64_t c = 0; c < C; c++)
        for (int64_t q = 0; q < K; q++)
            wt[q * C + c] = a->conv_w[c * K + q];
    mamba_job j = {.a = a, .I = I, .C = C, .W = I + C + a->heads, .wt = wt, .scan = scan_kernel(),
                   .scratch = scratch, .per = per, .rowtmp = rowtmp, .ntmp = ntmp};
    lwq_parallel_for(n, 16, mamba_conv, &j);
    lwq_parallel_for(a->batch * a->heads, 1, mamba_scan, &j);
    lwq_parallel_for(n, 16, mamba_norm, &j);
    free(scratch);
    free(rowtmp);
    free(wt);
    return 0;
}

/* ---- the CPU backend's op ---------------------------------------------------------------------- */

static float *to_f32(const lwq_tensor *t, int64_t n)
{
    float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (f)
        lwq_cpu_load_f32(t->data, t->dtype, 0, n, f);
    return f;
}

/* Row-parallel conversions of the op's large tensors: elements [r0 * cols, r1 * cols). */
typedef struct conv_job {
    const lwq_tensor *t; /* to float32 (load) or from it (store) */
    float *f;
    int64_t cols;
} conv_job;

static void load_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    (void)tid;
    const conv_job *c = (const conv_job *)ctx;
    lwq_cpu_load_f32(c->t->data, c->t->dtype, r0 * c->cols, (r1 - r0) * c->cols, c->f + r0 * c->cols);
}

static void store_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    (void)tid;
    const conv_job *c = (const conv_job *)ctx;
    lwq_cpu_store_f32(c->t->data, c->t->dtype, r0 * c->cols, (r1 - r0) * c->cols, c->f + r0 * c->cols);
}

static void store(lwq_tensor *t, float *src, int64_t rows, int64_t cols)
{
    conv_job c = {t, src, cols};
    lwq_parallel_for(rows, 16, store_rows, &c);
}

int lwq_cpu_mamba2(void *ctx, const lwq_mamba2_args *a, lwq_error *e)
{
    (void)ctx;
    const int64_t n = a->batch * a->seq, H = a->heads, I = H * a->head_dim, C = I + 2 * a->groups * a->state,
                  W = I + C + H;
    lwq_mamba2_ref_args r = {.batch = a->batch, .seq = a->seq, .heads = H, .head_dim = a->head_dim,
                             .state = a->state, .groups = a->groups, .kernel = a->kernel, .act = a->proj->dtype,
                             .eps = a->eps, .dt_min = a->dt_min, .valid = (const uint8_t *)a->valid->data};
    float *proj = malloc((size_t)(n * W + 1) * sizeof(float)), *wc = to_f32(a->conv_w, C * a->kernel),
          *bc = a->conv_b ? to_f32(a->conv_b, C) : NULL, *alog = to_f32(a->a_log, H), *dtb = to_f32(a->dt_bias, H),
          *dd = to_f32(a->d, H), *wn = to_f32(a->norm_w, I), *xbc = malloc((size_t)(n * C + 1) * sizeof(float)),
          *dts = malloc((size_t)(n * H + 1) * sizeof(float)), *y = malloc((size_t)(n * I + 1) * sizeof(float));
    int rc = 0;
    if (!proj || !wc || (a->conv_b && !bc) || !alog || !dtb || !dd || !wn || !xbc || !dts || !y) {
        rc = lwq_errf(e, LWQ_ENOMEM, "mamba2: no host memory for %" PRId64 " tokens", n);
        goto out;
    }
    conv_job lj = {a->proj, proj, W};
    lwq_parallel_for(n, 16, load_rows, &lj);
    r.proj = proj;
    r.conv_w = wc;
    r.conv_b = bc;
    r.a_log = alog;
    r.dt_bias = dtb;
    r.d = dd;
    r.norm_w = wn;
    r.xbc = xbc;
    r.dts = dts;
    r.y = y;
    if ((rc = lwq_mamba2_ref(&r, e)) < 0)
        goto out;
    store(a->out, y, n, I);
    if (a->xbc_in) {
        /* the conv's input: proj's xBC columns, padded rows 0 (xbc is free again: reuse it) */
        for (int64_t t = 0; t < n; t++)
            if (r.valid[t])
                memcpy(xbc + t * C, proj + t * W + I, (size_t)C * sizeof(float));
            else
                memset(xbc + t * C, 0, (size_t)C * sizeof(float));
        store(a->xbc_in, xbc, n, C);
    }
out:
    free(proj);
    free(wc);
    free(bc);
    free(alog);
    free(dtb);
    free(dd);
    free(wn);
    free(xbc);
    free(dts);
    free(y);
    return rc;
}
