/* engine/source/devslab.c — see devslab.h. */
#include "engine/source/devslab.h"

#include <stdlib.h>
#include <string.h>

#include "core/data/hash.h"

#define SLAB_ALIGN 256

void lwq_devslab_init(lwq_devslab *s, const lwq_backend *be)
{
    memset(s, 0, sizeof *s);
    s->be = be;
}

int lwq_devslab_get(lwq_devslab *s, uint64_t bytes, void **out)
{
    bytes = (bytes + SLAB_ALIGN - 1) / SLAB_ALIGN * SLAB_ALIGN;
    if (bytes == 0)
        bytes = SLAB_ALIGN;
    s->want += bytes;
    if (!s->base || s->used + bytes > s->cap)
        return 1;
    *out = (char *)s->base + s->used;
    s->used += bytes;
    return 0;
}

int lwq_devslab_owns(const lwq_devslab *s, const void *p)
{
    return s->base && (const char *)p >= (const char *)s->base && (const char *)p < (const char *)s->base + s->cap;
}

void lwq_devslab_reset(lwq_devslab *s)
{
    if (s->want > s->cap) {
        lwq_backend_free(s->be, s->base);
        s->base = NULL;
        s->cap = 0;
        void *p;
        if (lwq_backend_alloc(s->be, (size_t)s->want, &p, NULL) == 0) { /* no slab: per-tensor allocations */
            s->base = p;
            s->cap = s->want;
            s->allocs++;
        }
    }
    s->used = 0;
    s->want = 0;
    s->in_use = 0;
}

void lwq_devslab_free(lwq_devslab *s)
{
    if (s->be)
        lwq_backend_free(s->be, s->base);
    memset(s, 0, sizeof *s);
}

static uint64_t hash(const char *name) { return lwq_xxh64(name, strlen(name), 0); }

static void insert(int *slot, int cap, const lwq_tlist *l, int i)
{
    uint64_t h = hash(l->v[i].name) & (uint64_t)(cap - 1);
    while (slot[h] >= 0)
        h = (h + 1) & (uint64_t)(cap - 1);
    slot[h] = i;
}

int lwq_name_index_put(lwq_name_index *x, const lwq_tlist *l, int i, lwq_error *e)
{
    if (2 * (x->n + 1) > x->cap) { /* load <= 1/2 */
        int cap = x->cap ? 2 * x->cap : 64;
        int *s = malloc((size_t)cap * sizeof *s);
        if (!s)
            return lwq_errf(e, LWQ_ENOMEM, "out of memory for a weight index of %d entries", cap);
        for (int k = 0; k < cap; k++)
            s[k] = -1;
        for (int k = 0; k < x->cap; k++)
            if (x->slot[k] >= 0)
                insert(s, cap, l, x->slot[k]);
        free(x->slot);
        x->slot = s;
        x->cap = cap;
    }
    insert(x->slot, x->cap, l, i);
    x->n++;
    return 0;
}

int lwq_name_index_find(const lwq_name_index *x, const lwq_tlist *l, const char *name)
{
    if (!x->cap)
        return -1;
    for (uint64_t h = hash(name) & (uint64_t)(x->cap - 1);; h = (h + 1) & (uint64_t)(x->cap - 1)) {
        int i = x->slot[h];
        if (i < 0)
            return -1;
        if (!strcmp(l->v[i].name, name))
            return i;
    }
}

void lwq_name_index_free(lwq_name_index *x)
{
    free(x->slot);
    memset(x, 0, sizeof *x);
}
