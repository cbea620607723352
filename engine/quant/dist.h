/* engine/quant/dist.h — what a run split over ranks (core/ranks.h) needs beyond the collectives:
 * which calibration batches each rank computes, which rank quantizes which linear, the sums and
 * maxima of the statistics over the ranks, and a layer's quantized tensors as one blob to gather.
 *
 * The split never changes a byte (../shared/DESIGN.md "Beyond one machine"):
 *   - ranks own contiguous ranges of WHOLE batches (the batches one process would make), balanced
 *     by rows: every rank runs exactly the batches, and so the shapes, a single process runs;
 *   - statistics meet exactly: amax by MAX, counts by integer SUM, Hessians by integer SUM of
 *     their fixed-point accumulators (core/fixsum.h);
 *   - a linear's quantization depends on the reduced statistics and its weights alone, so which
 *     rank computes it does not matter; the assignment (largest estimated cost first, onto the
 *     least loaded rank, ties to the lower index) only balances the time.
 * Engine thread only (it calls core/ranks.h). */
#ifndef LWQ_ENGINE_QUANT_DIST_H
#define LWQ_ENGINE_QUANT_DIST_H

#include <stdint.h>

#include "core/ranks.h"
#include "kernels/backend.h"
#include "engine/quant/qlayer.h"
#include "engine/quant/stats.h"
#include "engine/source/tlist.h"

/* first[0..size]: rank r computes batches [first[r], first[r+1]); contiguous, each rank at least
 * one batch, balanced by rows[b] (the rows batch b runs: sequences x padded length).  More ranks
 * than batches: LWQ_EINVAL saying how many can work. */
int lwq_dist_split_batches(const int64_t *rows, int nb, int size, int *first, lwq_error *e);

/* Estimated cost of quantizing linear i with its choice (arbitrary units, comparable within a run). */
double lwq_dist_cost(const lwq_arch_linear *l, const lwq_quant_choice *c);
/* owner[i]: the rank that quantizes linear i (-1: not quantized, or not in only when only != NULL).
 * Fused groups go to one rank (they share scales).  The same inputs give the same owners on every
 * rank; out of memory is an error (LWQ_ENOMEM), never a different assignment. */
int lwq_dist_assign(const lwq_arch_layer *p, const lwq_quant_choice *c, const uint8_t *only, int size, int *owner,
                    lwq_error *e);

/* The optional NCCL path of GPU ranks (dist_nccl.c): the Hessians' limbs summed on the devices.
 * lwq_nccl_open is collective (rank 0's ncclUniqueId is broadcast over MPI). */
typedef struct lwq_nccl lwq_nccl;
int lwq_nccl_open(lwq_nccl **out, lwq_ranks *rk, const lwq_backend *be, lwq_error *e);
int lwq_nccl_sum_i64(lwq_nccl *n, int64_t *v, size_t count, lwq_error *e);
void lwq_nccl_close(lwq_nccl *n);

/* The statistics of the linears with only[i] (NULL: all) summed/maxed over the ranks, in place on
 * every rank; with `layer_wide` also the k/v amaxes and the expert token counts (the part of a
 * layer that observes them).  Hessians: after lwq_stats_flush, before lwq_stats_finalize, through
 * nccl when given (else MPI on the host).  A sum beyond the grid's range: LWQ_ENUMERIC naming the
 * linear. */
int lwq_dist_reduce_stats(lwq_ranks *rk, lwq_nccl *nccl, lwq_layer_stats *st, const uint8_t *only,
                          int layer_wide, lwq_error *e);

/* The owned tensors of `out` with index >= from (views of the source stay; spilled ones are refused),
 * and the summable fields of rep with its GPTQ entries, as one blob (malloc'd). */
int lwq_dist_pack(const lwq_tlist *out, int from, const lwq_qlayer_report *rep, void **blob, uint64_t *bytes,
                  lwq_error *e);
/* Append a blob's tensors to out (owned copies) and add its report fields to rep; rank names the
 * sender in errors. */
int lwq_dist_unpack(const void *blob, uint64_t bytes, int rank, lwq_tlist *out, lwq_qlayer_report *rep, lwq_error *e);
/* rep's GPTQ entries in the order one process writes them: by linear index in p. */
void lwq_dist_sort_gptq(const lwq_arch_layer *p, lwq_qlayer_report *rep);

#endif
