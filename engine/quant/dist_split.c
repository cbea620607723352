/* engine/quant/dist_split.c — who computes what: batch ranges and the quantization assignment. */
#include "engine/quant/dist.h"

#include <math.h>
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

int lwq_dist_splittable(const lwq_arch_linear *l, const lwq_quant_choice *c)
{
    return c->format == LWQ_QFMT_NVFP4 && c->algo != LWQ_ALGO_GPTQ && l->role != LWQ_ROLE_LIN_CONV &&
           l->out_features > 0;
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

static int wanted(const lwq_quant_choice *c, const uint8_t *only, int i)
{
    return c[i].format != LWQ_QFMT_NONE && (!only || only[i]);
}

/* The linears that cannot be split, whole: largest first onto the least loaded rank.  it: n
 * items, lead: n ints of scratch. */
static void assign_whole(const lwq_arch_layer *p, const lwq_quant_choice *c, const uint8_t *only, int size,
                         item *it, int *lead, double *load, lwq_qlayer_rows *share)
{
    int n = p->nlinears, ni = 0;
    for (int i = 0; i < n; i++) {
        lead[i] = -1;
        if (!wanted(c, only, i) || lwq_dist_splittable(&p->linears[i], &c[i]))
            continue;
        lead[i] = i;
        for (int j = 0; j < i && lead[i] == i && p->linears[i].group >= 0; j++)
            if (p->linears[j].group == p->linears[i].group && lead[j] == j)
                lead[i] = j;
        if (lead[i] != i) { /* a later member of a fused group: with its lead */
            for (int k = 0; k < ni; k++)
                if (it[k].lead == lead[i])
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
        for (int i = it[k].lead; i < n; i++) /* the lead and its group's members */
            if (lead[i] == it[k].lead)
                share[(size_t)i * size + best] = (lwq_qlayer_rows){0, p->linears[i].out_features};
    }
}

static int split_here(const lwq_arch_layer *p, const lwq_quant_choice *c, const uint8_t *only, int i)
{
    return wanted(c, only, i) && lwq_dist_splittable(&p->linears[i], &c[i]);
}

/* The first splittable linear at or after i (n: none). */
static int next_split(const lwq_arch_layer *p, const lwq_quant_choice *c, const uint8_t *only, int i)
{
    while (i < p->nlinears && !split_here(p, c, only, i))
        i++;
    return i;
}

/* The level T that `split` fills every rank below it up to: sum over ranks of
 * max(0, T - load[r]) = split.  sorted: size doubles of scratch. */
static double fill_level(const double *load, int size, double split, double *sorted)
{
    for (int r = 0; r < size; r++) {
        int k = r; /* insertion sort: size is small */
        while (k > 0 && sorted[k - 1] > load[r]) {
            sorted[k] = sorted[k - 1];
            k--;
        }
        sorted[k] = load[r];
    }
    double below = 0, level = 0;
    for (int k = 1; k <= size; k++) {
        below += sorted[k - 1];
        level = (split + below) / k;
        if (k == size || level <= sorted[k])
            break;
    }
    return level;
}

/* The splittable linears' rows in linear order onto the ranks in rank order, each rank up to
 * `level`; the last rank below it takes what is left. */
static void assign_rows(const lwq_arch_layer *p, const lwq_quant_choice *c, const uint8_t *only, int size,
                        const double *load, double level, lwq_qlayer_rows *share)
{
    int last = -1, i = next_split(p, c, only, 0);
    for (int r = 0; r < size; r++)
        if (level > load[r])
            last = r;
    int64_t pos = 0;
    for (int r = 0; r <= last && i < p->nlinears; r++) {
        double budget = level > load[r] ? level - load[r] : 0;
        while (i < p->nlinears && (r == last || budget > 0)) {
            int64_t rows = p->linears[i].out_features, take = rows - pos;
            double per_row = lwq_dist_cost(&p->linears[i], &c[i]) / (double)rows;
            if (r != last && (double)take * per_row > budget) {
                double t = floor(budget / per_row + 0.5);
                take = t < 0 ? 0 : t > (double)take ? take : (int64_t)t;
            }
            if (take > 0)
                share[(size_t)i * size + r] = (lwq_qlayer_rows){pos, pos + take};
            budget -= (double)take * per_row;
            if ((pos += take) < rows)
                break; /* this rank is full */
            pos = 0;
            i = next_split(p, c, only, i + 1);
        }
    }
}

int lwq_dist_assign(const lwq_arch_layer *p, const lwq_quant_choice *c, const uint8_t *only, int size,
                    lwq_qlayer_rows *share, lwq_error *e)
{
    int n = p->nlinears;
    if (size < 1)
        return lwq_errf(e, LWQ_EINVAL, "layer %d: %d ranks", p->layer, size);
    for (size_t k = 0; k < (size_t)n * (size_t)size; k++)
        share[k] = (lwq_qlayer_rows){0, 0};
    item *it = malloc((size_t)(n ? n : 1) * sizeof *it);
    int *lead = malloc((size_t)(n ? n : 1) * sizeof *lead);
    double *load = calloc((size_t)size, sizeof *load), *sorted = calloc((size_t)size, sizeof *sorted);
    if (!it || !lead || !load || !sorted) { /* an error, not a fallback: another rank's malloc may
                                             * succeed, and every rank must reach the same shares
                                             * (lwq_run_agree makes it every rank's) */
        free(it);
        free(lead);
        free(load);
        free(sorted);
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory assigning the linears to ranks", p->layer);
    }
    assign_whole(p, c, only, size, it, lead, load, share);
    double split = 0; /* the splittable linears' cost */
    for (int i = 0; i < n; i++)
        if (split_here(p, c, only, i))
            split += lwq_dist_cost(&p->linears[i], &c[i]);
    if (split > 0)
        assign_rows(p, c, only, size, load, fill_level(load, size, split, sorted), share);
    free(it);
    free(lead);
    free(load);
    free(sorted);
    return 0;
}
