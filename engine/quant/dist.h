/* engine/quant/dist.h — what a run split over ranks (core/parallel/ranks.h) needs beyond the collectives:
 * which calibration batches each rank computes, which rank quantizes which linear, the sums and
 * maxima of the statistics over the ranks, and a layer's quantized tensors as one blob to gather.
 *
 * The split never changes a byte (../shared/DESIGN.md "Beyond one machine"):
 *   - ranks own contiguous ranges of WHOLE batches (the batches one process would make), balanced
 *     by rows: every rank runs exactly the batches, and so the shapes, a single process runs;
 *   - statistics meet exactly: amax by MAX, counts by integer SUM, Hessians by integer SUM of
 *     their fixed-point accumulators (core/data/fixsum.h);
 *   - a linear's quantization depends on the reduced statistics and its weights alone, so which
 *     rank computes it does not matter, and where every 16-element block depends only on its own
 *     weights and the group's global amax (NVFP4 max, mse, the FP8 scale sweep, local_hessian)
 *     neither does which rank computes which rows: the assignment only balances the time.
 * Engine thread only (it calls core/parallel/ranks.h). */
#ifndef LWQ_ENGINE_QUANT_DIST_H
#define LWQ_ENGINE_QUANT_DIST_H

#include <stdint.h>

#include "core/parallel/ranks.h"
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
/* 1 when the linear's rows can be quantized on different ranks with the bytes of one process:
 * NVFP4 other than GPTQ (every block from its own weights and the group's global amax). */
int lwq_dist_splittable(const lwq_arch_linear *l, const lwq_quant_choice *c);
/* share[i * size + r]: the rows of linear i that rank r quantizes (empty for a linear not
 * quantized, or not in only when only != NULL).  The linears that cannot be split
 * (lwq_dist_splittable) go whole, largest estimated cost first onto the least loaded rank (ties
 * to the lower index), a fused group of them onto one rank; the splittable ones then fill every
 * rank up to one common level of cost, as contiguous row ranges in linear order and rank order
 * (so a split linear's pieces come in rank order).  The same inputs give the same shares on
 * every rank; out of memory is an error (LWQ_ENOMEM), never a different assignment. */
int lwq_dist_assign(const lwq_arch_layer *p, const lwq_quant_choice *c, const uint8_t *only, int size,
                    lwq_qlayer_rows *share, lwq_error *e);

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

/* The owned tensors of `out` with index >= from (views of the source stay; spilled ones are refused;
 * pieces keep their row range), and the summable fields of rep with its GPTQ entries, as one blob
 * (malloc'd). */
int lwq_dist_pack(const lwq_tlist *out, int from, const lwq_qlayer_report *rep, void **blob, uint64_t *bytes,
                  lwq_error *e);

/* Pieces (lwq_htensor rows_all > 0) joined into whole tensors of out: each tensor's pieces must
 * come in row order, the first at row 0, and together cover every row. */
typedef struct lwq_dist_join {
    int n, cap;
    struct lwq_dist_joined *v;
} lwq_dist_join;
/* This rank's own pieces in out (each at row 0) become whole tensors, the rest of their rows to come. */
int lwq_dist_join_own(lwq_tlist *out, lwq_dist_join *j, lwq_error *e);
/* Append a blob's tensors to out (owned copies; a piece into its tensor through j) and add its
 * report fields to rep; rank names the sender in errors. */
int lwq_dist_unpack(const void *blob, uint64_t bytes, int rank, lwq_tlist *out, lwq_qlayer_report *rep,
                    lwq_dist_join *j, lwq_error *e);
/* rc, or an error naming a tensor whose rows were not all received (when rc == 0); frees j. */
int lwq_dist_join_end(lwq_dist_join *j, const lwq_tlist *out, int rc, lwq_error *e);
/* rep's GPTQ entries in the order one process writes them: by linear index in p. */
void lwq_dist_sort_gptq(const lwq_arch_layer *p, lwq_qlayer_report *rep);

#endif
