/* CPU GEMM and attention give each row the same bits whatever else shares its call.
 *
 * Calibration statistics must not depend on how samples were batched (issue 6: padding excluded,
 * identical scales for any --batch-size), and MoE experts see a different set of rows in every
 * batch.  OpenBLAS switches kernels for small M, and the attention key tiles used to start at
 * row 0 of the padded sequence; both changed the rounding of a token's result with its
 * neighbours.  These tests compare bitwise: a row alone, in slices of many sizes and offsets,
 * and a sequence alone vs left-padded in a batch, across the 64-row tile boundary. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"

static lwq_backend g_be;

static void be_open(void)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_cpu_create(&g_be, 2, &e), 0, "%s", e.msg);
}

static void be_close(void) { lwq_backend_free_backend(&g_be); }

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xFFFFFF) / (float)0x1000000 - 0.5f;
}

static void fill(void *p, lwq_dtype dt, int64_t n, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++) {
        float v = frand(&seed);
        if (dt == LWQ_F32)
            ((float *)p)[i] = v;
        else
            ((uint16_t *)p)[i] = lwq_f32_to_bf16(v);
    }
}

static void gemm_rows(lwq_dtype dt)
{
    const int64_t N = 150, IN = 96, OUT = 200;
    size_t es = lwq_dtype_size(dt);
    void *x = malloc((size_t)(N * IN) * es), *w = malloc((size_t)(OUT * IN) * es);
    void *all = malloc((size_t)(N * OUT) * es), *part = malloc((size_t)(N * OUT) * es);
    fill(x, dt, N * IN, 1);
    fill(w, dt, OUT * IN, 2);
    int64_t xs[2] = {N, IN}, ws[2] = {OUT, IN}, ys[2] = {N, OUT};
    lwq_tensor X = lwq_tensor_view(x, dt, 2, xs), W = lwq_tensor_view(w, dt, 2, ws), Y = lwq_tensor_view(all, dt, 2, ys);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_gemm(&g_be, &X, &W, NULL, &Y, &e), 0, "%s", e.msg);
    static const int64_t sizes[] = {1, 2, 3, 7, 16, 17, 63, 64, 65, 100, 129};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (int64_t off = 0; off + sizes[k] <= N; off += 37) {
            int64_t m = sizes[k], s1[2] = {m, IN}, s2[2] = {m, OUT};
            lwq_tensor Xp = lwq_tensor_view((char *)x + (size_t)(off * IN) * es, dt, 2, s1);
            lwq_tensor Yp = lwq_tensor_view(part, dt, 2, s2);
            cr_assert_eq(lwq_backend_gemm(&g_be, &Xp, &W, NULL, &Yp, &e), 0, "%s", e.msg);
            cr_assert(memcmp(part, (char *)all + (size_t)(off * OUT) * es, (size_t)(m * OUT) * es) == 0,
                      "%s gemm: rows %lld..%lld in a call of %lld rows differ from the same rows in a call of %lld",
                      lwq_dtype_name(dt), (long long)off, (long long)(off + m - 1), (long long)m, (long long)N);
        }
    free(x), free(w), free(all), free(part);
}

Test(ops_batch_invariance, gemm_f32_row_independent_of_m, .init = be_open, .fini = be_close) { gemm_rows(LWQ_F32); }
Test(ops_batch_invariance, gemm_bf16_row_independent_of_m, .init = be_open, .fini = be_close) { gemm_rows(LWQ_BF16); }

/* Attention over (batch, seq) with per-sequence real lengths lens (left padding). */
static void attend(const float *q, const float *k, const float *v, int64_t batch, int64_t seq, const int64_t *lens,
                   int H, int KV, int64_t hd, float *out)
{
    int64_t n = batch * seq, qs[2] = {n, H * hd}, ks[2] = {n, KV * hd}, vs[1] = {n};
    uint8_t *valid = malloc((size_t)n);
    for (int64_t s = 0; s < batch; s++)
        for (int64_t t = 0; t < seq; t++)
            valid[s * seq + t] = t >= seq - lens[s];
    lwq_tensor Q = lwq_tensor_view((void *)q, LWQ_F32, 2, qs), K = lwq_tensor_view((void *)k, LWQ_F32, 2, ks);
    lwq_tensor V = lwq_tensor_view((void *)v, LWQ_F32, 2, ks), O = lwq_tensor_view(out, LWQ_F32, 2, qs);
    lwq_tensor M = lwq_tensor_view(valid, LWQ_U8, 1, vs);
    lwq_attn_args a = {&Q, &K, &V, &O, &M, batch, seq, H, KV, hd, 0.25f};
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_attention(&g_be, &a, &e), 0, "%s", e.msg);
    free(valid);
}

static void attention_padding(int64_t len, int64_t seq)
{
    const int H = 4, KV = 2;
    const int64_t hd = 16, qw = H * hd, kw = KV * hd;
    /* sequence 0 of the batch is full (another sample), sequence 1 is ours, left-padded */
    int64_t n = 2 * seq, lens[2] = {seq, len};
    float *q = calloc((size_t)(n * qw), 4), *k = calloc((size_t)(n * kw), 4), *v = calloc((size_t)(n * kw), 4);
    float *ob = calloc((size_t)(n * qw), 4), *oa = calloc((size_t)(len * qw), 4);
    uint64_t s = 7;
    for (int64_t i = 0; i < n * qw; i++)
        q[i] = frand(&s);
    for (int64_t i = 0; i < n * kw; i++) {
        k[i] = frand(&s);
        v[i] = frand(&s);
    }
    attend(q, k, v, 2, seq, lens, H, KV, hd, ob);
    int64_t r0 = seq + (seq - len); /* first real row of sequence 1 */
    attend(q + r0 * qw, k + r0 * kw, v + r0 * kw, 1, len, &len, H, KV, hd, oa);
    cr_assert(memcmp(oa, ob + r0 * qw, (size_t)(len * qw) * 4) == 0,
              "a %lld-token sequence alone differs from the same sequence left-padded to %lld", (long long)len,
              (long long)seq);
    for (int64_t i = seq * qw; i < r0 * qw; i++)
        cr_assert(ob[i] == 0.0f, "padded row output %lld is %g, not 0", (long long)(i / qw - seq), ob[i]);
    free(q), free(k), free(v), free(ob), free(oa);
}

Test(ops_batch_invariance, attention_left_padding_within_a_tile, .init = be_open, .fini = be_close)
{
    attention_padding(23, 40);
}
Test(ops_batch_invariance, attention_left_padding_across_tiles, .init = be_open, .fini = be_close)
{
    attention_padding(100, 150);
}
