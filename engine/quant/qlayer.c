#include "engine/quant/qlayer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "layout/arch/arch_qnames.h"
#include "engine/quant/qlayer_gptq.h"
#include "engine/quant/qops.h"

void lwq_qlayer_report_free(lwq_qlayer_report *rep)
{
    if (!rep)
        return;
    free(rep->gptq);
    rep->gptq = NULL;
    rep->gptq_n = rep->gptq_cap = 0;
}

/* 1: GPTQ applies; 0: the max path (a conv1d, or a routed expert no calibration token reached);
 * < 0: the statistics hold no GPTQ Hessian for this linear (a caller that did not ask for one must
 * not get max codes under a GPTQ name). */
static int gptq_applies(const lwq_arch_linear *l, const lwq_quant_choice *c, const lwq_layer_stats *st, int idx,
                        lwq_qlayer_report *rep, lwq_error *e)
{
    if (c->algo != LWQ_ALGO_GPTQ || l->role == LWQ_ROLE_LIN_CONV)
        return 0;
    if (!st->hsum[idx] || st->hkind[idx] != LWQ_STATS_H_FULL)
        return lwq_errf(e, LWQ_ESTATE, "%s: GPTQ was chosen but no Hessian was collected for it", l->name);
    if (!st->hdone[idx])
        return lwq_errf(e, LWQ_ESTATE, "%s: its Hessian was not finished (lwq_stats_finish)", l->name);
    if (st->in_rows[idx] > 0 && st->htokens[idx] > 0)
        return 1;
    rep->gptq_fallback++;
    return 0;
}

lwq_quant_choice lwq_qlayer_choice(const lwq_recipe *r, const lwq_arch_layer *p, int i)
{
    const lwq_arch_linear *l = &p->linears[i];
    /* a Model Optimizer recipe's quantizer_name globs see the in-memory names (fused experts) */
    lwq_qnames q;
    lwq_arch_qnames(p, l, &q);
    lwq_quant_choice c = lwq_recipe_resolve_names(r, &q, lwq_arch_is_mla_projection(p, l) ? LWQ_MODULE_MLA_PROJ : 0);
    if (l->is_router)
        c.format = LWQ_QFMT_NONE;
    return c;
}

int lwq_qlayer_hessian(const lwq_arch_linear *l, const lwq_quant_choice *c)
{
    if (c->format == LWQ_QFMT_NVFP4 && c->algo == LWQ_ALGO_LOCAL_HESSIAN)
        return LWQ_STATS_H_BLOCK;
    if (c->format != LWQ_QFMT_NONE && c->algo == LWQ_ALGO_GPTQ && l->role != LWQ_ROLE_LIN_CONV)
        return LWQ_STATS_H_FULL;
    return LWQ_STATS_H_NONE;
}

int lwq_qlayer_check(const lwq_arch_layer *plan, const lwq_quant_choice *choice, lwq_error *e)
{
    for (int i = 0; i < plan->nlinears; i++) {
        const lwq_arch_linear *l = &plan->linears[i];
        if (choice[i].split && !l->is_router)
            return lwq_recipe_split_error(&choice[i], l->name, e);
        if (choice[i].format == LWQ_QFMT_NONE)
            continue;
        if (l->is_router)
            return lwq_errf(e, LWQ_EINVAL, "%s is a router; routers are never quantized (fix the recipe)", l->name);
        if (l->role == LWQ_ROLE_LIN_CONV && choice[i].format != LWQ_QFMT_FP8)
            return lwq_errf(e, LWQ_EINVAL, "%s is a depthwise conv1d; only per-tensor FP8 is supported for it, not %s",
                            l->name, lwq_qformat_name(choice[i].format));
        if (choice[i].four_over_six && (choice[i].algo != LWQ_ALGO_MSE || choice[i].fp8_scale_sweep))
            return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: Four-over-Six NVFP4 is implemented with the mse multiplier search "
                            "(Model Optimizer's nvfp4_four_over_six), not with %s%s", l->name,
                            lwq_algo_name(choice[i].algo), choice[i].fp8_scale_sweep ? " + fp8_scale_sweep" : "");
        float m[LWQ_MSE_MAX_STEPS];
        if (choice[i].mse_range != LWQ_MSE_RANGE_DEFAULT && lwq_choice_mse_candidates(&choice[i], m) < 1)
            return lwq_errf(e, LWQ_EINVAL, "%s: mse multipliers %g, %g, %g give no candidates (at most %d)", l->name,
                            choice[i].mse_mult[0], choice[i].mse_mult[1], choice[i].mse_mult[2], LWQ_MSE_MAX_STEPS);
        if (choice[i].format == LWQ_QFMT_NVFP4 && l->in_features % 16 != 0)
            return lwq_errf(e, LWQ_EINVAL, "%s: in-features %lld is not a multiple of 16; NVFP4 needs blocks of 16",
                            l->name, (long long)l->in_features);
        if (l->group < 0)
            continue;
        for (int j = 0; j < plan->nlinears; j++) {
            const lwq_arch_linear *m = &plan->linears[j];
            if (m->group == l->group && (choice[j].format != choice[i].format ||
                                         choice[j].weight_only != choice[i].weight_only))
                return lwq_errf(e, LWQ_EINVAL,
                                "%s is %s but %s, which serving engines fuse with it, is %s; a fused group "
                                "must be quantized in one format",
                                l->name, lwq_choice_format_name(&choice[i]), m->name,
                                lwq_choice_format_name(&choice[j]));
        }
    }
    return 0;
}

static const lwq_htensor *weight_of(const lwq_tlist *src, const lwq_arch_linear *l, lwq_error *e)
{
    char name[LWQ_ARCH_NAME_MAX + 16];
    snprintf(name, sizeof name, "%s.weight", l->name);
    const lwq_htensor *t = lwq_tlist_find(src, name);
    if (!t) {
        lwq_errf(e, LWQ_ENOENT, "tensor %s is missing", name);
        return NULL;
    }
    /* a conv1d weight [channels, 1, kernel] is quantized as the [channels, kernel] matrix it is in
     * memory, and written back with its 3-D shape */
    int conv = l->role == LWQ_ROLE_LIN_CONV;
    if (t->ndim != (conv ? 3 : 2) || t->shape[0] != l->out_features || t->shape[t->ndim - 1] != l->in_features ||
        (conv && t->shape[1] != 1)) {
        if (conv)
            lwq_errf(e, LWQ_EFORMAT, "tensor %s: expected shape [%lld, 1, %lld]", name, (long long)l->out_features,
                     (long long)l->in_features);
        else
            lwq_errf(e, LWQ_EFORMAT, "tensor %s: expected shape [%lld, %lld]", name, (long long)l->out_features,
                     (long long)l->in_features);
        return NULL;
    }
    if (t->dtype != LWQ_BF16 && t->dtype != LWQ_F16 && t->dtype != LWQ_F32) {
        lwq_errf(e, LWQ_EUNSUPPORTED, "tensor %s: dtype %s cannot be quantized (BF16, F16, F32 only)", name,
                 lwq_dtype_name(t->dtype));
        return NULL;
    }
    return t;
}

static void mark_piece(lwq_tlist *out, int piece, int64_t r0, int64_t rows_all)
{
    if (piece) {
        out->v[out->n - 1].row0 = r0;
        out->v[out->n - 1].rows_all = rows_all;
    }
}

/* w: the linear's weight, or rows [r0, r0 + w->shape[0]) of it when that is fewer than rows_all
 * (a rank's piece: lwq_qlayer_run_mine). */
/* global_amax: the fused group's (export) weight amax, which weight_scale_2 and the block scales
 * are written against; search_amax: the amax the per-block searches run against (search_amaxes),
 * <= global_amax.  The max path and GPTQ use global_amax only. */
static int emit_nvfp4(lwq_qops *qo, const lwq_arch_linear *l, const lwq_quant_choice *c, const lwq_htensor *w,
                      int64_t r0, int64_t rows_all, float global_amax, float search_amax, float in_amax,
                      const lwq_layer_stats *st, int idx, lwq_tlist *out, lwq_qlayer_report *rep, lwq_error *e)
{
    int64_t rows = w->shape[0], cols = w->shape[1], nb = rows * (cols / 16);
    int first = r0 == 0, piece = rows != rows_all;
    uint8_t *packed = malloc((size_t)(rows * cols / 2));
    uint8_t *scale = malloc((size_t)nb);
    float *bamax = NULL, *h = NULL, ws2 = 0, is = 0;
    int rc = 0;
    if (!packed || !scale) {
        rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", l->name);
        goto fail;
    }
    if (c->algo == LWQ_ALGO_GPTQ) {
        int g = gptq_applies(l, c, st, idx, rep, e);
        rc = g < 0 ? g
             : g   ? lwq_qlayer_gptq(l, c, w, global_amax, st, idx, !strcmp(lwq_qops_where(qo), "cuda"), packed, scale,
                                   NULL, &ws2, rep, e)
                 : lwq_qops_nvfp4_max(qo, w, rows, cols, global_amax, l->name, packed, scale, &ws2, e);
    } else if (c->algo == LWQ_ALGO_MAX) {
        rc = lwq_qops_nvfp4_max(qo, w, rows, cols, global_amax, l->name, packed, scale, &ws2, e);
    } else {
        bamax = malloc((size_t)nb * sizeof *bamax);
        if (!bamax) {
            rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", l->name);
            goto fail;
        }
        if (c->algo == LWQ_ALGO_LOCAL_HESSIAN) {
            h = malloc((size_t)(cols / 16) * 256 * sizeof *h);
            if (!h) {
                rc = lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", l->name);
                goto fail;
            }
            if (!st->hsum[idx] || st->htokens[idx] == 0) {
                /* a routed expert no calibration token reached has no Hessian: the plain
                 * squared-error sweep, as Model Optimizer 0.47 does for a weight quantizer its
                 * Hessian hooks never fed (model_calib.py, _mse_calibrate_weights with
                 * hessian_for -> None); any other linear without tokens is an error */
                if (l->expert < 0) {
                    rc = lwq_errf(e, LWQ_ENUMERIC, "%s: no calibration tokens for the local-Hessian search", l->name);
                    goto fail;
                }
                rep->hessian_fallback += first;
                rc = lwq_qops_nvfp4_sweep(qo, w, rows, cols, search_amax, NULL, l->name, bamax, e);
            } else if (!st->hdone[idx]) {
                rc = lwq_errf(e, LWQ_ESTATE, "%s: its Hessian was not finished (lwq_stats_finish)", l->name);
                goto fail;
            } else {
                rc = lwq_quant_hessian_finalize(st->hsum[idx], st->htokens[idx], cols, h, l->name, e);
                if (rc >= 0)
                    rc = lwq_qops_nvfp4_sweep(qo, w, rows, cols, search_amax, h, l->name, bamax, e);
            }
        } else if (c->four_over_six) {
            /* Four-over-Six: the CPU kernels on the host, whatever the device (lwq_qlayer_check
             * allows it with mse only) */
            float m[LWQ_MSE_MAX_STEPS];
            int nm = lwq_choice_mse_candidates(c, m);
            rc = lwq_quant_nvfp4_mse46(w->data, w->dtype, rows, cols, search_amax, nm ? m : NULL, nm, l->name, bamax,
                                       e);
            if (rc >= 0)
                rc = lwq_quant_nvfp4_static46(w->data, w->dtype, rows, cols, bamax, global_amax, l->name, packed,
                                              scale, &ws2, e);
        } else if (c->fp8_scale_sweep) {
            rc = lwq_qops_nvfp4_sweep(qo, w, rows, cols, search_amax, NULL, l->name, bamax, e);
        } else {
            /* a recipe's own multiplier range: the CPU kernel on the host, whatever the device */
            float m[LWQ_MSE_MAX_STEPS];
            int nm = lwq_choice_mse_candidates(c, m);
            rc = nm ? lwq_quant_nvfp4_mse_m(w->data, w->dtype, rows, cols, search_amax, m, nm, l->name, bamax, e)
                    : lwq_qops_nvfp4_mse(qo, w, rows, cols, search_amax, l->name, bamax, e);
        }
        if (rc >= 0 && !c->four_over_six)
            rc = lwq_qops_nvfp4_static(qo, w, rows, cols, bamax, global_amax, l->name, packed, scale, &ws2, e);
    }
    if (rc < 0)
        goto fail;
    if (rc == LWQ_QUANT_ZERO_TENSOR)
        rep->zero_weights += first;
    if (!c->weight_only && (rc = lwq_quant_input_scale(in_amax, LWQ_QUANT_NVFP4, l->name, &is, e)) < 0)
        goto fail;
    free(bamax);
    free(h);
    char name[LWQ_ARCH_NAME_MAX + 32];
    int64_t sp[2] = {rows, cols / 2}, ss[2] = {rows, cols / 16};
    snprintf(name, sizeof name, "%s.weight", l->name);
    if ((rc = lwq_tlist_add(out, name, LWQ_U8, 2, sp, packed, 1, e)) < 0) {
        free(scale);
        return rc;
    }
    mark_piece(out, piece, r0, rows_all);
    snprintf(name, sizeof name, "%s.weight_scale", l->name);
    if ((rc = lwq_tlist_add(out, name, LWQ_F8_E4M3, 2, ss, scale, 1, e)) < 0)
        return rc;
    mark_piece(out, piece, r0, rows_all);
    if (!first)
        return 0;
    snprintf(name, sizeof name, "%s.weight_scale_2", l->name);
    if ((rc = lwq_tlist_add_scalar(out, name, ws2, e)) < 0 || c->weight_only)
        return rc;
    snprintf(name, sizeof name, "%s.input_scale", l->name);
    return lwq_tlist_add_scalar(out, name, is, e);
fail:
    free(packed);
    free(scale);
    free(bamax);
    free(h);
    return rc;
}

static int emit_fp8(lwq_qops *qo, const lwq_arch_linear *l, const lwq_quant_choice *c, const lwq_htensor *w,
                    float wamax, float in_amax, const lwq_layer_stats *st, int idx, lwq_tlist *out,
                    lwq_qlayer_report *rep, lwq_error *e)
{
    int64_t rows = w->shape[0], cols = w->shape[w->ndim - 1];
    float amax = wamax, ws = 0, is = 0;
    int rc = 0, gptq = c->algo == LWQ_ALGO_GPTQ ? gptq_applies(l, c, st, idx, rep, e) : 0;
    if (gptq < 0)
        return gptq;
    /* wamax is final: fp8_searches ran the mse search (also for local_hessian, which has no
     * per-tensor form); GPTQ and max keep the weight's amax */
    uint8_t *q = malloc((size_t)(rows * cols));
    if (!q)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", l->name);
    rc = gptq ? lwq_qlayer_gptq(l, c, w, amax, st, idx, !strcmp(lwq_qops_where(qo), "cuda"), NULL, NULL, q, &ws, rep, e)
              : lwq_qops_fp8(qo, w, rows, cols, amax, l->name, q, &ws, e);
    if (rc < 0) {
        free(q);
        return rc;
    }
    if (rc == LWQ_QUANT_ZERO_TENSOR)
        rep->zero_weights++;
    if ((rc = lwq_quant_input_scale(in_amax, LWQ_QUANT_FP8, l->name, &is, e)) < 0) {
        free(q);
        return rc;
    }
    char name[LWQ_ARCH_NAME_MAX + 32];
    int64_t sh[3] = {rows, cols, 0};
    if (w->ndim == 3) { /* conv1d [channels, 1, kernel] */
        sh[1] = 1;
        sh[2] = cols;
    }
    snprintf(name, sizeof name, "%s.weight", l->name);
    if ((rc = lwq_tlist_add(out, name, LWQ_F8_E4M3, w->ndim, sh, q, 1, e)) < 0)
        return rc;
    snprintf(name, sizeof name, "%s.weight_scale", l->name);
    if ((rc = lwq_tlist_add_scalar(out, name, ws, e)) < 0)
        return rc;
    snprintf(name, sizeof name, "%s.input_scale", l->name);
    return lwq_tlist_add_scalar(out, name, is, e);
}

/* Which input a routed expert linear reads: 0 the expert's input (gate and up), 1 the down
 * projection's.  Model Optimizer quantizes transformers' fused experts (Qwen3-MoE, Mixtral,
 * DeepSeek-V3, Qwen3-Next: one gate_up_proj / down_proj parameter for all experts) with ONE input
 * quantizer per input for the whole expert set (_QuantFusedExperts._setup,
 * modelopt/torch/quantization/plugins/huggingface.py: gate_up_proj_input_quantizer and
 * down_proj_input_quantizer), so every expert of a layer exports the same input_scale per input:
 * the max over all experts' tokens.  A cold expert needs no fill of its own. */
static int expert_input(const lwq_arch_linear *l) { return l->role == LWQ_ROLE_EXPERT_DOWN; }

/* Input amax per linear: routed experts take their layer's shared amax (expert_input); errors for
 * other linears without data.  only (may be NULL): the linears of one streamed unit; experts then
 * take a provisional value from the experts seen so far (1 when none yet), and the report's
 * expert counts are left to lwq_qlayer_finish_inputs. */
static int input_amaxes(const lwq_arch_layer *plan, const lwq_quant_choice *choice, const lwq_layer_stats *st,
                        const uint8_t *only, float *in_amax, lwq_qlayer_report *rep, lwq_error *e)
{
    int nE = st->n_experts;
    uint8_t *filled = calloc((size_t)(nE > 0 ? nE : 1), 1);
    if (!filled)
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory", plan->layer);
    float shared[2] = {0, 0};
    for (int j = 0; j < plan->nlinears; j++)
        if (plan->linears[j].expert >= 0 && st->in_rows[j] > 0)
            shared[expert_input(&plan->linears[j])] = fmaxf(shared[expert_input(&plan->linears[j])], st->in_amax[j]);
    for (int i = 0; i < plan->nlinears; i++) {
        const lwq_arch_linear *l = &plan->linears[i];
        in_amax[i] = st->in_amax[i];
        if (choice[i].has_input_amax) { /* fixed by the recipe (Model Optimizer's constant_amax) */
            in_amax[i] = choice[i].input_amax;
            continue;
        }
        /* weight-only NVFP4 (W4A16) has no input quantizer: nothing to calibrate, no input_scale */
        if (choice[i].format == LWQ_QFMT_NONE || choice[i].weight_only || (only && !only[i]))
            continue;
        if (l->expert < 0) {
            if (st->in_rows[i] > 0 && in_amax[i] > 0)
                continue;
            free(filled);
            if (st->in_rows[i] == 0)
                return lwq_errf(e, LWQ_ENUMERIC, "%s: no calibration token reached this linear", l->name);
            return lwq_errf(e, LWQ_ENUMERIC, "%s: input amax is 0 over %lld calibration tokens; an input scale of 0 "
                            "would break serving", l->name, (long long)st->in_rows[i]);
        }
        float m = shared[expert_input(l)];
        if (only) { /* provisional: the layer's last group fixes it */
            in_amax[i] = m > 0 ? m : 1.0f;
            continue;
        }
        if (!(m > 0)) {
            free(filled);
            return lwq_errf(e, LWQ_ENUMERIC, "%s: no expert of layer %d received a calibration token; "
                            "cannot give the experts an input scale (use more calibration data or "
                            "--calib-all-experts)", l->name, plan->layer);
        }
        in_amax[i] = m;
        /* cold (or all-zero input): its scale comes wholly from its siblings */
        if (!(st->in_rows[i] > 0 && st->in_amax[i] > 0) && l->expert < nE && !filled[l->expert]) {
            filled[l->expert] = 1;
            rep->filled_experts++;
        }
    }
    free(filled);
    if (only)
        return 0;
    for (int x = 0; x < nE; x++)
        rep->cold_experts += st->expert_tokens[x] == 0;
    rep->n_experts = nE;
    return 0;
}

/* Fused groups share the max input amax and the max weight global amax (w_amax may be NULL):
 * NVFP4 groups (q/k/v, gate/up, each expert's gate/up; FORMATS.md 5), and an FP8 routed expert's
 * gate/up, which Model Optimizer quantizes as the one gate_up_proj slice of that expert (one
 * weight quantizer per expert, _QuantFusedExperts) so both halves export one weight_scale.
 * Dense FP8 groups are not unified (separate nn.Linear modules there). */
static int unified(const lwq_arch_linear *l, lwq_qformat f)
{
    return f == LWQ_QFMT_NVFP4 || (f == LWQ_QFMT_FP8 && l->expert >= 0);
}

static void unify_groups(const lwq_arch_layer *plan, const lwq_quant_choice *choice, const uint8_t *only,
                         float *in_amax, float *w_amax)
{
    int n = plan->nlinears;
    for (int g = 0; g < plan->ngroups; g++) {
        float mi = 0, mw = 0;
        int members = 0;
        for (int i = 0; i < n; i++)
            if (plan->linears[i].group == g && unified(&plan->linears[i], choice[i].format) && (!only || only[i])) {
                mi = fmaxf(mi, in_amax[i]);
                mw = w_amax ? fmaxf(mw, w_amax[i]) : 0;
                members++;
            }
        for (int i = 0; members && i < n; i++)
            if (plan->linears[i].group == g && unified(&plan->linears[i], choice[i].format) && (!only || only[i])) {
                in_amax[i] = mi;
                if (w_amax)
                    w_amax[i] = mw;
            }
    }
}

/* Model Optimizer 0.47's per-block searches (mse with or without the FP8 scale sweep, Four-over-Six,
 * local_hessian) run against each weight quantizer's global_amax as max_calibrate leaves it:
 * shared only within its name groups, siblings under one parent named q_proj/k_proj/v_proj,
 * gate_proj/up_proj or w1/w3 (SHARED_PATTERNS, utils/shared_input.py: SharedWeightGlobalAmaxState,
 * populated before _mse_calibrate_weights; a fused-experts module's gate_up slice is one quantizer,
 * the same sharing).  Only the export (requantize_resmooth_fused_llm_layers ->
 * preprocess_linear_fusion) gives every linear that reads one input the group's max global_amax,
 * and its block scales are then recomputed from the searched per-block amax against that one
 * (NVFP4QTensor.get_weights_scaling_factor_from_quantizer).  So Qwen3.5's in_proj_qkv and in_proj_z,
 * or MLA's q_a_proj and kv_a_proj_with_mqa, are each searched against their own amax, and written
 * with the shared one.  The class of a linear: its name's last part; 0 = no name group. */
static int search_class(const char *name)
{
    static const char *const names[][3] = {{"q_proj", "k_proj", "v_proj"}, {"gate_proj", "up_proj", ""},
                                           {"w1", "w3", ""}};
    const char *leaf = strrchr(name, '.');
    leaf = leaf ? leaf + 1 : name;
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 3; j++)
            if (names[k][j][0] && !strcmp(leaf, names[k][j]))
                return k + 1;
    return 0;
}

/* s_amax: each linear's own weight amax in, its search amax out: the max over the members of its
 * fused group (which lie under one parent) in the same name group (search_class) */
static void search_amaxes(const lwq_arch_layer *plan, const lwq_quant_choice *choice, const uint8_t *need,
                          float *s_amax)
{
    int n = plan->nlinears;
    for (int i = 0; i < n; i++) {
        const lwq_arch_linear *l = &plan->linears[i];
        int k = search_class(l->name);
        if (!need[i] || l->group < 0 || !k || !unified(l, choice[i].format))
            continue;
        float m = 0;
        for (int j = 0; j < n; j++)
            if (need[j] && plan->linears[j].group == l->group && unified(&plan->linears[j], choice[j].format) &&
                search_class(plan->linears[j].name) == k)
                m = fmaxf(m, s_amax[j]);
        for (int j = 0; j < n; j++)
            if (need[j] && plan->linears[j].group == l->group && unified(&plan->linears[j], choice[j].format) &&
                search_class(plan->linears[j].name) == k)
                s_amax[j] = m;
    }
}

static int fp8_searched(const lwq_quant_choice *c)
{
    return c->format == LWQ_QFMT_FP8 && c->algo != LWQ_ALGO_MAX && c->algo != LWQ_ALGO_GPTQ;
}

/* One FP8 `mse` search: the device's over the default 39 candidates, the host's over a recipe's
 * own range (lwq_choice_mse_candidates). */
static int fp8_mse(lwq_qops *qo, const lwq_quant_choice *c, const lwq_htensor *w, int64_t rows, int64_t cols,
                   const char *name, float *amax, lwq_error *e)
{
    float m[LWQ_MSE_MAX_STEPS];
    int nm = c->algo == LWQ_ALGO_MSE ? lwq_choice_mse_candidates(c, m) : 0;
    if (!nm)
        return lwq_qops_fp8_mse(qo, w, rows, cols, name, amax, e);
    return lwq_quant_fp8_mse_m(w->data, w->dtype, rows, cols, m, nm, name, amax, NULL, e);
}

/* The FP8 `mse` searches of a layer, into w_amax: one per linear, except a routed expert's gate
 * and up, searched once over the two stacked ([gate; up] rows), since Model Optimizer searches
 * the expert's gate_up_proj slice with its one weight quantizer (_QuantFusedExperts). */
static int fp8_searches(lwq_qops *qo, const lwq_arch_layer *plan, const lwq_quant_choice *choice, const uint8_t *only,
                        const lwq_htensor *const *w, float *w_amax, lwq_error *e)
{
    int n = plan->nlinears;
    for (int i = 0; i < n; i++) {
        const lwq_arch_linear *l = &plan->linears[i];
        if (!fp8_searched(&choice[i]) || (only && !only[i]))
            continue;
        int j = -1;
        for (int k = 0; l->expert >= 0 && l->group >= 0 && k < n; k++)
            if (k != i && plan->linears[k].group == l->group && fp8_searched(&choice[k]))
                j = k;
        if (j < 0) {
            LWQ_TRY(fp8_mse(qo, &choice[i], w[i], w[i]->shape[0], w[i]->shape[w[i]->ndim - 1], l->name, &w_amax[i], e));
            continue;
        }
        if (j < i)
            continue; /* searched with its partner */
        int g = l->role == LWQ_ROLE_EXPERT_GATE ? i : j, u = g == i ? j : i;
        const lwq_htensor *wg = w[g], *wu = w[u];
        if (wg->dtype != wu->dtype || wg->shape[1] != wu->shape[1])
            return lwq_errf(e, LWQ_EFORMAT, "%s and %s: gate and up weights differ in dtype or width",
                            plan->linears[g].name, plan->linears[u].name);
        lwq_htensor both = *wg;
        char name[LWQ_ARCH_NAME_MAX + 16];
        snprintf(name, sizeof name, "%s+up", plan->linears[g].name);
        both.name = name;
        both.shape[0] = wg->shape[0] + wu->shape[0];
        both.nbytes = wg->nbytes + wu->nbytes;
        both.owned = 0;
        if (!(both.data = malloc(both.nbytes ? both.nbytes : 1)))
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", name);
        memcpy(both.data, wg->data, wg->nbytes);
        memcpy((char *)both.data + wg->nbytes, wu->data, wu->nbytes);
        float a = 0;
        int rc = fp8_mse(qo, &choice[g], &both, both.shape[0], both.shape[1], name, &a, e);
        free(both.data);
        if (rc < 0)
            return rc;
        w_amax[g] = w_amax[u] = a;
    }
    return 0;
}

static int has_rows(const lwq_qlayer_rows *mine, int i) { return !mine || mine[i].r1 > mine[i].r0; }

/* only: a streamed unit's linears (provisional cold-expert inputs); mine: this rank's share of a
 * layer split over ranks (final inputs), with rest: also the pass-through tensors and the k/v scales. */
static int run_impl(const lwq_arch_layer *plan, const lwq_quant_choice *choice, lwq_kv_mode kv,
                    const lwq_layer_stats *st, const lwq_tlist *src, lwq_qops *qo, lwq_tlist *out,
                    lwq_qlayer_report *rep, const uint8_t *only, const lwq_qlayer_rows *mine, int rest, lwq_error *e)
{
    memset(rep, 0, sizeof *rep);
    int n = plan->nlinears, rc = 0;
    float *in_amax = calloc((size_t)(n ? n : 1), sizeof *in_amax);
    float *w_amax = calloc((size_t)(n ? n : 1), sizeof *w_amax);
    float *s_amax = calloc((size_t)(n ? n : 1), sizeof *s_amax); /* the NVFP4 searches' (search_amaxes) */
    const lwq_htensor **w = calloc((size_t)(n ? n : 1), sizeof *w);
    /* sel: the linears this call quantizes rows of; need: also their fused-group partners, whose
     * amaxes the group's global amax takes (a partner another rank quantizes is read, not quantized) */
    uint8_t *sel = calloc((size_t)(n ? n : 1), 1), *need = calloc((size_t)(n ? n : 1), 1);
    uint8_t *touched = calloc((size_t)(plan->ngroups > 0 ? plan->ngroups : 1), 1); /* a group with a sel member */
    if (!in_amax || !w_amax || !s_amax || !w || !sel || !need || !touched) {
        rc = lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory", plan->layer);
        goto out;
    }
    if ((rc = lwq_qlayer_check(plan, choice, e)) < 0 ||
        (rc = input_amaxes(plan, choice, st, only, in_amax, rep, e)) < 0)
        goto out;
    for (int i = 0; i < n; i++) {
        int g = plan->linears[i].group;
        sel[i] = choice[i].format != LWQ_QFMT_NONE && !(only && !only[i]) && has_rows(mine, i);
        if (sel[i] && g >= 0 && g < plan->ngroups)
            touched[g] = 1;
    }
    for (int i = 0; i < n; i++) {
        int g = plan->linears[i].group;
        need[i] = sel[i] || (choice[i].format != LWQ_QFMT_NONE && !(only && !only[i]) && g >= 0 &&
                             g < plan->ngroups && touched[g]);
    }
    for (int i = 0; i < n; i++) {
        if (!need[i])
            continue;
        if (!(w[i] = weight_of(src, &plan->linears[i], e))) {
            rc = e && e->code ? e->code : LWQ_ENOENT;
            goto out;
        }
        rc = lwq_quant_amax(w[i]->data, w[i]->dtype, w[i]->shape[0] * w[i]->shape[w[i]->ndim - 1], w[i]->name,
                            &w_amax[i], e);
        if (rc < 0)
            goto out;
    }
    memcpy(s_amax, w_amax, (size_t)n * sizeof *s_amax);
    search_amaxes(plan, choice, need, s_amax);
    unify_groups(plan, choice, need, in_amax, w_amax);
    if ((rc = fp8_searches(qo, plan, choice, sel, w, w_amax, e)) < 0)
        goto out;
    for (int i = 0; i < n; i++) {
        const lwq_arch_linear *l = &plan->linears[i];
        if (!sel[i])
            continue;
        int64_t rows = w[i]->shape[0], r0 = mine ? mine[i].r0 : 0, r1 = mine ? mine[i].r1 : rows;
        if (r0 < 0 || r1 > rows || (choice[i].format != LWQ_QFMT_NVFP4 && (r0 != 0 || r1 != rows))) {
            rc = lwq_errf(e, LWQ_ESTATE, "%s: rows [%lld, %lld) of %lld cannot be quantized apart", l->name,
                          (long long)r0, (long long)r1, (long long)rows);
            goto out;
        }
        lwq_htensor part = *w[i]; /* the rows this call quantizes: a view */
        uint64_t row_bytes = rows > 0 ? w[i]->nbytes / (uint64_t)rows : 0;
        part.data = (char *)w[i]->data + (uint64_t)r0 * row_bytes;
        part.shape[0] = r1 - r0;
        part.nbytes = (uint64_t)(r1 - r0) * row_bytes;
        part.owned = 0;
        if (choice[i].format == LWQ_QFMT_NVFP4)
            rc = emit_nvfp4(qo, l, &choice[i], &part, r0, rows, w_amax[i], s_amax[i], in_amax[i], st, i, out, rep, e);
        else
            rc = emit_fp8(qo, l, &choice[i], w[i], w_amax[i], in_amax[i], st, i, out, rep, e);
        if (rc < 0)
            goto out;
        rep->quantized += r0 == 0;
    }
    /* every other source tensor passes through (a weight another rank quantizes is not "other") */
    for (int i = 0; mine && rest && i < n; i++)
        if (!w[i] && choice[i].format != LWQ_QFMT_NONE && !(only && !only[i])) {
            char wn[LWQ_ARCH_NAME_MAX + 16];
            snprintf(wn, sizeof wn, "%s.weight", plan->linears[i].name);
            w[i] = lwq_tlist_find(src, wn);
        }
    for (int t = 0; rest && t < src->n; t++) {
        const lwq_htensor *s = &src->v[t];
        int replaced = 0;
        for (int i = 0; i < n && !replaced; i++)
            replaced = w[i] == s;
        if (replaced)
            continue;
        if ((rc = lwq_tlist_add(out, s->name, s->dtype, s->ndim, s->shape, s->data, 0, e)) < 0)
            goto out;
    }
    if (kv == LWQ_KV_FP8 && rest) {
        int has_attn = 0;
        char prefix[LWQ_ARCH_NAME_MAX] = "";
        for (int i = 0; i < n; i++)
            if (plan->linears[i].role == LWQ_ROLE_K) {
                size_t len = strlen(plan->linears[i].name) - strlen(".k_proj");
                snprintf(prefix, sizeof prefix, "%.*s", (int)len, plan->linears[i].name);
                has_attn = 1;
            } else if (plan->linears[i].role == LWQ_ROLE_KV_A) {
                /* MLA: Model Optimizer names the scales of its k/v (decompressed, per head) as if
                 * there were a k_proj and a v_proj: self_attn.k_proj.k_scale */
                size_t len = strlen(plan->linears[i].name) - strlen(".kv_a_proj_with_mqa");
                snprintf(prefix, sizeof prefix, "%.*s", (int)len, plan->linears[i].name);
                has_attn = 1;
            }
        if (has_attn) {
            float ks, vs;
            char name[LWQ_ARCH_NAME_MAX + 32];
            snprintf(name, sizeof name, "%s.k_proj.k_scale", prefix);
            if (st->kv_rows == 0) {
                rc = lwq_errf(e, LWQ_ENUMERIC, "layer %d: no k/v was observed for the FP8 KV-cache scales", plan->layer);
                goto out;
            }
            if ((rc = lwq_quant_kv_scale(st->k_amax, name, &ks, e)) < 0 || (rc = lwq_tlist_add_scalar(out, name, ks, e)) < 0)
                goto out;
            snprintf(name, sizeof name, "%s.v_proj.v_scale", prefix);
            if ((rc = lwq_quant_kv_scale(st->v_amax, name, &vs, e)) < 0 || (rc = lwq_tlist_add_scalar(out, name, vs, e)) < 0)
                goto out;
        }
    }
    rc = 0;
out:
    lwq_qops_end_layer(qo); /* nothing cached for this layer is reused by the next */
    free(in_amax);
    free(w_amax);
    free(s_amax);
    free(w);
    free(sel);
    free(need);
    free(touched);
    return rc;
}

int lwq_qlayer_run(const lwq_arch_layer *plan, const lwq_quant_choice *choice, lwq_kv_mode kv,
                   const lwq_layer_stats *st, const lwq_tlist *src, lwq_qops *qo, lwq_tlist *out,
                   lwq_qlayer_report *rep, lwq_error *e)
{
    return run_impl(plan, choice, kv, st, src, qo, out, rep, NULL, NULL, 1, e);
}

int lwq_qlayer_run_mine(const lwq_arch_layer *plan, const lwq_quant_choice *choice, lwq_kv_mode kv,
                        const lwq_layer_stats *st, const lwq_tlist *src, lwq_qops *qo, const uint8_t *only,
                        const lwq_qlayer_rows *mine, int rest, lwq_tlist *out, lwq_qlayer_report *rep, lwq_error *e)
{
    return run_impl(plan, choice, kv, st, src, qo, out, rep, only, mine, rest, e);
}

int lwq_qlayer_run_part(const lwq_arch_layer *plan, const lwq_quant_choice *choice, lwq_kv_mode kv,
                        const lwq_layer_stats *st, const lwq_tlist *src, lwq_qops *qo, const uint8_t *only,
                        lwq_tlist *out, lwq_qlayer_report *rep, lwq_error *e)
{
    return run_impl(plan, choice, kv, st, src, qo, out, rep, only, NULL, 1, e);
}

int lwq_qlayer_finish_inputs(const lwq_arch_layer *plan, const lwq_quant_choice *choice, const lwq_layer_stats *st,
                             lwq_tlist *out, lwq_qlayer_report *rep, lwq_error *e)
{
    int n = plan->nlinears, rc = 0;
    float *in_amax = calloc((size_t)(n ? n : 1), sizeof *in_amax);
    if (!in_amax)
        return lwq_errf(e, LWQ_ENOMEM, "layer %d: out of memory", plan->layer);
    lwq_qlayer_report full;
    memset(&full, 0, sizeof full);
    if ((rc = input_amaxes(plan, choice, st, NULL, in_amax, &full, e)) < 0)
        goto out;
    unify_groups(plan, choice, NULL, in_amax, NULL);
    for (int i = 0; i < n; i++) {
        const lwq_arch_linear *l = &plan->linears[i];
        lwq_qformat f = choice[i].format;
        if (f == LWQ_QFMT_NONE || choice[i].weight_only || l->expert < 0)
            continue;
        char name[LWQ_ARCH_NAME_MAX + 32];
        snprintf(name, sizeof name, "%s.input_scale", l->name);
        lwq_htensor *t = NULL;
        for (int k = out->n - 1; k >= 0 && !t; k--)
            if (!strcmp(out->v[k].name, name))
                t = &out->v[k];
        float is;
        if (!t || t->dtype != LWQ_F32 || !t->data) {
            rc = lwq_errf(e, LWQ_ESTATE, "layer %d: %s was not produced by the expert groups", plan->layer, name);
            goto out;
        }
        if ((rc = lwq_quant_input_scale(in_amax[i], f == LWQ_QFMT_NVFP4 ? LWQ_QUANT_NVFP4 : LWQ_QUANT_FP8, l->name,
                                        &is, e)) < 0)
            goto out;
        *(float *)t->data = is;
    }
    rep->n_experts = full.n_experts;
    rep->cold_experts = full.cold_experts;
    rep->filled_experts = full.filled_experts;
    rc = 0;
out:
    free(in_amax);
    return rc;
}
