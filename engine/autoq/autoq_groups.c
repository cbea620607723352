/* engine/autoq/autoq_groups.c — search groups, allowed formats, byte costs (autoq_groups.h). */
#include "engine/autoq/autoq_groups.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant/qlayer.h"

static const char *const kind_names[LWQ_AQ_KINDS] = {"qkv", "o", "gate_up", "down", "experts", "linear_attn",
                                                      "lm_head"};

const char *lwq_aq_kind_name(lwq_aq_kind k) { return (unsigned)k < LWQ_AQ_KINDS ? kind_names[k] : "?"; }

/* The search group kind of a role, or -1 for linears that are not searched: routers (never
 * quantized) and the conv1d (not emulated by the scoring, so it keeps the base recipe's choice). */
static int kind_of(lwq_linear_role r)
{
    switch (r) {
    case LWQ_ROLE_Q: case LWQ_ROLE_K: case LWQ_ROLE_V:
    case LWQ_ROLE_Q_A: case LWQ_ROLE_Q_B: case LWQ_ROLE_KV_A: case LWQ_ROLE_KV_B:
    case LWQ_ROLE_IDX_Q_B: case LWQ_ROLE_IDX_K: case LWQ_ROLE_IDX_WEIGHTS:
        return LWQ_AQ_QKV;
    case LWQ_ROLE_O:
        return LWQ_AQ_O;
    case LWQ_ROLE_GATE: case LWQ_ROLE_UP: case LWQ_ROLE_SHARED_GATE: case LWQ_ROLE_SHARED_UP:
        return LWQ_AQ_GATE_UP;
    case LWQ_ROLE_DOWN: case LWQ_ROLE_SHARED_DOWN:
        return LWQ_AQ_DOWN;
    case LWQ_ROLE_EXPERT_GATE: case LWQ_ROLE_EXPERT_UP: case LWQ_ROLE_EXPERT_DOWN:
        return LWQ_AQ_EXPERTS;
    case LWQ_ROLE_LIN_QKVZ: case LWQ_ROLE_LIN_BA: case LWQ_ROLE_LIN_OUT:
        return LWQ_AQ_LINEAR_ATTN;
    default:
        return -1;
    }
}

static int can_take(const lwq_arch_linear *l, int f)
{
    return lwq_aq_qformat(f) != LWQ_QFMT_NVFP4 || l->in_features % 16 == 0;
}

_Static_assert(LWQ_QFMT_NONE == 0 && LWQ_QFMT_NVFP4 == 1 && LWQ_QFMT_FP8 == 2 && LWQ_AQ_W4A16 == 3 &&
                   LWQ_AQ_NVFP4_MSE == 4 && LWQ_AQ_W4A16_F46 == 5 && LWQ_AQ_FORMATS == 6,
               "the candidate indexes extend lwq_qformat");
static const char *const format_names[LWQ_AQ_FORMATS] = {"none", "nvfp4", "fp8", "w4a16_nvfp4",
                                                         "nvfp4_w4a4_weight_mse_fp8_sweep",
                                                         "w4a16_nvfp4_four_over_six"};

lwq_qformat lwq_aq_qformat(int f)
{
    return f == LWQ_AQ_W4A16 || f == LWQ_AQ_NVFP4_MSE || f == LWQ_AQ_W4A16_F46 ? LWQ_QFMT_NVFP4 : (lwq_qformat)f;
}
int lwq_aq_weight_only(int f) { return f == LWQ_AQ_W4A16 || f == LWQ_AQ_W4A16_F46; }

uint64_t lwq_aq_quant_bytes(uint64_t n, int f)
{
    if (lwq_aq_qformat(f) == LWQ_QFMT_NVFP4)
        return n / 2 + n / 16 + (lwq_aq_weight_only(f) ? 4 : 8);
    return f == LWQ_QFMT_FP8 ? n + 8 : 0;
}

lwq_quant_choice lwq_aq_candidate_choice(const lwq_quant_choice *base, int f, int own_algos)
{
    lwq_quant_choice c = *base;
    c.format = lwq_aq_qformat(f);
    c.weight_format = c.format;
    /* W4A4 NVFP4, W8A8 FP8, weight-only NVFP4 (its input quantizer off) or none */
    c.weight_only = lwq_aq_weight_only(f);
    c.input_format = c.weight_only ? LWQ_QFMT_NONE : c.format;
    c.split = 0;
    if (c.format == LWQ_QFMT_NONE || c.weight_only)
        c.has_input_amax = 0;
    if (c.format != LWQ_QFMT_NONE && (own_algos || f == LWQ_AQ_NVFP4_MSE || f == LWQ_AQ_W4A16_F46)) {
        /* its own weight algorithm, whatever the base recipe's: max, unless the candidate says otherwise */
        static const double f46[3] = LWQ_AQ_F46_MULT;
        c.algo = f == LWQ_AQ_NVFP4_MSE || f == LWQ_AQ_W4A16_F46 ? LWQ_ALGO_MSE : LWQ_ALGO_MAX;
        c.fp8_scale_sweep = f == LWQ_AQ_NVFP4_MSE;
        c.four_over_six = f == LWQ_AQ_W4A16_F46;
        c.mse_range = f == LWQ_AQ_W4A16_F46 ? LWQ_MSE_RANGE_OWN : LWQ_MSE_RANGE_DEFAULT;
        if (f == LWQ_AQ_W4A16_F46)
            memcpy(c.mse_mult, f46, sizeof f46);
    }
    if (own_algos) /* the candidate's own input quantizer: calibrated, not a baseline's constant_amax */
        c.has_input_amax = 0;
    return c;
}
const char *lwq_aq_format_name(int f) { return f >= 0 && f < LWQ_AQ_FORMATS ? format_names[f] : "?"; }

int lwq_aq_format_parse(const char *name)
{
    for (int f = 0; f < LWQ_AQ_FORMATS; f++)
        if (!strcmp(name, format_names[f]))
            return f;
    return -1;
}

int lwq_aq_nquantized(const uint8_t allowed[LWQ_AQ_FORMATS])
{
    int n = 0;
    for (int f = 1; f < LWQ_AQ_FORMATS; f++)
        n += allowed[f] != 0;
    return n;
}

void lwq_aq_layer_free(lwq_aq_layer *a)
{
    for (int k = 0; a->g && k < a->ngroups; k++)
        free(a->g[k].lin);
    free(a->g);
    free(a->group_of);
    free(a->base);
    memset(a, 0, sizeof *a);
}

/* Whether one of o's spaces names linear l (any of its patterns). */
static int space_names(const lwq_autoq_opts *o, const lwq_arch_linear *l)
{
    for (int s = 0; s < o->nspaces; s++)
        for (int j = 0; j < o->spaces[s].npatterns; j++)
            if (lwq_glob_match(o->spaces[s].pattern[j], l->name))
                return 1;
    return 0;
}

static int layer_init(lwq_aq_layer *a, const lwq_arch_layer *p, const lwq_recipe *r, const uint8_t want[LWQ_AQ_FORMATS],
                      const lwq_autoq_opts *o, lwq_error *e);

int lwq_aq_layer_init(lwq_aq_layer *a, const lwq_arch_layer *p, const lwq_recipe *r,
                      const uint8_t want[LWQ_AQ_FORMATS], lwq_error *e)
{
    return layer_init(a, p, r, want, NULL, e);
}

/* o (may be NULL): with a fixed baseline, a linear a space names is searched whatever the baseline gives it
 * (Model Optimizer replaces a searched module's baseline quantizers by its candidates'), except what the
 * base_disabled_layers unit disables and lwq never searches: routers and gates (not grouped), the conv1d,
 * the linear-attention in_proj_a / in_proj_b (in_proj_ba). */
static int layer_init(lwq_aq_layer *a, const lwq_arch_layer *p, const lwq_recipe *r, const uint8_t want[LWQ_AQ_FORMATS],
                      const lwq_autoq_opts *o, lwq_error *e)
{
    memset(a, 0, sizeof *a);
    a->layer = p->layer;
    int n = p->nlinears;
    a->group_of = malloc((size_t)(n ? n : 1) * sizeof *a->group_of);
    a->base = calloc((size_t)(n ? n : 1), sizeof *a->base);
    a->g = calloc(LWQ_AQ_KINDS, sizeof *a->g);
    if (!a->group_of || !a->base || !a->g) {
        lwq_aq_layer_free(a);
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory", p->layer);
    }
    int slot[LWQ_AQ_KINDS];
    for (int k = 0; k < LWQ_AQ_KINDS; k++)
        slot[k] = -1;
    for (int i = 0; i < n; i++) {
        const lwq_arch_linear *l = &p->linears[i];
        a->base[i] = lwq_qlayer_choice(r, p, i);
        a->group_of[i] = -1;
        if (a->base[i].split && !l->is_router) {
            int rc = lwq_recipe_split_error(&a->base[i], l->name, e);
            lwq_aq_layer_free(a);
            return rc;
        }
        int k = kind_of(l->role);
        /* the base recipe's exclusions stand: what it leaves unquantized is not searched */
        int searched = o && o->baseline && l->role != LWQ_ROLE_LIN_BA && space_names(o, l);
        if (k < 0 || l->is_router || (a->base[i].format == LWQ_QFMT_NONE && !searched))
            continue;
        if (slot[k] < 0) {
            slot[k] = a->ngroups++;
            lwq_aq_group *g = &a->g[slot[k]];
            g->kind = (lwq_aq_kind)k;
            g->lin = malloc((size_t)n * sizeof *g->lin);
            if (!g->lin) {
                lwq_aq_layer_free(a);
                return lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory", p->layer);
            }
            for (int f = 0; f < LWQ_AQ_FORMATS; f++)
                g->allowed[f] = want[f] != 0;
        }
        lwq_aq_group *g = &a->g[slot[k]];
        g->lin[g->n++] = i;
        g->elements += (uint64_t)l->out_features * (uint64_t)l->in_features;
        for (int f = 1; f < LWQ_AQ_FORMATS; f++)
            g->allowed[f] &= (uint8_t)can_take(l, f);
        a->group_of[i] = slot[k];
    }
    /* the list means what it says: a group that can take none of its formats is refused, not
     * quietly left in the source dtype */
    for (int k = 0; k < a->ngroups; k++) {
        const lwq_aq_group *g = &a->g[k];
        if (g->allowed[LWQ_QFMT_NONE] || lwq_aq_nquantized(g->allowed))
            continue;
        const lwq_arch_linear *bad = &p->linears[g->lin[0]];
        for (int m = 0; m < g->n; m++)
            if (!can_take(&p->linears[g->lin[m]], LWQ_QFMT_NVFP4)) {
                bad = &p->linears[g->lin[m]];
                break;
            }
        char list[128];
        lwq_aq_formats_str(want, list, sizeof list);
        int rc = lwq_errf(e, LWQ_EINVAL, "layer %d: the %s group can take none of --auto-quantize-formats %s: NVFP4 "
                          "(and w4a16_nvfp4) needs in-features divisible by 16, and %s has %lld%s; add fp8 or none to the formats",
                          p->layer, lwq_aq_kind_name(g->kind), list, bad->name, (long long)bad->in_features,
                          bad->role == LWQ_ROLE_LIN_CONV ? " (a conv1d)" : "");
        lwq_aq_layer_free(a);
        return rc;
    }
    return 0;
}

/* The candidate a base choice is: NVFP4 with its input quantizer off is W4A16 (W4A16_F46 with
 * Four-over-Six), NVFP4 under mse with the FP8 scale sweep NVFP4_MSE. */
static int base_candidate(const lwq_quant_choice *b)
{
    if (b->format == LWQ_QFMT_NVFP4 && b->weight_only)
        return b->four_over_six ? LWQ_AQ_W4A16_F46 : LWQ_AQ_W4A16;
    if (b->format == LWQ_QFMT_NVFP4 && b->algo == LWQ_ALGO_MSE && b->fp8_scale_sweep)
        return LWQ_AQ_NVFP4_MSE;
    return (int)b->format;
}

/* Group k, which no space matches, under a fixed baseline: its one choice is the baseline's format, which
 * its members must share (Model Optimizer's _resolve_fixed_group_recipe refuses a runtime group the
 * baseline gives incompatible formats). */
static int fix_to_baseline(lwq_aq_layer *a, const lwq_arch_layer *p, int k, lwq_error *e)
{
    lwq_aq_group *g = &a->g[k];
    int f0 = base_candidate(&a->base[g->lin[0]]);
    for (int i = 1; i < g->n; i++) {
        int f = base_candidate(&a->base[g->lin[i]]);
        if (f != f0)
            return lwq_errf(e, LWQ_EINVAL, "layer %d: the fixed quantize baseline gives the %s group two formats (%s "
                            "%s, %s %s), which no module_search_spaces entry matches: move the whole group into one "
                            "entry (Model Optimizer refuses it alike)", p->layer, lwq_aq_kind_name(g->kind),
                            p->linears[g->lin[0]].name, lwq_aq_format_name(f0), p->linears[g->lin[i]].name,
                            lwq_aq_format_name(f));
    }
    memset(g->allowed, 0, sizeof g->allowed);
    g->allowed[f0] = 1;
    g->fixed = 1;
    return 0;
}

/* The effective bits Model Optimizer gives a candidate (estimate_quant_compression: NVFP4's numerics carry
 * effective_bits 4.5, FP8 e4m3 counts 4 + 3 + 1), times 2. */
static int half_bits(int f)
{
    return f == LWQ_QFMT_FP8 ? 16 : f == LWQ_QFMT_NONE ? 32 : 9;
}

int lwq_aq_baseline_check(const lwq_autoq_opts *o, const lwq_arch_layer *plans, int N, lwq_error *e)
{
    /* with the baseline's effective_bits Model Optimizer costs every group it quantizes at them
     * (_fixed_module_weight_compression's override), so no format is other than its cost */
    if (!o->baseline || o->baseline_bits > 0)
        return 0;
    /* the baseline's compression: its cheapest format anywhere (weights, inputs, the KV cache) */
    int least = o->q.recipe->kv == LWQ_KV_NONE ? half_bits(LWQ_QFMT_NONE)
                : o->q.recipe->kv == LWQ_KV_NVFP4_CAST ? half_bits(LWQ_QFMT_NVFP4) : half_bits(LWQ_QFMT_FP8);
    for (int L = 0; L < N; L++)
        for (int i = 0; i < plans[L].nlinears; i++) {
            lwq_quant_choice c = lwq_qlayer_choice(o->q.recipe, &plans[L], i);
            if (c.format != LWQ_QFMT_NONE && half_bits(c.format) < least)
                least = half_bits(c.format);
            if (c.split && c.input_format != LWQ_QFMT_NONE && half_bits(c.input_format) < least)
                least = half_bits(c.input_format);
        }
    int rc = 0;
    for (int L = 0; L < N && rc == 0; L++) {
        lwq_aq_layer A;
        if ((rc = lwq_aq_layer_build(&A, &plans[L], o->q.recipe, o, e)) != 0)
            return rc;
        for (int k = 0; k < A.ngroups && rc == 0; k++) {
            int f = 0;
            while (A.g[k].fixed && !A.g[k].allowed[f])
                f++;
            if (A.g[k].fixed && half_bits(f) != least)
                rc = lwq_errf(e, LWQ_EINVAL, "layer %d: the fixed quantize baseline gives the %s group (%s), which no "
                              "module_search_spaces entry matches, %s at %g effective bits, but the baseline's cost is "
                              "its cheapest format's, %g: use one uniform format for the modules no space matches and "
                              "put the others in module_search_spaces (Model Optimizer refuses it alike)", L,
                              lwq_aq_kind_name(A.g[k].kind), plans[L].linears[A.g[k].lin[0]].name,
                              lwq_aq_format_name(f), half_bits(f) / 2.0, least / 2.0);
        }
        lwq_aq_layer_free(&A);
    }
    return rc;
}

/* Group k's formats under o's module_search_spaces: the matching space's, else o->unmatched. */
static int apply_spaces(lwq_aq_layer *a, const lwq_arch_layer *p, int k, const lwq_autoq_opts *o, lwq_error *e)
{
    lwq_aq_group *g = &a->g[k];
    int hit = -1;
    for (int s = 0; s < o->nspaces; s++) {
        const lwq_recipe_aq_space *sp = &o->spaces[s];
        int m = 0, miss = -1;
        for (int i = 0; i < g->n; i++) {
            int any = 0;
            for (int j = 0; j < sp->npatterns && !any; j++)
                any = lwq_glob_match(sp->pattern[j], p->linears[g->lin[i]].name);
            m += any;
            if (!any && miss < 0)
                miss = g->lin[i];
        }
        if (!m)
            continue;
        if (m < g->n)
            return lwq_errf(e, LWQ_EINVAL, "layer %d: module_search_spaces[%d] matches part of the %s group (not %s): "
                            "a group takes one format, so a space must match all of it or none of it (Model "
                            "Optimizer refuses it alike)", p->layer, s, lwq_aq_kind_name(g->kind),
                            p->linears[miss].name);
        if (hit >= 0)
            return lwq_errf(e, LWQ_EINVAL, "layer %d: module_search_spaces[%d] and [%d] both match the %s group (%s): "
                            "make their patterns disjoint (Model Optimizer refuses it alike)", p->layer, hit, s,
                            lwq_aq_kind_name(g->kind), p->linears[g->lin[0]].name);
        hit = s;
    }
    if (hit < 0 && o->baseline)
        return fix_to_baseline(a, p, k, e);
    uint8_t want[LWQ_AQ_FORMATS];
    if (hit >= 0) {
        const lwq_recipe_aq_space *sp = &o->spaces[hit];
        want[LWQ_QFMT_NONE] = (uint8_t)(sp->allow_no_quant != 0);
        want[LWQ_QFMT_NVFP4] = (uint8_t)(sp->nvfp4 != 0);
        want[LWQ_QFMT_FP8] = (uint8_t)(sp->fp8 != 0);
        want[LWQ_AQ_W4A16] = (uint8_t)(sp->w4a16 != 0);
        want[LWQ_AQ_NVFP4_MSE] = (uint8_t)(sp->nvfp4_mse != 0);
        want[LWQ_AQ_W4A16_F46] = (uint8_t)(sp->w4a16_f46 != 0);
    } else {
        memcpy(want, o->unmatched, sizeof want);
    }
    g->allowed[LWQ_QFMT_NONE] = want[LWQ_QFMT_NONE];
    for (int f = 1; f < LWQ_AQ_FORMATS; f++) {
        g->allowed[f] = want[f];
        for (int i = 0; i < g->n; i++)
            g->allowed[f] &= (uint8_t)can_take(&p->linears[g->lin[i]], f);
    }
    if (g->allowed[LWQ_QFMT_NONE] || lwq_aq_nquantized(g->allowed))
        return 0;
    char list[128];
    lwq_aq_formats_str(want, list, sizeof list);
    if (hit >= 0)
        return lwq_errf(e, LWQ_EINVAL, "layer %d: the %s group (%s) can take none of module_search_spaces[%d]'s "
                        "candidates %s (NVFP4 and w4a16_nvfp4 need in-features divisible by 16) and its allow_no_quant "
                        "is false", p->layer, lwq_aq_kind_name(g->kind), p->linears[g->lin[0]].name, hit, list);
    return lwq_errf(e, LWQ_EINVAL, "layer %d: the %s group (%s), which no module_search_spaces entry matches, can take "
                    "none of the top-level candidates %s (NVFP4 and w4a16_nvfp4 need in-features divisible by 16)",
                    p->layer, lwq_aq_kind_name(g->kind), p->linears[g->lin[0]].name, list);
}

int lwq_aq_layer_build(lwq_aq_layer *a, const lwq_arch_layer *p, const lwq_recipe *r, const lwq_autoq_opts *o,
                       lwq_error *e)
{
    int rc = layer_init(a, p, r, o->formats, o, e);
    if (rc)
        return rc;
    a->own_algos = o->own_algos;
    for (int k = 0; rc == 0 && k < a->ngroups && o->nspaces > 0; k++)
        rc = apply_spaces(a, p, k, o, e);
    if (rc)
        lwq_aq_layer_free(a);
    return rc;
}

void lwq_aq_formats_str(const uint8_t want[LWQ_AQ_FORMATS], char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s%s%s%s%s", want[LWQ_QFMT_NVFP4] ? ",nvfp4" : "",
             want[LWQ_AQ_NVFP4_MSE] ? ",nvfp4_w4a4_weight_mse_fp8_sweep" : "", want[LWQ_QFMT_FP8] ? ",fp8" : "",
             want[LWQ_AQ_W4A16] ? ",w4a16_nvfp4" : "", want[LWQ_AQ_W4A16_F46] ? ",w4a16_nvfp4_four_over_six" : "",
             want[LWQ_QFMT_NONE] ? ",none" : "");
    if (buf[0] == ',')
        memmove(buf, buf + 1, strlen(buf));
}

void lwq_aq_choices(const lwq_aq_layer *a, const lwq_arch_layer *p, const uint8_t *fmt, lwq_quant_choice *out)
{
    /* a fixed group (the baseline's one choice) is the baseline's choice as it is */
    for (int i = 0; i < p->nlinears; i++)
        out[i] = a->group_of[i] < 0 || a->g[a->group_of[i]].fixed
                     ? a->base[i]
                     : lwq_aq_candidate_choice(&a->base[i], fmt[a->group_of[i]], a->own_algos);
}

uint64_t lwq_aq_linear_bytes(const lwq_tlist *t, const lwq_arch_linear *l)
{
    static const char *const parts[] = {".weight", ".weight_scale", ".weight_scale_2", ".input_scale"};
    uint64_t b = 0;
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
        char name[LWQ_ARCH_NAME_MAX + 24];
        snprintf(name, sizeof name, "%s%s", l->name, parts[k]);
        const lwq_htensor *h = lwq_tlist_find(t, name);
        if (!h && k == 0)
            return 0;
        b += h ? h->nbytes : 0;
    }
    return b;
}
