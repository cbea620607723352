/* kernels/cpu/mamba2_cpu.c — the Mamba2 mixer's non-GEMM part on the host: the float32 reference
 * (kernels/mamba2.h, moved here from engine/forward/model_nemotron.c unchanged in its arithmetic)
 * and the CPU backend's mamba2 op, which reads its tensors into float32, runs the reference and
 * rounds the outputs once to their dtype. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/mamba2.h"

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
/* torch.nn.functional.softplus (beta 1, threshold 20) */
static inline float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

typedef struct mamba_job {
    const lwq_mamba2_ref_args *a;
    int64_t I, C, W;
    float *scratch; /* per thread: S (P x N) */
} mamba_job;

/* Causal depthwise conv + bias + SiLU of sequences [s0, s1), and dt; padded rows are 0. */
static void mamba_conv(void *ctx, int64_t s0, int64_t s1, int tid)
{
    (void)tid;
    const mamba_job *j = (const mamba_job *)ctx;
    const lwq_mamba2_ref_args *a = j->a;
    const int64_t T = a->seq, C = j->C, K = a->kernel, W = j->W, H = a->heads;
    const float lo = lwq_round_to(a->dt_min, a->act);
    for (int64_t s = s0; s < s1; s++)
        for (int64_t t = 0; t < T; t++) {
            const int64_t row = s * T + t;
            float *o = a->xbc + row * C, *d = a->dts + row * H;
            if (!a->valid[row]) {
                memset(o, 0, (size_t)C * sizeof(float));
                memset(d, 0, (size_t)H * sizeof(float));
                continue;
            }
            for (int64_t ch = 0; ch < C; ch++) {
                float acc = a->conv_b ? a->conv_b[ch] : 0.0f;
                for (int64_t q = 0; q < K; q++) {
                    int64_t tt = t - (K - 1) + q;
                    if (tt < 0 || !a->valid[s * T + tt])
                        continue; /* zero history (a padded row's input is zero) */
                    acc += a->conv_w[ch * K + q] * a->proj[(s * T + tt) * W + j->I + ch];
                }
                float v = lwq_round_to(acc, a->act);
                o[ch] = lwq_round_to(v * sigmoidf(v), a->act);
            }
            const float *dr = a->proj + row * W + j->I + C;
            for (int64_t hh = 0; hh < H; hh++) {
                float v = lwq_round_to(softplusf(lwq_round_to(dr[hh] + a->dt_bias[hh], a->act)), a->act);
                d[hh] = v < lo ? lo : v;
            }
        }
}

/* Items [i0, i1) of (sequence, head): the sequential scan from a zero state. */
static void mamba_scan(void *ctx, int64_t i0, int64_t i1, int tid)
{
    const mamba_job *j = (const mamba_job *)ctx;
    const lwq_mamba2_ref_args *a = j->a;
    const int64_t T = a->seq, P = a->head_dim, N = a->state, C = j->C, I = j->I, H = a->heads, G = a->groups;
    float *S = j->scratch + (int64_t)tid * (P * N);
    for (int64_t it = i0; it < i1; it++) {
        const int64_t s = it / H, hh = it % H, g = hh / (H / G);
        const float A = -expf(a->a_log[hh]), D = a->d[hh];
        memset(S, 0, (size_t)(P * N) * sizeof(float));
        for (int64_t t = 0; t < T; t++) {
            const int64_t row = s * T + t;
            float *y = a->y + row * I + hh * P;
            if (!a->valid[row]) {
                memset(y, 0, (size_t)P * sizeof(float));
                continue;
            }
            const float *xr = a->xbc + row * C, *x = xr + hh * P, *B = xr + I + g * N, *Cm = xr + I + G * N + g * N;
            const float dtv = a->dts[row * H + hh];
            const float decay = expf(A * dtv);
            for (int64_t p = 0; p < P; p++) {
                float *restrict Sp = S + p * N;
                const float xd = x[p] * dtv;
                float acc = 0.0f;
                for (int64_t k = 0; k < N; k++) {
                    Sp[k] = Sp[k] * decay + xd * B[k];
                    acc += Sp[k] * Cm[k];
                }
                y[p] = acc + D * x[p];
            }
        }
    }
}

/* Rows [r0, r1): y = (y * silu(z)) normalised per group, times the norm weight (float32). */
static void mamba_norm(void *ctx, int64_t r0, int64_t r1, int tid)
{
    (void)tid;
    const mamba_job *j = (const mamba_job *)ctx;
    const lwq_mamba2_ref_args *a = j->a;
    const int64_t I = j->I, gs = I / a->groups, W = j->W;
    for (int64_t row = r0; row < r1; row++) {
        float *y = a->y + row * I;
        if (!a->valid[row])
            continue;
        const float *z = a->proj + row * W;
        for (int64_t i = 0; i < I; i++)
            y[i] = y[i] * (z[i] * sigmoidf(z[i]));
        for (int64_t g = 0; g < a->groups; g++) {
            float *yg = y + g * gs, ss = 0.0f;
            for (int64_t i = 0; i < gs; i++)
                ss += yg[i] * yg[i];
            const float r = 1.0f / sqrtf(ss / (float)gs + a->eps);
            for (int64_t i = 0; i < gs; i++)
                yg[i] = a->norm_w[g * gs + i] * (yg[i] * r);
        }
    }
}

int lwq_mamba2_ref(const lwq_mamba2_ref_args *a, lwq_error *e)
{
    const int64_t I = a->heads * a->head_dim, C = I + 2 * a->groups * a->state;
    const int threads = lwq_parallel_threads();
    const int64_t per = a->head_dim * a->state;
    float *scratch = malloc((size_t)(threads > 0 ? threads : 1) * (size_t)(per > 0 ? per : 1) * sizeof(float));
    if (!scratch)
        return lwq_errf(e, LWQ_ENOMEM, "mamba2: no host memory for %d scan states of %" PRId64 " x %" PRId64,
                        threads, a->head_dim, a->state);
    mamba_job j = {.a = a, .I = I, .C = C, .W = I + C + a->heads, .scratch = scratch};
    lwq_parallel_for(a->batch, 1, mamba_conv, &j);
    lwq_parallel_for(a->batch * a->heads, 1, mamba_scan, &j);
    lwq_parallel_for(a->batch * a->seq, 16, mamba_norm, &j);
    free(scratch);
    return 0;
}

/* ---- the CPU backend's op ---------------------------------------------------------------------- */

static float *to_f32(const lwq_tensor *t, int64_t n)
{
    float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (f)
        for (int64_t i = 0; i < n; i++)
            f[i] = lwq_load_f(t->data, t->dtype, (size_t)i);
    return f;
}

static void store(lwq_tensor *t, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == LWQ_F32)
            ((float *)t->data)[i] = src[i];
        else if (t->dtype == LWQ_BF16)
            ((uint16_t *)t->data)[i] = lwq_f32_to_bf16(src[i]);
        else
            ((uint16_t *)t->data)[i] = lwq_f32_to_f16(src[i]);
    }
}

int lwq_cpu_mamba2(void *ctx, const lwq_mamba2_args *a, lwq_error *e)
{
    (void)ctx;
    const int64_t n = a->batch * a->seq, H = a->heads, I = H * a->head_dim, C = I + 2 * a->groups * a->state,
                  W = I + C + H;
    lwq_mamba2_ref_args r = {.batch = a->batch, .seq = a->seq, .heads = H, .head_dim = a->head_dim,
                             .state = a->state, .groups = a->groups, .kernel = a->kernel, .act = a->proj->dtype,
                             .eps = a->eps, .dt_min = a->dt_min, .valid = (const uint8_t *)a->valid->data};
    float *proj = to_f32(a->proj, n * W), *wc = to_f32(a->conv_w, C * a->kernel),
          *bc = a->conv_b ? to_f32(a->conv_b, C) : NULL, *alog = to_f32(a->a_log, H), *dtb = to_f32(a->dt_bias, H),
          *dd = to_f32(a->d, H), *wn = to_f32(a->norm_w, I), *xbc = malloc((size_t)(n * C + 1) * sizeof(float)),
          *dts = malloc((size_t)(n * H + 1) * sizeof(float)), *y = malloc((size_t)(n * I + 1) * sizeof(float));
    int rc = 0;
    if (!proj || !wc || (a->conv_b && !bc) || !alog || !dtb || !dd || !wn || !xbc || !dts || !y) {
        rc = lwq_errf(e, LWQ_ENOMEM, "mamba2: no host memory for %" PRId64 " tokens", n);
        goto out;
    }
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
    store(a->out, y, n * I);
    if (a->xbc_in) {
        /* the conv's input: proj's xBC columns, padded rows 0 (xbc is free again: reuse it) */
        for (int64_t t = 0; t < n; t++)
            if (r.valid[t])
                memcpy(xbc + t * C, proj + t * W + I, (size_t)C * sizeof(float));
            else
                memset(xbc + t * C, 0, (size_t)C * sizeof(float));
        store(a->xbc_in, xbc, n * C);
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
