/* layout/ckpt_fused.c — fused 3-D expert tensors as per-expert tensors (contract in checkpoint.h).
 *
 * Qwen3.5-MoE checkpoints as published (and as newer transformers write them) store a layer's
 * routed experts as two 3-D tensors: mlp.experts.gate_up_proj [E, 2I, H] (expert e's gate_proj
 * rows 0..I-1, its up_proj rows I..2I-1: transformers' chunk(2)) and mlp.experts.down_proj
 * [E, H, I].  Each expert's gate, up and down matrices are contiguous byte ranges of them, so the
 * table lists them as the per-expert tensors mlp.experts.<e>.{gate,up,down}_proj.weight that the
 * layer plans, the forward, expert streaming and the writer already know (Model Optimizer 0.47
 * exports them under those names too); nothing is copied and the fused names leave the table. */
#include "layout/checkpoint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which fused tensor `canon` (canonical name) is: 1 gate_up_proj, 2 down_proj, 0 neither. */
static int fused_kind(const char *canon)
{
    if (lwq_tensor_layer_index(canon) < 0)
        return 0;
    const char *p = strstr(canon, ".mlp.experts.");
    if (!p)
        return 0;
    p += strlen(".mlp.experts.");
    return !strcmp(p, "gate_up_proj") ? 1 : !strcmp(p, "down_proj") ? 2 : 0;
}

static void fmt3(char *out, size_t cap, int ndim, const int64_t *s)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%" PRId64, i ? ", " : "", s[i]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

int lwq_ckpt_split_fused_experts(lwq_ckpt *c, lwq_error *e)
{
    const lwq_model_config *g = &c->cfg;
    if (!g->family || g->family->moe == LWQ_MOE_NONE || g->family->experts != LWQ_EXPERTS_HF)
        return 0;
    int extra = 0;
    char canon[600];
    for (int i = 0; i < c->ntensors; i++) {
        const lwq_ckpt_tensor *t = &c->tensors[i];
        int k = lwq_names_canon(&g->names, t->name, canon, sizeof canon) ? fused_kind(canon) : 0;
        if (!k)
            continue;
        const int64_t E = g->num_experts, I = g->moe_intermediate_size, H = g->hidden_size;
        int64_t want[3] = {E, k == 1 ? 2 * I : H, k == 1 ? H : I};
        if (t->ndim != 3 || t->shape[0] != want[0] || t->shape[1] != want[1] || t->shape[2] != want[2]) {
            char a[64], b[64];
            fmt3(a, sizeof a, 3, want);
            fmt3(b, sizeof b, t->ndim, t->shape);
            return lwq_errf(e, LWQ_EFORMAT, "%s: tensor %s has shape %s, expected %s (num_experts, %s, "
                            "%s from config.json)", c->dir, t->name, b, a,
                            k == 1 ? "2 x moe_intermediate_size" : "hidden_size",
                            k == 1 ? "hidden_size" : "moe_intermediate_size");
        }
        if (t->dtype != LWQ_BF16 && t->dtype != LWQ_F16 && t->dtype != LWQ_F32)
            return lwq_errf(e, LWQ_EUNSUPPORTED, "%s: fused expert tensor %s is %s; lwq reads fused "
                            "experts stored as BF16, F16 or F32", c->dir, t->name,
                            lwq_dtype_name(t->dtype));
        if (E > (1 << 16))
            return lwq_errf(e, LWQ_EFORMAT, "%s: %s: %" PRId64 " experts", c->dir, t->name, E);
        extra += (int)(k == 1 ? 2 * E : E) - 1;
    }
    if (!extra)
        return 0;
    int n = c->ntensors + extra;
    lwq_ckpt_tensor *v = calloc((size_t)n + 1, sizeof *v);
    char **names = realloc(c->owned_names, ((size_t)c->nowned + (size_t)extra + (size_t)c->ntensors + 1) * sizeof *names);
    if (!v || !names) {
        free(v);
        if (names)
            c->owned_names = names;
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", c->dir);
    }
    c->owned_names = names;
    int k2 = 0;
    for (int i = 0; i < c->ntensors; i++) {
        const lwq_ckpt_tensor *t = &c->tensors[i];
        int k = lwq_names_canon(&g->names, t->name, canon, sizeof canon) ? fused_kind(canon) : 0;
        if (!k) {
            v[k2++] = *t;
            continue;
        }
        /* the name up to and including "mlp.experts." */
        size_t stem = strlen(t->name) - strlen(k == 1 ? "gate_up_proj" : "down_proj");
        const int64_t E = t->shape[0], rows = k == 1 ? t->shape[1] / 2 : t->shape[1], cols = t->shape[2];
        const uint64_t part = (uint64_t)rows * (uint64_t)cols * lwq_dtype_size(t->dtype);
        for (int64_t x = 0; x < E; x++)
            for (int h = 0; h < (k == 1 ? 2 : 1); h++) {
                char nm[700];
                snprintf(nm, sizeof nm, "%.*s%" PRId64 ".%s.weight", (int)stem, t->name, x,
                         k == 2 ? "down_proj" : h ? "up_proj" : "gate_proj");
                char *own = strdup(nm);
                if (!own) {
                    free(v);
                    return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", c->dir);
                }
                c->owned_names[c->nowned++] = own;
                lwq_ckpt_tensor *d = &v[k2++];
                *d = *t;
                d->name = own;
                d->ndim = 2;
                memset(d->shape, 0, sizeof d->shape);
                d->shape[0] = rows;
                d->shape[1] = cols;
                d->nbytes = part;
                d->offset = t->offset + part * (uint64_t)(k == 1 ? 2 * x + h : x);
            }
    }
    free(c->tensors);
    c->tensors = v;
    c->ntensors = k2;
    return 0;
}

/* ---- kimi_linear: the names transformers holds (family->kimi_names) ---------------------------
 *
 * Kimi-Linear's checkpoints (and transformers 5.23's save_pretrained, which writes them back)
 * keep the MLPs under block_sparse_moe (experts.E.{w1, w3, w2}), and the forget gate's
 * f_a_proj / f_b_proj / dt_bias / A_log directly under self_attn.  transformers renames them on
 * load (conversion_mapping.py "kimi_linear") to mlp.*, mlp.experts.E.{gate,up,down}_proj (fused in
 * memory) and self_attn.forget_gate.*, and Model Optimizer 0.47 exports those names (its reverse
 * conversion gives up on the stacked conv1d).  The table lists the tensors under transformers'
 * names, so that plans, forward, recipes and the writer see one naming; the depthwise convs
 * q_conv1d / k_conv1d / v_conv1d keep theirs (transformers concatenates them into one conv1d:
 * docs/FAMILIES.md).  Two source tensors that map to one name are refused. */

static const struct {
    const char *from, *to;
} kimi_renames[] = {
    {".block_sparse_moe.", ".mlp."},
    {".self_attn.f_a_proj.", ".self_attn.forget_gate.f_a_proj."},
    {".self_attn.f_b_proj.", ".self_attn.forget_gate.f_b_proj."},
    {".self_attn.dt_bias", ".self_attn.forget_gate.dt_bias"},
    {".self_attn.A_log", ".self_attn.forget_gate.A_log"},
};

/* out = name with every rule applied once (and experts.E.w1/w3/w2 -> gate/up/down_proj); 1 when
 * something changed, 0 when not, -1 when out is too small. */
static int kimi_rename(const char *name, char *out, size_t cap)
{
    char a[700], b[700];
    if (strlen(name) >= sizeof a)
        return -1;
    snprintf(a, sizeof a, "%s", name);
    int changed = 0;
    for (size_t r = 0; r < sizeof kimi_renames / sizeof kimi_renames[0]; r++) {
        const char *p = strstr(a, kimi_renames[r].from);
        if (!p)
            continue;
        int k = snprintf(b, sizeof b, "%.*s%s%s", (int)(p - a), a, kimi_renames[r].to, p + strlen(kimi_renames[r].from));
        if (k < 0 || (size_t)k >= sizeof b)
            return -1;
        memcpy(a, b, (size_t)k + 1);
        changed = 1;
    }
    const char *p = strstr(a, ".mlp.experts.");
    if (p) {
        const char *q = p + strlen(".mlp.experts.");
        while (*q >= '0' && *q <= '9')
            q++;
        static const char *const w[3][2] = {{".w1.", ".gate_proj."}, {".w3.", ".up_proj."}, {".w2.", ".down_proj."}};
        for (int i = 0; i < 3; i++)
            if (q > p + strlen(".mlp.experts.") && !strncmp(q, w[i][0], 4)) {
                int k = snprintf(b, sizeof b, "%.*s%s%s", (int)(q - a), a, w[i][1], q + 4);
                if (k < 0 || (size_t)k >= sizeof b)
                    return -1;
                memcpy(a, b, (size_t)k + 1);
                changed = 1;
                break;
            }
    }
    if (strlen(a) >= cap)
        return -1;
    snprintf(out, cap, "%s", a);
    return changed;
}

static int cmp_name_ptr(const void *x, const void *y)
{
    return strcmp(((const lwq_ckpt_tensor *)x)->name, ((const lwq_ckpt_tensor *)y)->name);
}

int lwq_ckpt_rename_kimi(lwq_ckpt *c, lwq_error *e)
{
    const lwq_model_config *g = &c->cfg;
    if (!g->family || !g->family->kimi_names || !c->ntensors)
        return 0;
    char canon[700], to[700], full[760];
    int n = 0;
    for (int i = 0; i < c->ntensors; i++)
        if (lwq_names_canon(&g->names, c->tensors[i].name, canon, sizeof canon) &&
            lwq_tensor_layer_index(canon) >= 0 && kimi_rename(canon, to, sizeof to) != 0)
            n++;
    if (!n)
        return 0;
    char **names = realloc(c->owned_names, ((size_t)c->nowned + (size_t)n + 1) * sizeof *names);
    if (!names)
        return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", c->dir);
    c->owned_names = names;
    for (int i = 0; i < c->ntensors; i++) {
        lwq_ckpt_tensor *t = &c->tensors[i];
        if (!lwq_names_canon(&g->names, t->name, canon, sizeof canon) || lwq_tensor_layer_index(canon) < 0)
            continue;
        int r = kimi_rename(canon, to, sizeof to);
        if (r < 0)
            return lwq_errf(e, LWQ_EFORMAT, "%s: tensor name %.200s is too long", c->dir, t->name);
        if (!r)
            continue;
        lwq_names_full(&g->names, to, full, sizeof full);
        char *own = strdup(full);
        if (!own)
            return lwq_errf(e, LWQ_ENOMEM, "%s: out of memory", c->dir);
        c->owned_names[c->nowned++] = own;
        t->name = own;
    }
    /* a checkpoint holding both spellings of one tensor is ambiguous */
    qsort(c->tensors, (size_t)c->ntensors, sizeof *c->tensors, cmp_name_ptr);
    for (int i = 1; i < c->ntensors; i++)
        if (!strcmp(c->tensors[i - 1].name, c->tensors[i].name))
            return lwq_errf(e, LWQ_EFORMAT, "%s: two tensors of this kimi_linear checkpoint are %s as transformers "
                            "names them (Kimi's own and transformers' spelling of one tensor)", c->dir,
                            c->tensors[i].name);
    return 0;
}
