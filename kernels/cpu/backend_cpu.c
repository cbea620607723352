/* kernels/cpu/backend_cpu.c — the CPU backend: host memory, the element-wise and row ops, and
 * the table that ties them to the GEMM (gemm_cpu.c) and attention (attention_cpu.c).  This is
 * the reference every other backend is tested against, so each op is written to read as the
 * formula in backend.h; rows are spread over threads with core/parallel and no result depends
 * on how rows are split. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/exp/exp.h"
#include "kernels/cpu/gemm/gemm_isa.h"
#include "kernels/topk.h"

static int cpu_alloc(void *ctx, size_t bytes, void **out, lwq_error *e)
{
    (void)ctx;
    *out = NULL;
    if (bytes > SIZE_MAX - 64)
        return lwq_errf(e, LWQ_ENOMEM, "cpu alloc: %zu bytes is too large", bytes);
    *out = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!*out)
        return lwq_errf(e, LWQ_ENOMEM, "cpu alloc: out of memory for %zu bytes", bytes);
    return 0;
}

static void cpu_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static int cpu_copy(void *ctx, void *dst, const void *src, size_t bytes, lwq_error *e)
{
    (void)ctx;
    (void)e;
    memmove(dst, src, bytes);
    return 0;
}

static int cpu_memset0(void *ctx, void *dst, size_t bytes, lwq_error *e)
{
    (void)ctx;
    (void)e;
    memset(dst, 0, bytes);
    return 0;
}

static int cpu_sync(void *ctx, lwq_error *e)
{
    (void)ctx;
    (void)e;
    return 0;
}

/* ---- rmsnorm ------------------------------------------------------------------------------- */

#define NORM_ROWS 4 /* rows whose sums of squares run side by side */

typedef struct norm_job {
    const lwq_tensor *x, *w;
    lwq_tensor *y;
    float eps;
    float *scratch; /* (NORM_ROWS + 1) * d floats per thread */
} norm_job;

/* Each row's sum of squares is one sequential chain of double adds in element order (the bits of
 * the formula); NORM_ROWS rows' chains are interleaved, so the core overlaps their add latencies
 * instead of waiting on one chain per row. */
static void norm_rows(void *ctx, int64_t b, int64_t e, int tid)
{
    norm_job *j = (norm_job *)ctx;
    int64_t d = j->x->shape[1];
    float *buf = j->scratch + (int64_t)tid * (NORM_ROWS + 1) * d;
    float *wf = buf + NORM_ROWS * d;
    lwq_cpu_load_f32(j->w->data, j->w->dtype, 0, d, wf);
    for (int64_t r = b; r < e; r += NORM_ROWS) {
        const int nr = e - r < NORM_ROWS ? (int)(e - r) : NORM_ROWS;
        double ss[NORM_ROWS] = {0.0};
        for (int q = 0; q < nr; q++)
            lwq_cpu_load_f32(j->x->data, j->x->dtype, (r + q) * d, d, buf + q * d);
        if (nr == NORM_ROWS) {
            for (int64_t i = 0; i < d; i++)
                for (int q = 0; q < NORM_ROWS; q++)
                    ss[q] += (double)buf[q * d + i] * buf[q * d + i];
        } else {
            for (int q = 0; q < nr; q++)
                for (int64_t i = 0; i < d; i++)
                    ss[q] += (double)buf[q * d + i] * buf[q * d + i];
        }
        for (int q = 0; q < nr; q++) {
            float var = (float)(ss[q] / (double)d);
            float rs = 1.0f / sqrtf(var + j->eps);
            float *row = buf + q * d;
            lwq_cpu_norm_apply(row, rs, wf, row, d, j->x->dtype, j->y->dtype);
            lwq_cpu_store_f32(j->y->data, j->y->dtype, (r + q) * d, d, row);
        }
    }
}

static int cpu_rmsnorm(void *ctx, const lwq_tensor *x, const lwq_tensor *w, float eps,
                       lwq_tensor *y, lwq_error *e)
{
    (void)ctx;
    if (x->shape[1] > (int64_t)1 << 30)
        return lwq_errf(e, LWQ_EINVAL, "rmsnorm: row of %lld elements is too long",
                        (long long)x->shape[1]);
    norm_job j = {x, w, y, eps, NULL};
    j.scratch = (float *)lwq_cpu_scratch_slot(LWQ_SCRATCH_ROWS,
                                              (NORM_ROWS + 1) * x->shape[1] * lwq_parallel_threads(),
                                              sizeof(float));
    if (!j.scratch)
        return lwq_errf(e, LWQ_ENOMEM, "rmsnorm: no memory for row scratch (d %lld)",
                        (long long)x->shape[1]);
    lwq_parallel_for(x->shape[0], 16, norm_rows, &j);
    return 0;
}

/* ---- rope ---------------------------------------------------------------------------------- */

typedef struct rope_job {
    lwq_tensor *x;
    int64_t hd;
    const int32_t *pos;
    const float *inv_freq;
    float scaling;
    float *scratch; /* hd + cols floats per thread */
} rope_job;

static void rope_rows(void *ctx, int64_t b, int64_t e, int tid)
{
    rope_job *j = (rope_job *)ctx;
    const int64_t half = j->hd / 2, cols = j->x->shape[1];
    const lwq_dtype dt = j->x->dtype;
    float *cs = j->scratch + (int64_t)tid * (2 * half + cols);
    float *sn = cs + half, *row = sn + half;
    for (int64_t r = b; r < e; r++) {
        for (int64_t i = 0; i < half; i++) {
            float ang = (float)j->pos[r] * j->inv_freq[i];
            cs[i] = lwq_round_to(cosf(ang) * j->scaling, dt);
            sn[i] = lwq_round_to(sinf(ang) * j->scaling, dt);
        }
        lwq_cpu_load_f32(j->x->data, dt, r * cols, cols, row);
        for (int64_t h = 0; h < cols; h += j->hd)
            lwq_cpu_rope_apply(row + h, cs, sn, half, dt);
        lwq_cpu_store_f32(j->x->data, dt, r * cols, cols, row);
    }
}

static int cpu_rope(void *ctx, lwq_tensor *x, int64_t head_dim, const lwq_tensor *pos,
                    const lwq_tensor *inv_freq, float attn_scaling, lwq_error *e)
{
    (void)ctx;
    rope_job j = {x, head_dim, (const int32_t *)pos->data, (const float *)inv_freq->data,
                  attn_scaling, NULL};
    j.scratch = (float *)lwq_cpu_scratch_slot(LWQ_SCRATCH_ROWS,
                                              (head_dim + x->shape[1]) * lwq_parallel_threads(),
                                              sizeof(float));
    if (!j.scratch)
        return lwq_errf(e, LWQ_ENOMEM, "rope: no memory for row scratch (%lld columns)",
                        (long long)x->shape[1]);
    lwq_parallel_for(x->shape[0], 16, rope_rows, &j);
    return 0;
}

/* ---- element-wise -------------------------------------------------------------------------- */

typedef struct ew_job {
    const lwq_tensor *a, *b;
    lwq_tensor *out;
    int kind; /* 0 swiglu(a=gate, b=up), 1 add */
    const lwq_exp_kernels *ek;
} ew_job;

static void ew_rows(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    ew_job *j = (ew_job *)ctx;
    int64_t d = j->out->shape[1];
    float buf[2][256];
    lwq_dtype dt = j->out->dtype;
    for (int64_t r = b; r < e; r++) {
        for (int64_t c0 = 0; c0 < d; c0 += 256) {
            int64_t nc = d - c0 < 256 ? d - c0 : 256;
            lwq_cpu_load_f32(j->a->data, j->a->dtype, r * d + c0, nc, buf[0]);
            lwq_cpu_load_f32(j->b->data, j->b->dtype, r * d + c0, nc, buf[1]);
            if (j->kind == 0) {
                /* R_gate(g / (1 + expf(-g))) * up, per element */
                j->ek->silu(buf[0], buf[0], nc);
                lwq_cpu_mul_round(buf[0], buf[1], nc, j->a->dtype);
            } else {
                for (int64_t i = 0; i < nc; i++)
                    buf[0][i] = buf[0][i] + buf[1][i];
            }
            lwq_cpu_store_f32(j->out->data, dt, r * d + c0, nc, buf[0]);
        }
    }
}

static int cpu_swiglu(void *ctx, const lwq_tensor *gate, const lwq_tensor *up, lwq_tensor *out,
                      lwq_error *e)
{
    (void)ctx;
    (void)e;
    ew_job j = {gate, up, out, 0, lwq_exp_kernels_get()};
    lwq_parallel_for(out->shape[0], 16, ew_rows, &j);
    return 0;
}

static int cpu_add(void *ctx, lwq_tensor *acc, const lwq_tensor *x, lwq_error *e)
{
    (void)ctx;
    (void)e;
    ew_job j = {acc, x, acc, 1, NULL};
    lwq_parallel_for(acc->shape[0], 16, ew_rows, &j);
    return 0;
}

/* ---- MoE routing, gather, combine ---------------------------------------------------------- */

typedef struct route_job {
    const lwq_tensor *logits;
    int k;
    lwq_route_mode mode;
    lwq_dtype wdt;
    int32_t *idx;
    float *wts;
    float *scratch; /* 2*E floats per thread (probabilities, then E int32 of top-k positions) */
    const lwq_exp_kernels *ek;
} route_job;

/* Each row's top-k in torch.topk's CPU order (kernels/topk.h), sorted, as transformers' softmax
 * routers call it: equal probabilities go where torch puts them, not to the lower index. */
static void route_rows(void *ctx, int64_t b, int64_t e, int tid)
{
    route_job *j = (route_job *)ctx;
    int64_t E = j->logits->shape[1];
    float *p = j->scratch + (int64_t)tid * 2 * E;
    int32_t *q = (int32_t *)(p + E);
    for (int64_t r = b; r < e; r++) {
        lwq_cpu_load_f32(j->logits->data, j->logits->dtype, r * E, E, p);
        int32_t *idx = j->idx + r * j->k;
        float *w = j->wts + r * j->k;
        if (j->mode == LWQ_ROUTE_TOPK_SOFTMAX) {
            lwq_topk_torch(p, E, j->k, 1, q, idx);
            for (int s = 0; s < j->k; s++)
                w[s] = p[idx[s]];
            float mx = w[0], sum = 0.0f;
            j->ek->exp_sub(w, mx, w, j->k); /* w[s] = expf(w[s] - mx) */
            for (int s = 0; s < j->k; s++)
                sum += w[s];
            for (int s = 0; s < j->k; s++)
                w[s] /= sum;
        } else {
            float mx = -INFINITY, sum = 0.0f;
            for (int64_t i = 0; i < E; i++)
                mx = p[i] > mx ? p[i] : mx;
            j->ek->exp_sub(p, mx, p, E); /* p[i] = expf(p[i] - mx) */
            for (int64_t i = 0; i < E; i++)
                sum += p[i];
            for (int64_t i = 0; i < E; i++)
                p[i] /= sum;
            lwq_topk_torch(p, E, j->k, 1, q, idx);
            float ksum = 0.0f;
            for (int s = 0; s < j->k; s++) {
                w[s] = p[idx[s]];
                ksum += w[s];
            }
            if (j->mode == LWQ_ROUTE_SOFTMAX_TOPK_NORM)
                for (int s = 0; s < j->k; s++)
                    w[s] /= ksum;
        }
        for (int s = 0; s < j->k; s++)
            w[s] = lwq_round_to(w[s], j->wdt);
    }
}

static int cpu_moe_route(void *ctx, const lwq_tensor *logits, int k, lwq_route_mode mode,
                         lwq_dtype weight_dtype, lwq_tensor *idx, lwq_tensor *wts, lwq_error *e)
{
    (void)ctx;
    route_job j = {logits, k, mode, weight_dtype, (int32_t *)idx->data, (float *)wts->data, NULL,
                   lwq_exp_kernels_get()};
    j.scratch = (float *)lwq_cpu_scratch_slot(LWQ_SCRATCH_ROWS,
                                              2 * logits->shape[1] * lwq_parallel_threads(),
                                              sizeof(float));
    if (!j.scratch)
        return lwq_errf(e, LWQ_ENOMEM, "moe_route: no memory for %lld experts of scratch",
                        (long long)logits->shape[1]);
    lwq_parallel_for(logits->shape[0], 16, route_rows, &j);
    return 0;
}

typedef struct gather_job {
    const lwq_tensor *src, *rows;
    lwq_tensor *dst;
} gather_job;

static void gather_part(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    gather_job *j = (gather_job *)ctx;
    int64_t d = j->src->shape[1];
    const int32_t *rows = (const int32_t *)j->rows->data;
    float buf[256];
    for (int64_t i = b; i < e; i++) {
        if (j->src->dtype == j->dst->dtype) {
            size_t es = lwq_dtype_size(j->src->dtype);
            memcpy((char *)j->dst->data + (size_t)(i * d) * es,
                   (const char *)j->src->data + (size_t)((int64_t)rows[i] * d) * es,
                   (size_t)d * es);
            continue;
        }
        for (int64_t c0 = 0; c0 < d; c0 += 256) {
            int64_t nc = d - c0 < 256 ? d - c0 : 256;
            lwq_cpu_load_f32(j->src->data, j->src->dtype, (int64_t)rows[i] * d + c0, nc, buf);
            lwq_cpu_store_f32(j->dst->data, j->dst->dtype, i * d + c0, nc, buf);
        }
    }
}

static int cpu_gather_rows(void *ctx, const lwq_tensor *src, const lwq_tensor *rows,
                           lwq_tensor *dst, lwq_error *e)
{
    (void)ctx;
    (void)e;
    gather_job j = {src, rows, dst};
    lwq_parallel_for(rows->shape[0], 64, gather_part, &j);
    return 0;
}

typedef struct combine_job {
    const lwq_tensor *y, *slot_rows, *wts;
    lwq_tensor *out;
} combine_job;

static void combine_rows(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    combine_job *j = (combine_job *)ctx;
    int64_t d = j->y->shape[1], k = j->slot_rows->shape[1];
    const int32_t *sr = (const int32_t *)j->slot_rows->data;
    const float *w = (const float *)j->wts->data;
    lwq_dtype dt = j->out->dtype;
    float acc[256], yb[256];
    for (int64_t t = b; t < e; t++) {
        for (int64_t c0 = 0; c0 < d; c0 += 256) {
            int64_t nc = d - c0 < 256 ? d - c0 : 256;
            memset(acc, 0, sizeof acc);
            for (int64_t s = 0; s < k; s++) {
                int32_t row = sr[t * k + s];
                if (row < 0)
                    continue;
                float ws = w[t * k + s];
                lwq_cpu_load_f32(j->y->data, j->y->dtype, (int64_t)row * d + c0, nc, yb);
                lwq_cpu_axpy_round(acc, ws, yb, nc, dt);
            }
            lwq_cpu_store_f32(j->out->data, dt, t * d + c0, nc, acc);
        }
    }
}

static int cpu_moe_combine(void *ctx, const lwq_tensor *y, const lwq_tensor *slot_rows,
                           const lwq_tensor *wts, lwq_tensor *out, lwq_error *e)
{
    (void)ctx;
    (void)e;
    combine_job j = {y, slot_rows, wts, out};
    lwq_parallel_for(out->shape[0], 16, combine_rows, &j);
    return 0;
}

/* ---- amax ---------------------------------------------------------------------------------- */

typedef struct amax_job {
    const lwq_tensor *x;
    const uint8_t *valid;
    float part[256];
} amax_job;

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LWQ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LWQ_CLONES
#endif

/* The largest |x| of n BF16 values as magnitude bits (x & 0x7fff): positive BF16 values order
 * like their bits, and NaN is any bits above 0x7f80 (Inf), so the result is the float amax's
 * bits exactly, without widening each value (the observers' amax was 11 % of a calibration
 * run's samples through the f32 path; perf/RESULTS.md).  A fixed 32-wide inner loop, so -O2
 * vectorizes it. */
LWQ_CLONES static uint16_t bf16_absmax_bits(const uint16_t *p, int64_t n)
{
    uint16_t acc[32] = {0}, m = 0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int l = 0; l < 32; l++) {
            uint16_t a = (uint16_t)(p[i + l] & 0x7fffu);
            acc[l] = a > acc[l] ? a : acc[l];
        }
    for (; i < n; i++) {
        uint16_t a = (uint16_t)(p[i] & 0x7fffu);
        m = a > m ? a : m;
    }
    for (int l = 0; l < 32; l++)
        m = acc[l] > m ? acc[l] : m;
    return m;
}

static void amax_rows(void *ctx, int64_t b, int64_t e, int tid)
{
    amax_job *j = (amax_job *)ctx;
    int64_t d = j->x->shape[1];
    float m = 0.0f, buf[256];
    int nan = 0;
    if (j->x->dtype == LWQ_BF16) {
        uint16_t mb = 0;
        for (int64_t r = b; r < e; r++)
            if (!j->valid || j->valid[r]) {
                uint16_t a = bf16_absmax_bits((const uint16_t *)j->x->data + r * d, d);
                mb = a > mb ? a : mb;
            }
        j->part[tid] = mb > 0x7f80u ? NAN : lwq_bf16_to_f32(mb);
        return;
    }
    for (int64_t r = b; r < e; r++) {
        if (j->valid && !j->valid[r])
            continue;
        for (int64_t c0 = 0; c0 < d; c0 += 256) {
            int64_t nc = d - c0 < 256 ? d - c0 : 256;
            lwq_cpu_load_f32(j->x->data, j->x->dtype, r * d + c0, nc, buf);
            for (int64_t i = 0; i < nc; i++) {
                float a = fabsf(buf[i]);
                nan |= a != a;
                m = a > m ? a : m;
            }
        }
    }
    j->part[tid] = nan ? NAN : m;
}

static int cpu_amax(void *ctx, const lwq_tensor *x, const lwq_tensor *row_valid, float *out,
                    lwq_error *e)
{
    (void)ctx;
    (void)e;
    amax_job j;
    j.x = x;
    j.valid = row_valid ? (const uint8_t *)row_valid->data : NULL;
    for (int i = 0; i < 256; i++)
        j.part[i] = 0.0f;
    lwq_parallel_for(x->shape[0], 64, amax_rows, &j);
    float m = 0.0f;
    for (int i = 0; i < 256; i++) {
        if (j.part[i] != j.part[i]) {
            *out = NAN;
            return 0;
        }
        m = j.part[i] > m ? j.part[i] : m;
    }
    *out = m;
    return 0;
}

/* ---- strided copy -------------------------------------------------------------------------- */

typedef struct copy_job {
    const lwq_tensor *src;
    lwq_tensor *dst;
} copy_job;

/* One work item per index of the leading ndim-1 dims ("row"); the last dim is a strided run. */
static void copy_rows(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const copy_job *j = (const copy_job *)ctx;
    const lwq_tensor *s = j->src;
    lwq_tensor *d = j->dst;
    const int last = s->ndim - 1;
    const int64_t len = s->shape[last], ss = s->stride[last], ds = d->stride[last];
    for (int64_t r = b; r < e; r++) {
        int64_t so = 0, dof = 0, rem = r;
        for (int i = last - 1; i >= 0; i--) {
            int64_t k = rem % s->shape[i];
            rem /= s->shape[i];
            so += k * s->stride[i];
            dof += k * d->stride[i];
        }
        for (int64_t c = 0; c < len; c++) {
            float v = lwq_load_f(s->data, s->dtype, (size_t)(so + c * ss));
            lwq_cpu_store_f32(d->data, d->dtype, dof + c * ds, 1, &v);
        }
    }
}

static int cpu_copy_strided(void *ctx, const lwq_tensor *src, lwq_tensor *dst, lwq_error *e)
{
    (void)ctx;
    (void)e;
    int64_t rows = 1;
    for (int i = 0; i < src->ndim - 1; i++)
        rows *= src->shape[i];
    copy_job j = {src, dst};
    lwq_parallel_for(rows, 64, copy_rows, &j);
    return 0;
}

/* ---- table --------------------------------------------------------------------------------- */

static void cpu_destroy(void *ctx) { (void)ctx; }

static const lwq_backend_ops cpu_ops = {
    .name = "cpu",
    .device = LWQ_DEV_CPU,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .memset0 = cpu_memset0,
    .gemm = lwq_cpu_gemm,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .attention = lwq_cpu_attention,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .moe_route = cpu_moe_route,
    .gather_rows = cpu_gather_rows,
    .moe_combine = cpu_moe_combine,
    .amax = cpu_amax,
    .synchronize = cpu_sync,
    .copy = cpu_copy_strided,
    .gemm_grouped = lwq_cpu_gemm_grouped,
    .mamba2 = lwq_cpu_mamba2,
};

const char *lwq_backend_cpu_kernels(void) { return lwq_cpu_kernels_get()->name; }

const char *lwq_backend_cpu_exp(void) { return lwq_exp_kernels_get()->name; }

const char *lwq_backend_cpu_bytes(void)
{
    const lwq_cpu_kernels *k = lwq_cpu_kernels_get();
    return k->amx || k->panel_bf16 ? k->name : "fma";
}

int lwq_backend_cpu_create(lwq_backend *be, int threads, lwq_error *e)
{
    (void)e;
    if (threads > 0)
        lwq_parallel_set_threads(threads);
    be->ops = &cpu_ops;
    be->ctx = NULL;
    return 0;
}
