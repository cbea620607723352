/* engine/source/tlist.h — a list of named host tensors: a layer's source tensors (views into the read
 * buffer) or the tensors of an output shard (views or owned quantized buffers).
 * Owned data is freed by lwq_tlist_free; views are not. */
#ifndef LWQ_ENGINE_TLIST_H
#define LWQ_ENGINE_TLIST_H

#include <stdint.h>

#include "core/data/dtype.h"
#include "core/sys/error.h"
#include "layout/checkpoint/safetensors.h"

typedef struct lwq_htensor {
    char *name;               /* owned */
    lwq_dtype dtype;
    int ndim;
    int64_t shape[LWQ_ST_MAX_DIMS];
    void *data;
    uint64_t nbytes;
    int owned;                /* data is freed with the list */
    int spilled;              /* data is NULL: the bytes are at spill_off in the layer's spill file
                                 (engine/run/spill.h; expert streaming) */
    uint64_t spill_off;
    int64_t row0, rows_all;   /* rows_all > 0: a piece, rows [row0, row0 + shape[0]) of a tensor of
                                 rows_all rows (a rank's share of a linear, engine/quant/dist.h) */
} lwq_htensor;

typedef struct lwq_tlist {
    int n, cap;
    lwq_htensor *v;
} lwq_tlist;

/* Append a tensor; `data` is taken over when owned (and freed on failure too). */
int lwq_tlist_add(lwq_tlist *l, const char *name, lwq_dtype dt, int ndim, const int64_t *shape,
                  void *data, int owned, lwq_error *e);
/* A new owned F32 scalar (shape []). */
int lwq_tlist_add_scalar(lwq_tlist *l, const char *name, float v, lwq_error *e);
/* Sort by name (binary search afterwards). */
void lwq_tlist_sort(lwq_tlist *l);
const lwq_htensor *lwq_tlist_find(const lwq_tlist *l, const char *name);
uint64_t lwq_tlist_bytes(const lwq_tlist *l);
void lwq_tlist_free(lwq_tlist *l);

#endif
