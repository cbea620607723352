/* layout/recipe/recipe_qcfg.c — Model Optimizer quant_cfg entries -> lwq rules (see recipe_qcfg.h). */
#include "layout/recipe/recipe_qcfg.h"

#include <stdlib.h>
#include <string.h>

#define GLOBS_MAX 256

static const char SUF_W[] = ".weight_quantizer", SUF_I[] = ".input_quantizer";
static const char SUF_K[] = ".k_bmm_quantizer", SUF_V[] = ".v_bmm_quantizer";

/* Quantizers Model Optimizer has that lwq never writes.  Model Optimizer matches an entry's
 * quantizer_name against each quantizer's full name (fnmatch, conversion.py _match_quantizer), so
 * whether an entry reaches one depends on the model's module names: '*mlp*gate_proj*weight_quantizer*'
 * reaches "X.output_quantizer" only for a module X named "...gate_proj...weight_quantizer...", which
 * no model has.  Entries become rules on these quantizers (enable only), and the engine refuses a
 * module whose rules leave one enabled (lwq_recipe_check_unwritten); a recipe none of whose entries
 * enables such a quantizer gets no such rules (its canonical JSON stays as it was). */
static const struct {
    const char *suffix;
    lwq_qsel sel;
} unwritten[] = {
    {".output_quantizer", LWQ_QSEL_OUTPUT},
    {".q_bmm_quantizer", LWQ_QSEL_QBMM},
    {".softmax_quantizer", LWQ_QSEL_SOFTMAX},
};
#define NUNWRITTEN ((int)(sizeof unwritten / sizeof unwritten[0]))

/* Index after the pattern token starting at i (a closed `[...]` set is one token). */
static size_t tok_end(const char *p, size_t i)
{
    if (p[i] == '[') {
        size_t q = i + 1;
        if (p[q] == '!')
            q++;
        for (int first = 1; p[q] && (p[q] != ']' || first); first = 0)
            q++;
        if (p[q] == ']')
            return q + 1;
    }
    return i + 1;
}

static int add_glob(char **out, int *n, int max, const char *p, size_t len)
{
    if (len == 0) /* matches only an empty module name, which no module has */
        return 0;
    for (int i = 0; i < *n; i++)
        if (strlen(out[i]) == len && !strncmp(out[i], p, len))
            return 0;
    if (*n == max)
        return -1;
    if (!(out[*n] = strndup(p, len)))
        return -1;
    (*n)++;
    return 0;
}

int lwq_qcfg_module_globs(const char *p, const char *suffix, char **out, int max)
{
    int n = 0;
    size_t len = strlen(p);
    for (size_t i = 0;; i = tok_end(p, i)) {
        if (lwq_glob_match(p + i, suffix)) {
            if (add_glob(out, &n, max, p, i) || (p[i] == '*' && add_glob(out, &n, max, p, i + 1)))
                goto fail;
        }
        if (i >= len)
            break;
    }
    /* G is redundant next to G + "*" (everything G matches, G* matches) */
    for (int i = 0; i < n; i++) {
        size_t li = strlen(out[i]);
        for (int j = 0; j < n; j++) {
            if (i != j && strlen(out[j]) == li + 1 && out[j][li] == '*' && !strncmp(out[i], out[j], li)) {
                free(out[i]);
                out[i] = out[--n];
                i--;
                break;
            }
        }
    }
    return n;
fail:
    for (int i = 0; i < n; i++)
        free(out[i]);
    return -1;
}

static int all_stars(const char *g)
{
    if (!*g)
        return 0;
    for (; *g; g++)
        if (*g != '*')
            return 0;
    return 1;
}

typedef struct globset {
    char *g[GLOBS_MAX];
    int n;
} globset;

static void gs_free(globset *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->g[i]);
    s->n = 0;
}

static int str_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Whether every name glob g matches contains "_quantizer": one of its literal runs (between
 * wildcards and sets) does. */
static int names_a_quantizer(const char *g)
{
    static const char Q[] = "_quantizer";
    size_t run = 0, len = strlen(g);
    for (size_t i = 0; i <= len; i = i < len ? tok_end(g, i) : len + 1) {
        if (i == len || g[i] == '*' || g[i] == '?' || g[i] == '[') {
            if (run >= sizeof Q - 1 && memmem(g + i - run, run, Q, sizeof Q - 1))
                return 1;
            run = 0;
        } else {
            run++;
        }
    }
    return 0;
}

/* The module globs through which entry `en` reaches the quantizers named MODULE + suffix.  A glob
 * every match of which contains "_quantizer" is dropped: it can reach MODULE + suffix only for a
 * module so named, and no module that carries quantizers is (lwq's module names are its family
 * descriptors'; Model Optimizer's TensorQuantizers carry none, and its fused experts' quantizer
 * lists, "...experts.gate_up_proj_weight_quantizers", hold TensorQuantizers only).  So
 * '*mlp*gate_proj*weight_quantizer*', which Model Optimizer matches against
 * "...mlp.gate_proj.weight_quantizer" only, reaches no input, output or k/v quantizer here either. */
static int gs_make(globset *s, const lwq_mo_entry *en, const char *suffix, lwq_error *e)
{
    s->n = lwq_qcfg_module_globs(en->glob, suffix, s->g, GLOBS_MAX);
    if (s->n < 0) {
        s->n = 0;
        return lwq_errf(e, LWQ_EFORMAT, "%s: quant_cfg entry '%s': quantizer_name is too intricate (more than %d "
                        "module patterns for one quantizer kind)", en->where, en->glob, GLOBS_MAX);
    }
    for (int i = 0; i < s->n; i++)
        if (names_a_quantizer(s->g[i])) {
            free(s->g[i]);
            s->g[i--] = s->g[--s->n];
        }
    qsort(s->g, (size_t)s->n, sizeof s->g[0], str_cmp);
    return 0;
}

static int gs_equal(const globset *a, const globset *b)
{
    if (a->n != b->n)
        return 0;
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->g[i], b->g[i]))
            return 0;
    return 1;
}

/* Whether glob p matches some name ending in tail + a non-empty run of digits, the prefix before tail
 * anything (a fused experts module's per-expert quantizer, "...experts.gate_up_proj_weight_quantizers.5":
 * tail "_weight_quantizers.").  A set of pattern positions is run over the tail's characters, then
 * over "any digit" to a fixed point: O(len(p)^2) steps, whatever the pattern. */
static int reaches_digit_tail(const char *p, const char *tail)
{
    size_t len = strlen(p);
    if (len > LWQ_QCFG_GLOB_MAX)
        return 0;
    size_t at[LWQ_QCFG_GLOB_MAX + 1];
    int nt = 0;
    for (size_t i = 0; i < len; i = tok_end(p, i))
        at[nt++] = i;
    at[nt] = len;
    unsigned char cur[LWQ_QCFG_GLOB_MAX + 2], nxt[LWQ_QCFG_GLOB_MAX + 2];
    char tok[LWQ_QCFG_GLOB_MAX + 1], one[2] = {0, 0};
#define STAR(t) (p[at[t]] == '*')
#define CLOSE(v)                                                                                   \
    for (int t = 0; t < nt; t++)                                                                   \
        if ((v)[t] && STAR(t))                                                                     \
            (v)[t + 1] = 1
    /* the free prefix: every position is reachable by some string (a token always matches one) */
    memset(cur, 1, (size_t)nt + 1);
    for (const char *c = tail;; c++) {
        if (!*c) {
            /* digits: one or more */
            int first = 1, changed = 1;
            unsigned char acc[LWQ_QCFG_GLOB_MAX + 2] = {0};
            while (changed) {
                memset(nxt, 0, (size_t)nt + 1);
                for (int t = 0; t < nt; t++) {
                    if (!(first ? cur[t] : acc[t]))
                        continue;
                    if (STAR(t)) {
                        nxt[t] = 1;
                        continue;
                    }
                    size_t n = at[t + 1] - at[t];
                    memcpy(tok, p + at[t], n);
                    tok[n] = 0;
                    for (char d = '0'; d <= '9'; d++) {
                        one[0] = d;
                        if (lwq_glob_match(tok, one)) {
                            nxt[t + 1] = 1;
                            break;
                        }
                    }
                }
                CLOSE(nxt);
                changed = 0;
                for (int t = 0; t <= nt; t++)
                    if (nxt[t] && !acc[t])
                        acc[t] = changed = 1;
                first = 0;
            }
            return acc[nt];
        }
        memset(nxt, 0, (size_t)nt + 1);
        one[0] = *c;
        for (int t = 0; t < nt; t++) {
            if (!cur[t])
                continue;
            if (STAR(t)) {
                nxt[t] = 1;
                continue;
            }
            size_t n = at[t + 1] - at[t];
            memcpy(tok, p + at[t], n);
            tok[n] = 0;
            if (lwq_glob_match(tok, one))
                nxt[t + 1] = 1;
        }
        CLOSE(nxt);
        memcpy(cur, nxt, (size_t)nt + 1);
    }
#undef CLOSE
#undef STAR
}

/* Which quantizers of the in-memory model (recipe.h lwq_qnames) entry `en` can reach, by kind: a
 * linear's "M.weight_quantizer", a fused experts module's "E.gate_up_proj_weight_quantizer" (the
 * normalised name) or "E.gate_up_proj_weight_quantizers.N"; the inputs likewise. */
typedef struct reach {
    int w, in, kv, kv_all; /* kv_all: through an all-star module glob (the model's KV cache mode) */
    int un[NUNWRITTEN];
} reach;

static int reach_of(const lwq_mo_entry *en, reach *out, lwq_error *e)
{
    memset(out, 0, sizeof *out);
    globset w = {0}, w2 = {0}, in = {0}, in2 = {0}, k = {0}, v = {0};
    int rc;
    if ((rc = gs_make(&w, en, SUF_W, e)) || (rc = gs_make(&w2, en, "_weight_quantizer", e)) ||
        (rc = gs_make(&in, en, SUF_I, e)) || (rc = gs_make(&in2, en, "_input_quantizer", e)) ||
        (rc = gs_make(&k, en, SUF_K, e)) || (rc = gs_make(&v, en, SUF_V, e)))
        goto out;
    if (!gs_equal(&k, &v)) {
        rc = lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quant_cfg entry '%s' treats the k and v cache quantizers "
                      "differently; lwq writes one mode for both", en->where, en->glob);
        goto out;
    }
    out->w = w.n > 0 || w2.n > 0 || reaches_digit_tail(en->glob, "_weight_quantizers.");
    out->in = in.n > 0 || in2.n > 0;
    out->kv = k.n > 0;
    for (int i = 0; i < k.n; i++)
        out->kv_all |= all_stars(k.g[i]);
    for (int i = 0; i < NUNWRITTEN; i++) {
        globset o = {0};
        if ((rc = gs_make(&o, en, unwritten[i].suffix, e)) != 0)
            goto out;
        out->un[i] = o.n > 0;
        gs_free(&o);
    }
out:
    gs_free(&w);
    gs_free(&w2);
    gs_free(&in);
    gs_free(&in2);
    gs_free(&k);
    gs_free(&v);
    return rc;
}

/* Appends tmpl as a rule selecting by quantizer_name `qname` (Model Optimizer's own glob). */
static int push_rule(lwq_recipe *r, int *cap, const char *qname, const lwq_recipe_rule *tmpl, lwq_error *e)
{
    if (r->nrules == 4096)
        return lwq_errf(e, LWQ_EFORMAT, "the recipe becomes more than 4096 lwq rules");
    if (r->nrules == *cap) {
        int nc = *cap ? *cap * 2 : 32;
        lwq_recipe_rule *v = realloc(r->rules, (size_t)nc * sizeof *v);
        if (!v)
            return lwq_errf(e, LWQ_ENOMEM, "out of memory");
        r->rules = v;
        *cap = nc;
    }
    lwq_recipe_rule *u = &r->rules[r->nrules];
    *u = *tmpl;
    u->match = NULL;
    if (!(u->qname = strdup(qname)))
        return lwq_errf(e, LWQ_ENOMEM, "out of memory");
    r->nrules++;
    return 0;
}

/* The weight rule's calibration: Model Optimizer's mse / local_hessian search only static
 * weights, and with the FP8 scale sweep (local_hessian's default) only static NVFP4 ones. */
static void weight_calib(const lwq_mo_entry *en, const lwq_mo_algo *a, lwq_recipe_rule *u)
{
    u->has_algo = u->has_sweep = 1;
    u->algo = LWQ_ALGO_MAX;
    u->sweep = 0;
    if (en->kind == LWQ_MO_FP8 && a->method == LWQ_ALGO_MSE && !a->sweep) {
        u->algo = LWQ_ALGO_MSE;
    } else if (en->kind == LWQ_MO_NVFP4_STATIC) {
        u->algo = a->method;
        u->sweep = a->sweep;
    }
}

static int check_sides(const lwq_mo_entry *en, const lwq_mo_algo *a, int w, int in, int kv, lwq_error *e)
{
    const char *at = en->where, *g = en->glob;
    if (w && en->use_constant_amax)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quant_cfg entry '%s': cfg.use_constant_amax on weight quantizers "
                        "is not supported (it is for the k/v cache: FP8 cast)", at, g);
    if (in && en->use_constant_amax)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quant_cfg entry '%s': cfg.use_constant_amax on input quantizers "
                        "is not supported (it is for the k/v cache: FP8 cast; constant_amax fixes an input amax)",
                        at, g);
    if (w && en->has_constant_amax)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quant_cfg entry '%s': cfg.constant_amax on weight quantizers "
                        "(a fixed weight amax) is not supported", at, g);
    if (en->four_over_six && (in || kv))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quant_cfg entry '%s': cfg.block_sizes.four_over_six on %s quantizers "
                        "is not supported (Four-over-Six is implemented for static NVFP4 weights)", at, g,
                        in ? "input" : "k/v cache");
    if (w && en->four_over_six && (en->kind != LWQ_MO_NVFP4_STATIC || a->method != LWQ_ALGO_MSE || a->sweep))
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quant_cfg entry '%s': cfg.block_sizes.four_over_six is implemented "
                        "for static NVFP4 weights under algorithm method mse without fp8_scale_sweep (Model "
                        "Optimizer's nvfp4_four_over_six)", at, g);
    if (kv && en->has_constant_amax)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quant_cfg entry '%s': cfg.constant_amax on the k/v cache "
                        "quantizers is not supported (use use_constant_amax: FP8 cast)", at, g);
    if (w && en->kind == LWQ_MO_NVFP4_STATIC && a->method == LWQ_ALGO_MAX)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quant_cfg entry '%s': cfg.block_sizes.type static with "
                        "algorithm method max is not supported (lwq's max path writes dynamic block scales; use "
                        "method mse or local_hessian, or type dynamic)", at, g);
    if (in && en->kind == LWQ_MO_NVFP4_STATIC)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quant_cfg entry '%s': cfg.block_sizes.type static on input "
                        "quantizers (calibrated NVFP4 activation blocks) is not supported", at, g);
    /* an NVFP4 KV cache in cast mode (kv_nvfp4_cast: dynamic blocks of 16, constant amax) exports
     * no k/v scales and leaves every other tensor as it is; a calibrated one would export scales
     * whose meaning lwq does not write */
    if (kv && en->kind == LWQ_MO_NVFP4_DYNAMIC && !en->use_constant_amax)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quant_cfg entry '%s': cfg.num_bits e2m1 on the k/v cache "
                        "quantizers without use_constant_amax (a calibrated NVFP4 KV cache) is not supported; "
                        "the cast mode (use_constant_amax: true) is", at, g);
    if (kv && en->kind == LWQ_MO_NVFP4_STATIC)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quant_cfg entry '%s': cfg.num_bits e2m1 with static blocks on the "
                        "k/v cache quantizers is not supported", at, g);
    return 0;
}

/* One entry's rules: each selects by the entry's own quantizer_name, so a module's quantizers are
 * matched by their in-memory names as Model Optimizer matches them.  *kv_all / *kr_out: the
 * entry's k/v rule when it reaches every attention module through an all-star glob. */
static int compile_entry(const lwq_mo_entry *en, const lwq_mo_algo *a, const int *want_unwritten, lwq_recipe *r,
                         int *cap, int *kv_all, lwq_recipe_rule *kr_out, lwq_error *e)
{
    int enabling = en->has_cfg ? (!en->has_enable || en->enable) : (en->has_enable && en->enable);
    int rc = 0;
    *kv_all = 0;
    if (en->has_enable && en->enable && !en->has_cfg)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quant_cfg entry '%s': enable: true without cfg turns a quantizer "
                        "back on with whatever attributes it had; lwq needs the cfg in the same entry",
                        en->where, en->glob);
    reach R;
    if ((rc = reach_of(en, &R, e)) != 0)
        return rc;
    if (en->has_cfg && (rc = check_sides(en, a, R.w, R.in, R.kv, e)))
        return rc;

    lwq_recipe_rule wr = {0}, ir = {0}, kr = {0};
    wr.has_embed = ir.has_embed = kr.has_embed = en->embedding_only;
    wr.embed = ir.embed = kr.embed = en->embedding_only;
    wr.quantizer = LWQ_QSEL_WEIGHT;
    ir.quantizer = LWQ_QSEL_INPUT;
    kr.quantizer = LWQ_QSEL_KV;
    if (en->has_cfg) {
        lwq_qformat f = en->kind == LWQ_MO_FP8 ? LWQ_QFMT_FP8 : LWQ_QFMT_NVFP4;
        wr.has_format = ir.has_format = 1;
        wr.format = ir.format = f;
        weight_calib(en, a, &wr);
        wr.has_f46 = wr.f46 = en->four_over_six; /* a cfg without it resets it (its format does) */
        ir.has_input_amax = en->has_constant_amax;
        ir.input_amax = en->constant_amax;
        kr.has_kv = 1;
        kr.kv = en->kind != LWQ_MO_FP8 ? LWQ_KV_NVFP4_CAST : en->use_constant_amax ? LWQ_KV_FP8_CAST : LWQ_KV_FP8;
    }
    if (en->has_enable) {
        wr.has_enable = ir.has_enable = kr.has_enable = 1;
        wr.enable = ir.enable = kr.enable = en->enable;
    }
    if (R.w && R.in && !ir.has_input_amax) {
        wr.quantizer = LWQ_QSEL_BOTH; /* the same change to whichever of the two the name reaches */
        rc = push_rule(r, cap, en->glob, &wr, e);
    } else {
        if (R.w)
            rc = push_rule(r, cap, en->glob, &wr, e);
        if (!rc && R.in)
            rc = push_rule(r, cap, en->glob, &ir, e);
    }
    /* an nn.Embedding has weight, input and output quantizers only: no k/v or attention ones */
    if (!rc && R.kv && !en->embedding_only) {
        rc = push_rule(r, cap, en->glob, &kr, e);
        *kv_all = R.kv_all;
        *kr_out = kr;
    }
    for (int i = 0; rc == 0 && i < NUNWRITTEN; i++) {
        if (!want_unwritten[i] || !R.un[i] || (en->embedding_only && unwritten[i].sel != LWQ_QSEL_OUTPUT))
            continue;
        lwq_recipe_rule ur = {.quantizer = unwritten[i].sel, .has_enable = 1, .enable = enabling,
                              .has_embed = en->embedding_only, .embed = en->embedding_only};
        rc = push_rule(r, cap, en->glob, &ur, e);
    }
    return rc;
}

int lwq_qcfg_compile(const lwq_mo_entry *v, int n, const lwq_mo_algo *a, const char *path, lwq_recipe *r,
                     lwq_error *e)
{
    if (n == 0)
        return lwq_errf(e, LWQ_EFORMAT, "%s: quantize.quant_cfg is empty", path);
    const lwq_mo_entry *first = &v[0];
    if (!all_stars(first->glob) || first->has_cfg || !first->has_enable || first->enable)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: quant_cfg must start with {quantizer_name: '*', enable: false} "
                        "(configs/ptq/units/base_disable_all): quantizers no entry names keep Model Optimizer's "
                        "default attributes (8-bit integer), which lwq does not write", first->where);
    /* which unwritten quantizers some entry enables: only those get rules */
    int want[NUNWRITTEN] = {0};
    for (int i = 0; i < n; i++) {
        const lwq_mo_entry *en = &v[i];
        if (!(en->has_cfg ? (!en->has_enable || en->enable) : (en->has_enable && en->enable)))
            continue;
        for (int k = 0; k < NUNWRITTEN; k++) {
            globset o = {0};
            int rc = gs_make(&o, en, unwritten[k].suffix, e);
            if (rc)
                return rc;
            want[k] |= o.n > 0;
            gs_free(&o);
        }
    }
    /* the model's KV cache mode: what a module only the all-star entries reach gets; the engine
     * checks every attention module against it */
    lwq_kv_mode mode = LWQ_KV_NONE;
    int on = 0;
    int cap = r->nrules;
    for (int i = 0; i < n; i++) {
        int all = 0;
        lwq_recipe_rule kr;
        int rc = compile_entry(&v[i], a, want, r, &cap, &all, &kr, e);
        if (rc)
            return rc;
        if (!all)
            continue;
        if (kr.has_kv) {
            mode = kr.kv;
            on = 1;
        }
        if (kr.has_enable)
            on = kr.enable;
    }
    r->kv = on ? mode : LWQ_KV_NONE;
    /* Model Optimizer's quant_cfg reaches the token embedding's weight quantizer too (nn.Embedding
     * is a QuantModule in 0.47): the engine resolves it with the embedding's name */
    r->embed_rules = 1;
    if (a->candidate)
        return 0;
    lwq_quant_choice lm = lwq_recipe_resolve_module(r, "lm_head", 0);
    /* weight-only NVFP4 (the huggingface/qwen3_5 and qwen3_5_moe ptq recipes re-enable
     * '*lm_head*weight_quantizer' with nvfp4, or nvfp4_static under mse + fp8_scale_sweep;
     * Nemotron-3.5-Lightning's w4a16_nvfp4_4o6 gives it nvfp4_four_over_six under mse [1.0, 1.5]):
     * lwq writes that with dynamic blocks (max), the decoder linears' static searches, or their
     * Four-over-Six search; weight-only FP8 (Nemotron-3-Nano-4B's nvfp4_w4a16: '*lm_head*weight_quantizer'
     * fp8, its input quantizer left disabled) at the weight's amax under max.  Anything else it refuses */
    if (lm.format == LWQ_QFMT_NVFP4 && lm.weight_only && lm.four_over_six) {
        if (lm.algo != LWQ_ALGO_MSE || lm.fp8_scale_sweep)
            return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: the recipe quantizes lm_head as Four-over-Six NVFP4 under %s%s; "
                            "lwq writes a Four-over-Six lm_head under mse without fp8_scale_sweep only", path,
                            lwq_algo_name(lm.algo), lm.fp8_scale_sweep ? " + fp8_scale_sweep" : "");
        r->lm_head = LWQ_LMHEAD_F46;
        return 0;
    }
    if (lm.format == LWQ_QFMT_NVFP4 && lm.weight_only &&
        (lm.algo == LWQ_ALGO_MAX || (lm.algo == LWQ_ALGO_MSE && (lm.fp8_scale_sweep || lm.mse_range == LWQ_MSE_RANGE_DEFAULT)))) {
        r->lm_head = lm.algo == LWQ_ALGO_MAX ? LWQ_LMHEAD_MAX : lm.fp8_scale_sweep ? LWQ_LMHEAD_SWEEP : LWQ_LMHEAD_MSE;
        return 0;
    }
    if (lm.split && lm.weight_format == LWQ_QFMT_FP8 && lm.input_format == LWQ_QFMT_NONE) {
        if (lm.algo != LWQ_ALGO_MAX)
            return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: the recipe quantizes lm_head as weight-only FP8 under %s; lwq "
                            "writes a weight-only FP8 lm_head under max only (the weight's own amax)", path,
                            lwq_algo_name(lm.algo));
        r->lm_head = LWQ_LMHEAD_FP8;
        return 0;
    }
    /* W8A8 FP8 (per-tensor weight and input quantizers, both calibrated under max): the input_scale from
     * the calibration amax of lm_head's input, as Model Optimizer 0.47 calibrates it */
    if (lm.format == LWQ_QFMT_FP8 && !lm.split && !lm.weight_only) {
        if (lm.algo != LWQ_ALGO_MAX || lm.has_input_amax)
            return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: the recipe quantizes lm_head as W8A8 FP8 under %s%s; lwq writes "
                            "a W8A8 FP8 lm_head under max only (the weight's amax, the calibrated input amax)", path,
                            lwq_algo_name(lm.algo), lm.has_input_amax ? " with a fixed input amax" : "");
        r->lm_head = LWQ_LMHEAD_W8A8;
        return 0;
    }
    if (lm.format != LWQ_QFMT_NONE || lm.split)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: the recipe quantizes lm_head (%s), which lwq keeps in the source "
                        "dtype unless it is weight-only NVFP4 (dynamic blocks, or static ones under mse, "
                        "Four-over-Six too), weight-only FP8 or W8A8 FP8 under max; add {quantizer_name: '*lm_head*', "
                        "enable: false}", path,
                        lm.split ? "weight and input quantizers of different formats"
                                 : lwq_qformat_name(lm.format != LWQ_QFMT_NONE ? lm.format
                                                    : lm.weight_format != LWQ_QFMT_NONE ? lm.weight_format : lm.input_format));
    return 0;
}
