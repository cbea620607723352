/* The CUDA Mamba2 op (conv1d + SiLU, dt, SSD scan, gated norm) against the CPU reference, on several lengths and paddings.
 * Skipped with a message when the build has no CUDA or no device is present.
 * Same inputs on both backends; |cuda - cpu| <= atol + rtol * |cpu| where
 *   F32: atol 1e-5, rtol 1e-4: the arithmetic is the CPU's IEEE f32 operations in the CPU's order
 *        (kernels/cuda/mamba2_cuda.cu); only expf / log1pf differ (CUDA <= 2 ulp, glibc <= 1), and
 *        such an ulp is carried through the recurrence and the norm;
 *   BF16: atol 2^-7, rtol 2^-5: the conv, SiLU and dt round to BF16 as they go, so an ulp of f32
 *        can flip one rounding, i.e. a BF16 ulp (2^-8) of an input to the scan, a few of the output;
 *   xbc_in (the conv's input copy): bit for bit. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/helpers/device/cuda_pair.h"

LWQT_CUDA_SUITE(mamba2_cuda, "CPU-vs-CUDA Mamba2 op tests");

/* a tensor of shape (d0[, d1[, d2]]) on both backends, uniform in [lo, hi) (U8: `valid` bytes) */
static pair mk(lwq_dtype dt, int nd, int64_t d0, int64_t d1, int64_t d2, float lo, float hi, const uint8_t *bytes)
{
    pair p;
    lwq_error e = {0};
    int64_t shape[3] = {d0, d1, d2};
    cr_assert_eq(lwq_backend_tensor_alloc(&cpu, dt, nd, shape, &p.c, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_backend_tensor_alloc(&gpu, dt, nd, shape, &p.g, &e), 0, "%s", e.msg);
    int64_t n = lwq_tensor_numel(&p.c);
    for (int64_t i = 0; i < n; i++) {
        float v = lo + (frand() * 0.5f + 0.5f) * (hi - lo);
        switch (dt) {
        case LWQ_F32: ((float *)p.c.data)[i] = v; break;
        case LWQ_BF16: ((uint16_t *)p.c.data)[i] = lwq_f32_to_bf16(v); break;
        case LWQ_U8: ((uint8_t *)p.c.data)[i] = bytes[i]; break;
        default: break;
        }
    }
    size_t b = (size_t)n * lwq_dtype_size(dt);
    cr_assert_eq(lwq_backend_upload(&gpu, p.g.data, p.c.data, b, &e), 0, "%s", e.msg);
    return p;
}

static void same(const pair *p, double atol, double rtol, const char *what)
{
    lwq_error e = {0};
    int64_t n = lwq_tensor_numel(&p->c);
    size_t b = (size_t)n * lwq_dtype_size(p->c.dtype);
    void *h = malloc(b);
    cr_assert(h);
    cr_assert_eq(lwq_backend_download(&gpu, h, p->g.data, b, &e), 0, "%s", e.msg);
    for (int64_t i = 0; i < n; i++) {
        double a = lwq_load_f(p->c.data, p->c.dtype, (size_t)i), g = lwq_load_f(h, p->c.dtype, (size_t)i);
        cr_assert(isfinite(g), "%s[%lld]: cuda %g is not finite", what, (long long)i, g);
        if (atol == 0 && rtol == 0)
            cr_assert(memcmp((char *)p->c.data + (size_t)i * lwq_dtype_size(p->c.dtype),
                             (char *)h + (size_t)i * lwq_dtype_size(p->c.dtype), lwq_dtype_size(p->c.dtype)) == 0,
                      "%s[%lld]: cpu %.9g cuda %.9g (bytes differ)", what, (long long)i, a, g);
        else
            cr_assert(fabs(a - g) <= atol + rtol * fabs(a), "%s[%lld]: cpu %.9g cuda %.9g", what, (long long)i, a, g);
    }
    free(h);
}

/* pad: 0 none, 1 left padding (pad_n rows), 2 right padding, 3 a padded row inside */
typedef struct geo {
    int64_t batch, seq, H, P, N, G, K;
    int pad, pad_n, bias;
} geo;

static void run_case(lwq_dtype dt, geo q)
{
    const int64_t n = q.batch * q.seq, I = q.H * q.P, C = I + 2 * q.G * q.N, W = I + C + q.H;
    uint8_t *valid = malloc((size_t)n);
    cr_assert(valid);
    for (int64_t s = 0; s < q.batch; s++)
        for (int64_t t = 0; t < q.seq; t++) {
            /* sequence 0 keeps its full length: the padding varies across the batch */
            int pad = s == 0 ? 0
                      : q.pad == 1 ? t < q.pad_n
                      : q.pad == 2 ? t >= q.seq - q.pad_n
                      : q.pad == 3 ? t == q.seq / 2
                                   : 0;
            valid[s * q.seq + t] = (uint8_t)!pad;
        }
    pair proj = mk(dt, 2, n, W, 0, -2.0f, 2.0f, NULL), wc = mk(dt, 3, C, 1, q.K, -0.6f, 0.6f, NULL),
         bc = mk(dt, 1, C, 0, 0, -0.2f, 0.2f, NULL), alog = mk(dt, 1, q.H, 0, 0, -1.0f, 1.5f, NULL),
         dtb = mk(dt, 1, q.H, 0, 0, -3.0f, 0.5f, NULL), dd = mk(dt, 1, q.H, 0, 0, 0.5f, 1.5f, NULL),
         wn = mk(dt, 1, I, 0, 0, 0.5f, 1.5f, NULL), vt = mk(LWQ_U8, 1, n, 0, 0, 0, 0, valid),
         out = mk(dt, 2, n, I, 0, 0, 0, NULL), xin = mk(dt, 2, n, C, 0, 0, 0, NULL);
    /* a few dt values past softplus's threshold 20 */
    if (n * W > 0) {
        float big = 25.0f;
        int64_t at = (n - 1) * W + I + C;
        if (dt == LWQ_F32)
            ((float *)proj.c.data)[at] = big;
        else
            ((uint16_t *)proj.c.data)[at] = lwq_f32_to_bf16(big);
        lwq_error e = {0};
        size_t es = lwq_dtype_size(dt);
        cr_assert_eq(lwq_backend_upload(&gpu, (char *)proj.g.data + (size_t)at * es,
                                        (char *)proj.c.data + (size_t)at * es, es, &e), 0, "%s", e.msg);
    }
    lwq_mamba2_args a = {.batch = q.batch, .seq = q.seq, .heads = q.H, .head_dim = q.P, .state = q.N,
                         .groups = q.G, .kernel = q.K, .eps = 1e-5f, .dt_min = 1e-3f};
    lwq_error e = {0};
    a.proj = &proj.c, a.conv_w = &wc.c, a.conv_b = q.bias ? &bc.c : NULL, a.a_log = &alog.c, a.dt_bias = &dtb.c,
    a.d = &dd.c, a.norm_w = &wn.c, a.valid = &vt.c, a.out = &out.c, a.xbc_in = &xin.c;
    cr_assert_eq(lwq_backend_mamba2(&cpu, &a, &e), 0, "cpu: %s", e.msg);
    a.proj = &proj.g, a.conv_w = &wc.g, a.conv_b = q.bias ? &bc.g : NULL, a.a_log = &alog.g, a.dt_bias = &dtb.g,
    a.d = &dd.g, a.norm_w = &wn.g, a.valid = &vt.g, a.out = &out.g, a.xbc_in = &xin.g;
    cr_assert_eq(lwq_backend_mamba2(&gpu, &a, &e), 0, "cuda: %s", e.msg);
    cr_assert_eq(lwq_backend_synchronize(&gpu, &e), 0, "cuda: %s", e.msg);
    same(&xin, 0, 0, "xbc_in");
    if (dt == LWQ_F32)
        same(&out, 1e-5, 1e-4, "out");
    else
        same(&out, 1.0 / 128, 1.0 / 32, "out");
    drop(&proj), drop(&wc), drop(&bc), drop(&alog), drop(&dtb), drop(&dd), drop(&wn), drop(&vt), drop(&out),
        drop(&xin);
    free(valid);
}

static const geo small = {.batch = 1, .seq = 1, .H = 4, .P = 8, .N = 16, .G = 2, .K = 4, .bias = 1};

Test(mamba2_cuda, one_token_f32) { run_case(LWQ_F32, small); }

Test(mamba2_cuda, left_padding_f32)
{
    geo q = small;
    q.batch = 3, q.seq = 37, q.pad = 1, q.pad_n = 5;
    run_case(LWQ_F32, q);
}

Test(mamba2_cuda, right_padding_no_bias_f32)
{
    geo q = small;
    q.batch = 2, q.seq = 64, q.pad = 2, q.pad_n = 9, q.bias = 0;
    run_case(LWQ_F32, q);
}

Test(mamba2_cuda, padded_row_inside_bf16)
{
    geo q = small;
    q.batch = 2, q.seq = 19, q.pad = 3;
    run_case(LWQ_BF16, q);
}

/* head_dim past one block's 256 threads (each thread scans two channels), a state past the
 * default 48 KiB of shared memory (the opt-in path) */
Test(mamba2_cuda, wide_head_large_state_bf16)
{
    geo q = {.batch = 2, .seq = 23, .H = 2, .P = 320, .N = 48, .G = 1, .K = 4, .pad = 1, .pad_n = 4, .bias = 1};
    run_case(LWQ_BF16, q);
}

Test(mamba2_cuda, nemotron_shaped_f32)
{
    geo q = {.batch = 2, .seq = 130, .H = 8, .P = 64, .N = 128, .G = 2, .K = 4, .pad = 1, .pad_n = 17, .bias = 1};
    run_case(LWQ_F32, q);
}
