/* engine/quant/dist_pack.c — a rank's quantized tensors and its part of the layer report as one
 * blob, and back.  Every rank runs the same binary (checked at start), so the layout is plain
 * native structs; a blob is still checked against its own size before anything is read. */
#include "engine/quant/dist.h"

#include <stdlib.h>
#include <string.h>

#define MAGIC 0x4c575144u /* "LWQD" */

typedef struct blob_head {
    uint32_t magic, ntensors;
    int32_t quantized, zero_weights, gptq_fallback, gptq_n;
} blob_head;

typedef struct tensor_head {
    uint32_t name_len;
    int32_t dtype, ndim, pad;
    int64_t shape[LWQ_ST_MAX_DIMS];
    uint64_t nbytes;
} tensor_head;

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
    blob_head h = {MAGIC, nt, rep->quantized, rep->zero_weights, rep->gptq_fallback, rep->gptq_n};
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

int lwq_dist_unpack(const void *blob, uint64_t bytes, int rank, lwq_tlist *out, lwq_qlayer_report *rep, lwq_error *e)
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
    memcpy(rep->gptq + rep->gptq_n, p, (size_t)h.gptq_n * sizeof *rep->gptq);
    rep->gptq_n += h.gptq_n;
    p += (size_t)h.gptq_n * sizeof *rep->gptq;
    rep->quantized += h.quantized;
    rep->zero_weights += h.zero_weights;
    rep->gptq_fallback += h.gptq_fallback;
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
    qsort_r(rep->gptq, (size_t)rep->gptq_n, sizeof *rep->gptq, by_linear, (void *)p);
}
