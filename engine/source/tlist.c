#include "engine/source/tlist.h"

#include <stdlib.h>
#include <string.h>

int lwq_tlist_add(lwq_tlist *l, const char *name, lwq_dtype dt, int ndim, const int64_t *shape, void *data,
                  int owned, lwq_error *e)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        lwq_htensor *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) {
            if (owned)
                free(data);
            return lwq_errf(e, LWQ_ENOMEM, "out of memory adding tensor %s", name);
        }
        l->v = v;
        l->cap = cap;
    }
    lwq_htensor *t = &l->v[l->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) {
        if (owned)
            free(data);
        return lwq_errf(e, LWQ_ENOMEM, "out of memory adding tensor %s", name);
    }
    t->dtype = dt;
    t->ndim = ndim;
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        n *= (uint64_t)shape[i];
    }
    t->nbytes = n * lwq_dtype_size(dt);
    t->data = data;
    t->owned = owned;
    l->n++;
    return 0;
}

int lwq_tlist_add_scalar(lwq_tlist *l, const char *name, float v, lwq_error *e)
{
    float *p = malloc(sizeof *p);
    if (!p)
        return lwq_errf(e, LWQ_ENOMEM, "out of memory adding tensor %s", name);
    *p = v;
    return lwq_tlist_add(l, name, LWQ_F32, 0, NULL, p, 1, e);
}

static int cmp(const void *a, const void *b) { return strcmp(((const lwq_htensor *)a)->name, ((const lwq_htensor *)b)->name); }

void lwq_tlist_sort(lwq_tlist *l)
{
    if (l->n > 1)
        qsort(l->v, (size_t)l->n, sizeof *l->v, cmp);
}

const lwq_htensor *lwq_tlist_find(const lwq_tlist *l, const char *name)
{
    int lo = 0, hi = l->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(l->v[mid].name, name);
        if (c == 0)
            return &l->v[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

uint64_t lwq_tlist_bytes(const lwq_tlist *l)
{
    uint64_t s = 0;
    for (int i = 0; i < l->n; i++)
        s += l->v[i].nbytes;
    return s;
}

void lwq_tlist_free(lwq_tlist *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->n; i++) {
        free(l->v[i].name);
        if (l->v[i].owned)
            free(l->v[i].data);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}
