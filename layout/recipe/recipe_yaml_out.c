/* layout/recipe/recipe_yaml_out.c — Model Optimizer PTQ YAML from per-module choices (recipe_yaml_out.h). */
#include "layout/recipe/recipe_yaml_out.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How a weight is calibrated under recipe method m (sweep s), by its attributes:
 * 0 max, 1 mse, 2 mse + sweep, 3 local_hessian (docs/RECIPES.md section 6). */
static int yaml_calib(lwq_qformat f, int is_static, lwq_calib_algo m, int s)
{
    if (f == LWQ_QFMT_FP8)
        return m == LWQ_ALGO_MSE && !s ? 1 : 0;
    if (!is_static)
        return 0;
    return m == LWQ_ALGO_MSE ? (s ? 2 : 1) : m == LWQ_ALGO_LOCAL_HESSIAN ? 3 : -1;
}

/* The same for lwq's own choice. */
static int lwq_calib(const lwq_quant_choice *c)
{
    if (c->format == LWQ_QFMT_FP8)
        return c->algo == LWQ_ALGO_MAX ? 0 : 1; /* FP8: max, or the multiplier search */
    switch (c->algo) {
    case LWQ_ALGO_MAX: return 0;
    case LWQ_ALGO_MSE: return c->fp8_scale_sweep ? 2 : 1;
    case LWQ_ALGO_LOCAL_HESSIAN: return 3;
    default: return -1;
    }
}

/* Whether a module's weights take the mse multiplier search (calib: lwq_calib's) */
static int takes_range(int calib) { return calib == 1; }

/* Whether every module can be written under method m / sweep s and the recipe's mse multipliers (range,
 * mult); *bad: the first that cannot. */
static int expressible(lwq_calib_algo m, int s, int range, const double *mult, const lwq_yaml_module *mod, int n,
                       int *bad)
{
    for (int i = 0; i < n; i++) {
        const lwq_quant_choice *c = &mod[i].c;
        if (c->format == LWQ_QFMT_NONE)
            continue;
        int want = lwq_calib(c);
        int ok = want >= 0 && (yaml_calib(c->format, 0, m, s) == want ||
                               (c->format == LWQ_QFMT_NVFP4 && yaml_calib(c->format, 1, m, s) == want));
        /* Four-over-Six: static blocks under mse without the sweep */
        if (c->four_over_six && !(m == LWQ_ALGO_MSE && !s))
            ok = 0;
        /* its multipliers are the recipe's */
        if (ok && takes_range(want) &&
            (c->mse_range != range || (range == LWQ_MSE_RANGE_OWN && memcmp(c->mse_mult, mult, 3 * sizeof *mult))))
            ok = 0;
        if (!ok) {
            *bad = i;
            return 0;
        }
    }
    return 1;
}

typedef struct buf {
    char *p;
    size_t n, cap;
    int oom;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t nc = (b->cap ? b->cap * 2 : 4096) + (size_t)k;
        char *q = realloc(b->p, nc);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = nc;
    }
}

static void quoted(buf *b, const char *s)
{
    put(b, "'");
    for (; *s; s++) {
        if (*s == '\'')
            put(b, "''");
        else
            put(b, "%c", *s);
    }
    put(b, "'");
}

static void nvfp4_cfg(buf *b, int is_static, int f46)
{
    put(b, "{num_bits: e2m1, block_sizes: {-1: 16, type: %s, scale_bits: e4m3%s}", is_static ? "static" : "dynamic",
        f46 ? ", four_over_six: true" : "");
}

char *lwq_recipe_yaml_render(const char *description, lwq_calib_algo method, int sweep, lwq_kv_mode kv,
                             const lwq_yaml_module *m, int n, char *why, size_t why_cap)
{
    static const double dflt[3] = {0.25, 4.0, 0.1};
    return lwq_recipe_yaml_render_range(description, method, sweep, LWQ_MSE_RANGE_DEFAULT, dflt, kv, m, n, why,
                                        why_cap);
}

char *lwq_recipe_yaml_render_range(const char *description, lwq_calib_algo method, int sweep, int mse_range,
                                   const double *mult, lwq_kv_mode kv, const lwq_yaml_module *m, int n, char *why,
                                   size_t why_cap)
{
    /* the recipe's own algorithm first, then those that express more mixes */
    static const struct {
        lwq_calib_algo m;
        int s;
    } tries[] = {{LWQ_ALGO_MAX, 0}, {LWQ_ALGO_MSE, 0}, {LWQ_ALGO_MSE, 1}, {LWQ_ALGO_LOCAL_HESSIAN, 1}};
    int bad = -1, found = 0;
    lwq_calib_algo M = method;
    int S = sweep;
    if (method == LWQ_ALGO_GPTQ) {
        snprintf(why, why_cap, "gptq has no Model Optimizer recipe equivalent in lwq (docs/RECIPES.md section 4)");
        return NULL;
    }
    found = expressible(M, S, mse_range, mult, m, n, &bad);
    for (size_t t = 0; !found && t < sizeof tries / sizeof tries[0]; t++)
        if (expressible(tries[t].m, tries[t].s, mse_range, mult, m, n, &bad)) {
            M = tries[t].m;
            S = tries[t].s;
            found = 1;
        }
    if (!found) {
        const lwq_quant_choice *c = &m[bad].c;
        snprintf(why, why_cap, "%s: %s with %s%s%s cannot be told apart from the other modules' calibration by "
                 "Model Optimizer's quantizer attributes (one algorithm per recipe)", m[bad].glob,
                 lwq_qformat_name(c->format), lwq_algo_name(c->algo), c->fp8_scale_sweep ? " + fp8_scale_sweep" : "",
                 c->four_over_six ? " + four_over_six" : "");
        return NULL;
    }
    buf b = {0};
    put(&b, "# %s\n# Written by lwq; it loads with lwq quantize --recipe FILE.yaml and, in Model Optimizer's schema, "
            "with hf_ptq.py --recipe.\n", description);
    put(&b, "metadata:\n  recipe_type: ptq\n  description: ");
    quoted(&b, description);
    put(&b, "\nquantize:\n  algorithm:\n    method: %s\n", lwq_algo_name(M));
    if (M == LWQ_ALGO_MSE || M == LWQ_ALGO_LOCAL_HESSIAN)
        put(&b, "    fp8_scale_sweep: %s\n", S ? "true" : "false");
    if (M == LWQ_ALGO_MSE && mse_range == LWQ_MSE_RANGE_OWN)
        put(&b, "    start_multiplier: %.17g\n    stop_multiplier: %.17g\n    step_size: %.17g\n", mult[0], mult[1],
            mult[2]);
    put(&b, "  quant_cfg:\n    - {quantizer_name: '*', enable: false}\n");
    for (int i = 0; i < n; i++) {
        const lwq_quant_choice *c = &m[i].c;
        if (c->format == LWQ_QFMT_NONE)
            continue;
        int want = lwq_calib(c), is_static = c->format == LWQ_QFMT_NVFP4 && yaml_calib(c->format, 0, M, S) != want;
        static const char *const q[2] = {".weight_quantizer", ".input_quantizer"};
        for (int k = 0; k < (c->weight_only ? 1 : 2); k++) { /* weight-only: the input stays disabled */
            /* a glob ending in '*' (a layer's routed experts, "...mlp.experts.*") takes the suffix
             * without its dot: Model Optimizer names a fused experts module's quantizers
             * "...experts.gate_up_proj_weight_quantizer(s.E)", which "...experts.*.weight_quantizer"
             * misses (the experts stayed unquantized there); lwq reads both as the same modules */
            char name[600];
            size_t gl = strlen(m[i].glob);
            snprintf(name, sizeof name, "%s%s", m[i].glob, gl && m[i].glob[gl - 1] == '*' ? q[k] + 1 : q[k]);
            put(&b, "    - quantizer_name: ");
            quoted(&b, name);
            put(&b, "\n      cfg: ");
            if (c->format == LWQ_QFMT_NVFP4)
                nvfp4_cfg(&b, k == 0 && is_static, k == 0 && c->four_over_six);
            else
                put(&b, "{num_bits: e4m3, axis: null");
            if (k == 1 && c->has_input_amax)
                put(&b, ", constant_amax: %.9g", (double)c->input_amax);
            put(&b, "}\n");
        }
    }
    if (kv == LWQ_KV_NVFP4_CAST)
        put(&b, "    - quantizer_name: '*[kv]_bmm_quantizer'\n      cfg: {num_bits: e2m1, block_sizes: {-1: 16, type: "
                "dynamic, scale_bits: e4m3}, use_constant_amax: true}\n");
    else if (kv != LWQ_KV_NONE)
        put(&b, "    - quantizer_name: '*[kv]_bmm_quantizer'\n      cfg: {num_bits: e4m3, axis: null%s}\n",
            kv == LWQ_KV_FP8_CAST ? ", use_constant_amax: true" : "");
    if (b.oom) {
        free(b.p);
        snprintf(why, why_cap, "out of memory");
        return NULL;
    }
    return b.p;
}
