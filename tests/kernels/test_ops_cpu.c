/* CPU backend ops against naive double-precision references written here, plus the error paths
 * of the checking wrappers.  Tolerances: F32 results are compared with atol + rtol*|ref| where
 * rtol ~ a few f32 ulps times the reduction length's growth; BF16 results within one BF16 ulp
 * (2^-8 relative) of the reference, since each op rounds once (twice for rmsnorm/rope). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/backend.h"

static lwq_backend be;

static void setup(void)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_cpu_create(&be, 2, &e), 0, "%s", e.msg);
}

static void teardown(void) { lwq_backend_destroy(&be); }

TestSuite(ops_cpu, .init = setup, .fini = teardown);

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* A host tensor of dtype dt filled with uniform [-scale, scale), values exactly representable. */
static lwq_tensor mk(lwq_dtype dt, int64_t r, int64_t c, float scale)
{
    int64_t shape[2] = {r, c};
    lwq_tensor t;
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_tensor_alloc(&be, dt, c ? 2 : 1, shape, &t, &e), 0);
    int64_t n = r * (c ? c : 1);
    for (int64_t i = 0; i < n; i++) {
        float v = frand() * scale;
        if (dt == LWQ_F32)
            ((float *)t.data)[i] = v;
        else if (dt == LWQ_BF16)
            ((uint16_t *)t.data)[i] = lwq_f32_to_bf16(v);
        else if (dt == LWQ_F16)
            ((uint16_t *)t.data)[i] = lwq_f32_to_f16(v);
    }
    return t;
}

static float at(const lwq_tensor *t, int64_t i) { return lwq_load_f(t->data, t->dtype, i); }

static void close_to(double got, double ref, double atol, double rtol, const char *what, int64_t i)
{
    cr_assert(fabs(got - ref) <= atol + rtol * fabs(ref), "%s[%lld]: got %.9g, reference %.9g",
              what, (long long)i, got, ref);
}

/* ---- gemm ------------------------------------------------------------------------------------ */

static void gemm_case(lwq_dtype xdt, lwq_dtype wdt, lwq_dtype ydt, int64_t n, int64_t in,
                      int64_t out, int bias)
{
    lwq_tensor x = mk(xdt, n, in, 1.0f), w = mk(wdt, out, in, 0.5f), y = mk(ydt, n, out, 0.0f);
    lwq_tensor b = mk(LWQ_F32, out, 0, 1.0f);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_gemm(&be, &x, &w, bias ? &b : NULL, &y, &e), 0, "%s", e.msg);
    double rtol = ydt == LWQ_F32 ? 1e-6 : ydt == LWQ_BF16 ? 1.0 / 256 : 1.0 / 2048;
    for (int64_t r = 0; r < n; r++)
        for (int64_t o = 0; o < out; o++) {
            double s = bias ? at(&b, o) : 0.0, mag = fabs(s);
            for (int64_t i = 0; i < in; i++) {
                s += (double)at(&x, r * in + i) * at(&w, o * in + i);
                mag += fabs((double)at(&x, r * in + i) * at(&w, o * in + i));
            }
            /* f32 accumulation error grows with the sum of |terms| */
            close_to(at(&y, r * out + o), s, 1e-6 * mag, rtol, "gemm y", r * out + o);
        }
    lwq_backend_tensor_free(&be, &x);
    lwq_backend_tensor_free(&be, &w);
    lwq_backend_tensor_free(&be, &y);
    lwq_backend_tensor_free(&be, &b);
}

Test(ops_cpu, gemm_f32) { gemm_case(LWQ_F32, LWQ_F32, LWQ_F32, 37, 70, 300, 0); }
Test(ops_cpu, gemm_bf16_weights_bias) { gemm_case(LWQ_F32, LWQ_BF16, LWQ_F32, 5, 64, 130, 1); }
Test(ops_cpu, gemm_bf16_activations) { gemm_case(LWQ_BF16, LWQ_BF16, LWQ_BF16, 20, 96, 257, 1); }
Test(ops_cpu, gemm_f16) { gemm_case(LWQ_F16, LWQ_F16, LWQ_F16, 9, 33, 17, 0); }

Test(ops_cpu, gemm_same_bits_for_1_and_2_threads)
{
    lwq_tensor x = mk(LWQ_BF16, 65, 300, 1.0f), w = mk(LWQ_BF16, 513, 300, 1.0f);
    lwq_tensor y1 = mk(LWQ_F32, 65, 513, 0.0f), y2 = mk(LWQ_F32, 65, 513, 0.0f);
    lwq_error e = {0};
    lwq_parallel_set_threads(1);
    cr_assert_eq(lwq_backend_gemm(&be, &x, &w, NULL, &y1, &e), 0);
    lwq_parallel_set_threads(2);
    cr_assert_eq(lwq_backend_gemm(&be, &x, &w, NULL, &y2, &e), 0);
    cr_assert(memcmp(y1.data, y2.data, 65 * 513 * 4) == 0, "results differ between thread counts");
    lwq_backend_tensor_free(&be, &x);
    lwq_backend_tensor_free(&be, &w);
    lwq_backend_tensor_free(&be, &y1);
    lwq_backend_tensor_free(&be, &y2);
}

Test(ops_cpu, gemm_rejects_mismatched_inner_dim)
{
    lwq_tensor x = mk(LWQ_F32, 4, 8, 1.0f), w = mk(LWQ_F32, 6, 7, 1.0f), y = mk(LWQ_F32, 4, 6, 0);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_gemm(&be, &x, &w, NULL, &y, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "w is (6, 7) but x has 8 columns"), "%s", e.msg);
    lwq_backend_tensor_free(&be, &x);
    lwq_backend_tensor_free(&be, &w);
    lwq_backend_tensor_free(&be, &y);
}

Test(ops_cpu, gemm_rejects_wrong_output_shape_and_dtype)
{
    lwq_tensor x = mk(LWQ_F32, 4, 8, 1.0f), w = mk(LWQ_F32, 6, 8, 1.0f), y = mk(LWQ_F32, 4, 5, 0);
    lwq_tensor yi = mk(LWQ_I32, 4, 6, 0);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_gemm(&be, &x, &w, NULL, &y, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "y is (4, 5), expected (4, 6)"), "%s", e.msg);
    lwq_error_clear(&e);
    cr_assert_eq(lwq_backend_gemm(&be, &x, &w, NULL, &yi, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "y has dtype I32"), "%s", e.msg);
    lwq_backend_tensor_free(&be, &x);
    lwq_backend_tensor_free(&be, &w);
    lwq_backend_tensor_free(&be, &y);
    lwq_backend_tensor_free(&be, &yi);
}

/* ---- rmsnorm --------------------------------------------------------------------------------- */

static void rmsnorm_case(lwq_dtype dt)
{
    const int64_t n = 7, d = 300;
    lwq_tensor x = mk(dt, n, d, 3.0f), w = mk(dt, d, 0, 1.0f), y = mk(dt, n, d, 0);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_rmsnorm(&be, &x, &w, 1e-6f, &y, &e), 0, "%s", e.msg);
    double rtol = dt == LWQ_F32 ? 1e-6 : 2.0 / 256; /* two roundings */
    for (int64_t r = 0; r < n; r++) {
        double ss = 0;
        for (int64_t i = 0; i < d; i++)
            ss += (double)at(&x, r * d + i) * at(&x, r * d + i);
        double rs = 1.0 / sqrt(ss / d + 1e-6);
        for (int64_t i = 0; i < d; i++)
            close_to(at(&y, r * d + i), at(&x, r * d + i) * rs * at(&w, i), 1e-7, rtol, "rms",
                     r * d + i);
    }
    lwq_backend_tensor_free(&be, &x);
    lwq_backend_tensor_free(&be, &w);
    lwq_backend_tensor_free(&be, &y);
}

Test(ops_cpu, rmsnorm_f32) { rmsnorm_case(LWQ_F32); }
Test(ops_cpu, rmsnorm_bf16) { rmsnorm_case(LWQ_BF16); }

Test(ops_cpu, rmsnorm_rejects_weight_of_wrong_length)
{
    lwq_tensor x = mk(LWQ_F32, 2, 8, 1.0f), w = mk(LWQ_F32, 6, 0, 1.0f);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_rmsnorm(&be, &x, &w, 1e-5f, &x, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "rmsnorm: w has 6 elements, expected 8"), "%s", e.msg);
    lwq_backend_tensor_free(&be, &x);
    lwq_backend_tensor_free(&be, &w);
}

/* ---- rope ------------------------------------------------------------------------------------ */

Test(ops_cpu, rope_rotate_half_f32)
{
    const int64_t n = 6, hd = 8, heads = 3, cols = heads * hd;
    lwq_tensor x = mk(LWQ_F32, n, cols, 1.0f), x0 = mk(LWQ_F32, n, cols, 0);
    memcpy(x0.data, x.data, (size_t)(n * cols) * 4);
    int64_t s1[1] = {n}, s2[1] = {hd / 2};
    lwq_tensor pos, inv;
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_I32, 1, s1, &pos, &e), 0);
    cr_assert_eq(lwq_backend_tensor_alloc(&be, LWQ_F32, 1, s2, &inv, &e), 0);
    for (int i = 0; i < n; i++)
        ((int32_t *)pos.data)[i] = (i * 7) % 11;
    for (int i = 0; i < hd / 2; i++)
        ((float *)inv.data)[i] = powf(10000.0f, -2.0f * i / hd);
    cr_assert_eq(lwq_backend_rope(&be, &x, hd, &pos, &inv, 1.0f, &e), 0, "%s", e.msg);
    for (int64_t r = 0; r < n; r++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < hd / 2; i++) {
                double ang = (double)((float)((int32_t *)pos.data)[r] * ((float *)inv.data)[i]);
                double x1 = at(&x0, r * cols + h * hd + i), x2 = at(&x0, r * cols + h * hd + i +
                                                                          hd / 2);
                close_to(at(&x, r * cols + h * hd + i), x1 * cos(ang) - x2 * sin(ang), 1e-6, 1e-6,
                         "rope first half", r);
                close_to(at(&x, r * cols + h * hd + i + hd / 2), x2 * cos(ang) + x1 * sin(ang),
                         1e-6, 1e-6, "rope second half", r);
            }
    lwq_backend_tensor_free(&be, &x);
    lwq_backend_tensor_free(&be, &x0);
    lwq_backend_tensor_free(&be, &pos);
    lwq_backend_tensor_free(&be, &inv);
}

Test(ops_cpu, rope_rejects_odd_head_dim)
{
    lwq_tensor x = mk(LWQ_F32, 2, 6, 1.0f), pos = mk(LWQ_I32, 2, 0, 0), inv = mk(LWQ_F32, 1, 0, 1);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_rope(&be, &x, 3, &pos, &inv, 1.0f, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "head_dim 3 must be even"), "%s", e.msg);
    lwq_backend_tensor_free(&be, &x);
    lwq_backend_tensor_free(&be, &pos);
    lwq_backend_tensor_free(&be, &inv);
}

/* ---- attention ------------------------------------------------------------------------------- */

static void attention_ref(const lwq_tensor *q, const lwq_tensor *k, const lwq_tensor *v,
                          const uint8_t *valid, int64_t B, int64_t T, int H, int KV, int64_t hd,
                          double *out)
{
    double *s = malloc((size_t)T * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++) {
                int g = h / (H / KV);
                double mx = -INFINITY;
                for (int64_t j = 0; j < T; j++) {
                    s[j] = -INFINITY;
                    if (j > i || (valid && !valid[b * T + j]))
                        continue;
                    double d = 0;
                    for (int64_t c = 0; c < hd; c++)
                        d += (double)at(q, (b * T + i) * H * hd + h * hd + c) *
                             at(k, (b * T + j) * KV * hd + g * hd + c);
                    s[j] = d / sqrt((double)hd);
                    mx = s[j] > mx ? s[j] : mx;
                }
                double sum = 0;
                for (int64_t j = 0; j < T; j++)
                    sum += s[j] == -INFINITY ? 0 : exp(s[j] - mx);
                for (int64_t c = 0; c < hd; c++) {
                    double o = 0;
                    for (int64_t j = 0; j < T; j++)
                        if (s[j] != -INFINITY)
                            o += exp(s[j] - mx) / sum * at(v, (b * T + j) * KV * hd + g * hd + c);
                    out[(b * T + i) * H * hd + h * hd + c] = sum > 0 ? o : 0.0;
                }
            }
    free(s);
}

static void attention_case(lwq_dtype dt, int64_t B, int64_t T, int H, int KV, int64_t hd,
                           const int64_t *lens)
{
    int64_t n = B * T;
    lwq_tensor q = mk(dt, n, H * hd, 2.0f), k = mk(dt, n, KV * hd, 2.0f),
               v = mk(dt, n, KV * hd, 1.0f), o = mk(dt, n, H * hd, 0), valid = mk(LWQ_U8, n, 0, 0);
    uint8_t *vm = (uint8_t *)valid.data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            vm[b * T + t] = !lens || t >= T - lens[b];
    lwq_attn_args a = {&q, &k, &v, &o, lens ? &valid : NULL, B, T, H, KV, hd,
                       (float)(1.0 / sqrt((double)hd))};
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_attention(&be, &a, &e), 0, "%s", e.msg);
    double *ref = malloc((size_t)(n * H * hd) * sizeof(double));
    attention_ref(&q, &k, &v, lens ? vm : NULL, B, T, H, KV, hd, ref);
    double rtol = dt == LWQ_F32 ? 2e-6 : 1.0 / 256;
    for (int64_t i = 0; i < n * H * hd; i++) {
        if (!vm[i / (H * hd)]) {
            cr_assert_eq(at(&o, i), 0.0f, "padding query row %lld must be zero", (long long)i);
            continue;
        }
        close_to(at(&o, i), ref[i], 2e-6, rtol, "attention out", i);
    }
    free(ref);
    lwq_backend_tensor_free(&be, &q);
    lwq_backend_tensor_free(&be, &k);
    lwq_backend_tensor_free(&be, &v);
    lwq_backend_tensor_free(&be, &o);
    lwq_backend_tensor_free(&be, &valid);
}

Test(ops_cpu, attention_causal_gqa_f32_multi_tile)
{
    attention_case(LWQ_F32, 1, 150, 4, 2, 16, NULL);
}

Test(ops_cpu, attention_left_padded_batch)
{
    int64_t lens[3] = {70, 3, 0};
    attention_case(LWQ_F32, 3, 70, 2, 1, 8, lens);
}

Test(ops_cpu, attention_bf16) { attention_case(LWQ_BF16, 2, 33, 4, 4, 32, NULL); }

Test(ops_cpu, attention_rejects_heads_not_multiple_of_kv)
{
    lwq_tensor q = mk(LWQ_F32, 2, 24, 1), k = mk(LWQ_F32, 2, 16, 1), o = mk(LWQ_F32, 2, 24, 0);
    lwq_attn_args a = {&q, &k, &k, &o, NULL, 1, 2, 3, 2, 8, 0.3f};
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_attention(&be, &a, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "heads must be a multiple of kv_heads"), "%s", e.msg);
    lwq_backend_tensor_free(&be, &q);
    lwq_backend_tensor_free(&be, &k);
    lwq_backend_tensor_free(&be, &o);
}

/* ---- element-wise ---------------------------------------------------------------------------- */

Test(ops_cpu, swiglu_and_add_f32)
{
    lwq_tensor g = mk(LWQ_F32, 3, 300, 4.0f), u = mk(LWQ_F32, 3, 300, 1.0f),
               o = mk(LWQ_F32, 3, 300, 0);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_swiglu(&be, &g, &u, &o, &e), 0);
    for (int i = 0; i < 900; i++) {
        double gv = at(&g, i);
        close_to(at(&o, i), gv / (1 + exp(-gv)) * at(&u, i), 1e-7, 1e-6, "swiglu", i);
    }
    cr_assert_eq(lwq_backend_add(&be, &o, &u, &e), 0);
    for (int i = 0; i < 900; i++) {
        double gv = at(&g, i);
        close_to(at(&o, i), gv / (1 + exp(-gv)) * at(&u, i) + at(&u, i), 1e-7, 1e-6, "add", i);
    }
    lwq_backend_tensor_free(&be, &g);
    lwq_backend_tensor_free(&be, &u);
    lwq_backend_tensor_free(&be, &o);
}

Test(ops_cpu, swiglu_bf16_rounds_like_a_framework)
{
    lwq_tensor g = mk(LWQ_BF16, 1, 64, 4.0f), u = mk(LWQ_BF16, 1, 64, 1.0f),
               o = mk(LWQ_BF16, 1, 64, 0);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_swiglu(&be, &g, &u, &o, &e), 0);
    for (int i = 0; i < 64; i++) {
        float gv = at(&g, i);
        float s = lwq_round_to(gv / (1.0f + expf(-gv)), LWQ_BF16);
        cr_assert_eq(at(&o, i), lwq_round_to(s * at(&u, i), LWQ_BF16), "element %d", i);
    }
    lwq_backend_tensor_free(&be, &g);
    lwq_backend_tensor_free(&be, &u);
    lwq_backend_tensor_free(&be, &o);
}

/* ---- MoE ------------------------------------------------------------------------------------- */

static void route(lwq_route_mode mode, const float *lg, int E, int k, int32_t *idx, float *w)
{
    int64_t s1[2] = {1, E}, s2[2] = {1, k};
    lwq_tensor l = lwq_tensor_view((void *)lg, LWQ_F32, 2, s1);
    lwq_tensor it = lwq_tensor_view(idx, LWQ_I32, 2, s2), wt = lwq_tensor_view(w, LWQ_F32, 2, s2);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_moe_route(&be, &l, k, mode, LWQ_F32, &it, &wt, &e), 0, "%s", e.msg);
}

Test(ops_cpu, moe_route_softmax_topk_and_norm)
{
    const float lg[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
    int32_t idx[3];
    float w[3];
    double z = exp(0.5) + 2 * exp(2.0) + exp(-1.0) + exp(1.0);
    route(LWQ_ROUTE_SOFTMAX_TOPK, lg, 5, 3, idx, w);
    cr_assert(idx[0] == 1 && idx[1] == 3 && idx[2] == 4, "torch.topk's order of the tie: %d %d %d",
              idx[0], idx[1], idx[2]);
    close_to(w[0], exp(2.0) / z, 0, 1e-6, "w", 0);
    close_to(w[2], exp(1.0) / z, 0, 1e-6, "w", 2);
    route(LWQ_ROUTE_SOFTMAX_TOPK_NORM, lg, 5, 3, idx, w);
    double zk = 2 * exp(2.0) + exp(1.0);
    close_to(w[0], exp(2.0) / zk, 0, 1e-6, "wn", 0);
    close_to(w[2], exp(1.0) / zk, 0, 1e-6, "wn", 2);
    float w2[3];
    route(LWQ_ROUTE_TOPK_SOFTMAX, lg, 5, 3, idx, w2);
    for (int s = 0; s < 3; s++)
        close_to(w2[s], w[s], 0, 1e-6, "topk-softmax equals softmax-topk-renorm", s);
}

Test(ops_cpu, moe_route_rejects_k_larger_than_experts)
{
    const float lg[2] = {0, 1};
    int32_t idx[3];
    float w[3];
    int64_t s1[2] = {1, 2}, s2[2] = {1, 3};
    lwq_tensor l = lwq_tensor_view((void *)lg, LWQ_F32, 2, s1);
    lwq_tensor it = lwq_tensor_view(idx, LWQ_I32, 2, s2), wt = lwq_tensor_view(w, LWQ_F32, 2, s2);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_moe_route(&be, &l, 3, LWQ_ROUTE_SOFTMAX_TOPK, LWQ_F32, &it, &wt, &e),
                 LWQ_EINVAL);
    cr_assert(strstr(e.msg, "k = 3 must be in [1, min(experts 2"), "%s", e.msg);
}

Test(ops_cpu, gather_and_combine)
{
    float src[4][3] = {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}};
    int32_t rows[3] = {3, 0, 3};
    float dst[3][3];
    int64_t ss[2] = {4, 3}, sr[1] = {3}, sd[2] = {3, 3};
    lwq_tensor ts = lwq_tensor_view(src, LWQ_F32, 2, ss), tr = lwq_tensor_view(rows, LWQ_I32, 1, sr),
               td = lwq_tensor_view(dst, LWQ_F32, 2, sd);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_gather_rows(&be, &ts, &tr, &td, &e), 0);
    cr_assert(dst[0][0] == 10 && dst[1][2] == 3 && dst[2][1] == 11);
    /* token 0: 0.5*y[2] + 0.25*y[0]; token 1: padding; */
    int32_t slot[2][2] = {{2, 0}, {-1, -1}};
    float wts[2][2] = {{0.5f, 0.25f}, {1, 1}}, out[2][3];
    int64_t s2[2] = {2, 2}, so[2] = {2, 3};
    lwq_tensor tsl = lwq_tensor_view(slot, LWQ_I32, 2, s2), tw = lwq_tensor_view(wts, LWQ_F32, 2, s2),
               to = lwq_tensor_view(out, LWQ_F32, 2, so);
    cr_assert_eq(lwq_backend_moe_combine(&be, &td, &tsl, &tw, &to, &e), 0, "%s", e.msg);
    cr_assert(out[0][0] == 0.5f * 10 + 0.25f * 10 && out[0][1] == 0.5f * 11 + 0.25f * 11);
    cr_assert(out[1][0] == 0 && out[1][2] == 0);
}

Test(ops_cpu, gather_rejects_row_out_of_range)
{
    float src[2][2] = {{0}};
    int32_t rows[1] = {2};
    float dst[1][2];
    int64_t ss[2] = {2, 2}, sr[1] = {1}, sd[2] = {1, 2};
    lwq_tensor ts = lwq_tensor_view(src, LWQ_F32, 2, ss), tr = lwq_tensor_view(rows, LWQ_I32, 1, sr),
               td = lwq_tensor_view(dst, LWQ_F32, 2, sd);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_gather_rows(&be, &ts, &tr, &td, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "rows[0] = 2 is outside [0, 2)"), "%s", e.msg);
}

Test(ops_cpu, combine_rejects_slot_out_of_range)
{
    float y[1][2] = {{0}}, out[1][2], w[1][1] = {{1}};
    int32_t slot[1][1] = {{1}};
    int64_t sy[2] = {1, 2}, s1[2] = {1, 1};
    lwq_tensor ty = lwq_tensor_view(y, LWQ_F32, 2, sy), to = lwq_tensor_view(out, LWQ_F32, 2, sy),
               ts = lwq_tensor_view(slot, LWQ_I32, 2, s1), tw = lwq_tensor_view(w, LWQ_F32, 2, s1);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_moe_combine(&be, &ty, &ts, &tw, &to, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "slot_rows[0] = 1 is outside [-1, 1)"), "%s", e.msg);
}

/* ---- amax ------------------------------------------------------------------------------------ */

Test(ops_cpu, amax_counts_only_valid_rows_and_propagates_nan)
{
    float x[3][2] = {{1, -2}, {-50, 3}, {0.5f, -4}};
    uint8_t valid[3] = {1, 0, 1};
    int64_t sx[2] = {3, 2}, sv[1] = {3};
    lwq_tensor tx = lwq_tensor_view(x, LWQ_F32, 2, sx), tv = lwq_tensor_view(valid, LWQ_U8, 1, sv);
    lwq_error e = {0};
    float m;
    cr_assert_eq(lwq_backend_amax(&be, &tx, &tv, &m, &e), 0);
    cr_assert_eq(m, 4.0f);
    cr_assert_eq(lwq_backend_amax(&be, &tx, NULL, &m, &e), 0);
    cr_assert_eq(m, 50.0f);
    x[2][0] = NAN;
    cr_assert_eq(lwq_backend_amax(&be, &tx, &tv, &m, &e), 0);
    cr_assert(isnan(m));
    x[2][0] = 0;
    x[1][0] = NAN; /* padding row: ignored */
    cr_assert_eq(lwq_backend_amax(&be, &tx, &tv, &m, &e), 0);
    cr_assert_eq(m, 4.0f);
}

/* BF16 rows take a bits-only path: the same amax as the f32 path on the same values, rows longer
 * than its 32-wide blocks and not a multiple of them, Inf kept, NaN propagated, padding ignored. */
Test(ops_cpu, amax_bf16_equals_the_f32_amax)
{
    enum { R = 5, D = 77 };
    uint16_t xb[R][D];
    float xf[R][D];
    uint8_t valid[R] = {1, 1, 0, 1, 1};
    for (int r = 0; r < R; r++)
        for (int c = 0; c < D; c++) {
            xb[r][c] = lwq_f32_to_bf16((float)((r * 31 + c * 17) % 97 - 48) * 0.37f);
            xf[r][c] = lwq_bf16_to_f32(xb[r][c]);
        }
    xb[2][5] = lwq_f32_to_bf16(-1000.0f); /* padding row: ignored */
    xf[2][5] = -1000.0f;
    xb[4][D - 1] = lwq_f32_to_bf16(-30.0f); /* the largest, in a row's scalar tail */
    xf[4][D - 1] = -30.0f;
    int64_t sx[2] = {R, D}, sv[1] = {R};
    lwq_tensor tb = lwq_tensor_view(xb, LWQ_BF16, 2, sx), tf = lwq_tensor_view(xf, LWQ_F32, 2, sx);
    lwq_tensor tv = lwq_tensor_view(valid, LWQ_U8, 1, sv);
    lwq_error e = {0};
    float mb, mf;
    cr_assert_eq(lwq_backend_amax(&be, &tb, &tv, &mb, &e), 0);
    cr_assert_eq(lwq_backend_amax(&be, &tf, &tv, &mf, &e), 0);
    cr_assert_eq(mb, mf);
    cr_assert_eq(mb, 30.0f);
    cr_assert_eq(lwq_backend_amax(&be, &tb, NULL, &mb, &e), 0);
    cr_assert_eq(mb, 1000.0f);
    xb[1][40] = 0xff80; /* -Inf */
    cr_assert_eq(lwq_backend_amax(&be, &tb, &tv, &mb, &e), 0);
    cr_assert(isinf(mb) && mb > 0);
    xb[3][3] = 0x7fc1; /* NaN */
    cr_assert_eq(lwq_backend_amax(&be, &tb, &tv, &mb, &e), 0);
    cr_assert(isnan(mb));
}

Test(ops_cpu, tensor_on_wrong_device_is_refused)
{
    float x[2][2] = {{0}};
    int64_t sx[2] = {2, 2};
    lwq_tensor tx = lwq_tensor_view(x, LWQ_F32, 2, sx);
    tx.device = LWQ_DEV_CUDA;
    lwq_error e = {0};
    float m;
    cr_assert_eq(lwq_backend_amax(&be, &tx, NULL, &m, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "amax: x lives on device 1, backend cpu needs 0"), "%s", e.msg);
}

/* ---- strided copy ---------------------------------------------------------------------------- */

Test(ops_cpu, copy_strided_broadcast_and_convert)
{
    /* src (3, 5) F32; dst (3, 2, 4) BF16 receives src[:, 1:5:... ] as dst[r, h, j] = src[r, 1 + j]
     * for every h (stride 0 over h) */
    lwq_tensor s = mk(LWQ_F32, 3, 5, 3), d = mk(LWQ_BF16, 3, 8, 0);
    lwq_error e = {0};
    lwq_tensor sv = s, dv = d;
    sv.ndim = dv.ndim = 3;
    sv.data = (float *)s.data + 1;
    sv.shape[0] = 3, sv.shape[1] = 2, sv.shape[2] = 4;
    sv.stride[0] = 5, sv.stride[1] = 0, sv.stride[2] = 1;
    dv.shape[0] = 3, dv.shape[1] = 2, dv.shape[2] = 4;
    dv.stride[0] = 8, dv.stride[1] = 4, dv.stride[2] = 1;
    cr_assert_eq(lwq_backend_copy(&be, &sv, &dv, &e), 0, "%s", e.msg);
    for (int r = 0; r < 3; r++)
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                cr_assert_eq(at(&d, r * 8 + h * 4 + j), lwq_round_to(at(&s, r * 5 + 1 + j), LWQ_BF16));
    /* every other element (stride 2) into a contiguous row */
    lwq_tensor ev = s, out = mk(LWQ_F32, 3, 2, 0);
    ev.shape[1] = 2, ev.stride[1] = 2;
    cr_assert_eq(lwq_backend_copy(&be, &ev, &out, &e), 0, "%s", e.msg);
    for (int r = 0; r < 3; r++)
        for (int j = 0; j < 2; j++)
            cr_assert_eq(at(&out, r * 2 + j), at(&s, r * 5 + 2 * j));
    lwq_backend_tensor_free(&be, &s);
    lwq_backend_tensor_free(&be, &d);
    lwq_backend_tensor_free(&be, &out);
}

Test(ops_cpu, copy_rejects_shape_mismatch_and_zero_dst_stride)
{
    lwq_tensor s = mk(LWQ_F32, 4, 6, 1), d = mk(LWQ_F32, 4, 5, 0);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_copy(&be, &s, &d, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "copy: dim 1 is 6 in src and 5 in dst"), "%s", e.msg);
    lwq_tensor dv = s;
    dv.stride[0] = 0;
    memset(&e, 0, sizeof e);
    cr_assert_eq(lwq_backend_copy(&be, &s, &dv, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "copy: dim 0 has stride 6 in src and 0 in dst"), "%s", e.msg);
    lwq_backend_tensor_free(&be, &s);
    lwq_backend_tensor_free(&be, &d);
}
