/* engine/eval/emul/eval_emul.c — activation / KV-cache emulation of the serving engine and the backend
 * wrapper that applies it (engine/eval/emul/eval_emul.h). */
#include "engine/eval/emul/eval_emul.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/parallel.h"
#include "layout/format/quant_formats.h"

/* ---- the numerics ----------------------------------------------------------------------------- */

static inline __attribute__((always_inline)) void load_row(const void *x, lwq_dtype dt, int64_t off, int64_t n, float *out)
{
    if (dt == LWQ_F32) {
        if ((const float *)x + off != out)
            memcpy(out, (const float *)x + off, (size_t)n * sizeof(float));
    } else if (dt == LWQ_BF16) {
        const uint16_t *h = (const uint16_t *)x + off;
        for (int64_t i = 0; i < n; i++)
            out[i] = lwq_bf16_to_f32(h[i]);
    } else {
        const uint16_t *h = (const uint16_t *)x + off;
        for (int64_t i = 0; i < n; i++)
            out[i] = lwq_f16_to_f32(h[i]);
    }
}

/* Hot loops are also compiled for AVX-512 / AVX2 and chosen at load time, as kernels/cpu does;
 * every clone performs the same IEEE single-precision operations, so the values are the same. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LWQ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LWQ_CLONES
#endif
#define INLINE static inline __attribute__((always_inline))

/* One block in place, branch-free so that it vectorizes: the magnitude by lwq_e2m1_round_mag
 * (equal to |lwq_e2m1_round| for every finite value, layout/format/quant_formats.h), the sign put back
 * only where q < 0 (so -0.0 in gives +0.0 out, as lwq_e2m1_round does); a block whose scale is 0
 * gives zeros. */
INLINE void nvfp4_block(float *v, float six_is, float input_scale)
{
    float amax = 0;
    for (int i = 0; i < LWQ_NVFP4_BLOCK; i++)
        amax = fmaxf(amax, fabsf(v[i]));
    float bs = lwq_e4m3_to_f32(lwq_e4m3_from_f32(LWQ_FDIV(amax, six_is)));
    float d = LWQ_FMUL(bs, input_scale);
    float dd = d > 0 ? d : 1.0f;
    uint32_t keep = d > 0 ? 0xffffffffu : 0u;
    for (int i = 0; i < LWQ_NVFP4_BLOCK; i++) {
        float q = LWQ_FDIV(v[i], dd);
        float r = LWQ_FMUL(lwq_e2m1_round_mag(fabsf(q)), dd);
        uint32_t neg = (uint32_t)(q < 0.0f) << 31;
        v[i] = lwq_bits_f32((lwq_f32_bits(r) | neg) & keep);
    }
}

typedef struct act_job {
    const void *x;
    lwq_dtype dt;
    int64_t cols;
    float scale;
    float *out;
} act_job;

LWQ_CLONES static void nvfp4_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    (void)tid;
    const act_job *j = ctx;
    float six_is = LWQ_FMUL(LWQ_E2M1_MAX, j->scale);
    for (int64_t r = r0; r < r1; r++) {
        float *o = j->out + r * j->cols;
        load_row(j->x, j->dt, r * j->cols, j->cols, o);
        for (int64_t b = 0; b + LWQ_NVFP4_BLOCK <= j->cols; b += LWQ_NVFP4_BLOCK)
            nvfp4_block(o + b, six_is, j->scale);
    }
}

void lwq_emul_nvfp4_act(const void *x, lwq_dtype dt, int64_t rows, int64_t cols, float input_scale, float *out)
{
    act_job j = {x, dt, cols, input_scale, out};
    lwq_parallel_for(rows, 16, nvfp4_rows, &j);
}

LWQ_CLONES static void fp8_part(void *ctx, int64_t i0, int64_t i1, int tid)
{
    (void)tid;
    const act_job *j = ctx;
    load_row(j->x, j->dt, i0, i1 - i0, j->out + i0);
    for (int64_t i = i0; i < i1; i++)
        j->out[i] = LWQ_FMUL(lwq_e4m3_to_f32(lwq_e4m3_from_f32(LWQ_FDIV(j->out[i], j->scale))), j->scale);
}

void lwq_emul_fp8_act(const void *x, lwq_dtype dt, int64_t n, float scale, float *out)
{
    act_job j = {x, dt, 0, scale, out};
    lwq_parallel_for(n, 4096, fp8_part, &j);
}

/* ---- registry --------------------------------------------------------------------------------- */

void lwq_emul_reset(lwq_emul *em)
{
    em->n = 0;
    em->last_ok = 0;
    em->kv_fp8 = 0;
    em->k_scale = em->v_scale = 1.0f;
}

int lwq_emul_add(lwq_emul *em, const char *module, lwq_qformat fmt, float input_scale, lwq_error *e)
{
    if (em->n == em->cap) {
        int cap = em->cap ? 2 * em->cap : 16;
        lwq_emul_linear *v = realloc(em->lin, (size_t)cap * sizeof *v);
        if (!v)
            return lwq_errf(e, LWQ_ENOMEM, "out of memory");
        em->lin = v;
        em->cap = cap;
    }
    lwq_emul_linear *l = &em->lin[em->n];
    memset(l, 0, sizeof *l);
    if ((size_t)snprintf(l->module, sizeof l->module, "%s", module) >= sizeof l->module)
        return lwq_errf(e, LWQ_EINVAL, "module name %s is too long", module);
    l->fmt = fmt;
    l->input_scale = input_scale;
    em->n++;
    return 0;
}

lwq_emul_linear *lwq_emul_find_weight(lwq_emul *em, const char *name)
{
    size_t n = strlen(name);
    if (n < 7 || strcmp(name + n - 7, ".weight"))
        return NULL;
    for (int i = 0; i < em->n; i++)
        if (strlen(em->lin[i].module) == n - 7 && !strncmp(em->lin[i].module, name, n - 7))
            return &em->lin[i];
    return NULL;
}

/* ---- the wrapper backend ---------------------------------------------------------------------- */

#define CTX(c) (((lwq_emul *)(c))->inner.ctx)
#define OPS(c) (((lwq_emul *)(c))->inner.ops)

/* Every op of lwq_backend_ops must be forwarded below; a new op changes the struct's size. */
_Static_assert(sizeof(lwq_backend_ops) == 26 * sizeof(void *), "a new backend op needs a forwarder in eval_emul.c");

static void w_destroy(void *c) { (void)c; }
static int w_alloc(void *c, size_t b, void **o, lwq_error *e) { return OPS(c)->alloc(CTX(c), b, o, e); }
static void w_free(void *c, void *p) { OPS(c)->free(CTX(c), p); }
static int w_upload(void *c, void *d, const void *s, size_t b, lwq_error *e) { return OPS(c)->upload(CTX(c), d, s, b, e); }
static int w_download(void *c, void *d, const void *s, size_t b, lwq_error *e)
{
    return OPS(c)->download(CTX(c), d, s, b, e);
}
static int w_memset0(void *c, void *d, size_t b, lwq_error *e) { return OPS(c)->memset0(CTX(c), d, b, e); }
static int w_rmsnorm(void *c, const lwq_tensor *x, const lwq_tensor *w, float eps, lwq_tensor *y, lwq_error *e)
{
    return OPS(c)->rmsnorm(CTX(c), x, w, eps, y, e);
}
static int w_rope(void *c, lwq_tensor *x, int64_t hd, const lwq_tensor *pos, const lwq_tensor *f, float s, lwq_error *e)
{
    return OPS(c)->rope(CTX(c), x, hd, pos, f, s, e);
}
static int w_swiglu(void *c, const lwq_tensor *g, const lwq_tensor *u, lwq_tensor *o, lwq_error *e)
{
    return OPS(c)->swiglu(CTX(c), g, u, o, e);
}
static int w_add(void *c, lwq_tensor *acc, const lwq_tensor *x, lwq_error *e) { return OPS(c)->add(CTX(c), acc, x, e); }
static int w_moe_route(void *c, const lwq_tensor *l, int k, lwq_route_mode m, lwq_dtype wd, lwq_tensor *idx,
                       lwq_tensor *wts, lwq_error *e)
{
    return OPS(c)->moe_route(CTX(c), l, k, m, wd, idx, wts, e);
}
static int w_gather_rows(void *c, const lwq_tensor *s, const lwq_tensor *r, lwq_tensor *d, lwq_error *e)
{
    return OPS(c)->gather_rows(CTX(c), s, r, d, e);
}
static int w_moe_combine(void *c, const lwq_tensor *y, const lwq_tensor *sr, const lwq_tensor *w, lwq_tensor *o,
                         lwq_error *e)
{
    return OPS(c)->moe_combine(CTX(c), y, sr, w, o, e);
}
static int w_amax(void *c, const lwq_tensor *x, const lwq_tensor *v, float *o, lwq_error *e)
{
    return OPS(c)->amax(CTX(c), x, v, o, e);
}
static int w_synchronize(void *c, lwq_error *e) { return OPS(c)->synchronize(CTX(c), e); }
static uint64_t w_mem_peak(void *c) { return OPS(c)->mem_peak ? OPS(c)->mem_peak(CTX(c)) : 0; }
static int w_host_register(void *c, void *p, size_t b, lwq_error *e)
{
    return OPS(c)->host_register ? OPS(c)->host_register(CTX(c), p, b, e) : 1;
}
static void w_host_unregister(void *c, void *p)
{
    if (OPS(c)->host_unregister)
        OPS(c)->host_unregister(CTX(c), p);
}
static int w_pci_bus_id(void *c, char *o, size_t cap) { return OPS(c)->pci_bus_id ? OPS(c)->pci_bus_id(CTX(c), o, cap) : -1; }
static int w_copy(void *c, const lwq_tensor *s, lwq_tensor *d, lwq_error *e) { return OPS(c)->copy(CTX(c), s, d, e); }
/* no GEMM inside: nothing to emulate, the inner backend's op as it is */
static int w_mamba2(void *c, const lwq_mamba2_args *a, lwq_error *e) { return OPS(c)->mamba2(CTX(c), a, e); }

/* x (n, in) act on the device -> an f32 (n, in) device tensor holding the emulated input (on the
 * CPU backend a view of em->scratch, valid until the next call). */
static int quantize_input(lwq_emul *em, const lwq_emul_linear *l, const lwq_tensor *x, lwq_tensor *xq, lwq_error *e)
{
    int64_t n = x->shape[0], in = x->shape[1];
    size_t bytes = (size_t)(n * in) * sizeof(float);
    int cpu = em->inner.ops->device == LWQ_DEV_CPU;
    const void *src = x->data;
    void *stage = NULL;
    float *out = NULL;
    if (cpu && em->scratch_bytes < bytes) { /* one buffer for every GEMM: no page faults per call */
        free(em->scratch);
        em->scratch = malloc(bytes);
        em->scratch_bytes = em->scratch ? bytes : 0;
        em->last_ok = 0;
    }
    out = cpu ? em->scratch : malloc(bytes ? bytes : 1);
    if (!out)
        return lwq_errf(e, LWQ_ENOMEM, "%s: no memory for its emulated (%lld, %lld) input", l->module, (long long)n,
                        (long long)in);
    /* Members of a fused group (q/k/v, gate/up) read the same input with the same scale: when the
     * input bytes equal the last call's (compared, not assumed), the scratch already holds the
     * result. */
    size_t xb = (size_t)(n * in) * lwq_dtype_size(x->dtype);
    if (cpu && em->last_ok && em->last_fmt == l->fmt && em->last_scale == l->input_scale && em->last_n == n &&
        em->last_in == in && em->last_dt == x->dtype && !memcmp(em->last_x, x->data, xb)) {
        *xq = lwq_tensor_view(out, LWQ_F32, 2, (int64_t[2]){n, in});
        return 0;
    }
    em->last_ok = 0;
    if (!cpu) { /* a round trip through the host */
        if (!(stage = malloc(xb ? xb : 1))) {
            free(out);
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", l->module);
        }
        int rc = lwq_backend_download(&em->inner, stage, x->data, xb, e);
        if (rc < 0) {
            free(stage);
            free(out);
            return rc;
        }
        src = stage;
    }
    if (l->fmt == LWQ_QFMT_NVFP4)
        lwq_emul_nvfp4_act(src, x->dtype, n, in, l->input_scale, out);
    else
        lwq_emul_fp8_act(src, x->dtype, n * in, l->input_scale, out);
    free(stage);
    int64_t shape[2] = {n, in};
    if (cpu) {
        *xq = lwq_tensor_view(out, LWQ_F32, 2, shape);
        if (em->last_cap < xb) {
            free(em->last_x);
            em->last_x = malloc(xb);
            em->last_cap = em->last_x ? xb : 0;
        }
        if (em->last_x) {
            memcpy(em->last_x, x->data, xb);
            em->last_ok = 1;
            em->last_fmt = l->fmt;
            em->last_scale = l->input_scale;
            em->last_n = n;
            em->last_in = in;
            em->last_dt = x->dtype;
        }
        return 0;
    }
    int rc = lwq_backend_tensor_alloc(&em->inner, LWQ_F32, 2, shape, xq, e);
    if (rc == 0 && (rc = lwq_backend_upload(&em->inner, xq->data, out, bytes, e)) < 0)
        lwq_backend_tensor_free(&em->inner, xq);
    free(out);
    return rc;
}

static int gemm_emulated(lwq_emul *em, const lwq_tensor *x, const lwq_tensor *w, const lwq_tensor *bias,
                         lwq_tensor *y, lwq_error *e)
{
    lwq_emul_linear *l = NULL;
    for (int i = 0; i < em->n && !l; i++)
        if (em->lin[i].dev_weight && em->lin[i].dev_weight == w->data)
            l = &em->lin[i];
    if (!l)
        return em->inner.ops->gemm(em->inner.ctx, x, w, bias, y, e);
    if (l->fmt == LWQ_QFMT_NVFP4 && x->shape[1] % LWQ_NVFP4_BLOCK)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: NVFP4 input of %lld features is not a multiple of 16", l->module,
                        (long long)x->shape[1]);
    lwq_tensor xq;
    int rc = quantize_input(em, l, x, &xq, e);
    if (rc < 0)
        return rc;
    rc = lwq_backend_gemm(&em->inner, &xq, w, bias, y, e);
    if (em->inner.ops->device != LWQ_DEV_CPU)
        lwq_backend_tensor_free(&em->inner, &xq);
    l->hits += rc == 0;
    return rc;
}

static int w_gemm(void *c, const lwq_tensor *x, const lwq_tensor *w, const lwq_tensor *bias, lwq_tensor *y,
                  lwq_error *e)
{
    lwq_emul *em = c;
    if (em->memo && lwq_memo_gemm_lookup(em->memo, x, w, bias, y)) {
        for (int i = 0; i < em->n; i++) /* a replayed quantized GEMM still counts as run through here */
            em->lin[i].hits += em->lin[i].dev_weight && em->lin[i].dev_weight == w->data;
        return 0;
    }
    int rc = gemm_emulated(em, x, w, bias, y, e);
    if (rc == 0 && em->memo)
        rc = lwq_memo_gemm_store(em->memo, x, w, bias, y, e);
    return rc;
}

static void store(void *p, lwq_dtype t, int64_t i, float v)
{
    if (t == LWQ_F32)
        ((float *)p)[i] = v;
    else if (t == LWQ_BF16)
        ((uint16_t *)p)[i] = lwq_f32_to_bf16(v);
    else
        ((uint16_t *)p)[i] = lwq_f32_to_f16(v);
}

/* k or v through the FP8 cache, back in its own dtype. */
static int kv_roundtrip(lwq_emul *em, const lwq_tensor *t, float scale, lwq_tensor *out, lwq_error *e)
{
    int64_t n = lwq_tensor_numel(t);
    size_t eb = lwq_dtype_size(t->dtype), bytes = (size_t)n * eb;
    int cpu = em->inner.ops->device == LWQ_DEV_CPU;
    void *h = malloc(bytes ? bytes : 1);
    float *f = malloc((size_t)(n ? n : 1) * sizeof(float));
    int rc = h && f ? 0 : lwq_errf(e, LWQ_ENOMEM, "FP8 KV cache: out of memory");
    if (rc == 0)
        rc = cpu ? (memcpy(h, t->data, bytes), 0) : lwq_backend_download(&em->inner, h, t->data, bytes, e);
    if (rc == 0) {
        lwq_emul_fp8_act(h, t->dtype, n, scale, f);
        for (int64_t i = 0; i < n; i++)
            store(h, t->dtype, i, f[i]);
        rc = lwq_backend_tensor_alloc(&em->inner, t->dtype, t->ndim, t->shape, out, e);
        if (rc == 0 && (rc = lwq_backend_upload(&em->inner, out->data, h, bytes, e)) < 0)
            lwq_backend_tensor_free(&em->inner, out);
    }
    free(h);
    free(f);
    return rc;
}

static int attention_emulated(lwq_emul *em, const lwq_attn_args *a, lwq_error *e)
{
    if (!em->kv_fp8)
        return em->inner.ops->attention(em->inner.ctx, a, e);
    lwq_tensor k, v;
    int rc = kv_roundtrip(em, a->k, em->k_scale, &k, e);
    if (rc < 0)
        return rc;
    if ((rc = kv_roundtrip(em, a->v, em->v_scale, &v, e)) < 0) {
        lwq_backend_tensor_free(&em->inner, &k);
        return rc;
    }
    lwq_attn_args b = *a;
    b.k = &k;
    b.v = &v;
    rc = em->inner.ops->attention(em->inner.ctx, &b, e);
    lwq_backend_tensor_free(&em->inner, &k);
    lwq_backend_tensor_free(&em->inner, &v);
    return rc;
}

static int w_attention(void *c, const lwq_attn_args *a, lwq_error *e)
{
    lwq_emul *em = c;
    /* the key includes the cache mode and its scales: a replay with another KV cache computes */
    if (em->memo && lwq_memo_attn_lookup(em->memo, a, em->kv_fp8, em->k_scale, em->v_scale))
        return 0;
    int rc = attention_emulated(em, a, e);
    if (rc == 0 && em->memo)
        rc = lwq_memo_attn_store(em->memo, a, em->kv_fp8, em->k_scale, em->v_scale, e);
    return rc;
}

static int emul_get(void *ctx, const char *name, lwq_tensor *out, lwq_error *e)
{
    lwq_emul_weights *c = ctx;
    int rc = c->inner->get(c->inner->ctx, name, out, e);
    if (rc)
        return rc;
    char full[640];
    lwq_names_full(c->names, name, full, sizeof full);
    lwq_emul_linear *l = lwq_emul_find_weight(c->em, full);
    if (l)
        l->dev_weight = out->data;
    return 0;
}

void lwq_emul_weights_init(lwq_emul_weights *ew, lwq_emul *em, const lwq_weights *inner, const lwq_names *names)
{
    ew->inner = inner;
    ew->em = em;
    ew->names = names;
    ew->w.get = emul_get;
    ew->w.ctx = ew;
}

void lwq_emul_init(lwq_emul *em, const lwq_backend *inner)
{
    memset(em, 0, sizeof *em);
    em->inner = *inner;
    lwq_backend_ops t = {
        .name = inner->ops->name,
        .device = inner->ops->device,
        .destroy = w_destroy,
        .alloc = w_alloc,
        .free = w_free,
        .upload = w_upload,
        .download = w_download,
        .memset0 = w_memset0,
        .gemm = w_gemm,
        .rmsnorm = w_rmsnorm,
        .rope = w_rope,
        .attention = w_attention,
        .swiglu = w_swiglu,
        .add = w_add,
        .moe_route = w_moe_route,
        .gather_rows = w_gather_rows,
        .moe_combine = w_moe_combine,
        .amax = w_amax,
        .synchronize = w_synchronize,
        .mem_peak = inner->ops->mem_peak ? w_mem_peak : NULL,
        .host_register = inner->ops->host_register ? w_host_register : NULL,
        .host_unregister = inner->ops->host_unregister ? w_host_unregister : NULL,
        .pci_bus_id = inner->ops->pci_bus_id ? w_pci_bus_id : NULL,
        .copy = w_copy,
        /* no grouped GEMM: lwq_backend_gemm_grouped then calls w_gemm per group, so every
         * product is emulated (and memoised) like a single one */
        .gemm_grouped = NULL,
        .mamba2 = inner->ops->mamba2 ? w_mamba2 : NULL,
    };
    em->ops = t;
    em->be.ops = &em->ops;
    em->be.ctx = em;
    em->k_scale = em->v_scale = 1.0f;
}

void lwq_emul_free(lwq_emul *em)
{
    free(em->scratch);
    em->scratch = NULL;
    em->scratch_bytes = 0;
    free(em->last_x);
    em->last_x = NULL;
    em->last_cap = 0;
    em->last_ok = 0;
    free(em->lin);
    em->lin = NULL;
    em->n = em->cap = 0;
}
