/* layout/arch/arch.h — the architecture plan: what a decoder layer of a given model_type holds.
 *
 * For decoder layer i of a parsed config, lwq_arch_layer_plan lists every tensor the layer is
 * expected to hold (full name, shape, kind, whether it may be absent) and every linear layer
 * the quantizer may touch: its module name (e.g. "model.layers.3.self_attn.q_proj", the name
 * recipes match against and the exporter writes under), role, expert index, out/in features,
 * fused-group id (spec/FORMATS.md section 5: members of one group share input and weight global
 * scales) and whether it is a router-like gate that is never quantized.  lwq_arch_tail_plan
 * does the same for the tensors outside the decoder layers (embedding, final norm, lm_head —
 * optional when tie_word_embeddings is set).
 *
 * lwq_arch_check compares a whole checkpoint against the plans and reports, without dropping
 * anything: missing tensors, tensors of unexpected shape, tensors the architecture does not
 * know (they pass through unquantized), and extra decoder layers beyond num_hidden_layers
 * (DeepSeek MTP blocks).  Missing and mis-shaped tensors are what a run must refuse.  A tensor an
 * FP8-block or MXFP4 source stores packed (layout/checkpoint/srcfmt.h: F8 "X.weight" + "X.weight_scale_inv",
 * or "X_blocks" + "X_scales") counts as present with its logical shape, and the scale / block
 * halves are not reported as unexpected: the engine dequantizes them away after the read.
 *
 * A linear stored quantized, as lwq writes it and Model Optimizer exports it, is recognised by its
 * "X.weight_scale": NVFP4 is "X.weight" U8 [out, in/2] (two E2M1 codes a byte), "X.weight_scale"
 * F8_E4M3 [out, in/16], "X.weight_scale_2" and "X.input_scale" F32 scalars; FP8 is "X.weight"
 * F8_E4M3 of the plan's shape with "X.weight_scale" and "X.input_scale" F32 scalars.  Such a linear
 * is counted (quantized_nvfp4 / quantized_fp8), a scale it lacks is missing, a wrong packed shape
 * or scale is a bad shape, and its scales and a decoder layer's "*.k_scale" / "*.v_scale" scalars
 * are not unexpected.  A run refuses a quantized source by these counts; `lwq inspect` and
 * `lwq verify` describe and check a quantized output with them.
 *
 * Supported: llama/mistral, qwen2, qwen3, qwen3_moe, mixtral, deepseek_v2, deepseek_v3 (kimi_k2)
 * and the qwen3_next layer plan.  Plans are plain data owned by the caller (free with the
 * matching _free); no global state, so any thread may build plans. */
#ifndef LWQ_LAYOUT_ARCH_H
#define LWQ_LAYOUT_ARCH_H

#include <stdint.h>

#include "core/sys/error.h"
#include "layout/checkpoint/checkpoint.h"
#include "layout/config/config.h"

#define LWQ_ARCH_NAME_MAX 160

typedef enum lwq_linear_role {
    LWQ_ROLE_Q = 0,
    LWQ_ROLE_K,
    LWQ_ROLE_V,
    LWQ_ROLE_O,
    LWQ_ROLE_GATE,          /* dense MLP */
    LWQ_ROLE_UP,
    LWQ_ROLE_DOWN,
    LWQ_ROLE_EXPERT_GATE,   /* routed experts (mixtral w1) */
    LWQ_ROLE_EXPERT_UP,     /* mixtral w3 */
    LWQ_ROLE_EXPERT_DOWN,   /* mixtral w2 */
    LWQ_ROLE_SHARED_GATE,   /* shared experts (deepseek shared_experts, qwen3_next shared_expert) */
    LWQ_ROLE_SHARED_UP,
    LWQ_ROLE_SHARED_DOWN,
    LWQ_ROLE_ROUTER,        /* mlp.gate / block_sparse_moe.gate: never quantized */
    LWQ_ROLE_SHARED_EXPERT_GATE, /* qwen3_next mlp.shared_expert_gate [1, hidden]: never quantized */
    LWQ_ROLE_Q_A,           /* MLA: q_a_proj (q_lora_rank set) */
    LWQ_ROLE_Q_B,           /* MLA: q_b_proj */
    LWQ_ROLE_KV_A,          /* MLA: kv_a_proj_with_mqa */
    LWQ_ROLE_KV_B,          /* MLA: kv_b_proj */
    LWQ_ROLE_LIN_QKVZ,      /* qwen3_next Gated DeltaNet: linear_attn.in_proj_qkvz (nemotron_h Mamba2:
                               mixer.in_proj; its out_proj is LIN_OUT, its conv1d LIN_CONV) */
    LWQ_ROLE_LIN_BA,        /* linear_attn.in_proj_ba */
    LWQ_ROLE_LIN_OUT,       /* linear_attn.out_proj */
    LWQ_ROLE_LIN_CONV,      /* linear_attn.conv1d: depthwise [channels, 1, kernel] weight, treated
                               as a linear of out = channels, in = kernel (per-tensor FP8 only) */
    LWQ_ROLE_IDX_Q_B,       /* DSA indexer: self_attn.indexer.wq_b (on q_b_proj's input) */
    LWQ_ROLE_IDX_K,         /* self_attn.indexer.wk (on q_a_proj's input) */
    LWQ_ROLE_IDX_WEIGHTS,   /* self_attn.indexer.weights_proj (on q_a_proj's input) */
    LWQ_ROLE_LATENT_IN,     /* nemotron_h MoE: mixer.fc1_latent_proj (hidden -> latent, before the experts) */
    LWQ_ROLE_LATENT_OUT,    /* mixer.fc2_latent_proj (latent -> hidden, on the experts' weighted sum) */
    LWQ_ROLE_COUNT
} lwq_linear_role;

typedef struct lwq_arch_linear {
    char name[LWQ_ARCH_NAME_MAX]; /* module name, no ".weight" */
    lwq_linear_role role;
    int expert;                   /* routed expert index, or -1 */
    int64_t out_features, in_features; /* weight is [out, in] */
    int group;                    /* fused-group id within the layer, or -1 when alone */
    int is_router;                /* a gate that picks/scales experts: never quantized */
    int has_bias;
} lwq_arch_linear;

typedef enum lwq_tensor_kind {
    LWQ_TK_WEIGHT = 0, /* a linear's weight (lwq_arch_tensor.linear says which) */
    LWQ_TK_BIAS,       /* a linear's bias */
    LWQ_TK_NORM,       /* RMSNorm weight */
    LWQ_TK_PARAM,      /* other parameters: e_score_correction_bias, A_log, dt_bias, conv1d */
    LWQ_TK_BUFFER,     /* saved non-parameters (rotary_emb.inv_freq); always optional */
    LWQ_TK_EMBED,
    LWQ_TK_LM_HEAD,
} lwq_tensor_kind;

typedef struct lwq_arch_tensor {
    char name[LWQ_ARCH_NAME_MAX]; /* full tensor name */
    lwq_tensor_kind kind;
    int ndim;
    int64_t shape[4];
    int linear;                   /* index into lwq_arch_layer.linears, or -1 */
    int optional;                 /* may be absent without error */
} lwq_arch_tensor;

typedef struct lwq_arch_layer {
    int layer;                    /* decoder layer index, -1 for the tail plan */
    lwq_mixer_kind mixer;         /* what the layer's token mixer is (layout/arch/family.h) */
    int is_moe, is_mla, is_linear_attn; /* is_linear_attn: a mixer other than softmax attention */
    int ntensors;
    lwq_arch_tensor *tensors;     /* in plan order: attention, norms, mlp */
    int nlinears;
    lwq_arch_linear *linears;
    int ngroups;                  /* group ids run 0..ngroups-1 */
    const lwq_family *family;     /* the config's row (layout/arch/arch_qnames.h: in-memory names) */
} lwq_arch_layer;

/* Plan of decoder layer `layer` (0 <= layer < num_hidden_layers). */
int lwq_arch_layer_plan(const lwq_model_config *c, int layer, lwq_arch_layer *out, lwq_error *e);
/* Plan of the tensors outside the decoder layers. */
int lwq_arch_tail_plan(const lwq_model_config *c, lwq_arch_layer *out, lwq_error *e);
void lwq_arch_layer_free(lwq_arch_layer *l);
/* Linear by module name, or NULL. */
const lwq_arch_linear *lwq_arch_find_linear(const lwq_arch_layer *l, const char *module);
/* Tensor by full name, or NULL. */
const lwq_arch_tensor *lwq_arch_find_tensor(const lwq_arch_layer *l, const char *name);
/* Whether linear m of layer l is a q/kv projection of multi-head latent attention (q_proj,
 * q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj; not o_proj): recipes may select on it. */
int lwq_arch_is_mla_projection(const lwq_arch_layer *l, const lwq_arch_linear *m);

/* ---- checking a checkpoint against the plans ------------------------------------------------- */

typedef enum lwq_arch_issue_kind {
    LWQ_ISSUE_MISSING = 0,   /* a required tensor is absent */
    LWQ_ISSUE_BAD_SHAPE,     /* present with another shape */
    LWQ_ISSUE_UNEXPECTED,    /* present but not in the plan: passes through unquantized */
    LWQ_ISSUE_EXTRA_LAYER,   /* a whole decoder layer >= num_hidden_layers (MTP): passes through */
} lwq_arch_issue_kind;

typedef struct lwq_arch_issue {
    lwq_arch_issue_kind kind;
    int layer;                    /* -1 for the tail */
    char name[LWQ_ARCH_NAME_MAX];
    char detail[96];              /* "expected [64, 32], found [32, 64]" */
} lwq_arch_issue;

typedef struct lwq_arch_report {
    int n, cap;
    lwq_arch_issue *v;
    int count[4];                 /* per lwq_arch_issue_kind */
    /* A quantized checkpoint (lwq's output, a Model Optimizer HF export): linears stored
     * quantized, each with its scales checked (below), and the KV cache's scalars. */
    int quantized_nvfp4, quantized_fp8;
    int kv_scales;                /* k_scale / v_scale F32 scalars */
    int passthrough;              /* tensors of the wrapper's own modules (cfg.passthrough: a
                                     vision tower), copied unquantized; not "unexpected" */
    char first_quantized[LWQ_ARCH_NAME_MAX]; /* the first such linear's weight, for messages */
} lwq_arch_report;

/* Check every decoder layer and the tail.  Returns the number of blocking issues (missing +
 * bad shape; 0 means the checkpoint can be processed) or a negative error code. */
int lwq_arch_check(const lwq_ckpt *c, lwq_arch_report *r, lwq_error *e);
void lwq_arch_report_free(lwq_arch_report *r);
const char *lwq_arch_issue_name(lwq_arch_issue_kind k);

#endif
