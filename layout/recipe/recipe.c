#include "layout/recipe/recipe.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys/file.h"
#include "layout/format/quant_formats.h"

#define RECIPE_MAX_BYTES (1u << 20)
#define RECIPE_MAX_RULES 4096

static const char *const qformat_names[] = {"none", "nvfp4", "fp8"};
static const char *const algo_names[] = {"max", "mse", "local_hessian", "gptq"};
static const char *const kv_names[] = {"none", "fp8", "fp8_cast", "nvfp4_cast"};

const char *lwq_choice_format_name(const lwq_quant_choice *c)
{
    return c->format == LWQ_QFMT_NVFP4 && c->weight_only ? "w4a16_nvfp4" : lwq_qformat_name(c->format);
}

const char *lwq_qformat_name(lwq_qformat f) { return (unsigned)f < 3 ? qformat_names[f] : "?"; }
const char *lwq_algo_name(lwq_calib_algo a) { return (unsigned)a < 4 ? algo_names[a] : "?"; }
const char *lwq_kv_mode_name(lwq_kv_mode k) { return (unsigned)k < 4 ? kv_names[k] : "?"; }

static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

int lwq_qformat_parse(const char *s, lwq_qformat *out)
{
    int i = lookup(s, qformat_names, 3);
    if (i < 0)
        return LWQ_EINVAL;
    *out = (lwq_qformat)i;
    return 0;
}

int lwq_algo_parse(const char *s, lwq_calib_algo *out)
{
    int i = lookup(s, algo_names, 4);
    if (i < 0)
        return LWQ_EINVAL;
    *out = (lwq_calib_algo)i;
    return 0;
}

int lwq_kv_mode_parse(const char *s, lwq_kv_mode *out)
{
    int i = lookup(s, kv_names, 4);
    if (i < 0)
        return LWQ_EINVAL;
    *out = (lwq_kv_mode)i;
    return 0;
}

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

void lwq_recipe_free(lwq_recipe *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->nrules; i++) {
        free(r->rules[i].match);
        free(r->rules[i].qname);
    }
    free(r->rules);
    memset(r, 0, sizeof *r);
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

static const char *const qsel_names[] = {"", "weight", "input", "kv", "output", "q_bmm", "softmax"};
_Static_assert(sizeof qsel_names / sizeof qsel_names[0] == LWQ_QSEL_SOFTMAX + 1, "one name per lwq_qsel");

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
                    "lwq does not write", module, r->name, on, rule_glob(&r->rules[on]), qsel_names[kind]);
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

/* Model Optimizer quantizes an nn.Embedding's table when a rule names it (the Nemotron-3 Nano W4A16
 * recipe: '*embeddings*weight_quantizer' with nvfp4); lwq keeps every embedding in the source dtype,
 * so a rule that names an embedding and turns a weight format on is refused rather than ignored.
 * '*embed_vision*' is the vision branch's projection, which lwq passes through, not an embedding. */
int lwq_recipe_check_embedding(const lwq_recipe *r, const char *path, lwq_error *e)
{
    if (r->embed_rules) /* the engine resolves the embedding itself (engine/run/run_setup.c) */
        return 0;
    for (int i = 0; i < r->nrules; i++) {
        const lwq_recipe_rule *u = &r->rules[i];
        if (!u->match || !strstr(u->match, "embed") || strstr(u->match, "embed_vision"))
            continue;
        if (u->quantizer != LWQ_QSEL_BOTH && u->quantizer != LWQ_QSEL_WEIGHT)
            continue;
        int on = u->has_enable ? u->enable : u->has_format;
        if (on && u->has_format && u->format != LWQ_QFMT_NONE)
            return lwq_errf(e, LWQ_EUNSUPPORTED,
                            "%s: rule %d ('%s') quantizes an embedding's weight (%s); lwq keeps the embeddings "
                            "in the source dtype and does not write a quantized one (drop the rule, or "
                            "{quantizer_name: '%s', enable: false})",
                            path, i, u->match, lwq_qformat_name(u->format), u->match);
        if (on && !u->has_format)
            return lwq_errf(e, LWQ_EUNSUPPORTED,
                            "%s: rule %d ('%s') enables an embedding's weight quantizer; lwq keeps the embeddings "
                            "in the source dtype and does not write a quantized one", path, i, u->match);
    }
    return 0;
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

int lwq_recipe_mse_range(double start, double stop, double step)
{
    if (start == 0.25 && stop == 4.0 && step == 0.1)
        return LWQ_MSE_RANGE_DEFAULT;
    float m[LWQ_MSE_MAX_STEPS];
    int n = lwq_mse_linspace(start, stop, step, m, LWQ_MSE_MAX_STEPS);
    return n >= 1 && n <= LWQ_MSE_MAX_STEPS ? LWQ_MSE_RANGE_OWN : -1;
}

int lwq_choice_mse_candidates(const lwq_quant_choice *c, float *out)
{
    if (c->mse_range != LWQ_MSE_RANGE_OWN)
        return 0;
    int n = lwq_mse_linspace(c->mse_mult[0], c->mse_mult[1], c->mse_mult[2], out, LWQ_MSE_MAX_STEPS);
    return n >= 1 && n <= LWQ_MSE_MAX_STEPS ? n : 0;
}

/* [start, stop, step] of a JSON array into v, as lwq_recipe_mse_range; -1 for anything else. */
static int lwq_recipe_mse_range_of(const cJSON *a, double *v, int *rc)
{
    *rc = 0;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 3)
        return -1;
    for (int i = 0; i < 3; i++) {
        const cJSON *x = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(x))
            return -1;
        v[i] = x->valuedouble;
    }
    return lwq_recipe_mse_range(v[0], v[1], v[2]);
}

/* ---- parsing ------------------------------------------------------------------------------ */

static int algo_from_json(const char *path, const char *what, const cJSON *v, lwq_calib_algo *out, lwq_error *e)
{
    if (!cJSON_IsString(v))
        return lwq_errf(e, LWQ_EFORMAT, "%s: %s must be a string", path, what);
    /* Algorithms other tools offer that change weights, not only scales. */
    static const char *const unsupported[] = {"awq", "awq_lite", "awq_full", "svdquant", "smoothquant"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (!strcmp(v->valuestring, unsupported[i]))
            return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: %s \"%s\" is not supported (supported: max, mse, local_hessian, gptq)",
                            path, what, v->valuestring);
    if (lwq_algo_parse(v->valuestring, out) != 0)
        return lwq_errf(e, LWQ_EFORMAT, "%s: %s \"%s\" unknown (supported: max, mse, local_hessian, gptq)", path, what,
                        v->valuestring);
    return 0;
}

/* Whether a key before `k` in object `o` has k's name.  cJSON keeps every duplicate, and a key
 * given twice is ambiguous (which one wins?), so a recipe that repeats one is refused.  Called on
 * each key as the parse loops reach it: every key before k is known and distinct (the loops stop
 * at an unknown or repeated one), so this scans a handful of keys, whatever the object's size. */
static int repeated(const cJSON *o, const cJSON *k)
{
    for (const cJSON *j = o->child; j && j != k; j = j->next)
        if (!strcmp(j->string, k->string))
            return 1;
    return 0;
}

#define REPEATED_MSG "key \"%s\" appears twice (each key may be given once)"

static int parse_rule(const char *path, int idx, const cJSON *o, lwq_recipe_rule *u, lwq_error *e)
{
    memset(u, 0, sizeof *u);
    if (!cJSON_IsObject(o))
        return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d] is not an object", path, idx);
    for (const cJSON *k = o->child; k; k = k->next) {
        const char *key = k->string;
        if (repeated(o, k))
            return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d]: " REPEATED_MSG, path, idx, key);
        if (!strcmp(key, "match") || !strcmp(key, "quantizer_name")) {
            if (!cJSON_IsString(k) || !k->valuestring[0])
                return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d].%s must be a non-empty string", path, idx, key);
            if (strlen(k->valuestring) > 512)
                return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d].%s longer than 512 characters", path, idx, key);
            if (u->match || u->qname)
                return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d]: give either \"match\" (module names) or "
                                "\"quantizer_name\" (Model Optimizer's quantizer names), not both", path, idx);
            char *v = strdup(k->valuestring);
            if (!v)
                return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
            *(key[0] == 'm' ? &u->match : &u->qname) = v;
        } else if (!strcmp(key, "format")) {
            if (!cJSON_IsString(k) || lwq_qformat_parse(k->valuestring, &u->format) != 0)
                return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d].format must be \"nvfp4\", \"fp8\" or \"none\"",
                                path, idx);
            u->has_format = 1;
        } else if (!strcmp(key, "enable")) {
            if (!cJSON_IsBool(k))
                return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d].enable must be true or false", path, idx);
            u->enable = cJSON_IsTrue(k);
            u->has_enable = 1;
        } else if (!strcmp(key, "algo")) {
            char what[32];
            snprintf(what, sizeof what, "rules[%d].algo", idx);
            int rc = algo_from_json(path, what, k, &u->algo, e);
            if (rc)
                return rc;
            u->has_algo = 1;
        } else if (!strcmp(key, "fp8_scale_sweep")) {
            if (!cJSON_IsBool(k))
                return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d].fp8_scale_sweep must be true or false", path, idx);
            u->sweep = cJSON_IsTrue(k);
            u->has_sweep = 1;
        } else if (!strcmp(key, "quantizer")) {
            int q = cJSON_IsString(k) ? lookup(k->valuestring, qsel_names + 1, LWQ_QSEL_SOFTMAX) : -1;
            if (q < 0)
                return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d].quantizer must be \"weight\", \"input\", \"kv\", "
                                "\"output\", \"q_bmm\" or \"softmax\"", path, idx);
            u->quantizer = (lwq_qsel)(q + 1);
        } else if (!strcmp(key, "kv_cache")) {
            if (!cJSON_IsString(k) || lwq_kv_mode_parse(k->valuestring, &u->kv) != 0)
                return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d].kv_cache must be \"none\", \"fp8\" or \"fp8_cast\"",
                                path, idx);
            u->has_kv = 1;
        } else if (!strcmp(key, "input_amax")) {
            if (!cJSON_IsNumber(k) || !LWQ_RECIPE_AMAX_OK(k->valuedouble))
                return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d].input_amax %s: a fixed input amax must be a number in "
                                "[%.3g, %.3g] (its input scale, amax / 2688, must be a normal float)", path, idx,
                                cJSON_IsNumber(k) ? "is out of range" : "is not a number", LWQ_RECIPE_AMAX_MIN,
                                LWQ_RECIPE_AMAX_MAX);
            u->input_amax = k->valuedouble;
            u->has_input_amax = 1;
        } else if (!strcmp(key, "four_over_six")) {
            if (!cJSON_IsBool(k))
                return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d].four_over_six must be true or false", path, idx);
            u->f46 = cJSON_IsTrue(k);
            u->has_f46 = 1;
        } else if (!strcmp(key, "embedding")) {
            if (!cJSON_IsBool(k))
                return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d].embedding must be true or false", path, idx);
            u->embed = cJSON_IsTrue(k);
            u->has_embed = 1;
        } else if (!strcmp(key, "mla_projection")) {
            if (!cJSON_IsBool(k))
                return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d].mla_projection must be true or false", path, idx);
            u->mla = cJSON_IsTrue(k);
            u->has_mla = 1;
        } else {
            return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d]: unknown key \"%s\"", path, idx, key);
        }
    }
    if (!u->match && !u->qname)
        return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d] has no \"match\"", path, idx);
    if (u->quantizer == LWQ_QSEL_KV && (u->has_format || u->has_algo || u->has_sweep || u->has_mla))
        return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d]: a \"quantizer\": \"kv\" rule takes only match, kv_cache and "
                        "enable", path, idx);
    if (u->quantizer >= LWQ_QSEL_OUTPUT && (u->has_format || u->has_algo || u->has_sweep || u->has_mla ||
                                            u->has_kv || u->has_input_amax || u->has_f46 || !u->has_enable))
        return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d]: a \"quantizer\": \"%s\" rule takes only match and enable "
                        "(lwq writes no such quantizer; the rule can only say whether Model Optimizer's would be on)",
                        path, idx, qsel_names[u->quantizer]);
    if (u->quantizer != LWQ_QSEL_KV && u->has_kv)
        return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d]: kv_cache needs \"quantizer\": \"kv\"", path, idx);
    if (u->has_input_amax && (u->quantizer != LWQ_QSEL_INPUT || !u->has_format))
        return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d]: input_amax needs \"quantizer\": \"input\" and a format", path,
                        idx);
    if (u->has_f46 && (u->quantizer == LWQ_QSEL_INPUT || u->quantizer == LWQ_QSEL_KV))
        return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d]: four_over_six concerns NVFP4 weights, not an \"%s\" rule",
                        path, idx, u->quantizer == LWQ_QSEL_INPUT ? "input" : "kv");
    if (u->quantizer == LWQ_QSEL_INPUT && (u->has_algo || u->has_sweep))
        return lwq_errf(e, LWQ_EFORMAT, "%s: rules[%d]: algo and fp8_scale_sweep concern weights, not an "
                        "\"input\" rule", path, idx);
    return 0;
}

static int parse_tree(const char *path, const cJSON *root, lwq_recipe *r, lwq_error *e)
{
    if (!cJSON_IsObject(root))
        return lwq_errf(e, LWQ_EFORMAT, "%s: a recipe must be a JSON object", path);
    snprintf(r->name, sizeof r->name, "custom");
    r->kv = LWQ_KV_FP8_CAST;
    r->gptq_damp = 0.01;
    for (const cJSON *k = root->child; k; k = k->next) {
        const char *key = k->string;
        int rc = 0;
        if (repeated(root, k))
            return lwq_errf(e, LWQ_EFORMAT, "%s: " REPEATED_MSG, path, key);
        if (!strcmp(key, "name")) {
            if (!cJSON_IsString(k))
                return lwq_errf(e, LWQ_EFORMAT, "%s: name must be a string", path);
            snprintf(r->name, sizeof r->name, "%s", k->valuestring);
        } else if (!strcmp(key, "algorithm")) {
            if (!cJSON_IsObject(k))
                return lwq_errf(e, LWQ_EFORMAT, "%s: algorithm must be an object", path);
            for (const cJSON *a = k->child; a; a = a->next) {
                if (repeated(k, a))
                    return lwq_errf(e, LWQ_EFORMAT, "%s: algorithm: " REPEATED_MSG, path, a->string);
                if (!strcmp(a->string, "method")) {
                    rc = algo_from_json(path, "algorithm.method", a, &r->algo, e);
                } else if (!strcmp(a->string, "fp8_scale_sweep")) {
                    if (!cJSON_IsBool(a))
                        return lwq_errf(e, LWQ_EFORMAT, "%s: algorithm.fp8_scale_sweep must be true or false", path);
                    r->fp8_scale_sweep = cJSON_IsTrue(a);
                } else if (!strcmp(a->string, "gptq_damp")) {
                    if (!cJSON_IsNumber(a) || !(a->valuedouble > 0.0 && a->valuedouble <= 10.0))
                        return lwq_errf(e, LWQ_EFORMAT, "%s: algorithm.gptq_damp must be a number in (0, 10]", path);
                    r->gptq_damp = a->valuedouble;
                } else if (!strcmp(a->string, "mse_multipliers")) {
                    /* [start, stop, step]: Model Optimizer's start_multiplier, stop_multiplier,
                     * step_size */
                    int range = lwq_recipe_mse_range_of(a, r->mse_mult, &rc);
                    if (range < 0)
                        return lwq_errf(e, LWQ_EFORMAT, "%s: algorithm.mse_multipliers must be [start, stop, step] "
                                        "with 0 < start <= stop, step > 0 and at most %d candidates "
                                        "(ceil((stop - start) / step) + 1)", path, LWQ_MSE_MAX_STEPS);
                    r->mse_range = range;
                } else if (!strcmp(a->string, "gptq_act_order")) {
                    if (!cJSON_IsBool(a))
                        return lwq_errf(e, LWQ_EFORMAT, "%s: algorithm.gptq_act_order must be true or false", path);
                    r->gptq_act_order = cJSON_IsTrue(a);
                } else {
                    return lwq_errf(e, LWQ_EFORMAT, "%s: algorithm: unknown key \"%s\"", path, a->string);
                }
                if (rc)
                    return rc;
            }
        } else if (!strcmp(key, "embedding")) {
            if (!cJSON_IsString(k) || (strcmp(k->valuestring, "rules") && strcmp(k->valuestring, "none")))
                return lwq_errf(e, LWQ_EFORMAT, "%s: embedding must be \"rules\" (the rules decide the token "
                                "embedding's weight quantizer, as Model Optimizer's quant_cfg does) or \"none\"",
                                path);
            r->embed_rules = !strcmp(k->valuestring, "rules");
        } else if (!strcmp(key, "lm_head")) {
            int m = -1;
            for (int i = LWQ_LMHEAD_NONE; cJSON_IsString(k) && i <= LWQ_LMHEAD_LAST && m < 0; i++)
                if (!strcmp(k->valuestring, lwq_lm_head_name(i)))
                    m = i;
            if (m < 0)
                return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: lm_head must be \"w4a16_nvfp4\", \"w4a16_nvfp4-mse\", "
                                "\"w4a16_nvfp4-fp8_scale_sweep\", \"w4a16_nvfp4-four_over_six\" (weight-only NVFP4), "
                                "\"w8a16_fp8\" (weight-only FP8) or \"none\"; lwq quantizes no other lm_head", path);
            r->lm_head = m;
        } else if (!strcmp(key, "kv_cache")) {
            if (!cJSON_IsString(k) || lwq_kv_mode_parse(k->valuestring, &r->kv) != 0)
                return lwq_errf(e, LWQ_EFORMAT, "%s: kv_cache must be \"none\", \"fp8\" or \"fp8_cast\"", path);
        } else if (!strcmp(key, "rules")) {
            if (!cJSON_IsArray(k))
                return lwq_errf(e, LWQ_EFORMAT, "%s: rules must be an array", path);
            int n = cJSON_GetArraySize(k);
            if (n > RECIPE_MAX_RULES)
                return lwq_errf(e, LWQ_EFORMAT, "%s: %d rules, at most %d allowed", path, n, RECIPE_MAX_RULES);
            r->rules = calloc((size_t)(n ? n : 1), sizeof *r->rules);
            if (!r->rules)
                return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", path);
            int i = 0;
            for (const cJSON *u = k->child; u; u = u->next, i++) {
                r->nrules = i + 1;
                if ((rc = parse_rule(path, i, u, &r->rules[i], e)) != 0)
                    return rc;
            }
        } else {
            return lwq_errf(e, LWQ_EFORMAT, "%s: unknown key \"%s\" (expected name, algorithm, kv_cache, rules)",
                            path, key);
        }
    }
    return 0;
}

int lwq_recipe_parse(const char *path, const char *json, lwq_recipe *r, lwq_error *e)
{
    memset(r, 0, sizeof *r);
    cJSON *root = cJSON_Parse(json);
    if (!root)
        return lwq_errf(e, LWQ_EFORMAT, "%s: invalid JSON near byte %ld", path,
                        (long)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - json : 0));
    int rc = parse_tree(path, root, r, e);
    if (rc == 0)
        rc = lwq_recipe_check_embedding(r, path, e);
    cJSON_Delete(root);
    if (rc)
        lwq_recipe_free(r);
    return rc;
}

int lwq_recipe_load(const char *path, lwq_recipe *r, lwq_error *e)
{
    char *buf;
    int rc = lwq_file_read_all(path, RECIPE_MAX_BYTES, &buf, NULL, e);
    if (rc)
        return rc;
    rc = lwq_recipe_parse(path, buf, r, e);
    free(buf);
    return rc;
}

/* ---- presets ------------------------------------------------------------------------------ */

#define ROUTERS_OFF                                                                                \
    "{\"match\":\"*.mlp.gate\",\"enable\":false},"                                                 \
    "{\"match\":\"*.block_sparse_moe.gate\",\"enable\":false},"                                    \
    "{\"match\":\"*.mixer.gate\",\"enable\":false},"                                               \
    "{\"match\":\"*.shared_expert_gate\",\"enable\":false}"

/* What Model Optimizer's default_disabled_quantizers unit (modelopt_recipes/configs/ptq/units/,
 * imported by its nvfp4 and fp8 presets) keeps unquantized in the Gated DeltaNet of qwen3_next:
 * the depthwise conv1d and in_proj_a* / in_proj_b* (transformers' in_proj_ba).  Routers are
 * ROUTERS_OFF. */
#define LINEAR_ATTN_OFF                                                                            \
    "{\"match\":\"*.linear_attn.conv1d\",\"enable\":false},"                                          \
    "{\"match\":\"*.linear_attn.in_proj_a*\",\"enable\":false},"                                      \
    "{\"match\":\"*.linear_attn.in_proj_b*\",\"enable\":false},"                                    \
    "{\"match\":\"*.mixer.conv1d\",\"enable\":false}"

/* NVIDIA's production recipe for the Qwen3-Next / Qwen3.8 hybrids (seed article
 * "Quantizing a 4.9 TB Qwen3.8 Model on a Single GPU"): routed experts NVFP4 with MSE-searched
 * static weight scales and the FP8 scale sweep; self-attention q/k/v/o and the whole
 * linear-attention path (in_proj_qkvz, in_proj_ba, conv1d, out_proj) FP8 W8A8 (per-tensor,
 * max-calibrated: in Model Optimizer the FP8 scale sweep refines only static NVFP4 weights and
 * leaves per-tensor FP8 weights at their max amax); KV cache FP8 cast.  Routers, shared experts, shared_expert_gate, lm_head, embeddings and the
 * MTP block (mtp.*, outside the decoder layers) match no rule and stay BF16, excluded.  The same
 * recipe ships as recipes/qwen3next_production.json. */
#define QWEN3NEXT_PRODUCTION                                                                       \
    "{\"name\":\"qwen3next_production\","                                                         \
    "\"algorithm\":{\"method\":\"mse\",\"fp8_scale_sweep\":true},\"kv_cache\":\"fp8_cast\","         \
    "\"rules\":["                                                                                 \
    "{\"match\":\"*.mlp.experts.*\",\"format\":\"nvfp4\"},"                                       \
    "{\"match\":\"*.self_attn.q_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"                                     \
    "{\"match\":\"*.self_attn.k_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"                                     \
    "{\"match\":\"*.self_attn.v_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"                                     \
    "{\"match\":\"*.self_attn.o_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"                                     \
    "{\"match\":\"*.linear_attn.in_proj_qkvz\",\"format\":\"fp8\",\"algo\":\"max\"},"                             \
    "{\"match\":\"*.linear_attn.in_proj_ba\",\"format\":\"fp8\",\"algo\":\"max\"},"                               \
    "{\"match\":\"*.linear_attn.conv1d\",\"format\":\"fp8\",\"algo\":\"max\"},"                                   \
    "{\"match\":\"*.linear_attn.out_proj\",\"format\":\"fp8\",\"algo\":\"max\"}]}"

/* NVIDIA's NVFP4 DeepSeek-V3.1 / Kimi-K2.6 keep the MLA q/kv projections in BF16, and so does
 * lwq's nvfp4 preset (tests/layout/test_recipe_mla.c).  Model Optimizer 0.47's nvfp4 preset
 * quantizes them; its recipe YAML read by lwq (--recipe general/ptq/nvfp4_default-kv_fp8) does
 * what it does (perf/RESULTS.md, "Side by side with Model Optimizer"). */
#define MLA_PROJ_OFF "{\"match\":\"*\",\"mla_projection\":true,\"enable\":false}"

/* Model Optimizer 0.47's Mamba-MoE presets (configs/ptq/presets/model/mamba_moe_{fp8,nvfp4}_
 * {aggressive,conservative}.yaml, hf_ptq --qformat): its fp8 / nvfp4 preset (base_disable_all, the
 * format, default_disabled_quantizers) plus mamba_moe_disabled_quantizers: the MoE latent
 * projections and every attention projection (q/k/v/o_proj; the Megatron names do not occur in an
 * HF checkpoint) stay unquantized; conservative also keeps the Mamba2 in_proj / out_proj. */
#define MAMBA_MOE_OFF                                                                              \
    "{\"match\":\"*fc1_latent_proj*\",\"enable\":false},"                                          \
    "{\"match\":\"*fc2_latent_proj*\",\"enable\":false},"                                          \
    "{\"match\":\"*q_proj*\",\"enable\":false},"                                                   \
    "{\"match\":\"*k_proj*\",\"enable\":false},"                                                   \
    "{\"match\":\"*v_proj*\",\"enable\":false},"                                                   \
    "{\"match\":\"*o_proj*\",\"enable\":false}"
#define MAMBA_PROJ_OFF                                                                             \
    "{\"match\":\"*mixer.in_proj*\",\"enable\":false},"                                            \
    "{\"match\":\"*mixer.out_proj*\",\"enable\":false}"
#define MAMBA_MOE(name, fmt, extra)                                                                \
    {name, "{\"name\":\"" name "\",\"rules\":[{\"match\":\"*\",\"format\":\"" fmt "\"}," ROUTERS_OFF      \
           "," LINEAR_ATTN_OFF "," MAMBA_MOE_OFF extra "]}"}

static const struct {
    const char *name;
    const char *json;
} presets[] = {
    {"nvfp4", "{\"name\":\"nvfp4\",\"rules\":[{\"match\":\"*\",\"format\":\"nvfp4\"}," ROUTERS_OFF
              "," LINEAR_ATTN_OFF "," MLA_PROJ_OFF "]}"},
    {"nvfp4_experts_only",
     "{\"name\":\"nvfp4_experts_only\",\"rules\":["
     "{\"match\":\"*.mlp.experts.*\",\"format\":\"nvfp4\"},"
     "{\"match\":\"*.block_sparse_moe.experts.*\",\"format\":\"nvfp4\"}]}"},
    {"nvfp4_mlp_only",
     "{\"name\":\"nvfp4_mlp_only\",\"rules\":["
     "{\"match\":\"*.mlp.*\",\"format\":\"nvfp4\"},"
     "{\"match\":\"*.block_sparse_moe.*\",\"format\":\"nvfp4\"}," ROUTERS_OFF "]}"},
    {"fp8", "{\"name\":\"fp8\",\"rules\":[{\"match\":\"*\",\"format\":\"fp8\"}," ROUTERS_OFF
            "," LINEAR_ATTN_OFF "]}"},
    {"nvfp4_experts-fp8_attn",
     "{\"name\":\"nvfp4_experts-fp8_attn\",\"rules\":["
     "{\"match\":\"*.self_attn.q_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"
     "{\"match\":\"*.self_attn.k_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"
     "{\"match\":\"*.self_attn.v_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"
     "{\"match\":\"*.self_attn.o_proj\",\"format\":\"fp8\",\"algo\":\"max\"},"
     "{\"match\":\"*.mlp.experts.*\",\"format\":\"nvfp4\",\"algo\":\"mse\",\"fp8_scale_sweep\":true},"
     "{\"match\":\"*.block_sparse_moe.experts.*\",\"format\":\"nvfp4\",\"algo\":\"mse\",\"fp8_scale_sweep\":true},"
     MLA_PROJ_OFF "]}"},
    {"qwen3next_production", QWEN3NEXT_PRODUCTION},
    /* Model Optimizer's nvfp4_four_over_six preset (NVFP4_FOUR_OVER_SIX_CFG): W4A4 NVFP4 with the
     * weights' block scales normalised to 256 and each block's amax searched over x1.0 (M = 6) and
     * x1.5 (M = 4); default_disabled_quantizers.  MLA projections are quantized, as there. */
    {"nvfp4_four_over_six",
     "{\"name\":\"nvfp4_four_over_six\",\"algorithm\":{\"method\":\"mse\",\"mse_multipliers\":[1.0,1.5,0.5]},"
     "\"rules\":[{\"match\":\"*\",\"format\":\"nvfp4\",\"four_over_six\":true}," ROUTERS_OFF "," LINEAR_ATTN_OFF
     "]}"},
    /* Model Optimizer's W4A16_NVFP4_CFG (hf_ptq --qformat w4a16_nvfp4): every weight quantizer
     * NVFP4, no input quantizer, default_disabled_quantizers (routers, conv1d, in_proj_a/b) */
    MAMBA_MOE("mamba_moe_nvfp4_aggressive", "nvfp4", ""),
    MAMBA_MOE("mamba_moe_nvfp4_conservative", "nvfp4", "," MAMBA_PROJ_OFF),
    MAMBA_MOE("mamba_moe_fp8_aggressive", "fp8", ""),
    MAMBA_MOE("mamba_moe_fp8_conservative", "fp8", "," MAMBA_PROJ_OFF),
    {"w4a16_nvfp4", "{\"name\":\"w4a16_nvfp4\",\"rules\":[{\"match\":\"*\",\"format\":\"nvfp4\"},"
                    "{\"match\":\"*\",\"quantizer\":\"input\",\"enable\":false}," ROUTERS_OFF "," LINEAR_ATTN_OFF
                    "]}"},
};

const char *lwq_recipe_preset_names(void)
{
    return "nvfp4, nvfp4_experts_only, nvfp4_mlp_only, fp8, nvfp4_experts-fp8_attn, qwen3next_production, "
           "w4a16_nvfp4, nvfp4_four_over_six, mamba_moe_nvfp4_aggressive, mamba_moe_nvfp4_conservative, "
           "mamba_moe_fp8_aggressive, mamba_moe_fp8_conservative";
}

int lwq_recipe_preset(const char *name, lwq_recipe *r, lwq_error *e)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(name, presets[i].name))
            return lwq_recipe_parse(name, presets[i].json, r, e);
    memset(r, 0, sizeof *r);
    return lwq_errf(e, LWQ_EINVAL, "unknown --qformat \"%s\" (presets: %s)", name, lwq_recipe_preset_names());
}

const char *lwq_lm_head_name(int lm_head)
{
    static const char *const n[] = {"none", "w4a16_nvfp4", "w4a16_nvfp4-mse", "w4a16_nvfp4-fp8_scale_sweep",
                                    "w8a16_fp8", "w4a16_nvfp4-four_over_six"};
    _Static_assert(sizeof n / sizeof n[0] == LWQ_LMHEAD_LAST + 1, "one name per LWQ_LMHEAD_*");
    return lm_head >= LWQ_LMHEAD_NONE && lm_head <= LWQ_LMHEAD_LAST ? n[lm_head] : "?";
}

int lwq_recipe_uses_gptq(const lwq_recipe *r)
{
    int any = r->algo == LWQ_ALGO_GPTQ;
    for (int i = 0; i < r->nrules && !any; i++)
        any = r->rules[i].has_algo && r->rules[i].algo == LWQ_ALGO_GPTQ;
    return any;
}

char *lwq_recipe_to_json(const lwq_recipe *r)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    cJSON_AddStringToObject(root, "name", r->name);
    cJSON *alg = cJSON_AddObjectToObject(root, "algorithm");
    cJSON_AddStringToObject(alg, "method", lwq_algo_name(r->algo));
    cJSON_AddBoolToObject(alg, "fp8_scale_sweep", r->fp8_scale_sweep);
    if (r->mse_range == LWQ_MSE_RANGE_OWN) { /* absent by default: other recipes keep their JSON */
        cJSON *m = cJSON_AddArrayToObject(alg, "mse_multipliers");
        for (int i = 0; i < 3; i++)
            cJSON_AddItemToArray(m, cJSON_CreateNumber(r->mse_mult[i]));
    }
    if (lwq_recipe_uses_gptq(r)) {
        cJSON_AddNumberToObject(alg, "gptq_damp", r->gptq_damp);
        cJSON_AddBoolToObject(alg, "gptq_act_order", r->gptq_act_order);
    }
    cJSON_AddStringToObject(root, "kv_cache", lwq_kv_mode_name(r->kv));
    if (r->lm_head) /* absent otherwise: other recipes keep their JSON */
        cJSON_AddStringToObject(root, "lm_head", lwq_lm_head_name(r->lm_head));
    if (r->embed_rules) /* likewise */
        cJSON_AddStringToObject(root, "embedding", "rules");
    cJSON *rules = cJSON_AddArrayToObject(root, "rules");
    for (int i = 0; i < r->nrules; i++) {
        const lwq_recipe_rule *u = &r->rules[i];
        cJSON *o = cJSON_CreateObject();
        if (u->qname)
            cJSON_AddStringToObject(o, "quantizer_name", u->qname);
        else
            cJSON_AddStringToObject(o, "match", u->match);
        if (u->quantizer != LWQ_QSEL_BOTH)
            cJSON_AddStringToObject(o, "quantizer", qsel_names[u->quantizer]);
        if (u->has_kv)
            cJSON_AddStringToObject(o, "kv_cache", lwq_kv_mode_name(u->kv));
        if (u->has_format)
            cJSON_AddStringToObject(o, "format", lwq_qformat_name(u->format));
        if (u->has_input_amax)
            cJSON_AddNumberToObject(o, "input_amax", u->input_amax);
        if (u->has_enable)
            cJSON_AddBoolToObject(o, "enable", u->enable);
        if (u->has_algo)
            cJSON_AddStringToObject(o, "algo", lwq_algo_name(u->algo));
        if (u->has_sweep)
            cJSON_AddBoolToObject(o, "fp8_scale_sweep", u->sweep);
        if (u->has_mla)
            cJSON_AddBoolToObject(o, "mla_projection", u->mla);
        if (u->has_f46)
            cJSON_AddBoolToObject(o, "four_over_six", u->f46);
        if (u->has_embed)
            cJSON_AddBoolToObject(o, "embedding", u->embed);
        cJSON_AddItemToArray(rules, o);
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}
