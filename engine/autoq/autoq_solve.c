/* engine/autoq/autoq_solve.c — from pass 1's scores to the chosen format of every group: the
 * budget in bytes, the knapsack (engine/autoq/mckp.h), the predicted size. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/autoq/autoq_internal.h"
#include "engine/autoq/mckp.h"

double lwq_aq_amplification(const lwq_aq_scores *s, int L)
{
    double a = 1;
    for (int M = L + 1; M < s->committed; M++)
        a *= s->rec[M].gain > 0 && isfinite(s->rec[M].gain) ? s->rec[M].gain : 1;
    return a;
}

double lwq_aq_score_of(const lwq_aq_scores *s, const lwq_aq_lrec *rec, const lwq_aq_gscore *g, int f)
{
    if (f == LWQ_QFMT_NONE)
        return 0;
    if (s->score == LWQ_AQ_SCORE_KL)
        return g->kl[f];
    /* the squared error the group alone adds to its layer's output, relative to that output (the
     * next layers read it through an RMSNorm: its size against the signal's is what they see),
     * times how much the later layers grow such an error (their measured gains): an error in an
     * early layer passes through more of them */
    int L = (int)(rec - s->rec);
    return rec->out_sq > 0 ? g->err[f] / rec->out_sq * lwq_aq_amplification(s, L) : 0;
}

int lwq_aq_routed_name(const char *name)
{
    if (strstr(name, "shared_expert"))
        return 0;
    for (const char *x = strstr(name, "experts"); x; x = strstr(x + 1, "experts")) {
        int before = x == name || x[-1] == '.', after = x[7] == 0 || x[7] == '.';
        if (before && after)
            return 1;
    }
    return 0;
}

uint64_t lwq_aq_cost_weight(const lwq_autoq_opts *o, const lwq_aq_gscore *g)
{
    if (!o->active_moe)
        return 1;
    return lwq_aq_routed_name(g->first) ? (uint64_t)llround(o->active_moe_ratio * LWQ_AQ_WEIGHT_ONE) : LWQ_AQ_WEIGHT_ONE;
}

void lwq_aq_solution_free(lwq_aq_solution *sol)
{
    free(sol->fmt);
    memset(sol, 0, sizeof *sol);
}

/* The least budget to print for a refusal: `bytes` in units of `per` bytes (bits per weight:
 * elements / 8; GB: 1e9), rounded UP to 1/`digits` and raised further until that printed number,
 * given back, passes the check below (floor(value * per) >= bytes): rounded to nearest, half of
 * the refusals printed a number that is refused again. */
static double least_printed(uint64_t bytes, double per, double digits)
{
    double v = ceil((double)bytes / per * digits) / digits;
    for (int i = 0; i < 4 && floor(v * per) < (double)bytes; i++)
        v = (round(v * digits) + 1) / digits;
    return v;
}

int lwq_aq_solve(const lwq_autoq_opts *o, const lwq_aq_scores *s, lwq_aq_solution *sol, lwq_error *e)
{
    memset(sol, 0, sizeof *sol);
    /* one: the weight of a linear that is no routed expert (1 under the weight cost model, so
     * its arithmetic is unchanged); the fixed linears weigh one (search() refuses a fixed routed
     * expert under active_moe) */
    uint64_t fixed_lin = 0, other = s->tail_bytes, elements = 0, one = o->active_moe ? LWQ_AQ_WEIGHT_ONE : 1;
    long double welements = 0; /* sum of weight x elements, exact below 2^64 */
    int n = 0;
    for (int L = 0; L < lwq_aq_nrec(s); L++) {
        fixed_lin += s->rec[L].fixed_bytes;
        other += s->rec[L].other_bytes;
        elements += s->rec[L].linear_elements;
        n += s->rec[L].ngroups;
        uint64_t grouped = 0;
        for (int k = 0; k < s->rec[L].ngroups; k++) {
            grouped += s->rec[L].g[k].elements;
            welements += (long double)s->rec[L].g[k].elements * (long double)lwq_aq_cost_weight(o, &s->rec[L].g[k]);
        }
        if (grouped > s->rec[L].linear_elements)
            return lwq_errf(e, LWQ_ESTATE, "layer %d: its groups hold more weights than its linears", L);
        welements += (long double)(s->rec[L].linear_elements - grouped) * (long double)one;
    }
    if (elements == 0)
        return lwq_errf(e, LWQ_EINVAL, "the model has no linear weights to search over");
    /* the weighted costs must fit the knapsack's integers, with room for their sums */
    long double wmax = (long double)fixed_lin * one;
    for (int L = 0; L < lwq_aq_nrec(s); L++)
        for (int k = 0; k < s->rec[L].ngroups; k++) {
            uint64_t mx = 0;
            for (int f = 0; f < LWQ_AQ_FORMATS; f++)
                mx = s->rec[L].g[k].allowed[f] && s->rec[L].g[k].cost[f] > mx ? s->rec[L].g[k].cost[f] : mx;
            wmax += (long double)mx * (long double)lwq_aq_cost_weight(o, &s->rec[L].g[k]);
        }
    if (wmax > 9.0e18L || welements > 9.0e18L)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "cost_model active_moe: the weighted sizes of this model (%.3Lg bytes x "
                        "2^20) exceed 64-bit integers", wmax);
    lwq_mckp_item *items = calloc((size_t)(n ? n : 1), sizeof *items);
    int *pick = calloc((size_t)(n ? n : 1), sizeof *pick);
    int *fmt_of = calloc((size_t)(n ? n : 1) * LWQ_AQ_FORMATS, sizeof *fmt_of);
    sol->fmt = calloc((size_t)(n ? n : 1), sizeof *sol->fmt);
    if (!items || !pick || !fmt_of || !sol->fmt) {
        free(items);
        free(pick);
        free(fmt_of);
        lwq_aq_solution_free(sol);
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    }
    uint64_t least = fixed_lin * one;
    for (int L = 0, i = 0; L < lwq_aq_nrec(s); L++)
        for (int k = 0; k < s->rec[L].ngroups; k++, i++) {
            const lwq_aq_gscore *g = &s->rec[L].g[k];
            uint64_t mn = UINT64_MAX, w = lwq_aq_cost_weight(o, g);
            for (int f = 0; f < LWQ_AQ_FORMATS; f++)
                if (g->allowed[f]) {
                    lwq_mckp_item *it = &items[i];
                    fmt_of[i * LWQ_AQ_FORMATS + it->nopt] = f;
                    it->cost[it->nopt] = g->cost[f] * w;
                    it->score[it->nopt] = lwq_aq_score_of(s, &s->rec[L], g, f);
                    it->nopt++;
                    mn = g->cost[f] * w < mn ? g->cost[f] * w : mn;
                }
            least += mn;
        }
    /* the budget for the groups: what the bits or GB allow minus what no choice changes */
    uint64_t budget = 0, fixed = o->bits > 0 ? fixed_lin * one : fixed_lin + other;
    long double want = o->bits > 0 ? floorl((long double)o->bits * welements / 8.0L) : floorl((long double)o->gb * 1e9L);
    int rc = 0;
    if (want < (long double)(o->bits > 0 ? least : least + other)) {
        char list[128];
        lwq_aq_formats_str(o->formats, list, sizeof list);
        if (o->bits > 0)
            rc = lwq_errf(e, LWQ_EINVAL, "--auto-quantize-bits %g is below the smallest mix this model and recipe "
                          "allow with --auto-quantize-formats %s: %.4f %sbits per weight (every group in its cheapest "
                          "of those formats; routers and the linears the recipe leaves unquantized at their source "
                          "size)", o->bits, list, least_printed(least, (double)(welements / 8.0L), 1e4),
                          o->active_moe ? "active_moe " : "");
        else
            rc = lwq_errf(e, LWQ_EINVAL, "--auto-quantize-gb %g is below the smallest mix this model and recipe "
                          "allow with --auto-quantize-formats %s: %.6f GB", o->gb, list,
                          least_printed(least + other, 1e9, 1e6));
    } else {
        budget = want - (long double)fixed > 1.8e19L ? UINT64_MAX : (uint64_t)(want - (long double)fixed);
        lwq_mckp_result res;
        if ((rc = lwq_mckp_solve(n, items, budget, 0, pick, &res, e)) == 0) {
            sol->ngroups = n;
            sol->score = res.score;
            sol->lp_bound = res.lp_bound;
            sol->free_items = res.free_items;
            sol->linear_bytes = fixed_lin;
            for (int L = 0, i = 0; L < lwq_aq_nrec(s); L++)
                for (int k = 0; k < s->rec[L].ngroups; k++, i++) {
                    sol->fmt[i] = (uint8_t)fmt_of[i * LWQ_AQ_FORMATS + pick[i]];
                    sol->linear_bytes += s->rec[L].g[k].cost[sol->fmt[i]];
                }
            sol->linear_elements = elements;
            sol->bytes = sol->linear_bytes + other;
            sol->bits = 8.0 * (double)sol->linear_bytes / (double)elements;
            sol->weighted_elements = (double)(welements / (long double)one);
            sol->active_bits = (double)(8.0L * ((long double)fixed_lin * one + (long double)res.cost) / welements);
        }
    }
    free(items);
    free(pick);
    free(fmt_of);
    if (rc)
        lwq_aq_solution_free(sol);
    return rc;
}

int lwq_aq_uniform(const lwq_aq_scores *s, int pref, lwq_aq_solution *sol, lwq_error *e)
{
    memset(sol, 0, sizeof *sol);
    int n = 0;
    for (int L = 0; L < lwq_aq_nrec(s); L++)
        n += s->rec[L].ngroups;
    if (!(sol->fmt = calloc((size_t)(n ? n : 1), sizeof *sol->fmt)))
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    sol->ngroups = n;
    uint64_t other = s->tail_bytes;
    for (int L = 0, i = 0; L < lwq_aq_nrec(s); L++) {
        const lwq_aq_lrec *r = &s->rec[L];
        other += r->other_bytes;
        sol->linear_bytes += r->fixed_bytes;
        sol->linear_elements += r->linear_elements;
        for (int k = 0; k < r->ngroups; k++, i++) {
            const lwq_aq_gscore *g = &r->g[k];
            int f = g->allowed[pref] ? pref : g->allowed[LWQ_QFMT_FP8] ? LWQ_QFMT_FP8
                    : g->allowed[LWQ_QFMT_NVFP4] ? LWQ_QFMT_NVFP4 : g->allowed[LWQ_AQ_NVFP4_MSE] ? LWQ_AQ_NVFP4_MSE
                    : g->allowed[LWQ_AQ_W4A16] ? LWQ_AQ_W4A16 : g->allowed[LWQ_AQ_W4A16_F46] ? LWQ_AQ_W4A16_F46
                    : LWQ_QFMT_NONE;
            sol->fmt[i] = (uint8_t)f;
            sol->linear_bytes += g->cost[f];
            sol->score += lwq_aq_score_of(s, r, g, f);
        }
    }
    sol->bytes = sol->linear_bytes + other;
    sol->bits = sol->linear_elements ? 8.0 * (double)sol->linear_bytes / (double)sol->linear_elements : 0;
    return 0;
}
