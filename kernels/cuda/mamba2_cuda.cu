/* kernels/cuda/mamba2_cuda.cu — the Mamba2 mixer's conv1d + SiLU, dt, SSD scan and gated norm on
 * the GPU, step for step in the order of the CPU reference (kernels/mamba2.h):
 *   k_m2_conv  one thread per (token, conv channel): the K taps in ascending order from the bias;
 *   k_m2_dt    one thread per (token, head);
 *   k_m2_scan  one block per (sequence, head), the head's P channels over the block's threads,
 *              the state S (N x P) in shared memory; t ascending, k ascending inside a token: the
 *              recurrence stays sequential in t for every (head, channel, state) as on the CPU,
 *              only the independent (sequence, head, channel) triples run in parallel;
 *   k_m2_norm  one thread per (token, group): the group's sum of squares in ascending order.
 * Every product and sum is __fmul_rn / __fadd_rn (nvcc contracts nothing), divisions __fdiv_rn and
 * the square root __fsqrt_rn, so each step is the CPU's IEEE f32 operation.
 *
 * Which bytes match the CPU: everything that does not go through expf / log1pf, given equal
 * inputs: the conv's pre-activation sum, the xBC input copy (xbc_in), the scan's products and
 * sums, the norm's sum of squares, rsqrt and scaling.  CUDA's expf and log1pf are within 2 ulp of
 * the correctly rounded value, glibc's within 1, so SiLU (conv and gate), softplus (dt),
 * exp(A_log) and the decay exp(A dt) can differ by an ulp, and such a difference is carried
 * through the recurrence; after rounding to BF16 most of those differences vanish.  The op test
 * (tests/kernels/cuda/test_mamba2_cuda.c) states the tolerance, and checks xbc_in bit for bit. */
#include <inttypes.h>
#include <math.h>

#include "kernels/cuda/attention_cuda.h" /* ld / st */
#include "kernels/cuda/grid.h"
#include "kernels/cuda/mamba2_cuda.h"

__device__ __forceinline__ float m2_sigmoid(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }
/* torch.nn.functional.softplus (beta 1, threshold 20), as kernels/cpu/mamba2_cpu.c */
__device__ __forceinline__ float m2_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

typedef struct m2_geom {
    int64_t n, T, I, C, W, H, P, N, G, K;
} m2_geom;

/* xbc (n, C) f32 = round(round(conv) * sigmoid(round(conv))); xbc_in (n, C) act = proj's xBC or
 * NULL; padded rows 0 in both. */
__global__ void k_m2_conv(const void *proj, lwq_dtype pdt, const void *wc, lwq_dtype wdt, const void *bc,
                          lwq_dtype bdt, const uint8_t *valid, float *xbc, void *xin, lwq_dtype xdt, m2_geom g)
{
    LWQ_CUDA_GRID_STRIDE(i, g.n * g.C)
    {
        const int64_t row = i / g.C, ch = i % g.C, s = row / g.T, t = row % g.T;
        if (!valid[row]) {
            xbc[i] = 0.0f;
            if (xin)
                st(xin, xdt, i, 0.0f);
            continue;
        }
        if (xin)
            st(xin, xdt, i, ld(proj, pdt, row * g.W + g.I + ch));
        float acc = bc ? ld(bc, bdt, ch) : 0.0f;
        for (int64_t q = 0; q < g.K; q++) {
            const int64_t tt = t - (g.K - 1) + q;
            if (tt < 0 || !valid[s * g.T + tt])
                continue; /* zero history (a padded row's input is zero) */
            acc = __fadd_rn(acc, __fmul_rn(ld(wc, wdt, ch * g.K + q), ld(proj, pdt, (s * g.T + tt) * g.W + g.I + ch)));
        }
        const float v = lwq_round_to(acc, pdt);
        xbc[i] = lwq_round_to(__fmul_rn(v, m2_sigmoid(v)), pdt);
    }
}

/* dts (n, H) f32 = max(round(softplus(round(dt + dt_bias))), round(dt_min)); padded rows 0 */
__global__ void k_m2_dt(const void *proj, lwq_dtype pdt, const void *dtb, lwq_dtype bdt, const uint8_t *valid,
                        float dt_min, float *dts, m2_geom g)
{
    LWQ_CUDA_GRID_STRIDE(i, g.n * g.H)
    {
        const int64_t row = i / g.H, hh = i % g.H;
        if (!valid[row]) {
            dts[i] = 0.0f;
            continue;
        }
        const float x = ld(proj, pdt, row * g.W + g.I + g.C + hh);
        const float v = lwq_round_to(m2_softplus(lwq_round_to(__fadd_rn(x, ld(dtb, bdt, hh)), pdt)), pdt);
        const float lo = lwq_round_to(dt_min, pdt);
        dts[i] = v < lo ? lo : v;
    }
}

/* Block (sequence, head); shared: S (N x P, channel p at S[k * P + p]: the threads' accesses are
 * consecutive words), then B (N) and C (N) of the current token.  y (n, I) f32. */
__global__ void k_m2_scan(const float *xbc, const float *dts, const void *alog, lwq_dtype adt, const void *dd,
                          lwq_dtype ddt, const uint8_t *valid, float *y, m2_geom g)
{
    extern __shared__ float sm[];
    float *S = sm, *Bs = sm + g.N * g.P, *Cs = Bs + g.N;
    const int64_t s = blockIdx.x / g.H, hh = blockIdx.x % g.H, grp = hh / (g.H / g.G);
    const float A = -expf(ld(alog, adt, hh)), D = ld(dd, ddt, hh);
    for (int64_t k = threadIdx.x; k < g.N * g.P; k += blockDim.x)
        S[k] = 0.0f;
    for (int64_t t = 0; t < g.T; t++) {
        const int64_t row = s * g.T + t;
        float *yr = y + row * g.I + hh * g.P;
        if (!valid[row]) { /* the same row for the whole block: no thread skips a barrier alone */
            for (int64_t p = threadIdx.x; p < g.P; p += blockDim.x)
                yr[p] = 0.0f;
            continue;
        }
        const float *xr = xbc + row * g.C, *x = xr + hh * g.P;
        __syncthreads(); /* the previous token's B, C and S are read by every thread before they change */
        for (int64_t k = threadIdx.x; k < g.N; k += blockDim.x) {
            Bs[k] = xr[g.I + grp * g.N + k];
            Cs[k] = xr[g.I + g.G * g.N + grp * g.N + k];
        }
        __syncthreads();
        const float dtv = dts[row * g.H + hh], decay = expf(__fmul_rn(A, dtv));
        for (int64_t p = threadIdx.x; p < g.P; p += blockDim.x) {
            const float xp = x[p], xd = __fmul_rn(xp, dtv);
            float acc = 0.0f;
            for (int64_t k = 0; k < g.N; k++) {
                float *sp = S + k * g.P + p;
                const float v = __fadd_rn(__fmul_rn(*sp, decay), __fmul_rn(xd, Bs[k]));
                *sp = v;
                acc = __fadd_rn(acc, __fmul_rn(v, Cs[k]));
            }
            yr[p] = __fadd_rn(acc, __fmul_rn(D, xp));
        }
    }
}

/* out (n, I) act: per (token, group), y * silu(z), normalised, times the weight; padded rows 0. */
__global__ void k_m2_norm(const float *y, const void *proj, lwq_dtype pdt, const void *wn, lwq_dtype wdt,
                          const uint8_t *valid, float eps, void *out, lwq_dtype odt, m2_geom g)
{
    const int64_t gs = g.I / g.G;
    LWQ_CUDA_GRID_STRIDE(i, g.n * g.G)
    {
        const int64_t row = i / g.G, grp = i % g.G, o = row * g.I + grp * gs;
        if (!valid[row]) {
            for (int64_t c = 0; c < gs; c++)
                st(out, odt, o + c, 0.0f);
            continue;
        }
        const int64_t zo = row * g.W + grp * gs;
        float ss = 0.0f;
        for (int64_t c = 0; c < gs; c++) {
            const float z = ld(proj, pdt, zo + c), v = __fmul_rn(y[o + c], __fmul_rn(z, m2_sigmoid(z)));
            ss = __fadd_rn(ss, __fmul_rn(v, v));
        }
        const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)gs), eps)));
        for (int64_t c = 0; c < gs; c++) {
            /* the gate again: the same IEEE operations, so the same value as in the first pass */
            const float z = ld(proj, pdt, zo + c), v = __fmul_rn(y[o + c], __fmul_rn(z, m2_sigmoid(z)));
            st(out, odt, o + c, __fmul_rn(ld(wn, wdt, grp * gs + c), __fmul_rn(v, r)));
        }
    }
}

static m2_geom geom(const lwq_mamba2_args *a)
{
    m2_geom g;
    g.n = a->batch * a->seq;
    g.T = a->seq;
    g.H = a->heads;
    g.P = a->head_dim;
    g.N = a->state;
    g.G = a->groups;
    g.K = a->kernel;
    g.I = g.H * g.P;
    g.C = g.I + 2 * g.G * g.N;
    g.W = g.I + g.C + g.H;
    return g;
}

static size_t al16(size_t b) { return (b + 15) & ~(size_t)15; }

size_t lwq_cuda_mamba2_scratch(const lwq_mamba2_args *a)
{
    const m2_geom g = geom(a);
    return al16((size_t)(g.n * g.C) * 4) + al16((size_t)(g.n * g.H) * 4) + al16((size_t)(g.n * g.I) * 4);
}

int lwq_cuda_mamba2(cudaStream_t s, int device, void *ws, const lwq_mamba2_args *a, lwq_error *e)
{
    const m2_geom g = geom(a);
    float *xbc = (float *)ws, *dts = (float *)((char *)ws + al16((size_t)(g.n * g.C) * 4)),
          *y = (float *)((char *)dts + al16((size_t)(g.n * g.H) * 4));
    /* the scan: one block per (sequence, head) */
    const int64_t blocks = a->batch * g.H;
    const size_t smem = (size_t)(g.N * g.P + 2 * g.N) * sizeof(float);
    int optin = 0;
    cudaError_t err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return lwq_errf(e, LWQ_EDEVICE, "cuda mamba2: shared memory limit: %s", cudaGetErrorString(err));
    }
    if (blocks > INT32_MAX || smem > (size_t)optin)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "cuda mamba2: %" PRId64 " sequences x %" PRId64 " heads with a state of "
                        "%" PRId64 " x %" PRId64 " (%zu bytes of shared memory per block; the device allows %d, "
                        "blocks at most 2^31-1)", a->batch, g.H, g.P, g.N, smem, optin);
    if (smem > 48 * 1024) {
        err = cudaFuncSetAttribute(k_m2_scan, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (err != cudaSuccess) {
            (void)cudaGetLastError();
            return lwq_errf(e, LWQ_EDEVICE, "cuda mamba2: %zu bytes of shared memory for the scan: %s", smem,
                            cudaGetErrorString(err));
        }
    }
    const uint8_t *valid = (const uint8_t *)a->valid->data;
    const lwq_dtype pdt = a->proj->dtype;
    k_m2_conv<<<lwq_grid_for(g.n * g.C, 256), 256, 0, s>>>(a->proj->data, pdt, a->conv_w->data, a->conv_w->dtype,
                                                            a->conv_b ? a->conv_b->data : NULL,
                                                            a->conv_b ? a->conv_b->dtype : LWQ_F32, valid, xbc,
                                                            a->xbc_in ? a->xbc_in->data : NULL,
                                                            a->xbc_in ? a->xbc_in->dtype : LWQ_F32, g);
    k_m2_dt<<<lwq_grid_for(g.n * g.H, 256), 256, 0, s>>>(a->proj->data, pdt, a->dt_bias->data, a->dt_bias->dtype,
                                                          valid, a->dt_min, dts, g);
    int threads = (int)(g.P < 256 ? (g.P + 31) / 32 * 32 : 256);
    k_m2_scan<<<(unsigned)blocks, threads, smem, s>>>(xbc, dts, a->a_log->data, a->a_log->dtype, a->d->data,
                                                       a->d->dtype, valid, y, g);
    k_m2_norm<<<lwq_grid_for(g.n * g.G, 128), 128, 0, s>>>(y, a->proj->data, pdt, a->norm_w->data, a->norm_w->dtype,
                                                            valid, a->eps, a->out->data, a->out->dtype, g);
    return 0;
}
