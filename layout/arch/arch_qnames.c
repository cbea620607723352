/* layout/arch/arch_qnames.c — in-memory quantizer names of modules (see arch_qnames.h). */
#include "layout/arch/arch_qnames.h"

#include <stdio.h>
#include <string.h>

static int is_routed(const lwq_arch_linear *m)
{
    return m->expert >= 0 && (m->role == LWQ_ROLE_EXPERT_GATE || m->role == LWQ_ROLE_EXPERT_UP ||
                              m->role == LWQ_ROLE_EXPERT_DOWN);
}

void lwq_arch_memory_name(const lwq_family *f, const char *module, char *out, size_t cap)
{
    if (cap == 0)
        return;
    snprintf(out, cap, "%s", module);
    if (!f)
        return;
    if (f->experts == LWQ_EXPERTS_MIXTRAL) { /* every ".block_sparse_moe." is ".mlp." */
        static const char from[] = ".block_sparse_moe.", to[] = ".mlp.";
        char *x = strstr(out, from);
        if (x) {
            char tail[LWQ_QNAME_MAX];
            snprintf(tail, sizeof tail, "%s", x + sizeof from - 1);
            snprintf(x, cap - (size_t)(x - out), "%s%s", to, tail);
        }
    }
    if (f->root && !strcmp(f->root, "backbone.") && !strncmp(out, "backbone.", 9)) {
        char tail[LWQ_QNAME_MAX];
        snprintf(tail, sizeof tail, "%s", out + 9);
        /* the embedding: NemotronHModel.embeddings, whichever spelling the checkpoint has */
        if (!strcmp(tail, "embedding"))
            snprintf(tail, sizeof tail, "embeddings");
        snprintf(out, cap, "model.%s", tail);
    }
}

void lwq_arch_qnames_module(const lwq_family *f, const char *module, lwq_qnames *q)
{
    lwq_qnames_plain(q, module);
    lwq_arch_memory_name(f, module, q->base, sizeof q->base);
    snprintf(q->weight[0], sizeof q->weight[0], "%s.weight_quantizer", q->base);
    snprintf(q->input, sizeof q->input, "%s.input_quantizer", q->base);
    snprintf(q->output, sizeof q->output, "%s.output_quantizer", q->base);
}

int lwq_arch_fused_experts_module(const lwq_arch_layer *p, const lwq_arch_linear *m, char *out, size_t cap)
{
    out[0] = 0;
    if (!p->family || !p->family->fused_experts || !is_routed(m))
        return 0;
    const char *x = strstr(m->name, ".experts.");
    if (!x)
        return 0;
    char owner[LWQ_QNAME_MAX];
    if ((size_t)snprintf(owner, sizeof owner, "%.*s.experts", (int)(x - m->name), m->name) >= sizeof owner)
        return 0;
    lwq_arch_memory_name(p->family, owner, out, cap);
    return out[0] != 0;
}

void lwq_arch_qnames(const lwq_arch_layer *p, const lwq_arch_linear *m, lwq_qnames *q)
{
    lwq_arch_qnames_module(p->family, m->name, q);
    char owner[LWQ_QNAME_MAX];
    if (!lwq_arch_fused_experts_module(p, m, owner, sizeof owner))
        return;
    /* gated experts hold gate and up as one gate_up_proj; nemotron_h's ReLU^2 experts only up_proj */
    const char *proj = m->role == LWQ_ROLE_EXPERT_DOWN ? "down_proj"
                       : p->family->experts == LWQ_EXPERTS_NEMOTRON ? "up_proj" : "gate_up_proj";
    q->nweight = 2;
    snprintf(q->base, sizeof q->base, "%s", owner);
    snprintf(q->weight[0], sizeof q->weight[0], "%s.%s_weight_quantizers.%d", owner, proj, m->expert);
    snprintf(q->weight[1], sizeof q->weight[1], "%s.%s_weight_quantizer", owner, proj);
    snprintf(q->input, sizeof q->input, "%s.%s_input_quantizer", owner, proj);
    q->output[0] = 0;
}
