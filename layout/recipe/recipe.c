/* layout/recipe/recipe.c — an lwq recipe: its names, its JSON (parse, load, print) and its memory.
 * What a recipe makes of a module is recipe_resolve.c; the built-in presets are recipe_presets.c. */
#include "layout/recipe/recipe.h"

#include <cjson/cJSON.h>
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

static const char *const qsel_names[] = {"", "weight", "input", "kv", "output", "q_bmm", "softmax"};
_Static_assert(sizeof qsel_names / sizeof qsel_names[0] == LWQ_QSEL_SOFTMAX + 1, "one name per lwq_qsel");

const char *lwq_qsel_name(lwq_qsel q) { return (unsigned)q <= LWQ_QSEL_SOFTMAX ? qsel_names[q] : "?"; }

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

int lwq_recipe_mse_range(double start, double stop, double step)
{
    if (start == 0.25 && stop == 4.0 && step == 0.1)
        return LWQ_MSE_RANGE_DEFAULT;
    float m[LWQ_MSE_MAX_STEPS];
    int n = lwq_mse_linspace(start, stop, step, m, LWQ_MSE_MAX_STEPS);
    return n >= 1 && n <= LWQ_MSE_MAX_STEPS ? LWQ_MSE_RANGE_OWN : -1;
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
                                "\"w8a16_fp8\" (weight-only FP8), \"fp8\" (W8A8 FP8) or \"none\"; lwq quantizes no other lm_head", path);
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

const char *lwq_lm_head_name(int lm_head)
{
    static const char *const n[] = {"none", "w4a16_nvfp4", "w4a16_nvfp4-mse", "w4a16_nvfp4-fp8_scale_sweep",
                                    "w8a16_fp8", "w4a16_nvfp4-four_over_six", "fp8"};
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
