/* engine/source/devslab.h — device memory for one layer's weight copies, reused from layer to layer, and
 * an O(1) name index over a tensor list.
 *
 * lwq_devslab: one device block handed out by bumping a pointer.  A layer whose copies do not fit
 * gets the overflow from separate allocations and records how much it wanted; the next
 * lwq_devslab_reset() grows the block to that, so in steady state a layer costs no cudaMalloc,
 * cudaMemGetInfo or cudaFree per tensor (it used to cost 2-3 of each).  One user at a time
 * (`in_use`): the layer-by-layer path; the whole-model path, which holds every layer at once,
 * allocates as before.
 *
 * lwq_name_index: open addressing on xxh64 of the name, indexes into an lwq_tlist, replacing the
 * forward's linear strcmp scan (quadratic per batch for 512-expert layers). */
#ifndef LWQ_ENGINE_DEVSLAB_H
#define LWQ_ENGINE_DEVSLAB_H

#include <stdint.h>

#include "engine/source/tlist.h"
#include "kernels/backend.h"

typedef struct lwq_devslab {
    const lwq_backend *be;
    void *base;
    uint64_t cap, used;
    uint64_t want;   /* bytes this layer asked for in all */
    int in_use;
    uint64_t allocs; /* device allocations made for the slab itself (tests, logs) */
} lwq_devslab;

void lwq_devslab_init(lwq_devslab *s, const lwq_backend *be);
/* `bytes` (256-aligned) from the slab: 0, or 1 when it does not fit (the caller allocates). */
int lwq_devslab_get(lwq_devslab *s, uint64_t bytes, void **out);
/* 1 when p points into the slab. */
int lwq_devslab_owns(const lwq_devslab *s, const void *p);
/* End of a layer: everything handed out is free again; the block grows to what the layer wanted. */
void lwq_devslab_reset(lwq_devslab *s);
void lwq_devslab_free(lwq_devslab *s);

typedef struct lwq_name_index {
    int *slot; /* -1 empty, else an index into the list */
    int cap, n;
} lwq_name_index;

/* Index entry i of l (by l->v[i].name). */
int lwq_name_index_put(lwq_name_index *x, const lwq_tlist *l, int i, lwq_error *e);
/* The index of `name` in l, or -1. */
int lwq_name_index_find(const lwq_name_index *x, const lwq_tlist *l, const char *name);
void lwq_name_index_free(lwq_name_index *x);

#endif
