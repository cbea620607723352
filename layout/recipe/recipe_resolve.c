/* layout/recipe/recipe_resolve.c — what a recipe makes of a module: the glob and quantizer-name
 * matches, the rules applied in order to one choice, and the refusals of what lwq does not write. */
#include "layout/recipe/recipe.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "layout/format/quant_formats.h"

/* `[...]` at p against c: 1 / 0, or -1 when the bracket is not closed (then it is a literal). */
static int class_match(const char *p, char c, const char **next)
{
    const char *q = p + 1;
    int neg = 0, hit = 0;
    if (*q == '!') {
        neg = 1;
        q++;
    }
    for (int first = 1; *q && (*q != ']' || first); first = 0) {
        if (q[1] == '-' && q[2] && q[2] != ']') {
            hit |= (unsigned char)c >= (unsigned char)q[0] && (unsigned char)c <= (unsigned char)q[2];
            q += 3;
        } else {
            hit |= *q == c;
            q++;
        }
    }
    if (*q != ']')
        return -1;
    *next = q + 1;
    return hit ^ neg;
}

/* One non-star token of the pattern against one character. */
static int token_match(const char *p, char c, const char **next)
{
    if (*p == '[') {
        int r = class_match(p, c, next);
        if (r >= 0)
            return r;
    }
    *next = p + 1;
    return *p == '?' || *p == c;
}

/* Classic greedy glob with single-star backtracking: linear space, O(n*m) time (times the
 * length of a bracket set, itself part of the pattern). */
int lwq_glob_match(const char *p, const char *s)
{
    const char *star = NULL, *resume = NULL, *next;
    while (*s) {
        if (*p == '*') {
            star = p++;
            resume = s;
        } else if (*p && token_match(p, *s, &next)) {
            p = next;
            s++;
        } else if (star) {
            p = star + 1;
            s = ++resume;
        } else {
            return 0;
        }
    }
    while (*p == '*')
        p++;
    return *p == 0;
}

lwq_quant_choice lwq_recipe_resolve(const lwq_recipe *r, const char *module)
{
    return lwq_recipe_resolve_module(r, module, 0);
}

/* Model Optimizer's _FUSED_EXPERTS_QUANTIZER_LIST_RE, r"(weight_quantizers?|input_quantizers?)\.\d+(?=$|\.)",
 * replaced by the singular base, left to right: out = qname with every such list index dropped. */
static void qname_normalize(const char *s, char *out, size_t cap)
{
    static const char *const base[] = {"weight_quantizer", "input_quantizer"};
    size_t o = 0;
    while (*s && o + 1 < cap) {
        size_t adv = 0, keep = 0;
        for (int b = 0; b < 2 && !adv; b++) {
            size_t n = strlen(base[b]);
            if (strncmp(s, base[b], n))
                continue;
            size_t j = n + (s[n] == 's');
            if (s[j] != '.' || !isdigit((unsigned char)s[j + 1]))
                continue;
            size_t d = j + 1;
            while (isdigit((unsigned char)s[d]))
                d++;
            if (s[d] == 0 || s[d] == '.') {
                adv = d;
                keep = n;
            }
        }
        if (!adv) {
            out[o++] = *s++;
            continue;
        }
        for (size_t i = 0; i < keep && o + 1 < cap; i++)
            out[o++] = s[i];
        s += adv;
    }
    out[o] = 0;
}

int lwq_qname_match(const char *glob, const char *qname)
{
    if (lwq_glob_match(glob, qname))
        return 1;
    char norm[LWQ_QNAME_MAX];
    if (strlen(qname) >= sizeof norm)
        return 0;
    qname_normalize(qname, norm, sizeof norm);
    return strcmp(norm, qname) && lwq_glob_match(glob, norm);
}

void lwq_qnames_plain(lwq_qnames *q, const char *module)
{
    memset(q, 0, sizeof *q);
    q->module = module;
    snprintf(q->base, sizeof q->base, "%s", module);
    q->nweight = 1;
    snprintf(q->weight[0], sizeof q->weight[0], "%s.weight_quantizer", module);
    snprintf(q->input, sizeof q->input, "%s.input_quantizer", module);
    snprintf(q->output, sizeof q->output, "%s.output_quantizer", module);
}

static int facts_ok(const lwq_recipe_rule *u, unsigned facts)
{
    if (u->has_mla && u->mla != ((facts & LWQ_MODULE_MLA_PROJ) != 0))
        return 0;
    if (u->has_embed && u->embed != ((facts & LWQ_MODULE_EMBEDDING) != 0))
        return 0;
    return 1;
}

/* Whether rule u reaches a quantizer of `module` named `qn` (qn NULL or "": the module has no such
 * quantizer, which a quantizer_name rule then cannot reach). */
static int rule_reaches(const lwq_recipe_rule *u, const char *module, const char *qn, unsigned facts)
{
    if (!facts_ok(u, facts))
        return 0;
    if (u->qname)
        return qn && qn[0] && lwq_qname_match(u->qname, qn);
    return lwq_glob_match(u->match, module);
}

/* The text a rule selects with, for messages. */
static const char *rule_glob(const lwq_recipe_rule *u) { return u->qname ? u->qname : u->match; }

/* One quantizer's state while the rules are applied: the format its attributes give, on/off. */
typedef struct qstate {
    lwq_qformat fmt;
    int on;
    int has_amax;             /* the attributes pin the amax (input rules only) */
    double amax;
} qstate;

static void apply_state(qstate *q, const lwq_recipe_rule *u)
{
    if (u->has_format) {
        q->fmt = u->format;
        q->on = u->format != LWQ_QFMT_NONE;
        q->has_amax = u->has_input_amax;
        q->amax = u->input_amax;
    }
    if (u->has_enable)
        q->on = u->enable;
}

lwq_quant_choice lwq_recipe_resolve_module(const lwq_recipe *r, const char *module, unsigned facts)
{
    lwq_qnames q;
    lwq_qnames_plain(&q, module);
    return lwq_recipe_resolve_names(r, &q, facts);
}

lwq_quant_choice lwq_recipe_resolve_names(const lwq_recipe *r, const lwq_qnames *q, unsigned facts)
{
    lwq_quant_choice c = {.format = LWQ_QFMT_NONE, .algo = r->algo, .fp8_scale_sweep = r->fp8_scale_sweep,
                          .gptq_damp = r->gptq_damp, .gptq_act_order = r->gptq_act_order,
                          .weight_format = LWQ_QFMT_NONE, .input_format = LWQ_QFMT_NONE, .mse_range = r->mse_range,
                          .mse_mult = {r->mse_mult[0], r->mse_mult[1], r->mse_mult[2]}};
    int f46 = 0;
    qstate w = {LWQ_QFMT_NONE, 0, 0, 0}, in = {LWQ_QFMT_NONE, 0, 0, 0};
    for (int i = 0; i < r->nrules; i++) {
        const lwq_recipe_rule *u = &r->rules[i];
        if (u->quantizer == LWQ_QSEL_KV || u->quantizer >= LWQ_QSEL_OUTPUT)
            continue;
        int on_w = 0, on_in = 0;
        if (u->quantizer != LWQ_QSEL_INPUT)
            for (int k = 0; k < q->nweight && !on_w; k++)
                on_w = rule_reaches(u, q->module, q->weight[k], facts);
        if (u->quantizer != LWQ_QSEL_WEIGHT)
            on_in = rule_reaches(u, q->module, q->input, facts);
        if (on_w) {
            apply_state(&w, u);
            if (u->has_format) /* a new format resets it, as a new cfg does in Model Optimizer */
                f46 = 0;
            if (u->has_f46)
                f46 = u->f46;
            /* the calibration is the weight quantizer's (an "input" rule sets none) */
            if (u->has_algo)
                c.algo = u->algo;
            if (u->has_sweep)
                c.fp8_scale_sweep = u->sweep;
        }
        if (on_in)
            apply_state(&in, u);
    }
    lwq_qformat wf = w.on ? w.fmt : LWQ_QFMT_NONE, xf = in.on ? in.fmt : LWQ_QFMT_NONE;
    c.four_over_six = wf == LWQ_QFMT_NVFP4 && f46;
    c.weight_format = wf;
    c.input_format = xf;
    if (wf == xf) {
        c.format = wf;
        c.has_input_amax = wf != LWQ_QFMT_NONE && in.has_amax;
        c.input_amax = (float)in.amax;
    } else if (wf == LWQ_QFMT_NVFP4 && xf == LWQ_QFMT_NONE) {
        /* W4A16: Model Optimizer's get_quantization_format calls an NVFP4 weight quantizer with
         * no enabled input quantizer w4a16_nvfp4 and exports the weights as for NVFP4 */
        c.format = LWQ_QFMT_NVFP4;
        c.weight_only = 1;
    } else {
        c.split = 1;
    }
    return c;
}

lwq_kv_mode lwq_recipe_resolve_kv(const lwq_recipe *r, const char *attn_module)
{
    lwq_qnames q;
    lwq_qnames_plain(&q, attn_module);
    return lwq_recipe_resolve_kv_names(r, &q);
}

lwq_kv_mode lwq_recipe_resolve_kv_names(const lwq_recipe *r, const lwq_qnames *attn)
{
    int any = 0;
    lwq_kv_mode mode = LWQ_KV_NONE;
    int on = 0;
    char kq[LWQ_QNAME_MAX + 20]; /* the k and v quantizers: a recipe treats both alike (recipe_qcfg.c) */
    snprintf(kq, sizeof kq, "%s.k_bmm_quantizer", attn->base);
    for (int i = 0; i < r->nrules; i++) {
        const lwq_recipe_rule *u = &r->rules[i];
        if (u->quantizer != LWQ_QSEL_KV || u->has_embed)
            continue;
        any = 1;
        if (!rule_reaches(u, attn->module, kq, 0))
            continue;
        if (u->has_kv) {
            mode = u->kv;
            on = u->kv != LWQ_KV_NONE;
        }
        if (u->has_enable)
            on = u->enable;
    }
    if (!any)
        return r->kv;
    return on ? mode : LWQ_KV_NONE;
}

int lwq_recipe_embedding(const lwq_recipe *r, const char *embed_module, lwq_error *e)
{
    lwq_qnames q;
    lwq_qnames_plain(&q, embed_module);
    return lwq_recipe_embedding_names(r, &q, e);
}

int lwq_recipe_embedding_names(const lwq_recipe *r, const lwq_qnames *q, lwq_error *e)
{
    const char *embed_module = q->module;
    if (!r->embed_rules)
        return LWQ_LMHEAD_NONE;
    lwq_quant_choice c = lwq_recipe_resolve_names(r, q, LWQ_MODULE_EMBEDDING);
    if (c.weight_format == LWQ_QFMT_NONE)
        return LWQ_LMHEAD_NONE;
    if (c.weight_format == LWQ_QFMT_NVFP4 && !c.four_over_six &&
        (c.algo == LWQ_ALGO_MAX || (c.algo == LWQ_ALGO_MSE && (c.fp8_scale_sweep || c.mse_range == LWQ_MSE_RANGE_DEFAULT))))
        return c.algo == LWQ_ALGO_MAX ? LWQ_LMHEAD_MAX : c.fp8_scale_sweep ? LWQ_LMHEAD_SWEEP : LWQ_LMHEAD_MSE;
    return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: recipe \"%s\" quantizes the token embedding's weight as %s%s (%s); lwq "
                    "writes an embedding as weight-only NVFP4 only (dynamic blocks, or static ones under mse)",
                    embed_module, r->name, lwq_qformat_name(c.weight_format), c.four_over_six ? " Four-over-Six" : "",
                    lwq_algo_name(c.algo));
}

static const char *const unwritten_suffix[] = {"", "", "", "", ".output_quantizer", ".q_bmm_quantizer",
                                                ".softmax_quantizer"};

static int check_unwritten_named(const lwq_recipe *r, const char *module, const char *qn, unsigned facts,
                                 lwq_qsel kind, lwq_error *e)
{
    int on = -1; /* the rule that last enabled it, while enabled */
    for (int i = 0; i < r->nrules; i++) {
        const lwq_recipe_rule *u = &r->rules[i];
        if (u->quantizer == kind && u->has_enable && rule_reaches(u, module, qn, facts))
            on = u->enable ? i : -1;
    }
    if (on < 0)
        return 0;
    return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: recipe \"%s\" rule %d ('%s') leaves its %s quantizer enabled, which "
                    "lwq does not write", module, r->name, on, rule_glob(&r->rules[on]), lwq_qsel_name(kind));
}

int lwq_recipe_check_unwritten(const lwq_recipe *r, const char *module, unsigned facts, lwq_qsel kind,
                               lwq_error *e)
{
    lwq_qnames q;
    lwq_qnames_plain(&q, module);
    return lwq_recipe_check_unwritten_names(r, &q, facts, kind, e);
}

int lwq_recipe_check_unwritten_names(const lwq_recipe *r, const lwq_qnames *q, unsigned facts, lwq_qsel kind,
                                     lwq_error *e)
{
    if (kind < LWQ_QSEL_OUTPUT || kind > LWQ_QSEL_SOFTMAX)
        return lwq_errf(e, LWQ_EINVAL, "%s: quantizer kind %d is not an unwritten one", q->module, (int)kind);
    char qn[LWQ_QNAME_MAX + 24];
    if (kind == LWQ_QSEL_OUTPUT) {
        if (!q->output[0]) /* a fused expert: Model Optimizer gives the experts module no output quantizer */
            return 0;
        snprintf(qn, sizeof qn, "%s", q->output);
    } else {
        snprintf(qn, sizeof qn, "%s%s", q->base, unwritten_suffix[kind]);
    }
    return check_unwritten_named(r, q->module, qn, facts, kind, e);
}

int lwq_recipe_check_kv(const lwq_recipe *r, const char *attn_module, lwq_error *e)
{
    lwq_qnames q;
    lwq_qnames_plain(&q, attn_module);
    return lwq_recipe_check_kv_names(r, &q, e);
}

int lwq_recipe_check_kv_names(const lwq_recipe *r, const lwq_qnames *attn, lwq_error *e)
{
    const char *attn_module = attn->module;
    lwq_kv_mode k = lwq_recipe_resolve_kv_names(r, attn);
    if (k == r->kv)
        return 0;
    return lwq_errf(e, LWQ_EUNSUPPORTED,
                    "%s: recipe \"%s\" gives this attention module KV cache %s but the model %s; lwq writes "
                    "one KV cache mode for every layer",
                    attn_module, r->name, lwq_kv_mode_name(k), lwq_kv_mode_name(r->kv));
}

int lwq_recipe_split_error(const lwq_quant_choice *c, const char *module, lwq_error *e)
{
    return lwq_errf(e, LWQ_EUNSUPPORTED,
                    "%s: the recipe makes its weight quantizer %s and its input quantizer %s; lwq writes "
                    "W4A4 NVFP4, W8A8 FP8 and weight-only NVFP4 (W4A16) only (weight and input in one "
                    "format, NVFP4 weights alone, or neither quantized)",
                    module, c->weight_format == LWQ_QFMT_NONE ? "disabled" : lwq_qformat_name(c->weight_format),
                    c->input_format == LWQ_QFMT_NONE ? "disabled" : lwq_qformat_name(c->input_format));
}

int lwq_choice_mse_candidates(const lwq_quant_choice *c, float *out)
{
    if (c->mse_range != LWQ_MSE_RANGE_OWN)
        return 0;
    int n = lwq_mse_linspace(c->mse_mult[0], c->mse_mult[1], c->mse_mult[2], out, LWQ_MSE_MAX_STEPS);
    return n >= 1 && n <= LWQ_MSE_MAX_STEPS ? n : 0;
}
