/* layout/recipe/recipe_attrs.c — Model Optimizer quantizer attributes (a quant_cfg entry's cfg) checked
 * against what lwq writes: e4m3 per-tensor FP8, or e2m1 with 16-element e4m3-scaled blocks
 * (NVFP4, dynamic or static), plus use_constant_amax / constant_amax.  Every other value is
 * refused naming the entry and the field; attributes with no effect on a checkpoint (training,
 * export dtype, autoquant cost) are accepted only with their Model Optimizer defaults or as noted. */
#include "layout/recipe/recipe_attrs.h"

#include <stdio.h>
#include <string.h>

/* (E, M) of a num_bits / scale_bits value: "e4m3" / "E4M3" / [4, 3]; -1 if it is not ExMy. */
static int exmy(const lwq_ynode *v, int *ex, int *m)
{
    long long a, b;
    if (v->kind == LWQ_Y_SEQ && v->n == 2 && !lwq_y_int(v->kids[0], &a) && !lwq_y_int(v->kids[1], &b) && a >= 0 &&
        a < 100 && b >= 0 && b < 100) {
        *ex = (int)a;
        *m = (int)b;
        return 0;
    }
    const char *s = v->kind == LWQ_Y_SCALAR ? v->str : NULL;
    char tail;
    if (s && (s[0] == 'e' || s[0] == 'E') && sscanf(s + 1, "%d%*[mM]%d%c", ex, m, &tail) == 2 && *ex >= 0 && *m >= 0) {
        const char *mm = strpbrk(s, "mM");
        return mm && mm > s + 1 ? 0 : -1;
    }
    return -1;
}

static void show(const lwq_ynode *v, char *out, size_t cap)
{
    if (v->kind == LWQ_Y_SCALAR)
        snprintf(out, cap, "%s", v->str);
    else if (v->kind == LWQ_Y_SEQ && v->n == 2 && v->kids[0]->kind == LWQ_Y_SCALAR && v->kids[1]->kind == LWQ_Y_SCALAR)
        snprintf(out, cap, "[%s, %s]", v->kids[0]->str, v->kids[1]->str);
    else
        snprintf(out, cap, "(a %s)", v->kind == LWQ_Y_SEQ ? "list" : "mapping");
}

#define ENTRY_ERR(code, fmt, ...) lwq_errf(e, code, "%s: quant_cfg entry '%s': " fmt, en->where, en->glob, __VA_ARGS__)

static int parse_block_sizes(lwq_mo_entry *en, const lwq_ynode *b, int *is_static, lwq_error *e)
{
    char t[96];
    if (b->kind != LWQ_Y_MAP)
        return ENTRY_ERR(LWQ_EFORMAT, "cfg.block_sizes must be a mapping%s", "");
    int have16 = 0, have_scale = 0;
    *is_static = 1; /* Model Optimizer's default block type */
    for (int i = 0; i < b->n; i++) {
        const char *k = b->kids[2 * i]->str;
        const lwq_ynode *v = b->kids[2 * i + 1];
        long long x;
        int ex, m;
        show(v, t, sizeof t);
        if (!strcmp(k, "-1")) {
            if (lwq_y_int(v, &x) || x != 16)
                return ENTRY_ERR(LWQ_EUNSUPPORTED, "cfg.block_sizes {-1: %s} is not supported (NVFP4 blocks are 16 "
                                 "along the last axis)", t);
            have16 = 1;
        } else if (!strcmp(k, "type")) {
            if (!lwq_y_str(v) || (strcmp(v->str, "dynamic") && strcmp(v->str, "static")))
                return ENTRY_ERR(LWQ_EFORMAT, "cfg.block_sizes.type %s: expected dynamic or static", t);
            *is_static = !strcmp(v->str, "static");
        } else if (!strcmp(k, "four_over_six")) {
            int b;
            if (lwq_y_bool(v, &b))
                return ENTRY_ERR(LWQ_EFORMAT, "cfg.block_sizes.four_over_six %s: expected true or false", t);
            en->four_over_six = b;
        } else if (!strcmp(k, "scale_bits")) {
            if (exmy(v, &ex, &m) || ex != 4 || m != 3)
                return ENTRY_ERR(LWQ_EUNSUPPORTED, "cfg.block_sizes.scale_bits %s is not supported (NVFP4 block "
                                 "scales are e4m3)", t);
            have_scale = 1;
        } else {
            return ENTRY_ERR(LWQ_EUNSUPPORTED, "cfg.block_sizes.%s is not supported (NVFP4 is {-1: 16, type, "
                             "scale_bits: e4m3[, four_over_six]})", k);
        }
    }
    if (!have16)
        return ENTRY_ERR(LWQ_EUNSUPPORTED, "cfg.block_sizes without -1: 16 is not supported (NVFP4 blocks are 16 "
                         "along the last axis)%s", "");
    if (!have_scale)
        return ENTRY_ERR(LWQ_EUNSUPPORTED, "cfg.block_sizes without scale_bits: e4m3 is not supported (unscaled or "
                         "non-FP8 block scales are not NVFP4)%s", "");
    return 0;
}

/* Attributes that must keep Model Optimizer's default (or have no effect on the checkpoint). */
static int default_attr(lwq_mo_entry *en, const char *k, const lwq_ynode *v, int *handled, lwq_error *e)
{
    static const struct {
        const char *key;
        int want; /* 1/0: this boolean; 2: null; 3: any boolean (training only); 4: the string "max";
                     5: a number (autoquant cost only); 6: any string (ONNX export dtype) */
    } d[] = {{"fake_quant", 1}, {"unsigned", 0},  {"narrow_range", 0},       {"learn_amax", 0},
             {"rotate", 0},     {"bias", 2},      {"backend", 2},            {"backend_extra_args", 2},
             {"pass_through_bwd", 3}, {"calibrator", 4}, {"effective_bits", 5}, {"trt_high_precision_dtype", 6}};
    char t[96];
    show(v, t, sizeof t);
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        if (strcmp(k, d[i].key))
            continue;
        *handled = 1;
        int b;
        double x;
        int ok = d[i].want <= 1   ? !lwq_y_bool(v, &b) && b == d[i].want
                 : d[i].want == 2 ? lwq_y_is_null(v)
                 : d[i].want == 3 ? !lwq_y_bool(v, &b)
                 : d[i].want == 4 ? lwq_y_str(v) && !strcmp(v->str, "max")
                 : d[i].want == 5 ? !lwq_y_number(v, &x)
                                  : lwq_y_str(v) != NULL;
        if (!ok)
            return ENTRY_ERR(LWQ_EUNSUPPORTED, "cfg.%s %s is not supported", k, t);
        return 0;
    }
    return 0;
}

int lwq_mo_parse_attrs(lwq_mo_entry *en, const lwq_mo_kv *a, lwq_error *e)
{
    const lwq_ynode *nb = NULL, *bs = NULL;
    char t[96];
    for (int i = 0; i < a->n; i++) {
        const char *k = a->key[i];
        const lwq_ynode *v = a->val[i];
        int handled = 0, rc, b;
        double x;
        show(v, t, sizeof t);
        if (!strcmp(k, "num_bits")) {
            nb = v;
        } else if (!strcmp(k, "block_sizes")) {
            bs = lwq_y_is_null(v) ? NULL : v;
        } else if (!strcmp(k, "axis")) {
            if (!lwq_y_is_null(v))
                return ENTRY_ERR(LWQ_EUNSUPPORTED, "cfg.axis %s is not supported (per-channel scales; lwq writes "
                                 "per-tensor FP8 and 16-element NVFP4 blocks)", t);
        } else if (!strcmp(k, "type")) {
            if (!lwq_y_str(v) || strcmp(v->str, "static"))
                return ENTRY_ERR(LWQ_EUNSUPPORTED, "cfg.type %s is not supported (dynamic per-tensor scales are not "
                                 "written to a checkpoint)", t);
        } else if (!strcmp(k, "use_constant_amax")) {
            if (lwq_y_bool(v, &b))
                return ENTRY_ERR(LWQ_EFORMAT, "cfg.use_constant_amax %s: expected true or false", t);
            en->use_constant_amax = b;
        } else if (!strcmp(k, "constant_amax")) {
            if (lwq_y_is_null(v))
                continue;
            if (lwq_y_number(v, &x) || !LWQ_RECIPE_AMAX_OK(x))
                return ENTRY_ERR(LWQ_EFORMAT, "cfg.constant_amax %s: expected a number in [%.3g, %.3g] (the input "
                                 "scale it gives, amax / 2688, must be a normal float)", t, LWQ_RECIPE_AMAX_MIN,
                                 LWQ_RECIPE_AMAX_MAX);
            en->has_constant_amax = 1;
            en->constant_amax = x;
        } else if (!strcmp(k, "enable")) {
            return ENTRY_ERR(LWQ_EUNSUPPORTED, "cfg.enable is not supported (give enable on the entry)%s", "");
        } else if ((rc = default_attr(en, k, v, &handled, e)) != 0) {
            return rc;
        } else if (!handled) {
            return ENTRY_ERR(LWQ_EUNSUPPORTED, "cfg.%s is not supported", k);
        }
    }
    if (!nb)
        return ENTRY_ERR(LWQ_EUNSUPPORTED, "cfg without num_bits means Model Optimizer's default 8-bit integer, "
                         "which lwq does not write%s", "");
    int ex, m;
    show(nb, t, sizeof t);
    if (exmy(nb, &ex, &m) == 0 && ex == 4 && m == 3) {
        if (bs)
            return ENTRY_ERR(LWQ_EUNSUPPORTED, "cfg.block_sizes with num_bits e4m3 (block-scaled FP8) is not "
                             "supported; lwq writes per-tensor FP8%s", "");
        en->kind = LWQ_MO_FP8;
        return 0;
    }
    if (exmy(nb, &ex, &m) == 0 && ex == 2 && m == 1) {
        if (!bs)
            return ENTRY_ERR(LWQ_EUNSUPPORTED, "cfg.num_bits e2m1 needs block_sizes {-1: 16, type: dynamic|static, "
                             "scale_bits: e4m3} (NVFP4)%s", "");
        int st = 0, rc = parse_block_sizes(en, bs, &st, e);
        if (rc)
            return rc;
        en->kind = st ? LWQ_MO_NVFP4_STATIC : LWQ_MO_NVFP4_DYNAMIC;
        return 0;
    }
    long long bits;
    return ENTRY_ERR(LWQ_EUNSUPPORTED, "cfg.num_bits %s is not supported (lwq writes e2m1 NVFP4 and e4m3 FP8%s)", t,
                     !lwq_y_int(nb, &bits) ? "; integers are INT formats" : "");
}

