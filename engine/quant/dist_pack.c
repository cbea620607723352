/* engine/quant/dist_pack.c — a rank's quantized tensors and its part of the layer report as one
 * blob, and back.  Every rank runs the same binary (checked at start), so the layout is plain
 * native structs; a blob is still checked against its own size before anything is read. */
#include "engine/quant/dist.h"

#include <stdlib.h>
#include <string.h>

#define MAGIC 0x4c575144u /* "LWQD" */

typedef struct blob_head {
    uint32_t magic, ntensors;
    int32_t quantized, zero_weights, gptq_fallback, hessian_fallback, gptq_n;
} blob_head;

typedef struct tensor_head {
    uint32_t name_len;
    int32_t dtype, ndim, pad;
    int64_t shape[LWQ_ST_MAX_DIMS];
    uint64_t nbytes;
    int64_t row0, rows_all; /* a piece: lwq_htensor */
} tensor_head;

struct lwq_dist_joined {
    int t;          /* the whole tensor in out */
    int64_t filled; /* rows [0, filled) are there */
};

int lwq_dist_pack(const lwq_tlist *out, int from, const lwq_qlayer_report *rep, void **blob, uint64_t *bytes,
                  lwq_error *e)
{
    uint64_t n = sizeof(blob_head) + (uint64_t)rep->gptq_n * sizeof *rep->gptq;
    uint32_t nt = 0;
    for (int i = from; i < out->n; i++) {
        const lwq_htensor *t = &out->v[i];
        if (t->spilled || (!t->data && t->nbytes))
            return lwq_errf(e, LWQ_ESTATE, "%s: a spilled tensor cannot be sent to rank 0", t->name);
        if (!t->owned)
            continue;
        n += sizeof(tensor_head) + strlen(t->name) + t->nbytes;
        nt++;
    }
    unsigned char *p = malloc(n ? n : 1);
    if (!p)
        return lwq_errf(e, LWQ_ENOMEM, "cannot allocate %llu bytes to send the quantized tensors",
                        (unsigned long long)n);
    blob_head h = {MAGIC, nt, rep->quantized, rep->zero_weights, rep->gptq_fallback, rep->hessian_fallback,
                   rep->gptq_n};
    unsigned char *q = p;
    memcpy(q, &h, sizeof h);
    q += sizeof h;
    if (rep->gptq_n) {
        memcpy(q, rep->gptq, (size_t)rep->gptq_n * sizeof *rep->gptq);
        q += (size_t)rep->gptq_n * sizeof *rep->gptq;
    }
    for (int i = from; i < out->n; i++) {
        const lwq_htensor *t = &out->v[i];
        if (!t->owned)
            continue;
        tensor_head th;
        memset(&th, 0, sizeof th);
        th.name_len = (uint32_t)strlen(t->name);
        th.dtype = (int32_t)t->dtype;
        th.ndim = t->ndim;
        memcpy(th.shape, t->shape, sizeof th.shape);
        th.nbytes = t->nbytes;
        th.row0 = t->row0;
        th.rows_all = t->rows_all;
        memcpy(q, &th, sizeof th);
        q += sizeof th;
        memcpy(q, t->name, th.name_len);
        q += th.name_len;
        if (t->nbytes)
            memcpy(q, t->data, t->nbytes);
        q += t->nbytes;
    }
    *blob = p;
    *bytes = n;
    return 0;
}

static int gptq_reserve(lwq_qlayer_report *rep, int more)
{
    if (rep->gptq_n + more <= rep->gptq_cap)
        return 0;
    int cap = rep->gptq_n + more;
    lwq_qlayer_gptq_err *g = realloc(rep->gptq, (size_t)cap * sizeof *g);
    if (!g)
        return -1;
    rep->gptq = g;
    rep->gptq_cap = cap;
    return 0;
}

static int join_push(lwq_dist_join *j, int t, int64_t filled, lwq_error *e)
{
    if (j->n == j->cap) {
        int cap = j->cap ? 2 * j->cap : 16;
        struct lwq_dist_joined *v = realloc(j->v, (size_t)cap * sizeof *v);
        if (!v)
            return lwq_errf(e, LWQ_ENOMEM, "out of memory joining the ranks' pieces");
        j->v = v;
        j->cap = cap;
    }
    j->v[j->n++] = (struct lwq_dist_joined){t, filled};
    return 0;
}

/* The bytes of one row of a tensor of this shape (shape[1..ndim)), 0 on overflow. */
static uint64_t row_bytes(lwq_dtype dt, int ndim, const int64_t *shape)
{
    uint64_t b = lwq_dtype_size(dt);
    for (int k = 1; k < ndim; k++) {
        if (shape[k] < 0 || (shape[k] && b > UINT64_MAX / (uint64_t)shape[k]))
            return 0;
        b *= (uint64_t)shape[k];
    }
    return b;
}

int lwq_dist_join_own(lwq_tlist *out, lwq_dist_join *j, lwq_error *e)
{
    for (int t = 0; t < out->n; t++) {
        lwq_htensor *h = &out->v[t];
        if (h->rows_all <= 0)
            continue;
        uint64_t rb = row_bytes(h->dtype, h->ndim, h->shape);
        if (h->row0 != 0 || !h->owned || h->ndim < 1 || rb == 0 || (uint64_t)h->rows_all > UINT64_MAX / rb)
            return lwq_errf(e, LWQ_ESTATE, "%s: a piece of rows [%lld, %lld) cannot be joined here", h->name,
                            (long long)h->row0, (long long)(h->row0 + h->shape[0]));
        void *d = realloc(h->data, (size_t)((uint64_t)h->rows_all * rb)); /* the piece is its prefix */
        if (!d)
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory joining the ranks' pieces", h->name);
        int64_t filled = h->shape[0];
        h->data = d;
        h->shape[0] = h->rows_all;
        h->nbytes = (uint64_t)h->rows_all * rb;
        h->row0 = h->rows_all = 0;
        LWQ_TRY(join_push(j, t, filled, e));
    }
    return 0;
}

/* A received piece: the first (row 0) makes the whole tensor, the others follow in row order. */
static int join_piece(lwq_tlist *out, lwq_dist_join *j, const char *name, const tensor_head *th, const void *data,
                      int rank, lwq_error *e)
{
    uint64_t rb = row_bytes((lwq_dtype)th->dtype, th->ndim, th->shape);
    if (th->ndim < 1 || rb == 0 || th->shape[0] < 1 || th->row0 < 0 || th->row0 > th->rows_all - th->shape[0] ||
        (uint64_t)th->rows_all > UINT64_MAX / rb || th->nbytes != (uint64_t)th->shape[0] * rb)
        return lwq_errf(e, LWQ_EFORMAT, "rank %d: %s is a malformed piece", rank, name);
    if (th->row0 == 0) {
        uint64_t all = (uint64_t)th->rows_all * rb;
        void *d = malloc(all ? (size_t)all : 1);
        if (!d)
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", name);
        memcpy(d, data, th->nbytes);
        int64_t shape[LWQ_ST_MAX_DIMS];
        memcpy(shape, th->shape, sizeof shape);
        shape[0] = th->rows_all;
        LWQ_TRY(lwq_tlist_add(out, name, (lwq_dtype)th->dtype, th->ndim, shape, d, 1, e));
        return join_push(j, out->n - 1, th->shape[0], e);
    }
    for (int k = j->n - 1; k >= 0; k--) {
        lwq_htensor *h = &out->v[j->v[k].t];
        if (strcmp(h->name, name))
            continue;
        if ((int32_t)h->dtype != th->dtype || h->ndim != th->ndim || h->shape[0] != th->rows_all ||
            memcmp(h->shape + 1, th->shape + 1, (size_t)(th->ndim - 1) * sizeof *th->shape) ||
            j->v[k].filled != th->row0)
            return lwq_errf(e, LWQ_EFORMAT, "rank %d: %s rows [%lld, %lld) do not follow the %lld rows before them",
                            rank, name, (long long)th->row0, (long long)(th->row0 + th->shape[0]),
                            (long long)j->v[k].filled);
        memcpy((char *)h->data + (uint64_t)th->row0 * rb, data, th->nbytes);
        j->v[k].filled += th->shape[0];
        return 0;
    }
    return lwq_errf(e, LWQ_EFORMAT, "rank %d: %s rows [%lld, %lld) came before its row 0", rank, name,
                    (long long)th->row0, (long long)(th->row0 + th->shape[0]));
}

int lwq_dist_join_end(lwq_dist_join *j, const lwq_tlist *out, int rc, lwq_error *e)
{
    for (int k = 0; rc == 0 && k < j->n; k++) {
        const lwq_htensor *h = &out->v[j->v[k].t];
        if (j->v[k].filled != h->shape[0])
            rc = lwq_errf(e, LWQ_ESTATE, "%s: the ranks sent rows [0, %lld) of %lld", h->name,
                          (long long)j->v[k].filled, (long long)h->shape[0]);
    }
    free(j->v);
    memset(j, 0, sizeof *j);
    return rc;
}

int lwq_dist_unpack(const void *blob, uint64_t bytes, int rank, lwq_tlist *out, lwq_qlayer_report *rep,
                    lwq_dist_join *j, lwq_error *e)
{
    const unsigned char *p = blob, *end = p + bytes;
    blob_head h;
    if (bytes < sizeof h)
        return lwq_errf(e, LWQ_EFORMAT, "rank %d sent a %llu-byte blob of tensors", rank, (unsigned long long)bytes);
    memcpy(&h, p, sizeof h);
    p += sizeof h;
    if (h.magic != MAGIC || h.gptq_n < 0 || (uint64_t)h.gptq_n > (uint64_t)(end - p) / sizeof *rep->gptq)
        return lwq_errf(e, LWQ_EFORMAT, "rank %d sent a malformed blob of tensors", rank);
    if (h.gptq_n && gptq_reserve(rep, h.gptq_n) < 0)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    if (h.gptq_n) /* rep->gptq may be NULL when there is nothing to add */
        memcpy(rep->gptq + rep->gptq_n, p, (size_t)h.gptq_n * sizeof *rep->gptq);
    rep->gptq_n += h.gptq_n;
    p += (size_t)h.gptq_n * sizeof *rep->gptq;
    rep->quantized += h.quantized;
    rep->zero_weights += h.zero_weights;
    rep->gptq_fallback += h.gptq_fallback;
    rep->hessian_fallback += h.hessian_fallback;
    for (uint32_t k = 0; k < h.ntensors; k++) {
        tensor_head th;
        if ((uint64_t)(end - p) < sizeof th)
            return lwq_errf(e, LWQ_EFORMAT, "rank %d sent a truncated blob (tensor %u)", rank, k);
        memcpy(&th, p, sizeof th);
        p += sizeof th;
        if (th.name_len == 0 || th.name_len > 4096 || th.ndim < 0 || th.ndim > LWQ_ST_MAX_DIMS ||
            (uint64_t)(end - p) < th.name_len || (uint64_t)(end - p) - th.name_len < th.nbytes)
            return lwq_errf(e, LWQ_EFORMAT, "rank %d sent a truncated blob (tensor %u)", rank, k);
        char name[4097];
        memcpy(name, p, th.name_len);
        name[th.name_len] = 0;
        p += th.name_len;
        if (th.rows_all > 0) {
            LWQ_TRY(join_piece(out, j, name, &th, p, rank, e));
            p += th.nbytes;
            continue;
        }
        void *d = malloc(th.nbytes ? th.nbytes : 1);
        if (!d)
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", name);
        memcpy(d, p, th.nbytes);
        p += th.nbytes;
        int rc = lwq_tlist_add(out, name, (lwq_dtype)th.dtype, th.ndim, th.shape, d, 1, e);
        if (rc < 0)
            return rc;
        if (out->v[out->n - 1].nbytes != th.nbytes)
            return lwq_errf(e, LWQ_EFORMAT, "rank %d: %s has %llu bytes for its shape", rank, name,
                            (unsigned long long)th.nbytes);
    }
    return 0;
}

static int lin_index(const lwq_arch_layer *p, const char *name)
{
    for (int i = 0; i < p->nlinears; i++)
        if (!strcmp(p->linears[i].name, name))
            return i;
    return p->nlinears;
}

static int by_linear(const void *a, const void *b, void *plan)
{
    const lwq_qlayer_gptq_err *x = a, *y = b;
    return lin_index(plan, x->name) - lin_index(plan, y->name);
}

void lwq_dist_sort_gptq(const lwq_arch_layer *p, lwq_qlayer_report *rep)
{
    if (rep->gptq_n > 1) /* rep->gptq is NULL when there is none */
        qsort_r(rep->gptq, (size_t)rep->gptq_n, sizeof *rep->gptq, by_linear, (void *)p);
}
