/* kernels/cuda/attention_cuda.cu — causal grouped-query attention on the GPU: the per-row warp
 * kernel and the tiled kernel that stages K/V in shared memory (attention_cuda.h says what each
 * does and why they agree).  Every product and sum goes through __fmul_rn / __fadd_rn, so nvcc
 * contracts nothing and the two kernels compute the same function bit for bit. */
#include <math.h>

#include "kernels/cuda/attention_cuda.h"

/* One key j for query row state (qr, acc, m, l): the score over the lanes' head-dim slices, the
 * online-softmax update, the value accumulation.  kp/vp: the key/value row (global or shared). */
template <int PER_LANE, typename KL, typename VL>
__device__ __forceinline__ void attend_key(const float *qr, float *acc, float &m, float &l, KL kload, VL vload,
                                           int64_t hd, int lane, float scale)
{
    float s = 0.0f;
#pragma unroll
    for (int u = 0; u < PER_LANE; u++) {
        int64_t d = lane + 32 * u;
        if (d < hd)
            s = __fadd_rn(s, __fmul_rn(qr[u], kload(d)));
    }
    for (int off = 16; off > 0; off >>= 1)
        s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
    s = __fmul_rn(s, scale);
    float mn = s > m ? s : m;
    float corr = expf(__fsub_rn(m, mn)), p = expf(__fsub_rn(s, mn));
    l = __fadd_rn(__fmul_rn(l, corr), p);
#pragma unroll
    for (int u = 0; u < PER_LANE; u++) {
        int64_t d = lane + 32 * u;
        acc[u] = __fadd_rn(__fmul_rn(acc[u], corr), d < hd ? __fmul_rn(p, vload(d)) : 0.0f);
    }
    m = mn;
}

/* ---- warp: one warp per (sequence, head, query row), K/V rows from global memory ------------- */

template <int PER_LANE>
__global__ void k_attention(const void *q, const void *k, const void *v, void *out, const uint8_t *valid,
                            lwq_dtype dt, lwq_dtype odt, int64_t B, int64_t T, int H, int KV, int64_t hd, float scale)
{
    const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (warp >= B * H * T)
        return; /* whole warps leave together: blockDim is a multiple of 32 */
    const int64_t i = warp % T, h = (warp / T) % H, b = warp / (T * H);
    const int64_t g = h / (H / KV);
    const int64_t qrow = (b * T + i) * H * hd + h * hd;
    float qr[PER_LANE], acc[PER_LANE];
    for (int u = 0; u < PER_LANE; u++) {
        int64_t d = lane + 32 * u;
        qr[u] = d < hd ? ld(q, dt, qrow + d) : 0.0f;
        acc[u] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = 0; j <= i; j++) {
        if (valid && !valid[b * T + j])
            continue;
        const int64_t krow = (b * T + j) * KV * hd + g * hd;
        auto kl = [&](int64_t d) { return ld(k, dt, krow + d); };
        auto vl = [&](int64_t d) { return ld(v, dt, krow + d); };
        attend_key<PER_LANE>(qr, acc, m, l, kl, vl, hd, lane, scale);
    }
    for (int u = 0; u < PER_LANE; u++) {
        int64_t d = lane + 32 * u;
        if (d < hd)
            st(out, odt, qrow + d, l > 0.0f ? __fdiv_rn(acc[u], l) : 0.0f);
    }
}

/* ---- tiled: a block per (tile of TQ query rows, head, sequence); K/V tiles in shared memory --- */

#define TQ 32     /* query rows per block */
#define TWARPS 8  /* warps per block */
#define TROWS (TQ / TWARPS)

template <int PER_LANE>
__global__ void __launch_bounds__(TWARPS * 32)
    k_attention_tiled(const void *q, const void *k, const void *v, void *out, const uint8_t *valid, lwq_dtype dt,
                      lwq_dtype odt, int64_t T, int H, int KV, int64_t hd, float scale, int bk)
{
    extern __shared__ float sm[];
    float *ks = sm, *vs = sm + (int64_t)bk * hd;
    int *ok = (int *)(vs + (int64_t)bk * hd);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int64_t b = blockIdx.z, h = blockIdx.y, i0 = (int64_t)blockIdx.x * TQ;
    const int64_t g = h / (H / KV);
    float qr[TROWS][PER_LANE], acc[TROWS][PER_LANE], m[TROWS], l[TROWS];
    int64_t row[TROWS];
#pragma unroll
    for (int r = 0; r < TROWS; r++) {
        row[r] = i0 + w + (int64_t)r * TWARPS; /* interleaved: every warp gets early and late rows */
        const int64_t qrow = (b * T + row[r]) * H * hd + h * hd;
#pragma unroll
        for (int u = 0; u < PER_LANE; u++) {
            int64_t d = lane + 32 * u;
            qr[r][u] = row[r] < T && d < hd ? ld(q, dt, qrow + d) : 0.0f;
            acc[r][u] = 0.0f;
        }
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    const int64_t last = (i0 + TQ < T ? i0 + TQ : T) - 1; /* the tile's last row sees keys <= last */
    for (int64_t j0 = 0; j0 <= last; j0 += bk) {
        const int n = (int)(last + 1 - j0 < bk ? last + 1 - j0 : bk);
        for (int64_t t = threadIdx.x; t < (int64_t)n * hd; t += blockDim.x) {
            const int64_t kk = t / hd, d = t % hd;
            const int64_t krow = (b * T + j0 + kk) * KV * hd + g * hd;
            ks[kk * hd + d] = ld(k, dt, krow + d);
            vs[kk * hd + d] = ld(v, dt, krow + d);
        }
        for (int t = threadIdx.x; t < n; t += blockDim.x)
            ok[t] = valid ? valid[b * T + j0 + t] != 0 : 1;
        __syncthreads();
#pragma unroll
        for (int r = 0; r < TROWS; r++) {
            if (row[r] >= T)
                continue; /* warp-uniform */
            const int64_t jend = j0 + n - 1 < row[r] ? j0 + n - 1 : row[r];
            for (int64_t j = j0; j <= jend; j++) {
                const int kk = (int)(j - j0);
                if (!ok[kk])
                    continue;
                const float *kr = ks + (int64_t)kk * hd, *vr = vs + (int64_t)kk * hd;
                auto kl = [&](int64_t d) { return kr[d]; };
                auto vl = [&](int64_t d) { return vr[d]; };
                attend_key<PER_LANE>(qr[r], acc[r], m[r], l[r], kl, vl, hd, lane, scale);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < TROWS; r++) {
        if (row[r] >= T)
            continue;
        const int64_t qrow = (b * T + row[r]) * H * hd + h * hd;
#pragma unroll
        for (int u = 0; u < PER_LANE; u++) {
            int64_t d = lane + 32 * u;
            if (d < hd)
                st(out, odt, qrow + d, l[r] > 0.0f ? __fdiv_rn(acc[r][u], l[r]) : 0.0f);
        }
    }
}

template <int P>
static int launch(cudaStream_t s, int tiled, const lwq_attn_args *a, lwq_error *e)
{
    const uint8_t *valid = a->key_valid ? (const uint8_t *)a->key_valid->data : NULL;
    if (!tiled) {
        const int64_t warps = a->batch * a->n_heads * a->seq;
        const int64_t blocks = (warps * 32 + 127) / 128;
        if (blocks > INT32_MAX)
            return lwq_errf(e, LWQ_EINVAL, "cuda attention: %lld query rows exceed the grid", (long long)warps);
        k_attention<P><<<(unsigned)blocks, 128, 0, s>>>(a->q->data, a->k->data, a->v->data, a->out->data, valid,
                                                       a->q->dtype, a->out->dtype, a->batch, a->seq, a->n_heads,
                                                       a->n_kv_heads, a->head_dim, a->scale);
        return 0;
    }
    const int64_t tiles = (a->seq + TQ - 1) / TQ;
    if (tiles > INT32_MAX || a->n_heads > 65535 || a->batch > 65535)
        return lwq_errf(e, LWQ_EINVAL, "cuda attention: %lld sequences x %d heads x %lld tiles exceed the grid",
                        (long long)a->batch, a->n_heads, (long long)tiles);
    /* K and V tiles of bk rows as f32 plus bk flags: 32 rows at head_dim 128, 32 KiB at most */
    int bk = (int)(4096 / a->head_dim);
    bk = bk > 32 ? 32 : (bk < 8 ? 8 : bk);
    size_t smem = (size_t)bk * (size_t)a->head_dim * 2 * sizeof(float) + (size_t)bk * sizeof(int);
    dim3 grid((unsigned)(tiles > 0 ? tiles : 1), (unsigned)a->n_heads, (unsigned)a->batch);
    k_attention_tiled<P><<<grid, TWARPS * 32, smem, s>>>(a->q->data, a->k->data, a->v->data, a->out->data, valid,
                                                         a->q->dtype, a->out->dtype, a->seq, a->n_heads,
                                                         a->n_kv_heads, a->head_dim, a->scale, bk);
    return 0;
}

int lwq_cuda_attention(cudaStream_t s, int tiled, const lwq_attn_args *a, lwq_error *e)
{
    if (a->batch * a->seq == 0)
        return 0;
    if (a->head_dim <= 64)
        return launch<2>(s, tiled, a, e);
    if (a->head_dim <= 128)
        return launch<4>(s, tiled, a, e);
    if (a->head_dim <= 256)
        return launch<8>(s, tiled, a, e);
    if (a->head_dim <= 512)
        return launch<16>(s, tiled, a, e);
    return lwq_errf(e, LWQ_EUNSUPPORTED, "cuda attention: head_dim %lld > 512", (long long)a->head_dim);
}
