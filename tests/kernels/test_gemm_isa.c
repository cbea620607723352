/* The CPU GEMM's AVX-512, AVX2 and portable kernels give identical bits, equal to gemm_isa.h's rule.
 *
 * "Same bytes on any CPU model" needs one arithmetic whatever kernel runs: each path is forced with
 * lwq_cpu_kernels_force (a path this CPU cannot run is skipped with a message) and compared bitwise
 * with a scalar statement of the rule written here (16 lane sums of fmaf in k order, lane of k =
 * (k mod 32) / 2, a fixed tree), for F32/BF16/F16 weights, k with and without a partial block and
 * longer than one k chunk, row and output counts off every tile edge; attention likewise. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/gemm/gemm_isa.h"

static lwq_backend g_be;

static void be_open(void)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_cpu_create(&g_be, 2, &e), 0, "%s", e.msg);
}

static void be_close(void)
{
    lwq_cpu_kernels_force(NULL);
    lwq_backend_destroy(&g_be);
}

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xFFFFFF) / (float)0x1000000 - 0.5f;
}

static void fill(void *p, lwq_dtype dt, int64_t n, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++) {
        float v = frand(&seed) * (i % 7 == 0 ? 1000.0f : 1.0f); /* mixed magnitudes: rounding matters */
        if (dt == LWQ_F32)
            ((float *)p)[i] = v;
        else if (dt == LWQ_F16)
            ((uint16_t *)p)[i] = lwq_f32_to_f16(v * 0.01f);
        else
            ((uint16_t *)p)[i] = lwq_f32_to_bf16(v);
    }
}

/* The rule of gemm_isa.h, one element at a time. */
static float rule_dot(const float *x, const float *w, int64_t k)
{
    float l[16] = {0};
    for (int64_t b = 0; b < k; b += 32)
        for (int h = 0; h < 2; h++)     /* even k, then odd k, of each block */
            for (int i = 0; i < 16; i++) {
                int64_t j = b + 2 * i + h;
                l[i] = fmaf(j < k ? x[j] : 0.0f, j < k ? w[j] : 0.0f, l[i]);
            }
    float t[8], u[4];
    for (int i = 0; i < 8; i++)
        t[i] = l[i] + l[i + 8];
    for (int i = 0; i < 4; i++)
        u[i] = t[i] + t[i + 4];
    return (u[0] + u[2]) + (u[1] + u[3]);
}

static float to_f(const void *p, lwq_dtype dt, int64_t i)
{
    return lwq_load_f(p, dt, (size_t)i);
}

/* y (f32) for x (n, k) act dt and w (out, k) wdt under the kernels `name`; 0 when skipped. */
static int run_gemm(const char *name, const void *x, lwq_dtype xdt, const void *w, lwq_dtype wdt, int64_t n,
                    int64_t k, int64_t out, float *y)
{
    if (lwq_cpu_kernels_force(name) != 0)
        return 0;
    cr_assert_str_eq(lwq_cpu_kernels_get()->name, name);
    int64_t xs[2] = {n, k}, ws[2] = {out, k}, ys[2] = {n, out};
    lwq_tensor X = lwq_tensor_view((void *)x, xdt, 2, xs), W = lwq_tensor_view((void *)w, wdt, 2, ws);
    lwq_tensor Y = lwq_tensor_view(y, LWQ_F32, 2, ys);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_gemm(&g_be, &X, &W, NULL, &Y, &e), 0, "%s", e.msg);
    return 1;
}

static const char *const KERNELS[] = {"avx512", "avx2", "portable"};

static void gemm_all_paths(lwq_dtype xdt, lwq_dtype wdt)
{
    static const int64_t ks[] = {13, 32, 100, 1100};
    const int64_t n = 19, out = 70;
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        int64_t k = ks[ki];
        void *x = malloc((size_t)(n * k) * lwq_dtype_size(xdt)), *w = malloc((size_t)(out * k) * lwq_dtype_size(wdt));
        float *xf = malloc((size_t)(n * k) * 4), *wf = malloc((size_t)(out * k) * 4);
        float *ref = malloc((size_t)(n * out) * 4), *y = malloc((size_t)(n * out) * 4);
        fill(x, xdt, n * k, 7 + (uint64_t)k);
        fill(w, wdt, out * k, 8 + (uint64_t)k);
        for (int64_t i = 0; i < n * k; i++)
            xf[i] = to_f(x, xdt, i);
        for (int64_t i = 0; i < out * k; i++)
            wf[i] = to_f(w, wdt, i);
        for (int64_t r = 0; r < n; r++)
            for (int64_t o = 0; o < out; o++)
                ref[r * out + o] = rule_dot(xf + r * k, wf + o * k, k);
        int ran = 0;
        for (size_t p = 0; p < sizeof KERNELS / sizeof KERNELS[0]; p++) {
            if (!run_gemm(KERNELS[p], x, xdt, w, wdt, n, k, out, y)) {
                cr_log_info("kernels %s: this CPU cannot run them, not compared", KERNELS[p]);
                continue;
            }
            ran++;
            for (int64_t i = 0; i < n * out; i++)
                cr_assert(memcmp(&y[i], &ref[i], 4) == 0,
                          "%s kernels, %s x %s weights, k %lld: y[%lld][%lld] = %.9g, the rule gives %.9g", KERNELS[p],
                          lwq_dtype_name(xdt), lwq_dtype_name(wdt), (long long)k, (long long)(i / out),
                          (long long)(i % out), y[i], ref[i]);
        }
        cr_assert_geq(ran, 1);
        free(x), free(w), free(xf), free(wf), free(ref), free(y);
    }
}

Test(gemm_isa, f32_weights_same_bits_on_every_path, .init = be_open, .fini = be_close) { gemm_all_paths(LWQ_F32, LWQ_F32); }
Test(gemm_isa, bf16_weights_same_bits_on_every_path, .init = be_open, .fini = be_close) { gemm_all_paths(LWQ_BF16, LWQ_BF16); }
Test(gemm_isa, f16_weights_same_bits_on_every_path, .init = be_open, .fini = be_close) { gemm_all_paths(LWQ_F16, LWQ_F16); }
Test(gemm_isa, bf16_weights_f32_activations_same_bits_on_every_path, .init = be_open, .fini = be_close)
{
    gemm_all_paths(LWQ_F32, LWQ_BF16);
}

Test(gemm_isa, unknown_kernel_name_is_refused, .init = be_open, .fini = be_close)
{
    const char *before = lwq_cpu_kernels_get()->name;
    cr_assert_eq(lwq_cpu_kernels_force("sse9"), -1);
    cr_assert_str_eq(lwq_cpu_kernels_get()->name, before, "a refused name changed the kernels");
}

Test(gemm_isa, attention_same_bits_on_every_path, .init = be_open, .fini = be_close)
{
    const int H = 4, KV = 2;
    const int64_t batch = 2, seq = 90, n = batch * seq;
    static const int64_t hds[] = {16, 64};
    for (int hi = 0; hi < 2; hi++) {
        int64_t hd = hds[hi], qw = H * hd, kw = KV * hd;
        float *q = malloc((size_t)(n * qw) * 4), *k = malloc((size_t)(n * kw) * 4), *v = malloc((size_t)(n * kw) * 4);
        float *o0 = malloc((size_t)(n * qw) * 4), *o1 = malloc((size_t)(n * qw) * 4);
        uint8_t *valid = malloc((size_t)n);
        fill(q, LWQ_F32, n * qw, 31);
        fill(k, LWQ_F32, n * kw, 32);
        fill(v, LWQ_F32, n * kw, 33);
        for (int64_t t = 0; t < n; t++)
            valid[t] = t < seq || t >= seq + 25; /* the second sequence has 25 padding rows */
        int64_t qs[2] = {n, qw}, ks[2] = {n, kw}, vs[1] = {n};
        lwq_tensor Q = lwq_tensor_view(q, LWQ_F32, 2, qs), K = lwq_tensor_view(k, LWQ_F32, 2, ks);
        lwq_tensor V = lwq_tensor_view(v, LWQ_F32, 2, ks), M = lwq_tensor_view(valid, LWQ_U8, 1, vs);
        int ran = 0;
        for (size_t p = 0; p < sizeof KERNELS / sizeof KERNELS[0]; p++) {
            if (lwq_cpu_kernels_force(KERNELS[p]) != 0) {
                cr_log_info("kernels %s: this CPU cannot run them, not compared", KERNELS[p]);
                continue;
            }
            lwq_tensor O = lwq_tensor_view(ran ? o1 : o0, LWQ_F32, 2, qs);
            lwq_attn_args a = {&Q, &K, &V, &O, &M, batch, seq, H, KV, hd, 0.125f};
            lwq_error e = {0};
            cr_assert_eq(lwq_backend_attention(&g_be, &a, &e), 0, "%s", e.msg);
            if (ran)
                cr_assert(memcmp(o0, o1, (size_t)(n * qw) * 4) == 0, "attention (head_dim %lld): %s kernels differ "
                          "from the first path run", (long long)hd, KERNELS[p]);
            ran++;
        }
        cr_assert_geq(ran, 1);
        free(q), free(k), free(v), free(o0), free(o1), free(valid);
    }
}

/* Attention's blocked P V (lwq_cpu_kernels.pv) is, per element, the chain of one axpy per key of
 * the same path: 7 rows (a block of 4 and a rest), widths with a 64-wide part, a 16-wide part and
 * a scalar tail. */
Test(gemm_isa, pv_equals_the_axpy_chain_on_every_path, .init = be_open, .fini = be_close)
{
    const int64_t nr = 7, nc = 19, ldp = 23;
    static const int64_t ns[] = {64, 80, 70, 5};
    float *p = malloc((size_t)(nr * ldp) * 4), *v = malloc((size_t)(nc * 80) * 4);
    float *a0 = malloc((size_t)(nr * 80) * 4), *a1 = malloc((size_t)(nr * 80) * 4);
    fill(p, LWQ_F32, nr * ldp, 41);
    fill(v, LWQ_F32, nc * 80, 42);
    int ran = 0;
    for (size_t k = 0; k < sizeof KERNELS / sizeof KERNELS[0]; k++) {
        if (lwq_cpu_kernels_force(KERNELS[k]) != 0) {
            cr_log_info("kernels %s: this CPU cannot run them, not compared", KERNELS[k]);
            continue;
        }
        const lwq_cpu_kernels *kern = lwq_cpu_kernels_get();
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            const int64_t n = ns[i];
            fill(a0, LWQ_F32, nr * 80, 43);
            memcpy(a1, a0, (size_t)(nr * 80) * 4);
            kern->pv(p, ldp, v, 80, a0, 80, nr, nc, n);
            for (int64_t r = 0; r < nr; r++)
                for (int64_t c = 0; c < nc; c++)
                    kern->axpy(p[r * ldp + c], v + c * 80, a1 + r * 80, n);
            cr_assert(memcmp(a0, a1, (size_t)(nr * 80) * 4) == 0, "%s: pv over %lld outputs differs "
                      "from its axpy chain", KERNELS[k], (long long)n);
        }
        ran++;
    }
    cr_assert_geq(ran, 1);
    free(p), free(v), free(a0), free(a1);
}

/* The vectorized packers of the GEMM's x rows (convert_cpu.c) write lwq_gemm_pack_row's floats bit
 * for bit: BF16 widened on the way, f32 as bits (NaN payloads, -0 and denormals kept), every k from
 * 1 to 97 (partial last blocks, zeros past k). */
Test(gemm_isa, packed_rows_equal_the_scalar_packing)
{
    uint64_t s = 99;
    for (int64_t k = 1; k <= 97; k++) {
        const int64_t kp = lwq_gemm_kp(k);
        uint16_t hb[97];
        float src[97], wide[97], a[128], b[128];
        for (int64_t i = 0; i < k; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const uint32_t r = (uint32_t)(s >> 32);
            hb[i] = i % 11 == 3 ? 0x7fc5 : i % 13 == 4 ? 0x8000 : i % 17 == 5 ? 0x0003 : (uint16_t)r;
            const uint32_t fb = i % 11 == 3 ? 0x7fa00001u : i % 13 == 4 ? 0x80000000u : i % 17 == 5 ? 0x00000007u : r;
            memcpy(&src[i], &fb, 4);
            wide[i] = lwq_bf16_to_f32(hb[i]);
        }
        memset(a, 0xab, sizeof a);
        memset(b, 0xcd, sizeof b);
        lwq_gemm_pack_row(wide, k, a);
        lwq_cpu_pack_row_bf16(hb, k, b);
        cr_assert(memcmp(a, b, (size_t)kp * 4) == 0, "BF16 row of k %lld packs differently", (long long)k);
        memset(b, 0xcd, sizeof b);
        lwq_gemm_pack_row(src, k, a);
        lwq_cpu_pack_row_f32(src, k, b);
        cr_assert(memcmp(a, b, (size_t)kp * 4) == 0, "f32 row of k %lld packs differently", (long long)k);
    }
}

/* Attention's Q K^T kernel (scores: vectorised over keys, the keys transposed) gives every score
 * the bits of the panel's dot product of the same packed query row and f32 key row, on every path:
 * head dims with and without a partial block, query and key counts off every tile edge, -0 and
 * denormal products included. */
Test(gemm_isa, scores_equal_the_panel_dot_products, .init = be_open, .fini = be_close)
{
    static const int64_t hds[] = {64, 128, 80, 5, 33};
    const int64_t nrmax = 7, ncmax = 41, ldk = 64;
    int ran = 0;
    for (size_t kk = 0; kk < sizeof KERNELS / sizeof KERNELS[0]; kk++) {
        if (lwq_cpu_kernels_force(KERNELS[kk]) != 0) {
            cr_log_info("kernels %s: this CPU cannot run them, skipped", KERNELS[kk]);
            continue;
        }
        const lwq_cpu_kernels *kern = lwq_cpu_kernels_get();
        for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++) {
            const int64_t hd = hds[h], kp = lwq_gemm_kp(hd), nfull = hd / 32;
            float *q = malloc((size_t)(nrmax * hd) * 4), *qp = malloc((size_t)(nrmax * kp) * 4);
            float *k = malloc((size_t)(ncmax * hd) * 4), *kt = calloc((size_t)(kp * ldk), 4);
            float *wt = calloc((size_t)(ncmax * 32), 4), *s0 = malloc((size_t)(nrmax * ncmax) * 4);
            float *s1 = malloc((size_t)(nrmax * ncmax) * 4), *acc = aligned_alloc(64, LWQ_GEMM_ACC_FLOATS * 4);
            fill(q, LWQ_F32, nrmax * hd, 51 + (uint64_t)hd);
            fill(k, LWQ_F32, ncmax * hd, 52 + (uint64_t)hd);
            q[3] = -0.0f, k[3] = 1.0f, q[hd + 1] = 1e-30f, k[hd + 1] = -1e-20f; /* -0, an underflow */
            for (int64_t r = 0; r < nrmax; r++)
                lwq_gemm_pack_row(q + r * hd, hd, qp + r * kp);
            for (int64_t c = 0; c < ncmax; c++) {
                for (int64_t d = 0; d < hd; d++)
                    kt[d * ldk + c] = k[c * hd + d];
                for (int64_t d = nfull * 32; d < hd; d++)
                    wt[c * 32 + d - nfull * 32] = k[c * hd + d];
            }
            for (int64_t nr = 1; nr <= nrmax; nr += 3)
                for (int64_t nc = 1; nc <= ncmax; nc += 4) {
                    lwq_gemm_panel p = {0};
                    p.x = qp, p.ldx = kp, p.w = (const char *)k, p.ldw = hd * 4, p.wkind = 2;
                    p.wt = hd % 32 ? (const char *)wt : NULL, p.nfull = nfull, p.y = s0, p.ldy = nc;
                    p.nr = nr, p.nc = nc;
                    kern->panel(&p, acc);
                    kern->scores(qp, kp, kt, ldk, kp / 32, s1, nc, nr, nc);
                    cr_assert(memcmp(s0, s1, (size_t)(nr * nc) * 4) == 0, "%s: scores (head_dim %lld, "
                              "%lld x %lld) differ from the panel's", KERNELS[kk], (long long)hd,
                              (long long)nr, (long long)nc);
                }
            free(q), free(qp), free(k), free(kt), free(wt), free(s0), free(s1), free(acc);
        }
        ran++;
    }
    cr_assert_geq(ran, 1);
}

/* The GEMM's tile store to BF16 (convert_cpu.c) writes the bits of the per-row path it replaces:
 * f32 + bias (when given), then lwq_cpu_f32_to_bf16's rounding (ties to even, NaN kept quiet, Inf,
 * -0, denormals), for tiles off every vector width, into rows wider than the tile. */
Test(gemm_isa, tile_store_equals_the_row_store)
{
    uint64_t s = 7;
    const int64_t nr = 5, ldd = 80;
    for (int64_t nc = 1; nc <= 48; nc += 7) {
        float src[5 * 48], bias[48], row[48];
        uint16_t a[5 * 80], b[5 * 80];
        for (int64_t i = 0; i < nr * nc; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t u = (uint32_t)(s >> 32);
            if (i % 9 == 1)
                u = (u & 0xffff0000u) | 0x8000u; /* a rounding tie */
            if (i % 23 == 2)
                u = 0x7fc00001u;
            if (i % 29 == 3)
                u = 0xff800000u;
            memcpy(&src[i], &u, 4);
        }
        for (int64_t c = 0; c < nc; c++)
            bias[c] = c % 5 == 0 ? -0.0f : (float)c * 0.37f - 3.0f;
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            memset(a, 0x5a, sizeof a);
            memset(b, 0x5a, sizeof b);
            for (int64_t r = 0; r < nr; r++) {
                for (int64_t c = 0; c < nc; c++)
                    row[c] = with_bias ? src[r * nc + c] + bias[c] : src[r * nc + c];
                lwq_cpu_f32_to_bf16(row, a + r * ldd, nc);
            }
            lwq_cpu_store_tile_bf16(src, nr, nc, with_bias ? bias : NULL, b, ldd);
            cr_assert(memcmp(a, b, sizeof a) == 0, "tile of %lld outputs (bias %d) stores differently",
                      (long long)nc, with_bias);
        }
    }
}
