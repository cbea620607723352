/* engine/autoq/autoq_recipe.c — the chosen mix as recipes a user can read, edit and rerun: lwq
 * JSON (the base recipe's rules, then one rule per searched module, or per layer's routed
 * experts, with its format) and Model Optimizer YAML (layout/recipe/recipe_yaml_out.h).  Both are
 * loaded back and every linear's resolved choice compared with the intended one before either is
 * used: pass 2 runs the parsed JSON, so what the file says is what runs. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/autoq/autoq_recipe.h"
#include "engine/autoq/head/autoq_head.h"
#include "engine/quant/qlayer.h"
#include "io/durable.h"
#include "layout/arch/arch_qnames.h"
#include "layout/recipe/recipe_yaml.h"
#include "layout/recipe/recipe_yaml_out.h"

void lwq_aq_recipe_free(lwq_aq_recipe *r)
{
    free(r->json);
    free(r->yaml);
    lwq_recipe_free(&r->r);
    memset(r, 0, sizeof *r);
}

/* "model.layers.3.mlp.experts.*" when that glob matches exactly the group's members among the
 * layer's linears; else "" (the members are then named one by one). */
static void experts_glob(const lwq_arch_layer *p, const lwq_aq_layer *A, int k, char *out, size_t cap)
{
    out[0] = 0;
    const lwq_aq_group *g = &A->g[k];
    const char *first = p->linears[g->lin[0]].name, *x = strstr(first, ".experts.");
    if (g->kind != LWQ_AQ_EXPERTS || !x || (size_t)(x - first) + 11 > cap)
        return;
    snprintf(out, cap, "%.*s.experts.*", (int)(x - first), first);
    for (int i = 0; i < p->nlinears; i++)
        if (lwq_glob_match(out, p->linears[i].name) != (A->group_of[i] == k)) {
            out[0] = 0;
            return;
        }
}

/* Whether a choice's weights take the mse multiplier search (so its range matters) */
static int uses_range(const lwq_quant_choice *c)
{
    if (c->format == LWQ_QFMT_FP8)
        return c->algo == LWQ_ALGO_MSE || c->algo == LWQ_ALGO_LOCAL_HESSIAN;
    return c->format == LWQ_QFMT_NVFP4 && c->algo == LWQ_ALGO_MSE && !c->fp8_scale_sweep;
}

static int same_range(const lwq_quant_choice *a, const lwq_quant_choice *b)
{
    if (uses_range(a) != uses_range(b))
        return 0;
    if (!uses_range(a))
        return 1;
    return a->mse_range == b->mse_range &&
           (a->mse_range == LWQ_MSE_RANGE_DEFAULT || !memcmp(a->mse_mult, b->mse_mult, sizeof a->mse_mult));
}

static int same_choice(const lwq_quant_choice *a, const lwq_quant_choice *b)
{
    if (a->format != b->format || (a->format == LWQ_QFMT_NVFP4 && a->weight_only != b->weight_only))
        return 0;
    if (a->format == LWQ_QFMT_NONE)
        return 1;
    if ((a->format == LWQ_QFMT_NVFP4 && a->four_over_six != b->four_over_six) || !same_range(a, b))
        return 0;
    int ca = a->format == LWQ_QFMT_FP8 ? a->algo != LWQ_ALGO_MAX : (int)a->algo;
    int cb = b->format == LWQ_QFMT_FP8 ? b->algo != LWQ_ALGO_MAX : (int)b->algo;
    int sa = a->format == LWQ_QFMT_NVFP4 && a->algo == LWQ_ALGO_MSE && a->fp8_scale_sweep;
    int sb = b->format == LWQ_QFMT_NVFP4 && b->algo == LWQ_ALGO_MSE && b->fp8_scale_sweep;
    return ca == cb && sa == sb && a->has_input_amax == b->has_input_amax &&
           (!a->has_input_amax || a->input_amax == b->input_amax);
}

/* Every linear of every layer under recipe r against the intended choices; "" when all agree. */
static void compare(const lwq_arch_layer *plans, int N, lwq_quant_choice *const *want, const lwq_recipe *r,
                    lwq_kv_mode kv, char *why, size_t cap)
{
    why[0] = 0;
    if (r->kv != kv) {
        snprintf(why, cap, "the KV cache reads back as %s, not %s", lwq_kv_mode_name(r->kv), lwq_kv_mode_name(kv));
        return;
    }
    for (int L = 0; L < N; L++)
        for (int i = 0; i < plans[L].nlinears; i++) {
            lwq_quant_choice c = lwq_qlayer_choice(r, &plans[L], i);
            if (!same_choice(&c, &want[L][i])) {
                const lwq_quant_choice *w = &want[L][i];
                snprintf(why, cap, "%s reads back as %s (%s%s%s%s), not %s (%s%s%s%s)", plans[L].linears[i].name,
                         lwq_choice_format_name(&c), lwq_algo_name(c.algo), c.fp8_scale_sweep ? ", fp8_scale_sweep" : "",
                         c.four_over_six ? ", four_over_six" : "", c.mse_range ? ", its own mse multipliers" : "",
                         lwq_choice_format_name(w), lwq_algo_name(w->algo), w->fp8_scale_sweep ? ", fp8_scale_sweep" : "",
                         w->four_over_six ? ", four_over_six" : "", w->mse_range ? ", its own mse multipliers" : "");
                return;
            }
        }
}

/* The rules that give `match` the choice `want` (candidate cand, engine/autoq/autoq.h) where the base
 * recipe gives `base`: its format, the weight algorithm and FP8 scale sweep where they differ from the
 * base's (a candidate with its own algorithm), Four-over-Six (which a format resets), for weight-only
 * NVFP4 then its input quantizer disabled, and want's fixed input amax again (a format resets it).
 * (The mse multipliers are the recipe's: lwq_aq_recipe_build sets them.) */
static void add_rule(cJSON *rules, const char *match, int cand, const lwq_quant_choice *base,
                     const lwq_quant_choice *want)
{
    lwq_qformat f = lwq_aq_qformat(cand);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "match", match);
    cJSON_AddStringToObject(o, "format", lwq_qformat_name(f));
    if (f != LWQ_QFMT_NONE && want->algo != base->algo)
        cJSON_AddStringToObject(o, "algo", lwq_algo_name(want->algo));
    if (f != LWQ_QFMT_NONE && want->fp8_scale_sweep != base->fp8_scale_sweep)
        cJSON_AddBoolToObject(o, "fp8_scale_sweep", want->fp8_scale_sweep);
    if (f == LWQ_QFMT_NVFP4 && want->four_over_six) /* a format rule resets it */
        cJSON_AddBoolToObject(o, "four_over_six", 1);
    cJSON_AddItemToArray(rules, o);
    if (lwq_aq_weight_only(cand)) { /* W4A16: NVFP4 weights, the input quantizer off */
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "match", match);
        cJSON_AddStringToObject(o, "quantizer", "input");
        cJSON_AddBoolToObject(o, "enable", 0);
        cJSON_AddItemToArray(rules, o);
        return;
    }
    if (f != LWQ_QFMT_NONE && want->has_input_amax) { /* a format rule resets the input's fixed amax */
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "match", match);
        cJSON_AddStringToObject(o, "quantizer", "input");
        cJSON_AddStringToObject(o, "format", lwq_qformat_name(f));
        cJSON_AddNumberToObject(o, "input_amax", (double)want->input_amax);
        cJSON_AddItemToArray(rules, o);
    }
}

/* lm_head's LWQ_LMHEAD_* mode as a module's choice for the YAML (weight-only NVFP4 or FP8, W8A8 FP8); 0 for a mode
 * the YAML's attributes do not express alone (Four-over-Six), which the read-back then reports. */
static int lm_head_choice(int mode, lwq_quant_choice *c)
{
    memset(c, 0, sizeof *c);
    c->weight_only = mode != LWQ_LMHEAD_W8A8;
    c->format = c->weight_format = mode == LWQ_LMHEAD_FP8 || mode == LWQ_LMHEAD_W8A8 ? LWQ_QFMT_FP8 : LWQ_QFMT_NVFP4;
    c->input_format = mode == LWQ_LMHEAD_W8A8 ? LWQ_QFMT_FP8 : LWQ_QFMT_NONE;
    c->algo = mode == LWQ_LMHEAD_MSE || mode == LWQ_LMHEAD_SWEEP ? LWQ_ALGO_MSE : LWQ_ALGO_MAX;
    c->fp8_scale_sweep = mode == LWQ_LMHEAD_SWEEP;
    return mode != LWQ_LMHEAD_F46;
}

int lwq_aq_recipe_build(const lwq_autoq_opts *o, const lwq_aq_solution *sol, const lwq_arch_layer *plans, int N,
                        const char *name, const char *yaml_path, lwq_aq_recipe *out, lwq_error *e)
{
    memset(out, 0, sizeof *out);
    const lwq_recipe *base = o->q.recipe;
    char *bj = lwq_recipe_to_json(base);
    cJSON *root = bj ? cJSON_Parse(bj) : NULL;
    free(bj);
    lwq_quant_choice **want = calloc((size_t)N, sizeof *want);
    lwq_yaml_module *ym = NULL;
    int nym = 0, cap = 0, rc = root && want ? 0 : lwq_errf(e, LWQ_ENOMEM, "out of memory");
    cJSON *rules = root ? cJSON_GetObjectItemCaseSensitive(root, "rules") : NULL;
    lwq_quant_choice range; /* a searched choice with its own mse multipliers (has_range) */
    int has_range = 0;
    if (root) {
        /* the name a YAML recipe takes from its file's stem: the JSON and the YAML rerun alike */
        cJSON_ReplaceItemInObjectCaseSensitive(root, "name", cJSON_CreateString(name));
        if (!rules)
            rules = cJSON_AddArrayToObject(root, "rules");
    }
    int idx = 0;
    for (int L = 0; L < N && rc == 0; L++) {
        const lwq_arch_layer *p = &plans[L];
        lwq_aq_layer A;
        if ((rc = lwq_aq_layer_build(&A, p, base, o, e)) != 0)
            break;
        if (idx + A.ngroups > sol->ngroups) {
            lwq_aq_layer_free(&A);
            rc = lwq_errf(e, LWQ_ESTATE, "layer %d: more groups than the scores hold", L);
            break;
        }
        want[L] = calloc((size_t)(p->nlinears ? p->nlinears : 1), sizeof **want);
        char (*gglob)[LWQ_ARCH_NAME_MAX + 8] = calloc((size_t)(A.ngroups ? A.ngroups : 1), sizeof *gglob);
        if (nym + p->nlinears >= cap) {
            int nc = 2 * (cap + p->nlinears + 8);
            lwq_yaml_module *t = realloc(ym, (size_t)nc * sizeof *t);
            if (t) {
                ym = t;
                cap = nc;
            }
        }
        if (!want[L] || !gglob || nym + p->nlinears >= cap) {
            free(gglob);
            lwq_aq_layer_free(&A);
            rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
            break;
        }
        lwq_aq_choices(&A, p, sol->fmt + idx, want[L]);
        for (int k = 0; k < A.ngroups; k++) {
            int f = sol->fmt[idx + k];
            experts_glob(p, &A, k, gglob[k], sizeof gglob[k]);
            if (gglob[k][0]) {
                add_rule(rules, gglob[k], f, &A.base[A.g[k].lin[0]], &want[L][A.g[k].lin[0]]);
            } else {
                for (int m = 0; m < A.g[k].n; m++)
                    add_rule(rules, p->linears[A.g[k].lin[m]].name, f, &A.base[A.g[k].lin[m]],
                             &want[L][A.g[k].lin[m]]);
            }
            /* a searched candidate's own mse multipliers (Four-over-Six's) become the recipe's: the
             * read-back below refuses a mix another module of which needs the base's */
            const lwq_quant_choice *w0 = &want[L][A.g[k].lin[0]];
            if (!A.g[k].fixed && w0->mse_range == LWQ_MSE_RANGE_OWN && uses_range(w0))
                memcpy(&range, w0, sizeof range), has_range = 1;
            /* the YAML takes the glob only when every expert resolved alike */
            for (int m = 1; gglob[k][0] && m < A.g[k].n; m++)
                if (!same_choice(&want[L][A.g[k].lin[m]], &want[L][A.g[k].lin[0]]))
                    gglob[k][0] = 0;
        }
        /* the YAML names every module (routed experts by their glob) */
        for (int i = 0; i < p->nlinears; i++) {
            int k = A.group_of[i];
            if (k >= 0 && gglob[k][0] && A.g[k].lin[0] != i)
                continue;
            /* the YAML names the experts as Model Optimizer holds them in memory: the fused experts
             * module (mixtral's block_sparse_moe.experts is mlp.experts there), whose quantizer
             * names "...experts.gate_up_proj_weight_quantizers.E" the glob's star reaches */
            char mem[LWQ_QNAME_MAX + 2];
            if (k >= 0 && gglob[k][0] && lwq_arch_fused_experts_module(p, &p->linears[i], mem, sizeof mem - 2))
                strcat(mem, ".*");
            else
                snprintf(mem, sizeof mem, "%s", k >= 0 && gglob[k][0] ? gglob[k] : p->linears[i].name);
            ym[nym].glob = strdup(mem);
            ym[nym++].c = want[L][i];
        }
        free(gglob);
        idx += A.ngroups;
        lwq_aq_layer_free(&A);
    }
    /* lm_head as the recipe writes it: a searched lm_head's choice (the last group of the solution,
     * engine/autoq/head/autoq_head.h), else the base recipe's (a fixed baseline's
     * '*lm_head*weight_quantizer' rule: weight-only) */
    int head_mode = base->lm_head;
    if (rc == 0 && sol->ngroups == idx + 1) {
        head_mode = lwq_aq_head_mode(sol->fmt[idx]);
        if (head_mode < 0)
            rc = lwq_errf(e, LWQ_ESTATE, "lm_head: candidate %s is no lm_head lwq writes", lwq_aq_format_name(sol->fmt[idx]));
        else if (cJSON_GetObjectItemCaseSensitive(root, "lm_head"))
            cJSON_ReplaceItemInObjectCaseSensitive(root, "lm_head", cJSON_CreateString(lwq_lm_head_name(head_mode)));
        else
            cJSON_AddStringToObject(root, "lm_head", lwq_lm_head_name(head_mode));
    } else if (rc == 0 && sol->ngroups != idx) {
        rc = lwq_errf(e, LWQ_ESTATE, "the solution has %d groups, the layers %d", sol->ngroups, idx);
    }
    lwq_quant_choice head = {0};
    if (rc == 0 && head_mode != LWQ_LMHEAD_NONE && lm_head_choice(head_mode, &head)) {
        lwq_yaml_module *t = nym + 1 > cap ? realloc(ym, (size_t)(nym + 1) * sizeof *t) : ym;
        if (!t) {
            rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
        } else {
            ym = t;
            cap = nym + 1 > cap ? nym + 1 : cap;
            ym[nym].glob = strdup("lm_head");
            ym[nym++].c = head;
        }
    }
    for (int i = 0; rc == 0 && i < nym; i++)
        if (!ym[i].glob)
            rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
    /* the recipe's mse multipliers: a searched candidate's own (lwq's recipe has one range, as Model
     * Optimizer's algorithm has) */
    double mult[3] = {base->mse_mult[0], base->mse_mult[1], base->mse_mult[2]};
    int mrange = base->mse_range;
    if (rc == 0 && has_range) {
        cJSON *alg = cJSON_GetObjectItemCaseSensitive(root, "algorithm");
        if (!alg)
            alg = cJSON_AddObjectToObject(root, "algorithm");
        cJSON_DeleteItemFromObjectCaseSensitive(alg, "mse_multipliers");
        cJSON *m = cJSON_AddArrayToObject(alg, "mse_multipliers");
        for (int i = 0; i < 3; i++)
            cJSON_AddItemToArray(m, cJSON_CreateNumber(range.mse_mult[i]));
        memcpy(mult, range.mse_mult, sizeof mult);
        mrange = LWQ_MSE_RANGE_OWN;
    }
    if (rc == 0 && !(out->json = cJSON_Print(root)))
        rc = lwq_errf(e, LWQ_ENOMEM, "out of memory");
    if (rc == 0 && (rc = lwq_recipe_parse("the auto-quantize recipe", out->json, &out->r, e)) == 0) {
        char why[512];
        compare(plans, N, want, &out->r, base->kv, why, sizeof why);
        if (!why[0] && out->r.lm_head != head_mode)
            snprintf(why, sizeof why, "lm_head reads back as %s, not %s", lwq_lm_head_name(out->r.lm_head),
                     lwq_lm_head_name(head_mode));
        if (why[0])
            rc = lwq_errf(e, LWQ_ESTATE, "the auto-quantize recipe does not say what was chosen: %s", why);
    }
    if (rc == 0) {
        char desc[256];
        snprintf(desc, sizeof desc, "lwq auto-quantize %s: %.4f bits per weight predicted, %s score, base recipe %s",
                 name, sol->bits, lwq_aq_score_name(o->score), base->name);
        out->yaml = lwq_recipe_yaml_render_range(desc, base->algo, base->fp8_scale_sweep, mrange, mult, base->kv, ym,
                                                 nym, out->yaml_why,
                                           sizeof out->yaml_why);
        /* read it back as lwq quantize --recipe would, and compare */
        lwq_recipe yr = {0};
        lwq_recipe_run run;
        lwq_error ye = {0};
        if (out->yaml && (rc = lwq_durable_write_file(yaml_path, out->yaml, strlen(out->yaml), e)) == 0) {
            if (lwq_recipe_yaml_load(yaml_path, NULL, &yr, &run, &ye) != 0)
                snprintf(out->yaml_why, sizeof out->yaml_why, "it does not load: %s", ye.msg);
            else
                compare(plans, N, want, &yr, base->kv, out->yaml_why, sizeof out->yaml_why);
            if (!out->yaml_why[0] && yr.lm_head != head_mode)
                snprintf(out->yaml_why, sizeof out->yaml_why, "lm_head reads back as %s, not %s",
                         lwq_lm_head_name(yr.lm_head), lwq_lm_head_name(head_mode));
            lwq_recipe_free(&yr);
            if (out->yaml_why[0]) {
                free(out->yaml);
                out->yaml = NULL;
                lwq_durable_unlink(yaml_path, &ye);
            }
        }
    }
    for (int L = 0; want && L < N; L++)
        free(want[L]);
    free(want);
    for (int i = 0; i < nym; i++)
        free((char *)ym[i].glob);
    free(ym);
    cJSON_Delete(root);
    if (rc)
        lwq_aq_recipe_free(out);
    return rc;
}
