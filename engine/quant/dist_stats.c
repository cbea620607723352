/* engine/quant/dist_stats.c — a layer's statistics met over the ranks: MAX, integer SUM, and the
 * Hessians' fixed-point accumulators as 32-bit limbs summed with plain integer SUM. */
#include "engine/quant/dist.h"

#include <stdlib.h>
#include <string.h>

/* entries per reduction of a Hessian (limbs are 32 bytes an entry: 128 MiB of limbs at a time) */
#define HCHUNK ((int64_t)1 << 22)

static int reduce_hessian(lwq_ranks *rk, lwq_nccl *nccl, lwq_layer_stats *st, int i, lwq_error *e)
{
    int64_t n = lwq_stats_hfix_len(st, i);
    if (n == 0)
        return 0;
    int64_t ch = n < HCHUNK ? n : HCHUNK;
    int64_t *limbs = malloc((size_t)ch * LWQ_FIX_LIMBS * sizeof *limbs);
    /* agreed before the sums: a rank that stopped here would leave the others in them */
    int rc = lwq_ranks_agree(rk, limbs ? 0 : lwq_errf(e, LWQ_ENOMEM, "%s: no memory to reduce its Hessian",
                                                        st->plan->linears[i].name), e);
    for (int64_t off = 0; off < n && rc == 0; off += ch) {
        int64_t k = n - off < ch ? n - off : ch;
        lwq_fix_to_limbs(st->hfix[i] + off, k, limbs);
        if ((rc = nccl ? lwq_nccl_sum_i64(nccl, limbs, (size_t)(k * LWQ_FIX_LIMBS), e)
                       : lwq_ranks_sum_i64(rk, limbs, (size_t)(k * LWQ_FIX_LIMBS), e)) != 0)
            break;
        int64_t bad = lwq_fix_from_limbs(limbs, k, st->hfix[i] + off);
        if (bad >= 0)
            rc = lwq_errf(e, LWQ_ENUMERIC, "the Hessian of %s summed over %d ranks leaves the fixed-point grid's range "
                          "(|sum| >= 2^%d) at entry %lld", st->plan->linears[i].name, rk->size, 126 - LWQ_FIX_FRAC,
                          (long long)(off + bad));
    }
    free(limbs);
    return rc;
}

int lwq_dist_reduce_stats(lwq_ranks *rk, lwq_nccl *nccl, lwq_layer_stats *st, const uint8_t *only,
                          int layer_wide, lwq_error *e)
{
    if (rk->size <= 1 && !nccl) /* one rank with NCCL: the path still runs (perf/gpu-check.sh's smoke row) */
        return 0;
    int n = st->n, nE = layer_wide ? st->n_experts : 0;
    float *f = malloc((size_t)(n + 2) * sizeof *f);
    int64_t *c = malloc((size_t)(2 * n + 1 + nE) * sizeof *c);
    int rc = lwq_ranks_agree(rk, f && c ? 0 : lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory", st->plan->layer), e);
    int nf = 0, nc = 0;
    for (int i = 0; rc == 0 && i < n; i++)
        if (!only || only[i]) {
            f[nf++] = st->in_amax[i];
            c[nc++] = st->in_rows[i];
            c[nc++] = st->htokens[i];
        }
    if (rc == 0 && layer_wide) {
        f[nf++] = st->k_amax;
        f[nf++] = st->v_amax;
        c[nc++] = st->kv_rows;
        for (int x = 0; x < nE; x++)
            c[nc++] = st->expert_tokens[x];
    }
    if (rc == 0)
        rc = lwq_ranks_max_f32(rk, f, (size_t)nf, e);
    if (rc == 0)
        rc = lwq_ranks_sum_i64(rk, c, (size_t)nc, e);
    nf = nc = 0;
    for (int i = 0; rc == 0 && i < n; i++)
        if (!only || only[i]) {
            st->in_amax[i] = f[nf++];
            st->in_rows[i] = c[nc++];
            st->htokens[i] = c[nc++];
        }
    if (rc == 0 && layer_wide) {
        st->k_amax = f[nf++];
        st->v_amax = f[nf++];
        st->kv_rows = c[nc++];
        for (int x = 0; x < nE; x++)
            st->expert_tokens[x] = c[nc++];
    }
    free(f);
    free(c);
    for (int i = 0; rc == 0 && i < n; i++)
        if (!only || only[i])
            rc = reduce_hessian(rk, nccl, st, i, e);
    return rc;
}
