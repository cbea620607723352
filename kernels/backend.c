/* kernels/backend.c — checking wrappers around the backend table (see backend.h).  Every shape,
 * dtype and device rule is enforced here once, so backends stay thin. */
#include "kernels/backend.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int lwq_dtype_is_act(lwq_dtype t) { return t == LWQ_F32 || t == LWQ_BF16 || t == LWQ_F16; }

static int check_t(const lwq_backend *be, const char *op, const char *arg, const lwq_tensor *t,
                   int ndim, lwq_error *e)
{
    if (!t)
        return lwq_errf(e, LWQ_EINVAL, "%s: %s is NULL", op, arg);
    if (t->ndim != ndim)
        return lwq_errf(e, LWQ_EINVAL, "%s: %s has %d dims, expected %d", op, arg, t->ndim, ndim);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0)
            return lwq_errf(e, LWQ_EINVAL, "%s: %s has negative dim %d", op, arg, i);
    if (!lwq_tensor_is_contiguous(t))
        return lwq_errf(e, LWQ_EINVAL, "%s: %s is not contiguous row-major", op, arg);
    if (t->device != be->ops->device)
        return lwq_errf(e, LWQ_EINVAL, "%s: %s lives on device %d, backend %s needs %d", op, arg,
                        (int)t->device, be->ops->name, (int)be->ops->device);
    if (!t->data && lwq_tensor_numel(t) > 0)
        return lwq_errf(e, LWQ_EINVAL, "%s: %s has no data", op, arg);
    return 0;
}

static int check_dt(const char *op, const char *arg, const lwq_tensor *t, int (*pred)(lwq_dtype),
                    const char *what, lwq_error *e)
{
    if (!pred(t->dtype))
        return lwq_errf(e, LWQ_EINVAL, "%s: %s has dtype %s, expected %s", op, arg,
                        lwq_dtype_name(t->dtype), what);
    return 0;
}

static int is_i32(lwq_dtype t) { return t == LWQ_I32; }
static int is_f32(lwq_dtype t) { return t == LWQ_F32; }
static int is_u8(lwq_dtype t) { return t == LWQ_U8 || t == LWQ_BOOL; }

static int check_shape2(const char *op, const char *arg, const lwq_tensor *t, int64_t r, int64_t c,
                        lwq_error *e)
{
    if (t->shape[0] != r || t->shape[1] != c)
        return lwq_errf(e, LWQ_EINVAL, "%s: %s is (%" PRId64 ", %" PRId64 "), expected (%" PRId64
                        ", %" PRId64 ")", op, arg, t->shape[0], t->shape[1], r, c);
    return 0;
}

static int check_len(const char *op, const char *arg, const lwq_tensor *t, int64_t n, lwq_error *e)
{
    if (t->shape[0] != n)
        return lwq_errf(e, LWQ_EINVAL, "%s: %s has %" PRId64 " elements, expected %" PRId64, op,
                        arg, t->shape[0], n);
    return 0;
}

/* ---- construction and memory ----------------------------------------------------------------- */

void lwq_backend_destroy(lwq_backend *be)
{
    if (be && be->ops && be->ops->destroy)
        be->ops->destroy(be->ctx);
    if (be) {
        be->ops = NULL;
        be->ctx = NULL;
    }
}

#ifndef LWQ_HAVE_CUDA
/* One wording for "no CUDA in this build", whichever call meets it first (test_cuda_probe). */
int lwq_backend_cuda_probe(lwq_error *e)
{
    return lwq_errf(e, LWQ_EUNSUPPORTED, "cuda: lwq was built without CUDA (no nvcc at configure time)");
}
int lwq_backend_cuda_create(lwq_backend *be, int device, lwq_error *e)
{
    (void)be;
    (void)device;
    return lwq_backend_cuda_probe(e);
}
int lwq_backend_cuda_device_count(void) { return 0; }
int lwq_backend_cuda_auto(lwq_error *e)
{
    (void)e;
    return 0;
}
#endif

int lwq_backend_alloc(const lwq_backend *be, size_t bytes, void **out, lwq_error *e)
{
    *out = NULL;
    if (bytes == 0)
        bytes = 1;
    return be->ops->alloc(be->ctx, bytes, out, e);
}

void lwq_backend_free(const lwq_backend *be, void *p)
{
    if (p)
        be->ops->free(be->ctx, p);
}

int lwq_backend_tensor_alloc(const lwq_backend *be, lwq_dtype dt, int ndim, const int64_t *shape,
                             lwq_tensor *t, lwq_error *e)
{
    memset(t, 0, sizeof *t);
    if (ndim < 1 || ndim > LWQ_TENSOR_MAX_DIMS || dt < 0 || dt >= LWQ_DTYPE_COUNT)
        return lwq_errf(e, LWQ_EINVAL, "tensor_alloc: bad ndim %d or dtype %d", ndim, (int)dt);
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] > 0 && n > (UINT64_MAX / 16) / (uint64_t)shape[i]))
            return lwq_errf(e, LWQ_EINVAL, "tensor_alloc: dim %d = %" PRId64 " is negative or "
                            "overflows", i, shape[i]);
        n *= (uint64_t)shape[i];
    }
    void *p;
    LWQ_TRY(lwq_backend_alloc(be, (size_t)(n * lwq_dtype_size(dt)), &p, e));
    *t = lwq_tensor_view(p, dt, ndim, shape);
    t->device = be->ops->device;
    return 0;
}

void lwq_backend_tensor_free(const lwq_backend *be, lwq_tensor *t)
{
    if (t && t->data)
        lwq_backend_free(be, t->data);
    if (t)
        t->data = NULL;
}

int lwq_backend_upload(const lwq_backend *be, void *dst, const void *src_host, size_t bytes,
                       lwq_error *e)
{
    if (bytes == 0)
        return 0;
    if (!dst || !src_host)
        return lwq_errf(e, LWQ_EINVAL, "upload: NULL pointer");
    return be->ops->upload(be->ctx, dst, src_host, bytes, e);
}

int lwq_backend_download(const lwq_backend *be, void *dst_host, const void *src, size_t bytes,
                         lwq_error *e)
{
    if (bytes == 0)
        return 0;
    if (!dst_host || !src)
        return lwq_errf(e, LWQ_EINVAL, "download: NULL pointer");
    return be->ops->download(be->ctx, dst_host, src, bytes, e);
}

int lwq_backend_memset0(const lwq_backend *be, void *dst, size_t bytes, lwq_error *e)
{
    if (bytes == 0)
        return 0;
    if (!dst)
        return lwq_errf(e, LWQ_EINVAL, "memset0: NULL pointer");
    return be->ops->memset0(be->ctx, dst, bytes, e);
}

int lwq_backend_synchronize(const lwq_backend *be, lwq_error *e)
{
    return be->ops->synchronize(be->ctx, e);
}

/* ---- ops ------------------------------------------------------------------------------------- */

static int gemm_check(const lwq_backend *be, const char *op, const lwq_tensor *x,
                      const lwq_tensor *w, const lwq_tensor *bias, lwq_tensor *y, lwq_error *e)
{
    LWQ_TRY(check_t(be, op, "x", x, 2, e));
    LWQ_TRY(check_t(be, op, "w", w, 2, e));
    LWQ_TRY(check_t(be, op, "y", y, 2, e));
    LWQ_TRY(check_dt(op, "x", x, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_dt(op, "w", w, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_dt(op, "y", y, lwq_dtype_is_act, "F32/BF16/F16", e));
    if (w->shape[1] != x->shape[1])
        return lwq_errf(e, LWQ_EINVAL, "%s: w is (%" PRId64 ", %" PRId64 ") but x has %" PRId64
                        " columns", op, w->shape[0], w->shape[1], x->shape[1]);
    LWQ_TRY(check_shape2(op, "y", y, x->shape[0], w->shape[0], e));
    if (bias) {
        LWQ_TRY(check_t(be, op, "bias", bias, 1, e));
        LWQ_TRY(check_dt(op, "bias", bias, lwq_dtype_is_act, "F32/BF16/F16", e));
        LWQ_TRY(check_len(op, "bias", bias, w->shape[0], e));
    }
    if (x->data == y->data && lwq_tensor_numel(y) > 0)
        return lwq_errf(e, LWQ_EINVAL, "%s: y must not alias x", op);
    return 0;
}

int lwq_backend_gemm(const lwq_backend *be, const lwq_tensor *x, const lwq_tensor *w,
                     const lwq_tensor *bias, lwq_tensor *y, lwq_error *e)
{
    LWQ_TRY(gemm_check(be, "gemm", x, w, bias, y, e));
    if (lwq_tensor_numel(y) == 0)
        return 0;
    return be->ops->gemm(be->ctx, x, w, bias, y, e);
}

int lwq_backend_gemm_grouped(const lwq_backend *be, const lwq_gemm_group *g, int count,
                             lwq_error *e)
{
    if (count < 0 || (count > 0 && !g))
        return lwq_errf(e, LWQ_EINVAL, "gemm_grouped: %d groups", count);
    char op[48];
    for (int i = 0; i < count; i++) {
        snprintf(op, sizeof op, "gemm_grouped (group %d)", i);
        LWQ_TRY(gemm_check(be, op, g[i].x, g[i].w, g[i].bias, g[i].y, e));
    }
    if (be->ops->gemm_grouped)
        return be->ops->gemm_grouped(be->ctx, g, count, e);
    for (int i = 0; i < count; i++)
        if (lwq_tensor_numel(g[i].y) > 0)
            LWQ_TRY(be->ops->gemm(be->ctx, g[i].x, g[i].w, g[i].bias, g[i].y, e));
    return 0;
}

int lwq_backend_rmsnorm(const lwq_backend *be, const lwq_tensor *x, const lwq_tensor *w, float eps,
                        lwq_tensor *y, lwq_error *e)
{
    const char *op = "rmsnorm";
    LWQ_TRY(check_t(be, op, "x", x, 2, e));
    LWQ_TRY(check_t(be, op, "w", w, 1, e));
    LWQ_TRY(check_t(be, op, "y", y, 2, e));
    LWQ_TRY(check_dt(op, "x", x, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_dt(op, "w", w, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_dt(op, "y", y, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_len(op, "w", w, x->shape[1], e));
    LWQ_TRY(check_shape2(op, "y", y, x->shape[0], x->shape[1], e));
    if (!(eps >= 0.0f))
        return lwq_errf(e, LWQ_EINVAL, "rmsnorm: eps %g must be >= 0", (double)eps);
    if (lwq_tensor_numel(y) == 0)
        return 0;
    return be->ops->rmsnorm(be->ctx, x, w, eps, y, e);
}

int lwq_backend_rope(const lwq_backend *be, lwq_tensor *x, int64_t head_dim, const lwq_tensor *pos,
                     const lwq_tensor *inv_freq, float attn_scaling, lwq_error *e)
{
    const char *op = "rope";
    LWQ_TRY(check_t(be, op, "x", x, 2, e));
    LWQ_TRY(check_t(be, op, "pos", pos, 1, e));
    LWQ_TRY(check_t(be, op, "inv_freq", inv_freq, 1, e));
    LWQ_TRY(check_dt(op, "x", x, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_dt(op, "pos", pos, is_i32, "I32", e));
    LWQ_TRY(check_dt(op, "inv_freq", inv_freq, is_f32, "F32", e));
    if (head_dim <= 0 || head_dim % 2 || x->shape[1] % head_dim)
        return lwq_errf(e, LWQ_EINVAL, "rope: head_dim %" PRId64 " must be even and divide the %"
                        PRId64 " columns of x", head_dim, x->shape[1]);
    LWQ_TRY(check_len(op, "pos", pos, x->shape[0], e));
    LWQ_TRY(check_len(op, "inv_freq", inv_freq, head_dim / 2, e));
    if (lwq_tensor_numel(x) == 0)
        return 0;
    return be->ops->rope(be->ctx, x, head_dim, pos, inv_freq, attn_scaling, e);
}

int lwq_backend_attention(const lwq_backend *be, const lwq_attn_args *a, lwq_error *e)
{
    const char *op = "attention";
    if (!a)
        return lwq_errf(e, LWQ_EINVAL, "attention: NULL args");
    if (a->batch < 0 || a->seq < 0 || a->n_heads <= 0 || a->n_kv_heads <= 0 || a->head_dim <= 0 ||
        a->n_heads % a->n_kv_heads)
        return lwq_errf(e, LWQ_EINVAL, "attention: bad geometry batch %" PRId64 " seq %" PRId64
                        " heads %d kv_heads %d head_dim %" PRId64 " (heads must be a multiple of "
                        "kv_heads)", a->batch, a->seq, a->n_heads, a->n_kv_heads, a->head_dim);
    int64_t n = a->batch * a->seq;
    LWQ_TRY(check_t(be, op, "q", a->q, 2, e));
    LWQ_TRY(check_t(be, op, "k", a->k, 2, e));
    LWQ_TRY(check_t(be, op, "v", a->v, 2, e));
    LWQ_TRY(check_t(be, op, "out", a->out, 2, e));
    LWQ_TRY(check_dt(op, "q", a->q, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_dt(op, "out", a->out, lwq_dtype_is_act, "F32/BF16/F16", e));
    if (a->k->dtype != a->q->dtype || a->v->dtype != a->q->dtype)
        return lwq_errf(e, LWQ_EINVAL, "attention: q, k, v dtypes differ (%s, %s, %s)",
                        lwq_dtype_name(a->q->dtype), lwq_dtype_name(a->k->dtype),
                        lwq_dtype_name(a->v->dtype));
    LWQ_TRY(check_shape2(op, "q", a->q, n, a->n_heads * a->head_dim, e));
    LWQ_TRY(check_shape2(op, "k", a->k, n, a->n_kv_heads * a->head_dim, e));
    LWQ_TRY(check_shape2(op, "v", a->v, n, a->n_kv_heads * a->head_dim, e));
    LWQ_TRY(check_shape2(op, "out", a->out, n, a->n_heads * a->head_dim, e));
    if (a->key_valid) {
        LWQ_TRY(check_t(be, op, "key_valid", a->key_valid, 1, e));
        LWQ_TRY(check_dt(op, "key_valid", a->key_valid, is_u8, "U8/BOOL", e));
        LWQ_TRY(check_len(op, "key_valid", a->key_valid, n, e));
    }
    if (a->out->data == a->q->data || a->out->data == a->k->data || a->out->data == a->v->data)
        return lwq_errf(e, LWQ_EINVAL, "attention: out must not alias q, k or v");
    if (n == 0)
        return 0;
    return be->ops->attention(be->ctx, a, e);
}

static int check_same(const char *op, const char *an, const lwq_tensor *a, const char *bn,
                      const lwq_tensor *b, lwq_error *e)
{
    if (a->shape[0] != b->shape[0] || a->shape[1] != b->shape[1])
        return lwq_errf(e, LWQ_EINVAL, "%s: %s (%" PRId64 ", %" PRId64 ") and %s (%" PRId64 ", %"
                        PRId64 ") differ in shape", op, an, a->shape[0], a->shape[1], bn,
                        b->shape[0], b->shape[1]);
    return 0;
}

int lwq_backend_swiglu(const lwq_backend *be, const lwq_tensor *gate, const lwq_tensor *up,
                       lwq_tensor *out, lwq_error *e)
{
    const char *op = "swiglu";
    LWQ_TRY(check_t(be, op, "gate", gate, 2, e));
    LWQ_TRY(check_t(be, op, "up", up, 2, e));
    LWQ_TRY(check_t(be, op, "out", out, 2, e));
    LWQ_TRY(check_dt(op, "gate", gate, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_dt(op, "up", up, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_dt(op, "out", out, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_same(op, "gate", gate, "up", up, e));
    LWQ_TRY(check_same(op, "gate", gate, "out", out, e));
    if (lwq_tensor_numel(out) == 0)
        return 0;
    return be->ops->swiglu(be->ctx, gate, up, out, e);
}

int lwq_backend_add(const lwq_backend *be, lwq_tensor *acc, const lwq_tensor *x, lwq_error *e)
{
    const char *op = "add";
    LWQ_TRY(check_t(be, op, "acc", acc, 2, e));
    LWQ_TRY(check_t(be, op, "x", x, 2, e));
    LWQ_TRY(check_dt(op, "acc", acc, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_dt(op, "x", x, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_same(op, "acc", acc, "x", x, e));
    if (lwq_tensor_numel(acc) == 0)
        return 0;
    return be->ops->add(be->ctx, acc, x, e);
}

int lwq_backend_moe_route(const lwq_backend *be, const lwq_tensor *logits, int k,
                          lwq_route_mode mode, lwq_dtype weight_dtype, lwq_tensor *idx,
                          lwq_tensor *wts, lwq_error *e)
{
    const char *op = "moe_route";
    LWQ_TRY(check_t(be, op, "logits", logits, 2, e));
    LWQ_TRY(check_t(be, op, "idx", idx, 2, e));
    LWQ_TRY(check_t(be, op, "wts", wts, 2, e));
    LWQ_TRY(check_dt(op, "logits", logits, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_dt(op, "idx", idx, is_i32, "I32", e));
    LWQ_TRY(check_dt(op, "wts", wts, is_f32, "F32", e));
    if (k < 1 || k > logits->shape[1] || k > 64)
        return lwq_errf(e, LWQ_EINVAL, "moe_route: k = %d must be in [1, min(experts %" PRId64
                        ", 64)]", k, logits->shape[1]);
    if (mode != LWQ_ROUTE_SOFTMAX_TOPK && mode != LWQ_ROUTE_SOFTMAX_TOPK_NORM &&
        mode != LWQ_ROUTE_TOPK_SOFTMAX)
        return lwq_errf(e, LWQ_EINVAL, "moe_route: unknown mode %d", (int)mode);
    if (!lwq_dtype_is_act(weight_dtype))
        return lwq_errf(e, LWQ_EINVAL, "moe_route: weight dtype %s is not F32/BF16/F16",
                        lwq_dtype_name(weight_dtype));
    LWQ_TRY(check_shape2(op, "idx", idx, logits->shape[0], k, e));
    LWQ_TRY(check_shape2(op, "wts", wts, logits->shape[0], k, e));
    if (logits->shape[0] == 0)
        return 0;
    return be->ops->moe_route(be->ctx, logits, k, mode, weight_dtype, idx, wts, e);
}

int lwq_backend_gather_rows(const lwq_backend *be, const lwq_tensor *src, const lwq_tensor *rows,
                            lwq_tensor *dst, lwq_error *e)
{
    const char *op = "gather_rows";
    LWQ_TRY(check_t(be, op, "src", src, 2, e));
    LWQ_TRY(check_t(be, op, "rows", rows, 1, e));
    LWQ_TRY(check_t(be, op, "dst", dst, 2, e));
    LWQ_TRY(check_dt(op, "src", src, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_dt(op, "rows", rows, is_i32, "I32", e));
    LWQ_TRY(check_dt(op, "dst", dst, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_shape2(op, "dst", dst, rows->shape[0], src->shape[1], e));
    if (rows->shape[0] == 0)
        return 0;
    if (rows->device == LWQ_DEV_CPU) {
        /* a bad index would read outside src: check when the indexes are readable here; device
         * backends clamp-check in the kernel and report through their error path */
        const int32_t *r = (const int32_t *)rows->data;
        for (int64_t i = 0; i < rows->shape[0]; i++)
            if (r[i] < 0 || r[i] >= src->shape[0])
                return lwq_errf(e, LWQ_EINVAL, "gather_rows: rows[%" PRId64 "] = %d is outside "
                                "[0, %" PRId64 ")", i, r[i], src->shape[0]);
    }
    return be->ops->gather_rows(be->ctx, src, rows, dst, e);
}

int lwq_backend_moe_combine(const lwq_backend *be, const lwq_tensor *y,
                            const lwq_tensor *slot_rows, const lwq_tensor *wts, lwq_tensor *out,
                            lwq_error *e)
{
    const char *op = "moe_combine";
    LWQ_TRY(check_t(be, op, "y", y, 2, e));
    LWQ_TRY(check_t(be, op, "slot_rows", slot_rows, 2, e));
    LWQ_TRY(check_t(be, op, "wts", wts, 2, e));
    LWQ_TRY(check_t(be, op, "out", out, 2, e));
    LWQ_TRY(check_dt(op, "y", y, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_dt(op, "slot_rows", slot_rows, is_i32, "I32", e));
    LWQ_TRY(check_dt(op, "wts", wts, is_f32, "F32", e));
    LWQ_TRY(check_dt(op, "out", out, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_same(op, "slot_rows", slot_rows, "wts", wts, e));
    LWQ_TRY(check_shape2(op, "out", out, slot_rows->shape[0], y->shape[1], e));
    if (slot_rows->device == LWQ_DEV_CPU) {
        const int32_t *r = (const int32_t *)slot_rows->data;
        int64_t n = lwq_tensor_numel(slot_rows);
        for (int64_t i = 0; i < n; i++)
            if (r[i] < -1 || r[i] >= y->shape[0])
                return lwq_errf(e, LWQ_EINVAL, "moe_combine: slot_rows[%" PRId64 "] = %d is "
                                "outside [-1, %" PRId64 ")", i, r[i], y->shape[0]);
    }
    if (lwq_tensor_numel(out) == 0)
        return 0;
    return be->ops->moe_combine(be->ctx, y, slot_rows, wts, out, e);
}

int lwq_backend_copy(const lwq_backend *be, const lwq_tensor *src, lwq_tensor *dst, lwq_error *e)
{
    const char *op = "copy";
    if (!src || !dst)
        return lwq_errf(e, LWQ_EINVAL, "copy: %s is NULL", src ? "dst" : "src");
    if (src->ndim < 1 || src->ndim > LWQ_TENSOR_MAX_DIMS || dst->ndim != src->ndim)
        return lwq_errf(e, LWQ_EINVAL, "copy: src has %d dims and dst %d, expected the same "
                        "count in 1..%d", src->ndim, dst->ndim, LWQ_TENSOR_MAX_DIMS);
    for (int i = 0; i < src->ndim; i++) {
        if (src->shape[i] != dst->shape[i] || src->shape[i] < 0)
            return lwq_errf(e, LWQ_EINVAL, "copy: dim %d is %" PRId64 " in src and %" PRId64
                            " in dst", i, src->shape[i], dst->shape[i]);
        if (src->stride[i] < 0 || dst->stride[i] < 0 || (dst->shape[i] > 1 && dst->stride[i] == 0))
            return lwq_errf(e, LWQ_EINVAL, "copy: dim %d has stride %" PRId64 " in src and %"
                            PRId64 " in dst (src >= 0, dst > 0)", i, src->stride[i],
                            dst->stride[i]);
    }
    LWQ_TRY(check_dt(op, "src", src, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_dt(op, "dst", dst, lwq_dtype_is_act, "F32/BF16/F16", e));
    if (src->device != be->ops->device || dst->device != be->ops->device)
        return lwq_errf(e, LWQ_EINVAL, "copy: tensors live on devices %d and %d, backend %s "
                        "needs %d", (int)src->device, (int)dst->device, be->ops->name,
                        (int)be->ops->device);
    if (lwq_tensor_numel(dst) == 0)
        return 0;
    if (!src->data || !dst->data)
        return lwq_errf(e, LWQ_EINVAL, "copy: %s has no data", src->data ? "dst" : "src");
    return be->ops->copy(be->ctx, src, dst, e);
}

int lwq_backend_amax(const lwq_backend *be, const lwq_tensor *x, const lwq_tensor *row_valid,
                     float *out, lwq_error *e)
{
    const char *op = "amax";
    *out = 0.0f;
    LWQ_TRY(check_t(be, op, "x", x, 2, e));
    LWQ_TRY(check_dt(op, "x", x, lwq_dtype_is_act, "F32/BF16/F16", e));
    if (row_valid) {
        LWQ_TRY(check_t(be, op, "row_valid", row_valid, 1, e));
        LWQ_TRY(check_dt(op, "row_valid", row_valid, is_u8, "U8/BOOL", e));
        LWQ_TRY(check_len(op, "row_valid", row_valid, x->shape[0], e));
    }
    if (lwq_tensor_numel(x) == 0)
        return 0;
    return be->ops->amax(be->ctx, x, row_valid, out, e);
}

uint64_t lwq_backend_mem_peak(const lwq_backend *be)
{
    return be && be->ops && be->ops->mem_peak ? be->ops->mem_peak(be->ctx) : 0;
}

int lwq_backend_host_register(const lwq_backend *be, void *ptr, size_t bytes, lwq_error *e)
{
    if (!be->ops->host_register)
        return 1;
    if (!ptr || !bytes)
        return lwq_errf(e, LWQ_EINVAL, "host_register: empty range");
    return be->ops->host_register(be->ctx, ptr, bytes, e);
}

void lwq_backend_host_unregister(const lwq_backend *be, void *ptr)
{
    if (be->ops->host_unregister && ptr)
        be->ops->host_unregister(be->ctx, ptr);
}

int lwq_backend_pci_bus_id(const lwq_backend *be, char *out, size_t cap)
{
    return be->ops->pci_bus_id && cap > 0 ? be->ops->pci_bus_id(be->ctx, out, cap) : -1;
}

/* a float tensor of `ndim` dims and exactly `n` elements, or NULL where `optional` */
static int check_mamba2_w(const lwq_backend *be, const char *arg, const lwq_tensor *t, int ndim, int64_t n,
                          lwq_error *e)
{
    LWQ_TRY(check_t(be, "mamba2", arg, t, ndim, e));
    LWQ_TRY(check_dt("mamba2", arg, t, lwq_dtype_is_act, "F32/BF16/F16", e));
    if (lwq_tensor_numel(t) != n)
        return lwq_errf(e, LWQ_EINVAL, "mamba2: %s has %" PRId64 " elements, expected %" PRId64, arg,
                        lwq_tensor_numel(t), n);
    return 0;
}

int lwq_backend_mamba2(const lwq_backend *be, const lwq_mamba2_args *a, lwq_error *e)
{
    const char *op = "mamba2";
    if (!a)
        return lwq_errf(e, LWQ_EINVAL, "mamba2: NULL args");
    /* every size below stays far from int64 overflow: each factor is bounded first */
    const int64_t lim = (int64_t)1 << 24;
    if (a->batch < 0 || a->seq < 0 || a->batch > lim || a->seq > lim || a->heads <= 0 || a->heads > lim ||
        a->head_dim <= 0 || a->head_dim > lim || a->state <= 0 || a->state > lim || a->groups <= 0 ||
        a->heads % a->groups || a->kernel <= 0 || a->kernel > 64 || !(a->eps > 0.0f))
        return lwq_errf(e, LWQ_EINVAL, "mamba2: bad geometry batch %" PRId64 " seq %" PRId64 " heads %" PRId64
                        " head_dim %" PRId64 " state %" PRId64 " groups %" PRId64 " kernel %" PRId64 " eps %g (heads "
                        "a multiple of groups, kernel 1..64, eps > 0)", a->batch, a->seq, a->heads, a->head_dim,
                        a->state, a->groups, a->kernel, (double)a->eps);
    const int64_t n = a->batch * a->seq, I = a->heads * a->head_dim, C = I + 2 * a->groups * a->state,
                  W = I + C + a->heads;
    if (I > ((int64_t)1 << 31) || C > ((int64_t)1 << 31) || (n > 0 && W > INT64_MAX / 4 / n))
        return lwq_errf(e, LWQ_EINVAL, "mamba2: %" PRId64 " tokens of width %" PRId64 " are too large", n, W);
    LWQ_TRY(check_t(be, op, "proj", a->proj, 2, e));
    LWQ_TRY(check_dt(op, "proj", a->proj, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_shape2(op, "proj", a->proj, n, W, e));
    LWQ_TRY(check_mamba2_w(be, "conv_w", a->conv_w, 3, C * a->kernel, e));
    if (a->conv_w->shape[0] != C || a->conv_w->shape[1] != 1)
        return lwq_errf(e, LWQ_EINVAL, "mamba2: conv_w is [%" PRId64 ", %" PRId64 ", %" PRId64 "], expected [%" PRId64
                        ", 1, %" PRId64 "]", a->conv_w->shape[0], a->conv_w->shape[1], a->conv_w->shape[2], C,
                        a->kernel);
    if (a->conv_b)
        LWQ_TRY(check_mamba2_w(be, "conv_b", a->conv_b, 1, C, e));
    LWQ_TRY(check_mamba2_w(be, "a_log", a->a_log, 1, a->heads, e));
    LWQ_TRY(check_mamba2_w(be, "dt_bias", a->dt_bias, 1, a->heads, e));
    LWQ_TRY(check_mamba2_w(be, "d", a->d, 1, a->heads, e));
    LWQ_TRY(check_mamba2_w(be, "norm_w", a->norm_w, 1, I, e));
    LWQ_TRY(check_t(be, op, "valid", a->valid, 1, e));
    LWQ_TRY(check_dt(op, "valid", a->valid, is_u8, "U8/BOOL", e));
    LWQ_TRY(check_len(op, "valid", a->valid, n, e));
    LWQ_TRY(check_t(be, op, "out", a->out, 2, e));
    LWQ_TRY(check_dt(op, "out", a->out, lwq_dtype_is_act, "F32/BF16/F16", e));
    LWQ_TRY(check_shape2(op, "out", a->out, n, I, e));
    if (a->xbc_in) {
        LWQ_TRY(check_t(be, op, "xbc_in", a->xbc_in, 2, e));
        LWQ_TRY(check_dt(op, "xbc_in", a->xbc_in, lwq_dtype_is_act, "F32/BF16/F16", e));
        LWQ_TRY(check_shape2(op, "xbc_in", a->xbc_in, n, C, e));
    }
    if (a->out->data == a->proj->data || (a->xbc_in && a->xbc_in->data == a->proj->data))
        return lwq_errf(e, LWQ_EINVAL, "mamba2: an output aliases proj");
    if (!be->ops->mamba2)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "mamba2: the %s backend has no Mamba2 op", be->ops->name);
    if (n == 0)
        return 0;
    return be->ops->mamba2(be->ctx, a, e);
}
