/* CPU GEMM, attention and the MoE block give each token the same bits whatever shares its call.
 *
 * Calibration statistics must not depend on how samples were batched (issue 6: padding excluded;
 * issue 14: by construction, on every CPU), and MoE experts see a different set of rows in every
 * batch.  These tests compare bitwise: GEMM rows alone, in slices of many sizes and offsets, for
 * F32/BF16/F16 operands, k with and without a partial 32-block, bias, 1-3 threads; a sequence
 * alone vs left-padded in a batch (attention, and a whole qwen3_moe layer whose experts then see
 * other tokens). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel.h"
#include "engine/forward/forward.h"
#include "kernels/backend.h"

static lwq_backend g_be;

static void be_open(void)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_cpu_create(&g_be, 2, &e), 0, "%s", e.msg);
}

static void be_close(void) { lwq_backend_destroy(&g_be); }

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
        else if (dt == LWQ_F16)
            ((uint16_t *)p)[i] = lwq_f32_to_f16(v);
        else
            ((uint16_t *)p)[i] = lwq_f32_to_bf16(v);
    }
}

/* y = x W^T (+ bias) for all N rows at once, then for slices of many sizes and offsets: each
 * slice's rows must equal the same rows of the full call, bit for bit. */
static void gemm_rows(lwq_dtype dt, int64_t IN, int with_bias)
{
    const int64_t N = 150, OUT = 200;
    size_t es = lwq_dtype_size(dt);
    void *x = malloc((size_t)(N * IN) * es), *w = malloc((size_t)(OUT * IN) * es), *bias = malloc((size_t)OUT * es);
    void *all = malloc((size_t)(N * OUT) * es), *part = malloc((size_t)(N * OUT) * es);
    fill(x, dt, N * IN, 1);
    fill(w, dt, OUT * IN, 2);
    fill(bias, dt, OUT, 3);
    int64_t xs[2] = {N, IN}, ws[2] = {OUT, IN}, ys[2] = {N, OUT}, bs[1] = {OUT};
    lwq_tensor X = lwq_tensor_view(x, dt, 2, xs), W = lwq_tensor_view(w, dt, 2, ws), Y = lwq_tensor_view(all, dt, 2, ys);
    lwq_tensor B = lwq_tensor_view(bias, dt, 1, bs);
    const lwq_tensor *bp = with_bias ? &B : NULL;
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_gemm(&g_be, &X, &W, bp, &Y, &e), 0, "%s", e.msg);
    static const int64_t sizes[] = {1, 2, 3, 5, 6, 7, 16, 17, 63, 64, 65, 100, 129};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (int64_t off = 0; off + sizes[k] <= N; off += 37) {
            int64_t m = sizes[k], s1[2] = {m, IN}, s2[2] = {m, OUT};
            lwq_tensor Xp = lwq_tensor_view((char *)x + (size_t)(off * IN) * es, dt, 2, s1);
            lwq_tensor Yp = lwq_tensor_view(part, dt, 2, s2);
            cr_assert_eq(lwq_backend_gemm(&g_be, &Xp, &W, bp, &Yp, &e), 0, "%s", e.msg);
            cr_assert(memcmp(part, (char *)all + (size_t)(off * OUT) * es, (size_t)(m * OUT) * es) == 0,
                      "%s gemm (k %lld): rows %lld..%lld in a call of %lld rows differ from the same rows in a "
                      "call of %lld",
                      lwq_dtype_name(dt), (long long)IN, (long long)off, (long long)(off + m - 1), (long long)m,
                      (long long)N);
        }
    /* and the thread count (the split over output blocks) changes nothing */
    for (int t = 1; t <= 3; t++) {
        lwq_parallel_set_threads(t);
        lwq_tensor Yt = lwq_tensor_view(part, dt, 2, ys);
        cr_assert_eq(lwq_backend_gemm(&g_be, &X, &W, bp, &Yt, &e), 0, "%s", e.msg);
        cr_assert(memcmp(part, all, (size_t)(N * OUT) * es) == 0, "%s gemm: %d threads change the result",
                  lwq_dtype_name(dt), t);
    }
    lwq_parallel_set_threads(2);
    free(x), free(w), free(bias), free(all), free(part);
}

Test(ops_batch_invariance, gemm_f32_row_independent_of_m, .init = be_open, .fini = be_close) { gemm_rows(LWQ_F32, 96, 0); }
Test(ops_batch_invariance, gemm_bf16_row_independent_of_m, .init = be_open, .fini = be_close) { gemm_rows(LWQ_BF16, 96, 0); }
Test(ops_batch_invariance, gemm_f16_row_independent_of_m, .init = be_open, .fini = be_close) { gemm_rows(LWQ_F16, 96, 0); }
Test(ops_batch_invariance, gemm_f32_partial_block_and_bias, .init = be_open, .fini = be_close) { gemm_rows(LWQ_F32, 100, 1); }
Test(ops_batch_invariance, gemm_bf16_partial_block_and_bias, .init = be_open, .fini = be_close) { gemm_rows(LWQ_BF16, 77, 1); }
Test(ops_batch_invariance, gemm_f16_partial_block_and_bias, .init = be_open, .fini = be_close) { gemm_rows(LWQ_F16, 13, 1); }

/* BF16 weights with F32 activations and output (the widening happens in the kernel): a row alone
 * equals the row inside a larger call. */
Test(ops_batch_invariance, gemm_mixed_dtypes_row_independent_of_m, .init = be_open, .fini = be_close)
{
    const int64_t N = 70, IN = 2100, OUT = 50;
    float *x = malloc((size_t)(N * IN) * 4), *all = malloc((size_t)(N * OUT) * 4), *one = malloc((size_t)OUT * 4);
    uint16_t *w = malloc((size_t)(OUT * IN) * 2);
    fill(x, LWQ_F32, N * IN, 4);
    fill(w, LWQ_BF16, OUT * IN, 5);
    int64_t xs[2] = {N, IN}, ws[2] = {OUT, IN}, ys[2] = {N, OUT}, x1[2] = {1, IN}, y1[2] = {1, OUT};
    lwq_tensor X = lwq_tensor_view(x, LWQ_F32, 2, xs), W = lwq_tensor_view(w, LWQ_BF16, 2, ws);
    lwq_tensor Y = lwq_tensor_view(all, LWQ_F32, 2, ys);
    lwq_error e = {0};
    cr_assert_eq(lwq_backend_gemm(&g_be, &X, &W, NULL, &Y, &e), 0, "%s", e.msg);
    for (int64_t r = 0; r < N; r += 13) {
        lwq_tensor Xr = lwq_tensor_view(x + r * IN, LWQ_F32, 2, x1), Yr = lwq_tensor_view(one, LWQ_F32, 2, y1);
        cr_assert_eq(lwq_backend_gemm(&g_be, &Xr, &W, NULL, &Yr, &e), 0, "%s", e.msg);
        cr_assert(memcmp(one, all + r * OUT, (size_t)OUT * 4) == 0, "row %lld alone differs", (long long)r);
    }
    free(x), free(w), free(all), free(one);
}

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

/* Causal attention's row i of a sequence equals the last row of its first i + 1 tokens alone.
 * The CPU kernel runs P V 4 query rows at a time over the keys all of them see and the rest key
 * by key, so a row's keys split between the two at other points in the two calls (and across
 * 64-key tiles); the bits must not notice.  head_dim 72: a 64-wide part and a scalar tail. */
Test(ops_batch_invariance, attention_row_same_as_last_row_of_its_prefix, .init = be_open, .fini = be_close)
{
    const int H = 2, KV = 1;
    const int64_t hd = 72, seq = 70, qw = H * hd, kw = KV * hd;
    float *q = malloc((size_t)(seq * qw) * 4), *k = malloc((size_t)(seq * kw) * 4), *v = malloc((size_t)(seq * kw) * 4);
    float *full = malloc((size_t)(seq * qw) * 4), *pre = malloc((size_t)(seq * qw) * 4);
    fill(q, LWQ_F32, seq * qw, 51);
    fill(k, LWQ_F32, seq * kw, 52);
    fill(v, LWQ_F32, seq * kw, 53);
    attend(q, k, v, 1, seq, &seq, H, KV, hd, full);
    static const int64_t rows[] = {0, 1, 2, 3, 4, 5, 6, 7, 62, 63, 64, 65, 66, 69};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int64_t len = rows[i] + 1;
        attend(q, k, v, 1, len, &len, H, KV, hd, pre);
        cr_assert(memcmp(pre + rows[i] * qw, full + rows[i] * qw, (size_t)qw * 4) == 0,
                  "row %lld of a %lld-token sequence differs from the last row of its prefix",
                  (long long)rows[i], (long long)seq);
    }
    free(q), free(k), free(v), free(full), free(pre);
}

/* ---- a qwen3_moe layer: a sequence alone vs left-padded beside others ------------------------ */

#define MOE_D 64
#define MOE_E 8
#define MOE_I 32
#define MOE_MAXW 40

typedef struct wstore {
    int n;
    char name[MOE_MAXW][96];
    lwq_tensor t[MOE_MAXW];
} wstore;

static void add_w(wstore *s, const char *name, int64_t r, int64_t c, uint64_t seed)
{
    int64_t shape[2] = {r, c};
    int64_t n = r * (c ? c : 1);
    uint16_t *p = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        p[i] = lwq_f32_to_bf16(c ? 0.3f * frand(&seed) : 1.0f + 0.2f * frand(&seed));
    snprintf(s->name[s->n], sizeof s->name[0], "%s", name);
    s->t[s->n] = lwq_tensor_view(p, LWQ_BF16, c ? 2 : 1, shape);
    s->n++;
}

static int get_w(void *ctx, const char *name, lwq_tensor *out, lwq_error *e)
{
    wstore *s = ctx;
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->name[i], name)) {
            *out = s->t[i];
            return 0;
        }
    return lwq_errf(e, LWQ_ENOENT, "no tensor %s", name);
}

/* Layer 0 on (batch, seq) rows with the given real lengths (left padding); h in/out (n, D) act. */
static void moe_layer(lwq_model *m, wstore *ws, int64_t batch, int64_t seq, const int64_t *lens, void *h,
                      lwq_dtype act)
{
    lwq_error e = {0};
    lwq_batch b;
    cr_assert_eq(lwq_batch_init(&b, &g_be, batch, seq, lens, &e), 0, "%s", e.msg);
    int64_t sh[2] = {batch * seq, MOE_D};
    lwq_tensor H = lwq_tensor_view(h, act, 2, sh);
    lwq_weights w = {get_w, ws};
    cr_assert_eq(lwq_model_layer_forward(m, 0, &w, &b, &H, NULL, &e), 0, "%s", e.msg);
    lwq_batch_free(&b, &g_be);
}

static void moe_alone_vs_batched(lwq_dtype act)
{
    lwq_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    strcpy(cfg.model_type, "qwen3_moe");
    cfg.family = lwq_family_find("qwen3_moe");
    cfg.dtype = LWQ_BF16;
    cfg.hidden_size = MOE_D;
    cfg.intermediate_size = 96;
    cfg.num_hidden_layers = 1;
    cfg.num_attention_heads = 4;
    cfg.num_key_value_heads = 2;
    cfg.head_dim = 16;
    cfg.vocab_size = 100;
    cfg.rms_norm_eps = 1e-6;
    cfg.rope_theta = 1e6;
    cfg.num_experts = MOE_E;
    cfg.num_experts_per_tok = 2;
    cfg.moe_intermediate_size = MOE_I;
    cfg.norm_topk_prob = 1;
    cfg.decoder_sparse_step = 1;
    wstore *ws = calloc(1, sizeof *ws);
    char nm[96];
    add_w(ws, "model.layers.0.input_layernorm.weight", MOE_D, 0, 11);
    add_w(ws, "model.layers.0.post_attention_layernorm.weight", MOE_D, 0, 12);
    add_w(ws, "model.layers.0.self_attn.q_proj.weight", 64, MOE_D, 13);
    add_w(ws, "model.layers.0.self_attn.k_proj.weight", 32, MOE_D, 14);
    add_w(ws, "model.layers.0.self_attn.v_proj.weight", 32, MOE_D, 15);
    add_w(ws, "model.layers.0.self_attn.o_proj.weight", MOE_D, 64, 16);
    add_w(ws, "model.layers.0.self_attn.q_norm.weight", 16, 0, 17);
    add_w(ws, "model.layers.0.self_attn.k_norm.weight", 16, 0, 18);
    add_w(ws, "model.layers.0.mlp.gate.weight", MOE_E, MOE_D, 19);
    for (int x = 0; x < MOE_E; x++) {
        snprintf(nm, sizeof nm, "model.layers.0.mlp.experts.%d.gate_proj.weight", x);
        add_w(ws, nm, MOE_I, MOE_D, 100 + 3 * (uint64_t)x);
        snprintf(nm, sizeof nm, "model.layers.0.mlp.experts.%d.up_proj.weight", x);
        add_w(ws, nm, MOE_I, MOE_D, 101 + 3 * (uint64_t)x);
        snprintf(nm, sizeof nm, "model.layers.0.mlp.experts.%d.down_proj.weight", x);
        add_w(ws, nm, MOE_D, MOE_I, 102 + 3 * (uint64_t)x);
    }
    lwq_model m;
    lwq_error e = {0};
    cr_assert_eq(lwq_model_init(&m, &cfg, &g_be, act, &e), 0, "%s", e.msg);
    /* three sequences of 70 rows; ours (the second) has 23 real tokens, the others 70 and 41 */
    const int64_t T = 70, lens[3] = {70, 23, 41}, mine = 23;
    size_t es = lwq_dtype_size(act);
    char *hb = malloc((size_t)(3 * T * MOE_D) * es), *ha = malloc((size_t)(mine * MOE_D) * es);
    fill(hb, act, 3 * T * MOE_D, 21);
    int64_t r0 = T + (T - mine); /* our first real row in the batch */
    memcpy(ha, hb + (size_t)(r0 * MOE_D) * es, (size_t)(mine * MOE_D) * es);
    moe_layer(&m, ws, 3, T, lens, hb, act);
    moe_layer(&m, ws, 1, mine, &mine, ha, act);
    for (int64_t r = 0; r < mine; r++)
        cr_assert(memcmp(ha + (size_t)(r * MOE_D) * es, hb + (size_t)((r0 + r) * MOE_D) * es, (size_t)MOE_D * es) == 0,
                  "%s qwen3_moe layer: token %lld of a sequence alone differs from the same token batched with "
                  "others (left-padded)",
                  lwq_dtype_name(act), (long long)r);
    lwq_model_free(&m);
    for (int i = 0; i < ws->n; i++)
        free(ws->t[i].data);
    free(ws), free(hb), free(ha);
}

Test(ops_batch_invariance, moe_layer_bf16_token_independent_of_batch, .init = be_open, .fini = be_close)
{
    moe_alone_vs_batched(LWQ_BF16);
}
Test(ops_batch_invariance, moe_layer_f32_token_independent_of_batch, .init = be_open, .fini = be_close)
{
    moe_alone_vs_batched(LWQ_F32);
}
