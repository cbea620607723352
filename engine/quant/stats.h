/* engine/quant/stats.h — what calibration observes in one decoder layer.
 *
 * An lwq_layer_stats is the lwq_observer the engine hands to the layer forward: for every
 * quantizable linear of the layer plan it keeps the running input amax over real tokens (padding
 * rows excluded unless include_padding), the number of rows seen, and, for linears calibrated
 * with local_hessian, the per-16-block sum of x^T x (kernels/quant.h), for GPTQ linears the full
 * in x in sum of x^T x (kernels/gptq.h; members of a fused group, which read the same input, share
 * one); for the attention block the
 * amax of k and v as they enter the cache; per routed expert the number of real tokens routed to
 * it.  Amax is a max and the counts are integers, so neither depends on batch order; the Hessian
 * sums are exact integer sums of per-sequence partials (below), so they depend neither on the
 * batching nor on how the calibration set is split over processes (engine/quant/dist.h).
 *
 * Ownership: borrows the plan and the backend (both must outlive it).  One forward thread. */
#ifndef LWQ_ENGINE_STATS_H
#define LWQ_ENGINE_STATS_H

#include <stdint.h>

#include "core/data/fixsum.h"
#include "engine/forward/forward.h"
#include "layout/arch/arch.h"

typedef struct lwq_layer_stats {
    const lwq_arch_layer *plan;
    const lwq_backend *be;
    int include_padding;
    const lwq_names *names; /* cfg.names: maps the forward's module names to the plan's */
    int n;                  /* = plan->nlinears */
    int *by_name;           /* linear indexes sorted by module name (lookup) */
    float *in_amax;         /* (n) */
    int64_t *in_rows;       /* (n) rows observed */
    double **hsum;          /* (n) NULL, (in/16, 16, 16) sums for local_hessian linears, or
                               (in, in) upper-triangle sums for GPTQ linears */
    uint8_t *hkind;         /* (n) LWQ_STATS_H_* */
    int *hown;              /* (n) the linear whose buffer hsum[i] is (i itself unless shared) */
    int64_t *htokens;       /* (n) */
    /* The Hessian sums are exact fixed-point sums of one partial per calibration sequence
     * (core/data/fixsum.h): a sequence's rows are summed in token order in double into hsum[i], which
     * is rounded once onto the grid and added to hfix[i] when the sequence ends.  Integer sums do
     * not depend on how sequences are split into batches, units or ranks, so neither do the
     * bytes.  lwq_stats_finish turns hfix back into the double sums in hsum. */
    lwq_fix **hfix;         /* (n) NULL, or the owner's accumulator: (in/16)*256 entries for a block
                               Hessian, in*(in+1)/2 (the upper triangle, row-major) for a full one */
    int64_t *hopen;         /* (n) key of the sequence whose partial hsum[i] holds, or -1 */
    uint8_t *hdone;         /* (n) hsum[i] holds the finished sums */
    const struct lwq_batch *cur_batch; /* the batch being observed (begin_batch), or NULL */
    int64_t batch_serial, call_serial;
    float k_amax, v_amax;
    int64_t kv_rows;
    int n_experts;
    int64_t *expert_tokens; /* (n_experts) routed real tokens */
    void *scratch;          /* host staging for device tensors */
    size_t scratch_bytes;
    lwq_observer obs;       /* ready to pass to lwq_model_layer_forward */
} lwq_layer_stats;

enum { LWQ_STATS_H_NONE = 0, LWQ_STATS_H_BLOCK = 1, LWQ_STATS_H_FULL = 2 };
/* want_hessian[i]: LWQ_STATS_H_BLOCK for the linears searched with local_hessian,
 * LWQ_STATS_H_FULL for GPTQ linears (may be NULL: none). */
int lwq_stats_init(lwq_layer_stats *s, const lwq_arch_layer *plan, const lwq_backend *be,
                   int n_experts, int include_padding, int all_experts, const uint8_t *want_hessian,
                   const lwq_names *names, lwq_error *e);
void lwq_stats_free(lwq_layer_stats *s);
/* Index of the linear named `module` in the plan, or -1. */
int lwq_stats_find(const lwq_layer_stats *s, const char *module);
/* Close the open per-sequence partials of the linears with only[i] (NULL: all): each is rounded
 * onto the grid and added to hfix.  Overflow of the grid: LWQ_ENUMERIC naming the tensor. */
int lwq_stats_flush(lwq_layer_stats *s, const uint8_t *only, lwq_error *e);
/* hsum[i] = the finished double sums from hfix[i], for the linears with only[i] (NULL: all); call
 * once, after lwq_stats_flush (and any reduction of hfix between processes). */
int lwq_stats_finalize(lwq_layer_stats *s, const uint8_t *only, lwq_error *e);
/* Flush and finalize: the statistics of one process, ready for the quantizer. */
int lwq_stats_finish(lwq_layer_stats *s, const uint8_t *only, lwq_error *e);
/* Entries of linear i's Hessian accumulator (0: none, or not the owner of a shared one). */
int64_t lwq_stats_hfix_len(const lwq_layer_stats *s, int i);

#endif
