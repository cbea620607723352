#include "engine/source/units.h"

#include <stdlib.h>
#include <string.h>

#include "engine/source/layersrc.h"
#include "engine/source/srcdeq.h"

int lwq_units_expert_of(const char *name, int n_experts)
{
    const char *p = strstr(name, ".experts.");
    if (!p || n_experts <= 0)
        return -1;
    p += strlen(".experts.");
    long v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 9) {
        v = v * 10 + (*p - '0');
        p++;
        digits++;
    }
    if (!digits || *p != '.' || v >= n_experts)
        return -1;
    return (int)v;
}

int lwq_units_is_tail(const char *name)
{
    return strstr(name, ".fc2_latent_proj.") != NULL || (strlen(name) >= 16 &&
                                                         strcmp(name + strlen(name) - 16, ".fc2_latent_proj") == 0);
}

void lwq_units_free(lwq_units *u)
{
    for (int i = 0; i < u->n; i++)
        free(u->v[i].idx);
    free(u->v);
    memset(u, 0, sizeof *u);
}

int lwq_units_split(const lwq_ckpt *ck, int layer, int group, lwq_units *u, lwq_error *e)
{
    memset(u, 0, sizeof *u);
    const lwq_ckpt_layer *L = &ck->layers[layer];
    int E = ck->cfg.num_experts, has_experts = 0;
    for (int k = 0; k < L->n && !has_experts; k++)
        has_experts = lwq_units_expert_of(ck->tensors[L->idx[k]].name, E) >= 0;
    int ng = group > 0 && has_experts ? (E + group - 1) / group : 0, tail = 0;
    for (int k = 0; k < L->n && ng && !tail; k++)
        tail = lwq_units_is_tail(ck->tensors[L->idx[k]].name);
    u->v = calloc((size_t)ng + 1 + (size_t)tail, sizeof *u->v);
    if (!u->v)
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory", layer);
    u->n = ng + 1 + tail;
    for (int i = 0; i < u->n; i++) {
        int grp = i > 0 && i <= ng;
        u->v[i].layer = layer;
        u->v[i].tail = i > ng;
        u->v[i].e0 = grp ? (i - 1) * group : -1;
        u->v[i].e1 = grp ? (i * group < E ? i * group : E) : -1;
        u->v[i].idx = calloc((size_t)(L->n ? L->n : 1), sizeof(int));
        if (!u->v[i].idx) {
            lwq_units_free(u);
            return lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory", layer);
        }
    }
    for (int k = 0; k < L->n; k++) {
        const lwq_ckpt_tensor *t = &ck->tensors[L->idx[k]];
        int x = ng ? lwq_units_expert_of(t->name, E) : -1;
        lwq_unit *d = &u->v[x >= 0 ? 1 + x / group : tail && lwq_units_is_tail(t->name) ? ng + 1 : 0];
        d->idx[d->n++] = L->idx[k];
        d->bytes += t->nbytes;
    }
    return 0;
}

int lwq_units_ranges(const lwq_ckpt *ck, const lwq_unit *u, lwq_io_range **ranges, lwq_error *e)
{
    *ranges = calloc((size_t)(u->n ? u->n : 1), sizeof **ranges);
    if (!*ranges)
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory", u->layer);
    for (int k = 0; k < u->n; k++) {
        const lwq_ckpt_tensor *t = &ck->tensors[u->idx[k]];
        (*ranges)[k].path = ck->files[t->file].path;
        (*ranges)[k].offset = t->offset;
        (*ranges)[k].length = t->nbytes;
    }
    return 0;
}

int lwq_units_slot_bytes(const lwq_ckpt *ck, const lwq_unit *u, uint64_t *bytes, lwq_error *e)
{
    lwq_io_range *r;
    lwq_io_plan p;
    int rc = lwq_units_ranges(ck, u, &r, e);
    if (rc)
        return rc;
    if ((rc = lwq_io_plan_build(&p, r, (size_t)u->n, LWQ_LAYERSRC_MERGE_GAP, e)) == 0) {
        *bytes = p.bytes;
        lwq_io_plan_free(&p);
    }
    free(r);
    return rc;
}

int lwq_units_views(const lwq_ckpt *ck, const lwq_unit *u, const lwq_io_range *ranges, void *slot,
                    lwq_tlist *src, lwq_error *e)
{
    memset(src, 0, sizeof *src);
    for (int k = 0; k < u->n; k++) {
        const lwq_ckpt_tensor *t = &ck->tensors[u->idx[k]];
        unsigned char *p = (unsigned char *)slot + ranges[k].dst;
        size_t esz = lwq_dtype_size(t->dtype);
        int rc;
        if (esz > 1 && ((uintptr_t)p % esz) != 0) { /* misaligned for its dtype: an aligned copy */
            void *copy = malloc(t->nbytes ? t->nbytes : 1);
            if (!copy) {
                lwq_tlist_free(src);
                return lwq_errf(e, LWQ_ENOMEM, "%s: cannot allocate %llu bytes", t->name,
                                (unsigned long long)t->nbytes);
            }
            memcpy(copy, p, t->nbytes);
            rc = lwq_tlist_add(src, t->name, t->dtype, t->ndim, t->shape, copy, 1, e);
        } else {
            rc = lwq_tlist_add(src, t->name, t->dtype, t->ndim, t->shape, p, 0, e);
        }
        if (rc < 0) {
            lwq_tlist_free(src);
            return rc;
        }
    }
    lwq_tlist_sort(src);
    int rc = lwq_srcdeq_apply(&ck->cfg, src, e);
    if (rc < 0)
        lwq_tlist_free(src);
    return rc;
}

int lwq_units_max_slot(const lwq_ckpt *ck, int group, uint64_t *slot, uint64_t *dense, uint64_t *expert,
                       lwq_error *e)
{
    uint64_t s = 0, d = 0, x = 0;
    int E = ck->cfg.num_experts;
    for (int L = 0; L < ck->cfg.num_hidden_layers; L++) {
        lwq_units u;
        int rc = lwq_units_split(ck, L, group, &u, e);
        for (int i = 0; rc == 0 && i < u.n; i++) {
            uint64_t b;
            if ((rc = lwq_units_slot_bytes(ck, &u.v[i], &b, e)) == 0)
                s = b > s ? b : s;
        }
        if (rc == 0 && (dense || expert)) {
            /* per-expert bytes, from the names (whatever the grouping) */
            const lwq_ckpt_layer *cl = &ck->layers[L];
            uint64_t dl = 0, *per = calloc((size_t)(E > 0 ? E : 1), sizeof *per);
            if (!per)
                rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
            for (int k = 0; rc == 0 && k < cl->n; k++) {
                const lwq_ckpt_tensor *t = &ck->tensors[cl->idx[k]];
                int xe = lwq_units_expert_of(t->name, E);
                if (xe < 0)
                    dl += t->nbytes;
                else
                    per[xe] += t->nbytes;
            }
            for (int k = 0; rc == 0 && k < E; k++)
                x = per[k] > x ? per[k] : x;
            d = dl > d ? dl : d;
            free(per);
        }
        lwq_units_free(&u);
        if (rc)
            return rc;
    }
    *slot = s;
    if (dense)
        *dense = d;
    if (expert)
        *expert = x;
    return 0;
}
