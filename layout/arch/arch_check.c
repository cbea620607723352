/* layout/arch/arch_check.c — a checkpoint against its layer plans (lwq_arch_check, contract in
 * arch.h): every planned tensor present with its shape, the unexpected and extra-layer ones listed,
 * quantized linears and FP8-block / MXFP4 sources recognised with their scales.  The plans are
 * arch.c. */
#include "layout/arch/arch.h"

#include "layout/checkpoint/srcfmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *lwq_arch_issue_name(lwq_arch_issue_kind k)
{
    switch (k) {
    case LWQ_ISSUE_MISSING: return "missing";
    case LWQ_ISSUE_BAD_SHAPE: return "bad shape";
    case LWQ_ISSUE_UNEXPECTED: return "unexpected";
    case LWQ_ISSUE_EXTRA_LAYER: return "extra layer";
    }
    return "?";
}

void lwq_arch_report_free(lwq_arch_report *r)
{
    if (!r)
        return;
    free(r->v);
    memset(r, 0, sizeof *r);
}

static int issue(lwq_arch_report *r, lwq_arch_issue_kind k, int layer, const char *name,
                 const char *detail, lwq_error *e)
{
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 16;
        lwq_arch_issue *v = realloc(r->v, (size_t)cap * sizeof *v);
        if (!v)
            return lwq_errf(e, LWQ_ENOMEM, "arch check: out of memory");
        r->v = v;
        r->cap = cap;
    }
    lwq_arch_issue *x = &r->v[r->n++];
    x->kind = k;
    x->layer = layer;
    snprintf(x->name, sizeof x->name, "%s", name);
    snprintf(x->detail, sizeof x->detail, "%s", detail ? detail : "");
    r->count[k]++;
    return 0;
}

static void fmt_shape(char *out, size_t cap, int ndim, const int64_t *s)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

static int cmp_tensor_ptr(const void *a, const void *b)
{
    return strcmp((*(const lwq_arch_tensor *const *)a)->name, (*(const lwq_arch_tensor *const *)b)->name);
}

/* ---- quantized linears (arch.h) ----------------------------------------------------------- */

enum { Q_NONE = 0, Q_NVFP4, Q_FP8 };

/* How weight `t` (named module + ".weight") is stored: Q_NVFP4 / Q_FP8 when its dtype says so and
 * the module has a weight_scale (an FP8-block source has a weight_scale_inv instead), else Q_NONE. */
static int quant_kind(const lwq_ckpt *c, const char *module, const lwq_ckpt_tensor *t)
{
    if ((t->dtype != LWQ_U8 && t->dtype != LWQ_F8_E4M3) || !lwq_ckpt_find_in(c, module, ".weight_scale"))
        return Q_NONE;
    return t->dtype == LWQ_U8 ? Q_NVFP4 : Q_FP8;
}

/* One scale of a quantized linear: present, with the dtype and shape given (nd < 0: an F32 scalar). */
static int check_scale(const lwq_ckpt *c, const lwq_arch_layer *plan, const char *module, const char *suffix,
                       lwq_dtype dt, int nd, const int64_t *shape, lwq_arch_report *r, lwq_error *e)
{
    char name[LWQ_ARCH_NAME_MAX + 32], det[96];
    snprintf(name, sizeof name, "%s%s", module, suffix);
    const lwq_ckpt_tensor *s = lwq_ckpt_find(c, name);
    if (!s)
        return issue(r, LWQ_ISSUE_MISSING, plan->layer, name, "a scale of a quantized linear", e);
    int ok = nd < 0 ? lwq_ckpt_is_f32_scalar(s) : s->dtype == dt && s->ndim == nd;
    for (int d = 0; ok && nd > 0 && d < nd; d++)
        ok = s->shape[d] == shape[d];
    if (ok)
        return 0;
    char want[40], got[40];
    if (nd < 0)
        snprintf(want, sizeof want, "an F32 scalar");
    else
        fmt_shape(want, sizeof want, nd, shape);
    fmt_shape(got, sizeof got, s->ndim, s->shape);
    snprintf(det, sizeof det, "expected %s%s%s, found %s %s", nd < 0 ? "" : lwq_dtype_name(dt), nd < 0 ? "" : " ",
             want, lwq_dtype_name(s->dtype), got);
    return issue(r, LWQ_ISSUE_BAD_SHAPE, plan->layer, name, det, e);
}

/* Plan weight p stored as `kind` (tensor t): its packed shape and its scales. */
static int check_quantized(const lwq_ckpt *c, const lwq_arch_layer *plan, const lwq_arch_tensor *p,
                           const lwq_ckpt_tensor *t, int kind, lwq_arch_report *r, lwq_error *e)
{
    char module[LWQ_ARCH_NAME_MAX];
    snprintf(module, sizeof module, "%.*s", (int)(strlen(p->name) - strlen(".weight")), p->name);
    if (!r->first_quantized[0])
        snprintf(r->first_quantized, sizeof r->first_quantized, "%s", p->name);
    int64_t want[4] = {0};
    int nd = p->ndim, rc = 0;
    memcpy(want, p->shape, sizeof want);
    if (kind == Q_NVFP4) {
        r->quantized_nvfp4++;
        if (nd != 2 || p->shape[1] % 16) {
            char det[96];
            snprintf(det, sizeof det, "stored as NVFP4, which needs 2 dimensions, the last a multiple of 16");
            return issue(r, LWQ_ISSUE_BAD_SHAPE, plan->layer, p->name, det, e);
        }
        want[1] = p->shape[1] / 2;
    } else {
        r->quantized_fp8++;
    }
    int same = t->ndim == nd;
    for (int d = 0; same && d < nd; d++)
        same = t->shape[d] == want[d];
    if (!same) {
        char a[40], b[40], det[96];
        fmt_shape(a, sizeof a, nd, want);
        fmt_shape(b, sizeof b, t->ndim, t->shape);
        snprintf(det, sizeof det, "expected %s (%s), found %s", a, kind == Q_NVFP4 ? "NVFP4-packed" : "FP8", b);
        rc = issue(r, LWQ_ISSUE_BAD_SHAPE, plan->layer, p->name, det, e);
    }
    if (kind == Q_NVFP4) {
        int64_t bs[2] = {p->shape[0], p->shape[1] / 16};
        if (rc == 0)
            rc = check_scale(c, plan, module, ".weight_scale", LWQ_F8_E4M3, 2, bs, r, e);
        if (rc == 0)
            rc = check_scale(c, plan, module, ".weight_scale_2", LWQ_F32, -1, NULL, r, e);
    } else if (rc == 0) {
        rc = check_scale(c, plan, module, ".weight_scale", LWQ_F32, -1, NULL, r, e);
    }
    /* weight-only NVFP4 (W4A16_NVFP4) has no input_scale; whether the config says so is the
     * reader's check (lwq verify: quant_algo per module).  An FP8 decoder linear always has one; an
     * FP8 lm_head or embedding may be weight-only (Model Optimizer 0.47 lists it as FP8 all the
     * same, and writes no input_scale for its never-calibrated input quantizer) */
    char is[LWQ_ARCH_NAME_MAX + 32];
    snprintf(is, sizeof is, "%s.input_scale", module);
    if (rc == 0 && ((kind == Q_FP8 && p->linear >= 0) || lwq_ckpt_find(c, is)))
        rc = check_scale(c, plan, module, ".input_scale", LWQ_F32, -1, NULL, r, e);
    return rc;
}

/* Whether `name` (not in the plan) belongs to quantization: a scale of a quantized linear of the
 * plan, or a KV cache scalar of a decoder layer (counted). */
static int is_quant_tensor(const lwq_ckpt *c, const lwq_arch_layer *plan, const lwq_ckpt_tensor *t,
                           lwq_arch_report *r)
{
    static const char *const sfx[] = {".weight_scale_2", ".weight_scale", ".input_scale"};
    char module[LWQ_ARCH_NAME_MAX + 8], w[LWQ_ARCH_NAME_MAX + 16];
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++)
        if (lwq_srcfmt_strip_suffix(t->name, sfx[i], module, sizeof module)) {
            snprintf(w, sizeof w, "%s.weight", module);
            const lwq_arch_tensor *p = lwq_arch_find_tensor(plan, w);
            const lwq_ckpt_tensor *wt = lwq_ckpt_find(c, w);
            return p && p->linear >= 0 && wt && quant_kind(c, module, wt) != Q_NONE;
        }
    if (plan->layer >= 0 && (lwq_srcfmt_strip_suffix(t->name, ".k_scale", module, sizeof module) ||
                             lwq_srcfmt_strip_suffix(t->name, ".v_scale", module, sizeof module)) &&
        lwq_ckpt_is_f32_scalar(t)) {
        r->kv_scales++;
        return 1;
    }
    return 0;
}

/* Whether tail tensor `name` belongs to the wrapper's own modules (counted). */
static int is_passthrough(const lwq_ckpt *c, const lwq_arch_layer *plan, const char *name, lwq_arch_report *r)
{
    const char *p = c->cfg.passthrough;
    if (plan->layer >= 0 || !p || strncmp(name, p, strlen(p)))
        return 0;
    r->passthrough++;
    return 1;
}

/* An FP8-block source's X.weight_scale_inv beside the F8_E4M3 weight X.weight of shape w: one
 * scale per block of the config's weight_block_size, [ceil(rows / br), ceil(cols / bc)].  Checked
 * here, from the headers, so a wrong one is refused before any weight is read (the reader checks
 * it again on the bytes). */
static int check_block_scale(const lwq_ckpt *c, const lwq_srcfmt *f, const lwq_arch_layer *plan, const char *weight,
                             const int64_t *w, lwq_arch_report *r, lwq_error *e)
{
    char name[LWQ_ARCH_NAME_MAX + 16], det[160];
    snprintf(name, sizeof name, "%s%s", weight, LWQ_SRCFMT_SCALE_INV);
    const lwq_ckpt_tensor *s = lwq_ckpt_find(c, name);
    if (!s)
        return 0; /* the reader names a missing one */
    int64_t want[2] = {(w[0] + f->block_rows - 1) / f->block_rows, (w[1] + f->block_cols - 1) / f->block_cols};
    if (s->ndim == 2 && s->shape[0] == want[0] && s->shape[1] == want[1])
        return 0;
    char a[40], b[40];
    fmt_shape(a, sizeof a, 2, want);
    fmt_shape(b, sizeof b, s->ndim, s->shape);
    snprintf(det, sizeof det, "expected %s for a [%lld, %lld] weight in %lldx%lld blocks (weight_block_size), found %s",
             a, (long long)w[0], (long long)w[1], (long long)f->block_rows, (long long)f->block_cols, b);
    return issue(r, LWQ_ISSUE_BAD_SHAPE, plan->layer, name, det, e);
}

/* Compare one plan with the checkpoint tensors listed in `have`; f: the source's storage format. */
static int check_part(const lwq_ckpt *c, const lwq_srcfmt *f, const lwq_arch_layer *plan, const lwq_ckpt_layer *have,
                      lwq_arch_report *r, lwq_error *e)
{
    int rc = 0;
    const lwq_arch_tensor **sorted = malloc(((size_t)plan->ntensors + 1) * sizeof *sorted);
    if (!sorted)
        return lwq_errf(e, LWQ_ENOMEM, "arch check: out of memory");
    for (int i = 0; i < plan->ntensors; i++)
        sorted[i] = &plan->tensors[i];
    qsort(sorted, (size_t)plan->ntensors, sizeof *sorted, cmp_tensor_ptr);
    for (int i = 0; rc == 0 && i < plan->ntensors; i++) {
        const lwq_arch_tensor *p = &plan->tensors[i];
        const lwq_ckpt_tensor *t = lwq_ckpt_find(c, p->name);
        int ndim = t ? t->ndim : 0;
        int64_t shape[LWQ_ST_MAX_DIMS];
        if (t)
            memcpy(shape, t->shape, sizeof shape);
        /* an MXFP4 source stores the tensor as name_blocks + name_scales (layout/checkpoint/srcfmt.h) */
        if (!t && !lwq_srcfmt_packed_shape(c, p->name, &ndim, shape)) {
            if (!p->optional)
                rc = issue(r, LWQ_ISSUE_MISSING, plan->layer, p->name, NULL, e);
            continue;
        }
        char module[LWQ_ARCH_NAME_MAX];
        /* an lm_head and the token embedding may be quantized too (weight-only NVFP4, recipes that
         * ask for it; Model Optimizer 0.47 exports a QuantEmbedding's table so) */
        int kind = t && (p->linear >= 0 || p->kind == LWQ_TK_LM_HEAD || p->kind == LWQ_TK_EMBED) &&
                           lwq_srcfmt_strip_suffix(p->name, ".weight", module, sizeof module)
                       ? quant_kind(c, module, t)
                       : Q_NONE;
        if (kind) {
            rc = check_quantized(c, plan, p, t, kind, r, e);
            continue;
        }
        int same = ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++)
            same = shape[d] == p->shape[d];
        if (!same) {
            char a[40], b[40], det[96];
            fmt_shape(a, sizeof a, p->ndim, p->shape);
            fmt_shape(b, sizeof b, ndim, shape);
            snprintf(det, sizeof det, "expected %s, found %s", a, b);
            rc = issue(r, LWQ_ISSUE_BAD_SHAPE, plan->layer, p->name, det, e);
        } else if (t && t->dtype == LWQ_F8_E4M3 && ndim == 2 && f->kind == LWQ_SRCFMT_FP8_BLOCK) {
            rc = check_block_scale(c, f, plan, p->name, shape, r, e);
        }
    }
    for (int i = 0; rc == 0 && i < have->n; i++) {
        const char *name = c->tensors[have->idx[i]].name;
        lwq_arch_tensor key;
        snprintf(key.name, sizeof key.name, "%s", name);
        const lwq_arch_tensor *kp = &key;
        if ((strlen(name) >= sizeof key.name ||
             !bsearch(&kp, sorted, (size_t)plan->ntensors, sizeof *sorted, cmp_tensor_ptr)) &&
            !lwq_srcfmt_is_aux(c, name) && /* FP8 scale_inv / MXFP4 halves: dequantized away */
            !is_quant_tensor(c, plan, &c->tensors[have->idx[i]], r) &&
            !is_passthrough(c, plan, name, r))
            rc = issue(r, LWQ_ISSUE_UNEXPECTED, plan->layer, name, "passes through unquantized", e);
    }
    free(sorted);
    return rc;
}

int lwq_arch_check(const lwq_ckpt *c, lwq_arch_report *r, lwq_error *e)
{
    memset(r, 0, sizeof *r);
    const lwq_model_config *cfg = &c->cfg;
    /* the block size of an FP8-block source; a config the source reader refuses (or an export's
     * own quantization_config, for inspect / verify) checks no block scales here */
    lwq_srcfmt f;
    lwq_error fe = {0};
    if (lwq_srcfmt_from_config(cfg, &f, &fe) != 0)
        f.kind = LWQ_SRCFMT_PLAIN;
    int rc = 0;
    for (int l = 0; rc == 0 && l < c->nlayers; l++) {
        if (l >= cfg->num_hidden_layers) {
            char name[LWQ_ARCH_NAME_MAX], det[96];
            char canon[64];
            snprintf(canon, sizeof canon, "model.layers.%d.*", l);
            lwq_names_full(&cfg->names, canon, name, sizeof name);
            snprintf(det, sizeof det, "%d tensors beyond num_hidden_layers %d pass through",
                     c->layers[l].n, cfg->num_hidden_layers);
            rc = issue(r, LWQ_ISSUE_EXTRA_LAYER, l, name, det, e);
            continue;
        }
        lwq_arch_layer plan;
        if ((rc = lwq_arch_layer_plan(cfg, l, &plan, e)) != 0)
            break;
        rc = check_part(c, &f, &plan, &c->layers[l], r, e);
        lwq_arch_layer_free(&plan);
    }
    if (rc == 0) {
        lwq_arch_layer tail;
        if ((rc = lwq_arch_tail_plan(cfg, &tail, e)) == 0) {
            rc = check_part(c, &f, &tail, &c->tail, r, e);
            lwq_arch_layer_free(&tail);
        }
    }
    if (rc != 0) {
        lwq_arch_report_free(r);
        return rc;
    }
    return r->count[LWQ_ISSUE_MISSING] + r->count[LWQ_ISSUE_BAD_SHAPE];
}
