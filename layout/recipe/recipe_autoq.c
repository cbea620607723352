/* layout/recipe/recipe_autoq.c — an auto_quantize recipe as the search's options (see recipe_autoq.h). */
#include "layout/recipe/recipe_autoq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* The path an alias of f's top-level imports names ("" when none). */
static const char *aq_import(const lwq_ynode *imports, const lwq_ynode *item)
{
    const char *alias = lwq_y_str(lwq_y_get(item, "$import"));
    const char *path = alias ? lwq_y_str(lwq_y_get(imports, alias)) : NULL;
    return path ? path : "";
}

/* disabled_layers / cost_excluded_layers lwq's search already keeps: the shared base unit (routers,
 * gates, conv1d, vision towers, MTP: modules lwq's search does not search or count), and for
 * disabled_layers the qwen3_6_moe recipe's "*shared_expert_gate*", an entry of that unit. */
static void aq_layers(const lwq_ynode *imports, const lwq_ynode *aq, const char *key, const char *unit, char *lacks,
                      size_t cap)
{
    const lwq_ynode *l = lwq_y_get(aq, key);
    for (int i = 0; l && i < (l->kind == LWQ_Y_SEQ ? l->n : 1); i++) {
        const lwq_ynode *it = l->kind == LWQ_Y_SEQ ? l->kids[i] : l;
        const char *s = lwq_y_str(it), *p = aq_import(imports, it);
        if (has_suffix(p, unit) || (s && !strcmp(key, "disabled_layers") && !strcmp(s, "*shared_expert_gate*")))
            continue;
        snprintf(lacks + strlen(lacks), cap - strlen(lacks), "; %s[%d] (%.60s) is not implemented (lwq keeps "
                 "%s)", key, i, s ? s : *p ? p : "inline", unit);
        return;
    }
}

/* The candidates of one candidate_formats list: lwq's formats by what they write (recipe_yaml.h) */
typedef struct aq_fmts {
    int nv, fp, wo, nm, f46;
} aq_fmts;

/* An inline candidate's compiled choice (a plain linear's quantizers) as one of lwq's formats: 1 nvfp4,
 * 2 fp8, 3 w4a16_nvfp4, 4 nvfp4_w4a4_weight_mse_fp8_sweep, 5 w4a16_nvfp4_four_over_six; 0 with `why`
 * naming the key that makes it another. */
static int aq_inline_format(const lwq_quant_choice *c, char *why, size_t cap)
{
    static const double f46[3] = {1.0, 1.5, 0.5};
    if (c->split) {
        snprintf(why, cap, "its quant_cfg gives the weight quantizer %s and the input quantizer %s (lwq's candidates "
                 "are W4A4 / W8A8 pairs or weight-only NVFP4)", lwq_qformat_name(c->weight_format),
                 lwq_qformat_name(c->input_format));
        return 0;
    }
    if (c->format == LWQ_QFMT_NONE) {
        snprintf(why, cap, "its quant_cfg enables no weight quantizer");
        return 0;
    }
    if (c->has_input_amax) {
        snprintf(why, cap, "its input quantizer has a constant_amax (lwq's candidates calibrate it)");
        return 0;
    }
    const char *m = lwq_algo_name(c->algo);
    if (c->format == LWQ_QFMT_FP8) {
        if (c->algo == LWQ_ALGO_MAX)
            return 2;
        snprintf(why, cap, "FP8 under algorithm.method %s (lwq's fp8 candidate is max-calibrated)", m);
        return 0;
    }
    if (c->weight_only && c->four_over_six) {
        if (c->algo == LWQ_ALGO_MSE && !c->fp8_scale_sweep && c->mse_range == LWQ_MSE_RANGE_OWN &&
            !memcmp(c->mse_mult, f46, sizeof f46))
            return 5;
        snprintf(why, cap, "weight-only Four-over-Six NVFP4 with algorithm start_multiplier %g, stop_multiplier %g, "
                 "step_size %g (lwq's w4a16_nvfp4_four_over_six candidate: method mse, fp8_scale_sweep false, 1.0, "
                 "1.5, 0.5)", c->mse_range == LWQ_MSE_RANGE_OWN ? c->mse_mult[0] : 0.25,
                 c->mse_range == LWQ_MSE_RANGE_OWN ? c->mse_mult[1] : 4.0,
                 c->mse_range == LWQ_MSE_RANGE_OWN ? c->mse_mult[2] : 0.1);
        return 0;
    }
    if (c->four_over_six) {
        snprintf(why, cap, "W4A4 Four-over-Six NVFP4 (cfg.block_sizes.four_over_six with the input quantizer on) is "
                 "no candidate of lwq's search (weight-only is: w4a16_nvfp4_four_over_six)");
        return 0;
    }
    if (c->weight_only) {
        if (c->algo == LWQ_ALGO_MAX)
            return 3;
        snprintf(why, cap, "weight-only NVFP4 under algorithm.method %s%s (lwq's w4a16_nvfp4 candidate is "
                 "max-calibrated, dynamic blocks)", m, c->fp8_scale_sweep ? " with fp8_scale_sweep" : "");
        return 0;
    }
    if (c->algo == LWQ_ALGO_MAX)
        return 1;
    if (c->algo == LWQ_ALGO_MSE && c->fp8_scale_sweep)
        return 4;
    snprintf(why, cap, "NVFP4 under algorithm.method %s%s (lwq's NVFP4 candidates: max with dynamic blocks, and mse "
             "with fp8_scale_sweep true and static blocks)", m, c->fp8_scale_sweep ? " with fp8_scale_sweep" : "");
    return 0;
}

/* The candidates of a candidate_formats list `cands` (its name `key` for messages): an {$import: alias}
 * whose preset path ends in nvfp4, fp8, w4a16_nvfp4 or nvfp4_w4a4_weight_mse_fp8_sweep, or an inline
 * QuantizeConfig (algorithm, quant_cfg, effective_bits) that compiles to one of lwq's formats (through
 * f->compile); what is none (another preset, an inline candidate that writes something else) is
 * appended to lacks, the first only.  0, or a negative LWQ_E* when an inline candidate does not compile
 * (its imports, its entries: the message in e names the file and line). */
static int aq_cands(const lwq_recipe_aq_file *f, const lwq_ynode *cands, const char *key, aq_fmts *out, char *lacks,
                    size_t cap, lwq_error *e)
{
    int bad = 0;
    for (int i = 0; cands && cands->kind == LWQ_Y_SEQ && i < cands->n; i++) {
        const lwq_ynode *it = cands->kids[i];
        if (it->kind == LWQ_Y_MAP && !lwq_y_get(it, "$import")) {
            /* inline: its keys are Model Optimizer's QuantizeConfig's */
            char why[400] = "";
            for (int k = 0; k < it->n && !why[0]; k++) {
                const char *kk = it->kids[2 * k]->str;
                if (strcmp(kk, "algorithm") && strcmp(kk, "quant_cfg") && strcmp(kk, "effective_bits"))
                    snprintf(why, sizeof why, "its key %.40s is not read (algorithm, quant_cfg, effective_bits)", kk);
            }
            double eb = 0;
            const lwq_ynode *ebn = lwq_y_get(it, "effective_bits");
            if (!why[0] && ebn && (lwq_y_number(ebn, &eb) || !(eb > 0 && eb <= 16)))
                return lwq_errf(e, LWQ_EFORMAT, "%s:%d: %s[%d].effective_bits must be a number in (0, 16]", f->rel,
                                ebn->line, key, i);
            const lwq_ynode *qc = lwq_y_get(it, "quant_cfg");
            if (!why[0] && (!qc || qc->kind != LWQ_Y_SEQ))
                return lwq_errf(e, LWQ_EFORMAT, "%s:%d: %s[%d]: an inline candidate needs a quant_cfg list", f->rel,
                                it->line, key, i);
            int fm = 0;
            if (!why[0] && qc->n == 0)
                snprintf(why, sizeof why, "its quant_cfg is empty (it enables no quantizer)");
            if (!why[0] && !f->compile)
                snprintf(why, sizeof why, "inline candidates are read only from a recipe file");
            if (!why[0]) {
                lwq_quant_choice c;
                int rc = f->compile(f->ctx, it, &c, e);
                if (rc)
                    return rc;
                fm = aq_inline_format(&c, why, sizeof why);
            }
            if (fm == 1)
                out->nv = 1;
            else if (fm == 2)
                out->fp = 1;
            else if (fm == 3)
                out->wo = 1;
            else if (fm == 4)
                out->nm = 1;
            else if (fm == 5)
                out->f46 = 1;
            else if (!bad++)
                snprintf(lacks + strlen(lacks), cap - strlen(lacks), "; %.60s[%d] (inline, %s:%d) is no format lwq "
                         "searches: %s", key, i, f->rel, it->line, why);
            continue;
        }
        /* a candidate is {$import: alias}; the alias names a preset path in the file's imports */
        const char *path = aq_import(f->imports, it);
        const char *b = strrchr(path, '/');
        b = b ? b + 1 : path;
        if (!strcmp(b, "nvfp4"))
            out->nv = 1;
        else if (!strcmp(b, "fp8"))
            out->fp = 1;
        else if (!strcmp(b, "w4a16_nvfp4"))
            out->wo = 1;
        else if (!strcmp(b, "nvfp4_w4a4_weight_mse_fp8_sweep"))
            out->nm = 1;
        else if (!bad++)
            snprintf(lacks + strlen(lacks), cap - strlen(lacks), "; %.60s[%d] (%s, %s:%d) is no format lwq searches "
                     "(nvfp4, fp8, w4a16_nvfp4, nvfp4_w4a4_weight_mse_fp8_sweep, or an inline candidate that "
                     "compiles to one of them or to weight-only Four-over-Six NVFP4)", key, i, *path ? path : "inline",
                     f->rel, it->line);
    }
    return 0;
}

/* module_search_spaces (`l`, NULL when absent) into run->aq_space: the count, or -(i + 1) when entry i
 * breaks Model Optimizer's schema (not a mapping, other keys, no pattern, no candidate, too many or too
 * long).  What lwq lacks for an entry goes to lacks: candidates that are no lwq format.  A pattern that
 * matches lm_head makes lm_head a search group (engine/autoq/head/autoq_head.h, as Model Optimizer 0.47
 * searches it).  A negative LWQ_E* - 1000000: an inline candidate did not compile (the message in e). */
static int aq_spaces(const lwq_recipe_aq_file *f, const lwq_ynode *l, lwq_recipe_run *run, char *lacks, size_t cap,
                     lwq_error *e)
{
    if (!l)
        return 0;
    if (l->kind != LWQ_Y_SEQ || l->n > LWQ_RECIPE_AQ_MAX_SPACES)
        return -1;
    for (int i = 0; i < l->n; i++) {
        const lwq_ynode *m = l->kids[i], *pats = lwq_y_get(m, "module_name_patterns");
        const lwq_ynode *cands = lwq_y_get(m, "candidate_formats"), *anq = lwq_y_get(m, "allow_no_quant");
        lwq_recipe_aq_space *sp = &run->aq_space[i];
        memset(sp, 0, sizeof *sp);
        sp->line = m->line;
        sp->allow_no_quant = 1; /* Model Optimizer's default */
        if (m->kind != LWQ_Y_MAP || !pats || pats->kind != LWQ_Y_SEQ || pats->n < 1 ||
            pats->n > LWQ_RECIPE_AQ_MAX_PATTERNS || !cands || cands->kind != LWQ_Y_SEQ || cands->n < 1 ||
            (anq && lwq_y_bool(anq, &sp->allow_no_quant)))
            return -(i + 1);
        for (int k = 0; k < m->n; k++) {
            const char *key = m->kids[2 * k]->str;
            if (strcmp(key, "module_name_patterns") && strcmp(key, "candidate_formats") &&
                strcmp(key, "allow_no_quant"))
                return -(i + 1);
        }
        for (int k = 0; k < pats->n; k++) {
            const char *p = lwq_y_str(pats->kids[k]);
            if (!p || strlen(p) >= LWQ_RECIPE_AQ_PATTERN_MAX)
                return -(i + 1);
            snprintf(sp->pattern[k], sizeof sp->pattern[k], "%s", p);
        }
        sp->npatterns = pats->n;
        char key[48];
        snprintf(key, sizeof key, "module_search_spaces[%d].candidate_formats", i);
        aq_fmts fm = {0};
        int rc = aq_cands(f, cands, key, &fm, lacks, cap, e);
        if (rc)
            return rc - 1000000; /* below every -(i + 1): a compile error, its message in e */
        sp->nvfp4 = fm.nv, sp->fp8 = fm.fp, sp->w4a16 = fm.wo, sp->nvfp4_mse = fm.nm, sp->w4a16_f46 = fm.f46;
        /* lm_head's search has fp8, w4a16_nvfp4 and none (engine/autoq/head/autoq_head.h, which refuses the
         * others again by the model's own name): refused here too, with the file and line */
        for (int k = 0; k < sp->npatterns && fm.f46; k++)
            if (lwq_glob_match(sp->pattern[k], "lm_head")) {
                snprintf(lacks + strlen(lacks), cap - strlen(lacks), "; module_search_spaces[%d] (%s:%d) pattern %.60s "
                         "offers lm_head w4a16_nvfp4_four_over_six, which lwq's lm_head search does not have (fp8, "
                         "w4a16_nvfp4, none)", i, f->rel, sp->line, sp->pattern[k]);
                break;
            }
    }
    return l->n;
}

/* An auto_quantize recipe (Model Optimizer's ModelOptAutoQuantizeRecipe) is lwq's search with the same
 * command's options (--auto-quantize-bits from constraints.effective_bits, --auto-quantize-formats from
 * candidate_formats' preset names, none added as Model Optimizer adds it, the score and its size, the
 * cost model): when lwq has all it says, run gets them; else the refusal gives those options and names
 * what lwq lacks for it: candidates that are no lwq format, layer patterns beyond the base units.  A
 * fixed quantize baseline sets run->aq_baseline (recipe_yaml.c compiles it as the base recipe). */
int lwq_recipe_aq_parse(const lwq_recipe_aq_file *f, const lwq_ynode *aq, int line, lwq_recipe_run *run, lwq_error *e)
{
    const lwq_ynode *con = lwq_y_get(aq, "constraints"), *cands = lwq_y_get(aq, "candidate_formats");
    const char *bits = lwq_y_str(lwq_y_get(con, "effective_bits")), *cost = lwq_y_str(lwq_y_get(con, "cost_model"));
    const char *method = lwq_y_str(lwq_y_get(aq, "auto_quantize_method"));
    const char *size = lwq_y_str(lwq_y_get(aq, "score_size"));
    char fmts[160] = "", lacks[1024] = "";
    aq_fmts top = {0};
    int rc = aq_cands(f, cands, "candidate_formats", &top, lacks, sizeof lacks, e);
    if (rc)
        return rc;
    int nv = top.nv, fp = top.fp, wo = top.wo, nm = top.nm, f46 = top.f46;
    int nsp = aq_spaces(f, lwq_y_get(aq, "module_search_spaces"), run, lacks, sizeof lacks, e);
    if (nsp < -1000000)
        return nsp + 1000000;
    if (nv || fp || wo || nm || f46)
        snprintf(fmts, sizeof fmts, "%s%s%s%s%snone", nv ? "nvfp4," : "", nm ? "nvfp4_w4a4_weight_mse_fp8_sweep," : "",
                 fp ? "fp8," : "", wo ? "w4a16_nvfp4," : "", f46 ? "w4a16_nvfp4_four_over_six," : "");
    else /* no top-level candidates (module_search_spaces has its own) */
        snprintf(fmts, sizeof fmts, "F,...");
    /* active_moe is lwq's --auto-quantize-cost-model active_moe, its ratio the option's */
    const char *ratio = lwq_y_str(lwq_y_get(lwq_y_get(con, "cost"), "active_moe_expert_ratio"));
    char costopt[96] = "";
    if (cost && !strcmp(cost, "active_moe"))
        snprintf(costopt, sizeof costopt, " --auto-quantize-cost-model active_moe%s%.24s", ratio ?
                 " --auto-quantize-active-moe-ratio " : "", ratio ? ratio : "");
    else if (cost && strcmp(cost, "weight"))
        snprintf(lacks + strlen(lacks), sizeof lacks - strlen(lacks), "; constraints.cost_model %.40s is not "
                 "implemented (lwq has weight and active_moe)", cost);
    /* the fixed baseline: Model Optimizer's ModelOptAutoQuantizeRecipe validator (recipe/config.py) takes
     * it only without top-level candidate_formats and with module_search_spaces */
    const lwq_ynode *baseline = lwq_y_get(f->body, "quantize");
    int global = cands && (cands->kind != LWQ_Y_SEQ || cands->n > 0);
    if (baseline && (global || nsp == 0))
        return lwq_errf(e, LWQ_EFORMAT, "%s:%d: an auto_quantize recipe with a fixed quantize baseline must %s (Model "
                        "Optimizer's schema refuses it alike: the baseline covers the modules no search space "
                        "matches)", f->rel, line, global ? "omit top-level auto_quantize.candidate_formats and list "
                        "the searched modules under module_search_spaces" : "have at least one "
                        "auto_quantize.module_search_spaces entry");
    if (baseline && baseline->kind != LWQ_Y_MAP)
        return lwq_errf(e, LWQ_EFORMAT, "%s:%d: quantize (the fixed baseline) must be a mapping of algorithm and "
                        "quant_cfg", f->rel, baseline->line);
    for (int i = 0; aq->kind == LWQ_Y_MAP && i < aq->n; i++) {
        const char *k = aq->kids[2 * i]->str;
        if (strcmp(k, "constraints") && strcmp(k, "candidate_formats") && strcmp(k, "auto_quantize_method") &&
            strcmp(k, "score_size") && strcmp(k, "disabled_layers") && strcmp(k, "cost_excluded_layers") &&
            strcmp(k, "module_search_spaces"))
            snprintf(lacks + strlen(lacks), sizeof lacks - strlen(lacks), "; auto_quantize.%.40s is not "
                     "implemented", k);
    }
    aq_layers(f->imports, aq, "disabled_layers", "configs/auto_quantize/units/base_disabled_layers", lacks,
              sizeof lacks);
    aq_layers(f->imports, aq, "cost_excluded_layers", "configs/auto_quantize/units/base_cost_excluded_layers", lacks,
              sizeof lacks);
    /* the numbers, checked as Model Optimizer's schema checks them */
    char *end = NULL;
    double bv = bits ? strtod(bits, &end) : 4.8; /* Model Optimizer's default */
    double rv = ratio ? strtod(ratio, NULL) : 0;
    long sv = size ? strtol(size, NULL, 10) : 0;
    if ((bits && (!end || *end || !(bv > 0 && bv <= 16))) || (ratio && !(rv > 0 && rv <= 1)) ||
        (size && (sv < 1 || sv > (1 << 20))) || (method && strcmp(method, "gradient") && strcmp(method, "kl_div")))
        return lwq_errf(e, LWQ_EFORMAT, "%s:%d: auto_quantize: effective_bits must be in (0, 16], "
                        "active_moe_expert_ratio in (0, 1], score_size in [1, 1048576], auto_quantize_method "
                        "gradient or kl_div", f->rel, line);
    if (nsp < 0)
        return lwq_errf(e, LWQ_EFORMAT, "%s:%d: auto_quantize.module_search_spaces[%d]: an entry is a mapping of "
                        "module_name_patterns (1 to %d strings of at most %d characters), candidate_formats (at least "
                        "one) and allow_no_quant (a boolean); at most %d entries", f->rel, line, -nsp - 1,
                        LWQ_RECIPE_AQ_MAX_PATTERNS, LWQ_RECIPE_AQ_PATTERN_MAX - 1, LWQ_RECIPE_AQ_MAX_SPACES);
    int sq = 0; /* a space has a quantized candidate */
    for (int k = 0; k < nsp; k++)
        sq |= run->aq_space[k].nvfp4 | run->aq_space[k].fp8 | run->aq_space[k].w4a16 | run->aq_space[k].nvfp4_mse |
              run->aq_space[k].w4a16_f46;
    if (!nv && !fp && !wo && !nm && !f46 && !sq && !*lacks)
        snprintf(lacks, sizeof lacks, "; candidate_formats is empty");
    if (!*lacks) {
        /* the base preset: fp8 when FP8 is a candidate anywhere, as without spaces */
        int anyfp = fp;
        for (int k = 0; k < nsp; k++)
            anyfp |= run->aq_space[k].fp8;
        run->is_aq = 1;
        run->aq_baseline = baseline != NULL;
        run->aq_nspaces = nsp;
        snprintf(run->aq_qformat, sizeof run->aq_qformat, "%s", anyfp ? "fp8" : "nvfp4");
        run->aq_bits = bv;
        run->aq_nvfp4 = nv, run->aq_fp8 = fp, run->aq_w4a16 = wo, run->aq_nvfp4_mse = nm, run->aq_w4a16_f46 = f46;
        run->aq_active_moe = cost && !strcmp(cost, "active_moe");
        run->aq_moe_ratio = rv;
        run->aq_kl = method && !strcmp(method, "kl_div");
        run->aq_score_size = (int)sv;
        return 0;
    }
    run->aq_nspaces = 0;
    return lwq_errf(e, LWQ_EUNSUPPORTED, "%s:%d: auto_quantize (AutoQuantize searches per-layer formats over the "
                    "whole model) is not read as a recipe: lwq's search takes it as options: --qformat %s "
                    "--auto-quantize-bits %s --auto-quantize-formats %s%s%s%s%s (lm_head and routers are not "
                    "searched)%s", f->rel, line, fp ? "fp8" : "nvfp4", bits ? bits : "B", fmts, costopt,
                    method && !strcmp(method, "kl_div") ? " --auto-quantize-score kl" : "",
                    size ? " --auto-quantize-score-size " : "", size ? size : "", lacks);
}

/* An auto_quantize recipe's other top-level keys: imports, metadata with recipe_type auto_quantize. */
int lwq_recipe_aq_top(const lwq_recipe_aq_file *f, lwq_error *e)
{
    for (int i = 0; i < f->body->n; i++) {
        const char *k = f->body->kids[2 * i]->str;
        if (strcmp(k, "imports") && strcmp(k, "metadata") && strcmp(k, "auto_quantize") && strcmp(k, "quantize"))
            return lwq_errf(e, LWQ_EFORMAT, "%s:%d: unknown top-level key \"%s\" (an auto_quantize recipe has "
                            "imports, metadata, auto_quantize and optionally quantize, its fixed baseline)", f->rel,
                            f->body->kids[2 * i]->line, k);
    }
    const lwq_ynode *rt = lwq_y_get(lwq_y_get(f->body, "metadata"), "recipe_type");
    if (!lwq_y_str(rt) || strcmp(rt->str, "auto_quantize"))
        return lwq_errf(e, LWQ_EFORMAT, "%s: an auto_quantize recipe needs metadata.recipe_type auto_quantize",
                        f->rel);
    return 0;
}

