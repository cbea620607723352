/* engine/quant/dist_split.c — who computes what: batch ranges and the quantization assignment. */
#include "engine/quant/dist.h"

#include <stdlib.h>

int lwq_dist_split_batches(const int64_t *rows, int nb, int size, int *first, lwq_error *e)
{
    if (size < 1)
        return lwq_errf(e, LWQ_EINVAL, "%d ranks", size);
    if (size > nb)
        return lwq_errf(e, LWQ_EINVAL, "%d ranks, but the calibration set makes only %d batch%s: each rank computes "
                        "whole batches (so that its bytes are a single process's); run at most %d ranks, or lower "
                        "--batch-size", size, nb, nb == 1 ? "" : "es", nb);
    int64_t total = 0;
    for (int b = 0; b < nb; b++)
        total += rows[b];
    first[0] = 0;
    first[size] = nb;
    int64_t pre = 0; /* rows of batches [0, b) */
    int b = 0;
    for (int r = 1; r < size; r++) {
        /* the boundary nearest to r/size of the rows, leaving each rank at least one batch */
        double want = (double)total * r / size;
        if (b < first[r - 1] + 1)
            pre += rows[b], b++;
        while (b < nb - (size - r) && (double)(pre + rows[b]) - want <= want - (double)pre)
            pre += rows[b], b++;
        first[r] = b;
    }
    return 0;
}

double lwq_dist_cost(const lwq_arch_linear *l, const lwq_quant_choice *c)
{
    double w = (double)l->out_features * (double)l->in_features, in = (double)l->in_features;
    if (c->format == LWQ_QFMT_NONE)
        return 0;
    if (c->algo == LWQ_ALGO_GPTQ) /* factor ~in^3, sweep ~out*in^2 */
        return w * in / 8 + in * in * in / 3;
    if (c->format == LWQ_QFMT_NVFP4)
        switch (c->algo) {
        case LWQ_ALGO_MAX:
            return w;
        case LWQ_ALGO_LOCAL_HESSIAN:
            return 160 * w;
        default:
            return c->fp8_scale_sweep ? 130 * w : 12 * w;
        }
    return c->algo == LWQ_ALGO_MAX ? w : 10 * w;
}

typedef struct item {
    int lead;     /* first linear of the item */
    double cost;
} item;

static int by_cost(const void *a, const void *b)
{
    const item *x = a, *y = b;
    if (x->cost != y->cost)
        return x->cost > y->cost ? -1 : 1;
    return x->lead - y->lead;
}

int lwq_dist_assign(const lwq_arch_layer *p, const lwq_quant_choice *c, const uint8_t *only, int size, int *owner,
                    lwq_error *e)
{
    int n = p->nlinears, ni = 0;
    for (int i = 0; i < n; i++)
        owner[i] = -1;
    if (size < 1)
        return lwq_errf(e, LWQ_EINVAL, "layer %d: %d ranks", p->layer, size);
    item *it = malloc((size_t)(n ? n : 1) * sizeof *it);
    double *load = calloc((size_t)size, sizeof *load);
    if (!it || !load) { /* an error, not a fallback: another rank's malloc may succeed, and every
                         * rank must reach the same owners (lwq_run_agree makes it every rank's) */
        free(it);
        free(load);
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory assigning the linears to ranks", p->layer);
    }
    for (int i = 0; i < n; i++) {
        if (c[i].format == LWQ_QFMT_NONE || (only && !only[i]))
            continue;
        int lead = i;
        for (int j = 0; j < i && lead == i && p->linears[i].group >= 0; j++)
            if (p->linears[j].group == p->linears[i].group && c[j].format != LWQ_QFMT_NONE && (!only || only[j]))
                lead = j;
        if (lead != i) { /* a later member of a fused group: with its lead */
            for (int k = 0; k < ni; k++)
                if (it[k].lead == lead)
                    it[k].cost += lwq_dist_cost(&p->linears[i], &c[i]);
            continue;
        }
        it[ni].lead = i;
        it[ni++].cost = lwq_dist_cost(&p->linears[i], &c[i]);
    }
    qsort(it, (size_t)ni, sizeof *it, by_cost);
    for (int k = 0; k < ni; k++) {
        int best = 0;
        for (int r = 1; r < size; r++)
            if (load[r] < load[best])
                best = r;
        load[best] += it[k].cost;
        owner[it[k].lead] = best;
    }
    for (int i = 0; i < n; i++) /* fused-group members follow their lead */
        if (owner[i] < 0 && c[i].format != LWQ_QFMT_NONE && (!only || only[i]))
            for (int j = 0; j < i && owner[i] < 0; j++)
                if (p->linears[j].group >= 0 && p->linears[j].group == p->linears[i].group && owner[j] >= 0)
                    owner[i] = owner[j];
    free(it);
    free(load);
    return 0;
}
