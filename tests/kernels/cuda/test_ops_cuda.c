/* CUDA backend ops against the CPU backend (the reference) on the same random inputs.
 * Skipped with a message when the build has no CUDA or no device is present.
 * Tolerances, |cuda - cpu| <= atol + rtol * |cpu|:
 *   F32 outputs: rtol 1e-5 (different summation orders in f32: cuBLAS vs OpenBLAS, tree vs
 *   sequential reductions; expf/cosf differ by <= 2 ulp between CUDA and glibc);
 *   BF16 outputs: rtol 2^-7 (both round once from f32 values that may straddle a rounding
 *   boundary: one BF16 ulp apart at most);
 *   index/selection outputs (gather, combine, route indexes, amax): exact. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/helpers/device/cuda_pair.h"
#include "tests/helpers/model/fwd_fixture.h"

LWQT_CUDA_SUITE(ops_cuda, "CPU-vs-CUDA op tests");

static pair mk(lwq_dtype dt, int64_t r, int64_t cols, float scale)
{
    pair p;
    lwq_error e = {0};
    int64_t shape[2] = {r, cols};
    int nd = cols ? 2 : 1;
    cr_assert_eq(lwq_backend_tensor_alloc(&cpu, dt, nd, shape, &p.c, &e), 0);
    cr_assert_eq(lwq_backend_tensor_alloc(&gpu, dt, nd, shape, &p.g, &e), 0);
    int64_t n = lwq_tensor_numel(&p.c);
    if (!lwq_dtype_is_act(dt))
        memset(p.c.data, 0, (size_t)n * lwq_dtype_size(dt));
    for (int64_t i = 0; i < n && lwq_dtype_is_act(dt); i++) {
        float v = frand() * scale;
        switch (dt) {
        case LWQ_F32: ((float *)p.c.data)[i] = v; break;
        case LWQ_BF16: ((uint16_t *)p.c.data)[i] = lwq_f32_to_bf16(v); break;
        case LWQ_F16: ((uint16_t *)p.c.data)[i] = lwq_f32_to_f16(v); break;
        default: break;
        }
    }
    cr_assert_eq(lwq_backend_upload(&gpu, p.g.data, p.c.data, (size_t)n * lwq_dtype_size(dt), &e),
                 0, "%s", e.msg);
    return p;
}

static void sync_to_gpu(pair *p)
{
    lwq_error e = {0};
    size_t b = (size_t)lwq_tensor_numel(&p->c) * lwq_dtype_size(p->c.dtype);
    cr_assert_eq(lwq_backend_upload(&gpu, p->g.data, p->c.data, b, &e), 0, "%s", e.msg);
}

/* Compare the gpu copy of p with the cpu copy. */
static void same(const pair *p, double atol, double rtol, const char *what)
{
    lwq_error e = {0};
    int64_t n = lwq_tensor_numel(&p->c);
    size_t b = (size_t)n * lwq_dtype_size(p->c.dtype);
    void *h = malloc(b);
    cr_assert_eq(lwq_backend_download(&gpu, h, p->g.data, b, &e), 0, "%s", e.msg);
    for (int64_t i = 0; i < n; i++) {
        double a = lwq_load_f(p->c.data, p->c.dtype, (size_t)i), g;
        if (p->c.dtype == LWQ_I32) {
            a = ((int32_t *)p->c.data)[i];
            g = ((int32_t *)h)[i];
        } else {
            g = lwq_load_f(h, p->c.dtype, (size_t)i);
        }
        cr_assert(fabs(a - g) <= atol + rtol * fabs(a), "%s[%lld]: cpu %.9g cuda %.9g", what,
                  (long long)i, a, g);
    }
    free(h);
}

#define BF16_RTOL (1.0 / 128)

static void gemm_case(lwq_dtype xdt, lwq_dtype wdt, lwq_dtype ydt, int bias, double rtol)
{
    const int64_t n = 67, in = 192, out = 300;
    pair x = mk(xdt, n, in, 1), w = mk(wdt, out, in, 0.2f), y = mk(ydt, n, out, 0),
         b = mk(LWQ_F32, out, 0, 1);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_gemm(&cpu, &x.c, &w.c, bias ? &b.c : NULL, &y.c, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_backend_gemm(&gpu, &x.g, &w.g, bias ? &b.g : NULL, &y.g, &e), 0, "%s", e.msg);
    same(&y, 1e-5, rtol, "gemm");
    drop(&x), drop(&w), drop(&y), drop(&b);
}

Test(ops_cuda, gemm_f32) { gemm_case(LWQ_F32, LWQ_F32, LWQ_F32, 0, 1e-5); }
Test(ops_cuda, gemm_bf16_bias) { gemm_case(LWQ_BF16, LWQ_BF16, LWQ_BF16, 1, BF16_RTOL); }
Test(ops_cuda, gemm_bf16_to_f32) { gemm_case(LWQ_BF16, LWQ_BF16, LWQ_F32, 0, 1e-5); }
Test(ops_cuda, gemm_mixed_f32_x_bf16_w) { gemm_case(LWQ_F32, LWQ_BF16, LWQ_F32, 1, 1e-5); }

Test(ops_cuda, rmsnorm_f32_and_bf16)
{
    lwq_dtype dts[2] = {LWQ_F32, LWQ_BF16};
    for (int k = 0; k < 2; k++) {
        pair x = mk(dts[k], 33, 520, 3), w = mk(dts[k], 520, 0, 1), y = mk(dts[k], 33, 520, 0);
        lwq_error e = {0};
        cr_assert_eq(lwq_backend_rmsnorm(&cpu, &x.c, &w.c, 1e-6f, &y.c, &e), 0);
        cr_assert_eq(lwq_backend_rmsnorm(&gpu, &x.g, &w.g, 1e-6f, &y.g, &e), 0, "%s", e.msg);
        same(&y, 1e-6, k ? 2 * BF16_RTOL : 1e-5, "rmsnorm");
        drop(&x), drop(&w), drop(&y);
    }
}

Test(ops_cuda, rope_bf16)
{
    const int64_t n = 40, hd = 64, cols = 4 * hd;
    pair x = mk(LWQ_BF16, n, cols, 2), pos = mk(LWQ_I32, n, 0, 0), inv = mk(LWQ_F32, hd / 2, 0, 0);
    for (int i = 0; i < n; i++)
        ((int32_t *)pos.c.data)[i] = i * 13;
    for (int i = 0; i < hd / 2; i++)
        ((float *)inv.c.data)[i] = powf(500000.0f, -2.0f * i / hd);
    sync_to_gpu(&pos);
    sync_to_gpu(&inv);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_rope(&cpu, &x.c, hd, &pos.c, &inv.c, 1.0f, &e), 0);
    cr_assert_eq(lwq_backend_rope(&gpu, &x.g, hd, &pos.g, &inv.g, 1.0f, &e), 0, "%s", e.msg);
    same(&x, 2e-2, 2 * BF16_RTOL, "rope");
    drop(&x), drop(&pos), drop(&inv);
}

Test(ops_cuda, attention_padded_gqa_f32)
{
    const int64_t B = 2, T = 130, hd = 128;
    const int H = 8, KV = 2;
    pair q = mk(LWQ_F32, B * T, H * hd, 1), k = mk(LWQ_F32, B * T, KV * hd, 1),
         v = mk(LWQ_F32, B * T, KV * hd, 1), o = mk(LWQ_F32, B * T, H * hd, 0),
         val = mk(LWQ_U8, B * T, 0, 0);
    for (int64_t t = 0; t < B * T; t++)
        ((uint8_t *)val.c.data)[t] = t < T || t % T >= 50; /* sequence 1 left-padded by 50 */
    sync_to_gpu(&val);
    lwq_attn_args ac = {&q.c, &k.c, &v.c, &o.c, &val.c, B, T, H, KV, hd, 0.0883883f};
    lwq_attn_args ag = {&q.g, &k.g, &v.g, &o.g, &val.g, B, T, H, KV, hd, 0.0883883f};
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_attention(&cpu, &ac, &e), 0);
    cr_assert_eq(lwq_backend_attention(&gpu, &ag, &e), 0, "%s", e.msg);
    same(&o, 1e-5, 1e-4, "attention");
    drop(&q), drop(&k), drop(&v), drop(&o), drop(&val);
}

/* The tiled kernel (LWQ_CUDA_ATTENTION=tiled, attention_cuda.h) computes the warp kernel's
 * function bit for bit, over tile edges (T not a multiple of 32), padding, GQA groups, head dims
 * that leave lanes idle, and BF16. */
static void tiled_case(lwq_dtype dt, int64_t B, int64_t T, int H, int KV, int64_t hd, int pad)
{
    setenv("LWQ_CUDA_ATTENTION", "tiled", 1);
    lwq_backend tiled;
    lwq_error e = {0};
    int rc = lwq_backend_cuda_create(&tiled, 0, &e);
    unsetenv("LWQ_CUDA_ATTENTION");
    cr_assert_eq(rc, 0, "%s", e.msg);
    pair q = mk(dt, B * T, H * hd, 1), k = mk(dt, B * T, KV * hd, 1), v = mk(dt, B * T, KV * hd, 1),
         o = mk(dt, B * T, H * hd, 0), val = mk(LWQ_U8, B * T, 0, 0);
    for (int64_t t = 0; t < B * T; t++)
        ((uint8_t *)val.c.data)[t] = t < T || t % T >= pad; /* later sequences left-padded */
    sync_to_gpu(&val);
    float sc = 1.0f / sqrtf((float)hd);
    lwq_attn_args ac = {&q.c, &k.c, &v.c, &o.c, &val.c, B, T, H, KV, hd, sc};
    lwq_attn_args ag = {&q.g, &k.g, &v.g, &o.g, &val.g, B, T, H, KV, hd, sc};
    cr_assert_eq(lwq_backend_attention(&cpu, &ac, &e), 0);
    size_t bytes = (size_t)lwq_tensor_numel(&o.c) * lwq_dtype_size(dt);
    void *hw = malloc(bytes), *ht = malloc(bytes);
    cr_assert_eq(lwq_backend_attention(&gpu, &ag, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_backend_download(&gpu, hw, o.g.data, bytes, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_backend_memset0(&gpu, o.g.data, bytes, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_backend_attention(&tiled, &ag, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_backend_synchronize(&tiled, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_backend_download(&gpu, ht, o.g.data, bytes, &e), 0, "%s", e.msg);
    cr_expect_eq(memcmp(hw, ht, bytes), 0, "tiled != warp (B %lld T %lld H %d KV %d hd %lld)", (long long)B,
                 (long long)T, H, KV, (long long)hd);
    same(&o, dt == LWQ_F32 ? 1e-5 : 2e-2, dt == LWQ_F32 ? 1e-4 : 2 * BF16_RTOL, "tiled attention");
    free(hw), free(ht);
    drop(&q), drop(&k), drop(&v), drop(&o), drop(&val);
    lwq_backend_destroy(&tiled);
}

Test(ops_cuda, attention_tiled_equals_warp_f32_padded_gqa) { tiled_case(LWQ_F32, 2, 130, 8, 2, 128, 50); }
Test(ops_cuda, attention_tiled_equals_warp_bf16_odd_head_dim) { tiled_case(LWQ_BF16, 1, 33, 4, 4, 200, 0); }
Test(ops_cuda, attention_tiled_equals_warp_short_and_fully_padded) { tiled_case(LWQ_F32, 3, 5, 2, 1, 64, 5); }

Test(ops_cuda, swiglu_add_bf16)
{
    pair g = mk(LWQ_BF16, 17, 700, 4), u = mk(LWQ_BF16, 17, 700, 1), o = mk(LWQ_BF16, 17, 700, 0);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_swiglu(&cpu, &g.c, &u.c, &o.c, &e), 0);
    cr_assert_eq(lwq_backend_swiglu(&gpu, &g.g, &u.g, &o.g, &e), 0, "%s", e.msg);
    same(&o, 0, BF16_RTOL, "swiglu");
    cr_assert_eq(lwq_backend_add(&cpu, &g.c, &u.c, &e), 0);
    cr_assert_eq(lwq_backend_add(&gpu, &g.g, &u.g, &e), 0, "%s", e.msg);
    same(&g, 0, 0, "add");
    drop(&g), drop(&u), drop(&o);
}

Test(ops_cuda, copy_strided_broadcast_bf16_to_f32)
{
    pair s = mk(LWQ_BF16, 33, 40, 2), d = mk(LWQ_F32, 33, 3 * 24, 0);
    lwq_error e = {0};
    /* dst[r, h, j] = src[r, 8 + 2j] for 3 heads (src broadcast over h, every other column) */
    for (int dev = 0; dev < 2; dev++) {
        lwq_tensor sv = dev ? s.g : s.c, dv = dev ? d.g : d.c;
        sv.ndim = dv.ndim = 3;
        sv.data = (uint16_t *)sv.data + 8;
        sv.shape[0] = dv.shape[0] = 33, sv.shape[1] = dv.shape[1] = 3;
        sv.shape[2] = dv.shape[2] = 16;
        sv.stride[0] = 40, sv.stride[1] = 0, sv.stride[2] = 2;
        dv.stride[0] = 72, dv.stride[1] = 24, dv.stride[2] = 1;
        cr_assert_eq(lwq_backend_copy(dev ? &gpu : &cpu, &sv, &dv, &e), 0, "%s", e.msg);
    }
    same(&d, 0, 0, "copy");
    drop(&s), drop(&d);
}

Test(ops_cuda, moe_route_gather_combine)
{
    const int64_t n = 50, E = 64, K = 8, d = 96;
    lwq_route_mode modes[3] = {LWQ_ROUTE_SOFTMAX_TOPK, LWQ_ROUTE_SOFTMAX_TOPK_NORM,
                               LWQ_ROUTE_TOPK_SOFTMAX};
    pair lg = mk(LWQ_F32, n, E, 4), idx = mk(LWQ_I32, n, K, 0), w = mk(LWQ_F32, n, K, 0);
    lwq_error e = {0};
    for (int m = 0; m < 3; m++) {
        cr_assert_eq(lwq_backend_moe_route(&cpu, &lg.c, K, modes[m], LWQ_F32, &idx.c, &w.c, &e), 0);
        cr_assert_eq(lwq_backend_moe_route(&gpu, &lg.g, K, modes[m], LWQ_F32, &idx.g, &w.g, &e), 0,
                     "%s", e.msg);
        same(&idx, 0, 0, "route idx");
        same(&w, 1e-7, 1e-5, "route weights");
    }
    /* gather rows idx (flattened) of a (E, d) table, then combine them back per token */
    pair src = mk(LWQ_BF16, E, d, 1), dst = mk(LWQ_BF16, n * K, d, 0), out = mk(LWQ_BF16, n, d, 0),
         slot = mk(LWQ_I32, n, K, 0);
    lwq_tensor rows_c = idx.c, rows_g = idx.g;
    rows_c.ndim = rows_g.ndim = 1;
    rows_c.shape[0] = rows_g.shape[0] = n * K;
    rows_c.stride[0] = rows_g.stride[0] = 1;
    cr_assert_eq(lwq_backend_gather_rows(&cpu, &src.c, &rows_c, &dst.c, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_backend_gather_rows(&gpu, &src.g, &rows_g, &dst.g, &e), 0, "%s", e.msg);
    same(&dst, 0, 0, "gather");
    for (int64_t i = 0; i < n * K; i++)
        ((int32_t *)slot.c.data)[i] = i % 5 == 0 ? -1 : (int32_t)((i * 7) % (n * K));
    sync_to_gpu(&slot);
    /* the same route weights on both: each backend's own differ by an ulp (glibc vs CUDA expf),
     * and the combine is compared exactly */
    sync_to_gpu(&w);
    cr_assert_eq(lwq_backend_moe_combine(&cpu, &dst.c, &slot.c, &w.c, &out.c, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_backend_moe_combine(&gpu, &dst.g, &slot.g, &w.g, &out.g, &e), 0, "%s", e.msg);
    same(&out, 0, 0, "combine");
    cr_assert_eq(lwq_backend_synchronize(&gpu, &e), 0, "%s", e.msg);
    drop(&lg), drop(&idx), drop(&w), drop(&src), drop(&dst), drop(&out), drop(&slot);
}

/* F32 output: no rounding to a narrow dtype hides an FMA contraction of product and sum. */
Test(ops_cuda, combine_f32_is_bitwise_the_cpu_one)
{
    const int64_t n = 33, K = 4, m = 40, d = 130;
    pair y = mk(LWQ_F32, m, d, 3), slot = mk(LWQ_I32, n, K, 0), w = mk(LWQ_F32, n, K, 1),
         out = mk(LWQ_F32, n, d, 0);
    for (int64_t i = 0; i < n * K; i++)
        ((int32_t *)slot.c.data)[i] = i % 7 == 3 ? -1 : (int32_t)((i * 11) % m);
    sync_to_gpu(&slot);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_moe_combine(&cpu, &y.c, &slot.c, &w.c, &out.c, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_backend_moe_combine(&gpu, &y.g, &slot.g, &w.g, &out.g, &e), 0, "%s", e.msg);
    same(&out, 0, 0, "combine f32");
    drop(&y), drop(&slot), drop(&w), drop(&out);
}

/* A tolerated failure (a refused host registration, a failed allocation) left the runtime's
 * last error set, and the next launch's check reported it as its own. */
Test(ops_cuda, tolerated_failures_do_not_fail_the_next_launch)
{
    lwq_error e = {0};
    size_t b = 1 << 20;
    void *h = aligned_alloc(4096, b);
    cr_assert_eq(lwq_backend_host_register(&gpu, h, b, &e), 0, "%s", e.msg);
    cr_assert_lt(lwq_backend_host_register(&gpu, h, b, &e), 0, "registering twice is refused");
    void *p = NULL;
    cr_assert_lt(lwq_backend_alloc(&gpu, (size_t)1 << 60, &p, &e), 0, "an exabyte is refused");
    pair x = mk(LWQ_F32, 8, 16, 1), wt = mk(LWQ_F32, 4, 16, 1), y = mk(LWQ_F32, 8, 4, 0);
    cr_expect_eq(lwq_backend_gemm(&gpu, &x.g, &wt.g, NULL, &y.g, &e), 0, "%s", e.msg);
    cr_expect_eq(lwq_backend_synchronize(&gpu, &e), 0, "%s", e.msg);
    lwq_backend_host_unregister(&gpu, h);
    free(h);
    drop(&x), drop(&wt), drop(&y);
}

Test(ops_cuda, gather_out_of_range_reported_at_synchronize)
{
    pair src = mk(LWQ_F32, 4, 8, 1), dst = mk(LWQ_F32, 2, 8, 0), rows = mk(LWQ_I32, 2, 0, 0);
    ((int32_t *)rows.c.data)[1] = 9;
    sync_to_gpu(&rows);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_gather_rows(&gpu, &src.g, &rows.g, &dst.g, &e), 0);
    cr_assert_eq(lwq_backend_synchronize(&gpu, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "row index was outside"), "%s", e.msg);
    drop(&src), drop(&dst), drop(&rows);
}

Test(ops_cuda, amax_masked)
{
    pair x = mk(LWQ_BF16, 300, 257, 5), val = mk(LWQ_U8, 300, 0, 0);
    for (int i = 0; i < 300; i++)
        ((uint8_t *)val.c.data)[i] = i % 3 != 0;
    sync_to_gpu(&val);
    float a, b;
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_amax(&cpu, &x.c, &val.c, &a, &e), 0);
    cr_assert_eq(lwq_backend_amax(&gpu, &x.g, &val.g, &b, &e), 0, "%s", e.msg);
    cr_assert_eq(a, b, "amax cpu %g cuda %g", a, b);
    drop(&x), drop(&val);
}

/* ---- whole forward on the device vs the CPU ------------------------------------------------- */

typedef struct dev_weights {
    fwd_fixture *f;
    lwq_tensor *g; /* device copies, by fixture index */
} dev_weights;

static int dev_get(void *ctx, const char *name, lwq_tensor *out, lwq_error *e)
{
    dev_weights *d = ctx;
    const lwq_ckpt_tensor *t = lwq_ckpt_find(&d->f->ck, name);
    if (!t)
        return lwq_errf(e, LWQ_ENOENT, "not in fixture");
    *out = d->g[t - d->f->ck.tensors];
    return 0;
}

static void forward_case(const char *fixture, lwq_dtype act, double rtol)
{
    char dir[1024];
    lwq_error e = {0};
    fwd_fixture f;
    cr_assert_eq(fwd_fixture_open(&f, fwd_fixture_dir(fixture, dir, sizeof dir), NULL, &e), 0,
                 "%s", e.msg);
    dev_weights dw = {&f, calloc((size_t)f.n, sizeof(lwq_tensor))};
    for (int i = 0; i < f.n; i++) {
        cr_assert_eq(lwq_backend_tensor_alloc(&gpu, f.t[i].dtype, f.t[i].ndim, f.t[i].shape,
                                              &dw.g[i], &e), 0, "%s", e.msg);
        cr_assert_eq(lwq_backend_upload(&gpu, dw.g[i].data, f.t[i].data,
                                        (size_t)lwq_tensor_numel(&f.t[i]) *
                                            lwq_dtype_size(f.t[i].dtype), &e), 0, "%s", e.msg);
    }
    lwq_weights wg = {dev_get, &dw};
    const lwq_model_config *c = &f.ck.cfg;
    const int64_t B = 2, T = 16, lens[2] = {16, 11};
    int32_t tok[32];
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 7 + 2) % (int)c->vocab_size;
    pair lg = mk(act, B * T, c->vocab_size, 0);
    lwq_model mc, mg;
    lwq_batch bc, bg;
    cr_assert_eq(lwq_model_init(&mc, c, &cpu, act, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_model_init(&mg, c, &gpu, act, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_batch_init(&bc, &cpu, B, T, lens, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_batch_init(&bg, &gpu, B, T, lens, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_model_forward(&mc, &f.w, tok, &bc, &lg.c, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_model_forward(&mg, &wg, tok, &bg, &lg.g, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_backend_synchronize(&gpu, &e), 0, "%s", e.msg);
    /* compare real rows only: padding rows carry no meaning */
    size_t bytes = (size_t)lwq_tensor_numel(&lg.c) * lwq_dtype_size(act);
    void *h = malloc(bytes);
    cr_assert_eq(lwq_backend_download(&gpu, h, lg.g.data, bytes, &e), 0, "%s", e.msg);
    for (int64_t t = 0; t < B * T; t++) {
        if (!bc.valid_host[t])
            continue;
        for (int64_t v = 0; v < c->vocab_size; v++) {
            size_t i = (size_t)(t * c->vocab_size + v);
            double a = lwq_load_f(lg.c.data, act, i), g = lwq_load_f(h, act, i);
            cr_assert(fabs(a - g) <= rtol * (1 + fabs(a)), "%s logits[%lld][%lld]: cpu %.9g "
                      "cuda %.9g", fixture, (long long)t, (long long)v, a, g);
        }
    }
    free(h);
    drop(&lg);
    lwq_batch_free(&bc, &cpu);
    lwq_batch_free(&bg, &gpu);
    lwq_model_free(&mc);
    lwq_model_free(&mg);
    for (int i = 0; i < f.n; i++)
        lwq_backend_tensor_free(&gpu, &dw.g[i]);
    free(dw.g);
    fwd_fixture_free(&f);
}

/* F32: per-op differences of a few f32 ulps through 2 layers: 1e-4.  BF16: a BF16 rounding
 * flip in one op propagates, 2 layers: 5e-2. */
Test(ops_cuda, forward_qwen3_moe_f32) { forward_case("cai-tiny-qwen3-moe", LWQ_F32, 1e-4); }
Test(ops_cuda, forward_mixtral_f32) { forward_case("cai-tiny-mixtral", LWQ_F32, 1e-4); }
Test(ops_cuda, forward_deepseek_v2_f32) { forward_case("cai-tiny-deepseek-v2", LWQ_F32, 1e-4); }
Test(ops_cuda, forward_qwen2_f32) { forward_case("cai-tiny-qwen2", LWQ_F32, 1e-4); }
Test(ops_cuda, forward_llama3_bf16) { forward_case("mlxd-tiny-llama3-bf16", LWQ_BF16, 5e-2); }
Test(ops_cuda, forward_qwen3_bf16) { forward_case("mlxd-tiny-qwen3-bf16", LWQ_BF16, 5e-2); }
