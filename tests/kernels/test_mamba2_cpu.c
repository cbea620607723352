/* The CPU backend's Mamba2 op (kernels/mamba2.h): the documented recurrence, padding, thread and ISA invariance, the wrapper's refusals. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm/gemm_isa.h"

static lwq_backend be;

static void setup(void)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_cpu_create(&be, 2, &e), 0, "%s", e.msg);
}

static void teardown(void) { lwq_backend_destroy(&be); }

TestSuite(mamba2_cpu, .init = setup, .fini = teardown);

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* an F32 (U8 when bytes) host tensor, uniform in [lo, hi) */
static lwq_tensor mk(lwq_dtype dt, int nd, int64_t d0, int64_t d1, int64_t d2, float lo, float hi)
{
    int64_t shape[3] = {d0, d1, d2};
    lwq_tensor t;
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_tensor_alloc(&be, dt, nd, shape, &t, &e), 0, "%s", e.msg);
    for (int64_t i = 0; i < lwq_tensor_numel(&t); i++)
        if (dt == LWQ_F32)
            ((float *)t.data)[i] = lo + (frand() * 0.5f + 0.5f) * (hi - lo);
        else
            ((uint8_t *)t.data)[i] = 1;
    return t;
}

typedef struct m2 {
    lwq_tensor proj, wc, bc, alog, dtb, dd, wn, valid, out, xin;
    lwq_mamba2_args a;
} m2;

static void m2_init(m2 *m, int64_t batch, int64_t seq, int64_t H, int64_t P, int64_t N, int64_t G, int64_t K)
{
    const int64_t n = batch * seq, I = H * P, C = I + 2 * G * N, W = I + C + H;
    m->proj = mk(LWQ_F32, 2, n, W, 0, -2, 2);
    m->wc = mk(LWQ_F32, 3, C, 1, K, -0.6f, 0.6f);
    m->bc = mk(LWQ_F32, 1, C, 0, 0, -0.2f, 0.2f);
    m->alog = mk(LWQ_F32, 1, H, 0, 0, -1, 1.5f);
    m->dtb = mk(LWQ_F32, 1, H, 0, 0, -3, 0.5f);
    m->dd = mk(LWQ_F32, 1, H, 0, 0, 0.5f, 1.5f);
    m->wn = mk(LWQ_F32, 1, I, 0, 0, 0.5f, 1.5f);
    m->valid = mk(LWQ_U8, 1, n, 0, 0, 0, 0);
    m->out = mk(LWQ_F32, 2, n, I, 0, 0, 0);
    m->xin = mk(LWQ_F32, 2, n, C, 0, 0, 0);
    lwq_mamba2_args a = {.proj = &m->proj, .conv_w = &m->wc, .conv_b = &m->bc, .a_log = &m->alog,
                         .dt_bias = &m->dtb, .d = &m->dd, .norm_w = &m->wn, .valid = &m->valid, .xbc_in = &m->xin,
                         .out = &m->out, .batch = batch, .seq = seq, .heads = H, .head_dim = P, .state = N,
                         .groups = G, .kernel = K, .eps = 1e-5f, .dt_min = 1e-3f};
    m->a = a;
}

static void m2_free(m2 *m)
{
    lwq_tensor *t[] = {&m->proj, &m->wc, &m->bc, &m->alog, &m->dtb, &m->dd, &m->wn, &m->valid, &m->out, &m->xin};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        lwq_backend_tensor_free(&be, t[i]);
}

static float sig(float x) { return 1.0f / (1.0f + expf(-x)); }

/* one head, one channel, one state: the recurrence written out by hand */
Test(mamba2_cpu, one_channel_follows_the_documented_recurrence)
{
    m2 m;
    const int64_t T = 5, K = 3;
    m2_init(&m, 1, T, 1, 1, 1, 1, K);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_mamba2(&be, &m.a, &e), 0, "%s", e.msg);
    const float *pr = m.proj.data, *w = m.wc.data, *b = m.bc.data;
    const float A = -expf(*(float *)m.alog.data), D = *(float *)m.dd.data;
    float S = 0, xbc[5][3];
    for (int64_t t = 0; t < T; t++) {
        for (int c = 0; c < 3; c++) { /* x, B, C: columns 1..3 of (z, x, B, C, dt) */
            float acc = b[c];
            for (int64_t q = 0; q < K; q++)
                if (t - (K - 1) + q >= 0)
                    acc += w[c * K + q] * pr[(t - (K - 1) + q) * 5 + 1 + c];
            xbc[t][c] = acc * sig(acc);
        }
        float dt = pr[t * 5 + 4] + *(float *)m.dtb.data;
        dt = dt > 20 ? dt : log1pf(expf(dt));
        dt = dt < 1e-3f ? 1e-3f : dt;
        S = S * expf(A * dt) + xbc[t][0] * dt * xbc[t][1];
        float y = S * xbc[t][2] + D * xbc[t][0], z = pr[t * 5];
        float g = y * (z * sig(z)), want = *(float *)m.wn.data * (g / sqrtf(g * g + 1e-5f));
        float got = ((float *)m.out.data)[t];
        cr_assert(fabsf(got - want) <= 1e-5f + 1e-4f * fabsf(want), "t %lld: got %.9g want %.9g", (long long)t,
                  got, want);
        cr_assert_eq(((float *)m.xin.data)[t * 3], pr[t * 5 + 1], "t %lld: xbc_in is proj's xBC", (long long)t);
    }
    m2_free(&m);
}

/* a left-padded sequence sees zero history and a zero state: its real rows equal the unpadded run's */
Test(mamba2_cpu, left_padding_gives_the_unpadded_bytes)
{
    const int64_t T = 11, pad = 4, H = 4, P = 3, N = 5, G = 2, K = 4;
    const int64_t I = H * P, C = I + 2 * G * N, W = I + C + H;
    m2 full, padded;
    m2_init(&full, 1, T - pad, H, P, N, G, K);
    m2_init(&padded, 1, T, H, P, N, G, K);
    memcpy(padded.wc.data, full.wc.data, (size_t)(C * K) * 4);
    memcpy(padded.bc.data, full.bc.data, (size_t)C * 4);
    memcpy(padded.alog.data, full.alog.data, (size_t)H * 4);
    memcpy(padded.dtb.data, full.dtb.data, (size_t)H * 4);
    memcpy(padded.dd.data, full.dd.data, (size_t)H * 4);
    memcpy(padded.wn.data, full.wn.data, (size_t)I * 4);
    memcpy((float *)padded.proj.data + pad * W, full.proj.data, (size_t)((T - pad) * W) * 4);
    memset(padded.valid.data, 0, (size_t)pad);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_mamba2(&be, &full.a, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_backend_mamba2(&be, &padded.a, &e), 0, "%s", e.msg);
    cr_assert(memcmp((float *)padded.out.data + pad * I, full.out.data, (size_t)((T - pad) * I) * 4) == 0);
    for (int64_t i = 0; i < pad * I; i++)
        cr_assert_eq(((float *)padded.out.data)[i], 0.0f, "padded output %lld", (long long)i);
    m2_free(&full);
    m2_free(&padded);
}

Test(mamba2_cpu, bytes_do_not_depend_on_the_thread_count)
{
    m2 m;
    m2_init(&m, 3, 17, 6, 4, 8, 3, 4);
    const size_t bytes = (size_t)lwq_tensor_numel(&m.out) * 4;
    float *first = malloc(bytes);
    cr_assert(first);
    lwq_error e = {0};
    lwq_parallel_set_threads(1);
    cr_assert_eq(lwq_backend_mamba2(&be, &m.a, &e), 0, "%s", e.msg);
    memcpy(first, m.out.data, bytes);
    lwq_parallel_set_threads(3);
    cr_assert_eq(lwq_backend_mamba2(&be, &m.a, &e), 0, "%s", e.msg);
    cr_assert(memcmp(first, m.out.data, bytes) == 0);
    free(first);
    m2_free(&m);
}

/* The AVX-512 and AVX2 scans hold head channels in vector lanes (kernels/cpu/mamba2/mamba2_scan.h):
 * every head_dim around the vector widths, with left padding, gives the portable kernel's bytes. */
Test(mamba2_cpu, vector_scans_give_the_portable_bytes)
{
    static const char *const vec[] = {"avx512", "avx2"};
    static const int64_t dims[] = {1, 3, 8, 15, 16, 17, 40, 64, 70, 100};
    int ran = 0;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        m2 m;
        const int64_t T = 9, P = dims[di];
        m2_init(&m, 2, T, 4, P, 12, 2, 4);
        ((uint8_t *)m.valid.data)[T] = 0; /* the second sequence starts with one padded token */
        const size_t bytes = (size_t)lwq_tensor_numel(&m.out) * 4;
        float *want = malloc(bytes);
        cr_assert(want);
        lwq_error e = {0};
        cr_assert_eq(lwq_cpu_kernels_force("portable"), 0);
        cr_assert_eq(lwq_backend_mamba2(&be, &m.a, &e), 0, "%s", e.msg);
        memcpy(want, m.out.data, bytes);
        for (size_t k = 0; k < sizeof vec / sizeof vec[0]; k++) {
            if (lwq_cpu_kernels_force(vec[k]) != 0)
                continue;
            memset(m.out.data, 0xff, bytes);
            cr_assert_eq(lwq_backend_mamba2(&be, &m.a, &e), 0, "%s", e.msg);
            for (size_t i = 0; i < bytes / 4; i++)
                cr_assert_eq(((uint32_t *)m.out.data)[i], ((uint32_t *)want)[i],
                             "%s, head_dim %lld: element %zu is %.9g, portable %.9g", vec[k], (long long)P, i,
                             ((float *)m.out.data)[i], want[i]);
            ran++;
        }
        lwq_cpu_kernels_force(NULL);
        free(want);
        m2_free(&m);
    }
    if (!ran)
        cr_skip_test("this CPU runs neither AVX-512 nor AVX2: only the portable scan");
}

Test(mamba2_cpu, groups_not_dividing_the_heads_are_refused)
{
    m2 m;
    m2_init(&m, 1, 2, 3, 2, 2, 1, 2);
    m.a.groups = 2;
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_mamba2(&be, &m.a, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "groups 2") && strstr(e.msg, "heads 3"), "%s", e.msg);
    m2_free(&m);
}

Test(mamba2_cpu, a_proj_of_the_wrong_width_is_refused)
{
    m2 m;
    m2_init(&m, 1, 2, 2, 2, 2, 1, 2);
    m.a.state = 3;
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_mamba2(&be, &m.a, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "proj"), "%s", e.msg);
    m2_free(&m);
}

Test(mamba2_cpu, a_backend_without_the_op_is_refused_by_name)
{
    m2 m;
    m2_init(&m, 1, 2, 2, 2, 2, 1, 2);
    lwq_backend_ops ops = *be.ops;
    ops.mamba2 = NULL;
    ops.name = "nomamba";
    lwq_backend b = {&ops, be.ctx};
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_mamba2(&b, &m.a, &e), LWQ_EUNSUPPORTED);
    cr_assert(strstr(e.msg, "nomamba"), "%s", e.msg);
    m2_free(&m);
}
