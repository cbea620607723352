/* engine/eval/emul/eval_memo.c — record / replay of GEMM and attention results (eval_memo.h). */
#include "engine/eval/emul/eval_memo.h"

#include <stdlib.h>
#include <string.h>

enum { GEMM = 0, ATTN = 1 };

void lwq_memo_init(lwq_memo *m) { memset(m, 0, sizeof *m); }

void lwq_memo_free(lwq_memo *m)
{
    for (int i = 0; i < m->cap; i++) {
        free(m->calls[i].in);
        free(m->calls[i].out);
    }
    free(m->calls);
    free(m->idx);
    free(m->cnt);
    memset(m, 0, sizeof *m);
}

void lwq_memo_record(lwq_memo *m)
{
    m->mode = LWQ_MEMO_RECORD;
    m->n = 0;
    m->indexed = 0;
}

void lwq_memo_off(lwq_memo *m) { m->mode = LWQ_MEMO_OFF; }

static int key_cmp(const lwq_memo *m, int a, int b)
{
    const lwq_memo_call *x = &m->calls[a], *y = &m->calls[b];
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    if (x->w != y->w)
        return (uintptr_t)x->w < (uintptr_t)y->w ? -1 : 1;
    return a < b ? -1 : a > b;
}

void lwq_memo_replay(lwq_memo *m)
{
    m->mode = LWQ_MEMO_REPLAY;
    if (!m->indexed) {
        /* insertion sort by (kind, weight, call order): a layer has a few thousand calls at most,
         * and they arrive nearly sorted per weight */
        for (int i = 0; i < m->n; i++) {
            int v = i, j = i;
            while (j > 0 && key_cmp(m, m->idx[j - 1], v) > 0) {
                m->idx[j] = m->idx[j - 1];
                j--;
            }
            m->idx[j] = v;
        }
        m->indexed = 1;
    }
    memset(m->cnt, 0, (size_t)m->n * sizeof *m->cnt);
}

/* The next recorded call of this kind and weight in this replay, or NULL. */
static lwq_memo_call *next_match(lwq_memo *m, int kind, const void *w)
{
    int lo = 0, hi = m->n; /* first idx position with key >= (kind, w) */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        const lwq_memo_call *c = &m->calls[m->idx[mid]];
        int less = c->kind < kind || (c->kind == kind && (uintptr_t)c->w < (uintptr_t)w);
        if (less)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == m->n || m->calls[m->idx[lo]].kind != kind || m->calls[m->idx[lo]].w != w)
        return NULL;
    int k = m->cnt[lo]++;
    int p = lo + k;
    if (p >= m->n || m->calls[m->idx[p]].kind != kind || m->calls[m->idx[p]].w != w)
        return NULL;
    return &m->calls[m->idx[p]];
}

static size_t tbytes(const lwq_tensor *t) { return (size_t)lwq_tensor_numel(t) * lwq_dtype_size(t->dtype); }

static void gemm_geo(const lwq_tensor *x, const lwq_tensor *w, const lwq_tensor *bias, const lwq_tensor *y,
                     int64_t *g)
{
    memset(g, 0, 8 * sizeof *g);
    g[0] = x->dtype;
    g[1] = x->shape[0];
    g[2] = x->shape[1];
    g[3] = w->dtype;
    g[4] = w->shape[0];
    g[5] = y->dtype;
    g[6] = bias ? (int64_t)bias->dtype : -1;
    g[7] = lwq_tensor_is_contiguous(x) && lwq_tensor_is_contiguous(y);
}

static void attn_geo(const lwq_attn_args *a, int64_t *g)
{
    g[0] = a->q->dtype;
    g[1] = a->q->shape[0];
    g[2] = a->q->shape[1];
    g[3] = a->k->shape[1];
    g[4] = a->batch;
    g[5] = a->seq;
    g[6] = (int64_t)a->n_heads << 32 | (int64_t)(uint32_t)a->n_kv_heads;
    g[7] = a->head_dim << 1 | (a->key_valid != NULL);
}

int lwq_memo_gemm_lookup(lwq_memo *m, const lwq_tensor *x, const lwq_tensor *w, const lwq_tensor *bias, lwq_tensor *y)
{
    if (m->mode != LWQ_MEMO_REPLAY)
        return 0;
    lwq_memo_call *c = next_match(m, GEMM, w->data);
    int64_t g[8];
    gemm_geo(x, w, bias, y, g);
    if (!c || !g[7] || c->bias != (bias ? bias->data : NULL) || memcmp(c->geo, g, sizeof g) ||
        c->in_bytes != tbytes(x) || c->out_bytes != tbytes(y) || memcmp(c->in, x->data, c->in_bytes)) {
        m->misses++;
        return 0;
    }
    memcpy(y->data, c->out, c->out_bytes);
    m->hits++;
    m->bytes_saved += c->out_bytes;
    return 1;
}

/* A new call slot with room for `in` and `out` bytes. */
static lwq_memo_call *slot(lwq_memo *m, size_t in, size_t out, lwq_error *e)
{
    if (m->n == m->cap) {
        int nc = m->cap ? m->cap * 2 : 64;
        lwq_memo_call *c = realloc(m->calls, (size_t)nc * sizeof *c);
        int *idx = c ? realloc(m->idx, (size_t)nc * sizeof *idx) : NULL;
        int *cnt = idx ? realloc(m->cnt, (size_t)nc * sizeof *cnt) : NULL;
        if (c)
            m->calls = c;
        if (idx)
            m->idx = idx;
        if (cnt)
            m->cnt = cnt;
        if (!cnt) {
            lwq_errf(e, LWQ_ENOMEM, "memo: out of memory for %d calls", nc);
            return NULL;
        }
        memset(m->calls + m->cap, 0, (size_t)(nc - m->cap) * sizeof *m->calls);
        m->cap = nc;
    }
    lwq_memo_call *c = &m->calls[m->n];
    if (c->in_cap < in) {
        free(c->in);
        c->in_cap = 0;
        if (!(c->in = malloc(in ? in : 1))) {
            lwq_errf(e, LWQ_ENOMEM, "memo: out of memory for %zu bytes", in);
            return NULL;
        }
        c->in_cap = in;
    }
    if (c->out_cap < out) {
        free(c->out);
        c->out_cap = 0;
        if (!(c->out = malloc(out ? out : 1))) {
            lwq_errf(e, LWQ_ENOMEM, "memo: out of memory for %zu bytes", out);
            return NULL;
        }
        c->out_cap = out;
    }
    c->in_bytes = in;
    c->out_bytes = out;
    m->n++;
    m->indexed = 0;
    return c;
}

int lwq_memo_gemm_store(lwq_memo *m, const lwq_tensor *x, const lwq_tensor *w, const lwq_tensor *bias,
                        const lwq_tensor *y, lwq_error *e)
{
    if (m->mode != LWQ_MEMO_RECORD)
        return 0;
    int64_t g[8];
    gemm_geo(x, w, bias, y, g);
    if (!g[7])
        return 0; /* strided views are not kept: their bytes are not one block */
    lwq_memo_call *c = slot(m, tbytes(x), tbytes(y), e);
    if (!c)
        return LWQ_ENOMEM;
    c->kind = GEMM;
    c->w = w->data;
    c->bias = bias ? bias->data : NULL;
    memcpy(c->geo, g, sizeof g);
    memcpy(c->in, x->data, c->in_bytes);
    memcpy(c->out, y->data, c->out_bytes);
    return 0;
}

/* q | k | v | mask as one byte string in dst (NULL: only the length). */
static size_t attn_input(const lwq_attn_args *a, unsigned char *dst, const unsigned char *cmp, int *same)
{
    const lwq_tensor *t[4] = {a->q, a->k, a->v, a->key_valid};
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        if (!t[i])
            continue;
        size_t b = tbytes(t[i]);
        if (dst)
            memcpy(dst + off, t[i]->data, b);
        if (cmp && *same)
            *same = !memcmp(cmp + off, t[i]->data, b);
        off += b;
    }
    return off;
}

static int attn_contiguous(const lwq_attn_args *a)
{
    return lwq_tensor_is_contiguous(a->q) && lwq_tensor_is_contiguous(a->k) && lwq_tensor_is_contiguous(a->v) &&
           lwq_tensor_is_contiguous(a->out) && (!a->key_valid || lwq_tensor_is_contiguous(a->key_valid));
}

int lwq_memo_attn_lookup(lwq_memo *m, const lwq_attn_args *a, int kv_fp8, float k_scale, float v_scale)
{
    if (m->mode != LWQ_MEMO_REPLAY)
        return 0;
    lwq_memo_call *c = next_match(m, ATTN, NULL);
    int64_t g[8];
    attn_geo(a, g);
    int same = c && attn_contiguous(a) && !memcmp(c->geo, g, sizeof g) && c->scale == a->scale &&
               c->kv_fp8 == kv_fp8 && (!kv_fp8 || (c->k_scale == k_scale && c->v_scale == v_scale)) &&
               c->in_bytes == attn_input(a, NULL, NULL, NULL) && c->out_bytes == tbytes(a->out);
    if (same)
        attn_input(a, NULL, c->in, &same);
    if (!same) {
        m->misses++;
        return 0;
    }
    memcpy(a->out->data, c->out, c->out_bytes);
    m->hits++;
    m->bytes_saved += c->out_bytes;
    return 1;
}

int lwq_memo_attn_store(lwq_memo *m, const lwq_attn_args *a, int kv_fp8, float k_scale, float v_scale,
                        lwq_error *e)
{
    if (m->mode != LWQ_MEMO_RECORD || !attn_contiguous(a))
        return 0;
    lwq_memo_call *c = slot(m, attn_input(a, NULL, NULL, NULL), tbytes(a->out), e);
    if (!c)
        return LWQ_ENOMEM;
    c->kind = ATTN;
    c->w = c->bias = NULL;
    attn_geo(a, c->geo);
    c->scale = a->scale;
    c->kv_fp8 = kv_fp8;
    c->k_scale = k_scale;
    c->v_scale = v_scale;
    attn_input(a, c->in, NULL, NULL);
    memcpy(c->out, a->out->data, c->out_bytes);
    return 0;
}
