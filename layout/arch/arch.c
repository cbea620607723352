/* layout/arch/arch.c — per-architecture layer plans (contract in arch.h; the checkpoint check is arch_check.c).
 * Names and shapes follow transformers' modeling_<type>.py for each model_type (and
 * spec/ARCHITECTURES.md).  Every choice comes from the family row (layout/arch/family.h): a new family
 * is a row there, plus a plan_* function here only for a block no row has yet. */
#include "layout/arch/arch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct builder {
    lwq_arch_layer *l;
    int tcap, lcap;
    const lwq_model_config *c;
    char pre[LWQ_ARCH_NAME_MAX]; /* canonical "model.layers.7." (cfg.names maps each name) */
    int oom;
} builder;

void lwq_arch_layer_free(lwq_arch_layer *l)
{
    if (!l)
        return;
    free(l->tensors);
    free(l->linears);
    memset(l, 0, sizeof *l);
}

/* Append a tensor named pre + printf(fmt); shape given as ndim values. */
static lwq_arch_tensor *tensor(builder *b, lwq_tensor_kind kind, int optional, int ndim, int64_t d0,
                               int64_t d1, int64_t d2, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));
static lwq_arch_tensor *tensor(builder *b, lwq_tensor_kind kind, int optional, int ndim, int64_t d0,
                               int64_t d1, int64_t d2, const char *fmt, ...)
{
    lwq_arch_layer *l = b->l;
    if (b->oom)
        return NULL;
    if (l->ntensors == b->tcap) {
        int cap = b->tcap ? 2 * b->tcap : 32;
        lwq_arch_tensor *t = realloc(l->tensors, (size_t)cap * sizeof *t);
        if (!t) {
            b->oom = 1;
            return NULL;
        }
        l->tensors = t;
        b->tcap = cap;
    }
    lwq_arch_tensor *t = &l->tensors[l->ntensors++];
    memset(t, 0, sizeof *t);
    char canon[LWQ_ARCH_NAME_MAX];
    size_t n = (size_t)snprintf(canon, sizeof canon, "%s", b->pre);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(canon + n, sizeof canon - n, fmt, ap);
    va_end(ap);
    lwq_names_full(&b->c->names, canon, t->name, sizeof t->name);
    t->kind = kind;
    t->optional = optional;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->shape[2] = d2;
    t->linear = -1;
    return t;
}

/* Append a linear `module` (relative to pre) with its weight and optional bias tensors. */
static void linear(builder *b, const char *module, lwq_linear_role role, int expert, int64_t out,
                   int64_t in, int group, int is_router, int bias)
{
    lwq_arch_layer *l = b->l;
    if (b->oom)
        return;
    if (l->nlinears == b->lcap) {
        int cap = b->lcap ? 2 * b->lcap : 16;
        lwq_arch_linear *v = realloc(l->linears, (size_t)cap * sizeof *v);
        if (!v) {
            b->oom = 1;
            return;
        }
        l->linears = v;
        b->lcap = cap;
    }
    int li = l->nlinears++;
    lwq_arch_linear *m = &l->linears[li];
    memset(m, 0, sizeof *m);
    char canon[LWQ_ARCH_NAME_MAX + 96];
    snprintf(canon, sizeof canon, "%s%s", b->pre, module);
    lwq_names_full(&b->c->names, canon, m->name, sizeof m->name);
    m->role = role;
    m->expert = expert;
    m->out_features = out;
    m->in_features = in;
    m->group = group;
    m->is_router = is_router;
    m->has_bias = bias;
    lwq_arch_tensor *t = tensor(b, LWQ_TK_WEIGHT, 0, 2, out, in, 0, "%s.weight", module);
    if (t)
        t->linear = li;
    if (bias && (t = tensor(b, LWQ_TK_BIAS, 0, 1, out, 0, 0, "%s.bias", module)))
        t->linear = li;
}

static int new_group(builder *b) { return b->l->ngroups++; }

/* q/k/v/o attention of llama, qwen2, qwen3(_moe), mixtral and qwen3_next full-attention layers. */
static void plan_gqa_attention(builder *b)
{
    const lwq_model_config *c = b->c;
    int64_t h = c->hidden_size, hd = c->head_dim;
    int64_t qo = (int64_t)c->num_attention_heads * hd, kvo = (int64_t)c->num_key_value_heads * hd;
    const lwq_family *f = c->family;
    int qkv_bias = c->attention_bias, o_bias = c->attention_bias;
    if (f->bias == LWQ_BIAS_QKV)
        o_bias = 0; /* Qwen2: biases on q/k/v only */
    if (f->bias == LWQ_BIAS_NEVER)
        qkv_bias = o_bias = 0; /* no bias option in these attention classes */
    if (f->bias == LWQ_BIAS_KEY_QKV)
        o_bias = 0; /* glm4_moe: attention_bias sets q/k/v only */
    int64_t q_out = f->attn == LWQ_MIXER_GATED_GQA ? 2 * qo : qo; /* q and its output gate */
    const char *at = f->single ? "mixer" : "self_attn"; /* nemotron_h: the layer's one block */
    char m[64];
    int g = new_group(b);
    snprintf(m, sizeof m, "%s.q_proj", at);
    linear(b, m, LWQ_ROLE_Q, -1, q_out, h, g, 0, qkv_bias);
    snprintf(m, sizeof m, "%s.k_proj", at);
    linear(b, m, LWQ_ROLE_K, -1, kvo, h, g, 0, qkv_bias);
    snprintf(m, sizeof m, "%s.v_proj", at);
    linear(b, m, LWQ_ROLE_V, -1, kvo, h, g, 0, qkv_bias);
    snprintf(m, sizeof m, "%s.o_proj", at);
    linear(b, m, LWQ_ROLE_O, -1, h, qo, -1, 0, o_bias);
    if (lwq_config_qk_norm(c)) { /* per head, or over the whole projection (minimax_m2) */
        tensor(b, LWQ_TK_NORM, 0, 1, f->qk_norm_full ? qo : hd, 0, 0, "self_attn.q_norm.weight");
        tensor(b, LWQ_TK_NORM, 0, 1, f->qk_norm_full ? kvo : hd, 0, 0, "self_attn.k_norm.weight");
    }
    if (f->nope)
        return;
    /* Older exports saved RoPE's inverse frequencies as a buffer. */
    int64_t rot = lwq_config_rotary_dim(c);
    tensor(b, LWQ_TK_BUFFER, 1, 1, rot / 2, 0, 0, "self_attn.rotary_emb.inv_freq");
}

static void plan_mla_attention(builder *b)
{
    const lwq_model_config *c = b->c;
    int64_t h = c->hidden_size, H = c->num_attention_heads;
    int64_t qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    if (c->q_lora_rank > 0) {
        /* vLLM fuses q_a_proj and kv_a_proj_with_mqa into one GEMM (fused_qkv_a_proj). */
        int g = new_group(b);
        /* the DSA indexer's linears: Model Optimizer 0.47 quantizes them as any linear, and its
         * export fuses the linears that read one input: wk and weights_proj with q_a_proj and
         * kv_a_proj_with_mqa (the layer's input), wq_b with q_b_proj (q_a_layernorm's output) */
        const int idx = lwq_config_layer_has_indexer(c, b->l->layer);
        int gb = idx ? new_group(b) : -1;
        linear(b, "self_attn.q_a_proj", LWQ_ROLE_Q_A, -1, c->q_lora_rank, h, g, 0, 0);
        tensor(b, LWQ_TK_NORM, 0, 1, c->q_lora_rank, 0, 0, "self_attn.q_a_layernorm.weight");
        linear(b, "self_attn.q_b_proj", LWQ_ROLE_Q_B, -1, H * qk, c->q_lora_rank, gb, 0, 0);
        linear(b, "self_attn.kv_a_proj_with_mqa", LWQ_ROLE_KV_A, -1,
               c->kv_lora_rank + c->qk_rope_head_dim, h, g, 0, 0);
        if (idx) {
            linear(b, "self_attn.indexer.wq_b", LWQ_ROLE_IDX_Q_B, -1, (int64_t)c->index_n_heads * c->index_head_dim,
                   c->q_lora_rank, gb, 0, 0);
            linear(b, "self_attn.indexer.wk", LWQ_ROLE_IDX_K, -1, c->index_head_dim, h, g, 0, 0);
            linear(b, "self_attn.indexer.weights_proj", LWQ_ROLE_IDX_WEIGHTS, -1, c->index_n_heads, h, g, 0, 0);
            tensor(b, LWQ_TK_NORM, 0, 1, c->index_head_dim, 0, 0, "self_attn.indexer.k_norm.weight");
            tensor(b, LWQ_TK_PARAM, 0, 1, c->index_head_dim, 0, 0, "self_attn.indexer.k_norm.bias");
        }
    } else {
        /* q_proj and kv_a_proj_with_mqa read the layer input: Model Optimizer 0.47's export fuses
         * them (one input and one weight global scale), by shared input, for any model: run on
         * kimi_linear's goldens and on a q_lora-less deepseek_v2 (docs/FAMILIES.md) */
        int g = new_group(b);
        linear(b, "self_attn.q_proj", LWQ_ROLE_Q, -1, H * qk, h, g, 0, 0);
        linear(b, "self_attn.kv_a_proj_with_mqa", LWQ_ROLE_KV_A, -1,
               c->kv_lora_rank + c->qk_rope_head_dim, h, g, 0, 0);
    }
    tensor(b, LWQ_TK_NORM, 0, 1, c->kv_lora_rank, 0, 0, "self_attn.kv_a_layernorm.weight");
    linear(b, "self_attn.kv_b_proj", LWQ_ROLE_KV_B, -1, H * (c->qk_nope_head_dim + c->v_head_dim),
           c->kv_lora_rank, -1, 0, 0);
    linear(b, "self_attn.o_proj", LWQ_ROLE_O, -1, h, H * c->v_head_dim, -1, 0, 0);
    if (!c->family->mla_nope)
        tensor(b, LWQ_TK_BUFFER, 1, 1, c->qk_rope_head_dim / 2, 0, 0, "self_attn.rotary_emb.inv_freq");
}

/* Kimi delta attention (kimi_linear), under transformers' names (lwq_ckpt_rename_kimi).  Every
 * projection of the layer input -- q/k/v, b_proj and the low-rank halves forget_gate.f_a_proj and
 * g_a_proj -- is one fused group, as Model Optimizer 0.47's export gives them one input and one
 * weight global scale; f_b_proj, g_b_proj and o_proj each read their own input.  Roles: the
 * linear-attention ones (q/k/v: LIN_QKVZ, the gate halves and b_proj: LIN_BA, o_proj: LIN_OUT).
 * The three depthwise convs [qkv, 1, kernel] are parameters: Model Optimizer's presets leave
 * them unquantized (its conv1d is never called as a module, so nothing is calibrated on it). */
static void plan_kda(builder *b)
{
    const lwq_model_config *c = b->c;
    int64_t h = c->hidden_size, hd = c->linear_key_head_dim, H = c->linear_num_key_heads, qkv = H * hd;
    int g = new_group(b);
    linear(b, "self_attn.q_proj", LWQ_ROLE_LIN_QKVZ, -1, qkv, h, g, 0, 0);
    linear(b, "self_attn.k_proj", LWQ_ROLE_LIN_QKVZ, -1, qkv, h, g, 0, 0);
    linear(b, "self_attn.v_proj", LWQ_ROLE_LIN_QKVZ, -1, qkv, h, g, 0, 0);
    static const char *const conv[3] = {"self_attn.q_conv1d.weight", "self_attn.k_conv1d.weight",
                                        "self_attn.v_conv1d.weight"};
    for (int i = 0; i < 3; i++)
        tensor(b, LWQ_TK_PARAM, 0, 3, qkv, 1, c->linear_conv_kernel_dim, "%s", conv[i]);
    linear(b, "self_attn.forget_gate.f_a_proj", LWQ_ROLE_LIN_BA, -1, hd, h, g, 0, 0);
    linear(b, "self_attn.forget_gate.f_b_proj", LWQ_ROLE_LIN_BA, -1, qkv, hd, -1, 0, 0);
    tensor(b, LWQ_TK_PARAM, 0, 1, qkv, 0, 0, "self_attn.forget_gate.dt_bias");
    lwq_arch_tensor *a = tensor(b, LWQ_TK_PARAM, 0, 4, 1, 1, H, "self_attn.forget_gate.A_log");
    if (a)
        a->shape[3] = 1;
    linear(b, "self_attn.b_proj", LWQ_ROLE_LIN_BA, -1, H, h, g, 0, 0);
    linear(b, "self_attn.g_a_proj", LWQ_ROLE_LIN_BA, -1, hd, h, g, 0, 0);
    linear(b, "self_attn.g_b_proj", LWQ_ROLE_LIN_BA, -1, qkv, hd, -1, 0, 0);
    tensor(b, LWQ_TK_NORM, 0, 1, hd, 0, 0, "self_attn.o_norm.weight");
    linear(b, "self_attn.o_proj", LWQ_ROLE_LIN_OUT, -1, h, qkv, -1, 0, 0);
}

static void plan_linear_attention(builder *b)
{
    const lwq_model_config *c = b->c;
    int64_t h = c->hidden_size;
    int64_t kd = (int64_t)c->linear_num_key_heads * c->linear_key_head_dim;
    int64_t vd = (int64_t)c->linear_num_value_heads * c->linear_value_head_dim;
    int64_t nv = c->linear_num_value_heads;
    if (b->l->mixer == LWQ_MIXER_GDN_SPLIT) {
        /* Qwen3.5's split projections: vLLM merges in_proj_qkv + in_proj_z and in_proj_b +
         * in_proj_a into one GEMM each, and Model Optimizer 0.47 exports qkv and z with one
         * input and one weight global scale: two fused groups */
        int g = new_group(b);
        linear(b, "linear_attn.in_proj_qkv", LWQ_ROLE_LIN_QKVZ, -1, 2 * kd + vd, h, g, 0, 0);
        linear(b, "linear_attn.in_proj_z", LWQ_ROLE_LIN_QKVZ, -1, vd, h, g, 0, 0);
        g = new_group(b);
        linear(b, "linear_attn.in_proj_b", LWQ_ROLE_LIN_BA, -1, nv, h, g, 0, 0);
        linear(b, "linear_attn.in_proj_a", LWQ_ROLE_LIN_BA, -1, nv, h, g, 0, 0);
    } else {
        /* in_proj_qkvz and in_proj_ba read the same input but are separate GEMMs in vLLM, so
         * they are not a fused group. */
        linear(b, "linear_attn.in_proj_qkvz", LWQ_ROLE_LIN_QKVZ, -1, 2 * kd + 2 * vd, h, -1, 0, 0);
        linear(b, "linear_attn.in_proj_ba", LWQ_ROLE_LIN_BA, -1, 2 * nv, h, -1, 0, 0);
    }
    /* The depthwise causal conv reads q/k/v (2 kd + vd channels) and is quantizable like a linear
     * (the production recipe runs it FP8 W8A8): its weight keeps the source's 3-D shape. */
    linear(b, "linear_attn.conv1d", LWQ_ROLE_LIN_CONV, -1, 2 * kd + vd, c->linear_conv_kernel_dim,
           -1, 0, 0);
    if (!b->oom) {
        lwq_arch_tensor *w = &b->l->tensors[b->l->ntensors - 1];
        w->ndim = 3;
        w->shape[1] = 1;
        w->shape[2] = c->linear_conv_kernel_dim;
    }
    tensor(b, LWQ_TK_PARAM, 0, 1, nv, 0, 0, "linear_attn.dt_bias");
    tensor(b, LWQ_TK_PARAM, 0, 1, nv, 0, 0, "linear_attn.A_log");
    tensor(b, LWQ_TK_NORM, 0, 1, c->linear_value_head_dim, 0, 0, "linear_attn.norm.weight");
    linear(b, "linear_attn.out_proj", LWQ_ROLE_LIN_OUT, -1, h, vd, -1, 0, 0);
}

static void plan_dense_mlp(builder *b, int64_t inter)
{
    int64_t h = b->c->hidden_size;
    int bias = b->c->family->mlp_bias && b->c->mlp_bias;
    int g = new_group(b);
    linear(b, "mlp.gate_proj", LWQ_ROLE_GATE, -1, inter, h, g, 0, bias);
    linear(b, "mlp.up_proj", LWQ_ROLE_UP, -1, inter, h, g, 0, bias);
    linear(b, "mlp.down_proj", LWQ_ROLE_DOWN, -1, h, inter, -1, 0, bias);
}

static void plan_moe(builder *b)
{
    const lwq_model_config *c = b->c;
    int64_t h = c->hidden_size, mi = c->moe_intermediate_size;
    int E = c->num_experts;
    char m[96];
    const lwq_family *f = c->family;
    if (f->experts == LWQ_EXPERTS_MIXTRAL) {
        linear(b, "block_sparse_moe.gate", LWQ_ROLE_ROUTER, -1, E, h, -1, 1, 0);
        if (f->router == LWQ_ROUTER_SIGMOID_BIAS)
            tensor(b, LWQ_TK_PARAM, 0, 1, E, 0, 0, "block_sparse_moe.e_score_correction_bias");
        for (int e = 0; e < E; e++) {
            int g = new_group(b);
            snprintf(m, sizeof m, "block_sparse_moe.experts.%d.w1", e);
            linear(b, m, LWQ_ROLE_EXPERT_GATE, e, mi, h, g, 0, 0);
            snprintf(m, sizeof m, "block_sparse_moe.experts.%d.w3", e);
            linear(b, m, LWQ_ROLE_EXPERT_UP, e, mi, h, g, 0, 0);
            snprintf(m, sizeof m, "block_sparse_moe.experts.%d.w2", e);
            linear(b, m, LWQ_ROLE_EXPERT_DOWN, e, h, mi, -1, 0, 0);
        }
        return;
    }
    linear(b, "mlp.gate", LWQ_ROLE_ROUTER, -1, E, h, -1, 1, 0);
    if (f->router == LWQ_ROUTER_DEEPSEEK_V3)
        tensor(b, LWQ_TK_PARAM, 0, 1, E, 0, 0, "mlp.gate.e_score_correction_bias");
    for (int e = 0; e < E; e++) {
        int g = new_group(b);
        snprintf(m, sizeof m, "mlp.experts.%d.gate_proj", e);
        linear(b, m, LWQ_ROLE_EXPERT_GATE, e, mi, h, g, 0, 0);
        snprintf(m, sizeof m, "mlp.experts.%d.up_proj", e);
        linear(b, m, LWQ_ROLE_EXPERT_UP, e, mi, h, g, 0, 0);
        snprintf(m, sizeof m, "mlp.experts.%d.down_proj", e);
        linear(b, m, LWQ_ROLE_EXPERT_DOWN, e, h, mi, -1, 0, 0);
    }
    if (f->shared == LWQ_SHARED_DEEPSEEK && c->n_shared_experts > 0) {
        int64_t si = mi * c->n_shared_experts;
        int g = new_group(b);
        linear(b, "mlp.shared_experts.gate_proj", LWQ_ROLE_SHARED_GATE, -1, si, h, g, 0, 0);
        linear(b, "mlp.shared_experts.up_proj", LWQ_ROLE_SHARED_UP, -1, si, h, g, 0, 0);
        linear(b, "mlp.shared_experts.down_proj", LWQ_ROLE_SHARED_DOWN, -1, h, si, -1, 0, 0);
    }
    if (f->shared == LWQ_SHARED_GATED && c->shared_expert_intermediate_size > 0) {
        int64_t si = c->shared_expert_intermediate_size;
        int g = new_group(b);
        linear(b, "mlp.shared_expert.gate_proj", LWQ_ROLE_SHARED_GATE, -1, si, h, g, 0, 0);
        linear(b, "mlp.shared_expert.up_proj", LWQ_ROLE_SHARED_UP, -1, si, h, g, 0, 0);
        linear(b, "mlp.shared_expert.down_proj", LWQ_ROLE_SHARED_DOWN, -1, h, si, -1, 0, 0);
        linear(b, "mlp.shared_expert_gate", LWQ_ROLE_SHARED_EXPERT_GATE, -1, 1, h, -1, 1, 0);
    }
}

/* nemotron_h's Mamba2 mixer (NemotronHMamba2Mixer): in_proj -> [z (I), xBC (conv_dim), dt (heads)],
 * the depthwise conv1d over xBC, A_log / D / dt_bias per head, the grouped gated norm, out_proj.
 * Model Optimizer's default_disabled_quantizers keep the conv1d unquantized (*mixer.conv1d*). */
static void plan_mamba2(builder *b)
{
    const lwq_model_config *c = b->c;
    const int64_t h = c->hidden_size, nh = c->mamba_num_heads, I = nh * c->mamba_head_dim;
    const int64_t conv = I + 2 * (int64_t)c->mamba_n_groups * c->ssm_state_size;
    linear(b, "mixer.in_proj", LWQ_ROLE_LIN_QKVZ, -1, I + conv + nh, h, -1, 0, 0);
    linear(b, "mixer.conv1d", LWQ_ROLE_LIN_CONV, -1, conv, c->mamba_conv_kernel, -1, 0, 0);
    if (!b->oom) {
        lwq_arch_tensor *w = &b->l->tensors[b->l->ntensors - 1];
        w->ndim = 3;
        w->shape[1] = 1;
        w->shape[2] = c->mamba_conv_kernel;
    }
    if (c->mamba_conv_bias)
        tensor(b, LWQ_TK_PARAM, 0, 1, conv, 0, 0, "mixer.conv1d.bias");
    tensor(b, LWQ_TK_PARAM, 0, 1, nh, 0, 0, "mixer.dt_bias");
    tensor(b, LWQ_TK_PARAM, 0, 1, nh, 0, 0, "mixer.A_log");
    tensor(b, LWQ_TK_PARAM, 0, 1, nh, 0, 0, "mixer.D");
    tensor(b, LWQ_TK_NORM, 0, 1, I, 0, 0, "mixer.norm.weight");
    linear(b, "mixer.out_proj", LWQ_ROLE_LIN_OUT, -1, h, I, -1, 0, 0);
}

/* nemotron_h's MoE (NemotronHMoE): the DeepSeek-V3 router mixer.gate (+ its correction bias), the
 * non-gated experts mixer.experts.E.{up,down}_proj at the latent width (hidden_size without
 * moe_latent_size) between mixer.fc1_latent_proj / fc2_latent_proj, and the shared expert
 * mixer.shared_experts.{up,down}_proj.  No fused groups: Model Optimizer exports each with its own
 * global scale. */
static void plan_nemotron_moe(builder *b)
{
    const lwq_model_config *c = b->c;
    const int64_t h = c->hidden_size, mi = c->moe_intermediate_size,
                  L = c->moe_latent_size > 0 ? c->moe_latent_size : h, si = c->shared_expert_intermediate_size;
    const int E = c->num_experts;
    char m[96];
    linear(b, "mixer.gate", LWQ_ROLE_ROUTER, -1, E, h, -1, 1, 0);
    tensor(b, LWQ_TK_PARAM, 0, 1, E, 0, 0, "mixer.gate.e_score_correction_bias");
    if (c->moe_latent_size > 0)
        linear(b, "mixer.fc1_latent_proj", LWQ_ROLE_LATENT_IN, -1, L, h, -1, 0, 0);
    for (int e = 0; e < E; e++) {
        snprintf(m, sizeof m, "mixer.experts.%d.up_proj", e);
        linear(b, m, LWQ_ROLE_EXPERT_UP, e, mi, L, -1, 0, 0);
        snprintf(m, sizeof m, "mixer.experts.%d.down_proj", e);
        linear(b, m, LWQ_ROLE_EXPERT_DOWN, e, L, mi, -1, 0, 0);
    }
    if (c->moe_latent_size > 0)
        linear(b, "mixer.fc2_latent_proj", LWQ_ROLE_LATENT_OUT, -1, h, L, -1, 0, 0);
    linear(b, "mixer.shared_experts.up_proj", LWQ_ROLE_SHARED_UP, -1, si, h, -1, 0, 0);
    linear(b, "mixer.shared_experts.down_proj", LWQ_ROLE_SHARED_DOWN, -1, h, si, -1, 0, 0);
}

/* A nemotron_h layer: its norm and its one block (family->single). */
static int plan_single(builder *b, lwq_error *e)
{
    const lwq_model_config *c = b->c;
    lwq_arch_layer *out = b->l;
    tensor(b, LWQ_TK_NORM, 0, 1, c->hidden_size, 0, 0, "norm.weight");
    if (out->is_moe) {
        plan_nemotron_moe(b);
    } else if (out->mixer == LWQ_MIXER_MAMBA2) {
        plan_mamba2(b);
    } else if (out->mixer == LWQ_MIXER_GQA) {
        plan_gqa_attention(b);
    } else if (out->mixer == LWQ_MIXER_NONE) { /* the ReLU^2 MLP: up, down */
        linear(b, "mixer.up_proj", LWQ_ROLE_UP, -1, c->intermediate_size, c->hidden_size, -1, 0, 0);
        linear(b, "mixer.down_proj", LWQ_ROLE_DOWN, -1, c->hidden_size, c->intermediate_size, -1, 0, 0);
    } else {
        return lwq_errf(e, LWQ_EUNSUPPORTED, "model_type '%s': layer %d has no block lwq plans", c->model_type,
                        out->layer);
    }
    return 0;
}

int lwq_arch_layer_plan(const lwq_model_config *c, int layer, lwq_arch_layer *out, lwq_error *e)
{
    memset(out, 0, sizeof *out);
    if (layer < 0 || layer >= c->num_hidden_layers)
        return lwq_errf(e, LWQ_EINVAL, "layer %d is outside 0..%d", layer, c->num_hidden_layers - 1);
    if (!c->family)
        return lwq_errf(e, LWQ_EUNSUPPORTED, "no layer plan for model_type '%s'", c->model_type);
    builder b = {.l = out, .c = c};
    snprintf(b.pre, sizeof b.pre, "model.layers.%d.", layer);
    out->layer = layer;
    out->family = c->family;
    out->is_moe = lwq_config_layer_is_moe(c, layer);
    out->mixer = lwq_config_layer_mixer(c, layer);
    out->is_mla = out->mixer == LWQ_MIXER_MLA;
    out->is_linear_attn = !lwq_mixer_is_attention(out->mixer);
    if (c->family->single) {
        /* a nemotron_h MLP / MoE layer has no mixer and is no linear attention */
        out->is_linear_attn = lwq_mixer_is_recurrent(out->mixer);
        int rc = plan_single(&b, e);
        if (rc == 0 && b.oom)
            rc = lwq_errf(e, LWQ_ENOMEM, "layer %d plan: out of memory", layer);
        if (rc < 0)
            lwq_arch_layer_free(out);
        return rc;
    }

    tensor(&b, LWQ_TK_NORM, 0, 1, c->hidden_size, 0, 0, "input_layernorm.weight");
    switch (out->mixer) {
    case LWQ_MIXER_MLA: plan_mla_attention(&b); break;
    case LWQ_MIXER_GDN:
    case LWQ_MIXER_GDN_SPLIT: plan_linear_attention(&b); break;
    case LWQ_MIXER_KDA: plan_kda(&b); break;
    case LWQ_MIXER_GQA:
    case LWQ_MIXER_GATED_GQA: plan_gqa_attention(&b); break;
    default:
        lwq_arch_layer_free(out);
        return lwq_errf(e, LWQ_EUNSUPPORTED, "model_type '%s': layer %d has no mixer lwq plans",
                        c->model_type, layer);
    }
    tensor(&b, LWQ_TK_NORM, 0, 1, c->hidden_size, 0, 0, "post_attention_layernorm.weight");
    if (out->is_moe)
        plan_moe(&b);
    else
        plan_dense_mlp(&b, c->intermediate_size);
    if (b.oom) {
        lwq_arch_layer_free(out);
        return lwq_errf(e, LWQ_ENOMEM, "layer %d plan: out of memory", layer);
    }
    return 0;
}

int lwq_arch_tail_plan(const lwq_model_config *c, lwq_arch_layer *out, lwq_error *e)
{
    memset(out, 0, sizeof *out);
    builder b = {.l = out, .c = c};
    out->layer = -1;
    b.pre[0] = 0;
    tensor(&b, LWQ_TK_EMBED, 0, 2, c->vocab_size, c->hidden_size, 0, "model.embed_tokens.weight");
    tensor(&b, LWQ_TK_NORM, 0, 1, c->hidden_size, 0, 0, "model.norm.weight");
    /* Tied models usually omit lm_head; some save the shared matrix under both names. */
    tensor(&b, LWQ_TK_LM_HEAD, c->tie_word_embeddings, 2, c->vocab_size, c->hidden_size, 0,
           "lm_head.weight");
    if (c->family && c->family->mtp) {
        /* Qwen's Multi-Token-Prediction block, optional (not part of the forward; it passes
         * through unquantized): fusion projection, its norms and one full-attention MoE layer. */
        int first = out->ntensors;
        tensor(&b, LWQ_TK_PARAM, 1, 2, c->hidden_size, 2 * c->hidden_size, 0, "mtp.fc.weight");
        tensor(&b, LWQ_TK_NORM, 1, 1, c->hidden_size, 0, 0, "mtp.pre_fc_norm_embedding.weight");
        tensor(&b, LWQ_TK_NORM, 1, 1, c->hidden_size, 0, 0, "mtp.pre_fc_norm_hidden.weight");
        tensor(&b, LWQ_TK_NORM, 1, 1, c->hidden_size, 0, 0, "mtp.norm.weight");
        snprintf(b.pre, sizeof b.pre, "mtp.layers.0.");
        tensor(&b, LWQ_TK_NORM, 1, 1, c->hidden_size, 0, 0, "input_layernorm.weight");
        plan_gqa_attention(&b);
        tensor(&b, LWQ_TK_NORM, 1, 1, c->hidden_size, 0, 0, "post_attention_layernorm.weight");
        if (c->num_experts > 0)
            plan_moe(&b);
        else
            plan_dense_mlp(&b, c->intermediate_size);
        /* listed for the checkpoint check only: no linear of the tail is quantized */
        for (int i = first; !b.oom && i < out->ntensors; i++) {
            out->tensors[i].optional = 1;
            out->tensors[i].linear = -1;
            if (out->tensors[i].kind == LWQ_TK_WEIGHT || out->tensors[i].kind == LWQ_TK_BIAS)
                out->tensors[i].kind = LWQ_TK_PARAM;
        }
        free(out->linears);
        out->linears = NULL;
        out->nlinears = 0;
        out->ngroups = 0;
    }
    if (b.oom) {
        lwq_arch_layer_free(out);
        return lwq_errf(e, LWQ_ENOMEM, "tail plan: out of memory");
    }
    return 0;
}

const lwq_arch_linear *lwq_arch_find_linear(const lwq_arch_layer *l, const char *module)
{
    for (int i = 0; i < l->nlinears; i++)
        if (!strcmp(l->linears[i].name, module))
            return &l->linears[i];
    return NULL;
}

int lwq_arch_is_mla_projection(const lwq_arch_layer *l, const lwq_arch_linear *m)
{
    if (!l->is_mla)
        return 0;
    switch (m->role) {
    case LWQ_ROLE_Q:
    case LWQ_ROLE_Q_A:
    case LWQ_ROLE_Q_B:
    case LWQ_ROLE_KV_A:
    case LWQ_ROLE_KV_B:
    case LWQ_ROLE_IDX_Q_B: /* grouped with q_b_proj / q_a_proj: kept with them under lwq's nvfp4 */
    case LWQ_ROLE_IDX_K:
    case LWQ_ROLE_IDX_WEIGHTS: return 1;
    default: return 0;
    }
}

const lwq_arch_tensor *lwq_arch_find_tensor(const lwq_arch_layer *l, const char *name)
{
    for (int i = 0; i < l->ntensors; i++)
        if (!strcmp(l->tensors[i].name, name))
            return &l->tensors[i];
    return NULL;
}
