/* engine/source/units.h — sub-layer units: a decoder layer read and computed in pieces (expert streaming).
 *
 * A MoE layer splits into a dense unit (attention, norms, router, shared experts: every tensor
 * whose name does not hold ".experts.<E>.") followed by groups of `group` routed experts, in
 * ascending expert order ([0, group), [group, 2 group), ...).  A layer without routed experts, or
 * group 0, is one unit holding every tensor.  nemotron_h's latent MoE adds a last unit: its
 * fc2_latent_proj, which runs on the finished expert sum (so it is read, computed and quantized
 * after every group).  Each unit is one prefetch job: its tensors' byte
 * ranges (lwq_units_ranges) land in one ring slot, and lwq_units_views makes the sorted tensor
 * list the forward and the quantizer use (FP8-block / MXFP4 sources dequantized, as
 * engine/source/layersrc.h does for whole layers).
 *
 * Ownership: lwq_units owns its arrays; ranges point into the checkpoint's file table. */
#ifndef LWQ_ENGINE_UNITS_H
#define LWQ_ENGINE_UNITS_H

#include <stdint.h>

#include "engine/source/tlist.h"
#include "io/reader.h"
#include "layout/checkpoint/checkpoint.h"

typedef struct lwq_unit {
    int layer;
    int e0, e1;          /* routed experts [e0, e1); -1, -1 for the dense part, the tail or a whole layer */
    int tail;            /* 1: the layer's last unit, after every group (lwq_units_is_tail's tensors) */
    int n;               /* tensors */
    int *idx;            /* checkpoint tensor indexes, in the layer's order */
    uint64_t bytes;      /* source bytes of those tensors */
} lwq_unit;

typedef struct lwq_units {
    int n;
    lwq_unit *v;
} lwq_units;

/* Routed expert index named by a tensor (".experts.<E>." with E < n_experts), or -1. */
int lwq_units_expert_of(const char *name, int n_experts);
/* Whether a tensor or linear name belongs in a streamed layer's tail unit: nemotron_h's
 * fc2_latent_proj, the projection of the finished expert sum. */
int lwq_units_is_tail(const char *name);
/* Units of decoder layer L with `group` experts per group (0: the whole layer as one unit). */
int lwq_units_split(const lwq_ckpt *ck, int layer, int group, lwq_units *u, lwq_error *e);
void lwq_units_free(lwq_units *u);
/* Read ranges of a unit's tensors (ranges[k] for u->idx[k]). */
int lwq_units_ranges(const lwq_ckpt *ck, const lwq_unit *u, lwq_io_range **ranges, lwq_error *e);
/* Ring-slot bytes the unit needs (aligned, merged extents as the prefetcher reads them). */
int lwq_units_slot_bytes(const lwq_ckpt *ck, const lwq_unit *u, uint64_t *bytes, lwq_error *e);
/* Views into `slot` after the ranges were read there; sorted, packed sources dequantized. */
int lwq_units_views(const lwq_ckpt *ck, const lwq_unit *u, const lwq_io_range *ranges, void *slot,
                    lwq_tlist *src, lwq_error *e);

/* Largest ring slot over every decoder layer with this grouping; *dense and *expert (may be NULL)
 * get the largest dense-part and single-expert source bytes of any layer. */
int lwq_units_max_slot(const lwq_ckpt *ck, int group, uint64_t *slot, uint64_t *dense, uint64_t *expert,
                       lwq_error *e);

#endif
